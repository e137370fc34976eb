#!/usr/bin/env bash
# setup.sh - prepare a Debian 12 machine for building and testing rdmabench.
#
# Usage: scripts/setup.sh [--no-image] [--help]
#
#   1. apt-get installs the packages below that are missing (as root, or through sudo
#      when run as a user who has it);
#   2. installs a Rust toolchain with rustup (rustfmt, clippy) if there is no cargo; if
#      cargo and rustup exist, makes sure rustfmt and clippy are installed;
#   3. builds the soft-RoCE guest image: scripts/rxe-vm.sh --build-only
#      (skipped with --no-image).
#
# Idempotent: a second run changes nothing and takes well under a second.  Prints what it
# did, nothing when there was nothing to do.  Exit status 0 on success, 1 on failure.
set -euo pipefail

PKGS=(
    build-essential gcc cmake pkg-config libclang-dev clang      # build (rdma-mummy-sys: cmake, bindgen)
    rdma-core libibverbs1 ibverbs-providers librdmacm1           # run time: verbs, rxe provider, rdma_cm
    ibverbs-utils rdmacm-utils perftest                          # ibv_devinfo & co, perftest to compare with
    qemu-system-x86 busybox-static cpio kmod iproute2 xz-utils   # scripts/rxe-vm.sh (soft-RoCE guest)
    openmpi-bin                                                  # mpirun, for multi-rank runs (also in the guest)
    tcpdump                                                      # the guest tests read the IP TOS --tclass sets
    prometheus                                                   # promtool: the tests check every --prom file
    python3-jsonschema                                           # jsonschema: the tests' records against results/schemas
    curl ca-certificates                                         # rustup
)
RUST_COMPONENTS=(rustfmt clippy)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { printf 'setup: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

build_image=1
for arg in "$@"; do
    case $arg in
        --no-image) build_image=0 ;;
        -h | --help) sed -n '2,/^set -e/{/^set -e/d; s/^# \{0,1\}//; p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown argument '$arg' (see --help)" ;;
    esac
done

# ------------------------------------------------------------------------ packages
install_packages() {
    local installed missing=() p sudo=() log
    if ! command -v dpkg-query > /dev/null || ! command -v apt-get > /dev/null; then
        die "no dpkg-query/apt-get: this script expects Debian 12"
    fi
    if ! grep -qs '^VERSION_ID="12"' /etc/os-release || ! grep -qs '^ID=debian' /etc/os-release; then
        say "warning: this is not Debian 12; trying anyway"
    fi
    installed=" $(dpkg-query -W -f='${Package}:${db:Status-Status} ' "${PKGS[@]}" 2> /dev/null || true)"
    for p in "${PKGS[@]}"; do
        [[ $installed == *" $p:installed "* ]] || missing+=("$p")
    done
    [ ${#missing[@]} -gt 0 ] || return 0

    if [ "$(id -u)" != 0 ]; then
        command -v sudo > /dev/null || die "missing packages: ${missing[*]}; run this script as root (no sudo here)"
        sudo=(sudo)
    fi
    say "installing: ${missing[*]}"
    log=$(mktemp)
    if ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q \
            && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}"; } > "$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        die "apt-get failed"
    fi
    rm -f "$log"
}

# ------------------------------------------------------------------------ Rust
setup_rust() {
    local c have missing=()
    # a rustup installation that is not on PATH yet (e.g. right after an earlier run)
    if ! command -v cargo > /dev/null && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
        export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
    fi
    if ! command -v cargo > /dev/null; then
        say "installing Rust (rustup, stable, with ${RUST_COMPONENTS[*]}) into ${CARGO_HOME:-$HOME/.cargo}"
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
            | sh -s -- -y -q --profile minimal \
                --component "$(IFS=,; echo "${RUST_COMPONENTS[*]}")" > /dev/null \
            || die "rustup failed"
        export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
        say "Rust installed: $(cargo --version); add ${CARGO_HOME:-$HOME/.cargo}/bin to PATH (. \"${CARGO_HOME:-$HOME/.cargo}/env\")"
        return 0
    fi
    command -v rustup > /dev/null || return 0   # a distribution cargo: leave it alone
    have=" $(rustup component list --installed 2> /dev/null | tr '\n' ' ')"
    for c in "${RUST_COMPONENTS[@]}"; do
        [[ $have == *" $c-"* ]] || missing+=("$c")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "adding Rust components: ${missing[*]}"
        rustup -q component add "${missing[@]}" || die "rustup component add failed"
    fi
}

install_packages
setup_rust
if [ "$build_image" = 1 ]; then
    # quiet when the image is already there; it says so when it builds one
    "$here/rxe-vm.sh" --build-only || die "building the soft-RoCE guest image failed"
fi
