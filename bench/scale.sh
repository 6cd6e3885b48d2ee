#!/usr/bin/env bash
# Linear at scale (issue 18): what a task that changes the workspace costs as a run grows, and on
# a workspace cloned from a large repository, side by side with the floor a user compares to.
#
#   bench/scale.sh [path/to/crucible]          # release build: cargo build --release -p crucible-cli
#   SHAPES="chain500 repo50k" bench/scale.sh   # a subset; REPS=3 for alternated repetitions
#
# Shapes (every task writes one new file `f<i>.txt` at the workspace root and passes):
#   chain500, chain1000, chain2000   a chain of N writers (each depends on the one before)
#   indep5000                        5,000 independent writers (shared workspace: one at a time)
#   repo50k                          a chain of 200 writers on a workspace cloned from a generated
#                                    repository of 50,000 files (2,500 directories of 20)
#   iso50k                           20 independent isolated writers (--jobs 2) on that same
#                                    workspace, sandboxed, the engine run as root: each attempt's
#                                    checkout an overlay over one kept checkout of HEAD, against
#                                    CRUCIBLE_OVERLAY=0 (a whole checkout per attempt, as before)
#                                    and against `git worktree add` / `remove` per task
# Each shape runs three ways, alternated within every repetition:
#   crucible   `plan run --no-sandbox` (the sandbox's own cost is bench/sandbox-cost.sh's); with
#              FULLPASS=1 also with CRUCIBLE_GIT_WATCH=0, every commit walking the whole tree
#              (how every commit staged before the workspace watch)
#   git CLI    the same `sh -c` per task, then `git add -A && git commit` on the same tree
#   make       the same commands in a Makefile, serially (`make -j1`), with no memory at all
# Printed per shape: wall time, per-task cost (wall / tasks; for repo50k also the steady rate
# from the session log's row times, which leaves out the clone), the git memory's size on disk,
# and for the git CLI its commits' own time per task. Then the per-task cost at n = 500, 1,000,
# 2,000 and 5,000 and the ratio of the last to the first.
#
# Also (RESUME=0 / RUNS=0 to skip): resuming a run whose session log holds 100,000 rows
# (generated: a real 100,001-task run killed after its first rows, its log completed with
# copies of a real passing row for all but one task), and `crucible runs` over 1,000 runs
# (generated: copies of one real run's run.json and session.jsonl).
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
for tool in git make python3; do
  command -v "$tool" >/dev/null || { echo "$tool is required" >&2; exit 1; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/crucible-scale.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
SHAPES=${SHAPES:-"chain500 chain1000 chain2000 indep5000 repo50k iso50k"}
REPS=${REPS:-1}
# The git CLI as a user's would run, without anyone's config; the engine's identity on both sides.
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=crucible GIT_AUTHOR_EMAIL=crucible@localhost
export GIT_COMMITTER_NAME=crucible GIT_COMMITTER_EMAIL=crucible@localhost

now() { echo "$EPOCHREALTIME"; }
secs() { echo "$2 - $1" | bc -l; }
kib() { du -sk "$1" | cut -f1; }

cmd_of() { printf "echo %s > f%s.txt && echo '{}'" "$1" "$1"; }

# The pack of a shape: chain or independent writers; with a repository url when given.
gen_pack() { # dir chain|indep n [repo]
  local d=$1 kind=$2 n=$3 repo=${4:-}
  mkdir -p "$d"
  {
    printf '[workflow]\ntype = "playbook"\n'
    [ -n "$repo" ] && printf '[repo]\nurl = "%s"\n' "$repo"
    for i in $(seq 1 "$n"); do
      printf '[[workflow.task]]\nname = "t%s"\nkind = "command"\nrun = "%s"\n' "$i" "$(cmd_of "$i")"
      if [ "$kind" = chain ] && [ "$i" -gt 1 ]; then printf 'depends_on = ["t%s"]\n' "$((i - 1))"; fi
    done
  } > "$d/crucible.toml"
}

gen_makefile() { # dir chain|indep n
  local d=$1 kind=$2 n=$3
  mkdir -p "$d"
  {
    if [ "$kind" = chain ]; then printf 'all: t%s\n' "$n"; else printf 'all:'; for i in $(seq 1 "$n"); do printf ' t%s' "$i"; done; printf '\n'; fi
    printf '.PHONY: all'; for i in $(seq 1 "$n"); do printf ' t%s' "$i"; done; printf '\n'
    for i in $(seq 1 "$n"); do
      if [ "$kind" = chain ] && [ "$i" -gt 1 ]; then printf 't%s: t%s\n' "$i" "$((i - 1))"; else printf 't%s:\n' "$i"; fi
      printf '\t@%s >/dev/null\n' "$(cmd_of "$i")"
    done
  } > "$d/Makefile"
}

# 50,000 files in 2,500 directories, committed once by the git CLI.
gen_repo() { # dir
  local d=$1
  mkdir -p "$d"
  python3 - "$d" <<'EOF'
import os, sys
root = sys.argv[1]
for a in range(50):
    for b in range(50):
        sub = os.path.join(root, f"d{a:02}", f"s{b:02}")
        os.makedirs(sub)
        for c in range(20):
            with open(os.path.join(sub, f"f{c:02}.txt"), "w") as f:
                f.write(f"file {a} {b} {c}\n")
EOF
  git -C "$d" init -q
  git -C "$d" add -A
  git -C "$d" commit -qm "50,000 files"
}

# Isolated writers on the 50,000-file workspace: crucible with overlays, crucible with a whole
# checkout per attempt, and a git worktree per task (the git CLI's own isolation).
isolated_shape() { # label n repo
  local label=$1 n=$2 repo=$3 d t0 t1 wall overlay
  d=$WORK/$label
  rm -rf "$d"; mkdir -p "$d/pack"
  {
    printf '[workflow]\ntype = "playbook"\n[repo]\nurl = "%s"\n' "$repo"
    for i in $(seq 1 "$n"); do
      printf '[[workflow.task]]\nname = "t%s"\nkind = "command"\nrun = "%s"\nisolated = true\n' "$i" "$(cmd_of "$i")"
    done
  } > "$d/pack/crucible.toml"
  for rep in $(seq 1 "$REPS"); do
    for overlay in 1 0; do
      rm -rf "$d/pack/state" "$d/pack/workspace"
      t0=$(now)
      CRUCIBLE_OVERLAY=$overlay "$BIN" plan run --manifest "$d/pack/crucible.toml" --max-cost 1 --max-time 2h --jobs 2 >/dev/null
      t1=$(now); wall=$(secs "$t0" "$t1")
      local rate; rate=$(log_rate "$(ls -d "$d"/pack/state/runs/*/)session.jsonl")
      local side=overlay; if [ "$overlay" = 0 ]; then side="whole"; fi
      printf '%-10s rep %d  %-9s %8.2f s  %7.2f ms/task  steady %7s ms/task\n' \
        "$label" "$rep" "$side" "$wall" "$(echo "$wall * 1000 / $n" | bc -l)" "$rate"
    done
    local g=$d/git
    rm -rf "$g"; git clone -q "$repo" "$g"
    t0=$(now)
    for i in $(seq 1 "$n"); do
      git -C "$g" worktree add -q --detach "$d/wt" && (cd "$d/wt" && sh -c "$(cmd_of "$i")" >/dev/null)
      git -C "$g" worktree remove --force "$d/wt"
    done
    t1=$(now); wall=$(secs "$t0" "$t1")
    printf '%-10s rep %d  worktree  %8.2f s  %7.2f ms/task\n' "$label" "$rep" "$wall" "$(echo "$wall * 1000 / $n" | bc -l)"
  done
}

# Steady per-task time from a run's session log: between its first and last task rows.
log_rate() { # session.jsonl
  python3 - "$1" <<'EOF'
import json, sys
from datetime import datetime
ts = [json.loads(l)["ts"] for l in open(sys.argv[1]) if '"task_result"' in l]
t = [datetime.fromisoformat(x.replace("Z", "+00:00")).timestamp() for x in ts]
print(f"{(t[-1] - t[0]) / (len(t) - 1) * 1000:.2f}" if len(t) > 1 else "nan")
EOF
}

# One shape, three ways; prints one line per side and records crucible's per-task time.
declare -A PER_TASK
shape() { # label chain|indep n [repo]
  local label=$1 kind=$2 n=$3 repo=${4:-} d t0 t1 wall
  d=$WORK/$label
  rm -rf "$d"; mkdir -p "$d"
  gen_pack "$d/pack" "$kind" "$n" "$repo"
  gen_makefile "$d/make" "$kind" "$n"
  for rep in $(seq 1 "$REPS"); do
    # crucible; with FULLPASS=1 also with its workspace watch off (every commit walks the tree)
    local watch
    for watch in 1 ${FULLPASS:+0}; do
    rm -rf "$d/pack/state" "$d/pack/workspace"
    t0=$(now)
    CRUCIBLE_GIT_WATCH=$watch "$BIN" plan run --manifest "$d/pack/crucible.toml" --max-cost 1 --max-time 2h --no-sandbox >/dev/null
    t1=$(now); wall=$(secs "$t0" "$t1")
    local run; run=$(ls -d "$d"/pack/state/runs/*/)
    local mem; mem=$(kib "$run/memory")
    local rate; rate=$(log_rate "$run/session.jsonl")
    local side=crucible; if [ "$watch" = 0 ]; then side="full pass"; fi
    printf '%-10s rep %d  %-9s %8.2f s  %7.2f ms/task  steady %7s ms/task  git memory %7.1f MB\n' \
      "$label" "$rep" "$side" "$wall" "$(echo "$wall * 1000 / $n" | bc -l)" "$rate" "$(echo "$mem / 1024" | bc -l)"
    if [ "$watch" = 1 ]; then PER_TASK[$label]="${PER_TASK[$label]:-} $(echo "$wall * 1000 / $n" | bc -l)"; fi
    done
    # git CLI: the same processes, each followed by git add -A && git commit
    local g=$d/git commit_s=0 c0 c1
    rm -rf "$g"
    if [ -n "$repo" ]; then git clone -q "$repo" "$g"; else git init -q "$g" && git -C "$g" commit -q --allow-empty -m base; fi
    t0=$(now)
    for i in $(seq 1 "$n"); do
      (cd "$g" && sh -c "$(cmd_of "$i")" >/dev/null)
      c0=$EPOCHREALTIME
      git -C "$g" add -A && git -C "$g" commit -qm "task t$i"
      c1=$EPOCHREALTIME
      commit_s=$(echo "$commit_s + $c1 - $c0" | bc -l)
    done
    t1=$(now); wall=$(secs "$t0" "$t1")
    printf '%-10s rep %d  git CLI   %8.2f s  %7.2f ms/task  commit %7.2f ms/task  .git %7.1f MB\n' \
      "$label" "$rep" "$wall" "$(echo "$wall * 1000 / $n" | bc -l)" "$(echo "$commit_s * 1000 / $n" | bc -l)" \
      "$(echo "$(kib "$g/.git") / 1024" | bc -l)"
    # make: the same commands, no memory
    rm -f "$d"/make/f*.txt
    t0=$(now)
    make -s -j1 -C "$d/make" >/dev/null
    t1=$(now); wall=$(secs "$t0" "$t1")
    printf '%-10s rep %d  make -j1  %8.2f s  %7.2f ms/task\n' "$label" "$rep" "$wall" "$(echo "$wall * 1000 / $n" | bc -l)"
  done
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "crucible: $BIN"
echo "machine: $(nproc) cores, $(uname -sr); $(date -u +%Y-%m-%dT%H:%MZ); load average $(cut -d' ' -f1-3 /proc/loadavg)"
for s in $SHAPES; do
  case $s in
    chain500) shape chain500 chain 500 ;;
    chain1000) shape chain1000 chain 1000 ;;
    chain2000) shape chain2000 chain 2000 ;;
    indep5000) shape indep5000 indep 5000 ;;
    repo50k)
      [ -d "$WORK/src50k" ] || gen_repo "$WORK/src50k"
      shape repo50k chain 200 "$WORK/src50k" ;;
    iso50k)
      [ -d "$WORK/src50k" ] || gen_repo "$WORK/src50k"
      isolated_shape iso50k 20 "$WORK/src50k" ;;
    *) echo "unknown shape $s" >&2; exit 2 ;;
  esac
  echo "  (load average $(cut -d' ' -f1-3 /proc/loadavg))"
done

first=""; last=""
for s in chain500 chain1000 chain2000 indep5000; do
  [ -n "${PER_TASK[$s]:-}" ] || continue
  m=$(echo "${PER_TASK[$s]}" | median)
  printf 'per task at n = %-5s %7.2f ms\n' "${s//[a-z]/}" "$m"
  [ -z "$first" ] && first=$m
  last=$m
done
[ -n "$first" ] && printf 'ratio of the last to the first: %.2fx\n' "$(echo "$last / $first" | bc -l)"

# --- resume of a 100,000-row session log -------------------------------------------------------
if [ "${RESUME:-1}" = 1 ]; then
  d=$WORK/resume; rows=100000; n=$((rows + 1))
  mkdir -p "$d"
  {
    printf '[workflow]\ntype = "playbook"\n'
    for i in $(seq 1 "$n"); do printf '[[workflow.task]]\nname = "t%s"\nkind = "command"\nrun = "echo {}"\n' "$i"; done
  } > "$d/crucible.toml"
  t0=$(now); "$BIN" check --manifest "$d/crucible.toml" >/dev/null; t1=$(now)
  printf 'resume: check of the %d-task pack (compile and admission alone) %.2f s\n' "$n" "$(secs "$t0" "$t1")"
  # A real run, killed once it has settled a few rows: its start and admission lines are real.
  "$BIN" plan run --manifest "$d/crucible.toml" --max-cost 1 --max-time 2h --no-sandbox >/dev/null 2>&1 &
  pid=$!
  until [ "$(cat "$d"/state/runs/*/session.jsonl 2>/dev/null | grep -c '"task_result"')" -ge 3 ]; do sleep 0.05; done
  kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
  log=$(ls "$d"/state/runs/*/session.jsonl)
  python3 - "$log" "$rows" <<'EOF'
import json, sys
path, rows = sys.argv[1], int(sys.argv[2])
lines = [l for l in open(path) if l.endswith("\n")]
head = [l for l in lines if '"task_result"' not in l]
row = json.loads(next(l for l in lines if '"task_result"' in l))
with open(path, "w") as f:
    f.writelines(head)
    for i in range(1, rows + 1):
        row["task"] = f"t{i}"
        f.write(json.dumps(row, separators=(",", ":")) + "\n")
EOF
  printf 'resume: generated log %s rows, %.1f MB\n' "$(grep -c '"task_result"' "$log")" "$(echo "$(stat -c %s "$log") / 1048576" | bc -l)"
  t0=$(now)
  "$BIN" plan run --manifest "$d/crucible.toml" --max-cost 1 --max-time 2h --no-sandbox --resume >/dev/null
  t1=$(now)
  printf 'resume: plan run --resume over %d rows (runs the one task left) %.2f s\n' "$rows" "$(secs "$t0" "$t1")"
fi

# --- crucible runs over 1,000 runs -------------------------------------------------------------
if [ "${RUNS:-1}" = 1 ]; then
  d=$WORK/runs
  mkdir -p "$d"
  {
    printf '[workflow]\ntype = "playbook"\n'
    for i in $(seq 1 10); do printf '[[workflow.task]]\nname = "t%s"\nkind = "command"\nrun = "echo {}"\n' "$i"; done
  } > "$d/crucible.toml"
  "$BIN" plan run --manifest "$d/crucible.toml" --max-cost 1 --max-time 10m --no-sandbox >/dev/null
  real=$(ls -d "$d"/state/runs/*/)
  for i in $(seq 1 999); do
    id=$(printf '0192a3b4-%04x-7000-8000-%012x' "$((i / 65536))" "$i")
    mkdir -p "$d/state/runs/$id"
    cp "$real/run.json" "$real/session.jsonl" "$d/state/runs/$id/"
  done
  best=999
  for _ in 1 2 3 4 5; do
    t0=$(now); "$BIN" runs --manifest "$d/crucible.toml" >/dev/null; t1=$(now)
    best=$(echo "t = $t1 - $t0; if (t < $best) t else $best" | bc -l)
  done
  printf 'runs: crucible runs over %d runs, best of 5: %.1f ms\n' "$(ls "$d/state/runs" | wc -l)" "$(echo "$best * 1000" | bc -l)"
fi
