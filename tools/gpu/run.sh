#!/usr/bin/env bash
# tools/gpu/run.sh — runs ON the GPU machine, from the repository root, with what
# tools/gpu/prepare.sh made here and the device tool carried there (.debs and .gpu):
#
#   tools/gpu/run.sh [--build DIR] SUBCOMMAND [ARGS...]
#
#   specs [SUITE|FILE ...]      run spec files with busted under LuaJIT, one process per
#                               file, as `meson test` would (spec/run.lua; exit 77 = skipped);
#                               SUITE is abi, cpu, cuda or examples (default: all of them),
#                               FILE a spec file or its stem (cuda_cross_entropy)
#   sanitize TOOL [FILE ...]    the cuda specs (or FILEs) under
#                               `compute-sanitizer --tool TOOL` (memcheck, racecheck,
#                               initcheck, synccheck; 'all' = the first three in turn)
#   bench [ARGS ...]            luajit bench/bench.lua ARGS
#   example [ARGS ...]          luajit examples/fashion_mnist.lua --data <unpacked data> ARGS
#   exec COMMAND [ARGS ...]     any command in the same environment
#   env                         print the environment as export lines
#
# What it does first, every time (cheap after the first):
#   1. unpacks every .deb of .debs/ under /tmp/ploss-root with `dpkg-deb -x` (python3's
#      ar/tar when dpkg-deb is missing) — never over /;
#   2. PATH, LD_LIBRARY_PATH, LUA_PATH, LUA_CPATH so that luajit, busted and its modules
#      come from there, and the library's needs (OpenBLAS, libgomp, CUDA's libraries) are
#      found (unpacked libraries only where the machine has none of that soname);  then `source tools/env.sh DIR` for the build (DIR: --build, else .gpu/build,
#      else build-gpu).  Meson build folders hold this machine's absolute paths, so the
#      specs are run directly, not through `meson test`.
# Logs are copied to $OUT (the device tool's folder that comes back) when it is set.
# Exit status: non-zero when a spec failed, a sanitizer reported an error, or the command
# failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
REPO=$PWD
PREFIX=${PLOSS_GPU_ROOT:-/tmp/ploss-root}
DEBS=${PLOSS_DEBS:-$REPO/.debs}
OUTDIR=${OUT:-}

BUILD=
if [ "${1:-}" = "--build" ]; then
    BUILD=$2
    shift 2
fi
if [ -z "$BUILD" ]; then
    for b in .gpu/build build-gpu; do
        if [ -f "$b/lua/ploss/cdef.lua" ]; then BUILD=$b; break; fi
    done
fi
if [ -z "$BUILD" ] || [ ! -f "$BUILD/lua/ploss/cdef.lua" ]; then
    echo "run.sh: no build found (.gpu/build or build-gpu with lua/ploss/cdef.lua); run tools/gpu/prepare.sh on the developer machine and carry .gpu" >&2
    exit 2
fi
case "$BUILD" in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
# prepare.sh carries the library gzip'd
if [ -f "$BUILD/libploss.so.0.gz" ] && [ ! -f "$BUILD/libploss.so.0" ]; then
    gzip -dc "$BUILD/libploss.so.0.gz" >"$BUILD/libploss.so.0.tmp" ||
        python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
            "$BUILD/libploss.so.0.gz" "$BUILD/libploss.so.0.tmp" || exit 2
    mv "$BUILD/libploss.so.0.tmp" "$BUILD/libploss.so.0"
fi

# ---- 1. unpack -------------------------------------------------------------------------------
unpack_deb() { # unpack_deb FILE DEST: dpkg-deb, else python3 reads the ar and tar members
    if ! dpkg-deb -x "$1" "$2" 2>/dev/null; then
        python3 - "$1" "$2" <<'EOF'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", deb + ": not an ar archive"
pos = 8
while pos < len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    pos += 60 + size + (size & 1)
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            sys.exit(deb + ": zstd data member needs dpkg-deb")
        with tarfile.open(fileobj=io.BytesIO(body)) as t:
            t.extractall(dest)
        break
EOF
    fi
}

