-- CUDA graphs (suite 'cuda'): a fused loss call (forward + backward in one pass) captured
-- into a CUDA graph on the device's stream and replayed gives bitwise the loss and the
-- gradient of the same call made directly, replay after replay; values written into the
-- same input buffers between replays are the ones the replay uses (the graph reads the
-- buffers, it has not kept the values of the capture); and nothing in the call breaks the
-- capture: no host synchronisation, no allocation (cudaStreamEndCapture succeeds, ploss's
-- allocation counter does not move, the graph has nodes and the outputs are untouched until
-- the first replay).  The last tests check that this detection works: a capture around a
-- ploss.synchronize or an allocation fails with a message saying why, and the device works
-- afterwards.
--
-- How a call is captured (also what a training script must do; README "On a GPU"):
--  * the device's context is put on a stream of this spec (ploss.set_stream): capture needs
--    a stream other than the legacy default one.  It is made cudaStreamNonBlocking and
--    everything of the spec (inputs, copies, direct calls) runs on it, so that the work is
--    ordered without depending on the legacy stream's implicit synchronisation;
--  * the call is made once before the capture: the context's workspace is allocated then
--    (cudaMalloc cannot be captured), and later calls of the same problem reuse it;
--  * the captured call is ploss.F.<loss>_fused with `out` and `grad_input` given (and
--    tensor options given as tensors), which allocates nothing and reads nothing back: the
--    criterion object's call `crit(x, y)` reads the loss to the host (a synchronisation)
--    and cannot be captured;
--  * the Lua collector is stopped during the capture: collecting a tensor frees its
--    device memory (cudaFree), which a capture forbids.
-- Capture mode: cudaStreamCaptureModeThreadLocal.  It forbids the unsafe calls (cudaMalloc,
-- cudaFree, synchronisations) made by the capturing thread, which is the thread that calls
-- ploss: the property under test is checked as strictly as in Global mode.  Global mode would
-- in addition make such calls fail in every other thread of the process while the capture
-- lasts; ploss's model is one context (and stream) per thread, and a program capturing its
-- loss on one thread while another thread keeps allocating must use ThreadLocal, so that is
-- the mode the spec shows to work.
--
-- The CUDA runtime is loaded through the FFI: the libcudart that the process has already
-- mapped (the one libploss uses), else $PLOSS_CUDART, libcudart.so.13, libcudart.so.12,
-- libcudart.so, /usr/local/cuda/lib64/libcudart.so.  cudaGraphInstantiate has the CUDA 12+
-- signature (flags), as ploss needs CUDA 12 or later.
--
-- spec/run.lua exits 77 without a GPU.  PLOSS_CUDA_SPEC_DEVICE=cpu runs the spec's logic on
-- the CPU with a stand-in for the graph (a "replay" calls the captured function again); the
-- CUDA-only checks (capture failures) are pending there.
local H = require "spec.helpers"
local ffi = require "ffi"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()
local ON_GPU = DEV ~= "cpu"

local CAPTURE_MODE_THREAD_LOCAL = 1 -- cudaStreamCaptureModeThreadLocal
local CAPTURE_STATUS = { [0] = "none", [1] = "active", [2] = "invalidated" } -- cudaStreamCaptureStatus
local STREAM_NON_BLOCKING = 1       -- cudaStreamNonBlocking
local REPLAYS = 3

---------------------------------------------------------------------------------------
-- the CUDA runtime through the FFI
---------------------------------------------------------------------------------------

local CUDART_CDEF = [[
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, int mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, int *pCaptureStatus);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorName(cudaError_t error);
const char *cudaGetErrorString(cudaError_t error);
]]

