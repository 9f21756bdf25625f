--- Criteria made of criteria (Torch7's nn.MultiCriterion and nn.ParallelCriterion): a
-- weighted sum of losses, the way a segmentation loss adds cross-entropy to a Dice or
-- Lovász term, with the gradients summed on the device (ploss has no autograd to do it);
-- and Torch7's criteria that are another one on adapted arguments (SpatialAutoCropMSELoss:
-- MSELoss on a crop of the target; L1NormLoss: L1Loss against zeros), at the end.
--
--   local crit = ploss.MultiCriterion():add(ploss.CrossEntropyLoss(), 1)
--                                      :add(ploss.LovaszSoftmaxLoss(), 0.5)
--   local loss, grad = crit(logits, labels)   -- 1·CE + 0.5·Lovász and its gradient
--
-- MultiCriterion: every member gets the same arguments.  forward → Σ w_k·loss_k;
-- backward(args… [, gradOutput]) and the fused call (args… [, scale]) → the gradients
-- Σ w_k·grad_k, one per input of the members (the members' own arguments and gradients:
-- (input, target) → gradInput; a triplet loss's (a, p, n) → three gradients).
-- ParallelCriterion([repeatTarget]): member k gets inputs[k] and targets[k] (the one
-- target for all with repeatTarget; inputs[k] a list for a member of several inputs, or
-- the list of inputs of a member that is itself a ParallelCriterion, as Torch7 nests them);
-- forward → Σ w_k·loss_k; backward and the fused call → a list whose k-th entry is
-- w_k·grad_k (a list of gradients for a member of several inputs, the nested list of a
-- nested ParallelCriterion).
-- The members' losses must be reduced ('mean' or 'sum'); members of a fused call may not
-- be in place (each would write over the input the next one reads); a criterion is a
-- member once in the whole tree of nested composites (its gradient buffer would be
-- rewritten before it is added).  Every member
-- runs before anything is added, so a call a member refuses leaves the composite's
-- gradients as they were.  Gradients are buffers of the composite: each member's term
-- added in f64 and rounded to the gradient's dtype (f16 and bf16 through f32).
return function(ploss)
local C = ploss.C
local nn = ploss.nn

-- The tensors among `args` (nested lists included) appended to list[n + 1 …]; returns n.
local function tensors_in(args, list, n)
  for j = 1, table.maxn(args) do
    local a = args[j]
    if ploss.is_tensor(a) then
      n = n + 1
      list[n] = a
    elseif type(a) == "table" then
      n = tensors_in(a, list, n)
    end
  end
  return n
end

local function check_weight(w, where)
  if w == nil then return 1 end
  if type(w) ~= "number" or w ~= w or w == math.huge or w == -math.huge then
    ploss.raise(where .. ": weight: expected a finite number, got " .. ploss.shown(w))
  end
  return w
end

local function check_member(self, c, where)
  local ok = type(c) == "table" and type(c.forward) == "function" and type(c.backward) == "function" and
    type(c.fused) == "function" and rawget(c, "__index") == nil
  if not ok then
    ploss.raise(string.format("%s: expected a criterion (e.g. ploss.CrossEntropyLoss()), got %s", where,
      type(c) == "table" and (rawget(c, "__index") ~= nil and "a class (make one: Cls{…})" or "a table that is not one")
      or ploss.shown(c)))
  end
  for k, m in ipairs(self._members) do
    if m == c then
      ploss.raise(string.format("%s: this criterion is member %d already (add it once, with the sum of the weights)",
        where, k))
    end
  end
  return c
end

-- Raise when a criterion is used twice anywhere in the tree of composites under `root`
-- (root itself included): a criterion's gradient is its own buffer, rewritten by its next
-- call, and every member runs before any gradient is added.
local function check_tree(root, where)
  local seen = {}
  local function walk(c, path)
    if seen[c] then
      ploss.raise(string.format("%s: %s is used twice (%s and %s): each place needs its own criterion object, " ..
        "whose gradient buffer the other call would rewrite", where, "ploss." .. (c._class_name or "criterion"),
        seen[c], path))
    end
    seen[c] = path
    local members = rawget(c, "_members")
    if type(members) == "table" then
      for k, m in ipairs(members) do walk(m, (path == "the composite" and "member " or path .. ".") .. k) end
    end
  end
  walk(root, "the composite")
end

-- Before any member runs: members there are, none 'none' (a composite adds reduced
-- losses), none in place in a fused call, none used twice in the tree.
local function check_members(self, where, fused)
  if #self._members == 0 then ploss.raise(where .. ": no criterion added (crit:add(criterion [, weight]))") end
  check_tree(self, where)
  for k, m in ipairs(self._members) do
    if nn.field(m, "reduction") == "none" then
      ploss.raise(string.format("%s: member %d has reduction 'none'; a composite adds reduced losses ('mean' or " ..
        "'sum')", where, k))
    end
    if fused and nn.field(m, "inplace") == true then
      ploss.raise(string.format("%s: member %d is in place (inplace = true): it would write over the input " ..
        "another member reads", where, k))
    end
    -- per-row outputs (return_lse, …) come after a member's gradients in its fused call,
    -- where a composite would take them for gradients
    local d = rawget(m, "_description") or m._description
    for _, x in ipairs(type(d) == "table" and d.outputs or {}) do
      if nn.field(m, x.option) then
        ploss.raise(string.format("%s: member %d returns its %s (%s = true): a composite adds losses and " ..
          "gradients only; call that criterion on its own for it", where, k, x.name or x.option, x.option))
      end
    end
  end
end

-- A MultiCriterion's members take the same arguments: a member without a target beside one
-- with would take the other's target for its upstream gradient or scale.
local function check_same_arguments(self, where)
  local t1, k1 = nil, nil -- the first member whose answer is known
  for k, m in ipairs(self._members) do
    local tk = nn.takes_target(m)
    if t1 == nil then
      t1, k1 = tk, k
    elseif tk ~= nil and tk ~= t1 then
      local with, without = t1 and k1 or k, t1 and k or k1
      ploss.raise(string.format("%s: member %d (ploss.%s) takes no target and member %d (ploss.%s) takes one: the " ..
        "members of a MultiCriterion take the same arguments (put them in a ParallelCriterion, each with its own)",
        where, without, self._members[without]._class_name or "criterion", with,
        self._members[with]._class_name or "criterion"))
    end
  end
end

-- A member's loss: a number (a member other than a ploss criterion could return more).
local function reduced(loss, k, where)
  if type(loss) ~= "number" then
    ploss.raise(string.format("%s: member %d gave a loss %s, not a number: a composite adds reduced losses", where,
      k, ploss.is_tensor(loss) and "tensor" or ploss.shown(loss)))
  end
  return loss
end

-- Raise unless g (gradient i of member k) is a tensor like `like` (nil: anything).
local function check_grad(g, like, k, i, where)
  if not ploss.is_tensor(g) then
    ploss.raise(string.format("%s: member %d returned %s for gradient %d, not a tensor", where, k, ploss.shown(g), i))
  end
  if like and (not like:has_sizes(g:size()) or like:dtype() ~= g:dtype() or like:device() ~= g:device()) then
    ploss.raise(string.format("%s: gradient %d of member %d is %s %s on %s, member 1's %s %s on %s: the members of " ..
      "a MultiCriterion take the same inputs", where, i, k, g:dtype(), tostring(g:size()), g:device(), like:dtype(),
      tostring(like:size()), like:device()))
  end
end

-- buf ← w·g (add = false) or buf + w·g; buf a buffer of the composite in g's layout (made or
-- kept by nn.grad_buffer against the call's tensors list[1..n]).  Returns buf.
local function add_into(buf, g, w, add, list, n, where)
  if not add then buf = nn.grad_buffer(buf, g, nil, nil, nil, list, n) end
  ploss.check(C.ploss_axpby(buf:context(), buf:dl(), w, g:dl(), add and 1 or 0), where)
  buf:bump_version()
  return buf
end

-- The results of member k's method(m, ...) as a list; an error it raises says which member
-- (where: member k (ploss.Class): its message).
local function call_member(m, k, method, where, ...)
  local r = { pcall(m[method], m, ...) }
  if not r[1] then
    local msg = tostring(r[2])
    ploss.raise(string.format("%s: member %d (ploss.%s): %s", where, k, m._class_name or "criterion",
      msg:match("ploss: (.*)$") or msg))
  end
  table.remove(r, 1)
  return r
end

local function member_list(self, first)
  local parts = { first }
  for k, m in ipairs(self._members) do parts[#parts + 1] = string.format("%g × %s", self._weights[k], tostring(m)) end
  return table.concat(parts, ", ")
end

-- the methods both composites share
local function common(cls, name)
  function cls:add(criterion, weight)
    nn.check_self(self, name, "add")
    if rawget(self, "_members") == nil then -- m.add(crit): the member came as self
      local of = (getmetatable(self) or {})._class_name
      ploss.raise(string.format("%s.add: called without its object (got %s first): write m:add(criterion [, " ..
        "weight]), with a colon", name, of and ("a " .. of) or type(self)))
    end
    local c, w = check_member(self, criterion, name .. ":add"), check_weight(weight, name .. ":add")
    self._members[#self._members + 1], self._weights[#self._weights + 1] = c, w
    return self
  end
  function cls:to(device)
    nn.check_self(self, name, "to")
    for _, m in ipairs(self._members) do
      if type(m.to) == "function" then m:to(device) end
    end
    return self
  end
  -- :cuda(), :cpu(), :type(), :float(), :double(), :clearState() (of the members too)
  nn.torch7_methods(cls, name)
end

---------------------------------------------------------------------------------------
-- MultiCriterion
---------------------------------------------------------------------------------------

local Multi = nn.class("MultiCriterion")
Multi._fields = {}
Multi._doc = "weighted sum of criteria on the same arguments (Torch7 nn.MultiCriterion)"
common(Multi, "MultiCriterion")

function Multi:__init(opts)
  if type(opts) ~= "table" or next(opts) ~= nil then
    ploss.raise("MultiCriterion: takes no options (add members with :add(criterion [, weight]))")
  end
  self._members, self._weights, self._grads = {}, {}, {}
end

function Multi:forward(...)
  nn.check_self(self, "MultiCriterion", "forward")
  check_members(self, "MultiCriterion:forward", false)
  check_same_arguments(self, "MultiCriterion:forward")
  local out = 0
  for k, m in ipairs(self._members) do
    out = out + self._weights[k] * reduced(call_member(m, k, "forward", "MultiCriterion:forward", ...)[1], k,
      "MultiCriterion:forward")
  end
  self.output = out
  return out
end

-- Runs every member's `method` on the call's arguments (all before anything is added),
-- then sums their gradients into self._grads; returns the weighted sum of the losses
-- (fused) and the gradients.
local function multi_run(self, method, where, ...)
  check_members(self, where, method == "fused")
  check_same_arguments(self, where)
  local first = method == "fused" and 2 or 1 -- the first gradient among a call's results
  local results, count = {}, nil
  for k, m in ipairs(self._members) do
    local r = call_member(m, k, method, where, ...)
    local c = table.maxn(r) - first + 1
    if count and c ~= count then
      ploss.raise(string.format("%s: member %d gave %d gradients, member 1 gave %d: the members of a " ..
        "MultiCriterion take the same inputs", where, k, c, count))
    end
    count = c
    if first == 2 then reduced(r[1], k, where) end
    for i = 1, c do check_grad(r[first + i - 1], k > 1 and results[1][first + i - 1] or nil, k, i, where) end
    results[k] = r
  end
  local list = {}
  local n = tensors_in({ ... }, list, 0)
  local out = 0
  for k, r in ipairs(results) do
    local w = self._weights[k]
    if first == 2 then out = out + w * r[1] end
    for i = 1, count do self._grads[i] = add_into(self._grads[i], r[first + i - 1], w, k > 1, list, n, where) end
  end
  for i = count + 1, #self._grads do self._grads[i] = nil end
  -- as a member's own field: its gradient, or the list of them for a member of several inputs
  self.gradInput = count > 1 and self._grads or self._grads[1]
  return out, unpack(self._grads, 1, count)
end

local function drop_first(_, ...) return ... end

-- Torch7's list form of several inputs, m:backward({a, p, n}, …): the inputs unpacked for
-- the members (true, then the call's arguments), and the gradients given back as one list,
-- as a member's own list form gives them.  Members without a target (every member takes the
-- same arguments) refuse what follows the list, as their own list form does: a Torch7 loop's
-- target there would reach them as the upstream gradient or the scale.
local function list_form(self, where, first, ...)
  if not (type(first) == "table" and not ploss.is_tensor(first) and getmetatable(first) == nil and
          ploss.is_tensor(first[1])) then
    return false, first, ...
  end
  nn.no_target_after_list(where, where:match(":(%a+)$"), self, ...)
  local a, n = { unpack(first, 1, table.maxn(first)) }, table.maxn(first)
  for i = 1, select("#", ...) do a[n + i] = select(i, ...) end
  return true, unpack(a, 1, n + select("#", ...))
end

function Multi:backward(...)
  nn.check_self(self, "MultiCriterion", "backward")
  local function finish(listed, ...)
    if not listed then return drop_first(multi_run(self, "backward", "MultiCriterion:backward", ...)) end
    self.gradInput = { drop_first(multi_run(self, "backward", "MultiCriterion:backward", ...)) }
    return self.gradInput
  end
  return finish(list_form(self, "MultiCriterion:backward", ...))
end

function Multi:fused(...)
  nn.check_self(self, "MultiCriterion", "fused")
  local function finish(out, ...)
    self.output = out
    return out, ...
  end
  local function run(listed, ...)
    if not listed then return finish(multi_run(self, "fused", "MultiCriterion:fused", ...)) end
    local r = { multi_run(self, "fused", "MultiCriterion:fused", ...) }
    self.output, self.gradInput = r[1], { unpack(r, 2, table.maxn(r)) }
    return r[1], self.gradInput
  end
  return run(list_form(self, "MultiCriterion:fused", ...))
end

function Multi:tostring() return "ploss.MultiCriterion(" .. member_list(self) .. ")" end

-- A MultiCriterion adds its members' gradients tensor by tensor: a ParallelCriterion's list
-- of gradients cannot be one of them.
local add_member = Multi.add
function Multi:add(criterion, weight)
  if type(criterion) == "table" and (getmetatable(criterion) or {})._class_name == "ParallelCriterion" then
    ploss.raise("MultiCriterion:add: a ParallelCriterion cannot be a member (its gradients are a list per " ..
      "member, not tensors to add); make the MultiCriterion a member of the ParallelCriterion instead")
  end
  return add_member(self, criterion, weight)
end

---------------------------------------------------------------------------------------
-- ParallelCriterion
---------------------------------------------------------------------------------------

local Parallel = nn.class("ParallelCriterion")
Parallel._fields = { repeatTarget = true }
Parallel._doc = "weighted sum of criteria, each on its own input and target (Torch7 nn.ParallelCriterion)"
common(Parallel, "ParallelCriterion")

local function check_repeat(rt, where, name)
  if type(rt) ~= "boolean" then
    ploss.raise(where .. ": " .. (name or "repeatTarget") .. ": expected a boolean (true or false), got " ..
      ploss.shown(rt))
  end
  return rt
end

Parallel._takes_target = true
Parallel._check_field = function(_, k, v)
  if k == "repeatTarget" then check_repeat(v, "ParallelCriterion", "crit.repeatTarget") end
end

function Parallel:__init(opts)
  local rt = false
  if type(opts) == "boolean" then
    rt = opts
  elseif type(opts) == "table" then
    ploss.check_option_keys(opts, "ParallelCriterion", Parallel._fields)
    if opts.repeatTarget ~= nil then rt = opts.repeatTarget end
  else
    ploss.raise("ParallelCriterion: expected repeatTarget (a boolean) or {repeatTarget = …}, got " .. ploss.shown(opts))
  end
  self.repeatTarget = check_repeat(rt, "ParallelCriterion")
  self._members, self._weights, self._grads = {}, {}, {}
end

-- Every member's arguments: its input(s), then its target (none when nil), then `last`
-- (gradOutput or the fused scale) when given; checked before any member runs.
local function parallel_args(self, inputs, targets, last, where)
  local rt = check_repeat(self.repeatTarget, where)
  if type(inputs) ~= "table" or ploss.is_tensor(inputs) then
    ploss.raise(where .. ": inputs: expected a list with one input per member, got " .. ploss.shown(inputs))
  end
  if #inputs ~= #self._members then
    ploss.raise(string.format("%s: inputs: %d of them for %d member%s", where, #inputs, #self._members,
      #self._members == 1 and "" or "s"))
  end
  if not rt and (type(targets) ~= "table" or ploss.is_tensor(targets)) then
    ploss.raise(where .. ": targets: expected a list with one target per member (or repeatTarget = true), got " ..
      ploss.shown(targets))
  end
  if not rt and table.maxn(targets) > #self._members then
    ploss.raise(string.format("%s: targets: %d of them for %d member%s", where, table.maxn(targets), #self._members,
      #self._members == 1 and "" or "s"))
  end
  local all = {}
  for k = 1, #self._members do
    local x = inputs[k]
    -- a nested ParallelCriterion takes its list of inputs as one argument
    local nested = getmetatable(self._members[k]) == getmetatable(self)
    local args = ploss.is_tensor(x) and { x } or type(x) == "table" and (nested and { x } or { unpack(x) }) or nil
    if not args then
      ploss.raise(string.format("%s: inputs[%d]: expected a tensor or a list of tensors, got %s", where, k,
        ploss.shown(x)))
    end
    local target
    if rt then target = targets else target = targets[k] end
    -- a member without a target: Torch7's ignored targets[k]; here it would be taken for
    -- the upstream gradient or the scale, so it is refused (the one shared target of
    -- repeatTarget is not given to such a member)
    if target ~= nil and nn.takes_target(self._members[k]) == false then
      if not rt then
        ploss.raise(string.format("%s: targets[%d]: member %d (ploss.%s) takes no target: leave targets[%d] nil " ..
          "(Torch7's member ignored it; here it would be taken for the upstream gradient or the scale)", where, k, k,
          self._members[k]._class_name or "criterion", k))
      end
      target = nil
    end
    if target ~= nil then args[#args + 1] = target end
    args.n = #args
    if last ~= nil then args.n = args.n + 1; args[args.n] = last end
    all[k] = args
  end
  return all
end

-- Raise unless g (member k's gradient i) is a tensor or, from a nested ParallelCriterion, a
-- list of them (nested lists too).
local function check_grad_tree(g, k, i, where)
  if type(g) == "table" and not ploss.is_tensor(g) then
    for j = 1, table.maxn(g) do check_grad_tree(g[j], k, i, where) end
  else
    check_grad(g, nil, k, i, where)
  end
end

-- own ← w·g for a gradient g that is a tensor or a (nested) list of them; own: the
-- composite's buffers of the same structure from the last call, kept where they fit.
local function scale_tree(own, g, w, list, n, where)
  if ploss.is_tensor(g) then return add_into(ploss.is_tensor(own) and own or nil, g, w, false, list, n, where) end
  own = type(own) == "table" and not ploss.is_tensor(own) and own or {}
  for i = 1, table.maxn(g) do own[i] = scale_tree(own[i], g[i], w, list, n, where) end
  for i = table.maxn(g) + 1, table.maxn(own) do own[i] = nil end
  return own
end

-- Runs every member's `method` on its arguments (all before anything is written), then
-- stores w_k × member k's gradients in entry k of self._grads (a tensor, a list for a
-- member of several inputs, a nested list for a nested ParallelCriterion); returns the
-- weighted sum of the losses (fused).
local function parallel_run(self, method, where, inputs, targets, last)
  check_members(self, where, method == "fused")
  local all = parallel_args(self, inputs, targets, last, where)
  local first = method == "fused" and 2 or 1
  local results = {}
  for k, m in ipairs(self._members) do
    local r = call_member(m, k, method, where, unpack(all[k], 1, all[k].n))
    if first == 2 then reduced(r[1], k, where) end
    for i = first, table.maxn(r) do check_grad_tree(r[i], k, i - first + 1, where) end
    results[k] = r
  end
  -- the call's tensors, every member's: a buffer there is replaced, not written
  local list = {}
  local n = tensors_in({ inputs, targets, last }, list, 0)
  local out = 0
  for k, r in ipairs(results) do
    local w = self._weights[k]
    if first == 2 then out = out + w * r[1] end
    local count = table.maxn(r) - first + 1
    self._grads[k] = scale_tree(self._grads[k], count == 1 and r[first] or { unpack(r, first, first + count - 1) }, w,
      list, n, where)
  end
  for k = #results + 1, #self._grads do self._grads[k] = nil end
  self.gradInput = self._grads
  return out
end

function Parallel:forward(inputs, targets)
  nn.check_self(self, "ParallelCriterion", "forward")
  check_members(self, "ParallelCriterion:forward", false)
  local all = parallel_args(self, inputs, targets, nil, "ParallelCriterion:forward")
  local out = 0
  for k, m in ipairs(self._members) do
    out = out + self._weights[k] *
      reduced(call_member(m, k, "forward", "ParallelCriterion:forward", unpack(all[k], 1, all[k].n))[1], k,
        "ParallelCriterion:forward")
  end
  self.output = out
  return out
end

function Parallel:backward(inputs, targets, gradOutput)
  nn.check_self(self, "ParallelCriterion", "backward")
  parallel_run(self, "backward", "ParallelCriterion:backward", inputs, targets, gradOutput)
  return self._grads
end

function Parallel:fused(inputs, targets, scale)
  nn.check_self(self, "ParallelCriterion", "fused")
  self.output = parallel_run(self, "fused", "ParallelCriterion:fused", inputs, targets, scale)
  return self.output, self._grads
end

function Parallel:tostring()
  return "ploss.ParallelCriterion(" .. member_list(self, self.repeatTarget and "repeatTarget" or nil) .. ")"
end

ploss.MultiCriterion, ploss.ParallelCriterion = Multi, Parallel
ploss.nn.MultiCriterion, ploss.nn.ParallelCriterion = Multi, Parallel

---------------------------------------------------------------------------------------
-- SpatialAutoCropMSELoss
---------------------------------------------------------------------------------------

-- Torch7's nn.SpatialAutoCropMSECriterion: MSELoss between a C×H×W or N×C×H×W input and
-- the centred H×W window of a target of the same rank whose H_t×W_t is at least the
-- input's (a network with valid convolutions gives a smaller map than its target image).
-- The window starts at row ⌊(H_t − H)/2⌋ and column ⌊(W_t − W)/2⌋ (from 0) and is a view
-- of the target: nothing is copied.  Everything else is MSELoss's: its options
-- (reduction, inplace, weight), dtypes, devices, gradOutput and messages; 'mean' divides
-- by the input's element count, as Torch7's sizeAverage (with a weight, by its sum).
local Crop = nn.class("SpatialAutoCropMSELoss", ploss.MSELoss)
Crop._doc = "MSELoss against the centred crop of a larger target (Torch7 nn.SpatialAutoCropMSECriterion)"

local function centre_crop(input, target, where)
  if not ploss.is_tensor(input) then
    ploss.raise(string.format("%s: input: expected a ploss tensor, got %s", where, ploss.shown(input)))
  end
  if not ploss.is_tensor(target) then
    ploss.raise(string.format("%s: target: expected a ploss tensor, got %s", where, ploss.shown(target)))
  end
  local nd = input:dim()
  if nd ~= 3 and nd ~= 4 then
    ploss.raise(string.format("%s: input: expected C×H×W or N×C×H×W (3 or 4 dims), got %s", where,
      ploss.shown(input)))
  end
  if target:dim() ~= nd then
    ploss.raise(string.format("%s: target: expected %d dims, as the input, got %s", where, nd, ploss.shown(target)))
  end
  for k = 1, nd - 2 do
    if target:size(k) ~= input:size(k) then
      ploss.raise(string.format("%s: target: expected the input's %s before H×W, got %s", where,
        nd == 4 and "N×C" or "C", ploss.shown(target)))
    end
  end
  local h, w, th, tw = input:size(nd - 1), input:size(nd), target:size(nd - 1), target:size(nd)
  if th < h or tw < w then
    ploss.raise(string.format("%s: target: its spatial size %d×%d is smaller than the input's %d×%d (the target " ..
      "is cropped to the input, never the other way)", where, th, tw, h, w))
  end
  return target:narrow(nd - 1, 1 + math.floor((th - h) / 2), h):narrow(nd, 1 + math.floor((tw - w) / 2), w)
end

function Crop:forward_tensor(input, target, ...)
  nn.check_self(self, "SpatialAutoCropMSELoss", "forward_tensor")
  return ploss.MSELoss.forward_tensor(self, input, centre_crop(input, target, "SpatialAutoCropMSELoss:forward"), ...)
end
function Crop:backward(input, target, ...)
  nn.check_self(self, "SpatialAutoCropMSELoss", "backward")
  return ploss.MSELoss.backward(self, input, centre_crop(input, target, "SpatialAutoCropMSELoss:backward"), ...)
end
function Crop:fused(input, target, ...)
  nn.check_self(self, "SpatialAutoCropMSELoss", "fused")
  return ploss.MSELoss.fused(self, input, centre_crop(input, target, "SpatialAutoCropMSELoss"), ...)
end
function Crop:tostring()
  return (ploss.MSELoss.tostring(self):gsub("^ploss%.MSELoss", "ploss.SpatialAutoCropMSELoss"))
end

ploss.SpatialAutoCropMSELoss, ploss.SpatialAutoCropMSECriterion = Crop, Crop

---------------------------------------------------------------------------------------
-- L1NormLoss
---------------------------------------------------------------------------------------

-- Torch7's nn.L1Cost: the L1 norm of the input, Σ|x| (a sparsity cost on a code), its
-- gradient sign(x) (0 at 0).  It is L1Loss against zeros, taken as one zero seen through
-- stride-0 dims (no memory of the input's size); no target is passed.  Its reduction is
-- 'sum' by default (Torch7's L1Cost had no average); 'mean', 'none' and a weight (Σ w·|x|)
-- as L1Loss's.
local L1Norm = nn.class("L1NormLoss", ploss.L1Loss)
L1Norm._doc = "the L1 norm Σ|x| of the input (Torch7 nn.L1Cost)"
L1Norm._takes_target = false

function L1Norm:__init(opts)
  -- (L1Loss's message for a number or boolean would speak of Torch7's sizeAverage, which
  -- L1Cost never took, and of a default that is not this one's)
  if type(opts) ~= "table" then
    ploss.raise(string.format("L1NormLoss: expected a table of named options ({reduction = 'sum'}, the default), " ..
      "got %s", ploss.shown(opts)))
  end
  local o = { reduction = "sum" }
  for k, v in pairs(opts) do o[k] = v end
  ploss.L1Loss.__init(self, o)
end

local function zeros_as(input, where)
  if not ploss.is_tensor(input) then
    ploss.raise(string.format("%s: input: expected a ploss tensor, got %s", where, ploss.shown(input)))
  end
  return ploss.zeros({}, { dtype = input:dtype(), device = input:device() }):expand(input:size())
end

function L1Norm:forward_tensor(input, ...)
  nn.check_self(self, "L1NormLoss", "forward_tensor")
  if select("#", ...) > 0 and (...) ~= nil then
    ploss.raise("L1NormLoss:forward: takes the input alone (Torch7's L1Cost took no target)")
  end
  return ploss.L1Loss.forward_tensor(self, input, zeros_as(input, "L1NormLoss:forward"))
end
--- backward(input [, gradOutput]): the second argument is the upstream gradient, as every
-- criterion's after its inputs (Torch7's L1Cost:backward(input) took none).
function L1Norm:backward(input, ...)
  nn.check_self(self, "L1NormLoss", "backward")
  return ploss.L1Loss.backward(self, input, zeros_as(input, "L1NormLoss:backward"), ...)
end
function L1Norm:fused(input, ...)
  nn.check_self(self, "L1NormLoss", "fused")
  return ploss.L1Loss.fused(self, input, zeros_as(input, "L1NormLoss"), ...)
end
function L1Norm:tostring()
  return (ploss.L1Loss.tostring(self):gsub("^ploss%.L1Loss", "ploss.L1NormLoss"))
end

ploss.L1NormLoss, ploss.L1Cost = L1Norm, L1Norm
end
