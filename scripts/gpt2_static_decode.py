#!/usr/bin/env python3
"""scripts/gpt2_static_decode.py - GPT-2 greedy decode in plain PyTorch, one compiled step.

What a user writes who wants GPT-2 fast in PyTorch without Hugging Face's generate()
(gpt-fast's recipe): every tensor the loop touches is allocated once (the weights, a
static KV cache for prompt + N positions, the input tokens, the position as a device
tensor, the "finished" flags, the output), and one step - the forward of one token per
row, greedy argmax, the EOS bookkeeping and the position's increment - is one function
that only writes into those tensors. torch.compile(step, mode="reduce-overhead",
fullgraph=True) turns it into one CUDA graph replay a step. The host enqueues all N
steps and waits once, at the end, for the step at which the last row produced EOS (the
chapters' stopping rule: the GPU still runs all N steps, the output keeps those up to
that one).

The math is Hugging Face's GPT2LMHeadModel's (Conv1D as addmm with [in, out] weights,
the tanh GELU written as transformers writes it, the LM head tied to the token
embedding), with attention over the whole cache and a mask, as transformers'
StaticCache. A prompt longer than one token is fed one position at a time through the
same (uncompiled) forward before the first step.

Weights: a Hugging Face GPT-2 directory (config.json, model.safetensors; keys with or
without "transformer."), or a state dict in the same layout (GPT2LMHeadModel's own).

    python3 scripts/gpt2_static_decode.py --weights tests/data/golden_model --batch 4 \\
        --new-tokens 24 [--prompt-file FILE] [--compile none|reduce-overhead|max-autotune]

prints the generated ids, one row per line. scripts/pytorch_baseline.py times it as its
"static_step_compiled" variant.
"""
import argparse
import json
import math
import pathlib
import sys

import torch
import torch.nn.functional as F

LAYER_TENSORS = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                 "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                 "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias")


def load_checkpoint(directory):
    """(config dict, state dict) of a Hugging Face GPT-2 directory."""
    from safetensors.torch import load_file
    directory = pathlib.Path(directory)
    return (json.loads((directory / "config.json").read_text()),
            load_file(str(directory / "model.safetensors")))


