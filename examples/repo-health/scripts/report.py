"""Write HEALTH.md: today's counts beside the earlier runs of the launch series (none when the
chore was started by hand), and say which way the TODO count moved since the last passing run."""
import json
import os
import pathlib

inputs = json.loads(pathlib.Path(os.environ["CRUCIBLE_INPUTS_FILE"]).read_text())
now = inputs["measure"]
earlier = [
    r for r in inputs["history"]["records"]
    if r["entry"]["status"] == "pass" and r["entry"]["output"]
]
if earlier:
    last = earlier[-1]["entry"]["output"]["todos"]
    delta = now["todos"] - last
    trend = "steady" if delta == 0 else ("worse" if delta > 0 else "better")
else:
    trend = "first run"
report = [
    "# Repository health",
    "",
    "| run | ended | files | lines | TODOs |",
    "| --- | --- | --- | --- | --- |",
]
for r in inputs["history"]["records"]:
    out = r["entry"]["output"] or {}
    report.append(
        f"| {r['run']} | {r['ended_at']} | {out.get('files', '-')} | {out.get('lines', '-')} "
        f"| {out.get('todos', '-')} |"
    )
report.append(f"| this run | now | {now['files']} | {now['lines']} | {now['todos']} |")
report += ["", f"TODO trend: {trend}."]
pathlib.Path("HEALTH.md").write_text("\n".join(report) + "\n")
print(json.dumps({**now, "trend": trend}))
