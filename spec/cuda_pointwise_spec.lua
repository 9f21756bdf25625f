-- Pointwise criteria on CUDA (suite 'cuda'; spec/run.lua exits 77 before this file without a
-- GPU): mse_loss, target_weighted_mse_loss, l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy,
-- soft_margin_loss, kl_div, hinge_embedding_loss, poisson_nll_loss and hinge_loss against the CPU backend on the same
-- dtype-rounded inputs, in
-- f32/f16/bf16 (fp32 accumulation on the GPU, f64 on the CPU; tolerances H.CUDA_TOL) and f64,
-- every reduction ('batchmean' for kl_div) and option, fused against forward + backward, for
-- both kernels of kernels/elementwise/sigmoid.cu: the vectorised fast kernel (dense, aligned,
-- one dtype; vector tails, many blocks, more elements than the capped grid) and the general
-- kernel (misaligned views, strided and channels-last inputs, a target of another dtype,
-- the broadcast weights of BCE, MSE, L1 and Huber, backward with an elementwise upstream
-- gradient; MSE's and L1's weighted 'mean' over Σ w on the device).  Also bitwise
-- determinism, the values at the kinks and clamps, weights summing to 0, in-place fused,
-- empty input.
-- PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run of its logic.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()

local DTYPES = { "f32", "f16", "bf16", "f64" }
local TOL = H.CUDA_TOL
local close = H.assert_close_scaled

local NAMES = { "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "soft_margin_loss", "kl_div",
  "hinge_embedding_loss", "poisson_nll_loss", "hinge_loss", "target_weighted_mse_loss" }
