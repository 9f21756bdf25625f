-- spec/comm_worker.lua MODE [DEVICE] — one rank of the communicator specs, started by
-- tools/launch.sh (spec/comm_spec.lua, spec/cuda_comm_spec.lua).  DEVICE: 'cpu' (default)
-- or 'cuda' (rank r on cuda:r).  PLOSS_COMM_TIMEOUT: the communicator's timeout (s).
-- Modes (each prints "rank R: MODE ok" when every check of this rank passed; a failed check
-- is a Lua error, exit status 1):
--   collectives  all-reduce (sum, max), all-gather, reduce-scatter against values computed
--                by hand, every dtype, several chunks, empty, non-contiguous and in place,
--                a mismatched collective (an error on every rank, then the communicator
--                still works), reduce-scatter of a size not divisible by the ranks
--   determinism  sums of random f32 / bf16 values equal the rank-order sums bitwise;
--                prints "digest R HEX" of the results
--   leave        rank 0 destroys its communicator right after init; every rank's init
--                succeeded (a race with the others' wait for the join)
--   exit         the last rank exits (status 0) without a collective; the others expect
--                an error naming it, then exit with 1
--   stall        the last rank spins without entering the collective; the others expect
--                the timeout error, then exit with 1 (the launcher stops the staller)
--   abort        rank 1 aborts; the others expect the error naming it, then exit with 1
--   fail         rank 1 exits with status 3 at once; the others spin for 60 s (the
--                launcher must stop them)
--   nranks       the last rank joins with one rank too many: every rank fails to join
io.stdout:setvbuf("line")
local ffi = require "ffi"
local ploss = require "ploss"

local mode, device = arg[1], arg[2] or "cpu"
local timeout = tonumber(os.getenv("PLOSS_COMM_TIMEOUT") or "60")
local rank, size = tonumber(os.getenv("PLOSS_RANK")), tonumber(os.getenv("PLOSS_WORLD_SIZE"))

local function say(...) print(string.format("rank %d: ", rank) .. string.format(...)) end

local function spin(seconds)
  local t0 = os.time()
  while os.time() - t0 < seconds do end
end

local function same(got, want, what)
  if #got ~= #want then error(string.format("%s: %d values, expected %d", what, #got, #want), 2) end
  for i = 1, #want do
    local g, w = got[i], want[i]
    if not (g == w or (g ~= g and w ~= w)) then
      error(string.format("%s: value %d is %.17g, expected %.17g", what, i, g, w), 2)
    end
  end
end

local function expect_error(fn, fragment, what)
  local ok, err = pcall(fn)
  if ok then error(what .. ": expected an error containing '" .. fragment .. "', got none", 2) end
  if not tostring(err):find(fragment, 1, true) then
    error(what .. ": expected an error containing '" .. fragment .. "', got: " .. tostring(err), 2)
  end
  return tostring(err)
end

if mode == "nranks" then
  local n = rank == size - 1 and size + 1 or size
  local ok, err = pcall(ploss.comm.init, { nranks = n, rank = rank, id = os.getenv("PLOSS_COMM_ID"),
                                           device = device, timeout = timeout })
  if ok then error("joined a communicator whose ranks disagree on nranks") end
  say("init failed: %s", tostring(err))
  os.exit(1)
end

if mode == "fail_before_init" then -- rank 1 fails before init: the launcher stops the others in init
  if rank == 1 then say("failing before init, id %s", os.getenv("PLOSS_COMM_ID")); os.exit(3) end
end

local comm = ploss.comm.init_from_env { device = device, timeout = timeout }
assert(comm:rank() == rank and comm:size() == size)
if mode == "leave" then -- rank 0 leaves at once: the others' init must still succeed
  if rank == 0 then comm:destroy() end
  say("leave ok")
  os.exit(0)
end
device = comm:device() -- 'cuda' is cuda:<rank>
local n = size

local function on_device(t) return t:to(device) end

if mode == "collectives" then
  local tri = n * (n + 1) / 2
  -- all-reduce, sum and max, every dtype (small integers: exact everywhere)
  for _, dtype in ipairs { "f32", "f64", "f16", "bf16", "i32", "i64", "u8" } do
    local t = on_device(ploss.tensor({ rank + 1, 2 * (rank + 1), dtype == "u8" and 3 or -(rank + 1) }, { dtype = dtype }))
    comm:all_reduce(t)
    same(t:flat(), { tri, 2 * tri, dtype == "u8" and 3 * n or -tri }, "all_reduce sum " .. dtype)
    local m = on_device(ploss.tensor({ rank, dtype == "u8" and 7 or -rank, rank == 1 and 100 or 0 }, { dtype = dtype }))
    comm:all_reduce(m, "max")
    same(m:flat(), { n - 1, dtype == "u8" and 7 or 0, n >= 2 and 100 or 0 }, "all_reduce max " .. dtype)
  end
  -- integer sums wrap around; float max skips a NaN unless every rank has one
  local w = on_device(ploss.tensor({ 2147483647 }, { dtype = "i32" }))
  comm:all_reduce(w)
  local wrapped = (n * 2147483647) % 2 ^ 32
  same(w:flat(), { wrapped >= 2 ^ 31 and wrapped - 2 ^ 32 or wrapped }, "all_reduce i32 wrap")
  local u = on_device(ploss.tensor({ 250 }, { dtype = "u8" }))
  comm:all_reduce(u)
  same(u:flat(), { (250 * n) % 256 }, "all_reduce u8 wrap")
  local nan = on_device(ploss.tensor({ rank == 0 and 0 / 0 or 1, 0 / 0 }, { dtype = "f32" }))
  comm:all_reduce(nan, "max")
  same(nan:flat(), { n >= 2 and 1 or 0 / 0, 0 / 0 }, "all_reduce max NaN")

  -- all-gather of a 2×3 block: rows 2r, 2r + 1 of the result are rank r's
  for _, dtype in ipairs { "f32", "i64", "bf16", "u8" } do
    local t = on_device(ploss.tensor({ { 10 * rank, 10 * rank + 1, 10 * rank + 2 },
                                       { 10 * rank + 3, 10 * rank + 4, 10 * rank + 5 } }, { dtype = dtype }))
    local g = comm:all_gather(t)
    assert(g:dim() == 2 and g:size(1) == 2 * n and g:size(2) == 3 and g:dtype() == dtype, "all_gather shape")
    local want = {}
    for q = 0, n - 1 do for k = 0, 5 do want[#want + 1] = 10 * q + k end end
    same(g:flat(), want, "all_gather " .. dtype)
  end

  -- reduce-scatter of a (2n)×2 tensor: rank r gets rows 2r, 2r + 1 of the sum (the max)
  local rows = {}
  for k = 0, 2 * n - 1 do rows[k + 1] = { (rank + 1) * 2 * k, (rank + 1) * (2 * k + 1) } end
  for _, op in ipairs { "sum", "max" } do
    local s = comm:reduce_scatter(on_device(ploss.tensor(rows, { dtype = "f64" })), op)
    assert(s:dim() == 2 and s:size(1) == 2 and s:size(2) == 2, "reduce_scatter shape")
    local f = op == "sum" and tri or n
    local want = {}
    for k = 2 * rank, 2 * rank + 1 do want[#want + 1] = f * 2 * k; want[#want + 1] = f * (2 * k + 1) end
    same(s:flat(), want, "reduce_scatter " .. op)
  end

  -- several chunks of the CPU staging buffers (1 MiB a slot): 700,001 f32, 300,001 f64
  local big_n = 700001
  local big = ploss.empty({ big_n }, { dtype = "f32" })
  local p = ffi.cast("float *", big:dl().data)
  for i = 0, big_n - 1 do p[i] = i % 1000 + rank end
  local r = comm:all_reduce(on_device(big)):to("cpu")
  local q = ffi.cast("float *", r:dl().data)
  for i = 0, big_n - 1 do
    local want = n * (i % 1000) + n * (n - 1) / 2
    if q[i] ~= want then error(string.format("all_reduce big: element %d is %g, expected %g", i, q[i], want)) end
  end
  local gn = 300001
  local gsrc = ploss.empty({ gn }, { dtype = "f64" })
  local gp = ffi.cast("double *", gsrc:dl().data)
  for i = 0, gn - 1 do gp[i] = i + 1e6 * rank end
  local gg = comm:all_gather(on_device(gsrc)):to("cpu")
  local ggp = ffi.cast("double *", gg:dl().data)
  for k = 0, n * gn - 1 do
    local want = k % gn + 1e6 * math.floor(k / gn)
    if ggp[k] ~= want then error(string.format("all_gather big: element %d is %g, expected %g", k, ggp[k], want)) end
  end
  local rs_n = 200000
  local rsrc = ploss.empty({ n * rs_n }, { dtype = "f32" })
  local rp = ffi.cast("float *", rsrc:dl().data)
  for i = 0, n * rs_n - 1 do rp[i] = i % 4096 + rank end
  local rr = comm:reduce_scatter(on_device(rsrc)):to("cpu")
  local rrp = ffi.cast("float *", rr:dl().data)
  for i = 0, rs_n - 1 do
    local want = n * ((rank * rs_n + i) % 4096) + n * (n - 1) / 2
    if rrp[i] ~= want then error(string.format("reduce_scatter big: element %d is %g, expected %g", i, rrp[i], want)) end
  end

  -- empty tensors; a transposed (non-contiguous) tensor reduced in place
  local e = comm:all_reduce(on_device(ploss.empty({ 0 }, { dtype = "f32" })))
  assert(e:numel() == 0)
  assert(comm:all_gather(on_device(ploss.empty({ 0, 4 }))):size(1) == 0)
  local base = on_device(ploss.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, { dtype = "f32" }))
  local tt = base:t()
  local back = comm:all_reduce(tt)
  assert(rawequal(back, tt), "all_reduce returns its tensor")
  same(tt:flat(), { n, 3 * n, 5 * n, 2 * n, 4 * n, 6 * n }, "all_reduce transposed")
  same(base:flat(), { n, 2 * n, 3 * n, 4 * n, 5 * n, 6 * n }, "all_reduce transposed (storage)")

  if n >= 2 and device == "cpu" then
    -- a rank calling with another size: an error on every rank, and the communicator goes on
    local bad = on_device(ploss.tensor(rank == 0 and { 1, 2, 3 } or { 1, 2, 3, 4 }, { dtype = "f32" }))
    expect_error(function() comm:all_reduce(bad) end, "every rank must call the same collectives", "mismatch")
    local one = comm:all_reduce(on_device(ploss.tensor({ 1 }, { dtype = "f32" })))
    same(one:flat(), { n }, "all_reduce after a mismatch")
    -- another op: both ranks' ops named
    local t2 = on_device(ploss.tensor({ 1, 2 }, { dtype = "f32" }))
    expect_error(function() comm:all_reduce(t2, rank == 0 and "max" or "sum") end,
      rank == 0 and "while rank 0 called all_reduce on 2 f32 elements with op max"
      or "rank 0 called all_reduce on 2 f32 elements with op max while rank " .. rank ..
        " called all_reduce on 2 f32 elements with op sum", "another op")
  end
  if n >= 2 then
    expect_error(function() comm:reduce_scatter(on_device(ploss.zeros({ n + 1, 2 }))) end,
      "not divisible by the " .. n .. " ranks", "reduce_scatter divisibility")
  end
  say("collectives ok")

elseif mode == "determinism" then
  local len = 100003
  local f = ffi.new("float[1]")
  local inputs = {}
  for q = 0, n - 1 do inputs[q] = ploss.randn({ len }, { dtype = "f32", seed = 1000 + q }) end
  -- the rank-order sum with one f32 rounding per addition
  local want = ploss.empty({ len }, { dtype = "f32" })
  local wp = ffi.cast("float *", want:dl().data)
  local ptrs = {}
  for q = 0, n - 1 do ptrs[q] = ffi.cast("float *", inputs[q]:dl().data) end
  for i = 0, len - 1 do
    local acc = ptrs[0][i]
    for q = 1, n - 1 do f[0] = acc + ptrs[q][i]; acc = f[0] end
    wp[i] = acc
  end
  local got = comm:all_reduce(inputs[rank]:clone())
  local gp = ffi.cast("float *", got:dl().data)
  for i = 0, len - 1 do
    if gp[i] ~= wp[i] then error(string.format("f32 sum: element %d is %.9g, expected %.9g (rank order)", i, gp[i], wp[i])) end
  end
  -- bf16: summed in f32 (one rounding per addition, exact for the bf16 values' first
  -- sums), rounded to bf16 once
  local bf_sum = ploss.empty({ len }, { dtype = "f32" })
  local bp = ffi.cast("float *", bf_sum:dl().data)
  for q = 0, n - 1 do
    local rounded = inputs[q]:bfloat16():float() -- (kept alive while v is read)
    local v = ffi.cast("float *", rounded:dl().data)
    for i = 0, len - 1 do
      if q == 0 then bp[i] = v[i] else f[0] = bp[i] + v[i]; bp[i] = f[0] end
    end
  end
  local hb = comm:all_reduce(inputs[rank]:bfloat16())
  same(hb:flat(), bf_sum:bfloat16():flat(), "bf16 sum")
  local h = 14695981039346656037ULL -- FNV-1a, 64-bit, of the f32 result's bytes
  local bytes = ffi.cast("const uint8_t *", gp)
  for i = 0, 4 * len - 1 do h = bit.bxor(h, bytes[i]) * 1099511628211ULL end
  print(string.format("digest %d %s", rank, bit.tohex(h)))
  say("determinism ok")

elseif mode == "exit" or mode == "stall" or mode == "abort" then
  local culprit = mode == "abort" and 1 or n - 1
  if rank == culprit then
    if mode == "exit" then say("exiting"); os.exit(0) end
    if mode == "abort" then comm:abort(); say("aborted"); os.exit(0) end
    spin(60)
    os.exit(0)
  end
  local t0 = os.time()
  local fragment = mode == "exit" and ("rank " .. culprit .. " has exited") or
                   mode == "abort" and ("rank " .. culprit .. " called ploss_comm_abort") or
                   "timed out"
  -- (stall: a rank may also see the abort of another rank that timed out first)
  local err = expect_error(function() comm:all_reduce(on_device(ploss.ones({ 4 }))) end,
    mode == "stall" and "timed out" or fragment, mode)
  -- the communicator stays unusable
  expect_error(function() comm:all_reduce(on_device(ploss.ones({ 4 }))) end, "unusable", mode .. " (again)")
  say("%s ok after %d s: %s", mode, os.time() - t0, err)
  -- the first rank to fail makes the launcher stop the others: a moment for every rank to
  -- have said its line (each saw the failure within 50 ms) before this one fails
  os.execute("sleep 1")
  os.exit(1)

elseif mode == "fail" then
  if rank == 1 then say("failing"); os.exit(3) end
  spin(60)
  say("was not stopped")
  os.exit(0)

else
  error("unknown mode " .. tostring(mode))
end
comm:destroy()
