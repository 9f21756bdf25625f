--- ploss side of the CPU benchmark (bench/cpu.sh): one case, one JSON line.
--   luajit bench/cpu_ploss.lua CASES_JSON ID RUNS WARMUP
-- Times crit(x, t) (fused: loss and gradient in one pass) and crit:forward then
-- crit:backward, wall clock, median of RUNS after WARMUP.  Threads: OMP_NUM_THREADS.
local script_dir = (arg and arg[0] and arg[0]:match("^(.*)/[^/]*$")) or "."
package.path = script_dir .. "/?.lua;" .. package.path
local json = require "json"
local ploss = require "ploss"
local ffi = require "ffi"
ffi.cdef [[ struct ploss_cpu_ts { long tv_sec; long tv_nsec; }; int clock_gettime(int, struct ploss_cpu_ts *); ]]
local ts = ffi.new("struct ploss_cpu_ts")
local function now() ffi.C.clock_gettime(1, ts); return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9 end

local path, id, runs, warmup = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4])
local f = assert(io.open(path)); local cases = json.decode(f:read("*a")).cases; f:close()
local case
for _, c in ipairs(cases) do if c.id == id then case = c end end
assert(case, "unknown case " .. tostring(id))

local x = ploss.randn(case.shape, {seed = 1, std = 2})
local t
if case.target == "index" then
  local ls = {case.shape[1]}
  for i = 3, #case.shape do ls[#ls + 1] = case.shape[i] end
  t = ploss.randint(0, case.shape[2], ls, {seed = 2})
  local ign = ploss.randint(0, 16, ls, {seed = 3})
  local tp, ip = ffi.cast("int64_t *", t:dl().data), ffi.cast("int64_t *", ign:dl().data)
  for i = 0, t:numel() - 1 do if ip[i] == 0 then tp[i] = case.opts.ignore_index end end
else
  t = ploss.randint(0, 2, case.shape, {seed = 2, dtype = "f32"})
end
local crit = ploss[case.criterion](case.opts)

local function median(fn)
  for _ = 1, warmup do fn() end
  local v = {}
  for r = 1, runs do local t0 = now(); fn(); v[r] = (now() - t0) * 1e3 end
  table.sort(v)
  return v[math.floor((runs + 1) / 2)]
end
local fused = median(function() return crit(x, t) end)
local fwd_bwd = median(function() crit:forward(x, t); return crit:backward(x, t) end)
io.write(json.encode({side = "ploss", id = id, threads = tonumber(os.getenv("OMP_NUM_THREADS")),
                      fused_ms = fused, fwd_bwd_ms = fwd_bwd}), "\n")
