#!/usr/bin/env python3
"""scripts/compare_runs.py - each chapter's ms a step in one run over another's, with the
token hashes compared: a chapters' run kept beside results/latest (a main job without its
PyTorch rows) set against the committed one.

    python3 scripts/compare_runs.py OLD NEW [--old-label L] [--new-label L] > compare.md

OLD and NEW are results folders (results/latest, or the ladder/ folder of a gpu_check.sh
`ladder` call, unpacked) holding NN_name.json and NN_name.sweep.json. One row per chapter
file of NEW and (batch, new tokens) in both; a configuration only one run holds is left
out and counted below the table. Exits 1 with one line when a folder holds no chapter file
or a file is not the JSON run_ladder.sh writes.
"""
import argparse
import json
import sys
from pathlib import Path


def configurations(folder, name):
    """{(batch, new_tokens): (ms_per_step, token_hash)} of NN_name.json and its sweep."""
    found = {}
    for suffix in (".json", ".sweep.json"):
        path = folder / (name + suffix)
        if not path.exists():
            continue
        try:
            rows = json.loads(path.read_text())["configurations"]
            for row in rows:
                found[(row["batch"], row["new_tokens"])] = (row["ms_per_step"], row["token_hash"])
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            sys.exit(f"compare_runs.py: {path} is not a chapter's results file ({error!r})")
    return found


def chapter_names(folder):
    return sorted(p.name[:-len(".json")] for p in folder.glob("[0-9][0-9]_*.json")
                  if not p.name.endswith(".sweep.json"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--old-label", default="old")
    parser.add_argument("--new-label", default="new")
    args = parser.parse_args()
    for folder in (args.old, args.new):
        if not chapter_names(folder):
            sys.exit(f"compare_runs.py: no chapter results (NN_name.json) in {folder}")
    print(f"| chapter | B | N | {args.old_label} ms/step | {args.new_label} ms/step | ratio | same tokens |")
    print("|---|--:|--:|--:|--:|--:|---|")
    unmatched = 0
    for name in chapter_names(args.new):
        old, new = configurations(args.old, name), configurations(args.new, name)
        unmatched += len(set(old) ^ set(new))
        for key in sorted(set(old) & set(new)):
            (old_ms, old_hash), (new_ms, new_hash) = old[key], new[key]
            same = "yes" if old_hash == new_hash else "NO"
            print(f"| {name} | {key[0]} | {key[1]} | {old_ms:.4f} | {new_ms:.4f} | "
                  f"{new_ms / old_ms:.3f} | {same} |")
    if unmatched:
        print(f"\n{unmatched} configurations held by only one of the two runs are left out.")


if __name__ == "__main__":
    main()
