-- temporary probe: the three GEMMs of the linear CE in its tile layout, by ploss's gemm
local ploss = require "ploss"
local F = ploss.F
local ffi = require "ffi"
ffi.cdef [[ typedef struct { long s, ns; } probe_ts; int clock_gettime(int, probe_ts *); ]]
local ts = ffi.new("probe_ts")
local function now() ffi.C.clock_gettime(1, ts); return tonumber(ts.s) + tonumber(ts.ns) * 1e-9 end
local function time(f, n)
  f(); ploss.synchronize("cuda")
  local t0 = now()
  for _ = 1, n do f() end
  ploss.synchronize("cuda")
  return (now() - t0) / n * 1e3
end
for _, c in ipairs { { 4096, 2048, 50257 }, { 4096, 2048, 50264 }, { 2048, 4096, 128256 } } do
  local N, H, V = c[1], c[2], c[3]
  local ldt = math.ceil(V / 8) * 8
  local x = ploss.randn({ N, H }, { dtype = "bf16", device = "cuda", seed = 1 })
  local w = ploss.randn({ V, H }, { dtype = "bf16", device = "cuda", seed = 2 })
  local tp = ploss.randn({ N, ldt }, { dtype = "bf16", device = "cuda", seed = 3 })
  local tile = tp:narrow(2, 1, V)
  local gx = ploss.empty({ N, H }, { dtype = "bf16", device = "cuda" })
  local gw = ploss.empty({ V, H }, { dtype = "bf16", device = "cuda" })
  local a = time(function() F.gemm(x, w, { trans_b = true, out = tile }) end, 5)
  local b = time(function() F.gemm(tile, w, { out = gx }) end, 5)
  local d = time(function() F.gemm(tile, x, { trans_a = true, out = gw, beta = 1 }) end, 5)
  local fl = 2 * N * H * V / 1e9
  print(string.format("%dx%dx%d: logits %.2f ms (%.0f TF/s)  dx %.2f (%.0f)  dw %.2f (%.0f)", N, H, V, a, fl / a,
    b, fl / b, d, fl / d))
  x:free(); w:free(); tp:free(); gx:free(); gw:free()
end
