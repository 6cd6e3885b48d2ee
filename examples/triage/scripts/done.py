"""Says which branch ran and how the review went."""
import json
import os

inputs = json.load(open(os.environ["CRUCIBLE_INPUTS_FILE"]))
print(json.dumps({k: inputs[k]["status"] for k in ("review", "log")}))
