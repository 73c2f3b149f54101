#!/usr/bin/env bash
# repeat-emulator-phases.sh ROUNDS: runs every phase of `make test` that talks to an emulator, a
# relay or a random seed (the Python client on moto, the integration tests on moto, the offline
# deploy, chaos-ci, the integration tests on LocalStack) ROUNDS times in a row on the build already
# in target/, as a fresh-clone CI runs them, and prints one line per round and phase. This is how
# an emulator's own race is looked for (issue #13: the same commit passes ten times in ten); the
# other phases (fmt, clippy, unit tests, builds) do not depend on a server. Run it after a full
# `make test` (or .ci/run) of the same checkout. Exit status: 1 when any phase failed in any round.
# Each phase's log: target/repeat/ROUND-PHASE.log.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:?usage: scripts/repeat-emulator-phases.sh ROUNDS}
case $rounds in '' | *[!0-9]*) echo "ROUNDS must be a whole number, not '$rounds'" >&2; exit 2 ;; esac
MAKE=${MAKE:-make}
phases=(client-python it-moto deploy-offline chaos-ci it-localstack)
mkdir -p target/repeat
summary=target/repeat/summary.txt
: >"$summary"
failed=0
for round in $(seq "$rounds"); do
    for phase in "${phases[@]}"; do
        log=target/repeat/$round-$phase.log
        start=$(date +%s)
        status=0
        "$MAKE" --no-print-directory "$phase" >"$log" 2>&1 || status=$?
        took=$(( $(date +%s) - start ))
        extra=""
        if [ "$phase" = chaos-ci ]; then
            # The seed and the duplicates line, so a round can be reproduced and compared.
            extra="$(grep -m1 -o 'seed [0-9]*' "$log"), duplicates after ambiguity of the deliverable: $(awk '/^ok \(accepted\)/ {print $11 " of " $3}' "$log")"
        fi
        line=$(printf 'round %2s  %-15s %5ss  %-6s %s' "$round" "$phase" "$took" \
            "$([ $status -eq 0 ] && echo ok || echo FAILED)" "$extra")
        echo "$line" | tee -a "$summary"
        [ $status -eq 0 ] || failed=1
    done
done
echo "== $(grep -c ' ok ' "$summary") phases ok, $(grep -c FAILED "$summary") failed, in $rounds rounds ($summary)"
exit $failed
