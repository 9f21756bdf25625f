-- CUDA spec of softmax family II (suite 'cuda'): every op and loss on the device against
-- the f64 CPU backend on the same (rounded) values, for f32/f16/bf16/f64, the layouts and
-- sizes that reach every kernel path (thread per sample for class-strided rows, warp per
-- row, block per row for C > 2048), every pass; plus the device-only behaviour (invalid
-- labels through the context's error slot, determinism).  spec/run.lua exits 77 before
-- loading this file when no GPU is present; PLOSS_CUDA_SPEC_DEVICE=cpu runs it against
-- the CPU as a dry run of its logic.
local H = require "spec.helpers"
local S = require "spec.softmax2_common"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()

-- Tolerances against the f64 CPU reference (losses accumulated in f32, f64 for f64;
-- gradients rounded to the input dtype).  atol is relative to the largest |reference|
-- of the tensor compared; floor is an absolute floor (f16 subnormals).
local TOL = {
  f64 = { loss = 1e-10, grad = 1e-10, floor = 0 },
  f32 = { loss = 3e-5, grad = 3e-5, floor = 0 },
  f16 = { loss = 2e-4, grad = 6e-3, floor = 2 ^ -24 },
  bf16 = { loss = 2e-4, grad = 3e-2, floor = 0 },
}
local DTYPES = { "f32", "f16", "bf16", "f64" }

local close = H.assert_close_scaled

local sample_sizes = S.sample_sizes

-- randn logits on the device in the requested layout ('strided': the transposed N×C, or
-- channels-last N×C×d…, so the class-strided and class-contiguous kernels swap).
local function make_input(sizes, dtype, layout, seed, std)
  return H.relayout(ploss.randn(sizes, { dtype = dtype, device = DEV, std = std or 3, seed = seed }), layout)
end

local function make_labels(sizes, ignore, ignore_index, dtype, seed)
  H.seed(seed)
  return H.random_labels(sample_sizes(sizes), sizes[2], { ignore = ignore and 0.3 or 0, ignore_index = ignore_index,
    device = DEV, dtype = dtype or "i64" })
end

local opts_on = H.options_on

---------------------------------------------------------------------------------------
-- one-hot
---------------------------------------------------------------------------------------

describe("CUDA one_hot (" .. DEV .. ")", function()
  it("matches the CPU for every output dtype, layouts and smoothing", function()
    for k, sizes in ipairs { { 7 }, { 3, 5, 4 }, { 2, 33, 17 } } do
      H.seed(100 + k)
      local y = H.random_labels(sizes, 6, { ignore = 0.2, ignore_index = -1 })
      for _, dt in ipairs { "f32", "f16", "bf16", "f64", "i64", "u8" } do
        local opts = { dtype = dt, label_smoothing = (dt == "i64" or dt == "u8") and 0 or 0.1 }
        local ref = ploss.one_hot(y, 6, opts)
        local got = ploss.one_hot(y:to(DEV), 6, opts)
        assert.are.equal(y:to(DEV):device(), got:device())
        H.assert_equal(got:cpu(), ref, { what = dt .. " " .. table.concat(sizes, "x") })
        -- a strided (channels-last) output
        if #sizes == 3 then
          local out = ploss.empty({ sizes[1], sizes[2], sizes[3], 6 }, { dtype = dt, device = DEV }):permute(1, 4, 2, 3)
          H.assert_equal(ploss.one_hot(y:to(DEV), nil, { out = out, dtype = dt, label_smoothing = opts.label_smoothing }):cpu(), ref)
        end
      end
    end
  end)

  if DEV ~= "cpu" then
    it("reports an invalid label at the next synchronisation and writes a zero row", function()
      local out = ploss.one_hot(ploss.tensor({ 0, 9, 1 }, { dtype = "i64" }):to(DEV), 3)
      H.expect_error(function() ploss.synchronize(DEV) end, "PLOSS_ERR_INVALID_LABEL")
      H.assert_equal(out:cpu(), { { 1, 0, 0 }, { 0, 0, 0 }, { 0, 1, 0 } })
      ploss.synchronize(DEV) -- the slot was cleared
    end)
  end
end)

---------------------------------------------------------------------------------------
-- losses with class-index targets: the device against the f64 CPU reference
---------------------------------------------------------------------------------------

-- Sizes reaching every path: warp per row (C ≤ 2048), block per row (C = 4097), thread
-- per sample (N×C×H×W, and every transposed N×C), two classes, odd sizes.  The register
-- kernels (f32/f16/bf16, C ≤ 32; tiers 8, 24, 32): C = 9 (tier 24), C = 32 at the bound
-- and C = 33 just above it (row groups); N×C×H×W with C ≤ 8 takes pixel pairs with
-- vector loads, and an odd H·W (2×3×5×7, and 3×8×5×5 with C at the pair bound) leaves
-- the last pair of an image partial and every odd image misaligned.
-- contiguous {2,19,64,64}, {2,5,12,22}, {3,24,16,33} and {2,32,8,8} go through
-- shared-memory tiles (16-byte aligned class rows; {2,5,12,22} and {3,24,16,33} end with a
-- partial tile; f32 beyond C = 23 needs more than the default 48 KiB of shared memory), the
-- other small-C sizes and the strided layouts through registers
local SIZES = { { 64, 10 }, { 33, 17 }, { 3, 4097 }, { 2, 19, 64, 64 }, { 2, 3, 5, 7 }, { 1, 40, 9, 11 }, { 7, 2 },
  { 3, 9, 5, 3 }, { 3, 8, 5, 5 }, { 2, 32, 9, 7 }, { 2, 33, 6, 6 }, { 2, 5, 12, 22 }, { 3, 24, 16, 33 },
  { 2, 32, 8, 8 } }

-- Check one loss (ploss.F[fname], criterion ploss[crit]) for each option set.
local function check_against_cpu(fname, crit, sets, sizes, seed0)
  local seed = seed0
  for _, set in ipairs(sets) do
    for _, dtype in ipairs(DTYPES) do
      for _, layout in ipairs { "contiguous", "strided" } do
        seed = seed + 1
        H.current_seed = seed
        local tol = TOL[dtype]
        local label = string.format("%s %s %s %s %s", fname, table.concat(sizes, "x"), set.name, dtype, layout)
        local x = make_input(sizes, dtype, layout, seed, set.std)
        local y = make_labels(sizes, set.ignore, set.opts.ignore_index, set.i32 and "i32" or "i64", seed + 1)
        local opts = set.make and set.make(sizes, seed) or set.opts
        local none = opts.reduction == "none"
        local gout = none and ploss.randn(sample_sizes(sizes), { dtype = dtype == "f64" and "f64" or "f32", device = DEV, seed = seed + 2 }) or nil
        -- reference: f64 on the CPU on the same rounded values
        local xc, yc, oc = x:to("cpu", "f64"), y:to("cpu"), opts_on(opts, "cpu", "f64")
        local ref_loss, ref_grad = F[fname .. "_fused"](xc, yc, oc)
        local ref_back = none and F[fname .. "_backward"](xc, yc, gout:to("cpu", "f64"), oc) or ref_grad

        local loss, grad = F[fname .. "_fused"](x, y, opts)
        assert.are.equal(dtype, grad:dtype())
        close(loss, ref_loss, tol.loss, 0, label .. " fused loss")
        close(grad, ref_grad, tol.grad, tol.floor, label .. " fused grad")
        local c = ploss[crit](opts)
        close(c:forward(x, y), ref_loss, tol.loss, 0, label .. " forward")
        close(c:backward(x, y, gout), ref_back, tol.grad, tol.floor, label .. " backward (saved state)")
        close(F[fname .. "_backward"](x, y, gout, opts), ref_back, tol.grad, tol.floor, label .. " backward (recomputed)")
        -- in place: bitwise the numbers of the out-of-place fused pass
        local xi = x:clone()
        if layout ~= "contiguous" then xi = make_input(sizes, dtype, layout, seed, set.std) end
        H.check_inplace_fused(fname, xi, y, opts, loss, grad, label)
      end
    end
  end
end

-- Determinism and the error slot, for one loss (opts_of(C) → the options for C classes).
local function check_device_behaviour(fname, opts_of, ignore_index)
  it("is deterministic (bitwise equal results on repeated calls)", function()
    for _, sizes in ipairs { { 4096, 100 }, { 2, 5000 }, { 4, 19, 64, 64 } } do
      local opts = opts_of(sizes[2])
      local x = ploss.randn(sizes, { dtype = "f32", device = DEV, seed = 42 })
      local y = make_labels(sizes, true, ignore_index, "i64", 43)
      local l1, g1 = F[fname .. "_fused"](x, y, opts)
      local l2, g2 = F[fname .. "_fused"](x, y, opts)
      assert.are.equal(l1, l2)
      H.assert_equal(g2, g1)
    end
  end)
  if DEV ~= "cpu" then
    it("reports an invalid label through the error slot (NaN loss), never reading out of bounds", function()
      for _, sizes in ipairs { { 3, 5 }, { 2, 5, 3, 3 }, { 2, 3000 } } do
        local opts = opts_of(sizes[2])
        local x = ploss.randn(sizes, { device = DEV })
        local yv = make_labels(sizes, false, ignore_index, "i64", 7):cpu():flat()
        yv[2] = sizes[2] + 1000000
        local y = ploss.tensor(yv, { dtype = "i64", size = sample_sizes(sizes) }):to(DEV)
        local o = {}
        for k, v in pairs(opts) do o[k] = v end
        o.out = ploss.empty({}, { device = DEV })
        local _, g = F[fname .. "_fused"](x, y, o)
        H.expect_error(function() ploss.synchronize(DEV) end, "PLOSS_ERR_INVALID_LABEL")
        ploss.synchronize(DEV)
        assert.are.same(sizes, g:size())
        -- the sample's loss is NaN (so is the reduced loss) and its gradient row zero
        local l = o.out:item()
        assert.is_true(l ~= l, fname .. " loss " .. tostring(l))
      end
    end)
  end
end

describe("CUDA large-margin softmax against the CPU (" .. DEV .. ")", function()
  local sets = {
    { name = "mean", opts = { reduction = "mean" } },
    { name = "sum λ=1 ignored", ignore = true, opts = { reduction = "sum", lam = 1, ignore_index = 255 } },
    { name = "none λ=0.5 ignored i32", ignore = true, i32 = true, opts = { reduction = "none", lam = 0.5, ignore_index = 255 } },
  }
  for k, sizes in ipairs(SIZES) do
    it("sizes " .. table.concat(sizes, "x"), function()
      check_against_cpu("large_margin_softmax", "LargeMarginSoftmaxLoss", sets, sizes, 1000 + 100 * k)
    end)
  end

  it("stays finite with a target logit 1e3 above the rest, in every dtype and layout", function()
    for _, dtype in ipairs(DTYPES) do
      local rows = { { 1000, 0, 1, 2 }, { -3, 1000, 0, 0.5 }, { 30, 30, 30, 30 } }
      local x = ploss.tensor(rows, { dtype = dtype }):to(DEV)
      local y = ploss.tensor({ 0, 1, 2 }, { dtype = "i64" }):to(DEV)
      -- N×C, its transpose, and the rows as the 3 pixels of a 1×C×3 image (pixel pairs)
      for _, xy in ipairs { { x, y }, { x:t():contiguous():t(), y }, { x:t():contiguous():view({ 1, 4, 3 }), y:view({ 1, 3 }) } } do
        local xs, y = xy[1], xy[2]
        local l, g = F.large_margin_softmax_fused(xs, y, { reduction = "none" })
        local rl, rg = F.large_margin_softmax_fused(xs:to("cpu", "f64"), y:cpu(), { reduction = "none" })
        for _, v in ipairs(l:flat()) do assert.is_true(v == v and math.abs(v) < math.huge, dtype .. " loss " .. v) end
        for _, v in ipairs(g:flat()) do assert.is_true(v == v and math.abs(v) < math.huge, dtype .. " grad " .. v) end
        close(l, rl, TOL[dtype].loss, 0, dtype .. " loss")
        close(g, rg, TOL[dtype].grad, TOL[dtype].floor, dtype .. " grad")
      end
    end
  end)

  it("matches f64 where a non-target logit lies far above the reference logit x_0 / x_1 (every dtype, tiles and registers)", function()
    -- The per-sample kernels take the non-target statistics relative to r = x_1 (y = 0) or
    -- x_0, and again relative to the non-target maximum when their sum passes 2^40 (a
    -- logit more than ~27.7 above r) or is NaN.  Rows 2 and 3 overflow relative to r
    -- (d = 100, 92); row 4 (d = 86) keeps the sum finite while Σ e^d·d overflows, so only a
    -- threshold well below the f32 maximum catches it; rows 1, 5, 7 and 9 take the
    -- maximum (d = 35, 29, 51, 40), row 6 stays just below the threshold (d = 26), row 8
    -- has a dominant target on the first path; rows 12 and 13 are ignored (label 255), the
    -- first with NaN and ±inf logits: their gradient is +0 and their loss 0.  16 rows, so
    -- that the image's class rows start on 16 bytes in every dtype (the tile path).
    local nan, inf = 0 / 0, math.huge
    local rows = {
      { 5, -60, 0, 40 }, { 3, -80, 10, 20 }, { -90, 1, 2, 0 }, { 0, 86, -5, 1 },
      { 0, 29, -5, 1 }, { 0, 26, -5, 1 }, { -50, 0, 400, 1 }, { 0, 20, 400, 1 },
      { 7, -40, 0, 0 }, { 1, 2, 3, 4 }, { 0, 0, 0, 0 }, { nan, inf, -inf, 1 },
      { 1, 1, 1, 1 }, { 2, 1, 0, -1 }, { 0, 0, 0, 0 }, { -3, 5, 2, 1 },
    }
    local labels = { 2, 0, 3, 2, 2, 2, 2, 2, 0, 1, 3, 255, 255, 0, 1, 3 }
    local opts = { lam = 0.7 }
    for _, dtype in ipairs(DTYPES) do
      local x = ploss.tensor(rows, { dtype = dtype }):to(DEV)
      local y = ploss.tensor(labels, { dtype = "i64" }):to(DEV)
      local gout = ploss.randn({ 16 }, { dtype = dtype == "f64" and "f64" or "f32", device = DEV, seed = 77 })
      -- N×C (registers) and the rows as the pixels of a 1×C×16 image (tiles); the ignored
      -- row's gradient at grad_at(g, j)
      local layouts = {
        { x, y, gout, function(g, j) return g[12][j] end },
        { x:t():contiguous():view({ 1, 4, 16 }), y:view({ 1, 16 }), gout:view({ 1, 16 }), function(g, j) return g[1][j][12] end },
      }
      for _, c in ipairs(layouts) do
        local xs, ys, go, grad_at = c[1], c[2], c[3], c[4]
        local xc, yc = xs:to("cpu", "f64"), ys:cpu()
        for _, red in ipairs { "none", "sum" } do
          local o = { lam = opts.lam, reduction = red, ignore_index = 255 }
          local l, g = F.large_margin_softmax_fused(xs, ys, o)
          local rl, rg = F.large_margin_softmax_fused(xc, yc, o)
          close(l, rl, TOL[dtype].loss, 0, dtype .. " " .. red .. " loss")
          close(g, rg, TOL[dtype].grad, TOL[dtype].floor, dtype .. " " .. red .. " grad")
          local gt = g:to("cpu", "f64"):totable()
          for j = 1, 4 do
            local v = grad_at(gt, j)
            assert.is_true(v == 0 and 1 / v > 0, dtype .. " ignored row's gradient " .. tostring(v))
          end
        end
        -- the saved state (forward, then backward) and the recomputed backward
        local o = { lam = opts.lam, reduction = "none", ignore_index = 255 }
        local rb = F.large_margin_softmax_backward(xc, yc, go:to("cpu", "f64"), o)
        local crit = ploss.LargeMarginSoftmaxLoss(o)
        crit:forward(xs, ys)
        close(crit:backward(xs, ys, go), rb, TOL[dtype].grad, TOL[dtype].floor, dtype .. " backward (saved state)")
        close(F.large_margin_softmax_backward(xs, ys, go, o), rb, TOL[dtype].grad, TOL[dtype].floor,
          dtype .. " backward (recomputed)")
      end
    end
    -- C = 2 (x_1 or x_0 is then the only non-target class, sN = 1): registers and tiles
    local x2 = ploss.tensor({ { 7, -40 }, { -40, 7 }, { 100, -100 }, { 0, 0 } }, { dtype = "f32" }):to(DEV)
    local y2 = ploss.tensor({ 0, 0, 1, 1 }, { dtype = "i64" }):to(DEV)
    for _, c in ipairs { { x2, y2 }, { x2:t():contiguous():view({ 1, 2, 4 }), y2:view({ 1, 4 }) } } do
      local l, g = F.large_margin_softmax_fused(c[1], c[2], { reduction = "none" })
      local rl, rg = F.large_margin_softmax_fused(c[1]:to("cpu", "f64"), c[2]:cpu(), { reduction = "none" })
      close(l, rl, TOL.f32.loss, 0, "C = 2 loss")
      close(g, rg, TOL.f32.grad, TOL.f32.floor, "C = 2 grad")
    end
  end)

  it("keeps the gradient finite for a non-target logit near the f32 minimum (lam = 4; tiles and registers)", function()
    -- the first sample's logits {0, 0, -3e38}: e^d = 0 while lam/2 * invS * d is near -inf
    local img = { { { 0, 1, 2, 3 }, { 0, -1, 0.5, 2 }, { -3e38, 0.25, -2, 1 } } } -- 1x3x4: tiles
    local rows = { { 0, 0, -3e38 }, { 1, -1, 0.25 }, { 2, 0.5, -2 }, { 3, 2, 1 } } -- 4x3: registers
    for _, c in ipairs { { img, { { 0, 1, 2, 0 } } }, { rows, { 0, 1, 2, 0 } } } do
      local x = ploss.tensor(c[1], { dtype = "f32" }):to(DEV)
      local y = ploss.tensor(c[2], { dtype = "i64" }):to(DEV)
      local opts = { lam = 4, reduction = "sum" }
      local _, g = F.large_margin_softmax_fused(x, y, opts)
      local _, rg = F.large_margin_softmax_fused(x:to("cpu", "f64"), y:cpu(), opts)
      for _, v in ipairs(g:flat()) do assert.is_true(v == v and math.abs(v) < math.huge, "grad " .. v) end
      close(g, rg, TOL.f32.grad, TOL.f32.floor, "grad")
    end
  end)

  it("gives f32 logits near ±FLT_MAX the CPU's finite values (no 0·∞ where a difference overflows float)", function()
    -- 2e38 − (−2e38) overflows f32: e^d = 0 must give e·d = 0 and Σ (x − m) must be taken
    -- in double, as on the CPU (a loss near 2.3e38, the gradient finite).  C = 3: the
    -- per-sample kernels (N×C and its transpose: registers; the rows as the pixels of a
    -- 1×3×8 image: tiles); rows 3, 5 and 6 (x_0 or x_1 = −2e38 the reference, a logit 4e38
    -- above it) take the non-target maximum.  C = 40 and 20000: the row engine (N×C), the
    -- row groups (the transpose: a thread per row; OHEM on N×C: a warp, a block; f64: all),
    -- whose lanes 2 and 3 hold only ~1.8e38 and −2e38, so that their first merge meets a
    -- difference of −∞ too.  'none': one row's loss fits f32, a sum of three would not.
    -- No two logits of a row tie at such a magnitude: there x − lse loses log(ties) (1e38 + log 3
    -- is 1e38), a limit of the e^(x − lse) form the CPU shares, which these rows do not test.
    local B = 2e38
    local function wide(C, seed)
      local rows = ploss.randn({ 4, C }, { dtype = "f64", std = 2, seed = seed }):totable()
      local G = C <= 2048 and 32 or 256
      for i = 1, 3 do
        local r = rows[i]
        for j = 2, C - 1, G do r[j + 1], r[j + 2] = B * (0.9 - 1e-4 * j), -B end -- 0-based j ≡ 2, 3 (mod G)
        r[1], r[8] = -B, B
        if i < 3 then r[C - 9], r[C] = 0.95 * B, -B else r[C] = 0.99 * B end
      end
      return rows, { 10, 7, 1, 5 } -- row 2's label is the class at 2e38
    end
    local r40, y40 = wide(40, 811)
    local r2e4, y2e4 = wide(20000, 812)
    local cases = {
      { { { 0, B, -B }, { B, 0, -B }, { -B, B, 0 }, { 1, 2, 3 }, { 0, -B, B }, { -B, 0.5, B }, { B, -B, 3 }, { -1, 0, 1 } },
        { 0, 1, 2, 0, 0, 1, 2, 2 } },
      { r40, y40 },
      { r2e4, y2e4 },
    }
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      for _, c in ipairs(cases) do
        local C, N = #c[1][1], #c[2]
        local x = ploss.tensor(c[1], { dtype = dtype }):to(DEV)
        local y = ploss.tensor(c[2], { dtype = "i64" }):to(DEV)
        local gout = ploss.randn({ N }, { dtype = dtype == "f64" and "f64" or "f32", device = DEV, seed = 813 })
        local layouts = { { x, y, gout }, { x:t():contiguous():t(), y, gout } }
        if C == 3 then layouts[3] = { x:t():contiguous():view({ 1, C, N }), y:view({ 1, N }), gout:view({ 1, N }) } end
        for li, xy in ipairs(layouts) do
          local xs, ys, go = xy[1], xy[2], xy[3]
          local xc, yc = xs:to("cpu", "f64"), ys:cpu()
          for _, k in ipairs { { "large_margin_softmax", "LargeMarginSoftmaxLoss", {} },
            { "ohem_large_margin", "OhemLargeMarginLoss", { n_min = 5, score_thresh = 1 } } } do
            local o = { lam = 0.3, reduction = "none" }
            for kk, v in pairs(k[3]) do o[kk] = v end
            local label = string.format("%s C=%d %s layout %d", k[1], C, dtype, li)
            local rl, rg = F[k[1] .. "_fused"](xc, yc, o)
            local l, g = F[k[1] .. "_fused"](xs, ys, o)
            for _, t in ipairs { { rl, "CPU loss" }, { rg, "CPU grad" }, { l, "loss" }, { g, "grad" } } do
              for _, v in ipairs(t[1]:flat()) do
                assert.is_true(v == v and math.abs(v) < math.huge, label .. " " .. t[2] .. " " .. v)
              end
            end
            -- each row's loss to its own relative tolerance (they span 0.4 … 2.3e38)
            H.assert_close(l, rl, { rtol = TOL[dtype].loss, what = label .. " loss" })
            close(g, rg, TOL[dtype].grad, TOL[dtype].floor, label .. " grad")
            -- the saved state (forward, then backward) and the recomputed backward
            local rb = F[k[1] .. "_backward"](xc, yc, go:to("cpu", "f64"), o)
            local crit = ploss[k[2]](o)
            crit:forward(xs, ys)
            close(crit:backward(xs, ys, go), rb, TOL[dtype].grad, TOL[dtype].floor, label .. " backward (saved state)")
            close(F[k[1] .. "_backward"](xs, ys, go, o), rb, TOL[dtype].grad, TOL[dtype].floor,
              label .. " backward (recomputed)")
          end
        end
      end
    end
  end)

  it("walks images of more tiles than the grid has blocks, the last one partial (tiles, against f64)", function()
    -- 2x5x5x35841: 700 full tiles of 256 samples and one of 5 per image, more than the
    -- device holds blocks of the tile kernel at once, so a block's next tile is often in the
    -- same image (the tile cursor's carry into the next image, and the partial tile, inside
    -- the walk); 'mean' and 'sum' (the MEAN divisor, one loss partial per tile)
    local sizes = { 2, 5, 5, 35841 }
    local x = make_input(sizes, "f32", "contiguous", 4242)
    local y = make_labels(sizes, true, 255, "i64", 4243)
    local xc, yc = x:to("cpu", "f64"), y:cpu()
    for _, c in ipairs { { "large_margin_softmax", { lam = 0.3, reduction = "mean", ignore_index = 255 } },
      { "taylor_cross_entropy", { n = 2, ignore_index = 255, reduction = "sum" } } } do
      local l, g = F[c[1] .. "_fused"](x, y, c[2])
      local rl, rg = F[c[1] .. "_fused"](xc, yc, c[2])
      close(l, rl, TOL.f32.loss, 0, c[1] .. " loss")
      close(g, rg, TOL.f32.grad, TOL.f32.floor, c[1] .. " grad")
    end
  end)

  it("with every sample ignored: NaN mean, zero gradient", function()
    for _, sizes in ipairs { { 3, 4 }, { 2, 3000 }, { 2, 3, 4, 5 } } do
      local x = ploss.randn(sizes, { device = DEV })
      local y = ploss.full(sample_sizes(sizes), 255, { dtype = "i64", device = DEV })
      local l, g = F.large_margin_softmax_fused(x, y, { ignore_index = 255 })
      assert.is_true(l ~= l)
      for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
    end
  end)

  check_device_behaviour("large_margin_softmax", function() return { lam = 0.3, ignore_index = 255 } end, 255)
end)

describe("CUDA Taylor softmax ops against the CPU (" .. DEV .. ")", function()
  -- {sizes, dim (1-based)}: strided rows (thread per row), warp and block per row
  local CASES = { { { 64, 10 }, 2 }, { { 3, 4097 }, 2 }, { { 5, 7 }, 1 }, { { 2, 19, 64, 64 }, 2 },
    { { 2, 3, 5, 7 }, -1 }, { { 4, 6, 9 }, 3 }, { { 9 }, 1 } }
  for k, case in ipairs(CASES) do
    local sizes, dim = case[1], case[2]
    it("sizes " .. table.concat(sizes, "x") .. " dim " .. dim, function()
      local seed = 3000 + 50 * k
      for _, op in ipairs { "taylor_softmax", "log_taylor_softmax" } do
        for _, n in ipairs { 2, 4, 12 } do
          for _, dtype in ipairs(DTYPES) do
            seed = seed + 1
            H.current_seed = seed
            local tol = TOL[dtype]
            local label = string.format("%s n=%d %s dim %d %s", op, n, table.concat(sizes, "x"), dim, dtype)
            local x = ploss.randn(sizes, { dtype = dtype, device = DEV, std = 2, seed = seed })
            local g = ploss.randn(sizes, { dtype = dtype, device = DEV, seed = seed + 1 })
            local o = { n = n, dim = dim }
            local xc, gc = x:to("cpu", "f64"), g:to("cpu", "f64")
            local out = F[op](x, o)
            assert.are.equal(dtype, out:dtype())
            close(out, F[op](xc, o), tol.grad, tol.floor, label .. " forward")
            close(F[op .. "_backward"](x, g, o), F[op .. "_backward"](xc, gc, o), tol.grad, tol.floor, label .. " backward")
          end
        end
      end
    end)
  end

  it("f16 inputs whose polynomial overflows f16 stay finite", function()
    local x = ploss.tensor({ { 400, 0, -3 }, { -500, 3, 1 } }, { dtype = "f16" }):to(DEV)
    for _, op in ipairs { "taylor_softmax", "log_taylor_softmax" } do
      local out = F[op](x)
      for _, v in ipairs(out:flat()) do assert.is_true(v == v and math.abs(v) < math.huge, op .. " " .. v) end
      close(out, F[op](x:to("cpu", "f64")), 1e-3, 6e-8, op)
    end
  end)
end)

describe("CUDA Taylor cross-entropy against the CPU (" .. DEV .. ")", function()
  local sets = {
    { name = "mean n=2", opts = { reduction = "mean" }, std = 2 },
    { name = "sum n=4 ignored", ignore = true, opts = { reduction = "sum", n = 4, ignore_index = -1 }, std = 2 },
    { name = "none n=12 (f64 internals) ignored i32", ignore = true, i32 = true,
      opts = { reduction = "none", n = 12, ignore_index = -1 }, std = 2 },
  }
  for k, sizes in ipairs(SIZES) do
    it("sizes " .. table.concat(sizes, "x"), function()
      check_against_cpu("taylor_cross_entropy", "TaylorCrossEntropyLoss", sets, sizes, 4000 + 100 * k)
    end)
  end
  check_device_behaviour("taylor_cross_entropy", function() return { n = 2, ignore_index = -1 } end, -1)

  -- f_12(1e4) ≈ 2e39 is beyond f32 but not f64: orders above 10 take f64 internals on
  -- every path (class-strided rows of ≤ 32 classes included), as on the CPU
  it("order 12 with a logit of 1e4 in f32 is finite and the CPU's, in every layout", function()
    local rows = { { 1e4, 0, -3, 2, 1 }, { -2, 9e3, 1, 0, 5 }, { 0.5, -0.5, 1, 2, 3 } }
    local y = ploss.tensor({ 0, 2, 4 }, { dtype = "i64" })
    local o = { n = 12, reduction = "none" }
    local x = ploss.tensor(rows, { dtype = "f32" })
    local ref, gref = F.taylor_cross_entropy(x:to("cpu", "f64"), y, o), nil
    gref = F.taylor_cross_entropy_backward(x:to("cpu", "f64"), y, ploss.ones({ 3 }, { dtype = "f64" }), o)
    for _, layout in ipairs { "contiguous", "strided" } do
      -- strided: the 3×5 rows as a 3×5×1 image batch, the classes strided
      local xd = x:to(DEV)
      if layout == "strided" then xd = x:view(3, 5, 1):to(DEV) end
      local yd = layout == "strided" and y:view(3, 1):to(DEV) or y:to(DEV)
      local loss = F.taylor_cross_entropy(xd, yd, o):cpu():view(3)
      local g = F.taylor_cross_entropy_backward(xd, yd, ploss.ones(yd:size(), { dtype = "f32", device = DEV }), o)
      g = g:cpu():view(3, 5)
      for _, v in ipairs(loss:flat()) do assert.is_true(v == v and math.abs(v) < math.huge, layout .. " loss " .. v) end
      close(loss, ref, TOL.f32.loss, 0, layout .. " loss")
      close(g, gref, TOL.f32.grad, 0, layout .. " gradient")
    end
  end)

  -- past the computing type's range, as the CPU: Z = +∞ gives a +∞ loss and the gradient
  -- of 1/Z = 0, (0, −f_1(1)/f_2(1), 0) = (0, −0.8, 0) at n = 2 (f_1(3e19) stays finite)
  it("a logit whose polynomial overflows f32: +∞ loss (NaN at the label) and the gradient 1/Z = 0 leaves, in every layout", function()
    local x = ploss.tensor({ { 3e19, 1, 0 } }, { dtype = "f32" })
    local y = ploss.tensor({ 1 }, { dtype = "i64" })
    for _, layout in ipairs { "contiguous", "strided" } do
      local xd = layout == "strided" and x:view(1, 3, 1):to(DEV) or x:to(DEV)
      local yd = layout == "strided" and y:view(1, 1):to(DEV) or y:to(DEV)
      local l, g = ploss.TaylorCrossEntropyLoss { n = 2 }(xd, yd)
      assert.are.equal(math.huge, l, layout)
      H.assert_close(g:cpu():view(1, 3), { { 0, -0.8, 0 } }, { rtol = 1e-6 })
      -- the label's own: ∞ − ∞, a NaN loss, and a zero gradient
      local l0, g0 = ploss.TaylorCrossEntropyLoss { n = 2 }(xd, ploss.zeros(yd:size(), { dtype = "i64", device = DEV }))
      assert.is_true(l0 ~= l0, layout .. " loss " .. l0)
      H.assert_equal(g0:cpu():view(1, 3), ploss.zeros({ 1, 3 }))
    end
  end)
end)

-- C priors on the device, one of them 0 when C > 2 (that class drops out of the normaliser)
local function priors(Cn, seed)
  local w = ploss.rand({ Cn }, { dtype = "f64", low = 0.05, high = 2, seed = seed }):flat()
  if Cn > 2 then w[2] = 0 end
  return ploss.tensor(w, { dtype = "f32" }):to(DEV)
end

describe("CUDA PC-softmax cross-entropy against the CPU (" .. DEV .. ")", function()
  local sets = {
    { name = "mean", opts = { reduction = "mean" },
      make = function(sizes, seed) return { reduction = "mean", lb_proportion = priors(sizes[2], seed) } end },
    { name = "sum ignored", ignore = true, opts = { ignore_index = -100 },
      make = function(sizes, seed) return { reduction = "sum", lb_proportion = priors(sizes[2], seed) } end },
    { name = "none ignored i32", ignore = true, i32 = true, opts = { ignore_index = 7 },
      make = function(sizes, seed) return { reduction = "none", ignore_index = 7, lb_proportion = priors(sizes[2], seed) } end },
  }
  for k, sizes in ipairs(SIZES) do
    it("sizes " .. table.concat(sizes, "x"), function()
      check_against_cpu("pc_softmax_cross_entropy", "PCSoftmaxCrossEntropyLoss", sets, sizes, 5000 + 100 * k)
    end)
  end
  check_device_behaviour("pc_softmax_cross_entropy", function(Cn) return { lb_proportion = priors(Cn, 1) } end, -100)

  it("a class of prior 0 with the largest logit leaves the others' terms whole; +∞ there is NaN, as the CPU", function()
    -- C = 40 and 3000 (the row engine), 12 (the per-sample kernels): class 2 has prior 0 and,
    -- in rows 1 and 3, a logit far above the others (their exponentials against it would be 0)
    for _, Cn in ipairs { 12, 40, 3000 } do
      for _, dtype in ipairs { "f32", "bf16" } do
        local x = ploss.randn({ 4, Cn }, { dtype = "f64", seed = Cn }):totable()
        x[1][2], x[3][2], x[4][2] = 1000, 300, math.huge
        local xc = ploss.tensor(x, { dtype = dtype })
        local y = ploss.tensor({ 0, 1, 5, 3 }, { dtype = "i64" })
        local o = { reduction = "none", lb_proportion = priors(Cn, 3) }
        local lc, gc = F.pc_softmax_cross_entropy_fused(xc, y, H.with(o, { lb_proportion = o.lb_proportion:cpu() }))
        local ld, gd = F.pc_softmax_cross_entropy_fused(xc:to(DEV), y:to(DEV), o)
        local what = dtype .. " C = " .. Cn
        local l1, l2 = lc:flat(), ld:cpu():flat()
        for i = 1, 3 do
          assert.is_true(math.abs(l1[i]) < 50, what)
          close(ld:cpu():narrow(1, i, 1), lc:narrow(1, i, 1), TOL[dtype].loss, 0, what .. " loss row " .. i)
          close(gd:cpu():narrow(1, i, 1), gc:narrow(1, i, 1), TOL[dtype].grad, TOL[dtype].floor, what .. " grad row " .. i)
        end
        assert.is_true(l1[4] ~= l1[4] and l2[4] ~= l2[4], what .. ": +∞ on a class of prior 0")
      end
    end
  end)
end)

-- One loss on a view x of a larger buffer (misaligned or padded; `inplace_view()` makes a
-- fresh one of the same kind): against a contiguous copy (another kernel path; the
-- gradient bit for bit when `exact`, else within the dtype's tolerance; the loss within
-- rounding), in place against out of place, and against the f64 CPU for the plain losses.
local function check_view(fname, opts, x, inplace_view, y, dtype, label, exact)
  local l, g = F[fname .. "_fused"](x, y, opts)
  local la, ga = F[fname .. "_fused"](x:contiguous():clone(), y, opts)
  if la ~= la then assert.is_true(l ~= l, label .. " loss: NaN (no kept sample)")
  else close(l, la, exact and 1e-6 or TOL[dtype].loss, 0, label .. " loss vs a contiguous copy") end
  if exact then H.assert_equal(g, ga, { what = label .. " grad vs a contiguous copy" })
  else close(g, ga, TOL[dtype].grad, TOL[dtype].floor, label .. " grad vs a contiguous copy") end
  H.check_inplace_fused(fname, inplace_view(), y, opts, l, g, label)
  if not fname:find("^ohem") then
    local rl, rg = F[fname .. "_fused"](x:to("cpu", "f64"), y:cpu(), opts_on(opts, "cpu", "f64"))
    close(l, rl, TOL[dtype].loss, 0, label .. " loss vs CPU")
    close(g, rg, TOL[dtype].grad, TOL[dtype].floor, label .. " grad vs CPU")
  end
end

---------------------------------------------------------------------------------------
-- views whose data start one element past an aligned address: the register kernels fall
-- back to element loads and stores (out of place the gradient is aligned, in place it is
-- not).  An aligned copy gives bitwise the same gradient (the per-sample code is the same
-- on every path) and the same loss within rounding (an aligned copy may take the tile
-- path, whose partial sums are per tile); against the CPU for the plain losses
---------------------------------------------------------------------------------------

describe("CUDA softmax family II on misaligned views (" .. DEV .. ")", function()
  local CASES = {
    { "large_margin_softmax", { reduction = "mean", ignore_index = 255 }, 255 },
    { "taylor_cross_entropy", { reduction = "sum", ignore_index = -1 }, -1 },
    { "pc_softmax_cross_entropy", { reduction = "mean", ignore_index = 255 }, 255 },
    { "ohem_cross_entropy", { score_thresh = 0.3 }, 255 },
    { "ohem_large_margin", { score_thresh = 0.02 }, 255 },
  }
  -- C ≤ 8 (pixel pairs: vector loads fall back to elements), C = 19 and 32 (one sample per
  -- thread: element loads anyway; the numbers must not depend on the offset)
  for _, sizes in ipairs { { 2, 19, 6, 8 }, { 3, 32, 5, 5 }, { 2, 5, 7 }, { 3, 8, 4, 6 } } do
    it("sizes " .. table.concat(sizes, "x"), function()
      local numel = 1
      for _, d in ipairs(sizes) do numel = numel * d end
      for _, dtype in ipairs { "f32", "f16", "bf16" } do
        for k, case in ipairs(CASES) do
          local fname, ignore_index = case[1], case[3]
          local label = string.format("%s %s %s misaligned", fname, table.concat(sizes, "x"), dtype)
          local opts = {}
          for kk, v in pairs(case[2]) do opts[kk] = v end
          if fname == "pc_softmax_cross_entropy" then opts.lb_proportion = priors(sizes[2], 90 + k) end
          local big = ploss.randn({ numel + 1 }, { dtype = dtype, device = DEV, std = 2, seed = 91 + k })
          local y = make_labels(sizes, true, ignore_index, "i64", 92 + k)
          check_view(fname, opts, big:narrow(1, 2, numel):view(sizes),
            function() return big:clone():narrow(1, 2, numel):view(sizes) end, y, dtype, label, true)
        end
      end
    end)
  end
end)

---------------------------------------------------------------------------------------
-- class rows padded to a 16-byte multiple (N×C×S' narrowed to S along the samples): the
-- tile path copies the last 16-byte piece of a row partly (zero-filled); the gradient of
-- the out-of-place pass is contiguous (rows not aligned: element stores), in place it is
-- the padded view (16-byte stores, the last piece element by element)
---------------------------------------------------------------------------------------

describe("CUDA softmax family II on padded class rows (" .. DEV .. ")", function()
  local CASES = {
    { "large_margin_softmax", { reduction = "mean", ignore_index = 255 }, 255 },
    { "taylor_cross_entropy", { reduction = "none", ignore_index = -1 }, -1 },
    { "pc_softmax_cross_entropy", { reduction = "sum", ignore_index = 255 }, 255 },
    { "ohem_cross_entropy", { score_thresh = 0.3 }, 255 },
    { "ohem_large_margin", { score_thresh = 0.05, n_min = 40 }, 255 },
  }
  -- {N, C, S', S}: one partial tile; two tiles, the second partial
  for _, case0 in ipairs { { 2, 19, 40, 37 }, { 3, 8, 272, 261 } } do
    local N, Cn, Sp, Sn = case0[1], case0[2], case0[3], case0[4]
    it(string.format("%dx%dx%d of rows of %d", N, Cn, Sn, Sp), function()
      for _, dtype in ipairs { "f32", "f16", "bf16" } do
        for k, case in ipairs(CASES) do
          local fname, ignore_index = case[1], case[3]
          local label = string.format("%s %dx%dx%d/%d %s", fname, N, Cn, Sn, Sp, dtype)
          local opts = {}
          for kk, v in pairs(case[2]) do opts[kk] = v end
          if fname == "pc_softmax_cross_entropy" then opts.lb_proportion = priors(Cn, 70 + k) end
          local big = ploss.randn({ N, Cn, Sp }, { dtype = dtype, device = DEV, std = 2, seed = 71 + k })
          local y = make_labels({ N, Cn, Sn }, true, ignore_index, "i64", 72 + k)
          -- the contiguous copy (S not a multiple of 16 bytes) takes the register path: the
          -- same kept samples (OHEM keys are IEEE-exact on both paths)
          check_view(fname, opts, big:narrow(3, 1, Sn), function() return big:clone():narrow(3, 1, Sn) end,
            y, dtype, label, false)
        end
      end
    end)
  end
end)

---------------------------------------------------------------------------------------
-- OHEM: the device's mining and loss against the CPU
---------------------------------------------------------------------------------------

-- f64 CPU scores (softmax probability of the label) of x (any layout), in label order
local function cpu_scores(x, y)
  local rows, yv, s = H.sample_rows(x), y:cpu():flat(), {}
  for i = 1, #yv do
    local r, m, z = rows[i], -math.huge, 0
    for j = 1, #r do m = math.max(m, r[j]) end
    for j = 1, #r do z = z + math.exp(r[j] - m) end
    s[i] = yv[i] == 255 and math.huge or math.exp(r[yv[i] + 1] - m) / z
  end
  return s
end

-- the kept flags of a 'none' OHEM loss (a kept sample has a loss > 0)
local function kept_of(loss_none)
  local k = {}
  for i, v in ipairs(H.values(loss_none)) do k[i] = v ~= 0 end
  return k
end

describe("CUDA OHEM against the CPU (" .. DEV .. ")", function()
  -- {sizes, τ, n_min}: the select path (few scores below τ), the τ shortcut, n_min = 0,
  -- n_min >= M, n_min above the valid count, row and strided layouts, a large batch
  local CASES = {
    { { 2, 19, 64, 64 }, 0.05, -1 }, { { 2, 19, 64, 64 }, 0.7, -1 }, { { 4, 5, 33, 17 }, 0.3, 0 },
    { { 4, 5, 33, 17 }, 0.3, 100000 }, { { 512, 10 }, 0.1, 300 }, { { 3, 4097 }, 0.01, 2 },
    { { 1, 19, 128, 192 }, 0.02, -1 }, { { 700, 3 }, 0.2, 650 },
    -- register kernels: n_min above the valid count but below M (the select ends in the
    -- ignored bucket) with odd H·W; τ so small that fewer than M/16 scores lie below it
    -- (refinement levels taken) at C = 19 and 32 and on the row groups at C = 33 (checked on
    -- the CPU: e.g. 4 of the 8192 scores of 2×19×64×64 are ≤ 1e-5, n_min = 512); the τ shortcut
    -- (refinement not taken) on the register kernels is { 2, 19, 64, 64 } τ = 0.7 above
    { { 2, 19, 17, 15 }, 0.01, 500 }, { { 2, 32, 9, 7 }, 1e-4, -1 }, { { 2, 33, 6, 6 }, 1e-6, -1 },
    { { 2, 19, 64, 64 }, 1e-5, -1 },
    -- shared-memory tiles (contiguous layout) whose mining pass needs more than 48 KiB of
    -- shared memory in f32 (48 KiB of tiles plus the histogram)
    { { 2, 24, 16, 16 }, 1e-3, -1 },
  }
  for k, case in ipairs(CASES) do
    local sizes, tau, n_min = case[1], case[2], case[3]
    it(string.format("sizes %s τ=%g n_min=%d", table.concat(sizes, "x"), tau, n_min), function()
      for _, fname in ipairs { "ohem_cross_entropy", "ohem_large_margin" } do
        local base = fname == "ohem_cross_entropy" and "cross_entropy" or "large_margin_softmax"
        for _, dtype in ipairs(DTYPES) do
          for _, layout in ipairs { "contiguous", "strided" } do
            local seed = 7000 + 100 * k + (dtype == "f64" and 1 or dtype == "f16" and 2 or dtype == "bf16" and 3 or 4)
            H.current_seed = seed
            local label = string.format("%s %s %s %s", fname, table.concat(sizes, "x"), dtype, layout)
            local x = make_input(sizes, dtype, layout, seed, 2)
            local y = make_labels(sizes, true, 255, "i64", seed + 1)
            local o = { score_thresh = tau, n_min = n_min }
            local xc, yc = x:to("cpu", "f64"), y:cpu()
            -- the kept sets agree but for scores within f32 rounding of the threshold
            local on = {}
            for kk, v in pairs(o) do on[kk] = v end
            on.reduction = "none"
            local gl = F[fname](x, y, on)
            local cl = F[fname](xc, yc, on)
            local kg, kc = kept_of(gl), kept_of(cl)
            local s = cpu_scores(xc, yc)
            local t, count = -1, 0
            for i = 1, #kc do if kc[i] then t, count = math.max(t, s[i]), count + 1 end end
            for i = 1, #kc do
              if kg[i] ~= kc[i] then
                assert.is_true(dtype ~= "f64" and math.abs(s[i] - t) <= 1e-6 * math.max(t, 1e-30) + 1e-12,
                  string.format("%s: sample %d kept %s on the device, %s on the CPU (score %.9g, t* %.9g)",
                    label, i, tostring(kg[i]), tostring(kc[i]), s[i], t))
              end
            end
            -- loss and gradient: the plain loss on the device's kept set
            local yv = yc:flat()
            for i = 1, #yv do if not kg[i] then yv[i] = 255 end end
            local yk = ploss.tensor(yv, { dtype = "i64", size = yc:size() })
            for _, red in ipairs { "mean", "sum" } do
              local ro = { score_thresh = tau, n_min = n_min, reduction = red }
              local bo = { ignore_index = 255, reduction = red }
              local l, g = F[fname .. "_fused"](x, y, ro)
              local rl, rg = F[base .. "_fused"](xc, yk, bo)
              close(l, rl, TOL[dtype].loss, 0, label .. " " .. red .. " loss")
              close(g, rg, TOL[dtype].grad, TOL[dtype].floor, label .. " " .. red .. " grad")
              close(F[fname .. "_backward"](x, y, 0.5, ro), F[base .. "_backward"](xc, yk, 0.5, bo),
                TOL[dtype].grad, TOL[dtype].floor, label .. " " .. red .. " backward")
              close(F[fname](x, y, ro), rl, TOL[dtype].loss, 0, label .. " " .. red .. " forward")
            end
          end
        end
      end
    end)
  end

  it("keeps every sample tied with the n_min-th score (duplicated rows, N×C and 1×C×S)", function()
    local pool = ploss.randn({ 5, 7 }, { dtype = "f64", std = 2, seed = 71 }):totable()
    local rows, labels = {}, {}
    for i = 1, 4000 do
      local k = (i * 3) % 5 + 1
      rows[i], labels[i] = pool[k], k - 1
    end
    local x2 = ploss.tensor(rows, { dtype = "f32" }):to(DEV)
    local y2 = ploss.tensor(labels, { dtype = "i64" }):to(DEV)
    -- the same samples as the pixels of one image (pixel pairs, vector loads)
    local x4 = x2:t():contiguous():view({ 1, 7, 4000 })
    local y4 = y2:view({ 1, 4000 })
    for _, xy in ipairs { { x2, y2 }, { x4, y4 } } do
    local x, y = xy[1], xy[2]
    for _, n_min in ipairs { 1, 799, 800, 801, 2500 } do
      local s = F.ohem_cross_entropy(x, y, { score_thresh = 0, n_min = n_min, reduction = "sum" })
      local m = F.ohem_cross_entropy(x, y, { score_thresh = 0, n_min = n_min })
      local count = math.floor(s / m + 0.5)
      assert.are.equal(0, count % 800, "n_min " .. n_min .. ": kept " .. count)
      assert.is_true(count >= n_min)
      local cs = F.ohem_cross_entropy(x:cpu(), y:cpu(), { score_thresh = 0, n_min = n_min, reduction = "sum" })
      local cm = F.ohem_cross_entropy(x:cpu(), y:cpu(), { score_thresh = 0, n_min = n_min })
      assert.are.equal(count, math.floor(cs / cm + 0.5))
    end
    end
  end)

  it("with every sample ignored: NaN mean and zero gradient", function()
    for _, sizes in ipairs { { 3, 4 }, { 2, 3, 40, 40 }, { 2, 19, 5, 7 }, { 2, 40, 3, 3 } } do
      local x = ploss.randn(sizes, { device = DEV })
      local y = ploss.full(sample_sizes(sizes), 255, { dtype = "i64", device = DEV })
      for _, n_min in ipairs { -1, 0, 5, 100000 } do
        local fname = n_min == 5 and "ohem_large_margin_fused" or "ohem_cross_entropy_fused"
        local l, g = F[fname](x, y, { n_min = n_min })
        assert.is_true(l ~= l)
        for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
      end
    end
  end)

  it("keeps a sample of a NaN or infinite logit as the hardest, as the CPU: the loss is NaN", function()
    -- N×C rows and 1×C×S pixels (the device's two mining layouts); two poisoned samples
    local x = ploss.randn({ 1, 5, 300 }, { dtype = "f32", std = 0.1, seed = 74 })
    local y = make_labels({ 1, 5, 300 }, false, 255, "i64", 75):cpu()
    local xv = x:totable()
    xv[1][y:totable()[1][17] + 1][17] = 0 / 0
    xv[1][1][250] = math.huge
    local x3 = ploss.tensor(xv, { dtype = "f32" })
    for _, xy in ipairs { { x3, y }, { x3:view({ 5, 300 }):t():contiguous(), y:view({ 300 }) } } do
      for _, fname in ipairs { "ohem_cross_entropy", "ohem_large_margin" } do
        for _, n_min in ipairs { 0, 3, -1 } do
          local o = { score_thresh = 0.1, n_min = n_min, reduction = "none" }
          local want = F[fname](xy[1], xy[2], o)
          local nan = 0
          for _, v in ipairs(H.values(want)) do nan = nan + (v ~= v and 1 or 0) end
          assert.are.equal(2, nan, fname .. " n_min " .. n_min .. ": the CPU's NaN samples")
          -- NaN where the CPU has NaN, the CPU's values elsewhere
          close(F[fname](xy[1]:to(DEV), xy[2]:to(DEV), o), want, 1e-5, 0, fname .. " n_min " .. n_min)
          o.reduction = "mean"
          local l = F[fname](xy[1]:to(DEV), xy[2]:to(DEV), o)
          assert.is_true(l ~= l, fname .. " mean")
        end
      end
    end
  end)

  it("in place gives the numbers of the out-of-place pass", function()
    local x = ploss.randn({ 2, 19, 32, 32 }, { device = DEV, seed = 72 })
    local y = make_labels({ 2, 19, 32, 32 }, true, 255, "i64", 73)
    for _, fname in ipairs { "ohem_cross_entropy", "ohem_large_margin" } do
      local l, g = F[fname .. "_fused"](x, y, { score_thresh = 0.1 })
      H.check_inplace_fused(fname, x:clone(), y, { score_thresh = 0.1 }, l, g, fname)
    end
  end)

  check_device_behaviour("ohem_cross_entropy", function() return { score_thresh = 0.3 } end, 255)
  check_device_behaviour("ohem_large_margin", function() return { score_thresh = 0.3 } end, 255)
end)
