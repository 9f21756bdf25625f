-- CUDA spec (suite 'cuda'): spec/run.lua exits 77 before this file when no GPU is present.
local H = require "spec.helpers"
local ploss = H.ploss

describe("CUDA", function()
  it("is available", function()
    assert.is_true(ploss.cuda_available())
  end)
end)
