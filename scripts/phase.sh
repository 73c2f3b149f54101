#!/usr/bin/env bash
# phase.sh NAME COMMAND...   runs COMMAND, prints how long it took, records it for the summary.
# phase.sh --summary         prints every recorded phase with its duration.
# phase.sh --record NAME SECONDS STATUS   records a phase timed elsewhere.
set -euo pipefail
record=${COURIER_PHASES_FILE:-${TMPDIR:-/tmp}/courier-phases.$PPID}
if [ "${1:-}" = "--record" ]; then
    # phase.sh --record NAME SECONDS STATUS: records a phase timed elsewhere (a background job).
    printf '%-40s %5ss  %s\n' "$2" "$3" "$([ "$4" -eq 0 ] && echo ok || echo FAILED)" | tee -a "$record"
    exit 0
fi
if [ "${1:-}" = "--summary" ]; then
    echo "== phase timings"
    [ -f "$record" ] && cat "$record"
    rm -f "$record"
    exit 0
fi
name=$1
shift
echo "== $name"
start=$(date +%s)
status=0
"$@" || status=$?
took=$(( $(date +%s) - start ))
printf '%-40s %5ss  %s\n' "$name" "$took" "$([ $status -eq 0 ] && echo ok || echo FAILED)" | tee -a "$record"
exit $status
