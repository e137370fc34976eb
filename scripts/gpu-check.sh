#!/usr/bin/env bash
# scripts/gpu-check.sh - the GPU check of rdmabench, for a machine with an NVIDIA GPU. Built on one machine,
# run on another: the GPU machine needs no Rust toolchain, no crates and no network.
#
# Usage:
#   scripts/gpu-check.sh build [BUNDLE]   where the toolchain is (any x86-64 Linux with cargo, no GPU needed):
#                                         fetches the crates Cargo.lock names where a registry is reachable
#                                         (cargo fetch --locked; else builds --offline from those already
#                                         fetched), builds release rdmabench and gpu_check (--locked), strips
#                                         them and puts them with this script in BUNDLE (default target/gpu-check,
#                                         about 7 MiB) with the oldest glibc they run on (glibc-floor): all the GPU
#                                         machine needs. Prints it and how to carry the bundle. $CARGO and
#                                         $CARGO_TARGET_DIR are honoured.
#   scripts/gpu-check.sh [run] [DEVICE]   on the GPU machine, from the repository root with the bundle in
#                                         target/gpu-check, or from the bundle folder itself:
#                                         1. gpu_check (crates/cuda/examples/gpu_check.rs): driver and devices,
#                                            the GPUDirect RDMA ordering and flush attributes, allocation,
#                                            SYNC_MEMOPS, the --validate pattern, dma-buf export, pinned copy
#                                            bandwidth, the staged pipeline's copy half, one buffer across three
#                                            threads, small and odd sizes (padded path) each exported;
#                                         2. where an RDMA device exists (/sys/class/infiniband): rdmabench
#                                            write-bw --loopback on it with --validate for --mem cuda-staged,
#                                            cuda (dma-buf) and cuda-peermem, each a line PASS or FAIL with why.
#                                            Where none exists (and $RDMA_DEV is unset), a soft-RoCE device is
#                                            brought up for the check and removed on exit: rdma_rxe on one end
#                                            of a veth pair (gpuchk0/gpuchk1, 10.252.0.1/24), as root with the
#                                            module and iproute2's rdma tool; the staged loopback then checks
#                                            the engine's loop on the real GPU, and dma-buf runs if the provider
#                                            takes it ($GPU_CHECK_SOFT_ROCE=0: never; =1: even where an
#                                            RDMA device exists, in place of it).
#                                         DEVICE: GPU index (default 0) or PCI bus id (0000:17:00.0).
#
# Carrying the bundle: copy BUNDLE to the GPU machine (scp -r, a tarball, or a runner that carries ignored
# paths: the device runner of this project takes `carry: ["target/gpu-check"]` and runs
# `scripts/gpu-check.sh run` in the repository copy). The binaries load libcuda.so.1 and libibverbs at run time
# (nothing is linked), so they need only a glibc as new as the newest symbol version they use (glibc-floor, from
# objdump at build time): run checks it first, and a machine with an older glibc fails at once, saying both.
#
# Time: at most 10 minutes. gpu_check is given $GPU_CHECK_TIMEOUT seconds (default 240; a few seconds on an
# H200), each rdmabench run $RDMABENCH_TIMEOUT (default 60; $RDMABENCH_SHAPE, default "-s 1M -n 2000", a
# fraction of a second on real hardware). Knobs: $GPU_CHECK_BIN, $RDMABENCH_BIN (binaries to use instead of
# the bundle's), $RDMA_DEV (the RDMA device, default the first in /sys/class/infiniband), $RDMABENCH_ARGS
# (more options for every rdmabench run, e.g. "-x 3").
# With $OUT set, writes $OUT/gpu-check.txt (gpu_check's output), $OUT/gpu-check.rc (its exit status),
# $OUT/rdmabench-MODE.txt and .json (each loopback run), $OUT/summary.txt and $OUT/nvidia-smi.txt (driver,
# topology and PCIe facts).
# Each check ends in one line: PASS, FAIL with why, or SKIP with why it cannot run on this machine (no NVIDIA
# driver; no RDMA device and no soft-RoCE one could be brought up (not root, no rdma_rxe module, no rdma
# tool), saying which; a software RDMA device such as rxe or siw, which cannot reach GPU memory, for the
# cuda-peermem loopback, and for cuda where its provider refuses dma-buf (EOPNOTSUPP); nvidia-peermem not
# loaded, for cuda-peermem; a driver that cannot export dma-bufs, as NVIDIA's proprietary kernel modules, for
# cuda: gpu_check then skips its dma-buf checks too).
# Exit status (Nagios' codes): 0 every check that could run passed; 1 a check failed; 2 bad usage or DEVICE;
# 3 nothing could be checked here (every check skipped).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
usage() { sed -n '2,/^[^#]/{/^[^#]/d; s/^# \{0,1\}//; p}' "$0"; }

