#!/usr/bin/env bash
# test.sh: everything `make test` (and so CI) runs, phase by phase, each timed (scripts/phase.sh).
#
# The arm64 release zips (what is deployed; only tests/tests/deploy.rs's deploy test, in the
# LocalStack phase, reads them) build in the background from the start, at the lowest CPU priority and in a target
# directory of their own (so they never wait on the other builds' lock): they take the CPU the
# phases leave idle, mostly while the integration tests wait on the emulators. The LocalStack
# phase waits for them first. A failed background build fails the run; the build is stopped
# when the run ends early.
set -euo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
phase=scripts/phase.sh
mk() { "$phase" "$1" "$MAKE" --no-print-directory "${@:2}"; }

zips_pid=
stop_zips() {
    if [ -n "$zips_pid" ] && kill -0 "$zips_pid" 2>/dev/null; then
        kill -- "-$zips_pid" 2>/dev/null || kill "$zips_pid" 2>/dev/null || true
    fi
}
trap stop_zips EXIT

mkdir -p target
rm -f "${COURIER_PHASES_FILE:?}"
"$phase" "install test dependencies" scripts/install-deps.sh all

zips_log=target/arm64-zips.log
zips_start=$(date +%s)
setsid -w nice -n 19 "$MAKE" --no-print-directory lambda-zips >"$zips_log" 2>&1 &
zips_pid=$!
# setsid gives the build a session, and so (where the kernel groups sessions for scheduling,
# sched_autogroup) a scheduling group of its own that would share the CPU equally with this one
# whatever its nice value: lower that group's priority too.
# Only once setsid has made the session (before, the file is this script's own group).
for _ in $(seq 100); do
    [ "$(ps -o sid= -p "$zips_pid" | tr -d ' ')" = "$zips_pid" ] && break
    sleep 0.02
done
if [ "$(ps -o sid= -p "$zips_pid" | tr -d ' ')" = "$zips_pid" ] && [ -w "/proc/$zips_pid/autogroup" ]; then
    echo 19 >"/proc/$zips_pid/autogroup" || true
fi
echo "== arm64 release zips: building in the background (log: $zips_log)"

mk "cargo fmt --check" fmt-check
mk "clippy -D warnings" clippy
mk "cfn-lint, IAM lint and checkov infra/template.yaml" lint-infra
mk "unit tests" unit
mk "Python client (pytest; SQS on moto)" client-python
mk "x86_64 bootstraps (lambda-test profile)" lambda-build-x86
mk "integration tests on moto" it-moto
mk "offline deploy of the whole template on moto's CloudFormation" deploy-offline
mk "classifier on the evaluation corpus (prints the measures)" classify-eval
mk "chaos suite, short (1,000 jobs, 5 kills)" chaos-ci

echo "== arm64 release zips (background)"
waited_from=$(date +%s)
status=0
wait "$zips_pid" || status=$?
zips_pid=
now=$(date +%s)
cat "$zips_log"
"$phase" --record "arm64 release zips (waited $(( now - waited_from ))s)" \
    "$(( now - zips_start ))" "$status"
[ "$status" -eq 0 ] || exit "$status"

mk "integration tests on LocalStack" it-localstack
"$phase" --summary
