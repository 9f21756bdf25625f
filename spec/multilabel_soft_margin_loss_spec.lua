-- multilabel_soft_margin_loss spec (suite 'cpu'): PyTorch's MultiLabelSoftMarginLoss on the
-- CPU backend.
--  * hand-derived values (a 2×3 batch; class weights; every reduction; backward with a
--    per-sample upstream gradient for 'none');
--  * PyTorch's definition written here (−[y·logσ(x) + (1 − y)·logσ(−x)]·w, summed over the
--    classes, ÷ C), stable at logits of ±1000 where a naive log(σ) is −∞;
--  * central differences in f64 for every reduction, N×C, strided views;
--  * f16 and bf16 against f64 of the same rounded inputs;
--  * bad input: integer labels, labels of the sample shape, a weight of another length.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local function sp(z) return math.max(z, 0) + math.log(1 + math.exp(-math.abs(z))) end
local function sigmoid(z) return z >= 0 and 1 / (1 + math.exp(-z)) or math.exp(z) / (1 + math.exp(z)) end

-- PyTorch's loss per sample of N×C nested lists, and the gradient of Σ_i up_i·ℓ_i.
local function reference(X, Y, W, up)
  local losses, grads = {}, {}
  for i = 1, #X do
    local C, s = #X[i], 0
    grads[i] = {}
    for j = 1, C do
      local w = W and W[j] or 1
      s = s + w * (Y[i][j] * sp(-X[i][j]) + (1 - Y[i][j]) * sp(X[i][j]))
      grads[i][j] = (up and up[i] or 1) * w / C * (sigmoid(X[i][j]) - Y[i][j])
    end
    losses[i] = s / C
  end
  return losses, grads
end

local function t64(v) return ploss.tensor(v, { dtype = "f64" }) end

describe("multilabel_soft_margin_loss by hand", function()
  it("a 2×3 batch: every reduction, class weights, backward with a per-sample upstream gradient", function()
    local X = { { 0, 0, 0 }, { 2, -1, 0.5 } }
    local Y = { { 1, 0, 1 }, { 0, 0, 1 } }
    local x, y = t64(X), t64(Y)
    -- row 1: every class log 2, so ℓ_1 = log 2 and ∂ℓ_1/∂x = (σ(0) − y)/3 = ±1/6
    local l = F.multilabel_soft_margin_loss(x, y, { reduction = "none" })
    H.assert_close(l:flat()[1], math.log(2), { rtol = 1e-15 })
    local ref, g = reference(X, Y)
    H.assert_close(l, ref, { rtol = 1e-14 })
    H.assert_close(F.multilabel_soft_margin_loss(x, y), (ref[1] + ref[2]) / 2, { rtol = 1e-14 })
    H.assert_close(F.multilabel_soft_margin_loss(x, y, { reduction = "sum" }), ref[1] + ref[2], { rtol = 1e-14 })
    local _, gm = F.multilabel_soft_margin_loss_fused(x, y)
    H.assert_close(gm:flat()[1], -1 / 12, { rtol = 1e-14 }) -- mean: ÷ 2 samples
    H.assert_close(gm, { { g[1][1] / 2, g[1][2] / 2, g[1][3] / 2 }, { g[2][1] / 2, g[2][2] / 2, g[2][3] / 2 } },
      { rtol = 1e-14 })
    -- weights, 'none' backward with gradOutput (2, −3)
    local W = { 0.5, 2, 1 }
    local refw, gw = reference(X, Y, W, { 2, -3 })
    H.assert_close(F.multilabel_soft_margin_loss(x, y, { reduction = "none", weight = W }), refw, { rtol = 1e-14 })
    H.assert_close(F.multilabel_soft_margin_loss_backward(x, y, t64({ 2, -3 }), { reduction = "none", weight = W }), gw,
      { rtol = 1e-14 })
    -- the criterion, PyTorch's default 'mean'
    local crit = ploss.MultiLabelSoftMarginLoss { weight = W }
    local lw = reference(X, Y, W)
    H.assert_close(crit:forward(x, y), (lw[1] + lw[2]) / 2, { rtol = 1e-14 })
  end)

  it("soft labels, and logits of ±1000 without overflow", function()
    local X = { { 1000, -1000, 3 }, { -1000, 1000, -0.25 } }
    local Y = { { 0, 1, 0.25 }, { 0, 1, 0.75 } }
    local l, g = F.multilabel_soft_margin_loss_fused(t64(X), t64(Y), { reduction = "sum" })
    local ref, rg = reference(X, Y)
    H.assert_close(l, ref[1] + ref[2], { rtol = 1e-14 })
    H.assert_close(g, rg, { rtol = 1e-14, atol = 1e-300 })
    -- a confident positive keeps its gradient −σ(−x)/C (1 − σ(x) would round to 0)
    local _, gc = F.multilabel_soft_margin_loss_fused(t64({ { 40 } }), t64({ { 1 } }), { reduction = "sum" })
    H.assert_close(gc, { { -1 / (1 + math.exp(40)) } }, { rtol = 1e-14 })
  end)
end)

