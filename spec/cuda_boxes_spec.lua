-- Box regression losses on CUDA (suite 'cuda'; spec/run.lua exits 77 before this file
-- without a GPU; PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run).
-- CUDA against the CPU backend on the same dtype-rounded boxes (fp32 maths on the GPU, f64
-- on the CPU; tolerances H.CUDA_TOL), for IoU, GIoU, DIoU and CIoU, every dtype, reduction
-- and pass (fused, forward, backward with an upstream gradient), through both kernel paths:
-- dense boxes (one vector load per box) and the general one (strided, coordinate-major,
-- a target of another dtype, a view that is not aligned to a box); weights, ignore masks,
-- every box_format, the paper's CIoU gradient, many blocks (the block partials and their
-- fixed-order sum), bitwise repeatability, fused = forward + backward, degenerate boxes,
-- empty and all-ignored batches, and invalid boxes through the context's error slot.
local H = require "spec.helpers"
local B = require "spec.bad_input"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()

local LOSSES = {
  { name = "box_iou_loss", crit = "IoULoss" },
  { name = "generalized_box_iou_loss", crit = "GIoULoss" },
  { name = "distance_box_iou_loss", crit = "DIoULoss" },
  { name = "complete_box_iou_loss", crit = "CIoULoss" },
}
local DTYPES = { "f32", "f16", "bf16", "f64" }
local REDUCTIONS = { "none", "mean", "sum" }
local TOL = H.CUDA_TOL
local close = H.assert_close_scaled

local function ldtype(dtype) return dtype == "f64" and "f64" or "f32" end

-- f64 CPU boxes of `format` (random xyxy boxes converted)
local function random_boxes(n, seed, format)
  local v = B.random_boxes(n, seed, "f64", "cpu"):totable()
  if format == "xywh" then
    for i = 1, n do v[i] = { v[i][1], v[i][2], v[i][3] - v[i][1], v[i][4] - v[i][2] } end
  elseif format == "cxcywh" then
    for i = 1, n do
      v[i] = { (v[i][1] + v[i][3]) / 2, (v[i][2] + v[i][4]) / 2, v[i][3] - v[i][1], v[i][4] - v[i][2] }
    end
  end
  if n == 0 then return ploss.empty({ 0, 4 }, { dtype = "f64" }) end
  return ploss.tensor(v, { dtype = "f64" })
end

-- CPU vs DEV for every pass of loss `name` on x, y (CPU tensors already in their dtypes);
-- `layout(xg, yg)` may re-lay the device copies (the values stay the same).
local function compare(name, xc, yc, opts, label, layout)
  local dtype = xc:dtype()
  local xg, yg = xc:to(DEV), yc:to(DEV)
  if layout then xg, yg = layout(xg, yg) end
  local o_gpu = H.options_on(opts, DEV)
  local what = string.format("%s %s %s %s", name, label, dtype, opts.reduction or "mean")
  local T = TOL[dtype]
  local lc, gc = F[name .. "_fused"](xc, yc, opts)
  local lg, gg = F[name .. "_fused"](xg, yg, o_gpu)
  assert.are.equal(xg:device(), gg:device())
  assert.are.equal(dtype, gg:dtype())
  close(lg, lc, T.loss, 0, what .. " fused loss")
  close(gg, gc, T.grad, T.floor, what .. " fused grad")
  local gout_c, gout_g = 0.7, 0.7
  if opts.reduction == "none" then
    gout_c = ploss.randn({ xc:size()[1] }, { dtype = ldtype(dtype), seed = 9 })
    gout_g = gout_c:to(DEV)
  end
  local lf = F[name](xg, yg, o_gpu)
  close(lf, lc, T.loss, 0, what .. " forward")
  local gb = F[name .. "_backward"](xg, yg, gout_g, o_gpu)
  close(gb, F[name .. "_backward"](xc, yc, gout_c, opts), T.grad, T.floor, what .. " backward")
  -- fused = forward + backward on the device (gradient of the same reduced loss, scale 1)
  local gb1 = F[name .. "_backward"](xg, yg, opts.reduction == "none" and ploss.ones({ xc:size()[1] }, { dtype = ldtype(dtype), device = DEV }) or 1, o_gpu)
  H.assert_equal(gb1, gg, { what = what .. " fused vs backward gradient" })
  H.assert_equal(type(lf) == "number" and { lf } or lf, type(lg) == "number" and { lg } or lg, { what = what .. " fused vs forward loss" })
  -- bitwise repeatable
  local lg2, gg2 = F[name .. "_fused"](xg, yg, o_gpu)
  H.assert_equal(type(lg2) == "number" and { lg2 } or lg2, type(lg) == "number" and { lg } or lg, { what = what .. " repeat loss" })
  H.assert_equal(gg2, gg, { what = what .. " repeat grad" })
