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
#   --baseline NAME      compare against results/baselines/NAME/<test>.json; a baseline
#                        that is not there, or lacks a test of the suite, is refused before
#                        anything runs (exit 2, naming the baselines that are there)
#   --save-baseline NAME store this run's records as baseline NAME (for the next firmware);
#                        one of --baseline and --save-baseline is needed
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
# Exit status: 0 every test compared and nothing regressed (or, with --save-baseline
# alone, the baseline saved); 3 something regressed (the report says what); 1 a run or a
# comparison failed; 2 bad usage, or a baseline that is not there or is not complete.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/.." || exit 1

usage() { sed -n '2,/^[^#]/{/^[^#]/d; s/^# \{0,1\}//; p}' "${BASH_SOURCE[0]}"; }
die() { echo "fw-regression.sh: $1" >&2; exit "${2:-1}"; }

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
suite=(write-bw read-bw send-bw write-lat send-lat)

# The baselines saved under $results/baselines, for a message: "fw-old, lab-2025" or "none".
saved_baselines() {
    local names=() dir
    for dir in "$results"/baselines/*/; do
        [ -d "$dir" ] && names+=("$(basename "$dir")")
    done
    [ ${#names[@]} -gt 0 ] || { echo "none"; return; }
    local list
    list=$(printf '%s, ' "${names[@]}")
    echo "${list%, }"
}

# Nothing runs unless something will be compared or kept: a baseline that is not there, or
# lacks a test, is refused now, not reported as "not compared" after the whole suite.
[ -n "$baseline" ] || [ -n "$save" ] \
    || die "give --baseline NAME (compare with a saved baseline) or --save-baseline NAME (save one); baselines in $results/baselines: $(saved_baselines)" 2
if [ -n "$baseline" ]; then
    [ "$baseline" != "$save" ] || die "--baseline and --save-baseline both name '$baseline': the run would be compared with itself; save under another name" 2
    [ -d "$results/baselines/$baseline" ] \
        || die "no baseline '$baseline' in $results/baselines (baselines there: $(saved_baselines)); save one with --save-baseline NAME before the change" 2
    missing=()
    for test in "${suite[@]}"; do
        [ -f "$results/baselines/$baseline/$test.json" ] || missing+=("$test")
    done
    [ ${#missing[@]} -eq 0 ] \
        || die "baseline '$baseline' has no record of ${missing[*]} ($results/baselines/$baseline/<test>.json); every test of the suite needs one: save the baseline again with --save-baseline" 2
fi

bin=${RDMABENCH_BIN:-$PWD/target/release/rdmabench}
if [ ! -x "$bin" ] && [ -z "${RDMABENCH_BIN:-}" ]; then
    cargo build --release --locked --quiet -p rdmabench || die "building rdmabench failed"
fi
export RDMABENCH_BIN=$bin

# Each baseline record must be one compare reads (against itself), before the suite runs.
if [ -n "$baseline" ]; then
    for test in "${suite[@]}"; do
        base=$results/baselines/$baseline/$test.json
        "$bin" compare "$base" "$base" > /dev/null \
            || die "baseline '$baseline': $base is not a record compare can read (see above)" 2
    done
fi

if [ "$quick" = 1 ]; then
    bw_args=(-s 64K -n 200 -t 16) lat_args=(-n 200)
else
    bw_args=(-a) lat_args=()
fi

stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
out_dir=$results/$label
mkdir -p "$out_dir" || die "cannot create $out_dir"
report=$out_dir/$stamp-fw-regression.md
{
    echo "# Firmware regression check, $stamp"
    echo
    echo "Server \`$server\`, client \`$client\`, $repeat repetitions each, baseline \`${baseline:-none}\`."
} > "$report"

status=0 compared=0
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
    "$bin" compare "$base" "$record" --markdown >> "$report"
    rc=$?
    case $rc in
        0) compared=$((compared + 1)) ;;
        3) compared=$((compared + 1)); [ "$status" = 1 ] || status=3 ;;
        *) echo "fw-regression: comparing $test failed (exit $rc)" >&2; status=1 ;;
    esac
done

cat "$report"
if [ "$status" = 0 ] && [ -z "$baseline" ]; then
    echo "fw-regression: baseline '$save' saved, nothing compared (report: $report)" >&2
elif [ "$status" = 0 ]; then
    echo "fw-regression: $compared of ${#suite[@]} tests compared, nothing regressed (report: $report)" >&2
fi
case $status in
    0) ;;
    3) echo "fw-regression: REGRESSION (report: $report)" >&2 ;;
    *) echo "fw-regression: a step failed (report: $report)" >&2 ;;
esac
exit "$status"
