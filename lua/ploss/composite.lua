--- Criteria made of criteria (Torch7's nn.MultiCriterion and nn.ParallelCriterion): a
-- weighted sum of losses, the way a segmentation loss adds cross-entropy to a Dice or
-- Lovász term, with the gradients summed on the device (ploss has no autograd to do it).
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
-- target for all with repeatTarget; inputs[k] a list for a member of several inputs);
-- forward → Σ w_k·loss_k; backward and the fused call → a list whose k-th entry is
-- w_k·grad_k (a list of gradients for a member of several inputs).
-- The members' losses must be reduced ('mean' or 'sum'); members of a fused call may not
-- be in place (each would write over the input the next one reads).  Gradients are
-- buffers of the composite: f64 sums of each element's terms, rounded once per member.
return function(ploss)
local C = ploss.C
local nn = ploss.nn

-- The members' gradients in the composite's buffers: grads[i] ← w·g (first member, beta
-- = 0) or grads[i] + w·g.  args[1..n] are the call's arguments (a buffer in their memory is
-- replaced, see nn.buffer).
local function accumulate(grads, i, g, w, first, args, n, where)
  local tensors, m = {}, 0 -- the arguments that are tensors (not a target list, a scale)
  for j = 1, n do
    if ploss.is_tensor(args[j]) then m = m + 1; tensors[m] = args[j] end
  end
  if not ploss.is_tensor(g) then
    ploss.raise(string.format("%s: a member returned %s for gradient %d, not a tensor", where, ploss.shown(g), i))
  end
  local sizes = g:size()
  if first then
    grads[i] = nn.buffer(grads[i], sizes, g:dtype(), g:device(), nil, nil, nil, tensors, m)
  elseif not grads[i]:has_sizes(sizes) or grads[i]:dtype() ~= g:dtype() or grads[i]:device() ~= g:device() then
    ploss.raise(string.format("%s: the members' gradients %d differ (%s %s on %s, then %s %s on %s): members of " ..
      "one composite take the same inputs", where, i, grads[i]:dtype(), tostring(grads[i]:size()), grads[i]:device(),
      g:dtype(), tostring(sizes), g:device()))
  end
  ploss.check(C.ploss_axpby(grads[i]:context(), grads[i]:dl(), w, g:dl(), first and 0 or 1), where)
  grads[i]:bump_version()
end

local function check_weight(w, where)
  if w == nil then return 1 end
  if type(w) ~= "number" or w ~= w or w == math.huge or w == -math.huge then
    ploss.raise(where .. ": weight: expected a finite number, got " .. ploss.shown(w))
  end
  return w
end

local function check_member(c, where)
  local ok = type(c) == "table" and type(c.forward) == "function" and type(c.backward) == "function" and
    type(c.fused) == "function" and rawget(c, "__index") ~= c
  if not ok then
    ploss.raise(string.format("%s: expected a criterion (e.g. ploss.CrossEntropyLoss()), got %s", where,
      type(c) == "table" and (rawget(c, "__index") == c and "a class (make one: Cls{…})" or "a table that is not one")
      or ploss.shown(c)))
  end
  return c
end

local function reduced(loss, k, where)
  if type(loss) ~= "number" then
    ploss.raise(string.format("%s: member %d gave a loss tensor: its reduction is 'none'; a composite adds " ..
      "reduced losses ('mean' or 'sum')", where, k))
  end
  return loss
end

local function not_in_place(m, k, where)
  if rawget(m, "inplace") == true then
    ploss.raise(string.format("%s: member %d is in place (inplace = true): it would write over the input " ..
      "another member reads", where, k))
  end
end

local function member_list(self)
  local parts = {}
  for k, m in ipairs(self._members) do parts[k] = string.format("%g × %s", self._weights[k], tostring(m)) end
  return table.concat(parts, ", ")
end

local function no_members(self, where)
  if #self._members == 0 then ploss.raise(where .. ": no criterion added (crit:add(criterion [, weight]))") end
end

