#!/usr/bin/env python3
"""scripts/check_hf_gpt2_small.py - Hugging Face's greedy tokens for GPT-2 small at full size.

The committed golden model (scripts/make_golden_model.py) is tiny, so CI stays fast. This
script checks the full-size path on the GPU machine: it builds GPT-2 small with
transformers' defaults (GPT2Config(): 12 layers, 12 heads, 768 wide, vocabulary 50257)
and transformers' own random initialisation from a fixed seed, saves it as a Hugging
Face checkpoint, and greedy-decodes per-row random prompts. A chapter run on the same
checkpoint and prompts must produce the same tokens:

    python3 scripts/check_hf_gpt2_small.py /tmp/gpt2_small_check
    build/h200/chapters/<chapter> --weights /tmp/gpt2_small_check --batch 4 \\
        --prompt-file /tmp/gpt2_small_check/prompts.txt --new-tokens 16 \\
        --runs 1 --dump-tokens /tmp/gpt2_small_check/chapter_tokens.txt
    diff /tmp/gpt2_small_check/hf_tokens.txt /tmp/gpt2_small_check/chapter_tokens.txt

Writes into the directory given on the command line:
    config.json, model.safetensors (and transformers' generation_config.json)
    prompts.txt     BATCH rows of PROMPT_LENGTH ids, one row per line, ids separated by spaces
    hf_tokens.txt   the NEW_TOKENS generated ids of each row, same format

Arithmetic is plain fp32 (TF32 off, eager attention, eval mode). Decoding is a plain
loop (the whole forward every step, argmax of the last position, ties to the first
index) that runs all NEW_TOKENS steps. If a row emits EOS (50256), a chapter stops once
every row has, so compare its tokens with the matching prefix; the script says so.
Random GPT-2 weights give small logit margins: the script prints the smallest top-1 /
top-2 gap per step, so a mismatch at a near-tie can be told from a bug.
Needs a CUDA GPU (about half a minute, most of it building the model).
"""
import pathlib
import sys

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

MODEL_SEED = 0
PROMPT_SEED = 1
BATCH = 4
PROMPT_LENGTH = 8
NEW_TOKENS = 16
EOS_TOKEN_ID = 50256

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def write_rows(path: pathlib.Path, rows) -> None:
    path.write_text("".join(" ".join(str(token) for token in row) + "\n" for row in rows))


@torch.no_grad()
def greedy(model: GPT2LMHeadModel, prompts: torch.Tensor, new_tokens: int):
    """Greedy decoding for exactly `new_tokens` steps: (tokens [B, N], margins [N])."""
    sequence = prompts
    margins = []
    for _ in range(new_tokens):
        logits = model(input_ids=sequence, use_cache=False).logits[:, -1, :].float()
        top2 = logits.topk(2, dim=-1).values
        margins.append(float((top2[:, 0] - top2[:, 1]).min()))
        sequence = torch.cat([sequence, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return sequence[:, prompts.shape[1]:].cpu(), margins


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python3 scripts/check_hf_gpt2_small.py OUTPUT_DIRECTORY")
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run this on the GPU machine")
    output = pathlib.Path(sys.argv[1])
    output.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}")

    torch.manual_seed(MODEL_SEED)  # transformers' initialisation draws from the global generator
    model = GPT2LMHeadModel(GPT2Config())
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager", "eager attention was not selected"
    model = model.to(device="cuda", dtype=torch.float32).eval()
    model.save_pretrained(output)
    assert (output / "model.safetensors").exists(), "save_pretrained wrote no model.safetensors"

    generator = torch.Generator().manual_seed(PROMPT_SEED)
    prompts = torch.randint(0, EOS_TOKEN_ID, (BATCH, PROMPT_LENGTH), generator=generator)
    tokens, margins = greedy(model, prompts.cuda(), NEW_TOKENS)
    write_rows(output / "prompts.txt", prompts.tolist())
    write_rows(output / "hf_tokens.txt", tokens.tolist())

    print(f"wrote {output}/prompts.txt and {output}/hf_tokens.txt")
    for row in tokens.tolist():
        print(f"  {row}")
    print("  smallest top-1/top-2 logit margin per step: " + " ".join(f"{m:.3g}" for m in margins))
    eos_rows = [index for index, row in enumerate(tokens.tolist()) if EOS_TOKEN_ID in row]
    if eos_rows:
        print(f"  rows {eos_rows} emit EOS: a chapter stops once every row has; compare prefixes")


if __name__ == "__main__":
    main()
