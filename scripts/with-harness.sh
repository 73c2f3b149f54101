#!/usr/bin/env bash
# with-harness.sh <moto|localstack> -- <command...>
#
# Starts the real local servers the integration tests need, on 127.0.0.1 and on free ports picked
# for this run, exports their addresses, runs the command, then stops every process it started
# (by pid / own process group) and exits with the command's status (128+N when killed by signal N).
#
#   moto        moto_server (all AWS calls), Step Functions execution switched on and checked.
#   localstack  LocalStack (localstack/start-host.sh) for AWS calls, plus moto for SES v2.
#   always      a private Postfix instance (scripted recipients, see below) and Postfix's
#               smtp-sink on a second port that drops the connection without a reply.
#
# Scripted recipients on $COURIER_SMTP_PORT (Postfix smtpd, check_recipient_access hash map):
#   unknown@courier.test       550 5.1.1 ... User unknown
#   full@courier.test          552 5.2.2 ... mailbox full
#   insufficient@courier.test  452 4.2.2 ... mailbox over quota / insufficient storage
#   busy@courier.test          421 4.7.0 ... try again later (then Postfix closes the connection)
#   greylist@courier.test      450 4.2.0 ... Greylisted, please try again later
#   policy@courier.test        554 5.7.1 ... message rejected by policy
#   slow@courier.test          RCPT reply delayed $COURIER_SMTP_SLOW_SECONDS s, then accepted
#   anything else              accepted; delivered by Postfix virtual(8) into a Maildir, one file
#                              per accepted recipient in $COURIER_SMTP_CAPTURE_DIR (Maildir new/;
#                              files appear atomically; Return-Path, X-Original-To, Delivered-To
#                              and Received headers are prepended to the message as sent).
# On $COURIER_SMTP_DROP_PORT (smtp-sink -q): the connection is closed without a reply after RCPT
#   (any recipient, e.g. drop@courier.test; COURIER_SMTP_DROP_COMMANDS changes the commands).
#
# Exported (also written to $COURIER_HARNESS_DIR/env as `export K=V` lines):
#   AWS_ENDPOINT_URL AWS_ENDPOINT_URL_SESV2 AWS_REGION AWS_DEFAULT_REGION AWS_ACCESS_KEY_ID
#   AWS_SECRET_ACCESS_KEY AWS_EC2_METADATA_DISABLED COURIER_EMULATOR COURIER_MOTO_URL
#   COURIER_LOCALSTACK_URL (localstack only) COURIER_SMTP_HOST COURIER_SMTP_PORT
#   COURIER_SMTP_DROP_PORT COURIER_SMTP_SLOW_PORT COURIER_SMTP_SLOW_SECONDS
#   COURIER_SMTP_CAPTURE_DIR COURIER_SMTP_LOG COURIER_HARNESS_DIR
#
# Inputs (environment): COURIER_HARNESS_DIR (state dir to use, must be empty; default mktemp -d,
# removed after a successful run unless COURIER_HARNESS_KEEP=1), COURIER_SMTP_SLOW_SECONDS (20),
# COURIER_SMTP_DROP_COMMANDS (RCPT), COURIER_MOTO_TIMEOUT (30), COURIER_SMTP_TIMEOUT (30),
# COURIER_LOCALSTACK_TIMEOUT (180), COURIER_HARNESS_SKIP_INSTALL=1 (do not run install-deps.sh),
# COURIER_CACHE (where the moto venv lives, default $REPO/.cache).
# The state dir also holds logs/ (one log per server) and pids ("name pid" per started process).
# Functions below are called through traps and wait_ready "$@", which shellcheck cannot follow.
# shellcheck disable=SC2317
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${COURIER_CACHE:-$REPO/.cache}
POSTFIX_MASTER=/usr/lib/postfix/sbin/master
SMTP_SINK=/usr/sbin/smtp-sink

log() { printf 'harness: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() {
    sed -n '2,3p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# ---------------------------------------------------------------- arguments and preconditions
[ "$#" -ge 1 ] || usage
MODE=$1
shift
case $MODE in moto | localstack) ;; -h | --help) sed -n '2,41p' "$0"; exit 0 ;; *) usage ;; esac
[ "${1:-}" = "--" ] && shift
[ "$#" -ge 1 ] || usage

