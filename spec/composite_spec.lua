-- Composite spec (suite 'cpu'): Tensor:add_ (ploss_axpby) and the criteria made of
-- criteria, MultiCriterion and ParallelCriterion (Torch7's):
--  * add_: values by hand, PyTorch's broadcasting, strided and transposed views, mixed
--    dtypes rounded once, alpha = 0 not reading other, the same view as self, a number
--    (float tensors, and integer label maps within their dtype's range); bad input refused
--    with nothing written;
--  * composites: a hand-derived weighted sum (MSE + L1), CE + Lovász-softmax and two
--    triplet losses against their members called alone (f64, the sums exact to rounding),
--    backward with gradOutput, the fused scale, f32 buffers rounded once per member, the
--    composite's own gradient given back as its input, ParallelCriterion with
--    repeatTarget, target lists and a member of several inputs; a member without a target
--    given none (targets[k] refused unless nil), MultiCriterion members that disagree on
--    taking a target refused; misuse refused by name;
--  * SpatialAutoCropMSELoss: MSELoss against the centred crop of a larger target, by hand and
--    against MSELoss on the crop; what cannot be cropped refused by name; L1NormLoss (Torch7's
--    L1Cost) by hand and against L1Loss on zeros.
local H = require "spec.helpers"
local ploss = H.ploss
local ffi = require "ffi"

local function t64(v) return ploss.tensor(v, { dtype = "f64" }) end

describe("Tensor:add_", function()
  it("adds alpha times other, broadcast by PyTorch's rules", function()
    local a = t64({ { 1, 2, 3 }, { 4, 5, 6 } })
    H.assert_equal(a:add_(t64({ 10, 20, 30 }), 0.5), { { 6, 12, 18 }, { 9, 15, 21 } })
    H.assert_equal(a:add_(t64({ { 1 }, { 2 } })), { { 7, 13, 19 }, { 11, 17, 23 } })
    H.assert_equal(a:add_(t64({ -1 })), { { 6, 12, 18 }, { 10, 16, 22 } })
    H.assert_equal(a:add_(a), { { 12, 24, 36 }, { 20, 32, 44 } }) -- the same view: doubled
    H.assert_equal(a:add_(a, -1), { { 0, 0, 0 }, { 0, 0, 0 } })
  end)

  it("walks strided and transposed views of self and other", function()
    local base = t64({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } })
    local dst = base:narrow(2, 2, 2)                       -- 3×2 with row stride 4
    local src = t64({ { 100, 200, 300 }, { 400, 500, 600 } }):t() -- 3×2 transposed
    dst:add_(src, 2)
    H.assert_equal(base, { { 1, 202, 803, 4 }, { 5, 406, 1007, 8 }, { 9, 610, 1211, 12 } })
    local v = ploss.zeros({ 2, 3 }, { dtype = "f64" }):t()   -- a transposed self
    v:add_(t64({ 1, 2 }))
    H.assert_equal(v, { { 1, 2 }, { 1, 2 }, { 1, 2 } })
  end)

  it("computes in f64 and rounds to self's dtype (f16 and bf16 through f32, as copy)", function()
    -- f16 1 + 2^-11 is a tie between 1 and 1 + 2^-10 (to even: 1); 1 + 2^-11 + 2^-20 rounds
    -- up; 1 + 2^-11 + 2^-40 is 1 + 2^-11 in f32, then the tie: 1
    local h = ploss.tensor({ 1, 1, 1 }, { dtype = "f16" })
    h:add_(t64({ 2 ^ -11, 2 ^ -11 + 2 ^ -20, 2 ^ -11 + 2 ^ -40 }))
    H.assert_equal(h, { 1, 1 + 2 ^ -10, 1 })
    local f = ploss.tensor({ 1 }, { dtype = "f32" })
    f:add_(ploss.tensor({ 3 }, { dtype = "bf16" }), 0.25)
    H.assert_equal(f, { 1.75 })
  end)

  it("mul_ scales in place, a NaN or Inf times 0 staying NaN as in PyTorch", function()
    local a = t64({ { 1, -2 }, { 3, 0 / 0 } })
    H.assert_equal(a:t():mul_(-0.5), { { -0.5, -1.5 }, { 1, 0 / 0 } })
    local b = t64({ 1, math.huge, 0 / 0 }):mul_(0)
    H.assert_equal(b, { 0, 0 / 0, 0 / 0 })
    H.expect_error(function() b:mul_("2") end, "mul_: value: expected a number, got '2'")
    H.expect_error(function() b:mul_(math.huge) end, "mul_: value: expected a finite number, got inf")
    -- the sign of zero: −1·0 and 2·(−0) are −0, as IEEE products (PyTorch)
    local z = t64({ -1, 0, 2 }):mul_(-0.0):flat()
    assert.are.same({ 1 / 0, -1 / 0, -1 / 0 }, { 1 / z[1], 1 / z[2], 1 / z[3] })
    H.expect_error(function() ploss.tensor({ 1 }, { dtype = "i32" }):mul_(2) end, "mul_: self: expected a float dtype")
  end)

  it("keeps a NaN or Inf of other when alpha is 0, as PyTorch's add_", function()
    local a = t64({ 1, 2, 3 })
    a:add_(t64({ math.huge, 0 / 0, 5 }), 0)
    H.assert_equal(a, { 0 / 0, 0 / 0, 3 })
  end)

  it("add_ of a number: float tensors, and integer label maps within their range", function()
    local x = ploss.tensor({ 1.5, -2 }, { dtype = "f64" })
    x:add_(3, 0.5)
    assert.are.same({ 3, -0.5 }, x:flat())
    -- Torch7's 1-based labels to 0-based ones, on a transposed view: the elements of the view
    local y = ploss.tensor({ { 1, 2 }, { 3, 10 } }, { dtype = "i64" })
    assert.are.equal(y, y:t():add_(-1) and y)
    assert.are.same({ { 0, 1 }, { 2, 9 } }, y:totable())
    local z = ploss.tensor({ 7, 1, 2 }, { dtype = "i32" })
    z:narrow(1, 2, 2):add_(4)
    assert.are.same({ 7, 5, 6 }, z:flat())
    -- the exact ends of i64 (values past 2^53)
    local m = ploss.tensor({ 0, 0 }, { dtype = "i64" })
    m:fill(-2 ^ 63)
    m:add_(1)
    assert.are.equal(-0x7fffffffffffffffLL, ffi.cast("int64_t *", m:dl().data)[0])
    -- a result the dtype cannot hold: an error, nothing written
    local u = ploss.tensor({ 3, 0 }, { dtype = "u8" })
    H.expect_error(function() u:add_(-1) end, "add_: element 2 (row-major): 0 + -1 is outside u8's range")
    assert.are.same({ 3, 0 }, u:flat())
    H.expect_error(function() ploss.tensor({ 2 ^ 31 - 1 }, { dtype = "i32" }):add_(1) end,
      "2147483647 + 1 is outside i32's range")
    H.expect_error(function() y:add_(0.5) end, "add_: other: an integer tensor takes an integer")
    local e = ploss.zeros({ 1, 3 }, { dtype = "i64" }):expand(2, 3)
    H.expect_error(function() e:add_(1) end, { "add_: self: strides make distinct elements share memory", "LAYOUT" })
    H.expect_error(function() x:add_(1 / 0) end, "add_: other: alpha·other = inf is not a finite number")
    H.expect_error(function() x:add_("1") end, "add_: other: expected a tensor or a number, got '1'")
  end)

  it("refuses bad input by name, writing nothing", function()
    local a = t64({ { 1, 2, 3 }, { 4, 5, 6 } })
    -- H.expect_error fills `a` with a sentinel and checks that it is still there after
    H.expect_error(function() a:add_(t64({ 1, 2 })) end,
      { "add_: other: f64[2] on cpu does not broadcast to self's sizes (self is f64[2, 3] on cpu)", "SHAPE" }, a)
    H.expect_error(function() a:add_(a:narrow(1, 1, 1)) end, { "add_: self: overlaps the memory of other", "ALIAS" }, a)
    H.expect_error(function() a:add_("3") end, "add_: other: expected a tensor or a number, got '3'", a)
    H.expect_error(function() a:add_(a, "2") end, "add_: alpha: expected a number, got '2'", a)
    H.expect_error(function() a:add_(a, math.huge) end, { "alpha: expected a finite number", "INVALID_ARGUMENT" }, a)
    H.expect_error(function() a:add_(a, 0 / 0) end, "alpha: expected a finite number, got nan", a)
    local i = ploss.tensor({ 1, 2 }, { dtype = "i64" })
    H.expect_error(function() i:add_(t64({ 1, 1 })) end, { "add_: self: expected a float dtype", "i64" })
    H.expect_error(function() a:add_(ploss.tensor({ 1, 2, 3 }, { dtype = "i32" })) end,
      { "add_: other: expected a float dtype", "i32" })
    local e = ploss.zeros({ 1, 3 }, { dtype = "f64" }):expand(2, 3)
    H.expect_error(function() e:add_(a) end, { "add_: self:", "LAYOUT" })
  end)
end)

-- Σ_k w_k·(values of list k), element by element
local function weighted(lists, w)
  local out = {}
  for i = 1, #lists[1] do
    local s = 0
    for k = 1, #lists do s = s + w[k] * lists[k][i] end
    out[i] = s
  end
  return out
end

describe("MultiCriterion", function()
  it("adds weighted losses and gradients (MSE + L1 by hand)", function()
    local x, t = t64({ 1, -2, 3 }), t64({ 0, 0, 1 })
    local crit = ploss.MultiCriterion():add(ploss.MSELoss(), 2):add(ploss.L1Loss())
    -- MSE 9/3 = 3, L1 5/3; ∂MSE = 2(x − t)/3, ∂L1 = sign(x − t)/3
    local loss, grad = crit(x, t)
    local expect = { 2 * 2 / 3 + 1 / 3, 2 * -4 / 3 - 1 / 3, 2 * 4 / 3 + 1 / 3 }
    H.assert_close(loss, 2 * 3 + 5 / 3, { rtol = 1e-15 })
    H.assert_close(grad, expect, { rtol = 1e-15 })
    H.assert_close(crit:forward(x, t), 2 * 3 + 5 / 3, { rtol = 1e-15 })
    H.assert_close(crit:backward(x, t), expect, { rtol = 1e-15 })
    H.assert_close(crit:backward(x, t, -0.5), { -(4 / 3 + 1 / 3) / 2, (8 / 3 + 1 / 3) / 2, -(8 / 3 + 1 / 3) / 2 },
      { rtol = 1e-15 })
    local l2, g2 = crit(x, t, 3) -- the fused scale multiplies the gradient only
    H.assert_close(l2, 2 * 3 + 5 / 3, { rtol = 1e-15 })
    H.assert_close(g2, { 3 * 5 / 3, 3 * -3, 3 * 3 }, { rtol = 1e-15 })
    assert.equal(crit.output, l2)
    assert.equal(crit.gradInput, g2)
  end)

  it("CE + 0.5·Lovász-softmax equals its members called alone (f64, N×C×H×W)", function()
    H.seed(11)
    local x = H.random_logits({ 2, 4, 3, 5 }, { dtype = "f64" })
    local y = H.random_labels({ 2, 3, 5 }, 4)
    local crit = ploss.MultiCriterion():add(ploss.CrossEntropyLoss{ label_smoothing = 0.1 })
      :add(ploss.LovaszSoftmaxLoss(), 0.5)
    local loss, grad = crit(x, y)
    local l1, g1 = ploss.CrossEntropyLoss{ label_smoothing = 0.1 }(x, y)
    local l2, g2 = ploss.LovaszSoftmaxLoss()(x, y)
    H.assert_close(loss, l1 + 0.5 * l2, { rtol = 1e-15 })
    H.assert_close(grad, weighted({ g1:flat(), g2:flat() }, { 1, 0.5 }), { rtol = 1e-15, atol = 1e-17 })
    -- its own gradient given back as the input: a new buffer, the values of that input
    local la, ga = crit(grad, y)
    local lb = ploss.CrossEntropyLoss{ label_smoothing = 0.1 }(grad, y) + 0.5 * ploss.LovaszSoftmaxLoss()(grad, y)
    H.assert_close(la, lb, { rtol = 1e-15 })
    assert.is_false(ga:storage_id() == grad:storage_id())
  end)

  it("rounds f32 sums once per member", function()
    H.seed(12)
    local x = H.random_logits({ 6, 5 }, { dtype = "f32" })
    local y = H.random_labels({ 6 }, 5)
    local crit = ploss.MultiCriterion():add(ploss.CrossEntropyLoss(), 0.3):add(ploss.SoftmaxFocalLoss{ gamma = 2 }, 0.7)
    local _, grad = crit(x, y)
    local _, g1 = ploss.CrossEntropyLoss()(x, y)
    local _, g2 = ploss.SoftmaxFocalLoss{ gamma = 2 }(x, y)
    -- first member: fl(0.3·g1); second: fl(fl(0.3·g1) + 0.7·g2), each product and sum in f64
    local a, b = g1:flat(), g2:flat()
    local function f32(v) return ploss.tensor({ v }, { dtype = "f32" }):flat()[1] end
    local expect = {}
    for i = 1, #a do expect[i] = f32(f32(0.3 * a[i]) + 0.7 * b[i]) end
    H.assert_equal(grad, expect)
  end)

  it("sums each input's gradient for members of several inputs (triplets)", function()
    H.seed(13)
    local a, p, n = (H.random_logits({ 5, 4 }, { dtype = "f64" })), H.random_logits({ 5, 4 }, { dtype = "f64" }),
      H.random_logits({ 5, 4 }, { dtype = "f64" })
    local crit = ploss.MultiCriterion():add(ploss.TripletMarginLoss{ margin = 2 }, 1)
      :add(ploss.TripletMarginLoss{ margin = nil, p = 1 }, 0.25)
    local loss, ga, gp, gn = crit(a, p, n)
    local l1, a1, p1, n1 = ploss.TripletMarginLoss{ margin = 2 }(a, p, n)
    local l2, a2, p2, n2 = ploss.TripletMarginLoss{ margin = nil, p = 1 }(a, p, n)
    H.assert_close(loss, l1 + 0.25 * l2, { rtol = 1e-15 })
    H.assert_close(ga, weighted({ a1:flat(), a2:flat() }, { 1, 0.25 }), { rtol = 1e-15, atol = 1e-17 })
    H.assert_close(gp, weighted({ p1:flat(), p2:flat() }, { 1, 0.25 }), { rtol = 1e-15, atol = 1e-17 })
    H.assert_close(gn, weighted({ n1:flat(), n2:flat() }, { 1, 0.25 }), { rtol = 1e-15, atol = 1e-17 })
    local fa, fp, fn = ga:flat(), gp:flat(), gn:flat() -- the buffers the next call writes again
    local ba, bp, bn = crit:backward(a, p, n, 2)
    assert.equal(ga, ba)
    -- the field, as a member's own: the list of the three gradients
    assert.are.same({ ba, bp, bn }, crit.gradInput)
    H.assert_close(ba, weighted({ fa }, { 2 }), { rtol = 1e-15, atol = 1e-17 })
    H.assert_close(bp, weighted({ fp }, { 2 }), { rtol = 1e-15, atol = 1e-17 })
    H.assert_close(bn, weighted({ fn }, { 2 }), { rtol = 1e-15, atol = 1e-17 })
    -- Torch7's list form {a, p, n}: the same numbers, the gradients as one list; nothing
    -- may follow the list (a Torch7 loop's target, which these members do not take)
    local sa, sp, sn = crit:backward(a, p, n)
    sa, sp, sn = sa:clone(), sp:clone(), sn:clone()
    H.expect_error(function() crit:backward({ a, p, n }, 2) end,
      "MultiCriterion:backward: ploss.TripletMarginLoss takes no target")
    H.expect_error(function() crit({ a, p, n }, 2) end, "MultiCriterion:fused: ploss.TripletMarginLoss takes no target")
    H.expect_error(function() crit:forward({ a, p, n }, 2) end, "TripletMarginLoss:forward: ploss.TripletMarginLoss takes no target")
    local listed = crit:backward({ a, p, n })
    assert.are.equal(3, #listed)
    -- nested: a MultiCriterion member of a MultiCriterion, its message naming the method
    local nested = ploss.MultiCriterion():add(ploss.MultiCriterion():add(ploss.TripletMarginLoss()))
    H.expect_error(function() nested:backward({ a, p, n }, 2) end,
      "MultiCriterion:backward: ploss.TripletMarginLoss takes no target: in Torch7's list form, " ..
      "crit:backward({anchor, positive, negative}), nothing follows the list")
    H.expect_error(function() nested({ a, p, n }, 2) end, "in Torch7's list form, crit({anchor, positive, negative})")
    H.assert_equal(listed[1], sa)
    H.assert_equal(listed[2], sp)
    H.assert_equal(listed[3], sn)
    assert.are.equal(listed, crit.gradInput)
    local ll, lg = crit({ a, p, n })
    assert.are.equal(loss, ll)
    H.assert_close(lg[3], weighted({ fn }, { 1 }), { rtol = 0, atol = 0 })
    assert.are.equal(loss, crit:forward({ a, p, n }))
    -- a member's per-row outputs (return_lse) would be taken for gradients: refused
    local h, w = H.random_logits({ 4, 3 }, { dtype = "f64" }), H.random_logits({ 5, 3 }, { dtype = "f64" })
    local lab = ploss.tensor({ 0, 1, 4, 2 }, { dtype = "i64" })
    local lse = ploss.MultiCriterion():add(ploss.LinearCrossEntropyLoss { return_lse = true }, 2)
    H.expect_error(function() lse(h, w, lab) end,
      "MultiCriterion:fused: member 1 returns its lse (return_lse = true): a composite adds losses and gradients only")
    local pe = ploss.ParallelCriterion():add(ploss.LinearCrossEntropyLoss { return_entropy = true })
    H.expect_error(function() pe({ { h, w } }, { lab }) end,
      "ParallelCriterion:fused: member 1 returns its entropy (return_entropy = true)")
  end)

  it("refuses misuse by name", function()
    local x, t = t64({ 1, 2 }), t64({ 0, 0 })
    local crit = ploss.MultiCriterion()
    H.expect_error(function() crit:forward(x, t) end, "MultiCriterion:forward: no criterion added")
    H.expect_error(function() crit:add(ploss.MSELoss) end, "MultiCriterion:add: expected a criterion")
    H.expect_error(function() crit:add({}) end, "a table that is not one")
    H.expect_error(function() crit:add(ploss.MSELoss(), 0 / 0) end, "MultiCriterion:add: weight: expected a finite number")
    H.expect_error(function() ploss.MultiCriterion{ weights = { 1 } } end, "MultiCriterion: takes no options")
    H.expect_error(function() crit.forward(x, t) end, "MultiCriterion.forward: called without its object")
    -- add with a dot: the member comes as the object
    H.expect_error(function() crit.add(ploss.MSELoss {}) end,
      "MultiCriterion.add: called without its object (got a MSELoss first): write m:add(criterion [, weight]), with a colon")
    crit:add(ploss.MSELoss{ reduction = "none" })
    H.expect_error(function() crit(x, t) end, "MultiCriterion:fused: member 1 has reduction 'none'")
    H.expect_error(function() crit:backward(x, t) end, "MultiCriterion:backward: member 1 has reduction 'none'")
    local mse = ploss.MSELoss()
    H.expect_error(function() ploss.MultiCriterion():add(mse):add(mse, 2) end,
      "MultiCriterion:add: this criterion is member 1 already")
  end)

  it("refuses members of which one takes a target and another none", function()
    local X, Y = t64({ 0.3, 1.2 }), t64({ 1.1, 0.4 })
    -- a first member that cannot tell (a criterion of another kind) does not hide the others
    local foreign = { forward = function() return 0 end, backward = function(_, a) return a end,
      fused = function(_, a) return 0, a end }
    local mixed = ploss.MultiCriterion():add(foreign):add(ploss.MarginRankingLoss()):add(ploss.DistanceRatioLoss())
    H.expect_error(function() mixed(X, Y, -1) end,
      "member 3 (ploss.DistanceRatioLoss) takes no target and member 2 (ploss.MarginRankingLoss) takes one")
    local crit = ploss.MultiCriterion():add(ploss.MarginRankingLoss()):add(ploss.DistanceRatioLoss())
    local msg = "member 2 (ploss.DistanceRatioLoss) takes no target and member 1 (ploss.MarginRankingLoss) takes one"
    H.expect_error(function() crit:forward(X, Y, t64({ -1, 1 })) end, "MultiCriterion:forward: " .. msg)
    H.expect_error(function() crit:backward(X, Y, t64({ -1, 1 })) end, "MultiCriterion:backward: " .. msg)
    H.expect_error(function() crit(X, Y, -1) end, "MultiCriterion:fused: " .. msg)
    local other = ploss.MultiCriterion():add(ploss.L1Cost()):add(ploss.MSELoss())
    H.expect_error(function() other(X, Y) end,
      "member 1 (ploss.L1NormLoss) takes no target and member 2 (ploss.MSELoss) takes one")
  end)

  it("leaves its gradients as they were when a member refuses the call", function()
    local x, t = t64({ 1, 2 }), t64({ 0, 0 })
    local l1 = ploss.L1Loss()
    local crit = ploss.MultiCriterion():add(ploss.MSELoss()):add(l1)
    local _, g = crit(x, t)
    H.assert_close(g, { 1 + 0.5, 2 + 0.5 }, { rtol = 1e-15 })
    l1.inplace = true -- refused before any member runs
    H.expect_error(function() crit(t64({ 10, 20 }), t) end, "MultiCriterion:fused: member 2 is in place")
    H.assert_close(g, { 1.5, 2.5 }, { rtol = 1e-15 })
    l1.inplace = false
    -- a refusal by the second member's own checks: the first member has run, nothing is added
    local bad = ploss.MultiCriterion():add(ploss.MSELoss()):add(ploss.CrossEntropyLoss())
    local _, gb = bad(t64({ { 1, 2 } }), t64({ { 0, 1 } })) -- probability targets: both take them
    local before = gb:flat()
    H.expect_error(function() bad(t64({ { 3, 4 } }), ploss.tensor({ { 0, 1 } }, { dtype = "i64" })) end,
      "mse_loss")
    H.assert_equal(gb, before)
  end)
end)

describe("ParallelCriterion", function()
  it("weights each member's loss and gradient (by hand, repeatTarget)", function()
    local crit = ploss.ParallelCriterion(true):add(ploss.MSELoss(), 2):add(ploss.L1Loss())
    local u, v, t = t64({ 1, 2 }), t64({ 3, -5 }), t64({ 0, 0 })
    local loss, g = crit({ u, v }, t)
    H.assert_close(loss, 2 * 2.5 + 4, { rtol = 1e-15 })
    H.assert_close(g[1], { 2, 4 }, { rtol = 1e-15 })
    H.assert_close(g[2], { 0.5, -0.5 }, { rtol = 1e-15 })
    H.assert_close(crit:forward({ u, v }, t), 9, { rtol = 1e-15 })
    local b = crit:backward({ u, v }, t, 0.5)
    H.assert_close(b[1], { 1, 2 }, { rtol = 1e-15 })
    H.assert_close(b[2], { 0.25, -0.25 }, { rtol = 1e-15 })
  end)

  it("takes a target per member, and a list of inputs for a member of several", function()
    H.seed(14)
    local x = H.random_logits({ 4, 3 }, { dtype = "f64" })
    local y = H.random_labels({ 4 }, 3)
    local a, p, n = H.random_logits({ 4, 2 }, { dtype = "f64" }), H.random_logits({ 4, 2 }, { dtype = "f64" }),
      H.random_logits({ 4, 2 }, { dtype = "f64" })
    local crit = ploss.ParallelCriterion{ repeatTarget = false }:add(ploss.CrossEntropyLoss(), 0.5)
      :add(ploss.TripletMarginLoss(), 3)
    local loss, g = crit({ x, { a, p, n } }, { y })
    local l1, g1 = ploss.CrossEntropyLoss()(x, y)
    local l2, ga, gp, gn = ploss.TripletMarginLoss()(a, p, n)
    H.assert_close(loss, 0.5 * l1 + 3 * l2, { rtol = 1e-15 })
    H.assert_close(g[1], weighted({ g1:flat() }, { 0.5 }), { rtol = 1e-15 })
    H.assert_close(g[2][1], weighted({ ga:flat() }, { 3 }), { rtol = 1e-15 })
    H.assert_close(g[2][2], weighted({ gp:flat() }, { 3 }), { rtol = 1e-15 })
    H.assert_close(g[2][3], weighted({ gn:flat() }, { 3 }), { rtol = 1e-15 })
  end)

  it("gives a member without a target none: targets[k] refused unless nil, repeatTarget's withheld", function()
    -- Torch7's member ignored targets[k]; here it would reach the member as its upstream
    -- gradient or scale (the gradient scaled by 0 or −1, silently)
    local X, Y = t64({ 0.3, 1.2 }), t64({ 1.1, 0.4 })
    local x, y = t64({ { 0.1, 0.2, 0.3 }, { 0.5, -0.1, 0.2 } }), ploss.tensor({ 0, 2 }, { dtype = "i64" })
    local crit = ploss.ParallelCriterion():add(ploss.DistanceRatioCriterion()):add(ploss.ClassSimplexCriterion())
    local msg = "targets[1]: member 1 (ploss.DistanceRatioLoss) takes no target: leave targets[1] nil"
    H.expect_error(function() crit:forward({ { X, Y }, x }, { 0, y }) end, "ParallelCriterion:forward: " .. msg)
    H.expect_error(function() crit:backward({ { X, Y }, x }, { -1, y }) end, "ParallelCriterion:backward: " .. msg)
    H.expect_error(function() crit({ { X, Y }, x }, { 0, y }) end, "ParallelCriterion:fused: " .. msg)
    -- targets[1] nil: the members' own results; ∂/∂d_pos = σ(d_pos − d_neg)/N by hand
    local loss, g = crit({ { X, Y }, x }, { nil, y })
    local l1, gx1, gy1 = ploss.DistanceRatioLoss()(X, Y)
    local l2, g2 = ploss.ClassSimplexLoss()(x, y)
    H.assert_close(loss, l1 + l2, { rtol = 1e-15 })
    local sig = function(v) return 1 / (1 + math.exp(-v)) end
    H.assert_close(g[1][1], { sig(0.3 - 1.1) / 2, sig(1.2 - 0.4) / 2 }, { rtol = 1e-14 })
    H.assert_close(g[1][2], { -sig(0.3 - 1.1) / 2, -sig(1.2 - 0.4) / 2 }, { rtol = 1e-14 })
    H.assert_close(g[1][1], gx1, { rtol = 1e-15 })
    H.assert_close(g[1][2], gy1, { rtol = 1e-15 })
    H.assert_close(g[2], g2, { rtol = 1e-15 })
    -- repeatTarget: the one target goes to the members that take one (L1Cost's ∂ = w·sign(x))
    local out, code, tgt = t64({ 1.5, -2 }), t64({ 0.3, -0.7 }), t64({ 1, 1 })
    local rt = ploss.ParallelCriterion(true):add(ploss.MSECriterion()):add(ploss.L1Cost(), 0.1)
    local lr, gr = rt({ out, code }, tgt)
    H.assert_close(lr, (0.5 ^ 2 + 3 ^ 2) / 2 + 0.1 * (0.3 + 0.7), { rtol = 1e-15 })
    H.assert_close(gr[1], { 0.5, -3 }, { rtol = 1e-15 })
    H.assert_close(gr[2], { 0.1, -0.1 }, { rtol = 1e-15 })
    -- repeatTarget over members that take none: no target at all
    local none = ploss.ParallelCriterion(true):add(ploss.L1Cost()):add(ploss.DistanceRatioLoss(), 2)
    local ln, gn = none({ code, { X, Y } })
    H.assert_close(ln, 1.0 + 2 * l1, { rtol = 1e-15 })
    H.assert_close(gn[1], { 1, -1 }, { rtol = 1e-15 })
    H.assert_close(gn[2][1], weighted({ gx1:flat() }, { 2 }), { rtol = 1e-15 })
    local each = ploss.ParallelCriterion():add(ploss.MSECriterion()):add(ploss.L1Cost(), 0.1)
    H.expect_error(function() each({ out, code }, { tgt, 0 }) end,
      "targets[2]: member 2 (ploss.L1NormLoss) takes no target: leave targets[2] nil")
  end)

  it("refuses misuse by name", function()
    local crit = ploss.ParallelCriterion():add(ploss.MSELoss())
    local u, t = t64({ 1 }), t64({ 0 })
    H.expect_error(function() ploss.ParallelCriterion(1) end, "ParallelCriterion: expected repeatTarget")
    H.expect_error(function() ploss.ParallelCriterion{ repeatTarget = 1 } end, "repeatTarget: expected a boolean")
    H.expect_error(function() ploss.ParallelCriterion{ repeat_target = true } end, "unknown option 'repeat_target'")
    H.expect_error(function() crit({ u, u }, { t, t }) end, "ParallelCriterion:fused: inputs: 2 of them for 1 member")
    assert.is_nil(select(2, pcall(crit, { u, u }, { t, t })):find("members", 1, true))
    H.expect_error(function() crit(u, { t }) end, "inputs: expected a list with one input per member")
    H.expect_error(function() crit({ u }, t) end, "targets: expected a list with one target per member")
    H.expect_error(function() crit({ 5 }, { t }) end, "inputs[1]: expected a tensor or a list of tensors, got 5")
    H.expect_error(function() crit.repeatTraget = true end, "'repeatTraget' is none of the fields")
    H.expect_error(function() crit.repeatTarget = "yes" end,
      "ParallelCriterion: crit.repeatTarget: expected a boolean (true or false), got 'yes'")
    assert.are.equal(false, crit.repeatTarget)
  end)

  it("nests a ParallelCriterion as a member, as Torch7: its inputs and targets lists, its gradients' list", function()
    local inner = ploss.ParallelCriterion():add(ploss.MSELoss(), 2):add(ploss.L1Loss())
    local crit = ploss.ParallelCriterion():add(ploss.MSELoss()):add(inner, 0.5)
    local x, tx = t64({ 1, 3 }), t64({ 0, 0 })
    local u, v, t = t64({ 1, 2 }), t64({ 3, -5 }), t64({ 0, 0 })
    -- outer: MSE(x) = 5; inner: 2·MSE(u) + L1(v) = 2·2.5 + 4 = 9, times 0.5
    local loss, g = crit({ x, { u, v } }, { tx, { t, t } })
    H.assert_close(loss, 5 + 0.5 * 9, { rtol = 1e-15 })
    H.assert_close(g[1], { 1, 3 }, { rtol = 1e-15 })
    H.assert_close(g[2][1], { 0.5 * 2, 0.5 * 4 }, { rtol = 1e-15 })
    H.assert_close(g[2][2], { 0.5 * 0.5, 0.5 * -0.5 }, { rtol = 1e-15 })
    H.assert_close(crit:forward({ x, { u, v } }, { tx, { t, t } }), 9.5, { rtol = 1e-15 })
    local b = crit:backward({ x, { u, v } }, { tx, { t, t } }, 2)
    H.assert_close(b[1], { 2, 6 }, { rtol = 1e-15 })
    H.assert_close(b[2][1], { 2, 4 }, { rtol = 1e-15 })
    H.assert_close(b[2][2], { 0.5, -0.5 }, { rtol = 1e-15 })
    -- the nested gradients are the outer criterion's buffers, not the inner one's
    assert.are_not.equal(inner.gradInput[1], b[2][1])
    -- the nested criterion checks its own arguments
    H.expect_error(function() crit({ x, { u } }, { tx, { t, t } }) end, "inputs: 1 of them for 2 members")
  end)

  it("refuses a criterion used twice anywhere in its tree, a ParallelCriterion in a MultiCriterion, extra targets", function()
    local u, t = t64({ 1, 2 }), t64({ 0, 0 })
    -- one MSELoss at two levels: its gradient buffer would hold the second call's gradient
    local shared = ploss.MSELoss()
    local outer = ploss.ParallelCriterion():add(shared):add(ploss.ParallelCriterion():add(shared))
    H.expect_error(function() outer({ u, { u } }, { t, { t } }) end,
      "ParallelCriterion:fused: ploss.MSELoss is used twice (member 1 and member 2.1)")
    H.expect_error(function() outer:backward({ u, { u } }, { t, { t } }) end, "is used twice")
    local q = ploss.ParallelCriterion():add(ploss.MSELoss())
    q:add(q)
    H.expect_error(function() q({ u, { u } }, { t, { t } }) end,
      "ploss.ParallelCriterion is used twice (the composite and member 2)")
    H.expect_error(function() ploss.MultiCriterion():add(ploss.ParallelCriterion()) end,
      "MultiCriterion:add: a ParallelCriterion cannot be a member")
    local p1 = ploss.ParallelCriterion():add(ploss.MSELoss())
    H.expect_error(function() p1({ u }, { t, t }) end, "ParallelCriterion:fused: targets: 2 of them for 1 member")
    assert.is_nil(select(2, pcall(p1, { u }, { t, t })):find("members", 1, true))
    assert.are.equal("ploss.ParallelCriterion(repeatTarget)", tostring(ploss.ParallelCriterion(true)))
    -- a member's own refusal names the member
    local pc = ploss.ParallelCriterion():add(ploss.MSELoss()):add(ploss.CrossEntropyLoss())
    H.expect_error(function() pc({ u, t64({ { 1, 2 } }) }, { t, t64({ 0 }) }) end,
      "ParallelCriterion:fused: member 2 (ploss.CrossEntropyLoss): cross_entropy_fused: target: class indices")
    H.expect_error(function() pc:forward({ u, t64({ { 1, 2 } }) }, { t, t64({ 0 }) }) end,
      "ParallelCriterion:forward: member 2 (ploss.CrossEntropyLoss): cross_entropy_forward: target:")
    local mc = ploss.MultiCriterion():add(ploss.MSELoss()):add(ploss.L1Loss())
    H.expect_error(function() mc(u, ploss.zeros({ 3 }, { dtype = "f64" })) end, "MultiCriterion:fused: member 1 (ploss.MSELoss):")
  end)

  it("takes an earlier gradient of its own as another member's input without writing over it", function()
    local crit = ploss.ParallelCriterion(true):add(ploss.MSELoss()):add(ploss.MSELoss())
    local t = t64({ 0, 0 })
    local _, g = crit({ t64({ 1, 2 }), t64({ 3, 4 }) }, t)
    local g1 = g[1]                                        -- {1, 2}
    local y = t64({ 10, 20 })
    local loss, g2 = crit({ y, g1 }, t)                    -- member 2 reads g1
    H.assert_close(loss, (100 + 400) / 2 + (1 + 4) / 2, { rtol = 1e-15 })
    H.assert_close(g2[1], { 10, 20 }, { rtol = 1e-15 })
    H.assert_close(g2[2], { 1, 2 }, { rtol = 1e-15 })
    H.assert_close(g1, { 1, 2 }, { rtol = 1e-15 })         -- not written: g2[1] is a new buffer
  end)
end)

describe("SpatialAutoCropMSELoss (Torch7's SpatialAutoCropMSECriterion)", function()
  it("is MSELoss against the centred crop of the target, derived by hand", function()
    -- input 1×1×1×2 = (1, 2); target 1×1×3×4: rows ⌊(3 − 1)/2⌋ = 1, columns ⌊(4 − 2)/2⌋ = 1
    -- (from 0): the window (t[1][1], t[1][2]) = (5, 7) → mean((1 − 5)², (2 − 7)²) = 41/2
    local x = ploss.tensor({ { { { 1, 2 } } } }, { dtype = "f64" })
    local t = ploss.tensor({ { { { 0, 0, 0, 0 }, { 0, 5, 7, 0 }, { 0, 0, 0, 0 } } } }, { dtype = "f64" })
    assert.are.equal(ploss.SpatialAutoCropMSELoss, ploss.SpatialAutoCropMSECriterion)
    local crit = ploss.SpatialAutoCropMSECriterion()
    assert.are.equal(20.5, crit:forward(x, t))
    H.assert_close(crit:backward(x, t):flat(), { (1 - 5), (2 - 7) }, { rtol = 1e-15 }) -- 2(x − t)/2
    crit.reduction = "sum"
    local loss, g = crit(x, t, 0.5)
    assert.are.equal(41, loss)
    H.assert_close(g:flat(), { -4, -5 }, { rtol = 1e-15 })                         -- 0.5·2(x − t)
    assert.truthy(tostring(crit):find("SpatialAutoCropMSELoss(reduction='sum')", 1, true))
    -- odd margins round down: a 3×3 input in a 6×6 target starts at (1, 1)
    local y = ploss.randn({ 2, 3, 3 }, { dtype = "f64", seed = 5 })
    local big = ploss.randn({ 2, 6, 6 }, { dtype = "f64", seed = 6 })
    H.assert_equal({ ploss.SpatialAutoCropMSELoss {}:forward(y, big) },
      { ploss.MSELoss {}:forward(y, big:narrow(2, 2, 3):narrow(3, 2, 3)) })
  end)

  it("matches MSELoss on the crop for every reduction, C×H×W and N×C×H×W, f32 and bf16, gradOutput", function()
    for _, sizes in ipairs { { { 3, 5, 4 }, { 3, 8, 9 } }, { { 2, 3, 5, 4 }, { 2, 3, 5, 7 } } } do
      for _, dtype in ipairs { "f64", "f32", "bf16" } do
        local x = ploss.randn(sizes[1], { dtype = dtype, seed = 1 })
        local t = ploss.randn(sizes[2], { dtype = dtype, seed = 2 })
        local nd = #sizes[1]
        local h, w = sizes[1][nd - 1], sizes[1][nd]
        local tc = t:narrow(nd - 1, 1 + math.floor((sizes[2][nd - 1] - h) / 2), h)
          :narrow(nd, 1 + math.floor((sizes[2][nd] - w) / 2), w)
        for _, r in ipairs { "mean", "sum", "none" } do
          local crop, mse = ploss.SpatialAutoCropMSELoss { reduction = r }, ploss.MSELoss { reduction = r }
          local l1, g1 = crop(x, t, 1.5)
          local l2, g2 = mse(x, tc, 1.5)
          local what = table.concat(sizes[1], "×") .. " " .. dtype .. " " .. r
          H.assert_equal(r == "none" and l1 or { l1 }, r == "none" and l2 or { l2 }, { what = what })
          H.assert_equal(g1, g2, { what = what })
          local up = r == "none" and ploss.randn(sizes[1], { dtype = dtype == "f64" and "f64" or "f32", seed = 3 }) or 2
          H.assert_equal(crop:backward(x, t, up), mse:backward(x, tc, up), { what = what .. " backward" })
          -- MSELoss's weight (over the input's shape) as well
          local w = ploss.rand(sizes[1], { dtype = dtype, seed = 4, low = 0.5, high = 2 })
          local cw, mw = ploss.SpatialAutoCropMSELoss { reduction = r, weight = w }, ploss.MSELoss { reduction = r, weight = w }
          local l3, g3 = cw(x, t)
          local l4, g4 = mw(x, tc)
          H.assert_equal(r == "none" and l3 or { l3 }, r == "none" and l4 or { l4 }, { what = what .. " weighted" })
          H.assert_equal(g3, g4, { what = what .. " weighted" })
        end
      end
    end
  end)

  it("refuses what it cannot crop, naming the argument", function()
    local crit = ploss.SpatialAutoCropMSELoss()
    local x = ploss.randn({ 2, 3, 4, 5 })
    H.expect_error(function() crit:forward(x, ploss.randn({ 2, 3, 3, 8 })) end,
      "target: its spatial size 3×8 is smaller than the input's 4×5")
    H.expect_error(function() crit:forward(x, ploss.randn({ 2, 3, 8 })) end, "target: expected 4 dims, as the input")
    H.expect_error(function() crit:forward(x, ploss.randn({ 2, 4, 7, 8 })) end,
      "target: expected the input's N×C before H×W")
    H.expect_error(function() crit:forward(ploss.randn({ 4, 5 }), ploss.randn({ 8, 8 })) end,
      "input: expected C×H×W or N×C×H×W (3 or 4 dims)")
    H.expect_error(function() crit(x, { 1, 2 }) end, "target: expected a ploss tensor")
    H.expect_error(function() local c = ploss.SpatialAutoCropMSECriterion(false) return c end,
      "Torch7's positional sizeAverage is not taken: {reduction = 'sum'}")
    H.expect_error(function() crit.sizeAverage = false end, "Torch7's sizeAverage is reduction here")
    H.expect_error(function() local c = ploss.SpatialAutoCropMSECriterion(true) return c end,
      "sizeAverage = true is the default, {reduction = 'mean'}")
  end)

  it("is cloned as itself, alone and as a member of a composite", function()
    local x, t = ploss.randn({ 1, 2, 3, 3 }, { dtype = "f64", seed = 1 }), ploss.randn({ 1, 2, 6, 5 }, { dtype = "f64" })
    local crit = ploss.SpatialAutoCropMSELoss { reduction = "sum" }
    local copy = crit:clone()
    assert.are.equal(ploss.SpatialAutoCropMSELoss, getmetatable(copy))
    assert.are.equal("sum", copy.reduction)
    assert.are.equal(crit:forward(x, t), copy:forward(x, t))
    local p = ploss.ParallelCriterion():add(ploss.SpatialAutoCropMSELoss(), 2)
    assert.are.equal(p:forward({ x }, { t }), p:clone():forward({ x }, { t }))
  end)
end)

describe("L1NormLoss (Torch7's L1Cost)", function()
  it("is Σ|x| with sign(x) as its gradient, by hand; 'sum' by default, 'mean' and 'none' as L1Loss's", function()
    local x = ploss.tensor({ { 1, -2, 0 }, { 0.5, -0.5, 3 } }, { dtype = "f64" })
    assert.are.equal(ploss.L1NormLoss, ploss.L1Cost)
    local crit = ploss.L1Cost()
    assert.are.equal("sum", crit.reduction)
    assert.are.equal(7, crit:forward(x))
    H.assert_equal(crit:backward(x), { { 1, -1, 0 }, { 1, -1, 1 } }) -- sign, 0 at 0
    H.assert_equal(crit:backward(x, 3), { { 3, -3, 0 }, { 3, -3, 3 } })
    local loss, g = crit(x, -0.5)
    assert.are.equal(7, loss)
    H.assert_equal(g, { { -0.5, 0.5, 0 }, { -0.5, 0.5, -0.5 } })
    H.assert_close({ ploss.L1NormLoss { reduction = "mean" }:forward(x) }, { 7 / 6 }, { rtol = 1e-15 })
    H.assert_equal(ploss.L1NormLoss { reduction = "none" }:forward(x), { { 1, 2, 0 }, { 0.5, 0.5, 3 } })
    assert.are.equal(3, crit:forward(ploss.tensor(-3, { dtype = "f64" })))
    assert.truthy(tostring(crit:clone()):find("L1NormLoss(reduction='sum')", 1, true))
    -- L1Loss's weight: Σ w·|x|, 'mean' over Σ w (one weight per column, broadcast)
    local w = ploss.tensor({ 1, 2, 4 }, { dtype = "f64" })
    assert.are.equal(1 + 4 + 0 + 0.5 + 1 + 12, ploss.L1NormLoss { weight = w }:forward(x))
    local lw, gw = ploss.L1NormLoss { weight = w, reduction = "mean" }(x)
    H.assert_close({ lw }, { 18.5 / 14 }, { rtol = 1e-15 })
    H.assert_close(gw, { { 1 / 14, -2 / 14, 0 }, { 1 / 14, -2 / 14, 4 / 14 } }, { rtol = 1e-15 })
  end)

  it("matches L1Loss against zeros for strided inputs and 16-bit dtypes", function()
    for _, dtype in ipairs { "f32", "bf16", "f16" } do
      local x = ploss.randn({ 6, 5 }, { dtype = dtype, seed = 3 }):t()
      local z = ploss.zeros({ 5, 6 }, { dtype = dtype })
      local l1, g1 = ploss.L1NormLoss { reduction = "mean" }(x, 2)
      local l2, g2 = ploss.L1Loss { reduction = "mean" }(x, z, 2)
      assert.are.equal(l2, l1)
      H.assert_equal(g1, g2, { what = dtype })
    end
  end)

  it("takes the input alone", function()
    local crit, x = ploss.L1Cost(), ploss.randn({ 3 })
    H.expect_error(function() crit:forward(x, x) end, "L1NormLoss:forward: takes the input alone")
    H.expect_error(function() crit:forward({ 1, 2 }) end, "L1NormLoss:forward: input: expected a ploss tensor")
    H.expect_error(function() local c = ploss.L1Cost(true) return c end, "L1NormLoss: expected a table of named options")
  end)
end)
