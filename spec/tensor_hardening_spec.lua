-- Tensor hardening spec (suite 'cpu'): integer arguments checked where they enter from Lua,
-- self-containing and holed tables, checked integer conversions, to(dtype), the printed
-- summary of large tensors, storage version counters, and zero-copy exchange (DLPack,
-- foreign pointers).
local H = require "spec.helpers"
local ffi = require "ffi"
local ploss = H.ploss

local NAN, INF = 0 / 0, math.huge

describe("integer arguments", function()
  it("narrow refuses a start or length that is not an integer", function()
    local t = ploss.zeros({ 4 })
    H.expect_error(function() t:narrow(1, NAN, 2) end, "narrow: start is nan, expected an integer")
    H.expect_error(function() t:narrow(1, 1.5, 2) end, "narrow: start is 1.5, expected an integer")
    H.expect_error(function() t:narrow(1, INF, 0) end, "narrow: start is inf")
    H.expect_error(function() t:narrow(1, 1, NAN) end, "narrow: length is nan, expected an integer >= 0")
    H.expect_error(function() t:narrow(1, 1, 2.5) end, "narrow: length is 2.5")
    H.expect_error(function() t:narrow(1, 1, -1) end, "narrow: length is -1")
    H.expect_error(function() t:narrow(1, "1", 2) end, "narrow: start is '1', expected an integer")
    H.expect_error(function() t:narrow(1.5, 1, 2) end, "narrow: dim is 1.5, expected an integer")
    H.expect_error(function() t:narrow(1, 4, 2) end, "narrow: [4, 4+2) is outside dim 1 of size 4")
    -- the data pointer of a valid narrow lands on the element asked for
    local r = ploss.tensor({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 }, { 10, 11, 12 } })
    assert.are.same({ { 4, 5, 6 }, { 7, 8, 9 } }, r:narrow(1, 2, 2):totable())
    assert.are.same({}, r:narrow(1, 5, 0):flat()) -- an empty slice just past the end
  end)

  it("expand refuses sizes that are not integers and keeps dims given as -1", function()
    local t = ploss.tensor({ { 7, 8, 9 } })
    H.expect_error(function() t:expand(2.5, 3) end, "expand: size 1 is 2.5, expected an integer >= -1")
    H.expect_error(function() t:expand(NAN, 3) end, "expand: size 1 is nan")
    H.expect_error(function() t:expand(-2, 3) end, "expand: size 1 is -2")
    H.expect_error(function() t:expand(2 ^ 60, 3) end, "has more than 2^53 elements")
    assert.are.same({ { 7, 8, 9 }, { 7, 8, 9 } }, t:expand(2, -1):totable())
    assert.are.same({ 0, 3 }, t:expand(0, 3):size())
    -- new dims in front (PyTorch's), a 0-d tensor too; -1 only where the tensor has the dim
    assert.are.same({ { { 7, 8, 9 } }, { { 7, 8, 9 } } }, t:expand(2, 1, 3):totable())
    assert.are.same({ 0, 3, 1 }, t:expand(2, 1, 3):stride())
    assert.are.same({ 3, 3, 1 }, t:expand(1, 1, 3):stride()) -- a new dim left at size 1: PyTorch's stride
    assert.are.same({ { 5, 5 }, { 5, 5 } }, ploss.tensor(5):expand(2, 2):totable())
    H.expect_error(function() t:expand(-1, 1, 3) end, "expand: size 1 is -1, which only a dim the tensor has can take")
    H.expect_error(function() t:expand(3) end, "expand: expected at least 2 sizes (one per dim, new dims in front), got 1")
  end)

  it("shapes refuse non-finite, huge and spanning sizes", function()
    H.expect_error(function() ploss.empty({ 0, 2 ^ 63 }) end, "shape: size 2 is 9.2233720368548e+18, expected an integer >= 0")
    H.expect_error(function() ploss.empty({ 0, INF }) end, "shape: size 2 is inf")
    H.expect_error(function() ploss.empty({ NAN }) end, "shape: size 1 is nan")
    H.expect_error(function() ploss.empty({ 0, 2 ^ 62 }) end,
      "shape: sizes 0x4611686018427387904: their row-major strides reach past 2^53 elements")
    H.expect_error(function() ploss.zeros({ 2 }):view(2 ^ 63) end, "view: size 1 is 9.2233720368548e+18")
    H.expect_error(function() ploss.zeros({ 2 }):view(NAN) end, "view: size 1 is nan")
    H.expect_error(function() ploss.tensor({ 1, 2 }, { size = { 2, NAN } }) end, "tensor: size 2 is nan")
  end)

  it("dims and indices are integers everywhere", function()
    local t = ploss.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    H.expect_error(function() t:size(INF) end, "dim: dim is inf, expected an integer")
    H.expect_error(function() t:select(1, NAN) end, "select: index is nan, expected an integer")
    H.expect_error(function() t:select(1, 1.5) end, "select: index is 1.5")
    H.expect_error(function() local _ = t[1.5] end, "select: index is 1.5")
    H.expect_error(function() t[NAN] = 1 end, "select: index is nan")
    H.expect_error(function() t:unsqueeze(1.5) end, "unsqueeze: dim is 1.5, expected an integer")
    H.expect_error(function() t:unsqueeze(NAN) end, "unsqueeze: dim is nan")
    H.expect_error(function() t:transpose(1, 0 / 0) end, "transpose: dim is nan")
    H.expect_error(function() t:permute(1, 1.5) end, "permute: dim is 1.5")
    H.expect_error(function() t:squeeze(NAN) end, "squeeze: dim is nan")
    assert.are.same({ 4, 5, 6 }, t:select(1, 2):flat())
    assert.are.same({ 2, 1, 3 }, t:unsqueeze(-2):size())
    -- a dim out of range is named as given (not as counted back from the end)
    H.expect_error(function() t:size(-5) end, "dim: -5 is outside [1, 2] (or [-2, -1] from the end) for a 2-d tensor")
    H.expect_error(function() t:select(-3, 1) end, "select: -3 is outside [1, 2]")
    H.expect_error(function() t:unsqueeze(-4) end,
      "unsqueeze: dim -4 is outside [1, 3] (or [-3, -1] from the end) for a 2-d tensor")
    -- the factories: the arguments they take, each named
    H.expect_error(function() ploss.zeros({ 2, 3 }, { device = "cpu" }, 5) end,
      "zeros: takes (sizes [, opts]), got a number as argument 3")
    H.expect_error(function() ploss.empty_like({ 2, 3 }) end, "empty_like: expected a ploss tensor first")
    H.expect_error(function() ploss.full({ 2 }) end, "full: value: expected a number (full(sizes, value [, opts])), got nil")
    H.expect_error(function() ploss.tensor(3):size(1) end, "dim: 1: a 0-d tensor has no dims")
  end)

  it("an element write to an expanded view is refused: one write would change every row", function()
    local base = ploss.tensor({ 1 })
    local e = base:expand(3)
    H.expect_error(function() e[2] = 7 end,
      "t[2] = value: the tensor's elements share memory (dim 1 has stride 0: an expanded view)")
    assert.are.same({ 1, 1, 1 }, e:flat())
    local c = e:contiguous()
    c[2] = 7
    assert.are.same({ 1, 7, 1 }, c:flat())
  end)

  it("random generators check their integer arguments", function()
    H.expect_error(function() ploss.randint(0, NAN, { 3 }) end, "randint: high is nan, expected an integer")
    H.expect_error(function() ploss.randint(0.5, 3, { 3 }) end, "randint: low is 0.5")
    H.expect_error(function() ploss.rand({ 3 }, { seed = INF }) end, "rand: seed is inf, expected an integer >= 0")
    H.expect_error(function() ploss.randn({ 3 }, { seed = 1, offset = -1 }) end, "randn: offset is -1")
    H.expect_error(function() ploss.manual_seed(INF) end, "manual_seed: expected an integer >= 0, got inf")
    -- the number options: numbers only (a boolean was taken as 1 or as the default)
    H.expect_error(function() ploss.randn({ 2 }, { mean = true }) end, "randn: opts.mean: expected a number, got true")
    H.expect_error(function() ploss.randn({ 2 }, { std = false }) end, "randn: opts.std: expected a number, got false")
    H.expect_error(function() ploss.rand({ 2 }, { low = "0" }) end, "rand: opts.low: expected a number, got '0'")
    -- f16 rounds integers of magnitude 65520 and above to inf: refused, as rand's range is
    H.expect_error(function() ploss.randint(0, 100000, { 4 }, { dtype = "f16" }) end,
      "randint: low, high: [0, 100000) reaches beyond the finite values of f16")
    H.expect_error(function() ploss.randint(-65520, 0, { 4 }, { dtype = "f16" }) end, "reaches beyond the finite")
    for _, v in ipairs(ploss.randint(-65519, 65520, { 64 }, { dtype = "f16", seed = 1 }):flat()) do
      assert(v > -65520 and v < 65520, tostring(v))
    end
    -- a refused draw leaves the global generator where it was
    ploss.manual_seed(3)
    local _, before = ploss.rng_state()
    H.expect_error(function() ploss.rand({ 4 }, { low = 2, high = 1 }) end, "rand: high: expected high > low")
    assert.are.same({ 3, before }, { ploss.rng_state() })
    local a = ploss.rand({ 4 })
    ploss.manual_seed(3)
    H.assert_equal(a, ploss.rand({ 4 }))
  end)
end)

