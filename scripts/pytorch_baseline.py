#!/usr/bin/env python3
"""scripts/pytorch_baseline.py - the ladder's rungs in PyTorch, on its workload, timed alike.

The ladder's chapters do in C++ and CUDA what these variants do in PyTorch with Hugging
Face transformers. This script runs the variants on the same GPU, on the same
workload and with the same timing rules, so their rows can sit in the same table
(scripts/render_results.py puts them there):

  naive                   the whole forward over all tokens so far at every step, no cache
                          (use_cache=False): O(N^2), as chapter 01
  dynamic                 Hugging Face's DynamicCache (past_key_values): one token per step,
                          the cache grows by concatenation
  expandable              the same, with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  static                  transformers' StaticCache, allocated once for 1 + N positions, the
                          current position kept in device memory (transformers 5); attention
                          runs over the whole cache with a mask
  compile                 the static cache, and the model's forward through torch.compile
                          (--compile-mode; default "default", torch.compile's own: no
                          CUDA graphs); compilation happens
                          in the warm-up run, outside the timing
  pingpong                the compiled static cache on two CUDA streams: step i is enqueued
                          on stream i % 2 behind stream (i - 1) % 2; the "all rows finished"
                          flag is copied without blocking into pinned host memory, and the
                          host checks step i - 1's flag only after step i is enqueued
  hf_static_compiled      Hugging Face's own fast path: the static cache, and the model's
                          forward through torch.compile(mode="reduce-overhead",
                          fullgraph=True): one CUDA graph replay a step (--anchor-compile-mode
                          max-autotune: autotuned kernels, CUDA graphs too); the loop is the
                          static variant's, one wait a step for the stop check, as generate()
  static_step_compiled    a hand-written static-cache GPT-2 step in plain PyTorch
                          (scripts/gpt2_static_decode.py, gpt-fast style) on the same
                          weights: argmax and the EOS bookkeeping on the device, the step
                          compiled the same way, one host wait per generation

The last two are the compiled anchors: what a user who wants GPT-2 fast in PyTorch writes.
They also run the batch sweep (--sweep-batch, default B = 1, 8, 64 at the smallest N, into
the same file), and their tokens are checked against Hugging Face's eager generate() on the
same weights and precision, outside the timing: every configuration's JSON holds
"token_check" (agreement rate, first divergent step, the reference's smallest top-1/top-2
logit margin). In fp32 the tokens must be equal: a configuration whose tokens are not is
recorded as failed (with its token check). Their compile and CUDA-graph capture happen in
the warm-up run; "framework" names the mode, and counts the steps torch.compile left out of
CUDA graphs ("cudagraph_skips": 0 when every step was one graph).

The workload is the chapters': GPT-2 small (transformers' GPT2Config() defaults; --model
medium, large or xl: GPT2Config with n_layer, n_head and n_embd of that size, as the chapters'
--model, the rest GPT-2's), fp32
weights (bf16 in the bf16 rows), B prompts holding only BOS (50256), greedy argmax, up to
N new tokens, stopping
once every row has produced EOS (a finished row keeps being decoded, as in the chapters). The
weights are transformers' own random initialisation after torch.manual_seed(--seed)
(normal(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer), LayerNorm 1 and 0):
the same distribution as the chapters' random weights but not the same numbers, so only
time and memory compare with the chapters; tokens compare between these variants. Every
loop is written out here (no model.generate) so the stopping rule and the per-step
synchronisation are explicit. Attention is transformers' default (SDPA); the naive
variant computes the logits of every position, as model(input_ids) does.

Precision: three sets of rows. "fp32" is plain fp32 arithmetic, as the chapters by default
(torch.backends.cuda.matmul.allow_tf32 = False, set_float32_matmul_precision('highest'));
"tf32" sets set_float32_matmul_precision('high'): TF32 matmuls; "bf16" converts the model
to torch.bfloat16 (weights, activations, the KV cache and the logits; PyTorch's matmuls
accumulate in fp32), as chapter 10 stores its tensors. The bf16 rows' floor is chapter
10's: weights and cache in 2-byte elements, the logits in 4 (chapter 10 writes fp32
logits; PyTorch's bf16 logits take 2, a difference of B x 50257 x 2 bytes a step).

Timing, as the chapters: --warmup untimed runs first (they also compile), then --runs
timed runs, each between torch.cuda.synchronize() calls, timed with time.perf_counter;
mean, std, min, max and median. The naive variant takes --naive-runs timed runs (default
3: at N = 400 one run takes seconds). Memory of the last timed run, reset before each run
with torch.cuda.reset_peak_memory_stats: peak allocated (max_memory_allocated), peak
reserved (max_memory_reserved) and fragmentation = (reserved - allocated) / reserved at
peak. PyTorch's totals include the model's weights (about 0.5 GB), which the chapters'
allocators do not hold. Allocations per step count the caching allocator's allocation
requests; host synchronisations per step count the loop's own waits (.item() or an event
wait), not any that transformers makes inside the forward.

The floor is computed as the chapters compute it (common/benchmark.cpp
floor_bytes) with the device-to-device copy bandwidth measured here the same way as
common/device_info.cpp. The token hash is the chapters' FNV-1a over the [B, steps] ids.

The variants run in child processes, one per precision and allocator setting (the
allocator reads PYTORCH_CUDA_ALLOC_CONF once, when CUDA starts; the expandable variant's
JSON records whether its segments really were expandable), and one for each compiled
anchor (its CUDA graphs and their memory pools alone). An exception (a torch.compile
error, out of memory) is recorded in that variant's JSON ("error", "failed_configurations")
and the rest goes on; a child that dies leaves the same record for the variants it had not
finished. The compiled variants share one compiled forward per process.

Output: one JSON file per variant and precision, <chapter>.<precision>.json in --out, in
the schema of the chapters' --json (common/benchmark.cpp format_json), plus a few keys of
its own (framework versions, compile mode, errors). A progress line per run goes to stderr.

Written against torch 2.11 and transformers 5.17. Usage (on a machine with a CUDA GPU; the
variants before the anchors took 7.5 minutes on an H200 with 3 timed runs, most of it the
naive variant at N = 400; each anchor compiles and captures once per size, six sizes and
three precisions; the max-autotune modes compile for minutes more):
    python3 scripts/pytorch_baseline.py                     # every variant, fp32, tf32 and bf16
    python3 scripts/pytorch_baseline.py --quick             # smoke run: N = 8, one run
    python3 scripts/pytorch_baseline.py --variants static,compile --precision tf32 \\
        --batch 1,8,32,64 --new-tokens 100 --out /tmp/pt
    python3 scripts/pytorch_baseline.py --variants hf_static_compiled,static_step_compiled \\
        --runs 3                                            # the compiled anchors alone
A job cut short (a time limit) runs again with --resume into the same --out: the variants
an earlier run finished are kept, the others run (a cut variant from its start).
Exit status: 0 when every child ran (failed variants are recorded, not fatal), 2 for a bad
command line, 3 without a CUDA device, 4 without torch or transformers.
"""
import argparse
import gc
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
EXIT_NO_CUDA_DEVICE = 3
EXIT_NO_TORCH = 4
DEVICE = "cuda"
ALLOCATOR_VARIABLE = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE_SEGMENTS = "expandable_segments:True"


