# Source me: `source tools/env.sh [builddir]` (default: build) — makes `require "ploss"`
# (LuaJIT) find this checkout's Lua sources (lua/) and the build tree's generated modules
# (<builddir>/lua/ploss/cdef.lua, config.lua) and library (<builddir>/libploss.so.0).
# The default Lua path stays searched (busted and other system modules).
_ploss_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
_ploss_build="${1:-build}"
case "$_ploss_build" in /*) ;; *) _ploss_build="$_ploss_root/$_ploss_build" ;; esac
if [ ! -f "$_ploss_build/lua/ploss/cdef.lua" ]; then
  echo "tools/env.sh: $_ploss_build/lua/ploss/cdef.lua not found; run 'meson setup $_ploss_build && ninja -C $_ploss_build' first" >&2
fi
export LUA_PATH="$_ploss_build/lua/?.lua;$_ploss_root/lua/?.lua;$_ploss_root/lua/?/init.lua;$_ploss_root/spec/?.lua;;"
export PLOSS_LIBRARY="$_ploss_build/libploss.so.0"
export PLOSS_ROOT="$_ploss_root"
unset _ploss_root _ploss_build
