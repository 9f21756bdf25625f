-- multilabel_margin_loss spec (suite 'cpu'): PyTorch's MultiLabelMarginLoss on the CPU
-- backend.
--  * hand-derived values (PyTorch's documented example, 0.85, and its gradient; every
--    reduction; backward with a per-sample upstream gradient for 'none');
--  * PyTorch's kernel written here as loops (each listed class against each unlisted one,
--    a class listed twice counted twice, the list ended by the first negative entry);
--  * central differences in f64 for every reduction, strided views, i32 targets;
--  * f16 and bf16 against f64 of the same rounded inputs; in place; an empty batch;
--  * bad input: float targets, targets of the sample shape, an entry outside [0, C).
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

-- PyTorch's loss per sample of N×C nested lists (targets 0-based, -1 ended), and the
-- gradient of Σ_i up_i·ℓ_i.
local function reference(X, Y, up)
  local losses, grads = {}, {}
  for i = 1, #X do
    local C, x, listed, g, s = #X[i], X[i], {}, {}, 0
    for j = 1, C do g[j] = 0 end
    local L = 0
    while L < C and Y[i][L + 1] >= 0 do
      L = L + 1
      listed[Y[i][L] + 1] = true
    end
    local w = (up and up[i] or 1) / C
    for k = 1, L do
      local c = Y[i][k] + 1
      for j = 1, C do
        if not listed[j] then
          local z = 1 - x[c] + x[j]
          if z > 0 then
            s = s + z
            g[j], g[c] = g[j] + w, g[c] - w
          end
        end
      end
    end
    losses[i], grads[i] = s / C, g
  end
  return losses, grads
end

local function t64(v) return ploss.tensor(v, { dtype = "f64" }) end
local function ti64(v) return ploss.tensor(v, { dtype = "i64" }) end

