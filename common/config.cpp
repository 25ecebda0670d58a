// common/config.cpp - validating and loading a GPT-2 configuration.
//
// from_json_file reads Hugging Face's config.json. Fields it does not name keep
// GPT-2 small's defaults; fields that would change the computation in a way this
// code does not implement (another model type, another activation, an MLP width
// other than 4 n_embd, untied LM head, per-layer attention scaling) are refused,
// because running such a model anyway would produce plausible but wrong tokens.
#include "common/config.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kernels/kernel_limits.hpp"

namespace ladder {

namespace {

void require_positive(int value, const char* field) {
  if (value <= 0)
    throw std::invalid_argument(std::string(field) + " must be positive, got " +
                                std::to_string(value));
}

void require_token_in_vocabulary(int token_id, int vocab_size, const char* field) {
  if (token_id < 0 || token_id >= vocab_size)
    throw std::invalid_argument(std::string(field) + " " + std::to_string(token_id) +
                                " is outside the vocabulary (vocab_size " +
                                std::to_string(vocab_size) + "); set " + field +
                                " below vocab_size");
}

// Reads an optional integer field; absent or null keeps the default.
void read_int(const nlohmann::json& config, const char* field, int& value) {
  const auto found = config.find(field);
  if (found == config.end() || found->is_null()) return;
  if (!found->is_number_integer())
    throw std::invalid_argument(std::string(field) + " must be an integer, got " + found->dump());
  const auto wide = found->get<std::int64_t>();
  if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max())
    throw std::invalid_argument(std::string(field) + " " + found->dump() + " does not fit in int");
  value = static_cast<int>(wide);
}

// An optional field that, when present, must hold exactly `required`.
template <typename Value>
void require_if_present(const nlohmann::json& config, const char* field, const Value& required,
                        const char* why) {
  const auto found = config.find(field);
  if (found == config.end() || found->is_null()) return;
  if (*found != nlohmann::json(required))
    throw std::invalid_argument(std::string(field) + " is " + found->dump() + ", but " + why);
}

Gpt2Config parse_config(const nlohmann::json& json) {
  if (!json.is_object()) throw std::invalid_argument("the top level is not a JSON object");
  require_if_present(json, "model_type", std::string("gpt2"), "this code runs only GPT-2 models");
  require_if_present(json, "activation_function", std::string("gelu_new"),
                     "GPT-2 here uses the tanh GELU (\"gelu_new\")");
  require_if_present(json, "tie_word_embeddings", true,
                     "the LM head is always tied to the token embedding here");
  require_if_present(json, "scale_attn_weights", true,
                     "attention scores are always scaled by 1/sqrt(head_dim) here");
  require_if_present(json, "scale_attn_by_inverse_layer_idx", false,
                     "per-layer attention scaling is not implemented");

  Gpt2Config config;
  read_int(json, "n_layer", config.n_layer);
  read_int(json, "n_head", config.n_head);
  read_int(json, "n_embd", config.n_embd);
  read_int(json, "vocab_size", config.vocab_size);
  read_int(json, "n_positions", config.n_positions);
  read_int(json, "bos_token_id", config.bos_token_id);
  read_int(json, "eos_token_id", config.eos_token_id);

  const auto epsilon = json.find("layer_norm_epsilon");
  if (epsilon != json.end() && !epsilon->is_null()) {
    if (!epsilon->is_number())
      throw std::invalid_argument("layer_norm_epsilon must be a number, got " + epsilon->dump());
    // Read wide and checked, since a double past float's range has no float value.
    const auto wide = epsilon->get<double>();
    if (!std::isfinite(wide) || std::fabs(wide) > std::numeric_limits<float>::max())
      throw std::invalid_argument("layer_norm_epsilon " + epsilon->dump() +
                                  " is not a finite float");
    config.layer_norm_epsilon = static_cast<float>(wide);
  }

  // The MLP width is fixed at 4 n_embd by the parameter layout.
  require_if_present(json, "n_inner", std::int64_t{4} * config.n_embd,
                     "the MLP width must be 4 * n_embd");
  return config;
}

}  // namespace

