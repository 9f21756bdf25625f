-- Multi-class margin loss spec (suite 'cpu') on the CPU backend.
--  * PyTorch's documented example and hand-derivable values (p, margin, weight);
--  * against a Lua transcription of PyTorch's multi_margin_loss kernel (the weight after the
--    power, 'mean' over the samples), every reduction and option, N×C and N×C×d…, f64 and
--    f32, criterion and F, every pass;
--  * central differences in f64 away from the hinges;
--  * f16 / bf16 against the f64 values of the same rounded inputs;
--  * a NaN score makes the loss NaN; labels have no ignore_index; the Torch7 name.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

-- PyTorch's kernel on rows[i] (sample order) and 0-based labels: the loss (a number, or a
-- list for 'none') and the gradient rows for the upstream gradient `up`.
local function reference(rows, labels, o, up)
  local red, p, m, w = o.reduction or "mean", o.p or 1, o.margin or 1, o.weight
  local ls, sum, grads = {}, 0, {}
  for i, r in ipairs(rows) do
    local y, C = labels[i] + 1, #r
    local wy = w and w[y] or 1
    local s, g = 0, {}
    for j = 1, C do
      g[j] = 0
      local z = m - r[y] + r[j]
      if j ~= y and z > 0 then
        s = s + (p == 1 and z or z * z) * wy
        g[j] = (p == 1 and 1 or 2 * z) * wy / C
        g[y] = (g[y] or 0)
      end
    end
    local gy = 0
    for j = 1, C do if j ~= y then gy = gy - g[j] end end
    g[y] = gy
    ls[i] = s / C
    sum = sum + ls[i]
    grads[i] = g
  end
  local n = #rows
  for i, g in ipairs(grads) do
    local om = red == "none" and up[i] or red == "mean" and up / n or up
    for j = 1, #g do g[j] = g[j] * om end
  end
  if red == "none" then return ls, grads end
  return red == "mean" and sum / n or sum, grads
end