describe("multilabel_margin_loss by hand", function()
  it("PyTorch's example: 0.85, its gradient, every reduction", function()
    -- classes 3 and 0 listed; each against classes 1 and 2:
    -- ((1 − 0.8 + 0.2) + (1 − 0.8 + 0.4) + (1 − 0.1 + 0.2) + (1 − 0.1 + 0.4)) / 4 = 0.85
    local x, y = t64({ { 0.1, 0.2, 0.4, 0.8 } }), ti64({ { 3, 0, -1, 1 } })
    H.assert_close(F.multilabel_margin_loss(x, y), 0.85, { rtol = 1e-15 })
    local l, g = F.multilabel_margin_loss_fused(x, y)
    H.assert_close(l, 0.85, { rtol = 1e-15 })
    -- every hinge active: listed −2/4, unlisted +2/4
    H.assert_close(g, { { -0.5, 0.5, 0.5, -0.5 } }, { rtol = 1e-15 })
    -- the entry after −1 (class 1) is not read: class 1 stays unlisted
    local X = { { 0.1, 0.2, 0.4, 0.8 }, { 3, -1, 0.5, 0 } }
    local Y = { { 3, 0, -1, 1 }, { 1, 2, 2, -1 } } -- row 2 lists class 2 twice
    local ref, rg = reference(X, Y)
    H.assert_close(F.multilabel_margin_loss(t64(X), ti64(Y), { reduction = "none" }), ref, { rtol = 1e-15 })
    H.assert_close(F.multilabel_margin_loss(t64(X), ti64(Y), { reduction = "sum" }), ref[1] + ref[2], { rtol = 1e-15 })
    -- row 2 by hand: listed {1, 2} (x −1, 0.5; class 2 twice), unlisted {0, 3} (x 3, 0):
    -- vs class 1: 1 + 1 + 3 = 5, 1 + 1 + 0 = 2; vs class 2 (×2): 1 − 0.5 + 3 = 3.5, 0.5
    H.assert_close(ref[2], (5 + 2 + 2 * (3.5 + 0.5)) / 4, { rtol = 1e-15 })
    local up = { 2, -3 }
    local _, rgu = reference(X, Y, up)
    H.assert_close(F.multilabel_margin_loss_backward(t64(X), ti64(Y), t64(up), { reduction = "none" }), rgu,
      { rtol = 1e-15 })
    H.assert_close(rgu[2], { -3 * 3 / 4, -3 * -2 / 4, -3 * -4 / 4, -3 * 3 / 4 }, { rtol = 1e-15 })
    -- the criterion (PyTorch's default 'mean') and Torch7's name
    H.assert_close(ploss.MultiLabelMarginLoss():forward(t64(X), ti64(Y)), (ref[1] + ref[2]) / 2, { rtol = 1e-15 })
    H.assert_close(ploss.MultiLabelMarginCriterion():forward(t64(X), ti64(Y)), (ref[1] + ref[2]) / 2, { rtol = 1e-15 })
  end)

  it("empty lists, every class listed, inactive hinges, a NaN score", function()
    local X = { { 1, 2, 3 }, { 1, 2, 3 }, { 5, 0, 0.5 } }
    local Y = { { -1, 0, 1 }, { 2, 0, 1 }, { 0, -5, 7 } } -- none; all three; class 0 (any negative ends)
    local l, g = F.multilabel_margin_loss_fused(t64(X), ti64(Y), { reduction = "none" })
    -- row 3: 1 − 5 + 0 < 0 and 1 − 5 + 0.5 < 0: no active hinge
    H.assert_equal(l, { 0, 0, 0 })
    H.assert_equal(g, { { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 } })
    local ln = F.multilabel_margin_loss(t64({ { 0, 0 / 0, 1 } }), ti64({ { 0, -1, 0 } }))
    assert.is_true(ln ~= ln, "a NaN score makes the loss NaN")
  end)

  it("a NaN upstream gradient reaches only the rows with an active hinge (PyTorch's loops add nothing else)", function()
    -- row 1 (class 2 listed): 1 − 5 + x_j < 0, inactive; row 2 (class 0): z = 0.5 for classes 1, 2
    local x, y = t64({ { 0.1, 0.2, 5 }, { 0.5, 0, 0 } }), ti64({ { 2, -1, 0 }, { 0, -1, 0 } })
    local g = F.multilabel_margin_loss_backward(x, y, t64({ 0 / 0, 2 }), { reduction = "none" })
    H.assert_close(g, { { 0, 0, 0 }, { -4 / 3, 2 / 3, 2 / 3 } }, { rtol = 1e-15 })
    local m = ploss.MultiLabelMarginLoss {}:backward(x, y, 0 / 0):totable()
    assert.are.same({ 0, 0, 0 }, m[1])
    for j = 1, 3 do assert.is_true(m[2][j] ~= m[2][j]) end
  end)
end)

describe("multilabel_margin_loss against PyTorch's loops and central differences (f64)", function()
  it("random lists, every reduction, i32 targets, strided views", function()
    local seed = 800
    for _, sizes in ipairs { { 5, 7 }, { 1, 12 }, { 3, 1 } } do
      for _, red in ipairs { "none", "mean", "sum" } do
        seed = seed + 1
        H.seed(seed)
        local N, C = sizes[1], sizes[2]
        local x = ploss.randn(sizes, { dtype = "f64", std = 1.5 })
        -- lists of random length with repeats, then −1 and arbitrary entries after it
        local Y = {}
        for i = 1, N do
          Y[i] = {}
          local L = (i * 7 + seed) % (C + 1)
          for k = 1, C do
            Y[i][k] = k <= L and (k * 5 + i + seed) % C or (k == L + 1 and -1 or (k * 3) % (C + 9))
          end
        end
        local y = ti64(Y)
        local o = { reduction = red }
        local ls = H.sample_sizes(sizes)
        local gout = red == "none" and ploss.randn(ls, { dtype = "f64" }) or nil
        local what = red .. " " .. table.concat(sizes, "x")
        local ref, rg = reference(x:totable(), Y, gout and gout:totable())
        local l = F.multilabel_margin_loss(x, y, o)
        local want = red == "none" and ref or 0
        if red ~= "none" then
          for i = 1, N do want = want + ref[i] end
          if red == "mean" then want = want / N end
        end
        H.assert_close(l, want, { rtol = 1e-14, what = what })
        local g = F.multilabel_margin_loss_backward(x, y, gout, o)
        if red == "none" then H.assert_close(g, rg, { rtol = 1e-14, what = what }) end
        H.gradcheck(H.loss_objective("multilabel_margin_loss", y, o, gout), x, g, { what = what, seed = seed })
        H.check_fused_scale("multilabel_margin_loss", x, y, o, ls, what, 1e-13)
        -- i32 lists and column-major views of both give the same numbers
        local l2, g2 = F.multilabel_margin_loss_fused(x:t():contiguous():t(), y:int():t():contiguous():t(), o)
        local l1, g1 = F.multilabel_margin_loss_fused(x, y, o)
        H.assert_equal(l2, l1)
        H.assert_equal(g2, g1)
      end
    end
  end)
end)

describe("multilabel_margin_loss dtypes, in place and bad input", function()
  it("f16 and bf16: the f64 values of the same rounded inputs", function()
    for _, dtype in ipairs { "f16", "bf16" } do
      H.seed(820)
      local x = ploss.randn({ 6, 33 }, { dtype = dtype, std = 2 })
      local y = ploss.randint(-1, 33, { 6, 33 }, { seed = 821 })
      local l, g = F.multilabel_margin_loss_fused(x, y, { reduction = "sum" })
      assert.are.equal(dtype, g:dtype())
      local lr, gr = F.multilabel_margin_loss_fused(x:double(), y, { reduction = "sum" })
      H.assert_close_scaled(l, lr, 1e-6, 0, dtype .. " loss")
      H.assert_close_scaled(g, gr, dtype == "f16" and 1e-3 or 8e-3, 0, dtype .. " gradient")
    end
  end)

  it("in place, a strided 'none' loss, an empty batch", function()
    H.seed(830)
    local x = ploss.randn({ 5, 6 }, { dtype = "f64" })
    local y = ploss.randint(-1, 6, { 5, 6 }, { seed = 831 })
    local l1, g1 = F.multilabel_margin_loss_fused(x, y)
    local xi = x:clone()
    local l2, g2 = ploss.MultiLabelMarginLoss { inplace = true }(xi, y)
    assert.are.equal(l1, l2)
    assert.are.equal(xi, g2)
    H.assert_equal(g2, g1)
    local lbig = ploss.zeros({ 5, 2 }, { dtype = "f64" })
    F.multilabel_margin_loss(x, y, { reduction = "none", out = lbig:select(2, 2) })
    H.assert_close(lbig:select(2, 2), F.multilabel_margin_loss(x, y, { reduction = "none" }), { rtol = 0 })
    H.assert_equal(lbig:select(2, 1), { 0, 0, 0, 0, 0 })
    local e, ey = ploss.zeros({ 0, 4 }, { dtype = "f64" }), ploss.zeros({ 0, 4 }, { dtype = "i64" })
    local lm = F.multilabel_margin_loss(e, ey)
    assert.is_true(lm ~= lm)
    assert.are.equal(0, F.multilabel_margin_loss(e, ey, { reduction = "sum" }))
    local _, ge = F.multilabel_margin_loss_fused(e, ey)
    assert.are.same({ 0, 4 }, ge:size())
  end)

  it("refuses float targets, the sample shape, an entry outside [0, C), writing nothing", function()
    local x = ploss.randn({ 3, 4 }, { dtype = "f64" })
    local out = ploss.empty({}, { dtype = "f64" })
    H.expect_error(function() F.multilabel_margin_loss(x, ploss.zeros({ 3, 4 }, { dtype = "f64" }), { out = out }) end,
      { "target: expected class indices (i64 or i32) of the input's shape, each row's classes ended by -1, got f64",
        "PLOSS_ERR_DTYPE" }, out)
    H.expect_error(function() F.multilabel_margin_loss(x, ploss.zeros({ 3 }, { dtype = "i64" }), { out = out }) end,
      { "target:", "PLOSS_ERR_SHAPE" }, out)
    H.expect_error(function() F.multilabel_margin_loss(ploss.randn({ 2, 3, 4 }, { dtype = "f64" }),
        ploss.zeros({ 2, 3, 4 }, { dtype = "i64" }), { out = out }) end,
      { "input: expected N×C (rank 2", "PLOSS_ERR_SHAPE" }, out)
    local g = ploss.empty({ 3, 4 }, { dtype = "f64" })
    local bad = ti64({ { 0, -1, 9, 9 }, { 1, 2, 4, -1 }, { -1, 0, 0, 0 } })
    H.expect_error(function() F.multilabel_margin_loss_fused(x, bad, { out = out, grad_input = g }) end,
      { "target: class index 4 at (row 1, position 2) is outside [0, 4)", "PLOSS_ERR_INVALID_LABEL" }, out, g)
    -- the same list without its out-of-range entry (ended before it) is accepted
    local ok = ti64({ { 0, -1, 9, 9 }, { 1, 2, -1, 4 }, { -1, 0, 0, 0 } })
    assert.is_true(F.multilabel_margin_loss(x, ok) >= 0)
  end)
end)
