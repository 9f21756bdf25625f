-- The bad-input catalogue on the GPU (suite 'cuda'): the cases of
-- spec/bad_input.lua (see spec/bad_input_spec.lua) with every tensor on the CUDA device.
-- Differences from the CPU run, all inside spec/bad_input.lua: an invalid label does not
-- fail the call; the next synchronising call raises PLOSS_ERR_INVALID_LABEL and the
-- context works again afterwards (no out-of-bounds access: run under compute-sanitizer
-- memcheck, tools/gpu/run.sh sanitize memcheck); mixed devices pair the GPU with the CPU.
-- spec/run.lua exits 77 without a GPU; PLOSS_CUDA_SPEC_DEVICE=cpu runs it on the CPU.
local H = require "spec.helpers"
local B = require "spec.bad_input"
local DEV = H.cuda_spec_device()

for _, fam in ipairs(B.families) do
  describe("bad input: " .. fam.name .. " (" .. DEV .. ")", function()
    for _, c in ipairs(B.cases(fam, DEV)) do it(c.name, c.fn) end
  end)
end

describe("bad input: one_hot (" .. DEV .. ")", function()
  for _, c in ipairs(B.cases("one_hot", DEV)) do it(c.name, c.fn) end
end)
