#!/usr/bin/env bash
# scripts/package.sh - build rdmabench's packages for Linux cluster nodes.
#
# Usage: scripts/package.sh [--target x86_64|aarch64|all] [--profile release|quick]
#                           [--out DIR] [--tools-dir] [--help]
#
#   --target T    the architecture to package: x86_64, aarch64 (Grace, Graviton) or all
#                 (default all)
#   --profile P   release (default): the release profile (optimised, thin LTO, line
#                 tables), about 5 minutes a target on a 2-core machine; quick: the same
#                 packages from an unoptimised build without debug information, about 2
#                 minutes a target, to test the packaging itself (CI does): never ship it
#   --out DIR     where the packages go (default target/package)
#   --tools-dir   print the folder that scripts/setup.sh --packaging installs Zig,
#                 cargo-zigbuild, cargo-deb and cargo-generate-rpm into, and exit
#
# Writes into DIR, for each target (ARCH x86_64 or aarch64, DEBARCH amd64 or arm64):
#   rdmabench-VERSION-ARCH-linux.tar.gz   bin/, share/man, share/{bash-completion,zsh,fish},
#                                         share/doc: tar -xzf F -C /usr/local --strip-components=1
#   rdmabench_VERSION-1_DEBARCH.deb       Debian 10+, Ubuntu 20.04+ (cargo-deb)
#   rdmabench-VERSION-1.ARCH.rpm          RHEL/Rocky/Alma 8+, SUSE 15+ (cargo-generate-rpm)
# and prints each file with its size. The packages install /usr/bin/rdmabench, a man page
# per command (/usr/share/man/man1) and bash, zsh and fish completions.
#
# The binaries are built by cargo-zigbuild (Zig from the ziglang PyPI package) against
# glibc 2.28, so they run on RHEL/Rocky 8, Ubuntu 20.04 and anything newer; offline from
# Cargo.lock (after `cargo fetch --locked`, which is skipped with a warning when the
# registry cannot be reached). The man pages and completions come from the binary built
# for this machine's architecture (`rdmabench man`, `rdmabench completions`). The binaries
# keep the release profile's line tables (a panic names its file and line): stripped, the
# x86_64 one would be 7 MB instead of 42.
# Needs what `scripts/setup.sh --packaging` installs. Exit status: 0 when every package
# was written, 1 on a failure, 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x "$(command -v cargo)" ] || . "$HOME/.cargo/env"

TOOLS_DIR=${RDMABENCH_PACKAGING_TOOLS:-${XDG_DATA_HOME:-$HOME/.local/share}/rdmabench/packaging}
GLIBC_FLOOR=2.28
WORK=target/package-work # the generated man pages and completions, the tarballs' trees
# cargo-deb's and cargo-generate-rpm's assets (crates/bench/Cargo.toml) read the generated
# man pages and completions from $WORK/docs.

say() { printf 'package: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
usage_error() { say "$* (see --help)"; exit 2; }

targets=(x86_64 aarch64)
profile=release
out=target/package
while [ $# -gt 0 ]; do
    case $1 in
        --target | --profile | --out)
            [ $# -ge 2 ] || usage_error "$1 needs a value"
            set -- "$1=$2" "${@:3}"
            continue
            ;;
        --target=*)
            case ${1#*=} in
                x86_64 | aarch64) targets=("${1#*=}") ;;
                all) targets=(x86_64 aarch64) ;;
                *) usage_error "--target '${1#*=}' is not a target (valid: x86_64, aarch64, all)" ;;
            esac
            ;;
        --profile=*)
            case ${1#*=} in
                release | quick) profile=${1#*=} ;;
                *) usage_error "--profile '${1#*=}' is not a profile (valid: release, quick)" ;;
            esac
            ;;
        --out=*) out=${1#*=}; [ -n "$out" ] || usage_error "--out needs a folder" ;;
        --tools-dir) echo "$TOOLS_DIR"; exit 0 ;;
        -h | --help) sed -n '2,/^set -e/{/^set -e/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
        *) usage_error "unknown argument '$1'" ;;
    esac
    shift
done

triple() { echo "$1-unknown-linux-gnu"; }
# the files' dates in the packages: the last commit's (or SOURCE_DATE_EPOCH)
source_date() { echo "${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2> /dev/null || date +%s)}"; }
build_dir() { echo "$PWD/target/package-build/$profile"; }
binary() { echo "$(build_dir)/$(triple "$1")/release/rdmabench"; }

