-- bench/sharded_partial_fc.lua — Partial FC with its classes sharded over ranks: the step time
-- of the fused loss (forward + backward, collectives included) and the memory per device.
--
--   tools/launch.sh -n 2 bench/sharded_partial_fc.lua [options]   the sharded run (R ranks)
--   luajit bench/sharded_partial_fc.lua --ranks 0 [options]       one device, no communicator
--   luajit bench/sharded_partial_fc.lua [options]                 one rank through the sharded
--                                                                 path (comm of one rank)
-- options: --rows 4096 (per rank) --dim 512 --classes 2000000 (over all ranks) --rate 0.1
--          --dtype bf16 --device cuda|cpu --iters 20 --warmup 3
-- Rank r holds classes/R centres (its block) and `rows` embeddings with global labels drawn
-- uniformly from all classes.  With --ranks 0 the one device holds classes/R centres (set
-- --classes to the per-device count you compare with) and `rows` rows.  Prints one line per
-- rank: ms per step (median over the iterations), the device's peak memory above the inputs,
-- and the loss (the same on every rank).
io.stdout:setvbuf("line")
local ffi = require "ffi"
local ploss = require "ploss"

ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_ts;
int clock_gettime(int clk, bench_ts *ts);
]]
local function now()
  local ts = ffi.new("bench_ts")
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local o = { rows = 4096, dim = 512, classes = 2000000, rate = 0.1, dtype = "bf16", device = "cuda", iters = 20,
            warmup = 3, ranks = nil }
local i = 1
while i <= #arg do
  local k = arg[i]:match("^%-%-(.+)$")
  if not k or o[k] == nil and k ~= "ranks" then error("unknown argument " .. tostring(arg[i])) end
  local v = arg[i + 1]
  o[k] = tonumber(v) or v
  i = i + 2
end

local comm, rank, R = nil, 0, 1
if o.ranks ~= 0 then
  if os.getenv("PLOSS_WORLD_SIZE") then
    comm = ploss.comm.init_from_env { device = o.device }
  else
    comm = ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id(),
                             device = o.device == "cuda" and "cuda:0" or o.device }
  end
  rank, R = comm:rank(), comm:size()
end
local device = comm and comm:device() or (o.device == "cuda" and "cuda:0" or o.device)
local block = math.floor(o.classes / R)

local x = ploss.randn({ o.rows, o.dim }, { seed = 100 + rank }):to(device, o.dtype)
local w = ploss.randn({ block, o.dim }, { seed = 200 + rank }):to(device, o.dtype)
local labels = ploss.randint(0, comm and o.classes or block, { o.rows }, { seed = 300 + rank }):to(device)
local crit = ploss.PartialFCLoss { margin = ploss.ArcFaceLoss {}, sample_rate = o.rate, comm = comm }

local function step()
  local loss = crit(x, w, labels)
  ploss.synchronize(device)
  return loss
end
for _ = 1, o.warmup do step() end
ploss.synchronize(device)
local base = ploss.memory_stats(device).current_bytes
ploss.reset_peak_memory(device)
local times, loss = {}, nil
for _ = 1, o.iters do
  local t0 = now()
  loss = step()
  times[#times + 1] = (now() - t0) * 1e3
end
table.sort(times)
local peak = ploss.memory_stats(device).peak_bytes - base
print(string.format("rank %d of %d: %s rows %d (gathered %d) D %d classes %d (block %d) rate %g %s: %.3f ms/step " ..
  "(median of %d; min %.3f), peak memory above the inputs %.1f MiB, loss %.6f", rank, R, device, o.rows, o.rows * R,
  o.dim, comm and o.classes or block, block, o.rate, o.dtype, times[math.ceil(#times / 2)], #times, times[1],
  peak / 2 ^ 20, loss))
if comm then comm:destroy() end
