-- CUDA cross-entropy spec (suite 'cuda'): the device against the CPU backend in f64 on the
-- same (rounded) values, for f32/f16/bf16/f64, contiguous and strided inputs, sizes that hit
-- every kernel path, every pass; edge cases, the device error slot, mixed devices,
-- determinism and memory.  spec/run.lua exits 77 before loading this file when no GPU is
-- present; PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run of its logic.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()
local ON_GPU = DEV ~= "cpu"

local TOL = H.CUDA_TOL -- against the f64 CPU reference on the same rounded inputs

local close = H.assert_close_scaled

local opts_on = H.options_on

-- CPU f64 reference: loss, gradient of the fused pass (scale 1) and, for 'none', the
-- backward gradient with upstream gradient gout.
local function reference(x, y, opts, gout)
  local xc = x:to("cpu", "f64")
  local yc = y:is_floating_point() and y:to("cpu", "f64") or y:to("cpu")
  local o = opts_on(opts, "cpu", "f64")
  local loss, grad = F.cross_entropy_fused(xc, yc, o)
  local gback = gout and F.cross_entropy_backward(xc, yc, gout:to("cpu", "f64"), o) or nil
  return { loss = loss, grad = grad, gback = gback, x = xc, y = yc, opts = o }
end

local sample_sizes = H.sample_sizes

-- Inputs of `sizes` in dtype on the device, in the requested layout (the values are the
-- same whatever the layout).
local function make_input(sizes, dtype, layout, seed)
  return H.relayout(ploss.randn(sizes, { dtype = dtype, device = DEV, std = 3, seed = seed }), layout)
end

local function make_target(sizes, kind, ignore, dtype_index, seed)
  local Cn = sizes[2]
  if kind == "prob" then
    return ploss.rand(sizes, { dtype = "f32", device = DEV, seed = seed + 1 })
  end
  H.seed(seed + 2)
  return H.random_labels(sample_sizes(sizes), Cn, { ignore = ignore and 0.3 or 0, ignore_index = -100,
    device = DEV, dtype = dtype_index or "i64" })
end

-- Sizes that reach every kernel path: small C (thread per sample), few rows (a streamed
-- block per row, all in one launch), 1030 rows of 40 (streamed blocks after a label pass),
-- C = 32000 (f32: a streamed block of 512 threads), C = 131072 and 300000 (streamed clusters
-- of 4 blocks up to 320 KiB — 131072 in 16 bits — and of 8 beyond; weighted: one streamed
-- block per row), N×C×H×W (thread per pixel; pairs of pixels read ahead through shared
-- memory for 16-bit C ≤ 24, its limit raised at 24, and weighted f32 C ≤ 8), odd sizes,
-- one class.
local SIZES = {
  { 64, 10 }, { 33, 17 }, { 8, 1000 }, { 3, 4097 }, { 1030, 40 }, { 4, 32000 }, { 2, 131072 }, { 2, 300000 },
  { 5, 1 }, { 2, 19, 64, 64 }, { 2, 24, 32, 32 }, { 2, 23, 16, 16 }, { 2, 8, 64, 64 }, { 2, 3, 5, 7 },
  { 1, 40, 9, 11 }, { 3, 1, 4 },
}

local OPTION_SETS = {
  { name = "mean", kind = "index", opts = { reduction = "mean" } },
  { name = "sum, smoothing 0.1, weight", kind = "index", weight = true,
    opts = { reduction = "sum", label_smoothing = 0.1 } },
  { name = "none, reference 0.2, ignored", kind = "index", ignore = true,
    opts = { reduction = "none", label_smoothing = 0.2, smoothing_convention = "reference" } },
  { name = "mean, uniform_others 0.3, weight, ignored, i32", kind = "index", ignore = true, weight = true, i32 = true,
    opts = { reduction = "mean", label_smoothing = 0.3, smoothing_convention = "uniform_others" } },
  { name = "probabilities, mean, smoothing 0.1", kind = "prob", opts = { reduction = "mean", label_smoothing = 0.1 } },
  { name = "probabilities, none, weight", kind = "prob", weight = true, opts = { reduction = "none" } },
}

