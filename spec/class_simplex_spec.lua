-- Class simplex loss spec (suite 'cpu') on the CPU backend (Torch7's ClassSimplexCriterion):
--  * the vertices: Torch7's iterative construction (regsplex, transcribed here) against the
--    loss's, unit norms and dot products −1/(C − 1), C = 2 … 40; the predictions;
--  * values by hand (C = 3) and against MSE on the vertices written out, every reduction
--    (Torch7's sizeAverage: 'mean' over N·C, 'sum'), N×C, N×C×d…, one sample's C outputs;
--  * central differences in f64; f32/f16/bf16 against the f64 of the rounded inputs;
--  * no ignore_index: every label must be in [0, C); C = 1 refused.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

-- Torch7's regsplex(n) and the zero column it appends: C rows (vertices) of C values.
local function torch7_simplex(C)
  local n = C - 1
  local a = {}
  for k = 1, n + 1 do
    a[k] = {}
    for j = 1, C do a[k][j] = 0 end
  end
  for k = 1, n do
    if k == 1 then
      a[k][k] = 1
    else
      local s = 0
      for j = 1, k - 1 do s = s + a[k][j] ^ 2 end
      a[k][k] = math.sqrt(1 - s)
    end
    local c = (a[k][k] ^ 2 - 1 - 1 / n) / a[k][k]
    for r = k + 1, n + 1 do a[r][k] = c end
  end
  return a
end

-- The loss's vertices: the predictions of the identity (row k of S·I, transposed: S).
local function ploss_simplex(C)
  local eye = {}
  for i = 1, C do
    eye[i] = {}
    for j = 1, C do eye[i][j] = i == j and 1 or 0 end
  end
  return ploss.ClassSimplexLoss():predictions(ploss.tensor(eye, { dtype = "f64" })):t():contiguous():totable()
end

-- Σ (x − s_y)² per sample (rows, 0-based labels) and the gradient rows for upstream `up`.
local function reference(rows, labels, red, up)
  local C = #rows[1]
  local S = torch7_simplex(C)
  local ls, sum, grads = {}, 0, {}
  for i, r in ipairs(rows) do
    local v = S[labels[i] + 1]
    local s, g = 0, {}
    for j = 1, C do
      local d = r[j] - v[j]
      s = s + d * d
      g[j] = 2 * d
    end
    ls[i], sum = s, sum + s
    grads[i] = g
  end
  for i, g in ipairs(grads) do
    local om = red == "none" and up[i] or red == "mean" and up / (#rows * C) or up
    for j = 1, C do g[j] = g[j] * om end
  end
  return red == "none" and ls or red == "mean" and sum / (#rows * C) or sum, grads
end

describe("ClassSimplexLoss", function()
  it("has Torch7's vertices: unit vectors, dot products −1/(C − 1), the last coordinate 0", function()
    for _, C in ipairs { 2, 3, 4, 7, 16, 40 } do
      local want, got = torch7_simplex(C), ploss_simplex(C)
      for k = 1, C do
        H.assert_close(got[k], want[k], { rtol = 1e-13, atol = 1e-15, what = C .. " vertex " .. k })
        assert.are.equal(0, got[k][C])
        for l = 1, C do
          local dot = 0
          for j = 1, C do dot = dot + got[k][j] * got[l][j] end
          H.assert_close({ dot }, { k == l and 1 or -1 / (C - 1) }, { rtol = 1e-13, atol = 1e-14 })
        end
      end
    end
  end)

  it("gives the values derived by hand (C = 3), with Torch7's name; its predictions", function()
    -- C = 3: vertices (1, 0, 0), (−½, √3/2, 0), (−½, −√3/2, 0).  Row 1 = (1, 0, 0), label 0:
    -- ℓ = 0; row 2 = (0, 1, 0), label 2: d = (½, 1 + √3/2, 0), ℓ = ¼ + (1 + √3/2)² = 2 + √3
    local r3 = math.sqrt(3)
    local x = ploss.tensor({ { 1, 0, 0 }, { 0, 1, 0 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 2 }, { dtype = "i64" })
    assert.are.equal(ploss.ClassSimplexLoss, ploss.ClassSimplexCriterion)
    local crit = ploss.ClassSimplexCriterion()
    H.assert_close({ crit:forward(x, y) }, { (2 + r3) / 6 }, { rtol = 1e-15 })
    H.assert_close(F.class_simplex_loss(x, y, { reduction = "none" }), { 0, 2 + r3 }, { rtol = 1e-15, atol = 1e-15 })
    H.assert_close(crit:backward(x, y), { { 0, 0, 0 }, { 1 / 6, (2 + r3) / 6, 0 } }, { rtol = 1e-15, atol = 1e-15 })
    H.assert_close(crit:predictions(x), { { 1, -0.5, -0.5 }, { 0, r3 / 2, -r3 / 2 } }, { rtol = 1e-15, atol = 1e-15 })
    H.assert_equal(crit:top_prediction(x), { 0, 1 })
    H.assert_equal(crit:top_prediction(ploss.tensor({ -1, -1, 0 }, { dtype = "f32" })), { 2 })
    -- one sample: C outputs and a 0-d label, a 0-d 'none' loss
    local one = F.class_simplex_loss(ploss.tensor({ 0, 1, 0 }, { dtype = "f64" }), ploss.tensor(2, { dtype = "i64" }),
      { reduction = "none" })
    assert.are.same({}, one:size())
    H.assert_close({ one:item() }, { 2 + r3 }, { rtol = 1e-15 })
  end)

  it("matches the squared error to Torch7's vertices: every reduction and pass, N×C and N×C×d…", function()
    local N, C = 13, 6
    local x = ploss.randn({ N, C }, { dtype = "f64", seed = 3 })
    local labels = {}
    for i = 1, N do labels[i] = (i * 5) % C end
    local y = ploss.tensor(labels, { dtype = "i64" })
    local rows = x:totable()
    for _, r in ipairs { "none", "mean", "sum" } do
      local up = r == "none" and ploss.randn({ N }, { dtype = "f64", seed = 4 }) or 1.75
      local want, grads = reference(rows, labels, r, r == "none" and up:totable() or up)
      local loss = F.class_simplex_loss(x, y, { reduction = r })
      H.assert_close(r == "none" and loss or { loss }, r == "none" and want or { want }, { rtol = 1e-14, what = r })
      H.assert_close(F.class_simplex_loss_backward(x, y, up, { reduction = r }), grads, { rtol = 1e-14, what = r })
      local fl, fg = ploss.ClassSimplexLoss { reduction = r }(x, y, r == "none" and 1.75 or up)
      H.assert_equal(r == "none" and fl or { fl }, r == "none" and loss or { loss }, { what = r .. " fused" })
      if r ~= "none" then H.assert_close(fg, grads, { rtol = 1e-14, what = r .. " fused" }) end
    end
    -- N×C×H×W: the same per pixel as the (N·H·W)×C rows
    local img = ploss.randn({ 2, 4, 3, 5 }, { dtype = "f64", seed = 7 })
    local lab = ploss.tensor({ { { 0, 1, 2, 3, 0 }, { 1, 1, 2, 3, 3 }, { 0, 0, 0, 2, 1 } },
      { { 3, 2, 1, 0, 3 }, { 2, 2, 2, 1, 0 }, { 1, 3, 3, 0, 2 } } }, { dtype = "i32" })
    local flat_x = img:permute(1, 3, 4, 2):contiguous():view(30, 4)
    local flat_y = lab:view(30)
    for _, r in ipairs { "mean", "sum" } do
      local l1, g1 = ploss.ClassSimplexLoss { reduction = r }(img, lab)
      local l2, g2 = ploss.ClassSimplexLoss { reduction = r }(flat_x, flat_y:long())
      H.assert_close({ l1 }, { l2 }, { rtol = 1e-14 })
      H.assert_close(g1:permute(1, 3, 4, 2):contiguous():view(30, 4), g2, { rtol = 1e-14 })
    end
  end)

  it("has the gradient of central differences in f64", function()
    local x = ploss.randn({ 5, 7 }, { dtype = "f64", seed = 11 })
    local y = ploss.tensor({ 0, 6, 3, 3, 1 }, { dtype = "i64" })
    for _, r in ipairs { "mean", "sum" } do
      local _, g = F.class_simplex_loss_fused(x, y, { reduction = r })
      H.gradcheck(function() return F.class_simplex_loss(x, y, { reduction = r }) end, x, g, { what = r })
    end
  end)

  it("computes f32, f16 and bf16 as the f64 of the rounded inputs; gradients in the input dtype", function()
    local x = ploss.randn({ 64, 10 }, { dtype = "f64", seed = 13 })
    local labels = {}
    for i = 1, 64 do labels[i] = (i * 7) % 10 end
    local y = ploss.tensor(labels, { dtype = "i64" })
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local xr = x:type(dtype)
      local rl, rg = F.class_simplex_loss_fused(xr:double(), y)
      local loss, g = ploss.ClassSimplexLoss()(xr, y)
      assert.are.equal(dtype, g:dtype())
      H.assert_close({ loss }, { rl }, { rtol = 1e-6, what = dtype })
      local t = H.tol[dtype]
      H.assert_close(g:double(), rg, { rtol = t.rtol, atol = t.atol, what = dtype })
    end
  end)

  it("takes no ignore_index: a label outside [0, C) is refused; C = 1 is refused", function()
    local x = ploss.randn({ 3, 4 }, { dtype = "f64" })
    H.expect_error(function() F.class_simplex_loss(x, ploss.tensor({ 0, -100, 1 }, { dtype = "i64" })) end,
      "PLOSS_ERR_INVALID_LABEL")
    H.expect_error(function() F.class_simplex_loss(x, ploss.tensor({ 0, 4, 1 }, { dtype = "i64" })) end,
      "PLOSS_ERR_INVALID_LABEL")
    H.expect_error(function() ploss.ClassSimplexLoss { ignore_index = -100 } end, "unknown option 'ignore_index'")
    -- Torch7's ClassSimplexCriterion(nClasses): the count is the input's
    H.expect_error(function() local c = ploss.ClassSimplexCriterion(10) return c end,
      "Torch7's nClasses is not taken: the class count is the input's size along axis 1")
    H.expect_error(function() F.class_simplex_loss(ploss.randn({ 3, 1 }), ploss.zeros({ 3 }, { dtype = "i64" })) end,
      "C >= 2")
    H.expect_error(function() ploss.ClassSimplexLoss():predictions(ploss.randn({ 2, 3, 4 })) end,
      "outputs: expected N×C or C values")
    -- the predictions name the caller's outputs, not a tensor of their own making
    H.expect_error(function() ploss.ClassSimplexLoss():predictions(ploss.randn({ 3, 1 })) end,
      "ClassSimplexLoss:predictions: outputs: expected at least 2 classes (the simplex of C vertices), got a ploss " ..
      "tensor f32[3, 1]")
    H.expect_error(function() ploss.ClassSimplexLoss():top_prediction(ploss.zeros({ 4, 0 }, { dtype = "bf16" })) end,
      "ClassSimplexLoss:top_prediction: outputs: expected at least 2 classes (the simplex of C vertices), got a " ..
      "ploss tensor bf16[4, 0]")
    H.expect_error(function() ploss.ClassSimplexLoss():predictions(ploss.zeros({ 1, 3 }, { dtype = "i32" })) end,
      "ClassSimplexLoss:predictions: outputs: expected a float dtype (f32, f16, bf16, f64), got a ploss tensor i32[1, 3]")
  end)
end)
