#!/usr/bin/env python3
"""scripts/kernel_report.py - what every kernel on a chapter's path costs, from the
compiled code: registers, spills, shared memory, launch configuration, theoretical
occupancy, the width of its global loads and stores, tensor-core instructions; beside
the bytes it must move per step and what the committed CUPTI trace says it took.

    python3 scripts/kernel_report.py --build build/ci           # writes docs/kernels.md
    python3 scripts/kernel_report.py --build build/ci --check   # the CTest check

Needs a built tree (the kernels, tests/kernel_launch_configs, tests/kernel_occupancy)
and cuobjdump (the CUDA toolkit's, or pip's nvidia-cuda-cuobjdump); no GPU. It reads:
  * the objects of ladder_kernels and of every chapter target: `cuobjdump -res-usage`
    (registers, local memory, static shared memory) and `cuobjdump -sass`, for every
    kernel in them - a new kernel file is picked up without edits here;
  * tests/kernel_launch_configs: the launch each launcher makes for GPT-2 small at
    B = 32 (the launcher's own code, called with the chapters' shapes; its questions of
    a kernel's residency answered for sm_90 from the registers and static shared memory
    read here, so plans that depend on it are the H200's);
  * tests/kernel_occupancy: cuda_occupancy.h's resident blocks per SM on each preset
    architecture;
  * chapters/NN_*/: the chapters; results/profile/NN_*.kernel_profile.txt: the kernels
    each one launched, their GPU time (CUPTI) and the copy bandwidth of that run (else
    results/latest/NN_*.json's); results/ncu/NN_*.csv, once committed: Nsight Compute's
    measurements (scripts/profile_kernels.sh).
The check (--check) fails when a kernel on a chapter's path uses local memory (spills;
more than a line `// Spills: at most N bytes ...` just above the kernel allows, where
its comment says why the spills measured faster than a larger register budget), when one of ours has no recorded launch (no launch configuration, no occupancy), when a
launcher a chapter calls is not recorded by tests/kernel_launch_configs,
when a kernel's SASS lacks an instruction its comment promises (a line
`// Promises (kWidth = 4): LDG.E.128 STG.E.128` just above the kernel) or has two in
another order than it promises (`LDG.E.128<ACQBULK`: the first LDG.E.128 before the
first ACQBULK, a programmatic launch's weight loads issued before its wait), or when
docs/kernels.md is not what this script writes.
"""

import argparse
import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join(ROOT, "docs", "kernels.md")
PRESET_ARCHITECTURES = [80, 86, 89, 90]  # CMakePresets.json's release preset
REPORT_ARCHITECTURE = 90  # the objects' architecture the columns show (the H200's)

# GPT-2 small at the default workload: B = 32 rows, BOS prompt, 100 new tokens.
B, C, H, V = 32, 768, 12, 50257
NEW_TOKENS = 100
CAPACITY = 1 + NEW_TOKENS
MEAN_LENGTH = 51  # valid cache positions, mean over the decode steps (2 .. 100)
MEAN_SEQUENCE = 50.5  # tokens per row in the naive chapter's forward, mean over its steps
FLOAT = 4

# Bytes a kernel must move per launch (fp32): what it must read and write at least,
# R rows of C features, L valid cache positions. Keyed by the kernel's name without
# namespace and template arguments; a kernel missing here shows "-".
TRAFFIC = {
    "layernorm_row_kernel": ("(2RC + 2C) x 4, with the residual (4RC + 2C) x 4",
                             lambda R, L, residual: (4 * R * C if residual else 2 * R * C) + 2 * C),
    "residual_add_kernel": ("3RC x 4", lambda R, L, residual: 3 * R * C),
    "gelu_kernel": ("8RC x 4 (4C columns)", lambda R, L, residual: 8 * R * C),
    "add_bias_kernel": ("(6RC + 3C) x 4 (3C columns)", lambda R, L, residual: 6 * R * C + 3 * C),
    "embedding_kernel": ("3RC x 4", lambda R, L, residual: 3 * R * C),
    "store_kv_kernel": ("4RC x 4", lambda R, L, residual: 4 * R * C),
    "grow_kv_cache_kernel": ("4BCL x 4 (old cache in, new cache out)",
                             lambda R, L, residual: 4 * B * C * L),
    "decode_attention_kernel": ("BC(2L + 2) x 4", lambda R, L, residual: B * C * (2 * L + 2)),
    "static_cache_attention_kernel": ("BC(2L + 2) x 4 (it reads all 101 positions)",
                                      lambda R, L, residual: B * C * (2 * L + 2)),
    "fused_decode_attention_kernel": ("BC(2L + 4) x 4", lambda R, L, residual: B * C * (2 * L + 4)),
    "causal_attention_kernel": ("4RC x 4", lambda R, L, residual: 4 * R * C),
    "argmax_step_kernel": ("BV x 4", lambda R, L, residual: B * V),
    "all_finished_kernel": ("B x 4", lambda R, L, residual: B),
}


def fail(message):
    print(f"kernel_report.py: error: {message}", file=sys.stderr)
    sys.exit(1)


