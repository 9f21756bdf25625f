--- Checks shared by the specs of softmax family II (large-margin, Taylor CE, PC-softmax,
-- OHEM): `require "spec.softmax2_common"`.
--
--   S.fixture_runs                      the (dtype, tolerance, label dtype) of fixture runs
--   S.check_fixture(name, fname, case, run, opts)
--       one fixture case through the criterion ploss[name] (forward, backward with the
--       saved state, fused, fused with a scale) and the functional ploss.F[fname]
--       (forward, backward with the state recomputed, fused)
--   S.gradcheck(name, fname, x, y, opts, label, seed [, gc])
--       central differences in f64 of the reduced loss (of Σ ḡ·ℓ for 'none', ḡ random)
--       against backward with and without the saved state and against the fused pass;
--       gc = {h, rtol, atol} of the central differences (H.gradcheck's defaults)
--   S.sample_sizes(sizes)               sizes without dim 2 (the target's shape)
--   S.labels(sizes, opts)               H.random_labels for input sizes, with the first
--                                       sample always valid (a 'mean' never divides by 0)
local assert = require "luassert"
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

local function scaled(values, k)
  local out = {}
  for i, v in ipairs(H.values(values)) do out[i] = v * k end
  return out
end

function S.check_fixture(name, fname, case, run, opts)
  local x = H.fixture_tensor(case.inputs.input, { dtype = run.dtype })
  local y = H.fixture_tensor(case.inputs.target, { int_dtype = run.target })
  local tol = { rtol = run.rtol, atol = run.atol }
  local function what(s) tol.what = case.name .. " " .. run.dtype .. " " .. s; return tol end
  local exp_out, exp_grad = case.expected.output, case.expected.grad_input
  local gout = case.grad_output and H.fixture_tensor(case.grad_output, { dtype = run.dtype == "f64" and "f64" or "f32" })

  local crit = ploss[name](opts)
  local loss = crit:forward(x, y)
  H.assert_close(loss, exp_out, what("forward"))
  local g = crit:backward(x, y, gout)
  assert.are.equal(run.dtype, g:dtype())
  H.assert_close(g, exp_grad, what("backward"))
  local l2, g2 = crit(x, y)
  H.assert_close(l2, exp_out, what("fused loss"))
  if opts.reduction ~= "none" then
    H.assert_close(g2, exp_grad, what("fused grad"))
    local _, g3 = crit(x, y, -1.5)
    H.assert_close(g3, scaled(exp_grad, -1.5), what("fused grad, scale -1.5"))
  end
  H.assert_close(F[fname](x, y, opts), exp_out, what("F forward"))
  H.assert_close(F[fname .. "_backward"](x, y, gout, opts), exp_grad, what("F backward"))
  if opts.reduction ~= "none" then
    local fl, fg = F[fname .. "_fused"](x, y, opts)
    H.assert_close(fl, exp_out, what("F fused loss"))
    H.assert_close(fg, exp_grad, what("F fused grad"))
  end
end

function S.gradcheck(name, fname, x, y, opts, label, seed, gc)
  gc = gc or {}
  local red = opts.reduction or "mean"
  local ysizes = y:size()
  local gout = red == "none" and ploss.randn(ysizes, { dtype = "f64" }) or nil
  local gvals = gout and gout:flat()
  local function f(xx)
    local l = F[fname](xx, y, opts)
    if red ~= "none" then return l end
    local s, lv = 0, l:flat()
    for i = 1, #lv do s = s + lv[i] * gvals[i] end
    return s
  end
  local crit = ploss[name](opts)
  crit:forward(x, y)
  local g_saved = crit:backward(x, y, gout):clone()
  H.gradcheck(f, x, g_saved, { what = label .. " backward", seed = seed, h = gc.h, rtol = gc.rtol, atol = gc.atol })
  H.assert_close(F[fname .. "_backward"](x, y, gout, opts), g_saved,
    { rtol = 1e-12, atol = 1e-15, what = label .. " recomputed state" })
  local fo = {}
  for k, v in pairs(opts) do fo[k] = v end
  fo.scale = 0.75
  local _, gf = F[fname .. "_fused"](x, y, fo)
  local ref = F[fname .. "_backward"](x, y, red == "none" and ploss.full(ysizes, 0.75, { dtype = "f64" }) or 0.75, opts)
  H.assert_close(gf, ref, { rtol = 1e-12, atol = 1e-15, what = label .. " fused" })
end

return S
