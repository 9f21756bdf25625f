-- Focal family on CUDA (suite 'cuda'; spec/run.lua exits 77 before this file without a GPU).
-- CUDA against the CPU backend on the same dtype-rounded inputs, in f32/f16/bf16 (fp32
-- accumulation on the GPU, f64 on the CPU; tolerances H.CUDA_TOL) and f64, for every kernel
-- shape: the elementwise sigmoid kernels (the vectorised fast kernel with its tails, the
-- general kernel for misaligned / strided / broadcast / mixed-dtype cases, many blocks); softmax
-- and dual focal thread-per-sample (C < 32 and N×C×d…), warp-per-row, block-per-row with
-- the row cached in shared memory and without (rows above the shared-memory limit),
-- channels-last.  Also: bitwise determinism, extreme logits, invalid labels through the
-- context's error slot, nothing written on validation errors, empty and all-ignored input.
-- PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run of its logic.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()
local ON_GPU = DEV ~= "cpu"

local DTYPES = { "f32", "f16", "bf16", "f64" }
local REDUCTIONS = { "none", "mean", "sum" }

local function ldtype(dtype) return dtype == "f64" and "f64" or "f32" end

local TOL = H.CUDA_TOL -- against the CPU backend on the same rounded inputs

local close = H.assert_close_scaled

-- Run `name` fused, forward and backward on CPU and CUDA with the same dtype-rounded
-- inputs; compare.  x64: f64 CPU logits; y: target (f64 probabilities or i64 labels).
local function compare(name, x64, y, opts, dtype, label, layout)
  local xc = x64:to("cpu", dtype)
  local yc = y:dtype() == "i64" and y or y:to("cpu", dtype)
  local xg, yg = xc:to(DEV), yc:to(DEV)
  if layout then xg, yg = layout(xg, yg) end
  local o_cpu, o_gpu = opts, H.options_on(opts, DEV)
  local what = label .. " " .. dtype .. " " .. (opts.reduction or "mean")
  local T = TOL[dtype]
  local lc, gc = F[name .. "_fused"](xc, yc, o_cpu)
  local lg, gg = F[name .. "_fused"](xg, yg, o_gpu)
  assert.are.equal(xg:device(), gg:device())
  assert.are.equal(dtype, gg:dtype())
  close(lg, lc, T.loss, 0, what .. " fused loss")
  close(gg, gc, T.grad, T.floor, what .. " fused grad")
  -- forward + backward (no saved state) with a non-uniform upstream gradient for 'none'
  local gout_c, gout_g = 0.7, 0.7
  if opts.reduction == "none" then
    local lsz = ploss.is_tensor(lc) and lc:size() or {}
    gout_c = ploss.randn(lsz, { dtype = ldtype(dtype) })
    gout_g = gout_c:to(DEV)
  end
  close(F[name](xg, yg, o_gpu), lc, T.loss, 0, what .. " forward")
  close(F[name .. "_backward"](xg, yg, gout_g, o_gpu), F[name .. "_backward"](xc, yc, gout_c, o_cpu), T.grad,
    T.floor, what .. " backward")
  -- determinism: the same call twice gives bitwise the same loss and gradient
  local lg2, gg2 = F[name .. "_fused"](xg, yg, o_gpu)
  H.assert_equal(lg2, lg, { what = what .. " repeat loss" })
  H.assert_equal(gg2, gg, { what = what .. " repeat grad" })
end

local sample_sizes = H.sample_sizes

