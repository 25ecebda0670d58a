#!/usr/bin/env python3
"""scripts/check_exercise.py - tells a workshop attendee whether a chapter exercise is right.

After changing a chapter's loop for its exercise (docs/workshop.md), run

    python3 scripts/check_exercise.py 01                 # the chapter's number
    python3 scripts/check_exercise.py 02 --build build/release   # default: build/current

It rebuilds the chapter and chapter 00 (the CPU reference as a chapter), then:
  1. correctness, the part that must pass: on four workloads (the small golden model with
     BOS prompts, with per-row random prompts, with an EOS that stops the run early, and
     GPT-2 small with per-row random prompts) the chapter's tokens must equal chapter 00's
     exactly, and every step's logits within 1e-4 relative (max |a - ref| / max |ref| per
     row and step), as the repository's own tests demand;
  2. the exercise's columns: the chapter runs the exercise's configuration once more with
     --json, and the columns the exercise is about are printed beside the committed run's
     (results/latest). Where the exercise changes a count that does not depend on the
     machine (syncs/step for 01, alloc/step for 02), the count is checked too.
Chapter 12's exercise (the admission order) changes the scheduler, which is host code:
its check builds the CPU tests and bench/batching_schedule instead, runs the scheduler's
contract on the CPU reference back-end (every request's tokens equal the reference's for
that request alone) and prints the schedule's counts beside the ones chapter 12's page
quotes, checking that the median latency fell. It needs no GPU.
Exit status 0 when everything checked passed, 1 otherwise (each failure on one line).
Step 1 needs a GPU for chapters 01-06; chapters 00 and 12 are checked anywhere.
"""
import argparse
import array
import json
import pathlib
import re
import subprocess
import sys
import tempfile

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = REPOSITORY / "tests" / "data" / "golden_model"
TOLERANCE = 1e-4
REFERENCE_CHAPTER = "00_cpu_reference"

# Per exercise: the configuration to measure, the JSON columns to show, and the checks
# on counts that do not depend on the machine: (column, test(value, committed value),
# what passing means).
EXERCISES = {
    "00": {"flags": ["--batch", "1,2", "--new-tokens", "8"], "columns": ["ms_per_step"],
           "checks": []},
    "01": {"flags": ["--batch", "1,32", "--new-tokens", "100"],
           "columns": ["host_syncs_per_step", "gpu_idle_between_steps_s", "ms_per_step"],
           "checks": [("host_syncs_per_step", lambda value, committed: value <= 0.2,
                       "the flag read every k >= 8 steps (syncs/step <= 0.2)")]},
    "02": {"flags": ["--batch", "32", "--new-tokens", "100,400"],
           "columns": ["allocations_per_step", "fragmentation", "ms_per_step"],
           "checks": [("allocations_per_step",
                       lambda value, committed: committed is None or value <= committed - 20,
                       "the cache grown by doubling: at least 20 fewer allocations a step "
                       "than the committed run (its 24 a step for keys and values become "
                       "about log2(N) in all)")]},
    "04": {"flags": ["--batch", "32", "--new-tokens", "100,400"], "columns": ["ms_per_step"],
           "checks": []},
    "05": {"flags": ["--batch", "1,32", "--new-tokens", "100"],
           "columns": ["kernels_per_step", "ms_per_step"],
           "checks": [("kernels_per_step",
                       lambda value, committed: committed is None or value > committed,
                       "a fusion undone: more launches a step than the committed run")]},
    "06": {"flags": ["--batch", "1,32", "--new-tokens", "100"],
           "columns": ["gpu_idle_between_steps_s", "host_syncs_per_step", "ms_per_step"],
           "checks": []},
}

# The exercises this script does not check, and what checks them instead.
CHECKED_ELSEWHERE = {
    "03": "its exercise changes no code",
    "07": 'check it with build/current/tests/gpu_tests "[chapters]" (needs a GPU)',
    "08": 'check it with build/current/tests/gpu_tests "[chapters]" (needs a GPU)',
    "09": 'check it with build/current/tests/gpu_tests "[chapters]" (needs a GPU)',
    "10": "its exercise changes no code, and bf16 tokens are not the fp32 reference's; "
          'the bf16 chapter\'s own check is build/current/tests/gpu_tests "[chapter10]"',
}

# Chapter 12's exercise: the scheduler's contract, which a new admission order must keep
# (the CPU tests that pin the arrival order's exact schedule are left out: they fail by
# design), and the counts of bench/batching_schedule against the page's.
SCHEDULER_CONTRACT = [
    "every request's tokens equal the reference's alone*",
    "no slot is leaked and the queue drains",
    "slots are reused by many short requests among long ones",
    "Poisson arrivals: nothing is admitted before it arrives*",
]
SCHEDULE_PAGE = REPOSITORY / "chapters" / "12_continuous_batching" / "README.md"
SCHEDULE_LINE = re.compile(r"^scheduler, (static|continuous) +(\d+) steps .* latency p50 +(\d+) +"
                           r"p99 +(\d+) steps", re.MULTILINE)


