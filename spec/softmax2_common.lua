--- Checks shared by the specs of softmax family II (large-margin, Taylor CE, PC-softmax,
-- OHEM): `require "spec.softmax2_common"`.
--
--   S.fixture_runs                      the (dtype, tolerance, label dtype) of fixture runs
--   S.check_fixture(name, fname, case, run, opts)
--       H.check_fixture_case with this family's fused scale (−1.5)
--   S.gradcheck(name, fname, x, y, opts, label, seed [, gc])
--       central differences in f64 of the reduced loss (of Σ ḡ·ℓ for 'none', ḡ random)
--       against backward with and without the saved state and against the fused pass;
--       gc = {h, rtol, atol} of the central differences (H.gradcheck's defaults)
--   S.sample_sizes(sizes)               sizes without dim 2 (the target's shape)
--   S.labels(sizes, opts)               H.random_labels for input sizes, with the first
--                                       sample always valid (a 'mean' never divides by 0)
local H = require "spec.helpers"
local ploss = H.ploss
local F = ploss.F

local S = {}

S.fixture_runs = {
  { dtype = "f64", rtol = 1e-10, atol = 1e-13, target = "i64" },
  { dtype = "f32", rtol = 2e-5, atol = 2e-6, target = "i32" },
}

S.sample_sizes = H.sample_sizes

function S.labels(sizes, opts)
  local y = H.random_labels(S.sample_sizes(sizes), sizes[2], opts)
  local v = y:flat()
  if v[1] == (opts and opts.ignore_index) then
    v[1] = 0
    y = ploss.tensor(v, { dtype = y:dtype(), size = y:size() })
  end
  return y
end

function S.check_fixture(name, fname, case, run, opts)
  H.check_fixture_case(name, fname, case, run, opts, -1.5)
end

function S.gradcheck(name, fname, x, y, opts, label, seed, gc)
  gc = gc or {}
  local red = opts.reduction or "mean"
  local ysizes = y:size()
  local gout = red == "none" and ploss.randn(ysizes, { dtype = "f64" }) or nil
  local f = H.loss_objective(fname, y, opts, gout)
  local crit = ploss[name](opts)
  crit:forward(x, y)
  local g_saved = crit:backward(x, y, gout):clone()
  H.gradcheck(f, x, g_saved, { what = label .. " backward", seed = seed, h = gc.h, rtol = gc.rtol, atol = gc.atol })
  H.assert_close(F[fname .. "_backward"](x, y, gout, opts), g_saved,
    { rtol = 1e-12, atol = 1e-15, what = label .. " recomputed state" })
  H.check_fused_scale(fname, x, y, opts, ysizes, label, 1e-12)
end

return S
