-- Fused linear + cross-entropy spec (suite 'cpu'): LinearCrossEntropyLoss on the CPU backend.
--  * a value derived by hand;
--  * an independent reference written here on the full logits (Lua tables, f64): every
--    reduction, label smoothing, softcap, z-loss, the focal policy, ignored rows, forward,
--    backward and fused, one tile or several (a tile that straddles ignored rows);
--  * the unfused composite: the logits h·wᵀ, then ploss's own cross_entropy or
--    softmax_focal (and its gradient through the matrix products) to 1e-12;
--  * central differences in f64 for hidden and weight;
--  * grad_weight given and accumulated into (the criterion's field and the functional's);
--  * strided views and weight_layout 'DxC', f32/f16/bf16, an empty batch; bad input: a
--    clear error naming the argument, nothing written;
--  * the bias (the reference, central differences, tiles, accumulate, dtypes, no features)
--    and the per-row outputs lse and entropy (the reference to 1e-12, 0 at ignored rows).
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local with = H.with

local label = H.options_label

local function rows(t) return t:to("cpu"):double():totable() end

-- Per-row losses and the gradients of Σ_i u_i·ℓ_i (u: number or list) for hidden rows X,
-- weight rows W, labels Y (0-based; ignore_index rows add nothing), bias Bv (a list, or
-- nil), on the full logits; then the bias's gradient and each row's lse and entropy.
local function reference(X, W, Y, o, u, Bv)
  local eps, cap, zl = o.label_smoothing or 0, o.softcap or 0, o.z_loss or 0
  local ignore = o.ignore_index or -100
  local n, C, D = #X, #W, #W[1] and #W[1] or 0
  local losses, GX, GW, GB, LSE, ENT = {}, {}, {}, {}, {}, {}
  for j = 1, C do GB[j] = 0 end
  for i = 1, n do GX[i] = {} for d = 1, D do GX[i][d] = 0 end end
  for j = 1, C do GW[j] = {} for d = 1, D do GW[j][d] = 0 end end
  for i = 1, n do
    local y = Y[i]
    if y == ignore then
      losses[i], LSE[i], ENT[i] = 0, 0, 0
    else
      local z, raw = {}, {}
      for j = 1, C do
        local v = Bv and Bv[j] or 0
        for d = 1, D do v = v + X[i][d] * W[j][d] end
        raw[j] = v
        z[j] = cap > 0 and cap * math.tanh(v / cap) or v
      end
      local m = -math.huge
      for j = 1, C do m = math.max(m, z[j]) end
      local s = 0
      for j = 1, C do s = s + math.exp(z[j] - m) end
      local lse = m + math.log(s)
      local pz = 0
      for j = 1, C do pz = pz + math.exp(z[j] - lse) * z[j] end
      LSE[i], ENT[i] = lse, lse - pz
      local l = zl * lse * lse
      -- focal: ℓ = (1 − p_y)^γ·(−log p_y) and factor Fo on p_j − [j = y]; the cross-entropy: Fo = 1
      local Fo = 1
      if o.policy == "focal" then
        local gamma, L = o.gamma or 2, lse - z[y + 1]
        local py = math.exp(-L)
        local uy = 1 - py
        l = l + uy ^ gamma * L
        Fo = gamma == 0 and 1 or uy ^ gamma * (1 + gamma * py * L / uy)
      else
        for j = 1, C do
          local t = eps / C + (j == y + 1 and 1 - eps or 0)
          l = l + t * (lse - z[j])
        end
      end
      losses[i] = l
      local ui = type(u) == "table" and u[i] or u
      for j = 1, C do
        local t = eps / C + (j == y + 1 and 1 - eps or 0)
        local g = math.exp(z[j] - lse) * (Fo + 2 * zl * lse) - Fo * t
        if cap > 0 then g = g * (1 - math.tanh(raw[j] / cap) ^ 2) end
        g = ui * g
        GB[j] = GB[j] + g
        for d = 1, D do
          GX[i][d] = GX[i][d] + g * W[j][d]
          GW[j][d] = GW[j][d] + g * X[i][d]
        end
      end
    end
  end
  return losses, GX, GW, GB, LSE, ENT
end

local valid_count, reduce = H.valid_count, H.reduce_losses

-- Hidden rows, weight rows and labels: n rows of D against C classes.
local function inputs(n, C, D, seed, ignored)
  local x = ploss.randn({ n, D }, { dtype = "f64", seed = seed })
  local w = ploss.randn({ C, D }, { dtype = "f64", seed = seed + 1 })
  local y = {}
  for i = 1, n do y[i] = (i * 5 + seed) % C end
  for _, i in ipairs(ignored or {}) do y[i] = -100 end
  return x, w, ploss.tensor(y, { dtype = "i64" }), y
end

local OPTIONS = {
  {}, { label_smoothing = 0.1 }, { softcap = 2.5 }, { z_loss = 1e-2 },
  { label_smoothing = 0.2, softcap = 1.5, z_loss = 0.05 },
  { policy = "focal" }, { policy = "focal", gamma = 0.5, softcap = 2.5, z_loss = 1e-2 },
}