# build [BUNDLE]: release binaries, stripped, with this script, into BUNDLE. Online where a registry answers
# (cargo fetch --locked: the crates Cargo.lock names, at its versions), offline only where none does.
build() {
    local bundle=${1:-target/gpu-check} cargo=${CARGO:-cargo} target=${CARGO_TARGET_DIR:-target} offline=()
    cd "$here/.." || exit 1
    # shellcheck source=/dev/null
    [ -x "$(command -v "$cargo")" ] || { [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"; }
    if timeout "${GPU_CHECK_FETCH_TIMEOUT:-600}" "$cargo" fetch --locked; then
        echo "gpu-check.sh: the crates Cargo.lock names are fetched"
    else
        echo "gpu-check.sh: no crate registry reachable (cargo fetch --locked failed): building offline from" \
             "the crates already fetched" >&2
        offline=(--offline)
    fi
    if ! "$cargo" build --release "${offline[@]}" --locked -p rdmabench --bin rdmabench -p rdmabench-cuda \
        --example gpu_check; then
        if [ "${#offline[@]}" -gt 0 ]; then
            echo "gpu-check.sh: the offline build failed: a crate Cargo.lock names is not fetched here; run" \
                 "'cargo fetch --locked' where a registry is reachable, or copy that machine's ~/.cargo/registry" >&2
        else
            echo "gpu-check.sh: the build failed (above)" >&2
        fi
        exit 1
    fi
    mkdir -p "$bundle" || exit 1
    cp "$target/release/rdmabench" "$target/release/examples/gpu_check" "$bundle/" || exit 1
    cp "$0" "$bundle/gpu-check.sh" || exit 1
    command -v strip >/dev/null && strip "$bundle/rdmabench" "$bundle/gpu_check" 2>/dev/null
    local floor
    floor=$(glibc_floor "$bundle/rdmabench" "$bundle/gpu_check")
    if [ -n "$floor" ]; then echo "$floor" >"$bundle/glibc-floor"; else rm -f "$bundle/glibc-floor"; fi
    echo "gpu-check.sh: bundle ready in $bundle ($(du -sh "$bundle" | cut -f1)): the two binaries, this script and" \
         "their glibc floor, all the GPU machine needs (no toolchain, crates or network); it needs glibc" \
         "${floor:-(unknown: no objdump here)} or newer; on the GPU machine run" \
         "$bundle/gpu-check.sh (or scripts/gpu-check.sh run from a repository copy that holds it)"
}

# The newest GLIBC_x.y symbol version the binaries ask for: the oldest glibc they run on; nothing without objdump.
glibc_floor() {
    command -v objdump >/dev/null || return 0
    objdump -T "$@" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -1
}

# This machine's glibc version (2.36), or nothing when it cannot be told.
glibc_here() {
    getconf GNU_LIBC_VERSION 2>/dev/null | awk '$1 == "glibc" { print $2 }'
}

# Exits 1 with a FAIL line when the bundle beside gpu_check ($1) needs a newer glibc than this machine has.
check_glibc() {
    local file need have
    file=$(dirname "$1")/glibc-floor
    [ -f "$file" ] || return 0
    need=$(head -1 "$file") have=$(glibc_here)
    [ -n "$need" ] && [ -n "$have" ] || return 0
    if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
        echo "FAIL glibc: the bundle needs glibc $need or newer and this machine has $have, so its binaries" \
             "cannot start here: build the bundle where glibc is $have or older (a container of this machine's" \
             "distribution)"
        exit 1
    fi
    echo "glibc $have here; the bundle needs $need or newer"
}

# The first existing executable among the arguments.
first_executable() {
    local f
    for f in "$@"; do
        [ -n "$f" ] && [ -x "$f" ] && { echo "$f"; return 0; }
    done
    return 1
}

# Why no NVIDIA driver is usable here; nothing when one is: the kernel's, or a libcuda.so.1 the loader finds
# (its cache, or LD_LIBRARY_PATH as the tests' fake driver is).
no_driver() {
    [ -e /proc/driver/nvidia/version ] && return 0
    ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && return 0
    local d dirs
    IFS=: read -ra dirs <<< "${LD_LIBRARY_PATH:-}"
    for d in "${dirs[@]}"; do [ -n "$d" ] && [ -e "$d/libcuda.so.1" ] && return 0; done
    echo "no NVIDIA driver (no /proc/driver/nvidia, no libcuda.so.1 in the loader's cache or LD_LIBRARY_PATH)"
}

# Why the loopback with --mem MODE cannot run on RDMA device $1 here; nothing when it can.
cannot_loop() {
    local dev=$1 mode=$2 why
    why=$(no_driver) && [ -n "$why" ] && { echo "$why"; return; }
    if [ -z "$dev" ]; then
        why="no RDMA device (/sys/class/infiniband is empty or absent)"
        [ -n "${soft_roce_why:-}" ] && why="$why, and no soft-RoCE device could be brought up: $soft_roce_why"
        echo "$why"; return
    fi
    [ -z "$rdmabench" ] && return
    case $mode in cuda-staged*) return ;; esac
    if [ "$mode" = cuda ] && grep -q '^ *\[SKIP\] dma-buf attribute' "$out/gpu-check.txt" 2>/dev/null; then
        echo "the driver cannot export GPU memory as a dma-buf (gpu_check: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED" \
             "is 0, as NVIDIA's proprietary kernel modules report); cuda-peermem and cuda-staged do not need it"
        return
    fi
    if software "$dev"; then
        # dma-buf is tried (the loopback SKIPs where the provider refuses it); peer memory never is.
        [ "$mode" = cuda ] && return
        echo "$dev is a software RDMA device (soft-RoCE or siw): it cannot reach GPU memory"; return
    fi
    case $mode in
        cuda-peermem*) [ -d /sys/module/nvidia_peermem ] || [ -d /sys/module/nv_peer_mem ] \
            || echo "nvidia-peermem is not loaded (modprobe nvidia-peermem)" ;;
    esac
}

