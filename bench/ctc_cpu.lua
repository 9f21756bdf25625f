-- bench/ctc_cpu.lua T N C S: ploss CTC on the CPU, fused forward+backward from f32 logits
-- (logits = true), median of 7 after 2 warm-up calls, in ms; the inputs of bench/ctc_cpu_torch.py
-- (the same lengths and labels; logits drawn by each side).  source tools/env.sh BUILD first.
local ploss = require "ploss"
local T, N, C, S = tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local z = ploss.randn({T, N, C}, {dtype = "f32", seed = 1})
local tl, il, rows = {}, {}, {}
for n = 1, N do
  tl[n] = math.floor(S / 2) + (n * 7) % (math.floor(S / 2) + 1); il[n] = T - (n * 3) % math.floor(T / 5)
  rows[n] = {}
  for i = 1, S do rows[n][i] = 1 + (n * 31 + i * 17) % (C - 1) end
end
local y = ploss.tensor(rows, {dtype = "i64"})
local ilt, tlt = ploss.tensor(il, {dtype="i64"}), ploss.tensor(tl, {dtype="i64"})
local crit = ploss.CTCLoss{logits = true}
local ffi = require "ffi"
ffi.cdef[[typedef struct { long tv_sec; long tv_nsec; } ts_t; int clock_gettime(int, ts_t *);]]
local ts = ffi.new("ts_t")
local function now() ffi.C.clock_gettime(1, ts); return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9 end
for _ = 1, 2 do crit(z, y, ilt, tlt) end
local times = {}
for r = 1, 7 do local t0 = now(); crit(z, y, ilt, tlt); times[r] = now() - t0 end
table.sort(times)
print(string.format("ploss CPU fused (logits) T=%d N=%d C=%d S=%d: %.2f ms", T, N, C, S, times[4] * 1e3))