[ "$(id -u)" -eq 0 ] || die "must run as root (Postfix's master runs as root and drops privileges)"

SLOW_SECONDS=${COURIER_SMTP_SLOW_SECONDS:-20}
[[ $SLOW_SECONDS =~ ^[0-9]+$ ]] || die "COURIER_SMTP_SLOW_SECONDS must be a whole number of seconds"
DROP_COMMANDS=${COURIER_SMTP_DROP_COMMANDS:-RCPT}
MOTO_TIMEOUT=${COURIER_MOTO_TIMEOUT:-30}
SMTP_TIMEOUT=${COURIER_SMTP_TIMEOUT:-30}
LOCALSTACK_TIMEOUT=${COURIER_LOCALSTACK_TIMEOUT:-180}
STOP_TIMEOUT=10

if [ "${COURIER_HARNESS_SKIP_INSTALL:-0}" != 1 ]; then
    components=(smtp moto)
    [ "$MODE" = localstack ] && components+=(localstack)
    "$REPO/scripts/install-deps.sh" "${components[@]}" || die "install-deps.sh ${components[*]} failed"
fi
MOTO_SERVER=$CACHE/venv-moto/bin/moto_server
[ -x "$MOTO_SERVER" ] || die "$MOTO_SERVER missing: run scripts/install-deps.sh moto"
for f in "$POSTFIX_MASTER" "$SMTP_SINK" /usr/sbin/postfix /usr/sbin/postmap; do
    [ -x "$f" ] || die "$f missing: run scripts/install-deps.sh smtp"
done
if [ "$MODE" = localstack ] && [ ! -f "$REPO/localstack/start-host.sh" ]; then
    die "$REPO/localstack/start-host.sh does not exist: LocalStack cannot be started"
fi

# ---------------------------------------------------------------- state
OWN_STATE=0
if [ -n "${COURIER_HARNESS_DIR:-}" ]; then
    STATE=$COURIER_HARNESS_DIR
    mkdir -p "$STATE"
    [ -z "$(ls -A "$STATE")" ] || die "COURIER_HARNESS_DIR=$STATE is not empty (in use, or left from an earlier run)"
else
    STATE=$(mktemp -d "${TMPDIR:-/tmp}/courier-harness.XXXXXX")
    OWN_STATE=1
fi
STATE=$(cd "$STATE" && pwd)
# Postfix's daemons run as user postfix and must be able to traverse into the queue directory.
chmod 755 "$STATE"
LOGS=$STATE/logs
mkdir -p "$LOGS"
: >"$STATE/pids"

SERVER_NAMES=()
SERVER_PIDS=()
CMD_PID=

now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }
secs_since() { local ms=$(($(now_ms) - $1)); printf '%d.%02d' $((ms / 1000)) $((ms % 1000 / 10)); }

