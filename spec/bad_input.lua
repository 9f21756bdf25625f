--- The bad-input catalogue: one table row per public loss, and a generator that
-- turns a row into the cases of the catalogue.  Used by spec/bad_input_spec.lua (CPU, suite
-- 'cpu'), spec/cuda_bad_input_spec.lua (the same cases on the GPU), and the family list by
-- spec/cuda_determinism_spec.lua.  `require "spec.bad_input"`.
--
--   B.families                 the rows (see "Family rows" below)
--   B.cases(fam, device)       a list of {name = ..., fn = function() ... end}: each fn runs
--                              one case of the catalogue (every pass: forward, backward,
--                              fused) on `device` and raises on failure
--   B.not_applicable(fam)      the catalogue entries that do not apply to the row, with why
--   B.bytes(t)                 the raw bytes of a tensor (a host string), for bitwise checks
--   B.loss_args(fam, sizes, dtype, device, seed)
--                              a valid (input, target, opts) set for the row
--
-- Every case states its expectation: an error (status name + a fragment naming the
-- argument; every output tensor is poisoned before the call and must be bit-identical
-- after it), or values (equal to the same call on contiguous copies, NaN, zero, …).
-- Invalid labels on CUDA: the call returns, the next synchronising call raises
-- PLOSS_ERR_INVALID_LABEL and the context works again afterwards.
--
-- Family rows.  A row is a table:
--   name          ploss.F.<name> (and <name>_backward, <name>_fused); for kind 'class' and
--                 'elementwise' also ploss[class]._spec, the registered C entry points
--   class         the criterion class name (ploss.<class>)
--   kind          'class'        input N×C(×d…) logits, target class indices N(×d…)
--                 'elementwise'  input any shape, target float of the input's shape
--                 'boxes'        input N×4 boxes, target N×4 boxes (the IoU family)
--                 'op'           input any shape, no target (Taylor softmax ops)
--   ignore        the default ignore_index (class kind)
--   min_classes   1 or 2
--   opts          options that every call gets (e.g. lb_proportion)
--   class_tensors names of tensor options with one value per class (weight, alpha, …)
--   elem_tensors  names of tensor options broadcast over the input (BCE weight/pos_weight)
--   box_tensors   names of tensor options with one value per box (weight, ignore)
--   bad_options   { {opts, fragment [, passes]} ... }: out-of-range options → an error
--   one_class     function(x_value) → the per-sample loss for C = 1 (nil: only finite)
--   one_class_gradient  the per-sample gradient for C = 1 (default 0: a one-class softmax)
--   target_entry_only  the loss reads only the target's entry of each row (NLL): a
--                 non-finite value at another class leaves the row's loss finite
--   keep_all      options that make every valid sample count (OHEM: n_min large)
--   state         true when forward writes an O(rows) state (aliasing checks on it)
--   input_range   { low, high }: the inputs the loss is defined on (from the description);
--                 valid inputs are drawn uniformly from it
--   finite_at_inf an infinite input on the right side of the target gives a finite loss
--                 (a saturating loss: soft margin, hinge), not the non-finite loss of the others
--   masking       'exact': a −inf logit at a non-target class (class masking) gives the loss
--                 and gradient of the input without that class (and a zero gradient there);
--                 'finite': only a finite loss and gradient; nil: no claim (the loss is
--                 not defined there, e.g. the large-margin regulariser is +inf)
local ffi = require "ffi"
local H = require "spec.helpers"
local D = require "ploss.description"
local ploss = H.ploss
local F = ploss.F

local B = {}

---------------------------------------------------------------------------------------
-- Family rows
---------------------------------------------------------------------------------------

local function ones_like_C(C) return ploss.ones({ C }) end

-- Every buffer a case makes is written before use: floats hold H.POISON (an output element
-- a call should write but does not shows up in the value checks), integers 0.  Read-backs
-- (snapshots, comparisons) then never copy unwritten device memory, which
-- compute-sanitizer's initcheck reports at the cudaMemcpy.
local function buffer(sizes, opts)
  local t = ploss.empty(sizes, opts)
  return t:fill(t:is_floating_point() and H.POISON or 0)
end

-- What the catalogue knows of a loss beyond its description (lua/ploss/losses/<name>.lua):
-- the facts its cases check.  Everything else of a row (kind, default ignore_index, the
-- least class count, tensor options, saved state, out-of-range options) comes from the
-- description.
local facts = {
  cross_entropy = { masking = "exact", one_class = function() return 0 end },
  binary_cross_entropy_with_logits = {},
  sigmoid_focal = {},
  softmax_focal = { masking = "exact", one_class = function() return 0 end },
  dual_focal = { masking = "finite", one_class = function() return -math.log(1 + 1e-5) end },
  large_margin_softmax = {},
  taylor_cross_entropy = { one_class = function() return 0 end },
  pc_softmax_cross_entropy = {
    masking = "exact",
    required_class_tensors = { lb_proportion = function(C)
      local v = {}
      for j = 1, C do v[j] = 0.5 + j / C end
      return v
    end },
    bad_options = {
      { { lb_proportion = "negative" }, "lb_proportion: the prior -1 of class 1 is not a finite number >= 0" },
      { { lb_proportion = "nan" }, "of class 1 is not a finite number >= 0" },
      { { lb_proportion = "zeros" }, "lb_proportion: every prior is 0" },
      { { lb_proportion = "missing" }, "lb_proportion (the C class priors" },
    },
    one_class = function() return math.log(1.5) end, -- log w_0 with w_0 = 0.5 + 1/1
  },
  ohem_cross_entropy = { masking = "exact", keep_all = { n_min = 1000000 }, one_class = function() return 0 end },
  ohem_large_margin = { keep_all = { n_min = 1000000 } },
  soft_margin_loss = { finite_at_inf = true },
  hinge_loss = { finite_at_inf = true },
  nll_loss = { masking = "exact", target_entry_only = true, one_class = function(x) return -x end,
               one_class_gradient = -1 },
  multi_margin_loss = { masking = "finite", one_class = function() return 0 end },
  class_simplex_loss = {},
}

