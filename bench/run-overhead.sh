#!/usr/bin/env bash
# Engine overhead per task: four generated workloads of trivial tasks run through
# `crucible plan run` and through `make -j2` on the same graph.
#
#   bench/run-overhead.sh [path/to/crucible]
#
# Every task on both sides runs the same command, `echo '{}'`, through exactly one shell (a
# crucible command task must print a JSON object): crucible runs `sh -c "echo '{}'"`, and make
# runs its recipe `echo '{}' >/dev/null` through its own `sh -c`, so neither side pays for a
# second shell. Independent tasks and the diamond's layers are isolated, so crucible runs them two at a
# time (--jobs 2) as make -j2 does; the chain runs in the shared workspace.
# Prints the best of REPS (default 3) wall times and per-task times for each, crucible's extra
# time per task (the engine's overhead over make on the same processes), and what the bubblewrap
# sandbox costs per task (the default run against the same run with --no-sandbox).
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
command -v make >/dev/null || { echo "make is required" >&2; exit 1; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CMD="echo '{}'"

task() { # name isolated deps...
  local name=$1 iso=$2; shift 2
  printf '[[workflow.task]]\nname = "%s"\nkind = "command"\nrun = "%s"\n' "$name" "echo '{}'"
  [ "$iso" = 1 ] && printf 'isolated = true\n'
  if [ $# -gt 0 ]; then
    local list; list=$(printf '"%s", ' "$@"); printf 'depends_on = [%s]\n' "${list%, }"
  fi
}

mk() { # name deps...
  local name=$1; shift
  printf '%s:%s\n\t@%s >/dev/null\n' "$name" "${*:+ $*}" "$CMD"
}

gen_independent() { # n
  local n=$1 d=$WORK/indep$1; mkdir -p "$d"
  { printf '[workflow]\ntype = "playbook"\n'; for i in $(seq 1 "$n"); do task "t$i" 1; done; } > "$d/crucible.toml"
  { printf 'all:'; for i in $(seq 1 "$n"); do printf ' t%s' "$i"; done; printf '\n.PHONY: all'; for i in $(seq 1 "$n"); do printf ' t%s' "$i"; done; printf '\n'
    for i in $(seq 1 "$n"); do mk "t$i"; done; } > "$d/Makefile"
  echo "$d"
}

gen_chain() { # n
  local n=$1 d=$WORK/chain$1; mkdir -p "$d"
  { printf '[workflow]\ntype = "playbook"\n'; task t1 0; for i in $(seq 2 "$n"); do task "t$i" 0 "t$((i-1))"; done; } > "$d/crucible.toml"
  { printf 'all: t%s\n.PHONY: all' "$n"; for i in $(seq 1 "$n"); do printf ' t%s' "$i"; done; printf '\n'
    mk t1; for i in $(seq 2 "$n"); do mk "t$i" "t$((i-1))"; done; } > "$d/Makefile"
  echo "$d"
}

gen_diamond() { # width depth: a source, depth layers of width tasks each depending on the whole layer above, a sink
  local w=$1 depth=$2 d=$WORK/diamond$1x$2; mkdir -p "$d"
  local names=() prev=(src) layer
  {
    printf '[workflow]\ntype = "playbook"\n'; task src 0
    for l in $(seq 1 "$depth"); do
      layer=()
      for i in $(seq 1 "$w"); do task "l${l}_$i" 1 "${prev[@]}"; layer+=("l${l}_$i"); done
      prev=("${layer[@]}")
    done
    task sink 0 "${prev[@]}"
  } > "$d/crucible.toml"
  prev=(src)
  {
    printf 'all: sink\n.PHONY: all src sink'
    for l in $(seq 1 "$depth"); do for i in $(seq 1 "$w"); do printf ' l%s_%s' "$l" "$i"; done; done; printf '\n'
    mk src
    for l in $(seq 1 "$depth"); do
      layer=()
      for i in $(seq 1 "$w"); do mk "l${l}_$i" "${prev[@]}"; layer+=("l${l}_$i"); done
      prev=("${layer[@]}")
    done
    mk sink "${prev[@]}"
  } > "$d/Makefile"
  echo "$d"
}

now() { date +%s.%N; }

REPS=${REPS:-3}

bench() { # label dir tasks: best of $REPS for each tool, run back to back
  local label=$1 d=$2 n=$3 t0 t1 t2 t3 c u m best_c=999999 best_u=999999 best_m=999999
  for _ in $(seq 1 "$REPS"); do
    t0=$(now)
    "$BIN" plan run --manifest "$d/crucible.toml" --max-cost 1 --max-time 10m --jobs 2 >/dev/null
    t1=$(now)
    "$BIN" plan run --manifest "$d/crucible.toml" --max-cost 1 --max-time 10m --jobs 2 --no-sandbox >/dev/null
    t2=$(now)
    make -s -j2 -C "$d" >/dev/null
    t3=$(now)
    c=$(echo "$t1 - $t0" | bc); u=$(echo "$t2 - $t1" | bc); m=$(echo "$t3 - $t2" | bc)
    best_c=$(echo "if ($c < $best_c) $c else $best_c" | bc)
    best_u=$(echo "if ($u < $best_u) $u else $best_u" | bc)
    best_m=$(echo "if ($m < $best_m) $m else $best_m" | bc)
  done
  awk -v l="$label" -v n="$n" -v c="$best_c" -v u="$best_u" -v m="$best_m" 'BEGIN {
    printf "%-18s %5d  crucible %6.3fs %5.2fms/task   make -j2 %6.3fs %5.2fms/task   overhead %5.2fms/task   ratio %4.2fx   unsandboxed %6.3fs, sandbox %5.2fms/task\n",
      l, n, c, c*1000/n, m, m*1000/n, (c-m)*1000/n, c/m, u, (c-u)*1000/n }'
}

echo "crucible: $BIN"
bench "200 independent" "$(gen_independent 200)" 200
bench "chain of 200" "$(gen_chain 200)" 200
bench "1000 independent" "$(gen_independent 1000)" 1000
bench "50x4 diamond" "$(gen_diamond 50 4)" 202