describe("CUDA cross-entropy against the CPU (" .. DEV .. ")", function()
  local seed = 500
  for _, sizes in ipairs(SIZES) do
    it("sizes " .. table.concat(sizes, "x"), function()
      local Cn = sizes[2]
      for _, set in ipairs(OPTION_SETS) do
        if not (Cn == 1 and set.opts.smoothing_convention == "uniform_others") then
          for _, dtype in ipairs { "f32", "f16", "bf16", "f64" } do
            for _, layout in ipairs { "contiguous", "strided" } do
              seed = seed + 1
              H.current_seed = seed
              local tol = TOL[dtype]
              local label = string.format("%s %s %s %s", table.concat(sizes, "x"), set.name, dtype, layout)
              local x = make_input(sizes, dtype, layout, seed)
              local y = make_target(sizes, set.kind, set.ignore, set.i32 and "i32" or "i64", seed)
              local opts = {}
              for k, v in pairs(set.opts) do opts[k] = v end
              if set.weight then opts.weight = ploss.rand({ Cn }, { dtype = "f32", device = DEV, low = 0.5, high = 2, seed = seed + 3 }) end
              local none = opts.reduction == "none"
              local gout = none and ploss.randn(sample_sizes(sizes), { dtype = dtype == "f64" and "f64" or "f32", device = DEV, seed = seed + 4 }) or nil
              local ref = reference(x, y, opts, gout)

              -- fused
              local loss, grad = F.cross_entropy_fused(x, y, opts)
              assert.are.equal(dtype, grad:dtype())
              assert.are.equal(x:device(), grad:device())
              close(loss, ref.loss, tol.loss, 0, label .. " fused loss")
              close(grad, ref.grad, tol.grad, tol.floor, label .. " fused grad")
              -- forward, then backward with the saved lse (criterion) and recomputed (F)
              local crit = ploss.CrossEntropyLoss(opts)
              close(crit:forward(x, y), ref.loss, tol.loss, 0, label .. " forward")
              local gb = crit:backward(x, y, gout)
              close(gb, none and ref.gback or ref.grad, tol.grad, tol.floor, label .. " backward (saved lse)")
              local gf = F.cross_entropy_backward(x, y, gout, opts)
              close(gf, none and ref.gback or ref.grad, tol.grad, tol.floor, label .. " backward (recomputed lse)")
              -- in place: the same numbers as the out-of-place fused pass
              local xc = x:clone()
              local xi = layout == "contiguous" and xc or make_input(sizes, dtype, layout, seed)
              H.check_inplace_fused("cross_entropy", xi, y, opts, loss, grad, label)
            end
          end
        end
      end
    end)
  end

  it("extreme logits (±1e4) stay finite", function()
    for _, dtype in ipairs { "f32", "f16", "bf16", "f64" } do
      local x = ploss.tensor({ { 1e4, -1e4, 0 }, { -1e4, 1e4, 5 }, { 30, 30, 30 } }, { dtype = dtype, device = DEV })
      local y = ploss.tensor({ 0, 0, 2 }, { dtype = "i64", device = DEV })
      for _, red in ipairs { "none", "mean", "sum" } do
        local opts = { reduction = red, label_smoothing = 0.1 }
        local l, g = F.cross_entropy_fused(x, y, opts)
        local ref = reference(x, y, opts)
        close(l, ref.loss, TOL[dtype].loss, 0, dtype .. " " .. red .. " loss")
        close(g, ref.grad, TOL[dtype].grad, TOL[dtype].floor, dtype .. " " .. red .. " grad")
      end
    end
  end)

  -- Large logits: the loss and gradient depend on the logits' differences only.  Rows of
  -- multiples of 1/64, moved by 1000 (still exact in f32), give the unmoved rows' values on
  -- the f32 streamed rows (32000 classes: a block of 512 threads; 65536: clusters of 4
  -- blocks; 131072: of 8), whose gradient recomputes its exponentials; a form of them whose
  -- rounding grows with the logits' size (7.6e-5 relative at 1000) fails here.
  it("large logits: rows moved by 1000 keep their loss and gradient (f32 streamed rows)", function()
    for _, sizes in ipairs { { 2, 32000 }, { 2, 65536 }, { 2, 131072 } } do
      local n = sizes[1] * sizes[2]
      local base = ploss.randn({ n }, { dtype = "f64", seed = 71, std = 3 }):flat()
      local a, b = {}, {}
      for i = 1, n do
        a[i] = math.floor(base[i] * 64 + 0.5) / 64
        b[i] = a[i] + 1000
      end
      local x = ploss.tensor(a, { dtype = "f32", device = DEV }):view(sizes[1], sizes[2])
      local xs = ploss.tensor(b, { dtype = "f32", device = DEV }):view(sizes[1], sizes[2])
      local y = ploss.tensor({ 7, sizes[2] - 3 }, { dtype = "i64", device = DEV })
      for _, o in ipairs { { reduction = "mean" }, { reduction = "sum", label_smoothing = 0.1 } } do
        local label = string.format("%dx%d %s%s", sizes[1], sizes[2], o.reduction,
          o.label_smoothing and " smoothing" or "")
        local l, g = F.cross_entropy_fused(x, y, o)
        local ls, gs = F.cross_entropy_fused(xs, y, o)
        close(ls, l, TOL.f32.loss, 0, label .. " loss")
        close(gs, g, TOL.f32.grad, 0, label .. " grad")
      end
    end
  end)

  -- 16-bit rows far from 0: every exponential is relative to the row max, whose size must
  -- not leak into the result (an exponent formed as x·log2 e − M·log2 e, with M·log2 e
  -- rounded, is off by up to 4 % at a bf16 max of 1e6), and rows whose max is 2^24 or more
  -- (every other bf16 value at least 2^16 below it) keep their probability on the max alone.
  -- Every row shape: warps in registers (2048 rows of 300), streamed blocks (4097 classes),
  -- streamed clusters (131072); cross-entropy with and without smoothing, softmax focal.
  it("16-bit rows far from 0 (maxima up to 1e30) give the CPU's loss and gradient in every row shape", function()
    local OFFSETS = {
      bf16 = { 0, -2e3, 1e5, 3.3e5, 1e6, 2.7e6, 1e7, 3e7, 1e9, -1e9, 1e30 },
      f16 = { 0, -2e3, 3e3, 1.5e4, -3e4, 6e4 },
    }
    for _, sizes in ipairs { { 2048, 300 }, { 11, 4097 }, { 2, 131072 } } do
      local N, Cn = sizes[1], sizes[2]
      local base = ploss.randn({ N * Cn }, { dtype = "f64", seed = 73 }):flat()
      local yh = {}
      for i = 1, N do yh[i] = (i * 131) % Cn end
      local y = ploss.tensor(yh, { dtype = "i64", device = DEV })
      for _, dtype in ipairs { "bf16", "f16" } do
        local offs, v = OFFSETS[dtype], {}
        for i = 1, N do
          local o = offs[(i - 1) % #offs + 1]
          local std = math.max(3, math.abs(o) * 2 ^ -6) -- a few of the dtype's steps near o
          for j = 1, Cn do v[(i - 1) * Cn + j] = o + base[(i - 1) * Cn + j] * std end
        end
        local x = ploss.tensor(v, { dtype = dtype, device = DEV }):view(N, Cn)
        for _, o in ipairs { { reduction = "mean" }, { reduction = "sum", label_smoothing = 0.1 } } do
          local label = string.format("%dx%d %s %s%s", N, Cn, dtype, o.reduction, o.label_smoothing and " smoothing" or "")
          local l, g = F.cross_entropy_fused(x, y, o)
          local ref = reference(x, y, o)
          close(l, ref.loss, TOL[dtype].loss, 0, label .. " loss")
          close(g, ref.grad, TOL[dtype].grad, TOL[dtype].floor, label .. " grad")
          local fl, fg = F.softmax_focal_fused(x, y, { gamma = 2, reduction = o.reduction })
          local fref_l, fref_g = F.softmax_focal_fused(ref.x, ref.y, { gamma = 2, reduction = o.reduction })
          close(fl, fref_l, TOL[dtype].loss, 0, label .. " focal loss")
          close(fg, fref_g, TOL[dtype].grad, TOL[dtype].floor, label .. " focal grad")
        end
      end
    end
  end)

  -- Rows of 80–160 KiB (a streamed block of 512 threads) over more than the one-launch
  -- limit of 1024 rows: the label pass, the per-block partials and the final sum.
  it("1100 rows of 21000 f32 classes (blocks of 512 threads after a label pass)", function()
    local sizes = { 1100, 21000 }
    local x = make_input(sizes, "f32", "contiguous", 811)
    local y = make_target(sizes, "index", true, "i64", 811)
    for _, o in ipairs { { reduction = "mean", label_smoothing = 0.1 }, { reduction = "sum" } } do
      local label = "1100x21000 " .. o.reduction
      local l, g = F.cross_entropy_fused(x, y, o)
      local ref = reference(x, y, o)
      close(l, ref.loss, TOL.f32.loss, 0, label .. " loss")
      close(g, ref.grad, TOL.f32.grad, TOL.f32.floor, label .. " grad")
    end
  end)

  -- A masked vocabulary: -inf logits, first in every row (before any finite logit of the
  -- row or of a thread's share of it) and further on.  Every row shape: streamed blocks
  -- (4097 classes; 32000 in 16 bits), a streamed block of 512 threads (32000 in f32), streamed
  -- clusters of 4 (131072 in 16 bits) and 8 (131072 in f32).  The masked classes get p = 0
  -- and an exactly zero gradient.
  it("masked classes (-inf logits) in every row shape", function()
    for _, sizes in ipairs { { 4, 4097 }, { 3, 32000 }, { 2, 131072 } } do
      local Cn = sizes[2]
      for _, dtype in ipairs { "f32", "bf16" } do
        local x = ploss.randn(sizes, { dtype = dtype, device = DEV, std = 3, seed = 61 })
        x:narrow(2, 1, 100):fill(-math.huge)
        x:narrow(2, Cn - 40, 17):fill(-math.huge)
        local yh = {}
        for i = 1, sizes[1] do yh[i] = 100 + (i * 977) % (Cn - 200) end
        local y = ploss.tensor(yh, { dtype = "i64", device = DEV })
        for _, red in ipairs { "mean", "none" } do
          local opts = { reduction = red }
          local label = string.format("%dx%d %s %s", sizes[1], Cn, dtype, red)
          local l, g = F.cross_entropy_fused(x, y, opts)
          local ref = reference(x, y, opts)
          close(l, ref.loss, TOL[dtype].loss, 0, label .. " loss")
          close(g, ref.grad, TOL[dtype].grad, TOL[dtype].floor, label .. " grad")
          local gh = g:to("cpu", "f64")
          for _, v in ipairs(gh:narrow(2, 1, 100):flat()) do assert.are.equal(0, v, label .. " masked gradient") end
          close(ploss.CrossEntropyLoss(opts):forward(x, y), ref.loss, TOL[dtype].loss, 0, label .. " forward")
        end
      end
    end
  end)

  -- Label smoothing 1 ('reference', 'uniform_others') gives the label the coefficient 0:
  -- a -inf label logit then adds nothing, a finite loss (the limit) on every row shape and
  -- the class-strided layout (16-byte rows: shared-memory tiles; 5×7 pixels: registers),
  -- weighted or not, fused, forward and backward (saved and recomputed lse).
  it("label smoothing 1 with -inf label logits: the finite limit in every row shape", function()
    for _, sizes in ipairs { { 64, 10 }, { 3, 4097 }, { 3, 32000 }, { 2, 131072 }, { 2, 19, 16, 16 }, { 3, 19, 5, 7 } } do
      local Cn = sizes[2]
      for _, dtype in ipairs { "f32", "bf16" } do
        local x = ploss.randn(sizes, { dtype = dtype, device = DEV, std = 3, seed = 67 })
        x:narrow(2, 1, 1):fill(-math.huge)
        local y = ploss.zeros(sample_sizes(sizes), { dtype = "i64", device = DEV })
        for _, conv in ipairs { "reference", "uniform_others" } do
          for _, weighted in ipairs { false, true } do
            local opts = { label_smoothing = 1, smoothing_convention = conv, reduction = "mean" }
            if weighted then
              opts.weight = ploss.rand({ Cn }, { dtype = "f32", device = DEV, low = 0.5, high = 2, seed = 5 })
            end
            local label = string.format("%s %s %s%s", table.concat(sizes, "x"), dtype, conv, weighted and " weighted" or "")
            local l, g = F.cross_entropy_fused(x, y, opts)
            local ref = reference(x, y, opts)
            assert.is_true(ref.loss == ref.loss and ref.loss < math.huge, label .. " reference finite")
            close(l, ref.loss, TOL[dtype].loss, 0, label .. " loss")
            close(g, ref.grad, TOL[dtype].grad, TOL[dtype].floor, label .. " grad")
            local crit = ploss.CrossEntropyLoss(opts)
            close(crit:forward(x, y), ref.loss, TOL[dtype].loss, 0, label .. " forward")
            close(crit:backward(x, y), ref.grad, TOL[dtype].grad, TOL[dtype].floor, label .. " backward (saved lse)")
            close(F.cross_entropy_backward(x, y, nil, opts), ref.grad, TOL[dtype].grad, TOL[dtype].floor,
              label .. " backward (recomputed lse)")
          end
        end
      end
    end
  end)

  it("is deterministic: the same inputs give bitwise the same loss and gradient", function()
    for _, sizes in ipairs { { 4096, 1000 }, { 2, 131072 }, { 4, 19, 64, 64 } } do
      local x = ploss.randn(sizes, { dtype = "f32", device = DEV, seed = 42 })
      local y = make_target(sizes, "index", true, "i64", 42)
      local opts = { label_smoothing = 0.1 }
      local l1, g1 = F.cross_entropy_fused(x, y, opts)
      local l2, g2 = F.cross_entropy_fused(x, y, opts)
      assert.are.equal(l1, l2)
      H.assert_equal(g2, g1)
      local s1 = F.cross_entropy(x, y, { reduction = "sum" })
      assert.are.equal(s1, F.cross_entropy(x, y, { reduction = "sum" }))
    end
  end)
end)

describe("CUDA cross-entropy edge cases (" .. DEV .. ")", function()
  it("all targets ignored: NaN mean, 0 sum, an exactly zero gradient", function()
    for _, dtype in ipairs { "f32", "f16", "bf16", "f64" } do
      for _, sizes in ipairs { { 3, 4 }, { 2, 2000 }, { 2, 3, 4, 5 } } do
        local x = ploss.randn(sizes, { dtype = dtype, device = DEV })
        local y = ploss.full(sample_sizes(sizes), -100, { dtype = "i64", device = DEV })
        for _, red in ipairs { "mean", "sum", "none" } do
          local crit = ploss.CrossEntropyLoss { reduction = red, label_smoothing = 0.2, weight = ploss.ones(sizes[2]):totable() }
          local l, g = crit(x, y)
          if red == "mean" then assert.is_true(l ~= l) end
          if red == "sum" then assert.are.equal(0, l) end
          for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
          crit:forward(x, y)
          for _, v in ipairs(crit:backward(x, y):flat()) do assert.are.equal(0, v) end
        end
      end
    end
  end)

  it("class weights of the valid samples summing to 0: NaN mean, label smoothing too; zero gradient", function()
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      for _, sizes in ipairs { { 3, 4 }, { 2, 2000 }, { 2, 3, 4, 5 } } do
        local x = ploss.randn(sizes, { dtype = dtype, device = DEV })
        local y = ploss.zeros(sample_sizes(sizes), { dtype = "i64", device = DEV })
        local w = ploss.ones(sizes[2]):totable()
        w[1] = 0
        for _, ls in ipairs { 0, 0.2 } do
          local l, g = ploss.CrossEntropyLoss { label_smoothing = ls, weight = w }(x, y)
          assert.is_true(l ~= l, "loss " .. tostring(l))
          for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
        end
      end
    end
  end)

  it("one sample of C classes (PyTorch's unbatched form), as on the CPU", function()
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      for _, C in ipairs { 7, 3000 } do
        local x = ploss.randn({ C }, { dtype = dtype, seed = C })
        local y = ploss.tensor(C - 2, { dtype = "i64" })
        for _, red in ipairs { "mean", "none" } do
          local crit = ploss.CrossEntropyLoss { label_smoothing = 0.1, reduction = red }
          local lc, gc = crit(x, y)
          local lg, gg = crit(x:to(DEV), y:to(DEV))
          if red == "none" then
            assert.are.equal(0, lg:dim())
            lc, lg = lc:item(), lg:to("cpu"):item()
          end
          H.assert_close({ lg }, { lc }, { rtol = dtype == "bf16" and 1e-3 or 1e-5, what = dtype .. " loss" })
          H.assert_close(gg, gc, { rtol = dtype == "bf16" and 2e-2 or 1e-4, atol = 1e-6, what = dtype .. " gradient" })
        end
      end
    end
  end)

  it("empty batch: NaN mean, 0 sum, empty gradients", function()
    for _, dtype in ipairs { "f32", "f16", "bf16", "f64" } do
      local x = ploss.empty({ 0, 7 }, { dtype = dtype, device = DEV })
      local y = ploss.empty({ 0 }, { dtype = "i64", device = DEV })
      local m, g = F.cross_entropy_fused(x, y)
      assert.is_true(m ~= m)
      assert.are.same({ 0, 7 }, g:size())
      assert.are.equal(0, F.cross_entropy(x, y, { reduction = "sum" }))
      assert.are.same({ 0 }, F.cross_entropy(x, y, { reduction = "none" }):size())
      local x4 = ploss.empty({ 2, 3, 0, 5 }, { dtype = dtype, device = DEV })
      local y4 = ploss.empty({ 2, 0, 5 }, { dtype = "i64", device = DEV })
      local m4 = F.cross_entropy(x4, y4)
      assert.is_true(m4 ~= m4)
      -- the empty dim last (its neighbours' strides need not line up)
      local x5 = ploss.empty({ 2, 3, 2, 0 }, { dtype = dtype, device = DEV })
      local y5 = ploss.empty({ 2, 2, 0 }, { dtype = "i64", device = DEV })
      local l5, g5 = F.cross_entropy_fused(x5, y5, { reduction = "sum" })
      assert.are.equal(0, l5)
      assert.are.same({ 2, 3, 2, 0 }, g5:size())
    end
  end)

  it("NaN in an ignored row does not leak", function()
    for _, dtype in ipairs { "f32", "f16", "bf16", "f64" } do
      for _, Cn in ipairs { 6, 3000 } do
        local x = ploss.randn({ 4, Cn }, { dtype = dtype, device = DEV })
        x[2] = 0 / 0
        local y = ploss.tensor({ 1, 255, 2, 0 }, { dtype = "i64", device = DEV })
        for _, red in ipairs { "mean", "sum", "none" } do
          local l, g = F.cross_entropy_fused(x, y, { reduction = red, ignore_index = 255, label_smoothing = 0.1 })
          for _, v in ipairs(H.values(l)) do assert.is_true(v == v) end
          local gv = g:flat()
          for i, v in ipairs(gv) do
            assert.is_true(v == v, dtype .. " " .. red .. " element " .. i)
            if i > Cn and i <= 2 * Cn then assert.are.equal(0, v) end
          end
        end
      end
      -- N×C×H×W with an even pixel count: neighbouring pixels share a thread (16-bit logits
      -- up to 24 classes, f32 up to 8); an ignored NaN pixel beside valid ones
      for _, Cn in ipairs { 6, 19 } do
        local x = ploss.randn({ 2, Cn, 2, 2 }, { dtype = dtype, device = DEV, seed = 11 })
        x:narrow(1, 1, 1):narrow(3, 1, 1):narrow(4, 1, 1):fill(0 / 0)
        local y = ploss.tensor({ { { 255, 1 }, { 2, 0 } }, { { 3, 255 }, { 1, 1 } } }, { dtype = "i64", device = DEV })
        for _, red in ipairs { "mean", "sum", "none" } do
          local l, g = F.cross_entropy_fused(x, y, { reduction = red, ignore_index = 255, label_smoothing = 0.1 })
          for _, v in ipairs(H.values(l)) do assert.is_true(v == v, dtype .. " " .. red .. " 4-d loss") end
          local gh = g:to("cpu", "f64")
          for c = 1, Cn do
            assert.are.equal(0, gh:narrow(1, 1, 1):narrow(2, c, 1):narrow(3, 1, 1):narrow(4, 1, 1):flat()[1])
            assert.are.equal(0, gh:narrow(1, 2, 1):narrow(2, c, 1):narrow(3, 1, 1):narrow(4, 2, 1):flat()[1])
          end
          for i, v in ipairs(gh:flat()) do assert.is_true(v == v, dtype .. " " .. red .. " 4-d element " .. i) end
        end
      end
    end
  end)

  -- An invalid label found by a kernel is reported by the next call that synchronises.
  local function expect_label_error(fn, fragment)
    if not ON_GPU then
      -- the CPU validates labels before writing: the call itself raises
      H.expect_error(fn, fragment)
      return
    end
    fn() -- queues the kernels; no host synchronisation, so no error yet
    H.expect_error(function() ploss.synchronize(DEV) end, { "PLOSS_ERR_INVALID_LABEL", fragment })
    ploss.synchronize(DEV) -- the slot was cleared
  end

  it("an invalid label is reported at the next synchronising call, for every kernel path", function()
    for _, sizes in ipairs { { 4, 10 }, { 4, 1000 }, { 2, 131072 }, { 2, 3, 4, 5 } } do
      for _, bad in ipairs { sizes[2], -1, sizes[2] + 1000 } do
        for _, tdt in ipairs { "i64", "i32" } do
          local x = ploss.randn(sizes, { dtype = "f32", device = DEV })
          local yh = ploss.zeros(sample_sizes(sizes), { dtype = "i64" })
          yh:view(-1)[2] = bad
          local y = yh:to(DEV, tdt)
          local crit = ploss.CrossEntropyLoss { reduction = "none" }
          expect_label_error(function() crit:forward_tensor(x, y) end, "PLOSS_ERR_INVALID_LABEL")
          expect_label_error(function() F.cross_entropy_fused(x, y, { reduction = "none" }) end, "PLOSS_ERR_INVALID_LABEL")
          expect_label_error(function() F.cross_entropy_backward(x, y, nil, { reduction = "none" }) end, "PLOSS_ERR_INVALID_LABEL")
          -- a reduced loss is read at once: the error comes from that call
          H.expect_error(function() local _ = F.cross_entropy(x, y) end, "PLOSS_ERR_INVALID_LABEL")
          H.expect_error(function() local _ = ploss.CrossEntropyLoss {}:forward(x, y) end, "PLOSS_ERR_INVALID_LABEL")
          -- and the context works again afterwards
          local good = ploss.zeros(sample_sizes(sizes), { dtype = tdt, device = DEV })
          assert.is_number(F.cross_entropy(x, good))
        end
      end
    end
  end)

  it("an invalid label is also reported by :item() of another tensor on the device", function()
    if not ON_GPU then return end
    local x = ploss.randn({ 4, 10 }, { device = DEV })
    local y = ploss.tensor({ 0, 1, 12, 3 }, { dtype = "i64", device = DEV })
    local loss = ploss.CrossEntropyLoss {}:forward_tensor(x, y)
    H.expect_error(function() local _ = loss:item() end, "PLOSS_ERR_INVALID_LABEL")
    ploss.synchronize(DEV)
  end)

  it("bad input gives the CPU's messages and leaves outputs untouched", function()
    local x = ploss.randn({ 4, 5 }, { device = DEV })
    local y = ploss.randint(0, 5, { 4 }, { device = DEV })
    local loss = ploss.empty({}, { device = DEV })
    local grad = ploss.empty({ 4, 5 }, { device = DEV })
    local function both(o, yy, fragment)
      local oo = { out = loss }
      for k, v in pairs(o) do oo[k] = v end
      H.expect_error(function() F.cross_entropy(x, yy or y, oo) end, fragment, loss)
      oo.grad_input = grad
      H.expect_error(function() F.cross_entropy_fused(x, yy or y, oo) end, fragment, loss, grad)
    end
    both({}, ploss.randint(0, 5, { 3 }, { device = DEV }), "target: expected shape [4]")
    both({ label_smoothing = 1.5 }, nil, "opts.label_smoothing: 1.5 is not a finite number in [0, 1]")
    both({ weight = ploss.ones({ 4 }, { device = DEV }) }, nil, "weight: expected shape [5]")
    both({}, ploss.tensor({ 0, 1, 2, 3 }, { device = DEV }), "target: class indices must be i64 or i32, got f32 of the sample shape")
    local x1 = ploss.randn({ 4, 1 }, { device = DEV })
    H.expect_error(function() F.cross_entropy(x1, ploss.zeros({ 4 }, { dtype = "i64", device = DEV }),
      { label_smoothing = 0.1, smoothing_convention = "uniform_others" }) end, "undefined for C = 1")
  end)

  it("mixed devices are refused", function()
    if not ON_GPU then return end
    local x = ploss.randn({ 4, 5 }, { device = DEV })
    local y = ploss.randint(0, 5, { 4 })
    local loss = ploss.empty({}, { device = DEV })
    H.expect_error(function() F.cross_entropy(x, y, { out = loss }) end,
      { "target: expected a tensor on cuda:0 (the context's device), got i64[4] on cpu", "PLOSS_ERR_DEVICE" }, loss)
    local yd = y:to(DEV)
    H.expect_error(function() F.cross_entropy(x, yd, { weight = ploss.ones(5), out = loss }) end,
      "weight: expected a tensor on cuda:0", loss)
    local gh = ploss.empty({ 4, 5 })
    H.expect_error(function() F.cross_entropy_fused(x, yd, { grad_input = gh }) end, "grad_input: expected a tensor on cuda:0", gh)
    H.expect_error(function() F.cross_entropy(x:to("cpu"), yd) end, "target: expected a tensor on cpu")
    -- a weight given as a Lua list follows the input
    assert.is_number(F.cross_entropy(x, yd, { weight = { 1, 2, 3, 4, 5 } }))
    local crit = ploss.CrossEntropyLoss { weight = { 1, 2, 3, 4, 5 } }
    H.assert_close(crit:forward(x, yd), crit:forward(x:to("cpu"), y), { rtol = 1e-5 })
    -- a criterion's tensor options move with :to()
    local c2 = ploss.CrossEntropyLoss { weight = ploss.ones(5) }:to(DEV)
    assert.are.equal("cuda:0", c2.weight:device())
    assert.is_number(c2:forward(x, yd))
  end)

  it("reuses its buffers and the context's workspace: a second fused call allocates nothing", function()
    for _, sizes in ipairs { { 256, 1000 }, { 2, 131072 }, { 2, 19, 64, 64 } } do
      local x = ploss.randn(sizes, { device = DEV })
      local y = make_target(sizes, "index", true, "i64", 7)
      local crit = ploss.CrossEntropyLoss { label_smoothing = 0.1 }
      crit(x, y)
      crit:forward(x, y)
      crit:backward(x, y)
      -- the collector frees earlier iterations' tensors whenever it runs: not in the window
      collectgarbage("collect")
      collectgarbage("collect")
      collectgarbage("stop")
      local before = ploss.memory_stats(DEV)
      crit(x, y)
      crit:forward(x, y)
      crit:backward(x, y)
      local after = ploss.memory_stats(DEV)
      collectgarbage("restart")
      assert.are.equal(before.alloc_count, after.alloc_count, table.concat(sizes, "x"))
      assert.are.equal(before.current_bytes, after.current_bytes)
    end
  end)

  it("keeps one value per sample between forward and backward (an f64 log-sum-exp)", function()
    local x = ploss.randn({ 64, 32000 }, { device = DEV })
    local y = ploss.randint(0, 32000, { 64 }, { device = DEV })
    local crit = ploss.CrossEntropyLoss {}
    crit:forward(x, y)
    assert.are.equal(64, crit._state:numel())
    assert.are.equal("f64", crit._state:dtype())
  end)
end)
