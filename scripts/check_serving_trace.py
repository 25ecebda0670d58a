#!/usr/bin/env python3
"""scripts/check_serving_trace.py - chapter 12's tokens on its own trace, request by request.

The GPU tests hold chapter 12 to the CPU reference's bf16 mode on the small golden model.
This script does the same on the full workload, GPT-2 small (or any weights the chapters
load), where the CPU reference would take hours: every request of the trace chapter 12 serves
must get the tokens chapter 10 generates for that request's prompt, cut at the request's
limit and at its first EOS (included), as chapter 12 stops it. Chapter 12 serves with chapter
10's bf16 step, so chapter 10 is its reference: the same bf16 decode matmuls and the same
attention body (kernels/cache_attention_bf16_head.cuh), chapter 10's rows moving in step at
one cursor, chapter 12's each at its own slot and position.

    python3 scripts/check_serving_trace.py --build build/native --weights /tmp/gpt2-small-random
    python3 scripts/check_serving_trace.py --build build/native --weights DIR --rates 0,200

Steps: bench/batching_schedule writes the trace (`--write-trace`; the default is the trace
chapter 12 generates on GPT-2: 512 requests, prompts of 4-64 tokens, limits of 16-256, seed
0), once per arrival rate (the rate moves the arrivals only, not the prompts or limits);
chapter 12 serves each (`--trace`, `--dump-requests`: static batches, continuous with the
host waiting, continuous); the reference chapter runs the requests grouped by prompt length,
one process a group (`--prompt-file`, B = the group's size, N = its longest limit; rows of a
batch do not interact, and a finished row keeps decoding, so a row's tokens up to its own
limit and EOS are the request's alone). Every request of every configuration is compared.

Exit status 0 when every request's tokens are equal, 1 when one differs (each difference
named: configuration, request, its first differing position), 2 on bad arguments or a
program that fails. A bf16 greedy token can legitimately flip where the top-2 logits are
closer than one bf16 rounding can move them (should the two runs sum a value in different
orders, a stored value may land one bf16 step apart); a difference is reported with that in
mind, never hidden: the teacher-forced logits of the two runs at that position
(`bench/compare_logits`) say whether it is such a tie.
"""
import argparse
import collections
import pathlib
import subprocess
import sys
import tempfile

CONFIGURATIONS = {0: "static batches", 1: "continuous, host waits", 2: "continuous"}


def fail(message: str):
    print(f"check_serving_trace.py: {message}", file=sys.stderr)
    sys.exit(2)


def run(command: list, what: str) -> str:
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
        fail(f"{what} failed (exit {result.returncode}): " + " | ".join(tail))
    return result.stdout


def read_trace(path: pathlib.Path) -> list:
    """(max_new_tokens, prompt) per request, in the file's order (common/request_trace.hpp)."""
    requests = []
    lines = path.read_text().splitlines()
    if not lines or not lines[0].startswith("decode-ladder trace 1"):
        fail(f"{path}: not a decode-ladder trace (version 1)")
    for line in lines[1:]:
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        requests.append((int(fields[1]), [int(token) for token in fields[2:]]))
    return requests


def read_served(path: pathlib.Path) -> dict:
    """configuration -> request -> tokens, from chapter 12's --dump-requests."""
    served = collections.defaultdict(dict)
    for line in path.read_text().splitlines():
        fields = [int(field) for field in line.split()]
        configuration, request = fields[0], fields[1]
        served[configuration][request] = fields[3:]  # fields[2] is the slot
    return served


def cut(tokens: list, limit: int, eos: int) -> list:
    """The request's tokens: up to its limit, and up to and including its first EOS."""
    tokens = tokens[:limit]
    return tokens[:tokens.index(eos) + 1] if eos in tokens else tokens