-- the methods both composites share
local function common(cls, name)
  function cls:add(criterion, weight)
    nn.check_self(self, name, "add")
    local c, w = check_member(criterion, name .. ":add"), check_weight(weight, name .. ":add")
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
  function cls:cuda() return self:to("cuda") end
  function cls:cpu() return self:to("cpu") end
end

---------------------------------------------------------------------------------------
-- MultiCriterion
---------------------------------------------------------------------------------------

local Multi = nn.class("MultiCriterion")
Multi._fields = {}
Multi._doc = "weighted sum of criteria on the same arguments (Torch7 nn.MultiCriterion)"
common(Multi, "MultiCriterion")

function Multi:__init(opts)
  if type(opts) ~= "table" or next(opts) ~= nil then ploss.raise("MultiCriterion: takes no options (add members with :add(criterion [, weight]))") end
  self._members, self._weights, self._grads = {}, {}, {}
end

function Multi:forward(...)
  nn.check_self(self, "MultiCriterion", "forward")
  no_members(self, "MultiCriterion:forward")
  local out = 0
  for k, m in ipairs(self._members) do
    out = out + self._weights[k] * reduced(m:forward(...), k, "MultiCriterion:forward")
  end
  self.output = out
  return out
end

-- Sums the gradients a member call returned (from position `from` of the results) into
-- self._grads; returns their count.
local function sum_grads(self, k, args, n, where, ...)
  local count = select("#", ...)
  if k > 1 and count ~= self._ngrads then
    ploss.raise(string.format("%s: member %d gave %d gradients, member 1 gave %d: members of one MultiCriterion " ..
      "take the same inputs", where, k, count, self._ngrads))
  end
  for i = 1, count do
    accumulate(self._grads, i, (select(i, ...)), self._weights[k], k == 1, args, n, where)
  end
  return count
end

local function results(self)
  return unpack(self._grads, 1, self._ngrads)
end

function Multi:backward(...)
  nn.check_self(self, "MultiCriterion", "backward")
  no_members(self, "MultiCriterion:backward")
  local args, n = { ... }, select("#", ...)
  for k, m in ipairs(self._members) do
    self._ngrads = sum_grads(self, k, args, n, "MultiCriterion:backward", m:backward(...))
  end
  self.gradInput = self._grads[1]
  return results(self)
end

local function fused_member(self, k, m, args, n, where, loss, ...)
  return reduced(loss, k, where), sum_grads(self, k, args, n, where, ...)
end

function Multi:fused(...)
  nn.check_self(self, "MultiCriterion", "fused")
  no_members(self, "MultiCriterion:fused")
  local args, n = { ... }, select("#", ...)
  local out = 0
  for k, m in ipairs(self._members) do
    not_in_place(m, k, "MultiCriterion:fused")
    local loss, count = fused_member(self, k, m, args, n, "MultiCriterion:fused", m:fused(...))
    self._ngrads = count
    out = out + self._weights[k] * loss
  end
  self.output, self.gradInput = out, self._grads[1]
  return out, results(self)
end

function Multi:tostring() return "ploss.MultiCriterion(" .. member_list(self) .. ")" end

---------------------------------------------------------------------------------------
-- ParallelCriterion
---------------------------------------------------------------------------------------

local Parallel = nn.class("ParallelCriterion")
Parallel._fields = { repeatTarget = true }
Parallel._doc = "weighted sum of criteria, each on its own input and target (Torch7 nn.ParallelCriterion)"
common(Parallel, "ParallelCriterion")

function Parallel:__init(opts)
  local rt = false
  if type(opts) == "boolean" then
    rt = opts
  elseif type(opts) == "table" then
    ploss.check_option_keys(opts, "ParallelCriterion", Parallel._fields)
    rt = opts.repeatTarget
    if rt == nil then rt = false end
  else
    ploss.raise("ParallelCriterion: expected repeatTarget (a boolean) or {repeatTarget = …}, got " .. ploss.shown(opts))
  end
  if type(rt) ~= "boolean" then
    ploss.raise("ParallelCriterion: repeatTarget: expected a boolean (true or false), got " .. ploss.shown(rt))
  end
  self.repeatTarget = rt
  self._members, self._weights, self._grads = {}, {}, {}
