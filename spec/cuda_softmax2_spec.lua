-- CUDA spec of softmax family II (suite 'cuda'; spec/run.lua exits 77 without a GPU):
-- every op and loss on the GPU against the CPU backend, in f32, f16, bf16 (and f64), on
-- the row-contiguous (N×C) and class-strided (N×C×H×W) layouts, plus the CUDA-only
-- behaviour (invalid labels through the context's error slot, no host round trip).
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local DTYPES = { "f32", "f16", "bf16", "f64" }

-- tolerance of a CUDA result against the CPU on the same (rounded) inputs
local function tol(dt, what, scale)
  local t = H.tol[dt]
  scale = scale or 1
  return { rtol = t.rtol * scale, atol = t.atol * scale, what = what }
end

describe("CUDA one_hot", function()
  it("matches the CPU for every output dtype, layouts and smoothing", function()
    H.seed(101)
    for _, sizes in ipairs { { 7 }, { 3, 5, 4 }, { 2, 33, 17 } } do
      local y = H.random_labels(sizes, 6, { ignore = 0.2, ignore_index = -1 })
      for _, dt in ipairs { "f32", "f16", "bf16", "f64", "i64", "u8" } do
        local opts = { dtype = dt, label_smoothing = (dt == "i64" or dt == "u8") and 0 or 0.1 }
        local ref = ploss.one_hot(y, 6, opts)
        local got = ploss.one_hot(y:cuda(), 6, opts)
        assert.are.equal("cuda:0", got:device())
        H.assert_equal(got:cpu(), ref, { what = dt .. " " .. table.concat(sizes, "x") })
      end
    end
  end)

  it("reports an invalid label at the next synchronisation and writes a zero row", function()
    local y = ploss.tensor({ 0, 9, 1 }, { dtype = "i64" }):cuda()
    local out = ploss.one_hot(y, 3)
    H.expect_error(function() ploss.synchronize("cuda") end, "PLOSS_ERR_INVALID_LABEL")
    H.assert_equal(out:cpu(), { { 1, 0, 0 }, { 0, 0, 0 }, { 0, 1, 0 } })
    ploss.synchronize("cuda") -- the slot was cleared
  end)
end)
