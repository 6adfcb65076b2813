#!/bin/bash
# Memory of a running command's processes, sampled while it runs (for benchmarks/trf_recipe_curve.py --memory-log).
# Usage: benchmarks/pss_watch.sh PATTERN [SECONDS] > FILE   (PATTERN: a pgrep -f pattern matching the processes)
# Every SECONDS (default 60) while a process matches, one line per process:
#   EPOCH PID hwm=KiB rss=KiB pss=KiB
# hwm: VmHWM, the process's peak resident set; pss: its proportional set size (shared pages divided among the
# processes mapping them, from /proc/PID/smaps_rollup), so the PSS of forked workers sums without double counting.
pattern=${1:?usage: pss_watch.sh PATTERN [SECONDS]}
every=${2:-60}
while pgrep -f -- "$pattern" > /dev/null; do
  now=$(date +%s)
  for p in $(pgrep -f -- "$pattern"); do
    [ "$p" = "$$" ] && continue
    hwm=$(awk '/^VmHWM/ {print $2}' /proc/$p/status 2>/dev/null)
    rss=$(awk '/^VmRSS/ {print $2}' /proc/$p/status 2>/dev/null)
    pss=$(awk '/^Pss:/ {print $2}' /proc/$p/smaps_rollup 2>/dev/null)
    [ -n "$hwm" ] && [ -n "$pss" ] && echo "$now $p hwm=$hwm rss=$rss pss=$pss"
  done
  sleep "$every"
done
