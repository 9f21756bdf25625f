-- spec/sharded_worker.lua MODE [DEVICE] [DTYPE] — one rank of the sharded-loss specs, started
-- by tools/launch.sh (spec/sharded_spec.lua, spec/cuda_sharded_spec.lua).  Every rank builds
-- the same global batch (R·n rows, C classes in uneven blocks, some labels ignored) from fixed
-- seeds, computes the single-device loss on all of it as the reference (on the CPU, f64),
-- then its own sharded call on DEVICE ('cpu' or 'cuda': cuda:<rank>) and DTYPE, and compares.
-- Prints "rank R: MODE ok" when every check passed; a failed check is a Lua error.
--   margin     AM-softmax, ArcFace, the combined margin: every reduction, forward, backward
--              (with an upstream gradient) and fused, scale_grad_x_by_ranks
--   partial_fc Partial FC: each rank keeps its block's batch classes plus drawn ones
--              (max(2, ⌊C_r·rate⌋ + 1) in all); loss and gradients equal the single-device loss
--              over the kept classes of every rank
--   refusal    on rank 1 only: a label out of range, a bad weight, another row count, another
--              tile_rows, another upstream gradient, another temperature (InfoNCE), InfoNCE on one
--              rank and a margin loss on the others: an error
--              on every rank each time, then a good call
--   lua_refusal on rank 1 only, a call refused in Lua before the ranks meet (arg 4: labels as
--              a Lua list, a missing argument of the functional form, a bad PartialFCLoss
--              field): the communicator is aborted, so every rank's next call fails at once,
--              naming rank 1, instead of pairing with rank 1's next call
--   info_nce   InfoNCE with each rank's rows of both views: symmetric or not, normalised or
--              not, every reduction, forward, backward (with an upstream gradient) and fused
io.stdout:setvbuf("line")
local ploss = require "ploss"

local mode, device, dtype = arg[1], arg[2] or "cpu", arg[3] or "f64"
local rank, size = tonumber(os.getenv("PLOSS_RANK")), tonumber(os.getenv("PLOSS_WORLD_SIZE"))
local comm = ploss.comm.init_from_env { device = device, timeout = tonumber(os.getenv("PLOSS_COMM_TIMEOUT") or "60") }
device = comm:device()
local R = size
local tol = dtype == "f64" and 1e-11 or dtype == "f32" and 2e-5 or 2e-2

local function say(...) print(string.format("rank %d: ", rank) .. string.format(...)) end

-- The largest |a − k·b| relative to max(1, |k·b|) over two tensors' values (k: 1 if nil).
local function close(a, b, what, k)
  local function values(t) return type(t) == "number" and { t } or t:flat() end
  local x, y = values(a), values(b)
  for i = 1, #y do y[i] = y[i] * (k or 1) end
  if #x ~= #y then error(string.format("%s: %d values, expected %d", what, #x, #y), 2) end
  local worst, at = 0, 0
  for i = 1, #y do
    local d = math.abs(x[i] - y[i]) / math.max(1, math.abs(y[i]))
    if not (d <= worst) then worst, at = d, i end
  end
  if worst > tol then
    error(string.format("%s: value %d is %.12g, expected %.12g (relative error %.3g > %.3g)", what, at, x[at], y[at],
      worst, tol), 2)
  end
end

-- The global batch: n rows per rank (PLOSS_SHARD_ROWS, default 6), class blocks of sizes
-- base + 2q (rank q; base from PLOSS_SHARD_BASE, default 3), or base·(q + 1) with
-- PLOSS_SHARD_UNEVEN=1 (blocks so unlike that a rank's own size would give it other tiles
-- of rows than the others), D features.  PLOSS_SHARD_TILE_ROWS: the margin losses' tile_rows.
local n, D = tonumber(os.getenv("PLOSS_SHARD_ROWS") or "6"), 5
local base = tonumber(os.getenv("PLOSS_SHARD_BASE") or "3")
local uneven = os.getenv("PLOSS_SHARD_UNEVEN") == "1"
local blocks, offsets, C = {}, {}, 0
for q = 0, R - 1 do
  blocks[q] = uneven and base * (q + 1) or base + 2 * q
  offsets[q] = C
  C = C + blocks[q]
end
local X = ploss.randn({ R * n, D }, { seed = 11, dtype = "f64" })
local W = ploss.randn({ C, D }, { seed = 12, dtype = "f64" })
local labels = {}
for i = 1, R * n do labels[i] = i % 5 == 0 and -100 or (i * 7 + 3) % C end
local Y = ploss.tensor(labels, { dtype = "i64" })
local G = ploss.randn({ R * n }, { seed = 13, dtype = "f64" })