def fail(message: str) -> None:
    print(f"check_exercise.py: {message}", file=sys.stderr)
    sys.exit(1)


def chapter_folder(number: str) -> str:
    matches = sorted(path.name for path in (REPOSITORY / "chapters").glob(f"{number}_*")
                     if path.is_dir())
    if len(matches) != 1:
        fail(f"no chapter {number} in chapters/ (expected one folder chapters/{number}_name)")
    return matches[0]


def run(command, what: str) -> subprocess.CompletedProcess:
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip().splitlines()
        fail(f"{what} failed (exit {result.returncode}): {output[-1] if output else ''}")
    return result


def generate(build: pathlib.Path, chapter: str, flags, directory: pathlib.Path):
    """(tokens as rows of ints, logits as a flat array) of one run of `chapter`."""
    tokens, logits = directory / f"{chapter}.tokens.txt", directory / f"{chapter}.logits.bin"
    run([build / "chapters" / chapter, *flags, "--runs", "1", "--warmup", "0", "--quiet",
         "--dump-tokens", tokens, "--dump-logits", logits], f"{chapter} {' '.join(flags)}")
    rows = [[int(value) for value in line.split()] for line in tokens.read_text().splitlines()]
    values = array.array("f")
    values.frombytes(logits.read_bytes())
    return rows, values


def relative_error(actual, expected) -> float:
    difference = max(abs(a - e) for a, e in zip(actual, expected))
    largest = max(abs(e) for e in expected)
    return difference / largest if largest > 0 else difference


def workloads(directory: pathlib.Path):
    """(name, chapter flags) of the correctness workloads."""
    eos = json.loads((GOLDEN / "greedy_eos.json").read_text())
    prompts = directory / "eos_prompts.txt"
    prompts.write_text("".join(" ".join(map(str, row)) + "\n" for row in eos["prompts"]))
    golden = ["--weights", str(GOLDEN)]
    return [
        ("golden model, BOS prompts", golden + ["--batch", "4", "--new-tokens", "24"]),
        ("golden model, random prompts", golden + ["--batch", "9", "--random-prompt-length",
                                                   "17", "--new-tokens", "64", "--seed", "6"]),
        ("golden model, early stop at EOS", golden + [
            "--prompt-file", str(prompts), "--batch", str(len(eos["prompts"])),
            "--new-tokens", str(eos["max_new_tokens"]), "--eos", str(eos["eos_override"])]),
        ("GPT-2 small, random prompts", ["--batch", "4", "--random-prompt-length", "8",
                                         "--new-tokens", "24"]),
    ]


def check_correctness(build: pathlib.Path, chapter: str, directory: pathlib.Path) -> list:
    problems = []
    for name, flags in workloads(directory):
        tokens, logits = generate(build, chapter, flags, directory)
        expected_tokens, expected_logits = generate(build, REFERENCE_CHAPTER, flags, directory)
        if tokens != expected_tokens:
            problems.append(f"{name}: the tokens differ from chapter 00's "
                            f"({len(tokens[0])} steps against {len(expected_tokens[0])})")
            continue
        if len(logits) != len(expected_logits):
            problems.append(f"{name}: {len(logits)} logits dumped, chapter 00 dumped "
                            f"{len(expected_logits)}")
            continue
        vocab = len(expected_logits) // (len(expected_tokens) * len(expected_tokens[0]))
        worst = max(relative_error(logits[start:start + vocab], expected_logits[start:start + vocab])
                    for start in range(0, len(expected_logits), vocab))
        verdict = "ok" if worst <= TOLERANCE else "FAILED"
        print(f"  {name}: tokens equal chapter 00's, largest logits error {worst:.2e}: {verdict}")
        if worst > TOLERANCE:
            problems.append(f"{name}: logits differ from chapter 00's by {worst:.2e} (> {TOLERANCE})")
    return problems


def committed_rows(chapter: str) -> dict:
    rows = {}
    for path in sorted((REPOSITORY / "results" / "latest").glob(f"{chapter}*.json")):
        for row in json.loads(path.read_text())["configurations"]:
            rows.setdefault((row["batch"], row["new_tokens"]), row)
    return rows


def committed_run() -> str:
    """Where the committed values come from: results/latest's run (commit, GPU, date)."""
    run_file = REPOSITORY / "results" / "latest" / "run.json"
    if not run_file.exists():
        return "results/latest"
    run_info = json.loads(run_file.read_text())
    return (f"results/latest: commit {run_info.get('git_commit', '?')} on "
            f"{run_info.get('gpu', '?')}, {run_info.get('date', '?')}")


