#!/usr/bin/env bash
# Self-test of host mode: installs if needed, then ROUNDS times starts two LocalStack instances side
# by side, runs localstack/verify.py against each, stops them with SIGTERM and checks that no
# process of theirs (LocalStack or DynamoDB Local) is left.
#
#   localstack/selftest.sh [ROUNDS] [PORT_A] [PORT_B]      (defaults: 2 4566 4567)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${COURIER_CACHE:-$REPO/.cache}
ROUNDS=${1:-2}
PORTS=("${2:-4566}" "${3:-4567}")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/courier-localstack-selftest.XXXXXX")
PIDS=()

die() { echo "localstack/selftest.sh: FAIL: $*" >&2; exit 1; }
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

"$REPO/localstack/install.sh"

for round in $(seq 1 "$ROUNDS"); do
    PIDS=()
    for i in 0 1; do
        port=${PORTS[$i]} state=$WORK/r$round-$i
        mkdir -p "$state"
        t0=$(now)
        "$REPO/localstack/start-host.sh" "$port" "$state" >"$state.log" 2>&1 &
        PIDS+=("$!")
        until curl -sf "http://127.0.0.1:$port/_localstack/health" >/dev/null 2>&1 \
                && grep -q '^Ready\.' "$state.log"; do
            kill -0 "${PIDS[$i]}" 2>/dev/null || { cat "$state.log" >&2; die "instance on $port exited"; }
            [[ $(elapsed "$t0" | cut -d. -f1) -lt 60 ]] || { cat "$state.log" >&2; die "instance on $port not ready in 60 s"; }
            sleep 0.1
        done
        echo "round $round: instance on :$port ready in $(elapsed "$t0") s"
    done
    for i in 0 1; do
        port=${PORTS[$i]}
        "$CACHE/venv-localstack/bin/python" "$REPO/localstack/verify.py" "http://127.0.0.1:$port" \
            | sed "s/^/round $round :$port: /"
        rss_py=$(ps -o rss= -p "${PIDS[$i]}")
        rss_java=$(pgrep -f -- "$WORK/r$round-$i/" | xargs -r ps -o rss= -p | awk '{s+=$1} END {print s+0}')
        echo "round $round: :$port RSS LocalStack $((rss_py / 1024)) MB, DynamoDB Local $((rss_java / 1024)) MB"
    done
    for i in 0 1; do
        t0=$(now)
        kill -TERM "${PIDS[$i]}"
        wait "${PIDS[$i]}" || true
        echo "round $round: :${PORTS[$i]} stopped in $(elapsed "$t0") s"
    done
    sleep 0.5
    left=$(pgrep -af -- "$WORK/r$round-" || true)
    [[ -z $left ]] || die "processes left after stop: $left"
    for port in "${PORTS[@]}"; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then die "port $port still open"; fi
    done
    echo "round $round: nothing left running"
done
PIDS=()
rm -rf "$WORK"
echo "localstack selftest: $ROUNDS rounds passed"