@dataclass(frozen=True)
class Variant:
    key: str          # the name on the command line
    chapter: str      # the "chapter" field of its JSON
    title: str
    allocator_conf: str  # PYTORCH_CUDA_ALLOC_CONF for its process ("" = PyTorch's default)
    own_process: bool = False  # a process of its own (its compiled graphs and memory alone)

    def full_title(self, anchor_compile_mode: str) -> str:
        return self.title.format(mode=anchor_compile_mode)


# In ladder order; the table keeps it.
VARIANTS = [
    Variant("naive", "pytorch_naive", "PyTorch: naive, no cache", ""),
    Variant("dynamic", "pytorch_dynamic_cache", "PyTorch: dynamic KV cache", ""),
    Variant("expandable", "pytorch_dynamic_cache_expandable",
            "PyTorch: dynamic KV cache + expandable segments", EXPANDABLE_SEGMENTS),
    Variant("static", "pytorch_static_cache", "PyTorch: static KV cache", ""),
    Variant("compile", "pytorch_static_compile", "PyTorch: static cache + torch.compile", ""),
    Variant("pingpong", "pytorch_static_compile_pingpong",
            "PyTorch: static cache + torch.compile + stream ping-pong", ""),
    Variant("hf_static_compiled", "pytorch_hf_static_compiled",
            "PyTorch: static cache + torch.compile {mode}, fullgraph (CUDA graphs)", "", True),
    Variant("static_step_compiled", "pytorch_static_step_compiled",
            "PyTorch: hand-written static step, torch.compile {mode} (CUDA graphs)", "", True),
]
VARIANTS_BY_KEY = {variant.key: variant for variant in VARIANTS}
PRECISIONS = ("fp32", "tf32", "bf16")
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead")
ANCHORS = ("hf_static_compiled", "static_step_compiled")  # the compiled anchors
ANCHOR_COMPILE_MODES = ("reduce-overhead", "max-autotune")  # both capture CUDA graphs
COMPILED = ("compile", "pingpong") + ANCHORS
# GPT-2's four sizes, as common/config.cpp Gpt2Config::named: (n_layer, n_head, n_embd).
MODEL_SHAPES = {"small": (12, 12, 768), "medium": (24, 16, 1024), "large": (36, 20, 1280),
                "xl": (48, 25, 1600)}


# ---------------------------------------------------------------- helpers without torch

def integer_list(text: str) -> list:
    try:
        values = [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of numbers, got '{text}'")
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"every value must be at least 1, got '{text}'")
    return values


def name_list(choices):
    def parse(text: str) -> list:
        names = [item for item in text.split(",") if item]
        unknown = [name for name in names if name not in choices]
        if not names or unknown:
            raise argparse.ArgumentTypeError(
                f"expected names from {','.join(choices)}, got '{text}'")
        return [name for name in choices if name in names]  # canonical order, no repeats
    return parse


