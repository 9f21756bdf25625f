-- spec/run.lua SUITE SPEC_FILE [busted options…] — run one busted spec file under LuaJIT
-- (Debian's /usr/bin/busted starts `lua`, not luajit).  The environment must make
-- `require "ploss"` work (spec/meson.build sets it; by hand: `source tools/env.sh build`);
-- this runner adds the source root (the folder above spec/) to package.path for the
-- specs' shared modules (`require "spec.helpers"`), from any working directory.
--   SUITE 'cuda': exit 77 (Meson's "skipped") when ploss.cuda_available() is false
--   (unless PLOSS_CUDA_SPEC_DEVICE=cpu, which runs the spec against the CPU as a dry run).
-- Exit status: 0 when every test passed, 1 otherwise (busted's failure count is not passed
-- through: 77 failures would read as "skipped", 256 as success).
local suite, file = arg[1], arg[2]
if not (suite and file) then
  io.stderr:write("usage: luajit spec/run.lua SUITE SPEC_FILE [busted options]\n")
  os.exit(2)
end

do -- first on the path: spec/helpers.lua of this checkout, not of the working directory
  local here = debug.getinfo(1, "S").source:match("^@(.*)$") or "spec/run.lua"
  package.path = (here:match("^(.*)/spec/run%.lua$") or ".") .. "/?.lua;" .. package.path
end

-- PLOSS_CUDA_SPEC_DEVICE=cpu: run the CUDA specs against the CPU (a dry run of the specs)
if suite == "cuda" and (os.getenv("PLOSS_CUDA_SPEC_DEVICE") or "cuda") ~= "cpu" then
  local ok, ploss = pcall(require, "ploss")
  if not ok then
    io.stderr:write("cannot load ploss: " .. tostring(ploss) .. "\n")
    os.exit(1)
  end
  if not ploss.cuda_available() then
    print(string.format("SKIP %s: no CUDA (built with CUDA: %s, devices: %d)", file,
      tostring(ploss.C.ploss_built_with_cuda() ~= 0), ploss.cuda_device_count()))
    os.exit(77)
  end
end

local real_exit = os.exit
os.exit = function(code, close)
  if code == true or code == nil or code == 0 then return real_exit(0, close) end
  return real_exit(1, close)
end

local busted_args = { file }
for i = 3, #arg do busted_args[#busted_args + 1] = arg[i] end
arg = busted_args
require "busted.runner" ({ standalone = false })
