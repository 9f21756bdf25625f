--- ploss tensors: strided n-d arrays on the CPU or a CUDA device.
--
-- A tensor is an FFI metatype (`ploss_lua_tensor`): a DLTensor view (dtype, device, sizes,
-- strides, data pointer at its offset) plus a reference-counted Storage that owns one
-- buffer from ploss_alloc() (or refers to foreign memory, see below).  Every tensor holds
-- a reference to its storage, so views (`view`, `permute`, `transpose`, `narrow`,
-- `select`, `t[i]`, …) keep the buffer alive;
-- the buffer is freed when the garbage collector has collected the last tensor that uses
-- it, or at once by the idempotent `t:free()` (after which every view of it refuses use).
--
-- Conventions (Torch7's): dimensions and positions are 1-based in this API
-- (`t:size(1)` is N, `t:narrow(2, 1, 3)`, `t[i]`); the VALUES of class-index tensors are
-- 0-based, as everywhere in ploss and on disk.  Sizes and strides are in elements.
--
-- dtypes: 'f32' (default), 'f16', 'bf16', 'f64', 'i64', 'i32', 'u8'
-- (aliases: float, half, bfloat16, double, long, int, byte, float32, float16, float64,
-- int64, int32, uint8).  Devices: 'cpu', 'cuda' (= 'cuda:0'), 'cuda:<id>'.
--
-- `t:dl()` gives the `DLTensor *` to pass to the C API (ploss.C.*).  `a == b` is identity
-- (the same tensor object).  `#t` is t:size(1).
--
-- Integer arguments (sizes, strides, dims, indices, positions) are checked where they
-- enter from Lua: finite, integral, within int64 and within the tensor; a tensor spans
-- at most 2^53 elements.  Values converted to an integer dtype (ploss.tensor, t:to,
-- t:int(), …) must be finite and in the dtype's range.
--
-- Version counters: each storage counts the writes made through this module (copy, fill,
-- zero, t[i] = v, the random generators; t:version(), shared by all views of the
-- buffer; t:storage_id() names the storage).  Writes made outside ploss's Lua methods
-- (through t:dl().data or another raw pointer, by a C kernel, by the other owner of
-- from_pointer memory or a DLPack consumer) are NOT seen: the writer calls
-- t:bump_version().
--
-- Foreign memory: ploss.from_pointer(ptr, sizes, opts) wraps memory without copying,
-- keeping opts.owner alive; ploss.from_dlpack(managed) takes a DLManagedTensor and calls
-- its deleter once the buffer is released; t:to_dlpack() lends the buffer to another
-- library until that library calls the deleter.  Their doc comments give the lifetimes.
return function(ploss)
local ffi = require "ffi"
local C = ploss.C

local MAX_DIMS = 8
if not pcall(ffi.typeof, "ploss_lua_tensor") then
  ffi.cdef [[
  typedef struct ploss_lua_storage {
    void *ptr;           /* the buffer (its lowest address); NULL once freed        */
    ploss_ctx_t *ctx;    /* the device's cached context (never destroyed)           */
    uint64_t bytes;
    int64_t refs;        /* tensors (and DLPack exports) using this storage; the
                            struct is freed at 0                                    */
    int64_t version;     /* bumped by every write through this module               */
    int64_t id;          /* unique in the process, never reused                     */
    int32_t kind;        /* 0: ploss_alloc, 1: from_pointer, 2: from_dlpack         */
    int32_t exports;     /* to_dlpack results whose deleter has not run yet         */
    DLManagedTensor *managed; /* kind 2: the producer's tensor (deleter called once) */
  } ploss_lua_storage;
  typedef struct ploss_lua_tensor {
    DLTensor desc;               /* desc.shape / desc.strides point at sz / st      */
    int64_t sz[8];               /* sizes                                           */
    int64_t st[8];               /* strides (elements)                              */
    ploss_lua_storage *store;
    int64_t off;                 /* elements from the start of the buffer           */
    int64_t n;                   /* number of elements                              */
    int32_t dti;                 /* index into the dtype list of tensor.lua         */
    /* (field names differ from every method name: struct fields shadow methods)   */
  } ploss_lua_tensor;
  ]]
end
-- malloc/free may have been declared by someone else: declare each only if missing
if not pcall(function() return ffi.C.malloc end) then pcall(ffi.cdef, "void *malloc(size_t size);") end
if not pcall(function() return ffi.C.free end) then pcall(ffi.cdef, "void free(void *ptr);") end

---------------------------------------------------------------------------------------
-- dtypes
---------------------------------------------------------------------------------------

local dtype_list = {
  { name = "f32",  code = 2, bits = 32, size = 4, float = true },
  { name = "f16",  code = 2, bits = 16, size = 2, float = true },
  { name = "bf16", code = 4, bits = 16, size = 2, float = true },
  { name = "f64",  code = 2, bits = 64, size = 8, float = true },
  { name = "i64",  code = 0, bits = 64, size = 8, float = false },
  { name = "i32",  code = 0, bits = 32, size = 4, float = false },
  { name = "u8",   code = 1, bits = 8,  size = 1, float = false },
}
local dtypes = {}
for i, d in ipairs(dtype_list) do
  d.index = i - 1
  dtypes[d.name] = d
end
local aliases = {
  float = "f32", float32 = "f32", half = "f16", float16 = "f16", bfloat16 = "bf16",
  double = "f64", float64 = "f64", long = "i64", int64 = "i64", int = "i32", int32 = "i32",
  byte = "u8", uint8 = "u8",
}
for k in pairs(dtypes) do aliases[k] = k end
ploss.dtypes = dtypes

--- The canonical name of a dtype ('float' → 'f32'; nil → 'f32'); raises on an unknown name.
function ploss.dtype(name)
  local d = aliases[name or "f32"]
  if not d then
    local others = {}
    for k, v in pairs(aliases) do if k ~= v then others[#others + 1] = k end end
    table.sort(others)
    ploss.raise("dtype: expected one of f32, f16, bf16, f64, i64, i32, u8 (or " .. table.concat(others, ", ") ..
      "), got " .. ploss.shown(name))
  end
  return d
end
local canon_dtype = ploss.dtype

--- The canonical name of the float dtype `name` (nil: 'f32') that `what`'s opts.dtype gives
-- its parameters; an integer or unknown dtype is refused, naming `what` (not the constructor
-- of the tensor it would have made) and the argument `arg` (default 'dtype').
function ploss.float_dtype(name, what, arg)
  local d = aliases[name or "f32"]
  if not d or not dtypes[d].float then
    ploss.raise(string.format("%s: %s: expected a float dtype (f32, f16, bf16, f64), got %s", what, arg or "dtype",
      ploss.shown(name)))
  end
  return d
end

---------------------------------------------------------------------------------------
-- Checked integers: every size, index, stride and position that enters from Lua
---------------------------------------------------------------------------------------

-- Sizes, strides and element counts are kept exact as Lua numbers: a tensor spans at
-- most 2^53 elements (int64 arithmetic in the C core has room to spare beyond that).
local MAX_SPAN = 2 ^ 53

--- `v` when it is an integer (finite, integral, within int64, and >= lo when given),
-- else a raised error "<what>: <name> is <v>, expected an integer …" at the caller's
-- line.  The one check for every integer argument of this module; upper bounds (the
-- tensor's sizes) are checked by the callers, whose messages name the range.
local function check_int(v, what, name, lo)
  if type(v) == "number" and v == math.floor(v) and v >= -2 ^ 63 and v < 2 ^ 63
     and (lo == nil or v >= lo) then
    return v
  end
  ploss.raise(string.format("%s: %s is %s, expected an integer%s", what, name, ploss.shown(v),
    lo and string.format(" >= %.0f", lo) or ""))
end

--- A checked copy of a list of sizes (integers >= 0, at most MAX_DIMS of them).
local function check_sizes(sizes, what)
  if type(sizes) ~= "table" then ploss.raise(what .. ": expected a list of sizes, got " .. type(sizes)) end
  if #sizes > MAX_DIMS then ploss.raise("tensors have at most " .. MAX_DIMS .. " dims, got " .. #sizes) end
  local out = {}
  for i = 1, #sizes do out[i] = check_int(sizes[i], what, "size " .. i, 0) end
  return out
end

---------------------------------------------------------------------------------------
-- Storage (reference-counted, malloc'd so that tensor cdata can point at it)
---------------------------------------------------------------------------------------

local storage_ptr_t = ffi.typeof("ploss_lua_storage *")
local STORAGE_ALLOC, STORAGE_POINTER, STORAGE_DLPACK = 0, 1, 2
local last_storage_id = 0
local owners = {} -- storage id -> the `owner` of a from_pointer storage, kept alive

-- A storage record over `ptr` (kind STORAGE_*); nil when the host is out of memory.
local function new_record(ptr, ctx, bytes, kind)
  local s = ffi.cast(storage_ptr_t, ffi.C.malloc(ffi.sizeof("ploss_lua_storage")))
  if s == nil then return nil end
  last_storage_id = last_storage_id + 1
  s.ptr, s.ctx, s.bytes, s.refs = ptr, ctx, bytes, 0
  s.version, s.id, s.kind, s.exports, s.managed = 0, last_storage_id, kind, 0, nil
  return s
end

local function new_storage(device, bytes)
  local ctx = ploss.context(device)
  local out = ffi.new("void *[1]")
  ploss.check(C.ploss_alloc(ctx, bytes, out), "alloc")
  local s = new_record(out[0], ctx, bytes, STORAGE_ALLOC)
  if s == nil then
    C.ploss_free(ctx, out[0])
    ploss.raise("out of host memory for a storage record")
  end
  return s
end

-- Give the buffer back to whoever provided it: ploss_free, dropping a from_pointer owner,
-- or the DLPack producer's deleter (called here exactly once: s.managed is cleared first).
-- Not compiled: a deleter may be a Lua callback, which a compiled trace cannot call.
local function free_buffer(s)
  if s.ptr == nil then return end
  local p = s.ptr
  s.ptr = nil
  if s.kind == STORAGE_ALLOC then
    C.ploss_free(s.ctx, p)
  elseif s.kind == STORAGE_POINTER then
    owners[tonumber(s.id)] = nil
  else
    local m = s.managed
    s.managed = nil
    if m ~= nil and m.deleter ~= nil then m.deleter(m) end
  end
end
jit.off(free_buffer)

local function release(s)
  s.refs = s.refs - 1
  if s.refs <= 0 then
    free_buffer(s)
    ffi.C.free(s)
  end
end
jit.off(release)

-- Record a write into t's storage (its version counter, shared by every view).
local function bump(t)
  local s = t.store
  s.version = s.version + 1
end

-- Every element of t ← value; messages name the call as `what` (t:fill, an element
-- assignment t[k] = v), `expected` what else it would have taken.
local function fill_as(t, value, what, expected)
  if type(value) ~= "number" then ploss.raise(string.format("%s: expected %s, got %s", what, expected, type(value))) end
  ploss.check(C.ploss_fill(t:context(), t:dl(), value), what)
  bump(t)
  return t
end

---------------------------------------------------------------------------------------
-- Tensor metatype
---------------------------------------------------------------------------------------

local Tensor = {}    -- methods
ploss.Tensor = Tensor
local tensor_mt = {}
local tensor_ct      -- the metatype, below

local function is_tensor(x) return ffi.istype(tensor_ct, x) end
ploss.is_tensor = is_tensor

-- The options table of `where`: {} for nil; anything but a table (a boolean, a dtype name,
-- a tensor) is refused rather than read as no options.
local function options_of(opts, where)
  if opts == nil then return {} end
  if type(opts) ~= "table" or is_tensor(opts) then
    ploss.raise(string.format("%s: opts: expected an options table, got %s", where, ploss.shown(opts)))
  end
  return opts
end
ploss.options_of = options_of

local device_names = {}
local function device_name(dev)
  local key = tonumber(dev.device_type) * 65536 + tonumber(dev.device_id)
  local n = device_names[key]
  if not n then
    n = dev.device_type == 1 and "cpu" or ("cuda:" .. tonumber(dev.device_id))
    device_names[key] = n
  end
  return n
end

local function ndim(t) return t.desc.ndim end
-- Sizes and strides are plain Lua lists that print as {2, 3} (`= x:size()` at the REPL),
-- not as a table's address.
local list_mt = { __tostring = function(r) return "{" .. table.concat(r, ", ") .. "}" end }
local function sizes_of(t)
  local r = {}
  for i = 1, t.desc.ndim do r[i] = tonumber(t.sz[i - 1]) end
  return setmetatable(r, list_mt)
end
local function strides_of(t)
  local r = {}
  for i = 1, t.desc.ndim do r[i] = tonumber(t.st[i - 1]) end
  return setmetatable(r, list_mt)
end
local function dtype_of(t) return dtype_list[t.dti + 1] end

-- Sizes as a message shows them: 2x3, "scalar" for none; integers in full (2^62 is
-- 4611686018427387904, not 4.6116860184274e+18).
local function shape_string(sizes)
  if #sizes == 0 then return "scalar" end
  local parts = {}
  for i = 1, #sizes do
    local v = sizes[i]
    parts[i] = (type(v) == "number" and v == math.floor(v) and math.abs(v) < 2 ^ 63) and string.format("%.0f", v)
      or tostring(v)
  end
  return table.concat(parts, "x")
end

-- A tensor over `storage` (a ploss_lua_storage *), with Lua lists sizes/strides.  `held`:
-- the caller has already taken the tensor's reference to the storage (view_of), which is
-- given back if the shape is refused.
local function make(storage, dtype, device, sizes, strides, offset, held)
  local nd = #sizes
  local numel = 1
  for i = 1, nd do numel = numel * sizes[i] end
  if nd > MAX_DIMS or numel > MAX_SPAN then
    if held then release(storage) end
    if nd > MAX_DIMS then ploss.raise("tensors have at most " .. MAX_DIMS .. " dims, got " .. nd) end
    ploss.raise(string.format("shape: %s has more than 2^53 elements", shape_string(sizes)))
  end
  local dt = dtypes[dtype]
  local _, devtype, id = ploss.parse_device(device)
  local t = tensor_ct()
  t.desc.device.device_type = devtype
  t.desc.device.device_id = id
  t.desc.ndim = nd
  t.desc.dtype.code, t.desc.dtype.bits, t.desc.dtype.lanes = dt.code, dt.bits, 1
  t.desc.shape = t.sz
  t.desc.strides = t.st
  t.desc.byte_offset = 0
  for i = 1, nd do
    t.sz[i - 1] = sizes[i]
    t.st[i - 1] = strides[i]
  end
  t.n = numel
  t.off = offset
  t.dti = dt.index
  t.desc.data = ffi.cast("char *", storage.ptr) + offset * dt.size
  if not held then storage.refs = storage.refs + 1 end
  t.store = storage
  return t
end

-- A view of `t` with new sizes/strides/offset (same storage, dtype, device).  The view's
-- reference to the storage is taken first, before anything allocates: a base that nothing
-- else holds (a temporary, as in ploss.randn(8, 4):select(1, 2)) may be collected by the
-- next allocation, and its finaliser must not free the storage the view is about to hold.
local function view_of(t, sizes, strides, offset)
  local s = t.store
  s.refs = s.refs + 1
  return make(s, dtype_of(t).name, device_name(t.desc.device), sizes, strides, offset or tonumber(t.off), true)
end

tensor_mt.__gc = function(t)
  local s = t.store
  if s ~= nil then
    t.store = nil
    release(s)
  end
end

-- Read-only properties kept for code written against the first version of this module.
local properties = {
  _sizes = sizes_of, _strides = strides_of,
  _dtype = function(t) return dtype_of(t).name end,
  _device = function(t) return device_name(t.desc.device) end,
  _numel = function(t) return tonumber(t.n) end,
  _dt = dtype_of,
  _storage = function(t) return t.store end,
  _offset = function(t) return tonumber(t.off) end,
}

tensor_mt.__index = function(t, k)
  local m = Tensor[k]
  if m ~= nil then return m end
  if type(k) == "number" then return t:_index(k) end
  local p = properties[k]
  if p then return p(t) end
  return nil
end

tensor_mt.__newindex = function(t, k, v)
  if type(k) == "number" then
    -- the rule of every output: no two elements share memory (an expanded view's row
    -- would be written through every row it stands for)
    for d = 0, t.desc.ndim - 1 do
      if t.sz[d] > 1 and t.st[d] == 0 then
        ploss.raise(string.format("t[%s] = value: the tensor's elements share memory (dim %d has stride 0: an " ..
          "expanded view), so one write would change them all; write to t:contiguous() or to the tensor it " ..
          "expands", tostring(k), d + 1))
      end
    end
    local s = t:select(1, k)
    if is_tensor(v) then s:copy(v) else fill_as(s, v, string.format("t[%s] = value", tostring(k)), "a number or a tensor") end
    return
  end
  error("ploss.Tensor: cannot set field '" .. tostring(k) .. "'", 2)
end

tensor_mt.__len = function(t) return t.desc.ndim > 0 and tonumber(t.sz[0]) or 0 end
tensor_mt.__eq = function(a, b) return rawequal(a, b) end

tensor_ct = ffi.metatype("ploss_lua_tensor", tensor_mt)

-- Row-major strides of `sizes`; raises when they would not stay exact (more than 2^53).
local function contiguous_strides(sizes)
  local strides, acc = {}, 1
  for i = #sizes, 1, -1 do
    strides[i] = acc
    acc = acc * math.max(sizes[i], 1)
  end
  if acc > MAX_SPAN then
    -- (an empty tensor too: its row-major strides would pass 2^53, beyond exact Lua numbers)
    ploss.raise(string.format("shape: sizes %s: their row-major strides reach past 2^53 elements",
      shape_string(sizes)))
  end
  return strides
end

local function copy_list(t)
  local r = {}
  for i = 1, #t do r[i] = t[i] end
  return r
end

-- The options each factory takes (a key outside them is refused, not ignored: a misspelt
-- dtype would give an f32 tensor without a word).
local FACTORY_KEYS = { dtype = true, device = true }
local RAND_KEYS = { dtype = true, device = true, seed = true, offset = true, low = true, high = true }
local RANDN_KEYS = { dtype = true, device = true, seed = true, offset = true, mean = true, std = true }
local RANDINT_KEYS = { dtype = true, device = true, seed = true, offset = true }
local TENSOR_KEYS = { dtype = true, device = true, size = true }
local EMPTY_LIKE_KEYS = { dtype = true, device = true, layout = true }
local FROM_POINTER_KEYS = { dtype = true, device = true, strides = true, owner = true }

-- Parse (shape, opts) from ploss.empty(2, 3, {opts}) or ploss.empty({2, 3}, {opts}); the
-- keys of opts are checked against `known`, errors naming the function `what`.
local function shape_args(what, known, ...)
  local first = select(1, ...)
  local sizes, opts
  if type(first) == "table" then
    sizes, opts = first, select(2, ...)
    for i = 3, select("#", ...) do
      if select(i, ...) ~= nil then
        ploss.raise(string.format("%s: takes (sizes [, opts]), got a %s as argument %d", what, type(select(i, ...)), i))
      end
    end
  else
    sizes = {}
    local n = select("#", ...)
    for i = 1, n do
      local v = select(i, ...)
      if type(v) == "number" then sizes[#sizes + 1] = v
      elseif type(v) == "table" and i == n then opts = v
      elseif v ~= nil then ploss.raise("shape: expected sizes (numbers) then an options table") end
    end
  end
  if opts ~= nil and (type(opts) ~= "table" or ploss.is_tensor(opts)) then
    ploss.raise("shape: expected sizes (numbers) then an options table, got " .. type(opts))
  end
  sizes = check_sizes(sizes, "shape")
  if opts == nil then return sizes, {} end
  ploss.check_option_keys(opts, what, known)
  return sizes, opts
end

-- A new contiguous tensor of checked sizes, dtype and device names (nil: the defaults).
local function new_empty(sizes, dtype, device)
  dtype = canon_dtype(dtype)
  device = ploss.parse_device(device)
  local strides = contiguous_strides(sizes)
  local numel = 1
  for i = 1, #sizes do numel = numel * sizes[i] end
  local storage = new_storage(device, numel * dtypes[dtype].size)
  return make(storage, dtype, device, sizes, strides, 0)
end

--- Uninitialised tensor.  `ploss.empty(2, 3)` or `ploss.empty({2, 3}, {dtype='f64', device='cuda'})`.
-- The factories (empty, zeros, ones, full, rand, randn, randint, tensor, empty_like,
-- from_pointer) refuse an option they do not take ({dtpye = 'f64'} is an error).
function ploss.empty(...)
  local sizes, opts = shape_args("empty", FACTORY_KEYS, ...)
  return new_empty(sizes, opts.dtype, opts.device)
end

-- Whether t's elements are dense in some order of its dims (contiguous, channels-last, a
-- transposed contiguous tensor: no gaps, no overlap): its dims of size > 1 sorted by stride
-- (an insertion sort into a scratch list: no table or closure made per call) must each
-- stride over the ones before.
local dense_scratch = {}
local function is_dense(t)
  local order, k = dense_scratch, 0
  for i = 0, t.desc.ndim - 1 do
    if t.sz[i] ~= 1 then
      local j = k
      while j > 0 and t.st[order[j]] > t.st[i] do
        order[j + 1] = order[j]
        j = j - 1
      end
      order[j + 1] = i
      k = k + 1
    end
  end
  local expect = 1
  for j = 1, k do
    local i = order[j]
    if t.st[i] ~= expect then return false end
    expect = expect * t.sz[i]
  end
  return true
end

--- True when the elements are dense in some order of the dims: contiguous, channels-last,
-- a permutation of a contiguous tensor (no gaps, no overlap).
function Tensor:is_dense() return self:is_contiguous() or is_dense(self) end

--- A new tensor with t's sizes, and its dtype and device unless opts say otherwise:
-- contiguous, or with opts.layout = 'preserve' in t's own order of dims where t is dense
-- in one (channels-last stays channels-last, as PyTorch's preserve_format; an
-- overlapping or gapped t gives a contiguous one, where PyTorch keeps a gapped tensor's
-- order).
function ploss.empty_like(t, opts)
  if not ploss.is_tensor(t) then
    ploss.raise("empty_like: expected a ploss tensor first, got " .. ploss.shown(t))
  end
  opts = options_of(opts, "empty_like")
  ploss.check_option_keys(opts, "empty_like", EMPTY_LIKE_KEYS)
  local dtype, device = opts.dtype or dtype_of(t).name, opts.device or device_name(t.desc.device)
  if opts.layout ~= nil and opts.layout ~= "preserve" and opts.layout ~= "contiguous" then
    ploss.raise(string.format("empty_like: opts.layout: expected 'contiguous' or 'preserve', got %s", tostring(opts.layout)))
  end
  local strides = opts.layout == "preserve" and not t:is_contiguous() and is_dense(t) and strides_of(t)
  if not strides then return ploss.empty(sizes_of(t), { dtype = dtype, device = device }) end
  local d = ploss.parse_device(device)
  return make(new_storage(d, tonumber(t.n) * dtypes[canon_dtype(dtype)].size), canon_dtype(dtype), d, sizes_of(t),
    strides, 0)
end

--- Tensor of zeros.
function ploss.zeros(...)
  local sizes, opts = shape_args("zeros", FACTORY_KEYS, ...)
  return new_empty(sizes, opts.dtype, opts.device):fill(0)
end

--- Tensor of ones.
function ploss.ones(...)
  local sizes, opts = shape_args("ones", FACTORY_KEYS, ...)
  return new_empty(sizes, opts.dtype, opts.device):fill(1)
end

--- Tensor filled with `value`: `ploss.full({2, 3}, 7, opts)`.
function ploss.full(sizes, value, opts)
  if type(value) ~= "number" then
    ploss.raise("full: value: expected a number (full(sizes, value [, opts])), got " .. ploss.shown(value))
  end
  local checked, o = shape_args("full", FACTORY_KEYS, sizes, opts)
  return new_empty(checked, o.dtype, o.device):fill(value)
end

---------------------------------------------------------------------------------------
-- Zero-copy exchange: foreign memory (from_pointer), DLPack (from_dlpack, to_dlpack)
---------------------------------------------------------------------------------------

-- The DLPack structs come from the generated cdef (core/ploss.h includes dlpack/dlpack.h);
-- declared here only if an older cdef lacks DLManagedTensor.
if not pcall(ffi.typeof, "DLManagedTensor") then
  ffi.cdef [[
  typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
  } DLManagedTensor;
  ]]
end
if not pcall(ffi.typeof, "ploss_lua_export") then
  ffi.cdef [[
  typedef struct ploss_lua_export {
    DLManagedTensor m;   /* first: the block's address is the DLManagedTensor's      */
    int64_t shape[8];
    int64_t strides[8];
  } ploss_lua_export;
  ]]
end
local managed_ptr_t = ffi.typeof("DLManagedTensor *")
local export_ptr_t = ffi.typeof("ploss_lua_export *")
local void_ptr_t = ffi.typeof("void *")

-- A tensor over foreign memory: the element at `data` (a void *) is the tensor's first;
-- sizes and strides (elements, any sign) are checked lists.  The storage record covers
-- the lowest to the highest address reached.  Nothing is created when this raises.
local function wrap(what, data, sizes, strides, dtype, device, kind)
  local esize = dtypes[dtype].size
  if data == nil then ploss.raise(what .. ": the data pointer is NULL") end
  local addr = ffi.cast("uintptr_t", data)
  if addr % esize ~= 0 then
    ploss.raise(string.format("%s: the data pointer 0x%x is not aligned to the %d bytes of %s",
      what, tonumber(addr), esize, dtype))
  end
  local numel, low, span = 1, 0, 0
  for d = 1, #sizes do numel = numel * sizes[d] end
  if numel > 0 then
    for d = 1, #sizes do
      local reach = strides[d] * (sizes[d] - 1)
      if reach < 0 then low = low + reach end
      span = span + math.abs(reach)
    end
  end
  if numel > MAX_SPAN or span >= MAX_SPAN then
    ploss.raise(what .. ": the sizes and strides span more than 2^53 elements")
  end
  local ctx = ploss.context(device)
  local s = new_record(ffi.cast("char *", data) + low * esize, ctx, (span + 1) * esize, kind)
  if s == nil then ploss.raise(what .. ": out of host memory for a storage record") end
  return make(s, dtype, device, sizes, strides, -low)
end

--- A tensor over memory owned by someone else (another library's buffer), without a
-- copy: `ploss.from_pointer(ptr, {2, 3}, {dtype = 'f32', device = 'cpu', strides = {3, 1},
-- owner = buf})`.  `ptr` is a cdata pointer to the first element; strides (elements, any
-- sign; default row-major) must keep every element inside the memory.  `owner` is any Lua
-- value kept alive as long as the storage (until every view is collected or one of them
-- is freed); it must not refer back to the tensor, or neither is ever collected.  The
-- memory must stay valid that long: without an owner that keeps it, that is the
-- caller's promise.  t:free() drops the owner; it never frees the memory.
function ploss.from_pointer(ptr, sizes, opts)
  opts = options_of(opts, "from_pointer")
  ploss.check_option_keys(opts, "from_pointer", FROM_POINTER_KEYS)
  -- a pointer or an array (ctype<T *>, ctype<T [n]>); an integer would pass ffi.cast
  if type(ptr) ~= "cdata" or not tostring(ffi.typeof(ptr)):match("[%*%]]>$") then
    ploss.raise("from_pointer: ptr: expected a cdata pointer, got " ..
      (type(ptr) == "cdata" and tostring(ffi.typeof(ptr)) or type(ptr)))
  end
  local data = ffi.cast("void *", ptr)
  sizes = check_sizes(sizes, "from_pointer")
  local dtype = canon_dtype(opts.dtype)
  local device = ploss.parse_device(opts.device)
  local strides
  if opts.strides == nil then
    strides = contiguous_strides(sizes)
  else
    if type(opts.strides) ~= "table" or #opts.strides ~= #sizes then
      ploss.raise(string.format("from_pointer: strides: expected a list of %d strides", #sizes))
    end
    strides = {}
    for d = 1, #sizes do strides[d] = check_int(opts.strides[d], "from_pointer", "stride " .. d) end
  end
  local t = wrap("from_pointer", data, sizes, strides, dtype, device, STORAGE_POINTER)
  owners[tonumber(t.store.id)] = opts.owner
  return t
end

local export_deleter -- the deleter of every to_dlpack result, below

-- The dtype name of a DLPack DLDataType, or nil.
local function dtype_of_dl(dt)
  if dt.lanes ~= 1 then return nil end
  for _, d in ipairs(dtype_list) do
    if d.code == dt.code and d.bits == dt.bits then return d.name end
  end
end

--- A tensor over a DLPack tensor, without a copy: `ploss.from_dlpack(managed)` takes a
-- `DLManagedTensor *` and takes ownership of it: the producer's deleter is called exactly
-- once, when the buffer is released (the last tensor using it is collected, or one is
-- freed by t:free()).  Accepted: CPU and CUDA devices, lanes 1 and the dtypes of ploss,
-- data aligned to the element size, non-negative sizes, any strides (NULL: row-major).
-- When it raises, nothing was taken: the caller still owns `managed`.  A tensor exported
-- by t:to_dlpack() comes back as a view of its own storage (same storage_id and version);
-- any other gets a new storage with its own version counter.  An empty tensor whose data
-- pointer is NULL becomes an ordinary empty ploss tensor (the deleter is called at once).
-- As with every DLPack consumer, `managed` is consumed by a call that returns: pass it once
-- (its producer may free it at once — ploss frees its own exports so — and a second call
-- would read freed memory; the same pointer object given again is refused).
local consumed = setmetatable({}, { __mode = "k" }) -- the pointer objects from_dlpack has taken
function ploss.from_dlpack(managed)
  if not (ffi.istype(managed_ptr_t, managed) or ffi.istype(void_ptr_t, managed)) then
    ploss.raise("from_dlpack: expected a DLManagedTensor * (or void *), got " ..
      (type(managed) == "cdata" and tostring(ffi.typeof(managed)) or type(managed)))
  end
  -- the same pointer object a second time: its record may be freed already (reading it
  -- would give garbage or a crash); another object holding the same address is not known
  if consumed[managed] then
    ploss.raise("from_dlpack: this DLManagedTensor was taken by an earlier from_dlpack (a DLPack tensor is " ..
      "consumed once; export it again, e.g. t:to_dlpack())")
  end
  local m = ffi.cast(managed_ptr_t, managed)
  if m == nil then ploss.raise("from_dlpack: the DLManagedTensor pointer is NULL") end
  local dl = m.dl_tensor
  local nd = dl.ndim
  if nd < 0 or nd > MAX_DIMS then ploss.raise("from_dlpack: ndim is " .. nd .. ", expected 0 .. " .. MAX_DIMS) end
  local dtype = dtype_of_dl(dl.dtype)
  if not dtype then
    ploss.raise(string.format("from_dlpack: unsupported dtype (code %d, bits %d, lanes %d); ploss takes " ..
      "f32, f16, bf16, f64, i64, i32 and u8 with lanes 1", dl.dtype.code, dl.dtype.bits, dl.dtype.lanes))
  end
  local devtype, devid = tonumber(dl.device.device_type), tonumber(dl.device.device_id)
  if not (devtype == 1 or devtype == 2) or devid < 0 then
    ploss.raise(string.format("from_dlpack: unsupported device (type %d, id %d); ploss takes kDLCPU and kDLCUDA",
      devtype, devid))
  end
  local device = devtype == 1 and "cpu" or "cuda:" .. devid
  if nd > 0 and dl.shape == nil then ploss.raise("from_dlpack: shape is NULL") end
  local sizes, strides = {}, nil
  for d = 1, nd do
    local v = dl.shape[d - 1]
    if v < 0 or v > MAX_SPAN then
      ploss.raise(string.format("from_dlpack: size %d is %s, expected 0 .. 2^53", d, tostring(tonumber(v))))
    end
    sizes[d] = tonumber(v)
  end
  if dl.strides == nil then
    strides = contiguous_strides(sizes)
  else
    strides = {}
    for d = 1, nd do
      local v = dl.strides[d - 1]
      if v <= -MAX_SPAN or v >= MAX_SPAN then
        ploss.raise(string.format("from_dlpack: stride %d is %s, beyond 2^53", d, tostring(tonumber(v))))
      end
      strides[d] = tonumber(v)
    end
  end
  local numel = 1
  for d = 1, nd do numel = numel * sizes[d] end
  local t
  if dl.data == nil and numel == 0 then
    t = ploss.empty(sizes, { dtype = dtype, device = device })
  elseif m.deleter == export_deleter then
    -- one of ours: a view of the exported storage; then the export is released
    local s = ffi.cast(storage_ptr_t, m.manager_ctx)
    local first = ffi.cast("char *", dl.data) + dl.byte_offset - ffi.cast("char *", s.ptr)
    t = make(s, dtype, device, sizes, strides, tonumber(first) / dtypes[dtype].size)
  else
    local data = dl.data ~= nil and ffi.cast("char *", dl.data) + dl.byte_offset or nil
    t = wrap("from_dlpack", data, sizes, strides, dtype, device, STORAGE_DLPACK)
    t.store.managed = m
    consumed[managed] = true
    return t
  end
  -- the tensor no longer needs the producer's record
  consumed[managed] = true
  if m.deleter ~= nil then m.deleter(m) end
  return t
end
jit.off(ploss.from_dlpack)

---------------------------------------------------------------------------------------
-- Random numbers: Philox, counter-based (seed + offset), the same on CPU and GPU
---------------------------------------------------------------------------------------

local rng = { seed = 0, offset = 0 }

--- Set the global seed and reset the offset: the next random tensors are reproducible,
-- on the CPU and on any GPU alike.
function ploss.manual_seed(seed)
  if type(seed) ~= "number" or seed < 0 or seed >= 2 ^ 63 or seed ~= math.floor(seed) then
    ploss.raise("manual_seed: expected an integer >= 0, got " .. ploss.shown(seed))
  end
  rng.seed, rng.offset = seed, 0
end

--- The current (seed, offset) of the global generator.
function ploss.rng_state() return rng.seed, rng.offset end

-- Fill t from the generator with `fill(seed, offset)` (a C call's status): opts.seed and
-- opts.offset (default 0) where a seed is given, else the global generator, whose offset
-- advances by t's elements once the call has succeeded (a refused call draws nothing).
local function draw(opts, t, what, fill)
  local seed, off
  if opts.seed then
    seed, off = check_int(opts.seed, what, "seed", 0), check_int(opts.offset or 0, what, "offset", 0)
  elseif opts.offset ~= nil then
    -- an offset into the global stream would be silently ignored: it goes with a seed
    ploss.raise(string.format("%s: opts.offset: given without opts.seed (a counter offset is taken with an " ..
      "explicit seed; without one the draw continues the generator of ploss.manual_seed)", what))
  else
    seed, off = rng.seed, rng.offset
  end
  ploss.check(fill(seed, off), what)
  if not opts.seed then rng.offset = rng.offset + tonumber(t.n) end
  bump(t)
  return t
end

-- A number option of the generators (nil: its default), checked here: a boolean or a
-- string would reach the C call as 1, 0 or an FFI error naming no option.
local function number_opt(opts, key, default, what)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= "number" then
    ploss.raise(string.format("%s: opts.%s: expected a number, got %s", what, key, ploss.shown(v)))
  end
  return v
end

--- Uniform numbers in [low, high) (opts.low = 0, opts.high = 1); float dtypes.
-- Element k (row-major) takes Philox counter offset + k: `ploss.rand(2, 3)`,
-- `ploss.rand({2, 3}, {device='cuda', dtype='f64', seed=7})`.
function ploss.rand(...)
  local sizes, opts = shape_args("rand", RAND_KEYS, ...)
  if opts.dtype ~= nil then ploss.float_dtype(opts.dtype, "rand", "opts.dtype") end
  local low, high = number_opt(opts, "low", 0, "rand"), number_opt(opts, "high", 1, "rand")
  local t = new_empty(sizes, opts.dtype, opts.device)
  return draw(opts, t, "rand", function(seed, off)
    return C.ploss_rand_uniform(t:context(), t:dl(), seed, off, low, high)
  end)
end

--- Normal numbers, mean opts.mean (0), standard deviation opts.std (1); float dtypes.
function ploss.randn(...)
  local sizes, opts = shape_args("randn", RANDN_KEYS, ...)
  if opts.dtype ~= nil then ploss.float_dtype(opts.dtype, "randn", "opts.dtype") end
  local mean, std = number_opt(opts, "mean", 0, "randn"), number_opt(opts, "std", 1, "randn")
  local t = new_empty(sizes, opts.dtype, opts.device)
  return draw(opts, t, "randn", function(seed, off)
    return C.ploss_rand_normal(t:context(), t:dl(), seed, off, mean, std)
  end)
end

--- Integers in [low, high) (dtype default 'i64'): `ploss.randint(0, 10, {8}, opts)`.
function ploss.randint(low, high, sizes, opts)
  opts = options_of(opts, "randint")
  for i, v in ipairs { low, high } do
    if type(v) ~= "number" then
      ploss.raise(string.format("randint: %s: expected a number (randint(low, high, sizes[, opts])), got %s",
        i == 1 and "low" or "high", type(v) == "cdata" and tostring(ffi.typeof(v)) or type(v)))
    end
  end
  check_int(low, "randint", "low")
  check_int(high, "randint", "high")
  ploss.check_option_keys(opts, "randint", RANDINT_KEYS)
  local t = new_empty(check_sizes(type(sizes) == "number" and { sizes } or sizes, "shape"), opts.dtype or "i64",
    opts.device)
  return draw(opts, t, "randint", function(seed, off)
    return C.ploss_rand_int(t:context(), t:dl(), seed, off, low, high)
  end)
end

---------------------------------------------------------------------------------------
-- Tensors from Lua tables
---------------------------------------------------------------------------------------

-- Sizes of a nested table (rectangular), walking first elements.  A table that contains
-- itself (on the path of first elements) and nesting deeper than MAX_DIMS are refused
-- here: both would otherwise walk forever or far past any tensor's rank.
local function nested_sizes(data)
  local sizes, node, seen = {}, data, {}
  while type(node) == "table" do
    if seen[node] then ploss.raise("tensor: the nested table contains itself (at dim " .. #sizes + 1 .. ")") end
    if #sizes == MAX_DIMS then ploss.raise("tensor: the table is nested deeper than " .. MAX_DIMS .. " dims") end
    seen[node] = true
    sizes[#sizes + 1] = #node
    if #node == 0 then break end
    node = node[1]
  end
  return sizes
end

-- Raise when the list `node` has a hole (ploss.list_hole: `{1, nil, 3}` may report a
-- length of 1 or 3).
local function check_no_hole(node, depth)
  local i = ploss.list_hole(node)
  if i then ploss.raise(string.format("tensor: the list at dim %d has a hole (index %d is nil)", depth, i)) end
end

local function flatten(data, sizes, depth, out)
  if depth > #sizes then
    local v = data
    if type(v) ~= "number" then
      if v == true then v = 1 elseif v == false then v = 0
      else ploss.raise("tensor: element is " .. type(v) .. ", expected a number") end
    end
    out[#out + 1] = v
    return
  end
  if type(data) == "table" then check_no_hole(data, depth) end
  if type(data) ~= "table" or #data ~= sizes[depth] then
    ploss.raise(string.format("tensor: ragged nested table (dim %d: expected %d elements, got %s)",
      depth, sizes[depth], type(data) == "table" and #data or type(data)))
  end
  for i = 1, sizes[depth] do flatten(data[i], sizes, depth + 1, out) end
end

local read_values, check_int_values, check_int_to_int -- (defined with :to below)

-- The values a float may take to convert to an integer dtype (the C conversion truncates
-- toward zero): low < v < high.  -2^63 - 2048 is the double just below -2^63.
local int_bounds = { i64 = { -2 ^ 63 - 2048, 2 ^ 63 }, i32 = { -2 ^ 31 - 1, 2 ^ 31 }, u8 = { -1, 256 } }

local function int_range_error(what, index, value, dtype)
  ploss.raise(string.format("%s: element %d (row-major) is %s, which %s cannot hold", what, index,
    tostring(value), dtype))
end

--- A tensor from a number (0-d), a nested Lua table, or another tensor (copied).
-- opts: dtype (default 'f32', or the tensor's), device (default 'cpu', or the tensor's),
-- size (reshape a flat table: `ploss.tensor({1,2,3,4,5,6}, {size = {2, 3}})`).
-- Integer dtypes take integers only (a fraction is an error, not truncated; a float
-- tensor's values are checked on the host), exactly up to 2^53 (Lua numbers are doubles;
-- int64 cdata such as 5LL are not taken).
function ploss.tensor(data, opts)
  opts = options_of(opts, "tensor")
  ploss.check_option_keys(opts, "tensor", TENSOR_KEYS)
  if is_tensor(data) then
    if opts.size ~= nil then
      -- size reshapes the values of a Lua table; a tensor's copy keeps its sizes
      ploss.raise(string.format("tensor: opts.size: reshapes a Lua table's values; a tensor (%s) is copied with its " ..
        "own sizes: reshape the copy instead (ploss.tensor(t):view(...))", shape_string(sizes_of(data))))
    end
    local dtype = canon_dtype(opts.dtype or data:dtype())
    -- the rule of a Lua table's values, not :to()'s truncation
    if int_bounds[dtype] and dtype_of(data).float then check_int_values(data, dtype, "tensor", true) end
    return data:to(opts.device or data:device(), dtype, true)
  end
  local sizes
  if type(data) == "number" then
    data, sizes = { data }, {}
  else
    if type(data) ~= "table" then ploss.raise("tensor: expected a number, a table or a tensor, got " .. type(data)) end
    sizes = nested_sizes(data)
  end
  local flat = {}
  if #sizes == 0 then flat[1] = data[1]
  elseif not (#sizes == 1 and sizes[1] == 0) then flatten(data, sizes, 1, flat) end
  if opts.size then
    sizes = check_sizes(opts.size, "tensor")
    local n = 1
    for i = 1, #sizes do n = n * sizes[i] end
    if n ~= #flat then
      ploss.raise(string.format("tensor: size has %s elements, the data %d",
        n > MAX_SPAN and "more than 2^53" or string.format("%.0f", n), #flat))
    end
  end
  local dtype = canon_dtype(opts.dtype)
  local bounds = int_bounds[dtype]
  if bounds then
    for i = 1, #flat do
      local v = flat[i]
      if not (v > bounds[1] and v < bounds[2]) then int_range_error("tensor", i, v, dtype) end
      if v ~= math.floor(v) then
        -- truncated, a label 1.5 would become class 1 without a word
        ploss.raise(string.format("tensor: element %d (row-major) is %.17g, not an integer (dtype %s); round it " ..
          "first, or convert a float tensor with :to('%s'), which truncates", i, v, dtype, dtype))
      end
    end
  end
  local staging_dtype = dtypes[dtype].float and "f64" or "i64"
  local host = ploss.empty(sizes, { dtype = staging_dtype })
  local p = ffi.cast(staging_dtype == "f64" and "double *" or "int64_t *", host.desc.data)
  for i = 1, #flat do p[i - 1] = flat[i] end
  bump(host)
  if dtype == staging_dtype and ploss.parse_device(opts.device) == "cpu" then return host end
  local t = ploss.empty(sizes, { dtype = dtype, device = opts.device })
  t:copy(host)
  host:free()
  return t
end

---------------------------------------------------------------------------------------
-- Methods
---------------------------------------------------------------------------------------

--- The DLTensor * describing this tensor, for calls into ploss.C.  Raises when freed.
function Tensor:dl()
  if self.store == nil or self.store.ptr == nil then ploss.raise("tensor: its storage was freed") end
  return self.desc
end

--- True once the buffer was freed (by :free() on this tensor or a view of it).
function Tensor:is_freed() return self.store == nil or self.store.ptr == nil end

--- The cached context of the tensor's device.
function Tensor:context()
  if self.store ~= nil then return self.store.ctx end
  return ploss.context(device_name(self.desc.device))
end

--- dtype name: 'f32', …
function Tensor:dtype() return dtype_of(self).name end

--- Bytes per element.
function Tensor:element_size() return dtype_of(self).size end

--- True for f32, f16, bf16, f64.
function Tensor:is_floating_point() return dtype_of(self).float end

--- device name: 'cpu' or 'cuda:<id>'.
function Tensor:device() return device_name(self.desc.device) end

--- True on a CUDA device.
function Tensor:is_cuda() return self.desc.device.device_type ~= 1 end

--- Number of dimensions.
function Tensor:dim() return self.desc.ndim end
Tensor.nDimension = Tensor.dim

--- Number of elements.
function Tensor:numel() return tonumber(self.n) end
Tensor.nElement = Tensor.numel

local function check_dim(t, d, what)
  local nd = t.desc.ndim
  check_int(d, what or "dim", "dim")
  local given = d
  if d < 0 then d = nd + 1 + d end
  if nd == 0 then ploss.raise(string.format("%s: %d: a 0-d tensor has no dims", what or "dim", given)) end
  if d < 1 or d > nd then
    ploss.raise(string.format("%s: %d is outside [1, %d] (or [-%d, -1] from the end) for a %d-d tensor",
      what or "dim", given, nd, nd, nd))
  end
  return d
end

--- Sizes as a fresh Lua table, or the size of dimension `dim` (1-based; -1 = last).
function Tensor:size(dim)
  if dim then return tonumber(self.sz[check_dim(self, dim) - 1]) end
  return sizes_of(self)
end

--- Strides (elements) as a fresh table, or the stride of dimension `dim`.
function Tensor:stride(dim)
  if dim then return tonumber(self.st[check_dim(self, dim) - 1]) end
  return strides_of(self)
end

--- Offset of the first element in its storage (elements).
function Tensor:storage_offset() return tonumber(self.off) end

--- The storage record (cdata ploss_lua_storage *: ptr, bytes, refs, version, id); views
-- share it.
function Tensor:storage() return self.store end

--- The version of the tensor's storage: a counter, shared by every view of the buffer,
-- that each write through this module bumps (copy, fill, zero, t[i] = v, the random
-- generators, …).  A criterion that saves a tensor compares versions to detect that the
-- tensor was written since.  Writes through a raw pointer (t:dl().data, from_pointer's
-- memory written by its other owner, a DLPack consumer) are not seen: call
-- bump_version() after such a write.
function Tensor:version() return tonumber(self.store.version) end

--- Record a write made without this module's methods (e.g. a C kernel that wrote a
-- gradient in place): bumps the storage's version.  Returns self.
function Tensor:bump_version()
  bump(self)
  return self
end

--- A number that identifies the storage (and so its version counter): equal for every
-- view of the same buffer, never reused within the process, even after the buffer is
-- freed.  Foreign memory wrapped again (from_pointer, from_dlpack of another library's
-- tensor) gets a new storage, with its own id and version.
function Tensor:storage_id() return tonumber(self.store.id) end

--- A `DLManagedTensor *` over this tensor's memory, for another library (zero-copy).
-- The export holds a reference to the storage: the buffer stays alive until the
-- consumer calls the deleter (exactly once, on the thread running this Lua state, while
-- it is open), even if every ploss tensor over it is collected; until then t:free() on
-- any of its views raises.  A consumer that never calls the deleter leaks the buffer.
-- Writes the consumer makes are not seen by t:version() (see there).
function Tensor:to_dlpack()
  local desc = self:dl() -- raises when freed
  local e = ffi.cast(export_ptr_t, ffi.C.malloc(ffi.sizeof("ploss_lua_export")))
  if e == nil then ploss.raise("to_dlpack: out of host memory") end
  local dl = e.m.dl_tensor
  dl.data, dl.device, dl.ndim, dl.dtype, dl.byte_offset = desc.data, desc.device, desc.ndim, desc.dtype, 0
  for d = 0, desc.ndim - 1 do e.shape[d], e.strides[d] = self.sz[d], self.st[d] end
  dl.shape, dl.strides = e.shape, e.strides
  local s = self.store
  e.m.manager_ctx = s
  e.m.deleter = export_deleter
  s.refs, s.exports = s.refs + 1, s.exports + 1
  return ffi.cast(managed_ptr_t, e)
end

-- The deleter of to_dlpack's results: frees the DLManagedTensor and drops its reference
-- to the storage (freeing the buffer when nothing else uses it).  Created once and never
-- freed (a callback slot per process).  It must not raise: it runs inside C calls.
export_deleter = ffi.cast("void (*)(DLManagedTensor *)", function(m)
  if m == nil then return end
  local s = ffi.cast(storage_ptr_t, m.manager_ctx)
  ffi.C.free(m)
  s.exports = s.exports - 1
  release(s)
end)

--- Free the buffer now (idempotent); every view of the same storage becomes unusable.
-- A from_pointer tensor drops its owner (the memory itself is not ploss's to free); a
-- from_dlpack tensor calls the producer's deleter.  Raises while a to_dlpack export of
-- the storage is alive (its consumer may still read the buffer).
function Tensor:free()
  local s = self.store
  if s == nil then return end
  if s.exports > 0 and s.ptr ~= nil then
    ploss.raise(string.format("free: the storage is exported by to_dlpack (%d export(s) whose deleter " ..
      "has not run); the buffer is released when the last one is deleted", s.exports))
  end
  free_buffer(s)
end

--- True when the elements are dense in row-major order (sizes 1 ignored; a tensor without
-- elements is contiguous whatever its strides, as in PyTorch).
function Tensor:is_contiguous()
  local nd = self.desc.ndim
  for i = 0, nd - 1 do
    if self.sz[i] == 0 then return true end
  end
  local expect = 1
  for i = nd - 1, 0, -1 do
    local s = self.sz[i]
    if s ~= 1 then
      if self.st[i] ~= expect then return false end
      expect = expect * s
    end
  end
  return true
end

--- True when the tensor's sizes are the list `sizes` (without making a list of its own).
function Tensor:has_sizes(sizes)
  local nd = self.desc.ndim
  if #sizes ~= nd then return false end
  for i = 1, nd do
    if tonumber(self.sz[i - 1]) ~= sizes[i] then return false end
  end
  return true
end

--- The tensor itself when contiguous, else a contiguous copy.
function Tensor:contiguous()
  if self:is_contiguous() then return self end
  return ploss.empty_like(self):copy(self)
end

--- A copy (contiguous, same dtype and device).
function Tensor:clone() return ploss.empty_like(self):copy(self) end


local copy_values

-- t's values on the host as a contiguous tensor of `dtype` (one that holds them exactly,
-- f64 or i64): t itself when it is one, else a copy the caller frees.
local function host_copy(t, dtype)
  if not t:is_cuda() and t:dtype() == dtype and t:is_contiguous() then return t end
  return copy_values(ploss.empty(sizes_of(t), { dtype = dtype }), t)
end

-- dst ← src, the values checked by the caller.
function copy_values(dst, src)
  local dcuda, scuda = dst:is_cuda(), src:is_cuda()
  if dcuda and scuda and dst:device() ~= src:device() then
    -- GPU to another GPU: through the host
    local host = ploss.empty_like(src, { device = "cpu" })
    copy_values(host, src)
    copy_values(dst, host)
    host:free()
    return dst
  end
  -- ploss_copy needs a context: the CUDA side's when one side is a GPU
  local ctx = dcuda and dst:context() or src:context()
  ploss.check(C.ploss_copy(ctx, dst:dl(), src:dl()), "copy")
  bump(dst)
  return dst
end

-- Raise unless every value of `src` converts to `dtype` (finite and within its range,
-- after truncation toward zero, for a float src copied into an integer dtype; within its
-- range for an integer src copied into a narrower one); `what` names the call.
local function check_conversion(src, dtype, what)
  if not int_bounds[dtype] then return end
  if dtype_of(src).float then check_int_values(src, dtype, what) else check_int_to_int(src, dtype, what) end
end

--- self ← src, converting dtype; any strides; same sizes; any devices.  A float src copied
-- into an integer tensor is truncated toward zero and must hold only values that dtype
-- can (finite, within its range), as with :to; an integer src copied into a narrower
-- integer dtype (i64 into i32 or u8, i32 into u8) must hold only values it can (no wrap).
-- Returns self.
function Tensor:copy(src)
  if not is_tensor(src) then ploss.raise("copy: expected a tensor, got " .. type(src)) end
  check_conversion(src, self:dtype(), "copy")
  return copy_values(self, src)
end

--- Every element ← value (an integer tensor takes only an integer within its dtype's
-- range: a fraction or a value it cannot hold is an error, not truncated or wrapped).
-- Returns self.
function Tensor:fill(value)
  return fill_as(self, value, "fill", "a number")
end

--- Every element ← 0.  Returns self.
function Tensor:zero() return fill_as(self, 0, "zero", "a number") end

-- PyTorch's names of the three (Torch7's above), as add_ and mul_ are PyTorch's
Tensor.copy_, Tensor.fill_, Tensor.zero_ = Tensor.copy, Tensor.fill, Tensor.zero

local INT_RANGES = { i64 = { -0x7fffffffffffffffLL - 1, 0x7fffffffffffffffLL }, i32 = { -2147483648LL, 2147483647LL },
                     u8 = { 0LL, 255LL } }

-- self ← self + k for an integer tensor and an integer k (a label map shifted: Torch7's
-- 1-based labels to 0-based ones).  The values go through the host as i64; a result that
-- self's dtype cannot hold is an error and nothing is written.
local function add_integer(self, k)
  if k ~= math.floor(k) or math.abs(k) >= 2 ^ 53 then
    ploss.raise("add_: other: an integer tensor takes an integer (of magnitude below 2^53), got " .. ploss.shown(k))
  end
  local dt = self:dtype()
  local host = ploss.empty(sizes_of(self), { dtype = "i64" })
  host:copy(self)
  local v = ffi.cast("int64_t *", host:dl().data)
  local k64 = ffi.new("int64_t", k)
  -- the range the values may take before the shift (int64 cdata: exact comparisons)
  local vlo, vhi = unpack(INT_RANGES[dt])
  if k > 0 then vhi = vhi - k64 else vlo = vlo - k64 end
  for i = 0, tonumber(host.n) - 1 do
    if v[i] < vlo or v[i] > vhi then
      local shown = tostring(v[i]):gsub("LL$", "")
      host:free()
      ploss.raise(string.format("add_: element %d (row-major): %s + %s is outside %s's range", i + 1, shown,
        string.format("%.0f", k), dt))
    end
  end
  for i = 0, tonumber(host.n) - 1 do v[i] = v[i] + k64 end
  local ok, err = pcall(copy_values, self, host) -- refused before any write (an expanded self)
  host:free()
  if not ok then error((tostring(err):gsub("copy: dst:", "add_: self:")), 0) end
  return self
end

--- self ← self + alpha·other (PyTorch's add_; alpha default 1): a float tensor `other` of
-- self's sizes or broadcast to them by PyTorch's rules, on self's device, any float dtype;
-- each element computed in f64 and rounded to self's dtype (f16 and bf16 through f32, as
-- :copy).  Unlike PyTorch's, an integer tensor other is refused.  `other` may be a number: added to
-- every element (alpha·other), also of an integer tensor, where it must be an integer and
-- the results within the dtype's range (`labels:add_(-1)`).  Returns self.
local ADD_NAMES = { dst = "self", src = "other" }
function Tensor:add_(other, alpha)
  if alpha == nil then alpha = 1 end
  if type(alpha) ~= "number" then ploss.raise("add_: alpha: expected a number, got " .. ploss.shown(alpha)) end
  if type(other) == "number" then
    local k = alpha * other
    if not (k > -math.huge and k < math.huge) then
      ploss.raise("add_: other: alpha·other = " .. tostring(k) .. " is not a finite number")
    end
    if int_bounds[self:dtype()] then return add_integer(self, k) end -- (its copy bumps the version)
    local one = ploss.full({}, k, { dtype = "f64", device = self:device() })
    local ok, err = pcall(Tensor.add_, self, one, 1)
    one:free()
    if not ok then error(err, 0) end
    return self
  end
  if not is_tensor(other) then
    ploss.raise("add_: other: expected a tensor or a number, got " .. ploss.shown(other))
  end
  ploss.check(C.ploss_axpby(self:context(), self:dl(), alpha, other:dl(), 1), "add_", ADD_NAMES, true)
  bump(self)
  return self
end

--- self ← value·self (PyTorch's mul_ by a finite number; a NaN or Inf in self stays one,
-- also for value = 0).  Float tensors; computed in f64 and rounded to self's dtype.  Returns
-- self.
local MUL_NAMES = { dst = "self", src = "self", alpha = "value" }
function Tensor:mul_(value)
  if type(value) ~= "number" then ploss.raise("mul_: value: expected a number, got " .. ploss.shown(value)) end
  ploss.check(C.ploss_axpby(self:context(), self:dl(), value, self:dl(), 0), "mul_", MUL_NAMES, true)
  bump(self)
  return self
end

-- Raise unless every value of the float tensor `t` converts to the integer dtype `dtype`:
-- finite, and within its range after truncation toward zero (with `whole`, an integer as
-- well: ploss.tensor's rule, where :to truncates).  The values are read on the host (a
-- CUDA tensor is copied there for the check).  Non-finite values are found by their
-- exponent bits before any value becomes a Lua number (see read_values).
function check_int_values(t, dtype, what, whole)
  local b = int_bounds[dtype]
  local host = host_copy(t, "f64")
  local data = host:dl().data
  local p, words = ffi.cast("double *", data), ffi.cast("uint32_t *", data) -- little-endian
  local lo, hi, bad, fraction = b[1], b[2], nil, false
  for i = 0, tonumber(t.n) - 1 do
    if bit.band(words[2 * i + 1], 0x7ff00000) == 0x7ff00000 then bad = i; break end
    local v = p[i]
    if not (v > lo and v < hi) then bad = i; break end
    if whole and v ~= math.floor(v) then bad, fraction = i, true; break end
  end
  local value = bad and read_values(p + bad, "f64", 1)[1]
  if host ~= t then host:free() end
  if fraction then
    -- truncated, a label 1.5 would become class 1 without a word
    ploss.raise(string.format("%s: element %d (row-major) of the %s tensor is %.17g, not an integer (dtype %s); " ..
      "round it first, or convert with :to('%s'), which truncates", what, bad + 1, dtype_of(t).name, value, dtype,
      dtype))
  end
  if bad then int_range_error(what, bad + 1, value, dtype) end
end

-- Raise unless every value of the integer tensor `t` is within the range of the integer
-- dtype `dtype` (a narrowing conversion would wrap: 300 as u8 is 44).  Nothing to read
-- when t's dtype is no wider; else the values are read on the host as i64 (exactly).
function check_int_to_int(t, dtype, what)
  local lo, hi = unpack(INT_RANGES[dtype])
  local slo, shi = unpack(INT_RANGES[t:dtype()])
  if slo >= lo and shi <= hi then return end
  local host = host_copy(t, "i64") -- widening (or the same dtype): nothing to check
  local p = ffi.cast("int64_t *", host:dl().data)
  local bad
  for i = 0, tonumber(t.n) - 1 do
    local v = p[i]
    if v < lo or v > hi then bad = i; break end
  end
  local value = bad and (tostring(p[bad]):gsub("LL$", ""))
  if host ~= t then host:free() end
  if bad then int_range_error(what, bad + 1, value, dtype) end
end

--- The arguments of a `to(device, dtype)` method (a tensor's, a module's): the canonical
-- device name (or nil) and the dtype as given (or nil; a dtype name alone may stand in the
-- device's place, as in PyTorch's x.to(dtype)).  One name that is neither a dtype nor a
-- device, a dtype that is none, or a device that does not parse, raises naming `where`.
function ploss.to_arguments(device, dtype, where)
  if dtype == nil and type(device) == "string" and aliases[device] then return nil, device end
  if dtype ~= nil and not aliases[dtype] then
    local _, err = pcall(ploss.dtype, dtype)
    ploss.raise(where .. ": " .. (tostring(err):match("ploss: (.*)$") or tostring(err)))
  end
  if device == nil then return nil, dtype end
  if dtype == nil and type(device) == "string" and not device:match("^cpu") and not device:match("^cuda") then
    -- one name, neither a dtype nor a device ('F32', 'fp32', 'gpu')
    local hint = aliases[device:lower()] and string.format(" (did you mean '%s'?)", device:lower()) or ""
    ploss.raise(string.format("%s: %s is neither a dtype (f32, f16, bf16, f64, i64, i32, u8, or an alias: float, " ..
      "double, long, …) nor a device ('cpu', 'cuda', 'cuda:<id>')%s", where, ploss.shown(device), hint))
  end
  local ok, name = pcall(ploss.parse_device, device)
  if not ok then
    ploss.raise(string.format("%s: device: expected 'cpu', 'cuda' or 'cuda:<id>', got %s%s", where, ploss.shown(device),
      type(device) == "string" and device:match("^cpu:%d+$") and " (one CPU device: 'cpu' or 'cpu:0')" or ""))
  end
  return name, dtype
end

--- This tensor on `device` and/or as `dtype` (a new contiguous tensor; the tensor itself
-- when both already match, unless `force_copy`).  `t:to('cuda')`, `t:to('cpu', 'f64')`,
-- `t:to(nil, 'f16')`, and `t:to('f16')` (a dtype name alone, as PyTorch's x.to(dtype)).
-- A float tensor converted to an integer dtype must hold only finite values within that
-- dtype's range (truncated toward zero), and an integer tensor converted to a narrower
-- integer dtype only values within its range, else the conversion raises and makes nothing.
function Tensor:to(device, dtype, force_copy)
  device, dtype = ploss.to_arguments(device, dtype, "to")
  device = device or self:device()
  dtype = dtype and canon_dtype(dtype) or self:dtype()
  if not force_copy and device == self:device() and dtype == self:dtype() then return self end
  check_conversion(self, dtype, "to")
  return copy_values(ploss.empty(sizes_of(self), { dtype = dtype, device = device }), self)
end

--- Shortcuts: t:cuda([id]), t:cpu().
function Tensor:cuda(id) return self:to(id and ("cuda:" .. id) or "cuda") end
function Tensor:cpu() return self:to("cpu") end

-- Torch7's tensor type names: the dtype, and the device ('torch.Cuda…' a GPU: the tensor's
-- own if it is on one, else the first; the others the CPU)
local TORCH7_TYPES = { Float = "f32", Double = "f64", Half = "f16", Long = "i64", Int = "i32", Byte = "u8" }

--- The dtype name, or a copy converted to a dtype (a ploss name or alias) or to a Torch7
-- type name ('torch.DoubleTensor': f64 on the CPU; 'torch.CudaTensor': f32 on the GPU).
function Tensor:type(dtype)
  if dtype == nil then return self:dtype() end
  if type(dtype) == "string" and dtype:match("^torch%.") then
    local kind = dtype:match("^torch%.(%a-)Tensor$")
    local cuda = kind ~= nil and kind:sub(1, 4) == "Cuda"
    if cuda then kind = kind:sub(5) end
    local dt = kind and (cuda and kind == "" and "f32" or TORCH7_TYPES[kind])
    if not dt then
      ploss.raise(string.format("type: unknown Torch7 type name '%s' (torch.FloatTensor, DoubleTensor, HalfTensor, " ..
        "LongTensor, IntTensor, ByteTensor, CudaTensor, Cuda<Kind>Tensor; or a dtype: 'f32', 'f64', …)", dtype))
    end
    local device = cuda and (self:is_cuda() and self:device() or "cuda") or "cpu"
    return self:to(device, dt)
  end
  return self:to(nil, dtype)
end
function Tensor:float() return self:to(nil, "f32") end
function Tensor:double() return self:to(nil, "f64") end
function Tensor:half() return self:to(nil, "f16") end
function Tensor:bfloat16() return self:to(nil, "bf16") end
function Tensor:long() return self:to(nil, "i64") end
function Tensor:int() return self:to(nil, "i32") end
function Tensor:byte() return self:to(nil, "u8") end

-- n values of a dense host buffer of a C dtype as Lua numbers.  LuaJIT (GC64) keeps Lua
-- values as NaN-tagged doubles: a double whose bits are a NaN with the sign and the high
-- payload bits set (the f32 NaN 0xFFFFFFFF, which is CUDA's canonical NaN 0x7FFFFFFF
-- negated; uninitialised memory) would become false / nil / a light userdata once stored.
-- Such NaNs are read as the canonical NaN (the bits are checked before the value exists).
local NAN = 0 / 0
local direct_ctype
function read_values(data, dtype, n)
  local out = {}
  if dtype == "f64" then
    local p, hi = ffi.cast("double *", data), ffi.cast("uint32_t *", data) -- little-endian
    for i = 1, n do
      if hi[2 * i - 1] >= 0xFFF80000 then out[i] = NAN else out[i] = tonumber(p[i - 1]) end
    end
  elseif dtype == "f32" then
    local p, bits = ffi.cast("float *", data), ffi.cast("uint32_t *", data)
    for i = 1, n do
      if bits[i - 1] > 0xFF800000 then out[i] = NAN else out[i] = tonumber(p[i - 1]) end
    end
  else
    local p = ffi.cast(direct_ctype[dtype], data)
    for i = 1, n do out[i] = tonumber(p[i - 1]) end
  end
  return out
end

direct_ctype = { f32 = "float *", f64 = "double *", i64 = "int64_t *", i32 = "int32_t *", u8 = "uint8_t *" }

-- Tensors whose buffers are being read through a raw pointer.  A raw pointer does not keep
-- its tensor alive: `x:to('f16'):flat()` leaves the converted tensor referenced by nothing
-- once host_values has its pointer (a tail call drops the last frame that held it), and a
-- garbage collection during the read (the output table grows) would free the buffer under
-- the loop.  Listed here for the read, the tensor stays reachable.
local reading = {}

-- Element values in row-major order as a flat Lua array (a host read: on CUDA this
-- synchronises and reports the device error slot).
local function host_values(t)
  local direct = direct_ctype[t:dtype()]
  if direct and not t:is_cuda() and t:is_contiguous() then
    -- a dense host tensor of a C type: read it in place
    reading[t] = true
    local out = read_values(t:dl().data, t:dtype(), tonumber(t.n))
    reading[t] = nil
    return out
  end
  local staging = dtype_of(t).float and "f64" or "i64"
  local host = host_copy(t, staging)
  local out = read_values(host:dl().data, staging, tonumber(t.n))
  if host ~= t then host:free() end
  return out
end

--- Nested Lua table of the values (a number for a 0-d tensor).  Host read.
function Tensor:totable()
  local flat = host_values(self)
  local sizes = sizes_of(self)
  if #sizes == 0 then return flat[1] end
  local pos = 0
  local function build(d)
    local r = {}
    if d == #sizes then
      for i = 1, sizes[d] do pos = pos + 1; r[i] = flat[pos] end
    else
      for i = 1, sizes[d] do r[i] = build(d + 1) end
    end
    return r
  end
  return build(1)
end

--- Row-major values as a flat Lua array.  Host read.
function Tensor:flat() return host_values(self) end

--- The value of a one-element tensor as a Lua number.  A host read: on CUDA it waits for
-- the device and raises a pending device error (e.g. an invalid label found by a kernel).
function Tensor:item()
  if self.n ~= 1 then
    ploss.raise(string.format("item: expected a one-element tensor, got %s", shape_string(sizes_of(self))))
  end
  return host_values(self)[1]
end

---------------------------------------------------------------------------------------
-- Views (share the storage)
---------------------------------------------------------------------------------------

--- Same elements with new sizes (needs a contiguous tensor; one size may be -1).
-- `t:view(6)`, `t:view(2, -1)`, `t:view({2, 3})`.
function Tensor:view(...)
  local sizes = select(1, ...)
  if type(sizes) ~= "table" then sizes = { ... } else sizes = copy_list(sizes) end
  local numel = tonumber(self.n)
  local known, infer = 1, nil
  for i = 1, #sizes do
    if check_int(sizes[i], "view", "size " .. i, -1) == -1 then
      if infer then ploss.raise("view: only one size may be -1") end
      infer = i
    else
      known = known * sizes[i]
    end
  end
  if infer then
    if known == 0 or numel % known ~= 0 then
      ploss.raise(string.format("view: cannot infer size -1 for %d elements", numel))
    end
    sizes[infer] = numel / known
    known = numel
  end
  if known > MAX_SPAN then
    -- (past 2^53 the product is no longer exact, and %d would print it wrapped)
    ploss.raise(string.format("view: %s has more than 2^53 elements, the tensor %d", shape_string(sizes), numel))
  end
  if known ~= numel then
    ploss.raise(string.format("view: %s has %.0f elements, the tensor %d", shape_string(sizes), known, numel))
  end
  if not self:is_contiguous() then
    ploss.raise("view: the tensor is not contiguous; call :contiguous() first")
  end
  return view_of(self, sizes, contiguous_strides(sizes))
end

--- view() of the tensor, or of a contiguous copy when it is not contiguous.
function Tensor:reshape(...)
  return self:contiguous():view(...)
end

--- Dimensions reordered: result dim i is this tensor's dim perm[i].  `t:permute(1, 3, 4, 2)`.
function Tensor:permute(...)
  local perm = select(1, ...)
  if type(perm) ~= "table" then perm = { ... } end
  local nd = self.desc.ndim
  if #perm ~= nd then ploss.raise(string.format("permute: expected %d dims, got %d", nd, #perm)) end
  local seen, sizes, strides = {}, {}, {}
  for i = 1, nd do
    local d = check_dim(self, perm[i], "permute")
    if seen[d] then ploss.raise("permute: dim " .. d .. " repeated") end
    seen[d] = true
    sizes[i], strides[i] = tonumber(self.sz[d - 1]), tonumber(self.st[d - 1])
  end
  return view_of(self, sizes, strides)
end

--- Dims a and b swapped (a view).
function Tensor:transpose(a, b)
  a, b = check_dim(self, a, "transpose"), check_dim(self, b, "transpose")
  local sizes, strides = sizes_of(self), strides_of(self)
  sizes[a], sizes[b] = sizes[b], sizes[a]
  strides[a], strides[b] = strides[b], strides[a]
  return view_of(self, sizes, strides)
end

--- The transpose of a 2-d tensor.
function Tensor:t()
  if self.desc.ndim ~= 2 then ploss.raise("t: expected a 2-d tensor") end
  return self:transpose(1, 2)
end

--- Elements start .. start+len-1 (1-based) along dim (a view).
function Tensor:narrow(dim, start, len)
  dim = check_dim(self, dim, "narrow")
  local n = self:size(dim)
  check_int(start, "narrow", "start")
  check_int(len, "narrow", "length", 0)
  if start < 1 or start + len - 1 > n then
    ploss.raise(string.format("narrow: [%s, %s+%s) is outside dim %d of size %d",
      tostring(start), tostring(start), tostring(len), dim, n))
  end
  local sizes = sizes_of(self)
  sizes[dim] = len
  return view_of(self, sizes, strides_of(self), tonumber(self.off) + (start - 1) * self:stride(dim))
end

--- The slice at position i (1-based) of dim, without that dim (a view).
function Tensor:select(dim, i)
  dim = check_dim(self, dim, "select")
  local n = self:size(dim)
  check_int(i, "select", "index")
  if i < 1 or i > n then
    ploss.raise(string.format("select: index %s is outside [1, %d]", tostring(i), n))
  end
  local sizes, strides = {}, {}
  for d = 1, self.desc.ndim do
    if d ~= dim then
      sizes[#sizes + 1], strides[#strides + 1] = tonumber(self.sz[d - 1]), tonumber(self.st[d - 1])
    end
  end
  return view_of(self, sizes, strides, tonumber(self.off) + (i - 1) * self:stride(dim))
end

--- A view with a dim of size 1 inserted at `dim` (1 … dim()+1; negative counts from the end).
function Tensor:unsqueeze(dim)
  local nd = self.desc.ndim
  check_int(dim, "unsqueeze", "dim")
  local given = dim
  if dim < 0 then dim = nd + 2 + dim end
  if dim < 1 or dim > nd + 1 then
    ploss.raise(string.format("unsqueeze: dim %d is outside [1, %d] (or [-%d, -1] from the end) for a %d-d tensor",
      given, nd + 1, nd + 1, nd))
  end
  local sizes, strides = sizes_of(self), strides_of(self)
  local st = dim <= nd and sizes[dim] * strides[dim] or 1
  table.insert(sizes, dim, 1)
  table.insert(strides, dim, st)
  return view_of(self, sizes, strides)
end

--- A view without the dims of size 1 (or only `dim`, when it has size 1).
function Tensor:squeeze(dim)
  local sizes, strides = {}, {}
  if dim then dim = check_dim(self, dim, "squeeze") end
  for d = 1, self.desc.ndim do
    local s = tonumber(self.sz[d - 1])
    if not (s == 1 and (dim == nil or dim == d)) then
      sizes[#sizes + 1], strides[#strides + 1] = s, tonumber(self.st[d - 1])
    end
  end
  return view_of(self, sizes, strides)
end

--- A view where dims of size 1 are repeated to `sizes` with stride 0, new dims in front
-- as PyTorch's (`ploss.tensor({1, 2}):expand(3, 2)`; for reading:
-- the library refuses outputs whose elements share memory, `e[i] = v` too; a view taken
-- of it first, `e[1][2] = v`, has no shared elements of its own and writes the element that
-- every row shares, as in PyTorch).  A size -1 keeps the dim's.
function Tensor:expand(...)
  local sizes = select(1, ...)
  if type(sizes) ~= "table" then sizes = { ... } else sizes = copy_list(sizes) end
  local own, strides = sizes_of(self), strides_of(self)
  if #sizes < #own then
    ploss.raise("expand: expected at least " .. #own .. " sizes (one per dim, new dims in front), got " .. #sizes)
  end
  -- new leading dims (PyTorch's): size 1 there, with the stride of a dim in front of the
  -- others (one left at size 1 keeps it; a repeated one gets 0 below)
  local lead = #sizes - #own
  for _ = 1, lead do
    table.insert(strides, 1, #own > 0 and own[1] * strides[1] or 1)
    table.insert(own, 1, 1)
  end
  for d = 1, #sizes do
    if check_int(sizes[d], "expand", "size " .. d, -1) == -1 then
      if d <= lead then ploss.raise("expand: size " .. d .. " is -1, which only a dim the tensor has can take") end
      sizes[d] = own[d]
    end
    if sizes[d] ~= own[d] then
      if own[d] ~= 1 then ploss.raise("expand: dim " .. d .. " has size " .. own[d] .. ", not 1") end
      strides[d] = 0
    end
  end
  return view_of(self, sizes, strides)
end

-- t[i]: a number for a 1-d tensor (host read), else the slice select(1, i).
function Tensor:_index(i)
  if self.desc.ndim == 0 then ploss.raise("cannot index a 0-d tensor; use :item()") end
  local v = self:select(1, i)
  if v.desc.ndim == 0 then return v:item() end
  return v
end

---------------------------------------------------------------------------------------
-- Printing
---------------------------------------------------------------------------------------

local PRINT_LIMIT = 1000
local LINE_WIDTH = 80 -- a matrix's rows wider than this print in blocks of columns

local function formatter(vals, is_float)
  if not is_float then return function(v) return type(v) == "string" and v or string.format("%d", v) end end
  local allint, maxabs, minabs = true, 0, math.huge
  for _, v in ipairs(vals) do
    if v == v and v ~= math.huge and v ~= -math.huge then
      if v ~= math.floor(v) then allint = false end
      local a = math.abs(v)
      if a > maxabs then maxabs = a end
      if a > 0 and a < minabs then minabs = a end
    end
  end
  local fmt
  if allint and maxabs < 1e9 then fmt = "%.0f"
  elseif maxabs >= 1e5 or minabs < 1e-4 then fmt = "%.4e"
  else fmt = "%.4f" end
  return function(v)
    if v ~= v then return "nan" elseif v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
    return string.format(fmt, v)
  end
end

-- The values shown of `t` (a flat row-major list) and, per dim, the original positions
-- they come from.  Up to PRINT_LIMIT elements, all of them; above, a summary: each dim
-- longer than 2·EDGE keeps its first and last EDGE positions (cut[d] is then true).  The
-- summary is gathered into a small host tensor by one copy per combination of head and
-- tail blocks, so that a large (or CUDA) tensor is never read whole.
local EDGE = 3
-- The values of t to print: host_values's numbers, but i64 as their exact decimal strings
-- (a Lua number is exact only to 2^53: 2^53 + 1 would print as 2^53).
local function print_values(t)
  if t:dtype() ~= "i64" then return host_values(t) end
  local h = host_copy(t, "i64")
  local p, out = ffi.cast("int64_t *", h.desc.data), {}
  for i = 0, tonumber(h.n) - 1 do out[i + 1] = tostring(p[i]):sub(1, -3) end -- "…LL"
  if h ~= t then h:free() end
  return out
end
local function shown_values(t, sizes)
  local pos, cut, small, summarise = {}, {}, {}, tonumber(t.n) > PRINT_LIMIT
  for d, n in ipairs(sizes) do
    pos[d] = {}
    cut[d] = summarise and n > 2 * EDGE
    if cut[d] then
      for k = 1, EDGE do pos[d][k], pos[d][EDGE + k] = k, n - EDGE + k end
    else
      for k = 1, n do pos[d][k] = k end -- n <= 2·EDGE, or at most PRINT_LIMIT elements
    end
    small[d] = #pos[d]
  end
  if not summarise then return print_values(t), pos, cut end
  local host = ploss.empty(small, { dtype = t:dtype() })
  local cuts = {}
  for d = 1, #sizes do if cut[d] then cuts[#cuts + 1] = d end end
  for combo = 0, 2 ^ #cuts - 1 do
    local src, dst = t, host
    for k, d in ipairs(cuts) do
      if math.floor(combo / 2 ^ (k - 1)) % 2 == 0 then
        src, dst = src:narrow(d, 1, EDGE), dst:narrow(d, 1, EDGE)
      else
        src, dst = src:narrow(d, sizes[d] - EDGE + 1, EDGE), dst:narrow(d, EDGE + 1, EDGE)
      end
    end
    dst:copy(src)
  end
  local vals = print_values(host)
  host:free()
  return vals, pos, cut
end

tensor_mt.__tostring = function(t)
  local sizes = sizes_of(t)
  local footer = string.format("[ploss.Tensor %s %s on %s]", t:dtype(), shape_string(sizes), t:device())
  if t:is_freed() then return "[ploss.Tensor (freed)]" end
  if t.n == 0 then return footer end
  local vals, pos, cut = shown_values(t, sizes)
  local fmt = formatter(vals, dtype_of(t).float)
  local strs, width = {}, tonumber(t.n) > PRINT_LIMIT and 3 or 0 -- a summary fits "..."
  for i, v in ipairs(vals) do
    strs[i] = fmt(v)
    if #strs[i] > width then width = #strs[i] end
  end
  local function pad(str) return string.rep(" ", width - #str) .. str end
  local lines, nd = {}, #sizes
  local gap = " " .. pad("...") -- a line standing for the rows (or elements) not shown
  -- The printed columns of a matrix's rows, in blocks of at most LINE_WIDTH characters a
  -- line (Torch7's "Columns a to b" blocks for wider rows): each block's first and last
  -- entries in the list of shown columns, in which "..." (the last dim cut) is one entry.
  local entries = nd >= 2 and #pos[nd] + (cut[nd] and 1 or 0) or 1
  local per_block = math.max(1, math.floor((LINE_WIDTH + 1) / (width + 2)))
  local blocks = {}
  for first = 1, entries, per_block do blocks[#blocks + 1] = { first, math.min(entries, first + per_block - 1) } end
  -- one printed row: entries first..last of the n values from flat position start + 1
  local function row(start, n, first, last)
    local parts = {}
    for j = 1, n do
      parts[#parts + 1] = pad(strs[start + j])
      if n > 1 and cut[nd] and j == EDGE then parts[#parts + 1] = pad("...") end
    end
    return " " .. table.concat(parts, "  ", first or 1, last or #parts)
  end
  -- the original column (1-based) of shown entry e; nil for "..."
  local function column(e)
    if not cut[nd] or e <= EDGE then return pos[nd][e] end
    return e > EDGE + 1 and pos[nd][e - 1] or nil
  end
  if nd == 0 then
    lines[1] = strs[1]
  elseif nd == 1 then
    for i = 1, #pos[1] do
      lines[#lines + 1] = row(i - 1, 1)
      if cut[1] and i == EDGE then lines[#lines + 1] = gap end
    end
  else
    local rows, cols = #pos[nd - 1], #pos[nd]
    local mat = rows * cols
    local nmat = #vals / mat
    local prev
    for m = 0, nmat - 1 do
      if nd > 2 then
        -- the small tensor's index of this matrix, and the original positions it shows
        local idx, rem = {}, m
        for d = nd - 2, 1, -1 do
          idx[d] = rem % #pos[d] + 1
          rem = math.floor(rem / #pos[d])
        end
        if prev then
          -- the outermost dim that moved on decides whether matrices were left out
          local d0 = 1
          while idx[d0] == prev[d0] do d0 = d0 + 1 end
          lines[#lines + 1] = ""
          if cut[d0] and idx[d0] == EDGE + 1 then lines[#lines + 1] = "..."; lines[#lines + 1] = "" end
        end
        local orig = {}
        for d = 1, nd - 2 do orig[d] = pos[d][idx[d]] end
        lines[#lines + 1] = "(" .. table.concat(orig, ",") .. ",.,.) ="
        prev = idx
      end
      for b, block in ipairs(blocks) do
        if #blocks > 1 then
          if b > 1 then lines[#lines + 1] = "" end
          local a, z = column(block[1]) or column(block[1] + 1), column(block[2]) or column(block[2] - 1)
          lines[#lines + 1] = a == z and string.format("Column %d", a) or string.format("Columns %d to %d", a, z)
        end
        for r = 0, rows - 1 do
          lines[#lines + 1] = row(m * mat + r * cols, cols, block[1], block[2])
          if cut[nd - 1] and r == EDGE - 1 then lines[#lines + 1] = gap end
        end
      end
    end
  end
  lines[#lines + 1] = footer
  return table.concat(lines, "\n")
end

end
