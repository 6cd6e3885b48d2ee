"""Read the injected notes and report which changelog sections they touch."""
import json
import pathlib

sections = set()
notes = sorted(pathlib.Path("notes").glob("*.md"))
for note in notes:
    for line in note.read_text().splitlines():
        head, sep, _ = line.partition(":")
        if sep and head.strip().isidentifier():
            sections.add(head.strip())

print(json.dumps({"sections": sorted(sections), "notes": len(notes)}))
