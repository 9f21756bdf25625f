-- The two- and three-input criteria on CUDA (suite 'cuda'; spec/run.lua exits 77 before this
-- file without a GPU): MarginRankingLoss, DistanceRatioLoss, CosineEmbeddingLoss,
-- L1HingeEmbeddingLoss and GaussianNLLLoss against the
-- CPU backend on the same dtype-rounded inputs, f32/f16/bf16/f64, every reduction, forward,
-- backward (a scalar or per-element upstream gradient) and fused, the fused pass against the
-- split one; float and integer labels; scores of several dims and strided views; rows
-- narrower than a warp, exactly a warp and much wider; more rows or elements than the grid
-- has threads (the grid-stride loops); the unbatched cosine form; NaN and zero vectors; the
-- Gaussian NLL's variance forms and a negative variance; an empty batch; bitwise
-- determinism; nothing written on a validation error.
-- The margin ranking kernel computes each element in f64 as the CPU does: its gradients and
-- 'none' losses are compared exactly.  The cosine kernel takes its sums in fp32 (f64 for f64):
-- tolerances H.CUDA_TOL.
-- PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run of its logic.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()

local DTYPES = { "f32", "f16", "bf16", "f64" }
local REDUCTIONS = { "none", "mean", "sum" }
local TOL = H.CUDA_TOL
local close = H.assert_close_scaled
local NAN = 0 / 0

local function acc_dtype(dtype) return dtype == "f64" and "f64" or "f32" end

-- Scores and ±1 labels (f64, CPU) with |x1 − x2| kept off the margins' kinks after rounding to
-- bf16: differences of at least 0.05 from every |m| used below.
local function ranking_inputs(n, seed)
  local a = ploss.randn({ n }, { dtype = "f64", seed = seed }):type("bf16"):double():totable()
  local b = ploss.randn({ n }, { dtype = "f64", seed = seed + 1 }):type("bf16"):double():totable()
  local y = {}
  for i = 1, n do
    for _, m in ipairs { 0, 0.5 } do
      if math.abs(math.abs(a[i] - b[i]) - m) < 0.05 then b[i] = a[i] + m + 0.125 end
    end
    y[i] = (i % 3 == 0) and -1 or 1
  end
  if n == 0 then
    local e = ploss.empty({ 0 }, { dtype = "f64" })
    return e, e:clone(), e:clone()
  end
  return ploss.tensor(a, { dtype = "f64" }), ploss.tensor(b, { dtype = "f64" }), ploss.tensor(y, { dtype = "f64" })
end

-- N×D embeddings, labels 1, −1, … and the dissimilar pairs kept 0.02 off the kink cos = m
-- (m = 0.1 below; their second view is made near-orthogonal or near-parallel as needed).
local function cosine_inputs(n, d, seed)
  if n == 0 then
    return ploss.empty({ 0, d }, { dtype = "f64" }), ploss.empty({ 0, d }, { dtype = "f64" }),
      ploss.empty({ 0 }, { dtype = "f64" })
  end
  local a = ploss.randn({ n, d }, { dtype = "f64", seed = seed }):totable()
  local b = ploss.randn({ n, d }, { dtype = "f64", seed = seed + 1 }):totable()
  local y = {}
  for i = 1, n do
    y[i] = i % 2 == 1 and 1 or -1
    if i % 4 == 1 then
      for j = 1, d do b[i][j] = a[i][j] + 0.4 * b[i][j] end
    end
    if y[i] == -1 then
      local dot, s1, s2 = 0, 0, 0
      for j = 1, d do dot, s1, s2 = dot + a[i][j] * b[i][j], s1 + a[i][j] ^ 2, s2 + b[i][j] ^ 2 end
      local c = dot / math.sqrt(s1 * s2)
      if math.abs(c - 0.1) < 0.02 or math.abs(c) < 0.02 then
        for j = 1, d do b[i][j] = a[i][j] + 0.2 * b[i][j] end -- cos near 1: active, far from 0.1
      end
    end
  end
  return ploss.tensor(a, { dtype = "f64" }), ploss.tensor(b, { dtype = "f64" }), ploss.tensor(y, { dtype = "f64" })
