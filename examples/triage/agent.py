"""A stand-in for a coding agent on the command backend: it reads the rendered prompt from
$CRUCIBLE_PROMPT, does what the task asks, and writes its answer to PLAN_TASK_RESULT.json."""
import json
import os
import re

prompt = os.environ["CRUCIBLE_PROMPT"]
task = os.environ["CRUCIBLE_TASK"]


def inputs():
    """The inputs JSON the prompt carries between its external-input markers."""
    start = prompt.index("{")
    return json.JSONDecoder().raw_decode(prompt[start:])[0]


if task.startswith("inspect["):
    item = inputs()["item"]
    text = open(os.path.join("reports", item)).read().lower()
    severity = "high" if re.search(r"data loss|outage", text) else "low"
    result = {"report": item, "severity": severity}
else:
    # The draft: a first draft covers only the first report; a revision (under "revision" in
    # the prompt) covers everything the reviewer said was missing.
    seen = inputs()
    high = seen["worst"]["high"]
    covered = high if "revision" in seen else high[:1]
    with open("FIX.md", "w") as f:
        for r in covered:
            f.write("## %s\n\nFix the cause and add an alert.\n\n" % r)
    result = {"covered": covered}
with open("PLAN_TASK_RESULT.json", "w") as f:
    json.dump(result, f)
