-- Pairs spec (suite 'cpu'): the losses of several embedding inputs on the CPU backend.
-- Triplet margin loss:
--  * values derived by hand (3-4-5 distances);
--  * an independent reference written here with PyTorch's semantics (pairwise_distance
--    ‖u − v + eps‖_p, the hinge clamp_min whose gradient passes at 0, the swap's min, the
--    soft margin log(1 + exp(d_ap − d_an))) for p = 1, 2, 3, swap, soft margin, every
--    reduction, forward, backward and fused;
--  * central differences in f64 for the three inputs;
--  * the soft margin's large gaps (finite where log(1 + exp(·)) overflows), identical
--    embeddings (a zero gradient, not NaN), an empty batch, strided views, f32/f16/bf16;
--  * bad input: a clear error naming the argument, nothing written.
-- TripletMarginWithDistanceLoss: PyTorch's values (torch 2.15, float64) for the cosine
-- distance, including its finite gradients at norms below 1e-8; the pairwise distance
-- bitwise TripletMarginLoss's; central differences; dtypes, views, NaN rows; bad options.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

---------------------------------------------------------------------------------------
-- The reference: PyTorch's triplet_margin_loss, written out on Lua tables (rows of D)
---------------------------------------------------------------------------------------

local function dist(u, v, p, eps)
  local s = 0
  for j = 1, #u do s = s + math.abs(u[j] - v[j] + eps) ^ p end
  return s ^ (1 / p)
end

