-- Pairs losses on CUDA (suite 'cuda'; spec/run.lua exits 77 before this file without a GPU):
-- the triplet margin losses (TripletMarginLoss, TripletMarginWithDistanceLoss's two
-- distances), batch-hard, InfoNCE.
-- CUDA against the CPU backend on the same dtype-rounded inputs, f32/f16/bf16 (fp32
-- accumulation on the GPU, f64 on the CPU; tolerances H.CUDA_TOL) and f64, every reduction,
-- forward, backward (with a scalar or per-row upstream gradient) and fused, the fused pass
-- against the split one; rows narrower than a warp, exactly a warp and much wider; more rows
-- than the grid has warps (the grid-stride loop); strided and transposed views; an empty
-- batch; identical embeddings; bitwise determinism; nothing written on a validation error.
-- PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run of its logic.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()

local DTYPES = { "f32", "f16", "bf16", "f64" }
local REDUCTIONS = { "none", "mean", "sum" }
local TOL = H.CUDA_TOL
local close = H.assert_close_scaled

local OPTION_SETS = {
  {},
  { margin = 0.3, p = 1 },
  { p = 3, eps = 1e-3 },
  { swap = true },
  { soft_margin = true },
  { soft_margin = true, swap = true, eps = 0 },
}

local label = H.options_label

local with = H.with

-- f64 CPU triplets; positives near their anchors in every other row (active and inactive hinges)
local function triplets(n, d, seed)
  local a = ploss.randn({ n, d }, { dtype = "f64", seed = seed })
  local p = ploss.randn({ n, d }, { dtype = "f64", seed = seed + 1, std = 0.7 })
  local q = ploss.randn({ n, d }, { dtype = "f64", seed = seed + 2, std = 1.2 })
  local av, pv = a:totable(), p:totable()
  for i = 1, n, 2 do
    for j = 1, d do pv[i][j] = av[i][j] + 0.3 * pv[i][j] end
  end
  if n > 0 then p = ploss.tensor(pv, { dtype = "f64" }) end
  return a, p, q
end

-- One comparison: fused, forward and backward on CPU and DEV, inputs rounded to dtype once;
-- `grad_floor` (optional) raises the gradients' absolute tolerance to at least that times
-- the dtype's relative one.
local function compare(a64, p64, n64, opts, dtype, what, layout, fname, grad_floor)
  fname = fname or "triplet_margin"
  local cpu = { a64:type(dtype), p64:type(dtype), n64:type(dtype) }
  local dev = { cpu[1]:to(DEV), cpu[2]:to(DEV), cpu[3]:to(DEV) }
  if layout then dev = layout(dev) end
  local T = TOL[dtype]
  what = what .. " " .. dtype .. " " .. label(opts)
  local rc = { F[fname .. "_fused"](cpu[1], cpu[2], cpu[3], opts) }
  local rg = { F[fname .. "_fused"](dev[1], dev[2], dev[3], opts) }
  local none = opts.reduction == "none"
  close(none and rg[1] or { rg[1] }, none and rc[1] or { rc[1] }, T.loss, 0, what .. " fused loss")
  for k = 2, 4 do
    assert.are.equal(dtype, rg[k]:dtype())
    assert.are.equal(dev[1]:device(), rg[k]:device())
    close(rg[k], rc[k], T.grad, math.max(T.floor, T.grad * (grad_floor or 0)), what .. " fused gradient " .. (k - 1))
  end
  -- forward and backward equal the fused pass on the device (same kernel arithmetic)
  local lf = F[fname](dev[1], dev[2], dev[3], opts)
  H.assert_close(none and lf or { lf }, none and rg[1] or { rg[1] }, { rtol = 0, atol = 0, what = what .. " forward" })
  local up = none and ploss.ones({ a64:size(1) }, { dtype = dtype == "f64" and "f64" or "f32", device = DEV }) or nil
  local gb = { F[fname .. "_backward"](dev[1], dev[2], dev[3], up, opts) }
  for k = 1, 3 do H.assert_close(gb[k], rg[k + 1], { rtol = 0, atol = 0, what = what .. " backward " .. k }) end
end

describe("TripletMarginWithDistanceLoss on " .. DEV .. " against the CPU", function()
  local SETS = { { distance = "cosine" }, { distance = "cosine", swap = true, margin = 0.3 }, { swap = true } }
  for _, shape in ipairs { { 37, 7 }, { 19, 1000 } } do
    it(string.format("N = %d, D = %d: cosine and pairwise, every dtype and reduction", shape[1], shape[2]), function()
      local a, p, n = triplets(shape[1], shape[2], shape[1] + shape[2] + 5)
      for _, o in ipairs(SETS) do
        for _, dtype in ipairs(DTYPES) do
          for _, r in ipairs(REDUCTIONS) do
            compare(a, p, n, with(o, { reduction = r }), dtype, string.format("%dx%d", shape[1], shape[2]), nil,
              "triplet_margin_with_distance")
          end
        end
      end
    end)
  end

  it("a zero anchor and one of norm 1e-9 (PyTorch's finite cosine gradients), compared on their own", function()
    -- their gradients are ~1e8: beside other rows they would set the comparison's scale.
    -- The second row's positive gradient is (â − cos·p̂)/‖p‖ with â = a/1e-8 = (0.1, 0, 0, 0)
    -- and cos = 0.1: zero, as a difference of terms of order 0.1, which fp32 leaves at an ulp
    -- of 0.1, so its absolute tolerance is the relative one on a scale of 1.
    local a = ploss.tensor({ { 0, 0, 0, 0 }, { 1e-9, 0, 0, 0 } }, { dtype = "f64" })
    local p = ploss.tensor({ { 1, 2, 0, 1 }, { 1, 0, 0, 0 } }, { dtype = "f64" })
    local n = ploss.tensor({ { 3, 0, -1, 0.5 }, { 0, 1, 0, 0.25 } }, { dtype = "f64" })
    for _, dtype in ipairs { "f32", "f64" } do
      for _, o in ipairs { { distance = "cosine" }, { distance = "cosine", swap = true, margin = 0.5 } } do
        compare(a, p, n, with(o, { reduction = "none" }), dtype, "tiny anchors", nil, "triplet_margin_with_distance", 1)
      end
    end
  end)

  it("N = 40000 (more rows than the grid has warps), a margin above every cosine gap: no kink", function()
    local a, p, n = triplets(40000, 9, 40019)
    for _, dtype in ipairs(DTYPES) do
      for _, r in ipairs(REDUCTIONS) do
        compare(a, p, n, { distance = "cosine", margin = 3, swap = true, reduction = r }, dtype, "40000x9", nil,
          "triplet_margin_with_distance")
      end
    end
  end)
end)

