-- Determinism of every loss on the GPU (suite 'cuda'): the same inputs give
-- bitwise the same loss and gradient on every run (raw bytes compared), for the fused pass
-- and for forward + backward (the criterion, with its saved state, and the functional
-- backward that recomputes it), in f32 and bf16, at shapes that make the kernels pick
-- different paths and grid sizes: small rows (warp per row), long rows (block per row,
-- online softmax), N×C×H×W (thread per pixel, class axis strided), and enough rows for
-- multi-block reductions of the 'mean' / 'sum' loss.
--   PLOSS_DETERMINISM_RUNS   runs per case (default 20; 3 in the CPU dry run)
--   PLOSS_DETERMINISM_SCALE  'full' (default on a GPU) or 'small' (default in the CPU dry run)
-- spec/run.lua exits 77 without a GPU; PLOSS_CUDA_SPEC_DEVICE=cpu runs it on the CPU.
local H = require "spec.helpers"
local B = require "spec.bad_input"
local ploss = H.ploss
local F = ploss.F
local DEV = H.cuda_spec_device()
local ON_GPU = DEV ~= "cpu"
local RUNS = tonumber(os.getenv("PLOSS_DETERMINISM_RUNS") or (ON_GPU and 20 or 3))
local SCALE = os.getenv("PLOSS_DETERMINISM_SCALE") or (ON_GPU and "full" or "small")

-- {sizes, what}: the kernel path each shape is meant to reach
local SHAPES = SCALE == "full" and {
  { { 64, 10 }, "small rows (warp per row)" },
  { { 33, 17 }, "odd small rows" },
  { { 8, 1000 }, "block per row" },
  { { 4, 32000 }, "long rows (online softmax)" },
  { { 2, 19, 64, 64 }, "N×C×H×W, class axis strided" },
  { { 16384, 64 }, "many rows: multi-block reduction" },
  { { 3, 7, 333, 111 }, "large N×C×H×W: multi-block reduction" },
  { { 8, 19, 192, 200 }, "N×C×H×W in shared-memory tiles (softmax II): more tiles than blocks" },
} or {
  { { 64, 10 }, "small rows" },
  { { 8, 1000 }, "long rows" },
  { { 2, 19, 8, 8 }, "N×C×H×W" },
}

-- elementwise losses see the same shapes (any shape is an elementwise input)
local function inputs(fam, sizes, dtype, seed)
  local x, y, o = B.loss_args(fam, sizes, dtype, DEV, seed)
  if fam.kind == "class" and fam.ignore ~= nil then
    -- about 10% ignored samples, at fixed positions
    local ns = B.sample_sizes(sizes)
    local flat = y:to("cpu"):view(-1)
    local n = flat:numel()
    local yv = flat:flat()
    for i = 1, n, 10 do yv[i] = fam.ignore end
    y = ploss.tensor(yv, { dtype = "i64", size = { n } }):view(ns):to(DEV)
  end
  return x, y, o
end

local function merge(a, b)
  local o = {}
  for k, v in pairs(a or {}) do o[k] = v end
  for k, v in pairs(b or {}) do o[k] = v end
  return o
end

-- Runs `fn` RUNS times; fn returns tensors; every run's bytes must equal the first's.
local function same_bytes(label, fn)
  local first
  for r = 1, RUNS do
    local outs = { fn() }
    local bytes = {}
    for i, t in ipairs(outs) do bytes[i] = B.bytes(t) end
    if not first then
      first = bytes
    else
      for i = 1, #first do
        if bytes[i] ~= first[i] then
          error(string.format("%s: output %d of run %d differs from run 1 (bitwise)", label, i, r), 2)
        end
      end
    end
  end
end

for _, fam in ipairs(B.families) do
  describe("determinism: " .. fam.name .. " (" .. DEV .. ", " .. RUNS .. " runs)", function()
    for si, shape in ipairs(SHAPES) do
      local sizes, what = shape[1], shape[2]
      if not (fam.min_classes == 2 and sizes[2] < 2) then
        it(table.concat(sizes, "x") .. " (" .. what .. ")", function()
          for _, dtype in ipairs { "f32", "bf16" } do
            local label = fam.name .. " " .. table.concat(sizes, "x") .. " " .. dtype
            local x, y, o = inputs(fam, sizes, dtype, 1000 + si)
            if fam.kind == "op" then
              local go = ploss.randn(sizes, { dtype = dtype, device = DEV, seed = 77 })
              local out = ploss.empty_like(x)
              local gi = ploss.empty_like(x)
              same_bytes(label .. " forward", function() return F[fam.name](x, { out = out }) end)
              same_bytes(label .. " backward", function() return F[fam.name .. "_backward"](x, go, { grad_input = gi }) end)
            else
              for _, red in ipairs { "mean", "sum" } do
                local oo = merge(o, { reduction = red })
                local loss = ploss.empty({}, { dtype = "f32", device = DEV })
                local grad = ploss.empty_like(x)
                same_bytes(label .. " " .. red .. " fused", function()
                  return F[fam.name .. "_fused"](x, y, merge(oo, { out = loss, grad_input = grad }))
                end)
                local crit = ploss[fam.class](oo)
                same_bytes(label .. " " .. red .. " forward + backward (criterion, saved state)", function()
                  local l = crit:forward_tensor(x, y)
                  local g = crit:backward(x, y)
                  return l, g
                end)
                local grad2 = ploss.empty_like(x)
                same_bytes(label .. " " .. red .. " forward + backward (functional, state recomputed)", function()
                  local l = F[fam.name](x, y, merge(oo, { out = loss }))
                  local g = F[fam.name .. "_backward"](x, y, nil, merge(oo, { grad_input = grad2 }))
                  return l, g
                end)
              end
            end
          end
        end)
      end
    end
  end)
end
