#!/usr/bin/env bash
# two-node.sh - run one rdmabench test between two nodes and collect both result records.
#
# Usage:
#   scripts/two-node.sh [SCRIPT OPTIONS] SERVER CLIENT [RDMABENCH OPTIONS]
#
#   SERVER, CLIENT   an ssh destination (host or user@host), or local:DEV to run on this
#                    machine with RDMA device DEV (e.g. in the soft-RoCE guest:
#                    scripts/rxe-vm.sh scripts/two-node.sh --results target/two-node \
#                        local:rxe0 local:rxe1 -s 4K -n 100)
#   RDMABENCH OPTIONS the test's options (-s, -a, -n, -q, -t, -x, --mem, ...) as for
#                    `rdmabench TEST`; the client gets all of them, the server those about its
#                    own side (-x/--gid-index, -i/--ib-port, --mem) and -p, --timeout.
#
# Script options (before SERVER):
#   --test TEST          the test to run (default write-bw)
#   --server-addr ADDR   address the client connects to (default: SERVER's host; 127.0.0.1
#                        for local:DEV. In the soft-RoCE guest rxe0's address is 10.251.0.1)
#   --server-dev DEV     -d on the server (default: DEV of local:DEV, else rdmabench's choice)
#   --client-dev DEV     -d on the client (likewise)
#   --label LABEL        store the records under RESULTS/LABEL/ (default: SERVER's host name,
#                        or "local" for local:DEV)
#   --results DIR        the results folder (default: results)
#   --ready-timeout SECS how long the server may take to start listening (default 30)
#   -h, --help           print this text
#
# Steps: start the server on SERVER (in the background, over ssh or locally), wait until it
# listens, run the client on CLIENT, wait for the server to finish, then copy both records to
# RESULTS/LABEL/<date>-<test>.json (the client's) and <date>-<test>.server.json, <date> being
# the UTC start time as YYYY-MM-DDTHHMMSSZ. If the client fails, the server is stopped.
#
# Environment:
#   RDMABENCH_SSH   the ssh command, split on spaces (default "ssh"; e.g. "ssh -p 2222")
#   RDMABENCH_BIN   rdmabench's path on the nodes (default "rdmabench"; for local:DEV, this
#                   checkout's target/release/rdmabench when it exists)
#
# Records on remote nodes are written to a temporary file there and copied back with
# `$RDMABENCH_SSH NODE cat`, so no scp is needed.
#
# Exit status: 0 both sides passed and both records are stored; 1 a step failed (the message
# says which); 2 bad usage.
set -Eeuo pipefail

PROG=two-node.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)

usage() { sed -n '2,/^[^#]/{/^[^#]/d; s/^# \{0,1\}//; p}' "$0"; }
die() { echo "$PROG: error: $*" >&2; exit 1; }
bad_usage() { echo "$PROG: $* (see --help)" >&2; exit 2; }
log() { echo "$PROG: $*" >&2; }
# The server's output, indented, without the pid line node_command adds for the script.
show_server_log() { { grep -v '^two-node: pid ' "$work/server.log" || true; } | sed 's/^/  server: /' >&2; }

test_name=write-bw
server_addr=
server_dev=
client_dev=
label=
results=results
ready_timeout=30

while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --test) [ $# -ge 2 ] || bad_usage "--test needs a value"; test_name=$2; shift 2 ;;
        --server-addr) [ $# -ge 2 ] || bad_usage "--server-addr needs a value"; server_addr=$2; shift 2 ;;
        --server-dev) [ $# -ge 2 ] || bad_usage "--server-dev needs a value"; server_dev=$2; shift 2 ;;
        --client-dev) [ $# -ge 2 ] || bad_usage "--client-dev needs a value"; client_dev=$2; shift 2 ;;
        --label) [ $# -ge 2 ] || bad_usage "--label needs a value"; label=$2; shift 2 ;;
        --results) [ $# -ge 2 ] || bad_usage "--results needs a value"; results=$2; shift 2 ;;
        --ready-timeout) [ $# -ge 2 ] || bad_usage "--ready-timeout needs a value"; ready_timeout=$2; shift 2 ;;
        --) shift; break ;;
        -*) bad_usage "unknown script option '$1' (script options come before SERVER)" ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || bad_usage "give SERVER and CLIENT (an ssh destination or local:DEV each)"
