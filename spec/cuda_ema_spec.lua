-- EMA of parameters on CUDA (suite 'cuda'; spec/run.lua exits 77 before this file without a
-- GPU; PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run): the cases of
-- spec/ema_cases.lua on the device, and the device against the CPU on tensors of every
-- float dtype, sizes that are not whole 16-byte vectors and views that do not start on one
-- (the elementwise path), in one multi-tensor update and swap.
local H = require "spec.helpers"
local ploss = H.ploss
local DEV = H.cuda_spec_device()

require "spec.ema_cases" (DEV, getfenv(1))

describe("EMA on " .. DEV .. " against the CPU", function()
  it("every dtype, aligned and misaligned views, odd sizes, five updates and a swap", function()
    local host, dev = {}, {}
    local i = 0
    for _, dtype in ipairs { "f32", "bf16", "f16", "f64", "i32" } do
      for _, n in ipairs { 1, 7, 16384, 16385, 100003 } do
        for _, offset in ipairs { 0, 1 } do
          i = i + 1
          local base = ploss.randn({ n + offset }, { dtype = dtype == "i32" and "f32" or dtype, seed = i }):to(nil, dtype)
          host[i] = base:narrow(1, 1 + offset, n):clone()
          local flat = base:clone():to(DEV) -- (a copy also in the dry run on the CPU)
          dev[i] = flat:narrow(1, 1 + offset, n) -- offset 1: not on a 16-byte boundary
        end
      end
    end
    local eh = ploss.optim.EMA(host, { decay = 0.99 })
    local ed = ploss.optim.EMA(dev, { decay = 0.99 })
    for t = 1, 5 do
      for k = 1, #host do
        local v = ploss.randn(host[k]:size(), { dtype = host[k]:dtype() == "i32" and "f32" or host[k]:dtype(), seed = 1000 * t + k })
          :to(nil, host[k]:dtype())
        host[k]:copy(v)
        dev[k]:copy(v:to(DEV))
      end
      eh:update()
      ed:update()
    end
    local tols = {}
    for k = 1, #host do
      local dt = host[k]:dtype()
      tols[k] = ({ f32 = 3e-6, f64 = 1e-13, bf16 = 8e-3, f16 = 1e-3, i32 = 0 })[dt]
      H.assert_close(ed.shadows[k], eh.shadows[k], { rtol = tols[k], atol = tols[k], what = "shadow " .. k .. " " .. dt })
    end
    -- apply: the averages in the params, the live weights in the shadows; restore: back
    ed:apply()
    for k = 1, #host do
      H.assert_close(dev[k], eh.shadows[k], { rtol = tols[k], atol = tols[k], what = "applied " .. k })
      H.assert_equal(ed.shadows[k], host[k], { what = "live weights kept " .. k })
    end
    ed:restore()
    for k = 1, #host do H.assert_equal(dev[k], host[k], { what = "restored " .. k }) end
  end)
end)