def find_tool(name):
    """A CUDA binary tool: on PATH, beside nvcc, or from pip's nvidia-cuda-* wheel."""
    found = shutil.which(name)
    if found:
        return found
    nvcc = shutil.which("nvcc")
    candidates = [os.path.join(os.path.dirname(nvcc), name)] if nvcc else []
    for entry in sys.path:
        candidates += glob.glob(os.path.join(entry, "nvidia", "cu*", "bin", name))
        candidates += glob.glob(os.path.join(entry, "nvidia", "cuda_*", "bin", name))
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    fail(f"{name} not found (python3 -m pip install nvidia-cuda-{name}, or run "
         "scripts/install_dependencies.sh)")


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"{' '.join(command)} failed: {result.stderr.strip()[:300]}")
    return result.stdout


def demangle(names):
    if not names:
        return {}
    output = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                            check=True).stdout.splitlines()
    return dict(zip(names, output))


def short_name(name):
    """'void ladder::(anonymous namespace)::k<4, 1>(float*, ...)' -> 'k<4, 1>'."""
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"(?:<|\b)unnamed>::", "", name)  # ncu's spelling of the same namespace
    if name.startswith("void "):
        name = name[len("void "):]
    name = name.split("(")[0].strip()
    return name[len("ladder::"):] if name.startswith("ladder::") else name


def base_name(name):
    return short_name(name).split("<")[0]


# ---------------------------------------------------------------- the compiled objects

def kernel_objects(build):
    objects = glob.glob(os.path.join(build, "CMakeFiles", "ladder_kernels.dir", "**", "*.o"),
                        recursive=True)
    for chapter in chapters():
        objects += glob.glob(os.path.join(build, "CMakeFiles", f"{chapter}.dir", "**", "*.o"),
                             recursive=True)
    return sorted(objects)


def resource_usage(cuobjdump, obj):
    """{(arch, mangled): {'REG': n, 'STACK': n, 'SHARED': n, 'LOCAL': n}} of one object."""
    result = subprocess.run([cuobjdump, "-res-usage", obj], capture_output=True, text=True)
    if result.returncode != 0:
        return {}  # host code only
    usage = {}
    arch = None
    function = None
    for line in result.stdout.splitlines():
        match = re.match(r"\s*arch = sm_(\d+)", line)
        if match:
            arch = int(match.group(1))
        match = re.match(r"\s*Function (\S+):", line)
        if match:
            function = match.group(1)
            continue
        if function and "REG:" in line:
            usage[(arch, function)] = {key: int(value)
                                       for key, value in re.findall(r"(\w+):(\d+)", line)}
            function = None
    return usage


SASS_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def sass_instructions(cuobjdump, obj):
    """{(arch, mangled): (Counter(opcode), {opcode: its first instruction's index})} of one
    object."""
    result = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True)
    if "nvdisasm" in result.stderr:  # cuobjdump -sass runs it: without it, no SASS at all
        fail(f"{cuobjdump} -sass needs nvdisasm beside it or on PATH (python3 -m pip install "
             "nvidia-cuda-nvdisasm, or run scripts/install_dependencies.sh)")
    if result.returncode != 0:  # an object without device code
        return {}
    instructions = {}
    arch = None
    current = None
    for line in result.stdout.splitlines():
        match = re.match(r"\s*arch = sm_(\d+)", line)
        if match:
            arch = int(match.group(1))
            continue
        match = re.match(r"\s*Function : (\S+)", line)
        if match:
            current = instructions.setdefault((arch, match.group(1)), (Counter(), {}))
            continue
        match = SASS_INSTRUCTION.search(line)
        if match and current is not None:
            counts, first = current
            first.setdefault(match.group(1), sum(counts.values()))
            counts[match.group(1)] += 1
    return instructions


def access_widths(opcodes, prefix):
    """'128 x6, 32 x2': global accesses (LDG or STG) by width in bits."""
    widths = Counter()
    for opcode, count in opcodes.items():
        parts = opcode.split(".")
        if parts[0] != prefix:
            continue
        width = 32
        for part in parts[1:]:
            if part in ("64", "128"):
                width = int(part)
            elif part in ("U8", "S8"):
                width = 8
            elif part in ("U16", "S16"):
                width = 16
        widths[width] += count
    return ", ".join(f"{width} x{count}" for width, count in sorted(widths.items(), reverse=True)) \
        or "-"


TENSOR_CORE = re.compile(r"^(HMMA|HGMMA|IMMA|IGMMA|DMMA|QMMA|QGMMA|BMMA|OMMA|UTCHMMA|UTCQMMA)")


def tensor_core_instructions(opcodes):
    found = Counter()
    for opcode, count in opcodes.items():
        match = TENSOR_CORE.match(opcode)
        if match:
            found[match.group(1)] += count
    return ", ".join(f"{name} x{count}" for name, count in sorted(found.items())) or "-"


def uses_local_memory(usage, opcodes):
    return usage.get("LOCAL", 0) > 0 or usage.get("STACK", 0) > 0 or any(
        opcode.split(".")[0] in ("LDL", "STL") for opcode in opcodes)


# One promise: an opcode (`LDG.E.128`, `UCGABAR_ARV`), or two in order (`LDG.E.128<ACQBULK`).
PROMISE = re.compile(r"\b[A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)*(?:<[A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)*)?\b")


def kernel_sources():
    sources = glob.glob(os.path.join(ROOT, "kernels", "*.cu"))
    sources += glob.glob(os.path.join(ROOT, "chapters", "*", "*.cu"))
    return [open(source, encoding="utf-8").read() for source in sorted(sources)]


