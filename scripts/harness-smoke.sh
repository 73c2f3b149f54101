#!/usr/bin/env bash
# harness-smoke.sh: checks scripts/with-harness.sh end to end.
#
# For each mode (moto, plus localstack when localstack/start-host.sh exists; override with
# COURIER_SMOKE_MODES="moto localstack") it starts the harness twice in a row and, inside, curls
# the endpoints and sends mail with swaks (one accepted and captured, one rejected, one dropped,
# one timed out on the slow recipient). It also checks that two runs side by side do not
# collide, that the command's exit status comes back, that SIGTERM and SIGINT stop everything,
# and that a server that does not become ready fails the run with its log. After every run it
# checks by pid (and process group) that nothing the harness started is still alive.
# Ends with "N passed, N failed"; exit status 0 only when nothing failed.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
HARNESS=$REPO/scripts/with-harness.sh
WORK=$(mktemp -d "${TMPDIR:-/tmp}/courier-smoke.XXXXXX")
chmod 755 "$WORK" # Postfix's daemons (user postfix) must reach the state dirs inside
PASSED=0
FAILED=0
RUN=0

log() { printf 'smoke: %s\n' "$*" >&2; }
pass() { PASSED=$((PASSED + 1)); log "PASS $*"; }
fail() { FAILED=$((FAILED + 1)); log "FAIL $*"; }

if [ -n "${COURIER_SMOKE_MODES:-}" ]; then
    read -r -a MODES <<<"$COURIER_SMOKE_MODES"
else
    MODES=(moto)
    if [ -f "$REPO/localstack/start-host.sh" ]; then
        MODES+=(localstack)
    else
        log "localstack/start-host.sh does not exist: LocalStack mode not checked"
    fi
fi

# Install once up front so the timed runs below measure start-up only.
components=(smtp moto)
for m in "${MODES[@]}"; do [ "$m" = localstack ] && components+=(localstack); done
"$REPO/scripts/install-deps.sh" "${components[@]}"
export COURIER_HARNESS_SKIP_INSTALL=1

proc_alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

