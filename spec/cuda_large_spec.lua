-- Element counts >= 2^31 on the GPU (suite 'cuda'): 64-bit indexing in the loss
-- kernels, with bf16 tensors (the H200 has 139 GiB; the largest case needs about 22 GiB).
--   * cross_entropy on N×C = (2^16 + 3) × 32771 = 2^31 + 294921 elements, logits = the
--     one-hot of the labels (x_y = 1, else 0): every row's loss is log(C − 1 + e) − 1 and
--     its gradient (e/Z − 1 at the label, 1/Z elsewhere, Z = C − 1 + e, over N for 'mean')
--     is known exactly; rows on both sides of element 2^31 and the last row are read back.
--     The one-hot itself is made by ploss.one_hot on the GPU (its own ≥ 2^31 case).
--   * cross_entropy on (2^16 + 6) × 86016 bf16 (168 KiB rows: clusters of 4 blocks), more
--     rows than the grid has clusters, an ignored row among those a cluster takes second.
--   * sigmoid_focal over 2^31 + 5 elements: constant inputs (the mean equals one element's
--     loss, computed on the CPU) and random inputs ('none' loss and 'sum' gradient elements
--     beyond 2^31 against the CPU on the same values).
--   * cross_entropy and softmax_focal on N×C×H×W = 4×21×5000×5200 (2.18e9 elements, class
--     axis strided by H·W): the 'none' loss and the gradient of sampled pixels of the last
--     image (input offsets > 2^31) against the CPU on the copied pixels.
-- PLOSS_LARGE_SCALE: 'full' (default on a GPU) or 'small' (default in the CPU dry run,
-- PLOSS_CUDA_SPEC_DEVICE=cpu): the same checks at sizes around LIMIT = 2^14 instead of 2^31.
-- spec/run.lua exits 77 without a GPU.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()
local ON_GPU = DEV ~= "cpu"
local SCALE = os.getenv("PLOSS_LARGE_SCALE") or (ON_GPU and "full" or "small")
local FULL = SCALE == "full"
local LIMIT = FULL and 2 ^ 31 or 2 ^ 14

local BF16 = { rtol = 1e-2, atol = 0 }

local function check_close(got, want, rtol, atol, what)
  H.assert_close(got, want, { rtol = rtol, atol = atol, what = what })
end

-- The gradient rows `rows` (1-based) of cross-entropy on one-hot logits of C classes with
-- labels yv (host values; -100 ignored): (e/Z − 1 at the label, 1/Z elsewhere)·scale with
-- Z = C − 1 + e, zero for an ignored row.
local function check_one_hot_grad_rows(g, yv, C, rows, scale, what)
  local Z = C - 1 + math.exp(1)
  for _, r in ipairs(rows) do
    local gr = g:select(1, r):to("cpu", "f64"):flat()
    local want = {}
    for j = 1, C do
      if yv[r] == -100 then want[j] = 0
      else want[j] = ((j - 1 == yv[r]) and (math.exp(1) / Z - 1) or (1 / Z)) * scale end
    end
    check_close(gr, want, BF16.rtol, 0, what .. " row " .. r)
  end
end

