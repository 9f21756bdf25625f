-- Pointwise criteria spec (suite 'cpu'): mse_loss, l1_loss, smooth_l1_loss, huber_loss,
-- binary_cross_entropy, soft_margin_loss, kl_div, hinge_embedding_loss and hinge_loss on the
-- CPU backend; target_weighted_mse_loss (Torch7's WeightedMSECriterion) against Torch7's
-- definition with both of its weight shapes.
--  * hand-derivable values, and every loss against a Lua transcription of PyTorch's (for
--    hinge_loss Torch7's MarginCriterion's) definition (forward, backward, fused; criterion and F; every reduction) in f64 and f32;
--  * PyTorch's conventions at the kinks and clamps: sign(0) = 0, the thresholds of smooth L1
--    and Huber, BCE's log clamp at −100 and its gradient's 1e-12 floor, KL's 0·log 0 = 0;
--  * every kl_div case of torch_reference.json (PyTorch), 'batchmean' included;
--  * central differences in f64 for every loss, reduction and option, away from the kinks;
--  * f16 / bf16 against the f64 values of the same rounded inputs;
--  * the Torch7 class names, 'batchmean' refused by the other losses, options out of range.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local REDUCTIONS = { "none", "mean", "sum" }

-- PyTorch's definitions, per element: loss and ∂loss/∂x (the Lua reference).
local function sign(d) return d > 0 and 1 or d < 0 and -1 or 0 end
local function log1p(v) return v == 0 and 0 or math.log(1 + v) end
local function clamp100(v) return v < -100 and -100 or v end
local REF = {
  mse_loss = function(x, y, _, w) w = w or 1 local d = x - y return w * d * d, w * 2 * d end,
  l1_loss = function(x, y, _, w) w = w or 1 local d = x - y return w * math.abs(d), w * sign(d) end,
  smooth_l1_loss = function(x, y, o)
    local b, d = o.beta or 1, x - y
    if math.abs(d) < b then return 0.5 * d * d / b, d / b end
    return math.abs(d) - 0.5 * b, sign(d)
  end,
  huber_loss = function(x, y, o, w)
    local dl, d = o.delta or 1, x - y
    w = w or 1
    if math.abs(d) < dl then return w * 0.5 * d * d, w * d end
    return w * dl * (math.abs(d) - 0.5 * dl), w * dl * sign(d)
  end,
  binary_cross_entropy = function(x, y, _, w)
    w = w or 1
    local l = (y - 1) * clamp100(math.log(1 - x)) - y * clamp100(math.log(x))
    return w * l, w * (x - y) / math.max((1 - x) * x, 1e-12)
  end,
  soft_margin_loss = function(x, y)
    local z = -y * x
    return math.log(1 + math.exp(z)), -y / (1 + math.exp(-z))
  end,
  kl_div = function(x, y, o)
    if o.log_target then return math.exp(y) * (y - x), -math.exp(y) end
    return (y == 0 and 0 or y * math.log(y)) - y * x, -y
  end,
  hinge_embedding_loss = function(x, y, o)
    local l, g = 0, 0
    if y ~= 1 then
      local h = (o.margin or 1) - x
      l, g = math.max(h, 0), h >= 0 and -1 or 0
    end
    if y ~= -1 then l, g = l + x, g + 1 end
    return l, g
  end,
  -- Torch7's MarginCriterion: −y where y·x < m, 0 at the kink
  hinge_loss = function(x, y, o)
    local m = o.margin or 1
    return math.max(m - y * x, 0), y * x < m and -y or 0
  end,
}

-- The reference loss (a number, or a flat list for 'none') and gradient (flat list) of
-- `name` for flat inputs xs, ys, the upstream gradient `up` (a number, or a flat list for
-- 'none'), the options o and the flat weights ws (nil: none); n0: the input's first dim.
-- PyTorch's weighted MSE and L1 divide 'mean' by the sum of the weights.
local WEIGHT_MEAN = { mse_loss = true, l1_loss = true }
local function reference(name, xs, ys, o, up, ws, n0)
  local red = o.reduction or "mean"
  local div = red == "mean" and #xs or red == "batchmean" and n0 or 1
  if red == "mean" and ws and WEIGHT_MEAN[name] then
    div = 0
    for i = 1, #ws do div = div + ws[i] end
  end
  local ls, gs, sum = {}, {}, 0
  for i = 1, #xs do
    local l, g = REF[name](xs[i], ys[i], o, ws and ws[i])
    ls[i] = l
    sum = sum + l
    gs[i] = g * (red == "none" and up[i] or up / div)
  end
  if red == "none" then return ls, gs end
  return sum / div, gs
end

-- A random (input, target) pair of `sizes` in dtype for `name`, in each loss's domain.
local function data_for(name, sizes, dtype, seed)
  H.seed(seed)
  local x, y
  if name == "binary_cross_entropy" then
    x = ploss.rand(sizes, { dtype = "f64", low = 0.02, high = 0.98 })
    y = ploss.rand(sizes, { dtype = "f64" })
  elseif name == "soft_margin_loss" or name == "hinge_embedding_loss" or name == "hinge_loss" then
    x = ploss.randn(sizes, { dtype = "f64", std = 2 })
    local v = ploss.rand(sizes, { dtype = "f64" }):flat()
    -- labels −1 and 1, and for the hinge also PyTorch's case of another value (0.5)
    for i = 1, #v do v[i] = v[i] < 0.45 and -1 or (v[i] < 0.9 or name == "soft_margin_loss") and 1 or 0.5 end
    y = ploss.tensor(v, { dtype = "f64", size = sizes })
  elseif name == "kl_div" then
    x = ploss.rand(sizes, { dtype = "f64", low = -4, high = -0.05 }) -- log-probabilities
    y = ploss.rand(sizes, { dtype = "f64" })
  else
    y = ploss.randn(sizes, { dtype = "f64" })
    -- d = x − y with |d| in [0.05, 3], at least 0.02 away from the thresholds 0.5, 1 and 2
    local d = ploss.rand(sizes, { dtype = "f64", low = 0.05, high = 3 }):flat()
    local s = ploss.rand(sizes, { dtype = "f64" }):flat()
    local yv, xv = y:flat(), {}
    for i = 1, #d do
      for _, t in ipairs { 0.5, 1, 2 } do
        if math.abs(d[i] - t) < 0.02 then d[i] = t + 0.05 end
      end
      xv[i] = yv[i] + (s[i] < 0.5 and -d[i] or d[i])
    end
    x = ploss.tensor(xv, { dtype = "f64", size = sizes })
  end
  return x:to("cpu", dtype), y:to("cpu", dtype)
