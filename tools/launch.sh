#!/usr/bin/env bash
# tools/launch.sh -n N [--] script.lua|program [args…] — start N ranks of a ploss job on this
# machine, without MPI (docs/distributed.md).
#
# Makes one communicator id (ploss.comm.unique_id()) and starts N processes, each with
#   PLOSS_WORLD_SIZE=N  PLOSS_RANK=r  PLOSS_LOCAL_RANK=r  PLOSS_COMM_ID=<the id>
# (a script calls ploss.comm.init_from_env{device = 'cpu' | 'cuda'}; with 'cuda', rank r
# takes cuda:r: CUDA_VISIBLE_DEVICES is left as it is).  A `.lua` file is run with
# ${LUAJIT:-luajit}; anything else is executed as it is.  Each line a rank prints is
# prefixed with "[r] " (PLOSS_LAUNCH_PREFIX=0: no prefix).
#
# Waits for every rank.  As soon as one fails (a non-zero exit status or a signal), the
# others are sent SIGTERM, then SIGKILL after PLOSS_LAUNCH_GRACE seconds (an integer,
# default 5), and the launcher exits with the first failure's status (128 + n for signal n;
# the ranks are polled every 50 ms, so a rank that failed within them because of another's
# failure may be the one reported).
# Exit 0 when every rank exits with 0.  SIGINT / SIGTERM / SIGHUP to the launcher stop every
# rank the same way.  Stopping a rank stops the processes it started too (found in /proc,
# where the machine has it); a process a rank leaves running when it ends by itself is not
# stopped, and the launcher waits for it while it holds the rank's output.  With the
# prefix, a rank's stderr goes with its stdout to the launcher's stdout, a line at a time.
# The environment must let `luajit` load ploss (`source tools/env.sh build`).
set -u

usage() { # usage [status]: to stdout for --help (status 0), else to stderr
    if [ "${1:-2}" = 0 ]; then
        echo "usage: tools/launch.sh -n N [--] script.lua|program [args...]"
    else
        echo "usage: tools/launch.sh -n N [--] script.lua|program [args...]" >&2
    fi
    exit "${1:-2}"
}

n=""
while [ $# -gt 0 ]; do
    case "$1" in
        -n) [ $# -ge 2 ] || usage; n=$2; shift 2 ;;
        -n*) n=${1#-n}; shift ;;
        --) shift; break ;;
        -h | --help) usage 0 ;;
        -*) echo "tools/launch.sh: unknown option $1" >&2; usage ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || usage
[ -n "$n" ] || { echo "tools/launch.sh: -n N (the rank count) is missing" >&2; usage; }
case "$n" in
    *[!0-9]* | 0*) echo "tools/launch.sh: -n: expected a rank count >= 1, got '$n'" >&2; exit 2 ;;
esac
[ "${#n}" -le 5 ] || { echo "tools/launch.sh: -n: $n ranks on one machine (at most 99999)" >&2; exit 2; }

luajit=${LUAJIT:-luajit}
grace=${PLOSS_LAUNCH_GRACE:-5}
case "$grace" in
    '' | *[!0-9]* | 0?*) echo "tools/launch.sh: PLOSS_LAUNCH_GRACE: expected whole seconds, got '$grace'" >&2; exit 2 ;;
esac
prefix=${PLOSS_LAUNCH_PREFIX:-1}
case "$prefix" in
    0 | 1) ;;
    *) echo "tools/launch.sh: PLOSS_LAUNCH_PREFIX: expected 1 (prefix each line) or 0, got '$prefix'" >&2; exit 2 ;;
esac
if [[ "$1" == *.lua ]]; then cmd=("$luajit" "$@"); else cmd=("$@"); fi

id=$("$luajit" -e 'io.write(require("ploss").comm.unique_id())') || {
    echo "tools/launch.sh: cannot make a communicator id (does '$luajit' load ploss? source tools/env.sh build)" >&2
    exit 1
}