-- ∂‖u − v + eps‖_p/∂u (norm's backward: 0 at a zero norm, sign(0) = 0)
local function ddist(u, v, p, eps)
  local d = dist(u, v, p, eps)
  local g = {}
  for j = 1, #u do
    local z = u[j] - v[j] + eps
    local s = z > 0 and 1 or (z < 0 and -1 or 0)
    g[j] = d == 0 and 0 or s * math.abs(z) ^ (p - 1) / d ^ (p - 1)
  end
  return g
end

-- Losses (per row) and gradients of Σ_i w_i·ℓ_i for the rows A, P, N (tables of rows).
local function reference(A, P, N, o, w)
  local p, eps, margin = o.p or 2, o.eps or 1e-6, o.margin or 1
  local losses, gA, gP, gN = {}, {}, {}, {}
  for i = 1, #A do
    local a, pp, n = A[i], P[i], N[i]
    local d_ap, d_an = dist(a, pp, p, eps), dist(a, n, p, eps)
    local u = a -- the row paired with the negative ("both": a tie, half each as torch.minimum)
    if o.swap then
      local d_pn = dist(pp, n, p, eps)
      if d_pn < d_an then d_an, u = d_pn, pp elseif d_pn == d_an then u = "both" end
    end
    local c
    if o.soft_margin then
      losses[i] = math.log(1 + math.exp(d_ap - d_an))
      c = 1 / (1 + math.exp(d_an - d_ap))
    else
      local t = margin + d_ap - d_an
      losses[i] = math.max(t, 0)
      c = t >= 0 and 1 or 0
    end
    local wi = type(w) == "table" and w[i] or w
    local g_ap = ddist(a, pp, p, eps)
    local h = u == "both" and 0.5 or 1
    local g_an, g_pn = ddist(a, n, p, eps), ddist(pp, n, p, eps)
    gA[i], gP[i], gN[i] = {}, {}, {}
    for j = 1, #a do
      gA[i][j] = wi * c * g_ap[j]
      gP[i][j] = -wi * c * g_ap[j]
      gN[i][j] = 0
      if u == a or u == "both" then
        gA[i][j] = gA[i][j] - h * wi * c * g_an[j]
        gN[i][j] = gN[i][j] + h * wi * c * g_an[j]
      end
      if u == pp or u == "both" then
        gP[i][j] = gP[i][j] - h * wi * c * g_pn[j]
        gN[i][j] = gN[i][j] + h * wi * c * g_pn[j]
      end
    end
  end
  return losses, gA, gP, gN
end

local reduce = H.reduce_losses

local function weight(reduction, n, up)
  up = up or 1
  return reduction == "mean" and up / n or up
end

local function rows(t) return t:to("cpu"):double():totable() end

local function triplet_inputs(n, d, dtype, seed, device)
  local o = { dtype = "f64" }
  local a = ploss.randn({ n, d }, { dtype = "f64", seed = seed })
  local p = ploss.randn({ n, d }, { dtype = "f64", seed = seed + 1, std = 0.7 })
  local q = ploss.randn({ n, d }, { dtype = "f64", seed = seed + 2, std = 1.2 })
  -- positives near their anchors half of the time: rows with and without an active hinge
  local av, pv = a:totable(), p:totable()
  for i = 1, n, 2 do
    for j = 1, d do pv[i][j] = av[i][j] + 0.3 * pv[i][j] end
  end
  p = ploss.tensor(pv, o)
  local cast = function(t) return t:to(device or "cpu"):type(dtype or "f64") end
  return cast(a), cast(p), cast(q)
end

local OPTION_SETS = {
  {},
  { margin = 0.5 },
  { margin = 2, p = 1 },
  { p = 3, eps = 1e-3 },
  { swap = true },
  { swap = true, p = 1 },
  { soft_margin = true },
  { soft_margin = true, eps = 0, swap = true },
}

local label = H.options_label

local with = H.with

describe("TripletMarginLoss", function()
  it("gives the values derived by hand (3-4-5 distances, eps = 0)", function()
    -- row 1: d_ap = 5 (a − p = (3, 4)), d_an = 2 → ℓ = 5 − 2 + 1 = 4
    -- row 2: d_ap = 1, d_an = 5 → ℓ = max(0, −3) = 0
    local a = ploss.tensor({ { 0, 0 }, { 1, 1 } }, { dtype = "f64" })
    local p = ploss.tensor({ { -3, -4 }, { 1, 2 } }, { dtype = "f64" })
    local n = ploss.tensor({ { 2, 0 }, { 4, 5 } }, { dtype = "f64" })
    local crit = ploss.TripletMarginLoss { eps = 0, reduction = "none" }
    H.assert_close(crit:forward(a, p, n), { 4, 0 }, { rtol = 1e-15 })
    local crit_mean = ploss.TripletMarginLoss { eps = 0 }
    assert.are.equal(2, crit_mean:forward(a, p, n))
    -- mean: ω = 1/2; ∂ℓ/∂a = (a − p)/5 − (a − n)/2 = (3/5, 4/5) − (−1, 0) = (1.6, 0.8)
    local ga, gp, gn = crit_mean:backward(a, p, n)
    H.assert_close(ga, { 0.8, 0.4, 0, 0 }, { rtol = 1e-15 })
    H.assert_close(gp, { -0.3, -0.4, 0, 0 }, { rtol = 1e-15 })
    H.assert_close(gn, { -0.5, 0, 0, 0 }, { rtol = 1e-15 })
    -- soft margin, 'sum': ℓ_1 = softplus(3), ℓ_2 = softplus(−4)
    local soft = ploss.TripletMarginLoss { eps = 0, soft_margin = true, reduction = "sum" }
    local loss, sa = soft(a, p, n)
    H.assert_close(loss, math.log(1 + math.exp(3)) + math.log(1 + math.exp(-4)), { rtol = 1e-14 })
    local s1 = 1 / (1 + math.exp(-3))
    H.assert_close(sa:select(1, 1), { s1 * 1.6, s1 * 0.8 }, { rtol = 1e-14 })
    -- p = 1: d_ap = 7, d_an = 2 → 6; swap: d_pn(row 1) = |(5, 4)|₂ ≈ 6.4 > 2 keeps d_an
    H.assert_close(F.triplet_margin(a, p, n, { eps = 0, p = 1, reduction = "none" }), { 6, 0 }, { rtol = 1e-15 })
    H.assert_close(F.triplet_margin(a, p, n, { eps = 0, swap = true, reduction = "none" }), { 4, 0 }, { rtol = 1e-15 })
  end)

  it("matches PyTorch's semantics (written out in the spec) for every option set and reduction", function()
    local a, p, n = triplet_inputs(37, 11, "f64", 101)
    local A, P, N = rows(a), rows(p), rows(n)
    for _, o in ipairs(OPTION_SETS) do
      for _, r in ipairs { "none", "mean", "sum" } do
        local opts = with(o, { reduction = r })
        local what = label(opts)
        local losses, gA, gP, gN = reference(A, P, N, opts, weight(r, 37))
        local want = reduce(losses, r)
        local tol = { rtol = 1e-12, atol = 1e-14, what = what }
        H.assert_close(F.triplet_margin(a, p, n, opts), want, tol)
        local crit = ploss.TripletMarginLoss(opts)
        local ga, gp, gn = crit:backward(a, p, n)
        H.assert_close(ga, gA, tol)
        H.assert_close(gp, gP, tol)
        H.assert_close(gn, gN, tol)
        local l2, fa, fp, fn = crit(a, p, n)
        H.assert_close(r == "none" and l2 or { l2 }, r == "none" and want or { want }, tol)
        H.assert_close(fa, gA, tol)
        H.assert_close(fp, gP, tol)
        H.assert_close(fn, gN, tol)
      end
    end
  end)

  it("backward takes the upstream gradient (a number, a tensor per row) and fused a scale", function()
    local a, p, n = triplet_inputs(9, 4, "f64", 7)
    local A, P, N = rows(a), rows(p), rows(n)
    local up = {}
    for i = 1, 9 do up[i] = (i - 5) / 3 end
    local _, gA, gP, gN = reference(A, P, N, { swap = true }, up)
    local ga, gp, gn = F.triplet_margin_backward(a, p, n, ploss.tensor(up, { dtype = "f64" }),
      { swap = true, reduction = "none" })
    H.assert_close(ga, gA, { rtol = 1e-12, atol = 1e-14 })
    H.assert_close(gp, gP, { rtol = 1e-12, atol = 1e-14 })
    H.assert_close(gn, gN, { rtol = 1e-12, atol = 1e-14 })
    _, gA = reference(A, P, N, {}, 2.5 / 9)
    ga = ploss.TripletMarginLoss {}:backward(a, p, n, 2.5)
    H.assert_close(ga, gA, { rtol = 1e-12, atol = 1e-14 })
    local _, fa = ploss.TripletMarginLoss {}(a, p, n, 2.5)
    H.assert_close(fa, gA, { rtol = 1e-12, atol = 1e-14 })
    -- the functional fused pass with scale, and 'none' fused = gradient of the sum times scale
    local loss, sa = F.triplet_margin_fused(a, p, n, { reduction = "none", scale = -2 })
    _, gA = reference(A, P, N, {}, -2)
    H.assert_close(sa, gA, { rtol = 1e-12, atol = 1e-14 })
    assert.are.same({ 9 }, loss:size())
  end)

  it("has the gradient of central differences in f64 for each input", function()
    local a, p, n = triplet_inputs(6, 5, "f64", 55)
    for _, o in ipairs(OPTION_SETS) do
      for _, r in ipairs { "mean", "sum" } do
        local opts = with(o, { reduction = r })
        local grads = { F.triplet_margin_fused(a, p, n, opts) }
        local inputs = { a, p, n }
        for k = 1, 3 do
          local f = function()
            return F.triplet_margin(inputs[1], inputs[2], inputs[3], opts)
          end
          H.gradcheck(f, inputs[k], grads[k + 1], { rtol = 1e-6, atol = 1e-8, what = label(opts) .. " input " .. k })
        end
      end
    end
  end)

  it("keeps the soft margin finite for gaps where log(1 + exp(·)) overflows (f32)", function()
    -- d_ap = 200, d_an = 0.1: softplus(199.9) = 199.9, σ = 1
    local a = ploss.tensor({ { 0, 0 } }, { dtype = "f32" })
    local p = ploss.tensor({ { 120, 160 } }, { dtype = "f32" })
    local n = ploss.tensor({ { 0.1, 0 } }, { dtype = "f32" })
    local loss, ga, gp, gn = ploss.TripletMarginLoss { soft_margin = true, eps = 0 }(a, p, n)
    H.assert_close(loss, 199.9, { rtol = 1e-6 })
    H.assert_close(ga, { -0.6 + 1, -0.8 }, { rtol = 1e-6 })
    H.assert_close(gp, { 0.6, 0.8 }, { rtol = 1e-6 })
    H.assert_close(gn, { -1, 0 }, { rtol = 1e-6 })
    -- and the other side: a gap of −200 gives a loss of e^−200 (0 in f32) and a zero gradient
    local l2, g2 = ploss.TripletMarginLoss { soft_margin = true, eps = 0 }(a, n, p)
    assert.are.equal(0, l2)
    H.assert_close(g2, { 0, 0 }, { atol = 1e-30 })
  end)

  it("costs rows of no element the loss of zero distances, for any number of rows", function()
    local few = ploss.empty({ 3, 0 }, { dtype = "f32" })
    H.assert_close(F.triplet_margin(few, few, few, { reduction = "none" }), { 1, 1, 1 }, { rtol = 0 })
    -- 2^31 rows of nothing: a closed form, not a walk over the rows
    local many = ploss.empty({ 2 ^ 31, 0 }, { dtype = "f32" })
    local loss, ga = F.triplet_margin_fused(many, many, many, { reduction = "sum", margin = 0.5 })
    assert.are.equal(2 ^ 30, loss)
    assert.are.same({ 2 ^ 31, 0 }, ga:size())
    H.assert_close(F.triplet_margin(many, many, many, { soft_margin = true }), math.log(2), { rtol = 1e-7 })
  end)

  it("gives identical embeddings a zero gradient, not NaN (eps = 0)", function()
    local x = ploss.tensor({ { 1, 2, 3 }, { -1, 0, 1 } }, { dtype = "f64" })
    for _, o in ipairs { { eps = 0 }, { eps = 0, soft_margin = true }, { eps = 0, p = 1 }, { eps = 0, p = 3, swap = true } } do
      local loss, ga, gp, gn = ploss.TripletMarginLoss(o)(x, x:clone(), x:clone())
      H.assert_close(loss, o.soft_margin and math.log(2) or 1, { rtol = 1e-15, what = label(o) })
      for _, g in ipairs { ga, gp, gn } do H.assert_equal(g, { 0, 0, 0, 0, 0, 0 }, { what = label(o) }) end
    end
    -- with PyTorch's eps the distances are eps·√D: gradients finite and the anchor's terms cancel
    local _, ga = ploss.TripletMarginLoss {}(x, x:clone(), x:clone())
    H.assert_close(ga, { 0, 0, 0, 0, 0, 0 }, { atol = 1e-12 })
  end)

  it("propagates NaN and ∞: a NaN loss has a NaN gradient on its rows, other rows keep their values", function()
    local nan, inf = 0 / 0, math.huge
    local T = function(t) return ploss.tensor(t, { dtype = "f64" }) end
    -- row 2: d_ap = 5, d_an = 1 → ℓ = 5 (margin 1); 'sum' gradients of row 2:
    --   ∂/∂a = (a − p)/5 − (a − n)/1 = (0.4, −0.8), ∂/∂p = (0.6, 0.8), ∂/∂n = (a − n)/1 = (−1, 0)
    local p, n = T { { 3, 4 }, { 3, 4 } }, T { { 6, 8 }, { 1, 0 } }
    local N3 = { nan, nan }
    for _, row1 in ipairs { { nan, 0 }, { inf, 0 }, { 0, -inf } } do
      local a = T { row1, { 0, 0 } }
      local what = "anchor row 1 = (" .. row1[1] .. ", " .. row1[2] .. ")"
      local o = { eps = 0 }
      H.assert_equal(F.triplet_margin(a, p, n, with(o, { reduction = "none" })), { nan, 5 }, { what = what })
      local lm = F.triplet_margin(a, p, n, o)
      assert.is_true(lm ~= lm, what)
      local ls, ga, gp, gn = F.triplet_margin_fused(a, p, n, with(o, { reduction = "sum" }))
      assert.is_true(ls ~= ls, what)
      H.assert_close(ga, { N3, { 0.4, -0.8 } }, { rtol = 1e-15, what = what })
      H.assert_close(gp, { N3, { 0.6, 0.8 } }, { rtol = 1e-15, what = what })
      H.assert_close(gn, { N3, { -1, 0 } }, { rtol = 1e-15, what = what })
      -- the soft margin: σ(4) for row 2, NaN (not 0) for row 1
      local s4 = 1 / (1 + math.exp(-4))
      local ss, sa, sp, sn = F.triplet_margin_fused(a, p, n, { eps = 0, soft_margin = true, reduction = "sum" })
      assert.is_true(ss ~= ss, what)
      H.assert_close(sa, { N3, { s4 * 0.4, -s4 * 0.8 } }, { rtol = 1e-14, what = what })
      H.assert_close(sp, { N3, { s4 * 0.6, s4 * 0.8 } }, { rtol = 1e-14, what = what })
      H.assert_close(sn, { N3, { -s4, 0 } }, { rtol = 1e-14, what = what })
      -- the per-row upstream gradient of backward
      local ba = F.triplet_margin_backward(a, p, n, T { 1, 2 }, with(o, { reduction = "none" }))
      H.assert_close(ba, { N3, { 0.8, -1.6 } }, { rtol = 1e-15, what = what })
    end
    -- a NaN in the negative only (with and without swap): ℓ_1 NaN, the whole triplet's gradient NaN
    local a = T { { 0, 0 }, { 0, 0 } }
    for _, o in ipairs { { eps = 0 }, { eps = 0, swap = true }, { eps = 0, soft_margin = true, swap = true } } do
      local nn1 = T { { nan, 1 }, { 1, 0 } }
      local l, ga, gp, gn = F.triplet_margin_fused(a, p, nn1, with(o, { reduction = "none" }))
      H.assert_close(l, { nan, o.soft_margin and math.log(1 + math.exp(4)) or 5 }, { rtol = 1e-15, what = label(o) })
      for _, g in ipairs { ga, gp, gn } do
        local row = g:select(1, 1):totable()
        assert.is_true(row[1] ~= row[1] and row[2] ~= row[2], label(o))
      end
    end
  end)

  it("passes a NaN or ∞ upstream gradient only to rows whose hinge is active (autograd's clamp backward)", function()
    local nan, inf = 0 / 0, math.huge
    local T = function(t) return ploss.tensor(t, { dtype = "f64" }) end
    -- row 1: d_ap = 5, d_an = 10: 5 − 10 + 1 < 0, inactive; row 2 as in the case above
    local a, p, n = T { { 0, 0 }, { 0, 0 } }, T { { 3, 4 }, { 3, 4 } }, T { { 6, 8 }, { 1, 0 } }
    local o = { eps = 0, reduction = "none" }
    local ga, gp, gn = F.triplet_margin_backward(a, p, n, T { nan, 2 }, o)
    H.assert_close(ga, { { 0, 0 }, { 0.8, -1.6 } }, { rtol = 1e-15 })
    H.assert_close(gp, { { 0, 0 }, { 1.2, 1.6 } }, { rtol = 1e-15 })
    H.assert_close(gn, { { 0, 0 }, { -2, 0 } }, { rtol = 1e-15 })
    ga = F.triplet_margin_backward(a, p, n, T { -inf, 2 }, o)
    H.assert_close(ga, { { 0, 0 }, { 0.8, -1.6 } }, { rtol = 1e-15 })
    -- a NaN 'mean' upstream gradient: NaN on the active row only
    local N2 = { nan, nan }
    ga, gp, gn = ploss.TripletMarginLoss { eps = 0 }:backward(a, p, n, nan)
    H.assert_close(ga, { { 0, 0 }, N2 })
    H.assert_close(gn, { { 0, 0 }, N2 })
    -- the cosine distance: its last row has no active hinge (1 − cos(a, p) = 0, 1 − cos(a, n) = 2)
    local ca, cp, cn = T { { 1, 2, 3 }, { 0.5, -1, 2 } }, T { { 2, 0, 1 }, { 0.5, -1, 2 } },
      T { { -1, 0.5, 2 }, { -0.5, 1, -2 } }
    local k = { distance = "cosine", reduction = "none" }
    local _, ra = F.triplet_margin_with_distance_fused(ca, cp, cn, k)
    local wa, wp, wn = F.triplet_margin_with_distance_backward(ca, cp, cn, T { 1, nan }, k)
    H.assert_equal(wa, { ra:totable()[1], { 0, 0, 0 } })
    H.assert_equal(wp:select(1, 2), { 0, 0, 0 })
    H.assert_equal(wn:select(1, 2), { 0, 0, 0 })
  end)

  it("splits the gradient half and half at a swap tie d(p, n) = d(a, n), as torch.minimum", function()
    -- a = (3, 4), p = (4, 3), n = (0, 0), eps = 0: d_an = d_pn = 5, d_ap = √2, margin 5 → ℓ = √2
    local T = function(t) return ploss.tensor(t, { dtype = "f64" }) end
    local a, p, n = T { { 3, 4 } }, T { { 4, 3 } }, T { { 0, 0 } }
    local l, ga, gp, gn = F.triplet_margin_fused(a, p, n, { eps = 0, swap = true, margin = 5, reduction = "sum" })
    H.assert_close(l, math.sqrt(2), { rtol = 1e-15 })
    local r = 1 / math.sqrt(2)
    -- ∂ℓ/∂a = (a − p)/√2 − ½(a − n)/5, ∂ℓ/∂p = −(a − p)/√2 − ½(p − n)/5, ∂ℓ/∂n = ½(a − n)/5 + ½(p − n)/5
    H.assert_close(ga, { { -r - 0.3, r - 0.4 } }, { rtol = 1e-15 })
    H.assert_close(gp, { { r - 0.4, -r - 0.3 } }, { rtol = 1e-15 })
    H.assert_close(gn, { { 0.7, 0.7 } }, { rtol = 1e-15 })
    -- the anchor equal to the positive with PyTorch's eps (autograd's values: 1.0607 | −0.3536)
    local x = T { { 0.3, -0.2 } }
    local _, ga2, gp2, gn2 = F.triplet_margin_fused(x, x:clone(), T { { 1.0, 0.5 } }, { swap = true, margin = 5 })
    local h = 0.5 * r
    H.assert_close(ga2, { { r + h, r + h } }, { rtol = 1e-9 })
    H.assert_close(gp2, { { h - r, h - r } }, { rtol = 1e-9 })
    H.assert_close(gn2, { { -2 * h, -2 * h } }, { rtol = 1e-9 })
  end)

  it("refuses a margin <= 0 for the hinge, as PyTorch's TripletMarginLoss, and a margin with the soft margin", function()
    local a, p, n = triplet_inputs(4, 3, "f64", 5)
    for _, m in ipairs { 0, -1 } do
      H.expect_error(function() ploss.TripletMarginLoss { margin = m } end, "opts.margin: " .. m .. " is not > 0")
      H.expect_error(function() F.triplet_margin(a, p, n, { margin = m }) end, "opts.margin: " .. m .. " is not > 0")
      local out, g = ploss.full({}, 7, { dtype = "f64" }), ploss.full({ 4, 3 }, 7, { dtype = "f64" })
      H.expect_error(function() F.triplet_margin_fused(a, p, n, { margin = m, out = out, grad_anchor = g }) end,
        "opts.margin", out, g)
      -- an option edited after construction: refused by the engine's own check
      local crit = ploss.TripletMarginLoss {}
      crit.margin = m
      H.expect_error(function() crit:forward(a, p, n) end, "opts.margin: " .. m .. " is not > 0")
      -- the C entry point itself
      local ffi, C = require "ffi", ploss.C
      local o = ffi.new("ploss_triplet_margin_opts")
      C.ploss_triplet_margin_opts_init(o)
      o.margin = m
      assert.are.equal(C.PLOSS_ERR_INVALID_ARGUMENT,
        C.ploss_triplet_margin_forward(a:context(), a:dl(), p:dl(), n:dl(), o, out:dl()))
      assert.truthy(ffi.string(C.ploss_last_error()):find("opts.margin", 1, true))
      -- soft_margin = true has no margin: one given with it is refused (Lua and C alike)
      H.expect_error(function()
        local r = F.triplet_margin(a, p, n, { margin = m, soft_margin = true })
        return r
      end, "opts.margin: " .. m .. " with soft_margin = true")
      o.soft_margin = 1
      assert.are.equal(C.PLOSS_ERR_INVALID_ARGUMENT,
        C.ploss_triplet_margin_forward(a:context(), a:dl(), p:dl(), n:dl(), o, out:dl()))
      assert.truthy(ffi.string(C.ploss_last_error()):find("with soft_margin = true", 1, true))
    end
    -- the default margin goes with it (a table cannot tell it from one left out)
    H.assert_close(F.triplet_margin(a, p, n, { margin = 1, soft_margin = true }),
      F.triplet_margin(a, p, n, { soft_margin = true }), { rtol = 0 })
    local x, y = triplet_inputs(4, 3, "f64", 6), ploss.tensor({ 0, 0, 1, 1 }, { dtype = "i64" })
    H.expect_error(function()
      local r = ploss.BatchHardTripletLoss { soft_margin = true, margin = 0.5 }:forward(x, y)
      return r
    end, "opts.margin: 0.5 with soft_margin = true")
    H.assert_close(ploss.BatchHardTripletLoss { soft_margin = true, margin = 0.3 }:forward(x, y),
      ploss.BatchHardTripletLoss { soft_margin = true }:forward(x, y), { rtol = 0 })
  end)

  it("gives an empty batch a NaN mean, a zero sum and empty gradients", function()
    local e = ploss.empty({ 0, 4 }, { dtype = "f32" })
    local loss, ga = ploss.TripletMarginLoss {}(e, e:clone(), e:clone())
    assert.is_true(loss ~= loss)
    assert.are.same({ 0, 4 }, ga:size())
    assert.are.equal(0, F.triplet_margin(e, e:clone(), e:clone(), { reduction = "sum" }))
    assert.are.same({ 0 }, F.triplet_margin(e, e:clone(), e:clone(), { reduction = "none" }):size())
  end)

  it("reads any strides: transposed and sliced views equal their contiguous copies", function()
    local a, p, n = triplet_inputs(8, 6, "f64", 21)
    local at = a:t():contiguous():t()           -- column-major
    local pw = ploss.randn({ 8, 12 }, { dtype = "f64", seed = 3 }):narrow(2, 4, 6):copy(p) -- row stride 12
    local loss, ga, gp, gn = F.triplet_margin_fused(a, p, n, { swap = true })
    local ga2 = ploss.empty({ 6, 8 }, { dtype = "f64" }):t()
    local l2, sa, sp, sn = F.triplet_margin_fused(at, pw, n, { swap = true, grad_anchor = ga2 })
    H.assert_equal(l2, loss)
    H.assert_equal(sa, ga)
    H.assert_equal(ga2, ga)
    H.assert_equal(sp, gp)
    H.assert_equal(sn, gn)
  end)

  it("computes f32, f16 and bf16 in fp32 (and f64 in f64), gradients in the input dtype", function()
    local a, p, n = triplet_inputs(33, 17, "f64", 77)
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local ad, pd, nd = a:type(dtype), p:type(dtype), n:type(dtype)
      local ref_loss, ra, rp, rn = F.triplet_margin_fused(ad:double(), pd:double(), nd:double(), { swap = true })
      local loss, ga, gp, gn = ploss.TripletMarginLoss { swap = true }(ad, pd, nd)
      assert.are.equal(dtype, ga:dtype())
      local t = H.tol[dtype]
      H.assert_close(loss, ref_loss, { rtol = 1e-6, what = dtype .. " loss" })
      H.assert_close(ga:double(), ra, { rtol = t.rtol, atol = t.atol, what = dtype })
      H.assert_close(gp:double(), rp, { rtol = t.rtol, atol = t.atol, what = dtype })
      H.assert_close(gn:double(), rn, { rtol = t.rtol, atol = t.atol, what = dtype })
      assert.are.equal("f32", F.triplet_margin(ad, pd, nd, { reduction = "none" }):dtype())
    end
  end)

  it("is deterministic: the same call gives bitwise the same loss and gradients", function()
    local a, p, n = triplet_inputs(1000, 33, "f32", 5)
    local l1, g1 = F.triplet_margin_fused(a, p, n, { soft_margin = true })
    local l2, g2 = F.triplet_margin_fused(a, p, n, { soft_margin = true })
    assert.are.equal(l1, l2)
    H.assert_equal(g1, g2)
  end)

  it("takes one triplet of D values (PyTorch's unbatched form): its 1×D view's values, a 0-d 'none' loss", function()
    local a = ploss.tensor({ 0.2, -1, 0.5 }, { dtype = "f64" })
    local p = ploss.tensor({ 0.4, -0.2, 0.1 }, { dtype = "f64" })
    local n = ploss.tensor({ 1.1, 0.3, -0.6 }, { dtype = "f64" })
    -- by hand: d_ap = ‖(−0.2, −0.8, 0.4) + ε‖, d_an = ‖(−0.9, −1.3, 1.1) + ε‖, margin 5
    local function dist(u, v)
      local s = 0
      for k = 1, 3 do s = s + (u[k] - v[k] + 1e-6) ^ 2 end
      return math.sqrt(s)
    end
    local A, Pv, Nv = a:totable(), p:totable(), n:totable()
    local want = dist(A, Pv) - dist(A, Nv) + 5
    for _, crit in ipairs { ploss.TripletMarginLoss { margin = 5 }, ploss.TripletMarginWithDistanceLoss { margin = 5 } } do
      local l, ga, gp, gn = crit(a, p, n)
      H.assert_close({ l }, { want }, { rtol = 1e-14 })
      local lb, gab, gpb, gnb = crit(a:view(1, 3), p:view(1, 3), n:view(1, 3))
      assert.are.equal(lb, l)
      assert.are.same({ 3 }, ga:size())
      H.assert_equal(ga, gab:view(3))
      H.assert_equal(gp, gpb:view(3))
      H.assert_equal(gn, gnb:view(3))
      crit.reduction = "none"
      local ln = crit:forward(a, p, n)
      assert.are.equal(0, ln:dim())
      H.assert_close({ ln:item() }, { want }, { rtol = 1e-14 })
      local gb = crit:backward(a, p, n, ploss.tensor(2.0, { dtype = "f64" })):totable()
      for k, v in ipairs(gab:view(3):totable()) do assert.are.equal(2 * v, gb[k]) end
    end
  end)

  it("refuses bad input with an error naming the argument, writing nothing", function()
    local a, p, n = triplet_inputs(4, 3, "f32", 9)
    local out = ploss.empty({}, { dtype = "f32" })
    local g = { ploss.empty({ 4, 3 }), ploss.empty({ 4, 3 }), ploss.empty({ 4, 3 }) }
    local fo = { out = out, grad_anchor = g[1], grad_positive = g[2], grad_negative = g[3] }
    local function fused(x, y, z, extra) return F.triplet_margin_fused(x, y, z, with(fo, extra or {})) end
    -- D mismatch, N mismatch, rank, dtype
    H.expect_error(function() fused(a, p, ploss.randn({ 4, 5 })) end,
      { "negative: expected [4, 3] (the shape of anchor)", "PLOSS_ERR_SHAPE" }, out, g[1], g[2], g[3])
    H.expect_error(function() fused(a, ploss.randn({ 5, 3 }), n) end, "positive: expected [4, 3]", out, g[1], g[2], g[3])
    H.expect_error(function() fused(ploss.randn({ 3, 2, 2 }), p, n) end,
      "anchor: expected N×D embeddings (2 dims) or one embedding of D values (1 dim)", out, g[1])
    H.expect_error(function() fused(ploss.randn({ 3 }), p, n) end, "positive: expected [3] (the shape of anchor)", out, g[1])
    H.expect_error(function() fused(a, p:double(), n) end, { "positive: expected f32, got f64", "PLOSS_ERR_DTYPE" }, out, g[1])
    H.expect_error(function() fused(ploss.zeros({ 4, 3 }, { dtype = "i64" }), p, n) end,
      "anchor: expected embeddings of dtype f32, f16, bf16 or f64", out, g[1])
    -- outputs of the wrong shape or dtype, or overlapping an input or each other
    H.expect_error(function() fused(a, p, n, { grad_positive = ploss.empty({ 3, 4 }) }) end,
      "grad_positive: expected [4, 3] (the shape of positive)", out, g[1], g[3])
    H.expect_error(function() fused(a, p, n, { grad_negative = ploss.empty({ 4, 3 }, { dtype = "f64" }) }) end,
      "grad_negative: expected f32", out, g[1], g[2])
    H.expect_error(function() fused(a, p, n, { grad_negative = g[1] }) end, "PLOSS_ERR_ALIAS", out, g[1], g[2])
    H.expect_error(function() fused(a, p, n, { grad_anchor = p }) end, { "grad_anchor", "PLOSS_ERR_ALIAS" }, out, g[2], g[3])
    H.expect_error(function() fused(a, p, n, { out = ploss.empty({ 4 }) }) end, "opts.out: expected a 0-d tensor or shape [1]", g[1], g[2])
    -- buffers that are not tensors are named before anything runs
    for _, bad in ipairs { {}, "a", true, 5 } do
      H.expect_error(function() fused(a, p, n, { grad_anchor = bad }) end,
        "triplet_margin_fused: opts.grad_anchor: expected a ploss tensor (a buffer to write into)", out, g[2], g[3])
      H.expect_error(function() fused(a, p, n, { out = bad }) end, "opts.out: expected a ploss tensor", g[1], g[2])
    end
    H.expect_error(function()
      F.triplet_margin_backward(a, p, n, ploss.ones({ 3 }),
        { grad_anchor = g[1], grad_positive = g[2], grad_negative = g[3], reduction = "none" })
    end, "gradOutput: expected [4] (one value per sample", g[1], g[2], g[3])
    -- options
    H.expect_error(function() fused(a, p, n, { p = 0.5 }) end, "opts.p: 0.5 is not a finite number >= 1", out, g[1])
    H.expect_error(function() fused(a, p, n, { eps = -1 }) end, "opts.eps: -1 is not a finite number >= 0", out, g[1])
    H.expect_error(function() fused(a, p, n, { margin = 0 / 0 }) end, "opts.margin: nan is not a finite number", out, g[1])
    H.expect_error(function() ploss.TripletMarginLoss { inplace = true } end, "has no in-place gradient")
    H.expect_error(function() ploss.TripletMarginLoss { inplace = false } end, "has no in-place gradient")
    -- the options an unknown one's message lists are those the loss takes: no inplace
    H.expect_error(function() ploss.TripletMarginLoss { swp = true } end,
      "unknown option 'swp' (known: eps, grad_anchor, grad_negative, grad_positive, margin, p, reduction, " ..
      "soft_margin, swap)")
    H.expect_error(function() ploss.TripletMarginLoss { swap = 1 } end, "swap: expected a boolean")
    H.expect_error(function() ploss.TripletMarginLoss {}:forward(a, p) end, "negative: expected a ploss tensor")
    -- the C entry point itself: NULL tensors and in-place requests
    local C = ploss.C
    local o = require("ffi").new("ploss_triplet_margin_opts")
    C.ploss_triplet_margin_opts_init(o)
    local ctx = a:context()
    assert.are.equal(C.PLOSS_ERR_INVALID_ARGUMENT,
      C.ploss_triplet_margin_fused(ctx, a:dl(), p:dl(), n:dl(), o, out:dl(), g[1]:dl(), nil, g[3]:dl()))
    assert.truthy(require("ffi").string(C.ploss_last_error()):find("grad_positive: tensor is NULL", 1, true))
    o.inplace = 1
    assert.are.equal(C.PLOSS_ERR_INVALID_ARGUMENT,
      C.ploss_triplet_margin_fused(ctx, a:dl(), p:dl(), n:dl(), o, out:dl(), g[1]:dl(), g[2]:dl(), g[3]:dl()))
    assert.truthy(require("ffi").string(C.ploss_last_error()):find("opts.inplace", 1, true))
  end)
end)

