-- Ranking spec (suite 'cpu'): the two-input criteria of PyTorch and Torch7 on the CPU backend.
-- MarginRankingLoss and CosineEmbeddingLoss (Torch7's MarginRankingCriterion and
-- CosineEmbeddingCriterion), L1HingeEmbeddingLoss and DistanceRatioLoss (Torch7's
-- DistanceRatioCriterion: also far distances, ∞ and NaN):
--  * values derived by hand;
--  * an independent reference written here with PyTorch's definitions (aten's
--    margin_ranking_loss: (−y·(x1 − x2) + m).clamp_min(0); cosine_embedding_loss: EPSILON =
--    1e-12 added to each squared norm, where(y == 1, 1 − cos, 0) + where(y == −1,
--    (cos − m).clamp_min(0), 0)) and autograd's gradients (clamp_min passes the gradient at
--    the kink; where gives the untaken branch 0), every reduction, forward, backward and fused;
--  * central differences in f64 for both inputs;
--  * the hinge's kink, labels other than ±1, zero vectors, NaN propagation, an empty batch,
--    PyTorch's unbatched D form of the cosine loss, any shape of the ranking scores, strided
--    views, float and integer labels, f32/f16/bf16;
--  * bad input: a clear error naming the argument, nothing written.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local REDUCTIONS = { "none", "mean", "sum" }
local NAN = 0 / 0

local with = H.with

local reduce = H.reduce_losses

-- The upstream factor of element i: a per-element list, or the scalar spread by the mean.
local function factor(w, i) return type(w) == "table" and w[i] or w end

local function weight(reduction, n, up)
  up = up or 1
  return reduction == "mean" and up / n or up
end

---------------------------------------------------------------------------------------
-- The references on flat Lua lists (margin ranking) and lists of rows (cosine embedding)
---------------------------------------------------------------------------------------

-- PyTorch's margin_ranking_loss with autograd's gradients of Σ_i w_i·ℓ_i.
local function ranking_reference(X1, X2, Y, margin, w)
  local losses, g1, g2 = {}, {}, {}
  for i = 1, #X1 do
    local u = -Y[i] * (X1[i] - X2[i]) + margin
    losses[i] = u ~= u and u or math.max(u, 0)                -- clamp_min keeps a NaN
    local gu = u >= 0 and factor(w, i) or 0                   -- where(u >= 0, grad, 0)
    g1[i] = gu * -Y[i]
    g2[i] = -(gu * -Y[i])
  end
  return losses, g1, g2
end

local EPS = 1e-12 -- aten's EPSILON of cosine_embedding_loss

-- PyTorch's cosine_embedding_loss with autograd's gradients of Σ_i w_i·ℓ_i.
local function cosine_reference(X1, X2, Y, margin, w)
  local losses, g1, g2 = {}, {}, {}
  for i = 1, #X1 do
    local u, v = X1[i], X2[i]
    local dot, s1, s2 = 0, 0, 0
    for j = 1, #u do
      dot, s1, s2 = dot + u[j] * v[j], s1 + u[j] * u[j], s2 + v[j] * v[j]
    end
    local A, B = s1 + EPS, s2 + EPS
    local d = math.sqrt(A * B)
    local c = dot / d
    local wi = factor(w, i)
    local g = 0 -- ∂/∂cos of the taken branch times the upstream factor
    if Y[i] == 1 then
      losses[i], g = 1 - c, -wi
    elseif Y[i] == -1 then
      local t = c - margin
      losses[i] = t ~= t and t or math.max(t, 0)
      g = t >= 0 and wi or 0
    else
      losses[i] = 0
    end
    g1[i], g2[i] = {}, {}
    for j = 1, #u do
      g1[i][j] = g * (v[j] / d - c * u[j] / A)
      g2[i][j] = g * (u[j] / d - c * v[j] / B)
    end
  end
  return losses, g1, g2
end

local function flat(t) return t:to("cpu"):double():flat() end
local function rows(t) return t:to("cpu"):double():totable() end

-- Random scores and ±1 labels, f64 on the CPU (|u| kept away from the kink: |x1 − x2| >= 0.05
-- with a margin that is a multiple of 0.25 cannot land within 0.01 of it).
local function ranking_inputs(n, seed)
  local x1 = ploss.randn({ n }, { dtype = "f64", seed = seed })
  local x2 = ploss.randn({ n }, { dtype = "f64", seed = seed + 1 })
  local a, b, y = x1:totable(), x2:totable(), {}
  for i = 1, n do
    local dlt = a[i] - b[i]
    if math.abs(dlt) < 0.05 then b[i] = a[i] - 0.1 end
    -- away from the kink for the margins of the specs (0, 0.25, 0.5, 1)
    for _, m in ipairs { 0, 0.25, 0.5, 1, -0.25 } do
      if math.abs(math.abs(a[i] - b[i]) - math.abs(m)) < 0.01 then b[i] = b[i] + 0.037 end
    end
    y[i] = (i % 3 == 0) and -1 or 1
  end
  return ploss.tensor(a, { dtype = "f64" }), ploss.tensor(b, { dtype = "f64" }), ploss.tensor(y, { dtype = "f64" })
end

-- Random N×D embeddings (second view correlated with the first in every other row) and
-- labels cycling 1, −1, 1, −1, …
local function cosine_inputs(n, d, seed)
  local x1 = ploss.randn({ n, d }, { dtype = "f64", seed = seed })
  local x2 = ploss.randn({ n, d }, { dtype = "f64", seed = seed + 1 })
  local a, b, y = x1:totable(), x2:totable(), {}
  for i = 1, n do
    if i % 2 == 1 then
      for j = 1, d do b[i][j] = a[i][j] + 0.4 * b[i][j] end
    end
    y[i] = i % 2 == 1 and 1 or -1
  end
  if n == 0 then return x1, x2, ploss.empty({ 0 }, { dtype = "f64" }) end
  return ploss.tensor(a, { dtype = "f64" }), ploss.tensor(b, { dtype = "f64" }), ploss.tensor(y, { dtype = "f64" })
end

---------------------------------------------------------------------------------------
-- MarginRankingLoss
---------------------------------------------------------------------------------------