def batch_list(text: str) -> list:
    return [] if text == "none" else integer_list(text)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def hash_tokens(token_bytes: bytes) -> str:
    """common/benchmark.cpp hash_tokens: FNV-1a over each id's 4 little-endian bytes."""
    value = 0xCBF29CE484222325
    for byte in token_bytes:
        value ^= byte
        value = (value * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def floor_bytes(config, batch: int, prompt_length: int, steps: int,
                element_bytes: int = 4) -> float:
    """common/benchmark.cpp floor_bytes: the bytes that must cross HBM for `steps` steps.

    Per step: every weight once, except the embedding tables (a step reads only the B rows
    it looks up), the token embedding again, whole, as the tied LM head, the keys and
    values of every layer up to the current position (weights and cache in element_bytes
    each: 4 in fp32, 2 in bf16), and the fp32 logits.
    """
    C, V, P, L = config.n_embd, config.vocab_size, config.n_positions, config.n_layer
    block = 2 * (2 * C) + (C * 3 * C + 3 * C + C * C + C) + (C * 4 * C + 4 * C + 4 * C * C + C)
    parameters = V * C + P * C + L * block + 2 * C
    weights = parameters - P * C
    total = 0.0
    for step in range(steps):
        stored = weights + 2.0 * L * batch * (prompt_length + step) * C
        total += stored * element_bytes + batch * V * 4
    return total


def format_bytes(count: float) -> str:
    """common/cuda_check.cpp format_bytes."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    unit = 0
    while count >= 1024.0 and unit < 4:
        count /= 1024.0
        unit += 1
    return f"{count:.0f} {units[unit]}" if unit == 0 else f"{count:.2f} {units[unit]}"


def summarize(values: list) -> dict:
    """common/benchmark.cpp summarize: mean, population std, min, max, median."""
    return {"mean_s": statistics.fmean(values), "std_s": statistics.pstdev(values),
            "min_s": min(values), "max_s": max(values), "median_s": statistics.median(values)}


def write_json(path: pathlib.Path, document: dict) -> None:
    """Whole files only: a crash mid-write leaves the previous version."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n")
    temporary.replace(path)


def short_error(error: BaseException) -> str:
    """The exception in one line for the JSON: its type and first lines (the log has the rest)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = f"{type(error).__name__}: {' '.join(lines[:3])}".strip()
    return text if len(text) <= 400 else text[:397] + "..."


def output_path(out: pathlib.Path, variant: Variant, precision: str, suffix: str) -> pathlib.Path:
    return out / ".".join([variant.chapter, precision] + ([suffix] if suffix else []) + ["json"])


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sizes_of(variant: Variant, batches: list, new_tokens: list, sweep_batches: list) -> list:
    """(batch, new tokens) of one variant's run, in order: every batch at every N, and for
    a compiled anchor the batch sweep's batches at the smallest N too."""
    sizes = [(batch, tokens) for batch in batches for tokens in new_tokens]
    if variant.key in ANCHORS:
        sizes += [(batch, min(new_tokens)) for batch in sweep_batches
                  if (batch, min(new_tokens)) not in sizes]
    return sizes


def compare_tokens(tokens: list, reference: list, eos: int) -> dict:
    """A variant's tokens [B][steps] (the chapters' stopping rule) against Hugging Face
    generate()'s [B][steps'] on the same prompts. generate() pads a row past its first EOS,
    so a row is compared up to and including that EOS; the step counts must match too."""
    compared = agreeing = 0
    first_divergent = None
    for row, reference_row in zip(tokens, reference):
        for step, (mine, theirs) in enumerate(zip(row, reference_row)):
            compared += 1
            if mine == theirs:
                agreeing += 1
            elif first_divergent is None or step < first_divergent:
                first_divergent = step
            if theirs == eos:
                break
    steps = len(tokens[0]) if tokens else 0
    reference_steps = len(reference[0]) if reference else 0
    if steps != reference_steps and first_divergent is None:
        first_divergent = min(steps, reference_steps)
    return {"equal": bool(compared) and agreeing == compared and steps == reference_steps
            and len(tokens) == len(reference),
            "steps": steps, "reference_steps": reference_steps,
            "compared_tokens": compared, "agreeing_tokens": agreeing,
            "agreement": agreeing / compared if compared else 0.0,
            "first_divergent_step": first_divergent}


def token_check_line(check: dict) -> str:
    """One line for the log and for a failed configuration's error."""
    if check["equal"]:
        return f"tokens equal to Hugging Face eager generate() ({check['compared_tokens']} compared)"
    margin = check.get("reference_margin_at_divergence")
    return (f"tokens differ from Hugging Face eager generate(): agreement "
            f"{100 * check['agreement']:.1f}% of {check['compared_tokens']}, first divergent "
            f"step {check['first_divergent_step']}, {check['steps']} steps against "
            f"{check['reference_steps']}"
            + (f", reference top-1/top-2 margin there {margin:.3g}" if margin is not None else ""))


class TokenCheckFailed(RuntimeError):
    """An fp32 anchor whose tokens are not Hugging Face's: the configuration fails."""

    def __init__(self, check: dict, row: dict):
        super().__init__(token_check_line(check))
        self.check = check
        self.row = row


# ---------------------------------------------------------------- the decode loops
# Each returns (tokens [B, steps] on the device, steps, host synchronisations).

def decode_naive(torch, model, prompts, max_new_tokens, eos):
    sequence = prompts
    finished = torch.zeros(prompts.shape[0], dtype=torch.bool, device=prompts.device)
    steps = 0
    syncs = 0
    while steps < max_new_tokens:
        # The whole forward over every token so far, for the last position's logits.
        logits = model(input_ids=sequence, use_cache=False).logits
        next_tokens = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        sequence = torch.cat([sequence, next_tokens], dim=1)
        finished |= next_tokens[:, 0] == eos
        steps += 1
        syncs += 1
        if finished.all().item():  # a blocking check, every step (chapter 01's)
            break
    return sequence[:, prompts.shape[1]:], steps, syncs


