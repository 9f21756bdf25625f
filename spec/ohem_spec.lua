-- OHEM spec (suite 'cpu'): OHEM cross-entropy and OHEM large-margin on
-- the CPU backend, against a plain sort-based f64 reference written here:
--  * random inputs with ignored samples, exact ties (duplicated rows), n_min = 0, n_min
--    above the number of valid samples, n_min >= M, τ = 0 and τ = 1, the default n_min;
--  * every reduction; the gradient equals the loss's gradient with the unkept samples
--    ignored, and matches central differences (f64);
--  * all ignored / nothing kept: NaN mean, zero gradient; bad input.
local ffi = require "ffi"
local H = require "spec.helpers"
local S = require "spec.softmax2_common"
local ploss = H.ploss
local F = ploss.F

local IGN = 255

local function f32(v) return tonumber(ffi.new("float", v)) end

-- rows of a (sample-major) copy: x N×C×d… → M rows of C values, labels → M values
local function rows_of(x, y)
  return H.sample_rows(x), y:cpu():flat()
end

local function lse(r, skip)
  local m = -math.huge
  for j = 1, #r do if j ~= skip and r[j] > m then m = r[j] end end
  local s = 0
  for j = 1, #r do if j ~= skip then s = s + math.exp(r[j] - m) end end
  return m + math.log(s)
end

