-- Margin softmax spec (suite 'cpu'): CombinedMarginLoss, AMSoftmaxLoss (CosFaceLoss) and
-- ArcFaceLoss on the CPU backend.
--  * values derived by hand (orthonormal embeddings and centres);
--  * an independent reference written here on the full N×C logits with InsightFace's
--    formulas (cos·cos m − sin·sin m, its threshold cos(π − m) and fallback
--    cos − sin(π − m)·m, its easy margin; cos(m1·θ + m2) − m3 for the combined margin),
--    every reduction, forward, backward and fused, one tile or several;
--  * central differences in f64 for x and weight;
--  * ignore_index (nothing added, a zero gradient, the mean over the other rows);
--  * the edge cases of the angle: |cos| = 1 (a finite derivative), θ + m > π (the
--    fallback; the target logit does not grow again), easy_margin; zero-norm rows;
--  * the public bug reports: a margin subtracted from every class, ArcFace's NaN gradient
--    at |cos| = 1, the target logit growing beyond θ + m = π, Partial FC with more classes
--    in the batch than the sample size;
--  * Partial FC (sample_rate, seed, ploss.PartialFCLoss): the kept classes, the softmax over
--    them against the loss on the gathered centres, uniform draws, one sample per seed;
--  * strided views, f32/f16/bf16, an empty batch; bad input: a clear error naming the
--    argument, nothing written.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

---------------------------------------------------------------------------------------
-- The reference: the full logits, written out on Lua tables
---------------------------------------------------------------------------------------

local PI = math.pi

local with = H.with

local function label(o) return H.options_label(o, "reduction") end

-- The margin of a criterion's options as (s, m1, m2, m3, easy).
local function margin_of(kind, o)
  if kind == "am_softmax" then return o.s or 30, 1, 0, o.m or 0.35, false end
  if kind == "arc_face" then return o.s or 64, 1, o.m or 0.5, 0, o.easy_margin or false end
  return o.s or 64, o.m1 or 1, o.m2 or 0.5, o.m3 or 0, o.easy_margin or false
end

-- InsightFace's target logit (before the scale) and its derivative in c.
local function target(c, m1, m2, m3, easy)
  c = math.max(-1, math.min(1, c))
  if m1 == 1 and m2 == 0 then return c - m3, 1 end -- CosFace
  local sin_t = math.sqrt(math.max(1 - c * c, 0))
  if m1 == 1 then -- ArcFace (with a CosFace shift): cos θ·cos m − sin θ·sin m
    local ctm = c * math.cos(m2) - sin_t * math.sin(m2)
    local d = math.cos(m2) + c * math.sin(m2) / math.max(sin_t, 1e-6)
    if easy then
      if c > 0 then return ctm - m3, d end
      return c - m3, 1
    end
    local th, mm = math.cos(PI - m2), math.sin(PI - m2) * m2
    if c > th then return ctm - m3, d end
    return c - mm - m3, 1
  end
  local theta = math.acos(c)
  if easy and c <= 0 then return c - m3, 1 end
  if m1 * theta + m2 >= PI then
    -- InsightFace's fallback for m1 = 1; for m1 > 1 the line through the minimum −1 − m3
    if m1 == 1 then return c - m2 * math.sin(m2) - m3, 1 end
    return c - math.cos((PI - m2) / m1) - 1 - m3, 1
  end
  return math.cos(m1 * theta + m2) - m3, m1 * math.sin(m1 * theta + m2) / math.max(sin_t, 1e-6)
end

local function normalise(rows)
  local U, R = {}, {}
  for i, r in ipairs(rows) do
    local s = 0
    for _, v in ipairs(r) do s = s + v * v end
    R[i] = math.sqrt(s)
    U[i] = {}
    for j, v in ipairs(r) do U[i][j] = v / math.max(R[i], 1e-12) end
  end
  return U, R
end

-- Per-row losses and the gradients of Σ_i w_i·ℓ_i (w: number or list) for the rows X, the
-- centres W and the labels Y (0-based; ignore_index rows add nothing).
local function reference(kind, X, W, Y, o, w)
  local s, m1, m2, m3, easy = margin_of(kind, o)
  local ignore = o.ignore_index or -100
  local U, RX = normalise(X)
  local V, RW = normalise(W)
  local n, C, D = #X, #W, #X[1]
  local losses, GU, GV = {}, {}, {}
  for i = 1, n do
    GU[i] = {}
    for d = 1, D do GU[i][d] = 0 end
  end
  for j = 1, C do
    GV[j] = {}
    for d = 1, D do GV[j][d] = 0 end
  end
  for i = 1, n do
    local y = Y[i]
    if y == ignore then
      losses[i] = 0
    else
      local z, dphi = {}, 1
      for j = 1, C do
        local c = 0
        for d = 1, D do c = c + U[i][d] * V[j][d] end
        if j == y + 1 then
          local t
          t, dphi = target(c, m1, m2, m3, easy)
          z[j] = s * t
        else
          z[j] = s * c
        end
      end
      local m = -math.huge
      for j = 1, C do m = math.max(m, z[j]) end
      local sum = 0
      for j = 1, C do sum = sum + math.exp(z[j] - m) end
      local lse = m + math.log(sum)
      losses[i] = lse - z[y + 1]
      local wi = type(w) == "table" and w[i] or w
      for j = 1, C do
        local g = wi * s * math.exp(z[j] - lse)
        if j == y + 1 then g = wi * s * dphi * (math.exp(z[j] - lse) - 1) end
        for d = 1, D do
          GU[i][d] = GU[i][d] + g * V[j][d]
          GV[j][d] = GV[j][d] + g * U[i][d]
        end
      end
    end
  end
  local function back(G, Z, R)
    local out = {}
    for i = 1, #G do
      local dot = 0
      if R[i] > 1e-12 then for d = 1, #G[i] do dot = dot + G[i][d] * Z[i][d] end end
      out[i] = {}
      for d = 1, #G[i] do out[i][d] = (G[i][d] - dot * Z[i][d]) / math.max(R[i], 1e-12) end
    end
    return out
  end
  return losses, back(GU, U, RX), back(GV, V, RW)
end

local function rows(t) return t:to("cpu"):double():totable() end

local function scaled(t, k)
  local v = H.values(t)
  for i = 1, #v do v[i] = v[i] * k end
  return v
end

local valid_count, reduce = H.valid_count, H.reduce_losses

local function upstream(reduction, count)
  return reduction == "mean" and 1 / count or 1
end

-- Embeddings, centres and labels: n rows of D against C classes.
local function inputs(n, C, D, seed, ignored)
  local x = ploss.randn({ n, D }, { dtype = "f64", seed = seed })
  local w = ploss.randn({ C, D }, { dtype = "f64", seed = seed + 1 })
  local y = {}
  for i = 1, n do y[i] = (i * 5 + seed) % C end
  for _, i in ipairs(ignored or {}) do y[i] = -100 end
  return x, w, ploss.tensor(y, { dtype = "i64" }), y
end

-- The losses, each with its criterion, functional name and option sets.
local KINDS = {
  { kind = "am_softmax", class = "AMSoftmaxLoss", options = { {}, { s = 10, m = 0.2 }, { s = 1, m = 0 } } },
  { kind = "arc_face", class = "ArcFaceLoss",
    options = { { s = 8 }, { s = 16, m = 0.3, easy_margin = true }, { s = 5, m = 1.2 } } },
  { kind = "combined_margin", class = "CombinedMarginLoss",
    options = { { s = 8 }, { s = 6, m1 = 1, m2 = 0.3, m3 = 0.2 }, { s = 4, m1 = 2, m2 = 0.1, m3 = 0.05 },
                { s = 4, m1 = 1.5, m2 = 0, m3 = 0.1, easy_margin = true } } },
}

---------------------------------------------------------------------------------------
-- Values derived by hand
---------------------------------------------------------------------------------------