def kernel_after(text, position):
    """The name of the first __global__ kernel declared after `position`, or None."""
    kernel_at = text.find("__global__", position)
    if kernel_at < 0:
        return None
    declaration = re.sub(r"__launch_bounds__\s*\([^)]*\)", "",
                         text[kernel_at + len("__global__"):kernel_at + 400])
    name = re.search(r"(\w+)\s*\(", declaration)
    return name.group(1) if name else None


def promised_instructions():
    """{kernel base name: [opcode, ...]} from a `// Promises: ...` line above a kernel."""
    promises = {}
    for text in kernel_sources():
        for match in re.finditer(r"//\s*Promises([^:\n]*):([^\n]*)", text):
            name = kernel_after(text, match.end())
            if name:
                promises[name] = PROMISE.findall(match.group(2))
                if not match.group(1).strip():
                    UNQUALIFIED_PROMISES.add(name)
    return promises


SPILLS = re.compile(r"//\s*Spills:\s*at most\s+([0-9]+)\s+bytes")


def spill_leaves(text):
    """{kernel base name: bytes} from `// Spills: at most N bytes ...` lines above kernels in
    `text`: the local memory a kernel may use, where its comment says why (a register
    budget that measured faster with the spills than without)."""
    leaves = {}
    for match in SPILLS.finditer(text):
        name = kernel_after(text, match.end())
        if name:
            leaves[name] = int(match.group(1))
    return leaves


def declared_spills():
    leaves = {}
    for text in kernel_sources():
        leaves.update(spill_leaves(text))
    return leaves


def spill_problem(name, info, leaves):
    """What is wrong with a kernel's local memory, or None: any at all, unless its
    `// Spills:` line allows that much."""
    if not info["spills"]:
        return None
    allowed = leaves.get(base_name(name), 0)
    if allowed and info["local"] <= allowed:
        return None
    over = f", over the {allowed} its `// Spills:` line allows" if allowed else ""
    return f"{name} uses {info['local']} bytes of local memory (spills{over})"


# Kernels whose `// Promises:` line names no template case ("(kWidth = 4)"): the promise
# holds for every instantiation, so the check holds every built one to it, on a
# chapter's path or not (the decode matmuls, the bf16 kernels of the chapter to come).
UNQUALIFIED_PROMISES = set()


# ---------------------------------------------------------------- launches, occupancy

def launch_configurations(build, kernels):
    """{short kernel name: [(workload, launcher, grid, block, dynamic shared)]}. `kernels`
    (collect's) gives the program each kernel's registers and static shared memory, by
    the offset of its host stub, for the residency the decode matmuls ask of it."""
    program = os.path.join(build, "tests", "kernel_launch_configs")
    if not os.path.exists(program):
        fail(f"{program} not built (cmake --build {build} --target kernel_launch_configs)")
    symbols = {}
    anchor = None
    for line in run(["nm", program]).splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1] in "tT":
            symbols[int(fields[0], 16)] = fields[2]
            if fields[2] == "kernel_report_anchor":
                anchor = int(fields[0], 16)
    if anchor is None:
        fail(f"kernel_report_anchor not found in {program}")
    # The host stubs' names differ from the device functions' in their mangling (a kernel
    # in an anonymous namespace gets an internal-linkage mark), so they meet by short name.
    bases = {base_name(name) for name in kernels}
    stubs = [mangled for mangled in symbols.values() if any(base in mangled for base in bases)]
    stub_names = demangle(sorted(set(stubs)))
    with tempfile.NamedTemporaryFile("w", suffix=".resources.txt") as resources:
        for address, mangled in sorted(symbols.items()):
            info = kernels.get(short_name(stub_names[mangled])) if mangled in stub_names else None
            if info is not None:
                resources.write(f"{address - anchor} {info['registers']} {info['shared']}\n")
        resources.flush()
        lines = run([program, resources.name]).splitlines()
    records = []
    for line in lines:
        workload, launcher, offset, grid, block, shared = line.split("\t")
        address = anchor + int(offset)
        if address not in symbols:
            fail(f"{launcher}: launched something at {address:#x} that nm cannot name")
        records.append((symbols[address], workload, launcher, grid, block, int(shared)))
    names = demangle(sorted({record[0] for record in records}))
    configurations = defaultdict(list)
    for mangled, workload, launcher, grid, block, shared in records:
        configurations[short_name(names[mangled])].append((workload, launcher, grid, block, shared))
    return configurations


def occupancies(build, requests):
    """requests: [(arch, registers, static shared, threads, dynamic shared)] -> results."""
    program = os.path.join(build, "tests", "kernel_occupancy")
    if not os.path.exists(program):
        fail(f"{program} not built (cmake --build {build} --target kernel_occupancy)")
    text = "".join(" ".join(str(value) for value in request) + "\n" for request in requests)
    result = subprocess.run([program], input=text, capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"kernel_occupancy failed: {result.stderr.strip()}")
    answers = {}
    for request, line in zip(requests, result.stdout.splitlines()):
        blocks, warps, max_warps, limiter = line.split()
        answers[request] = (int(blocks), int(warps), int(max_warps), limiter)
    return answers


