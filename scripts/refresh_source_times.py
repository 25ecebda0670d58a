#!/usr/bin/env python3
"""scripts/refresh_source_times.py - makes a kept build directory rebuild what changed.

    python3 scripts/refresh_source_times.py BUILD_DIR [ROOT]

A GPU machine that keeps the ignored build directory between runs but copies the working
tree afresh for each run confuses Ninja: it rebuilds a target when one of its sources is
newer than it, and a copied file can be older than the object built from another version
of it in an earlier run (a patch applied in one run is gone in the next), so ninja keeps
the stale object: a binary measured from the wrong source, or a link that fails.

This compares the content of every source file under ROOT (default: this repository):
CMakeLists.txt, CMakePresets.json and the files in bench/, chapters/, common/, kernels/
and tests/ (tests/data included), with what BUILD_DIR/source_hashes.json recorded the
last time, and sets the modification time of each file that changed or is new to now,
so that the build that follows recompiles exactly what depends on them. Without a
record (a BUILD_DIR that does not exist yet, or one built before this script ran there)
it marks nothing and trusts the times this once. Then it writes the record.
scripts/gpu_check.sh and scripts/run_ladder.sh run it before they build. Prints one
line: how many files it marked. Exit 1, with one line, when ROOT holds none of those
sources or the record cannot be written."""
import hashlib
import json
import os
import sys
from pathlib import Path

SOURCE_FILES = ("CMakeLists.txt", "CMakePresets.json")
SOURCE_FOLDERS = ("bench", "chapters", "common", "kernels", "tests")
RECORD = "source_hashes.json"


def sources(root):
    """Every source file under root, as paths relative to it, sorted."""
    found = [Path(name) for name in SOURCE_FILES if (root / name).is_file()]
    for folder in SOURCE_FOLDERS:
        for directory, subfolders, files in os.walk(root / folder):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            found += [(Path(directory) / name).relative_to(root) for name in files
                      if not name.endswith(".pyc")]
    return sorted(found)


def content_hash(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(arguments):
    if len(arguments) not in (1, 2):
        sys.exit("usage: " + __doc__.splitlines()[2].strip())
    build = Path(arguments[0])
    root = Path(arguments[1]) if len(arguments) == 2 else Path(__file__).resolve().parents[1]
    files = sources(root)
    if not files:
        sys.exit(f"refresh_source_times.py: no sources under {root}")
    hashes = {str(name): content_hash(root / name) for name in files}
    record = build / RECORD
    known = None
    if record.is_file():
        try:
            known = json.loads(record.read_text())
        except (OSError, ValueError):
            known = {}  # an unreadable record: every source counts as changed
    changed = [] if known is None else [name for name, digest in hashes.items()
                                        if known.get(name) != digest]
    for name in changed:
        os.utime(root / name)  # now: newer than anything built from another version
    try:
        build.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(hashes, indent=0, sort_keys=True) + "\n")
    except OSError as error:
        sys.exit(f"refresh_source_times.py: cannot write {record}: {error.strerror}")
    if known is None:
        print(f"refresh_source_times.py: no record in {build}: {len(files)} sources recorded, "
              "none marked")
    else:
        print(f"refresh_source_times.py: {len(changed)} of {len(files)} sources changed since "
              f"{build}'s last build, marked newer")


if __name__ == "__main__":
    main(sys.argv[1:])
