#!/usr/bin/env python3
"""scripts/assemble_latest.py - one results directory from the calls a main job took.

    python3 scripts/assemble_latest.py results/latest CALL1/ladder.tar.gz CALL2/ladder.tar.gz ...
    python3 scripts/render_results.py results/latest

A main job may run in several calls on a GPU machine: `scripts/gpu_check.sh ladder` writes the
chapters' files and run.json, and `scripts/gpu_check.sh pytorch` (once per precision, or
cut by its time limit and run again) writes the pytorch_*.json files, each call into its
own ladder.tar.gz. Each SOURCE is such an archive or a folder holding the files (directly
or under ladder/). The result directory gets:
  - run.json and console.txt from the one source that has them (the chapters' call);
  - every NN_name*.json and pytorch_*.json; where two sources hold the same file, the
    complete one ("complete": true, or no such key) wins over an incomplete one (a call
    cut by its limit); two complete ones are refused, as is a file no source completed.
Refused too, before anything is written: a PyTorch file from another GPU than run.json's
(one table compares one machine's runs), and a result directory that holds JSON already
(pass --replace to empty it first). Each refusal is one line and exit status 1.
"""
import argparse
import json
import sys
import tarfile
from pathlib import Path


class Refused(Exception):
    """A reason not to assemble, as one line."""


def read_source(source):
    """{file name: text} of the results in one archive or folder."""
    wanted = lambda name: name.endswith(".json") or name == "console.txt"
    path = Path(source)
    if path.is_dir():
        folder = path / "ladder" if (path / "ladder").is_dir() else path
        return {p.name: p.read_text() for p in folder.iterdir() if p.is_file() and wanted(p.name)}
    if not path.is_file():
        raise Refused(f"no archive or folder {source}")
    try:
        with tarfile.open(path) as archive:
            return {Path(m.name).name: archive.extractfile(m).read().decode()
                    for m in archive.getmembers() if m.isfile() and wanted(Path(m.name).name)}
    except (tarfile.TarError, OSError, UnicodeDecodeError) as error:
        raise Refused(f"{source} is not a readable archive ({error})") from None


def parse(name, source, text):
    if name == "console.txt":
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise Refused(f"{name} in {source} is not JSON ({error})") from None


def complete(document):
    return document is None or document.get("complete", True) is not False


def assemble(sources):
    """{file name: (source, text)}: the files the result directory gets."""
    chosen = {}
    for source in sources:
        for name, text in sorted(read_source(source).items()):
            document = parse(name, source, text)
            if name in chosen:
                earlier_source, earlier_text = chosen[name]
                earlier_complete = complete(parse(name, earlier_source, earlier_text))
                if complete(document) and earlier_complete:
                    raise Refused(f"{name} is complete in both {earlier_source} and {source}: "
                                  "keep one of the two calls")
                if not complete(document):
                    continue  # the earlier one is complete, or both are cut: keep the first
            chosen[name] = (source, text)
    if "run.json" not in chosen:
        raise Refused("no source has run.json: give the chapters' call (gpu_check.sh ladder)")
    for name, (source, text) in chosen.items():
        if not complete(parse(name, source, text)):
            raise Refused(f"{name} is incomplete in {source} and complete in no source")
    gpu = json.loads(chosen["run.json"][1]).get("gpu", "")
    for name, (source, text) in chosen.items():
        device = json.loads(text).get("device", "") if name.startswith("pytorch_") else ""
        if device and gpu and not device.startswith(gpu + " "):
            raise Refused(f"{name} ran on '{device.split(' | ')[0]}' ({source}), "
                          f"the chapters on '{gpu}' (run.json): one table, one machine")
    return chosen


def main(argv):
    parser = argparse.ArgumentParser(prog="assemble_latest.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="the result directory (results/latest)")
    parser.add_argument("sources", nargs="+", help="ladder.tar.gz archives or folders")
    parser.add_argument("--replace", action="store_true",
                        help="remove the JSON and console.txt the result directory holds first")
    args = parser.parse_args(argv)
    try:
        chosen = assemble(args.sources)
        old = [p for p in args.results.glob("*") if p.suffix == ".json" or p.name == "console.txt"] \
            if args.results.is_dir() else []
        if old and not args.replace:
            raise Refused(f"{args.results} holds {len(old)} result files already: "
                          "pass --replace to empty it first")
    except Refused as reason:
        print(f"assemble_latest.py: {reason}", file=sys.stderr)
        return 1
    for path in old:
        path.unlink()
    args.results.mkdir(parents=True, exist_ok=True)
    for name, (source, text) in sorted(chosen.items()):
        (args.results / name).write_text(text)
        print(f"{name:48} from {source}")
    print(f"{len(chosen)} files in {args.results}; next: python3 scripts/render_results.py "
          f"{args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
