-- Region kernel shape on CUDA (suite 'cuda'; spec/run.lua exits 77 before this file without a
-- GPU; PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run of its logic):
-- Lovász-softmax.
--  * CUDA against the CPU backend on the same dtype-rounded inputs (tolerances H.CUDA_TOL)
--    for f32/f16/bf16/f64, every reduction, per_image and classes setting, ignored pixels,
--    ranks 2 to 5, through the fused, forward and backward passes.  The gradient depends on
--    the sort order, so those inputs are drawn until every class's errors are exactly equal
--    or at least 1e-5 apart (the order cannot differ between f32 and f64 errors);
--  * larger maps (many chunks per segment, 19 classes): the loss against the CPU, fused
--    against forward + backward bitwise, and bitwise the same on every run;
--  * exact ties (constant logits) break by pixel index as on the CPU;
--  * strided inputs (crop, channels-last, transposed) give the contiguous copy's bits;
--  * the edge cases: every pixel ignored, one valid pixel, a class absent, C = 1, empty;
--  * a group of more than 2^24 pixels: the foreground counts stay exact (the gradient at
--    ranks around and past 2^24 equals the closed form);
--  * invalid labels through the context's error slot; bad input with the CPU's messages.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()
local ON_GPU = DEV ~= "cpu"

local DTYPES = { "f32", "f16", "bf16", "f64" }
local TOL = H.CUDA_TOL
local close = H.assert_close_scaled

local function merge(a, b)
  local o = {}
  for k, v in pairs(a or {}) do o[k] = v end
  for k, v in pairs(b or {}) do o[k] = v end
  return o
end

local function ldtype(dtype) return dtype == "f64" and "f64" or "f32" end

local function none_sizes(x, opts)
  return opts.per_image and { x:size(1), x:size(2) } or { x:size(2) }
end

local function softmax(row)
  local m = -math.huge
  for _, v in ipairs(row) do m = math.max(m, v) end
  local s, p = 0, {}
  for j, v in ipairs(row) do p[j] = math.exp(v - m); s = s + p[j] end
  for j = 1, #p do p[j] = p[j] / s end
  return p
end