pids=() filters=() w=""
fifos=""
# Fields 3 and 4 of /proc/PID/stat, the state and the parent, into stat_state and
# stat_ppid (the caller's locals); the name before them may hold spaces and parentheses, so
# they are read after its last ')'.  Fails for a process that is gone.
read_stat() {
    local line
    { read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
    line=${line##*) }
    stat_state=${line%% *}
    line=${line#* }
    stat_ppid=${line%% *}
}
# The processes given and those descending from them (the ranks' own children too), read
# from /proc by bash alone (no process started per rank: the launcher may share two cores
# with many busy ranks), before any is signalled, for a process's children are given to init
# once it has ended.  Without /proc, the processes given alone.  The ranks stay in the
# launcher's process group, so a signal to that group (a terminal's Ctrl-C, `timeout`)
# reaches them too.
descendants() {
    local -A parent=() keep=()
    local f p stat_state stat_ppid changed=1
    for p in "$@"; do keep[$p]=1; done
    if [ -d /proc/self ]; then
        for f in /proc/[0-9]*/stat; do
            p=${f#/proc/}
            p=${p%/stat}
            read_stat "$p" || continue
            parent[$p]=$stat_ppid
        done
        while [ "$changed" = 1 ]; do
            changed=0
            for p in "${!parent[@]}"; do
                if [ -z "${keep[$p]:-}" ] && [ -n "${keep[${parent[$p]}]:-}" ]; then
                    keep[$p]=1
                    changed=1
                fi
            done
        done
    fi
    printf '%s\n' "${!keep[@]}"
}
# Whether a process still runs: an ended one that its parent has not reaped yet (bash reaps
# the ranks only between commands, not within the signal handler) counts as ended.
running_pid() {
    local stat_state stat_ppid
    [ -d /proc/self ] || { kill -0 "$1" 2>/dev/null; return; }
    read_stat "$1" || return 1
    [ "$stat_state" != Z ]
}
stop_all() { # stop every rank still running and what it started: SIGTERM, then SIGKILL after the grace period
    local p alive live=() victims=()
    for p in "${pids[@]}"; do running_pid "$p" && live+=("$p"); done
    [ "${#live[@]}" -gt 0 ] || return 0
    victims=($(descendants "${live[@]}"))
    for p in "${victims[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for _ in $(seq $((grace * 10))); do
        alive=0
        for p in "${victims[@]}"; do running_pid "$p" && alive=1; done
        [ "$alive" = 0 ] && return 0
        sleep 0.1
    done
    for p in "${victims[@]}"; do kill -KILL "$p" 2>/dev/null; done
}
# After the ranks: their fifos, and the communicator's meeting place in /dev/shm if a rank
# died before every rank had joined (it is named from bytes 4 … 27 of the id, hex digits
# 9 … 56: core/comm.c's segment_name; the ranks remove it once all have joined).
cleanup() {
    [ -z "$fifos" ] || rm -rf "$fifos"
    rm -f "/dev/shm/ploss-comm-${id:8:48}"
}
# Stopped by a signal (while starting the ranks too): the FIFO this launcher may hold open
# closed, the ranks stopped (the one being started too: every background job that is not a
# filter), then whatever still runs after a moment (a filter waiting for a rank never
# started) killed, so that nothing waits on anything.
on_signal() {
    trap '' INT TERM HUP
    [ -z "$w" ] || exec {w}>&-
    local p f own
    for p in $(jobs -p); do
        own=1
        for f in "${filters[@]}"; do [ "$f" = "$p" ] && own=0; done
        [ "$own" = 0 ] || pids+=("$p")
    done
    stop_all
    sleep 0.2
    for p in $(jobs -p); do kill -KILL "$p" 2>/dev/null; done
    wait
    cleanup
    exit "$1"
}
trap 'on_signal 129' HUP
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
if [ "$prefix" = 1 ]; then
    fifos=$(mktemp -d "${TMPDIR:-/tmp}/ploss-launch.XXXXXX") || exit 1
fi

for ((r = 0; r < n; r++)); do
    if [ "$prefix" = 1 ]; then
        # each rank writes into a FIFO read by its own prefixing sed: $! stays the rank's own
        # pid, and the launcher waits for the filters (which end when their rank's output
        # closes) before it exits, so no rank's last lines come after the launcher's end.
        # The launcher opens the FIFO's writing end itself (which waits for the filter's
        # open) and hands it to the rank: a filter is never left waiting in its open for a
        # writer that is gone (a rank stopped before it opened its output, say).
        mkfifo "$fifos/$r" || { stop_all; cleanup; exit 1; }
        sed -u "s/^/[$r] /" <"$fifos/$r" &
        filters+=("$!")
        exec {w}>"$fifos/$r"
        PLOSS_WORLD_SIZE=$n PLOSS_RANK=$r PLOSS_LOCAL_RANK=$r PLOSS_COMM_ID=$id \
            "${cmd[@]}" >&"$w" 2>&1 &
        exec {w}>&-
        w=""
    else
        PLOSS_WORLD_SIZE=$n PLOSS_RANK=$r PLOSS_LOCAL_RANK=$r PLOSS_COMM_ID=$id "${cmd[@]}" &
    fi
    pids+=("$!")
done

# Poll the ranks every 50 ms (`wait PID` then gives the status of one that has ended, even
# when bash has already reaped it): the status reported is the first failure seen, which
# may be a rank that failed within those 50 ms because of another's failure.
status=0
failed() { # failed PID STATUS: the first failure stops the others
    local r
    [ "$2" -ne 0 ] && [ "$status" -eq 0 ] || return 0
    status=$2
    for ((r = 0; r < n; r++)); do [ "${pids[$r]}" = "$1" ] && break; done
    echo "tools/launch.sh: rank $r (pid $1) failed with status $2; stopping the others" >&2
    stop_all
}
running=("${pids[@]}")
while [ "${#running[@]}" -gt 0 ]; do
    still=()
    for p in "${running[@]}"; do
        if kill -0 "$p" 2>/dev/null; then
            still+=("$p")
            continue
        fi
        wait "$p"
        failed "$p" "$?"
    done
    running=("${still[@]}")
    [ "${#running[@]}" -eq 0 ] || sleep 0.05
done
[ "${#filters[@]}" -eq 0 ] || wait "${filters[@]}"
cleanup
exit "$status"
