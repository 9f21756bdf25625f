-- CTCLoss on the CPU: a hand-derived case; PyTorch's F.ctc_loss on fixtures
-- (tools/ctc_fixtures.py); every alignment enumerated (the loss and the
-- posterior of every frame and class, exact in f64) for targets with and without repeated
-- labels, several blanks and input lengths; finite differences through a log_softmax; the
-- reductions, the upstream gradient and the fused scale; padded and concatenated targets,
-- i32, lengths as tensors and lists, a transposed (batch-first) input and one T×C sequence;
-- the edge cases (empty targets, no frames, no alignment with and without zero_infinity, an
-- empty batch); 16-bit inputs against f64; bad input refused with nothing written.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

-- log_softmax over the last dim of a T×N×C Lua table of numbers.
local function log_softmax(z)
  local out = {}
  for t, frame in ipairs(z) do
    out[t] = {}
    for n, row in ipairs(frame) do
      local m = -math.huge
      for _, v in ipairs(row) do m = math.max(m, v) end
      local s = 0
      for _, v in ipairs(row) do s = s + math.exp(v - m) end
      out[t][n] = {}
      for c, v in ipairs(row) do out[t][n][c] = v - m - math.log(s) end
    end
  end
  return out
end

local function random_logits(T, N, C, seed)
  return ploss.randn({ T, N, C }, { dtype = "f64", seed = seed }):totable()
end