describe("TripletMarginLoss on " .. DEV .. " against the CPU", function()
  -- a few rows: the hinge's kink (fp32 against f64 sums) is too unlikely to be met
  for _, shape in ipairs { { 37, 7 }, { 64, 32 }, { 19, 1000 } } do
    it(string.format("N = %d, D = %d: every option set, dtype and reduction", shape[1], shape[2]), function()
      local a, p, n = triplets(shape[1], shape[2], shape[1] + shape[2])
      for _, o in ipairs(OPTION_SETS) do
        for _, dtype in ipairs(DTYPES) do
          for _, r in ipairs(REDUCTIONS) do
            compare(a, p, n, with(o, { reduction = r }), dtype, string.format("%dx%d", shape[1], shape[2]))
          end
        end
      end
    end)
  end

  it("N = 40000 (more rows than the grid has warps): smooth forms, and hinges on exact sums", function()
    -- the soft margin has no kink; the hinge and the swap on integer rows with eps = 0, whose
    -- sums are exact in fp32, so both devices take the same side of every kink
    local a, p, n = triplets(40000, 9, 40009)
    for _, o in ipairs { { soft_margin = true }, { soft_margin = true, p = 3 } } do
      for _, dtype in ipairs(DTYPES) do
        for _, r in ipairs(REDUCTIONS) do compare(a, p, n, with(o, { reduction = r }), dtype, "40000x9") end
      end
    end
    local ai = ploss.randint(-4, 5, { 40000, 9 }, { seed = 1 }):double()
    local pi = ploss.randint(-4, 5, { 40000, 9 }, { seed = 2 }):double()
    local ni = ploss.randint(-4, 5, { 40000, 9 }, { seed = 3 }):double()
    for _, o in ipairs { { eps = 0 }, { eps = 0, swap = true, margin = 0.5 } } do
      for _, dtype in ipairs(DTYPES) do
        for _, r in ipairs(REDUCTIONS) do compare(ai, pi, ni, with(o, { reduction = r }), dtype, "40000x9 integer") end
      end
    end
  end)

  it("takes the upstream gradient per row ('none') and a scalar one, and the fused scale", function()
    local a, p, n = triplets(50, 20, 3)
    for _, dtype in ipairs(DTYPES) do
      local ac, pc, nc = a:type(dtype), p:type(dtype), n:type(dtype)
      local ag, pg, ng = ac:to(DEV), pc:to(DEV), nc:to(DEV)
      local ld = dtype == "f64" and "f64" or "f32"
      local up = ploss.randn({ 50 }, { dtype = ld, seed = 8 })
      local T = TOL[dtype]
      local gc = { F.triplet_margin_backward(ac, pc, nc, up, { reduction = "none", swap = true }) }
      local gg = { F.triplet_margin_backward(ag, pg, ng, up:to(DEV), { reduction = "none", swap = true }) }
      for k = 1, 3 do close(gg[k], gc[k], T.grad, T.floor, dtype .. " per-row upstream " .. k) end
      gc = { F.triplet_margin_backward(ac, pc, nc, -1.75, { soft_margin = true }) }
      gg = { F.triplet_margin_backward(ag, pg, ng, -1.75, { soft_margin = true }) }
      for k = 1, 3 do close(gg[k], gc[k], T.grad, T.floor, dtype .. " scalar upstream " .. k) end
      local fc = { F.triplet_margin_fused(ac, pc, nc, { reduction = "sum", scale = 0.25 }) }
      local fg = { F.triplet_margin_fused(ag, pg, ng, { reduction = "sum", scale = 0.25 }) }
      close({ fg[1] }, { fc[1] }, T.loss, 0, dtype .. " scaled loss")
      for k = 2, 4 do close(fg[k], fc[k], T.grad, T.floor, dtype .. " scaled " .. k) end
      -- the criterion's calls
      local crit = ploss.TripletMarginLoss { swap = true }
      local l1 = crit:forward(ag, pg, ng)
      local b = { crit:backward(ag, pg, ng, 3) }
      local l2, f1, f2, f3 = crit(ag, pg, ng, 3)
      assert.are.equal(l1, l2)
      H.assert_equal(b[1], f1)
      H.assert_equal(b[2], f2)
      H.assert_equal(b[3], f3)
    end
  end)

  it("takes one triplet of D values (PyTorch's unbatched form), both distances", function()
    local a, p, n = triplets(1, 37, 4)
    a, p, n = a:view(37), p:view(37), n:view(37)
    for _, dtype in ipairs(DTYPES) do
      local T = TOL[dtype]
      for _, crit in ipairs { ploss.TripletMarginLoss { margin = 3, swap = true },
                              ploss.TripletMarginWithDistanceLoss { distance = "cosine", margin = 1.5 } } do
        local c = { crit(a:type(dtype), p:type(dtype), n:type(dtype)) }
        local g = { crit(a:type(dtype):to(DEV), p:type(dtype):to(DEV), n:type(dtype):to(DEV)) }
        close({ g[1] }, { c[1] }, T.loss, 0, dtype .. " unbatched loss")
        for k = 2, 4 do
          assert.are.same({ 37 }, g[k]:size())
          close(g[k], c[k], T.grad, T.floor, dtype .. " unbatched gradient " .. k)
        end
      end
    end
  end)

  it("reads strided and transposed views and writes strided gradients", function()
    local a, p, n = triplets(45, 33, 12)
    local layout = function(dev)
      local at = dev[1]:t():contiguous():t()
      local wide = ploss.zeros({ 45, 70 }, { dtype = dev[2]:dtype(), device = DEV }):narrow(2, 5, 33)
      wide:copy(dev[2])
      return { at, wide, dev[3] }
    end
    for _, dtype in ipairs(DTYPES) do
      compare(a, p, n, { swap = true }, dtype, "strided", layout)
      compare(a, p, n, { soft_margin = true, reduction = "none" }, dtype, "strided", layout)
    end
    local dev = { a:to(DEV), p:to(DEV), n:to(DEV) }
    local gt = ploss.empty({ 33, 45 }, { dtype = "f64", device = DEV }):t()
    local _, g1 = F.triplet_margin_fused(dev[1], dev[2], dev[3], {})
    F.triplet_margin_fused(dev[1], dev[2], dev[3], { grad_anchor = gt })
    H.assert_equal(gt, g1)
  end)

  it("handles an empty batch and identical embeddings (zero gradient, not NaN)", function()
    local e = ploss.empty({ 0, 5 }, { dtype = "f32", device = DEV })
    local loss, ga = F.triplet_margin_fused(e, e:clone(), e:clone())
    assert.is_true(loss ~= loss)
    assert.are.same({ 0, 5 }, ga:size())
    assert.are.equal(0, F.triplet_margin(e, e:clone(), e:clone(), { reduction = "sum" }))
    for _, dtype in ipairs(DTYPES) do
      local x = ploss.randn({ 70, 40 }, { dtype = dtype, device = DEV, seed = 4 })
      for _, o in ipairs { { eps = 0 }, { eps = 0, soft_margin = true }, { eps = 0, p = 1, swap = true } } do
        local l, g1, g2, g3 = F.triplet_margin_fused(x, x:clone(), x:clone(), o)
        H.assert_close({ l }, { o.soft_margin and math.log(2) or 1 }, { rtol = 1e-6, what = dtype .. label(o) })
        for _, g in ipairs { g1, g2, g3 } do
          H.assert_equal(g:double(), ploss.zeros({ 70, 40 }, { dtype = "f64" }), { what = dtype .. label(o) })
        end
      end
    end
  end)

  it("propagates NaN and ∞ as the CPU does, and splits a swap tie half and half", function()
    local nan, inf = 0 / 0, math.huge
    for _, dtype in ipairs(DTYPES) do
      local a64, p64, n64 = triplets(40, 33, 61)
      local A, P, Nn = a64:totable(), p64:totable(), n64:totable()
      A[3][5] = nan          -- a NaN anchor
      Nn[7][1] = inf         -- an infinite negative: ℓ = 0 (hinge) with its gradient
      P[11][2] = -inf        -- an infinite positive: ℓ = ∞ or NaN
      Nn[13][4] = nan        -- a NaN negative only
      P[15] = A[15]          -- anchor = positive: d(a, n) = d(p, n) exactly, a swap tie
      local o64 = { dtype = "f64" }
      a64, p64, n64 = ploss.tensor(A, o64), ploss.tensor(P, o64), ploss.tensor(Nn, o64)
      local cpu = { a64:type(dtype), p64:type(dtype), n64:type(dtype) }
      local dev = { cpu[1]:to(DEV), cpu[2]:to(DEV), cpu[3]:to(DEV) }
      local T = TOL[dtype]
      for _, o in ipairs { { margin = 5 }, { swap = true, margin = 5 }, { soft_margin = true, swap = true } } do
        for _, r in ipairs { "none", "sum" } do
          local opts = with(o, { reduction = r })
          local what = dtype .. " " .. label(opts)
          local rc = { F.triplet_margin_fused(cpu[1], cpu[2], cpu[3], opts) }
          local rg = { F.triplet_margin_fused(dev[1], dev[2], dev[3], opts) }
          if r == "none" then
            local l = rc[1]:totable()
            assert.is_true(l[3] ~= l[3] and l[13] ~= l[13], what)
            close(rg[1], rc[1], T.loss, T.floor, what .. " loss")
          else
            assert.is_true(rc[1] ~= rc[1] and rg[1] ~= rg[1], what)
          end
          for k = 2, 4 do
            local gc = rc[k]:totable()
            for j = 1, 33 do assert.is_true(gc[3][j] ~= gc[3][j], what .. " NaN row") end
            close(rg[k], rc[k], T.grad, T.floor, what .. " gradient " .. (k - 1))
          end
        end
      end
    end
  end)

  it("passes a NaN or ∞ upstream gradient only to rows whose hinge is active, as the CPU", function()
    local nan, inf = 0 / 0, math.huge
    local a, p, n = triplets(40, 20, 5)
    -- the rows of an inactive hinge exactly 0, NaN and ±∞ where the CPU has them, the other
    -- values within the dtype's gradient tolerance (relative to the largest finite one)
    local function same(got, ref, loss, tol, what)
      local g, r, big = got:cpu():double():totable(), ref:double():totable(), 0
      for _, row in ipairs(r) do
        for _, v in ipairs(row) do if v == v and math.abs(v) < inf then big = math.max(big, math.abs(v)) end end
      end
      for i, row in ipairs(r) do
        for j, v in ipairs(row) do
          local u, where = g[i][j], string.format("%s (%d, %d): got %s, expected %s", what, i, j, g[i][j], v)
          if v ~= v then assert.is_true(u ~= u, where)
          elseif loss[i] == 0 or math.abs(v) == inf then assert.is_true(u == v, where)
          else assert.is_true(math.abs(u - v) <= tol * big, where) end
        end
      end
    end
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      local ac, pc, nc = a:type(dtype), p:type(dtype), n:type(dtype)
      local ag, pg, ng = ac:to(DEV), pc:to(DEV), nc:to(DEV)
      local up = {}
      for i = 1, 40 do up[i] = i % 3 == 0 and nan or i % 3 == 1 and inf or 0.5 end
      up = ploss.tensor(up, { dtype = dtype == "f64" and "f64" or "f32" })
      for _, c in ipairs { { "triplet_margin", { margin = 0.5 } }, { "triplet_margin_with_distance",
        { distance = "cosine", margin = 0.5 } } } do
        local o = H.with(c[2], { reduction = "none" })
        local lc = F[c[1]](ac, pc, nc, o):flat()
        local inactive = 0
        for i = 1, 40 do if lc[i] == 0 then inactive = inactive + 1 end end
        assert.is_true(inactive > 0 and inactive < 40, c[1] .. " " .. dtype .. ": both kinds of rows")
        local gc = { F[c[1] .. "_backward"](ac, pc, nc, up, o) }
        local gg = { F[c[1] .. "_backward"](ag, pg, ng, up:to(DEV), o) }
        local tol = TOL[dtype].grad
        for k = 1, 3 do same(gg[k], gc[k], lc, tol, c[1] .. " " .. dtype .. " per row " .. k) end
        gc = { F[c[1] .. "_backward"](ac, pc, nc, nan, c[2]) }
        gg = { F[c[1] .. "_backward"](ag, pg, ng, nan, c[2]) }
        for k = 1, 3 do same(gg[k], gc[k], lc, tol, c[1] .. " " .. dtype .. " scalar " .. k) end
      end
    end
  end)

  it("is deterministic: bitwise the same loss and gradients on every run", function()
    local a, p, n = triplets(50000, 24, 31)
    for _, dtype in ipairs { "f32", "bf16" } do
      local ag, pg, ng = a:to(DEV, dtype), p:to(DEV, dtype), n:to(DEV, dtype)
      local r1 = { F.triplet_margin_fused(ag, pg, ng, { soft_margin = true }) }
      for _ = 1, 3 do
        local r2 = { F.triplet_margin_fused(ag, pg, ng, { soft_margin = true }) }
        assert.are.equal(r1[1], r2[1])
        for k = 2, 4 do H.assert_equal(r2[k], r1[k]) end
      end
    end
  end)

  it("refuses tensors on another device or of mismatched D, writing nothing", function()
    local a = ploss.randn({ 6, 4 }, { device = DEV, seed = 1 })
    local p = ploss.randn({ 6, 4 }, { device = DEV, seed = 2 })
    local n = ploss.randn({ 6, 4 }, { device = DEV, seed = 3 })
    local out = ploss.empty({}, { device = DEV })
    local g = { ploss.empty({ 6, 4 }, { device = DEV }), ploss.empty({ 6, 4 }, { device = DEV }),
                ploss.empty({ 6, 4 }, { device = DEV }) }
    local fo = { out = out, grad_anchor = g[1], grad_positive = g[2], grad_negative = g[3] }
    H.expect_error(function() F.triplet_margin_fused(a, p, ploss.randn({ 6, 5 }, { device = DEV }), fo) end,
      "negative: expected [6, 4]", out, g[1], g[2], g[3])
    H.expect_error(function() F.triplet_margin_fused(a, p, n, with(fo, { grad_negative = g[2] })) end,
      "PLOSS_ERR_ALIAS", out, g[1], g[2])
    if DEV ~= "cpu" then
      H.expect_error(function() F.triplet_margin_fused(a, p:to("cpu"), n, fo) end, "positive", out, g[1], g[2], g[3])
    end
  end)
end)

