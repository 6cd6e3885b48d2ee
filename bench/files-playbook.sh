#!/usr/bin/env bash
# Declared files through the real binary (RFC-0002:C-TASK-FILES): a two-task playbook whose
# producer emits 1,000 files totalling 200 MiB and whose consumer is staged with them, against
# `cp -r` of the same tree.
#
#   bench/files-playbook.sh [path/to/crucible]
#
# Each playbook runs with `emits_files` listing the 1,000 files and without, so the difference
# is what declared files cost: the pre-attempt snapshot, capture with publication, staging into
# the consumer, and removing the staged copy afterwards. Two producers:
# - isolated: writes the tree in its disposable worktree, so capture moves the files out of it
#   (crates/crucible-engine/src/files/adopt.rs) and staging is the one copy;
# - shared: writes the tree in the run's workspace, which keeps it, so capture and staging each
#   copy it once.
# Both git-ignore the tree, so no variant commits 200 MiB to git memory. Best of REPS (default
# 3), caches warm.
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

gen() { # dir with_files isolated
  local d=$1 files=$2 iso=$3
  mkdir -p "$d"
  {
    # The sandbox gives every task a private /tmp: the tree to copy is bound in, as a pack would.
    printf '[workflow]\ntype = "playbook"\n[sandbox]\nexpose = ["%s/tree"]\n' "$WORK"
    printf '[[workflow.task]]\nname = "produce"\nkind = "command"\nisolated = %s\n' "$iso"
    printf 'run = '"'''"'echo data/ > .gitignore && cp -r "%s/tree/data" data && echo '"'{}'"''"'''"'\n' "$WORK"
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

# Every repetition writes to fresh directories and nothing is removed until the end: on an ext4
# without a journal, creating a file scans the inodes deleted in the last 30 seconds, so a
# cleanup between measurements would slow whichever step came next.
timed() { # manifest rep: the run's wall time in seconds
  sync # no measurement pays for the writeback of the one before it
  local t0; t0=$(now)
  "$BIN" plan run --manifest "$1" --state-dir "$(dirname "$1")/state-$2" \
    --max-cost 1 --max-time 10m >/dev/null
  echo "$(now) - $t0" | bc
}

check_published() { # state dir: the producer must really have captured every file
  local row n
  row=$(grep '"task":"produce"' "$1"/runs/*/session.jsonl)
  case $row in *'"files":true'*) ;; *) echo "produce did not publish its set: $row" >&2; exit 1 ;; esac
  n=$(find "$1"/runs/*/files/produce -type f | wc -l)
  [ "$n" = "$FILES" ] || { echo "published $n files, not $FILES" >&2; exit 1; }
}

for v in iso shared; do
  iso=false; [ "$v" = iso ] && iso=true
  gen "$WORK/$v-a" 1 "$iso"
  gen "$WORK/$v-b" 0 "$iso"
done
declare -A best=([iso-a]=999999 [iso-b]=999999 [shared-a]=999999 [shared-b]=999999 [cp]=999999)
for rep in $(seq 1 "$REPS"); do
  for k in iso-a iso-b shared-a shared-b; do
    best[$k]=$(min "$(timed "$WORK/$k/crucible.toml" "$rep")" "${best[$k]}")
  done
  check_published "$WORK/iso-a/state-$rep"
  check_published "$WORK/shared-a/state-$rep"
  sync
  t0=$(now)
  # No fsync on either side: capture does not fsync its copies either.
  cp -r "$WORK/tree" "$WORK/cp-$rep"
  best[cp]=$(min "$(echo "$(now) - $t0" | bc)" "${best[cp]}")
done

printf 'crucible: %s files, %d MiB; cp -r of the tree %.3fs (best of %s)\n' \
  "$FILES" "$TOTAL_MIB" "${best[cp]}" "$REPS"
for v in iso shared; do
  awk -v a="${best[$v-a]}" -v b="${best[$v-b]}" -v cp="${best[cp]}" -v v="$v" 'BEGIN {
    if (v == "iso") print "  isolated producer (capture moves the files, staging copies them)"
    else print "  shared producer (capture and staging each copy the files)"
    printf "    run with emits_files   %7.3fs\n", a
    printf "    run without            %7.3fs\n", b
    printf "    declared files cost    %7.3fs  = %.2fx cp -r (target 1.5x)\n", a - b, (a - b) / cp
  }'
done
