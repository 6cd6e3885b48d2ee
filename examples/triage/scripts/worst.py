"""Folds the per-report findings: the worst severity and the reports that have it."""
import json
import os

inputs = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
found = inputs["inspect"]  # the mapped node's output: each passing instance's output by item
high = sorted(k for k, v in found.items() if v["severity"] == "high")
print(json.dumps({"severity": "high" if high else "low", "high": high}))