describe("CUDA sigmoid family vs CPU", function()
  local cases = {
    { "dense 3×5×7×11", { 3, 5, 7, 11 } },
    { "one element", { 1, 1 } },
  }
  for _, dtype in ipairs(DTYPES) do
    it("BCE with logits and sigmoid focal in " .. dtype, function()
      H.seed(100)
      for _, c in ipairs(cases) do
        local label, shape = c[1], c[2]
        local x = H.random_logits(shape, { std = 3 })
        local yb = ploss.rand(shape, { dtype = "f64" })
        for _, red in ipairs(REDUCTIONS) do
          compare("binary_cross_entropy_with_logits", x, yb, { reduction = red }, dtype, "bce " .. label)
          if #shape >= 2 then
            local Cn = shape[2]
            compare("binary_cross_entropy_with_logits", x, yb, { reduction = red,
              pos_weight = ploss.rand({ Cn }, { dtype = "f64", low = 0.5, high = 3 }),
              weight = ploss.rand(shape, { dtype = "f64" }) }, dtype, "bce weighted " .. label)
          end
          for _, conv in ipairs { "torchvision", "reference" } do
            for _, gamma in ipairs { 0, 0.5, 2 } do
              compare("sigmoid_focal", x, yb, { reduction = red, convention = conv, gamma = gamma }, dtype,
                string.format("focal %s γ=%g %s", conv, gamma, label))
            end
          end
          -- targets in [-1, 2]: 1 − p_t < 0 on some elements, where torchvision's form with an
          -- integer γ still has its γ term
          local yo = ploss.rand(shape, { dtype = "f64", low = -1, high = 2 })
          compare("sigmoid_focal", x, yo, { reduction = red, gamma = 2 }, dtype, "focal targets outside [0, 1] " .. label)
        end
      end
    end)

    it("many blocks (2^18+7 elements) in " .. dtype, function()
      H.seed(102)
      local x = H.random_logits({ 2 ^ 18 + 7 }, { std = 3 })
      local yb = ploss.rand({ 2 ^ 18 + 7 }, { dtype = "f64" })
      for _, red in ipairs(REDUCTIONS) do
        compare("binary_cross_entropy_with_logits", x, yb, { reduction = red }, dtype, "bce 2^18+7")
        compare("sigmoid_focal", x, yb, { reduction = red }, dtype, "focal 2^18+7")
        compare("sigmoid_focal", x, yb, { reduction = red, convention = "reference", gamma = 0.5 }, dtype,
          "focal reference γ=0.5 2^18+7")
      end
    end)

    it("strided inputs and broadcast weights in " .. dtype, function()
      H.seed(101)
      local x = H.random_logits({ 2, 6, 5, 4 }, { std = 2 })
      local yb = ploss.rand({ 2, 6, 5, 4 }, { dtype = "f64" })
      local perm = function(xg, yg)
        return xg:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3), yg
      end
      for _, red in ipairs(REDUCTIONS) do
        compare("sigmoid_focal", x, yb, { reduction = red }, dtype, "focal channels-last input", perm)
        compare("binary_cross_entropy_with_logits", x, yb, { reduction = red,
          weight = ploss.rand({ 2, 1, 5, 4 }, { dtype = "f64" }), pos_weight = ploss.rand({ 6 }, { dtype = "f64" }) },
          dtype, "bce broadcast weights", perm)
        -- PyTorch's broadcasting: trailing dims aligned, lower ranks padded with 1s
        compare("binary_cross_entropy_with_logits", x, yb, { reduction = red,
          weight = ploss.rand({ 6, 1, 1 }, { dtype = "f64" }), pos_weight = ploss.rand({ 5, 4 }, { dtype = "f64" }) },
          dtype, "bce weight [C, 1, 1] pos_weight [H, W]", perm)
        compare("binary_cross_entropy_with_logits", x, yb, { reduction = red,
          weight = ploss.rand({ 1, 4 }, { dtype = "f64" }), pos_weight = ploss.rand({ 4 }, { dtype = "f64" }) },
          dtype, "bce weight [1, W] pos_weight [W]")
      end
    end)
  end
end)