# The soft-RoCE device brought up where this machine has no RDMA device, its veth pair and address.
readonly SOFT_DEV=gpuchk_rxe0 SOFT_IF=gpuchk0 SOFT_PEER=gpuchk1 SOFT_ADDR=10.252.0.1/24

# Why no soft-RoCE device can be brought up here; nothing when one can (rdma_rxe then loaded).
soft_roce_cannot() {
    local tool said
    [ "$(id -u 2>/dev/null)" = 0 ] || { echo "not root (rdma_rxe and a veth pair need root)"; return; }
    for tool in rdma ip; do
        command -v "$tool" >/dev/null || { echo "no iproute2 $tool tool (install iproute2)"; return; }
    done
    [ -d /sys/module/rdma_rxe ] && return
    command -v modprobe >/dev/null || { echo "no modprobe (kmod) to load rdma_rxe"; return; }
    said=$(modprobe rdma_rxe 2>&1) \
        || echo "no rdma_rxe module in this kernel ($(uname -r)): modprobe rdma_rxe: ${said:-failed}"
}

# Brings up $SOFT_DEV on $SOFT_IF (a veth pair) and waits for its IPv4 RoCE GID; why not where it cannot.
soft_roce_up() {
    local i
    ip link add "$SOFT_IF" type veth peer name "$SOFT_PEER" 2>&1 || return 1
    ip addr add "$SOFT_ADDR" dev "$SOFT_IF" 2>&1 && ip link set "$SOFT_IF" up 2>&1 \
        && ip link set "$SOFT_PEER" up 2>&1 || return 1
    rdma link add "$SOFT_DEV" type rxe netdev "$SOFT_IF" 2>&1 || return 1
    for i in $(seq 50); do
        grep -qv '^0000:0000:0000:0000:0000:0000:0000:0000$' \
            "/sys/class/infiniband/$SOFT_DEV/ports/1/gids/1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "$SOFT_DEV has no IPv4 RoCE GID (ports/1/gids/1) 5 s after it came up"
    return 1
}

# Removes what soft_roce_up made (the trap on exit).
soft_roce_down() {
    rdma link delete "$SOFT_DEV" 2>/dev/null
    ip link delete "$SOFT_IF" 2>/dev/null
}

# Where no RDMA device is here: sets dev to a soft-RoCE one brought up for the check (removed on exit), or
# soft_roce_why to why none could be.
soft_roce() {
    local said
    [ "${GPU_CHECK_SOFT_ROCE:-auto}" = 0 ] && { soft_roce_why="GPU_CHECK_SOFT_ROCE=0"; return; }
    soft_roce_why=$(soft_roce_cannot)
    [ -n "$soft_roce_why" ] && return
    trap soft_roce_down EXIT
    trap 'exit 130' INT TERM
    if said=$(soft_roce_up); then
        dev=$SOFT_DEV
        echo "gpu-check.sh: soft-RoCE device $dev brought up on veth $SOFT_IF ($SOFT_ADDR) for the loopback" \
             "checks; removed on exit"
    else
        soft_roce_why="bringing it up failed: $(printf '%s' "$said" | tr '\n' ' ')"
        soft_roce_down
    fi
}

# Whether RDMA device $1 is a software one (rxe, siw: no PCI device behind it).
software() {
    [ ! -e "/sys/class/infiniband/$1/device" ] || [[ $1 == *rxe* || $1 == siw* ]]
}

