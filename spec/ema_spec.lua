-- EMA of parameters on the CPU (suite 'cpu'): the cases of spec/ema_cases.lua.
require "spec.ema_cases" ("cpu", getfenv(1))
