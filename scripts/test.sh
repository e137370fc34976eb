#!/usr/bin/env bash
# scripts/test.sh - every check CI runs, in order:
#   1. cargo fmt --check
#   2. cargo clippy --all-targets -D warnings
#   3. unit, doc and host-side integration tests (tests that need a verbs device say they
#      were skipped and why)
#   4. the criterion benches build and run each bench once, in test mode (debug build, the
#      same dependencies as step 3: no release build in CI)
#   5. the packages: scripts/package-test.sh builds the x86_64 and aarch64 tarballs, .debs
#      and .rpms (quick profile) and checks them: the glibc floor, the aarch64 binary under
#      qemu-user, what each package holds, the .deb installed here and removed
#   6. the integration tests named tests/guest_*.rs, built here, run inside the soft-RoCE guest
#      (scripts/rxe-vm.sh) with RDMABENCH_REQUIRE_RDMA=1, so a missing device fails them
#   7. every record the tests read (kept in target/test-records), and every record stored
#      under results/, validated against results/schemas/ (scripts/check-records.sh)
#
# Usage: scripts/test.sh [--no-guest] [--no-package]   (they skip steps 6 and 5)
# Needs what scripts/setup.sh --packaging installs. Exit status: 0 when everything passed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x "$(command -v cargo)" ] || . "$HOME/.cargo/env"

guest=1
package=1
for arg in "$@"; do
    case "$arg" in
        --no-guest) guest=0 ;;
        --no-package) package=0 ;;
        -h|--help) sed -n '2,/^set -e/{/^set -e/d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
        *) echo "scripts/test.sh: unknown option '$arg' (valid: --no-guest, --no-package, --help)" >&2; exit 2 ;;
    esac
done

# Each step says when it starts, counted from the start of this script (CI's budget is
# spent where the counts jump).
step() { printf '\n==> [%d s] %s\n' "$SECONDS" "$*"; }

# A snapshot that differs fails the test and writes nothing (insta's review files are for a
# person accepting a change: INSTA_UPDATE=always cargo test -p rdmabench, then git diff).
export INSTA_UPDATE=no

# The tests keep a copy of every record they read here (tests/common, keep_record), in the
# guest too; the last step validates them all against the shipped schemas.
export RDMABENCH_KEEP_RECORDS="$PWD/target/test-records"
rm -rf "$RDMABENCH_KEEP_RECORDS"
mkdir -p "$RDMABENCH_KEEP_RECORDS"
export RXE_VM_PASSENV="${RXE_VM_PASSENV:+$RXE_VM_PASSENV }RDMABENCH_KEEP_RECORDS"
check_records() {
    step "records against results/schemas (scripts/check-records.sh)"
    scripts/check-records.sh "$RDMABENCH_KEEP_RECORDS" results
}

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "unit, doc and host-side integration tests"
cargo test --workspace --locked

step "benches: each runs once in test mode"
cargo test --locked -p rdmabench-benches --benches

if [ "$package" = 1 ]; then
    step "packages: build (quick profile) and check (scripts/package-test.sh)"
    scripts/package-test.sh
fi

if [ "$guest" = 0 ]; then
    check_records
    exit 0
fi

step "integration tests inside the soft-RoCE guest"
# The integration tests that need verbs devices live in files named tests/guest_*.rs; they
# run here too (and say they were skipped), and for real in the guest.
mapfile -t bins < <(cargo test --workspace --locked --tests --no-run --message-format=json 2>/dev/null \
    | grep '"kind":\["test"\]' | grep '"target":{[^}]*"name":"guest_' \
    | grep -o '"executable":"[^"]*"' | sed 's/"executable":"\(.*\)"/\1/')