class StaticGPT2Decoder:
    """GPT-2 greedy decoding for a fixed batch, prompt length and number of new tokens."""

    def __init__(self, config, state_dict, batch, prompt_length, max_new_tokens, eos,
                 dtype=torch.float32, device="cuda"):
        weights = {name.removeprefix("transformer."): tensor for name, tensor in state_dict.items()}
        self.n_head, self.epsilon, self.eos = config["n_head"], config["layer_norm_epsilon"], eos
        self.max_new_tokens = max_new_tokens
        capacity = prompt_length + max_new_tokens
        if capacity > config["n_positions"]:
            raise ValueError(f"prompt + new tokens ({capacity}) exceed n_positions "
                             f"({config['n_positions']})")

        def load(name):
            return weights[name].to(device=device, dtype=dtype).contiguous()
        self.wte, self.wpe = load("wte.weight"), load("wpe.weight")
        self.ln_f = (load("ln_f.weight"), load("ln_f.bias"))
        self.layers = [{name: load(f"h.{index}.{name}") for name in LAYER_TENSORS}
                       for index in range(config["n_layer"])]
        head_size = config["n_embd"] // self.n_head
        cache_shape = (batch, self.n_head, capacity, head_size)
        self.keys = [torch.zeros(cache_shape, dtype=dtype, device=device) for _ in self.layers]
        self.values = [torch.zeros(cache_shape, dtype=dtype, device=device) for _ in self.layers]
        self.cache_positions = torch.arange(capacity, device=device)
        # The loop's state, on the device: the step reads and writes only these.
        self.tokens = torch.zeros(batch, dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.step_index = torch.zeros(1, dtype=torch.long, device=device)
        self.finished = torch.zeros(batch, dtype=torch.bool, device=device)
        self.stop_step = torch.zeros(1, dtype=torch.long, device=device)
        self.generated = torch.zeros(batch, max_new_tokens, dtype=torch.long, device=device)
        # Fixed addresses: CUDA graphs read the weights and update the state in place.
        for tensor in self._all_tensors():
            torch._dynamo.mark_static_address(tensor)

    def _all_tensors(self):
        yield from (self.wte, self.wpe, *self.ln_f, *self.keys, *self.values,
                    self.cache_positions, self.tokens, self.position, self.step_index,
                    self.finished, self.stop_step, self.generated)
        for layer in self.layers:
            yield from layer.values()

    def _layer_norm(self, x, weight, bias):
        return F.layer_norm(x, (x.shape[-1],), weight, bias, self.epsilon)

    def logits(self):
        """The forward of self.tokens at self.position: appends K/V, returns [B, V]."""
        batch = self.tokens.shape[0]
        x = self.wte[self.tokens] + self.wpe[self.position]                  # [B, C]
        visible = (self.cache_positions <= self.position).view(1, 1, 1, -1)  # [1, 1, 1, S]
        for layer, keys, values in zip(self.layers, self.keys, self.values):
            h = self._layer_norm(x, layer["ln_1.weight"], layer["ln_1.bias"])
            qkv = torch.addmm(layer["attn.c_attn.bias"], h, layer["attn.c_attn.weight"])
            q, k, v = (part.view(batch, self.n_head, 1, -1) for part in qkv.chunk(3, dim=-1))
            keys.index_copy_(2, self.position, k)
            values.index_copy_(2, self.position, v)
            attention = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)
            x = x + torch.addmm(layer["attn.c_proj.bias"], attention.reshape(batch, -1),
                                layer["attn.c_proj.weight"])
            h = self._layer_norm(x, layer["ln_2.weight"], layer["ln_2.bias"])
            h = torch.addmm(layer["mlp.c_fc.bias"], h, layer["mlp.c_fc.weight"])
            h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
            x = x + torch.addmm(layer["mlp.c_proj.bias"], h, layer["mlp.c_proj.weight"])
        return F.linear(self._layer_norm(x, *self.ln_f), self.wte)

    def step(self):
        """One decode step, device tensors only: the function torch.compile captures."""
        next_tokens = self.logits().argmax(dim=-1)
        self.generated.index_copy_(1, self.step_index, next_tokens.unsqueeze(1))
        self.finished |= next_tokens == self.eos
        all_finished_here = torch.where(self.finished.all(), self.step_index + 1, self.max_new_tokens)
        self.stop_step.copy_(torch.minimum(self.stop_step, all_finished_here))
        self.tokens.copy_(next_tokens)
        self.position.add_(1)
        self.step_index.add_(1)

    def generate(self, prompts, step=None):
        """prompts [B, P] on the device -> (tokens [B, steps], steps). `step` is self.step or
        its compiled version; the one host wait is the read of the stop step at the end."""
        step = step or self.step
        for cache in self.keys + self.values:
            cache.zero_()
        self.position.zero_()
        self.step_index.zero_()
        self.finished.zero_()
        self.stop_step.fill_(self.max_new_tokens)
        self.tokens.copy_(prompts[:, 0])
        for column in range(1, prompts.shape[1]):  # the prompt, one position at a time
            self.logits()
            self.tokens.copy_(prompts[:, column])
            self.position.add_(1)
        mark_step = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)
        for _ in range(self.max_new_tokens):
            mark_step()
            step()
        steps = int(self.stop_step.item())
        return self.generated[:, :steps].clone(), steps


def compile_step(decoder, mode):
    """The step through torch.compile, the whole step one graph (fullgraph=True)."""
    return torch.compile(decoder.step, mode=mode, fullgraph=True, dynamic=False)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", required=True, help="Hugging Face GPT-2 directory")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--prompt-file", help="one row of prompt ids per line (default: BOS)")
    parser.add_argument("--eos", type=int, help="the stopping id (default: the config's)")
    parser.add_argument("--compile", default="none",
                        choices=("none", "default", "reduce-overhead", "max-autotune"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    config, state_dict = load_checkpoint(args.weights)
    eos = config["eos_token_id"] if args.eos is None else args.eos
    if args.prompt_file:
        rows = [[int(word) for word in line.split()]
                for line in pathlib.Path(args.prompt_file).read_text().splitlines() if line.strip()]
    else:
        rows = [[config["bos_token_id"]]] * args.batch
    prompts = torch.tensor(rows, dtype=torch.long, device=args.device)
    decoder = StaticGPT2Decoder(config, state_dict, prompts.shape[0], prompts.shape[1],
                                args.new_tokens, eos, device=args.device)
    step = None if args.compile == "none" else compile_step(decoder, args.compile)
    with torch.no_grad():
        tokens, _ = decoder.generate(prompts, step)
    for row in tokens.tolist():
        print(" ".join(map(str, row)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
