#!/usr/bin/env bash
# The first build a new user meets (issue 19): both README commands from an empty target
# directory, timed as a fresh clone runs them.
#
#   bench/cold-build.sh [REV]      # default HEAD
#
# Clones this repository at REV into a temporary directory (so nothing of this checkout's
# target/ is reused; the cargo registry's downloaded sources are, as after `cargo fetch`), then
# runs the README's run command and its test command there, and prints each one's wall time
# and their sum with the load average. Run it on an idle machine: every figure moves with load.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
REV=${1:-HEAD}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
git clone -q "$REPO" "$WORK/crucible"
git -C "$WORK/crucible" checkout -q "$REV"
cd "$WORK/crucible"
export CARGO_TARGET_DIR="$WORK/crucible/target"
unset RUSTFLAGS CARGO_BUILD_RUSTFLAGS
cargo fetch -q

t0=$(date +%s)
cargo run -p crucible-cli -- plan run --manifest examples/playbook/crucible.toml --max-cost 1 --max-time 5m \
  > "$WORK/run.log" 2>&1 || { tail -20 "$WORK/run.log"; exit 1; }
t1=$(date +%s)
cargo test --workspace > "$WORK/test.log" 2>&1 || {
  grep -E -A12 '^---- ' "$WORK/test.log"
  grep -E '^test .* FAILED|^test result' "$WORK/test.log"
  exit 1
}
t2=$(date +%s)
printf 'rev %s\nrun command (cold): %d s\ntest command after it: %d s\nboth: %d min %02d s\nload average: %s\n' \
  "$(git rev-parse --short HEAD)" $((t1 - t0)) $((t2 - t1)) $(((t2 - t0) / 60)) $(((t2 - t0) % 60)) \
  "$(cut -d' ' -f1-3 /proc/loadavg)"