[ "${#bins[@]}" -gt 0 ] || { echo "scripts/test.sh: no integration test binaries found" >&2; exit 1; }
printf '    %s\n' "${bins[@]}"
# The binaries run in RDMABENCH_GUEST_LANES guests at once (default 2; 1: one guest runs
# them all in turn). On a 2-core host two guests took 194 s where one took 304 s
# (guest_latency + guest_gdr). One of four boots of two guests at once once hung before the
# kernel printed anything: rxe-vm.sh now stops a guest that has not started its command
# within RXE_VM_BOOT_LIMIT (120 s) and boots a fresh one. The lanes are balanced by the
# seconds each binary took in a full CI-like run on a 2-core host (2026-12-07, the second such
# run that day: lanes of 1,324 and 1,206 s under the old figures, about 1,265 each under
# these; a binary not listed counts 120). Lines
# are prefixed with the lane. Binaries that need more than two soft-RoCE nodes
# (guest_cluster: four, guest_quick: five, guest_fleet: six) run afterwards in a guest of
# their own with RXE_VM_NODES.
declare -A cost=([guest_fake_gpu]=491 [guest_matrix]=464 [guest_options]=299
    [guest_regression]=293 [guest_soak]=246 [guest_write_bw]=171 [guest_gdr]=119
    [guest_duration]=107 [guest_latency]=89 [guest_harden]=68 [guest_health]=64
    [guest_rails]=49 [guest_faults]=38 [guest_gpu_check]=20 [guest_topo]=11 [guest_dmabuf]=1)
declare -A nodes=([guest_cluster]=4 [guest_quick]=5 [guest_fleet]=6) leaves=([guest_fleet]=2)
lanes=${RDMABENCH_GUEST_LANES:-2}
[[ $lanes =~ ^[1-9]$ ]] || { echo "scripts/test.sh: RDMABENCH_GUEST_LANES must be 1..9" >&2; exit 2; }
node_of() { local n=${1##*/}; echo "${nodes[${n%-*}]:-2}"; }
leaves_of() { local n=${1##*/}; echo "${leaves[${n%-*}]:-1}"; }
two_node=() many_node=()
for b in "${bins[@]}"; do
    if [ "$(node_of "$b")" = 2 ]; then two_node+=("$b"); else many_node+=("$b"); fi
done
lane_bins=() lane_cost=()
for ((l = 0; l < lanes; l++)); do lane_bins[l]='' lane_cost[l]=0; done
# heaviest first, each to the lane with the least so far
while read -r c b; do
    l=0
    for ((k = 1; k < lanes; k++)); do [ "${lane_cost[k]}" -lt "${lane_cost[l]}" ] && l=$k; done
    lane_bins[l]+=" $b" lane_cost[l]=$((lane_cost[l] + c))
done < <(for b in "${two_node[@]}"; do n=${b##*/}; echo "${cost[${n%-*}]:-120} $b"; done | sort -rn)
# LANE NODES LEAVES BIN...: one guest of NODES soft-RoCE nodes on LEAVES leaf switches runs
# the binaries in turn
run_lane() {
    local lane=$1 nodes=$2 leaves=$3
    shift 3
    # (on a busy 2-core machine one lane can take longer than the harness's default 15 minutes)
    RXE_VM_NODES=$nodes RXE_VM_LEAVES=$leaves RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-2400} RDMABENCH_REQUIRE_RDMA=1 \
        scripts/rxe-vm.sh bash -c '
        rc=0
        for t in "$@"; do
            echo "--- $(basename "$t")"
            s=$SECONDS
            "$t" --test-threads=1 || rc=1
            echo "--- $(basename "$t") took $((SECONDS - s)) s"
        done
        exit $rc' rdmabench-guest-tests "$@" 2>&1 | sed -u "s/^/[lane $lane] /"
    return "${PIPESTATUS[0]}"
}
pids=()
for ((l = 0; l < lanes; l++)); do
    [ -n "${lane_bins[l]}" ] || continue
    # shellcheck disable=SC2086 # (a list of paths in target/, no spaces)
    run_lane "$l" 2 1 ${lane_bins[l]} &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
for b in "${many_node[@]}"; do
    run_lane "$(basename "${b%-*}")" "$(node_of "$b")" "$(leaves_of "$b")" "$b" || rc=1
done
step "guest tests done"
[ "$rc" = 0 ] || echo "scripts/test.sh: guest tests failed (see the lines marked FAILED or panicked above)" >&2
check_records || rc=1
exit "$rc"
