--- ploss.nn: criteria with Torch7's API: the base class and the helpers the criteria and
-- layers share.
--
-- Using a criterion (every loss):
--
--     local crit = ploss.CrossEntropyLoss{label_smoothing = 0.1}
--     local loss = crit:forward(input, target)      -- Lua number (reduced; reading it
--                                                   -- synchronises) or a tensor ('none')
--     local gin  = crit:backward(input, target)     -- gradInput, a buffer reused between calls
--     local loss, gin = crit(input, target)         -- fused forward + backward, one pass
--
--  * `forward(input, target)` → loss; `updateOutput` is an alias.  The loss tensor and the
--    saved per-sample state (e.g. the log-sum-exp) are buffers of the criterion.
--  * `forward_tensor(input, target)` → the loss as a device tensor, without synchronising.
--  * `backward(input, target [, gradOutput])` → gradInput; `updateGradInput` is an alias.
--    gradOutput: a number or a one-element tensor for a reduced loss (default 1), a tensor
--    of the loss's shape for 'none' (default ones: the gradient of the sum).  Uses the
--    state saved by the last forward when input, target and options are those of that
--    forward and neither tensor was written since (through ploss); recomputes it otherwise.
--  * `crit(input, target [, scale])` → loss, gradInput from the fused pass: the gradient of
--    the reduced loss times `scale` (default 1; for 'none': of the sum of the losses).
--    With the option `inplace = true` the gradient is written over `input` itself, and
--    gradInput is `input`.
--  * gradInput is a contiguous buffer of the input's sizes, dtype and device, reallocated
--    only when one of those changes or when the call's input is that buffer (given back to
--    its criterion).  Loss: f32 (f64 for f64 input).
--  * `crit.output`, `crit.gradInput` hold the last results (Torch7 fields).
--  * `crit:to(device)` moves tensor options (e.g. weight) to a device.
--  * Options are named, checked at construction, when set as a field and at each call, and
--    can be changed after construction (`crit.reduction = 'sum'`); setting a field that is
--    not an option (a misspelling) is an error.
--
-- The criteria themselves are built from the loss descriptions by ploss/criterion.lua;
-- this module holds what they share with the layers of ploss/support.lua: the base class,
-- `nn.class` and `nn.buffer`.
return function(ploss)
local nn = {}


---------------------------------------------------------------------------------------
-- Criterion base class
---------------------------------------------------------------------------------------

local Criterion = {}
Criterion.__index = Criterion
nn.Criterion = Criterion