def show(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def check_columns(build: pathlib.Path, chapter: str, exercise: dict,
                  directory: pathlib.Path) -> list:
    output = directory / "measured.json"
    run([build / "chapters" / chapter, *exercise["flags"], "--json", output, "--quiet"],
        f"{chapter} {' '.join(exercise['flags'])}")
    committed = committed_rows(chapter)
    if not committed:
        print(f"  results/latest holds no run of {chapter}: nothing to compare with")
    problems = []
    for row in json.loads(output.read_text())["configurations"]:
        before = committed.get((row["batch"], row["new_tokens"]), {})
        shown = ", ".join(f"{column} {show(row.get(column))} (committed {show(before.get(column))})"
                          for column in exercise["columns"])
        print(f"  B = {row['batch']}, N = {row['new_tokens']}: {shown}")
        for column, test, meaning in exercise["checks"]:
            value = row.get(column)
            if value is None or not test(value, before.get(column)):
                problems.append(f"B = {row['batch']}, N = {row['new_tokens']}: {column} is "
                                f"{show(value)}; expected {meaning}")
    return problems


def schedule_counts(text: str) -> dict:
    """{policy: (steps, p50 steps, p99 steps)} from batching_schedule's output."""
    return {match[1]: tuple(int(match[i]) for i in (2, 3, 4))
            for match in SCHEDULE_LINE.finditer(text)}


def check_scheduler_exercise(build: pathlib.Path) -> int:
    run(["cmake", "--build", build, "--target", "cpu_tests", "batching_schedule"],
        f"building cpu_tests and batching_schedule in {build}")
    problems = []
    print("scheduler: the contract on the CPU reference back-end (cpu_tests)")
    for case in SCHEDULER_CONTRACT:
        result = subprocess.run([str(build / "tests" / "cpu_tests"), case], capture_output=True,
                                text=True, check=False)
        # Catch2 exits 0 when no case matches: a renamed case must not pass unseen.
        matched = "No test cases matched" not in result.stdout
        verdict = "ok" if result.returncode == 0 and matched else "FAILED"
        print(f"  {case}: {verdict}")
        if not matched:
            problems.append(f"cpu_tests has no case '{case}'; this script needs updating")
        elif result.returncode != 0:
            problems.append(f"cpu_tests '{case}' failed (exit {result.returncode}); run it for "
                            "the details")
    print("scheduler: bench/batching_schedule beside chapter 12's page (steps, p50, p99 in steps)")
    measured = schedule_counts(run([build / "bench" / "batching_schedule"],
                                   "batching_schedule").stdout)
    page = schedule_counts(SCHEDULE_PAGE.read_text())
    for policy in ("static", "continuous"):
        now, before = measured.get(policy), page.get(policy)
        if now is None or before is None:
            problems.append(f"no '{policy}' line in batching_schedule's output or the page")
            continue
        print(f"  {policy}: {now[0]} steps, p50 {now[1]}, p99 {now[2]} "
              f"(page: {before[0]} steps, p50 {before[1]}, p99 {before[2]})")
    if "continuous" in measured and "continuous" in page and \
            not measured["continuous"][1] < page["continuous"][1]:
        problems.append("continuous batching's median latency did not fall below the arrival "
                        "order's: short requests are not admitted first")
    for problem in problems:
        print(f"check_exercise.py: 12: {problem}", file=sys.stderr)
    print(f"12_continuous_batching: {'FAILED' if problems else 'passed'}")
    return 1 if problems else 0


# Exercises that change host code only, checked by their own function.
HOST_CODE_EXERCISES = {"12": check_scheduler_exercise}


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("chapter", help="the chapter's number, e.g. 01")
    parser.add_argument("--build", type=pathlib.Path, default=REPOSITORY / "build" / "current",
                        help="the build folder (default: build/current, the preset built last)")
    args = parser.parse_args(argv)
    number = args.chapter.zfill(2)
    build = args.build.resolve()
    if number in HOST_CODE_EXERCISES:
        return HOST_CODE_EXERCISES[number](build)
    if number in CHECKED_ELSEWHERE:
        fail(f"no exercise check for chapter {number}: {CHECKED_ELSEWHERE[number]}")
    if number not in EXERCISES:
        fail(f"no exercise check for chapter {number} (there are: "
             f"{', '.join([*EXERCISES, *HOST_CODE_EXERCISES])})")
    chapter = chapter_folder(number)
    run(["cmake", "--build", build, "--target", chapter, REFERENCE_CHAPTER],
        f"building {chapter} in {build}")

    with tempfile.TemporaryDirectory(prefix="ladder-exercise-") as temporary:
        directory = pathlib.Path(temporary)
        print(f"{chapter}: correctness against chapter 00 (the CPU reference)")
        problems = check_correctness(build, chapter, directory)
        print(f"{chapter}: the exercise's columns, beside the committed run ({committed_run()})")
        problems += check_columns(build, chapter, EXERCISES[number], directory)
    for problem in problems:
        print(f"check_exercise.py: {chapter}: {problem}", file=sys.stderr)
    print(f"{chapter}: {'FAILED' if problems else 'passed'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
