-- poisson_nll_loss spec (suite 'cpu'): PyTorch's PoissonNLLLoss on the CPU backend.
--  * hand-derived values of every option (log_input, full, eps) and reduction, f64 and f32;
--  * the Stirling term only where y > 1, the gradient independent of it;
--  * central differences in f64 for every option and reduction, N×C and N×C×H×W;
--  * the criterion class, f16/bf16 against f64 of the rounded inputs, eps out of range.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local LOG2PI = math.log(2 * math.pi)
local function stirling(y) return y > 1 and (y * math.log(y) - y + 0.5 * (LOG2PI + math.log(y))) or 0 end

describe("poisson_nll_loss by hand", function()
  it("log_input (default): e^x − y·x, gradient e^x − y, 'mean' over the element count", function()
    local x = ploss.tensor({ 0, 0, math.log(2), math.log(3), 1 }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 1, 2, 3, 0.5 }, { dtype = "f64" })
    local e = math.exp(1)
    local el = { 1, 1, 2 - 2 * math.log(2), 3 - 3 * math.log(3), e - 0.5 }
    local eg = { 1, 0, 0, 0, e - 0.5 }
    local l, g = F.poisson_nll_loss_fused(x, y, { reduction = "none" })
    H.assert_close(l, el, { rtol = 1e-14, atol = 1e-15 })
    H.assert_close(g, eg, { rtol = 1e-14, atol = 1e-15 })
    local sum = 0
    for i = 1, #el do sum = sum + el[i] end
    H.assert_close(F.poisson_nll_loss(x, y), sum / 5, { rtol = 1e-15 })
    H.assert_close(F.poisson_nll_loss(x, y, { reduction = "sum" }), sum, { rtol = 1e-15 })
    -- 'mean' backward: the upstream gradient over the element count
    H.assert_close(F.poisson_nll_loss_backward(x, y, 2), { 0.4, 0, 0, 0, 0.4 * (e - 0.5) }, { rtol = 1e-14, atol = 1e-15 })
    -- the criterion, PyTorch's defaults
    local crit = ploss.PoissonNLLLoss()
    H.assert_close(crit:forward(x, y), sum / 5, { rtol = 1e-15 })
  end)

  it("full: the Stirling term y·log y − y + ½·log(2πy) where y > 1 only, no change to the gradient", function()
    local x = ploss.tensor({ 0, 0, math.log(2), math.log(3), 1 }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 1, 2, 3, 0.5 }, { dtype = "f64" })
    local e = math.exp(1)
    -- y = 2: 2·log 2 − 2 + ½·log 4π;  y = 3: 3·log 3 − 3 + ½·log 6π
    local s2 = 2 * math.log(2) - 2 + 0.5 * math.log(4 * math.pi)
    local s3 = 3 * math.log(3) - 3 + 0.5 * math.log(6 * math.pi)
    local el = { 1, 1, 2 - 2 * math.log(2) + s2, 3 - 3 * math.log(3) + s3, e - 0.5 }
    local l, g = F.poisson_nll_loss_fused(x, y, { reduction = "none", full = true })
    H.assert_close(l, el, { rtol = 1e-14, atol = 1e-15 })
    H.assert_close(g, { 1, 0, 0, 0, e - 0.5 }, { rtol = 1e-14, atol = 1e-15 })
    -- simplified: loss(y = 2) = ½·log 4π = 1.2655…, loss(y = 3) = ½·log 6π = 1.4682…
    local lv = l:flat()
    H.assert_close({ lv[3], lv[4] }, { 0.5 * math.log(4 * math.pi), 0.5 * math.log(6 * math.pi) }, { rtol = 1e-14 })
    H.assert_close({ lv[3], lv[4] }, { 1.2655121234846454, 1.4682446775387277 }, { rtol = 1e-14 })
  end)

  it("log_input = false: x − y·log(x + ε), gradient 1 − y/(x + ε)", function()
    local x = ploss.tensor({ 1, 2, 0.5, 4 }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 1, 2, 3 }, { dtype = "f64" })
    -- ε = 0: exact by hand
    local l, g = F.poisson_nll_loss_fused(x, y, { reduction = "none", log_input = false, eps = 0 })
    H.assert_close(l, { 1, 2 - math.log(2), 0.5 + 2 * math.log(2), 4 - 6 * math.log(2) }, { rtol = 1e-15 })
    H.assert_close(g, { 1, 0.5, -3, 0.25 }, { rtol = 1e-15 })
    -- the default ε = 1e-8 matters at x = 0: 0 − 1·log 1e-8 = 8·log 10, gradient 1 − 1e8
    local z = ploss.tensor({ 0 }, { dtype = "f64" })
    local one = ploss.tensor({ 1 }, { dtype = "f64" })
    l, g = F.poisson_nll_loss_fused(z, one, { reduction = "sum", log_input = false })
    H.assert_close(l, 8 * math.log(10), { rtol = 1e-15 })
    H.assert_close(g, { 1 - 1e8 }, { rtol = 1e-15 })
    -- ε = 0.5 at x = 0.5, y = 2: 0.5 − 2·log 1 = 0.5, gradient 1 − 2 = −1
    l, g = F.poisson_nll_loss_fused(ploss.tensor({ 0.5 }, { dtype = "f64" }), ploss.tensor({ 2 }, { dtype = "f64" }),
      { reduction = "sum", log_input = false, eps = 0.5 })
    H.assert_close(l, 0.5, { rtol = 1e-15 })
    H.assert_close(g, { -1 }, { rtol = 1e-15 })
    -- with full
    l = F.poisson_nll_loss(x, y, { reduction = "none", log_input = false, eps = 0, full = true })
    H.assert_close(l, { 1, 2 - math.log(2), 0.5 + 2 * math.log(2) + stirling(2), 4 - 6 * math.log(2) + stirling(3) },
      { rtol = 1e-15 })
  end)

  it("f32: the same values to float rounding", function()
    local x = ploss.tensor({ 0, 0.5, -1, 2 }, { dtype = "f32" })
    local y = ploss.tensor({ 0, 1, 2, 3 }, { dtype = "f32" })
    for _, o in ipairs { {}, { full = true }, { log_input = false }, { log_input = false, full = true } } do
      o.reduction = "none"
      local xs, ys = x:to("cpu", "f64"):flat(), y:to("cpu", "f64"):flat()
      local el, eg = {}, {}
      for i = 1, #xs do
        local xi, yi = xs[i], ys[i]
        if o.log_input == false then
          xi = math.abs(xi) + 0.25 -- a rate
          el[i], eg[i] = xi - yi * math.log(xi + 1e-8), 1 - yi / (xi + 1e-8)
        else
          el[i], eg[i] = math.exp(xi) - yi * xi, math.exp(xi) - yi
        end
        if o.full then el[i] = el[i] + stirling(yi) end
      end
      local xx = o.log_input == false and ploss.tensor({ 0.25, 0.75, 1.25, 2.25 }, { dtype = "f32" }) or x
      local l, g = F.poisson_nll_loss_fused(xx, y, o)
      assert.are.equal("f32", g:dtype())
      H.assert_close(l, el, { rtol = 2e-6, atol = 1e-6 })
      H.assert_close(g, eg, { rtol = 2e-6, atol = 1e-6 })
    end
  end)