-- Option values just outside each option's range, with the fragment of the error they give.
local function out_of_range(d)
  local out = {}
  local function add(name, v, frag) out[#out + 1] = { { [name] = v }, frag or ("opts." .. name) } end
  for _, o in ipairs(d.lua_options) do
    local n = o.name
    if o.type == "enum" then
      add(n, "other", n .. ": 'other' is not one of")
    elseif o.type == "double" then
      if o.min then add(n, o.min - 1, "opts." .. n .. ": " .. D.number(o.min - 1) .. " is not " .. D.range_text(o)) end
      if o.min_exclusive then add(n, o.min_exclusive, "opts." .. n .. ": " .. D.number(o.min_exclusive) .. " is not") end
      if o.max then add(n, o.max + 0.5, "opts." .. n .. ": " .. D.number(o.max + 0.5) .. " is not") end
      add(n, 0 / 0)
      add(n, math.huge)
    elseif o.min or o.max or o.even then
      if o.min then add(n, o.min - 1, "opts." .. n .. ": " .. D.number(o.min - 1)) end
      if o.max then add(n, o.max + 2, "opts." .. n .. ": " .. D.number(o.max + 2)) end
      if o.even then add(n, o.min + 1, "opts." .. n .. ": " .. D.number(o.min + 1)) end
      add(n, (o.min or 0) + 0.5, n .. ": expected " .. D.range_text(o) .. ", got " .. D.number((o.min or 0) + 0.5))
    end
  end
  return out
end

B.families = {}
-- losses of several embedding inputs (the pairs shape) check their bad input in spec/pairs_spec.lua
for _, d in ipairs(H.one_input_losses()) do
  -- the region losses (one 'none' value per group and class, no per-sample rows) check their
  -- bad input in spec/region_spec.lua and spec/cuda_region_spec.lua
  if d.shape == "region" then goto next_description end
  -- a row loss with a target of the input's shape (multi-label: a float label per class or a
  -- list of classes per row) checks its bad input in its own spec
  -- (spec/multilabel_soft_margin_loss_spec.lua, spec/multilabel_margin_loss_spec.lua)
  if d.shape == "rows" and (d.target == "elementwise" or d.target == "index_list") then goto next_description end
  local fam = {
    name = d.name, class = d.criterion,
    kind = d.shape == "rows" and "class" or d.shape == "boxes" and "boxes" or "elementwise",
    min_classes = d.min_classes, state = d.state ~= nil, bad_options = out_of_range(d),
    input_range = d.input_range, target = d.target,
  }
  for _, o in ipairs(d.lua_options) do
    if o.name == "ignore_index" then fam.ignore = o.default end
  end
  for _, t in ipairs(d.tensors) do
    local key = t.kind == "class_vector" and "class_tensors" or t.kind == "sample_vector" and "box_tensors"
      or "elem_tensors"
    fam[key] = fam[key] or {}
    table.insert(fam[key], t.name)
    if t.required and t.kind == "broadcast" then
      fam.required_broadcast = fam.required_broadcast or {}
      table.insert(fam.required_broadcast, t.name)
    end
  end
  -- a rows loss's masking and one-class cases come from its facts alone: a loss without a
  -- line would skip them without a word
  if fam.kind == "class" and facts[d.name] == nil then
    error(string.format("spec/bad_input.lua: the rows loss %s has no line in `facts` (masking, one_class, …: see " ..
      "the table's comment); write %s = {} if none applies", d.name, d.name))
  end
  for k, v in pairs(facts[d.name] or {}) do
    if k == "bad_options" then
      for _, b in ipairs(v) do table.insert(fam.bad_options, b) end
    else
      fam[k] = v
    end
  end
  B.families[#B.families + 1] = fam
  ::next_description::
end
for _, op in ipairs {
  {
    name = "taylor_softmax", kind = "op",
    bad_options = {
      { { n = 3 }, "opts.n: 3" }, { { n = 0 }, "opts.n: 0" }, { { n = 66 }, "opts.n: 66" },
      { { dim = 3 }, "opts.dim" }, { { dim = -3 }, "opts.dim" }, { { dim = 0 }, "dim: 0 is not a dimension" },
    },
    one_class = function() return 1 end,
  },
  {
    name = "log_taylor_softmax", kind = "op",
    bad_options = {
      { { n = 5 }, "opts.n: 5" }, { { n = -4 }, "opts.n: -4" }, { { n = 100 }, "opts.n: 100" },
      { { dim = 5 }, "opts.dim" }, { { dim = 0 }, "dim: 0 is not a dimension" },
    },
    one_class = function() return 0 end,
  },
} do B.families[#B.families + 1] = op end
B.by_name = {}
for _, f in ipairs(B.families) do B.by_name[f.name] = f end

--- What does not apply to a row (printed by the specs, so a skipped entry is visible).
function B.not_applicable(fam)
  local out = {}
  if fam.kind ~= "class" then
    out[#out + 1] = "labels >= C / < 0, ignored rows, all-ignored, one class (no class-index target)"
  end
  if fam.kind == "elementwise" then
    out[#out + 1] = "target values outside [0, 1] (documented as not checked)"
  end
  if fam.kind == "op" then
    out[#out + 1] = "target/weight shapes and dtypes, reductions, fused pass (an op, not a loss)"
  end
  if fam.kind == "boxes" then
    out[#out + 1] = "inputs of other ranks (N×4 boxes only)"
  end
  if not fam.state then out[#out + 1] = "state aliasing (no saved state)" end
  if fam.kind == "class" and fam.ignore == nil then
    out[#out + 1] = "ignored rows, all ignored (no ignore_index)"
  end
  return out
end

---------------------------------------------------------------------------------------
-- Small tools
---------------------------------------------------------------------------------------

local function merge(...)
  local o = {}
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if t then for k, v in pairs(t) do o[k] = v end end
  end
  return o
end

local sample_sizes = H.sample_sizes
B.sample_sizes = sample_sizes

local function fail(msg) error(msg, 0) end

-- A C options struct of a registered loss, with its defaults.
local function copts_plain(spec)
  local c = ffi.new(spec.opts_ctype)
  ploss.C[spec.opts_init](c)
  return c
end

local poison = H.poison

local function nn_same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function is_nan(v) return v ~= v end
local function finite(v) return v == v and v > -math.huge and v < math.huge end

--- The raw bytes of a tensor (copied to a contiguous host tensor of the same dtype).
function B.bytes(t)
  local h = t:to("cpu", nil, true)
  if not h:is_contiguous() then h = h:contiguous() end
  return ffi.string(h:dl().data, h:numel() * h:element_size())
end

-- A DLTensor descriptor over raw memory (for aliasing cases the tensor API cannot make:
-- e.g. a float gradient over the bytes of an integer target).  Returns an object with a
-- :dl() method, as the registered C entry points expect.
local dtype_codes = { f32 = { 2, 32 }, f64 = { 2, 64 }, i64 = { 0, 64 }, i32 = { 0, 32 } }
local function raw_view(base, dtype, sizes, device_of)
  local d = ffi.new("DLTensor")
  local nd = #sizes
  local shape = ffi.new("int64_t[?]", math.max(nd, 1))
  for i = 1, nd do shape[i - 1] = sizes[i] end
  d.data = base:dl().data
  d.device = device_of:dl().device
  d.ndim = nd
  d.dtype.code, d.dtype.bits, d.dtype.lanes = dtype_codes[dtype][1], dtype_codes[dtype][2], 1
  d.shape = shape
  d.strides = nil
  d.byte_offset = 0
  return { dl = function() return d end, _keep = { base, shape } }
end

---------------------------------------------------------------------------------------
-- Valid argument sets
---------------------------------------------------------------------------------------

local function loss_dtype(dtype) return dtype == "f64" and "f64" or "f32" end

-- Tensor options of a row for C classes on device (class vectors) or for input sizes.
local function tensor_opts(fam, sizes, device, dtype, seed)
  local o = {}
  local C = sizes[2] or 1
  if fam.required_class_tensors then
    for k, fn in pairs(fam.required_class_tensors) do
      o[k] = ploss.tensor(fn(C), { dtype = "f32", device = device })
    end
  end
  -- a required broadcast tensor (TargetWeightedMSELoss's weight): one value per index of the
  -- input's last dim, broadcast over the others
  for _, k in ipairs(fam.required_broadcast or {}) do
    o[k] = ploss.rand(#sizes > 0 and { sizes[#sizes] } or {}, { dtype = "f32", low = 0.5, high = 2, seed = seed or 5 })
      :to(device)
  end
  return o
end

--- A valid (input, target, opts) set: input `sizes` in dtype on device (randn, seed), the
-- target of the row's kind (class indices in [0, C) never ignored; floats in [0, 1]).
function B.loss_args(fam, sizes, dtype, device, seed, opts)
  opts = opts or {}
  local r = fam.input_range
  local x = r and ploss.rand(sizes, { dtype = dtype, device = device, seed = seed, low = r[1], high = r[2] })
    or ploss.randn(sizes, { dtype = dtype, device = device, seed = seed, std = opts.std or 2 })
  local y
  if fam.kind == "class" then
    y = ploss.randint(0, math.max(sizes[2], 1), sample_sizes(sizes),
      { dtype = opts.target_dtype or "i64", device = device, seed = seed + 1 })
  elseif fam.kind == "elementwise" then
    y = ploss.rand(sizes, { dtype = dtype, device = device, seed = seed + 1 })
  elseif fam.kind == "boxes" then
    -- sizes[1] boxes (the other sizes are the class rows' and mean nothing here)
    x = B.random_boxes(sizes[1], seed, dtype, device)
    y = B.random_boxes(sizes[1], seed + 1, dtype, device)
  end
  return x, y, merge(fam.opts, tensor_opts(fam, sizes, device, dtype, seed))
end

-- Output buffers of the right shape for (fam, input, reduction).
local function out_buffers(fam, x, reduction)
  local sizes = x:size()
  local ls
  if reduction == "none" then
    ls = fam.kind == "elementwise" and sizes or sample_sizes(sizes)
  else
    ls = {}
  end
  return buffer(ls, { dtype = loss_dtype(x:dtype()), device = x:device() }),
    buffer(sizes, { dtype = x:dtype(), device = x:device() })
end

---------------------------------------------------------------------------------------
-- The three passes
---------------------------------------------------------------------------------------

local PASSES = { "forward", "backward", "fused" }

-- Run one pass of a loss row.  a = {x, y, opts, gout, loss, grad}; returns loss, grad
-- (either may be nil).  Errors propagate (raised at this file's lines: not inside ploss).
B.calls = {} -- library calls made through run_pass, per row name (for the report)
local function run_pass(fam, pass, a)
  B.calls[fam.name] = (B.calls[fam.name] or 0) + 1
  if fam.kind == "op" then
    local o = merge(a.opts)
    if pass == "forward" then
      o.out = a.loss
      return F[fam.name](a.x, o), nil
    elseif pass == "backward" then
      o.grad_input = a.grad
      return nil, F[fam.name .. "_backward"](a.x, a.gout or ploss.ones(a.x:size(), { dtype = a.x:dtype(), device = a.x:device() }), o)
    end
    return nil, nil
  end
  local o = merge(fam.opts, a.opts)
  if pass == "forward" then
    o.out = a.loss
    return F[fam.name](a.x, a.y, o), nil
  elseif pass == "backward" then
    o.grad_input = a.grad
    return nil, F[fam.name .. "_backward"](a.x, a.y, a.gout, o)
  else
    o.out, o.grad_input = a.loss, a.grad
    return F[fam.name .. "_fused"](a.x, a.y, o)
  end
end

local function passes_of(fam)
  if fam.kind == "op" then return { "forward", "backward" } end
  return PASSES
end

-- Expect every pass to raise an error with `frags` (a list), outputs untouched.
-- `make(pass)` returns the argument table (fresh buffers are made when absent).
local function expect_error_all(fam, make, frags, passes)
  for _, pass in ipairs(passes or passes_of(fam)) do
    local a = make(pass)
    if a then
      if not a.loss or not a.grad then
        local l, g = out_buffers(fam, a.x, (a.opts and a.opts.reduction) or "mean")
        a.loss, a.grad = a.loss or l, a.grad or g
      end
      local outs = {}
      if pass ~= "backward" then outs[#outs + 1] = a.loss end
      if pass ~= "forward" then outs[#outs + 1] = a.grad end
      if a.extra_outputs then for _, t in ipairs(a.extra_outputs) do outs[#outs + 1] = t end end
      local snap = poison(unpack(outs))
      local ok, err = pcall(run_pass, fam, pass, a)
      if ok then
        fail(string.format("%s %s: expected an error containing %s, got none", fam.name, pass,
          table.concat(frags, " + ")))
      end
      err = tostring(err)
      for _, f in ipairs(frags) do
        if not err:find(f, 1, true) then
          fail(string.format("%s %s: error message '%s' does not contain '%s'", fam.name, pass, err, f))
        end
      end
      local ok2, err2 = pcall(H.assert_untouched, snap)
      if not ok2 then fail(fam.name .. " " .. pass .. ": " .. tostring(err2)) end
    end
  end
end

-- Values of a pass: loss (number or flat list) and gradient (flat list).
local function values_of(loss, grad)
  local lv = loss
  if ploss.is_tensor(loss) then lv = loss:flat() end
  if type(lv) == "number" then lv = { lv } end
  return lv, grad and grad:flat() or nil
end

local function close(got, want, tol, what)
  H.assert_close(got, want, { rtol = tol, atol = tol * 1e-1, what = what })
end

local TOL = { f64 = 1e-12, f32 = 2e-5, bf16 = 2e-2, f16 = 2e-3 }

--- The dtypes of the value cases (NaN/Inf rows, all-ignored, one class, empty batch).
B.DTYPES = { "f32", "f64", "bf16", "f16" }

-- Compare every pass of `a` against `ref` (another argument table: contiguous copies).
-- When a pass raises, the error must be a LAYOUT error ("strides") and leave the outputs
-- untouched; otherwise the values must equal the reference's.
local function expect_same_all(fam, make_a, make_ref, what, allow_layout_error)
  for _, pass in ipairs(passes_of(fam)) do
    local r = make_ref(pass)
    local rl, rg = run_pass(fam, pass, r)
    local rlv, rgv = values_of(rl, rg)
    local a = make_a(pass)
    local outs = {}
    if a.loss then outs[#outs + 1] = a.loss end
    if a.grad then outs[#outs + 1] = a.grad end
    local snap = poison(unpack(outs))
    local ok, l, g = pcall(run_pass, fam, pass, a)
    local label = fam.name .. " " .. pass .. " " .. what
    if not ok then
      local err = tostring(l)
      if not (allow_layout_error and err:find("PLOSS_ERR_LAYOUT", 1, true)) then
        fail(label .. ": refused with '" .. err .. "' (expected the contiguous result or a LAYOUT error)")
      end
      local ok2, err2 = pcall(H.assert_untouched, snap)
      if not ok2 then fail(label .. ": " .. tostring(err2)) end
    else
      local lv, gv = values_of(l, g)
      local tol = TOL[a.x:dtype()]
      if rlv then close(lv, rlv, tol, label .. " loss") end
      if rgv then close(gv, rgv, tol, label .. " gradient") end
    end
  end
end

---------------------------------------------------------------------------------------
-- Case generators
---------------------------------------------------------------------------------------

local function add(cases, name, fn) cases[#cases + 1] = { name = name, fn = fn } end

-- The mixed-device case of a family: fn() when a second device exists, else a visible
-- note that it was skipped.
local function add_mixed_devices(cases, fam, other, fn)
  add(cases, "mixed devices" .. (other and "" or " (SKIPPED: needs a GPU; printed below)"), function()
    if not other then
      io.write(string.format("\n  [bad_input] %s: mixed-device cases skipped: no second device (no GPU)\n", fam.name))
      return
    end
    fn()
  end)
end

local function other_device(device)
  if device == "cpu" then
    return ploss.cuda_available() and "cuda" or nil
  end
  return "cpu"
end

-- An f32 input/target pair plus opts on device (class kind: N×C = 4×5 or 2×5×3×2).
local function base(fam, device, sizes, seed, dtype)
  local x, y, o = B.loss_args(fam, sizes, dtype or "f32", device, seed or 11)
  return x, y, o
end

-- the class-vector tensors of a row, for C classes on device
local function class_tensor_values(fam, name, C)
  if fam.required_class_tensors and fam.required_class_tensors[name] then
    return fam.required_class_tensors[name](C)
  end
  local v = {}
  for j = 1, C do v[j] = 0.25 + 0.5 * j / C end
  return v
end

local function gen_loss_cases(fam, device)
  local cases = {}
  local is_class = fam.kind == "class"
  local S2 = { 4, 5 }
  local S4 = { 2, 5, 3, 2 }
  local other = other_device(device)

  -- wrong rank ----------------------------------------------------------------------
  add(cases, "wrong rank", function()
    local x, y, o = base(fam, device, S2)
    if is_class then
      local x1 = ploss.randn({ 5 }, { device = device })
      expect_error_all(fam, function(pass)
        local l, g = out_buffers(fam, ploss.randn({ 1, 5 }, { device = device }), "mean")
        -- one sample of C classes (PyTorch's unbatched form) takes a 0-d index (the multi-class
        -- margin also a [1] one), not a batch's
        return { x = x1, y = ploss.zeros({ 2 }, { dtype = "i64", device = device }), opts = o, loss = l,
          grad = buffer({ 5 }, { device = device }) }
      end, { "PLOSS_ERR_SHAPE", "target: expected", "the input is one sample of 5 classes, PyTorch's unbatched form)" })
      -- target of the input's rank (a one-hot target where indices are expected)
      expect_error_all(fam, function()
        return { x = x, y = ploss.zeros(S2, { dtype = "i64", device = device }), opts = o }
      end, { "PLOSS_ERR_SHAPE", "target: expected shape [4]" })
      -- target with one rank less on a 4-d input
      local x4 = ploss.randn(S4, { device = device })
      expect_error_all(fam, function()
        return { x = x4, y = ploss.zeros({ 2, 3 }, { dtype = "i64", device = device }), opts = merge(o, tensor_opts(fam, S4, device)) }
      end, { "PLOSS_ERR_SHAPE", "target: expected shape [2, 3, 2]" })
    else
      expect_error_all(fam, function()
        return { x = x, y = ploss.rand({ 4, 5, 1 }, { device = device }), opts = o }
      end, { "PLOSS_ERR_SHAPE", "target" })
      expect_error_all(fam, function()
        return { x = x, y = ploss.rand({ 20 }, { device = device }), opts = o }
      end, { "PLOSS_ERR_SHAPE", "target" })
      -- rank 0 is an input like any other: its loss is the one-element loss
      local x0, y0 = ploss.full({}, 0.7, { device = device }), ploss.full({}, 0.25, { device = device })
      local x1, y1 = ploss.full({ 1 }, 0.7, { device = device }), ploss.full({ 1 }, 0.25, { device = device })
      for _, pass in ipairs(PASSES) do
        local l0, g0 = run_pass(fam, pass, { x = x0, y = y0, opts = tensor_opts(fam, {}, device) })
        local l1, g1 = run_pass(fam, pass, { x = x1, y = y1, opts = tensor_opts(fam, { 1 }, device) })
        local a0, b0 = values_of(l0, g0)
        local a1, b1 = values_of(l1, g1)
        if a0 then H.assert_equal(a0, a1, { what = fam.name .. " " .. pass .. " rank-0 loss" }) end
        if b0 then H.assert_equal(b0, b1, { what = fam.name .. " " .. pass .. " rank-0 gradient" }) end
      end
    end
  end)

  -- mismatched shapes -----------------------------------------------------------------
  add(cases, "mismatched shapes (target, tensor options, outputs, grad_output)", function()
    local x, y, o = base(fam, device, S2)
    if is_class then
      expect_error_all(fam, function()
        return { x = x, y = ploss.zeros({ 3 }, { dtype = "i64", device = device }), opts = o }
      end, { "PLOSS_ERR_SHAPE", "target: expected shape [4]" })
      local x4 = ploss.randn(S4, { device = device })
      expect_error_all(fam, function()
        return { x = x4, y = ploss.zeros({ 2, 3, 3 }, { dtype = "i64", device = device }), opts = merge(o, tensor_opts(fam, S4, device)) }
      end, { "PLOSS_ERR_SHAPE", "target: expected shape [2, 3, 2]" })
      -- zero classes
      expect_error_all(fam, function()
        local x0 = buffer({ 4, 0 }, { device = device })
        return { x = x0, y = ploss.zeros({ 4 }, { dtype = "i64", device = device }),
          opts = merge(o, tensor_opts(fam, { 4, 0 }, device)) }
      end, { "PLOSS_ERR_SHAPE", "input" })
      for _, name in ipairs(fam.class_tensors or {}) do
        for _, bad in ipairs { 4, 6 } do
          expect_error_all(fam, function()
            return { x = x, y = y, opts = merge(o, { [name] = ploss.ones({ bad }, { device = device }) }) }
          end, { "PLOSS_ERR_SHAPE", name .. ": expected shape [5]" })
        end
        expect_error_all(fam, function()
          return { x = x, y = y, opts = merge(o, { [name] = ploss.ones({ 1, 5 }, { device = device }) }) }
        end, { "PLOSS_ERR_SHAPE", name .. ": expected shape [5]" })
      end
    else
      expect_error_all(fam, function()
        return { x = x, y = ploss.rand({ 4, 6 }, { device = device }), opts = o }
      end, { "PLOSS_ERR_SHAPE", "target" })
      expect_error_all(fam, function()
        return { x = x, y = ploss.rand({ 5, 4 }, { device = device }), opts = o }
      end, { "PLOSS_ERR_SHAPE", "target" })
      for _, name in ipairs(fam.elem_tensors or {}) do
        for _, bad in ipairs { { 3 }, { 4, 3 }, { 2, 4, 5 }, { 4 } } do
          expect_error_all(fam, function()
            return { x = x, y = y, opts = merge(o, { [name] = ploss.ones(bad, { device = device }) }) }
          end, { "PLOSS_ERR_SHAPE", name })
        end
      end
    end
    -- outputs of the wrong shape
    for _, red in ipairs { "mean", "none" } do
      expect_error_all(fam, function(pass)
        local l, g = out_buffers(fam, x, red)
        if pass == "backward" then return nil end
        return { x = x, y = y, opts = merge(o, { reduction = red }), loss = buffer({ red == "none" and 3 or 2 }, { device = device }), grad = g }
      end, { "PLOSS_ERR_SHAPE", "opts.out: expected" })
    end
    expect_error_all(fam, function(pass)
      if pass == "forward" then return nil end
      local l = out_buffers(fam, x, "mean")
      return { x = x, y = y, opts = o, loss = l, grad = buffer({ 5, 4 }, { device = device }) }
    end, { "PLOSS_ERR_SHAPE", "grad_input: expected" })
    -- grad_output of the wrong shape ('none' backward)
    expect_error_all(fam, function(pass)
      if pass ~= "backward" then return nil end
      return { x = x, y = y, opts = merge(o, { reduction = "none" }), gout = ploss.ones({ 3 }, { device = device }) }
    end, { "PLOSS_ERR_SHAPE", "gradOutput: expected" })
  end)

  -- wrong dtypes ----------------------------------------------------------------------
  add(cases, "wrong dtypes (integer logits, float or byte labels, outputs, options)", function()
    local x, y, o = base(fam, device, S2)
    expect_error_all(fam, function()
      return { x = ploss.zeros(S2, { dtype = "i64", device = device }), y = y, opts = o,
        loss = out_buffers(fam, x, "mean"), grad = buffer(S2, { device = device }) }
    end, { "PLOSS_ERR_DTYPE", "input: expected" })
    expect_error_all(fam, function()
      return { x = ploss.zeros(S2, { dtype = "i32", device = device }), y = y, opts = o,
        loss = out_buffers(fam, x, "mean"), grad = buffer(S2, { device = device }) }
    end, { "PLOSS_ERR_DTYPE", "input: expected" })
    if is_class then
      -- float labels of the target's shape: class indices in the wrong dtype, said so
      local frag = { "PLOSS_ERR_DTYPE", "target: class indices must be i64 or i32, got f32", ":long()" }
      expect_error_all(fam, function()
        return { x = x, y = y:to(nil, "f32"), opts = o }
      end, frag)
      expect_error_all(fam, function()
        return { x = x, y = y:to(nil, "u8"), opts = o }
      end, { "PLOSS_ERR_DTYPE", "target: expected" })
      for _, name in ipairs(fam.class_tensors or {}) do
        expect_error_all(fam, function()
          return { x = x, y = y, opts = merge(o, { [name] = ploss.ones({ 5 }, { dtype = "i64", device = device }) }) }
        end, { "PLOSS_ERR_DTYPE", name })
      end
    else
      -- ±1 labels (the description's target 'signs') may be integers; every other
      -- elementwise target is a float one
      if fam.target ~= "signs" then
        expect_error_all(fam, function()
          return { x = x, y = ploss.zeros(S2, { dtype = "i64", device = device }), opts = o }
        end, { "PLOSS_ERR_DTYPE", "target" })
      end
      expect_error_all(fam, function()
        return { x = x, y = ploss.zeros(S2, { dtype = "u8", device = device }), opts = o }
      end, { "PLOSS_ERR_DTYPE", "target" })
      for _, name in ipairs(fam.elem_tensors or {}) do
        expect_error_all(fam, function()
          return { x = x, y = y, opts = merge(o, { [name] = ploss.ones(S2, { dtype = "i32", device = device }) }) }
        end, { "PLOSS_ERR_DTYPE", name })
      end
    end
    -- a loss buffer of the wrong dtype, a gradient of the wrong dtype, a grad_output of f16
    expect_error_all(fam, function(pass)
      if pass == "backward" then return nil end
      local _, g = out_buffers(fam, x, "mean")
      return { x = x, y = y, opts = o, loss = buffer({}, { dtype = "f64", device = device }), grad = g }
    end, { "PLOSS_ERR_DTYPE", "opts.out: expected f32, got f64" })
    expect_error_all(fam, function(pass)
      if pass == "forward" then return nil end
      return { x = x, y = y, opts = o, grad = buffer(S2, { dtype = "f64", device = device }) }
    end, { "PLOSS_ERR_DTYPE", "grad_input: expected f32, got f64" })
    expect_error_all(fam, function(pass)
      if pass ~= "backward" then return nil end
      return { x = x, y = y, opts = o, gout = ploss.ones({}, { dtype = "f16", device = device }) }
    end, { "PLOSS_ERR_DTYPE", "gradOutput: expected f32 or f64, got f16" })
  end)

  -- mixed devices ---------------------------------------------------------------------
  add_mixed_devices(cases, fam, other, function()
    local x, y, o = base(fam, device, S2)
    local function on(t) return t:to(other) end
    expect_error_all(fam, function() return { x = x, y = on(y), opts = o } end, { "PLOSS_ERR_DEVICE", "target: expected a tensor on" })
    expect_error_all(fam, function(pass)
      if pass == "backward" then return nil end
      local l, g = out_buffers(fam, x, "mean")
      return { x = x, y = y, opts = o, loss = on(l), grad = g }
    end, { "PLOSS_ERR_DEVICE", "opts.out: expected a tensor on" })
    expect_error_all(fam, function(pass)
      if pass == "forward" then return nil end
      local l, g = out_buffers(fam, x, "mean")
      return { x = x, y = y, opts = o, loss = l, grad = on(g) }
    end, { "PLOSS_ERR_DEVICE", "grad_input: expected a tensor on" })
    expect_error_all(fam, function(pass)
      if pass ~= "backward" then return nil end
      return { x = x, y = y, opts = merge(o, { reduction = "none" }), gout = ploss.ones(fam.kind == "elementwise" and S2 or { 4 }, { device = other }) }
    end, { "PLOSS_ERR_DEVICE", "gradOutput: expected a tensor on" })
    local tnames = {}
    for _, n in ipairs(fam.class_tensors or {}) do tnames[#tnames + 1] = { n, { 5 } } end
    for _, n in ipairs(fam.elem_tensors or {}) do tnames[#tnames + 1] = { n, S2 } end
    for _, nt in ipairs(tnames) do
      expect_error_all(fam, function()
        return { x = x, y = y, opts = merge(o, { [nt[1]] = ploss.ones(nt[2], { device = other }) }) }
      end, { "PLOSS_ERR_DEVICE", nt[1] .. ": expected a tensor on" })
    end
  end)

  -- non-contiguous and zero-stride inputs ---------------------------------------------
  add(cases, "non-contiguous and zero-stride inputs: the contiguous result or a LAYOUT error", function()
    for _, red in ipairs { "mean", "none" } do
      local x, y, o = base(fam, device, S2, 21)
      o = merge(o, { reduction = red }, fam.keep_all)
      local x4, y4, o4 = base(fam, device, S4, 23)
      o4 = merge(o4, { reduction = red }, fam.keep_all)
      local function cont(t) return t and t:contiguous() or nil end
      local function ref_of(xx, yy, oo, gout)
        return function()
          local r = { x = cont(xx), y = cont(yy), opts = merge(oo), gout = cont(gout) }
          for k, v in pairs(oo) do if ploss.is_tensor(v) then r.opts[k] = v:contiguous() end end
          return r
        end
      end
      local function check(xx, yy, oo, what, gout)
        expect_same_all(fam, function() return { x = xx, y = yy, opts = oo, gout = gout } end,
          ref_of(xx, yy, oo, gout), what .. " (" .. red .. ")", true)
      end
      -- class-major storage of an N×C input
      check(x:t():contiguous():t(), y, o, "transposed input")
      -- every other row of a bigger tensor
      local big = ploss.randn({ 4, 2, 5 }, { device = device, seed = 31 })
      check(big:select(2, 1), y, o, "row-strided input")
      -- zero strides: one row repeated N times, one value repeated along the class axis
      check(ploss.randn({ 1, 5 }, { device = device, seed = 32 }):expand(4, 5), y, o, "input repeated along N (stride 0)")
      check(ploss.randn({ 4, 1 }, { device = device, seed = 33 }):expand(4, 5), y, o, "input constant along C (stride 0)")
      -- channels-last N×C×H×W and a permuted 4-d input
      check(x4:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3), y4, o4, "channels-last input")
      check(x4:permute(3, 4, 1, 2):contiguous():permute(3, 4, 1, 2), y4, o4, "spatial-major input")
      if is_class then
        local ybig = ploss.randint(0, 5, { 4, 3 }, { device = device, seed = 34 })
        check(x, ybig:select(2, 2), o, "strided target")
        check(x, ploss.tensor({ 3 }, { dtype = "i64", device = device }):expand(4), o, "target repeated (stride 0)")
        local y4big = ploss.randint(0, 5, { 2, 3, 2, 2 }, { device = device, seed = 35 })
        check(x4, y4big:select(4, 1), o4, "strided 3-d target")
        for _, name in ipairs(fam.class_tensors or {}) do
          local v = class_tensor_values(fam, name, 5)
          local wbig = ploss.tensor({ v, v }, { dtype = "f32", device = device }):t() -- 5×2, stride 2
          check(x, y, merge(o, { [name] = wbig:select(2, 1) }), name .. " with stride 2")
          check(x, y, merge(o, { [name] = ploss.tensor({ v[1] }, { dtype = "f32", device = device }):expand(5) }),
            name .. " with stride 0")
        end
      else
        check(x, y:t():contiguous():t(), o, "transposed target")
        check(x, ploss.rand({ 1, 5 }, { device = device, seed = 36 }):expand(4, 5), o, "target repeated (stride 0)")
        for _, name in ipairs(fam.elem_tensors or {}) do
          check(x, y, merge(o, { [name] = ploss.rand({ 1, 5 }, { device = device, seed = 37 }):expand(4, 5) }), name .. " with stride 0")
          check(x, y, merge(o, { [name] = ploss.rand({ 5, 4 }, { device = device, seed = 38 }):t() }), name .. " transposed")
        end
      end
      if red == "none" then
        local gs = fam.kind == "elementwise" and { 1, 1 } or { 1 }
        local gsz = fam.kind == "elementwise" and S2 or { 4 }
        local g1 = ploss.full(gs, 0.5, { device = device })
        check(x, y, o, "grad_output with stride 0", g1:expand(gsz))
      end
    end
  end)

  add(cases, "strided outputs are written correctly; overlapping outputs are refused", function()
    local x, y, o = base(fam, device, S2, 41)
    for _, red in ipairs { "mean", "none" } do
      local oo = merge(o, { reduction = red })
      for _, pass in ipairs(passes_of(fam)) do
        local rl, rg = run_pass(fam, pass, { x = x, y = y, opts = oo })
        -- gradient stored class-major (transposed), 'none' loss with stride 2 / transposed
        local gt = buffer({ 5, 4 }, { device = device }):t()
        local lt = out_buffers(fam, x, red)
        if red == "none" then
          lt = fam.kind == "elementwise" and buffer({ 5, 4 }, { device = device }):t()
            or buffer({ 4, 2 }, { device = device }):select(2, 1)
        end
        local a = { x = x, y = y, opts = oo, loss = lt, grad = gt }
        local l, g = run_pass(fam, pass, a)
        local rlv, rgv = values_of(rl, rg)
        local lv, gv = values_of(l, g)
        if rlv then close(lv, rlv, TOL.f32, fam.name .. " " .. pass .. " strided outputs loss") end
        if rgv then close(gv, rgv, TOL.f32, fam.name .. " " .. pass .. " strided gradient") end
      end
      -- a gradient whose elements share memory (stride 0) is refused
      expect_error_all(fam, function(pass)
        if pass == "forward" then return nil end
        local l = out_buffers(fam, x, red)
        local g = ploss.zeros({ 1, 5 }, { device = device }):expand(4, 5)
        return { x = x, y = y, opts = oo, loss = l, grad = g }
      end, { "PLOSS_ERR_LAYOUT", "grad_input" })
      if red == "none" then
        expect_error_all(fam, function(pass)
          if pass == "backward" then return nil end
          local _, g = out_buffers(fam, x, red)
          local l = fam.kind == "elementwise" and ploss.zeros({ 1, 5 }, { device = device }):expand(4, 5)
            or ploss.zeros({ 1 }, { device = device }):expand(4)
          return { x = x, y = y, opts = oo, loss = l, grad = g }
        end, { "PLOSS_ERR_LAYOUT", "loss" })
      end
    end
  end)

  -- labels out of range ---------------------------------------------------------------
  if is_class then
    add(cases, "labels >= C or < 0 that are not ignore_index", function()
      local neg = fam.ignore == -1 and -2 or -1
      -- variants: i64 / i32 labels of an N×C input, a 4-d target, a wide row (C = 3000: the
      -- block-per-row kernels on CUDA)
      for _, tdt in ipairs { "i64", "i32", "4-d", "wide" } do
        local Cn = tdt == "wide" and 3000 or 5
        for _, bad in ipairs { Cn, neg, Cn + 995, -1000000, 2 ^ 40 } do
          if not (tdt == "i32" and math.abs(bad) >= 2 ^ 31) then
            local x, _, o, y, frag
            if tdt == "wide" then
              x, _, o = base(fam, device, { 4, Cn }, 53)
              y = ploss.tensor({ 0, 1, bad, 2 }, { dtype = "i64", device = device })
              frag = string.format("target: class index %d at sample (n = 2, s = 0) is outside [0, %d)", bad, Cn)
            elseif tdt == "4-d" then
              -- N×C×3×2 input: the bad label at sample n = 1, s = 4 (0-based)
              x, _, o = base(fam, device, S4, 52)
              local yv = {}
              for k = 1, 12 do yv[k] = (k * 7) % 5 end
              yv[11] = bad
              y = ploss.tensor(yv, { dtype = "i64", device = device }):view(2, 3, 2)
              frag = string.format("target: class index %d at sample (n = 1, s = 4) is outside [0, 5)", bad)
            else
              x, _, o = base(fam, device, S2, 51)
              y = ploss.tensor({ 0, 1, bad, 2 }, { dtype = tdt, device = device })
              frag = string.format("target: class index %d at sample (n = 2, s = 0) is outside [0, 5)", bad)
            end
            for _, red in ipairs { "none", "sum" } do
              local oo = merge(o, { reduction = red })
              if device == "cpu" then
                expect_error_all(fam, function() return { x = x, y = y, opts = oo } end,
                  { "PLOSS_ERR_INVALID_LABEL", frag })
              else
                -- CUDA: the call returns; the next synchronising call reports the label
                for _, pass in ipairs(PASSES) do
                  local l, g = out_buffers(fam, x, red)
                  local ok, err = pcall(run_pass, fam, pass, { x = x, y = y, opts = oo, loss = l, grad = g })
                  if not ok then fail(fam.name .. " " .. pass .. ": the call itself failed: " .. tostring(err)) end
                  local ok2, err2 = pcall(ploss.synchronize, device)
                  if ok2 then fail(fam.name .. " " .. pass .. ": label " .. bad .. ": no error at the next synchronisation") end
                  if not tostring(err2):find("PLOSS_ERR_INVALID_LABEL", 1, true) then
                    fail(fam.name .. " " .. pass .. ": expected PLOSS_ERR_INVALID_LABEL, got " .. tostring(err2))
                  end
                  ploss.synchronize(device) -- the slot was cleared
                end
                -- a reduced loss read at once reports it from the call
                local ok3, err3 = pcall(F[fam.name], x, y, merge(fam.opts, o))
                if ok3 or not tostring(err3):find("PLOSS_ERR_INVALID_LABEL", 1, true) then
                  fail(fam.name .. ": reduced forward: expected PLOSS_ERR_INVALID_LABEL, got " .. tostring(err3))
                end
                ploss.synchronize(device)
              end
              -- the context works afterwards
              local good = ploss.zeros(y:size(), { dtype = y:dtype(), device = device })
              local v = F[fam.name](x, good, merge(fam.opts, o, { reduction = "sum" }))
              if not finite(v) then fail(fam.name .. ": a valid call after the label error gave " .. tostring(v)) end
            end
          end
        end
      end
    end)
  end

  -- NaN / Inf in valid rows -----------------------------------------------------------
  add(cases, "NaN / Inf in a valid row: the loss is NaN (Inf: not finite), other rows unchanged", function()
    for _, bad in ipairs { 0 / 0, math.huge } do for _, dtype in ipairs(B.DTYPES) do
      local x, y, o = base(fam, device, S2, 61, dtype)
      local xb = x:clone()
      if fam.kind == "elementwise" then
        xb:view(-1)[7] = bad -- element (2, 2)
      else
        xb:select(1, 2):narrow(1, 1, 2):fill(bad) -- row 2, classes 1..2
      end
      local ok = merge(o, fam.keep_all)
      -- the bad values reach the loss (a loss of the target's entry only: when it is one of them)
      local hit = fam.kind == "elementwise" or not fam.target_entry_only or y:to("cpu"):flat()[2] < 2
      -- mean: not finite (NaN for a NaN logit)
      local m = F[fam.name](xb, y, merge(fam.opts, ok, { reduction = "mean" }))
      if not hit then
        if not finite(m) then fail(fam.name .. ": a non-finite value off the target: mean loss " .. tostring(m)) end
      else
        if bad ~= bad and not is_nan(m) then fail(fam.name .. ": NaN logit: mean loss " .. tostring(m) .. ", expected NaN") end
        if bad == bad and finite(m) and not fam.finite_at_inf then fail(fam.name .. ": +Inf logit: mean loss " .. tostring(m) .. ", expected NaN or Inf (a loss that stays finite there: finite_at_inf = true in its facts)") end
      end
      -- none: the bad row is not finite, the other rows equal the clean rows' values
      local lc = F[fam.name](x, y, merge(fam.opts, ok, { reduction = "none" })):flat()
      local lb = F[fam.name](xb, y, merge(fam.opts, ok, { reduction = "none" })):flat()
      local bad_index = fam.kind == "elementwise" and 7 or 2
      for i = 1, #lc do
        if i == bad_index and not hit then
          close({ lb[i] }, { lc[i] }, TOL[dtype], fam.name .. " " .. dtype .. " loss of a row with a non-finite value off its target")
        elseif i == bad_index then
          if bad ~= bad and not is_nan(lb[i]) then fail(fam.name .. ": NaN row loss " .. tostring(lb[i])) end
          if bad == bad and finite(lb[i]) and not fam.finite_at_inf then fail(fam.name .. ": Inf row loss " .. tostring(lb[i]) .. " is finite") end
        elseif not fam.rows_coupled then
          close({ lb[i] }, { lc[i] }, TOL[dtype], fam.name .. " " .. dtype .. " loss of clean row " .. i)
        end
      end
      -- the fused gradient of the other rows is unchanged (sum reduction)
      local _, gc = F[fam.name .. "_fused"](x, y, merge(fam.opts, ok, { reduction = "sum" }))
      local _, gb = F[fam.name .. "_fused"](xb, y, merge(fam.opts, ok, { reduction = "sum" }))
      local gcv, gbv = gc:flat(), gb:flat()
      for i = 1, #gcv do
        local row = math.floor((i - 1) / 5) + 1
        local in_bad = fam.kind == "elementwise" and i == 7 or (fam.kind ~= "elementwise" and row == 2)
        if not in_bad then close({ gbv[i] }, { gcv[i] }, TOL[dtype], fam.name .. " " .. dtype .. " gradient element " .. i .. " of a clean row") end
      end
    end end
  end)

  if is_class and fam.masking then
    add(cases, "-inf logits at non-target classes (class masking): " .. (fam.masking == "exact"
        and "the loss without those classes" or "finite loss and gradient"), function()
      for _, dtype in ipairs { "f32", "f64", "bf16" } do
        local x, _, o = base(fam, device, S2, 131, dtype)
        local y = ploss.randint(0, 4, { 4 }, { device = device, seed = 132 })
        local xm = x:clone()
        xm:narrow(2, 5, 1):fill(-math.huge)
        local xd = x:narrow(2, 1, 4):contiguous()
        local od = merge(o)
        for k, v in pairs(o) do if ploss.is_tensor(v) then od[k] = v:narrow(1, 1, 4):contiguous() end end
        for _, red in ipairs { "none", "mean" } do
          local oo, ood = merge(o, { reduction = red }, fam.keep_all), merge(od, { reduction = red }, fam.keep_all)
          local lm, gm = F[fam.name .. "_fused"](xm, y, merge(fam.opts, oo))
          local lmv, gmv = values_of(lm, gm)
          local label = fam.name .. " " .. dtype .. " " .. red .. " masked class"
          for i, v in ipairs(lmv) do if not finite(v) then fail(label .. ": loss " .. i .. " is " .. v) end end
          for i, v in ipairs(gmv) do if not finite(v) then fail(label .. ": gradient element " .. i .. " is " .. v) end end
          if fam.masking == "exact" then
            local ld, gd = F[fam.name .. "_fused"](xd, y, merge(fam.opts, ood))
            local ldv, gdv = values_of(ld, gd)
            close(lmv, ldv, TOL[dtype], label .. " loss vs the 4-class input")
            local g4 = gm:narrow(2, 1, 4):flat()
            close(g4, gdv, TOL[dtype], label .. " gradient vs the 4-class input")
            for i, v in ipairs(gm:narrow(2, 5, 1):flat()) do
              if v ~= 0 then fail(label .. ": gradient of the masked class, row " .. i .. ", is " .. v) end
            end
          end
        end
      end
    end)
  end

  if is_class and fam.ignore ~= nil then -- a loss without ignore_index (multi-class margin) skips these
    -- NaN / Inf in ignored rows -----------------------------------------------------
    add(cases, "NaN / Inf in an ignored row does not leak into the loss or the gradient", function()
      for _, bad in ipairs { 0 / 0, math.huge, -math.huge } do
        for _, sd in ipairs { { S2, "f32" }, { { 2, 5, 2 }, "f32" }, { S2, "bf16" }, { { 2, 5, 2 }, "f16" },
            { { 3, 1000 }, "f32" }, { { 3, 1000 }, "bf16" }, { { 2, 3000 }, "f64" }, { { 2, 40, 3 }, "f32" } } do
          local sizes, dtype = sd[1], sd[2]
          local x, _, o = base(fam, device, sizes, 71, dtype)
          local ns = sample_sizes(sizes)
          local yv = ploss.randint(0, 5, ns, { seed = 72 }):view(-1):flat()
          yv[2] = fam.ignore
          local y = ploss.tensor(yv, { dtype = "i64", device = device, size = ns }):view(ns)
          -- sample 2 (row-major over the samples): row 1 position 2 of the 3-d input, row 2 of N×C
          local xc = x:clone()
          local xb = x:clone()
          local function sample_slice(t)
            if #sizes == 2 then return t:select(1, 2) end
            return t:select(1, 1):select(2, 2) -- (n=1, :, s=2)
          end
          sample_slice(xc):fill(0)
          sample_slice(xb):fill(bad)
          for _, red in ipairs { "mean", "sum", "none" } do
            for _, pass in ipairs(PASSES) do
              local oo = merge(o, { reduction = red })
              local rl, rg = run_pass(fam, pass, { x = xc, y = y, opts = oo })
              local l, g = run_pass(fam, pass, { x = xb, y = y, opts = oo })
              local rlv, rgv = values_of(rl, rg)
              local lv, gv = values_of(l, g)
              local label = string.format("%s %s %s %s %s, %s in an ignored row", fam.name, table.concat(sizes, "x"), dtype,
                pass, red, tostring(bad))
              if rlv then H.assert_equal(lv, rlv, { what = label .. " loss" }) end
              if rgv then
                H.assert_equal(gv, rgv, { what = label .. " gradient" })
                local gs = sample_slice(g):flat()
                for _, v in ipairs(gs) do if v ~= 0 then fail(label .. ": gradient of the ignored row is " .. v) end end
              end
            end
          end
        end
      end
    end)

  end

  if is_class then
    -- all ignored -------------------------------------------------------------------
    if fam.ignore ~= nil then add(cases, "every sample ignored: mean NaN, sum 0, none zeros, gradient exactly zero", function()
      for _, sizes in ipairs { S2, S4, { 3, 1000 } } do for _, dtype in ipairs(B.DTYPES) do
        local x, _, o = base(fam, device, sizes, 81, dtype)
        local y = ploss.full(sample_sizes(sizes), fam.ignore, { dtype = "i64", device = device })
        for _, red in ipairs { "mean", "sum", "none" } do
          for _, pass in ipairs(PASSES) do
            local l, g = run_pass(fam, pass, { x = x, y = y, opts = merge(o, { reduction = red }) })
            local lv, gv = values_of(l, g)
            local label = fam.name .. " " .. table.concat(sizes, "x") .. " " .. dtype .. " " .. pass .. " " .. red .. " all ignored"
            if lv then
              if red == "mean" then
                if not is_nan(lv[1]) then fail(label .. ": loss " .. tostring(lv[1]) .. ", expected NaN") end
              else
                for _, v in ipairs(lv) do if v ~= 0 then fail(label .. ": loss " .. v .. ", expected 0") end end
              end
            end
            if gv then for i, v in ipairs(gv) do if v ~= 0 then fail(label .. ": gradient element " .. i .. " is " .. v) end end end
          end
        end
      end end
    end) end

    -- one class ---------------------------------------------------------------------
    add(cases, fam.min_classes > 1 and "one class is refused" or "one class: the loss of a single-class softmax", function()
      for _, dtype in ipairs(B.DTYPES) do
      local x = ploss.randn({ 4, 1 }, { device = device, seed = 91, dtype = dtype })
      local xs = x:to("cpu", "f64"):flat()
      local y = ploss.zeros({ 4 }, { dtype = "i64", device = device })
      local o = merge(tensor_opts(fam, { 4, 1 }, device), fam.keep_all)
      if fam.min_classes > 1 then
        expect_error_all(fam, function() return { x = x, y = y, opts = o } end, { "at least 2 classes" })
        return
      end
      for _, pass in ipairs(PASSES) do
        local l, g = run_pass(fam, pass, { x = x, y = y, opts = merge(o, { reduction = "none" }) })
        local lv, gv = values_of(l, g)
        if lv then
          for i, v in ipairs(lv) do
            if fam.one_class then close({ v }, { fam.one_class(xs[i]) }, 1e-6, fam.name .. " " .. dtype .. " " .. pass .. " one-class loss " .. i)
            elseif not finite(v) then fail(fam.name .. " one-class loss " .. v) end
          end
        end
        local want = fam.one_class_gradient or 0
        if gv then for i, v in ipairs(gv) do if not finite(v) or math.abs(v - want) > 1e-6 then
          fail(fam.name .. " " .. dtype .. " " .. pass .. ": one-class gradient element " .. i .. " is " .. v .. ", expected " .. want) end end end
      end
      end
      if fam.name == "cross_entropy" then
        local x = ploss.randn({ 4, 1 }, { device = device, seed = 92 })
        local y = ploss.zeros({ 4 }, { dtype = "i64", device = device })
        expect_error_all(fam, function()
          return { x = x, y = y, opts = { label_smoothing = 0.1, smoothing_convention = "uniform_others" } }
        end, { "PLOSS_ERR_INVALID_ARGUMENT", "undefined for C = 1" })
      end
    end)
  end

  -- empty batch -----------------------------------------------------------------------
  add(cases, "empty batch: mean NaN, sum 0, none and gradient empty", function()
    for _, sizes in ipairs { { 0, 5 }, { 2, 5, 0, 3 }, { 0, 5, 3 }, { 0, 1000 } } do for _, dtype in ipairs(B.DTYPES) do
      local x = buffer(sizes, { device = device, dtype = dtype })
      local y
      if is_class then y = buffer(sample_sizes(sizes), { dtype = "i64", device = device })
      else y = buffer(sizes, { device = device }) end
      local o = tensor_opts(fam, sizes, device)
      for _, red in ipairs { "mean", "sum", "none" } do
        for _, pass in ipairs(PASSES) do
          local l, g = run_pass(fam, pass, { x = x, y = y, opts = merge(o, { reduction = red }) })
          local lv, gv = values_of(l, g)
          local label = fam.name .. " " .. dtype .. " " .. pass .. " " .. red .. " " .. table.concat(sizes, "x")
          if lv then
            if red == "mean" and not is_nan(lv[1]) then fail(label .. ": loss " .. tostring(lv[1]) .. ", expected NaN") end
            if red == "sum" and lv[1] ~= 0 then fail(label .. ": loss " .. tostring(lv[1]) .. ", expected 0") end
            if red == "none" and #lv ~= 0 then fail(label .. ": " .. #lv .. " loss elements") end
          end
          if g and not nn_same(g:size(), sizes) then fail(label .. ": gradient of sizes " .. table.concat(g:size(), "x")) end
        end
      end
    end end
  end)

  -- options out of range --------------------------------------------------------------
  add(cases, "options out of range", function()
    local x, y, o = base(fam, device, S2)
    for _, bo in ipairs(fam.bad_options) do
      local opts = merge(o)
      for k, v in pairs(bo[1]) do
        if k == "lb_proportion" then
          if v == "negative" then opts[k] = ploss.tensor({ 1, -1, 1, 1, 1 }, { dtype = "f32" })
          elseif v == "nan" then opts[k] = ploss.tensor({ 1, 0 / 0, 1, 1, 1 }, { dtype = "f32" })
          elseif v == "zeros" then opts[k] = ploss.zeros({ 5 })
          else opts[k] = nil end
          if opts[k] and device ~= "cpu" then opts[k] = opts[k]:to(device) end
        else
          opts[k] = v
        end
      end
      if not (device ~= "cpu" and bo[1].lb_proportion and bo[1].lb_proportion ~= "missing") then
        -- C-side option checks ("opts.<field>: …") are INVALID_ARGUMENT; the Lua layer's own
        -- checks (enum names, integers, priors given as a Lua-visible tensor) have no status
        local frags = { bo[2] }
        if bo[2]:find("^opts%.") then frags[2] = "PLOSS_ERR_INVALID_ARGUMENT" end
        expect_error_all(fam, function() return { x = x, y = y, opts = opts } end, frags)
      end
    end
    -- common to every loss: an unknown reduction, a non-finite scale (fused)
    expect_error_all(fam, function() return { x = x, y = y, opts = merge(o, { reduction = "avg" }) } end,
      { "reduction: 'avg' is not one of" })
    for _, s in ipairs { math.huge, 0 / 0 } do
      expect_error_all(fam, function(pass)
        if pass ~= "fused" then return nil end
        return { x = x, y = y, opts = merge(o, { scale = s }) }
      end, { "PLOSS_ERR_INVALID_ARGUMENT", "opts.scale" })
    end
  end)

  -- negative strides (DLPack allows them; the tensor API cannot make them) --------------
  if fam.class then
    add(cases, "negative strides (C entry points): the flipped contiguous result or a LAYOUT error", function()
      local spec = ploss[fam.class]._spec
      local x, y, o = base(fam, device, S2, 121)
      local ro = merge(fam.opts, o)
      local N, Cn = 4, 5
      local xv, yv = x:flat(), y:flat()
      -- flip = 'rows' (stride −C along N) or 'classes' (stride −1 along C)
      for _, flip in ipairs { "rows", "classes" } do
        local rx, ry = {}, {}
        for i = 1, N do
          for j = 1, Cn do
            local si = flip == "rows" and (N + 1 - i) or i
            local sj = flip == "classes" and (Cn + 1 - j) or j
            rx[(i - 1) * Cn + j] = xv[(si - 1) * Cn + sj]
          end
        end
        -- the flipped view reads x; its contiguous equivalent is rx
        local xr = ploss.tensor(rx, { dtype = "f32", device = device, size = { N, Cn } }):view(N, Cn)
        local yr, ycall
        if fam.kind == "class" then
          for i = 1, N do
            local yi = yv[flip == "rows" and (N + 1 - i) or i]
            if flip == "classes" then yi = Cn - 1 - yi end
            ry[i] = yi
          end
          yr = ploss.tensor(ry, { dtype = "i64", device = device })
          -- class flip: the target of the flipped view is yr (labels count from the end)
          ycall = yr
        else
          yr = y -- elementwise: flip the target the same way through a flipped view of it
        end
        local d = ffi.new("DLTensor")
        local shape, strides = ffi.new("int64_t[2]", N, Cn), ffi.new("int64_t[2]")
        d.data = x:dl().data
        d.device = x:dl().device
        d.ndim = 2
        d.dtype = x:dl().dtype
        d.shape = shape
        d.strides = strides
        if flip == "rows" then
          strides[0], strides[1] = -Cn, 1
          d.byte_offset = (N - 1) * Cn * 4
        else
          strides[0], strides[1] = Cn, -1
          d.byte_offset = (Cn - 1) * 4
        end
        local xneg = { dl = function() return d end, context = function() return x:context() end }
        if fam.kind == "elementwise" then
          local dy = ffi.new("DLTensor")
          dy.data, dy.device, dy.ndim, dy.dtype = y:dl().data, y:dl().device, 2, y:dl().dtype
          dy.shape, dy.strides, dy.byte_offset = shape, strides, d.byte_offset
          ycall = { dl = function() return dy end }
          local ryv = {}
          local yvv = y:flat()
          for i = 1, N do for j = 1, Cn do
            local si = flip == "rows" and (N + 1 - i) or i
            local sj = flip == "classes" and (Cn + 1 - j) or j
            ryv[(i - 1) * Cn + j] = yvv[(si - 1) * Cn + sj]
          end end
          yr = ploss.tensor(ryv, { dtype = "f32", device = device, size = { N, Cn } }):view(N, Cn)
        end
        local copts = copts_plain(spec)
        copts.reduction = ploss.C.PLOSS_REDUCTION_NONE
        local lref, gref = out_buffers(fam, x, "none")
        local st0 = spec.fused(ro, x:context(), xr, yr, copts, lref, gref)
        if st0 ~= 0 then fail(fam.name .. ": reference call failed: " .. ffi.string(ploss.C.ploss_last_error())) end
        local l, g = out_buffers(fam, x, "none")
        local snap = poison(l, g)
        local st = spec.fused(ro, x:context(), xneg, ycall, copts, l, g)
        local label = fam.name .. " fused, input with negative strides along " .. flip
        if st ~= 0 then
          local msg = ffi.string(ploss.C.ploss_last_error())
          if st ~= ploss.C.PLOSS_ERR_LAYOUT then
            fail(string.format("%s: status %d '%s' (expected the flipped result or LAYOUT)", label, tonumber(st), msg))
          end
          H.assert_untouched(snap)
        else
          close(l:flat(), lref:flat(), TOL.f32, label .. " loss")
          close(g:flat(), gref:flat(), TOL.f32, label .. " gradient")
        end
      end
    end)
  end

  -- the saved state (C level): wrong dtype, wrong shape, in forward and backward ----------
  if fam.state then
    add(cases, "saved state of the wrong dtype or shape (C entry points)", function()
      local spec = ploss[fam.class]._spec
      local x, y, o = base(fam, device, S2, 111)
      local ro = merge(fam.opts, o)
      local ssz = spec.state_sizes and spec.state_sizes(x) or { 4 }
      local function call(pass, state)
        local copts = copts_plain(spec)
        local l, g = out_buffers(fam, x, "mean")
        local snap = poison(l, g)
        local st
        if pass == "forward" then
          st = spec.forward(ro, x:context(), x, y, copts, l, state)
        else
          local gl = ploss.ones({}, { device = device })
          st = spec.backward(ro, x:context(), x, y, copts, state, gl, g)
        end
        local msg = ffi.string(ploss.C.ploss_last_error())
        H.assert_untouched(snap)
        return tonumber(st), msg
      end
      local bad_shape = {}
      for i, v in ipairs(ssz) do bad_shape[i] = v end
      bad_shape[1] = bad_shape[1] + 1
      for _, pass in ipairs { "forward", "backward" } do
        local st, msg = call(pass, buffer(ssz, { dtype = "f16", device = device }))
        if st ~= ploss.C.PLOSS_ERR_DTYPE then
          fail(string.format("%s %s: an f16 state: status %d '%s', expected DTYPE", fam.name, pass, st, msg))
        end
        st, msg = call(pass, buffer(bad_shape, { device = device }))
        if st ~= ploss.C.PLOSS_ERR_SHAPE then
          fail(string.format("%s %s: a state of shape [%s]: status %d '%s', expected SHAPE", fam.name, pass,
            table.concat(bad_shape, ", "), st, msg))
        end
      end
      -- a state with elements sharing memory cannot be written
      local ones = {}
      for i = 1, #ssz do ones[i] = 1 end
      local st, msg = call("forward", ploss.zeros(ones, { device = device }):expand(ssz))
      if st == 0 then fail(fam.name .. ": a stride-0 state was accepted by forward (" .. msg .. ")") end
    end)
  end

  -- aliasing --------------------------------------------------------------------------
  add(cases, "in-place requests and outputs that alias inputs", function()
    local x, y, o = base(fam, device, S2, 101)
    -- fused: grad_input = input without opts.inplace
    expect_error_all(fam, function(pass)
      if pass == "forward" then return nil end
      local xx = x:clone()
      return { x = xx, y = y, opts = o, grad = xx }
    end, { "PLOSS_ERR_ALIAS", "grad_input" })
    -- fused: opts.inplace = true writes the gradient over the input, equal to the out-of-place one
    do
      local _, gref = F[fam.name .. "_fused"](x, y, merge(fam.opts, o))
      local xx = x:clone()
      local _, g = F[fam.name .. "_fused"](xx, y, merge(fam.opts, o, { inplace = true }))
      if g ~= xx then fail(fam.name .. ": inplace fused did not return the input") end
      close(xx:flat(), gref:flat(), TOL.f32, fam.name .. " in-place gradient")
    end
    -- in place over non-contiguous inputs (class-major N×C, channels-last N×C×H×W)
    do
      local x4, y4, o4 = base(fam, device, S4, 103)
      for _, xy in ipairs { { x:t():contiguous():t(), y, o, "transposed" },
                            { x4:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3), y4, o4, "channels-last" } } do
        local xx, yy, oo = xy[1], xy[2], xy[3]
        local _, gref = F[fam.name .. "_fused"](xx, yy, merge(fam.opts, oo))
        local want = gref:flat()
        local _, g = F[fam.name .. "_fused"](xx, yy, merge(fam.opts, oo, { inplace = true }))
        close(g:flat(), want, TOL.f32, fam.name .. " in-place gradient over a " .. xy[4] .. " input")
      end
    end
    -- grad_input overlapping the input by one row (a shifted view of the same buffer)
    expect_error_all(fam, function(pass)
      if pass == "forward" then return nil end
      local big = ploss.randn({ 5, 5 }, { device = device, seed = 104 })
      return { x = big:narrow(1, 1, 4), y = y, opts = o, grad = big:narrow(1, 2, 4) }
    end, { "PLOSS_ERR_ALIAS", "grad_input" })
    -- C level: opts.inplace = 1 with a grad_input that is not the input (same storage, other view)
    do
      local spec = ploss[fam.class]._spec
      local copts = copts_plain(spec)
      copts.inplace = 1
      local ro = merge(fam.opts, o)
      local xx = ploss.randn({ 4, 5 }, { device = device, seed = 102 })
      local g = buffer({ 4, 5 }, { device = device })
      local l = out_buffers(fam, xx, "mean")
      local snap = poison(l, g)
      local st = spec.fused(ro, xx:context(), xx, y, copts, l, g)
      local msg = ffi.string(ploss.C.ploss_last_error())
      if st ~= ploss.C.PLOSS_ERR_ALIAS or not msg:find("opts.inplace", 1, true) then
        fail(string.format("%s: inplace = 1 with a separate grad_input: status %d '%s', expected ALIAS naming opts.inplace", fam.name, tonumber(st), msg))
      end
      H.assert_untouched(snap)
      -- … and with a grad_input that overlaps the input without being it
      local big = ploss.randn({ 5, 5 }, { device = device, seed = 105 })
      local xs, gs = big:narrow(1, 1, 4), big:narrow(1, 2, 4)
      local before = big:flat()
      local st3 = spec.fused(ro, xs:context(), xs, y, copts, l, gs)
      local msg3 = ffi.string(ploss.C.ploss_last_error())
      if st3 ~= ploss.C.PLOSS_ERR_ALIAS then
        fail(string.format("%s: inplace = 1, grad_input shifted by one row over the input: status %d '%s', expected ALIAS", fam.name, tonumber(st3), msg3))
      end
      H.assert_equal(big, before, { what = fam.name .. " input after a refused shifted in-place call" })
      -- grad_input over the bytes of the target (a float view of the same memory)
      local yy
      if fam.kind == "class" then
        local ybig = ploss.zeros({ 20 }, { dtype = "i64", device = device })
        yy = ybig:narrow(1, 1, 4)
        local graw = raw_view(ybig, "f32", { 4, 5 }, xx)
        local st2 = spec.fused(ro, xx:context(), xx, yy, copts_plain(spec), out_buffers(fam, xx, "mean"), graw)
        local msg2 = ffi.string(ploss.C.ploss_last_error())
        if st2 ~= ploss.C.PLOSS_ERR_ALIAS or not msg2:find("target", 1, true) then
          fail(string.format("%s: grad_input over the target's bytes: status %d '%s', expected ALIAS naming target", fam.name, tonumber(st2), msg2))
        end
      end
    end
    if fam.kind == "elementwise" then
      expect_error_all(fam, function(pass)
        if pass == "forward" then return nil end
        local yy = y:clone()
        return { x = x, y = yy, opts = o, grad = yy }
      end, { "PLOSS_ERR_ALIAS", "grad_input" })
      expect_error_all(fam, function(pass)
        if pass == "backward" then return nil end
        local yy = y:clone()
        return { x = x, y = yy, opts = merge(o, { reduction = "none" }), loss = yy }
      end, { "PLOSS_ERR_ALIAS", "loss" })
    end
    -- loss ('none') over the input's memory
    expect_error_all(fam, function(pass)
      if pass == "backward" then return nil end
      local xx = x:clone()
      local l = fam.kind == "elementwise" and xx or xx:select(2, 1)
      local _, g = out_buffers(fam, x, "none")
      return { x = xx, y = y, opts = merge(o, { reduction = "none" }), loss = l, grad = g }
    end, { "PLOSS_ERR_ALIAS", "loss" })
    -- loss over the gradient (fused)
    expect_error_all(fam, function(pass)
      if pass ~= "fused" then return nil end
      local _, g = out_buffers(fam, x, "mean")
      return { x = x, y = y, opts = o, loss = g:view(-1):narrow(1, 3, 1), grad = g }
    end, { "PLOSS_ERR_ALIAS" })
    -- grad_input over grad_output ('none' backward)
    expect_error_all(fam, function(pass)
      if pass ~= "backward" then return nil end
      local _, g = out_buffers(fam, x, "none")
      local gout = fam.kind == "elementwise" and g or g:select(2, 1)
      return { x = x, y = y, opts = merge(o, { reduction = "none" }), gout = gout, grad = g }
    end, { "PLOSS_ERR_ALIAS", "grad_input" })
    -- grad_input over a tensor option
    for _, name in ipairs(fam.class_tensors or {}) do
      expect_error_all(fam, function(pass)
        if pass == "forward" then return nil end
        local _, g = out_buffers(fam, x, "mean")
        local w = g:select(1, 1)
        w:copy(ploss.tensor(class_tensor_values(fam, name, 5), { dtype = "f32", device = device }))
        return { x = x, y = y, opts = merge(o, { [name] = w }), grad = g, extra_outputs = {} }
      end, { "PLOSS_ERR_ALIAS" })
    end
    for _, name in ipairs(fam.elem_tensors or {}) do
      expect_error_all(fam, function(pass)
        if pass == "forward" then return nil end
        local _, g = out_buffers(fam, x, "mean")
        return { x = x, y = y, opts = merge(o, { [name] = g }), grad = g }
      end, { "PLOSS_ERR_ALIAS" })
    end
    -- the saved state (forward) over the input / over the loss
    if fam.state then
      local spec = ploss[fam.class]._spec
      local ro = merge(fam.opts, o)
      for _, which in ipairs { "input", "loss" } do
        local xx = x:clone()
        local l = buffer({ 4 }, { device = device })
        local ssz = spec.state_sizes and spec.state_sizes(xx) or { 4 }
        local state
        if which == "input" then
          state = ssz[2] and xx:narrow(2, 1, ssz[2]) or xx:select(2, 1)
        else
          local big = buffer({ 4, 4 }, { device = device })
          l = big:select(2, 1)
          -- (a 4×3 state of large-margin: only the input case)
          state = not ssz[2] and big:select(2, 2) or nil
        end
        if state then
          local copts = copts_plain(spec)
          copts.reduction = ploss.C.PLOSS_REDUCTION_NONE
          local snap = poison(l)
          local st = spec.forward(ro, xx:context(), xx, y, copts, l, state)
          local msg = ffi.string(ploss.C.ploss_last_error())
          if st ~= ploss.C.PLOSS_ERR_ALIAS then
            fail(string.format("%s: state over the %s: status %d '%s', expected ALIAS", fam.name, which, tonumber(st), msg))
          end
          H.assert_untouched(snap)
        end
      end
    end
  end)

  return cases
end

---------------------------------------------------------------------------------------
-- Ops without a target (Taylor softmax, log-Taylor softmax)
---------------------------------------------------------------------------------------

local function gen_op_cases(fam, device)
  local cases = {}
  local fwd, bwd = F[fam.name], F[fam.name .. "_backward"]
  local other = other_device(device)
  local function errs(fn, frags, outs)
    local snap = poison(unpack(outs or {}))
    local ok, err = pcall(fn)
    if ok then fail(fam.name .. ": expected an error containing " .. table.concat(frags, " + ")) end
    for _, f in ipairs(frags) do
      if not tostring(err):find(f, 1, true) then fail(fam.name .. ": '" .. tostring(err) .. "' does not contain '" .. f .. "'") end
    end
    H.assert_untouched(snap)
  end
  local function both(x, opts, frags, out, gout, grad)
    out = out or buffer(x:size(), { device = device, dtype = x:is_floating_point() and x:dtype() or "f32" })
    errs(function() fwd(x, merge(opts, { out = out })) end, frags, { out })
    gout = gout or ploss.ones(x:size(), { dtype = x:is_floating_point() and x:dtype() or "f32", device = device })
    grad = grad or buffer(x:size(), { dtype = x:is_floating_point() and x:dtype() or "f32", device = device })
    errs(function() bwd(x, gout, merge(opts, { grad_input = grad })) end, frags, { grad })
  end

  add(cases, "wrong rank, shapes and dtypes", function()
    local x = ploss.randn({ 4, 5 }, { device = device })
    both(ploss.randn({}, { device = device }), {}, { "PLOSS_ERR_SHAPE", "input: expected rank >= 1" })
    local o54 = buffer({ 5, 4 }, { device = device })
    errs(function() fwd(x, { out = o54 }) end, { "PLOSS_ERR_SHAPE", "opts.out: " }, { o54 })
    errs(function() bwd(x, ploss.ones({ 4, 6 }, { device = device }), {}) end, { "PLOSS_ERR_SHAPE", "grad_output" })
    errs(function() bwd(x, ploss.ones({ 4, 5 }, { device = device }), { grad_input = buffer({ 20 }, { device = device }) }) end,
      { "PLOSS_ERR_SHAPE", "grad_input" })
    both(ploss.zeros({ 4, 5 }, { dtype = "i64", device = device }), {}, { "PLOSS_ERR_DTYPE", "input" })
    errs(function() fwd(x, { out = buffer({ 4, 5 }, { dtype = "f64", device = device }) }) end, { "PLOSS_ERR_DTYPE", "opts.out: " })
    errs(function() bwd(x, ploss.ones({ 4, 5 }, { dtype = "f64", device = device }), {}) end, { "PLOSS_ERR_DTYPE", "grad_output" })
  end)

  add_mixed_devices(cases, fam, other, function()
    local x = ploss.randn({ 4, 5 }, { device = device })
    errs(function() fwd(x, { out = buffer({ 4, 5 }, { device = other }) }) end, { "PLOSS_ERR_DEVICE" })
    errs(function() bwd(x, ploss.ones({ 4, 5 }, { device = other }), {}) end, { "PLOSS_ERR_DEVICE", "grad_output" })
    errs(function() bwd(x, ploss.ones({ 4, 5 }, { device = device }), { grad_input = buffer({ 4, 5 }, { device = other }) }) end,
      { "PLOSS_ERR_DEVICE", "grad_input" })
  end)

  add(cases, "non-contiguous and zero-stride inputs: the contiguous result or a LAYOUT error", function()
    local x = ploss.randn({ 4, 5 }, { device = device, seed = 201 })
    local x3 = ploss.randn({ 2, 5, 3 }, { device = device, seed = 202 })
    local gout = ploss.randn({ 4, 5 }, { device = device, seed = 203 })
    local function check(xx, opts, what, go)
      go = go or ploss.randn(xx:size(), { device = device, seed = 208 })
      local rf = fwd(xx:contiguous(), opts):flat()
      local rb = bwd(xx:contiguous(), go:contiguous(), opts):flat()
      for _, p in ipairs { "forward", "backward" } do
        local ok, r = pcall(function()
          if p == "forward" then return fwd(xx, opts) end
          return bwd(xx, go, opts)
        end)
        if not ok then
          if not tostring(r):find("PLOSS_ERR_LAYOUT", 1, true) then fail(fam.name .. " " .. p .. " " .. what .. ": " .. tostring(r)) end
        else
          close(r:flat(), p == "forward" and rf or rb, TOL.f32, fam.name .. " " .. p .. " " .. what)
        end
      end
    end
    check(x:t():contiguous():t(), {}, "transposed input")
    check(ploss.randn({ 4, 2, 5 }, { device = device, seed = 204 }):select(2, 1), {}, "row-strided input")
    check(ploss.randn({ 1, 5 }, { device = device, seed = 205 }):expand(4, 5), {}, "input with stride 0 along N")
    check(ploss.randn({ 4, 1 }, { device = device, seed = 206 }):expand(4, 5), {}, "input with stride 0 along dim")
    check(x, {}, "grad_output with stride 0", ploss.full({ 1, 1 }, 0.5, { device = device }):expand(4, 5))
    check(x, {}, "transposed grad_output", gout:t():contiguous():t())
    check(x3:permute(1, 3, 2):contiguous():permute(1, 3, 2), {}, "channels-last 3-d input")
    check(x3:permute(1, 3, 2):contiguous():permute(1, 3, 2), { dim = 3 }, "channels-last 3-d input, dim 3")
    -- strided outputs are written right; overlapping outputs refused
    local rf = fwd(x, {}):flat()
    local ot = buffer({ 5, 4 }, { device = device }):t()
    close(fwd(x, { out = ot }):flat(), rf, TOL.f32, fam.name .. " transposed output")
    errs(function() fwd(x, { out = ploss.zeros({ 1, 5 }, { device = device }):expand(4, 5) }) end, { "PLOSS_ERR_LAYOUT", "opts.out: " })
    errs(function() bwd(x, gout, { grad_input = ploss.zeros({ 1, 5 }, { device = device }):expand(4, 5) }) end,
      { "PLOSS_ERR_LAYOUT", "grad_input" })
  end)

  add(cases, "NaN / Inf in a row: that row is not finite, the other rows unchanged", function()
    for _, bad in ipairs { 0 / 0, math.huge } do
      local x = ploss.randn({ 4, 5 }, { device = device, seed = 211 })
      local xb = x:clone()
      xb:select(1, 2):narrow(1, 2, 1):fill(bad)
      local c, b = fwd(x):flat(), fwd(xb):flat()
      local row_bad = false
      for i = 1, #c do
        local row = math.floor((i - 1) / 5) + 1
        if row == 2 then row_bad = row_bad or not finite(b[i])
        else close({ b[i] }, { c[i] }, TOL.f32, fam.name .. " element " .. i .. " of a clean row") end
      end
      if not row_bad then fail(fam.name .. ": a " .. tostring(bad) .. " in row 2 gave a finite row") end
      if bad ~= bad then
        for i = 6, 10 do if not is_nan(b[i]) then fail(fam.name .. ": NaN row element " .. i .. " is " .. b[i]) end end
      end
    end
  end)

  add(cases, "empty input, one element along dim", function()
    for _, sizes in ipairs { { 0, 5 }, { 4, 0 }, { 2, 5, 0 } } do
      local x = buffer(sizes, { device = device })
      local o = fwd(x)
      if not nn_same(o:size(), sizes) then fail(fam.name .. ": empty output sizes") end
      local g = bwd(x, buffer(sizes, { device = device }))
      if not nn_same(g:size(), sizes) then fail(fam.name .. ": empty gradient sizes") end
    end
    local x = ploss.randn({ 4, 1 }, { device = device, seed = 221 })
    for i, v in ipairs(fwd(x):flat()) do close({ v }, { fam.one_class() }, 1e-6, fam.name .. " one-element row " .. i) end
    for i, v in ipairs(bwd(x, ploss.ones({ 4, 1 }, { device = device })):flat()) do
      if math.abs(v) > 1e-6 then fail(fam.name .. ": one-element gradient " .. i .. " is " .. v) end
    end
  end)

  add(cases, "options out of range", function()
    local x = ploss.randn({ 4, 5 }, { device = device })
    for _, bo in ipairs(fam.bad_options) do
      both(x, bo[1], bo[2]:find("^opts%.") and { bo[2], "PLOSS_ERR_INVALID_ARGUMENT" } or { bo[2] })
    end
    errs(function() fwd(x, { n = 2.5 }) end, { "n: expected an integer" })
  end)

  add(cases, "outputs that alias inputs", function()
    local x = ploss.randn({ 4, 5 }, { device = device, seed = 231 })
    local xx = x:clone()
    errs(function() fwd(xx, { out = xx }) end, { "PLOSS_ERR_ALIAS" }, { xx })
    local go = ploss.randn({ 4, 5 }, { device = device })
    errs(function() bwd(x, go, { grad_input = go }) end, { "PLOSS_ERR_ALIAS" }, { go })
    local xx2 = x:clone()
    errs(function() bwd(xx2, go, { grad_input = xx2 }) end, { "PLOSS_ERR_ALIAS" }, { xx2 })
  end)
  return cases
end

---------------------------------------------------------------------------------------
-- one_hot (an op with a class-index target)
---------------------------------------------------------------------------------------

local function gen_one_hot_cases(device)
  local cases = {}
  local function errs(fn, frags, outs)
    local snap = poison(unpack(outs or {}))
    local ok, err = pcall(fn)
    if ok then fail("one_hot: expected an error containing " .. table.concat(frags, " + ")) end
    for _, f in ipairs(frags) do
      if not tostring(err):find(f, 1, true) then fail("one_hot: '" .. tostring(err) .. "' does not contain '" .. f .. "'") end
    end
    if device == "cpu" or not tostring(err):find("INVALID_LABEL", 1, true) then H.assert_untouched(snap) end
  end
  add(cases, "shapes, dtypes, labels, options, layouts, aliasing", function()
    local y = ploss.tensor({ 0, 2, 1, 4 }, { dtype = "i64", device = device })
    local out = buffer({ 4, 5 }, { device = device })
    errs(function() ploss.one_hot(y, nil, { out = buffer({ 5, 4 }, { device = device }) }) end, { "PLOSS_ERR_SHAPE" })
    errs(function() ploss.one_hot(ploss.zeros({}, { dtype = "i64", device = device }), 5) end, { "PLOSS_ERR_SHAPE" })
    errs(function() ploss.one_hot(y:to(nil, "f32"), nil, { out = out }) end, { "PLOSS_ERR_DTYPE", "target" }, { out })
    errs(function() ploss.one_hot(y, nil, { out = buffer({ 4, 5 }, { dtype = "i64", device = device }), label_smoothing = 0.1 }) end,
      { "PLOSS_ERR_DTYPE" })
    errs(function() ploss.one_hot(y, nil, { out = out, label_smoothing = -0.5 }) end, { "opts.label_smoothing" }, { out })
    errs(function() ploss.one_hot(y, nil, { out = out, label_smoothing = 2 }) end, { "opts.label_smoothing" }, { out })
    errs(function() ploss.one_hot(ploss.zeros({ 4 }, { dtype = "i64", device = device }), 1,
      { label_smoothing = 0.1, smoothing_convention = "uniform_others" }) end, { "PLOSS_ERR_INVALID_ARGUMENT" })
    for _, bad in ipairs { 5, -2, 1000 } do
      local yb = ploss.tensor({ 0, bad, 1, 4 }, { dtype = "i64", device = device })
      if device == "cpu" then
        errs(function() ploss.one_hot(yb, nil, { out = out }) end, { "PLOSS_ERR_INVALID_LABEL", "class index " .. bad }, { out })
      else
        ploss.one_hot(yb, nil, { out = out })
        errs(function() ploss.synchronize(device) end, { "PLOSS_ERR_INVALID_LABEL" })
        ploss.synchronize(device)
      end
    end
    -- ignore_index -1 (default) gives a zero row
    local z = ploss.one_hot(ploss.tensor({ -1, 3 }, { dtype = "i64", device = device }), 5):flat()
    H.assert_equal(z, { 0, 0, 0, 0, 0, 0, 0, 0, 1, 0 })
    -- empty, strided target / output, zero-stride output refused, aliasing refused
    H.assert_equal(ploss.one_hot(buffer({ 0 }, { dtype = "i64", device = device }), 5):size(), { 0, 5 })
    local ref = ploss.one_hot(y, 5):flat()
    local ybig = ploss.tensor({ { 0, 9 }, { 2, 9 }, { 1, 9 }, { 4, 9 } }, { dtype = "i64", device = device })
    H.assert_equal(ploss.one_hot(ybig:select(2, 1), 5):flat(), ref)
    H.assert_equal(ploss.one_hot(y, nil, { out = buffer({ 5, 4 }, { device = device }):t() }):flat(), ref)
    errs(function() ploss.one_hot(y, nil, { out = ploss.zeros({ 1, 5 }, { device = device }):expand(4, 5) }) end,
      { "PLOSS_ERR_LAYOUT", "out" })
    local oi = ploss.zeros({ 4, 5 }, { dtype = "i64", device = device })
    local yi = oi:select(2, 1)
    errs(function() ploss.one_hot(yi, nil, { out = oi }) end, { "PLOSS_ERR_ALIAS" })
    if other_device(device) then
      errs(function() ploss.one_hot(y, nil, { out = buffer({ 4, 5 }, { device = other_device(device) }) }) end, { "PLOSS_ERR_DEVICE" })
    else
      io.write("\n  [bad_input] one_hot: mixed-device case skipped: no second device (no GPU)\n")
    end
  end)
  return cases
end

--- `n` valid xyxy boxes (N×4) in dtype on device: corners in [0, 10), sizes in [0.5, 5.5), so
-- that pairs of two such sets overlap, touch or lie apart.
function B.random_boxes(n, seed, dtype, device)
  local u = ploss.rand({ n, 4 }, { dtype = "f64", seed = seed }):flat()
  local v = {}
  for i = 0, n - 1 do
    local x1, y1 = 10 * u[4 * i + 1], 10 * u[4 * i + 2]
    v[i + 1] = { x1, y1, x1 + 0.5 + 5 * u[4 * i + 3], y1 + 0.5 + 5 * u[4 * i + 4] }
  end
  if n == 0 then return ploss.empty({ 0, 4 }, { dtype = dtype, device = device }) end
  return ploss.tensor(v, { dtype = dtype, device = device })
end

-- The cases of a box loss row: N×4 input and target, per-box weight and ignore.
local function gen_box_cases(fam, device)
  local cases = {}
  local other = other_device(device)
  local N = 6
  local function args(seed, dtype) return base(fam, device, { N, 4 }, seed, dtype) end

  add(cases, "wrong shapes (input, target, weight, ignore, outputs, grad_output)", function()
    local x, y, o = args(11)
    for _, bad in ipairs { { N }, { N, 5 }, { 2, N, 4 }, { N, 4, 1 } } do
      expect_error_all(fam, function()
        return { x = ploss.rand(bad, { device = device }), y = y, opts = o, loss = buffer({}, { device = device }),
          grad = buffer(bad, { device = device }) }
      end, { "PLOSS_ERR_SHAPE", "input: expected N×4 boxes" })
      expect_error_all(fam, function() return { x = x, y = ploss.rand(bad, { device = device }), opts = o } end,
        { "PLOSS_ERR_SHAPE", "target: expected N×4 boxes" })
    end
    expect_error_all(fam, function() return { x = x, y = B.random_boxes(N - 1, 3, "f32", device), opts = o } end,
      { "PLOSS_ERR_SHAPE", "target: expected the input's shape" })
    for _, name in ipairs(fam.box_tensors) do
      for _, bad in ipairs { { N - 1 }, { N, 1 }, { 1 }, {} } do
        expect_error_all(fam, function()
          return { x = x, y = y, opts = merge(o, { [name] = ploss.ones(bad, { device = device }) }) }
        end, { "PLOSS_ERR_SHAPE", name .. ": expected shape [" .. N .. "]" })
      end
    end
    for _, red in ipairs { "mean", "none" } do
      expect_error_all(fam, function(pass)
        if pass == "backward" then return nil end
        return { x = x, y = y, opts = merge(o, { reduction = red }), loss = buffer({ red == "none" and N + 1 or 2 }, { device = device }),
          grad = buffer({ N, 4 }, { device = device }) }
      end, { "PLOSS_ERR_SHAPE", "opts.out: expected" })
    end
    expect_error_all(fam, function(pass)
      if pass == "forward" then return nil end
      return { x = x, y = y, opts = o, loss = buffer({}, { device = device }), grad = buffer({ 4, N }, { device = device }) }
    end, { "PLOSS_ERR_SHAPE", "grad_input: expected" })
    expect_error_all(fam, function(pass)
      if pass ~= "backward" then return nil end
      return { x = x, y = y, opts = merge(o, { reduction = "none" }), gout = ploss.ones({ N, 4 }, { device = device }) }
    end, { "PLOSS_ERR_SHAPE", "gradOutput: expected shape [" .. N .. "]" })
  end)

  add(cases, "wrong dtypes (integer boxes, weight, outputs, grad_output)", function()
    local x, y, o = args(12)
    for _, dt in ipairs { "i64", "i32", "u8" } do
      expect_error_all(fam, function()
        return { x = ploss.zeros({ N, 4 }, { dtype = dt, device = device }), y = y, opts = o,
          loss = buffer({}, { device = device }), grad = buffer({ N, 4 }, { device = device }) }
      end, { "PLOSS_ERR_DTYPE", "input: expected boxes of dtype f32, f16, bf16 or f64, got " .. dt })
      expect_error_all(fam, function() return { x = x, y = ploss.zeros({ N, 4 }, { dtype = dt, device = device }), opts = o } end,
        { "PLOSS_ERR_DTYPE", "target: expected boxes of dtype" })
    end
    expect_error_all(fam, function()
      return { x = x, y = y, opts = merge(o, { weight = ploss.ones({ N }, { dtype = "i32", device = device }) }) }
    end, { "PLOSS_ERR_DTYPE", "weight: expected a float dtype, got i32" })
    expect_error_all(fam, function(pass)
      if pass == "backward" then return nil end
      return { x = x, y = y, opts = o, loss = buffer({}, { dtype = "f64", device = device }), grad = buffer({ N, 4 }, { device = device }) }
    end, { "PLOSS_ERR_DTYPE", "opts.out: expected f32, got f64" })
    expect_error_all(fam, function(pass)
      if pass == "forward" then return nil end
      return { x = x, y = y, opts = o, grad = buffer({ N, 4 }, { dtype = "f64", device = device }) }
    end, { "PLOSS_ERR_DTYPE", "grad_input: expected f32, got f64" })
    expect_error_all(fam, function(pass)
      if pass ~= "backward" then return nil end
      return { x = x, y = y, opts = o, gout = ploss.ones({}, { dtype = "f16", device = device }) }
    end, { "PLOSS_ERR_DTYPE", "gradOutput: expected f32 or f64, got f16" })
    -- the target in another float dtype and an ignore mask of any dtype are accepted
    for _, dt in ipairs { "f64", "bf16" } do
      expect_same_all(fam, function() return { x = x, y = y:to(nil, dt), opts = o } end,
        function() return { x = x, y = y:to(nil, dt):to(nil, "f32"), opts = o } end, "target of dtype " .. dt)
    end
    for _, dt in ipairs { "u8", "i64", "f32" } do
      local ign = ploss.tensor({ 0, 1, 0, 0, 1, 0 }, { dtype = dt, device = device })
      expect_same_all(fam, function() return { x = x, y = y, opts = merge(o, { ignore = ign }) } end,
        function() return { x = x, y = y, opts = merge(o, { ignore = ign:to(nil, "u8") }) } end, "ignore of dtype " .. dt)
    end
  end)

  add_mixed_devices(cases, fam, other, function()
    local x, y, o = args(13)
    local function on(t) return t:to(other) end
    expect_error_all(fam, function() return { x = x, y = on(y), opts = o } end, { "PLOSS_ERR_DEVICE", "target: expected a tensor on" })
    for _, name in ipairs(fam.box_tensors) do
      expect_error_all(fam, function()
        return { x = x, y = y, opts = merge(o, { [name] = ploss.zeros({ N }, { device = other }) }) }
      end, { "PLOSS_ERR_DEVICE", name .. ": expected a tensor on" })
    end
    expect_error_all(fam, function(pass)
      if pass == "backward" then return nil end
      return { x = x, y = y, opts = o, loss = on(buffer({}, { device = device })), grad = buffer({ N, 4 }, { device = device }) }
    end, { "PLOSS_ERR_DEVICE", "opts.out: expected a tensor on" })
    expect_error_all(fam, function(pass)
      if pass == "forward" then return nil end
      return { x = x, y = y, opts = o, loss = buffer({}, { device = device }), grad = on(buffer({ N, 4 }, { device = device })) }
    end, { "PLOSS_ERR_DEVICE", "grad_input: expected a tensor on" })
  end)

  add(cases, "strided and zero-stride tensors: the contiguous result", function()
    for _, red in ipairs { "mean", "none", "sum" } do
      local x, y, o = args(21)
      o = merge(o, { reduction = red, weight = ploss.rand({ N }, { device = device, seed = 22 }),
        ignore = ploss.tensor({ 0, 0, 1, 0, 0, 0 }, { dtype = "u8", device = device }) })
      local function cont(oo)
        local r = merge(oo)
        for k, v in pairs(oo) do if ploss.is_tensor(v) then r[k] = v:contiguous() end end
        return r
      end
      local function check(xx, yy, oo, what, gout)
        expect_same_all(fam, function() return { x = xx, y = yy, opts = oo, gout = gout } end,
          function() return { x = xx:contiguous(), y = yy:contiguous(), opts = cont(oo), gout = gout and gout:contiguous() } end,
          what .. " (" .. red .. ")")
      end
      check(x:t():contiguous():t(), y, o, "coordinate-major input")
      check(x, y:t():contiguous():t(), o, "coordinate-major target")
      local big = ploss.zeros({ N, 2, 4 }, { device = device })
      big:select(2, 1):copy(x)
      check(big:select(2, 1), y, o, "every other box of a bigger tensor")
      check(B.random_boxes(1, 23, "f32", device):expand(N, 4), y, o, "one box repeated (stride 0)")
      check(x, y, merge(o, { weight = ploss.full({ 1 }, 0.75, { device = device }):expand(N) }), "weight with stride 0")
      local wbig = ploss.rand({ N, 3 }, { device = device, seed = 24 })
      check(x, y, merge(o, { weight = wbig:select(2, 2) }), "weight with stride 3")
      if red == "none" then
        check(x, y, o, "grad_output with stride 0", ploss.full({ 1 }, 0.5, { device = device }):expand(N))
      end
      -- strided outputs
      for _, pass in ipairs(PASSES) do
        local rl, rg = run_pass(fam, pass, { x = x, y = y, opts = o })
        local lt = red == "none" and buffer({ N, 2 }, { device = device }):select(2, 2) or buffer({ 1 }, { device = device })
        local gt = buffer({ 4, N }, { device = device }):t()
        local l, g = run_pass(fam, pass, { x = x, y = y, opts = o, loss = lt, grad = gt })
        local rlv, rgv = values_of(rl, rg)
        local lv, gv = values_of(l, g)
        if rlv then close(lv, rlv, TOL.f32, fam.name .. " " .. pass .. " strided loss") end
        if rgv then close(gv, rgv, TOL.f32, fam.name .. " " .. pass .. " strided gradient") end
      end
    end
  end)

  add(cases, "negative strides (C entry points): boxes walked from the last one give the reversed result", function()
    local spec = ploss[fam.class]._spec
    local x, y, o = args(35)
    -- a view of x's storage with stride −4 along N: box i is x's box N − 1 − i
    local shape, strides = ffi.new("int64_t[2]", N, 4), ffi.new("int64_t[2]", -4, 1)
    local d = ffi.new("DLTensor")
    d.data, d.device, d.ndim, d.dtype = x:dl().data, x:dl().device, 2, x:dl().dtype
    d.shape, d.strides, d.byte_offset = shape, strides, (N - 1) * 4 * 4
    local xneg = { dl = function() return d end, context = function() return x:context() end }
    local xv, rev = x:totable(), {}
    for i = 1, N do rev[i] = xv[N + 1 - i] end
    local xr = ploss.tensor(rev, { dtype = "f32", device = device })
    for _, red in ipairs { "none", "sum" } do
      local copts = spec.options(merge(o, { reduction = red }))
      local lref, gref = out_buffers(fam, x, red)
      local l, g = out_buffers(fam, x, red)
      if spec.fused(o, x:context(), xr, y, copts, lref, gref) ~= 0 or spec.fused(o, x:context(), xneg, y, copts, l, g) ~= 0 then
        fail(fam.name .. ": " .. ffi.string(ploss.C.ploss_last_error()))
      end
      H.assert_equal(l, lref, { what = fam.name .. " " .. red .. " loss of the reversed view" })
      H.assert_equal(g, gref, { what = fam.name .. " " .. red .. " gradient of the reversed view" })
    end
  end)

  add(cases, "aliasing outputs are refused; the in-place fused gradient is the out-of-place one", function()
    local x, y, o = args(31)
    expect_error_all(fam, function(pass)
      if pass == "forward" then return nil end
      local yy = y:clone()
      return { x = x, y = yy, opts = o, loss = buffer({}, { device = device }), grad = yy }
    end, { "PLOSS_ERR_ALIAS", "grad_input" })
    expect_error_all(fam, function(pass)
      if pass == "backward" then return nil end
      local yy = y:clone() -- the poisoned loss writes over it
      return { x = x, y = yy, opts = merge(o, { reduction = "none" }), loss = yy:select(2, 1),
        grad = buffer({ N, 4 }, { device = device }) }
    end, { "PLOSS_ERR_ALIAS", "loss" })
    expect_error_all(fam, function(pass)
      if pass == "forward" then return nil end
      return { x = x, y = y, opts = o, loss = buffer({}, { device = device }),
        grad = ploss.zeros({ 1, 4 }, { device = device }):expand(N, 4) }
    end, { "PLOSS_ERR_LAYOUT", "grad_input" })
    local l, g = F[fam.name .. "_fused"](x, y, o)
    local xi = x:clone()
    local li, gi = F[fam.name .. "_fused"](xi, y, merge(o, { inplace = true }))
    assert(gi == xi, fam.name .. ": the in-place gradient is not the input tensor")
    H.assert_equal(li, l, { what = fam.name .. " in-place loss" })
    H.assert_equal(gi, g, { what = fam.name .. " in-place gradient" })
  end)

  add(cases, "boxes with x2 < x1 or y2 < y1: INVALID_BOX naming the box (CUDA: at the next synchronisation)", function()
    local x, y, o = args(41)
    local cases_ = {
      { "input", 3, { 5, 1, 4, 2 }, {} },
      { "input", 0, { 1, 5, 2, 4 }, {} },
      { "target", 5, { 5, 1, 4, 2 }, {} },
      { "input", 2, { 1, 1, -0.5, 2 }, { box_format = "xywh" } },
      { "target", 4, { 1, 1, 2, -1 }, { box_format = "cxcywh" } },
    }
    for _, c in ipairs(cases_) do
      local which, n, box, fo = c[1], c[2], c[3], c[4]
      local xb, yb = x:clone(), y:clone()
      local t = which == "input" and xb or yb
      local v = t:totable()
      v[n + 1] = box
      t:copy(ploss.tensor(v, { dtype = "f32" }))
      local oo = merge(o, fo)
      local frag = string.format("%s: box %d (0-based)", which, n)
      if device == "cpu" then
        expect_error_all(fam, function() return { x = xb, y = yb, opts = merge(oo, { reduction = "none" }) } end,
          { "PLOSS_ERR_INVALID_BOX", frag })
        expect_error_all(fam, function() return { x = xb, y = yb, opts = oo } end, { "PLOSS_ERR_INVALID_BOX", frag })
      else
        for _, pass in ipairs(PASSES) do
          local ok, err = pcall(run_pass, fam, pass, { x = xb, y = yb, opts = merge(oo, { reduction = "none" }) })
          if not ok then fail(fam.name .. " " .. pass .. ": the call itself failed: " .. tostring(err)) end
          local ok2, err2 = pcall(ploss.synchronize, device)
          if ok2 or not tostring(err2):find("PLOSS_ERR_INVALID_BOX", 1, true) or not tostring(err2):find(frag, 1, true) then
            fail(fam.name .. " " .. pass .. ": expected PLOSS_ERR_INVALID_BOX naming " .. frag .. ", got " .. tostring(err2))
          end
          ploss.synchronize(device) -- the slot was cleared
        end
        local ok3, err3 = pcall(F[fam.name], xb, yb, oo)
        if ok3 or not tostring(err3):find("PLOSS_ERR_INVALID_BOX", 1, true) then
          fail(fam.name .. ": reduced forward: expected PLOSS_ERR_INVALID_BOX, got " .. tostring(err3))
        end
        ploss.synchronize(device)
      end
      -- an ignored invalid box is not checked: the loss of the other boxes
      local ign = ploss.zeros({ N }, { dtype = "u8", device = device })
      ign:view(-1):narrow(1, n + 1, 1):fill(1)
      local got = F[fam.name](xb, yb, merge(oo, { ignore = ign, reduction = "none" })):flat()
      local want = F[fam.name](x, y, merge(oo, { ignore = ign, reduction = "none" })):flat()
      if fo.box_format == nil then H.assert_equal(got, want, { what = fam.name .. " ignored invalid box" }) end
      if got[n + 1] ~= 0 then fail(fam.name .. ": the loss of an ignored box is " .. got[n + 1]) end
    end
  end)

  add(cases, "NaN / Inf in a box: a NaN box's loss is NaN, the other boxes are unchanged", function()
    for _, bad in ipairs { 0 / 0, math.huge } do for _, dtype in ipairs(B.DTYPES) do
      local x, y, o = args(51, dtype)
      local xb = x:clone()
      xb:select(1, 3):narrow(1, 3, 1):fill(bad) -- x2 of box 3 (1-based)
      local lc = F[fam.name](x, y, merge(o, { reduction = "none" })):flat()
      local lb = F[fam.name](xb, y, merge(o, { reduction = "none" })):flat()
      for i = 1, N do
        if i == 3 then
          -- (an infinite box may have a finite limit: IoU = 0 against an infinite union)
          if bad ~= bad and not is_nan(lb[i]) then fail(fam.name .. " " .. dtype .. ": the loss of a NaN box is " .. lb[i]) end
        else
          close({ lb[i] }, { lc[i] }, TOL[dtype], fam.name .. " " .. dtype .. " loss of clean box " .. i)
        end
      end
      local _, gc = F[fam.name .. "_fused"](x, y, merge(o, { reduction = "sum" }))
      local _, gb = F[fam.name .. "_fused"](xb, y, merge(o, { reduction = "sum" }))
      local gcv, gbv = gc:flat(), gb:flat()
      for i = 1, #gcv do
        if math.floor((i - 1) / 4) + 1 ~= 3 then
          close({ gbv[i] }, { gcv[i] }, TOL[dtype], fam.name .. " " .. dtype .. " gradient element " .. i .. " of a clean box")
        end
      end
    end end
  end)

  add(cases, "every box ignored, and an empty batch: mean NaN, sum 0, none zeros, gradient exactly zero", function()
    for _, dtype in ipairs(B.DTYPES) do
      for _, n in ipairs { N, 0 } do
        local x, y = B.random_boxes(n, 61, dtype, device), B.random_boxes(n, 62, dtype, device)
        local o = n > 0 and { ignore = ploss.ones({ n }, { dtype = "u8", device = device }) } or {}
        for _, red in ipairs { "mean", "sum", "none" } do
          for _, pass in ipairs(PASSES) do
            local l, g = run_pass(fam, pass, { x = x, y = y, opts = merge(o, { reduction = red }) })
            local lv, gv = values_of(l, g)
            local label = fam.name .. " " .. dtype .. " " .. pass .. " " .. red .. (n > 0 and " all ignored" or " empty")
            if lv then
              if red == "mean" then
                if not is_nan(lv[1]) then fail(label .. ": loss " .. tostring(lv[1]) .. ", expected NaN") end
              else
                if #lv ~= (red == "none" and n or 1) then fail(label .. ": " .. #lv .. " loss values") end
                for _, v in ipairs(lv) do if v ~= 0 then fail(label .. ": loss " .. v .. ", expected 0") end end
              end
            end
            if g and not nn_same(g:size(), { n, 4 }) then fail(label .. ": gradient of sizes " .. table.concat(g:size(), "x")) end
            if gv then for i, v in ipairs(gv) do if v ~= 0 then fail(label .. ": gradient element " .. i .. " is " .. v) end end end
          end
        end
      end
    end
  end)

  add(cases, "options out of range", function()
    local x, y, o = args(71)
    for _, bo in ipairs(fam.bad_options) do
      local frags = { bo[2] }
      if bo[2]:find("^opts%.") then frags[2] = "PLOSS_ERR_INVALID_ARGUMENT" end
      expect_error_all(fam, function() return { x = x, y = y, opts = merge(o, bo[1]) } end, frags)
    end
    expect_error_all(fam, function() return { x = x, y = y, opts = merge(o, { reduction = "avg" }) } end,
      { "reduction: 'avg' is not one of" })
    for _, s in ipairs { math.huge, 0 / 0 } do
      expect_error_all(fam, function(pass)
        if pass ~= "fused" then return nil end
        return { x = x, y = y, opts = merge(o, { scale = s }) }
      end, { "PLOSS_ERR_INVALID_ARGUMENT", "opts.scale" })
    end
  end)
  return cases
end

--- The cases of a row on `device` ({name, fn} list).  `fam` may be a row or a name;
-- the name 'one_hot' gives the one-hot cases.
function B.cases(fam, device)
  if fam == "one_hot" then return gen_one_hot_cases(device) end
  if type(fam) == "string" then fam = assert(B.by_name[fam], fam) end
  if fam.kind == "op" then return gen_op_cases(fam, device) end
  if fam.kind == "boxes" then return gen_box_cases(fam, device) end
  return gen_loss_cases(fam, device)
end

return B