local function flat_rows(rows)
  local out = {}
  for _, r in ipairs(rows) do for _, v in ipairs(r) do out[#out + 1] = v end end
  return out
end

-- Scores whose hinges z_j = m − x_y + x_j stay at least 0.01 away from 0 (for the
-- finite differences and the f32 comparison): the scores on a grid of 0.1 plus 0.03·j.
local function scores(sizes, margin, dtype, seed)
  H.seed(seed)
  local v = ploss.randint(-20, 20, sizes, { dtype = "i64" }):flat()
  local out = {}
  local C, inner = sizes[2], 1
  for d = 3, #sizes do inner = inner * sizes[d] end
  for k, a in ipairs(v) do
    local j = math.floor((k - 1) / inner) % C
    out[k] = a * 0.1 + 0.03 * j + (margin % 0.1)
  end
  return ploss.tensor(out, { dtype = "f64", size = sizes }):to("cpu", dtype)
end

describe("multi_margin_loss by hand", function()
  it("PyTorch's documented example: 0.3250", function()
    local x = ploss.tensor({ { 0.1, 0.2, 0.4, 0.8 } }, { dtype = "f64" })
    local y = ploss.tensor({ 3 }, { dtype = "i64" })
    H.assert_close(F.multi_margin_loss(x, y), 0.325, { rtol = 1e-15 })
    local l, g = F.multi_margin_loss_fused(x, y, { reduction = "sum" })
    H.assert_close(l, 0.325, { rtol = 1e-15 })
    H.assert_close(g, { { 0.25, 0.25, 0.25, -0.75 } }, { rtol = 1e-15 })
  end)

  it("p = 2, margin, the weight of the target's class after the power, 'mean' over the samples", function()
    local x = ploss.tensor({ { 0.1, 0.2, 0.4, 0.8 }, { 1, 0.5, -1, 2 } }, { dtype = "f64" })
    local y = ploss.tensor({ 3, 0 }, { dtype = "i64" })
    -- row 1: z = (−0.2, −0.1, 0.1), w_3 = 4: 4·0.01/4; row 2: z = (0, −1.5, 1.5), w_0 = 1: 2.25/4
    local o = { p = 2, margin = 0.5, weight = { 1, 2, 3, 4 } }
    H.assert_close(F.multi_margin_loss(x, y, o), (0.01 + 0.5625) / 2, { rtol = 1e-6 })
    o.weight = ploss.tensor({ 1, 2, 3, 4 }, { dtype = "f64" })
    o.reduction = "none"
    local l, g = F.multi_margin_loss_fused(x, y, o)
    H.assert_close(l, { 0.01, 0.5625 }, { rtol = 1e-13 })
    H.assert_close(g, { { 0, 0, 0.2, -0.2 }, { -0.75, 0, 0, 0.75 } }, { rtol = 1e-13, atol = 1e-16 })
  end)

  it("one sample of C scores takes its label as a 0-d or a [1] target (PyTorch's 'none' loss then [1])", function()
    local x = ploss.tensor({ 0.1, 0.2, 0.4, 0.8 }, { dtype = "f64" })
    for _, y in ipairs { ploss.tensor(3, { dtype = "i64" }), ploss.tensor({ 3 }, { dtype = "i32" }) } do
      H.assert_close(F.multi_margin_loss(x, y), 0.325, { rtol = 1e-15 })
      local crit = ploss.MultiMarginLoss { reduction = "none" }
      local l, g = crit(x, y)
      assert.are.same(y:dim() == 0 and {} or { 1 }, l:size())
      H.assert_close(l, 0.325, { rtol = 1e-15 })
      H.assert_close(g, { 0.25, 0.25, 0.25, -0.75 }, { rtol = 1e-15 })
      local up = y:dim() == 0 and ploss.tensor(2, { dtype = "f64" }) or ploss.tensor({ 2 }, { dtype = "f64" })
      H.assert_close(crit:backward(x, y, up), { 0.5, 0.5, 0.5, -1.5 }, { rtol = 1e-15 })
    end
    -- cross-entropy, as PyTorch's, takes the 0-d form only
    H.expect_error(function() F.cross_entropy(x, ploss.tensor({ 3 }, { dtype = "i64" })) end,
      "target: expected a 0-d tensor (a class index; the input is one sample of 4 classes")
  end)

  it("a NaN score makes the sample's loss NaN (PyTorch's max would drop it); other rows unchanged", function()
    local x = ploss.tensor({ { 0.1, 0 / 0, 0.4 }, { 1, 0.5, -1 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 0 }, { dtype = "i64" })
    local l = F.multi_margin_loss(x, y, { reduction = "none" }):flat()
    assert.is_true(l[1] ~= l[1])
    H.assert_close(l[2], 0.5 / 3, { rtol = 1e-15 })
  end)

  it("a NaN upstream gradient reaches only the rows with an active hinge (PyTorch's kernel adds nothing else)", function()
    -- row 1: 1 − 5 + x_j < 0 for every j, inactive; row 2: z = 0.5 for classes 1 and 2
    local x = ploss.tensor({ { 0.1, 0.2, 5 }, { 0.5, 0, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 2, 0 }, { dtype = "i64" })
    local g = F.multi_margin_loss_backward(x, y, ploss.tensor({ 0 / 0, 2 }, { dtype = "f64" }), { reduction = "none" })
    H.assert_close(g, { { 0, 0, 0 }, { -4 / 3, 2 / 3, 2 / 3 } }, { rtol = 1e-15 })
    local m = ploss.MultiMarginLoss {}:backward(x, y, 0 / 0):totable()
    assert.are.same({ 0, 0, 0 }, m[1])
    for j = 1, 3 do assert.is_true(m[2][j] ~= m[2][j]) end
  end)

  it("no ignore_index: -100 is an invalid label; Torch7's MultiMarginCriterion", function()
    local x = ploss.randn({ 2, 3 }, { dtype = "f64" })
    H.expect_error(function()
      local l = F.multi_margin_loss(x, ploss.tensor({ 0, -100 }, { dtype = "i64" }))
      return l
    end, "target: class index -100 at sample (n = 1, s = 0) is outside [0, 3);")
    -- the most negative i64 is no ignore_index in disguise either
    H.expect_error(function()
      local l = F.multi_margin_loss(x, ploss.tensor({ -2 ^ 63, 0 }, { dtype = "i64" }))
      return l
    end, "target: class index -9223372036854775808 at sample (n = 0, s = 0) is outside [0, 3);")
    H.expect_error(function()
      local l = F.multi_margin_loss(x, ploss.tensor({ 0, 1 }, { dtype = "i64" }), { p = 3 })
      return l
    end, "opts.p: 3 is not an integer in [1, 2]")
    assert.are.equal(ploss.MultiMarginLoss, ploss.MultiMarginCriterion)
  end)
end)

describe("multi_margin_loss against PyTorch's definition", function()
  for _, dtype in ipairs { "f64", "f32" } do
    it("p, margin, weight, every reduction, N×C and N×C×d… in " .. dtype .. " (criterion and F)", function()
      local seed = 20
      for _, sizes in ipairs { { 6, 5 }, { 2, 4, 3 } } do
        for _, c in ipairs { {}, { p = 2 }, { margin = 0.55, weight = true }, { p = 2, margin = 2.05, weight = true } } do
          for _, red in ipairs { "none", "mean", "sum" } do
            seed = seed + 1
            local x = scores(sizes, c.margin or 1, dtype, seed)
            local ns = H.sample_sizes(sizes)
            local y = H.random_labels(ns, sizes[2])
            local o = { reduction = red, p = c.p, margin = c.margin }
            local wl
            if c.weight then
              o.weight = ploss.rand({ sizes[2] }, { dtype = "f64", low = 0.5, high = 2 }):to("cpu", dtype)
              wl = o.weight:to("cpu", "f64"):flat()
            end
            local ldt = dtype == "f64" and "f64" or "f32"
            local up = red == "none" and ploss.randn(ns, { dtype = ldt }) or 0.7
            local el, eg = reference(H.sample_rows(x), y:flat(), { reduction = red, p = c.p, margin = c.margin, weight = wl },
              red == "none" and up:flat() or up)
            local what = string.format("multi margin %s %s %s p=%s m=%s w=%s", dtype, table.concat(sizes, "x"), red,
              tostring(c.p), tostring(c.margin), tostring(c.weight))
            local tol = { rtol = dtype == "f64" and 1e-13 or 2e-6, atol = dtype == "f64" and 1e-15 or 1e-6, what = what }
            H.assert_close(F.multi_margin_loss(x, y, o), el, tol)
            H.assert_close(flat_rows(H.sample_rows(F.multi_margin_loss_backward(x, y, up, o))), flat_rows(eg), tol)
            local crit = ploss.MultiMarginLoss(o)
            H.assert_close(crit:forward(x, y), el, tol)
            H.assert_close(flat_rows(H.sample_rows(crit:backward(x, y, up))), flat_rows(eg), tol)
            if red ~= "none" then
              local fo = {}
              for k, v in pairs(o) do fo[k] = v end
              fo.scale = up
              local fl, fg = F.multi_margin_loss_fused(x, y, fo)
              H.assert_close(fl, el, tol)
              H.assert_close(flat_rows(H.sample_rows(fg)), flat_rows(eg), tol)
            end
          end
        end
      end
    end)
  end

  it("f16 and bf16: the f64 values of the same rounded inputs, gradients in the input's dtype", function()
    for _, dtype in ipairs { "f16", "bf16" } do
      local x = H.random_logits({ 9, 6 }, { std = 1.5, dtype = dtype })
      local y = H.random_labels({ 9 }, 6)
      for _, red in ipairs { "none", "mean", "sum" } do
        for _, p in ipairs { 1, 2 } do
          local o = { reduction = red, p = p, weight = { 0.5, 1, 1.5, 2, 1, 3 } }
          local l, g = F.multi_margin_loss_fused(x, y, o)
          assert.are.equal(dtype, g:dtype())
          local lr, gr = F.multi_margin_loss_fused(x:to("cpu", "f64"), y, o)
          local what = dtype .. " " .. red .. " p=" .. p
          H.assert_close(l, lr, { rtol = 1e-6, atol = 1e-7, what = what .. " loss" })
          H.assert_close_scaled(g, gr, dtype == "f16" and 2 ^ -10 or 2 ^ -7, 0, what .. " grad")
        end
      end
    end
  end)
end)

describe("multi_margin_loss gradients (central differences, f64)", function()
  it("p, margin, weight, every reduction, N×C and N×C×d…", function()
    local seed, n = 50, 0
    for _, sizes in ipairs { { 4, 5 }, { 2, 3, 2, 2 } } do
      for _, c in ipairs { {}, { p = 2, margin = 0.55, weight = true } } do
        for _, red in ipairs { "none", "mean", "sum" } do
          seed = seed + 1
          local x = scores(sizes, c.margin or 1, "f64", seed)
          local ns = H.sample_sizes(sizes)
          local y = H.random_labels(ns, sizes[2])
          local o = { reduction = red, p = c.p, margin = c.margin,
            weight = c.weight and ploss.rand({ sizes[2] }, { dtype = "f64", low = 0.5, high = 2 }) or nil }
          local what = string.format("multi margin %s p=%s %s", red, tostring(c.p), table.concat(sizes, "x"))
          local gout = red == "none" and ploss.randn(ns, { dtype = "f64" }) or nil
          H.gradcheck(H.loss_objective("multi_margin_loss", y, o, gout), x, F.multi_margin_loss_backward(x, y, gout, o),
            { what = what, seed = seed })
          H.check_fused_scale("multi_margin_loss", x, y, o, ns, what, 1e-14)
          n = n + 1
        end
      end
    end
    assert.are.equal(12, n)
  end)

  it("channels-last input and in place give the contiguous values", function()
    local x = scores({ 2, 5, 3, 2 }, 1, "f64", 90)
    local y = H.random_labels({ 2, 3, 2 }, 5)
    for _, red in ipairs { "none", "mean" } do
      local o = { reduction = red, p = 2 }
      local l1, g1 = F.multi_margin_loss_fused(x, y, o)
      local xl = H.relayout(x, "channels_last")
      local l2, g2 = F.multi_margin_loss_fused(xl, y, o)
      H.assert_equal(l2, l1)
      H.assert_equal(g2, g1)
      H.check_inplace_fused("multi_margin_loss", xl:clone(), y, o, l1, g1, "multi margin " .. red)
      H.check_inplace_fused("multi_margin_loss", x:clone(), y, o, l1, g1, "multi margin " .. red)
    end
  end)
end)