def decode_dynamic_cache(torch, model, prompts, max_new_tokens, eos):
    batch = prompts.shape[0]
    generated = torch.empty((batch, max_new_tokens), dtype=torch.long, device=prompts.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=prompts.device)
    past_key_values = None  # transformers makes a DynamicCache on the first call
    tokens = prompts
    steps = 0
    syncs = 0
    while steps < max_new_tokens:
        output = model(input_ids=tokens, past_key_values=past_key_values, use_cache=True)
        past_key_values = output.past_key_values
        tokens = output.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        generated[:, steps] = tokens[:, 0]
        finished |= tokens[:, 0] == eos
        steps += 1
        syncs += 1
        if finished.all().item():
            break
    return generated[:, :steps], steps, syncs


def decode_static_cache(torch, forward, cache, prompts, max_new_tokens, eos):
    """`forward` is the model (eager) or its compiled forward. The cache keeps the current
    position in device memory (transformers 5), so no step passes one from the host."""
    batch = prompts.shape[0]
    cache.reset()  # zeroes the keys, values and position, as generate() does to reuse a cache
    generated = torch.empty((batch, max_new_tokens), dtype=torch.long, device=prompts.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=prompts.device)
    tokens = prompts  # BOS only: the prompt is one position, like every later step
    steps = 0
    syncs = 0
    while steps < max_new_tokens:
        logits = forward(input_ids=tokens, past_key_values=cache, use_cache=True).logits
        tokens = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        generated[:, steps] = tokens[:, 0]
        finished |= tokens[:, 0] == eos
        steps += 1
        syncs += 1
        if finished.all().item():
            break
    return generated[:, :steps], steps, syncs


class PingPong:
    """Two CUDA streams, an event each, and a pinned two-slot "all rows finished" flag."""

    def __init__(self, torch):
        self.streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        self.events = [torch.cuda.Event(), torch.cuda.Event()]
        self.flags = torch.zeros(2, dtype=torch.bool, pin_memory=True)


def decode_static_cache_pingpong(torch, forward, cache, prompts, max_new_tokens, eos, pingpong):
    batch = prompts.shape[0]
    main_stream = torch.cuda.current_stream()
    cache.reset()
    generated = torch.empty((batch, max_new_tokens), dtype=torch.long, device=prompts.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=prompts.device)
    streams, events, flags = pingpong.streams, pingpong.events, pingpong.flags
    streams[0].wait_stream(main_stream)  # the reset and the buffers above come first
    tokens = prompts
    steps = max_new_tokens
    syncs = 0
    for step in range(max_new_tokens):
        slot = step % 2
        stream = streams[slot]
        # Step i runs behind step i - 1, so the GPU still does one step at a time. Tensors
        # made on one stream and read on the other (the tokens) are only reused by the
        # stream that made them, after it has waited for the other: no record_stream needed.
        stream.wait_stream(streams[1 - slot])
        with torch.cuda.stream(stream):
            logits = forward(input_ids=tokens, past_key_values=cache, use_cache=True).logits
            tokens = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            generated[:, step] = tokens[:, 0]
            finished |= tokens[:, 0] == eos
            flags[slot].copy_(finished.all(), non_blocking=True)
            events[slot].record(stream)
        if step > 0:
            # Step i is enqueued: only now wait for step i - 1's flag. If it says every row
            # had finished, step i was one step too many and is dropped from the output.
            events[1 - slot].synchronize()
            syncs += 1
            if bool(flags[1 - slot]):
                steps = step
                break
    main_stream.wait_stream(streams[0])
    main_stream.wait_stream(streams[1])
    return generated[:, :steps], steps, syncs


# ---------------------------------------------------------------- the worker (one process)

def set_precision(torch, precision: str) -> None:
    if precision == "tf32":  # TF32 matmuls
        torch.set_float32_matmul_precision("high")
    else:  # fp32 arithmetic; in bf16 the model's dtype decides
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")


