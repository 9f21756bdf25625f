--- Loss descriptions: the one place where the facts of a loss are written.
--
-- Each loss is a Lua table in lua/ploss/losses/<name>.lua, listed in lua/ploss/losses/init.lua.
-- From it, tools/gen_losses.lua writes the options structs and prototypes of the public
-- header (core/ploss_losses.h), the C entry points with their option checks
-- (core/losses.c), the fuzzer's table (fuzz/loss_entries.h) and the user reference
-- (docs/losses.md); at run time ploss/criterion.lua builds the criterion class and the
-- ploss.F functions from it, and the specs derive their catalogue rows from it.
--
-- Fields of a description:
--   name         C family name and ploss.F name: ploss_<name>_forward/_backward/_fused
--   criterion    the Lua class, ploss.<criterion>{...}
--   criterion_aliases  other class names of the same criterion (Torch7's names, a paper's
--                name; optional)
--   aliases      other ploss.F names of the same function (optional)
--   title, source, formula, gradient, notes   the documentation (plain text, UTF-8 maths)
--   shape        the kernel shape: 'rows' (a softmax over axis 1 of N×C×d1×…×dk logits),
--                'elementwise' (any shape, one loss per element), 'pairs' (N×D embeddings
--                compared row with row or in tiles of their N×N distance matrix), 'boxes'
--                (N×4 boxes, one loss per box), 'region' (per-class reductions over groups
--                of pixels of N×C×d1×…×dk logits) or 'margin' (N×D embeddings against C×D
--                class centres: a softmax over the cosines of each row, computed in row
--                tiles of matrix products) or 'sequence' (T×N×C frames of N sequences
--                against label sequences: recursions over the frames)
--   policy       the loss's maths inside its shape's engines (core/engines/<shape>.c)
--   opts_type    the C options struct (default ploss_<name>_opts); several losses may share
--                one, with the same options; opts_init: its initialiser (default
--                <opts_type>_init)
--   target       'index' (class indices), 'index_or_probabilities', 'elementwise' (float,
--                the input's shape), 'labels' (one integer class label per embedding row,
--                the argument `labels`), 'class_labels' (one class index per embedding row,
--                in [0, C) or ignore_index; also the argument `labels`), 'none' (no target
--                argument), 'boxes' (float N×4 boxes, as the input) or 'signs' (±1 labels,
--                any float dtype or i64/i32: of a loss of several inputs one per row, or per
--                element with input_layout 'elementwise'; of an elementwise loss the input's
--                shape) or 'index_list' (i64/i32 of the
--                input's shape: each row's class indices, ended by its first negative entry)
--                or 'sequences' (a label sequence per sample: N×S padded, or 1-D
--                concatenated, with their lengths among the tensors)
--   inputs       nil (one input, `input`, and one gradient, `grad_input`), or the inputs that
--                each get a gradient, in argument order: { { name, doc }, … }; the gradient
--                of input `x` is the argument `grad_x`; an input's `number = true` lets the Lua
--                calls take a number in its place: a tensor of that value (shape: the input's
--                with its last dim 1, 0-d for a 0-d input; its dtype and device), whose
--                gradient is computed into a scratch buffer and not returned
--   input_layout  a loss of several inputs: 'rows' (default: N×D embeddings, one loss per
--                row), 'rows_or_vector' (N×D, or D for one pair whose 'none' loss is 0-d),
--                'elementwise' (any shape, one loss per element: the 'none' loss has the
--                inputs' shape) or 'sequence' (T×N×C, or T×C for one sequence whose 'none'
--                loss is 0-d)
--   input_doc, target_doc  what the input / target hold, where the shape's and target
--                kind's general text does not say it (optional; with several inputs
--                input_doc follows each input's own doc)
--   input_range  { low, high }: the inputs the loss is defined on (BCE's probabilities), where
--                generic specs draw their random inputs (optional; default any real)
--   reductions   the reductions the loss takes, by Lua name (default 'none', 'mean', 'sum';
--                'batchmean' only where listed)
--   tensors      extra tensors between target and opts, in argument order:
--                { name, kind = 'class_vector' (C values) | 'broadcast' (over the input) |
--                  'sample_vector' (N values, one per sample) | 'class_ids' (a vector of
--                  class indices) | 'lengths' (N integers, i64/i32: data of each call, so a
--                  positional argument after the target in Lua, not an option; a loss of
--                  several inputs),
--                  what (one <what> per class), required, priors, doc,
--                  mask = true: a mask of 0/1 values (a Lua list: booleans or 0/1; the
--                  engine refuses a tensor's other values),
--                  nonnegative = true: a Lua list of weights must be >= 0 (any list of
--                  weights must be finite; a tensor's values are not read on the host),
--                  grad = true: a loss of several inputs differentiates it too — its
--                  gradient grad_<name> (its shape; NULL when the tensor is NULL) follows
--                  the inputs' gradients in _backward and _fused, and the Lua calls
--                  return it after theirs when the tensor is given }
--   outputs      a loss of several inputs: per-row values forward and fused can also write,
--                { { name, doc }, … } (C: NULL or N values of the loss's dtype after the
--                loss; Lua: the option return_<name> = true returns them after the call's
--                other results, in this order)
--   state        nil, or { name, components (per sample), doc }: what forward saves for
--                backward
--   min_classes  the least C (default 1) and min_classes_why
--   enums        C enums this loss's options introduce: { ctype, prefix, count, doc,
--                values = { { lua name, C suffix, doc }, … } }
--   options      in struct order, after `reduction` and before `scale` and `inplace`
--                (common to every loss): { lua/C name, type, default, doc = …, and checks:
--                min, max, min_exclusive, even, or_zero (0 is taken besides that range:
--                a switched-off value below the least meaningful one); range = the range's text (the docs'
--                column, the messages) where the loss's `check` decides it; param = the
--                field of the engines' parameters when it differs from the name; ctype for
--                enums; list = { value, tensor }: an enum's list form, a list given for it
--                being that tensor option with that value; type_hint: appended to the error
--                for a value of the wrong type; grads = { gradient names }: a bool option
--                that adds the call's gradients into those buffers (accumulate) — the
--                criterion carries its own buffers' sums over, and refuses to drop them }.
--                Types:
--                'int64', 'int', 'double' (finite), 'enum', 'bool', and 'comm' (a
--                communicator, ploss.comm; default false: none; a ploss_comm_t * in C).
--   unused_options  { name = true }: fields of a shared struct this loss does not read
--   loss_groups  region shape: what the loss of 'none' holds: 'class' (one value per group
--                and class: [C], or [N, C] with the per_image option), 'sample' (one per
--                sample: [N]), 'batch' (one for the batch: [1]) or 'sample_or_batch' ([N]
--                with the per_sample option, else [1]) or 'pixel' (the label map: N×d1×…×dk)
--   number_hint  what a number given in the options' place means to a Torch7 user, where
--                it is not an option's value (optional: ClassSimplexCriterion(nClasses))
--   check        nil, or function(o) → nil or a message: a check of the resolved options
--                together (the engine makes the same check in C; several-input losses)
--   mean_doc     what 'mean' divides by, where it is not the shape's (the element count of
--                an elementwise loss): one phrase for the generated "Loss:" lines
local D = {}

local TYPES = { int64 = "int64_t", int = "int", double = "double", enum = true, bool = "int", comm = "ploss_comm_t *" }
local SHAPES = { rows = true, elementwise = true, pairs = true, boxes = true, region = true, margin = true,
  sequence = true }
local TARGETS = { index = true, index_or_probabilities = true, elementwise = true, labels = true, none = true,
  boxes = true, signs = true, class_labels = true, index_list = true, sequences = true }
local INPUT_LAYOUTS = { rows = true, rows_or_vector = true, elementwise = true, sequence = true }
local KNOWN = {
  name = true, criterion = true, aliases = true, title = true, source = true, formula = true,
  gradient = true, notes = true, shape = true, policy = true, opts_type = true, opts_init = true,
  target = true, tensors = true, state = true, min_classes = true, min_classes_why = true,
  enums = true, options = true, unused_options = true, inputs = true, criterion_aliases = true,
  input_doc = true, target_doc = true, reductions = true, input_range = true, loss_groups = true,
  input_layout = true, check = true, outputs = true, number_hint = true, mean_doc = true,
}

--- The reductions: 'none', 'mean' and 'sum' of every loss, 'batchmean' of those that list it.
D.reductions = { { "none", "PLOSS_REDUCTION_NONE" }, { "mean", "PLOSS_REDUCTION_MEAN" }, { "sum", "PLOSS_REDUCTION_SUM" },
                 { "batchmean", "PLOSS_REDUCTION_BATCHMEAN" } }
local DEFAULT_REDUCTIONS = { "none", "mean", "sum" }

local function fail(desc, msg) error("loss description " .. tostring(desc.name) .. ": " .. msg, 0) end

-- A number as C and the docs write it (1e-05 → 1e-5; integers without a point).
function D.number(v)
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
  local s = string.format("%.17g", v)
  for p = 1, 17 do
    local t = string.format("%." .. p .. "g", v)
    if tonumber(t) == v then s = t break end
  end
  return (s:gsub("e%-0*(%d)", "e-%1"):gsub("e%+0*(%d)", "e%1"))
end

--- The range an option must lie in, as the error messages and the docs say it
-- ("a finite number >= 0", "an even integer in [2, 64]"); nil when any value goes.
function D.range_text(opt)
  if opt.range then return opt.range end
  local what
  if opt.type == "double" then what = "a finite number"
  elseif opt.type == "int" or opt.type == "int64" then what = opt.even and "an even integer" or "an integer"
  else return nil end
  if opt.or_zero then what = "0 or " .. what end
  local lo, hi = opt.min, opt.max
  if opt.min_exclusive ~= nil and hi ~= nil then
    return what .. " in (" .. D.number(opt.min_exclusive) .. ", " .. D.number(hi) .. "]"
  end
  if opt.min_exclusive ~= nil then return what .. " > " .. D.number(opt.min_exclusive) end
  if lo ~= nil and hi ~= nil then return what .. " in [" .. D.number(lo) .. ", " .. D.number(hi) .. "]" end
  if lo ~= nil then return what .. " >= " .. D.number(lo) end
  if hi ~= nil then return what .. " <= " .. D.number(hi) end
  if opt.type == "double" or opt.even then return what end
  return nil
end

--- True when `v` (a Lua number) satisfies the option's checks (the C side runs the same).
function D.in_range(opt, v)
  if type(v) ~= "number" or v ~= v then return false end
  if opt.type == "double" and (v == math.huge or v == -math.huge) then return false end
  if opt.type ~= "double" and (v ~= math.floor(v)) then return false end
  if opt.or_zero and v == 0 then return true end
  if opt.min_exclusive ~= nil and not (v > opt.min_exclusive) then return false end
  if opt.min ~= nil and v < opt.min then return false end
  if opt.max ~= nil and v > opt.max then return false end
  if opt.even and v % 2 ~= 0 then return false end
  return true
end

-- The C type of an option's struct field.
function D.ctype(opt)
  if opt.type == "enum" then return opt.ctype end
  return TYPES[opt.type]
end

local enums_by_ctype = {}

local function normalise_option(desc, o)
  local opt = {}
  for k, v in pairs(o) do if type(k) == "string" then opt[k] = v end end
  opt.name, opt.type, opt.default = o[1], o[2], o[3]
  if type(opt.name) ~= "string" then fail(desc, "an option without a name") end
  if not TYPES[opt.type] then fail(desc, "option " .. opt.name .. ": unknown type " .. tostring(opt.type)) end
  if opt.default == nil then fail(desc, "option " .. opt.name .. ": no default") end
  if opt.type == "enum" and not opt.ctype then fail(desc, "option " .. opt.name .. ": enum without ctype") end
  if not opt.doc then fail(desc, "option " .. opt.name .. ": no doc") end
  if opt.list ~= nil and not (opt.type == "enum" and type(opt.list.value) == "string" and
      type(opt.list.tensor) == "string") then
    fail(desc, "option " .. opt.name .. ": list = {value = <one of its enum's>, tensor = <a tensor option>}, of an enum")
  end
  if opt.list then
    local e, named = enums_by_ctype[opt.ctype], false
    for _, t in ipairs(desc.tensors) do named = named or t.name == opt.list.tensor end
    if not (e and e.by_lua[opt.list.value] and named) then
      fail(desc, "option " .. opt.name .. ": list names an unknown enum value or tensor")
    end
  end
  if opt.grads ~= nil and not (opt.type == "bool" and type(opt.grads) == "table" and #opt.grads > 0) then
    fail(desc, "option " .. opt.name .. ": grads = {<gradient names>}, of a bool option")
  end
  if opt.name == "accumulate" and not opt.grads then -- the criteria keep sums only of the listed gradients
    fail(desc, "option accumulate: no grads (the gradients it adds to)")
  end
  opt.param = opt.param or opt.name
  return opt
end


--- Validate a description table and add the facts derived from it.  Returns it.
function D.prepare(desc)
  if desc._prepared then return desc end
  for k in pairs(desc) do if not KNOWN[k] then fail(desc, "unknown field " .. tostring(k)) end end
  for _, f in ipairs { "name", "criterion", "title", "source", "shape", "policy", "target", "formula", "gradient" } do
    if desc[f] == nil then fail(desc, "missing field " .. f) end
  end
  if not SHAPES[desc.shape] then fail(desc, "unknown shape " .. tostring(desc.shape)) end
  if not TARGETS[desc.target] then fail(desc, "unknown target kind " .. tostring(desc.target)) end
  desc.opts_type = desc.opts_type or ("ploss_" .. desc.name .. "_opts")
  desc.opts_init = desc.opts_init or (desc.opts_type .. "_init")
  desc.min_classes = desc.min_classes or 1
  desc.tensors = desc.tensors or {}
  desc.enums = desc.enums or {}
  desc.aliases = desc.aliases or {}
  desc.unused_options = desc.unused_options or {}
  if desc.inputs then
    -- PLOSS_MAX_LOSS_INPUTS of core/loss.h
    if #desc.inputs < 1 or #desc.inputs > 3 then fail(desc, "inputs: 1 to 3 inputs") end
    for _, i in ipairs(desc.inputs) do
      if type(i[1]) ~= "string" or type(i[2]) ~= "string" then fail(desc, "an input without a name or doc") end
      i.name, i.doc, i.grad = i[1], i[2], "grad_" .. i[1]
      if i.number ~= nil and (i.number ~= true or i == desc.inputs[1]) then
        fail(desc, "input " .. i.name .. ": number = true or nil, and not on the first input (it sets the shape)")
      end
    end
  end
  desc.outputs = desc.outputs or {}
  if #desc.outputs > 2 then fail(desc, "outputs: at most 2 (PLOSS_MAX_LOSS_OUTPUTS of core/loss.h)") end
  if #desc.outputs > 0 and not desc.inputs then fail(desc, "outputs: of a loss of several inputs") end
  for _, o in ipairs(desc.outputs) do
    if type(o[1]) ~= "string" or type(o[2]) ~= "string" then fail(desc, "an output without a name or doc") end
    o.name, o.doc, o.option = o[1], o[2], "return_" .. o[1]
  end
  for _, t in ipairs(desc.tensors) do
    if t.grad and not desc.inputs then fail(desc, "tensor " .. t.name .. ": grad, of a loss of several inputs") end
    if t.grad then t.grad_name = "grad_" .. t.name end
    -- lengths are data of the call, not options: positional arguments after the target
    t.argument = t.kind == "lengths"
    if t.argument and not desc.inputs then fail(desc, "tensor " .. t.name .. ": lengths, of a loss of several inputs") end
  end
  if desc.input_layout ~= nil and not (desc.inputs and INPUT_LAYOUTS[desc.input_layout]) then
    fail(desc, "input_layout: 'rows', 'rows_or_vector', 'elementwise' or 'sequence', of a loss of several inputs")
  end
  if desc.inputs then desc.input_layout = desc.input_layout or "rows" end
  desc.criterion_aliases = desc.criterion_aliases or {}
  desc.reductions = desc.reductions or DEFAULT_REDUCTIONS
  desc.reduction_allowed = {}
  for _, r in ipairs(desc.reductions) do desc.reduction_allowed[r] = true end
  for _, e in ipairs(desc.enums) do
    e.by_lua = {}
    for i, v in ipairs(e.values) do
      e.by_lua[v[1]] = i - 1
      v.cname = e.prefix .. v[2]
    end
    enums_by_ctype[e.ctype] = e
  end
  local options = {}
  for _, o in ipairs(desc.options) do options[#options + 1] = normalise_option(desc, o) end
  desc.options = options
  -- the struct: reduction, the loss's options, scale and inplace
  desc.fields = { { name = "reduction", type = "enum", ctype = "ploss_reduction", default = "mean", common = true,
                    doc = "how the per-sample losses are reduced" } }
  for _, o in ipairs(options) do desc.fields[#desc.fields + 1] = o end
  desc.fields[#desc.fields + 1] = { name = "scale", type = "double", default = 1, common = true, fused = true,
    doc = "read by _fused only: the gradient's multiplier (the upstream gradient); every pass refuses a " ..
      "non-finite one" }
  desc.fields[#desc.fields + 1] = { name = "inplace", type = "bool", default = false, common = true, fused = true,
    doc = desc.inputs and "refused (1) by every pass: each input of this loss gets its own gradient, none may be " ..
      "written over"
      or "read by _fused only: 1 writes the gradient over the input, and grad_input must then be the input " ..
        "tensor itself; every pass refuses a value other than 0 or 1" }
  -- the options a user sets, in Lua
  desc.lua_options = {}
  for _, o in ipairs(options) do
    if not desc.unused_options[o.name] then desc.lua_options[#desc.lua_options + 1] = o end
  end
  desc._prepared = true
  return desc
end

--- The enum of a C enum type named by an option (from any loaded description), or the
-- reductions for ploss_reduction.
local reduction_enum -- made once: every option check of every call reads it
function D.enum(ctype)
  if ctype == "ploss_reduction" then
    if not reduction_enum then
      local e = { ctype = ctype, by_lua = {}, values = {} }
      for i, r in ipairs(D.reductions) do
        e.by_lua[r[1]] = i - 1
        e.values[i] = { r[1], cname = r[2] }
      end
      reduction_enum = e
    end
    return reduction_enum
  end
  return enums_by_ctype[ctype]
end

--- The names of the losses, in order.
function D.names() return require "ploss.losses" end

--- Every description, prepared, in order (enums of earlier losses are known to later ones).
function D.all()
  local out = {}
  for _, name in ipairs(D.names()) do out[#out + 1] = D.prepare(require("ploss.losses." .. name)) end
  return out
end

--- The name of the target argument ('target', or 'labels' for a labels or class_labels
-- target); nil when the loss has none.
function D.target_name(desc)
  if desc.target == "none" then return nil end
  return (desc.target == "labels" or desc.target == "class_labels") and "labels" or "target"
end

--- The call of a criterion of description `desc` with its tensor arguments, as the messages
-- write it: crit(log_probs, target, input_lengths, target_lengths), or with the name
-- `callee` in place of crit (a functional's; its pass `pass`: backward's takes gradOutput).
function D.call_text(desc, callee, pass)
  local names = {}
  for _, a in ipairs(D.arguments(desc, "forward")) do
    if a[2] == "input" or a[2] == "target" or (a[2] == "tensor" and a[3].argument) then names[#names + 1] = a[1] end
  end
  if pass == "backward" then names[#names + 1] = "gradOutput" end
  return (callee or "crit") .. "(" .. table.concat(names, ", ") .. ")"
end

-- The arguments of a loss of several inputs (see D.arguments).
local function multi_input_arguments(desc, pass)
  local a = {}
  for k, i in ipairs(desc.inputs) do a[#a + 1] = { i.name, "input", k - 1 } end
  local tn = D.target_name(desc)
  if tn then a[#a + 1] = { tn, "target" } end
  for _, t in ipairs(desc.tensors) do a[#a + 1] = { t.name, "tensor", t } end
  a[#a + 1] = { "opts", "opts" }
  if pass == "forward" then
    a[#a + 1] = { "loss", "loss" }
    for k, o in ipairs(desc.outputs) do a[#a + 1] = { o.name, "output", k - 1 } end
    if desc.state then a[#a + 1] = { desc.state.name, "state_out" } end
    return a
  end
  if pass == "backward" then
    if desc.state then a[#a + 1] = { desc.state.name, "state_in" } end
    a[#a + 1] = { "grad_loss", "grad_loss" }
  else
    a[#a + 1] = { "loss", "loss" }
    for k, o in ipairs(desc.outputs) do a[#a + 1] = { o.name, "output", k - 1 } end
  end
  for k, i in ipairs(desc.inputs) do a[#a + 1] = { i.grad, "grad_input", k - 1 } end
  for k, t in ipairs(desc.tensors) do
    if t.grad then a[#a + 1] = { t.grad_name, "grad_tensor", k - 1 } end
  end
  return a
end

--- The C arguments of a pass after ctx, as { name, role } in order: role 'input',
-- 'target', 'tensor' (an extra tensor), 'opts', 'loss', 'state_out', 'state_in',
-- 'grad_loss', 'grad_input', and with several inputs 'output' (a per-row output,
-- desc.outputs) and 'grad_tensor' (the gradient of an extra tensor with grad).  With
-- several inputs each 'input', 'grad_input' and 'output' argument carries its index
-- (0-based) as a[3], each 'grad_tensor' its tensor's; the target, if any, follows the
-- inputs.
function D.arguments(desc, pass)
  if desc.inputs then return multi_input_arguments(desc, pass) end
  local a = { { "input", "input" }, { "target", "target" } }
  for _, t in ipairs(desc.tensors) do a[#a + 1] = { t.name, "tensor", t } end
  a[#a + 1] = { "opts", "opts" }
  if pass == "forward" then
    a[#a + 1] = { "loss", "loss" }
    if desc.state then a[#a + 1] = { desc.state.name, "state_out" } end
  elseif pass == "backward" then
    if desc.state then a[#a + 1] = { desc.state.name, "state_in" } end
    a[#a + 1] = { "grad_loss", "grad_loss" }
    a[#a + 1] = { "grad_input", "grad_input" }
  else
    a[#a + 1] = { "loss", "loss" }
    a[#a + 1] = { "grad_input", "grad_input" }
  end
  return a
end

return D