end

-- The options worth covering per loss.
local OPTIONS = {
  mse_loss = { {}, { weight = "class" }, { weight = "full" } },
  l1_loss = { {}, { weight = "class" }, { weight = "full" } },
  smooth_l1_loss = { {}, { beta = 0.5 }, { beta = 2 }, { beta = 0 } },
  huber_loss = { {}, { delta = 0.5 }, { delta = 2 }, { weight = "full" }, { delta = 2, weight = "class" } },
  binary_cross_entropy = { {}, { weight = "class" }, { weight = "full" } },
  soft_margin_loss = { {} },
  kl_div = { {}, { log_target = true } },
  hinge_embedding_loss = { {}, { margin = 0.5 }, { margin = -0.25 } },
  hinge_loss = { {}, { margin = 0.5 }, { margin = -0.25 } },
}
local CRITERION = {
  mse_loss = "MSELoss", l1_loss = "L1Loss", smooth_l1_loss = "SmoothL1Loss", huber_loss = "HuberLoss",
  binary_cross_entropy = "BCELoss", soft_margin_loss = "SoftMarginLoss", kl_div = "KLDivLoss",
  hinge_embedding_loss = "HingeEmbeddingLoss", hinge_loss = "HingeLoss",
}
local NAMES = { "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy", "soft_margin_loss", "kl_div",
  "hinge_embedding_loss", "hinge_loss" }

-- Concrete options (tensor options made for `sizes`) and the flat weights they imply.
local function concrete(name, spec, sizes, dtype, seed)
  local o, ws = {}, nil
  for k, v in pairs(spec) do o[k] = v end
  if spec.weight then
    H.seed(seed + 7)
    if spec.weight == "class" then
      local w = ploss.rand({ sizes[2] }, { dtype = "f64", low = 0.5, high = 2 })
      o.weight = w:to("cpu", dtype)
      local wv, full = o.weight:to("cpu", "f64"):flat(), {}
      local inner = 1
      for d = 3, #sizes do inner = inner * sizes[d] end
      for i = 1, sizes[1] * sizes[2] * inner do full[i] = wv[math.floor((i - 1) / inner) % sizes[2] + 1] end
      ws = full
    else
      o.weight = ploss.rand(sizes, { dtype = "f64", low = 0.5, high = 2 }):to("cpu", dtype)
      ws = o.weight:to("cpu", "f64"):flat()
    end
  end
  return o, ws
end