---------------------------------------------------------------------------------------
-- Batch-hard triplet loss: the reference, a brute force over every pair on Lua tables
---------------------------------------------------------------------------------------

local COS_EPS = 1e-8

local function norm(u)
  local s = 0
  for j = 1, #u do s = s + u[j] * u[j] end
  return math.sqrt(s)
end

-- d(u, v) and its gradients with respect to u and v
local function pair(u, v, distance)
  local D = #u
  local gu, gv = {}, {}
  if distance == "cosine" then
    local nu, nv, dot = norm(u), norm(v), 0
    for j = 1, D do dot = dot + u[j] * v[j] end
    local cu, cv = math.max(nu, COS_EPS), math.max(nv, COS_EPS)
    for j = 1, D do
      gu[j] = -v[j] / (cu * cv) + (nu > COS_EPS and dot * u[j] / (cu ^ 3 * cv) or 0)
      gv[j] = -u[j] / (cu * cv) + (nv > COS_EPS and dot * v[j] / (cv ^ 3 * cu) or 0)
    end
    return 1 - dot / (cu * cv), gu, gv
  end
  local s = 0
  for j = 1, D do s = s + (u[j] - v[j]) ^ 2 end
  local d = distance == "squared" and s or math.sqrt(s)
  for j = 1, D do
    local z = u[j] - v[j]
    local k = distance == "squared" and 2 or (d > 0 and 1 / d or 0)
    gu[j], gv[j] = k * z, -k * z
  end
  return d, gu, gv
