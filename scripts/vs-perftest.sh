#!/usr/bin/env bash
# scripts/vs-perftest.sh - perftest's ib_write_bw and `rdmabench write-bw` side by side, on the
# same devices with the same size, iterations and depth, alternating run by run.
#
# Usage: scripts/vs-perftest.sh [--rounds N] [--iters N] [--depth N] [--sizes "65536 64"]
#                               [--direct]
#
# Without an RDMA device here (or without --direct) everything runs inside one soft-RoCE
# guest (scripts/rxe-vm.sh): servers on rxe0, clients on rxe1 across the veth pair. With
# --direct it runs on this machine's devices: RDMABENCH_SERVER_DEV / RDMABENCH_CLIENT_DEV
# (default: the first device for both) and RDMABENCH_GID (default 1 on soft-RoCE, else unset).
#
# For each size it prints each tool's median bandwidth (MB/s, 10^6 bytes/s) and message rate
# over the rounds, and the ratio rdmabench/perftest of the message rates (bandwidth follows,
# size x rate, for both tools). Under emulation the absolute figures mean nothing; the ratio,
# measured in one guest, alternating, does.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x "$(command -v cargo)" ] || . "$HOME/.cargo/env"

rounds=5 iters=4000 depth=128 sizes="65536 64" direct=0
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --iters) iters=$2; shift 2 ;;
        --depth) depth=$2; shift 2 ;;
        --sizes) sizes=$2; shift 2 ;;
        --direct) direct=1; shift ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "vs-perftest.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for v in "$rounds" "$iters" "$depth"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "vs-perftest.sh: '$v' is not a positive number" >&2; exit 2; }
done
command -v ib_write_bw >/dev/null || { echo "vs-perftest.sh: ib_write_bw not found: run scripts/setup.sh (package perftest)" >&2; exit 1; }

cargo build --release --locked --quiet -p rdmabench
bin=$PWD/target/release/rdmabench

# The part that runs where the devices are. Arguments: bin rounds iters depth sizes sdev cdev gid addr
inner='
set -u
bin=$1 rounds=$2 iters=$3 depth=$4 sizes=$5 sdev=$6 cdev=$7 gid=$8 addr=$9
gidopt=(); [ -n "$gid" ] && gidopt=(-x "$gid")
port=18700
median() { sort -g | awk "{v[NR]=\$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}"; }
perftest_once() {   # prints the message rate in msg/s
    ib_write_bw -d "$sdev" "${gidopt[@]}" -s "$1" -n "$iters" -t "$depth" -F -p $port >/dev/null 2>&1 &
    local srv=$!; sleep 1
    ib_write_bw -d "$cdev" "${gidopt[@]}" -s "$1" -n "$iters" -t "$depth" -F -p $port "$addr" 2>&1 \
        | awk -v s="$1" "\$1 == s && NF >= 5 {printf \"%.1f\n\", \$5 * 1e6}"
    wait $srv; port=$((port + 1))
}
rdmabench_once() {
    "$bin" write-bw -d "$sdev" "${gidopt[@]}" -p $port --timeout 60 >/dev/null 2>&1 &
    local srv=$!; sleep 0.5
    "$bin" write-bw "$addr" -d "$cdev" "${gidopt[@]}" -s "$1" -n "$iters" -t "$depth" -p $port --timeout 60 2>&1 \
        | awk -v s="$1" "\$1 == s && NF >= 4 {printf \"%.1f\n\", \$4 * 1e6}"
    wait $srv; port=$((port + 1))
}
printf "%-9s %-6s %-12s %-14s %-12s %-14s %s\n" size rounds "perftest" "" "rdmabench" "" "ratio"
printf "%-9s %-6s %-12s %-14s %-12s %-14s %s\n" "" "" "MB/s" "msg/s" "MB/s" "msg/s" "(msg rate)"
for size in $sizes; do
    p=() r=()
    for ((i = 0; i < rounds; i++)); do
        p+=("$(perftest_once "$size")")
        r+=("$(rdmabench_once "$size")")
    done
    pm=$(printf "%s\n" "${p[@]}" | grep . | median)
    rm=$(printf "%s\n" "${r[@]}" | grep . | median)
    awk -v s="$size" -v n="$rounds" -v p="$pm" -v r="$rm" "BEGIN {
        printf \"%-9s %-6s %-12.2f %-14.1f %-12.2f %-14.1f %.3f\n\", s, n, p*s/1e6, p, r*s/1e6, r, (p > 0) ? r/p : 0 }"
done
'

if [ "$direct" = 1 ]; then
    first=$("$bin" devices | awk 'NR==1 {print $1}')
    [ -n "$first" ] || { echo "vs-perftest.sh: --direct but no RDMA device found" >&2; exit 1; }
    sdev=${RDMABENCH_SERVER_DEV:-$first} cdev=${RDMABENCH_CLIENT_DEV:-$first}
    bash -c "$inner" vs-perftest "$bin" "$rounds" "$iters" "$depth" "$sizes" "$sdev" "$cdev" "${RDMABENCH_GID:-}" 127.0.0.1
else
    echo "vs-perftest: soft-RoCE guest, rxe1 -> rxe0 across a veth pair, $rounds alternating rounds of $iters writes, depth $depth (emulated)"
    scripts/rxe-vm.sh bash -c "$inner" vs-perftest "$bin" "$rounds" "$iters" "$depth" "$sizes" rxe0 rxe1 1 10.251.0.1
fi