describe("multilabel_soft_margin_loss gradients (central differences, f64)", function()
  it("every reduction, weights, strided views", function()
    local seed = 700
    for _, sizes in ipairs { { 4, 5 }, { 1, 7 } } do
      for _, red in ipairs { "none", "mean", "sum" } do
        for _, weighted in ipairs { false, true } do
          seed = seed + 1
          H.seed(seed)
          local x = ploss.randn(sizes, { dtype = "f64", std = 2 })
          local y = ploss.rand(sizes, { dtype = "f64" })
          local o = { reduction = red, weight = weighted and ploss.rand({ sizes[2] }, { dtype = "f64", low = 0.5, high = 2 }) or nil }
          local ls = H.sample_sizes(sizes)
          local gout = red == "none" and ploss.randn(ls, { dtype = "f64" }) or nil
          local what = red .. (weighted and " weighted " or " ") .. table.concat(sizes, "x")
          local g = F.multilabel_soft_margin_loss_backward(x, y, gout, o)
          H.gradcheck(H.loss_objective("multilabel_soft_margin_loss", y, o, gout), x, g, { what = what, seed = seed })
          H.check_fused_scale("multilabel_soft_margin_loss", x, y, o, ls, what, 1e-13)
          -- a transposed view of the same values gives the same loss and gradient
          if #sizes == 2 then
            local l1, g1 = F.multilabel_soft_margin_loss_fused(x, y, o)
            local l2, g2 = F.multilabel_soft_margin_loss_fused(x:t():contiguous():t(), y:t():contiguous():t(), o)
            H.assert_close(l2, l1, { rtol = 1e-15 })
            H.assert_close(g2, g1, { rtol = 1e-15 })
          end
        end
      end
    end
  end)
end)

