-- CTCLoss on CUDA (suite 'cuda'; spec/run.lua exits 77 before this file without a GPU):
-- against the CPU backend on the same dtype-rounded inputs, f32/f16/bf16/f64, every
-- reduction, forward, backward (a scalar or per-sequence upstream gradient) and fused;
-- targets with repeated labels, a blank other than 0, sequences without labels or frames and
-- without an alignment (with and without zero_infinity); extended targets longer than a
-- block (2S + 1 > 256 positions) and hundreds of frames; padded and concatenated i32/i64
-- targets on the device, lengths as device tensors and as lists; a batch-first (transposed)
-- input gives the bits of the contiguous one; bitwise repeatable; bad labels refused with
-- nothing written.
-- The recursions run in fp32 on CUDA (f64 for f64) against f64 on the CPU: the absolute error
-- of α and β grows with the frames, so the tolerances below grow with T.
-- PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run of its logic.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()

local DTYPES = { "f32", "f16", "bf16", "f64" }
local REDUCTIONS = { "none", "mean", "sum" }

-- log_softmax(randn) as a T×N×C f64 CPU tensor.
local function log_probs(T, N, C, seed)
  local z = ploss.randn({ T, N, C }, { dtype = "f64", seed = seed }):totable()
  for t = 1, T do
    for n = 1, N do
      local row, m, s = z[t][n], -math.huge, 0
      for _, v in ipairs(row) do m = math.max(m, v) end
      for _, v in ipairs(row) do s = s + math.exp(v - m) end
      for c = 1, C do row[c] = row[c] - m - math.log(s) end
    end
  end
  return ploss.tensor(z, { dtype = "f64" })
end

-- Targets of N sequences (padded rows of S, lengths, input lengths): label runs with repeats,
-- never the blank; sequence 1 has no labels, sequence 2 (when N > 3) no frames, and the last
-- (when N > 4) fewer frames than its labels need.
local function targets(T, N, C, S, blank, seed)
  local rows, tl, il = {}, {}, {}
  local r = seed
  local function rand(k) r = (r * 1103515245 + 12345) % 2147483648; return r % k end
  for n = 1, N do
    local L = n == 1 and 0 or math.min(S, 1 + rand(S))
    local row, prev = {}, nil
    for i = 1, S do
      local c
      if i <= L and prev and rand(4) == 0 then c = prev else
        repeat c = rand(C) until c ~= blank
      end
      row[i] = i <= L and c or 0
      prev = c
    end
    -- the frames an alignment needs: L plus the repeated neighbours
    local need = L
    for i = 2, L do if row[i] == row[i - 1] then need = need + 1 end end
    rows[n], tl[n] = row, L
    il[n] = math.min(T, need + rand(T - math.min(T, need) + 1))
    if N > 3 and n == 2 then il[n] = 0 end
    if N > 4 and n == N and L > 0 then il[n] = need - 1 end
  end
  return rows, tl, il
end

local CASES = {
  { T = 6, N = 3, C = 5, S = 3, blank = 0 },
  { T = 40, N = 7, C = 12, S = 15, blank = 11 },
  { T = 300, N = 5, C = 40, S = 140, blank = 3 }, -- 281 positions: more than a block's threads
}

-- The relative tolerances of a CUDA result against the CPU's f64 for T frames.
local function tol(dtype, T)
  if dtype == "f64" then return 1e-10, 1e-10 end
  local grad = ({ f32 = 0, f16 = 2e-3, bf16 = 1.6e-2 })[dtype]
  return 2e-6 * T, math.max(grad, 4e-6 * T)
end

