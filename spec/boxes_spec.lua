-- Box regression losses (suite 'cpu'): IoULoss, GIoULoss, DIoULoss and CIoULoss on the CPU.
--  * hand-derivable boxes (overlapping, nested, disjoint, touching, other aspect ratios);
--  * torchvision's definitions transcribed here in f64 (generalized_box_iou_loss,
--    distance_box_iou_loss, complete_box_iou_loss and their intersection / union) against
--    random boxes, every reduction, weights and ignore masks, every box_format;
--  * central differences in f64 (α of CIoU held at its value, as torchvision detaches it),
--    at min/max ties too (PyTorch's ½ split is the mean of the one-sided slopes), the
--    paper's CIoU gradient against its formula;
--  * 'mean' with an upstream gradient, the fused pass and its scale;
--  * degenerate boxes: identical zero-area boxes cost 0, zero height gives finite CIoU values
--    and gradients, eps = 0;
--  * f32 / f16 / bf16 against f64;
--  * the pairwise similarities ploss.box_iou, generalized_box_iou, distance_box_iou,
--    complete_box_iou against torchvision's definitions.
local H = require "spec.helpers"
local B = require "spec.bad_input"
local ploss = H.ploss
local F = ploss.F

local LOSSES = {
  { kind = "iou", name = "box_iou_loss", crit = "IoULoss" },
  { kind = "giou", name = "generalized_box_iou_loss", crit = "GIoULoss" },
  { kind = "diou", name = "distance_box_iou_loss", crit = "DIoULoss" },
  { kind = "ciou", name = "complete_box_iou_loss", crit = "CIoULoss" },
}
local EPS = 1e-7
local K = 4 / math.pi ^ 2

---------------------------------------------------------------------------------------
-- torchvision's definitions, box by box, in f64 (boxes as xyxy Lua lists)
---------------------------------------------------------------------------------------

local function tv_parts(p, t, eps)
  local x1, y1, x2, y2 = p[1], p[2], p[3], p[4]
  local X1, Y1, X2, Y2 = t[1], t[2], t[3], t[4]
  local xk1, yk1, xk2, yk2 = math.max(x1, X1), math.max(y1, Y1), math.min(x2, X2), math.min(y2, Y2)
  local inter = 0
  if yk2 > yk1 and xk2 > xk1 then inter = (xk2 - xk1) * (yk2 - yk1) end
  local union = (x2 - x1) * (y2 - y1) + (X2 - X1) * (Y2 - Y1) - inter
  local iou = inter / (union + eps)
  local xc1, yc1, xc2, yc2 = math.min(x1, X1), math.min(y1, Y1), math.max(x2, X2), math.max(y2, Y2)
  local area_c = (xc2 - xc1) * (yc2 - yc1)
  local diag = (xc2 - xc1) ^ 2 + (yc2 - yc1) ^ 2 + eps
  local cd = ((x2 + x1) / 2 - (X1 + X2) / 2) ^ 2 + ((y2 + y1) / 2 - (Y1 + Y2) / 2) ^ 2
  local v = K * (math.atan((X2 - X1) / (Y2 - Y1)) - math.atan((x2 - x1) / (y2 - y1))) ^ 2
  local alpha = v / (1 - iou + v + eps)
  return { iou = iou, union = union, area_c = area_c, diag = diag, cd = cd, v = v, alpha = alpha }
end

local function tv_loss(kind, p, t, eps)
  local q = tv_parts(p, t, eps)
  if kind == "iou" then return 1 - q.iou end
  if kind == "giou" then return 1 - (q.iou - (q.area_c - q.union) / (q.area_c + eps)) end
  local diou = 1 - q.iou + q.cd / q.diag
  if kind == "diou" then return diou end
  return diou + q.alpha * q.v
end

-- xyxy from the four numbers of a box in `format`
local function to_xyxy(format, r)
  if format == "xywh" then return { r[1], r[2], r[1] + r[3], r[2] + r[4] } end
  if format == "cxcywh" then return { r[1] - r[3] / 2, r[2] - r[4] / 2, r[1] + r[3] / 2, r[2] + r[4] / 2 } end
  return { r[1], r[2], r[3], r[4] }
end
-- the four numbers in `format` of an xyxy box
local function from_xyxy(format, b)
  if format == "xywh" then return { b[1], b[2], b[3] - b[1], b[4] - b[2] } end
  if format == "cxcywh" then return { (b[1] + b[3]) / 2, (b[2] + b[4]) / 2, b[3] - b[1], b[4] - b[2] } end
  return b
end

-- The reduced (or per-box) reference loss of tensors x, y with opts {reduction, weight,
-- ignore (Lua lists), box_format, eps}.
local function reference(kind, x, y, o)
  local xv, yv = x:totable(), y:totable()
  local eps = o.eps or EPS
  local per, total, kept = {}, 0, 0
  for i = 1, #xv do
    local l = 0
    if not (o.ignore and o.ignore[i] ~= 0) then
      l = tv_loss(kind, to_xyxy(o.box_format, xv[i]), to_xyxy(o.box_format, yv[i]), eps) * (o.weight and o.weight[i] or 1)
      kept = kept + 1
    end
    per[i] = l
    total = total + l
  end
  if o.reduction == "none" then return per end
  if o.reduction == "sum" then return total end
  return total / kept
end

-- C options from the Lua ones (lists → f64 tensors)
local function copts(o)
  local c = {}
  for k, v in pairs(o) do c[k] = v end
  if o.weight then c.weight = ploss.tensor(o.weight, { dtype = "f64" }) end
  if o.ignore then c.ignore = ploss.tensor(o.ignore, { dtype = "u8" }) end
  return c
end

local function boxes(list, dtype) return ploss.tensor(list, { dtype = dtype or "f64" }) end

-- random boxes of `format` (f64): xyxy boxes from B.random_boxes, converted
local function random_boxes(n, seed, format)
  local v = B.random_boxes(n, seed, "f64", "cpu"):totable()
  for i = 1, n do v[i] = from_xyxy(format or "xyxy", v[i]) end
  return boxes(v)
end

---------------------------------------------------------------------------------------

describe("box losses: hand-derivable values", function()
  -- {pred, target, IoU, (A_C − U)/A_C, ρ²/c², v}, eps = 0 (every value exact)
  local atan_gap = math.atan(2) - math.atan(0.5)
  local cases = {
    { "overlapping squares", { 0, 0, 2, 2 }, { 1, 1, 3, 3 }, 1 / 7, 2 / 9, 2 / 18, 0 },
    { "a box inside another", { 1, 1, 2, 2 }, { 0, 0, 4, 4 }, 1 / 16, 0, 0.5 / 32, 0 },
    { "disjoint boxes", { 0, 0, 1, 1 }, { 2, 0, 3, 1 }, 0, 1 / 3, 4 / 10, 0 },
    { "touching boxes (an overlap of 0)", { 0, 0, 1, 1 }, { 1, 0, 2, 1 }, 0, 0, 1 / 5, 0 },
    { "crossed rectangles", { 0, 0, 4, 2 }, { 0, 0, 2, 4 }, 1 / 3, 1 / 4, 2 / 32, K * atan_gap ^ 2 },
    { "identical boxes", { 1, 2, 4, 3 }, { 1, 2, 4, 3 }, 1, 0, 0, 0 },
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      local p, t, iou, gterm, dterm, v = c[2], c[3], c[4], c[5], c[6], c[7]
      local alpha = v > 0 and v / (1 - iou + v) or 0
      local want = { iou = 1 - iou, giou = 1 - iou + gterm, diou = 1 - iou + dterm, ciou = 1 - iou + dterm + alpha * v }
      for _, L in ipairs(LOSSES) do
        local got = F[L.name](boxes { p }, boxes { t }, { eps = 0 })
        H.assert_close({ got }, { want[L.kind] }, { rtol = 1e-14, atol = 1e-15, what = L.name .. " " .. c[1] })
        -- the default eps: torchvision's denominators
        local got7 = F[L.name](boxes { p }, boxes { t })
        H.assert_close({ got7 }, { tv_loss(L.kind, p, t, EPS) }, { rtol = 1e-13, atol = 1e-15, what = L.name .. " eps 1e-7" })
      end
    end)
  end

  it("a criterion gives the same values as the functions, 'none' one per box", function()
    local p = boxes { { 0, 0, 2, 2 }, { 0, 0, 4, 2 }, { 0, 0, 1, 1 } }
    local t = boxes { { 1, 1, 3, 3 }, { 0, 0, 2, 4 }, { 2, 0, 3, 1 } }
    for _, L in ipairs(LOSSES) do
      local l = ploss[L.crit] { reduction = "none" }:forward(p, t)
      assert.are.same({ 3 }, l:size())
      H.assert_close(l, F[L.name](p, t, { reduction = "none" }), { rtol = 0 })
      H.assert_close({ ploss[L.crit]():forward(p, t) }, { (l:flat()[1] + l:flat()[2] + l:flat()[3]) / 3 }, { rtol = 1e-15 })
    end
  end)
end)

describe("box losses: torchvision's definitions on random boxes", function()
  for _, L in ipairs(LOSSES) do
    it(L.crit .. ": every reduction, box_format, weights and ignore", function()
      for _, format in ipairs { "xyxy", "xywh", "cxcywh" } do
        local n = 40
        local x, y = random_boxes(n, 101, format), random_boxes(n, 202, format)
        local w, ign = {}, {}
        for i = 1, n do
          w[i] = 0.25 + (i % 7) / 4
          ign[i] = i % 5 == 0 and 1 or 0
        end
        for _, red in ipairs { "none", "mean", "sum" } do
          for _, extra in ipairs { {}, { weight = w }, { ignore = ign }, { weight = w, ignore = ign } } do
            local o = { reduction = red, box_format = format }
            for k, v in pairs(extra) do o[k] = v end
            local want = reference(L.kind, x, y, o)
            local got = F[L.name](x, y, copts(o))
            H.assert_close(type(got) == "number" and { got } or got, type(want) == "number" and { want } or want,
              { rtol = 1e-12, atol = 1e-14, what = string.format("%s %s %s", L.name, format, red) })
          end
        end
      end
    end)
  end

  it("the defaults: eps 1e-7, box_format xyxy, reduction mean, exact CIoU gradient", function()
    local c = require("ffi").new("ploss_box_loss_opts")
    ploss.C.ploss_box_loss_opts_init(c)
    assert.are.equal(1e-7, c.eps)
    assert.are.equal(ploss.C.PLOSS_BOX_FORMAT_XYXY, c.box_format)
    assert.are.equal(ploss.C.PLOSS_REDUCTION_MEAN, c.reduction)
    assert.are.equal(ploss.C.PLOSS_CIOU_GRADIENT_EXACT, c.ciou_gradient)
  end)

  it("refuse a bad enum in the shared options struct, and a field the loss does not read set (C API)", function()
    local ffi = require "ffi"
    local b = ploss.tensor({ { 0, 0, 2, 2 } }, { dtype = "f64" })
    local loss = ploss.empty({}, { dtype = "f64" })
    for _, name in ipairs { "box_iou_loss", "generalized_box_iou_loss", "distance_box_iou_loss", "complete_box_iou_loss" } do
      local c = ffi.new("ploss_box_loss_opts")
      ploss.C.ploss_box_loss_opts_init(c)
      c.ciou_gradient = 9
      local st = ploss.C["ploss_" .. name .. "_forward"](b:context(), b:dl(), b:dl(), nil, nil, c, loss:dl())
      assert.are.equal(ploss.C.PLOSS_ERR_INVALID_ARGUMENT, st, name)
      assert.matches("opts.ciou_gradient: 9 is not one of exact (0), paper (1)", ffi.string(ploss.C.ploss_last_error()), 1, true)
      -- 'paper' is CIoU's: the other losses refuse it rather than ignore it
      c.ciou_gradient = ploss.C.PLOSS_CIOU_GRADIENT_PAPER
      st = ploss.C["ploss_" .. name .. "_forward"](b:context(), b:dl(), b:dl(), nil, nil, c, loss:dl())
      if name == "complete_box_iou_loss" then
        assert.are.equal(ploss.C.PLOSS_OK, st, name)
      else
        assert.are.equal(ploss.C.PLOSS_ERR_INVALID_ARGUMENT, st, name)
        assert.matches("opts.ciou_gradient: not an option of " .. name, ffi.string(ploss.C.ploss_last_error()), 1, true)
      end
    end
  end)
end)

---------------------------------------------------------------------------------------
-- gradients
---------------------------------------------------------------------------------------

-- Σ of the loss at x with CIoU's α held at its values `alpha` (per box) — the function
-- whose gradient the analytic one is: DIoU + α·v, v from the current x.
local function objective(L, y, o, alpha)
  return function(x)
    if L.kind ~= "ciou" then return F[L.name](x, y, copts(o)) end
    local total = F.distance_box_iou_loss(x, y, copts(o))
    local xv, yv = x:totable(), y:totable()
    for i = 1, #xv do
      if not (o.ignore and o.ignore[i] ~= 0) then
        local q = tv_parts(to_xyxy(o.box_format, xv[i]), to_xyxy(o.box_format, yv[i]), o.eps or EPS)
        total = total + alpha[i] * q.v * (o.weight and o.weight[i] or 1)
      end
    end
    return total
  end
end

local function alphas(x, y, o)
  local xv, yv, a = x:totable(), y:totable(), {}
  for i = 1, #xv do a[i] = tv_parts(to_xyxy(o.box_format, xv[i]), to_xyxy(o.box_format, yv[i]), o.eps or EPS).alpha end
  return a
end

describe("box losses: gradients", function()
  for _, L in ipairs(LOSSES) do
    it(L.crit .. ": central differences in f64, every box_format, weights and ignore", function()
      for _, format in ipairs { "xyxy", "xywh", "cxcywh" } do
        local n = 12
        local x, y = random_boxes(n, 301, format), random_boxes(n, 302, format)
        local o = { reduction = "sum", box_format = format, weight = {}, ignore = {} }
        for i = 1, n do
          o.weight[i] = 0.5 + i / 8
          o.ignore[i] = i == 4 and 1 or 0
        end
        local g = F[L.name .. "_backward"](x, y, 1, copts(o))
        H.gradcheck(objective(L, y, o, alphas(x, y, o)), x, g, { what = L.name .. " " .. format })
        for k = 13, 16 do assert.are.equal(0, g:flat()[k]) end -- the ignored box
      end
    end)

    it(L.crit .. ": min/max ties split the gradient ½ each (PyTorch), touching boxes pass none through I", function()
      -- shared edges and corners: x1 = X1, y2 = Y2, identical boxes, a box inside touching one side
      local x = boxes { { 1, 1, 3, 4 }, { 0, 0, 2, 2 }, { 1, 1, 2, 2 }, { 0, 2, 1, 3 } }
      local y = boxes { { 1, 0, 4, 4 }, { 0, 0, 2, 2 }, { 1, 0, 3, 3 }, { 0.5, 0, 3, 2.5 } }
      local o = { reduction = "sum" }
      local g = F[L.name .. "_backward"](x, y, 1, copts(o))
      H.gradcheck(objective(L, y, o, alphas(x, y, o)), x, g, { what = L.name .. " at ties", h = 1e-7, rtol = 1e-6, atol = 1e-7 })
      -- touching boxes: the intersection is clamped (no overlap) and contributes no gradient
      local xt, yt = boxes { { 0, 0, 1, 1 } }, boxes { { 1, 0, 2, 1 } }
      local gt = F[L.name .. "_backward"](xt, yt, 1, copts(o)):flat()
      if L.kind == "iou" then H.assert_equal(gt, { 0, 0, 0, 0 }) end
    end)
  end

  it("CIoU: the paper's gradient is the exact one with 1/(w² + h²) replaced by 1", function()
    local n = 10
    local x, y = random_boxes(n, 401), random_boxes(n, 402)
    local o = { reduction = "sum" }
    local ge = F.complete_box_iou_loss_backward(x, y, 1, copts(o)):totable()
    local gp = F.complete_box_iou_loss_backward(x, y, 1, copts { reduction = "sum", ciou_gradient = "paper" }):totable()
    local xv, yv = x:totable(), y:totable()
    for i = 1, n do
      local p, t = xv[i], yv[i]
      local q = tv_parts(p, t, EPS)
      local w, h = p[3] - p[1], p[4] - p[2]
      local diff = math.atan((t[3] - t[1]) / (t[4] - t[2])) - math.atan(w / h)
      local da = -2 * K * q.alpha * diff -- ∂(α·v)/∂atan(w/h)
      local r2 = w * w + h * h
      local dw, dh = da * h * (1 - 1 / r2), -da * w * (1 - 1 / r2) -- paper − exact
      H.assert_close({ gp[i][1] - ge[i][1], gp[i][2] - ge[i][2], gp[i][3] - ge[i][3], gp[i][4] - ge[i][4] },
        { -dw, -dh, dw, dh }, { rtol = 1e-9, atol = 1e-13, what = "paper − exact, box " .. i })
    end
    -- the values do not depend on it
    H.assert_equal({ F.complete_box_iou_loss(x, y, copts { ciou_gradient = "paper" }) }, { F.complete_box_iou_loss(x, y) })
  end)

  for _, L in ipairs(LOSSES) do
    it(L.crit .. ": 'mean' with an upstream gradient, 'none' with one per box, fused = forward + backward", function()
      local n = 9
      local x, y = random_boxes(n, 501), random_boxes(n, 502)
      local ign = { 0, 1, 0, 0, 0, 1, 0, 0, 0 }
      local w = { 1, 2, 3, 0.5, 1, 1, 2, 1, 0.25 }
      local g1 = F[L.name .. "_backward"](x, y, ploss.ones({ n }, { dtype = "f64" }),
        copts { reduction = "none", weight = w, ignore = ign }):totable()
      -- mean: 2.5 / (boxes kept) times the per-box gradients (the reference's CIoU was N× off)
      local gm = F[L.name .. "_backward"](x, y, 2.5, copts { weight = w, ignore = ign })
      local want = {}
      for i = 1, n do
        for k = 1, 4 do want[#want + 1] = g1[i][k] * 2.5 / 7 end
      end
      H.assert_close(gm, want, { rtol = 1e-14, atol = 1e-16 })
      -- none: per-box upstream gradients
      local up = {}
      for i = 1, n do up[i] = i - 4 end
      local gn = F[L.name .. "_backward"](x, y, ploss.tensor(up, { dtype = "f64" }),
        copts { reduction = "none", weight = w, ignore = ign }):totable()
      for i = 1, n do
        for k = 1, 4 do H.assert_close({ gn[i][k] }, { g1[i][k] * up[i] }, { rtol = 1e-14, atol = 1e-16 }) end
      end
      -- fused (scale 3) against forward and backward
      for _, red in ipairs { "mean", "sum", "none" } do
        local o = copts { reduction = red, weight = w, ignore = ign }
        local of = copts { reduction = red, weight = w, ignore = ign }
        of.scale = 3
        local l, g = F[L.name .. "_fused"](x, y, of)
        local lf = F[L.name](x, y, o)
        local gb = F[L.name .. "_backward"](x, y, red == "none" and ploss.full({ n }, 3, { dtype = "f64" }) or 3, o)
        H.assert_equal(type(l) == "number" and { l } or l, type(lf) == "number" and { lf } or lf)
        H.assert_close(g, gb, { rtol = 1e-15, atol = 0 })
        -- a criterion's fused call
        local cl, cg = ploss[L.crit] { reduction = red, weight = w, ignore = ign }(x, y)
        H.assert_equal(type(cl) == "number" and { cl } or cl, type(lf) == "number" and { lf } or lf)
        H.assert_close(cg, F[L.name .. "_backward"](x, y, nil, o), { rtol = 1e-15, atol = 0 })
      end
    end)
  end
end)

---------------------------------------------------------------------------------------
-- degenerate boxes
---------------------------------------------------------------------------------------

local function assert_finite(t, what)
  for i, v in ipairs(H.values(t)) do
    if not (v == v and v > -math.huge and v < math.huge) then error(what .. ": element " .. i .. " is " .. tostring(v), 2) end
  end
end

describe("box losses: degenerate boxes", function()
  it("identical zero-area boxes (points, segments) cost 0 with a finite gradient; different ones 1", function()
    local same = boxes { { 1, 1, 1, 1 }, { 0, 2, 3, 2 }, { 4, 0, 4, 5 } }
    local apart = boxes { { 2, 2, 2, 2 }, { 4, 2, 5, 2 }, { 4, 6, 4, 7 } }
    for _, L in ipairs(LOSSES) do
      for _, eps in ipairs { EPS, 0 } do
        local l, g = F[L.name .. "_fused"](same, same:clone(), { reduction = "none", eps = eps })
        H.assert_equal(l, { 0, 0, 0 }, { what = L.name .. " identical zero-area boxes, eps " .. eps })
        assert_finite(g, L.name .. " gradient")
        local la, ga = F[L.name .. "_fused"](same, apart, { reduction = "none", eps = eps })
        assert_finite(la, L.name .. " different zero-area boxes")
        assert_finite(ga, L.name .. " different zero-area boxes: gradient")
        if L.kind == "iou" then H.assert_equal(la, { 1, 1, 1 }) end
      end
    end
    -- collinear segments (A_C = 0): GIoU's enclosure term is 0/(0 + ε) = 0
    H.assert_equal({ F.generalized_box_iou_loss(boxes { { 0, 0, 1, 0 } }, boxes { { 2, 0, 3, 0 } }) }, { 1 })
  end)

  it("CIoU with a zero-height box: atan2 gives π/2, a finite value and gradient (no atan(w/0) NaN)", function()
    local p, t = boxes { { 0, 0, 2, 0 } }, boxes { { 0, 0, 2, 2 } }
    -- IoU 0, ρ² = 1, c² = 8, v = (4/π²)(π/4 − π/2)² = 1/4, α = (1/4)/(5/4) = 1/5
    local want = 1 + 1 / (8 + EPS) + 0.25 * 0.25 / (1.25 + EPS)
    local l, g = F.complete_box_iou_loss_fused(p, t, { reduction = "sum" })
    H.assert_close({ l }, { want }, { rtol = 1e-14 })
    assert_finite(g, "zero-height gradient")
    -- ∂/∂x1, ∂/∂x2 (the height stays 0 under them) against central differences
    local o = { reduction = "sum" }
    local alpha = alphas(p, t, o)
    H.assert_close(alpha, { 0.25 / (1.25 + EPS) }, { rtol = 1e-15 })
    local f = objective(LOSSES[4], t, o, alpha)
    local gv = g:flat()
    for _, k in ipairs { 1, 3 } do
      local xp, xm = p:clone(), p:clone()
      xp:view(-1):narrow(1, k, 1):fill(p:flat()[k] + 1e-6)
      xm:view(-1):narrow(1, k, 1):fill(p:flat()[k] - 1e-6)
      H.assert_close({ gv[k] }, { (f(xp) - f(xm)) / 2e-6 }, { rtol = 1e-6, atol = 1e-9, what = "zero height, coordinate " .. k })
    end
    -- ∂(α·v)/∂h = −2Kα·(atan2(W, H) − atan2(w, h))·(−w/(w² + h²)), −w/(w² + h²) = −1/2 at
    -- (w, h) = (2, 0): y2's gradient is DIoU's plus that, y1's DIoU's minus that
    local aspect = -2 * K * alpha[1] * (math.pi / 4 - math.pi / 2) * -0.5
    local diou = F.distance_box_iou_loss_backward(p, t, 1, { reduction = "sum" }):flat()
    H.assert_close({ gv[4] - diou[4], gv[2] - diou[2] }, { aspect, -aspect }, { rtol = 1e-12 })
    -- a point box: the aspect term's gradient is 0
    assert_finite(F.complete_box_iou_loss_backward(boxes { { 1, 1, 1, 1 } }, t, 1, o), "point box gradient")
  end)
end)

describe("box losses: an ignored box leaves no trace", function()
  it("NaN, infinite or inverted coordinates in an ignored box: zero loss and gradient there, NaN nowhere", function()
    local x = random_boxes(5, 801)
    local y = random_boxes(5, 802)
    local ign = { 0, 1, 0, 1, 0 }
    local xb, yb = x:totable(), y:totable()
    xb[2] = { 0 / 0, 1, 2, 3 }
    yb[4] = { 5, 5, -math.huge, 4 }
    xb = boxes(xb)
    yb = boxes(yb)
    for _, L in ipairs(LOSSES) do
      local o = copts { reduction = "none", ignore = ign }
      local l, g = F[L.name .. "_fused"](xb, yb, o)
      local lc, gc = F[L.name .. "_fused"](x, y, o)
      H.assert_equal(l, lc, { what = L.name .. " losses" })
      H.assert_equal(g, gc, { what = L.name .. " gradients" })
      for _, k in ipairs { 5, 6, 7, 8, 13, 14, 15, 16 } do assert.are.equal(0, g:flat()[k]) end
      local m = F[L.name](xb, yb, copts { ignore = ign })
      assert(m == m, L.name .. ": mean " .. tostring(m))
    end
  end)

  it("an infinite coordinate (not ignored): the formulas' values, as torchvision's; a NaN one: NaN", function()
    -- x2 = ∞ over the unit box: U = ∞, IoU = 1/∞ = 0, loss 1; ∂U/∂y1 = −w = −∞ meets ∂IoU/∂U = −I/U² = 0
    local t = boxes { { 0, 0, 1, 1 } }
    for _, dt in ipairs { "f64", "f32" } do
      local l, g = F.box_iou_loss_fused(boxes({ { 0, 0, math.huge, 1 } }, dt), boxes({ { 0, 0, 1, 1 } }, dt))
      assert.are.equal(1, l)
      local gv = g:totable()[1]
      assert.are.equal(0, gv[1])
      assert.are.equal(0, gv[3])
      assert(gv[2] ~= gv[2] and gv[4] ~= gv[4], dt .. ": y gradients " .. tostring(gv[2]) .. ", " .. tostring(gv[4]))
    end
    for _, L in ipairs(LOSSES) do
      if L.kind ~= "iou" then -- ∞/∞ in the enclosing box's ratio or the centres' distance
        local l = F[L.name](boxes { { 0, 0, math.huge, 1 } }, t)
        assert(l ~= l, L.name .. ": " .. tostring(l))
      end
      local l, g = F[L.name .. "_fused"](boxes { { 0, 0, 0 / 0, 1 } }, t)
      assert(l ~= l, L.name .. " NaN box: " .. tostring(l))
      for _, v in ipairs(g:totable()[1]) do assert(v ~= v, L.name .. " NaN box gradient " .. tostring(v)) end
    end
  end)

  it("takes a mask of 0 and 1 only (a list: booleans too); 0.5, NaN or 2 is an error, nothing written", function()
    local x, y = random_boxes(4, 811), random_boxes(4, 812)
    for _, L in ipairs(LOSSES) do
      local want = ploss[L.crit] { reduction = "none", ignore = { 0, 1, 0, 0 } }:forward(x, y)
      H.assert_equal(ploss[L.crit] { reduction = "none", ignore = { false, true, false, false } }:forward(x, y), want,
        { what = L.crit .. " boolean list" })
      H.expect_error(function() ploss[L.crit] { ignore = { 0, 0.5, 0, 0 } } end,
        L.crit .. ": opts.ignore[2]: expected a boolean, 0 or 1, got 0.5")
      H.expect_error(function() ploss[L.crit] { ignore = { 0, 0, "yes", 0 } } end,
        L.crit .. ": opts.ignore[3]: expected a boolean, 0 or 1, got string")
      -- the list given to the constructor, edited in place, is seen at the next call (was
      -- the constructor's 0/1 copy: the box stayed in, silently)
      local list = { 0, 0, 0, 0 }
      local crit = ploss[L.crit] { reduction = "none", ignore = list }
      crit:forward(x, y)
      list[2] = 1
      H.assert_equal(crit:forward(x, y), want, { what = L.crit .. " list edited in place" })
      for _, case in ipairs { { 0.5, "f32", "0.5" }, { 0 / 0, "f32", "nan" }, { 2, "u8", "2" }, { -1, "i64", "-1" } } do
        local ign = ploss.zeros({ 4 }, { dtype = case[2] })
        ign:narrow(1, 3, 1):fill(case[1])
        local l, g = ploss.full({ 4 }, 7, { dtype = "f64" }), ploss.full({ 4, 4 }, 7, { dtype = "f64" })
        H.expect_error(function()
          F[L.name .. "_fused"](x, y, { reduction = "none", ignore = ign, out = l, grad_input = g })
        end, "ignore: element 2 (0-based) = " .. case[3] .. " is neither 0 nor 1")
        H.assert_equal(l, ploss.full({ 4 }, 7, { dtype = "f64" }), { what = L.name .. " loss untouched" })
        H.assert_equal(g, ploss.full({ 4, 4 }, 7, { dtype = "f64" }), { what = L.name .. " gradient untouched" })
      end
    end
  end)
end)

---------------------------------------------------------------------------------------
-- dtypes
---------------------------------------------------------------------------------------

describe("box losses: f32, f16 and bf16 against f64 on the same rounded boxes", function()
  local TOL = { f32 = 1e-5, f16 = 2e-3, bf16 = 1e-2 }
  for _, L in ipairs(LOSSES) do
    it(L.crit, function()
      for _, dtype in ipairs { "f32", "f16", "bf16" } do
        local x = B.random_boxes(64, 601, dtype, "cpu")
        local y = B.random_boxes(64, 602, dtype, "cpu")
        local x64, y64 = x:to(nil, "f64"), y:to(nil, "f64")
        for _, red in ipairs { "none", "mean" } do
          local l, g = F[L.name .. "_fused"](x, y, { reduction = red })
          local lr, gr = F[L.name .. "_fused"](x64, y64, { reduction = red })
          assert.are.equal("f32", (type(l) == "number" and ploss.tensor { 0 } or l):dtype())
          assert.are.equal(dtype, g:dtype())
          H.assert_close(type(l) == "number" and { l } or l, type(lr) == "number" and { lr } or lr,
            { rtol = 1e-6, atol = 1e-7, what = L.name .. " " .. dtype .. " loss" })
          local scale = 0
          for _, v in ipairs(gr:flat()) do scale = math.max(scale, math.abs(v)) end
          H.assert_close(g, gr, { rtol = TOL[dtype], atol = TOL[dtype] * scale, what = L.name .. " " .. dtype .. " gradient" })
        end
      end
    end)
  end
end)

---------------------------------------------------------------------------------------
-- pairwise similarities (ploss.box_iou, …)
---------------------------------------------------------------------------------------

-- torchvision's pairwise functions for one pair (no ε in the IoU and GIoU denominators)
local function tv_pair(fname, p, t, eps)
  local q = tv_parts(p, t, 0)
  local iou = q.iou
  if fname == "box_iou" then return iou end
  if fname == "generalized_box_iou" then return iou - (q.area_c - q.union) / q.area_c end
  local diou = iou - q.cd / (q.diag + eps)
  if fname == "distance_box_iou" then return diou end
  local alpha = q.v / (1 - iou + q.v + eps)
  return diou - alpha * q.v
end

local PAIR_FNS = { "box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou" }

describe("pairwise box similarities", function()
  it("torchvision's values for every pair, every box_format, eps; f32 out for f32 boxes", function()
    for _, format in ipairs { "xyxy", "xywh", "cxcywh" } do
      local a, b = random_boxes(7, 701, format), random_boxes(5, 702, format)
      local av, bv = a:totable(), b:totable()
      for _, fname in ipairs(PAIR_FNS) do
        for _, eps in ipairs { 1e-7, 0.01 } do
          local got = ploss[fname](a, b, { box_format = format, eps = eps })
          assert.are.same({ 7, 5 }, got:size())
          assert.are.equal("f64", got:dtype())
          local want = {}
          for i = 1, 7 do
            for j = 1, 5 do
              want[#want + 1] = tv_pair(fname, to_xyxy(format, av[i]), to_xyxy(format, bv[j]), eps)
            end
          end
          H.assert_close(got, want, { rtol = 1e-12, atol = 1e-14, what = fname .. " " .. format })
          local g32 = ploss.F[fname](a:to(nil, "f32"), b:to(nil, "f32"), { box_format = format, eps = eps })
          assert.are.equal("f32", g32:dtype())
          H.assert_close(g32, got:to(nil, "f32"):to(nil, "f64"):flat(), { rtol = 1e-5, atol = 1e-5 })
        end
      end
    end
  end)

  it("hand values; the losses are 1 − the similarities of the diagonal pairs (ε = 0)", function()
    local a = boxes { { 0, 0, 2, 2 }, { 0, 0, 4, 2 } }
    local b = boxes { { 1, 1, 3, 3 }, { 0, 0, 2, 4 } }
    H.assert_close(ploss.box_iou(a, b), { 1 / 7, 0.5, 0.2, 1 / 3 }, { rtol = 1e-15 })
    H.assert_close(ploss.generalized_box_iou(a, b), { 1 / 7 - 2 / 9, 0.5, 0.2 - (12 - 10) / 12, 1 / 3 - 1 / 4 }, { rtol = 1e-14 })
    for k, fname in ipairs(PAIR_FNS) do
      local s = ploss[fname](a, b, { eps = 0 }):totable()
      local l = F[LOSSES[k].name](a, b, { reduction = "none", eps = 0 }):flat()
      H.assert_close(l, { 1 - s[1][1], 1 - s[2][2] }, { rtol = 1e-14, atol = 1e-15, what = fname })
    end
  end)

  it("degenerate and empty sets, strided and written into out", function()
    local pts = boxes { { 1, 1, 1, 1 }, { 2, 2, 2, 2 } }
    H.assert_equal(ploss.box_iou(pts, pts), { 1, 0, 0, 1 })
    for _, fname in ipairs(PAIR_FNS) do
      for _, v in ipairs(ploss[fname](pts, boxes { { 0, 0, 2, 0 } }):flat()) do assert(v == v, fname .. ": NaN") end
      assert.are.same({ 0, 3 }, ploss[fname](ploss.empty({ 0, 4 }, { dtype = "f64" }), random_boxes(3, 5)):size())
      assert.are.same({ 3, 0 }, ploss[fname](random_boxes(3, 5), ploss.empty({ 0, 4 })):size())
    end
    local a, b = random_boxes(6, 711), random_boxes(4, 712)
    local b32 = b:to(nil, "f32") -- boxes2 of another dtype than boxes1's
    local ref = ploss.complete_box_iou(a, b32:to(nil, "f64"))
    local out = ploss.zeros({ 4, 6 }, { dtype = "f64" }):t()
    local r = ploss.complete_box_iou(a:t():contiguous():t(), b32, { out = out })
    assert(r == out)
    H.assert_equal(out, ref)
  end)

  it("bad input: a clear error naming the argument, out untouched", function()
    local a, b = random_boxes(3, 721), random_boxes(2, 722)
    local out = ploss.zeros({ 3, 2 }, { dtype = "f64" })
    H.expect_error(function() ploss.box_iou(ploss.zeros({ 3, 5 }), b) end, { "PLOSS_ERR_SHAPE", "boxes1: expected N×4 boxes" })
    H.expect_error(function() ploss.box_iou(a, ploss.zeros({ 2 })) end, { "PLOSS_ERR_SHAPE", "boxes2: expected N×4 boxes" })
    H.expect_error(function() ploss.box_iou(a, b, { out = ploss.zeros({ 2, 3 }, { dtype = "f64" }) }) end,
      { "PLOSS_ERR_SHAPE", "out: expected shape [3, 2]" })
    H.expect_error(function() ploss.box_iou(a, b, { out = ploss.zeros({ 3, 2 }) }) end, { "PLOSS_ERR_DTYPE", "out: expected f64, got f32" })
    H.expect_error(function() ploss.box_iou(ploss.zeros({ 3, 4 }, { dtype = "i64" }), b) end, { "PLOSS_ERR_DTYPE", "boxes1" })
    H.expect_error(function() ploss.box_iou(a, b, { eps = -1, out = out }) end, { "PLOSS_ERR_INVALID_ARGUMENT", "opts.eps" }, out)
    H.expect_error(function() ploss.box_iou(a, b, { box_format = "xy" }) end, "box_format: 'xy' is not one of")
    H.expect_error(function() ploss.box_iou(a, b, { reduction = "sum" }) end, "unknown option 'reduction'")
    local bad = boxes { { 0, 0, 1, 1 }, { 3, 0, 2, 1 } }
    H.expect_error(function() ploss.generalized_box_iou(a, bad, { out = out }) end,
      { "PLOSS_ERR_INVALID_BOX", "boxes2: box 1 (0-based)" }, out)
    -- the coordinates in digits that read back as them (six digits made x2 < x1 look equal)
    H.expect_error(function() ploss.box_iou(boxes { { 100000.5, 0, 100000.4, 3 } }, b) end,
      "boxes1: box 0 (0-based) = (100000.5, 0, 100000.4, 3) has x2 < x1 or y2 < y1")
    -- in the boxes' own dtype: f32's 0.1 reads back from "0.1", not 0.10000000149011612
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      H.expect_error(function() ploss.box_iou(boxes({ { 0.5, 0.25, 0.125, 12 } }, dt), b:to(nil, dt)) end,
        "boxes1: box 0 (0-based) = (0.5, 0.25, 0.125, 12) has x2 < x1")
    end
    H.expect_error(function() ploss.box_iou(boxes({ { 0.1, 0.2, 0.05, 12.3 } }, "f32"), b:float()) end,
      "boxes1: box 0 (0-based) = (0.1, 0.2, 0.05, 12.3) has x2 < x1")
    H.expect_error(function() ploss.box_iou(boxes { { 0.1, 0, -0.30000000000000004, 3 } }, b, { box_format = "xywh" }) end,
      "boxes1: box 0 (0-based) = (0.1, 0, -0.30000000000000004, 3) has a negative width or height")
    local sq = ploss.zeros({ 3, 4 }, { dtype = "f64" })
    sq:copy(a)
    H.expect_error(function() ploss.box_iou(sq, sq:narrow(1, 1, 3), { out = sq:narrow(2, 1, 3) }) end,
      { "PLOSS_ERR_ALIAS", "out" })
  end)
end)