end

-- One comparison of `fname` (margin_ranking_loss or cosine_embedding_loss): fused, forward
-- and backward on the CPU and DEV, inputs rounded to dtype once.  exact: the gradients and
-- 'none' losses are compared bitwise (the margin ranking kernel).
local function compare(fname, x1, x2, y, opts, dtype, what, exact, layout)
  local cpu = { x1:type(dtype), x2:type(dtype), y }
  local dev = { cpu[1]:to(DEV), cpu[2]:to(DEV), cpu[3]:to(DEV) }
  if layout then dev = layout(dev) end
  local T = TOL[dtype]
  what = string.format("%s %s %s %s", fname, what, dtype, opts.reduction or "mean")
  local f, fb, ff = F[fname], F[fname .. "_backward"], F[fname .. "_fused"]
  local rc = { ff(cpu[1], cpu[2], cpu[3], opts) }
  local rg = { ff(dev[1], dev[2], dev[3], opts) }
  local none = opts.reduction == "none"
  if exact and none then
    H.assert_equal(rg[1], rc[1], { what = what .. " fused loss" })
  else
    close(none and rg[1] or { rg[1] }, none and rc[1] or { rc[1] }, exact and 1e-6 or T.loss, 0, what .. " fused loss")
  end
  for k = 2, 3 do
    assert.are.equal(dtype, rg[k]:dtype())
    assert.are.equal(dev[1]:device(), rg[k]:device())
    if exact then
      H.assert_equal(rg[k], rc[k], { what = what .. " fused gradient " .. (k - 1) })
    else
      close(rg[k], rc[k], T.grad, T.floor, what .. " fused gradient " .. (k - 1))
    end
  end
  -- forward and backward equal the fused pass on the device (same kernel arithmetic)
  local lf = f(dev[1], dev[2], dev[3], opts)
  H.assert_equal(none and lf or { lf }, none and rg[1] or { rg[1] }, { what = what .. " forward" })
  local gb = { fb(dev[1], dev[2], dev[3], nil, opts) }
  for k = 1, 2 do H.assert_equal(gb[k], rg[k + 1], { what = what .. " backward " .. k }) end
  -- a per-element (per-pair) upstream gradient: the device against the CPU
  if none then
    local sizes = rc[1]:size()
    local up = ploss.randn(sizes, { dtype = acc_dtype(dtype), seed = 3 })
    local bc = { fb(cpu[1], cpu[2], cpu[3], up, opts) }
    local bg = { fb(dev[1], dev[2], dev[3], up:to(DEV), opts) }
    for k = 1, 2 do
      if exact then
        H.assert_equal(bg[k], bc[k], { what = what .. " backward with upstream " .. k })
      else
        close(bg[k], bc[k], T.grad, T.floor, what .. " backward with upstream " .. k)
      end
    end
  end
end

