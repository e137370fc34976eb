#!/usr/bin/env bash
# rxe-vm.sh - run one command inside a throw-away QEMU guest that has soft-RoCE devices.
#
# Usage:
#   scripts/rxe-vm.sh [--] CMD [ARG...]   run CMD (exec'd as an argv, no shell) in the guest
#   scripts/rxe-vm.sh --build-only        build the cached guest image if needed, run nothing
#   scripts/rxe-vm.sh --rebuild [CMD...]  rebuild the image (newest linux-image-amd64) first
#   scripts/rxe-vm.sh --help              print this text
#
# e.g.  scripts/rxe-vm.sh ibv_devinfo -l                    (2 HCAs found: rxe0 rxe1)
#       scripts/rxe-vm.sh bash -c 'ib_write_bw -d rxe0 -x 1 -F & sleep 1;
#                                  ib_write_bw -d rxe1 -x 1 -F 10.251.0.1; wait'
#       scripts/rxe-vm.sh ./target/release/rdmabench ...    (host-built binaries run as is)
#
# The guest boots Debian 12's own kernel (linux-image-amd64, which ships rdma_rxe) from a
# small busybox initramfs, then chroots into the HOST's root file system, shared read-only
# over virtio-9p: host binaries run unchanged at the same paths with the same libraries
# (libibverbs, the rxe provider, perftest, ...).  Inside the guest:
#   - veth0 10.251.0.1/24 carries rxe0 and veth1 10.251.0.2/24 carries rxe1 (a veth pair);
#     GID index 1 is the IPv4 RoCEv2 GID; RoCE path MTU 1024 (veth MTU 1500).  A server on
#     rxe0 and a client on rxe1 connecting to 10.251.0.1 really cross the veth pair (policy
#     routing, accept_local=1, rp_filter=0); rxe0 -> rxe0 uses rxe's internal loopback.
#     QEMU has no network backend: nothing leaves the guest.
#   - RXE_VM_NODES=N (3..16) makes N soft-RoCE "nodes" instead: rxeK on vethK with
#     10.251.0.(K+1)/24 (rxe0 10.251.0.1, rxe1 10.251.0.2, rxe2 10.251.0.3, ...), each
#     veth's peer vpK a port of one bridge brx, so every pair of devices talks across the
#     bridge.  `tc qdisc add dev vethK root tbf ...` (or netem) slows node K down.
#   - RXE_VM_LEAVES=L (2..8, with RXE_VM_NODES >= 2L) splits the nodes into L contiguous
#     blocks, each on its own bridge brx0..brx(L-1) (a "leaf switch"): node K is on leaf
#     K*L/N.  Leaf l >= 1 reaches leaf 0 through the veth pair upl (a port of brx0) <-> dnl
#     (a port of brxl), its "uplink": tc on upl and dnl slows every path between leaf l and
#     the others, and none inside a leaf.  (6 nodes, 2 leaves: nodes 0-2 and 3-5.)
#   - the host name is rxe-vm; Open MPI's mpirun runs there (docs/validation.md says how).
#   - CMD runs as root in the host's $PWD, which is shared read-write at the same path.
#     /tmp, /var/tmp, /run and /dev/shm are empty tmpfs; the rest of / is read-only (so
#     build on the host, e.g. cargo, and run the binaries in the guest).
#   - stdin is /dev/null; stdout and stderr are raw serial lines (ttys in the guest)
#     streamed to the host's stdout and stderr.  RLIMIT_MEMLOCK is unlimited.
#   - the environment is clean: PATH HOME USER LOGNAME LANG LC_ALL TZ from the host,
#     TERM=dumb, RXE_VM_GUEST=1, and the host variables named by RXE_VM_PASSENV.
#
# Exit status: CMD's (127 if not found); 124 if RXE_VM_TIMEOUT expired; 125 if the harness
# or the guest failed before CMD ran (the guest's console log is printed to stderr);
# 128+N if rxe-vm.sh itself got signal N.
#
# Environment knobs:
#   RXE_VM_DIR       cache folder: guest image, kernel package, lock, run.* folders
#                    (default ${XDG_CACHE_HOME:-$HOME/.cache}/rdmabench-rxe-vm)
#   RXE_VM_TIMEOUT   seconds before the VM is killed (default 900; 0 = never)
#   RXE_VM_BOOT_LIMIT seconds the guest may take to start CMD (default 120); a guest that
#                    takes longer (a rare TCG boot hang) is stopped and booted again, once
#   RXE_VM_PASSENV   more host variables to pass to CMD (names, space/comma-separated);
#                    always passed when set: RDMABENCH_REQUIRE_RDMA RUST_BACKTRACE RUST_LOG
#                    RUST_TEST_THREADS
#   RXE_VM_RW_DIRS   more host folders to share read-write, ':'-separated (default none)
#   RXE_VM_MEM       guest memory in MiB (default 2048)
#   RXE_VM_SMP       guest vCPUs (default: host CPUs, at most 4)
#   RXE_VM_MTU       MTU of the veths (default 1500)
#   RXE_VM_NODES     number of rxe devices, 2..16 (default 2: the veth pair; 3 or more: a
#                    bridge, see above)
#   RXE_VM_LEAVES    leaf switches joined by uplinks, 1..8 (default 1: one bridge), see above
#   RXE_VM_ACCEL     auto | tcg | kvm (default auto: KVM only if kvm_intel or kvm_amd is
#                    loaded and the CPU has vmx/svm; otherwise TCG emulation)
#   RXE_VM_KERNEL    kernel package of the image (default: the one linux-image-amd64 needs)
#   RXE_VM_KCMDLINE  extra guest kernel command line (e.g. "loglevel=7")
#   RXE_VM_VERBOSE   1 = print settings, boot timings and the guest console log to stderr
#   RXE_VM_KEEP      1 = keep the run folder (console.log, qemu.log, guest.sh, ...)
#
# Host requirements (Debian 12): qemu-system-x86 busybox-static cpio kmod iproute2
# libibverbs1 ibverbs-providers (xz-utils for faster boots); scripts/setup.sh installs
# them.  The first run downloads the kernel package with apt-get (network needed once) and
# builds the image (~10 s); later runs are offline: boot, run and power-off take ~5.5 s on
# an idle 2-core host under TCG (7-9 s while a build runs).
# Runs as root (tested) or as a user (then the guest sees only what that user may read).
# Safe to run repeatedly and concurrently: the image is built under a lock and replaced
# atomically; every run has its own folder and VM.
set -Eeuo pipefail
trap 'rc=$?; [ $rc = 125 ] || log "error: status $rc at line $LINENO: $BASH_COMMAND"; exit 125' ERR
trap on_exit EXIT

