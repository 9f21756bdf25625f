-- CUDA tensor spec (suite 'cuda'): spec/run.lua exits 77 before loading this file when no
-- GPU is present.  PLOSS_CUDA_SPEC_DEVICE=cpu runs it against the CPU instead (a dry run
-- of the spec's own logic on machines without a GPU).
local H = require "spec.helpers"
local ploss = H.ploss
local DEV = H.cuda_spec_device()

describe("CUDA tensors (" .. DEV .. ")", function()
  local dtypes = { "f32", "f16", "bf16", "f64", "i64", "i32", "u8" }

  it("lives on the device", function()
    local t = ploss.zeros({ 2, 3 }, { device = DEV })
    assert.are.equal(DEV == "cpu" and "cpu" or "cuda:0", t:device())
    assert.are.equal(DEV ~= "cpu", t:is_cuda())
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, t:totable())
    assert.matches("on " .. (DEV == "cpu" and "cpu" or "cuda:0") .. "%]$", tostring(t))
    assert.are.equal(ploss.context(DEV), t:context())
  end)

  it("round-trips every dtype between host and device, contiguous and strided", function()
    local vals = { { 0, 1, 2, 3 }, { 100, 7, 250, 5 }, { 9, 8, 6, 4 } }
    H.each(dtypes, dtypes, function(a, b)
      local h = ploss.tensor(vals, { dtype = a })
      local d = h:to(DEV, b)
      assert.are.equal(b, d:dtype())
      assert.are.same(vals, d:totable(), a .. " -> " .. b)
      assert.are.same(vals, d:to("cpu", a):totable())
      -- strided on both sides
      local dt = ploss.zeros({ 4, 3 }, { dtype = b, device = DEV })
      dt:copy(h:t())
      assert.are.same(h:t():totable(), dt:totable())
      local ht = ploss.zeros({ 4, 3 }, { dtype = a })
      ht:copy(d:t())
      assert.are.same(h:t():totable(), ht:totable())
      -- device to device, converting and strided
      local dd = ploss.zeros({ 3, 4 }, { dtype = a, device = DEV })
      dd:t():copy(d:t())
      assert.are.same(vals, dd:totable())
    end)
  end)

  it("copies non-contiguous device views (channels-last, narrowed)", function()
    H.seed(3)
    local x = ploss.randn({ 2, 5, 3, 4 }, { dtype = "f64" })
    local xd = x:to(DEV)
    local cl = xd:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3)
    assert.are.same({ 60, 1, 20, 5 }, cl:stride())
    H.assert_equal(cl, x)
    H.assert_equal(cl:contiguous(), x)
    H.assert_equal(xd:narrow(2, 2, 3):narrow(4, 2, 2), x:narrow(2, 2, 3):narrow(4, 2, 2))
  end)

  it("fill and item on the device", function()
    for _, dt in ipairs { "f32", "f16", "bf16", "f64", "i64", "i32", "u8" } do
      local t = ploss.empty({ 5, 5 }, { dtype = dt, device = DEV })
      t:fill(3)
      t:narrow(1, 2, 2):t():fill(7)
      assert.are.equal(7, t[2][5])
      assert.are.equal(3, t[4][1])
      assert.are.equal(3, t:select(1, 5):select(1, 5):item())
    end
  end)

  it("random numbers are the same on the CPU and the device", function()
    for _, dt in ipairs { "f32", "f16", "bf16", "f64" } do
      ploss.manual_seed(2024)
      local a = ploss.rand({ 1000 }, { dtype = dt })
      local b = ploss.randn({ 33, 31 }, { dtype = dt })
      ploss.manual_seed(2024)
      local ad = ploss.rand({ 1000 }, { dtype = dt, device = DEV })
      local bd = ploss.randn({ 33, 31 }, { dtype = dt, device = DEV })
      H.assert_equal(ad, a, { what = "rand " .. dt })
      -- Box–Muller goes through log and cos: the GPU's and glibc's differ in the last bit of
      -- an f64 (ploss.h says so); every narrower dtype rounds them to the same value
      if dt == "f64" then
        H.assert_close(bd, b, { rtol = 4e-16, atol = 0, what = "randn f64" })
      else
        H.assert_equal(bd, b, { what = "randn " .. dt })
      end
    end
    for _, dt in ipairs { "i64", "i32", "u8" } do
      H.assert_equal(ploss.randint(-5, 200, { 777 }, { dtype = dt == "u8" and "i64" or dt, seed = 4, device = DEV }),
        ploss.randint(-5, 200, { 777 }, { dtype = dt == "u8" and "i64" or dt, seed = 4 }), { what = "randint " .. dt })
    end
    H.assert_equal(ploss.randint(0, 256, { 300 }, { dtype = "u8", seed = 5, device = DEV }),
      ploss.randint(0, 256, { 300 }, { dtype = "u8", seed = 5 }))
    -- spans past 2^32 take all 128 bits of a draw (mulhi on the device, its C form here)
    H.assert_equal(ploss.randint(-2 ^ 62, 2 ^ 62 + 12345, { 4096 }, { seed = 6, device = DEV }),
      ploss.randint(-2 ^ 62, 2 ^ 62 + 12345, { 4096 }, { seed = 6 }), { what = "randint past 2^32" })
    -- strided destinations take counters in row-major order of the view
    local h = ploss.zeros({ 6, 4 }, { dtype = "f64" })
    local d = ploss.zeros({ 6, 4 }, { dtype = "f64", device = DEV })
    ploss.C.ploss_rand_normal(h:context(), h:t():dl(), 9, 0, 0, 1)
    ploss.C.ploss_rand_normal(d:context(), d:t():dl(), 9, 0, 0, 1)
    H.assert_close(d, h, { rtol = 4e-16, atol = 0, what = "strided randn f64" }) -- last bit: see above
  end)

  it("add_ (ploss_axpby) gives the CPU's bits: every float dtype pair, broadcast, strided", function()
    H.seed(31)
    local fl = { "f32", "f16", "bf16", "f64" }
    H.each(fl, fl, function(a, b)
      local x = ploss.randn({ 5, 7 }, { dtype = a })
      local y = ploss.randn({ 7, 5 }, { dtype = b })
      local r = ploss.randn({ 7 }, { dtype = b })
      local xd, yd, rd = x:to(DEV), y:to(DEV), r:to(DEV)
      x:add_(y:t(), 0.3):add_(r, -1.7):add_(x)
      xd:add_(yd:t(), 0.3):add_(rd, -1.7):add_(xd)
      H.assert_equal(xd, x, { what = a .. " += " .. b })
      -- a transposed self, alpha = 0 with a NaN in other (read: that element NaN), mul_
      local o = ploss.randn({ 7, 5 }, { dtype = b })
      o[2][3] = 0 / 0
      x:t():add_(o, 0):mul_(-0.75)
      xd:t():add_(o:to(DEV), 0):mul_(-0.75)
      H.assert_equal(xd, x, { what = a .. " alpha 0, mul_" })
      assert.is_true(x[3][2] ~= x[3][2])
      -- a number: added to every element, as on the CPU
      x:add_(2.5, -0.5)
      xd:add_(2.5, -0.5)
      H.assert_equal(xd, x, { what = a .. " + number" })
    end)
    -- integer label maps shifted by a number (through the host), strided; out of range: nothing written
    for _, dt in ipairs { "i64", "i32" } do
      local y = ploss.tensor({ { 1, 2, 3 }, { 4, 5, 19 } }, { dtype = dt })
      local yd = y:to(DEV)
      yd:t():add_(-1)
      assert.are.same({ { 0, 1, 2 }, { 3, 4, 18 } }, yd:totable())
    end
    local u = ploss.tensor({ 3, 0 }, { dtype = "u8" }):to(DEV)
    H.expect_error(function() u:add_(-1) end, "0 + -1 is outside u8's range")
    assert.are.same({ 3, 0 }, u:flat())
  end)

  it("composite criteria on the device give the CPU's values", function()
    H.seed(32)
    local x = H.random_logits({ 2, 5, 6, 7 }, { dtype = "f32" })
    local y = H.random_labels({ 2, 6, 7 }, 5)
    local function make()
      return ploss.MultiCriterion():add(ploss.CrossEntropyLoss{ label_smoothing = 0.1 }, 1)
        :add(ploss.LovaszSoftmaxLoss(), 0.5):add(ploss.GeneralizedSoftDiceLoss{ ignore_index = -100 }, 0.25)
    end
    local l, g = make()(x, y)
    local ld, gd = make()(x:to(DEV), y:to(DEV))
    H.assert_close(ld, l, { rtol = 1e-5 })
    H.assert_close(gd, g, { rtol = 1e-5, atol = 1e-7 })
    local function parallel() return ploss.ParallelCriterion(true):add(ploss.MSELoss(), 2):add(ploss.L1Loss(), 1) end
    local u, v, t = ploss.randn({ 33 }), ploss.randn({ 33 }), ploss.randn({ 33 })
    local pl, pg = parallel()({ u, v }, t) -- each its own criterion: the list of gradients is a buffer
    local pld, pgd = parallel()({ u:to(DEV), v:to(DEV) }, t:to(DEV))
    H.assert_close(pld, pl, { rtol = 1e-6 })
    H.assert_close(pgd[1], pg[1], { rtol = 1e-6 })
    H.assert_close(pgd[2], pg[2], { rtol = 1e-6 })
  end)

  it("counts device memory and frees it", function()
    collectgarbage()
    collectgarbage()
    ploss.synchronize(DEV)
    local before = ploss.memory_stats(DEV)
    local t = ploss.empty({ 2 ^ 20 }, { dtype = "f32", device = DEV })
    local mid = ploss.memory_stats(DEV)
    assert.is_true(mid.current_bytes - before.current_bytes >= 4 * 2 ^ 20)
    assert.are.equal(before.alloc_count + 1, mid.alloc_count)
    t:free()
    t:free()
    assert.are.equal(before.current_bytes, ploss.memory_stats(DEV).current_bytes)
    do
      for _ = 1, 20 do local _ = ploss.empty({ 2 ^ 18 }, { device = DEV }) end
    end
    collectgarbage()
    collectgarbage()
    assert.are.equal(before.current_bytes, ploss.memory_stats(DEV).current_bytes)
    ploss.reset_peak_memory(DEV)
    local s = ploss.memory_stats(DEV)
    assert.are.equal(s.current_bytes, s.peak_bytes)
  end)

  it("refuses mixed devices and unknown devices", function()
    if DEV == "cpu" then return end
    local h = ploss.zeros(3)
    local d = ploss.zeros(3, { device = DEV })
    -- ploss_copy takes host tensors on either side; fill needs the tensor's own context
    H.expect_error(function() ploss.check(ploss.C.ploss_fill(ploss.context("cpu"), d:dl(), 1)) end,
      "dst: expected a tensor on cpu (the context's device), got f32[3] on cuda:0")
    H.expect_error(function() ploss.zeros(2, { device = "cuda:" .. ploss.cuda_device_count() }) end, "does not exist")
    h:copy(d)
  end)

  it("float -> integer conversions check the device's values on the host", function()
    H.expect_error(function() ploss.tensor({ 1, 0 / 0 }, { device = DEV }):long() end, "to: element 2 (row-major) is nan, which i64")
    H.expect_error(function() ploss.tensor({ 2 ^ 32 + 3 }, { dtype = "f64", device = DEV }):int() end, "which i32 cannot hold")
    H.expect_error(function() ploss.tensor({ 1, 2, 3, 300 }, { dtype = "bf16", device = DEV }):view(2, 2):t():byte() end,
      "element 4 (row-major) is 300, which u8")
    H.expect_error(function() ploss.tensor({ 1 / 0 }, { dtype = "f16" }):to(DEV, "i32") end, "is inf, which i32")
    H.expect_error(function() ploss.tensor({ 2 ^ 31 }, { dtype = "i32", device = DEV }) end, "which i32 cannot hold")
    local d = ploss.tensor({ -2.5, 255.5, 7 }, { dtype = "f32", device = DEV })
    assert.are.same({ -2, 255, 7 }, d:long():totable())
    assert.are.same({ -2, 255, 7 }, d:to("cpu", "i32"):totable())
    assert.are.equal(DEV == "cpu" and "cpu" or "cuda:0", d:to("f16"):device())
  end)

  it("prints a summary of a large device tensor, as on the host", function()
    local h = ploss.randn({ 40, 50 }, { dtype = "f64", seed = 1 })
    local d = h:to(DEV)
    assert.are.equal(tostring(h):gsub("on cpu%]$", ""), (tostring(d):gsub("on " .. d:device() .. "%]$", "")))
    assert.matches("   ...   ", tostring(d:t()))
  end)

  it("device writes bump the version; DLPack round trips keep the device", function()
    local t = ploss.zeros({ 3, 4 }, { dtype = "f32", device = DEV })
    local v0 = t:version()
    t:narrow(2, 2, 2):fill(5)
    t:copy(ploss.ones({ 3, 4 }))
    assert.are.equal(v0 + 2, t:t():version())
    local m = t:narrow(1, 2, 2):to_dlpack()
    assert.are.equal(DEV == "cpu" and 1 or 2, tonumber(m.dl_tensor.device.device_type))
    local u = ploss.from_dlpack(m)
    assert.are.equal(t:device(), u:device())
    assert.are.equal(t:storage_id(), u:storage_id())
    -- a foreign producer: its deleter runs once, when the tensor is freed
    local ffi = require "ffi"
    local m2 = t:to_dlpack()
    local calls, orig = 0, m2.deleter
    local cb = ffi.cast("void (*)(DLManagedTensor *)", function(p) calls = calls + 1; orig(p) end)
    m2.deleter = cb
    local w = ploss.from_dlpack(m2)
    assert.are.equal(t:device(), w:device())
    w:select(1, 1):fill(2)
    assert.are.same({ { 2, 2, 2, 2 }, { 1, 1, 1, 1 }, { 1, 1, 1, 1 } }, t:totable())
    w:free()
    assert.are.equal(1, calls)
    cb:free()
    -- from_pointer over device memory (owned by another tensor)
    local p = ploss.from_pointer(t:dl().data, { 4 }, { device = t:device(), owner = t })
    assert.are.same({ 2, 2, 2, 2 }, p:totable())
  end)
end)