# ---------------------------------------------------------------- chapters and results

def chapters():
    folders = glob.glob(os.path.join(ROOT, "chapters", "[0-9][0-9]_*"))
    return sorted(os.path.basename(path) for path in folders if os.path.isdir(path))


def chapter_title(chapter):
    path = os.path.join(ROOT, "results", "latest", f"{chapter}.json")
    if os.path.exists(path):
        return json.load(open(path, encoding="utf-8")).get("title", chapter)
    return chapter


def traced_kernels(chapter):
    """[(name, us per step, launches per step)] of the default run's CUPTI trace, or None."""
    path = os.path.join(ROOT, "results", "profile", f"{chapter}.kernel_profile.txt")
    if not os.path.exists(path):
        return None
    kernels = []
    inside = False
    for line in open(path, encoding="utf-8"):
        if "by kernel:" in line:
            if inside:
                break
            inside = True
            continue
        match = re.match(r"\s+([\d.]+) us/step\s+([\d.]+) launches/step\s+(.*)$", line)
        if inside and match:
            kernels.append((match.group(3).strip(), float(match.group(1)), float(match.group(2))))
        elif inside and kernels:
            break
    return kernels


def copy_bandwidth(chapter):
    """The copy bandwidth of the run that traced the chapter (its kernel profile's line), so
    the trace's times are set against their own GPU; else results/latest's."""
    profile = os.path.join(ROOT, "results", "profile", f"{chapter}.kernel_profile.txt")
    if os.path.exists(profile):
        with open(profile, encoding="utf-8") as handle:
            match = re.search(r"copy bandwidth measured in this run: ([\d.]+) TB/s", handle.read())
        if match:
            return float(match.group(1)) * 1e12
    path = os.path.join(ROOT, "results", "latest", f"{chapter}.json")
    if not os.path.exists(path):
        return None
    return json.load(open(path, encoding="utf-8")).get("copy_bandwidth_bytes_per_s")


def ncu_copy_bandwidth(chapter):
    """The copy bandwidth of the main-job run results/ncu was profiled beside
    (results/ncu/run.json, which scripts/profile_kernels.sh copies), else copy_bandwidth's."""
    path = os.path.join(ROOT, "results", "ncu", "run.json")
    if os.path.exists(path):
        return json.load(open(path, encoding="utf-8")).get("copy_bandwidth_bytes_per_s")
    return copy_bandwidth(chapter)


def measured_by_ncu(chapter):
    """{short kernel name: row} from results/ncu/<chapter>.csv (scripts/profile_kernels.sh)."""
    path = os.path.join(ROOT, "results", "ncu", f"{chapter}.csv")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return {ncu_key(row["kernel"]): row for row in csv.DictReader(handle)}


def ncu_key(name):
    """ncu spells a kernel's bool template arguments 0 and 1 where cuobjdump and CUPTI say
    false and true: one spelling to match them by."""
    return re.sub(r"\bfalse\b", "0", re.sub(r"\btrue\b", "1", short_name(name)))


def kernel_launchers():
    """The launchers kernels/*.cuh declare (`void launch_xxx(`)."""
    names = set()
    for header in glob.glob(os.path.join(ROOT, "kernels", "*.cuh")):
        names.update(re.findall(r"\bvoid\s+(launch_\w+)\s*\(",
                                open(header, encoding="utf-8").read()))
    return names


def chapter_launchers(chapter):
    """The kernel launchers a chapter's step calls: in its sources, and in the common/
    headers they include (a step context such as common/decode_step_context.hpp calls
    the launchers for the chapter)."""
    text = ""
    for source in sorted(glob.glob(os.path.join(ROOT, "chapters", chapter, "*.c*"))):
        source_text = open(source, encoding="utf-8").read()
        text += source_text
        for header in re.findall(r'#include\s+"(common/\w+\.hpp)"', source_text):
            path = os.path.join(ROOT, header)
            if os.path.exists(path):
                text += open(path, encoding="utf-8").read()
    return set(re.findall(r"\b(launch_\w+)\s*\(", text)) & kernel_launchers()


def chapter_path(chapter, configurations):
    """The kernels of a chapter's step: [(short name, us/step, launches/step, ours)] from its
    committed CUPTI trace; without one, the kernels of the launchers its source calls (no
    time or launches), and the launchers tests/kernel_report/launch_configs.cpp does not
    call. Returns (rows, traced, unrecorded launchers)."""
    traced = traced_kernels(chapter)
    if traced is not None:
        return [(short_name(name), us, launches, "ladder::" in name)
                for name, us, launches in traced], True, []
    launchers = chapter_launchers(chapter)
    recorded = {record[1] for records in configurations.values() for record in records}
    names = sorted({kernel for kernel, records in configurations.items()
                    for record in records if record[1] in launchers})
    return [(name, None, None, True) for name in names], False, sorted(launchers - recorded)


# ---------------------------------------------------------------- the page

def format_bytes(count):
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} B"


