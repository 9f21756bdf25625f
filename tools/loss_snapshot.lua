#!/usr/bin/env luajit
--- Bitwise snapshot of every public loss and support op, for refactors that must not
-- change a single result.
--
--   source tools/env.sh build
--   luajit tools/loss_snapshot.lua [--device cpu|cuda] [--out FILE]   -- write the snapshot
--   luajit tools/loss_snapshot.lua --compare A B                      -- diff two snapshots
--
-- Every loss runs on fixed, seeded inputs (ploss.randn / ploss.randint with explicit seeds,
-- never the global generator) in every float dtype (f32, f16, bf16, f64) and every
-- reduction, through each pass:
--   forward        ploss.F.<name>(input, target, opts)        (a Lua number when reduced)
--   backward       ploss.F.<name>_backward(..., grad_output, opts)  (state recomputed)
--   fused          ploss.F.<name>_fused(..., opts + scale, inplace = false)
--   fused_inplace  the same with inplace = true, over a contiguous copy of the input
--   crit_forward   ploss.<Class>{opts}:forward_tensor  (the loss tensor itself, with its dtype)
--   crit_backward  crit:backward after crit_forward    (the saved-state path)
--   crit_fused     crit(input, target, scale)
-- Every option is passed explicitly (ignore_index included), so a changed default does not
-- show up as a difference.  Then the support ops (one_hot, Taylor softmax, activations,
-- gemm, bias, argmax, SGD/Adam steps).
--
-- One line per result, sorted:
--   <loss>/<case>/<dtype>/<reduction>/<pass>/<output> TAB <dtype>[<sizes>] TAB n=<count> TAB fnv1a64=<hex>
-- the hash over the exact bytes of the result copied to the CPU and made contiguous (a Lua
-- number, the reduced loss of ploss.F.<name>, is hashed as its 8 double bytes: 'num').  A
-- combination that raises writes
--   <key> TAB ERR TAB <status> TAB # <message>
-- <status> is the PLOSS_ERR_* name (LUA_ERROR for a Lua-side check).  --compare ignores the
-- trailing '# message' (wording may change; the status and acceptance may not) and exits 1
-- when a key differs or is missing on one side.
local function usage(msg)
  io.stderr:write((msg and (msg .. "\n") or "") ..
    "usage: luajit tools/loss_snapshot.lua [--device cpu|cuda] [--out FILE]\n" ..
    "       luajit tools/loss_snapshot.lua --compare A B\n")
  os.exit(2)
end

---------------------------------------------------------------------------------------
-- --compare
---------------------------------------------------------------------------------------

