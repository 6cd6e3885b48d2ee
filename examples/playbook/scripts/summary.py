"""The epilogue: read how the main graph ended and write a one-screen summary of the run."""
import json
import os
import pathlib

outcome = json.loads(pathlib.Path(os.environ["CRUCIBLE_INPUTS_FILE"]).read_text())["outcome"]
lines = [f"run ended: {outcome['exit']}", ""]
for name, entry in sorted(outcome["tasks"].items()):
    lines.append(f"- {name}: {entry['status']}" + (f" ({entry['note']})" if entry.get("note") else ""))
pathlib.Path("SUMMARY.md").write_text("\n".join(lines) + "\n")
passed = sum(1 for e in outcome["tasks"].values() if e["status"] == "pass")
print(json.dumps({"exit": outcome["exit"], "passed": passed, "tasks": len(outcome["tasks"])}))
