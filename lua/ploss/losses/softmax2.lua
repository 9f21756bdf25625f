--- Softmax family II (LOSSES.md §2.2–2.5, §2.7, §8.1; core/ploss.h section "softmax
-- family II"): one-hot encoding, large-margin softmax, Taylor softmax / log-Taylor softmax
-- and Taylor cross-entropy, PC-softmax cross-entropy, OHEM cross-entropy and OHEM
-- large-margin.
--
-- Common to the criteria (as ploss.CrossEntropyLoss, see ploss/nn.lua): input N×C or
-- N×C×d1×…×dk logits (f32/f16/bf16/f64, class axis = dim 2 in Lua's numbering), target
-- class indices (i64/i32, 0-based) of shape N×d1×…×dk; `crit:forward`, `crit:backward`,
-- `crit(input, target)` (fused); ploss.F.<name>, <name>_backward, <name>_fused.
-- 'mean' with no valid sample gives a NaN loss and an exactly zero gradient.  Errors are
-- Lua errors at the caller's line with the C library's message; nothing is half-written.
return function(ploss)
local ffi = require "ffi"
local C = ploss.C
local nn = ploss.nn

-- A C options struct filled with its defaults.
local function new_opts(ctype, init)
  local o = ffi.new(ctype)
  C[init](o)
  return o
end

local conventions = {
  pytorch = C.PLOSS_SMOOTHING_PYTORCH,
  reference = C.PLOSS_SMOOTHING_REFERENCE,
  uniform_others = C.PLOSS_SMOOTHING_UNIFORM_OTHERS,
}

local function check_integer(name, v, min)
  if type(v) ~= "number" or v ~= math.floor(v) or (min and v < min) then
    ploss.raise(string.format("%s: expected an integer%s, got %s", name,
      min and (" >= " .. min) or "", tostring(v)))
  end
end

---------------------------------------------------------------------------------------
-- one-hot (LOSSES.md §8.1)
---------------------------------------------------------------------------------------

--- ploss.one_hot(target, num_classes [, opts]) → a tensor N×C×d1×…×dk (also ploss.F.one_hot)
--
-- Class indices (i64/i32, shape N×d1×…×dk, 0-based) to one-hot vectors along dim 2 (the
-- class axis), on the target's device.  opts:
--   dtype                 'f32' (default) or any dtype; integer dtypes need no smoothing
--   label_smoothing       ε in [0, 1], default 0: values a·[j = y] + b
--   smoothing_convention  'pytorch' (default: 1 − ε + ε/C and ε/C), 'reference'
--                         (pytorch-loss OnehotEncoder: 1 − ε and ε/C), 'uniform_others'
--                         (1 − ε and ε/(C−1))
--   ignore_index          default -1 (as the reference): those samples get all zeros
--   out                   a tensor to write (then num_classes may be nil: its dim 2)
-- Errors: a label outside [0, C) that is not ignore_index ("target: class index 7 at
-- sample (n, s) is outside [0, 5) …"; on CUDA reported by the next synchronising call).
function ploss.one_hot(target, num_classes, opts)
  opts = opts or {}
  if not ploss.is_tensor(target) then ploss.raise("one_hot: target: expected a ploss tensor, got " .. type(target)) end
  if type(opts) ~= "table" then ploss.raise("one_hot: opts: expected a table") end
  local out = opts.out
  if out == nil then
    check_integer("one_hot: num_classes", num_classes, 1)
    local sizes = target:size()
    table.insert(sizes, math.min(2, #sizes + 1), num_classes)
    out = ploss.empty(sizes, { dtype = opts.dtype or "f32", device = target:device() })
  elseif not ploss.is_tensor(out) then
    ploss.raise("one_hot: out: expected a ploss tensor, got " .. type(out))
  end
  local co = new_opts("ploss_one_hot_opts", "ploss_one_hot_opts_init")
  if opts.ignore_index ~= nil then check_integer("one_hot: ignore_index", opts.ignore_index); co.ignore_index = opts.ignore_index end
  if opts.label_smoothing ~= nil then
    if type(opts.label_smoothing) ~= "number" then ploss.raise("one_hot: label_smoothing: expected a number") end
    co.label_smoothing = opts.label_smoothing
  end
  if opts.smoothing_convention ~= nil then
    local v = conventions[opts.smoothing_convention]
    if v == nil then
      ploss.raise("one_hot: smoothing_convention: '" .. tostring(opts.smoothing_convention) ..
        "' is not one of 'pytorch', 'reference', 'uniform_others'")
    end
    co.smoothing_convention = v
  end
  ploss.check(C.ploss_one_hot(target:context(), target:dl(), co, out:dl()), "one_hot")
  return out
end
ploss.F.one_hot = ploss.one_hot

end