# One rdmabench loopback run with --mem MODE on $dev; a PASS/FAIL line in the summary.
loopback() {
    local mode=$1 log=$2 json=$3 rc
    # shellcheck disable=SC2086
    timeout "${RDMABENCH_TIMEOUT:-60}" "$rdmabench" write-bw --loopback -d "$dev" --mem "$mode" --validate \
        ${RDMABENCH_SHAPE:--s 1M -n 2000} --timeout 20 --json "$json" ${RDMABENCH_ARGS:-} >"$log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "PASS rdmabench write-bw --loopback -d $dev --mem $mode --validate: $(grep -E '^ +[0-9]+ +[0-9]+ ' "$log" | tail -1)"
    elif software "$dev" && grep -q 'cannot register this memory as a dma-buf' "$log"; then
        echo "SKIP rdmabench write-bw --loopback -d $dev --mem $mode: the provider of $dev does not take" \
             "dma-buf memory (ibv_reg_dmabuf_mr: EOPNOTSUPP; see $log)"
    else
        echo "FAIL rdmabench write-bw --loopback -d $dev --mem $mode --validate (exit $rc): $(tail -1 "$log")"
    fi
}

run() {
    local gpu_check rc
    gpu_check=$(first_executable "${GPU_CHECK_BIN:-}" "$here/gpu_check" "$here/../target/gpu-check/gpu_check" \
        "$here/../target/release/examples/gpu_check") || {
        echo "gpu-check.sh: no gpu_check binary: run 'scripts/gpu-check.sh build' where cargo is, and carry" \
             "target/gpu-check here" >&2
        exit 1
    }
    rdmabench=$(first_executable "${RDMABENCH_BIN:-}" "$here/rdmabench" "$here/../target/gpu-check/rdmabench" \
        "$here/../target/release/rdmabench") || rdmabench=
    check_glibc "$gpu_check"
    out=${OUT:-$(mktemp -d)}
    mkdir -p "$out" || exit 1
    {
        echo "## uname -a"; uname -a
        echo "## nvidia-smi"; nvidia-smi
        echo "## nvidia-smi topo -m"; nvidia-smi topo -m
        echo "## nvidia-smi -q -d PCIE"; nvidia-smi -q -d PCIE
        echo "## kernel modules"; lsmod | grep -E '^(nvidia|nvidia_peermem|nv_peer_mem|ib_core|mlx5_ib)\b'
        echo "## /proc/driver/nvidia/version"; cat /proc/driver/nvidia/version
        echo "## /sys/class/infiniband"; ls /sys/class/infiniband
    } >"$out/nvidia-smi.txt" 2>&1

    driverless=$(no_driver)
    rc=0
    if [ -z "$driverless" ]; then
        timeout "${GPU_CHECK_TIMEOUT:-240}" "$gpu_check" "$@" 2>&1 | tee "$out/gpu-check.txt"
        rc=${PIPESTATUS[0]}
        echo "$rc" >"$out/gpu-check.rc"
        [ "$rc" -eq 2 ] && exit 2
    fi
    dev=${RDMA_DEV:-$(ls /sys/class/infiniband 2>/dev/null | head -1)}
    soft_roce_why=
    if [ -z "$driverless" ] && { [ -z "$dev" ] || [ "${GPU_CHECK_SOFT_ROCE:-auto}" = 1 ]; }; then
        soft_roce
    fi
    {
        if [ -n "$driverless" ]; then echo "SKIP gpu_check: $driverless"
        elif [ "$rc" -eq 0 ]; then echo "PASS gpu_check"; else echo "FAIL gpu_check (exit $rc)"; fi
        for mode in cuda-staged cuda cuda-peermem; do
            why=$(cannot_loop "$dev" "$mode")
            if [ -n "$why" ]; then
                echo "SKIP rdmabench write-bw --loopback --mem $mode: $why"
            elif [ -z "$rdmabench" ]; then
                echo "FAIL rdmabench write-bw --loopback --mem $mode: no rdmabench binary in the bundle"
            else
                loopback "$mode:${1:-0}" "$out/rdmabench-$mode.txt" "$out/rdmabench-$mode.json"
            fi
        done
    } | tee "$out/summary.txt"
    [ -z "${OUT:-}" ] && echo "gpu-check.sh: logs in $out"
    # Any FAIL line (gpu_check's own included) fails the check; nothing run at all is unknown.
    if grep -q '^FAIL' "$out/summary.txt"; then exit 1; fi
    if ! grep -q '^PASS' "$out/summary.txt"; then
        echo "gpu-check.sh: nothing could be checked on this machine (every check skipped, each saying why)"
        exit 3
    fi
    exit 0
}

case "${1:-}" in
    -h|--help) usage; exit 0 ;;
    build) shift; build "$@" ;;
    run) shift; run "$@" ;;
    *) run "$@" ;;
esac