def measure_copy_bandwidth(torch, nbytes: int = 1 << 30, repeats: int = 20) -> float:
    """common/device_info.cpp measure_copy_bandwidth: a device-to-device copy timed with
    CUDA events, two warm-up copies, bytes read plus written over the median time."""
    source = torch.ones(nbytes, dtype=torch.uint8, device=DEVICE)
    destination = torch.empty_like(source)
    milliseconds = []
    for index in range(repeats + 2):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        destination.copy_(source)
        stop.record()
        stop.synchronize()
        if index >= 2:
            milliseconds.append(start.elapsed_time(stop))
    del source, destination
    torch.cuda.empty_cache()
    return 2.0 * nbytes / (sorted(milliseconds)[repeats // 2] * 1e-3)


def device_banner(torch, transformers) -> str:
    properties = torch.cuda.get_device_properties(0)
    return (f"{properties.name} | sm_{properties.major}{properties.minor} | "
            f"{properties.multi_processor_count} SMs | {format_bytes(properties.total_memory)} | "
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) | "
            f"transformers {transformers.__version__}")


def make_static_cache(transformers, model, batch: int, max_length: int):
    """transformers' StaticCache (the API of transformers 5) for `max_length` positions,
    its tensors allocated now rather than inside the first (compiled) step."""
    config = model.config
    cache = transformers.StaticCache(config=config, max_cache_len=max_length)
    cache.early_initialization(batch_size=batch, num_heads=config.n_head,
                               head_dim=config.n_embd // config.n_head, dtype=model.dtype,
                               device=model.device)
    return cache


def allocator_counters(torch) -> tuple:
    stats = torch.cuda.memory_stats()
    return stats.get("allocation.all.allocated", 0), stats.get("segment.all.allocated", 0)


class VariantRunner:
    """Runs the variants of one process: one model, one precision, one allocator setting."""

    def __init__(self, args, torch, transformers):
        self.args = args
        self.torch = torch
        self.transformers = transformers
        torch.manual_seed(args.seed)  # transformers' initialisation draws from the global generator
        n_layer, n_head, n_embd = MODEL_SHAPES[args.model]
        model = transformers.GPT2LMHeadModel(
            transformers.GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd))
        dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
        self.model = model.to(device=DEVICE, dtype=dtype).eval()
        self.config = self.model.config
        self.eos = self.config.eos_token_id
        self.bos = self.config.bos_token_id
        self.bandwidth = measure_copy_bandwidth(torch)
        self.banner = device_banner(torch, transformers)
        self.compiled_forward = None
        self.anchor_forward = None
        self.compile_error = None
        self.pingpong = None
        self.references = {}  # (batch, new tokens) -> Hugging Face eager generate()'s check data

    def raise_recompile_limit(self):
        dynamo = self.torch._dynamo.config
        # One graph per (batch, cache length), static shapes: more than dynamo's default
        # of 8 recompilations in a long sweep.
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo, name):
                setattr(dynamo, name, 64)

    def compiled(self):
        if self.compiled_forward is None:
            self.raise_recompile_limit()
            mode = None if self.args.compile_mode == "default" else self.args.compile_mode
            self.compiled_forward = self.torch.compile(self.model.forward, mode=mode, dynamic=False)
        return self.compiled_forward

    def mark_step(self):
        """Tells CUDA graph trees that a new step begins (the outputs of the last are dead)."""
        mark = getattr(self.torch.compiler, "cudagraph_mark_step_begin", None)
        if mark is not None:
            mark()

    def hf_static_compiled_decoder(self, cache, new_tokens: int):
        """Hugging Face's recipe: torch.compile(model.forward, mode="reduce-overhead",
        fullgraph=True), called by the static variant's loop."""
        torch = self.torch
        if self.anchor_forward is None:
            self.raise_recompile_limit()
            self.anchor_forward = torch.compile(self.model.forward,
                                                mode=self.args.anchor_compile_mode, fullgraph=True)

        def forward(**inputs):
            self.mark_step()
            return self.anchor_forward(**inputs)
        return lambda prompts: decode_static_cache(torch, forward, cache, prompts, new_tokens,
                                                   self.eos)

    def static_step_decoder(self, batch: int, new_tokens: int):
        """scripts/gpt2_static_decode.py's decoder on this model's weights (its state dict:
        Conv1D [in, out], "transformer." keys), its step compiled, one wait per generation."""
        from gpt2_static_decode import StaticGPT2Decoder, compile_step
        self.raise_recompile_limit()
        decoder = StaticGPT2Decoder(self.config.to_dict(), self.model.state_dict(), batch, 1,
                                    new_tokens, self.eos, dtype=self.model.dtype, device=DEVICE)
        step = compile_step(decoder, self.args.anchor_compile_mode)

        def decode(prompts):
            tokens, steps = decoder.generate(prompts, step)
            return tokens, steps, 1
        return decode

    def reference(self, batch: int, new_tokens: int) -> dict:
        """Hugging Face's eager generate() (no compile, its dynamic cache), greedy, on the
        same model, prompts and precision: its tokens and each step's smallest top-1/top-2
        logit margin (a divergence at a near-tie points at rounding, not at a bug)."""
        key = (batch, new_tokens)
        if key not in self.references:
            torch, transformers = self.torch, self.transformers

            class MarginRecorder(transformers.LogitsProcessor):
                def __init__(self):
                    self.margins = []

                def __call__(self, input_ids, scores):
                    top2 = scores.topk(2, dim=-1).values
                    self.margins.append((top2[:, 0] - top2[:, 1]).min())
                    return scores

            prompts = torch.full((batch, 1), self.bos, dtype=torch.long, device=DEVICE)
            recorder = MarginRecorder()
            with torch.no_grad():
                output = self.model.generate(
                    input_ids=prompts, attention_mask=torch.ones_like(prompts),
                    max_new_tokens=new_tokens, do_sample=False, num_beams=1,
                    eos_token_id=self.eos, pad_token_id=self.eos,
                    logits_processor=transformers.LogitsProcessorList([recorder]))
            self.references[key] = {
                "tokens": output[:, prompts.shape[1]:].cpu().tolist(),
                "margins": torch.stack(recorder.margins).float().cpu().tolist()}
            del output
            gc.collect()
            torch.cuda.empty_cache()
        return self.references[key]

    def token_check(self, batch: int, new_tokens: int, tokens) -> dict:
        reference = self.reference(batch, new_tokens)
        check = compare_tokens(tokens.cpu().tolist(), reference["tokens"], self.eos)
        margins = reference["margins"]
        divergent = check["first_divergent_step"]
        check.update({
            "reference": "Hugging Face generate(), eager, greedy, same weights and precision",
            "reference_min_top2_margin": min(margins) if margins else None,
            "reference_margin_at_divergence": (margins[divergent] if divergent is not None
                                               and divergent < len(margins) else None)})
        return check

    def decoder(self, variant: Variant, batch: int, new_tokens: int):
        """What one run of the variant calls, with everything it reuses made up front."""
        torch, model = self.torch, self.model
        if variant.key == "naive":
            return lambda prompts: decode_naive(torch, model, prompts, new_tokens, self.eos)
        if variant.key in ("dynamic", "expandable"):
            return lambda prompts: decode_dynamic_cache(torch, model, prompts, new_tokens, self.eos)
        if variant.key == "static_step_compiled":
            return self.static_step_decoder(batch, new_tokens)
        cache = make_static_cache(self.transformers, model, batch, 1 + new_tokens)
        if variant.key == "static":
            return lambda prompts: decode_static_cache(torch, model, cache, prompts, new_tokens,
                                                       self.eos)
        if variant.key == "hf_static_compiled":
            return self.hf_static_compiled_decoder(cache, new_tokens)
        forward = self.compiled()
        if variant.key == "compile":
            return lambda prompts: decode_static_cache(torch, forward, cache, prompts, new_tokens,
                                                       self.eos)
        if self.pingpong is None:
            self.pingpong = PingPong(torch)
        return lambda prompts: decode_static_cache_pingpong(torch, forward, cache, prompts,
                                                            new_tokens, self.eos, self.pingpong)

    def measure(self, variant: Variant, label: str, batch: int, new_tokens: int) -> dict:
        torch, args = self.torch, self.args
        runs = min(args.naive_runs, args.runs) if variant.key == "naive" else args.runs
        prompts = torch.full((batch, 1), self.bos, dtype=torch.long, device=DEVICE)
        where = f"{label}: batch {batch}, {new_tokens} new tokens"
        warmup_seconds = []
        with torch.no_grad():
            decode = self.decoder(variant, batch, new_tokens)
            for index in range(args.warmup):
                compiling = variant.key in COMPILED and index == 0
                progress(f"{where}: warm-up {index + 1}/{args.warmup}"
                         + (" (compiles the step: can take a minute)" if compiling else ""))
                torch.cuda.synchronize()
                start = time.perf_counter()
                decode(prompts)
                torch.cuda.synchronize()
                warmup_seconds.append(time.perf_counter() - start)
            seconds = []
            first_hash = None
            for index in range(runs):
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                allocations_before, segments_before = allocator_counters(torch)
                start = time.perf_counter()
                tokens, steps, syncs = decode(prompts)
                torch.cuda.synchronize()
                seconds.append(time.perf_counter() - start)
                allocations_after, segments_after = allocator_counters(torch)
                peak_allocated = torch.cuda.max_memory_allocated()
                peak_reserved = torch.cuda.max_memory_reserved()
                token_bytes = bytes(tokens.to(torch.int32).cpu().contiguous().view(torch.uint8).flatten().tolist())
                token_hash = hash_tokens(token_bytes)
                first_hash = first_hash or token_hash
                if token_hash != first_hash:
                    raise RuntimeError(f"run {index + 1} generated different tokens than run 1")
                progress(f"{where}: run {index + 1}/{runs} {seconds[-1]:.4f} s ({steps} steps)")
            check = None
            if variant.key in ANCHORS:  # outside the timing
                check = self.token_check(batch, new_tokens, tokens)
                progress(f"{where}: {token_check_line(check)}")
        del decode, prompts, tokens
        gc.collect()
        torch.cuda.empty_cache()
        row = {"batch": batch, "new_tokens": new_tokens, "prompt_length": 1, "steps": steps,
               "seconds": seconds}
        row.update(summarize(seconds))
        median = row["median_s"]
        row.update({
            "ms_per_step": median * 1e3 / steps if steps else 0.0,
            "tokens_per_s": batch * steps / median if median > 0 else 0.0,
            "floor_s": floor_bytes(self.config, batch, 1, steps,
                                   2 if self.args.precision == "bf16" else 4) / self.bandwidth,
            "peak_allocated_bytes": peak_allocated,
            "peak_reserved_bytes": peak_reserved,
            "fragmentation": (peak_reserved - peak_allocated) / peak_reserved if peak_reserved else 0.0,
            "driver_allocations": segments_after - segments_before,
            "allocations_per_step": (allocations_after - allocations_before) / steps if steps else 0.0,
            "host_syncs_per_step": syncs / steps if steps else 0.0,
            "token_hash": first_hash,
            "warmup_s": warmup_seconds,
        })
        if variant.key == "static_step_compiled":
            row["device_steps"] = new_tokens  # the GPU runs every step; the output keeps `steps`
        if check is not None:
            row["token_check"] = check
            if self.args.precision == "fp32" and not check["equal"]:
                raise TokenCheckFailed(check, row)
        return row

    def run(self, variant: Variant, path: pathlib.Path) -> None:
        torch, args = self.torch, self.args
        label = f"{variant.chapter} ({args.precision})"
        allocator = "PyTorch caching allocator"
        if variant.allocator_conf:
            allocator += f", {ALLOCATOR_VARIABLE}={variant.allocator_conf}"
        anchor = variant.key in ANCHORS
        if anchor:
            compile_mode = args.anchor_compile_mode
        elif variant.key in COMPILED:
            compile_mode = args.compile_mode
        else:
            compile_mode = None
        weights = (f"random{'' if args.model == 'small' else ' GPT-2 ' + args.model} "
                   f"(transformers' initialisation, torch.manual_seed({args.seed}))")
        if variant.key == "static_step_compiled":
            weights += ", the Hugging Face model's own tensors"
        document = {
            "chapter": variant.chapter,
            "title": variant.full_title(args.anchor_compile_mode),
            "device": self.banner,
            "precision": args.precision,
            "model": args.model,
            "weights": weights,
            "prompts": "BOS only",
            "allocator": allocator,
            "copy_bandwidth_bytes_per_s": self.bandwidth,
            "configurations": [],
            "framework": {
                "torch": torch.__version__,
                "transformers": self.transformers.__version__,
                "attention": getattr(self.config, "_attn_implementation", None),
                "compile_mode": compile_mode,
                "fullgraph": True if anchor else None,
            },
            "error": None,
            "failed_configurations": [],
            "complete": False,
        }
        if anchor:
            document["token_reference"] = ("Hugging Face generate(), eager (not compiled), "
                                           "greedy, same weights, prompts and precision")
        write_json(path, document)
        compiled = variant.key in COMPILED
        for batch, new_tokens in sizes_of(variant, args.batch, args.new_tokens, args.sweep_batch):
            if compiled and self.compile_error:
                # Compiling again would fail again, a minute at a time.
                message = f"skipped: torch.compile failed before ({self.compile_error})"
                document["failed_configurations"].append(
                    {"batch": batch, "new_tokens": new_tokens, "error": message})
                continue
            try:
                document["configurations"].append(self.measure(variant, label, batch, new_tokens))
            except TokenCheckFailed as error:  # timed, but not the reference's tokens
                progress(f"{label}: batch {batch}, {new_tokens} new tokens: FAILED: {error}")
                document["failed_configurations"].append(
                    {"batch": batch, "new_tokens": new_tokens, "error": str(error),
                     "token_check": error.check, "configuration": error.row})
            except Exception as error:  # recorded; the next configuration still runs
                traceback.print_exc()  # the whole story for the log; the JSON keeps one line
                message = short_error(error)
                progress(f"{label}: batch {batch}, {new_tokens} new tokens: FAILED: {message}")
                document["failed_configurations"].append(
                    {"batch": batch, "new_tokens": new_tokens, "error": message})
                if compiled and not document["configurations"]:
                    self.compile_error = message
                gc.collect()
                torch.cuda.empty_cache()
            write_json(path, document)
        if document["failed_configurations"] and not document["configurations"]:
            document["error"] = document["failed_configurations"][0]["error"]
        # Proof that the allocator read PYTORCH_CUDA_ALLOC_CONF: its segments say how they grow.
        document["framework"]["expandable_segments"] = any(
            segment.get("is_expandable", False) for segment in torch.cuda.memory_snapshot())
        if anchor:  # graphs torch.compile ran without CUDA graphs (inductor's count, reasons in the log)
            from torch._dynamo.utils import counters
            document["framework"]["cudagraph_skips"] = int(counters["inductor"]["cudagraph_skips"])
        document["complete"] = True
        write_json(path, document)