describe("MarginRankingLoss on " .. DEV .. " against the CPU", function()
  it("matches for every dtype, reduction, margin and label dtype", function()
    local x1, x2, y = ranking_inputs(1000, 7)
    H.each(DTYPES, REDUCTIONS, { 0, 0.5 }, function(dtype, r, m)
      compare("margin_ranking_loss", x1, x2, y, { reduction = r, margin = m }, dtype, "margin " .. m, true)
    end)
    for _, ydt in ipairs { "i64", "i32", "f16", "f32" } do
      compare("margin_ranking_loss", x1, x2, y:type(ydt), { reduction = "none", margin = 0.5 }, "f32", "y " .. ydt, true)
    end
  end)

  it("walks scores of several dims, strided views and more elements than the grid has threads", function()
    local x1, x2, y = ranking_inputs(4 * 96, 11)
    local shaped = function(t) return t:view(4, 8, 12) end
    H.each({ "f32", "bf16" }, REDUCTIONS, function(dtype, r)
      compare("margin_ranking_loss", shaped(x1), shaped(x2), shaped(y), { reduction = r, margin = 0.5 }, dtype,
        "4×8×12 permuted", true, function(dev)
          -- a permuted copy read back through its strides
          local function perm(t) return t:permute(3, 1, 2):contiguous():permute(2, 3, 1) end
          return { perm(dev[1]), dev[2], perm(dev[3]) }
        end)
    end)
    local b1, b2, by = ranking_inputs(1100000, 21)
    for _, r in ipairs(REDUCTIONS) do
      compare("margin_ranking_loss", b1, b2, by, { reduction = r }, "f32", "1.1M elements", true)
    end
  end)

  it("gives the kink, NaN and labels other than ±1 as the CPU; an empty batch a NaN mean", function()
    local x1 = ploss.tensor({ 1.5, 0, 0, 0, NAN, 1, 2 }, { dtype = "f32" })
    local x2 = ploss.tensor({ 1, 7, 1, 1, 0, NAN, 1 }, { dtype = "f32" })
    local y = ploss.tensor({ 1, 0, 2, -3, 1, -1, NAN }, { dtype = "f32" })
    for _, r in ipairs(REDUCTIONS) do
      compare("margin_ranking_loss", x1, x2, y, { reduction = r, margin = 0.5 }, "f32", "edge cases", true)
    end
    local e = ploss.empty({ 0 }, { dtype = "f32", device = DEV })
    local loss, g1 = F.margin_ranking_loss_fused(e, e:clone(), e:clone())
    assert.is_true(loss ~= loss)
    assert.are.same({ 0 }, g1:size())
    assert.are.equal(0, F.margin_ranking_loss(e, e:clone(), e:clone(), { reduction = "sum" }))
  end)

  it("is deterministic and writes nothing on a validation error", function()
    local x1, x2, y = ranking_inputs(300000, 5)
    local a, b, t = x1:float():to(DEV), x2:float():to(DEV), y:to(DEV)
    local l1, g1 = F.margin_ranking_loss_fused(a, b, t, { margin = 0.5 })
    local l2, g2 = F.margin_ranking_loss_fused(a, b, t, { margin = 0.5 })
    assert.are.equal(l1, l2)
    H.assert_equal(g1, g2)
    local out = ploss.empty({}, { dtype = "f32", device = DEV })
    local o1, o2 = ploss.empty({ 300000 }, { device = DEV }), ploss.empty({ 300000 }, { device = DEV })
    H.expect_error(function()
      F.margin_ranking_loss_fused(a, b, t:narrow(1, 1, 10), { out = out, grad_input1 = o1, grad_input2 = o2 })
    end, "target: expected [300000] (the shape of input1)", out, o1, o2)
    if DEV ~= "cpu" then
      H.expect_error(function()
        F.margin_ranking_loss_fused(a, b, y, { out = out, grad_input1 = o1, grad_input2 = o2 })
      end, { "target", "PLOSS_ERR_DEVICE" }, out, o1, o2)
    end
  end)
end)

