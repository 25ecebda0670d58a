#!/usr/bin/env python3
"""tests/scripts/test_assemble_latest.py - scripts/assemble_latest.py puts the calls of one
main job into one results directory: the chapters' call's run.json and files, each
PyTorch file from the call that completed it; and refuses, with one line and exit 1, a
PyTorch file from another GPU, a file complete in two calls, a file no call completed, no
run.json, and a result directory that holds results already (unless --replace).

    python3 tests/scripts/test_assemble_latest.py

Runs on any machine: the archives are made here."""
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from script_checks import SCRIPTS, add_to_archive, expect

SCRIPT = SCRIPTS / "assemble_latest.py"


def archive(path, files):
    """A ladder.tar.gz as gpu_check.sh packs it: ladder/NAME for each {NAME: document}."""
    with tarfile.open(path, "w:gz") as packed:
        for name, document in files.items():
            add_to_archive(packed, f"ladder/{name}",
                           document if isinstance(document, str) else json.dumps(document))
    return str(path)


def run(*arguments):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, arguments)],
                          capture_output=True, text=True)


def refused(result, words, case):
    lines = result.stderr.strip().splitlines()
    expect(result.returncode == 1 and len(lines) == 1 and words in lines[0],
           f"{case}: exit {result.returncode}, {result.stderr!r}")


pytorch = lambda gpu, ms, done=True: {"device": f"{gpu} | sm_90 | 132 SMs", "complete": done,
                                      "configurations": [{"ms": ms}]}

with tempfile.TemporaryDirectory() as work:
    work = Path(work)
    chapters = archive(work / "call1.tar.gz", {
        "run.json": {"gpu": "NVIDIA H200", "git_commit": "abc1234"},
        "09_decode_matmuls.json": {"chapter": "09_decode_matmuls"},
        "console.txt": "=== 09_decode_matmuls\n"})
    cut = archive(work / "call2.tar.gz", {
        "pytorch_naive.fp32.json": pytorch("NVIDIA H200", 1.0),
        "pytorch_static_compile.bf16.json": pytorch("NVIDIA H200", 2.0, done=False)})
    rest = archive(work / "call3.tar.gz", {
        "pytorch_static_compile.bf16.json": pytorch("NVIDIA H200", 3.0)})

    latest = work / "latest"
    result = run(latest, chapters, cut, rest)
    expect(result.returncode == 0, f"assemble: exit {result.returncode}, {result.stderr}")
    names = sorted(p.name for p in latest.iterdir())
    expect(names == ["09_decode_matmuls.json", "console.txt", "pytorch_naive.fp32.json",
                     "pytorch_static_compile.bf16.json", "run.json"], f"files {names}")
    compiled = json.loads((latest / "pytorch_static_compile.bf16.json").read_text())
    expect(compiled["configurations"][0]["ms"] == 3.0, "the cut call's file won over the whole one")
    expect((latest / "console.txt").read_text() == "=== 09_decode_matmuls\n", "console.txt")

    refused(run(latest, chapters, cut, rest), "--replace", "a result directory with results")
    result = run(latest, "--replace", chapters, cut, rest)
    expect(result.returncode == 0, f"--replace: exit {result.returncode}, {result.stderr}")

    refused(run(work / "a", chapters, cut), "complete in no source", "only the cut file")
    refused(run(work / "b", chapters, rest, rest), "complete in both", "one file complete twice")
    refused(run(work / "c", cut, rest), "run.json", "no chapters' call")
    other = archive(work / "call4.tar.gz", {
        "pytorch_naive.bf16.json": pytorch("NVIDIA H100 80GB HBM3", 1.0)})
    refused(run(work / "d", chapters, other), "one machine", "a PyTorch file from another GPU")
    refused(run(work / "e", chapters, work / "missing.tar.gz"), "no archive", "a missing source")
    expect(not any((work / name).exists() for name in "abcde"),
           "a refused call wrote a result directory")
print("test_assemble_latest: the calls assembled, the cut file replaced; six refusals, one "
      "line each")
