"""The epilogue: write AUDIT.md from the main graph's outcome, whatever it was; file one ask per
crate with findings, for a run of another workflow to fix; and compare with earlier runs of the
launch series (empty when the audit was started by hand)."""
import hashlib
import json
import os
import pathlib

inputs = json.loads(pathlib.Path(os.environ["CRUCIBLE_INPUTS_FILE"]).read_text())
outcome = inputs["outcome"]
rows, asks, audited, findings = [], [], 0, 0
for name, entry in sorted(outcome["tasks"].items()):
    if not name.startswith("audit_"):
        continue
    audited += 1
    out = entry.get("output") or {}
    crate = out.get("crate", name)
    found = out.get("findings") or []
    findings += len(found)
    rows.append(f"| {crate} | {entry['status']} | {out.get('tests', '?')} | {len(found)} |")
    if found:
        # The same findings give the same key in every run, so the receiving orchestrator can
        # tell a repeat from new work without reading the ask.
        digest = hashlib.sha256("\n".join(sorted(found)).encode()).hexdigest()[:12]
        asks.append({
            "key": f"audit:{crate}:{digest}",
            "workflow": "fix-audit-findings",
            "params": {"crate": crate, "findings": found[:20]},
        })

report = [
    "# Repository audit",
    "",
    f"Main graph: {outcome['exit']}.",
    "",
    "| crate | status | tests | findings |",
    "| --- | --- | --- | --- |",
    *rows,
]
earlier = inputs.get("history", {}).get("records", [])
if earlier:
    report += ["", "## Earlier runs", ""]
    for r in earlier:
        out = r["entry"].get("output") or {}
        report.append(f"- {r['ended_at']}: {out.get('findings', '?')} finding(s) ({r['run']})")
pathlib.Path("AUDIT.md").write_text("\n".join(report) + "\n")
if asks:
    pathlib.Path("PLAN_ASKS.json").write_text(json.dumps(asks))
print(json.dumps({"audited": audited, "findings": findings}))