describe("margin softmax losses", function()
  it("give the values derived by hand (orthonormal rows and centres)", function()
    -- x = (3, 0), centres e1 and e2, label 0: cos = (1, 0)
    local x = ploss.tensor({ { 3, 0 } }, { dtype = "f64" })
    local w = ploss.tensor({ { 2, 0 }, { 0, 5 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0 }, { dtype = "i64" })
    local s, m = 10, 0.35
    -- AM-softmax: z = (s(1 − m), 0)
    local want = math.log(1 + math.exp(-s * (1 - m)))
    H.assert_close(F.am_softmax(x, w, y, { s = s, m = m }), want, { rtol = 1e-14 })
    -- ArcFace: θ = 0, the target cos m
    want = math.log(1 + math.exp(-s * math.cos(0.5)))
    local l, gx, gw = ploss.ArcFaceLoss { s = s, m = 0.5 }(x, w, y)
    H.assert_close(l, want, { rtol = 1e-14 })
    -- at cos = 1 the projection removes the target's direction: only the other centre's
    -- term s·p_2·e2/‖x‖ is left, finite (no 1/√(1 − cos²))
    local p2 = 1 / (1 + math.exp(s * math.cos(0.5)))
    H.assert_close(gx, { { 0, s * p2 / 3 } }, { rtol = 1e-12, atol = 1e-15 })
    -- ∂/∂ŵ_2 = s·p_2·x̂ = (s·p_2, 0), through ŵ_2's normalisation: (s·p_2/5, 0); ŵ_1 ∥ x̂ gets 0
    H.assert_close(gw, { { 0, 0 }, { s * p2 / 5, 0 } }, { rtol = 1e-12, atol = 1e-15 })
    -- the combined margin cos(2θ + 0.2) − 0.1 at θ = π/4 (x = (1, 1)): cos(π/2 + 0.2) − 0.1 = −sin 0.2 − 0.1
    local x2 = ploss.tensor({ { 1, 1 } }, { dtype = "f64" })
    local c = math.sqrt(0.5)
    want = math.log(math.exp(4 * (-math.sin(0.2) - 0.1)) + math.exp(4 * c)) - 4 * (-math.sin(0.2) - 0.1)
    H.assert_close(F.combined_margin(x2, w, y, { s = 4, m1 = 2, m2 = 0.2, m3 = 0.1 }), want, { rtol = 1e-13 })
    -- ploss.CosFaceLoss and ploss.F.cos_face are AM-softmax
    assert.are.equal(ploss.AMSoftmaxLoss, ploss.CosFaceLoss)
    assert.are.equal(F.am_softmax(x2, w, y), F.cos_face(x2, w, y))
  end)

  for _, k in ipairs(KINDS) do
    describe(k.class, function()
      it("matches the full-logit reference for every option set and reduction", function()
        local x, w, y, Y = inputs(11, 7, 5, 3, { 4 })
        local X, W = rows(x), rows(w)
        local count = valid_count(Y)
        for _, o in ipairs(k.options) do
          for _, r in ipairs { "none", "mean", "sum" } do
            local opts = with(o, { reduction = r })
            local losses, gx, gw = reference(k.kind, X, W, Y, opts, upstream(r, count))
            local tol = { rtol = 1e-10, atol = 1e-12, what = k.kind .. " " .. r .. " " .. label(opts) }
            H.assert_close(F[k.kind](x, w, y, opts), reduce(losses, r, count), tol)
            local a, b = ploss[k.class](opts):backward(x, w, y)
            H.assert_close(a, gx, tol)
            H.assert_close(b, gw, tol)
            local l, fa, fb = ploss[k.class](opts)(x, w, y)
            H.assert_close(r == "none" and l or { l }, r == "none" and losses or { reduce(losses, r, count) }, tol)
            H.assert_close(fa, gx, tol)
            H.assert_close(fb, gw, tol)
          end
        end
      end)

      it("gives the same result in tiles of 1, 3 and all rows", function()
        local x, w, y = inputs(10, 6, 4, 17, { 2, 9 })
        local o = k.options[1]
        local l, a, b = F[k.kind .. "_fused"](x, w, y, o)
        for _, t in ipairs { 1, 3, 10, 64 } do
          local lt, at, bt = F[k.kind .. "_fused"](x, w, y, with(o, { tile_rows = t }))
          local tol = { rtol = 1e-13, atol = 1e-15, what = "tile_rows = " .. t }
          H.assert_close({ lt }, { l }, tol)
          H.assert_close(at, a, tol)
          H.assert_close(bt, b, tol)
        end
      end)

      it("has the gradient of central differences in f64 for x and weight", function()
        local x, w, y = inputs(6, 5, 4, 29, { 3 })
        for _, o in ipairs(k.options) do
          for _, r in ipairs { "mean", "sum" } do
            local opts = with(o, { reduction = r })
            local _, gx, gw = F[k.kind .. "_fused"](x, w, y, opts)
            local f = function() return F[k.kind](x, w, y, opts) end
            H.gradcheck(f, x, gx, { rtol = 1e-6, atol = 1e-7, what = k.kind .. " x " .. label(opts) })
            H.gradcheck(f, w, gw, { rtol = 1e-6, atol = 1e-7, what = k.kind .. " weight " .. label(opts) })
          end
        end
      end)

      it("weights each row by its upstream gradient (backward of 'none'), and the fused pass by scale", function()
        local x, w, y, Y = inputs(8, 5, 3, 31)
        local go = ploss.tensor({ 0.5, -1, 2, 0, 1.5, 3, -0.25, 1 }, { dtype = "f64" })
        local _, gx, gw = reference(k.kind, rows(x), rows(w), Y, k.options[1], go:totable())
        local opts = with(k.options[1], { reduction = "none" })
        local a, b = ploss[k.class](opts):backward(x, w, y, go)
        H.assert_close(a, gx, { rtol = 1e-10, atol = 1e-12 })
        H.assert_close(b, gw, { rtol = 1e-10, atol = 1e-12 })
        local l1, a1, b1 = F[k.kind .. "_fused"](x, w, y, k.options[1])
        local l2, a2, b2 = F[k.kind .. "_fused"](x, w, y, with(k.options[1], { scale = -2.5 }))
        assert.are.equal(l1, l2)
        H.assert_close(a2, scaled(a1, -2.5), { rtol = 1e-13, atol = 1e-15 })
        H.assert_close(b2, scaled(b1, -2.5), { rtol = 1e-13, atol = 1e-15 })
      end)
    end)
  end

  ---------------------------------------------------------------------------------------
  -- ignore_index
  ---------------------------------------------------------------------------------------

  it("adds nothing for ignored rows, gives them a zero gradient, and averages over the others", function()
    local x, w, y, Y = inputs(9, 6, 4, 41, { 1, 5, 6 })
    local keep, ykeep = {}, {}
    for i, v in ipairs(Y) do
      if v ~= -100 then
        keep[#keep + 1] = rows(x)[i]
        ykeep[#ykeep + 1] = v
      end
    end
    local xk = ploss.tensor(keep, { dtype = "f64" })
    local yk = ploss.tensor(ykeep, { dtype = "i64" })
    for _, k in ipairs(KINDS) do
      local o = k.options[1]
      local l, gx, gw = F[k.kind .. "_fused"](x, w, y, o)
      local lk, gxk, gwk = F[k.kind .. "_fused"](xk, w, yk, o)
      H.assert_close({ l }, { lk }, { rtol = 1e-14, what = k.kind })
      H.assert_close(gw, gwk, { rtol = 1e-12, atol = 1e-15, what = k.kind })
      local G = rows(gx)
      for _, i in ipairs { 1, 5, 6 } do H.assert_equal(G[i], { 0, 0, 0, 0 }, { what = k.kind .. " ignored row" }) end
      local none = F[k.kind](x, w, y, with(o, { reduction = "none" })):totable()
      assert.are.equal(0, none[1])
      -- a custom ignore_index, i32 labels
      local y32 = ploss.tensor(Y, { dtype = "i32" })
      local l32 = F[k.kind](x, w, y32, o)
      assert.are.equal(l, l32)
      local yc = {}
      for i, v in ipairs(Y) do yc[i] = v == -100 and 3 or v end
      local lc = F[k.kind](x, w, ploss.tensor(yc, { dtype = "i64" }), with(o, { ignore_index = 3 }))
      local count = 0
      for _, v in ipairs(yc) do if v ~= 3 then count = count + 1 end end
      local ref = reduce(reference(k.kind, rows(x), rows(w), yc, with(o, { ignore_index = 3 }), 1), "mean", count)
      H.assert_close(lc, ref, { rtol = 1e-12, what = k.kind .. " ignore_index = 3" })
    end
    -- every row ignored: a NaN mean, a zero sum, zero gradients
    local ya = ploss.tensor({ -100, -100 }, { dtype = "i64" })
    local l, gx, gw = F.arc_face_fused(ploss.randn({ 2, 4 }, { dtype = "f64", seed = 1 }), w, ya)
    assert.is_true(l ~= l)
    H.assert_equal(gx, { { 0, 0, 0, 0 }, { 0, 0, 0, 0 } })
    for _, r in ipairs(rows(gw)) do H.assert_equal(r, { 0, 0, 0, 0 }) end
  end)

  ---------------------------------------------------------------------------------------
  -- the angle's edge cases and the public bug reports
  ---------------------------------------------------------------------------------------

  it("gives every row of no features (D = 0) the loss of zero embeddings, with empty gradients", function()
    local x, w = ploss.empty({ 3, 0 }, { dtype = "f64" }), ploss.empty({ 5, 0 }, { dtype = "f64" })
    local xz, wz = ploss.zeros({ 3, 2 }, { dtype = "f64" }), ploss.zeros({ 5, 2 }, { dtype = "f64" })
    local y = ploss.tensor({ 1, -100, 4 }, { dtype = "i64" })
    for _, k in ipairs(KINDS) do
      local o = k.options[1]
      for _, r in ipairs { "none", "mean", "sum" } do
        local got = F[k.kind](x, w, y, with(o, { reduction = r }))
        local want = F[k.kind](xz, wz, y, with(o, { reduction = r }))
        H.assert_close(r == "none" and got or { got }, r == "none" and want or { want }, { rtol = 1e-14, what = k.kind .. " " .. r })
      end
      local _, gx, gw = F[k.kind .. "_fused"](x, w, y, o)
      assert.are.same({ 3, 0 }, gx:size())
      assert.are.same({ 5, 0 }, gw:size())
    end
  end)

  it("subtracts the AM-softmax margin from the target's cosine only", function()
    -- a margin on every logit would cancel in the softmax and leave the plain loss
    local x, w, y, Y = inputs(5, 4, 3, 51)
    local plain = F.am_softmax(x, w, y, { s = 10, m = 0, reduction = "none" }):totable()
    local got = F.am_softmax(x, w, y, { s = 10, m = 0.4, reduction = "none" }):totable()
    local U = normalise(rows(x))
    local V = normalise(rows(w))
    for i = 1, 5 do
      assert.is_true(got[i] > plain[i] + 1e-3, "row " .. i .. ": the margin raised the loss")
      local z = {}
      for j = 1, 4 do
        local c = 0
        for d = 1, 3 do c = c + U[i][d] * V[j][d] end
        z[j] = 10 * (c - (j == Y[i] + 1 and 0.4 or 0))
      end
      local sum = 0
      for j = 1, 4 do sum = sum + math.exp(z[j]) end
      H.assert_close(got[i], math.log(sum) - z[Y[i] + 1], { rtol = 1e-12 })
    end
  end)

  it("has a finite ArcFace gradient at |cos| = 1 (x parallel or opposite to its centre)", function()
    local w = ploss.tensor({ { 1, 0, 0 }, { 0, 2, 0 }, { 0, 0, 3 } }, { dtype = "f64" })
    local x = ploss.tensor({ { 2, 0, 0 }, { -4, 0, 0 }, { 0, 0, 7 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 0, 2 }, { dtype = "i64" })
    for _, dtype in ipairs { "f64", "f32", "bf16" } do
      for _, o in ipairs { { s = 16 }, { s = 16, easy_margin = true }, { s = 8, m = 1.2 } } do
        local _, gx, gw = F.arc_face_fused(x:type(dtype), w:type(dtype), y, o)
        for _, v in ipairs(gx:double():flat()) do assert.is_true(v == v and math.abs(v) < 1e6, dtype .. " grad_x") end
        for _, v in ipairs(gw:double():flat()) do assert.is_true(v == v and math.abs(v) < 1e6, dtype .. " grad_weight") end
      end
    end
    -- f64: the reference's values (the target's direction projected out at cos = ±1)
    local o = { s = 16 }
    local losses, gx, gw = reference("arc_face", rows(x), rows(w), { 0, 0, 2 }, o, 1 / 3)
    local l, a, b = F.arc_face_fused(x, w, y, o)
    H.assert_close(l, reduce(losses, "mean", 3), { rtol = 1e-13 })
    H.assert_close(a, gx, { rtol = 1e-12, atol = 1e-14 })
    H.assert_close(b, gw, { rtol = 1e-12, atol = 1e-14 })
  end)

  it("keeps a SphereFace margin (m1 > 1) rising with θ past m1·θ + m2 = π, with no jump there", function()
    -- the other centre orthogonal to the plane of x: its logit stays 0, the loss is softplus(−s·φ)
    local w = ploss.tensor({ { 1, 0, 0 }, { 0, 0, 1 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0 }, { dtype = "i64" })
    for _, o in ipairs { { m1 = 2, m2 = 0 }, { m1 = 2, m2 = 0.5 }, { m1 = 3, m2 = 0.2, m3 = 0.1 } } do
      local crit = ploss.CombinedMarginLoss { s = 8, m1 = o.m1, m2 = o.m2, m3 = o.m3 or 0 }
      local t0 = (PI - o.m2) / o.m1
      local last = -math.huge
      for k = -20, 20 do
        local th = t0 + 0.005 * k
        local l = crit:forward(ploss.tensor({ { math.cos(th), math.sin(th), 0 } }, { dtype = "f64" }), w, y)
        assert.is_true(l >= last, string.format("m1 = %g: the loss falls at θ = %.3f", o.m1, th))
        last = l
      end
      -- continuous at the threshold: the two sides 2e-9 apart differ by O(1e-8)
      local function at(th) return crit:forward(ploss.tensor({ { math.cos(th), math.sin(th), 0 } }, { dtype = "f64" }), w, y) end
      assert.is_true(math.abs(at(t0 + 1e-9) - at(t0 - 1e-9)) < 1e-6, "continuous at the threshold")
    end
  end)

  it("falls back to cos θ − m·sin m where θ + m > π, so the target logit never grows with θ", function()
    -- x at angle θ from centre 0 in the plane of centres 0 and 1, centre 1 at 90°
    local m, s = 0.5, 4
    local w = ploss.tensor({ { 1, 0 }, { 0, 1 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0 }, { dtype = "i64" })
    local prev
    for k = 0, 40 do
      local theta = PI * k / 40
      local x = ploss.tensor({ { math.cos(theta), math.sin(theta) } }, { dtype = "f64" })
      local c = math.cos(theta)
      local t = theta + m > PI and c - m * math.sin(m) or math.cos(theta + m)
      local other = math.sin(theta)
      local want = math.log(math.exp(s * t) + math.exp(s * other)) - s * t
      local got = F.arc_face(x, w, y, { s = s, m = m, reduction = "none" }):totable()[1]
      H.assert_close(got, want, { rtol = 1e-12, atol = 1e-14, what = "θ = " .. theta })
      -- the target logit, recovered from the loss, is non-increasing in θ
      local tz = -math.log(math.exp(got) - 1) / s + other -- e^ℓ − 1 = e^(s·other − s·t)
      if prev and theta > PI / 2 then assert.is_true(tz <= prev + 1e-9, "target logit grew at θ = " .. theta) end
      prev = tz
      -- easy_margin: the plain cosine wherever cos θ <= 0
      local te = c > 0 and math.cos(theta + m) or c
      local we = math.log(math.exp(s * te) + math.exp(s * other)) - s * te
      H.assert_close(F.arc_face(x, w, y, { s = s, m = m, easy_margin = true }), we,
        { rtol = 1e-12, atol = 1e-14, what = "easy margin, θ = " .. theta })
    end
  end)

  it("keeps the fallback with easy_margin where m1·θ + m2 > π and cos θ > 0 (m1 > 1)", function()
    -- m1 = 4, m2 = 0.2: m1·θ + m2 = π at cos θ_t = cos((π − 0.2)/4) ≈ 0.742; between θ_t and
    -- π/2 the target is the fallback line, not cos(4θ + 0.2) turning back up; past π/2 (cos θ
    -- <= 0) the easy margin's cos θ − m3
    local s, m1, m2, m3 = 30, 4, 0.2, 0.1
    local w = ploss.tensor({ { 1, 0 }, { -1, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0 }, { dtype = "i64" })
    local th_t = (PI - m2) / m1
    local prev
    for k = 0, 30 do
      local theta = 0.05 + (PI / 2 - 0.1) * k / 30
      local c = math.cos(theta)
      local t = theta < th_t and math.cos(m1 * theta + m2) - m3 or c - math.cos(th_t) - 1 - m3
      local want = math.log(math.exp(s * t) + math.exp(-s * c)) - s * t
      local x = ploss.tensor({ { c, math.sin(theta) } }, { dtype = "f64" })
      local got = F.combined_margin(x, w, y, { s = s, m1 = m1, m2 = m2, m3 = m3, easy_margin = true })
      H.assert_close(got, want, { rtol = 1e-12, atol = 1e-14, what = "θ = " .. theta })
      if prev then assert.is_true(got >= prev, "the loss fell at θ = " .. theta) end
      prev = got
    end
  end)

  it("gives a defined loss and no NaN for zero embeddings and zero centres", function()
    local x = ploss.tensor({ { 0, 0, 0 }, { 1, 2, 3 } }, { dtype = "f64" })
    local w = ploss.tensor({ { 0, 0, 0 }, { 1, 0, 0 }, { 0, 1, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 1, 0 }, { dtype = "i64" })
    for _, k in ipairs(KINDS) do
      local l, gx, gw = F[k.kind .. "_fused"](x, w, y, k.options[1])
      assert.is_true(l == l, k.kind .. " loss")
      for _, v in ipairs(gx:flat()) do assert.is_true(v == v, k.kind .. " grad_x") end
      for _, v in ipairs(gw:flat()) do assert.is_true(v == v, k.kind .. " grad_weight") end
      -- row 0 has every cosine 0: its loss is that of the logits (s·φ(0), 0, 0)
      local s, m1, m2, m3, easy = margin_of(k.kind, k.options[1])
      local t = target(0, m1, m2, m3, easy)
      local want = math.log(math.exp(s * t) + 2) - s * t
      H.assert_close(F[k.kind](x, w, y, with(k.options[1], { reduction = "none" })):totable()[1], want,
        { rtol = 1e-13, what = k.kind })
    end
  end)

  ---------------------------------------------------------------------------------------
  -- layouts, dtypes, empty batches
  ---------------------------------------------------------------------------------------

  it("reads strided views and D×C centres, writes strided gradients, and takes every float dtype", function()
    local x, w, y = inputs(12, 9, 6, 61, { 7 })
    local o = { s = 16, m = 0.4 }
    local l, a, b = F.arc_face_fused(x, w, y, o)
    local xt = x:t():contiguous():t()
    local wt = w:t():contiguous():t()
    local gw = ploss.empty({ 6, 9 }, { dtype = "f64" }):t()
    local l2, a2, b2 = F.arc_face_fused(xt, wt, y, with(o, { grad_weight = gw }))
    assert.are.equal(l, l2)
    H.assert_equal(a2, a)
    H.assert_equal(gw, b)
    assert.are.equal(gw, b2)
    -- weight_layout 'DxC': the centres as the columns of a D×C matrix, the gradient likewise
    local wdc = w:t():contiguous()
    local l3, a3, b3 = F.arc_face_fused(x, wdc, y, with(o, { weight_layout = "DxC" }))
    assert.are.equal(l, l3)
    H.assert_equal(a3, a)
    assert.are.same({ 6, 9 }, b3:size())
    H.assert_equal(b3:t(), b)
    assert.are.equal(l, ploss.ArcFaceLoss(with(o, { weight_layout = "DxC" })):forward(x, w:t(), y))
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local xd, wd = x:type(dtype), w:type(dtype)
      local lr, ar, br = F.arc_face_fused(xd:double(), wd:double(), y, o)
      local ld, ad, bd = F.arc_face_fused(xd, wd, y, o)
      assert.are.equal(dtype, ad:dtype())
      assert.are.equal(dtype, bd:dtype())
      H.assert_close(ld, lr, { rtol = 1e-6, what = dtype })
      H.assert_close(ad:double(), ar, { rtol = H.tol[dtype].rtol, atol = H.tol[dtype].atol * 10, what = dtype })
      H.assert_close(bd:double(), br, { rtol = H.tol[dtype].rtol, atol = H.tol[dtype].atol * 10, what = dtype })
    end
  end)

  it("gives a NaN mean, a zero sum and a zero weight gradient for an empty batch", function()
    local w = ploss.randn({ 5, 3 }, { dtype = "f64", seed = 3 })
    local x = ploss.empty({ 0, 3 }, { dtype = "f64" })
    local y = ploss.empty({ 0 }, { dtype = "i64" })
    local l, gx, gw = F.am_softmax_fused(x, w, y)
    assert.is_true(l ~= l)
    assert.are.equal(0, gx:numel())
    for _, r in ipairs(rows(gw)) do H.assert_equal(r, { 0, 0, 0 }) end
    assert.are.equal(0, F.am_softmax(x, w, y, { reduction = "sum" }))
  end)

  ---------------------------------------------------------------------------------------
  -- Partial FC
  ---------------------------------------------------------------------------------------

  -- The classes whose centre got a gradient (every kept one: a softmax gives each a nonzero
  -- share), ascending, 0-based.
  local function kept_classes(gw)
    local k = {}
    for j, r in ipairs(rows(gw)) do
      local any = false
      for _, v in ipairs(r) do any = any or v ~= 0 end
      if any then k[#k + 1] = j - 1 end
    end
    return k
  end

  -- The softmax over the kept centres only: the loss and gradients of the margin loss on the
  -- gathered centres and the labels as positions among them, the gradient scattered back.
  local function on_kept(kind, x, w, Y, kept, opts)
    local W, pos, sub = rows(w), {}, {}
    for k, j in ipairs(kept) do
      sub[k] = W[j + 1]
      pos[j] = k - 1
    end
    local y = {}
    for i, v in ipairs(Y) do y[i] = v == -100 and -100 or pos[v] end
    local l, gx, gws = F[kind .. "_fused"](x, ploss.tensor(sub, { dtype = "f64" }), ploss.tensor(y, { dtype = "i64" }),
      opts)
    local G, GS = {}, rows(gws)
    for j = 1, #W do G[j] = pos[j - 1] and GS[pos[j - 1] + 1] or { 0, 0, 0, 0 } end
    return l, gx, G
  end

  it("Partial FC: the batch's classes and uniformly drawn others, the softmax over them only", function()
    local x, w, y, Y = inputs(9, 40, 4, 71, { 2 })
    local positives = {}
    for _, v in ipairs(Y) do if v ~= -100 then positives[v] = true end end
    for _, k in ipairs(KINDS) do
      for _, rate in ipairs { 0.3, 0.5 } do
        local opts = with(k.options[1], { sample_rate = rate, seed = 12 })
        local l, gx, gw = F[k.kind .. "_fused"](x, w, y, opts)
        local kept = kept_classes(gw)
        assert.are.equal(math.floor(40 * rate) + 1, #kept, k.kind)
        local in_kept = {}
        for _, j in ipairs(kept) do in_kept[j] = true end
        for v in pairs(positives) do assert.is_true(in_kept[v], k.kind .. ": class " .. v .. " of the batch kept") end
        local lr, gxr, gwr = on_kept(k.kind, x, w, Y, kept, with(k.options[1], {}))
        local tol = { rtol = 1e-12, atol = 1e-15, what = k.kind .. " sample_rate " .. rate }
        H.assert_close({ l }, { lr }, tol)
        H.assert_close(gx, gxr, tol)
        H.assert_close(gw, gwr, tol) -- exactly zero on the rows not kept: gwr has zeros there
        -- one seed, one sample: forward, backward and fused agree; another seed draws others
        H.assert_equal({ F[k.kind](x, w, y, opts) }, { l })
        local bx, bw = F[k.kind .. "_backward"](x, w, y, 1, opts)
        H.assert_equal(bx, gx)
        H.assert_equal(bw, gw)
        local _, _, gw2 = F[k.kind .. "_fused"](x, w, y, with(opts, { seed = 13 }))
        local _, _, gw3 = F[k.kind .. "_fused"](x, w, y, with(opts, { seed = 13 }))
        H.assert_equal(gw3, gw2)
      end
      -- sample_rate 1: every class
      H.assert_equal({ F[k.kind](x, w, y, with(k.options[1], { sample_rate = 1, seed = 3 })) },
        { F[k.kind](x, w, y, k.options[1]) })
    end
  end)

  it("Partial FC with an ignore_index that is a class id ignores the rows of that label, not those of the " ..
    "class at that position among the kept ones", function()
    -- the same rows marked -100 instead: the same kept classes, so the same results
    local x = ploss.randn({ 7, 5 }, { dtype = "f64", seed = 21 })
    local w = ploss.randn({ 40, 5 }, { dtype = "f64", seed = 22 })
    for _, k in ipairs(KINDS) do
      -- -1: the position CUDA gives an ignored row
      for _, ign in ipairs { 0, 1, 2, -1 } do
        local Y, R = { 0, 1, 3, 30, 2, 17, ign }, {}
        for i, v in ipairs(Y) do R[i] = v == ign and -100 or v end
        local y, r = ploss.tensor(Y, { dtype = "i64" }), ploss.tensor(R, { dtype = "i64" })
        for seed = 1, 4 do
          for _, red in ipairs { "mean", "sum", "none" } do
            local o = with(k.options[1], { sample_rate = 0.2, seed = seed, reduction = red })
            local l, gx, gw = F[k.kind .. "_fused"](x, w, y, with(o, { ignore_index = ign }))
            local lr, gxr, gwr = F[k.kind .. "_fused"](x, w, r, o)
            local what = ("%s ignore_index %d seed %d %s"):format(k.kind, ign, seed, red)
            H.assert_equal(red == "none" and l or { l }, red == "none" and lr or { lr }, { what = what })
            H.assert_equal(gx, gxr, { what = what })
            H.assert_equal(gw, gwr, { what = what })
          end
        end
      end
    end
  end)

  it("Partial FC with more classes in the batch than the sample size keeps exactly the batch's classes", function()
    -- ⌊20·0.05⌋ + 1 = 2 < 6 classes in the batch: the kept set is those 6, no more (the
    -- reference's k = 0 case that keeps the wrong columns)
    local x = ploss.randn({ 8, 4 }, { dtype = "f64", seed = 81 })
    local w = ploss.randn({ 20, 4 }, { dtype = "f64", seed = 82 })
    local Y = { 3, 17, 3, 0, 9, 11, 17, 5 }
    local y = ploss.tensor(Y, { dtype = "i64" })
    local l, gx, gw = F.arc_face_fused(x, w, y, { s = 8, sample_rate = 0.05, seed = 4 })
    local kept = kept_classes(gw)
    assert.are.same({ 0, 3, 5, 9, 11, 17 }, kept)
    local lr, gxr, gwr = on_kept("arc_face", x, w, Y, kept, { s = 8 })
    H.assert_close({ l }, { lr }, { rtol = 1e-12 })
    H.assert_close(gx, gxr, { rtol = 1e-12, atol = 1e-15 })
    H.assert_close(gw, gwr, { rtol = 1e-12, atol = 1e-15 })
  end)

  it("Partial FC keeps at least two classes, so a batch of one class still has a softmax", function()
    -- ⌊1001·1e-4⌋ + 1 = 1 would keep the batch's one class alone: loss and gradient 0
    local x = ploss.randn({ 1, 4 }, { dtype = "f64", seed = 83 })
    local w = ploss.randn({ 1001, 4 }, { dtype = "f64", seed = 84 })
    local Y = { 700 }
    local y = ploss.tensor(Y, { dtype = "i64" })
    local l, gx, gw = F.arc_face_fused(x, w, y, { s = 8, sample_rate = 1e-4, seed = 6 })
    local kept = kept_classes(gw)
    assert.are.equal(2, #kept)
    assert.is_true(kept[1] == 700 or kept[2] == 700, "the batch's class kept")
    assert.is_true(l > 0, "a loss over two classes")
    local lr, gxr, gwr = on_kept("arc_face", x, w, Y, kept, { s = 8 })
    H.assert_close({ l }, { lr }, { rtol = 1e-12 })
    H.assert_close(gx, gxr, { rtol = 1e-12, atol = 1e-15 })
    H.assert_close(gw, gwr, { rtol = 1e-12, atol = 1e-15 })
  end)

  it("Partial FC draws the other classes uniformly", function()
    -- 2 classes in the batch, ⌊10·0.4⌋ + 1 = 5 kept: 3 of the 8 others, each with
    -- probability 3/8; over 400 seeds every class's count within 5 standard deviations
    local x = ploss.randn({ 2, 3 }, { dtype = "f64", seed = 91 })
    local w = ploss.randn({ 10, 3 }, { dtype = "f64", seed = 92 })
    local y = ploss.tensor({ 1, 6 }, { dtype = "i64" })
    local count = {}
    for j = 0, 9 do count[j] = 0 end
    for seed = 1, 400 do
      local _, _, gw = F.am_softmax_fused(x, w, y, { sample_rate = 0.4, seed = seed })
      local kept = kept_classes(gw)
      assert.are.equal(5, #kept)
      for _, j in ipairs(kept) do count[j] = count[j] + 1 end
    end
    assert.are.equal(400, count[1])
    assert.are.equal(400, count[6])
    local mean, sd = 400 * 3 / 8, math.sqrt(400 * 3 / 8 * 5 / 8)
    for _, j in ipairs { 0, 2, 3, 4, 5, 7, 8, 9 } do
      assert.is_true(math.abs(count[j] - mean) < 5 * sd, "class " .. j .. " drawn " .. count[j] .. " times")
    end
  end)

  -- Two steps of `crit` (seed s, drawing with `opts`): its fused call is `fused` with seed s;
  -- the forward and backward of the next step share seed s + 1 (the forward leaves the seed);
  -- then the seed is s + 2.
  local function check_two_steps(crit, fused, opts, s, x, w, y)
    local l, gx, gw = crit(x, w, y)
    local lr, gxr, gwr = fused(x, w, y, with(opts, { seed = s }))
    assert.are.equal(lr, l)
    H.assert_equal(gx, gxr)
    H.assert_equal(gw, gwr)
    assert.are.equal(s + 1, crit.seed)
    local lf = crit:forward(x, w, y)
    assert.are.equal(s + 1, crit.seed)
    local bx, bw = crit:backward(x, w, y)
    local ln, gnx, gnw = fused(x, w, y, with(opts, { seed = s + 1 }))
    assert.are.equal(ln, lf)
    H.assert_equal(bx, gnx)
    H.assert_equal(bw, gnw)
    assert.are.equal(s + 2, crit.seed)
  end

  it("ploss.PartialFCLoss wraps a margin criterion and draws anew after each step", function()
    local x, w, y = inputs(7, 30, 4, 101)
    local crit = ploss.PartialFCLoss { margin = ploss.CombinedMarginLoss { s = 8, m3 = 0.1 }, sample_rate = 0.2, seed = 5 }
    check_two_steps(crit, F.combined_margin_fused, { s = 8, m3 = 0.1, sample_rate = 0.2 }, 5, x, w, y)
    -- the given criterion is left as it was
    local m = ploss.ArcFaceLoss { s = 4 }
    ploss.PartialFCLoss { margin = m, sample_rate = 0.5 }(x, w, y)
    assert.are.equal(1, m.sample_rate)
    H.expect_error(function() ploss.PartialFCLoss { margin = ploss.CrossEntropyLoss {} } end,
      "PartialFCLoss: margin: expected a margin softmax criterion")
    H.expect_error(function() ploss.PartialFCLoss { rate = 0.1 } end, "PartialFCLoss: unknown option 'rate'")
    local err = H.expect_error(function() ploss.PartialFCLoss { sample_rate = 0 } end,
      "PartialFCLoss: opts.sample_rate: 0 is not a finite number in (0, 1]")
    assert.matches("margin_spec%.lua:%d+:", err)
    local bad = ploss.ArcFaceLoss {}
    H.expect_error(function() bad.s = -1 end, "ArcFaceLoss: crit.s: -1 is not a finite number in (0, 1e30]")
    assert.are.equal(64, bad.s)
    -- the checks of the call name this criterion and its method, not the C function it runs
    local pfc = ploss.PartialFCLoss { sample_rate = 0.5 }
    local w2 = ploss.randn({ 5, 2 }, { dtype = "f64", seed = 9 })
    H.expect_error(function() local r = pfc(x, w2, y) return r end, "ploss: PartialFCLoss: weight: expected C×")
    H.expect_error(function() local r = pfc:forward(x, w2, y) return r end, "ploss: PartialFCLoss:forward: weight:")
  end)

  it("a margin criterion with sample_rate < 1 draws anew after each step, as PartialFCLoss", function()
    local x, w, y = inputs(7, 30, 4, 111)
    local opts = { s = 8, sample_rate = 0.2 }
    check_two_steps(ploss.ArcFaceLoss(with(opts, { seed = 41 })), F.arc_face_fused, opts, 41, x, w, y)
    -- every class (rate 1) draws nothing: the seed stays
    local full = ploss.ArcFaceLoss { s = 8, seed = 9 }
    full(x, w, y)
    assert.are.equal(9, full.seed)
    -- the largest seed wraps to the smallest; seeds beyond ±(2^53 − 1) would not advance
    local top = ploss.AMSoftmaxLoss { sample_rate = 0.5, seed = 2 ^ 53 - 1 }
    top(x, w, y)
    assert.are.equal(-(2 ^ 53 - 1), top.seed)
    H.expect_error(function() ploss.ArcFaceLoss { sample_rate = 0.3, seed = -2 ^ 60 } end, "opts.seed")
  end)

  it("PartialFCLoss has Torch7's criterion methods: clone (its margin criterion too), clearState, the device " ..
     "and dtype methods, forward_tensor", function()
    local x, w, y = inputs(6, 20, 4, 121)
    local m = ploss.AMSoftmaxLoss { s = 8 }
    local crit = ploss.PartialFCLoss { margin = m, sample_rate = 0.3, seed = 3 }
    local c = crit:clone()
    assert.are_not.equal(m, c.margin)
    assert.are.equal(8, c.margin.s)
    assert.are.equal(3, c.seed)
    assert.are.equal(c, c:float())
    assert.are.equal(c, c:double():cpu())
    local l, gx, gw = crit(x, w, y)
    local lc, gxc, gwc = c(x, w, y)
    assert.are.equal(l, lc)
    H.assert_equal(gx, gxc)
    H.assert_equal(gw, gwc)
    assert.are.equal(crit.seed, c.seed)
    assert.are.equal(c, c:clearState())
    assert.is_nil(rawget(c, "gradInput"))
    local lt = c:forward_tensor(x, w, y)
    assert.is_true(ploss.is_tensor(lt))
    assert.are.equal(F.am_softmax(x, w, y, { s = 8, sample_rate = 0.3, seed = 4 }), lt:item())
  end)

  it("PartialFCLoss reads its margin criterion at each call and never writes it; its fields are checked", function()
    local x, w, y = inputs(6, 10, 4, 131)
    local a = ploss.ArcFaceLoss { s = 8 }
    local full = a(x, w, y)
    -- a margin assigned after construction: the draw is the PFC's, the criterion untouched
    local pfc = ploss.PartialFCLoss { sample_rate = 0.3 }
    pfc.margin = a
    local l = pfc(x, w, y)
    assert.are.equal(l, (F.arc_face_fused(x, w, y, { s = 8, sample_rate = 0.3, seed = 0 })))
    assert.are.equal(1, a.sample_rate)
    assert.are.equal(0, a.seed)
    assert.are.equal(full, (a(x, w, y)))
    -- the margin's options are read at each call, another margin softmax taken as it comes
    a.s = 16
    pfc.seed = 0
    assert.are.equal((F.arc_face_fused(x, w, y, { s = 16, sample_rate = 0.3, seed = 0 })), (pfc(x, w, y)))
    pfc.margin, pfc.seed = ploss.AMSoftmaxLoss { s = 10, m = 0.2 }, 0
    assert.are.equal((F.am_softmax_fused(x, w, y, { s = 10, m = 0.2, sample_rate = 0.3, seed = 0 })), (pfc(x, w, y)))
    -- refused: not a margin softmax (a class, the linear cross-entropy, a string), draw
    -- options of the margin's own, a rate or seed that is no longer valid
    for _, m in ipairs { ploss.ArcFaceLoss, ploss.LinearCrossEntropyLoss {}, "x" } do
      H.expect_error(function() local c = ploss.PartialFCLoss { margin = m } return c end,
        "PartialFCLoss: margin: expected a margin softmax criterion")
      H.expect_error(function() pfc.margin = m end, "PartialFCLoss: crit.margin: expected a margin softmax")
      assert.are.equal("AMSoftmaxLoss", pfc.margin._description.criterion) -- kept as it was
    end
    H.expect_error(function() local c = ploss.PartialFCLoss { margin = ploss.ArcFaceLoss { sample_rate = 0.5, seed = 7 } } return c end,
      "PartialFCLoss: margin: its sample_rate (0.5) and seed (7) must stay 1 and 0")
    -- a margin's draw options set after it was given are refused at the call
    local own = ploss.ArcFaceLoss {}
    pfc.margin = own
    own.sample_rate = 0.5
    H.expect_error(function() local r = pfc(x, w, y) return r end, "PartialFCLoss: margin: its sample_rate (0.5)")
    own.sample_rate = 1
    H.expect_error(function() pfc.sample_rate = nil end, "PartialFCLoss: crit.sample_rate: nil is not a finite number")
    H.expect_error(function() pfc.seed = 2 ^ 53 end, "PartialFCLoss: crit.seed: 9.007199254741e+15 is not an integer")
    assert.are.equal(0.3, pfc.sample_rate)
    pfc.seed = 2 ^ 53 - 2
    pfc(x, w, y)
    assert.are.equal(2 ^ 53 - 1, pfc.seed)
    -- the largest seed stays usable: the next step wraps to the smallest, which draws
    -- as that seed given directly
    local _, _, gw_top = pfc(x, w, y)
    assert.are.equal(-(2 ^ 53 - 1), pfc.seed)
    local _, _, gw_low = pfc(x, w, y)
    assert.are.equal(-(2 ^ 53 - 1) + 1, pfc.seed)
    local fresh = ploss.PartialFCLoss { margin = ploss.ArcFaceLoss {}, sample_rate = 0.3, seed = -(2 ^ 53 - 1) }
    local _, _, gw_fresh = fresh(x, w, y)
    H.assert_equal(gw_low, gw_fresh)
    assert.is_true(gw_top:numel() > 0)
    -- the private criterion's messages name the PFC
    H.expect_error(function() local r = pfc:forward(x, w) return r end, "PartialFCLoss:forward: labels: expected a ploss tensor")
  end)

  it("ploss.nn.MarginSoftmax owns the centres: the fused pass, their gradient, the nearest centre", function()
    ploss.manual_seed(3)
    local head = ploss.nn.MarginSoftmax { 4, 6, criterion = ploss.AMSoftmaxLoss { s = 10 }, dtype = "f64" }
    assert.are.same({ 6, 4 }, head.weight:size())
    local x, _, y = inputs(5, 6, 4, 111)
    local l, g = head(x, y)
    local lr, gr, gwr = F.am_softmax_fused(x, head.weight, y, { s = 10 })
    assert.are.equal(lr, l)
    H.assert_equal(g, gr)
    H.assert_equal(head.gradWeight, gwr)
    local p, gp = head:parameters()
    assert.are.equal(head.weight, p[1])
    assert.are.equal(head.gradWeight, gp[1])
    -- ∂W goes straight into gradWeight: the criterion keeps no C×D buffer of its own, and
    -- clearState drops the criterion's buffers too
    assert.is_nil(head.criterion.grad_weight)
    for _, b in pairs(rawget(head.criterion, "_grads") or {}) do assert.are_not.same({ 6, 4 }, b:size()) end
    assert.is_nil(rawget(head:clearState().criterion, "_loss"))
    l, g = head(x, y)
    H.assert_equal(head.gradWeight, gwr)
    -- PartialFCLoss takes grad_weight and grad_x as the margin criteria do (and so as a head's criterion)
    local pf = ploss.PartialFCLoss { margin = ploss.AMSoftmaxLoss { s = 10 }, sample_rate = 0.5, seed = 4 }
    local _, _, gw_own = pf:clone()(x, head.weight, y)
    local dst = ploss.zeros({ 6, 4 }, { dtype = "f64" })
    pf.grad_weight = dst
    local _, _, gw_given = pf(x, head.weight, y)
    assert.are.equal(dst, gw_given)
    H.assert_equal(dst, gw_own)
    local hp = ploss.nn.MarginSoftmax { 4, 6, dtype = "f64",
      criterion = ploss.PartialFCLoss { margin = ploss.AMSoftmaxLoss { s = 10 }, sample_rate = 0.5, seed = 4 } }
    hp.weight:copy(head.weight)
    hp(x, y)
    H.assert_equal(hp.gradWeight, gw_own)
    -- a gradWeight the criterion cannot write (another dtype) still gets the gradient, copied
    hp.gradWeight = ploss.zeros({ 6, 4 }, { dtype = "f32" })
    hp.criterion.seed = 4
    hp(x, y)
    H.assert_close(hp.gradWeight:to(nil, "f64"), gw_own, { rtol = 1e-6, atol = 1e-7 })
    -- clone copies the destinations (as the margin criteria's); the constructor checks them
    local pc = pf:clone()
    assert.are_not.equal(dst, pc.grad_weight)
    H.assert_equal(pc.grad_weight, dst)
    H.expect_error(function() ploss.PartialFCLoss { grad_weight = 5 } end,
      "PartialFCLoss: grad_weight: expected a ploss tensor, got number")
    -- a clone: copies of the centres, their gradient and the criterion; the next call of each
    -- gives the same numbers
    local c = head:clone()
    assert.are_not.equal(head.weight, c.weight)
    assert.are_not.equal(head.criterion, c.criterion)
    H.assert_equal(c.weight, head.weight)
    H.assert_equal(c.gradWeight, head.gradWeight)
    local lc = c(x, y)
    assert.are.equal(l, lc)
    -- cloning draws nothing from the global generator
    ploss.manual_seed(5)
    local r1 = ploss.randn({ 3 }, { dtype = "f64" }):totable()
    ploss.manual_seed(5)
    head:clone()
    assert.are.same(r1, ploss.randn({ 3 }, { dtype = "f64" }):totable())
    head:zeroGradParameters()
    H.assert_equal(head.gradWeight, ploss.zeros({ 6, 4 }, { dtype = "f64" }))
    H.assert_equal(c.gradWeight, gwr)
    -- the scores' argmax is the largest cosine
    local U, V = normalise(rows(x)), normalise(rows(head.weight))
    local scores = rows(head:forward(x))
    for i = 1, 5 do
      local best, bj, sbest, sj = -math.huge, 0, -math.huge, 0
      for j = 1, 6 do
        local c = 0
        for d = 1, 4 do c = c + U[i][d] * V[j][d] end
        if c > best then best, bj = c, j end
        if scores[i][j] > sbest then sbest, sj = scores[i][j], j end
      end
      assert.are.equal(bj, sj)
    end
    -- Torch7's habits met where they are: forward(x, y) does not silently give scores, and
    -- there is no separate backward
    H.expect_error(function() local r = head:forward(x, y) return r end,
      "MarginSoftmax:forward: takes the embeddings alone and gives the scores (got a tensor as argument 2)")
    H.expect_error(function() local r = head:backward(x, y) return r end,
      "MarginSoftmax:backward: the head has no separate backward; head(embeddings, labels)")
    H.expect_error(function() local r = head:forward(x, nil, y) return r end, "(got a tensor as argument 3)")
    H.expect_error(function() local r = ploss.nn.Sequential { ploss.nn.Linear(4, 4), head } return r end,
      "Sequential: modules[2]: ploss.nn.MarginSoftmax is a loss head, not a layer")
    H.expect_error(function() ploss.nn.MarginSoftmax { 4 } end, "MarginSoftmax: classes: expected an integer >= 2 (a softmax over one class has nothing to separate), got nil")
    -- the sizes by name (as nn.Linear's in_features): the same head
    local named = ploss.nn.MarginSoftmax { in_features = 4, classes = 6, dtype = "f64" }
    assert.are.same({ 6, 4 }, named.weight:size())
    assert.are.same({ 6, 4 }, ploss.nn.MarginSoftmax { 4, classes = 6 }.weight:size())
    H.expect_error(function() ploss.nn.MarginSoftmax { 4, 6, classes = 6 } end, "MarginSoftmax: classes: given twice")
    H.expect_error(function() ploss.nn.MarginSoftmax { 4, 6, clases = 6 } end, "MarginSoftmax: unknown option 'clases'")
    H.expect_error(function() ploss.nn.MarginSoftmax { 4, 1 } end, "MarginSoftmax: classes: expected an integer >= 2")
    -- a sharded criterion's head holds its rank's shard: one class is enough there
    local comm = ploss.comm.init { nranks = 1, rank = 0, id = ploss.comm.unique_id() }
    assert.are.same({ 1, 4 }, ploss.nn.MarginSoftmax { 4, 1, criterion = ploss.ArcFaceLoss { comm = comm } }.weight:size())
    assert.are.same({ 1, 4 }, ploss.nn.MarginSoftmax { 4, 1, criterion = ploss.PartialFCLoss { comm = comm } }.weight:size())
    -- scale_grad_x_by_ranks is the sharded call's: refused without a communicator (at
    -- construction, at a call after the field is set, and by the C API)
    assert(ploss.ArcFaceLoss { comm = comm, scale_grad_x_by_ranks = true })
    for _, name in ipairs { "ArcFaceLoss", "AMSoftmaxLoss", "CombinedMarginLoss", "PartialFCLoss" } do
      H.expect_error(function() local r = ploss[name] { scale_grad_x_by_ranks = true } return r end,
        name .. ": opts.scale_grad_x_by_ranks: set without opts.comm")
    end
    local lone = ploss.ArcFaceLoss {}
    lone.scale_grad_x_by_ranks = true
    H.expect_error(function() local r = lone(x, head.weight, y) return r end, "ArcFaceLoss: opts.scale_grad_x_by_ranks: set without")
    H.expect_error(function() local r = F.arc_face_fused(x, head.weight, y, { scale_grad_x_by_ranks = true }) return r end,
      "opts.scale_grad_x_by_ranks: set without opts.comm")
    H.expect_error(function() ploss.nn.MarginSoftmax { 0, 6 } end, "MarginSoftmax: in_features: expected an integer >= 1, got 0")
    -- centres of another layout than the head's (classes × in_features) would fail every call
    H.expect_error(function() ploss.nn.MarginSoftmax { 4, 6, criterion = ploss.ArcFaceLoss { weight_layout = "DxC" } } end,
      "MarginSoftmax: criterion: weight_layout 'DxC': the head's centres are classes × in_features")
    H.expect_error(function()
      ploss.nn.MarginSoftmax { 4, 6, criterion = ploss.PartialFCLoss { margin = ploss.AMSoftmaxLoss { weight_layout = "DxC" } } }
    end, "MarginSoftmax: criterion: weight_layout 'DxC'")
    -- the fields a call reads are checked at the call, before anything runs
    local w0 = head.weight
    head.criterion = nil
    H.expect_error(function() local r = head(x, y) return r end, "MarginSoftmax: head.criterion: expected a margin criterion", head.gradWeight)
    H.expect_error(function() head.criterion = ploss.CrossEntropyLoss {} end,
      "MarginSoftmax: head.criterion: expected a margin criterion (")
    assert.is_nil(head.criterion) -- as it was
    H.expect_error(function() head.weight = 3 end, "MarginSoftmax: head.weight: expected a ploss tensor")
    assert.are.equal(w0, head.weight)
    -- a margin criterion whose layout is changed after it was given: refused at the call
    head.criterion = ploss.AMSoftmaxLoss { s = 10 }
    head.criterion.weight_layout = "DxC"
    H.expect_error(function() local r = head(x, y) return r end, "MarginSoftmax: head.criterion: weight_layout 'DxC'", head.gradWeight)
    head.criterion.weight_layout = "CxD"
    head.weight = ploss.randn({ 7, 4 }, { dtype = "f64" })
    H.expect_error(function() local r = head(x, y) return r end, "MarginSoftmax: head.weight: expected 6×4 (classes × in_features), got", head.gradWeight)
    head.weight = w0
    H.expect_error(function() local r = head(x, y, 1, 2) return r end, "MarginSoftmax: takes 3 arguments (embeddings, labels [, scale]), got a number as argument 4", head.gradWeight)
    H.expect_error(function() head.wieght = w0 end, "MarginSoftmax: 'wieght' is none of the fields it reads at each call")
    local l2 = head(x, y) -- usable again once its fields are
    assert.are.equal(l, l2)
    H.assert_equal(head.gradWeight, gwr)
    H.expect_error(function() ploss.nn.MarginSoftmax(4, 6) end, "MarginSoftmax: expected one table {in_features, classes")
    H.expect_error(function() ploss.nn.MarginSoftmax { 4, 6, criterion = ploss.CrossEntropyLoss {} } end,
      "MarginSoftmax: criterion: expected a margin criterion (ploss.ArcFaceLoss{…}, AMSoftmaxLoss{…} = " ..
      "CosFaceLoss{…}, CombinedMarginLoss{…} or PartialFCLoss{…}), got ploss.CrossEntropyLoss")
    H.expect_error(function() ploss.nn.MarginSoftmax { 4, 6, criterion = "arcface" } end, "got 'arcface'")
    -- the class itself (its braces forgotten) is no criterion
    H.expect_error(function() ploss.nn.MarginSoftmax { 4, 6, criterion = ploss.ArcFaceLoss } end,
      "MarginSoftmax: criterion: expected a margin criterion")
    H.expect_error(function() ploss.nn.MarginSoftmax { 4, 6, bogus = 1 } end, "MarginSoftmax: unknown option 'bogus'")
  end)

  ---------------------------------------------------------------------------------------
  -- bad input
  ---------------------------------------------------------------------------------------

  it("ploss.nn.MarginSoftmax names the embeddings when they do not fit it, and converts like a Torch7 module",
    function()
    local head = ploss.nn.MarginSoftmax { in_features = 7, classes = 5 }
    local y = ploss.tensor({ 1, 2, 3 }, { dtype = "i64" })
    H.expect_error(function() local l = head(ploss.randn({ 3, 6 }), y) return l end,
      "MarginSoftmax:fused: embeddings: expected N×7 (in_features), got")
    H.expect_error(function() local l = head(ploss.randn({ 3, 7 }, { dtype = "f64" }), y) return l end,
      "MarginSoftmax:fused: embeddings: expected f32, the head's dtype (its centres), got f64")
    H.expect_error(function() local s = head:forward(ploss.randn({ 3, 6 })) return s end,
      "MarginSoftmax:forward: embeddings: expected N×7 (in_features)")
    -- double(): the centres converted, the same values; the loss as f64's of those centres
    local w = head.weight:double()
    local x = ploss.randn({ 3, 7 }, { dtype = "f64", seed = 5 })
    assert.are.equal(head, head:double())
    assert.are.equal("f64", head.weight:dtype())
    assert.are.equal("f64", head.gradWeight:dtype())
    H.assert_equal(head.weight, w)
    local l, g = head(x, y)
    local lr, gr, gwr = head.criterion(x, w, y)
    H.assert_equal({ l }, { lr })
    H.assert_equal(g, gr)
    H.assert_equal(head.gradWeight, gwr)
    H.expect_error(function() local h = head:to(nil, "i64") return h end, "MarginSoftmax:to: dtype")
    assert.are.equal("f64", head.weight:dtype())
    head:float()
    assert.are.equal("f32", head.weight:dtype())
    assert.is_nil(head.output)
    -- a dtype in the device's place, as Tensor:to; a bad device named, the head unchanged
    head:to("f64")
    assert.are.equal("f64", head.weight:dtype())
    H.expect_error(function() local h = head:to("gpu0") return h end,
      "MarginSoftmax:to: 'gpu0' is neither a dtype (f32, f16, bf16, f64, i64, i32, u8, or an alias")
    H.expect_error(function() local h = head:to("cuda:x", "f32") return h end,
      "MarginSoftmax:to: device: expected 'cpu', 'cuda' or 'cuda:<id>', got 'cuda:x'")
    assert.are.equal("f64", head.weight:dtype())
  end)

  it("refuses bad input with an error naming the argument, writing nothing", function()
    local x, w = ploss.randn({ 4, 3 }, { seed = 1 }), ploss.randn({ 5, 3 }, { seed = 2 })
    local y = ploss.tensor({ 0, 1, 4, 2 }, { dtype = "i64" })
    local out, g1, g2 = ploss.empty({}), ploss.empty({ 4, 3 }), ploss.empty({ 5, 3 })
    local fo = { out = out, grad_x = g1, grad_weight = g2 }
    H.expect_error(function() F.arc_face_fused(x, ploss.randn({ 5, 4 }), y, fo) end,
      "weight: expected C×3 class centres (one per row; D = 3 as x)", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w, y, with(fo, { weight_layout = "DxC" })) end,
      "weight: expected 3×C class centres (one per column, weight_layout DxC; D = 3 as x; for a C×3 weight: the " ..
      "default weight_layout 'CxD')", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w:t(), y, with(fo, { weight_layout = "DxC" })) end,
      "grad_weight: expected [3, 5] (the shape of weight)", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w, y, with(fo, { weight_layout = "CD" })) end,
      "weight_layout", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, ploss.randn({ 1, 3 }), y, fo) end,
      "weight: expected at least 2 class centres", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w, ploss.tensor({ 0, 1, 5, 2 }, { dtype = "i64" }), fo) end,
      "labels: class index 5 at row 2 (0-based) is outside [0, 5) and is not ignore_index (-100)", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w, ploss.tensor({ 0, -1, 1, 2 }, { dtype = "i32" }), fo) end,
      "labels: class index -1 at row 1", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w, ploss.tensor({ 0, 1, 2 }, { dtype = "i64" }), fo) end,
      "labels: expected [4] (one class index per row of x)", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w, ploss.tensor({ 0, 1, 2, 3 }), fo) end,
      "labels: expected class indices of dtype i64 or i32", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w:double(), y, fo) end, "weight", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w, y, with(fo, { grad_weight = ploss.empty({ 4, 3 }) })) end,
      "grad_weight: expected [5, 3] (the shape of weight)", out, g1)
    H.expect_error(function() F.arc_face_fused(x, w, y, with(fo, { grad_x = x })) end, "grad_x", out, g2)
    H.expect_error(function() F.arc_face_fused(x, w, y, with(fo, { s = 0 })) end,
      "opts.s: 0 is not a finite number in (0, 1e30]", out, g1, g2)
    -- past fp32's range s·cos would overflow to a NaN loss (f64 would not): refused for every dtype
    H.expect_error(function() F.arc_face_fused(x, w, y, with(fo, { s = 1e31 })) end,
      "opts.s: 1e31 is not a finite number in (0, 1e30]", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w, y, with(fo, { s = -1 })) end, "opts.s", out, g1, g2)
    H.expect_error(function() F.arc_face_fused(x, w, y, with(fo, { m = 2 })) end, "opts.m: 2", out, g1, g2)
    H.expect_error(function() F.am_softmax_fused(x, w, y, with(fo, { m = -0.1 })) end, "opts.m: -0.1", out, g1, g2)
    H.expect_error(function() F.combined_margin_fused(x, w, y, with(fo, { m1 = 0.5 })) end, "opts.m1: 0.5", out, g1, g2)
    H.expect_error(function() F.combined_margin_fused(x, w, y, with(fo, { m3 = 1.5 })) end, "opts.m3: 1.5", out, g1, g2)
    H.expect_error(function() F.combined_margin_fused(x, w, y, with(fo, { tile_rows = -1 })) end, "opts.tile_rows",
      out, g1, g2)
    H.expect_error(function() ploss.ArcFaceLoss { s = 0 / 0 } end, "opts.s: nan")
    H.expect_error(function() ploss.ArcFaceLoss { margin = 0.5 } end, "margin")
    H.expect_error(function() ploss.ArcFaceLoss { inplace = true } end, "inplace")
    H.expect_error(function() F.arc_face_fused(ploss.randn({ 4, 3, 1 }), w, y, fo) end, "x: expected N×D", out, g1, g2)
  end)
end)
