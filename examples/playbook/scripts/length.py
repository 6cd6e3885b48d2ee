"""Grade the changelog by its length; the engine compares the score with the threshold."""
import json
import os
import pathlib

inputs = json.loads(pathlib.Path(os.environ["CRUCIBLE_INPUTS_FILE"]).read_text())
text = pathlib.Path("CHANGELOG.md").read_text()
words = len(text.split())
claimed = inputs["assemble"]["words"]
note = None if words == claimed else f"assemble claimed {claimed} words, the file has {words}"
print(json.dumps({"score": words, "pass": note is None, "note": note}))
