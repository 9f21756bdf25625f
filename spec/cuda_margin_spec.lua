-- Margin softmax losses on CUDA (suite 'cuda'; spec/run.lua exits 77 before this file
-- without a GPU).  CUDA against the CPU backend on the same dtype-rounded inputs,
-- f32/f16/bf16 (cosines from GEMMs with fp32 accumulation and the row engine's fp32
-- softmax on the GPU, f32 products and f64 sums on the CPU; tolerances TOL below), every
-- reduction, forward,
-- backward (a scalar or a per-row upstream gradient) and fused, the fused pass against the
-- split one bitwise; one tile and several (tile_rows), class counts served by a warp, a
-- block and a cluster of blocks per row; ignored rows; the angle's edge cases (|cos| = 1,
-- beyond θ + m = π); Partial FC (the same classes drawn on both devices for one seed);
-- strided and transposed views; an empty batch; bitwise determinism; f64 refused; nothing
-- written on a validation error.  PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a
-- dry run of its logic.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()

local DTYPES = { "f32", "f16", "bf16" }
local REDUCTIONS = { "none", "mean", "sum" }
-- GPU against CPU on the same rounded inputs: the cosines from fp32 products (scaled by s
-- up to 64 into the logits), the gradient products from G rounded to the input dtype
local TOL = {
  f32 = { loss = 1e-4, grad = 2e-4, floor = 0 },
  f16 = { loss = 1e-4, grad = 1e-2, floor = 2 ^ -24 },
  bf16 = { loss = 1e-4, grad = 4e-2, floor = 0 },
}
local close = H.assert_close_scaled

local KINDS = {
  { kind = "am_softmax", options = { {}, { s = 10, m = 0.2 } } },
  { kind = "arc_face", options = { {}, { s = 16, m = 0.3, easy_margin = true } } },
  { kind = "combined_margin", options = { { s = 32, m1 = 1, m2 = 0.3, m3 = 0.2 }, { s = 8, m1 = 2, m2 = 0.1, m3 = 0.05 } } },
}

local label = H.options_label

local with = H.with

-- f64 CPU embeddings and centres, labels with every `ignore_every`-th row ignored.
local function inputs(n, C, D, seed, ignore_every)
  local x = ploss.randn({ n, D }, { dtype = "f64", seed = seed })
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
local function compare(kind, x64, w64, y, opts, dtype, what, layout)
  local xc, wc = x64:type(dtype), w64:type(dtype)
  local xg, wg, yg = xc:to(DEV), wc:to(DEV), y:to(DEV)
  if layout then xg, wg = layout(xg, wg) end
  local T = TOL[dtype]
  what = what .. " " .. kind .. " " .. dtype .. " " .. label(opts)
  local lc, gxc, gwc = F[kind .. "_fused"](xc, wc, y, opts)
  local lg, gxg, gwg = F[kind .. "_fused"](xg, wg, yg, opts)
  local none = opts.reduction == "none"
  close(none and lg or { lg }, none and lc or { lc }, T.loss, 0, what .. " fused loss")
  assert.are.equal(dtype, gxg:dtype())
  assert.are.equal(dtype, gwg:dtype())
  assert.are.equal(xg:device(), gwg:device())
  close(gxg, gxc, T.grad, T.floor, what .. " fused grad_x")
  close(gwg, gwc, T.grad, T.floor, what .. " fused grad_weight")
  -- forward and backward equal the fused pass on the device (the same kernels)
  local lf = F[kind](xg, wg, yg, opts)
  H.assert_close(none and lf or { lf }, none and lg or { lg }, { rtol = 0, atol = 0, what = what .. " forward" })
  local up = none and ploss.ones({ x64:size(1) }, { dtype = "f32", device = DEV }) or nil
  local bx, bw = F[kind .. "_backward"](xg, wg, yg, up, opts)
  H.assert_close(bx, gxg, { rtol = 0, atol = 0, what = what .. " backward grad_x" })
  H.assert_close(bw, gwg, { rtol = 0, atol = 0, what = what .. " backward grad_weight" })
end

