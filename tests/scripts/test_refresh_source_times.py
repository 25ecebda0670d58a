#!/usr/bin/env python3
"""tests/scripts/test_refresh_source_times.py - scripts/refresh_source_times.py marks
newer exactly the sources whose content changed since a build directory's record: none
on a first run (it writes the record), a changed file and a new one after it (even when
they carry old times, as a tree copied onto a warm GPU machine does), every source when
the record is unreadable, nothing outside the source folders; and refuses a root without
sources with one line and exit 1.

    python3 tests/scripts/test_refresh_source_times.py

Runs on any machine, in a scratch folder."""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from script_checks import SCRIPTS, expect

SCRIPT = SCRIPTS / "refresh_source_times.py"
OLD = 1_000_000_000  # 2001: older than any build


def run(build, root):
    return subprocess.run([sys.executable, str(SCRIPT), str(build), str(root)],
                          capture_output=True, text=True)


def write(root, name, text):
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (OLD, OLD))


def marked(root, names):
    """The names among `names` whose time is no longer OLD."""
    return sorted(name for name in names if (root / name).stat().st_mtime != OLD)


def main():
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "tree"
        build = root / "build" / "native"
        names = ["CMakeLists.txt", "kernels/a.cu", "common/b.hpp", "tests/data/weights.bin",
                 "docs/page.md"]
        for name in names:
            write(root, name, f"{name} v1\n")

        result = run(build, root)
        expect(result.returncode == 0 and "none marked" in result.stdout,
               f"first run: exit {result.returncode}, {result.stdout!r} {result.stderr!r}")
        expect(marked(root, names) == [], f"first run marked {marked(root, names)}")
        expect((build / "source_hashes.json").is_file(), "first run wrote no record")

        result = run(build, root)
        expect(result.returncode == 0 and "0 of 4 sources changed" in result.stdout,
               f"unchanged tree: {result.stdout!r} {result.stderr!r}")
        expect(marked(root, names) == [], f"unchanged tree marked {marked(root, names)}")

        # Another version of one file and a new one, both with old times, and a changed
        # file outside the sources.
        write(root, "kernels/a.cu", "kernels/a.cu v2\n")
        write(root, "chapters/c.cpp", "new\n")
        write(root, "docs/page.md", "docs v2\n")
        before = time.time() - 1
        result = run(build, root)
        expect(result.returncode == 0 and "2 of 5 sources changed" in result.stdout,
               f"changed tree: {result.stdout!r} {result.stderr!r}")
        now_marked = marked(root, names + ["chapters/c.cpp"])
        expect(now_marked == ["chapters/c.cpp", "kernels/a.cu"], f"changed tree marked {now_marked}")
        expect(all((root / name).stat().st_mtime >= before for name in now_marked),
               "a marked file is not newer than the run")

        for name in names + ["chapters/c.cpp"]:
            os.utime(root / name, (OLD, OLD))
        (build / "source_hashes.json").write_text("not json")
        result = run(build, root)
        expect(result.returncode == 0 and "5 of 5 sources changed" in result.stdout,
               f"unreadable record: {result.stdout!r} {result.stderr!r}")

        empty = Path(scratch) / "empty"
        empty.mkdir()
        result = run(empty / "build", empty)
        lines = result.stderr.strip().splitlines()
        expect(result.returncode == 1 and len(lines) == 1 and "no sources" in lines[0],
               f"no sources: exit {result.returncode}, {result.stderr!r}")


if __name__ == "__main__":
    main()
