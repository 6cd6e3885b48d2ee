"""The epilogue: write AUDIT.md from the main graph's outcome, whatever it was."""
import json
import os
import pathlib

outcome = json.loads(pathlib.Path(os.environ["CRUCIBLE_INPUTS_FILE"]).read_text())["outcome"]
rows, audited, findings = [], 0, 0
for name, entry in sorted(outcome["tasks"].items()):
    if not name.startswith("audit_"):
        continue
    audited += 1
    out = entry.get("output") or {}
    found = out.get("findings") or []
    findings += len(found)
    rows.append(f"| {out.get('crate', name)} | {entry['status']} | {out.get('tests', '?')} | {len(found)} |")

report = [
    "# Repository audit",
    "",
    f"Main graph: {outcome['exit']}.",
    "",
    "| crate | status | tests | findings |",
    "| --- | --- | --- | --- |",
    *rows,
]
pathlib.Path("AUDIT.md").write_text("\n".join(report) + "\n")
print(json.dumps({"audited": audited, "findings": findings}))