describe("CUDA sigmoid family: more elements than the capped grid", function()
  it("2^21+77 elements (a grid-stride loop of several steps), f32", function()
    H.seed(103)
    local x = H.random_logits({ 2 ^ 21 + 77 }, { std = 3 })
    local yb = ploss.rand({ 2 ^ 21 + 77 }, { dtype = "f64" })
    for _, red in ipairs { "none", "mean" } do
      compare("sigmoid_focal", x, yb, { reduction = red }, "f32", "focal 2^21+77")
    end
  end)
end)

describe("CUDA sigmoid family: vectorised fast kernel and its fallbacks", function()
  -- kernels/elementwise/sigmoid.cu takes a fast kernel for dense, unit-stride, 16-byte aligned input,
  -- target and gradient of one dtype without weight / pos_weight (whole 16-byte vectors:
  -- 4 f32, 8 f16/bf16, 2 f64, then a scalar tail of numel % width elements), with γ = 2
  -- compile-time and other γ through the general per-element code.  Views that start one
  -- element into their buffer (byte_offset = element size: a 16-byte load would be
  -- misaligned), a target of another dtype, and backward with reduction 'none' take the
  -- general kernel.  compare() runs fused, forward and backward, and the repeat check.
  local function shifted(t)
    local n = t:numel()
    local buf = ploss.empty({ n + 1 }, { dtype = t:dtype(), device = t:device() })
    local v = buf:narrow(1, 2, n)
    v:copy(t)
    return v
  end
  local layouts = {
    { "aligned" },
    { "input one element off", function(xg, yg) return shifted(xg), yg end },
    { "target one element off", function(xg, yg) return xg, shifted(yg) end },
    { "both one element off", function(xg, yg) return shifted(xg), shifted(yg) end },
    { "target in f64", function(xg, yg) return xg, yg:to(DEV, "f64") end },
  }
  local function binary(n)
    local v = ploss.rand({ n }, { dtype = "f64" }):flat()
    for i = 1, n do v[i] = v[i] < 0.5 and 0 or 1 end
    return ploss.tensor(v, { dtype = "f64" })
  end
  -- [name, opts, label]
  local variants = {
    { "binary_cross_entropy_with_logits", {}, "bce" },
    { "sigmoid_focal", {}, "focal torchvision γ=2" },
    { "sigmoid_focal", { gamma = 0.5 }, "focal torchvision γ=0.5" },
    { "sigmoid_focal", { gamma = 1, alpha = -1 }, "focal torchvision γ=1 no α" },
    { "sigmoid_focal", { convention = "reference" }, "focal reference γ=2" },
    { "sigmoid_focal", { convention = "reference", gamma = 0.5 }, "focal reference γ=0.5" },
  }
  local function run_variants(x, y, dtype, label, layout, reductions)
    for _, red in ipairs(reductions or REDUCTIONS) do
      for _, v in ipairs(variants) do
        local o = { reduction = red }
        for k, val in pairs(v[2]) do o[k] = val end
        compare(v[1], x, y, o, dtype, v[3] .. " " .. label, layout)
      end
    end
  end

  for _, dtype in ipairs(DTYPES) do
    it("numel 1, 3, 9, 17, 1003, 4099 (vector tails; many blocks: the 2^18+7 case above) with soft and binary targets in " .. dtype, function()
      H.seed(110)
      for _, n in ipairs { 1, 3, 9, 17, 1003, 4099 } do
        local x = H.random_logits({ n }, { std = 4 })
        run_variants(x, ploss.rand({ n }, { dtype = "f64" }), dtype, "soft n=" .. n)
        run_variants(x, binary(n), dtype, "binary n=" .. n)
      end
    end)

    it("misaligned views and a target of another dtype take the general kernel in " .. dtype, function()
      H.seed(111)
      for _, n in ipairs { 9, 1003 } do
        local x = H.random_logits({ n }, { std = 4 })
        local y = ploss.rand({ n }, { dtype = "f64" })
        for i = 2, #layouts do
          run_variants(x, y, dtype, layouts[i][1] .. " n=" .. n, layouts[i][2])
        end
      end
    end)
  end

  it("a second grid-stride step on the fast kernel: 2^23+3 elements in f64 (2^22+1 vectors of 2, one step covers 8192·256·2)", function()
    H.seed(112)
    local n = 2 ^ 23 + 3
    local x = H.random_logits({ n }, { std = 3 })
    local y = ploss.rand({ n }, { dtype = "f64" })
    compare("sigmoid_focal", x, y, { reduction = "mean" }, "f64", "focal 2^23+3")
  end)
end)

