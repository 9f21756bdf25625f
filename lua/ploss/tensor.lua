--- ploss tensors: strided n-d arrays on the CPU or a CUDA device.
--
-- A tensor is a view (dtype, device, sizes, strides, offset) of a Storage.  The Storage is an
-- FFI metatype owning one buffer from ploss_alloc(); it is freed by the garbage collector
-- or by an idempotent `:free()`.  Views (`view`, `permute`, `transpose`, `narrow`,
-- `select`, `t[i]`) hold their storage, so the buffer lives as long as any view of it.
--
-- Conventions (Torch7's): dimensions and positions are 1-based in this API
-- (`t:size(1)` is N, `t:narrow(2, 1, 3)`); the VALUES of class-index tensors are 0-based, as
-- everywhere in ploss and on disk.  Sizes and strides are in elements.
--
-- dtypes: 'f32' (default), 'f16', 'bf16', 'f64', 'i64', 'i32', 'u8'
-- (aliases: float, half, bfloat16, double, long, int, byte, float32, float16, float64,
-- int64, int32, uint8).  Devices: 'cpu', 'cuda' (= 'cuda:0'), 'cuda:<id>'.
--
-- Every tensor exposes `t:dl()`, a `DLTensor *` for the C API (ploss.C.*).
return function(ploss)
local ffi = require "ffi"
local C = ploss.C

if not pcall(ffi.typeof, "ploss_lua_storage") then
  ffi.cdef [[
  typedef struct ploss_lua_storage {
    void *ptr;           /* NULL once freed */
    ploss_ctx_t *ctx;    /* the device's cached context */
    uint64_t bytes;
  } ploss_lua_storage;
  typedef struct ploss_lua_desc {
    DLTensor dl;         /* dl.shape / dl.strides point at the arrays below */
    int64_t shape[8];
    int64_t strides[8];
  } ploss_lua_desc;
  ]]
end
local MAX_DIMS = 8

---------------------------------------------------------------------------------------
-- dtypes
---------------------------------------------------------------------------------------

local dtypes = {
  f32  = { name = "f32",  code = 2, bits = 32, size = 4, float = true },
  f16  = { name = "f16",  code = 2, bits = 16, size = 2, float = true },
  bf16 = { name = "bf16", code = 4, bits = 16, size = 2, float = true },
  f64  = { name = "f64",  code = 2, bits = 64, size = 8, float = true },
  i64  = { name = "i64",  code = 0, bits = 64, size = 8, float = false },
  i32  = { name = "i32",  code = 0, bits = 32, size = 4, float = false },
  u8   = { name = "u8",   code = 1, bits = 8,  size = 1, float = false },
}
local aliases = {
  float = "f32", float32 = "f32", half = "f16", float16 = "f16", bfloat16 = "bf16",
  double = "f64", float64 = "f64", long = "i64", int64 = "i64", int = "i32", int32 = "i32",
  byte = "u8", uint8 = "u8",
}
for k in pairs(dtypes) do aliases[k] = k end
ploss.dtypes = dtypes

--- The canonical name of a dtype ('float' → 'f32'); raises on an unknown name.
function ploss.dtype(name)
  local d = aliases[name or "f32"]
  if not d then
    ploss.raise("dtype: expected one of f32, f16, bf16, f64, i64, i32, u8, got " .. tostring(name))
  end
  return d
end
local canon_dtype = ploss.dtype

---------------------------------------------------------------------------------------
-- Storage: the owned buffer (FFI metatype)
---------------------------------------------------------------------------------------

local Storage = {}
Storage.__index = Storage

--- Free the buffer now (idempotent).  Views of it become unusable.
function Storage:free()
  if self.ptr ~= nil then
    local p = self.ptr
    self.ptr = nil
    C.ploss_free(self.ctx, p)
  end
end
Storage.__gc = Storage.free
local storage_ct = ffi.metatype("ploss_lua_storage", Storage)

local function new_storage(device, bytes)
  local ctx = ploss.context(device)
  local out = ffi.new("void *[1]")
  ploss.check(C.ploss_alloc(ctx, bytes, out), "alloc")
  local s = storage_ct()
  s.ptr, s.ctx, s.bytes = out[0], ctx, bytes
  return s
end

---------------------------------------------------------------------------------------
-- Tensor
---------------------------------------------------------------------------------------

local Tensor = {}
ploss.Tensor = Tensor
local tensor_mt = { __name = "ploss.Tensor" }

local function is_tensor(x) return getmetatable(x) == tensor_mt end
ploss.is_tensor = is_tensor

-- Build a tensor object over `storage` (fields: storage, dtype, device, sizes, strides,
-- offset in elements).
local function make(storage, dtype, device, sizes, strides, offset)
  local nd = #sizes
  if nd > MAX_DIMS then ploss.raise("tensors have at most " .. MAX_DIMS .. " dims, got " .. nd) end
  local dt = dtypes[dtype]
  local desc = ffi.new("ploss_lua_desc")
  local name, devtype, id = ploss.parse_device(device)
  desc.dl.device.device_type = devtype
  desc.dl.device.device_id = id
  desc.dl.ndim = nd
  desc.dl.dtype.code, desc.dl.dtype.bits, desc.dl.dtype.lanes = dt.code, dt.bits, 1
  desc.dl.shape = desc.shape
  desc.dl.strides = desc.strides
  desc.dl.byte_offset = 0
  for i = 1, nd do
    desc.shape[i - 1] = sizes[i]
    desc.strides[i - 1] = strides[i]
  end
  desc.dl.data = ffi.cast("char *", storage.ptr) + offset * dt.size
  local numel = 1
  for i = 1, nd do numel = numel * sizes[i] end
  return setmetatable({
    _storage = storage, _desc = desc, _dtype = dtype, _device = name,
    _sizes = sizes, _strides = strides, _offset = offset, _numel = numel, _dt = dt,
  }, tensor_mt)
end

local function contiguous_strides(sizes)
  local strides, acc = {}, 1
  for i = #sizes, 1, -1 do
    strides[i] = acc
    acc = acc * math.max(sizes[i], 1)
  end
  return strides
end

local function copy_list(t)
  local r = {}
  for i = 1, #t do r[i] = t[i] end
  return r
end

-- Parse (shape, opts) from ploss.empty(2, 3, {opts}) or ploss.empty({2, 3}, {opts}).
local function shape_args(...)
  local first = select(1, ...)
  local sizes, opts
  if type(first) == "table" and not is_tensor(first) then
    sizes, opts = first, select(2, ...)
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
  local out = {}
  for i = 1, #sizes do
    local s = sizes[i]
    if type(s) ~= "number" or s < 0 or s ~= math.floor(s) then
      ploss.raise("shape: size " .. i .. " is " .. tostring(s) .. ", expected an integer >= 0")
    end
    out[i] = s
  end
  return out, opts or {}
end

--- Uninitialised tensor.  `ploss.empty(2, 3)` or `ploss.empty({2, 3}, {dtype='f64', device='cuda'})`.
function ploss.empty(...)
  local sizes, opts = shape_args(...)
  local dtype = canon_dtype(opts.dtype)
  local device = ploss.parse_device(opts.device)
  local numel = 1
  for i = 1, #sizes do numel = numel * sizes[i] end
  local storage = new_storage(device, numel * dtypes[dtype].size)
  return make(storage, dtype, device, sizes, contiguous_strides(sizes), 0)
end

--- A new tensor like `t` (same sizes, dtype and device unless opts say otherwise), contiguous.
function ploss.empty_like(t, opts)
  opts = opts or {}
  return ploss.empty(copy_list(t._sizes),
    { dtype = opts.dtype or t._dtype, device = opts.device or t._device })
end

--- Tensor of zeros.
function ploss.zeros(...)
  return ploss.empty(...):fill(0)
end

--- Tensor of ones.
function ploss.ones(...)
  return ploss.empty(...):fill(1)
end

--- Tensor filled with `value`: `ploss.full({2, 3}, 7, opts)`.
function ploss.full(sizes, value, opts)
  return ploss.empty(sizes, opts):fill(value)
end

---------------------------------------------------------------------------------------
-- Random numbers: Philox, counter-based (seed + offset), the same on CPU and GPU
---------------------------------------------------------------------------------------

local rng = { seed = 0, offset = 0 }

--- Set the global seed and reset the offset: the next random tensors are reproducible,
-- on the CPU and on any GPU alike.
function ploss.manual_seed(seed)
  if type(seed) ~= "number" or seed < 0 or seed ~= math.floor(seed) then
    ploss.raise("manual_seed: expected an integer >= 0, got " .. tostring(seed))
  end
  rng.seed, rng.offset = seed, 0
end

--- The current (seed, offset) of the global generator.
function ploss.rng_state() return rng.seed, rng.offset end

-- (seed, offset) for a tensor of `numel` elements; advances the global offset unless
-- opts.seed is given (then offset opts.offset or 0).
local function draw(opts, numel)
  if opts.seed then return opts.seed, opts.offset or 0 end
  local off = rng.offset
  rng.offset = rng.offset + numel
  return rng.seed, off
end

--- Uniform numbers in [low, high) (opts.low = 0, opts.high = 1); float dtypes.
-- `ploss.rand(2, 3)`, `ploss.rand({2, 3}, {device='cuda', dtype='f64', seed=7})`.
function ploss.rand(...)
  local sizes, opts = shape_args(...)
  local t = ploss.empty(sizes, opts)
  local seed, off = draw(opts, t._numel)
  ploss.check(C.ploss_rand_uniform(t:context(), t:dl(), seed, off, opts.low or 0, opts.high or 1), "rand")
  return t
end

--- Normal numbers, mean opts.mean (0), standard deviation opts.std (1); float dtypes.
function ploss.randn(...)
  local sizes, opts = shape_args(...)
  local t = ploss.empty(sizes, opts)
  local seed, off = draw(opts, t._numel)
  ploss.check(C.ploss_rand_normal(t:context(), t:dl(), seed, off, opts.mean or 0, opts.std or 1), "randn")
  return t
end

--- Integers in [low, high) (dtype default 'i64'): `ploss.randint(0, 10, {8}, opts)`.
function ploss.randint(low, high, sizes, opts)
  opts = opts or {}
  if type(low) ~= "number" or type(high) ~= "number" then
    ploss.raise("randint: expected (low, high, sizes[, opts])")
  end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.dtype = o.dtype or "i64"
  local t = ploss.empty(sizes, o)
  local seed, off = draw(o, t._numel)
  ploss.check(C.ploss_rand_int(t:context(), t:dl(), seed, off, low, high), "randint")
  return t
end

---------------------------------------------------------------------------------------
-- Tensors from Lua tables
---------------------------------------------------------------------------------------

-- Sizes of a nested table (rectangular), walking first elements.
local function nested_sizes(data)
  local sizes, node = {}, data
  while type(node) == "table" and not is_tensor(node) do
    sizes[#sizes + 1] = #node
    if #node == 0 then break end
    node = node[1]
  end
  return sizes
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
  if type(data) ~= "table" or #data ~= sizes[depth] then
    ploss.raise(string.format("tensor: ragged nested table (dim %d: expected %d elements, got %s)",
      depth, sizes[depth], type(data) == "table" and #data or type(data)))
  end
  for i = 1, sizes[depth] do flatten(data[i], sizes, depth + 1, out) end
end

--- A tensor from a number (0-d), a nested Lua table, or another tensor (copied).
-- opts: dtype (default 'f32', or the tensor's), device (default 'cpu', or the tensor's),
-- size (reshape a flat table: `ploss.tensor({1,2,3,4,5,6}, {size = {2, 3}})`).
-- Integer dtypes keep values exactly up to 2^53.
function ploss.tensor(data, opts)
  opts = opts or {}
  if is_tensor(data) then
    return data:to(opts.device or data._device, opts.dtype or data._dtype, true)
  end
  local sizes
  if type(data) == "number" then
    data, sizes = { data }, {}
  else
    if type(data) ~= "table" then ploss.raise("tensor: expected a number, a table or a tensor, got " .. type(data)) end
    sizes = nested_sizes(data)
  end
  local flat = {}
  flatten(data, sizes, 1, flat)
  if type(data) == "table" and #sizes == 1 and sizes[1] == 0 then flat = {} end
  if opts.size then
    local n = 1
    for i = 1, #opts.size do n = n * opts.size[i] end
    if n ~= #flat then ploss.raise(string.format("tensor: size has %d elements, the data %d", n, #flat)) end
    sizes = copy_list(opts.size)
  end
  local dtype = canon_dtype(opts.dtype)
  local staging_dtype = dtypes[dtype].float and "f64" or "i64"
  local host = ploss.empty(sizes, { dtype = staging_dtype })
  local p = ffi.cast(staging_dtype == "f64" and "double *" or "int64_t *", host._storage.ptr)
  for i = 1, #flat do p[i - 1] = flat[i] end
  if dtype == staging_dtype and ploss.parse_device(opts.device) == "cpu" then return host end
  local t = ploss.empty(sizes, { dtype = dtype, device = opts.device })
  t:copy(host)
  host:free()
  return t
end

---------------------------------------------------------------------------------------
-- Methods
---------------------------------------------------------------------------------------

tensor_mt.__index = function(t, k)
  local m = Tensor[k]
  if m ~= nil then return m end
  if type(k) == "number" then return t:_index(k) end
  return nil
end

--- The DLTensor * describing this tensor, for calls into ploss.C.  Raises when freed.
function Tensor:dl()
  if self._storage.ptr == nil then ploss.raise("tensor: its storage was freed") end
  return self._desc.dl
end

--- The cached context of the tensor's device.
function Tensor:context() return self._storage.ctx end

--- dtype name: 'f32', …
function Tensor:dtype() return self._dtype end

--- device name: 'cpu' or 'cuda:<id>'.
function Tensor:device() return self._device end

--- True on a CUDA device.
function Tensor:is_cuda() return self._device ~= "cpu" end

--- Number of dimensions.
function Tensor:dim() return #self._sizes end
Tensor.nDimension = Tensor.dim

--- Number of elements.
function Tensor:numel() return self._numel end
Tensor.nElement = Tensor.numel

local function check_dim(t, d, what)
  local nd = #t._sizes
  if type(d) ~= "number" or d ~= math.floor(d) then
    ploss.raise((what or "dim") .. ": expected an integer, got " .. tostring(d))
  end
  if d < 0 then d = nd + 1 + d end
  if d < 1 or d > nd then
    ploss.raise(string.format("%s: %d is outside [1, %d] for a %d-d tensor", what or "dim", d, nd, nd))
  end
  return d
end

--- Sizes as a fresh Lua table, or the size of dimension `dim` (1-based; -1 = last).
function Tensor:size(dim)
  if dim then return self._sizes[check_dim(self, dim)] end
  return copy_list(self._sizes)
end

--- Strides (elements) as a fresh table, or the stride of dimension `dim`.
function Tensor:stride(dim)
  if dim then return self._strides[check_dim(self, dim)] end
  return copy_list(self._strides)
end

--- Offset of the first element in its storage (elements).
function Tensor:storage_offset() return self._offset end

--- The Storage (FFI cdata) holding the buffer.
function Tensor:storage() return self._storage end

--- Free the buffer now (idempotent); every view of the same storage becomes unusable.
function Tensor:free() self._storage:free() end

--- True when the elements are dense in row-major order (sizes 1 ignored).
function Tensor:is_contiguous()
  local expect = 1
  for i = #self._sizes, 1, -1 do
    local s = self._sizes[i]
    if s ~= 1 then
      if self._strides[i] ~= expect then return false end
      expect = expect * s
    end
  end
  return true
end

local function shape_string(sizes)
  if #sizes == 0 then return "scalar" end
  return table.concat(sizes, "x")
end

--- The tensor itself when contiguous, else a contiguous copy.
function Tensor:contiguous()
  if self:is_contiguous() then return self end
  return ploss.empty_like(self):copy(self)
end

--- A copy (contiguous, same dtype and device).
function Tensor:clone()
  return ploss.empty_like(self):copy(self)
end

-- ploss_copy needs a context: the CUDA side's when one side is a GPU.
local function copy_ctx(dst, src)
  if dst._device ~= "cpu" then return dst:context() end
  return src:context()
end

--- self ← src, converting dtype; any strides; same sizes; any devices.  Returns self.
function Tensor:copy(src)
  if not is_tensor(src) then ploss.raise("copy: expected a tensor, got " .. type(src)) end
  if self._device ~= "cpu" and src._device ~= "cpu" and self._device ~= src._device then
    -- GPU to another GPU: through the host
    local host = ploss.empty_like(src, { device = "cpu" })
    host:copy(src)
    self:copy(host)
    host:free()
    return self
  end
  ploss.check(C.ploss_copy(copy_ctx(self, src), self:dl(), src:dl()), "copy")
  return self
end

--- Every element ← value.  Returns self.
function Tensor:fill(value)
  if type(value) ~= "number" then ploss.raise("fill: expected a number, got " .. type(value)) end
  ploss.check(C.ploss_fill(self:context(), self:dl(), value), "fill")
  return self
end

--- Every element ← 0.  Returns self.
function Tensor:zero() return self:fill(0) end

--- This tensor on `device` and/or as `dtype` (a new contiguous tensor; the tensor itself
-- when both already match, unless `force_copy`).  `t:to('cuda')`, `t:to('cpu', 'f64')`.
function Tensor:to(device, dtype, force_copy)
  device = device and ploss.parse_device(device) or self._device
  dtype = dtype and canon_dtype(dtype) or self._dtype
  if not force_copy and device == self._device and dtype == self._dtype then return self end
  local t = ploss.empty(copy_list(self._sizes), { dtype = dtype, device = device })
  return t:copy(self)
end

--- Shortcuts: t:cuda([id]), t:cpu().
function Tensor:cuda(id) return self:to(id and ("cuda:" .. id) or "cuda") end
function Tensor:cpu() return self:to("cpu") end

--- This tensor as `dtype` (same device); with no argument, the dtype name.
function Tensor:type(dtype)
  if dtype == nil then return self._dtype end
  return self:to(nil, dtype)
end
function Tensor:float() return self:to(nil, "f32") end
function Tensor:double() return self:to(nil, "f64") end
function Tensor:half() return self:to(nil, "f16") end
function Tensor:bfloat16() return self:to(nil, "bf16") end
function Tensor:long() return self:to(nil, "i64") end
function Tensor:int() return self:to(nil, "i32") end
function Tensor:byte() return self:to(nil, "u8") end

-- Element values in row-major order as a flat Lua array (a host read: on CUDA this
-- synchronises and reports the device error slot).
local function host_values(t)
  local staging = t._dt.float and "f64" or "i64"
  local host
  if t._device == "cpu" and t._dtype == staging and t:is_contiguous() then
    host = t
  else
    host = ploss.empty(copy_list(t._sizes), { dtype = staging })
    host:copy(t)
  end
  local p = ffi.cast(staging == "f64" and "double *" or "int64_t *", host:dl().data)
  local out = {}
  for i = 1, t._numel do out[i] = tonumber(p[i - 1]) end
  if host ~= t then host:free() end
  return out
end
Tensor._host_values = host_values

--- Nested Lua table of the values (a number for a 0-d tensor).  Host read.
function Tensor:totable()
  local flat = host_values(self)
  local sizes = self._sizes
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
  if self._numel ~= 1 then
    ploss.raise(string.format("item: expected a one-element tensor, got %s", shape_string(self._sizes)))
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
  local known, infer = 1, nil
  for i = 1, #sizes do
    if sizes[i] == -1 then
      if infer then ploss.raise("view: only one size may be -1") end
      infer = i
    elseif type(sizes[i]) ~= "number" or sizes[i] < 0 then
      ploss.raise("view: size " .. i .. " is " .. tostring(sizes[i]))
    else
      known = known * sizes[i]
    end
  end
  if infer then
    if known == 0 or self._numel % known ~= 0 then
      ploss.raise(string.format("view: cannot infer size -1 for %d elements", self._numel))
    end
    sizes[infer] = self._numel / known
    known = self._numel
  end
  if known ~= self._numel then
    ploss.raise(string.format("view: %s has %d elements, the tensor %d",
      shape_string(sizes), known, self._numel))
  end
  if not self:is_contiguous() then
    ploss.raise("view: the tensor is not contiguous; call :contiguous() first")
  end
  return make(self._storage, self._dtype, self._device, sizes, contiguous_strides(sizes), self._offset)
end
Tensor.reshape = function(self, ...)
  local ok = self:is_contiguous()
  return (ok and self or self:contiguous()):view(...)
end

--- Dimensions reordered: result dim i is this tensor's dim perm[i].  `t:permute(1, 3, 4, 2)`.
function Tensor:permute(...)
  local perm = select(1, ...)
  if type(perm) ~= "table" then perm = { ... } end
  local nd = #self._sizes
  if #perm ~= nd then ploss.raise(string.format("permute: expected %d dims, got %d", nd, #perm)) end
  local seen, sizes, strides = {}, {}, {}
  for i = 1, nd do
    local d = check_dim(self, perm[i], "permute")
    if seen[d] then ploss.raise("permute: dim " .. d .. " repeated") end
    seen[d] = true
    sizes[i], strides[i] = self._sizes[d], self._strides[d]
  end
  return make(self._storage, self._dtype, self._device, sizes, strides, self._offset)
end

--- Dims a and b swapped (a view).
function Tensor:transpose(a, b)
  a, b = check_dim(self, a, "transpose"), check_dim(self, b, "transpose")
  local sizes, strides = copy_list(self._sizes), copy_list(self._strides)
  sizes[a], sizes[b] = sizes[b], sizes[a]
  strides[a], strides[b] = strides[b], strides[a]
  return make(self._storage, self._dtype, self._device, sizes, strides, self._offset)
end

--- The transpose of a 2-d tensor.
function Tensor:t()
  if #self._sizes ~= 2 then ploss.raise("t: expected a 2-d tensor") end
  return self:transpose(1, 2)
end

--- Elements start .. start+len-1 (1-based) along dim (a view).
function Tensor:narrow(dim, start, len)
  dim = check_dim(self, dim, "narrow")
  local n = self._sizes[dim]
  if type(start) ~= "number" or type(len) ~= "number" or start < 1 or len < 0 or start + len - 1 > n then
    ploss.raise(string.format("narrow: [%s, %s+%s) is outside dim %d of size %d",
      tostring(start), tostring(start), tostring(len), dim, n))
  end
  local sizes = copy_list(self._sizes)
  sizes[dim] = len
  return make(self._storage, self._dtype, self._device, sizes, copy_list(self._strides),
    self._offset + (start - 1) * self._strides[dim])
end

--- The slice at position i (1-based) of dim, without that dim (a view).
function Tensor:select(dim, i)
  dim = check_dim(self, dim, "select")
  local n = self._sizes[dim]
  if type(i) ~= "number" or i < 1 or i > n or i ~= math.floor(i) then
    ploss.raise(string.format("select: index %s is outside [1, %d]", tostring(i), n))
  end
  local sizes, strides = {}, {}
  for d = 1, #self._sizes do
    if d ~= dim then
      sizes[#sizes + 1], strides[#strides + 1] = self._sizes[d], self._strides[d]
    end
  end
  return make(self._storage, self._dtype, self._device, sizes, strides,
    self._offset + (i - 1) * self._strides[dim])
end

--- A view with dims of size 1 inserted at `dim` (unsqueeze) or removed (squeeze).
function Tensor:unsqueeze(dim)
  local nd = #self._sizes
  if dim < 0 then dim = nd + 2 + dim end
  if dim < 1 or dim > nd + 1 then ploss.raise("unsqueeze: dim " .. dim .. " outside [1, " .. (nd + 1) .. "]") end
  local sizes, strides = copy_list(self._sizes), copy_list(self._strides)
  local st = dim <= nd and sizes[dim] * strides[dim] or 1
  table.insert(sizes, dim, 1)
  table.insert(strides, dim, st)
  return make(self._storage, self._dtype, self._device, sizes, strides, self._offset)
end

function Tensor:squeeze(dim)
  local sizes, strides = {}, {}
  if dim then dim = check_dim(self, dim, "squeeze") end
  for d = 1, #self._sizes do
    if not (self._sizes[d] == 1 and (dim == nil or dim == d)) then
      sizes[#sizes + 1], strides[#strides + 1] = self._sizes[d], self._strides[d]
    end
  end
  return make(self._storage, self._dtype, self._device, sizes, strides, self._offset)
end

--- A view where dims of size 1 are repeated to `sizes` with stride 0 (read-only use:
-- outputs with repeated elements are refused by the library).
function Tensor:expand(...)
  local sizes = select(1, ...)
  if type(sizes) ~= "table" then sizes = { ... } else sizes = copy_list(sizes) end
  if #sizes ~= #self._sizes then ploss.raise("expand: expected " .. #self._sizes .. " sizes") end
  local strides = copy_list(self._strides)
  for d = 1, #sizes do
    if sizes[d] ~= self._sizes[d] then
      if self._sizes[d] ~= 1 then ploss.raise("expand: dim " .. d .. " has size " .. self._sizes[d] .. ", not 1") end
      strides[d] = 0
    end
  end
  return make(self._storage, self._dtype, self._device, sizes, strides, self._offset)
end

-- t[i]: a number for a 1-d tensor (host read), else the slice select(1, i).
function Tensor:_index(i)
  if #self._sizes == 0 then ploss.raise("cannot index a 0-d tensor; use :item()") end
  local v = self:select(1, i)
  if #v._sizes == 0 then return v:item() end
  return v
end

tensor_mt.__newindex = function(t, k, v)
  if type(k) == "number" then
    local s = t:select(1, k)
    if is_tensor(v) then s:copy(v) else s:fill(v) end
    return
  end
  rawset(t, k, v)
end

tensor_mt.__len = function(t) return t._sizes[1] or 0 end

---------------------------------------------------------------------------------------
-- Printing
---------------------------------------------------------------------------------------

local PRINT_LIMIT = 1000

local function format_values(vals, is_float)
  if not is_float then
    return function(v) return string.format("%d", v) end, nil
  end
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
  elseif maxabs >= 1e5 or (minabs < 1e-4) then fmt = "%.4e"
  else fmt = "%.4f" end
  return function(v)
    if v ~= v then return "nan" elseif v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
    return string.format(fmt, v)
  end
end

tensor_mt.__tostring = function(t)
  local footer = string.format("[ploss.Tensor %s %s on %s]", t._dtype, shape_string(t._sizes), t._device)
  if t._storage.ptr == nil then return "[ploss.Tensor (freed)]" end
  if t._numel == 0 then return footer end
  if t._numel > PRINT_LIMIT then
    return "(" .. t._numel .. " elements, not shown; t:totable() reads them)\n" .. footer
  end
  local vals = host_values(t)
  local fmt = format_values(vals, t._dt.float)
  local strs, width = {}, 0
  for i, v in ipairs(vals) do
    strs[i] = fmt(v)
    if #strs[i] > width then width = #strs[i] end
  end
  local sizes, lines = t._sizes, {}
  local nd = #sizes
  local function row(start, n)
    local parts = {}
    for j = 1, n do parts[j] = string.rep(" ", width - #strs[start + j]) .. strs[start + j] end
    return " " .. table.concat(parts, "  ")
  end
  if nd == 0 then
    lines[1] = strs[1]
  elseif nd == 1 then
    for i = 1, sizes[1] do lines[#lines + 1] = row(i - 1, 1) end
  else
    local rows, cols = sizes[nd - 1], sizes[nd]
    local mat = rows * cols
    local nmat = t._numel / mat
    for m = 0, nmat - 1 do
      if nd > 2 then
        local idx, rem = {}, m
        for d = nd - 2, 1, -1 do
          idx[d] = rem % sizes[d] + 1
          rem = math.floor(rem / sizes[d])
        end
        lines[#lines + 1] = "(" .. table.concat(idx, ",") .. ",.,.) ="
      end
      for r = 0, rows - 1 do lines[#lines + 1] = row(m * mat + r * cols, cols) end
      if nd > 2 and m < nmat - 1 then lines[#lines + 1] = "" end
    end
  end
  lines[#lines + 1] = footer
  return table.concat(lines, "\n")
end

end
