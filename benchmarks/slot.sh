#!/usr/bin/env bash
# Run a command in one of two CPU slots (a 2-core machine): waits until a slot is free, so that at most
# two heavy jobs (benchmarks, training runs) share the cores. Usage: benchmarks/slot.sh CMD [ARGS...]
# Waiters queue on one lock (first come, first served) and only the head of the queue polls the slots.
# EBMS_SLOTS (default 2) sets the number of slots; the locks live in ${TMPDIR:-/tmp}.
set -euo pipefail
n="${EBMS_SLOTS:-2}"
dir="${TMPDIR:-/tmp}"
exec {queue}>"$dir/ebms-cpu-queue.lock"
flock "$queue"
while true; do
  for ((i = 0; i < n; i++)); do
    exec {fd}>"$dir/ebms-cpu-slot-$i.lock"
    if flock -n "$fd"; then
      exec {queue}>&-
      echo "slot.sh: slot $i: $*" >&2
      "$@"
      exit $?
    fi
    exec {fd}>&-
  done
  sleep 2
done