def render(build, kernels, configurations, occupancy_of, promises):
    lines = [
        "# Kernels: what each chapter's step launches, and what the compiled code says {#kernels}",
        "",
        "<!-- Generated by scripts/kernel_report.py from the built objects and the committed",
        "     results; do not edit by hand (CTest runs it with --check). -->",
        "",
        "Per chapter, every kernel of its step at the default workload (GPT-2 small, B = 32,",
        f"BOS prompt, {NEW_TOKENS} new tokens): launches per step and GPU time from the committed",
        "CUPTI trace (`results/profile/`), and from the compiled code (`cuobjdump -res-usage` and",
        f"`cuobjdump -sass` of the sm_{REPORT_ARCHITECTURE} objects):",
        "",
        "- **launch**: grid x block the launcher chooses for these shapes (asked of the launcher",
        "  itself by `tests/kernel_report/launch_configs.cpp`); a whole-sequence launch (the naive",
        "  chapter's forward, at its mean length of 51 tokens) is marked *seq*.",
        "- **regs**: registers per thread; **local**: local memory per thread in bytes (spills;",
        "  CTest fails on any kernel of a chapter's path that has some, beyond what a",
        "  `// Spills: at most N bytes` line above the kernel allows and explains); **shared**:",
        "  static + dynamic shared memory per block.",
        "- **occupancy**: resident warps per SM as a share of the SM's maximum, from the toolkit's",
        "  `cuda_occupancy.h` on the preset architectures sm_80 / 86 / 89 / 90, with the",
        f"  sm_{REPORT_ARCHITECTURE} build's registers and shared memory (other architectures' own",
        "  register counts can differ); the limiter on sm_90 after it.",
        "- **loads**, **stores**: global memory instructions in the SASS, by width in bits",
        "  (`128 x6`: six 16-byte instructions); **MMA**: tensor-core instructions.",
        "- **must move**: bytes the kernel has to read and write per step at this workload (its",
        "  minimal traffic, formula below), **took**: CUPTI's GPU time per step, and the bandwidth",
        "  the two imply as a share of the copy bandwidth measured in the same run (above 100%:",
        "  the data came from the L2 cache, 50 MB on the H200, where the kernel before left it).",
        "- **ncu**: Nsight Compute on one step halfway through the run (chapters 08 on, whose",
        "  loop runs inside a conditional graph node that ncu does not profile kernel by kernel:",
        "  the plain prefill of the first generation, the same products on the same shapes at",
        "  the default one-token prompt): GPU time, DRAM bytes read + written (and the bandwidth",
        "  they imply as a share of the copy bandwidth), achieved occupancy. ncu runs each kernel",
        "  alone with its clocks at base and the caches flushed, so its times are longer than",
        "  the trace's; its DRAM bytes are the kernel's own. \"not measured\" until",
        "  `scripts/profile_kernels.sh` has run on the GPU and its `results/ncu/` files are",
        "  committed.",
        "",
        "Library kernels (cuBLASLt's matmuls) have no objects here; their rows show the trace",
        "only.",
        "",
    ]
    for chapter in chapters():
        rows, traced, unrecorded = chapter_path(chapter, configurations)
        bandwidth = copy_bandwidth(chapter)
        ncu = measured_by_ncu(chapter)
        lines += [f"## {chapter} ({chapter_title(chapter)})", ""]
        if not traced:
            lines += ["No CUPTI trace committed (`results/profile/" + chapter +
                      ".kernel_profile.txt`): the kernels of the launchers its source calls,",
                      "without launches or time.", ""]
        if unrecorded:
            lines += ["Launchers it calls that `tests/kernel_report/launch_configs.cpp` does not "
                      "record (their kernels are missing below): " +
                      ", ".join(f"`{name}`" for name in unrecorded) + ".", ""]
        sequence_chapter = any(base_name(name) == "causal_attention_kernel" and (launches or 0) >= 1
                               for name, _, launches, _ in rows)
        if ncu is None:
            lines += ["ncu: not measured (no `results/ncu/" + chapter + ".csv` committed).", ""]
        lines += ["| kernel | launches/step | launch | regs | local | shared | "
                  "occupancy 80/86/89/90 % (sm_90 limiter) | loads | stores | MMA | must move | "
                  "took | implied bandwidth | ncu |",
                  "|---|---:|---|---:|---:|---:|---|---|---|---|---:|---:|---:|---|"]
        for name, us, launches, ours in rows:
            info = kernels.get(name)
            launches_text = f"{launches:.1f}" if launches is not None else "-"
            took_text = f"{us:.1f} us" if us is not None else "-"
            ncu_text = ncu_cell(ncu, name, ncu_copy_bandwidth(chapter))
            if info is None:
                owner = ("not in this build: renamed or removed since the trace" if ours
                         else "library")
                lines.append(f"| `{abbreviate(name)}` ({owner}) | {launches_text} "
                             f"| | | | | | | | | | {took_text} | | {ncu_text} |")
                continue
            launch_text = launch_cell(configurations.get(name, []), sequence_chapter)
            occupancy_text = occupancy_cell(info, configurations.get(name, []), occupancy_of)
            rows_per_launch = B * MEAN_SEQUENCE if sequence_chapter else B
            moved = None
            formula = TRAFFIC.get(base_name(name))
            if formula and launches is not None:
                residual = name.endswith("true>")
                moved = formula[1](rows_per_launch, MEAN_LENGTH, residual) * FLOAT * launches
            moved_text = format_bytes(moved) if moved is not None else "-"
            implied = "-"
            if moved is not None and us:
                rate = moved / (us * 1e-6)
                implied = f"{rate / 1e9:.0f} GB/s"
                if bandwidth:
                    implied += f" ({100 * rate / bandwidth:.0f}%)"
            shared = info["shared"] + dynamic_shared(configurations.get(name, []))
            lines.append(
                f"| `{name}` | {launches_text} | {launch_text} | {info['registers']} | "
                f"{info['local']} | {shared} | "
                f"{occupancy_text} | {info['loads']} | {info['stores']} | {info['mma']} | "
                f"{moved_text} | {took_text} | {implied} | {ncu_text} |")
        lines.append("")
        stalls = stalls_by_ncu(chapter)
        if stalls:
            lines += stall_lines(stalls)
    promised = [name for name in sorted(kernels) if base_name(name) in UNQUALIFIED_PROMISES]
    if promised:
        lines += ["## Every instantiation of the kernels that promise for all of them", "",
                  "Kernels whose `// Promises:` line names no template case, on a chapter's "
                  "traced path or not",
                  "(the decode matmuls, the bf16 kernels): CTest holds every built "
                  "instantiation to its promise",
                  "and to zero local memory. Launch and occupancy: GPT-2 small at B = 32, for "
                  "the instantiations",
                  "that shape takes (the others: \"not recorded\").", "",
                  "| kernel | launch | regs | local | static shared | dynamic shared | "
                  "occupancy 80/86/89/90 % (sm_90 limiter) | loads | stores | MMA |",
                  "|---|---|---:|---:|---:|---:|---|---|---|---|"]
        for name in promised:
            info = kernels[name]
            records = configurations.get(name, [])
            lines.append(f"| `{name}` | {launch_cell(records, False)} | {info['registers']} "
                         f"| {info['local']} | {info['shared']} | {dynamic_shared(records)} "
                         f"| {occupancy_cell(info, records, occupancy_of)} "
                         f"| {info['loads']} | {info['stores']} | {info['mma']} |")
        lines.append("")
    lines += ["## Minimal traffic per launch", "",
              f"R rows (B = {B} in a decode step, B x 51 in the naive chapter's forward), C = {C},",
              f"V = {V}, L = {MEAN_LENGTH} valid cache positions (the mean over the run's decode",
              "steps); fp32, 4 bytes a number.", "", "| kernel | bytes per launch |", "|---|---|"]
    for name, (formula, _) in sorted(TRAFFIC.items()):
        lines.append(f"| `{name}` | {formula} |")
    lines += ["", "## Promised instructions", "",
              "A kernel promises instructions with a `// Promises (...):` line just above it (in",
              "`kernels/`); CTest checks them in the SASS of every instantiation on a chapter's",
              "path (which, for GPT-2 small, are the packed ones: kWidth = 4). `A<B` promises",
              "both and the first A before the first B (a programmatic launch's weight loads",
              "issued before its wait, ACQBULK).", "",
              "| kernel | promises |", "|---|---|"]
    for name, opcodes in sorted(promises.items()):
        lines.append(f"| `{name}` | {', '.join(opcodes)} |")
    lines.append("")
    return "\n".join(lines)


