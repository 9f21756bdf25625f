# Source me: `source tools/env.sh [builddir]` (default: build) — makes `require "ploss"`
# shellcheck shell=bash
# (LuaJIT) find this checkout's Lua sources (lua/ploss/) and the build tree's generated
# modules (<builddir>/lua/ploss/cdef.lua, config.lua) and library (<builddir>/libploss.so.0).
#
# LUA_PATH: the user's own entries first, then ploss's, so that nothing of this checkout
# shadows the user's modules (the directories added hold only the `ploss` package):
#   - LUA_PATH unset or ";;":      ./?.lua;<ploss>;;  (the default path stays searched,
#                                  after ploss: busted and other system modules, but not
#                                  an installed copy of ploss before this checkout's);
#   - LUA_PATH ending in ";;":     <yours>;./?.lua;<ploss>;;
#   - any other LUA_PATH:          <yours>;<ploss>
# Sourcing again (e.g. for another build folder) first takes back what the last time added
# (kept in PLOSS_LUA_PATH).  `meson devenv -C <builddir>` sets the same path.
_ploss_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
_ploss_build="${1:-build}"
case "$_ploss_build" in /*) ;; *) _ploss_build="$_ploss_root/$_ploss_build" ;; esac
if [ ! -f "$_ploss_build/lua/ploss/cdef.lua" ]; then
  echo "tools/env.sh: $_ploss_build/lua/ploss/cdef.lua not found; run 'meson setup $_ploss_build && ninja -C $_ploss_build' first" >&2
fi
_ploss_lua="$_ploss_build/lua/?.lua;$_ploss_root/lua/?.lua;$_ploss_root/lua/?/init.lua"
_ploss_user="${LUA_PATH-}"
if [ -n "${PLOSS_LUA_PATH-}" ]; then
  case "$_ploss_user" in
    "./?.lua;$PLOSS_LUA_PATH;;") _ploss_user="" ;;
    *";./?.lua;$PLOSS_LUA_PATH;;") _ploss_user="${_ploss_user%";./?.lua;$PLOSS_LUA_PATH;;"};;" ;;
    *";$PLOSS_LUA_PATH") _ploss_user="${_ploss_user%";$PLOSS_LUA_PATH"}" ;;
  esac
fi
case "$_ploss_user" in
  "" | ";;") LUA_PATH="./?.lua;$_ploss_lua;;" ;;
  *";;") LUA_PATH="${_ploss_user%;;};./?.lua;$_ploss_lua;;" ;;
  *) LUA_PATH="$_ploss_user;$_ploss_lua" ;;
esac
export LUA_PATH
export PLOSS_LUA_PATH="$_ploss_lua"
export PLOSS_LIBRARY="$_ploss_build/libploss.so.0"
export PLOSS_ROOT="$_ploss_root"
unset _ploss_root _ploss_build _ploss_lua _ploss_user