describe("DistanceRatioLoss on " .. DEV .. " against the CPU", function()
  -- the fused pass and the split one on the CPU and DEV, inputs rounded to dtype once; the
  -- element maths is f64 on both, but CUDA's exp and log1p need not round as glibc's: the
  -- dtype's tolerances
  local function compare(X, Y, opts, dtype, what, layout)
    local cpu = { X:type(dtype), Y:type(dtype) }
    local dev = { cpu[1]:to(DEV), cpu[2]:to(DEV) }
    if layout then dev = layout(dev) end
    local T = TOL[dtype]
    what = string.format("%s %s %s", what, dtype, opts.reduction or "mean")
    local none = opts.reduction == "none"
    local rc = { F.distance_ratio_loss_fused(cpu[1], cpu[2], opts) }
    local rg = { F.distance_ratio_loss_fused(dev[1], dev[2], opts) }
    close(none and rg[1] or { rg[1] }, none and rc[1] or { rc[1] }, T.loss, 0, what .. " fused loss")
    for k = 2, 3 do
      assert.are.equal(dtype, rg[k]:dtype())
      assert.are.equal(dev[1]:device(), rg[k]:device())
      close(rg[k], rc[k], T.grad, T.floor, what .. " fused gradient " .. (k - 1))
    end
    local lf = F.distance_ratio_loss(dev[1], dev[2], opts)
    H.assert_equal(none and lf or { lf }, none and rg[1] or { rg[1] }, { what = what .. " forward" })
    local gb = { F.distance_ratio_loss_backward(dev[1], dev[2], nil, opts) }
    for k = 1, 2 do H.assert_equal(gb[k], rg[k + 1], { what = what .. " backward " .. k }) end
    if none then
      local up = ploss.randn(rc[1]:size(), { dtype = acc_dtype(dtype), seed = 3 })
      local bc = { F.distance_ratio_loss_backward(cpu[1], cpu[2], up, opts) }
      local bg = { F.distance_ratio_loss_backward(dev[1], dev[2], up:to(DEV), opts) }
      for k = 1, 2 do close(bg[k], bc[k], T.grad, T.floor, what .. " backward with upstream " .. k) end
    end
  end

  it("matches for every dtype and reduction, several dims, strided views and more elements than threads", function()
    local X, Y = ranking_inputs(1000, 17)
    H.each(DTYPES, REDUCTIONS, function(dtype, r) compare(X, Y, { reduction = r }, dtype, "1000") end)
    local A, B = ranking_inputs(4 * 96, 19)
    H.each({ "f32", "bf16" }, REDUCTIONS, function(dtype, r)
      compare(A:view(4, 8, 12), B:view(4, 8, 12), { reduction = r }, dtype, "4×8×12 permuted", function(dev)
        return { dev[1]:permute(3, 1, 2):contiguous():permute(2, 3, 1), dev[2] }
      end)
    end)
    local P, Q = ranking_inputs(1100000, 23)
    for _, r in ipairs(REDUCTIONS) do compare(P, Q, { reduction = r }, "f32", "1.1M elements") end
  end)

  it("gives far distances, ∞ and NaN as the CPU; an empty batch a NaN mean; is deterministic", function()
    local inf = math.huge
    local X = ploss.tensor({ 800, 790, 1e30, 0, inf, 1, inf, NAN }, { dtype = "f64" })
    local Y = ploss.tensor({ 790, 800, 0, 1e30, 1, inf, inf, 1 }, { dtype = "f64" })
    for _, dtype in ipairs { "f64", "f32" } do
      local loss, g1, g2 = F.distance_ratio_loss_fused(X:type(dtype):to(DEV), Y:type(dtype):to(DEV), { reduction = "none" })
      local cl, c1, c2 = F.distance_ratio_loss_fused(X:type(dtype), Y:type(dtype), { reduction = "none" })
      close(loss, cl, 1e-12, 0, dtype .. " far distances, ∞ and NaN: loss")
      close(g1, c1, 1e-12, 0, dtype .. " gradient 1")
      close(g2, c2, 1e-12, 0, dtype .. " gradient 2")
    end
    local e = ploss.empty({ 0 }, { dtype = "f32", device = DEV })
    local el, eg = F.distance_ratio_loss_fused(e, e:clone())
    assert.is_true(el ~= el)
    assert.are.same({ 0 }, eg:size())
    local P, Q = ranking_inputs(300000, 29)
    local a, b = P:float():to(DEV), Q:float():to(DEV)
    local l1, h1 = F.distance_ratio_loss_fused(a, b)
    local l2, h2 = F.distance_ratio_loss_fused(a, b)
    assert.are.equal(l1, l2)
    H.assert_equal(h1, h2)
  end)
end)

