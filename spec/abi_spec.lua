-- ABI spec (suite 'abi'): the Lua declarations (generated ploss/cdef.lua), the header
-- core/ploss.h and the loaded library agree.  Covers every family's declarations
-- automatically: nothing here lists functions by hand.
local ffi = require "ffi"
local H = require "spec.helpers"
local ploss = H.ploss
local C = ploss.C
local cdef = require "ploss.cdef"

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local header_path = H.root .. "/core/ploss.h"
local header = read(header_path)

-- top-level statements of the cdef text (split at ';' outside braces)
local function statements(text)
  local out, depth, cur = {}, 0, {}
  for ch in text:gmatch(".") do
    if ch == "{" then depth = depth + 1 elseif ch == "}" then depth = depth - 1 end
    if ch == ";" and depth == 0 then
      out[#out + 1] = table.concat(cur)
      cur = {}
    else
      cur[#cur + 1] = ch
    end
  end
  return out
end

local function declared_functions(text)
  local names = {}
  for _, st in ipairs(statements(text)) do
    local s = st:gsub("%s+", " ")
    if not s:match("^%s*typedef") then
      local name = s:match("(ploss_[%w_]+)%s*%(")
      if name then names[#names + 1] = name end
    end
  end
  return names
end

-- enum constants NAME -> value (explicit or implicit) from C text
local function enum_constants(text)
  local out = {}
  for body in text:gmatch("typedef%s+enum[%w_%s]*(%b{})") do
    local nextv = 0
    for item in body:sub(2, -2):gmatch("[^,]+") do
      item = item:gsub("/%*.-%*/", ""):gsub("^%s+", ""):gsub("%s+$", "")
      local name, val = item:match("^([%w_]+)%s*=%s*([%-%dxXa-fA-FuU]+)$")
      if not name then name = item:match("^([%w_]+)$") end
      if name then
        local v = val and tonumber((val:gsub("[uU]$", ""))) or nextv
        out[name] = v
        nextv = v + 1
      end
    end
  end
  return out
end

-- struct name -> list of field names, from the cdef text (typedef struct [tag] {…} NAME;)
local function structs(text)
  local out = {}
  for body, name in text:gmatch("typedef%s+struct[%w_%s]*(%b{})%s*([%w_]+)%s*;") do
    local fields = {}
    for decl in body:sub(2, -2):gmatch("[^;]+") do
      local fp = decl:match("%(%s*%*%s*([%w_]+)%s*%)") -- function pointer
      local f = fp or decl:match("([%w_]+)%s*%b[]%s*$") or decl:match("([%w_]+)%s*$")
      if f then fields[#fields + 1] = f end
    end
    out[#out + 1] = { name = name, fields = fields }
  end
  return out
end

describe("ABI", function()
  it("library, header and cdef have the same ABI version", function()
    local hv = tonumber(header:match("#define%s+PLOSS_ABI_VERSION%s+(%d+)"))
    assert.are.equal(hv, cdef.abi_version)
    assert.are.equal(hv, C.ploss_abi_version())
    assert.are.equal(hv, ploss.abi_version)
  end)

  it("every function declared in the cdef resolves in the library", function()
    local names = declared_functions(cdef.cdef)
    assert.is_true(#names >= 25, "only " .. #names .. " functions found in the cdef")
    local missing = {}
    for _, n in ipairs(names) do
      local ok = pcall(function() return C[n] end)
      if not ok then missing[#missing + 1] = n end
    end
    assert.are.same({}, missing)
  end)

  it("the cdef declares every function of the header", function()
    local in_cdef = {}
    for _, n in ipairs(declared_functions(cdef.cdef)) do in_cdef[n] = true end
    local text = header:gsub("/%*.-%*/", ""):gsub("#[^\n]*", "")
    local missing = {}
    for _, n in ipairs(declared_functions(text)) do
      if not in_cdef[n] then missing[#missing + 1] = n end
    end
    assert.are.same({}, missing)
  end)

  it("the library exports the header's functions and, of its own, nothing else", function()
    -- the dynamic symbol table (nm comes with the C toolchain the build needs)
    local p = assert(io.popen("nm -D --defined-only " .. ploss.library_path .. " 2>&1"))
    local out = p:read("*a")
    assert.is_true(p:close() ~= false, out)
    local exported = {}
    for name in out:gmatch("%s[TtWw]%s+([%w_]+)") do exported[name] = true end
    local in_header = {}
    for _, n in ipairs(declared_functions(cdef.cdef)) do
      in_header[n] = true
      assert.is_true(exported[n] or false, n .. " is declared but not exported")
    end
    -- the internal functions spec/c's tests call (meson.build's exports_map) are the others
    local tests = { ploss_engine_computes = true, ploss_run_loss = true, ploss_view_init = true }
    local extra = {}
    for name in pairs(exported) do
      if name:match("^ploss_") and not in_header[name] and not tests[name] then extra[#extra + 1] = name end
    end
    table.sort(extra)
    assert.are.same({}, extra)
    assert.is_nil(exported.ploss_rows_run) -- an engine's front: internal
  end)

  it("enum constants of the header have the same values through the FFI", function()
    local consts = enum_constants((header:gsub("/%*.-%*/", "")))
    local n = 0
    for name, v in pairs(consts) do
      if name:match("^PLOSS_") then
        assert.are.equal(v, tonumber(C[name]), name)
        n = n + 1
      end
    end
    assert.is_true(n >= 20)
    -- fixed values named by the header
    assert.are.equal(0, C.PLOSS_OK)
    assert.are.equal(0, C.PLOSS_REDUCTION_NONE)
    assert.are.equal(1, C.PLOSS_REDUCTION_MEAN)
    assert.are.equal(2, C.PLOSS_REDUCTION_SUM)
    assert.are.equal(0, C.PLOSS_SMOOTHING_PYTORCH)
    assert.are.equal(1, C.PLOSS_SMOOTHING_REFERENCE)
    assert.are.equal(2, C.PLOSS_SMOOTHING_UNIFORM_OTHERS)
  end)

  it("the library names every status as the header does", function()
    local consts = enum_constants((header:gsub("/%*.-%*/", "")))
    for name, v in pairs(consts) do
      if (name == "PLOSS_OK" or name:match("^PLOSS_ERR_")) then
        assert.are.equal(name, ffi.string(C.ploss_status_string(v)))
      end
    end
    assert.are.equal("PLOSS_UNKNOWN_STATUS", ffi.string(C.ploss_status_string(C.PLOSS_STATUS_COUNT)))
    assert.are.equal("PLOSS_UNKNOWN_STATUS", ffi.string(C.ploss_status_string(-1)))
  end)

  it("DLPack structs have the standard 64-bit layout", function()
    assert.are.equal(8, ffi.sizeof("DLDevice"))
    assert.are.equal(4, ffi.sizeof("DLDataType"))
    assert.are.equal(48, ffi.sizeof("DLTensor"))
    assert.are.equal(0, ffi.offsetof("DLTensor", "data"))
    assert.are.equal(8, ffi.offsetof("DLTensor", "device"))
    assert.are.equal(16, ffi.offsetof("DLTensor", "ndim"))
    assert.are.equal(20, ffi.offsetof("DLTensor", "dtype"))
    assert.are.equal(24, ffi.offsetof("DLTensor", "shape"))
    assert.are.equal(32, ffi.offsetof("DLTensor", "strides"))
    assert.are.equal(40, ffi.offsetof("DLTensor", "byte_offset"))
    assert.are.equal(24, ffi.sizeof("ploss_memory_stats"))
  end)

  it("every struct's size and field offsets match the C compiler's", function()
    local cc = os.getenv("CC") or "cc"
    local list = structs(cdef.cdef)
    assert.is_true(#list >= 5)
    local tmp = os.tmpname()
    local src = { "#include <stdio.h>", "#include <stddef.h>", '#include "ploss.h"', "int main(void) {" }
    for _, s in ipairs(list) do
      src[#src + 1] = string.format('printf("%s %%zu\\n", sizeof(%s));', s.name, s.name)
      for _, f in ipairs(s.fields) do
        src[#src + 1] = string.format('printf("%s.%s %%zu\\n", offsetof(%s, %s));', s.name, f, s.name, f)
      end
    end
    src[#src + 1] = "return 0; }"
    local cfile = tmp .. ".c"
    local fh = assert(io.open(cfile, "w"))
    fh:write(table.concat(src, "\n"), "\n")
    fh:close()
    local cmd = string.format("%s -std=c11 -I%s/core -o %s %s 2>&1", cc, H.root, tmp .. ".bin", cfile)
    local p = io.popen(cmd)
    local out = p:read("*a")
    local ok = p:close()
    if not ok then
      os.remove(cfile)
      pending("no C compiler to check struct layouts (" .. cmd .. "): " .. out)
      return
    end
    p = io.popen(tmp .. ".bin 2>&1")
    local got = p:read("*a")
    local ran = p:close()
    os.remove(cfile); os.remove(tmp .. ".bin"); os.remove(tmp)
    if not ran or not got:match("^[%w_]+ %d+\n") then
      -- e.g. a temporary folder mounted noexec: the layouts cannot be read here
      pending("the compiled layout check did not run (" .. tmp .. ".bin): " .. got)
      return
    end
    local n = 0
    for key, v in got:gmatch("(%S+) (%d+)") do
      local sname, field = key:match("^([^.]+)%.(.+)$")
      if sname then
        assert.are.equal(tonumber(v), ffi.offsetof(sname, field), "offsetof(" .. key .. ")")
      else
        assert.are.equal(tonumber(v), ffi.sizeof(key), "sizeof(" .. key .. ")")
      end
      n = n + 1
    end
    assert.is_true(n > 20)
  end)

  it("the README's C program compiles against the header, links the library and prints what it says", function()
    local readme = read(H.root .. "/README.md")
    local section = readme:match("\n## From C\n(.-)\n## ")
    assert(section, "README.md has no '## From C' section")
    local program = section:match("```c\n(.-)```")
    local says = section:match("it prints `([^`]+)`")
    assert(program and says, "the section's C program or the line it prints is missing")
    local cc = os.getenv("CC") or "cc"
    local lib = os.getenv("PLOSS_LIBRARY") or ploss.library_path
    local libdir = lib:match("^(.*)/[^/]+$")
    local tmp = os.tmpname()
    local fh = assert(io.open(tmp .. ".c", "w"))
    fh:write(program)
    fh:close()
    -- linked by the library's file name, not a -l search; a sanitizer build's library
    -- leaves the sanitizer's symbols to the runtime the environment preloads
    local cmd = string.format("%s -std=c11 -Wall -Wextra -Werror -I%s/core -o %s %s %s -Wl,-rpath,%s " ..
      "-Wl,--allow-shlib-undefined 2>&1", cc,
      H.root, tmp .. ".bin", tmp .. ".c", lib, libdir)
    local p = io.popen(cmd)
    local out = p:read("*a")
    local ok = p:close()
    os.remove(tmp .. ".c")
    if not ok and out:match("not found") then
      os.remove(tmp)
      pending("no C compiler (" .. cmd .. "): " .. out)
      return
    end
    assert(ok, cmd .. "\n" .. out)
    p = io.popen(tmp .. ".bin 2>&1")
    local got = p:read("*a")
    local ran = p:close()
    os.remove(tmp .. ".bin"); os.remove(tmp)
    if not ran and got:match("^sh: .*not found") then
      -- a compiler that wrote no program (the GPU machine's), as the layout check above
      pending("the compiled program did not run (" .. tmp .. ".bin): " .. got)
      return
    end
    assert.are.equal(says .. "\n", got)
  end)

  it("every *_opts_init fills its struct and accepts NULL", function()
    local n = 0
    local text = cdef.cdef:gsub("%s+", " ")
    for fname, ctype in text:gmatch("void (ploss_[%w_]+_opts_init)%s*%(%s*([%w_]+)%s*%*") do
      if pcall(function() return C[fname] end) then -- (unresolved ones fail the test above)
        local o = ffi.new(ctype)
        C[fname](o)
        C[fname](nil)
        n = n + 1
      end
    end
    assert.is_true(n >= 1)
    local o = ffi.new("ploss_cross_entropy_opts")
    C.ploss_cross_entropy_opts_init(o)
    assert.are.equal(C.PLOSS_REDUCTION_MEAN, tonumber(o.reduction))
    assert.are.equal(-100, tonumber(o.ignore_index))
    assert.are.equal(0, o.label_smoothing)
    assert.are.equal(1, o.scale)
    assert.are.equal(0, o.inplace)
  end)

  local function run_lua(code, env)
    local tmp = os.tmpname()
    local f = assert(io.open(tmp, "w"))
    f:write(code)
    f:close()
    local p = io.popen((env or "") .. " luajit " .. tmp .. " 2>&1")
    local out = p:read("*a")
    local ok = p:close()
    os.remove(tmp)
    return ok, out
  end

  it("refuses a library of another ABI version, naming the file it loaded", function()
    local ok, out = run_lua([[
      package.preload["ploss.cdef"] = function()
        local real = dofile((package.searchpath("ploss.cdef", package.path)))
        return { abi_version = real.abi_version + 1000, cdef = real.cdef }
      end
      local ok, err = pcall(require, "ploss")
      io.write(tostring(ok), " ", tostring(err))
    ]])
    assert.is_true(ok, out)
    assert.matches("^false ", out)
    assert.is_truthy(out:find("ABI mismatch", 1, true), out)
    assert.is_truthy(out:find(ploss.library_path, 1, true), out)
  end)

  it("says which library it could not load", function()
    local ok, out = run_lua([[
      local ok, err = pcall(require, "ploss")
      io.write(tostring(ok), " ", tostring(err))
    ]], "PLOSS_LIBRARY=/nonexistent/libploss.so.0")
    assert.is_true(ok, out)
    assert.is_truthy(out:find("false ploss: cannot load PLOSS_LIBRARY=/nonexistent/libploss.so.0", 1, true), out)
  end)

  it("reports library facts", function()
    assert.is_true(C.ploss_built_with_cuda() == 0 or C.ploss_built_with_cuda() == 1)
    assert.is_true(ploss.cuda_device_count() >= 0)
    assert.are.equal("boolean", type(ploss.cuda_available()))
  end)

  it("has one version: meson.build's, the library's and the Lua modules'", function()
    local project = read(H.root .. "/meson.build"):match("project%(.-version:%s*'([^']+)'")
    assert.is_truthy(project, "no version in meson.build's project()")
    assert.are.equal(project, ffi.string(C.ploss_version()))
    local v = ploss.version()
    assert.are.equal(project, v.version)
    assert.are.equal(project, ploss._VERSION)
    assert.are.equal(C.ploss_abi_version(), v.abi)
    assert.are.equal(C.ploss_built_with_cuda() ~= 0, v.cuda)
    assert.are.equal(string.format("ploss %s (ABI %d, %s)", project, v.abi,
      v.cuda and "CUDA kernels" or "CPU only"), tostring(v))
    assert.are_not.equal(v, ploss.version()) -- a fresh table each call: the caller may keep it
  end)
end)