end

local function per_box_options(n, seed)
  local w, ign = {}, {}
  local u = ploss.rand({ n }, { dtype = "f64", seed = seed }):flat()
  for i = 1, n do
    w[i] = 0.25 + 2 * u[i]
    ign[i] = (i * 7) % 11 == 0 and 1 or 0
  end
  return ploss.tensor(w, { dtype = "f32" }), ploss.tensor(ign, { dtype = "u8" })
end

describe("CUDA box losses vs CPU: dense boxes (vector loads)", function()
  for _, L in ipairs(LOSSES) do
    it(L.crit .. ": every dtype, reduction and pass, weights and ignore", function()
      local n = 1000
      local w, ign = per_box_options(n, 3)
      for _, dtype in ipairs(DTYPES) do
        local x, y = B.random_boxes(n, 11, dtype, "cpu"), B.random_boxes(n, 12, dtype, "cpu")
        for _, red in ipairs(REDUCTIONS) do
          compare(L.name, x, y, { reduction = red }, "plain")
          compare(L.name, x, y, { reduction = red, weight = w, ignore = ign }, "weight+ignore")
        end
      end
    end)
  end

  it("every box_format, eps and the paper's CIoU gradient", function()
    for _, format in ipairs { "xywh", "cxcywh" } do
      for _, dtype in ipairs { "f32", "bf16" } do
        local x, y = random_boxes(300, 21, format):to(nil, dtype), random_boxes(300, 22, format):to(nil, dtype)
        for _, L in ipairs(LOSSES) do
          compare(L.name, x, y, { reduction = "mean", box_format = format }, format)
        end
        compare("complete_box_iou_loss", x, y, { reduction = "sum", box_format = format, ciou_gradient = "paper" }, format .. " paper")
      end
    end
    local x, y = B.random_boxes(300, 23, "f32", "cpu"), B.random_boxes(300, 24, "f32", "cpu")
    for _, L in ipairs(LOSSES) do
      compare(L.name, x, y, { reduction = "none", eps = 0 }, "eps 0")
      compare(L.name, x, y, { reduction = "sum", eps = 1e-3 }, "eps 1e-3")
    end
    compare("complete_box_iou_loss", x, y, { reduction = "none", ciou_gradient = "paper" }, "paper")
  end)

  it("many blocks: 3·10⁵ boxes (block partials summed in a fixed order), and a count of kept boxes", function()
    local n = 300000
    local x, y = B.random_boxes(n, 31, "f32", "cpu"), B.random_boxes(n, 32, "f32", "cpu")
    local w, ign = per_box_options(n, 33)
    for _, L in ipairs { LOSSES[2], LOSSES[4] } do
      for _, red in ipairs { "mean", "sum" } do
        compare(L.name, x, y, { reduction = red, weight = w, ignore = ign }, "300k")
      end
    end
  end)
end)