describe("CosineEmbeddingLoss on " .. DEV .. " against the CPU", function()
  it("matches for every dtype and reduction, rows narrower than a warp, a warp and wider", function()
    for _, d in ipairs { 5, 32, 300 } do
      local x1, x2, y = cosine_inputs(67, d, 13 + d)
      H.each(DTYPES, REDUCTIONS, function(dtype, r)
        compare("cosine_embedding_loss", x1, x2, y, { reduction = r, margin = 0.1 }, dtype, "D = " .. d, false)
      end)
    end
  end)

  it("takes integer labels, labels other than ±1, strided views and more rows than the grid has warps", function()
    local x1, x2, y = cosine_inputs(70000, 3, 31)
    for _, r in ipairs(REDUCTIONS) do
      compare("cosine_embedding_loss", x1, x2, y:long(), { reduction = r, margin = 0.1 }, "f32", "70000 rows i64", false)
    end
    local a, b = cosine_inputs(40, 17, 41)
    local yv = {}
    for i = 1, 40 do yv[i] = ({ 1, -1, 0, 2 })[i % 4 + 1] end
    local yo = ploss.tensor(yv, { dtype = "i32" })
    H.each({ "f32", "f64" }, REDUCTIONS, function(dtype, r)
      compare("cosine_embedding_loss", a, b, yo, { reduction = r, margin = 0.1 }, dtype, "strided, y in {1, −1, 0, 2}",
        false, function(dev)
          local at = dev[1]:t():contiguous():t()
          local bw = ploss.zeros({ 40, 40 }, { dtype = dev[2]:dtype(), device = DEV }):narrow(2, 11, 17):copy(dev[2])
          return { at, bw, dev[3] }
        end)
    end)
  end)

  it("gives zero vectors, NaN pairs and the unbatched form as the CPU; an empty batch a NaN mean", function()
    local x1 = ploss.tensor({ { 0, 0, 0 }, { 0, 0, 0 }, { 1, 2, 2 }, { NAN, 1, 0 }, { 2, 1, 0 } }, { dtype = "f32" })
    local x2 = ploss.tensor({ { 1, 2, 2 }, { 0, 0, 0 }, { 0, 0, 0 }, { 1, 1, 1 }, { 1, NAN, 0 } }, { dtype = "f32" })
    local y = ploss.tensor({ 1, 1, -1, 1, 0 }, { dtype = "f32" })
    for _, r in ipairs(REDUCTIONS) do
      compare("cosine_embedding_loss", x1, x2, y, { reduction = r, margin = -0.5 }, "f32", "zero and NaN", false)
    end
    local u, v = ploss.tensor({ 1, 2, -1 }), ploss.tensor({ 0.5, 1, 3 })
    for _, r in ipairs(REDUCTIONS) do
      compare("cosine_embedding_loss", u, v, ploss.tensor(-1), { reduction = r, margin = -0.2 }, "f32", "unbatched", false)
    end
    local e = ploss.empty({ 0, 4 }, { dtype = "f32", device = DEV })
    local loss, g1 = F.cosine_embedding_loss_fused(e, e:clone(), ploss.empty({ 0 }, { dtype = "i64", device = DEV }))
    assert.is_true(loss ~= loss)
    assert.are.same({ 0, 4 }, g1:size())
  end)

  it("is deterministic and writes nothing on a validation error", function()
    local x1, x2, y = cosine_inputs(5000, 40, 3)
    local a, b, t = x1:float():to(DEV), x2:float():to(DEV), y:to(DEV)
    local l1, g1 = F.cosine_embedding_loss_fused(a, b, t)
    local l2, g2 = F.cosine_embedding_loss_fused(a, b, t)
    assert.are.equal(l1, l2)
    H.assert_equal(g1, g2)
    local out = ploss.empty({}, { dtype = "f32", device = DEV })
    local o1 = ploss.empty({ 5000, 40 }, { device = DEV })
    local o2 = ploss.empty({ 5000, 40 }, { device = DEV })
    H.expect_error(function()
      F.cosine_embedding_loss_fused(a, b, t:narrow(1, 1, 10), { out = out, grad_input1 = o1, grad_input2 = o2 })
    end, "target: expected [5000] (one label per row of input1)", out, o1, o2)
    H.expect_error(function()
      F.cosine_embedding_loss_fused(a, b, t, { out = out, grad_input1 = o1, grad_input2 = o1 })
    end, "PLOSS_ERR_ALIAS", out, o1)
  end)
end)

