-- Communicators on the CPU (suite 'cpu'): ranks as processes started by tools/launch.sh
-- running spec/comm_worker.lua (collectives against hand-computed values, determinism,
-- failures that must not hang), and the bad-input messages in this process.
local ffi = require "ffi"
local H = require "spec.helpers"
local ploss = H.ploss
local C = ploss.C

local launcher = H.root .. "/tools/launch.sh"
local worker = H.root .. "/spec/comm_worker.lua"

-- Run the worker on n ranks; returns its output, the launcher's exit status, the seconds taken.
local function launch(n, mode, env) return H.launch(n, "spec/comm_worker.lua", mode, env) end

local function count(text, pattern)
  local k = 0
  for _ in text:gmatch(pattern) do k = k + 1 end
  return k
end

describe("communicators on the CPU, as processes (tools/launch.sh)", function()
  for _, n in ipairs { 2, 3 } do
    it(n .. " ranks: all-reduce, all-gather, reduce-scatter equal the hand-computed values on every rank", function()
      local out, status = launch(n, "collectives")
      assert.are.equal(0, status, out)
      assert.are.equal(n, count(out, "collectives ok"), out)
    end)

    it(n .. " ranks: sums in rank order, bitwise the same on every rank and in every run", function()
      local digests = {}
      for run = 1, 2 do
        local out, status = launch(n, "determinism")
        assert.are.equal(0, status, out)
        assert.are.equal(n, count(out, "determinism ok"), out)
        for r, d in out:gmatch("digest (%d+) (%x+)") do digests[#digests + 1] = d .. " (run " .. run .. ", rank " .. r .. ")" end
      end
      assert.are.equal(2 * n, #digests)
      for i = 2, #digests do assert.are.equal(digests[1]:match("^%x+"), digests[i]:match("^%x+"), table.concat(digests, "\n")) end
    end)
  end

  it("a rank that destroys its communicator right after init: every rank's init still succeeds", function()
    for _ = 1, 5 do -- a race between the first rank's destroy and the others' wait for the join
      local out, status = launch(3, "leave")
      assert.are.equal(0, status, out)
      assert.are.equal(3, count(out, "leave ok"), out)
    end
  end)

  it("a rank that exits early: the others fail at once naming it, the launcher exits non-zero", function()
    local out, status, secs = launch(3, "exit", "PLOSS_COMM_TIMEOUT=30")
    assert.are_not.equal(0, status, out)
    assert.are.equal(2, count(out, "exit ok"), out)
    assert.are.equal(2, count(out, "rank 2 has exited without destroying its communicator"), out)
    assert.is_true(secs < 20, "took " .. secs .. " s:\n" .. out)
  end)

  it("a rank that never reaches the collective: the others fail with the timeout error", function()
    local out, status, secs = launch(2, "stall", "PLOSS_COMM_TIMEOUT=1")
    assert.are_not.equal(0, status, out)
    assert.are.equal(1, count(out, "stall ok"), out)
    assert.matches("timed out after 1 s waiting for the other ranks to reach the collective %(rank 1%)", out)
    -- with three ranks, the one that did not time out first also names the straggler (2)
    out = launch(3, "stall", "PLOSS_COMM_TIMEOUT=1")
    assert.are.equal(2, count(out, "stall ok"), out)
    for line in out:gmatch("[^\n]*stall ok[^\n]*") do
      assert.is_truthy(line:find("(rank 2)", 1, true) or line:find("rank 2 did not arrive in time", 1, true), line)
    end
    assert.is_true(secs < 20, "took " .. secs .. " s:\n" .. out)
  end)

  it("a rank that aborts: the others fail at once naming it", function()
    local out, status = launch(3, "abort", "PLOSS_COMM_TIMEOUT=30")
    assert.are_not.equal(0, status, out)
    assert.are.equal(2, count(out, "rank 1 called ploss_comm_abort"), out)
  end)

  it("ranks that disagree on nranks all fail to join", function()
    local out, status, secs = launch(2, "nranks", "PLOSS_COMM_TIMEOUT=30")
    assert.are_not.equal(0, status, out)
    -- the first rank to fail makes the launcher stop the other, which may not have printed
    -- yet: at least one reports, and none joined
    assert.is_true(count(out, "init failed") >= 1, out)
    assert.are.equal(0, count(out, "joined a communicator"), out)
    assert.matches("nranks", out)
    assert.is_true(secs < 20, "took " .. secs .. " s:\n" .. out)
  end)

  it("the launcher stops the other ranks when one fails, and exits with its status", function()
    local out, status, secs = launch(3, "fail", "PLOSS_LAUNCH_GRACE=2")
    assert.are.equal(3, status, out)
    assert.matches("rank 1 %(pid %d+%) failed with status 3; stopping the others", out)
    assert.is_nil(out:find("was not stopped", 1, true), out)
    assert.is_true(secs < 20, "took " .. secs .. " s:\n" .. out)
  end)

  it("a rank that fails at once, before the others have started: the launcher ends every time", function()
    -- a rank stopped before it opened its output FIFO left that FIFO's filter waiting for a
    -- writer, and the launcher waiting for the filter, in about half of such runs
    local tmp = os.tmpname()
    local script = tmp .. ".lua" -- the launcher runs a .lua file with luajit
    local f = assert(io.open(script, "w"))
    f:write('if os.getenv("PLOSS_RANK") == "0" then os.exit(3) end\n',
      'local t = os.clock() while os.clock() - t < 30 do end\n')
    f:close()
    for _ = 1, 6 do
      local t0 = os.time()
      -- (under `timeout`: a launcher that hangs fails here, with 124, rather than the suite)
      local p = assert(io.popen(string.format("PLOSS_LAUNCH_GRACE=2 timeout 30 %q -n 4 %q 2>&1; echo \"EXIT:$?\"",
        H.root .. "/tools/launch.sh", script)))
      local out = p:read("*a")
      p:close()
      assert.are.equal("3", out:match("EXIT:(%d+)%s*$"), out)
      assert.is_true(os.time() - t0 < 15, "took " .. (os.time() - t0) .. " s:\n" .. out)
    end
    os.remove(script)
    os.remove(tmp)
  end)

  it("a rank that fails before init: the launcher stops the others and leaves no shared memory behind", function()
    local out, status = launch(3, "fail_before_init", "PLOSS_LAUNCH_GRACE=2")
    assert.are.equal(3, status, out)
    local id = out:match("failing before init, id (%x+)")
    assert.is_not_nil(id, out)
    local f = io.open("/dev/shm/ploss-comm-" .. id:sub(9, 56), "r")
    if f then f:close() end
    assert.is_nil(f, "the shared-memory segment was left in /dev/shm")
  end)

  it("a rank killed in init: the id's leftover place is refused by name, not joined", function()
    local id = ploss.comm.unique_id()
    -- rank 0 of 2 joins and is killed while it waits for rank 1 (once its place exists, and a
    -- moment for the claim that follows its creation, however slow the machine)
    local seg = "/dev/shm/ploss-comm-" .. id:sub(9, 56)
    local child = string.format("%q -e %q & pid=$!; for i in $(seq 400); do [ -e %q ] && break; sleep 0.05; done; " ..
      "sleep 0.5; kill -9 $pid; wait $pid; echo pid $pid", arg[-1] or "luajit",
      string.format("require('ploss').comm.init{nranks = 2, rank = 0, id = %q, timeout = 60}", id), seg)
    local p = assert(io.popen(child .. " 2>&1"))
    local dead = p:read("*a"):match("pid (%d+)")
    p:close()
    assert.is_not_nil(dead)
    -- a new rank 0 with that id: the place is taken by a process that has exited
    H.expect_error(function() ploss.comm.init { nranks = 2, rank = 0, id = id, timeout = 5 } end,
      "rank 0 of this id was taken by pid " .. dead .. ", which has exited")
    -- a rank 1 with that id: the join fails naming the dead rank, and the place is removed
    H.expect_error(function() ploss.comm.init { nranks = 2, rank = 1, id = id, timeout = 5 } end,
      "rank 0 has exited without destroying its communicator")
    local f = io.open("/dev/shm/ploss-comm-" .. id:sub(9, 56), "r")
    if f then f:close() end
    assert.is_nil(f, "the shared-memory segment was left in /dev/shm")
  end)

  it("a rank killed and not yet collected by its parent (a zombie) counts as exited", function()
    local id = ploss.comm.unique_id()
    local seg = "/dev/shm/ploss-comm-" .. id:sub(9, 56)
    local pidfile, script = os.tmpname(), os.tmpname()
    -- rank 0 joins under a parent that never collects it (the shell replaced by sleep)
    local f = assert(io.open(script, "w"))
    f:write(string.format("%q -e %q &\necho $! > %q\nexec sleep 20\n", arg[-1] or "luajit",
      string.format("require('ploss').comm.init{nranks = 2, rank = 0, id = %q, timeout = 60}", id), pidfile))
    f:close()
    os.execute(string.format("bash %q >/dev/null 2>&1 &", script))
    local pid
    for _ = 1, 400 do
      local f = io.open(pidfile)
      pid = f and f:read("*n")
      if f then f:close() end
      local g = io.open(seg)
      if g then g:close() end
      if pid and g then break end
      os.execute("sleep 0.05")
    end
    assert.is_not_nil(pid)
    os.execute("sleep 0.5; kill -9 " .. pid)
    finally(function() -- the zombie's parent (the sleep) ended: init collects it
      local f = io.open("/proc/" .. pid .. "/stat")
      local parent = f and f:read("*a"):match("%) %a (%d+)")
      if f then f:close() end
      os.execute(string.format("%skill %s >/dev/null 2>&1; rm -f %q %q", parent and "" or ": ", parent or "",
        pidfile, script))
    end)
    -- rank 1: its init (if rank 0 had joined, it succeeds) or its first collective fails at once
    local t0 = os.time()
    local ok, c = pcall(ploss.comm.init, { nranks = 2, rank = 1, id = id, timeout = 20 })
    local ok2, err = ok, c
    if ok then
      ok2, err = pcall(c.all_reduce, c, ploss.tensor({ 1 }))
      c:destroy()
    end
    assert.is_false(ok2)
    assert.matches("rank 0 has exited without destroying its communicator", tostring(err), 1, true)
    assert.is_true(os.time() - t0 <= 5, "the zombie was waited for")
  end)

  it("the launcher refuses a bad rank count", function()
    for _, bad in ipairs { "0", "x", "-1" } do
      local p = assert(io.popen(string.format("%q -n %s %q collectives 2>&1; echo \"EXIT:$?\"", launcher, bad, worker)))
      local out = p:read("*a")
      p:close()
      assert.matches("EXIT:2", out)
    end
  end)
end)

describe("communicators: one rank and bad input, in this process", function()
  local id = ploss.comm.unique_id()

  it("unique ids: 64 hex digits, never the same twice", function()
    assert.matches("^%x+$", id)
    assert.are.equal(64, #id)
    assert.are_not.equal(id, ploss.comm.unique_id())
  end)

  it("one rank: every collective gives back its input", function()
    local comm = ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id() }
    assert.are.equal(0, comm:rank())
    assert.are.equal(1, comm:size())
    assert.are.equal("cpu", comm:device())
    for _, dtype in ipairs { "f32", "f64", "f16", "bf16", "i64", "i32", "u8" } do
      local x = ploss.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = dtype })
      H.assert_equal(comm:all_reduce(x:clone()), x)
      H.assert_equal(comm:all_reduce(x:clone(), "max"), x)
      H.assert_equal(comm:all_gather(x), x)
      H.assert_equal(comm:reduce_scatter(x), x)
    end
    -- empty tensors, whatever their (contiguous) strides: nothing to exchange
    for _, sizes in ipairs { { 3, 0 }, { 0, 3 }, { 1, 0, 2 }, { 0 } } do
      local e = ploss.zeros(sizes)
      assert.are.same(sizes, comm:all_reduce(e):size())
      assert.are.same(sizes, comm:all_gather(e):size())
      assert.are.same(sizes, comm:reduce_scatter(e):size())
    end
    comm:destroy()
    comm:destroy() -- idempotent
    H.expect_error(function() comm:all_reduce(ploss.ones(2)) end, "the communicator was destroyed")
  end)

  it("refuses bad arguments to init with clear messages", function()
    H.expect_error(function() ploss.comm.init { nranks = 0, rank = 0, id = id } end, "nranks: expected an integer >= 1, got 0")
    H.expect_error(function() ploss.comm.init { nranks = 2, rank = 2, id = id } end, "rank: expected a rank in [0, 2), got 2")
    H.expect_error(function() ploss.comm.init { nranks = 2, rank = -1, id = id } end, "rank: expected an integer >= 0, got -1")
    H.expect_error(function() ploss.comm.init { nranks = 1, rank = 0, id = "abc" } end, "id: expected 64 hex digits")
    H.expect_error(function() ploss.comm.init { nranks = 1, rank = 0, id = id, wait = "no" } end,
      "comm.init: wait: expected true or false, got 'no'")
    H.expect_error(function() ploss.comm.init_from_env { wait = 0 } end,
      "comm.init_from_env: wait: expected true or false, got 0")
    H.expect_error(function() ploss.comm.init { nranks = 1, rank = 0, id = ("zz"):rep(32) } end, "id: expected 64 hex digits")
    local forged = id:sub(1, 63) .. (id:sub(64) == "0" and "1" or "0") -- another check value
    H.expect_error(function() ploss.comm.init { nranks = 1, rank = 0, id = forged } end,
      "id: not a unique id made by ploss_comm_unique_id")
    H.expect_error(function() ploss.comm.init { nranks = 1, rank = 0, id = id, timeout = -1 } end,
      "opts.timeout: expected a finite number of seconds > 0, got -1")
    H.expect_error(function() ploss.comm.init { nranks = 1, rank = 0, id = id, timeout = 1 / 0 } end,
      "opts.timeout: expected a finite number of seconds > 0")
    H.expect_error(function() ploss.comm.init(3) end, "comm.init: expected a table")
  end)

  it("init times out, naming the ranks that did not join, and leaves no shared memory behind", function()
    local lone = ploss.comm.unique_id()
    local t0 = os.time()
    H.expect_error(function() ploss.comm.init { nranks = 3, rank = 1, id = lone, timeout = 0.3 } end,
      "timed out after 0.3 s waiting for the other ranks to join (ranks 0, 2)")
    assert.is_true(os.time() - t0 < 5)
    local f = io.open("/dev/shm/ploss-comm-" .. lone:sub(9, 56), "r")
    if f then f:close() end
    assert.is_nil(f, "the shared-memory segment was left in /dev/shm")
    -- the id can be used again afterwards
    local comm = ploss.comm.init { nranks = 1, rank = 0, id = lone }
    comm:destroy()
  end)

  it("refuses unknown options", function()
    H.expect_error(function() ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id(), timout = 1 } end,
      "comm.init: unknown option 'timout'")
    H.expect_error(function() ploss.comm.init_from_env { devise = "cpu" } end, "comm.init_from_env: unknown option 'devise'")
  end)

  it("refuses bad tensors and ops with clear messages", function()
    local comm = ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id() }
    H.expect_error(function() comm:all_reduce({ 1, 2 }) end, "comm:all_reduce: expected a ploss tensor, got table")
    H.expect_error(function() comm:all_reduce(ploss.ones(2), "min") end, "op: expected 'sum' or 'max', got min")
    H.expect_error(function() comm:reduce_scatter(ploss.tensor(3)) end, "not divisible")
    -- through the C ABI: another device, dtypes, sizes, layouts, overlaps
    local p = comm.ptr
    local a = ploss.ones({ 4 })
    local function dl_on_cuda(t)
      local d = ffi.new("DLTensor", t:dl())
      d.device.device_type = 2
      return d
    end
    local function c_err(status, fragment)
      assert.are_not.equal(0, status)
      local msg = ffi.string(C.ploss_last_error())
      assert.is_truthy(msg:find(fragment, 1, true), msg)
      return ffi.string(C.ploss_status_string(status))
    end
    assert.are.equal("PLOSS_ERR_DEVICE", c_err(C.ploss_comm_all_reduce(p, dl_on_cuda(a), a:dl(), 0),
      "send: expected a tensor on cpu (the context's device), got f32[4] on cuda:0"))
    assert.are.equal("PLOSS_ERR_DTYPE", c_err(C.ploss_comm_all_reduce(p, a:dl(), ploss.ones({ 4 }, { dtype = "f64" }):dl(), 0),
      "recv: expected f32 (send's dtype)"))
    assert.are.equal("PLOSS_ERR_SHAPE", c_err(C.ploss_comm_all_reduce(p, a:dl(), ploss.ones({ 5 }):dl(), 0),
      "recv: expected 4 elements (send's)"))
    assert.are.equal("PLOSS_ERR_SHAPE", c_err(C.ploss_comm_all_gather(p, a:dl(), ploss.ones({ 3 }):dl()),
      "recv: expected 4 elements (1 ranks × send's 4)"))
    assert.are.equal("PLOSS_ERR_SHAPE", c_err(C.ploss_comm_reduce_scatter(p, a:dl(), ploss.ones({ 3 }):dl(), 0),
      "send: expected 3 elements (1 ranks × recv's 3)"))
    assert.are.equal("PLOSS_ERR_LAYOUT", c_err(C.ploss_comm_all_gather(p, ploss.ones({ 2, 2 }):t():dl(), ploss.ones({ 4 }):dl()),
      "send: a collective needs contiguous row-major memory"))
    local big = ploss.ones({ 8 })
    assert.are.equal("PLOSS_ERR_ALIAS", c_err(C.ploss_comm_all_reduce(p, big:narrow(1, 1, 4):dl(), big:narrow(1, 3, 4):dl(), 0),
      "recv"))
    assert.are.equal("PLOSS_ERR_INVALID_ARGUMENT", c_err(C.ploss_comm_all_reduce(p, a:dl(), a:dl(), 7),
      "op: expected PLOSS_REDUCE_SUM (0) or PLOSS_REDUCE_MAX (1), got 7"))
    assert.are.equal("PLOSS_ERR_INVALID_ARGUMENT", c_err(C.ploss_comm_all_reduce(nil, a:dl(), a:dl(), 0),
      "comm: communicator is NULL"))
    -- in place is allowed for all-reduce
    assert.are.equal(0, C.ploss_comm_all_reduce(p, a:dl(), a:dl(), 0))
    -- after an abort every call fails
    comm:abort()
    H.expect_error(function() comm:all_reduce(ploss.ones(2)) end, "unusable after an earlier failure")
    comm:destroy()
  end)
end)