describe("CUDA softmax focal family vs CPU", function()
  -- [label, shape, big]: big shapes run γ = 2 only
  local shapes = {
    { "thread per sample, N×C, C < 32", { 300, 5 } },
    { "thread per sample, N×C×H×W", { 2, 7, 9, 11 } },
    { "warp per row", { 37, 100 } },
    { "block per row, cached row", { 6, 3000 } },
    { "block per row, cached row above 48 KiB", { 3, 20000 }, true },
    { "block per row, row above the shared-memory limit", { 2, 120000 }, true },
    { "a streamed block of 512 threads (16 bits), a cluster of 4 blocks (f32)", { 2, 70000 }, true },
  }
  for _, dtype in ipairs(DTYPES) do
    it("softmax focal and dual focal in " .. dtype .. " for every kernel shape", function()
      H.seed(200)
      for _, c in ipairs(shapes) do
        local label, shape, big = c[1], c[2], c[3]
        local x = H.random_logits(shape, { std = 3 })
        local y = H.random_labels(sample_sizes(shape), shape[2], { ignore = 0.2 })
        for _, red in ipairs(REDUCTIONS) do
          -- without α (γ = 0, 0.5, 2) rows with a contiguous class axis go through the
          -- cross-entropy register-row kernel; with α through the focal kernels
          for _, gamma in ipairs(big and { 2 } or { 0, 0.5, 2 }) do
            compare("softmax_focal", x, y, { reduction = red, gamma = gamma }, dtype,
              string.format("softmax focal γ=%g %s", gamma, label))
          end
          compare("softmax_focal", x, y, { reduction = red, gamma = 2,
            alpha = ploss.rand({ shape[2] }, { dtype = "f64" }) }, dtype, "softmax focal γ=2 with α " .. label)
          compare("dual_focal", x, y, { reduction = red }, dtype, "dual focal " .. label)
        end
      end
    end)

    it("confident rows (target logit 12 to 30 above the rest) keep 1 − p_t accurate in " .. dtype, function()
      H.seed(203)
      for _, shape in ipairs { { 64, 100 }, { 16, 3000 }, { 4, 40000 } } do
        local N, C = shape[1], shape[2]
        local x = H.random_logits(shape, { std = 1 })
        local y = H.random_labels({ N }, C)
        local labels = y:flat()
        for i = 1, N do
          x:select(1, i):narrow(1, labels[i] + 1, 1):fill(12 + 18 * i / N)
        end
        for _, red in ipairs(REDUCTIONS) do
          for _, gamma in ipairs { 0.5, 2 } do
            compare("softmax_focal", x, y, { reduction = red, gamma = gamma }, dtype,
              string.format("confident softmax focal γ=%g %dx%d", gamma, N, C))
          end
        end
      end
    end)

    it("channels-last rows and strided labels in " .. dtype, function()
      H.seed(201)
      local x = H.random_logits({ 2, 40, 3, 5 }, { std = 2 })
      local y = H.random_labels({ 2, 3, 5 }, 40, { ignore = 0.2 })
      local perm = function(xg, yg) return xg:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3), yg end
      for _, red in ipairs(REDUCTIONS) do
        compare("softmax_focal", x, y, { reduction = red }, dtype, "softmax focal channels-last", perm)
        compare("dual_focal", x, y, { reduction = red }, dtype, "dual focal channels-last", perm)
      end
    end)
  end

  it("the saved lse of the criterion gives the recomputed gradient", function()
    H.seed(202)
    for _, cls in ipairs { "SoftmaxFocalLoss", "DualFocalLoss" } do
      local x = H.random_logits({ 9, 50 }, { device = DEV, dtype = "f32" })
      local y = H.random_labels({ 9 }, 50, { device = DEV })
      local crit = ploss[cls] {}
      crit:forward(x, y)
      local g1 = crit:backward(x, y):clone()
      local g2 = F[cls == "SoftmaxFocalLoss" and "softmax_focal_backward" or "dual_focal_backward"](x, y, 1)
      H.assert_close(g1, g2, { rtol = 1e-5, atol = 1e-7, what = cls })
    end
  end)