-- Every path of Tn frames over C classes that collapses (repeats merged, blanks removed) to
-- `target`: −log of their total probability and the gradient exp(lp) − posterior of each
-- (frame, class), PyTorch's convention; frames from Tn on get 0.
local function brute_force(lp, n, T, Tn, C, target, blank)
  local total, occ = 0, {}
  for t = 1, T do
    occ[t] = {}
    for c = 1, C do occ[t][c] = 0 end
  end
  local path = {}
  local function collapses()
    local out, prev = {}, nil
    for t = 1, Tn do
      local c = path[t]
      if c ~= prev and c ~= blank then out[#out + 1] = c end
      prev = c
    end
    if #out ~= #target then return false end
    for i = 1, #out do if out[i] ~= target[i] then return false end end
    return true
  end
  local function walk(t)
    if t > Tn then
      if collapses() then
        local s = 0
        for u = 1, Tn do s = s + lp[u][n][path[u] + 1] end
        local pr = math.exp(s)
        total = total + pr
        for u = 1, Tn do occ[u][path[u] + 1] = occ[u][path[u] + 1] + pr end
      end
      return
    end
    for c = 0, C - 1 do
      path[t] = c
      walk(t + 1)
    end
  end
  walk(1)
  local grad = {}
  for t = 1, T do
    grad[t] = {}
    for c = 1, C do grad[t][c] = t <= Tn and math.exp(lp[t][n][c]) - occ[t][c] / total or 0 end
  end
  return -math.log(total), grad
end

local function i64(v) return ploss.tensor(v, { dtype = "i64" }) end

describe("CTCLoss", function()
  it("a hand-derived case: T = 3 uniform frames over 3 classes, target (1)", function()
    -- the 6 of the 27 paths that collapse to (1): 100 110 111 010 011 001 (0 the blank)
    local x = ploss.full({ 3, 1, 3 }, math.log(1 / 3), { dtype = "f64" })
    local loss, g = ploss.CTCLoss { reduction = "sum" }(x, i64 { { 1 } }, { 3 }, { 1 })
    H.assert_close(loss, -math.log(6 / 27), { rtol = 1e-14 })
    -- 1/3 − the share of the 6 paths through (t, c)
    H.assert_close(g, { { { 1 / 3 - 3 / 6, 1 / 3 - 3 / 6, 1 / 3 } }, { { 1 / 3 - 2 / 6, 1 / 3 - 4 / 6, 1 / 3 } },
      { { 1 / 3 - 3 / 6, 1 / 3 - 3 / 6, 1 / 3 } } }, { rtol = 1e-13, atol = 1e-15 })
  end)

  it("equals the sum over every alignment: loss and gradient, repeats, blanks, input lengths", function()
    local T, C = 6, 4
    local cases = {
      { target = { 1 }, blank = 0, Tn = 6 },
      { target = { 1, 2 }, blank = 0, Tn = 5 },
      { target = { 2, 2 }, blank = 0, Tn = 6 }, -- a repeat needs a blank between
      { target = { 1, 1, 2 }, blank = 0, Tn = 6 },
      { target = { 0, 2, 1 }, blank = 3, Tn = 6 }, -- the blank last
      { target = {}, blank = 1, Tn = 4 },
      { target = { 3, 3, 3 }, blank = 0, Tn = 5 }, -- exactly the least frames (3 + 2 repeats)
    }
    for k, case in ipairs(cases) do
      local lp = log_softmax(random_logits(T, 2, C, 40 + k))
      local x = ploss.tensor(lp, { dtype = "f64" })
      -- sequence 2 gets the case, sequence 1 the two lowest classes that are not the blank
      -- over every frame
      local first = {}
      for c = 0, C - 1 do if c ~= case.blank and #first < 2 then first[#first + 1] = c end end
      local padded = { { first[1], first[2], 0 }, { 0, 0, 0 } }
      for i, v in ipairs(case.target) do padded[2][i] = v end
      local ref1, g1 = brute_force(lp, 1, T, T, C, first, case.blank)
      local ref2, g2 = brute_force(lp, 2, T, case.Tn, C, case.target, case.blank)
      local crit = ploss.CTCLoss { reduction = "none", blank = case.blank }
      local loss, g = crit(x, i64(padded), { T, case.Tn }, { 2, #case.target })
      H.assert_close(loss, { ref1, ref2 }, { rtol = 1e-12, what = "case " .. k .. " loss" })
      local want = {}
      for t = 1, T do want[t] = { g1[t], g2[t] } end
      H.assert_close(g, want, { rtol = 1e-10, atol = 1e-12, what = "case " .. k .. " gradient" })
    end
  end)

  it("matches PyTorch's F.ctc_loss (fixtures in f64: every reduction, blanks, 1-D targets, no alignment)", function()
    local cases = H.fixtures("ctc_loss")
    assert.are.equal(7, #cases)
    for _, c in ipairs(cases) do
      local i = c.inputs
      local l, g = F.ctc_loss_fused(H.fixture_tensor(i.log_probs), H.fixture_tensor(i.target),
        H.fixture_tensor(i.input_lengths), H.fixture_tensor(i.target_lengths), c.options)
      H.assert_close(l, H.fixture_values(c.expected.output), { rtol = 1e-12, what = c.name .. " loss" })
      H.assert_close(g, H.fixture_tensor(c.expected.grad_input), { rtol = 1e-10, atol = 1e-14,
        what = c.name .. " gradient" })
    end
  end)

  it("many more classes than labels (the CPU's gradient rows that skip the others' occupancy)", function()
    local T, C = 3, 17 -- C >= 8·(L + 1) for L <= 1
    local lp = log_softmax(random_logits(T, 2, C, 77))
    local x = ploss.tensor(lp, { dtype = "f64" })
    local l, g = ploss.CTCLoss { reduction = "none", blank = 16 }(x, i64 { { 5 }, { 0 } }, { 3, 2 }, { 1, 0 })
    local ref1, g1 = brute_force(lp, 1, T, 3, C, { 5 }, 16)
    local ref2, g2 = brute_force(lp, 2, T, 2, C, {}, 16)
    H.assert_close(l, { ref1, ref2 }, { rtol = 1e-12 })
    local want = {}
    for t = 1, T do want[t] = { g1[t], g2[t] } end
    H.assert_close(g, want, { rtol = 1e-10, atol = 1e-14 })
  end)

  it("is the derivative with respect to the logits of a log_softmax (finite differences)", function()
    local T, N, C = 5, 2, 4
    local z = random_logits(T, N, C, 7)
    local y, il, tl = i64 { { 1, 3 }, { 2, 2 } }, { 5, 5 }, { 2, 2 }
    local function loss_of(zt)
      return F.ctc_loss(ploss.tensor(log_softmax(zt), { dtype = "f64" }), y, il, tl, { reduction = "mean" })
    end
    local _, g = F.ctc_loss_fused(ploss.tensor(log_softmax(z), { dtype = "f64" }), y, il, tl)
    local h = 1e-6
    local got, want = {}, {}
    for t = 1, T do
      for n = 1, N do
        for c = 1, C do
          local v = z[t][n][c]
          z[t][n][c] = v + h
          local up = loss_of(z)
          z[t][n][c] = v - h
          local down = loss_of(z)
          z[t][n][c] = v
          want[#want + 1] = (up - down) / (2 * h)
        end
      end
    end
    for _, v in ipairs(g:flat()) do got[#got + 1] = v end
    H.assert_close(got, want, { rtol = 1e-6, atol = 1e-8 })
    -- logits = true takes the log_softmax itself: the same loss and gradient from the logits
    local zt = ploss.tensor(z, { dtype = "f64" })
    local l1, g1 = F.ctc_loss_fused(ploss.tensor(log_softmax(z), { dtype = "f64" }), y, il, tl, { reduction = "none" })
    local l2, g2 = F.ctc_loss_fused(zt, y, il, tl, { reduction = "none", logits = true })
    H.assert_close(l2, l1, { rtol = 1e-13 })
    H.assert_close(g2, g1, { rtol = 1e-12, atol = 1e-15 })
    -- and a row of logits shifted by a constant (the same softmax) changes nothing
    local zs = zt:clone()
    zs:select(1, 2):select(1, 1):add_(ploss.full({ C }, 5, { dtype = "f64" }))
    H.assert_close(F.ctc_loss(zs, y, il, tl, { logits = true }), F.ctc_loss(zt, y, il, tl, { logits = true }),
      { rtol = 1e-14 })
  end)

  it("reduces as PyTorch: mean of ℓ_n / max(L, 1), sum; upstream gradients; the fused scale", function()
    local T, N, C = 6, 3, 5
    local x = ploss.tensor(log_softmax(random_logits(T, N, C, 11)), { dtype = "f64" })
    local y, il, tl = i64 { { 1, 2, 3 }, { 4, 0, 0 }, { 0, 0, 0 } }, { 6, 4, 3 }, { 3, 1, 0 }
    local none = F.ctc_loss(x, y, il, tl, { reduction = "none" }):totable()
    H.assert_close(F.ctc_loss(x, y, il, tl), (none[1] / 3 + none[2] / 1 + none[3] / 1) / 3, { rtol = 1e-14 })
    H.assert_close(F.ctc_loss(x, y, il, tl, { reduction = "sum" }), none[1] + none[2] + none[3], { rtol = 1e-14 })
    -- per-sequence upstream gradients: the 'none' gradient row by row; 'mean' as their weights
    local gn = F.ctc_loss_backward(x, y, il, tl, ploss.tensor({ 1, 1, 1 }, { dtype = "f64" }), { reduction = "none" })
    local gw = F.ctc_loss_backward(x, y, il, tl, ploss.tensor({ 2, -1, 0.5 }, { dtype = "f64" }), { reduction = "none" })
    local gm = F.ctc_loss_backward(x, y, il, tl, 3, {})
    local w_none, w_mean = { 2, -1, 0.5 }, { 3 / 9, 3 / 3, 3 / 3 }
    local a, b, c = gn:totable(), gw:totable(), gm:totable()
    for t = 1, T do
      for n = 1, N do
        for k = 1, C do
          H.assert_close(b[t][n][k], w_none[n] * a[t][n][k], { rtol = 1e-14, atol = 1e-300 })
          H.assert_close(c[t][n][k], w_mean[n] * a[t][n][k], { rtol = 1e-14, atol = 1e-300 })
        end
      end
    end
    -- fused = forward + backward; the scale multiplies the gradient only
    local l, g = F.ctc_loss_fused(x, y, il, tl, { reduction = "sum", scale = 2.5 })
    H.assert_close(l, none[1] + none[2] + none[3], { rtol = 1e-14 })
    H.assert_equal(g, F.ctc_loss_backward(x, y, il, tl, 2.5, { reduction = "sum" }))
    -- the criterion's forward / backward give the same as the functions
    local crit = ploss.CTCLoss {}
    H.assert_close(crit:forward(x, y, il, tl), F.ctc_loss(x, y, il, tl), { rtol = 0 })
    H.assert_equal(crit:backward(x, y, il, tl), F.ctc_loss_backward(x, y, il, tl, 1, {}))
  end)

  it("takes padded or concatenated targets, i32, length tensors, a batch-first input and one T×C sequence", function()
    local T, N, C = 7, 3, 6
    local lp = log_softmax(random_logits(T, N, C, 21))
    local x = ploss.tensor(lp, { dtype = "f64" })
    local il, tl = { 7, 6, 5 }, { 3, 2, 2 }
    local padded = i64 { { 1, 2, 2, 99 }, { 5, 5, -7, 0 }, { 3, 4, 0, 0 } } -- padding is never read
    local flat = i64 { 1, 2, 2, 5, 5, 3, 4 }
    local ref_l, ref_g = F.ctc_loss_fused(x, padded, il, tl, { reduction = "none" })
    local function same(what, l, g)
      H.assert_equal(l, ref_l, { what = what .. " loss" })
      H.assert_equal(g, ref_g, { what = what .. " gradient" })
    end
    same("concatenated", F.ctc_loss_fused(x, flat, il, tl, { reduction = "none" }))
    same("i32", F.ctc_loss_fused(x, padded:type("i32"), ploss.tensor(il, { dtype = "i32" }), i64(tl),
      { reduction = "none" }))
    -- N×T×C data seen as T×N×C (a transpose: batch-first storage)
    local bf = ploss.empty({ N, T, C }, { dtype = "f64" })
    bf:copy(x:transpose(1, 2))
    local l, g = F.ctc_loss_fused(bf:transpose(1, 2), padded, il, tl, { reduction = "none" })
    H.assert_equal(l, ref_l, { what = "transposed input loss" })
    H.assert_equal(g, ref_g, { what = "transposed input gradient" })
    -- one sequence: T×C, a 1-D target, integer lengths; 'none' gives a 0-d loss
    local x1 = x:select(2, 2):contiguous()
    local l1, g1 = F.ctc_loss_fused(x1, i64 { 5, 5 }, 6, 2, { reduction = "none" })
    assert.are.equal(0, l1:dim())
    H.assert_close(l1, ref_l:totable()[2], { rtol = 0 })
    H.assert_equal(g1, ref_g:select(2, 2))
  end)

  it("edge cases: empty targets, no frames, no alignment (inf, NaN gradient; zero_infinity), an empty batch", function()
    local T, C = 3, 3
    local lp = log_softmax(random_logits(T, 3, C, 5))
    local x = ploss.tensor(lp, { dtype = "f64" })
    -- an empty target: every frame blank; no frames with an empty target: 0
    local l = F.ctc_loss(x, i64 { { 1, 2 }, { 0, 0 }, { 0, 0 } }, { 3, 3, 0 }, { 2, 0, 0 }, { reduction = "none" })
    local v = l:totable()
    H.assert_close(v[2], -(lp[1][2][1] + lp[2][2][1] + lp[3][2][1]), { rtol = 1e-14 })
    assert.are.equal(0, v[3])
    -- a probability of 1 (one class, the blank; an empty target) is a loss of +0, not −0
    local one = F.ctc_loss(ploss.zeros({ 3, 2, 1 }, { dtype = "f64" }), ploss.empty({ 2, 0 }, { dtype = "i64" }), { 3, 3 },
      { 0, 0 }, { reduction = "none" }):totable()
    assert.are.equal(math.huge, 1 / one[1])
    assert.are.equal(math.huge, 1 / one[2])
    -- (1, 1) needs 3 frames; 2 given: +inf, a NaN gradient on its frames, zeros after them
    local y, il, tl = i64 { { 1, 2 }, { 1, 1 }, { 2, 0 } }, { 3, 2, 0 }, { 2, 2, 1 }
    local loss, g = F.ctc_loss_fused(x, y, il, tl, { reduction = "none" })
    v = loss:totable()
    assert.are.equal(math.huge, v[2])
    assert.are.equal(math.huge, v[3]) -- a label and no frame
    local gt = g:totable()
    for c = 1, C do
      assert.is_true(gt[1][2][c] ~= gt[1][2][c] and gt[2][2][c] ~= gt[2][2][c], "NaN on the frames")
      assert.are.equal(0, gt[3][2][c])
      assert.are.equal(0, gt[1][3][c])
    end
    -- zero_infinity: those losses and their gradients are 0; the feasible sequence unchanged
    local lz, gz = F.ctc_loss_fused(x, y, il, tl, { reduction = "none", zero_infinity = true })
    H.assert_equal(lz, { v[1], 0, 0 })
    local gzt = gz:totable()
    for t = 1, T do
      H.assert_equal(gzt[t][1], gt[t][1])
      H.assert_equal(gzt[t][2], { 0, 0, 0 })
      H.assert_equal(gzt[t][3], { 0, 0, 0 })
    end
    -- a masked class (log_probs −∞ on every frame): no alignment passes it, its gradient is 0
    -- (PyTorch's formula gives −∞ + ∞ there); lengths as int64 cdata
    local h = math.log(0.5)
    local m = ploss.tensor({ { { h, h, -math.huge } }, { { h, h, -math.huge } } }, { dtype = "f64" })
    local lm, gm = ploss.CTCLoss {}(m, i64 { { 1 } }, { 2LL }, { 1LL })
    H.assert_close(lm, -math.log(3 / 4), { rtol = 1e-15 }) -- 11, 01, 10 of the four paths over {0, 1}
    H.assert_close(gm, { { { 0.5 - 1 / 3, 0.5 - 2 / 3, 0 } }, { { 0.5 - 1 / 3, 0.5 - 2 / 3, 0 } } }, { rtol = 1e-14 })
    -- a NaN log-probability spreads to the loss even where no alignment passes (PyTorch's):
    -- (1, 2, 3) over 3 frames has class 3 at frame 2 only, not at frame 1 (0-based), where
    -- the NaN is; sequence 2 has none
    local xn = ploss.full({ 3, 2, 4 }, math.log(1 / 4), { dtype = "f64" })
    xn:select(1, 2):select(1, 1):narrow(1, 4, 1):fill(0 / 0)
    local ln = F.ctc_loss(xn, i64 { { 1, 2, 3 }, { 1, 0, 0 } }, { 3, 3 }, { 3, 1 }, { reduction = "none" })
    v = ln:totable()
    assert.is_true(v[1] ~= v[1])
    H.assert_close(v[2], -math.log(6 / 64), { rtol = 1e-14 }) -- the 6 paths over {0, 1} with a run of 1s
    -- ... also where every other term of the NaN's log-sum-exp is −∞: target (1) over 3
    -- frames with the blank masked (−∞) at frame 0 and class 1 NaN at frame 1: NaN, also
    -- with zero_infinity (the loss is not +∞), where taking the maximum of the terms by
    -- comparisons alone would drop the NaN and give +∞ (then 0)
    for _, dt in ipairs { "f64", "f32" } do
      local xm = ploss.full({ 3, 1, 2 }, math.log(1 / 2), { dtype = dt })
      xm[1][1][1] = -math.huge
      xm[2][1][2] = 0 / 0
      for _, zi in ipairs { false, true } do
        local lnan = F.ctc_loss(xm, i64 { { 1 } }, { 3 }, { 1 }, { reduction = "sum", zero_infinity = zi })
        assert.is_true(lnan ~= lnan, dt .. " zero_infinity " .. tostring(zi) .. ": " .. tostring(lnan))
      end
    end
    -- zero_infinity zeroes +∞ only: an empty target's blank at +∞ on its last frame gives
    -- ℓ = −∞, which stays (PyTorch's)
    local xp = ploss.full({ 2, 1, C }, math.log(1 / 3), { dtype = "f64" })
    xp:select(1, 2):select(1, 1):narrow(1, 1, 1):fill(math.huge)
    local lz0 = F.ctc_loss(xp, i64 { { 1 } }, { 2 }, { 0 }, { reduction = "none", zero_infinity = true })
    assert.are.equal(-math.huge, lz0:totable()[1])
    -- one T×C sequence: its target 1-D or [1, S], every reduction; lengths 0-d, [1] or a number
    local one = x:select(2, 1)
    local ref = F.ctc_loss(x, i64 { { 1, 2 }, { 1, 2 }, { 1, 2 } }, { 3, 3, 3 }, { 2, 2, 2 }, { reduction = "none" })
    ref = ref:totable()[1]
    for _, yy in ipairs { i64 { 1, 2 }, i64 { { 1, 2 } } } do
      H.assert_close(F.ctc_loss(one, yy, 3, 2, { reduction = "sum" }), ref, { rtol = 1e-15 })
      H.assert_close(F.ctc_loss(one, yy, i64 { 3 }, ploss.tensor(2, { dtype = "i32" })), ref / 2, { rtol = 1e-15 })
    end
    -- 'mean' of an empty batch is NaN (0/0), 'sum' 0
    local e = ploss.empty({ 4, 0, C }, { dtype = "f64" })
    local le, ge = F.ctc_loss_fused(e, ploss.empty({ 0 }, { dtype = "i64" }), {}, {})
    assert.is_true(le ~= le)
    assert.are.equal(0, ge:numel())
    assert.are.equal(0, F.ctc_loss(e, ploss.empty({ 0, 2 }, { dtype = "i64" }), {}, {}, { reduction = "sum" }))
  end)

  it("runs through its criterion's _spec (the benchmark's calls) with the lengths given", function()
    local x = ploss.tensor(log_softmax(random_logits(5, 2, 4, 9)), { dtype = "f64" })
    local y, il, tl = i64 { { 1, 2 }, { 3, 0 } }, i64 { 5, 4 }, i64 { 2, 1 }
    local s = ploss.CTCLoss._spec
    local copts, o = s.options({ reduction = "sum" })
    local loss, g = ploss.empty({}, { dtype = "f64" }), ploss.empty_like(x)
    assert.are.equal(0, tonumber(s.fused(o, x:context(), { x }, y, copts, loss, { g }, { il, tl })))
    local l_ref, g_ref = F.ctc_loss_fused(x, y, il, tl, { reduction = "sum" })
    H.assert_equal(loss, l_ref)
    H.assert_equal(g, g_ref)
  end)

  it("f32, f16 and bf16 inputs agree with f64 (the CPU computes in f64 from the rounded inputs)", function()
    local T, N, C = 9, 4, 7
    local x = ploss.tensor(log_softmax(random_logits(T, N, C, 31)), { dtype = "f64" })
    local y, il, tl = i64 { { 1, 2, 2, 3 }, { 6, 5, 0, 0 }, { 4, 0, 0, 0 }, { 1, 1, 1, 0 } }, { 9, 8, 9, 7 }, { 4, 2, 1, 3 }
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local xr = x:type(dtype)
      local ref_l, ref_g = F.ctc_loss_fused(xr:double(), y, il, tl, { reduction = "none" })
      local l, g = F.ctc_loss_fused(xr, y, il, tl, { reduction = "none" })
      assert.are.equal("f32", l:dtype())
      assert.are.equal(dtype, g:dtype())
      H.assert_close(l, ref_l, { rtol = 1e-6, what = dtype .. " loss" })
      H.assert_close(g, ref_g, { rtol = H.tol[dtype].rtol, atol = H.tol[dtype].atol, what = dtype .. " gradient" })
    end
  end)

  it("refuses bad input, naming it, with nothing written", function()
    local T, N, C = 4, 2, 5
    local x = ploss.tensor(log_softmax(random_logits(T, N, C, 3)), { dtype = "f64" })
    local y, il, tl = i64 { { 1, 2 }, { 3, 0 } }, { 4, 4 }, { 2, 1 }
    local out, grad = ploss.empty({ N }, { dtype = "f64" }), ploss.empty({ T, N, C }, { dtype = "f64" })
    local function fused(yy, a, b, opts)
      opts = opts or {}
      opts.reduction, opts.out, opts.grad_log_probs = "none", out, grad
      local l, g = F.ctc_loss_fused(x, yy, a, b, opts) -- not a tail call: the error is located here
      return l, g
    end
    H.expect_error(function() return fused(i64 { { 1, 0 }, { 3, 0 } }, il, { 2, 1 }) end,
      { "target: label 0 of sequence 0 (0-based, position 1) is the blank", "PLOSS_ERR_INVALID_LABEL" }, out, grad)
    H.expect_error(function() return fused(i64 { { 1, 2 }, { 5, 0 } }, il, tl) end,
      { "target: label 5 of sequence 1 (0-based, position 0) is outside [0, 5)", "PLOSS_ERR_INVALID_LABEL" }, out, grad)
    H.expect_error(function() return fused(y, { 4, 5 }, tl) end,
      { "input_lengths: sequence 1 (0-based) has 5 frames, outside [0, 4]", "PLOSS_ERR_SHAPE" }, out, grad)
    H.expect_error(function() return fused(y, il, { 3, 1 }) end,
      "target_lengths: sequence 0 (0-based) has 3 labels, more than the 2 of a row", out, grad)
    H.expect_error(function() return fused(y, il, { 1, -1 }) end,
      "target_lengths: sequence 1 (0-based) has a length of -1 < 0", out, grad)
    H.expect_error(function() return fused(i64 { 1, 2, 3, 4 }, il, tl) end,
      "the 1-D (concatenated) target has 4 labels, the sum of target_lengths is 3", out, grad)
    H.expect_error(function() return fused(i64 { 1, 2 }, il, tl) end,
      "the 1-D (concatenated) target has 2 labels, fewer than the sum of target_lengths", out, grad)
    -- lengths whose sum wraps around int64 back to the 1-D target's length: refused at the
    -- first that passes it, never read past the target
    local x4 = ploss.tensor(log_softmax(random_logits(T, 4, C, 8)), { dtype = "f64" })
    local wrap = ploss.empty({ 4 }, { dtype = "i64" })
    local wp = require("ffi").cast("int64_t *", wrap:dl().data)
    wp[0], wp[1], wp[2], wp[3] = 3, 0x7fffffffffffffffLL, 0x7fffffffffffffffLL, 2
    H.expect_error(function() F.ctc_loss(x4, i64 { 1, 2, 3 }, { T, T, T, T }, wrap, { reduction = "none" }) end,
      "the 1-D (concatenated) target has 3 labels, fewer than the sum of target_lengths (more than 3 by sequence 1")
    -- lengths of stride 0 (an expanded tensor) read as their values
    local l_e = F.ctc_loss(x, y, ploss.tensor({ 4 }, { dtype = "i64" }):expand(2), i64 { 2, 1 }, { reduction = "none" })
    H.assert_equal(l_e, F.ctc_loss(x, y, { 4, 4 }, { 2, 1 }, { reduction = "none" }))
    H.expect_error(function() return fused(y, il, tl, { blank = 5 }) end,
      "opts.blank: 5 is not a class of log_probs' C = 5", out, grad)
    H.expect_error(function() return fused(y:type("f32"), il, tl) end,
      "target: expected label sequences of dtype i64 or i32, got f32", out, grad)
    H.expect_error(function() return fused(y, ploss.tensor({ 4, 4 }), tl) end,
      "input_lengths: expected lengths of dtype i64 or i32, got f32", out, grad)
    H.expect_error(function() return fused(y, { 4, 4, 4 }, tl) end,
      "input_lengths: expected [2] (one length per sequence", out, grad)
    H.expect_error(function() return fused(y, { 4, 3.5 }, tl) end,
      "input_lengths[2]: expected an integer (of magnitude below 2^53), got 3.5", out, grad)
    H.expect_error(function() return fused(y, { 4, [3] = 4 }, tl) end,
      "input_lengths: expected a list of integers without holes, got key 3", out, grad)
    H.expect_error(function() return fused(y, 4, tl) end,
      "input_lengths: a number is the length of one T×C sequence; log_probs of 2 sequences takes a list", out, grad)
    H.expect_error(function() return fused(y, { input_lengths = il, target_lengths = tl }) end,
      "(an options table? the lengths are arguments: crit(log_probs, target, input_lengths, target_lengths), then",
      out, grad)
    -- batch-first data (N×T×C) passed as it is: the target's rows are T's
    H.expect_error(function() F.ctc_loss(x:transpose(1, 2):contiguous(), y, il, tl) end,
      "a batch-first N×T×C tensor goes as its :transpose(1, 2)")
    H.expect_error(function() return fused(y, il, "2") end,
      "target_lengths: expected a tensor, a list of integers or an integer, got string", out, grad)
    H.expect_error(function() return fused(i64 { { 1, 2 }, { 3, 0 }, { 1, 1 } }, il, tl) end,
      "target: expected [2, S] (padded, a row per sequence)", out, grad)
    H.expect_error(function() F.ctc_loss(x:select(3, 1):select(2, 1), y, il, tl) end,
      "log_probs: expected T×N×C (3 dims: frames, sequences, classes) or T×C for one sequence", out, grad)
    H.expect_error(function() ploss.CTCLoss { inplace = true } end, "has no in-place gradient")
    -- PyTorch's positional CTCLoss(blank, reduction): named here (no Torch7 hint: Torch7 had no CTC)
    H.expect_error(function() ploss.CTCLoss(0, "mean") end,
      "got a string as argument 2 (positional arguments are not taken: name them, e.g. {blank = …}; the options: " ..
      "blank, logits, reduction, zero_infinity)")
    H.expect_error(function() ploss.CTCLoss { input_lengths = { 1 } } end,
      "CTCLoss: input_lengths is an argument of each call, not an option: crit(log_probs, target, input_lengths, " ..
      "target_lengths)")
    H.expect_error(function() ploss.CTCLoss {}.target_lengths = tl end,
      "'target_lengths' is none of the fields it reads at each call (blank, grad_log_probs, logits, reduction, " ..
      "zero_infinity): it is an argument of each call, crit(log_probs, target, input_lengths, target_lengths)")
    H.expect_error(function() ploss.CTCLoss { reduction = "none" }:backward(x, y, il, tl, { 1, 2 }) end,
      "gradOutput: expected a number or a tensor, got table (a list of numbers is not taken")
    H.expect_error(function() F.ctc_loss(x, y, il, tl, {}, true) end,
      "ctc_loss: takes 5 arguments (its tensors, then opts), got a boolean as argument 6")
    H.expect_error(function() ploss.CTCLoss {}:forward(x, y, il) end,
      "target_lengths: expected a tensor, a list of integers or an integer, got nil")
  end)
end)
