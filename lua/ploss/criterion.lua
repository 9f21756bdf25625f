--- ploss criteria and functions, built from the loss descriptions (lua/ploss/losses/).
--
-- For each description `d` this module makes the class `ploss.<d.criterion>` and the
-- functions `ploss.F.<d.name>`, `_backward` and `_fused` (see ploss/nn.lua for the API a
-- criterion offers).  Nothing here is specific to one loss: the C entry points, their
-- arguments, the options and their checks, the shapes of the loss and of the saved state all
-- come from the description.
--
-- Options are checked when a criterion is made, when one is set as a field (`crit.reduction
-- = 'sum'`: field_checker) and again at each call: named keys only, each of its type (a boolean is a
-- boolean, an integer an integer in range) and inside the range the description gives.
-- Tensor options given as Lua lists are copied to the input's device in f64 for f64 inputs,
-- f32 otherwise (the accumulation dtype).
--
-- The state saved by `forward` is reused by `backward` only when the call is the same:
-- the same input and target tensors, their storages unchanged since (their version
-- counters), and the same options; otherwise backward recomputes it.
return function(ploss)
local ffi = require "ffi"
local D = require "ploss.description"
local C = ploss.C
local nn = ploss.nn
local M = {}

local INT64_LIMIT = 2 ^ 63
local INT_LIMIT = 2 ^ 31

-- The fused call's scale is a number: its multiplier of the gradient (an upstream gradient
-- tensor goes to backward).
local function bad_scale(where, scale, name)
  ploss.raise(string.format("%s: %s: expected a number (the fused call's multiplier of the gradient; an " ..
    "upstream gradient tensor goes to backward), got %s", where, name,
    ploss.is_tensor(scale) and "a tensor" or type(scale)))
end

-- The fused call's positional scale: nil (1) or a finite number.
local function check_call_scale(where, scale)
  if scale == nil then return end
  if type(scale) ~= "number" then bad_scale(where, scale, "scale") end
  if not (scale > -math.huge and scale < math.huge) then
    ploss.raise(where .. ": scale: " .. (scale ~= scale and "NaN" or tostring(scale)) ..
      " is not a finite number (the fused call's multiplier of the gradient)")
  end
end

local show
function show(v)
  if type(v) == "string" then return ploss.shown(v) end
  if type(v) == "number" then return D.number(v) end
  if ploss.is_tensor(v) then return string.format("%s[%s]", v:dtype(), table.concat(v:size(), "x")) end
  if ploss.comm.is_comm(v) then return tostring(v) end
  if type(v) == "table" then
    local parts = {}
    for i = 1, #v do parts[i] = show(v[i]) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end

