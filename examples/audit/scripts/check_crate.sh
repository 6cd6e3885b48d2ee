#!/bin/sh
# Checks one crate: its Rust line count, its unit tests, and leftover todo!/unimplemented!
# markers. Fails (with a note) when it has no tests or carries a marker.
set -eu
crate=$1
dir="crates/$crate"
[ -f "$dir/Cargo.toml" ] || { printf '{"status": "fail", "note": "no crate %s"}\n' "$crate"; exit 0; }
lines=$(find "$dir" -name '*.rs' -exec cat {} + | wc -l | tr -d ' ')
tests=$(grep -r --include='*.rs' -c '#\[test\]\|#\[tokio::test\]' "$dir" | awk -F: '{s+=$2} END {print s+0}')
markers=$(grep -r --include='*.rs' -c 'todo!(\|unimplemented!(' "$dir" | awk -F: '{s+=$2} END {print s+0}')
note=""
[ "$tests" -eq 0 ] && note="no unit tests"
[ "$markers" -gt 0 ] && note="${note:+$note; }$markers todo!/unimplemented! markers"
if [ -n "$note" ]; then
  printf '{"crate": "%s", "rust_lines": %s, "tests": %s, "markers": %s, "status": "fail", "note": "%s"}\n' \
    "$crate" "$lines" "$tests" "$markers" "$note"
else
  printf '{"crate": "%s", "rust_lines": %s, "tests": %s, "markers": %s}\n' "$crate" "$lines" "$tests" "$markers"
fi
