-- Support-ops spec (suite 'cpu'): the support ops on the CPU backend.
--  * GEMM against a naive product in f64 (every transpose, alpha/beta, transposed and
--    strided views, transposed output, k = 0, empty, f32/f16/bf16/f64), layouts and errors;
--  * swish / hard-swish / mish against the formulas of docs/losses.md and the reference
--    fixtures (spec/fixtures/{swish,hard_swish,mish}.lua), PyTorch's hard-swish kinks,
--    ±1e4, central differences in f64, every dtype, strided and in-place use, aliasing;
--  * bias add and bias gradient by hand, argmax (ties, NaN, N×C×H×W, permuted input);
--  * SGD (weight decay, momentum, dampening, Nesterov) and Adam / AdamW steps against hand
--    computation over several steps, and their errors;
--  * ploss.nn.Linear / Sequential / activation modules and ploss.optim against the ops,
--    with central differences in f64.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local NAN = 0 / 0

local function randn(sizes, dtype, std)
  return ploss.randn(sizes, { dtype = dtype or "f64", std = std or 1 })
end

-- op(a)·op(b) in f64 from the rounded values of a and b (nested Lua tables)
local function naive_product(a, b, ta, tb)
  local av, bv = a:double():totable(), b:double():totable()
  local function A(i, p) if ta then return av[p][i] end return av[i][p] end
  local function B(p, j) if tb then return bv[j][p] end return bv[p][j] end
  local m = ta and a:size(2) or a:size(1)
  local k = ta and a:size(1) or a:size(2)
  local n = tb and b:size(1) or b:size(2)
  local out, mag = {}, {}
  for i = 1, m do
    out[i], mag[i] = {}, {}
    for j = 1, n do
      local s, sa = 0, 0
      for p = 1, k do
        s = s + A(i, p) * B(p, j)
        sa = sa + math.abs(A(i, p) * B(p, j))
      end
      out[i][j], mag[i][j] = s, sa
    end
  end
  return out, mag
end

-- |got − want| <= rtol·Σ|a_ip·b_pj| (+ atol): the error bound of a k-term dot product
local function assert_gemm_close(got, want, mag, rtol, atol, what)
  local g = got:double():totable()
  for i = 1, #want do
    for j = 1, #want[i] do
      local tol = rtol * mag[i][j] + atol
      if not (math.abs(g[i][j] - want[i][j]) <= tol) then
        error(string.format("%s: c[%d][%d] = %.17g, expected %.17g (tolerance %.3g)", what, i, j, g[i][j],
          want[i][j], tol), 2)
      end
    end
  end
end

describe("gemm", function()
  local gemm_tol = { f64 = 1e-13, f32 = 2e-6, f16 = 2e-6, bf16 = 2e-6 } -- accumulation (inputs rounded)
  local out_tol = { f64 = 0, f32 = 0, f16 = 1e-3, bf16 = 8e-3 }        -- rounding of c

  it("matches a naive product for every transpose, alpha/beta and dtype", function()
    H.seed(301)
    local shapes = { { 1, 1, 1 }, { 3, 4, 5 }, { 7, 1, 9 }, { 1, 6, 2 }, { 17, 13, 33 } }
    H.each({ "f64", "f32", "f16", "bf16" }, { false, true }, { false, true }, { { 1, 0 }, { -0.5, 2 } },
      function(dt, ta, tb, ab)
        for _, s in ipairs(shapes) do
          local m, n, k = s[1], s[2], s[3]
          local a = randn(ta and { k, m } or { m, k }, dt)
          local b = randn(tb and { n, k } or { k, n }, dt)
          local c0 = randn({ m, n }, dt)
          local c = c0:clone()
          F.gemm(a, b, { trans_a = ta, trans_b = tb, alpha = ab[1], beta = ab[2], out = c })
          local p, mag = naive_product(a, b, ta, tb)
          local cv = c0:double():totable()
          for i = 1, m do
            for j = 1, n do
              p[i][j] = ab[1] * p[i][j] + ab[2] * cv[i][j]
              mag[i][j] = math.abs(ab[1]) * mag[i][j] + math.abs(ab[2] * cv[i][j])
            end
          end
          local what = string.format("%s ta=%s tb=%s alpha=%g beta=%g %dx%dx%d", dt, tostring(ta), tostring(tb),
            ab[1], ab[2], m, n, k)
          -- output rounding: relative to |c| itself
          local tol = gemm_tol[dt] + out_tol[dt]
          assert_gemm_close(c, p, mag, tol, 1e-300, what)
        end
      end)
  end)

  it("f16/bf16 inputs with an f32 output accumulate in f32 (no rounding of c)", function()
    H.seed(302)
    for _, dt in ipairs { "f16", "bf16" } do
      local a, b = randn({ 8, 300 }, dt), randn({ 300, 5 }, dt)
      local c = ploss.empty({ 8, 5 }, { dtype = "f32" })
      F.gemm(a, b, { out = c })
      local p, mag = naive_product(a, b)
      assert_gemm_close(c, p, mag, 2e-6, 0, dt .. " -> f32")
    end
  end)

  it("uses transposed and strided views in place, and writes a transposed or strided c", function()
    H.seed(303)
    local big = randn({ 6, 10 })
    local a = big:narrow(2, 2, 4)          -- 6×4, strides {10, 1}: ld 10
    local bt = randn({ 5, 4 }):t()         -- 4×5 view with strides {1, 4}
    local want = naive_product(a, bt)
    H.assert_close(F.gemm(a, bt), want, { rtol = 1e-14, atol = 1e-14 })
    -- c transposed: a 6×5 view of a 5×6 buffer
    local ct_buf = ploss.zeros({ 5, 6 }, { dtype = "f64" })
    F.gemm(a, bt, { out = ct_buf:t() })
    H.assert_close(ct_buf:t(), want, { rtol = 1e-14, atol = 1e-14 })
    -- c strided: columns 3..7 of a 6×9 buffer, the rest untouched
    local cb = ploss.full({ 6, 9 }, 7, { dtype = "f64" })
    F.gemm(a, bt, { out = cb:narrow(2, 3, 5) })
    H.assert_close(cb:narrow(2, 3, 5), want, { rtol = 1e-14, atol = 1e-14 })
    for _, col in ipairs { 1, 2, 8, 9 } do
      H.assert_equal(cb:select(2, col), ploss.full({ 6 }, 7, { dtype = "f64" }))
    end
    -- a transposed view with the transpose flag: (aᵀ)ᵀ = a
    H.assert_close(F.gemm(a:t(), bt, { trans_a = true }), want, { rtol = 1e-14, atol = 1e-14 })
  end)

  it("k = 0 or alpha = 0 gives beta·c, beta = 0 overwrites NaN in c, M or N = 0 does nothing", function()
    local a, b = ploss.empty({ 3, 0 }, { dtype = "f64" }), ploss.empty({ 0, 2 }, { dtype = "f64" })
    local c = ploss.full({ 3, 2 }, 4, { dtype = "f64" })
    F.gemm(a, b, { out = c, beta = 0.5 })
    H.assert_equal(c, ploss.full({ 3, 2 }, 2, { dtype = "f64" }))
    F.gemm(a, b, { out = c, beta = 0 })
    H.assert_equal(c, ploss.zeros({ 3, 2 }, { dtype = "f64" }))
    local x = ploss.ones({ 2, 3 })
    local cn = ploss.full({ 2, 2 }, NAN)
    F.gemm(x, x, { trans_b = true, out = cn, beta = 0 })
    H.assert_equal(cn, ploss.full({ 2, 2 }, 3))
    local e = F.gemm(ploss.empty({ 0, 4 }), ploss.ones({ 4, 3 }))
    assert.are.same({ 0, 3 }, e:size())
    -- alpha = 0: beta·c at every size, a and b not read (a NaN there does not reach c)
    for _, n in ipairs { 2, 64, 200 } do
      for _, dtype in ipairs { "f32", "f64", "f16" } do
        local an = ploss.ones({ n, n }, { dtype = dtype })
        an[1][1] = NAN
        local cz = ploss.ones({ n, n }, { dtype = dtype == "f16" and "f32" or dtype })
        F.gemm(an, ploss.ones({ n, n }, { dtype = dtype }), { alpha = 0, beta = 0.5, out = cz })
        H.assert_equal(cz, ploss.full({ n, n }, 0.5, { dtype = cz:dtype() }), { what = dtype .. " n = " .. n })
      end
    end
  end)

  it("refuses bad shapes, dtypes, layouts and aliasing, writing nothing", function()
    local a, b = ploss.randn(3, 4), ploss.randn(4, 5)
    local c = ploss.empty(3, 5)
    H.expect_error(function() F.gemm(a, ploss.randn(3, 5), { out = c }) end,
      { "op(a) is 3×4 and op(b) is 3×5", "PLOSS_ERR_SHAPE" }, c)
    H.expect_error(function() F.gemm(a, b, { out = ploss.empty(3, 4) }) end, "so c must be 3×5")
    H.expect_error(function() F.gemm(a, b:double(), { out = c }) end, { "b: expected the dtype of a (f32), got f64", "PLOSS_ERR_DTYPE" }, c)
    H.expect_error(function() F.gemm(a, b, { out = ploss.empty({ 3, 5 }, { dtype = "f16" }) }) end, "opts.out: expected f32, got f16")
    H.expect_error(function() F.gemm(a:half(), b:half(), { out = ploss.empty({ 3, 5 }, { dtype = "bf16" }) }) end,
      "opts.out: expected f16 or f32, got bf16")
    H.expect_error(function() F.gemm(ploss.randint(0, 3, { 3, 4 }), ploss.randint(0, 3, { 4, 5 })) end,
      "a: expected f32, f16, bf16 or f64, got i64")
    local sq = ploss.randn(4, 4)
    H.expect_error(function() F.gemm(sq, sq, { out = sq }) end, { "opts.out: overlaps the memory of a", "PLOSS_ERR_ALIAS" })
    -- broadcast (stride 0) operand and an operand with two non-unit strides
    local bc = ploss.randn(1, 4):expand(3, 4)
    H.expect_error(function() F.gemm(bc, b, { out = c }) end, { "a: a GEMM operand needs a unit stride", "PLOSS_ERR_LAYOUT" }, c)
    -- accepted: a row-major view with a leading stride above its row (ld 10), a transposed one
    F.gemm(a, ploss.randn(8, 10):narrow(1, 1, 4):narrow(2, 1, 5), { out = c })
    local tv = ploss.randn(10, 8):t():narrow(1, 1, 4):narrow(2, 1, 5) -- strides {1, 8}
    assert.are.same({ 1, 8 }, tv:stride())
    F.gemm(a, tv, { out = c })
    local bad = ploss.randn(4, 2, 5, 2):select(4, 1):select(2, 1) -- 4×5, strides {20, 2}
    H.expect_error(function() F.gemm(a, bad, { out = c }) end, "b: a GEMM operand needs a unit stride", c)
    H.expect_error(function() F.gemm(a, b, { out = ploss.zeros(3, 1):expand(3, 5) }) end, "opts.out: strides make distinct elements share memory")
    H.expect_error(function() F.gemm(ploss.randn(3), b) end, "a and b must be 2-d matrices")
    H.expect_error(function() F.gemm(a, b, { beta = 1 }) end, "needs an `out` tensor")
  end)
end)

