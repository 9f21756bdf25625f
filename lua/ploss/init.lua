--- ploss: fused, memory-lean loss functions for LuaJIT (C library through FFI).
--
--     local ploss = require "ploss"
--     local x = ploss.randn({8, 10}, {device = 'cuda'})
--     local y = ploss.randint(0, 10, {8}, {device = 'cuda'})
--     local crit = ploss.CrossEntropyLoss{label_smoothing = 0.1}
--     local loss, grad = crit(x, y)          -- fused forward + backward
--
-- What this module does when required:
--  1. loads the FFI declarations generated from core/ploss.h (`ploss.cdef`, built by
--     tools/gen_cdef.lua) and the shared library: `$PLOSS_LIBRARY` if set, else
--     `<libdir>/libploss.so.0` from `ploss.config` (where `meson install` put it), else
--     `ffi.load("ploss")` (the system search path); refuses a library whose
--     ploss_abi_version() differs from the cdef's, naming the file it loaded;
--  2. installs the core helpers below (ploss.C, ploss.check, ploss.context, …), the tensor
--     type (ploss/tensor.lua), the criterion machinery (ploss/nn.lua) and the functional
--     namespace ploss.F (ploss/functional.lua);
--  3. builds every loss from its description (lua/ploss/losses/<name>.lua, listed in
--     lua/ploss/losses/init.lua; see ploss/description.lua) into a criterion class
--     ploss.<Criterion> and the functions ploss.F.<name>, _backward, _fused
--     (ploss/criterion.lua), then the ops (ploss/ops.lua) and the support layers,
--     functions and optimisers (ploss/support.lua), and the communicators (ploss.comm,
--     ploss/comm.lua).
--
-- Errors: every failing C call raises a Lua error carrying ploss_last_error()'s message,
-- reported at the line of the caller's code (the first stack frame outside this package).
local ffi = require "ffi"

-- _VERSION: the version of these Lua modules; spec/abi_spec.lua checks that it equals the
-- library's (ploss.version().version) and meson.build's.
local ploss = { _VERSION = "0.1.0" }

---------------------------------------------------------------------------------------
-- Declarations and library
---------------------------------------------------------------------------------------

local cdef = require "ploss.cdef"
-- ffi.cdef cannot declare a type twice: skip when the module is loaded a second time
-- (e.g. after package.loaded.ploss = nil).
if not pcall(ffi.typeof, "ploss_cross_entropy_opts") then
  ffi.cdef(cdef.cdef)
end
ploss.abi_version = cdef.abi_version