end

-- Per-anchor losses, the active count and the gradient of Σ_i w_i·ℓ_i (w: a number or per
-- anchor), mining the hardest positive/negative over the full distance matrix.
local function batch_hard_reference(X, Y, o, w)
  local n, distance, margin = #X, o.distance or "euclidean", o.margin or 0.3
  local losses, grad, active = {}, {}, 0
  for i = 1, n do
    grad[i] = {}
    for j = 1, #X[i] do grad[i][j] = 0 end
  end
  local chosen = {}
  for i = 1, n do
    local bp, bn, dp, dn
    for j = 1, n do
      if j ~= i then
        local d = pair(X[i], X[j], distance)
        if Y[j] == Y[i] then
          if not bp or d > dp then bp, dp = j, d end
        elseif not bn or d < dn then
          bn, dn = j, d
        end
      end
    end
    chosen[i] = { bp, bn }
    losses[i] = 0
    if bp and bn then
      active = active + 1
      local d_ap, gap_i, gap_p = pair(X[i], X[bp], distance)
      local d_an, gan_i, gan_n = pair(X[i], X[bn], distance)
      local c
      if o.soft_margin then
        losses[i] = math.log(1 + math.exp(d_ap - d_an))
        c = 1 / (1 + math.exp(d_an - d_ap))
      else
        local t = d_ap - d_an + margin
        losses[i] = math.max(t, 0)
        c = t >= 0 and 1 or 0
      end
      local wi = type(w) == "table" and w[i] or w
      if type(w) == "function" then wi = w(i) end
      for j = 1, #X[i] do
        grad[i][j] = grad[i][j] + wi * c * (gap_i[j] - gan_i[j])
        grad[bp][j] = grad[bp][j] + wi * c * gap_p[j]
        grad[bn][j] = grad[bn][j] - wi * c * gan_n[j]
      end
    end
  end
  return losses, grad, active, chosen