def abbreviate(name, limit=60):
    return name if len(name) <= limit else name[:limit - 3] + "..."


def dynamic_shared(records):
    return max((record[4] for record in records), default=0)


def launch_cell(records, sequence_chapter):
    cells = []
    for workload, _, grid, block, _ in records:
        if (workload == "sequence") != sequence_chapter and any(
                (record[0] == "sequence") == sequence_chapter for record in records):
            continue
        grid_text = "x".join(part for part in grid.split(",") if part != "1") or "1"
        if grid.split(",")[1:] != ["1", "1"]:
            grid_text = "(" + grid.replace(",", ", ") + ")"
        cell = f"{grid_text} x {block.split(',')[0]}" + (" *seq*" if workload == "sequence" else "")
        if cell not in cells:
            cells.append(cell)
    return ", ".join(cells) or "not recorded"


def occupancy_cell(info, records, occupancy_of):
    if not records:
        return "not recorded"
    threads = int(records[0][3].split(",")[0])
    shared = dynamic_shared(records)
    shares = []
    limiter = ""
    for arch in PRESET_ARCHITECTURES:
        blocks, warps, max_warps, limit = occupancy_of[(arch, info["registers"], info["shared"],
                                                        threads, shared)]
        shares.append(f"{100 * warps / max_warps:.0f}")
        if arch == REPORT_ARCHITECTURE:
            limiter = limit
    return "/".join(shares) + f" ({limiter})"


def ncu_cell(ncu, name, bandwidth):
    if ncu is None:
        return "not measured"
    row = ncu.get(ncu_key(name))
    if row is None:
        return "-"
    moved = float(row["dram_read_bytes"]) + float(row["dram_write_bytes"])
    seconds = float(row["duration_us"]) * 1e-6
    cell = f"{float(row['duration_us']):.1f} us, DRAM {format_bytes(moved)}"
    if bandwidth and seconds > 0:
        cell += f" ({100 * moved / seconds / bandwidth:.0f}% of copy)"
    return cell + f", occupancy {float(row['achieved_occupancy_pct']):.0f}%"


# ---------------------------------------------------------------- Nsight Compute import

NCU_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3,  # to us
             "ms": 1e3, "second": 1e6, "s": 1e6,
             "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "%": 1.0}


