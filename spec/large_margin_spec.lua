-- Large-margin softmax spec (suite 'cpu') on the CPU backend.
--  * every large_margin_softmax case of reference_semantics.json (pytorch-loss V1
--    autograd, f64) in f64 and f32, criterion and functional, forward/backward/fused;
--  * central differences in f64 over reductions × λ × ignored samples × shapes;
--  * C = 2 equals plain cross-entropy; closed form R = E_q[x] − mean(x_𝒩) by hand;
--  * a target logit 1e3 above the rest, rows below −1e4: finite loss and gradient;
--  * state (3 floats per sample), in place, dtypes, layouts; bad input.
local H = require "spec.helpers"
local S = require "spec.softmax2_common"
local ploss = H.ploss
local F = ploss.F

local NAME, FNAME = "LargeMarginSoftmaxLoss", "large_margin_softmax"

describe("LargeMarginSoftmaxLoss fixtures", function()
  local cases = H.fixtures("large_margin_softmax")
  it("has the 12 reference cases", function() assert.are.equal(12, #cases) end)
  for _, run in ipairs(S.fixture_runs) do
    it("matches every case in " .. run.dtype, function()
      for _, case in ipairs(cases) do
        local o = case.options
        S.check_fixture(NAME, FNAME, case, run, { lam = o.lam, reduction = o.reduction, ignore_index = o.ignore_index })
      end
    end)
  end
end)

-- f64 reference by the definition ℓ = CE + (λ/2)·Σ_{j≠y} (q_j − u)·log q_j
local function reference_row(x, y, lam)
  local Cn = #x
  local m = -math.huge
  for j = 1, Cn do m = math.max(m, x[j]) end
  local s = 0
  for j = 1, Cn do s = s + math.exp(x[j] - m) end
  local ce = m + math.log(s) - x[y + 1]
  local m2 = -math.huge
  for j = 1, Cn do if j ~= y + 1 then m2 = math.max(m2, x[j]) end end
  local s2 = 0
  for j = 1, Cn do if j ~= y + 1 then s2 = s2 + math.exp(x[j] - m2) end end
  local r = 0
  for j = 1, Cn do
    if j ~= y + 1 then
      local logq = x[j] - m2 - math.log(s2)
      r = r + (math.exp(logq) - 1 / (Cn - 1)) * logq
    end
  end
  return ce + lam / 2 * r
end

describe("LargeMarginSoftmaxLoss by hand", function()
  it("matches the definition row by row ('none'), ignored samples give 0", function()
    H.seed(21)
    local x = H.random_logits({ 6, 5 }, { std = 3 })
    local y = ploss.tensor({ 0, 4, -100, 2, 1, 3 }, { dtype = "i64" })
    local l = F.large_margin_softmax(x, y, { reduction = "none", lam = 0.7 }):flat()
    local xv, yv = x:totable(), y:flat()
    for i = 1, 6 do
      local e = yv[i] == -100 and 0 or reference_row(xv[i], yv[i], 0.7)
      H.assert_close(l[i], e, { rtol = 1e-13, atol = 1e-15, what = "row " .. i })
    end
  end)

  it("with two classes equals cross-entropy (the regulariser vanishes)", function()
    H.seed(22)
    local x = H.random_logits({ 7, 2 }, { std = 2 })
    local y = H.random_labels({ 7 }, 2, { ignore = 0.3, ignore_index = -100 })
    for _, red in ipairs { "mean", "sum", "none" } do
      local l, g = F.large_margin_softmax_fused(x, y, { reduction = red, lam = 0.9 })
      local lc, gc = F.cross_entropy_fused(x, y, { reduction = red, ignore_index = -100 })
      H.assert_close(l, lc, { rtol = 1e-14, atol = 1e-15, what = red })
      H.assert_close(g, gc, { rtol = 1e-13, atol = 1e-16, what = red })
    end
  end)

  it("with λ = 0 equals cross-entropy for any C", function()
    H.seed(23)
    local x = H.random_logits({ 3, 6, 2, 2 })
    local y = H.random_labels({ 3, 2, 2 }, 6, { ignore = 0.2, ignore_index = -100 })
    local l, g = F.large_margin_softmax_fused(x, y, { lam = 0 })
    local lc, gc = F.cross_entropy_fused(x, y, { ignore_index = -100 })
    H.assert_close(l, lc, { rtol = 1e-14 })
    H.assert_close(g, gc, { rtol = 1e-13, atol = 1e-16 })
  end)

  it("stays finite with a target logit 1e3 above the rest (separate maxima), in f64 and f32", function()
    -- x = (1000, 0, 1, 2), y = 0: CE = log(1 + e^-1000 + …) ≈ 0; R = E_q[x] − 1 over (0, 1, 2)
    local q = { math.exp(0), math.exp(1), math.exp(2) }
    local z = q[1] + q[2] + q[3]
    local eq = (0 * q[1] + 1 * q[2] + 2 * q[3]) / z
    local expect = 0.15 * (eq - 1)
    for _, dt in ipairs { "f64", "f32", "f16", "bf16" } do
      local x = ploss.tensor({ { 1000, 0, 1, 2 }, { -3, 1e3, 0, 0.5 } }, { dtype = dt })
      local y = ploss.tensor({ 0, 1 }, { dtype = "i64" })
      local l, g = F.large_margin_softmax_fused(x, y, { reduction = "none" })
      local lv = l:flat()
      H.assert_close(lv[1], expect, { rtol = dt == "f64" and 1e-14 or 1e-5, what = dt .. " loss" })
      for _, v in ipairs(g:flat()) do assert.is_true(v == v and math.abs(v) < 1, dt .. " gradient " .. v) end
      for _, v in ipairs(lv) do assert.is_true(v == v and v < math.huge, dt .. " loss " .. v) end
    end
    -- a masked non-target class (−∞): the regulariser's limit, a loss of +∞
    for _, o in ipairs { { lam = 0.3 }, { lam = 0.3, reduction = "sum" } } do
      local l = F.large_margin_softmax(ploss.tensor({ { 0, -math.huge, 1 } }, { dtype = "f64" }),
        ploss.tensor({ 0 }, { dtype = "i64" }), o)
      assert.are.equal(math.huge, type(l) == "number" and l or l:item())
    end
    -- gradient of the dominant row in f64 by central differences
    local x = ploss.tensor({ { 1000, 0, 1, 2 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0 }, { dtype = "i64" })
    S.gradcheck(NAME, FNAME, x, y, {}, "dominant target", nil)
  end)

  it("gives f32 logits near ±FLT_MAX the f64 values (no 0·∞ where a difference overflows float)", function()
    -- logits (0, 2e38, −2e38), label 0, λ = 0.3: p = (0, 1, 0); the regulariser's
    -- (λ/2)·Σ_{j≠y} q_j·(log q_j + log(C − 1)) pushes −2e38 (q = 0) by −(λ/2)/(C − 1)
    local y = ploss.tensor({ 0 }, { dtype = "i64" })
    local want_l, want_g
    for _, dtype in ipairs { "f64", "f32" } do
      for _, crit in ipairs { ploss.LargeMarginSoftmaxLoss {}, ploss.OhemLargeMarginLoss { n_min = 5 } } do
        local l, g = crit(ploss.tensor({ { 0, 2e38, -2e38 } }, { dtype = dtype }), y)
        if not want_l then want_l, want_g = l, g:totable() end
        H.assert_close(l, want_l, { rtol = 1e-7, what = dtype })
        H.assert_close(g, want_g, { rtol = 1e-7, what = dtype })
      end
    end
    H.assert_close(want_g, { { -1, 1.075, -0.075 } }, { rtol = 1e-14 })
  end)

  it("ties at a large magnitude: the fused pass's softmax from its sums, not from lse", function()
    -- (0, 1e30, 1e30, 1e30, 1), label 1, λ = 0.3: p = (0, 1/3, 1/3, 1/3, 0), the non-targets'
    -- q = (0, ·, 1/2, 1/2, 0) with x_j − E + 1 = 1 for the tied ones: ∂ℓ/∂x_j = p_j +
    -- 0.15·(q_j − 1/4), ∂ℓ/∂x_y = −2/3 (e^(x − lse) would give each tied class p = 1); rows
    -- and the same rows class-strided
    local T, g5 = 1e30, { -0.0375, -2 / 3, 1 / 3 + 0.0375, 1 / 3 + 0.0375, -0.0375 }
    local y = ploss.tensor({ 1, 1 }, { dtype = "i64" })
    for _, dtype in ipairs { "f64", "f32" } do
      local x = ploss.tensor({ { 0, T, T, T, 1 }, { 0, T, T, T, 1 } }, { dtype = dtype })
      for _, xv in ipairs { x, x:t():contiguous():t() } do
        local _, g = ploss.LargeMarginSoftmaxLoss { lam = 0.3, reduction = "sum" }(xv, y)
        H.assert_close(g, { g5, g5 }, { rtol = dtype == "f64" and 1e-14 or 1e-6, what = dtype })
      end
    end
  end)

  it("stays finite for rows entirely below −1e4 (no finite running-max sentinel)", function()
    local x = ploss.tensor({ { -2e4, -2e4 - 1, -2e4 + 2, -2e4 - 3 } }, { dtype = "f64" })
    local y = ploss.tensor({ 1 }, { dtype = "i64" })
    local ref = reference_row({ 0, -1, 2, -3 }, 1, 0.3) -- shift invariant
    H.assert_close(F.large_margin_softmax(x, y), ref, { rtol = 1e-9 })
    H.assert_close(F.large_margin_softmax(x:float(), y), ref, { rtol = 1e-4 })
  end)

  it("with every sample ignored: NaN 'mean', zero gradient; 'sum' is 0", function()
    local x = H.random_logits({ 3, 4 })
    local y = ploss.full({ 3 }, -100, { dtype = "i64" })
    local crit = ploss.LargeMarginSoftmaxLoss {}
    local l = crit:forward(x, y)
    assert.is_true(l ~= l)
    H.assert_equal(crit:backward(x, y), ploss.zeros({ 3, 4 }, { dtype = "f64" }))
    local lf, gf = crit(x, y)
    assert.is_true(lf ~= lf)
    H.assert_equal(gf, ploss.zeros({ 3, 4 }, { dtype = "f64" }))
    local ls, gs = F.large_margin_softmax_fused(x, y, { reduction = "sum" })
    assert.are.equal(0, ls)
    H.assert_equal(gs, ploss.zeros({ 3, 4 }, { dtype = "f64" }))
    -- an empty batch too
    local le = F.large_margin_softmax(ploss.empty({ 0, 4 }, { dtype = "f64" }), ploss.empty({ 0 }, { dtype = "i64" }))
    assert.is_true(le ~= le)
  end)
end)

describe("LargeMarginSoftmaxLoss gradients (central differences, f64)", function()
  it("for every reduction × λ × ignore × shape", function()
    local seed, n = 2100, 0
    H.each({ "none", "mean", "sum" }, { 0.3, 1, 2.5 }, { false, true }, { { 4, 5 }, { 2, 3, 2, 3 }, { 3, 2 } },
      function(red, lam, ignore, shape)
        seed = seed + 1
        H.seed(seed)
        local x = H.random_logits(shape, { std = 2 })
        local y = S.labels(shape, { ignore = ignore and 0.3 or 0, ignore_index = 7 })
        local label = string.format("%s λ=%g ign=%s %s", red, lam, tostring(ignore), table.concat(shape, "x"))
        S.gradcheck(NAME, FNAME, x, y, { reduction = red, lam = lam, ignore_index = 7 }, label, seed)
        n = n + 1
      end)
    assert.are.equal(54, n)
  end)
end)

describe("LargeMarginSoftmaxLoss state, layouts and dtypes", function()
  it("keeps 3 floats per sample (N×3×d1×…×dk): lse, lse over 𝒩, E_q[x]", function()
    H.seed(31)
    local x = H.random_logits({ 2, 4, 3 })
    local y = ploss.tensor({ { 0, 3, -100 }, { 1, 2, 2 } }, { dtype = "i64" })
    local crit = ploss.LargeMarginSoftmaxLoss {}
    crit:forward(x, y)
    assert.are.same({ 2, 3, 3 }, crit._state:size())
    local st, xv = crit._state:totable(), x:totable()
    -- sample (1, 1): label 0
    local col = {}
    for j = 1, 4 do col[j] = xv[1][j][1] end
    local lse = math.log(math.exp(col[1]) + math.exp(col[2]) + math.exp(col[3]) + math.exp(col[4]))
    local z2 = math.exp(col[2]) + math.exp(col[3]) + math.exp(col[4])
    local eq = (col[2] * math.exp(col[2]) + col[3] * math.exp(col[3]) + col[4] * math.exp(col[4])) / z2
    H.assert_close({ st[1][1][1], st[1][2][1], st[1][3][1] }, { lse, math.log(z2), eq }, { rtol = 1e-13 })
    H.assert_equal({ st[1][1][3], st[1][2][3], st[1][3][3] }, { 0, 0, 0 }) -- ignored sample
  end)

  it("channels-last and narrowed inputs give the values of the contiguous input", function()
    H.seed(32)
    local x = H.random_logits({ 2, 5, 3, 4 })
    local xl = x:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3)
    local y = H.random_labels({ 2, 3, 4 }, 5, { ignore = 0.2, ignore_index = -100 })
    for _, red in ipairs { "none", "mean", "sum" } do
      local l1, g1 = F.large_margin_softmax_fused(x, y, { reduction = red })
      local l2, g2 = F.large_margin_softmax_fused(xl, y, { reduction = red })
      H.assert_close(l2, l1, { rtol = 1e-13, what = red })
      H.assert_close(g2, g1, { rtol = 1e-13, atol = 1e-16, what = red })
    end
    local big = H.random_logits({ 6, 9 })
    local xn = big:narrow(1, 2, 4):narrow(2, 3, 6)
    local yn = H.random_labels({ 4 }, 6)
    local l1, g1 = F.large_margin_softmax_fused(xn:contiguous(), yn)
    local l2, g2 = F.large_margin_softmax_fused(xn, yn)
    H.assert_close(l2, l1, { rtol = 1e-14 })
    H.assert_close(g2, g1, { rtol = 1e-14, atol = 1e-17 })
  end)

  it("f32, f16 and bf16 inputs match f64 on the same values; gradient in the input dtype", function()
    H.seed(33)
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local x = ploss.randn({ 6, 7, 3 }, { dtype = dt, std = 3 })
      local y = H.random_labels({ 6, 3 }, 7, { ignore = 0.2, ignore_index = -100 })
      local l, g = F.large_margin_softmax_fused(x, y, { lam = 0.5 })
      local lr, gr = F.large_margin_softmax_fused(x:double(), y, { lam = 0.5 })
      assert.are.equal(dt, g:dtype())
      H.assert_close(l, lr, { rtol = 1e-6, what = dt .. " loss" })
      H.assert_close(g, gr, { rtol = H.tol[dt].rtol, atol = H.tol[dt].atol, what = dt .. " grad" })
    end
  end)

  it("inplace = true writes the gradient over the input", function()
    H.seed(34)
    local x = ploss.randn({ 5, 6 })
    local y = H.random_labels({ 5 }, 6, { ignore = 0.2, ignore_index = -100 })
    local lr, gr = F.large_margin_softmax_fused(x, y, { lam = 1 })
    local xc = x:clone()
    local l, g = ploss.LargeMarginSoftmaxLoss { lam = 1, inplace = true }(xc, y)
    assert.are.equal(xc, g)
    H.assert_close(l, lr, { rtol = 0 })
    H.assert_equal(xc, gr)
  end)

  it("prints its options", function()
    assert.are.equal("ploss.LargeMarginSoftmaxLoss(ignore_index=-100, lam=0.3, reduction='mean')",
      tostring(ploss.LargeMarginSoftmaxLoss {}))
    assert.matches("Kobayashi", tostring(ploss.LargeMarginSoftmaxLoss))
  end)
end)

describe("LargeMarginSoftmaxLoss errors", function()
  local x = ploss.randn({ 3, 4 })
  local y = ploss.tensor({ 0, 3, 1 }, { dtype = "i64" })
  local loss = ploss.empty({}, { dtype = "f32" })
  local grad = ploss.empty({ 3, 4 })

  it("rejects C < 2", function()
    local x1 = ploss.randn({ 3, 1 })
    local g1 = ploss.empty({ 3, 1 })
    H.expect_error(function() F.large_margin_softmax_fused(x1, ploss.zeros({ 3 }, { dtype = "i64" }), { out = loss, grad_input = g1 }) end,
      { "input: expected at least 2 classes along axis 1", "PLOSS_ERR_SHAPE" }, loss, g1)
  end)

  it("rejects labels out of range before writing anything", function()
    H.expect_error(function() F.large_margin_softmax_fused(x, ploss.tensor({ 0, 4, 1 }, { dtype = "i64" }), { out = loss, grad_input = grad }) end,
      { "class index 4 at sample (n = 1, s = 0) is outside [0, 4)", "PLOSS_ERR_INVALID_LABEL" }, loss, grad)
    H.expect_error(function() F.large_margin_softmax(x, ploss.tensor({ 0, 255, 1 }, { dtype = "i64" }), { out = loss }) end,
      "class index 255", loss)
  end)

  it("rejects a bad λ, shapes, dtypes and aliasing", function()
    H.expect_error(function() F.large_margin_softmax_fused(x, y, { lam = -1, out = loss, grad_input = grad }) end,
      "opts.lam: -1 is not a finite number >= 0", loss, grad)
    H.expect_error(function() F.large_margin_softmax_fused(x, y, { lam = 0 / 0, out = loss, grad_input = grad }) end,
      "opts.lam", loss, grad)
    H.expect_error(function() F.large_margin_softmax_fused(x, ploss.tensor({ 0, 3 }, { dtype = "i64" }), { out = loss, grad_input = grad }) end,
      "target: expected shape [3] (the input's shape without the class axis)", loss, grad)
    H.expect_error(function() F.large_margin_softmax_fused(x, ploss.tensor({ 0, 3, 1 }), { out = loss, grad_input = grad }) end,
      "target: class indices must be i64 or i32, got f32", loss, grad)
    H.expect_error(function() F.large_margin_softmax_fused(x, y, { out = loss, grad_input = ploss.empty({ 3, 4 }, { dtype = "f64" }) }) end,
      "grad_input: expected f32, got f64", loss)
    H.expect_error(function() F.large_margin_softmax_fused(x, y, { out = loss, grad_input = x }) end, "PLOSS_ERR_ALIAS", loss)
    local state = ploss.empty({ 3, 2 })
    H.expect_error(function()
      ploss.check(ploss.C.ploss_large_margin_softmax_forward(x:context(), x:dl(), y:dl(), nil, loss:dl(), state:dl()))
    end, "state: expected shape [3, 3]", loss, state)
  end)
end)
