#!/usr/bin/env bash
# test.sh: everything `make test` (and so CI) runs, phase by phase, each timed (scripts/phase.sh).
#
# Two jobs run in the background beside the phases, each waited for by the first phase that needs
# it (its summary line gives its own time and how long the run waited):
# - the test dependencies (scripts/install-deps.sh: Debian packages, the emulators' and linters'
#   venvs; mostly network), at a lower CPU priority, while fmt, clippy and the unit tests (which
#   need only cargo) run;
# - the arm64 zips the deploy test uploads (`make lambda-zips-test`: cargo-lambda, the
#   `lambda-test` profile), at the lowest CPU priority and in a target directory of their own (so
#   they never wait on the other builds' lock), on the CPU the phases leave idle. The deployed
#   release zips (`make lambda-zips`) are not built here: the deploy test checks what cargo-lambda
#   uploads and how the function is configured, not how fast its code runs.
# A failed background job fails the run; both are stopped when the run ends early.
set -euo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
phase=scripts/phase.sh
mk() { "$phase" "$1" "$MAKE" --no-print-directory "${@:2}"; }

pids=()
stop_background() {
    local pid
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
        fi
    done
}
trap stop_background EXIT

# background NICE LOG COMMAND...: starts COMMAND in a session of its own (so it can be stopped as
# a whole); its pid in $bg_pid (not printed: `wait` needs a child of this shell, not of a
# command substitution's). setsid's session is also a scheduling group of its own where the kernel
# groups sessions (sched_autogroup), which would share the CPU equally with this one whatever its
# nice value: that group gets the same nice value.
background() {
    local nice=$1 log=$2 pid
    shift 2
    setsid -w nice -n "$nice" "$@" >"$log" 2>&1 &
    pid=$!
    bg_pid=$pid
    pids+=("$pid")
    if [ "$nice" -gt 0 ] && [ "$nice" -le 19 ]; then
        # Only once setsid has made the session (before, the file is this script's own group).
        for _ in $(seq 100); do
            [ "$(ps -o sid= -p "$pid" | tr -d ' ')" = "$pid" ] && break
            sleep 0.02
        done
        if [ "$(ps -o sid= -p "$pid" | tr -d ' ')" = "$pid" ] && [ -w "/proc/$pid/autogroup" ]; then
            echo "$nice" >"/proc/$pid/autogroup" || true
        fi
    fi
}

# await NAME PID LOG STARTED: waits for a background job, prints its log, records its phase.
await() {
    local name=$1 pid=$2 log=$3 started=$4 from now status=0
    echo "== $name (background)"
    from=$(date +%s)
    wait "$pid" || status=$?
    now=$(date +%s)
    cat "$log"
    "$phase" --record "$name (waited $(( now - from ))s)" "$(( now - started ))" "$status"
    [ "$status" -eq 0 ] || exit "$status"
}

mkdir -p target
rm -f "${COURIER_PHASES_FILE:?}"
# cargo-lambda first (seconds, from PyPI): the arm64 build needs it.
"$phase" "install cargo-lambda" scripts/install-deps.sh lambda

zips_log=target/arm64-zips.log
zips_start=$(date +%s)
background 19 "$zips_log" "$MAKE" --no-print-directory lambda-zips-test
zips_pid=$bg_pid
echo "== arm64 zips (lambda-test profile): building in the background (log: $zips_log)"

deps_log=target/install-deps.log
deps_start=$(date +%s)
# Below the phases' priority (pip unpacking took half the CPU from clippy at equal priority), above
# the arm64 build's.
background 10 "$deps_log" scripts/install-deps.sh all
deps_pid=$bg_pid
echo "== test dependencies: installing in the background (log: $deps_log)"

mk "cargo fmt --check" fmt-check
mk "clippy -D warnings" clippy
mk "unit tests" unit
await "install test dependencies" "$deps_pid" "$deps_log" "$deps_start"
mk "cfn-lint, IAM lint and checkov infra/template.yaml" lint-infra
mk "Python client (pytest; SQS on moto)" client-python
mk "x86_64 bootstraps (lambda-test profile)" lambda-build-x86
mk "integration tests on moto" it-moto
mk "offline deploy of the whole template on moto's CloudFormation" deploy-offline
mk "classifier on the evaluation corpus (prints the measures)" classify-eval
mk "chaos suite, short (1,000 jobs, 5 kills)" chaos-ci
await "arm64 zips (lambda-test profile)" "$zips_pid" "$zips_log" "$zips_start"
mk "integration tests on LocalStack" it-localstack
"$phase" --summary