# ---------------------------------------------------------------------------- settings
readonly CACHE=${RXE_VM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rdmabench-rxe-vm}
readonly TIMEOUT=${RXE_VM_TIMEOUT:-900}
readonly BOOT_LIMIT=${RXE_VM_BOOT_LIMIT:-120}
readonly MEM=${RXE_VM_MEM:-2048}
readonly SMP=${RXE_VM_SMP:-$(n=$(nproc); echo $((n > 4 ? 4 : n)))}
readonly MTU=${RXE_VM_MTU:-1500}
readonly NODES=${RXE_VM_NODES:-2}
readonly LEAVES=${RXE_VM_LEAVES:-1}
readonly ACCEL=${RXE_VM_ACCEL:-auto}
readonly VERBOSE=${RXE_VM_VERBOSE:-0}
readonly KEEP=${RXE_VM_KEEP:-0}
readonly DEFAULT_PASSENV="RDMABENCH_REQUIRE_RDMA RUST_BACKTRACE RUST_LOG RUST_TEST_THREADS"
readonly REQUIRED_PKGS="qemu-system-x86 busybox-static cpio kmod iproute2 libibverbs1 ibverbs-providers"
# Guest kernel modules (dependencies come along), loaded at boot.  crc32_generic: rxe
# allocates the "crc32" shash for its ICRC, and Debian builds that as a module.
readonly GUEST_MODULES="virtio_pci 9pnet_virtio 9p crc32_generic veth rdma_rxe ib_uverbs rdma_ucm ib_umad"
# Modules in the image that the kernel loads when first used (request_module): bridge
# joins 3 or more nodes; sch_tbf and sch_netem let a test slow a node down with tc.
# Loading them at every boot would cost ~0.5 s under TCG.
readonly GUEST_MODULES_ON_DEMAND="bridge sch_tbf sch_netem"
# pci=noacpi saves ~0.3 s of ACPI interrupt routing per boot under TCG.
readonly KERNEL_CMDLINE="console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off pci=noacpi rdinit=/init"
SETUP_HINT="run $(dirname "${BASH_SOURCE[0]}")/setup.sh"
readonly HOST_PATH=${PATH:-/usr/local/bin:/usr/bin:/bin}
export PATH="$HOST_PATH:/usr/local/sbin:/usr/sbin:/sbin"   # depmod, modprobe for users

RUN='' BUILD='' DONE=0 IMG='' RC=125 SHARE_ARGS=() BOOT_HUNG=0

