#!/usr/bin/env python3
"""scripts/make_golden_bf16.py - golden data that checks the CPU reference's bf16 mode against
Hugging Face transformers running in torch.bfloat16.

Loads the committed golden checkpoint (tests/data/golden_model/, made by
scripts/make_golden_model.py: 2 layers, 4 heads, 64 wide, vocabulary 381), converts every
parameter to torch.bfloat16 (round to nearest even, as the reference's bf16 mode does at
load), and records what transformers computes on the inputs of the fp32 golden files:
  tests/data/golden_model_bf16/teacher_forced.json
      {"tokens": [R][T] (those of golden_model/teacher_forced.json), "logits": [R][T][V]}
  tests/data/golden_model_bf16/greedy_random_prompts.json, greedy_bos.json
      {"prompts": [B][P] (those of the fp32 file of the same name), "max_new_tokens": N,
       "tokens": [B][N] greedy ids, all N steps, the prompt excluded}
tests/cpu/test_reference_bf16.cpp checks ladder::reference::Model(weights,
Precision::bf16) against these files; while they are absent its "[golden_bf16]" test is
reported as skipped.

What runs in bf16 here, and where it rounds differently from the reference's bf16 mode
(rounding points R1-R7 in common/reference.hpp), which is why the tests allow a few
1e-2 of relative error rather than the 1e-5 of the fp32 golden data:
  * same: weights (R1), the embedding sum (R2), LayerNorm outputs with fp32 statistics
    (R3), qkv with the bias added before its single rounding (R4), the attention output
    (R5);
  * eager attention (as the fp32 golden data) rounds the scores q k^T, their scaling by
    1/sqrt(D) and the softmax probabilities to bf16, where the reference keeps them wide;
  * each projection is rounded to bf16 before it is added to the residual (two
    roundings where R6 has one), and the MLP's GELU is evaluated op by op in bf16 on a
    bf16 input (R7 rounds once, after GELU);
  * torch's bf16 matmuls accumulate in fp32 in their own order (the reference: double).
The logits are computed in fp32 from the bf16 output of the final LayerNorm and the bf16
token embedding (not by the bf16 LM head, whose output would be bf16): the reference and
the bf16 kernels store fp32 logits, so the argmax compares the same thing.

Greedy decoding is a plain loop (the whole forward every step, argmax of the last
position, ties to the first index) over all max_new_tokens steps, as in
make_golden_model.py. TF32 is off; eval mode (no dropout).

Run from the repository root on a machine with torch and transformers (the GPU is used
when present: bf16 matmuls on the CPU take other code paths; a few seconds), then commit
tests/data/golden_model_bf16/:
    python3 scripts/make_golden_bf16.py
"""
import json
import pathlib

import torch
import transformers
from transformers import GPT2LMHeadModel

import make_golden_model  # its JSON writer
from make_golden_model import floats  # fp32 values written with the fewest digits

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHECKPOINT = ROOT / "tests" / "data" / "golden_model"
OUTPUT = ROOT / "tests" / "data" / "golden_model_bf16"

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_bf16_model() -> GPT2LMHeadModel:
    model = GPT2LMHeadModel.from_pretrained(CHECKPOINT)  # fp32, as saved
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager", "eager attention was not selected"
    model = model.to(device=DEVICE, dtype=torch.bfloat16).eval()
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), \
        "the LM head is not tied to the token embedding"
    assert all(parameter.dtype == torch.bfloat16 for parameter in model.parameters())
    return model


@torch.no_grad()
def logits_of(model: GPT2LMHeadModel, tokens: torch.Tensor) -> torch.Tensor:
    """fp32 logits [rows, T, V], on the CPU, from the bf16 final LayerNorm output."""
    hidden = model.transformer(input_ids=tokens.to(DEVICE), use_cache=False).last_hidden_state
    assert hidden.dtype == torch.bfloat16
    embedding = model.transformer.wte.weight.float()
    return torch.matmul(hidden.float(), embedding.t()).cpu()


def greedy(model: GPT2LMHeadModel, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy tokens [B, N] for exactly `new_tokens` steps."""
    sequence = prompts.clone()
    for _ in range(new_tokens):
        next_tokens = logits_of(model, sequence)[:, -1, :].argmax(dim=-1, keepdim=True)
        sequence = torch.cat([sequence, next_tokens], dim=1)
    return sequence[:, prompts.shape[1]:]


def read_fp32_golden(name: str) -> dict:
    path = CHECKPOINT / name
    if not path.exists():
        raise SystemExit(f"missing {path}: run scripts/make_golden_model.py first")
    return json.loads(path.read_text())


def write_json(name: str, description: str, content: dict) -> None:
    make_golden_model.write_json(name, description, {"device": str(DEVICE), **content},
                                 output=OUTPUT, made_by="scripts/make_golden_bf16.py")


def main() -> None:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {DEVICE}")
    model = load_bf16_model()
    OUTPUT.mkdir(parents=True, exist_ok=True)

    sequences = torch.tensor(read_fp32_golden("teacher_forced.json")["tokens"])
    write_json("teacher_forced.json",
               "fp32 logits (from the bf16 final LayerNorm output and bf16 embedding) at every "
               "position of the fp32 golden data's sequences, model in torch.bfloat16.",
               {"tokens": sequences.tolist(), "logits": floats(logits_of(model, sequences))})

    for name in ("greedy_random_prompts.json", "greedy_bos.json"):
        fp32_golden = read_fp32_golden(name)
        prompts = torch.tensor(fp32_golden["prompts"])
        steps = fp32_golden["max_new_tokens"]
        tokens = greedy(model, prompts, steps)
        agreement = (tokens == torch.tensor(fp32_golden["tokens"])).float().mean().item()
        write_json(name,
                   "Greedy tokens of the model in torch.bfloat16 from the fp32 golden data's "
                   "prompts, all max_new_tokens steps.",
                   {"prompts": prompts.tolist(), "max_new_tokens": steps,
                    "tokens": tokens.tolist()})
        print(f"    token agreement with the fp32 golden tokens: {agreement:.3f}")


if __name__ == "__main__":
    main()