describe("CUDA box losses vs CPU: the general kernel", function()
  for _, L in ipairs(LOSSES) do
    it(L.crit .. ": coordinate-major, every other box, a misaligned view, a target of another dtype", function()
      local n = 257
      local w, ign = per_box_options(n, 41)
      for _, dtype in ipairs(DTYPES) do
        local x, y = B.random_boxes(n, 42, dtype, "cpu"), B.random_boxes(n, 43, dtype, "cpu")
        for _, red in ipairs(REDUCTIONS) do
          local o = { reduction = red, weight = w, ignore = ign }
          compare(L.name, x, y, o, "coordinate-major", function(xg, yg)
            return xg:t():contiguous():t(), yg:t():contiguous():t()
          end)
          compare(L.name, x, y, o, "every other box", function(xg, yg)
            local big = ploss.zeros({ n, 2, 4 }, { dtype = dtype, device = DEV })
            big:select(2, 2):copy(xg)
            return big:select(2, 2), yg
          end)
          compare(L.name, x, y, o, "view at one element's offset", function(xg, yg)
            -- boxes start 1 element into a flat buffer: dense rows, not aligned to a box
            local flat = ploss.zeros({ 4 * n + 1 }, { dtype = dtype, device = DEV })
            local v = flat:narrow(1, 2, 4 * n):view(n, 4)
            v:copy(xg)
            return v, yg
          end)
        end
        -- a target of another dtype than the input's (the CPU reads it the same way)
        local yo = y:to(nil, dtype == "f64" and "f32" or "f64")
        compare(L.name, x, yo, { reduction = "mean" }, "target " .. yo:dtype())
      end
    end)
  end

  it("strided outputs: a coordinate-major gradient and a strided 'none' loss", function()
    local n = 100
    local x, y = B.random_boxes(n, 51, "f32", DEV), B.random_boxes(n, 52, "f32", DEV)
    for _, L in ipairs(LOSSES) do
      local lref, gref = F[L.name .. "_fused"](x, y, { reduction = "none" })
      local lout = ploss.zeros({ n, 3 }, { device = DEV }):select(2, 2)
      local gout = ploss.zeros({ 4, n }, { device = DEV }):t()
      local l, g = F[L.name .. "_fused"](x, y, { reduction = "none", out = lout, grad_input = gout })
      H.assert_equal(l, lref, { what = L.name .. " strided loss" })
      H.assert_equal(g, gref, { what = L.name .. " strided gradient" })
    end
  end)
end)