describe("multilabel_soft_margin_loss dtypes and bad input", function()
  it("f16 and bf16: the f64 values of the same rounded inputs", function()
    for _, dtype in ipairs { "f16", "bf16" } do
      H.seed(720)
      local x = ploss.randn({ 6, 33 }, { dtype = dtype, std = 2 })
      local y = ploss.rand({ 6, 33 }, { dtype = dtype })
      local l, g = F.multilabel_soft_margin_loss_fused(x, y, { reduction = "sum" })
      assert.are.equal(dtype, g:dtype())
      local lr, gr = F.multilabel_soft_margin_loss_fused(x:double(), y:double(), { reduction = "sum" })
      H.assert_close_scaled(l, lr, 1e-6, 0, dtype .. " loss")
      H.assert_close_scaled(g, gr, dtype == "f16" and 1e-3 or 8e-3, 0, dtype .. " gradient")
    end
  end)

  it("integer 0/1 labels (PyTorch promotes them): the float labels' values and gradients, bitwise", function()
    H.seed(722)
    local x = ploss.randn({ 5, 7 }, { dtype = "f64", std = 2 })
    local v = ploss.rand({ 5, 7 }, { dtype = "f64" }):flat()
    for i = 1, #v do v[i] = v[i] < 0.4 and 1 or 0 end
    local yf = ploss.tensor(v, { dtype = "f64", size = { 5, 7 } })
    local w = ploss.tensor({ 1, 2, 0.5, 1, 3, 1, 0.25 }, { dtype = "f64" })
    for _, it in ipairs { "i64", "i32" } do
      local yi = yf:to("cpu", it)
      for _, red in ipairs { "none", "mean", "sum" } do
        local o = { reduction = red, weight = w }
        local lf, gf = F.multilabel_soft_margin_loss_fused(x, yf, o)
        local li, gi = F.multilabel_soft_margin_loss_fused(x, yi, o)
        if red == "none" then lf, li = lf:totable(), li:totable() end
        assert.are.same(lf, li, it .. " " .. red)
        assert.are.same(gf:totable(), gi:totable(), it .. " " .. red)
      end
      -- by hand: one row, x = (0, 2), y = (1, 0): (sp(0) + sp(2))/2 with sp(z) = log(1 + e^z)
      local l = F.multilabel_soft_margin_loss(ploss.tensor({ { 0, 2 } }, { dtype = "f64" }),
        ploss.tensor({ { 1, 0 } }, { dtype = it }))
      H.assert_close(l, (math.log(2) + math.log(1 + math.exp(2))) / 2, { rtol = 1e-15 })
    end
  end)

  it("refuses labels that are not a float of the input's shape, and a weight of another length", function()
    local x = ploss.randn({ 3, 4 }, { dtype = "f64" })
    local out = ploss.empty({}, { dtype = "f64" })
    -- rank 3: PyTorch would average over the last axis, the rows take axis 1: refused
    local x3 = ploss.randn({ 2, 3, 4 }, { dtype = "f64" })
    H.expect_error(function() F.multilabel_soft_margin_loss(x3, ploss.zeros({ 2, 3, 4 }, { dtype = "f64" }), { out = out }) end,
      { "input: expected N×C (rank 2: PyTorch takes the classes along the last axis", "PLOSS_ERR_SHAPE" }, out)
    -- rank 1: one sample of C classes (PyTorch's unbatched form), its 1×C view's value; a
    -- target of another length named
    local x1, y1 = ploss.tensor({ 0.5, -1, 2, 0 }, { dtype = "f64" }), ploss.tensor({ 1, 0, 1, 1 }, { dtype = "f64" })
    assert.are.equal(F.multilabel_soft_margin_loss(x1:view(1, 4), y1:view(1, 4)), F.multilabel_soft_margin_loss(x1, y1))
    assert.are.equal(0, F.multilabel_soft_margin_loss(x1, y1, { reduction = "none" }):dim())
    H.expect_error(function() F.multilabel_soft_margin_loss(x1, ploss.zeros({ 3 }, { dtype = "f64" }), { out = out }) end,
      { "target: expected [4] (one value per class; the input is one sample of 4 classes, PyTorch's unbatched form), got f64[3]", "PLOSS_ERR_SHAPE" }, out)
    H.expect_error(function() F.multilabel_soft_margin_loss(ploss.zeros({ 3, 4 }, { dtype = "i64" }), x) end,
      { "input: expected logits of dtype f32, f16, bf16 or f64, got i64", "PLOSS_ERR_DTYPE" })
    H.expect_error(function() F.multilabel_soft_margin_loss_backward(x, x, ploss.ones({ 4 }), { reduction = "none" }) end,
      { "gradOutput", "PLOSS_ERR_SHAPE" })
    H.expect_error(function() F.multilabel_soft_margin_loss(x, ploss.zeros({ 3, 4 }, { dtype = "u8" }), { out = out }) end,
      { "target: expected labels (0/1 per class) of the input's shape, of dtype f32, f16, bf16, f64, i64 or i32, got u8",
        "PLOSS_ERR_DTYPE" }, out)
    H.expect_error(function() F.multilabel_soft_margin_loss(x, ploss.zeros({ 3 }, { dtype = "f64" }), { out = out }) end,
      { "target:", "PLOSS_ERR_SHAPE" }, out)
    H.expect_error(function() F.multilabel_soft_margin_loss(x, ploss.zeros({ 3, 4 }), { weight = { 1, 2, 3 }, out = out }) end,
      "weight", out)
    -- outputs: the 'none' loss of another shape, a gradient over the target, written nothing
    local y = ploss.rand({ 3, 4 }, { dtype = "f64" })
    local lbad, g = ploss.empty({ 3, 4 }, { dtype = "f64" }), ploss.empty({ 3, 4 }, { dtype = "f64" })
    H.expect_error(function() F.multilabel_soft_margin_loss(x, y, { reduction = "none", out = lbad }) end,
      { "opts.out", "PLOSS_ERR_SHAPE" }, lbad)
    H.expect_error(function() F.multilabel_soft_margin_loss_fused(x, y, { grad_input = y }) end,
      { "opts.grad_input: overlaps the memory of target", "PLOSS_ERR_ALIAS" })
    H.expect_error(function() F.multilabel_soft_margin_loss_fused(x, y, { grad_input = g:t() }) end,
      { "opts.grad_input", "PLOSS_ERR_SHAPE" }, g)
  end)

  it("in place, strided labels and outputs, an empty batch", function()
    H.seed(730)
    local x = ploss.randn({ 5, 4 }, { dtype = "f64" })
    local y = ploss.rand({ 5, 4 }, { dtype = "f64" })
    local l1, g1 = F.multilabel_soft_margin_loss_fused(x, y)
    local xi = x:clone()
    local l2, g2 = ploss.MultiLabelSoftMarginLoss { inplace = true }(xi, y)
    assert.are.equal(l1, l2)
    assert.are.equal(xi, g2)
    H.assert_equal(g2, g1)
    -- labels read through a column-major view, the 'none' loss into a strided view
    local yt = y:t():contiguous():t()
    local lbig = ploss.zeros({ 5, 2 }, { dtype = "f64" })
    F.multilabel_soft_margin_loss(x, yt, { reduction = "none", out = lbig:select(2, 2) })
    H.assert_close(lbig:select(2, 2), F.multilabel_soft_margin_loss(x, y, { reduction = "none" }), { rtol = 0 })
    H.assert_equal(lbig:select(2, 1), { 0, 0, 0, 0, 0 })
    -- no samples: mean NaN, sum 0, an empty gradient
    local e, ey = ploss.zeros({ 0, 4 }, { dtype = "f64" }), ploss.zeros({ 0, 4 }, { dtype = "f64" })
    local lm = F.multilabel_soft_margin_loss(e, ey)
    assert.is_true(lm ~= lm)
    assert.are.equal(0, F.multilabel_soft_margin_loss(e, ey, { reduction = "sum" }))
    local _, ge = F.multilabel_soft_margin_loss_fused(e, ey)
    assert.are.same({ 0, 4 }, ge:size())
  end)
end)
