-- Cross-entropy spec (suite 'cpu') on the CPU backend.
--  * every cross_entropy case of torch_reference.json (PyTorch) and reference_semantics.json
--    (pytorch-loss, 'reference' convention), in f64 (1e-10 relative) and f32 (1e-5), through
--    forward, backward (the fixture's grad_output for 'none') and the fused pass, through
--    the criterion and the functional API;
--  * central differences in f64 for every option combination;
--  * layouts (channels-last, transposed), in-place fused, state and buffer reuse;
--  * bad input: each error with its message fragment, outputs untouched.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local NAN = 0 / 0

-- criterion / functional options of a fixture case
local function case_opts(case, dtype, device)
  local o = case.options
  local weight = case.inputs.weight and H.fixture_tensor(case.inputs.weight, { dtype = dtype, device = device })
  return {
    reduction = o.reduction, ignore_index = o.ignore_index, label_smoothing = o.label_smoothing,
    smoothing_convention = o.label_smoothing_convention, weight = weight,
  }
end

describe("CrossEntropyLoss fixtures", function()
  local cases = H.fixtures("cross_entropy")

  it("has every case of both sources", function()
    local n_torch, n_ref = 0, 0
    for _, c in ipairs(cases) do
      if c.source == "torch_reference.json" then n_torch = n_torch + 1 else n_ref = n_ref + 1 end
    end
    assert.are.equal(189, n_torch)
    assert.are.equal(4, n_ref)
  end)

  for _, run in ipairs {
    { dtype = "f64", rtol = 1e-10, atol = 1e-14, target = "i64" },
    { dtype = "f32", rtol = 1e-5, atol = 1e-6, target = "i32" },
  } do
    it("matches every case in " .. run.dtype .. " (forward, backward, fused; criterion and F)", function()
      for _, case in ipairs(cases) do
        H.check_fixture_case("CrossEntropyLoss", "cross_entropy", case, run, case_opts(case, run.dtype), 2.5)
      end
    end)
  end

  it("all-ignored 'mean' cases give a NaN loss and an exactly zero gradient", function()
    local c = H.fixtures("cross_entropy", function(c) return c.name == "ce_all_ignored_mean" end)[1]
    local x, y = H.fixture_tensor(c.inputs.input), H.fixture_tensor(c.inputs.target)
    local crit = ploss.CrossEntropyLoss { label_smoothing = 0.1 }
    local loss = crit:forward(x, y)
    assert.is_true(loss ~= loss)
    H.assert_equal(crit:backward(x, y), ploss.zeros(x:size(), { dtype = "f64" }))
    local l2, g2 = crit(x, y)
    assert.is_true(l2 ~= l2)
    for _, v in ipairs(g2:flat()) do assert.are.equal(0, v) end
  end)
end)

describe("CrossEntropyLoss by hand", function()
  it("uniform logits: log C per sample, gradient (1/C − onehot)/N", function()
    local x = ploss.zeros({ 2, 3 }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 2 }, { dtype = "i64" })
    local crit = ploss.CrossEntropyLoss {}
    H.assert_close(crit:forward(x, y), math.log(3), { rtol = 1e-15 })
    H.assert_close(crit:backward(x, y), { { (1 / 3 - 1) / 2, 1 / 6, 1 / 6 }, { 1 / 6, 1 / 6, (1 / 3 - 1) / 2 } }, { rtol = 1e-15 })
  end)

  it("ties at a large magnitude: the fused pass's softmax from its sums, not from lse", function()
    -- (1e30, 1e30, 1e30, 0), label 0: p = (1/3, 1/3, 1/3, 0) and ℓ = log 3, though 1e30 + log 3
    -- is 1e30 in f64 (e^(x − lse) would give each tied class 1); rows (N×C), the same rows
    -- class-strided (C×N storage) and an N×C×S map (the tile kernel), f64 and f32
    local T, g3 = 1e30, { -2 / 3, 1 / 3, 1 / 3, 0 }
    for _, dtype in ipairs { "f64", "f32" } do
      local tol = { rtol = dtype == "f64" and 1e-15 or 1e-7, what = dtype }
      local x = ploss.tensor({ { T, T, T, 0 }, { T, T, T, 0 } }, { dtype = dtype })
      local y = ploss.tensor({ 0, 0 }, { dtype = "i64" })
      for _, xv in ipairs { x, x:t():contiguous():t() } do
        local l, g = ploss.CrossEntropyLoss { reduction = "sum" }(xv, y)
        H.assert_close(l, 2 * math.log(3), tol)
        H.assert_close(g, { g3, g3 }, tol)
      end
      local xs = ploss.tensor({ { { T, T }, { T, T }, { T, T }, { 0, 0 } } }, { dtype = dtype })
      local l, g = ploss.CrossEntropyLoss { reduction = "sum" }(xs, ploss.tensor({ { 0, 0 } }, { dtype = "i64" }))
      H.assert_close(l, 2 * math.log(3), tol)
      H.assert_close(g, { { { g3[1], g3[1] }, { g3[2], g3[2] }, { g3[3], g3[3] }, { 0, 0 } } }, tol)
    end
  end)

  it("label smoothing conventions on the row (1e4, −1e4, 0), label 1", function()
    local x = ploss.tensor({ { 1e4, -1e4, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 1 }, { dtype = "i64" })
    local eps, Cn = 0.1, 3
    -- lse = 1e4 exactly (in f64); per-class losses lse − x_j = 0, 2e4, 1e4
    local d = { 0, 2e4, 1e4 }
    local function expect(a, b) return a * d[2] + b * (d[1] + d[2] + d[3]) end
    H.assert_close(F.cross_entropy(x, y, { label_smoothing = eps }), expect(1 - eps, eps / Cn), { rtol = 1e-12 })
    H.assert_close(F.cross_entropy(x, y, { label_smoothing = eps, smoothing_convention = "reference" }),
      18333.333333333333, { rtol = 1e-12 })
    H.assert_close(F.cross_entropy(x, y, { label_smoothing = eps, smoothing_convention = "pytorch" }), 19000, { rtol = 1e-12 })
    H.assert_close(F.cross_entropy(x, y, { label_smoothing = eps, smoothing_convention = "uniform_others" }),
      expect(1 - eps - eps / (Cn - 1), eps / (Cn - 1)), { rtol = 1e-12 })
  end)

  -- Label smoothing 1 in the 'reference' and 'uniform_others' conventions gives the label a
  -- coefficient of 0: a −inf label logit adds nothing (the limit, not 0·inf = NaN).  Samples
  -- (−inf, 0, ln 3) with label 0 and (0, ln 3, −inf) with label 2, as rows and class-strided
  -- (N×C×S).  p = (0, ¼, ¾) up to the order; with b the others' coefficient and csum = 2b:
  -- ℓ = b·(2·ln 4 − ln 3) each, ∂ℓ/∂x = csum·p − c, halved by the mean over two samples.
  it("label smoothing 1 with a -inf label logit: the finite limit, row and class-strided", function()
    local L3, INF = math.log(3), math.huge
    for _, conv in ipairs { { "reference", 1 / 3 }, { "uniform_others", 1 / 2 } } do
      local b = conv[2]
      local l_ref = b * (2 * math.log(4) - L3)
      local h = { 0, (2 * b / 4 - b) / 2, (6 * b / 4 - b) / 2 } -- sample 1's gradient
      for _, dtype in ipairs { "f64", "f32" } do
        local tol = { rtol = dtype == "f64" and 1e-14 or 1e-6, atol = 1e-7 }
        local opts = { label_smoothing = 1, smoothing_convention = conv[1] }
        local x = ploss.tensor({ { -INF, 0, L3 }, { 0, L3, -INF } }, { dtype = dtype })
        local y = ploss.tensor({ 0, 2 }, { dtype = "i64" })
        local l, g = ploss.CrossEntropyLoss(opts)(x, y)
        H.assert_close(l, l_ref, tol)
        H.assert_close(g, { { h[1], h[2], h[3] }, { h[2], h[3], h[1] } }, tol)
        local gt = g:totable() -- the masked labels' entries exactly 0 (p_y = 0: −c_y + c_y)
        assert.are.equal(0, gt[1][1])
        assert.are.equal(0, gt[2][3])
        local xs = ploss.tensor({ { { -INF, 0 }, { 0, L3 }, { L3, -INF } } }, { dtype = dtype })
        local ys = ploss.tensor({ { 0, 2 } }, { dtype = "i64" })
        l, g = ploss.CrossEntropyLoss(opts)(xs, ys)
        H.assert_close(l, l_ref, tol)
        H.assert_close(g, { { { h[1], h[2] }, { h[2], h[3] }, { h[3], h[1] } } }, tol)
        gt = g:totable()
        assert.are.equal(0, gt[1][1][1])
        assert.are.equal(0, gt[1][3][2])
        H.assert_close(ploss.CrossEntropyLoss(opts):forward(xs, ys), l_ref, tol)
      end
    end
  end)

  it("weighted mean divides by the sum of the valid samples' weights", function()
    local x = ploss.tensor({ { 1, 2, 3 }, { 3, 1, 2 }, { 0, 0, 5 } }, { dtype = "f64" })
    local y = ploss.tensor({ 2, 0, -100 }, { dtype = "i64" })
    local w = ploss.tensor({ 0.5, 2, 4 }, { dtype = "f64" })
    local lse1 = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    local lse2 = math.log(math.exp(3) + math.exp(1) + math.exp(2))
    local l = (4 * (lse1 - 3) + 0.5 * (lse2 - 3)) / (4 + 0.5)
    H.assert_close(F.cross_entropy(x, y, { weight = w }), l, { rtol = 1e-14 })
    H.assert_close(F.cross_entropy(x, y, { weight = { 0.5, 2, 4 } }), l, { rtol = 1e-6 }) -- f32 weights from a list
  end)

  it("negative class weights, as PyTorch takes them: a list gives the tensor's values; a NaN or an infinity is refused", function()
    local x = ploss.tensor({ { 1, 2, 3 }, { 3, 1, 2 } }, { dtype = "f64" })
    local y = ploss.tensor({ 2, 0 }, { dtype = "i64" })
    local lse = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    -- w = (-1, 2, 3): (3·(lse − 3) − 1·(lse − 3)) / (3 − 1)
    local l = (3 * (lse - 3) - (lse - 3)) / 2
    for _, w in ipairs { { -1, 2, 3 }, ploss.tensor({ -1, 2, 3 }, { dtype = "f64" }) } do
      H.assert_close(F.cross_entropy(x, y, { weight = w }), l, { rtol = 1e-14 })
      -- NLL: (−3·x[1][3] − (−1)·x[2][1]) / (3 − 1) = (−9 + 3) / 2
      H.assert_close(ploss.NLLLoss { weight = w }:forward(x, y), -3, { atol = 0 })
    end
    local out = ploss.empty({}, { dtype = "f64" })
    H.expect_error(function() F.cross_entropy(x, y, { weight = { 1, 0 / 0, 1 }, out = out }) end,
      "opts.weight: the weight nan of class 1 is not a finite number", out)
    H.expect_error(function() ploss.NLLLoss { weight = { 1, 1, -math.huge } }:forward(x, y) end,
      "opts.weight: the weight -inf of class 2 is not a finite number")
    -- lists with a hole, whichever border # gives (LuaJIT: 1 for the first, 4 for the second)
    local holed3, holed4 = { 1, 2, 3 }, { 1, 2, 3, 4 }
    holed3[2], holed4[2] = nil, nil
    H.expect_error(function() ploss.NLLLoss { weight = holed3 } end,
      "opts.weight: expected a list of numbers without holes, got key 3")
    H.expect_error(function() ploss.NLLLoss { weight = holed4 } end,
      "opts.weight: expected a list of numbers without holes, [2] is nil")
  end)

  it("one class: zero loss and zero gradient", function()
    local x = ploss.randn({ 4, 1 }, { dtype = "f64" })
    local y = ploss.zeros({ 4 }, { dtype = "i64" })
    local l, g = ploss.CrossEntropyLoss { label_smoothing = 0.3, smoothing_convention = "reference" }(x, y)
    assert.are.equal(0, l)
    H.assert_equal(g, { 0, 0, 0, 0 })
  end)
end)

describe("CrossEntropyLoss gradients (central differences, f64)", function()
  -- (reduction × convention/ε × weight × ignore_index × target kind × shape)
  local reductions = { "none", "mean", "sum" }
  local smoothing = { { 0, "pytorch" }, { 0.2, "pytorch" }, { 0.2, "reference" }, { 0.2, "uniform_others" } }
  local shapes = { { 3, 5 }, { 2, 3, 2, 3 } }
  local seed = 1000

  local function check(red, sm, weighted, ignore, kind, shape)
    seed = seed + 1
    H.seed(seed)
    local Cn = shape[2]
    local x = H.random_logits(shape, { std = 2 })
    local ysizes = {}
    for i = 1, #shape do if i ~= 2 then ysizes[#ysizes + 1] = shape[i] end end
    local y
    if kind == "index" then
      y = H.random_labels(ysizes, Cn, { ignore = ignore and 0.3 or 0, ignore_index = 7 })
    else
      y = ploss.rand(shape, { dtype = "f64" }) -- probabilities need not sum to 1
    end
    local opts = { reduction = red, label_smoothing = sm[1], smoothing_convention = sm[2],
                   ignore_index = kind == "index" and 7 or nil }
    if weighted then opts.weight = ploss.rand({ Cn }, { dtype = "f64", low = 0.5, high = 2 }) end
    local gout
    if red == "none" then gout = ploss.randn(ysizes, { dtype = "f64" }) end
    local label = string.format("%s ε=%g %s w=%s ign=%s %s %s", red, sm[1], sm[2], tostring(weighted),
      tostring(ignore), kind, table.concat(shape, "x"))
    local crit = ploss.CrossEntropyLoss(opts)
    crit:forward(x, y)
    local g_saved = crit:backward(x, y, gout):clone()                  -- with the saved lse
    local g_fresh = F.cross_entropy_backward(x, y, gout, opts)        -- lse recomputed
    H.gradcheck(H.loss_objective("cross_entropy", y, opts, gout), x, g_saved, { what = label .. " backward", seed = seed })
    H.assert_close(g_fresh, g_saved, { rtol = 1e-13, atol = 1e-15, what = label .. " recomputed lse" })
    -- fused: gradient of the reduced loss (of the sum for 'none') times the scale
    H.check_fused_scale("cross_entropy", x, y, opts, ysizes, label, 1e-13)
  end

  for _, kind in ipairs { "index", "prob" } do
    it("for every option combination with " .. kind .. " targets", function()
      local n = 0
      H.each(reductions, smoothing, { false, true }, kind == "index" and { false, true } or { false }, shapes,
        function(red, sm, weighted, ignore, shape)
          check(red, sm, weighted, ignore, kind, shape)
          n = n + 1
        end)
      assert.are.equal(kind == "index" and 96 or 48, n)
    end)
  end

  it("for extreme logits (±1e4 spread) the loss stays finite and the gradient exact", function()
    H.seed(77)
    local x = ploss.randn({ 4, 6 }, { dtype = "f64", std = 3000 })
    local y = H.random_labels({ 4 }, 6)
    local crit = ploss.CrossEntropyLoss { label_smoothing = 0.1 }
    local l = crit:forward(x, y)
    assert.is_true(l == l and l < math.huge)
    H.gradcheck(function(xx) return F.cross_entropy(xx, y, { label_smoothing = 0.1 }) end, x,
      crit:backward(x, y), { h = 1e-3, rtol = 1e-6, atol = 1e-9, seed = 77 })
  end)
end)

describe("CrossEntropyLoss layouts", function()
  local function compare_layout(x, xs, y, ys, label)
    for _, red in ipairs { "none", "mean", "sum" } do
      local opts = { reduction = red, label_smoothing = 0.1, weight = ploss.rand({ x:size(2) }, { dtype = "f64" }) }
      local tol = { rtol = 1e-13, atol = 1e-15, what = label .. " " .. red }
      H.assert_close(F.cross_entropy(xs, ys, opts), F.cross_entropy(x, y, opts), tol)
      local gout = red == "none" and ploss.randn(y:size(), { dtype = "f64" }) or 1.5
      H.assert_close(F.cross_entropy_backward(xs, ys, gout, opts), F.cross_entropy_backward(x, y, gout, opts), tol)
      local l1, g1 = F.cross_entropy_fused(x, y, opts)
      local l2, g2 = F.cross_entropy_fused(xs, ys, opts)
      H.assert_close(l2, l1, tol)
      H.assert_close(g2, g1, tol)
      -- a strided gradient buffer (the input's own channels-last layout)
      if xs:dim() == 4 then
        local gbuf = ploss.empty({ xs:size(1), xs:size(3), xs:size(4), xs:size(2) }, { dtype = "f64" }):permute(1, 4, 2, 3)
        local _, g3 = F.cross_entropy_fused(xs, ys, { reduction = red, label_smoothing = 0.1, weight = opts.weight, grad_input = gbuf })
        assert.are.equal(gbuf, g3)
        H.assert_close(g3, g1, tol)
      end
    end
  end

  it("channels-last N×C×H×W gives the values of the contiguous input", function()
    H.seed(5)
    local x = ploss.randn({ 2, 5, 3, 4 }, { dtype = "f64" })
    local xl = x:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) -- class stride 1
    assert.are.same({ 2, 5, 3, 4 }, xl:size())
    assert.are.same({ 60, 1, 20, 5 }, xl:stride())
    assert.is_false(xl:is_contiguous())
    local y = H.random_labels({ 2, 3, 4 }, 5, { ignore = 0.2 })
    compare_layout(x, xl, y, y, "channels-last")
    -- strided labels too (a slice of a bigger tensor: batch stride 24, samples contiguous)
    local ybig = ploss.zeros({ 2, 2, 3, 4 }, { dtype = "i64" })
    local ys = ybig:select(2, 2)
    ys:copy(y)
    assert.are.same({ 24, 4, 1 }, ys:stride())
    compare_layout(x, xl, y, ys, "channels-last, strided labels")
  end)

  it("sample dims that cannot be walked as one axis are refused with a hint", function()
    local x = ploss.randn({ 2, 5, 3, 4 }, { dtype = "f64" })
    local xt = x:transpose(3, 4) -- N×C×4×3 with transposed spatial strides
    local y = ploss.zeros({ 2, 4, 3 }, { dtype = "i64" })
    H.expect_error(function() F.cross_entropy(xt, y) end,
      { "input: the sample dims d1…dk (Lua dims 3..4; 0-based 2..3) cannot be walked as one strided axis",
        ":contiguous()", "PLOSS_ERR_LAYOUT" })
    local yt = ploss.zeros({ 2, 3, 4 }, { dtype = "i64" }):transpose(2, 3)
    H.expect_error(function() F.cross_entropy(x:transpose(3, 4):contiguous(), yt) end,
      { "target: the sample dims d1…dk (Lua dims 2..3; 0-based 1..2)", "N may have any strides" })
    -- :contiguous() is the documented way out
    assert.is_number(F.cross_entropy(xt:contiguous(), yt:contiguous()))
  end)

  it("a cropped N×C×H×W input is refused by every row loss, saying what is supported", function()
    H.seed(71)
    local D = require "ploss.description"
    local big = ploss.randn({ 2, 3, 4, 8 }, { dtype = "f64" })
    local x = big:narrow(4, 1, 6) -- W cropped from 8 to 6: H's stride 8 is not 6·1
    local y, y8 = H.random_labels({ 2, 4, 6 }, 3), H.random_labels({ 2, 4, 8 }, 2)
    local function opts(d, Cn, o) -- required class vectors (pc_softmax's priors): all ones
      o = o or {}
      for _, t in ipairs(d.tensors) do
        if t.required then o[t.name] = ploss.ones({ Cn }, { dtype = "f64" }) end
      end
      return o
    end
    local n = 0
    for _, d in ipairs(D.all()) do
      if d.shape == "rows" and d.target ~= "elementwise" and d.target ~= "index_list" then -- (the multi-label losses take N×C only)
        n = n + 1
        local lbuf, gbuf = ploss.empty({}, { dtype = "f64" }), ploss.empty({ 2, 3, 4, 6 }, { dtype = "f64" })
        H.expect_error(function()
          local l, g = F[d.name .. "_fused"](x, y, opts(d, 3, { out = lbuf, grad_input = gbuf }))
          return l, g
        end, { "input: the sample dims d1…dk (Lua dims 3..4; 0-based 2..3) cannot be walked as one strided axis, "
          .. "as the row losses need: N and C may have any strides, but each d_i's stride must equal d_(i+1)'s "
          .. "stride times d_(i+1)'s size (dims of size 1 skipped), as in a contiguous or channels-last tensor; "
          .. "a crop of d2…dk (:narrow) or a permutation of d1…dk is not: call :contiguous() on it", "PLOSS_ERR_LAYOUT" },
          lbuf, gbuf)
        -- the way out gives the loss of the same values, laid out contiguously
        local xc = x:contiguous()
        assert.are.same({ 72, 24, 6, 1 }, xc:stride())
        local l1, g1 = F[d.name .. "_fused"](xc, y, opts(d, 3))
        local copy = ploss.tensor(x:totable(), { dtype = "f64" })
        local l2, g2 = F[d.name .. "_fused"](copy, y, opts(d, 3))
        assert.is_true(l1 == l1 and l1 > 0, d.name .. ": a finite positive loss")
        H.assert_equal(l1, l2, { what = d.name })
        H.assert_equal(g1, g2, { what = d.name })
        -- a slice along C keeps d1…dk one axis: accepted as it is
        local xs = big:narrow(2, 2, 2)
        H.assert_equal(F[d.name](xs, y8, opts(d, 2, { reduction = "sum" })),
          F[d.name](xs:contiguous(), y8, opts(d, 2, { reduction = "sum" })),
          { what = d.name .. " C slice" })
      end
    end
    assert.is_true(n >= 8, "row losses found: " .. n)
  end)

  it("a transposed N×C (class-major storage) gives the values of the contiguous input", function()
    H.seed(6)
    local x = ploss.randn({ 7, 9 }, { dtype = "f64" })
    local xt = x:t():contiguous():t()
    assert.are.same({ 1, 7 }, xt:stride())
    local y = H.random_labels({ 7 }, 9)
    for _, red in ipairs { "none", "mean", "sum" } do
      local opts = { reduction = red, label_smoothing = 0.2 }
      local l1, g1 = F.cross_entropy_fused(x, y, opts)
      local l2, g2 = F.cross_entropy_fused(xt, y, opts)
      H.assert_close(l2, l1, { rtol = 1e-13 })
      H.assert_close(g2, g1, { rtol = 1e-13, atol = 1e-15 })
    end
  end)

  it("a narrowed (offset, strided) batch gives the values of its contiguous copy", function()
    H.seed(8)
    local big = ploss.randn({ 10, 12 }, { dtype = "f64" })
    local x = big:narrow(1, 3, 5):narrow(2, 2, 8)
    local y = H.random_labels({ 5 }, 8)
    local l1, g1 = F.cross_entropy_fused(x:contiguous(), y, {})
    local l2, g2 = F.cross_entropy_fused(x, y, {})
    H.assert_close(l2, l1, { rtol = 1e-14 })
    H.assert_close(g2, g1, { rtol = 1e-14, atol = 1e-16 })
  end)

  it("f16, bf16 and f32 inputs match f64 on the same (rounded) values", function()
    H.seed(9)
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local x = ploss.randn({ 6, 11 }, { dtype = dt, std = 3 })
      local y = H.random_labels({ 6 }, 11, { ignore = 0.2 })
      local x64 = x:to(nil, "f64")
      for _, red in ipairs { "none", "mean", "sum" } do
        local opts = { reduction = red, label_smoothing = 0.1 }
        local l, g = F.cross_entropy_fused(x, y, opts)
        local lr, gr = F.cross_entropy_fused(x64, y, opts)
        assert.are.equal(dt, g:dtype())
        H.assert_close(l, lr, { rtol = 1e-6, atol = 1e-7, what = dt .. " " .. red .. " loss" })
        H.assert_close(g, gr, { rtol = H.tol[dt].rtol, atol = H.tol[dt].atol, what = dt .. " " .. red .. " grad" })
      end
    end
  end)
end)

describe("CrossEntropyLoss in place and buffers", function()
  it("inplace = true writes the gradient over the input", function()
    H.seed(10)
    for _, red in ipairs { "mean", "sum", "none" } do
      local x = ploss.randn({ 5, 7 }, { dtype = "f32" })
      local y = H.random_labels({ 5 }, 7, { ignore = 0.2 })
      local l_ref, g_ref = F.cross_entropy_fused(x, y, { reduction = red, label_smoothing = 0.1 })
      local xc = x:clone()
      local crit = ploss.CrossEntropyLoss { reduction = red, label_smoothing = 0.1, inplace = true }
      assert.matches("inplace=true", tostring(crit))
      local l, g = crit(xc, y)
      assert.are.equal(xc, g)
      H.assert_close(l, l_ref, { rtol = 0 })
      H.assert_equal(xc, g_ref)
      local xc2 = x:clone()
      local l3, g3 = F.cross_entropy_fused(xc2, y, { reduction = red, label_smoothing = 0.1, inplace = true })
      assert.are.equal(xc2, g3)
      H.assert_close(l3, l_ref, { rtol = 0 })
      H.assert_equal(xc2, g_ref)
    end
  end)

  it("a gradient buffer overlapping the input is refused without inplace", function()
    local x = ploss.randn({ 4, 3 })
    local y = ploss.tensor({ 0, 1, 2, 1 }, { dtype = "i64" })
    H.expect_error(function() F.cross_entropy_fused(x, y, { grad_input = x }) end, "PLOSS_ERR_ALIAS")
    H.expect_error(function() F.cross_entropy_fused(x, y, { grad_input = x:narrow(1, 1, 4) , inplace = false}) end, "PLOSS_ERR_ALIAS")
    -- the other tensor of an overlap is named as the caller knows it (gradOutput, not grad_loss)
    local buf = ploss.randn({ 12 })
    H.expect_error(function() F.cross_entropy_backward(x, y, buf:narrow(1, 1, 4), { reduction = "none", grad_input = buf:view(4, 3) }) end,
      "cross_entropy_backward: opts.grad_input: overlaps the memory of gradOutput")
  end)

  it("reuses gradInput and loss buffers; reallocates when the shape or dtype changes", function()
    local crit = ploss.CrossEntropyLoss { reduction = "none" }
    local x = ploss.randn({ 4, 3 })
    local y = ploss.tensor({ 0, 1, 2, 1 }, { dtype = "i64" })
    local l1 = crit:forward(x, y)
    local g1 = crit:backward(x, y)
    local l2 = crit:forward(x, y)
    local g2 = crit:backward(x, y)
    assert.are.equal(l1, l2)
    assert.are.equal(g1, g2)
    local _, g3 = crit(x, y)
    assert.are.equal(g1, g3)
    local x2 = ploss.randn({ 5, 3 })
    local g4 = crit:backward(x2, ploss.tensor({ 0, 1, 2, 1, 0 }, { dtype = "i64" }))
    assert.are_not.equal(g1, g4)
    assert.are.same({ 5, 3 }, g4:size())
    local g5 = crit:backward(x2:double(), ploss.tensor({ 0, 1, 2, 1, 0 }, { dtype = "i64" }))
    assert.are.equal("f64", g5:dtype())
  end)

  it("keeps one float per sample between forward and backward", function()
    local crit = ploss.CrossEntropyLoss {}
    local x = ploss.randn({ 3, 1000, 2, 2 })
    local y = ploss.randint(0, 1000, { 3, 2, 2 })
    ploss.reset_peak_memory("cpu")
    local before = ploss.memory_stats("cpu").current_bytes
    crit:forward(x, y)
    local held = ploss.memory_stats("cpu").current_bytes - before
    -- 0-d loss (4 bytes) + lse (12 f32), each rounded to ploss_alloc's 256-byte alignment
    assert.is_true(held <= 2 * 256 + 64, "forward holds " .. held .. " bytes")
    assert.are.equal(12, crit._state:numel())
  end)

  it("backward after forward on another input recomputes the state", function()
    H.seed(11)
    local crit = ploss.CrossEntropyLoss {}
    local x1, x2 = ploss.randn({ 4, 5 }, { dtype = "f64" }), ploss.randn({ 4, 5 }, { dtype = "f64" })
    local y = H.random_labels({ 4 }, 5)
    crit:forward(x1, y)
    H.assert_close(crit:backward(x2, y), F.cross_entropy_backward(x2, y, 1, {}), { rtol = 1e-14 })
  end)

  it("options can be changed on a criterion", function()
    local x = ploss.randn({ 4, 5 }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 1, 2, 3 }, { dtype = "i64" })
    local crit = ploss.CrossEntropyLoss {}
    local m = crit:forward(x, y)
    crit.reduction = "sum"
    H.assert_close(crit:forward(x, y), 4 * m, { rtol = 1e-14 })
    assert.matches("reduction='sum'", tostring(crit))
  end)

  it("prints its options and documents the class", function()
    local crit = ploss.CrossEntropyLoss { label_smoothing = 0.1, weight = { 1, 2, 3 } }
    assert.are.equal("ploss.CrossEntropyLoss(weight={1, 2, 3}, ignore_index=-100, label_smoothing=0.1, " ..
      "smoothing_convention='pytorch', reduction='mean')", tostring(crit))
    assert.matches("cross%-entropy", tostring(ploss.CrossEntropyLoss))
    -- Torch7's updateOutput is forward (each class its own, named by it)
    local x3, y3 = ploss.randn({ 2, 3 }, { dtype = "f64", seed = 4 }), ploss.tensor({ 0, 2 }, { dtype = "i64" })
    assert.are.equal(crit:forward(x3, y3), crit:updateOutput(x3, y3))
    -- a field set to nil is its default at the next call, and printed as that
    crit.label_smoothing, crit.reduction = nil, nil
    assert.are.equal("ploss.CrossEntropyLoss(weight={1, 2, 3}, ignore_index=-100, label_smoothing=0, " ..
      "smoothing_convention='pytorch', reduction='mean')", tostring(crit))
  end)

  it("forward_tensor returns the loss without reading it", function()
    local x = ploss.randn({ 4, 5 }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 1, 2, 3 }, { dtype = "i64" })
    local crit = ploss.CrossEntropyLoss {}
    local t = crit:forward_tensor(x, y)
    assert.is_true(ploss.is_tensor(t))
    assert.are.equal(0, t:dim())
    H.assert_close(t:item(), F.cross_entropy(x, y), { rtol = 0 })
    local out = ploss.empty({}, { dtype = "f64" })
    assert.are.equal(out, F.cross_entropy(x, y, { out = out }))
  end)
end)

