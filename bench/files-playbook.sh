#!/usr/bin/env bash
# Declared files through the real binary (RFC-0002:C-TASK-FILES): a two-task playbook whose
# producer emits 1,000 files totalling 200 MiB and whose consumer is staged with them, against
# `cp -r` of the same tree.
#
#   bench/files-playbook.sh [path/to/crucible]
#
# The same playbook runs twice: with `emits_files` listing the 1,000 files (variant A) and
# without (variant B). Both producers copy the tree into their isolated worktree, so neither
# commits 200 MiB to git memory, and the difference A − B is what declared files cost: the
# pre-attempt snapshot, capture with publication, staging into the consumer, and removing the
# staged copy afterwards. Capture and staging each copy the tree once, so the fair yardstick is
# two `cp -r` of the tree (one is printed as well). Best of REPS (default 3), caches warm.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

FILES=${FILES:-1000}
TOTAL_MIB=${TOTAL_MIB:-200}
REPS=${REPS:-3}
WORK=$(mktemp -d)
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT

# The tree: FILES files of TOTAL_MIB/FILES each, random content, ten per directory.
size_kib=$(( TOTAL_MIB * 1024 / FILES ))
mkdir -p "$WORK/tree"
head -c "$(( size_kib * 1024 ))" /dev/urandom > "$WORK/seed"
for i in $(seq 0 $(( FILES - 1 ))); do
  d="$WORK/tree/data/d$(( i / 10 ))"
  mkdir -p "$d"
  # Distinct content per file: the seed with the index prepended.
  { printf '%08d' "$i"; tail -c +9 "$WORK/seed"; } > "$d/f$i.bin"
done

gen() { # dir with_files
  local d=$1 files=$2
  mkdir -p "$d"
  {
    printf '[workflow]\ntype = "playbook"\n'
    printf '[[workflow.task]]\nname = "produce"\nkind = "command"\nisolated = true\n'
    printf 'run = '"'''"'cp -r "%s/tree/data" data && echo '"'{}'"''"'''"'\n' "$WORK"
    if [ "$files" = 1 ]; then
      printf 'emits_files = ['
      for i in $(seq 0 $(( FILES - 1 ))); do printf '"data/d%d/f%d.bin", ' $(( i / 10 )) "$i"; done
      printf ']\n'
    fi
    printf '[[workflow.task]]\nname = "consume"\nkind = "command"\ndepends_on = ["produce"]\n'
    printf 'run = '"'''"'echo '"'{}'"''"'''"'\n'
  } > "$d/crucible.toml"
}

now() { date +%s.%N; }
min() { echo "if ($1 < $2) $1 else $2" | bc; }

gen "$WORK/a" 1
gen "$WORK/b" 0
best_a=999999 best_b=999999 best_cp=999999
for _ in $(seq 1 "$REPS"); do
  rm -rf "$WORK/a/state" "$WORK/b/state" "$WORK/cp"
  t0=$(now)
  "$BIN" plan run --manifest "$WORK/a/crucible.toml" --max-cost 1 --max-time 10m >/dev/null
  t1=$(now)
  "$BIN" plan run --manifest "$WORK/b/crucible.toml" --max-cost 1 --max-time 10m >/dev/null
  t2=$(now)
  # No sync on either side: capture does not fsync the copies either.
  cp -r "$WORK/tree" "$WORK/cp"
  t3=$(now)
  best_a=$(min "$(echo "$t1 - $t0" | bc)" "$best_a")
  best_b=$(min "$(echo "$t2 - $t1" | bc)" "$best_b")
  best_cp=$(min "$(echo "$t3 - $t2" | bc)" "$best_cp")
  # Variant A must really have captured and staged every file.
  row=$(grep '"task":"produce"' "$WORK"/a/state/runs/*/session.jsonl)
  case $row in *'"files":true'*) ;; *) echo "produce did not publish its set: $row" >&2; exit 1 ;; esac
  n=$(find "$WORK"/a/state/runs/*/files/produce -type f | wc -l)
  [ "$n" = "$FILES" ] || { echo "published $n files, not $FILES" >&2; exit 1; }
done

awk -v a="$best_a" -v b="$best_b" -v cp="$best_cp" -v n="$FILES" -v mib="$TOTAL_MIB" 'BEGIN {
  files = a - b
  printf "crucible %s files, %d MiB\n", n, mib
  printf "  run with emits_files     %7.3fs\n", a
  printf "  run without              %7.3fs\n", b
  printf "  declared files cost      %7.3fs  (snapshot + capture + staging + unstaging)\n", files
  printf "  cp -r of the tree        %7.3fs\n", cp
  printf "  ratio to one cp -r       %7.2fx\n", files / cp
  printf "  ratio to two cp -r       %7.2fx  (capture and staging each copy once; target 1.5x)\n", files / (2 * cp)
}'