local function label(name, o, red, extra)
  local parts = { name, red }
  for k, v in pairs(o) do parts[#parts + 1] = k .. "=" .. (ploss.is_tensor(v) and "tensor" or tostring(v)) end
  if extra then parts[#parts + 1] = extra end
  return table.concat(parts, " ")
end

describe("pointwise criteria by hand", function()
  local x = ploss.tensor({ 0.5, -1, 3, 2 }, { dtype = "f64" })
  local y = ploss.tensor({ 0, 1, 1, 2 }, { dtype = "f64" }) -- d = 0.5, −2, 2, 0

  it("MSE and L1: values, 'mean' over the element count, sign(0) = 0", function()
    H.assert_close(F.mse_loss(x, y), (0.25 + 4 + 4 + 0) / 4, { rtol = 1e-15 })
    H.assert_close(F.mse_loss_backward(x, y, 1, { reduction = "sum" }), { 1, -4, 4, 0 }, { rtol = 1e-15 })
    H.assert_close(F.l1_loss(x, y, { reduction = "sum" }), 4.5, { rtol = 1e-15 })
    local l, g = F.l1_loss_fused(x, y)
    H.assert_close(l, 4.5 / 4, { rtol = 1e-15 })
    H.assert_equal(g, { 0.25, -0.25, 0.25, 0 })
  end)

  it("a weight (PyTorch >= 2.6): MSE's and L1's 'mean' over the weights, Huber's over the elements", function()
    local w = ploss.tensor({ 1, 3, 0, 2 }, { dtype = "f64" }) -- d = 0.5, −2, 2, 0
    local l, g = F.mse_loss_fused(x, y, { weight = w })
    H.assert_close(l, (0.25 + 12) / 6, { rtol = 1e-15 })
    H.assert_close(g, { 1 / 6, -12 / 6, 0, 0 }, { rtol = 1e-15 })
    H.assert_close(F.mse_loss(x, y, { weight = w, reduction = "none" }), { 0.25, 12, 0, 0 }, { rtol = 1e-15 })
    H.assert_close(F.mse_loss_backward(x, y, 2, { weight = w, reduction = "sum" }), { 2, -24, 0, 0 }, { rtol = 1e-15 })
    l, g = F.l1_loss_fused(x, y, { weight = w })
    H.assert_close(l, 6.5 / 6, { rtol = 1e-15 })
    H.assert_close(g, { 1 / 6, -3 / 6, 0, 0 }, { rtol = 1e-15 })
    -- Huber (δ = 1): 0.125, 3·1.5, 0·1.5, 0 over the 4 elements
    l, g = F.huber_loss_fused(x, y, { weight = w })
    H.assert_close(l, (0.125 + 4.5) / 4, { rtol = 1e-15 })
    H.assert_close(g, { 0.5 / 4, -3 / 4, 0, 0 }, { rtol = 1e-15 })
    -- the criterion, a weight broadcast over a 2×2 view (a Lua list of one weight per column)
    local crit = ploss.MSELoss { weight = { 1, 3 } }
    H.assert_close(crit:forward(x:view(2, 2), y:view(2, 2)), (0.25 + 12 + 4 + 0) / 8, { rtol = 1e-15 })
    H.assert_close(crit:backward(x:view(2, 2), y:view(2, 2)), { { 1 / 8, -12 / 8 }, { 4 / 8, 0 } }, { rtol = 1e-15 })
  end)

  it("weights summing to 0: MSE's and L1's 'mean' is NaN (also where Σ w·ℓ ≠ 0) with a zero gradient", function()
    for _, dtype in ipairs { "f64", "f32" } do
      local xd, yd = x:to("cpu", dtype), y:to("cpu", dtype)
      local zero = ploss.zeros({ 4 }, { dtype = dtype })
      for _, name in ipairs { "mse_loss", "l1_loss" } do
        local l, g = F[name .. "_fused"](xd, yd, { weight = zero })
        assert.is_true(l ~= l, name .. " " .. dtype .. ": 0/0")
        H.assert_equal(g, { 0, 0, 0, 0 })
        H.assert_equal(F[name .. "_backward"](xd, yd, 1, { weight = zero }), { 0, 0, 0, 0 })
        -- w = 1, −1, 0, 0: Σ w = 0 with Σ w·ℓ = ℓ₁ − ℓ₂ < 0 (PyTorch: −∞)
        l, g = F[name .. "_fused"](xd, yd, { weight = ploss.tensor({ 1, -1, 0, 0 }, { dtype = dtype }) })
        assert.is_true(l ~= l, name .. " " .. dtype .. ": NaN, not -inf")
        H.assert_equal(g, { 0, 0, 0, 0 })
      end
    end
  end)

  it("each element in f32 for f32/bf16 input, as PyTorch: an element's own overflow makes the mean +∞", function()
    -- (2.5e19)² = 6.25e38 > FLT_MAX; the mean 1.5625e38 would fit, and does in f64
    for _, dt in ipairs { "f32", "bf16", "f64" } do
      local l, g = F.mse_loss_fused(ploss.tensor({ 2.5e19, 0, 0, 0 }, { dtype = dt }), ploss.zeros({ 4 }, { dtype = dt }))
      if dt == "f64" then H.assert_close(l, 1.5625e38, { rtol = 1e-15 }) else assert.are.equal(math.huge, l) end
      H.assert_close(g:flat()[1], 2 * 2.5e19 / 4, { rtol = 1e-2 })
    end
  end)

  it("smooth L1 and Huber: the quadratic part strictly inside the threshold, the linear part at it", function()
    -- β = 2: d = 0.5 inside (0.0625), |d| = 2 at the threshold (2 − 1 = 1, gradient ±1)
    local l, g = F.smooth_l1_loss_fused(x, y, { beta = 2, reduction = "none" })
    H.assert_close(l, { 0.0625, 1, 1, 0 }, { rtol = 1e-15 })
    H.assert_close(g, { 0.25, -1, 1, 0 }, { rtol = 1e-15 })
    -- δ = 2: 0.125, 2·(2 − 1) = 2, gradient d inside, ±δ outside
    l, g = F.huber_loss_fused(x, y, { delta = 2, reduction = "none" })
    H.assert_close(l, { 0.125, 2, 2, 0 }, { rtol = 1e-15 })
    H.assert_close(g, { 0.5, -2, 2, 0 }, { rtol = 1e-15 })
    -- Huber with δ is δ times smooth L1 with β = δ
    for _, b in ipairs { 0.3, 1, 2.5 } do
      local s = F.smooth_l1_loss(x, y, { beta = b, reduction = "none" }):flat()
      for i = 1, #s do s[i] = b * s[i] end
      H.assert_close(F.huber_loss(x, y, { delta = b, reduction = "none" }), s, { rtol = 1e-15 })
    end
  end)

  it("a NaN difference: NaN loss, and a NaN gradient for smooth L1 (β > 0) and Huber, as PyTorch", function()
    for _, dtype in ipairs { "f64", "f32", "bf16" } do
      local xn = ploss.tensor({ 0 / 0, 1, math.huge, 2 }, { dtype = dtype })
      local yn = ploss.tensor({ 1, 0 / 0, math.huge, 2 }, { dtype = dtype })
      local function nan(v) return v ~= v end
      for _, c in ipairs { { "smooth_l1_loss", { beta = 1 }, true }, { "huber_loss", { delta = 0.5 }, true },
        { "smooth_l1_loss", { beta = 0 }, false }, { "l1_loss", {}, false }, { "mse_loss", {}, true } } do
        local o = H.with(c[2], { reduction = "none" })
        local l, g = F[c[1] .. "_fused"](xn, yn, o)
        local lv, gv = l:flat(), g:flat()
        for i = 1, 3 do -- NaN − 1, 1 − NaN, ∞ − ∞
          assert(nan(lv[i]), c[1] .. " " .. dtype .. ": loss " .. i .. " is " .. tostring(lv[i]))
          -- β = 0 and L1: sign(NaN) = 0 (PyTorch's l1_loss); else NaN
          assert(nan(gv[i]) == c[3], c[1] .. " " .. dtype .. ": gradient " .. i .. " is " .. tostring(gv[i]))
        end
        assert.are.equal(0, gv[4])
        local b = F[c[1] .. "_backward"](xn, yn, 1, H.with(c[2], { reduction = "sum" })):flat()
        assert(nan(b[1]) == c[3], c[1] .. " backward")
      end
    end
  end)

  it("smooth L1 with β = 0 is the L1 loss, its gradient 0 at d = 0 (no 0/0)", function()
    local l1, g1 = F.smooth_l1_loss_fused(x, y, { beta = 0, reduction = "none" })
    local l2, g2 = F.l1_loss_fused(x, y, { reduction = "none" })
    H.assert_equal(l1, l2)
    H.assert_equal(g1, g2)
  end)

  it("BCE: logs clamped at −100, PyTorch's gradient floor x·(1 − x) >= 1e-12", function()
    local p = ploss.tensor({ 0, 1, 0, 1, 0.5, 0.25 }, { dtype = "f64" })
    local t = ploss.tensor({ 1, 0, 0, 1, 1, 0.5 }, { dtype = "f64" })
    local l, g = F.binary_cross_entropy_fused(p, t, { reduction = "none" })
    H.assert_close(l, { 100, 100, 0, 0, math.log(2), -(0.5 * math.log(0.25) + 0.5 * math.log(0.75)) }, { rtol = 1e-15 })
    H.assert_close(g, { -1e12, 1e12, 0, 0, -2, -0.25 / 0.1875 }, { rtol = 1e-15 })
    -- a weight broadcast over the input scales both
    local w = ploss.tensor({ { 2 }, { 3 } }, { dtype = "f64" })
    local p2, t2 = p:view(2, 3), t:view(2, 3)
    local lw = F.binary_cross_entropy(p2, t2, { reduction = "sum", weight = w })
    local lv = l:flat()
    H.assert_close(lw, 2 * (lv[1] + lv[2] + lv[3]) + 3 * (lv[4] + lv[5] + lv[6]), { rtol = 1e-15 })
    -- 'mean' divides by the element count, not by the weights
    H.assert_close(F.binary_cross_entropy(p2, t2, { weight = w }), lw / 6, { rtol = 1e-15 })
  end)

  it("soft margin: a softplus, finite for large margins where log(1 + exp) overflows", function()
    local s = ploss.tensor({ 1000, -1000, 0, math.huge }, { dtype = "f32" })
    local t = ploss.tensor({ -1, -1, 1, 1 }, { dtype = "f32" })
    local l, g = F.soft_margin_loss_fused(s, t, { reduction = "none" })
    H.assert_close(l, { 1000, 0, math.log(2), 0 }, { rtol = 1e-7 })
    H.assert_close(g, { 1, 0, -0.5, 0 }, { rtol = 1e-7 })
  end)

  it("BCE with logits: an infinite logit with its matching target gives 0 (PyTorch: 0·∞ = NaN), else inf", function()
    for _, dtype in ipairs { "f32", "f64" } do
      local x = ploss.tensor({ math.huge, -math.huge, math.huge, -math.huge }, { dtype = dtype })
      local y = ploss.tensor({ 1, 0, 0, 1 }, { dtype = dtype })
      local l, g = F.binary_cross_entropy_with_logits_fused(x, y, { reduction = "none" })
      H.assert_equal(l, { 0, 0, math.huge, math.huge })
      H.assert_equal(g, { 0, 0, 1, -1 })
      -- pos_weight scales the positive term (and its gradient) only
      l, g = F.binary_cross_entropy_with_logits_fused(x, y, { reduction = "none", pos_weight = { 2 } })
      H.assert_equal(l, { 0, 0, math.huge, math.huge })
      H.assert_equal(g, { 0, 0, 1, -2 })
    end
  end)

  it("KL: 0·log 0 = 0, 'batchmean' divides by the first dim, log_target equals the exp'd target", function()
    local lq = ploss.tensor({ { math.log(0.5), math.log(0.25), math.log(0.25) }, { math.log(0.1), math.log(0.6), math.log(0.3) } },
      { dtype = "f64" })
    local p = ploss.tensor({ { 0.5, 0.5, 0 }, { 0.2, 0.2, 0.6 } }, { dtype = "f64" })
    local kl1 = 0.5 * math.log(0.5 / 0.5) + 0.5 * math.log(0.5 / 0.25)
    local kl2 = 0.2 * math.log(0.2 / 0.1) + 0.2 * math.log(0.2 / 0.6) + 0.6 * math.log(0.6 / 0.3)
    H.assert_close(F.kl_div(lq, p, { reduction = "batchmean" }), (kl1 + kl2) / 2, { rtol = 1e-14 })
    H.assert_close(F.kl_div(lq, p, { reduction = "sum" }), kl1 + kl2, { rtol = 1e-14 })
    H.assert_close(F.kl_div(lq, p), (kl1 + kl2) / 6, { rtol = 1e-14 })
    local l, g = F.kl_div_fused(lq, p, { reduction = "batchmean" })
    H.assert_close(l, (kl1 + kl2) / 2, { rtol = 1e-14 })
    H.assert_close(g, { { -0.25, -0.25, 0 }, { -0.1, -0.1, -0.3 } }, { rtol = 1e-15 })
    H.assert_close(F.kl_div_backward(lq, p, 3, { reduction = "batchmean" }), { { -0.75, -0.75, 0 }, { -0.3, -0.3, -0.9 } },
      { rtol = 1e-15 })
    -- log_target: the same divergence from log p (the zero-probability class: log 0 = −inf,
    -- e^−inf = 0, and 0·(−inf − x) is NaN there, as in PyTorch)
    local logp = ploss.tensor({ { math.log(0.5), math.log(0.5), -math.huge }, { math.log(0.2), math.log(0.2), math.log(0.6) } },
      { dtype = "f64" })
    local ll, lg = F.kl_div_fused(lq, logp, { reduction = "none", log_target = true })
    local lv = ll:flat()
    assert.is_true(lv[3] ~= lv[3])
    H.assert_close({ lv[1] + lv[2], lv[4] + lv[5] + lv[6] }, { kl1, kl2 }, { rtol = 1e-14 })
    H.assert_close(lg, { { -0.5, -0.5, 0 }, { -0.2, -0.2, -0.6 } }, { rtol = 1e-15 })
    -- 'batchmean' of a 0-d input is the sum
    local x0, y0 = ploss.full({}, -1.5, { dtype = "f64" }), ploss.full({}, 0.4, { dtype = "f64" })
    H.assert_close(F.kl_div(x0, y0, { reduction = "batchmean" }), 0.4 * math.log(0.4) + 0.6, { rtol = 1e-15 })
  end)

  it("hinge embedding: x for y = 1, max(0, m − x) for y = −1, the gradient −1 at the hinge", function()
    local d = ploss.tensor({ 0.3, 2, 1, -1, 0.5 }, { dtype = "f64" })
    local t = ploss.tensor({ 1, -1, -1, -1, 0 }, { dtype = "f64" })
    local l, g = F.hinge_embedding_loss_fused(d, t, { reduction = "none" })
    H.assert_close(l, { 0.3, 0, 0, 2, 1 }, { rtol = 1e-15 })
    H.assert_equal(g, { 1, 0, -1, -1, 0 })
    H.assert_close(F.hinge_embedding_loss(d, t, { margin = 3 }), (0.3 + 1 + 2 + 4 + 3) / 5, { rtol = 1e-15 })
    -- the clamp keeps a NaN input (PyTorch's clamp_min): NaN for y = −1 and y = 1, so the
    -- mean and the sum are NaN too
    local nan = 0 / 0
    local ln = F.hinge_embedding_loss(ploss.tensor({ nan, 0.5, nan }, { dtype = "f64" }),
      ploss.tensor({ -1, -1, 1 }, { dtype = "f64" }), { reduction = "none" }):totable()
    assert.is_true(ln[1] ~= ln[1] and ln[3] ~= ln[3], "NaN kept")
    assert.are.equal(0.5, ln[2])
    for _, r in ipairs { "mean", "sum" } do
      local v = ploss.HingeEmbeddingLoss { reduction = r }:forward(ploss.tensor({ nan, 0.5 }, { dtype = "f64" }),
        ploss.tensor({ -1, -1 }, { dtype = "f64" }))
      assert.is_true(v ~= v, r .. " of a NaN element")
    end
  end)

  it("hinge embedding and hinge pass a NaN or ∞ upstream gradient only where the hinge is active", function()
    local nan, inf = 0 / 0, math.huge
    local d = ploss.tensor({ 0.3, 2, 1, -1 }, { dtype = "f64" })
    local t = ploss.tensor({ 1, -1, -1, -1 }, { dtype = "f64" })
    local go = ploss.tensor({ nan, nan, 2, inf }, { dtype = "f64" })
    H.assert_close(F.hinge_embedding_loss_backward(d, t, go, { reduction = "none" }), { nan, 0, -2, -inf })
    H.assert_close(ploss.HingeEmbeddingLoss {}:backward(d, t, nan), { nan, 0, nan, nan })
    -- a label other than ±1 takes both branches: each passes on its own (PyTorch's two where
    -- branches summed: NaN, and ∞ − ∞ where both are active)
    local d2, t2 = ploss.tensor({ 0.3, 0.3, 2 }, { dtype = "f64" }), ploss.tensor({ 0, 0.5, 0 }, { dtype = "f64" })
    H.assert_close(F.hinge_embedding_loss_backward(d2, t2, ploss.tensor({ nan, inf, 2 }, { dtype = "f64" }),
      { reduction = "none" }), { nan, nan, 2 })
    local x = ploss.tensor({ 0.25, 2, -1, 1 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, 1, -1, -1 }, { dtype = "f64" })
    H.assert_close(F.hinge_loss_backward(x, y, go, { reduction = "none" }), { nan, 0, 0, inf })
    H.assert_close(ploss.HingeLoss {}:backward(x, y, nan), { nan, 0, 0, nan })
  end)

  it("hinge (Torch7's MarginCriterion): max(0, m − y·x), the gradient −y strictly inside, NaN kept", function()
    local x = ploss.tensor({ 0.25, 2, 1, -1, 0.5, -3, 0 / 0 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, 1, 1, -1, -1, 1, 1 }, { dtype = "f64" })
    local l, g = F.hinge_loss_fused(x, y, { reduction = "none" })
    -- y·x = 0.25, 2, 1 (the kink: loss 0, gradient 0), 1 (kink), −0.5, −3, NaN
    local lv = l:flat()
    H.assert_close({ unpack(lv, 1, 6) }, { 0.75, 0, 0, 0, 1.5, 4 }, { rtol = 1e-15 })
    assert.is_true(lv[7] ~= lv[7], "a NaN score: a NaN loss")
    H.assert_equal(g, { -1, 0, 0, 0, 1, -1, 0 })
    -- Torch7's sizeAverage: the mean over the elements; margin 2
    local x5 = x:narrow(1, 1, 6)
    H.assert_close(F.hinge_loss(x5, y:narrow(1, 1, 6), { margin = 2 }), (1.75 + 0 + 1 + 1 + 2.5 + 5) / 6, { rtol = 1e-15 })
    H.assert_close(ploss.MarginCriterion { reduction = "sum" }:forward(x5, y:narrow(1, 1, 6)), 0.75 + 1.5 + 4,
      { rtol = 1e-15 })
  end)

  it("the Torch7 class names are the same criteria", function()
    for alias, cls in pairs {
      MSECriterion = "MSELoss", AbsCriterion = "L1Loss", SmoothL1Criterion = "SmoothL1Loss", BCECriterion = "BCELoss",
      SoftMarginCriterion = "SoftMarginLoss", DistKLDivCriterion = "KLDivLoss",
      HingeEmbeddingCriterion = "HingeEmbeddingLoss", MarginCriterion = "HingeLoss",
    } do
      assert.is_not_nil(ploss[cls], cls)
      assert.are.equal(ploss[cls], ploss[alias], alias)
    end
  end)
end)

describe("pointwise criteria against PyTorch's definitions", function()
  for _, name in ipairs(NAMES) do
    it(name .. ": every reduction and option, f64 and f32, criterion and F, every pass", function()
      local seed = 300
      for _, spec in ipairs(OPTIONS[name]) do
        for _, red in ipairs(name == "kl_div" and { "none", "mean", "sum", "batchmean" } or REDUCTIONS) do
          for _, run in ipairs { { dtype = "f64", rtol = 1e-13, atol = 1e-15 }, { dtype = "f32", rtol = 2e-6, atol = 1e-6 } } do
            seed = seed + 1
            local sizes = { 3, 4, 5 }
            local x, y = data_for(name, sizes, run.dtype, seed)
            local o, ws = concrete(name, spec, sizes, run.dtype, seed)
            o.reduction = red
            local what = label(name, spec, red, run.dtype)
            local ldt = run.dtype == "f64" and "f64" or "f32"
            local xs, ys = x:to("cpu", "f64"):flat(), y:to("cpu", "f64"):flat()
            local up = red == "none" and ploss.randn(sizes, { dtype = ldt }) or 0.7
            local upv = red == "none" and up:flat() or up
            local el, eg = reference(name, xs, ys, o, upv, ws, sizes[1])
            local tol = { rtol = run.rtol, atol = run.atol, what = what }
            -- F: forward, backward, fused (scale = the upstream gradient of a reduced loss)
            H.assert_close(F[name](x, y, o), el, tol)
            H.assert_close(F[name .. "_backward"](x, y, up, o), eg, tol)
            if red ~= "none" then
              local fo = {}
              for k, v in pairs(o) do fo[k] = v end
              fo.scale = up
              local fl, fg = F[name .. "_fused"](x, y, fo)
              H.assert_close(fl, el, tol)
              H.assert_close(fg, eg, tol)
            end
            -- the criterion
            local crit = ploss[CRITERION[name]](o)
            H.assert_close(crit:forward(x, y), el, tol)
            H.assert_close(crit:backward(x, y, up), eg, tol)
            local cl, cg = crit(x, y)
            H.assert_close(cl, el, tol)
            local _, eg1 = reference(name, xs, ys, o, red == "none" and (function()
              local ones = {}
              for i = 1, #xs do ones[i] = 1 end
              return ones
            end)() or 1, ws, sizes[1])
            H.assert_close(cg, eg1, tol)
            assert.are.equal(run.dtype, cg:dtype())
          end
        end
      end
    end)
  end

  it("kl_div: every case of torch_reference.json (f64 and f32)", function()
    local cases = H.fixtures("kl_div")
    assert.are.equal(3, #cases)
    for _, run in ipairs {
      { dtype = "f64", rtol = 1e-12, atol = 1e-15 },
      { dtype = "f32", rtol = 1e-5, atol = 1e-6 },
    } do
      for _, case in ipairs(cases) do
        H.check_fixture_case("KLDivLoss", "kl_div", case, run,
          { reduction = case.options.reduction, log_target = case.options.log_target }, 2.5)
      end
    end
  end)

  it("f16 and bf16: the f64 values of the same rounded inputs, gradients in the input's dtype", function()
    local tol = { f16 = { loss = 1e-6, grad = 1e-3 }, bf16 = { loss = 1e-6, grad = 8e-3 } }
    for _, name in ipairs(NAMES) do
      for _, dtype in ipairs { "f16", "bf16" } do
        local weighted = name == "mse_loss" or name == "l1_loss" or name == "huber_loss"
        for _, red in ipairs(weighted and { "none", "sum", "mean" } or { "none", "sum" }) do
          local x, y = data_for(name, { 4, 33 }, dtype, 77)
          local o = { reduction = red }
          -- a weight of the input's dtype: the same rounded values in the f64 reference
          if weighted then o.weight = ploss.rand({ 4, 33 }, { dtype = "f64", low = 0.5, high = 2, seed = 78 }):to("cpu", dtype) end
          local l, g = F[name .. "_fused"](x, y, o)
          assert.are.equal(dtype, g:dtype())
          local o64 = { reduction = red, weight = o.weight and o.weight:to("cpu", "f64") }
          local lr, gr = F[name .. "_fused"](x:to("cpu", "f64"), y:to("cpu", "f64"), o64)
          local what = name .. " " .. dtype .. " " .. red
          H.assert_close_scaled(l, lr, tol[dtype].loss * 10, 0, what .. " loss")
          H.assert_close_scaled(g, gr, tol[dtype].grad, 0, what .. " gradient")
        end
      end
    end
  end)
end)

describe("pointwise criteria gradients (central differences, f64)", function()
  for _, name in ipairs(NAMES) do
    it(name .. ": every reduction and option, N×C and N×C×H×W", function()
      local seed, n = 900, 0
      for _, spec in ipairs(OPTIONS[name]) do
        for _, red in ipairs(name == "kl_div" and { "none", "mean", "sum", "batchmean" } or REDUCTIONS) do
          for _, sizes in ipairs { { 3, 4 }, { 2, 3, 2, 2 } } do
            seed = seed + 1
            local x, y = data_for(name, sizes, "f64", seed)
            local o = concrete(name, spec, sizes, "f64", seed)
            o.reduction = red
            local what = label(name, spec, red, table.concat(sizes, "x"))
            local gout = red == "none" and ploss.randn(sizes, { dtype = "f64" }) or nil
            local g = F[name .. "_backward"](x, y, gout, o)
            -- h small against the distance to the kinks (0.02) and to x = 0 for BCE
            H.gradcheck(H.loss_objective(name, y, o, gout), x, g, { what = what, seed = seed, h = 1e-6 })
            H.check_fused_scale(name, x, y, o, sizes, what, 1e-13)
            n = n + 1
          end
        end
      end
      assert.are.equal(#OPTIONS[name] * (name == "kl_div" and 4 or 3) * 2, n)
    end)
  end
end)

describe("pointwise criteria errors (nothing written)", function()
  local x = ploss.rand({ 3, 4 }, { dtype = "f64" })
  local y = ploss.rand({ 3, 4 }, { dtype = "f64" })
  local out = ploss.empty({}, { dtype = "f64" })
  local gbuf = ploss.empty({ 3, 4 }, { dtype = "f64" })
  local function fused(name, o)
    o = o or {}
    o.out, o.grad_input = out, gbuf
    return function()
      local l, g = F[name .. "_fused"](x, y, o) -- not a tail call: the error names this line
      return l, g
    end
  end

  it("'batchmean' is KL's only: the other losses refuse it, in Lua and in C", function()
    for _, name in ipairs(NAMES) do
      if name ~= "kl_div" then
        H.expect_error(fused(name, { reduction = "batchmean" }),
          "reduction: 'batchmean' is not one of 'none', 'mean', 'sum'", out, gbuf)
      end
    end
    H.expect_error(fused("kl_div", { reduction = "batch" }),
      "reduction: 'batch' is not one of 'none', 'mean', 'sum', 'batchmean'", out, gbuf)
    local spec = ploss.MSELoss._spec
    local copts = spec.options({})
    copts.reduction = ploss.C.PLOSS_REDUCTION_BATCHMEAN
    local snap = H.poison(out, gbuf)
    local st = spec.fused({}, x:context(), x, y, copts, out, gbuf)
    assert.are.equal(ploss.C.PLOSS_ERR_INVALID_ARGUMENT, tonumber(st))
    assert.is_truthy(require("ffi").string(ploss.C.ploss_last_error()):find("opts.reduction: batchmean is not a reduction of mse_loss", 1, true))
    H.assert_untouched(snap)
  end)

  it("options out of range name the option", function()
    H.expect_error(fused("smooth_l1_loss", { beta = -0.5 }), "opts.beta: -0.5 is not a finite number >= 0", out, gbuf)
    H.expect_error(fused("huber_loss", { delta = 0 }), "opts.delta: 0 is not a finite number > 0", out, gbuf)
    H.expect_error(fused("huber_loss", { delta = 0 / 0 }), "opts.delta: nan is not a finite number > 0", out, gbuf)
    H.expect_error(fused("kl_div", { log_target = 1 }), "log_target: expected a boolean", out, gbuf)
  end)

  it("±1 labels may be integers (soft margin, hinge embedding, hinge), as PyTorch takes them", function()
    local xs = ploss.tensor({ { 0.3, 2, -0.5 }, { 1.5, -2, 0.25 } }, { dtype = "f64" })
    local ys = { { 1, -1, -1 }, { 1, 1, -1 } }
    for _, name in ipairs { "soft_margin_loss", "hinge_embedding_loss", "hinge_loss" } do
      local lf, gf = F[name .. "_fused"](xs, ploss.tensor(ys, { dtype = "f64" }))
      for _, idt in ipairs { "i64", "i32" } do
        local li, gi = F[name .. "_fused"](xs, ploss.tensor(ys, { dtype = idt }))
        assert.are.equal(lf, li, name .. " " .. idt)
        H.assert_equal(gi, gf)
      end
    end
    H.expect_error(function()
      local l, g = F.soft_margin_loss_fused(x, ploss.ones({ 3, 4 }, { dtype = "u8" }), { out = out, grad_input = gbuf })
      return l, g
    end, "target: expected ±1 labels of dtype f32, f16, bf16, f64, i64 or i32, got u8", out, gbuf)
  end)

  it("a target of another shape or an integer dtype, an integer input", function()
    H.expect_error(function()
      local l, g = F.mse_loss_fused(x, ploss.rand({ 4, 3 }, { dtype = "f64" }), { out = out, grad_input = gbuf })
      return l, g
    end, "target: expected the input's shape [3, 4]", out, gbuf)
    H.expect_error(function()
      local l, g = F.huber_loss_fused(x, ploss.ones({ 3, 4 }, { dtype = "i64" }), { out = out, grad_input = gbuf })
      return l, g
    end, "target: expected float targets of dtype f32, f16, bf16 or f64, got i64", out, gbuf)
    H.expect_error(function()
      local l, g = F.l1_loss_fused(ploss.ones({ 3, 4 }, { dtype = "i32" }), y, { out = out, grad_input = gbuf })
      return l, g
    end, "input: expected a float tensor of dtype f32, f16, bf16 or f64, got i32", out, gbuf)
    for _, name in ipairs { "binary_cross_entropy", "mse_loss", "l1_loss", "huber_loss" } do
      H.expect_error(fused(name, { weight = { 1, 2 } }),
        "weight: expected a shape that broadcasts over the input [3, 4]", out, gbuf)
    end
    H.expect_error(fused("mse_loss", { weight = ploss.ones({ 3, 4 }, { dtype = "i64" }) }),
      "weight: expected a float dtype, got i64", out, gbuf)
  end)
end)

describe("TargetWeightedMSELoss (Torch7's WeightedMSECriterion)", function()
  -- Torch7's definition: MSE(x, w ⊙ y), the weight of the target's shape or of its shape
  -- without the first dim (one map for every sample)
  local function reference(X, Y, W, red, up)
    local n, sum, losses, grads = #X, 0, {}, {}
    for i = 1, n do
      local d = X[i] - W[i] * Y[i]
      losses[i], sum = d * d, sum + d * d
      grads[i] = 2 * d * (red == "none" and up[i] or red == "mean" and up / n or up)
    end
    return red == "none" and losses or red == "mean" and sum / n or sum, grads
  end

  it("gives the values derived by hand, with Torch7's name; the weight scales the target", function()
    -- w = [[1, 2], [0.5, 0]] for both samples; x = 1 then 2 everywhere:
    -- sample 1: w⊙y = [[1, 2], [1, 0]], d = [[0, −1], [0, 1]]; sample 2: w⊙y = [[0, 2], [2, 0]],
    -- d = [[2, 0], [0, 2]]: Σd² = 10, the mean over 8 elements 1.25, ∂/∂x = 2d/8
    local w = ploss.tensor({ { 1, 2 }, { 0.5, 0 } }, { dtype = "f64" })
    local x = ploss.tensor({ { { 1, 1 }, { 1, 1 } }, { { 2, 2 }, { 2, 2 } } }, { dtype = "f64" })
    local y = ploss.tensor({ { { 1, 1 }, { 2, 3 } }, { { 0, 1 }, { 4, 4 } } }, { dtype = "f64" })
    assert.are.equal(ploss.TargetWeightedMSELoss, ploss.WeightedMSECriterion)
    local crit = ploss.WeightedMSECriterion { weight = w }
    local loss, g = crit(x, y)
    assert.are.equal(1.25, loss)
    H.assert_close(g, { { { 0, -0.25 }, { 0, 0.25 } }, { { 0.5, 0 }, { 0, 0.5 } } }, { rtol = 1e-15 })
    crit.reduction = "sum"
    assert.are.equal(10, crit:forward(x, y))
  end)

  it("matches Torch7's definition for both weight shapes, every reduction and pass, f64 and f32", function()
    local x = ploss.randn({ 3, 4, 5 }, { dtype = "f64", seed = 1 })
    local y = ploss.randn({ 3, 4, 5 }, { dtype = "f64", seed = 2 })
    for _, form in ipairs { "the target's shape", "one map for every sample" } do
      local w = form == "the target's shape" and ploss.randn({ 3, 4, 5 }, { dtype = "f64", seed = 3 })
        or ploss.randn({ 4, 5 }, { dtype = "f64", seed = 4 })
      local W = w:expand(3, 4, 5):contiguous():flat()
      for _, dtype in ipairs { "f64", "f32" } do
        local xd, yd = x:type(dtype), y:type(dtype)
        local tol = dtype == "f64" and 1e-14 or 2e-6
        for _, r in ipairs(REDUCTIONS) do
          local up = r == "none" and ploss.randn({ 3, 4, 5 }, { dtype = dtype, seed = 5 }) or 1.5
          local XX, YY = xd:double():flat(), yd:double():flat()
          local want, grads = reference(XX, YY, W, r, r == "none" and up:double():flat() or up)
          local what = form .. " " .. dtype .. " " .. r
          local loss = F.target_weighted_mse_loss(xd, yd, { weight = w, reduction = r })
          H.assert_close(r == "none" and loss:double():flat() or { loss }, r == "none" and want or { want },
            { rtol = tol, what = what })
          local gb = F.target_weighted_mse_loss_backward(xd, yd, up, { weight = w, reduction = r })
          H.assert_close(gb:double():flat(), grads, { rtol = tol, atol = 1e-12, what = what .. " backward" })
        end
      end
    end
  end)

  it("has the gradient of central differences in f64; f16 and bf16 as the f64 of the rounded inputs", function()
    local x = ploss.randn({ 6, 7 }, { dtype = "f64", seed = 9 })
    local y = ploss.randn({ 6, 7 }, { dtype = "f64", seed = 10 })
    local w = ploss.rand({ 7 }, { dtype = "f64", low = -2, high = 2, seed = 11 })
    for _, r in ipairs { "mean", "sum" } do
      local o = { weight = w, reduction = r }
      local _, g = F.target_weighted_mse_loss_fused(x, y, o)
      H.gradcheck(function() return F.target_weighted_mse_loss(x, y, o) end, x, g, { what = r })
    end
    for _, dtype in ipairs { "f16", "bf16" } do
      local xr, yr = x:type(dtype), y:type(dtype)
      local rl, rg = F.target_weighted_mse_loss_fused(xr:double(), yr:double(), { weight = w })
      local loss, g = ploss.TargetWeightedMSELoss { weight = w }(xr, yr)
      assert.are.equal(dtype, g:dtype())
      H.assert_close({ loss }, { rl }, { rtol = 1e-5, what = dtype })
      local t = H.tol[dtype]
      H.assert_close(g:double(), rg, { rtol = t.rtol, atol = t.atol, what = dtype })
    end
  end)

  it("needs its weight, broadcastable to the target", function()
    local x, y = ploss.randn({ 2, 3 }), ploss.randn({ 2, 3 })
    H.expect_error(function() local c = ploss.TargetWeightedMSELoss() return c end,
      "TargetWeightedMSELoss: weight (w, broadcast over the target")
    H.expect_error(function() local c = ploss.WeightedMSECriterion(ploss.ones({ 3 })) return c end,
      "positional weights are not taken: {weight = w}")
    H.expect_error(function() F.target_weighted_mse_loss(x, y, { weight = ploss.ones({ 4 }) }) end,
      { "weight: expected a shape that broadcasts over the input [2, 3]", "PLOSS_ERR_SHAPE" })
    -- the C entry points: a NULL weight is refused (not taken for MSE's weight of 1), nothing written
    local ffi = require "ffi"
    local C = ploss.C
    local o = ffi.new("ploss_target_weighted_mse_loss_opts")
    C.ploss_target_weighted_mse_loss_opts_init(o)
    local out, g = ploss.full({}, 7), ploss.full({ 2, 3 }, 7)
    assert.are.equal(C.PLOSS_ERR_INVALID_ARGUMENT,
      C.ploss_target_weighted_mse_loss_fused(x:context(), x:dl(), y:dl(), nil, o, out:dl(), g:dl()))
    assert.truthy(ffi.string(C.ploss_last_error()):find("weight: tensor is NULL", 1, true))
    assert.are.equal(C.PLOSS_ERR_INVALID_ARGUMENT, C.ploss_target_weighted_mse_loss_backward(x:context(), x:dl(),
      y:dl(), nil, o, ploss.ones({}):dl(), g:dl()))
    assert.are.equal(7, out:item())
    H.assert_equal(g, ploss.full({ 2, 3 }, 7))
  end)
end)
