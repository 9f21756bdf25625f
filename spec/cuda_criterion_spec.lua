-- Criteria on the GPU (suite 'cuda'; spec/run.lua exits 77 without a GPU,
-- PLOSS_CUDA_SPEC_DEVICE=cpu runs it on the CPU): for every loss whose description keeps a
-- state between forward and backward, backward from that state equals the fused pass in f32
-- on confident samples and on logits N(50, 10²), and a stale state is never used.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()

-- 256 rows of 5 logits N(50, 10²) (a row per sample), the first two rows confident
local function confident_logits()
  local v = ploss.randn({ 256, 5 }, { dtype = "f64", seed = 41 }):totable()
  for i = 1, #v do
    for j = 1, 5 do v[i][j] = 50 + 10 * v[i][j] end
  end
  v[1] = { 8.36, -5.33, -6, -7, -8 }
  v[2] = { 30, 0, 0, 0, 0 }
  return ploss.tensor(v, { dtype = "f32", device = DEV })
end

describe("criteria on " .. DEV, function()
  for _, d in ipairs(H.one_input_losses()) do
    if d.state then
      it(d.criterion .. ": backward from the saved state equals the fused pass in f32", function()
        local x = confident_logits()
        local y = ploss.zeros({ 256 }, { dtype = "i64", device = DEV })
        local crit = ploss[d.criterion](H.loss_options(d, 5))
        local _, gf = crit(x, y)
        gf = gf:clone()
        crit:forward(x, y)
        -- within 1e-6 relative, and 1e-7 absolute for gradients near 0: in f32 a confident
        -- sample's p_y − 1 resolves only to the spacing of floats near 1 (6e-8), on either path
        H.assert_close(crit:backward(x, y), gf, { rtol = 1e-6, atol = 1e-7 })
      end)

      it(d.criterion .. ": a target changed after forward gives the recomputed gradient", function()
        local x = ploss.randn({ 37, 5, 3 }, { device = DEV, seed = 43 })
        local y1 = ploss.randint(0, 5, { 37, 3 }, { device = DEV, seed = 44 })
        local y2 = ploss.randint(0, 5, { 37, 3 }, { device = DEV, seed = 45 })
        local opts = H.loss_options(d, 5)
        local crit = ploss[d.criterion](opts)
        crit:forward(x, y1)
        H.assert_close(crit:backward(x, y2), F[d.name .. "_backward"](x, y2, 1, opts), { rtol = 1e-6, atol = 1e-7 })
      end)
    end
  end
end)