end)

local OPTIONS = { {}, { full = true }, { log_input = false }, { log_input = false, full = true },
  { log_input = false, eps = 0.1 } }

local function data(sizes, o, seed)
  H.seed(seed)
  local x
  if o.log_input == false then
    x = ploss.rand(sizes, { dtype = "f64", low = 0.2, high = 3 })
  else
    x = ploss.randn(sizes, { dtype = "f64" })
  end
  -- counts 0..5 and a few fractional targets (y in (0, 1] and > 1)
  local u = ploss.rand(sizes, { dtype = "f64" }):flat()
  for i = 1, #u do u[i] = i % 4 == 0 and u[i] * 4 or math.floor(u[i] * 6) end
  return x, ploss.tensor(u, { dtype = "f64", size = sizes })
end

describe("poisson_nll_loss gradients (central differences, f64)", function()
  it("every option and reduction, N×C and N×C×H×W", function()
    local seed, n = 500, 0
    for _, spec in ipairs(OPTIONS) do
      for _, red in ipairs { "none", "mean", "sum" } do
        for _, sizes in ipairs { { 3, 4 }, { 2, 3, 2, 2 } } do
          seed = seed + 1
          local x, y = data(sizes, spec, seed)
          local o = H.with(spec, { reduction = red })
          local what = H.options_label(o) .. " " .. table.concat(sizes, "x")
          local gout = red == "none" and ploss.randn(sizes, { dtype = "f64" }) or nil
          local g = F.poisson_nll_loss_backward(x, y, gout, o)
          H.gradcheck(H.loss_objective("poisson_nll_loss", y, o, gout), x, g, { what = what, seed = seed, h = 1e-6 })
          H.check_fused_scale("poisson_nll_loss", x, y, o, sizes, what, 1e-13)
          n = n + 1
        end
      end
    end
    assert.are.equal(#OPTIONS * 3 * 2, n)
  end)
end)

describe("poisson_nll_loss dtypes and options", function()
  it("f16 and bf16: the f64 values of the same rounded inputs", function()
    for _, dtype in ipairs { "f16", "bf16" } do
      local x, y = data({ 4, 33 }, {}, 77)
      x, y = x:to("cpu", dtype), y:to("cpu", dtype)
      local l, g = F.poisson_nll_loss_fused(x, y, { reduction = "sum" })
      assert.are.equal(dtype, g:dtype())
      local lr, gr = F.poisson_nll_loss_fused(x:to("cpu", "f64"), y:to("cpu", "f64"), { reduction = "sum" })
      H.assert_close_scaled(l, lr, 1e-5, 0, dtype .. " loss")
      H.assert_close_scaled(g, gr, dtype == "f16" and 1e-3 or 8e-3, 0, dtype .. " gradient")
    end
  end)

  it("eps out of range and a non-boolean log_input name the option", function()
    local x = ploss.rand({ 3, 4 }, { dtype = "f64" })
    local y = ploss.rand({ 3, 4 }, { dtype = "f64" })
    local out = ploss.empty({}, { dtype = "f64" })
    local gbuf = ploss.empty({ 3, 4 }, { dtype = "f64" })
    H.expect_error(function()
      local l, g = F.poisson_nll_loss_fused(x, y, { eps = -1, out = out, grad_input = gbuf })
      return l, g
    end, "opts.eps: -1 is not a finite number >= 0", out, gbuf)
    H.expect_error(function()
      local l, g = F.poisson_nll_loss_fused(x, y, { log_input = 0, out = out, grad_input = gbuf })
      return l, g
    end, "log_input: expected a boolean", out, gbuf)
  end)
end)