end

-- The arguments of member k: its input(s), then its target (none when nil).
local function member_args(self, inputs, targets, k, where)
  if type(inputs) ~= "table" or ploss.is_tensor(inputs) then
    ploss.raise(where .. ": inputs: expected a list with one input per member, got " .. ploss.shown(inputs))
  end
  if #inputs ~= #self._members then
    ploss.raise(string.format("%s: inputs: %d of them for %d members", where, #inputs, #self._members))
  end
  local target
  if self.repeatTarget then
    target = targets
  else
    if type(targets) ~= "table" or ploss.is_tensor(targets) then
      ploss.raise(where .. ": targets: expected a list with one target per member (or repeatTarget = true), got " ..
        ploss.shown(targets))
    end
    target = targets[k]
  end
  local x = inputs[k]
  local args = ploss.is_tensor(x) and { x } or type(x) == "table" and { unpack(x) } or nil
  if not args then ploss.raise(string.format("%s: inputs[%d]: expected a tensor or a list of tensors, got %s", where, k,
    ploss.shown(x))) end
  if target ~= nil then args[#args + 1] = target end
  return args
end

function Parallel:forward(inputs, targets)
  nn.check_self(self, "ParallelCriterion", "forward")
  no_members(self, "ParallelCriterion:forward")
  local out = 0
  for k, m in ipairs(self._members) do
    local args = member_args(self, inputs, targets, k, "ParallelCriterion:forward")
    out = out + self._weights[k] * reduced(m:forward(unpack(args)), k, "ParallelCriterion:forward")
  end
  self.output = out
  return out
end

-- Copies w_k × the gradients of member k (results of its call) into the composite's
-- entry k: a tensor, or a list for a member of several inputs.
local function parallel_grads(self, k, args, where, ...)
  local count = select("#", ...)
  local own = self._grads[k]
  if count == 1 then
    local g = { own }
    accumulate(g, 1, (...), self._weights[k], true, args, #args, where)
    self._grads[k] = g[1]
  else
    own = type(own) == "table" and not ploss.is_tensor(own) and own or {}
    for i = 1, count do accumulate(own, i, (select(i, ...)), self._weights[k], true, args, #args, where) end
    for i = count + 1, #own do own[i] = nil end
    self._grads[k] = own
  end
end

function Parallel:backward(inputs, targets, gradOutput)
  nn.check_self(self, "ParallelCriterion", "backward")
  no_members(self, "ParallelCriterion:backward")
  for k, m in ipairs(self._members) do
    local args = member_args(self, inputs, targets, k, "ParallelCriterion:backward")
    local n = #args
    if gradOutput ~= nil then args[n + 1] = gradOutput end
    parallel_grads(self, k, args, "ParallelCriterion:backward", m:backward(unpack(args, 1, n + 1)))
  end
  self.gradInput = self._grads
  return self._grads
end

local function parallel_fused(self, k, args, where, loss, ...)
  parallel_grads(self, k, args, where, ...)
  return reduced(loss, k, where)
end

function Parallel:fused(inputs, targets, scale)
  nn.check_self(self, "ParallelCriterion", "fused")
  no_members(self, "ParallelCriterion:fused")
  local out = 0
  for k, m in ipairs(self._members) do
    not_in_place(m, k, "ParallelCriterion:fused")
    local args = member_args(self, inputs, targets, k, "ParallelCriterion:fused")
    local n = #args
    if scale ~= nil then args[n + 1] = scale end
    out = out + self._weights[k] * parallel_fused(self, k, args, "ParallelCriterion:fused", m:fused(unpack(args, 1, n + 1)))
  end
  self.output, self.gradInput = out, self._grads
  return out, self._grads
end

function Parallel:tostring()
  return "ploss.ParallelCriterion(" .. (self.repeatTarget and "repeatTarget, " or "") .. member_list(self) .. ")"
end

ploss.MultiCriterion, ploss.ParallelCriterion = Multi, Parallel
ploss.nn.MultiCriterion, ploss.nn.ParallelCriterion = Multi, Parallel
end
