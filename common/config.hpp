// common/config.hpp - the GPT-2 configuration.
//
// Defaults are GPT-2 small (124M parameters). GPT-2's four published sizes are named
// (Gpt2Config::named: small, medium, large, xl; the --model flag). Any GPT-2
// configuration loads from a Hugging Face config.json; anything that is not a GPT-2
// config is refused with a message saying which field is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ladder {

struct Gpt2Config {
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int vocab_size = 50257;
  int n_positions = 1024;
  float layer_norm_epsilon = 1e-5f;
  int bos_token_id = 50256;
  int eos_token_id = 50256;

  int head_dim() const { return n_embd / n_head; }

  /// Throws std::invalid_argument naming the offending field unless the config
  /// describes a GPT-2 this code can run (positive sizes, n_embd divisible by n_head,
  /// a positive finite epsilon, token ids inside the vocabulary, and the kernels'
  /// limits of kernels/kernel_limits.hpp: head size <= 128, n_embd <= 2048).
  void validate() const;

  /// Reads a Hugging Face config.json (model_type "gpt2", activation "gelu_new").
  /// Throws std::runtime_error with the path on a missing, unreadable or non-GPT-2 file.
  static Gpt2Config from_json_file(const std::string& path);

  /// One of GPT-2's four published sizes, by name (gpt2_model_names()): n_layer, n_head
  /// and n_embd of "small" (12, 12, 768), "medium" (24, 16, 1024), "large" (36, 20, 1280)
  /// or "xl" (48, 25, 1600); every other field GPT-2's own (vocabulary 50257, 1024
  /// positions, epsilon 1e-5, BOS = EOS = 50256). Throws std::invalid_argument naming
  /// the choices for any other name.
  static Gpt2Config named(const std::string& name);

  /// Number of fp32 parameters (token + position embeddings, layers, final LayerNorm;
  /// the LM head is tied to the token embedding and not counted again).
  std::int64_t parameter_count() const;
};

/// The names Gpt2Config::named takes, smallest first: small, medium, large, xl.
const std::vector<std::string>& gpt2_model_names();

}  // namespace ladder