describe("CUDA box losses: edge cases", function()
  it("degenerate boxes: identical zero-area boxes cost 0, zero height stays finite", function()
    local p = ploss.tensor({ { 1, 1, 1, 1 }, { 0, 2, 3, 2 }, { 0, 0, 2, 0 }, { 5, 5, 5, 9 } }, { dtype = "f32" })
    local t = ploss.tensor({ { 1, 1, 1, 1 }, { 0, 2, 3, 2 }, { 0, 0, 2, 2 }, { 4, 4, 7, 8 } }, { dtype = "f32" })
    for _, L in ipairs(LOSSES) do
      for _, dtype in ipairs { "f32", "f64", "f16" } do
        local pc, tc = p:to(nil, dtype), t:to(nil, dtype)
        local lg, gg = F[L.name .. "_fused"](pc:to(DEV), tc:to(DEV), { reduction = "none" })
        local lc, gc = F[L.name .. "_fused"](pc, tc, { reduction = "none" })
        local lv = lg:flat()
        assert.are.equal(0, lv[1], L.name .. " identical points")
        assert.are.equal(0, lv[2], L.name .. " identical segments")
        for i, v in ipairs(gg:flat()) do
          assert(v == v and math.abs(v) < math.huge, L.name .. " " .. dtype .. ": gradient element " .. i .. " is " .. v)
        end
        close(lg, lc, TOL[dtype].loss, 0, L.name .. " " .. dtype .. " degenerate loss")
        close(gg, gc, TOL[dtype].grad, TOL[dtype].floor, L.name .. " " .. dtype .. " degenerate gradient")
      end
    end
  end)

  it("empty batch and every box ignored: mean NaN, sum 0, gradient exactly zero", function()
    for _, L in ipairs(LOSSES) do
      for _, n in ipairs { 0, 5, 5000 } do
        local x, y = B.random_boxes(n, 61, "f32", DEV), B.random_boxes(n, 62, "f32", DEV)
        local o = n > 0 and { ignore = ploss.ones({ n }, { dtype = "u8", device = DEV }) } or {}
        for _, red in ipairs(REDUCTIONS) do
          o.reduction = red
          local l, g = F[L.name .. "_fused"](x, y, o)
          if red == "mean" then assert(l ~= l, L.name .. " mean: " .. tostring(l)) end
          if red == "sum" then assert.are.equal(0, l) end
          if red == "none" then for _, v in ipairs(l:flat()) do assert.are.equal(0, v) end end
          for _, v in ipairs(g:flat()) do assert.are.equal(0, v) end
          local gb = F[L.name .. "_backward"](x, y, red == "none" and ploss.ones({ n }, { device = DEV }) or 1, o)
          for _, v in ipairs(gb:flat()) do assert.are.equal(0, v) end
        end
      end
    end
  end)

  it("an ignore value neither 0 nor 1: the next synchronisation names it, that box's loss NaN, gradient 0", function()
    local n = 300
    local x, y = B.random_boxes(n, 75, "f32", DEV), B.random_boxes(n, 76, "f32", DEV)
    for _, L in ipairs(LOSSES) do
      for _, case in ipairs { { 0.5, "f32", "none" }, { 0 / 0, "f32", "none" }, { 2, "u8", "mean" } } do
        local v, red = case[1], case[3]
        local ign = ploss.zeros({ n }, { dtype = case[2] })
        ign:narrow(1, 201, 1):fill(v)
        if DEV == "cpu" then -- the dry run: the CPU refuses the call itself
          H.expect_error(function() F[L.name .. "_fused"](x, y, { reduction = red, ignore = ign }) end,
            "ignore: element 200 (0-based) = ")
        else
          -- a reduced loss into a device tensor (a Lua number would be read, and the read
          -- would raise the error)
          local o = { reduction = red, ignore = ign:to(DEV) }
          if red == "mean" then o.out = ploss.empty({}, { device = DEV }) end
          local l, g = F[L.name .. "_fused"](x, y, o)
          H.expect_error(function() ploss.synchronize(DEV) end,
            { "PLOSS_ERR_INVALID_ARGUMENT", "ignore: element 200 (0-based) is neither 0 nor 1" })
          ploss.synchronize(DEV)
          local lv = l:flat()
          if red == "none" then
            assert(lv[201] ~= lv[201], L.name .. ": the loss of the box is " .. tostring(lv[201]))
            assert(lv[200] == lv[200] and lv[202] == lv[202], L.name .. ": its neighbours' losses")
          else
            assert(lv[1] ~= lv[1], L.name .. ": the mean with that box is " .. tostring(lv[1]))
          end
          for k = 1, 4 do assert.are.equal(0, g:flat()[4 * 200 + k]) end
        end
      end
    end
  end)

  it("an invalid box: the call returns, the next synchronisation raises INVALID_BOX naming it, the context works after", function()
    local n = 700
    for _, L in ipairs(LOSSES) do
      for _, which in ipairs { "input", "target" } do
        for _, vec in ipairs { true, false } do
          local x, y = B.random_boxes(n, 71, "f32", "cpu"), B.random_boxes(n, 72, "f32", "cpu")
          local t = which == "input" and x or y
          local v = t:totable()
          v[613] = { 3, 3, 2, 4 } -- box 612 (0-based): x2 < x1
          t:copy(ploss.tensor(v, { dtype = "f32" }))
          local xg, yg = x:to(DEV), y:to(DEV)
          if not vec then xg = xg:t():contiguous():t() end
          if DEV == "cpu" then -- the dry run: the CPU refuses the call itself
            H.expect_error(function() F[L.name .. "_fused"](xg, yg, { reduction = "none" }) end,
              { "PLOSS_ERR_INVALID_BOX", which .. ": box 612" })
          else
            local l, g = F[L.name .. "_fused"](xg, yg, { reduction = "none" })
            H.expect_error(function() ploss.synchronize(DEV) end,
              { "PLOSS_ERR_INVALID_BOX", which .. ": box 612 (0-based) has x2 < x1" })
            ploss.synchronize(DEV)
            local lv = l:flat()
            assert(lv[613] ~= lv[613], L.name .. ": the loss of the invalid box is " .. tostring(lv[613]))
            for k = 1, 4 do assert.are.equal(0, g:flat()[4 * 612 + k]) end
          end
          -- ignored, the same box is not checked
          local ign = ploss.zeros({ n }, { dtype = "u8" })
          ign:narrow(1, 613, 1):fill(1)
          local lo = F[L.name](xg, yg, { ignore = ign:to(DEV) })
          assert(lo == lo, L.name .. ": the loss with the invalid box ignored is " .. tostring(lo))
        end
      end
    end
  end)

  it("criteria on the device: forward, backward and the fused call agree with the functions", function()
    local x, y = B.random_boxes(64, 81, "bf16", DEV), B.random_boxes(64, 82, "bf16", DEV)
    for _, L in ipairs(LOSSES) do
      local crit = ploss[L.crit] { reduction = "sum" }
      local l = crit:forward(x, y)
      local g = crit:backward(x, y):clone()
      local lf, gf = crit(x, y)
      assert.are.equal(l, lf)
      H.assert_equal(g, gf)
      H.assert_equal(gf, F[L.name .. "_backward"](x, y, 1, { reduction = "sum" }))
    end
  end)
end)

