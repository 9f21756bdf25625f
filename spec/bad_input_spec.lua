-- The bad-input catalogue on the CPU (suite 'cpu'; issue 7): every public loss through
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
