#!/usr/bin/env bash
# Runs LocalStack community on the host (no Docker) in the FOREGROUND on 127.0.0.1:PORT.
#
#   localstack/start-host.sh PORT STATE_DIR
#
# The script execs into LocalStack, so the pid the caller started is LocalStack's. Stop it with
# SIGTERM (or SIGINT) to that pid: LocalStack then stops DynamoDB Local (and kinesis-local, if
# DynamoDB streams were used) and exits, in about 1-2 s. It prints "Ready." when it serves; poll
# http://127.0.0.1:PORT/_localstack/health to know when it is up.
# LocalStack starts DynamoDB Local in a session of its own, so killing LocalStack's process group
# would miss it; it is started through the java/21/bin/java wrapper written by install.sh, which
# gives the JVM a parent-death signal: it dies with LocalStack even after a SIGKILL.
#
# STATE_DIR holds everything of this instance (FILESYSTEM_ROOT = STATE_DIR/filesystem), so two
# instances run side by side with different ports and state dirs. Run localstack/install.sh first.
# Env: COURIER_CACHE (as for install.sh), LOCALSTACK_SERVICES (overrides the service list),
#      DEBUG=1 (LocalStack debug logs).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${COURIER_CACHE:-$REPO/.cache}
VENV=$CACHE/venv-localstack
LIB=$CACHE/localstack-lib

die() { echo "localstack/start-host.sh: $*" >&2; exit 1; }

[[ $# -eq 2 ]] || die "usage: localstack/start-host.sh PORT STATE_DIR"
PORT=$1
STATE_DIR=$2
[[ $PORT =~ ^[0-9]+$ && $PORT -ge 1 && $PORT -le 65535 ]] || die "PORT must be a TCP port number, got '$PORT'"
[[ -f $VENV/.courier-stamp ]] || die "LocalStack is not installed in $VENV: run localstack/install.sh first"
[[ -f $LIB/.courier-stamp ]] || die "offline DynamoDB files missing in $LIB: run localstack/install.sh first"
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
    die "127.0.0.1:$PORT is already in use"
fi

mkdir -p "$STATE_DIR"
STATE_DIR=$(cd "$STATE_DIR" && pwd)
FS=$STATE_DIR/filesystem

# Pre-fill LocalStack's static libs (FILESYSTEM_ROOT/usr/lib/localstack) from the cache so it finds
# Java "21" and DynamoDB Local installed and downloads nothing. Links, not copies: read-only use.
STATIC_LIBS=$FS/usr/lib/localstack
mkdir -p "$STATIC_LIBS"
for entry in "$LIB"/*; do
    ln -sfn "$entry" "$STATIC_LIBS/$(basename "$entry")"
done

export OVERRIDE_IN_DOCKER=0            # these machines have /.dockerenv; we are not in LocalStack's image
export FILESYSTEM_ROOT=$FS
export GATEWAY_LISTEN=127.0.0.1:$PORT
export LOCALSTACK_HOST=127.0.0.1:$PORT
export SQS_ENDPOINT_STRATEGY=path      # queue URLs http://127.0.0.1:PORT/queue/REGION/ACCOUNT/NAME
export DISABLE_EVENTS=1                # no analytics calls home
export SKIP_SSL_CERT_DOWNLOAD=1        # no download attempt of LocalStack's TLS cert
export DNS_ADDRESS=0                   # no DNS server on port 53 (would clash between instances)
export SERVICES=${LOCALSTACK_SERVICES:-sqs,dynamodb,s3,stepfunctions,cloudformation,iam,sts,lambda,events,sns,logs,secretsmanager}
export EAGER_SERVICE_LOADING=1
export PERSISTENCE=0

cd "$STATE_DIR"
# = `python -m localstack.runtime.main`, then os._exit once LocalStack has shut itself down: the
# interpreter's own teardown (garbage-collecting ~600 MB of objects) took another 2-7 s per stop.
exec "$VENV/bin/python" -c '
import os, runpy, sys
code = 0
try:
    runpy.run_module("localstack.runtime.main", run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
except BaseException:
    import traceback; traceback.print_exc(); code = 1
sys.stdout.flush(); sys.stderr.flush()
os._exit(code)
'
