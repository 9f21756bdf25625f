-- Losses sharded over ranks on CUDA through NCCL (suite 'cuda'; spec/run.lua exits 77 before
-- this file without a GPU; PLOSS_CUDA_SPEC_DEVICE=cpu runs it on the CPU as a dry run).
-- spec/sharded_worker.lua compares each rank's sharded loss and gradients with the
-- single-device f64 loss of the gathered batch on the CPU: one rank on the first GPU (the
-- sharded kernels — per-tile row statistics, their gather, the gradient from the merged
-- statistics — against the reference), and two ranks when two GPUs are visible.
local H = require "spec.helpers"
local ploss = H.ploss
local DEV = H.cuda_spec_device()
local device = DEV == "cpu" and "cpu" or "cuda"

local function expect_ok(n, mode, dtype, env)
  H.expect_ranks_ok(n, "spec/sharded_worker.lua", mode, device .. " " .. dtype, "PLOSS_COMM_TIMEOUT=120 " .. (env or ""))
end

describe("margin losses sharded on " .. DEV .. ", one rank", function()
  for _, dtype in ipairs { "f32", "bf16" } do
    it(dtype .. ": AM-softmax, ArcFace, combined margin equal the f64 reference (every reduction and pass)", function()
      expect_ok(1, "margin", dtype)
    end)
  end
  it("f32, 700 classes (rows longer than a block of threads)", function()
    expect_ok(1, "margin", "f32", "PLOSS_SHARD_BASE=700")
  end)
  it("f32, tiles of 4 rows (the statistics gathered per tile)", function()
    expect_ok(1, "margin", "f32", "PLOSS_SHARD_TILE_ROWS=4")
  end)
  it("Partial FC over the block's kept classes", function() expect_ok(1, "partial_fc", "f32") end)
  for _, dtype in ipairs { "f32", "bf16" } do
    it(dtype .. ": InfoNCE equals the f64 reference (symmetric or not, every reduction and pass)", function()
      expect_ok(1, "info_nce", dtype)
    end)
  end
  it("Partial FC, 700 classes (drawn on the device)", function()
    expect_ok(1, "partial_fc", "f32", "PLOSS_SHARD_BASE=700")
  end)
end)

describe("margin losses sharded on CUDA, two ranks on two GPUs", function()
  local two = DEV ~= "cpu" and ploss.cuda_device_count and ploss.cuda_device_count() >= 2
  local cases = {
    { "margin" }, { "partial_fc" }, { "info_nce" }, { "refusal" },
    { "margin", "PLOSS_SHARD_UNEVEN=1 PLOSS_SHARD_BASE=700 PLOSS_SHARD_ROWS=500 PLOSS_SHARD_TILE_ROWS=300" },
    { "partial_fc", "PLOSS_SHARD_UNEVEN=1 PLOSS_SHARD_BASE=1500 PLOSS_SHARD_ROWS=800" },
  }
  for _, case in ipairs(cases) do
    it(case[1] .. (case[2] and " (" .. case[2] .. ")" or ""), function()
      if not two then
        pending("needs two GPUs")
        return
      end
      expect_ok(2, case[1], "f32", case[2])
    end)
  end
end)
