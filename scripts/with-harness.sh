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
#   *@throttled.courier.test   450 4.7.28 ... rate limited (a receiving domain that throttles)
#   anything else              accepted; delivered by Postfix virtual(8) into a Maildir, one file
#                              per accepted recipient in $COURIER_SMTP_CAPTURE_DIR (Maildir new/;
#                              files appear atomically; Return-Path, X-Original-To, Delivered-To
#                              and Received headers are prepended to the message as sent).
# On $COURIER_SMTP_DROP_PORT (smtp-sink -q): the connection is closed without a reply after RCPT
#   (any recipient, e.g. drop@courier.test; COURIER_SMTP_DROP_COMMANDS changes the commands).
#   drop@courier.test sent to $COURIER_SMTP_PORT is simply accepted like any other address.
# All replies from $COURIER_SMTP_PORT read "<code> <dsn> <rcpt>: Recipient address rejected: <text>";
# every SMTP event is logged in $COURIER_SMTP_LOG. No STARTTLS, no AUTH.
#
# Exported (also written to $COURIER_HARNESS_DIR/env as `export K=V` lines):
#   AWS_ENDPOINT_URL AWS_ENDPOINT_URL_SESV2 AWS_REGION AWS_DEFAULT_REGION AWS_ACCESS_KEY_ID
#   AWS_SECRET_ACCESS_KEY AWS_EC2_METADATA_DISABLED COURIER_EMULATOR COURIER_MOTO_URL
#   COURIER_LOCALSTACK_URL (localstack only) COURIER_SMTP_HOST COURIER_SMTP_PORT
#   COURIER_SMTP_DROP_PORT COURIER_SMTP_SLOW_PORT COURIER_SMTP_SLOW_SECONDS
#   COURIER_SMTP_CAPTURE_DIR COURIER_SMTP_LOG COURIER_HARNESS_DIR
#   COURIER_POSTFIX_CONF (Postfix's config dir, for a command that restarts Postfix itself) and
#   COURIER_HARNESS_ADOPT (a file: a command that starts a server itself, e.g. the chaos suite's
#   Postfix restart, appends "name pid" lines; those processes are stopped at exit with the rest)
#
# Inputs (environment): COURIER_HARNESS_DIR (state dir to use, must be empty; default mktemp -d,
# removed after a successful run unless COURIER_HARNESS_KEEP=1), COURIER_SMTP_SLOW_SECONDS (20),
# COURIER_SMTP_DROP_COMMANDS (RCPT), COURIER_MOTO_TIMEOUT (30), COURIER_SMTP_TIMEOUT (30),
# COURIER_LOCALSTACK_TIMEOUT (180), COURIER_HARNESS_SKIP_INSTALL=1 (do not run install-deps.sh),
# COURIER_CACHE (where the moto venv lives, default $REPO/.cache).
# The state dir also holds logs/ (one log per server, kept with the dir when a run fails) and
# pids ("name pid" per started process; "name/child pid" for the children found when stopping).
# Not covered: a SIGKILL of this script itself leaves the servers running (kill them by the pids).
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
case $MODE in moto | localstack) ;; -h | --help) sed -n '2,48p' "$0"; exit 0 ;; *) usage ;; esac
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
runuser -u postfix -- test -x "$STATE" 2>/dev/null \
    || die "user postfix cannot enter $STATE: make its parent directories world-searchable (chmod o+x) or use another COURIER_HARNESS_DIR"
LOGS=$STATE/logs
mkdir -p "$LOGS"
: >"$STATE/pids"

SERVER_NAMES=()
SERVER_PIDS=()
CMD_PID=
CMD_RAN=0

now_ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }
secs_since() { local ms=$(($(now_ms) - $1)); printf '%d.%02d' $((ms / 1000)) $((ms % 1000 / 10)); }

