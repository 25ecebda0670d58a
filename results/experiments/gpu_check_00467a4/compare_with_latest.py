#!/usr/bin/env python3
"""Each chapter's median ms a step in this run (call2/ladder/) over the committed run's
(results/latest/, session 16 at 0e39a69), per batch and N, with the token hashes compared.
python3 compare_with_latest.py > compare_with_latest.md"""
import json
import sys
from pathlib import Path

here = Path(sys.argv[0]).resolve().parent
latest = here.parents[1] / "latest"


def rows(folder, name):
    found = {}
    for suffix in (".json", ".sweep.json"):
        path = folder / (name + suffix)
        if path.exists():
            for c in json.loads(path.read_text())["configurations"]:
                found[(c["batch"], c["new_tokens"])] = (c["ms_per_step"], c["token_hash"])
    return found


print("| chapter | B | N | 0e39a69 ms/step | 00467a4 ms/step | ratio | same tokens |")
print("|---|--:|--:|--:|--:|--:|---|")
for path in sorted((here / "call2" / "ladder").glob("[0-9]*.json")):
    if path.name.endswith(".sweep.json"):
        continue
    name = path.name[:-len(".json")]
    old, new = rows(latest, name), rows(path.parent, name)
    for key in sorted(new):
        if key not in old:
            continue
        (before, old_hash), (after, new_hash) = old[key], new[key]
        print(f"| {name} | {key[0]} | {key[1]} | {before:.4f} | {after:.4f} | "
              f"{after / before:.3f} | {'yes' if old_hash == new_hash else 'NO'} |")
