--- Partial FC on one device: ploss.PartialFCLoss{margin = <margin criterion>, sample_rate, seed}.
--
-- A margin softmax criterion (ploss.CombinedMarginLoss, AMSoftmaxLoss / CosFaceLoss,
-- ArcFaceLoss) whose softmax runs over a sample of the classes: the classes of the batch's
-- labels plus uniformly drawn others, ⌊C·sample_rate⌋ + 1 in all (An et al., Partial FC,
-- ICCV Workshops 2021).  The drawing is the margin losses' own (their sample_rate and seed
-- options, core/engines/margin.h): Philox keys of the seed, so one seed and one batch draw
-- the same classes on the CPU and on CUDA.  Called like the margin criterion:
-- crit:forward(x, weight, labels), crit:backward(x, weight, labels [, gradOutput]),
-- crit(x, weight, labels [, scale]); the rows of grad_weight not drawn are zero.  The seed
-- advances by one after each backward and each fused call, so every training step draws
-- anew while a forward and the backward after it see the same classes.
return function(ploss)
  local nn = ploss.nn

  local cls = nn.class("PartialFCLoss")
  cls._doc = "Partial FC (An et al., ICCV Workshops 2021) around a margin softmax criterion"

  function cls:__init(opts)
    opts = opts or {}
    for k in pairs(opts) do
      if k ~= "margin" and k ~= "sample_rate" and k ~= "seed" then
        ploss.raise("PartialFCLoss: unknown option '" .. tostring(k) .. "' (margin, sample_rate, seed)")
      end
    end
    local margin = opts.margin or ploss.ArcFaceLoss {}
    local d = type(margin) == "table" and margin._description
    if not d or d.shape ~= "margin" then
      ploss.raise("PartialFCLoss: margin: expected a margin softmax criterion (ploss.ArcFaceLoss{…}, " ..
        "AMSoftmaxLoss{…}, CombinedMarginLoss{…})")
    end
    -- a criterion of its own, with the given one's options (which it leaves as they are)
    local o = { reduction = rawget(margin, "reduction") }
    for _, opt in ipairs(d.lua_options) do o[opt.name] = rawget(margin, opt.name) end
    o.sample_rate, o.seed = opts.sample_rate or 0.1, opts.seed or 0
    self.margin = ploss[d.criterion](o)
    self.sample_rate, self.seed = o.sample_rate, o.seed
  end

  -- The margin criterion, with this criterion's sampling now.
  local function sampled(self)
    self.margin.sample_rate, self.margin.seed = self.sample_rate, self.seed
    return self.margin
  end

  function cls:forward(...)
    self.output = sampled(self):forward(...)
    return self.output
  end
  function cls:updateOutput(...) return self:forward(...) end

  function cls:backward(...)
    local r = { sampled(self):backward(...) }
    self.seed = self.seed + 1
    self.gradInput = r
    return unpack(r)
  end
  function cls:updateGradInput(...) return self:backward(...) end

  function cls:fused(...)
    local r = { sampled(self):fused(...) }
    self.seed = self.seed + 1
    self.output = r[1]
    return unpack(r)
  end

  function cls:tostring()
    return string.format("ploss.PartialFCLoss{margin = %s, sample_rate = %s, seed = %s}", tostring(self.margin),
      tostring(self.sample_rate), tostring(self.seed))
  end

  ploss.PartialFCLoss = cls
end
