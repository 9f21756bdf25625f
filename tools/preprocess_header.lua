-- preprocess_header.lua: dofile'd by tools/gen_cdef.lua and tools/gen_exports.lua.
-- Returns function(header, cc) → the header preprocessed by `cc -E -P` into its
-- declarations, with the standard headers replaced by empty ones (LuaJIT predefines their
-- types; the exports need only the names).
return function(header, cc)
  local tmp = os.tmpname()
  os.remove(tmp)
  assert(os.execute("mkdir -p " .. tmp) == 0, "cannot create " .. tmp)
  for _, h in ipairs { "stdint.h", "stddef.h" } do
    assert(io.open(tmp .. "/" .. h, "w")):close()
  end
  local cmd = string.format("%s -E -P -nostdinc -I%s -I/usr/include %s", cc, tmp, header)
  local p = assert(io.popen(cmd))
  local text = p:read("*a")
  local ok = p:close()
  os.execute("rm -rf " .. tmp)
  assert(ok and #text > 0, "preprocessing failed: " .. cmd)
  return text
end