def import_ncu(raw_csv, chapter):
    """ncu --csv --page raw --print-units base (one row per launch) -> results/ncu/<chapter>.csv,
    one row per kernel: launches, summed time and DRAM bytes, time-weighted occupancy."""
    with open(raw_csv, encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle)]
    if not rows:
        fail(f"{raw_csv}: no rows")
    units = rows[0] if not rows[0].get("ID", "").strip() else {}
    launches = [row for row in rows if row.get("ID", "").strip()]
    if not launches:
        fail(f"{raw_csv}: no kernel launches (did the NVTX filter match?)")

    def value(row, metric):
        if metric not in row:
            fail(f"{raw_csv}: no column {metric}")
        number = float(row[metric].replace(",", "") or 0)
        unit = units.get(metric, "").strip()
        if metric == "gpu__time_duration.sum" and unit not in NCU_UNITS:
            # --print-units base gives nanoseconds; a file without its units row cannot say
            fail(f"{raw_csv}: the unit of {metric} is {unit or 'missing'!r}, not one this "
                 "script converts")
        return number * NCU_UNITS.get(unit, 1.0)

    totals = {}
    for row in launches:
        name = short_name(row["Kernel Name"])
        total = totals.setdefault(name, [0, 0.0, 0.0, 0.0, 0.0])
        duration = value(row, "gpu__time_duration.sum")
        total[0] += 1
        total[1] += duration
        total[2] += value(row, "dram__bytes_read.sum")
        total[3] += value(row, "dram__bytes_write.sum")
        total[4] += duration * value(row, "sm__warps_active.avg.pct_of_peak_sustained_active")
    os.makedirs(os.path.join(ROOT, "results", "ncu"), exist_ok=True)
    path = os.path.join(ROOT, "results", "ncu", f"{chapter}.csv")
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["kernel", "launches", "duration_us", "dram_read_bytes", "dram_write_bytes",
                         "achieved_occupancy_pct"])
        for name, (count, duration, read, written, weighted) in sorted(
                totals.items(), key=lambda item: -item[1][1]):
            writer.writerow([name, count, f"{duration:.3f}", f"{read:.0f}", f"{written:.0f}",
                             f"{weighted / duration if duration else 0:.1f}"])
    print(f"wrote {os.path.relpath(path, ROOT)} ({len(launches)} launches, {len(totals)} kernels)")
    import_stalls(launches, chapter, value)


STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def import_stalls(launches, chapter, value):
    """Where ncu's raw rows hold the warp-state metrics (STALL: warps stalled for a reason
    per issue-active cycle, as Nsight Compute's Warp State section shows them), writes
    results/ncu/<chapter>.stalls.csv: per kernel and reason, the launches' time-weighted
    mean. Nothing without such columns (scripts/profile_kernels.sh asks for them only of
    the persistent kernel)."""
    reasons = sorted({match.group(1) for match in map(STALL.match, launches[0]) if match})
    if not reasons:
        return
    weighted = {}
    for row in launches:
        name = short_name(row["Kernel Name"])
        duration = value(row, "gpu__time_duration.sum")
        total = weighted.setdefault(name, [0.0] + [0.0] * len(reasons))
        total[0] += duration
        for index, reason in enumerate(reasons):
            metric = f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
            total[index + 1] += duration * value(row, metric)
    path = os.path.join(ROOT, "results", "ncu", f"{chapter}.stalls.csv")
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["kernel", "reason", "warps_per_issue"])
        for name, (duration, *sums) in sorted(weighted.items()):
            for reason, summed in zip(reasons, sums):
                writer.writerow([name, reason, f"{summed / duration if duration else 0:.3f}"])
    print(f"wrote {os.path.relpath(path, ROOT)} ({len(reasons)} stall reasons)")


