#!/usr/bin/env bash
# scripts/vs-perftest.sh - perftest and rdmabench side by side, on the same devices with the
# same size, iterations and depth, alternating run by run.
#
# Usage: scripts/vs-perftest.sh [--tests "write-bw read-bw send-bw write-lat send-lat"]
#                               [--rounds N] [--iters N] [--lat-iters N] [--depth N]
#                               [--sizes "65536 64"] [--lat-sizes "2"] [--direct]
#                               [--perftest-dir DIR] [--outs N]
#
# Without --direct everything runs inside one soft-RoCE guest (scripts/rxe-vm.sh): servers
# on rxe0, clients on rxe1 across the veth pair. With --direct it runs on this machine's
# devices: RDMABENCH_SERVER_DEV / RDMABENCH_CLIENT_DEV (default: the first device for both)
# and RDMABENCH_GID (default unset).
#
# --perftest-dir DIR runs perftest's binaries from DIR (e.g. a build of the newest perftest
# from source) instead of the ones on PATH; both sides of a perftest run must be the same
# version. The two tools alternate, and the order flips every round (perftest first in even
# rounds, rdmabench first in odd ones), so neither always runs on a warmer guest.
#
# --outs N gives both tools -o N in READ tests: the outstanding READs a QP may have (a
# ConnectX allows 16; soft-RoCE 128 unless told).
#
# Bandwidth tests compare the median message rate over the rounds (bandwidth is size x rate
# for both tools); the ratio is rdmabench/perftest. Latency tests compare the median of each
# run's typical latency (perftest's t_typical, rdmabench's p50, both one-way for WRITE and
# SEND) and the best minimum over the rounds (t_min, min; under TCG latency is bimodal and
# the minimum is the figure that compares); the ratios are perftest/rdmabench. Bandwidth tests
# also give the median of each round's own ratio (its two runs back to back) and the rounds
# rdmabench was ahead in: on a busy host rates drift by tens of percent between rounds, and
# the paired ratio is what still compares. Either way a
# ratio of 1.0 or more means rdmabench is at least as good. Under emulation the absolute
# figures mean nothing; the ratio, measured in one guest, alternating, does.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x "$(command -v cargo)" ] || . "$HOME/.cargo/env"

tests="write-bw read-bw send-bw write-lat send-lat"
rounds=5 iters=4000 lat_iters=2000 depth=128 sizes="65536 64" lat_sizes="2" direct=0 ptdir="" outs=""
while [ $# -gt 0 ]; do
    case $1 in
        --tests) tests=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --iters) iters=$2; shift 2 ;;
        --lat-iters) lat_iters=$2; shift 2 ;;
        --depth) depth=$2; shift 2 ;;
        --sizes) sizes=$2; shift 2 ;;
        --lat-sizes) lat_sizes=$2; shift 2 ;;
        --direct) direct=1; shift ;;
        --perftest-dir) ptdir=$(cd "$2" && pwd); shift 2 ;;
        --outs) outs=$2; shift 2 ;;
        -h|--help) sed -n '2,/^[^#]/{/^[^#]/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
        *) echo "vs-perftest.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for v in "$rounds" "$iters" "$lat_iters" "$depth" ${outs:+"$outs"}; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "vs-perftest.sh: '$v' is not a positive number" >&2; exit 2; }
done
for t in $tests; do
    case $t in write-bw|read-bw|send-bw|write-lat|send-lat|read-lat) ;;
        *) echo "vs-perftest.sh: unknown test '$t' (write-bw read-bw send-bw write-lat send-lat read-lat)" >&2; exit 2 ;;
    esac
done
if [ -n "$ptdir" ]; then
    [ -x "$ptdir/ib_write_bw" ] || { echo "vs-perftest.sh: no perftest binaries in '$ptdir'" >&2; exit 1; }
else
    command -v ib_write_bw >/dev/null || { echo "vs-perftest.sh: perftest not found: run scripts/setup.sh" >&2; exit 1; }
fi

cargo build --release --locked --quiet -p rdmabench
bin=$PWD/target/release/rdmabench