check_tools() {
    local missing=() t
    export PATH="$TOOLS_DIR/bin:$PATH"
    for t in cargo-zigbuild cargo-deb cargo-generate-rpm; do
        command -v "$t" > /dev/null || missing+=("$t")
    done
    [ -x /usr/lib/rpm/find-requires ] || missing+=("rpm (its find-requires)")
    command -v zig > /dev/null || python3 -m ziglang version > /dev/null 2>&1 || missing+=("zig (the ziglang Python package)")
    for t in "${targets[@]}"; do
        rustup target list --installed 2> /dev/null | grep -qx "$(triple "$t")" \
            || missing+=("the Rust target $(triple "$t")")
    done
    [ ${#missing[@]} -eq 0 ] || die "missing: $(printf '%s, ' "${missing[@]}" | sed 's/, $//'); scripts/setup.sh --packaging installs them"
}

# The binary for ARCH, built for glibc $GLIBC_FLOOR into target/package-build/PROFILE (its
# own folder: Zig's compilers and the quick profile never mix with the usual builds).
build() {
    local arch=$1 start=$SECONDS quick=()
    if [ "$profile" = quick ]; then
        quick=(CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_LTO=false
            CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 CARGO_PROFILE_RELEASE_DEBUG=false)
    fi
    say "building $arch ($profile, glibc $GLIBC_FLOOR) ..."
    env "${quick[@]}" CARGO_TARGET_DIR="$(build_dir)" cargo zigbuild --release --locked --offline --quiet \
        -p rdmabench --bin rdmabench --target "$(triple "$arch").$GLIBC_FLOOR" \
        || die "the $arch build failed"
    say "built $arch in $((SECONDS - start)) s"
}

# Man pages (gzipped) and completions from the binary GEN into $WORK/docs.
generate_docs() {
    local gen=$1 docs=$WORK/docs shell
    rm -rf "$docs"
    mkdir -p "$docs/man" "$docs/completions"
    "$gen" man "$docs/man" > /dev/null || die "'rdmabench man' failed"
    compgen -G "$docs/man/rdmabench*.1" > /dev/null || die "'rdmabench man' wrote no rdmabench*.1 into $docs/man"
    gzip -9n "$docs"/man/*.1
    "$gen" completions bash > "$docs/completions/rdmabench.bash" || die "'rdmabench completions bash' failed"
    "$gen" completions zsh > "$docs/completions/_rdmabench" || die "'rdmabench completions zsh' failed"
    "$gen" completions fish > "$docs/completions/rdmabench.fish" || die "'rdmabench completions fish' failed"
    for shell in rdmabench.bash _rdmabench rdmabench.fish; do
        [ -s "$docs/completions/$shell" ] || die "the completion script $shell is empty"
    done
}

# The tarball for ARCH: a /usr/local-style tree under rdmabench-VERSION-ARCH-linux/.
tarball() {
    local arch=$1 version=$2 name tree docs=$WORK/docs
    name=rdmabench-$version-$arch-linux
    tree=$WORK/tree/$name
    rm -rf "$tree"
    install -D -m 755 "$(binary "$arch")" "$tree/bin/rdmabench"
    install -d "$tree/share/man/man1"
    install -m 644 "$docs"/man/*.1.gz "$tree/share/man/man1/"
    install -D -m 644 "$docs/completions/rdmabench.bash" "$tree/share/bash-completion/completions/rdmabench"
    install -D -m 644 "$docs/completions/_rdmabench" "$tree/share/zsh/site-functions/_rdmabench"
    install -D -m 644 "$docs/completions/rdmabench.fish" "$tree/share/fish/vendor_completions.d/rdmabench.fish"
    install -D -m 644 README.md "$tree/share/doc/rdmabench/README.md"
    tar -C "$WORK/tree" --sort=name --owner=0 --group=0 --numeric-owner \
        --mtime="@$(source_date)" \
        -cf - "$name" | gzip -9n > "$out/$name.tar.gz"
    echo "$out/$name.tar.gz"
}

deb() {
    local debarch=amd64
    [ "$1" = x86_64 ] || debarch=arm64
    SOURCE_DATE_EPOCH="$(source_date)" CARGO_TARGET_DIR="$(build_dir)" CARGO_NET_OFFLINE=true cargo deb --quiet --no-build --no-strip \
        -p rdmabench --target "$(triple "$1")" --output "$out/" \
        || die "cargo deb failed for $1"
    echo "$out/rdmabench_$2-1_$debarch.deb"
}

# xz: the payload every rpm since RHEL 6 reads; rpm's find-requires reads any ELF's needs
# (cargo-generate-rpm's builtin runs ldd, which cannot run the aarch64 binary)
rpm_package() {
    CARGO_TARGET_DIR="$(build_dir)" CARGO_NET_OFFLINE=true cargo generate-rpm -p crates/bench \
        --target "$(triple "$1")" --auto-req find-requires --payload-compress xz \
        --source-date "$(source_date)" --output "$out/" \
        || die "cargo generate-rpm failed for $1"
    echo "$out/rdmabench-$2-1.$1.rpm"
}

main() {
    local arch host gen version written=() f start=$SECONDS
    check_tools
    mkdir -p "$out" "$WORK"
    if ! cargo fetch --locked --quiet 2> /dev/null; then
        say "warning: cargo fetch failed (no registry?); building from what is already fetched"
    fi
    host=$(uname -m)
    for arch in "${targets[@]}"; do build "$arch"; done
    # the man pages and completions come from a binary that runs here
    if [[ " ${targets[*]} " != *" $host "* ]]; then
        [[ $host == x86_64 || $host == aarch64 ]] || die "no binary runs on this $host machine to write the man pages"
        build "$host"
    fi
    gen=$(binary "$host")
    version=$("$gen" --version | awk '{print $2}')
    [ -n "$version" ] || die "'$gen --version' printed no version"
    generate_docs "$gen"
    for arch in "${targets[@]}"; do
        written+=("$(tarball "$arch" "$version")")
        written+=("$(deb "$arch" "$version")")
        written+=("$(rpm_package "$arch" "$version")")
    done
    say "wrote ($profile profile, $((SECONDS - start)) s):"
    for f in "${written[@]}"; do
        awk -v b="$(stat -c %s "$f")" -v f="$f" 'BEGIN { printf "  %6.1f MiB  %s\n", b / 1048576, f }'
    done
}

main