--- Raise unless `self` can be the object of a method (a table): a method called with a
-- dot instead of a colon (`crit.forward(x, t)`) gets its first argument for the object and
-- would otherwise fail deep inside with an error about the wrong argument.  `name` is the
-- class, `method` the method called, `var` the object's name in the hint (default "crit").
-- A method called on the class itself (`ploss.CrossEntropyLoss:forward(x, t)`, the
-- instance's braces forgotten) is refused too: a class of nn.class holds its instances'
-- __index and its name (an instance made a prototype, its own __index, holds no name).
function nn.check_self(self, name, method, var)
  -- not an object: a value, or a plain table (Torch7's list form {x1, x2} given first)
  if type(self) ~= "table" or getmetatable(self) == nil then
    ploss.raise(string.format("%s.%s: called without its object (got %s first): write %s:%s(...), with a colon",
      name, method, ploss.is_tensor(self) and "a ploss tensor" or type(self) == "table" and "a plain table" or
      type(self), var or "crit", method))
  end
  -- (the base class's methods: the class called; nn.class names it _class_name, the layers
  -- and optimizers of ploss/support.lua __name; a class holds its instances' __index, a
  -- table or, an optimizer's, a function, which no instance does)
  local cls = rawget(self, "_class_name") or rawget(self, "__name")
  if cls and rawget(self, "__index") ~= nil then
    -- its constructor where the library keeps it (a user's subclass: its name alone)
    local path = cls
    for _, where in ipairs { { ploss, "ploss." }, { ploss.nn, "ploss.nn." }, { ploss.optim, "ploss.optim." } } do
      if type(where[1]) == "table" and where[1][cls] == self then path = where[2] .. cls break end
    end
    ploss.raise(string.format("%s.%s: called on the class, not on an instance: make one first " ..
      "(local %s = %s(...)) and call %s:%s(...)", cls, method, var or "crit", path, var or "crit", method))
  end
end

-- Torch7's names of forward and backward, for a class `name` (each class its own, so that a
-- call without the colon is named by its class)
local function torch7_passes(cls, name)
  function cls:updateOutput(...)
    nn.check_self(self, name, "updateOutput")
    return self:forward(...)
  end
  function cls:updateGradInput(...)
    nn.check_self(self, name, "updateGradInput")
    return self:backward(...)
  end
end
torch7_passes(Criterion, "Criterion")

-- Fields every criterion has (Torch7's).
local FIELDS = { output = true, gradInput = true }

--- The option names a hint for positional arguments lists, sorted: the keys of the sets
-- given, less the switches no positional value stands for (inplace, the grad_* buffers,
-- the return_* outputs).
function nn.hint_names(...)
  local seen, names = {}, {}
  for k = 1, select("#", ...) do
    for n in pairs(select(k, ...) or {}) do
      if not seen[n] and n ~= "inplace" and not n:match("^grad_") and not n:match("^return_") then
        seen[n] = true
        names[#names + 1] = n
      end
    end
  end
  table.sort(names)
  return names
end

--- A sharded call (a communicator among its options) refused before the library's
-- agreement among the ranks (an argument that is not a tensor, a freed tensor, a bad field
-- of a wrapping criterion): the other ranks wait in that agreement and would pair it with
-- this rank's next call, so the communicator is aborted and they fail at once naming this
-- rank.  A refusal within the library is every rank's already, and leaves it usable.
-- `entered` is set by the criteria just before their C call; the outermost guard of nested
-- calls (PartialFCLoss around its margin criterion, the list form) alone acts.
nn.sharded_state = { entered = false, depth = 0 }
function nn.sharded(f, comm_of)
  local st = nn.sharded_state
  return function(...)
    local comm = comm_of(...)
    if st.depth > 0 or not ploss.comm.is_comm(comm) then return f(...) end
    st.entered, st.depth = false, 1
    local r = { n = 0 }
    local function keep(ok, ...)
      st.depth = 0
      r.n = select("#", ...)
      for i = 1, r.n do r[i] = select(i, ...) end
      return ok
    end
    if keep(pcall(f, ...)) then return unpack(r, 1, r.n) end
    local msg = r[1]
    if not st.entered and pcall(comm.abort, comm) then
      msg = tostring(msg) .. " (opts.comm: refused before the ranks met, so the communicator was aborted: the " ..
        "other ranks fail at once naming this rank; make a new one to go on)"
    end
    error(msg, 0)
  end
end

--- Whether key `k` of a layer holds a buffer of its last call (output, gradInput, or a
-- private field '_…': saved inputs, versions), which clearState drops and clone skips.
function nn.is_buffer_key(k)
  return k == "output" or k == "gradInput" or (type(k) == "string" and k:sub(1, 1) == "_")
end

--- Drop layer `m`'s buffers of its last call (Torch7's clearState); returns m.
function nn.drop_buffers(m)
  for k in pairs(m) do
    if nn.is_buffer_key(k) then rawset(m, k, nil) end
  end
  return m
end

--- The tensors a model's conversion replaced (weak keys), with the model's class name:
-- optimisers and EMAs made with them refuse them (ploss/support.lua's check_not_replaced).
nn.replaced_by = setmetatable({}, { __mode = "k" })

--- The value of field `k` of `obj`, an instance of a class of nn.class with fields (nil
-- when unset), without its class's defaults: what rawget gives for other keys.  An object
-- that delegates to such a class without being its instance (a Torch7-style subclass made
-- by setmetatable, its __init the class's) holds its fields as keys of its own.
function nn.field(obj, k)
  local values = rawget(obj, "_field_values")
  if values then return values[k] end
  return rawget(obj, k)
end

--- The communicator of a criterion (its comm field, or that of the criterion it wraps), or nil.
function nn.comm_of(c)
  if type(c) ~= "table" then return nil end
  local comm = nn.field(c, "comm")
  if comm == nil and type(rawget(c, "_inner")) == "table" then comm = nn.field(c._inner, "comm") end
  return comm or nil
end

-- What a Torch7 user passing positional constructor arguments should write instead: the
-- options this class takes (its fields), with the usual translations where it has them.
local function positional_hint(c)
  local fields = rawget(c, "_fields") or {}
  local names = nn.hint_names(fields)
  -- a loss Torch7 had (a description with a …Criterion alias, or a class without one)
  local d, torch7 = rawget(c, "_description"), true
  if d then
    torch7 = false
    for _, alias in ipairs(d.criterion_aliases or {}) do torch7 = torch7 or alias:match("Criterion$") ~= nil end
  end
  if not torch7 then
    return string.format(" (positional arguments are not taken: name them, e.g. {%s = …}; the options: %s)",
      names[1] ~= "reduction" and names[1] or names[2] or "reduction", #names > 0 and table.concat(names, ", ") or "none")
  end
  local say = {}
  if fields.reduction then say[#say + 1] = "{reduction = 'sum'} for sizeAverage = false" end
  if fields.weight then say[#say + 1] = "{weight = w} for class weights" end
  if fields.ignore_index then say[#say + 1] = "{ignore_index = k} for ignoreIndex (0-based labels)" end
  return string.format(" (Torch7's positional arguments are not taken: %s; the options: %s)",
    #say > 0 and table.concat(say, ", ") or "one table of named options",
    #names > 0 and table.concat(names, ", ") or "none")
end

-- The names of a class's fields (a set), sorted and comma-separated, for its messages.
local function field_list(fields)
  local names = {}
  for n in pairs(fields) do names[#names + 1] = n end
  table.sort(names)
  return table.concat(names, ", ")
end

--- Create a criterion class `name` deriving from `parent` (default Criterion).
-- Instances are made by calling the class: `Cls{opts}`; `Cls.__init(self, opts)` runs.
-- A class that sets `Cls._fields` (a set of names) refuses to give an instance any other
-- new field (besides output, gradInput and names starting with '_'): options are read
-- from the instance's fields at each call, so a misspelt one (`crit.reducton = 'sum'`)
-- would otherwise be ignored without a word.  A subclass starts with a copy of its
-- parent's set and adds the names of its own fields to it.  The fields' values are kept
-- apart from the instance's own keys (read them with nn.field where rawget was meant), so
-- that every assignment passes through the class: one that sets
-- `Cls._check_field(self, k, v)` has each value checked before the field takes it, and a
-- refused value leaves the field as it was.
function nn.class(name, parent)
  parent = parent or Criterion
  local cls = setmetatable({}, { __index = parent })
  torch7_passes(cls, name)
  if rawget(parent, "_fields") then
    cls._fields = {}
    for k in pairs(parent._fields) do cls._fields[k] = true end
  end
  cls.__newindex = function(self, k, v)
    local fields = rawget(cls, "_fields")
    if fields and fields[k] then
      local check = cls._check_field -- the value, before the field takes it
      if check then check(self, k, v) end
      local values = rawget(self, "_field_values")
      if not values then
        values = {}
        rawset(self, "_field_values", values)
      end
      values[k] = v
      return
    end
    if fields and type(k) == "string" and not FIELDS[k] and k:sub(1, 1) ~= "_" then
      -- Torch7's sizeAverage is the reduction here
      local name_hint = ploss.name_hint(k, fields)
      local hint = k == "sizeAverage" and fields.reduction and
        ": Torch7's sizeAverage is reduction here (crit.reduction = 'sum' for sizeAverage = false, 'mean' for true)"
        or name_hint and ": " .. name_hint
        or cls._field_hints and cls._field_hints[k] or ""
      ploss.raise(string.format("%s: '%s' is none of the fields it reads at each call (%s)%s", name, k,
        field_list(fields), hint))
    end
    rawset(self, k, v)
  end
  cls.__index = function(self, k)
    local values = rawget(self, "_field_values")
    local v = values and values[k]
    if v ~= nil then return v end
    return cls[k]
  end
  cls.__name = name
  cls.__tostring = function(self) return self:tostring() end
  cls.__call = function(self, ...) return self:fused(...) end
  cls._class_name = name
  setmetatable(cls, {
    -- reading a Torch7 field this class has by another name (crit.sizeAverage) is refused
    -- with the same help as setting it, rather than nil; any other key: the parent's
    __index = function(_, k)
      if k == "sizeAverage" then
        local fields = rawget(cls, "_fields")
        if fields and fields.reduction then
          ploss.raise(string.format("%s: 'sizeAverage' is none of its fields (%s): Torch7's sizeAverage is reduction " ..
            "here (read crit.reduction: 'mean' for sizeAverage = true, 'sum' for false)", name, field_list(fields)))
        end
      end
      return parent[k]
    end,
    __call = function(c, opts, ...)
      -- Torch7's constructors took positional arguments (sizeAverage, weights, ignoreIndex):
      -- one past the options would otherwise be dropped, giving another loss without a word
      for k = 1, select("#", ...) do
        local v = select(k, ...)
        if v ~= nil then
          local takes = rawget(c, "_constructor") -- a class whose table is not a criterion's options
          ploss.raise(string.format("%s: expected %s, got a %s as argument %d%s", name,
            takes or "one table of named options", ploss.is_tensor(v) and "tensor" or type(v), k + 1,
            takes and "" or positional_hint(c)))
        end
      end
      local self = setmetatable({}, c)
      self:__init(opts == nil and {} or opts)
      return self
    end,
    __tostring = function(c) return "ploss." .. name .. (c._doc and (": " .. c._doc) or "") end,
  })
  return cls
end

function Criterion:__init() end
function Criterion:tostring() return "ploss." .. (self._class_name or "Criterion") end

-- Torch7's type and state methods of a criterion class (the generated criteria and the
-- composites; the layers of ploss/support.lua hold parameters of a dtype and have none of
-- these).  A criterion computes in its input's dtype and reads its tensor options (class
-- weights) in any float dtype, so the conversions choose only a device: :float(),
-- :double() and :type('torch.FloatTensor' | 'torch.DoubleTensor') move those options to the
-- CPU (crit:cpu()), :type('torch.Cuda…Tensor') to the GPU (crit:cuda()), and a ploss dtype
-- name ('f32', 'f64', 'f16', 'bf16', or an alias: 'float', 'double', …) changes nothing; each
-- returns the criterion.
-- :clearState() drops what the criterion keeps between calls (its loss, gradient and state
-- buffers, and output where it is the 'none' loss tensor: the next call allocates them again
-- and recomputes what backward would have
-- reused), as Torch7's does before a criterion is saved; returns the criterion.
-- :clone() is a new criterion of the same class and options, its tensors (class weights, a
-- gradient's destination) copied and a composite's members cloned, with no buffers: as
-- Torch7's deep copy, nothing of it is shared with the original.
local DTYPE_NAMES = { f32 = true, f64 = true, f16 = true, bf16 = true, float = true, float32 = true, double = true,
  float64 = true, half = true, float16 = true, bfloat16 = true } -- and the aliases ploss.tensor takes
local BUFFERS = { "_loss", "_state", "_state_key", "_outputs", "_grad_loss", "_number_grads" }

--- A copy of `v` that shares no tensor with it: tensors cloned, plain tables copied
-- element by element; a value with a metatable (an object: a module, a communicator) is
-- `object(v)`'s, numbers, strings and booleans themselves.  The clone() of the criteria and
-- of the layers.  With `memo` (a table, kept across calls) a tensor or table met twice is
-- copied once, so that what the original shares the copy shares too.
function nn.deep_copy(v, object, memo)
  local tensor = ploss.is_tensor(v)
  if not tensor and type(v) ~= "table" then return v end
  if memo and memo[v] ~= nil then return memo[v] end
  local c
  if tensor then
    c = v:clone()
  elseif getmetatable(v) then
    c = object(v)
  else
    c = {}
    if memo then memo[v] = c end
    for k, x in pairs(v) do c[k] = nn.deep_copy(x, object, memo) end
  end
  if memo then memo[v] = c end
  return c
end
-- a criterion's option that is an object (a communicator) is shared by its clone
local function shared(v) return v end
function nn.torch7_methods(cls, name)
  -- :cuda() and :cpu() through the class's own :to(device)
  function cls:cuda() nn.check_self(self, name, "cuda") return self:to("cuda") end
  function cls:cpu() nn.check_self(self, name, "cpu") return self:to("cpu") end
  function cls:type(t)
    nn.check_self(self, name, "type")
    if type(t) ~= "string" then
      ploss.raise(string.format("%s:type: expected a type name ('torch.FloatTensor', 'torch.CudaTensor', 'f32', …), " ..
        "got %s", name, type(t)))
    end
    if t:match("^torch%.Cuda%a*Tensor$") then return self:cuda() end
    if t:match("^torch%.%a+Tensor$") then return self:cpu() end
    if DTYPE_NAMES[t] then return self end
    ploss.raise(string.format("%s:type: unknown type name '%s' (a criterion computes in its input's dtype: " ..
      "'torch.FloatTensor' and 'torch.DoubleTensor' keep its options on the CPU, 'torch.CudaTensor' on the GPU)",
      name, t))
  end
  function cls:float() nn.check_self(self, name, "float") return self:type("torch.FloatTensor") end
  function cls:double() nn.check_self(self, name, "double") return self:type("torch.DoubleTensor") end
  function cls:clone()
    nn.check_self(self, name, "clone")
    -- the object's own class: a subclass (SpatialAutoCropMSELoss of MSELoss) is cloned as itself
    local own = getmetatable(self)
    local opts = {}
    for k in pairs(rawget(own, "_fields") or {}) do opts[k] = nn.deep_copy(nn.field(self, k), shared) end
    local c = own(opts)
    for k, m in ipairs(rawget(self, "_members") or {}) do c:add(m:clone(), self._weights[k]) end
    return c
  end
  function cls:clearState()
    nn.check_self(self, name, "clearState")
    for _, k in ipairs(BUFFERS) do rawset(self, k, nil) end
    if rawget(self, "_grads") then rawset(self, "_grads", {}) end
    -- 'none''s output is the loss buffer itself (a reduced loss is a number: kept)
    if ploss.is_tensor(rawget(self, "output")) then rawset(self, "output", nil) end
    for _, m in ipairs(rawget(self, "_members") or {}) do
      if type(m.clearState) == "function" then m:clearState() end
    end
    rawset(self, "gradInput", nil)
    return self
  end
end

-- A drawing criterion's seed advances by one after each step (Partial FC's classes), from the
-- largest seed that still advances exactly to the smallest.
nn.SEED_MAX = 2 ^ 53 - 1
function nn.next_seed(seed)
  return seed >= nn.SEED_MAX and -nn.SEED_MAX or seed + 1
end

---------------------------------------------------------------------------------------
-- Buffers
---------------------------------------------------------------------------------------

-- True when tensor `v` (or nil) is in the storage numbered `id`.
local function in_storage(v, id) return v and not v:is_freed() and v:storage_id() == id end

-- True when tensor `t` shares its storage with tensor `a`, `b` or `c` or with list[1..n]
-- (each may be nil).  No varargs and no list made per call: either would keep the JIT from
-- compiling a criterion's call, or cost an allocation in it.
local function shares_storage(t, a, b, c, list, n)
  local id = t:storage_id()
  if in_storage(a, id) or in_storage(b, id) or in_storage(c, id) then return true end
  for i = 1, n or 0 do
    if in_storage(list[i], id) then return true end
  end
  return false
end

--- True when `t` is a live contiguous tensor of these sizes, dtype and device.
function nn.fits(t, sizes, dtype, device)
  return t and not t:is_freed() and t:dtype() == dtype and t:device() == device and t:is_contiguous()
    and t:has_sizes(sizes)
end

--- A contiguous buffer `t` if it matches (sizes, dtype, device), else a new one.  The
-- tensors `a`, `b`, `c` and list[1..n] (each optional) are the call's arguments: a buffer
-- in their memory (a criterion's own gradient given back to it as its input) is replaced by
-- a new one, so that the call neither refuses the overlap nor writes over its own input.
function nn.buffer(t, sizes, dtype, device, a, b, c, list, n)
  if nn.fits(t, sizes, dtype, device) and not shares_storage(t, a, b, c, list, n) then return t end
  return ploss.empty(sizes, { dtype = dtype, device = device })
end

---------------------------------------------------------------------------------------
-- Layers' saved inputs
---------------------------------------------------------------------------------------

--- Record the input of a layer's forward (the tensor, weakly: the layer does not keep it
-- alive, and its storage's version), for nn.check_input at its backward.
local WEAK_VALUES = { __mode = "v" }
function nn.saw_input(self, input)
  self._fwd_input, self._fwd_version = setmetatable({ input }, WEAK_VALUES), input:version()
end

--- Raise when `input` is the tensor the layer's last forward read and it was written since
-- (its storage's version moved: an in-place op, a copy into it): backward would mix the new
-- values with the gradOutput of the old ones.  `name` is the layer's class.  Another
-- tensor, or no forward yet, is backward's own input (Torch7's backward(input, gradOutput)).
function nn.check_input(self, input, name)
  if self._fwd_input and rawequal(self._fwd_input[1], input) and not input:is_freed() and
      input:version() ~= self._fwd_version then
    ploss.raise(string.format("%s:backward: input: written since forward (its storage's version is %d, forward " ..
      "read %d: a write to any view of it counts); " ..
      "gradOutput belongs to the old values: call forward again", name, input:version(), self._fwd_version))
  end
end

-- Whether t has the layout the gradient of a non-contiguous x gets: x's strides along the
-- dims of size > 1 where x is dense, else contiguous.
local function same_layout(t, x)
  if not x:is_dense() then return t:is_contiguous() end
  for i = 1, x:dim() do
    if x:size(i) ~= 1 and t:stride(i) ~= x:stride(i) then return false end
  end
  return true
end

--- The gradient buffer of input `x`: `t` while it fits — x's sizes, dtype and device, and
-- x's layout where x is dense (a channels-last input gets a channels-last gradient, as
-- PyTorch's), else contiguous — and holds none of the call's arguments (as nn.buffer);
-- otherwise a new one.
function nn.grad_buffer(t, x, a, b, c, list, n)
  if t and not t:is_freed() and t:dtype() == x:dtype() and t:device() == x:device() and t:has_sizes(x:size())
    and (x:is_contiguous() and t:is_contiguous() or not x:is_contiguous() and same_layout(t, x))
    and not shares_storage(t, a, b, c, list, n) then
    return t
  end
  return ploss.empty_like(x, { layout = "preserve" })
end

--- Whether criterion `c` takes a target: what its class says (`_takes_target`: a class
-- over another loss, a ParallelCriterion), else its description's target ('none': no), else
-- a MultiCriterion's: that of its members whose answer is known (they take the same
-- arguments); nil where it cannot be told (a criterion of another kind).
function nn.takes_target(c)
  local t = c._takes_target
  if t ~= nil then return t end
  local d = c._description
  if type(d) == "table" and d.target ~= nil then return d.target ~= "none" end
  local members = rawget(c, "_members")
  for _, m in ipairs(type(members) == "table" and members or {}) do
    t = nn.takes_target(m)
    if t ~= nil then return t end
  end
  return nil
end

-- The description of criterion c, or of the first member down a MultiCriterion's tree.
local function description_in(c)
  local d = c._description
  if type(d) == "table" then return d end
  local members = rawget(c, "_members")
  return type(members) == "table" and members[1] ~= nil and description_in(members[1]) or nil
end

--- Criterion `c` without a target (a loss, or a MultiCriterion of such) called in Torch7's
-- list form, crit:method({inputs}, …): what follows the list (`...`) would be a Torch7
-- loop's target, which such a criterion ignored, not the upstream gradient or scale it
-- would otherwise be taken for (silently scaling the gradients): refused.
function nn.no_target_after_list(where, method, c, ...)
  if nn.takes_target(c) ~= false or select("#", ...) == 0 or (...) == nil then return end
  local d = description_in(c)
  local names = {}
  for k, x in ipairs(d and d.inputs or {}) do names[k] = x.name end
  names = #names > 0 and table.concat(names, ", ") or "inputs"
  local call = method == "fused" and "crit" or "crit:" .. method
  ploss.raise(string.format("%s: ploss.%s takes no target: in Torch7's list form, %s({%s}), nothing follows the " ..
    "list (a Torch7 loop's target: leave it out; the upstream gradient or the scale goes after the inputs " ..
    "themselves, crit:backward(%s, gradOutput), crit(%s, scale))", where, d and d.criterion or c._class_name, call,
    names, names, names))
end

return nn
end
