-- Focal family spec (suite 'cpu') on the CPU backend.
--  * every binary_cross_entropy_with_logits / sigmoid_focal / softmax_focal case of
--    torch_reference.json (PyTorch, torchvision, a softmax focal loss from its formula) and
--    every dual_focal case of reference_semantics.json (pytorch-loss), in f64 (1e-10
--    relative) and f32 (1e-5), through forward, backward (the fixture's grad_output for
--    'none') and the fused pass, through the criterion and the functional API;
--  * central differences in f64 for every option combination;
--  * extreme logits (±1e4; f16 ±60000) stay finite, with the documented values;
--  * γ = 0 and 0 < γ < 1 at saturation / at the kink: finite gradients;
--  * layouts (strided, channels-last, broadcast weights), in-place fused, empty inputs,
--    all ignored;
--  * bad input: each error with its message fragment, outputs untouched.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local function is_finite(v) return v == v and v ~= math.huge and v ~= -math.huge end
local function assert_all_finite(t, what)
  for i, v in ipairs(H.values(t)) do
    if not is_finite(v) then error(string.format("%s: element %d is %s", what, i, tostring(v)), 2) end
  end
end

-- the four losses: criterion class, F name, and the options of a fixture case
local losses = {
  binary_cross_entropy_with_logits = {
    crit = "BCEWithLogitsLoss", fname = "binary_cross_entropy_with_logits", count = 6,
    opts = function(case, dtype)
      local pw = case.inputs.pos_weight and H.fixture_tensor(case.inputs.pos_weight, { dtype = dtype })
      return { reduction = case.options.reduction, pos_weight = pw }
    end,
  },
  sigmoid_focal = {
    crit = "FocalLoss", fname = "sigmoid_focal", count = 13,
    opts = function(case)
      local o = case.options
      return { reduction = o.reduction, alpha = o.alpha, gamma = o.gamma }
    end,
  },
  softmax_focal = {
    crit = "SoftmaxFocalLoss", fname = "softmax_focal", count = 9,
    opts = function(case)
      local o = case.options
      return { reduction = o.reduction, gamma = o.gamma, ignore_index = o.ignore_index }
    end,
  },
  dual_focal = {
    crit = "DualFocalLoss", fname = "dual_focal", count = 2,
    opts = function(case)
      local o = case.options
      return { reduction = o.reduction, eps = o.eps, ignore_index = o.ignore_index }
    end,
  },
}

