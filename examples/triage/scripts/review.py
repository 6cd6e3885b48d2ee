"""Accepts FIX.md only when it covers every high-severity report."""
import json
import os
import sys

inputs = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
want = inputs["worst"]["high"]
text = open("FIX.md").read() if os.path.exists("FIX.md") else ""
missing = [r for r in want if r not in text]
if missing:
    print(json.dumps({"missing": missing, "note": "FIX.md misses " + ", ".join(missing)}))
    sys.exit(1)
print(json.dumps({"missing": []}))
