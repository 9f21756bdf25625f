--- Communicators: collectives across processes, one per device (ploss.h, "communicators";
-- docs/distributed.md).  CPU contexts go through POSIX shared memory on one machine; CUDA
-- contexts through NCCL (a library built with it).
--
--   ploss.comm.unique_id() → a hex string (64 digits): made once, passed to every rank
--   ploss.comm.init{nranks =, rank =, id =, device = 'cpu', timeout = 300, wait = true}
--       → a communicator; returns once every rank has joined.  timeout: seconds any wait
--       may last before the call fails (and the communicator is aborted on every rank);
--       wait (CUDA): each collective waits for its completion (ploss_comm_synchronize), so
--       a dead peer is an error, not a hang; false leaves them queued on the device's
--       stream: call comm:synchronize() before reading the results on the host.
--   ploss.comm.init_from_env{device =, timeout =, wait =}
--       the same from PLOSS_WORLD_SIZE, PLOSS_RANK and PLOSS_COMM_ID (tools/launch.sh sets
--       them); device 'cuda' means cuda:<PLOSS_LOCAL_RANK, else PLOSS_RANK>.
--   comm:all_reduce(t [, 'sum'|'max'])  t ← the reduction over the ranks (in place); → t
--   comm:all_gather(t)          → a new tensor: the ranks' t concatenated along dim 1 in
--                                 rank order (a scalar t gives a vector of nranks)
--   comm:reduce_scatter(t [, op]) → a new tensor: rank r's slice r of dim 1 (t:size(1)
--                                 must be a multiple of nranks) of the reduction over ranks
--   comm:rank(), comm:size(), comm:device(), comm:synchronize(), comm:abort(),
--   comm:destroy() (also done by the garbage collector)
--   ploss.comm.is_comm(v)       whether v is a communicator
-- A communicator is also the `comm` option of the losses that shard over ranks (the margin
-- losses and Partial FC, InfoNCE: docs/distributed.md).
-- Tensors must be on the communicator's device; any dtype (f32, f16, bf16, f64, i64, i32,
-- u8); non-contiguous ones are copied.  Every rank must call the same collectives in the
-- same order on tensors of the same sizes and dtype.
return function(ploss)
local ffi = require "ffi"
local C = ploss.C

local comm = {}
ploss.comm = comm

local ID_BYTES = ffi.sizeof("ploss_comm_id") -- PLOSS_COMM_ID_BYTES
local ops = { sum = C.PLOSS_REDUCE_SUM, max = C.PLOSS_REDUCE_MAX }

