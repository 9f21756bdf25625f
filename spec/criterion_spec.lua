-- Criterion spec (suite 'cpu'): what every criterion built from a loss description does the
-- same way — the saved state is never stale, options are checked when the criterion is made
-- and at each call, Lua lists take the input's precision — for every loss of
-- lua/ploss/losses/.
local H = require "spec.helpers"
local ploss = H.ploss
local D = require "ploss.description"
local F = ploss.F

local function inputs_for(d, seed, dtype)
  H.seed(seed)
  if d.shape == "boxes" then -- 3 boxes (a list option of 3 values has one per box)
    local random_boxes = require("spec.bad_input").random_boxes
    return random_boxes(3, seed, dtype), random_boxes(3, seed + 1, dtype), random_boxes(3, seed + 2, dtype)
  end
  if d.shape == "elementwise" then
    local r = d.input_range
    local x = r and ploss.rand({ 4, 3, 5 }, { dtype = dtype, seed = seed, low = r[1], high = r[2] })
      or ploss.randn({ 4, 3, 5 }, { dtype = dtype, seed = seed })
    local y = ploss.rand({ 4, 3, 5 }, { dtype = dtype, seed = seed + 1 })
    return x, y, ploss.rand({ 4, 3, 5 }, { dtype = dtype, seed = seed + 2 })
  end
  local x = ploss.randn({ 6, 5, 3 }, { dtype = dtype, seed = seed })
  if d.target == "elementwise" then -- a row loss of a label per class (multi-label): N×C
    return ploss.randn({ 6, 5 }, { dtype = dtype, seed = seed }), ploss.rand({ 6, 5 }, { dtype = dtype, seed = seed + 1 }),
      ploss.rand({ 6, 5 }, { dtype = dtype, seed = seed + 2 })
  end
  if d.target == "index_list" then -- a list of classes per row, ended by −1 (multi-label): N×C
    return ploss.randn({ 6, 5 }, { dtype = dtype, seed = seed }), ploss.randint(-1, 5, { 6, 5 }, { seed = seed + 1 }),
      ploss.randint(-1, 5, { 6, 5 }, { seed = seed + 2 })
  end
  local y1 = ploss.randint(0, 5, { 6, 3 }, { seed = seed + 1 })
  local y2 = ploss.randint(0, 5, { 6, 3 }, { seed = seed + 2 })
  return x, y1, y2
end

describe("Torch7's sizeAverage and PyTorch's size_average / reduce given to a constructor", function()
  it("are answered with the reduction they mean", function()
    H.expect_error(function() ploss.ClassNLLCriterion { sizeAverage = false } end,
      "NLLLoss: unknown option 'sizeAverage' (known: ignore_index, inplace, reduction, weight); sizeAverage is " ..
      "reduction here: reduction = 'sum' for sizeAverage = false, 'mean' for true")
    H.expect_error(function() ploss.MSELoss { size_average = true } end,
      "size_average is reduction here: reduction = 'sum' for size_average = false, 'mean' for true")
    H.expect_error(function() ploss.CrossEntropyLoss { reduce = false } end,
      "reduce is reduction here: reduction = 'none' for reduce = false")
  end)
end)

describe("Torch7's nn criteria", function()
  it("each has a ploss class under its Torch7 name (the README's claim)", function()
    for _, name in ipairs {
      "AbsCriterion", "BCECriterion", "ClassNLLCriterion", "ClassSimplexCriterion", "CosineEmbeddingCriterion",
      "CrossEntropyCriterion", "DistKLDivCriterion", "DistanceRatioCriterion", "HingeEmbeddingCriterion", "L1Cost",
      "L1HingeEmbeddingCriterion", "MarginCriterion", "MarginRankingCriterion", "MSECriterion", "MultiCriterion",
      "MultiLabelMarginCriterion", "MultiLabelSoftMarginCriterion", "MultiMarginCriterion", "ParallelCriterion",
      "SmoothL1Criterion", "SoftMarginCriterion", "SpatialAutoCropMSECriterion", "SpatialClassNLLCriterion",
      "WeightedMSECriterion",
    } do
      local cls = ploss[name]
      assert.are.equal("table", type(cls), name)
      assert.are.equal("function", type(cls.forward), name)
      assert.are.equal("function", type(cls.backward), name)
    end
  end)
end)