-- The path of a libcudart already mapped into this process (libploss's dependency), if any:
-- loading that one gives the runtime instance the library itself calls.
local function mapped_cudart()
  local f = io.open("/proc/self/maps", "r")
  if not f then return nil end
  local found
  for line in f:lines() do
    found = line:match("(/%S*libcudart%.so[%.%d]*)%s*$")
    if found then break end
  end
  f:close()
  return found
end

local function load_cudart()
  if not pcall(ffi.typeof, "cudaGraphExec_t") then ffi.cdef(CUDART_CDEF) end
  local names, tried = {}, {}
  local function add(n) if n and n ~= "" then names[#names + 1] = n end end
  add(mapped_cudart())
  add(os.getenv("PLOSS_CUDART"))
  add("libcudart.so.13")
  add("libcudart.so.12")
  add("cudart")
  add("/usr/local/cuda/lib64/libcudart.so")
  for _, n in ipairs(names) do
    local ok, lib = pcall(ffi.load, n)
    if ok then return lib, n end
    tried[#tried + 1] = n .. " (" .. tostring(lib) .. ")"
  end
  error("cannot load the CUDA runtime; tried " .. table.concat(tried, "; ") ..
    ". Set PLOSS_CUDART to the path of libcudart.so", 0)
end

---------------------------------------------------------------------------------------
-- graph back ends: CUDA, and the CPU stand-in of the dry run
---------------------------------------------------------------------------------------

-- The CUDA graph back end: G.setup() makes the stream and puts DEV on it, G.capture(fn,
-- label) captures fn() into an instantiated graph ({launch, destroy, nodes}), G.sync()
-- waits for the stream and reports a device error, G.teardown() restores the default stream.
local function cuda_backend()
  local G = {}
  local rt, stream

  local function err_text(e)
    return string.format("%s (%s, %d)", ffi.string(rt.cudaGetErrorString(e)), ffi.string(rt.cudaGetErrorName(e)),
      tonumber(e))
  end
  -- raise `what: <CUDA error>` at the spec's line when e is not cudaSuccess
  local function ck(e, what)
    if e ~= 0 then
      rt.cudaGetLastError() -- clear the (non-sticky) error: later checks must not see it again
      error(what .. ": " .. err_text(e), 3)
    end
  end

  function G.setup()
    local lib, name = load_cudart()
    rt = lib
    local v = ffi.new("int[1]")
    ck(rt.cudaRuntimeGetVersion(v), "cudaRuntimeGetVersion")
    G.name = string.format("CUDA graphs, %s (runtime %d.%d)", name, math.floor(v[0] / 1000), v[0] % 1000 / 10)
    local e = rt.cudaGetLastError()
    if e ~= 0 then error("a CUDA error was pending before the spec: " .. err_text(e), 0) end
    local s = ffi.new("cudaStream_t[1]")
    ck(rt.cudaStreamCreateWithFlags(s, STREAM_NON_BLOCKING), "cudaStreamCreateWithFlags")
    stream = s[0]
    ploss.synchronize(DEV) -- whatever went to the legacy stream before is done
    ploss.set_stream(DEV, stream)
    G.stream = stream
  end

  function G.teardown()
    if stream == nil then return end
    ploss.synchronize(DEV)
    ploss.set_stream(DEV, nil)
    ck(rt.cudaStreamDestroy(stream), "cudaStreamDestroy")
    stream = nil
  end

  function G.sync()
    ck(rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
    ploss.synchronize(DEV) -- and an invalid label found by a kernel, if any
  end

  -- The capture status of the stream: 'none', 'active' or 'invalidated'.
  function G.capture_status()
    local st = ffi.new("int[1]")
    ck(rt.cudaStreamIsCapturing(stream, st), "cudaStreamIsCapturing")
    return CAPTURE_STATUS[tonumber(st[0])] or tostring(st[0])
  end

  function G.capture(fn, label)
    collectgarbage("collect") -- pending finalizers (cudaFree) run now, not in the capture
    local e = rt.cudaGetLastError()
    if e ~= 0 then error(label .. ": a CUDA error was pending before the capture: " .. err_text(e), 2) end
    local allocs = ploss.memory_stats(DEV).alloc_count
    collectgarbage("stop")
    e = rt.cudaStreamBeginCapture(stream, CAPTURE_MODE_THREAD_LOCAL)
    if e ~= 0 then
      collectgarbage("restart")
      error(label .. ": cudaStreamBeginCapture: " .. err_text(e), 2)
    end
    local ok, call_err = pcall(fn)
    local st = ffi.new("int[1]")
    local e_status = rt.cudaStreamIsCapturing(stream, st)
    local g = ffi.new("cudaGraph_t[1]")
    local e_end = rt.cudaStreamEndCapture(stream, g) -- always: the stream leaves capture mode
    collectgarbage("restart")
    local allocated = ploss.memory_stats(DEV).alloc_count - allocs
    local graph = g[0]
    local function fail(msg)
      if graph ~= nil then rt.cudaGraphDestroy(graph) end
      rt.cudaGetLastError()
      error(label .. ": " .. msg, 3)
    end
    if not ok then
      fail("the call failed inside the capture, so it cannot be captured (something in it " ..
        "synchronised with the host or allocated device memory): " .. tostring(call_err))
    end
    if e_status ~= 0 then fail("cudaStreamIsCapturing after the call: " .. err_text(e_status)) end
    if st[0] ~= 1 then
      fail("the capture was " .. (CAPTURE_STATUS[tonumber(st[0])] or tostring(st[0])) .. " when the call " ..
        "returned: something in it synchronised with the host, allocated or freed device memory")
    end
    if e_end ~= 0 then
      fail("cudaStreamEndCapture failed: " .. err_text(e_end) .. " — the captured call synchronised with " ..
        "the host, allocated or freed device memory, or joined another stream")
    end
    if allocated ~= 0 then
      fail(string.format("the call allocated %d buffer(s) during the capture (ploss's alloc_count); " ..
        "an allocation is not part of the graph: a replay would not repeat it", allocated))
    end
    local n = ffi.new("size_t[1]")
    ck(rt.cudaGraphGetNodes(graph, nil, n), label .. ": cudaGraphGetNodes")
    if n[0] == 0 then
      fail("the captured graph is empty: the call's work did not go to the capturing stream")
    end
    local exec = ffi.new("cudaGraphExec_t[1]")
    e = rt.cudaGraphInstantiate(exec, graph, 0)
    if e ~= 0 then fail("cudaGraphInstantiate: " .. err_text(e)) end
    local gr = { nodes = tonumber(n[0]) }
    function gr.launch() ck(rt.cudaGraphLaunch(exec[0], stream), label .. ": cudaGraphLaunch") end
    function gr.destroy()
      if graph == nil then return end
      ck(rt.cudaGraphExecDestroy(exec[0]), label .. ": cudaGraphExecDestroy")
      ck(rt.cudaGraphDestroy(graph), label .. ": cudaGraphDestroy")
      graph = nil
    end
    return gr
  end

  return G
end

-- The dry run's stand-in: a "graph" runs nothing when captured and calls the captured
-- function at each launch.
local function standin_backend()
  local G = { name = "stand-in graphs on the CPU (dry run)" }
  function G.setup() end
  function G.teardown() end
  function G.sync() ploss.synchronize(DEV) end
  function G.capture_status() return "none" end
  function G.capture(fn, label)
    local allocs = ploss.memory_stats(DEV).alloc_count
    local gr = { nodes = 1 }
    function gr.launch() fn() end
    function gr.destroy() end
    assert(ploss.memory_stats(DEV).alloc_count == allocs, label .. ": allocated during the capture")
    return gr
  end
  return G
end

local G = ON_GPU and cuda_backend() or standin_backend()

---------------------------------------------------------------------------------------
-- helpers
---------------------------------------------------------------------------------------

local function merge(a, b)
  local o = {}
  for k, v in pairs(a or {}) do o[k] = v end
  for k, v in pairs(b or {}) do o[k] = v end
  return o
end

-- The raw bytes of a tensor (a host copy).
local function bytes(t)
  local h = t:to("cpu", nil, true)
  if not h:is_contiguous() then h = h:contiguous() end
  return ffi.string(h:dl().data, h:numel() * h:element_size())
end

-- `t` holds bitwise the values of `ref` (a tensor); the message names the worst element
-- when the values differ.
local function assert_same_bits(t, ref, what)
  if bytes(t) == bytes(ref) then return end
  local ok, err = pcall(H.assert_equal, t, ref, { what = what })
  if not ok then error(err, 2) end
  error(what .. ": the same values but other bits (-0 against +0, or NaN payloads)", 2)
end

-- Class indices of the sample shape of `sizes` on DEV (i64), a fraction `ignore` of them
-- -100 (the ignore_index).
local function make_labels(sizes, ignore, seed)
  H.seed(seed)
  return H.random_labels(H.sample_sizes(sizes), sizes[2], { ignore = ignore or 0, ignore_index = -100, device = DEV })
end

local function make_input(sizes, dtype, seed)
  return ploss.randn(sizes, { dtype = dtype, device = DEV, std = 3, seed = seed })
end

local function loss_dtype(dtype) return dtype == "f64" and "f64" or "f32" end

---------------------------------------------------------------------------------------
-- the cases
---------------------------------------------------------------------------------------

-- criterion: the class name (ploss.<criterion>), whose fused function is captured
local CASES = {
  { criterion = "CrossEntropyLoss", what = "label smoothing 0.1, mean", sizes = { 64, 1000 }, dtype = "f32",
    opts = { reduction = "mean", label_smoothing = 0.1 } },
  { criterion = "CrossEntropyLoss", what = "label smoothing 0.1, mean (long rows, vocabulary-sized)",
    sizes = { 8, 50257 }, dtype = "bf16", opts = { reduction = "mean", label_smoothing = 0.1 } },
  { criterion = "SoftmaxFocalLoss", what = "gamma 2, alpha per class (a tensor), mean", sizes = { 64, 1000 },
    dtype = "f32", opts = { reduction = "mean", gamma = 2 }, alpha = true },
  { criterion = "CrossEntropyLoss", what = "N×C×H×W (class axis strided), label smoothing 0.1, mean, 10% ignored",
    sizes = { 2, 19, 8, 8 }, dtype = "f32", opts = { reduction = "mean", label_smoothing = 0.1 }, ignore = 0.1 },
  { criterion = "MultiMarginLoss", what = "p 2, margin 0.5, mean (the direct rows: no softmax)", sizes = { 64, 1000 },
    dtype = "f32", opts = { reduction = "mean", p = 2, margin = 0.5 } },
  { criterion = "GeneralizedSoftDiceLoss", what = "N×C×H×W, 10% ignored (one cooperative launch, grid barriers)",
    sizes = { 3, 5, 40, 70 }, dtype = "f32", opts = { reduction = "mean", ignore_index = -100 }, ignore = 0.1 },
}

describe("CUDA graphs of the fused losses (" .. DEV .. ")", function()
  lazy_setup(function() G.setup() end)
  lazy_teardown(function() G.teardown() end)

  it("the device is on the spec's stream (ploss.set_stream / ploss.stream)", function()
    if ON_GPU then
      assert(ffi.cast("void *", G.stream) == ploss.stream(DEV), "ploss.stream(" .. DEV .. ") is " ..
        tostring(ploss.stream(DEV)) .. ", not the stream given to ploss.set_stream (" .. tostring(G.stream) .. ")")
      assert.are.equal("none", G.capture_status())
    else
      assert.is_nil(ploss.stream(DEV))
      H.expect_error(function() ploss.set_stream(DEV, ffi.cast("void *", 1)) end,
        "a CPU context takes no CUDA stream")
    end
    print("\n[cuda_graph] " .. G.name)
  end)

  for ci, case in ipairs(CASES) do
    local label = string.format("%s %s %s, %s", case.criterion, table.concat(case.sizes, "x"), case.dtype, case.what)
    it(label .. ": capture once, replay " .. REPLAYS .. " times, new inputs in the same buffers", function()
      local seed = 7000 + 100 * ci
      H.current_seed = seed
      local cls = ploss[case.criterion]
      assert(cls, "no criterion ploss." .. case.criterion)
      local fused = F[cls._spec.fname .. "_fused"]
      local sizes, dtype = case.sizes, case.dtype
      local x = make_input(sizes, dtype, seed)
      local y = make_labels(sizes, case.ignore, seed + 1)
      local opts = merge(case.opts)
      if case.alpha then
        opts.alpha = ploss.rand({ sizes[2] }, { dtype = "f32", device = DEV, low = 0.25, high = 1, seed = seed + 2 })
      end
      local loss = ploss.empty({}, { dtype = loss_dtype(dtype), device = DEV })
      local grad = ploss.empty_like(x)
      local captured_opts = merge(opts, { out = loss, grad_input = grad })
      local function step() fused(x, y, captured_opts) end
      -- the same call into fresh outputs, outside any graph
      local function direct()
        return fused(x, y, merge(opts, { out = ploss.empty({}, { dtype = loss_dtype(dtype), device = DEV }),
          grad_input = ploss.empty_like(x) }))
      end

      -- warm-up outside the capture: the workspace of this problem is allocated here
      step()
      G.sync()
      local ref_loss, ref_grad = direct()
      G.sync()
      assert_same_bits(loss, ref_loss, label .. ": warm-up loss against the direct call")
      assert_same_bits(grad, ref_grad, label .. ": warm-up gradient against the direct call")
      local lv = ref_loss:item()
      assert(lv == lv and lv > 0 and lv < math.huge, label .. ": the loss of random inputs is " .. tostring(lv))

      local poisoned = H.poison(loss, grad)
      local graph = G.capture(step, label)
      local ok, err = pcall(function()
        G.sync()
        -- capturing records the work without running it
        local ok_u, err_u = pcall(H.assert_untouched, poisoned)
        assert(ok_u, label .. ": the outputs were written during the capture (the kernels ran instead of " ..
          "being recorded): " .. tostring(err_u))
        for r = 1, REPLAYS do
          graph.launch()
          G.sync()
          assert_same_bits(loss, ref_loss, string.format("%s: loss of replay %d", label, r))
          assert_same_bits(grad, ref_grad, string.format("%s: gradient of replay %d", label, r))
        end
        -- new values in the same buffers: the replay computes with them
        local x_data, y_data = x:dl().data, y:dl().data
        for k = 1, 2 do
          x:copy(make_input(sizes, dtype, seed + 10 * k))
          y:copy(make_labels(sizes, case.ignore, seed + 10 * k + 1))
          assert(x:dl().data == x_data and y:dl().data == y_data, label .. ": the inputs moved")
          H.poison(loss, grad)
          graph.launch()
          G.sync()
          local new_loss, new_grad = direct()
          G.sync()
          assert(bytes(new_loss) ~= bytes(ref_loss) and bytes(new_grad) ~= bytes(ref_grad),
            label .. ": the new inputs give the old loss or gradient (the check would prove nothing)")
          assert_same_bits(loss, new_loss, string.format("%s: loss of the replay over new inputs (%d)", label, k))
          assert_same_bits(grad, new_grad, string.format("%s: gradient of the replay over new inputs (%d)", label, k))
          ref_loss, ref_grad = new_loss, new_grad
        end
      end)
      graph.destroy()
      if not ok then error(err, 0) end
      if ON_GPU then assert.are.equal("none", G.capture_status()) end
    end)
  end

  -- The detection itself: a capture around what a loss call must never do fails with a
  -- message saying so, and the device works afterwards.
  local BREAKERS = {
    { what = "a host synchronisation (ploss.synchronize)", fn = function() ploss.synchronize(DEV) end },
    { what = "an allocation (ploss.empty)", fn = function() ploss.empty({ 1024 }, { device = DEV }) end },
  }
  for _, b in ipairs(BREAKERS) do
    it("a capture around " .. b.what .. " fails with a clear message; the device works afterwards", function()
      if not ON_GPU then
        pending("dry run: the CPU stand-in cannot break a capture")
        return
      end
      local x = make_input({ 16, 100 }, "f32", 9001)
      local y = make_labels({ 16, 100 }, 0, 9002)
      local opts = { label_smoothing = 0.1 }
      local l0, g0 = F.cross_entropy_fused(x, y, merge(opts, { out = ploss.empty({}, { device = DEV }) }))
      G.sync()
      local ok, err = pcall(G.capture, b.fn, "breaker")
      assert(not ok, "a capture around " .. b.what .. " succeeded: the spec could not see a broken capture")
      err = tostring(err)
      assert(err:find("breaker: ", 1, true) and
        (err:find("failed inside the capture", 1, true) or err:find("cudaStreamEndCapture failed", 1, true) or
         err:find("the capture was invalidated", 1, true) or err:find("during the capture", 1, true)),
        "unclear message for " .. b.what .. ": " .. err)
      print("\n[cuda_graph] " .. b.what .. " → " .. err)
      collectgarbage("collect")
      assert.are.equal("none", G.capture_status())
      local l1, g1 = F.cross_entropy_fused(x, y, merge(opts, { out = ploss.empty({}, { device = DEV }) }))
      G.sync()
      assert_same_bits(l1, l0, "loss after the failed capture")
      assert_same_bits(g1, g0, "gradient after the failed capture")
    end)
  end
end)