describe("MarginRankingLoss", function()
  it("gives the values derived by hand, with Torch7's name as an alias", function()
    -- x1 − x2 = (−1, 0, 2), y = (1, −1, 1), m = 0.5: u = (1.5, 0.5, −1.5) → ℓ = (1.5, 0.5, 0)
    local x1 = ploss.tensor({ 1, 2, 3 }, { dtype = "f64" })
    local x2 = ploss.tensor({ 2, 2, 1 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, -1, 1 }, { dtype = "f64" })
    assert.are.equal(ploss.MarginRankingLoss, ploss.MarginRankingCriterion)
    local crit = ploss.MarginRankingCriterion { margin = 0.5 }
    H.assert_close(crit:forward(x1, x2, y), 2 / 3, { rtol = 1e-15 })
    local g1, g2 = crit:backward(x1, x2, y)
    -- ∂ℓ/∂x1 = −y·[u >= 0] / 3
    H.assert_close(g1, { -1 / 3, 1 / 3, 0 }, { rtol = 1e-15 })
    H.assert_close(g2, { 1 / 3, -1 / 3, 0 }, { rtol = 1e-15 })
    H.assert_close(F.margin_ranking_loss(x1, x2, y, { margin = 0.5, reduction = "none" }), { 1.5, 0.5, 0 },
      { rtol = 1e-15 })
    -- PyTorch's default margin 0: ℓ = max(0, −y·(x1 − x2)) = (1, 0, 0)
    assert.are.equal(1, F.margin_ranking_loss(x1, x2, y, { reduction = "sum" }))
    assert.truthy(tostring(ploss.MarginRankingLoss { margin = 0.25 }):find("margin=0.25", 1, true))
  end)

  it("matches PyTorch's definition for every margin and reduction, float and integer labels", function()
    local x1, x2, y = ranking_inputs(37, 11)
    local X1, X2, Y = flat(x1), flat(x2), flat(y)
    for _, m in ipairs { 0, 0.25, 1, -0.25 } do
      for _, r in ipairs(REDUCTIONS) do
        for _, ydt in ipairs { "f64", "f32", "i64", "i32", "f16" } do
          local o = { margin = m, reduction = r }
          local what = string.format("margin %g %s y %s", m, r, ydt)
          local yt = y:type(ydt)
          local losses, g1, g2 = ranking_reference(X1, X2, Y, m, weight(r, 37))
          local loss, f1, f2 = F.margin_ranking_loss_fused(x1, x2, yt, o)
          H.assert_close(r == "none" and loss or { loss }, r == "none" and losses or { reduce(losses, r) },
            { rtol = 1e-14, atol = 1e-15, what = what .. " loss" })
          H.assert_close(f1, g1, { rtol = 1e-14, atol = 1e-15, what = what .. " grad 1" })
          H.assert_close(f2, g2, { rtol = 1e-14, atol = 1e-15, what = what .. " grad 2" })
          -- forward and backward equal the fused pass
          local lf = F.margin_ranking_loss(x1, x2, yt, o)
          H.assert_equal(r == "none" and lf or { lf }, r == "none" and loss or { loss }, { what = what .. " forward" })
          local b1, b2 = F.margin_ranking_loss_backward(x1, x2, yt, nil, o)
          H.assert_equal(b1, f1, { what = what .. " backward 1" })
          H.assert_equal(b2, f2, { what = what .. " backward 2" })
        end
      end
    end
  end)

  it("backward takes the upstream gradient (a number, a tensor per element) and fused a scale", function()
    local x1, x2, y = ranking_inputs(12, 5)
    local X1, X2, Y = flat(x1), flat(x2), flat(y)
    local up = {}
    for i = 1, 12 do up[i] = (i - 6) / 4 end
    local _, g1, g2 = ranking_reference(X1, X2, Y, 0.25, up)
    local b1, b2 = F.margin_ranking_loss_backward(x1, x2, y, ploss.tensor(up, { dtype = "f64" }),
      { margin = 0.25, reduction = "none" })
    H.assert_close(b1, g1, { rtol = 1e-15 })
    H.assert_close(b2, g2, { rtol = 1e-15 })
    _, g1, g2 = ranking_reference(X1, X2, Y, 0, 2.5 / 12)
    local c1, c2 = ploss.MarginRankingLoss {}:backward(x1, x2, y, 2.5)
    H.assert_close(c1, g1, { rtol = 1e-15 })
    H.assert_close(c2, g2, { rtol = 1e-15 })
    local _, s1, s2 = ploss.MarginRankingLoss {}(x1, x2, y, 2.5)
    H.assert_close(s1, g1, { rtol = 1e-15 })
    H.assert_close(s2, g2, { rtol = 1e-15 })
    -- 'none' fused: the gradient of the sum times the scale
    local loss, n1 = F.margin_ranking_loss_fused(x1, x2, y, { reduction = "none", scale = -2 })
    _, g1 = ranking_reference(X1, X2, Y, 0, -2)
    H.assert_close(n1, g1, { rtol = 1e-15 })
    assert.are.same({ 12 }, loss:size())
  end)

  it("has the gradient of central differences in f64 for both inputs", function()
    local x1, x2, y = ranking_inputs(9, 31)
    for _, m in ipairs { 0, 0.5 } do
      for _, r in ipairs { "mean", "sum" } do
        local o = { margin = m, reduction = r }
        local _, g1, g2 = F.margin_ranking_loss_fused(x1, x2, y, o)
        H.gradcheck(function() return F.margin_ranking_loss(x1, x2, y, o) end, x1, g1, { what = r .. " x1" })
        H.gradcheck(function() return F.margin_ranking_loss(x1, x2, y, o) end, x2, g2, { what = r .. " x2" })
      end
    end
  end)

  it("passes the gradient at the kink u = 0 (clamp_min's convention) and takes y as it is", function()
    -- u = −y·(x1 − x2) + m: (1) y = 1, x1 − x2 = 0.5, m = 0.5 → u = 0: ℓ = 0, ∂ℓ/∂x1 = −1
    -- (2) y = 0 → u = m = 0.5: ℓ = 0.5, ∂ℓ/∂x1 = −0 (3) y = 2, x1 − x2 = −1 → u = 2.5, ∂ℓ/∂x1 = −2
    -- (4) y = −3, x1 − x2 = −1 → u = −2.5: ℓ = 0, no gradient
    local x1 = ploss.tensor({ 1.5, 0, 0, 0 }, { dtype = "f64" })
    local x2 = ploss.tensor({ 1, 7, 1, 1 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, 0, 2, -3 }, { dtype = "f64" })
    local loss, g1, g2 = F.margin_ranking_loss_fused(x1, x2, y, { margin = 0.5, reduction = "none" })
    H.assert_equal(loss, { 0, 0.5, 2.5, 0 })
    H.assert_equal(g1, { -1, 0, -2, 0 })
    H.assert_equal(g2, { 1, 0, 2, 0 })
  end)

  it("propagates NaN as PyTorch: a NaN score gives a NaN loss and a zero gradient, a NaN y NaN gradients", function()
    local x1 = ploss.tensor({ NAN, 1, 2, 0 }, { dtype = "f64" })
    local x2 = ploss.tensor({ 0, NAN, 1, 0 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, -1, NAN, 1 }, { dtype = "f64" })
    local loss, g1, g2 = F.margin_ranking_loss_fused(x1, x2, y, { reduction = "none", margin = 1 })
    H.assert_close(loss, { NAN, NAN, NAN, 1 })
    H.assert_close(g1, { 0, 0, NAN, -1 })
    H.assert_close(g2, { 0, 0, NAN, 1 })
    local mean = F.margin_ranking_loss(x1, x2, y)
    assert.is_true(mean ~= mean)
    -- a NaN upstream gradient where the hinge is inactive is not read (autograd's where)
    local b1 = F.margin_ranking_loss_backward(ploss.tensor({ 3 }, { dtype = "f64" }), ploss.tensor({ 0 }, { dtype = "f64" }),
      ploss.tensor({ 1 }, { dtype = "f64" }), ploss.tensor({ NAN }, { dtype = "f64" }), { reduction = "none" })
    H.assert_equal(b1, { 0 })
  end)

  it("takes scores of any shape (0-d, N×M, strided views) with a loss of their shape for 'none'", function()
    local x1, x2, y = ranking_inputs(24, 41)
    local a, b, t = x1:view(4, 6), x2:view(4, 6), y:view(4, 6)
    local loss, g1, g2 = F.margin_ranking_loss_fused(a, b, t, { margin = 0.25, reduction = "none" })
    assert.are.same({ 4, 6 }, loss:size())
    assert.are.same({ 4, 6 }, g2:size())
    local l1, h1, h2 = F.margin_ranking_loss_fused(x1, x2, y, { margin = 0.25, reduction = "none" })
    H.assert_equal(loss:flat(), l1:flat())
    H.assert_equal(g1:flat(), h1:flat())
    H.assert_equal(g2:flat(), h2:flat())
    -- transposed inputs, a sliced target and transposed gradient outputs
    local at, bt = a:t():contiguous():t(), b:t():contiguous():t()
    local tw = ploss.zeros({ 4, 12 }, { dtype = "i64" }):narrow(2, 3, 6):copy(t:long())
    local o1 = ploss.empty({ 6, 4 }, { dtype = "f64" }):t()
    local m1, k1, k2 = F.margin_ranking_loss_fused(at, bt, tw, { margin = 0.25, grad_input1 = o1 })
    H.assert_close(m1, reduce(l1:flat(), "mean"), { rtol = 1e-15 })
    local function mean_of(v)
      local r = {}
      for i, x in ipairs(v) do r[i] = x / 24 end
      return r
    end
    assert.are.equal(o1, k1)
    H.assert_close(o1:contiguous():flat(), mean_of(h1:flat()), { rtol = 1e-15 })
    H.assert_close(k2:flat(), mean_of(h2:flat()), { rtol = 1e-15 })
    -- 0-d scores
    local z, z1, z2 = F.margin_ranking_loss_fused(ploss.tensor(1, { dtype = "f64" }), ploss.tensor(3, { dtype = "f64" }),
      ploss.tensor(1, { dtype = "f64" }), { reduction = "none" })
    assert.are.same({}, z:size())
    assert.are.equal(2, z:item())
    assert.are.equal(-1, z1:item())
    assert.are.equal(1, z2:item())
  end)

  it("computes f32, f16 and bf16 as the f64 of the rounded inputs; gradients in the input dtype", function()
    local x1, x2, y = ranking_inputs(50, 61)
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local a, b = x1:type(dtype), x2:type(dtype)
      local rl, r1, r2 = F.margin_ranking_loss_fused(a:double(), b:double(), y, { margin = 0.25 })
      local loss, g1, g2 = ploss.MarginRankingLoss { margin = 0.25 }(a, b, y:type(dtype))
      assert.are.equal(dtype, g1:dtype())
      H.assert_close(loss, rl, { rtol = 1e-6, what = dtype .. " loss" })
      -- the gradients are ±1/50 or 0: exact in f32, rounded once in f16/bf16
      local t = H.tol[dtype]
      H.assert_close(g1:double(), r1, { rtol = t.rtol, atol = t.atol, what = dtype })
      H.assert_close(g2:double(), r2, { rtol = t.rtol, atol = t.atol, what = dtype })
      assert.are.equal("f32", F.margin_ranking_loss(a, b, y, { reduction = "none" }):dtype())
    end
  end)

  it("gives an empty batch a NaN mean, a zero sum and empty gradients; is deterministic", function()
    local e = ploss.empty({ 0 }, { dtype = "f32" })
    local loss, g1 = ploss.MarginRankingLoss {}(e, e:clone(), e:clone())
    assert.is_true(loss ~= loss)
    assert.are.same({ 0 }, g1:size())
    assert.are.equal(0, F.margin_ranking_loss(e, e:clone(), e:clone(), { reduction = "sum" }))
    local x1, x2, y = ranking_inputs(20000, 3)
    local a, b = x1:float(), x2:float()
    local l1, f1 = F.margin_ranking_loss_fused(a, b, y, { margin = 0.5 })
    local l2, f2 = F.margin_ranking_loss_fused(a, b, y, { margin = 0.5 })
    assert.are.equal(l1, l2)
    H.assert_equal(f1, f2)
  end)

  it("refuses bad input with an error naming the argument, writing nothing", function()
    local x1, x2, y = ranking_inputs(4, 9)
    local out = ploss.empty({}, { dtype = "f64" })
    local g = { ploss.empty({ 4 }, { dtype = "f64" }), ploss.empty({ 4 }, { dtype = "f64" }) }
    local fo = { out = out, grad_input1 = g[1], grad_input2 = g[2] }
    local function fused(a, b, t, extra) return F.margin_ranking_loss_fused(a, b, t, with(fo, extra or {})) end
    H.expect_error(function() fused(x1, ploss.randn({ 5 }, { dtype = "f64" }), y) end,
      { "input2: expected [4] (the shape of input1)", "PLOSS_ERR_SHAPE" }, out, g[1], g[2])
    -- broadcasting (PyTorch's same rank, sizes 1) is refused
    H.expect_error(function() fused(x1, ploss.randn({ 1 }, { dtype = "f64" }), y) end, "input2: expected [4]", out, g[1])
    H.expect_error(function() fused(x1, x2, ploss.ones({ 4, 1 }, { dtype = "f64" })) end,
      "target: expected [4] (the shape of input1)", out, g[1], g[2])
    H.expect_error(function() fused(x1, x2:float(), y) end, { "input2: expected f64, got f32", "PLOSS_ERR_DTYPE" }, out, g[1])
    H.expect_error(function() fused(x1:long(), x2:long(), y) end, "input1: expected scores of dtype f32", out, g[1])
    H.expect_error(function() fused(x1, x2, ploss.ones({ 4 }, { dtype = "u8" })) end,
      { "target: expected ±1 labels of dtype f32, f16, bf16, f64, i64 or i32, got u8", "PLOSS_ERR_DTYPE" }, out, g[1])
    H.expect_error(function() fused(x1, x2, y, { grad_input2 = ploss.empty({ 2, 2 }, { dtype = "f64" }) }) end,
      "grad_input2: expected [4] (the shape of input2)", out, g[1])
    H.expect_error(function() fused(x1, x2, y, { grad_input1 = ploss.empty({ 4 }) }) end, "grad_input1: expected f64", out, g[2])
    H.expect_error(function() fused(x1, x2, y, { grad_input2 = g[1] }) end, "PLOSS_ERR_ALIAS", out, g[1])
    H.expect_error(function() fused(x1, x2, y, { grad_input1 = x2 }) end, { "grad_input1", "PLOSS_ERR_ALIAS" }, out, g[2])
    H.expect_error(function() fused(x1, x2, y, { grad_input1 = y }) end, { "grad_input1", "PLOSS_ERR_ALIAS" }, out, g[2])
    H.expect_error(function() fused(x1, x2, y, { out = ploss.empty({ 4 }, { dtype = "f64" }) }) end,
      "opts.out: expected a 0-d tensor or shape [1]", g[1], g[2])
    H.expect_error(function() fused(x1, x2, y, { reduction = "none", out = ploss.empty({ 3 }, { dtype = "f64" }) }) end,
      "opts.out: expected [4] (the shape of input1)", g[1], g[2])
    H.expect_error(function()
      F.margin_ranking_loss_backward(x1, x2, y, ploss.ones({ 3 }, { dtype = "f64" }),
        { grad_input1 = g[1], grad_input2 = g[2], reduction = "none" })
    end, "gradOutput: expected [4] (the shape of input1)", g[1], g[2])
    H.expect_error(function() fused(x1, x2, y, { margin = 1 / 0 }) end, "opts.margin: inf is not a finite number", out, g[1])
    H.expect_error(function() fused(x1, x2, y, { reduction = "batchmean" }) end, "reduction", out, g[1])
    H.expect_error(function() ploss.MarginRankingLoss { inplace = true } end, "has no in-place gradient")
    H.expect_error(function() ploss.MarginRankingLoss {}:forward(x1, x2) end, "target: expected a ploss tensor")
    -- the C entry point: a NULL gradient
    local C = ploss.C
    local ffi = require "ffi"
    local o = ffi.new("ploss_margin_ranking_loss_opts")
    C.ploss_margin_ranking_loss_opts_init(o)
    assert.are.equal(C.PLOSS_ERR_INVALID_ARGUMENT,
      C.ploss_margin_ranking_loss_fused(x1:context(), x1:dl(), x2:dl(), y:dl(), o, out:dl(), g[1]:dl(), nil))
    assert.truthy(ffi.string(C.ploss_last_error()):find("grad_input2: tensor is NULL", 1, true))
  end)
end)

---------------------------------------------------------------------------------------
-- CosineEmbeddingLoss
---------------------------------------------------------------------------------------

describe("CosineEmbeddingLoss", function()
  it("gives the values derived by hand, with Torch7's name as an alias", function()
    -- pair 1: (3, 4)·(4, 3) = 24, norms 5 and 5: cos = 24/25 (to 1e-12), y = 1 → ℓ = 1/25
    -- pair 2: (1, 0)·(1, 1) = 1, cos = 1/√2, y = −1, m = 0.5 → ℓ = 1/√2 − 0.5
    -- pair 3: orthogonal, y = −1 → cos − m = −0.5 → ℓ = 0
    local x1 = ploss.tensor({ { 3, 4 }, { 1, 0 }, { 0, 2 } }, { dtype = "f64" })
    local x2 = ploss.tensor({ { 4, 3 }, { 1, 1 }, { 5, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 1, -1, -1 }, { dtype = "i64" })
    assert.are.equal(ploss.CosineEmbeddingLoss, ploss.CosineEmbeddingCriterion)
    local crit = ploss.CosineEmbeddingCriterion { margin = 0.5, reduction = "none" }
    H.assert_close(crit:forward(x1, x2, y), { 1 / 25, 1 / math.sqrt(2) - 0.5, 0 }, { rtol = 1e-10 })
    local g1, g2 = crit:backward(x1, x2, y)
    -- pair 1: ∂ℓ/∂x1 = −(x2/25 − (24/25)·x1/25) = −(4 − 72/25, 3 − 96/25)/25
    local r = g1:totable()
    H.assert_close(r[1], { -(4 - 72 / 25) / 25, -(3 - 96 / 25) / 25 }, { rtol = 1e-10 })
    -- pair 2: ∂ℓ/∂x2 = x1/√2 − cos·x2/2 = (1/√2 − 1/(2√2), −1/(2√2))
    H.assert_close(g2:totable()[2], { 1 / math.sqrt(2) - 1 / (2 * math.sqrt(2)), -1 / (2 * math.sqrt(2)) }, { rtol = 1e-10 })
    H.assert_equal(r[3], { 0, 0 })
    -- the default margin 0, mean: (1/25 + 1/√2 + 0)/3 (pair 3 sits at the kink cos − m = 0)
    H.assert_close(F.cosine_embedding_loss(x1, x2, y), (1 / 25 + 1 / math.sqrt(2)) / 3, { rtol = 1e-10 })
    assert.truthy(tostring(ploss.CosineEmbeddingLoss { margin = 0.1 }):find("margin=0.1", 1, true))
  end)

  it("matches PyTorch's definition for every margin and reduction, float and integer labels", function()
    local x1, x2, y = cosine_inputs(23, 7, 13)
    local X1, X2, Y = rows(x1), rows(x2), flat(y)
    for _, m in ipairs { 0, 0.3, -0.5 } do
      for _, r in ipairs(REDUCTIONS) do
        for _, ydt in ipairs { "f64", "f32", "i64", "i32" } do
          local o = { margin = m, reduction = r }
          local what = string.format("margin %g %s y %s", m, r, ydt)
          local yt = y:type(ydt)
          local losses, g1, g2 = cosine_reference(X1, X2, Y, m, weight(r, 23))
          local loss, f1, f2 = F.cosine_embedding_loss_fused(x1, x2, yt, o)
          H.assert_close(r == "none" and loss or { loss }, r == "none" and losses or { reduce(losses, r) },
            { rtol = 1e-12, atol = 1e-14, what = what .. " loss" })
          H.assert_close(f1, g1, { rtol = 1e-10, atol = 1e-14, what = what .. " grad 1" })
          H.assert_close(f2, g2, { rtol = 1e-10, atol = 1e-14, what = what .. " grad 2" })
          local lf = F.cosine_embedding_loss(x1, x2, yt, o)
          H.assert_equal(r == "none" and lf or { lf }, r == "none" and loss or { loss }, { what = what .. " forward" })
          local b1, b2 = F.cosine_embedding_loss_backward(x1, x2, yt, nil, o)
          H.assert_equal(b1, f1, { what = what .. " backward 1" })
          H.assert_equal(b2, f2, { what = what .. " backward 2" })
        end
      end
    end
  end)

  it("backward takes the upstream gradient (a number, a tensor per pair) and fused a scale", function()
    local x1, x2, y = cosine_inputs(8, 5, 17)
    local X1, X2, Y = rows(x1), rows(x2), flat(y)
    local up = {}
    for i = 1, 8 do up[i] = (i - 4) / 3 end
    local _, g1, g2 = cosine_reference(X1, X2, Y, 0.1, up)
    local b1, b2 = F.cosine_embedding_loss_backward(x1, x2, y, ploss.tensor(up, { dtype = "f64" }),
      { margin = 0.1, reduction = "none" })
    H.assert_close(b1, g1, { rtol = 1e-12, atol = 1e-15 })
    H.assert_close(b2, g2, { rtol = 1e-12, atol = 1e-15 })
    _, g1, g2 = cosine_reference(X1, X2, Y, 0, 2.5 / 8)
    local c1, c2 = ploss.CosineEmbeddingLoss {}:backward(x1, x2, y, 2.5)
    H.assert_close(c1, g1, { rtol = 1e-12, atol = 1e-15 })
    H.assert_close(c2, g2, { rtol = 1e-12, atol = 1e-15 })
    local _, s1 = ploss.CosineEmbeddingLoss {}(x1, x2, y, 2.5)
    H.assert_close(s1, g1, { rtol = 1e-12, atol = 1e-15 })
    local loss, n1 = F.cosine_embedding_loss_fused(x1, x2, y, { reduction = "none", scale = -2 })
    _, g1 = cosine_reference(X1, X2, Y, 0, -2)
    H.assert_close(n1, g1, { rtol = 1e-12, atol = 1e-15 })
    assert.are.same({ 8 }, loss:size())
  end)

  it("has the gradient of central differences in f64 for both inputs", function()
    local x1, x2, y = cosine_inputs(6, 4, 71)
    for _, m in ipairs { 0, -0.2 } do
      for _, r in ipairs { "mean", "sum" } do
        local o = { margin = m, reduction = r }
        -- no dissimilar pair within 1e-3 of its kink cos = m (1 − ℓ of y = 1 is the cosine)
        local Y = flat(y)
        local as_similar = cosine_reference(rows(x1), rows(x2), { 1, 1, 1, 1, 1, 1 }, m, 1)
        for i = 1, 6 do
          if Y[i] == -1 then assert.is_true(math.abs(1 - as_similar[i] - m) > 1e-3, "pair " .. i .. " at the kink") end
        end
        local _, g1, g2 = F.cosine_embedding_loss_fused(x1, x2, y, o)
        H.gradcheck(function() return F.cosine_embedding_loss(x1, x2, y, o) end, x1, g1, { what = r .. " x1" })
        H.gradcheck(function() return F.cosine_embedding_loss(x1, x2, y, o) end, x2, g2, { what = r .. " x2" })
      end
    end
  end)

  it("gives zero vectors cos = 0 (aten's eps), finite gradients, never NaN", function()
    local x1 = ploss.tensor({ { 0, 0, 0 }, { 0, 0, 0 }, { 1, 2, 2 }, { 0, 0, 0 } }, { dtype = "f64" })
    local x2 = ploss.tensor({ { 1, 2, 2 }, { 0, 0, 0 }, { 0, 0, 0 }, { 3, 0, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 1, 1, -1, -1 }, { dtype = "f64" })
    local loss, g1, g2 = F.cosine_embedding_loss_fused(x1, x2, y, { reduction = "none", margin = -0.5 })
    -- y = 1: 1 − 0; y = −1: max(0, 0 − (−0.5)) = 0.5
    H.assert_equal(loss, { 1, 1, 0.5, 0.5 })
    local losses, r1, r2 = cosine_reference(x1:totable(), x2:totable(), y:totable(), -0.5, 1)
    H.assert_close(g1, r1, { rtol = 1e-12, atol = 1e-300 })
    H.assert_close(g2, r2, { rtol = 1e-12, atol = 1e-300 })
    for _, v in ipairs(g1:flat()) do assert.is_true(v == v and math.abs(v) < math.huge) end
    for _, v in ipairs(g2:flat()) do assert.is_true(v == v and math.abs(v) < math.huge) end
    -- a zero x1 against x2: ∂cos/∂x1 = x2/d (d = √((0 + ε)(9 + ε)) = 3e-6): −1e6/3 × x2 for y = 1
    H.assert_close(g1:totable()[1], { -1 / 3e-6 * 1, -1 / 3e-6 * 2, -1 / 3e-6 * 2 }, { rtol = 1e-9 })
    assert.are.equal(4, #losses)
  end)

  it("takes a norm past the f64 range as PyTorch: its squared norm +∞, the cosine 0 (docs: numerics)", function()
    local x2 = ploss.tensor({ { 0.6, 0.8, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 1 }, { dtype = "f64" })
    for _, sc in ipairs { 1, 1e150 } do
      H.assert_close(F.cosine_embedding_loss(ploss.tensor({ { sc, 0, 0 } }, { dtype = "f64" }), x2, y), 0.4, { rtol = 1e-9 })
    end
    assert.are.equal(1, F.cosine_embedding_loss(ploss.tensor({ { 1e160, 0, 0 } }, { dtype = "f64" }), x2, y))
    -- the product |x1|²·|x2|² overflows first: the norms multiplied past ~1.3e154
    local a77, a78 = ploss.tensor({ { 1e77, 0, 0 } }, { dtype = "f64" }), ploss.tensor({ { 1e78, 0, 0 } }, { dtype = "f64" })
    H.assert_close(F.cosine_embedding_loss(a77, a77:clone(), y), 0, { atol = 1e-12 })
    assert.are.equal(1, F.cosine_embedding_loss(a78, a78:clone(), y))
  end)

  it("passes the gradient at the kink cos = m and gives other labels a zero loss and gradient", function()
    -- pair 1: orthogonal, y = −1, m = 0: cos − m = 0 → ℓ = 0, ∂ℓ/∂x1 = x2/d (clamp_min passes)
    -- pair 2: y = 0 and pair 3: y = 2: ℓ = 0, gradients 0
    local x1 = ploss.tensor({ { 1, 0 }, { 1, 2 }, { 3, 1 } }, { dtype = "f64" })
    local x2 = ploss.tensor({ { 0, 2 }, { 2, 1 }, { 1, 1 } }, { dtype = "f64" })
    local y = ploss.tensor({ -1, 0, 2 }, { dtype = "f64" })
    local loss, g1, g2 = F.cosine_embedding_loss_fused(x1, x2, y, { reduction = "none" })
    H.assert_equal(loss, { 0, 0, 0 })
    local d = math.sqrt((1 + EPS) * (4 + EPS))
    H.assert_close(g1, { 0, 2 / d, 0, 0, 0, 0 }, { rtol = 1e-15 })
    H.assert_close(g2, { 1 / d, 0, 0, 0, 0, 0 }, { rtol = 1e-15 })
  end)

  it("propagates NaN as PyTorch: a NaN loss for y = ±1 (0 otherwise), NaN gradients for that pair only", function()
    local x1 = ploss.tensor({ { NAN, 1 }, { 1, 0 }, { 2, NAN }, { 1, 1 } }, { dtype = "f64" })
    local x2 = ploss.tensor({ { 1, 1 }, { 0, 1 }, { 1, 1 }, { 1, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 1, -1, 0, 1 }, { dtype = "f64" })
    local loss, g1, g2 = F.cosine_embedding_loss_fused(x1, x2, y, { reduction = "none" })
    local l = loss:totable()
    assert.is_true(l[1] ~= l[1])
    assert.are.equal(0, l[2])
    assert.are.equal(0, l[3])
    H.assert_close(l[4], 1 - 1 / math.sqrt((2 + EPS) * (1 + EPS)), { rtol = 1e-14 })
    local a, b = g1:totable(), g2:totable()
    for _, i in ipairs { 1, 3 } do
      for j = 1, 2 do assert.is_true(a[i][j] ~= a[i][j] and b[i][j] ~= b[i][j], "pair " .. i) end
    end
    for _, i in ipairs { 2, 4 } do
      for j = 1, 2 do assert.is_true(a[i][j] == a[i][j] and b[i][j] == b[i][j], "pair " .. i) end
    end
    local mean = F.cosine_embedding_loss(x1, x2, y)
    assert.is_true(mean ~= mean)
  end)

  it("takes PyTorch's unbatched form: D inputs, a 0-d label, a 0-d loss for 'none'", function()
    local x1, x2 = ploss.tensor({ 1, 2, -1 }, { dtype = "f64" }), ploss.tensor({ 0.5, 1, 3 }, { dtype = "f64" })
    for _, lab in ipairs { 1, -1 } do
      local y0 = ploss.tensor(lab, { dtype = "f64" })
      local b1, b2 = x1:view(1, 3), x2:view(1, 3)
      local yb = ploss.tensor({ lab }, { dtype = "f64" })
      for _, r in ipairs(REDUCTIONS) do
        local loss, g1, g2 = F.cosine_embedding_loss_fused(x1, x2, y0, { reduction = r, margin = -0.1 })
        local lb, h1, h2 = F.cosine_embedding_loss_fused(b1, b2, yb, { reduction = r, margin = -0.1 })
        if r == "none" then
          assert.are.same({}, loss:size())
          H.assert_equal({ loss:item() }, lb)
        else
          assert.are.equal(lb, loss)
        end
        assert.are.same({ 3 }, g1:size())
        H.assert_equal(g1, h1:flat())
        H.assert_equal(g2, h2:flat())
      end
      local crit = ploss.CosineEmbeddingLoss { reduction = "none" }
      assert.are.same({}, crit:forward(x1, x2, y0):size())
      local c1 = crit:backward(x1, x2, y0)
      assert.are.same({ 3 }, c1:size())
    end
    -- PyTorch's rule: a 1-D label needs N×D inputs, a 0-d one D inputs
    H.expect_error(function() F.cosine_embedding_loss(x1, x2, ploss.tensor({ 1 }, { dtype = "f64" })) end,
      "target: expected a 0-d tensor (one label for D inputs")
    H.expect_error(function() F.cosine_embedding_loss(x1:view(1, 3), x2:view(1, 3), ploss.tensor(1, { dtype = "f64" })) end,
      "target: expected [1] (one label per row of input1)")
  end)

  it("reads strided views; f32, f16 and bf16 in fp32; an empty batch; deterministic", function()
    local x1, x2, y = cosine_inputs(10, 6, 91)
    local loss, g1, g2 = F.cosine_embedding_loss_fused(x1, x2, y, { margin = 0.2 })
    local at = x1:t():contiguous():t()
    local bw = ploss.zeros({ 10, 13 }, { dtype = "f64" }):narrow(2, 5, 6):copy(x2)
    local yw = ploss.zeros({ 20 }, { dtype = "i32" }):view(10, 2):select(2, 2):copy(y:int())
    local o2 = ploss.empty({ 6, 10 }, { dtype = "f64" }):t()
    local l2, s1, s2 = F.cosine_embedding_loss_fused(at, bw, yw, { margin = 0.2, grad_input2 = o2 })
    H.assert_equal({ l2 }, { loss })
    H.assert_equal(s1, g1)
    H.assert_equal(o2, g2)
    H.assert_equal(s2, g2)
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local a, b = x1:type(dtype), x2:type(dtype)
      local rl, r1, r2 = F.cosine_embedding_loss_fused(a:double(), b:double(), y, { margin = 0.2 })
      local dl, d1, d2 = ploss.CosineEmbeddingLoss { margin = 0.2 }(a, b, y)
      assert.are.equal(dtype, d1:dtype())
      local t = H.tol[dtype]
      H.assert_close(dl, rl, { rtol = 1e-6, what = dtype .. " loss" })
      H.assert_close(d1:double(), r1, { rtol = t.rtol, atol = t.atol, what = dtype })
      H.assert_close(d2:double(), r2, { rtol = t.rtol, atol = t.atol, what = dtype })
    end
    local e = ploss.empty({ 0, 4 }, { dtype = "f32" })
    local el, eg = ploss.CosineEmbeddingLoss {}(e, e:clone(), ploss.empty({ 0 }, { dtype = "i64" }))
    assert.is_true(el ~= el)
    assert.are.same({ 0, 4 }, eg:size())
    local big1, big2, bigy = cosine_inputs(700, 33, 5)
    local f1, f2 = big1:float(), big2:float()
    local m1, k1 = F.cosine_embedding_loss_fused(f1, f2, bigy)
    local m2, k2 = F.cosine_embedding_loss_fused(f1, f2, bigy)
    assert.are.equal(m1, m2)
    H.assert_equal(k1, k2)
  end)

  it("refuses bad input with an error naming the argument, writing nothing", function()
    local x1, x2, y = cosine_inputs(4, 3, 9)
    local out = ploss.empty({}, { dtype = "f64" })
    local g = { ploss.empty({ 4, 3 }, { dtype = "f64" }), ploss.empty({ 4, 3 }, { dtype = "f64" }) }
    local fo = { out = out, grad_input1 = g[1], grad_input2 = g[2] }
    local function fused(a, b, t, extra) return F.cosine_embedding_loss_fused(a, b, t, with(fo, extra or {})) end
    H.expect_error(function() fused(x1, ploss.randn({ 4, 5 }, { dtype = "f64" }), y) end,
      { "input2: expected [4, 3] (the shape of input1)", "PLOSS_ERR_SHAPE" }, out, g[1], g[2])
    H.expect_error(function() fused(ploss.randn({ 2, 2, 3 }, { dtype = "f64" }), x2, y) end,
      "input1: expected N×D embeddings (2 dims) or one embedding of D values (1 dim)", out, g[1])
    H.expect_error(function() fused(x1, x2, ploss.ones({ 5 }, { dtype = "f64" })) end,
      "target: expected [4] (one label per row of input1)", out, g[1], g[2])
    H.expect_error(function() fused(x1, x2, ploss.ones({ 4 }, { dtype = "u8" })) end, "target: expected ±1 labels of dtype", out, g[1])
    H.expect_error(function() fused(x1, x2:float(), y) end, "input2: expected f64, got f32", out, g[1])
    H.expect_error(function() fused(x1, x2, y, { grad_input2 = ploss.empty({ 3, 4 }, { dtype = "f64" }) }) end,
      "grad_input2: expected [4, 3] (the shape of input2)", out, g[1])
    H.expect_error(function() fused(x1, x2, y, { grad_input1 = x1 }) end, { "grad_input1", "PLOSS_ERR_ALIAS" }, out, g[2])
    H.expect_error(function() fused(x1, x2, y, { grad_input2 = g[1] }) end, "PLOSS_ERR_ALIAS", out, g[1])
    H.expect_error(function() fused(x1, x2, y, { out = ploss.empty({}, { dtype = "f32" }) }) end, "opts.out: expected f64", g[1])
    H.expect_error(function()
      F.cosine_embedding_loss_backward(x1, x2, y, ploss.ones({ 3 }, { dtype = "f64" }),
        { grad_input1 = g[1], grad_input2 = g[2], reduction = "none" })
    end, "gradOutput: expected [4] (one value per sample", g[1], g[2])
    H.expect_error(function() fused(x1, x2, y, { margin = 0 / 0 }) end, "opts.margin: nan is not a finite number", out, g[1])
    H.expect_error(function() ploss.CosineEmbeddingLoss { inplace = true } end, "has no in-place gradient")
    H.expect_error(function() ploss.CosineEmbeddingLoss { margin = "a" } end, "margin")
  end)
end)

---------------------------------------------------------------------------------------
-- L1HingeEmbeddingLoss (Torch7's L1HingeEmbeddingCriterion, for N pairs)
---------------------------------------------------------------------------------------

-- Torch7's definition per pair: d = Σ|x1 − x2|; y = −1: max(0, m − d) and the gradient
-- −sign(x1 − x2) unless d > m; any other y: d and sign(x1 − x2); x2's gradient the negative.
local function sign(t) return t > 0 and 1 or t < 0 and -1 or 0 end
local function l1_reference(X1, X2, Y, margin, w)
  local losses, g1, g2 = {}, {}, {}
  for i = 1, #X1 do
    local d = 0
    for j = 1, #X1[i] do d = d + math.abs(X1[i][j] - X2[i][j]) end
    local c
    if Y[i] == -1 then
      losses[i], c = math.max(0, margin - d), d > margin and 0 or -1
    else
      losses[i], c = d, 1
    end
    g1[i], g2[i] = {}, {}
    for j = 1, #X1[i] do
      g1[i][j] = factor(w, i) * c * sign(X1[i][j] - X2[i][j])
      g2[i][j] = -g1[i][j]
    end
  end
  return losses, g1, g2
end

describe("L1HingeEmbeddingLoss", function()
  it("gives the values derived by hand, with Torch7's name as an alias", function()
    assert.are.equal(ploss.L1HingeEmbeddingLoss, ploss.L1HingeEmbeddingCriterion)
    local x1 = ploss.tensor({ { 1, 2, 3 }, { 0, 0, 0 }, { 1, 1, 1 }, { 2, 0, 0 } }, { dtype = "f64" })
    local x2 = ploss.tensor({ { 1, 0, 4 }, { 0, 0, 0 }, { 0.5, 1, 1.25 }, { 0, 0, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 1, -1, -1, -1 }, { dtype = "f64" })
    -- d = 3, 0, 0.75, 2: losses 3, 1 − 0, 1 − 0.75, 0 (d > m)
    local loss, g1, g2 = F.l1_hinge_embedding_loss_fused(x1, x2, y, { reduction = "none" })
    H.assert_equal(loss, { 3, 1, 0.25, 0 })
    H.assert_equal(g1, { { 0, 1, -1 }, { 0, 0, 0 }, { -1, 0, 1 }, { 0, 0, 0 } })
    H.assert_equal(g2, { { 0, -1, 1 }, { 0, 0, 0 }, { 1, 0, -1 }, { 0, 0, 0 } })
    -- margin 2: d = 2 is the kink, the loss 0 and the gradient passing (Torch7's d > m test)
    local crit = ploss.L1HingeEmbeddingCriterion { margin = 2 }
    assert.are.equal((3 + 2 + 1.25 + 0) / 4, crit:forward(x1, x2, y))
    local b1 = crit:backward(x1, x2, y)
    H.assert_equal(b1, { { 0, 0.25, -0.25 }, { 0, 0, 0 }, { -0.25, 0, 0.25 }, { -0.25, 0, 0 } })
    -- Torch7's single pair: D inputs, a 0-d label
    local u, v = ploss.tensor({ 1, 2 }, { dtype = "f64" }), ploss.tensor({ 0, 0 }, { dtype = "f64" })
    assert.are.equal(0, F.l1_hinge_embedding_loss(u, v, ploss.tensor(-1, { dtype = "f64" })))
    assert.are.equal(3, F.l1_hinge_embedding_loss(u, v, ploss.tensor(1, { dtype = "f64" })))
    assert.are.equal(2, F.l1_hinge_embedding_loss(u, v, ploss.tensor(-1, { dtype = "f64" }), { margin = 5 }))
  end)

  it("matches Torch7's definition for every margin and reduction, float and integer labels", function()
    local x1, x2, y = H.l1_hinge_pairs(23, 6, 19)
    local X1, X2, Y = rows(x1), rows(x2), flat(y)
    for _, yt in ipairs { y, y:long() } do
      for _, m in ipairs { 3, 1 } do
        for _, r in ipairs(REDUCTIONS) do
          local o = { margin = m, reduction = r }
          local losses, g1, g2 = l1_reference(X1, X2, Y, m, weight(r, 23))
          local loss, f1, f2 = F.l1_hinge_embedding_loss_fused(x1, x2, yt, o)
          H.assert_close(r == "none" and loss or { loss }, r == "none" and losses or { reduce(losses, r) },
            { rtol = 1e-12, what = "loss " .. r })
          H.assert_close(f1, g1, { rtol = 1e-12, atol = 1e-300, what = "grad1 " .. r })
          H.assert_close(f2, g2, { rtol = 1e-12, atol = 1e-300, what = "grad2 " .. r })
          local lf = F.l1_hinge_embedding_loss(x1, x2, yt, o)
          H.assert_equal(r == "none" and lf or { lf }, r == "none" and loss or { loss })
          local b1, b2 = F.l1_hinge_embedding_loss_backward(x1, x2, yt, nil, o)
          H.assert_equal(b1, f1)
          H.assert_equal(b2, f2)
        end
      end
    end
  end)

  it("has the gradient of central differences in f64 for both inputs (away from the kinks)", function()
    local x1, x2, y = H.l1_hinge_pairs(6, 4, 71)
    for _, r in ipairs { "mean", "sum" } do
      local o = { margin = 2, reduction = r }
      local _, g1, g2 = F.l1_hinge_embedding_loss_fused(x1, x2, y, o)
      H.gradcheck(function() return F.l1_hinge_embedding_loss(x1, x2, y, o) end, x1, g1, { what = r .. " x1" })
      H.gradcheck(function() return F.l1_hinge_embedding_loss(x1, x2, y, o) end, x2, g2, { what = r .. " x2" })
    end
  end)

  it("takes the upstream gradient per pair, propagates NaN, computes 16-bit as the f64 of the rounded inputs", function()
    local x1, x2, y = H.l1_hinge_pairs(9, 5, 23)
    local up = ploss.randn({ 9 }, { dtype = "f64", seed = 5 })
    local _, g1, g2 = l1_reference(rows(x1), rows(x2), flat(y), 2.5, flat(up))
    local b1, b2 = F.l1_hinge_embedding_loss_backward(x1, x2, y, up, { reduction = "none", margin = 2.5 })
    H.assert_close(b1, g1, { rtol = 1e-12, atol = 1e-300 })
    H.assert_close(b2, g2, { rtol = 1e-12, atol = 1e-300 })
    -- a NaN element: a NaN loss, NaN gradients where its difference is NaN, for both labels
    local n1 = ploss.tensor({ { NAN, 1 }, { NAN, 1 } }, { dtype = "f64" })
    local n2 = ploss.tensor({ { 0, 0 }, { 0, 0 } }, { dtype = "f64" })
    local nl, ng = F.l1_hinge_embedding_loss_fused(n1, n2, ploss.tensor({ 1, -1 }, { dtype = "f64" }), { reduction = "none" })
    for _, v in ipairs(nl:flat()) do assert.is_true(v ~= v) end
    local gv = ng:totable()
    assert.is_true(gv[1][1] ~= gv[1][1] and gv[2][1] ~= gv[2][1])
    assert.are.same({ 1, -1 }, { gv[1][2], gv[2][2] })
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local a, b = x1:type(dtype), x2:type(dtype)
      local l, h1 = F.l1_hinge_embedding_loss_fused(a, b, y, { margin = 2.5 })
      local l64, r1 = F.l1_hinge_embedding_loss_fused(a:double(), b:double(), y, { margin = 2.5 })
      H.assert_close({ l }, { l64 }, { rtol = 1e-6, what = dtype })
      H.assert_close(h1, r1, { rtol = 1e-2, what = dtype })
      assert.are.equal(dtype, h1:dtype())
    end
  end)

  it("refuses bad input with an error naming the argument", function()
    local x1, x2, y = H.l1_hinge_pairs(4, 3, 5)
    H.expect_error(function() local l = F.l1_hinge_embedding_loss(x1, x2:narrow(2, 1, 2), y) return l end, "input2")
    H.expect_error(function() local l = F.l1_hinge_embedding_loss(x1, x2, y:narrow(1, 1, 3)) return l end, "target")
    H.expect_error(function() local c = ploss.L1HingeEmbeddingLoss { margin = 0 / 0 } return c end, "margin")
    H.expect_error(function() local c = ploss.L1HingeEmbeddingCriterion(1) return c end,
      "L1HingeEmbeddingLoss: expected a table of named options, got number (positional options are not taken: " ..
      "{margin = 1})")
  end)
end)

---------------------------------------------------------------------------------------
-- DistanceRatioLoss
---------------------------------------------------------------------------------------

-- Torch7's DistanceRatioCriterion, ℓ = X + log(e^−X + e^−Y), written as the softplus of
-- d = X − Y, with ∂ℓ/∂X = σ(d) = −∂ℓ/∂Y times the upstream factor.
local function ratio_reference(X, Y, w)
  local losses, g1, g2 = {}, {}, {}
  for i = 1, #X do
    local d = X[i] - Y[i]
    local e = math.exp(-math.abs(d))
    losses[i] = math.max(d, 0) + math.log(1 + e)
    local s = d >= 0 and 1 / (1 + e) or e / (1 + e)
    g1[i], g2[i] = factor(w, i) * s, -factor(w, i) * s
  end
  return losses, g1, g2
end

describe("DistanceRatioLoss", function()
  it("gives the values derived by hand, with Torch7's name and list form", function()
    -- d = X − Y = (−1, 0, 2): ℓ = log(1 + e^d) = (log(1 + e^−1), log 2, 2 + log(1 + e^−2)),
    -- ∂ℓ/∂X = σ(d) = (1/(1 + e), 1/2, 1/(1 + e^−2))
    local X = ploss.tensor({ 1, 2, 3 }, { dtype = "f64" })
    local Y = ploss.tensor({ 2, 2, 1 }, { dtype = "f64" })
    assert.are.equal(ploss.DistanceRatioLoss, ploss.DistanceRatioCriterion)
    local want = { math.log(1 + math.exp(-1)), math.log(2), 2 + math.log(1 + math.exp(-2)) }
    local sig = { 1 / (1 + math.exp(1)), 0.5, 1 / (1 + math.exp(-2)) }
    H.assert_close(F.distance_ratio_loss(X, Y, { reduction = "none" }), want, { rtol = 1e-15 })
    local crit = ploss.DistanceRatioCriterion()
    -- Torch7's call: the distances as one list, no target; the mean over the 3 triplets
    H.assert_close(crit:forward({ X, Y }), (want[1] + want[2] + want[3]) / 3, { rtol = 1e-15 })
    local g = crit:backward({ X, Y })
    assert.are.equal(g, crit.gradInput)
    H.assert_close(g[1], { sig[1] / 3, sig[2] / 3, sig[3] / 3 }, { rtol = 1e-15 })
    H.assert_close(g[2], { -sig[1] / 3, -sig[2] / 3, -sig[3] / 3 }, { rtol = 1e-15 })
    -- Torch7's own form of the loss, X + log(e^−X + e^−Y), where it is exact
    local xs, ys = { 1, 2, 3 }, { 2, 2, 1 }
    for i = 1, 3 do
      H.assert_close({ want[i] }, { xs[i] + math.log(math.exp(-xs[i]) + math.exp(-ys[i])) }, { rtol = 1e-14 })
    end
  end)

  it("matches the reference for every reduction: forward, backward (upstream gradient) and fused", function()
    local X, Y = ranking_inputs(41, 71)
    local XX, YY = flat(X), flat(Y)
    for i = 1, 41 do XX[i], YY[i] = math.abs(XX[i]), math.abs(YY[i]) end -- distances
    local x, y = ploss.tensor(XX, { dtype = "f64" }), ploss.tensor(YY, { dtype = "f64" })
    for _, r in ipairs(REDUCTIONS) do
      local o = { reduction = r }
      local losses, g1, g2 = ratio_reference(XX, YY, weight(r, 41))
      local loss, f1, f2 = F.distance_ratio_loss_fused(x, y, o)
      H.assert_close(r == "none" and loss or { loss }, r == "none" and losses or { reduce(losses, r) },
        { rtol = 1e-14, atol = 1e-15, what = r .. " loss" })
      H.assert_close(f1, g1, { rtol = 1e-14, atol = 1e-15, what = r .. " grad 1" })
      H.assert_close(f2, g2, { rtol = 1e-14, atol = 1e-15, what = r .. " grad 2" })
      local lf = F.distance_ratio_loss(x, y, o)
      H.assert_equal(r == "none" and lf or { lf }, r == "none" and loss or { loss }, { what = r .. " forward" })
      local b1, b2 = F.distance_ratio_loss_backward(x, y, nil, o)
      H.assert_equal(b1, f1, { what = r .. " backward 1" })
      H.assert_equal(b2, f2, { what = r .. " backward 2" })
    end
    local up = {}
    for i = 1, 41 do up[i] = (i - 20) / 8 end
    local _, g1, g2 = ratio_reference(XX, YY, up)
    local b1, b2 = F.distance_ratio_loss_backward(x, y, ploss.tensor(up, { dtype = "f64" }), { reduction = "none" })
    H.assert_close(b1, g1, { rtol = 1e-15 })
    H.assert_close(b2, g2, { rtol = 1e-15 })
    _, g1, g2 = ratio_reference(XX, YY, -1.5 / 41)
    local _, s1, s2 = ploss.DistanceRatioLoss()(x, y, -1.5)
    H.assert_close(s1, g1, { rtol = 1e-15 })
    H.assert_close(s2, g2, { rtol = 1e-15 })
  end)

  it("has the gradient of central differences in f64 for both inputs", function()
    local X, Y = ranking_inputs(9, 33)
    for _, r in ipairs { "mean", "sum" } do
      local o = { reduction = r }
      local _, g1, g2 = F.distance_ratio_loss_fused(X, Y, o)
      H.gradcheck(function() return F.distance_ratio_loss(X, Y, o) end, X, g1, { what = r .. " X" })
      H.gradcheck(function() return F.distance_ratio_loss(X, Y, o) end, Y, g2, { what = r .. " Y" })
    end
  end)

  it("stays finite for far distances (where Torch7's e^−X underflows) and follows ∞ and NaN", function()
    -- X = 800, Y = 790: Torch7's log(e^−800 + e^−790) is log 0 in f64; ℓ = 10 + log(1 + e^−10)
    local s10 = 1 / (1 + math.exp(-10))
    for _, dtype in ipairs { "f64", "f32" } do
      local X = ploss.tensor({ 800, 790, 1e30, 0 }, { dtype = dtype })
      local Y = ploss.tensor({ 790, 800, 0, 1e30 }, { dtype = dtype })
      local loss, g1, g2 = F.distance_ratio_loss_fused(X, Y, { reduction = "none" })
      H.assert_close(loss:double(), { 10 + math.log(1 + math.exp(-10)), math.log(1 + math.exp(-10)), 1e30, 0 },
        { rtol = 1e-7, what = dtype })
      H.assert_close(g1:double(), { s10, 1 - s10, 1, 0 }, { rtol = 1e-7, what = dtype })
      H.assert_close(g2:double(), { -s10, s10 - 1, -1, 0 }, { rtol = 1e-7, what = dtype })
    end
    local inf = math.huge
    local X = ploss.tensor({ inf, 1, inf, NAN }, { dtype = "f64" })
    local Y = ploss.tensor({ 1, inf, inf, 1 }, { dtype = "f64" })
    local loss, g1, g2 = F.distance_ratio_loss_fused(X, Y, { reduction = "none" })
    H.assert_close(loss, { inf, 0, NAN, NAN })
    H.assert_close(g1, { 1, 0, NAN, NAN })
    H.assert_close(g2, { -1, 0, NAN, NAN })
  end)

  it("takes distances of any shape and strides; f32, f16 and bf16 as the f64 of the rounded inputs", function()
    local X, Y = ranking_inputs(24, 43)
    local l1, h1, h2 = F.distance_ratio_loss_fused(X, Y, { reduction = "none" })
    local a, b = X:view(4, 6):t():contiguous():t(), Y:view(4, 6)
    local loss, g1, g2 = F.distance_ratio_loss_fused(a, b, { reduction = "none" })
    assert.are.same({ 4, 6 }, loss:size())
    H.assert_equal(loss:contiguous():flat(), l1:flat())
    H.assert_equal(g1:contiguous():flat(), h1:flat())
    H.assert_equal(g2:contiguous():flat(), h2:flat())
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local x, y = X:type(dtype), Y:type(dtype)
      local rl, r1, r2 = F.distance_ratio_loss_fused(x:double(), y:double())
      local m, k1, k2 = ploss.DistanceRatioLoss()(x, y)
      assert.are.equal(dtype, k1:dtype())
      H.assert_close(m, rl, { rtol = 1e-6, what = dtype .. " loss" })
      local t = H.tol[dtype]
      H.assert_close(k1:double(), r1, { rtol = t.rtol, atol = t.atol, what = dtype })
      H.assert_close(k2:double(), r2, { rtol = t.rtol, atol = t.atol, what = dtype })
    end
    local e = ploss.empty({ 0 }, { dtype = "f32" })
    local el, eg = ploss.DistanceRatioLoss()(e, e:clone())
    assert.is_true(el ~= el)
    assert.are.same({ 0 }, eg:size())
    assert.are.equal(0, F.distance_ratio_loss(e, e:clone(), { reduction = "sum" }))
  end)

  it("refuses bad input with an error naming the argument, writing nothing", function()
    local X, Y = ranking_inputs(4, 19)
    local out = ploss.empty({}, { dtype = "f64" })
    local g = { ploss.empty({ 4 }, { dtype = "f64" }), ploss.empty({ 4 }, { dtype = "f64" }) }
    local fo = { out = out, grad_d_pos = g[1], grad_d_neg = g[2] }
    local function fused(a, b, extra) return F.distance_ratio_loss_fused(a, b, with(fo, extra or {})) end
    H.expect_error(function() fused(X, ploss.randn({ 5 }, { dtype = "f64" })) end,
      { "d_neg: expected [4] (the shape of d_pos)", "PLOSS_ERR_SHAPE" }, out, g[1], g[2])
    H.expect_error(function() fused(X, Y:float()) end, { "d_neg: expected f64, got f32", "PLOSS_ERR_DTYPE" }, out, g[1])
    H.expect_error(function() fused(X:long(), Y:long()) end, "d_pos: expected scores of dtype f32", out, g[1])
    H.expect_error(function() fused(X, Y, { grad_d_neg = g[1] }) end, "PLOSS_ERR_ALIAS", out, g[1])
    H.expect_error(function() fused(X, Y, { grad_d_pos = Y }) end, { "grad_d_pos", "PLOSS_ERR_ALIAS" }, out, g[2])
    H.expect_error(function() ploss.DistanceRatioLoss():forward({ X }) end, "expected 2 inputs (d_pos, d_neg)")
    -- a Torch7 loop's target after the list is refused, never taken for the upstream gradient
    local crit = ploss.DistanceRatioCriterion()
    H.expect_error(function() crit:forward({ X, Y }, 1) end, "DistanceRatioLoss:forward: ploss.DistanceRatioLoss takes no target")
    H.expect_error(function() crit:backward({ X, Y }, 0) end, "DistanceRatioLoss:backward: ploss.DistanceRatioLoss takes no target")
    H.expect_error(function() crit:backward({ X, Y }, ploss.tensor({ -1 }, { dtype = "f64" })) end, "takes no target")
    H.expect_error(function() crit({ X, Y }, 3) end, "DistanceRatioLoss:fused: ploss.DistanceRatioLoss takes no target")
    H.expect_error(function() crit:fused({ X, Y }, 1) end, "DistanceRatioLoss:fused: ploss.DistanceRatioLoss takes no target")
    H.expect_error(function() ploss.DistanceRatioLoss():forward(X) end, "d_neg")
    H.expect_error(function() ploss.DistanceRatioLoss { inplace = true } end, "has no in-place gradient")
  end)
end)

describe("Torch7's forms of the pair criteria", function()
  it("the inputs as one list {x1, x2}: the same loss, the gradients as a list (gradInput too)", function()
    local a, b = ploss.tensor({ 1, 2, 3 }, { dtype = "f64" }), ploss.tensor({ 2, 2, 1 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, -1, 1 }, { dtype = "f64" })
    for _, c in ipairs { ploss.MarginRankingCriterion { margin = 2 }, ploss.L1HingeEmbeddingCriterion { margin = 5 } } do
      -- one D pair of the L1 hinge takes one label
      local y = c.margin == 5 and ploss.tensor(-1, { dtype = "f64" }) or y
      local l = c:forward(a, b, y)
      assert.are.equal(l, c:forward({ a, b }, y))
      local g1, g2 = c:backward(a, b, y)
      g1, g2 = g1:totable(), g2:totable()
      local g = c:backward({ a, b }, y)
      assert.are.equal(2, #g)
      assert.equal(c.gradInput, g)
      assert.are.same({ g1, g2 }, { g[1]:totable(), g[2]:totable() })
      local lf, gf = c({ a, b }, y)
      assert.are.equal(l, lf)
      assert.are.same({ g1, g2 }, { gf[1]:totable(), gf[2]:totable() })
    end
    -- by hand, MarginRanking with margin 2: mean of max(0, −y·(a − b) + 2) = (3 + 2 + 0)/3
    assert.are.equal(5 / 3, ploss.MarginRankingCriterion { margin = 2 }:forward({ a, b }, y))
    H.expect_error(function() ploss.MarginRankingCriterion():forward({ a }, y) end,
      "MarginRankingLoss:forward: expected 2 inputs (input1, input2) or the list of them, got a list of 1")
  end)

  it("the list form for any loss of several inputs: a triplet, and a head whose extra tensor and outputs follow", function()
    local a, p, n = ploss.randn({ 4, 3 }, { dtype = "f64", seed = 1 }), ploss.randn({ 4, 3 }, { dtype = "f64", seed = 2 }),
      ploss.randn({ 4, 3 }, { dtype = "f64", seed = 3 })
    local t = ploss.TripletMarginLoss()
    local l, ga = t(a, p, n)
    ga = ga:totable()
    local lt, g = t({ a, p, n })
    assert.are.equal(l, lt)
    assert.are.equal(3, #g)
    assert.are.same(ga, g[1]:totable())
    -- the linear cross-entropy with a bias and its per-token lse: the three gradients as one
    -- list, then the lse
    local h, w = ploss.randn({ 5, 4 }, { dtype = "f64", seed = 4 }), ploss.randn({ 7, 4 }, { dtype = "f64", seed = 5 })
    local y = ploss.tensor({ 0, 1, 2, 3, 4 }, { dtype = "i64" })
    local c = ploss.LinearCrossEntropyLoss { bias = ploss.zeros({ 7 }, { dtype = "f64" }), return_lse = true }
    local r = { c(h, w, y) }
    local lse = r[5]:totable()
    local rl = { c({ h, w }, y) }
    assert.are.equal(3, #rl)
    assert.are.equal(r[1], rl[1])
    assert.are.equal(3, #rl[2])
    assert.are.same(lse, rl[3]:totable())
  end)

  it("takes a trailing nil as no argument, as the one-input criteria do", function()
    local a, b = ploss.tensor({ 1, 2, 3 }, { dtype = "f64" }), ploss.tensor({ 2, 2, 1 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, -1, 1 }, { dtype = "f64" })
    local c = ploss.MarginRankingLoss { margin = 0.5 }
    assert.are.equal(c:forward(a, b, y), c:forward(a, b, y, nil))
    H.expect_error(function() c:forward(a, b, y, nil, 2) end, "MarginRankingLoss:forward: takes 3 arguments, got 5")
  end)

  it("one pair's ±1 label as a number", function()
    local a, b = ploss.tensor({ 1, 2, 3 }, { dtype = "f64" }), ploss.tensor({ 2, 2, 1 }, { dtype = "f64" })
    local cos = 9 / (math.sqrt(14) * 3)
    local c = ploss.CosineEmbeddingCriterion { margin = 0.5 }
    H.assert_close(c:forward({ a, b }, 1), 1 - cos, { rtol = 1e-12 }) -- aten's ε in the norms
    H.assert_close(c:forward(a, b, -1), cos - 0.5, { rtol = 1e-12 })
    local g1 = c:backward(a, b, ploss.tensor(-1, { dtype = "f64" })):totable()
    assert.are.same(g1, c:backward(a, b, -1):totable())
    -- Torch7's MarginRankingCriterion on one-element inputs, and a number for every pair of
    -- two vectors: max(0, −y·(x1 − x2) + margin)
    local m = ploss.MarginRankingCriterion { margin = 0.5 }
    assert.are.equal(1.5, m:forward(ploss.tensor({ 1 }, { dtype = "f64" }), ploss.tensor({ 2 }, { dtype = "f64" }), 1))
    assert.are.equal(1.25, m:forward(ploss.tensor({ 1, 3 }, { dtype = "f64" }), ploss.tensor({ 2, 1 }, { dtype = "f64" }), -1))
    local ga, gb = m:backward(ploss.tensor({ 1 }, { dtype = "f64" }), ploss.tensor({ 2 }, { dtype = "f64" }), 1)
    assert.are.same({ { -1 }, { 1 } }, { ga:totable(), gb:totable() })
    -- rows of pairs take a label each: a number is refused, naming the rows (not a 0-d tensor)
    local A, B = ploss.randn({ 4, 3 }, { dtype = "f64", seed = 1 }), ploss.randn({ 4, 3 }, { dtype = "f64", seed = 2 })
    H.expect_error(function()
      local r = c:forward(A, B, 1)
      return r
    end, "CosineEmbeddingLoss:forward: target: a number labels one pair (inputs of D values); input1 has 4 rows: " ..
      "give a tensor of 4 labels")
    H.expect_error(function()
      local r = F.l1_hinge_embedding_loss(A, B, -1)
      return r
    end, "l1_hinge_embedding_loss: target: a number labels one pair")
  end)

  it("a missing argument is named with its place in the call", function()
    H.expect_error(function() ploss.MarginRankingLoss {}:forward(ploss.tensor({ 1 }), ploss.tensor({ 2 })) end,
      "MarginRankingLoss:forward: target: expected a ploss tensor, got nil (argument 3 of " ..
      "crit:forward(input1, input2, target))")
    H.expect_error(function() ploss.MarginRankingLoss {}:backward(ploss.tensor({ 1 }), ploss.tensor({ 2 })) end,
      "MarginRankingLoss:backward: target: expected a ploss tensor, got nil (argument 3 of " ..
      "crit:backward(input1, input2, target, gradOutput))")
    H.expect_error(function() ploss.MarginRankingLoss {}(ploss.tensor({ 1 }), ploss.tensor({ 2 })) end,
      "MarginRankingLoss: target: expected a ploss tensor, got nil (argument 3 of crit(input1, input2, target))")
  end)
end)
