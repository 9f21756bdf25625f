-- gaussian_nll_loss spec (suite 'cpu'): PyTorch's GaussianNLLLoss on the CPU backend.
--  * hand-derived values of every reduction, full, the ε clamp (and the variance's gradient
--    taken at the clamped value, as PyTorch), one variance per element and per row;
--  * PyTorch's variance shapes: the input's, without its last dim, with one dim of size 1 (the
--    last, or another: shared along that axis; also for 0-d and 1-d inputs), and the shapes it
--    refuses;
--  * central differences in f64 for the three inputs, every variance form and reduction,
--    strided views;
--  * a negative variance refused before anything is written; NaN variances; empty inputs;
--    f16/bf16 against f64 of the rounded inputs; option errors.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

local function f64(t) return ploss.tensor(t, { dtype = "f64" }) end

-- The reference: per element ℓ = ½(log v + d²/v) (+ ½log 2π), v = max(σ², ε), from flat
-- tables x, y and a variance function var(k) of the 1-based element index.
local function reference(x, y, var, eps, full)
  local l, gx, gv = {}, {}, {}
  for k = 1, #x do
    local v = math.max(var(k), eps)
    local d = x[k] - y[k]
    l[k] = 0.5 * (math.log(v) + d * d / v) + (full and HALF_LOG_2PI or 0)
    gx[k] = d / v
    gv[k] = 0.5 * (1 / v - d * d / (v * v))
  end
  return l, gx, gv
end

