-- gen_exports.lua HEADER OUTPUT CC [NAME ...]: the linker version script of libploss (one
-- anonymous node: no symbol versions).  The functions declared by the public header
-- core/ploss.h (with the generated core/ploss_losses.h it includes) are exported, every
-- other symbol of the library is local.
-- The NAMEs after CC are exported too: the internal functions the C tests of spec/c/ call.
local header, output, cc = arg[1], arg[2], arg[3] or "cc"
assert(header and output, "usage: luajit gen_exports.lua HEADER OUTPUT [CC [NAME ...]]")

local preprocess = dofile(arg[0]:gsub("[^/]*$", "") .. "preprocess_header.lua")
local text = preprocess(header, cc)

local public, seen = {}, {}
for name in text:gmatch("(ploss_[%w_]+)%s*%(") do
  if not seen[name] then seen[name] = true; public[#public + 1] = name end
end
assert(#public > 0, "no ploss_ function declared in " .. header)
table.sort(public)
local tests = {}
for i = 4, #arg do
  assert(not seen[arg[i]], arg[i] .. " is public already")
  tests[#tests + 1] = arg[i]
end

local f = assert(io.open(output, "w"))
f:write("/* Generated from core/ploss.h by tools/gen_exports.lua; do not edit. */\n")
f:write("{\n  global:\n")
for _, name in ipairs(public) do f:write("    ", name, ";\n") end
if #tests > 0 then
  f:write("    /* internal: called by the C tests of spec/c/, declared in no installed header */\n")
  for _, name in ipairs(tests) do f:write("    ", name, ";\n") end
end
f:write("  local:\n    *;\n};\n")
f:close()