server=$1
client=$2
shift 2
case "$ready_timeout" in ''|*[!0-9]*) bad_usage "--ready-timeout '$ready_timeout' is not a number of seconds" ;; esac
case "$test_name" in
    write-bw|read-bw|send-bw|atomic-bw|write-lat|read-lat|send-lat|atomic-lat) ;;
    *) bad_usage "--test '$test_name' is not a test (write-bw read-bw send-bw atomic-bw write-lat read-lat send-lat atomic-lat)" ;;
esac
case "$label" in */*|.|..) bad_usage "--label '$label' must be a plain folder name" ;; esac

# The rdmabench options: all go to the client; those about the server's own side go to the
# server too. -d and --json are the script's to set.
client_opts=()
server_opts=()
port_given=0
timeout_given=0
while [ $# -gt 0 ]; do
    opt=$1
    case "$opt" in
        -d|--ib-dev|-d*|--ib-dev=*)
            bad_usage "'$opt': give the devices as local:DEV or with --server-dev/--client-dev" ;;
        --json|--json=*|--csv|--csv=*)
            bad_usage "'$opt': the script writes the records itself (see --results and --label)" ;;
        --loopback|--peer-dev|--peer-dev=*)
            bad_usage "'$opt' runs both sides in one process; use rdmabench directly for that" ;;
        -x|--gid-index|-i|--ib-port|--mem|-p|--port|--timeout)
            [ $# -ge 2 ] || bad_usage "'$opt' needs a value"
            val=$2
            shift 2
            client_opts+=("$opt" "$val")
            case "$opt" in
                -p|--port) port_given=1 ;;
                --timeout) timeout_given=1 ;;
            esac
            server_opts+=("$opt" "$val")
            continue ;;
        --gid-index=*|--ib-port=*|--mem=*|--port=*|--timeout=*|-x?*|-i?*|-p?*)
            client_opts+=("$opt")
            server_opts+=("$opt")
            case "$opt" in
                --port=*|-p?*) port_given=1 ;;
                --timeout=*) timeout_given=1 ;;
            esac
            shift
            continue ;;
        *) client_opts+=("$opt"); shift ;;
    esac
done
# -p and --timeout are given to both sides explicitly, so that they agree.
[ "$port_given" = 1 ] || { client_opts+=(-p 18515); server_opts+=(-p 18515); }
[ "$timeout_given" = 1 ] || { client_opts+=(--timeout 30); server_opts+=(--timeout 30); }

# ---------------------------------------------------------------- nodes
read -r -a SSH <<< "${RDMABENCH_SSH:-ssh}"
[ "${#SSH[@]}" -gt 0 ] || bad_usage "RDMABENCH_SSH is empty"

is_local() { case "$1" in local:*) return 0 ;; *) return 1 ;; esac; }
node_dev() { if is_local "$1"; then echo "${1#local:}"; fi; }
node_host() { local h=${1#*@}; echo "${h%%:*}"; }

if is_local "$server" || is_local "$client"; then
    default_bin=rdmabench
    [ -x "$ROOT/target/release/rdmabench" ] && default_bin=$ROOT/target/release/rdmabench
else
    default_bin=rdmabench
fi
BIN=${RDMABENCH_BIN:-$default_bin}

for n in "$server" "$client"; do
    if is_local "$n"; then
        [ -n "$(node_dev "$n")" ] || bad_usage "'$n': give a device after local:, e.g. local:rxe0"
    elif [ -z "$n" ] || [ "${n#-}" != "$n" ]; then
        bad_usage "'$n' is not an ssh destination or local:DEV"
    fi
done

[ -n "$server_dev" ] || server_dev=$(node_dev "$server")
[ -n "$client_dev" ] || client_dev=$(node_dev "$client")
if [ -z "$server_addr" ]; then
    if is_local "$server"; then server_addr=127.0.0.1; else server_addr=$(node_host "$server"); fi
fi
if [ -z "$label" ]; then
    if is_local "$server"; then label=local; else label=$(node_host "$server"); fi
fi

# The command line of a node, as one shell string: it prints its pid first so that the
# script can stop it (over ssh, killing the local ssh does not always stop the remote side).
node_command() {
    local q
    q=$(printf '%q ' "$BIN" "$@")
    printf '%s' "echo \"two-node: pid \$\$\"; exec $q"
}

# run_on NODE CMD: runs the shell string CMD on NODE.
run_on() {
    if is_local "$1"; then
        bash -c "$2"
    else
        "${SSH[@]}" "$1" "$2"
    fi
}

# A temporary record path on a node.
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
work=$(mktemp -d "${TMPDIR:-/tmp}/two-node.XXXXXX")
remote_json() { if is_local "$1"; then echo "$work/$2.json"; else echo "/tmp/rdmabench-two-node.$stamp.$$.$2.json"; fi; }
server_json=$(remote_json "$server" server)
client_json=$(remote_json "$client" client)

server_pid=
server_bg=
cleanup() {
    local rc=$?
    if [ -n "$server_bg" ] && kill -0 "$server_bg" 2>/dev/null; then
        stop_server
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

stop_server() {
    [ -n "$server_bg" ] || return 0
    log "stopping the server on $server"
    if [ -n "$server_pid" ]; then
        run_on "$server" "kill $server_pid 2>/dev/null || true" || true
    fi
    kill "$server_bg" 2>/dev/null || true
    wait "$server_bg" 2>/dev/null || true
    server_bg=
}

# ---------------------------------------------------------------- server
s_args=("$test_name")
[ -n "$server_dev" ] && s_args+=(-d "$server_dev")
s_args+=("${server_opts[@]}" --json "$server_json")
log "server on $server: $BIN ${s_args[*]}"
run_on "$server" "$(node_command "${s_args[@]}")" > "$work/server.log" 2>&1 < /dev/null &
server_bg=$!

deadline=$((SECONDS + ready_timeout))
while :; do
    if grep -q 'server waiting on' "$work/server.log" 2>/dev/null; then break; fi
    if ! kill -0 "$server_bg" 2>/dev/null; then
        wait "$server_bg" && rc=0 || rc=$?
        server_bg=
        show_server_log
        die "the server on $server exited (status $rc) before it listened; its output is above"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
        show_server_log
        die "the server on $server did not listen within $ready_timeout s (--ready-timeout); its output is above"
    fi
    sleep 0.2
done
server_pid=$(sed -n 's/^two-node: pid \([0-9][0-9]*\)$/\1/p' "$work/server.log" | head -n1)
log "the server listens ($(grep -m1 'server waiting on' "$work/server.log"))"

# ---------------------------------------------------------------- client
c_args=("$test_name" "$server_addr")
[ -n "$client_dev" ] && c_args+=(-d "$client_dev")
c_args+=("${client_opts[@]+"${client_opts[@]}"}" --json "$client_json")
log "client on $client: $BIN ${c_args[*]}"
set +e
run_on "$client" "$(node_command "${c_args[@]}")" < /dev/null 2>&1 | grep --line-buffered -v '^two-node: pid '
client_rc=${PIPESTATUS[0]}
set -e
if [ "$client_rc" != 0 ]; then
    stop_server
    show_server_log
    die "the client on $client failed (status $client_rc); the server was stopped (its output is above)"
fi

# ---------------------------------------------------------------- server's end
deadline=$((SECONDS + 30))
while kill -0 "$server_bg" 2>/dev/null; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        stop_server
        die "the server on $server did not exit within 30 s of the client's end"
    fi
    sleep 0.2
done
wait "$server_bg" && server_rc=0 || server_rc=$?
server_bg=
if [ "$server_rc" != 0 ]; then
    show_server_log
    die "the server on $server failed (status $server_rc); its output is above"
fi

# ---------------------------------------------------------------- records
dest="$results/$label"
mkdir -p "$dest" || die "cannot create the results folder '$dest'"
fetch() { # NODE PATH DEST
    if is_local "$1"; then
        [ -s "$2" ] || die "$3: the record '$2' was not written on $1"
        cp "$2" "$3.tmp" || die "cannot copy '$2' to '$3'"
    else
        "${SSH[@]}" "$1" "cat $(printf '%q' "$2")" > "$3.tmp" \
            || die "cannot copy the record '$2' from $1 (\`${SSH[*]} $1 cat $2\`)"
        "${SSH[@]}" "$1" "rm -f $(printf '%q' "$2")" || log "could not remove '$2' on $1"
        [ -s "$3.tmp" ] || die "the record '$2' on $1 is empty"
    fi
    mv "$3.tmp" "$3" || die "cannot store '$3'"
}
client_out="$dest/$stamp-$test_name.json"
server_out="$dest/$stamp-$test_name.server.json"
fetch "$client" "$client_json" "$client_out"
fetch "$server" "$server_json" "$server_out"
log "stored $client_out (client) and $server_out (server)"