void Gpt2Config::validate() const {
  require_positive(n_layer, "n_layer");
  require_positive(n_head, "n_head");
  require_positive(n_embd, "n_embd");
  require_positive(vocab_size, "vocab_size");
  require_positive(n_positions, "n_positions");
  if (n_embd % n_head != 0)
    throw std::invalid_argument("n_embd " + std::to_string(n_embd) +
                                " must be divisible by n_head " + std::to_string(n_head));
  if (!std::isfinite(layer_norm_epsilon) || !(layer_norm_epsilon > 0.0f))
    throw std::invalid_argument("layer_norm_epsilon must be positive and finite, got " +
                                std::to_string(layer_norm_epsilon));
  // What the kernels refuse, refused here too: before any weight reaches the device.
  if (head_dim() > kMaxHeadDim)
    throw std::invalid_argument("head size n_embd / n_head = " + std::to_string(head_dim()) +
                                " exceeds " + std::to_string(kMaxHeadDim) +
                                ", the largest the attention kernels take");
  if (n_embd > kMaxLayernormC)
    throw std::invalid_argument("n_embd " + std::to_string(n_embd) + " exceeds " +
                                std::to_string(kMaxLayernormC) +
                                ", the longest row the LayerNorm kernels take");
  require_token_in_vocabulary(bos_token_id, vocab_size, "bos_token_id");
  require_token_in_vocabulary(eos_token_id, vocab_size, "eos_token_id");
}

const std::vector<std::string>& gpt2_model_names() {
  static const std::vector<std::string> names = {"small", "medium", "large", "xl"};
  return names;
}

Gpt2Config Gpt2Config::named(const std::string& name) {
  // (n_layer, n_head, n_embd) of the four checkpoints OpenAI released (Hugging Face's
  // gpt2, gpt2-medium, gpt2-large, gpt2-xl); the rest is the same for all four.
  struct Shape {
    const char* name;
    int n_layer, n_head, n_embd;
  };
  static const Shape shapes[] = {{"small", 12, 12, 768},
                                 {"medium", 24, 16, 1024},
                                 {"large", 36, 20, 1280},
                                 {"xl", 48, 25, 1600}};
  for (const Shape& shape : shapes) {
    if (name != shape.name) continue;
    Gpt2Config config;
    config.n_layer = shape.n_layer;
    config.n_head = shape.n_head;
    config.n_embd = shape.n_embd;
    return config;
  }
  std::string choices;
  for (const std::string& known : gpt2_model_names())
    choices += (choices.empty() ? "" : ", ") + known;
  throw std::invalid_argument("'" + name + "' is not a GPT-2 size: choose one of " + choices);
}

Gpt2Config Gpt2Config::from_json_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(path + ": cannot open the GPT-2 config file");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(file);
  } catch (const nlohmann::json::parse_error& error) {
    throw std::runtime_error(path + ": invalid JSON (" + error.what() + ")");
  }
  try {
    Gpt2Config config = parse_config(json);
    config.validate();
    return config;
  } catch (const std::invalid_argument& error) {
    throw std::runtime_error(path + ": not a GPT-2 config this code can run: " + error.what());
  }
}

std::int64_t Gpt2Config::parameter_count() const {
  const std::int64_t channels = n_embd;
  const std::int64_t layernorm = 2 * channels;
  const std::int64_t attention =
      channels * 3 * channels + 3 * channels + channels * channels + channels;
  const std::int64_t mlp =
      channels * 4 * channels + 4 * channels + 4 * channels * channels + channels;
  const std::int64_t block = 2 * layernorm + attention + mlp;
  return std::int64_t{vocab_size} * channels + std::int64_t{n_positions} * channels +
         n_layer * block + layernorm;
}

}  // namespace ladder