local function to_hex(id)
  local out = {}
  for i = 0, ID_BYTES - 1 do out[#out + 1] = string.format("%02x", id.bytes[i]) end
  return table.concat(out)
end

local function from_hex(s)
  if type(s) ~= "string" or #s ~= 2 * ID_BYTES or not s:match("^%x+$") then
    ploss.raise(string.format("comm.init: id: expected %d hex digits (from ploss.comm.unique_id()), got %s",
      2 * ID_BYTES, type(s) == "string" and string.format("%q", #s > 80 and s:sub(1, 80) .. "…" or s) or type(s)))
  end
  local id = ffi.new("ploss_comm_id")
  for i = 0, ID_BYTES - 1 do id.bytes[i] = tonumber(s:sub(2 * i + 1, 2 * i + 2), 16) end
  return id
end

--- A fresh unique id as a hex string.
function comm.unique_id()
  local id = ffi.new("ploss_comm_id")
  ploss.check(C.ploss_comm_unique_id(id), "comm.unique_id")
  return to_hex(id)
end

local Comm = {}
Comm.__index = Comm

local function check_int(v, what, lo)
  if type(v) ~= "number" or v ~= math.floor(v) or v < lo or v > 2 ^ 31 - 1 then
    ploss.raise(string.format("comm.init: %s: expected an integer >= %d, got %s", what, lo, ploss.shown(v)))
  end
end

local INIT_KEYS = { nranks = true, rank = true, id = true, device = true, timeout = true, wait = true }
local ENV_KEYS = { device = true, timeout = true, wait = true }

-- wait is a boolean: a truthy non-boolean (wait = "no", 0) would be read as true
local function check_wait(v, where)
  if v ~= nil and type(v) ~= "boolean" then
    ploss.raise(string.format("%s: wait: expected true or false, got %s", where, ploss.shown(v)))
  end
end

--- Join a communicator (see the module's header).
function comm.init(opts)
  if type(opts) ~= "table" then ploss.raise("comm.init: expected a table {nranks =, rank =, id =, device =}, got " .. type(opts)) end
  ploss.check_option_keys(opts, "comm.init", INIT_KEYS)
  check_int(opts.nranks, "nranks", 1)
  check_int(opts.rank, "rank", 0)
  if opts.rank >= opts.nranks then
    ploss.raise(string.format("comm.init: rank: expected a rank in [0, %d), got %d", opts.nranks, opts.rank))
  end
  local id = from_hex(opts.id)
  local device = ploss.parse_device(opts.device)
  local o = ffi.new("ploss_comm_opts")
  C.ploss_comm_opts_init(o)
  if opts.timeout ~= nil then
    if type(opts.timeout) ~= "number" then ploss.raise("comm.init: timeout: expected seconds, got " .. type(opts.timeout)) end
    o.timeout = opts.timeout
  end
  check_wait(opts.wait, "comm.init")
  local out = ffi.new("ploss_comm_t *[1]")
  ploss.check(C.ploss_comm_init(ploss.context(device), opts.nranks, opts.rank, id, o, out), "comm.init")
  local self = setmetatable({
    ptr = ffi.gc(out[0], C.ploss_comm_destroy),
    _rank = opts.rank, _size = opts.nranks, _device = device,
    _wait = opts.wait ~= false and device ~= "cpu",
  }, Comm)
  return self
end

--- Join the communicator that tools/launch.sh describes in the environment.
function comm.init_from_env(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then ploss.raise("comm.init_from_env: expected a table {device =, timeout =, wait =}, got " .. type(opts)) end
  ploss.check_option_keys(opts, "comm.init_from_env", ENV_KEYS)
  check_wait(opts.wait, "comm.init_from_env")
  local function env_int(name)
    local v = tonumber(os.getenv(name) or "")
    if not v then ploss.raise("comm.init_from_env: " .. name .. " is not set (start the script with tools/launch.sh)") end
    return v
  end
  local size, rank = env_int("PLOSS_WORLD_SIZE"), env_int("PLOSS_RANK")
  local id = os.getenv("PLOSS_COMM_ID")
  if not id then ploss.raise("comm.init_from_env: PLOSS_COMM_ID is not set (start the script with tools/launch.sh)") end
  local device = opts.device or "cpu"
  if device == "cuda" then device = "cuda:" .. (tonumber(os.getenv("PLOSS_LOCAL_RANK") or "") or rank) end
  return comm.init { nranks = size, rank = rank, id = id, device = device, timeout = opts.timeout, wait = opts.wait }
end

local function live(self, what)
  if self.ptr == nil then ploss.raise("comm:" .. what .. ": the communicator was destroyed") end
  return self.ptr
end

local function need_tensor(self, t, what)
  if not ploss.is_tensor(t) then ploss.raise("comm:" .. what .. ": expected a ploss tensor, got " .. type(t)) end
  if t:device() ~= self._device then
    ploss.raise(string.format("comm:%s: the tensor is on %s but the communicator on %s", what, t:device(), self._device))
  end
  return t
end

local function op_code(op, what)
  local code = ops[op or "sum"]
  if not code then ploss.raise("comm:" .. what .. ": op: expected 'sum' or 'max', got " .. tostring(op)) end
  return code
end

local function finish(self, what)
  if self._wait then ploss.check(C.ploss_comm_synchronize(self.ptr), "comm:" .. what) end
end

function Comm:rank() return self._rank end
function Comm:size() return self._size end
function Comm:device() return self._device end

--- t ← the reduction of every rank's t ('sum' by default, or 'max'); returns t.
function Comm:all_reduce(t, op)
  local p = live(self, "all_reduce")
  need_tensor(self, t, "all_reduce")
  local code = op_code(op, "all_reduce")
  local buf = t:contiguous()
  ploss.check(C.ploss_comm_all_reduce(p, buf:dl(), buf:dl(), code), "comm")
  finish(self, "all_reduce")
  if buf ~= t then t:copy(buf) else t:bump_version() end
  return t
end

--- The ranks' t concatenated along dim 1, in rank order (a new tensor).
function Comm:all_gather(t)
  local p = live(self, "all_gather")
  need_tensor(self, t, "all_gather")
  local sizes = t:size()
  if #sizes == 0 then sizes = { self._size } else sizes[1] = sizes[1] * self._size end
  local out = ploss.empty(sizes, { dtype = t:dtype(), device = self._device })
  local src = t:contiguous()
  ploss.check(C.ploss_comm_all_gather(p, src:dl(), out:dl()), "comm")
  finish(self, "all_gather")
  return out
end

--- Rank r's slice r (along dim 1) of the reduction over the ranks of t (a new tensor).
function Comm:reduce_scatter(t, op)
  local p = live(self, "reduce_scatter")
  need_tensor(self, t, "reduce_scatter")
  local code = op_code(op, "reduce_scatter")
  local sizes = t:size()
  if #sizes == 0 or sizes[1] % self._size ~= 0 then
    ploss.raise(string.format("comm:reduce_scatter: the first dimension (%s) is not divisible by the %d ranks",
      #sizes == 0 and "a scalar has none" or tostring(sizes[1]), self._size))
  end
  sizes[1] = sizes[1] / self._size
  local out = ploss.empty(sizes, { dtype = t:dtype(), device = self._device })
  local src = t:contiguous()
  ploss.check(C.ploss_comm_reduce_scatter(p, src:dl(), out:dl(), code), "comm")
  finish(self, "reduce_scatter")
  return out
end

--- Wait for the collectives queued on a CUDA communicator (a no-op on the CPU).
function Comm:synchronize()
  ploss.check(C.ploss_comm_synchronize(live(self, "synchronize")), "comm:synchronize")
end

--- Make the communicator unusable on every rank (the others fail at once on the CPU).
function Comm:abort()
  ploss.check(C.ploss_comm_abort(live(self, "abort")), "comm:abort")
end

--- Leave and free the communicator (idempotent).
function Comm:destroy()
  local p = self.ptr
  if p == nil then return end
  self.ptr = nil
  ffi.gc(p, nil)
  ploss.check(C.ploss_comm_destroy(p), "comm:destroy")
end

--- True when v is a communicator (destroyed or not).
function comm.is_comm(v) return getmetatable(v) == Comm end

--- The communicator's C pointer for a loss's `comm` option (`where` names the call).
function comm.pointer(v, where)
  if v.ptr == nil then ploss.raise(where .. ": comm: the communicator was destroyed") end
  return v.ptr
end

Comm.__tostring = function(self)
  return string.format("ploss.comm(rank %d of %d, %s%s)", self._rank, self._size, self._device,
    self.ptr == nil and ", destroyed" or "")
end

end
