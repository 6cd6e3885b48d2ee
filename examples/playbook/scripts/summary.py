"""The epilogue: reads the main graph's outcome and writes SUMMARY.md into the workspace."""
import json
import os

with open(os.environ["CRUCIBLE_INPUTS_FILE"]) as f:
    outcome = json.load(f)["outcome"]
rows = [f"- {name}: {entry['status']}" + (f" ({entry['note']})" if entry["note"] else "")
        for name, entry in sorted(outcome["tasks"].items())]
with open("SUMMARY.md", "w") as f:
    f.write(f"# Haiku run: {outcome['exit']}\n\n" + "\n".join(rows) + "\n")
passed = sum(1 for e in outcome["tasks"].values() if e["status"] == "pass")
print(json.dumps({"summary": "SUMMARY.md", "exit": outcome["exit"], "passed": passed}))