describe("criteria built from the descriptions", function()
  it("refuse a constructor argument past the options (Torch7's positional sizeAverage, weights)", function()
    -- ClassNLLCriterion(nil, false) was Torch7's sum: ignoring the false gave the mean
    H.expect_error(function() ploss.ClassNLLCriterion(nil, false) end,
      "NLLLoss: expected one table of named options, got a boolean as argument 2")
    H.expect_error(function() ploss.CrossEntropyLoss({ reduction = "sum" }, false) end, "got a boolean as argument 2")
    H.expect_error(function() ploss.MultiLabelMarginCriterion(nil, nil, 3) end, "got a number as argument 3")
    assert.are.equal("sum", ploss.CrossEntropyLoss({ reduction = "sum" }, nil).reduction)
    -- the hint names the class's own options, and only the translations it has
    H.expect_error(function() ploss.ClassNLLCriterion(nil, false) end,
      "(Torch7's positional arguments are not taken: {reduction = 'sum'} for sizeAverage = false, {weight = w} for " ..
      "class weights, {ignore_index = k} for ignoreIndex (0-based labels); the options: ignore_index, reduction, weight)")
    H.expect_error(function() ploss.MultiMarginCriterion(1, ploss.ones({ 3 }), 0.5) end,
      "{reduction = 'sum'} for sizeAverage = false, {weight = w} for class weights; the options: margin, p, reduction, weight)")
    H.expect_error(function() ploss.CosineEmbeddingCriterion(0.5, false) end,
      "(Torch7's positional arguments are not taken: {reduction = 'sum'} for sizeAverage = false; the options: margin, reduction)")
    -- Torch7's crit.sizeAverage = false: the field it is here named
    H.expect_error(function() ploss.MSECriterion().sizeAverage = false end,
      "'sizeAverage' is none of the fields it reads at each call (inplace, reduction, weight): Torch7's sizeAverage is " ..
      "reduction here (crit.reduction = 'sum' for sizeAverage = false, 'mean' for true)")
  end)

  it("refuse reading Torch7's crit.sizeAverage with the same help as setting it (not nil)", function()
    H.expect_error(function() return ploss.ClassNLLCriterion().sizeAverage end,
      "NLLLoss: 'sizeAverage' is none of its fields (ignore_index, inplace, reduction, weight): Torch7's sizeAverage " ..
      "is reduction here (read crit.reduction: 'mean' for sizeAverage = true, 'sum' for false)")
    H.expect_error(function() return ploss.MSELoss { reduction = "sum" }.sizeAverage end,
      "MSELoss: 'sizeAverage' is none of its fields (inplace, reduction, weight)")
    -- other fields read as before: options, methods, an unknown name is nil
    local c = ploss.NLLLoss { reduction = "sum" }
    assert.are.equal("sum", c.reduction)
    assert.are.equal("function", type(c.updateOutput))
    assert.is_nil(c.no_such_field)
  end)

  it("name swapped arguments (class indices first, scores second) before the target's shape", function()
    local scores = ploss.randn({ 2, 3 })
    local labels = ploss.tensor({ 1, 0 }, { dtype = "i64" })
    local msg = "input: expected a floating-point tensor (f32, f16, bf16 or f64: the scores), got i64[2], and the " ..
      "target is f32[2x3]: are input and target swapped? (the call is (input, target))"
    H.expect_error(function() ploss.NLLLoss {}(labels, scores) end, "NLLLoss: " .. msg)
    H.expect_error(function() ploss.NLLLoss {}:forward(labels, scores) end, "NLLLoss: " .. msg)
    H.expect_error(function() ploss.CrossEntropyLoss {}:backward(labels, scores) end, "CrossEntropyLoss: " .. msg)
    local out = ploss.empty({})
    H.expect_error(function() ploss.F.nll_loss(labels, scores, { out = out }) end, "nll_loss: " .. msg, out)
    -- the order as it should be works
    assert.is_number(ploss.NLLLoss {}:forward(scores, labels))
  end)

  it("take Torch7's :float(), :double(), :type() and :clearState()", function()
    local x = ploss.tensor({ { 1, 2, 0.5 }, { 0, -1, 3 } }, { dtype = "f64" })
    local y = ploss.tensor({ 0, 2 }, { dtype = "i64" })
    local crit = ploss.ClassNLLCriterion { weight = ploss.tensor({ 1, 2, 3 }, { dtype = "f32" }) }
    -- conversions choose a device only: the criterion computes in its input's dtype
    assert.equal(crit, crit:float())
    assert.equal(crit, crit:double())
    assert.equal(crit, crit:type("torch.DoubleTensor"))
    assert.equal(crit, crit:type("f16"))
    assert.are.equal("cpu", crit.weight:device())
    H.expect_error(function() crit:type("torch.LongStorage") end, "NLLLoss:type: unknown type name 'torch.LongStorage'")
    H.expect_error(function() crit:type() end, "NLLLoss:type: expected a type name")
    H.expect_error(function() ploss.MSECriterion:float() end, "called on the class")
    -- clearState: the buffers go, the next calls give the same values (backward recomputes)
    local l1 = crit:forward(x, y)
    local g1 = crit:backward(x, y):totable()
    assert.equal(crit, crit:clearState())
    assert.is_nil(crit.gradInput)
    assert.is_nil(rawget(crit, "_loss"))
    assert.are.same(g1, crit:backward(x, y):totable())
    assert.are.equal(l1, crit:forward(x, y))
    -- 'none''s output is the loss buffer: dropped too; a reduced output (a number) is kept
    local none = ploss.MSELoss { reduction = "none" }
    none:forward(x, x:clone())
    assert.is_nil(none:clearState().output)
    assert.are.equal(l1, crit.output)
    -- a criterion that keeps state does not keep its last forward's input and target alive
    collectgarbage()
    collectgarbage()
    local before = ploss.memory_stats("cpu").current_bytes
    local ce0 = ploss.CrossEntropyLoss {}
    do
      local logits = ploss.randn({ 64, 1000 })
      ce0:forward(logits, ploss.randint(0, 1000, { 64 }))
    end
    collectgarbage()
    collectgarbage()
    local held = ploss.memory_stats("cpu").current_bytes - before
    assert.is_true(held < 64 * 1000 * 4, held) -- its loss and state (64 values), not the 64×1000 logits
    -- a composite clears its members too
    local ce = ploss.CrossEntropyCriterion()
    local m = ploss.MultiCriterion():add(ce, 0.5)
    local _, gm = m(x, y)
    assert.is_true(ploss.is_tensor(ce.gradInput))
    assert.equal(m, m:clearState():float())
    assert.is_nil(ce.gradInput)
    assert.is_nil(m.gradInput)
    local _, gm2 = m(x, y)
    assert.are.same(gm:totable(), gm2:totable())
    -- clone: the same class, options and values, nothing shared
    local c2 = crit:clone()
    assert.are.equal(getmetatable(crit), getmetatable(c2))
    assert.are_not.equal(crit.weight, c2.weight)
    assert.are.same(crit.weight:totable(), c2.weight:totable())
    assert.are.equal(crit:forward(x, y), c2:forward(x, y))
    c2.weight:fill(1)
    assert.are.same({ 1, 2, 3 }, crit.weight:totable())
    local m2 = m:clone()
    assert.are.equal(tostring(m), tostring(m2))
    local l2, g2 = m2(x, y)
    assert.are.equal(select(1, m(x, y)), l2)
    assert.are_not.equal(ce, m2._members[1])
    assert.are.same(gm2:totable(), g2:totable())
    assert.is_true(ploss.ParallelCriterion(true):add(ploss.MSECriterion()):clone().repeatTarget)
  end)

  it("answer to their other names (Torch7's) as the same class", function()
    local n = 0
    for _, d in ipairs(D.all()) do
      for _, alias in ipairs(d.criterion_aliases) do
        assert.are.equal(ploss[d.criterion], ploss[alias], alias)
        n = n + 1
      end
    end
    assert.is_true(ploss.CrossEntropyCriterion == ploss.CrossEntropyLoss and ploss.SpatialClassNLLCriterion == ploss.NLLLoss)
    assert.is_true(n >= 16, "aliases: " .. n)
  end)

  -- losses of several embedding inputs have their own call convention: spec/pairs_spec.lua
  for _, d in ipairs(H.one_input_losses()) do
    local cls = ploss[d.criterion]

    describe(d.criterion, function()
      it("backward never reuses a stale state: another target, written input, edited options", function()
        local x, y1, y2 = inputs_for(d, 11, "f64")
        local opts = H.loss_options(d, 5)
        local crit = cls(opts)
        -- another target than forward's
        crit:forward(x, y1)
        H.assert_close(crit:backward(x, y2), F[d.name .. "_backward"](x, y2, 1, opts), { rtol = 1e-12, atol = 1e-14 })
        -- the input written in place after forward
        crit:forward(x, y1)
        x:copy(d.shape == "boxes" and inputs_for(d, 99, "f64") or ploss.randn(x:size(), { dtype = "f64", seed = 99 }))
        H.assert_close(crit:backward(x, y1), F[d.name .. "_backward"](x, y1, 1, opts), { rtol = 1e-12, atol = 1e-14 })
        -- the target written in place after forward
        crit:forward(x, y1)
        y1:copy(y2)
        H.assert_close(crit:backward(x, y1), F[d.name .. "_backward"](x, y2, 1, opts), { rtol = 1e-12, atol = 1e-14 })
        -- options edited after forward
        crit:forward(x, y1)
        crit.reduction = "sum"
        local o2 = {}
        for k, v in pairs(opts) do o2[k] = v end
        o2.reduction = "sum"
        H.assert_close(crit:backward(x, y1), F[d.name .. "_backward"](x, y1, 1, o2), { rtol = 1e-12, atol = 1e-14 })
        -- and the same call right after forward still matches the recomputed gradient
        crit.reduction = "mean"
        crit:forward(x, y1)
        H.assert_close(crit:backward(x, y1), F[d.name .. "_backward"](x, y1, 1, opts), { rtol = 1e-12, atol = 1e-14 })
      end)

      if d.state then
        it("backward from the saved state equals the fused pass in f32 (confident samples, logits N(50, 10²))", function()
          local opts = H.loss_options(d, 5)
          local x = ploss.randn({ 64, 5 }, { dtype = "f32", seed = 31 })
          x = ploss.tensor(x:flat(), { dtype = "f32" }):view({ 64, 5 })
          local xv = x:totable()
          for i = 1, 64 do
            for j = 1, 5 do xv[i][j] = 50 + 10 * xv[i][j] end
          end
          -- rows 1 and 2: the confident sample of a two-class row made wider (8.36 / -5.33)
          xv[1] = { 8.36, -5.33, -6, -7, -8 }
          xv[2] = { 30, 0, 0, 0, 0 }
          x = ploss.tensor(xv, { dtype = "f32" })
          local y = ploss.zeros({ 64 }, { dtype = "i64" })
          for _, eps in ipairs(d.name == "cross_entropy" and { 0, 0.1 } or { false }) do
            local o = {}
            for k, v in pairs(opts) do o[k] = v end
            if eps then o.label_smoothing = eps end
            local crit = cls(o)
            local _, gf = crit(x, y)
            gf = gf:clone()
            crit:forward(x, y)
            -- the fused pass takes lse − m from its sums, the state path from lse rounded to
            -- m's spacing: row 2's lse − m = 4e-13 is kept there to 1 %, so row 2 is left
            -- out; the dual focal loss's 1/(ε + 1 − p²) magnifies the rounding to 5e-6 in
            -- other confident rows (the fused values are the f64 ones)
            local gb, rt = crit:backward(x, y), d.name == "dual_focal" and 1e-5 or 1e-6
            H.assert_close(gb:narrow(1, 1, 1), gf:narrow(1, 1, 1), { rtol = rt, atol = 0 })
            H.assert_close(gb:narrow(1, 3, 62), gf:narrow(1, 3, 62), { rtol = rt, atol = 0 })
          end
        end)
      end

      it("refuses a misspelt option set as a field after construction; takes a known one", function()
        local crit = cls(H.loss_options(d, 5))
        H.expect_error(function() crit.reducton = "sum" end, d.criterion .. ": 'reducton' is none of the fields")
        assert.is_nil(rawget(crit, "reducton"))
        crit.reduction = "sum"
        assert.are.equal("sum", crit.reduction)
        -- Torch7's output and a private field are the instance's own
        crit.output, crit._mine = 1, 2
        assert.are.equal(1, rawget(crit, "output"))
        assert.are.equal(2, rawget(crit, "_mine"))
      end)

      it("checks a value set as a field before the field takes it; a refused one changes nothing", function()
        local crit = cls(H.loss_options(d, 5))
        H.expect_error(function() crit.reduction = "avg" end, d.criterion .. ": crit.reduction: 'avg' is not one of")
        assert.are.equal("mean", crit.reduction)
        for _, opt in ipairs(d.lua_options) do
          local before = crit[opt.name]
          local bad = (opt.type == "bool" or opt.type == "comm") and 1 or "x"
          H.expect_error(function() crit[opt.name] = bad end, d.criterion .. ": crit." .. opt.name .. ": ")
          assert.are.equal(before, crit[opt.name], opt.name)
          crit[opt.name] = before -- the value it had is taken again
          if opt.type ~= "double" and opt.type ~= "enum" and opt.type ~= "bool" and opt.type ~= "comm" then
            H.expect_error(function() crit[opt.name] = 0.5 end, "crit." .. opt.name .. ": expected ")
          end
        end
        for _, t in ipairs(d.tensors) do
          if not t.argument then
            H.expect_error(function() crit[t.name] = true end,
              "crit." .. t.name .. ": expected a tensor or a list of numbers, got true")
          end
        end
        crit.reduction = nil -- back to the default: taken
        assert.is_nil(crit.reduction)
      end)

      it("refuses positional options, unknown keys and non-boolean booleans, naming the key", function()
        local opts = H.loss_options(d, 5)
        H.expect_error(function() cls { 0.1 } end, "options are named")
        local bad = {}
        for k, v in pairs(opts) do bad[k] = v end
        bad.label_smoothin = 0.1
        H.expect_error(function() cls(bad) end, "unknown option 'label_smoothin'")
        for _, v in ipairs { 0, "false", 1 } do
          local o = {}
          for k, w in pairs(opts) do o[k] = w end
          o.inplace = v
          H.expect_error(function() cls(o) end, "inplace: expected a boolean")
        end
      end)

      it("checks every option's range when made, reporting the value as given", function()
        for _, opt in ipairs(d.lua_options) do
          local o = H.loss_options(d, 5)
          if opt.type == "int64" or opt.type == "int" then
            -- not an integer: told the option's range (or just "an integer"); an integer past
            -- the type's limit: told the limit
            local prefix = opt.name .. ": expected "
            o[opt.name] = 1 / 0
            H.expect_error(function() cls(o) end, prefix .. (D.range_text(opt) or "an integer") .. ", got inf")
            o[opt.name] = 2 ^ 63
            H.expect_error(function() cls(o) end,
              prefix .. (opt.type == "int" and "an integer in 32 bits" or "an integer in 64 bits") .. ", got ")
            if opt.type == "int" then
              o[opt.name] = 2 ^ 32 + 2
              H.expect_error(function() cls(o) end, prefix .. "an integer in 32 bits, got 4294967298")
            end
          elseif opt.type == "double" and D.range_text(opt) then
            o[opt.name] = 0 / 0
            H.expect_error(function() cls(o) end, "opts." .. opt.name .. ": nan is not " .. D.range_text(opt))
          elseif opt.type == "enum" then
            o[opt.name] = "nonsense"
            H.expect_error(function() cls(o) end, opt.name .. ": 'nonsense' is not one of")
          end
        end
      end)

      if #d.tensors > 0 and d.tensors[1].kind ~= "class_ids" then -- (a list of ids: region_spec)
        it("a list option takes f64 for f64 inputs: the same result as an f64 tensor", function()
          local x, y = inputs_for(d, 21, "f64")
          local t = d.tensors[1]
          local n = t.kind == "class_vector" and 5 or 3
          local list = {}
          for j = 1, n do list[j] = 0.1 + j / 7 end -- not exact in f32
          local o1, o2 = H.loss_options(d, 5), H.loss_options(d, 5)
          o1[t.name] = list
          o2[t.name] = ploss.tensor(list, { dtype = "f64" })
          if t.kind == "broadcast" then
            -- a per-class vector of the input's axis 1 (size 3 here), as the docs describe
            x = d.input_range and ploss.rand({ 4, 3 }, { dtype = "f64", seed = 5 })
              or ploss.randn({ 4, 3 }, { dtype = "f64", seed = 5 })
            y = ploss.rand({ 4, 3 }, { dtype = "f64", seed = 6 })
          end
          local l1, g1 = F[d.name .. "_fused"](x, y, o1)
          local l2, g2 = F[d.name .. "_fused"](x, y, o2)
          assert.are.equal(l2, l1)
          H.assert_equal(g1, g2)
          -- a criterion sees a list edited in place (its cached tensor is not stale)
          local crit = cls(o1)
          crit:forward(x, y)
          list[1] = 2.5
          o2[t.name] = ploss.tensor(list, { dtype = "f64" })
          assert.are.equal(F[d.name](x, y, o2), crit:forward(x, y))
        end)
      end
    end)
  end
end)

