// common/config.hpp - the GPT-2 configuration.
//
// Defaults are GPT-2 small (124M parameters). Any GPT-2 configuration loads from a
// Hugging Face config.json; anything that is not a GPT-2 config is refused with a
// message saying which field is wrong.
#pragma once

#include <cstdint>
#include <string>

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

  /// Number of fp32 parameters (token + position embeddings, layers, final LayerNorm;
  /// the LM head is tied to the token embedding and not counted again).
  std::int64_t parameter_count() const;
};

}  // namespace ladder
