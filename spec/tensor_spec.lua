-- Tensor spec (suite 'cpu'): constructors, dtypes, views, copies, RNG, memory counters,
-- freeing, printing.  CUDA counterparts live in spec/cuda_tensor_spec.lua.
local H = require "spec.helpers"
local ploss = H.ploss

describe("tensor constructors", function()
  it("builds from nested tables (default f32 on the CPU)", function()
    local t = ploss.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
    assert.are.same({ 2, 3 }, t:size())
    assert.are.equal(3, t:size(2))
    assert.are.equal(3, t:size(-1))
    assert.are.same({ 3, 1 }, t:stride())
    assert.are.equal(2, t:dim())
    assert.are.equal(6, t:numel())
    assert.are.equal(2, #t)
    assert.are.equal("f32", t:dtype())
    assert.are.equal("cpu", t:device())
    assert.is_true(t:is_contiguous())
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:totable())
    assert.are.same({ 1, 2, 3, 4, 5, 6 }, t:flat())
  end)

  it("takes every dtype and its aliases", function()
    for name, canon in pairs { f32 = "f32", float = "f32", f16 = "f16", half = "f16", bf16 = "bf16",
                               bfloat16 = "bf16", f64 = "f64", double = "f64", i64 = "i64", long = "i64",
                               i32 = "i32", int = "i32", u8 = "u8", byte = "u8" } do
      local t = ploss.tensor({ 1, 2, 250 }, { dtype = name })
      assert.are.equal(canon, t:dtype())
      assert.are.same({ 1, 2, 250 }, t:totable())
    end
    H.expect_error(function() ploss.tensor({ 1 }, { dtype = "f8" }) end, "dtype: expected one of f32")
  end)

  it("rounds to the dtype", function()
    assert.are.equal(1 + 2 ^ -10, ploss.tensor({ 1 + 2 ^ -10 }, { dtype = "f16" }):item())
    assert.are.equal(1, ploss.tensor({ 1 + 2 ^ -12 }, { dtype = "f16" }):item())
    assert.are.equal(1 + 2 ^ -7, ploss.tensor({ 1 + 2 ^ -7 }, { dtype = "bf16" }):item())
    assert.are.equal(1, ploss.tensor({ 1 + 2 ^ -9 }, { dtype = "bf16" }):item())
    assert.are.equal(0.1, ploss.tensor({ 0.1 }, { dtype = "f64" }):item())
    assert.are_not.equal(0.1, ploss.tensor({ 0.1 }):item())
    assert.are.equal(2 ^ 53, ploss.tensor({ 2 ^ 53 }, { dtype = "i64" }):item())
    assert.are.equal(-7, ploss.tensor({ -7.9 }, { dtype = "f64" }):to(nil, "i32"):to(nil, "f64"):item() - 0)
  end)

  it("keeps non-finite values", function()
    local t = ploss.tensor({ 0 / 0, 1 / 0, -1 / 0 }, { dtype = "f64" })
    local v = t:flat()
    assert.is_true(v[1] ~= v[1])
    assert.are.equal(math.huge, v[2])
    assert.are.equal(-math.huge, v[3])
    assert.matches("nan", tostring(t))
    assert.matches("%-inf", tostring(t))
  end)

  it("makes 0-d tensors from numbers and reshapes flat tables", function()
    local s = ploss.tensor(3.5)
    assert.are.equal(0, s:dim())
    assert.are.same({}, s:size())
    assert.are.equal(3.5, s:item())
    assert.are.equal(3.5, s:totable())
    local t = ploss.tensor({ 1, 2, 3, 4, 5, 6 }, { size = { 2, 3 } })
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:totable())
    H.expect_error(function() ploss.tensor({ 1, 2, 3 }, { size = { 2, 2 } }) end, "size has 4 elements, the data 3")
  end)

  it("refuses ragged and non-numeric tables", function()
    H.expect_error(function() ploss.tensor { { 1, 2 }, { 3 } } end, "ragged nested table")
    H.expect_error(function() ploss.tensor { { 1, 2 }, 3 } end, "ragged nested table")
    H.expect_error(function() ploss.tensor { "a" } end, "element is string")
    H.expect_error(function() ploss.tensor "abc" end, "expected a number, a table or a tensor")
  end)

  it("empty, zeros, ones, full take sizes as arguments or a table", function()
    assert.are.same({ 2, 3 }, ploss.empty(2, 3):size())
    assert.are.same({ 2, 3 }, ploss.empty({ 2, 3 }):size())
    assert.are.equal("f64", ploss.empty(2, 3, { dtype = "f64" }):dtype())
    assert.are.same({ 0, 0, 0, 0 }, ploss.zeros(2, 2):flat())
    assert.are.same({ 1, 1 }, ploss.ones({ 2 }, { dtype = "i32" }):flat())
    assert.are.same({ 7, 7, 7 }, ploss.full({ 3 }, 7, { dtype = "u8" }):flat())
    assert.are.same({ 0, 4 }, ploss.empty(0, 4):size())
    assert.are.equal(0, ploss.empty(0, 4):numel())
    H.expect_error(function() ploss.empty(-1, 2) end, "size 1 is -1")
    H.expect_error(function() ploss.empty(2.5) end, "size 1 is 2.5")
    H.expect_error(function() ploss.empty(1, 1, 1, 1, 1, 1, 1, 1, 1) end, "at most 8 dims")
    H.expect_error(function() ploss.empty(2, { device = "gpu" }) end, "device: expected 'cpu', 'cuda' or 'cuda:<id>'")
  end)

  it("copies a tensor through ploss.tensor and clone", function()
    local a = ploss.tensor { 1, 2, 3 }
    local b = ploss.tensor(a)
    local c = a:clone()
    a:fill(0)
    assert.are.same({ 1, 2, 3 }, b:flat())
    assert.are.same({ 1, 2, 3 }, c:flat())
    assert.are.equal("f64", ploss.tensor(b, { dtype = "f64" }):dtype())
  end)
