-- Region kernel shape spec (suite 'cpu'): Lovász-softmax on the CPU backend.
--  * a 1×2×1×3 image and a three-class variant whose Lovász extension is worked out by hand
--    (comments give the sorted errors, the Jaccard losses and the weights);
--  * every option combination against a straightforward Lua implementation of Berman et
--    al.'s algorithm (a sort, the Jaccard loss of each prefix by its definition, the
--    differences of consecutive ones), over ranks 2 to 5;
--  * central differences in f64 for every reduction, per_image and classes setting;
--  * the edge cases: every pixel ignored, one valid pixel, a class absent, C = 1, an empty
--    batch, ties (broken by pixel index), an ignore_index that is a class id;
--  * layouts (channels-last, a crop, a transposed map) read in place; f32/f16/bf16 against
--    f64; fused against forward and backward; bad input with its messages, outputs untouched.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

---------------------------------------------------------------------------------------
-- The reference: Berman et al.'s algorithm written out in Lua
---------------------------------------------------------------------------------------

local function softmax(row)
  local m = -math.huge
  for _, v in ipairs(row) do m = math.max(m, v) end
  local s, p = 0, {}
  for j, v in ipairs(row) do p[j] = math.exp(v - m); s = s + p[j] end
  for j = 1, #p do p[j] = p[j] / s end
  return p
end

