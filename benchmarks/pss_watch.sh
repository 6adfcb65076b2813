#!/bin/bash
# Memory of a running command's processes, sampled while it runs (for benchmarks/trf_recipe_curve.py --memory-log).
# Usage: benchmarks/pss_watch.sh PATTERN [SECONDS] > FILE   (PATTERN: a pgrep -f pattern matching the command)
# Waits for a process matching PATTERN, then follows it and its descendants (the command and the workers it forks,
# not later commands that happen to match, such as a curve script given the command as an argument); every
# SECONDS (default 60) while it lives, one line per process:
#   EPOCH PID hwm=KiB rss=KiB pss=KiB
# hwm: VmHWM, the process's peak resident set; pss: its proportional set size (shared pages divided among the
# processes mapping them, from /proc/PID/smaps_rollup), so the PSS of forked workers sums without double counting.
pattern=${1:?usage: pss_watch.sh PATTERN [SECONDS]}
every=${2:-60}
root=""
while [ -z "$root" ]; do
  for p in $(pgrep -f -- "$pattern"); do  # the first match that is not this script (nor its subshells)
    [ "$p" != "$$" ] && [ "$(ps -o ppid= -p "$p" | tr -d ' ')" != "$$" ] && { root=$p; break; }
  done
  [ -z "$root" ] && sleep 1
done
tree() {  # $1 and its descendants
  echo "$1"
  for c in $(pgrep -P "$1"); do tree "$c"; done
}
while kill -0 "$root" 2> /dev/null; do
  now=$(date +%s)
  for p in $(tree "$root"); do
    hwm=$(awk '/^VmHWM/ {print $2}' /proc/$p/status 2>/dev/null)
    rss=$(awk '/^VmRSS/ {print $2}' /proc/$p/status 2>/dev/null)
    pss=$(awk '/^Pss:/ {print $2}' /proc/$p/smaps_rollup 2>/dev/null)
    [ -n "$hwm" ] && [ -n "$pss" ] && echo "$now $p hwm=$hwm rss=$rss pss=$pss"
  done
  sleep "$every"
done