describe("LinearCrossEntropyLoss", function()
  it("gives the value derived by hand", function()
    -- h = (1, 2), w = (1, 0), (0, 1), (1, 1): logits (1, 2, 3), label 2
    local x = ploss.tensor({ { 1, 2 } }, { dtype = "f64" })
    local w = ploss.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } }, { dtype = "f64" })
    local y = ploss.tensor({ 2 }, { dtype = "i64" })
    local lse = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    local l, gx, gw = ploss.LinearCrossEntropyLoss()(x, w, y)
    H.assert_close(l, lse - 3, { rtol = 1e-14 })
    local p = { math.exp(1 - lse), math.exp(2 - lse), math.exp(3 - lse) - 1 }
    H.assert_close(gx, { { p[1] + p[3], p[2] + p[3] } }, { rtol = 1e-14 })
    H.assert_close(gw, { { p[1], 2 * p[1] }, { p[2], 2 * p[2] }, { p[3], 2 * p[3] } }, { rtol = 1e-14 })
  end)

  it("gives a class masked by a bias of −∞ probability 0: entropy by hand, not NaN", function()
    local x = ploss.tensor({ { 1, 2 }, { -1, 0.5 } }, { dtype = "f64" })
    local w = ploss.tensor({ { 0.5, -1 }, { 1, 1 }, { 2, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 2 }, { dtype = "i64" })
    local b = ploss.tensor({ 0, -math.huge, 0.5 }, { dtype = "f64" })
    -- logits (−1.5, −∞, 2.5) and (−1, −∞, −1.5): two classes each
    local function entropy(z1, z2)
      local p1 = 1 / (1 + math.exp(z2 - z1))
      return -(p1 * math.log(p1) + (1 - p1) * math.log(1 - p1))
    end
    local loss, ent = F.linear_cross_entropy(x, w, y, { bias = b, return_entropy = true, reduction = "none" })
    H.assert_close(ent, { entropy(-1.5, 2.5), entropy(-1, -1.5) }, { rtol = 1e-12 })
    H.assert_close(loss, { math.log(1 + math.exp(4)), math.log(1 + math.exp(0.5)) }, { rtol = 1e-12 })
  end)

  it("gives the focal value derived by hand, and the cross-entropy's at γ = 0", function()
    -- logits (1, 2, 3), label 2: p_y = e^3/Σ, ℓ = (1 − p_y)²·(−log p_y); ∂ℓ/∂z_j = F·(p_j − [j = y])
    local x = ploss.tensor({ { 1, 2 } }, { dtype = "f64" })
    local w = ploss.tensor({ { 1, 0 }, { 0, 1 }, { 1, 1 } }, { dtype = "f64" })
    local y = ploss.tensor({ 2 }, { dtype = "i64" })
    local lse = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    local py, L = math.exp(3 - lse), lse - 3
    local u = 1 - py
    local l, gx, gw = ploss.LinearCrossEntropyLoss { policy = "focal" } (x, w, y)
    H.assert_close(l, u * u * L, { rtol = 1e-13 })
    -- by the chain rule: ∂L/∂z_j = p_j − [j = y], ∂u/∂z_j = p_y·(p_j − [j = y]), so
    -- ∂ℓ/∂z_j = (2u·L·p_y + u²)·(p_j − [j = y])
    local k = 2 * u * L * py + u * u
    local g = { k * math.exp(1 - lse), k * math.exp(2 - lse), k * (py - 1) }
    H.assert_close(gx, { { g[1] + g[3], g[2] + g[3] } }, { rtol = 1e-13 })
    H.assert_close(gw, { { g[1], 2 * g[1] }, { g[2], 2 * g[2] }, { g[3], 2 * g[3] } }, { rtol = 1e-13 })
    local x2, w2, y2 = inputs(7, 6, 4, 5, { 2 })
    local lf, af, bf = F.linear_cross_entropy_fused(x2, w2, y2, { policy = "focal", gamma = 0, z_loss = 0.1 })
    local lc, ac, bc = F.linear_cross_entropy_fused(x2, w2, y2, { z_loss = 0.1 })
    H.assert_close({ lf }, { lc }, { rtol = 1e-14 })
    H.assert_close(af, ac, { rtol = 1e-13, atol = 1e-16 })
    H.assert_close(bf, bc, { rtol = 1e-13, atol = 1e-16 })
  end)

  it("matches the full-logit reference for every option set and reduction", function()
    local x, w, y, Y = inputs(11, 7, 5, 3, { 4 })
    local X, W = rows(x), rows(w)
    local count = valid_count(Y)
    for _, o in ipairs(OPTIONS) do
      for _, r in ipairs { "none", "mean", "sum" } do
        local opts = with(o, { reduction = r })
        local losses, gx, gw = reference(X, W, Y, opts, r == "mean" and 1 / count or 1)
        local tol = { rtol = 1e-12, atol = 1e-14, what = r .. " " .. label(opts) }
        H.assert_close(r == "none" and F.linear_cross_entropy(x, w, y, opts) or { F.linear_cross_entropy(x, w, y, opts) },
                       r == "none" and losses or { reduce(losses, r, count) }, tol)
        local a, b = ploss.LinearCrossEntropyLoss(opts):backward(x, w, y)
        H.assert_close(a, gx, tol)
        H.assert_close(b, gw, tol)
        local l, fa, fb = ploss.LinearCrossEntropyLoss(opts)(x, w, y)
        H.assert_close(r == "none" and l or { l }, r == "none" and losses or { reduce(losses, r, count) }, tol)
        H.assert_close(fa, gx, tol)
        H.assert_close(fb, gw, tol)
      end
    end
  end)

  it("equals the unfused composite: the logits, then ploss's cross_entropy or softmax_focal", function()
    local x, w, y = inputs(9, 6, 4, 7, { 2, 3 })
    local X, W = rows(x), rows(w)
    local Z = {}
    for i = 1, #X do
      Z[i] = {}
      for j = 1, #W do
        local v = 0
        for d = 1, #X[1] do v = v + X[i][d] * W[j][d] end
        Z[i][j] = v
      end
    end
    local z = ploss.tensor(Z, { dtype = "f64" })
    for _, o in ipairs { {}, { label_smoothing = 0.3 }, { policy = "focal", gamma = 1.5 } } do
      for _, r in ipairs { "mean", "sum", "none" } do
        local opts = with(o, { reduction = r })
        local lz, gz
        if o.policy == "focal" then
          lz, gz = F.softmax_focal_fused(z, y, { reduction = r, gamma = o.gamma })
        else
          lz, gz = F.cross_entropy_fused(z, y, opts)
        end
        local l, gx, gw = F.linear_cross_entropy_fused(x, w, y, opts)
        H.assert_close(r == "none" and l or { l }, r == "none" and lz or { lz }, { rtol = 1e-12, what = label(opts) })
        -- through the products: ∂L/∂h = G·W, ∂L/∂w = Gᵀ·H
        local G = rows(gz)
        local wx, ww = {}, {}
        for i = 1, #X do
          wx[i] = {}
          for d = 1, #X[1] do
            local v = 0
            for j = 1, #W do v = v + G[i][j] * W[j][d] end
            wx[i][d] = v
          end
        end
        for j = 1, #W do
          ww[j] = {}
          for d = 1, #X[1] do
            local v = 0
            for i = 1, #X do v = v + G[i][j] * X[i][d] end
            ww[j][d] = v
          end
        end
        H.assert_close(gx, wx, { rtol = 1e-12, atol = 1e-15, what = label(opts) })
        H.assert_close(gw, ww, { rtol = 1e-12, atol = 1e-15, what = label(opts) })
      end
    end
  end)

  it("gives the same result in tiles of 1, 3 and all rows (tiles straddling ignored rows)", function()
    local x, w, y = inputs(10, 6, 4, 17, { 2, 3, 9 })
    local o = OPTIONS[5]
    local l, a, b = F.linear_cross_entropy_fused(x, w, y, o)
    for _, t in ipairs { 1, 3, 10, 64 } do
      local lt, at, bt = F.linear_cross_entropy_fused(x, w, y, with(o, { tile_rows = t }))
      local tol = { rtol = 1e-13, atol = 1e-15, what = "tile_rows = " .. t }
      H.assert_close({ lt }, { l }, tol)
      H.assert_close(at, a, tol)
      H.assert_close(bt, b, tol)
    end
  end)

  it("has the gradient of central differences in f64 for hidden and weight", function()
    local x, w, y = inputs(6, 5, 4, 29, { 3 })
    for _, o in ipairs(OPTIONS) do
      for _, r in ipairs { "mean", "sum" } do
        local opts = with(o, { reduction = r })
        local _, gx, gw = F.linear_cross_entropy_fused(x, w, y, opts)
        local f = function() return F.linear_cross_entropy(x, w, y, opts) end
        H.gradcheck(f, x, gx, { rtol = 1e-6, atol = 1e-7, what = "hidden " .. label(opts) })
        H.gradcheck(f, w, gw, { rtol = 1e-6, atol = 1e-7, what = "weight " .. label(opts) })
      end
    end
  end)

  it("weights each row by its upstream gradient (backward of 'none'), and the fused pass by scale", function()
    local x, w, y, Y = inputs(8, 5, 3, 31, { 6 })
    local go = ploss.tensor({ 0.5, -1, 2, 0, 1.5, 3, -0.25, 1 }, { dtype = "f64" })
    local o = with(OPTIONS[5], { reduction = "none" })
    local _, gx, gw = reference(rows(x), rows(w), Y, o, go:totable())
    local a, b = ploss.LinearCrossEntropyLoss(o):backward(x, w, y, go)
    H.assert_close(a, gx, { rtol = 1e-12, atol = 1e-14 })
    H.assert_close(b, gw, { rtol = 1e-12, atol = 1e-14 })
    local l1, a1, b1 = F.linear_cross_entropy_fused(x, w, y, OPTIONS[2])
    local l2, a2, b2 = F.linear_cross_entropy_fused(x, w, y, with(OPTIONS[2], { scale = -2.5 }))
    assert.are.equal(l1, l2)
    local function scaled(t, k)
      local v = H.values(t)
      for i = 1, #v do v[i] = v[i] * k end
      return v
    end
    H.assert_close(a2, scaled(a1, -2.5), { rtol = 1e-13, atol = 1e-15 })
    H.assert_close(b2, scaled(b1, -2.5), { rtol = 1e-13, atol = 1e-15 })
  end)

  it("adds nothing for ignored rows, gives them a zero gradient, and averages over the others", function()
    local x, w, y, Y = inputs(9, 6, 4, 41, { 1, 5, 6 })
    local keep, ykeep = {}, {}
    for i, v in ipairs(Y) do
      if v ~= -100 then
        keep[#keep + 1] = rows(x)[i]
        ykeep[#ykeep + 1] = v
      end
    end
    local xk, yk = ploss.tensor(keep, { dtype = "f64" }), ploss.tensor(ykeep, { dtype = "i64" })
    local l, gx, gw = F.linear_cross_entropy_fused(x, w, y, OPTIONS[5])
    local lk, _, gwk = F.linear_cross_entropy_fused(xk, w, yk, OPTIONS[5])
    H.assert_close({ l }, { lk }, { rtol = 1e-14 })
    H.assert_close(gw, gwk, { rtol = 1e-12, atol = 1e-15 })
    local G = rows(gx)
    for _, i in ipairs { 1, 5, 6 } do H.assert_equal(G[i], { 0, 0, 0, 0 }, { what = "ignored row " .. i }) end
    -- i32 labels, a custom ignore_index
    assert.are.equal(l, F.linear_cross_entropy(x, w, ploss.tensor(Y, { dtype = "i32" }), OPTIONS[5]))
    local yc = {}
    for i, v in ipairs(Y) do yc[i] = v == -100 and 3 or v end
    local lc = F.linear_cross_entropy(x, w, ploss.tensor(yc, { dtype = "i64" }), { ignore_index = 3 })
    local count = 0
    for _, v in ipairs(yc) do if v ~= 3 then count = count + 1 end end
    H.assert_close(lc, reduce(reference(rows(x), rows(w), yc, { ignore_index = 3 }, 1), "mean", count), { rtol = 1e-12 })
    -- every row ignored, or no row: a NaN mean, a zero sum, zero gradients
    for _, ya in ipairs { ploss.tensor({ -100, -100 }, { dtype = "i64" }), ploss.empty({ 0 }, { dtype = "i64" }) } do
      local n = ya:size(1)
      local xa = ploss.randn({ n, 4 }, { dtype = "f64", seed = 1 })
      local la, gxa, gwa = F.linear_cross_entropy_fused(xa, w, ya)
      assert.is_true(la ~= la)
      assert.are.equal(0, F.linear_cross_entropy(xa, w, ya, { reduction = "sum" }))
      for _, v in ipairs(H.values(gxa)) do assert.are.equal(0, v) end
      for _, v in ipairs(H.values(gwa)) do assert.are.equal(0, v) end
    end
  end)

  it("gives log V (+ z_loss·log²V) per row without features (H = 0), and empty gradients", function()
    local x, w = ploss.empty({ 3, 0 }, { dtype = "f64" }), ploss.empty({ 5, 0 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, -100, 4 }, { dtype = "i64" })
    local l0 = math.log(5) + 0.5 * math.log(5) ^ 2
    H.assert_close(F.linear_cross_entropy(x, w, y, { z_loss = 0.5, reduction = "none", label_smoothing = 0.2 }),
      { l0, 0, l0 }, { rtol = 1e-15 })
    H.assert_close(F.linear_cross_entropy(x, w, y, { z_loss = 0.5 }), l0, { rtol = 1e-15 })
    H.assert_close(F.linear_cross_entropy(x, w, y, { z_loss = 0.5, reduction = "sum" }), 2 * l0, { rtol = 1e-15 })
    -- focal: p_y = 1/V, so (1 − 1/V)^γ·log V (+ z_loss·log²V) per row
    local lf = (0.8 ^ 1.5) * math.log(5) + 0.5 * math.log(5) ^ 2
    H.assert_close(F.linear_cross_entropy(x, w, y, { policy = "focal", gamma = 1.5, z_loss = 0.5, reduction = "none" }),
      { lf, 0, lf }, { rtol = 1e-15 })
    local _, gx, gw = F.linear_cross_entropy_fused(x, w, y)
    assert.are.same({ 3, 0 }, gx:size())
    assert.are.same({ 5, 0 }, gw:size())
    -- a million rows of broadcast labels: no tile is formed
    local yb = ploss.tensor({ 2 }, { dtype = "i64" }):expand(1000000)
    H.assert_close(F.linear_cross_entropy(ploss.empty({ 1000000, 0 }, { dtype = "f32" }),
      ploss.empty({ 5, 0 }, { dtype = "f32" }), yb), math.log(5), { rtol = 1e-6 })
  end)

  it("writes the weight's gradient into a given tensor, or adds it there with accumulate", function()
    local x, w, y = inputs(7, 5, 3, 43, { 2 })
    local _, gx, gw = F.linear_cross_entropy_fused(x, w, y)
    local base = ploss.randn({ 5, 3 }, { dtype = "f64", seed = 99 })
    local buf = base:clone()
    -- the functional: grad_weight as an option, overwritten, or added to
    local _, _, got = F.linear_cross_entropy_fused(x, w, y, { grad_weight = buf })
    assert.are.equal(buf, got)
    H.assert_close(buf, gw, { rtol = 0, atol = 0 })
    buf = base:clone()
    F.linear_cross_entropy_fused(x, w, y, { grad_weight = buf, accumulate = true })
    local want = H.values(base)
    for k, v in ipairs(H.values(gw)) do want[k] = want[k] + v end
    H.assert_close(H.values(buf), want, { rtol = 1e-15, atol = 1e-15 })
    -- the criterion: its field grad_weight; two calls accumulate twice; its own buffer
    -- starts from zeros
    buf = base:clone()
    local crit = ploss.LinearCrossEntropyLoss { accumulate = true }
    crit.grad_weight = buf
    local _, a1, b1 = crit(x, w, y)
    assert.are.equal(buf, b1)
    H.assert_close(a1, gx, { rtol = 0, atol = 0 })
    crit:backward(x, w, y)
    for k, v in ipairs(H.values(gw)) do want[k] = want[k] + v end
    H.assert_close(H.values(buf), want, { rtol = 1e-14, atol = 1e-14 })
    local own = ploss.LinearCrossEntropyLoss { accumulate = true }
    local _, _, o1 = own(x, w, y)
    H.assert_close(o1, gw, { rtol = 0, atol = 0 })
    own(x, w, y)
    local twice = H.values(gw)
    for k = 1, #twice do twice[k] = 2 * twice[k] end
    H.assert_close(H.values(own.gradInput[2]), twice, { rtol = 1e-15, atol = 1e-15 })
    -- a batch of another length: grad_hidden is overwritten (not summed), the weight's sums
    -- go on
    local x3, _, y3 = inputs(3, 5, 3, 45, { 1 })
    local _, gx3, gw3 = F.linear_cross_entropy_fused(x3, w, y3)
    local _, h3, o3 = own(x3, w, y3)
    H.assert_close(h3, gx3, { rtol = 0, atol = 0 })
    for k, v in ipairs(H.values(gw3)) do twice[k] = twice[k] + v end
    H.assert_close(H.values(o3), twice, { rtol = 1e-15, atol = 1e-15 })
    -- its own sums are not dropped for a weight of another shape: refused until clearState()
    local x9, w9, y9 = inputs(7, 9, 3, 44, { 2 })
    H.expect_error(function() own(x9, w9, y9) end, "LinearCrossEntropyLoss: grad_weight (its own buffer, which " ..
      "accumulate adds to) is a ploss tensor f64[5, 3] on cpu, this call's weight is a ploss tensor f64[9, 3] on cpu: " ..
      "clearState() starts the sums afresh")
    H.assert_close(H.values(own.gradInput[2]), twice, { rtol = 1e-15, atol = 1e-15 })
    own:clearState()
    local _, _, g9 = F.linear_cross_entropy_fused(x9, w9, y9)
    local _, _, o9 = own(x9, w9, y9)
    H.assert_close(o9, g9, { rtol = 0, atol = 0 })
    H.expect_error(function() crit.grad_weight = "buffer" end,
      "LinearCrossEntropyLoss: crit.grad_weight: expected a ploss tensor, got 'buffer'")
    -- the destination given to the constructor, as the field does
    buf = base:clone()
    local given = ploss.LinearCrossEntropyLoss { accumulate = true, grad_weight = buf }
    local _, _, g1 = given(x, w, y)
    assert.are.equal(buf, g1)
    want = H.values(base)
    for k, v in ipairs(H.values(gw)) do want[k] = want[k] + v end
    H.assert_close(H.values(buf), want, { rtol = 1e-15, atol = 1e-15 })
    H.expect_error(function() ploss.LinearCrossEntropyLoss { grad_weight = 3 } end,
      "LinearCrossEntropyLoss: grad_weight: expected a ploss tensor, got number")
    H.expect_error(function() ploss.LinearCrossEntropyLoss { grad_wieght = buf } end,
      "unknown option 'grad_wieght' (known: accumulate,")
  end)

  it("reads strided views and an H×V weight (weight_layout 'DxC')", function()
    local x, w, y = inputs(6, 5, 4, 53, { 4 })
    local l, gx, gw = F.linear_cross_entropy_fused(x, w, y, OPTIONS[2])
    local xt = x:t():contiguous():t()
    local lt, gxt, gwt = F.linear_cross_entropy_fused(xt, w:t():contiguous(), y, with(OPTIONS[2], { weight_layout = "DxC" }))
    H.assert_close({ lt }, { l }, { rtol = 1e-14 })
    H.assert_close(gxt, gx, { rtol = 1e-13, atol = 1e-15 })
    H.assert_close(gwt:t(), gw, { rtol = 1e-13, atol = 1e-15 })
  end)

  it("takes f32, f16 and bf16 (products in f32, each row's softmax in f64, stored in the dtype)", function()
    local x, w, y = inputs(6, 5, 4, 61, { 1 })
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local xd, wd = x:type(dt), w:type(dt)
      local l, gx, gw = F.linear_cross_entropy_fused(xd, wd, y, OPTIONS[5])
      local l64, gx64, gw64 = F.linear_cross_entropy_fused(xd:double(), wd:double(), y, OPTIONS[5])
      assert.are.equal(dt, gx:dtype())
      assert.are.equal(dt, gw:dtype())
      -- f32 products (and, for f16/bf16, the gradients rounded to the dtype)
      local tol = ({ f32 = 1e-6, f16 = 1e-3, bf16 = 8e-3 })[dt]
      H.assert_close({ l }, { l64 }, { rtol = 1e-6, what = dt })
      H.assert_close(gx, gx64, { rtol = tol, atol = tol * 1e-2, what = dt .. " grad_hidden" })
      H.assert_close(gw, gw64, { rtol = tol, atol = tol * 1e-2, what = dt .. " grad_weight" })
    end
  end)

  it("at the least softcap, 1e-20, saturates every logit in f32 as in f64: loss log V, gradient 0", function()
    local x, w, y = inputs(6, 5, 4, 61, {})
    for _, dt in ipairs { "f64", "f32" } do
      local l, gx, gw = F.linear_cross_entropy_fused(x:type(dt), w:type(dt), y, { softcap = 1e-20 })
      H.assert_close({ l }, { math.log(5) }, { rtol = 1e-7, what = dt .. " loss" })
      -- 1 − tanh² of products about 1e20 times the cap: 0 in f64; in f32 1 − (z/c)² of the
      -- rounded capped logit, within its rounding (the uncapped gradient is of order 0.1)
      local atol = dt == "f64" and 0 or 1e-6
      H.assert_close(gx, ploss.zeros(gx:size(), { dtype = dt }), { atol = atol, what = dt .. " grad_hidden" })
      H.assert_close(gw, ploss.zeros(gw:size(), { dtype = dt }), { atol = atol, what = dt .. " grad_weight" })
    end
  end)

  it("writes f32 gradients of f16/bf16 inputs when given them (mixed precision), refuses other dtypes", function()
    local x, w, y = inputs(6, 5, 4, 67, { 2 })
    for _, dt in ipairs { "f16", "bf16" } do
      local xd, wd = x:type(dt), w:type(dt)
      local gx = ploss.empty({ 6, 4 }, { dtype = "f32" })
      local gw = ploss.empty({ 5, 4 }, { dtype = "f32" })
      F.linear_cross_entropy_fused(xd, wd, y, with(OPTIONS[5], { grad_hidden = gx, grad_weight = gw }))
      local _, gx64, gw64 = F.linear_cross_entropy_fused(xd:double(), wd:double(), y, OPTIONS[5])
      -- the f64 result to f32 rounding: nothing rounded to the 16-bit dtype
      H.assert_close(gx, gx64, { rtol = 1e-6, atol = 1e-7, what = dt .. " f32 grad_hidden" })
      H.assert_close(gw, gw64, { rtol = 1e-6, atol = 1e-7, what = dt .. " f32 grad_weight" })
    end
    H.expect_error(function()
      F.linear_cross_entropy_fused(x:float(), w:float(), y, { grad_weight = ploss.empty({ 5, 4 }, { dtype = "f64" }) })
    end, "grad_weight: expected f32, got f64")
    H.expect_error(function()
      F.linear_cross_entropy_fused(x:type("bf16"), w:type("bf16"), y, { grad_hidden = ploss.empty({ 6, 4 }, { dtype = "f16" }) })
    end, "grad_hidden: expected bf16 or f32, got f16")
  end)

  it("refuses bad input with an error naming the argument, writing nothing", function()
    local x, w, y = inputs(4, 5, 3, 71)
    local out = ploss.empty({}, { dtype = "f64" })
    local g1, g2 = ploss.empty({ 4, 3 }, { dtype = "f64" }), ploss.empty({ 5, 3 }, { dtype = "f64" })
    H.poison(out, g1, g2)
    local snap = H.poison(out, g1, g2)
    local function fused(...) return F.linear_cross_entropy_fused(...) end
    H.expect_error(function() fused(x, ploss.randn({ 5, 4 }, { dtype = "f64" }), y, { out = out, grad_hidden = g1, grad_weight = g2 }) end,
      "weight: expected V×3 vocabulary rows (one per row; H = 3 as hidden)")
    -- a weight given H×V: the message names the layout option
    H.expect_error(function() fused(x, w:t():contiguous(), y, { out = out, grad_hidden = g1, grad_weight = g2 }) end,
      "weight: expected V×3 vocabulary rows (one per row; H = 3 as hidden; for a 3×V weight: weight_layout = 'DxC', " ..
      "or its transpose), got f64[3, 5]")
    H.expect_error(function() fused(x, w, y, { out = out, weight_layout = "DxC" }) end,
      "weight: expected 3×V vocabulary rows (one per column, weight_layout DxC; H = 3 as hidden; for a V×3 weight: " ..
      "the default weight_layout 'CxD'), got f64[5, 3]")
    -- a Lua table of numbers for hidden is a hidden that is not a tensor, not the list form
    H.expect_error(function() ploss.LinearCrossEntropyLoss {}({ { 1, 2, 3 }, { 4, 5, 6 } }, w, y) end,
      "LinearCrossEntropyLoss: hidden: expected a ploss tensor, got table")
    H.expect_error(function() fused(x, w:float(), y, { out = out, grad_hidden = g1, grad_weight = g2 }) end, "weight")
    H.expect_error(function() fused(x, w, ploss.tensor({ 0, 1, 5, 2 }, { dtype = "i64" }), { out = out, grad_hidden = g1, grad_weight = g2 }) end,
      "labels: class index 5 at row 2")
    H.expect_error(function() fused(x, w, y, { out = out, grad_hidden = g1, grad_weight = ploss.empty({ 5, 4 }, { dtype = "f64" }) }) end,
      "grad_weight")
    H.expect_error(function() fused(x, w, y, { softcap = -1 }) end, "opts.softcap: -1 is not 0 or a finite number >= 1e-20")
    -- a cap too small for the fp32 tile (1/c overflows, c·tanh(·) underflows): refused, as
    -- its gradient would have been the uncapped one (Lua, then C)
    H.expect_error(function() fused(x, w, y, { softcap = 1e-300, out = out }) end,
      "opts.softcap: 1e-300 is not 0 or a finite number >= 1e-20", out)
    H.expect_error(function() fused(x, w, y, { label_smoothing = 1.5 }) end, "opts.label_smoothing")
    H.expect_error(function() fused(x, w, y, { z_loss = 0 / 0 }) end, "opts.z_loss")
    H.expect_error(function() fused(x, w, y, { policy = "focal", label_smoothing = 0.1, out = out }) end,
      "opts.label_smoothing: 0.1 with policy 'focal'")
    H.expect_error(function() fused(x, w, y, { policy = "focal", gamma = -1 }) end, "opts.gamma")
    -- the same refusal from the C entry point itself (the Lua layer checks first)
    local ffi = require "ffi"
    local co = ffi.new("ploss_linear_cross_entropy_opts")
    ploss.C.ploss_linear_cross_entropy_opts_init(co)
    co.policy = ploss.C.PLOSS_LINEAR_POLICY_FOCAL
    co.label_smoothing = 0.1
    H.expect_error(function()
      ploss.check(ploss.C.ploss_linear_cross_entropy_forward(ploss.context("cpu"), x:dl(), w:dl(), y:dl(), nil, co,
        out:dl(), nil, nil))
    end, "opts.label_smoothing: 0.1 with policy 'focal'")
    -- a B×T×H hidden and a weight of another dtype: the message says what to do
    H.expect_error(function() fused(x:view(1, x:size(1), x:size(2)), w, y, { out = out }) end,
      "hidden: expected N×D hidden states (2 dims: B×T×H flattened to (B·T)×H), got f64[1, ", out)
    H.expect_error(function() fused(x, w:float(), y, { out = out }) end,
      "weight: expected f64, the dtype of hidden (both of one dtype), got f32", out)
    -- γ without the focal policy: a forgotten policy, refused rather than ignored (Lua, C)
    H.expect_error(function() fused(x, w, y, { gamma = 5, out = out }) end,
      "opts.gamma: 5 with policy 'cross_entropy' (γ is the focal policy's: policy = 'focal')", out)
    ploss.C.ploss_linear_cross_entropy_opts_init(co)
    co.softcap = 1e-30
    H.expect_error(function()
      ploss.check(ploss.C.ploss_linear_cross_entropy_forward(ploss.context("cpu"), x:dl(), w:dl(), y:dl(), nil, co,
        out:dl(), nil, nil))
    end, "opts.softcap: 1e-30 is not 0 or a finite number >= 1e-20")
    ploss.C.ploss_linear_cross_entropy_opts_init(co)
    co.gamma = 0.5
    H.expect_error(function()
      ploss.check(ploss.C.ploss_linear_cross_entropy_forward(ploss.context("cpu"), x:dl(), w:dl(), y:dl(), nil, co,
        out:dl(), nil, nil))
    end, "opts.gamma: 0.5 with policy 'cross_entropy'")
    H.expect_error(function() fused(x, w, y, { policy = "dice" }) end, "policy")
    H.expect_error(function() fused(ploss.randn({ 4, 3 }, { dtype = "f64" }), w, y, { out = out, grad_hidden = g1, grad_weight = g1 }) end,
      "grad_weight")
    H.assert_untouched(snap)
  end)

  describe("with a bias", function()
    local function bias(C, seed) return ploss.randn({ C }, { dtype = "f64", seed = seed }) end

    it("matches the full-logit reference for every option set and reduction, in tiles", function()
      local x, w, y, Y = inputs(11, 7, 5, 83, { 4, 5 })
      local b = bias(7, 84)
      local X, W, Bv = rows(x), rows(w), rows(b)
      local count = valid_count(Y)
      for _, o in ipairs(OPTIONS) do
        for _, r in ipairs { "none", "mean", "sum" } do
          for _, t in ipairs { 0, 1, 4 } do
            local opts = with(o, { reduction = r, bias = b, tile_rows = t })
            local losses, gx, gw, gb = reference(X, W, Y, opts, r == "mean" and 1 / count or 1, Bv)
            local tol = { rtol = 1e-12, atol = 1e-14, what = r .. " tile_rows " .. t .. " " .. label(o) }
            local want = r == "none" and losses or { reduce(losses, r, count) }
            local l = F.linear_cross_entropy(x, w, y, opts)
            H.assert_close(r == "none" and l or { l }, want, tol)
            local a, bb, c = ploss.LinearCrossEntropyLoss(opts):backward(x, w, y)
            H.assert_close(a, gx, tol)
            H.assert_close(bb, gw, tol)
            H.assert_close(c, gb, tol)
            local fl, fa, fb, fc = F.linear_cross_entropy_fused(x, w, y, opts)
            H.assert_close(r == "none" and fl or { fl }, want, tol)
            H.assert_close(fa, gx, tol)
            H.assert_close(fb, gw, tol)
            H.assert_close(fc, gb, tol)
          end
        end
      end
    end)

    it("has the gradient of central differences in f64 for the bias (and hidden, weight)", function()
      local x, w, y = inputs(6, 5, 4, 89, { 3 })
      local b = bias(5, 90)
      for _, o in ipairs(OPTIONS) do
        local opts = with(o, { bias = b })
        local _, gx, gw, gb = F.linear_cross_entropy_fused(x, w, y, opts)
        local f = function() return F.linear_cross_entropy(x, w, y, opts) end
        H.gradcheck(f, b, gb, { rtol = 1e-6, atol = 1e-7, what = "bias " .. label(o) })
        H.gradcheck(f, x, gx, { rtol = 1e-6, atol = 1e-7, what = "hidden " .. label(o) })
        H.gradcheck(f, w, gw, { rtol = 1e-6, atol = 1e-7, what = "weight " .. label(o) })
      end
    end)

    it("adds into its own grad_bias, and refuses to drop those sums for a bias of another dtype", function()
      local x, w, y = inputs(7, 5, 3, 93, { 2 })
      local b = bias(5, 94)
      local _, _, _, gb = F.linear_cross_entropy_fused(x, w, y, { bias = b })
      local crit = ploss.LinearCrossEntropyLoss { accumulate = true, bias = b }
      crit(x, w, y)
      local _, _, _, own = crit(x, w, y)
      local twice = H.values(gb)
      for k = 1, #twice do twice[k] = 2 * twice[k] end
      H.assert_close(H.values(own), twice, { rtol = 1e-15, atol = 1e-15 })
      crit.bias = b:float()
      H.expect_error(function() crit(x, w, y) end, "LinearCrossEntropyLoss: grad_bias (its own buffer, which " ..
        "accumulate adds to) is a ploss tensor f64[5] on cpu, this call's bias is a ploss tensor f32[5] on cpu")
    end)

    it("takes the bias from the criterion's field or as a list, and writes or adds grad_bias", function()
      local x, w, y = inputs(7, 5, 3, 97, { 2 })
      local b = bias(5, 98)
      local _, gx, gw, gb = F.linear_cross_entropy_fused(x, w, y, { bias = b })
      -- a list: the same values, made f64 for f64 inputs
      local l1 = F.linear_cross_entropy(x, w, y, { bias = H.values(b) })
      assert.are.equal(l1, F.linear_cross_entropy(x, w, y, { bias = b }))
      local crit = ploss.LinearCrossEntropyLoss { accumulate = true }
      crit.bias = b
      local base = ploss.randn({ 5 }, { dtype = "f64", seed = 99 })
      local buf = base:clone()
      crit.grad_bias = buf
      local _, a, c, d = crit(x, w, y)
      H.assert_close(a, gx, { rtol = 0, atol = 0 })
      H.assert_close(c, gw, { rtol = 0, atol = 0 })
      assert.are.equal(buf, d)
      local want = H.values(base)
      for k, v in ipairs(H.values(gb)) do want[k] = want[k] + v end
      H.assert_close(H.values(buf), want, { rtol = 1e-15, atol = 1e-15 })
      local ga, gwb, gbb = crit:backward(x, w, y)
      assert.are.equal(buf, gbb)
      assert.is_not_nil(ga and gwb)
      for k, v in ipairs(H.values(gb)) do want[k] = want[k] + v end
      H.assert_close(H.values(buf), want, { rtol = 1e-14, atol = 1e-14 })
      -- the functional: grad_bias as an option, overwritten or added to
      buf = base:clone()
      local _, _, _, got = F.linear_cross_entropy_fused(x, w, y, { bias = b, grad_bias = buf })
      assert.are.equal(buf, got)
      H.assert_close(buf, gb, { rtol = 0, atol = 0 })
      local _, _, g3 = F.linear_cross_entropy_backward(x, w, y, 1, { bias = b })
      H.assert_close(g3, gb, { rtol = 0, atol = 0 })
      -- without a bias no grad_bias is returned, and a grad_bias given without one is refused
      assert.are.equal(3, select("#", F.linear_cross_entropy_fused(x, w, y)))
      local stray = ploss.zeros({ 5 }, { dtype = "f64" })
      H.expect_error(function() F.linear_cross_entropy_fused(x, w, y, { grad_bias = stray }) end,
        "linear_cross_entropy_fused: grad_bias: given without a bias")
      H.expect_error(function() F.linear_cross_entropy_backward(x, w, y, 1, { grad_bias = stray }) end,
        "linear_cross_entropy_backward: grad_bias: given without a bias")
      local plain = ploss.LinearCrossEntropyLoss {}
      plain.grad_bias = stray
      H.expect_error(function() plain(x, w, y) end, "LinearCrossEntropyLoss.grad_bias: given without a bias")
    end)

    it("takes a bias of the input's dtype or f32 for f16/bf16 inputs, and its gradient likewise", function()
      local x, w, y = inputs(6, 5, 4, 101, { 1 })
      local b = bias(5, 102)
      for _, dt in ipairs { "f32", "f16", "bf16" } do
        local xd, wd = x:type(dt), w:type(dt)
        for _, bdt in ipairs { dt, "f32" } do
          local bd = b:type(bdt)
          local l, _, _, gb = F.linear_cross_entropy_fused(xd, wd, y, with(OPTIONS[5], { bias = bd }))
          local l64, _, _, gb64 = F.linear_cross_entropy_fused(xd:double(), wd:double(), y,
            with(OPTIONS[5], { bias = bd:double() }))
          assert.are.equal(bdt, gb:dtype())
          local tol = ({ f32 = 1e-6, f16 = 1e-3, bf16 = 8e-3 })[bdt]
          H.assert_close({ l }, { l64 }, { rtol = 1e-6, what = dt .. "/" .. bdt })
          H.assert_close(gb, gb64, { rtol = tol, atol = tol * 1e-2, what = dt .. "/" .. bdt .. " grad_bias" })
        end
        local gb32 = ploss.empty({ 5 }, { dtype = "f32" })
        F.linear_cross_entropy_fused(xd, wd, y, { bias = b:type(dt), grad_bias = gb32 })
      end
    end)

    it("gives the bias's softmax without features (H = 0)", function()
      local x, w = ploss.empty({ 3, 0 }, { dtype = "f64" }), ploss.empty({ 5, 0 }, { dtype = "f64" })
      local y = ploss.tensor({ 1, -100, 4 }, { dtype = "i64" })
      local Bv = { 0.5, -1, 2, 0.25, 1 }
      local b = ploss.tensor(Bv, { dtype = "f64" })
      local X = { {}, {}, {} }
      local W = { {}, {}, {}, {}, {} }
      local opts = { bias = b, reduction = "none", z_loss = 0.1, return_lse = true, return_entropy = true }
      local losses, _, _, gb, lse, ent = reference(X, W, { 1, -100, 4 }, opts, 1, Bv)
      local l, lo, en = F.linear_cross_entropy(x, w, y, opts)
      H.assert_close(l, losses, { rtol = 1e-14 })
      H.assert_close(lo, lse, { rtol = 1e-14 })
      H.assert_close(en, ent, { rtol = 1e-14 })
      local _, gx, gw, g = F.linear_cross_entropy_fused(x, w, y, { bias = b, reduction = "sum", z_loss = 0.1 })
      assert.are.same({ 3, 0 }, gx:size())
      assert.are.same({ 5, 0 }, gw:size())
      H.assert_close(g, gb, { rtol = 1e-13, atol = 1e-15 })
    end)
  end)

  it("returns each row's lse and softmax entropy (0 at ignored rows) from forward and fused", function()
    local x, w, y, Y = inputs(9, 6, 4, 107, { 3, 7 })
    local b = ploss.randn({ 6 }, { dtype = "f64", seed = 108 })
    for _, o in ipairs(OPTIONS) do
      for _, withb in ipairs { false, true } do
        local opts = with(o, { bias = withb and b or nil, tile_rows = 4 })
        local losses, gx, gw, gb, lse, ent = reference(rows(x), rows(w), Y, opts, 1 / valid_count(Y),
          withb and rows(b) or nil)
        local tol = { rtol = 1e-12, atol = 1e-14, what = label(o) .. (withb and " bias" or "") }
        local l, lo = F.linear_cross_entropy(x, w, y, with(opts, { return_lse = true }))
        H.assert_close({ l }, { reduce(losses, "mean", valid_count(Y)) }, tol)
        H.assert_close(lo, lse, tol)
        local _, en = F.linear_cross_entropy(x, w, y, with(opts, { return_entropy = true }))
        H.assert_close(en, ent, tol)
        local r = { F.linear_cross_entropy_fused(x, w, y, with(opts, { return_lse = true, return_entropy = true })) }
        local k = withb and 5 or 4
        assert.are.equal(k + 1, #r)
        H.assert_close(r[2], gx, tol)
        H.assert_close(r[3], gw, tol)
        if withb then H.assert_close(r[4], gb, tol) end
        H.assert_close(r[k], lse, tol)
        H.assert_close(r[k + 1], ent, tol)
        for _, i in ipairs { 3, 7 } do
          assert.are.equal(0, H.values(r[k])[i])
          assert.are.equal(0, H.values(r[k + 1])[i])
        end
        -- the criterion: forward returns loss, lse, entropy; the fused call the gradients first;
        -- backward only the gradients
        local crit = ploss.LinearCrossEntropyLoss(with(opts, { return_lse = true, return_entropy = true }))
        local cl, clse, cent = crit:forward(x, w, y)
        H.assert_close({ cl }, { l }, { rtol = 0, atol = 0 })
        H.assert_close(clse, lse, tol)
        H.assert_close(cent, ent, tol)
        local c = { crit(x, w, y) }
        assert.are.equal(k + 1, #c)
        H.assert_close(c[k], lse, tol)
        H.assert_close(c[k + 1], ent, tol)
        assert.are.equal(withb and 3 or 2, select("#", crit:backward(x, w, y)))
      end
    end
    -- f32 (of f16 inputs too), and the entropy of equal logits is log V
    local e16 = select(2, F.linear_cross_entropy(x:type("f16"), w:type("f16"), y, { return_entropy = true }))
    assert.are.equal("f32", e16:dtype())
    local z = ploss.zeros({ 2, 4 }, { dtype = "f32" })
    local _, l0, h0 = F.linear_cross_entropy(z, ploss.randn({ 6, 4 }, { dtype = "f32", seed = 1 }),
      ploss.tensor({ 0, 1 }, { dtype = "i64" }), { return_lse = true, return_entropy = true })
    H.assert_close(l0, { math.log(6), math.log(6) }, { rtol = 1e-6 })
    H.assert_close(h0, { math.log(6), math.log(6) }, { rtol = 1e-6 })
    -- the criterion rewrites its lse and entropy buffers with their versions bumped, so a
    -- state saved from them (another criterion's forward) is not reused stale
    local crit = ploss.LinearCrossEntropyLoss { return_lse = true, return_entropy = true }
    local _, lse1, ent1 = crit:forward(x, w, y)
    local v1, e1 = lse1:version(), ent1:version()
    local _, _, _, lse2, ent2 = crit(x:clone():mul_(3), w, y)
    assert.are.equal(lse1, lse2)
    assert.is_true(lse2:version() > v1 and ent2:version() > e1)
    local ce, t = ploss.CrossEntropyLoss {}, ploss.tensor(0, { dtype = "i64" })
    ce:forward(lse2, t)
    crit:forward(x, w, y)
    H.assert_close(ce:backward(lse2, t), F.cross_entropy_backward(lse2, t, 1), { rtol = 1e-15 })
  end)

  it("refuses a bad bias, grad_bias, lse or entropy with an error naming it, writing nothing", function()
    local x, w, y = inputs(4, 5, 3, 109)
    local b = ploss.randn({ 5 }, { dtype = "f64", seed = 110 })
    local out = ploss.empty({}, { dtype = "f64" })
    local g1, g2, g3 = ploss.empty({ 4, 3 }, { dtype = "f64" }), ploss.empty({ 5, 3 }, { dtype = "f64" }),
      ploss.empty({ 5 }, { dtype = "f64" })
    local snap = H.poison(out, g1, g2, g3)
    local function fused(o)
      return F.linear_cross_entropy_fused(x, w, y, with({ out = out, grad_hidden = g1, grad_weight = g2 }, o))
    end
    H.expect_error(function() fused { bias = ploss.randn({ 4 }, { dtype = "f64" }), grad_bias = g3 } end,
      "bias: expected shape [5] (one bias per class)")
    H.expect_error(function() fused { bias = b:type("f16"), grad_bias = g3 } end, "bias: expected f64 (hidden's dtype) or f32, got f16")
    H.expect_error(function() fused { bias = b, grad_bias = ploss.empty({ 5 }, { dtype = "f32" }) } end,
      "grad_bias: expected f64, got f32")
    H.expect_error(function() fused { bias = b, grad_bias = ploss.empty({ 5, 1 }, { dtype = "f64" }) } end, "grad_bias")
    H.expect_error(function() fused { bias = b, grad_bias = g2:select(2, 1) } end, "grad_bias")
    H.expect_error(function() fused { bias = b, grad_bias = b } end, "grad_bias")
    H.expect_error(function() F.linear_cross_entropy(x, w, y, { grad_bias = g3 }) end, "grad_bias")
    H.expect_error(function() F.linear_cross_entropy(x, w, y, { return_lse = 1 }) end,
      "return_lse: expected a boolean (true or false), got number 1")
    H.assert_untouched(snap)
    -- the C entry points: grad_bias without a bias, a bias without grad_bias, a bad lse
    local ffi = require "ffi"
    local C = ploss.C
    local copts = ffi.new("ploss_linear_cross_entropy_opts")
    C.ploss_linear_cross_entropy_opts_init(copts)
    local function c_fused(bb, gb, lse)
      local st = C.ploss_linear_cross_entropy_fused(x:context(), x:dl(), w:dl(), y:dl(), bb and bb:dl(), copts,
        out:dl(), lse and lse:dl(), nil, g1:dl(), g2:dl(), gb and gb:dl())
      return tonumber(st), ffi.string(C.ploss_last_error())
    end
    local st, msg = c_fused(nil, g3)
    assert.are.equal(tonumber(C.PLOSS_ERR_INVALID_ARGUMENT), st)
    assert.is_truthy(msg:find("grad_bias: given without a bias", 1, true), msg)
    st, msg = c_fused(b, nil)
    assert.are.equal(tonumber(C.PLOSS_ERR_INVALID_ARGUMENT), st)
    assert.is_truthy(msg:find("grad_bias: tensor is NULL", 1, true), msg)
    st, msg = c_fused(b, g3, ploss.empty({ 3 }, { dtype = "f64" }))
    assert.are.equal(tonumber(C.PLOSS_ERR_SHAPE), st)
    assert.is_truthy(msg:find("lse: expected [4]", 1, true), msg)
    st, msg = c_fused(b, g3, ploss.empty({ 4 }, { dtype = "f32" }))
    assert.are.equal(tonumber(C.PLOSS_ERR_DTYPE), st)
    assert.is_truthy(msg:find("lse: expected f64, got f32", 1, true), msg)
    st, msg = c_fused(b, g3, g1:select(2, 1))
    assert.are.equal(tonumber(C.PLOSS_ERR_ALIAS), st)
    H.assert_untouched(snap)
  end)

  it("refuses call options and arguments its pass does not take", function()
    local x, w, y = inputs(4, 5, 3, 73)
    local crit = ploss.LinearCrossEntropyLoss()
    H.expect_error(function() crit:forward(x, w, y, 3) end, "LinearCrossEntropyLoss:forward: takes 3 arguments, got 4")
    H.expect_error(function() crit(x, w, y, math.huge) end, "scale: inf is not a finite number")
    H.expect_error(function() crit(x, w, y, 0 / 0) end, "scale: NaN is not a finite number")
    H.expect_error(function() ploss.LinearCrossEntropyLoss { reduction = "none" }:backward(x, w, y, 2) end,
      "gradOutput: a number is the upstream gradient of a reduced loss")
    H.expect_error(function() F.linear_cross_entropy_backward(x, w, y, 1, { scale = 3 }) end, "scale")
    H.expect_error(function() F.linear_cross_entropy(x, w, y, { grad_weight = ploss.empty({ 5, 3 }, { dtype = "f64" }) }) end,
      "grad_weight")
    H.expect_error(function() F.linear_cross_entropy_backward(x, w, y, 1, { out = ploss.empty({}, { dtype = "f64" }) }) end,
      "out")
    H.expect_error(function() F.cross_entropy_backward(ploss.randn({ 2, 3 }, { dtype = "f64" }),
      ploss.tensor({ 0, 1 }, { dtype = "i64" }), 1, { scale = 2 }) end, "scale")
    H.expect_error(function() crit:backward(x, w, y, ploss.ones({ 1, 1 }, { dtype = "f64" })) end,
      "gradOutput: expected a 0-d tensor or shape [1] (reduction mean or sum), got f64[1, 1]")
  end)
end)
