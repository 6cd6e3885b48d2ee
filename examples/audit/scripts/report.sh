#!/bin/sh
# The epilogue: turns the run's outcome (every check's status, note and output) into AUDIT.md.
set -eu
python3 - "$CRUCIBLE_INPUTS_FILE" <<'PY'
import json, sys
outcome = json.load(open(sys.argv[1]))["outcome"]
tasks = outcome["tasks"]
lines = ["# Crate audit", "", f"Run outcome: {outcome['exit']}", "",
         "| crate | status | Rust lines | tests | note |", "| --- | --- | --- | --- | --- |"]
checks = sorted(n for n in tasks if n.startswith("check_"))
for name in checks:
    e = tasks[name]
    out = e["output"] or {}
    lines.append(f"| {out.get('crate', name)} | {e['status']} | {out.get('rust_lines', '-')} "
                 f"| {out.get('tests', '-')} | {e['note'] or ''} |")
open("AUDIT.md", "w").write("\n".join(lines) + "\n")
failing = [n for n in checks if tasks[n]["status"] != "pass"]
print(json.dumps({"report": "AUDIT.md", "checked": len(checks), "failing": failing}))
PY