describe("focal family fixtures", function()
  for _, name in ipairs { "binary_cross_entropy_with_logits", "sigmoid_focal", "softmax_focal", "dual_focal" } do
    local L = losses[name]
    local cases = H.fixtures(name)

    it(name .. ": has every case of its source", function()
      assert.are.equal(L.count, #cases)
    end)

    for _, run in ipairs {
      { dtype = "f64", rtol = 1e-10, atol = 1e-14, target = "i64" },
      { dtype = "f32", rtol = 1e-5, atol = 1e-6, target = "i32" },
    } do
      it(name .. ": matches every case in " .. run.dtype .. " (forward, backward, fused; criterion and F)", function()
        for _, case in ipairs(cases) do
          H.check_fixture_case(L.crit, L.fname, case, run, L.opts(case, run.dtype), 2.5)
        end
      end)
    end
  end

  it("the soft-label fixture is torchvision's definition; 'reference' differs", function()
    local c = H.fixtures("sigmoid_focal", function(c) return c.name == "sigmoid_focal_soft_labels" end)[1]
    local x, y = H.fixture_tensor(c.inputs.input), H.fixture_tensor(c.inputs.target)
    H.assert_close(F.sigmoid_focal(x, y, { convention = "torchvision" }), c.expected.output, { rtol = 1e-12 })
    local ref = F.sigmoid_focal(x, y, { convention = "reference" })
    assert.is_true(math.abs(ref - H.values(c.expected.output)[1]) > 1e-3)
    -- the reference definition by hand: |y − p|^γ·(α·y·softplus(−x) + (1−α)(1−y)·softplus(x))
    local xs, ys, s = x:flat(), y:flat(), 0
    for i = 1, #xs do
      local p = 1 / (1 + math.exp(-xs[i]))
      s = s + math.abs(ys[i] - p) ^ 2 * (0.25 * ys[i] * math.log(1 + math.exp(-xs[i])) +
        0.75 * (1 - ys[i]) * math.log(1 + math.exp(xs[i])))
    end
    H.assert_close(ref, s / #xs, { rtol = 1e-12 })
  end)
end)

describe("focal family by hand", function()
  it("BCE: uniform logits give log 2; pos_weight scales the positive term per class", function()
    local x = ploss.zeros({ 2, 3 }, { dtype = "f64" })
    local y = ploss.tensor({ { 1, 0, 1 }, { 0, 1, 1 } }, { dtype = "f64" })
    H.assert_close(F.binary_cross_entropy_with_logits(x, y), math.log(2), { rtol = 1e-15 })
    local pw = { 2, 3, 4 }
    -- positives: (0,0) pw 2, (0,2) pw 4, (1,1) pw 3, (1,2) pw 4; negatives weight 1
    local expect = (2 + 4 + 3 + 4 + 1 + 1) * math.log(2) / 6
    H.assert_close(F.binary_cross_entropy_with_logits(x, y, { pos_weight = ploss.tensor(pw, { dtype = "f64" }) }),
      expect, { rtol = 1e-15 })
    -- gradient w·((1 − y)σ(x) − pw·y·σ(−x)) / numel
    H.assert_close(F.binary_cross_entropy_with_logits_backward(x, y, 1, { pos_weight = ploss.tensor(pw, { dtype = "f64" }) }),
      { { -1 / 6, 0.5 / 6, -2 / 6 }, { 0.5 / 6, -1.5 / 6, -2 / 6 } }, { rtol = 1e-15 })
  end)

  it("BCE: weight and pos_weight broadcast as PyTorch broadcasts them (trailing dims aligned)", function()
    H.seed(17)
    local sizes = { 2, 3, 4, 5 } -- N×C×H×W; C differs from W, so a [3] vector is the class axis
    local x = H.random_logits(sizes, { std = 2 })
    local y = ploss.rand(sizes, { dtype = "f64" })
    -- each form, and the rank-4 view that expand() turns into the explicit weight tensor
    for _, c in ipairs {
      { { 3, 1, 1 }, { 1, 3, 1, 1 } }, { { 4, 5 }, { 1, 1, 4, 5 } }, { { 1, 5 }, { 1, 1, 1, 5 } },
      { { 5 }, { 1, 1, 1, 5 } }, { { 2, 1, 4, 1 }, { 2, 1, 4, 1 } }, { { 1 }, { 1, 1, 1, 1 } },
      { {}, { 1, 1, 1, 1 } }, { { 3 }, { 1, 3, 1, 1 } },
    } do
      local w = ploss.rand(c[1], { dtype = "f64", low = 0.5, high = 3 })
      local full = w:view(c[2]):expand(sizes):contiguous()
      for _, name in ipairs { "weight", "pos_weight" } do
        local what = name .. " [" .. table.concat(c[1], ", ") .. "]"
        local l1, g1 = F.binary_cross_entropy_with_logits_fused(x, y, { reduction = "none", [name] = w })
        local l2, g2 = F.binary_cross_entropy_with_logits_fused(x, y, { reduction = "none", [name] = full })
        H.assert_equal(l1, l2, { what = what .. " loss" })
        H.assert_equal(g1, g2, { what = what .. " grad" })
      end
    end
    -- by hand: weight [C, 1, 1] and pos_weight [H, W] together, 'sum'
    local w = ploss.tensor({ { { 0.5 } }, { { 2 } }, { { 3 } } }, { dtype = "f64" })
    local pw = ploss.rand({ 4, 5 }, { dtype = "f64", low = 0.5, high = 3 })
    local xs, ys, pws = x:flat(), y:flat(), pw:flat()
    local function sp(z) return math.log(1 + math.exp(z)) end
    local e, i = 0, 0
    for _ = 1, 2 do
      for ci = 1, 3 do
        for k = 1, 20 do -- h, w
          i = i + 1
          e = e + ({ 0.5, 2, 3 })[ci] * (pws[k] * ys[i] * sp(-xs[i]) + (1 - ys[i]) * sp(xs[i]))
        end
      end
    end
    H.assert_close(F.binary_cross_entropy_with_logits(x, y, { reduction = "sum", weight = w, pos_weight = pw }), e,
      { rtol = 1e-13 })
  end)

  it("BCE: a vector of length C = W above rank 2 has two readings and is refused", function()
    local x = ploss.randn({ 2, 4, 3, 4 }, { dtype = "f64" })
    local y = ploss.rand({ 2, 4, 3, 4 }, { dtype = "f64" })
    local out = ploss.empty({}, { dtype = "f64" })
    local gbuf = ploss.empty({ 2, 4, 3, 4 }, { dtype = "f64" })
    for _, name in ipairs { "weight", "pos_weight" } do
      H.expect_error(function()
        local l, g = F.binary_cross_entropy_with_logits_fused(x, y, { [name] = { 1, 2, 3, 4 }, out = out, grad_input = gbuf })
        return l, g
      end, { name .. ": a vector of length 4 over the input [2, 4, 3, 4] has two readings",
        "axis 1 (0-based; Lua dim 2)", "last axis 3 (0-based; Lua dim 4)", "pass shape [4, 1, 1] for the class axis",
        "[1, 4] for the last axis", "PLOSS_ERR_SHAPE" }, out, gbuf)
    end
    -- the two spellings it proposes: the class axis and the last axis
    local w = ploss.tensor({ 1, 2, 3, 4 }, { dtype = "f64" })
    for _, c in ipairs { { { 4, 1, 1 }, { 1, 4, 1, 1 } }, { { 1, 4 }, { 1, 1, 1, 4 } } } do
      local full = w:view(c[2]):expand(2, 4, 3, 4):contiguous()
      H.assert_equal(F.binary_cross_entropy_with_logits(x, y, { reduction = "none", weight = w:view(c[1]) }),
        F.binary_cross_entropy_with_logits(x, y, { reduction = "none", weight = full }))
    end
    -- rank 2: the class axis is the last axis, one reading; pos_weight of length C or 1
    local x2, y2 = ploss.randn({ 3, 4 }, { dtype = "f64" }), ploss.rand({ 3, 4 }, { dtype = "f64" })
    H.assert_equal(F.binary_cross_entropy_with_logits(x2, y2, { reduction = "none", pos_weight = w }),
      F.binary_cross_entropy_with_logits(x2, y2, { reduction = "none", pos_weight = w:view(1, 4):expand(3, 4):contiguous() }))
    H.assert_equal(F.binary_cross_entropy_with_logits(x2, y2, { pos_weight = { 2 } }),
      F.binary_cross_entropy_with_logits(x2, y2, { pos_weight = ploss.full({ 3, 4 }, 2, { dtype = "f64" }) }))
  end)

  it("sigmoid focal at ±1e4: loss 7500 / 2500 on the wrong side, 0 on the right side", function()
    for _, conv in ipairs { "torchvision", "reference" } do
      for _, dtype in ipairs { "f64", "f32" } do
        local x = ploss.tensor({ 1e4, -1e4, 1e4, -1e4 }, { dtype = dtype })
        local y = ploss.tensor({ 0, 1, 1, 0 }, { dtype = dtype })
        local l = F.sigmoid_focal(x, y, { reduction = "none", convention = conv })
        H.assert_close(l, { 7500, 2500, 0, 0 }, { rtol = 1e-7, what = conv .. " " .. dtype })
        local g = F.sigmoid_focal_backward(x, y, ploss.ones({ 4 }, { dtype = dtype == "f64" and "f64" or "f32" }),
          { reduction = "none", convention = conv })
        H.assert_close(g, { 0.75, -0.25, 0, 0 }, { rtol = 1e-7, what = conv .. " " .. dtype .. " grad" })
      end
    end
  end)

  it("sigmoid focal at logits near the float range and at ±∞: the gradient's limits, not NaN", function()
    -- on the wrong side the gradient is a₀ = 0.75 (y = 0) or −a₁ = −0.25 (y = 1): γ·BCE·q^γ
    -- would overflow float there, and its factor σ(x)σ(−x) is 0
    local inf = math.huge
    for _, conv in ipairs { "torchvision", "reference" } do
      for _, dtype in ipairs { "f64", "f32" } do
        local x = ploss.tensor({ -2e38, 2e38, -1e38, inf, -inf }, { dtype = dtype })
        local y = ploss.tensor({ 1, 0, 1, 0, 1 }, { dtype = dtype })
        local _, g = F.sigmoid_focal_fused(x, y, { reduction = "sum", gamma = 4, convention = conv })
        H.assert_close(g, { -0.25, 0.75, -0.25, 0.75, -0.25 }, { rtol = 1e-7, what = conv .. " " .. dtype })
      end
    end
  end)

  it("f16 and bf16 logits at ±60000 / ±1e4 stay finite in every loss", function()
    for _, dtype in ipairs { "f16", "bf16" } do
      local big = dtype == "f16" and 60000 or 1e4
      local x = ploss.tensor({ { big, -big, 0, 3 }, { -big, big, big, -big } }, { dtype = dtype })
      local yb = ploss.tensor({ { 0, 1, 1, 0.5 }, { 1, 1, 0, 0 } }, { dtype = dtype })
      local yi = ploss.tensor({ 1, 3 }, { dtype = "i64" })
      for _, red in ipairs { "none", "mean", "sum" } do
        local lab = dtype .. " " .. red
        local l, g = F.binary_cross_entropy_with_logits_fused(x, yb, { reduction = red, pos_weight = { 1, 2, 3, 4 } })
        assert_all_finite(l, "bce " .. lab); assert_all_finite(g, "bce grad " .. lab)
        for _, conv in ipairs { "torchvision", "reference" } do
          for _, gamma in ipairs { 0, 0.5, 2 } do
            l, g = F.sigmoid_focal_fused(x, yb, { reduction = red, convention = conv, gamma = gamma })
            assert_all_finite(l, "focal " .. lab); assert_all_finite(g, "focal grad " .. lab)
          end
        end
        for _, gamma in ipairs { 0, 0.5, 2 } do
          l, g = F.softmax_focal_fused(x, yi, { reduction = red, gamma = gamma })
          assert_all_finite(l, "softmax focal " .. lab); assert_all_finite(g, "softmax focal grad " .. lab)
        end
        l, g = F.dual_focal_fused(x, yi, { reduction = red })
        assert_all_finite(l, "dual focal " .. lab); assert_all_finite(g, "dual focal grad " .. lab)
      end
      -- the big-logit losses are exact: sigmoid focal (torchvision) on row 1 (x as rounded)
      local l, xr = F.sigmoid_focal(x, yb, { reduction = "none" }):flat(), x:flat()
      H.assert_close({ l[1], l[2] }, { 0.75 * xr[1], -0.25 * xr[2] }, { rtol = 1e-6, what = dtype })
    end
  end)

  it("softmax focal on (1e4, −1e4, 0) with label 1: loss α·2e4, gradient α·(1, −1, 0)", function()
    for _, gamma in ipairs { 0, 0.5, 2 } do
      for _, dtype in ipairs { "f64", "f32" } do
        local x = ploss.tensor({ { 1e4, -1e4, 0 } }, { dtype = dtype })
        local y = ploss.tensor({ 1 }, { dtype = "i64" })
        local opts = { gamma = gamma, alpha = ploss.tensor({ 1, 0.5, 1 }, { dtype = dtype }) }
        local l, g = F.softmax_focal_fused(x, y, opts)
        H.assert_close(l, 1e4, { rtol = 1e-7 })
        H.assert_close(g, { { 0.5, -0.5, 0 } }, { rtol = 1e-7 })
      end
    end
  end)

  it("softmax focal with γ = 0 and α = nil is the cross-entropy", function()
    H.seed(11)
    local x = H.random_logits({ 5, 7 }, { std = 3 })
    local y = H.random_labels({ 5 }, 7, { ignore = 0.3 })
    for _, red in ipairs { "none", "mean", "sum" } do
      local o = { reduction = red, gamma = 0 }
      H.assert_close(F.softmax_focal(x, y, o), F.cross_entropy(x, y, { reduction = red }), { rtol = 1e-14, what = red })
      local _, g1 = F.softmax_focal_fused(x, y, o)
      local _, g2 = F.cross_entropy_fused(x, y, { reduction = red })
      H.assert_close(g1, g2, { rtol = 1e-13, atol = 1e-16, what = red .. " grad" })
    end
  end)

  it("dual focal: one class gives −log(1 + ε) per sample and a zero gradient", function()
    local x = ploss.randn({ 3, 1 }, { dtype = "f64" })
    local y = ploss.zeros({ 3 }, { dtype = "i64" })
    local l, g = F.dual_focal_fused(x, y, { eps = 1e-3 })
    H.assert_close(l, -math.log(1 + 1e-3), { rtol = 1e-12 })
    H.assert_equal(g, { { 0 }, { 0 }, { 0 } })
  end)

  it("γ = 0 at saturation (x = 30, y = 1) and 0 < γ < 1 at the kink y = p give finite gradients", function()
    -- the reference V2/V3 give NaN / ±inf here
    for _, conv in ipairs { "torchvision", "reference" } do
      for _, dtype in ipairs { "f64", "f32" } do
        local x = ploss.tensor({ 30, -30, 0, 0, 40 }, { dtype = dtype })
        local y = ploss.tensor({ 1, 0, 0.5, 1, 1 }, { dtype = dtype })
        for _, gamma in ipairs { 0, 0.25, 0.5, 1, 2 } do
          local l, g = F.sigmoid_focal_fused(x, y, { gamma = gamma, convention = conv, reduction = "sum" })
          assert_all_finite(l, conv .. " loss γ=" .. gamma)
          assert_all_finite(g, conv .. " grad γ=" .. gamma)
        end
      end
    end
    -- at the kink of 'reference' (x = 0, y = 1/2 = p) the loss is 0 for γ > 0 and the chosen
    -- subgradient of |y − p|^γ is 0, so the gradient is exactly 0
    local x = ploss.tensor({ 0 }, { dtype = "f64" })
    local y = ploss.tensor({ 0.5 }, { dtype = "f64" })
    for _, gamma in ipairs { 0.25, 0.5, 1 } do
      local l, g = F.sigmoid_focal_fused(x, y, { gamma = gamma, convention = "reference", reduction = "sum" })
      assert.are.equal(0, l)
      H.assert_equal(g, { 0 })
    end
  end)

  it("sigmoid focal with targets outside [0, 1] and an integer γ: the derivative of its loss (central differences)", function()
    -- there 1 − p_t < 0 on some elements: the (1 − p_t)^γ term's derivative is still taken
    local xs, ys = { 2.0, -1.2, -3.0, 0.4, 1.5 }, { 2.0, -0.5, -1.0, 1.2, -0.2 }
    for _, o in ipairs { { gamma = 2, alpha = -1 }, { gamma = 2, alpha = 0.25 }, { gamma = 1, alpha = -1 }, { gamma = 3 } } do
      o.reduction = "sum"
      local x = ploss.tensor(xs, { dtype = "f64" })
      local y = ploss.tensor(ys, { dtype = "f64" })
      local _, g = F.sigmoid_focal_fused(x, y, o)
      local gv, h = g:totable(), 1e-6
      for i = 1, #xs do
        local xp, xm = { unpack(xs) }, { unpack(xs) }
        xp[i], xm[i] = xs[i] + h, xs[i] - h
        local fd = (F.sigmoid_focal(ploss.tensor(xp, { dtype = "f64" }), y, o) -
                    F.sigmoid_focal(ploss.tensor(xm, { dtype = "f64" }), y, o)) / (2 * h)
        H.assert_close(gv[i], fd, { rtol = 1e-7, atol = 1e-9, what = string.format("γ %g α %s x %g y %g", o.gamma,
          tostring(o.alpha), xs[i], ys[i]) })
      end
    end
  end)

  it("alpha < 0 disables the balancing: (1 − p_t)^γ·BCE", function()
    local x = ploss.tensor({ 0.3, -1.2 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, 0 }, { dtype = "f64" })
    local p1, p2 = 1 / (1 + math.exp(-0.3)), 1 / (1 + math.exp(1.2))
    local expect = ((1 - p1) ^ 2 * -math.log(p1) + p2 ^ 2 * -math.log(1 - p2))
    for _, conv in ipairs { "torchvision", "reference" } do
      H.assert_close(F.sigmoid_focal(x, y, { alpha = -1, reduction = "sum", convention = conv }), expect, { rtol = 1e-14 })
    end
  end)

  it("'mean' of an empty input or with every sample ignored is NaN with an exactly zero gradient", function()
    local e = ploss.empty({ 0, 3 }, { dtype = "f64" })
    local l = F.binary_cross_entropy_with_logits(e, ploss.empty({ 0, 3 }, { dtype = "f64" }))
    assert.is_true(l ~= l)
    l = F.sigmoid_focal(e, ploss.empty({ 0, 3 }, { dtype = "f64" }))
    assert.is_true(l ~= l)
    assert.are.equal(0, F.sigmoid_focal(e, ploss.empty({ 0, 3 }, { dtype = "f64" }), { reduction = "sum" }))
    local x = ploss.randn({ 3, 4 }, { dtype = "f64" })
    x:select(1, 2):fill(0 / 0) -- a NaN in an ignored row changes nothing
    local y = ploss.full({ 3 }, -100, { dtype = "i64" })
    for _, name in ipairs { "softmax_focal", "dual_focal" } do
      local loss, g = F[name .. "_fused"](x, y)
      assert.is_true(loss ~= loss, name)
      H.assert_equal(g, ploss.zeros({ 3, 4 }, { dtype = "f64" }))
      assert.are.equal(0, F[name](x, y, { reduction = "sum" }))
    end
  end)

  it("per-class alpha of the softmax focal loss does not change the 'mean' divisor", function()
    local x = ploss.tensor({ { 1, 2, 3 }, { 3, 1, 2 }, { 0, 0, 5 } }, { dtype = "f64" })
    local y = ploss.tensor({ 2, 0, -100 }, { dtype = "i64" })
    local a = { 0.5, 2, 4 }
    local function term(row, k, al)
      local s = 0
      for _, v in ipairs(row) do s = s + math.exp(v) end
      local p = math.exp(row[k]) / s
      return -al * (1 - p) ^ 2 * math.log(p)
    end
    local expect = (term({ 1, 2, 3 }, 3, 4) + term({ 3, 1, 2 }, 1, 0.5)) / 2
    H.assert_close(F.softmax_focal(x, y, { alpha = ploss.tensor(a, { dtype = "f64" }) }), expect, { rtol = 1e-14 })
    H.assert_close(F.softmax_focal(x, y, { alpha = a }), expect, { rtol = 1e-6 }) -- a Lua list (f32)
  end)
end)

describe("OneHotTargets", function()
  it("feeds the one-hot targets of class indices to an elementwise criterion", function()
    H.seed(41)
    local x = ploss.randn({ 6, 5 }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 4, 2, -1, 1, 3 }, { dtype = "i64" }) -- -1: ignored → zero row
    local t = ploss.one_hot(y, 5, { dtype = "f64" })
    for _, cls in ipairs { "BCEWithLogitsLoss", "FocalLoss" } do
      local a = ploss.OneHotTargets(ploss[cls] {})
      local l1, g1 = a(x, y)
      local l2, g2 = ploss[cls] {}(x, t)
      H.assert_equal(l1, l2)
      H.assert_equal(g1, g2)
      H.assert_equal(a:forward(x, y), l2)
      H.assert_equal(a:backward(x, y, 2), F[cls == "FocalLoss" and "sigmoid_focal_backward"
        or "binary_cross_entropy_with_logits_backward"](x, t, 2))
    end
  end)

  it("passes its smoothing options on, and refuses others, a misspelling and missing labels", function()
    H.seed(42)
    local x = ploss.randn({ 4, 3 }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 2, 1, 2 }, { dtype = "i64" })
    local o = { label_smoothing = 0.3, smoothing_convention = "uniform_others" }
    local a = ploss.OneHotTargets(ploss.BCEWithLogitsLoss {}, o)
    local t = ploss.one_hot(y, 3, { label_smoothing = 0.3, smoothing_convention = "uniform_others", dtype = "f64" })
    H.assert_equal(a:forward(x, y), ploss.BCEWithLogitsLoss {}:forward(x, t))
    H.expect_error(function() local c = ploss.OneHotTargets(ploss.BCEWithLogitsLoss {}, { label_smothing = 0.3 }) return c end,
      "OneHotTargets: unknown option 'label_smothing' (known: ignore_index, label_smoothing, smoothing_convention)")
    -- its one-hot tensor is its own buffer in the input's dtype: out and dtype are not options
    for _, k in ipairs { "out", "dtype" } do
      H.expect_error(function() local c = ploss.OneHotTargets(ploss.BCEWithLogitsLoss {}, { [k] = "f32" }) return c end,
        "OneHotTargets: unknown option '" .. k .. "'")
    end
    -- its options are fields read at each call, as a criterion's; others are refused
    local b = ploss.OneHotTargets(ploss.BCEWithLogitsLoss {})
    b.label_smoothing, b.smoothing_convention = 0.3, "uniform_others"
    H.assert_equal(b:forward(x, y), a:forward(x, y))
    assert.are.equal("ploss.OneHotTargets(" .. tostring(b.inner) ..
      ", label_smoothing=0.3, smoothing_convention='uniform_others')", tostring(b))
    H.expect_error(function() b.reducton = "sum" end, "OneHotTargets: 'reducton' is none of the fields it reads")
    H.expect_error(function() b.reduction = "sum" end, "the reduction is the wrapped criterion's (w.inner.reduction = …)")
    -- a value set is checked at the assignment (the constructor's options when made), a
    -- refused one leaving the field as it was
    H.expect_error(function() b.label_smoothing = 1.5 end,
      "OneHotTargets: crit.label_smoothing: expected a number in [0, 1], got 1.5")
    H.expect_error(function() b.smoothing_convention = "paper" end,
      "OneHotTargets: crit.smoothing_convention: 'paper' is not one of 'pytorch', 'reference', 'uniform_others'")
    H.expect_error(function() b.ignore_index = 0.5 end, "OneHotTargets: crit.ignore_index: expected an integer, got 0.5")
    H.expect_error(function() b.inner = "x" end, "OneHotTargets: crit.inner: expected a criterion")
    assert.are.equal(0.3, b.label_smoothing)
    assert.are.equal("uniform_others", b.smoothing_convention)
    H.expect_error(function() local c = ploss.OneHotTargets(ploss.BCEWithLogitsLoss {}, { label_smoothing = -1 }) return c end,
      "OneHotTargets: opts.label_smoothing: expected a number in [0, 1], got -1")
    b.inner.reduction = "sum"
    H.assert_equal(b:forward(x, y), ploss.BCEWithLogitsLoss { reduction = "sum" }:forward(x, t))
    H.expect_error(function() local l = a:forward(x) return l end, "OneHotTargets: target: expected a ploss tensor of class indices, got nil")
    H.expect_error(function() local l = a.forward(x, y) return l end, "OneHotTargets.forward: called without its object")
    -- labels of another shape, or 1-d logits: named as the caller gave them
    H.expect_error(function() local l = a:forward(x, y:narrow(1, 1, 2)) return l end,
      "OneHotTargets: target: expected class indices of shape [" .. x:size(1) .. "] (the input's without its class dim)")
    H.expect_error(function() local l = a:forward(x:select(1, 1), y) return l end,
      "OneHotTargets: input: expected N×C(×d…) logits")
    -- Torch7's criterion methods: a clone computes the same and shares nothing
    local c = b:clone()
    assert.are_not.equal(b.inner, c.inner)
    H.assert_equal(c:forward(x, y), b:forward(x, y))
    assert.are.equal(c, c:float())
    assert.are.equal(c, c:double())
    assert.are.equal(c, c:clearState())
    assert.is_nil(rawget(c, "_onehot"))
    H.assert_equal(c:forward(x, y), b:forward(x, y))
  end)

  it("a sample labelled ignore_index is trained as background (an all-zero row), not left out", function()
    local x = ploss.tensor({ { 1, -2, 0.5 }, { 5, 5, 5 } }, { dtype = "f64" })
    local w = ploss.OneHotTargets(ploss.BCEWithLogitsLoss { reduction = "sum" })
    local t = ploss.tensor({ { 0, 1, 0 }, { 0, 0, 0 } }, { dtype = "f64" })
    H.assert_equal(w:forward(x, ploss.tensor({ 1, -1 }, { dtype = "i64" })),
      ploss.BCEWithLogitsLoss { reduction = "sum" }:forward(x, t))
  end)
end)

describe("focal family gradients (central differences, f64)", function()
  local reductions = { "none", "mean", "sum" }
  local seed = 5000

  -- f(x) = the reduced loss, or Σ loss·gout for 'none'; checks backward, fused and F
  local function check(fname, x, y, opts, loss_sizes, label, h)
    local red = opts.reduction
    local gout = red == "none" and ploss.randn(loss_sizes, { dtype = "f64" }) or nil
    local g = F[fname .. "_backward"](x, y, gout, opts)
    H.gradcheck(H.loss_objective(fname, y, opts, gout), x, g, { what = label .. " backward", seed = seed, h = h })
    H.check_fused_scale(fname, x, y, opts, loss_sizes, label, 1e-13)
  end

  it("BCE with logits: reduction × weight form × pos_weight form × shape", function()
    local n = 0
    local weights = { "none", "full", "class", "broadcast" }
    H.each(reductions, weights, { "none", "class", "broadcast" }, { { 3, 4 }, { 2, 3, 2, 2 } },
      function(red, wform, pwform, shape)
        seed = seed + 1
        H.seed(seed)
        local x = H.random_logits(shape, { std = 2 })
        local y = ploss.rand(shape, { dtype = "f64" })
        local Cn = shape[2]
        local function form(kind)
          if kind == "full" then return ploss.rand(shape, { dtype = "f64", low = 0.5, high = 2 }) end
          if kind == "class" then return ploss.rand({ Cn }, { dtype = "f64", low = 0.5, high = 2 }) end
          if kind == "broadcast" then
            local s = {}
            for i = 1, #shape do s[i] = (i == 2) and 1 or shape[i] end -- N×1×d…
            return ploss.rand(s, { dtype = "f64", low = 0.5, high = 2 })
          end
          return nil
        end
        local opts = { reduction = red, weight = form(wform), pos_weight = form(pwform) }
        check("binary_cross_entropy_with_logits", x, y, opts, shape,
          string.format("bce %s w=%s pw=%s %s", red, wform, pwform, table.concat(shape, "x")))
        n = n + 1
      end)
    assert.are.equal(72, n)
  end)

  it("sigmoid focal: reduction × convention × alpha × gamma × target kind", function()
    local n = 0
    H.each(reductions, { "torchvision", "reference" }, { 0.25, -1, 0.7 }, { 0, 0.5, 1, 2, 3.5 }, { "hard", "soft" },
      function(red, conv, alpha, gamma, kind)
        seed = seed + 1
        H.seed(seed)
        local shape = { 2, 3, 4 }
        local x = H.random_logits(shape, { std = 2 })
        local y = ploss.rand(shape, { dtype = "f64" })
        if kind == "hard" then
          local v = y:flat()
          for i = 1, #v do v[i] = v[i] < 0.5 and 0 or 1 end
          y = ploss.tensor(v, { dtype = "f64", size = shape })
        end
        local opts = { reduction = red, convention = conv, alpha = alpha, gamma = gamma }
        check("sigmoid_focal", x, y, opts, shape,
          string.format("focal %s %s α=%g γ=%g %s", red, conv, alpha, gamma, kind))
        n = n + 1
      end)
    assert.are.equal(180, n)
  end)

  it("softmax focal: reduction × gamma × alpha × ignore × layout", function()
    local n = 0
    H.each(reductions, { 0, 0.5, 1, 2, 3.5 }, { false, true }, { false, true }, { { 4, 5 }, { 2, 3, 2, 3 } },
      function(red, gamma, with_alpha, ignore, shape)
        seed = seed + 1
        H.seed(seed)
        local x = H.random_logits(shape, { std = 2 })
        local ysizes = {}
        for i = 1, #shape do if i ~= 2 then ysizes[#ysizes + 1] = shape[i] end end
        local y = H.random_labels(ysizes, shape[2], { ignore = ignore and 0.3 or 0, ignore_index = 9 })
        local opts = { reduction = red, gamma = gamma, ignore_index = 9,
          alpha = with_alpha and ploss.rand({ shape[2] }, { dtype = "f64", low = 0.2, high = 1 }) or nil }
        local label = string.format("softmax focal %s γ=%g α=%s ign=%s %s", red, gamma, tostring(with_alpha),
          tostring(ignore), table.concat(shape, "x"))
        check("softmax_focal", x, y, opts, ysizes, label)
        -- backward with the saved lse (criterion) equals the recomputed one
        local crit = ploss.SoftmaxFocalLoss(opts)
        crit:forward(x, y)
        local gout = red == "none" and ploss.randn(ysizes, { dtype = "f64" }) or 1.3
        H.assert_close(crit:backward(x, y, gout), F.softmax_focal_backward(x, y, gout, opts),
          { rtol = 1e-13, atol = 1e-15, what = label .. " saved lse" })
        n = n + 1
      end)
    assert.are.equal(120, n)
  end)

  it("dual focal: reduction × eps × ignore × layout", function()
    local n = 0
    H.each(reductions, { 1e-5, 0.1 }, { false, true }, { { 4, 5 }, { 2, 3, 2, 3 } },
      function(red, eps, ignore, shape)
        seed = seed + 1
        H.seed(seed)
        local x = H.random_logits(shape, { std = 2 })
        local ysizes = {}
        for i = 1, #shape do if i ~= 2 then ysizes[#ysizes + 1] = shape[i] end end
        local y = H.random_labels(ysizes, shape[2], { ignore = ignore and 0.3 or 0, ignore_index = 255 })
        local opts = { reduction = red, eps = eps, ignore_index = 255 }
        local label = string.format("dual focal %s ε=%g ign=%s %s", red, eps, tostring(ignore), table.concat(shape, "x"))
        check("dual_focal", x, y, opts, ysizes, label)
        local crit = ploss.DualFocalLoss(opts)
        crit:forward(x, y)
        local gout = red == "none" and ploss.randn(ysizes, { dtype = "f64" }) or 1.3
        H.assert_close(crit:backward(x, y, gout), F.dual_focal_backward(x, y, gout, opts),
          { rtol = 1e-13, atol = 1e-15, what = label .. " saved lse" })
        n = n + 1
      end)
    assert.are.equal(24, n)
  end)

  it("extreme logits (std 3000): finite losses and exact gradients", function()
    H.seed(77)
    local x = ploss.randn({ 4, 6 }, { dtype = "f64", std = 3000 })
    local y = H.random_labels({ 4 }, 6)
    for _, name in ipairs { "softmax_focal", "dual_focal" } do
      local l, g = F[name .. "_fused"](x, y)
      assert.is_true(is_finite(l), name)
      H.gradcheck(function(xx) return F[name](xx, y) end, x, g, { h = 1e-3, rtol = 1e-6, atol = 1e-9, seed = 77, what = name })
    end
    local yb = ploss.rand({ 4, 6 }, { dtype = "f64" })
    for _, name in ipairs { "sigmoid_focal", "binary_cross_entropy_with_logits" } do
      local l, g = F[name .. "_fused"](x, yb)
      assert.is_true(is_finite(l), name)
      H.gradcheck(function(xx) return F[name](xx, yb) end, x, g, { h = 1e-3, rtol = 1e-6, atol = 1e-9, seed = 77, what = name })
    end
  end)
end)

describe("focal family layouts", function()
  it("strided and channels-last inputs, targets and gradient buffers give the contiguous values", function()
    H.seed(21)
    local x = ploss.randn({ 2, 5, 3, 4 }, { dtype = "f64" })
    local xl = x:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) -- class stride 1
    assert.is_false(xl:is_contiguous())
    local yb = ploss.rand({ 2, 5, 3, 4 }, { dtype = "f64" })
    local ybl = yb:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3)
    local yi = H.random_labels({ 2, 3, 4 }, 5, { ignore = 0.2 })
    for _, red in ipairs { "none", "mean", "sum" } do
      local tol = { rtol = 1e-13, atol = 1e-15, what = red }
      for _, c in ipairs {
        { "binary_cross_entropy_with_logits", yb, ybl, { pos_weight = ploss.rand({ 5 }, { dtype = "f64" }) } },
        { "sigmoid_focal", yb, ybl, { gamma = 1.5 } },
        { "sigmoid_focal", yb, ybl, { convention = "reference" } },
        { "softmax_focal", yi, yi, { alpha = ploss.rand({ 5 }, { dtype = "f64" }) } },
        { "dual_focal", yi, yi, {} },
      } do
        local name, y, ys, o = c[1], c[2], c[3], c[4]
        o.reduction = red
        tol.what = name .. " " .. red
        H.assert_close(F[name](xl, ys, o), F[name](x, y, o), tol)
        local l1, g1 = F[name .. "_fused"](x, y, o)
        local l2, g2 = F[name .. "_fused"](xl, ys, o)
        H.assert_close(l2, l1, tol)
        H.assert_close(g2, g1, tol)
        local gbuf = ploss.empty({ 2, 3, 4, 5 }, { dtype = "f64" }):permute(1, 4, 2, 3)
        local o2 = { grad_input = gbuf }
        for k, v in pairs(o) do o2[k] = v end
        local _, g3 = F[name .. "_fused"](xl, ys, o2)
        assert.are.equal(gbuf, g3)
        H.assert_close(g3, g1, tol)
      end
    end
  end)

  it("a 1-D and a 0-d input work for the elementwise losses", function()
    local x = ploss.tensor({ 0.5, -2, 3 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, 0, 0.25 }, { dtype = "f64" })
    local l, g = F.binary_cross_entropy_with_logits_fused(x, y, { weight = { 1, 2, 3 }, reduction = "sum" })
    local e = 0
    local xs, ys, ws = { 0.5, -2, 3 }, { 1, 0, 0.25 }, { 1, 2, 3 }
    for i = 1, 3 do
      e = e + ws[i] * (ys[i] * math.log(1 + math.exp(-xs[i])) + (1 - ys[i]) * math.log(1 + math.exp(xs[i])))
    end
    H.assert_close(l, e, { rtol = 1e-6 })
    assert.are.same({ 3 }, g:size())
    local x0 = ploss.full({}, 0.5, { dtype = "f64" })
    local y0 = ploss.full({}, 1, { dtype = "f64" })
    H.assert_close(F.sigmoid_focal(x0, y0, { alpha = -1, gamma = 0 }), math.log(1 + math.exp(-0.5)), { rtol = 1e-15 })
  end)

  it("in-place fused writes the gradient over the input", function()
    H.seed(31)
    for _, c in ipairs {
      { "binary_cross_entropy_with_logits", "BCEWithLogitsLoss", ploss.rand({ 3, 4 }, { dtype = "f64" }) },
      { "sigmoid_focal", "FocalLoss", ploss.rand({ 3, 4 }, { dtype = "f64" }) },
      { "softmax_focal", "SoftmaxFocalLoss", H.random_labels({ 3 }, 4) },
      { "dual_focal", "DualFocalLoss", H.random_labels({ 3 }, 4) },
    } do
      local name, cls, y = c[1], c[2], c[3]
      local x = ploss.randn({ 3, 4 }, { dtype = "f64" })
      local l1, g1 = F[name .. "_fused"](x, y)
      local xi = x:clone()
      local l2, g2 = ploss[cls] { inplace = true }(xi, y)
      assert.are.equal(xi, g2)
      H.assert_equal(l2, l1)
      H.assert_equal(xi, g1)
    end
  end)