def stalls_by_ncu(chapter):
    """{short kernel name: [(reason, warps per issue), ...] largest first} from
    results/ncu/<chapter>.stalls.csv, or None."""
    path = os.path.join(ROOT, "results", "ncu", f"{chapter}.stalls.csv")
    if not os.path.exists(path):
        return None
    stalls = {}
    with open(path, encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            stalls.setdefault(row["kernel"], []).append((row["reason"],
                                                         float(row["warps_per_issue"])))
    return {name: sorted(rows, key=lambda item: -item[1]) for name, rows in stalls.items()}


def stall_lines(stalls, largest=6):
    """The page's table of where a kernel's warps wait (Nsight Compute's warp states)."""
    lines = ["Where the warps wait (ncu's warp states: warps stalled for each reason per "
             f"issued instruction, the {largest} largest):", "",
             "| kernel | " + " | ".join(["reason"] * largest) + " |",
             "|---|" + "---|" * largest]
    for name, reasons in sorted(stalls.items()):
        cells = [f"{reason} {amount:.2f}" for reason, amount in reasons[:largest]]
        cells += [""] * (largest - len(cells))
        lines.append(f"| `{abbreviate(name)}` | " + " | ".join(cells) + " |")
    return lines + [""]


# ---------------------------------------------------------------- main

def collect(build):
    cuobjdump = find_tool("cuobjdump")
    objects = kernel_objects(build)
    if not objects:
        fail(f"no kernel objects under {build}/CMakeFiles (build the tree first)")
    usage = {}
    sass = {}
    for obj in objects:
        usage.update(resource_usage(cuobjdump, obj))
        sass.update(sass_instructions(cuobjdump, obj))
    names = demangle(sorted({mangled for _, mangled in usage}))
    kernels = {}
    for (arch, mangled), resources in usage.items():
        if arch != REPORT_ARCHITECTURE:
            continue
        opcodes, first_at = sass.get((arch, mangled), (Counter(), {}))
        kernels[short_name(names[mangled])] = {
            "registers": resources.get("REG", 0),
            "local": resources.get("LOCAL", 0) + resources.get("STACK", 0),
            "spills": uses_local_memory(resources, opcodes),
            "shared": resources.get("SHARED", 0),
            "loads": access_widths(opcodes, "LDG"),
            "stores": access_widths(opcodes, "STG"),
            "mma": tensor_core_instructions(opcodes),
            "opcodes": opcodes,
            "first_at": first_at,
        }
    if not kernels:
        fail(f"the objects under {build} hold no sm_{REPORT_ARCHITECTURE} code "
             "(configure with CMAKE_CUDA_ARCHITECTURES including 90)")
    return kernels


def broken_promises(name, info, promised):
    """What of `promised` (opcodes, and pairs 'A<B' of opcodes in that order) the SASS of
    kernel `name` does not keep. An opcode matches itself and its longer forms (LDG.E.128
    matches LDG.E.128.CONSTANT); a pair compares the first instruction of each."""
    def first(opcode):
        return min((at for found, at in info["first_at"].items()
                    if found == opcode or found.startswith(opcode + ".")), default=None)
    problems = []
    for promise in promised:
        opcodes = promise.split("<")
        missing = [opcode for opcode in opcodes if first(opcode) is None]
        for opcode in missing:
            problems.append(f"{name} promises {opcode}, its SASS has none")
        if len(opcodes) == 2 and not missing and first(opcodes[0]) > first(opcodes[1]):
            problems.append(f"{name} promises {opcodes[0]} before {opcodes[1]}, its SASS has "
                            f"{opcodes[1]} first")
    return problems


def check(kernels, promises, configurations, leaves):
    """Problems on the chapters' paths: spills (beyond a kernel's `// Spills:` leave),
    promises the SASS does not keep."""
    problems = []
    for chapter in chapters():
        rows, _, unrecorded = chapter_path(chapter, configurations)
        for launcher in unrecorded:
            problems.append(f"{chapter}: {launcher} is not called by "
                            "tests/kernel_report/launch_configs.cpp (no launch or occupancy)")
        for name, _, _, ours in rows:
            info = kernels.get(name)
            if info is None:
                continue
            if ours and not configurations.get(name):
                problems.append(f"{chapter}: {name} has no recorded launch, so no occupancy "
                                "(call its launcher in tests/kernel_report/launch_configs.cpp)")
            spilled = spill_problem(name, info, leaves)
            if spilled:
                problems.append(f"{chapter}: {spilled}")
            problems += [f"{chapter}: {problem}" for problem in broken_promises(
                name, info, promises.get(base_name(name), []))]
    for name, info in sorted(kernels.items()):
        if base_name(name) not in UNQUALIFIED_PROMISES:
            continue
        spilled = spill_problem(name, info, leaves)
        if spilled:
            problems.append(spilled)
        problems += broken_promises(name, info, promises.get(base_name(name), []))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "ci"),
                        help="the build tree (default build/ci)")
    parser.add_argument("--check", action="store_true",
                        help="check the chapters' kernels and that docs/kernels.md is current")
    parser.add_argument("--import-ncu", metavar="RAW_CSV",
                        help="turn ncu's raw CSV of one step into results/ncu/CHAPTER.csv")
    parser.add_argument("--chapter", help="the chapter --import-ncu's file belongs to")
    arguments = parser.parse_args()
    if arguments.import_ncu:
        if not arguments.chapter:
            fail("--import-ncu needs --chapter NN_name")
        import_ncu(arguments.import_ncu, arguments.chapter)
        return 0
    build = os.path.abspath(arguments.build)

    kernels = collect(build)
    configurations = launch_configurations(build, kernels)
    promises = promised_instructions()
    requests = set()
    for name, info in kernels.items():
        records = configurations.get(name, [])
        if records:
            threads = int(records[0][3].split(",")[0])
            for arch in PRESET_ARCHITECTURES:
                requests.add((arch, info["registers"], info["shared"], threads,
                              dynamic_shared(records)))
    occupancy_of = occupancies(build, sorted(requests))
    page = render(build, kernels, configurations, occupancy_of, promises)

    if not arguments.check:
        with open(OUTPUT, "w", encoding="utf-8") as handle:
            handle.write(page)
        print(f"wrote {os.path.relpath(OUTPUT, ROOT)}")
        return 0
    problems = check(kernels, promises, configurations, declared_spills())
    current = open(OUTPUT, encoding="utf-8").read() if os.path.exists(OUTPUT) else ""
    if current != page:
        problems.append("docs/kernels.md is stale: run python3 scripts/kernel_report.py "
                        f"--build {os.path.relpath(build, ROOT)}")
    for problem in problems:
        print(f"kernel_report.py: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"kernel report: {len(kernels)} kernels, no spills beyond a declared leave, promises "
          "kept, docs/kernels.md current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
