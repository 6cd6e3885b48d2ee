#!/bin/sh
# Lists the workspace's crates: every crates/*/Cargo.toml.
set -eu
names=$(for m in crates/*/Cargo.toml; do basename "$(dirname "$m")"; done)
count=$(printf '%s\n' "$names" | grep -c .)
list=$(printf '%s\n' "$names" | sed 's/.*/"&"/' | paste -sd, -)
printf '{"crates": [%s], "count": %s}\n' "$list" "$count"