---------------------------------------------------------------------------------------
-- Activations
---------------------------------------------------------------------------------------

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end
local function softplus(x)
  if x > 20 then return x end
  local e = math.exp(x)
  if e < 1e-5 then return e - e * e / 2 + e * e * e / 3 end -- log1p for tiny e
  return math.log(1 + e)
end
local function tanh(x) local e = math.exp(-2 * math.abs(x)); local t = (1 - e) / (1 + e); return x < 0 and -t or t end

-- the formulas of docs/losses.md, written directly (double precision in Lua)
local formulas = {
  swish = {
    f = function(x) return x * sigmoid(x) end,
    d = function(x) local s = sigmoid(x); return s * (1 + x * (1 - s)) end,
  },
  hard_swish = {
    f = function(x) return x * math.min(math.max(x + 3, 0), 6) / 6 end,
    d = function(x) if x <= -3 then return 0 elseif x < 3 then return x / 3 + 0.5 else return 1 end end,
  },
  mish = {
    f = function(x) return x * tanh(softplus(x)) end,
    d = function(x) local t = tanh(softplus(x)); return t + x * sigmoid(x) * (1 - t * t) end,
  },
}

describe("activations", function()
  local grid = { -30, -20.5, -7, -3.5, -3, -2.999, -1, -0.25, 0, 0.25, 1, 2.5, 2.999, 3, 3.5, 7, 19.9, 20, 20.1, 40 }

  for name, fm in pairs(formulas) do
    it(name .. " matches docs/losses.md in f64 (forward and backward)", function()
      local x = ploss.tensor(grid, { dtype = "f64" })
      local g = ploss.tensor({ 1, -2, 0.5, 3, 1, 1, -1, 2, 1, 1, 0.25, 1, 1, 1, -1, 2, 1, 1, 1, 1 }, { dtype = "f64" })
      local want_f, want_d = {}, {}
      local gv = g:flat()
      for i, v in ipairs(grid) do
        want_f[i] = fm.f(v)
        want_d[i] = fm.d(v) * gv[i]
      end
      H.assert_close(F[name](x), want_f, { rtol = 1e-13, atol = 1e-15, what = name })
      H.assert_close(F[name .. "_backward"](x, g), want_d, { rtol = 1e-12, atol = 1e-15, what = name .. " backward" })
    end)

    it(name .. " matches the reference fixture (pytorch-loss V1, f64)", function()
      local case = H.fixtures(name)[1]
      local x = H.fixture_tensor(case.inputs.input)
      local go = H.fixture_tensor(case.grad_output)
      H.assert_close(F[name](x), case.expected.output, { rtol = 1e-12, atol = 1e-15, what = name })
      local got = F[name .. "_backward"](x, go):flat()
      local want = H.fixture_values(case.expected.grad_input)
      local xv, gv = x:flat(), go:flat()
      for i = 1, #want do
        if name == "hard_swish" and xv[i] == -3 then
          -- the reference's derivative at x = −3 is −0.5; ploss follows PyTorch's (>= 2.8) 0
          assert.are.equal(-0.5 * gv[i], want[i])
          want[i] = 0
        end
      end
      H.assert_close(got, want, { rtol = 1e-12, atol = 1e-15, what = name .. " backward" })
    end)

    it(name .. " gradient matches central differences (f64)", function()
      H.seed(310)
      local x = ploss.randn({ 4, 7 }, { dtype = "f64", std = 3 })
      if name == "hard_swish" then -- keep away from the kinks at ±3
        local v = x:flat()
        for i = 1, #v do if math.abs(math.abs(v[i]) - 3) < 1e-3 then v[i] = v[i] + 0.01 end end
        x = ploss.tensor(v, { dtype = "f64", size = { 4, 7 } })
      end
      local g = ploss.randn({ 4, 7 }, { dtype = "f64" })
      local gv = g:flat()
      local function f(t)
        local y = F[name](t):flat()
        local s = 0
        for i = 1, #y do s = s + y[i] * gv[i] end
        return s
      end
      H.gradcheck(f, x, F[name .. "_backward"](x, g), { rtol = 1e-6, atol = 1e-8, what = name })
    end)

    it(name .. " is finite and exact at ±1e4 and keeps the sign of zero-ish results", function()
      local x = ploss.tensor({ -1e4, 1e4 }, { dtype = "f64" })
      local y = F[name](x):flat()
      assert.are.equal(0, y[1])
      assert.are.equal(1e4, y[2])
      H.assert_equal(F[name .. "_backward"](x, ploss.ones({ 2 }, { dtype = "f64" })), { 0, 1 })
      for _, dt in ipairs { "f32", "f16", "bf16" } do
        local xs = ploss.tensor({ -1e4, 1e4, -60000, 60000 }, { dtype = dt })
        for _, v in ipairs(F[name](xs):flat()) do assert.is_true(v == v and math.abs(v) < math.huge, name .. " " .. dt) end
        for _, v in ipairs(F[name .. "_backward"](xs, ploss.ones({ 4 }, { dtype = dt })):flat()) do
          assert.is_true(v == v and math.abs(v) < math.huge, name .. " " .. dt .. " backward")
        end
      end
    end)

    it(name .. " in f32, f16 and bf16 is the f64 result rounded (f64 math on the CPU)", function()
      H.seed(311)
      for _, dt in ipairs { "f32", "f16", "bf16" } do
        local x = ploss.randn({ 64 }, { dtype = dt, std = 4 })
        local g = ploss.randn({ 64 }, { dtype = dt })
        local want = F[name](x:double()):to("cpu", dt)
        H.assert_equal(F[name](x), want:flat(), { what = name .. " " .. dt })
        local wantg = F[name .. "_backward"](x:double(), g:double()):to("cpu", dt)
        H.assert_equal(F[name .. "_backward"](x, g), wantg:flat(), { what = name .. " backward " .. dt })
      end
    end)
  end

  it("hard-swish derivative at the kinks is PyTorch's (since 2.8): 0 at −3, 1 at 3", function()
    local x = ploss.tensor({ -3, 3, -2.9999, 2.9999 }, { dtype = "f64" })
    H.assert_close(F.hard_swish_backward(x, ploss.ones({ 4 }, { dtype = "f64" })), { 0, 1, -0.4999666666666667,
      1.4999666666666667 }, { rtol = 1e-15 })
    H.assert_equal(F.hard_swish(x:narrow(1, 1, 2)), { 0, 3 })
  end)

  it("honours strides (transposed input, strided output) and works in place when asked", function()
    H.seed(312)
    local x = ploss.randn({ 5, 3 }, { dtype = "f64" }):t() -- 3×5, strides {1, 3}
    local want = F.mish(x:contiguous())
    H.assert_equal(F.mish(x), want)
    local out = ploss.zeros({ 3, 10 }, { dtype = "f64" })
    F.mish(x, { out = out:narrow(2, 1, 5) })
    H.assert_equal(out:narrow(2, 1, 5), want)
    H.assert_equal(out:narrow(2, 6, 5), ploss.zeros({ 3, 5 }, { dtype = "f64" }))
    local xc = x:clone()
    assert.are.equal(xc, F.mish(xc, { inplace = true }))
    H.assert_equal(xc, want)
    local g = ploss.randn({ 3, 5 }, { dtype = "f64" })
    local wantg = F.mish_backward(x, g)
    local g2 = g:clone()
    assert.are.equal(g2, F.mish_backward(x, g2, { inplace = true }))
    H.assert_equal(g2, wantg)
    -- the gradient written over the input itself
    local x3 = x:clone()
    assert.are.equal(x3, F.mish_backward(x3, g, { grad_input = x3, inplace = true }))
    H.assert_equal(x3, wantg)
  end)

  it("refuses overlapping outputs without inplace, wrong dtypes and shapes, bad enums", function()
    local x = ploss.randn({ 4, 6 })
    H.expect_error(function() F.swish(x, { out = x }) end, { "opts.out: overlaps the memory of input", "PLOSS_ERR_ALIAS" })
    local half_over = ploss.empty(8, 6)
    local o = half_over:narrow(1, 1, 4)
    local xin = half_over:narrow(1, 3, 4)
    H.expect_error(function() F.mish(xin, { out = o, inplace = true }) end, "opts.out: overlaps the memory of input")
    local g = ploss.randn({ 4, 6 })
    H.expect_error(function() F.mish_backward(x, g, { grad_input = g }) end, "grad_input: overlaps the memory of grad_output")
    H.expect_error(function() F.mish_backward(x, g:double()) end, { "grad_output: expected the input's dtype f32, got f64", "PLOSS_ERR_DTYPE" })
    H.expect_error(function() F.mish_backward(x, ploss.randn(6, 4)) end, { "grad_output: expected the shape of input", "PLOSS_ERR_SHAPE" })
    local out16 = ploss.empty({ 4, 6 }, { dtype = "f16" })
    H.expect_error(function() F.mish(x, { out = out16 }) end, "opts.out: expected the input's dtype f32, got f16", out16)
    local out = ploss.empty(4, 6)
    H.expect_error(function() F.mish(ploss.randint(0, 3, { 4, 6 }), { out = out }) end, "input: expected f32, f16, bf16 or f64, got i64", out)
    local ffi = require "ffi"
    local st = ploss.C.ploss_activation_forward(x:context(), 7, x:dl(), out:dl(), 0)
    assert.are.equal(ploss.C.PLOSS_ERR_INVALID_ARGUMENT, st)
    assert.matches("act: 7 is not swish", ffi.string(ploss.C.ploss_last_error()))
    H.assert_equal(F.mish(ploss.empty({ 0, 3 })), ploss.empty({ 0, 3 }))
  end)
end)

