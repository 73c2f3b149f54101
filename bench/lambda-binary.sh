#!/usr/bin/env bash
# bench/lambda-binary.sh [BATCHES]
#
# Runs the send function's release `bootstrap` as cargo-lambda builds it (`make lambda-build`: the
# x86_64 build, same source and release profile as the deployed arm64 zip) through a local Lambda
# Runtime API (bench/runtime_api.py) on BATCHES SQS events of 10 jobs each, against the emulator
# and SMTP server the harness started, and prints: the deployment zips' sizes (arm64, every
# function), time from process start to its first request for work (cold start to ready: once
# in this run, then over 21 more starts by bench/cold_start.py), first-event latency, median and p90 event latency, peak RSS (VmHWM) and the binary's size.
# Every batch response is checked: no failures expected.
#
#   make lambda-build && scripts/with-harness.sh moto -- bench/lambda-binary.sh 50   (or: make bench-lambda)
# COURIER_BOOTSTRAP=path runs another build of the send function instead.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
BATCHES=${1:-50}
: "${AWS_ENDPOINT_URL:?run through scripts/with-harness.sh}"
: "${COURIER_SMTP_PORT:?run through scripts/with-harness.sh}"

TARGET=$(cd "$REPO" && realpath -m "${CARGO_TARGET_DIR:-target}")
BIN=${COURIER_BOOTSTRAP:-$TARGET/lambda-x86_64/courier-send/bootstrap}
[ -x "$BIN" ] || { echo "$BIN is missing: run make lambda-build" >&2; exit 1; }
cargo build -q -p courier-dev --manifest-path "$REPO/Cargo.toml"
CTL=$TARGET/debug/courier-dev
WORK=$(mktemp -d)
trap 'kill "${FN:-}" "${RT:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

