#!/usr/bin/env python3
"""tests/scripts/test_gpt2_static_decode.py - the hand-written static-cache step
(scripts/gpt2_static_decode.py) against Hugging Face, on the CPU.

On the committed golden model (tests/data/golden_model, made by Hugging Face
transformers): the step run eagerly must give the golden greedy tokens (BOS prompts,
per-row random prompts, and the case where every row emits a chosen EOS, which must stop
at the golden step), and the same tokens as Hugging Face's eager generate() on the same
weights, checked the way scripts/pytorch_baseline.py checks its compiled anchors (its
decoder on the model's state dict, its Hugging Face reference and token check run here
too, eagerly, on the CPU). The weights are loaded from the safetensors as saved (keys
with "transformer.") and with the prefix taken off. Repeat runs of one decoder give the
same tokens.

    python3 tests/scripts/test_gpt2_static_decode.py

Needs torch, transformers and safetensors; without them it prints one line and exits
with 77, which CTest reports as skipped.
"""
import json
import sys
import types

from script_checks import SCRIPTS, expect

SKIP = 77
try:
    import safetensors  # noqa: F401  (the loader's)
    import torch
    import transformers
except ImportError as error:
    print(f"test_gpt2_static_decode.py: skipped: {error} (torch, transformers and safetensors "
          "are needed)")
    sys.exit(SKIP)

sys.path.insert(0, str(SCRIPTS))
import gpt2_static_decode as static_decode  # noqa: E402  (after the path)
import pytorch_baseline as baseline  # noqa: E402

GOLDEN = SCRIPTS.parent / "tests" / "data" / "golden_model"
torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")

config, safetensors_weights = static_decode.load_checkpoint(GOLDEN)
model = transformers.GPT2LMHeadModel.from_pretrained(GOLDEN).eval()
bare_weights = {name.removeprefix("transformer."): tensor
                for name, tensor in safetensors_weights.items()}
expect(any(name.startswith("transformer.") for name in safetensors_weights),
       "the golden safetensors no longer hold \"transformer.\" keys: test the other style")


def decode(weights, prompts, new_tokens, eos):
    decoder = static_decode.StaticGPT2Decoder(config, weights, prompts.shape[0], prompts.shape[1],
                                              new_tokens, eos, device="cpu")
    with torch.no_grad():
        first = decoder.generate(prompts)
        second = decoder.generate(prompts)
    expect(first[1] == second[1] and torch.equal(first[0], second[0]),
           "a second run of one decoder gave other tokens")
    return first


def hugging_face(prompts, new_tokens, eos):
    """Hugging Face's eager generate(), greedy, stopping (and padding) at `eos`."""
    with torch.no_grad():
        output = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts),
                                max_new_tokens=new_tokens, do_sample=False, num_beams=1,
                                eos_token_id=eos, pad_token_id=eos)
    return output[:, prompts.shape[1]:].tolist()


for case in ("greedy_bos", "greedy_random_prompts", "greedy_eos"):
    golden = json.loads((GOLDEN / f"{case}.json").read_text())
    prompts = torch.tensor(golden["prompts"], dtype=torch.long)
    new_tokens = golden["max_new_tokens"]
    eos = golden.get("eos_override", config["eos_token_id"])
    stop = golden.get("stop_steps", new_tokens)
    for source, weights in (("safetensors", safetensors_weights),
                            ("keys without 'transformer.'", bare_weights)):
        tokens, steps = decode(weights, prompts, new_tokens, eos)
        expect(steps == stop, f"{case} ({source}): stopped after {steps} steps, not {stop}")
        expect(tokens.tolist() == [row[:stop] for row in golden["tokens"]],
               f"{case} ({source}): tokens differ from the golden ones")
        check = baseline.compare_tokens(tokens.tolist(), hugging_face(prompts, new_tokens, eos), eos)
        expect(check["equal"], f"{case} ({source}): {baseline.token_check_line(check)}")

# pytorch_baseline.py's anchor path on the CPU: its decoder (eager here) and its check
# against Hugging Face's generate() with the margins recorded, on the BOS workload.
baseline.DEVICE = "cpu"
static_decode.compile_step = lambda decoder, mode: decoder.step  # eager: no compiler here
runner = object.__new__(baseline.VariantRunner)
runner.torch, runner.transformers, runner.model, runner.config = torch, transformers, model, model.config
runner.eos, runner.bos, runner.references = model.config.eos_token_id, model.config.bos_token_id, {}
runner.args = types.SimpleNamespace(anchor_compile_mode="reduce-overhead", precision="fp32")
decode_run = runner.static_step_decoder(3, 20)
with torch.no_grad():
    tokens, steps, syncs = decode_run(torch.full((3, 1), runner.bos, dtype=torch.long))
check = runner.token_check(3, 20, tokens)
expect(syncs == 1 and steps == 20, f"the anchor's decode: {steps} steps, {syncs} waits")
expect(check["equal"] and check["compared_tokens"] == 60 and check["reference_min_top2_margin"] > 0,
       f"the anchor's token check: {check}")

print("gpt2_static_decode.py: golden tokens and Hugging Face generate()'s, equal on the CPU "
      "(BOS, random prompts, EOS stop; both weight layouts)")
