--- Minimal JSON for the benchmark (LuaJIT has none built in): decode bench/cases.json,
-- encode one result object per line.  Objects decode to tables, arrays to lists
-- (an empty one marked __array = true, so it encodes back as []), null to json.null.
-- Encoding: tables with only keys 1..n (or the field `__array = true`) become arrays,
-- others objects with sorted keys; numbers read back exactly (%.15g, else %.17g; integers as integers); NaN and
-- ±inf are written NaN / Infinity / -Infinity, as Python's json module reads them.
local json = {}

json.null = setmetatable({}, { __tostring = function() return "null" end })

local function decode_error(s, i, what)
  local line = 1
  for _ in s:sub(1, i):gmatch("\n") do line = line + 1 end
  error(string.format("json: %s at line %d (byte %d)", what, line, i), 0)
end

local function skip(s, i)
  return s:find("[^ \t\r\n]", i) or #s + 1
end

local escapes = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }

local function utf8_char(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64) end
  return string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end

local value

local function string_at(s, i)
  local out, j = {}, i + 1
  while true do
    local c = s:sub(j, j)
    if c == "" then decode_error(s, i, "unterminated string") end
    if c == '"' then return table.concat(out), j + 1 end
    if c == "\\" then
      local e = s:sub(j + 1, j + 1)
      if e == "u" then
        local hex = s:sub(j + 2, j + 5)
        if not hex:match("^%x%x%x%x$") then decode_error(s, j, "bad \\u escape") end
        out[#out + 1] = utf8_char(tonumber(hex, 16))
        j = j + 6
      elseif escapes[e] then
        out[#out + 1] = escapes[e]
        j = j + 2
      else
        decode_error(s, j, "bad escape")
      end
    else
      out[#out + 1] = c
      j = j + 1
    end
  end
end

value = function(s, i)
  i = skip(s, i)
  local c = s:sub(i, i)
  if c == "{" then
    local obj = {}
    i = skip(s, i + 1)
    if s:sub(i, i) == "}" then return obj, i + 1 end
    while true do
      if s:sub(i, i) ~= '"' then decode_error(s, i, "expected a key") end
      local k
      k, i = string_at(s, i)
      i = skip(s, i)
      if s:sub(i, i) ~= ":" then decode_error(s, i, "expected ':'") end
      obj[k], i = value(s, i + 1)
      i = skip(s, i)
      local d = s:sub(i, i)
      if d == "}" then return obj, i + 1 end
      if d ~= "," then decode_error(s, i, "expected ',' or '}'") end
      i = skip(s, i + 1)
    end
  elseif c == "[" then
    local arr, n = {}, 0
    i = skip(s, i + 1)
    if s:sub(i, i) == "]" then arr.__array = true return arr, i + 1 end
    while true do
      local v
      v, i = value(s, i)
      n = n + 1
      arr[n] = v
      i = skip(s, i)
      local d = s:sub(i, i)
      if d == "]" then return arr, i + 1 end
      if d ~= "," then decode_error(s, i, "expected ',' or ']'") end
      i = i + 1
    end
  elseif c == '"' then
    return string_at(s, i)
  elseif s:sub(i, i + 3) == "true" then
    return true, i + 4
  elseif s:sub(i, i + 4) == "false" then
    return false, i + 5
  elseif s:sub(i, i + 3) == "null" then
    return json.null, i + 4
  else
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
    if not num or num == "" or num == "-" then decode_error(s, i, "unexpected character '" .. c .. "'") end
    return tonumber(num), i + #num
  end
end

--- Decode a JSON text into Lua values.
function json.decode(s)
  local v, i = value(s, 1)
  i = skip(s, i)
  if i <= #s then decode_error(s, i, "trailing characters") end
  return v
end

local function encode_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    local map = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
    return map[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function encode_number(x)
  if x ~= x then return "NaN" end
  if x == math.huge then return "Infinity" end
  if x == -math.huge then return "-Infinity" end
  if x == math.floor(x) and math.abs(x) < 2 ^ 53 then return string.format("%d", x) end
  local s = string.format("%.15g", x) -- shortest of %.15g / %.17g that reads back exactly
  if tonumber(s) ~= x then s = string.format("%.17g", x) end
  return s
end

local function is_array(t)
  if t.__array then return true end
  local n = 0
  for k in pairs(t) do
    if type(k) ~= "number" then return false end
    n = n + 1
  end
  return n > 0 and n == #t
end

--- Encode a Lua value as one line of JSON.
function json.encode(v)
  local tv = type(v)
  if v == nil or v == json.null then return "null" end
  if tv == "boolean" then return tostring(v) end
  if tv == "number" then return encode_number(v) end
  if tv == "string" then return encode_string(v) end
  if tv == "cdata" then return encode_number(tonumber(v)) end
  if tv == "table" then
    if is_array(v) then
      local parts = {}
      for i = 1, #v do parts[i] = json.encode(v[i]) end
      return "[" .. table.concat(parts, ", ") .. "]"
    end
    local keys = {}
    for k in pairs(v) do
      if type(k) == "string" and k ~= "__array" then keys[#keys + 1] = k end
    end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = encode_string(k) .. ": " .. json.encode(v[k]) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  error("json: cannot encode a " .. tv)
end

return json