end)

describe("tensor views", function()
  local function iota(...)
    local t = ploss.empty(...)
    local n = t:numel()
    local v = {}
    for i = 1, n do v[i] = i - 1 end
    return ploss.tensor(v, { size = t:size(), dtype = t:dtype() })
  end

  it("view shares storage and infers -1", function()
    local t = iota(2, 3, { dtype = "f64" })
    local v = t:view(3, 2)
    assert.are.same({ { 0, 1 }, { 2, 3 }, { 4, 5 } }, v:totable())
    assert.are.same({ 6 }, t:view(-1):size())
    assert.are.same({ 1, 6 }, t:view({ 1, -1 }):size())
    v:fill(9)
    assert.are.same({ 9, 9, 9, 9, 9, 9 }, t:flat())
    assert.are.equal(t:storage(), v:storage())
    H.expect_error(function() t:view(4, 2) end, "view: 4x2 has 8 elements, the tensor 6")
    H.expect_error(function() t:view(-1, -1) end, "only one size may be -1")
    H.expect_error(function() t:t():view(6) end, "not contiguous; call :contiguous() first")
    assert.are.same({ 0, 3, 1, 4, 2, 5 }, iota(2, 3):t():reshape(6):flat())
  end)

  it("permute, transpose and t reorder dims without copying", function()
    local t = iota(2, 3, 4)
    local p = t:permute(3, 1, 2)
    assert.are.same({ 4, 2, 3 }, p:size())
    assert.are.same({ 1, 12, 4 }, p:stride())
    assert.is_false(p:is_contiguous())
    assert.are.equal(t:storage(), p:storage())
    assert.are.equal(t:select(1, 2):select(1, 3):select(1, 4):item(), p:select(1, 4):select(1, 2):select(1, 3):item())
    local tr = t:transpose(1, 3)
    assert.are.same({ 4, 3, 2 }, tr:size())
    assert.are.same({ 1, 4, 12 }, tr:stride())
    assert.are.same({ { 0, 3 }, { 1, 4 }, { 2, 5 } }, iota(2, 3):t():totable())
    H.expect_error(function() t:permute(1, 2) end, "permute: expected 3 dims, got 2")
    H.expect_error(function() t:permute(1, 1, 2) end, "dim 1 repeated")
    H.expect_error(function() t:transpose(1, 4) end, "transpose: 4 is outside [1, 3]")
  end)

  it("contiguous copies only when needed", function()
    local t = iota(3, 4)
    assert.are.equal(t, t:contiguous())
    local c = t:t():contiguous()
    assert.are_not.equal(t:storage(), c:storage())
    assert.is_true(c:is_contiguous())
    assert.are.same(t:t():totable(), c:totable())
    -- no elements: contiguous whatever the strides (as in PyTorch), and viewed as such
    local e = ploss.zeros({ 2, 0 })
    assert.is_true(e:is_contiguous())
    assert.are.equal(e, e:contiguous())
    assert.are.same({ 0 }, e:view({ 0 }):size())
    assert.is_true(ploss.zeros({ 3, 0, 2 }):transpose(1, 3):is_contiguous())
    assert.is_false(iota(2, 3):t():is_contiguous())
  end)

  it("narrow, select, indexing and assignment", function()
    local t = iota(4, 5, { dtype = "i64" })
    local n = t:narrow(2, 2, 3)
    assert.are.same({ 4, 3 }, n:size())
    assert.are.same({ 5, 1 }, n:stride())
    assert.are.equal(1, n:storage_offset())
    assert.are.same({ 1, 2, 3 }, n:select(1, 1):flat())
    assert.are.same({ 10, 11, 12, 13, 14 }, t[3]:flat())
    assert.are.equal(12, t[3][3])
    t[2] = 7
    assert.are.same({ 7, 7, 7, 7, 7 }, t[2]:flat())
    t[1] = ploss.tensor({ 9, 8, 7, 6, 5 })
    assert.are.same({ 9, 8, 7, 6, 5 }, t[1]:flat())
    H.expect_error(function() local _ = t:narrow(1, 3, 3) end, "narrow: [3, 3+3) is outside dim 1 of size 4")
    H.expect_error(function() local _ = t[5] end, "select: index 5 is outside [1, 4]")
    H.expect_error(function() local _ = ploss.tensor(1)[1] end, "cannot index a 0-d tensor")
  end)

  it("unsqueeze, squeeze and expand", function()
    local t = iota(3)
    assert.are.same({ 1, 3 }, t:unsqueeze(1):size())
    assert.are.same({ 3, 1 }, t:unsqueeze(2):size())
    assert.are.same({ 3 }, t:unsqueeze(1):squeeze():size())
    local e = t:unsqueeze(1):expand(4, 3)
    assert.are.same({ 0, 1 }, e:stride())
    assert.are.same({ { 0, 1, 2 }, { 0, 1, 2 }, { 0, 1, 2 }, { 0, 1, 2 } }, e:totable())
    H.expect_error(function() e:fill(1) end, "dst") -- zero strides cannot be written
    H.expect_error(function() t:expand(4) end, "dim 1 has size 3, not 1")
  end)
end)