describe("L1HingeEmbeddingLoss on " .. DEV .. " against the CPU", function()
  it("matches for every dtype and reduction, rows narrower than a warp, a warp and wider", function()
    for _, d in ipairs { 5, 32, 300 } do
      local x1, x2, y = H.l1_hinge_pairs(67, d, 17 + d)
      H.each(DTYPES, REDUCTIONS, function(dtype, r)
        compare("l1_hinge_embedding_loss", x1, x2, y, { reduction = r, margin = d / 2 }, dtype, "D = " .. d, false)
      end)
    end
  end)

  it("takes integer labels, strided views, more rows than the grid has warps and the unbatched form", function()
    local x1, x2, y = H.l1_hinge_pairs(70000, 3, 37)
    for _, r in ipairs(REDUCTIONS) do
      compare("l1_hinge_embedding_loss", x1, x2, y:long(), { reduction = r, margin = 1.5 }, "f32", "70000 rows i64", false)
    end
    local a, b, t = H.l1_hinge_pairs(40, 17, 43)
    compare("l1_hinge_embedding_loss", a, b, t, { reduction = "none", margin = 8.5 }, "bf16", "strided", false,
      function(dev) return { dev[1]:t():contiguous():t(), dev[2], dev[3] } end)
    local u, v = ploss.tensor({ 1, -2, 0.5 }, { dtype = "f64" }), ploss.tensor({ 0, 0, 0 }, { dtype = "f64" })
    for _, r in ipairs(REDUCTIONS) do
      compare("l1_hinge_embedding_loss", u, v, ploss.tensor(-1), { reduction = r, margin = 4 }, "f32", "unbatched", false)
    end
  end)

  it("is deterministic", function()
    local x1, x2, y = H.l1_hinge_pairs(5000, 40, 3)
    local a, b, t = x1:float():to(DEV), x2:float():to(DEV), y:to(DEV)
    local l1, g1 = F.l1_hinge_embedding_loss_fused(a, b, t, { margin = 20 })
    local l2, g2 = F.l1_hinge_embedding_loss_fused(a, b, t, { margin = 20 })
    assert.are.equal(l1, l2)
    H.assert_equal(g1, g2)
  end)
end)

-- GaussianNLLLoss: the kernels compute each element in f64 as the CPU does, so the input's and
-- target's gradients (one division) are compared exactly, as are the 'none' losses and the
-- per-element variance gradients of 16- and 32-bit inputs (rounded from f64); in f64 those
-- two to 1e-14 (the GPU fuses multiply-adds and has its own log), a variance's gradient shared
-- by a row (the warp's sum, in another order than the CPU's) and reduced losses to tolerances.
local function gaussian_compare(x, y, v, opts, dtype, what, layout)
  local cpu = { x:type(dtype), y:type(dtype), v:type(dtype) }
  local dev = { cpu[1]:to(DEV), cpu[2]:to(DEV), cpu[3]:to(DEV) }
  if layout then dev = layout(dev) end
  local T = TOL[dtype]
  local per_row = not x:has_sizes(v:size())
  what = string.format("gaussian_nll_loss %s %s %s", what, dtype, opts.reduction or "mean")
  local f, fb, ff = F.gaussian_nll_loss, F.gaussian_nll_loss_backward, F.gaussian_nll_loss_fused
  local rc = { ff(cpu[1], cpu[2], cpu[3], opts) }
  local rg = { ff(dev[1], dev[2], dev[3], opts) }
  local none = opts.reduction == "none"
  if none and dtype ~= "f64" then
    H.assert_equal(rg[1], rc[1], { what = what .. " fused loss" })
  elseif none then
    close(rg[1], rc[1], 1e-14, 0, what .. " fused loss")
  else
    close({ rg[1] }, { rc[1] }, 1e-6, 0, what .. " fused loss")
  end
  local function grads(got, ref, label)
    for k = 1, 3 do
      assert.are.equal(dtype, got[k]:dtype())
      assert.are.equal(dev[1]:device(), got[k]:device())
      if k == 3 and per_row then
        close(got[k], ref[k], T.grad, T.floor, what .. label .. " var")
      elseif k == 3 and dtype == "f64" then
        close(got[k], ref[k], 1e-14, 0, what .. label .. " var")
      else
        H.assert_equal(got[k], ref[k], { what = what .. label .. " " .. k })
      end
    end
  end
  grads({ rg[2], rg[3], rg[4] }, { rc[2], rc[3], rc[4] }, " fused gradient")
  -- forward and backward equal the fused pass on the device (same kernel arithmetic)
  local lf = f(dev[1], dev[2], dev[3], opts)
  H.assert_equal(none and lf or { lf }, none and rg[1] or { rg[1] }, { what = what .. " forward" })
  local gb = { fb(dev[1], dev[2], dev[3], nil, opts) }
  for k = 1, 3 do H.assert_equal(gb[k], rg[k + 1], { what = what .. " backward " .. k }) end
  if none then -- a per-element upstream gradient: the device against the CPU
    local up = ploss.randn(x:size(), { dtype = acc_dtype(dtype), seed = 3 })
    grads({ fb(dev[1], dev[2], dev[3], up:to(DEV), opts) }, { fb(cpu[1], cpu[2], cpu[3], up, opts) },
      " backward with upstream")
  end
