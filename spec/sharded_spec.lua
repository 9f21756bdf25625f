-- Losses sharded over a communicator's ranks on the CPU (suite 'cpu': the margin losses,
-- Partial FC, InfoNCE): ranks as processes
-- started by tools/launch.sh running spec/sharded_worker.lua, each comparing its sharded
-- loss and gradients with the single-device loss of the gathered batch; and the comm
-- option's refusals in this process.
local H = require "spec.helpers"
local ploss = H.ploss

local function expect_ok(n, mode, args, env)
  H.expect_ranks_ok(n, "spec/sharded_worker.lua", mode, args, "PLOSS_COMM_TIMEOUT=60 " .. (env or ""))
end

describe("losses sharded over ranks on the CPU (tools/launch.sh)", function()
  for _, n in ipairs { 2, 3 } do
    for _, dtype in ipairs { "f64", "f32" } do
      it(string.format("%d ranks, %s: AM-softmax, ArcFace, combined margin equal the single-device loss " ..
        "of the gathered batch (every reduction, forward, backward, fused)", n, dtype), function()
        expect_ok(n, "margin", "cpu " .. dtype)
      end)
    end
    it(n .. " ranks: Partial FC draws per block and equals the single-device loss over the kept classes", function()
      expect_ok(n, "partial_fc", "cpu f64")
    end)
  end
  for _, n in ipairs { 2, 3 } do
    for _, dtype in ipairs { "f64", "f32" } do
      it(string.format("%d ranks, %s: InfoNCE with every rank's negatives equals the single-device loss " ..
        "(symmetric or not, normalised or not, every reduction and pass)", n, dtype), function()
        expect_ok(n, "info_nce", "cpu " .. dtype)
      end)
    end
  end
  it("2 ranks, blocks of 700 and 1400 classes, 1000 rows: several tiles of rows, the same on both ranks", function()
    expect_ok(2, "margin", "cpu f64", "PLOSS_SHARD_UNEVEN=1 PLOSS_SHARD_BASE=700 PLOSS_SHARD_ROWS=500")
  end)
  it("2 ranks, Partial FC over blocks of 1500 and 3000 classes: kept counts differ, tiles do not", function()
    expect_ok(2, "partial_fc", "cpu f64", "PLOSS_SHARD_UNEVEN=1 PLOSS_SHARD_BASE=1500 PLOSS_SHARD_ROWS=800")
  end)
  it("2 ranks, Partial FC with one row per rank: each block keeps at least two classes", function()
    expect_ok(2, "partial_fc", "cpu f64", "PLOSS_SHARD_ROWS=1")
  end)
  it("3 ranks, bf16 inputs: the sharded losses equal the reference on the rounded inputs", function()
    expect_ok(3, "margin", "cpu bf16")
  end)
  it("a refusal on one rank is an error on every rank, and the communicator still serves", function()
    expect_ok(3, "refusal", "cpu f64")
  end)
  it("a refusal in Lua on one rank (before the ranks meet) aborts the communicator: no rank pairs it with " ..
    "another call", function()
    for _, case in ipairs { "list", "missing", "pfc" } do expect_ok(3, "lua_refusal", "cpu f64 " .. case) end
  end)
end)

describe("the comm option", function()
  local x = ploss.randn({ 4, 3 }, { seed = 1 })
  local w = ploss.randn({ 5, 3 }, { seed = 2 })
  local y = ploss.tensor({ 0, 1, 2, 4 }, { dtype = "i64" })

  it("one rank: the sharded loss is the single-device loss", function()
    local comm = ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id() }
    for _, red in ipairs { "mean", "none" } do
      local l0, gx0, gw0 = ploss.ArcFaceLoss { reduction = red }(x, w, y)
      local l, gx, gw = ploss.ArcFaceLoss { reduction = red, comm = comm }(x, w, y)
      H.assert_close(l, l0, { rtol = 1e-6, atol = 1e-7 })
      H.assert_close(gx, gx0, { rtol = 1e-6, atol = 1e-7 })
      H.assert_close(gw, gw0, { rtol = 1e-6, atol = 1e-7 })
    end
    comm:destroy()
  end)

  it("refuses what is not a communicator, and a destroyed one", function()
    H.expect_error(function() ploss.AMSoftmaxLoss { comm = 3 } end, "comm: expected a communicator")
    local comm = ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id() }
    local crit = ploss.AMSoftmaxLoss { comm = comm }
    comm:destroy()
    H.expect_error(function() crit(x, w, y) end, "the communicator was destroyed")
  end)

  it("names the option in tostring", function()
    local comm = ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id() }
    local s = tostring(ploss.PartialFCLoss { comm = comm })
    assert(s:find("comm = ploss.comm(rank 0 of 1, cpu)", 1, true), s)
    comm:destroy()
  end)
end)