# Alive and not a zombie.
proc_alive() {
    local pid=$1 stat rest
    [ -r "/proc/$pid/stat" ] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    rest=${stat##*) }
    [ "${rest%% *}" != Z ]
}

# Pids of live processes in process group $1 (the group our setsid'd server leads).
group_members() {
    local pg=$1 f stat rest fields
    for f in /proc/[0-9]*/stat; do
        stat=$(cat "$f" 2>/dev/null) || continue
        rest=${stat##*) }
        read -r -a fields <<<"$rest"
        # fields: state ppid pgrp ...
        if [ "${fields[2]}" = "$pg" ] && [ "${fields[0]}" != Z ]; then
            f=${f#/proc/}
            echo "${f%/stat}"
        fi
    done
}

# start_server NAME LOGFILE COMMAND...: runs COMMAND in a new session (so it leads its own
# process group and a Ctrl-C in the terminal does not reach it); records its pid.
start_server() {
    local name=$1 logfile=$2 pid
    shift 2
    setsid "$@" >"$logfile" 2>&1 </dev/null &
    pid=$!
    SERVER_NAMES+=("$name")
    SERVER_PIDS+=("$pid")
    printf '%s %s\n' "$name" "$pid" >>"$STATE/pids"
    LAST_PID=$pid
}

# fail_server NAME LOGFILE MESSAGE: report, show the log's tail, exit (the EXIT trap cleans up).
fail_server() {
    local name=$1 logfile=$2 msg=$3 extra
    log "ERROR: $name $msg"
    for extra in "$logfile" "${@:4}"; do
        [ -f "$extra" ] || continue
        log "---- last 40 lines of $extra ----"
        tail -n 40 "$extra" >&2 || true
        log "---- end of $extra ----"
    done
    exit 1
}

# wait_ready NAME PID TIMEOUT LOGFILE CHECK...: poll CHECK until it succeeds.
wait_ready() {
    local name=$1 pid=$2 timeout=$3 logfile=$4 start
    shift 4
    start=$(now_ms)
    while :; do
        if ! proc_alive "$pid"; then
            local rc=0
            wait "$pid" 2>/dev/null || rc=$?
            fail_server "$name" "$logfile" "exited during start-up (exit status $rc)" "${EXTRA_LOGS[@]}"
        fi
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        if [ $(($(now_ms) - start)) -ge $((timeout * 1000)) ]; then
            fail_server "$name" "$logfile" "did not become ready within ${timeout} s" "${EXTRA_LOGS[@]}"
        fi
        sleep 0.1
    done
}
EXTRA_LOGS=()

# Free TCP ports on 127.0.0.1, all distinct (sockets held open until every port is chosen).
pick_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

http_ok() { curl -fsS -o /dev/null --max-time 2 "$1"; }

# An SMTP server on 127.0.0.1:$1 sends a 220 greeting.
smtp_greets() {
    local line=
    { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
    IFS= read -r -t 5 line <&3 || true
    printf 'QUIT\r\n' >&3 2>/dev/null || true
    exec 3>&- 3<&-
    [[ $line == 220* ]]
}

# ---------------------------------------------------------------- stopping
# stop_pid NAME PID: SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL; then the same for whatever
# is left in the process group it leads (Postfix's daemons outlive master by about a second).
STOP_FAILED=0
stop_pid() {
    local name=$1 pid=$2 start pgrp members
    pgrp=$pid
    if proc_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        start=$(now_ms)
        while proc_alive "$pid" && [ $(($(now_ms) - start)) -lt $((STOP_TIMEOUT * 1000)) ]; do
            sleep 0.1
        done
        if proc_alive "$pid"; then
            log "WARNING: $name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT} s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    wait "$pid" 2>/dev/null || true
    start=$(now_ms)
    members=$(group_members "$pgrp")
    while [ -n "$members" ] && [ $(($(now_ms) - start)) -lt $((STOP_TIMEOUT * 1000)) ]; do
        sleep 0.1
        members=$(group_members "$pgrp")
    done
    if [ -n "$members" ]; then
        log "WARNING: $name left processes $(echo "$members" | tr '\n' ' ')in its group; sending SIGKILL"
        kill -KILL -- "-$pgrp" 2>/dev/null || true
        sleep 0.5
        members=$(group_members "$pgrp")
        if [ -n "$members" ]; then
            log "ERROR: could not stop $name's processes: $(echo "$members" | tr '\n' ' ')"
            STOP_FAILED=1
        fi
    fi
}

stop_command() {
    [ -n "$CMD_PID" ] || return 0
    if proc_alive "$CMD_PID"; then
        kill -TERM "$CMD_PID" 2>/dev/null || true
        local start
        start=$(now_ms)
        while proc_alive "$CMD_PID" && [ $(($(now_ms) - start)) -lt $((STOP_TIMEOUT * 1000)) ]; do
            sleep 0.1
        done
        if proc_alive "$CMD_PID"; then
            log "WARNING: the command (pid $CMD_PID) ignored SIGTERM; sending SIGKILL"
            kill -KILL "$CMD_PID" 2>/dev/null || true
        fi
    fi
    wait "$CMD_PID" 2>/dev/null || true
}

cleanup() {
    local rc=$? i
    trap '' INT TERM HUP
    set +e
    stop_command
    for ((i = ${#SERVER_PIDS[@]} - 1; i >= 0; i--)); do
        stop_pid "${SERVER_NAMES[i]}" "${SERVER_PIDS[i]}"
    done
    if [ "${#SERVER_PIDS[@]}" -gt 0 ]; then
        log "stopped ${SERVER_NAMES[*]}"
    fi
    if [ "$STOP_FAILED" -eq 1 ] && [ "$rc" -eq 0 ]; then rc=1; fi
    if [ "$OWN_STATE" -eq 1 ] && [ "$rc" -eq 0 ] && [ "${COURIER_HARNESS_KEEP:-0}" != 1 ]; then
        rm -rf "$STATE"
    else
        log "state, logs and captured mail kept in $STATE"
    fi
    exit "$rc"
}

on_signal() {
    trap '' INT TERM HUP
    log "caught SIG$1; stopping"
    exit "$2" # runs cleanup via the EXIT trap
}

trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

# ---------------------------------------------------------------- servers
read -r MOTO_PORT SMTP_PORT DROP_PORT LS_PORT <<<"$(pick_ports 4)"
HARNESS_START=$(now_ms)

start_moto() {
    local t0 url=http://127.0.0.1:$MOTO_PORT logfile=$LOGS/moto.log
    t0=$(now_ms)
    start_server moto "$logfile" "$MOTO_SERVER" -H 127.0.0.1 -p "$MOTO_PORT"
    wait_ready moto "$LAST_PID" "$MOTO_TIMEOUT" "$logfile" http_ok "$url/moto-api/"
    MOTO_READY_S=$(secs_since "$t0")

    # Step Functions only execute state machines once this is set (after every server start).
    curl -fsS -o /dev/null --max-time 10 -X POST "$url/moto-api/config" \
        -H 'Content-Type: application/json' -d '{"stepfunctions":{"execute_state_machine":true}}' \
        || fail_server moto "$logfile" "rejected POST /moto-api/config"
    # GET /moto-api/config does not echo the stepfunctions section, so check the behaviour:
    # a one-state Pass machine must reach SUCCEEDED (it stays RUNNING when execution is off).
    local status
    status=$(moto_probe_sfn "$url") || fail_server moto "$logfile" "Step Functions probe failed: $status"
    [ "$status" = SUCCEEDED ] \
        || fail_server moto "$logfile" "Step Functions execution is not enabled (probe status: $status)"
    curl -fsS -o /dev/null --max-time 10 -X POST "$url/moto-api/reset" \
        || fail_server moto "$logfile" "rejected POST /moto-api/reset"
    log "moto ready in ${MOTO_READY_S} s at $url (Step Functions execution on; checked in $(secs_since "$t0") s total)"
}

moto_probe_sfn() {
    python3 - "$1" <<'EOF'
import json, sys, time, urllib.request
url = sys.argv[1] + "/"
def call(action, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "X-Amz-Target": "AWSStepFunctions." + action,
        "Content-Type": "application/x-amz-json-1.0",
        "Authorization": "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/states/aws4_request, "
                         "SignedHeaders=host, Signature=0",
    })
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)
try:
    definition = {"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}
    sm = call("CreateStateMachine", {"name": "courier-harness-probe", "definition": json.dumps(definition),
                                     "roleArn": "arn:aws:iam::123456789012:role/courier-harness-probe"})
    ex = call("StartExecution", {"stateMachineArn": sm["stateMachineArn"], "name": "probe"})
    status = "?"
    for _ in range(50):
        status = call("DescribeExecution", {"executionArn": ex["executionArn"]})["status"]
        if status != "RUNNING":
            break
        time.sleep(0.1)
    print(status)
except Exception as e:  # noqa: BLE001 - reported by the caller
    print(f"{type(e).__name__}: {e}")
    sys.exit(1)
EOF
}

write_postfix_config() {
    local pf=$STATE/postfix conf=$STATE/postfix/conf nobody_uid nogroup_gid
    nobody_uid=$(id -u nobody)
    nogroup_gid=$(getent group nogroup | cut -d: -f3)
    mkdir -p "$conf" "$pf/queue" "$pf/data" "$STATE/smtp/maildir"/{tmp,new,cur}
    chown postfix "$pf/data"
    chmod 700 "$pf/data"
    chown -R "$nobody_uid:$nogroup_gid" "$STATE/smtp/maildir"

    cat >"$conf/main.cf" <<EOF
# Private Postfix instance of scripts/with-harness.sh (one per run).
compatibility_level = 3.6
queue_directory = $pf/queue
data_directory = $pf/data
mail_owner = postfix
setgid_group = postdrop
maillog_file = $LOGS/postfix.log
maillog_file_prefixes = $LOGS
myhostname = harness.courier.test
mydomain = courier.test
myorigin = \$myhostname
mydestination =
relay_domains =
local_transport = error:local delivery is disabled
alias_maps =
alias_database =
inet_interfaces = loopback-only
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
smtpd_banner = \$myhostname ESMTP courier-harness
biff = no
append_dot_mydomain = no
in_flow_delay = 0
smtpd_error_sleep_time = 0
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
smtpd_recipient_restrictions = check_recipient_access hash:$conf/recipient_access, permit
# Every accepted recipient, of any domain, goes to one Maildir (virtual(8), uid nobody).
virtual_mailbox_domains = static:all
virtual_mailbox_base = $STATE/smtp
virtual_mailbox_maps = static:maildir/
virtual_uid_maps = static:$nobody_uid
virtual_gid_maps = static:$nogroup_gid
EOF

    cat >"$conf/master.cf" <<EOF
# service type  private unpriv  chroot  wakeup  maxproc command
127.0.0.1:$SMTP_PORT inet n - n - - smtpd
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
virtual   unix  -       n       n       -       -       virtual
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
EOF

    # Postfix's replies become "<CODE> <DSN> <rcpt>: Recipient address rejected: <text>".
    cat >"$conf/recipient_access" <<EOF
unknown@courier.test        550 5.1.1 User unknown
full@courier.test           552 5.2.2 mailbox full
insufficient@courier.test   452 4.2.2 mailbox over quota / insufficient storage
busy@courier.test           421 4.7.0 try again later
greylist@courier.test       450 4.2.0 Greylisted, please try again later
policy@courier.test         554 5.7.1 message rejected by policy
slow@courier.test           sleep $SLOW_SECONDS, permit
EOF
    # Postfix re-reads a file modified in the last second until it "settles" (0.3 s naps, about
    # 2.5 s here); back-dating our freshly written files skips that wait.
    touch -d '1 minute ago' "$conf/main.cf" "$conf/master.cf" "$conf/recipient_access"
    postmap -c "$conf" "hash:$conf/recipient_access" >>"$LOGS/postfix-setup.log" 2>&1 \
        || fail_server postfix "$LOGS/postfix-setup.log" "postmap failed"
    # Creates the queue's subdirectories with Postfix's own owners and modes, and checks the rest.
    postfix -c "$conf" check >>"$LOGS/postfix-setup.log" 2>&1 \
        || fail_server postfix "$LOGS/postfix-setup.log" "'postfix check' failed" "$LOGS/postfix.log"
}

start_postfix() {
    local t0 logfile=$LOGS/postfix-master.log
    t0=$(now_ms)
    write_postfix_config
    EXTRA_LOGS=("$LOGS/postfix.log")
    start_server postfix "$logfile" "$POSTFIX_MASTER" -d -c "$STATE/postfix/conf"
    wait_ready postfix "$LAST_PID" "$SMTP_TIMEOUT" "$logfile" smtp_greets "$SMTP_PORT"
    EXTRA_LOGS=()
    log "postfix ready in $(secs_since "$t0") s at 127.0.0.1:$SMTP_PORT (log $LOGS/postfix.log)"
}

start_drop_sink() {
    local t0 logfile=$LOGS/smtp-sink-drop.log
    t0=$(now_ms)
    start_server smtp-sink-drop "$logfile" "$SMTP_SINK" -4 -u nobody -h drop.courier.test \
        -q "$DROP_COMMANDS" "127.0.0.1:$DROP_PORT" 64
    wait_ready smtp-sink-drop "$LAST_PID" "$SMTP_TIMEOUT" "$logfile" smtp_greets "$DROP_PORT"
    log "smtp-sink (drops after $DROP_COMMANDS) ready in $(secs_since "$t0") s at 127.0.0.1:$DROP_PORT"
}

start_localstack() {
    local t0 url=http://127.0.0.1:$LS_PORT logfile=$LOGS/localstack.log
    t0=$(now_ms)
    mkdir -p "$STATE/localstack"
    start_server localstack "$logfile" bash "$REPO/localstack/start-host.sh" "$LS_PORT" "$STATE/localstack"
    wait_ready localstack "$LAST_PID" "$LOCALSTACK_TIMEOUT" "$logfile" http_ok "$url/_localstack/health"
    log "localstack ready in $(secs_since "$t0") s at $url"
}

start_postfix
start_drop_sink
start_moto
[ "$MODE" = localstack ] && start_localstack

# ---------------------------------------------------------------- environment
MOTO_URL=http://127.0.0.1:$MOTO_PORT
unset AWS_SESSION_TOKEN AWS_PROFILE AWS_DEFAULT_PROFILE
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_EC2_METADATA_DISABLED=true
export COURIER_EMULATOR=$MODE COURIER_MOTO_URL=$MOTO_URL
# SES v2 always goes to moto (LocalStack's community edition has no SES v2).
export AWS_ENDPOINT_URL_SESV2=$MOTO_URL
if [ "$MODE" = localstack ]; then
    export AWS_ENDPOINT_URL=http://127.0.0.1:$LS_PORT COURIER_LOCALSTACK_URL=http://127.0.0.1:$LS_PORT
else
    export AWS_ENDPOINT_URL=$MOTO_URL
    unset COURIER_LOCALSTACK_URL
fi
export COURIER_SMTP_HOST=127.0.0.1 COURIER_SMTP_PORT=$SMTP_PORT COURIER_SMTP_DROP_PORT=$DROP_PORT
export COURIER_SMTP_SLOW_PORT=$SMTP_PORT COURIER_SMTP_SLOW_SECONDS=$SLOW_SECONDS
export COURIER_SMTP_CAPTURE_DIR=$STATE/smtp/maildir/new COURIER_SMTP_LOG=$LOGS/postfix.log
export COURIER_HARNESS_DIR=$STATE

ENV_VARS=(AWS_ENDPOINT_URL AWS_ENDPOINT_URL_SESV2 AWS_REGION AWS_DEFAULT_REGION AWS_ACCESS_KEY_ID
    AWS_SECRET_ACCESS_KEY AWS_EC2_METADATA_DISABLED COURIER_EMULATOR COURIER_MOTO_URL
    COURIER_SMTP_HOST COURIER_SMTP_PORT COURIER_SMTP_DROP_PORT COURIER_SMTP_SLOW_PORT
    COURIER_SMTP_SLOW_SECONDS COURIER_SMTP_CAPTURE_DIR COURIER_SMTP_LOG COURIER_HARNESS_DIR)
[ "$MODE" = localstack ] && ENV_VARS+=(COURIER_LOCALSTACK_URL)
{
    for v in "${ENV_VARS[@]}"; do printf 'export %s=%q\n' "$v" "${!v}"; done
} >"$STATE/env.tmp"
mv "$STATE/env.tmp" "$STATE/env"
log "all servers ready in $(secs_since "$HARNESS_START") s; environment in $STATE/env"

# ---------------------------------------------------------------- the command
# Run in the background so SIGTERM/SIGINT reach our traps at once; keep the caller's stdin.
"$@" <&0 &
CMD_PID=$!
printf 'command %s\n' "$CMD_PID" >>"$STATE/pids"
CMD_STATUS=0
wait "$CMD_PID" || CMD_STATUS=$?
CMD_PID=
exit "$CMD_STATUS"