-- This rank's share of a global tensor (rows of dim 1), on the device in `dt`.
local function mine(t, first, count, dt)
  return t:narrow(1, first + 1, count):contiguous():to(device, dt or t:dtype())
end
local x = mine(X, rank * n, n, dtype)
local w = mine(W, offsets[rank], blocks[rank], dtype)
local y = mine(Y, rank * n, n)
-- the reference sees the inputs as rounded to dtype
local Xr, Wr = X:to("cpu", dtype):to("cpu", "f64"), W:to("cpu", dtype):to("cpu", "f64")

-- the margin losses' tile_rows (PLOSS_SHARD_TILE_ROWS, default 0: the backend's budget)
local tile_rows = tonumber(os.getenv("PLOSS_SHARD_TILE_ROWS") or "0")
local losses = {
  { "AMSoftmaxLoss", { s = 10, m = 0.3, tile_rows = tile_rows } },
  { "ArcFaceLoss", { s = 8, m = 0.4, tile_rows = tile_rows } },
  { "CombinedMarginLoss", { s = 9, m1 = 1.2, m2 = 0.2, m3 = 0.1, tile_rows = tile_rows } },
}
local function with(opts, extra)
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  for k, v in pairs(extra) do o[k] = v end
  return o
end

if mode == "margin" then
  for _, case in ipairs(losses) do
    local name, opts = case[1], case[2]
    for _, red in ipairs { "mean", "sum", "none" } do
      local ref = ploss[name](with(opts, { reduction = red }))
      local sh = ploss[name](with(opts, { reduction = red, comm = comm }))
      local what = string.format("%s %s %s", name, red, dtype)
      -- fused
      local l0, gx0, gw0 = ref(Xr, Wr, Y)
      local l, gx, gw = sh(x, w, y)
      close(l, red == "none" and l0:narrow(1, rank * n + 1, n) or l0, what .. " fused loss")
      close(gx, gx0:narrow(1, rank * n + 1, n), what .. " fused grad_x")
      close(gw, gw0:narrow(1, offsets[rank] + 1, blocks[rank]), what .. " fused grad_weight")
      -- forward
      close(sh:forward(x, w, y), red == "none" and l0:narrow(1, rank * n + 1, n) or l0, what .. " forward")
      -- backward with an upstream gradient (per row for 'none': each rank's own rows)
      local up0 = red == "none" and G or 0.75
      local up = red == "none" and mine(G, rank * n, n, l:dtype()) or 0.75
      local bx0, bw0 = ref:backward(Xr, Wr, Y, up0)
      local bx, bw = sh:backward(x, w, y, up)
      close(bx, bx0:narrow(1, rank * n + 1, n), what .. " backward grad_x")
      close(bw, bw0:narrow(1, offsets[rank] + 1, blocks[rank]), what .. " backward grad_weight")
    end
    -- x, the labels and a 'none' backward's upstream gradients as non-contiguous views
    -- (gathered through a dense copy, one staging buffer in turn)
    do
      local function strided(t) -- t's values as column 1 of an n×2 tensor
        local v, rows = t:to("cpu"):flat(), {}
        for i = 1, #v do rows[i] = { v[i], v[i] } end
        return ploss.tensor(rows, { dtype = t:dtype() }):to(device):select(2, 1)
      end
      local xt, ys = x:t():contiguous():t(), strided(y)
      assert(not xt:is_contiguous() and not ys:is_contiguous())
      local l0, gx0 = ploss[name](opts)(Xr, Wr, Y)
      local l, gx = ploss[name](with(opts, { comm = comm }))(xt, w, ys)
      close(l, l0, name .. " non-contiguous x and labels: loss")
      close(gx, gx0:narrow(1, rank * n + 1, n), name .. " non-contiguous x and labels: grad_x")
      local none = with(opts, { reduction = "none" })
      local bx0 = ploss[name](none):backward(Xr, Wr, Y, G)
      local up = strided(mine(G, rank * n, n, dtype == "f64" and "f64" or "f32"))
      local bx = ploss[name](with(none, { comm = comm })):backward(xt, w, ys, up)
      close(bx, bx0:narrow(1, rank * n + 1, n), name .. " non-contiguous 'none' upstream gradients: grad_x")
    end
    -- the gradient of x times the ranks
    local sh = ploss[name](with(opts, { comm = comm, scale_grad_x_by_ranks = true }))
    local _, gx0 = ploss[name](opts)(Xr, Wr, Y)
    local _, gx = sh(x, w, y)
    close(gx, gx0:narrow(1, rank * n + 1, n), name .. " scale_grad_x_by_ranks", R)
  end
  say("margin ok")

elseif mode == "partial_fc" then
  local rate = 0.3
  for _, case in ipairs(losses) do
    local name, opts = case[1], case[2]
    local pfc = ploss.PartialFCLoss { margin = ploss[name](opts), sample_rate = rate, seed = 5, comm = comm }
    local l, gx, gw = pfc(x, w, y)
    -- the kept centres of this block: a nonzero gradient row (the batch's classes among them)
    local kept, rows = {}, gw:to("cpu", "f64"):totable()
    local count, batch = 0, {}
    for _, v in ipairs(labels) do
      if v >= offsets[rank] and v < offsets[rank] + blocks[rank] then batch[v - offsets[rank]] = true end
    end
    local nbatch = 0
    for _ in pairs(batch) do nbatch = nbatch + 1 end
    for j = 1, blocks[rank] do
      local nz = false
      for _, v in ipairs(rows[j]) do nz = nz or v ~= 0 end
      kept[j] = nz and 1 or 0
      count = count + kept[j]
      if batch[j - 1] and not nz then error(string.format("%s: class %d of the batch was not kept", name, j - 1)) end
    end
    local want = math.max(nbatch, math.min(blocks[rank], math.max(2, math.floor(blocks[rank] * rate) + 1)))
    if count ~= want then error(string.format("%s: %d classes kept on rank %d, expected %d", name, count, rank, want)) end
    -- every rank's kept flags (padded to the largest block), in class order
    local widest = blocks[R - 1]
    for j = blocks[rank] + 1, widest do kept[j] = 0 end
    local flags = comm:all_gather(ploss.tensor(kept, { dtype = "f64" }):to(device)):to("cpu"):flat()
    local pos, list = {}, {}
    for q = 0, R - 1 do
      for j = 1, blocks[q] do
        if flags[q * widest + j] == 1 then list[#list + 1] = offsets[q] + j; pos[offsets[q] + j - 1] = #list - 1 end
      end
    end
    local Wk = {}
    local Wt = Wr:totable()
    for k, j in ipairs(list) do Wk[k] = Wt[j] end
    local Yk = {}
    for i, v in ipairs(labels) do Yk[i] = v == -100 and -100 or pos[v] end
    local l0, gx0, gwk = ploss[name](opts)(Xr, ploss.tensor(Wk, { dtype = "f64" }), ploss.tensor(Yk, { dtype = "i64" }))
    close(l, l0, name .. " Partial FC loss")
    close(gx, gx0:narrow(1, rank * n + 1, n), name .. " Partial FC grad_x")
    local gwt = gwk:totable()
    local mine_rows = {}
    for j = 1, blocks[rank] do
      local g = pos[offsets[rank] + j - 1]
      mine_rows[j] = g and gwt[g + 1] or { 0, 0, 0, 0, 0 } -- D = 5
    end
    close(gw, ploss.tensor(mine_rows, { dtype = "f64" }), name .. " Partial FC grad_weight")
  end
  say("partial_fc ok")

elseif mode == "info_nce" then
  local K = ploss.randn({ R * n, D }, { seed = 14, dtype = "f64" })
  local Kr = K:to("cpu", dtype):to("cpu", "f64")
  local k = mine(K, rank * n, n, dtype)
  local function slice(t) return t:narrow(1, rank * n + 1, n) end
  for _, sym in ipairs { true, false } do
    for _, norm in ipairs { true, false } do
      for _, red in ipairs { "mean", "sum", "none" } do
        local opts = { temperature = 0.5, symmetric = sym, normalize = norm, reduction = red }
        local ref = ploss.InfoNCELoss(opts)
        local sh = ploss.InfoNCELoss(with(opts, { comm = comm }))
        local what = string.format("InfoNCE symmetric=%s normalize=%s %s %s", tostring(sym), tostring(norm), red, dtype)
        local l0, gq0, gk0 = ref(Xr, Kr)
        local l, gq, gk = sh(x, red == "sum" and k:t():contiguous():t() or k) -- 'sum': a non-contiguous key
        close(l, red == "none" and slice(l0) or l0, what .. " fused loss")
        close(gq, slice(gq0), what .. " fused grad_query")
        close(gk, slice(gk0), what .. " fused grad_key")
        close(sh:forward(x, k), red == "none" and slice(l0) or l0, what .. " forward")
        local up0 = red == "none" and G or 0.75
        local up = red == "none" and mine(G, rank * n, n, l:dtype()) or 0.75
        local bq0, bk0 = ref:backward(Xr, Kr, up0)
        local bq, bk = sh:backward(x, k, up)
        close(bq, slice(bq0), what .. " backward grad_query")
        close(bk, slice(bk0), what .. " backward grad_key")
      end
    end
  end
  say("info_nce ok")

elseif mode == "refusal" then
  local crit = ploss.AMSoftmaxLoss { comm = comm }
  local function expect(fn, fragment, what)
    local ok, err = pcall(fn)
    if ok then error(what .. ": expected an error containing '" .. fragment .. "', got none") end
    if not tostring(err):find(fragment, 1, true) then
      error(what .. ": expected an error containing '" .. fragment .. "', got: " .. tostring(err))
    end
  end
  -- a label outside [0, C) on rank 1: every rank sees it among the gathered labels (CUDA:
  -- every rank's kernel reports it, raised when the loss is read)
  local bad = rank == 1 and ploss.full({ n }, C + 4, { dtype = "i64" }):to(device) or y
  expect(function() crit(x, w, bad) end, "class index " .. (C + 4), "a bad label on rank 1")
  -- a weight of another D on rank 1: rank 1 names weight, the others name rank 1
  local wbad = rank == 1 and ploss.zeros({ blocks[rank], D + 1 }, { dtype = dtype, device = device }) or w
  expect(function() crit(x, wbad, y) end, rank == 1 and "weight" or "rank 1 refused the call", "a bad weight on rank 1")
  -- another row count on rank 1
  local xbad = rank == 1 and x:narrow(1, 1, n - 1):contiguous() or x
  local ybad = rank == 1 and y:narrow(1, 1, n - 1):contiguous() or y
  expect(function() crit(xbad, w, ybad) end, "the ranks disagree on the rows of x", "another row count on rank 1")
  -- another tile_rows on rank 1 (other tiles, other gathers), another upstream gradient
  local tiled = ploss.AMSoftmaxLoss { comm = comm, tile_rows = rank == 1 and 2 or 0 }
  expect(function() tiled(x, w, y) end, "the ranks disagree on opts.tile_rows", "another tile_rows on rank 1")
  expect(function() crit:backward(x, w, y, rank == 1 and 2 or 1) end, "the ranks disagree on the upstream gradient",
    "another upstream gradient on rank 1")
  -- another loss on rank 1 (named, before the options it sets otherwise)
  local mixed = rank == 1 and ploss.ArcFaceLoss { comm = comm } or ploss.AMSoftmaxLoss { comm = comm }
  expect(function() mixed(x, w, y) end, rank == 1 and "the loss: am_softmax on rank 0, arc_face on rank 1"
    or "the loss: arc_face on rank 1, am_softmax on rank " .. rank, "another loss on rank 1")
  -- InfoNCE with another temperature on rank 1: the values as numbers
  local nce = ploss.InfoNCELoss { temperature = rank == 1 and 0.2 or 0.1, comm = comm }
  expect(function() nce(x, x) end, rank == 1 and "opts.temperature: 0.1 on rank 0, 0.2 on rank 1"
    or "opts.temperature: 0.2 on rank 1, 0.1 on rank " .. rank, "another temperature on rank 1")
  -- InfoNCE on rank 1 where the others run a margin loss (records of other facts, one exchange)
  local other = ploss.InfoNCELoss { comm = comm }
  expect(function()
    if rank == 1 then return other(x, x) end
    return crit(x, w, y)
  end, rank == 1 and "the loss: am_softmax on rank 0, info_nce on rank 1"
    or "the loss: info_nce on rank 1, am_softmax on rank " .. rank, "InfoNCE on rank 1, AM-softmax elsewhere")
  -- and the communicator still serves a good call
  local l0 = ploss.AMSoftmaxLoss {}(Xr, Wr, Y)
  close(crit(x, w, y), l0, "the call after the refusals")
  say("refusal ok")
elseif mode == "lua_refusal" then
  local crit = ploss.AMSoftmaxLoss { comm = comm }
  if rank == 1 then
    -- arg[4]: a Lua list for the labels (the criterion), a missing weight (the functional
    -- form: its options one place to the left), a bad field of PartialFCLoss
    local case, ok, err = arg[4] or "list", nil, nil
    if case == "list" then
      ok, err = pcall(crit, x, w, { 0, 1 })
    elseif case == "missing" then
      ok, err = pcall(ploss.F.am_softmax_fused, x, y, { comm = comm })
    else
      -- the margin's own draw option set after it was given: refused at the call
      local margin = ploss.AMSoftmaxLoss {}
      local pfc = ploss.PartialFCLoss { margin = margin, comm = comm }
      margin.sample_rate = 0.5
      ok, err = pcall(pfc, x, w, y)
    end
    local _, aborted = tostring(err):gsub("the communicator was aborted", "")
    assert(not ok and aborted == 1, tostring(err))
  end
  local ok, err = pcall(crit, x, w, y)
  assert(not ok and tostring(err):find("rank 1 called ploss_comm_abort", 1, true), tostring(err))
  say("lua_refusal ok")
else
  error("unknown mode " .. tostring(mode))
end
comm:destroy()
