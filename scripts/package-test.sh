#!/usr/bin/env bash
# scripts/package-test.sh - build the packages and check them the way a cluster node uses them.
#
# Usage: scripts/package-test.sh [--profile quick|release] [--out DIR] [--no-build] [--help]
#
#   1. scripts/package.sh --target all --profile P --out DIR (default: quick, into
#      target/package-test; --no-build checks what DIR holds, e.g. after scripts/package.sh)
#   2. each binary is of its architecture and needs at most glibc 2.28: the newest GLIBC_
#      version among its dynamic symbols (objdump -T)
#   3. the aarch64 binary, under qemu-user, prints what the x86_64 one prints for
#      --version, `ceiling --nic-rate 400G --pcie gen5x16` and `topo --sysfs-root` of the
#      DGX H100 fixture tree
#   4. the tarballs, the .debs (dpkg-deb -c) and the .rpms (rpm -qlp) hold the binary, one
#      man page per command of `rdmabench --help` and the bash, zsh and fish completions,
#      and the packages name their architecture and the verbs libraries they dlopen
#   5. the x86_64 .deb installs here (dpkg -i, as root or through sudo -n): rdmabench
#      --version, man -w rdmabench, man rdmabench-write-bw, and bash completes
#      `rdmabench write-` from the installed completion; then it is removed (dpkg --purge),
#      also when a check failed. Refused while a rdmabench is installed here already.
# Needs what scripts/setup.sh --packaging installs. Prints one line per check and
# 'N passed, N failed'. Exit status: 0 when every check passed, 1 otherwise, 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."

GLIBC_FLOOR=2.28
FIXTURE=crates/topo/tests/fixtures/dgx-h100
profile=quick
out=target/package-test
build=1
while [ $# -gt 0 ]; do
    case $1 in
        --profile) [ $# -ge 2 ] || { echo "package-test: --profile needs a value" >&2; exit 2; }; profile=$2; shift ;;
        --out) [ $# -ge 2 ] || { echo "package-test: --out needs a folder" >&2; exit 2; }; out=$2; shift ;;
        --no-build) build=0 ;;
        -h | --help) sed -n '2,/^set -e/{/^set -e/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
        *) echo "package-test: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

passed=0 failed=0
pass() { printf 'ok   %s\n' "$*"; passed=$((passed + 1)); }
fail() { printf 'FAIL %s\n' "$*"; failed=$((failed + 1)); }
# check WHAT COMMAND...: one check, passed when COMMAND succeeds (its output shown when not)
check() {
    local what=$1 output
    shift
    if output=$("$@" 2>&1); then pass "$what"; else fail "$what"; printf '%s\n' "$output" | sed 's/^/     /'; fi
}

# ARG...: package.sh refuses them with exit 2, naming the valid values
usage_refused() {
    local err rc=0
    err=$(scripts/package.sh "$@" 2>&1) || rc=$?
    echo "$err"
    [ "$rc" = 2 ] && grep -q 'valid: ' <<< "$err"
}
check "package.sh --target sparc64: exit 2, naming the valid targets" usage_refused --target sparc64
check "package.sh --profile fast: exit 2, naming the valid profiles" usage_refused --profile fast
if [ "$build" = 1 ]; then
    scripts/package.sh --target all --profile "$profile" --out "$out" || { echo "package-test: scripts/package.sh failed" >&2; exit 1; }
fi
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
tmp=$(mktemp -d)
installed=0
sudo=()
[ "$(id -u)" = 0 ] || sudo=(sudo -n)
cleanup() {
    [ "$installed" = 0 ] || "${sudo[@]}" dpkg --purge rdmabench > /dev/null || echo "package-test: dpkg --purge rdmabench failed" >&2
    rm -rf "$tmp"
}
trap cleanup EXIT

tarball() { echo "$out/rdmabench-$version-$1-linux.tar.gz"; }
deb_of() { case $1 in x86_64) echo "$out/rdmabench_$version-1_amd64.deb" ;; aarch64) echo "$out/rdmabench_$version-1_arm64.deb" ;; esac; }
rpm_of() { echo "$out/rdmabench-$version-1.$1.rpm"; }
bin_of() { echo "$tmp/rdmabench-$version-$1-linux/bin/rdmabench"; }

