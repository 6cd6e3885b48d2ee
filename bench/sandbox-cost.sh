#!/usr/bin/env bash
# What the sandbox costs per task (issue 11; bench/README.md, "The sandbox's cost").
#
#   bench/sandbox-cost.sh [path/to/crucible]
#
# 1. The shapes alone (bench/sandbox-shapes.c, compiled with cc; its header says each): ROUNDS
#    rounds of SPAWNS spawns of `sh -c "echo '{}'"` by fork and by vfork, under one `bwrap` each
#    (the engine's first shape), in namespaces made after a fork and a second fork (its second),
#    the same with the mount namespace's teardown kept off the spawn's path, and in one
#    vfork-style clone that makes the namespaces (its shape now), the shapes alternated within
#    each round, from a launcher holding BALLAST MiB (24: an engine's resident size); prints
#    each shape's median milliseconds per spawn and its cost over vplain.
# 2. The engine, two workloads of N `echo '{}'` command tasks: a chain (serial, so nothing hides
#    a spawn) and independent isolated tasks (--jobs 2), each run sandboxed and with
#    --no-sandbox, alternated, PAIRS times; prints the median wall times and the sandbox's cost
#    per task (the difference of the medians over N).
# Use a release build (cargo build --release -p crucible-cli) and note the load average printed
# last: on a shared machine every figure moves with it.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-7} SPAWNS=${SPAWNS:-100} N=${N:-100} PAIRS=${PAIRS:-7}
# MiB of memory the shapes' launcher holds and writes to, as an engine does (its resident size).
BALLAST=${BALLAST:-24}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

cc -O2 -pthread -o "$WORK/shapes" "$(dirname "$0")/sandbox-shapes.c"
shapes=(plain vplain native kept clone)
command -v bwrap >/dev/null && shapes+=(bwrap)
for _ in $(seq 1 "$ROUNDS"); do
  for s in "${shapes[@]}"; do
    echo "$s $(BALLAST=$BALLAST "$WORK/shapes" "$s" "$SPAWNS" "$WORK/s")" >> "$WORK/shapes.txt"
  done
done
base=$(awk '$1 == "vplain" { print $2 }' "$WORK/shapes.txt" | median)
for s in "${shapes[@]}"; do
  m=$(awk -v s="$s" '$1 == s { print $2 }' "$WORK/shapes.txt" | median)
  printf '%-7s %7.2f ms per spawn  (%+.2f ms over vplain, the unsandboxed spawn; median of %s rounds of %s)\n' \
    "$s" "$m" "$(echo "$m - $base" | bc -l)" "$ROUNDS" "$SPAWNS"
done

gen() { # chain|independent: the workload's manifest in $WORK/<name>/crucible.toml
  mkdir -p "$WORK/$1"
  {
    printf '[workflow]\ntype = "playbook"\n'
    for i in $(seq 1 "$N"); do
      printf '[[workflow.task]]\nname = "t%s"\nkind = "command"\nrun = "%s"\n' "$i" "echo '{}'"
      if [ "$1" = chain ]; then
        [ "$i" -gt 1 ] && printf 'depends_on = ["t%s"]\n' "$((i - 1))"
      else
        printf 'isolated = true\n'
      fi
    done
  } > "$WORK/$1/crucible.toml"
}
wall() { # workload, extra flags: one run's wall seconds
  local m=$WORK/$1/crucible.toml t0 t1
  shift
  t0=$(date +%s.%N)
  "$BIN" plan run --manifest "$m" --max-cost 1 --max-time 10m "$@" >/dev/null
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
for w in chain independent; do
  gen "$w"
  jobs=()
  [ "$w" = independent ] && jobs=(--jobs 2)
  for _ in $(seq 1 "$PAIRS"); do
    echo "$w on $(wall "$w" "${jobs[@]}")" >> "$WORK/engine.txt"
    echo "$w off $(wall "$w" "${jobs[@]}" --no-sandbox)" >> "$WORK/engine.txt"
  done
  on=$(awk -v w="$w" '$1 == w && $2 == "on" { print $3 }' "$WORK/engine.txt" | median)
  off=$(awk -v w="$w" '$1 == w && $2 == "off" { print $3 }' "$WORK/engine.txt" | median)
  printf '%s of %s: sandboxed %.2f s, --no-sandbox %.2f s: the sandbox costs %.2f ms per task (medians of %s alternated pairs; %s)\n' \
    "$w" "$N" "$on" "$off" "$(echo "($on - $off) * 1000 / $N" | bc -l)" "$PAIRS" "$BIN"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