end)

describe("CUDA focal family edge cases", function()
  it("extreme logits stay finite: ±1e4 in f32/bf16, ±60000 in f16", function()
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local big = dtype == "f16" and 60000 or 1e4
      local x = ploss.tensor({ { big, -big, 0, 3 }, { -big, big, big, -big } }, { dtype = dtype, device = DEV })
      local yb = ploss.tensor({ { 0, 1, 1, 0.5 }, { 1, 1, 0, 0 } }, { dtype = dtype, device = DEV })
      local yi = ploss.tensor({ 1, 3 }, { dtype = "i64", device = DEV })
      for _, call in ipairs {
        function() return F.binary_cross_entropy_with_logits_fused(x, yb, { reduction = "sum" }) end,
        function() return F.sigmoid_focal_fused(x, yb, { reduction = "sum", gamma = 0.5 }) end,
        function() return F.sigmoid_focal_fused(x, yb, { reduction = "sum", convention = "reference", gamma = 0 }) end,
        function() return F.softmax_focal_fused(x, yi, { reduction = "sum", gamma = 0.5 }) end,
        function() return F.dual_focal_fused(x, yi, { reduction = "sum" }) end,
      } do
        local l, g = call()
        assert.is_true(l == l and math.abs(l) < math.huge, dtype .. " loss " .. tostring(l))
        for _, v in ipairs(g:flat()) do assert.is_true(v == v and math.abs(v) < math.huge, dtype .. " grad") end
      end
      local l = F.sigmoid_focal(x, yb, { reduction = "none" }):flat()
      local xr = x:flat()
      H.assert_close({ l[1], l[2] }, { 0.75 * xr[1], -0.25 * xr[2] }, { rtol = 1e-6, what = dtype })
    end
  end)

  it("sigmoid focal at logits near the float range and at ±∞: the gradient's limits, not NaN", function()
    local inf = math.huge
    for _, conv in ipairs { "torchvision", "reference" } do
      local x = ploss.tensor({ -2e38, 2e38, -1e38, inf, -inf }, { dtype = "f32", device = DEV })
      local y = ploss.tensor({ 1, 0, 1, 0, 1 }, { dtype = "f32", device = DEV })
      local _, g = F.sigmoid_focal_fused(x, y, { reduction = "sum", gamma = 4, convention = conv })
      H.assert_close(g:to("cpu"), { -0.25, 0.75, -0.25, 0.75, -0.25 }, { rtol = 1e-7, what = conv })
    end
  end)

  it("an invalid label sets the error slot: reported at the next synchronising call, no out-of-bounds access", function()
    local x = ploss.randn({ 4, 6 }, { device = DEV })
    local y = ploss.tensor({ 0, 6, 2, -100 }, { dtype = "i64", device = DEV })
    for _, name in ipairs { "softmax_focal", "dual_focal" } do
      local ok, err = pcall(function()
        local l = F[name](x, y)
        return l
      end)
      assert.is_false(ok, name)
      assert.is_truthy(tostring(err):find("6", 1, true), tostring(err))
      assert.is_truthy(tostring(err):find("INVALID_LABEL", 1, true), tostring(err))
      -- the context is usable afterwards
      local good = ploss.tensor({ 0, 5, 2, -100 }, { dtype = "i64", device = DEV })
      local l = F[name](x, good)
      assert.is_true(l == l)
    end
  end)

  it("validation errors on CUDA tensors write nothing", function()
    local x = ploss.randn({ 3, 4 }, { device = DEV })
    local yb = ploss.rand({ 3, 4 }, { device = DEV })
    local out = ploss.empty({}, { device = DEV })
    local gbuf = ploss.empty({ 3, 4 }, { device = DEV })
    H.expect_error(function()
      local l = F.binary_cross_entropy_with_logits_fused(x, yb, { pos_weight = { 1, 2 }, out = out, grad_input = gbuf })
      return l
    end, "pos_weight: expected a shape that broadcasts over the input [3, 4]", out, gbuf)
    H.expect_error(function()
      local l = F.sigmoid_focal_fused(x, yb, { gamma = -1, out = out, grad_input = gbuf })
      return l
    end, "opts.gamma", out, gbuf)
    H.expect_error(function()
      local l = F.softmax_focal_fused(x, ploss.tensor({ 1, 2 }, { dtype = "i64", device = DEV }),
        { out = out, grad_input = gbuf })
      return l
    end, "target: expected shape [3]", out, gbuf)
    if ON_GPU then
      H.expect_error(function()
        local l = F.sigmoid_focal_fused(x, ploss.rand({ 3, 4 }), { out = out, grad_input = gbuf })
        return l
      end, "target: expected a tensor on cuda:0", out, gbuf)
    end
  end)

  it("empty input and all-ignored 'mean': NaN loss, zero gradient", function()
    local e = ploss.empty({ 0, 3 }, { device = DEV })
    local l = F.sigmoid_focal(e, ploss.empty({ 0, 3 }, { device = DEV }))
    assert.is_true(l ~= l)
    assert.are.equal(0, F.binary_cross_entropy_with_logits(e, ploss.empty({ 0, 3 }, { device = DEV }), { reduction = "sum" }))
    local x = ploss.randn({ 70, 40 }, { device = DEV })
    local y = ploss.full({ 70 }, -100, { dtype = "i64", device = DEV })
    for _, name in ipairs { "softmax_focal", "dual_focal" } do
      local loss, g = F[name .. "_fused"](x, y)
      assert.is_true(loss ~= loss, name)
      for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
    end
    local e2 = ploss.empty({ 0, 5 }, { device = DEV })
    local ye = ploss.empty({ 0 }, { dtype = "i64", device = DEV })
    local l2 = F.softmax_focal(e2, ye)
    assert.is_true(l2 ~= l2)
  end)

  it("in-place fused on the GPU equals the out-of-place gradient", function()
    H.seed(300)
    for _, c in ipairs {
      { "sigmoid_focal", "FocalLoss", ploss.rand({ 5, 40 }, { device = DEV }) },
      { "softmax_focal", "SoftmaxFocalLoss", H.random_labels({ 5 }, 40, { device = DEV }) },
      { "dual_focal", "DualFocalLoss", H.random_labels({ 5 }, 40, { device = DEV }) },
      { "softmax_focal", "SoftmaxFocalLoss", H.random_labels({ 5 }, 4000, { device = DEV }), 4000 },
    } do
      local name, cls, y, Cn = c[1], c[2], c[3], c[4] or 40
      local x = ploss.randn({ 5, Cn }, { device = DEV })
      local l1, g1 = F[name .. "_fused"](x, y)
      local xi = x:clone()
      local l2, g2 = ploss[cls] { inplace = true }(xi, y)
      assert.are.equal(xi, g2)
      H.assert_equal(l2, l1, { what = name })
      H.assert_equal(xi, g1, { what = name })
    end
  end)
end)