-- The length of a Lua list `what` of `kind` (a message's words), or an error naming a key
-- that is not an index 1..#v, or a missing index (#v is any border of a list with holes);
-- hint(k), if given, is appended to the first error.
local function list_length(v, where, what, kind, hint)
  local n, count = #v, 0
  for k in pairs(v) do
    if type(k) ~= "number" or k < 1 or k > n or k ~= math.floor(k) then
      ploss.raise(string.format("%s: %s: expected a list of %s without holes, got key %s%s", where, what, kind,
        show(k), hint and hint(k) or ""))
    end
    count = count + 1
  end
  if count < n then
    for i = 1, n do
      if v[i] == nil then
        ploss.raise(string.format("%s: %s: expected a list of %s without holes, [%d] is nil", where, what, kind, i))
      end
    end
  end
  return n
end

-- A criterion's fields after construction from opts and their resolution o: an enum option
-- given in its list form (opt.list) stays a list, its tensor option unset, so that assigning
-- the option later (another list, or a name) replaces it as a whole.
local function set_fields(self, d, opts, o)
  for k, v in pairs(o) do self[k] = v end
  for _, opt in ipairs(d.lua_options) do
    local v = opt.list and type(opts) == "table" and opts[opt.name]
    if type(v) == "table" or ploss.is_tensor(v) then self[opt.name], self[opt.list.tensor] = v, nil end
  end
  -- a list of a tensor option is kept as given (resolved again at each call), not as the
  -- copy resolve made of it (a mask's 0/1 values): edited in place, it is not stale
  for _, t in ipairs(d.tensors) do
    local v = type(opts) == "table" and opts[t.name]
    if type(v) == "table" and not ploss.is_tensor(v) then self[t.name] = v end
  end
end

-- The C value of an enum option given by its Lua name, or an error naming the choices
-- (the option named as `prefix` .. name: "opts." by default, "crit." for a field set).
local function enum_value(opt, v, where, prefix)
  local e = D.enum(opt.ctype)
  local i = type(v) == "string" and e.by_lua[v]
  if not i then
    local names = {}
    for _, x in ipairs(e.values) do names[#names + 1] = "'" .. x[1] .. "'" end
    ploss.raise(string.format("%s%s%s: %s is not one of %s%s", where and (where .. ": ") or "", prefix or "opts.",
      opt.name, show(v), table.concat(names, ", "), opt.list and string.format(", nor a list of %s", opt.list.tensor)
      or ""))
  end
  return C[e.values[i + 1].cname]
end

-- Check one scalar option's Lua value (type, integrality, range); raise naming it (as
-- `prefix` .. its name: "opts." by default).
local function check_scalar(opt, v, where, prefix)
  local at = where .. ": " .. (prefix or "opts.")
  if opt.type == "enum" then
    enum_value(opt, v, where, prefix)
  elseif opt.type == "comm" then
    if v ~= false and not ploss.comm.is_comm(v) then
      ploss.raise(string.format("%s%s: expected a communicator (ploss.comm.init) or false, got %s %s", at, opt.name,
        type(v), show(v)))
    end
  elseif opt.type == "bool" then
    if type(v) ~= "boolean" then
      ploss.raise(string.format("%s%s: expected a boolean (true or false), got %s %s", at, opt.name, type(v),
        show(v)))
    end
  else
    if type(v) ~= "number" then
      ploss.raise(string.format("%s%s: expected a number, got %s %s%s", at, opt.name, type(v), show(v),
        opt.type_hint and (" (" .. opt.type_hint .. ")") or ""))
    end
    if opt.type ~= "double" then
      local limit = opt.type == "int" and INT_LIMIT or INT64_LIMIT
      if v ~= v or v ~= math.floor(v) or v < -limit or v >= limit then
        -- an integer past the type's limit is told the limit; anything else the range
        local integral = v == math.floor(v) and v ~= math.huge and v ~= -math.huge
        local want = integral and (opt.type == "int" and "an integer in 32 bits" or "an integer in 64 bits")
          or D.range_text(opt) or "an integer"
        ploss.raise(string.format("%s%s: expected %s, got %s", at, opt.name, want, show(v)))
      end
    end
    if not D.in_range(opt, v) then
      -- the message and status of the same check on the C side
      ploss.raise(string.format("%s%s: %s is not %s (PLOSS_ERR_INVALID_ARGUMENT)", at, opt.name, show(v),
        D.range_text(opt)))
    end
  end
end

local REDUCTION = { name = "reduction", type = "enum", ctype = "ploss_reduction" }
local INPLACE = { name = "inplace", type = "bool" }

-- The names a criterion of description `d` takes as options (a set, made once per
-- description): reduction, inplace (not for a loss of several inputs: each gets its own
-- gradient), its scalar and tensor options, its outputs' switches.
local known_keys = setmetatable({}, { __mode = "k" })
local function option_names(d)
  local known = known_keys[d]
  if not known then
    known = { reduction = true, inplace = not d.inputs or nil }
    for _, o in ipairs(d.lua_options) do known[o.name] = true end
    for _, t in ipairs(d.tensors) do known[t.name] = not t.argument or nil end
    for _, x in ipairs(d.outputs) do known[x.option] = true end
    known_keys[d] = known
  end
  return known
end

-- Refuse a reduction description `d` does not take, naming it as `prefix` .. "reduction".
local function check_reduction(d, r, where, prefix)
  if type(r) ~= "string" or not d.reduction_allowed[r] then
    local names = {}
    for i, v in ipairs(d.reductions) do names[i] = "'" .. v .. "'" end
    ploss.raise(string.format("%s: %sreduction: %s is not one of %s", where, prefix or "opts.", show(r),
      table.concat(names, ", ")))
  end
end

-- The check of a criterion's field set after construction (crit.reduction = 'sum'), for
-- nn.class: the value is checked as the constructor checks that option, before the field
-- takes it, so that a refused value leaves the criterion as it was and the error comes at
-- the assignment.  nil (back to the default) is taken.  A list's entries and the options
-- checked together are checked at the next call, so that related fields can be set one
-- after the other.  `tensor_fields`: further fields that hold a tensor (gradients' buffers).
local function field_checker(d, tensor_fields)
  local scalars = { inplace = not d.inputs and INPLACE or nil }
  for _, opt in ipairs(d.lua_options) do scalars[opt.name] = opt end
  for _, x in ipairs(d.outputs) do scalars[x.option] = { name = x.option, type = "bool" } end
  local lists = {}
  for _, t in ipairs(d.tensors) do if not t.argument then lists[t.name] = true end end
  return function(self, k, v)
    if v == nil then return end
    local where = rawget(getmetatable(self), "_class_name") or d.criterion
    local opt = scalars[k]
    if k == "reduction" then
      check_reduction(d, v, where, "crit.")
    elseif opt and not (opt.list and (type(v) == "table" or ploss.is_tensor(v))) then
      check_scalar(opt, v, where, "crit.")
    elseif lists[k] and not ploss.is_tensor(v) and type(v) ~= "table" then
      ploss.raise(string.format("%s: crit.%s: expected a tensor or a list of numbers, got %s", where, k, show(v)))
    elseif tensor_fields and tensor_fields[k] and not ploss.is_tensor(v) then
      ploss.raise(string.format("%s: crit.%s: expected a ploss tensor, got %s", where, k, show(v)))
    end
  end
end

-- Resolve the user's options `user` (a table) for description `d` into a fresh table:
-- defaults filled in, every value checked.  `extra` lists further keys allowed (the
-- functional API's out, grad_input, scale).  `own_keys`: the table was made here from the
-- option names (a criterion's fields at a call), so its keys need no check; its values do.
-- Refuse a non-nil argument past the `n` a method takes (`takes` names them): PyTorch raises
-- for one, and ignoring it (a weight passed positionally) would give another loss without a
-- word.
local function check_extra(where, n, takes, ...)
  for k = 1, select("#", ...) do
    if select(k, ...) ~= nil then
      ploss.raise(string.format("%s: takes %d arguments (%s), got a %s as argument %d", where, n, takes,
        ploss.is_tensor(select(k, ...)) and "tensor" or type(select(k, ...)), n + k))
    end
  end
end

-- The functional API's buffers in `user` (out, grad_<input>: every key of `extra` but the
-- scale) are tensors, or false (none given: {out = reuse and buf}): anything else is named
-- before the call, not met inside it.
local function check_buffers(user, extra, where)
  for k, v in pairs(user) do
    if extra[k] and k ~= "scale" and v ~= false and not ploss.is_tensor(v) then
      ploss.raise(string.format("%s: opts.%s: expected a ploss tensor (a buffer to write into), got %s", where, k,
        show(v)))
    end
  end
end

-- resolve's options → the tensor options given through a list form (names_of)
local GIVEN_AS = setmetatable({}, { __mode = "k" })
local WEAK_VALUES = { __mode = "v" }

local function resolve(d, user, extra, where, own_keys)
  if type(user) ~= "table" or ploss.is_tensor(user) then
    -- Torch7's criteria took positional arguments (sizeAverage, weights, a margin): refused,
    -- not read; the hint names the option such an argument meant
    local hint = ""
    if type(user) == "boolean" then
      hint = user and " (Torch7's positional sizeAverage is not taken: sizeAverage = true is the default, " ..
        "{reduction = 'mean'})" or " (Torch7's positional sizeAverage is not taken: {reduction = 'sum'} for " ..
        "sizeAverage = false)"
    elseif ploss.is_tensor(user) and option_names(d).weight then
      hint = " (positional weights are not taken: {weight = w})"
    elseif type(user) == "number" and d.number_hint then
      hint = " (" .. d.number_hint .. ")"
    elseif type(user) == "number" then
      -- a loss of one number option: that option; else the names the call takes (nn's
      -- hint for positional constructor arguments lists the same)
      local o = d.lua_options[1]
      local names = nn.hint_names(option_names(d), extra)
      hint = " (positional options are not taken: " ..
        (#d.lua_options == 1 and o.type == "double" and string.format("{%s = %s})", o.name, tostring(user))
          or "name the option: " .. table.concat(names, ", ") .. ")")
    end
    ploss.raise(string.format("%s: expected a table of named options, got %s%s", where,
      ploss.is_tensor(user) and "a tensor" or type(user), hint))
  end
  if not own_keys then
    for k, v in pairs(user) do
      if type(k) ~= "string" then
        ploss.raise(string.format("%s: options are named (e.g. {reduction = 'sum'}); got the positional value %s",
          where, show(v)))
      end
    end
    for _, t in ipairs(d.tensors) do
      if t.argument and user[t.name] ~= nil then
        ploss.raise(string.format("%s: %s is an argument of each call, not an option: %s", where, t.name,
          D.call_text(d)))
      end
    end
    if d.inputs and user.inplace ~= nil then
      ploss.raise(string.format("%s: inplace: %s has no in-place gradient (its gradients go to buffers of their " ..
        "own)", where, d.criterion))
    end
    ploss.check_option_keys(user, where, option_names(d), extra)
  end
  -- an enum option with a list form (opt.list): a list or a tensor given for it is its tensor
  -- option, with the option's value opt.list.value (Lovász's classes = {…}); messages about
  -- its values name the option given (given_as)
  local given_as = {}
  for _, opt in ipairs(d.lua_options) do
    local v = opt.list and user[opt.name]
    if type(v) == "table" or ploss.is_tensor(v) then
      local tname = opt.list.tensor
      if user[tname] ~= nil then
        ploss.raise(string.format("%s: opts.%s: a list, and opts.%s too: give them once (%s = {…}, or " ..
          "%s = '%s' with %s = {…})", where, opt.name, tname, opt.name, opt.name, opt.list.value, tname))
      end
      local copy = {}
      for k, x in pairs(user) do copy[k] = x end
      copy[opt.name], copy[tname] = opt.list.value, v
      user, given_as[tname] = copy, opt.name
    end
  end
  local o = {}
  local r = user.reduction
  if r == nil then r = "mean" end
  check_reduction(d, r, where)
  o.reduction = r
  for _, opt in ipairs(d.lua_options) do
    local v = user[opt.name]
    if v == nil then v = opt.default end
    check_scalar(opt, v, where)
    o[opt.name] = v
  end
  if not d.inputs then -- a loss of several inputs takes no inplace (refused above)
    local inplace = user.inplace
    if inplace == nil then inplace = false end
    check_scalar(INPLACE, inplace, where)
    o.inplace = inplace
  end
  for _, x in ipairs(d.outputs) do
    local v = user[x.option]
    if v == nil then v = false end
    check_scalar({ name = x.option, type = "bool" }, v, where)
    o[x.option] = v
  end
  for _, t in ipairs(d.tensors) do
    if t.argument then goto next_tensor end -- lengths: arguments of each call, not options
    local v = user[t.name]
    local shown = given_as[t.name] or t.name
    if v == nil then
      if t.required then ploss.raise(string.format("%s: %s (%s) is required", where, t.name, t.doc)) end
    elseif type(v) == "table" and not ploss.is_tensor(v) then
      -- a Lua list: kept as numbers, made a tensor of the input's dtype at the call
      local n = list_length(v, where, "opts." .. shown, t.mask and "booleans or 0/1" or "numbers")
      if t.mask then
        -- a mask: true/false or exactly 1/0 (0.5 or NaN would leave a box out silently)
        local m = {}
        for i = 1, n do
          local b = v[i]
          if b == true or b == 1 then m[i] = 1
          elseif b == false or b == 0 then m[i] = 0
          else
            ploss.raise(string.format("%s: opts.%s[%d]: expected a boolean, 0 or 1, got %s", where, shown, i,
              type(b) == "number" and show(b) or type(b)))
          end
        end
        v = m
      end
      for i = 1, n do
        if type(v[i]) ~= "number" then
          ploss.raise(string.format("%s: opts.%s[%d]: expected a number, got %s", where, shown, i, type(v[i])))
        end
      end
      if t.what == "weight" or t.what == "factor" then
        -- class weights and factors (focal α): a NaN or an infinity gives no meaningful
        -- loss, nor a negative one where the description says so (Dice); negative values
        -- are PyTorch's to take elsewhere (a tensor's values are not read on the host: CUDA
        -- would need a synchronisation)
        local low = t.nonnegative and 0 or -math.huge
        for i = 1, n do
          if not (v[i] >= low and v[i] > -math.huge and v[i] < math.huge) then
            ploss.raise(string.format("%s: opts.%s: the %s %s of class %d is not a finite number%s", where,
              t.name, t.what, show(v[i]), i - 1, t.nonnegative and " >= 0" or ""))
          end
        end
      end
      if t.priors then
        local positive = false
        for i = 1, n do
          if not (v[i] >= 0 and v[i] < math.huge) then
            ploss.raise(string.format("%s: opts.%s: the prior %s of class %d is not a finite number >= 0", where,
              t.name, show(v[i]), i - 1))
          end
          positive = positive or v[i] > 0
        end
        if n > 0 and not positive then
          ploss.raise(string.format("%s: opts.%s: every prior is 0 (at least one must be > 0)", where, t.name))
        end
      end
    elseif not ploss.is_tensor(v) then
      ploss.raise(string.format("%s: opts.%s: expected a tensor or a list of numbers, got %s", where, shown, type(v)))
    end
    o[t.name] = v
    ::next_tensor::
  end
  if next(given_as) then GIVEN_AS[o] = given_as end
  return o
end

-- The names of a call's C arguments in its messages (ploss.check): `names` (nil: the C
-- names), and a tensor option given through its enum option's list form by that option's
-- name (Lovász's classes = {…}: class_ids named classes).
local function names_of(o, names)
  local given_as = GIVEN_AS[o]
  if not given_as then return names end
  local all = {}
  for k, v in pairs(names or {}) do all[k] = v end
  for k, v in pairs(given_as) do all[k] = v end
  return all
end

-- A C options struct filled from resolved options.
local function fill(d, o, copts, scale)
  C[d.opts_init](copts)
  copts.reduction = enum_value(REDUCTION, o.reduction)
  for _, opt in ipairs(d.lua_options) do
    local v = o[opt.name]
    if opt.type == "enum" then v = enum_value(opt, v)
    elseif opt.type == "bool" then v = v and 1 or 0
    elseif opt.type == "comm" then v = v and ploss.comm.pointer(v, d.criterion) or nil end
    copts[opt.name] = v
  end
  copts.scale = scale or 1
  copts.inplace = o.inplace and 1 or 0
  return copts
end

-- A fingerprint of resolved options and of the tensor options as passed to C (`tensors`,
-- from tensor_args): the saved state is valid for these only.  A list option is named by
-- its cached tensor, which is replaced when the list's values change.
local function fingerprint(d, o, tensors)
  local parts = { o.reduction }
  for _, opt in ipairs(d.lua_options) do parts[#parts + 1] = tostring(o[opt.name]) end
  for k = 1, #d.tensors do
    local v = tensors[k]
    if v ~= nil then
      -- the storage and its version, and where in it the view lies
      local dl, dims = v:dl(), {}
      for j = 0, dl.ndim - 1 do
        dims[#dims + 1] = tostring(dl.shape[j]) .. "/" .. (dl.strides ~= nil and tostring(dl.strides[j]) or "c")
      end
      parts[#parts + 1] = string.format("%d:%d:%s+%s:%s", v:storage_id(), v:version(), tostring(dl.data),
        tostring(dl.byte_offset), table.concat(dims, ","))
    else
      parts[#parts + 1] = "-"
    end
  end
  return table.concat(parts, "|")
end

local function loss_dtype(input) return input:dtype() == "f64" and "f64" or "f32" end

-- The list `v` holds the values `copy` (a list option edited in place is not stale).
local function same_list(copy, v)
  if #copy ~= #v then return false end
  for i = 1, #v do if copy[i] ~= v[i] then return false end end
  return true
end

-- The tensor options as tensors on the input's device: a list becomes a tensor of the
-- accumulation dtype (f64 for f64 input, else f32), cached per device and dtype in `cache`
-- while the list's values stay the same.  The tensors that are arguments of the call
-- (lengths) are those of `given`, by index.
local function tensor_args(d, o, input, cache, given)
  local out = {}
  for k, t in ipairs(d.tensors) do
    local v
    if t.argument then v = given and given[k] else v = o[t.name] end
    if v ~= nil and not ploss.is_tensor(v) then
      local dtype = loss_dtype(input)
      local key = t.name .. "@" .. input:device() .. "/" .. dtype
      local c = cache and cache[key]
      if not (c and same_list(c.values, v) and not c.tensor:is_freed()) then
        local values = {}
        for i = 1, #v do values[i] = v[i] end
        c = { values = values, tensor = ploss.tensor(v, { dtype = dtype, device = input:device() }) }
        if cache then cache[key] = c end
      end
      v = c.tensor
    end
    out[k] = v
  end
  return out
end

-- The caller's names of tensors the C side names otherwise (ploss.check): a criterion's
-- upstream gradient (its other tensors are its own), and the functional API's, with
-- opts.out and opts.grad_input only where the caller gave them (F_NAMES[out][grad_input]).
local CRIT_NAMES = { grad_loss = "gradOutput" }
local F_NAMES = {
  [false] = { [false] = CRIT_NAMES, [true] = { grad_loss = "gradOutput", grad_input = "opts.grad_input" } },
  [true] = { [false] = { loss = "opts.out", grad_loss = "gradOutput" },
             [true] = { loss = "opts.out", grad_loss = "gradOutput", grad_input = "opts.grad_input" } },
}
-- with inplace = true the gradient's destination is the input the caller passed
local INPLACE_GRAD = "input (written with its gradient: inplace = true)"
local INPLACE_NAMES = {
  [false] = { grad_loss = "gradOutput", grad_input = INPLACE_GRAD },
  [true] = { loss = "opts.out", grad_loss = "gradOutput", grad_input = INPLACE_GRAD },
}
local function f_names(raw, inplace)
  if inplace then return INPLACE_NAMES[raw.out ~= nil] end
  return F_NAMES[raw.out ~= nil][raw.grad_input ~= nil]
end

-- The loss tensor of a functional call: the caller's (opts.out) is marked written, as the
-- gradients are (a criterion's state saved from its old values is then not reused).
local function written_out(raw, loss)
  if raw.out then loss:bump_version() end
end

-- what to pass instead of a Lua value v as the argument `role` ('input' or 'target') of a
-- loss of description d (Torch7 took a number as one sample's class): the class-index
-- wording only for a target of class indices
local CLASS_TARGETS = { index = true, index_or_probabilities = true }
local function tensor_hint(v, role, d)
  local classes = role == "target" and d and CLASS_TARGETS[d.target]
  if type(v) == "number" then
    return classes and " (one sample's class: ploss.tensor(k, {dtype = 'i64'}), 0-based; a value: ploss.tensor(v))"
      or " (a value: ploss.tensor(v), of the dtype and shape the loss takes)"
  elseif type(v) == "table" then
    return classes and " (a Lua list: ploss.tensor(list, {dtype = 'i64'}); class indices 0-based)"
      or " (a Lua list: ploss.tensor(list, {dtype = ...}))"
  end
  return ""
end
-- The target kinds of integer targets (class indices, labels): an integer input with a
-- float target is then the arguments swapped.  (An elementwise or box loss's float target
-- has the input's shape: the C checks name an integer input's dtype first.)
local INTEGER_TARGETS = { index = true, index_or_probabilities = true, index_list = true, class_labels = true,
  labels = true, sequences = true }
local function check_args(where, input, target, d)
  if not ploss.is_tensor(input) then
    ploss.raise(where .. ": input: expected a ploss tensor, got " .. type(input) .. tensor_hint(input, "input", d))
  end
  if not ploss.is_tensor(target) then
    ploss.raise(where .. ": target: expected a ploss tensor, got " .. type(target) .. tensor_hint(target, "target", d))
  end
  -- an integer input with a float target: the arguments swapped (crit(labels, scores)),
  -- named as that before the C checks blame the target's shape
  if d and INTEGER_TARGETS[d.target] and not input:is_floating_point() and target:is_floating_point() then
    ploss.raise(string.format("%s: input: expected a floating-point tensor (f32, f16, bf16 or f64: the scores), got " ..
      "%s, and the target is %s: are input and target swapped? (the call is (input, target))", where, show(input),
      show(target)))
  end
end

-- Sizes of the 'none' loss: the sample shape (rows), the input's (elementwise), or the
-- description's loss_groups (region).
local function loss_sizes(d, input, o, target)
  local sizes = input:size()
  if d.shape == "elementwise" then return sizes end
  if d.shape == "region" then
    if d.loss_groups == "sample" then return { sizes[1] } end
    if d.loss_groups == "batch" then return { 1 } end
    if d.loss_groups == "sample_or_batch" then return { o.per_sample and (sizes[1] or 1) or 1 } end
    if d.loss_groups == "pixel" then
      local s = {}
      for i = 1, #sizes do if i ~= 2 then s[#s + 1] = sizes[i] end end
      return s
    end
    return o.per_image and { sizes[1], sizes[2] } or { sizes[2] }
  end
  -- one sample of C classes (PyTorch's unbatched form): 0-d; the multi-class margin's one
  -- label given as a [1] target: [1] (PyTorch's)
  if #sizes == 1 then
    return (d.policy == "multi_margin" and ploss.is_tensor(target) and target:dim() == 1) and { 1 } or {}
  end
  local s = {}
  for i = 1, #sizes do if i ~= 2 then s[#s + 1] = sizes[i] end end
  return s
end

-- Sizes of the loss of a call: the 'none' loss's, or none (one element) when reduced.
local function loss_shape(d, o, input, target)
  return o.reduction == "none" and loss_sizes(d, input, o, target) or {}
end

local function state_sizes(d, input)
  if d.state.components == 1 then return loss_sizes(d, input) end
  local s = input:size()
  if #s == 1 then return { d.state.components } end -- one sample (unbatched)
  s[2] = d.state.components
  return s
end

-- The C entry point of `pass` called with tensors by role.
local function caller(d, pass)
  local fn = C["ploss_" .. d.name .. "_" .. pass]
  local args = D.arguments(d, pass)
  local n = #args + 1
  local tensor_k = {} -- argument i is the tensor_k[i]-th tensor option
  local k = 0
  for i, arg in ipairs(args) do
    if arg[2] == "tensor" then k = k + 1; tensor_k[i] = k end
  end
  return function(ctx, t)
    local a = { ctx }
    for i, arg in ipairs(args) do
      local role = arg[2]
      local v
      if role == "opts" then v = t.copts
      elseif role == "tensor" then v = t.tensors[tensor_k[i]]
      else v = t[role] end
      if role ~= "opts" and v ~= nil then v = v:dl() end -- a tensor, or an object with a descriptor
      a[i + 1] = v
    end
    return fn(unpack(a, 1, n))
  end
end

-- The error for a gradOutput that is neither a number nor a tensor, naming `where`
-- (`ploss.F.<loss>_backward` or `<Criterion>:backward`): an options table there is most
-- likely options given in its place.
local function bad_grad_output(where, gradOutput)
  local hint = ""
  if type(gradOutput) == "table" and not ploss.is_tensor(gradOutput) and type(gradOutput[1]) == "number" then
    hint = " (a list of numbers is not taken: a tensor of the 'none' loss's shape, ploss.tensor{…})"
  elseif type(gradOutput) == "table" and not ploss.is_tensor(gradOutput) then
    hint = where:find(":backward$") and " (a criterion's options are its fields: crit.reduction = …)"
      or " (the options come after gradOutput; nil there is the default upstream gradient)"
  end
  ploss.raise(string.format("%s: gradOutput: expected a number or a tensor, got %s%s", where, type(gradOutput), hint))
end

-- The upstream gradient as a tensor of `dtype` on `device` (in buffer `buf` where it makes
-- one): for nil, ones of the 'none' loss's sizes `none_sizes` or 1 for a reduced loss; a
-- number as a one-element tensor (refused for a 'none' loss with dims, whose upstream
-- gradient is a tensor of its shape; a 0-d one takes it); a tensor as it is.
local function upstream(o, none_sizes, dtype, device, gradOutput, buf, where)
  if gradOutput == nil then
    if o.reduction == "none" then return nn.buffer(buf, none_sizes, dtype, device):fill(1) end
    gradOutput = 1
  end
  if type(gradOutput) == "number" then
    if o.reduction == "none" and #none_sizes > 0 then
      ploss.raise(where .. ": gradOutput: a number is the upstream gradient of a reduced loss; reduction 'none' " ..
        "takes a tensor of the loss's shape")
    end
    return nn.buffer(buf, {}, dtype, device):fill(gradOutput)
  end
  if not ploss.is_tensor(gradOutput) then bad_grad_output(where, gradOutput) end
  return gradOutput
end

local NO_SIZES = {}

-- A one-element or loss-shaped gradOutput tensor from a number, a tensor or nil.
local function grad_loss_tensor(d, o, input, target, gradOutput, buf, where)
  local sizes = o.reduction == "none" and loss_sizes(d, input, o, target) or NO_SIZES
  return upstream(o, sizes, loss_dtype(input), input:device(), gradOutput, buf, where)
end

-- The call options of the functional API of a one-input loss besides the loss's own, by
-- pass: forward the loss tensor (out), backward the gradient (grad_input), fused all and
-- the scale.
local FUNCTIONAL_KEYS = {
  forward = { out = true }, backward = { grad_input = true }, fused = { out = true, grad_input = true, scale = true },
}

-- The pass of a functional entry point from its name (<name>, _backward, _fused), kept by
-- name (every call asks).
local passes = {}
local function pass_of(where)
  local p = passes[where]
  if not p then
    p = where:match("_backward$") and "backward" or where:match("_fused$") and "fused" or "forward"
    passes[where] = p
  end
  return p
end

-- The methods every criterion class has: :to(device) (its tensor options, e.g. weight,
-- move; returns self), :tostring() and, through :to, Torch7's :cuda(), :cpu(), :type(),
-- :float(), :double(), with :clearState() (nn.torch7_methods).
local function tensor_and_print_methods(cls, d)
  nn.torch7_methods(cls, d.criterion)
  function cls:to(device)
    nn.check_self(self, d.criterion, "to")
    -- the device itself, also where the criterion holds no tensor: :cuda() on a build
    -- without CUDA (or with no such GPU) fails here, not at the first call
    ploss.context(device)
    for _, t in ipairs(d.tensors) do
      if ploss.is_tensor(self[t.name]) then self[t.name] = self[t.name]:to(device) end
    end
    for k, g in pairs(rawget(self, "_grads") or {}) do -- its own gradient buffers (sums of accumulate) too
      if ploss.is_tensor(g) and not g:is_freed() then self._grads[k] = g:to(device) end
    end
    return self
  end

  function cls:tostring()
    nn.check_self(self, d.criterion, "tostring")
    local parts = {}
    for _, t in ipairs(d.tensors) do
      if self[t.name] ~= nil then parts[#parts + 1] = t.name .. "=" .. show(self[t.name]) end
    end
    -- a field set to nil is its default at the next call: shown as that
    for _, opt in ipairs(d.lua_options) do
      local v = self[opt.name]
      if v == nil then v = opt.default end
      parts[#parts + 1] = opt.name .. "=" .. show(v)
    end
    for _, x in ipairs(d.outputs) do
      if self[x.option] then parts[#parts + 1] = x.option .. "=true" end
    end
    parts[#parts + 1] = "reduction=" .. show(self.reduction == nil and "mean" or self.reduction)
    if self.inplace then parts[#parts + 1] = "inplace=true" end
    return "ploss." .. d.criterion .. "(" .. table.concat(parts, ", ") .. ")"
  end
end

-- A loss of several embedding inputs (d.inputs): crit:forward(x1, …, xk [, labels]) → loss;
-- crit:backward(x1, …, xk [, labels] [, gradOutput]) → one gradient per input, in argument
-- order; crit(x1, …, xk [, labels] [, scale]) → loss followed by those gradients, from the
-- fused pass.  ploss.F.<name>(…, opts), _backward(…, gradOutput, opts) and _fused(…, opts)
-- likewise; opts may name `out` and `grad_<input>` tensors to write into.  No in-place
-- gradient (inplace = true is refused) and no saved state.  An extra tensor with a gradient
-- (d.tensors, grad = true: a criterion field or option like the others) adds its gradient
-- after the inputs' when it is given (crit.grad_<name> = t / opts.grad_<name>: where it
-- goes); a per-row output (d.outputs) asked for with return_<name> = true is returned by
-- forward and the fused call after everything else.
-- A gradient tensor given for an optional tensor that is not (grad_bias without a bias):
-- an error, not a buffer silently left as it was.
local function no_tensor_for_grad(where, tt)
  ploss.raise(string.format("%s: given without a %s (it receives the %s's gradient)", where, tt.name, tt.name))
end

-- For a criterion's _spec (the benchmark and the bad-input catalogue): the resolved options
-- and the C struct (ctype) of the table `user` — its options, tensor options and, where the
-- loss has one, inplace; keys the loss does not have are returned in a sorted list, not
-- refused.
local function spec_options(d, ctype, user, inplace)
  local known = { reduction = true, inplace = inplace or nil }
  for _, opt in ipairs(d.lua_options) do known[opt.name] = true end
  for _, t in ipairs(d.tensors) do known[t.name] = not t.argument or nil end
  local mine, unknown = {}, {}
  for k, v in pairs(user) do
    if known[k] then mine[k] = v else unknown[#unknown + 1] = tostring(k) end
  end
  table.sort(unknown)
  local o = resolve(d, mine, nil, d.name)
  return fill(d, o, ctype()), o, unknown
end

-- A lengths argument (CTC's input_lengths, target_lengths) as a tensor: a tensor as it is,
-- or a Lua list of integers (PyTorch's tuples) or one integer (one sequence) as an i64
-- tensor on the device of `x`, the first input.
local function lengths_tensor(d, where, name, v, x)
  if ploss.is_tensor(v) then return v end
  if type(v) == "number" and ploss.is_tensor(x) and x:dim() ~= 2 then
    ploss.raise(string.format("%s: %s: a number is the length of one T×C sequence; %s takes a list or a tensor of " ..
      "one length per sequence", where, name, x:dim() == 3 and ("log_probs of " .. x:size(2) ..
      (x:size(2) == 1 and " sequence (T×1×C)" or " sequences")) or "this input"))
  end
  local list = type(v) == "number" and { v } or v
  if type(list) ~= "table" then
    ploss.raise(string.format("%s: %s: expected a tensor, a list of integers or an integer, got %s", where, name,
      type(v)))
  end
  list_length(list, where, name, "integers", function(k)
    return type(k) == "string" and (" (an options table? the lengths are arguments: " .. D.call_text(d) ..
      ", then the options)") or ""
  end)
  local out = {}
  for k, e in pairs(list) do
    if type(e) == "cdata" and (ffi.istype("int64_t", e) or ffi.istype("uint64_t", e)) then e = tonumber(e) end
    if type(e) ~= "number" or e ~= math.floor(e) or math.abs(e) >= 2 ^ 53 then
      ploss.raise(string.format("%s: %s[%d]: expected an integer (of magnitude below 2^53), got %s", where, name, k,
        show(e)))
    end
    out[k] = e
  end
  if not ploss.is_tensor(x) then return nil end -- the inputs' own check names it
  return ploss.tensor(out, { dtype = "i64", device = x:device() })
end

-- An input given as a number (d.inputs[k].number: GaussianNLLLoss's var, as PyTorch's float
-- var): a tensor of that value of x's shape with its last dim 1 (0-d for a 0-d x), x's dtype
-- (rounded to it as PyTorch's var·ones_like(x): past its range, ±∞) and device; no gradient
-- is returned for it.  A negative number is refused here, on every device (PyTorch: "var has
-- negative entry/entries"); NaN passes, as in PyTorch and as a NaN in a tensor.
local function number_input(where, name, v, x)
  if v < 0 then
    ploss.raise(string.format("%s: %s: a number must be >= 0 (the value of every element), got %s", where, name,
      show(v)))
  end
  local sizes = x:size()
  if #sizes > 0 then sizes[#sizes] = 1 end
  local t = ploss.full(sizes, v, { dtype = "f64", device = x:device() })
  return x:dtype() == "f64" and t or t:to(nil, x:dtype())
end

-- The gradient given for an input that is a number in this call: refused (it gets none).
local function no_grad_for_number(where, input)
  ploss.raise(string.format("%s: given while %s is a number (a number gets no gradient)", where, input.name))
end

local function build_multi(d)
  local ctype = ffi.typeof(d.opts_type)
  local target_name = D.target_name(d)
  local ninputs = #d.inputs
  -- the tensors that are arguments after the target (lengths), by their index in d.tensors
  local arguments = {}
  for k, tt in ipairs(d.tensors) do
    if tt.argument then arguments[#arguments + 1] = k end
  end
  local ntarget = ninputs + (target_name and 1 or 0)
  local nargs = ntarget + #arguments
  local input_names = {}
  for k, x in ipairs(d.inputs) do input_names[k] = x.name end
  input_names = table.concat(input_names, ", ")
  local cls = nn.class(d.criterion)
  cls._doc = d.title .. " (" .. d.source .. ")"
  cls._description = d

  -- The description's check of options together (d.check), with the message of the same
  -- check on the C side (inplace, which these losses do not take, is refused by resolve).
  local function check_options(o, where)
    local msg = d.check and d.check(o)
    if msg then ploss.raise(string.format("%s: %s (PLOSS_ERR_INVALID_ARGUMENT)", where, msg)) end
  end

  -- A criterion that draws a sample of the classes (sample_rate < 1, the margin losses'
  -- Partial FC) draws anew at each step: its seed advances by one after each backward and
  -- fused call, so a forward and the backward after it see the same classes (PartialFCLoss
  -- does the same; the functional calls take the seed as given).
  local draws = false
  for _, opt in ipairs(d.lua_options) do draws = draws or opt.name == "sample_rate" end
  local function step_seed(self, o)
    if draws and o.sample_rate < 1 then self.seed = nn.next_seed(o.seed) end
  end

  -- The call's tensors by role from the positional arguments; raises naming a missing one.
  -- ±1 labels may be a number (Torch7's form for one pair): a tensor of it on the inputs'
  -- device, of the first input's shape where the target has it (input_layout 'elementwise':
  -- every pair that label), else 0-d.  The lengths after the target go to t.given
  -- (lengths_tensor).
  local function tensors_of(where, ...)
    local t = { inputs = {}, given = {} }
    for k = ntarget + 1, nargs do
      local tk = arguments[k - ntarget]
      t.given[tk] = lengths_tensor(d, where, d.tensors[tk].name, select(k, ...), (...))
    end
    for k = 1, ntarget do
      local v = select(k, ...)
      local name = k <= ninputs and d.inputs[k].name or target_name
      if k > ninputs and type(v) == "number" and d.target == "signs" and ploss.is_tensor((...)) then
        local x = (...)
        if d.input_layout ~= "elementwise" and x:dim() > 1 then -- one label per row: a number is one pair's
          local rows = x:size(1)
          ploss.raise(string.format("%s: %s: a number labels one pair (inputs of D values); %s has %d row%s: " ..
            "give a tensor of %d label%s", where, name, d.inputs[1].name, rows, rows == 1 and "" or "s", rows,
            rows == 1 and "" or "s"))
        end
        v = ploss.full(d.input_layout == "elementwise" and x:size() or {}, v, { dtype = loss_dtype(x), device = x:device() })
      elseif k <= ninputs and type(v) == "number" and d.inputs[k].number and ploss.is_tensor((...)) then
        v = number_input(where, d.inputs[k].name, v, (...))
        t.numbers = t.numbers or {}
        t.numbers[k] = true
      end
      if not ploss.is_tensor(v) then
        local method = where:sub(1, #d.criterion + 1) == d.criterion .. ":" and where:sub(#d.criterion + 2)
        local call = where == d.criterion and D.call_text(d) or
          method and D.call_text(d, "crit:" .. method, method) or D.call_text(d, where, pass_of(where))
        local number_too = k <= ninputs and d.inputs[k].number
        ploss.raise(string.format("%s: %s: expected a ploss tensor%s, got %s%s", where, name,
          number_too and " or a number" or "", type(v), v == nil and string.format(" (argument %d of %s)", k, call) or ""))
      end
      if k <= ninputs then t.inputs[k] = v else t.target = v end
    end
    return t
  end

  -- The C call of `pass` with tensors by role (inputs and grads as lists, the resolved
  -- options t.o for the tensor options, t.cache their criterion's cache).
  local sharded_state = nn.sharded_state
  local function run(pass, ctx, t)
    local roles = { target = t.target, tensors = t.tensors or tensor_args(d, t.o, t.inputs[1], t.cache, t.given),
                    copts = t.copts, loss = t.loss, grad_loss = t.grad_loss }
    local args = D.arguments(d, pass)
    local fn = C["ploss_" .. d.name .. "_" .. pass]
    local a = { ctx }
    local ti = 0
    for i, arg in ipairs(args) do
      local v
      if arg[2] == "input" then v = t.inputs[arg[3] + 1]
      elseif arg[2] == "grad_input" then v = t.grads[arg[3] + 1]
      elseif arg[2] == "grad_tensor" then v = t.tensor_grads and t.tensor_grads[arg[3] + 1]
      elseif arg[2] == "output" then v = t.outputs and t.outputs[arg[3] + 1]
      elseif arg[2] == "tensor" then ti = ti + 1; v = roles.tensors[ti]
      elseif arg[2] == "opts" then v = roles.copts
      else v = roles[arg[2]] end
      if arg[2] ~= "opts" and v ~= nil then v = v:dl() end
      a[i + 1] = v
    end
    sharded_state.entered = true -- a sharded call's agreement among the ranks is in there
    return fn(unpack(a, 1, #args + 1))
  end

  -- The loss's sizes: for 'none' one value per row (N×D inputs), per element (input_layout
  -- 'elementwise': the inputs' shape) or one 0-d value (one pair of D inputs); else 0-d.
  local function none_sizes_of(x)
    if d.input_layout == "elementwise" then return x:size() end
    if d.input_layout == "rows_or_vector" and x:dim() == 1 then return {} end
    if d.input_layout == "sequence" then return x:dim() == 3 and { x:size(2) } or {} end
    return { x:size(1) }
  end
  local function loss_sizes_of(o, x) return o.reduction == "none" and none_sizes_of(x) or {} end

  -- The upstream gradient as a tensor on the inputs' device: ones for 'none' and 1 for a
  -- reduced loss when nil, a number as a one-element tensor, or the tensor given.
  local function grad_loss_of(o, x, gradOutput, buf, where)
    local sizes = o.reduction == "none" and none_sizes_of(x) or NO_SIZES
    return upstream(o, sizes, loss_dtype(x), x:device(), gradOutput, buf, where)
  end

  -- The names of the gradients' destinations: fields of the criterion (also given to its
  -- constructor) and options of the functional API.
  local grad_keys = {}
  for _, x in ipairs(d.inputs) do grad_keys[x.grad] = true end
  for _, tt in ipairs(d.tensors) do if tt.grad then grad_keys[tt.grad_name] = true end end
  cls._fields = {}
  for k in pairs(option_names(d)) do cls._fields[k] = true end
  for k in pairs(grad_keys) do cls._fields[k] = true end
  cls._check_field = field_checker(d, grad_keys)
  cls._field_hints = {}
  for _, tt in ipairs(d.tensors) do
    if tt.argument then cls._field_hints[tt.name] = ": it is an argument of each call, " .. D.call_text(d) end
  end

  function cls:__init(opts)
    if opts == nil then opts = {} end
    local o = resolve(d, opts, grad_keys, d.criterion)
    check_options(o, d.criterion)
    set_fields(self, d, opts, o)
    for k in pairs(grad_keys) do
      local v = opts[k]
      if v ~= nil and not ploss.is_tensor(v) then
        ploss.raise(string.format("%s: %s: expected a ploss tensor, got %s", d.criterion, k, type(v)))
      end
      self[k] = v
    end
    self._copts = ctype()
    self._grads = {}
    self._cache = {}
  end

  -- The options as they are now, and the call's tensors t with them: its tensor options
  -- (t.tensors) and every tensor it reads as one list (t.args: inputs, target, tensor
  -- options), which the criterion's buffers must not be (nn.buffer replaces such a one).
  local function current(self, t)
    local user = { reduction = nn.field(self, "reduction") }
    for _, opt in ipairs(d.lua_options) do user[opt.name] = nn.field(self, opt.name) end
    for _, tt in ipairs(d.tensors) do
      if not tt.argument then user[tt.name] = nn.field(self, tt.name) end
    end
    for _, x in ipairs(d.outputs) do user[x.option] = nn.field(self, x.option) end
    local o = resolve(d, user, nil, d.criterion, true)
    check_options(o, d.criterion)
    t.o, t.cache = o, self._cache
    t.tensors = tensor_args(d, o, t.inputs[1], self._cache, t.given)
    local args = {}
    for k = 1, ninputs do args[k] = t.inputs[k] end
    if t.target then args[#args + 1] = t.target end
    for k = 1, #d.tensors do
      if t.tensors[k] ~= nil then args[#args + 1] = t.tensors[k] end
    end
    t.args = args
    return o
  end

  -- The per-row outputs the options o ask for (d.outputs), each from make(k, sizes, dtype,
  -- device): as a list (t.outputs, nil where not asked) and in order (returned).
  local function per_row_outputs(o, t, make)
    local x, list, asked = t.inputs[1], {}, {}
    for k, out in ipairs(d.outputs) do
      if o[out.option] then
        list[k] = make(k, { x:size(1) }, loss_dtype(x), x:device())
        asked[#asked + 1] = list[k]
      end
    end
    t.outputs = list
    return asked
  end

  -- the criterion's buffers of the per-row outputs
  local function output_buffers(self, t)
    self._outputs = self._outputs or {}
    return per_row_outputs(t.o, t, function(k, sizes, dtype, device)
      self._outputs[k] = nn.buffer(self._outputs[k], sizes, dtype, device, nil, nil, nil, t.args, #t.args)
      return self._outputs[k]
    end)
  end

  -- Torch7's form of a pair criterion, crit:forward({x1, x2}, y): the inputs as one list;
  -- backward and the fused call then give the gradients as a list too (the field
  -- gradInput holds that list in both forms).
  local function table_form(where, inputs, ...)
    if #inputs ~= ninputs or table.maxn(inputs) ~= ninputs then
      ploss.raise(string.format("%s: expected %d inputs (%s) or the list of them, got a list of %d", where, ninputs,
        input_names, table.maxn(inputs)))
    end
    local n = select("#", ...)
    local a = { unpack(inputs, 1, ninputs) }
    for i = 1, n do a[ninputs + i] = select(i, ...) end
    return unpack(a, 1, ninputs + n)
  end
  -- the list form holds tensors: a Lua table of numbers in the first place is a first input
  -- that is not a tensor (tensors_of names it)
  local function is_list(v)
    return type(v) == "table" and not ploss.is_tensor(v) and (v[1] == nil or ploss.is_tensor(v[1]))
  end
  function cls:forward_tensor(...)
    nn.check_self(self, d.criterion, "forward_tensor")
    if ninputs > 1 and is_list((...)) then
      nn.no_target_after_list(d.criterion .. ":forward", "forward", self, select(2, ...))
      return self:forward_tensor(table_form(d.criterion .. ":forward", ...))
    end
    for k = nargs + 1, select("#", ...) do -- a trailing nil is no argument (as for the one-input criteria)
      if select(k, ...) ~= nil then
        ploss.raise(string.format("%s:forward: takes %d arguments, got %d (the upstream gradient goes to backward, " ..
          "the scale to the fused call)", d.criterion, nargs, k))
      end
    end
    local t = tensors_of(d.criterion .. ":forward", ...)
    local o = current(self, t)
    local x = t.inputs[1]
    t.copts = fill(d, o, self._copts)
    self._loss = nn.buffer(self._loss, loss_sizes_of(o, x), loss_dtype(x), x:device(), nil, nil, nil, t.args, #t.args)
    t.loss = self._loss
    local outs = output_buffers(self, t)
    ploss.check(run("forward", x:context(), t), d.name .. "_forward")
    -- its buffers are rewritten (another criterion's state from them is stale)
    self._loss:bump_version()
    for _, v in ipairs(outs) do v:bump_version() end
    return self._loss, unpack(outs)
  end

  function cls:forward(...)
    nn.check_self(self, d.criterion, "forward")
    local r = { self:forward_tensor(...) }
    self.output = self.reduction == "none" and r[1] or r[1]:item()
    return self.output, unpack(r, 2)
  end
  function cls:updateOutput(...)
    nn.check_self(self, d.criterion, "updateOutput")
    return self:forward(...)
  end

  -- The gradients of the call, one per input: the tensor set as the criterion's field of
  -- that gradient's name (crit.grad_weight = t: the gradient goes there), else the
  -- criterion's own buffer (when the loss accumulates into it, a new one starts from zeros,
  -- or from the sums of the one it replaces when that one is given back as an input; sums
  -- of another shape, dtype or device are refused, not dropped, till clearState()); then
  -- those of the extra tensors with a gradient that are given (crit.grad_bias likewise).
  -- Returns them all in that order (t.grads: the inputs', t.tensor_grads: by tensor).
  local accumulating = {} -- gradient name → the option that adds to it (accumulate; the others overwritten)
  for _, opt in ipairs(d.options or {}) do
    for _, g in ipairs(opt.grads or {}) do accumulating[g] = opt.name end
  end
  local function grad_buffers(self, t)
    local function given_or_own(name, k, x, xname)
      local given = nn.field(self, name)
      if given ~= nil then
        if not ploss.is_tensor(given) then
          ploss.raise(string.format("%s.%s: expected a ploss tensor, got %s", d.criterion, name, type(given)))
        end
        return given
      end
      local old, sizes = self._grads[k], x:size()
      local new = nn.grad_buffer(old, x, nil, nil, nil, t.args, #t.args)
      if new ~= old and accumulating[name] and t.o[accumulating[name]] then
        local live = old and not old:is_freed()
        if live and old:dtype() == x:dtype() and old:device() == x:device() and old:has_sizes(sizes) then
          new:copy(old) -- replaced only for being given back as an input: its sums carry on
        elseif live then -- sums of another shape, dtype or device: not dropped silently
          ploss.raise(string.format("%s: %s (its own buffer, which %s adds to) is %s, this call's %s is %s: " ..
            "clearState() starts the sums afresh", d.criterion, name, accumulating[name], ploss.shown(old), xname,
            ploss.shown(x)))
        else
          new:fill(0)
        end
      end
      self._grads[k] = new
      return new
    end
    local all, g = {}, {}
    for k, x in ipairs(t.inputs) do
      if t.numbers and t.numbers[k] then -- its gradient to a scratch buffer, not returned
        if nn.field(self, d.inputs[k].grad) ~= nil then
          no_grad_for_number(d.criterion .. "." .. d.inputs[k].grad, d.inputs[k])
        end
        self._number_grads = self._number_grads or {}
        self._number_grads[k] = nn.grad_buffer(self._number_grads[k], x, nil, nil, nil, t.args, #t.args)
        g[k] = self._number_grads[k]
      else
        g[k] = given_or_own(d.inputs[k].grad, k, x, d.inputs[k].name)
        all[#all + 1] = g[k]
      end
    end
    t.grads = g
    t.tensor_grads = {}
    for k, tt in ipairs(d.tensors) do
      if tt.grad and t.tensors[k] ~= nil then
        t.tensor_grads[k] = given_or_own(tt.grad_name, ninputs + k, t.tensors[k], tt.name)
        all[#all + 1] = t.tensor_grads[k]
      elseif tt.grad and nn.field(self, tt.grad_name) ~= nil then
        no_tensor_for_grad(d.criterion .. "." .. tt.grad_name, tt)
      end
    end
    return all
  end

  function cls:backward(...)
    nn.check_self(self, d.criterion, "backward")
    if ninputs > 1 and is_list((...)) then
      nn.no_target_after_list(d.criterion .. ":backward", "backward", self, select(2, ...))
      self:backward(table_form(d.criterion .. ":backward", ...))
      return self.gradInput
    end
    check_extra(d.criterion .. ":backward", nargs + 1, "its tensors, then gradOutput", select(nargs + 2, ...))
    local t = tensors_of(d.criterion .. ":backward", ...)
    local o = current(self, t)
    local x = t.inputs[1]
    t.copts = fill(d, o, self._copts)
    local gradOutput = select(nargs + 1, ...)
    local gl = grad_loss_of(o, x, gradOutput, self._grad_loss, d.criterion .. ":backward")
    if gl ~= gradOutput then self._grad_loss = gl end
    t.grad_loss = gl
    t.args[#t.args + 1] = gl
    local g = grad_buffers(self, t)
    ploss.check(run("backward", x:context(), t), d.name .. "_backward", CRIT_NAMES)
    for _, v in ipairs(g) do v:bump_version() end
    self.gradInput = g
    step_seed(self, o)
    return unpack(g)
  end
  function cls:updateGradInput(...)
    nn.check_self(self, d.criterion, "updateGradInput")
    return self:backward(...)
  end

  function cls:fused(...)
    nn.check_self(self, d.criterion, "fused")
    if ninputs > 1 and is_list((...)) then
      nn.no_target_after_list(d.criterion .. ":fused", "fused", self, select(2, ...))
      local r = { self:fused(table_form(d.criterion, ...)) }
      -- the loss, the gradients as one list (an extra tensor's too), then the outputs
      return r[1], self.gradInput, unpack(r, #self.gradInput + 2, table.maxn(r))
    end
    check_extra(d.criterion, nargs + 1, "its tensors, then the scale", select(nargs + 2, ...))
    local t = tensors_of(d.criterion, ...)
    local o = current(self, t)
    local scale = select(nargs + 1, ...)
    check_call_scale(d.criterion, scale)
    local x = t.inputs[1]
    t.copts = fill(d, o, self._copts, scale)
    self._loss = nn.buffer(self._loss, loss_sizes_of(o, x), loss_dtype(x), x:device(), nil, nil, nil, t.args, #t.args)
    t.loss = self._loss
    local g = grad_buffers(self, t)
    local outs = output_buffers(self, t)
    ploss.check(run("fused", x:context(), t), d.name .. "_fused")
    self._loss:bump_version()
    for _, v in ipairs(g) do v:bump_version() end
    for _, v in ipairs(outs) do v:bump_version() end
    self.output = o.reduction == "none" and self._loss or self._loss:item()
    self.gradInput = g
    step_seed(self, o)
    local r = { unpack(g) }
    for _, v in ipairs(outs) do r[#r + 1] = v end
    return self.output, unpack(r)
  end

  tensor_and_print_methods(cls, d)

  -- The C calls on a given context, for the benchmark (bench/bench.lua): the single-input
  -- spec's convention with the inputs and the gradients as lists (argument order); the
  -- lengths of a loss that takes them (`given`: by the index of their tensor in d.tensors).
  cls._spec = {
    name = d.criterion, fname = d.name, opts_ctype = d.opts_type, opts_init = d.opts_init,
    inputs = d.inputs, target = target_name, multi = true,
    options = function(user) return spec_options(d, ctype, user, false) end,
    forward = function(o, ctx, inputs, target, copts, loss, given)
      return run("forward", ctx, { o = o, inputs = inputs, target = target, copts = copts, loss = loss,
                                   given = given })
    end,
    backward = function(o, ctx, inputs, target, copts, grad_loss, grads, given)
      return run("backward", ctx, { o = o, inputs = inputs, target = target, copts = copts,
                                    grad_loss = grad_loss, grads = grads, given = given })
    end,
    fused = function(o, ctx, inputs, target, copts, loss, grads, given)
      return run("fused", ctx, { o = o, inputs = inputs, target = target, copts = copts, loss = loss,
                                 grads = grads, given = given })
    end,
  }

  -- the functional API ----------------------------------------------------------------
  local F = ploss.F
  -- the call options each function takes besides the loss's: forward the loss tensor
  -- (out), backward the gradient tensors (grad_<input>), fused all and the scale
  local keys = { forward = { out = true }, backward = grad_keys, fused = { out = true, scale = true } }
  for k in pairs(grad_keys) do keys.fused[k] = true end
  local function fprep(where, opts, ...)
    local t = tensors_of(where, ...)
    if opts == nil then opts = {} end
    local o = resolve(d, opts, keys[pass_of(where)], where)
    check_buffers(opts, keys[pass_of(where)], where)
    check_options(o, where)
    if opts.scale ~= nil and type(opts.scale) ~= "number" then bad_scale(where, opts.scale, "opts.scale") end
    t.copts = fill(d, o, ctype(), opts.scale)
    t.o = o
    return t, o, opts
  end
  local function loss_out(o, raw, x)
    return raw.out or ploss.empty(loss_sizes_of(o, x), { dtype = loss_dtype(x), device = x:device() })
  end
  -- the gradients of the inputs, then those of the extra tensors given that get one
  local function grads_out(where, raw, t)
    -- a gradient the loss adds to (accumulating) and was not given starts from zeros
    local function new(x, name)
      local g = ploss.empty_like(x, { layout = "preserve" })
      return accumulating[name] and t.o[accumulating[name]] and g:fill(0) or g
    end
    local g, all = {}, {}
    for k, x in ipairs(t.inputs) do
      if t.numbers and t.numbers[k] then -- its gradient to a scratch tensor, not returned
        if raw[d.inputs[k].grad] ~= nil then no_grad_for_number(where .. ": opts." .. d.inputs[k].grad, d.inputs[k]) end
        g[k] = ploss.empty_like(x)
      else
        g[k] = raw[d.inputs[k].grad] or new(x, d.inputs[k].grad)
        all[#all + 1] = g[k]
      end
    end
    t.grads = g
    t.tensors = tensor_args(d, t.o, t.inputs[1], nil, t.given)
    t.tensor_grads = {}
    for k, tt in ipairs(d.tensors) do
      if tt.grad and t.tensors[k] ~= nil then
        t.tensor_grads[k] = raw[tt.grad_name] or new(t.tensors[k], tt.grad_name)
        all[#all + 1] = t.tensor_grads[k]
      elseif tt.grad and raw[tt.grad_name] ~= nil then
        no_tensor_for_grad(where .. ": " .. tt.grad_name, tt)
      end
    end
    return all
  end
  -- the per-row outputs asked for (new tensors), in order
  local function outputs_out(o, t)
    return per_row_outputs(o, t, function(_, sizes, dtype, device)
      return ploss.empty(sizes, { dtype = dtype, device = device })
    end)
  end
  local function result(o, raw, loss)
    if raw.out or o.reduction == "none" then return loss end
    local v = loss:item()
    loss:free()
    return v
  end

  F[d.name] = function(...)
    check_extra(d.name, nargs + 1, "its tensors, then opts", select(nargs + 2, ...))
    local opts = select(nargs + 1, ...)
    local t, o, raw = fprep(d.name, opts, ...)
    local x = t.inputs[1]
    t.loss = loss_out(o, raw, x)
    local outs = outputs_out(o, t)
    ploss.check(run("forward", x:context(), t), d.name, f_names(raw))
    written_out(raw, t.loss)
    return result(o, raw, t.loss), unpack(outs)
  end

  F[d.name .. "_backward"] = function(...)
    check_extra(d.name .. "_backward", nargs + 2, "its tensors, gradOutput, then opts", select(nargs + 3, ...))
    local grad_output, opts = select(nargs + 1, ...)
    local t, o, raw = fprep(d.name .. "_backward", opts, ...)
    local x = t.inputs[1]
    t.grad_loss = grad_loss_of(o, x, grad_output, nil, d.name .. "_backward")
    local g = grads_out(d.name .. "_backward", raw, t)
    ploss.check(run("backward", x:context(), t), d.name .. "_backward", f_names(raw))
    for _, v in ipairs(g) do v:bump_version() end
    return unpack(g)
  end

  F[d.name .. "_fused"] = function(...)
    check_extra(d.name .. "_fused", nargs + 1, "its tensors, then opts", select(nargs + 2, ...))
    local opts = select(nargs + 1, ...)
    local t, o, raw = fprep(d.name .. "_fused", opts, ...)
    local x = t.inputs[1]
    t.loss = loss_out(o, raw, x)
    local g = grads_out(d.name .. "_fused", raw, t)
    local outs = outputs_out(o, t)
    ploss.check(run("fused", x:context(), t), d.name .. "_fused", f_names(raw))
    written_out(raw, t.loss)
    for _, v in ipairs(g) do v:bump_version() end
    for _, v in ipairs(outs) do g[#g + 1] = v end
    return result(o, raw, t.loss), unpack(g)
  end
  -- a sharded call refused before it reaches the library aborts its communicator (nn.sharded)
  if option_names(d).comm then
    -- the options table: the last argument that is a table and not a tensor (a missing
    -- argument moves it)
    local function opts_comm(...)
      for i = select("#", ...), 1, -1 do
        local v = select(i, ...)
        if type(v) == "table" and not ploss.is_tensor(v) then return rawget(v, "comm") end
      end
      return nil
    end
    for _, m in ipairs { "forward_tensor", "backward", "fused" } do cls[m] = nn.sharded(cls[m], nn.comm_of) end
    for _, suffix in ipairs { "", "_backward", "_fused" } do
      F[d.name .. suffix] = nn.sharded(F[d.name .. suffix], opts_comm)
    end
  end
  for _, alias in ipairs(d.aliases) do
    F[alias], F[alias .. "_backward"], F[alias .. "_fused"] = F[d.name], F[d.name .. "_backward"], F[d.name .. "_fused"]
  end

  ploss[d.criterion] = cls
  for _, alias in ipairs(d.criterion_aliases) do ploss[alias] = cls end
  return cls
end

--- Build the criterion class and the functions of description `d` into `ploss`.
function M.build(d)
  if d.inputs then return build_multi(d) end
  local ctype = ffi.typeof(d.opts_type)
  local call = { forward = caller(d, "forward"), backward = caller(d, "backward"), fused = caller(d, "fused") }
  local cls = nn.class(d.criterion)
  cls._doc = d.title .. " (" .. d.source .. ")"
  cls._description = d
  cls._fields = {}
  for k in pairs(option_names(d)) do cls._fields[k] = true end
  cls._check_field = field_checker(d)

  function cls:__init(opts)
    -- named as the object's own class: a criterion derived from this one in Lua
    -- (SpatialAutoCropMSELoss of MSELoss) names itself in its constructor's messages
    local o = resolve(d, opts, nil, rawget(getmetatable(self), "_class_name") or d.criterion)
    set_fields(self, d, opts, o)
    self._copts = ctype()
    self._cache = {}
  end

  -- the options as they are now (they may have been edited since construction)
  local function current(self, input, target)
    check_args(d.criterion, input, target, d)
    local user = {}
    for _, opt in ipairs(d.lua_options) do user[opt.name] = nn.field(self, opt.name) end
    for _, t in ipairs(d.tensors) do user[t.name] = nn.field(self, t.name) end
    user.reduction = nn.field(self, "reduction")
    user.inplace = nn.field(self, "inplace")
    return resolve(d, user, nil, d.criterion, true)
  end

  -- what the saved state depends on; the input and target held weakly (a criterion does
  -- not keep the logits of its last forward alive: once collected, no key matches them)
  local function state_key(o, tensors, input, target)
    return { refs = setmetatable({ input, target }, WEAK_VALUES), iv = input:version(), tv = target:version(),
             is = input:storage_id(), ts = target:storage_id(), opts = fingerprint(d, o, tensors) }
  end
  local function same_key(a, b)
    return a and b and a.refs[1] ~= nil and rawequal(a.refs[1], b.refs[1]) and rawequal(a.refs[2], b.refs[2]) and
      a.iv == b.iv and a.tv == b.tv and a.is == b.is and a.ts == b.ts and a.opts == b.opts
  end

  function cls:forward_tensor(input, target, ...)
    nn.check_self(self, d.criterion, "forward_tensor")
    check_extra(d.criterion .. ":forward", 2, "input, target; the scale goes to the fused call", ...)
    local o = current(self, input, target)
    local copts = fill(d, o, self._copts)
    local tensors = tensor_args(d, o, input, self._cache)
    -- the tensor options are read by the call too: a buffer among them is replaced (a
    -- gradient given back as crit.weight), as one given back as the input is
    local ntensors = #d.tensors
    self._state_key = nil
    self._loss = nn.buffer(self._loss, loss_shape(d, o, input, target), loss_dtype(input), input:device(), input, target,
      nil, tensors, ntensors)
    if d.state then
      -- f64: backward from it then equals the fused pass (rounded to f32, a confident
      -- sample's gradient would lose its digits)
      self._state = nn.buffer(self._state, state_sizes(d, input), "f64", input:device(), input, target, nil, tensors,
        ntensors)
    end
    ploss.check(call.forward(input:context(), {
      input = input, target = target, tensors = tensors, copts = copts,
      loss = self._loss, state_out = self._state }), d.name .. "_forward", names_of(o))
    self._loss:bump_version() -- rewritten: another criterion's state from it is stale
    if d.state then self._state_key = state_key(o, tensors, input, target) end
    return self._loss
  end

  function cls:forward(input, target, ...)
    nn.check_self(self, d.criterion, "forward")
    local loss = self:forward_tensor(input, target, ...)
    self.output = self.reduction == "none" and loss or loss:item()
    return self.output
  end

  function cls:backward(input, target, gradOutput, ...)
    nn.check_self(self, d.criterion, "backward")
    check_extra(d.criterion .. ":backward", 3, "input, target, gradOutput", ...)
    local o = current(self, input, target)
    local copts = fill(d, o, self._copts)
    local tensors = tensor_args(d, o, input, self._cache)
    local gl = grad_loss_tensor(d, o, input, target, gradOutput, self._grad_loss, d.criterion .. ":backward")
    if gl ~= gradOutput then self._grad_loss = gl end
    local state = nil
    if d.state and same_key(self._state_key, state_key(o, tensors, input, target)) and not self._state:is_freed() then
      state = self._state
    end
    -- self.gradInput changes only once the call has succeeded (a refused call leaves it)
    local gi = nn.grad_buffer(self.gradInput, input, input, target, gl, tensors, #d.tensors)
    ploss.check(call.backward(input:context(), {
      input = input, target = target, tensors = tensors, copts = copts,
      state_in = state, grad_loss = gl, grad_input = gi }), d.name .. "_backward", names_of(o, CRIT_NAMES))
    gi:bump_version()
    self.gradInput = gi
    return gi
  end

  function cls:fused(input, target, scale, ...)
    nn.check_self(self, d.criterion, "fused")
    check_extra(d.criterion, 3, "input, target, scale", ...)
    local o = current(self, input, target)
    check_call_scale(d.criterion, scale)
    local copts = fill(d, o, self._copts, scale)
    self._state_key = nil
    local tensors = tensor_args(d, o, input, self._cache)
    self._loss = nn.buffer(self._loss, loss_shape(d, o, input, target), loss_dtype(input), input:device(), input, target,
      nil, tensors, #d.tensors)
    local grad
    if o.inplace then
      grad = input
    else
      grad = nn.grad_buffer(self.gradInput, input, input, target, nil, tensors, #d.tensors)
    end
    ploss.check(call.fused(input:context(), {
      input = input, target = target, tensors = tensors, copts = copts,
      loss = self._loss, grad_input = grad }), d.name .. "_fused", names_of(o, o.inplace and INPLACE_NAMES[false] or nil))
    self._loss:bump_version()
    grad:bump_version() -- the input itself when in place
    self.output = o.reduction == "none" and self._loss or self._loss:item()
    if o.inplace then return self.output, input end
    self.gradInput = grad
    return self.output, grad
  end

  tensor_and_print_methods(cls, d)

  -- The C calls with the argument order of the bad-input catalogue (spec/bad_input.lua) and
  -- of the benchmark (bench/bench.lua).
  cls._spec = {
    name = d.criterion, fname = d.name, opts_ctype = d.opts_type, opts_init = d.opts_init,
    state = d.state ~= nil,
    state_sizes = d.state and d.state.components > 1 and function(input) return state_sizes(d, input) end or nil,
    options = function(user) return spec_options(d, ctype, user, true) end,
    forward = function(o, ctx, input, target, copts, loss, state)
      return call.forward(ctx, { input = input, target = target, tensors = tensor_args(d, o, input), copts = copts,
        loss = loss, state_out = state })
    end,
    backward = function(o, ctx, input, target, copts, state, grad_loss, grad_input)
      return call.backward(ctx, { input = input, target = target, tensors = tensor_args(d, o, input), copts = copts,
        state_in = state, grad_loss = grad_loss, grad_input = grad_input })
    end,
    fused = function(o, ctx, input, target, copts, loss, grad_input)
      return call.fused(ctx, { input = input, target = target, tensors = tensor_args(d, o, input), copts = copts,
        loss = loss, grad_input = grad_input })
    end,
  }

  -- the functional API ----------------------------------------------------------------
  local F = ploss.F
  local function fprep(where, input, target, opts)
    check_args(where, input, target, d)
    if opts == nil then opts = {} end
    local pass = pass_of(where)
    local o = resolve(d, opts, FUNCTIONAL_KEYS[pass], where)
    if o.inplace and pass ~= "fused" then -- taken without a word, it would leave the input as it was
      ploss.raise(string.format("%s: opts.inplace: only %s_fused writes the gradient over the input; %s", where,
        d.name, pass == "backward" and "backward writes it to opts.grad_input or a new tensor"
          or "the forward pass writes no gradient"))
    end
    check_buffers(opts, FUNCTIONAL_KEYS[pass], where)
    if opts.scale ~= nil and type(opts.scale) ~= "number" then bad_scale(where, opts.scale, "opts.scale") end
    return o, fill(d, o, ctype(), opts.scale), opts
  end
  local function loss_out(o, raw, input, target)
    return raw.out or ploss.empty(loss_shape(d, o, input, target), { dtype = loss_dtype(input), device = input:device() })
  end
  local function result(o, raw, loss)
    if raw.out or o.reduction == "none" then return loss end
    local v = loss:item()
    loss:free()
    return v
  end

  F[d.name] = function(input, target, opts, ...)
    check_extra(d.name, 3, "input, target, opts", ...)
    local o, copts, raw = fprep(d.name, input, target, opts)
    local loss = loss_out(o, raw, input, target)
    ploss.check(call.forward(input:context(), { input = input, target = target, tensors = tensor_args(d, o, input),
      copts = copts, loss = loss }), d.name, names_of(o, f_names(raw)))
    written_out(raw, loss)
    return result(o, raw, loss)
  end

  F[d.name .. "_backward"] = function(input, target, grad_output, opts, ...)
    check_extra(d.name .. "_backward", 4, "input, target, gradOutput, opts", ...)
    local o, copts, raw = fprep(d.name .. "_backward", input, target, opts)
    local gl = grad_loss_tensor(d, o, input, target, grad_output, nil, d.name .. "_backward")
    local grad = raw.grad_input or ploss.empty_like(input, { layout = "preserve" })
    ploss.check(call.backward(input:context(), { input = input, target = target, tensors = tensor_args(d, o, input),
      copts = copts, grad_loss = gl, grad_input = grad }), d.name .. "_backward", names_of(o, f_names(raw)))
    if raw.grad_input then raw.grad_input:bump_version() end
    return grad
  end

  F[d.name .. "_fused"] = function(input, target, opts, ...)
    check_extra(d.name .. "_fused", 3, "input, target, opts", ...)
    local o, copts, raw = fprep(d.name .. "_fused", input, target, opts)
    local loss = loss_out(o, raw, input, target)
    if o.inplace and raw.grad_input ~= nil and raw.grad_input ~= input then
      -- the gradient goes over the input itself: another destination is not taken
      ploss.raise(d.name .. "_fused: opts.grad_input: given with opts.inplace = true, which writes the gradient " ..
        "over the input itself; pass one or the other")
    end
    local grad = o.inplace and input or raw.grad_input or ploss.empty_like(input, { layout = "preserve" })
    ploss.check(call.fused(input:context(), { input = input, target = target, tensors = tensor_args(d, o, input),
      copts = copts, loss = loss, grad_input = grad }), d.name .. "_fused", names_of(o, f_names(raw, o.inplace)))
    written_out(raw, loss)
    grad:bump_version()
    if o.reduction == "none" or raw.out then return loss, grad end
    return result(o, raw, loss), grad
  end
  for _, alias in ipairs(d.aliases) do
    F[alias], F[alias .. "_backward"], F[alias .. "_fused"] = F[d.name], F[d.name .. "_backward"], F[d.name .. "_fused"]
  end

  ploss[d.criterion] = cls
  for _, alias in ipairs(d.criterion_aliases) do ploss[alias] = cls end
  return cls
end

--- Build every loss.
function M.build_all()
  for _, d in ipairs(D.all()) do M.build(d) end
end

return M
end