eval "$("$CTL" provision --prefix "lambda-$$")"
python3 - "$BATCHES" "$WORK/events.jsonl" <<'PY'
import json, sys, uuid
batches, out = int(sys.argv[1]), sys.argv[2]
with open(out, "w") as f:
    for b in range(batches):
        records = []
        for i in range(10):
            n = b * 10 + i
            job = {"version": 1, "message_id": f"lambda-{n}", "campaign_id": "bench",
                   "from": "bench@courier.test", "to": [f"reader{n}@courier.test"],
                   "content": {"subject": f"Bench {n}", "text": "Hello from the release binary."}}
            records.append({"messageId": str(uuid.uuid4()), "receiptHandle": "rh", "body": json.dumps(job),
                            "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
                            "md5OfBody": "", "eventSource": "aws:sqs",
                            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:bench", "awsRegion": "us-east-1"})
        f.write(json.dumps({"Records": records}) + "\n")
PY
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# --park: after the last response the API keeps the function's next poll waiting, as Lambda keeps
# an idle instance; the function is measured there and then stopped. (Without it the API answers
# that poll with an error, lambda_runtime panics on the missing request id, and with
# RUST_BACKTRACE set the backtrace it prints maps and parses the whole binary: about 30 MB more
# than the invocations ever used, which is what this benchmark reported before.)
python3 "$REPO/bench/runtime_api.py" --port "$PORT" --events "$WORK/events.jsonl" --out "$WORK/result.json" --start-file "$WORK/start" --park &
RT=$!
for _ in $(seq 50); do (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done

date +%s%N > "$WORK/start"
AWS_LAMBDA_RUNTIME_API=127.0.0.1:$PORT AWS_LAMBDA_FUNCTION_NAME=courier-send \
AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128 AWS_LAMBDA_FUNCTION_VERSION='$LATEST' \
AWS_LAMBDA_LOG_STREAM_NAME=local AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/courier-send \
COURIER_PROVIDERS=smtp COURIER_SMTP_TLS=none \
    "$BIN" > "$WORK/function.log" 2>&1 &
FN=$!
until [ -s "$WORK/result.json" ]; do
    if ! kill -0 "$FN" 2>/dev/null || ! kill -0 "$RT" 2>/dev/null; then
        echo "the function or the runtime API exited early; the function's log:" >&2
        tail -20 "$WORK/function.log" >&2
        exit 1
    fi
    sleep 0.05
done
# VmHWM is the kernel's high-water mark of the resident set over the process's life, read while
# the function waits for its next invocation; RssAnon (heap, stacks) and RssFile (the binary's
# pages) say where the memory is at that moment.
peak=$(awk '/^VmHWM:/ {print $2}' "/proc/$FN/status")
mem=$(awk '/^(RssAnon|RssFile|Threads):/ {printf "%s %s ", $1, $2}' "/proc/$FN/status")
# COURIER_BENCH_SMAPS=file keeps the process's mappings (which of them hold the memory).
[ -z "${COURIER_BENCH_SMAPS:-}" ] || cp "/proc/$FN/smaps" "$COURIER_BENCH_SMAPS"
kill "$FN" "$RT" 2>/dev/null || true
[ -z "${COURIER_BENCH_LOG:-}" ] || cp "$WORK/function.log" "$COURIER_BENCH_LOG"

python3 - "$WORK/result.json" "$peak" "$BIN" "$WORK/function.log" "$TARGET/lambda" "$mem" <<'PY'
import glob, json, os, statistics, sys, zipfile
result, peak_kb, binary, log, zips = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
mem = dict(zip(sys.argv[6].split()[::2], sys.argv[6].split()[1::2]))
if result["errors"]:
    sys.exit(f"invocation errors: {result['errors'][:3]}")
failures = [r for r in result["results"] if r["response"].get("batchItemFailures")]
lat = [r["latency_ms"] for r in result["results"]]
emf = sum(1 for line in open(log) if '"_aws"' in line)
for z in sorted(glob.glob(os.path.join(zips, "*", "bootstrap.zip"))):
    with zipfile.ZipFile(z) as f:
        inner = sum(i.file_size for i in f.infolist())
    size = os.path.getsize(z)
    print(f"deployment zip {os.path.basename(os.path.dirname(z))}: {size / 1e6:.2f} MB "
          f"({size / 2**20:.2f} MiB; bootstrap {inner / 1e6:.1f} MB unzipped; target <= 6 MB)")
print(f"release bootstrap run here: {os.path.getsize(binary) / 1e6:.1f} MB ({binary})")
print(f"ready after process start, this run (one sample, from the shell's clock to the API's): {result['ready_ms']:.1f} ms")
print(f"first event (batch of 10): {lat[0]:.1f} ms")
print(f"event latency over {len(lat)} batches of 10: median {statistics.median(lat):.1f} ms, p90 {sorted(lat)[int(len(lat) * 0.9)]:.1f} ms")
print(f"peak RSS (VmHWM): {peak_kb * 1024 / 1e6:.1f} MB ({peak_kb / 1024:.1f} MiB; target <= 30 MB)")
if mem:
    print(f"RSS after the last batch: anonymous {int(mem['RssAnon:']) * 1024 / 1e6:.1f} MB, file-backed "
          f"{int(mem['RssFile:']) * 1024 / 1e6:.1f} MB; threads {mem['Threads:']}")
print(f"batch responses: {len(lat)} checked, {len(failures)} with failures; EMF metric documents logged: {emf}")
print(f"log output (CloudWatch Logs ingestion): {os.path.getsize(log) / len(lat):.0f} bytes per batch")
if failures or len(result["results"]) != result["events"]:
    sys.exit(f"{len(failures)} batches reported failures, {len(result['results'])}/{result['events']} answered: {failures[:2]}")
PY
# Cold start to ready as a median: the single start above is one sample on a shared machine.
AWS_LAMBDA_FUNCTION_NAME=courier-send AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128 \
AWS_LAMBDA_FUNCTION_VERSION='$LATEST' AWS_LAMBDA_LOG_STREAM_NAME=local \
AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/courier-send COURIER_PROVIDERS=smtp COURIER_SMTP_TLS=none \
    python3 "$REPO/bench/cold_start.py" "$BIN" 21