describe("margin softmax losses on " .. DEV .. " against the CPU", function()
  -- C = 40: a warp per row; C = 3000: a block per row (fewer rows than warps need);
  -- one tile and several; ignored rows
  for _, shape in ipairs { { 37, 40, 16, 0 }, { 300, 40, 64, 7 }, { 64, 3000, 32, 5 }, { 50, 1000, 24, 0 } } do
    local n, C, D, tile = shape[1], shape[2], shape[3], shape[4]
    it(string.format("N = %d, C = %d, D = %d, tile_rows = %d: every loss, dtype and reduction", n, C, D, tile), function()
      local x, w, y = inputs(n, C, D, n + C + D, 6)
      for _, k in ipairs(KINDS) do
        for _, o in ipairs(k.options) do
          for _, dtype in ipairs(DTYPES) do
            for _, r in ipairs(REDUCTIONS) do
              compare(k.kind, x, w, y, with(o, { reduction = r, tile_rows = tile }), dtype,
                string.format("%dx%dx%d", n, C, D))
            end
          end
        end
      end
    end)
  end

  it("gives the same result in one tile and in tiles of 1, 5 and 64 rows", function()
    local x, w, y = inputs(130, 300, 32, 11, 9)
    for _, dtype in ipairs(DTYPES) do
      local xg, wg, yg = x:type(dtype):to(DEV), w:type(dtype):to(DEV), y:to(DEV)
      local l, gx, gw = F.arc_face_fused(xg, wg, yg)
      for _, t in ipairs { 1, 5, 64 } do
        local lt, gxt, gwt = F.arc_face_fused(xg, wg, yg, { tile_rows = t })
        local T = TOL[dtype]
        close({ lt }, { l }, T.loss, 0, dtype .. " tile_rows = " .. t .. " loss")
        close(gxt, gx, T.grad, T.floor, dtype .. " tile_rows = " .. t .. " grad_x")
        close(gwt, gw, T.grad, T.floor, dtype .. " tile_rows = " .. t .. " grad_weight")
      end
    end
  end)

  it("serves rows longer than a block (C = 40000: a cluster of blocks per row)", function()
    local x, w, y = inputs(24, 40000, 16, 3, 5)
    for _, dtype in ipairs { "f32", "bf16" } do
      for _, r in ipairs(REDUCTIONS) do
        compare("arc_face", x, w, y, { reduction = r, tile_rows = 8 }, dtype, "24x40000x16")
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
      local opts = { reduction = "none", s = 20, tile_rows = 16 }
      local gc = { F.arc_face_backward(xc, wc, y, up, opts) }
      local gg = { F.arc_face_backward(xg, wg, yg, up:to(DEV), opts) }
      for k = 1, 2 do close(gg[k], gc[k], T.grad, T.floor, dtype .. " per-row upstream " .. k) end
      gc = { F.am_softmax_backward(xc, wc, y, -1.75, { tile_rows = 7 }) }
      gg = { F.am_softmax_backward(xg, wg, yg, -1.75, { tile_rows = 7 }) }
      for k = 1, 2 do close(gg[k], gc[k], T.grad, T.floor, dtype .. " scalar upstream " .. k) end
      local fc = { F.combined_margin_fused(xc, wc, y, { reduction = "sum", scale = 0.25, m1 = 1.5 }) }
      local fg = { F.combined_margin_fused(xg, wg, yg, { reduction = "sum", scale = 0.25, m1 = 1.5 }) }
      close({ fg[1] }, { fc[1] }, T.loss, 0, dtype .. " scaled loss")
      for k = 2, 3 do close(fg[k], fc[k], T.grad, T.floor, dtype .. " scaled " .. k) end
    end
  end)

  it("has finite gradients at |cos| = 1 and takes InsightFace's fallback beyond θ + m = π", function()
    -- rows parallel and opposite to their centres, and rows at angles past π − m
    local w = ploss.tensor({ { 1, 0, 0 }, { 0, 2, 0 }, { 0, 0, 3 } }, { dtype = "f64" })
    local X, Y = { { 2, 0, 0 }, { -4, 0, 0 }, { 0, 0, 7 } }, { 0, 0, 2 }
    for k = 0, 20 do
      local t = math.pi * (0.6 + 0.4 * k / 20)
      X[#X + 1] = { math.cos(t), math.sin(t), 0.01 * k }
      Y[#Y + 1] = 0
    end
    local x, y = ploss.tensor(X, { dtype = "f64" }), ploss.tensor(Y, { dtype = "i64" })
    -- not f16: at |cos| = 1 the margin's derivative (up to s·sin m / 1e-6) is beyond f16's
    -- range in the gradient tile of the GEMMs (a documented limit of f16 inputs on CUDA)
    for _, dtype in ipairs { "f32", "bf16" } do
      for _, o in ipairs { { s = 16 }, { s = 16, easy_margin = true }, { s = 8, m = 1.2 } } do
        for _, r in ipairs(REDUCTIONS) do
          compare("arc_face", x, w, y, with(o, { reduction = r }), dtype, "edge angles")
        end
      end
    end
  end)

  it("agrees at the ends of the exponentials' range (s = 64) and past it (s = 80)", function()
    -- f32/bf16 with s <= 64 take every class's e^(s(c − 1) + TOP) without a row max: rows
    -- opposite every centre (each cosine within 0.002 of −1: the smallest, e^(TOP − 2s)) and
    -- along them (near +1: e^TOP, the largest); the targets' cosines exactly ±1 (powers of
    -- two), as φ′ near |cos| = 1 would magnify the f32 cosine's rounding; s = 80 takes the
    -- row engine's pass
    local C, X, W, Y = 50, {}, {}, {}
    for k = 1, 12 do
      X[k] = { (k <= 6 and -1 or 1) * 2 ^ (k % 3), 0, 0 }
      Y[k] = k * 11 % C
    end
    for j = 1, C do W[j] = { 1 + 0.01 * j, 0.02 * (j * 7 % 5), 0.03 * (j % 3) } end
    for _, j in ipairs(Y) do W[j + 1] = { 2 ^ (j % 4), 0, 0 } end
    local x, w = ploss.tensor(X, { dtype = "f64" }), ploss.tensor(W, { dtype = "f64" })
    local y = ploss.tensor(Y, { dtype = "i64" })
    for _, dtype in ipairs { "f32", "bf16" } do
      for _, k in ipairs { { "arc_face", { s = 64 } }, { "am_softmax", { s = 64 } },
                           { "combined_margin", { s = 64, m1 = 1.2, m2 = 0.2, m3 = 0.1 } } } do
        for _, r in ipairs(REDUCTIONS) do
          compare(k[1], x, w, y, with(k[2], { reduction = r }), dtype, "aligned and opposite")
        end
      end
    end
    local xr, wr, yr = inputs(70, 400, 24, 19, 5)
    for _, dtype in ipairs(DTYPES) do
      compare("arc_face", xr, wr, yr, { s = 80, m = 0.4, reduction = "mean" }, dtype, "70x400x24")
      compare("am_softmax", xr, wr, yr, { s = 100, reduction = "none", tile_rows = 16 }, dtype, "70x400x24")
    end
  end)

  it("Partial FC: the same classes as the CPU for one seed, zero gradient on the others", function()
    local x, w, y = inputs(90, 500, 16, 41, 10)
    for _, dtype in ipairs(DTYPES) do
      for _, o in ipairs { { sample_rate = 0.1, seed = 3 }, { sample_rate = 0.01, seed = 9, tile_rows = 16 },
                           { sample_rate = 0.5, seed = 1, m = 0.3, easy_margin = true } } do
        for _, r in ipairs(REDUCTIONS) do
          compare("arc_face", x, w, y, with(o, { reduction = r }), dtype, "partial fc")
        end
        -- the same rows of grad_weight are exactly zero on both devices
        local _, _, gc = F.arc_face_fused(x:type(dtype), w:type(dtype), y, o)
        local _, _, gg = F.arc_face_fused(x:type(dtype):to(DEV), w:type(dtype):to(DEV), y:to(DEV), o)
        local rc, rg = gc:double():totable(), gg:to("cpu"):double():totable()
        -- (f16: a kept class's small gradient may round to 0 on one device, so not there)
        for j = 1, dtype == "f16" and 0 or #rc do
          local zc, zg = true, true
          for d = 1, #rc[j] do
            zc = zc and rc[j][d] == 0
            zg = zg and rg[j][d] == 0
          end
          assert.are.equal(zc, zg, dtype .. " class " .. (j - 1) .. " kept on one device only")
        end
      end
    end
    local crit = ploss.PartialFCLoss { margin = ploss.AMSoftmaxLoss {}, sample_rate = 0.05, seed = 17 }
    local xf, wf = x:type("f32"), w:type("f32")
    local l1 = crit(xf:to(DEV), wf:to(DEV), y:to(DEV))
    crit.seed = 17
    local l2 = crit(xf, wf, y)
    close({ l1 }, { l2 }, TOL.f32.loss, 0, "PartialFCLoss on the CPU and " .. DEV)
  end)

  it("Partial FC with an ignore_index that is a class id: the CPU's results, and those of the rows marked -100",
    function()
    -- positions among the kept classes start at 0: a row whose class sits at position
    -- ignore_index must stay a row of the loss
    local x, w = ploss.randn({ 40, 16 }, { dtype = "f64", seed = 61 }), ploss.randn({ 300, 16 }, { dtype = "f64", seed = 62 })
    -- ignore_index 1 (a class id) and -1 (the position an ignored row takes); sample_rate
    -- 0.05 keeps the batch's classes alone, 0.3 draws others too
    for _, c in ipairs { { 1, 0.05 }, { 1, 0.3 }, { -1, 0.3 } } do
      local ign, rate = c[1], c[2]
      local Y, R = {}, {}
      for i = 1, 40 do
        Y[i] = (i * 37) % 300
        if i % 7 == 0 then Y[i] = ign end
        R[i] = Y[i] == ign and -100 or Y[i]
      end
      local y, r = ploss.tensor(Y, { dtype = "i64" }), ploss.tensor(R, { dtype = "i64" })
      for _, dtype in ipairs(DTYPES) do
        for seed = 1, 3 do
          local o = { sample_rate = rate, seed = seed, ignore_index = ign }
          for _, red in ipairs(REDUCTIONS) do
            compare("arc_face", x, w, y, with(o, { reduction = red }), dtype,
              ("partial fc, ignore_index %d, sample_rate %g"):format(ign, rate))
          end
          local xg, wg = x:type(dtype):to(DEV), w:type(dtype):to(DEV)
          local l, gx, gw = F.arc_face_fused(xg, wg, y:to(DEV), o)
          local lr, gxr, gwr = F.arc_face_fused(xg, wg, r:to(DEV), with(o, { ignore_index = -100 }))
          local what = ("%s seed %d sample_rate %g: ignore_index %d against -100"):format(dtype, seed, rate, ign)
          H.assert_equal({ l }, { lr }, { what = what })
          H.assert_equal(gx, gxr, { what = what })
          H.assert_equal(gw, gwr, { what = what })
        end
      end
    end
  end)

  it("reads strided and transposed views", function()
    local x, w, y = inputs(40, 70, 12, 21, 8)
    local function transposed(xg, wg) return xg:t():contiguous():t(), wg:t():contiguous():t() end
    local function every_other(xg, wg)
      local xw = ploss.zeros({ xg:size(1), 2 * xg:size(2) }, { dtype = xg:dtype(), device = DEV })
      xw:narrow(2, 1, xg:size(2)):copy(xg)
      return xw:narrow(2, 1, xg:size(2)), wg
    end
    for _, dtype in ipairs(DTYPES) do
      for _, layout in ipairs { transposed, every_other } do
        compare("am_softmax", x, w, y, { reduction = "mean", tile_rows = 9 }, dtype, "strided", layout)
      end
    end
  end)

  it("takes D×C centres (weight_layout 'DxC'): the C×D results, the gradient transposed", function()
    local x, w, y = inputs(30, 50, 12, 61, 7)
    for _, dtype in ipairs(DTYPES) do
      local xg, wg, yg = x:type(dtype):to(DEV), w:type(dtype):to(DEV), y:to(DEV)
      local l, gx, gw = F.arc_face_fused(xg, wg, yg, { s = 16 })
      local l2, gx2, gw2 = F.arc_face_fused(xg, wg:t():contiguous(), yg, { s = 16, weight_layout = "DxC" })
      assert.are.equal(l, l2)
      H.assert_equal(gx2, gx, { what = dtype .. " grad_x" })
      assert.are.same({ 12, 50 }, gw2:size())
      H.assert_equal(gw2:t(), gw, { what = dtype .. " grad_weight" })
    end
  end)

  it("gives a NaN mean, zero gradients and a zero sum for an empty batch or every row ignored", function()
    for _, k in ipairs(KINDS) do H.check_empty_and_ignored_rows(k.kind, DTYPES, DEV) end
  end)

  it("is bitwise deterministic", function()
    local x, w, y = inputs(200, 500, 48, 31, 11)
    local xg, wg, yg = x:type("bf16"):to(DEV), w:type("bf16"):to(DEV), y:to(DEV)
    local l1, a1, b1 = F.combined_margin_fused(xg, wg, yg, { tile_rows = 33 })
    for _ = 1, 3 do
      local l2, a2, b2 = F.combined_margin_fused(xg, wg, yg, { tile_rows = 33 })
      assert.are.equal(l1, l2)
      H.assert_equal(a2, a1)
      H.assert_equal(b2, b1)
    end
  end)

  it("refuses bad input with an error naming the argument, writing nothing", function()
    local x = ploss.randn({ 4, 3 }, { seed = 1 }):to(DEV)
    local w = ploss.randn({ 5, 3 }, { seed = 2 }):to(DEV)
    local y = ploss.tensor({ 0, 1, 4, 2 }, { dtype = "i64" }):to(DEV)
    local out = ploss.empty({}, { device = DEV })
    local g1, g2 = ploss.empty({ 4, 3 }, { device = DEV }), ploss.empty({ 5, 3 }, { device = DEV })
    local fo = { out = out, grad_x = g1, grad_weight = g2 }
    H.expect_error(function() F.arc_face_fused(x, ploss.randn({ 5, 4 }):to(DEV), y, fo) end,
      "weight: expected C×3 class centres", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w, y, with(fo, { s = -1 })) end, "opts.s", out, g1, g2)
    if DEV ~= "cpu" then -- a tensor on another device; f64
      H.expect_error(function() F.arc_face_fused(x, w:to("cpu"), y, fo) end, "weight", out, g1, g2)
      H.expect_error(function() F.arc_face_fused(x, w, y:to("cpu"), fo) end, "labels", out, g1, g2)
      H.expect_error(function() F.arc_face(x:double(), w:double(), y) end, "f64 on the CPU only")
    end
  end)
end)
