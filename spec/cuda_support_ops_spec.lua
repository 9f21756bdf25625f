-- CUDA support-ops spec (suite 'cuda'; spec/run.lua exits 77 without a GPU): every op of
-- the support ops on the GPU against the CPU backend (or an f64 reference), in f32, f16, bf16 and
-- f64, on contiguous and strided (transposed) tensors, plus CUDA-specific checks (device
-- mismatch, determinism).  PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run
-- of its logic (spec/run.lua then does not skip).
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()
local DEV_NAME = ploss.parse_device(DEV)

local DTYPES = { "f32", "f16", "bf16", "f64" }
-- elementwise results computed in f32 on the GPU and f64 on the CPU, then rounded
local EW_TOL = {
  f64 = { rtol = 1e-12, atol = 1e-14 },
  f32 = { rtol = 2e-6, atol = 1e-6 },
  f16 = { rtol = 1e-3, atol = 1e-4 },
  bf16 = { rtol = 8e-3, atol = 1e-3 },
}

local function gpu(t) return t:to(DEV, nil, true) end -- a copy, also in the CPU dry run

-- CUDA and CPU results of fn(device tensors...) for the same inputs
local function compare(fn, inputs, tol, what)
  local cpu_out = fn(unpack(inputs))
  local dev_in = {}
  for i, t in ipairs(inputs) do dev_in[i] = ploss.is_tensor(t) and gpu(t) or t end
  local dev_out = fn(unpack(dev_in))
  assert.are.equal(DEV_NAME, dev_out:device())
  H.assert_close(dev_out:cpu(), cpu_out, { rtol = tol.rtol, atol = tol.atol, what = what })
  return dev_out, cpu_out
end

describe("CUDA gemm (cuBLAS) against a naive product", function()
  it("every transpose and dtype, alpha/beta, strided and transposed views, transposed c", function()
    H.seed(401)
    H.each(DTYPES, { false, true }, { false, true }, function(dt, ta, tb)
      for _, s in ipairs { { 1, 1, 1 }, { 5, 3, 7 }, { 64, 33, 129 }, { 2, 300, 17 } } do
        local m, n, k = s[1], s[2], s[3]
        local a = ploss.randn(ta and { k, m } or { m, k }, { dtype = dt })
        local b = ploss.randn(tb and { n, k } or { k, n }, { dtype = dt })
        local c0 = ploss.randn({ m, n }, { dtype = dt })
        local want = F.gemm(a:double(), b:double(), { trans_a = ta, trans_b = tb, alpha = 1.5, beta = -0.5,
          out = c0:to("cpu", "f64", true) })
        local c = gpu(c0)
        F.gemm(gpu(a), gpu(b), { trans_a = ta, trans_b = tb, alpha = 1.5, beta = -0.5, out = c })
        -- f32 accumulation over k terms of size ~1: k·2^-24 relative to Σ|ab| ≈ √k
        local tol = dt == "f64" and { rtol = 1e-12, atol = 1e-12 }
          or { rtol = EW_TOL[dt].rtol, atol = k * 1e-6 + EW_TOL[dt].atol * math.sqrt(k) }
        H.assert_close(c:cpu(), want, { rtol = tol.rtol, atol = tol.atol,
          what = string.format("%s ta=%s tb=%s %dx%dx%d", dt, tostring(ta), tostring(tb), m, n, k) })
      end
    end)
  end)

  it("f16/bf16 inputs with an f32 output, views without copies, k = 0, empty", function()
    H.seed(402)
    for _, dt in ipairs { "f16", "bf16" } do
      local a, b = ploss.randn({ 9, 200 }, { dtype = dt }), ploss.randn({ 200, 6 }, { dtype = dt })
      local c = ploss.empty({ 9, 6 }, { dtype = "f32", device = DEV })
      F.gemm(gpu(a), gpu(b), { out = c })
      H.assert_close(c:cpu(), F.gemm(a:double(), b:double()), { rtol = 1e-5, atol = 2e-4, what = dt .. " -> f32" })
    end
    local big = gpu(ploss.randn({ 6, 10 }, { dtype = "f64" }))
    local a = big:narrow(2, 2, 4)
    local bt = gpu(ploss.randn({ 5, 4 }, { dtype = "f64" })):t()
    local want = F.gemm(a:cpu(), bt:cpu())
    H.assert_close(F.gemm(a, bt):cpu(), want, { rtol = 1e-13, atol = 1e-13 })
    local ct = ploss.zeros({ 5, 6 }, { dtype = "f64", device = DEV })
    F.gemm(a, bt, { out = ct:t() })
    H.assert_close(ct:t():cpu(), want, { rtol = 1e-13, atol = 1e-13 })
    local c = ploss.full({ 3, 2 }, 4, { device = DEV })
    F.gemm(ploss.empty({ 3, 0 }, { device = DEV }), ploss.empty({ 0, 2 }, { device = DEV }), { out = c, beta = 0.5 })
    H.assert_equal(c:cpu(), ploss.full({ 3, 2 }, 2))
    F.gemm(ploss.empty({ 3, 0 }, { device = DEV }), ploss.empty({ 0, 2 }, { device = DEV }), { out = c, beta = 0 })
    H.assert_equal(c:cpu(), ploss.zeros(3, 2))
    -- alpha = 0: beta·c, a NaN in a not read (as the CPU)
    local an = ploss.ones({ 64, 64 })
    an[1][1] = 0 / 0
    local cz = ploss.ones({ 64, 64 }, { device = DEV })
    F.gemm(an:to(DEV), ploss.ones({ 64, 64 }, { device = DEV }), { alpha = 0, beta = 0.5, out = cz })
    H.assert_equal(cz:cpu(), ploss.full({ 64, 64 }, 0.5))
    assert.are.same({ 0, 3 }, F.gemm(ploss.empty({ 0, 4 }, { device = DEV }), ploss.ones({ 4, 3 }, { device = DEV })):size())
  end)

  it("is deterministic and refuses a CPU operand for a CUDA context", function()
    H.seed(403)
    local a, b = gpu(ploss.randn(128, 256)), gpu(ploss.randn(256, 64))
    H.assert_equal(F.gemm(a, b):cpu(), F.gemm(a, b):cpu():flat())
    if DEV_NAME ~= "cpu" then
      local c = ploss.empty({ 128, 64 }, { device = DEV })
      H.expect_error(function() F.gemm(a, b:cpu(), { out = c }) end, { "b: expected a tensor on cuda:0", "PLOSS_ERR_DEVICE" }, c)
    end
  end)
end)