describe("CrossEntropyLoss with widely spread logits (the CPU's flushed far tail and subnormals)", function()
  it("terms below the smallest normal number are 0: exact loss, exactly zero gradients there", function()
    -- e^(x − m) of −100 and −800 are below f32's (and −800 below f64's) smallest normal
    for _, dtype in ipairs { "f32", "f64" } do
      local x = ploss.tensor({ { 0, -100, -800, 1, 2 } }, { dtype = dtype })
      local y = ploss.tensor({ 3 }, { dtype = "i64" })
      local l, g = F.cross_entropy_fused(x, y, { reduction = "sum" })
      local s = math.exp(-2) + math.exp(-1) + 1 + (dtype == "f64" and math.exp(-102) or 0)
      local lse = 2 + math.log(s)
      H.assert_close(l, lse - 1, { rtol = dtype == "f32" and 1e-6 or 1e-15, what = dtype })
      local gv = g:flat()
      assert.are.equal(0, gv[3], dtype .. ": the e^−802 term")
      if dtype == "f32" then assert.are.equal(0, gv[2], "f32: the e^−102 term") end
      H.assert_close({ gv[1], gv[4], gv[5] }, { math.exp(-2) / s, math.exp(-1) / s - 1, 1 / s },
        { rtol = dtype == "f32" and 1e-6 or 1e-15, what = dtype })
    end
    -- e^−87.2 (f32) and e^−708.2 (f64) are normal numbers that the softmax's exp flushes
    -- (below ~1.6e-38 and ~3.3e-308): exactly 0, where e^d would give 1.5e-38 and 2.4e-308
    for _, c in ipairs { { "f32", -87.2 }, { "f64", -708.2 } } do
      local l0, g0 = F.cross_entropy_fused(ploss.tensor({ { 0, c[2] } }, { dtype = c[1] }), ploss.tensor({ 0 }, { dtype = "i64" }),
        { reduction = "sum" })
      assert.are.equal(0, l0, c[1])
      H.assert_equal(g0, { { 0, 0 } }, { what = c[1] })
    end
    -- the CPU's losses flush subnormal results (FTZ) but read subnormal inputs as they are:
    -- BCE of a probability of 1e-40 is −log p, not the clamp's 100; MSE's d = 3e-39 − 0 is 0
    H.assert_close(F.binary_cross_entropy(ploss.tensor({ 1e-40 }), ploss.tensor({ 1 }), { reduction = "sum" }),
      -math.log(9.99994610111476e-41), { rtol = 1e-6 })
    H.assert_equal(F.mse_loss_backward(ploss.tensor({ 3e-39 }), ploss.tensor({ 0 }), 1, { reduction = "sum" }), { 0 })
    -- a NaN logit still makes its row NaN, a −∞ one still adds nothing
    local l = F.cross_entropy(ploss.tensor({ { 0, 0 / 0, -200 } }), ploss.tensor({ 0 }, { dtype = "i64" }))
    assert.is_true(l ~= l)
    local l2, g2 = F.cross_entropy_fused(ploss.tensor({ { 0, -math.huge, -200 } }), ploss.tensor({ 0 }, { dtype = "i64" }))
    assert.are.equal(0, l2)
    H.assert_equal(g2, { { 0, 0, 0 } })
  end)

  it("leaves the caller's floating-point mode as it was: subnormal arithmetic in Lua after a call", function()
    local function half(v) return v / 2 end -- not folded by the compiler
    F.cross_entropy_fused(ploss.randn({ 64, 1000 }, { std = 40 }), ploss.randint(0, 1000, { 64 }))
    assert.is_true(half(2.2250738585072014e-308) > 0, "a subnormal quotient flushed to 0 in the caller")
    assert.is_true(half(4e-323) > 0)
  end)
