#!/usr/bin/env bash
# scripts/check-records.sh [DIR|FILE]... - validates rdmabench's JSON records against the
# shipped schemas (results/schemas/), with an independent validator: Debian's
# python3-jsonschema, not the Rust types the schemas are derived from.
#
# Every *.json under the DIRs (and every FILE) whose top-level "schema" is one of
# "rdmabench.result/1", "rdmabench.cluster/1" (the records) or "rdmabench.compare/1",
# "rdmabench.compare.cluster/1" (compare --json) or "rdmabench.health/1",
# "rdmabench.health-expect/1" (health --json, --learn), "rdmabench.counters/1" (counters
# --json) or "rdmabench.triage/1" (triage --json) is checked against its schema; other JSON files are left alone. scripts/test.sh
# runs it on the records the tests read (kept in
# target/test-records) and on the records stored under results/.
# Exit status: 0 when every record is valid (or there was none), 1 when one is not, 2 when
# the validator is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's own Python and its python3-jsonschema (a Python of one's own may come first on PATH).
validator=(/usr/bin/python3 -m jsonschema)
if ! /usr/bin/python3 -c 'import jsonschema' 2> /dev/null; then
    echo "check-records.sh: no jsonschema for /usr/bin/python3 (Debian's python3-jsonschema): run scripts/setup.sh" >&2
    exit 2
fi
declare -A kinds=([rdmabench.result/1]=rdmabench.result-1 [rdmabench.cluster/1]=rdmabench.cluster-1
    [rdmabench.compare/1]=rdmabench.compare-1
    [rdmabench.compare.cluster/1]=rdmabench.compare.cluster-1
    [rdmabench.health/1]=rdmabench.health-1 [rdmabench.health-expect/1]=rdmabench.health-expect-1
    [rdmabench.counters/1]=rdmabench.counters-1 [rdmabench.triage/1]=rdmabench.triage-1)
declare -A files=()
while IFS= read -r -d '' f; do
    # The first "schema" of the file is the record's own (a sweep's pairs hold result
    # records further down).
    kind=$(head -c 400 "$f" | grep -o -m1 '"schema": *"rdmabench\.[a-z.-]*/1"' | head -1 | sed 's/.*"\(rdmabench[^"]*\)"/\1/' || true)
    [ -n "$kind" ] && [ -n "${kinds[$kind]:-}" ] || continue
    files[$kind]+="$f"$'\n'
done < <(find "${@:-results}" -name '*.json' -type f -print0 2> /dev/null)
rc=0
for kind in "${!kinds[@]}"; do
    [ -n "${files[$kind]:-}" ] || continue
    schema="results/schemas/${kinds[$kind]}.schema.json"
    args=()
    n=0
    while IFS= read -r f; do
        [ -n "$f" ] && args+=(-i "$f") && n=$((n + 1))
    done <<< "${files[$kind]}"
    # Each invalid record is named with its errors; the valid ones are counted below.
    set +e
    # (the first 100 lines of them: one wrong field repeats in every size)
    "${validator[@]}" --output pretty "${args[@]}" "$schema" 2>&1 \
        | grep -v -e '^===\[SUCCESS\]' -e 'DeprecationWarning' -e '^ *from jsonschema' | head -100
    valid=$((PIPESTATUS[0] == 0))
    set -e
    if [ "$valid" = 1 ]; then
        echo "check-records.sh: $n $kind record(s) valid against $schema"
    else
        echo "check-records.sh: $kind records that do not match $schema are listed above" >&2
        rc=1
    fi
done
exit "$rc"
