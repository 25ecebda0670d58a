#!/usr/bin/env python3
"""scripts/make_golden_model.py - golden data that checks the CPU reference against Hugging Face.

Builds a small random GPT-2 with transformers (2 layers, 4 heads, 64 wide, vocabulary
381, 128 positions, BOS = EOS = 380), saves it as a Hugging Face checkpoint, and records
what transformers computes with it: logits for fixed random sequences and greedy tokens.
tests/cpu/test_reference.cpp loads the checkpoint with ladder::load_gpt2_checkpoint and
checks common/reference.cpp against these files (logits within 1e-5 relative, tokens
exactly). The vocabulary is not a multiple of 32 on purpose, so kernels tested against
the reference meet ragged sizes.

Why the weights are not GPT-2's initialisation (normal(0, 0.02), zero biases, unit
LayerNorm): with it the logits are nearly flat, greedy rows collapse onto one repeated
token within a few steps and an EOS never comes, and zero biases or unit LayerNorm
weights would let a loader that drops or swaps them pass. So every parameter is redrawn
from a fixed seed: matrices, embeddings and biases from normal(0, 0.2), LayerNorm
weights from 1 + normal(0, 0.1). The logits then spread over several units, greedy rows
differ and wander, and some token is emitted by every row of a batch within a few steps.

Arithmetic is plain fp32: TF32 off, eager attention, no dropout (eval mode). Greedy
decoding is a plain loop (the whole forward every step, argmax of the last position,
ties to the first index as torch.argmax) that always runs all MAX_NEW_TOKENS steps;
the C++ tests apply the repository's stopping rule to these tokens themselves.

Outputs, committed to the repository (regenerate only to change the cases):
  tests/data/golden_model/config.json, model.safetensors   the checkpoint
  teacher_forced.json          {"tokens": [R][T] ids, "logits": [R][T][V]}
  greedy_bos.json              {"prompts": [B][1] (BOS only), "max_new_tokens": N,
                                "tokens": [B][N], "logits_row0": [N][V], "min_top2_margin"}
  greedy_random_prompts.json   {"prompts": [B][7], "max_new_tokens": N, "tokens": [B][N],
                                "min_top2_margin"}
  greedy_eos.json              as greedy_random_prompts.json, plus "eos_override": an id
                               that every row emits early, "first_eos_step": [B] (0-based
                               step of each row's first eos_override), "stop_steps": the
                               number of tokens the stopping rule keeps (last row's first
                               eos_override step + 1, below max_new_tokens)
Every greedy "tokens" row holds the generated ids only (the prompt excluded).
"min_top2_margin" is the smallest gap between the best and second-best logit over all
recorded steps: a token mismatch at a step with a tiny margin points at rounding, not
at a bug. Floats are written with the fewest digits that round-trip their fp32 value.

Run from the repository root on a machine with torch and transformers (a GPU is used
when present, the CPU otherwise; about ten seconds either way):
    python3 scripts/make_golden_model.py
"""
import json
import pathlib
import struct

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

OUTPUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "golden_model"

VOCAB_SIZE = 381
EOS_TOKEN_ID = VOCAB_SIZE - 1  # also BOS, as in GPT-2
N_POSITIONS = 128
WEIGHT_STD = 0.2
LAYERNORM_WEIGHT_STD = 0.1
WEIGHT_SEED = 20240517
DATA_SEED = 7

TEACHER_FORCED_ROWS = 2
TEACHER_FORCED_LENGTH = 100
BATCH = 4
PROMPT_LENGTH = 7
MAX_NEW_TOKENS = 24
EOS_WINDOW = 12          # eos_override must come from every row within this many steps
EOS_CANDIDATE_SETS = 64  # prompt sets screened for an EOS case, in one batch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def build_model() -> GPT2LMHeadModel:
    config = GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=N_POSITIONS,
        n_embd=64,
        n_layer=2,
        n_head=4,
        activation_function="gelu_new",
        layer_norm_epsilon=1e-5,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=EOS_TOKEN_ID,
        eos_token_id=EOS_TOKEN_ID,
        tie_word_embeddings=True,
    )
    model = GPT2LMHeadModel(config)
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager", "eager attention was not selected"

    generator = torch.Generator().manual_seed(WEIGHT_SEED)
    with torch.no_grad():
        # named_parameters() lists the tied LM head once, as transformer.wte.weight.
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
            is_layernorm_weight = name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight"))
            if is_layernorm_weight:
                parameter.copy_(1.0 + LAYERNORM_WEIGHT_STD * noise)
            else:
                parameter.copy_(WEIGHT_STD * noise)
    model.tie_weights()
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), \
        "the LM head is not tied to the token embedding"
    return model.to(device=DEVICE, dtype=torch.float32).eval()


