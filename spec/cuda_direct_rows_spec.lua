-- The direct rows on CUDA (suite 'cuda'; spec/run.lua exits 77 before this file without a
-- GPU): nll_loss, multi_margin_loss, class_simplex_loss, multilabel_margin_loss (N×C, a list of
-- classes per row) and multilabel_soft_margin_loss (N×C, its float labels of
-- the input's shape: hard and soft, f32 and bf16) against the CPU backend on the same dtype-rounded
-- inputs in f32/f16/bf16/f64, every reduction, with and without class weights (NLL: and
-- ignored samples; multi-margin: p and margin), N×C (narrow and wide rows), N×C×d…,
-- channels-last and transposed inputs, i32 labels, many blocks, fused against forward +
-- backward; bitwise determinism; invalid labels through the context's error slot; all
-- samples ignored; in place.
-- PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU as a dry run of its logic.
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()

local DTYPES = { "f32", "f16", "bf16", "f64" }
local REDUCTIONS = { "none", "mean", "sum" }
local TOL = H.CUDA_TOL
local close = H.assert_close_scaled

local function ldtype(dtype) return dtype == "f64" and "f64" or "f32" end

-- Fused, forward, backward on the CPU and on DEV with the same rounded inputs; compare;
-- repeat the GPU call for bitwise determinism.  layout(xg) → a view of xg on DEV.
local function compare(name, x64, y, opts, dtype, label, layout)
  local xc = x64:to("cpu", dtype)
  local xg, yg = xc:to(DEV), y:to(DEV)
  if layout then xg = layout(xg) end
  local fdt = dtype == "f64" and "f64" or "f32"
  local o_cpu, o_gpu = H.options_on(opts, "cpu", fdt), H.options_on(opts, DEV, fdt)
  local what = string.format("%s %s %s %s w=%s p=%s m=%s", name, label, dtype, opts.reduction,
    tostring(opts.weight ~= nil), tostring(opts.p), tostring(opts.margin))
  local T = TOL[dtype]
  local lc, gc = F[name .. "_fused"](xc, y, o_cpu)
  local lg, gg = F[name .. "_fused"](xg, yg, o_gpu)
  assert.are.equal(dtype, gg:dtype())
  close(lg, lc, T.loss, 0, what .. " fused loss")
  close(gg, gc, T.grad, T.floor, what .. " fused grad")
  local gout_c, gout_g = 0.7, 0.7
  if opts.reduction == "none" then
    gout_c = ploss.randn(lc:size(), { dtype = ldtype(dtype) })
    gout_g = gout_c:to(DEV)
  end
  close(F[name](xg, yg, o_gpu), lc, T.loss, 0, what .. " forward")
  close(F[name .. "_backward"](xg, yg, gout_g, o_gpu), F[name .. "_backward"](xc, y, gout_c, o_cpu), T.grad, T.floor,
    what .. " backward")
  local lg2, gg2 = F[name .. "_fused"](xg, yg, o_gpu)
  H.assert_equal(lg2, lg, { what = what .. " repeat loss" })
  H.assert_equal(gg2, gg, { what = what .. " repeat grad" })
end

-- The fused pass of F[name] on 4×5 scores with labels `y` whose row 2 is out of range:
-- INVALID_LABEL at the next synchronisation, that row's gradient zero.
local function expect_reported_row(name, y)
  local x = ploss.randn({ 4, 5 }, { device = DEV })
  local _, g = F[name .. "_fused"](x, ploss.tensor(y, { dtype = "i64", device = DEV }), { reduction = "none" })
  local ok, err = pcall(ploss.synchronize, DEV)
  assert.is_false(ok)
  assert.is_truthy(tostring(err):find("PLOSS_ERR_INVALID_LABEL", 1, true))
  H.assert_equal(g:select(1, 2), ploss.zeros({ 5 }))
  ploss.synchronize(DEV)
end

describe("CUDA nll_loss vs CPU", function()
  local compare = function(...) return compare("nll_loss", ...) end
  for _, dtype in ipairs(DTYPES) do
    it("shapes, weights, ignored samples, layouts, i32 labels in " .. dtype, function()
      H.seed(600)
      for _, c in ipairs {
        { "N×C", { 37, 10 } },
        { "wide rows", { 5, 3000 } },
        { "long rows (several blocks along a row)", { 3, 40000 } },
        { "more rows than the gradient grid", { 5000, 3 } },
        { "N×C×H×W", { 3, 6, 5, 7 } },
        { "one sample", { 1, 4 } },
        { "many blocks", { 2 ^ 18 + 3, 3 } },
      } do
        local label, sizes = c[1], c[2]
        local x = H.random_logits(sizes, { std = 2 })
        local ns = H.sample_sizes(sizes)
        local y = H.random_labels(ns, sizes[2], { ignore = 0.2 })
        local w = ploss.rand({ sizes[2] }, { dtype = "f64", low = 0.5, high = 2 })
        for _, red in ipairs(REDUCTIONS) do
          compare(x, y, { reduction = red }, dtype, label)
          compare(x, y, { reduction = red, weight = w }, dtype, label)
          if #sizes > 2 then
            compare(x, y, { reduction = red, weight = w }, dtype, label .. " channels-last",
              function(xg) return H.relayout(xg, "channels_last") end)
          elseif sizes[1] > 1 and sizes[1] < 100 then
            compare(x, y, { reduction = red }, dtype, label .. " transposed",
              function(xg) return H.relayout(xg, "transposed") end)
            compare(x, y:to("cpu", "i32"), { reduction = red, weight = w }, dtype, label .. " i32 labels")
            compare(x, H.random_labels(ns, sizes[2], { ignore = 0.2, ignore_index = 2 }),
              { reduction = red, ignore_index = 2 }, dtype, label .. " ignore_index 2")
          end
        end
      end
    end)
  end

  it("every sample ignored: mean NaN, sum 0, an exactly zero gradient", function()
    local x = ploss.randn({ 4, 5 }, { device = DEV })
    local y = ploss.full({ 4 }, -100, { dtype = "i64", device = DEV })
    local l, g = F.nll_loss_fused(x, y)
    assert.is_true(l ~= l)
    H.assert_equal(g, ploss.zeros({ 4, 5 }))
    assert.are.equal(0, F.nll_loss(x, y, { reduction = "sum" }))
    H.assert_equal(F.nll_loss_backward(x, y, 1, {}), ploss.zeros({ 4, 5 }))
  end)

  it("an invalid label is reported at the next synchronisation; nothing is read out of bounds", function()
    if DEV == "cpu" then return end -- the CPU refuses it before the call (the catalogue checks that)
    local x = ploss.randn({ 4, 5 }, { device = DEV })
    local y = ploss.tensor({ 0, 5, 1, 2 }, { dtype = "i64", device = DEV })
    for _, pass in ipairs { "", "_backward", "_fused" } do
      local ok = pcall(function()
        if pass == "_backward" then return F.nll_loss_backward(x, y, ploss.ones({ 4 }, { device = DEV }), { reduction = "none" }) end
        return F["nll_loss" .. pass](x, y, { reduction = "none" })
      end)
      assert.is_true(ok, pass)
      local ok2, err = pcall(ploss.synchronize, DEV)
      assert.is_false(ok2, pass)
      assert.is_truthy(tostring(err):find("PLOSS_ERR_INVALID_LABEL", 1, true), pass)
    end
    ploss.synchronize(DEV)
  end)

  it("in place: the fused gradient over the input, bitwise the out-of-place one", function()
    H.seed(601)
    for _, dtype in ipairs { "f32", "bf16" } do
      local x = H.random_logits({ 9, 7 }, { device = DEV, dtype = dtype })
      local y = H.random_labels({ 9 }, 7, { device = DEV, ignore = 0.2 })
      local l1, g1 = F.nll_loss_fused(x, y, { weight = { 1, 2, 3, 4, 5, 6, 7 } })
      H.check_inplace_fused("nll_loss", x:clone(), y, { weight = { 1, 2, 3, 4, 5, 6, 7 } }, l1, g1, "nll " .. dtype)
    end
  end)
end)

describe("CUDA multi_margin_loss vs CPU", function()
  local compare = function(...) return compare("multi_margin_loss", ...) end
  for _, dtype in ipairs(DTYPES) do
    it("shapes, p, margin, weights, layouts, i32 labels in " .. dtype, function()
      H.seed(610)
      for _, c in ipairs {
        { "N×C", { 37, 10 } },
        { "wide rows", { 5, 3000 } },
        { "more rows than the grid has warps", { 40000, 3 } },
        { "N×C×H×W", { 3, 6, 5, 7 } },
        { "one class", { 4, 1 } },
        { "many blocks", { 2 ^ 17 + 3, 3 } },
      } do
        local label, sizes = c[1], c[2]
        local x = H.random_logits(sizes, { std = 1 })
        local ns = H.sample_sizes(sizes)
        local y = H.random_labels(ns, sizes[2])
        local w = ploss.rand({ sizes[2] }, { dtype = "f64", low = 0.5, high = 2 })
        for _, red in ipairs(REDUCTIONS) do
          compare(x, y, { reduction = red }, dtype, label)
          compare(x, y, { reduction = red, p = 2, margin = 0.7, weight = w }, dtype, label)
          if #sizes > 2 then
            compare(x, y, { reduction = red, p = 2 }, dtype, label .. " channels-last",
              function(xg) return H.relayout(xg, "channels_last") end)
          elseif sizes[1] > 1 and sizes[1] < 100 then
            compare(x, y, { reduction = red, weight = w }, dtype, label .. " transposed",
              function(xg) return H.relayout(xg, "transposed") end)
            compare(x, y:to("cpu", "i32"), { reduction = red, p = 2 }, dtype, label .. " i32 labels")
          end
        end
      end
    end)
  end

  it("an invalid label is reported at the next synchronisation, with a zero gradient row", function()
    if DEV == "cpu" then return end -- the CPU refuses it before the call (the catalogue checks that)
    expect_reported_row("multi_margin_loss", { 0, -100, 1, 2 })
  end)

  it("in place: the fused gradient over the input, bitwise the out-of-place one", function()
    H.seed(611)
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      local x = H.random_logits({ 9, 7 }, { device = DEV, dtype = dtype })
      local y = H.random_labels({ 9 }, 7, { device = DEV })
      local o = { p = 2, weight = { 1, 2, 3, 4, 5, 6, 7 } }
      local l1, g1 = F.multi_margin_loss_fused(x, y, o)
      H.check_inplace_fused("multi_margin_loss", x:clone(), y, o, l1, g1, "multi margin " .. dtype)
    end
  end)
end)

describe("CUDA class_simplex_loss vs CPU", function()
  local compare = function(...) return compare("class_simplex_loss", ...) end
  for _, dtype in ipairs(DTYPES) do
    it("shapes, layouts, i32 labels in " .. dtype, function()
      H.seed(630)
      for _, c in ipairs {
        { "N×C", { 37, 10 } },
        { "wide rows", { 5, 3000 } },
        { "more rows than the grid has warps", { 40000, 3 } },
        { "N×C×H×W", { 3, 6, 5, 7 } },
        { "two classes", { 4, 2 } },
      } do
        local label, sizes = c[1], c[2]
        local x = H.random_logits(sizes, { std = 1 })
        local y = H.random_labels(H.sample_sizes(sizes), sizes[2])
        for _, red in ipairs(REDUCTIONS) do
          compare(x, y, { reduction = red }, dtype, label)
          if #sizes > 2 then
            compare(x, y, { reduction = red }, dtype, label .. " channels-last",
              function(xg) return H.relayout(xg, "channels_last") end)
          elseif sizes[1] > 1 and sizes[1] < 100 then
            compare(x, y, { reduction = red }, dtype, label .. " transposed",
              function(xg) return H.relayout(xg, "transposed") end)
            compare(x, y:to("cpu", "i32"), { reduction = red }, dtype, label .. " i32 labels")
          end
        end
      end
    end)
  end

  it("an invalid label is reported at the next synchronisation, with a zero gradient row", function()
    if DEV == "cpu" then return end -- the CPU refuses it before the call (the catalogue checks that)
    expect_reported_row("class_simplex_loss", { 0, 5, 1, 2 })
  end)

  it("in place: the fused gradient over the input, bitwise the out-of-place one; the predictions", function()
    H.seed(631)
    for _, dtype in ipairs { "f32", "bf16", "f64" } do
      local x = H.random_logits({ 9, 7 }, { device = DEV, dtype = dtype })
      local y = H.random_labels({ 9 }, 7, { device = DEV })
      local l1, g1 = F.class_simplex_loss_fused(x, y)
      H.check_inplace_fused("class_simplex_loss", x:clone(), y, {}, l1, g1, "class simplex " .. dtype)
      local crit = ploss.ClassSimplexLoss()
      close(crit:predictions(x), crit:predictions(x:to("cpu")), TOL[dtype].grad, TOL[dtype].floor,
        "predictions " .. dtype)
      H.assert_equal(crit:top_prediction(x:double()), crit:top_prediction(x:to("cpu"):double()))
    end
  end)
end)

describe("CUDA multilabel_soft_margin_loss vs CPU", function()
  local compare = function(...) return compare("multilabel_soft_margin_loss", ...) end
  for _, dtype in ipairs(DTYPES) do
    it("shapes, weights, hard and soft labels, layouts in " .. dtype, function()
      H.seed(620)
      for _, c in ipairs {
        { "N×C", { 37, 10 } },
        { "wide rows", { 5, 3000 } },
        { "more rows than the grid has warps", { 40000, 3 } },
        { "one class", { 4, 1 } },
      } do
        local label, sizes = c[1], c[2]
        local x = H.random_logits(sizes, { std = 3 })
        local hard = ploss.rand(sizes, { dtype = "f64" })
        local v = hard:flat()
        for i = 1, #v do v[i] = v[i] < 0.3 and 1 or 0 end
        hard = ploss.tensor(v, { dtype = "f64", size = sizes })
        local soft = ploss.rand(sizes, { dtype = "f32" })
        local w = ploss.rand({ sizes[2] }, { dtype = "f64", low = 0.5, high = 2 })
        for _, red in ipairs(REDUCTIONS) do
          compare(x, hard, { reduction = red }, dtype, label)
          compare(x, soft, { reduction = red, weight = w }, dtype, label .. " soft labels")
          compare(x, hard:to("cpu", "bf16"), { reduction = red, weight = w }, dtype, label .. " bf16 labels")
          compare(x, hard:to("cpu", "i64"), { reduction = red, weight = w }, dtype, label .. " i64 labels")
          compare(x, hard:to("cpu", "i32"), { reduction = red }, dtype, label .. " i32 labels")
          if sizes[1] > 1 and sizes[1] < 100 then
            compare(x, hard, { reduction = red }, dtype, label .. " transposed",
              function(xg) return H.relayout(xg, "transposed") end)
          end
        end
      end
    end)
  end
end)

-- Lists of classes per row: entries drawn in [0, C) (repeats allowed), a random length
-- (0 to C: a row without −1 lists C classes), −1 after the list and arbitrary entries after
-- that (not read).
local function random_lists(N, C, max_len, seed, dtype)
  H.seed(seed)
  local draws = ploss.randint(0, C, { N, C }, { seed = seed }):totable()
  local lens = ploss.randint(0, math.min(C, max_len) + 1, { N }, { seed = seed + 1 }):totable()
  for i = 1, N do
    for k = lens[i] + 1, C do draws[i][k] = k == lens[i] + 1 and -1 or (k * 7) % (C + 5) end
  end
  return ploss.tensor(draws, { dtype = dtype or "i64" })
end

describe("CUDA multilabel_margin_loss vs CPU", function()
  local compare = function(...) return compare("multilabel_margin_loss", ...) end
  for _, dtype in ipairs(DTYPES) do
    it("shapes, list lengths, repeats, i32 lists, layouts in " .. dtype, function()
      for i, c in ipairs {
        { "N×C", { 37, 10 }, 10 },
        { "wide rows, short lists", { 5, 3000 }, 40 },
        { "long lists (more entries than a warp)", { 3, 300 }, 300 },
        { "more rows than the grid has warps", { 40000, 3 }, 3 },
        { "one class", { 4, 1 }, 1 },
      } do
        local label, sizes, max_len = c[1], c[2], c[3]
        local x = H.random_logits(sizes, { std = 1.5 })
        local y = random_lists(sizes[1], sizes[2], max_len, 640 + i)
        for _, red in ipairs(REDUCTIONS) do
          compare(x, y, { reduction = red }, dtype, label)
          if sizes[1] < 100 then
            compare(x, y:int(), { reduction = red }, dtype, label .. " i32 lists")
            compare(x, y, { reduction = red }, dtype, label .. " transposed",
              function(xg) return H.relayout(xg, "transposed") end)
          end
        end
      end
    end)
  end

  it("an entry outside [0, C) is reported at the next synchronisation, with a zero gradient row", function()
    if DEV == "cpu" then return end -- the CPU refuses it before the call (its own spec checks that)
    expect_reported_row("multilabel_margin_loss",
      { { 0, -1, 9, 9, 9 }, { 1, 5, -1, 0, 0 }, { 2, -1, 0, 0, 0 }, { 3, 4, -1, 0, 0 } })
  end)

  it("in place (the gradient staged in the workspace): bitwise the out-of-place one", function()
    for _, dtype in ipairs { "f32", "f16", "bf16", "f64" } do
      local x = H.random_logits({ 9, 70 }, { device = DEV, dtype = dtype, std = 1.5 })
      local y = random_lists(9, 70, 70, 660):to(DEV)
      for _, red in ipairs { "mean", "sum" } do
        local l1, g1 = F.multilabel_margin_loss_fused(x, y, { reduction = red })
        H.check_inplace_fused("multilabel_margin_loss", x:clone(), y, { reduction = red }, l1, g1,
          "multilabel margin " .. dtype .. " " .. red)
        -- a transposed input in place: the staged gradient copied back through its strides
        local xt = H.relayout(x:clone(), "transposed")
        local l2, g2 = F.multilabel_margin_loss_fused(xt, y, { reduction = red, inplace = true })
        assert.are.equal(xt, g2)
        H.assert_equal(l2, l1)
        H.assert_equal(g2, g1)
      end
    end
  end)
end)

describe("CUDA margin losses: a NaN upstream gradient reaches only the rows with an active hinge", function()
  -- the CPU's 0 and NaN exactly, its other values within the dtype's tolerance
  local function same(got, ref, tol, what)
    local g, r = got:cpu():double():totable(), ref:double():totable()
    for i, row in ipairs(r) do
      for j, v in ipairs(row) do
        local u, where = g[i][j], string.format("%s (%d, %d): got %s, expected %s", what, i, j, g[i][j], v)
        if v ~= v then assert.is_true(u ~= u, where)
        elseif v == 0 then assert.is_true(u == 0, where)
        else assert.is_true(math.abs(u - v) <= tol * math.abs(v), where) end
      end
    end
  end
  it("multi_margin_loss and multilabel_margin_loss, an upstream gradient per row and a scalar one", function()
    for _, dtype in ipairs { "f32", "f64" } do
      local x = H.random_logits({ 40, 70 }, { dtype = "f64", std = 1.5, seed = 12 }):type(dtype)
      -- the first row's target far above the rest: no active hinge there
      local xv = x:totable()
      xv[1][4] = 50
      x = ploss.tensor(xv, { dtype = dtype })
      local y = ploss.randint(0, 70, { 40 }, { seed = 13 }):totable()
      y[1] = 3
      y = ploss.tensor(y, { dtype = "i64" })
      local lists = ploss.full({ 40, 70 }, -1, { dtype = "i64" }):totable()
      for i = 1, 40 do lists[i][1] = y:totable()[i] end
      lists = ploss.tensor(lists, { dtype = "i64" })
      local up = {}
      for i = 1, 40 do up[i] = i % 2 == 1 and 0 / 0 or 1.5 end
      up = ploss.tensor(up, { dtype = ldtype(dtype) })
      for name, t in pairs { multi_margin_loss = y, multilabel_margin_loss = lists } do
        local what = name .. " " .. dtype
        local gc = F[name .. "_backward"](x, t, up, { reduction = "none" })
        assert.are.same({ 0 }, { math.max(unpack(gc:totable()[1])) }, what .. ": the first row is inactive")
        same(F[name .. "_backward"](x:to(DEV), t:to(DEV), up:to(DEV), { reduction = "none" }), gc, TOL[dtype].grad,
          what .. " per row")
        same(F[name .. "_backward"](x:to(DEV), t:to(DEV), 0 / 0), F[name .. "_backward"](x, t, 0 / 0), TOL[dtype].grad,
          what .. " scalar")
      end
    end
  end)
end)
