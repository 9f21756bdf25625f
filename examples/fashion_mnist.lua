#!/usr/bin/env luajit
--- examples/fashion_mnist.lua — train an MLP classifier on the real Fashion-MNIST data
-- (Xiao, Rasul, Vollgraf, arXiv:1708.07747: 60,000 training and 10,000 test images of
-- 28×28 grey pixels, 10 classes of clothing) with a ploss criterion, on a GPU or the CPU.
--
--     source tools/env.sh build && luajit examples/fashion_mnist.lua [options]
--
-- Model: 784 → 256 → 10, activation mish (or swish / hard_swish), He-normal initialisation
-- of the hidden layer and Xavier-normal of the output layer from the seeded generator (the
-- same numbers on the CPU and the GPU), mini-batches of 256 shuffled each epoch, SGD with
-- momentum 0.9 (or Adam).  Every op runs in ploss (GEMM through OpenBLAS / cuBLAS, the
-- activation, bias add, the loss, argmax, the optimiser step); Lua only moves batches.
--
-- Data: the gzipped IDX files of Debian's `dataset-fashion-mnist`
-- (/usr/share/datasets/fashion-mnist/) or another copy of the same four files (--data DIR),
-- read through zlib (FFI), without unpacking to disk.
--
-- Several processes (tools/launch.sh -n R examples/fashion_mnist.lua --loss arcface …): with a
-- margin loss (arcface, amsoftmax) the class centres are sharded over the R ranks (each holds
-- its block of the 10 classes: ploss's comm option, docs/distributed.md) and the MLP is
-- data-parallel: every rank takes its share of each mini-batch, the loss is that of the
-- whole batch, and the MLP's gradients are summed over the ranks before each step, so the
-- ranks keep the same MLP.  Rank 0 prints and writes the files.
--
-- Output: a progress bar per epoch on a terminal (plain lines otherwise); per epoch the
-- training loss (mean over the epoch's batches), test accuracy, training images per
-- second and the device's peak memory held by ploss; at the end, in --out (default out/),
-- a CSV of these figures, a CSV of every batch's training loss and a PNG plot of both
-- (gnuplot), whose paths are printed.  The files are named by the run's settings (loss,
-- activation, optimiser, lr, seed, epochs, --limit, --batch-size and --ema where they
-- change the run, device),
-- so that runs with other settings do not overwrite them:
--     out/fashion_mnist-ce-mish-sgd-lr0.05-seed1-e3-cpu.csv, …-batches.csv, ….png
local ffi = require "ffi"

local usage = [[
usage: luajit examples/fashion_mnist.lua [options]
  --loss NAME         criterion (default ce); --loss list shows them all
  --epochs N          passes over the training set (default 3)
  --lr X              learning rate (default 0.05 for sgd, 0.001 for adam)
  --optim sgd|adam    optimiser (default sgd: momentum 0.9)
  --activation NAME   mish (default), swish or hard_swish
  --batch-size N      mini-batch size (default 256)
  --device D          auto (default: cuda when a GPU is visible), cpu, cuda, cuda:N
  --seed N            initialisation and shuffling seed (default 1)
  --limit N           train on the first N training images only (smoke tests)
  --data DIR          directory with the four *-ubyte.gz files
                      (default /usr/share/datasets/fashion-mnist)
  --out DIR           where the CSVs and the PNG go (default out), named by the
                      run's settings
  --no-plot           skip the PNG
  --ema               evaluate with exponential moving averages of the weights
                      (ploss.optim.EMA, decay 0.999 with TensorFlow's warm-up)
  --help              this text
several ranks: tools/launch.sh -n R examples/fashion_mnist.lua --loss arcface [options]
                      (a margin loss: its class centres sharded over the ranks)]]

---------------------------------------------------------------------------------------
-- The criteria --loss can name.  Each line: name = { description, constructor }, where the
-- constructor returns a criterion with Torch7's API (crit(logits, labels) → loss,
-- gradInput, the gradient of the mean loss), or nil when this build lacks it.
-- Add a line here when a loss family lands.
---------------------------------------------------------------------------------------
local criteria = {
  ["ce"] = { "softmax cross-entropy",
    function(ploss) return ploss.CrossEntropyLoss {} end },
  ["ls-ce"] = { "cross-entropy with label smoothing ε = 0.1, PyTorch convention",
    function(ploss) return ploss.CrossEntropyLoss { label_smoothing = 0.1 } end },
  ["bce"] = { "one-vs-all BCE with logits on one-hot targets (PyTorch BCEWithLogitsLoss)",
    function(ploss) if ploss.BCEWithLogitsLoss then return ploss.OneHotTargets(ploss.BCEWithLogitsLoss {}) end end },
  ["focal"] = { "sigmoid focal loss on one-hot targets, alpha 0.25, gamma 2 (torchvision)",
    function(ploss) if ploss.FocalLoss then return ploss.OneHotTargets(ploss.FocalLoss {}) end end },
  ["softmax-focal"] = { "softmax focal loss, gamma 2 (Lin et al. 2017 with a softmax)",
    function(ploss) if ploss.SoftmaxFocalLoss then return ploss.SoftmaxFocalLoss {} end end },
  ["dual-focal"] = { "dual focal loss, eps 1e-5 (pytorch-loss Dual_Focal_loss)",
    function(ploss) if ploss.DualFocalLoss then return ploss.DualFocalLoss {} end end },
  ["large-margin"] = { "large-margin softmax, lambda 0.3 (Kobayashi BMVC 2019)",
    function(ploss) if ploss.LargeMarginSoftmaxLoss then return ploss.LargeMarginSoftmaxLoss {} end end },
  ["taylor-ce"] = { "Taylor cross-entropy, n = 2 (de Brébisson & Vincent 2016)",
    function(ploss) if ploss.TaylorCrossEntropyLoss then return ploss.TaylorCrossEntropyLoss {} end end },
  ["pc-softmax"] = { "PC-softmax cross-entropy, uniform priors 0.1 (Qin et al. 2019; its loss is CE + log 0.1: negative)",
    function(ploss)
      if ploss.PCSoftmaxCrossEntropyLoss then
        return ploss.PCSoftmaxCrossEntropyLoss { lb_proportion = { 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1 } }
      end
    end },
  ["ohem-ce"] = { "OHEM cross-entropy, score_thresh 0.7, n_min = batch/16",
    function(ploss) if ploss.OhemCrossEntropyLoss then return ploss.OhemCrossEntropyLoss {} end end },
  ["ohem-lm"] = { "OHEM large-margin softmax, score_thresh 0.7, lambda 0.3",
    function(ploss) if ploss.OhemLargeMarginLoss then return ploss.OhemLargeMarginLoss {} end end },
  -- the margin losses train 64-d embeddings against learnt class centres (ploss.nn.MarginSoftmax)
  ["arcface"] = { "ArcFace, s 16, m 0.3, on normalised 64-d embeddings and class centres (Deng et al. 2019)",
    function(ploss) if ploss.ArcFaceLoss then return { margin_head = ploss.ArcFaceLoss { s = 16, m = 0.3 } } end end },
  ["amsoftmax"] = { "AM-softmax / CosFace, s 16, m 0.2, on normalised 64-d embeddings and class centres (Wang et al. 2018)",
    function(ploss) if ploss.AMSoftmaxLoss then return { margin_head = ploss.AMSoftmaxLoss { s = 16, m = 0.2 } } end end },
}

---------------------------------------------------------------------------------------
-- Options
---------------------------------------------------------------------------------------

local function die(msg)
  io.stderr:write("fashion_mnist: ", msg, "\n")
  os.exit(1)
end

local function parse_args(argv)
  local o = { loss = "ce", epochs = 3, optim = "sgd", activation = "mish", batch_size = 256,
              device = "auto", seed = 1, data = "/usr/share/datasets/fashion-mnist", out = "out",
              plot = true }
  local numeric = { epochs = true, lr = true, batch_size = true, seed = true, limit = true }
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--help" or a == "-h" then
      print(usage)
      os.exit(0)
    elseif a == "--no-plot" then
      o.plot = false
    elseif a == "--ema" then
      o.ema = true
    elseif a:match("^%-%-no%-plot=") or a:match("^%-%-ema=") then
      die(a:match("^(%-%-[%w%-]+)=") .. " takes no value (it is a switch: give it alone)")
    else
      local key, val = a:match("^%-%-([%w%-]+)=(.*)$")
      if not key then
        key = a:match("^%-%-([%w%-]+)$")
        if not key then die("unexpected argument '" .. a .. "'\n" .. usage) end
        i = i + 1
        val = argv[i]
      end
      local name = key
      key = key:gsub("%-", "_")
      local known = { loss = 1, epochs = 1, lr = 1, optim = 1, activation = 1, batch_size = 1, device = 1,
                      seed = 1, limit = 1, data = 1, out = 1 }
      if not known[key] then die("unknown option --" .. name .. "\n" .. usage) end
      if val == nil then die("--" .. name .. " needs a value") end
      if numeric[key] then
        -- decimal only (tonumber would take 0x10), finite; lr > 0, the others integers below 2^53
        local v = val:match("^[+-]?[%d.]+[eE]?[+-]?%d*$") and tonumber(val)
        local bad = not v or v ~= v or v == math.huge
        if key == "lr" then
          bad = bad or not (v > 0)
        else
          bad = bad or v < 0 or v ~= math.floor(v) or v >= 2 ^ 53
        end
        if bad then
          die("--" .. name .. ": expected a " .. (key == "lr" and "positive finite number" or
            (key == "epochs" or key == "batch_size" or key == "limit") and "positive integer" or
            "non-negative integer") .. ", got '" .. val .. "'")
        end
        val = v
      end
      o[key] = val
    end
    i = i + 1
  end
  if o.batch_size < 1 then die("--batch-size: expected at least 1") end
  if o.device ~= "auto" and o.device ~= "cpu" and o.device ~= "cuda" and not o.device:match("^cuda:%d+$") then
    die("--device: expected auto, cpu, cuda or cuda:N, got '" .. o.device .. "'")
  end
  if o.epochs < 1 then die("--epochs: expected at least 1 (no epoch trains or evaluates anything)") end
  if o.optim ~= "sgd" and o.optim ~= "adam" then die("--optim: expected sgd or adam, got '" .. o.optim .. "'") end
  o.lr = o.lr or (o.optim == "sgd" and 0.05 or 0.001)
  return o
end

local opt = parse_args(arg)

local ok_ploss, ploss = pcall(require, "ploss")
if not ok_ploss then
  die("cannot load ploss (" .. tostring(ploss) .. ");\n  build it and `source tools/env.sh build` first " ..
    "(tools/quickstart.sh does both)")
end
local F = ploss.F

local function list_criteria()
  local names = {}
  for name in pairs(criteria) do names[#names + 1] = name end
  table.sort(names)
  local lines = {}
  for _, name in ipairs(names) do
    local have = criteria[name][2](ploss) ~= nil
    lines[#lines + 1] = string.format("  %-14s %s%s", name, criteria[name][1], have and "" or " (not in this build)")
  end
  return table.concat(lines, "\n")
end

if opt.loss == "list" then
  print("criteria for --loss:\n" .. list_criteria())
  os.exit(0)
end
if not criteria[opt.loss] then die("--loss: unknown criterion '" .. opt.loss .. "'; known:\n" .. list_criteria()) end
local crit = criteria[opt.loss][2](ploss)
if not crit then die("--loss " .. opt.loss .. ": this build of ploss lacks it") end

local act_modules = { mish = "Mish", swish = "Swish", hard_swish = "HardSwish" }
if not act_modules[opt.activation] then
  die("--activation: expected mish, swish or hard_swish, got '" .. opt.activation .. "'")
end

if opt.device == "auto" then
  opt.device = ploss.cuda_available() and "cuda" or "cpu"
elseif opt.device ~= "cpu" and not ploss.cuda_available() then
  die(string.format("--device %s: no CUDA device is usable (library built with CUDA: %s, devices visible: %d)",
    opt.device, tostring(ploss.C.ploss_built_with_cuda() ~= 0), ploss.cuda_device_count()))
end
local device = ploss.parse_device(opt.device)

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Under tools/launch.sh: a communicator over the ranks (the centres sharded, the MLP
-- data-parallel); rank r uses cuda:r on a GPU.
local comm, rank, ranks = nil, 0, 1
if os.getenv("PLOSS_WORLD_SIZE") then
  if not (crit and type(crit) == "table" and crit.margin_head) then
    die("--loss " .. opt.loss .. ": several ranks (tools/launch.sh) shard the class centres of a margin loss; " ..
      "use --loss arcface or --loss amsoftmax")
  end
  comm = ploss.comm.init_from_env { device = device == "cpu" and "cpu" or "cuda" }
  rank, ranks, device = comm:rank(), comm:size(), comm:device()
  if ranks > 10 then die("several ranks: at most 10 (one class each)") end
  if opt.batch_size < ranks then die("--batch-size: at least one image per rank (" .. ranks .. " ranks)") end
end

---------------------------------------------------------------------------------------
-- Clock and terminal
---------------------------------------------------------------------------------------

if not pcall(ffi.typeof, "struct ploss_example_timespec") then
  ffi.cdef [[
    struct ploss_example_timespec { long tv_sec; long tv_nsec; };
    int clock_gettime(int clock_id, struct ploss_example_timespec *tp);
    int isatty(int fd);
  ]]
end
local ts = ffi.new("struct ploss_example_timespec")
local function now()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end
local tty = ffi.C.isatty(1) == 1 and rank == 0
if rank > 0 then print = function() end end -- rank 0 reports for every rank

---------------------------------------------------------------------------------------
-- Data: gzipped IDX files through zlib
---------------------------------------------------------------------------------------

if not pcall(ffi.typeof, "struct ploss_example_gz") then
  ffi.cdef [[
    struct ploss_example_gz;
    struct ploss_example_gz *gzopen(const char *path, const char *mode);
    int gzread(struct ploss_example_gz *file, void *buf, unsigned int len);
    int gzclose(struct ploss_example_gz *file);
    const char *gzerror(struct ploss_example_gz *file, int *errnum);
  ]]
end
local zlib
do
  local ok, lib = pcall(ffi.load, "z")
  if not ok then ok, lib = pcall(ffi.load, "libz.so.1") end
  if not ok then die("cannot load zlib (libz.so.1): install the Debian package zlib1g") end
  zlib = lib
end

-- The IDX file at path: magic 0x0000080X (u8 data), dims, then the bytes.  Returns a
-- uint8_t buffer, the dims and the element count.
local function read_idx(path, ndims)
  local f = io.open(path, "rb")
  if not f then
    die(string.format("%s not found.\n  Install the real Fashion-MNIST with the Debian package dataset-fashion-mnist " ..
      "(apt-get install dataset-fashion-mnist),\n  or pass --data DIR with train-images-idx3-ubyte.gz, " ..
      "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz.", path))
  end
  f:close()
  local gz = zlib.gzopen(path, "rb")
  if gz == nil then die("zlib cannot open " .. path) end
  local function read(buf, n)
    local got = 0
    while got < n do
      local chunk = math.min(n - got, 2 ^ 30)
      local r = zlib.gzread(gz, ffi.cast("uint8_t *", buf) + got, chunk)
      if r <= 0 then
        local errnum = ffi.new("int[1]")
        local msg = ffi.string(zlib.gzerror(gz, errnum))
        zlib.gzclose(gz)
        die(string.format("%s: truncated or corrupt (read %d of %d bytes%s)", path, got, n,
          msg ~= "" and (": " .. msg) or ""))
      end
      got = got + r
    end
  end
  local header = ffi.new("uint8_t[?]", 4 + 4 * ndims)
  read(header, 4 + 4 * ndims)
  local function be32(off)
    return ((header[off] * 256 + header[off + 1]) * 256 + header[off + 2]) * 256 + header[off + 3]
  end
  if be32(0) ~= 0x800 + ndims then
    zlib.gzclose(gz)
    die(string.format("%s: not an IDX file of %d-d u8 data (magic 0x%08x)", path, ndims, be32(0)))
  end
  local dims, count = {}, 1
  for d = 1, ndims do
    dims[d] = be32(4 * d)
    count = count * dims[d]
  end
  local buf = ffi.new("uint8_t[?]", count)
  read(buf, count)
  zlib.gzclose(gz)
  return buf, dims, count
end

local function load_split(prefix)
  local images, idims = read_idx(opt.data .. "/" .. prefix .. "-images-idx3-ubyte.gz", 3)
  local labels, ldims = read_idx(opt.data .. "/" .. prefix .. "-labels-idx1-ubyte.gz", 1)
  if idims[1] ~= ldims[1] or idims[2] ~= 28 or idims[3] ~= 28 then
    die(string.format("%s/%s-*: %d images of %dx%d for %d labels; expected 28x28 images, one label each",
      opt.data, prefix, idims[1], idims[2], idims[3], ldims[1]))
  end
  return { images = images, labels = labels, n = idims[1] }
end

local t_load = now()
local train, test = load_split("train"), load_split("t10k")
local n_train = opt.limit and math.min(opt.limit, train.n) or train.n
if n_train < 1 then die("--limit: expected at least 1 image") end
local load_seconds = now() - t_load

-- the output folder once the data has loaded (a wrong --data leaves no folder behind) and
-- before the training, not after it: one that cannot be written is told now
do
  os.execute("mkdir -p -- " .. shell_quote(opt.out) .. " 2>/dev/null")
  local probe = string.format("%s/.fashion_mnist-%s-%d.tmp", opt.out, os.getenv("PLOSS_RANK") or "0", os.time())
  local f = io.open(probe, "w")
  if not f then die("--out " .. opt.out .. ": cannot write a file there") end
  f:close()
  os.remove(probe)
end

---------------------------------------------------------------------------------------
-- Batches: pixels scaled to [0, 1] and standardised with the training set's mean and
-- standard deviation (0.2860, 0.3530), labels as i64
---------------------------------------------------------------------------------------

local D, CLASSES = 784, 10
local pixel = ffi.new("float[256]")
for v = 0, 255 do pixel[v] = (v / 255 - 0.2860) / 0.3530 end

local host_x, host_y, dev_x, dev_y = {}, {}, {}, {}
-- Device tensors x (n×784, f32) and y (n, i64) for samples order[first .. first+n-1].
local function make_batch(split, order, first, n)
  local hx = host_x[n] or ploss.empty({ n, D })
  local hy = host_y[n] or ploss.empty({ n }, { dtype = "i64" })
  host_x[n], host_y[n] = hx, hy
  local px = ffi.cast("float *", hx:dl().data)
  local py = ffi.cast("int64_t *", hy:dl().data)
  for r = 0, n - 1 do
    local idx = order and order[first + r] or (first + r)
    local src = split.images + idx * D
    local dst = px + r * D
    for k = 0, D - 1 do dst[k] = pixel[src[k]] end
    py[r] = split.labels[idx]
  end
  if device == "cpu" then return hx, hy end
  local dx = dev_x[n] or ploss.empty({ n, D }, { device = device })
  local dy = dev_y[n] or ploss.empty({ n }, { dtype = "i64", device = device })
  dev_x[n], dev_y[n] = dx, dy
  return dx:copy(hx), dy:copy(hy)
end

-- A seeded permutation of 0 .. n-1 (Fisher–Yates; xorshift64* so that it does not depend
-- on the Lua implementation's math.random).
local rng_state = ffi.new("uint64_t[1]", 0x9E3779B97F4A7C15ULL + opt.seed)
local function rand_below(n)
  local x = rng_state[0]
  x = bit.bxor(x, bit.rshift(x, 12))
  x = bit.bxor(x, bit.lshift(x, 25))
  x = bit.bxor(x, bit.rshift(x, 27))
  rng_state[0] = x
  return tonumber((x * 0x2545F4914F6CDD1DULL) % n)
end
local function permutation(n)
  local p = {}
  for i = 0, n - 1 do p[i] = i end
  for i = n - 1, 1, -1 do
    local j = rand_below(i + 1)
    p[i], p[j] = p[j], p[i]
  end
  return p
end

---------------------------------------------------------------------------------------
-- Model, optimiser
---------------------------------------------------------------------------------------

ploss.manual_seed(opt.seed)
local fc1 = ploss.nn.Linear(D, 256, { init = "he", device = device, input_grad = false })
local act = ploss.nn[act_modules[opt.activation]] { inplace = true }
-- a margin loss: the network ends in 64-d embeddings, and a head owns the class centres
local head
local out_features = crit.margin_head and 64 or CLASSES
local fc2 = ploss.nn.Linear(256, out_features, { init = "xavier", device = device })
local model = ploss.nn.Sequential { fc1, act, fc2 }
local params, grads = model:parameters()
local mlp_grads = { unpack(grads) } -- summed over the ranks before each step (several ranks)
-- several ranks: rank r holds the centres of classes offsets[r] … offsets[r] + blocks[r] − 1
local blocks, offsets = { [0] = CLASSES }, { [0] = 0 }
for r = 0, ranks - 1 do
  blocks[r] = math.floor(CLASSES / ranks) + (r < CLASSES % ranks and 1 or 0)
  offsets[r] = r == 0 and 0 or offsets[r - 1] + blocks[r - 1]
end
if crit.margin_head then
  local margin = crit.margin_head
  if comm then
    -- the same criterion, its classes sharded; each rank's centres drawn from its own seed
    local d, o = margin._description, { comm = comm, reduction = margin.reduction }
    for _, option in ipairs(d.lua_options) do
      if option.name ~= "comm" then o[option.name] = margin[option.name] end
    end
    margin = ploss[d.criterion](o)
    ploss.manual_seed(opt.seed * 1000 + rank)
  end
  head = ploss.nn.MarginSoftmax { out_features, blocks[rank], criterion = margin, device = device }
  crit = head -- head(embeddings, labels) → loss, ∂loss/∂embeddings
  local hp, hg = head:parameters()
  params[#params + 1], grads[#grads + 1] = hp[1], hg[1]
end
local optimizer
if opt.optim == "sgd" then
  optimizer = ploss.optim.SGD(params, grads, { lr = opt.lr, momentum = 0.9 })
else
  optimizer = ploss.optim.Adam(params, grads, { lr = opt.lr })
end
-- --ema: averages of the weights, updated after each step and swapped in to evaluate
local ema = opt.ema and ploss.optim.EMA(params, { decay = 0.999 }) or nil

local function evaluate(split)
  local correct, bs = 0, 1000
  for first = 0, split.n - 1, bs do
    local n = math.min(bs, split.n - first)
    local x = make_batch(split, nil, first, n)
    local out = model:forward(x)
    if head then out = head:forward(out) end -- the cosine with each centre
    local pred
    if comm then
      -- every rank's cosines with its block, padded to the widest block, gathered:
      -- row q·widest + j of the gathered is class offsets[q] + j
      local widest = blocks[0]
      local mine = ploss.full({ widest, n }, -math.huge, { device = device })
      mine:narrow(1, 1, blocks[rank]):copy(out:t())
      local all = comm:all_gather(mine):t():contiguous()
      pred = ploss.argmax(all):flat()
      for r = 1, n do
        local k = pred[r]
        pred[r] = offsets[math.floor(k / widest)] + k % widest
      end
    else
      pred = ploss.argmax(out):flat()
    end
    for r = 1, n do
      if pred[r] == split.labels[first + r - 1] then correct = correct + 1 end
    end
  end
  return correct / split.n
end

---------------------------------------------------------------------------------------
-- Training
---------------------------------------------------------------------------------------

local function mib(bytes) return bytes / 2 ^ 20 end

local function progress(epoch, done, total, loss_sum, steps, t0)
  local width = 30
  local fill = math.floor(width * done / total)
  local rate = done * opt.batch_size / math.max(now() - t0, 1e-9)
  io.stdout:write(string.format("\r  epoch %d/%d [%s%s] %3d%%  loss %.4f  %6.0f img/s ", epoch, opt.epochs,
    string.rep("=", fill), string.rep(" ", width - fill), math.floor(100 * done / total),
    loss_sum / math.max(steps, 1), rate))
  io.stdout:flush()
end

print(string.format("Fashion-MNIST: %d training images%s, %d test images (%s, read in %.2f s)",
  n_train, n_train < train.n and (" (of " .. train.n .. ")") or "", test.n, opt.data, load_seconds))
print(string.format("model: 784 -> 256 (%s) -> %d, batch %d, %s lr %g%s, loss %s (%s), device %s, seed %d",
  opt.activation, out_features, opt.batch_size, opt.optim, opt.lr,
  (opt.optim == "sgd" and " momentum 0.9" or "") .. (opt.ema and ", EMA of the weights" or ""),
  opt.loss, tostring(crit), device, opt.seed))
if comm then
  print(string.format("ranks: %d (tools/launch.sh): the MLP data-parallel, the class centres sharded (%s classes " ..
    "per rank), each rank %d of every %d images", ranks, table.concat(blocks, "/", 0, ranks - 1),
    math.floor(opt.batch_size / ranks), opt.batch_size))
end

local rows = {}
local batch_losses = {} -- every batch's loss, in training order
-- the batches of an epoch: several ranks leave out a last batch of fewer images than ranks
local steps_per_epoch = math.ceil(n_train / opt.batch_size)
if n_train % opt.batch_size ~= 0 and n_train % opt.batch_size < ranks then steps_per_epoch = steps_per_epoch - 1 end
for epoch = 1, opt.epochs do
  collectgarbage("collect") -- free last epoch's dropped buffers so the peak is this epoch's
  ploss.reset_peak_memory(device)
  local order = permutation(n_train)
  local t0 = now()
  local loss_sum, steps = 0, 0
  for first = 0, n_train - 1, opt.batch_size do
    local n = math.min(opt.batch_size, n_train - first)
    -- several ranks: rank r takes its share of the batch (a remainder of fewer rows than
    -- ranks is left out), and the loss is that of the whole batch
    local share = math.floor(n / ranks)
    if share == 0 then break end
    local x, y = make_batch(train, order, first + rank * share, share)
    local logits = model:forward(x)
    local loss, grad = crit(logits, y) -- fused: the loss and ∂(mean loss)/∂logits
    model:backward(x, grad)
    if comm then
      for _, g in ipairs(mlp_grads) do comm:all_reduce(g) end
    end
    optimizer:step()
    if ema then ema:update() end
    loss_sum, steps = loss_sum + loss, steps + 1
    batch_losses[#batch_losses + 1] = loss
    if tty and (steps % 10 == 0 or steps == steps_per_epoch) then
      progress(epoch, steps, steps_per_epoch, loss_sum, steps, t0)
    elseif not tty and steps_per_epoch >= 8 and steps % math.floor(steps_per_epoch / 4) == 0
        and steps < steps_per_epoch then
      print(string.format("  epoch %d/%d: %d/%d batches, loss %.4f", epoch, opt.epochs, steps, steps_per_epoch,
        loss_sum / steps))
    end
  end
  ploss.synchronize(device)
  local seconds = now() - t0
  if tty then io.stdout:write("\n") end
  if ema then ema:apply() end
  local accuracy = evaluate(test)
  if ema then ema:restore() end
  local peak = ploss.memory_stats(device).peak_bytes
  local row = { epoch = epoch, train_loss = loss_sum / steps, test_accuracy = accuracy,
                images_per_s = n_train / seconds, peak_bytes = peak, seconds = seconds }
  rows[#rows + 1] = row
  print(string.format("epoch %d/%d  train loss %.4f  test accuracy %.2f%%  %.0f images/s  %.2f s  peak %s memory %.1f MiB",
    epoch, opt.epochs, row.train_loss, 100 * accuracy, row.images_per_s, seconds, device, mib(peak)))
end

---------------------------------------------------------------------------------------
-- CSV and plot (rank 0)
---------------------------------------------------------------------------------------

if comm then
  comm:destroy()
  if rank > 0 then os.exit(0) end
end

local function exists_program(name)
  local r = os.execute("command -v " .. name .. " >/dev/null 2>&1")
  return r == 0 or r == true
end

-- the run's settings; --limit and --batch-size only when they change the run
local stem = string.format("%s/fashion_mnist-%s-%s-%s-lr%g-seed%d-e%d%s%s%s-%s", opt.out, opt.loss,
  opt.activation, opt.optim, opt.lr, opt.seed, opt.epochs,
  n_train < train.n and ("-n" .. n_train) or "",
  opt.batch_size ~= 256 and ("-b" .. opt.batch_size) or "",
  opt.ema and "-ema" or "",
  comm and ("r" .. ranks .. "-" .. (device:match("^cuda") and "cuda" or "cpu")) or (device:gsub(":", "")))

local function write_csv(path, header, lines)
  local f = io.open(path, "w")
  if not f then die("cannot write " .. path) end
  f:write(header, "\n")
  for _, line in ipairs(lines) do f:write(line, "\n") end
  f:close()
end

local csv_path = stem .. ".csv"
local lines = {}
for i, r in ipairs(rows) do
  lines[i] = string.format("%d,%.6f,%.6f,%.1f,%d,%.3f", r.epoch, r.train_loss, r.test_accuracy,
    r.images_per_s, r.peak_bytes, r.seconds)
end
write_csv(csv_path, "epoch,train_loss,test_accuracy,images_per_s,peak_bytes,seconds", lines)
print("per-epoch figures: " .. csv_path)

-- per batch: its step (from 1), and its place in epochs (batch k of epoch e at
-- e - 1 + k / batches per epoch: the last batch of an epoch at the epoch's number, where
-- the per-epoch figures are plotted)
local batches_path = stem .. "-batches.csv"
lines = {}
for i, loss in ipairs(batch_losses) do
  local e, k = math.floor((i - 1) / steps_per_epoch), (i - 1) % steps_per_epoch + 1
  lines[i] = string.format("%d,%.6f,%.6f", i, e + k / steps_per_epoch, loss)
end
write_csv(batches_path, "step,epoch,train_loss", lines)
print("per-batch training loss: " .. batches_path)

if opt.plot and #rows > 0 then
  if not exists_program("gnuplot") then
    print("plot skipped: gnuplot not found (install the Debian package gnuplot-nox)")
  else
    local png_path = stem .. ".png"
    local script = stem .. ".gp"
    -- the settings that name the run's files (the plots of two runs can be told apart)
    local title = string.format("Fashion-MNIST, MLP 784-256-10 (%s): loss %s, %s lr %g%s%s, batch %d%s, %s",
      opt.activation, opt.loss, opt.optim, opt.lr, opt.optim == "sgd" and " momentum 0.9" or "",
      opt.ema and ", EMA" or "", opt.batch_size, opt.limit and (", " .. n_train .. " images") or "", device)
    local g = assert(io.open(script, "w"))
    g:write(string.format([[
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) { set terminal pngcairo size 1120,460 } else { set terminal png size 1120,460 }
set output '%s'
set datafile separator ','
set grid
set xlabel 'epoch'
set xrange [0:%d]
set xtics 1
set key top right
set multiplot layout 1,2 title '%s'
set ylabel 'training loss'
plot '%s' using 2:3 with lines lw 1 lc rgb '#9ecae1' title 'per batch', \
     '%s' using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'epoch mean'
set ylabel 'test accuracy (%%)'
set key bottom right
plot '%s' using 1:($3*100) with linespoints lw 2 pt 7 lc rgb '#d95f02' title 'after each epoch'
unset multiplot
]], png_path, opt.epochs, title:gsub("'", "''"), batches_path, csv_path, csv_path))
    g:close()
    local r = os.execute("gnuplot " .. shell_quote(script) .. " 2>" .. shell_quote(stem .. ".gnuplot.log"))
    if r == 0 or r == true then
      os.remove(script)
      os.remove(stem .. ".gnuplot.log")
      print("plot: " .. png_path)
    else
      print("plot failed: gnuplot reported an error (see " .. stem .. ".gnuplot.log; script " .. script .. ")")
    end
  end
end
if #rows > 0 then
  print(string.format("final test accuracy: %.4f", rows[#rows].test_accuracy))
end
