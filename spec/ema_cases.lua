-- The cases of the EMA of parameters on a device, `require "spec.ema_cases"(device, getfenv(1))`
-- (the spec's environment gives busted's describe, it and assert):
-- spec/ema_spec.lua runs them on the CPU (suite 'cpu'), spec/cuda_ema_spec.lua on the GPU.
-- ploss.optim.EMA and the C entry points ploss_ema_update / ploss_ema_swap:
--  * the update s ← d·s + (1 − d)·p against a Lua transcription, with TensorFlow's warm-up
--    d = min(decay, (1 + t)/(10 + t)) and without it, over many tensors of every float dtype,
--    odd and empty sizes, more tensors than one CUDA launch takes;
--  * integer tensors are copied, not averaged;
--  * apply / restore exchange the weights exactly and refuse to be misused;
--  * bad input: a clear error naming the tensor, nothing written.
local H = require "spec.helpers"
local ffi = require "ffi"
local ploss = H.ploss
local C = ploss.C
return function(DEV, env)
local describe, it, assert = env.describe, env.it, env.assert

local function dl_array(list, const)
  local a = ffi.new(const and "const DLTensor *[?]" or "DLTensor *[?]", math.max(#list, 1))
  for i, t in ipairs(list) do a[i - 1] = t:dl() end
  return a
end

-- the C update on lists of tensors; returns the status and the message
local function c_update(shadows, params, updates, decay, warmup)
  local o = ffi.new("ploss_ema_opts")
  C.ploss_ema_opts_init(o)
  if decay then o.decay = decay end
  if warmup ~= nil then o.warmup = warmup end
  local ctx = ploss.context(DEV)
  local st = C.ploss_ema_update(ctx, dl_array(shadows), dl_array(params, true), #params, updates, o)
  return st, ffi.string(C.ploss_last_error())
end

local function expect_status(st, msg, status, fragment)
  assert.are.equal(status, ffi.string(C.ploss_status_string(st)), msg)
  assert(msg:find(fragment, 1, true), "message '" .. msg .. "' does not contain '" .. fragment .. "'")
end

-- the decay of update t
local function decay_of(decay, warmup, t)
  if warmup then return math.min(decay, (1 + t) / (10 + t)) end
  return decay
end

local SIZES = { { 5 }, { 3, 7 }, { 0 }, { 2, 3, 5 }, { 1 }, { 40000 }, { 17, 1000 } }

describe("EMA of parameters on " .. DEV, function()
  for _, warmup in ipairs { true, false } do
    it("f64: the averages of five updates, warmup " .. tostring(warmup), function()
      local params, want = {}, {}
      for i, sz in ipairs(SIZES) do
        params[i] = ploss.randn(sz, { dtype = "f64", device = DEV, seed = i })
        want[i] = params[i]:flat()
      end
      local ema = ploss.optim.EMA(params, { decay = 0.9, warmup = warmup })
      for t = 0, 4 do
        local d = decay_of(0.9, warmup, t)
        assert.are.equal(d, ema:decay())
        for i, sz in ipairs(SIZES) do
          params[i]:copy(ploss.randn(sz, { dtype = "f64", seed = 100 * t + i }))
          local p = params[i]:flat()
          for k = 1, #p do want[i][k] = want[i][k] + (1 - d) * (p[k] - want[i][k]) end
        end
        ema:update()
      end
      for i = 1, #SIZES do
        H.assert_close(ema.shadows[i], want[i], { rtol = 1e-14, atol = 1e-15, what = "shadow " .. i })
      end
    end)
  end

  it("f32, f16 and bf16: the averages in f32, rounded to the dtype after each update", function()
    for _, dtype in ipairs { "f32", "f16", "bf16" } do
      local params, want = {}, {}
      for i, sz in ipairs(SIZES) do
        params[i] = ploss.randn(sz, { dtype = dtype, device = DEV, seed = 10 + i })
        want[i] = params[i]:flat()
      end
      local ema = ploss.optim.EMA(params, { decay = 0.95 })
      for t = 0, 2 do
        local d = decay_of(0.95, true, t)
        for i, sz in ipairs(SIZES) do
          params[i]:copy(ploss.randn(sz, { dtype = dtype, seed = 200 * t + i }))
          local p = params[i]:flat()
          for k = 1, #p do want[i][k] = want[i][k] + (1 - d) * (p[k] - want[i][k]) end
          -- round to the dtype, as the stored shadow is
          if #p > 0 then want[i] = ploss.tensor(want[i], { dtype = "f64" }):to(nil, dtype):flat() end
        end
        ema:update()
      end
      local tol = ({ f32 = 1e-6, f16 = 2e-3, bf16 = 1.6e-2 })[dtype]
      for i = 1, #SIZES do
        H.assert_close(ema.shadows[i], want[i], { rtol = tol, atol = tol, what = dtype .. " shadow " .. i })
      end
    end
  end)

  it("integer tensors are copied, not averaged; decay 1 without warm-up keeps the floats", function()
    local w = ploss.tensor({ 1, 2, 3 }, { dtype = "f32", device = DEV })
    local n = ploss.tensor({ 5 }, { dtype = "i64", device = DEV })
    local m = ploss.tensor({ 1, 2 }, { dtype = "u8", device = DEV })
    local ema = ploss.optim.EMA({ w, n, m }, { decay = 1, warmup = false })
    w:fill(7)
    n:fill(123456789012)
    m:fill(200)
    ema:update()
    H.assert_equal(ema.shadows[1], { 1, 2, 3 })
    H.assert_equal(ema.shadows[2], { 123456789012 })
    H.assert_equal(ema.shadows[3], { 200, 200 })
  end)

  it("300 tensors in one update (more than one CUDA launch)", function()
    local params, before = {}, {}
    for i = 1, 300 do
      params[i] = ploss.randn({ 1 + (i * 37) % 5000 }, { dtype = i % 3 == 0 and "bf16" or "f32", device = DEV, seed = i })
    end
    local ema = ploss.optim.EMA(params, { decay = 0.5, warmup = false })
    for i = 1, 300 do
      before[i] = params[i]:flat()
      params[i]:fill(i % 7)
    end
    ema:update()
    for i = 1, 300 do
      local want = {}
      for k, v in ipairs(before[i]) do want[k] = 0.5 * v + 0.5 * (i % 7) end
      H.assert_close(ema.shadows[i], want, { rtol = 1e-2, atol = 1e-2, what = "tensor " .. i })
    end
  end)

  it("apply and restore exchange the weights exactly; misuse is refused", function()
    local a = ploss.randn({ 33, 3 }, { dtype = "bf16", device = DEV, seed = 1 })
    local b = ploss.randn({ 1000 }, { dtype = "f32", device = DEV, seed = 2 })
    local ema = ploss.optim.EMA({ a, b }, { decay = 0.9 })
    a:fill(1)
    b:fill(2)
    ema:update()
    local sa, sb = ema.shadows[1]:flat(), ema.shadows[2]:flat()
    ema:apply()
    H.assert_equal(a, sa)
    H.assert_equal(b, sb)
    H.assert_equal(ema.shadows[1], ploss.full({ 33, 3 }, 1):flat())
    H.expect_error(function() ema:update() end, "EMA: update() between apply() and restore()")
    H.expect_error(function() ema:apply() end, "EMA: apply() twice")
    ema:restore()
    H.assert_equal(a, ploss.full({ 33, 3 }, 1):flat())
    H.assert_equal(b, ploss.full({ 1000 }, 2):flat())
    H.assert_equal(ema.shadows[1], sa)
    H.expect_error(function() ema:restore() end, "EMA: restore() without apply()")
    -- a param written between apply() and restore() (a training step) is refused, nothing
    -- exchanged; force = true restores anyway (the write goes into the shadow)
    ema:apply()
    b:add_(1)
    H.expect_error(function() ema:restore() end, "EMA:restore: params[2] was written since apply()")
    H.assert_equal(a, sa)
    H.expect_error(function() ema:restore { force = 1 } end,
      "EMA:restore: opts.force: expected a boolean (true or false), got number 1")
    H.expect_error(function() ema:restore { forse = true } end, "EMA:restore: unknown option 'forse'")
    ema:restore { force = true }
    H.assert_equal(b, ploss.full({ 1000 }, 2):flat())
    H.assert_close(ema.shadows[2], ploss.tensor(sb):add_(1), { rtol = 1e-6 })
  end)

  it("bad input: the tensor named, nothing written", function()
    local p = ploss.randn({ 4, 3 }, { device = DEV, seed = 3 })
    local s = ploss.zeros({ 4, 3 }, { device = DEV })
    local function untouched() H.assert_equal(s, ploss.zeros({ 12 }):flat()) end
    local st, msg = c_update({ s }, { ploss.randn({ 3, 4 }, { device = DEV }) }, 0)
    expect_status(st, msg, "PLOSS_ERR_SHAPE", "params[0]: expected the shape of shadows[0]")
    st, msg = c_update({ s }, { ploss.randn({ 4, 3 }, { dtype = "f64", device = DEV }) }, 0)
    expect_status(st, msg, "PLOSS_ERR_DTYPE", "params[0]: expected shadows[0]'s dtype f32, got f64")
    st, msg = c_update({ s, s:clone() }, { p, ploss.randn({ 3, 4 }, { device = DEV }):t() }, 0)
    expect_status(st, msg, "PLOSS_ERR_LAYOUT", "params[1]: expected a contiguous tensor")
    st, msg = c_update({ s, s }, { p, p:clone() }, 0)
    expect_status(st, msg, "PLOSS_ERR_ALIAS", "shadows[0]: overlaps shadows[1]")
    st, msg = c_update({ s }, { s }, 0)
    expect_status(st, msg, "PLOSS_ERR_ALIAS", "shadows[0]: overlaps params[0]")
    st, msg = c_update({ s }, { p }, 0, 1.5)
    expect_status(st, msg, "PLOSS_ERR_INVALID_ARGUMENT", "opts.decay: 1.5 is not in [0, 1]")
    st, msg = c_update({ s }, { p }, -1)
    expect_status(st, msg, "PLOSS_ERR_INVALID_ARGUMENT", "updates: -1 is negative")
    untouched()
    if ploss.cuda_available() then
      local other = DEV == "cpu" and "cuda" or "cpu"
      st, msg = c_update({ s }, { p:to(other) }, 0)
      expect_status(st, msg, "PLOSS_ERR_DEVICE", "params[0]")
    end
    assert.are.equal(0, (c_update({}, {}, 0))) -- no tensors: nothing to do
    H.expect_error(function() ploss.optim.EMA({ p }, { decay = 2 }) end, "EMA: decay: 2 is not in [0, 1]")
    H.expect_error(function() ploss.optim.EMA({ p }, { beta = 2 }) end, "EMA: unknown option 'beta'")
    H.expect_error(function() ploss.optim.EMA(p) end, "EMA: params: expected a list of tensors")
  end)

  it("the constructor refuses params listed twice, overlapping views and non-contiguous params (1-based)", function()
    local w = ploss.ones({ 2 }, { dtype = "f64", device = DEV })
    local big = ploss.zeros({ 4, 6 }, { dtype = "f64", device = DEV })
    local other = ploss.zeros({ 3 }, { dtype = "f64", device = DEV })
    H.expect_error(function() ploss.optim.EMA({ w, w }) end, "EMA: params[2]: overlaps params[1]")
    H.expect_error(function() ploss.optim.EMA({ other, w, big, w }) end, "EMA: params[4]: overlaps params[2]")
    -- two views of one buffer: rows 1–2 and rows 2–3 share row 2; the later one in the list is named
    H.expect_error(function() ploss.optim.EMA({ big:narrow(1, 2, 2), other, big:narrow(1, 1, 2) }) end,
      "EMA: params[3]: overlaps params[1]")
    H.expect_error(function() ploss.optim.EMA({ w, big:narrow(2, 1, 3) }) end,
      "EMA: params[2]: expected a contiguous tensor")
    H.expect_error(function() ploss.optim.EMA({ big:t() }) end, "EMA: params[1]: expected a contiguous tensor")
    -- disjoint views of one buffer, and empty tensors, are fine; the EMA then works
    local r1, r2 = big:narrow(1, 1, 2), big:narrow(1, 3, 2)
    local ema = ploss.optim.EMA({ r1, r2, ploss.empty({ 0 }, { device = DEV }), w }, { decay = 0.5, warmup = false })
    r1:fill(2)
    ema:update()
    H.assert_equal(ema.shadows[1], ploss.full({ 2, 6 }, 1, { dtype = "f64" }))
    if ploss.cuda_available() then
      local away = DEV == "cpu" and "cuda" or "cpu"
      H.expect_error(function() ploss.optim.EMA({ w, other:to(away) }) end, "EMA: params[2]: on ")
    end
  end)
end)
end
