#!/usr/bin/env bash
# scripts/demo.sh - the main job: a real RDMA WRITE bandwidth sweep (2 B .. 8 MiB).
#
# With an ACTIVE RDMA device on this machine it runs `rdmabench write-bw --loopback -a` on
# it (server and client in one process, through the NIC). Without one it boots the
# soft-RoCE guest (scripts/rxe-vm.sh) and runs the sweep from rxe1 to rxe0 across the
# guest's veth pair: real verbs, real RDMA WRITEs, figures of an emulated link.
#
# Usage: scripts/demo.sh [extra rdmabench write-bw options, e.g. -q 4 --json run.json]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x "$(command -v cargo)" ] || . "$HOME/.cargo/env"
case "${1:-}" in -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac

cargo build --release --locked --quiet -p rdmabench
bin=$PWD/target/release/rdmabench

if "$bin" devices 2>/dev/null | grep -q ' ACTIVE '; then
    echo "rdmabench demo: using this machine's RDMA device"
    exec "$bin" write-bw --loopback -a "$@"
fi
echo "rdmabench demo: no RDMA device here; running on soft-RoCE in a QEMU guest (emulated: figures are functional only)"
# A short sweep: 100 writes per size, 32 in flight, so that 8 MiB messages finish quickly
# on an emulated link.
exec scripts/rxe-vm.sh "$bin" write-bw --loopback -d rxe0 --peer-dev rxe1 -x 1 -a -n 100 -t 32 --timeout 60 "$@"