---------------------------------------------------------------------------------------
-- Bias, argmax
---------------------------------------------------------------------------------------

describe("bias add, bias gradient, argmax", function()
  it("bias_add broadcasts over rows, in place; bias_grad sums columns", function()
    local x = ploss.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "f64" })
    F.bias_add(x, ploss.tensor({ 10, 20, 30 }, { dtype = "f64" }))
    H.assert_equal(x, { { 11, 22, 33 }, { 14, 25, 36 } })
    H.assert_equal(F.bias_grad(x), { 25, 47, 69 })
    H.assert_equal(F.bias_grad(ploss.empty({ 0, 3 }, { dtype = "f64" })), { 0, 0, 0 })
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local y = ploss.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = dt })
      F.bias_add(y, ploss.tensor({ 0.5, -1 }, { dtype = dt }))
      H.assert_equal(y, { { 1.5, 1 }, { 3.5, 3 } })
      H.assert_equal(F.bias_grad(y), { 5, 4 })
    end
  end)

  it("bias ops honour strides and are deterministic", function()
    H.seed(320)
    local g = ploss.randn({ 300, 70 }, { dtype = "f32" }):t():contiguous():t() -- column-major 300×70
    local sums = {}
    local gv = g:totable()
    for j = 1, 70 do
      local s = 0
      for i = 1, 300 do s = s + gv[i][j] end
      sums[j] = s
    end
    local gb = F.bias_grad(g)
    H.assert_close(gb, sums, { rtol = 1e-6, atol = 1e-5 })
    H.assert_equal(F.bias_grad(g), gb:flat())
    local x = ploss.zeros({ 3, 8 }, { dtype = "f64" }):t() -- 8×3 view, strides {1, 8}
    F.bias_add(x, ploss.tensor({ 1, 2, 3, 4, 5, 6 }, { dtype = "f64" }):narrow(1, 2, 3))
    for i = 1, 8 do H.assert_equal(x:select(1, i), { 2, 3, 4 }) end
  end)

  it("bias ops refuse bad shapes, dtypes and aliasing", function()
    local x = ploss.randn(3, 4)
    H.expect_error(function() F.bias_add(x, ploss.randn(3)) end, { "bias: expected shape [4] (one value per column of x)", "PLOSS_ERR_SHAPE" }, x)
    H.expect_error(function() F.bias_add(x, ploss.randn({ 4 }, { dtype = "f64" })) end, "bias: expected the dtype of x (f32), got f64", x)
    H.expect_error(function() F.bias_add(ploss.randn(2, 3, 4), ploss.randn(4)) end, "x: expected a 2-D N×C matrix")
    H.expect_error(function() F.bias_add(x, x:select(1, 2)) end, { "x: overlaps the memory of bias", "PLOSS_ERR_ALIAS" })
    H.expect_error(function() F.bias_add(ploss.zeros(1, 4):expand(3, 4), ploss.randn(4)) end, "x: strides make distinct elements share memory")
    local out = ploss.empty(5)
    H.expect_error(function() F.bias_grad(x, { out = out }) end, "opts.out: expected shape [4]", out)
    H.expect_error(function() F.bias_grad(x, { out = x:select(1, 1) }) end, "opts.out: overlaps the memory of grad_output")
  end)

  it("argmax: first maximum wins, NaN counts as the maximum, N×C×d…, strides", function()
    local x = ploss.tensor({ { 1, 3, 3, 2 }, { 5, 1, 0, 5 }, { 1, NAN, 9, NAN }, { -1 / 0, -1 / 0, -1 / 0, -1 / 0 } }, { dtype = "f64" })
    H.assert_equal(ploss.argmax(x), { 1, 0, 1, 0 })
    H.assert_equal(F.argmax(x:t()), { 1, 2, 2, 2 }) -- columns of x; NaN wins
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      H.assert_equal(ploss.argmax(x:to("cpu", dt)), { 1, 0, 1, 0 })
    end
    H.seed(321)
    local x4 = ploss.randn({ 2, 5, 3, 4 }, { dtype = "f64" })
    local idx = ploss.argmax(x4)
    assert.are.same({ 2, 3, 4 }, idx:size())
    assert.are.equal("i64", idx:dtype())
    local v, iv = x4:totable(), idx:totable()
    for n = 1, 2 do
      for h = 1, 3 do
        for w = 1, 4 do
          local best, arg = -math.huge, 0
          for c = 1, 5 do if v[n][c][h][w] > best then best, arg = v[n][c][h][w], c - 1 end end
          assert.are.equal(arg, iv[n][h][w])
        end
      end
    end
    -- channels-last input (a permuted view) gives the same indices
    local cl = x4:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3)
    H.assert_equal(ploss.argmax(cl), idx)
    assert.are.same({ 0 }, ploss.argmax(ploss.empty({ 0, 3 })):size())
  end)

  it("argmax refuses bad shapes and dtypes", function()
    local out = ploss.empty({ 4 }, { dtype = "i64" })
    H.expect_error(function() F.argmax(ploss.randn(4, 3), { out = ploss.empty({ 4 }, { dtype = "i32" }) }) end, "opts.out: expected i64, got i32")
    H.expect_error(function() F.argmax(ploss.randn(4, 3), { out = ploss.empty({ 3 }, { dtype = "i64" }) }) end,
      { "opts.out: expected i64[4] on cpu (the input's shape without axis 1), got i64[3]", "PLOSS_ERR_SHAPE" })
    H.expect_error(function() F.argmax(ploss.randn(4), { out = out }) end, "input: expected N×C or N×C×d1×…×dk with C >= 1", out)
    H.expect_error(function() F.argmax(ploss.empty(4, 0), { out = out }) end, "with C >= 1", out)
    H.expect_error(function() F.argmax(ploss.randint(0, 4, { 4, 3 }), { out = out }) end, "input: expected f32, f16, bf16 or f64, got i64", out)
  end)
end)

---------------------------------------------------------------------------------------
-- Optimiser steps
---------------------------------------------------------------------------------------