def run_worker(args) -> int:
    try:
        import torch
        import transformers
    except ImportError as error:
        progress(f"pytorch_baseline.py: error: {error} (torch and transformers are needed)")
        return EXIT_NO_TORCH
    if not torch.cuda.is_available():
        progress("pytorch_baseline.py: error: no CUDA device found (torch.cuda.is_available() is False)")
        return EXIT_NO_CUDA_DEVICE
    set_precision(torch, args.precision)
    runner = VariantRunner(args, torch, transformers)
    for key in args.variants:
        variant = VARIANTS_BY_KEY[key]
        runner.run(variant, output_path(args.out, variant, args.precision, args.suffix))
    return 0


# ---------------------------------------------------------------- the parent (no torch)

def process_groups(variant_keys: list) -> list:
    """Variants sharing an allocator setting share a process (and a compiled forward); a
    compiled anchor has one of its own: [(allocator setting, [variant keys])]."""
    groups = {}
    for key in variant_keys:
        variant = VARIANTS_BY_KEY[key]
        group = (variant.allocator_conf, key if variant.own_process else "")
        groups.setdefault(group, []).append(key)
    return [(allocator_conf, keys) for (allocator_conf, _), keys in groups.items()]


def record_crash(path: pathlib.Path, variant: Variant, precision: str, message: str,
                 anchor_compile_mode: str = ANCHOR_COMPILE_MODES[0]) -> None:
    """A worker that died left this variant unfinished: say so in its JSON."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        document = {"chapter": variant.chapter, "title": variant.full_title(anchor_compile_mode),
                    "device": "",
                    "precision": precision, "weights": "", "prompts": "BOS only", "allocator": "",
                    "copy_bandwidth_bytes_per_s": 0.0, "configurations": [],
                    "failed_configurations": []}
    if document.get("complete"):
        return
    document["error"] = message
    document["complete"] = True
    write_json(path, document)


def finished(path: pathlib.Path) -> bool:
    """Whether an earlier run left this variant's file complete and without an error (a
    variant cut by a time limit is "complete": false; one whose process died has an error)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return document.get("complete") is True and document.get("error") is None


