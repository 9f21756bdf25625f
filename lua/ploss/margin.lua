--- What the margin softmax criteria (ploss.CombinedMarginLoss, AMSoftmaxLoss / CosFaceLoss,
-- ArcFaceLoss: built from their descriptions by ploss/criterion.lua) are used with: Partial
-- FC around one of them, and a layer that owns the class centres.
--
-- Partial FC: ploss.PartialFCLoss{margin = <margin criterion>, sample_rate, seed [, comm,
-- scale_grad_x_by_ranks]}.  With comm (ploss.comm.init) the classes are sharded over the
-- communicator's ranks as the margin criteria's own comm option shards them (weight is the
-- rank's block of centres, the labels are global class ids, docs/distributed.md), each rank
-- drawing among its block.
--
-- A margin softmax criterion (ploss.CombinedMarginLoss, AMSoftmaxLoss / CosFaceLoss,
-- ArcFaceLoss) whose softmax runs over a sample of the classes: the classes of the batch's
-- labels plus uniformly drawn others, min(C, max(2, ⌊C·sample_rate⌋ + 1)) in all (An et al.,
-- Partial FC, ICCV Workshops 2021).  The drawing is the margin losses' own (their
-- sample_rate and seed options, core/engines/margin.h): Philox keys of the seed, so one seed and one batch draw
-- the same classes on the CPU and on CUDA.  Called like the margin criterion:
-- crit:forward(x, weight, labels), crit:backward(x, weight, labels [, gradOutput]),
-- crit(x, weight, labels [, scale]); the rows of grad_weight not drawn are zero.  The seed
-- advances by one after each backward and each fused call, so every training step draws
-- anew while a forward and the backward after it see the same classes; past 2^53 − 1 it
-- wraps to −(2^53 − 1), so every seed the option takes stays usable.
return function(ploss)
  local nn = ploss.nn

  local cls = nn.class("PartialFCLoss")
  cls._doc = "Partial FC (An et al., ICCV Workshops 2021) around a margin softmax criterion"
  -- read at each call; grad_x and grad_weight, where the gradients go, as the margin criteria's
  cls._fields = { margin = true, sample_rate = true, seed = true, grad_x = true, grad_weight = true }
  cls._takes_target = true -- the labels, after x and weight (nn.takes_target)

  -- the options this criterion sets on its private one (the draw's and the sharding's); the
  -- margin criterion's others are read from it at each call
  local OWN = { sample_rate = true, seed = true, comm = true, scale_grad_x_by_ranks = true }
  local SEED_MAX, next_seed = nn.SEED_MAX, nn.next_seed

  -- The description of `margin`, an instance of a margin softmax criterion (one that draws:
  -- not the linear cross-entropy, not a class), whose own draw options are left at their
  -- defaults (they are this criterion's).  `name`: the option's in messages ("margin").
  local function margin_description(margin, name)
    name = name or "margin"
    local d = type(margin) == "table" and rawget(margin, "__index") == nil and margin._description
    local draws = false
    for _, opt in ipairs(d and d.lua_options or {}) do draws = draws or opt.name == "sample_rate" end
    if not d or d.shape ~= "margin" or not draws then
      ploss.raise("PartialFCLoss: " .. name .. ": expected a margin softmax criterion (ploss.ArcFaceLoss{…}, " ..
        "AMSoftmaxLoss{…}, CombinedMarginLoss{…}), got " .. (d and ("ploss." .. d.criterion) or
          type(margin) == "table" and rawget(margin, "__index") ~= nil and "a class (its braces forgotten?)" or
          ploss.shown(margin)))
    end
    if margin.sample_rate ~= 1 or margin.seed ~= 0 then
      ploss.raise(string.format("PartialFCLoss: %s: its sample_rate (%s) and seed (%s) must stay 1 and 0: " ..
        "the draw is PartialFCLoss's (PartialFCLoss{sample_rate = …, seed = …})", name,
        tostring(margin.sample_rate), tostring(margin.seed)))
    end
    return d
  end

  -- (named as `prefix` .. option: "opts." by default, "crit." for a field set)
  local function check_draw(rate, seed, prefix)
    prefix = prefix or "opts."
    if type(rate) ~= "number" or not (rate > 0 and rate <= 1) then
      ploss.raise("PartialFCLoss: " .. prefix .. "sample_rate: " .. ploss.shown(rate) ..
        " is not a finite number in (0, 1]")
    end
    if type(seed) ~= "number" or seed ~= math.floor(seed) or math.abs(seed) > SEED_MAX then
      ploss.raise("PartialFCLoss: " .. prefix .. "seed: " .. ploss.shown(seed) .. " is not an integer within " ..
        "±(2^53 − 1) (it advances by one each step)")
    end
  end

  -- a field set after construction is checked before it takes the value (nn.class)
  cls._check_field = function(_, k, v)
    if k == "margin" then
      margin_description(v, "crit.margin")
    elseif k == "sample_rate" then
      check_draw(v, 0, "crit.")
    elseif k == "seed" then
      check_draw(1, v, "crit.")
    elseif v ~= nil and not ploss.is_tensor(v) then -- grad_x, grad_weight
      ploss.raise(string.format("PartialFCLoss: crit.%s: expected a ploss tensor, got %s", k, ploss.shown(v)))
    end
  end

  function cls:__init(opts)
    if opts == nil then opts = {} end
    local known = { margin = true, sample_rate = true, seed = true, comm = true, scale_grad_x_by_ranks = true,
                    grad_x = true, grad_weight = true }
    ploss.check_option_keys(opts, "PartialFCLoss", known)
    local margin = opts.margin or ploss.ArcFaceLoss {}
    local d = margin_description(margin)
    local rate, seed = opts.sample_rate or 0.1, opts.seed or 0
    check_draw(rate, seed)
    -- a criterion of its own, with the given one's options (read again at each call: the
    -- given criterion itself is never written)
    local o = { reduction = nn.field(margin, "reduction") }
    for _, opt in ipairs(d.lua_options) do o[opt.name] = nn.field(margin, opt.name) end
    o.sample_rate, o.seed = rate, seed
    if opts.comm ~= nil then o.comm = opts.comm end
    if opts.scale_grad_x_by_ranks ~= nil then o.scale_grad_x_by_ranks = opts.scale_grad_x_by_ranks end
    -- its option errors named as this criterion's: its own options as they are, the margin
    -- criterion's as margin.<option>
    local ok, inner = pcall(ploss[d.criterion], o)
    if not ok then
      local text, head = tostring(inner), "ploss: " .. d.criterion .. ": "
      local at = text:find(head, 1, true)
      if not at then error(inner, 0) end
      local msg = text:sub(at + #head)
      local name = msg:match("^opts%.([%w_]+)") or msg:match("^([%w_]+)")
      if name and not known[name] then msg = "margin." .. (msg:gsub("^opts%.", "")) end
      ploss.raise("PartialFCLoss: " .. msg)
    end
    self._inner = inner
    self.margin = margin
    self.sample_rate, self.seed = rate, seed
    for _, k in ipairs { "grad_x", "grad_weight" } do
      if opts[k] ~= nil and not ploss.is_tensor(opts[k]) then
        ploss.raise(string.format("PartialFCLoss: %s: expected a ploss tensor, got %s", k, type(opts[k])))
      end
      self[k] = opts[k]
    end
  end

  -- The private criterion with the margin's options and this criterion's draw now (the
  -- margin, the rate and the seed are fields a caller may have set since the last call).
  local function sampled(self)
    local margin = self.margin
    local d = margin_description(margin)
    check_draw(self.sample_rate, self.seed)
    if d ~= self._inner._description then -- another margin softmax: a private one like it
      local old = self._inner
      self._inner = ploss[d.criterion] { comm = old.comm, scale_grad_x_by_ranks = old.scale_grad_x_by_ranks }
    end
    local inner = self._inner
    inner.reduction = margin.reduction
    for _, opt in ipairs(d.lua_options) do
      if not OWN[opt.name] then inner[opt.name] = margin[opt.name] end
    end
    inner.sample_rate, inner.seed = self.sample_rate, self.seed
    inner.grad_x, inner.grad_weight = nn.field(self, "grad_x"), nn.field(self, "grad_weight")
    return inner
  end

  -- the calls' messages name this criterion, not the private one
  local function call(self, method, ...)
    local inner = sampled(self)
    local r = { pcall(inner[method], inner, ...) }
    inner.grad_x, inner.grad_weight = nil, nil -- the destinations are this criterion's to keep
    if not r[1] then
      local text = tostring(r[2])
      local d = inner._description
      local own = method == "fused" and "PartialFCLoss" or "PartialFCLoss:" .. method
      text = text:gsub("ploss: " .. d.criterion .. "([:.%s])", "ploss: PartialFCLoss%1", 1)
      -- the checks of the C call name its function (arc_face_fused, …)
      text = text:gsub("ploss: " .. d.name .. "_%a+:", "ploss: " .. own .. ":", 1)
      error(text, 0)
    end
    table.remove(r, 1)
    return r
  end

  -- its own checks (the draw's fields) come before the private criterion's: refused there,
  -- a sharded call aborts its communicator as well (nn.sharded)
  call = nn.sharded(call, nn.comm_of)

  function cls:forward(...)
    nn.check_self(self, "PartialFCLoss", "forward")
    self.output = call(self, "forward", ...)[1]
    return self.output
  end
  function cls:updateOutput(...)
    nn.check_self(self, "PartialFCLoss", "updateOutput")
    return self:forward(...)
  end

  function cls:backward(...)
    nn.check_self(self, "PartialFCLoss", "backward")
    local r = call(self, "backward", ...)
    self.seed = next_seed(self.seed)
    self.gradInput = r
    return unpack(r)
  end
  function cls:updateGradInput(...)
    nn.check_self(self, "PartialFCLoss", "updateGradInput")
    return self:backward(...)
  end

  function cls:fused(...)
    nn.check_self(self, "PartialFCLoss", "fused")
    local r = call(self, "fused", ...)
    self.seed = next_seed(self.seed)
    self.output = r[1]
    return unpack(r)
  end

  -- Torch7's methods: the device and dtype methods act on the margin criterion and the private
  -- one; clone copies the margin criterion too (and the sharding); clearState the private one's
  -- buffers.
  nn.torch7_methods(cls, "PartialFCLoss")
  function cls:to(device)
    nn.check_self(self, "PartialFCLoss", "to")
    self.margin:to(device)
    self._inner:to(device)
    return self
  end
  function cls:clone()
    nn.check_self(self, "PartialFCLoss", "clone")
    local c = self._inner
    local gx, gw = nn.field(self, "grad_x"), nn.field(self, "grad_weight") -- copied, as the margin criteria's
    return cls { margin = self.margin:clone(), sample_rate = self.sample_rate, seed = self.seed, comm = c.comm,
                 scale_grad_x_by_ranks = c.scale_grad_x_by_ranks, grad_x = gx and gx:clone(),
                 grad_weight = gw and gw:clone() }
  end
  function cls:clearState()
    nn.check_self(self, "PartialFCLoss", "clearState")
    self._inner:clearState()
    rawset(self, "gradInput", nil)
    if ploss.is_tensor(rawget(self, "output")) then rawset(self, "output", nil) end -- 'none''s loss buffer
    return self
  end
  function cls:forward_tensor(...)
    nn.check_self(self, "PartialFCLoss", "forward_tensor")
    return call(self, "forward_tensor", ...)[1]
  end

  function cls:tostring()
    local c = self._inner
    return string.format("ploss.PartialFCLoss{margin = %s, sample_rate = %s, seed = %s%s%s}", tostring(self.margin),
      tostring(self.sample_rate), tostring(self.seed), c.comm and (", comm = " .. tostring(c.comm)) or "",
      c.scale_grad_x_by_ranks and ", scale_grad_x_by_ranks = true" or "")
  end

  ploss.PartialFCLoss = cls

  --- ploss.nn.MarginSoftmax{in_features, classes, criterion = …, dtype = 'f32', device = 'cpu'}
  -- (the two sizes positional, as {512, 1000, criterion = …}, or named, as {in_features = 512,
  -- classes = 1000, …}):
  -- the class centres W (classes × in_features, N(0, 2/(in + classes)) from the global
  -- seeded generator, as Linear's 'xavier') with a margin criterion (default
  -- ploss.ArcFaceLoss{}; or a ploss.PartialFCLoss).
  --   head(embeddings, labels [, scale]) → loss, ∂loss/∂embeddings (the fused pass), and
  --     ∂loss/∂W into head.gradWeight;
  --   head:forward(embeddings) → N × classes scores x·ŵ_jᵀ (ŵ_j = w_j/‖w_j‖), whose argmax
  --     over the classes is the largest cosine: the prediction (labels are refused here, and
  --     head:backward with a message: the loss and gradients are the fused call's);
  --   head:parameters() → { weight }, { gradWeight }.
  local Head = nn.class("MarginSoftmax")
  Head._doc = "the class centres of a margin softmax loss, with its criterion"
  Head._takes_target = true -- the labels (nn.takes_target)
  Head._loss_head = "ploss.nn.MarginSoftmax" -- refused by Sequential (it has forward and backward)
  Head._constructor = "one table {in_features, classes, criterion = …, dtype = …, device = …} (the sizes go " ..
    "inside the braces, positional or named)"
  -- the fields a call reads (a misspelt one, head.wieght = w, is refused, not kept aside)
  Head._fields = { in_features = true, classes = true, criterion = true, weight = true, gradWeight = true,
                   scores = true }

  -- The criterion's error (nil when it serves the head): a margin criterion, or a
  -- PartialFCLoss, whose centres have the head's layout (classes × in_features).
  local function criterion_error(crit)
    local d = type(crit) == "table" and rawget(crit, "__index") == nil and crit._description -- an instance
    if not ((d and d.shape == "margin" and d.name ~= "linear_cross_entropy") or
            getmetatable(crit) == ploss.PartialFCLoss) then
      return "expected a margin criterion (ploss.ArcFaceLoss{…}, AMSoftmaxLoss{…} = CosFaceLoss{…}, " ..
        "CombinedMarginLoss{…} or PartialFCLoss{…}), got " .. (d and ("ploss." .. d.criterion) or ploss.shown(crit))
    end
    local margin = d and crit or crit.margin
    if type(margin) == "table" and margin.weight_layout ~= nil and margin.weight_layout ~= "CxD" then
      return "weight_layout " .. ploss.shown(margin.weight_layout) .. ": the head's centres are classes × " ..
        "in_features (nn.Linear's layout): leave weight_layout at 'CxD'"
    end
  end

  -- a field set is checked for its kind before it takes the value (a criterion that serves
  -- the head, tensors for the centres and their gradient); the sizes, which change
  -- together, are checked at each call (check_head)
  Head._check_field = function(_, k, v)
    if v == nil then return end
    local err = k == "criterion" and criterion_error(v)
    if err then ploss.raise("MarginSoftmax: head.criterion: " .. err) end
    if (k == "weight" or k == "gradWeight") and not ploss.is_tensor(v) then
      ploss.raise("MarginSoftmax: head." .. k .. ": expected a ploss tensor (classes × in_features), got " ..
        ploss.shown(v))
    end
  end

  function Head:__init(opts)
    if type(opts) ~= "table" then
      ploss.raise("MarginSoftmax: expected " .. Head._constructor .. ", got " .. type(opts))
    end
    local known = { [1] = true, [2] = true, in_features = true, classes = true, criterion = true, dtype = true,
                    device = true }
    local unknown = {}
    for k in pairs(opts) do
      if not known[k] then unknown[#unknown + 1] = tostring(k) end
    end
    if #unknown > 0 then
      table.sort(unknown)
      ploss.raise("MarginSoftmax: unknown option '" .. unknown[1] .. "' (expected {in_features, classes, " ..
        "criterion = …, dtype = …, device = …}, the sizes positional or named)")
    end
    local size = {}
    for i, v in ipairs { "in_features", "classes" } do
      if opts[i] ~= nil and opts[v] ~= nil then
        ploss.raise("MarginSoftmax: " .. v .. ": given twice, as size " .. i .. " and by name")
      end
      size[i] = opts[v]
      if size[i] == nil then size[i] = opts[i] end
    end
    local in_features, classes = size[1], size[2]
    local crit = opts.criterion
    local err = crit ~= nil and criterion_error(crit)
    if err then ploss.raise("MarginSoftmax: criterion: " .. err) end
    -- a sharded criterion's head holds its rank's shard of the classes: one is enough there
    -- (the criterion counts them over the ranks)
    local inner = crit ~= nil and getmetatable(crit) == ploss.PartialFCLoss and rawget(crit, "_inner")
    local sharded = crit ~= nil and (ploss.comm.is_comm(nn.field(crit, "comm")) or (inner and ploss.comm.is_comm(inner.comm)))
    for i, v in ipairs { "in_features", "classes" } do
      local n, least = size[i], (i == 2 and not sharded) and 2 or 1
      if type(n) ~= "number" or n < least or n ~= math.floor(n) then
        ploss.raise("MarginSoftmax: " .. v .. ": expected an integer >= " .. least ..
          (i == 2 and not sharded and " (a softmax over one class has nothing to separate)" or "") .. ", got " ..
          ploss.shown(n))
      end
    end
    local dtype, device = ploss.float_dtype(opts.dtype, "MarginSoftmax"), opts.device or "cpu"
    self.in_features, self.classes = in_features, classes
    self.criterion = opts.criterion or ploss.ArcFaceLoss {}
    self.weight = ploss.randn({ classes, in_features },
      { dtype = dtype, device = device, std = math.sqrt(2 / (in_features + classes)) })
    self.gradWeight = ploss.zeros({ classes, in_features }, { dtype = dtype, device = device })
  end

  -- The fields a call reads, checked before anything runs (a caller may have set them since
  -- the last call): the criterion, and centres and their gradient of the head's size.
  local function check_head(self)
    local err = criterion_error(self.criterion)
    if err then ploss.raise("MarginSoftmax: head.criterion: " .. err) end
    local want = { self.classes, self.in_features }
    for _, name in ipairs { "weight", "gradWeight" } do
      local t = self[name]
      if not ploss.is_tensor(t) then
        ploss.raise("MarginSoftmax: head." .. name .. ": expected a ploss tensor of " .. self.classes .. "×" ..
          self.in_features .. " (classes × in_features), got " .. ploss.shown(t))
      end
      local sz = t:size()
      if #sz ~= 2 or sz[1] ~= want[1] or sz[2] ~= want[2] then
        ploss.raise(string.format("MarginSoftmax: head.%s: expected %d×%d (classes × in_features), got %s",
          name, want[1], want[2], ploss.shown(t)))
      end
    end
  end

  -- The embeddings of a call: N×in_features of the centres' dtype and device (named here: the
  -- criterion's messages would name the head's own weight).
  local function check_embeddings(self, x, where)
    if not ploss.is_tensor(x) then
      ploss.raise(string.format("MarginSoftmax:%s: embeddings: expected a ploss tensor N×%d (in_features), got %s",
        where, self.in_features, ploss.shown(x)))
    end
    local sz = x:size()
    if #sz ~= 2 or sz[2] ~= self.in_features then
      ploss.raise(string.format("MarginSoftmax:%s: embeddings: expected N×%d (in_features), got %s", where,
        self.in_features, ploss.shown(x)))
    end
    if x:dtype() ~= self.weight:dtype() then
      ploss.raise(string.format("MarginSoftmax:%s: embeddings: expected %s, the head's dtype (its centres), got %s",
        where, self.weight:dtype(), x:dtype()))
    end
    if x:device() ~= self.weight:device() then
      ploss.raise(string.format("MarginSoftmax:%s: embeddings: on %s, the head's centres on %s (head:to(device) " ..
        "moves the head)", where, x:device(), self.weight:device()))
    end
  end

  function Head:fused(embeddings, labels, scale, ...)
    nn.check_self(self, "MarginSoftmax", "fused", "head")
    if select("#", ...) > 0 and select(1, ...) ~= nil then
      ploss.raise("MarginSoftmax: takes 3 arguments (embeddings, labels [, scale]), got a " ..
        (ploss.is_tensor((...)) and "tensor" or type((...))) .. " as argument 4")
    end
    check_head(self)
    check_embeddings(self, embeddings, "fused")
    -- ∂loss/∂W straight into gradWeight (the criterion's grad_weight for the call), not into a
    -- buffer of the criterion's copied over: no second classes × in_features tensor kept
    -- (where gradWeight can take it: the centres' dtype and device, dense, sharing no memory
    -- with them or the embeddings; else, as for a grad_weight the caller set on the
    -- criterion, the criterion's buffer copied into it)
    local crit, gw = self.criterion, self.gradWeight
    local direct = nn.field(crit, "grad_weight") == nil and gw:dtype() == self.weight:dtype() and
      gw:device() == self.weight:device() and gw:is_dense() and gw:storage_id() ~= self.weight:storage_id() and
      gw:storage_id() ~= embeddings:storage_id()
    if direct then crit.grad_weight = gw end
    local r = { pcall(crit, embeddings, self.weight, labels, scale) }
    if direct then crit.grad_weight = nil end
    if not r[1] then error(r[2], 0) end
    local loss, g = r[2], r[3]
    if not direct then gw:copy(r[4]) end
    self.output, self.gradInput = loss, g
    return loss, g
  end

  -- the head's checks come before its criterion's: refused there, a sharded call aborts its
  -- communicator as well (nn.sharded)
  Head.fused = nn.sharded(Head.fused, function(self)
    return type(self) == "table" and nn.comm_of(nn.field(self, "criterion")) or nil
  end)

  function Head:forward(embeddings, ...)
    nn.check_self(self, "MarginSoftmax", "forward", "head")
    for k = 1, select("#", ...) do
      local v = select(k, ...)
      if v ~= nil then
        ploss.raise("MarginSoftmax:forward: takes the embeddings alone and gives the scores (got a " ..
          (ploss.is_tensor(v) and "tensor" or type(v)) .. " as argument " .. (k + 1) .. "); the loss and its " ..
          "gradients come from one fused call: head(embeddings, labels)")
      end
    end
    check_head(self)
    check_embeddings(self, embeddings, "forward")
    -- the normalised centres (a few rows: normalised on the host)
    local W = self.weight:to("cpu"):double():totable()
    for _, row in ipairs(W) do
      local s = 0
      for _, v in ipairs(row) do s = s + v * v end
      s = math.max(math.sqrt(s), 1e-12)
      for j = 1, #row do row[j] = row[j] / s end
    end
    local wn = ploss.tensor(W, { dtype = self.weight:dtype() }):to(self.weight:device())
    self.scores = ploss.F.gemm(embeddings, wn, { trans_b = true })
    return self.scores
  end

  -- no separate backward: a margin loss's gradient is the fused call's (a Torch7 loop's
  -- backward call is met with where it is)
  function Head:backward()
    nn.check_self(self, "MarginSoftmax", "backward", "head")
    ploss.raise("MarginSoftmax:backward: the head has no separate backward; head(embeddings, labels) gives " ..
      "the loss and ∂loss/∂embeddings and writes ∂loss/∂W into head.gradWeight, in one fused pass")
  end

  function Head:parameters() return { self.weight }, { self.gradWeight } end

  -- Torch7's module methods a training loop calls: gradWeight is written (not added to) by
  -- each fused call, so zeroing it only matters to a loop that reads it between steps
  function Head:zeroGradParameters()
    nn.check_self(self, "MarginSoftmax", "zeroGradParameters", "head")
    self.gradWeight:zero()
  end
  -- a head of the same sizes with copies of the centres, their gradient and the criterion
  -- (made without __init, which would draw centres from the global generator)
  function Head:clone()
    nn.check_self(self, "MarginSoftmax", "clone", "head")
    check_head(self)
    local c = setmetatable({}, Head)
    c.in_features, c.classes, c.criterion = self.in_features, self.classes, self.criterion:clone()
    c.weight, c.gradWeight = self.weight:clone(), self.gradWeight:clone()
    return c
  end

  -- Torch7's conversions: the centres and their gradient on a device and in a float dtype
  -- (both converted before either is set: a refused device or dtype leaves the head as it
  -- was), the criterion moved along, the buffers of the last call dropped.  A dtype may
  -- stand in the device's place, as Tensor:to takes it.
  function Head:to(device, dtype)
    nn.check_self(self, "MarginSoftmax", "to", "head")
    check_head(self)
    device, dtype = ploss.to_arguments(device, dtype, "MarginSoftmax:to")
    if dtype ~= nil then dtype = ploss.float_dtype(dtype, "MarginSoftmax:to") end
    local w, gw = self.weight:to(device, dtype), self.gradWeight:to(device, dtype)
    if device ~= nil then self.criterion:to(device) end
    -- the old tensors, where new ones replace them, marked so that an optimiser or EMA
    -- made with them refuses them (as the layers' conversions do)
    if w ~= self.weight then nn.replaced_by[self.weight] = "MarginSoftmax" end
    if gw ~= self.gradWeight then nn.replaced_by[self.gradWeight] = "MarginSoftmax" end
    self.weight, self.gradWeight = w, gw
    return self:clearState()
  end
  function Head:cuda() nn.check_self(self, "MarginSoftmax", "cuda", "head") return self:to("cuda") end
  function Head:cpu() nn.check_self(self, "MarginSoftmax", "cpu", "head") return self:to("cpu") end
  function Head:float() nn.check_self(self, "MarginSoftmax", "float", "head") return self:to(nil, "f32") end
  function Head:double() nn.check_self(self, "MarginSoftmax", "double", "head") return self:to(nil, "f64") end
  function Head:clearState()
    nn.check_self(self, "MarginSoftmax", "clearState", "head")
    self.output, self.gradInput, self.scores = nil, nil, nil
    -- its criterion's buffers (the embeddings' gradient) too, where it is one
    if not criterion_error(self.criterion) then self.criterion:clearState() end
    return self
  end

  function Head:tostring()
    return string.format("ploss.nn.MarginSoftmax(%d -> %d classes, %s)", self.in_features, self.classes,
      tostring(self.criterion))
  end

  nn.MarginSoftmax = Head
end