describe("64-bit indexing, element counts >= " .. LIMIT .. " (" .. DEV .. ", " .. SCALE .. ")", function()
  it("cross_entropy N×C bf16 on one-hot logits: loss and gradient rows past element " .. LIMIT, function()
    local N, C = FULL and 65539 or 131, FULL and 32771 or 127
    assert(N * C > LIMIT)
    local y = ploss.randint(0, C, { N }, { device = DEV, seed = 5 })
    local x = ploss.one_hot(y, C, { dtype = "bf16" })
    local Z = C - 1 + math.exp(1)
    local row_loss = math.log(Z) - 1
    -- rows: the one holding element LIMIT, the next, and the last (1-based)
    local r0 = math.floor(LIMIT / C) + 1
    local rows = { r0, r0 + 1, N }
    local yv = y:to("cpu"):flat()
    local function check_rows(g, scale, what) check_one_hot_grad_rows(g, yv, C, rows, scale, what) end
    -- one_hot itself past LIMIT
    local oh = x:select(1, N):to("cpu", "f64"):flat()
    for j = 1, C do assert.are.equal((j - 1 == yv[N]) and 1 or 0, oh[j]) end
    -- fused mean
    local loss, g = F.cross_entropy_fused(x, y)
    check_close({ loss }, { row_loss }, 1e-4, 0, "mean loss")
    check_rows(g, 1 / N, "fused mean gradient")
    g:free()
    -- 'none' loss of the rows; the functional backward (sum)
    local ln = F.cross_entropy(x, y, { reduction = "none" })
    local lv = ln:to("cpu"):flat()
    for _, r in ipairs(rows) do check_close({ lv[r] }, { row_loss }, 1e-5, 0, "none loss row " .. r) end
    ln:free()
    local gb = F.cross_entropy_backward(x, y, nil, { reduction = "sum" })
    check_rows(gb, 1, "backward sum gradient")
    gb:free()
    x:free()
  end)

  -- Rows above 160 KiB take a cluster of blocks each, and the grid at most 65536 clusters:
  -- with more rows a cluster takes a second one, after its first row's end-of-row barrier
  -- (arrived at, waited for at the second row's first reduction, or at its end when that row
  -- is ignored).  One-hot logits as above; the rows a cluster takes second include an
  -- ignored one.  CPU dry run: the same checks on a small N×C.
  it("cross_entropy bf16 rows of 168 KiB past the grid's 65536 clusters (a cluster's second row)", function()
    local N, C = FULL and 65536 + 6 or 37, FULL and 86016 or 50
    local y = ploss.randint(0, C, { N }, { device = DEV, seed = 9 })
    local x = ploss.one_hot(y, C, { dtype = "bf16" })
    local ign = N - 2 -- 1-based: a row a cluster takes second
    y:narrow(1, ign, 1):fill(-100)
    local Z = C - 1 + math.exp(1)
    local row_loss = math.log(Z) - 1
    local yv = y:to("cpu"):flat()
    local rows = { 1, 2, N - 5, N - 4, N - 3, ign, N - 1, N }
    local function check_rows(g, scale, what) check_one_hot_grad_rows(g, yv, C, rows, scale, what) end
    local loss, g = F.cross_entropy_fused(x, y)
    check_close({ loss }, { row_loss }, 1e-4, 0, "mean loss")
    check_rows(g, 1 / (N - 1), "fused mean gradient")
    g:free()
    local ln = F.cross_entropy(x, y, { reduction = "none" })
    local lv = ln:to("cpu"):flat()
    for _, r in ipairs(rows) do
      check_close({ lv[r] }, { r == ign and 0 or row_loss }, 1e-5, 0, "none loss row " .. r)
    end
    ln:free()
    x:free()
  end)

  it("sigmoid_focal over LIMIT + 5 bf16 elements: constant and random inputs", function()
    local n = LIMIT + 5
    -- constant input: x = 0.5, y = 1; the mean is one element's loss
    local x = ploss.full({ n }, 0.5, { dtype = "bf16", device = DEV })
    local yt = ploss.full({ n }, 1, { dtype = "bf16", device = DEV })
    local xs = ploss.full({ 8 }, 0.5, { dtype = "f64" })
    local ys = ploss.full({ 8 }, 1, { dtype = "f64" })
    local ref_mean = F.sigmoid_focal(xs, ys)
    local _, ref_g = F.sigmoid_focal_fused(xs, ys, { reduction = "sum" })
    local m, g = F.sigmoid_focal_fused(x, yt, { reduction = "sum", scale = 1 })
    check_close({ m / n }, { ref_mean }, 1e-4, 0, "constant input: sum / n")
    local tail = g:narrow(1, n - 7, 8):to("cpu", "f64"):flat()
    check_close(tail, ref_g:flat(), BF16.rtol, 0, "constant input: last 8 gradient elements")
    local mid = g:narrow(1, LIMIT - 3, 8):to("cpu", "f64"):flat()
    check_close(mid, ref_g:flat(), BF16.rtol, 0, "constant input: gradient around element LIMIT")
    g:free()
    check_close({ F.sigmoid_focal(x, yt) }, { ref_mean }, 1e-4, 0, "constant input: mean")
    -- random input: 'none' loss and 'sum' gradient past LIMIT against the CPU
    local xr = ploss.randn({ n }, { dtype = "bf16", device = DEV, seed = 9, std = 3 })
    local yr = ploss.rand({ n }, { dtype = "bf16", device = DEV, seed = 10 })
    local ln = F.sigmoid_focal(xr, yr, { reduction = "none" })
    local _, gr = F.sigmoid_focal_fused(xr, yr, { reduction = "sum" })
    for _, start in ipairs { LIMIT - 2, n - 6 } do
      local xs2 = xr:narrow(1, start, 7):to("cpu", "f64")
      local ys2 = yr:narrow(1, start, 7):to("cpu", "f64")
      local lref = F.sigmoid_focal(xs2, ys2, { reduction = "none" }):flat()
      local _, gref = F.sigmoid_focal_fused(xs2, ys2, { reduction = "sum" })
      check_close(ln:narrow(1, start, 7):to("cpu", "f64"):flat(), lref, 1e-4, 1e-6, "random: none loss from " .. start)
      check_close(gr:narrow(1, start, 7):to("cpu", "f64"):flat(), gref:flat(), BF16.rtol, 1e-3, "random: gradient from " .. start)
    end
    ln:free(); gr:free(); x:free(); yt:free(); xr:free(); yr:free()
  end)

  it("N×C×H×W bf16 with more than LIMIT elements: cross_entropy and softmax_focal at pixels of the last image", function()
    local sizes = FULL and { 4, 21, 5000, 5200 } or { 4, 21, 15, 17 }
    local N, C, Hh, W = sizes[1], sizes[2], sizes[3], sizes[4]
    assert(N * C * Hh * W > LIMIT)
    local x = ploss.randn(sizes, { dtype = "bf16", device = DEV, seed = 21, std = 2 })
    local y = ploss.randint(0, C, { N, Hh, W }, { device = DEV, seed = 22 })
    local pixels = { { N, 1, 1 }, { N, Hh, W }, { N, math.floor(Hh / 2), 3 }, { N - 1, Hh, W }, { 1, 1, 2 } }
    for _, name in ipairs { "cross_entropy", "softmax_focal" } do
      local ln = F[name](x, y, { reduction = "none" })
      local mean = F[name](x, y)
      local _, g = F[name .. "_fused"](x, y, { reduction = "sum" })
      assert.is_true(mean == mean and mean > 0, name .. " mean " .. tostring(mean))
      for _, p in ipairs(pixels) do
        local n, h, w = p[1], p[2], p[3]
        local xp = x:select(1, n):select(2, h):select(2, w):to("cpu", "f64"):view(1, C)
        local yp = ploss.tensor({ y:select(1, n):select(1, h):select(1, w):item() }, { dtype = "i64" })
        local lref = F[name](xp, yp, { reduction = "none" }):flat()
        local _, gref = F[name .. "_fused"](xp, yp, { reduction = "sum" })
        local what = string.format("%s pixel (%d, %d, %d)", name, n, h, w)
        check_close({ ln:select(1, n):select(1, h):select(1, w):item() }, lref, 1e-4, 1e-6, what .. " loss")
        local gp = g:select(1, n):select(2, h):select(2, w):to("cpu", "f64"):flat()
        check_close(gp, gref:flat(), BF16.rtol, 1e-3, what .. " gradient")
      end
      ln:free(); g:free()
    end
    x:free()
  end)
end)
