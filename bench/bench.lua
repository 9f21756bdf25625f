--- ploss side of the benchmark: times ploss's passes for every case of
-- bench/cases.json on the inputs bench/torch_bench.py uses, and writes JSON lines.
--
--   luajit bench/bench.lua [--cases bench/cases.json] [--device cuda|cpu] [--cpu] [--small]
--                          [--only id1,id2] [--runs 30] [--warmup 5] [--out FILE]
--                          [--copy-bytes N] [--no-copy] [--no-checksums]
--
-- Needs `require "ploss"` to work (source tools/env.sh <builddir>).  For each case whose
-- loss has a registered criterion (ploss.nn.register spec with fname == case.loss), three
-- modes are measured, each on a fresh context (so its workspace is allocated, counted and
-- freed within the mode):
--   fused    spec.fused: loss and gradient in one pass, gradient into a separate buffer
--   fwd_bwd  spec.forward (saving the per-sample state when the loss has one) then
--            spec.backward with grad_loss = 1
--   inplace  spec.fused with opts.inplace = 1: the gradient overwrites the logits (the
--            logits are regenerated before every run, outside the timed region)
-- Losses of several embedding inputs (the pairs shape: a case with an "inputs" count, the
-- criterion built by build_multi, spec.multi) have one gradient buffer per input and run
-- fused and fwd_bwd only (they have no in-place gradient and no saved state).
-- Time: CUDA events (cudaEventRecord on the context's stream, via libcudart through the
-- FFI) around each run; median of --runs after --warmup runs.  The inputs are not rotated:
-- all but the latency case (ce-256x1000-f32, 1 MB, meant to be timed warm) are far larger
-- than the H200's 60 MB L2; a case below 4x the L2 is flagged `l2_resident` in its record.
-- Memory: ploss's allocator counters (ploss.memory_stats / ploss.reset_peak_memory) around the
-- first call of each mode: peak_extra_bytes = peak − bytes held before the mode's outputs
-- were allocated (= outputs the caller allocates: gradient, loss, state, + workspace),
-- workspace_peak_bytes = peak − bytes held after they were allocated (what the library
-- itself took), cross-checked with cudaMemGetInfo (meminfo_delta_bytes: device memory
-- taken between before the outputs and after the first call; 2 MiB granularity).
-- Correctness: the loss value (f64 print) and two gradient checksums, sum(g^2) and
-- sum(g*x) in float64 on the host, which bench/report.py compares with PyTorch's float64
-- reference on the same inputs.  With several inputs, grad_sq_inputs / grad_dot_x_inputs
-- list the two checksums of each input's gradient against that input (argument order),
-- x_sq_inputs the sum(x^2) of each input (the scale report.py measures a sum(g*x) near 0
-- against: a loss of normalised inputs has g orthogonal to x), and grad_sq / grad_dot_x /
-- x_sq are their sums.
--
-- Inputs (the same rule as make_inputs in bench/torch_bench.py; keep them equal):
--   x ~ N(0, logit_std^2) by ploss_rand_normal(seed, offset 0) in the case's dtype;
--   case.input (absent or "normal": x as drawn) transforms that draw: "sigmoid" (x =
--   sigmoid(x), probabilities in (0, 1), as binary_cross_entropy needs) or "log_softmax"
--   (log-probabilities over axis 1, as nll_loss and kl_div take), computed in f64 on the
--   host from the drawn values and rounded to the case's dtype;
--   index targets: ploss_rand_int [0, C) with seed + 1; where ploss_rand_int [0,
--   ignore_every) with seed + 2 is 0, the label is opts.ignore_index (ignore_every = 0:
--   no label ignored, no mask drawn, for losses without ignore_index);
--   binary targets: ploss_rand_int [0, 2) with seed + 1, in x's dtype;
--   real targets: N(0, logit_std^2) by ploss_rand_normal(seed + 1, offset 0) in x's dtype
--   and shape (the regression losses);
--   softmax targets: probabilities, the softmax over axis 1 (f64, on the host) of an
--   N(0, logit_std^2) draw with seed + 1 in x's dtype, rounded to x's dtype (kl_div);
--   boxes (N×4 input and target): u = ploss_rand_int [0, 2^24) / 2^24 per coordinate (seed
--   for the input, seed + 1 for the target), box = (10·u1, 10·u2, 10·u1 + 0.5 + 5·u3,
--   10·u2 + 0.5 + 5·u4) in f64, then in the case's dtype;
--   several embedding inputs (case.inputs = k, shape N×D each, or case.input_shapes[j+1]
--   for input j, e.g. the margin losses' N×D embeddings and C×D class centres, the fused
--   linear cross-entropy's BT×H hidden states and V×H weight): input j (0-based) ~
--   N(0, std_j^2) by ploss_rand_normal(seed + j, offset 0) in the case's dtype, std_j =
--   case.input_std[j+1] when given, else logit_std; target "none": no target; target
--   "labels": i64 labels[i] = i mod case.classes
--   (every class has N / classes rows, so every anchor has a positive and a negative).
--   --small keeps the rows per class: classes = max(2, N_small / (N / classes));
--   target "class_index": i64 labels ploss_rand_int [0, rows of the last input) with
--   seed + k, one per row of the first input (the margin losses' class labels, the
--   tokens' next-token labels); with case.ignore_every > 0 (absent: 0) the label is
--   opts.ignore_index (-100 when absent) where ploss_rand_int [0, ignore_every) with
--   seed + k + 1 is 0.
-- The fused linear cross-entropy (linear_cross_entropy: hidden and weight, the labels)
-- runs as every loss of several inputs (its criterion's _spec, as arc_face): fused and
-- fwd_bwd, one gradient buffer per input (grad_hidden, grad_weight, written, not
-- accumulated); bench/report.py puts it in its own table against the GEMM floor.
local ffi = require "ffi"

local script_dir = (arg and arg[0] and arg[0]:match("^(.*)/[^/]*$")) or "."
package.path = script_dir .. "/?.lua;" .. package.path
local json = require "json"
local ploss = require "ploss"
local C = ploss.C

---------------------------------------------------------------------------------------
-- Arguments
---------------------------------------------------------------------------------------

local function usage(msg)
  io.stderr:write("bench.lua: " .. msg .. "\n")
  os.exit(2)
end

local args = { cases = script_dir .. "/cases.json", device = "cuda", runs = 30, warmup = 5,
               out = "-", small = false, only = "", copy_bytes = nil, copy = true, checksums = true }
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    local function val()
      i = i + 1
      if arg[i] == nil then usage(a .. " needs a value") end
      return arg[i]
    end
    if a == "--cases" then args.cases = val()
    elseif a == "--device" then args.device = val()
    elseif a == "--cpu" then args.device = "cpu"
    elseif a == "--small" then args.small = true
    elseif a == "--only" then args.only = val()
    elseif a == "--runs" then args.runs = tonumber(val())
    elseif a == "--warmup" then args.warmup = tonumber(val())
    elseif a == "--out" then args.out = val()
    elseif a == "--copy-bytes" then args.copy_bytes = tonumber(val())
    elseif a == "--no-copy" then args.copy = false
    elseif a == "--no-checksums" then args.checksums = false
    elseif a == "-h" or a == "--help" then -- the comment block at the top of this file
      for line in io.lines((debug.getinfo(1, "S").source:sub(2))) do
        if not line:match("^%-%-") then break end
        io.write((line:gsub("^%-%-%-? ?", "")), "\n")
      end
      os.exit(0)
    else usage("unknown argument " .. a) end
    i = i + 1
  end
  if not args.runs or args.runs < 1 then usage("--runs must be >= 1") end
  if not args.warmup or args.warmup < 0 then usage("--warmup must be >= 0") end
end
local device = ploss.parse_device(args.device)
local on_cuda = device ~= "cpu"
if on_cuda and not ploss.cuda_available() then
  usage("CUDA requested but ploss sees no GPU (built with CUDA: " .. C.ploss_built_with_cuda() ..
        "); use --cpu")
end

local out = args.out == "-" and io.stdout or assert(io.open(args.out, "w"))
local function emit(rec)
  out:write(json.encode(rec), "\n")
  out:flush()
  if out ~= io.stdout then
    local short = {}
    for _, k in ipairs { "kind", "case", "mode", "ms_median", "peak_extra_bytes", "workspace_peak_bytes",
                         "loss", "gbps", "reason", "error" } do short[k] = rec[k] end
    io.stderr:write(json.encode(short), "\n")
  end
end

---------------------------------------------------------------------------------------
-- CUDA runtime (events, memory info, copies) through the FFI
---------------------------------------------------------------------------------------

local cudart, cudart_name
if on_cuda then
  ffi.cdef [[
  typedef struct bench_cuevent_st *bench_cudaEvent_t;
  int cudaEventCreate(bench_cudaEvent_t *event);
  int cudaEventDestroy(bench_cudaEvent_t event);
  int cudaEventRecord(bench_cudaEvent_t event, void *stream);
  int cudaEventSynchronize(bench_cudaEvent_t event);
  int cudaEventElapsedTime(float *ms, bench_cudaEvent_t start, bench_cudaEvent_t end);
  int cudaMemGetInfo(size_t *free, size_t *total);
  int cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind, void *stream);
  int cudaDeviceSynchronize(void);
  int cudaSetDevice(int device);
  int cudaDriverGetVersion(int *v);
  int cudaRuntimeGetVersion(int *v);
  const char *cudaGetErrorString(int error);
  ]]
  local tried = {}
  for _, name in ipairs { os.getenv("CUDART_LIBRARY") or "", "cudart", "libcudart.so.13", "libcudart.so.12",
                          "/usr/local/cuda/lib64/libcudart.so" } do
    if name ~= "" then
      local ok, lib = pcall(ffi.load, name)
      if ok then cudart, cudart_name = lib, name break end
      tried[#tried + 1] = name
    end
  end
  if not cudart then usage("cannot load libcudart (tried " .. table.concat(tried, ", ") .. "; set CUDART_LIBRARY)") end
end

local function cuda_check(rc, what)
  if rc ~= 0 then error(what .. ": " .. ffi.string(cudart.cudaGetErrorString(rc)), 2) end
end

local _, _, device_id = ploss.parse_device(device)
if on_cuda then cuda_check(cudart.cudaSetDevice(device_id), "cudaSetDevice") end

local function mem_free()
  if not on_cuda then return nil end
  local f, t = ffi.new("size_t[1]"), ffi.new("size_t[1]")
  cuda_check(cudart.cudaMemGetInfo(f, t), "cudaMemGetInfo")
  return tonumber(f[0]), tonumber(t[0])
end

-- Timer: CUDA events on a stream, or the host's monotonic clock on the CPU.
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk, bench_timespec *ts);
]]
local ts = ffi.new("bench_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1e3 + tonumber(ts.tv_nsec) * 1e-6
end

local events = {}
local function event(i)
  if not events[i] then
    local e = ffi.new("bench_cudaEvent_t[1]")
    cuda_check(cudart.cudaEventCreate(e), "cudaEventCreate")
    events[i] = e[0]
  end
  return events[i]
end

-- Run body(i) for i = 1..n, each between two marks; returns the list of times in ms.
-- pre(i), when given, runs before each start mark (untimed).
local function timed_runs(n, stream, body, pre)
  local times = {}
  if n == 0 then return times end
  if on_cuda then
    for i = 1, n do
      if pre then pre(i) end
      cuda_check(cudart.cudaEventRecord(event(2 * i - 1), stream), "cudaEventRecord")
      body(i)
      cuda_check(cudart.cudaEventRecord(event(2 * i), stream), "cudaEventRecord")
    end
    cuda_check(cudart.cudaEventSynchronize(event(2 * n)), "cudaEventSynchronize")
    local ms = ffi.new("float[1]")
    for i = 1, n do
      cuda_check(cudart.cudaEventElapsedTime(ms, event(2 * i - 1), event(2 * i)), "cudaEventElapsedTime")
      times[i] = ms[0]
    end
  else
    for i = 1, n do
      if pre then pre(i) end
      local t0 = now_ms()
      body(i)
      times[i] = now_ms() - t0
    end
  end
  return times
end

local function summarize(times)
  local s = {}
  for i = 1, #times do s[i] = times[i] end
  table.sort(s)
  local n = #s
  local med = n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
  return { ms_median = med, ms_min = s[1], ms_max = s[n], ms_p10 = s[math.floor(n / 10) + 1],
           ms_p90 = s[math.floor(n * 9 / 10) + 1], runs = n }
end

---------------------------------------------------------------------------------------
-- Contexts, memory counters
---------------------------------------------------------------------------------------

local KDL = on_cuda and 2 or 1
local dl_device = ffi.new("DLDevice", { device_type = KDL, device_id = device_id })

local function new_ctx()
  local p = ffi.new("ploss_ctx_t *[1]")
  ploss.check(C.ploss_ctx_create(dl_device, p), "ploss_ctx_create")
  return p[0]
end

local function stats()
  local st = ploss.memory_stats(device)
  return st.current_bytes, st.peak_bytes
end

local function sync(ctx)
  ploss.check(C.ploss_ctx_synchronize(ctx), "ploss_ctx_synchronize")
end

---------------------------------------------------------------------------------------
-- Cases and inputs
---------------------------------------------------------------------------------------

local spec_file = json.decode(assert(io.open(args.cases)):read("*a"))
local SEED, STD = spec_file.seed, spec_file.logit_std

-- The --small shape (the same rule as small_shape in bench/torch_bench.py): N <= 16,
-- C <= 512 (a C above 512 that is not a multiple of 8 becomes 504 + C % 8, keeping the
-- rows' misalignment), spatial dims <= 16.
local function small_shape(shape)
  local s = { math.min(shape[1], 16) }
  if #shape > 1 then
    local c = shape[2]
    s[2] = c <= 512 and c or (c % 8 == 0 and 512 or 504 + c % 8)
  end
  for i = 3, #shape do s[i] = math.min(shape[i], 16) end
  return s
end

local function numel(shape)
  local n = 1
  for i = 1, #shape do n = n * shape[i] end
  return n
end

local function target_shape(shape)
  local s = { shape[1] }
  for i = 3, #shape do s[#s + 1] = shape[i] end
  return s
end

-- N×4 valid boxes (the rule in the header) from seed, in dtype on the bench's device.
local function random_boxes(shape, seed, dtype)
  local u = ploss.randint(0, 2 ^ 24, shape, { seed = seed, offset = 0 })
  local b = ploss.empty(shape, { dtype = "f64" })
  local up, bp = ffi.cast("int64_t *", u:dl().data), ffi.cast("double *", b:dl().data)
  for i = 0, shape[1] - 1 do
    local u1, u2 = tonumber(up[4 * i]) / 2 ^ 24, tonumber(up[4 * i + 1]) / 2 ^ 24
    local u3, u4 = tonumber(up[4 * i + 2]) / 2 ^ 24, tonumber(up[4 * i + 3]) / 2 ^ 24
    bp[4 * i], bp[4 * i + 1] = 10 * u1, 10 * u2
    bp[4 * i + 2], bp[4 * i + 3] = 10 * u1 + 0.5 + 5 * u3, 10 * u2 + 0.5 + 5 * u4
  end
  u:free()
  local out = b:to(device, dtype)
  if out ~= b then b:free() end
  return out
end

-- The softmax (log = true: log-softmax) over axis 1 of a tensor of `shape`, in place, on
-- a host f64 buffer p.
local function host_softmax(p, shape, log)
  local C, S = shape[2] or 1, 1
  for i = 3, #shape do S = S * shape[i] end
  for n = 0, shape[1] - 1 do
    for s0 = 0, S - 1 do
      local base = n * C * S + s0
      local m = -math.huge
      for c = 0, C - 1 do
        local v = p[base + c * S]
        if v > m then m = v end
      end
      local sum = 0
      for c = 0, C - 1 do sum = sum + math.exp(p[base + c * S] - m) end
      local lse = m + math.log(sum)
      for c = 0, C - 1 do
        local k = base + c * S
        if log then p[k] = p[k] - lse else p[k] = math.exp(p[k] - lse) end
      end
    end
  end
end

-- t transformed by `kind` ("sigmoid", "log_softmax", "softmax") in f64 on the host, then
-- in t's dtype on the bench's device (a new tensor; t is freed).
local function transformed(t, kind, shape)
  local h = t:to("cpu", "f64", true)
  local p = ffi.cast("double *", h:dl().data)
  if kind == "sigmoid" then
    for k = 0, h:numel() - 1 do p[k] = 1 / (1 + math.exp(-p[k])) end
  elseif kind == "log_softmax" or kind == "softmax" then
    host_softmax(p, shape, kind == "log_softmax")
  else
    error("unknown input transform " .. tostring(kind))
  end
  local out = h:to(device, t:dtype(), true)
  h:free()
  t:free()
  return out
end

-- whether x is not one RNG call away (the in-place mode then restores a pristine copy)
local function derived_input(case)
  return case.target == "boxes" or (case.input ~= nil and case.input ~= "normal")
end

local function make_inputs(case, shape)
  if case.target == "boxes" then
    local x, t = random_boxes(shape, SEED, case.dtype), random_boxes(shape, SEED + 1, case.dtype)
    ploss.synchronize(device)
    return x, t, 0
  end
  local x = ploss.randn(shape, { dtype = case.dtype, device = device, seed = SEED, offset = 0, std = STD })
  if case.input ~= nil and case.input ~= "normal" then x = transformed(x, case.input, shape) end
  local t, ignored = nil, 0
  if case.target == "index" and case.ignore_every == 0 then
    t = ploss.randint(0, shape[2], target_shape(shape), { device = device, seed = SEED + 1, offset = 0 })
  elseif case.target == "index" then
    local ts_ = target_shape(shape)
    t = ploss.randint(0, shape[2], ts_, { device = device, seed = SEED + 1, offset = 0 })
    local mask = ploss.randint(0, case.ignore_every or 16, ts_, { device = device, seed = SEED + 2, offset = 0 })
    local ii = case.opts.ignore_index or -100
    local th, mh = t:to("cpu"), mask:to("cpu")
    local tp = ffi.cast("int64_t *", th:dl().data)
    local mp = ffi.cast("int64_t *", mh:dl().data)
    for k = 0, th:numel() - 1 do
      if mp[k] == 0 then tp[k] = ii end
      if tp[k] == ii then ignored = ignored + 1 end
    end
    if on_cuda then t:copy(th) th:free() else t = th end
    mh:free()
    mask:free()
  elseif case.target == "list" then -- each row lists case.list_length classes, then -1
    t = ploss.randint(0, shape[2], shape, { device = device, seed = SEED + 1, offset = 0 })
    local th = t:to("cpu")
    local tp, C = ffi.cast("int64_t *", th:dl().data), shape[2]
    for k = 0, th:numel() - 1 do
      if k % C >= case.list_length then tp[k] = -1 end
    end
    if on_cuda then t:copy(th) th:free() else t = th end
  elseif case.target == "binary" then
    t = ploss.randint(0, 2, shape, { dtype = case.dtype, device = device, seed = SEED + 1, offset = 0 })
  elseif case.target == "real" or case.target == "softmax" then
    t = ploss.randn(shape, { dtype = case.dtype, device = device, seed = SEED + 1, offset = 0, std = STD })
    if case.target == "softmax" then t = transformed(t, "softmax", shape) end
  else
    error("case " .. case.id .. ": unknown target kind " .. tostring(case.target))
  end
  ploss.synchronize(device)
  return x, t, ignored
end

-- The classes of a "labels" case at the row count it runs with: the case's own, or (a
-- shrunk run) as many as keep its rows per class, at least 2 (the rule in the header).
local function label_classes(case, rows)
  local k = assert(tonumber(case.classes), "case " .. case.id .. ": a labels target needs 'classes'")
  if rows == case.shape[1] then return k end
  local per = math.max(1, math.floor(case.shape[1] / k))
  return math.min(k, math.max(2, math.floor(rows / per)))
end

-- The shape of each input of a case of several inputs (argument order): case.input_shapes
-- (each shrunk as `shape` is under --small) or `shape` for every input.
local function pair_shapes(case, shape)
  local out = {}
  for j = 1, case.inputs do
    local s = case.input_shapes and case.input_shapes[j] or nil
    out[j] = s and (args.small and small_shape(s) or s) or shape
  end
  return out
end

-- The embedding inputs (a list, argument order) and the labels (or nil) of a case of
-- several inputs, by the rule in the header; also the number of classes of the labels.
local function make_pair_inputs(case, shape)
  local xs, shapes = {}, pair_shapes(case, shape)
  for j = 0, case.inputs - 1 do
    local std = case.input_std and case.input_std[j + 1] or STD
    xs[j + 1] = ploss.randn(shapes[j + 1], { dtype = case.dtype, device = device, seed = SEED + j, offset = 0, std = std })
  end
  local ignored = 0
  local t, classes = nil, nil
  if case.target == "labels" then
    classes = label_classes(case, shape[1])
    local th = ploss.empty({ shape[1] }, { dtype = "i64" })
    local tp = ffi.cast("int64_t *", th:dl().data)
    for i = 0, shape[1] - 1 do tp[i] = i % classes end
    t = th:to(device)
    if t ~= th then th:free() end
  elseif case.target == "class_index" then
    t = ploss.randint(0, shapes[#shapes][1], { shape[1] }, { device = device, seed = SEED + case.inputs, offset = 0 })
    local every = case.ignore_every or 0
    if every > 0 then -- 1/every of the labels ignored (mask seed + k + 1), as the index targets
      local mask = ploss.randint(0, every, { shape[1] }, { device = device, seed = SEED + case.inputs + 1, offset = 0 })
      local ii = case.opts.ignore_index or -100
      local th, mh = t:to("cpu"), mask:to("cpu")
      local tp = ffi.cast("int64_t *", th:dl().data)
      local mp = ffi.cast("int64_t *", mh:dl().data)
      for k = 0, th:numel() - 1 do
        if mp[k] == 0 then tp[k] = ii end
        if tp[k] == ii then ignored = ignored + 1 end
      end
      if on_cuda then t:copy(th) th:free() else t = th end
      if mh ~= mask then mh:free() end
      mask:free()
    end
  elseif case.target ~= "none" then
    error("case " .. case.id .. ": unknown target kind " .. tostring(case.target) .. " for several inputs")
  end
  ploss.synchronize(device)
  return xs, t, classes, ignored
end

-- The C calls of a loss (its criterion's _spec, built from the loss's description).
local function find_spec(fname)
  for _, v in pairs(ploss) do
    if type(v) == "table" then
      local s = rawget(v, "_spec")
      if s and s.fname == fname then return s end
    end
  end
  return nil
end

-- The C options struct and the resolved options from the case's options (JSON nulls
-- dropped); names the loss does not have are returned so that the record shows them.
local function make_opts(spec, case_opts)
  local user = {}
  for k, v in pairs(case_opts) do
    if v ~= json.null then user[k] = v end
  end
  return spec.options(user)
end

-- sum(g^2), sum(g*x) and sum(x^2) in f64 on the host, in chunks.  On CUDA each chunk is converted on
-- the device first (a device copy), then moved with a plain device-to-host copy.  Chunks
-- of f32/f16/bf16 tensors travel as f32, which holds them exactly (half the bytes of f64:
-- the largest cases move tens of GB here), and are widened to f64 in the sums.
local CHUNK = 4 * 1024 * 1024
local function checksums(x, g)
  local n = x:numel()
  local m = math.min(CHUNK, n)
  local xv, gv = x:view(n), g:view(n)
  local xdt = x:dtype() == "f64" and "f64" or "f32"
  local gdt = g:dtype() == "f64" and "f64" or "f32"
  local hx = ploss.empty({ m }, { dtype = xdt })
  local hg = ploss.empty({ m }, { dtype = gdt })
  local dx = on_cuda and ploss.empty({ m }, { dtype = xdt, device = device }) or nil
  local dg = on_cuda and ploss.empty({ m }, { dtype = gdt, device = device }) or nil
  local function part(t, len) return len == t:numel() and t or t:narrow(1, 1, len) end
  local sq, dot, xsq = 0, 0, 0
  local start = 1
  while start <= n do
    local len = math.min(CHUNK, n - start + 1)
    if on_cuda then
      part(dx, len):copy(xv:narrow(1, start, len))
      part(dg, len):copy(gv:narrow(1, start, len))
      part(hx, len):copy(part(dx, len))
      part(hg, len):copy(part(dg, len))
    else
      part(hx, len):copy(xv:narrow(1, start, len))
      part(hg, len):copy(gv:narrow(1, start, len))
    end
    local px = ffi.cast(xdt == "f64" and "double *" or "float *", hx:dl().data)
    local pg = ffi.cast(gdt == "f64" and "double *" or "float *", hg:dl().data)
    for k = 0, len - 1 do
      local gk, xk = pg[k], px[k]
      sq = sq + gk * gk
      dot = dot + gk * xk
      xsq = xsq + xk * xk
    end
    start = start + len
  end
  for _, t in ipairs { hx, hg, dx, dg } do t:free() end
  return sq, dot, xsq
end

local function scalar_value(t)
  return t:item()
end

---------------------------------------------------------------------------------------
-- One mode of one case
---------------------------------------------------------------------------------------

local function run_mode(case, spec, mode, x, t, base)
  local rec = {}
  for k, v in pairs(base) do rec[k] = v end
  rec.kind, rec.source, rec.mode = "ploss", "ploss", mode
  local ctx = new_ctx()
  local stream = C.ploss_ctx_stream(ctx)
  local copts, o, unknown = make_opts(spec, case.opts)
  if #unknown > 0 then rec.unused_opts = unknown end
  if mode ~= "fwd_bwd" then
    copts.scale = 1
    copts.inplace = mode == "inplace" and 1 or 0
  end
  local loss_dtype = x:dtype() == "f64" and "f64" or "f32"
  local use_state = mode == "fwd_bwd" and spec.state

  -- in place, boxes and transformed inputs are not one RNG call to regenerate: a pristine copy (made before the
  -- memory baseline) is copied back instead
  local pristine = mode == "inplace" and derived_input(case) and x:clone() or nil

  -- memory: the first call, with the outputs allocated after the baseline
  sync(ctx)
  local free0 = mem_free()
  local cur0 = stats()
  ploss.reset_peak_memory(device)
  local loss = ploss.empty({}, { dtype = loss_dtype, device = device })
  local grad, state, gl
  if mode ~= "inplace" then grad = ploss.empty_like(x) else grad = x end
  if use_state then
    local ssizes = (spec.state_sizes or function(inp)
      local s = {}
      local sz = inp:size()
      for i = 1, #sz do if i ~= 2 then s[#s + 1] = sz[i] end end
      return s
    end)(x, t)
    state = ploss.empty(ssizes, { dtype = "f64", device = device }) -- as the criteria keep it
  end
  if mode == "fwd_bwd" then gl = ploss.full({}, 1, { dtype = loss_dtype, device = device }) end
  ploss.synchronize(device)
  local cur1 = stats()

  local function call()
    if mode == "fwd_bwd" then
      ploss.check(spec.forward(o, ctx, x, t, copts, loss, state), spec.fname .. "_forward")
      ploss.check(spec.backward(o, ctx, x, t, copts, state, gl, grad), spec.fname .. "_backward")
    else
      ploss.check(spec.fused(o, ctx, x, t, copts, loss, grad), spec.fname .. "_fused")
    end
  end
  local function regen()
    if pristine then
      x:copy(pristine)
    else
      ploss.check(C.ploss_rand_normal(ctx, x:dl(), SEED, 0, 0, STD), "ploss_rand_normal")
    end
  end

  call()
  sync(ctx)
  local cur2, peak = stats()
  local free1 = mem_free()
  rec.peak_extra_bytes = peak - cur0
  rec.workspace_peak_bytes = peak - cur1
  rec.outputs_bytes = cur1 - cur0
  rec.held_after_bytes = cur2 - cur0
  if on_cuda then rec.meminfo_delta_bytes = free0 - free1 end
  rec.first_loss = scalar_value(loss)

  -- time
  local pre = mode == "inplace" and function() regen() end or nil
  if mode == "inplace" then regen() end
  timed_runs(args.warmup, stream, call, pre)
  local times = timed_runs(args.runs, stream, call, pre)
  for k, v in pairs(summarize(times)) do rec[k] = v end
  sync(ctx)
  rec.loss = scalar_value(loss)

  -- gradient checksums (x is intact except in place, where it holds the gradient)
  if args.checksums then
    if mode == "inplace" then
      local xs = pristine and pristine:clone() or
        ploss.randn(x:size(), { dtype = x:dtype(), device = device, seed = SEED, offset = 0, std = STD })
      rec.grad_sq, rec.grad_dot_x = checksums(xs, x)
      xs:free()
    else
      rec.grad_sq, rec.grad_dot_x = checksums(x, grad)
    end
  end
  if mode == "inplace" then regen() sync(ctx) end
  if pristine then pristine:free() end

  loss:free()
  if mode ~= "inplace" then grad:free() end
  if state then state:free() end
  if gl then gl:free() end
  C.ploss_ctx_destroy(ctx)
  return rec
end

-- One mode (fused or fwd_bwd) of a case of several embedding inputs: one gradient buffer
-- per input, no state, no in-place mode; memory and time as run_mode.
local function run_mode_multi(case, spec, mode, xs, t, base)
  local rec = {}
  for k, v in pairs(base) do rec[k] = v end
  rec.kind, rec.source, rec.mode = "ploss", "ploss", mode
  local ctx = new_ctx()
  local stream = C.ploss_ctx_stream(ctx)
  local copts, o, unknown = make_opts(spec, case.opts)
  if #unknown > 0 then rec.unused_opts = unknown end
  copts.scale = 1
  copts.inplace = 0
  local loss_dtype = xs[1]:dtype() == "f64" and "f64" or "f32"

  -- memory: the first call, with the outputs allocated after the baseline
  sync(ctx)
  local free0 = mem_free()
  local cur0 = stats()
  ploss.reset_peak_memory(device)
  local loss = ploss.empty({}, { dtype = loss_dtype, device = device })
  local grads = {}
  for k, x in ipairs(xs) do grads[k] = ploss.empty_like(x) end
  local gl = mode == "fwd_bwd" and ploss.full({}, 1, { dtype = loss_dtype, device = device }) or nil
  ploss.synchronize(device)
  local cur1 = stats()

  local function call()
    if mode == "fwd_bwd" then
      ploss.check(spec.forward(o, ctx, xs, t, copts, loss), spec.fname .. "_forward")
      ploss.check(spec.backward(o, ctx, xs, t, copts, gl, grads), spec.fname .. "_backward")
    else
      ploss.check(spec.fused(o, ctx, xs, t, copts, loss, grads), spec.fname .. "_fused")
    end
  end

  call()
  sync(ctx)
  local cur2, peak = stats()
  local free1 = mem_free()
  rec.peak_extra_bytes = peak - cur0
  rec.workspace_peak_bytes = peak - cur1
  rec.outputs_bytes = cur1 - cur0
  rec.held_after_bytes = cur2 - cur0
  if on_cuda then rec.meminfo_delta_bytes = free0 - free1 end
  rec.first_loss = scalar_value(loss)

  timed_runs(args.warmup, stream, call)
  local times = timed_runs(args.runs, stream, call)
  for k, v in pairs(summarize(times)) do rec[k] = v end
  sync(ctx)
  rec.loss = scalar_value(loss)

  if args.checksums then
    local sq, dot, xsq = {}, {}, {}
    rec.grad_sq, rec.grad_dot_x, rec.x_sq = 0, 0, 0
    for k, x in ipairs(xs) do
      sq[k], dot[k], xsq[k] = checksums(x, grads[k])
      rec.grad_sq, rec.grad_dot_x, rec.x_sq = rec.grad_sq + sq[k], rec.grad_dot_x + dot[k], rec.x_sq + xsq[k]
    end
    rec.grad_sq_inputs, rec.grad_dot_x_inputs, rec.x_sq_inputs = sq, dot, xsq
  end

  loss:free()
  for _, g in ipairs(grads) do g:free() end
  if gl then gl:free() end
  C.ploss_ctx_destroy(ctx)
  return rec
end

---------------------------------------------------------------------------------------
-- EMA of parameters (a case with kind "ema": not a loss, issue 20)
---------------------------------------------------------------------------------------

-- The tensors of an EMA case (as ema_shapes in bench/torch_bench.py): case.shape =
-- {tensors, elements of each}; --small keeps the count and shrinks each to <= 4096.
local function ema_shapes(case)
  local count, each = case.shape[1], case.shape[2]
  return count, args.small and math.min(each, 4096) or each
end

-- ploss.optim.EMA(params, {decay, warmup = false}) over the case's tensors: param j ~
-- N(0, logit_std²) with seed + j, its shadow (written over the constructor's copy) with
-- seed + count + j; one update of those shadows is checked (sum(s²), sum(s·p) after it,
-- against torch_bench.py's float64 reference), then --runs updates are timed on the EMA's
-- context's stream.  Memory: the constructor's (the shadows) and the update's own peak.
local function run_ema(case, base)
  local rec = {}
  for k, v in pairs(base) do rec[k] = v end
  rec.kind, rec.source, rec.mode = "ploss", "ploss", "update"
  local count, each = ema_shapes(case)
  local o = case.opts or {}
  local opts = { decay = o.decay, warmup = o.warmup }
  local params = {}
  for j = 0, count - 1 do
    params[j + 1] = ploss.randn({ each }, { dtype = case.dtype, device = device, seed = SEED + j, offset = 0, std = STD })
  end
  local nbytes = count * each * ploss.dtypes[case.dtype].size
  local irec = { kind = "inputs", source = "ploss", input_bytes = nbytes, target_bytes = 0, numel = count * each,
                 tensors = count, decay = o.decay }
  for k, v in pairs(base) do irec[k] = v end
  emit(irec)
  ploss.synchronize(device)
  local cur0 = stats()
  ploss.reset_peak_memory(device)
  local ema = ploss.optim.EMA(params, opts)
  ploss.synchronize(device)
  local cur1, peak1 = stats()
  rec.shadows_bytes = cur1 - cur0          -- what the EMA keeps: its shadows
  rec.construct_peak_bytes = peak1 - cur0
  for j = 0, count - 1 do                 -- shadows that differ from the params
    local s = ploss.randn({ each }, { dtype = case.dtype, device = device, seed = SEED + count + j, offset = 0, std = STD })
    ema.shadows[j + 1]:copy(s)
    s:free()
  end
  ploss.synchronize(device)
  local ctx = params[1]:context()
  local stream = C.ploss_ctx_stream(ctx)
  local cur2 = stats()
  ploss.reset_peak_memory(device)
  local free0 = mem_free()
  ema:update()                            -- the checked update
  sync(ctx)
  local _, peak2 = stats()
  rec.peak_extra_bytes = peak2 - cur2     -- the update's own memory (none expected)
  rec.workspace_peak_bytes = rec.peak_extra_bytes
  if on_cuda then rec.meminfo_delta_bytes = free0 - mem_free() end
  if args.checksums then
    rec.grad_sq, rec.grad_dot_x = 0, 0
    for j = 1, count do
      local sq, dot = checksums(params[j], ema.shadows[j])
      rec.grad_sq, rec.grad_dot_x = rec.grad_sq + sq, rec.grad_dot_x + dot
    end
  end
  local body = function() ema:update() end
  timed_runs(args.warmup, stream, body)
  for k, v in pairs(summarize(timed_runs(args.runs, stream, body))) do rec[k] = v end
  sync(ctx)
  rec.decay = ema:decay()
  rec.api = "ploss.optim.EMA(params, {decay = " .. tostring(o.decay) .. ", warmup = " .. tostring(o.warmup) ..
    "}):update()"
  for _, s in ipairs(ema.shadows) do s:free() end
  for _, p in ipairs(params) do p:free() end
  return rec
end

---------------------------------------------------------------------------------------
-- Copy bandwidth (cross-check of the torch side's number)
---------------------------------------------------------------------------------------

local function copy_bandwidth(nbytes)
  local rec = { kind = "copy_bw", source = "ploss" }
  if not on_cuda then
    rec.reason = "cpu run: no device copy"
    return rec
  end
  local src = ploss.randint(0, 256, { nbytes }, { dtype = "u8", device = device, seed = 7, offset = 0 })
  local dst = ploss.empty({ nbytes }, { dtype = "u8", device = device })
  ploss.synchronize(device)
  local sp, dp = src:dl().data, dst:dl().data
  local body = function()
    cuda_check(cudart.cudaMemcpyAsync(dp, sp, nbytes, 3, nil), "cudaMemcpyAsync") -- DeviceToDevice
  end
  timed_runs(3, nil, body)
  local s = summarize(timed_runs(20, nil, body))
  src:free()
  dst:free()
  rec.bytes_copied, rec.ms_median, rec.runs = nbytes, s.ms_median, s.runs
  rec.gbps = 2 * nbytes / (s.ms_median * 1e-3) / 1e9
  return rec
end

---------------------------------------------------------------------------------------
-- Main
---------------------------------------------------------------------------------------

local env = { kind = "env", source = "ploss", library = ploss.library_path,
              abi_version = tonumber(C.ploss_abi_version()), built_with_cuda = tonumber(C.ploss_built_with_cuda()),
              device = device, date_utc = os.date("!%Y-%m-%d %H:%M:%S UTC"), small = args.small,
              runs = args.runs, warmup = args.warmup, luajit = jit and jit.version or _VERSION }
if on_cuda then
  local v = ffi.new("int[1]")
  cudart.cudaDriverGetVersion(v)
  env.cuda_driver_version = tonumber(v[0])
  cudart.cudaRuntimeGetVersion(v)
  env.cudart_version = tonumber(v[0])
  env.cudart_library = cudart_name
  local free, total = mem_free()
  env.gpu_mem_free_bytes, env.gpu_mem_total_bytes = free, total
end
emit(env)
if args.copy then
  local ok, rec = pcall(copy_bandwidth, args.copy_bytes or (args.small and 64 * 2 ^ 20 or 2 * 2 ^ 30))
  emit(ok and rec or { kind = "copy_bw", source = "ploss", error = tostring(rec) })
end

local only = {}
for id in args.only:gmatch("[^,]+") do only[id] = true end
local t_all = now_ms()
for _, case in ipairs(spec_file.cases) do
  if (next(only) == nil or only[case.id]) and case.kind == "ema" then
    local count, each = ema_shapes(case)
    local base = { case = case.id, family = "ema", shape = { count, each }, dtype = case.dtype }
    local ok, r = pcall(run_ema, case, base)
    if not ok then
      r = { kind = "ploss", source = "ploss", mode = "update", error = tostring(r) }
      for k, v in pairs(base) do r[k] = v end
    end
    emit(r)
    collectgarbage()
  elseif next(only) == nil or only[case.id] then
    local shape = args.small and small_shape(case.shape) or case.shape
    local base = { case = case.id, family = case.loss, shape = shape, dtype = case.dtype }
    local spec = find_spec(case.loss)
    local missing = nil
    if not spec then
      missing = "no criterion registered with fname '" .. case.loss .. "'"
    elseif not spec.fused or not spec.forward then
      missing = "criterion " .. spec.name .. " lacks a fused or forward pass"
    elseif not pcall(function() return C["ploss_" .. case.loss .. "_fused"] end) then
      missing = "libploss has no ploss_" .. case.loss .. "_fused"
    end
    if missing then
      local rec = { kind = "skip", source = "ploss", reason = missing }
      for k, v in pairs(base) do rec[k] = v end
      emit(rec)
    else
      local ok, err = pcall(function()
        if spec.multi then
          if case.inputs ~= #spec.inputs then
            error(string.format("case %s: 'inputs' is %s, %s takes %d embedding inputs", case.id,
              tostring(case.inputs), spec.name, #spec.inputs))
          end
          local xs, t, classes, ignored = make_pair_inputs(case, shape)
          local in_bytes, names, n_el = 0, {}, 0
          for k, x in ipairs(xs) do
            in_bytes = in_bytes + x:numel() * ploss.dtypes[x:dtype()].size
            n_el = n_el + x:numel()
            names[k] = spec.inputs[k].name
          end
          local rec = { kind = "inputs", source = "ploss", input_bytes = in_bytes, inputs = #xs, input_names = names,
                        target_bytes = t and t:numel() * ploss.dtypes[t:dtype()].size or 0,
                        numel = n_el, ignored = ignored, classes = classes,
                        input_shapes = pair_shapes(case, shape), input_std = case.input_std,
                        l2_resident = on_cuda and in_bytes < 4 * 60e6 or nil }
          for k, v in pairs(base) do rec[k] = v end
          emit(rec)
          for _, mode in ipairs { "fused", "fwd_bwd" } do
            local ok2, r = pcall(run_mode_multi, case, spec, mode, xs, t, base)
            if not ok2 then
              r = { kind = "ploss", source = "ploss", mode = mode, error = tostring(r) }
              for k, v in pairs(base) do r[k] = v end
            end
            emit(r)
          end
          for _, x in ipairs(xs) do x:free() end
          if t then t:free() end
          return
        end
        local x, t, ignored = make_inputs(case, shape)
        local in_bytes = x:numel() * ploss.dtypes[x:dtype()].size
        local rec = { kind = "inputs", source = "ploss", input_bytes = in_bytes,
                      target_bytes = t:numel() * ploss.dtypes[t:dtype()].size, numel = x:numel(),
                      ignored = ignored, l2_resident = on_cuda and in_bytes < 4 * 60e6 or nil }
        for k, v in pairs(base) do rec[k] = v end
        emit(rec)
        local modes = { "fused" }
        modes[#modes + 1] = "fwd_bwd"
        modes[#modes + 1] = "inplace"
        for _, mode in ipairs(modes) do
          local ok2, r = pcall(run_mode, case, spec, mode, x, t, base)
          if not ok2 then
            r = { kind = "ploss", source = "ploss", mode = mode, error = tostring(r) }
            for k, v in pairs(base) do r[k] = v end
          end
          emit(r)
        end
        x:free()
        t:free()
      end)
      if not ok then
        local rec = { kind = "ploss", source = "ploss", mode = "setup", error = tostring(err) }
        for k, v in pairs(base) do rec[k] = v end
        emit(rec)
      end
      collectgarbage()
    end
  end
end
emit({ kind = "done", source = "ploss", wall_s = (now_ms() - t_all) / 1e3 })
if out ~= io.stdout then out:close() end