log() { printf 'rxe-vm: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 125; }
vlog() { if [ "$VERBOSE" = 1 ]; then log "$@"; fi; }
now() { local s; s=$(date +%s.%N); echo "${s:0:14}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
usage() { sed -n '2,/^set -E/{/^set -E/d; s/^# \{0,1\}//; p}' "${BASH_SOURCE[0]}"; }

on_exit() {   # clean up; an unplanned exit of the harness itself becomes 125
    local rc=$?
    if [ -n "$BUILD" ]; then rm -rf "$BUILD"; fi
    if [ -n "$RUN" ] && [ "$KEEP" != 1 ]; then rm -rf "$RUN"; fi
    if [ "$DONE" = 0 ] && [ "$rc" != 0 ] && [ "$rc" != 125 ]; then
        log "error: unexpected exit (status $rc)"
        exit 125
    fi
}

# ---------------------------------------------------------------------------- host checks
check_host() {
    local installed missing=() p
    command -v dpkg-query > /dev/null || die "no dpkg-query: this harness expects Debian 12"
    # shellcheck disable=SC2086 # (a list of package names)
    installed=" $(dpkg-query -W -f='${Package}:${db:Status-Status} ' $REQUIRED_PKGS 2> /dev/null || true)"
    for p in $REQUIRED_PKGS; do
        [[ $installed == *" $p:installed "* ]] || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] || die "missing host packages: ${missing[*]} ($SETUP_HINT)"
    [[ $TIMEOUT =~ ^[0-9]+$ ]] || die "RXE_VM_TIMEOUT must be a whole number of seconds"
    [[ $BOOT_LIMIT =~ ^[1-9][0-9]*$ ]] || die "RXE_VM_BOOT_LIMIT must be a whole number of seconds above 0"
    [[ $NODES =~ ^([2-9]|1[0-6])$ ]] || die "RXE_VM_NODES must be 2..16"
    [[ $LEAVES =~ ^[1-8]$ ]] || die "RXE_VM_LEAVES must be 1..8, not '$LEAVES'"
    [ "$LEAVES" = 1 ] || [ "$NODES" -ge $((2 * LEAVES)) ] \
        || die "RXE_VM_LEAVES=$LEAVES needs RXE_VM_NODES >= $((2 * LEAVES)) (two nodes a leaf)"
}

# ---------------------------------------------------------------------------- guest image
# $CACHE/image-HASH/ holds vmlinuz, vmlinux (the same kernel uncompressed: booting that ELF
# through its PVH entry saves ~2.5 s of XZ decompression per boot under TCG), initrd,
# kernel (the package name) and ok.  HASH covers the recipe below, so an edited recipe
# builds a new image; the kernel stays the same until --rebuild or RXE_VM_KERNEL.

# /init of the initramfs (busybox sh): loads the modules, mounts the host root and the
# shares, runs /run/rxe-vm/guest.sh chrooted into the host root, records its exit status
# and powers off.
init_script() {
    cat << 'EOF'
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
up() { read -r u _ < /proc/uptime; echo "${u}s"; }
say() { echo "rxe-vm-init: $*" > /dev/ttyS0; }
fail() { say "$*"; poweroff -f; }
say "init started ($(up))"
modprobe -a $(cat /modules) || say "modprobe failed"
say "modules loaded ($(up))"
O=trans=virtio,version=9p2000.L,msize=262144
R=/newroot
mount -t 9p -o $O,ro,cache=loose hostroot $R || fail "cannot mount the host root"
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts
for d in /dev/shm /tmp /var/tmp /run; do mount -t tmpfs tmpfs $R$d; done
mkdir -p $R/run/rxe-vm
mount -t 9p -o $O,cache=mmap rxerun $R/run/rxe-vm || fail "cannot mount the run folder"
while read -r tag mode path; do
    mkdir -p "$R$path" 2> /dev/null
    mount -t 9p -o $O,$mode,cache=mmap "$tag" "$R$path" || fail "cannot mount $path"
done < $R/run/rxe-vm/shares
echo rxe-vm > /proc/sys/kernel/hostname
for t in ttyS1 ttyS2; do stty -F /dev/$t raw -echo; done
say "mounts done ($(up))"
chroot $R /bin/bash /run/rxe-vm/guest.sh
rc=$?
for t in ttyS1 ttyS2; do stty -F /dev/$t raw; done   # (waits until their output is sent)
echo $rc > $R/run/rxe-vm/status
sync
say "powering off ($(up))"
poweroff -f
EOF
}

resolve_kernel_pkg() {
    local k
    if [ -n "${RXE_VM_KERNEL:-}" ]; then echo "$RXE_VM_KERNEL"; return; fi
    k=$(apt-cache depends linux-image-amd64 2> /dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
    if [ -z "$k" ] && [ "$(id -u)" = 0 ]; then   # no apt lists yet
        apt-get update -qq >&2 || true
        k=$(apt-cache depends linux-image-amd64 2> /dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
    fi
    [ -n "$k" ] || die "cannot resolve the package linux-image-amd64 (no apt lists? $SETUP_HINT)"
    echo "$k"
}

# The kernel package stays in $CACHE/debs (~70 MB), so that a changed recipe (another
# checkout of this script, say) rebuilds without the network.
kernel_deb() {   # PKG REFRESH(0|1): sets DEB to PKG's .deb in $CACHE/debs
    local pkg=$1 refresh=$2 dir=$CACHE/debs opts=(-q) debs
    mkdir -p "$dir"
    debs=("$dir/${pkg}_"*.deb)
    if [ "$refresh" = 0 ] && [ -f "${debs[0]}" ]; then DEB=${debs[0]}; return 0; fi
    if [ "$(id -u)" = 0 ]; then opts+=(-o APT::Sandbox::User=root); fi
    if ! (cd "$BUILD" && apt-get download "${opts[@]}" "$pkg") > "$BUILD/apt.log" 2>&1; then
        # stale apt lists: the mirror no longer has that version
        if [ "$(id -u)" = 0 ]; then apt-get update -qq >> "$BUILD/apt.log" 2>&1 || true; fi
        (cd "$BUILD" && apt-get download "${opts[@]}" "$pkg") >> "$BUILD/apt.log" 2>&1 \
            || { cat "$BUILD/apt.log" >&2; die "cannot download $pkg (network needed once; $SETUP_HINT)"; }
    fi
    rm -f "$dir"/*.deb
    mv "$BUILD"/*.deb "$dir/"
    debs=("$dir/${pkg}_"*.deb)
    DEB=${debs[0]}
}

# bzImage -> uncompressed ELF vmlinux, or an empty OUT where that is not possible.  The
# compressed payload ends with the uncompressed size (4 bytes), used as a check.
extract_vmlinux() {   # BZIMAGE OUT
    local bz=$1 out=$2 sects off len size magic dec
    u() { od -An -tu"$1" -j "$2" -N"$1" "$bz" | tr -d ' '; }
    sects=$(u 1 $((0x1f1)))
    if [ "$sects" = 0 ]; then sects=4; fi
    off=$(((sects + 1) * 512 + $(u 4 $((0x248)))))
    len=$(u 4 $((0x24c)))
    size=$(u 4 $((off + len - 4)))
    magic=$(od -An -tx1 -j "$off" -N4 "$bz" | tr -d ' ')
    case $magic in
        fd377a58) dec="xz -dcq" ;; # (busybox xzcat lacks the x86 BCJ filter)
        28b52ffd) dec="zstd -dcq" ;;
        1f8b*) dec="gzip -dc" ;;
        *) dec=false ;;
    esac
    if ! command -v "${dec%% *}" > /dev/null; then
        log "no ${dec%% *} (install xz-utils): the guest boots the compressed kernel, ~2.5 s slower"
        dec=false
    fi
    head -c $((off + len - 4)) "$bz" | tail -c $((len - 4)) | $dec > "$out" 2> /dev/null || : > "$out"
    if [ "$(stat -c %s "$out")" != "$size" ] || [ "$(head -c4 "$out" | od -An -c | tr -d ' ')" != 177ELF ]; then
        : > "$out"
    fi
}

build_image() {   # IMG REFRESH(0|1): builds the image and moves it into the folder IMG
    local img=$1 refresh=$2 kpkg kv k ir m cmd path DEB
    if ! busybox true 2> /dev/null || ldd "$(command -v busybox)" > /dev/null 2>&1; then
        die "busybox is missing or not static (install busybox-static; $SETUP_HINT)"
    fi
    kpkg=$(resolve_kernel_pkg)
    kv=${kpkg#linux-image-}
    log "building the guest image (kernel $kv) in $img"
    BUILD=$(mktemp -d "$CACHE/build.XXXXXX")
    k=$BUILD/deb ir=$BUILD/initramfs
    mkdir -p "$k" "$ir"/{bin,sbin,proc,sys,dev,newroot}
    kernel_deb "$kpkg" "$refresh"
    dpkg-deb -x "$DEB" "$k"
    [ -f "$k/boot/vmlinuz-$kv" ] || die "$kpkg has no /boot/vmlinuz-$kv"
    cp "$k/boot/vmlinuz-$kv" "$BUILD/vmlinuz"
    : > "$BUILD/vmlinux"
    if grep -qx 'CONFIG_PVH=y' "$k/boot/config-$kv" 2> /dev/null; then
        extract_vmlinux "$BUILD/vmlinuz" "$BUILD/vmlinux"
    fi
    depmod -b "$k" "$kv"

    # initramfs: static busybox (applet links made here, not at each boot) and the modules
    # with their dependencies, indexed so that busybox modprobe works in the guest, also
    # for the kernel's own request_module() calls
    cp "$(command -v busybox)" "$ir/bin/busybox"
    for m in $(busybox --list); do
        if [ ! -e "$ir/bin/$m" ]; then ln -s busybox "$ir/bin/$m"; fi
    done
    ln -s ../bin/busybox "$ir/sbin/modprobe"
    for m in $GUEST_MODULES $GUEST_MODULES_ON_DEMAND; do
        modprobe -d "$k" -S "$kv" --show-depends "$m" > "$BUILD/deps" 2>&1 \
            || { cat "$BUILD/deps" >&2; die "kernel $kv lacks the module $m"; }
        while read -r cmd path _; do
            [ "$cmd" = insmod ] || continue   # "builtin ..." lines need nothing
            path=${path#"$k"/}
            mkdir -p "$ir/${path%/*}"
            cp "$k/$path" "$ir/$path"
        done < "$BUILD/deps"
    done
    cp "$k/lib/modules/$kv"/modules.{order,builtin,builtin.modinfo} "$ir/lib/modules/$kv/"
    depmod -b "$ir" "$kv"
    echo "$GUEST_MODULES" > "$ir/modules"
    init_script > "$ir/init"
    chmod 755 "$ir/init"
    (cd "$ir" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$BUILD/initrd"
    echo "$kpkg" > "$BUILD/kernel"
    rm -rf "$k" "$ir" "$BUILD"/apt.log "$BUILD"/deps
    touch "$BUILD/ok"
    chmod 755 "$BUILD"
    # swap it in; runs already started hold hard links to the old files
    if [ -e "$img" ]; then mv "$img" "$BUILD.old"; fi
    mv "$BUILD" "$img"
    BUILD=$BUILD.old
}

image_path() {   # the image folder of the current recipe
    local h
    h=$(declare -f init_script extract_vmlinux build_image \
        | cat - <(echo "$GUEST_MODULES/$GUEST_MODULES_ON_DEMAND") | md5sum | cut -c1-10)
    echo "$CACHE/image-$h"
}

image_ok() {
    [ -f "$IMG/ok" ] && { [ -z "${RXE_VM_KERNEL:-}" ] || [ "$(< "$IMG/kernel")" = "$RXE_VM_KERNEL" ]; }
}

# (The functions called from main never return a failure status: bash would disable
# errexit inside a function that is called as "f || ...".)
ensure_image() {   # REBUILD(0|1): sets IMG
    local rebuild=$1 lockfd stale
    IMG=$(image_path)
    if [ "$rebuild" = 0 ] && image_ok; then return 0; fi
    mkdir -p "$CACHE"
    exec {lockfd}> "$CACHE/lock"
    if ! flock -n "$lockfd"; then
        log "waiting for another rxe-vm.sh to finish building the image"
        flock "$lockfd"
    fi
    if [ "$rebuild" = 0 ] && image_ok; then   # someone else just built it
        exec {lockfd}>&-
        return 0
    fi
    build_image "$IMG" "$rebuild"
    # drop leftovers of interrupted builds, and images of other recipes unused for a week
    rm -rf "$CACHE"/build.*
    for stale in "$CACHE"/image-*; do
        if [ "$stale" != "$IMG" ] && [ -z "$(find "$stale/ok" -mtime -7 2> /dev/null)" ]; then
            rm -rf "$stale"
        fi
    done
    BUILD=
    exec {lockfd}>&-
    log "image ready: $IMG ($(< "$IMG/kernel"))"
}

# ---------------------------------------------------------------------------- one run
# guest.sh: runs in the guest as root, chrooted into the read-only host root.  Every exec
# costs a lot under TCG, hence the ip and rdma batches and bash builtins.
guest_script() {
    cat << 'EOF'
#!/bin/bash
exec 2> /dev/ttyS0 < /dev/null
up() { local u; read -r u _ < /proc/uptime; echo "${u}s"; }
fail() { echo "rxe-vm-guest: $*" >&2; exit 1; }
RUN=/run/rxe-vm
. $RUN/config
# All addresses are local, so rxe1 -> 10.251.0.1 would be routed through lo (which rxe
# drops): the rules send traffic that leaves with oif=vethX out of vethX (sockets without
# an oif still use the local table), and the receiving side must accept a local source
# address.
if [ "$NODES" = 2 ]; then
    ip -batch - << IP || fail "network set-up failed"
link set lo up
link add veth0 mtu $MTU type veth peer name veth1 mtu $MTU
addr add 10.251.0.1/24 dev veth0
addr add 10.251.0.2/24 dev veth1
link set veth0 up
link set veth1 up
rule add pref 100 oif veth1 lookup 100
rule add pref 101 oif veth0 lookup 101
rule add pref 1000 lookup local
rule del pref 0
route add 10.251.0.1 dev veth1 table 100
route add 10.251.0.2 dev veth0 table 101
IP
else
    # N nodes: vethK (10.251.0.K+1, carries rxeK) <-> vpK, every vpK a port of bridge brx;
    # with L leaves, of bridge brx(K*L/N), leaf l >= 1 joined to leaf 0 by upl <-> dnl
    {
        echo "link set lo up"
        if [ "$LEAVES" = 1 ]; then
            echo "link add brx type bridge"
            echo "link set brx up"
        fi
        for ((l = 0; LEAVES > 1 && l < LEAVES; l++)); do
            echo "link add brx$l type bridge"
            echo "link set brx$l up"
            if [ $l -gt 0 ]; then
                echo "link add up$l mtu $MTU type veth peer name dn$l mtu $MTU"
                echo "link set up$l master brx0"
                echo "link set dn$l master brx$l"
                echo "link set up$l up"
                echo "link set dn$l up"
            fi
        done
        for ((k = 0; k < NODES; k++)); do
            echo "link add veth$k mtu $MTU type veth peer name vp$k mtu $MTU"
            if [ "$LEAVES" = 1 ]; then
                echo "link set vp$k master brx"
            else
                echo "link set vp$k master brx$((k * LEAVES / NODES))"
            fi
            echo "addr add 10.251.0.$((k + 1))/24 dev veth$k"
            echo "link set vp$k up"
            echo "link set veth$k up"
            echo "rule add pref $((100 + k)) oif veth$k lookup $((100 + k))"
            echo "route add 10.251.0.0/24 dev veth$k table $((100 + k))"
        done
        echo "rule add pref 1000 lookup local"
        echo "rule del pref 0"
    } | ip -batch - || fail "network set-up failed"
fi
veths=() devs=()
for ((k = 0; k < NODES; k++)); do veths+=("veth$k") devs+=("rxe$k"); done
for i in all "${veths[@]}"; do
    echo 1 > /proc/sys/net/ipv4/conf/$i/accept_local
    echo 0 > /proc/sys/net/ipv4/conf/$i/rp_filter
    # on a bridge every veth would answer ARP for every (local) address and the bridge
    # would learn wrong MACs: only the owner of an address answers for it
    if [ "$NODES" != 2 ]; then
        echo 1 > /proc/sys/net/ipv4/conf/$i/arp_ignore
        echo 2 > /proc/sys/net/ipv4/conf/$i/arp_announce
    fi
done
for ((k = 0; k < NODES; k++)); do echo "link add rxe$k type rxe netdev veth$k"; done \
    | rdma -b - || fail "cannot create the rxe devices"
# wait until every port is ACTIVE with its IPv4 GID (index 1, ::ffff:10.251.0.K+1) in place
for ((i = 0; ; i++)); do
    ok=1
    for ((k = 0; k < NODES; k++)); do
        printf -v ip4 '0afb:%04x' $((k + 1))
        read -r g < /sys/class/infiniband/rxe$k/ports/1/gids/1
        read -r s < /sys/class/infiniband/rxe$k/ports/1/state
        [[ $g == *:ffff:$ip4 && $s == *ACTIVE* ]] || ok=0
    done
    [ $ok = 1 ] && break
    [ $i -lt 400 ] || fail "the rxe ports did not become ACTIVE"
    sleep 0.05
done
echo "rxe-vm-guest: ${devs[*]} ready ($(up))" >&2
cd "$CWD" || fail "cannot enter $CWD"
ulimit -l unlimited
for v in $(compgen -e); do unset "$v"; done
. $RUN/env
. $RUN/argv
: > $RUN/started
exec > /dev/ttyS1 2> /dev/ttyS2
command -v -- "$ARGV" > /dev/null || { echo "rxe-vm: $ARGV: command not found in the guest" >&2; exit 127; }
exec "${ARGV[@]}"
EOF
}

pick_accel() {
    case $ACCEL in
        tcg | kvm) echo "$ACCEL" ;;
        auto)
            # Trust only hardware KVM: /dev/kvm also exists under e.g. kvm_pvm, where a
            # stock Debian kernel hangs right after boot.
            if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; } \
                && grep -qwE 'vmx|svm' /proc/cpuinfo; then echo kvm; else echo tcg; fi
            ;;
        *) die "RXE_VM_ACCEL must be auto, tcg or kvm" ;;
    esac
}

# Shared folders: $PWD and RXE_VM_RW_DIRS read-write; CMD's folder read-only if it lies
# where the guest has an empty tmpfs (e.g. a binary in /tmp).  Writes $RUN/shares (tag,
# mode, path; parents before children) and sets SHARE_ARGS.
plan_shares() {
    local d mode line parent pmode n=0 dirs=() seen=() tab=$'\t'
    IFS=: read -r -a dirs <<< "$PWD${RXE_VM_RW_DIRS:+:$RXE_VM_RW_DIRS}"
    dirs=("${dirs[@]/%/${tab}rw}")
    if [[ $1 == */* ]] && d=$(cd "${1%/*}/" 2> /dev/null && pwd -P); then
        case $d/ in /tmp/* | /var/tmp/* | /run/* | /dev/shm/*) dirs+=("$d${tab}ro") ;; esac
    fi
    : > "$RUN/shares"
    while IFS= read -r line; do
        d=${line%"$tab"*} mode=${line##*"$tab"}
        for parent in "${seen[@]}"; do
            pmode=${parent##*"$tab"} parent=${parent%"$tab"*}
            # inside a share already: skip, unless a read-write child of a read-only parent
            if [[ $d/ == "$parent"/* ]] && { [ "$pmode" = rw ] || [ "$mode" = ro ]; }; then continue 2; fi
        done
        seen+=("$line")
        SHARE_ARGS+=(-virtfs "local,path=${d//,/,,},mount_tag=share$n,security_model=none,multidevs=remap$([ "$mode" = rw ] || echo ,readonly=on)")
        printf 'share%d %s %s\n' "$n" "$mode" "$d" >> "$RUN/shares"
        n=$((n + 1))
    done < <(for d in "${dirs[@]}"; do
        mode=${d##*"$tab"} d=${d%"$tab"*}
        if [ -z "$d" ]; then continue; fi
        if ! d=$(cd "$d" 2> /dev/null && pwd -P); then log "not a folder, not shared: '$d'"; continue; fi
        case $d in
            / | /proc | /proc/* | /sys | /sys/* | /dev | /dev/pts | /dev/pts/* | /tmp | /var/tmp | /run | /dev/shm) ;;
            *$'\n'*) log "not shared (newline in the path): '$d'" ;;
            *) echo "$d$tab$mode" ;;
        esac
    done | LC_ALL=C sort -u)   # (a tab sorts before '/': parents come before children)
}

# Writes the rest of the run folder: config, env, argv, guest.sh.
prepare_run() {
    local v extra
    printf 'MTU=%q\nNODES=%q\nLEAVES=%q\nCWD=%q\n' "$MTU" "$NODES" "$LEAVES" "$PWD" > "$RUN/config"
    {
        printf 'export PATH=%q\n' "$HOST_PATH"
        for v in HOME USER LOGNAME LANG LC_ALL TZ; do
            if [ -n "${!v+x}" ]; then printf 'export %s=%q\n' "$v" "${!v}"; fi
        done
        echo 'export TERM=dumb RXE_VM_GUEST=1'
        extra=${RXE_VM_PASSENV:-}
        for v in $DEFAULT_PASSENV ${extra//,/ }; do
            [[ $v =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "RXE_VM_PASSENV: not a variable name: '$v'"
            if [ -n "${!v+x}" ]; then printf 'export %s=%q\n' "$v" "${!v}"; fi
        done
    } > "$RUN/env"
    { printf 'ARGV=('; printf ' %q' "$@"; echo ' )'; } > "$RUN/argv"
    guest_script > "$RUN/guest.sh"
}

run_vm() {   # sets RC
    local accel kernel cmdline q f fd rc t0 sig cat_out cat_err qpid
    local acc_args=(-accel tcg -cpu max) bios=() pdeath=()
    RUN=$(mktemp -d "$CACHE/run.XXXXXX")
    if [ "$KEEP" = 1 ]; then log "run folder: $RUN"; fi
    touch "$IMG/ok" 2> /dev/null || true   # (marks the image as in use)
    # hard links keep the image files alive should a concurrent --rebuild replace them
    kernel=vmlinux
    if [ ! -s "$IMG/vmlinux" ]; then kernel=vmlinuz; fi
    ln "$IMG/$kernel" "$IMG/initrd" "$RUN/" 2> /dev/null || cp "$IMG/$kernel" "$IMG/initrd" "$RUN/" \
        || die "the image $IMG vanished (a concurrent --rebuild?); try again"
    plan_shares "$@"
    prepare_run "$@"

    accel=$(pick_accel)
    if [ "$accel" = kvm ]; then acc_args=(-accel kvm -cpu host); fi
    if [ -f /usr/share/qemu/qboot.rom ]; then bios=(-bios /usr/share/qemu/qboot.rom); fi
    cmdline=$KERNEL_CMDLINE
    # Under TCG the guest's TSC is the host's, but the guest kernel distrusts it and uses
    # HPET, where clock_gettime() costs ~750 ns instead of ~50 ns: trust it if the host does.
    if [ "$accel" = tcg ] && [ "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2> /dev/null)" = tsc ]; then
        cmdline+=" tsc=reliable"
    fi
    cmdline+=" ${RXE_VM_KCMDLINE:-}"
    vlog "accel=$accel smp=$SMP mem=${MEM}M kernel=$kernel image=$IMG"
    vlog "kernel command line: $cmdline"

    # QEMU's pipe chardev writes the guest's output to NAME.out and reads NAME.in (with a
    # single FIFO QEMU would read back its own output).  Should our stdout go away (| head),
    # keep draining, or the guest would block on a full serial line.
    mkfifo "$RUN"/{out,err}.{in,out}
    { cat "$RUN/out.out" || exec cat "$RUN/out.out" > /dev/null; } &
    cat_out=$!
    { cat "$RUN/err.out" >&2 || exec cat "$RUN/err.out" > /dev/null; } &
    cat_err=$!

    # if rxe-vm.sh is killed hard, timeout gets SIGTERM and stops QEMU
    if setpriv --help 2> /dev/null | grep -q pdeathsig; then pdeath=(setpriv --pdeathsig TERM --); fi
    t0=$(now)
    "${pdeath[@]}" timeout --kill-after=10 "$TIMEOUT" qemu-system-x86_64 \
        -name rxe-vm "${acc_args[@]}" -machine pc -m "$MEM" -smp "$SMP" "${bios[@]}" \
        -nodefaults -no-user-config -display none -vga none -nic none -no-reboot \
        -kernel "$RUN/$kernel" -initrd "$RUN/initrd" -append "$cmdline" \
        -serial "file:$RUN/console.log" \
        -chardev "pipe,id=out,path=$RUN/out" -serial chardev:out \
        -chardev "pipe,id=err,path=$RUN/err" -serial chardev:err \
        -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
        -virtfs "local,path=${RUN//,/,,},mount_tag=rxerun,security_model=none" \
        "${SHARE_ARGS[@]}" < /dev/null > "$RUN/qemu.log" 2>&1 &
    qpid=$!
    # A TCG boot now and then hangs before the kernel prints anything (seen with two guests
    # booting at once on a 2-core host): past RXE_VM_BOOT_LIMIT without the command started,
    # stop this VM; main() boots a fresh one once.
    (
        for ((i = 0; i < BOOT_LIMIT * 10; i++)); do
            if [ -e "$RUN/started" ] || ! kill -0 "$qpid" 2> /dev/null; then exit 0; fi
            sleep 0.1
        done
        : > "$RUN/boot-hung"
        kill -TERM "$qpid" 2> /dev/null
    ) &
    watchdog=$!
    SIGNALLED=
    # shellcheck disable=SC2064 # (expanded now on purpose)
    for sig in INT TERM HUP; do trap "SIGNALLED=$sig; kill -TERM $qpid 2> /dev/null" "$sig"; done
    q=0
    wait "$qpid" || q=$?
    while [ -n "$SIGNALLED" ] && kill -0 "$qpid" 2> /dev/null; do q=0; wait "$qpid" || q=$?; done
    trap - INT TERM HUP
    kill "$watchdog" 2> /dev/null || true
    # should QEMU never have opened the FIFOs, unblock the readers; then let them drain
    for f in out.out err.out; do exec {fd}<> "$RUN/$f"; exec {fd}>&-; done
    wait "$cat_out" "$cat_err" 2> /dev/null || true

    if [ -e "$RUN/boot-hung" ]; then
        log "the guest did not start the command within RXE_VM_BOOT_LIMIT=${BOOT_LIMIT}s"
        BOOT_HUNG=1
        rc=125
    elif [ -n "$SIGNALLED" ]; then
        log "interrupted (SIG$SIGNALLED)"
        rc=$((128 + $(kill -l "$SIGNALLED")))
    elif [ -s "$RUN/status" ] && [ -e "$RUN/started" ]; then
        rc=$(< "$RUN/status")
    elif [ "$q" = 124 ] || [ "$q" = 137 ]; then
        log "timeout: the VM ran longer than RXE_VM_TIMEOUT=${TIMEOUT}s"
        rc=124
    else
        log "the guest failed before running the command (qemu exit status $q)"
        rc=125
    fi
    if [ "$VERBOSE" = 1 ] || [ "$rc" = 124 ] || [ "$rc" = 125 ]; then
        if [ -s "$RUN/qemu.log" ]; then log "---- qemu output"; cat "$RUN/qemu.log" >&2; fi
        log "---- guest console"
        cat "$RUN/console.log" >&2 2> /dev/null || true
        log "---- VM wall time $(since "$t0")s"
    fi
    RC=$rc
}

main() {
    local rebuild=0 build_only=0
    while [ $# -gt 0 ]; do
        case $1 in
            -h | --help) usage; return 0 ;;
            --build-only) build_only=1; shift ;;
            --rebuild) rebuild=1; shift ;;
            --) shift; break ;;
            -*) die "unknown option '$1' (see --help)" ;;
            *) break ;;
        esac
    done
    if [ "$build_only" = 1 ] && [ $# -gt 0 ]; then die "--build-only takes no command"; fi
    if [ $# -eq 0 ] && [ "$build_only" = 0 ] && [ "$rebuild" = 0 ]; then usage >&2; exit 125; fi
    check_host
    ensure_image "$rebuild"
    if [ $# -eq 0 ]; then return 0; fi
    # leftovers of runs that were killed hard
    find "$CACHE" -maxdepth 1 -name 'run.*' -mmin +1440 -exec rm -rf {} + 2> /dev/null || true
    run_vm "$@"
    if [ "$BOOT_HUNG" = 1 ]; then
        log "booting a fresh guest once more"
        [ "$KEEP" = 1 ] || rm -rf "$RUN"
        BOOT_HUNG=0 SHARE_ARGS=()
        run_vm "$@"
    fi
    DONE=1
    exit "$RC"
}

main "$@"