def run_parent(args) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    forwarded = ["--batch", ",".join(map(str, args.batch)),
                 "--new-tokens", ",".join(map(str, args.new_tokens)),
                 "--runs", str(args.runs), "--naive-runs", str(args.naive_runs),
                 "--warmup", str(args.warmup), "--seed", str(args.seed),
                 "--compile-mode", args.compile_mode,
                 "--anchor-compile-mode", args.anchor_compile_mode,
                 "--model", args.model,
                 "--sweep-batch", ",".join(map(str, args.sweep_batch)) or "none",
                 "--out", str(args.out)]
    if args.suffix:
        forwarded += ["--suffix", args.suffix]
    written = []
    for precision in args.precision:
        for allocator_conf, keys in process_groups(args.variants):
            if args.resume:
                kept = [key for key in keys if finished(
                    output_path(args.out, VARIANTS_BY_KEY[key], precision, args.suffix))]
                if kept:
                    progress(f"pytorch_baseline.py: {precision}: {', '.join(kept)} kept "
                             "(--resume: finished by an earlier run)")
                written += [output_path(args.out, VARIANTS_BY_KEY[key], precision, args.suffix)
                            for key in kept]
                keys = [key for key in keys if key not in kept]
                if not keys:
                    continue
            environment = dict(os.environ)
            environment.pop("PYTORCH_ALLOC_CONF", None)
            environment.pop(ALLOCATOR_VARIABLE, None)
            if allocator_conf:
                environment[ALLOCATOR_VARIABLE] = allocator_conf
            command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker",
                       "--precision", precision, "--variants", ",".join(keys)] + forwarded
            for key in keys:  # no stale file from an earlier run can pass for this one's
                output_path(args.out, VARIANTS_BY_KEY[key], precision, args.suffix).unlink(
                    missing_ok=True)
            progress(f"pytorch_baseline.py: {precision}: {', '.join(keys)}"
                     + (f" ({ALLOCATOR_VARIABLE}={allocator_conf})" if allocator_conf else ""))
            code = subprocess.run(command, env=environment).returncode
            if code in (EXIT_NO_CUDA_DEVICE, EXIT_NO_TORCH):
                return code  # the worker said why, in one line
            for key in keys:
                path = output_path(args.out, VARIANTS_BY_KEY[key], precision, args.suffix)
                if code != 0:
                    record_crash(path, VARIANTS_BY_KEY[key], precision,
                                 f"the process running it exited with code {code}",
                                 args.anchor_compile_mode)
                written.append(path)
    progress(f"pytorch_baseline.py: {len(written)} files in {args.out} "
             f"({time.perf_counter() - started:.0f} s)")
    return 0