-- the options worth covering per loss (weight: a tensor made for the input's sizes)
local OPTIONS = {
  mse_loss = { {}, { weight = true }, { weight = "positive" } },
  l1_loss = { {}, { weight = true }, { weight = "positive" } },
  smooth_l1_loss = { {}, { beta = 0.5 }, { beta = 0 } },
  huber_loss = { {}, { delta = 2 }, { delta = 2, weight = "positive" } },
  binary_cross_entropy = { {}, { weight = true } },
  soft_margin_loss = { {} },
  kl_div = { {}, { log_target = true } },
  hinge_embedding_loss = { {}, { margin = 0.5 } },
  hinge_loss = { {}, { margin = 0.5 } },
  poisson_nll_loss = { {}, { full = true }, { log_input = false }, { log_input = false, full = true, eps = 0.1 } },
  target_weighted_mse_loss = { { weight = true }, { weight = "full" } },
}
-- the losses of ±1 labels (the description's target 'signs'), which take integer ones too
local SIGNS, SIGN_NAMES = {}, {}
for _, d in ipairs(H.one_input_losses()) do
  if d.shape == "elementwise" and d.target == "signs" then SIGNS[d.name] = true; SIGN_NAMES[#SIGN_NAMES + 1] = d.name end
end
local function reductions(name)
  return name == "kl_div" and { "none", "mean", "sum", "batchmean" } or { "none", "mean", "sum" }
end

local function ldtype(dtype) return dtype == "f64" and "f64" or "f32" end

-- f64 CPU (input, target) of `sizes` in each loss's domain.
local function data_for(name, sizes)
  if name == "binary_cross_entropy" then
    return ploss.rand(sizes, { dtype = "f64", low = 0.01, high = 0.99 }), ploss.rand(sizes, { dtype = "f64" })
  elseif SIGNS[name] then
    local v = ploss.rand(sizes, { dtype = "f64" }):flat()
    for i = 1, #v do v[i] = v[i] < 0.5 and -1 or 1 end
    return ploss.randn(sizes, { dtype = "f64", std = 3 }), ploss.tensor(v, { dtype = "f64", size = sizes })
  elseif name == "kl_div" then
    return ploss.rand(sizes, { dtype = "f64", low = -4, high = -0.05 }), ploss.rand(sizes, { dtype = "f64" })
  elseif name == "poisson_nll_loss" then
    -- rates (or log-rates) in [0.2, 3], counts 0..5 and every fourth target a fraction in
    -- [0, 4) (the Stirling term where y > 1, also for y in (1, 2))
    local v = ploss.rand(sizes, { dtype = "f64" }):flat()
    for i = 1, #v do v[i] = i % 4 == 0 and v[i] * 4 or math.floor(v[i] * 6) end
    return ploss.rand(sizes, { dtype = "f64", low = 0.2, high = 3 }), ploss.tensor(v, { dtype = "f64", size = sizes })
  end
  return ploss.randn(sizes, { dtype = "f64", std = 2 }), ploss.randn(sizes, { dtype = "f64" })
end

-- The options of a case: the weight made for `sizes` (PyTorch broadcasting: one value per
-- class along axis 1 for an N×C×… input, [C] for N×C; "full" and "positive": the input's
-- shape, in [−2, 2] and [0.5, 2]).
local function options(spec, sizes, red)
  local o = { reduction = red }
  for k, v in pairs(spec) do o[k] = v end
  if spec.weight == "full" or spec.weight == "positive" then
    local low = spec.weight == "full" and -2 or 0.5
    o.weight = ploss.rand(sizes, { dtype = "f64", low = low, high = 2 })
  elseif spec.weight then
    local ws = { sizes[2] or 1 }
    for _ = 3, #sizes do ws[#ws + 1] = 1 end
    o.weight = ploss.rand(#sizes >= 2 and ws or { 1 }, { dtype = "f64", low = 0.5, high = 2 })
  end
  return o
end

-- Fused, forward and backward on the CPU and on DEV with the same dtype-rounded inputs;
-- compare, and repeat the GPU call for bitwise determinism.  layout(xg, yg) → views on DEV.
local function compare(name, x64, y64, opts, dtype, label, layout)
  local xc, yc = x64:to("cpu", dtype), y64:to("cpu", dtype)
  local xg, yg = xc:to(DEV), yc:to(DEV)
  if layout then xg, yg = layout(xg, yg) end
  local o_cpu, o_gpu = H.options_on(opts, "cpu", dtype ~= "f64" and "f32" or "f64"), H.options_on(opts, DEV,
    dtype ~= "f64" and "f32" or "f64")
  local what = string.format("%s %s %s %s", name, label, dtype, opts.reduction)
  for k, v in pairs(opts) do
    if k ~= "reduction" then what = what .. " " .. k .. "=" .. (ploss.is_tensor(v) and "tensor" or tostring(v)) end
  end
  local T = TOL[dtype]
  local lc, gc = F[name .. "_fused"](xc, yc, o_cpu)
  local lg, gg = F[name .. "_fused"](xg, yg, o_gpu)
  assert.are.equal(xg:device(), gg:device())
  assert.are.equal(dtype, gg:dtype())
  close(lg, lc, T.loss, 0, what .. " fused loss")
  close(gg, gc, T.grad, T.floor, what .. " fused grad")
  local gout_c, gout_g = 0.7, 0.7
  if opts.reduction == "none" then
    gout_c = ploss.randn(xc:size(), { dtype = ldtype(dtype) })
    gout_g = gout_c:to(DEV)
  end
  close(F[name](xg, yg, o_gpu), lc, T.loss, 0, what .. " forward")
  close(F[name .. "_backward"](xg, yg, gout_g, o_gpu), F[name .. "_backward"](xc, yc, gout_c, o_cpu), T.grad,
    T.floor, what .. " backward")
  local lg2, gg2 = F[name .. "_fused"](xg, yg, o_gpu)
  H.assert_equal(lg2, lg, { what = what .. " repeat loss" })
  H.assert_equal(gg2, gg, { what = what .. " repeat grad" })
end

local function each_case(name, sizes, dtype, label, layout)
  local x, y = data_for(name, sizes)
  for _, spec in ipairs(OPTIONS[name]) do
    for _, red in ipairs(reductions(name)) do
      compare(name, x, y, options(spec, sizes, red), dtype, label, layout)
    end
  end
end

local function shifted(t) -- the same values one element into a bigger buffer: misaligned
  local n = t:numel()
  local buf = ploss.empty({ n + 1 }, { dtype = t:dtype(), device = t:device() })
  local v = buf:narrow(1, 2, n)
  v:copy(t:contiguous():view(n))
  return v:view(t:size())
end

-- The options a loss cannot be called without (its weight, on `device`, made for `sizes`),
-- with `extra` added.
local function required_options(name, sizes, device, extra)
  local o = {}
  if name == "target_weighted_mse_loss" then
    o.weight = ploss.rand({ sizes[#sizes] }, { dtype = "f32", low = 0.5, high = 2, seed = 7 }):to(device)
  end
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

describe("CUDA pointwise criteria vs CPU", function()
  for _, dtype in ipairs(DTYPES) do
    for _, name in ipairs(NAMES) do
      it(name .. ": dense, vector tails, one element, 2^18+7 elements in " .. dtype, function()
        H.seed(500)
        each_case(name, { 3, 5, 7, 11 }, dtype, "dense 3x5x7x11")
        for _, n in ipairs { 1, 3, 9, 17, 1003 } do each_case(name, { n }, dtype, "n=" .. n) end
        each_case(name, { 2 ^ 18 + 7 }, dtype, "2^18+7")
      end)

      it(name .. ": the general kernel (misaligned, channels-last, strided, target of another dtype) in " .. dtype,
        function()
          H.seed(501)
          local sizes = { 2, 6, 5, 4 }
          each_case(name, sizes, dtype, "input one element off", function(xg, yg) return shifted(xg), yg end)
          each_case(name, sizes, dtype, "target one element off", function(xg, yg) return xg, shifted(yg) end)
          each_case(name, sizes, dtype, "channels-last", function(xg, yg)
            return xg:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3), yg:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3)
          end)
          each_case(name, sizes, dtype, "strided along W", function(xg, yg)
            local function strided(t)
              local s = t:size()
              s[#s + 1] = 2
              local big = ploss.zeros(s, { dtype = t:dtype(), device = t:device() })
              big:select(#s, 1):copy(t)
              return big:select(#s, 1)
            end
            return strided(xg), strided(yg)
          end)
          each_case(name, sizes, dtype, "target in f64", function(xg, yg) return xg, yg:to(DEV, "f64") end)
        end)
    end
  end

  it("integer ±1 labels read as the float ones (soft margin, hinge embedding, hinge), as on the CPU", function()
    assert.are.same({ "soft_margin_loss", "hinge_embedding_loss", "hinge_loss" }, SIGN_NAMES)
    for _, name in ipairs(SIGN_NAMES) do
      local x, y = data_for(name, { 37, 29 })
      for _, idt in ipairs { "i64", "i32" } do
        local yi = y:type(idt)
        for _, dtype in ipairs { "f32", "bf16" } do
          local lc, gc = F[name .. "_fused"](x:type(dtype), yi)
          local lg, gg = F[name .. "_fused"](x:type(dtype):to(DEV), yi:to(DEV))
          H.assert_close({ lg }, { lc }, { rtol = 1e-5, what = name .. " " .. idt .. " " .. dtype })
          H.assert_close(gg, gc, { rtol = dtype == "bf16" and 1e-2 or 1e-5, atol = 1e-7, what = name .. " grad" })
        end
      end
    end
  end)

  it("more elements than the capped grid (2^21+77, a grid-stride loop of several steps), f32 and bf16", function()
    H.seed(502)
    for _, name in ipairs(NAMES) do
      local x, y = data_for(name, { 2 ^ 21 + 77 })
      for _, dtype in ipairs { "f32", "bf16" } do
        for _, red in ipairs { "none", "mean" } do
          compare(name, x, y, required_options(name, { 2 ^ 21 + 77 }, "cpu", { reduction = red }), dtype, "2^21+77")
        end
      end
    end
  end)
end)

describe("CUDA pointwise criteria: kinks, clamps, saturation", function()
  for _, dtype in ipairs { "f32", "f64", "bf16" } do
    it("PyTorch's values at the thresholds, sign(0) = 0, BCE at 0 and 1, large margins in " .. dtype, function()
      local x = ploss.tensor({ 0.5, -1, 3, 2, 0, 1, 1000, -1000 }, { dtype = dtype, device = DEV })
      local y = ploss.tensor({ 0, 1, 1, 2, 0, 1, 1000, 0 }, { dtype = dtype, device = DEV })
      for _, c in ipairs {
        { "l1_loss", {}, { 0.5, 2, 2, 0, 0, 0, 0, 1000 }, { 1, -1, 1, 0, 0, 0, 0, -1 } },
        { "smooth_l1_loss", { beta = 2 }, { 0.0625, 1, 1, 0, 0, 0, 0, 999 }, { 0.25, -1, 1, 0, 0, 0, 0, -1 } },
        { "smooth_l1_loss", { beta = 0 }, { 0.5, 2, 2, 0, 0, 0, 0, 1000 }, { 1, -1, 1, 0, 0, 0, 0, -1 } },
        { "huber_loss", { delta = 2 }, { 0.125, 2, 2, 0, 0, 0, 0, 1998 }, { 0.5, -2, 2, 0, 0, 0, 0, -2 } },
      } do
        local l, g = F[c[1] .. "_fused"](x, y, { reduction = "none", beta = c[2].beta, delta = c[2].delta })
        H.assert_close(l, c[3], { rtol = 1e-6, what = c[1] .. " " .. dtype })
        H.assert_close(g, c[4], { rtol = 1e-6, what = c[1] .. " grad " .. dtype })
      end
      local p = ploss.tensor({ 0, 1, 0, 1, 0.5 }, { dtype = dtype, device = DEV })
      local t = ploss.tensor({ 1, 0, 0, 1, 1 }, { dtype = dtype, device = DEV })
      local l, g = F.binary_cross_entropy_fused(p, t, { reduction = "none" })
      H.assert_close(l, { 100, 100, 0, 0, math.log(2) }, { rtol = 1e-6, what = "bce " .. dtype })
      -- ±1e12 rounded to the input's dtype (bf16: 8 significant bits)
      H.assert_close(g, { -1e12, 1e12, 0, 0, -2 }, { rtol = dtype == "bf16" and 2 ^ -8 or 1e-6, what = "bce grad " .. dtype })
      local s = ploss.tensor({ 1000, -1000, math.huge }, { dtype = dtype, device = DEV })
      local sy = ploss.tensor({ -1, -1, 1 }, { dtype = dtype, device = DEV })
      l, g = F.soft_margin_loss_fused(s, sy, { reduction = "none" })
      H.assert_close(l, { 1000, 0, 0 }, { rtol = 1e-6, what = "soft margin " .. dtype })
      H.assert_close(g, { 1, 0, 0 }, { rtol = 1e-6, what = "soft margin grad " .. dtype })
      -- the hinge (Torch7's MarginCriterion): 0 and a zero gradient at the kink y·x = m
      local hx = ploss.tensor({ 1, -1, 0.25, 1000, -2 }, { dtype = dtype, device = DEV })
      local hy = ploss.tensor({ 1, -1, 1, -1, 1 }, { dtype = dtype, device = DEV })
      l, g = F.hinge_loss_fused(hx, hy, { reduction = "none" })
      H.assert_close(l, { 0, 0, 0.75, 1001, 3 }, { rtol = 1e-6, what = "hinge " .. dtype })
      H.assert_equal(g, { 0, 0, -1, 1, -1 }, { what = "hinge grad " .. dtype })
    end)
  end

  it("a NaN difference: NaN gradients of smooth L1 (β > 0), Huber and MSE, 0 of L1, as the CPU", function()
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      local xn = ploss.tensor({ 0 / 0, 1, math.huge, 2 }, { dtype = dtype })
      local yn = ploss.tensor({ 1, 0 / 0, math.huge, 2 }, { dtype = dtype })
      for _, c in ipairs { { "smooth_l1_loss", { beta = 1 } }, { "huber_loss", { delta = 0.5 } },
        { "smooth_l1_loss", { beta = 0 } }, { "l1_loss", {} }, { "mse_loss", {} } } do
        local o = H.with(c[2], { reduction = "none" })
        local lc, gc = F[c[1] .. "_fused"](xn, yn, o)
        local ld, gd = F[c[1] .. "_fused"](xn:to(DEV), yn:to(DEV), o)
        H.assert_equal(ld, lc, { what = c[1] .. " loss " .. dtype })
        H.assert_equal(gd, gc, { what = c[1] .. " gradient " .. dtype })
      end
    end
  end)

  it("a NaN or ∞ upstream gradient: 0 where the hinge is inactive (hinge embedding, hinge), as the CPU", function()
    local nan, inf = 0 / 0, math.huge
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      -- the last two labels are neither 1 nor −1 (hinge embedding takes both branches)
      local x = ploss.tensor({ 0.3, 2, 1, -1, 0.25, -3, 0.3, 2 }, { dtype = dtype })
      local y = ploss.tensor({ 1, -1, -1, -1, 1, -1, 0.5, 0 }, { dtype = dtype })
      local go = ploss.tensor({ nan, nan, inf, -inf, nan, nan, inf, nan }, { dtype = ldtype(dtype) })
      -- an inactive element of each: hinge embedding's x = 2 (y = −1), hinge's y·x = 3
      for name, off in pairs { hinge_embedding_loss = 2, hinge_loss = 6 } do
        local what = name .. " " .. dtype
        -- an upstream gradient per element (the general kernel), a scalar NaN (the fast one)
        local gc = F[name .. "_backward"](x, y, go, { reduction = "none" })
        H.assert_equal(F[name .. "_backward"](x:to(DEV), y:to(DEV), go:to(DEV), { reduction = "none" }), gc,
          { what = what .. " per element" })
        assert.is_true(gc:flat()[off] == 0, what)
        local sc = F[name .. "_backward"](x, y, nan)
        H.assert_equal(F[name .. "_backward"](x:to(DEV), y:to(DEV), nan), sc, { what = what .. " scalar" })
        assert.is_true(sc:flat()[off] == 0, what)
      end
    end
  end)

  it("hinge embedding keeps a NaN input's loss (y = −1 and 1), as the CPU", function()
    local nan = 0 / 0
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      local x = ploss.tensor({ nan, 0.5, nan, 2 }, { dtype = dtype })
      local y = ploss.tensor({ -1, -1, 1, 1 }, { dtype = dtype })
      local l = F.hinge_embedding_loss(x:to(DEV), y:to(DEV), { reduction = "none" })
      H.assert_equal(l, F.hinge_embedding_loss(x, y, { reduction = "none" }), { what = dtype })
      local v = l:cpu():flat()
      assert.is_true(v[1] ~= v[1] and v[3] ~= v[3], dtype .. ": NaN kept")
      for _, r in ipairs { "mean", "sum" } do
        local s = F.hinge_embedding_loss(x:to(DEV), y:to(DEV), { reduction = r })
        assert.is_true(s ~= s, dtype .. " " .. r)
      end
    end
  end)

  it("kl_div: 'batchmean' divides by the first dim, 0·log 0 = 0 (f32, fast and general kernels)", function()
    local lq = ploss.tensor({ { math.log(0.5), math.log(0.25), math.log(0.25), 0 },
      { math.log(0.1), math.log(0.6), math.log(0.3), 0 } }, { dtype = "f32", device = DEV })
    local p = ploss.tensor({ { 0.5, 0.5, 0, 0 }, { 0.2, 0.2, 0.6, 0 } }, { dtype = "f32", device = DEV })
    local kl = 0.5 * math.log(2) + 0.2 * math.log(2) + 0.2 * math.log(1 / 3) + 0.6 * math.log(2)
    for _, v in ipairs { { lq, p }, { shifted(lq), p } } do
      local l, g = F.kl_div_fused(v[1], v[2], { reduction = "batchmean" })
      H.assert_close(l, kl / 2, { rtol = 1e-6 })
      H.assert_close(g, { { -0.25, -0.25, 0, 0 }, { -0.1, -0.1, -0.3, 0 } }, { rtol = 1e-6 })
    end
  end)
end)

describe("CUDA Lua criteria over the pointwise kernels", function()
  it("L1NormLoss (a stride-0 zero target) and SpatialAutoCropMSELoss (a cropped view) as on the CPU", function()
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      local T = TOL[dtype]
      local x = ploss.randn({ 2, 3, 5, 4 }, { dtype = "f64", seed = 41 }):type(dtype)
      local t = ploss.randn({ 2, 3, 9, 7 }, { dtype = "f64", seed = 42 }):type(dtype)
      for _, c in ipairs {
        { ploss.L1NormLoss {}, { x } }, { ploss.L1NormLoss { reduction = "none" }, { x } },
        { ploss.SpatialAutoCropMSELoss {}, { x, t } }, { ploss.SpatialAutoCropMSELoss { reduction = "sum" }, { x, t } },
      } do
        local crit, args = c[1], c[2]
        local lc, gc = crit(unpack(args))
        local dev = {}
        for i, a in ipairs(args) do dev[i] = a:to(DEV) end
        local lg, gg = crit(unpack(dev))
        local what = tostring(crit) .. " " .. dtype
        close(crit.reduction == "none" and lg or { lg }, crit.reduction == "none" and lc or { lc }, T.loss, 0, what)
        assert.are.equal(dev[1]:device(), gg:device())
        close(gg, gc, T.grad, T.floor, what .. " gradient")
      end
    end
  end)
end)

describe("CUDA weighted MSE and L1: 'mean' over Σ w", function()
  it("hand values, Σ w = 0 (NaN, a zero gradient) and an empty input, as the CPU", function()
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      local x = ploss.tensor({ 0.5, -1, 3, 2 }, { dtype = dtype, device = DEV })
      local y = ploss.tensor({ 0, 1, 1, 2 }, { dtype = dtype, device = DEV }) -- d = 0.5, −2, 2, 0
      local w = ploss.tensor({ 1, 3, 0, 2 }, { dtype = dtype, device = DEV })
      local l, g = F.mse_loss_fused(x, y, { weight = w })
      H.assert_close({ l }, { 12.25 / 6 }, { rtol = 1e-6, what = "mse " .. dtype })
      H.assert_close(g, { 1 / 6, -2, 0, 0 }, { rtol = dtype == "bf16" and 4e-3 or 1e-6, what = "mse grad " .. dtype })
      H.assert_close(F.l1_loss_backward(x, y, 3, { weight = w }), { 0.5, -1.5, 0, 0 },
        { rtol = dtype == "bf16" and 4e-3 or 1e-6, what = "l1 backward " .. dtype })
      for _, name in ipairs { "mse_loss", "l1_loss" } do
        for _, wz in ipairs { { 0, 0, 0, 0 }, { 1, -1, 0, 0 } } do
          local o = { weight = ploss.tensor(wz, { dtype = dtype, device = DEV }) }
          local lz, gz = F[name .. "_fused"](x, y, o)
          assert.is_true(lz ~= lz, name .. " " .. dtype .. " Σ w = 0")
          H.assert_equal(gz, { 0, 0, 0, 0 })
          lz = F[name](x, y, o)
          assert.is_true(lz ~= lz, name .. " " .. dtype .. " Σ w = 0 forward")
          H.assert_equal(F[name .. "_backward"](x, y, 2, o), { 0, 0, 0, 0 })
        end
        local e = ploss.empty({ 0, 4 }, { dtype = dtype, device = DEV })
        local le = F[name](e, e, { weight = { 1, 2, 3, 4 } })
        assert.is_true(le ~= le, name .. " empty")
      end
    end
  end)

  it("a weight of another dtype (f16, bf16, f64), transposed, every pass and reduction, as the CPU", function()
    H.seed(504)
    local x64, y64 = data_for("mse_loss", { 6, 5 })
    local w64 = ploss.rand({ 5, 6 }, { dtype = "f64", low = 0.5, high = 2 })
    for _, name in ipairs { "mse_loss", "l1_loss", "huber_loss" } do
      for _, dtype in ipairs { "f32", "bf16", "f64" } do
        local T = TOL[dtype]
        local xc, yc = x64:to("cpu", dtype), y64:to("cpu", dtype)
        local xg, yg = xc:to(DEV), yc:to(DEV)
        for _, wdt in ipairs { "f16", "bf16", "f64" } do
          for _, red in ipairs { "none", "mean", "sum" } do
            local oc = { weight = w64:to("cpu", wdt):t(), reduction = red }
            local og = { weight = w64:to(DEV, wdt):t(), reduction = red }
            local what = string.format("%s %s weight %s %s", name, dtype, wdt, red)
            local lc, gc = F[name .. "_fused"](xc, yc, oc)
            local lg, gg = F[name .. "_fused"](xg, yg, og)
            close(lg, lc, T.loss, 0, what .. " fused loss")
            close(gg, gc, T.grad, T.floor, what .. " fused grad")
            close(F[name](xg, yg, og), lc, T.loss, 0, what .. " forward")
            local up_c = red == "none" and ploss.randn({ 6, 5 }, { dtype = ldtype(dtype) }) or 0.7
            local up_g = red == "none" and up_c:to(DEV) or 0.7
            close(F[name .. "_backward"](xg, yg, up_g, og), F[name .. "_backward"](xc, yc, up_c, oc), T.grad, T.floor,
              what .. " backward")
          end
        end
      end
    end
  end)

  it("more elements than the capped grid (the weight sum's grid-stride loop of several steps)", function()
    H.seed(505)
    local n = 2 ^ 21 + 77
    for _, name in ipairs { "mse_loss", "l1_loss" } do
      local x, y = data_for(name, { n })
      local w = ploss.rand({ n }, { dtype = "f64", low = 0.5, high = 2 })
      for _, dtype in ipairs { "f32", "bf16" } do
        compare(name, x, y, { reduction = "mean", weight = w }, dtype, "2^21+77 weighted")
      end
    end
  end)
end)

describe("CUDA pointwise criteria: in place, empty input", function()
  it("the in-place fused gradient equals the out-of-place one, bitwise", function()
    H.seed(510)
    for _, name in ipairs(NAMES) do
      for _, dtype in ipairs { "f32", "bf16" } do
        local x, y = data_for(name, { 5, 37 })
        local xg, yg = x:to(DEV, dtype), y:to(DEV, dtype)
        local l1, g1 = F[name .. "_fused"](xg, yg, required_options(name, { 5, 37 }, DEV))
        local xi = xg:clone()
        local l2, g2 = F[name .. "_fused"](xi, yg, required_options(name, { 5, 37 }, DEV, { inplace = true }))
        assert.are.equal(xi, g2)
        H.assert_equal(l2, l1, { what = name .. " in place loss" })
        H.assert_equal(xi, g1, { what = name .. " in place grad" })
      end
    end
  end)

  it("empty input: 'mean' and 'batchmean' of no rows NaN, 'sum' 0, an empty gradient", function()
    for _, name in ipairs(NAMES) do
      local x = ploss.empty({ 0, 4 }, { device = DEV })
      local y = ploss.empty({ 0, 4 }, { device = DEV })
      local l = F[name](x, y, required_options(name, { 0, 4 }, DEV))
      assert.is_true(l ~= l, name)
      assert.are.equal(0, F[name](x, y, required_options(name, { 0, 4 }, DEV, { reduction = "sum" })))
      local _, g = F[name .. "_fused"](x, y, required_options(name, { 0, 4 }, DEV))
      assert.are.same({ 0, 4 }, g:size())
    end
    local l = F.kl_div(ploss.empty({ 0, 4 }, { device = DEV }), ploss.empty({ 0, 4 }, { device = DEV }), { reduction = "batchmean" })
    assert.is_true(l ~= l)
  end)
end)
