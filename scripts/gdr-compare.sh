#!/usr/bin/env bash
# gdr-compare.sh - GPUDirect RDMA on against off: the same sweep with the buffer in host
# memory, in GPU memory registered through dma-buf (cuda), through nvidia-peermem
# (cuda-peermem) and staged through pinned host memory (cuda-staged), against one server.
# On AMD GPUs give --modes "host rocm rocm-staged rocm-peermem".
#
# Usage: scripts/gdr-compare.sh [--modes "host cuda cuda-staged cuda-peermem"] [--gpu N]
#                               [--test write-bw] [--results DIR] SERVER_HOST [rdmabench options]
#
# The server must be waiting for every run: start it with `rdmabench TEST -d DEV --persistent`
# (host memory there: the client's memory mode is the one compared; a staged client copies
# GPU <-> host inside its measured loop. A server with --mem cuda or cuda-staged moves both
# ends through GPU memory, but then only the modes that suit it run).
# With SERVER_HOST `local:DEV` the server side is run here too, on DEV with host memory.
#
# Prints one table, a row per size, for each mode its bandwidth and its percentage of its own
# ceiling, and keeps each mode's JSON record in DIR (default results/gdr-compare/<date>/).
# A mode that cannot run here (no GPU, no dma-buf support, no peer memory) is reported
# with its one-line reason and left out of the table. Exit status: 0 when every mode ran,
# 1 when one failed, 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
usage() { sed -n '2,/^[^#]/{/^[^#]/d; s/^# \{0,1\}//; p}' "$0"; }

modes="host cuda cuda-staged cuda-peermem" gpu=0 test=write-bw results=""
while [ $# -gt 0 ]; do
    case $1 in
        --modes) modes=$2; shift 2 ;;
        --gpu) gpu=$2; shift 2 ;;
        --test) test=$2; shift 2 ;;
        --results) results=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "gdr-compare.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || { echo "gdr-compare.sh: give SERVER_HOST (see --help)" >&2; exit 2; }
server=$1; shift
for m in $modes; do
    case $m in host|cuda|cuda-staged|cuda-peermem|rocm|rocm-staged|rocm-peermem) ;;
        *) echo "gdr-compare.sh: '$m' is not a mode (host cuda cuda-staged cuda-peermem rocm rocm-staged rocm-peermem)" >&2; exit 2 ;;
    esac
done
bin=${RDMABENCH_BIN:-$PWD/target/release/rdmabench}
if [ ! -x "$bin" ] && [ -z "${RDMABENCH_BIN:-}" ]; then
    cargo build --release --locked --quiet -p rdmabench || { echo "gdr-compare.sh: build failed" >&2; exit 1; }
fi
results=${results:-results/gdr-compare/$(date -u +%Y-%m-%dT%H%M%SZ)}
mkdir -p "$results" || exit 1

# local:DEV: a server on DEV for one run, on a free port; its port is read from its
# "waiting on ADDR:PORT" line (at most 30 s), so nothing races its start.
local_run() {
    local dev=$1 mem=$2 json=$3 srvlog srv port="" i
    shift 3
    srvlog=$(mktemp)
    "$bin" "$test" -d "$dev" -p 0 --timeout 60 >"$srvlog" 2>&1 &
    srv=$!
    for ((i = 0; i < 300; i++)); do
        port=$(sed -n 's/.* server waiting on [^ ]*:\([0-9][0-9]*\) .*/\1/p' "$srvlog" | head -n 1)
        [ -n "$port" ] && break
        kill -0 "$srv" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "rdmabench: error: the local server on $dev did not start: $(tail -n 1 "$srvlog" | sed 's/^rdmabench: error: //')"
        kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; rm -f "$srvlog"
        return 1
    fi
    "$bin" "$test" 127.0.0.1 -p "$port" --mem "$mem" --json "$json" "$@" 2>&1
    local rc=$?
    [ $rc = 0 ] || kill "$srv" 2>/dev/null
    wait "$srv" 2>/dev/null
    rm -f "$srvlog"
    return $rc
}

echo "gdr-compare: $test against $server; records in $results"
status=0 ran=()
for m in $modes; do
    mem=$m; [ "$m" = host ] || mem="$m:$gpu"
    json=$results/$m.json
    if [[ $server == local:* ]]; then
        out=$(local_run "${server#local:}" "$mem" "$json" "$@")
        rc=$?
    else
        out=$("$bin" "$test" "$server" --mem "$mem" --json "$json" "$@" 2>&1)
        rc=$?
    fi
    if [ $rc = 0 ]; then
        ran+=("$m")
    else
        echo "gdr-compare: $m did not run: $(printf '%s\n' "$out" | grep 'rdmabench: error' | tail -n 1 | sed 's/^rdmabench: error: //')" >&2
        status=1
    fi
done
[ ${#ran[@]} -gt 0 ] || { echo "gdr-compare: no mode ran" >&2; exit 1; }

# One table: size, then bandwidth and % of ceiling per mode, from the records.
python_free_table() {
    local files=() m
    for m in "${ran[@]}"; do files+=("$results/$m.json"); done
    printf '%-10s' size
    for m in "${ran[@]}"; do printf ' %-26s' "$m GB/s (% ceiling)"; done
    printf '\n'
    # Each record's results as "size bw pct" lines; joined on size.
    local tmp; tmp=$(mktemp -d)
    for m in "${ran[@]}"; do
        tr -d ' \n' < "$results/$m.json" | grep -o '"size":[0-9]*,"iterations":[^}]*"pct_of_ceiling":[^,}]*' |
            sed 's/"size":\([0-9]*\),.*"bw_gbps":\([^,]*\),.*"pct_of_ceiling":\(.*\)/\1 \2 \3/' > "$tmp/$m"
    done
    cut -d' ' -f1 "$tmp/${ran[0]}" | while read -r size; do
        printf '%-10s' "$size"
        for m in "${ran[@]}"; do
            awk -v s="$size" '$1 == s { pct = ($3 == "null") ? "-" : sprintf("%.1f%%", $3); printf " %-26s", sprintf("%.4f (%s)", $2, pct) }' "$tmp/$m"
        done
        printf '\n'
    done
    rm -rf "$tmp"
}
python_free_table
exit $status
