"""Check one crate: documented, described, tested, and free of placeholders and unexplained unsafe."""
import json
import pathlib
import re
import sys

crate = sys.argv[1]
root = pathlib.Path("crates") / crate
findings = []

manifest = (root / "Cargo.toml").read_text()
if not re.search(r'^description\s*=', manifest, re.M):
    findings.append("Cargo.toml has no description")

sources = sorted(root.rglob("*.rs"))
entry = next((p for p in (root / "src/lib.rs", root / "src/main.rs") if p.exists()), None)
if entry is None or not entry.read_text().lstrip().startswith("//!"):
    findings.append("the crate root has no //! documentation")

tests = 0
for path in sources:
    text = path.read_text()
    tests += len(re.findall(r"#\[(?:tokio::)?test\b", text))
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.search(r"\b(todo|unimplemented)!\(", line):
            findings.append(f"{path}:{i + 1}: placeholder")
        if re.search(r"\bunsafe\s*\{", line):
            context = "\n".join(lines[max(0, i - 3):i + 1])
            if "SAFETY:" not in context:
                findings.append(f"{path}:{i + 1}: unsafe without a SAFETY comment")

out = {"crate": crate, "tests": tests, "findings": findings}
if findings:
    out["status"] = "fail"
    out["note"] = f"{len(findings)} finding(s), first: {findings[0]}"
print(json.dumps(out))
