-- gen_cdef.lua HEADER OUTPUT CC: preprocess core/ploss.h (and dlpack.h) into the
-- declarations LuaJIT's ffi.cdef accepts, and write them as a Lua module with the ABI
-- version.  The standard headers are replaced by empty ones: LuaJIT predefines their types.
local header, output, cc = arg[1], arg[2], arg[3] or "cc"
assert(header and output, "usage: luajit gen_cdef.lua HEADER OUTPUT [CC]")

local preprocess = dofile(arg[0]:gsub("[^/]*$", "") .. "preprocess_header.lua")
local text = preprocess(header, cc)

local src = assert(io.open(header)):read("*a")
local abi = assert(src:match("#define%s+PLOSS_ABI_VERSION%s+(%d+)"), "PLOSS_ABI_VERSION not found")

local lines = {}
for line in text:gmatch("[^\n]+") do
  if line:match("%S") then lines[#lines + 1] = line end
end
local f = assert(io.open(output, "w"))
f:write("-- Generated from core/ploss.h by tools/gen_cdef.lua; do not edit.\n")
f:write("return { abi_version = ", abi, ", cdef = [==[\n", table.concat(lines, "\n"), "\n]==] }\n")
f:close()
