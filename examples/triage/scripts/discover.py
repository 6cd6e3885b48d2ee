"""Lists the reports in the workspace and how many lines each has."""
import json
import os

names = sorted(n for n in os.listdir("reports") if n.endswith(".txt"))
lines = {n: len(open(os.path.join("reports", n)).read().splitlines()) for n in names}
print(json.dumps({"reports": names, "lines": lines}))