describe("sgd_step and adam_step", function()
  -- torch.optim.SGD's update of one value, by hand
  local function sgd_ref(p, g, buf, step, o)
    local d = g + (o.weight_decay or 0) * p
    local mu = o.momentum or 0
    if mu ~= 0 then
      if step == 1 then buf = d else buf = mu * buf + (1 - (o.dampening or 0)) * d end
      if o.nesterov then d = d + mu * buf else d = buf end
    end
    return p - (o.lr or 0.01) * d, buf
  end

  local cases = {
    {},
    { lr = 0.1 },
    { lr = 0.1, weight_decay = 0.01 },
    { lr = 0.1, momentum = 0.9 },
    { lr = 0.05, momentum = 0.9, dampening = 0.1, weight_decay = 1e-3 },
    { lr = 0.05, momentum = 0.8, nesterov = true, weight_decay = 0.02 },
  }

  it("SGD matches torch.optim.SGD by hand over four steps (f64)", function()
    H.seed(330)
    for ci, o in ipairs(cases) do
      local p = ploss.randn({ 3, 4 }, { dtype = "f64" })
      local buf = (o.momentum or 0) ~= 0 and ploss.full({ 3, 4 }, 123, { dtype = "f64" }) or nil -- not read at step 1
      local pv = p:flat()
      local bv = {}
      for step = 1, 4 do
        local g = ploss.randn({ 3, 4 }, { dtype = "f64" })
        local gv = g:flat()
        for i = 1, #pv do pv[i], bv[i] = sgd_ref(pv[i], gv[i], bv[i], step, o) end
        F.sgd_step(p, g, buf, step, o)
        H.assert_close(p, pv, { rtol = 1e-15, atol = 1e-15, what = "case " .. ci .. " step " .. step })
        if buf then H.assert_close(buf, bv, { rtol = 1e-15, atol = 1e-15, what = "buffer, case " .. ci }) end
      end
    end
  end)

  it("SGD on f32/f16/bf16 parameters, with state in the param's dtype or f32", function()
    -- the CPU computes in f64 from the stored values and rounds the buffer, then the
    -- parameter, to their dtypes: the same steps in Lua give the same bits
    H.seed(331)
    local function round(v, dt) return ploss.tensor({ v }, { dtype = dt }):flat()[1] end
    local o = { lr = 0.1, momentum = 0.9, weight_decay = 0.01 }
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      for _, sdt in ipairs { dt, "f32" } do
        local p = ploss.randn({ 20 }, { dtype = dt })
        local buf = ploss.zeros({ 20 }, { dtype = sdt })
        local pv, bv = p:flat(), {}
        for step = 1, 3 do
          local g = ploss.randn({ 20 }, { dtype = dt })
          local gv = g:flat()
          F.sgd_step(p, g, buf, step, o)
          for i = 1, 20 do
            local d = gv[i] + o.weight_decay * pv[i]
            bv[i] = round(step == 1 and d or o.momentum * bv[i] + (1.0 - 0) * d, sdt)
            pv[i] = round(pv[i] - o.lr * bv[i], dt)
          end
          H.assert_equal(buf, bv, { what = dt .. "/" .. sdt .. " buffer, step " .. step })
          H.assert_equal(p, pv, { what = dt .. "/" .. sdt .. " param, step " .. step })
        end
      end
    end
  end)

  local function adam_ref(p, g, m, v, t, o)
    local lr, b1, b2, eps, wd = o.lr or 1e-3, o.beta1 or 0.9, o.beta2 or 0.999, o.eps or 1e-8, o.weight_decay or 0
    if o.decoupled_weight_decay then p = p * (1 - lr * wd) else g = g + wd * p end
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    local denom = math.sqrt(v) / math.sqrt(1 - b2 ^ t) + eps
    return p - lr / (1 - b1 ^ t) * m / denom, m, v
  end

  it("Adam and AdamW match torch.optim.Adam's formulas by hand over four steps (f64)", function()
    H.seed(332)
    for ci, o in ipairs { {}, { lr = 0.01, weight_decay = 0.1 }, { lr = 0.01, weight_decay = 0.1, decoupled_weight_decay = true },
      { lr = 0.5, beta1 = 0, beta2 = 0.5, eps = 1e-3 } } do
      local p = ploss.randn({ 7 }, { dtype = "f64" })
      local m, v = ploss.zeros({ 7 }, { dtype = "f64" }), ploss.zeros({ 7 }, { dtype = "f64" })
      local pv, mv, vv = p:flat(), m:flat(), v:flat()
      for t = 1, 4 do
        local g = ploss.randn({ 7 }, { dtype = "f64" })
        local gv = g:flat()
        for i = 1, 7 do pv[i], mv[i], vv[i] = adam_ref(pv[i], gv[i], mv[i], vv[i], t, o) end
        F.adam_step(p, g, m, v, t, o)
        H.assert_close(p, pv, { rtol = 1e-14, atol = 1e-15, what = "case " .. ci .. " step " .. t })
        H.assert_close(m, mv, { rtol = 1e-14, atol = 1e-15 })
        H.assert_close(v, vv, { rtol = 1e-14, atol = 1e-15 })
      end
    end
  end)

  it("refuses bad options, missing buffers, aliasing and mismatched tensors, writing nothing", function()
    local p, g = ploss.randn(5), ploss.randn(5)
    local buf = ploss.zeros(5)
    H.expect_error(function() F.sgd_step(p, g, nil, 1, { momentum = 0.9 }) end,
      { "momentum_buffer: tensor is NULL but opts.momentum is 0.9", "PLOSS_ERR_INVALID_ARGUMENT" }, p)
    H.expect_error(function() F.sgd_step(p, g, buf, 1, { nesterov = true }) end, "opts.nesterov: needs momentum > 0 and dampening = 0", p)
    H.expect_error(function() F.sgd_step(p, g, buf, 1, { lr = -1 }) end, "opts.lr: -1 is outside [0, ∞)", p)
    H.expect_error(function() F.sgd_step(p, g, buf, 0, {}) end, "step: expected 1 for the first step", p)
    -- an infinite step would wrap to int64's minimum; a string is not a step
    H.expect_error(function() F.adam_step(p, g, buf, ploss.zeros(5), 1 / 0, {}) end,
      "adam_step: step: expected an integer (1 for the first step), got inf", p)
    H.expect_error(function() F.sgd_step(p, g, buf, "1", {}) end, "sgd_step: step: expected an integer (1 for the first step), got '1'", p)
    H.expect_error(function() F.sgd_step(p, g:double(), nil, 1, {}) end, "grad: expected param's dtype f32, got f64", p)
    H.expect_error(function() F.sgd_step(p, ploss.randn(6), nil, 1, {}) end, "grad: expected the shape of param", p)
    H.expect_error(function() F.sgd_step(p, p, nil, 1, {}) end, { "param: overlaps the memory of grad", "PLOSS_ERR_ALIAS" }, g)
    H.expect_error(function() F.sgd_step(p, g, p, 1, { momentum = 0.5 }) end, "param: overlaps the memory of momentum_buffer")
    H.expect_error(function() F.sgd_step(p, g, ploss.zeros({ 5 }, { dtype = "f16" }), 1, { momentum = 0.5 }) end,
      "momentum_buffer: expected f32 (param's dtype), got f16", p)
    H.expect_error(function() F.sgd_step(p, g, nil, 1, { momentum = "0.9" }) end, "momentum: expected a number")
    H.expect_error(function() F.sgd_step(p, g, nil, 1, { mommentum = 0.9 }) end, "unknown option 'mommentum'")
    local m, v = ploss.zeros(5), ploss.zeros(5)
    H.expect_error(function() F.adam_step(p, g, m, v, 1, { beta1 = 1 }) end, "opts.beta1: 1 is outside [0, 1)", p, m, v)
    H.expect_error(function() F.adam_step(p, g, m, ploss.zeros({ 5 }, { dtype = "f64" }), 1, {}) end, "exp_avg_sq: expected", p, m)
    H.expect_error(function() F.adam_step(p, g, m, m, 1, {}) end, "exp_avg: overlaps the memory of exp_avg_sq", p)
    local ffi = require "ffi"
    local st = ploss.C.ploss_adam_step(p:context(), p:dl(), g:dl(), m:dl(), nil, 1, nil)
    assert.are.equal(ploss.C.PLOSS_ERR_INVALID_ARGUMENT, st)
    assert.matches("exp_avg_sq: tensor is NULL", ffi.string(ploss.C.ploss_last_error()))
  end)
end)

---------------------------------------------------------------------------------------
-- Layers and optimisers
---------------------------------------------------------------------------------------