@torch.no_grad()
def logits_of(model: GPT2LMHeadModel, tokens: torch.Tensor) -> torch.Tensor:
    """Logits [rows, T, V] of a whole batch of sequences, on the CPU."""
    return model(input_ids=tokens.to(DEVICE), use_cache=False).logits.float().cpu()


def greedy(model: GPT2LMHeadModel, prompts: torch.Tensor, new_tokens: int):
    """Greedy decoding for exactly `new_tokens` steps: (tokens [B, N], logits [N, B, V])."""
    sequence = prompts.clone()
    step_logits = []
    for _ in range(new_tokens):
        logits = logits_of(model, sequence)[:, -1, :]
        step_logits.append(logits)
        sequence = torch.cat([sequence, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return sequence[:, prompts.shape[1]:], torch.stack(step_logits)


def min_top2_margin(logits: torch.Tensor) -> float:
    top2 = logits.topk(2, dim=-1).values
    return float((top2[..., 0] - top2[..., 1]).min())


def eos_case(tokens: torch.Tensor):
    """An id every row emits within EOS_WINDOW steps, first at different steps (so rows
    that finish early must keep decoding): (id, first steps, stop steps) with the
    earliest stop, ties to the smallest id; None when the rows share no such id."""
    rows = tokens.tolist()
    best = None
    for candidate in sorted(set(rows[0][:EOS_WINDOW])):
        if not all(candidate in row[:EOS_WINDOW] for row in rows):
            continue
        first_steps = [row.index(candidate) for row in rows]
        if len(set(first_steps)) < 2:
            continue
        stop_steps = max(first_steps) + 1
        if best is None or stop_steps < best[2]:
            best = (candidate, first_steps, stop_steps)
    return best


def find_eos_case(model: GPT2LMHeadModel, generator: torch.Generator):
    """Screens EOS_CANDIDATE_SETS prompt sets in one batch, then re-runs the first set
    that qualifies on its own: a batch of BATCH rows may round differently from the big
    batch, and the recorded tokens must be those of the batch the tests run."""
    candidates = torch.randint(0, VOCAB_SIZE, (EOS_CANDIDATE_SETS, BATCH, PROMPT_LENGTH),
                               generator=generator)
    screened, _ = greedy(model, candidates.reshape(-1, PROMPT_LENGTH), MAX_NEW_TOKENS)
    screened = screened.reshape(EOS_CANDIDATE_SETS, BATCH, MAX_NEW_TOKENS)
    for index in range(EOS_CANDIDATE_SETS):
        if eos_case(screened[index]) is None:
            continue
        tokens, logits = greedy(model, candidates[index], MAX_NEW_TOKENS)
        case = eos_case(tokens)
        if case is not None:
            return candidates[index], tokens, logits, case
    raise SystemExit(f"no prompt set among {EOS_CANDIDATE_SETS} has a token that every row emits "
                     f"within {EOS_WINDOW} steps: raise EOS_CANDIDATE_SETS or EOS_WINDOW")


def shortest_fp32(value: float) -> float:
    """The double with the fewest decimal digits that still rounds to the same fp32 value,
    so the JSON stays small and a C++ reader gets the exact fp32 back."""
    exact = struct.unpack("<f", struct.pack("<f", value))[0]
    for digits in range(6, 10):
        candidate = float(f"{exact:.{digits}g}")
        if struct.unpack("<f", struct.pack("<f", candidate))[0] == exact:
            return candidate
    return exact


def floats(tensor: torch.Tensor):
    """`tensor` as nested lists of floats, each made short by shortest_fp32."""
    def shorten(values):
        if isinstance(values, list):
            return [shorten(part) for part in values]
        return shortest_fp32(values)
    return shorten(tensor.tolist())


def write_json(name: str, description: str, content: dict, output: pathlib.Path = OUTPUT,
               made_by: str = "scripts/make_golden_model.py") -> None:
    document = {
        "description": description,
        "made_by": made_by,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        **content,
    }
    path = output / name
    path.write_text(json.dumps(document, separators=(",", ":")) + "\n")
    print(f"  {name}: {path.stat().st_size / 1024:.0f} KiB")


def main() -> None:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {DEVICE}")
    model = build_model()
    OUTPUT.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(OUTPUT)
    # The tests need only config.json and model.safetensors; greedy settings live in the tests.
    (OUTPUT / "generation_config.json").unlink(missing_ok=True)
    assert (OUTPUT / "model.safetensors").exists(), "save_pretrained wrote no model.safetensors"
    print(f"  checkpoint: {sorted(path.name for path in OUTPUT.iterdir())}")

    generator = torch.Generator().manual_seed(DATA_SEED)

    sequences = torch.randint(0, VOCAB_SIZE, (TEACHER_FORCED_ROWS, TEACHER_FORCED_LENGTH),
                              generator=generator)
    write_json("teacher_forced.json",
               "Logits at every position of fixed random sequences (no generation).",
               {"tokens": sequences.tolist(), "logits": floats(logits_of(model, sequences))})

    bos_prompts = torch.full((BATCH, 1), EOS_TOKEN_ID, dtype=torch.long)
    bos_tokens, bos_logits = greedy(model, bos_prompts, MAX_NEW_TOKENS)
    write_json("greedy_bos.json",
               "Greedy tokens from BOS-only prompts, all max_new_tokens steps; "
               "logits_row0[s] are row 0's logits at step s.",
               {"prompts": bos_prompts.tolist(), "max_new_tokens": MAX_NEW_TOKENS,
                "tokens": bos_tokens.tolist(), "logits_row0": floats(bos_logits[:, 0, :]),
                "min_top2_margin": min_top2_margin(bos_logits)})

    random_prompts = torch.randint(0, VOCAB_SIZE, (BATCH, PROMPT_LENGTH), generator=generator)
    random_tokens, random_logits = greedy(model, random_prompts, MAX_NEW_TOKENS)
    write_json("greedy_random_prompts.json",
               "Greedy tokens from per-row random prompts, all max_new_tokens steps.",
               {"prompts": random_prompts.tolist(), "max_new_tokens": MAX_NEW_TOKENS,
                "tokens": random_tokens.tolist(),
                "min_top2_margin": min_top2_margin(random_logits)})

    eos_prompts, eos_tokens, eos_logits, eos = find_eos_case(model, generator)
    eos_id, first_steps, stop_steps = eos
    write_json("greedy_eos.json",
               "Greedy tokens from per-row random prompts, all max_new_tokens steps, with an "
               "eos_override that every row emits: generation with it stops after stop_steps.",
               {"prompts": eos_prompts.tolist(), "max_new_tokens": MAX_NEW_TOKENS,
                "tokens": eos_tokens.tolist(), "min_top2_margin": min_top2_margin(eos_logits),
                "eos_override": eos_id, "first_eos_step": first_steps, "stop_steps": stop_steps})

    print("summary:")
    margins = {"BOS": min_top2_margin(bos_logits), "random prompts": min_top2_margin(random_logits),
               "EOS case": min_top2_margin(eos_logits)}
    print(f"  BOS rows: {bos_tokens[0].tolist()}")
    for row in random_tokens.tolist():
        print(f"  random-prompt row: {row}")
    print(f"  random prompts: {len(set(random_tokens.flatten().tolist()))} distinct ids")
    print(f"  EOS case: id {eos_id}, first emitted at steps {first_steps}, "
          f"stop after {stop_steps} of {MAX_NEW_TOKENS} steps")
    print("  smallest top-1/top-2 logit margins: "
          + ", ".join(f"{case} {margin:.3g}" for case, margin in margins.items()))
    if min(margins.values()) < 1e-4:
        print("  WARNING: a margin below 1e-4 is close to a tie; pick another DATA_SEED")


if __name__ == "__main__":
    main()