describe("criteria of several inputs", function()
  it("refuse a misspelt option or gradient buffer set as a field", function()
    local lce = ploss.LinearCrossEntropyLoss {}
    H.expect_error(function() lce.acumulate = true end, "LinearCrossEntropyLoss: 'acumulate' is none of the fields")
    H.expect_error(function() lce.grad_weigth = ploss.zeros({ 2, 2 }) end, "'grad_weigth' is none of the fields")
    local gw = ploss.zeros({ 2, 2 })
    lce.grad_weight = gw -- absent until now
    assert.are.equal(gw, lce.grad_weight)
    H.expect_error(function() lce.grad_weight = 3 end, "LinearCrossEntropyLoss: crit.grad_weight: expected a ploss tensor, got 3")
    assert.are.equal(gw, lce.grad_weight)
    local pfc = ploss.PartialFCLoss {}
    H.expect_error(function() pfc.sample_rat = 0.5 end, "PartialFCLoss: 'sample_rat' is none of the fields")
    pfc.sample_rate = 0.5
    assert.are.equal(0.5, pfc.sample_rate)
    H.expect_error(function() ploss.BatchHardTripletLoss {}.distanse = "cosine" end, "'distanse' is none of the fields")
  end)

  it("leave a subclass its own fields, the parent's options checked as before", function()
    local Scaled = ploss.nn.class("ScaledCE", ploss.CrossEntropyLoss)
    Scaled._fields.factor = true
    function Scaled:__init(opts)
      local o = {}
      for k, v in pairs(opts) do if k ~= "factor" then o[k] = v end end
      ploss.CrossEntropyLoss.__init(self, o)
      self.factor = opts.factor or 1
    end
    local c = Scaled { factor = 2, reduction = "sum" }
    assert.are.equal(2, c.factor)
    H.expect_error(function() c.facter = 3 end, "ScaledCE: 'facter' is none of the fields")
    -- the parent's own set is untouched: an unknown option is still refused there
    assert.is_nil(ploss.CrossEntropyLoss._fields.factor)
    H.expect_error(function() ploss.CrossEntropyLoss { factor = 2 } end, "unknown option 'factor'")
  end)

  it("name the function when gradOutput is an options table", function()
    local x, y = ploss.randn({ 2, 3 }, { seed = 1 }), ploss.tensor({ 0, 1 }, { dtype = "i64" })
    H.expect_error(function() F.cross_entropy_backward(x, y, { reduction = "sum" }) end,
      "cross_entropy_backward: gradOutput: expected a number or a tensor, got table (the options come after gradOutput")
    H.expect_error(function() F.linear_cross_entropy_backward(x, ploss.randn({ 4, 3 }), y, { z_loss = 1 }) end,
      "linear_cross_entropy_backward: gradOutput: expected a number or a tensor, got table")
    H.expect_error(function() ploss.CrossEntropyLoss {}:backward(x, y, "1") end,
      "CrossEntropyLoss:backward: gradOutput: expected a number or a tensor, got string")
    H.expect_error(function() ploss.CrossEntropyLoss {}:backward(x, y, { reduction = "sum" }) end,
      "gradOutput: expected a number or a tensor, got table (a criterion's options are its fields")
  end)

  it("refuse a number as the upstream gradient of a 'none' loss, naming it (not as a 0-d tensor)", function()
    local x, y = ploss.randn({ 2, 3, 2 }, { seed = 2 }), ploss.tensor({ { 0, 1 }, { 2, 0 } }, { dtype = "i64" })
    local msg = "gradOutput: a number is the upstream gradient of a reduced loss; reduction 'none' takes a tensor"
    H.expect_error(function() ploss.CrossEntropyLoss { reduction = "none" }:backward(x, y, 2) end,
      "CrossEntropyLoss:backward: " .. msg)
    H.expect_error(function() F.cross_entropy_backward(x, y, 2, { reduction = "none" }) end,
      "cross_entropy_backward: " .. msg)
    -- a 0-d 'none' loss (one pair of vectors, PyTorch's unbatched form) takes a number
    local one = ploss.CosineEmbeddingLoss { reduction = "none" }
    local a, b, s = ploss.tensor({ 1, 2 }, { dtype = "f64" }), ploss.tensor({ 2, 1 }, { dtype = "f64" }), ploss.tensor(1)
    local ga = one:backward(a, b, s):flat()
    H.assert_close(one:backward(a, b, s, 2), { 2 * ga[1], 2 * ga[2] }, { rtol = 1e-15 })
    -- ∂(1 − cos)/∂a = −(b/(|a||b|) − cos·a/|a|²), cos = 4/5: (−0.24, 0.12)
    H.assert_close(ga, { -0.24, 0.12 }, { rtol = 1e-12 })
  end)

  it("name the input, not grad_input, when the in-place gradient cannot be written there", function()
    local xe = ploss.randn({ 1, 3, 2 }, { seed = 3 }):expand(2, 3, 2)
    local y = ploss.tensor({ { 0, 1 }, { 2, 0 } }, { dtype = "i64" })
    local where = "input (written with its gradient: inplace = true): "
    H.expect_error(function() ploss.CrossEntropyLoss { inplace = true }(xe, y) end,
      { "cross_entropy_fused: " .. where .. "strides make distinct elements share memory", "PLOSS_ERR_LAYOUT" })
    H.expect_error(function() F.cross_entropy_fused(xe, y, { inplace = true }) end, "cross_entropy_fused: " .. where)
    local p = ploss.rand({ 4, 3 }, { seed = 4 })
    H.expect_error(function() ploss.BCEWithLogitsLoss { inplace = true }(p, p) end,
      { where .. "overlaps the memory of target", "PLOSS_ERR_ALIAS" })
  end)
end)

describe("calls on a criterion", function()
  it("refuse a method called with a dot instead of a colon, naming the method", function()
    local x, y = ploss.randn({ 2, 3 }, { seed = 1 }), ploss.tensor({ 0, 1 }, { dtype = "i64" })
    local ce = ploss.CrossEntropyLoss {}
    for _, m in ipairs { "forward", "backward", "fused", "forward_tensor" } do
      H.expect_error(function() ce[m](x, y) end,
        "CrossEntropyLoss." .. m .. ": called without its object (got a ploss tensor first): write crit:" .. m)
    end
    local h, w = ploss.randn({ 2, 4 }, { seed = 2 }), ploss.randn({ 3, 4 }, { seed = 3 })
    H.expect_error(function() ploss.LinearCrossEntropyLoss {}.fused(h, w, y) end,
      "LinearCrossEntropyLoss.fused: called without its object")
    H.expect_error(function() ploss.PartialFCLoss {}.forward(h, w, y) end, "PartialFCLoss.forward: called without")
    H.expect_error(function() ce.forward(nil, x, y) end, "(got nil first)")
    H.expect_error(function() ce.updateOutput(x, y) end, "CrossEntropyLoss.updateOutput: called without its object")
    -- Torch7's list form first ({x1, x2}): a plain table is no object either
    local a, b = ploss.randn({ 2, 3 }, { seed = 5 }), ploss.randn({ 2, 3 }, { seed = 6 })
    H.expect_error(function() local l = ploss.CosineEmbeddingCriterion().forward({ a, b }, 1) return l end,
      "CosineEmbeddingLoss.forward: called without its object (got a plain table first): write crit:forward(...)")
    H.expect_error(function() local l = ploss.MSECriterion().backward({ a }, b) return l end,
      "MSELoss.backward: called without its object (got a plain table first)")
    H.expect_error(function() local l = ploss.ParallelCriterion():add(ploss.MSECriterion()).forward({ a }, { b }) return l end,
      "ParallelCriterion.forward: called without its object (got a plain table first)")
    H.expect_error(function() local g = ploss.MSECriterion().updateGradInput(a, b) return g end,
      "MSELoss.updateGradInput: called without its object")
    -- on the class itself (the instance's braces forgotten), naming the class called
    for _, m in ipairs { "forward", "backward", "fused", "forward_tensor", "updateOutput" } do
      H.expect_error(function() local l = ploss.CrossEntropyLoss[m](ploss.CrossEntropyLoss, x, y) return l end,
        "CrossEntropyLoss." .. m .. ": called on the class, not on an instance: make one first " ..
        "(local crit = ploss.CrossEntropyLoss(...)) and call crit:" .. m .. "(...)")
    end
    H.expect_error(function() local g = ploss.MSECriterion:updateGradInput(x, x) return g end, "MSELoss.updateGradInput: called on the class")
    H.expect_error(function() local l = ploss.ParallelCriterion:forward({ x }, { y }) return l end,
      "ParallelCriterion.forward: called on the class")
    H.expect_error(function() local g = ploss.TripletMarginWithDistanceLoss:backward(x, x, x) return g end,
      "TripletMarginWithDistanceLoss.backward: called on the class")
    -- the constructor named where it lives; a user's subclass by its name
    H.expect_error(function() local g = ploss.nn.Linear:forward(x) return g end,
      "Linear.forward: called on the class, not on an instance: make one first (local layer = ploss.nn.Linear(...))")
    H.expect_error(function() local g = ploss.optim.SGD:step() return g end,
      "SGD.step: called on the class, not on an instance: make one first (local optim = ploss.optim.SGD(...))")
    -- (a module's output would otherwise be stored on its class, shared by every instance)
    H.expect_error(function() local o = ploss.TaylorSoftmax:forward(x) return o end,
      "TaylorSoftmax.forward: called on the class, not on an instance: make one first (local layer = ploss.TaylorSoftmax(...))")
    assert.is_nil(rawget(ploss.TaylorSoftmax, "output"))
    local MyCE = ploss.nn.class("MyCE", ploss.CrossEntropyLoss)
    H.expect_error(function() local l = MyCE:forward(x, y) return l end, "(local crit = MyCE(...))")
    -- an instance holding an __index field of its own is an instance
    local proto = ploss.CrossEntropyLoss {}
    proto.__index = proto
    assert.are.equal(ce:forward(x, y), proto:forward(x, y))
    -- a subclass's instance, an object delegating to the class and a function stored on a
    -- class (called with a dot on purpose) are taken as they are
    local Sub = ploss.nn.class("SubCE", ploss.CrossEntropyLoss)
    local s = Sub {}
    assert.are.equal(ce:forward(x, y), ploss.CrossEntropyLoss.forward(s, x, y))
    local m = setmetatable({}, { __index = ploss.CrossEntropyLoss })
    ploss.CrossEntropyLoss.__init(m, { reduction = "sum", label_smoothing = 0.25 }) -- options read at each call
    assert.are.equal(ploss.CrossEntropyLoss { reduction = "sum", label_smoothing = 0.25 }:forward(x, y), m:forward(x, y))
    assert.are_not.equal(ce:forward(x, y), m:forward(x, y))
    function Sub.new(o) return Sub(o) end
    assert.are.equal(ce:forward(x, y), Sub.new({}):forward(x, y))
  end)

  it("give a gradient in the input's layout where it is dense (channels-last, transposed), else contiguous", function()
    local x = ploss.randn({ 2, 3, 4, 5 }, { dtype = "f64", seed = 3 })
    local cl = x:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) -- channels-last
    local y = ploss.randint(0, 3, { 2, 4, 5 }, { seed = 4 })
    local _, g_ref = ploss.CrossEntropyLoss {}(x, y)
    local crit = ploss.CrossEntropyLoss {}
    local _, g = crit(cl, y)
    assert.are.same(cl:stride(), g:stride())
    H.assert_close(g, g_ref, { rtol = 1e-14 }) -- (the backend's class passes run in another order)
    assert.are.same(cl:stride(), crit:backward(cl, y):stride())
    assert.are.same(cl:stride(), F.cross_entropy_backward(cl, y):stride())
    local _, gf = F.cross_entropy_fused(cl, y)
    assert.are.same(cl:stride(), gf:stride())
    -- the criterion's buffer follows the input's layout from call to call
    local _, g2 = crit(x, y)
    assert.are.same(x:stride(), g2:stride())
    -- a slice (gaps between its elements) gets a contiguous gradient
    local crop = x:narrow(2, 1, 2)
    local _, gc = ploss.CrossEntropyLoss {}(crop, ploss.randint(0, 2, { 2, 4, 5 }, { seed = 5 }))
    assert.is_true(gc:is_contiguous())
    -- which layouts are dense; empty_like's layout option
    assert.is_true(cl:is_dense() and x:transpose(2, 4):is_dense() and x:is_dense())
    assert.is_false(x:narrow(4, 2, 3):is_dense() or ploss.randn({ 1, 3 }):expand(4, 3):is_dense())
    assert.are.same(cl:stride(), ploss.empty_like(cl, { layout = "preserve" }):stride())
    assert.is_true(ploss.empty_like(cl):is_contiguous() and ploss.empty_like(crop, { layout = "preserve" }):is_contiguous())
    H.expect_error(function() ploss.empty_like(cl, { layout = "channels_last" }) end,
      "empty_like: opts.layout: expected 'contiguous' or 'preserve', got channels_last")
    -- a MultiCriterion's gradient too
    local mc = ploss.MultiCriterion():add(ploss.CrossEntropyLoss {}, 1):add(ploss.CrossEntropyLoss { label_smoothing = 0.1 }, 0.5)
    local _, gm = mc(cl, y)
    assert.are.same(cl:stride(), gm:stride())
    -- a loss of several inputs: each gradient in its input's layout
    local a = ploss.randn({ 6, 4 }, { dtype = "f64", seed = 6 })
    local bt = ploss.randn({ 4, 6 }, { dtype = "f64", seed = 7 }):transpose(1, 2)
    local ga, gb = ploss.CosineEmbeddingLoss {}:backward(a, bt, ploss.tensor({ 1, -1, 1, -1, 1, 1 }, { dtype = "f64" }))
    assert.is_true(ga:is_contiguous())
    assert.are.same(bt:stride(), gb:stride())
  end)

  it("keep gradInput and output as they were when a call is refused", function()
    local x, y = ploss.randn({ 4, 5 }, { dtype = "f64", seed = 8 }), ploss.tensor({ 0, 1, 2, 3 }, { dtype = "i64" })
    local ce = ploss.CrossEntropyLoss {}
    local g = ce:backward(x, y)
    local before = g:clone()
    local x2 = ploss.randn({ 6, 5 }, { dtype = "f64", seed = 9 }) -- another shape: a new buffer would be taken
    H.expect_error(function() ce:backward(x2, y) end, { "target", "PLOSS_ERR_SHAPE" })
    assert.are.equal(g, ce.gradInput)
    H.expect_error(function() ce:fused(x2:float(), y) end, { "target", "PLOSS_ERR_SHAPE" })
    assert.are.equal(g, ce.gradInput)
    H.assert_equal(ce.gradInput, before)
    -- a layer: the Taylor softmax's output and gradInput
    local ts = ploss.TaylorSoftmax { n = 2 }
    local out = ts:forward(x)
    local gi = ts:backward(x, ploss.ones({ 4, 5 }, { dtype = "f64" }))
    H.expect_error(function() ts:backward(x2, ploss.ones({ 4, 5 }, { dtype = "f64" })) end, "PLOSS_ERR_SHAPE")
    assert.are.equal(gi, ts.gradInput)
    -- a forward refused after its buffer would have been taken (dim 3 of a 2-d input)
    local ts3 = ploss.TaylorSoftmax { n = 2, dim = 3 }
    ts3.output = out
    H.expect_error(function() ts3:forward(x2) end, "dim")
    assert.are.equal(out, ts3.output)
    -- options that are not a table are refused by the tensor constructors too
    H.expect_error(function() local t = ploss.tensor({ 1, 2 }, "f64") return t end,
      "tensor: opts: expected an options table, got 'f64'")
    H.expect_error(function() local t = ploss.empty_like(x, false) return t end,
      "empty_like: opts: expected an options table, got false")
  end)

  it("translate Torch7's names (weights, ignoreIndex, learningRate, nn.X(true)) and fail :cuda() without a GPU", function()
    local c = ploss.ClassNLLCriterion {}
    H.expect_error(function() c.weights = ploss.ones({ 3 }) end, ": Torch7's weights is weight here")
    H.expect_error(function() c.ignoreIndex = 3 end, ": did you mean ignore_index?")
    H.expect_error(function() local r = ploss.ClassNLLCriterion { weights = { 1, 2 } } return r end, "; Torch7's weights is weight here")
    H.expect_error(function() local r = ploss.nn.Mish(true) return r end,
      "Mish: opts: expected a table, got boolean (Torch7's positional in-place flag is {inplace = true} here)")
    local model = ploss.nn.Sequential { ploss.nn.Linear(3, 2) }
    local params, grads = model:parameters()
    H.expect_error(function() local r = ploss.optim.SGD(params, grads, { learningRate = 0.1 }) return r end,
      "; Torch7's learningRate is lr here")
    -- EMA takes the parameters alone: model:parameters()'s second list is not its options
    H.expect_error(function() local r = ploss.optim.EMA(model:parameters()) return r end,
      "EMA: takes the parameters alone, EMA(params [, opts]), and got a list of tensors as opts")
    if not ploss.cuda_available() then -- the device is checked by :cuda() itself, tensors or not
      H.expect_error(function() local r = ploss.CrossEntropyCriterion {}:cuda() return r end, "cuda")
      H.expect_error(function() local r = ploss.MultiCriterion():add(ploss.MSECriterion {}):cuda() return r end, "cuda")
    end
  end)

  it("refuse an ignore_index that i32 labels can never equal (it would ignore nothing)", function()
    -- nor INT64_MIN, which stands for "no ignore_index" inside the engines
    local reserved = "opts.ignore_index: -9223372036854775808 (INT64_MIN) is reserved: the engines take it for no ignore_index"
    local y = ploss.tensor({ -2 ^ 63, 1 }, { dtype = "i64" })
    H.expect_error(function() ploss.F.nll_loss(ploss.randn({ 2, 3 }), y, { ignore_index = -2 ^ 63 }) end, reserved)
    H.expect_error(function() ploss.CrossEntropyLoss { ignore_index = -2 ^ 63 }:forward(ploss.randn({ 2, 3 }), y) end,
      reserved)
    H.expect_error(function()
      ploss.ArcFaceLoss { ignore_index = -2 ^ 63 }:forward(ploss.randn({ 2, 3 }), ploss.randn({ 4, 3 }), y)
    end, reserved)
    local msg = "opts.ignore_index: 1099511627776 is outside the range of the i32 "
    H.expect_error(function()
      ploss.CrossEntropyLoss { ignore_index = 2 ^ 40 }:forward(ploss.randn({ 2, 3 }), ploss.zeros({ 2 }, { dtype = "i32" }))
    end, msg .. "target")
    H.expect_error(function()
      ploss.LovaszSoftmaxLoss { ignore_index = 2 ^ 40 }:forward(ploss.randn({ 1, 3, 2, 2 }),
        ploss.zeros({ 1, 2, 2 }, { dtype = "i32" }))
    end, msg .. "target")
    H.expect_error(function()
      ploss.ArcFaceLoss { ignore_index = 2 ^ 40 }:forward(ploss.randn({ 2, 3 }), ploss.randn({ 4, 3 }),
        ploss.zeros({ 2 }, { dtype = "i32" }))
    end, msg .. "labels")
    -- with no pixel too (the check comes before the closed-form result)
    H.expect_error(function()
      ploss.LovaszSoftmaxLoss { ignore_index = 2 ^ 40 }:forward(ploss.randn({ 0, 3, 2, 2 }),
        ploss.zeros({ 0, 2, 2 }, { dtype = "i32" }))
    end, msg .. "target")
    -- i64 labels can: taken
    local l = ploss.CrossEntropyLoss { ignore_index = 2 ^ 40 }:forward(ploss.zeros({ 2, 3 }), ploss.zeros({ 2 }, { dtype = "i64" }))
    assert(math.abs(l - math.log(3)) < 1e-6, tostring(l))
  end)

  it("refuse an argument past those a method takes, rather than ignore it", function()
    local x, y = ploss.randn({ 2, 3 }, { seed = 1 }), ploss.tensor({ 0, 1 }, { dtype = "i64" })
    local ce = ploss.CrossEntropyLoss {}
    H.expect_error(function() ce:forward(x, y, 2) end, "CrossEntropyLoss:forward: takes 2 arguments")
    H.expect_error(function() ce:backward(x, y, 1, ploss.ones({ 3 })) end,
      "CrossEntropyLoss:backward: takes 3 arguments (input, target, gradOutput), got a tensor as argument 4")
    H.expect_error(function() ce(x, y, 1, "junk") end, "takes 3 arguments (input, target, scale), got a string")
    -- the fused call's scale is an argument, not an option: named so, and finite
    H.expect_error(function() ce(x, y, 0 / 0) end,
      "CrossEntropyLoss: scale: NaN is not a finite number (the fused call's multiplier of the gradient)")
    H.expect_error(function() ce(x, y, -math.huge) end, "CrossEntropyLoss: scale: -inf is not a finite number")
    local a = ploss.randn({ 2, 3 }, { seed = 2 })
    local tl = ploss.TripletMarginLoss {}
    H.expect_error(function() tl(a, a, a, 1, 2) end, "TripletMarginLoss: takes 4 arguments")
    H.expect_error(function() tl:backward(a, a, a, nil, 5) end, "TripletMarginLoss:backward: takes 4 arguments")
    -- the functions likewise (an extra argument past opts was ignored)
    H.expect_error(function() F.cross_entropy(x, y, {}, true) end,
      "cross_entropy: takes 3 arguments (input, target, opts), got a boolean as argument 4")
    H.expect_error(function() F.cross_entropy_backward(x, y, 1, {}, 2) end,
      "cross_entropy_backward: takes 4 arguments (input, target, gradOutput, opts), got a number as argument 5")
    H.expect_error(function() F.cross_entropy_fused(x, y, nil, {}) end,
      "cross_entropy_fused: takes 3 arguments (input, target, opts), got a table as argument 4")
    -- trailing nils are no arguments
    assert.are.equal(ce:forward(x, y), ce:forward(x, y, nil))
    assert.are.equal(F.cross_entropy(x, y), F.cross_entropy(x, y, nil, nil))
  end)

  it("say what to pass for a Torch7 port's number, Lua list, 1-based list, box shape or type name", function()
    local x1 = ploss.tensor({ 0.1, 0.2, 0.4 }, { dtype = "f64" })
    H.expect_error(function() ploss.ClassNLLCriterion():forward(x1, 2) end,
      "target: expected a ploss tensor, got number (one sample's class: ploss.tensor(k, {dtype = 'i64'}), 0-based")
    H.expect_error(function() ploss.MSECriterion():forward(x1, { 1, 2, 3 }) end,
      "target: expected a ploss tensor, got table (a Lua list: ploss.tensor(list, {dtype = ...})")
    -- a number where the loss takes no class index: no class wording
    H.expect_error(function() ploss.MSECriterion():forward(x1, 0) end,
      "target: expected a ploss tensor, got number (a value: ploss.tensor(v), of the dtype and shape the loss takes)")
    H.expect_error(function() ploss.MSECriterion():forward(3, x1) end,
      "input: expected a ploss tensor, got number (a value: ploss.tensor(v)")
    -- Torch7's positional sizeAverage: true is the default
    H.expect_error(function() local c = ploss.MSECriterion(true) return c end,
      "sizeAverage = true is the default, {reduction = 'mean'}")
    H.expect_error(function()
      ploss.MultiLabelMarginCriterion():forward(x1:view(1, 3), ploss.tensor({ { 3, 1, 0 } }, { dtype = "i64" }))
    end, "(Torch7's 1-based lists ended by 0: target - 1, in Lua target:add_(-1), ends them at -1)")
    local function giou(a, b) return ploss.GIoULoss {}(a, b) end
    H.expect_error(function() giou(ploss.zeros({ 4 }, { dtype = "f64" }), ploss.zeros({ 4 }, { dtype = "f64" })) end,
      "input: expected N×4 boxes (shape [N, 4]; one box: :view(1, 4)), got f64[4]")
    H.expect_error(function() giou(ploss.zeros({ 2, 3, 4 }, { dtype = "f64" }), ploss.zeros({ 6, 4 }, { dtype = "f64" })) end,
      "batches of boxes: :view(-1, 4))")
    H.expect_error(function() giou(ploss.zeros({ 5, 6 }, { dtype = "f64" }), ploss.zeros({ 5, 4 }, { dtype = "f64" })) end,
      "the first four columns: :narrow(2, 1, 4))")
    H.expect_error(function() ploss.ClassNLLCriterion { ignoreIndex = 0 } end,
      "unknown option 'ignoreIndex' (known: ignore_index, inplace, reduction, weight); did you mean ignore_index?")
    local crit = ploss.ClassNLLCriterion()
    assert.are.equal(crit, crit:type("double"))
    assert.are.equal(crit, crit:type("float"))
  end)

  it("refuse Torch7's positional constructor arguments (sizeAverage, weights) rather than read them", function()
    for _, c in ipairs { "MSECriterion", "AbsCriterion", "BCECriterion", "MultiLabelSoftMarginCriterion", "MSELoss",
      "TripletMarginLoss", "PartialFCLoss" } do
      H.expect_error(function() local crit = ploss[c](false) return crit end, "expected a table of named options, got boolean")
    end
    H.expect_error(function() local crit = ploss.MSECriterion(false) return crit end,
      "{reduction = 'sum'} for sizeAverage = false")
    -- a positional number (a margin, p) or weight tensor: the hint names the options
    H.expect_error(function() local crit = ploss.MarginRankingCriterion(0.5) return crit end,
      "MarginRankingLoss: expected a table of named options, got number (positional options are not taken: " ..
      "{margin = 0.5})")
    H.expect_error(function() local crit = ploss.MultiMarginCriterion(2) return crit end,
      "(positional options are not taken: name the option: margin, p, reduction, weight)")
    -- a single option that is not a number is named, not given the number
    H.expect_error(function() local crit = ploss.KLDivLoss(0.5) return crit end,
      "(positional options are not taken: name the option: log_target, reduction)")
    H.expect_error(function() local crit = ploss.MSECriterion(2) return crit end,
      "(positional options are not taken: name the option: reduction, weight)")
    H.expect_error(function() local crit = ploss.CrossEntropyCriterion(ploss.ones({ 3 })) return crit end,
      "CrossEntropyLoss: expected a table of named options, got a tensor (positional weights are not taken: " ..
      "{weight = w})")
    H.expect_error(function() local crit = ploss.MultiLabelSoftMarginCriterion(ploss.ones({ 3 })) return crit end,
      "expected a table of named options, got a tensor")
    H.expect_error(function() local l = F.mse_loss(ploss.zeros({ 2 }), ploss.zeros({ 2 }), false) return l end,
      "mse_loss: expected a table of named options, got boolean")
    H.expect_error(function() local t = ploss.zeros({ 2 }, false) return t end,
      "shape: expected sizes (numbers) then an options table, got boolean")
  end)

  it("given its own gradient back as an input, write the results to a new buffer and leave it as it is", function()
    local x, y = ploss.randn({ 4, 5 }, { dtype = "f64", seed = 4 }), ploss.tensor({ 0, 1, 2, 3 }, { dtype = "i64" })
    local ce = ploss.CrossEntropyLoss { reduction = "sum" }
    local _, g = ce(x, y)
    local g_before = g:clone()
    local want_loss, want_grad = F.cross_entropy_fused(g_before, y, { reduction = "sum" })
    local loss, g2 = ce(g, y)
    assert.are_not.equal(g, g2)
    H.assert_close(g, g_before, { rtol = 0, atol = 0 })
    assert.are.equal(want_loss, loss)
    H.assert_close(g2, want_grad, { rtol = 0, atol = 0 })
    H.assert_close(ce:backward(g2, y), F.cross_entropy_backward(g2:clone(), y, 1, { reduction = "sum" }),
      { rtol = 0, atol = 0 })
    -- given back as a tensor option (crit.weight): each pass's buffers new, the values
    -- those of the functional calls on a copy
    local bce = ploss.BCEWithLogitsLoss {}
    local z, p = ploss.tensor({ 0.5, -1, 2 }, { dtype = "f64" }), ploss.tensor({ 1, 0, 1 }, { dtype = "f64" })
    local _, gz = bce(z, p)
    local gz_before = gz:clone()
    bce.weight = gz
    local lw, gw1 = bce(z, p)
    assert.are_not.equal(gz, gw1)
    H.assert_close(gz, gz_before, { rtol = 0, atol = 0 })
    local fl, fg = F.binary_cross_entropy_with_logits_fused(z, p, { weight = gz_before })
    assert.are.equal(fl, lw)
    H.assert_close(gw1, fg, { rtol = 0, atol = 0 })
    bce.weight = gw1
    assert.are.equal(F.binary_cross_entropy_with_logits(z, p, { weight = gw1:clone() }), bce:forward(z, p))
    H.assert_close(bce:backward(z, p), F.binary_cross_entropy_with_logits_backward(z, p, 1, { weight = gw1:clone() }),
      { rtol = 0, atol = 0 })
    -- the functional fused call in place takes no separate gradient buffer (it would be left
    -- as it was)
    H.expect_error(function()
      F.cross_entropy_fused(x:clone(), y, { inplace = true, grad_input = ploss.zeros({ 4, 5 }, { dtype = "f64" }) })
    end, "cross_entropy_fused: opts.grad_input: given with opts.inplace = true, which writes the gradient over the input")
    -- forward and backward write no gradient over the input: inplace = true is refused there
    -- (taken, it would leave the input as it was), the input untouched
    local xc = x:clone()
    H.expect_error(function()
      local r = F.cross_entropy_backward(xc, y, 1, { inplace = true })
      return r
    end, "cross_entropy_backward: opts.inplace: only cross_entropy_fused writes the gradient over the input")
    H.expect_error(function()
      local r = F.lovasz_softmax(xc:view(4, 5, 1), y:view(4, 1), { inplace = true })
      return r
    end, "lovasz_softmax: opts.inplace: only lovasz_softmax_fused writes the gradient over the input")
    H.assert_close(xc, x, { rtol = 0, atol = 0 })
    assert.are.equal(F.cross_entropy(x, y), F.cross_entropy(x, y, { inplace = false }))
    -- a loss of several inputs: the weight's own gradient given back as the weight
    local h, w = ploss.randn({ 3, 4 }, { dtype = "f64", seed = 5 }), ploss.randn({ 5, 4 }, { dtype = "f64", seed = 6 })
    local t = ploss.tensor({ 0, 4, 2 }, { dtype = "i64" })
    local lce = ploss.LinearCrossEntropyLoss {}
    local _, _, gw = lce(h, w, t)
    local gw_before = gw:clone()
    local l2, gh2, gw2 = lce(h, gw, t)
    local wl, wgh, wgw = F.linear_cross_entropy_fused(h, gw_before, t)
    assert.are_not.equal(gw, gw2)
    H.assert_close(gw, gw_before, { rtol = 0, atol = 0 })
    assert.are.equal(wl, l2)
    H.assert_close(gh2, wgh, { rtol = 0, atol = 0 })
    H.assert_close(gw2, wgw, { rtol = 0, atol = 0 })
    -- its own grad_bias given back as the bias
    local b = ploss.randn({ 5 }, { dtype = "f64", seed = 7 })
    lce.bias = b
    local _, _, _, gb = lce(h, w, t)
    local gb_before = gb:clone()
    lce.bias = gb
    local l3, _, _, gb3 = lce(h, w, t)
    assert.are_not.equal(gb, gb3)
    H.assert_close(gb, gb_before, { rtol = 0, atol = 0 })
    assert.are.equal(F.linear_cross_entropy(h, w, t, { bias = gb_before }), l3)
    -- accumulating: the new buffer carries on the sums of the one it replaces
    local acc = ploss.LinearCrossEntropyLoss { accumulate = true }
    local _, _, ga = acc(h, w, t)
    local first = ga:clone()
    local _, _, ga2 = acc(h, ga, t)
    local _, _, once = F.linear_cross_entropy_fused(h, first, t)
    assert.are_not.equal(ga, ga2)
    local sum, a1, a2 = {}, first:flat(), once:flat()
    for i = 1, #a1 do sum[i] = a1[i] + a2[i] end
    H.assert_close(ga2, ploss.tensor(sum, { dtype = "f64", size = first:size() }), { rtol = 1e-15, atol = 0 })
  end)
end)