group_alive() {
    local pg=$1 f stat fields
    for f in /proc/[0-9]*/stat; do
        stat=$(cat "$f" 2>/dev/null) || continue
        stat=${stat##*) }
        read -r -a fields <<<"$stat"
        if [ "${fields[2]}" = "$pg" ] && [ "${fields[0]}" != Z ]; then return 0; fi
    done
    return 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# check_stopped LABEL STATE_DIR: every pid in STATE_DIR/pids is gone, with its process group,
# and no port from STATE_DIR/env still accepts connections.
check_stopped() {
    local label=$1 dir=$2 name pid bad=0 var port
    if [ ! -s "$dir/pids" ]; then
        fail "$label: $dir/pids is missing or empty"
        return
    fi
    while read -r name pid; do
        if proc_alive "$pid"; then
            fail "$label: $name (pid $pid) is still alive"
            bad=1
        elif [ "$name" != command ] && [[ $name != */child ]] && group_alive "$pid"; then
            fail "$label: processes of $name's group $pid are still alive"
            bad=1
        fi
    done <"$dir/pids"
    if [ -f "$dir/env" ]; then
        for var in COURIER_SMTP_PORT COURIER_SMTP_DROP_PORT; do
            port=$(sed -n "s/^export $var=//p" "$dir/env")
            if [ -n "$port" ] && port_open "$port"; then
                fail "$label: port $port ($var) still accepts connections"
                bad=1
            fi
        done
        port=$(sed -n 's|^export COURIER_MOTO_URL=http://127.0.0.1:||p' "$dir/env")
        if [ -n "$port" ] && port_open "$port"; then
            fail "$label: moto's port $port still accepts connections"
            bad=1
        fi
    fi
    [ "$bad" -eq 1 ] || pass "$label: all $(wc -l <"$dir/pids") started processes are gone ($(cut -d' ' -f1 "$dir/pids" | sort | uniq -c | awk '{printf "%s%s ", $2, ($1 > 1 ? " x" $1 : "")}'))"
}

# The command run inside the harness.
INNER=$WORK/inner.sh
cat >"$INNER" <<'EOF'
#!/usr/bin/env bash
set -euo pipefail
say() { printf 'inner: %s\n' "$*" >&2; }
srv=$COURIER_SMTP_HOST:$COURIER_SMTP_PORT
tag=$(basename "$COURIER_HARNESS_DIR")

curl -fsS -o /dev/null --max-time 10 "$COURIER_MOTO_URL/moto-api/data.json"
if [ "$COURIER_EMULATOR" = localstack ]; then
    curl -fsS --max-time 10 "$AWS_ENDPOINT_URL/_localstack/health" >/dev/null
else
    curl -fsS -o /dev/null --max-time 10 "$AWS_ENDPOINT_URL/moto-api/"
fi
say "endpoints answer: AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL AWS_ENDPOINT_URL_SESV2=$AWS_ENDPOINT_URL_SESV2"

rcpt=ok-$tag@courier.test
out=$(swaks --to "$rcpt" --from sender@courier.test --server "$srv" --timeout 10 2>&1) || { echo "$out"; exit 1; }
grep -q '^<-  250 2.0.0 Ok: queued' <<<"$out" || { echo "$out"; exit 1; }
for _ in $(seq 50); do
    if grep -lqs "^Delivered-To: $rcpt" "$COURIER_SMTP_CAPTURE_DIR"/*; then break; fi
    sleep 0.1
done
file=$(grep -ls "^Delivered-To: $rcpt" "$COURIER_SMTP_CAPTURE_DIR"/*) || { say "no capture file for $rcpt"; exit 1; }
say "accepted: $(grep '^<-  250 2.0.0' <<<"$out"); captured in $file"

rc=0
out=$(swaks --to unknown@courier.test --server "$srv" --timeout 10 2>&1) || rc=$?
line=$(grep '^<\*\* ' <<<"$out" || true)
[ "$rc" -ne 0 ] && [ "$line" = '<** 550 5.1.1 <unknown@courier.test>: Recipient address rejected: User unknown' ] \
    || { echo "$out"; exit 1; }
say "rejected: $line"

rc=0
out=$(swaks --to drop@courier.test --server "$COURIER_SMTP_HOST:$COURIER_SMTP_DROP_PORT" --timeout 10 2>&1) || rc=$?
grep -q 'Remote host closed connection unexpectedly' <<<"$out" || { echo "$out"; exit 1; }
say "dropped: $(grep '^\*\*\*' <<<"$out")"

rc=0
out=$(swaks --to slow@courier.test --server "$COURIER_SMTP_HOST:$COURIER_SMTP_SLOW_PORT" --timeout 1 2>&1) || rc=$?
grep -q 'Timeout (1 secs) waiting for server response' <<<"$out" || { echo "$out"; exit 1; }
say "slow: client timed out after 1 s (server delays ${COURIER_SMTP_SLOW_SECONDS} s)"
EOF
chmod +x "$INNER"

# run_ok LABEL MODE: harness + inner checks in a fresh state dir.
run_ok() {
    local label=$1 mode=$2 dir rc=0 t0
    RUN=$((RUN + 1))
    dir=$WORK/run$RUN
    t0=$(date +%s.%N)
    COURIER_SMTP_SLOW_SECONDS=3 COURIER_HARNESS_DIR=$dir "$HARNESS" "$mode" -- "$INNER" || rc=$?
    if [ "$rc" -eq 0 ]; then
        pass "$label: harness and inner checks passed ($(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)") s in all)"
    else
        fail "$label: exit status $rc (logs in $dir/logs)"
    fi
    check_stopped "$label" "$dir"
}

# start_bg DIR MODE RESET_SIGINT COMMAND...: harness in the background; sets BG_PID.
start_bg() {
    local dir=$1 mode=$2 reset=$3
    shift 3
    if [ "$reset" = 1 ]; then
        # Background jobs of a non-interactive shell ignore SIGINT, and bash cannot trap a signal
        # ignored on entry: restore the default first, as a terminal's Ctrl-C would find it.
        COURIER_HARNESS_DIR=$dir python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$HARNESS" "$mode" -- "$@" &
    else
        COURIER_HARNESS_DIR=$dir "$HARNESS" "$mode" -- "$@" &
    fi
    BG_PID=$!
}

wait_for_env() {
    local dir=$1 pid=$2
    for _ in $(seq 600); do
        [ -f "$dir/env" ] && return 0
        proc_alive "$pid" || return 1
        sleep 0.1
    done
    return 1
}

# signal_test LABEL MODE SIGNAL EXPECTED_STATUS
signal_test() {
    local label=$1 mode=$2 sig=$3 want=$4 dir rc=0 reset=0
    RUN=$((RUN + 1))
    dir=$WORK/run$RUN
    [ "$sig" = INT ] && reset=1
    start_bg "$dir" "$mode" "$reset" sleep 600
    if ! wait_for_env "$dir" "$BG_PID"; then
        fail "$label: harness did not come up"
        kill -TERM "$BG_PID" 2>/dev/null || true
    else
        kill "-$sig" "$BG_PID"
    fi
    wait "$BG_PID" || rc=$?
    if [ "$rc" -eq "$want" ]; then pass "$label: harness exited $rc after SIG$sig"; else fail "$label: exit status $rc, wanted $want"; fi
    check_stopped "$label" "$dir"
}

for mode in "${MODES[@]}"; do
    run_ok "$mode run 1" "$mode"
    run_ok "$mode run 2" "$mode"
done

# Two runs side by side on one machine.
RUN=$((RUN + 1)); d1=$WORK/run$RUN
RUN=$((RUN + 1)); d2=$WORK/run$RUN
rc1=0; rc2=0
COURIER_SMTP_SLOW_SECONDS=3 COURIER_HARNESS_DIR=$d1 "$HARNESS" moto -- "$INNER" 2>"$WORK/concurrent1.log" & p1=$!
COURIER_SMTP_SLOW_SECONDS=3 COURIER_HARNESS_DIR=$d2 "$HARNESS" moto -- "$INNER" 2>"$WORK/concurrent2.log" & p2=$!
wait "$p1" || rc1=$?
wait "$p2" || rc2=$?
if [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ]; then
    pass "two concurrent moto runs (ports $(sed -n 's/^export COURIER_SMTP_PORT=//p' "$d1/env") and $(sed -n 's/^export COURIER_SMTP_PORT=//p' "$d2/env"))"
else
    fail "concurrent runs exited $rc1 and $rc2"
    cat "$WORK/concurrent1.log" "$WORK/concurrent2.log" >&2
fi
check_stopped "concurrent run A" "$d1"
check_stopped "concurrent run B" "$d2"

# The command's exit status comes back.
RUN=$((RUN + 1)); dir=$WORK/run$RUN; rc=0
COURIER_HARNESS_DIR=$dir "$HARNESS" moto -- sh -c 'exit 7' 2>/dev/null || rc=$?
if [ "$rc" -eq 7 ]; then pass "command status 7 returned"; else fail "command status: got $rc, wanted 7"; fi
check_stopped "status run" "$dir"

signal_test "SIGTERM" moto TERM 143
signal_test "SIGINT" moto INT 130
for m in "${MODES[@]}"; do
    [ "$m" = localstack ] && signal_test "SIGTERM (localstack)" localstack TERM 143
done

# A server that is not ready in time fails the run, with its log, and nothing is left behind.
RUN=$((RUN + 1)); dir=$WORK/run$RUN; rc=0
COURIER_MOTO_TIMEOUT=0 COURIER_HARNESS_DIR=$dir "$HARNESS" moto -- true 2>"$WORK/failstart.log" || rc=$?
if [ "$rc" -ne 0 ] && grep -q 'moto did not become ready within 0 s' "$WORK/failstart.log" \
    && grep -q 'last 40 lines of .*moto.log' "$WORK/failstart.log"; then
    pass "start-up failure reported (exit $rc): $(grep 'ERROR' "$WORK/failstart.log")"
else
    fail "start-up failure not reported as expected (exit $rc)"
    cat "$WORK/failstart.log" >&2
fi
check_stopped "failed start" "$dir"

if [ "$FAILED" -eq 0 ]; then
    rm -rf "$WORK"
else
    log "state dirs and logs kept in $WORK"
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
