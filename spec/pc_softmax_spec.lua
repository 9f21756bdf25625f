-- PC-softmax cross-entropy spec (suite 'cpu') on the CPU backend.
--  * the pc_softmax_cross_entropy cases of reference_semantics.json (pytorch-loss V1
--    autograd, f64; priors 0.1..0.4) in f64 and f32;
--  * the definition by hand, equal priors = cross-entropy + log w, zero priors drop out;
--  * the correct gradient (rows sum to 0 for unequal priors, unlike the reference V2) by
--    central differences in f64 over reductions × priors × ignored samples × shapes;
--  * extreme logits, C = 1, all ignored, bad priors and other bad input.
local H = require "spec.helpers"
local S = require "spec.softmax2_common"
local ploss = H.ploss
local F = ploss.F

local NAME, FNAME = "PCSoftmaxCrossEntropyLoss", "pc_softmax_cross_entropy"

describe("PCSoftmaxCrossEntropyLoss fixtures", function()
  local cases = H.fixtures("pc_softmax_cross_entropy")
  it("has the reference cases", function() assert.are.equal(2, #cases) end)
  for _, run in ipairs(S.fixture_runs) do
    it("matches every case in " .. run.dtype, function()
      for _, case in ipairs(cases) do
        local o = case.options
        local w = ploss.tensor(o.lb_proportion, { dtype = run.dtype })
        S.check_fixture(NAME, FNAME, case, run, { lb_proportion = w, reduction = o.reduction, ignore_index = o.ignore_index })
      end
      -- priors as a Lua list (an f32 tensor made by the criterion)
      local case = cases[1]
      local x = H.fixture_tensor(case.inputs.input, { dtype = run.dtype })
      local y = H.fixture_tensor(case.inputs.target)
      H.assert_close(F.pc_softmax_cross_entropy(x, y, { lb_proportion = case.options.lb_proportion, ignore_index = 255 }),
        case.expected.output, { rtol = 1e-6 })
    end)
  end
end)

describe("PCSoftmaxCrossEntropyLoss by hand", function()
  it("follows the definition row by row, ignored samples give 0", function()
    H.seed(51)
    local x = H.random_logits({ 5, 4 }, { std = 2 })
    local y = ploss.tensor({ 0, 3, -100, 2, 1 }, { dtype = "i64" })
    local w = { 0.5, 0, 2, 1.5 }
    local l = F.pc_softmax_cross_entropy(x, y, { lb_proportion = ploss.tensor(w, { dtype = "f64" }), reduction = "none" }):flat()
    local xv, yv = x:totable(), y:flat()
    for i = 1, 5 do
      local e = 0
      if yv[i] ~= -100 then
        local z = 0
        for k = 1, 4 do z = z + w[k] * math.exp(xv[i][k]) end
        e = math.log(z) - xv[i][yv[i] + 1]
      end
      H.assert_close(l[i], e, { rtol = 1e-14, atol = 1e-15, what = "row " .. i })
    end
  end)

  it("with equal priors c equals cross-entropy + log c (gradient unchanged)", function()
    H.seed(52)
    local x = H.random_logits({ 3, 5, 2, 2 })
    local y = H.random_labels({ 3, 2, 2 }, 5, { ignore = 0.2 })
    for _, c in ipairs { 1, 0.25, 3 } do
      local w = ploss.full({ 5 }, c, { dtype = "f64" })
      for _, red in ipairs { "none", "mean" } do
        local l, g = F.pc_softmax_cross_entropy_fused(x, y, { lb_proportion = w, reduction = red })
        local lc, gc = F.cross_entropy_fused(x, y, { reduction = red })
        local lv, lcv, yv = H.values(l), H.values(lc), y:flat()
        for i = 1, #lv do
          local shift = (red == "mean" or yv[i] ~= -100) and math.log(c) or 0
          H.assert_close(lv[i], lcv[i] + shift, { rtol = 1e-13, atol = 1e-14, what = red .. " c=" .. c })
        end
        H.assert_close(g, gc, { rtol = 1e-13, atol = 1e-16 })
      end
    end
  end)

  it("has the correct gradient: rows sum to zero with unequal priors (the reference V2 does not)", function()
    H.seed(53)
    local x = H.random_logits({ 6, 4 })
    local y = H.random_labels({ 6 }, 4)
    local _, g = F.pc_softmax_cross_entropy_fused(x, y, { lb_proportion = { 0.1, 0.2, 0.3, 0.4 }, reduction = "sum" })
    for _, row in ipairs(g:totable()) do
      H.assert_close(row[1] + row[2] + row[3] + row[4], 0, { atol = 1e-6 })
    end
  end)

  it("stays finite for extreme logits and a zero prior on the largest logit", function()
    local x = ploss.tensor({ { 1000, 0, -5 }, { -1e4, 1e4, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 1, 0 }, { dtype = "i64" })
    local w = ploss.tensor({ 0, 1, 2 }, { dtype = "f64" })
    local l, g = F.pc_softmax_cross_entropy_fused(x, y, { lb_proportion = w, reduction = "none" })
    -- row 1: class 0 drops out: log(e^0 + 2e^-5) − 0; row 2: log(e^1e4 + 2) + 1e4 ≈ 2e4
    H.assert_close(l, { math.log(1 + 2 * math.exp(-5)), 2e4 }, { rtol = 1e-14 })
    for _, v in ipairs(g:flat()) do assert.is_true(v == v and math.abs(v) <= 1) end
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local lf = F.pc_softmax_cross_entropy(x:to(nil, dt), y, { lb_proportion = w, reduction = "sum" })
      assert.is_true(lf == lf and lf < math.huge, dt)
    end
  end)

  it("forms x + log w in f32 for f32 input: the priors keep the logits' float spacing (docs: numerics)", function()
    -- the f32 values L + (0.5, −1.25, 2, 0.75, −0.5) are exact for L ≤ 1e5 (at 1e8 rounded)
    local w = ploss.tensor({ 0.1, 0.2, 0.3, 0.2, 0.2 }, { dtype = "f64" })
    local y = ploss.tensor({ 2 }, { dtype = "i64" })
    local function loss(L, dt)
      local x = ploss.tensor({ { L + 0.5, L - 1.25, L + 2, L + 0.75, L - 0.5 } }, { dtype = dt })
      return F.pc_softmax_cross_entropy(x, y, { lb_proportion = w })
    end
    local exact = loss(0, "f64")
    H.assert_close(loss(1e8, "f64"), exact, { rtol = 1e-7 })
    H.assert_close(loss(0, "f32"), exact, { rtol = 1e-6 })
    local d5 = math.abs(loss(1e5, "f32") - exact) -- log w to 1/128
    assert.is_true(d5 > 1e-5 and d5 < 2e-3, d5)
    -- from 1e8 (spacing 8) the priors vanish: log Σ e^(x − x_y) of the rounded logits
    H.assert_close(loss(1e8, "f32"), math.log(5), { rtol = 1e-6 })
  end)

  it("C = 1 gives log w with a zero gradient; every sample ignored gives a NaN mean and zero gradient", function()
    local x = ploss.randn({ 3, 1 }, { dtype = "f64" })
    local l, g = F.pc_softmax_cross_entropy_fused(x, ploss.zeros({ 3 }, { dtype = "i64" }), { lb_proportion = ploss.tensor({ 0.5 }, { dtype = "f64" }) })
    H.assert_close(l, math.log(0.5), { rtol = 1e-15 })
    H.assert_equal(g, { { 0 }, { 0 }, { 0 } })
    local y = ploss.full({ 3 }, -100, { dtype = "i64" })
    local x4 = ploss.randn({ 3, 4 }, { dtype = "f64" })
    local lm, gm = F.pc_softmax_cross_entropy_fused(x4, y, { lb_proportion = { 1, 2, 3, 4 } })
    assert.is_true(lm ~= lm)
    H.assert_equal(gm, ploss.zeros({ 3, 4 }, { dtype = "f64" }))
  end)
end)

describe("PCSoftmaxCrossEntropyLoss gradients (central differences, f64)", function()
  it("for every reduction × priors × ignore × shape", function()
    local seed, count = 5100, 0
    local priors = { { 0.1, 0.2, 0.3, 0.4, 0.5 }, { 1, 0, 2, 0.5, 3 } }
    H.each({ "none", "mean", "sum" }, { 1, 2 }, { false, true }, { { 4, 5 }, { 2, 5, 2, 3 } },
      function(red, pi, ignore, shape)
        seed = seed + 1
        H.seed(seed)
        local x = H.random_logits(shape, { std = 2 })
        local y = S.labels(shape, { ignore = ignore and 0.3 or 0, ignore_index = 9 })
        local w = ploss.tensor(priors[pi], { dtype = "f64" })
        S.gradcheck(NAME, FNAME, x, y, { reduction = red, lb_proportion = w, ignore_index = 9 },
          string.format("%s priors %d ign=%s %s", red, pi, tostring(ignore), table.concat(shape, "x")), seed)
        count = count + 1
      end)
    assert.are.equal(24, count)
  end)
end)

describe("PCSoftmaxCrossEntropyLoss layouts, dtypes, criterion", function()
  it("channels-last input and strided priors give the values of contiguous ones", function()
    H.seed(54)
    local x = H.random_logits({ 2, 4, 3, 5 })
    local xl = x:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3)
    local y = H.random_labels({ 2, 3, 5 }, 4, { ignore = 0.2 })
    local wbig = ploss.tensor({ 0.1, 9, 0.2, 9, 0.3, 9, 0.4, 9 }, { dtype = "f64" })
    local ws = wbig:view(4, 2):select(2, 1) -- stride 2
    local w = ploss.tensor({ 0.1, 0.2, 0.3, 0.4 }, { dtype = "f64" })
    local l1, g1 = F.pc_softmax_cross_entropy_fused(x, y, { lb_proportion = w })
    local l2, g2 = F.pc_softmax_cross_entropy_fused(xl, y, { lb_proportion = ws })
    H.assert_close(l2, l1, { rtol = 1e-14 })
    H.assert_close(g2, g1, { rtol = 1e-14, atol = 1e-17 })
  end)

  it("f32, f16 and bf16 inputs match f64 on the same values", function()
    H.seed(55)
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local x = ploss.randn({ 6, 5 }, { dtype = dt, std = 3 })
      local y = H.random_labels({ 6 }, 5, { ignore = 0.2 })
      local w = { 0.3, 0.1, 1, 2, 0.05 }
      local l, g = F.pc_softmax_cross_entropy_fused(x, y, { lb_proportion = w })
      local lr, gr = F.pc_softmax_cross_entropy_fused(x:double(), y, { lb_proportion = w })
      assert.are.equal(dt, g:dtype())
      H.assert_close(l, lr, { rtol = 1e-6 })
      H.assert_close(g, gr, { rtol = H.tol[dt].rtol, atol = H.tol[dt].atol })
    end
  end)

  it("prints its options", function()
    assert.are.equal("ploss.PCSoftmaxCrossEntropyLoss(lb_proportion={1, 2, 3}, ignore_index=-100, reduction='mean')",
      tostring(ploss.PCSoftmaxCrossEntropyLoss { lb_proportion = { 1, 2, 3 } }))
  end)
end)

describe("PCSoftmaxCrossEntropyLoss errors", function()
  local x = ploss.randn({ 3, 4 })
  local y = ploss.tensor({ 0, 3, 1 }, { dtype = "i64" })
  local loss = ploss.empty({}, { dtype = "f32" })

  it("needs C valid priors", function()
    H.expect_error(function() F.pc_softmax_cross_entropy(x, y, { out = loss }) end, "lb_proportion (the C class priors w (not normalised): finite, ≥ 0, at least one > 0) is required", loss)
    H.expect_error(function() F.pc_softmax_cross_entropy(x, y, { lb_proportion = { 1, 2, 3 }, out = loss }) end,
      { "lb_proportion: expected shape [4] (one prior per class)", "PLOSS_ERR_SHAPE" }, loss)
    H.expect_error(function() F.pc_softmax_cross_entropy(x, y, { lb_proportion = { 1, -2, 3, 1 }, out = loss }) end,
      "lb_proportion: the prior -2 of class 1 is not a finite number >= 0", loss)
    H.expect_error(function() F.pc_softmax_cross_entropy(x, y, { lb_proportion = { 0, 0, 0, 0 }, out = loss }) end,
      "lb_proportion: every prior is 0", loss)
    -- a caller's tensor reaches the C check (CPU)
    local bad = ploss.tensor({ 1, 0 / 0, 1, 1 }, { dtype = "f64" })
    H.expect_error(function()
      ploss.check(ploss.C.ploss_pc_softmax_cross_entropy_forward(x:context(), x:dl(), y:dl(), bad:dl(), nil, loss:dl(), nil))
    end, { "nan of class 1 is not a finite number", "PLOSS_ERR_INVALID_ARGUMENT" }, loss)
    H.expect_error(function()
      ploss.check(ploss.C.ploss_pc_softmax_cross_entropy_forward(x:context(), x:dl(), y:dl(), nil, nil, loss:dl(), nil))
    end, "lb_proportion: tensor is NULL", loss)
    H.expect_error(function() F.pc_softmax_cross_entropy(x, y, { lb_proportion = ploss.tensor({ 1, 2, 3, 4 }, { dtype = "i64" }), out = loss }) end,
      "lb_proportion: expected a float dtype, got i64", loss)
  end)

  it("rejects labels out of range before writing", function()
    local grad = ploss.empty({ 3, 4 })
    H.expect_error(function() F.pc_softmax_cross_entropy_fused(x, ploss.tensor({ 0, 4, 1 }, { dtype = "i64" }), { lb_proportion = { 1, 1, 1, 1 }, out = loss, grad_input = grad }) end,
      "class index 4 at sample (n = 1, s = 0)", loss, grad)
  end)
end)