describe("tables given to ploss.tensor", function()
  it("a table that contains itself is refused", function()
    local t = {}
    t[1] = t
    H.expect_error(function() ploss.tensor(t) end, "tensor: the nested table contains itself (at dim 2)")
    local u = { {}, {} }
    u[1][1] = u
    H.expect_error(function() ploss.tensor(u) end, "contains itself (at dim 3)")
  end)

  it("nesting deeper than 8 dims is refused", function()
    H.expect_error(function() ploss.tensor({ { { { { { { { { 1 } } } } } } } } }) end,
      "tensor: the table is nested deeper than 8 dims")
    assert.are.same({ 1, 1, 1, 1, 1, 1, 1, 1 }, ploss.tensor({ { { { { { { { 1 } } } } } } } }):size())
  end)

  it("a list with a hole is refused", function()
    H.expect_error(function() ploss.tensor({ 1, nil, 3 }) end, "tensor: the list at dim 1 has a hole (index 2 is nil)")
    local t = { 1 }
    t[3] = 3
    H.expect_error(function() ploss.tensor(t) end, "tensor: the list at dim 1 has a hole (index 2 is nil)")
    H.expect_error(function() ploss.tensor({ { 1, 2, 3 }, { 4, nil, 6 } }) end, "tensor: the list at dim 2 has a hole")
    -- non-integer keys are not list entries
    assert.are.same({ 1, 2 }, ploss.tensor({ 1, 2, name = "x" }):flat())
  end)
end)