shopt -s nullglob
debs=("$DEBS"/*.deb)
if [ "${#debs[@]}" -eq 0 ]; then
    echo "run.sh: no .deb files in $DEBS; run tools/gpu/fetch_debs.sh (or prepare.sh) here and carry .debs" >&2
    exit 2
fi
stamp=$(ls -l "${debs[@]}" | md5sum | cut -c1-16)
if [ "$(cat "$PREFIX/.ploss-debs" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$PREFIX"
    mkdir -p "$PREFIX"
    for f in "${debs[@]}"; do
        unpack_deb "$f" "$PREFIX" || { echo "run.sh: cannot unpack $f" >&2; exit 2; }
    done
    # Debian makes /usr/bin/gnuplot with update-alternatives (postinst), not in the .deb
    if [ -x "$PREFIX/usr/bin/gnuplot-nox" ] && [ ! -e "$PREFIX/usr/bin/gnuplot" ]; then
        ln -s gnuplot-nox "$PREFIX/usr/bin/gnuplot"
    fi
    echo "$stamp" >"$PREFIX/.ploss-debs"
    echo "run.sh: unpacked ${#debs[@]} packages under $PREFIX"
fi

# ---- 2. environment ----------------------------------------------------------------------------
ARCH_LIB=$PREFIX/usr/lib/x86_64-linux-gnu
export PATH="$PREFIX/usr/bin:$PATH"
# CUDA's libraries: the toolkit's, then the pip wheels' (PyTorch brings cuBLAS there)
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && cuda_dirs="$cuda_dirs:$d"
done
for d in $(python3 -c 'import glob, site; print(" ".join(sorted(set(p for s in site.getsitepackages() for p in glob.glob(s + "/nvidia/*/lib")))))' 2>/dev/null); do
    cuda_dirs="$cuda_dirs:$d"
done
# Only the unpacked libraries that the machine lacks are put on the path (links in one
# folder): a Debian 12 library must not shadow a newer one that other programs there
# (python3, PyTorch) were built against.
FALLBACK=$PREFIX/fallback-lib
rm -rf "$FALLBACK"
mkdir -p "$FALLBACK"
known=$(ldconfig -p 2>/dev/null | awk 'NR > 1 {print $1}' | sort -u)
for f in "$ARCH_LIB"/*.so.* "$ARCH_LIB"/openblas-pthread/*.so.* "$PREFIX"/lib/x86_64-linux-gnu/*.so.*; do
    name=$(basename "$f")
    grep -qxF "$name" <<<"$known" || ln -sf "$f" "$FALLBACK/$name"
done
export LD_LIBRARY_PATH="$FALLBACK${cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# shellcheck source=../env.sh
source "$REPO/tools/env.sh" "$BUILD"
export LUA_PATH="$LUA_PATH;$PREFIX/usr/share/lua/5.1/?.lua;$PREFIX/usr/share/lua/5.1/?/init.lua"
export LUA_CPATH="$ARCH_LIB/lua/5.1/?.so;;"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export FONTCONFIG_FILE=${FONTCONFIG_FILE:-$PREFIX/etc/fonts/fonts.conf}
export GNUPLOT_DRIVER_DIR=${GNUPLOT_DRIVER_DIR:-$PREFIX/usr/libexec/gnuplot/5.4}
LUAJIT=$PREFIX/usr/bin/luajit
if [ ! -x "$LUAJIT" ]; then
    echo "run.sh: $LUAJIT missing after unpacking (is luajit in .debs?)" >&2
    exit 2
fi

log_to_out() { # log_to_out NAME: tee stdin into $OUT/NAME when $OUT is set
    if [ -n "$OUTDIR" ]; then tee -a "$OUTDIR/$1"; else cat; fi
}

check_env() {
    echo "run.sh: build $BUILD, luajit $("$LUAJIT" -v 2>&1 | cut -d' ' -f1-2), root $PREFIX"
    nvidia-smi -L 2>/dev/null || echo "run.sh: nvidia-smi: no GPU visible"
    local missing
    missing=$(ldd "$PLOSS_LIBRARY" 2>&1 | grep 'not found' || true)
    if [ -n "$missing" ]; then
        echo "run.sh: $PLOSS_LIBRARY cannot find:"
        echo "$missing"
    fi
    "$LUAJIT" -e 'local p = require "ploss"; print(string.format("run.sh: ploss loaded; built with CUDA: %s, CUDA devices: %d",
        tostring(p.C.ploss_built_with_cuda() ~= 0), p.cuda_device_count()))' || return 1
}

# Spec files of spec/meson.build as "stem suite" lines.
spec_list() {
    grep -oP "^\s*\['\K[a-z0-9_]+', '[a-z]+" spec/meson.build | sed "s/', '/ /"
}

# Selected specs for the arguments (suites, files or stems); all when none.
select_specs() {
    local all
    all=$(spec_list)
    if [ "$#" -eq 0 ]; then
        echo "$all"
        return
    fi
    local a stem
    for a in "$@"; do
        stem=$(basename "$a" .lua)
        stem=${stem%_spec}
        echo "$all" | awk -v a="$a" -v s="$stem" '$2 == a || $1 == s'
    done
}

# Runs each "stem suite" line of stdin; WRAP (array) prefixes the command.
run_specs() { # run_specs LOGNAME
    local logname=$1 stem suite rc n_ok=0 n_fail=0 n_skip=0
    local t_succ=0 t_fail=0 t_err=0 t_pend=0 line s f e p
    local -a rows=()
    while read -r stem suite; do
        [ -n "$stem" ] || continue
        echo "---- $suite/$stem ${WRAP[*]:+(${WRAP[*]})}"
        local tmp
        tmp=$(mktemp)
        "${WRAP[@]}" "$LUAJIT" "${LJ_FLAGS[@]}" spec/run.lua "$suite" "spec/${stem}_spec.lua" >"$tmp" 2>&1 </dev/null
        rc=$?
        cat "$tmp"
        line=$(sed 's/\x1b\[[0-9;]*m//g' "$tmp" |
               grep -aE '[0-9]+ successes? / [0-9]+ failures? / [0-9]+ errors? / [0-9]+ pending' | tail -1)
        s=$(grep -oE '[0-9]+ success' <<<"$line" | grep -oE '[0-9]+' || echo 0)
        f=$(grep -oE '[0-9]+ failure' <<<"$line" | grep -oE '[0-9]+' || echo 0)
        e=$(grep -oE '[0-9]+ error' <<<"$line" | grep -oE '[0-9]+' || echo 0)
        p=$(grep -oE '[0-9]+ pending' <<<"$line" | grep -oE '[0-9]+' || echo 0)
        local sanit=""
        if [ "${#WRAP[@]}" -gt 0 ]; then
            # memcheck/initcheck/synccheck: ERROR SUMMARY; racecheck: RACECHECK SUMMARY
            sanit=$(grep -aE '========= (ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazard)' "$tmp" |
                    tail -1 | sed 's/=* *//')
            [ -n "$sanit" ] || sanit="no sanitizer summary line"
        fi
        rm -f "$tmp"
        t_succ=$((t_succ + s)) t_fail=$((t_fail + f)) t_err=$((t_err + e)) t_pend=$((t_pend + p))
        local verdict
        case $rc in
            0) verdict=ok; n_ok=$((n_ok + 1)) ;;
            77) verdict=SKIPPED; n_skip=$((n_skip + 1)) ;;
            *) verdict="FAILED (exit $rc)"; n_fail=$((n_fail + 1)) ;;
        esac
        rows+=("$(printf '%-8s %-28s %-18s %5s ok %4s failed %4s errors %4s pending  %s' \
            "$suite" "$stem" "$verdict" "$s" "$f" "$e" "$p" "$sanit")")
    done
    {
        echo
        echo "==== spec summary ${WRAP[*]:+(${WRAP[*]})}"
        printf '%s\n' "${rows[@]}"
        echo "files: $n_ok ok, $n_fail failed, $n_skip skipped"
        echo "busted tests: $t_succ successes, $t_fail failures, $t_err errors, $t_pend pending"
    } | log_to_out "$logname"
    [ "$n_fail" -eq 0 ]
}