describe("CUDA activations against the CPU", function()
  for _, name in ipairs { "swish", "hard_swish", "mish" } do
    it(name .. " forward and backward, every dtype, contiguous and transposed, in place", function()
      H.seed(410)
      for _, dt in ipairs(DTYPES) do
        local x = ploss.randn({ 37, 65 }, { dtype = dt, std = 5 })
        local g = ploss.randn({ 37, 65 }, { dtype = dt })
        local tol = EW_TOL[dt]
        compare(function(t) return F[name](t) end, { x }, tol, name .. " " .. dt)
        compare(function(t, u) return F[name .. "_backward"](t, u) end, { x, g }, tol, name .. " backward " .. dt)
        compare(function(t) return F[name](t:t()) end, { x }, tol, name .. " transposed " .. dt)
        compare(function(t, u) return F[name .. "_backward"](t:t(), u:t()) end, { x, g }, tol, name .. " backward transposed " .. dt)
        local xd = gpu(x)
        local want = F[name](xd):cpu()
        F[name](xd, { inplace = true })
        H.assert_equal(xd:cpu(), want, { what = name .. " in place " .. dt })
      end
      -- extremes and kinks in f32
      local ex = ploss.tensor({ -1e4, 1e4, -3, 3, 0, 20, 20.5, -20.5, -60000, 60000 })
      compare(function(t) return F[name](t) end, { ex }, EW_TOL.f32, name .. " extremes")
      compare(function(t) return F[name .. "_backward"](t, ploss.ones({ 10 }, { device = t:device() })) end, { ex },
        EW_TOL.f32, name .. " extremes backward")
    end)
  end
end)

describe("CUDA bias, argmax", function()
  it("bias_add and bias_grad against the CPU, every dtype, strided, deterministic", function()
    H.seed(420)
    for _, dt in ipairs(DTYPES) do
      local x = ploss.randn({ 1000, 37 }, { dtype = dt })
      local b = ploss.randn({ 37 }, { dtype = dt })
      compare(function(t, u) return F.bias_add(t:clone(), u) end, { x, b }, EW_TOL[dt], "bias_add " .. dt)
      -- column sums of 1000 rows: f32 accumulation in a different order than the CPU's f64
      local gtol = dt == "f64" and { rtol = 1e-12, atol = 1e-12 } or { rtol = EW_TOL[dt].rtol, atol = 5e-4 + EW_TOL[dt].atol * 30 }
      local gd = compare(function(t) return F.bias_grad(t) end, { x }, gtol, "bias_grad " .. dt)
      H.assert_equal(F.bias_grad(gpu(x)):cpu(), gd:cpu():flat(), { what = "bias_grad determinism " .. dt })
      compare(function(t) return F.bias_grad(t:t():contiguous():t()) end, { x }, gtol, "bias_grad column-major " .. dt)
    end
    H.assert_equal(F.bias_grad(ploss.empty({ 0, 3 }, { device = DEV })):cpu(), { 0, 0, 0 })
  end)

  it("argmax against the CPU: ties, NaN, N×C×H×W, permuted", function()
    H.seed(421)
    local x = ploss.tensor({ { 1, 3, 3, 2 }, { 5, 1, 0, 5 }, { 1, 0 / 0, 9, 0 / 0 } })
    for _, dt in ipairs(DTYPES) do
      H.assert_equal(ploss.argmax(gpu(x:to("cpu", dt))):cpu(), { 1, 0, 1 })
      local x4 = ploss.randn({ 3, 7, 5, 4 }, { dtype = dt })
      compare(function(t) return ploss.argmax(t) end, { x4 }, { rtol = 0, atol = 0 }, "argmax " .. dt)
      compare(function(t) return ploss.argmax(t:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3)) end, { x4 },
        { rtol = 0, atol = 0 }, "argmax channels-last " .. dt)
    end
  end)