for arch in x86_64 aarch64; do
    for f in "$(tarball $arch)" "$(deb_of $arch)" "$(rpm_of $arch)"; do
        [ -s "$f" ] || { echo "package-test: $f is missing (scripts/package.sh writes it)" >&2; exit 1; }
    done
    tar -C "$tmp" -xzf "$(tarball $arch)"
done
x86=$(bin_of x86_64)
arm=$(bin_of aarch64)
run_arm() { qemu-aarch64 -L /usr/aarch64-linux-gnu "$arm" "$@"; }

# ---------------------------------------------------------------- the binaries
# BIN MACHINE: the binary is of that machine (readelf -h) and needs at most glibc $GLIBC_FLOOR
glibc_floor() {
    local bin=$1 want_arch=$2 floor
    readelf -h "$bin" | grep -q "Machine: *$want_arch$" || { readelf -h "$bin" | grep Machine; return 1; }
    floor=$(objdump -T "$bin" | grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' | sed 's/^GLIBC_//' | sort -V -u | tail -1)
    echo "needs glibc $floor"
    [ -n "$floor" ] && [ "$(printf '%s\n' "$floor" "$GLIBC_FLOOR" | sort -V | tail -1)" = "$GLIBC_FLOOR" ]
}
for arch in "x86_64:Advanced Micro Devices X86-64" aarch64:AArch64; do
    bin=$(bin_of "${arch%%:*}")
    floor=$(glibc_floor "$bin" "${arch#*:}" 2>&1 | tail -1) || true
    check "${arch%%:*} binary: $floor (at most $GLIBC_FLOOR)" glibc_floor "$bin" "${arch#*:}"
done

# CMD...: the aarch64 binary under qemu prints what the x86_64 one prints
same_output() {
    local a b
    a=$("$x86" "$@") || { echo "x86_64: '$*' failed"; return 1; }
    b=$(run_arm "$@") || { echo "aarch64: '$*' failed"; return 1; }
    [ -n "$a" ] || { echo "x86_64: '$*' printed nothing"; return 1; }
    diff <(echo "$a") <(echo "$b")
}
check "aarch64 under qemu = x86_64: --version" same_output --version
check "aarch64 under qemu = x86_64: ceiling --nic-rate 400G --pcie gen5x16" same_output ceiling --nic-rate 400G --pcie gen5x16
check "aarch64 under qemu = x86_64: topo --sysfs-root $FIXTURE" same_output topo --sysfs-root "$FIXTURE"

# ---------------------------------------------------------------- what the packages hold
mapfile -t commands < <("$x86" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && /^  [^ ]/ && $1 != "help" {print $1}')
[ "${#commands[@]}" -gt 0 ] || { echo "package-test: no commands in 'rdmabench --help'" >&2; exit 1; }
# PREFIX ZSH-DIR: the files a package must hold, sorted (docs left out)
expected() {
    {
        echo "$1/bin/rdmabench"
        echo "$1/share/man/man1/rdmabench.1.gz"
        printf "$1/share/man/man1/rdmabench-%s.1.gz\n" "${commands[@]}"
        echo "$1/share/bash-completion/completions/rdmabench"
        echo "$1/share/$2/_rdmabench"
        echo "$1/share/fish/vendor_completions.d/rdmabench.fish"
    } | sort
}
# LIST-COMMAND... | holds PREFIX ZSH-DIR: the listed files, less docs and folders, are the expected ones
# (a page for clap's `help` command is neither required nor refused)
holds() { grep -v -e '/$' -e '/share/doc/' -e '/rdmabench-help\.1\.gz$' | sort | diff - <(expected "$1" "$2"); }
tar_list() { tar -tzf "$(tarball "$1")" | sed "s|^rdmabench-$version-$1-linux||"; }
deb_list() { dpkg-deb -c "$(deb_of "$1")" | awk '{print $NF}' | sed -e 's|^\./|/|' -e 's|^\([^/]\)|/\1|'; }
rpm_list() { rpm -qlp "$(rpm_of "$1")" 2> /dev/null; }
tar_holds() { tar_list "$1" | holds '' zsh/site-functions; }
deb_holds() { deb_list "$1" | holds /usr zsh/vendor-completions; }
rpm_holds() { rpm_list "$1" | holds /usr zsh/site-functions; }
# ARCH DEBARCH
deb_fields() {
    local deb dep
    deb=$(deb_of "$1")
    dpkg-deb -f "$deb" Architecture Depends
    [ "$(dpkg-deb -f "$deb" Architecture)" = "$2" ] || return 1
    for dep in "libc6 (>= $GLIBC_FLOOR)" libibverbs1 librdmacm1; do
        dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/^ *//' | grep -qxF "$dep" || return 1
    done
}
rpm_fields() {
    local rpm
    rpm=$(rpm_of "$1")
    rpm -qp --qf '%{ARCH}\n' "$rpm" && rpm -qp --requires "$rpm"
    [ "$(rpm -qp --qf '%{ARCH}' "$rpm")" = "$1" ] && rpm -qp --requires "$rpm" | grep -qx libibverbs \
        && rpm -qp --requires "$rpm" | grep -qx librdmacm
}
for arch in x86_64:amd64 aarch64:arm64; do
    a=${arch%%:*}
    check "$a tarball holds bin/rdmabench, $((${#commands[@]} + 1)) man pages, 3 completions" tar_holds "$a"
    check "$a .deb holds /usr/bin/rdmabench, the man pages, the completions" deb_holds "$a"
    check "$a .rpm holds the same (zsh's in site-functions)" rpm_holds "$a"
    check "$a .deb: Architecture ${arch#*:}, depends on libc6 >= $GLIBC_FLOOR, libibverbs1, librdmacm1" deb_fields "$a" "${arch#*:}"
    check "$a .rpm: arch $a, requires libibverbs and librdmacm" rpm_fields "$a"
done

# ---------------------------------------------------------------- the .deb installed here
deb_status() { dpkg-query -W -f='${db:Status-Status}' rdmabench 2> /dev/null || true; }
there_before=0
[ "$(deb_status)" != installed ] && [ ! -e /usr/bin/rdmabench ] || there_before=1
install_deb() {
    if [ "$there_before" = 1 ]; then
        echo "rdmabench is installed here already (/usr/bin/rdmabench); this test would replace it, then remove it: remove it first (dpkg --purge rdmabench)"
        return 1
    fi
    "${sudo[@]}" dpkg -i "$(deb_of x86_64)"
}
# bash, with the installed completion loaded, completes `rdmabench write-` to every write test
bash_completes() {
    bash -c 'source /usr/share/bash-completion/completions/rdmabench
        f=$(complete -p rdmabench | sed -n "s/.* -F \([^ ]*\) .*/\1/p")
        COMP_WORDS=(rdmabench write-) COMP_CWORD=1 COMP_LINE="rdmabench write-" COMP_POINT=16
        "$f" rdmabench write- rdmabench
        printf "%s\n" "${COMPREPLY[@]}"' | sort | tr '\n' ' ' | tee /dev/stderr | grep -q 'write-bw write-lat'
}
man_page() { man -P cat rdmabench-write-bw 2> /dev/null | head -20 | tee /dev/stderr | grep -q 'write-bw'; }
check "x86_64 .deb installs here (dpkg -i)" install_deb
# whatever dpkg -i left (unpacked, half-configured) is purged on the way out
[ "$there_before" = 1 ] || case $(deb_status) in "" | not-installed) ;; *) installed=1 ;; esac
if [ "$(deb_status)" = installed ] && [ "$there_before" = 0 ]; then
    check "installed: rdmabench --version is the tarball's" diff <(/usr/bin/rdmabench --version) <("$x86" --version)
    check "installed: man -w rdmabench finds /usr/share/man/man1/rdmabench.1.gz" \
        bash -c '[ "$(man -w rdmabench)" = /usr/share/man/man1/rdmabench.1.gz ]'
    check "installed: man rdmabench-write-bw shows the write-bw page" man_page
    check "installed: bash completes 'rdmabench write-' to write-bw and write-lat" bash_completes
fi
printf '%s passed, %s failed\n' "$passed" "$failed"
[ "$failed" = 0 ]
