"""Count the tracked source files, their lines and their TODO/FIXME markers."""
import json
import pathlib
import subprocess

tracked = subprocess.run(
    ["git", "ls-files", "-z"], capture_output=True, check=True
).stdout.split(b"\0")
files = lines = todos = 0
for name in filter(None, tracked):
    path = pathlib.Path(name.decode(errors="replace"))
    if path.suffix not in {".rs", ".py", ".sh", ".star", ".toml", ".md"} or not path.is_file():
        continue
    text = path.read_text(errors="replace")
    files += 1
    lines += text.count("\n")
    todos += text.count("TODO") + text.count("FIXME")
print(json.dumps({"files": files, "lines": lines, "todos": todos}))