end

local function labelled(n, d, classes, seed, singletons)
  local x = ploss.randn({ n, d }, { dtype = "f64", seed = seed })
  local y = {}
  for i = 1, n do y[i] = (i * 7 + seed) % classes end
  for k = 1, singletons or 0 do y[k] = 1000 + k end -- labels seen once: inactive anchors
  return x, ploss.tensor(y, { dtype = "i64" }), y
end

local BH_OPTIONS = {
  {},
  { margin = 1 },
  { distance = "squared", margin = 2 },
  { distance = "cosine", margin = 0.1 },
  { soft_margin = true },
  { soft_margin = true, distance = "cosine" },
}

describe("TripletMarginWithDistanceLoss", function()
  -- rows: a generic triplet; a zero anchor; an anchor shorter than the cosine's 1e-8; a
  -- positive equal to its anchor and a negative opposite to it (no active hinge)
  local A = { { 1, 2, 3 }, { 0, 0, 0 }, { 1e-9, 0, 0 }, { 0.5, -1, 2 } }
  local P = { { 2, 0, 1 }, { 1, 1, 1 }, { 1, 0, 0 }, { 0.5, -1, 2 } }
  local N = { { -1, 0.5, 2 }, { 3, 0, -1 }, { 0, 1, 0 }, { -0.5, 1, -2 } }
  local function t64(v) return ploss.tensor(v, { dtype = "f64" }) end

  it("gives PyTorch's values for the cosine distance (1 − cosine_similarity), its finite gradients at tiny norms", function()
    local a, p, n = t64(A), t64(P), t64(N)
    -- torch 2.15, float64: F.triplet_margin_with_distance_loss(a, p, n, distance_function =
    -- lambda u, v: 1 - F.cosine_similarity(u, v), …), the gradients of the sum of the losses
    local l, ga, gp, gn = F.triplet_margin_with_distance_fused(a, p, n, { distance = "cosine", reduction = "sum" })
    H.assert_close(F.triplet_margin_with_distance(a, p, n, { distance = "cosine", reduction = "none" }),
      { 1.1022399075565683, 1.0, 0.8999999999999999, 0.0 }, { rtol = 1e-14, atol = 1e-15 })
    H.assert_close(l, 1.1022399075565683 + 1.0 + 0.8999999999999999, { rtol = 1e-14 })
    H.assert_close(ga, { { -0.3629909411105945, 0.04371548327247068, 0.09185332485521772 },
      { 37133302.88608879, -57735026.91896258, -89357803.52064638 }, { -90000000.0, 100000000.0, 0.0 }, { 0, 0, 0 } },
      { rtol = 1e-12, atol = 1e-15 })
    H.assert_close(gp, { { 0.11952286093343936, -0.23904572186687872, -0.23904572186687875 }, { 0, 0, 0 }, { 0, 0, 0 },
      { 0, 0, 0 } }, { rtol = 1e-12, atol = 1e-15 })
    H.assert_close(gn, { { 0.24994793293705903, 0.16663195529137265, 0.08331597764568627 }, { 0, 0, 0 },
      { 0.1, 0, 0 }, { 0, 0, 0 } }, { rtol = 1e-12, atol = 1e-15 })
    -- swap (row 2 takes d(p, n)), margin 0.5, the criterion's 'none'
    local crit = ploss.TripletMarginWithDistanceLoss { distance = "cosine", margin = 0.5, swap = true, reduction = "none" }
    H.assert_close(crit:forward(a, p, n), { 0.6022399075565683, 0.8651483716701107, 0.3999999999999999, 0.0 },
      { rtol = 1e-14, atol = 1e-15 })
    local sa, sp, sn = crit:backward(a, p, n, t64({ 1, 1, 1, 1 }))
    H.assert_close(sa, { { -0.3629909411105945, 0.04371548327247068, 0.09185332485521772 },
      { -57735026.91896258, -57735026.91896258, -57735026.91896258 }, { -90000000.0, 50000000.0, 0.0 }, { 0, 0, 0 } },
      { rtol = 1e-12, atol = 1e-15 })
    H.assert_close(sp, { { 0.11952286093343936, -0.23904572186687872, -0.23904572186687875 },
      { 0.42600643361512913, -0.12171612389003693, -0.3042903097250923 }, { 0, 0.5, 0 }, { 0, 0, 0 } },
      { rtol = 1e-12, atol = 1e-15 })
    H.assert_close(sn, { { 0.24994793293705903, 0.16663195529137265, 0.08331597764568627 },
      { 0.07302967433402215, 0.18257418583505539, 0.21908902300206645 }, { 0.55, 0, 0 }, { 0, 0, 0 } },
      { rtol = 1e-12, atol = 1e-15 })
    -- 'mean' (PyTorch's default)
    H.assert_close(F.triplet_margin_with_distance(a, p, n, { distance = "cosine" }), 0.7505599768891421, { rtol = 1e-14 })
  end)

  it("is TripletMarginLoss with p = 2 and eps = 1e-6 for its default distance", function()
    local a, p, n = triplet_inputs(40, 9, "f64", 91)
    for _, o in ipairs { {}, { swap = true, margin = 0.3 }, { reduction = "none" } } do
      local r1 = { F.triplet_margin_with_distance_fused(a, p, n, o) }
      local r2 = { F.triplet_margin_fused(a, p, n, with(o, { p = 2, eps = 1e-6 })) }
      for k = 1, 4 do H.assert_equal(r1[k], r2[k], { what = label(o) .. " output " .. k }) end
    end
    -- torch 2.15 for the fixed rows, swap: row 3's anchor and positive 1 apart
    H.assert_close(F.triplet_margin_with_distance(t64(A), t64(P), t64(N), { swap = true, reduction = "none" }),
      { 1.3074169251749992, 0.0, 0.9999999989999989, 0.0 }, { rtol = 1e-13 })
  end)

  it("has the gradient of central differences in f64 for each input (cosine)", function()
    local a, p, n = triplet_inputs(6, 5, "f64", 57)
    for _, o in ipairs { { distance = "cosine" }, { distance = "cosine", swap = true, margin = 0.2 },
      { distance = "cosine", reduction = "sum", margin = 1.5 } } do
      local grads = { F.triplet_margin_with_distance_fused(a, p, n, o) }
      local inputs = { a, p, n }
      for k = 1, 3 do
        H.gradcheck(function() return F.triplet_margin_with_distance(inputs[1], inputs[2], inputs[3], o) end,
          inputs[k], grads[k + 1], { rtol = 1e-6, atol = 1e-8, what = label(o) .. " input " .. k })
      end
    end
  end)

  it("computes f32, f16 and bf16 against f64 of the rounded inputs, strided views as their copies, NaN rows", function()
    local a, p, n = triplet_inputs(33, 17, "f64", 79)
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local ad, pd, nd = a:type(dtype), p:type(dtype), n:type(dtype)
      local o = { distance = "cosine", swap = true }
      local ref = { F.triplet_margin_with_distance_fused(ad:double(), pd:double(), nd:double(), o) }
      local got = { F.triplet_margin_with_distance_fused(ad, pd, nd, o) }
      local t = H.tol[dtype]
      H.assert_close(got[1], ref[1], { rtol = 1e-6, what = dtype .. " loss" })
      for k = 2, 4 do
        assert.are.equal(dtype, got[k]:dtype())
        H.assert_close(got[k]:double(), ref[k], { rtol = t.rtol, atol = t.atol, what = dtype })
      end
    end
    local at = a:t():contiguous():t()
    local r1 = { F.triplet_margin_with_distance_fused(at, p, n, { distance = "cosine" }) }
    local r2 = { F.triplet_margin_with_distance_fused(a, p, n, { distance = "cosine" }) }
    for k = 1, 4 do H.assert_equal(r1[k], r2[k]) end
    -- a NaN element: that row's loss and its three gradient rows NaN, the others kept
    local av = a:totable()
    av[2][3] = 0 / 0
    local l, g1, g2, g3 = F.triplet_margin_with_distance_fused(t64(av), p, n, { distance = "cosine", reduction = "none" })
    local lv = l:totable()
    assert.is_true(lv[2] ~= lv[2])
    H.assert_equal(lv[1], F.triplet_margin_with_distance(a, p, n, { distance = "cosine", reduction = "none" }):totable()[1])
    for _, g in ipairs { g1, g2, g3 } do
      local v = g:totable()[2][1]
      assert.is_true(v ~= v)
    end
  end)

  it("refuses a margin <= 0 and an unknown distance, writing nothing", function()
    local a, p, n = triplet_inputs(3, 4, "f64", 1)
    local out = ploss.empty({}, { dtype = "f64" })
    H.expect_error(function() F.triplet_margin_with_distance(a, p, n, { margin = 0, out = out }) end,
      { "opts.margin", "PLOSS_ERR_INVALID_ARGUMENT" }, out)
    H.expect_error(function() F.triplet_margin_with_distance(a, p, n, { distance = "euclidean", out = out }) end,
      { "opts.distance", "euclidean" }, out)
    H.expect_error(function() ploss.TripletMarginWithDistanceLoss { soft_margin = true } end, "soft_margin")
    -- PyTorch's distance_function: named, with the two distances there are
    H.expect_error(function() ploss.TripletMarginWithDistanceLoss { distance_function = print } end,
      "unknown option 'distance_function' (known: distance, grad_anchor, grad_negative, grad_positive, margin, " ..
      "reduction, swap); PyTorch's distance_function is distance here: the name of one of the loss's distances")
  end)
end)

describe("BatchHardTripletLoss", function()
  it("gives the values derived by hand", function()
    -- rows (0,0) (3,4) | (1,0) (0,2), labels 0 0 1 1, Euclidean, margin 1:
    -- anchor 1: positive 2 (d 5), negatives 3 (d 1), 4 (d 2) → 5 − 1 + 1 = 5
    -- anchor 3: positive 4 (d √5), negatives 1 (d 1), 2 (d √20) → √5 − 1 + 1 = √5
    local x = ploss.tensor({ { 0, 0 }, { 3, 4 }, { 1, 0 }, { 0, 2 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 0, 1, 1 }, { dtype = "i64" })
    local l = F.batch_hard_triplet(x, y, { margin = 1, reduction = "none" })
    -- anchor 2 (3,4): positive 1 (d 5), negatives 3 (d √20), 4 (d √13) → 5 − √13 + 1
    -- anchor 4 (0,2): positive 3 (d √5), negatives 1 (d 2), 2 (d √13) → √5 − 2 + 1
    H.assert_close(l, { 5, 6 - math.sqrt(13), math.sqrt(5), math.sqrt(5) - 1 }, { rtol = 1e-14 })
    -- 'sum' gradient of row 1, x1 = (0, 0), every active anchor's term on it:
    --   anchor 1 itself:               (x1 − x2)/5 − (x1 − x3)/1 = (−0.6, −0.8) + (1, 0)
    --   anchor 2 (its positive):       ∂d_21/∂x1 = (x1 − x2)/5   = (−0.6, −0.8)
    --   anchor 3 (its nearest negative, d 1 < √20): −(x1 − x3)/1 = (1, 0)
    --   anchor 4 (its nearest negative, d 2 < √13): −(x1 − x4)/2 = (0, 1)
    local g = select(2, F.batch_hard_triplet_fused(x, y, { margin = 1, reduction = "sum" }))
    H.assert_close(g:select(1, 1), { -0.6 + 1 - 0.6 + 1 + 0, -0.8 + 0 - 0.8 + 0 + 1 }, { rtol = 1e-14 })
  end)

  it("matches a brute-force reference over every pair for every distance and reduction", function()
    local x, y, Y = labelled(41, 6, 5, 3, 2)
    local X = rows(x)
    for _, o in ipairs(BH_OPTIONS) do
      for _, r in ipairs { "none", "mean", "sum" } do
        local opts = with(o, { reduction = r })
        local what = label(opts)
        local losses, _, active = batch_hard_reference(X, Y, opts, 1)
        assert.are.equal(39, active)
        local w = r == "mean" and 1 / active or 1
        local _, grad = batch_hard_reference(X, Y, opts, w)
        local want = r == "none" and losses or (r == "sum" and reduce(losses, "sum") or reduce(losses, "sum") / active)
        local tol = { rtol = 1e-11, atol = 1e-13, what = what }
        H.assert_close(F.batch_hard_triplet(x, y, opts), want, tol)
        H.assert_close(ploss.BatchHardTripletLoss(opts):backward(x, y), grad, tol)
        local l2, g2 = ploss.BatchHardTripletLoss(opts)(x, y)
        H.assert_close(r == "none" and l2 or { l2 }, r == "none" and want or { want }, tol)
        H.assert_close(g2, grad, tol)
      end
    end
  end)

  it("mines across several Gram blocks (N = 1100) as over the whole matrix", function()
    local x, y, Y = labelled(1100, 3, 40, 17)
    local X = rows(x)
    local losses, _, active = batch_hard_reference(X, Y, {}, 1)
    local _, grad = batch_hard_reference(X, Y, {}, 1 / active)
    local l, g = ploss.BatchHardTripletLoss {}(x, y)
    H.assert_close(l, reduce(losses, "sum") / active, { rtol = 1e-11 })
    H.assert_close(g, grad, { rtol = 1e-10, atol = 1e-13 })
  end)

  it("takes a per-anchor upstream gradient ('none') and a fused scale", function()
    local x, y, Y = labelled(20, 4, 3, 8, 1)
    local X = rows(x)
    local up = {}
    for i = 1, 20 do up[i] = (i - 10) / 7 end
    local _, grad = batch_hard_reference(X, Y, { distance = "cosine" }, up)
    H.assert_close(F.batch_hard_triplet_backward(x, y, ploss.tensor(up, { dtype = "f64" }),
      { distance = "cosine", reduction = "none" }), grad, { rtol = 1e-11, atol = 1e-13 })
    local _, _, active = batch_hard_reference(X, Y, {}, 1)
    _, grad = batch_hard_reference(X, Y, {}, -3 / active)
    local _, g = F.batch_hard_triplet_fused(x, y, { scale = -3 })
    H.assert_close(g, grad, { rtol = 1e-11, atol = 1e-13 })
  end)

  it("has the gradient of central differences in f64", function()
    local x, y = labelled(12, 4, 3, 29, 1)
    for _, o in ipairs(BH_OPTIONS) do
      for _, r in ipairs { "mean", "sum" } do
        local opts = with(o, { reduction = r })
        local _, g = F.batch_hard_triplet_fused(x, y, opts)
        H.gradcheck(function(xx) return F.batch_hard_triplet(xx, y, opts) end, x, g,
          { rtol = 1e-6, atol = 1e-8, what = label(opts) })
      end
    end
  end)

  it("gives 0 and a zero gradient when no anchor is active (not 0/0)", function()
    local x = ploss.randn({ 5, 3 }, { dtype = "f64", seed = 2 })
    for _, labels in ipairs { { 1, 2, 3, 4, 5 }, { 7, 7, 7, 7, 7 } } do -- no positives / no negatives
      local y = ploss.tensor(labels, { dtype = "i64" })
      for _, r in ipairs { "mean", "sum" } do
        local l, g = F.batch_hard_triplet_fused(x, y, { reduction = r })
        assert.are.equal(0, l)
        H.assert_equal(g, ploss.zeros({ 5, 3 }, { dtype = "f64" }))
        H.assert_equal(F.batch_hard_triplet_backward(x, y, 1, { reduction = r }), ploss.zeros({ 5, 3 }, { dtype = "f64" }))
      end
      H.assert_equal(F.batch_hard_triplet(x, y, { reduction = "none" }), { 0, 0, 0, 0, 0 })
    end
    -- the mean is over active anchors only: one singleton among six rows
    local x6, y6, Y6 = labelled(6, 2, 2, 4, 1)
    local losses, _, active = batch_hard_reference(rows(x6), Y6, {}, 1)
    assert.are.equal(5, active)
    H.assert_close(F.batch_hard_triplet(x6, y6), reduce(losses, "sum") / 5, { rtol = 1e-14 })
    -- an empty batch
    local e = ploss.empty({ 0, 3 }, { dtype = "f32" })
    local l, g = F.batch_hard_triplet_fused(e, ploss.empty({ 0 }, { dtype = "i64" }))
    assert.are.equal(0, l)
    assert.are.same({ 0, 3 }, g:size())
  end)

  it("gives identical embeddings a zero-distance gradient of 0, not NaN", function()
    local x = ploss.tensor({ { 1, 2 }, { 1, 2 }, { 1, 2 }, { 0, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 0, 1, 1 }, { dtype = "i64" })
    for _, o in ipairs { {}, { soft_margin = true }, { distance = "squared" }, { distance = "cosine" } } do
      local l, g = F.batch_hard_triplet_fused(x, y, o)
      assert.is_true(l == l, label(o))
      for _, v in ipairs(g:flat()) do assert.is_true(v == v and math.abs(v) < math.huge, label(o)) end
      local _, grad = batch_hard_reference(rows(x), { 0, 0, 1, 1 }, o, 1 / 4)
      H.assert_close(g, grad, { rtol = 1e-12, atol = 1e-14, what = label(o) })
    end
    -- the cosine distance of a zero row: norms clamped, finite
    local _, g = F.batch_hard_triplet_fused(x, y, { distance = "cosine" })
    for _, v in ipairs(g:flat()) do assert.is_true(v == v) end
  end)

  it("propagates a NaN row to every anchor that compares against it (NaN wins max and min, as torch's)", function()
    local nan = 0 / 0
    -- labels 0 0 1 1 2 2 9: row 6 holds a NaN; row 7 is alone in its class (an inactive anchor)
    local X = { { 0.1, 0.9 }, { 0.2, 1.0 }, { 1.0, 0.1 }, { 0.9, 0.3 }, { 0.5, 0.5 }, { nan, 0.4 }, { -3, -3 } }
    local x = ploss.tensor(X, { dtype = "f64" })
    local y = ploss.tensor({ 0, 0, 1, 1, 2, 2, 9 }, { dtype = "i64" })
    for _, o in ipairs(BH_OPTIONS) do
      -- anchors 1–4 have row 6 among their negatives, 5 and 6 are each other's positive
      H.assert_equal(F.batch_hard_triplet(x, y, with(o, { reduction = "none" })), { nan, nan, nan, nan, nan, nan, 0 },
        { what = label(o) })
      for _, r in ipairs { "mean", "sum" } do
        local l, g = F.batch_hard_triplet_fused(x, y, with(o, { reduction = r }))
        assert.is_true(l ~= l, label(o) .. " " .. r)
        local G = g:totable()
        -- every active anchor's gradient is NaN; row 7, mined by no anchor, gets exactly 0
        for i = 1, 6 do assert.is_true(G[i][1] ~= G[i][1] and G[i][2] ~= G[i][2], label(o) .. " row " .. i) end
        assert.are.same({ 0, 0 }, G[7], label(o))
      end
    end
  end)

  it("mines an infinite row by its distance ∞ (not the NaN of ∞ − ∞): other anchors keep their values", function()
    local inf = math.huge
    for _, big in ipairs { inf, -inf } do
      local X = { { 0.1, 0.9 }, { 0.2, 1.0 }, { 1.0, 0.1 }, { 0.9, 0.3 }, { 0.5, 0.5 }, { big, 0.4 } }
      local Y = { 0, 0, 1, 1, 2, 2 }
      local x, y = ploss.tensor(X, { dtype = "f64" }), ploss.tensor(Y, { dtype = "i64" })
      for _, o in ipairs { {}, { distance = "squared", margin = 2 }, { soft_margin = true } } do
        -- anchors 1–4: row 6 is a negative at distance ∞, never the nearest: the values of the
        -- batch without row 6; anchor 5: its positive is at ∞ (ℓ = ∞); anchor 6: ∞ − ∞ (NaN)
        local want = batch_hard_reference({ X[1], X[2], X[3], X[4], X[5] }, { 0, 0, 1, 1, 2 }, o, 1)
        local l = F.batch_hard_triplet(x, y, with(o, { reduction = "none" })):totable()
        H.assert_close({ l[1], l[2], l[3], l[4] }, { want[1], want[2], want[3], want[4] }, { rtol = 1e-14, what = label(o) })
        assert.are.equal(inf, l[5], label(o))
        assert.is_true(l[6] ~= l[6], label(o))
        local lm = F.batch_hard_triplet(x, y, o)
        assert.is_true(lm ~= lm, label(o))
      end
    end
  end)

  it("reads i32 labels, strided embeddings and every float dtype", function()
    local x, y = labelled(30, 7, 4, 12, 1)
    local l64, g64 = F.batch_hard_triplet_fused(x, y, { soft_margin = true })
    local l32, g32 = F.batch_hard_triplet_fused(x, y:type("i32"), { soft_margin = true })
    assert.are.equal(l64, l32)
    H.assert_equal(g32, g64)
    local xt = x:t():contiguous():t()
    local gt = ploss.empty({ 7, 30 }, { dtype = "f64" }):t()
    local lt = F.batch_hard_triplet_fused(xt, y, { soft_margin = true, grad_embeddings = gt })
    assert.are.equal(l64, lt)
    H.assert_equal(gt, g64)
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local xd = x:type(dtype)
      local lr, gr = F.batch_hard_triplet_fused(xd:double(), y, { soft_margin = true })
      local l, g = F.batch_hard_triplet_fused(xd, y, { soft_margin = true })
      assert.are.equal(dtype, g:dtype())
      H.assert_close(l, lr, { rtol = 1e-6, what = dtype })
      H.assert_close(g:double(), gr, { rtol = H.tol[dtype].rtol, atol = H.tol[dtype].atol, what = dtype })
    end
  end)

  it("refuses bad input with an error naming the argument, writing nothing", function()
    local x, y = labelled(6, 3, 2, 1)
    x = x:float()
    local out, g = ploss.empty({}, { dtype = "f32" }), ploss.empty({ 6, 3 })
    local fo = { out = out, grad_embeddings = g }
    H.expect_error(function() F.batch_hard_triplet_fused(x, ploss.zeros({ 5 }, { dtype = "i64" }), fo) end,
      { "labels: expected [6] (one label per row of embeddings)", "PLOSS_ERR_SHAPE" }, out, g)
    H.expect_error(function() F.batch_hard_triplet_fused(x, ploss.zeros({ 6, 1 }, { dtype = "i64" }), fo) end,
      "labels: expected [6]", out, g)
    H.expect_error(function() F.batch_hard_triplet_fused(x, ploss.zeros({ 6 }), fo) end,
      { "labels: expected class labels of dtype i64 or i32, got f32", "PLOSS_ERR_DTYPE" }, out, g)
    H.expect_error(function() F.batch_hard_triplet_fused(ploss.randn({ 6 }), y, fo) end, "embeddings: expected N×D", out, g)
    H.expect_error(function() F.batch_hard_triplet_fused(x, y, with(fo, { grad_embeddings = ploss.empty({ 6, 4 }) })) end,
      "grad_embeddings: expected [6, 3]", out)
    H.expect_error(function() F.batch_hard_triplet_fused(x, y, with(fo, { grad_embeddings = x })) end,
      "PLOSS_ERR_ALIAS", out)
    H.expect_error(function() F.batch_hard_triplet_fused(x, y, with(fo, { distance = "manhattan" })) end,
      "distance: 'manhattan' is not one of", out, g)
    H.expect_error(function() F.batch_hard_triplet_fused(x, y, with(fo, { margin = math.huge })) end,
      "opts.margin: inf is not a finite number", out, g)
    H.expect_error(function() ploss.BatchHardTripletLoss {}:forward(x) end, "labels: expected a ploss tensor")
    -- pytorch-loss's margin = None, ported as margin = false: the message names soft_margin
    H.expect_error(function() ploss.BatchHardTripletLoss { margin = false } end,
      "opts.margin: expected a number, got boolean false (the soft margin, pytorch-loss's margin = None, is soft_margin = true)")
    -- 2^31 rows (a broadcast view): beyond the 32-bit sizes of the matrix products and the sort
    local huge = ploss.zeros({ 1, 2 }):expand({ 2 ^ 31, 2 })
    H.expect_error(function()
      F.batch_hard_triplet(huge, ploss.zeros({ 1 }, { dtype = "i64" }):expand({ 2 ^ 31 }), { out = out })
    end, { "embeddings: N = 2147483648 rows of D = 2 exceed", "PLOSS_ERR_UNSUPPORTED" }, out)
    H.expect_error(function() F.info_nce(huge, huge, { out = out }) end, "query: N = 2147483648 rows", out)
  end)
end)

---------------------------------------------------------------------------------------
-- InfoNCE: the reference on the full similarity matrix
---------------------------------------------------------------------------------------

local function lse(values)
  local m = -math.huge
  for _, v in ipairs(values) do m = math.max(m, v) end
  local s = 0
  for _, v in ipairs(values) do s = s + math.exp(v - m) end
  return m + math.log(s)
end

-- Per-row losses and the gradients of Σ_i w_i·ℓ_i (w: number or list) for rows Q, K.
local function infonce_reference(Q, K, o, w)
  local n, tau = #Q, o.temperature or 0.07
  local normalize, symmetric = o.normalize ~= false, o.symmetric ~= false
  local function prep(X)
    local U, R = {}, {}
    for i = 1, n do
      R[i] = norm(X[i])
      U[i] = {}
      for j = 1, #X[i] do U[i][j] = normalize and X[i][j] / math.max(R[i], 1e-12) or X[i][j] end
    end
    return U, R
  end
  local U, RU = prep(Q)
  local V, RV = prep(K)
  local S = {}
  for i = 1, n do
    S[i] = {}
    for j = 1, n do
      local s = 0
      for d = 1, #U[i] do s = s + U[i][d] * V[j][d] end
      S[i][j] = s / tau
    end
  end
  local rl, cl, losses = {}, {}, {}
  for i = 1, n do
    local col = {}
    for j = 1, n do col[j] = S[j][i] end
    rl[i], cl[i] = lse(S[i]), lse(col)
    losses[i] = symmetric and 0.5 * ((rl[i] - S[i][i]) + (cl[i] - S[i][i])) or rl[i] - S[i][i]
  end
  local function wt(i) return (type(w) == "table" and w[i] or w) * (symmetric and 0.5 or 1) end
  local gu, gv = {}, {}
  for i = 1, n do
    gu[i], gv[i] = {}, {}
    for d = 1, #U[i] do gu[i][d], gv[i][d] = 0, 0 end
  end
  for i = 1, n do
    for j = 1, n do
      local delta = i == j and 1 or 0
      local g = wt(i) * (math.exp(S[i][j] - rl[i]) - delta)
      if symmetric then g = g + wt(j) * (math.exp(S[i][j] - cl[j]) - delta) end
      for d = 1, #U[i] do
        gu[i][d] = gu[i][d] + g * V[j][d] / tau
        gv[j][d] = gv[j][d] + g * U[i][d] / tau
      end
    end
  end
  local function back(G, X, R)
    if not normalize then return G end
    local out = {}
    for i = 1, n do
      local dot = 0
      if R[i] > 1e-12 then for d = 1, #X[i] do dot = dot + G[i][d] * X[i][d] end end
      out[i] = {}
      for d = 1, #X[i] do out[i][d] = (G[i][d] - dot * X[i][d]) / math.max(R[i], 1e-12) end
    end
    return out
  end
  return losses, back(gu, U, RU), back(gv, V, RV)
end

local NCE_OPTIONS = {
  {},
  { symmetric = false },
  { temperature = 1, normalize = false },
  { temperature = 0.5, normalize = false, symmetric = false },
}

describe("InfoNCELoss", function()
  it("gives the values derived by hand", function()
    -- orthonormal views: S = I/τ; each row and column: log(e^(1/τ) + e^0) − 1/τ = log(1 + e^(−1/τ))
    local e = ploss.tensor({ { 1, 0 }, { 0, 2 } }, { dtype = "f64" })
    for _, t in ipairs { 1, 0.5, 0.07 } do
      local want = math.log(1 + math.exp(-1 / t))
      H.assert_close(F.info_nce(e, e:clone(), { temperature = t, reduction = "none" }), { want, want }, { rtol = 1e-14, atol = 1e-15 })
      H.assert_close(F.info_nce(e, e:clone(), { temperature = t, symmetric = false }), want, { rtol = 1e-14, atol = 1e-15 })
    end
    -- one pair: its own softmax, loss 0 and a zero gradient
    local one = ploss.tensor({ { 0.3, -2, 1 } }, { dtype = "f64" })
    local l, gq, gk = ploss.InfoNCELoss {}(one, one:clone())
    assert.are.equal(0, l)
    H.assert_equal(gq, { 0, 0, 0 })
    H.assert_equal(gk, { 0, 0, 0 })
  end)

  it("matches the full-matrix reference for every option set and reduction", function()
    local q = ploss.randn({ 13, 5 }, { dtype = "f64", seed = 41 })
    local k = ploss.randn({ 13, 5 }, { dtype = "f64", seed = 42 })
    local Q, K = rows(q), rows(k)
    for _, o in ipairs(NCE_OPTIONS) do
      for _, r in ipairs { "none", "mean", "sum" } do
        local opts = with(o, { reduction = r })
        local losses, gq, gk = infonce_reference(Q, K, opts, weight(r, 13))
        local tol = { rtol = 1e-11, atol = 1e-13, what = label(opts) }
        H.assert_close(F.info_nce(q, k, opts), reduce(losses, r), tol)
        local a, b = ploss.InfoNCELoss(opts):backward(q, k)
        H.assert_close(a, gq, tol)
        H.assert_close(b, gk, tol)
        local l, fa, fb = ploss.InfoNCELoss(opts)(q, k)
        H.assert_close(r == "none" and l or { l }, r == "none" and losses or { reduce(losses, r) }, tol)
        H.assert_close(fa, gq, tol)
        H.assert_close(fb, gk, tol)
      end
    end
  end)

  it("merges the column log-sum-exps across several tiles (N = 2100: the CPU's tiles hold 2^22 values)", function()
    local q = ploss.randn({ 2100, 3 }, { dtype = "f64", seed = 5 })
    local k = ploss.randn({ 2100, 3 }, { dtype = "f64", seed = 6 })
    local losses, gq, gk = infonce_reference(rows(q), rows(k), { temperature = 0.2 }, 1 / 2100)
    local l, a, b = ploss.InfoNCELoss { temperature = 0.2 }(q, k)
    H.assert_close(l, reduce(losses, "mean"), { rtol = 1e-11 })
    H.assert_close(a, gq, { rtol = 1e-9, atol = 1e-14 })
    H.assert_close(b, gk, { rtol = 1e-9, atol = 1e-14 })
  end)

  it("a learnable temperature: dL/dτ = −(1/τ)·Σ q·∂L/∂q (either view) without normalize, as central differences", function()
    local q = ploss.randn({ 6, 4 }, { dtype = "f64", seed = 21 })
    local k = ploss.randn({ 6, 4 }, { dtype = "f64", seed = 22 })
    local function dot(a, b)
      local s, x, y = 0, a:flat(), b:flat()
      for i = 1, #x do s = s + x[i] * y[i] end
      return s
    end
    for _, sym in ipairs { true, false } do
      local tau, h = 0.3, 1e-6
      local function L(t) return F.info_nce(q, k, { temperature = t, normalize = false, symmetric = sym }) end
      local fd = (L(tau + h) - L(tau - h)) / (2 * h)
      local _, gq, gk = ploss.InfoNCELoss { temperature = tau, normalize = false, symmetric = sym }(q, k)
      H.assert_close(-dot(q, gq) / tau, fd, { rtol = 1e-8, what = "query view, symmetric " .. tostring(sym) })
      H.assert_close(-dot(k, gk) / tau, fd, { rtol = 1e-8, what = "key view, symmetric " .. tostring(sym) })
    end
  end)

  it("has the gradient of central differences in f64 for both views", function()
    local q = ploss.randn({ 7, 4 }, { dtype = "f64", seed = 8 })
    local k = ploss.randn({ 7, 4 }, { dtype = "f64", seed = 9 })
    for _, o in ipairs(NCE_OPTIONS) do
      for _, r in ipairs { "mean", "sum" } do
        local opts = with(o, { reduction = r, temperature = o.temperature or 0.3 })
        local _, gq, gk = F.info_nce_fused(q, k, opts)
        H.gradcheck(function() return F.info_nce(q, k, opts) end, q, gq, { rtol = 1e-6, atol = 1e-8, what = label(opts) })
        H.gradcheck(function() return F.info_nce(q, k, opts) end, k, gk, { rtol = 1e-6, atol = 1e-8, what = label(opts) })
      end
    end
  end)

  it("stays finite for similarities far beyond exp's range", function()
    -- unnormalised rows of norm ~100 at τ = 0.01: similarities ~1e6
    local q = ploss.randn({ 6, 4 }, { dtype = "f32", seed = 2, std = 50 })
    local k = ploss.randn({ 6, 4 }, { dtype = "f32", seed = 3, std = 50 })
    local opts = { normalize = false, temperature = 0.01, reduction = "none" }
    local l, gq, gk = F.info_nce_fused(q, k, opts)
    local losses, rq, rk = infonce_reference(rows(q), rows(k), opts, 1)
    H.assert_close(l, losses, { rtol = 1e-5, atol = 1e-3 })
    H.assert_close(gq:double(), rq, { rtol = 1e-5, atol = 1e-3 })
    H.assert_close(gk:double(), rk, { rtol = 1e-5, atol = 1e-3 })
  end)

  it("reads strided views and every float dtype; an empty batch gives a NaN mean", function()
    local q = ploss.randn({ 20, 6 }, { dtype = "f64", seed = 10 })
    local k = ploss.randn({ 20, 6 }, { dtype = "f64", seed = 11 })
    local l, a, b = F.info_nce_fused(q, k)
    local qt = q:t():contiguous():t()
    local gk = ploss.empty({ 6, 20 }, { dtype = "f64" }):t()
    local l2, a2 = F.info_nce_fused(qt, k, { grad_key = gk })
    assert.are.equal(l, l2)
    H.assert_equal(a2, a)
    H.assert_equal(gk, b)
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local qd, kd = q:type(dtype), k:type(dtype)
      local lr, ar, br = F.info_nce_fused(qd:double(), kd:double())
      local ld, ad, bd = F.info_nce_fused(qd, kd)
      assert.are.equal(dtype, ad:dtype())
      H.assert_close(ld, lr, { rtol = 1e-6, what = dtype })
      H.assert_close(ad:double(), ar, { rtol = H.tol[dtype].rtol, atol = H.tol[dtype].atol * 10, what = dtype })
      H.assert_close(bd:double(), br, { rtol = H.tol[dtype].rtol, atol = H.tol[dtype].atol * 10, what = dtype })
    end
    local e = ploss.empty({ 0, 6 })
    local le = F.info_nce(e, e:clone())
    assert.is_true(le ~= le)
    assert.are.equal(0, F.info_nce(e, e:clone(), { reduction = "sum" }))
  end)

  it("refuses bad input with an error naming the argument, writing nothing", function()
    local q, k = ploss.randn({ 4, 3 }, { seed = 1 }), ploss.randn({ 4, 3 }, { seed = 2 })
    local out, g1, g2 = ploss.empty({}), ploss.empty({ 4, 3 }), ploss.empty({ 4, 3 })
    local fo = { out = out, grad_query = g1, grad_key = g2 }
    H.expect_error(function() F.info_nce_fused(q, ploss.randn({ 4, 5 }), fo) end,
      "key: expected [4, 3] (the query's shape: every input has the same D features)", out, g1, g2)
    H.expect_error(function() F.info_nce_fused(q, ploss.randn({ 5, 3 }), fo) end,
      "key: expected [4, 3] (the query's shape: row i of each input goes with row i of the others), got", out, g1, g2)
    H.expect_error(function() F.info_nce_fused(q, k, with(fo, { temperature = 0 })) end,
      "opts.temperature: 0 is not a finite number >= 1e-30", out, g1, g2)
    H.expect_error(function() F.info_nce_fused(q, k, with(fo, { temperature = 1e-31 })) end,
      "opts.temperature: 1e-31 is not a finite number >= 1e-30", out, g1, g2)
    H.expect_error(function() F.info_nce_fused(q, k, with(fo, { temperature = -0.1 })) end,
      "opts.temperature: -0.1 is not a finite number >= 1e-30", out, g1, g2)
    H.expect_error(function() ploss.InfoNCELoss { temperature = 0 / 0 } end, "opts.temperature: nan")
    H.expect_error(function() F.info_nce_fused(q, k, with(fo, { grad_key = g1 })) end, "PLOSS_ERR_ALIAS", out, g1)
  end)
end)

describe("criteria of several inputs", function()
  it("read options edited after construction, offer the Torch7 aliases and print their options", function()
    local a, p, n = triplet_inputs(5, 3, "f64", 61)
    local crit = ploss.TripletMarginLoss { margin = 0.5 }
    local mean = crit:updateOutput(a, p, n)
    crit.reduction = "sum"
    H.assert_close(crit:forward(a, p, n), 5 * mean, { rtol = 1e-14 })
    local g = { crit:updateGradInput(a, p, n) }
    local want = { F.triplet_margin_backward(a, p, n, 1, { margin = 0.5, reduction = "sum" }) }
    for k = 1, 3 do H.assert_equal(g[k], want[k]) end
    H.expect_error(function() crit.swap = "yes" end, "TripletMarginLoss: crit.swap: expected a boolean")
    assert.are.equal(false, crit.swap)
    assert.truthy(tostring(ploss.InfoNCELoss { temperature = 0.5 }):find("temperature=0.5", 1, true))
    -- the gradient buffers are reused between calls of the same sizes
    local c2 = ploss.BatchHardTripletLoss {}
    local x, y = ploss.randn({ 6, 2 }, { dtype = "f64", seed = 1 }), ploss.tensor({ 0, 0, 1, 1, 2, 2 }, { dtype = "i64" })
    local _, g1 = c2(x, y)
    local _, g2 = c2(x, y)
    assert.are.equal(g1, g2)
  end)
end)