# Process table helpers (builtins only: no fork per process). Fields of /proc/PID/stat after
# "comm) ": [0]=state [1]=ppid [2]=pgrp ... [19]=starttime.
STAT_FIELDS=()
read_stat() {
    local line
    { IFS= read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
    read -r -a STAT_FIELDS <<<"${line##*) }"
}

# Alive and not a zombie.
proc_alive() { read_stat "$1" && [ "${STAT_FIELDS[0]}" != Z ]; }

# The same process as recorded ("pid:starttime"), still alive: a reused pid does not count.
entry_alive() { read_stat "${1%%:*}" && [ "${STAT_FIELDS[0]}" != Z ] && [ "${STAT_FIELDS[19]}" = "${1#*:}" ]; }

# Pids of live processes in process group $1 (the group our setsid'd server leads).
group_members() {
    local pg=$1 f pid
    for f in /proc/[0-9]*; do
        pid=${f#/proc/}
        read_stat "$pid" || continue
        if [ "${STAT_FIELDS[2]}" = "$pg" ] && [ "${STAT_FIELDS[0]}" != Z ]; then echo "$pid"; fi
    done
}

# All live descendants of $1, as "pid:starttime", found by parent pid (this includes children
# that left the process group, e.g. LocalStack's DynamoDB Local, which runs in its own session).
descendants() {
    local f pid entry queue=("$1") p
    local -A kids=()
    for f in /proc/[0-9]*; do
        pid=${f#/proc/}
        read_stat "$pid" || continue
        [ "${STAT_FIELDS[0]}" != Z ] || continue
        kids[${STAT_FIELDS[1]}]+="$pid:${STAT_FIELDS[19]} "
    done
    while [ "${#queue[@]}" -gt 0 ]; do
        p=${queue[0]}
        queue=("${queue[@]:1}")
        for entry in ${kids[$p]:-}; do
            echo "$entry"
            queue+=("${entry%%:*}")
        done
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

# fail_server NAME MESSAGE LOGS...: report, show each log's tail, exit (the EXIT trap cleans up).
fail_server() {
    local name=$1 msg=$2 f
    shift 2
    log "ERROR: $name $msg"
    for f in "$@"; do
        [ -f "$f" ] || continue
        log "---- last 40 lines of $f ----"
        tail -n 40 "$f" >&2 || true
        log "---- end of $f ----"
    done
    exit 1
}

# wait_ready PID TIMEOUT CHECK...: poll CHECK until it succeeds. Returns 0 when ready, 1 when
# the process exited first (its status in EXIT_STATUS), 2 on time-out.
wait_ready() {
    local pid=$1 timeout=$2 start
    shift 2
    start=$(now_ms)
    while :; do
        if ! proc_alive "$pid"; then
            EXIT_STATUS=0
            wait "$pid" 2>/dev/null || EXIT_STATUS=$?
            return 1
        fi
        if "$@" >/dev/null 2>&1; then return 0; fi
        [ $(($(now_ms) - start)) -lt $((timeout * 1000)) ] || return 2
        sleep 0.1
    done
}
EXIT_STATUS=0

# bring_up NAME PORTVAR TIMEOUT LOGS...: runs spawn_NAME (which starts the server on port
# ${!PORTVAR}) and waits for ready_NAME. If the server dies because another program took its
# port in the meantime, picks a new port and tries again (3 tries). Otherwise fails the run
# with the tail of each of LOGS.
bring_up() {
    local name=$1 portvar=$2 timeout=$3 attempt rc
    shift 3
    for attempt in 1 2 3; do
        "spawn_$name"
        rc=0
        wait_ready "$LAST_PID" "$timeout" "ready_$name" || rc=$?
        [ "$rc" -ne 0 ] || return 0
        if [ "$rc" -eq 1 ] && [ "$attempt" -lt 3 ] \
            && { grep -qis 'already in use' "$@" || ! port_free "${!portvar}"; }; then
            log "$name: port ${!portvar} was taken by another program; retrying on a new port"
            unset 'SERVER_NAMES[-1]' 'SERVER_PIDS[-1]'
            printf -v "$portvar" '%s' "$(pick_ports 1)"
            continue
        fi
        if [ "$rc" -eq 1 ]; then
            [ "$name" != postfix ] || log "note: Postfix's master reports errors it meets before its" \
                "log service runs (bad master.cf, ports) to syslog only; 'postfix -c $STATE/postfix/conf check' may help"
            fail_server "$name" "exited during start-up (exit status $EXIT_STATUS)" "$@"
        fi
        fail_server "$name" "did not become ready within ${timeout} s" "$@"
    done
}

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

# 127.0.0.1:$1 can be bound (nobody else holds it).
port_free() {
    python3 -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

http_ok() { curl -fsS -o /dev/null --max-time 2 "$1"; }

# An SMTP server on 127.0.0.1:$1 sends a 220 greeting.
smtp_greets() {
    local line=
    { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
    IFS= read -r -t 2 line <&3 || true
    printf 'QUIT\r\n' >&3 2>/dev/null || true
    exec 3>&- 3<&-
    [[ $line == 220* ]]
}

# ---------------------------------------------------------------- stopping
STOP_FAILED=0

# wait_gone SECONDS ENTRY...: wait until none of the "pid:starttime" entries is alive.
wait_gone() {
    local secs=$1 start e left
    shift
    start=$(now_ms)
    while :; do
        left=0
        for e in "$@"; do entry_alive "$e" && left=1 && break; done
        [ "$left" -eq 1 ] || return 0
        [ $(($(now_ms) - start)) -lt $((secs * 1000)) ] || return 1
        sleep 0.1
    done
}

# stop_tree NAME PID LEADS_GROUP: SIGTERM to PID, wait up to STOP_TIMEOUT, SIGKILL if needed;
# then wait for its descendants (recorded before the signal) and, when PID leads its own process
# group, for the rest of that group (Postfix's daemons outlive master by about a second), and
# SIGKILL, by pid, whatever is left.
stop_tree() {
    local name=$1 pid=$2 leads_group=$3 me desc=() e survivors=()
    read_stat "$pid" || { wait "$pid" 2>/dev/null || true; return 0; }
    me=$pid:${STAT_FIELDS[19]}
    mapfile -t desc < <(descendants "$pid")
    for e in "${desc[@]}"; do printf '%s/child %s\n' "$name" "${e%%:*}" >>"$STATE/pids"; done
    if entry_alive "$me"; then
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_gone "$STOP_TIMEOUT" "$me"; then
            log "WARNING: $name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT} s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    wait "$pid" 2>/dev/null || true
    if [ "$leads_group" = 1 ]; then
        for e in $(group_members "$pid"); do
            read_stat "$e" && desc+=("$e:${STAT_FIELDS[19]}")
        done
    fi
    [ "${#desc[@]}" -gt 0 ] || return 0
    if ! wait_gone "$STOP_TIMEOUT" "${desc[@]}"; then
        for e in "${desc[@]}"; do entry_alive "$e" && survivors+=("${e%%:*}"); done
        log "WARNING: $name left processes ${survivors[*]} running for ${STOP_TIMEOUT} s; sending SIGKILL"
        kill -KILL "${survivors[@]}" 2>/dev/null || true
        if ! wait_gone 2 "${desc[@]}"; then
            log "ERROR: could not stop $name's processes ${survivors[*]}"
            STOP_FAILED=1
        fi
    fi
}

# diagnose: after a failed command, what a CI log needs to tell the harness's part from the code's:
# which servers still run, the free disk (Postfix refuses mail with a 4xx when its queue's file
# system is nearly full) and the end of Postfix's log.
diagnose() {
    local i state
    log "---- the command failed; harness state ----"
    for ((i = 0; i < ${#SERVER_PIDS[@]}; i++)); do
        state=running
        kill -0 "${SERVER_PIDS[i]}" 2>/dev/null || state="EXITED"
        log "${SERVER_NAMES[i]} (pid ${SERVER_PIDS[i]}): $state"
    done
    df -h "$STATE" >&2 || true
    if [ -f "$LOGS/postfix.log" ]; then
        log "---- last 15 lines of $LOGS/postfix.log ----"
        tail -n 15 "$LOGS/postfix.log" >&2 || true
    fi
    log "---- end of harness state ----"
}

cleanup() {
    local rc=$? i
    trap '' INT TERM HUP
    set +e
    if [ "$CMD_RAN" -eq 1 ] && [ "$rc" -ne 0 ]; then diagnose; fi
    if [ -n "$CMD_PID" ]; then stop_tree command "$CMD_PID" 0; fi
    if [ -f "$STATE/adopted" ]; then
        while read -r name pid; do stop_tree "$name" "$pid" 1; done <"$STATE/adopted"
    fi
    for ((i = ${#SERVER_PIDS[@]} - 1; i >= 0; i--)); do
        stop_tree "${SERVER_NAMES[i]}" "${SERVER_PIDS[i]}" 1
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

spawn_moto() { start_server moto "$LOGS/moto.log" "$MOTO_SERVER" -H 127.0.0.1 -p "$MOTO_PORT"; }
ready_moto() { http_ok "http://127.0.0.1:$MOTO_PORT/moto-api/"; }

start_moto() {
    local t0 url logfile=$LOGS/moto.log ready_s status
    t0=$(now_ms)
    bring_up moto MOTO_PORT "$MOTO_TIMEOUT" "$logfile"
    ready_s=$(secs_since "$t0")
    url=http://127.0.0.1:$MOTO_PORT
    # Step Functions only execute state machines once this is set (after every server start).
    curl -fsS -o /dev/null --max-time 10 -X POST "$url/moto-api/config" \
        -H 'Content-Type: application/json' -d '{"stepfunctions":{"execute_state_machine":true}}' \
        || fail_server moto "rejected POST /moto-api/config" "$logfile"
    # GET /moto-api/config does not echo the stepfunctions section, so check the behaviour:
    # a one-state Pass machine must reach SUCCEEDED (it stays RUNNING when execution is off).
    status=$(moto_probe_sfn "$url") || fail_server moto "Step Functions probe failed: $status" "$logfile"
    [ "$status" = SUCCEEDED ] \
        || fail_server moto "Step Functions execution is not enabled (probe status: $status)" "$logfile"
    curl -fsS -o /dev/null --max-time 10 -X POST "$url/moto-api/reset" \
        || fail_server moto "rejected POST /moto-api/reset" "$logfile"
    log "moto ready in $ready_s s at $url (Step Functions execution enabled and checked: $(secs_since "$t0") s in all)"
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
    # 60 s: moto imports its Step Functions backend on the first call (about 6 s when the
    # machine is idle; a 10 s limit was seen to time out on a loaded one).
    with urllib.request.urlopen(req, timeout=60) as r:
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
throttled.courier.test      450 4.7.28 rate limited, try again later
EOF
    # Postfix re-reads a file modified in the last second until it "settles" (0.3 s naps, about
    # 2.5 s here); back-dating our freshly written files skips that wait.
    touch -d '1 minute ago' "$conf/main.cf" "$conf/master.cf" "$conf/recipient_access"
    postmap -c "$conf" "hash:$conf/recipient_access" >>"$LOGS/postfix-setup.log" 2>&1 \
        || fail_server postfix "postmap failed" "$LOGS/postfix-setup.log"
    # Creates the queue's subdirectories with Postfix's own owners and modes, and checks the rest.
    postfix -c "$conf" check >>"$LOGS/postfix-setup.log" 2>&1 \
        || fail_server postfix "'postfix check' failed" "$LOGS/postfix-setup.log" "$LOGS/postfix.log"
}

spawn_postfix() {
    write_postfix_config
    start_server postfix "$LOGS/postfix-master.log" "$POSTFIX_MASTER" -d -c "$STATE/postfix/conf"
}
ready_postfix() { smtp_greets "$SMTP_PORT"; }

spawn_smtp-sink-drop() {
    start_server smtp-sink-drop "$LOGS/smtp-sink-drop.log" "$SMTP_SINK" -4 -u nobody \
        -h drop.courier.test -q "$DROP_COMMANDS" "127.0.0.1:$DROP_PORT" 64
}
ready_smtp-sink-drop() { smtp_greets "$DROP_PORT"; }

spawn_localstack() {
    mkdir -p "$STATE/localstack"
    start_server localstack "$LOGS/localstack.log" bash "$REPO/localstack/start-host.sh" "$LS_PORT" "$STATE/localstack"
}
# LocalStack has printed "Ready." (all services loaded) and its health endpoint answers.
ready_localstack() {
    grep -qx 'Ready\.' "$LOGS/localstack.log" && http_ok "http://127.0.0.1:$LS_PORT/_localstack/health"
}

t0=$(now_ms)
bring_up postfix SMTP_PORT "$SMTP_TIMEOUT" "$LOGS/postfix-master.log" "$LOGS/postfix.log"
log "postfix ready in $(secs_since "$t0") s at 127.0.0.1:$SMTP_PORT (log $LOGS/postfix.log)"
t0=$(now_ms)
bring_up smtp-sink-drop DROP_PORT "$SMTP_TIMEOUT" "$LOGS/smtp-sink-drop.log"
log "smtp-sink (drops after $DROP_COMMANDS) ready in $(secs_since "$t0") s at 127.0.0.1:$DROP_PORT"
start_moto
if [ "$MODE" = localstack ]; then
    t0=$(now_ms)
    bring_up localstack LS_PORT "$LOCALSTACK_TIMEOUT" "$LOGS/localstack.log"
    log "localstack ready in $(secs_since "$t0") s at http://127.0.0.1:$LS_PORT"
    # Health says "ready" before every provider answers: the first concurrent calls to a service
    # can get "no handler for operation". Call each service the tests use once, until it answers.
    t0=$(now_ms)
    if ! AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 \
        "$CACHE/venv-localstack/bin/python" - "http://127.0.0.1:$LS_PORT" >>"$LOGS/localstack-warmup.log" 2>&1 <<'PY'
import sys, time, boto3
url = sys.argv[1]
calls = {
    "s3": lambda c: c.list_buckets(),
    "sqs": lambda c: c.list_queues(),
    "dynamodb": lambda c: c.list_tables(),
    "stepfunctions": lambda c: c.list_state_machines(),
}
deadline = time.time() + 60
for service, call in calls.items():
    client = boto3.client(service, endpoint_url=url)
    while True:
        try:
            call(client)
            break
        except Exception as e:  # keep trying until the deadline
            if time.time() > deadline:
                print(f"{service} never answered: {e}")
                sys.exit(1)
            time.sleep(0.5)
PY
    then
        tail -n 40 "$LOGS/localstack-warmup.log" >&2
        die "LocalStack services did not answer after start"
    fi
    log "localstack services answered in $(secs_since "$t0") s"
fi

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
export COURIER_POSTFIX_CONF=$STATE/postfix/conf COURIER_HARNESS_ADOPT=$STATE/adopted

ENV_VARS=(AWS_ENDPOINT_URL AWS_ENDPOINT_URL_SESV2 AWS_REGION AWS_DEFAULT_REGION AWS_ACCESS_KEY_ID
    AWS_SECRET_ACCESS_KEY AWS_EC2_METADATA_DISABLED COURIER_EMULATOR COURIER_MOTO_URL
    COURIER_SMTP_HOST COURIER_SMTP_PORT COURIER_SMTP_DROP_PORT COURIER_SMTP_SLOW_PORT
    COURIER_SMTP_SLOW_SECONDS COURIER_SMTP_CAPTURE_DIR COURIER_SMTP_LOG COURIER_HARNESS_DIR
    COURIER_POSTFIX_CONF COURIER_HARNESS_ADOPT)
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
CMD_RAN=1
CMD_STATUS=0
wait "$CMD_PID" || CMD_STATUS=$?
CMD_PID=
exit "$CMD_STATUS"
