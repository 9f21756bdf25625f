-- Fused linear + cross-entropy on CUDA (suite 'cuda'; spec/run.lua exits 77 before this file
-- without a GPU).  CUDA against the CPU backend on the same dtype-rounded inputs, f32/f16/
-- bf16 (on the GPU the logit tile is rounded to the input dtype, as F.linear gives it, and
-- the softmax is the row engine's fp32; the CPU is f64 throughout: tolerances TOL below),
-- every reduction and option (label smoothing, softcap, z-loss, the focal policy), forward, backward (a
-- scalar or a per-row upstream gradient) and fused, the split passes against the fused one
-- bitwise; one tile and several; vocabularies served by a block and by clusters of blocks
-- per row (V = 50257, not a multiple of 8; V = 300000), rows served by a warp each; ignored rows;
-- staged operands (strided, transposed, weight_layout 'DxC') and gradients (a transposed
-- grad_weight accumulated into); an empty batch; bitwise determinism; f64 refused; nothing
-- written on a validation error; a bias (its dtype or f32, with a padded V, accumulated
-- into grad_bias) and the per-row lse and entropy.  PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a
-- dry run of its logic.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()

local DTYPES = { "f32", "f16", "bf16" }
local REDUCTIONS = { "none", "mean", "sum" }
-- logits of about unit size (inputs scaled by 1/√D): rounding a logit to bf16 moves it by
-- up to 2^-9 of itself, the loss by about as much
local TOL = {
  f32 = { loss = 1e-5, grad = 1e-4, floor = 0 },
  f16 = { loss = 2e-3, grad = 1e-2, floor = 2 ^ -24 },
  bf16 = { loss = 1e-2, grad = 4e-2, floor = 0 },
}
local close = H.assert_close_scaled

local OPTIONS = { {}, { label_smoothing = 0.1 }, { softcap = 3, z_loss = 1e-3 },
                  { label_smoothing = 0.2, softcap = 1.5, z_loss = 0.05 },
                  { policy = "focal" }, { policy = "focal", gamma = 0.5, softcap = 3, z_loss = 1e-3 } }

local label = H.options_label

local with = H.with

-- f64 CPU hidden rows (scaled by 1/√D) and weight rows, labels with every
-- `ignore_every`-th row ignored.
local function inputs(n, C, D, seed, ignore_every)
  local X = ploss.randn({ n, D }, { dtype = "f64", seed = seed }):totable()
  for _, r in ipairs(X) do
    for d = 1, D do r[d] = r[d] / math.sqrt(D) end
  end
  local x = n > 0 and ploss.tensor(X, { dtype = "f64" }) or ploss.empty({ 0, D }, { dtype = "f64" })
  local w = ploss.randn({ C, D }, { dtype = "f64", seed = seed + 1 })
  local y = {}
  for i = 1, n do
    y[i] = (i * 7919 + seed) % C
    if ignore_every and i % ignore_every == 0 then y[i] = -100 end
  end
  return x, w, ploss.tensor(y, { dtype = "i64" })
end

-- One comparison: fused, forward and backward on the CPU and DEV, inputs rounded to dtype
-- once; `layout` may turn the device inputs into other views of the same values.
local function compare(x64, w64, y, opts, dtype, what, layout)
  local xc, wc = x64:type(dtype), w64:type(dtype)
  local xg, wg, yg = xc:to(DEV), wc:to(DEV), y:to(DEV)
  if layout then xg, wg = layout(xg, wg) end
  local T = TOL[dtype]
  what = what .. " " .. dtype .. " " .. label(opts)
  local lc, gxc, gwc = F.linear_cross_entropy_fused(xc, wc, y, opts)
  local lg, gxg, gwg = F.linear_cross_entropy_fused(xg, wg, yg, opts)
  local none = opts.reduction == "none"
  close(none and lg or { lg }, none and lc or { lc }, T.loss, 0, what .. " fused loss")
  assert.are.equal(dtype, gxg:dtype())
  assert.are.equal(dtype, gwg:dtype())
  close(gxg, gxc, T.grad, T.floor, what .. " fused grad_hidden")
  close(gwg, gwc, T.grad, T.floor, what .. " fused grad_weight")
  -- forward and backward equal the fused pass on the device (the same kernels)
  local lf = F.linear_cross_entropy(xg, wg, yg, opts)
  H.assert_close(none and lf or { lf }, none and lg or { lg }, { rtol = 0, atol = 0, what = what .. " forward" })
  local up = none and ploss.ones({ x64:size(1) }, { dtype = "f32", device = DEV }) or nil
  local bx, bw = F.linear_cross_entropy_backward(xg, wg, yg, up, opts)
  H.assert_close(bx, gxg, { rtol = 0, atol = 0, what = what .. " backward grad_hidden" })
  H.assert_close(bw, gwg, { rtol = 0, atol = 0, what = what .. " backward grad_weight" })
end

describe("LinearCrossEntropyLoss on " .. DEV .. " against the CPU", function()
  -- V = 40 and 3000: a block per row (few rows); N = 2100: a warp per row; tiles
  for _, shape in ipairs { { 37, 40, 16, 0 }, { 300, 40, 64, 7 }, { 64, 3000, 32, 5 }, { 2100, 100, 8, 0 } } do
    local n, C, D, tile = shape[1], shape[2], shape[3], shape[4]
    it(string.format("N = %d, V = %d, H = %d, tile_rows = %d: every option, dtype and reduction", n, C, D, tile), function()
      local x, w, y = inputs(n, C, D, n + C + D, 6)
      for _, o in ipairs(OPTIONS) do
        for _, dtype in ipairs(DTYPES) do
          for _, r in ipairs(REDUCTIONS) do
            compare(x, w, y, with(o, { reduction = r, tile_rows = tile }), dtype, string.format("%dx%dx%d", n, C, D))
          end
        end
      end
    end)
  end

  it("serves a GPT-2 vocabulary (V = 50257: a cluster of blocks per row, not a multiple of 8)", function()
    local x, w, y = inputs(20, 50257, 16, 3, 5)
    for _, dtype in ipairs(DTYPES) do
      for _, o in ipairs { { reduction = "mean", tile_rows = 8 }, { reduction = "none", label_smoothing = 0.1, z_loss = 1e-4 },
                           { reduction = "sum", policy = "focal", gamma = 1.5 } } do
        compare(x, w, y, o, dtype, "20x50257x16")
      end
    end
  end)

  it("serves vocabularies longer than a cluster's registers (V = 300000: a streamed cluster of 8 blocks per row)", function()
    local x, w, y = inputs(6, 300000, 8, 13, 4)
    for _, dtype in ipairs { "f32", "bf16" } do
      compare(x, w, y, { reduction = "mean", label_smoothing = 0.1, tile_rows = 4 }, dtype, "6x300000x8")
    end
  end)

  it("gives the same result in one tile and in tiles of 1, 5 and 64 rows", function()
    local x, w, y = inputs(130, 300, 32, 11, 9)
    for _, dtype in ipairs(DTYPES) do
      local xg, wg, yg = x:type(dtype):to(DEV), w:type(dtype):to(DEV), y:to(DEV)
      local l, gx, gw = F.linear_cross_entropy_fused(xg, wg, yg, OPTIONS[4])
      for _, t in ipairs { 1, 5, 64 } do
        local lt, gxt, gwt = F.linear_cross_entropy_fused(xg, wg, yg, with(OPTIONS[4], { tile_rows = t }))
        local T = TOL[dtype]
        close({ lt }, { l }, 1e-6, 0, dtype .. " tile_rows = " .. t .. " loss")
        -- cuBLAS chooses its kernels by the tile's rows (another order of the fp32 sums), and
        -- grad_weight is rounded to the dtype once per tile
        close(gxt, gx, dtype == "f32" and 1e-5 or T.grad, T.floor, dtype .. " tile_rows = " .. t .. " grad_hidden")
        close(gwt, gw, dtype == "f32" and 1e-5 or T.grad, T.floor, dtype .. " tile_rows = " .. t .. " grad_weight")
      end
    end
  end)

  it("takes the upstream gradient per row ('none') and a scalar one, and the fused scale", function()
    local x, w, y = inputs(60, 100, 20, 5, 4)
    local up = ploss.randn({ 60 }, { dtype = "f32", seed = 8 })
    for _, dtype in ipairs(DTYPES) do
      local xc, wc = x:type(dtype), w:type(dtype)
      local xg, wg, yg = xc:to(DEV), wc:to(DEV), y:to(DEV)
      local T = TOL[dtype]
      local opts = with(OPTIONS[4], { reduction = "none", tile_rows = 16 })
      local gc = { F.linear_cross_entropy_backward(xc, wc, y, up, opts) }
      local gg = { F.linear_cross_entropy_backward(xg, wg, yg, up:to(DEV), opts) }
      for k = 1, 2 do close(gg[k], gc[k], T.grad, T.floor, dtype .. " per-row upstream " .. k) end
      gc = { F.linear_cross_entropy_backward(xc, wc, y, -1.75, { tile_rows = 7 }) }
      gg = { F.linear_cross_entropy_backward(xg, wg, yg, -1.75, { tile_rows = 7 }) }
      for k = 1, 2 do close(gg[k], gc[k], T.grad, T.floor, dtype .. " scalar upstream " .. k) end
      local fc = { F.linear_cross_entropy_fused(xc, wc, y, { reduction = "sum", scale = 0.25 }) }
      local fg = { F.linear_cross_entropy_fused(xg, wg, yg, { reduction = "sum", scale = 0.25 }) }
      close({ fg[1] }, { fc[1] }, T.loss, 0, dtype .. " scaled loss")
      for k = 2, 3 do close(fg[k], fc[k], T.grad, T.floor, dtype .. " scaled " .. k) end
    end
  end)

  it("stages strided and transposed operands, and an H×V weight (weight_layout 'DxC')", function()
    local x, w, y = inputs(40, 70, 12, 21, 8)
    local function transposed(xg, wg) return xg:t():contiguous():t(), wg:t():contiguous():t() end
    local function every_other(xg, wg)
      local xw = ploss.zeros({ xg:size(1), 2 * xg:size(2) }, { dtype = xg:dtype(), device = DEV })
      xw:narrow(2, 1, xg:size(2)):copy(xg)
      return xw:narrow(2, 1, xg:size(2)), wg
    end
    for _, dtype in ipairs(DTYPES) do
      for _, layout in ipairs { transposed, every_other } do
        compare(x, w, y, with(OPTIONS[2], { reduction = "mean", tile_rows = 9 }), dtype, "strided", layout)
      end
      local xg, wg, yg = x:type(dtype):to(DEV), w:type(dtype):to(DEV), y:to(DEV)
      local l, gx, gw = F.linear_cross_entropy_fused(xg, wg, yg)
      local l2, gx2, gw2 = F.linear_cross_entropy_fused(xg, wg:t():contiguous(), yg, { weight_layout = "DxC" })
      assert.are.equal(l, l2)
      H.assert_equal(gx2, gx, { what = dtype .. " grad_hidden" })
      assert.are.same({ 12, 70 }, gw2:size())
      H.assert_equal(gw2:t(), gw, { what = dtype .. " grad_weight" })
    end
  end)

  it("accumulates into a given grad_weight, contiguous or a transposed view", function()
    local x, w, y = inputs(50, 90, 16, 33, 7)
    for _, dtype in ipairs { "f32", "bf16" } do
      local xg, wg, yg = x:type(dtype):to(DEV), w:type(dtype):to(DEV), y:to(DEV)
      local _, _, gw = F.linear_cross_entropy_fused(xg, wg, yg, { tile_rows = 16 })
      local base = ploss.randn({ 90, 16 }, { dtype = "f64", seed = 5 }):type(dtype)
      local want = H.values(base:double())
      for k, v in ipairs(H.values(gw:to("cpu"):double())) do want[k] = want[k] + v end
      local buf = base:clone():to(DEV)
      F.linear_cross_entropy_fused(xg, wg, yg, { tile_rows = 16, grad_weight = buf, accumulate = true })
      close(H.values(buf:to("cpu"):double()), want, dtype == "f32" and 1e-5 or 2e-2, 0, dtype .. " accumulated")
      local bt = ploss.zeros({ 16, 90 }, { dtype = dtype, device = DEV })
      bt:copy(base:clone():to(DEV):t())
      F.linear_cross_entropy_fused(xg, wg, yg, { tile_rows = 16, grad_weight = bt:t(), accumulate = true })
      H.assert_equal(bt:t(), buf, { what = dtype .. " a transposed grad_weight, staged" })
    end
  end)

  -- Every logit 0 (zero weight): p = 2^-14 for V = 16384 classes; reduction 'sum' (ω = 1),
  -- x all ones, 1024 rows in tiles of 4.  Class 0 is the label of the first tile's 4 rows
  -- only: its gradient is 4·(p − 1) (each G rounded to 16 bits: −1, in bf16 and f16 alike)
  -- plus the 255 later tiles' 4·p = 2^-12 each, less than half a unit (bf16 and f16) of a
  -- running sum near −4.  Added into the running sum tile after tile, they would all round
  -- away (−4); taken apart from the label entries they sum exactly to 255·2^-12, and the row
  -- is −3.9375 (= 4·(p − 1) + 1020·p, exact) in either dtype.
  it("keeps the small softmax terms of a 16-bit grad_weight accumulated over 256 tiles", function()
    local n, C, D = 1024, 16384, 8
    local labels = {}
    for i = 1, n do labels[i] = i <= 4 and 0 or 1 + (i - 5) % (C - 1) end
    local y = ploss.tensor(labels, { dtype = "i64" })
    local opts = { reduction = "sum", tile_rows = 4 }
    for _, dtype in ipairs { "bf16", "f16" } do
      local x = ploss.ones({ n, D }, { dtype = dtype })
      local w = ploss.zeros({ C, D }, { dtype = dtype })
      local _, _, gw = F.linear_cross_entropy_fused(x:to(DEV), w:to(DEV), y:to(DEV), opts)
      local _, _, gwc = F.linear_cross_entropy_fused(x:double(), w:double(), y, { reduction = "sum" })
      local g = H.values(gw:to("cpu"):double())
      for d = 1, D do
        assert.are.equal(-3.9375, g[d], dtype .. " grad_weight[0][" .. (d - 1) .. "]")
      end
      close(gw, gwc, TOL[dtype].grad, TOL[dtype].floor, dtype .. " grad_weight over 256 tiles")
    end
  end)

  -- A frequent label (a third of the rows, in every tile) and features beyond one block's
  -- share (D = 200): the label rows' sums are spread over blocks and row groups.
  it("adds a frequent label's rows to a 16-bit grad_weight as the CPU does", function()
    local x, w, y = inputs(300, 50, 200, 41)
    local yt = H.values(y)
    for i = 1, #yt, 3 do yt[i] = 7 end
    y = ploss.tensor(yt, { dtype = "i64" })
    for _, dtype in ipairs { "bf16", "f16" } do
      local xc, wc = x:type(dtype), w:type(dtype)
      local _, gxc, gwc = F.linear_cross_entropy_fused(xc:double(), wc:double(), y)
      local _, gx, gw = F.linear_cross_entropy_fused(xc:to(DEV), wc:to(DEV), y:to(DEV), { tile_rows = 32 })
      close(gx, gxc, TOL[dtype].grad, TOL[dtype].floor, dtype .. " grad_hidden")
      close(gw, gwc, TOL[dtype].grad, TOL[dtype].floor, dtype .. " grad_weight")
    end
  end)

  it("writes f32 gradients of bf16 inputs, accumulated over the tiles without rounding", function()
    local x, w, y = inputs(96, 700, 24, 19, 9)
    local xc, wc = x:type("bf16"), w:type("bf16")
    local xg, wg, yg = xc:to(DEV), wc:to(DEV), y:to(DEV)
    local _, gxc, gwc = F.linear_cross_entropy_fused(xc:double(), wc:double(), y)
    for _, t in ipairs { 0, 16 } do
      local gx = ploss.empty({ 96, 24 }, { dtype = "f32", device = DEV })
      local gw = ploss.empty({ 700, 24 }, { dtype = "f32", device = DEV })
      F.linear_cross_entropy_fused(xg, wg, yg, { tile_rows = t, grad_hidden = gx, grad_weight = gw })
      -- the logits and G are still bf16 on the GPU: its rounding, not the gradients'
      close(gx, gxc, 2e-2, 0, "f32 grad_hidden, tile_rows = " .. t)
      close(gw, gwc, 2e-2, 0, "f32 grad_weight, tile_rows = " .. t)
    end
    -- over tiles of 16 rows the f32 weight gradient is the one-tile one to fp32 rounding
    local g1 = ploss.empty({ 700, 24 }, { dtype = "f32", device = DEV })
    local g6 = ploss.empty({ 700, 24 }, { dtype = "f32", device = DEV })
    F.linear_cross_entropy_fused(xg, wg, yg, { grad_weight = g1 })
    F.linear_cross_entropy_fused(xg, wg, yg, { tile_rows = 16, grad_weight = g6 })
    close(g6, g1, 1e-5, 0, "f32 grad_weight, six tiles against one")
  end)

  it("gives a NaN mean, zero gradients and a zero sum for an empty batch or every row ignored", function()
    H.check_empty_and_ignored_rows("linear_cross_entropy", DTYPES, DEV)
  end)

  it("is bitwise deterministic", function()
    local x, w, y = inputs(200, 500, 48, 31, 11)
    local xg, wg, yg = x:type("bf16"):to(DEV), w:type("bf16"):to(DEV), y:to(DEV)
    local l1, a1, b1 = F.linear_cross_entropy_fused(xg, wg, yg, with(OPTIONS[4], { tile_rows = 33 }))
    for _ = 1, 3 do
      local l2, a2, b2 = F.linear_cross_entropy_fused(xg, wg, yg, with(OPTIONS[4], { tile_rows = 33 }))
      assert.are.equal(l1, l2)
      H.assert_equal(a2, a1)
      H.assert_equal(b2, b1)
    end
  end)

  -- The bias and the per-row outputs: CUDA against the CPU on the same rounded inputs; the
  -- forward's lse and entropy equal the fused pass's bitwise; backward returns grad_bias too.
  -- masked = "masked": a bias of −∞ for every third class that is no row's label
  -- (probability 0); "span": −2e38 for every class that is no row's label but one, +2e38
  -- (logits more than FLT_MAX apart, whole stretches of a row near −2e38: every row's lse
  -- 2e38, entropy 0); nil: the bias as drawn
  local function compare_extras(n, C, D, opts, dtype, bias_dtype, what, masked)
    local x, w, y = inputs(n, C, D, n + C, 5)
    local b = ploss.randn({ C }, { dtype = "f64", seed = C })
    if masked then
      local B, used, top = b:totable(), {}, false
      for _, v in ipairs(y:totable()) do used[v] = true end
      for j = 0, C - 1 do
        if masked == "span" and not used[j] then
          B[j + 1] = top and -2e38 or 2e38
          top = true
        elseif masked ~= "span" and j % 3 == 1 and not used[j] then
          B[j + 1] = -math.huge
        end
      end
      b = ploss.tensor(B, { dtype = "f64" })
    end
    b = b:type(bias_dtype or dtype)
    local xc, wc = x:type(dtype), w:type(dtype)
    local T = TOL[dtype]
    what = string.format("%s %dx%dx%d %s bias %s %s", what, n, C, D, dtype, bias_dtype or dtype, label(opts))
    local o = with(opts, { bias = b, return_lse = true, return_entropy = true })
    local og = with(opts, { bias = b:to(DEV), return_lse = true, return_entropy = true })
    local rc = { F.linear_cross_entropy_fused(xc, wc, y, o) }
    local rg = { F.linear_cross_entropy_fused(xc:to(DEV), wc:to(DEV), y:to(DEV), og) }
    assert.are.equal(6, #rg)
    local none = opts.reduction == "none"
    close(none and rg[1] or { rg[1] }, none and rc[1] or { rc[1] }, T.loss, 0, what .. " loss")
    close(rg[2], rc[2], T.grad, T.floor, what .. " grad_hidden")
    close(rg[3], rc[3], T.grad, T.floor, what .. " grad_weight")
    assert.are.equal(bias_dtype or dtype, rg[4]:dtype())
    close(rg[4], rc[4], T.grad, T.floor, what .. " grad_bias")
    assert.are.equal("f32", rg[5]:dtype())
    close(rg[5], rc[5], T.loss, 0, what .. " lse")
    close(rg[6], rc[6], T.loss, 1e-6, what .. " entropy")
    local ff = { F.linear_cross_entropy(xc:to(DEV), wc:to(DEV), y:to(DEV), og) }
    H.assert_equal(ff[2], rg[5], { what = what .. " forward lse" })
    H.assert_equal(ff[3], rg[6], { what = what .. " forward entropy" })
    local up = none and ploss.ones({ n }, { dtype = "f32", device = DEV }) or nil
    local bg = { F.linear_cross_entropy_backward(xc:to(DEV), wc:to(DEV), y:to(DEV), up, with(opts, { bias = b:to(DEV) })) }
    assert.are.equal(3, #bg)
    H.assert_equal(bg[3], rg[4], { what = what .. " backward grad_bias" })
  end

  it("adds a bias and returns lse and entropy: every option, dtype, a block, a warp and a cluster per row", function()
    for _, shape in ipairs { { 37, 40, 16, 0 }, { 130, 301, 24, 16 }, { 2100, 100, 8, 0 }, { 12, 50257, 8, 5 } } do
      local n, C, D, tile = shape[1], shape[2], shape[3], shape[4]
      for _, o in ipairs(OPTIONS) do
        for _, dtype in ipairs(DTYPES) do
          for _, r in ipairs(C > 1000 and { "mean" } or REDUCTIONS) do
            compare_extras(n, C, D, with(o, { reduction = r, tile_rows = tile }), dtype, nil, "extras")
          end
        end
      end
    end
  end)

  it("masks classes by a bias of −∞ (entropy: 0·log 0 = 0) and takes logits more than FLT_MAX apart (±2e38), as on the CPU, in every row shape", function()
    for _, shape in ipairs { { 37, 40, 16, 0 }, { 2100, 100, 8, 0 }, { 12, 50257, 8, 5 } } do
      for _, dtype in ipairs { "f32", "bf16" } do
        for _, mask in ipairs { "masked", "span" } do
          compare_extras(shape[1], shape[2], shape[3], { tile_rows = shape[4] }, dtype, nil, mask, mask)
        end
      end
    end
  end)

  it("takes an f32 bias of bf16/f16 inputs, an f32 grad_bias, and adds into a given grad_bias", function()
    for _, dtype in ipairs { "f16", "bf16" } do
      compare_extras(70, 99, 16, { tile_rows = 16 }, dtype, "f32", "f32 bias")
      local x, w, y = inputs(70, 99, 16, 3, 6)
      local xg, wg, yg = x:type(dtype):to(DEV), w:type(dtype):to(DEV), y:to(DEV)
      local b = ploss.randn({ 99 }, { dtype = "f64", seed = 4 }):type(dtype):to(DEV)
      local _, _, _, gb = F.linear_cross_entropy_fused(xg, wg, yg, { bias = b, tile_rows = 16 })
      local g32 = ploss.empty({ 99 }, { dtype = "f32", device = DEV })
      F.linear_cross_entropy_fused(xg, wg, yg, { bias = b, tile_rows = 16, grad_bias = g32 })
      close(g32, gb:float(), 1e-2, 1e-6, dtype .. " f32 grad_bias")
      local base = ploss.randn({ 99 }, { dtype = "f64", seed = 6 }):float()
      local buf = base:to(DEV)
      local want = H.values(base:double())
      for k, v in ipairs(H.values(g32:to("cpu"):double())) do want[k] = want[k] + v end
      F.linear_cross_entropy_fused(xg, wg, yg, { bias = b, tile_rows = 16, grad_bias = buf, accumulate = true })
      close(H.values(buf:to("cpu"):double()), want, 1e-6, 1e-7, dtype .. " accumulated grad_bias")
      -- a strided grad_bias (every other element of a longer vector)
      local every = ploss.zeros({ 99, 2 }, { dtype = "f32", device = DEV }):select(2, 1)
      F.linear_cross_entropy_fused(xg, wg, yg, { bias = b, tile_rows = 16, grad_bias = every })
      H.assert_equal(every, g32, { what = dtype .. " strided grad_bias" })
    end
  end)

  it("gives zero lse, entropy and bias gradient for ignored rows and an empty batch; is deterministic", function()
    for _, dtype in ipairs(DTYPES) do
      local wg = ploss.randn({ 5, 3 }, { dtype = dtype, seed = 3 }):to(DEV)
      local b = ploss.randn({ 5 }, { dtype = dtype, seed = 9 }):to(DEV)
      local xg = ploss.randn({ 4, 3 }, { dtype = dtype, seed = 4 }):to(DEV)
      local yi = ploss.tensor({ -100, 1, -100, 3 }, { dtype = "i64" }):to(DEV)
      local r = { F.linear_cross_entropy_fused(xg, wg, yi, { bias = b, return_lse = true, return_entropy = true }) }
      local lse, ent = H.values(r[5]), H.values(r[6])
      assert.are.same({ 0, 0 }, { lse[1], lse[3] })
      assert.are.same({ 0, 0 }, { ent[1], ent[3] })
      assert.is_true(lse[2] > 0 and ent[2] > 0)
      local xe = ploss.empty({ 0, 3 }, { dtype = dtype, device = DEV })
      local ye = ploss.empty({ 0 }, { dtype = "i64", device = DEV })
      local e = { F.linear_cross_entropy_fused(xe, wg, ye, { bias = b, return_lse = true }) }
      H.assert_equal(e[4]:double(), ploss.zeros({ 5 }, { dtype = "f64" }))
      assert.are.equal(0, e[5]:numel())
    end
    local x, w, y = inputs(200, 500, 48, 31, 11)
    local xg, wg, yg = x:type("bf16"):to(DEV), w:type("bf16"):to(DEV), y:to(DEV)
    local o = with(OPTIONS[4], { tile_rows = 33, bias = ploss.randn({ 500 }, { dtype = "bf16", seed = 2 }):to(DEV),
      return_lse = true, return_entropy = true })
    local r1 = { F.linear_cross_entropy_fused(xg, wg, yg, o) }
    local r2 = { F.linear_cross_entropy_fused(xg, wg, yg, o) }
    assert.are.equal(r1[1], r2[1])
    for k = 2, 6 do H.assert_equal(r2[k], r1[k], { what = "bitwise " .. k }) end
  end)

  it("refuses a bias of another dtype or device", function()
    local x = ploss.randn({ 4, 3 }, { dtype = "bf16", seed = 1 }):to(DEV)
    local w = ploss.randn({ 5, 3 }, { dtype = "bf16", seed = 2 }):to(DEV)
    local y = ploss.tensor({ 0, 1, 4, 2 }, { dtype = "i64" }):to(DEV)
    H.expect_error(function() F.linear_cross_entropy(x, w, y, { bias = ploss.zeros({ 5 }, { dtype = "f16", device = DEV }) }) end,
      "bias: expected bf16 (hidden's dtype) or f32, got f16")
    if DEV ~= "cpu" then
      H.expect_error(function() F.linear_cross_entropy(x, w, y, { bias = ploss.zeros({ 5 }, { dtype = "bf16" }) }) end, "bias")
    end
  end)

  it("refuses bad input with an error naming the argument, writing nothing", function()
    local x = ploss.randn({ 4, 3 }, { seed = 1 }):to(DEV)
    local w = ploss.randn({ 5, 3 }, { seed = 2 }):to(DEV)
    local y = ploss.tensor({ 0, 1, 4, 2 }, { dtype = "i64" }):to(DEV)
    local out = ploss.empty({}, { device = DEV })
    local g1, g2 = ploss.empty({ 4, 3 }, { device = DEV }), ploss.empty({ 5, 3 }, { device = DEV })
    local fo = { out = out, grad_hidden = g1, grad_weight = g2 }
    H.expect_error(function() F.linear_cross_entropy_fused(x, ploss.randn({ 5, 4 }):to(DEV), y, fo) end,
      "weight: expected V×3 vocabulary rows (one per row; H = 3 as hidden)", out, g1, g2)
    H.expect_error(function() F.linear_cross_entropy_fused(x, w, y, with(fo, { z_loss = -1 })) end, "opts.z_loss",
      out, g1, g2)
    H.expect_error(function() F.linear_cross_entropy_fused(x, w:half(), y, fo) end, "weight", out, g1, g2)
    if DEV ~= "cpu" then -- a tensor on another device; f64
      H.expect_error(function() F.linear_cross_entropy_fused(x, w:to("cpu"), y, fo) end, "weight", out, g1, g2)
      H.expect_error(function() F.linear_cross_entropy_fused(x, w, y:to("cpu"), fo) end, "labels", out, g1, g2)
      H.expect_error(function() F.linear_cross_entropy(x:double(), w:double(), y) end, "f64 on the CPU only")
    end
  end)
end)