sub=${1:-specs}
[ "$#" -gt 0 ] && shift
[ -n "$OUTDIR" ] && mkdir -p "$OUTDIR"

case "$sub" in
    env)
        for v in PATH LD_LIBRARY_PATH LUA_PATH LUA_CPATH PLOSS_LIBRARY PLOSS_ROOT OMP_NUM_THREADS; do
            printf 'export %s=%q\n' "$v" "${!v}"
        done
        ;;
    specs)
        check_env 2>&1 | log_to_out specs.log || exit 1
        WRAP=()
        LJ_FLAGS=()
        select_specs "$@" | run_specs specs.log 2>&1 | log_to_out specs-full.log
        exit "${PIPESTATUS[1]}"
        ;;
    sanitize)
        tool=${1:?usage: run.sh sanitize memcheck|racecheck|initcheck|synccheck|all [FILE ...]}
        shift
        CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
        [ -x "$CS" ] || { echo "run.sh: compute-sanitizer not found" >&2; exit 2; }
        check_env 2>&1 | log_to_out "sanitize.log" || exit 1
        tools=("$tool")
        [ "$tool" = all ] && tools=(memcheck racecheck initcheck)
        status=0
        for t in "${tools[@]}"; do
            # no --leak-check: LuaJIT exits without collecting every tensor.  -joff: with
            # LuaJIT's JIT compiler on, the process dies under compute-sanitizer after the
            # first test ("process didn't terminate successfully", no report; H200,
            # compute-sanitizer of CUDA 13, 2026-11-30) — the interpreter runs the same
            # specs to the end; the library's code paths are the same either way.
            WRAP=("$CS" --tool "$t" --error-exitcode 99 --print-limit 50)
            LJ_FLAGS=(-joff)
            if [ "$#" -gt 0 ]; then select_specs "$@"; else select_specs cuda; fi |
                run_specs "sanitize-$t.log" 2>&1 | log_to_out "sanitize-$t-full.log"
            [ "${PIPESTATUS[1]}" -eq 0 ] || status=1
        done
        exit $status
        ;;
    bench)
        check_env && "$LUAJIT" bench/bench.lua "$@" 2>&1 | log_to_out bench.log
        exit "${PIPESTATUS[0]}"
        ;;
    example)
        check_env || exit 1
        data=$PREFIX/usr/share/datasets/fashion-mnist
        "$LUAJIT" examples/fashion_mnist.lua --data "$data" "$@" 2>&1 | log_to_out example.log
        rc=${PIPESTATUS[0]}
        if [ -n "$OUTDIR" ] && [ -d out ]; then
            find out -maxdepth 1 -type f -newer "$PREFIX/.ploss-debs" -exec cp {} "$OUTDIR/" \; 2>/dev/null
        fi
        exit "$rc"
        ;;
    exec)
        "$@"
        ;;
    *)
        sed -n '2,30p' "$0"
        exit 2
        ;;
esac