def parse_arguments(argv):
    parser = argparse.ArgumentParser(
        prog="pytorch_baseline.py",
        description="The ladder's rungs in PyTorch (Hugging Face GPT-2), on its workload.")
    parser.add_argument("--variants", type=name_list([v.key for v in VARIANTS]),
                        default=[v.key for v in VARIANTS],
                        help="comma-separated, from " + ",".join(v.key for v in VARIANTS)
                             + " (default: all)")
    parser.add_argument("--precision", type=name_list(PRECISIONS), default=list(PRECISIONS),
                        help="fp32 (TF32 off), tf32 (TF32 matmuls), or both (default)")
    parser.add_argument("--model", choices=list(MODEL_SHAPES), default="small",
                        help="GPT-2's size, random weights: small (12 layers, 12 heads, 768), "
                             "medium (24, 16, 1024), large (36, 20, 1280), xl (48, 25, 1600) "
                             "(default %(default)s)")
    parser.add_argument("--batch", type=integer_list, default=[32],
                        help="rows per batch, e.g. 32 or 1,8,32,64 (default 32)")
    parser.add_argument("--new-tokens", type=integer_list, default=[100, 200, 400],
                        help="new tokens per row, e.g. 100,200,400 (default)")
    parser.add_argument("--runs", type=positive, default=5, help="timed runs (default 5)")
    parser.add_argument("--naive-runs", type=positive, default=3,
                        help="timed runs of the slow naive variant, at most --runs (default 3)")
    parser.add_argument("--warmup", type=non_negative, default=1,
                        help="untimed runs first; they also compile (default 1)")
    parser.add_argument("--seed", type=non_negative, default=0,
                        help="torch.manual_seed before the model is built (default 0)")
    parser.add_argument("--compile-mode", choices=COMPILE_MODES, default=COMPILE_MODES[0],
                        help="torch.compile mode of the compile and pingpong variants "
                             "(default %(default)s)")
    parser.add_argument("--anchor-compile-mode", choices=ANCHOR_COMPILE_MODES,
                        default=ANCHOR_COMPILE_MODES[0],
                        help="torch.compile mode of the compiled anchors (hf_static_compiled, "
                             "static_step_compiled), fullgraph=True; max-autotune compiles "
                             "for minutes (default %(default)s)")
    parser.add_argument("--sweep-batch", type=batch_list, default=[1, 8, 64],
                        help="the compiled anchors also run these batches at the smallest "
                             "--new-tokens, into the same file; 'none' for no sweep "
                             "(default 1,8,64)")
    parser.add_argument("--out", type=pathlib.Path, default=REPOSITORY / "results" / "latest",
                        help="where the JSON files go (default results/latest)")
    parser.add_argument("--suffix", default="",
                        help="added to the file names, e.g. 'sweep' for <chapter>.fp32.sweep.json")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 8 new tokens, one timed run")
    parser.add_argument("--resume", action="store_true",
                        help="keep each variant file in --out that an earlier run finished "
                             "(complete, no error) and run only the others: a job cut by a "
                             "time limit goes on where it stopped")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.new_tokens, args.runs, args.naive_runs = [8], 1, 1
    if max(args.new_tokens) + 1 > 1024:
        parser.error("--new-tokens: BOS plus the new tokens must fit GPT-2's 1024 positions")
    if args.suffix and not args.suffix.replace("_", "").replace("-", "").isalnum():
        parser.error("--suffix: letters, digits, '-' and '_' only")
    if args.worker and len(args.precision) != 1:
        parser.error("--worker takes one --precision")
    if args.worker:
        args.precision = args.precision[0]
    return args


def main(argv) -> int:
    args = parse_arguments(argv)
    return run_worker(args) if args.worker else run_parent(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