end)

describe("CUDA optimiser steps against the CPU", function()
  it("SGD (momentum, Nesterov, weight decay, dampening) and Adam/AdamW, every dtype and state dtype", function()
    H.seed(430)
    for _, dt in ipairs(DTYPES) do
      for _, sdt in ipairs { dt, "f32" } do
        for _, o in ipairs { { lr = 0.1 }, { lr = 0.1, momentum = 0.9, weight_decay = 0.01 },
                             { lr = 0.05, momentum = 0.9, nesterov = true }, { lr = 0.05, momentum = 0.5, dampening = 0.5 } } do
          local p, buf = ploss.randn({ 33, 17 }, { dtype = dt }), ploss.zeros({ 33, 17 }, { dtype = sdt })
          local pd, bd = gpu(p), gpu(buf)
          for step = 1, 3 do
            local g = ploss.randn({ 33, 17 }, { dtype = dt })
            F.sgd_step(p, g, buf, step, o)
            F.sgd_step(pd, gpu(g), bd, step, o)
          end
          H.assert_close(pd:cpu(), p, { rtol = EW_TOL[dt].rtol * 4, atol = EW_TOL[dt].atol * 4, what = "sgd " .. dt .. "/" .. sdt })
        end
        -- Adam moments in f16/bf16 underflow (v ≈ 1e-3·g²), so the GPU's f32 and the CPU's f64
        -- arithmetic may round them apart: compare Adam with f32 (or f64) moments only
        local adam_cases = (sdt == "f16" or sdt == "bf16") and {}
          or { {}, { lr = 0.01, weight_decay = 0.1 }, { lr = 0.01, weight_decay = 0.1, decoupled_weight_decay = true } }
        for _, o in ipairs(adam_cases) do
          local p = ploss.randn({ 50 }, { dtype = dt })
          local m, v = ploss.zeros({ 50 }, { dtype = sdt }), ploss.zeros({ 50 }, { dtype = sdt })
          local pd, md, vd = gpu(p), gpu(m), gpu(v)
          for step = 1, 3 do
            local g = ploss.randn({ 50 }, { dtype = dt })
            F.adam_step(p, g, m, v, step, o)
            F.adam_step(pd, gpu(g), md, vd, step, o)
          end
          H.assert_close(pd:cpu(), p, { rtol = EW_TOL[dt].rtol * 4, atol = EW_TOL[dt].atol * 4 + 1e-6, what = "adam " .. dt .. "/" .. sdt })
        end
      end
    end
  end)

  it("strided parameters", function()
    H.seed(431)
    local p = ploss.randn({ 8, 6 }, { dtype = "f32" })
    local g = ploss.randn({ 6, 8 }, { dtype = "f32" }):t()
    local pd = gpu(p)
    F.sgd_step(p:t(), g:t(), nil, 1, { lr = 0.5 })
    F.sgd_step(pd:t(), gpu(g):t(), nil, 1, { lr = 0.5 })
    H.assert_close(pd:cpu(), p, { rtol = 1e-6, atol = 1e-7 })
  end)
end)

describe("CUDA layers", function()
  it("Linear + Mish + Linear on the GPU match the CPU (f32), with the same initialisation", function()
    local function build(device)
      ploss.manual_seed(440)
      return ploss.nn.Sequential { ploss.nn.Linear(20, 16, { device = device }), ploss.nn.Mish { inplace = true },
                                   ploss.nn.Linear(16, 4, { device = device, init = "xavier" }) }
    end
    local mc, mg = build("cpu"), build(DEV)
    local pc, gc = mc:parameters()
    local pg, gg = mg:parameters()
    for i = 1, #pc do H.assert_close(pg[i]:cpu(), pc[i], { rtol = 1e-6, atol = 1e-7, what = "init " .. i }) end -- Philox: same numbers
    H.seed(441)
    local x, gy = ploss.randn(8, 20), ploss.randn(8, 4)
    H.assert_close(mg:forward(gpu(x)):cpu(), mc:forward(x), { rtol = 1e-5, atol = 1e-5 })
    H.assert_close(mg:backward(gpu(x), gpu(gy)):cpu(), mc:backward(x, gy), { rtol = 1e-5, atol = 1e-5 })
    for i = 1, #gc do H.assert_close(gg[i]:cpu(), gc[i], { rtol = 1e-5, atol = 1e-5, what = "grad " .. i }) end
  end)
end)
