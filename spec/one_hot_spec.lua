-- One-hot spec (suite 'cpu'): ploss.one_hot on the CPU backend.
--  * the one_hot case of reference_semantics.json (pytorch-loss convert_to_one_hot);
--  * smoothing conventions, ignored rows all zero, integer outputs, strided outputs;
--  * bad input: each error with its message fragment, output untouched.
local H = require "spec.helpers"
local ploss = H.ploss

describe("one_hot", function()
  it("matches the reference fixture", function()
    local cases = H.fixtures("one_hot")
    assert.are.equal(1, #cases)
    for _, case in ipairs(cases) do
      local y = H.fixture_tensor(case.inputs.target)
      for _, int_dtype in ipairs { "i64", "i32" } do
        local yy = y:to(nil, int_dtype)
        for _, dt in ipairs { "f32", "f64", "f16", "bf16", "i64", "u8" } do
          local out = ploss.one_hot(yy, case.options.num_classes, { dtype = dt })
          assert.are.equal(dt, out:dtype())
          assert.are.same(case.expected.output.shape, out:size())
          H.assert_equal(out, case.expected.output, { what = case.name .. " " .. dt })
        end
      end
      H.assert_equal(ploss.F.one_hot(y, case.options.num_classes), case.expected.output)
    end
  end)

  it("smooths with the three conventions", function()
    local y = ploss.tensor({ 2, 0 }, { dtype = "i64" })
    local eps, Cn = 0.2, 4
    local expect = {
      pytorch = { 1 - eps + eps / Cn, eps / Cn },
      reference = { 1 - eps, eps / Cn },
      uniform_others = { 1 - eps, eps / (Cn - 1) },
    }
    for conv, v in pairs(expect) do
      local out = ploss.one_hot(y, Cn, { label_smoothing = eps, smoothing_convention = conv, dtype = "f64" })
      local on, off = v[1], v[2]
      H.assert_close(out, { { off, off, on, off }, { on, off, off, off } }, { rtol = 1e-15, what = conv })
    end
    -- the default is PyTorch's convention (as CrossEntropyLoss's label_smoothing)
    H.assert_close(ploss.one_hot(y, Cn, { label_smoothing = eps, dtype = "f64" }),
      ploss.one_hot(y, Cn, { label_smoothing = eps, smoothing_convention = "pytorch", dtype = "f64" }), { rtol = 0 })
  end)

  it("writes all zeros at ignored samples (default ignore_index -1, or any other)", function()
    local y = ploss.tensor({ { 1, -1 }, { 0, 2 } }, { dtype = "i64" })
    local out = ploss.one_hot(y, 3, { label_smoothing = 0.3, dtype = "f64" })
    assert.are.same({ 2, 3, 2 }, out:size())
    local v = out:totable()
    for j = 1, 3 do assert.are.equal(0, v[1][j][2]) end
    H.assert_close(v[2][3][2], 1 - 0.3 + 0.1, { rtol = 1e-15 })
    local y2 = ploss.tensor({ 255, 1, 255 }, { dtype = "i32" })
    H.assert_equal(ploss.one_hot(y2, 2, { ignore_index = 255 }), { { 0, 0 }, { 0, 1 }, { 0, 0 } })
    -- an ignore_index no i32 label can equal would ignore nothing: refused, as the losses do
    H.expect_error(function() local o = ploss.one_hot(y2, 2, { ignore_index = 2 ^ 40 }) return o end,
      "one_hot: opts.ignore_index: 1099511627776 is outside the range of the i32 target")
    -- past int64's range: named as given (the C option would have taken INT64_MIN)
    H.expect_error(function() local o = ploss.one_hot(y2, 2, { ignore_index = 2 ^ 63 }) return o end,
      "one_hot: ignore_index: expected an integer in 64 bits, got 9.2233720368548e+18")
    -- an all-ignored and an empty input are valid
    H.assert_equal(ploss.one_hot(ploss.full({ 3 }, -1, { dtype = "i64" }), 2), { { 0, 0 }, { 0, 0 }, { 0, 0 } })
    assert.are.same({ 0, 4 }, ploss.one_hot(ploss.empty({ 0 }, { dtype = "i64" }), 4):size())
  end)

  it("writes into a strided output (channels-last)", function()
    H.seed(3)
    local y = H.random_labels({ 2, 3, 4 }, 5, { ignore = 0.2, ignore_index = -1 })
    local ref = ploss.one_hot(y, 5, { label_smoothing = 0.1 })
    local out = ploss.empty({ 2, 3, 4, 5 }):permute(1, 4, 2, 3)
    local got = ploss.one_hot(y, nil, { out = out, label_smoothing = 0.1 })
    assert.are.equal(out, got)
    H.assert_equal(got, ref)
    -- strided labels (a narrowed batch) and a spatial layout that is not one axis (refused)
    local big = ploss.zeros({ 4, 3, 4 }, { dtype = "i64" })
    big:narrow(1, 2, 2):copy(y)
    H.assert_equal(ploss.one_hot(big:narrow(1, 2, 2), 5, { label_smoothing = 0.1 }), ref)
    local yt = y:transpose(2, 3):contiguous():transpose(2, 3)
    H.expect_error(function() ploss.one_hot(yt, 5) end, "target: the strides of dims 1..2 (0-based; Lua dims 2..3) cannot be walked as one axis")
  end)

  it("rejects bad input with a clear message and leaves the output untouched", function()
    local y = ploss.tensor({ 0, 3, 1 }, { dtype = "i64" })
    local out = ploss.empty({ 3, 3 })
    H.expect_error(function() ploss.one_hot(y, nil, { out = out }) end,
      { "class index 3 at sample (n = 1, s = 0) is outside [0, 3)", "PLOSS_ERR_INVALID_LABEL" }, out)
    H.expect_error(function() ploss.one_hot(ploss.tensor({ -2, 0, 1 }, { dtype = "i64" }), nil, { out = out }) end,
      "class index -2", out)
    H.expect_error(function() ploss.one_hot(ploss.tensor({ 0, 1, 1 }), nil, { out = out }) end,
      "target: expected class indices (i64 or i32), got f32", out)
    H.expect_error(function() ploss.one_hot(ploss.tensor({ 0, 1 }, { dtype = "i64" }), nil, { out = out }) end,
      "PLOSS_ERR_SHAPE", out)
    H.expect_error(function() ploss.one_hot(ploss.tensor({ 0, 1, 1 }, { dtype = "i64" }), nil, { out = out, label_smoothing = 1.5 }) end,
      "opts.label_smoothing: 1.5 is not a finite number in [0, 1]", out)
    local iout = ploss.empty({ 3, 3 }, { dtype = "i64" })
    H.expect_error(function() ploss.one_hot(ploss.tensor({ 0, 1, 1 }, { dtype = "i64" }), nil, { out = iout, label_smoothing = 0.1 }) end,
      "out: label smoothing 0.1 needs a float dtype, got i64", iout)
    -- an output made from opts.dtype: the option named
    H.expect_error(function() ploss.one_hot(ploss.tensor({ 0, 1, 1 }, { dtype = "i64" }), 3, { dtype = "i64", label_smoothing = 0.1 }) end,
      "one_hot: opts.dtype: label smoothing 0.1 needs a float dtype, got i64")
    local one = ploss.empty({ 3, 1 })
    H.expect_error(function()
      ploss.one_hot(ploss.tensor({ 0, 0, 0 }, { dtype = "i64" }), nil, { out = one, label_smoothing = 0.1, smoothing_convention = "uniform_others" })
    end, "undefined for C = 1", one)
    H.expect_error(function() ploss.one_hot(y, 0) end, "num_classes: expected an integer >= 1")
    -- with out given, a num_classes or dtype named too must be out's: the labels' range is
    -- the caller's num_classes, not out's wider class axis (label 3 would be encoded)
    local wide = ploss.zeros({ 3, 4 })
    H.expect_error(function() ploss.one_hot(y, 3, { out = wide }) end,
      "one_hot: out: 4 classes along dim 2 (its sizes [3, 4]), but num_classes is 3", wide)
    H.expect_error(function() ploss.one_hot(y, "4", { out = wide }) end, "num_classes: expected an integer >= 1, got '4'", wide)
    H.expect_error(function() ploss.one_hot(y, 4, { out = wide, dtype = "f64" }) end,
      "one_hot: out: dtype f32, but opts.dtype is 'f64'", wide)
    H.expect_error(function() ploss.one_hot(y, 4, { label_smothing = 0.1 }) end,
      "one_hot: unknown option 'label_smothing' (known: dtype, ignore_index, label_smoothing, out, smoothing_convention)")
    H.expect_error(function() ploss.one_hot(y, 4, { out = 3 }) end, "one_hot: out: expected a ploss tensor, got 3")
    H.assert_equal(ploss.one_hot(y, 4, { out = wide, dtype = "f32" }), { { 1, 0, 0, 0 }, { 0, 0, 0, 1 }, { 0, 1, 0, 0 } })
    H.assert_equal(ploss.one_hot(y, nil, { out = wide, dtype = "float" }), { { 1, 0, 0, 0 }, { 0, 0, 0, 1 }, { 0, 1, 0, 0 } })
    H.expect_error(function() ploss.one_hot(y, 4, { smoothing_convention = "other" }) end, "smoothing_convention")
    -- an expanded (zero-stride) output cannot be written
    local base = ploss.zeros({ 3, 1 })
    local expanded = base:expand(3, 3)
    H.expect_error(function() ploss.one_hot(ploss.tensor({ 0, 1, 1 }, { dtype = "i64" }), nil, { out = expanded }) end,
      "PLOSS_ERR_LAYOUT", base)
  end)
end)