local function read_snapshot(path)
  local f, err = io.open(path, "r")
  if not f then usage("cannot open " .. tostring(path) .. ": " .. tostring(err)) end
  local map, order = {}, {}
  for line in f:lines() do
    if line ~= "" then
      local body = line:gsub("\t# .*$", "")
      local key, rest = body:match("^([^\t]+)\t(.*)$")
      if not key then key, rest = body, "" end
      if map[key] == nil then order[#order + 1] = key end
      map[key] = rest
    end
  end
  f:close()
  return map, order
end

local function compare(a, b)
  local ma, oa = read_snapshot(a)
  local mb, ob = read_snapshot(b)
  local keys, seen = {}, {}
  for _, list in ipairs { oa, ob } do
    for _, k in ipairs(list) do
      if not seen[k] then seen[k] = true; keys[#keys + 1] = k end
    end
  end
  table.sort(keys)
  local ndiff = 0
  for _, k in ipairs(keys) do
    local va, vb = ma[k], mb[k]
    if va ~= vb then
      ndiff = ndiff + 1
      print(k)
      print("  A: " .. (va or "(missing)"))
      print("  B: " .. (vb or "(missing)"))
    end
  end
  io.stderr:write(string.format("%d keys compared, %d differ (A: %d lines, B: %d lines)\n",
    #keys, ndiff, #oa, #ob))
  os.exit(ndiff == 0 and 0 or 1)
end

local device, outpath = "cpu", nil
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "--compare" then
      if not (arg[i + 1] and arg[i + 2]) or arg[i + 3] then usage("--compare takes two files") end
      compare(arg[i + 1], arg[i + 2])
    elseif a == "--device" then
      device = arg[i + 1] or usage("--device needs a value"); i = i + 1
    elseif a == "--out" then
      outpath = arg[i + 1] or usage("--out needs a value"); i = i + 1
    elseif a == "-h" or a == "--help" then
      usage()
    else
      usage("unknown argument " .. a)
    end
    i = i + 1
  end
end

---------------------------------------------------------------------------------------
-- Hashing and recording
---------------------------------------------------------------------------------------

local ffi = require "ffi"
local bit = require "bit"
local ploss = require "ploss"
local F = ploss.F

if device ~= "cpu" and not ploss.cuda_available() then
  io.stderr:write("loss_snapshot: --device " .. device .. " but CUDA is not available in this build/machine\n")
  os.exit(2)
end

local FNV_OFFSET = 0xcbf29ce484222325ULL
local FNV_PRIME = 0x100000001b3ULL

local function fnv1a64(ptr, nbytes)
  local p = ffi.cast("const uint8_t *", ptr)
  local h = FNV_OFFSET
  for i = 0, nbytes - 1 do
    h = bit.bxor(h, p[i]) * FNV_PRIME
  end
  return bit.tohex(h, 16)
end

local lines = {}
local seen_keys = {}

local function add(key, text)
  if seen_keys[key] then error("loss_snapshot: duplicate key " .. key) end
  seen_keys[key] = true
  lines[#lines + 1] = key .. "\t" .. text
end

local function shape_of(t)
  local s = t:size()
  return #s == 0 and "scalar" or table.concat(s, "x")
end

-- Record one result: a ploss tensor or a Lua number.
local function record(key, v)
  if type(v) == "number" then
    local buf = ffi.new("double[1]", v)
    add(key, "num[1]\tn=1\tfnv1a64=" .. fnv1a64(buf, 8))
  elseif ploss.is_tensor(v) then
    local host = v:to("cpu"):contiguous()
    local n = host:numel()
    local h = fnv1a64(host:dl().data, n * host:element_size())
    add(key, string.format("%s[%s]\tn=%d\tfnv1a64=%s", v:dtype(), shape_of(v), n, h))
    if host ~= v then host:free() end
  else
    add(key, "BADTYPE\t" .. type(v))
  end
end

local function clean_message(msg)
  msg = tostring(msg)
  msg = msg:gsub("^[^\n]-:%d+: ", "") -- error()'s location prefix
  msg = msg:gsub("[\t\n]", " ")
  return msg
end

local function status_of(msg)
  local s = tostring(msg):match("%((PLOSS_[%u_]+)%)%s*$")
  return s or "LUA_ERROR"
end

-- Run fn(); on success record each named output { {name, value}, ... } under prefix;
-- on error write one line prefix/ERROR (the outputs are unknown).
local function run(prefix, fn)
  local ok, res = pcall(fn)
  if ok and device ~= "cpu" then
    ok, res = pcall(function() ploss.synchronize(device); return res end)
  end
  if not ok then
    add(prefix .. "/error", "ERR\t" .. status_of(res) .. "\t# " .. clean_message(res))
    return
  end
  for _, o in ipairs(res) do record(prefix .. "/" .. o[1], o[2]) end
end

---------------------------------------------------------------------------------------
-- Inputs (built on the CPU from explicit seeds, then moved to the device)
---------------------------------------------------------------------------------------

local DTYPES = { "f32", "f16", "bf16", "f64" }
local REDUCTIONS = { "none", "mean", "sum" }

local function dev(t) return t:to(device) end

-- f64 normal numbers, seeded, converted to dtype; sizes is the logical shape.
-- layout: nil (contiguous), 't2' (2-d: stored C×N, transposed view),
-- 'cl' (4-d: stored N×H×W×C, permuted to N×C×H×W).
local function randn(sizes, dtype, seed, std, layout)
  local stored = sizes
  if layout == "t2" then stored = { sizes[2], sizes[1] }
  elseif layout == "cl" then stored = { sizes[1], sizes[3], sizes[4], sizes[2] } end
  local base = ploss.randn(stored, { dtype = "f64", seed = seed, std = std or 1 })
  local t = dev(base:to(nil, dtype, true)) -- always a copy: base is freed now
  base:free()
  if layout == "t2" then t = t:t()
  elseif layout == "cl" then t = t:permute(1, 4, 2, 3) end
  return t
end

local function rand(sizes, dtype, seed)
  local base = ploss.rand(sizes, { dtype = "f64", seed = seed })
  local t = dev(base:to(nil, dtype, true)) -- always a copy: base is freed now
  base:free()
  return t
end

-- Class indices in [0, C); positions 1, 1 + every, 1 + 2·every, … (row-major) replaced
-- by `ignore` (none when every is nil; all when every = 1).
local function labels(sizes, C, seed, ignore, every, dtype)
  local base = ploss.randint(0, C, sizes, { seed = seed, dtype = "i64" })
  local v = base:flat()
  base:free()
  if every then
    for k = 1, #v do if (k - 1) % every == 0 then v[k] = ignore end end
  end
  return dev(ploss.tensor(v, { dtype = dtype or "i64", size = sizes }))
end

local function without_dim2(sizes)
  local s = {}
  for i = 1, #sizes do if i ~= 2 then s[#s + 1] = sizes[i] end end
  return s
end

local function copy_table(t)
  local r = {}
  for k, v in pairs(t) do r[k] = v end
  return r
end

---------------------------------------------------------------------------------------
-- Losses
---------------------------------------------------------------------------------------

-- Each loss: fname, class, elementwise (loss shape = input shape; target float),
-- defaults (every option, all passed explicitly), cases.
-- A case: name, sizes (logical N×C×…), layout, std, target ('index' | 'prob' | 'binary' |
-- 'soft'), every (ignored-label spacing), ignore (label written at ignored positions,
-- default opts.ignore_index), tdtype (target index dtype), opts (overrides).
local W10 = { 0.5, 1.0, 2.0, 0.25, 1.5, 0.75, 1.25, 3.0, 0.1, 1.0 }
local W5 = { 0.5, 2.0, 1.0, 0.25, 1.5 }
local P10 = { 0.3, 0.05, 0.1, 0.02, 0.2, 0.08, 0.1, 0.05, 0.06, 0.04 }
local P5 = { 0.4, 0.1, 0.2, 0.05, 0.25 }

local LOSSES = {
  {
    fname = "cross_entropy", class = "CrossEntropyLoss",
    defaults = { ignore_index = -100, label_smoothing = 0, smoothing_convention = "pytorch" },
    cases = {
      { name = "2d", sizes = { 33, 10 }, target = "index", every = 7 },
      { name = "2d_weight", sizes = { 33, 10 }, target = "index", every = 5, opts = { weight = W10 } },
      { name = "2d_ls_pytorch", sizes = { 33, 10 }, target = "index", every = 6,
        opts = { label_smoothing = 0.1, smoothing_convention = "pytorch" } },
      { name = "2d_ls_reference_weight", sizes = { 33, 10 }, target = "index", every = 6,
        opts = { label_smoothing = 0.2, smoothing_convention = "reference", weight = W10 } },
      { name = "2d_ls_uniform_others", sizes = { 33, 10 }, target = "index", every = 6,
        opts = { label_smoothing = 0.15, smoothing_convention = "uniform_others" } },
      { name = "2d_i32_target_ignore7", sizes = { 20, 10 }, target = "index", every = 4, tdtype = "i32",
        opts = { ignore_index = 7 }, ignore = 7 },
      { name = "2d_transposed", sizes = { 24, 10 }, layout = "t2", target = "index", every = 5,
        opts = { label_smoothing = 0.1, smoothing_convention = "pytorch" } },
      { name = "2d_wide", sizes = { 6, 1500 }, std = 3, target = "index", every = 4 },
      { name = "2d_all_ignored", sizes = { 4, 10 }, target = "index", every = 1 },
      { name = "prob", sizes = { 17, 10 }, target = "prob" },
      { name = "prob_ls_weight", sizes = { 17, 10 }, target = "prob",
        opts = { label_smoothing = 0.1, smoothing_convention = "reference", weight = W10 } },
      { name = "4d", sizes = { 2, 5, 3, 4 }, target = "index", every = 5,
        opts = { weight = W5, label_smoothing = 0.1, smoothing_convention = "uniform_others" } },
      { name = "4d_channels_last", sizes = { 2, 5, 3, 4 }, layout = "cl", target = "index", every = 5,
        opts = { label_smoothing = 0.05, smoothing_convention = "pytorch" } },
      { name = "4d_prob_channels_last", sizes = { 2, 5, 3, 4 }, layout = "cl", target = "prob" },
    },
  },
  {
    fname = "binary_cross_entropy_with_logits", class = "BCEWithLogitsLoss", elementwise = true,
    defaults = {},
    cases = {
      { name = "2d_binary", sizes = { 16, 10 }, target = "binary" },
      { name = "2d_soft_weight_pos_weight", sizes = { 16, 10 }, target = "soft",
        opts = { weight = W10, pos_weight = { 2, 1, 0.5, 3, 1, 1, 4, 0.25, 1, 2 } } },
      { name = "2d_transposed_pos_weight", sizes = { 16, 10 }, layout = "t2", std = 4, target = "binary",
        opts = { pos_weight = W10 } },
      { name = "4d_weight_vector", sizes = { 2, 5, 3, 4 }, target = "soft", opts = { weight = W5 } },
      { name = "4d_channels_last_pos_weight", sizes = { 2, 5, 3, 4 }, layout = "cl", target = "binary",
        opts = { pos_weight = P5 } },
    },
  },
  {
    fname = "sigmoid_focal", class = "FocalLoss", elementwise = true,
    defaults = { alpha = 0.25, gamma = 2, convention = "torchvision" },
    cases = {
      { name = "2d_binary", sizes = { 16, 10 }, target = "binary" },
      { name = "2d_soft_reference", sizes = { 16, 10 }, target = "soft",
        opts = { alpha = 0.4, gamma = 1.5, convention = "reference" } },
      { name = "2d_soft_torchvision_noalpha_gamma0", sizes = { 16, 10 }, target = "soft",
        opts = { alpha = -1, gamma = 0, convention = "torchvision" } },
      { name = "2d_transposed", sizes = { 16, 10 }, layout = "t2", std = 5, target = "binary",
        opts = { alpha = 0.75, gamma = 3 } },
      { name = "4d_channels_last", sizes = { 2, 5, 3, 4 }, layout = "cl", target = "soft",
        opts = { convention = "reference" } },
    },
  },
  {
    fname = "softmax_focal", class = "SoftmaxFocalLoss",
    defaults = { gamma = 2, ignore_index = -100 },
    cases = {
      { name = "2d", sizes = { 33, 10 }, target = "index", every = 7 },
      { name = "2d_alpha_gamma05", sizes = { 33, 10 }, target = "index", every = 5,
        opts = { alpha = W10, gamma = 0.5 } },
      { name = "2d_gamma0_ignore3", sizes = { 20, 10 }, target = "index", every = 4, ignore = 3,
        opts = { gamma = 0, ignore_index = 3 } },
      { name = "2d_transposed", sizes = { 24, 10 }, layout = "t2", std = 3, target = "index", every = 6 },
      { name = "4d_alpha", sizes = { 2, 5, 3, 4 }, target = "index", every = 5, opts = { alpha = W5 } },
      { name = "4d_channels_last", sizes = { 2, 5, 3, 4 }, layout = "cl", target = "index", every = 5,
        tdtype = "i32", opts = { gamma = 1.5 } },
    },
  },
  {
    fname = "dual_focal", class = "DualFocalLoss",
    defaults = { eps = 1e-5, ignore_index = -100 },
    cases = {
      { name = "2d", sizes = { 33, 10 }, target = "index", every = 7 },
      { name = "2d_eps_ignore255", sizes = { 20, 10 }, target = "index", every = 4, ignore = 255,
        opts = { eps = 1e-3, ignore_index = 255 } },
      { name = "2d_transposed", sizes = { 24, 10 }, layout = "t2", std = 3, target = "index", every = 6 },
      { name = "4d", sizes = { 2, 5, 3, 4 }, target = "index", every = 5 },
      { name = "4d_channels_last", sizes = { 2, 5, 3, 4 }, layout = "cl", target = "index", every = 5 },
    },
  },
  {
    fname = "large_margin_softmax", class = "LargeMarginSoftmaxLoss",
    defaults = { lam = 0.3, ignore_index = 255 },
    cases = {
      { name = "2d", sizes = { 33, 10 }, target = "index", every = 7 },
      { name = "2d_lam06_ignore_m100", sizes = { 33, 10 }, target = "index", every = 5, ignore = -100,
        opts = { lam = 0.6, ignore_index = -100 } },
      { name = "2d_C2", sizes = { 16, 2 }, target = "index", every = 5 },
      { name = "2d_wide", sizes = { 6, 1500 }, std = 3, target = "index", every = 4 },
      { name = "2d_large_logits", sizes = { 16, 12 }, std = 60, target = "index", every = 5 },
      { name = "2d_transposed", sizes = { 24, 10 }, layout = "t2", std = 3, target = "index", every = 6 },
      { name = "2d_all_ignored", sizes = { 4, 10 }, target = "index", every = 1 },
      { name = "4d", sizes = { 2, 5, 3, 4 }, target = "index", every = 5 },
      { name = "4d_channels_last", sizes = { 2, 5, 3, 4 }, layout = "cl", target = "index", every = 5,
        tdtype = "i32" },
    },
  },
  {
    fname = "taylor_cross_entropy", class = "TaylorCrossEntropyLoss",
    defaults = { n = 2, ignore_index = -1 },
    cases = {
      { name = "2d_n2", sizes = { 33, 10 }, target = "index", every = 7 },
      { name = "2d_n4", sizes = { 33, 10 }, target = "index", every = 5, opts = { n = 4 } },
      { name = "2d_n12", sizes = { 20, 10 }, target = "index", every = 5, opts = { n = 12 } },
      { name = "2d_transposed_ignore_m100", sizes = { 24, 10 }, layout = "t2", std = 2, target = "index",
        every = 6, ignore = -100, opts = { ignore_index = -100 } },
      { name = "4d_n6", sizes = { 2, 5, 3, 4 }, target = "index", every = 5, opts = { n = 6 } },
      { name = "4d_channels_last", sizes = { 2, 5, 3, 4 }, layout = "cl", target = "index", every = 5 },
    },
  },
  {
    fname = "pc_softmax_cross_entropy", class = "PCSoftmaxCrossEntropyLoss",
    defaults = { ignore_index = -100 },
    cases = {
      { name = "2d", sizes = { 33, 10 }, target = "index", every = 7, opts = { lb_proportion = P10 } },
      { name = "2d_zero_prior_ignore255", sizes = { 20, 10 }, target = "index", every = 4, ignore = 255,
        opts = { lb_proportion = { 0.3, 0, 0.1, 0.02, 0.2, 0.08, 0.1, 0.05, 0.06, 0.04 }, ignore_index = 255 } },
      { name = "2d_transposed", sizes = { 24, 10 }, layout = "t2", std = 3, target = "index", every = 6,
        opts = { lb_proportion = W10 } },
      { name = "4d", sizes = { 2, 5, 3, 4 }, target = "index", every = 5, opts = { lb_proportion = P5 } },
      { name = "4d_channels_last", sizes = { 2, 5, 3, 4 }, layout = "cl", target = "index", every = 5,
        opts = { lb_proportion = P5 } },
    },
  },
  {
    fname = "ohem_cross_entropy", class = "OhemCrossEntropyLoss",
    defaults = { score_thresh = 0.7, n_min = -1, ignore_index = 255 },
    cases = {
      { name = "2d", sizes = { 40, 10 }, std = 2, target = "index", every = 7 },
      { name = "2d_thresh03_nmin5", sizes = { 40, 10 }, std = 2, target = "index", every = 7,
        opts = { score_thresh = 0.3, n_min = 5 } },
      { name = "2d_nmin_all", sizes = { 40, 10 }, std = 2, target = "index", every = 7,
        opts = { score_thresh = 0.05, n_min = 1000 } },
      { name = "2d_transposed_ignore_m100", sizes = { 24, 10 }, layout = "t2", std = 3, target = "index",
        every = 6, ignore = -100, opts = { ignore_index = -100 } },
      { name = "2d_all_ignored", sizes = { 4, 10 }, target = "index", every = 1 },
      { name = "4d", sizes = { 2, 5, 8, 8 }, std = 3, target = "index", every = 9 },
      { name = "4d_channels_last_nmin20", sizes = { 2, 5, 8, 8 }, layout = "cl", std = 3, target = "index",
        every = 9, opts = { score_thresh = 0.5, n_min = 20 } },
    },
  },
  {
    fname = "ohem_large_margin", class = "OhemLargeMarginLoss",
    defaults = { score_thresh = 0.7, n_min = -1, lam = 0.3, ignore_index = 255 },
    cases = {
      { name = "2d", sizes = { 40, 10 }, std = 2, target = "index", every = 7 },
      { name = "2d_thresh03_nmin5_lam05", sizes = { 40, 10 }, std = 2, target = "index", every = 7,
        opts = { score_thresh = 0.3, n_min = 5, lam = 0.5 } },
      { name = "2d_nmin_all", sizes = { 40, 10 }, std = 2, target = "index", every = 7,
        opts = { score_thresh = 0.05, n_min = 1000 } },
      { name = "2d_transposed_ignore_m100", sizes = { 24, 10 }, layout = "t2", std = 3, target = "index",
        every = 6, ignore = -100, opts = { ignore_index = -100 } },
      { name = "4d", sizes = { 2, 5, 8, 8 }, std = 3, target = "index", every = 9 },
      { name = "4d_channels_last_nmin20", sizes = { 2, 5, 8, 8 }, layout = "cl", std = 3, target = "index",
        every = 9, opts = { score_thresh = 0.5, n_min = 20 } },
    },
  },
}

local function loss_dtype(dt) return dt == "f64" and "f64" or "f32" end

local function run_loss(L, case, ci)
  local seed = 1000 * ci + 17 * #case.name
  local opts = copy_table(L.defaults)
  for k, v in pairs(case.opts or {}) do opts[k] = v end
  local C = case.sizes[2]
  local ignore = case.ignore or opts.ignore_index
  -- the first case also probes a dtype no loss takes (i32 logits): its error lines show a
  -- change in acceptance
  local dtypes = DTYPES
  if ci == 1 then dtypes = { "f32", "f16", "bf16", "f64", "i32" } end
  for di, dt in ipairs(dtypes) do
    local dseed = seed + 100 * di
    local x = randn(case.sizes, dt, dseed + 1, case.std or 1.5, case.layout)
    local y
    if case.target == "index" then
      y = labels(without_dim2(case.sizes), C, seed + 2, ignore, case.every, case.tdtype)
    elseif case.target == "prob" or case.target == "soft" then
      y = rand(case.sizes, dt, seed + 3)
    elseif case.target == "binary" then
      local b = ploss.randint(0, 2, case.sizes, { seed = seed + 4, dtype = "i64" })
      y = dev(b:to(nil, dt, true))
      b:free()
    end
    local lsizes = L.elementwise and case.sizes or without_dim2(case.sizes)
    local ldt = loss_dtype(dt)
    local gnone = randn(lsizes, ldt, seed + 5, 1)
    for _, red in ipairs(REDUCTIONS) do
      local o = copy_table(opts)
      o.reduction = red
      local g = red == "none" and gnone or 1.25
      local prefix = table.concat({ L.fname, case.name, dt, red }, "/")
      run(prefix .. "/forward", function()
        return { { "loss", F[L.fname](x, y, copy_table(o)) } }
      end)
      run(prefix .. "/backward", function()
        return { { "grad", F[L.fname .. "_backward"](x, y, g, copy_table(o)) } }
      end)
      run(prefix .. "/fused", function()
        local fo = copy_table(o)
        fo.scale, fo.inplace = 0.75, false
        local loss, grad = F[L.fname .. "_fused"](x, y, fo)
        return { { "loss", loss }, { "grad", grad } }
      end)
      run(prefix .. "/fused_inplace", function()
        local fo = copy_table(o)
        fo.scale, fo.inplace = 0.75, true
        local xc = x:clone()
        local loss, grad = F[L.fname .. "_fused"](xc, y, fo)
        return { { "loss", loss }, { "grad", grad }, { "grad_is_input", grad == xc and 1 or 0 } }
      end)
      local co = copy_table(o)
      co.inplace = false
      local crit
      run(prefix .. "/crit_forward", function()
        crit = ploss[L.class](copy_table(co))
        return { { "loss", crit:forward_tensor(x, y):clone() } }
      end)
      run(prefix .. "/crit_backward", function()
        if not crit then error("no criterion") end
        return { { "grad", crit:backward(x, y, g):clone() } }
      end)
      run(prefix .. "/crit_fused", function()
        local c2 = ploss[L.class](copy_table(co))
        local loss, grad = c2(x, y, 0.75)
        if ploss.is_tensor(loss) then loss = loss:clone() end
        return { { "loss", loss }, { "grad", grad:clone() } }
      end)
    end
    collectgarbage()
  end
end

---------------------------------------------------------------------------------------
-- Support ops
---------------------------------------------------------------------------------------

local function support_ops()
  local ALL = { "f32", "f16", "bf16", "f64", "i64", "i32", "u8" }

  -- one_hot: every option explicit
  local oh_cases = {
    { name = "1d", sizes = { 23 }, C = 7, every = 5, o = { label_smoothing = 0, smoothing_convention = "pytorch", ignore_index = -1 } },
    { name = "1d_ls_pytorch", sizes = { 23 }, C = 7, every = 5, o = { label_smoothing = 0.1, smoothing_convention = "pytorch", ignore_index = -1 } },
    { name = "1d_ls_reference", sizes = { 23 }, C = 7, every = 5, o = { label_smoothing = 0.1, smoothing_convention = "reference", ignore_index = -1 } },
    { name = "1d_ls_uniform_others", sizes = { 23 }, C = 7, every = 5, o = { label_smoothing = 0.2, smoothing_convention = "uniform_others", ignore_index = -1 } },
    { name = "3d_ignore255_i32", sizes = { 2, 3, 4 }, C = 5, every = 4, tdtype = "i32", ignore = 255,
      o = { label_smoothing = 0.05, smoothing_convention = "pytorch", ignore_index = 255 } },
  }
  for ci, c in ipairs(oh_cases) do
    local y = labels(c.sizes, c.C, 5000 + ci, c.ignore or c.o.ignore_index, c.every, c.tdtype)
    for _, dt in ipairs(ALL) do
      run(table.concat({ "one_hot", c.name, dt, "-", "forward" }, "/"), function()
        local o = copy_table(c.o)
        o.dtype = dt
        return { { "out", F.one_hot(y, c.C, o) } }
      end)
    end
  end

  -- Taylor softmax / log-Taylor softmax, forward and backward
  local ts_cases = {
    { name = "2d_n2_dim2", sizes = { 9, 10 }, n = 2, dim = 2 },
    { name = "2d_n4_dimlast", sizes = { 9, 10 }, n = 4, dim = -1 },
    { name = "2d_n12_dim2", sizes = { 9, 10 }, n = 12, dim = 2 },
    { name = "2d_transposed_n2", sizes = { 9, 10 }, n = 2, dim = 2, layout = "t2" },
    { name = "4d_n2_dim2", sizes = { 2, 5, 3, 4 }, n = 2, dim = 2 },
    { name = "4d_channels_last_n6_dim2", sizes = { 2, 5, 3, 4 }, n = 6, dim = 2, layout = "cl" },
    { name = "4d_n2_dim4", sizes = { 2, 5, 3, 4 }, n = 2, dim = 4 },
  }
  for _, op in ipairs { "taylor_softmax", "log_taylor_softmax" } do
    for ci, c in ipairs(ts_cases) do
      for di, dt in ipairs(DTYPES) do
        local x = randn(c.sizes, dt, 6000 + 10 * ci + di, 2, c.layout)
        local g = randn(c.sizes, dt, 6500 + 10 * ci + di, 1)
        local prefix = table.concat({ op, c.name, dt, "-" }, "/")
        run(prefix .. "/forward", function() return { { "out", F[op](x, { n = c.n, dim = c.dim }) } } end)
        run(prefix .. "/backward", function()
          return { { "grad", F[op .. "_backward"](x, g, { n = c.n, dim = c.dim }) } }
        end)
        run(prefix .. "/module", function()
          local m = ploss[op == "taylor_softmax" and "TaylorSoftmax" or "LogTaylorSoftmax"] { n = c.n, dim = c.dim }
          local out = m:forward(x):clone()
          return { { "out", out }, { "grad", m:backward(x, g):clone() } }
        end)
      end
    end
  end

  -- activations: special points (hard-swish kinks at ±3, 0, large magnitudes) + normals
  local special = { -3, 3, 0, -0.0, 1, -1, 2.5, -2.5, 20, -20, 40, -40, 1e-3, -1e-3, 3.0001, -2.9999 }
  for _, act in ipairs { "mish", "swish", "hard_swish" } do
    for di, dt in ipairs(DTYPES) do
      local sp = dev(ploss.tensor(special, { dtype = "f64" }):to(nil, dt))
      local rn = randn({ 6, 7 }, dt, 7000 + di, 3)
      local rt = randn({ 6, 7 }, dt, 7000 + di, 3, "t2")
      for _, c in ipairs { { "special", sp }, { "2d", rn }, { "2d_transposed", rt } } do
        local x = c[2]
        local g = randn(x:size(), dt, 7100 + di, 1)
        local prefix = table.concat({ act, c[1], dt, "-" }, "/")
        run(prefix .. "/forward", function() return { { "out", F[act](x, { inplace = false }) } } end)
        run(prefix .. "/forward_inplace", function()
          local xc = x:clone()
          return { { "out", F[act](xc, { inplace = true }) } }
        end)
        run(prefix .. "/backward", function()
          return { { "grad", F[act .. "_backward"](x, g, { inplace = false }) } }
        end)
        run(prefix .. "/backward_inplace", function()
          local gc = g:clone()
          return { { "grad", F[act .. "_backward"](x, gc, { inplace = true }) } }
        end)
      end
    end
  end

  -- gemm
  for di, dt in ipairs(DTYPES) do
    local M, K, N = 7, 9, 5
    local a = randn({ M, K }, dt, 8000 + di, 1)
    local aT = randn({ K, M }, dt, 8010 + di, 1) -- stored K×M
    local b = randn({ K, N }, dt, 8020 + di, 1)
    local bT = randn({ N, K }, dt, 8030 + di, 1)
    local prefix = "gemm/%s/" .. dt .. "/-/forward"
    local outdt = (dt == "f16" or dt == "bf16") and "f32" or dt
    local cases = {
      { "nn", function() return F.gemm(a, b, { trans_a = false, trans_b = false, alpha = 1, beta = 0 }) end },
      { "tn", function() return F.gemm(aT, b, { trans_a = true, trans_b = false, alpha = 1, beta = 0 }) end },
      { "nt", function() return F.gemm(a, bT, { trans_a = false, trans_b = true, alpha = 1, beta = 0 }) end },
      { "tt", function() return F.gemm(aT, bT, { trans_a = true, trans_b = true, alpha = 1, beta = 0 }) end },
      { "views", function() return F.gemm(aT:t(), bT:t(), { trans_a = false, trans_b = false, alpha = 1, beta = 0 }) end },
      { "alpha_beta_out_same_dtype", function()
          local c = randn({ M, N }, dt, 8040 + di, 1)
          return F.gemm(a, b, { trans_a = false, trans_b = false, alpha = 0.5, beta = 0.25, out = c })
        end },
      { "alpha_beta_out_f32or64", function()
          local c = randn({ M, N }, outdt, 8050 + di, 1)
          return F.gemm(a, b, { trans_a = false, trans_b = false, alpha = -1.5, beta = 2, out = c })
        end },
    }
    for _, c in ipairs(cases) do
      run(string.format(prefix, c[1]), function() return { { "out", c[2]() } } end)
    end
  end

  -- bias_add (in place over a copy), bias_grad, argmax
  for di, dt in ipairs(DTYPES) do
    local x = randn({ 6, 7 }, dt, 8100 + di, 1)
    local bias = randn({ 7 }, dt, 8110 + di, 1)
    run("bias_add/2d/" .. dt .. "/-/forward", function() return { { "out", F.bias_add(x:clone(), bias) } } end)
    local g = randn({ 33, 7 }, dt, 8120 + di, 1)
    run("bias_grad/2d/" .. dt .. "/-/forward", function() return { { "out", F.bias_grad(g, {}) } } end)
    run("bias_grad/2d_transposed/" .. dt .. "/-/forward", function()
      return { { "out", F.bias_grad(randn({ 33, 7 }, dt, 8130 + di, 1, "t2"), {}) } }
    end)
  end
  for _, dt in ipairs(ALL) do
    local float = dt == "f32" or dt == "f16" or dt == "bf16" or dt == "f64"
    local prefix = "argmax/%s/" .. dt .. "/-/forward"
    local ties = { 1, 3, 3, 2, 0, 0, 0, 0, 5, 4, 5, 1, 2, 2, 1, 2 }
    run(string.format(prefix, "ties_4x4"), function()
      return { { "out", F.argmax(dev(ploss.tensor(ties, { dtype = dt, size = { 4, 4 } })), {}) } }
    end)
    if float then
      local nan = { 1, 0 / 0, 3, 2, -1 / 0, -1 / 0, -1 / 0, 0 / 0, 1 / 0, 2, 1 / 0, 0 }
      run(string.format(prefix, "nan_inf_3x4"), function()
        return { { "out", F.argmax(dev(ploss.tensor(nan, { dtype = dt, size = { 3, 4 } })), {}) } }
      end)
      run(string.format(prefix, "2d"), function() return { { "out", F.argmax(randn({ 9, 10 }, dt, 8200, 1), {}) } } end)
      run(string.format(prefix, "4d_channels_last"), function()
        return { { "out", F.argmax(randn({ 2, 5, 3, 4 }, dt, 8210, 1, "cl"), {}) } }
      end)
    end
  end

  -- optimiser steps: three steps, every option explicit
  for di, dt in ipairs(DTYPES) do
    local mdt = dt == "f64" and "f64" or "f32"
    local sgd_cases = {
      { "plain", { lr = 0.1, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false }, false },
      { "momentum_dampening_wd", { lr = 0.05, momentum = 0.9, dampening = 0.1, weight_decay = 0.01, nesterov = false }, true },
      { "nesterov_wd", { lr = 0.05, momentum = 0.9, dampening = 0, weight_decay = 0.001, nesterov = true }, true },
    }
    for _, c in ipairs(sgd_cases) do
      run("sgd_step/" .. c[1] .. "/" .. dt .. "/-/step3", function()
        local p = randn({ 5, 6 }, dt, 8300 + di, 1)
        local buf = c[3] and dev(ploss.zeros({ 5, 6 }, { dtype = dt })) or nil
        for step = 1, 3 do
          local g = randn({ 5, 6 }, dt, 8310 + 10 * step + di, 1)
          F.sgd_step(p, g, buf, step, copy_table(c[2]))
        end
        local r = { { "param", p } }
        if buf then r[2] = { "momentum_buffer", buf } end
        return r
      end)
    end
    for _, dec in ipairs { false, true } do
      run("adam_step/" .. (dec and "adamw" or "adam_l2") .. "/" .. dt .. "/-/step3", function()
        local p = randn({ 5, 6 }, dt, 8400 + di, 1)
        local m = dev(ploss.zeros({ 5, 6 }, { dtype = mdt }))
        local v = dev(ploss.zeros({ 5, 6 }, { dtype = mdt }))
        for step = 1, 3 do
          local g = randn({ 5, 6 }, dt, 8410 + 10 * step + di, 1)
          F.adam_step(p, g, m, v, step, { lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8,
            weight_decay = 0.01, decoupled_weight_decay = dec })
        end
        return { { "param", p }, { "exp_avg", m }, { "exp_avg_sq", v } }
      end)
    end
  end
end

---------------------------------------------------------------------------------------
-- Main
---------------------------------------------------------------------------------------

local t0 = os.clock()
for _, L in ipairs(LOSSES) do
  if not (F[L.fname] and F[L.fname .. "_backward"] and F[L.fname .. "_fused"] and ploss[L.class]) then
    add(L.fname .. "/-/-/-/-/missing", "ERR\tMISSING_ENTRY_POINT")
  else
    for ci, case in ipairs(L.cases) do run_loss(L, case, ci) end
  end
end
support_ops()

table.sort(lines)
local out = outpath and assert(io.open(outpath, "w")) or io.stdout
for _, l in ipairs(lines) do out:write(l, "\n") end
if outpath then out:close() end
io.stderr:write(string.format("loss_snapshot: %d lines (%s, library %s), %.1f s CPU time\n",
  #lines, device, ploss.library_path, os.clock() - t0))
