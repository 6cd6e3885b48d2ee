# Shared by the bench scripts (sourced, not run): finds the crucible binary to measure, from the
# first argument, $CRUCIBLE, or the target directory (release first), and sets BIN.
BIN=${1:-${CRUCIBLE:-}}
if [ -z "$BIN" ]; then
  TGT=${CARGO_TARGET_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target}
  for c in "$TGT/release/crucible" "$TGT/debug/crucible"; do
    if [ -x "$c" ]; then BIN=$c; break; fi
  done
fi
[ -x "${BIN:-}" ] || { echo "build crucible first (cargo build -p crucible-cli) or pass its path" >&2; exit 1; }