-- True when, in every group (image or batch) and class, the errors of the valid pixels
-- are pairwise either equal or at least `gap` apart: their order is then the same whether
-- computed in f32 (CUDA) or f64 (CPU).
local function separated(x, y, per_image, gap)
  local rows = H.sample_rows(x)
  local labels = y:to("cpu", "i64"):contiguous():flat()
  local N, C = x:size(1), x:size(2)
  local S = N > 0 and #rows / N or 0
  local G, M = per_image and N or 1, per_image and S or N * S
  for g = 1, G do
    local probs = {}
    for j = 1, M do
      local q = (g - 1) * M + j
      if labels[q] ~= -100 then probs[#probs + 1] = { p = softmax(rows[q]), y = labels[q] } end
    end
    for c = 1, C do
      local e = {}
      for i, v in ipairs(probs) do e[i] = v.y == c - 1 and 1 - v.p[c] or v.p[c] end
      table.sort(e)
      for i = 2, #e do
        local d = e[i] - e[i - 1]
        if d ~= 0 and d < gap then return false end
      end
    end
  end
  return true
end

-- f64 CPU logits of `sizes` and labels (10% ignored) whose errors are separated once the
-- logits are rounded to `dtype`; seeds from `seed` on.
local function separated_inputs(sizes, dtype, seed)
  for s = seed, seed + 200 do
    local x = ploss.randn(sizes, { dtype = "f64", seed = s, std = 2 }):to(dtype):to("f64")
    H.seed(s)
    local y = H.random_labels(H.sample_sizes(sizes), sizes[2], { ignore = 0.1 })
    if separated(x, y, false, 1e-5) and separated(x, y, true, 1e-5) then return x, y end
  end
  error("no input with separated errors for " .. table.concat(sizes, "x") .. " " .. dtype)
end

-- Loss `name` on the device (xg, yg) against the CPU (xc, yc) with options o and
-- tolerances T: fused loss and gradient, forward, and backward with upstream 0.7 (with
-- 'none': an f32/f64 N(0, 1) draw of none_shape, seed `seed`); on the device the fused
-- gradient equals backward's bitwise (upstream 1), and so does the loss forward's when
-- `exact_forward`, and a second fused call repeats both bitwise.  Returns the device's
-- fused loss and gradient.
local function device_matches_cpu(name, xc, yc, xg, yg, o, T, what, none_shape, seed, exact_forward)
  local fused, plain, backward = F[name .. "_fused"], F[name], F[name .. "_backward"]
  local lc, gc = fused(xc, yc, o)
  local lg, gg = fused(xg, yg, o)
  assert.are.equal(DEV, gg:device():match("^%a+"))
  assert.are.equal(xg:dtype(), gg:dtype())
  close(lg, lc, T.loss, 0, what .. " fused loss")
  close(gg, gc, T.grad, T.floor, what .. " fused grad")
  local gout_c, gout_g = 0.7, 0.7
  if o.reduction == "none" then
    gout_c = ploss.randn(none_shape, { dtype = ldtype(xc:dtype()), seed = seed })
    gout_g = gout_c:to(DEV)
  end
  close(plain(xg, yg, o), lc, T.loss, 0, what .. " forward")
  close(backward(xg, yg, gout_g, o), backward(xc, yc, gout_c, o), T.grad, T.floor, what .. " backward")
  if exact_forward then H.assert_equal(lg, plain(xg, yg, o), { what = what .. " fused = forward" }) end
  H.assert_equal(gg, backward(xg, yg, nil, o), { what = what .. " fused = backward" })
  local lg2, gg2 = fused(xg, yg, o)
  H.assert_equal(lg2, lg, { what = what .. " repeat loss" })
  H.assert_equal(gg2, gg, { what = what .. " repeat grad" })
  return lg, gg
end

-- Fused, forward and backward on both devices with the same dtype-rounded inputs.
local function compare(x64, y, opts, dtype, label)
  local xc = x64:to("cpu", dtype)
  local what = label .. " " .. dtype .. " " .. (opts.reduction or "mean") ..
    (opts.per_image and " per_image" or "") .. " " .. (opts.classes or "present")
  device_matches_cpu("lovasz_softmax", xc, y, xc:to(DEV), y:to(DEV), opts, TOL[dtype], what, none_sizes(xc, opts), 5,
    true)
end

describe("CUDA Lovász-softmax against the CPU", function()
  local shapes = { { 2, 5, 6, 6 }, { 3, 4, 10 }, { 40, 6 }, { 2, 3, 3, 2, 4 } }
  for si, sizes in ipairs(shapes) do
    it(table.concat(sizes, "x") .. ", every dtype, reduction, per_image and classes", function()
      for di, dtype in ipairs(DTYPES) do
        local x, y = separated_inputs(sizes, dtype, 1000 * si + 10 * di)
        for _, per_image in ipairs { false, true } do
          for _, classes in ipairs { "present", "all" } do
            for _, red in ipairs { "mean", "sum", "none" } do
              compare(x, y, { reduction = red, per_image = per_image, classes = classes }, dtype,
                table.concat(sizes, "x"))
            end
          end
        end
      end
    end)
  end

  it("classes = 'listed' (present and absent classes); an index outside [0, C) through the error slot", function()
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      local x, y = separated_inputs({ 2, 5, 6, 6 }, dtype, 900)
      local xc = x:to(dtype)
      for _, o in ipairs { { classes = "listed", class_ids = { 0, 4 } },
                           { classes = "listed", class_ids = { 3 }, per_image = true, reduction = "none" } } do
        local lc, gc = F.lovasz_softmax_fused(xc, y, o)
        local lg, gg = F.lovasz_softmax_fused(xc:to(DEV), y:to(DEV), o)
        close(lg, lc, TOL[dtype].loss, 0, dtype .. " listed loss")
        close(gg, gc, TOL[dtype].grad, TOL[dtype].floor, dtype .. " listed grad")
      end
    end
    local x = ploss.randn({ 2, 3, 4, 4 }, { device = DEV, seed = 901 })
    local y = ploss.randint(0, 3, { 2, 4, 4 }, { device = DEV, seed = 902 })
    H.expect_error(function() local _ = F.lovasz_softmax(x, y, { classes = "listed", class_ids = { 0, 3 } }) end,
      ON_GPU and "PLOSS_ERR_INVALID_LABEL" or "PLOSS_ERR_INVALID_ARGUMENT")
    if ON_GPU then ploss.synchronize(DEV) end
  end)

  it("larger maps (19 classes, many chunks per segment): loss, fused = split, bitwise repeatable", function()
    for _, sizes in ipairs { { 2, 19, 96, 64 }, { 1, 3, 300, 300 } } do
      for _, dtype in ipairs { "f32", "bf16" } do
        local xc = ploss.randn(sizes, { dtype = "f64", seed = 77 }):to(dtype)
        local y = H.random_labels(H.sample_sizes(sizes), sizes[2], { ignore = 0.05 })
        local xg, yg = xc:to(DEV), y:to(DEV)
        for _, o in ipairs { {}, { per_image = true, classes = "all" }, { reduction = "none" } } do
          local what = table.concat(sizes, "x") .. " " .. dtype
          local lc = F.lovasz_softmax(xc, y, o)
          local lg, gg = F.lovasz_softmax_fused(xg, yg, o)
          close(lg, lc, 1e-4, 0, what .. " loss")
          H.assert_equal(lg, F.lovasz_softmax(xg, yg, o), { what = what .. " fused = forward" })
          H.assert_equal(gg, F.lovasz_softmax_backward(xg, yg, nil, o), { what = what .. " fused = backward" })
          for _ = 1, 3 do
            local l2, g2 = F.lovasz_softmax_fused(xg, yg, o)
            H.assert_equal(l2, lg, { what = what .. " repeat loss" })
            H.assert_equal(g2, gg, { what = what .. " repeat grad" })
          end
        end
      end
    end
  end)

  it("exact ties (constant and repeated logits) break by pixel index, as on the CPU", function()
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      -- constant logits: every error ties; two distinct pixel columns repeated: ties in pairs
      local x1 = ploss.zeros({ 2, 3, 4, 5 }, { dtype = dtype })
      local base = ploss.randn({ 1, 3, 1, 2 }, { dtype = dtype, seed = 3 })
      local x2 = ploss.empty({ 2, 3, 4, 6 }, { dtype = dtype })
      for n = 1, 2 do
        for h = 1, 4 do
          for w = 1, 3 do x2:narrow(1, n, 1):narrow(3, h, 1):narrow(4, 2 * w - 1, 2):copy(base) end
        end
      end
      for _, x in ipairs { x1, x2 } do
        local y = H.random_labels(H.sample_sizes(x:size()), 3, { ignore = 0.1 })
        for _, o in ipairs { {}, { per_image = true }, { classes = "all", reduction = "sum" } } do
          local lc, gc = F.lovasz_softmax_fused(x, y, o)
          local lg, gg = F.lovasz_softmax_fused(x:to(DEV), y:to(DEV), o)
          close(lg, lc, TOL[dtype].loss, 0, dtype .. " ties loss")
          close(gg, gc, TOL[dtype].grad, TOL[dtype].floor, dtype .. " ties gradient")
        end
      end
    end
  end)

  it("strided inputs (a crop, channels-last, transposed) give the bits of the contiguous copy", function()
    local x = ploss.randn({ 2, 5, 12, 10 }, { device = DEV, seed = 91 })
    local y = H.random_labels({ 2, 12, 10 }, 5, { ignore = 0.1, device = DEV })
    local views = {
      { "crop", x:narrow(3, 3, 7):narrow(4, 2, 6), y:narrow(2, 3, 7):narrow(3, 2, 6) },
      { "channels-last", H.relayout(x, "channels_last"), y },
      { "transposed", x:transpose(3, 4), y:transpose(2, 3) },
    }
    for _, v in ipairs(views) do
      for _, o in ipairs { {}, { per_image = true, reduction = "none" } } do
        local l, g = F.lovasz_softmax_fused(v[2], v[3], o)
        local lc, gc = F.lovasz_softmax_fused(v[2]:contiguous(), v[3]:contiguous(), o)
        H.assert_equal(l, lc, { what = v[1] .. " loss" })
        H.assert_equal(g, gc, { what = v[1] .. " gradient" })
      end
    end
  end)
end)

describe("CUDA Lovász-softmax edge cases", function()
  it("every pixel ignored: 0 and a zero gradient", function()
    local x = ploss.randn({ 2, 4, 3, 3 }, { device = DEV, seed = 1 })
    local y = ploss.full({ 2, 3, 3 }, -100, { dtype = "i64", device = DEV })
    for _, o in ipairs { {}, { classes = "all" }, { per_image = true, reduction = "none" }, { reduction = "sum" } } do
      local l, g = F.lovasz_softmax_fused(x, y, o)
      for _, v in ipairs(ploss.is_tensor(l) and l:flat() or { l }) do assert.are.equal(0, v) end
      for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
    end
  end)

  it("one valid pixel, an absent class, C = 1 and an empty batch: the CPU's values", function()
    local yv = {}
    for i = 1, 12 do yv[i] = -100 end
    yv[7] = 1
    local cases = {
      { ploss.randn({ 1, 4, 3, 4 }, { dtype = "f64", seed = 2 }), ploss.tensor(yv, { dtype = "i64", size = { 1, 3, 4 } }) },
      { ploss.randn({ 2, 5, 3, 3 }, { dtype = "f64", seed = 3 }), ploss.randint(0, 3, { 2, 3, 3 }, { seed = 4 }) },
      { ploss.randn({ 2, 1, 4 }, { dtype = "f64", seed = 5 }), ploss.zeros({ 2, 4 }, { dtype = "i64" }) },
      { ploss.randn({ 0, 3, 4 }, { dtype = "f64" }), ploss.zeros({ 0, 4 }, { dtype = "i64" }) },
    }
    for ci, c in ipairs(cases) do
      for _, o in ipairs { {}, { classes = "all" }, { per_image = true, reduction = "none" }, { reduction = "none" } } do
        local lc, gc = F.lovasz_softmax_fused(c[1], c[2], o)
        local lg, gg = F.lovasz_softmax_fused(c[1]:to(DEV), c[2]:to(DEV), o)
        H.assert_close(lg, lc, { rtol = 1e-12, atol = 1e-15, what = "case " .. ci .. " loss" })
        H.assert_close(gg, gc, { rtol = 1e-10, atol = 1e-15, what = "case " .. ci .. " gradient" })
      end
    end
  end)

  it("a group of more than 2^24 pixels: exact foreground counts (the gradient's closed form)", function()
    if not ON_GPU then return end -- about 2 GB of CPU buffers for the dry run
    local M = 2 ^ 24 + 2 ^ 20 + 3
    local x = ploss.zeros({ 1, 2, 1, M }, { device = DEV })
    -- label 1 at every third pixel (0-based index divisible by 3), else 0
    local yh = ploss.zeros({ 1, 1, M }, { dtype = "i32" })
    local ffi = require "ffi"
    local p = ffi.cast("int32_t *", yh:dl().data)
    for j = 0, M - 1, 3 do p[j] = 1 end
    local y = yh:to(DEV)
    local l, g = F.lovasz_softmax_fused(x, y)
    -- every error is 1/2, so L_c = Δ(M)/2 = 1/2 whatever the counts
    H.assert_close(l, 0.5, { rtol = 1e-5 })
    -- ranks follow the pixel order; the weight of rank k with F of the first k in the class
    local P1 = math.floor((M - 1) / 3) + 1
    local P0 = M - P1
    local function weight(k, Fk, P, fg)
      local a = P + k - Fk
      if k == 1 or fg then return 1 / a end
      return (P - Fk) / (a * (a - 1))
    end
    for _, j in ipairs { 0, 1, 2, 2 ^ 24 - 2, 2 ^ 24 - 1, 2 ^ 24, 2 ^ 24 + 1, M - 3, M - 2, M - 1 } do
      local k = j + 1
      local fg1 = j % 3 == 0
      local F1 = math.floor(j / 3) + 1
      local G1 = (fg1 and -1 or 1) * weight(k, F1, P1, fg1)
      local G0 = (fg1 and 1 or -1) * weight(k, k - F1, P0, not fg1)
      -- ω = 1/2 (the mean of two classes), p = 1/2: ∂ℓ/∂x_1 = ω·(G1 − G0)/4 = −∂ℓ/∂x_0
      local want1 = 0.5 * (G1 - G0) / 4
      local got = g:narrow(4, j + 1, 1):flat()
      H.assert_close(got, { -want1, want1 }, { rtol = 1e-5, what = "gradient at pixel " .. j })
    end
  end)
end)

describe("CUDA Lovász-softmax bad input", function()
  it("an invalid label is reported at the next synchronising call; the context works after", function()
    local x = ploss.randn({ 2, 3, 4, 4 }, { device = DEV, seed = 8 })
    for _, bad in ipairs { 3, -1, 1000 } do
      for _, tdt in ipairs { "i64", "i32" } do
        local yh = ploss.zeros({ 2, 4, 4 }, { dtype = "i64" })
        yh:view(-1)[5] = bad
        local y = yh:to(DEV, tdt)
        for _, call in ipairs {
          function() return F.lovasz_softmax(x, y, { reduction = "none" }) end,
          function() return F.lovasz_softmax_fused(x, y, { reduction = "none" }) end,
          function() return F.lovasz_softmax_backward(x, y) end,
        } do
          if ON_GPU then
            call() -- queued: the error comes with the next synchronisation
            H.expect_error(function() ploss.synchronize(DEV) end, "PLOSS_ERR_INVALID_LABEL")
          else
            H.expect_error(function() call() end, "PLOSS_ERR_INVALID_LABEL")
          end
        end
        -- a reduced loss is read at once: the error comes from that call
        H.expect_error(function() local _ = F.lovasz_softmax(x, y) end, "PLOSS_ERR_INVALID_LABEL")
        assert.is_number(F.lovasz_softmax(x, ploss.zeros({ 2, 4, 4 }, { dtype = tdt, device = DEV })))
      end
    end
  end)

  it("bad shapes, dtypes and devices: the CPU's messages, outputs untouched", function()
    local x = ploss.randn({ 2, 3, 2, 2 }, { device = DEV, seed = 9 })
    local y = ploss.randint(0, 3, { 2, 2, 2 }, { device = DEV, seed = 10 })
    local loss = ploss.empty({}, { device = DEV })
    local grad = ploss.empty({ 2, 3, 2, 2 }, { device = DEV })
    H.expect_error(function() F.lovasz_softmax(x, y:to("f32"), { out = loss }) end,
      { "PLOSS_ERR_DTYPE", "target: expected class indices" }, loss)
    H.expect_error(function() F.lovasz_softmax(x, ploss.zeros({ 2, 2, 3 }, { dtype = "i64", device = DEV }), { out = loss }) end,
      { "PLOSS_ERR_SHAPE", "target: expected shape [2, 2, 2]" }, loss)
    H.expect_error(function() F.lovasz_softmax(x, y, { reduction = "none", out = ploss.empty({ 2 }, { device = DEV }) }) end,
      { "PLOSS_ERR_SHAPE", "opts.out: expected shape [3]" })
    H.expect_error(function() F.lovasz_softmax_backward(x, y, nil, { grad_input = ploss.empty({ 2, 3, 4 }, { device = DEV }) }) end,
      { "PLOSS_ERR_SHAPE", "grad_input" })
    H.expect_error(function() F.lovasz_softmax_fused(x, y, { grad_input = x }) end, { "PLOSS_ERR_ALIAS", "grad_input" })
    if ON_GPU then
      H.expect_error(function() F.lovasz_softmax_fused(x, y:to("cpu"), { out = loss, grad_input = grad }) end,
        { "PLOSS_ERR_DEVICE", "target" }, loss, grad)
    end
  end)
end)

---------------------------------------------------------------------------------------
-- The per-class soft Dice losses
---------------------------------------------------------------------------------------

local DICE = {
  { name = "generalized_soft_dice", batch = false },
  { name = "batch_soft_dice", batch = true },
}

describe("CUDA soft Dice losses against the CPU", function()
  for _, d in ipairs(DICE) do
    it(d.name .. ": every dtype, reduction and option, ranks 2 to 5", function()
      for si, sizes in ipairs { { 2, 5, 6, 6 }, { 3, 4, 10 }, { 40, 6 }, { 2, 3, 3, 2, 4 }, { 2, 3, 130, 70 }, { 2, 37, 12 } } do
        local x64 = ploss.randn(sizes, { dtype = "f64", seed = 500 + si, std = 2 })
        H.seed(600 + si)
        local y = H.random_labels(H.sample_sizes(sizes), sizes[2], { ignore = 0.2, ignore_index = 255 })
        local wl = {}
        for c = 1, sizes[2] do wl[c] = 0.25 + c / 4 end
        for _, dtype in ipairs(DTYPES) do
          local xc = x64:to(dtype)
          local xg, yg = xc:to(DEV), y:to(DEV)
          local T = TOL[dtype]
          for _, o in ipairs {
            { reduction = "mean" }, { reduction = "sum", p = 2 }, { reduction = "none", p = 0.5, smooth = 0.3 },
            { mask_ignored_in_denominator = false }, { class_weights = "sudre", reduction = "none" },
            { weight = wl, reduction = "sum" },
          } do
            local what = string.format("%s %s %s %s", d.name, table.concat(sizes, "x"), dtype,
              (o.reduction or "mean") .. (o.p and (" p " .. o.p) or "") .. (o.class_weights or "") ..
              (o.weight and " weight" or "") .. (o.mask_ignored_in_denominator == false and " unmasked" or ""))
            device_matches_cpu(d.name, xc, y, xg, yg, o, T, what, d.batch and { 1 } or { sizes[1] }, 7, true)
          end
        end
      end
    end)

    it(d.name .. ": strided inputs give the contiguous copy's bits; edge cases", function()
      local x = ploss.randn({ 2, 5, 12, 10 }, { device = DEV, seed = 92 })
      local y = H.random_labels({ 2, 12, 10 }, 5, { ignore = 0.1, ignore_index = 255, device = DEV })
      for _, v in ipairs {
        { "crop", x:narrow(3, 3, 7):narrow(4, 2, 6), y:narrow(2, 3, 7):narrow(3, 2, 6) },
        { "channels-last", H.relayout(x, "channels_last"), y },
        { "transposed", x:transpose(3, 4), y:transpose(2, 3) },
      } do
        local l, g = F[d.name .. "_fused"](v[2], v[3], { reduction = "none" })
        local lc, gc = F[d.name .. "_fused"](v[2]:contiguous(), v[3]:contiguous(), { reduction = "none" })
        H.assert_equal(l, lc, { what = v[1] .. " loss" })
        H.assert_equal(g, gc, { what = v[1] .. " gradient" })
      end
      -- every pixel ignored: 0 and a zero gradient
      local yi = ploss.full({ 2, 12, 10 }, 255, { dtype = "i64", device = DEV })
      local l, g = F[d.name .. "_fused"](x, yi)
      assert.are.equal(0, l)
      for _, e in ipairs(g:flat()) do assert.are.equal(0, e) end
      -- with smooth = 0 and Sudre's weights (all 0 there), ignored pixels in the
      -- denominator: the loss 0/0 = NaN, the gradient still 0
      local ln, gn = F[d.name .. "_fused"](x, yi, { smooth = 0, class_weights = "sudre",
                                                     mask_ignored_in_denominator = false })
      assert.is_true(ln ~= ln)
      for _, e in ipairs(gn:flat()) do assert.are.equal(0, e) end
      -- an empty batch: the CPU's values (NaN for the mean over no sample)
      local x0, y0 = ploss.randn({ 0, 3, 4 }, { device = DEV }), ploss.zeros({ 0, 4 }, { dtype = "i64", device = DEV })
      H.assert_close(F[d.name](x0, y0), F[d.name](x0:to("cpu"), y0:to("cpu")))
    end)

    it(d.name .. ": invalid labels through the error slot; the sudre/weight conflict", function()
      local x = ploss.randn({ 2, 3, 4, 4 }, { device = DEV, seed = 93 })
      local yh = ploss.zeros({ 2, 4, 4 }, { dtype = "i64" })
      yh:view(-1)[9] = 3
      local y = yh:to(DEV)
      if ON_GPU then
        F[d.name .. "_fused"](x, y, { reduction = "none" })
        H.expect_error(function() ploss.synchronize(DEV) end, "PLOSS_ERR_INVALID_LABEL")
      end
      H.expect_error(function() local _ = F[d.name](x, y) end, "PLOSS_ERR_INVALID_LABEL")
      assert.is_number(F[d.name](x, ploss.zeros({ 2, 4, 4 }, { dtype = "i64", device = DEV })))
      H.expect_error(function() F[d.name](x, y, { class_weights = "sudre", weight = { 1, 2, 3 } }) end,
        "PLOSS_ERR_INVALID_ARGUMENT")
    end)
  end
end)

describe("CUDA binary soft Dice against the CPU", function()
  it("every dtype, reduction, p and per_sample; groups larger than a chunk", function()
    for si, sizes in ipairs { { 4, 3, 5 }, { 7 }, {}, { 3, 100, 100 }, { 2, 3, 4, 5 } } do
      local x64 = ploss.randn(sizes, { dtype = "f64", seed = 700 + si, std = 2 })
      local y64 = ploss.rand(sizes, { dtype = "f64", seed = 800 + si })
      for _, dtype in ipairs(DTYPES) do
        local xc, yc = x64:to(dtype), y64:to(dtype)
        local xg, yg = xc:to(DEV), yc:to(DEV)
        local T = TOL[dtype]
        for _, o in ipairs { {}, { per_sample = true, reduction = "none" }, { p = 2, reduction = "sum", smooth = 0.5 },
                             { p = 0.5, per_sample = true } } do
          local what = string.format("[%s] %s %s p %g%s", table.concat(sizes, "x"), dtype, o.reduction or "mean",
            o.p or 1, o.per_sample and " per_sample" or "")
          device_matches_cpu("soft_dice", xc, yc, xg, yg, o, T, what, { o.per_sample and (sizes[1] or 1) or 1 }, 9)
        end
      end
    end
  end)

  it("more tiles than resident blocks, more groups than threads, and the two-kernel path: the CPU's values, bitwise repeatable; the context's ticket back to 0", function()
    -- 4×600×600 binary (704 tiles of 2048 pixels) and 4×3×512×600 per class (600 tiles):
    -- more than the blocks an H200 holds at once (4 per SM), so blocks walk several tiles in
    -- both phases; 2×150×100×100 per class (300 sample-class sums) and 300×64×64 binary per
    -- sample (300 groups, more than a block's threads); a forward (two grid barriers) and a
    -- fused pass (three) are followed by a one-launch reduction of the cross-entropy, which
    -- counts its blocks on the same ticket; 2×5×1000×900 (9 M values) takes the two kernels
    -- instead of the one launch; 2×2×600×1000 per class (586 tiles: two per block on 132 SMs,
    -- 2 tiles × 2 classes) keeps its logits in shared memory from the sums to the gradient
    local xb = ploss.randn({ 4, 600, 600 }, { dtype = "f32", seed = 97, std = 2 })
    local yb = ploss.rand({ 4, 600, 600 }, { dtype = "f32", seed = 98 })
    local xm = ploss.randn({ 4, 3, 512, 600 }, { dtype = "f32", seed = 99, std = 2 })
    H.seed(100)
    local ym = H.random_labels({ 4, 512, 600 }, 3, { ignore = 0.1, ignore_index = 255 })
    local xl = ploss.randn({ 2, 5, 1000, 900 }, { dtype = "f32", seed = 103, std = 2 })
    H.seed(104)
    local yl = H.random_labels({ 2, 1000, 900 }, 5, { ignore = 0.1, ignore_index = 255 })
    local xw = ploss.randn({ 2, 150, 100, 100 }, { dtype = "f32", seed = 105, std = 2 })
    H.seed(106)
    local yw = H.random_labels({ 2, 100, 100 }, 150, { ignore = 0.1, ignore_index = 255 })
    local xk = ploss.randn({ 2, 2, 600, 1000 }, { dtype = "f32", seed = 109, std = 2 })
    H.seed(110)
    local yk = H.random_labels({ 2, 600, 1000 }, 2, { ignore = 0.1, ignore_index = 255 })
    local xs = ploss.randn({ 300, 64, 64 }, { dtype = "f32", seed = 107, std = 2 })
    local ys = ploss.rand({ 300, 64, 64 }, { dtype = "f32", seed = 108 })
    local xe = ploss.randn({ 64, 1000 }, { dtype = "f32", seed = 101 })
    H.seed(102)
    local ye = H.random_labels({ 64 }, 1000, {})
    local le = F.cross_entropy(xe, ye)
    local xeg, yeg = xe:to(DEV), ye:to(DEV)
    for _, case in ipairs { { "soft_dice", xb, yb, {} }, { "generalized_soft_dice", xm, ym, {} },
                            { "soft_dice", xb, yb, { per_sample = true, reduction = "none" } },
                            { "generalized_soft_dice", xw, yw, {} },
                            { "soft_dice", xs, ys, { per_sample = true, reduction = "none" } },
                            { "generalized_soft_dice", xl, yl, {} }, { "generalized_soft_dice", xk, yk, {} },
                            { "batch_soft_dice", xk, yk, { reduction = "none" } } } do
      local name, x, y, o = case[1], case[2], case[3], case[4]
      local what = name .. " " .. table.concat(x:size(), "x") .. (o.per_sample and " per_sample" or "")
      local lc, gc = F[name .. "_fused"](x, y, o)
      local xg, yg = x:to(DEV), y:to(DEV)
      close(F[name](xg, yg, o), lc, TOL.f32.loss, 0, what .. " forward")
      close(F.cross_entropy(xeg, yeg), le, TOL.f32.loss, 0, what .. ": the cross-entropy after a forward")
      local lg, gg = F[name .. "_fused"](xg, yg, o)
      close(lg, lc, TOL.f32.loss, 0, what .. " fused loss")
      close(gg, gc, TOL.f32.grad, TOL.f32.floor, what .. " fused grad")
      close(F.cross_entropy(xeg, yeg), le, TOL.f32.loss, 0, what .. ": the cross-entropy after a fused pass")
      local lg2, gg2 = F[name .. "_fused"](xg, yg, o)
      H.assert_equal(lg2, lg, { what = what .. " repeat loss" })
      H.assert_equal(gg2, gg, { what = what .. " repeat grad" })
    end
  end)

  it("a target of another dtype and strided views give the CPU's values", function()
    local x = ploss.randn({ 3, 6, 7 }, { dtype = "f32", seed = 95 })
    local y = ploss.rand({ 3, 6, 7 }, { dtype = "f64", seed = 96 })
    for _, v in ipairs { { x, y:to("bf16") }, { x:transpose(2, 3), y:transpose(2, 3) }, { x:narrow(3, 2, 4), y:narrow(3, 2, 4) } } do
      local lc, gc = F.soft_dice_fused(v[1], v[2], { per_sample = true, reduction = "none" })
      local lg, gg = F.soft_dice_fused(v[1]:to(DEV), v[2]:to(DEV), { per_sample = true, reduction = "none" })
      close(lg, lc, TOL.f32.loss, 0, "strided loss")
      close(gg, gc, TOL.f32.grad, 0, "strided grad")
    end
  end)
end)

describe("CUDA affinity field loss against the CPU", function()
  it("every dtype, reduction, divergence and margin; ignored pixels; borders", function()
    -- 1×5×53×95: several strips of columns and bands of rows of the kernel's blocks; 1×50×9×35:
    -- too many classes for a block's logits in shared memory (the kernel's other path, both forms)
    for si, sizes in ipairs { { 2, 3, 4, 5 }, { 1, 4, 1, 6 }, { 3, 2, 3, 1 }, { 2, 19, 33, 40 }, { 1, 5, 53, 95 },
                              { 1, 50, 9, 35 } } do
      local x64 = ploss.randn(sizes, { dtype = "f64", seed = 1100 + si, std = 1.5 })
      H.seed(1200 + si)
      local y = H.random_labels({ sizes[1], sizes[3], sizes[4] }, sizes[2], { ignore = 0.15, ignore_index = 255 })
      for _, dtype in ipairs(DTYPES) do
        local xc = x64:to(dtype)
        local xg, yg = xc:to(DEV), y:to(DEV)
        local T = TOL[dtype]
        for _, o in ipairs { {}, { reduction = "sum", divergence = "reference" }, { reduction = "none", kl_margin = 0.5 },
                             { lambda_same = 0.3, lambda_diff = 2, kl_margin = 1, divergence = "reference" } } do
          local what = string.format("%s %s %s %s κ %g", table.concat(sizes, "x"), dtype, o.reduction or "mean",
            o.divergence or "kl", o.kl_margin or 3)
          -- the hinge's kink: a pair with κ − D within rounding could switch on one device
          -- only; the closest pair of these inputs is 3.6e-5 from its kink (f32 D: ~1e-6)
          device_matches_cpu("affinity_field", xc, y, xg, yg, o, T, what, { sizes[1], sizes[3], sizes[4] }, 11)
        end
      end
    end
  end)

  it("strided inputs give the contiguous copy's bits; all ignored; invalid labels", function()
    local x = ploss.randn({ 2, 5, 12, 10 }, { device = DEV, seed = 111 })
    local y = H.random_labels({ 2, 12, 10 }, 5, { ignore = 0.1, ignore_index = 255, device = DEV })
    for _, v in ipairs {
      { "crop", x:narrow(3, 3, 7):narrow(4, 2, 6), y:narrow(2, 3, 7):narrow(3, 2, 6) },
      { "channels-last", H.relayout(x, "channels_last"), y },
      { "transposed", x:transpose(3, 4), y:transpose(2, 3) },
      { "classes expanded (stride 0)", x:narrow(2, 1, 1):expand(2, 5, 12, 10), y },
    } do
      local l, g = F.affinity_field_fused(v[2], v[3], { reduction = "none" })
      local lc, gc = F.affinity_field_fused(v[2]:contiguous(), v[3]:contiguous(), { reduction = "none" })
      H.assert_equal(l, lc, { what = v[1] .. " loss" })
      H.assert_equal(g, gc, { what = v[1] .. " gradient" })
    end
    -- a masked class (logits at the float range's end, or −∞) at every pixel: finite, as on
    -- the CPU (0·log 0 = 0)
    for _, case in ipairs { { "f32", -3.38e38 }, { "bf16", -3.38e38 }, { "f32", -math.huge }, { "bf16", -math.huge } } do
      local dtype = case[1]
      local xm = ploss.randn({ 2, 5, 12, 10 }, { seed = 112 })
      xm:narrow(2, 3, 1):fill(case[2])
      xm = xm:to(dtype)
      local yc = y:to("cpu")
      for _, o in ipairs { {}, { divergence = "reference" } } do
        local lc, gc = F.affinity_field_fused(xm, yc, o)
        local lg, gg = F.affinity_field_fused(xm:to(DEV), y, o)
        assert.is_true(lc == lc and math.abs(lc) < math.huge, "CPU loss finite")
        close(lg, lc, TOL[dtype].loss, 0, "masked class loss " .. dtype .. " " .. case[2])
        close(gg, gc, TOL[dtype].grad, TOL[dtype].floor, "masked class grad " .. dtype .. " " .. case[2])
      end
    end
    -- a class masked by −∞ in two rectangles only, each inside a ring of ignored pixels (a
    -- masked pixel next to an unmasked one would have an infinite KL): the first starts on
    -- row 24, the halo row of the blocks above (f32 bands of 24 rows), the second on column
    -- 30, the halo column of the strips on its left (strips of 30 columns), so some blocks
    -- see a −∞ only in their halo, others none; f32 and bf16 (staged), f64 and 300 classes
    -- (the direct path)
    for _, case in ipairs { { "f32", 5 }, { "bf16", 5 }, { "f64", 5 }, { "f32", 300 } } do
      local dtype, C = case[1], case[2]
      local xs = ploss.randn({ 2, C, 60, 70 }, { dtype = "f64", seed = 113 }):totable()
      local ys = H.random_labels({ 2, 60, 70 }, C, { ignore = 0.05, ignore_index = 255 }):totable()
      for _, rect in ipairs { { 24, 30, 5, 12, 3 }, { 40, 45, 30, 40, C } } do
        local r0, r1, c0, c1, k = rect[1], rect[2], rect[3], rect[4], rect[5]
        for n = 1, 2 do
          for r = r0 - 1, r1 + 1 do
            for c = c0 - 1, c1 + 1 do
              if r >= r0 and r <= r1 and c >= c0 and c <= c1 then
                xs[n][k][r + 1][c + 1] = -math.huge
              else
                ys[n][r + 1][c + 1] = 255
              end
            end
          end
        end
      end
      local xm, ym = ploss.tensor(xs, { dtype = dtype }), ploss.tensor(ys, { dtype = "i64" })
      for _, o in ipairs { { reduction = "none" }, {} } do
        local lc, gc = F.affinity_field_fused(xm, ym, o)
        local lg, gg = F.affinity_field_fused(xm:to(DEV), ym:to(DEV), o)
        local what = string.format("masked rectangles %s C=%d %s", dtype, C, o.reduction or "mean")
        for _, t in ipairs { { lc, "CPU loss" }, { gc, "CPU grad" }, { lg, "loss" }, { gg, "grad" } } do
          for _, v in ipairs(type(t[1]) == "number" and { t[1] } or t[1]:flat()) do
            assert.is_true(v == v and math.abs(v) < math.huge, what .. " " .. t[2] .. " finite")
          end
        end
        close(lg, lc, TOL[dtype].loss, 0, what .. " loss")
        close(gg, gc, TOL[dtype].grad, TOL[dtype].floor, what .. " grad")
      end
    end
    local yi = ploss.full({ 2, 12, 10 }, 255, { dtype = "i64", device = DEV })
    local l, g = F.affinity_field_fused(x, yi)
    assert.is_true(l ~= l)
    for _, e in ipairs(g:flat()) do assert.are.equal(0, e) end
    local yh = ploss.zeros({ 2, 12, 10 }, { dtype = "i64" })
    yh:view(-1)[17] = -3
    local yb = yh:to(DEV)
    if ON_GPU then
      F.affinity_field_fused(x, yb, { reduction = "none" })
      H.expect_error(function() ploss.synchronize(DEV) end, "PLOSS_ERR_INVALID_LABEL")
    end
    H.expect_error(function() local _ = F.affinity_field(x, yb) end, "PLOSS_ERR_INVALID_LABEL")
    assert.is_number(F.affinity_field(x, ploss.zeros({ 2, 12, 10 }, { dtype = "i64", device = DEV })))
  end)
end)

describe("CUDA affinity loss against the CPU", function()
  -- k = 3 with fp32 accumulation and at most 32 classes takes the pixel-major kernel
  -- (4·⌈C/4⌉ classes a pixel, rounded up to 8, 12, 16, 20, 24 or 32), f64, the other
  -- windows and class counts the general one
  it("every dtype, reduction and window; ignored pixels; images narrower than the window", function()
    for si, sizes in ipairs { { 2, 3, 4, 5 }, { 1, 4, 3, 7 }, { 2, 2, 6, 2 }, { 2, 19, 24, 31 }, { 1, 11, 9, 35 },
                              { 1, 14, 10, 33 }, { 1, 22, 9, 34 }, { 1, 27, 17, 40 }, { 1, 33, 5, 6 } } do
      local x64 = ploss.randn(sizes, { dtype = "f64", seed = 1500 + si, std = 0.5 })
      H.seed(1600 + si)
      local y = H.random_labels({ sizes[1], sizes[3], sizes[4] }, sizes[2], { ignore = 0.15 })
      for _, dtype in ipairs(DTYPES) do
        local xc = x64:to(dtype)
        local xg, yg = xc:to(DEV), y:to(DEV)
        local T = TOL[dtype]
        for _, o in ipairs { {}, { reduction = "none" }, { reduction = "sum" }, { kernel_size = 1, reduction = "sum" },
                             { kernel_size = 5, reduction = "none" }, { kernel_size = 2 } } do
          local what = string.format("%s %s %s k %d", table.concat(sizes, "x"), dtype, o.reduction or "mean",
            o.kernel_size or 3)
          device_matches_cpu("affinity", xc, y, xg, yg, o, T, what, { sizes[1], sizes[3], sizes[4] }, 13)
        end
      end
    end
  end)

  it("strided inputs give the contiguous copy's bits; invalid labels", function()
    local x = ploss.randn({ 2, 5, 12, 10 }, { device = DEV, seed = 121 })
    local y = H.random_labels({ 2, 12, 10 }, 5, { ignore = 0.1, device = DEV })
    for _, v in ipairs {
      { "crop", x:narrow(3, 3, 7):narrow(4, 2, 6), y:narrow(2, 3, 7):narrow(3, 2, 6) },
      { "channels-last", H.relayout(x, "channels_last"), y },
      { "transposed", x:transpose(3, 4), y:transpose(2, 3) },
    } do
      local l, g = F.affinity_fused(v[2], v[3], { reduction = "none" })
      local lc, gc = F.affinity_fused(v[2]:contiguous(), v[3]:contiguous(), { reduction = "none" })
      H.assert_equal(l, lc, { what = v[1] .. " loss" })
      H.assert_equal(g, gc, { what = v[1] .. " gradient" })
    end
    local yh = ploss.zeros({ 2, 12, 10 }, { dtype = "i64" })
    yh:view(-1)[30] = 5
    local yb = yh:to(DEV)
    if ON_GPU then
      F.affinity_fused(x, yb, { reduction = "none" })
      H.expect_error(function() ploss.synchronize(DEV) end, "PLOSS_ERR_INVALID_LABEL")
    end
    H.expect_error(function() local _ = F.affinity(x, yb) end, "PLOSS_ERR_INVALID_LABEL")
  end)
end)

describe("CUDA region losses in place", function()
  -- the fused gradient written over the input: the stencils read neighbours' logits, so
  -- their backends read them from the workspace, never from the input being overwritten
  local cases = {
    { "lovasz_softmax", {}, false }, { "generalized_soft_dice", {}, false }, { "batch_soft_dice", {}, false },
    { "soft_dice", { per_sample = true }, true }, { "affinity_field", { kl_margin = 1 }, false },
    { "affinity", { kernel_size = 3 }, false },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. ": bitwise the out-of-place pass", function()
      for _, dtype in ipairs { "f32", "bf16" } do
        local x = ploss.randn({ 2, 4, 9, 11 }, { device = DEV, dtype = dtype, seed = 131 })
        local y = c[3] and ploss.rand({ 2, 4, 9, 11 }, { device = DEV, dtype = dtype, seed = 132 })
          or H.random_labels({ 2, 9, 11 }, 4, { device = DEV })
        local l, g = F[c[1] .. "_fused"](x, y, c[2])
        H.check_inplace_fused(c[1], x:clone(), y, c[2], l, g, c[1] .. " " .. dtype)
      end
    end)
  end
end)
