-- Tensor spec (suite 'cpu'): constructors, views, copies, RNG, memory, freeing.
local H = require "spec.helpers"
local ploss = H.ploss

describe("tensor", function()
  it("builds from nested tables", function()
    local t = ploss.tensor { { 1, 2, 3 }, { 4, 5, 6 } }
    assert.are.same({ 2, 3 }, t:size())
    assert.are.equal("f32", t:dtype())
    assert.are.equal("cpu", t:device())
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:totable())
  end)
end)