-- Integer-valued embeddings in [−4, 4] and labels of `classes` classes (the first
-- `singletons` labels unique): every Gram entry and squared norm is exact in fp32 and in the
-- narrow dtypes, so the GPU (fp32 Gram) and the CPU (f64) mine the same rows, ties included.
local function integer_batch(n, d, classes, seed, singletons)
  local x = ploss.randint(-4, 5, { n, d }, { seed = seed }):double()
  local y = ploss.randint(0, classes, { n }, { seed = seed + 1 })
  if singletons and singletons > 0 then
    y:narrow(1, 1, singletons):copy(ploss.tensor((function()
      local v = {}
      for k = 1, singletons do v[k] = 1000 + k end
      return v
    end)(), { dtype = "i64" }))
  end
  return x, y
end

local BH_OPTIONS = {
  {},
  { margin = 1, distance = "squared" },
  { distance = "cosine", margin = 0.1 },
  { soft_margin = true },
}

local function compare_bh(x64, y, opts, dtype, what, layout)
  local xc = x64:type(dtype)
  local xg, yg = xc:to(DEV), y:to(DEV)
  if layout then xg, yg = layout(xg, yg) end
  local T = TOL[dtype]
  what = what .. " " .. dtype .. " " .. label(opts)
  local lc, gc = F.batch_hard_triplet_fused(xc, y, opts)
  local lg, gg = F.batch_hard_triplet_fused(xg, yg, opts)
  local none = opts.reduction == "none"
  close(none and lg or { lg }, none and lc or { lc }, T.loss, 0, what .. " fused loss")
  assert.are.equal(dtype, gg:dtype())
  close(gg, gc, T.grad, T.floor, what .. " fused gradient")
  local lf = F.batch_hard_triplet(xg, yg, opts)
  H.assert_close(none and lf or { lf }, none and lg or { lg }, { rtol = 0, atol = 0, what = what .. " forward" })
  local up = none and ploss.ones({ x64:size(1) }, { dtype = dtype == "f64" and "f64" or "f32", device = DEV }) or nil
  H.assert_close(F.batch_hard_triplet_backward(xg, yg, up, opts), gg, { rtol = 0, atol = 0, what = what .. " backward" })