# The part that runs where the devices are.
# Arguments: bin rounds iters lat_iters depth sizes lat_sizes tests sdev cdev gid addr ptdir outs
inner='
set -u
bin=$1 rounds=$2 iters=$3 lat_iters=$4 depth=$5 sizes=$6 lat_sizes=$7 tests=$8 sdev=$9 cdev=${10} gid=${11} addr=${12} ptdir=${13} outs=${14}
gidopt=(); [ -n "$gid" ] && gidopt=(-x "$gid")
port=18700
median() { sort -g | awk "{v[NR]=\$1} END {if (NR) print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}"; }
# perftest: bandwidth -> msg/s (column 5, Mpps); latency -> "t_typical t_min" (columns 5, 3, usec).
# A message rate of 0 (perftest 6.29 printed one in 5 of 90 READ runs in the guest) is a
# failed run, as is no line at all: it counts in neither median nor the paired rounds.
# Seconds the server of each tool gets to start listening before its client connects, the same
# for both: the rdmabench server opens its device and reads the PCIe tree first, which took
# over a second in an idle guest (a client that came at 1 s found no one listening).
server_start=2
perftest_once() {   # test size
    local t=$1 s=$2 tool="${ptdir:+$ptdir/}ib_${1/-/_}" n=$iters
    case $t in *-lat) n=$lat_iters ;; esac
    local opts=(-s "$s" -n "$n" -F)
    case $t in *-bw) opts+=(-t "$depth") ;; esac
    case $t in read-*) [ -n "$outs" ] && opts+=(-o "$outs") ;; esac
    $tool -d "$sdev" "${gidopt[@]}" "${opts[@]}" -p $port >/dev/null 2>&1 &
    local srv=$!; sleep "$server_start"
    $tool -d "$cdev" "${gidopt[@]}" "${opts[@]}" -p $port "$addr" 2>&1 |
        awk -v s="$s" -v t="$t" "\$1 == s && NF >= 5 { if (t !~ /bw\$/) print \$5, \$3; else if (\$5 > 0) printf \"%.1f\n\", \$5 * 1e6 }"
    wait $srv; port=$((port + 1))
}
# rdmabench: bandwidth -> msg/s (column 4, Mpps); latency -> "p50 min" (columns 4, 3, us)
rdmabench_once() {   # test size
    local t=$1 s=$2 n=$iters
    case $t in *-lat) n=$lat_iters ;; esac
    local opts=(-s "$s" -n "$n")
    case $t in *-bw) opts+=(-t "$depth") ;; esac
    case $t in read-*) [ -n "$outs" ] && opts+=(-o "$outs") ;; esac
    "$bin" "$t" -d "$sdev" "${gidopt[@]}" -p $port --timeout 60 >/dev/null 2>&1 &
    local srv=$!; sleep "$server_start"
    "$bin" "$t" "$addr" -d "$cdev" "${gidopt[@]}" "${opts[@]}" -p $port --timeout 60 2>&1 |
        awk -v s="$s" -v t="$t" "\$1 == s && NF >= 4 { if (t !~ /bw\$/) print \$4, \$3; else if (\$4 > 0) printf \"%.1f\n\", \$4 * 1e6 }"
    wait $srv; port=$((port + 1))
}
printf "%-10s %-8s %-7s %-16s %-16s %s\n" test size rounds perftest rdmabench "ratio (>= 1: rdmabench as good or better)"
row() {   # test size unit perftest-figure rdmabench-figure: one line of the table
    awk -v t="$1" -v s="$2" -v n="$rounds" -v u="$3" -v p="${4:-0}" -v r="${5:-0}" "BEGIN {
        ratio = 0; if (p > 0 && r > 0) ratio = (t ~ /bw\$/) ? r / p : p / r
        printf \"%-10s %-8s %-7s %-16s %-16s %.3f\n\", t, s, n, sprintf(\"%.2f %s\", p, u), sprintf(\"%.2f %s\", r, u), ratio }"
}
for t in $tests; do
    case $t in *-lat) list=$lat_sizes unit="us p50" ;; *) list=$sizes unit="msg/s" ;; esac
    for size in $list; do
        p=() r=()
        for ((i = 0; i < rounds; i++)); do
            if ((i % 2 == 0)); then
                p+=("$(perftest_once "$t" "$size")")
                r+=("$(rdmabench_once "$t" "$size")")
            else
                r+=("$(rdmabench_once "$t" "$size")")
                p+=("$(perftest_once "$t" "$size")")
            fi
            echo "  $t $size round $((i + 1)): perftest ${p[i]:-failed}, rdmabench ${r[i]:-failed}" >&2
        done
        row "$t" "$size" "$unit" \
            "$(printf "%s\n" "${p[@]}" | awk "NF {print \$1}" | median)" \
            "$(printf "%s\n" "${r[@]}" | awk "NF {print \$1}" | median)"
        case $t in
            *-bw)
                # Each round ran its two runs back to back: their ratio cancels what drifts between
                # rounds (a busy host, a guest whose vCPUs moved), which a median of each tool
                # alone does not.
                pairs=$(for ((i = 0; i < rounds; i++)); do echo "${p[i]:-0} ${r[i]:-0}"; done |
                    awk "\$1 > 0 && \$2 > 0 {print \$2 / \$1}")
                ahead=$(printf "%s\n" "$pairs" | awk "\$1 >= 1 {a++} END {print a + 0}")
                paired=$(printf "%s\n" "$pairs" | awk "NF {n++} END {print n + 0}")
                printf "%-10s %-8s paired  median of the per-round ratios %.3f, rdmabench ahead in %d of %d\n" \
                    "$t" "$size" "$(printf "%s\n" "$pairs" | median)" "$ahead" "$paired" ;;
            *-lat)
                row "$t" "$size" "us min" \
                    "$(printf "%s\n" "${p[@]}" | awk "NF {print \$2}" | sort -g | head -n1)" \
                    "$(printf "%s\n" "${r[@]}" | awk "NF {print \$2}" | sort -g | head -n1)" ;;
        esac
    done
done
'

if [ "$direct" = 1 ]; then
    first=$("$bin" devices | awk 'NR==1 {print $1}')
    [ -n "$first" ] || { echo "vs-perftest.sh: --direct but no RDMA device found" >&2; exit 1; }
    bash -c "$inner" vs-perftest "$bin" "$rounds" "$iters" "$lat_iters" "$depth" "$sizes" "$lat_sizes" "$tests" \
        "${RDMABENCH_SERVER_DEV:-$first}" "${RDMABENCH_CLIENT_DEV:-$first}" "${RDMABENCH_GID:-}" 127.0.0.1 "$ptdir" "$outs"
else
    echo "vs-perftest: soft-RoCE guest, rxe1 -> rxe0 across a veth pair, $rounds alternating rounds (emulated)"
    scripts/rxe-vm.sh bash -c "$inner" vs-perftest "$bin" "$rounds" "$iters" "$lat_iters" "$depth" "$sizes" \
        "$lat_sizes" "$tests" rxe0 rxe1 1 10.251.0.1 "$ptdir" "$outs"
fi