describe("integer conversions", function()
  it("the constructor refuses values an integer dtype cannot hold", function()
    H.expect_error(function() ploss.tensor({ 2 ^ 32 + 3 }, { dtype = "i32" }) end,
      "tensor: element 1 (row-major) is 4294967299, which i32 cannot hold")
    H.expect_error(function() ploss.tensor({ 1, NAN }, { dtype = "i64" }) end, "element 2 (row-major) is nan, which i64")
    H.expect_error(function() ploss.tensor({ -INF }, { dtype = "i64" }) end, "is -inf, which i64")
    H.expect_error(function() ploss.tensor({ 2 ^ 63 }, { dtype = "i64" }) end, "which i64 cannot hold")
    H.expect_error(function() ploss.tensor({ 256 }, { dtype = "u8" }) end, "is 256, which u8")
    H.expect_error(function() ploss.tensor({ -1 }, { dtype = "u8" }) end, "is -1, which u8")
    H.expect_error(function() ploss.tensor(NAN, { dtype = "i32" }) end, "is nan, which i32")
    -- a fraction is refused, not truncated (a label 1.5 is not class 1)
    H.expect_error(function() ploss.tensor({ 0, 1.5 }, { dtype = "i64" }) end,
      "tensor: element 2 (row-major) is 1.5, not an integer (dtype i64)")
    H.expect_error(function() ploss.tensor({ -2 ^ 31 - 0.5 }, { dtype = "i32" }) end, "is -2147483648.5, not an integer")
    H.expect_error(function() ploss.tensor({ 255.5 }, { dtype = "u8" }) end, "is 255.5, not an integer")
    -- the edges of each range
    assert.are.same({ -2 ^ 31, 2 ^ 31 - 1 }, ploss.tensor({ -2 ^ 31, 2 ^ 31 - 1 }, { dtype = "i32" }):flat())
    assert.are.same({ 0, 255 }, ploss.tensor({ 0, 255 }, { dtype = "u8" }):flat())
    assert.are.same({ -2 ^ 63, 2 ^ 63 - 1024 }, ploss.tensor({ -2 ^ 63, 2 ^ 63 - 1024 }, { dtype = "i64" }):flat())
    -- a float tensor converted truncates toward zero, as PyTorch's .to(torch.int32)
    assert.are.same({ -2 ^ 31, 2 ^ 31 - 1 }, ploss.tensor({ -2 ^ 31 - 0.5, 2 ^ 31 - 0.5 }, { dtype = "f64" }):int():flat())
    assert.are.same({ 0, 255 }, ploss.tensor({ -0.5, 255.5 }, { dtype = "f64" }):byte():flat())
  end)

  it("fill, full and element assignment take only values the dtype holds, writing nothing else", function()
    local t = ploss.tensor({ 3, 4 }, { dtype = "i32" })
    H.expect_error(function() t:fill(NAN) end, "fill: value: NaN is not a value of i32")
    for _, v in ipairs { 1.5, -0.5, NAN, INF, 2 ^ 31, -2 ^ 31 - 1 } do
      H.expect_error(function() t:fill(v) end, { "PLOSS_ERR_INVALID_ARGUMENT", "fill: value: ", "is not a value of i32" })
    end
    H.expect_error(function() t[1] = 2.5 end, "t[1] = value: value: 2.5 is not a value of i32 (an integer in [-2147483648, 2147483648))")
    H.expect_error(function() t[2] = "3" end, "t[2] = value: expected a number or a tensor, got string")
    assert.are.same({ 3, 4 }, t:flat())
    H.expect_error(function() ploss.full({ 2 }, 256, { dtype = "u8" }) end, "value: 256 is not a value of u8")
    H.expect_error(function() ploss.full({ 2 }, -1, { dtype = "u8" }) end, "value: -1 is not a value of u8")
    H.expect_error(function() ploss.full({ 2 }, 2 ^ 63, { dtype = "i64" }) end, "is not a value of i64")
    assert.are.same({ -2 ^ 31, -2 ^ 31 }, t:fill(-2 ^ 31):flat())
    assert.are.same({ 2 ^ 31 - 1, 2 ^ 31 - 1 }, t:fill(2 ^ 31 - 1):flat())
    assert.are.same({ 255 }, ploss.full({ 1 }, 255, { dtype = "u8" }):flat())
    assert.are.same({ -2 ^ 63, 2 ^ 63 - 1024 }, { ploss.full({ 1 }, -2 ^ 63, { dtype = "i64" }):item(),
      ploss.full({ 1 }, 2 ^ 63 - 1024, { dtype = "i64" }):item() })
    -- float dtypes take any number within their finite range, ±inf and NaN; a finite value
    -- beyond it would be stored as ±inf: refused, as PyTorch's fill_ (f16's largest is 65504)
    assert.are.same({ 2.5 }, ploss.full({ 1 }, 2.5, { dtype = "f64" }):flat())
    local h = ploss.tensor({ 1, 2 }, { dtype = "f16" })
    H.expect_error(function() h:fill(1e6) end, "fill: value: 1000000 exceeds f16's largest finite value 65504")
    H.expect_error(function() ploss.full({ 2 }, -65505, { dtype = "f16" }) end,
      "value: -65505 exceeds f16's largest finite value -65504")
    H.expect_error(function() ploss.full({ 2 }, 1e39, { dtype = "bf16" }) end, "exceeds bf16's largest finite value")
    H.expect_error(function() ploss.full({ 2 }, -1e39, { dtype = "f32" }) end,
      "exceeds f32's largest finite value -3.4028234663852886e+38")
    assert.are.same({ 1, 2 }, h:flat())
    assert.are.same({ 65504, -INF }, { h:fill(65504):flat()[1], h:fill(-INF):flat()[2] })
    assert.are.same({ 1e39 }, ploss.full({ 1 }, 1e39, { dtype = "f64" }):flat())
    assert.is_true(ploss.full({ 1 }, NAN, { dtype = "bf16" }):item() ~= ploss.full({ 1 }, NAN, { dtype = "bf16" }):item())
  end)

  it("copy into an integer tensor and randint take only values the dtype holds, writing nothing", function()
    local u = ploss.tensor({ 7, 8, 9 }, { dtype = "u8" })
    H.expect_error(function() u:copy(ploss.tensor({ 300, 1.5, -1 }, { dtype = "f64" })) end,
      "copy: element 1 (row-major) is 300, which u8 cannot hold")
    H.expect_error(function() u:copy(ploss.tensor({ 1, NAN, 2 }, { dtype = "f32" })) end, "element 2 (row-major) is nan")
    H.expect_error(function() u[1] = -1 end, "value: -1 is not a value of u8")
    assert.are.same({ 7, 8, 9 }, u:flat())
    -- in range, a float is truncated toward zero (PyTorch's copy_ does the same)
    assert.are.same({ 255, 1, 0 }, u:copy(ploss.tensor({ 255.9, 1.5, -0.5 }, { dtype = "f64" })):flat())
    H.expect_error(function() ploss.randint(-5, 3, { 4 }, { dtype = "u8" }) end,
      { "PLOSS_ERR_INVALID_ARGUMENT", "randint: low, high: [-5, 3) does not fit u8 (values 0 to 255)" })
    H.expect_error(function() ploss.randint(0, 257, { 4 }, { dtype = "u8" }) end, "[0, 257) does not fit u8")
    H.expect_error(function() ploss.randint(0, 2 ^ 31 + 1, { 4 }, { dtype = "i32" }) end,
      "[0, 2147483649) does not fit i32 (values -2147483648 to 2147483647)")
    local r = ploss.randint(250, 256, { 64 }, { dtype = "u8" }):flat()
    for _, v in ipairs(r) do assert.is_true(v >= 250 and v <= 255) end
    local s = ploss.randint(-2 ^ 31, -2 ^ 31 + 2, { 64 }, { dtype = "i32" }):flat()
    for _, v in ipairs(s) do assert.is_true(v == -2 ^ 31 or v == -2 ^ 31 + 1) end
  end)

  it(":int(), :long(), :byte() and :to(nil, dtype) of a float tensor refuse such values", function()
    H.expect_error(function() ploss.tensor({ 2 ^ 32 + 3 }):int() end, "to: element 1 (row-major) is 4294967296, which i32")
    H.expect_error(function() ploss.tensor({ 0, NAN }):long() end, "to: element 2 (row-major) is nan, which i64")
    H.expect_error(function() ploss.tensor({ INF }, { dtype = "f16" }):to(nil, "i32") end, "is inf, which i32")
    H.expect_error(function() ploss.tensor({ 2 ^ 63 }, { dtype = "f64" }):long() end, "which i64 cannot hold")
    H.expect_error(function() ploss.tensor({ 256 }, { dtype = "bf16" }):byte() end, "is 256, which u8")
    H.expect_error(function() ploss.tensor({ 1, 2, 3, 300 }):view(2, 2):t():byte() end, "element 4 (row-major) is 300")
    H.expect_error(function() ploss.tensor(ploss.tensor({ NAN }), { dtype = "i64" }) end, "is nan, which i64")
    -- ploss.tensor takes integers only, from a float tensor as from a Lua table (:to truncates)
    H.expect_error(function() ploss.tensor(ploss.tensor({ 1, -2.5 }), { dtype = "i64" }) end,
      "tensor: element 2 (row-major) of the f32 tensor is -2.5, not an integer (dtype i64)")
    H.expect_error(function() ploss.tensor(ploss.tensor({ 0.5 }, { dtype = "bf16" }), { dtype = "u8" }) end,
      "of the bf16 tensor is 0.5, not an integer (dtype u8)")
    assert.are.same({ 1, -2 }, ploss.tensor(ploss.tensor({ 1, -2 }, { dtype = "f64" }), { dtype = "i32" }):flat())
    -- values in range convert (truncated), from any float dtype and any layout
    assert.are.same({ -2 ^ 31, 2 ^ 31 - 1 }, ploss.tensor({ -2 ^ 31 - 0.5, 2 ^ 31 - 0.5 }, { dtype = "f64" }):int():flat())
    assert.are.same({ 2 ^ 63 - 1024 }, ploss.tensor({ 2 ^ 63 - 1024 }, { dtype = "f64" }):long():flat())
    assert.are.same({ 1, 3, 2, 4 }, ploss.tensor({ 1.5, 2.5, 3.5, 4.5 }):view(2, 2):t():to(nil, "i32"):flat())
    assert.are.same({ 255, 0 }, ploss.tensor({ 255.9, -0.9 }, { dtype = "f16" }):byte():flat())
  end)
end)

describe("to(dtype)", function()
  it("type() takes Torch7's tensor type names: the dtype, and the CPU or the GPU", function()
    local t = ploss.tensor({ 1, 2 })
    local d = t:type("torch.DoubleTensor")
    assert.are.same({ "f64", "cpu", { 1, 2 } }, { d:dtype(), d:device(), d:flat() })
    assert.are.equal("i64", t:type("torch.LongTensor"):dtype())
    assert.are.equal("u8", t:type("torch.ByteTensor"):dtype())
    assert.are.equal("f16", t:type("torch.HalfTensor"):dtype())
    H.expect_error(function() t:type("torch.BogusTensor") end, "type: unknown Torch7 type name 'torch.BogusTensor'")
    H.expect_error(function() t:type("torch.Tensor") end, "type: unknown Torch7 type name 'torch.Tensor'")
    if ploss.cuda_available() then
      local c = t:type("torch.CudaDoubleTensor")
      assert.are.same({ "f64", true }, { c:dtype(), c:is_cuda() })
      assert.are.same({ "f32", "cpu" }, { c:type("torch.FloatTensor"):dtype(), c:type("torch.FloatTensor"):device() })
    end
  end)

  it("takes a dtype name in the device position", function()
    local t = ploss.tensor({ 1.5, -2 })
    assert.are.equal("f16", t:to("f16"):dtype())
    assert.are.equal("f64", t:to("double"):dtype())
    assert.are.same({ 1, -2 }, t:to("long"):flat())
    assert.are.equal(t, t:to("f32"))
    assert.are.equal("cpu", t:to("bf16"):device())
    -- one name that is neither a dtype nor a device: said so, with the dtypes listed
    H.expect_error(function() t:to("f8") end,
      "to: 'f8' is neither a dtype (f32, f16, bf16, f64, i64, i32, u8, or an alias: float, double, long, …) nor a " ..
      "device ('cpu', 'cuda', 'cuda:<id>')", t)
    H.expect_error(function() t:to("F32") end, "to: 'F32' is neither a dtype (f32, f16, bf16, f64, i64, i32, u8, " ..
      "or an alias: float, double, long, …) nor a device ('cpu', 'cuda', 'cuda:<id>') (did you mean 'f32'?)")
    H.expect_error(function() t:to("cuda:x") end, "to: device: expected 'cpu', 'cuda' or 'cuda:<id>', got 'cuda:x'")
  end)
end)

