-- Negative log-likelihood spec (suite 'cpu') on the CPU backend.
--  * hand-derivable values: weights, ignore_index, 'mean' over the valid samples' weights;
--  * against a Lua transcription of PyTorch's nll_loss (N×C and N×C×d…, weights,
--    ignore_index, every reduction, f64 and f32, criterion and F, every pass);
--  * nll_loss of a log-softmax is cross_entropy (itself checked against PyTorch's fixtures);
--  * central differences in f64;
--  * f16 / bf16 against the f64 values of the same rounded inputs;
--  * layouts (channels-last, transposed), in place, the Torch7 name.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

-- PyTorch's nll_loss on flat rows: rows[i][j] (sample i, class j), labels[i] (0-based),
-- weights (a list or nil), the upstream gradient `up` (a number, or a list for 'none');
-- returns the loss (a number, or a list) and the gradient as rows.
local function reference(rows, labels, o, up)
  local red, ign = o.reduction or "mean", o.ignore_index or -100
  local w = o.weight
  local ls, sum, wsum, grads = {}, 0, 0, {}
  for i, r in ipairs(rows) do
    local y = labels[i]
    local g = {}
    for j = 1, #r do g[j] = 0 end
    if y == ign then
      ls[i] = 0
    else
      local wy = w and w[y + 1] or 1
      ls[i] = -wy * r[y + 1]
      sum, wsum = sum + ls[i], wsum + wy
      g[y + 1] = -wy
    end
    grads[i] = g
  end
  for i, g in ipairs(grads) do
    local om = red == "none" and up[i] or red == "mean" and up / wsum or up
    if red == "mean" and wsum == 0 then om = 0 end
    for j = 1, #g do g[j] = g[j] * om end
  end
  if red == "none" then return ls, grads end
  return red == "mean" and sum / wsum or sum, grads
end

-- The gradient rows of a tensor (sample order), for comparing with reference().
local function grad_rows(g) return H.sample_rows(g) end

local function flat_rows(rows)
  local out = {}
  for _, r in ipairs(rows) do for _, v in ipairs(r) do out[#out + 1] = v end end
  return out
end

describe("nll_loss by hand", function()
  local x = ploss.tensor({ { -1, -2, -0.5 }, { -0.1, -3, -2 }, { -1, -1, -1 } }, { dtype = "f64" })
  local y = ploss.tensor({ 2, 0, -100 }, { dtype = "i64" })

  it("the target's entry, 'mean' over the valid samples or their weights", function()
    H.assert_close(F.nll_loss(x, y), (0.5 + 0.1) / 2, { rtol = 1e-15 })
    H.assert_close(F.nll_loss(x, y, { reduction = "sum" }), 0.6, { rtol = 1e-15 })
    H.assert_close(F.nll_loss(x, y, { reduction = "none" }), { 0.5, 0.1, 0 }, { rtol = 1e-15 })
    H.assert_close(F.nll_loss(x, y, { weight = { 1, 2, 3 } }), (1.5 + 0.1) / 4, { rtol = 1e-7 })
    local l, g = F.nll_loss_fused(x, y, { weight = ploss.tensor({ 1, 2, 3 }, { dtype = "f64" }) })
    H.assert_close(l, 0.4, { rtol = 1e-15 })
    H.assert_equal(g, { { 0, 0, -0.75 }, { -0.25, 0, 0 }, { 0, 0, 0 } })
    H.assert_equal(F.nll_loss_backward(x, y, 2, { reduction = "sum" }), { { 0, 0, -2 }, { -2, 0, 0 }, { 0, 0, 0 } })
  end)

  it("another ignore_index; a NaN off the target changes nothing", function()
    local xn = x:clone()
    xn:select(1, 1):narrow(1, 1, 2):fill(0 / 0)
    local y2 = ploss.tensor({ 2, 7, 1 }, { dtype = "i64" })
    local l, g = F.nll_loss_fused(xn, y2, { ignore_index = 7, reduction = "sum" })
    H.assert_close(l, 0.5 + 1, { rtol = 1e-15 })
    H.assert_equal(g, { { 0, 0, -1 }, { 0, 0, 0 }, { 0, -1, 0 } })
  end)

  it("is Torch7's ClassNLLCriterion", function()
    assert.are.equal(ploss.NLLLoss, ploss.ClassNLLCriterion)
  end)
end)

describe("nll_loss against PyTorch's definition", function()
  local cases = {
    { { 5, 4 }, {} },
    { { 5, 4 }, { weight = true } },
    { { 6, 3 }, { ignore_index = 1 } },
    { { 2, 4, 3, 2 }, { weight = true } },
    { { 3, 5, 4 }, { ignore_index = 0, weight = true } },
  }
  for _, dtype in ipairs { "f64", "f32" } do
    it("N×C and N×C×d…, weights, ignore_index, every reduction in " .. dtype .. " (criterion and F)", function()
      local seed = 40
      for _, c in ipairs(cases) do
        for _, red in ipairs { "none", "mean", "sum" } do
          seed = seed + 1
          H.seed(seed)
          local sizes = c[1]
          local x = H.random_logits(sizes, { std = 2, dtype = dtype })
          local ns = H.sample_sizes(sizes)
          local y = H.random_labels(ns, sizes[2], { ignore = 0.25, ignore_index = c[2].ignore_index or -100 })
          local o = { reduction = red, ignore_index = c[2].ignore_index }
          local wl
          if c[2].weight then
            wl = ploss.rand({ sizes[2] }, { dtype = "f64", low = 0.5, high = 2 })
            o.weight = wl:to("cpu", dtype)
            wl = o.weight:to("cpu", "f64"):flat()
          end
          local ldt = dtype == "f64" and "f64" or "f32"
          local up = red == "none" and ploss.randn(ns, { dtype = ldt }) or 0.7
          local rows, labels = H.sample_rows(x), y:flat()
          local el, eg = reference(rows, labels, { reduction = red, ignore_index = o.ignore_index, weight = wl },
            red == "none" and up:flat() or up)
          local what = string.format("nll %s %s %s w=%s ign=%s", dtype, table.concat(sizes, "x"), red,
            tostring(c[2].weight), tostring(o.ignore_index))
          local tol = { rtol = dtype == "f64" and 1e-14 or 1e-6, atol = dtype == "f64" and 1e-15 or 1e-7, what = what }
          H.assert_close(F.nll_loss(x, y, o), el, tol)
          H.assert_close(flat_rows(grad_rows(F.nll_loss_backward(x, y, up, o))), flat_rows(eg), tol)
          local crit = ploss.NLLLoss(o)
          H.assert_close(crit:forward(x, y), el, tol)
          H.assert_close(flat_rows(grad_rows(crit:backward(x, y, up))), flat_rows(eg), tol)
          if red ~= "none" then
            local fo = {}
            for k, v in pairs(o) do fo[k] = v end
            fo.scale = up
            local fl, fg = F.nll_loss_fused(x, y, fo)
            H.assert_close(fl, el, tol)
            H.assert_close(flat_rows(grad_rows(fg)), flat_rows(eg), tol)
          end
        end
      end
    end)
  end

  it("nll_loss of a log-softmax is cross_entropy (weights, ignore_index, N×C×d…)", function()
    H.seed(60)
    for _, sizes in ipairs { { 6, 5 }, { 2, 4, 3, 2 } } do
      local x = H.random_logits(sizes, { std = 3 })
      local ns = H.sample_sizes(sizes)
      local y = H.random_labels(ns, sizes[2], { ignore = 0.2 })
      local w = ploss.rand({ sizes[2] }, { dtype = "f64", low = 0.5, high = 2 })
      -- log-softmax over axis 2 (Lua) through the sample rows, back in x's layout
      local rows = H.sample_rows(x)
      local lsm = {}
      for i, r in ipairs(rows) do
        local m = -math.huge
        for _, v in ipairs(r) do m = math.max(m, v) end
        local s = 0
        for _, v in ipairs(r) do s = s + math.exp(v - m) end
        lsm[i] = {}
        for j, v in ipairs(r) do lsm[i][j] = v - m - math.log(s) end
      end
      -- rows are in (n, d…) order with classes last: build that tensor, then move C to axis 2
      local Cn = sizes[2]
      local perm_sizes = { sizes[1] }
      for d = 3, #sizes do perm_sizes[#perm_sizes + 1] = sizes[d] end
      perm_sizes[#perm_sizes + 1] = Cn
      local t = ploss.tensor(flat_rows(lsm), { dtype = "f64", size = perm_sizes }):view(perm_sizes)
      local back = { 1, #sizes }
      for d = 2, #sizes - 1 do back[#back + 1] = d end
      local logp = t:permute(back):contiguous()
      for _, red in ipairs { "none", "mean", "sum" } do
        local o = { reduction = red, weight = w }
        H.assert_close(F.nll_loss(logp, y, o), F.cross_entropy(x, y, o), { rtol = 1e-13, atol = 1e-15, what = red })
      end
    end
  end)

  it("f16 and bf16: the f64 values of the same rounded inputs, gradients in the input's dtype", function()
    H.seed(61)
    for _, dtype in ipairs { "f16", "bf16" } do
      local x = H.random_logits({ 7, 9, 3 }, { std = 2, dtype = dtype })
      local y = H.random_labels({ 7, 3 }, 9, { ignore = 0.2 })
      for _, red in ipairs { "none", "mean", "sum" } do
        local o = { reduction = red, weight = { 0.5, 1, 1.5, 2, 1, 1, 1, 3, 0.25 } }
        local l, g = F.nll_loss_fused(x, y, o)
        assert.are.equal(dtype, g:dtype())
        local lr, gr = F.nll_loss_fused(x:to("cpu", "f64"), y, o)
        H.assert_close(l, lr, { rtol = 1e-6, what = dtype .. " " .. red .. " loss" })
        H.assert_close(g, gr, { rtol = dtype == "f16" and 2 ^ -11 or 2 ^ -8, what = dtype .. " " .. red .. " grad" })
      end
    end
  end)
end)

describe("nll_loss gradients (central differences, f64)", function()
  it("every reduction, weights, ignore_index, N×C and N×C×H×W", function()
    local seed, n = 70, 0
    for _, red in ipairs { "none", "mean", "sum" } do
      for _, weighted in ipairs { false, true } do
        for _, sizes in ipairs { { 4, 5 }, { 2, 3, 2, 2 } } do
          seed = seed + 1
          H.seed(seed)
          local x = H.random_logits(sizes, { std = 2 })
          local ns = H.sample_sizes(sizes)
          local y = H.random_labels(ns, sizes[2], { ignore = 0.3 })
          local o = { reduction = red, weight = weighted and ploss.rand({ sizes[2] }, { dtype = "f64", low = 0.5, high = 2 }) or nil }
          local what = string.format("nll %s w=%s %s", red, tostring(weighted), table.concat(sizes, "x"))
          local gout = red == "none" and ploss.randn(ns, { dtype = "f64" }) or nil
          H.gradcheck(H.loss_objective("nll_loss", y, o, gout), x, F.nll_loss_backward(x, y, gout, o),
            { what = what, seed = seed })
          H.check_fused_scale("nll_loss", x, y, o, ns, what, 1e-14)
          n = n + 1
        end
      end
    end
    assert.are.equal(12, n)
  end)
end)

describe("nll_loss layouts", function()
  it("channels-last and transposed inputs and gradients give the contiguous values; in place", function()
    H.seed(80)
    local x = H.random_logits({ 2, 5, 3, 4 })
    local y = H.random_labels({ 2, 3, 4 }, 5, { ignore = 0.2 })
    for _, red in ipairs { "none", "mean", "sum" } do
      local o = { reduction = red, weight = { 1, 2, 0.5, 1, 3 } }
      local l1, g1 = F.nll_loss_fused(x, y, o)
      local xl = H.relayout(x, "channels_last")
      local l2, g2 = F.nll_loss_fused(xl, y, o)
      H.assert_equal(l2, l1, { what = red })
      H.assert_equal(g2, g1, { what = red })
      H.check_inplace_fused("nll_loss", xl:clone(), y, o, l1, g1, "nll " .. red)
      local x2 = H.random_logits({ 6, 4 })
      local y2 = H.random_labels({ 6 }, 4)
      local la, ga = F.nll_loss_fused(x2, y2, { reduction = red })
      local lb, gb = F.nll_loss_fused(H.relayout(x2, "transposed"), y2, { reduction = red })
      H.assert_equal(lb, la)
      H.assert_equal(gb, ga)
    end
  end)
end)
