-- Communicators on CUDA through NCCL (suite 'cuda'; spec/run.lua exits 77 before this file
-- without a GPU; PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU backend as a dry run).
-- One rank on the first GPU: every collective gives back its input, queued or waited for;
-- with two or more GPUs, two ranks as two processes (tools/launch.sh, spec/comm_worker.lua)
-- against hand-computed values, and a stalled rank that gives the timeout error.
local H = require "spec.helpers"
local ploss = H.ploss
local DEV = H.cuda_spec_device()
local on_cpu = DEV == "cpu"

describe("communicator on " .. DEV .. ", one rank", function()
  it("every collective gives back its input, every dtype", function()
    local comm = ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id(), device = DEV, timeout = 60 }
    assert.are.equal(ploss.parse_device(DEV), comm:device())
    for _, dtype in ipairs { "f32", "f64", "f16", "bf16", "i64", "i32", "u8" } do
      local x = ploss.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = dtype }):to(DEV)
      local y = comm:all_reduce(x:clone())
      assert.are.equal(comm:device(), y:device())
      H.assert_equal(y, x)
      H.assert_equal(comm:all_reduce(x:clone(), "max"), x)
      H.assert_equal(comm:all_gather(x), x)
      H.assert_equal(comm:reduce_scatter(x), x)
    end
    -- a large tensor, a non-contiguous one (reduced in place through a copy)
    local big = ploss.randn({ 4 * 1024 * 1024 + 3 }, { seed = 3 }):to(DEV)
    H.assert_equal(comm:all_reduce(big:clone()), big)
    local base = ploss.randn({ 64, 48 }, { seed = 4 }):to(DEV)
    local t = base:clone():t()
    comm:all_reduce(t)
    H.assert_equal(t, base:t())
    comm:destroy()
  end)

  it("queued collectives (wait = false) and comm:synchronize()", function()
    local comm = ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id(), device = DEV, wait = false }
    local x = ploss.randn({ 1000 }, { seed = 5 }):to(DEV)
    local g = comm:all_gather(x)
    local s = comm:all_reduce(x:clone())
    comm:synchronize()
    H.assert_equal(g, x)
    H.assert_equal(s, x)
    comm:destroy()
  end)

  it("refuses tensors of another device", function()
    if on_cpu then
      pending("dry run on the CPU: no other device")
      return
    end
    local comm = ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id(), device = DEV }
    H.expect_error(function() comm:all_reduce(ploss.ones(4)) end, "the tensor is on cpu but the communicator on cuda:0")
    comm:destroy()
  end)
end)

describe("communicator on CUDA, two ranks on two GPUs (tools/launch.sh)", function()
  local function launch(mode, env) return H.launch(2, "spec/comm_worker.lua", mode .. " cuda", env) end

  local two = not on_cpu and ploss.cuda_device_count() >= 2

  it("all-reduce, all-gather, reduce-scatter equal the hand-computed values on both ranks", function()
    if not two then pending("needs two GPUs") return end
    local out, status = launch("collectives")
    assert.are.equal(0, status, out)
    local k = 0
    for _ in out:gmatch("collectives ok") do k = k + 1 end
    assert.are.equal(2, k, out)
  end)

  it("a rank that never reaches the collective: the other fails with the timeout error", function()
    if not two then pending("needs two GPUs") return end
    local out, status = launch("stall", "PLOSS_COMM_TIMEOUT=5")
    assert.are_not.equal(0, status, out)
    assert.matches("stall ok", out)
    assert.matches("timed out after 5 s", out)
  end)
end)