describe("tensor copies and conversions", function()
  local dtypes = { "f32", "f16", "bf16", "f64", "i64", "i32", "u8" }

  it("copy converts between every pair of dtypes", function()
    local vals = { 0, 1, 2, 3, 100, 250 }
    H.each(dtypes, dtypes, function(a, b)
      local src = ploss.tensor(vals, { dtype = a })
      local dst = ploss.empty({ #vals }, { dtype = b })
      assert.are.equal(dst, dst:copy(src))
      assert.are.same(vals, dst:flat(), a .. " -> " .. b)
    end)
    local f = ploss.tensor({ -2.7, 2.7 }, { dtype = "f64" })
    assert.are.same({ -2, 2 }, ploss.empty({ 2 }, { dtype = "i64" }):copy(f):flat()) -- truncation
  end)

  it("copy honours strides on both sides", function()
    local src = ploss.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "f64" })
    local dst = ploss.zeros({ 3, 2 }, { dtype = "f32" })
    dst:copy(src:t())
    assert.are.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, dst:totable())
    local big = ploss.zeros(4, 4)
    big:narrow(1, 2, 2):narrow(2, 2, 3):copy(src)
    assert.are.same({ 0, 0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0, 0, 0, 0 }, big:flat())
    H.expect_error(function() dst:copy(src) end, "dst: expected the shape of src")
    local a = ploss.zeros(4)
    H.expect_error(function() a:narrow(1, 1, 3):copy(a:narrow(1, 2, 3)) end, { "dst: overlaps the memory of src", "PLOSS_ERR_ALIAS" })
    a:copy(a) -- the same view: a no-op
    H.expect_error(function() dst:copy({ 1, 2 }) end, "copy: expected a tensor")
  end)

  it("to / type / float / double / long … convert, and return self when nothing changes", function()
    local t = ploss.tensor { 1.5, 2.5 }
    assert.are.equal(t, t:to("cpu"))
    assert.are.equal(t, t:float())
    assert.are.equal(t, t:type("f32"))
    assert.are.equal("f32", t:type())
    assert.are.equal("f64", t:double():dtype())
    assert.are.equal("f16", t:half():dtype())
    assert.are.equal("bf16", t:bfloat16():dtype())
    assert.are.same({ 1, 2 }, t:long():flat())
    assert.are.equal("i32", t:int():dtype())
    assert.are.equal("u8", t:byte():dtype())
    assert.are.equal("f64", t:to("cpu", "double"):dtype())
    assert.are.equal(t, t:cpu())
    -- PyTorch's cpu:0 is the CPU; there is no other
    assert.are.equal(t, t:to("cpu:0"))
    assert.are.equal("cpu", ploss.zeros({ 2 }, { device = "cpu:0" }):device())
    H.expect_error(function() t:to("cpu:1") end, "to: device: expected 'cpu', 'cuda' or 'cuda:<id>', got 'cpu:1' " ..
      "(one CPU device: 'cpu' or 'cpu:0')")
  end)

  it("fill and zero", function()
    local t = ploss.empty(2, 2, { dtype = "f64" })
    assert.are.equal(t, t:fill(0.25))
    assert.are.same({ 0.25, 0.25, 0.25, 0.25 }, t:flat())
    t:zero()
    assert.are.same({ 0, 0, 0, 0 }, t:flat())
    t:t():narrow(1, 1, 1):fill(3)
    assert.are.same({ { 3, 0 }, { 3, 0 } }, t:totable())
    H.expect_error(function() t:fill("x") end, "fill: expected a number")
    -- PyTorch's names of the three
    assert.are.equal(t, t:fill_(2))
    assert.are.same({ 2, 2, 2, 2 }, t:flat())
    assert.are.equal(t, t:copy_(ploss.tensor({ { 1, 2 }, { 3, 4 } })))
    assert.are.same({ 1, 2, 3, 4 }, t:flat())
    assert.are.equal(t, t:zero_())
    assert.are.same({ 0, 0, 0, 0 }, t:flat())
  end)

  it("item needs one element", function()
    assert.are.equal(4, ploss.tensor({ { 4 } }):item())
    H.expect_error(function() ploss.tensor({ 1, 2 }):item() end, "item: expected a one-element tensor, got 2")
  end)