describe("gaussian_nll_loss by hand", function()
  it("one variance per element: loss, the three gradients, the ε clamp", function()
    local x = f64 { { 1, 2 }, { 3, 4 } }
    local y = f64 { { 0, 2 }, { 1, 1 } }
    local v = f64 { { 1, 0.5 }, { 2, 1e-9 } }
    -- (1,1) v = 1: ½(0 + 1); (1,2) v = ½: ½ log ½; (2,1) v = 2: ½(log 2 + 2);
    -- (2,2) v = 1e-9 < ε = 1e-6: ½(log 1e-6 + 9e6)
    local el = { 0.5, 0.5 * math.log(0.5), 0.5 * (math.log(2) + 2), 0.5 * (math.log(1e-6) + 9e6) }
    local egx = { 1, 0, 1, 3e6 }
    -- ∂ℓ/∂σ² = ½(1/v − d²/v²), at v = ε for the clamped element (not 0: PyTorch's clamp is
    -- outside autograd)
    local egv = { 0, 1, 0.5 * (0.5 - 1), 0.5 * (1e6 - 9e12) }
    local l, gx, gy, gv = F.gaussian_nll_loss_fused(x, y, v, { reduction = "none" })
    H.assert_close(l, el, { rtol = 1e-15 })
    H.assert_close(gx, egx, { rtol = 1e-15 })
    H.assert_close(gy, { -1, 0, -1, -3e6 }, { rtol = 1e-15 })
    H.assert_close(gv, egv, { rtol = 1e-15 })
    assert.are.same({ 2, 2 }, gv:size())
    local sum = el[1] + el[2] + el[3] + el[4]
    H.assert_close(F.gaussian_nll_loss(x, y, v), sum / 4, { rtol = 1e-15 })
    H.assert_close(F.gaussian_nll_loss(x, y, v, { reduction = "sum" }), sum, { rtol = 1e-15 })
    H.assert_close(F.gaussian_nll_loss(x, y, v, { reduction = "sum", full = true }), sum + 4 * HALF_LOG_2PI,
      { rtol = 1e-15 })
    -- ε = 1e-8 leaves 1e-9 clamped to 1e-8: ½(log 1e-8 + 9e8)
    local l2 = F.gaussian_nll_loss(x, y, v, { reduction = "none", eps = 1e-8 }):flat()
    H.assert_close(l2[4], 0.5 * (math.log(1e-8) + 9e8), { rtol = 1e-15 })
  end)

  it("one variance per row (μ's shape without its last dim, or with it of size 1): the row's sum", function()
    local x = f64 { { 1, 2 }, { 3, 4 } }
    local y = f64 { { 0, 2 }, { 1, 1 } }
    -- row 1: v = 2, d = 1, 0; row 2: v = 4, d = 2, 3
    local el = { 0.5 * (math.log(2) + 0.5), 0.5 * math.log(2), 0.5 * (math.log(4) + 1), 0.5 * (math.log(4) + 9 / 4) }
    local sum = el[1] + el[2] + el[3] + el[4]
    for _, v in ipairs { f64 { 2, 4 }, f64 { { 2 }, { 4 } } } do
      local l, gx, gy, gv = F.gaussian_nll_loss_fused(x, y, v, { full = true })
      H.assert_close(l, sum / 4 + HALF_LOG_2PI, { rtol = 1e-15 })
      H.assert_close(gx, { 0.125, 0, 0.125, 0.1875 }, { rtol = 1e-15 })
      H.assert_close(gy, { -0.125, 0, -0.125, -0.1875 }, { rtol = 1e-15 })
      -- row 1: (½(½ − ¼) + ½(½ − 0))/4; row 2: (½(¼ − ¼) + ½(¼ − 9/16))/4
      H.assert_close(gv, { 0.09375, -0.0390625 }, { rtol = 1e-15 })
      assert.are.same(v:size(), gv:size())
    end
    -- the criterion, PyTorch's argument order (input, target, var); backward with an upstream
    -- gradient per element for 'none'
    local crit = ploss.GaussianNLLLoss { reduction = "none" }
    local gout = f64 { { 1, 2 }, { -1, 0.5 } }
    local gx, gy, gv = crit:backward(x, y, f64 { 2, 4 }, gout)
    H.assert_close(gx, { 0.5, 0, -0.5, 0.375 }, { rtol = 1e-15 })
    H.assert_close(gy, { -0.5, 0, 0.5, -0.375 }, { rtol = 1e-15 })
    -- row 1: 1·½(½ − ¼) + 2·½(½ − 0); row 2: −1·0 + ½·½(¼ − 9/16)
    H.assert_close(gv, { 0.625, -0.078125 }, { rtol = 1e-15 })
  end)

  it("a variance shared along another axis (PyTorch's [N, 1, H, W] for [N, C, H, W]): its elements' sum", function()
    local x = f64 { { 1, 2 }, { 3, 4 } }
    local y = f64 { { 0, 2 }, { 1, 1 } }
    -- var [1, 2]: column 1's v = 2 (d = 1, 2), column 2's v = 4 (d = 0, 3)
    local v = f64 { { 2, 4 } }
    local l, gx, gy, gv = F.gaussian_nll_loss_fused(x, y, v, { reduction = "sum" })
    H.assert_close(l, 0.5 * (math.log(2) + 0.5) + 0.5 * (math.log(2) + 2) + 0.5 * math.log(4) +
      0.5 * (math.log(4) + 9 / 4), { rtol = 1e-15 })
    H.assert_close(gx, { 0.5, 0, 1, 0.75 }, { rtol = 1e-15 })
    H.assert_close(gy, { -0.5, 0, -1, -0.75 }, { rtol = 1e-15 })
    -- column 1: ½(½ − ¼) + ½(½ − 1); column 2: ½(¼ − 0) + ½(¼ − 9/16)
    H.assert_close(gv, { { -0.125, -0.03125 } }, { rtol = 1e-15 })
    -- 'none' backward with an upstream gradient per element, and the 4-D shape of PyTorch's
    -- docs: the values of the variance expanded to the input's shape, its gradient summed
    local gout = f64 { { 1, 2 }, { -1, 0.5 } }
    local bx, by, bv = F.gaussian_nll_loss_backward(x, y, v, gout, { reduction = "none" })
    H.assert_close(bx, { 0.5, 0, -1, 0.375 }, { rtol = 1e-15 })
    H.assert_close(by, { -0.5, 0, 1, -0.375 }, { rtol = 1e-15 })
    H.assert_close(bv, { { 1 * 0.125 - 1 * -0.25, 2 * 0.125 + 0.5 * -0.0390625 * 4 } }, { rtol = 1e-15 })
    local x4 = ploss.randn({ 2, 3, 4, 5 }, { dtype = "f64", seed = 11 })
    local y4 = ploss.randn({ 2, 3, 4, 5 }, { dtype = "f64", seed = 12 })
    local v4 = ploss.rand({ 2, 1, 4, 5 }, { dtype = "f64", seed = 13, low = 0.5, high = 2 })
    local ve = v4:expand({ 2, 3, 4, 5 }):contiguous()
    local la, ax, ay, av = F.gaussian_nll_loss_fused(x4, y4, v4, { reduction = "none" })
    local lb, bx4, by4, bve = F.gaussian_nll_loss_fused(x4, y4, ve, { reduction = "none" })
    H.assert_close(la, lb, { rtol = 1e-15 })
    H.assert_close(ax, bx4, { rtol = 1e-15 })
    H.assert_close(ay, by4, { rtol = 1e-15 })
    local e, want = bve:flat(), {}
    for n = 0, 1 do
      for k = 0, 19 do want[n * 20 + k + 1] = e[n * 60 + k + 1] + e[n * 60 + 20 + k + 1] + e[n * 60 + 40 + k + 1] end
    end
    assert.are.same({ 2, 1, 4, 5 }, av:size())
    H.assert_close(av, want, { rtol = 1e-14 })
  end)

  it("0-d and 1-d inputs: a 0-d variance serves a 1-d input as one row", function()
    local l, gx, gy, gv = F.gaussian_nll_loss_fused(f64(3), f64(1), f64(2), { reduction = "sum" })
    H.assert_close(l, 0.5 * (math.log(2) + 2), { rtol = 1e-15 })
    H.assert_close(gx, 1, { rtol = 1e-15 })
    H.assert_close(gy, -1, { rtol = 1e-15 })
    H.assert_close(gv, 0.5 * (0.5 - 1), { rtol = 1e-15 })
    assert.are.same({}, gv:size())
    l, gx, gy, gv = F.gaussian_nll_loss_fused(f64 { 1, 3 }, f64 { 0, 0 }, f64(1), { reduction = "sum" })
    H.assert_close(l, 0.5 * (1 + 9), { rtol = 1e-15 })
    H.assert_close(gv, 0.5 * (1 - 1) + 0.5 * (1 - 9), { rtol = 1e-15 })
    assert.are.same({}, gv:size())
    l, gx, gy, gv = F.gaussian_nll_loss_fused(f64 { 1, 3 }, f64 { 0, 0 }, f64 { 1 }, { reduction = "sum" })
    H.assert_close(gv, { -4 }, { rtol = 1e-15 })
  end)

  it("a number as var (PyTorch's float var): every element's variance, no gradient returned", function()
    -- μ = (1, 2), y = 0, σ² = 0.5: ½(log 0.5 + 1/0.5) + ½(log 0.5 + 4/0.5), mean → 0.5·log 0.5 + 2.5
    local mu, y = f64 { 1, 2 }, f64 { 0, 0 }
    local want = 0.5 * math.log(0.5) + 2.5
    H.assert_close(F.gaussian_nll_loss(mu, y, 0.5), want, { rtol = 1e-15 })
    local crit = ploss.GaussianNLLLoss { reduction = "sum" }
    H.assert_close(crit:forward(mu, y, 0.5), 2 * want, { rtol = 1e-15 })
    local r = { crit:backward(mu, y, 0.5) }
    assert.are.equal(2, #r)
    H.assert_equal(r[1], { 2, 4 }) -- d/σ²
    H.assert_equal(r[2], { -2, -4 })
    r = { crit(mu, y, 0.5) }
    assert.are.equal(3, table.maxn(r))
    H.assert_close(r[1], 2 * want, { rtol = 1e-15 })
    H.assert_equal(r[3], { -2, -4 })
    r = { F.gaussian_nll_loss_fused(mu, y, 0.5, { reduction = "none" }) }
    assert.are.equal(3, table.maxn(r))
    H.assert_close(r[1], { 0.5 * math.log(0.5) + 1, 0.5 * math.log(0.5) + 4 }, { rtol = 1e-15 })
    r = { F.gaussian_nll_loss_backward(mu, y, 0.5, 3) }
    assert.are.equal(2, #r)
    H.assert_equal(r[1], { 3, 6 }) -- the mean's 1/2 times 3
    -- the same values as a tensor of μ's shape; a 0-d μ and a bf16 μ take it in their form
    local l, gx = F.gaussian_nll_loss_fused(f64(3), f64(1), 2)
    H.assert_close(l, 0.5 * (math.log(2) + 2), { rtol = 1e-15 })
    H.assert_equal(gx, 1)
    local b = ploss.tensor({ { 1, -2 }, { 0.5, 3 } }, { dtype = "bf16" })
    H.assert_equal(F.gaussian_nll_loss(b, b:clone():fill(0), 0.25, { reduction = "none" }),
      F.gaussian_nll_loss(b, b:clone():fill(0), ploss.full({ 2, 2 }, 0.25, { dtype = "bf16" }), { reduction = "none" }))
    -- rounded to μ's dtype as PyTorch's var·ones_like(μ): 65519 → 65504 in f16, 1e5 → +∞; NaN gives NaN
    local h = ploss.tensor({ 1, 2 }, { dtype = "f16" })
    local hz = h:clone():fill(0)
    H.assert_equal(F.gaussian_nll_loss(h, hz, 65519), F.gaussian_nll_loss(h, hz, 65504))
    assert.are.equal(math.huge, F.gaussian_nll_loss(h, hz, 1e5))
    local nan = F.gaussian_nll_loss(mu, y, 0 / 0)
    assert.is_true(nan ~= nan)
    -- refused: negative, and a gradient buffer for it
    H.expect_error(function() F.gaussian_nll_loss(mu, y, -1) end,
      "gaussian_nll_loss: var: a number must be >= 0 (the value of every element), got -1")
    H.expect_error(function() F.gaussian_nll_loss(mu, y, -1e-300) end, "var: a number must be >= 0")
    H.expect_error(function() F.gaussian_nll_loss_fused(mu, y, 0.5, { grad_var = f64 { 0, 0 } }) end,
      "gaussian_nll_loss_fused: opts.grad_var: given while var is a number (a number gets no gradient)")
    -- a number call leaves the grad_var an earlier call returned as it was
    local c2 = ploss.GaussianNLLLoss {}
    local _, _, gv = c2:backward(mu, y, f64 { 0.5 })
    local before = gv:totable()
    c2:backward(mu, y, 0.25)
    H.assert_equal(gv, before)
    crit.grad_var = f64 { 0, 0 }
    H.expect_error(function() crit:backward(mu, y, 0.5) end,
      "GaussianNLLLoss.grad_var: given while var is a number (a number gets no gradient)")
  end)

  it("refuses the variance shapes PyTorch refuses, and a target of another shape", function()
    local x = ploss.randn({ 3, 4 }, { dtype = "f64" })
    local y = ploss.randn({ 3, 4 }, { dtype = "f64" })
    local out = ploss.empty({}, { dtype = "f64" })
    for _, sizes in ipairs { { 4 }, { 3, 2 }, { 1, 1 }, { 3, 4, 1 }, { 1 }, {} } do
      local v = ploss.rand(sizes, { dtype = "f64" })
      H.expect_error(function() local l = F.gaussian_nll_loss(x, y, v, { out = out }) return l end,
        { "var: expected [3, 4] (the input's shape), that shape with one dim of size 1", "PLOSS_ERR_SHAPE" }, out)
    end
    H.expect_error(function()
      local l = F.gaussian_nll_loss(x, ploss.randn({ 3, 1 }, { dtype = "f64" }), y, { out = out })
      return l
    end,
      { "target", "PLOSS_ERR_SHAPE" }, out)
    H.expect_error(function() local l = F.gaussian_nll_loss(x, y, y:float(), { out = out }) return l end,
      { "var", "PLOSS_ERR_DTYPE" }, out)
    -- var may be a number too (the target may not)
    H.expect_error(function() local l = F.gaussian_nll_loss(x, y, "1", { out = out }) return l end,
      "gaussian_nll_loss: var: expected a ploss tensor or a number, got string", out)
    H.expect_error(function() local l = F.gaussian_nll_loss(x, 1, y, { out = out }) return l end,
      "gaussian_nll_loss: target: expected a ploss tensor, got number", out)
  end)

  it("refuses a negative variance before writing anything; NaN variances give NaN", function()
    local x = f64 { { 1, 2 }, { 3, 4 } }
    local y = f64 { { 0, 2 }, { 1, 1 } }
    local out = ploss.empty({ 2, 2 }, { dtype = "f64" })
    local g = { ploss.empty({ 2, 2 }, { dtype = "f64" }), ploss.empty({ 2, 2 }, { dtype = "f64" }),
      ploss.empty({ 2, 2 }, { dtype = "f64" }) }
    H.expect_error(function()
      local l = F.gaussian_nll_loss_fused(x, y, f64 { { 1, 1 }, { -0.5, -1 } },
        { reduction = "none", out = out, grad_input = g[1], grad_target = g[2], grad_var = g[3] })
      return l
    end, { "var: element 2 (0-based, row-major) is negative", "PLOSS_ERR_INVALID_ARGUMENT" }, out, g[1], g[2], g[3])
    local gr = ploss.empty({ 2 }, { dtype = "f64" })
    H.expect_error(function()
      local gi = F.gaussian_nll_loss_backward(x, y, f64 { 1, -2 }, nil, { grad_input = g[1], grad_var = gr })
      return gi
    end, { "var: element 1 (0-based, row-major) is negative" }, g[1], gr)
    -- -0 is not negative; NaN is not refused (PyTorch's var < 0 is false) and propagates
    local l, gx, _, gv = F.gaussian_nll_loss_fused(x, y, f64 { { -0.0, 0 / 0 }, { 1, 1 } }, { reduction = "none" })
    local lv, gxv, gvv = l:flat(), gx:flat(), gv:flat()
    H.assert_close(lv[1], 0.5 * (math.log(1e-6) + 1e6), { rtol = 1e-15 })
    assert.is_true(lv[2] ~= lv[2] and gxv[2] ~= gxv[2] and gvv[2] ~= gvv[2])
    assert.is_true(lv[3] == lv[3])
  end)

  it("empty inputs: 'mean' NaN, 'sum' 0, a shared variance's gradient 0", function()
    local x = ploss.empty({ 3, 0 }, { dtype = "f64" })
    assert.is_true(F.gaussian_nll_loss(x, x, x) ~= F.gaussian_nll_loss(x, x, x))
    H.assert_close(F.gaussian_nll_loss(x, x, x, { reduction = "sum" }), 0, {})
    local v = f64 { 1, 2, 3 }
    local gx, gy, gv = F.gaussian_nll_loss_backward(x, x, v, 1, { reduction = "sum" })
    assert.are.same({ 3, 0 }, gx:size())
    assert.are.same({ 3, 0 }, gy:size())
    H.assert_equal(gv, { 0, 0, 0 })
  end)
end)

-- Inputs of `sizes` and variances of `vsizes` (f64), variances in [0.05, 2).
local function data(sizes, vsizes, seed)
  H.seed(seed)
  local x = ploss.randn(sizes, { dtype = "f64" })
  local y = ploss.randn(sizes, { dtype = "f64" })
  local v = ploss.rand(vsizes, { dtype = "f64", low = 0.05, high = 2 })
  return x, y, v
end

describe("gaussian_nll_loss gradients (central differences, f64)", function()
  it("the three inputs, every variance form and reduction, strided views", function()
    local n, seed = 0, 900
    local cases = {
      { { 3, 4 }, { 3, 4 } }, { { 3, 4 }, { 3 } }, { { 3, 4 }, { 3, 1 } },
      { { 2, 3, 5 }, { 2, 3 } }, { { 2, 3, 5 }, { 2, 3, 5 } }, { { 7 }, {} }, { { 5, 1 }, { 5 } }, { { 1 }, {} },
      { { 3, 4 }, { 1, 4 } }, { { 2, 3, 5 }, { 2, 1, 5 } }, { { 2, 3, 5 }, { 1, 3, 5 } },
    }
    for _, c in ipairs(cases) do
      for _, red in ipairs { "none", "mean", "sum" } do
        for _, full in ipairs { false, true } do
          seed = seed + 1
          local x, y, v = data(c[1], c[2], seed)
          -- ε below every variance: central differences of a clamped variance are 0 where its
          -- gradient is PyTorch's (taken at ε; checked by hand above)
          local o = { reduction = red, full = full, eps = 0.01 }
          local gout = red == "none" and ploss.randn(c[1], { dtype = "f64" }) or nil
          local gx, gy, gv = F.gaussian_nll_loss_backward(x, y, v, gout, o)
          local function objective()
            local l = F.gaussian_nll_loss(x, y, v, o)
            if red ~= "none" then return l end
            local s, lv, gv2 = 0, l:flat(), gout:flat()
            for i = 1, #lv do s = s + lv[i] * gv2[i] end
            return s
          end
          local what = string.format("%s → %s %s full=%s", table.concat(c[1], "x"), table.concat(c[2], "x"), red,
            tostring(full))
          H.gradcheck(objective, x, gx, { what = what .. " input", seed = seed })
          H.gradcheck(objective, y, gy, { what = what .. " target", seed = seed })
          H.gradcheck(objective, v, gv, { what = what .. " var", seed = seed })
          -- the fused pass: loss and the backward's gradients times the scale
          local l, fx, fy, fv = F.gaussian_nll_loss_fused(x, y, v, H.with(o, { scale = 0.75 }))
          H.assert_close(l, F.gaussian_nll_loss(x, y, v, o), { rtol = 1e-15 })
          local up = red == "none" and ploss.full(c[1], 0.75, { dtype = "f64" }) or 0.75
          local bx, by, bv = F.gaussian_nll_loss_backward(x, y, v, up, o)
          H.assert_close(fx, bx, { rtol = 1e-15 })
          H.assert_close(fy, by, { rtol = 1e-15 })
          H.assert_close(fv, bv, { rtol = 1e-15 })
          n = n + 1
        end
      end
    end
    assert.are.equal(#cases * 3 * 2, n)
  end)

  it("strided views give the values of contiguous copies", function()
    local x, y = data({ 5, 6 }, { 5 }, 42)
    -- transposed input, target and per-element variances; a per-row variance every other
    -- element of a buffer
    local xs = ploss.zeros({ 6, 5 }, { dtype = "f64" }):t():copy(x)
    local ys = ploss.zeros({ 6, 5 }, { dtype = "f64" }):t():copy(y)
    local ve = ploss.rand({ 5, 6 }, { dtype = "f64", low = 0.1, high = 2 })
    local vt = ploss.zeros({ 6, 5 }, { dtype = "f64" }):t():copy(ve)
    local vr = ploss.rand({ 5 }, { dtype = "f64", low = 0.1, high = 2 })
    local vs = ploss.zeros({ 5, 2 }, { dtype = "f64" }):select(2, 2):copy(vr)
    for _, o in ipairs { { reduction = "none" }, { reduction = "sum" } } do
      for _, v in ipairs { { vt, ve }, { vs, vr } } do
        local ref = { F.gaussian_nll_loss_fused(x, y, v[2], o) }
        local got = { F.gaussian_nll_loss_fused(xs, ys, v[1], o) }
        for i = 1, 4 do H.assert_close(got[i], ref[i], { rtol = 1e-15 }) end
      end
    end
  end)
end)

describe("gaussian_nll_loss dtypes and options", function()
  it("f16 and bf16: the f64 values of the same rounded inputs", function()
    for _, dtype in ipairs { "f16", "bf16" } do
      for _, vs in ipairs { { 4, 33 }, { 4 } } do
        local x, y, v = data({ 4, 33 }, vs, 77)
        x, y, v = x:to("cpu", dtype), y:to("cpu", dtype), v:to("cpu", dtype)
        local got = { F.gaussian_nll_loss_fused(x, y, v, { reduction = "sum" }) }
        assert.are.equal(dtype, got[4]:dtype())
        local ref = { F.gaussian_nll_loss_fused(x:to("cpu", "f64"), y:to("cpu", "f64"), v:to("cpu", "f64"),
          { reduction = "sum" }) }
        H.assert_close_scaled(got[1], ref[1], 1e-6, 0, dtype .. " loss")
        for i = 2, 4 do H.assert_close_scaled(got[i], ref[i], dtype == "f16" and 1e-3 or 8e-3, 0, dtype .. " gradient") end
      end
    end
  end)

  it("eps out of range and a non-boolean full name the option", function()
    local x = ploss.randn({ 3, 4 }, { dtype = "f64" })
    local out = ploss.empty({}, { dtype = "f64" })
    local v = ploss.rand({ 3, 4 }, { dtype = "f64" })
    H.expect_error(function() local l = F.gaussian_nll_loss(x, x, v, { eps = -1, out = out }) return l end,
      "opts.eps: -1 is not a finite number >= 0", out)
    H.expect_error(function() local l = F.gaussian_nll_loss(x, x, v, { full = 1, out = out }) return l end,
      "full: expected a boolean", out)
  end)

  it("agrees with the reference formula on random data", function()
    local x, y, v = data({ 6, 5 }, { 6, 5 }, 5)
    local xs, ys, vs = x:flat(), y:flat(), v:flat()
    local el, egx, egv = reference(xs, ys, function(k) return vs[k] end, 1e-6, false)
    local l, gx, gy, gv = F.gaussian_nll_loss_fused(x, y, v, { reduction = "none", scale = 1 })
    H.assert_close(l, el, { rtol = 1e-13 })
    H.assert_close(gx, egx, { rtol = 1e-13 })
    for k = 1, #egx do egx[k] = -egx[k] end
    H.assert_close(gy, egx, { rtol = 1e-13 })
    H.assert_close(gv, egv, { rtol = 1e-13 })
  end)
end)