end

describe("BatchHardTripletLoss on " .. DEV .. " against the CPU", function()
  for _, shape in ipairs { { 37, 5, 4, 2 }, { 300, 64, 20, 3 }, { 2000, 8, 50, 0 } } do
    it(string.format("N = %d, D = %d: every distance, dtype and reduction", shape[1], shape[2]), function()
      local x, y = integer_batch(shape[1], shape[2], shape[3], shape[1], shape[4])
      for _, o in ipairs(BH_OPTIONS) do
        for _, dtype in ipairs(DTYPES) do
          for _, r in ipairs(REDUCTIONS) do
            compare_bh(x, y, with(o, { reduction = r }), dtype, string.format("%dx%d", shape[1], shape[2]))
          end
        end
      end
    end)
  end

  it("mines across several Gram blocks (N = 5000)", function()
    local x, y = integer_batch(5000, 4, 200, 9, 5)
    for _, dtype in ipairs { "f32", "f64", "bf16" } do
      compare_bh(x, y, {}, dtype, "5000x4")
      compare_bh(x, y, { soft_margin = true, distance = "cosine", reduction = "none" }, dtype, "5000x4")
    end
    -- D = 8: bf16 takes the fused mining on sm_90, in two blocks of anchor rows (integer
    -- squared distances: exact in fp32, ties included)
    local x8, y8 = integer_batch(5000, 8, 200, 10, 5)
    compare_bh(x8, y8, {}, "bf16", "5000x8")
    compare_bh(x8, y8, { soft_margin = true, distance = "squared", reduction = "none" }, "bf16", "5000x8")
  end)

  it("a row that 74 anchors reach, D = 600: the gradient's columns in several chunks", function()
    -- integer rows; row 1 lies far from every other row, so it is the hardest positive of
    -- each of the 74 other anchors of its class
    local x = integer_batch(150, 600, 2, 11)
    local X, Y = x:totable(), {}
    for k = 1, 600 do X[1][k] = X[1][k] + 20 end
    for i = 1, 150 do Y[i] = i <= 75 and 0 or 1 end
    x = ploss.tensor(X, { dtype = "f64" })
    local y = ploss.tensor(Y, { dtype = "i64" })
    for _, dtype in ipairs { "f32", "f64", "bf16" } do
      compare_bh(x, y, {}, dtype, "150x600")
      compare_bh(x, y, { margin = 1, distance = "squared", reduction = "none" }, dtype, "150x600")
    end
  end)

  it("rows that 256, 257, 512 and 599 anchors reach: more entries than the gradient reads at once", function()
    -- classes of 257, 258, 513 and 600 rows, each with a far outlier (its first row): the
    -- hardest positive of every other row of its class, and nobody's nearest negative
    local sizes, x = { 257, 258, 513, 600 }, integer_batch(1628, 16, 2, 12)
    local X, Y, i = x:totable(), {}, 0
    for c, size in ipairs(sizes) do
      for r = 1, size do
        i = i + 1
        Y[i] = c - 1
        if r == 1 then -- 40 along four dimensions of its own: far from every row, outliers too
          for k = 4 * c - 3, 4 * c do X[i][k] = X[i][k] + 40 end
        end
      end
    end
    x = ploss.tensor(X, { dtype = "f64" })
    local y = ploss.tensor(Y, { dtype = "i64" })
    for _, dtype in ipairs { "f32", "f64", "bf16" } do
      compare_bh(x, y, {}, dtype, "1628x16")
    end
    local xg, yg = x:to(DEV), y:to(DEV)
    local _, g1 = F.batch_hard_triplet_fused(xg, yg, {})
    local _, g2 = F.batch_hard_triplet_fused(xg, yg, {})
    H.assert_close(g2, g1, { rtol = 0, atol = 0, what = "1628x16 repeated" })
  end)

  -- bf16 with D a multiple of 8: the fused mining where the device has it; a NaN or ∞ row
  -- and labels beyond ±2^47 send it to the rows, ties go to the lowest index
  it("bf16, D = 16: NaN and ∞ rows, labels beyond 2^47, ties and lone rows as the CPU", function()
    local x64 = ploss.randn({ 70, 16 }, { dtype = "f64", seed = 12 })
    local Y = {}
    for i = 1, 70 do Y[i] = i % 6 end
    local y = ploss.tensor(Y, { dtype = "i64" })
    for _, bad in ipairs { 0 / 0, math.huge } do
      local X = x64:totable()
      X[7][2] = bad
      local xc = ploss.tensor(X, { dtype = "f64" }):type("bf16")
      for _, o in ipairs(BH_OPTIONS) do
        local what = "bf16 " .. tostring(bad) .. " " .. label(o)
        local lc = F.batch_hard_triplet(xc, y, with(o, { reduction = "none" }))
        local lg = F.batch_hard_triplet(xc:to(DEV), y:to(DEV), with(o, { reduction = "none" }))
        close(lg, lc, TOL.bf16.loss, TOL.bf16.floor, what .. " loss")
        local _, gc = F.batch_hard_triplet_fused(xc, y, o)
        local _, gg = F.batch_hard_triplet_fused(xc:to(DEV), y:to(DEV), o)
        close(gg, gc, TOL.bf16.grad, TOL.bf16.floor, what .. " gradient")
      end
    end
    -- labels 2^50 + k and 2^50 + 2^24 + k: equal in their low 24 bits, told apart only by
    -- their high part (beyond the fused mining's two floats: the rows decide)
    local big = {}
    for i = 1, 70 do big[i] = 0x4000000000000 + (i % 2) * 0x1000000 + i % 3 end
    local yb = ploss.tensor(big, { dtype = "i64" })
    for _, o in ipairs(BH_OPTIONS) do compare_bh(x64, yb, o, "bf16", "labels 2^50") end
    -- labels −5 and 5 + 2^24 (high parts −1 and 1): the fused keys' two floats
    local signed = {}
    for i = 1, 70 do signed[i] = i % 2 == 0 and -5 or 5 + 0x1000000 end
    compare_bh(x64, ploss.tensor(signed, { dtype = "i64" }), {}, "bf16", "signed labels")
    -- every row the same: each distance 0, the lowest index wins; the gradient's terms cancel
    -- (to fp32's rounding on the GPU)
    local same = ploss.ones({ 24, 16 }, { dtype = "bf16" })
    for _, o in ipairs(BH_OPTIONS) do
      local ls, gs = F.batch_hard_triplet_fused(same:to(DEV), y:narrow(1, 1, 24):to(DEV), o)
      local lc, gc = F.batch_hard_triplet_fused(same, y:narrow(1, 1, 24), o)
      H.assert_close({ ls }, { lc }, { rtol = 1e-6, what = "identical rows " .. label(o) })
      H.assert_close(gs, gc, { rtol = 1e-6, atol = 1e-6, what = "identical rows " .. label(o) })
    end
    -- one row; two rows of one label; every label distinct
    compare_bh(x64:narrow(1, 1, 1), y:narrow(1, 1, 1), {}, "bf16", "one row")
    compare_bh(x64:narrow(1, 1, 2), ploss.zeros({ 2 }, { dtype = "i64" }), {}, "bf16", "one label")
    local distinct = {}
    for i = 1, 70 do distinct[i] = i end
    compare_bh(x64, ploss.tensor(distinct, { dtype = "i64" }), {}, "bf16", "distinct labels")
  end)

  it("gaussian embeddings: the same loss and gradient within the fp32 Gram's rounding", function()
    local x = ploss.randn({ 200, 32 }, { dtype = "f64", seed = 4 })
    local y = ploss.randint(0, 10, { 200 }, { seed = 5 })
    for _, o in ipairs(BH_OPTIONS) do compare_bh(x, y, o, "f64", "gaussian") end
  end)

  it("per-anchor upstream gradients, a fused scale, i32 labels and strided embeddings", function()
    local x, y = integer_batch(90, 12, 6, 77, 2)
    for _, dtype in ipairs(DTYPES) do
      local xc = x:type(dtype)
      local xg = xc:to(DEV)
      local up = ploss.randn({ 90 }, { dtype = dtype == "f64" and "f64" or "f32", seed = 6 })
      local T = TOL[dtype]
      local gc = F.batch_hard_triplet_backward(xc, y, up, { reduction = "none", distance = "cosine" })
      local gg = F.batch_hard_triplet_backward(xg, y:to(DEV), up:to(DEV), { reduction = "none", distance = "cosine" })
      close(gg, gc, T.grad, T.floor, dtype .. " per-anchor upstream")
      local _, fc = F.batch_hard_triplet_fused(xc, y, { reduction = "sum", scale = -0.5 })
      local _, fg = F.batch_hard_triplet_fused(xg, y:to(DEV, "i32"), { reduction = "sum", scale = -0.5 })
      close(fg, fc, T.grad, T.floor, dtype .. " scale, i32 labels")
      compare_bh(x, y, { soft_margin = true }, dtype, "strided", function(xd, yd)
        local wide = ploss.zeros({ 90, 30 }, { dtype = xd:dtype(), device = DEV }):narrow(2, 3, 12)
        wide:copy(xd)
        return wide, yd
      end)
    end
  end)

  it("no active anchor: 0 and a zero gradient; an empty batch; identical rows", function()
    local x = ploss.randn({ 40, 6 }, { device = DEV, seed = 3 })
    local distinct = ploss.tensor((function()
      local v = {}
      for i = 1, 40 do v[i] = i end
      return v
    end)(), { dtype = "i64", device = DEV })
    for _, y in ipairs { distinct, ploss.zeros({ 40 }, { dtype = "i64", device = DEV }) } do
      for _, r in ipairs { "mean", "sum" } do
        local l, g = F.batch_hard_triplet_fused(x, y, { reduction = r })
        assert.are.equal(0, l)
        H.assert_equal(g:to("cpu"), ploss.zeros({ 40, 6 }))
      end
    end
    local e = ploss.empty({ 0, 6 }, { device = DEV })
    local l, g = F.batch_hard_triplet_fused(e, ploss.empty({ 0 }, { dtype = "i64", device = DEV }))
    assert.are.equal(0, l)
    assert.are.same({ 0, 6 }, g:size())
    local same = ploss.ones({ 8, 5 }, { device = DEV })
    local ys = ploss.tensor({ 0, 0, 0, 0, 1, 1, 1, 1 }, { dtype = "i64", device = DEV })
    for _, o in ipairs { {}, { distance = "cosine" }, { soft_margin = true } } do
      local ls, gs = F.batch_hard_triplet_fused(same, ys, o)
      local lc, gc = F.batch_hard_triplet_fused(same:to("cpu"), ys:to("cpu"), o)
      H.assert_close({ ls }, { lc }, { rtol = 1e-6, what = label(o) })
      H.assert_close(gs, gc, { rtol = 1e-6, atol = 1e-7, what = label(o) })
    end
  end)

  it("propagates a NaN row to every anchor (NaN wins the mining) and mines an ∞ row at ∞, as the CPU", function()
    for _, bad in ipairs { 0 / 0, math.huge, -math.huge } do
      for _, dtype in ipairs { "f32", "f64" } do
        local x64 = ploss.randn({ 60, 20 }, { dtype = "f64", seed = 8 })
        local X, Y = x64:totable(), {}
        for i = 1, 60 do Y[i] = i % 5 end
        X[10][3] = bad
        local xc = ploss.tensor(X, { dtype = "f64" }):type(dtype)
        local y = ploss.tensor(Y, { dtype = "i64" })
        local T = TOL[dtype]
        for _, o in ipairs(BH_OPTIONS) do
          local what = dtype .. " " .. tostring(bad) .. " " .. label(o)
          local lc = F.batch_hard_triplet(xc, y, with(o, { reduction = "none" }))
          local lg = F.batch_hard_triplet(xc:to(DEV), y:to(DEV), with(o, { reduction = "none" }))
          close(lg, lc, T.loss, T.floor, what .. " loss")
          local sc, gc = F.batch_hard_triplet_fused(xc, y, o)
          local sg, gg = F.batch_hard_triplet_fused(xc:to(DEV), y:to(DEV), o)
          assert.is_true(sc ~= sc and sg ~= sg, what) -- anchor 10's own loss is NaN at least
          close(gg, gc, T.grad, T.floor, what .. " gradient")
        end
      end
    end
  end)

  it("is deterministic: bitwise the same loss and gradient on every run", function()
    local x, y = integer_batch(3000, 40, 100, 5, 0)
    local xg = ploss.randn({ 3000, 40 }, { dtype = "f32", device = DEV, seed = 8 })
    for _, inputs in ipairs { { x:to(DEV, "bf16"), y:to(DEV) }, { xg, y:to(DEV) } } do
      local l1, g1 = F.batch_hard_triplet_fused(inputs[1], inputs[2], { soft_margin = true })
      for _ = 1, 3 do
        local l2, g2 = F.batch_hard_triplet_fused(inputs[1], inputs[2], { soft_margin = true })
        assert.are.equal(l1, l2)
        H.assert_equal(g2, g1)
      end
    end
  end)

  it("refuses labels of the wrong length or device, writing nothing", function()
    local x = ploss.randn({ 6, 3 }, { device = DEV, seed = 1 })
    local out, g = ploss.empty({}, { device = DEV }), ploss.empty({ 6, 3 }, { device = DEV })
    local fo = { out = out, grad_embeddings = g }
    H.expect_error(function() F.batch_hard_triplet_fused(x, ploss.zeros({ 7 }, { dtype = "i64", device = DEV }), fo) end,
      "labels: expected [6]", out, g)
    if DEV ~= "cpu" then
      H.expect_error(function() F.batch_hard_triplet_fused(x, ploss.zeros({ 6 }, { dtype = "i64" }), fo) end,
        "labels", out, g)
    end
  end)
end)

local NCE_OPTIONS = {
  {},
  { symmetric = false, temperature = 0.2 },
  { normalize = false, temperature = 1 },
}

local function compare_nce(q64, k64, opts, dtype, what, layout, loss_floor)
  local qc, kc = q64:type(dtype), k64:type(dtype)
  local qg, kg = qc:to(DEV), kc:to(DEV)
  if layout then qg, kg = layout(qg, kg) end
  local T = TOL[dtype]
  what = what .. " " .. dtype .. " " .. label(opts)
  local rc = { F.info_nce_fused(qc, kc, opts) }
  local rg = { F.info_nce_fused(qg, kg, opts) }
  local none = opts.reduction == "none"
  close(none and rg[1] or { rg[1] }, none and rc[1] or { rc[1] }, T.loss * 10, loss_floor or 0, what .. " fused loss")
  for k = 2, 3 do
    assert.are.equal(dtype, rg[k]:dtype())
    close(rg[k], rc[k], T.grad * 2, T.floor, what .. " fused gradient " .. (k - 1))
  end
  local lf = F.info_nce(qg, kg, opts)
  H.assert_close(none and lf or { lf }, none and rg[1] or { rg[1] }, { rtol = 0, atol = 0, what = what .. " forward" })
  local up = none and ploss.ones({ q64:size(1) }, { dtype = dtype == "f64" and "f64" or "f32", device = DEV }) or nil
  local gb = { F.info_nce_backward(qg, kg, up, opts) }
  for k = 1, 2 do H.assert_close(gb[k], rg[k + 1], { rtol = 0, atol = 0, what = what .. " backward " .. k }) end
end

describe("InfoNCELoss on " .. DEV .. " against the CPU", function()
  -- 300 rows: one tile; 9000 rows: several tiles (f32 and bf16 forward tiles of 1398 rows,
  -- f32 sub-tiles of the gradient sweeps), the column log-sum-exps merged across tiles;
  -- 40×1100: rows wider than the forward pass's whole workspace (the loss alone takes no
  -- gradient tile), where a view copied into it would overwrite the norms
  for _, shape in ipairs { { 37, 5 }, { 300, 64 }, { 9000, 16 }, { 40, 1100 } } do
    it(string.format("N = %d, D = %d: every option set, dtype and reduction", shape[1], shape[2]), function()
      local q = ploss.randn({ shape[1], shape[2] }, { dtype = "f64", seed = shape[1] })
      local k = ploss.randn({ shape[1], shape[2] }, { dtype = "f64", seed = shape[1] + 1 })
      local big = shape[1] > 1000
      for _, o in ipairs(big and { {} } or NCE_OPTIONS) do
        for _, dtype in ipairs(big and { "f32", "f64", "bf16" } or DTYPES) do
          for _, r in ipairs(big and { "mean" } or REDUCTIONS) do
            compare_nce(q, k, with(o, { reduction = r }), dtype, string.format("%dx%d", shape[1], shape[2]))
          end
        end
      end
    end)
  end

  -- The paths of N = 32768 at a CPU reference's cost: 6500 rows take 4 log-sum-exp tiles
  -- (the last of 695 rows, not a whole 32-row block), gradient sweeps over 3 (bf16: G tiles
  -- of 2580 rows, 4 f32 S sub-tiles of 645 rows each, the last tile 3 with a partial one) or
  -- 4 (f32: tiles of 1935 rows, S computed in place in 3 sub-tiles) tiles; the one-sided loss
  -- with a packed (transposed) query view, whose GEMM operand is offset by each tile's rows.
  it("N = 6500: several tiles in every pass, symmetric or not, a packed view", function()
    local q = ploss.randn({ 6500, 40 }, { dtype = "f64", seed = 65 })
    local k = ploss.randn({ 6500, 40 }, { dtype = "f64", seed = 66 })
    local transposed = function(qd, kd) return qd:t():contiguous():t(), kd end
    for _, dtype in ipairs { "bf16", "f32" } do
      compare_nce(q, k, { temperature = 0.07, reduction = "mean" }, dtype, "6500x40")
      compare_nce(q, k, { symmetric = false, temperature = 0.07, reduction = "none" }, dtype, "6500x40 packed",
        transposed)
    end
  end)

  -- bf16 with normalised views takes the similarity GEMMs with the exponential in their
  -- epilogue on sm_90 when N and D are multiples of 8 and the views' rows are 16-byte
  -- aligned (elsewhere these cases run the tiles above): a key view read in place from a
  -- wider matrix (row stride 56, offset 8) beside one that is not aligned (offset 3: the
  -- tiles); positives far ahead of the other pairs (P_ii within 1e-6 of 1, the gradient of
  -- the pair written apart from the epilogue's), at 304 and at 8 rows; 1/T above the fixed
  -- shift's bound (the tiles); 8, 24 and 136 rows (one tile, and partial tiles in both
  -- directions); 9000 rows, three 4096-row chunks of the log-sum-exp pass.
  it("bf16 normalised views: views in place, dominant positives, the temperature's bound", function()
    local q = ploss.randn({ 304, 48 }, { dtype = "f64", seed = 80 })
    local k = ploss.randn({ 304, 48 }, { dtype = "f64", seed = 81 })
    local function slice(offset)
      return function(qd, kd)
        local wide = ploss.zeros({ 304, 56 }, { dtype = kd:dtype(), device = DEV }):narrow(2, offset + 1, 48)
        wide:copy(kd)
        return qd, wide
      end
    end
    compare_nce(q, k, {}, "bf16", "304x48 in place", slice(8))
    compare_nce(q, k, {}, "bf16", "304x48 unaligned", slice(3))
    -- the loss, ≈ 3e-5, is the difference of two values near 1/T = 20 that each carry
    -- fp32's rounding of 20 (1e-6)
    compare_nce(q, q:clone(), { temperature = 0.05 }, "bf16", "304x48 dominant positives", nil, 4e-6)
    compare_nce(q:narrow(1, 1, 8), q:narrow(1, 1, 8):clone(), { temperature = 0.05 }, "bf16",
      "8x48 dominant positives", nil, 4e-6)
    compare_nce(q, k, { temperature = 0.01, reduction = "none" }, "bf16", "304x48 T = 0.01")
    for _, n in ipairs { 8, 24, 136 } do
      local qs = ploss.randn({ n, 8 }, { dtype = "f64", seed = 90 + n })
      local ks = ploss.randn({ n, 8 }, { dtype = "f64", seed = 91 + n })
      compare_nce(qs, ks, { reduction = "sum" }, "bf16", n .. "x8")
    end
    -- N not a multiple of 8 (the tiles): one row gives a loss of 0 up to fp32's rounding of
    -- similarities near 1/T, hence the floor
    for _, n in ipairs { 1, 3, 130 } do
      local qs = ploss.randn({ n, 8 }, { dtype = "f64", seed = 90 + n })
      local ks = ploss.randn({ n, 8 }, { dtype = "f64", seed = 91 + n })
      compare_nce(qs, ks, { reduction = "sum" }, "bf16", n .. "x8", nil, 4e-6)
    end
    local qb = ploss.randn({ 9000, 16 }, { dtype = "f64", seed = 82 })
    local kb = ploss.randn({ 9000, 16 }, { dtype = "f64", seed = 83 })
    compare_nce(qb, kb, { symmetric = false, reduction = "sum" }, "bf16", "9000x16")
  end)

  it("per-row upstream gradients, a fused scale and strided views", function()
    local q = ploss.randn({ 64, 24 }, { dtype = "f64", seed = 70 })
    local k = ploss.randn({ 64, 24 }, { dtype = "f64", seed = 71 })
    for _, dtype in ipairs(DTYPES) do
      local T = TOL[dtype]
      local qc, kc = q:type(dtype), k:type(dtype)
      local up = ploss.randn({ 64 }, { dtype = dtype == "f64" and "f64" or "f32", seed = 72 })
      local gc = { F.info_nce_backward(qc, kc, up, { reduction = "none" }) }
      local gg = { F.info_nce_backward(qc:to(DEV), kc:to(DEV), up:to(DEV), { reduction = "none" }) }
      for i = 1, 2 do close(gg[i], gc[i], T.grad * 2, T.floor, dtype .. " per-row upstream " .. i) end
      local fc = { F.info_nce_fused(qc, kc, { reduction = "sum", scale = 0.3 }) }
      local fg = { F.info_nce_fused(qc:to(DEV), kc:to(DEV), { reduction = "sum", scale = 0.3 }) }
      for i = 2, 3 do close(fg[i], fc[i], T.grad * 2, T.floor, dtype .. " scale " .. i) end
      compare_nce(q, k, {}, dtype, "strided", function(qd, kd)
        local wide = ploss.zeros({ 64, 50 }, { dtype = kd:dtype(), device = DEV }):narrow(2, 7, 24)
        wide:copy(kd)
        return qd:t():contiguous():t(), wide
      end)
    end
  end)

  it("one pair, an empty batch, large similarities", function()
    local one = ploss.randn({ 1, 8 }, { device = DEV, seed = 1 })
    local l, g1, g2 = F.info_nce_fused(one, one:clone())
    -- 0 up to f32 rounding: the log-sum-exp comes from the GEMM tile, the positive from the
    -- row's own dot product (similarities of 1/T ≈ 14.3)
    assert.is_true(math.abs(l) <= 1e-5, "one pair: loss " .. l)
    H.assert_close(g1:to("cpu"), ploss.zeros({ 1, 8 }), { atol = 1e-5, rtol = 0 })
    H.assert_close(g2:to("cpu"), ploss.zeros({ 1, 8 }), { atol = 1e-5, rtol = 0 })
    local e = ploss.empty({ 0, 8 }, { device = DEV })
    local le = F.info_nce(e, e:clone())
    assert.is_true(le ~= le)
    local q = ploss.randn({ 40, 4 }, { dtype = "f64", seed = 3, std = 50 })
    local k = ploss.randn({ 40, 4 }, { dtype = "f64", seed = 4, std = 50 })
    local opts = { normalize = false, temperature = 0.05, reduction = "none" }
    compare_nce(q, k, opts, "f64", "large")
    -- f32: the tiles' rounding (~1e-7 of similarities ~1e5) moves the values, never to inf/NaN
    local r = { F.info_nce_fused(q:to(DEV, "f32"), k:to(DEV, "f32"), opts) }
    for i = 1, 3 do
      for _, v in ipairs(r[i]:flat()) do assert.is_true(v == v and math.abs(v) < math.huge, "f32 large: finite") end
    end
  end)

  it("is deterministic: bitwise the same loss and gradients on every run", function()
    local q = ploss.randn({ 6000, 32 }, { dtype = "bf16", device = DEV, seed = 9 })
    local k = ploss.randn({ 6000, 32 }, { dtype = "bf16", device = DEV, seed = 10 })
    local r1 = { F.info_nce_fused(q, k) }
    for _ = 1, 3 do
      local r2 = { F.info_nce_fused(q, k) }
      assert.are.equal(r1[1], r2[1])
      H.assert_equal(r2[2], r1[2])
      H.assert_equal(r2[3], r1[3])
    end
  end)
end)
