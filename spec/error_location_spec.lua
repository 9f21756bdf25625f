-- Error location spec (suite 'cpu'): a ploss error names the line of the user's code that
-- led to it, also when the call into ploss is a tail call (`return crit:forward(x, t)`),
-- and never a line inside ploss.  The user's code is a chunk loaded under a file name of
-- its own (my_model.lua), so that its lines are told apart from this spec's.
-- Two kinds of error: a C call's failure reported through ploss.check (a target of the
-- wrong shape) and a Lua-side check through ploss.raise (an input that is not a tensor).
local H = require "spec.helpers"
local ploss = H.ploss

local crit = ploss.CrossEntropyLoss {}
local x = ploss.randn({ 4, 3 })
local bad_target = ploss.randint(0, 3, { 5 })

local cases = {
  { what = "C call (ploss.check)", input = x, target = bad_target,
    fragment = "ploss: cross_entropy_forward: target: expected shape [4]" },
  { what = "Lua check (ploss.raise)", input = "not a tensor", target = bad_target,
    fragment = "input: expected a ploss tensor" },
}

-- load `src` as the user's file my_model.lua
local function user_chunk(src)
  return assert(load(src, "@my_model.lua"))
end

-- the error message of running `chunk(crit, input, target)`
local function error_of(chunk, case)
  local ok, err = pcall(chunk, crit, case.input, case.target)
  assert.is_false(ok, "expected an error")
  err = tostring(err)
  assert.is_truthy(err:find(case.fragment, 1, true), "unexpected message: " .. err)
  return err
end

for _, case in ipairs(cases) do
  describe("a " .. case.what .. " error", function()
    it("points at the user's line for a direct call", function()
      local chunk = user_chunk(table.concat({
        "local crit, x, t = ...",
        "crit:forward(x, t)",
      }, "\n"))
      assert.matches("^my_model%.lua:2: ploss: ", error_of(chunk, case))
    end)

    it("points at the user's line for a call inside an expression", function()
      local chunk = user_chunk(table.concat({
        "local crit, x, t = ...",
        "local loss = 2 * crit:forward(x, t)",
        "return loss",
      }, "\n"))
      assert.matches("^my_model%.lua:2: ploss: ", error_of(chunk, case))
    end)

    it("points at the line calling the function that made a tail call", function()
      -- a tail call leaves no frame of `step` (LuaJIT), or one marked "(tail call)" (Lua
      -- 5.1), which is skipped: the nearest line of the user's code is step()'s call
      local chunk = user_chunk(table.concat({
        "local crit, x, t = ...",
        "local function step()",
        "  return crit:forward(x, t)",
        "end",
        "step()",
      }, "\n"))
      assert.matches("^my_model%.lua:5: ploss: ", error_of(chunk, case))
    end)

    it("points at the caller of a chunk that ends in a tail call", function()
      local model = user_chunk("local crit, x, t = ...\nreturn crit:forward(x, t)")
      local main = assert(load(table.concat({
        "local model, crit, x, t = ...",
        "local loss = model(crit, x, t)",
        "return loss",
      }, "\n"), "@main.lua"))
      local ok, err = pcall(main, model, crit, case.input, case.target)
      assert.is_false(ok)
      assert.matches("^main%.lua:2: ploss: ", tostring(err))
    end)

    it("has no location, rather than a line inside ploss, when no user frame is left", function()
      -- as the REPL's `= crit:forward(x, t)`: the chunk tail-calls ploss and C code ran
      -- it, so no frame of Lua code outside ploss remains on the (coroutine's) stack
      local chunk = user_chunk("local crit, x, t = ...\nreturn crit:forward(x, t)")
      local ok, err = coroutine.resume(coroutine.create(chunk), crit, case.input, case.target)
      assert.is_false(ok)
      err = tostring(err)
      assert.matches("^ploss: ", err)
      assert.is_truthy(err:find(case.fragment, 1, true), "unexpected message: " .. err)
    end)
  end)
end
