-- Taylor softmax / log-Taylor softmax / Taylor cross-entropy spec (suite 'cpu'):
-- on the CPU backend.
--  * every taylor_softmax, log_taylor_softmax and taylor_cross_entropy case of
--    reference_semantics.json (pytorch-loss V1 autograd, f64), in f64 and f32;
--  * the definition by hand (not shift-invariant), any dim, strided layouts;
--  * central differences in f64 for the ops (n, dim, shapes) and the loss (reductions,
--    n, ignored samples, shapes);
--  * f16 inputs whose polynomial overflows f16 (|x| ≥ 362 at n = 2) stay finite;
--  * C = 1, all ignored, modules and buffers, bad input.
local H = require "spec.helpers"
local S = require "spec.softmax2_common"
local ploss = H.ploss
local F = ploss.F

local function poly(v, n)
  local f = 1
  for k = n, 1, -1 do f = 1 + f * v / k end
  return f
end

describe("Taylor softmax fixtures", function()
  for _, op in ipairs { "taylor_softmax", "log_taylor_softmax" } do
    it("matches every " .. op .. " case (forward and backward with the fixture's grad_output)", function()
      local cases = H.fixtures(op)
      assert.are.equal(2, #cases)
      for _, run in ipairs(S.fixture_runs) do
        for _, case in ipairs(cases) do
          local x = H.fixture_tensor(case.inputs.input, { dtype = run.dtype })
          local gout = H.fixture_tensor(case.grad_output, { dtype = run.dtype })
          local o = { n = case.options.n, dim = case.options.dim + 1 } -- the fixture's dim is 0-based
          local tol = { rtol = run.rtol, atol = run.atol, what = case.name .. " " .. run.dtype }
          H.assert_close(F[op](x, o), case.expected.output, tol)
          H.assert_close(F[op .. "_backward"](x, gout, o), case.expected.grad_input, tol)
          local m = op == "taylor_softmax" and ploss.TaylorSoftmax(o) or ploss.LogTaylorSoftmax(o)
          H.assert_close(m:forward(x), case.expected.output, tol)
          H.assert_close(m:backward(x, gout), case.expected.grad_input, tol)
          assert.are.equal(run.dtype, m.gradInput:dtype())
        end
      end
    end)
  end

  it("matches every taylor_cross_entropy case", function()
    local cases = H.fixtures("taylor_cross_entropy")
    assert.are.equal(4, #cases)
    for _, run in ipairs(S.fixture_runs) do
      for _, case in ipairs(cases) do
        local o = case.options
        S.check_fixture("TaylorCrossEntropyLoss", "taylor_cross_entropy", case, run,
          { n = o.n, reduction = o.reduction, ignore_index = o.ignore_index })
      end
    end
  end)
end)

describe("Taylor softmax by hand", function()
  it("follows the definition along any dim, and is not shift-invariant", function()
    H.seed(41)
    local x = H.random_logits({ 2, 3, 4 }, { std = 2 })
    local xv = x:totable()
    for _, n in ipairs { 2, 4, 6 } do
      for _, dim in ipairs { 1, 2, 3, -1 } do
        local d = dim < 0 and 3 or dim
        local out = F.taylor_softmax(x, { n = n, dim = dim }):totable()
        local lout = F.log_taylor_softmax(x, { n = n, dim = dim }):totable()
        local sizes = { 2, 3, 4 }
        for a = 1, 2 do for b = 1, 3 do for c = 1, 4 do
          local idx = { a, b, c }
          local z = 0
          for k = 1, sizes[d] do
            local j = { a, b, c }
            j[d] = k
            z = z + poly(xv[j[1]][j[2]][j[3]], n)
          end
          local f = poly(xv[a][b][c], n)
          H.assert_close(out[a][b][c], f / z, { rtol = 1e-14, what = string.format("n=%d dim=%d %s", n, dim, table.concat(idx, ",")) })
          H.assert_close(lout[a][b][c], math.log(f) - math.log(z), { rtol = 1e-13, atol = 1e-15 })
        end end end
      end
    end
    -- shifting every logit changes the result (unlike softmax)
    local a = F.taylor_softmax(ploss.tensor({ { 0, 1 } }, { dtype = "f64" })):flat()
    local b = F.taylor_softmax(ploss.tensor({ { 5, 6 } }, { dtype = "f64" })):flat()
    assert.is_true(math.abs(a[1] - b[1]) > 1e-3)
  end)

  it("one element along dim gives 1 (log: 0)", function()
    local x = ploss.randn({ 3, 1 }, { dtype = "f64" })
    H.assert_equal(F.taylor_softmax(x), { { 1 }, { 1 }, { 1 } })
    H.assert_equal(F.log_taylor_softmax(x), { { 0 }, { 0 }, { 0 } })
  end)

  it("f16 inputs whose polynomial overflows f16 stay finite (f32 internals)", function()
    -- f_2(400) = 80401 > 65504 (the largest f16)
    local x = ploss.tensor({ { 400, 0 }, { -500, 3 } }, { dtype = "f16" })
    local ref = F.taylor_softmax(x:double())
    local out = F.taylor_softmax(x)
    assert.are.equal("f16", out:dtype())
    H.assert_close(out, ref, { rtol = 1e-3, atol = 1e-7 })
    local lout = F.log_taylor_softmax(x)
    for _, v in ipairs(lout:flat()) do assert.is_true(v == v and math.abs(v) < math.huge) end
    H.assert_close(lout, F.log_taylor_softmax(x:double()), { rtol = 1e-3, atol = 6e-8 }) -- f16 subnormals
    local l, g = F.taylor_cross_entropy_fused(ploss.tensor({ { 400, 0, -300 } }, { dtype = "f16" }),
      ploss.tensor({ 2 }, { dtype = "i64" }))
    local lr = F.taylor_cross_entropy(ploss.tensor({ { 400, 0, -300 } }, { dtype = "f64" }), ploss.tensor({ 2 }, { dtype = "i64" }))
    H.assert_close(l, lr, { rtol = 1e-6 })
    for _, v in ipairs(g:flat()) do assert.is_true(v == v and math.abs(v) < math.huge) end
  end)

  it("high orders (n = 20) near the polynomial's minimum match f64 from f32 inputs", function()
    local x = ploss.tensor({ { -3.5, -4, 0.5, -2 } }, { dtype = "f32" })
    H.assert_close(F.taylor_softmax(x, { n = 20 }), F.taylor_softmax(x:double(), { n = 20 }), { rtol = 1e-6 })
  end)

  it("Taylor cross-entropy above order 10 sums in f64 from f32 inputs: terms past f32's range stay finite", function()
    -- f_12(10⁴) ≈ 2·10³⁹ is past f32's range; the loss, log Z − log F_y ≈ 90.54, is not
    local x = ploss.tensor({ { 1e4, 0, 1 }, { -2, 0.5, 3 } }, { dtype = "f32" })
    local y = ploss.tensor({ 1, 2 }, { dtype = "i64" })
    local crit = ploss.TaylorCrossEntropyLoss { n = 12, reduction = "none" }
    local l32, g32 = crit(x, y)
    local l64, g64 = crit(x:double(), y)
    H.assert_close(l32, l64, { rtol = 1e-6 })
    H.assert_close(g32, g64, { rtol = 1e-6, atol = 1e-30 })
    H.assert_close(l64:flat()[1], 90.538070568364, { rtol = 1e-12 })
  end)

  it("Taylor cross-entropy past the computing type's range: +∞ loss (NaN at the label), the gradient of 1/Z = 0", function()
    -- n = 2, f32: f_2(3·10¹⁹) ≈ 4.5·10³⁸ overflows, f_1(3·10¹⁹) does not: ∂ℓ/∂x = (0, −f_1(1)/f_2(1), 0)
    -- = (0, −2/2.5, 0); f64 at 10²⁰⁰ the same; n = 12, f_11(10²⁰⁰) overflows too: NaN there
    local y = ploss.tensor({ 1 }, { dtype = "i64" })
    for _, case in ipairs({ { 3e19, "f32", 2 }, { 1e200, "f64", 2 } }) do
      local x = ploss.tensor({ { case[1], 1, 0 } }, { dtype = case[2] })
      local l, g = ploss.TaylorCrossEntropyLoss { n = case[3] }(x, y)
      assert.are.equal(math.huge, l)
      H.assert_close(g, { { 0, -0.8, 0 } }, { rtol = 1e-6 })
    end
    local l, g = ploss.TaylorCrossEntropyLoss { n = 12 }(ploss.tensor({ { 1e200, 1, 0 } }, { dtype = "f64" }), y)
    assert.are.equal(math.huge, l)
    local gf = g:flat()
    assert.is_true(gf[1] ~= gf[1])
    assert.is_true(gf[2] < 0 and gf[2] > -1 and gf[3] == 0)
    -- the label's own logit overflowing: log Z − log F_y = ∞ − ∞, NaN (F_y in the dtype of Z's
    -- terms, as CUDA's); the gradient f_1(x)·(1/Z − 1/F_y) = 0 everywhere
    for _, case in ipairs({ { 3e19, "f32" }, { 1e200, "f64" } }) do
      local l0, g0 = ploss.TaylorCrossEntropyLoss { n = 2 }(ploss.tensor({ { case[1], 1, 0 } }, { dtype = case[2] }),
        ploss.tensor({ 0 }, { dtype = "i64" }))
      assert.is_true(l0 ~= l0, case[2] .. " loss " .. l0)
      H.assert_equal(g0, ploss.zeros({ 1, 3 }, { dtype = case[2] }))
    end
  end)

  it("Taylor cross-entropy: C = 1 gives 0; every sample ignored gives a NaN mean and zero gradient", function()
    local x = ploss.randn({ 4, 1 }, { dtype = "f64" })
    local l, g = F.taylor_cross_entropy_fused(x, ploss.zeros({ 4 }, { dtype = "i64" }))
    assert.are.equal(0, l)
    H.assert_equal(g, { { 0 }, { 0 }, { 0 }, { 0 } })
    local y = ploss.full({ 2, 3 }, -100, { dtype = "i64" })
    local x2 = ploss.randn({ 2, 5, 3 }, { dtype = "f64" })
    local crit = ploss.TaylorCrossEntropyLoss {}
    local lm = crit:forward(x2, y)
    assert.is_true(lm ~= lm)
    H.assert_equal(crit:backward(x2, y), ploss.zeros({ 2, 5, 3 }, { dtype = "f64" }))
    local lf, gf = crit(x2, y)
    assert.is_true(lf ~= lf)
    H.assert_equal(gf, ploss.zeros({ 2, 5, 3 }, { dtype = "f64" }))
  end)

  it("Taylor cross-entropy equals −log of the log-Taylor softmax at the label", function()
    H.seed(42)
    local x = H.random_logits({ 3, 4, 5 })
    local y = H.random_labels({ 3, 5 }, 4)
    local lp = F.log_taylor_softmax(x, { n = 4 }):totable()
    local l = F.taylor_cross_entropy(x, y, { n = 4, reduction = "none" }):totable()
    local yv = y:totable()
    for a = 1, 3 do for s = 1, 5 do
      H.assert_close(l[a][s], -lp[a][yv[a][s] + 1][s], { rtol = 1e-13 })
    end end
  end)
end)

describe("Taylor gradients (central differences, f64)", function()
  it("of both ops for n × dim × shape (against a random upstream gradient)", function()
    local seed, count = 4200, 0
    H.each({ "taylor_softmax", "log_taylor_softmax" }, { 2, 4, 8 }, { { { 3, 5 }, 2 }, { { 2, 3, 4 }, 1 }, { { 2, 3, 4 }, -1 }, { { 4 }, 1 } },
      function(op, n, case)
        seed = seed + 1
        H.seed(seed)
        local sizes, dim = case[1], case[2]
        local x = H.random_logits(sizes, { std = 1.5 })
        local gout = ploss.randn(sizes, { dtype = "f64" })
        local gv = gout:flat()
        local function f(xx)
          local o, s = F[op](xx, { n = n, dim = dim }):flat(), 0
          for i = 1, #o do s = s + o[i] * gv[i] end
          return s
        end
        H.gradcheck(f, x, F[op .. "_backward"](x, gout, { n = n, dim = dim }),
          { what = string.format("%s n=%d dim=%d %s", op, n, dim, table.concat(sizes, "x")), seed = seed })
        count = count + 1
      end)
    assert.are.equal(24, count)
  end)

  it("of the Taylor cross-entropy for every reduction × n × ignore × shape", function()
    local seed, count = 4300, 0
    H.each({ "none", "mean", "sum" }, { 2, 4, 6 }, { false, true }, { { 4, 5 }, { 2, 3, 2, 3 }, { 3, 1 } },
      function(red, n, ignore, shape)
        seed = seed + 1
        H.seed(seed)
        local x = H.random_logits(shape, { std = 2 })
        local y = S.labels(shape, { ignore = ignore and 0.3 or 0, ignore_index = -100 })
        S.gradcheck("TaylorCrossEntropyLoss", "taylor_cross_entropy", x, y, { reduction = red, n = n },
          string.format("%s n=%d ign=%s %s", red, n, tostring(ignore), table.concat(shape, "x")), seed)
        count = count + 1
      end)
    assert.are.equal(54, count)
  end)
end)

describe("Taylor layouts, dtypes, modules", function()
  it("strided inputs and outputs give the values of contiguous ones", function()
    H.seed(44)
    local x = H.random_logits({ 3, 4, 5 })
    local g = ploss.randn({ 3, 4, 5 }, { dtype = "f64" })
    -- reversed strides: the dims on each side of `dim` are one axis each for dim = 2
    local xt = x:transpose(1, 3):contiguous():transpose(1, 3)
    local x2 = H.random_logits({ 6, 7 })
    for _, op in ipairs { "taylor_softmax", "log_taylor_softmax" } do
      local o = { n = 4, dim = 2 }
      H.assert_close(F[op](xt, o), F[op](x, o), { rtol = 1e-15 })
      H.assert_close(F[op .. "_backward"](xt, g, o), F[op .. "_backward"](x, g, o), { rtol = 1e-14, atol = 1e-16 })
      local out = ploss.empty({ 5, 4, 3 }, { dtype = "f64" }):permute(3, 2, 1)
      H.assert_close(F[op](x, { n = 4, dim = 2, out = out }), F[op](x, o), { rtol = 1e-15 })
      -- a transposed matrix along either dim, and a narrowed one
      for _, dim in ipairs { 1, 2 } do
        local x2t = x2:t():contiguous():t()
        H.assert_close(F[op](x2t, { dim = dim }), F[op](x2, { dim = dim }), { rtol = 1e-15 })
        local xn = x2:narrow(2, 2, 4)
        H.assert_close(F[op](xn, { dim = dim }), F[op](xn:contiguous(), { dim = dim }), { rtol = 1e-15 })
      end
      -- dims before `dim` that are not one strided axis are refused
      H.expect_error(function() F[op](xt, { dim = 3 }) end, "input: the strides of dims 0..1 (0-based; Lua dims 1..2) cannot be walked as one axis")
    end
    -- Taylor CE on a channels-last input
    local xl = x:permute(1, 3, 2):contiguous():permute(1, 3, 2)
    local y = H.random_labels({ 3, 5 }, 4, { ignore = 0.2, ignore_index = -100 })
    local l1, g1 = F.taylor_cross_entropy_fused(x, y, { n = 4 })
    local l2, g2 = F.taylor_cross_entropy_fused(xl, y, { n = 4 })
    H.assert_close(l2, l1, { rtol = 1e-14 })
    H.assert_close(g2, g1, { rtol = 1e-14, atol = 1e-17 })
  end)

  it("f32, f16 and bf16 match f64 on the same values", function()
    H.seed(45)
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local x = ploss.randn({ 6, 7 }, { dtype = dt, std = 3 })
      local g = ploss.randn({ 6, 7 }, { dtype = dt })
      for _, op in ipairs { "taylor_softmax", "log_taylor_softmax" } do
        local tol = { rtol = H.tol[dt].rtol, atol = H.tol[dt].atol, what = dt .. " " .. op }
        local out = F[op](x, { n = 4 })
        assert.are.equal(dt, out:dtype())
        H.assert_close(out, F[op](x:double(), { n = 4 }), tol)
        H.assert_close(F[op .. "_backward"](x, g, { n = 4 }), F[op .. "_backward"](x:double(), g:double(), { n = 4 }), tol)
      end
      local y = H.random_labels({ 6 }, 7, { ignore = 0.2, ignore_index = -100 })
      local l, gr = F.taylor_cross_entropy_fused(x, y)
      local lr, grr = F.taylor_cross_entropy_fused(x:double(), y)
      H.assert_close(l, lr, { rtol = 1e-6 })
      H.assert_close(gr, grr, { rtol = H.tol[dt].rtol, atol = H.tol[dt].atol })
    end
  end)

  it("modules reuse their buffers, chain in nn.Sequential and print their options", function()
    local m = ploss.TaylorSoftmax { n = 4 }
    local x = ploss.randn({ 3, 5 })
    local o1 = m:forward(x)
    local o2 = m:forward(x)
    assert.are.equal(o1, o2)
    local g1 = m:backward(x, ploss.ones({ 3, 5 }))
    assert.are.equal(g1, m:backward(x, ploss.ones({ 3, 5 })))
    -- rows of the output sum to one, so the gradient of their sum is zero
    for _, v in ipairs(g1:flat()) do assert.is_true(math.abs(v) < 1e-6) end
    assert.are.equal("ploss.TaylorSoftmax(n=4, dim=2)", tostring(m))
    assert.are.equal("ploss.LogTaylorSoftmax(n=2, dim=-1)", tostring(ploss.LogTaylorSoftmax { dim = -1 }))
    assert.are.equal(ploss.nn.TaylorSoftmax, ploss.TaylorSoftmax)
    local seq = ploss.nn.Sequential { ploss.nn.Linear(5, 4), ploss.LogTaylorSoftmax {} }
    assert.are.same({ 3, 4 }, seq:forward(x):size())
    assert.are.same({ 3, 5 }, seq:backward(x, ploss.ones({ 3, 4 })):size())
    -- the model's clearState and conversions reach the module (its buffers dropped)
    local taylor = seq.modules[2]
    assert.is_not_nil(taylor.output)
    assert.are.equal(taylor, taylor:clearState())
    assert.is_nil(taylor.output)
    assert.is_nil(taylor.gradInput)
    seq:forward(x)
    assert.are.equal(seq, seq:double())
    assert.are.equal("f64", seq.modules[1].weight:dtype())
    assert.is_nil(taylor.output)
    assert.are.same({ 3, 4 }, seq:forward(x:double()):size())
    assert.are.equal("ploss.TaylorCrossEntropyLoss(ignore_index=-100, n=2, reduction='mean')",
      tostring(ploss.TaylorCrossEntropyLoss {}))
    -- n and dim are read at each call: a misspelt field is refused, not kept unread
    H.expect_error(function() m.order = 6 end,
      "TaylorSoftmax: 'order' is none of the fields it reads at each call (dim, n): the order of the polynomial is n")
    H.expect_error(function() m.dims = 1 end, "TaylorSoftmax: 'dims' is none of the fields it reads at each call")
    m.n = 6
    H.assert_close(m:forward(x), F.taylor_softmax(x, { n = 6 }), { rtol = 0 })
  end)
end)

describe("Taylor errors", function()
  it("rejects odd, too small or too large orders and bad dims; outputs untouched", function()
    local x = ploss.randn({ 3, 4 })
    local out = ploss.empty({ 3, 4 })
    for _, n in ipairs { 3, 0, -2, 66 } do
      H.expect_error(function() F.taylor_softmax(x, { n = n, out = out }) end,
        "opts.n: " .. n .. " is not an even Taylor order in [2, 64]", out)
    end
    H.expect_error(function() F.log_taylor_softmax(x, { dim = 3, out = out }) end,
      "opts.dim: 3 is out of range for an input of rank 2 (1 to 2, or -2 to -1)", out) -- the dim as given
    H.expect_error(function() F.taylor_softmax(x, { dim = 0 }) end, "dims are 1-based")
    H.expect_error(function() F.taylor_softmax(x, { out = ploss.empty({ 3, 4 }, { dtype = "f64" }) }) end, "opts.out: expected f32, got f64")
    H.expect_error(function() F.taylor_softmax(x, { out = x }) end, "PLOSS_ERR_ALIAS")
    H.expect_error(function() F.taylor_softmax(ploss.zeros({ 3 }, { dtype = "i64" })) end, "input: expected f32, f16, bf16 or f64, got i64")
    local g = ploss.empty({ 3, 4 })
    H.expect_error(function() F.taylor_softmax_backward(x, ploss.ones({ 4, 3 }), { grad_input = g }) end,
      "grad_output: expected the input's shape", g)
    H.expect_error(function() ploss.TaylorSoftmax { order = 2 } end, "unknown option 'order'")
    local loss = ploss.empty({}, { dtype = "f32" })
    H.expect_error(function() F.taylor_cross_entropy(x, ploss.tensor({ 0, 1, 2 }, { dtype = "i64" }), { n = 5, out = loss }) end,
      "opts.n: 5 is not an even integer in [2, 64]", loss)
    H.expect_error(function() F.taylor_cross_entropy(x, ploss.tensor({ 0, 4, 2 }, { dtype = "i64" }), { out = loss }) end,
      { "class index 4 at sample (n = 1, s = 0) is outside [0, 4)", "ignore_index (-100)" }, loss)
  end)
end)

describe("Taylor options and module buffers", function()
  it("the functions refuse a misspelt option (not computed along the default dim) and name a bad buffer", function()
    local x = ploss.randn({ 3, 4 })
    local g = ploss.ones({ 3, 4 })
    local out = ploss.empty({ 3, 4 })
    H.expect_error(function() F.taylor_softmax(x, { dimm = 1, out = out }) end,
      "taylor_softmax: unknown option 'dimm' (known: dim, n, out)", out)
    H.expect_error(function() F.log_taylor_softmax(x, { order = 4, out = out }) end,
      "log_taylor_softmax: unknown option 'order' (known: dim, n, out)", out)
    H.expect_error(function() F.taylor_softmax_backward(x, g, { gradinput = out }) end,
      "taylor_softmax_backward: unknown option 'gradinput' (known: dim, grad_input, n)", out)
    H.expect_error(function() F.log_taylor_softmax_backward(x, g, { out = out }) end,
      "log_taylor_softmax_backward: unknown option 'out' (known: dim, grad_input, n)", out)
    H.expect_error(function() F.log_taylor_softmax(x, { out = 3 }) end,
      "log_taylor_softmax: opts.out: expected a ploss tensor (a buffer to write into), got 3")
    H.expect_error(function() F.taylor_softmax_backward(x, g, { grad_input = "g" }) end,
      "taylor_softmax_backward: opts.grad_input: expected a ploss tensor (a buffer to write into), got 'g'")
    H.expect_error(function() F.taylor_softmax(x, 2) end, "taylor_softmax: opts: expected a table")
    -- the known ones still work
    H.assert_close(F.taylor_softmax(x, { dim = 1, n = 4, out = out }), F.taylor_softmax(x:t(), { dim = 2, n = 4 }):t(),
      { rtol = 0, atol = 0 })
  end)

  it("n and dim past 32 bits are refused with the value given, before they could wrap", function()
    local x = ploss.randn({ 3, 4 })
    local out = ploss.empty({ 3, 4 })
    -- 2^32 + 2 would wrap to the order 2, 2^32 + 2 as a dim to -2^31
    H.expect_error(function() F.taylor_softmax(x, { n = 2 ^ 32 + 2, out = out }) end,
      "taylor_softmax: opts.n: 4294967298 is not an even Taylor order in [2, 64]", out)
    H.expect_error(function() F.taylor_softmax(x, { dim = 2 ^ 32 + 2, out = out }) end,
      "taylor_softmax: opts.dim: 4294967298 is out of range for an input of rank 2", out)
    H.expect_error(function() F.log_taylor_softmax_backward(x, ploss.ones({ 3, 4 }), { dim = -2 ^ 40 }) end,
      "opts.dim: -1099511627776 is out of range for an input of rank 2")
    H.expect_error(function() ploss.TaylorSoftmax { dim = 2 ^ 31 } end,
      "TaylorSoftmax: opts.dim: 2147483648 is out of range for any input (a tensor has at most 8 dims)")
  end)

  it("a module given its own output (or gradient) back writes a new buffer, leaving it as it was", function()
    local m = ploss.TaylorSoftmax {}
    local x = ploss.randn({ 3, 4 })
    local y = m:forward(x)
    local before = y:clone()
    local z = m:forward(y)
    assert.are_not.equal(y, z)
    H.assert_equal(y, before)
    H.assert_close(z, F.taylor_softmax(before), { rtol = 0, atol = 0 })
    local gi = m:backward(y, ploss.ones({ 3, 4 }))
    local gb = gi:clone()
    local g2 = m:backward(y, gi)
    assert.are_not.equal(gi, g2)
    H.assert_equal(gi, gb)
  end)

  it("a module's backward refuses its forward's input written since", function()
    local m = ploss.LogTaylorSoftmax {}
    local x = ploss.randn({ 3, 4 }, { dtype = "f64" })
    m:forward(x)
    x:mul_(2)
    H.expect_error(function() m:backward(x, ploss.ones({ 3, 4 }, { dtype = "f64" })) end,
      "LogTaylorSoftmax:backward: input: written since forward")
    m:forward(x)
    H.assert_close(m:backward(x, ploss.ones({ 3, 4 }, { dtype = "f64" })),
      F.log_taylor_softmax_backward(x, ploss.ones({ 3, 4 }, { dtype = "f64" })), { rtol = 0, atol = 0 })
  end)
end)
