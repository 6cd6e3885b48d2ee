"""Compare the crates the audit lists with the crates the repository has."""
import json
import pathlib
import sys

listed = sorted(sys.argv[1:])
found = sorted(p.parent.name for p in pathlib.Path("crates").glob("*/Cargo.toml"))
missing = [c for c in found if c not in listed]
gone = [c for c in listed if c not in found]
out = {"crates": found}
if missing or gone:
    out["status"] = "fail"
    out["note"] = f"not audited: {missing or 'none'}; listed but absent: {gone or 'none'}"
print(json.dumps(out))