end)

describe("CrossEntropyLoss edge cases and bad input", function()
  local function xy(N, Cn, dtype)
    return ploss.randn({ N, Cn }, { dtype = dtype or "f32" }), ploss.randint(0, Cn, { N })
  end

  -- run the three passes with poisoned output buffers, expecting the same error
  local function all_passes_fail(x, y, opts, fragment)
    local red = opts.reduction or "mean"
    local lsz = red == "none" and y:size() or {}
    local ldt = x:dtype() == "f64" and "f64" or "f32"
    local ok_x = ploss.is_tensor(x) and x:dtype() ~= "i64"
    local loss = ploss.empty(lsz, { dtype = ldt })
    local grad = ploss.empty(x:size(), { dtype = ok_x and x:dtype() or "f32" })
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.out = loss
    H.expect_error(function() F.cross_entropy(x, y, o) end, fragment, loss)
    o.grad_input = grad
    H.expect_error(function() F.cross_entropy_fused(x, y, o) end, fragment, loss, grad)
    o.out = nil
    local gl = red == "none" and ploss.ones(lsz, { dtype = ldt }) or 1
    H.expect_error(function() F.cross_entropy_backward(x, y, gl, o) end, fragment, grad)
    -- and through a criterion
    local c = {}
    for k, v in pairs(opts) do c[k] = v end
    -- a bad option value is refused when the criterion is made
    local made, crit = pcall(ploss.CrossEntropyLoss, c)
    if not made then
      for _, f in ipairs(type(fragment) == "table" and fragment or { fragment }) do
        assert.is_truthy(tostring(crit):find(f, 1, true), tostring(crit) .. " does not contain " .. f)
      end
      return
    end
    H.expect_error(function() crit:forward(x, y) end, fragment)
    H.expect_error(function() crit:backward(x, y) end, fragment)
    H.expect_error(function() crit(x, y) end, fragment)
  end

  it("wrong target shape", function()
    local x = ploss.randn(4, 5)
    all_passes_fail(x, ploss.randint(0, 5, { 3 }), {}, { "target: expected shape [4]", "got i64[3] on cpu", "PLOSS_ERR_SHAPE" })
    all_passes_fail(x, ploss.randint(0, 5, { 4, 1 }), {}, "target: expected shape [4]")
    local x4 = ploss.randn(2, 3, 4, 5)
    all_passes_fail(x4, ploss.randint(0, 3, { 2, 5, 4 }), {}, "target: expected shape [2, 4, 5]")
  end)

  it("wrong dtypes: float labels of the index shape, integer logits, u8 labels", function()
    local x = ploss.randn(4, 5)
    all_passes_fail(x, ploss.tensor({ 0, 1, 2, 3 }), {}, { "target: class indices must be i64 or i32, got f32 of the sample shape", "target:long()" })
    all_passes_fail(ploss.randint(0, 5, { 4, 5 }), ploss.randint(0, 5, { 4 }), {},
      { "input: expected logits of dtype f32, f16, bf16 or f64, got i64", "PLOSS_ERR_DTYPE" })
    all_passes_fail(x, ploss.randint(0, 5, { 4 }, { dtype = "u8" }), {},
      "target: expected class indices (i64 or i32) or probabilities (float), got u8 (convert them, e.g. target:long())")
    -- N labels against transposed (C×N) logits: the input is named
    all_passes_fail(x:t(), ploss.randint(0, 5, { 4 }), {},
      "target: expected shape [5] (one label per row of the input), got i64[4]: is the input transposed? it is " ..
      "rows × classes (5 × 4 here)")
  end)

  it("labels >= C or < 0 that are not ignore_index", function()
    local x = ploss.randn(4, 5)
    all_passes_fail(x, ploss.tensor({ 0, 5, 1, 2 }, { dtype = "i64" }), {},
      { "target: class index 5 at sample (n = 1, s = 0) is outside [0, 5) and is not ignore_index (-100)", "PLOSS_ERR_INVALID_LABEL",
        "(class indices are 0-based: Torch7's 1-based labels need target - 1, in Lua target:add_(-1))" }) -- an index of exactly C
    all_passes_fail(x, ploss.tensor({ 0, 1, -1, 2 }, { dtype = "i32" }), {}, "class index -1 at sample (n = 2, s = 0)")
    local ok, msg = pcall(F.cross_entropy, x, ploss.tensor({ 0, 6, 1, 2 }, { dtype = "i64" }))
    assert.is_false(ok)
    assert.matches("class index 6", msg)
    assert.is_nil(msg:find("Torch7", 1, true)) -- beyond C: no hint
    all_passes_fail(x, ploss.tensor({ 0, 1, -100, 2 }, { dtype = "i64" }), { ignore_index = 255 }, "class index -100")
    local x4 = ploss.randn(2, 3, 2, 2)
    local y4 = ploss.zeros({ 2, 2, 2 }, { dtype = "i64" })
    y4:view(8)[7] = 3
    all_passes_fail(x4, y4, {}, { "class index 3 at sample (n = 1, s = 2)",
      "n and s are 0-based, s counting the positions d1⋯dk in row-major order" })
  end)

  it("NaN in an ignored row does not leak into the loss or the gradient", function()
    for _, red in ipairs { "mean", "sum", "none" } do
      for _, dt in ipairs { "f32", "f64", "f16", "bf16" } do
        local x = ploss.randn({ 4, 6 }, { dtype = dt })
        x[3] = 0 / 0
        x:select(1, 1):narrow(1, 2, 1):fill(1 / 0)
        local y = ploss.tensor({ 255, 1, 255, 3 }, { dtype = "i64" })
        local opts = { reduction = red, ignore_index = 255, label_smoothing = 0.1, weight = { 1, 2, 3, 4, 5, 6 } }
        local l, g = F.cross_entropy_fused(x, y, opts)
        for _, v in ipairs(H.values(l)) do assert.is_true(v == v and math.abs(v) < math.huge, red .. " " .. dt) end
        local gv = g:flat()
        for i, v in ipairs(gv) do
          assert.is_true(v == v and math.abs(v) < math.huge, red .. " " .. dt .. " grad " .. i)
          if i <= 6 or (i > 12 and i <= 18) then assert.are.equal(0, v) end
        end
        local crit = ploss.CrossEntropyLoss(opts)
        local lf = crit:forward(x, y)
        for _, v in ipairs(H.values(lf)) do assert.is_true(v == v) end
        for _, v in ipairs(crit:backward(x, y):flat()) do assert.is_true(v == v) end
      end
    end
  end)

  it("weight of the wrong length or dtype", function()
    local x, y = xy(4, 5)
    all_passes_fail(x, y, { weight = ploss.ones(4) }, { "weight: expected shape [5] (one weight per class)", "got f32[4]" })
    all_passes_fail(x, y, { weight = ploss.ones(1, 5) }, "weight: expected shape [5]")
    all_passes_fail(x, y, { weight = ploss.ones({ 5 }, { dtype = "i64" }) }, "weight: expected a float dtype, got i64")
  end)

  it("label smoothing outside [0, 1]", function()
    local x, y = xy(4, 5)
    all_passes_fail(x, y, { label_smoothing = 1.5 }, "opts.label_smoothing: 1.5 is not a finite number in [0, 1]")
    all_passes_fail(x, y, { label_smoothing = -0.1 }, "opts.label_smoothing: -0.1 is not a finite number in [0, 1]")
    all_passes_fail(x, y, { label_smoothing = NAN }, "opts.label_smoothing: ")
    -- the ends are accepted
    assert.is_number(F.cross_entropy(x, y, { label_smoothing = 1 }))
    assert.is_number(F.cross_entropy(x, y, { label_smoothing = 0 }))
  end)

  it("uniform_others with one class", function()
    local x = ploss.randn(4, 1)
    local y = ploss.zeros({ 4 }, { dtype = "i64" })
    all_passes_fail(x, y, { label_smoothing = 0.1, smoothing_convention = "uniform_others" },
      "uniform_others (ε/(C−1)) is undefined for C = 1")
  end)

  it("bad option names and values are Lua errors at the caller's line", function()
    local err = H.expect_error(function() ploss.CrossEntropyLoss { reduction = "avg" } end,
      "reduction: 'avg' is not one of 'none', 'mean', 'sum'")
    assert.matches("cross_entropy_spec%.lua:%d+:", err)
    H.expect_error(function() ploss.CrossEntropyLoss { smoothing_convention = "torch" } end, "smoothing_convention: 'torch'")
    H.expect_error(function() ploss.CrossEntropyLoss { ignore_idx = 3 } end,
      "unknown option 'ignore_idx' (known: ignore_index, inplace, label_smoothing, reduction, smoothing_convention, weight)")
    H.expect_error(function() ploss.CrossEntropyLoss { ignore_index = 2.5 } end, "ignore_index: expected an integer")
    H.expect_error(function() ploss.CrossEntropyLoss { label_smoothing = "0.1" } end, "label_smoothing: expected a number")
    H.expect_error(function() ploss.CrossEntropyLoss {}:forward({ 1, 2 }, ploss.randn(2)) end, "input: expected a ploss tensor")
  end)

  it("wrong output buffers and upstream gradients", function()
    local x, y = xy(4, 5)
    local loss64 = ploss.empty({}, { dtype = "f64" })
    H.expect_error(function() F.cross_entropy(x, y, { out = loss64 }) end, "opts.out: expected f32, got f64", loss64)
    local g16 = ploss.empty({ 4, 5 }, { dtype = "f16" })
    H.expect_error(function() F.cross_entropy_fused(x, y, { grad_input = g16 }) end, "grad_input: expected f32, got f16", g16)
    local g = ploss.empty({ 4, 6 })
    H.expect_error(function() F.cross_entropy_fused(x, y, { grad_input = g }) end, "grad_input: expected shape [4, 5] (the input's shape)", g)
    local crit = ploss.CrossEntropyLoss { reduction = "none" }
    H.expect_error(function() crit:backward(x, y, ploss.ones(3)) end, "gradOutput: expected shape [4]")
    H.expect_error(function() crit:backward(x, y, ploss.ones({ 4 }, { dtype = "f16" })) end, "gradOutput: expected f32 or f64, got f16")
    local crit2 = ploss.CrossEntropyLoss {}
    H.expect_error(function() crit2:backward(x, y, ploss.ones(2)) end, "gradOutput: expected one element")
    H.expect_error(function() crit2:backward(x, y, "1") end, "gradOutput: expected a number or a tensor")
    local expanded = ploss.zeros(4, 1):expand(4, 5)
    H.expect_error(function() F.cross_entropy_fused(x, y, { grad_input = expanded }) end, "grad_input")
  end)

  it("mixed devices are refused (with a GPU; the CUDA spec covers the rest)", function()
    if not ploss.cuda_available() then
      pending("no CUDA device")
      return
    end
    local x, y = xy(4, 5)
    local loss = ploss.empty({})
    H.expect_error(function() F.cross_entropy(x, y:to("cuda"), { out = loss }) end,
      { "target: expected a tensor on cpu (the context's device)", "PLOSS_ERR_DEVICE" }, loss)
    H.expect_error(function() F.cross_entropy(x:to("cuda"), y) end, "target: expected a tensor on cuda:0")
  end)

  it("a freed tensor is refused", function()
    local x, y = xy(4, 5)
    x:free()
    H.expect_error(function() F.cross_entropy(x, y) end, "storage was freed")
  end)

  it("empty batch: mean is NaN, sum is 0, none is empty; gradients are empty", function()
    for _, dt in ipairs { "f32", "f64" } do
      local x = ploss.empty({ 0, 5 }, { dtype = dt })
      local y = ploss.empty({ 0 }, { dtype = "i64" })
      local m = F.cross_entropy(x, y)
      assert.is_true(m ~= m)
      assert.are.equal(0, F.cross_entropy(x, y, { reduction = "sum" }))
      local n = F.cross_entropy(x, y, { reduction = "none" })
      assert.are.same({ 0 }, n:size())
      local crit = ploss.CrossEntropyLoss {}
      local l, g = crit(x, y)
      assert.is_true(l ~= l)
      assert.are.same({ 0, 5 }, g:size())
      assert.are.same({ 0, 5 }, crit:backward(x, y):size())
      -- N×C×H×W with an empty spatial dim
      local x4 = ploss.empty({ 2, 3, 0, 4 }, { dtype = dt })
      local y4 = ploss.empty({ 2, 0, 4 }, { dtype = "i64" })
      local m4 = F.cross_entropy(x4, y4)
      assert.is_true(m4 ~= m4)
      assert.are.equal(0, F.cross_entropy(x4, y4, { reduction = "sum" }))
      -- the empty dim last: its strides (those of size 1) cannot be walked as one axis,
      -- and need not be; the focal and NLL rows take the same check
      local x5 = ploss.empty({ 2, 3, 2, 0 }, { dtype = dt })
      local y5 = ploss.empty({ 2, 2, 0 }, { dtype = "i64" })
      local l5, g5 = ploss.CrossEntropyLoss { reduction = "sum" }(x5, y5)
      assert.are.equal(0, l5)
      assert.are.same({ 2, 3, 2, 0 }, g5:size())
      assert.is_true(F.cross_entropy(x5, y5) ~= F.cross_entropy(x5, y5))
      assert.are.equal(0, ploss.SoftmaxFocalLoss { reduction = "sum" }:forward(x5, y5))
      assert.are.equal(0, ploss.NLLLoss { reduction = "sum" }:forward(x5, y5))
    end
  end)

  it("all targets ignored: NaN mean, 0 sum, zeros for none; an exactly zero gradient", function()
    for _, dt in ipairs { "f32", "f64", "f16", "bf16" } do
      local x = ploss.randn({ 3, 4 }, { dtype = dt })
      local y = ploss.full({ 3 }, -100, { dtype = "i64" })
      for _, red in ipairs { "mean", "sum", "none" } do
        local opts = { reduction = red, label_smoothing = 0.2, weight = { 1, 2, 3, 4 } }
        local crit = ploss.CrossEntropyLoss(opts)
        local l = crit:forward(x, y)
        if red == "mean" then assert.is_true(l ~= l)
        elseif red == "sum" then assert.are.equal(0, l)
        else H.assert_equal(l, { 0, 0, 0 }) end
        for _, v in ipairs(crit:backward(x, y):flat()) do assert.are.equal(0, v) end
        local _, g = crit(x, y)
        for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
      end
    end
  end)

  it("class weights of the valid samples summing to 0: NaN mean (with label smoothing too), zero gradient", function()
    -- PyTorch: Σ w_y = 0 gives 0/0 = NaN, and with smoothing its NLL part is still 0/0 (the
    -- smoothing part alone would be positive/0 = inf)
    local x = ploss.tensor({ { 0.2, -1, 0.5 }, { 1.5, 0.3, -2 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 0 }, { dtype = "i64" })
    for _, ls in ipairs { 0, 0.1 } do
      for _, dt in ipairs { "f64", "f32", "bf16" } do
        local crit = ploss.CrossEntropyLoss { weight = { 0, 1, 1 }, label_smoothing = ls }
        local l, g = crit(x:type(dt), y)
        assert.is_true(l ~= l, "loss " .. tostring(l))
        for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
        -- the sum is the weighted smoothing term alone: finite
        local s = ploss.CrossEntropyLoss { weight = { 0, 1, 1 }, label_smoothing = ls, reduction = "sum" }:forward(x:type(dt), y)
        local want = 0
        for i, row in ipairs(x:totable()) do
          local m = math.max(row[1], row[2], row[3])
          local z = math.log(math.exp(row[1] - m) + math.exp(row[2] - m) + math.exp(row[3] - m)) + m
          for c = 2, 3 do want = want + ls / 3 * (z - row[c]) end
        end
        H.assert_close({ s }, { want }, { rtol = dt == "bf16" and 1e-2 or 1e-6, what = "sum, smoothing " .. ls })
      end
    end
  end)

  it("takes one sample of C classes (PyTorch's unbatched form): its 1×C view's bits, a 0-d 'none' loss", function()
    local x = ploss.tensor({ 0.2, -1, 0.5, 1.5 }, { dtype = "f64" })
    local idx = ploss.tensor(2, { dtype = "i64" })
    local probs = ploss.tensor({ 0.1, 0.2, 0.3, 0.4 }, { dtype = "f64" })
    local cases = {
      { ploss.CrossEntropyLoss { label_smoothing = 0.1, weight = { 1, 2, 3, 4 } }, idx },
      { ploss.CrossEntropyLoss { label_smoothing = 0.1 }, probs },
      { ploss.NLLLoss { weight = { 1, 2, 3, 4 } }, idx },
      { ploss.SoftmaxFocalLoss { gamma = 2 }, idx },
      { ploss.MultiMarginLoss { p = 2 }, idx },
      { ploss.TaylorCrossEntropyLoss {}, idx },
      { ploss.MultiLabelSoftMarginLoss {}, ploss.tensor({ 1, 0, 1, 1 }, { dtype = "f64" }) },
      { ploss.MultiLabelMarginLoss {}, ploss.tensor({ 3, 0, -1, 0 }, { dtype = "i64" }) },
      { ploss.LargeMarginSoftmaxLoss {}, idx }, -- a state of three values per sample
      { ploss.DualFocalLoss {}, idx },
    }
    -- by hand, the first: ε = 0.1, w = (1, 2, 3, 4), y = 2: (1 − ε)·w_y·(lse − x_y) + ε/C·Σ w_c·(lse − x_c), over w_y
    local lse = 0
    for _, v in ipairs(x:totable()) do lse = lse + math.exp(v) end
    lse = math.log(lse)
    local X = x:totable()
    local want = 0.9 * 3 * (lse - X[3])
    for c = 1, 4 do want = want + 0.1 / 4 * c * (lse - X[c]) end
    H.assert_close({ cases[1][1]:forward(x, idx) }, { want / 3 }, { rtol = 1e-14 })
    for _, case in ipairs(cases) do
      local crit, y = case[1], case[2]
      local yb = y:dim() == 0 and ploss.tensor({ y:item() }, { dtype = y:dtype() }) or y:view(1, 4)
      local what = tostring(crit)
      local l, g = crit(x, y)
      local lb, gb = crit(x:view(1, 4), yb)
      assert.are.equal(lb, l, what)
      assert.are.same({ 4 }, g:size(), what)
      H.assert_equal(g, gb:view(4))
      crit.reduction = "none"
      local xb = x:view(1, 4) -- one view for both calls: its backward reads the saved state
      local lnb = crit:forward(xb, yb)
      local gnb = crit:backward(xb, yb, ploss.tensor({ 1.5 }, { dtype = "f64" }))
      local ln = crit:forward(x, y)
      assert.are.equal(0, ln:dim(), what)
      assert.are.equal(lnb:totable()[1], ln:item(), what)
      -- backward from the saved state (where the loss keeps one) with a 0-d upstream gradient
      local gn = crit:backward(x, y, ploss.tensor(1.5, { dtype = "f64" }))
      H.assert_equal(gn, gnb:view(4), { what = what })
    end
    -- a batch's target for one sample is named
    H.expect_error(function() local r = ploss.CrossEntropyLoss {}(x, ploss.tensor({ 2 }, { dtype = "i64" })) return r end,
      "target: expected a 0-d tensor (a class index; the input is one sample of 4 classes, PyTorch's unbatched form), got i64[1]")
    H.expect_error(function() local r = ploss.CrossEntropyLoss {}(x, ploss.tensor({ 0.5, 0.5 }, { dtype = "f64" })) return r end,
      "target: expected [4] (one probability per class; the input is one sample of 4 classes")
    -- labels passed as the input (or input and target swapped): the input's dtype is named,
    -- not the target's shape, as in the batched form
    local labels = ploss.tensor({ 1, 0, 3, 2 }, { dtype = "i64" })
    for _, f in ipairs { "cross_entropy", "nll_loss" } do
      H.expect_error(function() local r = F[f](labels, labels) return r end,
        f .. ": input: expected logits of dtype f32, f16, bf16 or f64, got i64")
    end
    -- a 0-d input: the ranks taken, the unbatched one among them
    H.expect_error(function() local r = ploss.CrossEntropyLoss {}(ploss.tensor(2.0), ploss.tensor(0, { dtype = "i64" })) return r end,
      "input: expected rank >= 1 (C values: one sample, PyTorch's unbatched form; N×C; or N×C×d1×…×dk), got f32[]")
    -- in place: the gradient over the C logits themselves, the bits of the 1×C view's
    local xi, xbi = x:clone(), x:clone():view(1, 4)
    local li, gi = F.cross_entropy_fused(xi, idx, { inplace = true })
    local lbi, gbi = F.cross_entropy_fused(xbi, ploss.tensor({ 2 }, { dtype = "i64" }), { inplace = true })
    assert.are.equal(xi, gi)
    assert.are.equal(lbi, li)
    H.assert_equal(gi, gbi:view(4))
    -- the buffers of one sample are named with the caller's shapes, not the 1×C batch's
    H.expect_error(function() F.cross_entropy_fused(x, idx, { grad_input = ploss.empty({ 3 }, { dtype = "f64" }) }) end,
      "opts.grad_input: expected [4] (the input's shape), got f64[3]")
    H.expect_error(function() F.cross_entropy_fused(x, idx, { grad_input = ploss.empty({ 1, 4 }, { dtype = "f64" }) }) end,
      "opts.grad_input: expected [4] (the input's shape), got f64[1, 4]")
    H.expect_error(function() F.cross_entropy(x, idx, { reduction = "none", out = ploss.empty({ 1 }, { dtype = "f64" }) }) end,
      "opts.out: expected a 0-d tensor (the 'none' loss of one sample), got f64[1]")
    H.expect_error(function() F.cross_entropy(ploss.empty({ 0 }, { dtype = "f64" }), idx) end, "input")
  end)

  it("names a functional buffer that is not a tensor (opts.out, opts.grad_input)", function()
    local x, y = xy(3, 4)
    -- false is none given ({out = reuse and buf})
    local l0, g0 = F.cross_entropy_fused(x, y)
    local l1, g1 = F.cross_entropy_fused(x, y, { out = false, grad_input = false })
    assert.are.equal(l0, l1)
    H.assert_equal(g1, g0)
    for _, bad in ipairs { {}, "a", true, 5 } do
      H.expect_error(function() F.cross_entropy(x, y, { out = bad }) end,
        "cross_entropy: opts.out: expected a ploss tensor (a buffer to write into)")
      H.expect_error(function() F.cross_entropy_fused(x, y, { grad_input = bad }) end,
        "cross_entropy_fused: opts.grad_input: expected a ploss tensor")
    end
  end)

  it("probability targets refuse an ignore_index that is not negative, as PyTorch", function()
    local x = ploss.randn(2, 3)
    local p = ploss.tensor({ { 0.2, 0.3, 0.5 }, { 1, 0, 0 } })
    all_passes_fail(x, p, { ignore_index = 1 },
      { "opts.ignore_index: 1 is not negative, but the target holds probabilities", "PLOSS_ERR_INVALID_ARGUMENT" })
    all_passes_fail(x, p, { ignore_index = 0 }, "opts.ignore_index: 0 is not negative")
    all_passes_fail(x, p, { ignore_index = 255 }, "opts.ignore_index: 255 is not negative") -- no class of 3 either
    -- a negative one (the default -100, or -1) is no class: accepted
    H.assert_close({ F.cross_entropy(x, p, { ignore_index = -1 }) }, { F.cross_entropy(x, p) }, { rtol = 0, atol = 0 })
  end)

  it("errors point at the line of the call", function()
    local x, y = xy(4, 5)
    local crit = ploss.CrossEntropyLoss {}
    local ok, err = pcall(function()
      local l = crit:forward(x, ploss.randint(0, 5, { 3 })); return l -- this line
    end)
    assert.is_false(ok)
    local line = debug.getinfo(1, "l").currentline - 3
    assert.matches("cross_entropy_spec%.lua:" .. line .. ": ploss: ", err)
    ok, err = pcall(function()
      local l = F.cross_entropy(x, y, { label_smoothing = 2 }); return l
    end)
    line = debug.getinfo(1, "l").currentline - 2
    assert.matches("cross_entropy_spec%.lua:" .. line .. ": ploss: cross_entropy: opts.label_smoothing", err)
  end)
end)
