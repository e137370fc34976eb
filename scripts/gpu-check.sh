#!/usr/bin/env bash
# scripts/gpu-check.sh - the GPU check of rdmabench-cuda (issue 4, item 5), for a machine with an NVIDIA GPU
# (no RDMA device needed); a few seconds of run time plus the build:
#   driver and devices, allocation and the --validate pattern, dma-buf export checked in /proc/self/fdinfo
#   (exp_name), pinned host<->device copy bandwidth 4 KiB..256 MiB both ways, and the staged pipeline's copy
#   half through K pinned bounce buffers (correctness, then GB/s for several chunk sizes and depths).
#
# Usage: scripts/gpu-check.sh [DEVICE]      DEVICE: GPU index (default 0) or PCI bus id (0000:17:00.0)
# Builds crates/cuda/examples/gpu_check (release, --offline: no network needed when the crates are cached).
# Where it cannot build (no cargo, crates not cached), it runs a prebuilt binary: $GPU_CHECK_BIN, else
# target/release/examples/gpu_check (build it elsewhere with
# `cargo build --release -p rdmabench-cuda --example gpu_check` and carry that file).
# With $OUT set, writes $OUT/gpu-check.txt (the output), $OUT/gpu-check.rc (exit status) and
# $OUT/nvidia-smi.txt (driver, topology and PCIe facts) as well.
# Exit status: gpu_check's own: 0 all checks passed, 1 a check failed or no CUDA driver, 2 bad DEVICE.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

case "${1:-}" in
    -h|--help) sed -n '2,/^[^#]/{/^[^#]/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
esac

bin=${GPU_CHECK_BIN:-target/release/examples/gpu_check}
# shellcheck source=/dev/null
[ -x "$(command -v cargo)" ] || { [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"; }
if [ -z "${GPU_CHECK_BIN:-}" ] && command -v cargo >/dev/null 2>&1; then
    if ! cargo build --release --offline -p rdmabench-cuda --example gpu_check; then
        if [ -x "$bin" ]; then
            echo "gpu-check.sh: could not build (see above); running the prebuilt $bin" >&2
        else
            echo "gpu-check.sh: could not build and there is no prebuilt $bin; run 'cargo fetch' where the" \
                 "network is reachable, or build the example elsewhere and set GPU_CHECK_BIN" >&2
            exit 1
        fi
    fi
fi
if [ ! -x "$bin" ]; then
    echo "gpu-check.sh: $bin not found; build it with:" \
         "cargo build --release -p rdmabench-cuda --example gpu_check" >&2
    exit 1
fi

out=${OUT:-}
if [ -z "$out" ]; then
    exec "$bin" "$@"
fi
mkdir -p "$out"
{
    echo "## uname -a"; uname -a
    echo "## nvidia-smi"; nvidia-smi
    echo "## nvidia-smi topo -m"; nvidia-smi topo -m
    echo "## nvidia-smi -q -d PCIE"; nvidia-smi -q -d PCIE
    echo "## kernel modules"; lsmod | grep -E '^(nvidia|nvidia_peermem|nv_peer_mem)\b'
    echo "## /proc/driver/nvidia/version"; cat /proc/driver/nvidia/version
} >"$out/nvidia-smi.txt" 2>&1
"$bin" "$@" 2>&1 | tee "$out/gpu-check.txt"
rc=${PIPESTATUS[0]}
echo "$rc" >"$out/gpu-check.rc"
exit "$rc"