end)

describe("focal family errors (nothing written)", function()
  local x = ploss.randn({ 3, 4 }, { dtype = "f64" })
  local yb = ploss.rand({ 3, 4 }, { dtype = "f64" })
  local yi = ploss.tensor({ 0, 3, 1 }, { dtype = "i64" })
  local out = ploss.empty({}, { dtype = "f64" })
  local gbuf = ploss.empty({ 3, 4 }, { dtype = "f64" })
  local function fused(name, xx, y, o)
    o = o or {}
    o.out, o.grad_input = out, gbuf
    return function()
      local l, g = F[name .. "_fused"](xx, y, o) -- not a tail call: the error names this line
      return l, g
    end
  end

  it("target of another shape", function()
    H.expect_error(fused("binary_cross_entropy_with_logits", x, ploss.rand({ 4, 3 }, { dtype = "f64" })),
      "target: expected the input's shape [3, 4]", out, gbuf)
    H.expect_error(fused("sigmoid_focal", x, ploss.rand({ 3, 4, 1 }, { dtype = "f64" })),
      "target: expected the input's shape [3, 4]", out, gbuf)
    H.expect_error(fused("softmax_focal", x, ploss.tensor({ 0, 1 }, { dtype = "i64" })), "target: expected shape [3]",
      out, gbuf)
    H.expect_error(fused("dual_focal", x, ploss.tensor({ { 0, 1, 2 } }, { dtype = "i64" })), "target: expected shape [3]",
      out, gbuf)
  end)

  it("wrong pos_weight length and non-broadcastable weight", function()
    H.expect_error(fused("binary_cross_entropy_with_logits", x, yb, { pos_weight = { 1, 2, 3 } }),
      { "pos_weight: expected a shape that broadcasts over the input [3, 4] as in PyTorch", "got f64[3]" }, out, gbuf)
    H.expect_error(fused("binary_cross_entropy_with_logits", x, yb, { weight = ploss.ones({ 3, 2 }, { dtype = "f64" }) }),
      "weight: expected a shape that broadcasts over the input [3, 4]", out, gbuf)
    -- above rank 2: not trailing ([C, H] against H, W; H alone), a higher rank
    local x4, y4 = ploss.randn({ 2, 3, 4, 5 }, { dtype = "f64" }), ploss.rand({ 2, 3, 4, 5 }, { dtype = "f64" })
    local g4 = ploss.empty({ 2, 3, 4, 5 }, { dtype = "f64" })
    for _, bad in ipairs { { 3, 4 }, { 4 }, { 1, 2, 3, 4, 5 } } do
      H.expect_error(function()
        local l, g = F.binary_cross_entropy_with_logits_fused(x4, y4, { weight = ploss.ones(bad, { dtype = "f64" }),
          out = out, grad_input = g4 })
        return l, g
      end, { "weight: expected a shape that broadcasts over the input [2, 3, 4, 5] as in PyTorch (rank at most 4",
        "or a vector of length 3 (one value per class along axis 1, 0-based; Lua dim 2)",
        "got f64[" .. table.concat(bad, ", ") .. "]", "PLOSS_ERR_SHAPE" }, out, g4)
    end
  end)

  it("gamma < 0, alpha > 1, eps <= 0, unknown convention", function()
    H.expect_error(fused("sigmoid_focal", x, yb, { gamma = -1 }), "opts.gamma: -1 is not a finite number >= 0", out, gbuf)
    H.expect_error(fused("softmax_focal", x, yi, { gamma = -0.5 }), "opts.gamma: -0.5 is not a finite number >= 0", out, gbuf)
    H.expect_error(fused("sigmoid_focal", x, yb, { alpha = 1.5 }), "opts.alpha: 1.5 is not a finite number <= 1", out, gbuf)
    H.expect_error(fused("dual_focal", x, yi, { eps = 0 }), "opts.eps: 0 is not a finite number > 0", out, gbuf)
    H.expect_error(fused("sigmoid_focal", x, yb, { convention = "kornia" }), "convention: 'kornia' is not one of", out, gbuf)
    H.expect_error(function()
      local l = ploss.FocalLoss { gamma = -2 }(x, yb)
      return l
    end, "opts.gamma: -2 is not a finite number >= 0")
  end)

  it("label out of range (CPU: detected before any write)", function()
    local bad = ploss.tensor({ 0, 4, 1 }, { dtype = "i64" })
    H.expect_error(fused("softmax_focal", x, bad), "target: class index 4 at sample (n = 1, s = 0) is outside [0, 4)", out, gbuf)
    H.expect_error(fused("dual_focal", x, ploss.tensor({ -1, 0, 1 }, { dtype = "i32" })),
      "target: class index -1 at sample (n = 0, s = 0) is outside [0, 4)", out, gbuf)
    local lbuf = ploss.empty({ 3 }, { dtype = "f64" })
    H.expect_error(function()
      local l = F.softmax_focal(x, bad, { reduction = "none", out = lbuf })
      return l
    end, "class index 4", lbuf)
  end)

  it("wrong dtypes and alpha length", function()
    H.expect_error(fused("binary_cross_entropy_with_logits", x, ploss.ones({ 3, 4 }, { dtype = "i64" })),
      "target: expected float targets", out, gbuf)
    H.expect_error(fused("softmax_focal", x, ploss.ones({ 3 }, { dtype = "f64" })),
      "target: class indices must be i64 or i32, got f64", out, gbuf)
    H.expect_error(fused("softmax_focal", x, yi, { alpha = { 1, 2 } }), "alpha: expected shape [4]", out, gbuf)
    H.expect_error(fused("softmax_focal", x, yi, { alpha = { 1, 0 / 0, 1, 1 } }),
      "opts.alpha: the factor nan of class 1 is not a finite number", out, gbuf)
    H.expect_error(function() ploss.SoftmaxFocalLoss { alpha = { 1, 1, math.huge, 1 } } end,
      "opts.alpha: the factor inf of class 2 is not a finite number")
    H.expect_error(fused("sigmoid_focal", ploss.ones({ 3, 4 }, { dtype = "i32" }), yb),
      "input: expected logits of dtype f32, f16, bf16 or f64, got i32", out, gbuf)
  end)

  it("a gradient buffer that overlaps the input without inplace", function()
    H.expect_error(function()
      local l = F.sigmoid_focal_fused(gbuf, yb, { out = out, grad_input = gbuf })
      return l
    end, "grad_input: overlaps the memory of input", out)
  end)
end)