describe("ploss.nn layers and ploss.optim", function()
  it("Linear computes x·Wᵀ + b and its gradients (central differences, f64)", function()
    H.seed(340)
    local lin = ploss.nn.Linear(5, 3, { dtype = "f64" })
    F.sgd_step(lin.bias, ploss.randn({ 3 }, { dtype = "f64" }), nil, 1, { lr = 1 }) -- a non-zero bias
    local x = ploss.randn({ 4, 5 }, { dtype = "f64" })
    local y = lin:forward(x)
    local want = naive_product(x, lin.weight, false, true)
    local b = lin.bias:flat()
    for i = 1, 4 do for j = 1, 3 do want[i][j] = want[i][j] + b[j] end end
    H.assert_close(y, want, { rtol = 1e-14, atol = 1e-14 })
    local gy = ploss.randn({ 4, 3 }, { dtype = "f64" })
    local gyv = gy:flat()
    local function loss_of(layer_fn)
      return function(t)
        local v = layer_fn(t):flat()
        local s = 0
        for i = 1, #v do s = s + v[i] * gyv[i] end
        return s
      end
    end
    local gx = lin:backward(x, gy)
    H.gradcheck(loss_of(function(t) return lin:forward(t) end), x:clone(), gx, { what = "Linear input" })
    local gw, gb = lin.gradWeight:clone(), lin.gradBias:clone()
    H.gradcheck(loss_of(function() return lin:forward(x) end), lin.weight, gw, { what = "Linear weight" })
    H.gradcheck(loss_of(function() return lin:forward(x) end), lin.bias, gb, { what = "Linear bias" })
  end)

  it("Linear with accumulate adds its parameter gradients (shared weights); zeroGradParameters, updateParameters", function()
    H.seed(343)
    local lin = ploss.nn.Linear(4, 3, { dtype = "f64" })
    local acc = ploss.nn.Linear(4, 3, { dtype = "f64", accumulate = true })
    acc.weight:copy(lin.weight)
    local a, b = ploss.randn({ 5, 4 }, { dtype = "f64" }), ploss.randn({ 2, 4 }, { dtype = "f64" })
    local ga, gb = ploss.randn({ 5, 3 }, { dtype = "f64" }), ploss.randn({ 2, 3 }, { dtype = "f64" })
    -- the default writes each call's gradients: the last call's
    lin:forward(a); lin:backward(a, ga)
    local wa, ba = lin.gradWeight:clone(), lin.gradBias:clone()
    lin:forward(b); lin:backward(b, gb)
    local wb, bb = lin.gradWeight:clone(), lin.gradBias:clone()
    -- accumulate adds them (Torch7's accGradParameters): the sum of the two
    acc:zeroGradParameters()
    acc:forward(a); acc:backward(a, ga)
    acc:forward(b); acc:backward(b, gb)
    H.assert_close(acc.gradWeight, wa:clone():add_(wb), { rtol = 1e-14, atol = 1e-14, what = "gradWeight" })
    H.assert_close(acc.gradBias, ba:clone():add_(bb), { rtol = 1e-14, atol = 1e-14, what = "gradBias" })
    -- updateParameters(lr): p ← p − lr·g; zeroGradParameters zeroes every gradient
    local w0, b0 = acc.weight:clone(), acc.bias:clone()
    acc:updateParameters(0.5)
    H.assert_close(acc.weight, w0:clone():add_(acc.gradWeight, -0.5), { rtol = 1e-15, atol = 0 })
    H.assert_close(acc.bias, b0:clone():add_(acc.gradBias, -0.5), { rtol = 1e-15, atol = 0 })
    local model = ploss.nn.Sequential { acc, ploss.nn.Mish {} }
    model:zeroGradParameters()
    H.assert_equal(acc.gradWeight, ploss.zeros({ 3, 4 }, { dtype = "f64" }))
    H.assert_equal(acc.gradBias, ploss.zeros({ 3 }, { dtype = "f64" }))
    H.expect_error(function() model:updateParameters(0 / 0) end, "Sequential:updateParameters: expected a finite learning rate, got nan")
    H.expect_error(function() ploss.nn.Linear(4, 3, { accumulate = 1 }) end, "accumulate")
  end)

  it("a layer listed twice (shared weights): its parameters once, one step each; its clone shares as the original", function()
    H.seed(344)
    local lin = ploss.nn.Linear(3, 3, { dtype = "f64", accumulate = true })
    local model = ploss.nn.Sequential { lin, lin }
    local ps, gs = model:parameters()
    assert.are.equal(2, #ps)
    assert.are.equal(lin.weight, ps[1])
    assert.are.equal(lin.bias, ps[2])
    assert.are.equal(lin.gradWeight, gs[1])
    -- one SGD step moves W by lr·∂L/∂W once (the gradient summed over both uses)
    local x = ploss.randn({ 4, 3 }, { dtype = "f64" })
    local go = ploss.randn({ 4, 3 }, { dtype = "f64" })
    model:zeroGradParameters()
    model:forward(x)
    model:backward(x, go)
    local w0, g = lin.weight:clone(), lin.gradWeight:clone()
    ploss.optim.SGD(ps, gs, { lr = 0.5 }):step()
    H.assert_close(lin.weight, w0:add_(g, -0.5), { rtol = 1e-15, atol = 1e-15 })
    -- an EMA takes the list (a tensor listed twice it refuses)
    assert.truthy(tostring(ploss.optim.EMA(ps)):find("2 tensors", 1, true))
    -- the clone: one layer listed twice, as in the original, and none of the original's tensors
    local c = model:clone()
    assert.are.equal(c.modules[1], c.modules[2])
    assert.are_not.equal(lin, c.modules[1])
    assert.are_not.equal(lin.weight, c.modules[1].weight)
    c:zeroGradParameters()
    model:zeroGradParameters()
    c:forward(x)
    c:backward(x, go)
    model:forward(x)
    model:backward(x, go)
    H.assert_equal(c.modules[1].gradWeight, lin.gradWeight)
    -- nested, and a tensor two layers hold: shared in the clone as in the original
    local nested = ploss.nn.Sequential { lin, ploss.nn.Sequential { lin } }:clone()
    assert.are.equal(nested.modules[1], nested.modules[2].modules[1])
    local a, b = ploss.nn.Linear(2, 2), ploss.nn.Linear(2, 2)
    b.weight = a.weight
    local two = ploss.nn.Sequential { a, b }
    assert.are.equal(3, #two:parameters())
    local tc = two:clone()
    assert.are.equal(tc.modules[1].weight, tc.modules[2].weight)
    assert.are_not.equal(a.weight, tc.modules[1].weight)
    assert.are.equal(3, #tc:parameters())
  end)

  it("He and Xavier initialisation have the stated standard deviations", function()
    H.seed(341)
    local function std(t)
      local v, s, s2 = t:flat(), 0, 0
      for i = 1, #v do s, s2 = s + v[i], s2 + v[i] * v[i] end
      return math.sqrt(s2 / #v - (s / #v) ^ 2)
    end
    local he = ploss.nn.Linear(400, 300)
    assert.is_true(math.abs(std(he.weight) / math.sqrt(2 / 400) - 1) < 0.02)
    local xa = ploss.nn.Linear(400, 300, { init = "xavier" })
    assert.is_true(math.abs(std(xa.weight) / math.sqrt(2 / 700) - 1) < 0.02)
    H.assert_equal(he.bias, ploss.zeros(300))
    H.expect_error(function() ploss.nn.Linear(4, 3, { init = "lecun" }) end, "init: expected 'he' or 'xavier'")
  end)

  it("Sequential with an activation back-propagates like the ops (f64 central differences)", function()
    H.seed(342)
    for _, act in ipairs { "Mish", "Swish", "HardSwish" } do
      local model = ploss.nn.Sequential { ploss.nn.Linear(6, 5, { dtype = "f64" }), ploss.nn[act] { inplace = true },
                                          ploss.nn.Linear(5, 2, { dtype = "f64", init = "xavier" }) }
      local x = ploss.randn({ 3, 6 }, { dtype = "f64" })
      local gy = ploss.randn({ 3, 2 }, { dtype = "f64" })
      local gyv = gy:flat()
      model:forward(x)
      local gx = model:backward(x, gy):clone()
      local ps, gs = model:parameters()
      assert.are.equal(4, #ps)
      local function f(t)
        local v = model:forward(t):flat()
        local s = 0
        for i = 1, #v do s = s + v[i] * gyv[i] end
        return s
      end
      H.gradcheck(f, x:clone(), gx, { what = act .. " input" })
      local g1 = gs[1]:clone()
      H.gradcheck(function() return f(x) end, ps[1], g1, { what = act .. " first weight" })
    end
  end)

  it("optim.SGD and optim.Adam apply the steps to every parameter", function()
    H.seed(343)
    local p1, p2 = ploss.randn({ 3 }, { dtype = "f64" }), ploss.randn({ 2, 2 }, { dtype = "f64" })
    local g1, g2 = ploss.randn({ 3 }, { dtype = "f64" }), ploss.randn({ 2, 2 }, { dtype = "f64" })
    local r1, r2 = p1:clone(), p2:clone()
    local b1, b2 = ploss.zeros({ 3 }, { dtype = "f64" }), ploss.zeros({ 2, 2 }, { dtype = "f64" })
    local opt = ploss.optim.SGD({ p1, p2 }, { g1, g2 }, { lr = 0.1, momentum = 0.9 })
    for step = 1, 3 do
      opt:step()
      F.sgd_step(r1, g1, b1, step, { lr = 0.1, momentum = 0.9 })
      F.sgd_step(r2, g2, b2, step, { lr = 0.1, momentum = 0.9 })
    end
    H.assert_equal(p1, r1)
    H.assert_equal(p2, r2)
    local a = ploss.optim.Adam({ p1 }, { g1 }, { lr = 0.01 })
    local m, v = ploss.zeros({ 3 }, { dtype = "f64" }), ploss.zeros({ 3 }, { dtype = "f64" })
    local q = p1:clone()
    a:step(); a:step()
    F.adam_step(q, g1, m, v, 1, { lr = 0.01 })
    F.adam_step(q, g1, m, v, 2, { lr = 0.01 })
    H.assert_equal(p1, q)
    -- printed with every option: the given ones and the defaults the step takes
    assert.are.equal("ploss.optim.SGD(dampening=0, lr=0.1, momentum=0.9, nesterov=false, weight_decay=0)",
      tostring(opt))
    assert.are.equal("ploss.optim.Adam(beta1=0.9, beta2=0.999, decoupled_weight_decay=false, eps=1e-08, lr=0.01, " ..
      "weight_decay=0)", tostring(a))
    H.expect_error(function() ploss.optim.SGD({ p1 }, {}, {}) end, "expected two lists of the same length")
    H.expect_error(function() ploss.optim.SGD({ p1 }, { g1 }, { learning_rate = 1 }) end, "unknown option 'learning_rate'")
    -- its state belongs to the tensors it was made with: another tensor in a slot, or one
    -- appended to the list, is refused before any parameter moves (not given the old moments)
    local ps, gs = { p1, p2 }, { g1, g2 }
    local sgd = ploss.optim.SGD(ps, gs, { lr = 0.1, momentum = 0.9 })
    sgd:step()
    local before = p1:clone()
    ps[2] = p2:clone()
    H.expect_error(function() sgd:step() end,
      "SGD: step: params[2] is not a tensor the optimiser was made with (its state, step count and buffers, belongs " ..
      "to that one): make a new optimiser for new parameters")
    H.assert_equal(p1, before)
    ps[2], ps[3], gs[3] = p2, p1:clone(), g1
    H.expect_error(function() sgd:step() end, "SGD: step: params[3] is not a tensor the optimiser was made with")
  end)

  -- A learning-rate schedule sets opt.lr between steps: the next step takes it (it was
  -- ignored without a word when the options lived in opt.opts alone).  Reading an option
  -- gives the value the next step takes; an unknown field or a value of the wrong type is
  -- refused, naming it.  An EMA's options are fixed when it is made: setting one is refused.
  it("optimisers' options are fields: set between steps, they take effect; others are refused", function()
    local p, g = ploss.tensor({ 1, 2 }, { dtype = "f64" }), ploss.tensor({ 1, -4 }, { dtype = "f64" })
    local sgd = ploss.optim.SGD({ p }, { g }, { lr = 0.1 })
    sgd:step()                                  -- p − 0.1·g = {0.9, 2.4}
    sgd.lr = 0.5
    assert.are.equal(0.5, sgd.lr)
    assert.are.equal(0, sgd.momentum)           -- a default: the C options' value
    assert.are.equal(false, sgd.nesterov)
    sgd:step()                                  -- {0.9 − 0.5, 2.4 + 2} = {0.4, 4.4}
    H.assert_close(p, ploss.tensor({ 0.4, 4.4 }, { dtype = "f64" }), { rtol = 1e-15 })
    assert.are.equal("ploss.optim.SGD(dampening=0, lr=0.5, momentum=0, nesterov=false, weight_decay=0)", tostring(sgd))
    H.expect_error(function() sgd.lr = "junk" end, "SGD: opts.lr: expected a number, got string")
    H.expect_error(function() sgd.nesterov = 1 end, "SGD: opts.nesterov: expected a boolean (true or false), got number")
    H.expect_error(function() sgd.lrr = 3 end,
      "SGD: unknown option 'lrr' (known: dampening, lr, momentum, nesterov, weight_decay)")
    H.expect_error(function() sgd.learningRate = 3 end, "SGD: unknown option 'learningRate' (known: dampening, lr, " ..
      "momentum, nesterov, weight_decay); Torch7's learningRate is lr here")
    assert.are.equal(0.5, sgd.lr)               -- nothing taken from the refused ones
    sgd.lr = nil                                -- back to the default
    assert.are.equal(0.01, sgd.lr)
    -- Adam: lr changed after one step matches a step by hand with the new lr
    local q, m, v = ploss.tensor({ 1, 2 }, { dtype = "f64" }), ploss.zeros({ 2 }, { dtype = "f64" }),
      ploss.zeros({ 2 }, { dtype = "f64" })
    local r = q:clone()
    local adam = ploss.optim.Adam({ q }, { g }, { lr = 0.01 })
    adam:step()
    adam.lr, adam.decoupled_weight_decay, adam.weight_decay = 0.2, true, 0.1
    adam:step()
    F.adam_step(r, g, m, v, 1, { lr = 0.01 })
    F.adam_step(r, g, m, v, 2, { lr = 0.2, decoupled_weight_decay = true, weight_decay = 0.1 })
    H.assert_equal(q, r)
    H.expect_error(function() adam.beta3 = 0.9 end, "Adam: unknown option 'beta3' (known: beta1, beta2, ")
    -- ranges: checked where the options are given (the constructor, a field set), by the
    -- step's own checks; a refused value is not kept
    H.expect_error(function() adam.beta1 = 1 end, "Adam: opts.beta1: 1 is outside [0, 1)")
    H.expect_error(function() adam.lr = -0.1 end, "Adam: opts.lr: -0.1 is outside [0, ∞)")
    assert.are.equal(0.2, adam.lr)
    assert.are.equal(0.9, adam.beta1)
    H.expect_error(function() ploss.optim.Adam({ q }, { g }, { beta2 = 1.5 }) end,
      "Adam: opts.beta2: 1.5 is outside [0, 1)")
    H.expect_error(function() ploss.optim.SGD({ p }, { g }, { weight_decay = -1 }) end,
      "SGD: opts.weight_decay: -1 is outside [0, ∞)")
    H.expect_error(function() ploss.optim.SGD({ p }, { g }, { nesterov = true }) end,
      "SGD: opts.nesterov: needs momentum > 0 and dampening = 0")
    local nag = ploss.optim.SGD({ p }, { g }, { nesterov = true, momentum = 0.9 })
    H.expect_error(function() nag.momentum = 0 end, "SGD: opts.nesterov: needs momentum > 0")
    assert.are.equal(0.9, nag.momentum)
    nag.nesterov = false
    nag.momentum = nil -- allowed once nesterov is off
    assert.are.equal(0, nag.momentum)
    -- a gradient that does not match its parameter: nothing moves, the count stays
    local p1, bad = ploss.tensor({ 1, 2 }, { dtype = "f64" }), ploss.tensor({ 1, 2, 3 }, { dtype = "f64" })
    local before = p1:clone()
    local two = ploss.optim.Adam({ p1, ploss.tensor({ 1, 2 }, { dtype = "f64" }) }, { g, bad })
    H.expect_error(function() two:step() end, "Adam: step: grads[2] (a ploss tensor f64[3] on cpu) does not " ..
      "match params[2] (a ploss tensor f64[2] on cpu): expected the parameter's shape, dtype and device")
    H.assert_equal(p1, before)
    assert.are.equal(0, two.t)
    -- a refusal of the C step part-way (an integer parameter): the first parameter has
    -- stepped once and counts it (its next update takes t = 2), the second has not
    local q1, q2 = ploss.tensor({ 1, 2 }, { dtype = "f64" }), ploss.tensor({ 1, 2 }, { dtype = "i64" })
    local ga, gb2 = ploss.tensor({ 1, -4 }, { dtype = "f64" }), ploss.tensor({ 1, 1 }, { dtype = "i64" })
    local part = ploss.optim.Adam({ q1, q2 }, { ga, gb2 }, { lr = 0.1 })
    H.expect_error(function() part:step() end, "param: expected f32, f16, bf16 or f64, got i64")
    assert.are.same({ 1, 0, 0 }, { part.state[1].step, part.state[2].step, part.t })
    local r1, m1, v1 = ploss.tensor({ 1, 2 }, { dtype = "f64" }), ploss.zeros({ 2 }, { dtype = "f64" }),
      ploss.zeros({ 2 }, { dtype = "f64" })
    F.adam_step(r1, ga, m1, v1, 1, { lr = 0.1 })
    H.assert_equal(q1, r1)
    -- momentum off then on again: the buffer kept from before carries on (torch's state)
    local pk = ploss.tensor({ 1, 2 }, { dtype = "f64" })
    local mo = ploss.optim.SGD({ pk }, { g }, { lr = 0.1, momentum = 0.5 })
    mo:step()                                   -- buf = g, p − 0.1·g
    mo.momentum = 0
    mo:step()                                   -- p − 0.1·g, buf untouched
    mo.momentum = 0.5
    mo:step()                                   -- buf = 0.5·g + g = 1.5·g, p − 0.15·g
    H.assert_close(pk, ploss.tensor({ 1 - 0.35, 2 + 1.4 }, { dtype = "f64" }), { rtol = 1e-15 })
    -- momentum set on after a step without it: the buffer starts as that step's gradient
    -- (torch's), so the step is p − lr·g; the next p − lr·(μ + 1)·g
    local pm = ploss.tensor({ 1, 2 }, { dtype = "f64" })
    local heavy = ploss.optim.SGD({ pm }, { g }, { lr = 0.1 })
    heavy:step()
    heavy.momentum = 0.9
    heavy:step()
    H.assert_close(pm, ploss.tensor({ 0.8, 2.8 }, { dtype = "f64" }), { rtol = 1e-15 })
    heavy:step()
    H.assert_close(pm, ploss.tensor({ 0.61, 3.56 }, { dtype = "f64" }), { rtol = 1e-15 })
    -- a layer's parameter dtype: the layer's option named, not the tensor constructor's
    H.expect_error(function() ploss.nn.Linear(3, 2, { dtype = "i64" }) end,
      "Linear: dtype: expected a float dtype (f32, f16, bf16, f64), got 'i64'")
    H.expect_error(function() ploss.nn.MarginSoftmax { 3, 10, dtype = "i64" } end,
      "MarginSoftmax: dtype: expected a float dtype (f32, f16, bf16, f64), got 'i64'")
    H.expect_error(function() ploss.nn.Linear(3, 2, { dtype = "fp32" }) end, "Linear: dtype: expected a float dtype")
    assert.are.equal("f64", ploss.nn.Linear(3, 2, { dtype = "double" }).weight:dtype())
    -- two optimisers built from one options table: each its own copy
    local shared = { lr = 0.1 }
    local o1, o2 = ploss.optim.SGD({ p }, { g }, shared), ploss.optim.SGD({ q }, { g }, shared)
    o1.lr = 0.3
    assert.are.equal(0.1, o2.lr)
    assert.are.equal(0.1, shared.lr)
    -- EMA
    local w = ploss.tensor({ 0 }, { dtype = "f64" })
    local ema = ploss.optim.EMA({ w }, { decay = 0.5, warmup = false })
    H.expect_error(function() ema.decay = 0 end, "EMA: 'decay' cannot be set: the options are given when it is made")
    H.expect_error(function() ema.warmup = true end, "EMA: 'warmup' cannot be set")
    w:fill(4)
    ema:update()
    ema:apply()
    H.assert_equal(w, ploss.tensor({ 2 }, { dtype = "f64" })) -- decay 0.5 still: 0.5·0 + 0.5·4
    ema:restore()
    assert.are.equal(0.5, ema:decay())
    -- decay() is a getter: an argument (a setter's call) is refused, not dropped
    H.expect_error(function() local d = ema:decay(0.9) return d end, "EMA:decay: takes no argument")
    assert.are.equal(0.5, ema:decay())
  end)
end)

describe("support ops and layers with criteria and bad options", function()
  it("mark the tensors they write: a criterion's state saved from the old values is not reused", function()
    local xa = ploss.randn({ 2, 4 }, { dtype = "f64", seed = 1 })
    local xb = ploss.randn({ 2, 4 }, { dtype = "f64", seed = 2 })
    local y = ploss.tensor({ 0, 2 }, { dtype = "i64" })
    local lin = ploss.nn.Linear(4, 3, { dtype = "f64" })
    local ce = ploss.CrossEntropyLoss {}
    -- each op rewrites the tensor the criterion's forward read; backward must see the new values
    local writers = {
      function(t) lin:forward(xb) end, -- gemm into lin.output, then bias_add
      function(t) F.mish(t, { inplace = true }) end,
      function(t) F.gemm(xb, lin.weight, { trans_b = true, out = t }) end,
      function(t) F.sgd_step(t, ploss.ones({ 2, 3 }, { dtype = "f64" }), nil, 1, { lr = 0.5 }) end,
      function(t) F.adam_step(t, ploss.ones({ 2, 3 }, { dtype = "f64" }), ploss.zeros({ 2, 3 }, { dtype = "f64" }),
        ploss.zeros({ 2, 3 }, { dtype = "f64" }), 1, { lr = 0.5 }) end,
    }
    for i, write in ipairs(writers) do
      local out = lin:forward(xa)
      ce:forward(out, y)
      local v = out:version()
      write(out)
      assert.is_true(out:version() > v, "writer " .. i .. " left the version")
      H.assert_close(ce:backward(out, y), F.cross_entropy_backward(out:clone(), y, 1), { rtol = 0, atol = 0 })
    end
  end)

  it("check their options' names and types", function()
    local a = ploss.randn({ 2, 2 }, { dtype = "f64", seed = 3 })
    H.expect_error(function() F.gemm(a, a, { trans_a = 0 }) end,
      "gemm: opts.trans_a: expected a boolean (true or false), got number 0")
    H.expect_error(function() F.gemm(a, a, { transa = true }) end, "gemm: unknown option 'transa'")
    H.expect_error(function() F.gemm(a, a, { alpha = "2" }) end, "gemm: opts.alpha: expected a number, got string '2'")
    H.expect_error(function() F.mish(a, { inplace = 1 }) end, "mish: opts.inplace: expected a boolean")
    H.expect_error(function() ploss.nn.Linear(4, 3, { bais = false }) end, "Linear: unknown option 'bais'")
    H.expect_error(function() ploss.nn.Linear(4, 3, { bias = "no" }) end, "Linear: opts.bias: expected a boolean")
    H.expect_error(function() ploss.nn.Mish { inplace = "yes" } end, "Mish: opts.inplace: expected a boolean")
    local lin = ploss.nn.Linear(4, 3)
    H.expect_error(function() ploss.optim.SGD({ lin.weight }, { lin.gradWeight }, { lr = "0.1" }) end,
      "SGD: opts.lr: expected a number, got string '0.1'")
    H.expect_error(function() ploss.optim.SGD({ lin.weight }, { lin.gradWeight }, { nesterov = 1 }) end,
      "SGD: opts.nesterov: expected a boolean")
    H.expect_error(function() ploss.optim.Adam({ lin.weight }, { "g" }) end, "Adam: grads[1]: expected a ploss tensor")
    H.expect_error(function() ploss.nn.Sequential(lin) end, "Sequential: expected a list of modules ({m1, m2, …}), got a module")
    H.expect_error(function() ploss.nn.Sequential { ploss.nn.Linear } end, "Sequential: modules[1]: expected a module")
    H.expect_error(function() ploss.nn.Sequential {}:add("x") end, "Sequential:add: expected a module")
    H.expect_error(function() ploss.nn.Sequential {}:add(ploss.CrossEntropyLoss()) end,
      "Sequential:add: ploss.CrossEntropyLoss is a criterion, not a layer")
    -- a layer without its input gradient (input_grad = false) after a layer with parameters:
    -- refused before any layer runs, not a chain that stops there without a word
    local first = ploss.nn.Linear(4, 8, { dtype = "f64" })
    local skip = ploss.nn.Linear(8, 3, { dtype = "f64", input_grad = false })
    local chain = ploss.nn.Sequential { first, ploss.nn.Swish(), skip }
    local xs = ploss.randn({ 5, 4 }, { dtype = "f64", seed = 3 })
    chain:forward(xs)
    skip.gradWeight:fill(7)
    H.expect_error(function() chain:backward(xs, ploss.ones({ 5, 3 }, { dtype = "f64" })) end,
      "Sequential:backward: modules[3] gives no input gradient (input_grad = false), but modules[1] before it has " ..
      "parameters that need one")
    assert.are.equal(7, skip.gradWeight:flat()[1]) -- nothing ran
    -- clone (Torch7's): the same options and values, nothing shared, nothing drawn
    local model = ploss.nn.Sequential { ploss.nn.Linear(4, 3, { dtype = "f64" }), ploss.nn.Mish { inplace = true },
      ploss.nn.Linear(3, 2, { dtype = "f64", bias = false, accumulate = true }), ploss.nn.TaylorSoftmax { n = 4 } }
    local want = model:forward(xs):clone()
    local _, offset = ploss.rng_state()
    local twin = model:clone()
    assert.are.equal(offset, select(2, ploss.rng_state()))
    assert.is_nil(twin.output) -- the last call's buffers are not copied
    H.assert_equal(twin:forward(xs), want)
    assert.are.equal(tostring(model), tostring(twin))
    twin.modules[1].weight:fill(0)
    assert.are_not.equal(0, model.modules[1].weight:flat()[1])
    assert.is_true(twin.modules[3].accumulate)
    -- as the first layer with parameters it ends the chain: the model's gradInput is nil
    local lead = ploss.nn.Sequential { ploss.nn.Swish(), ploss.nn.Linear(4, 3, { dtype = "f64", input_grad = false }) }
    lead:forward(xs)
    assert.is_nil(lead:backward(xs, ploss.ones({ 5, 3 }, { dtype = "f64" })))
  end)

  it("convert with Torch7's type methods: parameters and gradients, every module, nothing half-done", function()
    local m = ploss.nn.Sequential { ploss.nn.Linear(3, 2), ploss.nn.Mish(), ploss.nn.Linear(2, 2, { bias = false }) }
    local x = ploss.randn({ 4, 3 }, { seed = 8 })
    local y32 = m:forward(x):clone()
    assert.are.equal(m, m:double())
    for _, k in ipairs { "weight", "bias", "gradWeight", "gradBias" } do
      assert.are.equal("f64", m.modules[1][k]:dtype(), k)
    end
    assert.are.equal("f64", m.modules[3].weight:dtype())
    assert.is_nil(m.output)
    -- the same values, computed in f64 now
    H.assert_close(m:forward(x:double()), y32:double(), { rtol = 1e-6 })
    assert.are.equal("f32", m:type("torch.FloatTensor").modules[1].weight:dtype())
    assert.are.equal("f16", m:type("f16").modules[3].weight:dtype())
    assert.are.equal("f32", m:float().modules[3].weight:dtype())
    H.expect_error(function() local r = m:type("x") return r end, "Sequential:type: dtype: expected a float dtype")
    H.expect_error(function() local r = m:type(3) return r end, "Sequential:type: expected a type name")
    -- a device that cannot be had: refused before any parameter moves
    local w = m.modules[1].weight
    H.expect_error(function() local r = m:to("cuda:63") return r end, "cuda:63")
    assert.are.equal(w, m.modules[1].weight)
    local lin = ploss.nn.Linear(2, 2)
    lin:forward(ploss.randn({ 1, 2 }))
    assert.are.equal(lin, lin:clearState())
    assert.is_nil(lin.output)
  end)

  it("an optimiser or EMA made before a conversion refuses the replaced tensors (they would move, silently, tensors the model no longer uses)", function()
    local lin = ploss.nn.Linear(1, 1, { bias = false })
    lin.weight:fill(1)
    local params, grads = lin:parameters()
    local sgd = ploss.optim.SGD(params, grads, { lr = 1 })
    local ema = ploss.optim.EMA(params, { decay = 0.5, warmup = false })
    lin:double()
    local msg = "params[1] was replaced by its Linear's conversion (to, cuda, cpu, type, float, double): the model " ..
      "holds new tensors; make the "
    H.expect_error(function() sgd:step() end, "SGD: step: " .. msg .. "optimiser again from model:parameters()")
    H.expect_error(function() ema:update() end, "EMA:update: " .. msg .. "EMA again")
    H.expect_error(function() ema:apply() end, "EMA:apply: " .. msg .. "EMA again")
    H.expect_error(function() local a = ploss.optim.Adam(params, grads) return a end, "Adam: " .. msg)
    -- the margin head's conversion too
    local head = ploss.nn.MarginSoftmax { 2, 3, criterion = ploss.ArcFaceLoss {} }
    local hp, hg = head:parameters()
    local hsgd = ploss.optim.SGD(hp, hg)
    head:double()
    H.expect_error(function() hsgd:step() end, "SGD: step: params[1] was replaced by its MarginSoftmax's conversion")
    assert.are.equal("f64", head.weight:dtype())
    -- made again from the model: the steps reach it (w = 1 − lr·x·g = 0); a conversion that
    -- changes nothing keeps the tensors and the optimiser
    local p2, g2 = lin:parameters()
    local again = ploss.optim.SGD(p2, g2, { lr = 1 })
    local x = ploss.ones({ 1, 1 }, { dtype = "f64" })
    lin:forward(x)
    lin:backward(x, ploss.ones({ 1, 1 }, { dtype = "f64" }))
    again:step()
    assert.are.equal(0, lin.weight:flat()[1])
    lin:double()
    again:step()
    assert.are.equal(-1, lin.weight:flat()[1])
  end)

  it("refuse a method called with a dot, naming it", function()
    local x = ploss.randn({ 2, 4 }, { seed = 4 })
    local lin, model = ploss.nn.Linear(4, 3), ploss.nn.Sequential { ploss.nn.Linear(4, 3), ploss.nn.Mish() }
    H.expect_error(function() lin.forward(x) end, "Linear.forward: called without its object (got a ploss tensor first): write layer:forward")
    H.expect_error(function() model.forward(x) end, "Sequential.forward: called without its object")
    H.expect_error(function() ploss.nn.Mish().backward(x, x) end, "Mish.backward: called without its object")
    H.expect_error(function() lin.updateOutput(x) end, "Linear.updateOutput: called without its object")
    H.expect_error(function() ploss.nn.Mish().updateGradInput(x, x) end, "Mish.updateGradInput: called without its object")
    H.expect_error(function() local p = lin.parameters() return p end, "Linear.parameters: called without its object")
    H.expect_error(function() local p = model.parameters() return p end, "Sequential.parameters: called without its object")
    H.expect_error(function() local p = ploss.nn.Linear:parameters() return p end, "Linear.parameters: called on the class")
    H.expect_error(function() local m = ploss.nn.Sequential().add(lin) return m end,
      "Sequential.add: called without its object (got ploss.nn.Linear(4 -> 3, init=he) first): write model:add(...)")
    H.expect_error(function() local o = ploss.TaylorSoftmax {}.updateOutput(x) return o end,
      "TaylorSoftmax.updateOutput: called without its object")
    -- Torch7's positional bias flag
    H.expect_error(function() local l = ploss.nn.Linear(3, 2, false) return l end,
      "Linear: opts: expected a table, got boolean (Torch7's positional bias flag is {bias = false} here)")
    local opt = ploss.optim.SGD({ lin.weight }, { lin.gradWeight }, { lr = 0.1 })
    H.expect_error(function() opt.step() end, "SGD.step: called without its object (got nil first): write optim:step")
    local ema = ploss.optim.EMA({ lin.weight })
    H.expect_error(function() ema.update() end, "EMA.update: called without its object")
  end)
end)

describe("ops that write a tensor", function()
  it("mark it written (its version moves), each of them", function()
    local x = ploss.randn({ 2, 3 }, { dtype = "f64", seed = 5 })
    local function bumps(name, t, write)
      local v = t:version()
      write()
      assert.is_true(t:version() > v, name .. " left the version of the tensor it wrote")
    end
    local g = ploss.empty({ 2, 3 }, { dtype = "f64" })
    bumps("mish_backward", g, function() F.mish_backward(x, ploss.ones({ 2, 3 }, { dtype = "f64" }), { grad_input = g }) end)
    local b = ploss.empty({ 3 }, { dtype = "f64" })
    bumps("bias_grad", b, function() F.bias_grad(x, { out = b }) end)
    local idx = ploss.empty({ 2 }, { dtype = "i64" })
    bumps("argmax", idx, function() F.argmax(x, { out = idx }) end)
    local oh = ploss.empty({ 2, 3 }, { dtype = "f64" })
    bumps("one_hot", oh, function() ploss.one_hot(ploss.tensor({ 0, 2 }, { dtype = "i64" }), 3, { out = oh }) end)
    local ts = ploss.empty({ 2, 3 }, { dtype = "f64" })
    bumps("taylor_softmax", ts, function() F.taylor_softmax(x, { out = ts }) end)
    local m = ploss.TaylorSoftmax {}
    local out = m:forward(x)
    bumps("TaylorSoftmax:forward", out, function() m:forward(x) end)
    local l = ploss.empty({ 2, 3 }, { dtype = "f64" })
    bumps("F.mse_loss{out}", l, function() F.mse_loss(x, x, { reduction = "none", out = l }) end)
  end)

  it("Linear refuses an input of the wrong width by name", function()
    local lin = ploss.nn.Linear(4, 3)
    H.expect_error(function() lin:forward(ploss.randn({ 2, 5 })) end, "Linear: input: expected N×4, got 2×5")
    H.expect_error(function() lin:forward(ploss.randn({ 4 })) end, "Linear: input: expected N×4, got 1-d")
  end)
end)

describe("messages that name the real cause", function()
  it("gemm: inner sizes that differ are said so, not as a c of the right shape", function()
    local a, b = ploss.randn(3, 4), ploss.randn(5, 2)
    local c = ploss.empty(3, 2)
    local msg = H.expect_error(function() F.gemm(a, b) end,
      { "gemm: a, b: op(a) is 3×4 and op(b) is 5×2 (trans_a = 0, trans_b = 0): op(a)'s 4 columns must equal op(b)'s " ..
        "5 rows", "PLOSS_ERR_SHAPE" })
    assert.is_nil(msg:find("got c", 1, true))
    H.expect_error(function() F.gemm(a, b, { out = c }) end, "op(a)'s 4 columns must equal op(b)'s 5 rows", c)
    -- a c of the wrong shape names it (the caller's name: opts.out)
    H.expect_error(function() F.gemm(a, ploss.randn(4, 2), { out = ploss.empty(3, 3) }) end,
      "gemm: opts.out: op(a) is 3×4 and op(b) is 4×2 (trans_a = 0, trans_b = 0), so c must be 3×2; got 3×3")
  end)

  it("the activations' overlap message suggests the Lua flag, inplace = true", function()
    local x = ploss.randn({ 4 })
    local msg = H.expect_error(function() F.mish(x, { out = x }) end,
      { "opts.out: overlaps the memory of input", "ask for the in-place form (inplace = true) with the same tensor" })
    assert.is_nil(msg:find("inplace = 1", 1, true))
    H.expect_error(function() F.swish_backward(x, ploss.ones({ 4 }), { grad_input = x:narrow(1, 1, 4) }) end,
      "(inplace = true)")
  end)

  it("Linear names its input's and weight's dtypes and devices, and gradOutput's shape", function()
    local lin = ploss.nn.Linear(3, 2)
    H.expect_error(function() lin:forward(ploss.randn({ 4, 3 }, { dtype = "f64" })) end,
      "Linear: input: dtype f64, but the layer's weight is f32 (make the layer with {dtype = 'f64'}, or convert: " ..
      "input:to('f32'))")
    -- a broadcast input (expand) is named as the layer's, not as the product's operand; its
    -- copy runs, and a one-row expand (stride 0 on a dim of size 1) is no broadcast
    local row = ploss.randn({ 1, 3 })
    H.expect_error(function() lin:forward(row:expand(4, 3)) end,
      "Linear: input: dim 1 is broadcast (stride 0, an expand); pass input:contiguous()")
    H.assert_equal(lin:forward(row:expand(4, 3):contiguous()):clone():narrow(1, 4, 1), lin:forward(row))
    assert.are.same({ 1, 2 }, lin:forward(row:expand(1, 3)):size())
    local x = ploss.randn({ 4, 3 })
    lin:forward(x)
    H.expect_error(function() lin:backward(x, ploss.ones({ 4, 2 }, { dtype = "f64" })) end,
      "Linear: gradOutput: dtype f64, but the layer's weight is f32")
    H.expect_error(function() lin:backward(x, ploss.ones({ 1, 2 }):expand(4, 2)) end,
      "Linear: gradOutput: dim 1 is broadcast (stride 0, an expand); pass gradOutput:contiguous()")
    H.expect_error(function() lin:backward(x, ploss.ones({ 5, 2 })) end, "Linear: gradOutput: expected 4×2, got 5×2")
    H.expect_error(function() lin:backward(x, ploss.ones({ 4, 3 })) end, "Linear: gradOutput: expected 4×2, got 4×3")
  end)
end)

describe("layers given their own buffers back", function()
  it("an activation module fed its own output writes a new buffer (no ALIAS about an opts.out never passed)", function()
    for _, name in ipairs { "Mish", "Swish", "HardSwish" } do
      local m = ploss.nn[name]()
      local x = ploss.randn({ 2, 3 }, { dtype = "f64" })
      local y = m:forward(x)
      local before = y:clone()
      local z = m:forward(y)
      assert.are_not.equal(y, z)
      H.assert_equal(y, before)
      H.assert_close(z, F[name == "HardSwish" and "hard_swish" or name:lower()](before), { rtol = 0, atol = 0 })
      -- backward with its own gradient as gradOutput, and its own output as the input
      local g = m:backward(y, ploss.ones({ 2, 3 }, { dtype = "f64" }))
      local gb = g:clone()
      local g2 = m:backward(y, g)
      assert.are_not.equal(g, g2)
      H.assert_equal(g, gb)
    end
  end)

  it("Linear fed its own output writes a new buffer", function()
    local lin = ploss.nn.Linear(3, 3, { dtype = "f64" })
    local y = lin:forward(ploss.randn({ 2, 3 }, { dtype = "f64" }))
    local before = y:clone()
    local z = lin:forward(y)
    assert.are_not.equal(y, z)
    H.assert_equal(y, before)
  end)
end)

describe("layers' backward after their input was written", function()
  local function f64(t) return ploss.tensor(t, { dtype = "f64" }) end

  it("Sequential refuses it (its saved activations are the old values'), then works after forward", function()
    ploss.manual_seed(1)
    local m = ploss.nn.Sequential { ploss.nn.Linear(2, 2, { dtype = "f64" }), ploss.nn.Mish() }
    local inp = f64({ { 1, -1 }, { 0.5, 2 } })
    m:forward(inp)
    inp:mul_(3)
    local gin = m.modules[1].gradInput
    H.expect_error(function() m:backward(inp, ploss.ones({ 2, 2 }, { dtype = "f64" })) end,
      "Sequential:backward: input was written since forward (its storage's version is 2, forward read 1); the " ..
      "saved activations belong to the old values: call forward again")
    assert.are.equal(gin, m.modules[1].gradInput) -- nothing was run
    -- forward again: backward equals the chain's own gradient at the new input
    m:forward(inp)
    local g = m:backward(inp, ploss.ones({ 2, 2 }, { dtype = "f64" })):clone()
    local lin, act = ploss.nn.Linear(2, 2, { dtype = "f64" }), ploss.nn.Mish()
    lin.weight:copy(m.modules[1].weight)
    local h = lin:forward(inp)
    act:forward(h)
    H.assert_close(g, lin:backward(inp, act:backward(h, ploss.ones({ 2, 2 }, { dtype = "f64" }))), { rtol = 0, atol = 0 })
  end)

  it("an activation rewritten later in the chain (one module listed twice) is refused by the next layer", function()
    local mish = ploss.nn.Mish()
    local m = ploss.nn.Sequential { ploss.nn.Linear(2, 2, { dtype = "f64" }), mish, ploss.nn.Linear(2, 2, { dtype = "f64" }),
                                    mish }
    local inp = f64({ { 1, -1 }, { 0.5, 2 } })
    m:forward(inp)
    H.expect_error(function() m:backward(inp, ploss.ones({ 2, 2 }, { dtype = "f64" })) end,
      "Linear:backward: input: written since forward (its storage's version is 2, forward read 1")
  end)

  it("Sequential takes a module that writes its input in place (Torch7's ReLU(true) form)", function()
    ploss.manual_seed(3)
    -- a Torch7-style in-place scale: forward writes its input and returns it
    local Scale = { c = 2 }
    Scale.__index = Scale
    function Scale:forward(x) x:mul_(self.c); self.output = x; return x end
    function Scale:backward(_, g) self.gradInput = g:clone():mul_(self.c); return self.gradInput end
    local lin = ploss.nn.Linear(3, 2, { dtype = "f64" })
    local m = ploss.nn.Sequential { lin, setmetatable({}, Scale), ploss.nn.Swish() }
    local x = ploss.randn({ 4, 3 }, { dtype = "f64" })
    local go = ploss.randn({ 4, 2 }, { dtype = "f64" })
    for _ = 1, 2 do
      m:forward(x)
      local g = m:backward(x, go):clone()
      -- the chain by hand: h = 2·(x·Wᵀ + b), y = swish(h)
      local ref_lin = ploss.nn.Linear(3, 2, { dtype = "f64" })
      ref_lin.weight:copy(lin.weight)
      ref_lin.bias:copy(lin.bias)
      local z = ref_lin:forward(x):clone():mul_(2)
      local sw = ploss.nn.Swish()
      sw:forward(z)
      local gz = sw:backward(z, go):clone():mul_(2)
      H.assert_close(g, ref_lin:backward(x, gz), { rtol = 1e-14, atol = 0 })
    end
  end)

  it("an in-place criterion gradient over the model's output is not a stale activation", function()
    local m = ploss.nn.Sequential { ploss.nn.Linear(3, 4, { dtype = "f64" }), ploss.nn.Mish() }
    local x = ploss.randn({ 2, 3 }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 3 }, { dtype = "i64" })
    local out = m:forward(x)
    local _, g = ploss.CrossEntropyLoss { inplace = true }(out, y)
    assert.are.equal(out, g)
    assert.are.same({ 2, 3 }, m:backward(x, g):size())
  end)

  it("Linear and the activation modules refuse their forward's input written since; another input is taken", function()
    local lin = ploss.nn.Linear(2, 2, { dtype = "f64" })
    local x = f64({ { 1, -1 }, { 0.5, 2 } })
    local go = ploss.ones({ 2, 2 }, { dtype = "f64" })
    lin:forward(x)
    x:add_(1)
    local gw = lin.gradWeight
    H.expect_error(function() lin:backward(x, go) end,
      "Linear:backward: input: written since forward (its storage's version is 2, forward read 1: a write to any " ..
      "view of it counts); gradOutput belongs to the old values: call forward again", gw)
    lin:forward(x)
    assert.is_not_nil(lin:backward(x, go))
    for _, name in ipairs { "Mish", "Swish", "HardSwish" } do
      local a = ploss.nn[name] { inplace = true }
      local v = f64({ 0.5, -2 })
      a:forward(v)
      v:fill(3)
      local g = ploss.ones({ 2 }, { dtype = "f64" })
      H.expect_error(function() a:backward(v, g) end, name .. ":backward: input: written since forward", g)
      -- a tensor its forward did not read: Torch7's backward(input, gradOutput), as before
      local w = f64({ 1, 2 })
      H.assert_close(a:backward(w, ploss.ones({ 2 }, { dtype = "f64" })),
        F[name == "HardSwish" and "hard_swish_backward" or name:lower() .. "_backward"](w, ploss.ones({ 2 }, { dtype = "f64" })),
        { rtol = 0, atol = 0 })
    end
  end)
end)

describe("lists of tensors with holes", function()
  it("EMA and the optimisers refuse them rather than track the tensors before the hole", function()
    local a, b = ploss.zeros({ 2 }), ploss.zeros({ 3 })
    H.expect_error(function() ploss.optim.EMA({ a, nil, b }) end, "EMA: params: the list has a hole ([2] is nil)")
    H.expect_error(function() ploss.optim.EMA({ [1] = a, [3] = b }) end, "EMA: params: the list has a hole")
    H.expect_error(function() ploss.optim.SGD({ a, nil, b }, { a:clone(), nil, b:clone() }) end,
      "SGD: params: the list has a hole")
    H.expect_error(function() ploss.optim.Adam({ a, b }, { a:clone(), nil, b:clone() }) end,
      "Adam: grads: the list has a hole")
    assert.are.equal(2, #ploss.optim.EMA({ a, b }).shadows)
  end)
end)