describe("CTCLoss on " .. DEV, function()
  for ci, case in ipairs(CASES) do
    for _, dtype in ipairs(DTYPES) do
      it(string.format("T=%d N=%d C=%d S=%d %s: every pass and reduction against the CPU", case.T, case.N, case.C,
        case.S, dtype), function()
        local x = log_probs(case.T, case.N, case.C, 100 * ci):type(dtype)
        local rows, tl, il = targets(case.T, case.N, case.C, case.S, case.blank, 7 * ci)
        local y = ploss.tensor(rows, { dtype = "i64" })
        local xd, yd = x:to(DEV), y:to(DEV)
        local ild, tld = ploss.tensor(il, { dtype = "i64", device = DEV }), ploss.tensor(tl, { dtype = "i32", device = DEV })
        local lt, gt = tol(dtype, case.T)
        for _, zi in ipairs { false, true } do
          for _, red in ipairs(REDUCTIONS) do
            local o = { reduction = red, blank = case.blank, zero_infinity = zi }
            local what = string.format("%s %s zero_infinity=%s", dtype, red, tostring(zi))
            local l_ref, g_ref = F.ctc_loss_fused(x, y, il, tl, H.with(o, { scale = 0.75 }))
            local l, g = F.ctc_loss_fused(xd, yd, ild, tld, H.with(o, { scale = 0.75 }))
            H.assert_close_scaled(type(l) == "number" and l or l:to("cpu"), l_ref, lt, 0, what .. " fused loss")
            H.assert_close_scaled(g:to("cpu"), g_ref, gt, 2 ^ -24, what .. " fused gradient")
            -- forward alone (two frames of α) and backward give the fused pass's bits
            local lf = F.ctc_loss(xd, yd, il, tl, o)
            H.assert_equal(type(lf) == "number" and lf or lf:to("cpu"), type(l) == "number" and l or l:to("cpu"),
              { what = what .. " forward" })
            local up = red == "none" and ploss.full({ case.N }, 0.75, { dtype = dtype == "f64" and "f64" or "f32",
              device = DEV }) or 0.75
            H.assert_equal(F.ctc_loss_backward(xd, yd, ild, tld, up, o):to("cpu"), g:to("cpu"),
              { what = what .. " backward" })
          end
        end
      end)
    end
  end

  it("targets of more positions than the recursion keeps in registers (2S + 1 > 1024) and in shared memory", function()
    -- f32: 1201 and 601 positions (the positions past 4 per thread loaded when used), both
    -- directions; f64: 14601 positions, whose two frames (233,616 bytes) exceed a block's
    -- shared memory: the recursion reads its previous frame from the workspace
    for _, case in ipairs { { dtype = "f32", T = 1300, C = 30, L = { 600, 300 } },
                            { dtype = "f64", T = 7400, C = 5, L = { 7300 } } } do
      local N = #case.L
      local x = log_probs(case.T, N, case.C, 41):type(case.dtype)
      local rows, il = {}, {}
      for n = 1, N do
        rows[n] = {}
        for i = 1, case.L[1] do rows[n][i] = i <= case.L[n] and 1 + (i * 7 + n) % (case.C - 1) or 0 end
        il[n] = case.T - n + 1
      end
      local y = ploss.tensor(rows, { dtype = "i64" })
      local o = { reduction = "sum" }
      local l_ref, g_ref = F.ctc_loss_fused(x, y, il, case.L, o)
      local l, g = F.ctc_loss_fused(x:to(DEV), y:to(DEV), il, case.L, o)
      local lt, gt = tol(case.dtype, case.T)
      H.assert_close_scaled(l, l_ref, lt, 0, case.dtype .. " loss")
      H.assert_close_scaled(g:to("cpu"), g_ref, gt, 2 ^ -24, case.dtype .. " gradient")
      H.assert_equal(F.ctc_loss(x:to(DEV), y:to(DEV), il, case.L, o), l)
    end
  end)

  it("fp32 keeps its accuracy over thousands of frames (each frame stored relative to an offset)", function()
    -- α falls by about log C per frame (here to about −8000): stored as it is in fp32, its
    -- spacing (2^-10 past 4096) gave gradient errors of 1e-3 to 1e-2 of the largest entry
    -- (as aten's f32 CTC has: bench/RESULTS.md); stored relative to a per-frame offset kept
    -- in double, what is left is the fast log-sum-exp's own error, about 2^-22 a frame
    -- (7e-4 measured here on an H100)
    local T, C, S = 2000, 50, 100
    local x = log_probs(T, 2, C, 61)
    local rows, tl = {}, { S, 40 }
    for n = 1, 2 do
      rows[n] = {}
      for i = 1, S do rows[n][i] = i <= tl[n] and 1 + (i * 13 + n) % (C - 1) or 0 end
    end
    local y = ploss.tensor(rows, { dtype = "i64" })
    local il = { T, T - 7 }
    local o = { reduction = "sum" }
    local l_ref, g_ref = F.ctc_loss_fused(x, y, il, tl, o)
    for _, dt in ipairs { "f32", "f64" } do
      local xd = x:type(dt)
      local lr, gr = l_ref, g_ref
      if dt == "f32" then lr, gr = F.ctc_loss_fused(xd, y, il, tl, o) end -- the CPU on the f32-rounded input
      local l, g = F.ctc_loss_fused(xd:to(DEV), y:to(DEV), il, tl, o)
      H.assert_close_scaled(l, lr, dt == "f32" and 1e-6 or 1e-12, 0, dt .. " loss over 2000 frames")
      H.assert_close_scaled(g:to("cpu"), gr, dt == "f32" and 2e-3 or 1e-10, 2 ^ -24, dt .. " gradient over 2000 frames")
    end
  end)

  it("a NaN whose log-sum-exp has only −∞ beside it gives NaN, as on the CPU", function()
    for _, dt in ipairs(DTYPES) do
      local xm = ploss.full({ 3, 1, 2 }, math.log(1 / 2), { dtype = dt })
      xm[1][1][1] = -math.huge
      xm[2][1][2] = 0 / 0
      for _, zi in ipairs { false, true } do
        local o = { reduction = "sum", zero_infinity = zi }
        local l = F.ctc_loss_fused(xm:to(DEV), ploss.tensor({ { 1 } }, { dtype = "i64", device = DEV }), { 3 }, { 1 }, o)
        assert.is_true(l ~= l, dt .. " zero_infinity " .. tostring(zi) .. ": " .. tostring(l))
      end
    end
  end)

  it("a per-sequence upstream gradient; a concatenated i32 target; a batch-first input; bitwise repeatable", function()
    local case = CASES[2]
    local x = log_probs(case.T, case.N, case.C, 5):type("f32")
    local rows, tl, il = targets(case.T, case.N, case.C, case.S, case.blank, 3)
    local o = { reduction = "none", blank = case.blank, zero_infinity = true }
    local xd, yd = x:to(DEV), ploss.tensor(rows, { dtype = "i64", device = DEV })
    local up = ploss.randn({ case.N }, { dtype = "f32", seed = 9 })
    local g_ref = F.ctc_loss_backward(x, ploss.tensor(rows, { dtype = "i64" }), il, tl, up, o)
    local g = F.ctc_loss_backward(xd, yd, il, tl, up:to(DEV), o)
    H.assert_close_scaled(g:to("cpu"), g_ref, 4e-6 * case.T, 0, "per-sequence upstream gradient")
    -- the concatenated labels (each sequence's first target_lengths[n]) as i32 on the device
    local cat = {}
    for n, row in ipairs(rows) do for i = 1, tl[n] do cat[#cat + 1] = row[i] end end
    local l1, g1 = F.ctc_loss_fused(xd, yd, il, tl, o)
    local l2, g2 = F.ctc_loss_fused(xd, ploss.tensor(cat, { dtype = "i32", device = DEV }), il, tl, o)
    H.assert_equal(l2:to("cpu"), l1:to("cpu"))
    H.assert_equal(g2:to("cpu"), g1:to("cpu"))
    -- N×T×C storage seen as T×N×C
    local bf = ploss.empty({ case.N, case.T, case.C }, { dtype = "f32", device = DEV })
    bf:copy(xd:transpose(1, 2))
    local l3, g3 = F.ctc_loss_fused(bf:transpose(1, 2), yd, il, tl, o)
    H.assert_equal(l3:to("cpu"), l1:to("cpu"))
    H.assert_equal(g3:to("cpu"), g1:to("cpu"))
    -- logits = true (the log_softmax taken inside) against the CPU's
    local z = ploss.randn({ case.T, case.N, case.C }, { dtype = "f32", seed = 17 })
    local ol = H.with(o, { logits = true })
    local lz_ref, gz_ref = F.ctc_loss_fused(z, ploss.tensor(rows, { dtype = "i64" }), il, tl, ol)
    local lz, gz = F.ctc_loss_fused(z:to(DEV), yd, il, tl, ol)
    H.assert_close_scaled(lz:to("cpu"), lz_ref, 2e-6 * case.T, 0, "logits loss")
    H.assert_close_scaled(gz:to("cpu"), gz_ref, 4e-6 * case.T, 0, "logits gradient")
    -- logits with more classes than a warp's lanes and rows not a multiple of a block's
    -- warps (300 × 5): fused, and forward alone (two frames of α), f16 and f32
    local big = CASES[3]
    local brows, btl, bil = targets(big.T, big.N, big.C, big.S, big.blank, 21)
    for _, dt in ipairs { "f32", "f16" } do
      local zb = ploss.randn({ big.T, big.N, big.C }, { dtype = dt, seed = 23 })
      local yb = ploss.tensor(brows, { dtype = "i64" })
      local ob = { reduction = "sum", blank = big.blank, logits = true }
      local lb_ref, gb_ref = F.ctc_loss_fused(zb, yb, bil, btl, ob)
      local lb, gb = F.ctc_loss_fused(zb:to(DEV), yb:to(DEV), bil, btl, ob)
      H.assert_close_scaled(lb, lb_ref, 2e-6 * big.T, 0, dt .. " logits loss (300 frames)")
      H.assert_close_scaled(gb:to("cpu"), gb_ref, math.max(4e-6 * big.T, dt == "f16" and 2e-3 or 0), 2 ^ -24,
        dt .. " logits gradient (300 frames)")
      H.assert_equal(F.ctc_loss(zb:to(DEV), yb:to(DEV), bil, btl, ob), lb)
    end
    -- the same call again: the same bits
    local l4, g4 = F.ctc_loss_fused(xd, yd, il, tl, o)
    H.assert_equal(l4:to("cpu"), l1:to("cpu"))
    H.assert_equal(g4:to("cpu"), g1:to("cpu"))
  end)

  it("one T×C sequence; an empty batch; bad labels refused with nothing written", function()
    local x = log_probs(8, 1, 4, 13):select(2, 1):contiguous()
    local l_ref, g_ref = F.ctc_loss_fused(x, ploss.tensor({ 1, 2, 2 }, { dtype = "i64" }), 8, 3, { reduction = "none" })
    local l, g = F.ctc_loss_fused(x:to(DEV), ploss.tensor({ 1, 2, 2 }, { dtype = "i64", device = DEV }), 8, 3,
      { reduction = "none" })
    assert.are.equal(0, l:dim())
    H.assert_close(l:to("cpu"), l_ref, { rtol = 1e-5 })
    H.assert_close_scaled(g:to("cpu"), g_ref, 1e-5, 0, "T×C gradient")
    -- a masked class (−∞ on every frame) gets a zero gradient, as on the CPU
    local xm = x:clone()
    xm:select(2, 4):fill(-math.huge)
    local lm_ref, gm_ref = F.ctc_loss_fused(xm, ploss.tensor({ 1, 2, 2 }, { dtype = "i64" }), 8, 3)
    local lm, gm = F.ctc_loss_fused(xm:to(DEV), ploss.tensor({ 1, 2, 2 }, { dtype = "i64", device = DEV }), 8, 3)
    H.assert_close(lm, lm_ref, { rtol = 1e-5 })
    H.assert_close_scaled(gm:to("cpu"), gm_ref, 1e-5, 0, "masked class gradient")
    H.assert_equal(gm:select(2, 4):to("cpu"), ploss.zeros({ 8 }, { dtype = "f64" }))
    local e = ploss.empty({ 5, 0, 4 }, { dtype = "f32", device = DEV })
    local le = F.ctc_loss(e, ploss.empty({ 0 }, { dtype = "i64", device = DEV }), {}, {})
    assert.is_true(le ~= le)
    assert.are.equal(0, F.ctc_loss(e, ploss.empty({ 0 }, { dtype = "i64", device = DEV }), {}, {}, { reduction = "sum" }))
    local xd = log_probs(4, 2, 5, 1):to(DEV)
    local out, grad = ploss.empty({ 2 }, { dtype = "f64", device = DEV }), ploss.empty({ 4, 2, 5 }, { dtype = "f64", device = DEV })
    H.expect_error(function()
      F.ctc_loss_fused(xd, ploss.tensor({ { 1, 2 }, { 3, 7 } }, { dtype = "i64", device = DEV }), { 4, 4 }, { 2, 2 },
        { reduction = "none", out = out, grad_log_probs = grad })
    end, { "target: label 7 of sequence 1 (0-based, position 1) is outside [0, 5)", "PLOSS_ERR_INVALID_LABEL" }, out, grad)
    H.expect_error(function()
      F.ctc_loss_fused(xd, ploss.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "i64", device = DEV }),
        ploss.tensor({ 4, 5 }, { dtype = "i64", device = DEV }), { 2, 2 },
        { reduction = "none", out = out, grad_log_probs = grad })
    end, "input_lengths: sequence 1 (0-based) has 5 frames, outside [0, 4]", out, grad)
  end)
end)
