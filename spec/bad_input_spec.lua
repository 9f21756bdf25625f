-- The bad-input catalogue on the CPU (suite 'cpu'): every public loss through
-- the table-driven cases of spec/bad_input.lua — wrong rank, mismatched shapes, wrong
-- dtypes, mixed devices (with a GPU), non-contiguous and zero-stride tensors, labels out
-- of range, NaN/Inf in valid and ignored rows, empty batches, all-ignored, one class,
-- options out of range, aliasing outputs — on every pass (forward, backward, fused).
-- The same catalogue runs on the GPU in spec/cuda_bad_input_spec.lua.
local B = require "spec.bad_input"
local DEV = os.getenv("PLOSS_BAD_INPUT_DEVICE") or "cpu"

for _, fam in ipairs(B.families) do
  describe("bad input: " .. fam.name .. " (" .. DEV .. ")", function()
    for _, c in ipairs(B.cases(fam, DEV)) do it(c.name, c.fn) end
    local na = B.not_applicable(fam)
    if #na > 0 then
      it("not applicable (listed): " .. table.concat(na, "; "), function() end)
    end
  end)
end

describe("bad input: one_hot (" .. DEV .. ")", function()
  for _, c in ipairs(B.cases("one_hot", DEV)) do it(c.name, c.fn) end
end)

-- Reading NaNs back: LuaJIT keeps Lua values as NaN-tagged doubles, so a NaN whose bits
-- have the sign and the high payload bits set (the f32 NaN 0xFFFFFFFF is CUDA's canonical
-- 0x7FFFFFFF negated) must not become false / nil / a light userdata in :flat() (it did
-- before lua/ploss/tensor.lua checked the bits: the catalogue's snapshots were corrupted).
describe("bad input: host reads of NaNs with any payload", function()
  local ffi = require "ffi"
  local ploss = require "ploss"
  it("read as NaN numbers, in the interpreter and in compiled loops", function()
    for _, case in ipairs { { "f64", "uint64_t *", { 0xFFFFFFFFFFFFFFFEULL, 0xFFF9000000000001ULL, 0x7FFFFFFFFFFFFFFFULL } },
                            { "f32", "uint32_t *", { 0xFFFFFFFF, 0xFF800001, 0x7FFFFFFF } } } do
      local t = ploss.empty({ 300 }, { dtype = case[1] })
      local p = ffi.cast(case[2], t:dl().data)
      for i = 0, 299 do p[i] = case[3][i % 3 + 1] end
      for _, view in ipairs { t, t:view(3, 100):t() } do -- dense, and staged through a copy
        for _ = 1, 3 do
          local v = view:flat()
          assert.are.equal(300, #v)
          for i = 1, 300 do assert.is_true(type(v[i]) == "number" and v[i] ~= v[i], case[1] .. " element " .. i) end
        end
      end
    end
  end)
end)