end)

describe("random numbers", function()
  it("the same seed gives the same numbers; the offset advances", function()
    ploss.manual_seed(123)
    local a = ploss.rand(100, { dtype = "f64" })
    local b = ploss.rand(100, { dtype = "f64" })
    assert.are.same({ 123, 200 }, { ploss.rng_state() })
    ploss.manual_seed(123)
    H.assert_equal(ploss.rand(100, { dtype = "f64" }), a)
    H.assert_equal(ploss.rand(100, { dtype = "f64" }), b)
    assert.are_not.same(a:flat(), b:flat())
  end)

  it("explicit seed/offset do not touch the global generator", function()
    ploss.manual_seed(1)
    local x = ploss.randn({ 10 }, { dtype = "f64", seed = 99 })
    assert.are.same({ 1, 0 }, { ploss.rng_state() })
    H.assert_equal(ploss.randn({ 10 }, { dtype = "f64", seed = 99 }), x)
    -- element k takes counter offset + k: a shifted offset gives shifted numbers
    local y = ploss.randn({ 5 }, { dtype = "f64", seed = 99, offset = 5 })
    H.assert_equal(y, x:narrow(1, 6, 5))
  end)

  it("numbers do not depend on the dtype's layout or shape (row-major counters)", function()
    local a = ploss.rand({ 3, 4 }, { dtype = "f64", seed = 5 })
    local b = ploss.rand({ 12 }, { dtype = "f64", seed = 5 })
    H.assert_equal(a:view(12), b)
  end)

  it("uniform numbers lie in [low, high), normal ones have the right moments", function()
    local u = ploss.rand({ 20000 }, { dtype = "f64", seed = 7, low = -2, high = 3 }):flat()
    local mn, mx, s = math.huge, -math.huge, 0
    for _, v in ipairs(u) do mn = math.min(mn, v); mx = math.max(mx, v); s = s + v end
    assert.is_true(mn >= -2 and mx < 3)
    assert.is_true(math.abs(s / #u - 0.5) < 0.05)
    local n = ploss.randn({ 20000 }, { dtype = "f64", seed = 8, mean = 1, std = 2 }):flat()
    local m, v2 = 0, 0
    for _, x in ipairs(n) do m = m + x end
    m = m / #n
    for _, x in ipairs(n) do v2 = v2 + (x - m) ^ 2 end
    assert.is_true(math.abs(m - 1) < 0.05, "mean " .. m)
    assert.is_true(math.abs(math.sqrt(v2 / #n) - 2) < 0.05)
  end)

  it("randint is uniform over spans past 2^32 (no modulo bias), the 64-bit modulo up to 2^32", function()
    -- [0, 3·2^61): 64 random bits modulo the span gave its thirds 3/8, 3/8, 1/4
    local ffi = require "ffi"
    local n = 300000
    local v = ploss.randint(0, 3 * 2 ^ 61, { n }, { seed = 1 })
    local p, c = ffi.cast("int64_t *", v:dl().data), { 0, 0, 0 }
    for i = 0, n - 1 do
      local k = tonumber(p[i] / (2LL ^ 61)) + 1
      c[k] = c[k] + 1
    end
    for k = 1, 3 do assert.is_true(math.abs(c[k] / n - 1 / 3) < 0.005, k .. ": " .. c[k] / n) end
    -- a span up to 2^32 keeps the 64-bit draw modulo the span (the numbers of earlier
    -- releases): for spans 2^k ≤ 2^32, the draw's low k bits, those of the span 2^32's draw
    local full = ploss.randint(0, 2 ^ 32, { 64 }, { seed = 9 }):flat()
    for _, k in ipairs { 4, 31 } do
      local part = ploss.randint(0, 2 ^ k, { 64 }, { seed = 9 }):flat()
      for i = 1, 64 do assert.are.equal(full[i] % 2 ^ k, part[i], "k = " .. k .. ", element " .. i) end
    end
  end)

  it("uniform numbers never round up to high in a narrow dtype", function()
    -- a draw just below high rounds to high in f32, f16 and bf16 unless held below it: at
    -- seed 1234, offset 95036815 the f32 draw is 0.99999997…, nearest f32 1
    local one = ploss.rand({ 1 }, { dtype = "f32", seed = 1234, offset = 95036815 }):item()
    assert.are.equal(1 - 2 ^ -24, one)
    assert.are.equal(ploss.rand({ 1 }, { dtype = "f64", seed = 1234, offset = 95036815 }):item() > 1 - 2 ^ -25, true)
    for _, case in ipairs { { "bf16", 1 - 2 ^ -8 }, { "f16", 1 - 2 ^ -11 } } do
      local mx = -math.huge
      for _, v in ipairs(ploss.rand({ 100000 }, { dtype = case[1], seed = 1234 }):flat()) do mx = math.max(mx, v) end
      assert.are.equal(case[2], mx, case[1]) -- the greatest value below 1 is drawn, 1 never
    end
    -- [0.1, 0.1001) in f16 holds 0.10003662109375 and 0.10009765625 only (0.1 rounds below it)
    for _, v in ipairs(ploss.rand({ 200 }, { dtype = "f16", seed = 3, low = 0.1, high = 0.1001 }):flat()) do
      assert.is_true(v == 0.10003662109375 or v == 0.10009765625, tostring(v))
    end
    H.expect_error(function() ploss.rand({ 2 }, { dtype = "f16", low = 1.0001, high = 1.0002 }) end,
      "low, high: no f16 value lies in [1.0001, 1.0002)")
    -- negative ranges and subnormals: the bounds are values of the dtype on both sides
    local mn, mx = math.huge, -math.huge
    for _, v in ipairs(ploss.rand({ 20000 }, { dtype = "f16", seed = 5, low = -1, high = -0.5 }):flat()) do
      mn, mx = math.min(mn, v), math.max(mx, v)
    end
    assert.are.same({ -1, -0.5 - 2 ^ -11 }, { mn, mx })
    for _, v in ipairs(ploss.rand({ 100 }, { dtype = "f32", seed = 6, low = 0, high = 1e-45 }):flat()) do
      assert.are.equal(0, v) -- 1e-45 rounds to the least subnormal 2^-149, not below high: 0 is the only value
    end
    -- a range past the dtype's finite values would put the draws beyond them on its largest
    H.expect_error(function() ploss.rand({ 2 }, { dtype = "f16", low = 0, high = 1e5 }) end,
      "low, high: [0, 100000) reaches beyond the finite values of f16")
    H.expect_error(function() ploss.rand({ 2 }, { dtype = "bf16", low = -1e39, high = 0 }) end,
      "reaches beyond the finite values of bf16")
    H.expect_error(function() ploss.rand({ 2 }, { high = math.huge }) end, "high: expected a finite number, got inf")
    H.expect_error(function() ploss.rand({ 2 }, { low = -1e308, high = 1e308 }) end, "high − low overflows")
    H.expect_error(function() ploss.randn({ 2 }, { mean = 0 / 0 }) end, "mean: expected a finite number")
    H.expect_error(function() ploss.randn({ 2 }, { std = math.huge }) end, "std: expected a finite std >= 0")
  end)

  it("randint covers [low, high) in any integer or float dtype", function()
    for _, dt in ipairs { "i64", "i32", "u8", "f32" } do
      local t = ploss.randint(3, 8, { 1000 }, { dtype = dt, seed = 3 })
      assert.are.equal(dt, t:dtype())
      local seen = {}
      for _, v in ipairs(t:flat()) do
        assert.is_true(v >= 3 and v < 8 and v == math.floor(v))
        seen[v] = true
      end
      for k = 3, 7 do assert.is_true(seen[k]) end
    end
    assert.are.equal("i64", ploss.randint(0, 2, { 3 }):dtype())
    H.expect_error(function() ploss.randint(5, 5, { 3 }) end, "high: expected high > low")
    H.expect_error(function() ploss.rand({ 3 }, { dtype = "i64" }) end,
      "rand: opts.dtype: expected a float dtype (f32, f16, bf16, f64), got 'i64'")
    H.expect_error(function() ploss.randn(3, { dtype = "u8" }) end, "randn: opts.dtype: expected a float dtype")
    H.expect_error(function() ploss.manual_seed(-1) end, "manual_seed: expected an integer >= 0")
  end)

  it("rounds the same numbers into every float dtype", function()
    local x64 = ploss.randn({ 50 }, { dtype = "f64", seed = 11 })
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local x = ploss.randn({ 50 }, { dtype = dt, seed = 11 })
      H.assert_equal(x, x64:to(nil, dt))
    end
  end)
end)

describe("memory", function()
  it("counts allocations and frees on the CPU", function()
    collectgarbage()
    collectgarbage()
    local before = ploss.memory_stats("cpu")
    local t = ploss.empty({ 1000 }, { dtype = "f64" })
    local mid = ploss.memory_stats("cpu")
    assert.is_true(mid.current_bytes - before.current_bytes >= 8000)
    assert.are.equal(before.alloc_count + 1, mid.alloc_count)
    assert.is_true(mid.peak_bytes >= mid.current_bytes)
    t:free()
    assert.are.equal(before.current_bytes, ploss.memory_stats("cpu").current_bytes)
    t:free() -- idempotent
    assert.are.equal(before.current_bytes, ploss.memory_stats("cpu").current_bytes)
    ploss.reset_peak_memory("cpu")
    local s = ploss.memory_stats("cpu")
    assert.are.equal(s.current_bytes, s.peak_bytes)
  end)

  it("the garbage collector frees unreferenced tensors", function()
    collectgarbage()
    collectgarbage()
    local before = ploss.memory_stats("cpu").current_bytes
    do
      for _ = 1, 50 do local _ = ploss.empty({ 10000 }, { dtype = "f32" }) end
    end
    collectgarbage()
    collectgarbage()
    assert.are.equal(before, ploss.memory_stats("cpu").current_bytes)
  end)

  it("views keep their storage alive", function()
    collectgarbage()
    local before = ploss.memory_stats("cpu").current_bytes
    local v
    do
      local t = ploss.full({ 100, 100 }, 3, { dtype = "f64" })
      v = t:narrow(1, 50, 2):t()
    end
    collectgarbage()
    collectgarbage()
    assert.is_true(ploss.memory_stats("cpu").current_bytes >= before + 80000)
    assert.are.same({ 3, 3 }, v[1]:flat())
    v = nil
    collectgarbage()
    collectgarbage()
    assert.are.equal(before, ploss.memory_stats("cpu").current_bytes)
  end)

  it("a freed tensor and its views refuse to be used", function()
    local t = ploss.zeros(4)
    local v = t:view(2, 2)
    t:free()
    H.expect_error(function() v:fill(1) end, "tensor: its storage was freed")
    H.expect_error(function() t:totable() end, "storage was freed")
    assert.are.equal("[ploss.Tensor (freed)]", tostring(v))
  end)
end)

describe("printing", function()
  it("prints values then a footer, like torch", function()
    local t = ploss.tensor { { 1, 2.5, 3 }, { 4, 5, -6 } }
    assert.are.equal("  1.0000   2.5000   3.0000\n  4.0000   5.0000  -6.0000\n[ploss.Tensor f32 2x3 on cpu]", tostring(t))
    assert.are.equal(" 1\n 2\n[ploss.Tensor i64 2 on cpu]", tostring(ploss.tensor({ 1, 2 }, { dtype = "i64" })))
    assert.are.equal("7\n[ploss.Tensor f64 scalar on cpu]", tostring(ploss.tensor(7, { dtype = "f64" })))
    assert.are.equal("[ploss.Tensor f32 0x3 on cpu]", tostring(ploss.empty(0, 3)))
    local s = tostring(ploss.zeros(2, 2, 2))
    assert.matches("%(1,%.,%.%) =", s)
    assert.matches("%(2,%.,%.%) =", s)
    assert.are.equal("   0\n   0\n   0\n ...\n   0\n   0\n   0\n[ploss.Tensor f32 2000 on cpu]", tostring(ploss.zeros(2000)))
    assert.matches("e%-05", tostring(ploss.tensor({ 1e-5, 1 }, { dtype = "f64" })))
  end)

  it("prints rows wider than 80 characters in blocks of columns, as Torch7", function()
    local rows = {}
    for i = 1, 2 do
      rows[i] = {}
      for j = 1, 18 do rows[i][j] = i * 100 + j end
    end
    local want = { "Columns 1 to 16" }
    for i = 1, 2 do
      local line = {}
      for j = 1, 16 do line[j] = tostring(i * 100 + j) end
      want[#want + 1] = " " .. table.concat(line, "  ")
    end
    want[#want + 1] = ""
    want[#want + 1] = "Columns 17 to 18"
    want[#want + 1] = " 117  118"
    want[#want + 1] = " 217  218"
    want[#want + 1] = "[ploss.Tensor i64 2x18 on cpu]"
    local text = tostring(ploss.tensor(rows, { dtype = "i64" }))
    assert.are.equal(table.concat(want, "\n"), text)
    for line in text:gmatch("[^\n]+") do assert.is_true(#line <= 80, line) end
    -- 16 columns fit (79 characters): one block, no header
    assert.is_nil(tostring(ploss.tensor({ rows[1] }, { dtype = "i64" }):narrow(2, 1, 16)):find("Column"))
    -- a summary's "..." takes a place in the blocks; the headers name original columns
    local wide = tostring(ploss.zeros(2, 3000, { dtype = "f64" }):add_(ploss.tensor({ 0.5 }, { dtype = "f64" })))
    assert.is_nil(wide:find("Column")) -- 7 entries of 6 characters
    local one = tostring(ploss.full({ 1, 11 }, 1.25, { dtype = "f64" })) -- 6 characters a value: 10 a line
    assert.matches("^Columns 1 to 10\n", one)
    assert.matches("\n\nColumn 11\n 1%.2500\n%[ploss", one)
  end)
end)

describe("devices", function()
  it("parses device names", function()
    assert.are.same({ "cpu", 1, 0 }, { ploss.parse_device("cpu") })
    assert.are.same({ "cuda:0", 2, 0 }, { ploss.parse_device("cuda") })
    assert.are.same({ "cuda:3", 2, 3 }, { ploss.parse_device("cuda:3") })
    H.expect_error(function() ploss.parse_device("cuda:x") end, "device: expected")
  end)

  it("caches one context per device", function()
    assert.are.equal(ploss.context("cpu"), ploss.context())
    assert.are.equal(ploss.context("cpu"), ploss.tensor({ 1 }):context())
    ploss.synchronize("cpu")
  end)

  it("a CPU device has no stream: set_stream takes nil only", function()
    local ffi = require "ffi"
    assert.is_nil(ploss.stream("cpu"))
    ploss.set_stream("cpu", nil)
    ploss.set_stream("cpu", ffi.cast("void *", nil)) -- a NULL pointer is the default stream
    assert.is_nil(ploss.stream("cpu"))
    H.expect_error(function() ploss.set_stream("cpu", ffi.cast("void *", 0x1000)) end,
      { "set_stream", "a CPU context takes no CUDA stream", "PLOSS_ERR_INVALID_ARGUMENT" })
    H.expect_error(function() ploss.set_stream("cpu", 0x1000) end,
      "set_stream: stream: expected a cdata pointer (a cudaStream_t) or nil, got number")
    H.expect_error(function() ploss.set_stream("cpu", ffi.new("int64_t", 1)) end, "got ctype<int64_t>")
    H.expect_error(function() ploss.set_stream("gpu", nil) end, "device: expected")
    assert.is_nil(ploss.stream("cpu")) -- unchanged by the refused calls
  end)

  it("without CUDA, CUDA tensors are refused with a clear message", function()
    if ploss.cuda_available() then return end
    local built = ploss.C.ploss_built_with_cuda() ~= 0
    local err = H.expect_error(function() ploss.empty(2, { device = "cuda" }) end, "ploss_ctx_create(cuda:0)")
    if not built then assert.matches("without CUDA", err) end
  end)
end)
