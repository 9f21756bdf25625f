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
    H.expect_error(function() t:narrow(1, "1", 2) end, "narrow: start is 1, expected an integer")
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
  end)

  it("shapes refuse non-finite, huge and spanning sizes", function()
    H.expect_error(function() ploss.empty({ 0, 2 ^ 63 }) end, "shape: size 2 is 9.2233720368548e+18, expected an integer >= 0")
    H.expect_error(function() ploss.empty({ 0, INF }) end, "shape: size 2 is inf")
    H.expect_error(function() ploss.empty({ NAN }) end, "shape: size 1 is nan")
    H.expect_error(function() ploss.empty({ 0, 2 ^ 62 }) end, "span more than 2^53 elements")
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
  end)

  it("random generators check their integer arguments", function()
    H.expect_error(function() ploss.randint(0, NAN, { 3 }) end, "randint: high is nan, expected an integer")
    H.expect_error(function() ploss.randint(0.5, 3, { 3 }) end, "randint: low is 0.5")
    H.expect_error(function() ploss.rand({ 3 }, { seed = INF }) end, "rand: seed is inf, expected an integer >= 0")
    H.expect_error(function() ploss.randn({ 3 }, { seed = 1, offset = -1 }) end, "randn: offset is -1")
    H.expect_error(function() ploss.manual_seed(INF) end, "manual_seed: expected an integer >= 0, got inf")
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
    -- the edges of each range, truncated toward zero
    assert.are.same({ -2 ^ 31, 2 ^ 31 - 1, -2 ^ 31, 2 ^ 31 - 1 },
      ploss.tensor({ -2 ^ 31, 2 ^ 31 - 1, -2 ^ 31 - 0.5, 2 ^ 31 - 0.5 }, { dtype = "i32" }):flat())
    assert.are.same({ 0, 255, 0 }, ploss.tensor({ -0.5, 255.5, 0 }, { dtype = "u8" }):flat())
    assert.are.same({ -2 ^ 63, 2 ^ 63 - 1024 }, ploss.tensor({ -2 ^ 63, 2 ^ 63 - 1024 }, { dtype = "i64" }):flat())
  end)

  it(":int(), :long(), :byte() and :to(nil, dtype) of a float tensor refuse such values", function()
    H.expect_error(function() ploss.tensor({ 2 ^ 32 + 3 }):int() end, "to: element 1 (row-major) is 4294967296, which i32")
    H.expect_error(function() ploss.tensor({ 0, NAN }):long() end, "to: element 2 (row-major) is nan, which i64")
    H.expect_error(function() ploss.tensor({ INF }, { dtype = "f16" }):to(nil, "i32") end, "is inf, which i32")
    H.expect_error(function() ploss.tensor({ 2 ^ 63 }, { dtype = "f64" }):long() end, "which i64 cannot hold")
    H.expect_error(function() ploss.tensor({ 256 }, { dtype = "bf16" }):byte() end, "is 256, which u8")
    H.expect_error(function() ploss.tensor({ 1, 2, 3, 300 }):view(2, 2):t():byte() end, "element 4 (row-major) is 300")
    H.expect_error(function() ploss.tensor(ploss.tensor({ NAN }), { dtype = "i64" }) end, "is nan, which i64")
    -- values in range convert (truncated), from any float dtype and any layout
    assert.are.same({ -2 ^ 31, 2 ^ 31 - 1 }, ploss.tensor({ -2 ^ 31 - 0.5, 2 ^ 31 - 0.5 }, { dtype = "f64" }):int():flat())
    assert.are.same({ 2 ^ 63 - 1024 }, ploss.tensor({ 2 ^ 63 - 1024 }, { dtype = "f64" }):long():flat())
    assert.are.same({ 1, 3, 2, 4 }, ploss.tensor({ 1.5, 2.5, 3.5, 4.5 }):view(2, 2):t():to(nil, "i32"):flat())
    assert.are.same({ 255, 0 }, ploss.tensor({ 255.9, -0.9 }, { dtype = "f16" }):byte():flat())
  end)
end)

describe("to(dtype)", function()
  it("takes a dtype name in the device position", function()
    local t = ploss.tensor({ 1.5, -2 })
    assert.are.equal("f16", t:to("f16"):dtype())
    assert.are.equal("f64", t:to("double"):dtype())
    assert.are.same({ 1, -2 }, t:to("long"):flat())
    assert.are.equal(t, t:to("f32"))
    assert.are.equal("cpu", t:to("bf16"):device())
    H.expect_error(function() t:to("f8") end, "device: expected 'cpu', 'cuda' or 'cuda:<id>', got f8")
  end)
end)

describe("printing a large tensor", function()
  local function iota(n, opts) return ploss.tensor((function()
    local v = {}
    for i = 1, n do v[i] = i end
    return v
  end)(), opts) end

  it("shows the head and tail of a 1-d tensor", function()
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