describe("printing a large tensor", function()
  local function iota(n, opts) return ploss.tensor((function()
    local v = {}
    for i = 1, n do v[i] = i end
    return v
  end)(), opts) end

  it("shows i64 values exactly, also past 2^53 (beyond a Lua number's integers)", function()
    local buf = ffi.new("int64_t[3]", { 9007199254740993LL, -9223372036854775807LL - 1LL, 5 })
    local t = ploss.from_pointer(buf, { 3 }, { dtype = "i64" })
    assert.are.equal("     9007199254740993\n -9223372036854775808\n                    5\n[ploss.Tensor i64 3 on cpu]",
      tostring(t))
    -- summarised and strided too
    local lbuf = ffi.new("int64_t[2000]", { 9007199254740993LL })
    local long = ploss.from_pointer(lbuf, { 2000 }, { dtype = "i64" })
    assert.is_truthy(tostring(long):find("9007199254740993", 1, true))
    assert.are.equal(" 1  3\n 2  4\n[ploss.Tensor i64 2x2 on cpu]", tostring(ploss.tensor({ { 1, 2 }, { 3, 4 } },
      { dtype = "i64" }):t()))
    assert(buf and lbuf) -- the memory lives as long as the views
  end)

  it("shows the head and tail of a 1-d tensor", function()
    -- a long dim costs nothing to summarise (an expanded view of 2^40 elements)
    assert.are.equal("   5\n   5\n   5\n ...\n   5\n   5\n   5\n[ploss.Tensor i64 1099511627776 on cpu]",
      tostring(ploss.tensor({ 5 }, { dtype = "i64" }):expand(2 ^ 40)))
    assert.are.equal(table.concat({
      "    1", "    2", "    3", "  ...", " 1999", " 2000", " 2001", "[ploss.Tensor i32 2001 on cpu]" }, "\n"),
      tostring(iota(2001, { dtype = "i32" })))
  end)

  it("shows head and tail rows and columns of a matrix", function()
    assert.are.equal(table.concat({
      "    1     2     3   ...    48    49    50",
      "   51    52    53   ...    98    99   100",
      "  101   102   103   ...   148   149   150",
      "  ...",
      " 1851  1852  1853   ...  1898  1899  1900",
      " 1901  1902  1903   ...  1948  1949  1950",
      " 1951  1952  1953   ...  1998  1999  2000",
      "[ploss.Tensor f64 40x50 on cpu]" }, "\n"), tostring(iota(2000, { dtype = "f64" }):view(40, 50)))
    -- a strided view gathers the right elements
    local rows = {}
    for _, i in ipairs { 1, 2, 3, 48, 49, 50 } do
      rows[#rows + 1] = string.format(" %4d  %4d  %4d   ...  %4d  %4d  %4d", i, 50 + i, 100 + i, 1850 + i, 1900 + i, 1950 + i)
      if i == 3 then rows[#rows + 1] = "  ..." end
    end
    rows[#rows + 1] = "[ploss.Tensor f32 50x40 on cpu]"
    assert.are.equal(table.concat(rows, "\n"), tostring(iota(2000):view(40, 50):t()))
    -- a dim of at most 6 is shown whole
    assert.matches("^    1     2     3   ...   998   999  1000\n 1001  1002  1003   ...  1998  1999  2000\n%[",
      tostring(iota(2000):view(2, 1000)))
  end)

  it("labels the matrices of more dims with their positions, and marks the ones left out", function()
    local s = tostring(iota(2000):view(10, 4, 50))
    assert.matches("^%(1,%.,%.%) =\n    1     2     3   ...    48    49    50\n", s)
    assert.matches("\n%(3,%.,%.%) =\n", s)
    assert.not_matches("%(4,%.,%.%)", s)
    assert.matches("\n\n...\n\n%(8,%.,%.%) =\n", s)
    assert.matches("\n 1951  1952  1953   ...  1998  1999  2000\n%[ploss.Tensor f32 10x4x50 on cpu%]$", s)
    -- every dim cut: 2^3 blocks gathered
    local c = tostring(iota(1000 * 8):view(20, 20, 20))
    assert.matches("\n%(20,%.,%.%) =\n 7601  7602  7603   ...  7618  7619  7620\n", c)
    assert.matches("\n 7981  7982  7983   ...  7998  7999  8000\n%[ploss.Tensor f32 20x20x20 on cpu%]$", c)
  end)
end)

describe("storage version counters", function()
  it("every write through a tensor or any view of it bumps the shared version", function()
    local t = ploss.zeros({ 3, 4 }, { dtype = "f64" })
    local v = t:narrow(1, 2, 1):t()
    local function bumps(f, what)
      local before = t:version()
      f()
      assert.are.equal(before + 1, t:version(), what)
      assert.are.equal(t:version(), v:version(), what)
    end
    bumps(function() t:fill(1) end, "fill")
    bumps(function() v:zero() end, "zero through a view")
    bumps(function() t:copy(ploss.ones({ 3, 4 })) end, "copy")
    bumps(function() v:copy(ploss.full({ 4, 1 }, 5)) end, "copy into a view")
    bumps(function() t[2] = 7 end, "t[i] = number")
    bumps(function() t[3] = ploss.tensor({ 1, 2, 3, 4 }) end, "t[i] = tensor")
    bumps(function() t:bump_version() end, "bump_version")
    assert.are.same({ { 1, 1, 1, 1 }, { 7, 7, 7, 7 }, { 1, 2, 3, 4 } }, t:totable())
    -- reads, views and failed writes leave it alone
    local before = t:version()
    local _ = t:totable(), t:clone(), t:view(12), t:contiguous(), tostring(t), t:to("f32")
    pcall(function() t:fill("x") end)
    pcall(function() t:copy(ploss.zeros(2)) end)
    pcall(function() t:narrow(1, 1, 1):expand(3, 4):fill(1) end)
    assert.are.equal(before, t:version())
    -- another storage has its own counter
    local c = t:clone()
    local cv = c:version()
    c:fill(0)
    assert.are.equal(before, t:version())
    assert.are.equal(cv + 1, c:version())
  end)

  it("random generators bump the version of the tensor they fill", function()
    assert.are.equal(1, ploss.rand({ 3 }, { seed = 1 }):version())
    assert.are.equal(1, ploss.randn({ 3 }, { seed = 1 }):version())
    assert.are.equal(1, ploss.randint(0, 3, { 3 }, { seed = 1 }):version())
  end)

  it("bump_version returns the tensor and works for writes made through C", function()
    local t = ploss.zeros({ 2 }, { dtype = "f64" })
    local v0 = t:version()
    ffi.cast("double *", t:dl().data)[0] = 5 -- a write ploss cannot see
    assert.are.equal(v0, t:version())
    assert.are.equal(t, t:bump_version())
    assert.are.equal(v0 + 1, t:version())
  end)

  it("storage_id is shared by views and distinct between storages, even after a free", function()
    local t = ploss.zeros({ 4, 4 })
    local ids = { [t:storage_id()] = true }
    assert.are.equal(t:storage_id(), t:select(1, 2):storage_id())
    assert.are.equal(t:storage_id(), t:view(16):narrow(1, 3, 2):storage_id())
    assert.are.equal(t:storage_id(), t:t():storage_id())
    assert.are.equal("number", type(t:storage_id()))
    for _ = 1, 20 do
      local u = ploss.zeros({ 4, 4 })
      assert.is_nil(ids[u:storage_id()])
      ids[u:storage_id()] = true
      u:free()
    end
    assert.are_not.equal(t:storage_id(), t:clone():storage_id())
  end)
end)

describe("zero-copy exchange", function()
  local function settle()
    for _ = 1, 4 do collectgarbage() end
  end

  -- A DLManagedTensor built in Lua over `data`, whose deleter counts its calls.
  -- opts: code, bits, lanes (f64), device_type (1), strides (list), byte_offset, ndim.
  local callbacks = {}
  local function managed(data, sizes, opts)
    opts = opts or {}
    local r = { calls = 0 }
    r.shape = ffi.new("int64_t[8]", sizes)
    r.m = ffi.new("DLManagedTensor")
    local dl = r.m.dl_tensor
    dl.data = data
    dl.device.device_type, dl.device.device_id = opts.device_type or 1, 0
    dl.ndim = opts.ndim or #sizes
    dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = opts.code or 2, opts.bits or 64, opts.lanes or 1
    dl.shape = r.shape
    if opts.strides then
      r.strides = ffi.new("int64_t[8]", opts.strides)
      dl.strides = r.strides
    end
    dl.byte_offset = opts.byte_offset or 0
    r.cb = ffi.cast("void (*)(DLManagedTensor *)", function() r.calls = r.calls + 1 end)
    callbacks[#callbacks + 1] = r.cb
    r.m.deleter = r.cb
    r.p = ffi.cast("DLManagedTensor *", r.m) -- what from_dlpack takes (r.m keeps the struct alive)
    return r
  end

  teardown(function()
    settle()
    for _, cb in ipairs(callbacks) do cb:free() end
  end)

  -- Wrap an export's deleter so that its calls are counted (a foreign consumer's view).
  local function counted(m)
    local r = { calls = 0 }
    local orig = m.deleter
    r.cb = ffi.cast("void (*)(DLManagedTensor *)", function(p) r.calls = r.calls + 1; orig(p) end)
    callbacks[#callbacks + 1] = r.cb
    m.deleter = r.cb
    return r
  end

  it("to_dlpack describes the tensor's memory", function()
    local t = ploss.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "f16" })
    local v = t:t():narrow(1, 2, 2)
    local m = v:to_dlpack()
    local dl = m.dl_tensor
    assert.are.equal(2, dl.ndim)
    assert.are.same({ 2, 2 }, { tonumber(dl.shape[0]), tonumber(dl.shape[1]) })
    assert.are.same({ 1, 3 }, { tonumber(dl.strides[0]), tonumber(dl.strides[1]) })
    assert.are.same({ 2, 16, 1 }, { dl.dtype.code, dl.dtype.bits, dl.dtype.lanes })
    assert.are.same({ 1, 0 }, { tonumber(dl.device.device_type), dl.device.device_id })
    assert.are.equal(ffi.cast("char *", t:dl().data) + 2, ffi.cast("char *", dl.data) + dl.byte_offset)
    m.deleter(m)
  end)

  it("round trip through ploss's own export: the same storage, values and version", function()
    settle()
    local before = ploss.memory_stats("cpu").current_bytes
    local t = ploss.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "f64" })
    local u = ploss.from_dlpack(t:t():to_dlpack())
    assert.are.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, u:totable())
    assert.are.equal(t:storage_id(), u:storage_id())
    u:fill(7)
    assert.are.same({ 7, 7, 7, 7, 7, 7 }, t:flat())
    assert.are.equal(t:version(), u:version())
    assert.are.equal(0, t:storage().exports) -- the export was released by from_dlpack
    t, u = nil, nil
    settle()
    assert.are.equal(before, ploss.memory_stats("cpu").current_bytes)
  end)

  it("round trip through a foreign deleter: same values, same memory, the deleter runs exactly once", function()
    for _, dt in ipairs { "f32", "f16", "bf16", "f64", "i64", "i32", "u8" } do
      local t = ploss.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = dt })
      local m = t:narrow(2, 2, 2):to_dlpack()
      local r = counted(m)
      local u = ploss.from_dlpack(m)
      assert.are.same({ { 2, 3 }, { 5, 6 } }, u:totable(), dt)
      assert.are.equal(dt, u:dtype())
      assert.are_not.equal(t:storage_id(), u:storage_id()) -- a foreign storage: its own counter
      u:select(2, 1):fill(9)
      assert.are.same({ { 1, 9, 3 }, { 4, 9, 6 } }, t:totable(), dt) -- the same memory
      assert.are.equal(0, r.calls)
      u:free()
      assert.are.equal(1, r.calls, dt)
      u:free()
      settle()
      assert.are.equal(1, r.calls, dt)
      H.expect_error(function() u:totable() end, "storage was freed")
      assert.are.same({ { 1, 9, 3 }, { 4, 9, 6 } }, t:totable(), dt) -- the producer is untouched
    end
    -- collected without a free: the deleter runs once, from the garbage collector
    local t = ploss.tensor({ 1, 2, 3 }, { dtype = "f64" })
    local m = t:to_dlpack()
    local r = counted(m)
    do
      local u = ploss.from_dlpack(m)
      assert.are.same({ 1, 2, 3 }, u:narrow(1, 1, 3):flat())
    end
    settle()
    assert.are.equal(1, r.calls)
    assert.are.equal(0, t:storage().exports)
  end)

  it("an export keeps the storage alive until its deleter runs; free() refuses meanwhile", function()
    settle()
    local before = ploss.memory_stats("cpu").current_bytes
    local t = ploss.tensor({ 10, 20, 30 }, { dtype = "f64" })
    local m = t:to_dlpack()
    H.expect_error(function() t:view(3):free() end, "free: the storage is exported by to_dlpack")
    t = nil
    settle()
    assert.is_true(ploss.memory_stats("cpu").current_bytes > before)
    local p = ffi.cast("double *", m.dl_tensor.data)
    assert.are.same({ 10, 20, 30 }, { p[0], p[1], p[2] })
    m.deleter(m)
    assert.are.equal(before, ploss.memory_stats("cpu").current_bytes)
    local f = ploss.zeros(2)
    local m2 = f:to_dlpack()
    m2.deleter(m2)
    f:free() -- allowed again once the export is deleted
    assert.is_true(f:is_freed())
  end)

  it("from_dlpack wraps a foreign tensor with its strides and byte offset", function()
    local buf = ffi.new("double[6]", { 1, 2, 3, 4, 5, 6 })
    local r = managed(buf, { 2, 2 }, { strides = { 1, 2 }, byte_offset = 8 })
    local t = ploss.from_dlpack(r.p)
    assert.are.same({ { 2, 4 }, { 3, 5 } }, t:totable())
    t:fill(0)
    assert.are.same({ 1, 0, 0, 0, 0, 6 }, { buf[0], buf[1], buf[2], buf[3], buf[4], buf[5] })
    -- negative strides: the element at data is the first
    local r2 = managed(buf + 5, { 3 }, { strides = { -2 } })
    local n = ploss.from_dlpack(r2.p)
    assert.are.same({ 6, 0, 0 }, n:flat())
    assert.are.same({ 0, 0 }, n:narrow(1, 2, 2):flat())
    t:free()
    n:free()
    assert.are.same({ 1, 1 }, { r.calls, r2.calls })
    -- an empty tensor with no data becomes an ordinary empty tensor; the deleter runs at once
    local r3 = managed(nil, { 0, 4 })
    local e = ploss.from_dlpack(r3.p)
    assert.are.same({ 0, 4 }, e:size())
    assert.are.equal(1, r3.calls)
  end)

  it("from_dlpack refuses bad input and then takes nothing", function()
    local buf = ffi.new("double[4]")
    local cases = {
      { {}, {}, "from_dlpack: expected a DLManagedTensor * (or void *), got table" },
      { managed(nil, { 2 }), "the data pointer is NULL" },
      { managed(buf, { 2 }, { code = 5, bits = 64 }), "unsupported dtype (code 5, bits 64, lanes 1)" },
      { managed(buf, { 2 }, { code = 2, bits = 8 }), "unsupported dtype (code 2, bits 8, lanes 1)" },
      { managed(buf, { 2 }, { lanes = 2 }), "unsupported dtype (code 2, bits 64, lanes 2)" },
      { managed(buf, { 2 }, { device_type = 7 }), "unsupported device (type 7, id 0)" },
      { managed(buf, { -2 }), "from_dlpack: size 1 is -2, expected 0 .. 2^53" },
      { managed(buf, { 2 }, { byte_offset = 4 }), "is not aligned to the 8 bytes of f64" },
      { managed(ffi.cast("char *", buf) + 2, { 2 }, { code = 0, bits = 32 }), "is not aligned to the 4 bytes of i32" },
      { managed(buf, { 2 }, { ndim = 9 }), "from_dlpack: ndim is 9, expected 0 .. 8" },
      { managed(buf, { 2 }, { strides = { 2 ^ 60 } }), "from_dlpack: stride 1 is" },
    }
    for i, c in ipairs(cases) do
      if i == 1 then
        H.expect_error(function() ploss.from_dlpack(c[1]) end, c[3])
      else
        H.expect_error(function() ploss.from_dlpack(c[1].p) end, c[2])
        assert.are.equal(0, c[1].calls, c[2])
      end
    end
    H.expect_error(function() ploss.from_dlpack(nil) end, "expected a DLManagedTensor * (or void *), got nil")
    H.expect_error(function() ploss.from_dlpack(ffi.cast("DLManagedTensor *", nil)) end, "pointer is NULL")
    H.expect_error(function() ploss.from_dlpack(ffi.new("int[2]")) end, "expected a DLManagedTensor * (or void *), got ctype<int [2]>")
    -- a void * (as another library hands it over) is taken
    local r = managed(buf, { 4 })
    assert.are.equal(4, ploss.from_dlpack(ffi.cast("void *", r.p)):numel())
    -- the same pointer object twice: refused, not read (ploss frees its own export at once)
    local e = ploss.tensor({ 1, 2, 3 }):to_dlpack()
    assert.are.same({ 1, 2, 3 }, ploss.from_dlpack(e):flat())
    H.expect_error(function() ploss.from_dlpack(e) end,
      "from_dlpack: this DLManagedTensor was taken by an earlier from_dlpack (a DLPack tensor is consumed once")
  end)

  it("from_pointer wraps memory without copying and keeps its owner alive", function()
    local owner = { buf = ffi.new("float[6]", { 1, 2, 3, 4, 5, 6 }) }
    local alive = setmetatable({ owner }, { __mode = "v" })
    local t = ploss.from_pointer(owner.buf, { 2, 3 }, { owner = owner })
    local v = t:t()
    owner = nil
    settle()
    assert.is_not_nil(alive[1]) -- kept by the tensor
    assert.are.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, v:totable())
    local before = t:version()
    t[2] = 0
    assert.are.equal(before + 1, v:version())
    assert.are.same({ 1, 2, 3, 0, 0, 0 }, { alive[1].buf[0], alive[1].buf[1], alive[1].buf[2],
      alive[1].buf[3], alive[1].buf[4], alive[1].buf[5] })
    t, v = nil, nil
    settle()
    assert.is_nil(alive[1]) -- released with the last tensor
    -- strides (any sign), dtype; free() drops the owner but leaves the memory alone
    local buf = ffi.new("int32_t[4]", { 1, 2, 3, 4 })
    local r = ploss.from_pointer(buf + 3, { 2, 2 }, { dtype = "i32", strides = { -2, -1 }, owner = buf })
    assert.are.same({ { 4, 3 }, { 2, 1 } }, r:totable())
    r:free()
    assert.are.same({ 1, 2, 3, 4 }, { buf[0], buf[1], buf[2], buf[3] })
  end)

  it("from_pointer refuses bad input", function()
    local buf = ffi.new("double[4]")
    H.expect_error(function() ploss.from_pointer(nil, { 2 }) end, "from_pointer: ptr: expected a cdata pointer, got nil")
    H.expect_error(function() ploss.from_pointer(ffi.cast("intptr_t", buf), { 2 }) end,
      "from_pointer: ptr: expected a cdata pointer, got ctype<int64_t>")
    H.expect_error(function() ploss.from_pointer(ffi.cast("void *", nil), { 2 }) end, "from_pointer: the data pointer is NULL")
    H.expect_error(function() ploss.from_pointer(buf, { -1 }) end, "from_pointer: size 1 is -1, expected an integer >= 0")
    H.expect_error(function() ploss.from_pointer(buf, { 2.5 }) end, "from_pointer: size 1 is 2.5")
    H.expect_error(function() ploss.from_pointer(buf, 4) end, "from_pointer: expected a list of sizes, got number")
    H.expect_error(function() ploss.from_pointer(ffi.cast("char *", buf) + 4, { 2 }, { dtype = "f64" }) end,
      "is not aligned to the 8 bytes of f64")
    H.expect_error(function() ploss.from_pointer(buf, { 2, 2 }, { strides = { 1 } }) end, "strides: expected a list of 2 strides")
    H.expect_error(function() ploss.from_pointer(buf, { 2 }, { strides = { 0 / 0 } }) end, "from_pointer: stride 1 is nan")
    H.expect_error(function() ploss.from_pointer(buf, { 2 }, { dtype = "f8" }) end, "dtype: expected one of")
    H.expect_error(function() ploss.from_pointer(buf, { 2 }, { device = "gpu" }) end, "device: expected")
    H.expect_error(function() ploss.from_pointer(buf, { 3, 2 }, { strides = { 2 ^ 52, 2 ^ 52 } }) end, "span more than 2^53")
  end)
