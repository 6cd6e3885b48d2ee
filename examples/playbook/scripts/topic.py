"""Reads the bound `topic` parameter from the inputs and passes it on as this task's output."""
import json
import os

with open(os.environ["CRUCIBLE_INPUTS_FILE"]) as f:
    inputs = json.load(f)
topic = inputs["params"].get("topic", "slag").strip()
if not topic:
    print(json.dumps({"status": "fail", "note": "the topic is empty"}))
else:
    print(json.dumps({"topic": topic}))