describe("CUDA pairwise box similarities vs CPU", function()
  local FNS = { "box_iou", "generalized_box_iou", "distance_box_iou", "complete_box_iou" }
  it("every function and dtype, strided boxes, a boxes2 of another dtype, a strided out", function()
    for _, dtype in ipairs(DTYPES) do
      local a, b = B.random_boxes(300, 91, dtype, "cpu"), B.random_boxes(170, 92, dtype, "cpu")
      for _, fname in ipairs(FNS) do
        local ref = ploss[fname](a, b)
        local got = ploss[fname](a:to(DEV), b:to(DEV))
        assert.are.equal(ldtype(dtype), got:dtype())
        close(got, ref, TOL[dtype].loss, 1e-6, fname .. " " .. dtype)
        local out = ploss.zeros({ 170, 300 }, { dtype = ldtype(dtype), device = DEV }):t()
        ploss[fname](a:to(DEV):t():contiguous():t(), b:to(DEV):to(nil, "f64"), { out = out })
        close(out, ploss[fname](a, b:to(nil, "f64")), TOL[dtype].loss, 1e-6, fname .. " " .. dtype .. " strided")
      end
    end
    for _, format in ipairs { "xywh", "cxcywh" } do
      local a, b = random_boxes(50, 93, format), random_boxes(40, 94, format)
      for _, fname in ipairs(FNS) do
        close(ploss[fname](a:to(DEV), b:to(DEV), { box_format = format }), ploss[fname](a, b, { box_format = format }),
          1e-10, 0, fname .. " " .. format)
      end
    end
  end)

  it("an invalid box: INVALID_BOX naming the set and the box at the next synchronisation", function()
    local a, b = B.random_boxes(20, 95, "f32", "cpu"), B.random_boxes(30, 96, "f32", "cpu")
    local v = b:totable()
    v[17] = { 1, 5, 2, 4 }
    b = ploss.tensor(v, { dtype = "f32" })
    if DEV == "cpu" then
      H.expect_error(function() ploss.box_iou(a, b) end, { "PLOSS_ERR_INVALID_BOX", "boxes2: box 16" })
    else
      local out = ploss.box_iou(a:to(DEV), b:to(DEV))
      H.expect_error(function() ploss.synchronize(DEV) end, { "PLOSS_ERR_INVALID_BOX", "boxes2: box 16 (0-based) has x2 < x1" })
      local ov = out:totable()
      assert(ov[1][17] ~= ov[1][17], "the pairs of the invalid box are NaN")
      assert(ov[1][16] == ov[1][16])
    end
  end)
end)