end)

describe("C int flags", function()
  local C = ploss.C
  local D = require("ploss.description")

  -- the status and message of the C call, on the CPU context
  local function status_of(fn, ...)
    local st = fn(...)
    return tonumber(st), ffi.string(C.ploss_last_error())
  end

  it("every loss's boolean option takes 0 or 1 only (2 and -1 would be true to C)", function()
    local checked = 0
    for _, d in ipairs(D.all()) do
      local fn, args = C["ploss_" .. d.name .. "_fused"], D.arguments(d, "fused")
      for _, f in ipairs(d.fields) do
        if f.type == "bool" then
          for _, v in ipairs { 2, -1 } do
            local o = ffi.new(d.opts_type)
            C[d.opts_init](o)
            o[f.name] = v
            local a = { ploss.context("cpu") } -- the options are checked before any tensor
            for i, arg in ipairs(args) do a[i + 1] = arg[2] == "opts" and o or nil end
            local st, msg = status_of(fn, unpack(a, 1, #args + 1))
            assert.are.equal(C.PLOSS_ERR_INVALID_ARGUMENT, st, d.name .. "." .. f.name)
            assert.are.equal("opts." .. f.name .. ": " .. v .. " is neither 0 (false) nor 1 (true)", msg)
            checked = checked + 1
          end
        end
      end
    end
    assert.is_true(checked > 60, "bool options checked: " .. checked)
  end)

  it("the optimisers', EMA's, the activations' and the context's flags too", function()
    local ctx = ploss.context("cpu")
    local p, g = ploss.zeros({ 2 }), ploss.zeros({ 2 })
    local sgd = ffi.new("ploss_sgd_opts"); C.ploss_sgd_opts_init(sgd); sgd.nesterov = 2
    local st, msg = status_of(C.ploss_sgd_step, ctx, p:dl(), g:dl(), nil, 1, sgd)
    assert.are.same({ C.PLOSS_ERR_INVALID_ARGUMENT, "opts.nesterov: 2 is neither 0 (false) nor 1 (true)" }, { st, msg })
    local adam = ffi.new("ploss_adam_opts"); C.ploss_adam_opts_init(adam); adam.decoupled_weight_decay = -1
    st, msg = status_of(C.ploss_adam_step, ctx, p:dl(), g:dl(), p:clone():dl(), p:clone():dl(), 1, adam)
    assert.are.same({ C.PLOSS_ERR_INVALID_ARGUMENT, "opts.decoupled_weight_decay: -1 is neither 0 (false) nor 1 (true)" },
      { st, msg })
    local ema = ffi.new("ploss_ema_opts"); C.ploss_ema_opts_init(ema); ema.warmup = 3
    local list = ffi.new("DLTensor *[1]", { p:dl() })
    st, msg = status_of(C.ploss_ema_update, ctx, list, ffi.cast("const DLTensor *const *", list), 1, 0, ema)
    assert.are.same({ C.PLOSS_ERR_INVALID_ARGUMENT, "opts.warmup: 3 is neither 0 (false) nor 1 (true)" }, { st, msg })
    st, msg = status_of(C.ploss_activation_forward, ctx, 0, p:dl(), g:dl(), 2)
    assert.are.same({ C.PLOSS_ERR_INVALID_ARGUMENT, "inplace: 2 is neither 0 (false) nor 1 (true)" }, { st, msg })
    local own = ffi.new("ploss_ctx_t *[1]")
    ploss.check(C.ploss_ctx_create(ffi.new("DLDevice", { 1, 0 }), own))
    st, msg = status_of(C.ploss_ctx_set_deterministic, own[0], 2)
    assert.are.same({ C.PLOSS_ERR_INVALID_ARGUMENT, "deterministic: 2 is neither 0 (false) nor 1 (true)" }, { st, msg })
    assert.are.equal(1, C.ploss_ctx_deterministic(own[0]))
    C.ploss_ctx_destroy(own[0])
    -- a CUDA device's memory counters without CUDA in the build: refused, not zeros
    if C.ploss_built_with_cuda() == 0 then
      local stats = ffi.new("ploss_memory_stats")
      st, msg = status_of(C.ploss_memory_stats_get, ffi.new("DLDevice", { 2, 0 }), stats)
      assert.are.same({ C.PLOSS_ERR_UNSUPPORTED,
        "device: a CUDA device, but this ploss library was built without CUDA" }, { st, msg })
      st = status_of(C.ploss_memory_reset_peak, ffi.new("DLDevice", { 2, 0 }))
      assert.are.equal(C.PLOSS_ERR_UNSUPPORTED, st)
    end
    -- the CPU is device 0 (the header's DEVICE for an unknown id)
    st, msg = status_of(C.ploss_ctx_create, ffi.new("DLDevice", { 1, 5 }), own)
    assert.are.same({ C.PLOSS_ERR_DEVICE, "device: cpu:5 does not exist (the CPU is device 0)" }, { st, msg })
    -- and so for the memory counters: another id is refused, not read as the CPU's
    local stats = ffi.new("ploss_memory_stats")
    for _, id in ipairs { 1, -5 } do
      st, msg = status_of(C.ploss_memory_stats_get, ffi.new("DLDevice", { 1, id }), stats)
      assert.are.same({ C.PLOSS_ERR_DEVICE, "device: cpu:" .. id .. " does not exist (the CPU is device 0)" }, { st, msg })
      st = status_of(C.ploss_memory_reset_peak, ffi.new("DLDevice", { 1, id }))
      assert.are.equal(C.PLOSS_ERR_DEVICE, st)
    end
    assert.are.equal(C.PLOSS_OK, C.ploss_memory_stats_get(ffi.new("DLDevice", { 1, 0 }), stats))
    -- a GPU that is not visible (a build with CUDA): refused, not zeros
    if C.ploss_built_with_cuda() ~= 0 then
      st, msg = status_of(C.ploss_memory_stats_get, ffi.new("DLDevice", { 2, 63 }), stats)
      assert.are.equal(C.PLOSS_ERR_DEVICE, st)
      assert.matches("device: cuda:63 does not exist", msg, 1, true)
    end
  end)

  it("option values in messages read back as the value given (1.0000001 is not shown as 1)", function()
    local o = ffi.new("ploss_cross_entropy_opts"); C.ploss_cross_entropy_opts_init(o); o.label_smoothing = 1.0000001
    local st, msg = status_of(C.ploss_cross_entropy_forward, ploss.context("cpu"), nil, nil, nil, o, nil, nil)
    assert.are.equal(C.PLOSS_ERR_INVALID_ARGUMENT, st)
    assert.matches("opts.label_smoothing: 1.0000001 is not", msg, 1, true)
    o.label_smoothing = -0.1
    st, msg = status_of(C.ploss_cross_entropy_forward, ploss.context("cpu"), nil, nil, nil, o, nil, nil)
    assert.matches("opts.label_smoothing: -0.1 is not", msg, 1, true)
  end)
end)

describe("integer to integer conversions", function()
  it(":to, :int(), :byte() and ploss.tensor refuse a value the narrower dtype cannot hold (no wrap)", function()
    H.expect_error(function() ploss.tensor({ 2 ^ 32 + 1 }, { dtype = "i64" }):int() end,
      "to: element 1 (row-major) is 4294967297, which i32 cannot hold")
    H.expect_error(function() ploss.tensor({ 1, 300 }, { dtype = "i64" }):to("u8") end,
      "to: element 2 (row-major) is 300, which u8 cannot hold")
    H.expect_error(function() ploss.tensor({ 0, -1 }, { dtype = "i32" }):byte() end,
      "to: element 2 (row-major) is -1, which u8 cannot hold")
    H.expect_error(function() ploss.tensor(ploss.tensor({ -2 ^ 31 - 1 }, { dtype = "i64" }), { dtype = "i32" }) end,
      "element 1 (row-major) is -2147483649, which i32 cannot hold")
    -- past 2^53 the value is shown exactly (read as int64, not through a double)
    local big = ploss.tensor({ 0 }, { dtype = "i64" })
    ffi.cast("int64_t *", big:dl().data)[0] = 0x7fffffffffffffffLL
    big:bump_version()
    H.expect_error(function() big:int() end, "is 9223372036854775807, which i32 cannot hold")
    -- any layout: the element is counted in row-major order
    H.expect_error(function() ploss.tensor({ 1, 2, 3, 256 }, { dtype = "i32" }):view(2, 2):t():byte() end,
      "element 4 (row-major) is 256")
    -- the edges of each range convert, and a widening conversion is never refused
    assert.are.same({ -2 ^ 31, 2 ^ 31 - 1 }, ploss.tensor({ -2 ^ 31, 2 ^ 31 - 1 }, { dtype = "i64" }):int():flat())
    assert.are.same({ 0, 255 }, ploss.tensor({ 0, 255 }, { dtype = "i64" }):byte():flat())
    assert.are.same({ 0, 255 }, ploss.tensor({ 0, 255 }, { dtype = "i32" }):to("u8"):flat())
    assert.are.same({ 0, 255 }, ploss.tensor({ 0, 255 }, { dtype = "u8" }):long():flat())
  end)

  it("copy refuses a value the destination's narrower dtype cannot hold, writing nothing", function()
    local u = ploss.tensor({ 7, 8 }, { dtype = "u8" })
    H.expect_error(function() u:copy(ploss.tensor({ 1, -1 }, { dtype = "i32" })) end,
      "copy: element 2 (row-major) is -1, which u8 cannot hold", u)
    H.expect_error(function() u:copy(ploss.tensor({ 256, 1 }, { dtype = "i64" })) end,
      "copy: element 1 (row-major) is 256, which u8 cannot hold", u)
    local i = ploss.tensor({ 5 }, { dtype = "i32" })
    H.expect_error(function() i:copy(ploss.tensor({ 2 ^ 31 }, { dtype = "i64" })) end, "which i32 cannot hold", i)
    H.expect_error(function() i[1] = ploss.tensor(2 ^ 40, { dtype = "i64" }) end, "which i32 cannot hold", i)
    assert.are.same({ 7, 8 }, u:flat()) -- (u8 takes no poison: its values as they were)
    assert.are.same({ 255, 0 }, u:copy(ploss.tensor({ 255, 0 }, { dtype = "i64" })):flat())
  end)

  it("add_ numbers the element it refuses from 1, as tensor and to do", function()
    local u = ploss.tensor({ 3, 0, 1 }, { dtype = "u8" })
    H.expect_error(function() u:add_(-1) end, "add_: element 2 (row-major): 0 + -1 is outside u8's range", u)
    H.expect_error(function() ploss.tensor({ 1, 2 }, { dtype = "u8" }):add_(255) end,
      "add_: element 1 (row-major): 1 + 255 is outside u8's range")
  end)
end)

describe("factory options", function()
  it("a key a factory does not take is refused, naming it and the ones it takes", function()
    H.expect_error(function() ploss.zeros({ 2 }, { dtpye = "f64" }) end, "zeros: unknown option 'dtpye' (known: device, dtype)")
    H.expect_error(function() ploss.ones(2, { dtpye = "f64" }) end, "ones: unknown option 'dtpye' (known: device, dtype)")
    H.expect_error(function() ploss.empty({ 2 }, { dtpye = "f64" }) end, "empty: unknown option 'dtpye'")
    H.expect_error(function() ploss.full({ 2 }, 3, { dtpye = "f64" }) end, "full: unknown option 'dtpye'")
    H.expect_error(function() ploss.tensor({ 1, 2 }, { dtpye = "f64" }) end,
      "tensor: unknown option 'dtpye' (known: device, dtype, size)")
    H.expect_error(function() ploss.randn({ 3 }, { stdev = 100 }) end,
      "randn: unknown option 'stdev' (known: device, dtype, mean, offset, seed, std)")
    H.expect_error(function() ploss.rand({ 1 }, { hihg = 5 }) end,
      "rand: unknown option 'hihg' (known: device, dtype, high, low, offset, seed)")
    H.expect_error(function() ploss.randint(0, 3, { 2 }, { dtpye = "i32" }) end,
      "randint: unknown option 'dtpye' (known: device, dtype, offset, seed)")
    -- an offset without a seed would be ignored (the draw continues the global generator)
    H.expect_error(function() ploss.randn({ 3 }, { offset = 5 }) end, "randn: opts.offset: given without opts.seed")
    H.expect_error(function() ploss.randint(0, 3, { 2 }, { offset = 1 }) end, "randint: opts.offset: given without opts.seed")
    assert.are.equal(ploss.randn({ 4 }, { seed = 9, offset = 2 })[1], ploss.randn({ 6 }, { seed = 9 })[3])
    H.expect_error(function() ploss.empty_like(ploss.zeros(2), { dtpye = "f64" }) end,
      "empty_like: unknown option 'dtpye' (known: device, dtype, layout)")
    local buf = ffi.new("float[2]")
    H.expect_error(function() ploss.from_pointer(buf, { 2 }, { ownr = buf }) end,
      "from_pointer: unknown option 'ownr' (known: device, dtype, owner, strides)")
    -- the options they take still work
    assert.are.equal("f64", ploss.zeros({ 2 }, { dtype = "f64", device = "cpu" }):dtype())
    assert.are.equal("i32", ploss.randint(0, 3, { 2 }, { dtype = "i32", seed = 1, offset = 2 }):dtype())
    local r = ploss.rand({ 64 }, { low = 2, high = 3, seed = 5 }):flat()
    for _, v in ipairs(r) do assert.is_true(v >= 2 and v < 3) end
    H.assert_close(ploss.randn({ 4 }, { mean = 10, std = 0, seed = 1 }), { 10, 10, 10, 10 }, { rtol = 0, atol = 0 })
  end)

  it("ploss.tensor of a tensor refuses size (it reshapes a Lua table's values) rather than ignore it", function()
    H.expect_error(function() ploss.tensor(ploss.tensor({ 1, 2, 3, 4 }), { size = { 2, 2 } }) end,
      "tensor: opts.size: reshapes a Lua table's values; a tensor (4) is copied with its own sizes")
    assert.are.same({ 2, 2 }, ploss.tensor({ 1, 2, 3, 4 }, { size = { 2, 2 } }):size())
  end)
end)

describe("sizes past 2^53", function()
  it("view and ploss.tensor's size say so with the sizes given, not a wrapped count", function()
    local x = ploss.zeros({ 4 })
    H.expect_error(function() x:view(2 ^ 62, 4) end, "view: 4611686018427387904x4 has more than 2^53 elements, the tensor 4")
    H.expect_error(function() x:view(2 ^ 30, 4) end, "view: 1073741824x4 has 4294967296 elements, the tensor 4")
    H.expect_error(function() ploss.tensor({ 1, 2 }, { size = { 2 ^ 62, 4 } }) end,
      "tensor: size has more than 2^53 elements, the data 2")
  end)
end)

describe("views of a temporary", function()
  it("hold their storage while the collector finalises the base (a child process: a crash is a failure)", function()
    -- the base of each view is referenced by nothing once the view is being made; a
    -- collector that runs a whole cycle at every allocation finalises it then, and the view
    -- must already hold the storage (it read freed memory and crashed before)
    local code = [[
      local ploss = require "ploss"
      collectgarbage("setpause", 0); collectgarbage("setstepmul", 1000)
      local l32, l6 = {}, {}
      for i = 1, 32 do l32[i] = i - 1 end
      for i = 1, 6 do l6[i] = i - 1 end
      local function total(t)
        local s = 0
        for _, v in ipairs(t:flat()) do s = s + v end
        return s
      end
      local sum = 0
      for _ = 1, 400 do
        local row = ploss.tensor(l32, { dtype = "f64" }):view(8, 4):select(1, 2)
        local c = ploss.tensor(l32, { dtype = "f64" }):view(8, 4):t():narrow(1, 2, 1):contiguous()
        local e = ploss.tensor(l6, { dtype = "f64" }):view(2, 3):unsqueeze(1):expand(4, 2, 3):transpose(2, 3)
        sum = sum + total(row) + total(c) + total(e)
      end
      io.write(string.format("sum %.0f\n", sum))
    ]]
    local tmp = os.tmpname()
    local f = assert(io.open(tmp, "w"))
    f:write(code)
    f:close()
    local p = assert(io.popen("luajit " .. tmp .. " 2>&1; echo \"EXIT:$?\""))
    local out = p:read("*a")
    p:close()
    os.remove(tmp)
    -- per iteration: row 4..7 → 22; column 1 of 8×4 → 1+5+…+29 = 120; 4 copies of 0..5 → 60
    assert.are.equal("sum 80800\nEXIT:0", out:gsub("%s+$", ""), out)
  end)
end)