-- { loss (the reduced number, or a table of G×C values for 'none'), per (g, c) L and
-- counted } of x (N×C×d…, any device/dtype) and labels y.
local function reference(x, y, opts)
  opts = opts or {}
  local classes, per_image = opts.classes or "present", opts.per_image or false
  local ignore, reduction = opts.ignore_index or -100, opts.reduction or "mean"
  local sizes = x:size()
  local N, C = sizes[1], sizes[2]
  local rows = H.sample_rows(x)
  local labels = y:to("cpu", "i64"):contiguous():flat()
  local S = N > 0 and #rows / N or 0
  local G, M = per_image and N or 1, per_image and S or N * S
  local L, counted = {}, {}
  for g = 1, G do
    L[g], counted[g] = {}, {}
    for c = 1, C do
      local items, P = {}, 0
      for j = 1, M do
        local q = (g - 1) * M + j
        local lab = labels[q]
        if lab ~= ignore then
          local p = softmax(rows[q])
          local fg = lab == c - 1
          items[#items + 1] = { e = fg and 1 - p[c] or p[c], j = j, fg = fg }
          if fg then P = P + 1 end
        end
      end
      table.sort(items, function(a, b)
        if a.e ~= b.e then return a.e > b.e end
        return a.j < b.j
      end)
      -- the Jaccard loss of the k worst pixels: 1 − |intersection| / |union|
      local function jaccard(k, Fk)
        if k == 0 then return 0 end
        return 1 - (P - Fk) / (P + k - Fk)
      end
      local Fk, prev, sum = 0, 0, 0
      for k, it in ipairs(items) do
        if it.fg then Fk = Fk + 1 end
        local J = jaccard(k, Fk)
        sum = sum + it.e * (J - prev)
        prev = J
      end
      L[g][c] = sum
      if classes == "listed" then
        counted[g][c] = false
        for _, id in ipairs(opts.class_ids) do counted[g][c] = counted[g][c] or id == c - 1 end
      else
        counted[g][c] = classes == "all" or P > 0
      end
    end
  end
  if reduction == "none" then
    local out = {}
    for g = 1, G do
      for c = 1, C do out[#out + 1] = counted[g][c] and L[g][c] or 0 end
    end
    return out
  end
  local total = 0
  for g = 1, G do
    local k, s = 0, 0
    for c = 1, C do
      if counted[g][c] then k = k + 1; s = s + L[g][c] end
    end
    if reduction == "sum" then total = total + s elseif k > 0 then total = total + s / k end
  end
  if reduction == "mean" then total = G > 0 and total / G or 0 end
  return total
end

local function merge(a, b)
  local o = {}
  for k, v in pairs(a or {}) do o[k] = v end
  for k, v in pairs(b or {}) do o[k] = v end
  return o
end

-- The loss of the call as a number or a flat list.
local function loss_values(l) return type(l) == "number" and { l } or l:flat() end

local function none_sizes(x, opts)
  return opts.per_image and { x:size(1), x:size(2) } or { x:size(2) }
end

-- Logits whose softmax is the given probabilities (per pixel, class-major lists).
local function logits_of(probs, C, H_, W)
  local t = {}
  for c = 1, C do
    t[c] = {}
    for h = 1, H_ do
      t[c][h] = {}
      for w = 1, W do t[c][h][w] = math.log(probs[c][(h - 1) * W + w]) end
    end
  end
  return ploss.tensor({ t }, { dtype = "f64" })
end

---------------------------------------------------------------------------------------

describe("LovaszSoftmaxLoss by hand", function()
  -- 3 pixels, p(class 1) = 0.9, 0.2, 0.6, labels 1, 0, 1.
  --  class 1 (P = 2): errors 0.1 (fg), 0.2, 0.4 (fg); sorted 0.4 fg, 0.2, 0.1 fg;
  --    Jaccard losses of the prefixes 1/2, 2/3, 1: weights 1/2, 1/6, 1/3;
  --    L_1 = 0.4/2 + 0.2/6 + 0.1/3 = 4/15
  --  class 0 (P = 1): errors 0.1, 0.2 (fg), 0.4; sorted 0.4, 0.2 fg, 0.1;
  --    Jaccard losses 1/2, 1, 1: weights 1/2, 1/2, 0; L_0 = 0.2 + 0.1 = 3/10
  local x = logits_of({ { 0.1, 0.8, 0.4 }, { 0.9, 0.2, 0.6 } }, 2, 1, 3)
  local y = ploss.tensor({ { { 1, 0, 1 } } }, { dtype = "i64" })

  it("values for each reduction", function()
    H.assert_close(F.lovasz_softmax(x, y, { reduction = "none" }), { 3 / 10, 4 / 15 }, { rtol = 1e-14 })
    H.assert_close(F.lovasz_softmax(x, y), 17 / 60, { rtol = 1e-14 })
    H.assert_close(F.lovasz_softmax(x, y, { reduction = "sum" }), 17 / 30, { rtol = 1e-14 })
    -- per image is the same with one image: [1, 2]
    H.assert_close(F.lovasz_softmax(x, y, { reduction = "none", per_image = true }), { 3 / 10, 4 / 15 }, { rtol = 1e-14 })
  end)

  it("the gradient from the hand weights", function()
    -- ∂L_c/∂p_c per pixel: the weight of its rank, negative for a pixel of class c
    local Gp = { { 0, -1 / 2, 1 / 2 }, { -1 / 3, 1 / 6, -1 / 2 } } -- [class][pixel]
    local p = { { 0.1, 0.8, 0.4 }, { 0.9, 0.2, 0.6 } }
    local omega = 1 / 2 -- 'mean' over the two classes
    local want = {}
    for c = 1, 2 do
      for i = 1, 3 do
        local dot = omega * (p[1][i] * Gp[1][i] + p[2][i] * Gp[2][i])
        want[#want + 1] = p[c][i] * (omega * Gp[c][i] - dot)
      end
    end
    H.assert_close(F.lovasz_softmax_backward(x, y), want, { rtol = 1e-12, atol = 1e-15 })
  end)

  it("an absent class: skipped with 'present', max p with 'all'", function()
    -- a third class with p = 0.05, 0.3, 0.1 (the others scaled), absent from the labels
    local p2 = { 0.05, 0.3, 0.1 }
    local probs = { {}, {}, p2 }
    local base = { { 0.1, 0.8, 0.4 }, { 0.9, 0.2, 0.6 } }
    for c = 1, 2 do
      for i = 1, 3 do probs[c][i] = base[c][i] * (1 - p2[i]) end
    end
    local x3 = logits_of(probs, 3, 1, 3)
    local none_all = F.lovasz_softmax(x3, y, { reduction = "none", classes = "all" }):flat()
    H.assert_close(none_all[3], 0.3, { rtol = 1e-13 }) -- g = (1, 0, 0): the largest error, max p
    local none_present = F.lovasz_softmax(x3, y, { reduction = "none" }):flat()
    assert.are.equal(0, none_present[3])
    H.assert_close(F.lovasz_softmax(x3, y), (none_present[1] + none_present[2]) / 2, { rtol = 1e-14 })
    H.assert_close(F.lovasz_softmax(x3, y, { classes = "all" }), (none_all[1] + none_all[2] + none_all[3]) / 3,
      { rtol = 1e-14 })
    -- the absent class still moves the gradient with 'all' (towards a lower p at pixel 2)
    local g_all = F.lovasz_softmax_backward(x3, y, nil, { classes = "all" }):flat()
    local g_present = F.lovasz_softmax_backward(x3, y):flat()
    assert.is_true(g_all[3 * 2 + 2] > 0 and g_present[3 * 2 + 2] < g_all[3 * 2 + 2])
  end)
end)

describe("LovaszSoftmaxLoss against the reference implementation", function()
  local shapes = { { 2, 4, 3, 5 }, { 3, 3, 7 }, { 6, 5 }, { 2, 3, 2, 3, 2 }, { 1, 6, 4, 4 } }
  for si, sizes in ipairs(shapes) do
    it(table.concat(sizes, "x"), function()
      H.seed(100 + si)
      local x = ploss.randn(sizes, { dtype = "f64", seed = 100 + si, std = 2 })
      for _, ignore in ipairs { 0, 0.3 } do
        local y = H.random_labels(H.sample_sizes(sizes), sizes[2] - 1, { ignore = ignore }) -- the last class absent
        for _, per_image in ipairs { false, true } do
          for _, classes in ipairs { "present", "all" } do
            for _, red in ipairs { "mean", "sum", "none" } do
              local o = { per_image = per_image, classes = classes, reduction = red }
              local what = string.format("%s ignore %g per_image %s classes %s %s", table.concat(sizes, "x"), ignore,
                tostring(per_image), classes, red)
              local want = reference(x, y, o)
              H.assert_close(loss_values(F.lovasz_softmax(x, y, o)), type(want) == "number" and { want } or want,
                { rtol = 1e-12, atol = 1e-15, what = what })
            end
          end
        end
      end
    end)
  end
end)

describe("LovaszSoftmaxLoss with a list of classes", function()
  it("classes = 'listed': those classes, present or not, against the reference", function()
    for si, sizes in ipairs { { 2, 4, 3, 5 }, { 3, 5, 7 } } do
      local x = ploss.randn(sizes, { dtype = "f64", seed = 150 + si, std = 2 })
      H.seed(160 + si)
      local y = H.random_labels(H.sample_sizes(sizes), sizes[2] - 1, { ignore = 0.2 }) -- the last class absent
      for _, ids in ipairs { { 0, 2 }, { sizes[2] - 1 }, { 1, 1, 3 } } do
        for _, per_image in ipairs { false, true } do
          for _, red in ipairs { "mean", "sum", "none" } do
            local o = { classes = "listed", class_ids = ids, per_image = per_image, reduction = red }
            local want = reference(x, y, o)
            H.assert_close(loss_values(F.lovasz_softmax(x, y, o)), type(want) == "number" and { want } or want,
              { rtol = 1e-12, atol = 1e-15, what = string.format("ids {%s} per_image %s %s", table.concat(ids, ","),
                tostring(per_image), red) })
          end
        end
      end
      -- a tensor of indices (i64) is the list
      local o = { classes = "listed", class_ids = { 0, 2 } }
      local ot = { classes = "listed", class_ids = ploss.tensor({ 0, 2 }, { dtype = "i64" }) }
      local l, g = F.lovasz_softmax_fused(x, y, o)
      local lt, gt = F.lovasz_softmax_fused(x, y, ot)
      assert.are.equal(l, lt)
      H.assert_equal(gt, g)
      -- Berman et al.'s form: the list (or tensor) as classes itself, in every entry point
      for _, ids in ipairs { { 0, 2 }, ot.class_ids } do
        local lc, gc = F.lovasz_softmax_fused(x, y, { classes = ids })
        assert.are.equal(l, lc)
        H.assert_equal(gc, g)
        local crit = ploss.LovaszSoftmaxLoss { classes = ids }
        assert.are.equal(l, crit:forward(x, y))
        H.assert_equal(crit:backward(x, y), g)
      end
      local crit = ploss.LovaszSoftmaxLoss {}
      crit.classes = { 0, 2 }
      assert.are.equal(l, crit:forward(x, y))
      -- a criterion made with a list takes another list, or a name, as a whole
      local crit2 = ploss.LovaszSoftmaxLoss { classes = { 1 } }
      crit2.classes = { 0, 2 }
      assert.are.equal(l, crit2:forward(x, y))
      crit2.classes = "present"
      assert.are.equal(F.lovasz_softmax(x, y), crit2:forward(x, y))
    end
  end)

  it("central differences with a listed absent class", function()
    local x = ploss.randn({ 2, 3, 3, 3 }, { dtype = "f64", seed = 171 })
    local y = H.random_labels({ 2, 3, 3 }, 2, { ignore = 0.1 })
    local o = { classes = "listed", class_ids = { 1, 2 } }
    H.gradcheck(H.loss_objective("lovasz_softmax", y, o), x, F.lovasz_softmax_backward(x, y, nil, o), { atol = 1e-9 })
  end)

  it("bad lists: an error naming class_ids", function()
    local x = ploss.randn({ 2, 3, 2, 2 }, { seed = 172 })
    local y = ploss.randint(0, 3, { 2, 2, 2 }, { seed = 173 })
    local loss = ploss.empty({})
    H.expect_error(function() F.lovasz_softmax(x, y, { classes = "listed", out = loss }) end,
      { "PLOSS_ERR_INVALID_ARGUMENT", "class_ids: required with classes = 'listed'" }, loss)
    H.expect_error(function() F.lovasz_softmax(x, y, { class_ids = { 1 }, out = loss }) end,
      { "PLOSS_ERR_INVALID_ARGUMENT", "class_ids: given while opts.classes is not 'listed'" }, loss)
    H.expect_error(function() F.lovasz_softmax(x, y, { classes = { 0 }, class_ids = { 1 }, out = loss }) end,
      "opts.classes: a list, and opts.class_ids too: give them once", loss)
    H.expect_error(function() F.lovasz_softmax(x, y, { classes = 1, out = loss }) end,
      "opts.classes: 1 is not one of 'present', 'all', 'listed', nor a list of class_ids", loss)
    -- a list given as classes is named classes in the messages about its values
    H.expect_error(function() F.lovasz_softmax(x, y, { classes = { { 0 } }, out = loss }) end,
      "opts.classes[1]: expected a number, got table", loss)
    H.expect_error(function() ploss.LovaszSoftmaxLoss { classes = { 0, "1" } } end, "opts.classes[2]: expected a number")
    for _, bad in ipairs { 3, -1, 0.5 } do
      H.expect_error(function() F.lovasz_softmax(x, y, { classes = "listed", class_ids = { 0, bad }, out = loss }) end,
        { "PLOSS_ERR_INVALID_ARGUMENT", "class_ids: element 1 (from 0) = " .. (bad == 0.5 and "0.5" or tostring(bad)) ..
          " is not an integer class index in [0, 3)" }, loss)
      -- given as classes (a list or a tensor): named classes, in every call form
      H.expect_error(function() F.lovasz_softmax(x, y, { classes = { 0, bad }, out = loss }) end,
        "classes: element 1 (from 0) = " .. (bad == 0.5 and "0.5" or tostring(bad)) .. " is not an integer class index", loss)
    end
    local ids = ploss.tensor({ 0, 5 }, { dtype = "i64" })
    H.expect_error(function() F.lovasz_softmax_backward(x, y, 1, { classes = ids }) end,
      "lovasz_softmax_backward: classes: element 1 (from 0) = 5 is not an integer class index in [0, 3)")
    local crit = ploss.LovaszSoftmaxLoss { classes = { 0, 5 } }
    H.expect_error(function() crit:forward(x, y) end, "lovasz_softmax_forward: classes: element 1 (from 0) = 5")
    H.expect_error(function() crit(x, y) end, "lovasz_softmax_fused: classes: element 1 (from 0) = 5")
    H.expect_error(function()
      F.lovasz_softmax(x, y, { classes = "listed", class_ids = ploss.zeros({ 2, 2 }, { dtype = "i64" }), out = loss })
    end, { "PLOSS_ERR_SHAPE", "class_ids: expected a vector of class indices" }, loss)
  end)
end)

describe("LovaszSoftmaxLoss gradient", function()
  it("matches central differences in f64 (every reduction, per_image, classes, ignored pixels)", function()
    local sizes = { 2, 3, 3, 4 }
    local x = ploss.randn(sizes, { dtype = "f64", seed = 7, std = 1.5 })
    local y = H.random_labels({ 2, 3, 4 }, 3, { ignore = 0.2 })
    for _, per_image in ipairs { false, true } do
      for _, classes in ipairs { "present", "all" } do
        for _, red in ipairs { "mean", "sum", "none" } do
          local o = { per_image = per_image, classes = classes, reduction = red }
          local gout = red == "none" and ploss.randn(none_sizes(x, o), { dtype = "f64", seed = 9 }) or nil
          local analytic = F.lovasz_softmax_backward(x, y, gout or 0.7, o)
          local f = H.loss_objective("lovasz_softmax", y, o, gout)
          local scaled = red == "none" and f or function(xx) return 0.7 * f(xx) end
          H.gradcheck(scaled, x, analytic, { rtol = 1e-6, atol = 1e-9,
            what = string.format("per_image %s classes %s %s", tostring(per_image), classes, red) })
        end
      end
    end
  end)

  it("fused = forward and backward; scale; the criterion", function()
    local x = ploss.randn({ 2, 4, 3, 3 }, { dtype = "f64", seed = 21 })
    local y = H.random_labels({ 2, 3, 3 }, 4, { ignore = 0.1 })
    for _, red in ipairs { "mean", "sum", "none" } do
      for _, per_image in ipairs { false, true } do
        local o = { reduction = red, per_image = per_image }
        local l, g = F.lovasz_softmax_fused(x, y, o)
        H.assert_equal(loss_values(l), loss_values(F.lovasz_softmax(x, y, o)), { what = red .. " fused loss" })
        H.assert_equal(g, F.lovasz_softmax_backward(x, y, nil, o), { what = red .. " fused gradient" })
        H.check_fused_scale("lovasz_softmax", x, y, o, none_sizes(x, o), red, 1e-14)
        local crit = ploss.LovaszSoftmaxLoss(o)
        local cl, cg = crit(x, y)
        H.assert_equal(loss_values(cl), loss_values(l), { what = red .. " criterion" })
        H.assert_equal(cg, g, { what = red .. " criterion gradient" })
        crit:forward(x, y)
        H.assert_equal(crit:backward(x, y), g, { what = red .. " criterion backward" })
      end
    end
  end)

  it("in-place fused pass", function()
    local x = ploss.randn({ 2, 3, 4, 4 }, { dtype = "f32", seed = 23 })
    local y = H.random_labels({ 2, 4, 4 }, 3)
    local l, g = F.lovasz_softmax_fused(x, y)
    H.check_inplace_fused("lovasz_softmax", x:clone(), y, {}, l, g, "lovasz_softmax")
  end)
end)

describe("LovaszSoftmaxLoss edge cases", function()
  it("every pixel ignored: 0 and an exactly zero gradient, every setting", function()
    local x = ploss.randn({ 2, 3, 2, 2 }, { dtype = "f64", seed = 31 })
    local y = ploss.full({ 2, 2, 2 }, -100, { dtype = "i64" })
    for _, per_image in ipairs { false, true } do
      for _, classes in ipairs { "present", "all" } do
        for _, red in ipairs { "mean", "sum", "none" } do
          local o = { per_image = per_image, classes = classes, reduction = red }
          local l, g = F.lovasz_softmax_fused(x, y, o)
          for _, v in ipairs(loss_values(l)) do assert.are.equal(0, v) end
          for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
        end
      end
    end
  end)

  it("one valid pixel: L_y = 1 − p_y, and with 'all' the others L_c = p_c", function()
    local x = ploss.randn({ 1, 4, 2, 3 }, { dtype = "f64", seed = 33 })
    local yv = {}
    for i = 1, 6 do yv[i] = -100 end
    yv[5] = 2
    local y = ploss.tensor(yv, { dtype = "i64", size = { 1, 2, 3 } })
    local p = softmax(H.sample_rows(x)[5])
    H.assert_close(F.lovasz_softmax(x, y), 1 - p[3], { rtol = 1e-14 })
    H.assert_close(F.lovasz_softmax(x, y, { classes = "all", reduction = "none" }), { p[1], p[2], 1 - p[3], p[4] },
      { rtol = 1e-14 })
    H.gradcheck(function(xx) return F.lovasz_softmax(xx, y, { classes = "all" }) end, x,
      F.lovasz_softmax_backward(x, y, nil, { classes = "all" }), { atol = 1e-9 })
  end)

  it("C = 1 gives 0; an empty batch gives 0 (and 'none' zeros)", function()
    local x1 = ploss.randn({ 2, 1, 3 }, { dtype = "f64", seed = 35 })
    local y1 = ploss.zeros({ 2, 3 }, { dtype = "i64" })
    local l, g = F.lovasz_softmax_fused(x1, y1, { classes = "all" })
    assert.are.equal(0, l)
    for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
    local x0 = ploss.randn({ 0, 3, 4 }, { dtype = "f32" })
    local y0 = ploss.zeros({ 0, 4 }, { dtype = "i64" })
    assert.are.equal(0, F.lovasz_softmax(x0, y0))
    assert.are.equal(0, F.lovasz_softmax(x0, y0, { per_image = true }))
    H.assert_equal(F.lovasz_softmax(x0, y0, { reduction = "none" }), { 0, 0, 0 })
    assert.are.same({ 0, 3 }, F.lovasz_softmax(x0, y0, { reduction = "none", per_image = true }):size())
    assert.are.same({ 0, 3, 4 }, F.lovasz_softmax_backward(x0, y0):size())
  end)

  it("ties are broken by increasing pixel index (the gradient of constant logits)", function()
    local x = ploss.zeros({ 1, 2, 1, 4 }, { dtype = "f64" })
    local y = ploss.tensor({ { { 1, 0, 0, 1 } } }, { dtype = "i64" })
    -- every error 1/2 in both classes, ranks in pixel order.  class 1 (P = 2): fg, bg, bg, fg:
    -- Jaccard losses 1/2, 2/3, 3/4, 1: weights 1/2, 1/6, 1/12, 1/4, signs −, +, +, −.
    -- class 0 (P = 2): bg, fg, fg, bg: Jaccard losses 1/3, 2/3, 1, 1: weights 1/3, 1/3, 1/3, 0,
    -- signs +, −, −, +.
    local G1 = { -1 / 2, 1 / 6, 1 / 12, -1 / 4 }
    local G0 = { 1 / 3, -1 / 3, -1 / 3, 0 }
    local want = {}
    for i = 1, 4 do want[i] = 0.5 * 0.5 * (G0[i] - G1[i]) / 2 end -- ω = 1/2, p = 1/2
    for i = 1, 4 do want[4 + i] = -want[i] end
    H.assert_close(F.lovasz_softmax_backward(x, y), want, { rtol = 1e-14 })
    H.assert_close(F.lovasz_softmax(x, y), 0.5, { rtol = 1e-14 })
  end)

  it("an ignore_index that is a class id leaves those pixels out", function()
    local x = ploss.randn({ 2, 3, 3, 3 }, { dtype = "f64", seed = 37 })
    local y = H.random_labels({ 2, 3, 3 }, 3)
    for _, classes in ipairs { "present", "all" } do
      local o = { ignore_index = 1, classes = classes, reduction = "none" }
      H.assert_close(F.lovasz_softmax(x, y, o), reference(x, y, o), { rtol = 1e-12, atol = 1e-15 })
      local g = F.lovasz_softmax_backward(x, y, nil, merge(o, { reduction = "mean" }))
      local gy, gv = y:flat(), g:permute(1, 3, 4, 2):contiguous():flat()
      for i = 1, #gy do
        if gy[i] == 1 then
          for c = 1, 3 do assert.are.equal(0, gv[(i - 1) * 3 + c]) end
        end
      end
    end
  end)

  it("per_image: the mean over images of each image's loss", function()
    local x = ploss.randn({ 3, 4, 3, 3 }, { dtype = "f64", seed = 39 })
    local y = H.random_labels({ 3, 3, 3 }, 4, { ignore = 0.2 })
    local s = 0
    for n = 1, 3 do s = s + F.lovasz_softmax(x:narrow(1, n, 1), y:narrow(1, n, 1)) end
    H.assert_close(F.lovasz_softmax(x, y, { per_image = true }), s / 3, { rtol = 1e-13 })
  end)
end)

describe("region losses without pixels", function()
  it("2^40 images of no pixel: the closed-form values at once (no loop over the groups)", function()
    local x = ploss.empty({ 2 ^ 40, 3, 0 })
    local y = ploss.empty({ 2 ^ 40, 0 }, { dtype = "i64" })
    assert.are.equal(0, F.lovasz_softmax(x, y, { per_image = true }))
    assert.are.equal(0, F.generalized_soft_dice(x, y))
    local z = F.generalized_soft_dice(x, y, { smooth = 0, reduction = "sum" })
    assert.is_true(z ~= z)
    local xa, ya = ploss.empty({ 2 ^ 40, 3, 0, 4 }), ploss.empty({ 2 ^ 40, 0, 4 }, { dtype = "i64" })
    local m = F.affinity_field(xa, ya)
    assert.is_true(m ~= m)
    assert.are.equal(0, F.affinity(xa, ya, { reduction = "sum" }))
    assert.are.same({ 2 ^ 40, 3, 0 }, F.lovasz_softmax_backward(x, y):size())
  end)
end)

describe("LovaszSoftmaxLoss layouts and dtypes", function()
  it("channels-last, a crop and a transposed map are read in place, pixel for pixel", function()
    local x = ploss.randn({ 2, 4, 6, 5 }, { dtype = "f64", seed = 41 })
    local y = H.random_labels({ 2, 6, 5 }, 4, { ignore = 0.1 })
    local views = {
      { "channels-last", H.relayout(x, "channels_last"), y },
      { "crop", x:narrow(3, 2, 4):narrow(4, 2, 3), y:narrow(2, 2, 4):narrow(3, 2, 3) },
      { "transposed H/W", x:transpose(3, 4), y:transpose(2, 3) },
    }
    for _, v in ipairs(views) do
      local name, xv, yv = v[1], v[2], v[3]
      local xc, yc = xv:contiguous(), yv:contiguous()
      for _, o in ipairs { { reduction = "none" }, { per_image = true, classes = "all" } } do
        local l, g = F.lovasz_softmax_fused(xv, yv, o)
        local lc, gc = F.lovasz_softmax_fused(xc, yc, o)
        H.assert_equal(loss_values(l), loss_values(lc), { what = name .. " loss" })
        H.assert_equal(g, gc, { what = name .. " gradient" })
        H.assert_close(loss_values(l), (function()
          local r = reference(xc, yc, o)
          return type(r) == "number" and { r } or r
        end)(), { rtol = 1e-12, atol = 1e-15, what = name .. " against the reference" })
      end
      -- a gradient into a strided (channels-last) output
      local gs = H.relayout(ploss.empty(xv:size(), { dtype = "f64" }), "channels_last")
      F.lovasz_softmax_backward(xv, yv, nil, { grad_input = gs })
      H.assert_equal(gs, F.lovasz_softmax_backward(xc, yc), { what = name .. " strided gradient" })
    end
  end)

  it("f32, f16 and bf16 give the f64 values of the same rounded inputs", function()
    local x64 = ploss.randn({ 2, 5, 4, 4 }, { dtype = "f64", seed = 43 })
    local y = H.random_labels({ 2, 4, 4 }, 5, { ignore = 0.1 })
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local x = x64:to(dt)
      local xr = x:to("f64")
      for _, red in ipairs { "mean", "sum", "none" } do
        local o = { reduction = red, per_image = red == "none" }
        local l, g = F.lovasz_softmax_fused(x, y, o)
        local lr, gr = F.lovasz_softmax_fused(xr, y, o)
        assert.are.equal(dt, g:dtype())
        H.assert_close(loss_values(l), loss_values(lr), { rtol = 1e-6, atol = 1e-7, what = dt .. " " .. red })
        H.assert_close(g:to("f64"), gr, { rtol = H.tol[dt].rtol, atol = H.tol[dt].atol * 1e-2, what = dt .. " " .. red })
      end
    end
  end)

  it("is deterministic: the same bits on every call", function()
    local x = ploss.randn({ 3, 4, 8, 8 }, { dtype = "f32", seed = 45 })
    local y = H.random_labels({ 3, 8, 8 }, 4, { ignore = 0.1 })
    local l1, g1 = F.lovasz_softmax_fused(x, y)
    for _ = 1, 3 do
      local l2, g2 = F.lovasz_softmax_fused(x, y)
      assert.are.equal(l1, l2)
      H.assert_equal(g2, g1)
    end
  end)
end)

describe("LovaszSoftmaxLoss bad input", function()
  local x = ploss.randn({ 2, 3, 2, 2 }, { seed = 51 })
  local y = ploss.randint(0, 3, { 2, 2, 2 }, { seed = 52 })

  it("labels outside [0, C): INVALID_LABEL naming the pixel, nothing written", function()
    for _, bad in ipairs { 3, -1, 1000 } do
      local yb = y:clone()
      yb:view(-1)[6] = bad
      local loss, grad = ploss.empty({}), ploss.empty({ 2, 3, 2, 2 })
      H.expect_error(function() F.lovasz_softmax(x, yb, { out = loss }) end,
        { "PLOSS_ERR_INVALID_LABEL", "class index " .. bad .. " at pixel (n = 1, s = 1)" }, loss)
      H.expect_error(function() F.lovasz_softmax_fused(x, yb, { out = loss, grad_input = grad }) end,
        "PLOSS_ERR_INVALID_LABEL", loss, grad)
      H.expect_error(function() F.lovasz_softmax_backward(x, yb, nil, { grad_input = grad }) end,
        "PLOSS_ERR_INVALID_LABEL", grad)
    end
  end)

  it("shapes, dtypes, options and aliasing: an error naming the argument", function()
    local loss, grad = ploss.empty({}), ploss.empty({ 2, 3, 2, 2 })
    H.expect_error(function() F.lovasz_softmax(x, y:to("f32"), { out = loss }) end,
      { "PLOSS_ERR_DTYPE", "target: expected class indices of dtype i64 or i32" }, loss)
    H.expect_error(function() F.lovasz_softmax(x, ploss.zeros({ 2, 2, 3 }, { dtype = "i64" }), { out = loss }) end,
      { "PLOSS_ERR_SHAPE", "target: expected shape [2, 2, 2]" }, loss)
    H.expect_error(function() F.lovasz_softmax(ploss.randn({ 6 }), ploss.zeros({ 6 }, { dtype = "i64" })) end,
      "input")
    H.expect_error(function() F.lovasz_softmax(x:to("i64"), y) end, { "PLOSS_ERR_DTYPE", "input" })
    local l3 = ploss.empty({ 2 })
    H.expect_error(function() F.lovasz_softmax(x, y, { reduction = "none", out = l3 }) end,
      { "PLOSS_ERR_SHAPE", "opts.out: expected shape [3] (one value per class" }, l3)
    H.expect_error(function() F.lovasz_softmax(x, y, { reduction = "none", per_image = true, out = ploss.empty({ 3 }) }) end,
      { "PLOSS_ERR_SHAPE", "opts.out: expected shape [2, 3] (one value per image and class" })
    H.expect_error(function() F.lovasz_softmax(x, y, { out = ploss.empty({ 2 }) }) end,
      { "PLOSS_ERR_SHAPE", "opts.out: expected one element" })
    H.expect_error(function() F.lovasz_softmax(x, y, { out = ploss.empty({}, { dtype = "f64" }) }) end,
      { "PLOSS_ERR_DTYPE", "loss" })
    H.expect_error(function() F.lovasz_softmax_backward(x, y, ploss.ones({ 2 }), { reduction = "none" }) end,
      { "PLOSS_ERR_SHAPE", "gradOutput: expected shape [3]" })
    H.expect_error(function() F.lovasz_softmax_backward(x, y, nil, { grad_input = ploss.empty({ 2, 3, 2, 2 }, { dtype = "f64" }) }) end,
      { "PLOSS_ERR_DTYPE", "grad_input" })
    H.expect_error(function() F.lovasz_softmax_backward(x, y, nil, { grad_input = ploss.empty({ 2, 3, 4 }) }) end,
      { "PLOSS_ERR_SHAPE", "grad_input" })
    H.expect_error(function() ploss.LovaszSoftmaxLoss { classes = "some" } end, "classes: 'some' is not one of")
    H.expect_error(function() ploss.LovaszSoftmaxLoss { per_image = 1 } end, "per_image: expected a boolean")
    H.expect_error(function() ploss.LovaszSoftmaxLoss { ignore_index = 0.5 } end, "ignore_index: expected an integer")
    -- the gradient over the input without inplace, and over the labels' storage
    H.expect_error(function() F.lovasz_softmax_fused(x, y, { grad_input = x }) end, { "PLOSS_ERR_ALIAS", "grad_input" })
    local xv = ploss.randn({ 2, 3, 2, 2 })
    H.expect_error(function() F.lovasz_softmax_fused(x, y, { out = xv:view(-1):narrow(1, 1, 1):view({}), grad_input = xv }) end,
      { "PLOSS_ERR_ALIAS" })
  end)
end)

---------------------------------------------------------------------------------------
-- The per-class soft Dice losses
---------------------------------------------------------------------------------------

local function sigmoid(v) return 1 / (1 + math.exp(-v)) end

-- Generalized (per sample) or batch soft Dice written out from the formula: the reduced
-- number, or the list of the groups' losses for 'none'.
local function dice_reference(x, y, opts, batch)
  opts = opts or {}
  local pe, smooth = opts.p or 1, opts.smooth or 1
  local ignore = opts.ignore_index or 255
  local mask = opts.mask_ignored_in_denominator ~= false
  local sudre = opts.class_weights == "sudre"
  local N, C = x:size(1), x:size(2)
  local rows = H.sample_rows(x)
  local labels = y:to("cpu", "i64"):contiguous():flat()
  local S = N > 0 and #rows / N or 0
  local A, B, R = {}, {}, {}
  for n = 1, N do
    A[n], B[n], R[n] = {}, {}, {}
    for c = 1, C do
      local a, b, r = 0, 0, 0
      for s = 1, S do
        local q = (n - 1) * S + s
        local lab = labels[q]
        local valid = lab ~= ignore
        if valid or not mask then
          local sg = sigmoid(rows[q][c])
          local o = (valid and lab == c - 1) and 1 or 0
          a = a + sg * o
          b = b + sg ^ pe + o
          r = r + o
        end
      end
      A[n][c], B[n][c], R[n][c] = a, b, r
    end
  end
  local groups = {}
  local G = batch and 1 or N
  for g = 1, G do
    local members = batch and N or 1
    local w = {}
    for c = 1, C do
      local rc = 0
      for k = 1, members do rc = rc + R[batch and k or g][c] end
      if sudre then w[c] = rc > 0 and 1 / rc ^ 2 or false
      else w[c] = opts.weight and opts.weight[c] or 1 end
    end
    if sudre then
      local m = 0
      for c = 1, C do if w[c] and w[c] > m then m = w[c] end end
      for c = 1, C do if not w[c] then w[c] = m end end
    end
    local a, b = 0, 0
    for c = 1, C do
      for k = 1, members do
        local n = batch and k or g
        a = a + w[c] * A[n][c]
        b = b + w[c] * B[n][c]
      end
    end
    groups[g] = 1 - (2 * a + smooth) / (b + smooth)
  end
  local red = opts.reduction or "mean"
  if red == "none" then return groups end
  local t = 0
  for _, v in ipairs(groups) do t = t + v end
  return red == "mean" and t / G or t
end

local DICE = {
  { name = "generalized_soft_dice", crit = "GeneralizedSoftDiceLoss", batch = false },
  { name = "batch_soft_dice", crit = "BatchSoftDiceLoss", batch = true },
}

-- A loss as a list: a number, a tensor's values, or a list as it is.
local function as_list(v)
  if type(v) == "number" then return { v } end
  return ploss.is_tensor(v) and v:flat() or v
end

describe("soft Dice losses by hand", function()
  -- one 1×2 image, logits 0 (s = 1/2 everywhere), labels 0, 1; p = 1, smooth = 1:
  -- A_c = 1/2, B_c = 1 + 1 = 2: num = 2·1 + 1 = 3, den = 4 + 1 = 5, ℓ = 2/5;
  -- p = 2: B_c = 1/2 + 1, den = 4, ℓ = 1/4.
  local x = ploss.zeros({ 1, 2, 1, 2 }, { dtype = "f64" })
  local y = ploss.tensor({ { { 0, 1 } } }, { dtype = "i64" })
  it("values", function()
    for _, d in ipairs(DICE) do
      H.assert_close(F[d.name](x, y), 2 / 5, { rtol = 1e-15 })
      H.assert_close(F[d.name](x, y, { p = 2 }), 1 / 4, { rtol = 1e-15 })
    end
    -- two copies of the image: per sample the same, over the batch num = 5, den = 9
    local x2, y2 = ploss.zeros({ 2, 2, 1, 2 }, { dtype = "f64" }), ploss.tensor({ { { 0, 1 } }, { { 0, 1 } } }, { dtype = "i64" })
    H.assert_close(F.generalized_soft_dice(x2, y2, { reduction = "none" }), { 2 / 5, 2 / 5 }, { rtol = 1e-15 })
    H.assert_close(F.batch_soft_dice(x2, y2), 4 / 9, { rtol = 1e-15 })
    H.assert_close(F.batch_soft_dice(x2, y2, { reduction = "none" }), { 4 / 9 }, { rtol = 1e-15 })
  end)
  it("gradient", function()
    -- ∂ℓ/∂x = num·s(1 − s)/den² − 2·o·s(1 − s)/den = 3/100 − o/10
    H.assert_close(F.generalized_soft_dice_backward(x, y), { -0.07, 0.03, 0.03, -0.07 }, { rtol = 1e-14 })
  end)
end)

describe("soft Dice losses against the formula", function()
  for _, d in ipairs(DICE) do
    it(d.name .. ": every option", function()
      for si, sizes in ipairs { { 2, 3, 4, 5 }, { 3, 4, 6 }, { 5, 2 }, { 2, 3, 2, 2, 3 } } do
        local x = ploss.randn(sizes, { dtype = "f64", seed = 200 + si, std = 2 })
        H.seed(300 + si)
        local y = H.random_labels(H.sample_sizes(sizes), sizes[2], { ignore = 0.25, ignore_index = 255 })
        local wl = {}
        for c = 1, sizes[2] do wl[c] = 0.5 + c / 3 end
        for _, pe in ipairs { 1, 2, 0.5 } do
          for _, mask in ipairs { true, false } do
            for _, cw in ipairs { "none", "list", "sudre" } do
              for _, red in ipairs { "mean", "sum", "none" } do
                local o = { p = pe, smooth = pe == 2 and 0.5 or 1, mask_ignored_in_denominator = mask,
                            reduction = red }
                if cw == "list" then o.weight = wl elseif cw == "sudre" then o.class_weights = "sudre" end
                H.assert_close(as_list(F[d.name](x, y, o)), as_list(dice_reference(x, y, o, d.batch)),
                  { rtol = 1e-12, atol = 1e-15,
                    what = string.format("%s %s p %g mask %s %s %s", d.name, table.concat(sizes, "x"), pe,
                      tostring(mask), cw, red) })
              end
            end
          end
        end
      end
    end)

    it(d.name .. ": central differences in f64", function()
      local x = ploss.randn({ 2, 3, 3, 3 }, { dtype = "f64", seed = 61 })
      local y = H.random_labels({ 2, 3, 3 }, 3, { ignore = 0.2, ignore_index = 255 })
      for _, pe in ipairs { 1, 2, 0.7 } do
        for _, mask in ipairs { true, false } do
          for _, red in ipairs { "mean", "sum", "none" } do
            local o = { p = pe, mask_ignored_in_denominator = mask, reduction = red, weight = { 0.5, 1, 2 } }
            local lsz = d.batch and { 1 } or { 2 }
            local gout = red == "none" and ploss.randn(lsz, { dtype = "f64", seed = 62 }) or nil
            local f = H.loss_objective(d.name, y, o, gout)
            H.gradcheck(f, x, F[d.name .. "_backward"](x, y, gout, o), { rtol = 1e-6, atol = 1e-10,
              what = string.format("%s p %g mask %s %s", d.name, pe, tostring(mask), red) })
          end
        end
      end
      local o = { class_weights = "sudre" }
      H.gradcheck(H.loss_objective(d.name, y, o), x, F[d.name .. "_backward"](x, y, nil, o), { atol = 1e-10 })
    end)

    it(d.name .. ": fused = forward and backward; scale; criterion; in place", function()
      local x = ploss.randn({ 2, 4, 3, 3 }, { dtype = "f64", seed = 63 })
      local y = H.random_labels({ 2, 3, 3 }, 4, { ignore = 0.1, ignore_index = 255 })
      for _, red in ipairs { "mean", "sum", "none" } do
        local o = { reduction = red }
        local l, g = F[d.name .. "_fused"](x, y, o)
        H.assert_equal(as_list(l), as_list(F[d.name](x, y, o)))
        H.assert_equal(g, F[d.name .. "_backward"](x, y, nil, o))
        H.check_fused_scale(d.name, x, y, o, d.batch and { 1 } or { 2 }, red, 1e-14)
        local cl, cg = ploss[d.crit](o)(x, y)
        H.assert_equal(as_list(cl), as_list(l))
        H.assert_equal(cg, g)
      end
      local l, g = F[d.name .. "_fused"](x, y)
      H.check_inplace_fused(d.name, x:clone(), y, {}, l, g, d.name)
    end)
  end
end)

describe("soft Dice losses: ignored pixels and edge cases", function()
  it("ignored pixels leave numerator and denominator; the reference's denominator on request", function()
    local x = ploss.randn({ 2, 3, 4, 4 }, { dtype = "f64", seed = 71 })
    local y = H.random_labels({ 2, 4, 4 }, 3, { ignore = 0.3, ignore_index = 255 })
    for _, d in ipairs(DICE) do
      -- masked: the ignored pixels' logits change nothing, not even NaN or ±∞ ones, and
      -- get a zero gradient
      local x2 = x:clone()
      local xv, yv = x2:permute(1, 3, 4, 2):contiguous():flat(), y:flat()
      local moved = ploss.randn(x:size(), { dtype = "f64", seed = 72 }):permute(1, 3, 4, 2):contiguous():flat()
      local odd = { 0 / 0, math.huge, -math.huge }
      for i = 1, #yv do
        if yv[i] == 255 then
          for c = 1, 3 do xv[(i - 1) * 3 + c] = odd and odd[c] or moved[(i - 1) * 3 + c] end
          odd = nil
        end
      end
      x2 = ploss.tensor(xv, { dtype = "f64", size = { 2, 4, 4, 3 } }):permute(1, 4, 2, 3)
      H.assert_close(F[d.name](x2, y), F[d.name](x, y), { rtol = 1e-14 })
      local g = F[d.name .. "_backward"](x, y):permute(1, 3, 4, 2):contiguous():flat()
      for i = 1, #yv do
        if yv[i] == 255 then for c = 1, 3 do assert.are.equal(0, g[(i - 1) * 3 + c]) end end
      end
      -- unmasked: the ignored pixels' s^p is in the denominator, pushing them towards 0
      local o = { mask_ignored_in_denominator = false }
      local x3v = x:permute(1, 3, 4, 2):contiguous():flat()
      for i = 1, #yv do
        if yv[i] == 255 then for c = 1, 3 do x3v[(i - 1) * 3 + c] = moved[(i - 1) * 3 + c] end end
      end
      local x3 = ploss.tensor(x3v, { dtype = "f64", size = { 2, 4, 4, 3 } }):permute(1, 4, 2, 3)
      assert.is_true(math.abs(F[d.name](x3, y, o) - F[d.name](x, y, o)) > 1e-6)
      local gu = F[d.name .. "_backward"](x, y, nil, o):permute(1, 3, 4, 2):contiguous():flat()
      for i = 1, #yv do
        if yv[i] == 255 then for c = 1, 3 do assert.is_true(gu[(i - 1) * 3 + c] > 0) end end
      end
    end
  end)

  it("every pixel ignored: 0 and a zero gradient (smoothing in numerator and denominator)", function()
    local x = ploss.randn({ 2, 3, 2, 2 }, { dtype = "f64", seed = 73 })
    local y = ploss.full({ 2, 2, 2 }, 255, { dtype = "i64" })
    for _, d in ipairs(DICE) do
      for _, o in ipairs { {}, { class_weights = "sudre" }, { reduction = "none", smooth = 0.1 } } do
        local l, g = F[d.name .. "_fused"](x, y, o)
        for _, v in ipairs(as_list(l)) do assert.are.equal(0, v) end
        for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
      end
    end
  end)

  it("smooth = 0, a group whose pixels are all ignored: its loss NaN (0/0), its gradient 0, the others' as alone", function()
    local x = ploss.randn({ 2, 3, 2, 2 }, { dtype = "f64", seed = 74 })
    local y = H.random_labels({ 2, 2, 2 }, 3, { seed = 74 })
    y:select(1, 2):fill(255) -- sample 2: every pixel ignored
    for _, mask in ipairs { true, false } do
      for _, o in ipairs { { class_weights = "sudre" }, { weight = { 0, 0, 0 } } } do
        o.smooth, o.mask_ignored_in_denominator, o.reduction = 0, mask, "none"
        -- per sample: sample 2's loss NaN and gradient 0, sample 1's those of sample 1 alone
        local l, g = F.generalized_soft_dice_fused(x, y, o)
        local lv = as_list(l)
        assert.is_true(lv[2] ~= lv[2])
        for _, v in ipairs(g:select(1, 2):contiguous():flat()) do assert.are.equal(0, v) end
        if o.class_weights then
          local l1, g1 = F.generalized_soft_dice_fused(x:narrow(1, 1, 1), y:narrow(1, 1, 1), o)
          assert.are.equal(as_list(l1)[1], lv[1])
          assert.are.same(g1:flat(), g:narrow(1, 1, 1):contiguous():flat())
        end
        -- the batch as one group, every pixel ignored
        local lb, gb = F.batch_soft_dice_fused(x, ploss.full({ 2, 2, 2 }, 255, { dtype = "i64" }), o)
        assert.is_true(as_list(lb)[1] ~= as_list(lb)[1])
        for _, v in ipairs(gb:flat()) do assert.are.equal(0, v) end
      end
    end
  end)

  it("an empty batch: the per-sample mean is NaN, the batch Dice 0 (NaN with smooth = 0)", function()
    local x = ploss.randn({ 0, 3, 4 }, { dtype = "f32" })
    local y = ploss.zeros({ 0, 4 }, { dtype = "i64" })
    local v = F.generalized_soft_dice(x, y)
    assert.is_true(v ~= v)
    assert.are.equal(0, F.generalized_soft_dice(x, y, { reduction = "sum" }))
    assert.are.equal(0, F.batch_soft_dice(x, y))
    local z = F.batch_soft_dice(x, y, { smooth = 0 })
    assert.is_true(z ~= z)
  end)

  it("layouts and dtypes", function()
    local x = ploss.randn({ 2, 4, 6, 5 }, { dtype = "f64", seed = 75 })
    local y = H.random_labels({ 2, 6, 5 }, 4, { ignore = 0.1, ignore_index = 255 })
    for _, d in ipairs(DICE) do
      for _, v in ipairs {
        { "channels-last", H.relayout(x, "channels_last"), y },
        { "crop", x:narrow(3, 2, 4):narrow(4, 2, 3), y:narrow(2, 2, 4):narrow(3, 2, 3) },
        { "transposed", x:transpose(3, 4), y:transpose(2, 3) },
      } do
        local l, g = F[d.name .. "_fused"](v[2], v[3], { reduction = "none" })
        local lc, gc = F[d.name .. "_fused"](v[2]:contiguous(), v[3]:contiguous(), { reduction = "none" })
        H.assert_equal(l, lc, { what = d.name .. " " .. v[1] })
        H.assert_equal(g, gc, { what = d.name .. " " .. v[1] })
      end
      for _, dt in ipairs { "f32", "f16", "bf16" } do
        local xd = x:to(dt)
        local l, g = F[d.name .. "_fused"](xd, y)
        local lr, gr = F[d.name .. "_fused"](xd:to("f64"), y)
        H.assert_close(l, lr, { rtol = 1e-6, what = d.name .. " " .. dt })
        H.assert_close(g:to("f64"), gr, { rtol = H.tol[dt].rtol, atol = H.tol[dt].atol * 1e-2, what = d.name .. " " .. dt })
      end
    end
  end)

  it("bad input: an error naming the argument, nothing written", function()
    local x = ploss.randn({ 2, 3, 2, 2 }, { seed = 77 })
    local y = ploss.randint(0, 3, { 2, 2, 2 }, { seed = 78 })
    local loss = ploss.empty({})
    for _, d in ipairs(DICE) do
      H.expect_error(function() F[d.name](x, y, { class_weights = "sudre", weight = { 1, 2, 3 }, out = loss }) end,
        { "PLOSS_ERR_INVALID_ARGUMENT", "weight: class weights are given with class_weights = 'sudre'" }, loss)
      H.expect_error(function() F[d.name](x, y, { weight = { 1, 2 }, out = loss }) end,
        { "PLOSS_ERR_SHAPE", "weight: expected shape [3]" }, loss)
      H.expect_error(function() F[d.name](x, y, { p = 0 }) end, "opts.p: 0 is not a finite number > 0")
      H.expect_error(function() F[d.name](x, y, { smooth = -1 }) end, "opts.smooth: -1 is not a finite number >= 0")
      local yb = y:clone()
      yb:view(-1)[3] = 7
      H.expect_error(function() F[d.name](x, yb, { out = loss }) end, { "PLOSS_ERR_INVALID_LABEL", "class index 7" }, loss)
      local bad = ploss.empty({ 3 })
      H.expect_error(function() F[d.name](x, y, { reduction = "none", out = bad }) end, { "PLOSS_ERR_SHAPE", "opts.out: expected shape" },
        bad)
    end
  end)
end)

---------------------------------------------------------------------------------------
-- The binary soft Dice loss
---------------------------------------------------------------------------------------

-- Binary soft Dice from its formula: the reduced number, or the groups' losses ('none').
local function soft_dice_reference(x, y, opts)
  opts = opts or {}
  local pe, smooth = opts.p or 1, opts.smooth or 1
  local xv, yv = x:to("cpu", "f64"):contiguous():flat(), y:to("cpu", "f64"):contiguous():flat()
  local N = opts.per_sample and (x:dim() > 0 and x:size(1) or 1) or 1
  local per = N > 0 and #xv / N or 0
  local groups = {}
  for g = 1, N do
    local a, b = 0, 0
    for i = (g - 1) * per + 1, g * per do
      local s = sigmoid(xv[i])
      a = a + s * yv[i]
      b = b + s ^ pe + yv[i] ^ pe
    end
    groups[g] = 1 - (2 * a + smooth) / (b + smooth)
  end
  local red = opts.reduction or "mean"
  if red == "none" then return groups end
  local t = 0
  for _, v in ipairs(groups) do t = t + v end
  return red == "mean" and t / N or t
end

describe("SoftDiceLoss", function()
  it("by hand: logits 0, targets 1 0 1 / 0 0 1", function()
    -- s = 1/2: A = 3/2, B = 3 + 3, ℓ = 1 − 4/7; per sample: 1 − 3/4.5 and 1 − 2/3.5
    local x = ploss.zeros({ 2, 3 }, { dtype = "f64" })
    local y = ploss.tensor({ { 1, 0, 1 }, { 0, 0, 1 } }, { dtype = "f64" })
    H.assert_close(F.soft_dice(x, y), 3 / 7, { rtol = 1e-15 })
    H.assert_close(F.soft_dice(x, y, { reduction = "none" }), { 3 / 7 }, { rtol = 1e-15 })
    H.assert_close(F.soft_dice(x, y, { reduction = "none", per_sample = true }), { 1 / 3, 3 / 7 }, { rtol = 1e-15 })
    H.assert_close(F.soft_dice(x, y, { per_sample = true, reduction = "sum" }), 1 / 3 + 3 / 7, { rtol = 1e-15 })
    -- ∂ℓ/∂x = num·s(1 − s)/den² − 2y·s(1 − s)/den = 1/49 − y/14
    H.assert_close(F.soft_dice_backward(x, y), { 1 / 49 - 1 / 14, 1 / 49, 1 / 49 - 1 / 14, 1 / 49, 1 / 49, 1 / 49 - 1 / 14 },
      { rtol = 1e-14 })
  end)

  it("against the formula: shapes, p, smooth, per_sample, reductions, soft targets", function()
    for si, sizes in ipairs { { 4, 3, 5 }, { 6 }, {}, { 2, 3, 4, 5 }, { 3, 1 } } do
      local x = ploss.randn(sizes, { dtype = "f64", seed = 400 + si, std = 2 })
      local y = ploss.rand(sizes, { dtype = "f64", seed = 500 + si })
      for _, pe in ipairs { 1, 2, 0.5 } do
        for _, per_sample in ipairs { false, true } do
          for _, red in ipairs { "mean", "sum", "none" } do
            local o = { p = pe, smooth = pe == 2 and 0.25 or 1, per_sample = per_sample, reduction = red }
            H.assert_close(as_list(F.soft_dice(x, y, o)), as_list(soft_dice_reference(x, y, o)), { rtol = 1e-12,
              what = string.format("[%s] p %g per_sample %s %s", table.concat(sizes, "x"), pe, tostring(per_sample), red) })
          end
        end
      end
    end
  end)

  it("central differences in f64 (also groups of a few elements)", function()
    local x = ploss.randn({ 3, 5 }, { dtype = "f64", seed = 81 })
    local y = ploss.rand({ 3, 5 }, { dtype = "f64", seed = 82 })
    for _, pe in ipairs { 1, 2, 0.6 } do
      for _, per_sample in ipairs { false, true } do
        for _, red in ipairs { "mean", "sum", "none" } do
          local o = { p = pe, per_sample = per_sample, reduction = red }
          local gout = red == "none" and ploss.randn({ per_sample and 3 or 1 }, { dtype = "f64", seed = 83 }) or nil
          H.gradcheck(H.loss_objective("soft_dice", y, o, gout), x, F.soft_dice_backward(x, y, gout, o),
            { atol = 1e-10, what = string.format("p %g per_sample %s %s", pe, tostring(per_sample), red) })
        end
      end
    end
  end)

  it("smoothing in the numerator too: an empty prediction of an empty target is a perfect score", function()
    local x = ploss.full({ 2, 8 }, -40, { dtype = "f64" })
    local y = ploss.zeros({ 2, 8 }, { dtype = "f64" })
    assert.is_true(F.soft_dice(x, y) < 1e-15)
    assert.is_true(F.soft_dice(x, y, { per_sample = true }) < 1e-15)
  end)

  it("labels are raised to p (soft labels, p = 2)", function()
    local x = ploss.randn({ 2, 6 }, { dtype = "f64", seed = 84 })
    local y = ploss.rand({ 2, 6 }, { dtype = "f64", seed = 85 })
    local xv, yv = x:flat(), y:flat()
    local a, b, b_unraised = 0, 0, 0
    for i = 1, #xv do
      local s = sigmoid(xv[i])
      a, b, b_unraised = a + s * yv[i], b + s * s + yv[i] ^ 2, b_unraised + s * s + yv[i]
    end
    H.assert_close(F.soft_dice(x, y, { p = 2 }), 1 - (2 * a + 1) / (b + 1), { rtol = 1e-14 })
    assert.is_true(math.abs((1 - (2 * a + 1) / (b_unraised + 1)) - F.soft_dice(x, y, { p = 2 })) > 1e-3)
  end)

  it("fused = forward and backward; scale; criterion; in place; layouts; dtypes; empty", function()
    local x = ploss.randn({ 3, 4, 5 }, { dtype = "f64", seed = 86 })
    local y = ploss.rand({ 3, 4, 5 }, { dtype = "f64", seed = 87 })
    for _, o in ipairs { {}, { per_sample = true, reduction = "none" }, { reduction = "sum", p = 2 } } do
      local l, g = F.soft_dice_fused(x, y, o)
      H.assert_equal(as_list(l), as_list(F.soft_dice(x, y, o)))
      H.assert_equal(g, F.soft_dice_backward(x, y, nil, o))
      H.check_fused_scale("soft_dice", x, y, o, { o.per_sample and 3 or 1 }, o.reduction or "mean", 1e-14)
      local cl, cg = ploss.SoftDiceLoss(o)(x, y)
      H.assert_equal(as_list(cl), as_list(l))
      H.assert_equal(cg, g)
      -- a transposed input and target: the values of the contiguous copies
      local xt, yt = x:transpose(2, 3), y:transpose(2, 3)
      local lt, gt = F.soft_dice_fused(xt, yt, o)
      local lc, gc = F.soft_dice_fused(xt:contiguous(), yt:contiguous(), o)
      H.assert_equal(as_list(lt), as_list(lc))
      H.assert_equal(gt, gc)
    end
    local l, g = F.soft_dice_fused(x, y)
    H.check_inplace_fused("soft_dice", x:clone(), y, {}, l, g, "soft_dice")
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local xd = x:to(dt)
      local ld, gd = F.soft_dice_fused(xd, y:to(dt))
      local lr, gr = F.soft_dice_fused(xd:to("f64"), y:to(dt):to("f64"))
      H.assert_close(ld, lr, { rtol = 1e-6, what = dt })
      H.assert_close(gd:to("f64"), gr, { rtol = H.tol[dt].rtol, atol = H.tol[dt].atol * 1e-2, what = dt })
    end
    local x0, y0 = ploss.empty({ 0, 4 }), ploss.empty({ 0, 4 })
    assert.are.equal(0, F.soft_dice(x0, y0))
    local z = F.soft_dice(x0, y0, { smooth = 0 })
    assert.is_true(z ~= z)
  end)

  it("bad input: an error naming the argument, nothing written", function()
    local x = ploss.randn({ 2, 3 }, { seed = 88 })
    local y = ploss.rand({ 2, 3 }, { seed = 89 })
    local loss = ploss.empty({})
    H.expect_error(function() F.soft_dice(x, ploss.zeros({ 2, 3 }, { dtype = "i64" }), { out = loss }) end,
      { "PLOSS_ERR_DTYPE", "target: expected float targets" }, loss)
    H.expect_error(function() F.soft_dice(x, ploss.rand({ 3, 2 }), { out = loss }) end,
      { "PLOSS_ERR_SHAPE", "target" }, loss)
    H.expect_error(function() F.soft_dice(x, y, { reduction = "none", out = ploss.empty({ 2 }) }) end,
      { "PLOSS_ERR_SHAPE", "opts.out: expected shape [1] (one value for the batch)" })
    H.expect_error(function() F.soft_dice(x, y, { reduction = "none", per_sample = true, out = ploss.empty({ 1 }) }) end,
      { "PLOSS_ERR_SHAPE", "opts.out: expected shape [2] (one value per sample" })
    H.expect_error(function() F.soft_dice(x, y, { p = -1 }) end, "opts.p: -1 is not a finite number > 0")
    H.expect_error(function() F.soft_dice_fused(x, y, { grad_input = y }) end, { "PLOSS_ERR_ALIAS", "grad_input" })
  end)
end)

---------------------------------------------------------------------------------------
-- The affinity field loss
---------------------------------------------------------------------------------------

-- The affinity field loss written out: the reduced number or the N×H×W map ('none').
local function field_reference(x, y, opts)
  opts = opts or {}
  local kappa, ls, ld = opts.kl_margin or 3, opts.lambda_same or 1, opts.lambda_diff or 1
  local ignore, ref = opts.ignore_index or 255, opts.divergence == "reference"
  local N, C, Hh, W = x:size(1), x:size(2), x:size(3), x:size(4)
  local rows = H.sample_rows(x)
  local labels = y:to("cpu", "i64"):contiguous():flat()
  local probs = {}
  for q = 1, #rows do probs[q] = softmax(rows[q]) end
  local map, total, valid = {}, 0, 0
  for n = 1, N do
    for h = 1, Hh do
      for w = 1, W do
        local u = ((n - 1) * Hh + h - 1) * W + w
        local l = 0
        if labels[u] ~= ignore then
          valid = valid + 1
          for dh = -1, 1 do
            for dw = -1, 1 do
              local hh, ww = h + dh, w + dw
              if (dh ~= 0 or dw ~= 0) and hh >= 1 and hh <= Hh and ww >= 1 and ww <= W then
                local v = ((n - 1) * Hh + hh - 1) * W + ww
                if labels[v] ~= ignore then
                  local D = 0
                  for c = 1, C do
                    local pu, pv = probs[u][c], probs[v][c]
                    D = D + (ref and pv * (pv - pu) or pv * (math.log(pv) - math.log(pu)))
                  end
                  l = l + (labels[u] == labels[v] and ls * D or ld * math.max(0, kappa - D))
                end
              end
            end
          end
        end
        map[u] = l / 8
        total = total + l / 8
      end
    end
  end
  local red = opts.reduction or "mean"
  if red == "none" then return map end
  return red == "mean" and total / valid or total
end

-- The contract of a 2-D window loss (name "affinity_field" or "affinity", Crit its
-- criterion) on x (f64) and labels y: for each reduction with opts, fused = forward and
-- backward and the criterion bitwise, the fused scale, and channels-last, cropped and
-- transposed views bitwise their contiguous copies; with the default options in place
-- against out of place, f32/f16/bf16 against f64, and every pixel labelled `ignored` (a
-- NaN mean, a zero gradient, a zero sum).  Returns the default options' fused gradient.
local function check_window_contract(name, Crit, x, y, opts, ignored, scale_tol)
  local fused, plain, backward = F[name .. "_fused"], F[name], F[name .. "_backward"]
  for _, red in ipairs { "mean", "sum", "none" } do
    local o = { reduction = red }
    for k, v in pairs(opts) do o[k] = v end
    local l, g = fused(x, y, o)
    H.assert_equal(as_list(l), as_list(plain(x, y, o)))
    H.assert_equal(g, backward(x, y, nil, o))
    H.check_fused_scale(name, x, y, o, y:size(), red, scale_tol)
    local cl, cg = Crit(o)(x, y)
    H.assert_equal(as_list(cl), as_list(l))
    H.assert_equal(cg, g)
    for _, v in ipairs {
      { "channels-last", H.relayout(x, "channels_last"), y },
      { "crop", x:narrow(3, 2, 3):narrow(4, 2, 4), y:narrow(2, 2, 3):narrow(3, 2, 4) },
      { "transposed", x:transpose(3, 4), y:transpose(2, 3) },
    } do
      local lv, gv = fused(v[2], v[3], o)
      local lc, gc = fused(v[2]:contiguous(), v[3]:contiguous(), o)
      H.assert_equal(as_list(lv), as_list(lc), { what = v[1] })
      H.assert_equal(gv, gc, { what = v[1] })
    end
  end
  local l, g = fused(x, y)
  H.check_inplace_fused(name, x:clone(), y, {}, l, g, name)
  for _, dt in ipairs { "f32", "f16", "bf16" } do
    local xd = x:to(dt)
    local ld, gd = fused(xd, y)
    local lr, gr = fused(xd:to("f64"), y)
    H.assert_close(ld, lr, { rtol = 1e-6, what = dt })
    H.assert_close(gd:to("f64"), gr, { rtol = H.tol[dt].rtol, atol = H.tol[dt].atol * 1e-2, what = dt })
  end
  local yi = ploss.full(y:size(), ignored, { dtype = "i64" })
  local li, gi = fused(x, yi)
  assert.is_true(li ~= li) -- 'mean' of no valid pixel
  for _, v in ipairs(gi:flat()) do assert.are.equal(0, v) end
  assert.are.equal(0, plain(x, yi, { reduction = "sum" }))
  return g
end

describe("AffinityFieldLoss", function()
  it("a class of probability 0 (a logit of −∞) adds nothing to the KL divergence, 0·log 0 = 0", function()
    -- p_0 = (1/2, 1/2, 0) and p_1 = (1/3, 1/3, 1/3): KL(p_0 ‖ p_1) = ln 1.5, KL(p_1 ‖ p_0) = ∞
    local inf = math.huge
    local x = ploss.tensor({ { { { 0, 0 } }, { { 0, 0 } }, { { -inf, 0 } } } }, { dtype = "f64" })
    local diff = ploss.tensor({ { { 0, 1 } } }, { dtype = "i64" })
    -- pixel 0's pair is past the margin (D = ∞): 0; pixel 1's: (3 − ln 1.5)/8
    H.assert_close(F.affinity_field(x, diff, { reduction = "none" }), { { { 0, (3 - math.log(1.5)) / 8 } } },
      { rtol = 1e-14 })
    -- the gradient is the limit's: the same as with a logit of −1e300 (probability 0 as well)
    local xl = ploss.tensor({ { { { 0, 0 } }, { { 0, 0 } }, { { -1e300, 0 } } } }, { dtype = "f64" })
    local _, g = F.affinity_field_fused(x, diff)
    local _, gl = F.affinity_field_fused(xl, diff)
    H.assert_close(g, gl, { rtol = 1e-14, atol = 0 })
    -- both pixels without class 3, the same label: KL as between (1/2, 1/2) and (0.8, 0.2)
    local x2 = ploss.tensor({ { { { 0, math.log(0.8) } }, { { 0, math.log(0.2) } }, { { -inf, -inf } } } },
      { dtype = "f64" })
    local k10 = 0.8 * math.log(1.6) + 0.2 * math.log(0.4)
    local k01 = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(2.5)
    local same = ploss.tensor({ { { 0, 0 } } }, { dtype = "i64" })
    H.assert_close(F.affinity_field(x2, same, { reduction = "none" }), { { { k10 / 8, k01 / 8 } } }, { rtol = 1e-14 })
    local _, g2 = F.affinity_field_fused(x2, same)
    for _, v in ipairs(g2:flat()) do assert.is_true(v == v and math.abs(v) < inf, "finite gradient") end
    assert.are.same({ 0, 0 }, { g2:flat()[5], g2:flat()[6] }) -- the masked class's entries
  end)

  it("by hand: two pixels side by side", function()
    -- p = (1/2, 1/2) and (0.8, 0.2): KL(p_1 ‖ p_0) = 0.8·ln 1.6 + 0.2·ln 0.4, KL(p_0 ‖ p_1) =
    -- 0.5·ln(0.5/0.8) + 0.5·ln 2.5; each pixel has the other as its only neighbour
    local x = ploss.tensor({ { { { 0, math.log(0.8) } }, { { 0, math.log(0.2) } } } }, { dtype = "f64" })
    local k10 = 0.8 * math.log(1.6) + 0.2 * math.log(0.4)
    local k01 = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(2.5)
    local same = ploss.tensor({ { { 0, 0 } } }, { dtype = "i64" })
    H.assert_close(F.affinity_field(x, same, { reduction = "none" }), { { { k10 / 8, k01 / 8 } } }, { rtol = 1e-14 })
    H.assert_close(F.affinity_field(x, same), (k10 + k01) / 16, { rtol = 1e-14 })
    local diff = ploss.tensor({ { { 0, 1 } } }, { dtype = "i64" })
    H.assert_close(F.affinity_field(x, diff, { reduction = "sum", lambda_diff = 2 }), 2 * ((3 - k10) + (3 - k01)) / 8,
      { rtol = 1e-14 })
    -- the reference divergence: Σ p_v·(p_v − p_u)
    local r10 = 0.8 * 0.3 + 0.2 * -0.3
    local r01 = 0.5 * -0.3 + 0.5 * 0.3
    H.assert_close(F.affinity_field(x, same, { reduction = "none", divergence = "reference" }),
      { { { r10 / 8, r01 / 8 } } }, { rtol = 1e-14, atol = 1e-17 })
    -- past the margin the hinge is 0
    assert.are.equal(0, F.affinity_field(x, diff, { kl_margin = 0.1 }))
  end)

  it("against the formula: options, reductions, ignored pixels, borders", function()
    for si, sizes in ipairs { { 2, 3, 4, 5 }, { 1, 4, 1, 6 }, { 3, 2, 3, 1 }, { 1, 5, 5, 5 } } do
      local x = ploss.randn(sizes, { dtype = "f64", seed = 900 + si, std = 1.5 })
      H.seed(950 + si)
      local y = H.random_labels({ sizes[1], sizes[3], sizes[4] }, sizes[2], { ignore = 0.2, ignore_index = 255 })
      for _, dv in ipairs { "kl", "reference" } do
        for _, red in ipairs { "mean", "sum", "none" } do
          for _, o in ipairs { { kl_margin = 3 }, { kl_margin = 0.3, lambda_same = 0.5, lambda_diff = 2 } } do
            o = merge(o, { divergence = dv, reduction = red })
            local got = F.affinity_field(x, y, o)
            H.assert_close(as_list(got), as_list(field_reference(x, y, o)), { rtol = 1e-12, atol = 1e-16,
              what = string.format("%s %s %s κ %g", table.concat(sizes, "x"), dv, red, o.kl_margin) })
          end
        end
      end
    end
  end)

  it("central differences in f64", function()
    local x = ploss.randn({ 2, 3, 3, 4 }, { dtype = "f64", seed = 97 })
    local y = H.random_labels({ 2, 3, 4 }, 3, { ignore = 0.15, ignore_index = 255 })
    for _, dv in ipairs { "kl", "reference" } do
      for _, red in ipairs { "mean", "sum", "none" } do
        for _, kappa in ipairs { 3, 0.4 } do
          local o = { divergence = dv, reduction = red, kl_margin = kappa, lambda_same = 0.7, lambda_diff = 1.3 }
          local gout = red == "none" and ploss.randn({ 2, 3, 4 }, { dtype = "f64", seed = 98 }) or nil
          H.gradcheck(H.loss_objective("affinity_field", y, o, gout), x, F.affinity_field_backward(x, y, gout, o),
            { atol = 1e-8, what = string.format("%s %s κ %g", dv, red, kappa) }) -- sums of ~24 pixels: FD noise ~1e-9
        end
      end
    end
  end)

  it("a pair with an ignored pixel adds nothing (the reference adds λ_diff·κ to the value)", function()
    -- a 2×2 image, one pixel ignored, the others of one label, logits 0: every D = 0, so the
    -- loss is exactly 0 here where the reference gives 0.75
    local x = ploss.zeros({ 1, 3, 2, 2 }, { dtype = "f64" })
    local y = ploss.tensor({ { { 1, 1 }, { 1, 255 } } }, { dtype = "i64" })
    local l, g = F.affinity_field_fused(x, y)
    assert.are.equal(0, l)
    for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
    -- the ignored pixel's logits change nothing
    local x2 = x:clone()
    x2:narrow(3, 2, 1):narrow(4, 2, 1):copy(ploss.randn({ 1, 3, 1, 1 }, { dtype = "f64", seed = 99 }))
    assert.are.equal(0, F.affinity_field(x2, y))
  end)

  it("fused = forward and backward; scale; criterion; in place; layouts; dtypes; all ignored", function()
    local x = ploss.randn({ 2, 4, 5, 6 }, { dtype = "f64", seed = 101 })
    local y = H.random_labels({ 2, 5, 6 }, 4, { ignore = 0.1, ignore_index = 255 })
    check_window_contract("affinity_field", ploss.AffinityFieldLoss, x, y, { kl_margin = 1 }, 255, 1e-14)
  end)

  it("bad input: an error naming the argument, nothing written", function()
    local x = ploss.randn({ 2, 3, 2, 2 }, { seed = 103 })
    local y = ploss.randint(0, 3, { 2, 2, 2 }, { seed = 104 })
    local loss = ploss.empty({})
    H.expect_error(function() F.affinity_field(ploss.randn({ 2, 3, 4, 1, 2 }), ploss.zeros({ 2, 4, 1, 2 }, { dtype = "i64" }), { out = loss }) end,
      { "PLOSS_ERR_SHAPE", "input: expected N×C×H×W logits" }, loss)
    local yb = y:clone()
    yb:view(-1)[4] = 3
    H.expect_error(function() F.affinity_field(x, yb, { out = loss }) end, { "PLOSS_ERR_INVALID_LABEL", "class index 3" }, loss)
    local bad = ploss.empty({ 2, 2 })
    H.expect_error(function() F.affinity_field(x, y, { reduction = "none", out = bad }) end, { "PLOSS_ERR_SHAPE", "loss" }, bad)
    H.expect_error(function() F.affinity_field(x, y, { kl_margin = -1 }) end, "opts.kl_margin: -1 is not a finite number >= 0")
    H.expect_error(function() ploss.AffinityFieldLoss { divergence = "js" } end, "divergence: 'js' is not one of")
  end)
end)

---------------------------------------------------------------------------------------
-- The affinity loss (local context prior)
---------------------------------------------------------------------------------------

local function softplus(a) return math.max(a, 0) + math.log(1 + math.exp(-math.abs(a))) end

-- The affinity loss the way the reference unfolds it: every k×k window, every ordered pair
-- of its cells (a = b included), pairs with an ignored cell left out.  The reduced number,
-- or the per-pixel map ('none': each pair's term on its first cell).
local function window_reference(x, y, opts)
  opts = opts or {}
  local k, ignore = opts.kernel_size or 3, opts.ignore_index or -100
  local N, Hh, W = x:size(1), x:size(3), x:size(4)
  local rows = H.sample_rows(x)
  local labels = y:to("cpu", "i64"):contiguous():flat()
  local map, total, count = {}, 0, 0
  for q = 1, #rows do map[q] = 0 end
  for n = 1, N do
    for i = 1, Hh - k + 1 do
      for j = 1, W - k + 1 do
        local cells = {}
        for a = 0, k - 1 do
          for b = 0, k - 1 do cells[#cells + 1] = ((n - 1) * Hh + i - 1 + a) * W + j + b end
        end
        for _, pa in ipairs(cells) do
          for _, pb in ipairs(cells) do
            if labels[pa] ~= ignore and labels[pb] ~= ignore then
              local A = 0
              for c = 1, #rows[pa] do A = A + rows[pa][c] * rows[pb][c] end
              local t = softplus(A) - (labels[pa] == labels[pb] and A or 0)
              map[pa] = map[pa] + t
              total = total + t
              count = count + 1
            end
          end
        end
      end
    end
  end
  local red = opts.reduction or "mean"
  if red == "none" then return map end
  return red == "mean" and total / count or total
end

describe("segmentation losses: the edge cases of a user's review", function()
  it("class weights given as a list: finite, and >= 0 for the Dice losses (PyTorch's cross-entropy takes negative ones)", function()
    local x, y = ploss.randn({ 2, 3, 4, 4 }, { dtype = "f64", seed = 5 }), ploss.randint(0, 3, { 2, 4, 4 }, { seed = 6 })
    for _, name in ipairs { "generalized_soft_dice", "batch_soft_dice", "cross_entropy" } do
      H.expect_error(function() F[name](x, y, { weight = { 1, 0 / 0, 3 } }) end, "weight: the weight nan of class 1")
      H.expect_error(function() F[name](x, y, { weight = { 1, 2, math.huge } }) end, "weight: the weight inf of class 2")
      if name == "cross_entropy" then
        H.assert_close(F[name](x, y, { weight = { 1, -2, 3 } }),
          F[name](x, y, { weight = ploss.tensor({ 1, -2, 3 }, { dtype = "f64" }) }), { rtol = 1e-15 })
      else
        H.expect_error(function() F[name](x, y, { weight = { 1, -2, 3 } }) end, "weight: the weight -2 of class 1 is not a finite number >= 0")
      end
    end
  end)
end)

describe("AffinityLoss", function()
  it("by hand: one 2×2 window of one class", function()
    -- cells 1, 0, 0, 2 (and 0 for the second class) of one label: Σ over the 16 ordered
    -- pairs of softplus(−x_a·x_b):
    -- products 1 (once), 2 (twice), 4 (once), 0 (12 times)
    local x = ploss.tensor({ { { { 1, 0 }, { 0, 2 } }, { { 0, 0 }, { 0, 0 } } } }, { dtype = "f64" }) -- class 2: 0
    local y = ploss.zeros({ 1, 2, 2 }, { dtype = "i64" })
    local want = softplus(-1) + 2 * softplus(-2) + softplus(-4) + 12 * math.log(2)
    H.assert_close(F.affinity(x, y, { kernel_size = 2, reduction = "sum" }), want, { rtol = 1e-14 })
    H.assert_close(F.affinity(x, y, { kernel_size = 2 }), want / 16, { rtol = 1e-14 })
    -- different labels on the diagonal: T = 0 for the pairs across them
    local y2 = ploss.tensor({ { { 0, 1 }, { 1, 0 } } }, { dtype = "i64" })
    local want2 = 0
    local v, lab = { 1, 0, 0, 2 }, { 0, 1, 1, 0 }
    for a = 1, 4 do
      for b = 1, 4 do
        local A = v[a] * v[b]
        want2 = want2 + softplus(A) - (lab[a] == lab[b] and A or 0)
      end
    end
    H.assert_close(F.affinity(x, y2, { kernel_size = 2, reduction = "sum" }), want2, { rtol = 1e-14 })
    -- an image smaller than the window has no pair
    assert.are.equal(0, F.affinity(x, y, { kernel_size = 3, reduction = "sum" }))
  end)

  it("against the unfolded windows: k, reductions, ignored pixels", function()
    for si, sizes in ipairs { { 2, 3, 4, 5 }, { 1, 4, 3, 7 }, { 2, 2, 6, 3 } } do
      local x = ploss.randn(sizes, { dtype = "f64", seed = 1300 + si, std = 0.7 })
      H.seed(1350 + si)
      local y = H.random_labels({ sizes[1], sizes[3], sizes[4] }, sizes[2], { ignore = 0.2 })
      for _, k in ipairs { 1, 2, 3 } do
        for _, red in ipairs { "mean", "sum", "none" } do
          local o = { kernel_size = k, reduction = red }
          local want = window_reference(x, y, o)
          local got = F.affinity(x, y, o)
          if red == "none" then -- each pair's term on its first cell, in both
            H.assert_close(got:flat(), want, { rtol = 1e-12, atol = 1e-14, what = table.concat(sizes, "x") .. " k " .. k })
          else
            H.assert_close(got, want, { rtol = 1e-12, what = table.concat(sizes, "x") .. " k " .. k .. " " .. red })
          end
        end
      end
    end
  end)

  it("central differences in f64", function()
    local x = ploss.randn({ 2, 3, 4, 5 }, { dtype = "f64", seed = 1401, std = 0.7 })
    local y = H.random_labels({ 2, 4, 5 }, 3, { ignore = 0.2 })
    for _, k in ipairs { 1, 2, 3 } do
      for _, red in ipairs { "mean", "sum", "none" } do
        local o = { kernel_size = k, reduction = red }
        local gout = red == "none" and ploss.randn({ 2, 4, 5 }, { dtype = "f64", seed = 1402 }) or nil
        H.gradcheck(H.loss_objective("affinity", y, o, gout), x, F.affinity_backward(x, y, gout, o),
          { h = 1e-4, atol = 1e-8, what = "k " .. k .. " " .. red })
      end
    end
  end)

  it("fused = forward and backward; scale; criterion; in place; layouts; dtypes; ignored pixels", function()
    local x = ploss.randn({ 2, 4, 5, 6 }, { dtype = "f64", seed = 1403 })
    local y = H.random_labels({ 2, 5, 6 }, 4, { ignore = 0.1 })
    local g = check_window_contract("affinity", ploss.AffinityLoss, x, y, {}, -100, 1e-13)
    -- ignored pixels: a zero gradient, and their logits change nothing
    local yv = y:flat()
    local gv = g:permute(1, 3, 4, 2):contiguous():flat()
    for i = 1, #yv do
      if yv[i] == -100 then for c = 1, 4 do assert.are.equal(0, gv[(i - 1) * 4 + c]) end end
    end
  end)

  it("N×C×W and N×C inputs: images of one row and of one pixel", function()
    local x = ploss.randn({ 2, 3, 7 }, { dtype = "f64", seed = 1406 })
    local y = H.random_labels({ 2, 7 }, 3, { ignore = 0.2 })
    for _, name in ipairs { "affinity", "affinity_field" } do
      for _, o in ipairs { { reduction = "none", ignore_index = -100 }, { ignore_index = -100 } } do
        local l, g = F[name .. "_fused"](x, y, o)
        local l4, g4 = F[name .. "_fused"](x:view({ 2, 3, 1, 7 }), y:view({ 2, 1, 7 }), o)
        H.assert_equal(as_list(l), as_list(l4), { what = name })
        H.assert_equal(g, g4:view({ 2, 3, 7 }), { what = name })
      end
      local x2, y2 = ploss.randn({ 4, 3 }, { dtype = "f64" }), ploss.randint(0, 3, { 4 })
      local l2, g2 = F[name .. "_fused"](x2, y2, { reduction = "sum" })
      local l4, g4 = F[name .. "_fused"](x2:view({ 4, 3, 1, 1 }), y2:view({ 4, 1, 1 }), { reduction = "sum" })
      H.assert_equal(l2, l4, { what = name .. " N×C" })
      H.assert_equal(g2, g4:view({ 4, 3 }), { what = name .. " N×C" })
    end
  end)

  it("bad input: an error naming the argument, nothing written", function()
    local x = ploss.randn({ 2, 3, 3, 3 }, { seed = 1404 })
    local y = ploss.randint(0, 3, { 2, 3, 3 }, { seed = 1405 })
    local loss = ploss.empty({})
    H.expect_error(function() F.affinity(ploss.randn({ 2, 3, 4, 1, 2 }), ploss.zeros({ 2, 4, 1, 2 }, { dtype = "i64" }), { out = loss }) end,
      { "PLOSS_ERR_SHAPE", "input: expected N×C×H×W logits" }, loss)
    local yb = y:clone()
    yb:view(-1)[5] = 3
    H.expect_error(function() F.affinity(x, yb, { out = loss }) end, { "PLOSS_ERR_INVALID_LABEL", "class index 3" }, loss)
    H.expect_error(function() F.affinity(x, y, { kernel_size = 8 }) end, "opts.kernel_size: 8 is not an integer in [1, 7]")
    H.expect_error(function() F.affinity(x, y, { kernel_size = 0 }) end, "opts.kernel_size: 0")
  end)
end)