local function load_library()
  local tried = {}
  local env = os.getenv("PLOSS_LIBRARY")
  if env and env ~= "" then
    -- an explicit choice: fail loudly rather than fall back to another copy
    local ok, lib = pcall(ffi.load, env)
    if not ok then
      error("ploss: cannot load PLOSS_LIBRARY=" .. env .. ": " .. tostring(lib), 0)
    end
    return lib, env, env
  end
  local ok_cfg, config = pcall(require, "ploss.config")
  if ok_cfg and type(config) == "table" and config.libdir then
    local path = config.libdir .. "/libploss.so.0"
    local f = io.open(path, "rb")
    if f then
      f:close()
      local ok, lib = pcall(ffi.load, path)
      if ok then return lib, path, path end
      tried[#tried + 1] = path .. " (" .. tostring(lib) .. ")"
    else
      tried[#tried + 1] = path .. " (no such file)"
    end
  end
  local ok, lib = pcall(ffi.load, "ploss")
  if ok then return lib, "libploss.so (system search path)", "libploss.so" end
  tried[#tried + 1] = "libploss.so (" .. tostring(lib) .. ")"
  error("ploss: cannot find the shared library; tried: " .. table.concat(tried, "; ") ..
        ". Set PLOSS_LIBRARY, `source tools/env.sh <builddir>`, or `meson install`.", 0)
end

local C, library_path, library_name = load_library()
-- Pin the library for the life of the process: at exit, lua_close() may unload the FFI
-- library before the finalizers of tensors (which call ploss_free) have run.
do
  if not pcall(ffi.typeof, "ploss_lua_dlopen_t") then
    ffi.cdef [[ void *dlopen(const char *file, int mode); typedef int ploss_lua_dlopen_t; ]]
  end
  local RTLD_NOW, RTLD_NODELETE = 0x2, 0x1000 -- glibc values
  pcall(function() return ffi.C.dlopen(library_name, RTLD_NOW + RTLD_NODELETE) end)
end
ploss.C = C
ploss.library_path = library_path
do
  local got = C.ploss_abi_version()
  if got ~= cdef.abi_version then
    error(string.format("ploss: ABI mismatch: %s has ABI version %d but the Lua declarations " ..
      "(ploss/cdef.lua) expect %d; rebuild, or point PLOSS_LIBRARY at the matching library",
      library_path, got, cdef.abi_version), 0)
  end
end

local version_mt = {
  __tostring = function(v)
    return string.format("ploss %s (ABI %d, %s)", v.version, v.abi,
      v.cuda and "CUDA kernels" or "CPU only")
  end,
}

--- The loaded library's version: {version = "0.1.0", abi = 2, cuda = true|false}, where
-- cuda says whether it has the CUDA kernels (whether a GPU is visible is
-- ploss.cuda_available()).  tostring gives e.g. "ploss 0.1.0 (ABI 1, CPU only)".
function ploss.version()
  return setmetatable({
    version = ffi.string(C.ploss_version()),
    abi = tonumber(C.ploss_abi_version()),
    cuda = C.ploss_built_with_cuda() ~= 0,
  }, version_mt)
end

---------------------------------------------------------------------------------------
-- Errors, reported at the caller's line
---------------------------------------------------------------------------------------

-- The directory holding this package's Lua files: stack frames whose source lies there
-- are ploss internals and are skipped when blaming a line.
local own_dir = (debug.getinfo(1, "S").source:match("^@(.*[/\\])") or "")
local function is_internal(source)
  return own_dir ~= "" and source:sub(1, #own_dir + 1) == "@" .. own_dir
end

--- The error level (for error(msg, level)) of the first frame outside ploss, as seen
-- from the function that calls `caller_level`; 0 (no position) when there is none.
-- Skipped on the way: ploss's own frames, C frames, and tail-call frames (what = "tail",
-- source "=(tail call)": PUC Lua 5.1 keeps one where a tail call replaced a frame;
-- LuaJIT keeps none, so after `return crit:forward(x, t)` the next frame up is the caller
-- of the function that made the tail call).  A tail call straight from a chunk run by C
-- (the REPL's `= crit:forward(x, t)`, a coroutine's body) leaves no frame of the user's
-- code at all: level 0 then, rather than the line in this file that calls error().
local function caller_level()
  local level = 3 -- 1 = caller_level, 2 = its caller (raise), 3 = the one above
  while true do
    local info = debug.getinfo(level, "S")
    if not info then return 0 end
    if info.what ~= "C" and info.what ~= "tail" and info.source ~= "=(tail call)"
       and not is_internal(info.source) then
      return level - 1 -- the level as seen by raise's caller error()
    end
    level = level + 1
  end
end

--- `v` as an error message shows it: a string quoted (the string '3' is not the number 3),
-- anything else as tostring gives it.
function ploss.shown(v)
  if type(v) == "string" then return "'" .. v .. "'" end
  if ploss.is_tensor and ploss.is_tensor(v) then -- its kind, not its values
    if v:is_freed() then return "a freed ploss tensor" end
    return string.format("a ploss tensor %s[%s] on %s", v:dtype(), table.concat(v:size(), ", "), v:device())
  end
  return tostring(v)
end

--- The index of the first nil of the Lua list `list` (a positive integer key beyond #list,
-- or fewer such keys than #list: {a, nil, b} may report a length of 1 or 3, and ipairs
-- would stop at the hole), or nil when it has none.  For the callers' own messages.
function ploss.list_hole(list)
  local n, count = #list, 0
  for k in pairs(list) do
    if type(k) == "number" and k >= 1 and k == math.floor(k) then
      if k > n then return n + 1 end
      count = count + 1
    end
  end
  if count ~= n then
    for i = 1, n do
      if list[i] == nil then return i end
    end
  end
  return nil
end

--- Raise `msg` as a Lua error located at the first caller outside ploss (no location
-- when the stack holds none, see caller_level).
-- @tparam string msg
function ploss.raise(msg)
  error("ploss: " .. msg, caller_level())
end

--- Refuse a key of the options table `opts` that is in neither `known` nor `extra` (tables
-- whose keys are the option names; extra optional), naming `where` and listing the known
-- names: a misspelt option is an error, not ignored.
function ploss.check_option_keys(opts, where, known, extra)
  if type(opts) ~= "table" or ploss.is_tensor(opts) then
    ploss.raise(string.format("%s: expected a table of named options, got %s", where,
      ploss.is_tensor(opts) and "a tensor" or type(opts)))
  end
  for k in pairs(opts) do
    if not known[k] and not (extra and extra[k]) then
      local names = {}
      for name in pairs(known) do names[#names + 1] = name end
      for name in pairs(extra or {}) do names[#names + 1] = name end
      table.sort(names)
      -- Torch7's sizeAverage and PyTorch's deprecated size_average / reduce are reduction
      local hint = ""
      if known.reduction and (k == "sizeAverage" or k == "size_average") then
        hint = string.format("; %s is reduction here: reduction = 'sum' for %s = false, 'mean' for true", k, k)
      elseif known.reduction and k == "reduce" then
        hint = "; reduce is reduction here: reduction = 'none' for reduce = false"
      else
        local name_hint = ploss.name_hint(k, known)
        if name_hint then hint = "; " .. name_hint end
      end
      ploss.raise(string.format("%s: unknown option '%s' (known: %s)%s", where, tostring(k), table.concat(names, ", "),
        hint))
    end
  end
end

-- Torch7's names (criteria's fields and constructor arguments, optim's config) of what is
-- named otherwise here, beyond their camelCase (ignoreIndex: ignore_index).
local TORCH7_NAMES = { weights = "weight", learningRate = "lr" }

--- The hint for a name `k` that `known` (a set of names) lacks: Torch7's or PyTorch's name
-- of one it has, or a camelCase spelling of one; nil when none.
function ploss.name_hint(k, known)
  if type(k) ~= "string" then return nil end
  local n = TORCH7_NAMES[k]
  if n and known[n] then return string.format("Torch7's %s is %s here", k, n) end
  if k == "distance_function" and known.distance then -- PyTorch's TripletMarginWithDistanceLoss
    return "PyTorch's distance_function is distance here: the name of one of the loss's distances (no function " ..
      "is taken)"
  end
  if k:find("%u") then
    local snake = k:gsub("(%l)(%u)", function(a, b) return a .. "_" .. b:lower() end)
    if known[snake] then return string.format("did you mean %s?", snake) end
  end
  return nil
end

--- Raise an error for a failed C call: `status` is a ploss_status; `what` (optional) names
-- the C function.  The message is ploss_last_error() plus the status name, located as
-- ploss.raise's.  `names` (optional) maps a C argument's name to the caller's name for
-- it (the functional API's {loss = "opts.out"}): a message about that argument, or about
-- another one's overlap with it, says so;
-- with `everywhere`, every whole word of the message that `names` maps is renamed (for
-- names that are no other word of a message: Tensor:add_'s dst and src).  The C flag
-- "inplace = 1" a message may suggest is given as Lua's "inplace = true".
-- @return nothing when status == PLOSS_OK
function ploss.check(status, what, names, everywhere)
  if status == 0 then return end
  local msg = ffi.string(C.ploss_last_error())
  local arg = msg:match("^([%w_]+):")
  if names and everywhere then
    msg = msg:gsub("%f[%w_][%w_]+%f[^%w_]", names)
  elseif names then
    if arg and names[arg] then msg = names[arg] .. msg:sub(#arg + 1) end
    -- the other tensor of an overlap (ALIAS) is the caller's name for it too
    msg = msg:gsub("(overlaps the memory of )([%w_]+)", function(p, w) return p .. (names[w] or w) end)
  end
  -- the C API's flag is an int (inplace = 1); every Lua option of that name is a boolean
  msg = msg:gsub("inplace = 1%f[%D]", "inplace = true")
  local name = ffi.string(C.ploss_status_string(status))
  if msg == "" then msg = "failed" end
  local text = (what and (what .. ": ") or "") .. msg .. " (" .. name .. ")"
  error("ploss: " .. text, caller_level())
end

---------------------------------------------------------------------------------------
-- Devices and contexts
---------------------------------------------------------------------------------------

local KDLCPU, KDLCUDA = 1, 2

--- Parse a device name: 'cpu', 'cuda' (= 'cuda:0'), 'cuda:<id>'.
-- @return canonical name ('cpu' or 'cuda:<id>'), DLPack device type, device id
function ploss.parse_device(dev)
  if dev == nil or dev == "cpu" or dev == "cpu:0" then return "cpu", KDLCPU, 0 end -- PyTorch's cpu:0 too
  if type(dev) == "string" then
    if dev == "cuda" then return "cuda:0", KDLCUDA, 0 end
    local id = dev:match("^cuda:(%d+)$")
    if id then return "cuda:" .. id, KDLCUDA, tonumber(id) end
  end
  ploss.raise("device: expected 'cpu', 'cuda' or 'cuda:<id>', got " .. tostring(dev) ..
    (type(dev) == "string" and dev:match("^cpu:%d+$") and " (one CPU device: 'cpu' or 'cpu:0')" or ""))
end

local contexts = {} -- canonical device name -> ploss_ctx_t* (kept for the process' life)

--- The context of a device (created on first use, then cached; never destroyed, so that
-- tensors freed late by the GC still find it).
-- @tparam[opt='cpu'] string device 'cpu', 'cuda', 'cuda:1'
-- @return cdata ploss_ctx_t*
function ploss.context(device)
  local name, dtype, id = ploss.parse_device(device)
  local ctx = contexts[name]
  if ctx then return ctx end
  local out = ffi.new("ploss_ctx_t *[1]")
  local dev = ffi.new("DLDevice", { device_type = dtype, device_id = id })
  ploss.check(C.ploss_ctx_create(dev, out), "ploss_ctx_create(" .. name .. ")")
  ctx = out[0]
  contexts[name] = ctx
  return ctx
end

--- True when the library has CUDA kernels and at least one GPU is visible.
function ploss.cuda_available()
  return C.ploss_built_with_cuda() ~= 0 and C.ploss_cuda_device_count() > 0
end

--- Number of visible CUDA devices (0 without CUDA).
function ploss.cuda_device_count()
  return tonumber(C.ploss_cuda_device_count())
end

--- Wait for the device's stream and report an invalid label found by a kernel
-- (raises the error).  A no-op on the CPU.
function ploss.synchronize(device)
  ploss.check(C.ploss_ctx_synchronize(ploss.context(device)), "synchronize")
end

--- Queue the device's work on a CUDA stream (ploss_ctx_set_stream).  `stream`: a
-- cudaStream_t as a cdata pointer (any pointer type: a stream made through the FFI, or
-- another library's), or nil for the legacy default stream.  A device has one context,
-- shared by all its tensors, so every later call on the device uses the stream: losses,
-- tensor creation, copies, ploss.synchronize.  ploss does not own the stream: set the
-- device back (nil) before destroying it.  Switching does not wait for the work queued on
-- the previous stream: call ploss.synchronize(device) first when the new stream does not
-- synchronise with it (a cudaStreamNonBlocking stream).  A CPU device takes only nil.
--   CUDA graphs: the losses' calls can be captured on the stream (they never synchronise
-- or allocate once the context's workspace is large enough: run the call once before
-- capturing it; give `out`, `grad_input` and tensor options as tensors, and stop the Lua
-- collector during the capture, since freeing a tensor calls cudaFree).  A graph keeps
-- the workspace's address: a later call on the device that needs a larger workspace
-- reallocates it and the graph must not be replayed after that.
function ploss.set_stream(device, stream)
  local ptr = nil
  if stream ~= nil then
    if type(stream) ~= "cdata" or not tostring(ffi.typeof(stream)):match("%*>$") then
      ploss.raise("set_stream: stream: expected a cdata pointer (a cudaStream_t) or nil, got " ..
        (type(stream) == "cdata" and tostring(ffi.typeof(stream)) or type(stream)))
    end
    ptr = ffi.cast("void *", stream)
  end
  ploss.check(C.ploss_ctx_set_stream(ploss.context(device), ptr), "set_stream")
end

--- The device's CUDA stream as a `void *` cdata, or nil for the legacy default stream (and
-- for the CPU).
function ploss.stream(device)
  local s = C.ploss_ctx_stream(ploss.context(device))
  if s == nil then return nil end
  return s
end

--- Memory counters of a device: {current_bytes, peak_bytes, alloc_count} (Lua numbers).
function ploss.memory_stats(device)
  local _, dtype, id = ploss.parse_device(device)
  local st = ffi.new("ploss_memory_stats")
  local dev = ffi.new("DLDevice", { device_type = dtype, device_id = id })
  ploss.check(C.ploss_memory_stats_get(dev, st), "memory_stats")
  return { current_bytes = tonumber(st.current_bytes), peak_bytes = tonumber(st.peak_bytes),
           alloc_count = tonumber(st.alloc_count) }
end

--- Set the device's peak counter to its current value.
function ploss.reset_peak_memory(device)
  local _, dtype, id = ploss.parse_device(device)
  local dev = ffi.new("DLDevice", { device_type = dtype, device_id = id })
  ploss.check(C.ploss_memory_reset_peak(dev), "reset_peak_memory")
end

---------------------------------------------------------------------------------------
-- Tensors, criteria, functional API, ops
---------------------------------------------------------------------------------------

ploss.F = {}
require("ploss.tensor")(ploss)
ploss.nn = require("ploss.nn")(ploss)
require("ploss.functional")(ploss)

require("ploss.criterion")(ploss).build_all()
require("ploss.margin")(ploss)
require("ploss.ops")(ploss)
require("ploss.support")(ploss)
require("ploss.composite")(ploss)
require("ploss.comm")(ploss)

return ploss
