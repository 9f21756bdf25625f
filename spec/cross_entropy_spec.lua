-- Cross-entropy spec (suite 'cpu').
local H = require "spec.helpers"
local ploss = H.ploss

describe("CrossEntropyLoss", function()
  it("matches the fixtures (f64, fused)", function()
    for _, case in ipairs(H.fixtures("cross_entropy")) do
      local x = H.fixture_tensor(case.inputs.input)
      local y = H.fixture_tensor(case.inputs.target)
      local o = case.options
      local crit = ploss.CrossEntropyLoss {
        reduction = o.reduction, ignore_index = o.ignore_index, label_smoothing = o.label_smoothing,
        smoothing_convention = o.label_smoothing_convention,
        weight = case.inputs.weight and H.fixture_tensor(case.inputs.weight) }
      local loss = crit:forward(x, y)
      H.assert_close(loss, case.expected.output, { rtol = 1e-10, what = case.name })
    end
  end)
end)