-- per-sample losses (f64): cross-entropy, or the large-margin loss by its definition
local function sample_loss(r, y, lam)
  local ce = lse(r) - r[y + 1]
  if not lam then return ce end
  local l2, u, reg = lse(r, y + 1), 1 / (#r - 1), 0
  for j = 1, #r do
    if j ~= y + 1 then
      local logq = r[j] - l2
      reg = reg + (math.exp(logq) - u) * logq
    end
  end
  return ce + lam / 2 * reg
end

-- The sort-based reference of the mining: the kept flags and t*.
local function reference_kept(rows, yv, thresh, n_min)
  local M = #yv
  if n_min < 0 then n_min = math.floor(M / 16) end
  local keys = {}
  for i = 1, M do
    if yv[i] == IGN then
      keys[i] = math.huge -- after every score
    else
      local s = f32(math.exp(rows[i][yv[i] + 1] - lse(rows[i])))
      keys[i] = s ~= s and -1 or s -- NaN: the hardest (kept: the loss is NaN)
    end
  end
  local sorted = {}
  for i = 1, M do sorted[i] = keys[i] end
  table.sort(sorted)
  local t = f32(thresh)
  if n_min >= M then t = 3 elseif n_min > 0 then t = math.max(t, sorted[n_min]) end
  if t == math.huge then t = 3 end -- s_(n_min) is an ignored sample: every valid one
  local kept, count = {}, 0
  for i = 1, M do
    kept[i] = yv[i] ~= IGN and keys[i] <= t
    if kept[i] then count = count + 1 end
  end
  return kept, count, keys, sorted
end

-- labels with the unkept samples ignored (to compare the gradient with the plain loss)
local function relabel(y, kept)
  local v = y:cpu():flat()
  for i = 1, #v do if not kept[i] then v[i] = IGN end end
  -- back in the labels' own (N, d…) order: rows_of walks samples in the same order
  return ploss.tensor(v, { dtype = "i64", size = y:size() })
end

local function check_case(fname, x, y, opts, label)
  local lam = fname == "ohem_large_margin" and (opts.lam or 0.3) or nil
  local rows, yv = rows_of(x, y)
  local kept, count = reference_kept(rows, yv, opts.score_thresh or 0.7, opts.n_min or -1)
  local sum, per = 0, {}
  for i = 1, #yv do
    per[i] = kept[i] and sample_loss(rows[i], yv[i], lam) or 0
    sum = sum + per[i]
  end
  local base = lam and "large_margin_softmax" or "cross_entropy"
  local yk = relabel(y, kept)
  local bopts = { ignore_index = IGN }
  if lam then bopts.lam = lam end
  for _, red in ipairs { "mean", "sum", "none" } do
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.reduction = red
    bopts.reduction = red
    local what = string.format("%s %s %s", label, fname, red)
    local l, g = F[fname .. "_fused"](x, y, o)
    local expect = red == "mean" and sum / count or red == "sum" and sum or per
    if red == "none" then
      -- per-sample values in the (n, d…) order of the labels (rows_of's order)
      H.assert_close(H.values(l), expect, { rtol = 1e-12, atol = 1e-14, what = what .. " loss" })
    else
      H.assert_close(l, expect, { rtol = 1e-12, atol = 1e-14, what = what .. " loss" })
    end
    H.assert_close(F[fname](x, y, o), H.values(l), { rtol = 0, what = what .. " forward = fused" })
    local _, gb = F[base .. "_fused"](x, yk, bopts)
    if count == 0 then
      for _, v in ipairs(g:flat()) do assert.are.equal(0, v, what .. " zero gradient") end
    else
      H.assert_close(g, gb, { rtol = 1e-12, atol = 1e-15, what = what .. " grad = plain loss on the kept samples" })
    end
    local gout = red == "none" and ploss.randn(y:size(), { dtype = x:dtype() == "f64" and "f64" or "f32" }) or 0.5
    local gref = count == 0 and ploss.zeros(x:size(), { dtype = x:dtype() })
      or F[base .. "_backward"](x, yk, gout, bopts)
    H.assert_close(F[fname .. "_backward"](x, y, gout, o), gref, { rtol = 1e-12, atol = 1e-15, what = what .. " backward" })
  end
  return count
end

describe("OHEM against a sort-based f64 reference", function()
  for _, fname in ipairs { "ohem_cross_entropy", "ohem_large_margin" } do
    it(fname .. ": random inputs, every τ / n_min regime, both layouts", function()
      local seed = fname == "ohem_cross_entropy" and 6000 or 6500
      local regimes = {
        { score_thresh = 0.7 }, { score_thresh = 0.7, n_min = 0 }, { score_thresh = 0.3, n_min = 5 },
        { score_thresh = 0.05, n_min = 17 }, { score_thresh = 0, n_min = 3 }, { score_thresh = 1, n_min = 2 },
        { score_thresh = 0.5, n_min = 1000 }, -- n_min >= M: every valid sample
        { score_thresh = 0.2, n_min = 30 },   -- n_min above the number of valid samples (< M)
      }
      for _, sizes in ipairs { { 40, 5 }, { 2, 4, 5, 6 } } do
        for _, reg in ipairs(regimes) do
          seed = seed + 1
          H.seed(seed)
          local x = H.random_logits(sizes, { std = 2 })
          local ignore = reg.n_min == 30 and 0.5 or 0.2
          local y = H.random_labels(S.sample_sizes(sizes), sizes[2], { ignore = ignore, ignore_index = IGN })
          local o = { score_thresh = reg.score_thresh, n_min = reg.n_min, ignore_index = IGN }
          check_case(fname, x, y, o, table.concat(sizes, "x") .. " τ=" .. reg.score_thresh .. " n_min=" .. tostring(reg.n_min))
        end
      end
    end)
  end

  it("keeps every sample tied with the n_min-th score (rows duplicated: exact ties)", function()
    H.seed(61)
    local pool = H.random_logits({ 4, 6 }, { std = 2 }):totable()
    local pool_y = { 0, 3, 5, 2 }
    local rows, labels = {}, {}
    for i = 1, 48 do
      local k = (i * 7) % 4 + 1
      rows[i], labels[i] = pool[k], pool_y[k]
    end
    local x = ploss.tensor(rows, { dtype = "f64" })
    local y = ploss.tensor(labels, { dtype = "i64" })
    for _, n_min in ipairs { 1, 5, 12, 13, 30 } do
      local count = check_case("ohem_cross_entropy", x, y, { score_thresh = 0, n_min = n_min, ignore_index = IGN },
        "ties n_min=" .. n_min)
      -- 12 copies of each of the 4 rows: the kept count is a multiple of 12 ≥ n_min
      assert.are.equal(0, count % 12)
      assert.is_true(count >= n_min, "kept " .. count .. " < n_min " .. n_min)
      local l = F.ohem_cross_entropy(x, y, { score_thresh = 0, n_min = n_min, reduction = "sum" })
      local lm = F.ohem_cross_entropy(x, y, { score_thresh = 0, n_min = n_min })
      H.assert_close(l / lm, count, { rtol = 1e-12 })
    end
  end)

  it("agrees with the reference's relabelling procedure when no tie sits at position n_min", function()
    -- sort all M samples by score (ignored = 1); at positions >= n_min
    -- relabel those with s > τ as ignored
    H.seed(62)
    local x = H.random_logits({ 64, 7 }, { std = 2 })
    local y = H.random_labels({ 64 }, 7, { ignore = 0.25, ignore_index = IGN })
    local rows, yv = rows_of(x, y)
    for _, reg in ipairs { { 0.4, 10 }, { 0.1, 20 }, { 0.9, 4 }, { 0.2, 60 } } do
      local thresh, n_min = reg[1], reg[2]
      local order, score = {}, {}
      for i = 1, 64 do
        order[i] = i
        score[i] = yv[i] == IGN and 1 or math.exp(rows[i][yv[i] + 1] - lse(rows[i]))
      end
      table.sort(order, function(a, b) return score[a] < score[b] end)
      local keep = {}
      for pos, i in ipairs(order) do keep[i] = yv[i] ~= IGN and (pos <= n_min or score[i] <= thresh) end
      local kept = reference_kept(rows, yv, thresh, n_min)
      for i = 1, 64 do assert.are.equal(keep[i], kept[i], "sample " .. i) end
      local sum, count = 0, 0
      for i = 1, 64 do
        if keep[i] then sum, count = sum + lse(rows[i]) - rows[i][yv[i] + 1], count + 1 end
      end
      H.assert_close(F.ohem_cross_entropy(x, y, { score_thresh = thresh, n_min = n_min }), sum / count, { rtol = 1e-12 })
    end
  end)

  it("defaults n_min to ⌊M/16⌋ with the ignored samples counted", function()
    H.seed(63)
    local x = H.random_logits({ 2, 3, 10, 5 })
    local y = H.random_labels({ 2, 10, 5 }, 3, { ignore = 0.5, ignore_index = IGN }) -- M = 100 → n_min 6
    for _, t in ipairs { 0, 0.2 } do
      local l1, g1 = F.ohem_cross_entropy_fused(x, y, { score_thresh = t })
      local l2, g2 = F.ohem_cross_entropy_fused(x, y, { score_thresh = t, n_min = 6 })
      assert.are.equal(l2, l1)
      H.assert_equal(g1, g2)
    end
    assert.are.equal("ploss.OhemCrossEntropyLoss(ignore_index=255, score_thresh=0.7, n_min=-1, reduction='mean')",
      tostring(ploss.OhemCrossEntropyLoss {}))
    assert.are.equal("ploss.OhemLargeMarginLoss(ignore_index=255, score_thresh=0.7, n_min=-1, lam=0.3, reduction='mean')",
      tostring(ploss.OhemLargeMarginLoss {}))
  end)

  it("with every sample ignored, or nothing kept: NaN mean, zero gradient, 0 sum", function()
    local x = H.random_logits({ 6, 4 })
    local y = ploss.full({ 6 }, IGN, { dtype = "i64" })
    for _, fname in ipairs { "ohem_cross_entropy", "ohem_large_margin" } do
      local crit = ploss[fname == "ohem_cross_entropy" and "OhemCrossEntropyLoss" or "OhemLargeMarginLoss"] {}
      local l, g = crit(x, y)
      assert.is_true(l ~= l)
      H.assert_equal(g, ploss.zeros({ 6, 4 }, { dtype = "f64" }))
      assert.is_true(crit:forward(x, y) ~= crit:forward(x, y))
      H.assert_equal(crit:backward(x, y), ploss.zeros({ 6, 4 }, { dtype = "f64" }))
    end
    -- confident predictions, τ = 0.1, n_min = 0: nothing is kept
    local xc = ploss.tensor({ { 10, 0, 0 }, { 0, 10, 0 } }, { dtype = "f64" })
    local yc = ploss.tensor({ 0, 1 }, { dtype = "i64" })
    local l, g = F.ohem_cross_entropy_fused(xc, yc, { score_thresh = 0.1, n_min = 0 })
    assert.is_true(l ~= l)
    H.assert_equal(g, ploss.zeros({ 2, 3 }, { dtype = "f64" }))
    assert.are.equal(0, F.ohem_cross_entropy(xc, yc, { score_thresh = 0.1, n_min = 0, reduction = "sum" }))
    -- an empty batch
    local le = F.ohem_cross_entropy(ploss.empty({ 0, 3 }, { dtype = "f64" }), ploss.empty({ 0 }, { dtype = "i64" }))
    assert.is_true(le ~= le)
  end)
end)

describe("OHEM with a NaN or infinite logit", function()
  it("keeps its sample as the hardest: the loss is NaN, as the plain cross-entropy's", function()
    -- confident predictions (scores near 1, above τ) but sample 2's NaN and sample 3's +inf
    local xv = { { 10, 0, 0 }, { 0 / 0, 10, 0 }, { 0, 0, math.huge }, { 0, 10, 0 } }
    local y = ploss.tensor({ 0, 1, 2, 1 }, { dtype = "i64" })
    for _, dtype in ipairs { "f64", "f32" } do
      local x = ploss.tensor(xv, { dtype = dtype })
      for _, fname in ipairs { "ohem_cross_entropy", "ohem_large_margin" } do
        for _, n_min in ipairs { 0, 1, 10 } do
          local what = string.format("%s %s n_min %d", dtype, fname, n_min)
          local o = { score_thresh = 0.5, n_min = n_min, reduction = "none" }
          local per = H.values(F[fname](x, y, o))
          -- samples 2 and 3 are NaN; 1 and 4 are easy (p_y ≈ 1 > τ): not kept (0) unless
          -- n_min >= M keeps every valid sample
          assert.is_true(per[2] ~= per[2] and per[3] ~= per[3], what)
          if n_min < 4 then
            assert.are.equal(0, per[1], what)
            assert.are.equal(0, per[4], what)
          else
            assert.is_true(per[1] > 0 and per[4] > 0, what)
          end
          o.reduction = "mean"
          local l, g = F[fname .. "_fused"](x, y, o)
          assert.is_true(l ~= l, what .. " mean")
          -- τ = −0 is τ = 0 (its f32 sign bit would key it above every score)
          H.assert_close(F[fname](x, y, { score_thresh = -0.0, n_min = n_min, reduction = "none" }),
            H.values(F[fname](x, y, { score_thresh = 0, n_min = n_min, reduction = "none" })),
            { rtol = 0, atol = 0, what = what .. " τ = −0" })
          if n_min < 4 then
            local gv = g:totable()
            for _, k in ipairs { 1, 4 } do
              for j = 1, 3 do assert.are.equal(0, gv[k][j], what .. " easy sample's gradient") end
            end
          end
        end
      end
    end
  end)
end)

describe("OHEM gradients (central differences, f64)", function()
  it("for both losses and every reduction", function()
    local seed = 6900
    for _, fname in ipairs { "ohem_cross_entropy", "ohem_large_margin" } do
      for _, red in ipairs { "mean", "sum", "none" } do
        seed = seed + 1
        H.seed(seed)
        local x = H.random_logits({ 12, 4 }, { std = 2 })
        local y = S.labels({ 12, 4 }, { ignore = 0.2, ignore_index = IGN })
        local name = fname == "ohem_cross_entropy" and "OhemCrossEntropyLoss" or "OhemLargeMarginLoss"
        S.gradcheck(name, fname, x, y, { reduction = red, score_thresh = 0.4, n_min = 3 }, fname .. " " .. red, seed)
      end
    end
  end)
end)

describe("OHEM dtypes, layouts, in place", function()
  it("f32, f16 and bf16 inputs follow f64 on the same values", function()
    H.seed(64)
    for _, dt in ipairs { "f32", "f16", "bf16" } do
      local x = ploss.randn({ 2, 5, 8, 8 }, { dtype = dt, std = 2 })
      local y = H.random_labels({ 2, 8, 8 }, 5, { ignore = 0.2, ignore_index = IGN })
      for _, fname in ipairs { "ohem_cross_entropy", "ohem_large_margin" } do
        local l, g = F[fname .. "_fused"](x, y, { n_min = 20 })
        local lr, gr = F[fname .. "_fused"](x:double(), y, { n_min = 20 })
        assert.are.equal(dt, g:dtype())
        H.assert_close(l, lr, { rtol = 1e-6, what = dt .. " " .. fname })
        H.assert_close(g, gr, { rtol = H.tol[dt].rtol, atol = H.tol[dt].atol, what = dt .. " " .. fname })
      end
    end
  end)

  it("channels-last input gives the values of the contiguous one; inplace writes over the input", function()
    H.seed(65)
    local x = H.random_logits({ 2, 5, 4, 6 })
    local xl = x:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3)
    local y = H.random_labels({ 2, 4, 6 }, 5, { ignore = 0.2, ignore_index = IGN })
    for _, fname in ipairs { "ohem_cross_entropy", "ohem_large_margin" } do
      local l1, g1 = F[fname .. "_fused"](x, y, { n_min = 10, score_thresh = 0.3 })
      local l2, g2 = F[fname .. "_fused"](xl, y, { n_min = 10, score_thresh = 0.3 })
      H.assert_close(l2, l1, { rtol = 1e-14 })
      H.assert_close(g2, g1, { rtol = 1e-14, atol = 1e-17 })
      local xc = x:clone()
      local l3, g3 = F[fname .. "_fused"](xc, y, { n_min = 10, score_thresh = 0.3, inplace = true })
      assert.are.equal(xc, g3)
      assert.are.equal(l1, l3)
      H.assert_equal(g3, g1)
    end
  end)
end)

describe("OHEM errors", function()
  local x = ploss.randn({ 3, 4 })
  local y = ploss.tensor({ 0, 3, 1 }, { dtype = "i64" })
  local loss = ploss.empty({}, { dtype = "f32" })
  it("rejects bad options and labels before writing", function()
    H.expect_error(function() F.ohem_cross_entropy(x, y, { score_thresh = 1.5, out = loss }) end,
      "opts.score_thresh: 1.5 is not a finite number in [0, 1]", loss)
    H.expect_error(function() F.ohem_cross_entropy(x, y, { score_thresh = 0 / 0, out = loss }) end,
      "opts.score_thresh", loss)
    H.expect_error(function() F.ohem_cross_entropy(x, y, { n_min = -2, out = loss }) end,
      "opts.n_min: -2 is not an integer >= -1", loss)
    H.expect_error(function() F.ohem_large_margin(x, y, { lam = -0.5, out = loss }) end, "opts.lam", loss)
    H.expect_error(function() F.ohem_large_margin(ploss.randn({ 3, 1 }), ploss.zeros({ 3 }, { dtype = "i64" }), { out = loss }) end,
      "at least 2 classes", loss)
    local grad = ploss.empty({ 3, 4 })
    H.expect_error(function() F.ohem_cross_entropy_fused(x, ploss.tensor({ 0, 7, 1 }, { dtype = "i64" }), { out = loss, grad_input = grad }) end,
      { "class index 7 at sample (n = 1, s = 0) is outside [0, 4)", "ignore_index (255)" }, loss, grad)
    H.expect_error(function() ploss.OhemCrossEntropyLoss { lam = 1 } end, "unknown option 'lam'")
    -- the C entry point refuses the shared struct's lam set for the cross-entropy (it was ignored)
    local co = ffi.new("ploss_ohem_opts")
    ploss.C.ploss_ohem_opts_init(co)
    co.lam = 1
    H.expect_error(function()
      ploss.check(ploss.C.ploss_ohem_cross_entropy_forward(x:context(), x:dl(), y:dl(), co, loss:dl()))
    end, "opts.lam: not an option of ohem_cross_entropy", loss)
  end)
end)