end

-- Means, targets and variances in [0.05, 2) of sizes and vsizes (f64, CPU).
local function gaussian_inputs(sizes, vsizes, seed)
  return ploss.randn(sizes, { dtype = "f64", seed = seed }), ploss.randn(sizes, { dtype = "f64", seed = seed + 1 }),
    ploss.rand(vsizes, { dtype = "f64", seed = seed + 2, low = 0.05, high = 2 })
end

describe("GaussianNLLLoss on " .. DEV .. " against the CPU", function()
  it("matches for every dtype, reduction and variance form, rows narrower than a warp and wider", function()
    for _, d in ipairs { 1, 5, 300 } do -- rows of one element: taken as elements
      for _, vs in ipairs { { 67, d }, { 67 }, { 67, 1 } } do
        local x, y, v = gaussian_inputs({ 67, d }, vs, 17 + d + #vs)
        H.each(DTYPES, REDUCTIONS, function(dtype, r)
          gaussian_compare(x, y, v, { reduction = r }, dtype, string.format("67x%d var %s", d, table.concat(vs, "x")))
        end)
      end
    end
  end)

  it("a variance shared along another axis ([N, 1, H, W] for [N, C, H, W]; [1, D] for N×D)", function()
    for _, c in ipairs { { { 4, 3, 8, 9 }, { 4, 1, 8, 9 } }, { { 67, 5 }, { 1, 5 } }, { { 3, 40, 7 }, { 3, 40, 1 } } } do
      local x, y, v = gaussian_inputs(c[1], c[2], 31 + #c[1])
      H.each(DTYPES, REDUCTIONS, function(dtype, r)
        gaussian_compare(x, y, v, { reduction = r }, dtype,
          string.format("%s var %s", table.concat(c[1], "x"), table.concat(c[2], "x")))
      end)
    end
  end)

  it("full, the ε clamp, 0-d and 1-d inputs, strided views, more work than the grid", function()
    local x, y, v = gaussian_inputs({ 40, 9 }, { 40, 9 }, 5)
    local _, _, vr = gaussian_inputs({ 40, 9 }, { 40 }, 6)
    for _, r in ipairs(REDUCTIONS) do
      gaussian_compare(x, y, v, { reduction = r, full = true, eps = 0.3 }, "f32", "full, ε 0.3")
      gaussian_compare(x, y, vr, { reduction = r, full = true, eps = 0.3 }, "f32", "full, ε 0.3, per row")
      local s0 = { gaussian_inputs({}, {}, 8) }
      gaussian_compare(s0[1], s0[2], s0[3], { reduction = r }, "f64", "0-d")
      local s1 = { gaussian_inputs({ 50 }, {}, 9) }
      gaussian_compare(s1[1], s1[2], s1[3], { reduction = r }, "f32", "1-d, 0-d var")
      -- transposed copies read back through their strides
      local function tr(t) return t:t():contiguous():t() end
      gaussian_compare(x, y, v, { reduction = r }, "bf16", "transposed", function(dev)
        return { tr(dev[1]), dev[2], tr(dev[3]) }
      end)
    end
    local bx, by, bv = gaussian_inputs({ 1100000 }, { 1100000 }, 21)
    local rx, ry, rv = gaussian_inputs({ 70000, 3 }, { 70000 }, 22)
    for _, r in ipairs(REDUCTIONS) do
      gaussian_compare(bx, by, bv, { reduction = r }, "f32", "1.1M elements")
      gaussian_compare(rx, ry, rv, { reduction = r }, "f32", "70000 rows of 3")
    end
  end)

  it("an empty input: 'mean' NaN, a shared variance's gradient 0", function()
    local e = ploss.empty({ 3, 0 }, { dtype = "f32", device = DEV })
    local v = ploss.tensor({ 1, 2, 3 }, { dtype = "f32", device = DEV })
    local loss = F.gaussian_nll_loss(e, e:clone(), e:clone())
    assert.is_true(loss ~= loss)
    local _, _, gv = F.gaussian_nll_loss_backward(e, e:clone(), v, 1, { reduction = "sum" })
    H.assert_equal(gv:to("cpu"), { 0, 0, 0 })
  end)

  it("a negative variance: NaN there, INVALID_ARGUMENT naming the first at the next synchronisation", function()
    local x, y, v = gaussian_inputs({ 300, 4 }, { 300, 4 }, 31)
    local vv = v:totable()
    vv[101][3] = -0.5 -- element 402 (0-based), the first of several
    vv[290][1], vv[200][4] = -1, -2
    local vr = ploss.rand({ 300 }, { dtype = "f64", seed = 33, low = 0.1, high = 1 }):totable()
    vr[151], vr[299], vr[152] = -1, -1, -3 -- row 150 first
    for _, c in ipairs { { ploss.tensor(vv, { dtype = "f32" }), 402 }, { ploss.tensor(vr, { dtype = "f32" }), 150 } } do
      local a, b, s = x:float():to(DEV), y:float():to(DEV), c[1]:to(DEV)
      local msg = string.format("var: element %d (0-based, row-major) is negative", c[2])
      if DEV == "cpu" then -- the dry run: the CPU refuses the call itself
        H.expect_error(function() F.gaussian_nll_loss_fused(a, b, s, { reduction = "none" }) end,
          { "PLOSS_ERR_INVALID_ARGUMENT", msg })
      else
        local l, gx = F.gaussian_nll_loss_fused(a, b, s, { reduction = "none" })
        H.expect_error(function() ploss.synchronize(DEV) end, { "PLOSS_ERR_INVALID_ARGUMENT", msg })
        ploss.synchronize(DEV)
        local k = c[2] == 402 and 403 or 601 -- the first element it touches (1-based)
        local lv, gv = l:to("cpu"):flat(), gx:to("cpu"):flat()
        assert.is_true(lv[k] ~= lv[k] and gv[k] ~= gv[k])
        assert.is_true(lv[1] == lv[1])
      end
    end
  end)

  it("is deterministic and writes nothing on a validation error", function()
    local x, y, v = gaussian_inputs({ 3000, 40 }, { 3000 }, 41)
    local a, b, s = x:float():to(DEV), y:float():to(DEV), v:float():to(DEV)
    local r1 = { F.gaussian_nll_loss_fused(a, b, s) }
    local r2 = { F.gaussian_nll_loss_fused(a, b, s) }
    assert.are.equal(r1[1], r2[1])
    for k = 2, 4 do H.assert_equal(r1[k], r2[k]) end
    local out = ploss.empty({}, { dtype = "f32", device = DEV })
    local g = { ploss.empty({ 3000, 40 }, { device = DEV }), ploss.empty({ 3000, 40 }, { device = DEV }),
      ploss.empty({ 3000 }, { device = DEV }) }
    H.expect_error(function()
      F.gaussian_nll_loss_fused(a, b, s:narrow(1, 1, 10),
        { out = out, grad_input = g[1], grad_target = g[2], grad_var = g[3] })
    end, { "var: expected [3000, 40]", "PLOSS_ERR_SHAPE" }, out, g[1], g[2], g[3])
  end)
end)