def first_difference(a: list, b: list) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", type=pathlib.Path, required=True, help="the build tree")
    parser.add_argument("--weights", type=pathlib.Path, required=True,
                        help="the weights directory both chapters load")
    parser.add_argument("--rates", default="0",
                        help="arrival rates to serve, requests/s, comma-separated; 0: all at "
                             "time 0 (default 0)")
    parser.add_argument("--requests", type=int, default=512, help="requests in the trace")
    parser.add_argument("--reference", default="10_mixed_precision",
                        help="the chapter that stands in for the reference (default "
                             "10_mixed_precision, the bf16 step chapter 12 serves with)")
    parser.add_argument("--eos", type=int, default=50256, help="the EOS id (GPT-2's by default)")
    parser.add_argument("--out", type=pathlib.Path, help="keep the files here (default: a temporary folder)")
    args = parser.parse_args(argv)

    chapters = args.build / "chapters"
    serving = chapters / "12_continuous_batching"
    reference = chapters / args.reference
    schedule = args.build / "bench" / "batching_schedule"
    for program in (serving, reference, schedule):
        if not program.is_file():
            fail(f"{program}: not built (cmake --build the tree first)")
    if not (args.weights / "config.json").is_file():
        fail(f"{args.weights}: no config.json (a weights directory the chapters load)")
    out = args.out or pathlib.Path(tempfile.mkdtemp(prefix="serving_trace_"))
    out.mkdir(parents=True, exist_ok=True)

    try:
        rates = [float(rate) for rate in args.rates.split(",")]
    except ValueError:
        fail(f"--rates: '{args.rates}' is not a comma-separated list of numbers")
    if any(rate < 0 for rate in rates):
        fail("--rates: a rate is >= 0")

    traces, served = {}, {}
    for rate in rates:
        trace_path = out / f"trace.{rate:g}.txt"
        run([schedule, "--requests", args.requests, "--rate", rate, "--write-trace", trace_path],
            "bench/batching_schedule")
        traces[rate] = read_trace(trace_path)
        served_path = out / f"served.{rate:g}.txt"
        run([serving, "--weights", args.weights, "--trace", trace_path, "--eos", args.eos,
             "--dump-requests", served_path, "--json", out / f"serving.{rate:g}.json"],
            f"chapter 12 at rate {rate:g}")
        served[rate] = read_served(served_path)
        if sorted(served[rate]) != sorted(CONFIGURATIONS):
            fail(f"{served_path}: configurations {sorted(served[rate])}, expected "
                 f"{sorted(CONFIGURATIONS)}")
    trace = traces[rates[0]]
    if any(other != trace for other in traces.values()):
        fail("the traces of the rates hold different prompts or limits")

    groups = collections.defaultdict(list)  # prompt length -> request indices
    for index, (_, prompt) in enumerate(trace):
        groups[len(prompt)].append(index)
    expected = {}
    for length, indices in sorted(groups.items()):
        prompts = out / f"prompts.{length}.txt"
        prompts.write_text("".join(" ".join(map(str, trace[i][1])) + "\n" for i in indices))
        tokens_path = out / f"reference.{length}.txt"
        run([reference, "--weights", args.weights, "--prompt-file", prompts, "--batch", len(indices),
             "--new-tokens", max(trace[i][0] for i in indices), "--eos", args.eos, "--runs", 1,
             "--warmup", 0, "--quiet", "--dump-tokens", tokens_path],
            f"{args.reference} on the prompts of length {length}")
        rows = [[int(token) for token in line.split()] for line in tokens_path.read_text().splitlines()]
        if len(rows) != len(indices):
            fail(f"{tokens_path}: {len(rows)} rows for {len(indices)} prompts")
        for i, row in zip(indices, rows):
            expected[i] = cut(row, trace[i][0], args.eos)

    differences = 0
    for rate in rates:
        for configuration, name in CONFIGURATIONS.items():
            label = f"rate {rate:g}, {name}"
            equal = 0
            for i in range(len(trace)):
                got = served[rate][configuration].get(i)
                if got == expected[i]:
                    equal += 1
                    continue
                differences += 1
                if got is None:
                    print(f"{label}: request {i}: not served")
                else:
                    at = first_difference(got, expected[i])
                    print(f"{label}: request {i} (prompt {len(trace[i][1])}, limit {trace[i][0]}): "
                          f"{len(got)} tokens against {len(expected[i])}, first difference at "
                          f"new token {at}")
            print(f"{label}: {equal} of {len(trace)} requests equal {args.reference}'s tokens")
    print(f"files in {out}")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
