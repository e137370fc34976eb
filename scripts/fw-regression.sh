#!/usr/bin/env bash
# fw-regression.sh - did the new NIC firmware (driver, kernel, cable, switch config) make
# anything slower? Runs the standard suite between two nodes with repetitions, stores every
# record under results/, and compares each against a named baseline.
#
# Usage:
#   scripts/fw-regression.sh [OPTIONS] SERVER CLIENT [extra rdmabench options, e.g. -x 3]
#
#   SERVER, CLIENT       as for scripts/two-node.sh: ssh destinations, or local:DEV
#
# Options:
#   --baseline NAME      compare against results/baselines/NAME/<test>.json (missing tests
#                        are reported, not compared)
#   --save-baseline NAME store this run's records as baseline NAME (for the next firmware)
#   --repeat N           repetitions of every test (default 5); compare needs several to
#                        tell a change from noise
#   --label LABEL        results/LABEL/ for the records (default: fw-regression)
#   --results DIR        the results folder (default: results)
#   --server-addr ADDR   passed to two-node.sh
#   --quick              short runs (one size per bandwidth test, few iterations) for CI and
#                        the soft-RoCE guest, instead of the full sweeps
#   -h, --help           print this text
#
# The suite: write-bw, read-bw and send-bw sweeps (-a), write-lat and send-lat.
# The report (markdown, one compare table per test) is printed and saved as
# RESULTS/LABEL/<date>-fw-regression.md.
#
# Exit status: 0 nothing regressed; 3 something regressed (the report says what); 1 a run
# or a comparison failed; 2 bad usage.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/.." || exit 1

usage() { sed -n '2,/^[^#]/{/^[^#]/d; s/^# \{0,1\}//; p}' "${BASH_SOURCE[0]}"; }
die() { echo "fw-regression.sh: $*" >&2; exit "${2:-1}"; }

baseline="" save="" repeat=5 label=fw-regression results=results quick=0 two_node_opts=()
while [ $# -gt 0 ]; do
    case $1 in
        --baseline) [ $# -ge 2 ] || die "--baseline needs a NAME" 2; baseline=$2; shift 2 ;;
        --save-baseline) [ $# -ge 2 ] || die "--save-baseline needs a NAME" 2; save=$2; shift 2 ;;
        --repeat) [ $# -ge 2 ] || die "--repeat needs a number" 2; repeat=$2; shift 2 ;;
        --label) [ $# -ge 2 ] || die "--label needs a LABEL" 2; label=$2; shift 2 ;;
        --results) [ $# -ge 2 ] || die "--results needs a DIR" 2; results=$2; shift 2 ;;
        --server-addr) [ $# -ge 2 ] || die "--server-addr needs an ADDR" 2; two_node_opts+=(--server-addr "$2"); shift 2 ;;
        --quick) quick=1; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option '$1' (see --help)" 2 ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || die "give SERVER and CLIENT (see --help)" 2
server=$1 client=$2; shift 2
[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "--repeat '$repeat' is not a positive number" 2
for name in "$baseline" "$save" "$label"; do
    [[ -z $name || $name =~ ^[A-Za-z0-9._-]+$ ]] || die "'$name' is not a plain name (letters, digits, . _ -)" 2
done

bin=${RDMABENCH_BIN:-$PWD/target/release/rdmabench}
if [ ! -x "$bin" ] && [ -z "${RDMABENCH_BIN:-}" ]; then
    cargo build --release --locked --quiet -p rdmabench || die "building rdmabench failed"
fi
export RDMABENCH_BIN=$bin

if [ "$quick" = 1 ]; then
    bw_args=(-s 64K -n 200 -t 16) lat_args=(-n 200)
else
    bw_args=(-a) lat_args=()
fi
suite=(write-bw read-bw send-bw write-lat send-lat)

stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
out_dir=$results/$label
mkdir -p "$out_dir" || die "cannot create $out_dir"
report=$out_dir/$stamp-fw-regression.md
{
    echo "# Firmware regression check, $stamp"
    echo
    echo "Server \`$server\`, client \`$client\`, $repeat repetitions each, baseline \`${baseline:-none}\`."
} > "$report"

status=0
for test in "${suite[@]}"; do
    case $test in *-lat) args=("${lat_args[@]}") ;; *) args=("${bw_args[@]}") ;; esac
    echo "fw-regression: $test" >&2
    before=$(ls "$out_dir"/*-"$test".json 2>/dev/null | sort | tail -n 1)
    if ! "$here/two-node.sh" --test "$test" --label "$label" --results "$results" "${two_node_opts[@]}" \
        "$server" "$client" --repeat "$repeat" "${args[@]}" "$@"; then
        echo "fw-regression: $test failed to run" >&2
        printf '\n## %s\n\nThe run failed; see the output above.\n' "$test" >> "$report"
        status=1
        continue
    fi
    record=$(ls "$out_dir"/*-"$test".json 2>/dev/null | sort | tail -n 1)
    if [ -z "$record" ] || [ "$record" = "$before" ]; then
        echo "fw-regression: $test ran but left no new record in $out_dir" >&2
        status=1
        continue
    fi
    if [ -n "$save" ]; then
        mkdir -p "$results/baselines/$save" && cp "$record" "$results/baselines/$save/$test.json" \
            || { echo "fw-regression: cannot save the baseline for $test" >&2; status=1; }
    fi
    [ -n "$baseline" ] || continue
    base=$results/baselines/$baseline/$test.json
    printf '\n## %s\n\n' "$test" >> "$report"
    if [ ! -f "$base" ]; then
        echo "No baseline record ($base): not compared." >> "$report"
        continue
    fi
    "$bin" compare "$base" "$record" --markdown >> "$report"
    rc=$?
    case $rc in
        0) ;;
        3) [ "$status" = 1 ] || status=3 ;;
        *) echo "fw-regression: comparing $test failed (exit $rc)" >&2; status=1 ;;
    esac
done

cat "$report"
case $status in
    0) echo "fw-regression: nothing regressed (report: $report)" >&2 ;;
    3) echo "fw-regression: REGRESSION (report: $report)" >&2 ;;
    *) echo "fw-regression: a step failed (report: $report)" >&2 ;;
esac
exit "$status"
