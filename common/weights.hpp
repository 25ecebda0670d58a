// common/weights.hpp - GPT-2 parameters in one flat fp32 array.
//
// Every parameter lives in one contiguous array in a fixed order, so the whole
// model moves to the GPU with a single copy and every tensor is an offset into it.
// Matrices keep GPT-2's Conv1D layout, [in, out] row-major: y = x W + b with
// x [rows, in]. The LM head is tied to the token embedding ([vocab, n_embd]).
//
// Two sources:
//   * random_gpt2_weights(config, seed): the documented deterministic initialisation
//     (normal(0, 0.02) for matrices and embeddings, residual projections (attn.c_proj,
//     mlp.c_proj) normal(0, 0.02 / sqrt(2 n_layer)), LayerNorm weight 1 and bias 0,
//     other biases 0). The numbers come from a counter-based generator keyed by
//     (seed, tensor index, element index), computed on the CPU: identical on every
//     machine and independent of the GPU and of thread count.
//   * load_gpt2_checkpoint(dir): a Hugging Face GPT-2 directory (config.json +
//     model.safetensors; keys with or without the "transformer." prefix).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/config.hpp"

namespace ladder {

/// Offsets (in floats) of one transformer block's tensors inside the flat array.
struct LayerOffsets {
  std::size_t ln_1_weight;       ///< [C]
  std::size_t ln_1_bias;         ///< [C]
  std::size_t qkv_weight;        ///< attn.c_attn.weight [C, 3C]
  std::size_t qkv_bias;          ///< attn.c_attn.bias   [3C]
  std::size_t attn_proj_weight;  ///< attn.c_proj.weight [C, C]
  std::size_t attn_proj_bias;    ///< attn.c_proj.bias   [C]
  std::size_t ln_2_weight;       ///< [C]
  std::size_t ln_2_bias;         ///< [C]
  std::size_t fc_weight;         ///< mlp.c_fc.weight    [C, 4C]
  std::size_t fc_bias;           ///< mlp.c_fc.bias      [4C]
  std::size_t mlp_proj_weight;   ///< mlp.c_proj.weight  [4C, C]
  std::size_t mlp_proj_bias;     ///< mlp.c_proj.bias    [C]
};

/// Where every tensor sits in the flat parameter array, for one configuration.
struct ParameterLayout {
  std::size_t token_embedding = 0;     ///< wte [V, C]; also the tied LM head
  std::size_t position_embedding = 0;  ///< wpe [n_positions, C]
  std::vector<LayerOffsets> layers;
  std::size_t ln_f_weight = 0;  ///< [C]
  std::size_t ln_f_bias = 0;    ///< [C]
  std::size_t total = 0;        ///< number of floats in the whole array

  static ParameterLayout for_config(const Gpt2Config& config);
};

/// The model's parameters on the host.
struct Gpt2Weights {
  Gpt2Config config;
  ParameterLayout layout;
  std::vector<float> values;  ///< layout.total floats

  const float* at(std::size_t offset) const { return values.data() + offset; }
  float* at(std::size_t offset) { return values.data() + offset; }
};

/// The documented deterministic random initialisation (see the file comment).
Gpt2Weights random_gpt2_weights(const Gpt2Config& config, std::uint64_t seed);

/// Loads config.json + model.safetensors from a Hugging Face GPT-2 directory.
/// Throws std::runtime_error with one actionable line on a missing or corrupt file,
/// a missing tensor, or a tensor of the wrong shape or dtype (fp32, fp16 and bf16
/// checkpoints are accepted and widened to fp32).
Gpt2Weights load_gpt2_checkpoint(const std::string& directory);

/// The model a command line names, validated: a Hugging Face checkpoint (`weights_directory`,
/// loaded here so that a bad file is refused before anything else), a config.json with
/// random weights (`config_file`), one of GPT-2's four sizes (`model_name`), or GPT-2
/// small; and the end-of-sequence id (`eos_token_id`, or the config's), which must lie in
/// the vocabulary. The caller refuses more than one of the three sources.
struct ChosenModel {
  Gpt2Config config;
  std::optional<Gpt2Weights> checkpoint;  ///< with weights_directory only
  int eos_token_id = 0;
};
ChosenModel choose_model(const std::string& weights_directory, const std::string& config_file,
                         const std::string& model_name, std::optional<int> eos_token_id);

}  // namespace ladder
