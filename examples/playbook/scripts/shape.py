"""Grades haiku.md: exactly three non-empty lines scores 1, anything else 0."""
import json

try:
    with open("haiku.md") as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
except FileNotFoundError:
    lines = []
score = 1 if len(lines) == 3 else 0
result = {"score": score, "lines": len(lines)}
if score == 0:
    result["note"] = f"haiku.md has {len(lines)} lines, not 3"
print(json.dumps(result))
