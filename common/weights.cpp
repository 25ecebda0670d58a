// common/weights.cpp - the flat parameter layout, the random initialisation and the
// checkpoint loader (see weights.hpp).
//
// Layout. Tensors follow one fixed order, and that order also numbers them:
//   0 wte [V, C], 1 wpe [n_positions, C], then for each layer l, 2 + 12 l + k with k:
//   0 ln_1.weight [C]        1 ln_1.bias [C]        2 attn.c_attn.weight [C, 3C]
//   3 attn.c_attn.bias [3C]  4 attn.c_proj.weight [C, C]   5 attn.c_proj.bias [C]
//   6 ln_2.weight [C]        7 ln_2.bias [C]        8 mlp.c_fc.weight [C, 4C]
//   9 mlp.c_fc.bias [4C]    10 mlp.c_proj.weight [4C, C]  11 mlp.c_proj.bias [C]
//   then ln_f.weight [C] = 2 + 12 n_layer and ln_f.bias [C] = 3 + 12 n_layer.
// Each tensor starts at a multiple of 64 floats (256 bytes), so a device pointer to any
// tensor is as aligned as the array itself; the gaps and the tail are zero.
//
// The random generator, exactly, so that anyone can reproduce the numbers:
//   splitmix64(x) = SplitMix64's output on 64-bit unsigned x (wrapping arithmetic):
//                   x += 0x9E3779B97F4A7C15; x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9;
//                   x = (x ^ (x >> 27)) * 0x94D049BB133111EB; return x ^ (x >> 31)
//   key        = splitmix64(splitmix64(seed) ^ tensor_index)
//   element e of the tensor uses the pair p = e / 2 (integer division):
//   u1         = ((splitmix64(key + 2p) >> 11) + 1) * 2^-53      in (0, 1]
//   u2         = (splitmix64(key + 2p + 1) >> 11) * 2^-53        in [0, 1)
//   z          = sqrt(-2 ln u1) * (e even ? cos(2 pi u2) : sin(2 pi u2))   (Box-Muller)
//   value      = float(std * z), all in double until the final cast
// with std = 0.02 for wte, wpe, attn.c_attn.weight and mlp.c_fc.weight, and
// std = 0.02 / sqrt(2 n_layer) for attn.c_proj.weight and mlp.c_proj.weight.
// LayerNorm weights are 1; LayerNorm biases and all linear biases are 0.
// Every value depends only on (seed, tensor index, element index), so the work is
// split into chunks over all cores and the result does not depend on the split.
// log, cos and sin come from the C library in double; an implementation that differs
// in their last bit almost never changes the float that results.
#include "common/weights.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "common/safetensors.hpp"
#include "common/splitmix64.hpp"

namespace ladder {

namespace {

constexpr std::size_t alignment_floats = 64;  // 256 bytes
constexpr double initializer_std = 0.02;

enum class Initializer { normal, residual_normal, ones, zeros };

// One tensor of a transformer block: its Hugging Face name after "h.{i}.", where its
// offset is kept, its shape in units of n_embd, and how it is initialised.
struct BlockTensor {
  const char* name;
  std::size_t LayerOffsets::*offset;
  std::vector<int> shape_in_units_of_n_embd;
  Initializer initializer;
};

// The per-layer order of the layout and of the tensor numbering.
const std::vector<BlockTensor>& block_tensors() {
  static const std::vector<BlockTensor> table = {
      {"ln_1.weight", &LayerOffsets::ln_1_weight, {1}, Initializer::ones},
      {"ln_1.bias", &LayerOffsets::ln_1_bias, {1}, Initializer::zeros},
      {"attn.c_attn.weight", &LayerOffsets::qkv_weight, {1, 3}, Initializer::normal},
      {"attn.c_attn.bias", &LayerOffsets::qkv_bias, {3}, Initializer::zeros},
      {"attn.c_proj.weight", &LayerOffsets::attn_proj_weight, {1, 1}, Initializer::residual_normal},
      {"attn.c_proj.bias", &LayerOffsets::attn_proj_bias, {1}, Initializer::zeros},
      {"ln_2.weight", &LayerOffsets::ln_2_weight, {1}, Initializer::ones},
      {"ln_2.bias", &LayerOffsets::ln_2_bias, {1}, Initializer::zeros},
      {"mlp.c_fc.weight", &LayerOffsets::fc_weight, {1, 4}, Initializer::normal},
      {"mlp.c_fc.bias", &LayerOffsets::fc_bias, {4}, Initializer::zeros},
      {"mlp.c_proj.weight", &LayerOffsets::mlp_proj_weight, {4, 1}, Initializer::residual_normal},
      {"mlp.c_proj.bias", &LayerOffsets::mlp_proj_bias, {1}, Initializer::zeros},
  };
  return table;
}

std::vector<std::int64_t> block_tensor_shape(const BlockTensor& tensor, const Gpt2Config& config) {
  std::vector<std::int64_t> shape;
  for (const int units : tensor.shape_in_units_of_n_embd)
    shape.push_back(std::int64_t{units} * config.n_embd);
  return shape;
}

std::size_t element_count(const std::vector<std::int64_t>& shape) {
  std::size_t count = 1;
  for (const std::int64_t size : shape) count *= static_cast<std::size_t>(size);
  return count;
}

// Every parameter tensor in the documented order; its position is its tensor index.
struct ParameterTensor {
  std::string name;  ///< Hugging Face name without the "transformer." prefix
  std::vector<std::int64_t> shape;
  std::size_t offset;
  Initializer initializer;
};

std::vector<ParameterTensor> parameter_tensors(const Gpt2Config& config,
                                               const ParameterLayout& layout) {
  const std::int64_t channels = config.n_embd;
  std::vector<ParameterTensor> tensors;
  tensors.push_back(
      {"wte.weight", {config.vocab_size, channels}, layout.token_embedding, Initializer::normal});
  tensors.push_back({"wpe.weight",
                     {config.n_positions, channels},
                     layout.position_embedding,
                     Initializer::normal});
  for (int layer = 0; layer < config.n_layer; ++layer) {
    for (const BlockTensor& tensor : block_tensors()) {
      tensors.push_back(
          {"h." + std::to_string(layer) + "." + tensor.name, block_tensor_shape(tensor, config),
           layout.layers[static_cast<std::size_t>(layer)].*tensor.offset, tensor.initializer});
    }
  }
  tensors.push_back({"ln_f.weight", {channels}, layout.ln_f_weight, Initializer::ones});
  tensors.push_back({"ln_f.bias", {channels}, layout.ln_f_bias, Initializer::zeros});
  return tensors;
}

// ---------------------------------------------------------------- random initialisation

// Fills elements [first, first + count) of one tensor with the documented normals.
void fill_normal(float* tensor, std::uint64_t key, double std_dev, std::size_t first,
                 std::size_t count) {
  constexpr double two_to_minus_53 = 1.0 / 9007199254740992.0;
  constexpr double two_pi = 6.283185307179586476925286766559;
  const std::size_t end = first + count;
  for (std::size_t element = first; element < end;) {
    const std::uint64_t pair = element / 2;
    const double u1 = static_cast<double>((splitmix64(key + 2 * pair) >> 11) + 1) * two_to_minus_53;
    const double u2 = static_cast<double>(splitmix64(key + 2 * pair + 1) >> 11) * two_to_minus_53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = two_pi * u2;
    if (element % 2 == 0) {
      tensor[element] = static_cast<float>(std_dev * (radius * std::cos(angle)));
      ++element;
    }
    if (element < end && element % 2 == 1) {
      tensor[element] = static_cast<float>(std_dev * (radius * std::sin(angle)));
      ++element;
    }
  }
}

// A slice of one tensor's normals: the unit of work handed to a thread.
struct NormalChunk {
  float* tensor;
  std::uint64_t key;
  double std_dev;
  std::size_t first;
  std::size_t count;
};

void run_chunks_in_parallel(const std::vector<NormalChunk>& chunks) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const auto thread_count = static_cast<unsigned>(std::min<std::size_t>(cores, chunks.size()));
  std::atomic<std::size_t> next_chunk{0};
  auto work = [&]() {
    for (std::size_t i = next_chunk++; i < chunks.size(); i = next_chunk++) {
      const NormalChunk& chunk = chunks[i];
      fill_normal(chunk.tensor, chunk.key, chunk.std_dev, chunk.first, chunk.count);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < thread_count; ++t) threads.emplace_back(work);
  work();
  for (std::thread& thread : threads) thread.join();
}

// ---------------------------------------------------------------- checkpoint loading

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The i of "h.{i}.<name>" (with or without "transformer."), or -1 for tensors outside
// the blocks. An index too long for an int counts as INT_MAX: beyond any config.
int block_index(const std::string& stored_name) {
  const std::string prefix = "transformer.";
  const std::size_t start = (stored_name.rfind(prefix, 0) == 0 ? prefix.size() : 0) + 2;
  if (stored_name.compare(start - 2, 2, "h.") != 0) return -1;
  const std::size_t dot = stored_name.find('.', start);
  if (dot == std::string::npos || dot == start) return -1;
  const std::string digits = stored_name.substr(start, dot - start);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return digits.size() > 9 ? INT_MAX : std::stoi(digits);
}

// A checkpoint with more blocks than config.json says is a mismatched pair of files;
// loading its first n_layer blocks would silently run a different model.
void require_no_extra_layers(const SafetensorsFile& file, int n_layer) {
  const std::vector<std::string> names = file.names();
  const auto extra = std::find_if(names.begin(), names.end(), [&](const std::string& name) {
    return block_index(name) >= n_layer;
  });
  if (extra != names.end())
    throw std::runtime_error(file.path() + ": tensor \"" + *extra + "\" belongs to layer " +
                             std::to_string(block_index(*extra)) +
                             ", but config.json says n_layer = " + std::to_string(n_layer) +
                             " (config and weights do not match)");
}

}  // namespace

ParameterLayout ParameterLayout::for_config(const Gpt2Config& config) {
  config.validate();
  const auto channels = static_cast<std::size_t>(config.n_embd);
  std::size_t next = 0;
  auto place = [&next](std::size_t count) {
    const std::size_t offset = next;
    next = (offset + count + alignment_floats - 1) / alignment_floats * alignment_floats;
    return offset;
  };

  ParameterLayout layout;
  layout.token_embedding = place(static_cast<std::size_t>(config.vocab_size) * channels);
  layout.position_embedding = place(static_cast<std::size_t>(config.n_positions) * channels);
  for (int layer = 0; layer < config.n_layer; ++layer) {
    LayerOffsets offsets{};
    for (const BlockTensor& tensor : block_tensors())
      offsets.*tensor.offset = place(element_count(block_tensor_shape(tensor, config)));
    layout.layers.push_back(offsets);
  }
  layout.ln_f_weight = place(channels);
  layout.ln_f_bias = place(channels);
  layout.total = next;
  return layout;
}

Gpt2Weights random_gpt2_weights(const Gpt2Config& config, std::uint64_t seed) {
  Gpt2Weights weights{config, ParameterLayout::for_config(config), {}};
  weights.values.assign(weights.layout.total, 0.0f);

  // Chunks of an even length, so a Box-Muller pair never straddles two threads' work
  // (it would be correct anyway, only computed twice).
  constexpr std::size_t elements_per_chunk = std::size_t{1} << 18;
  const double residual_std = initializer_std / std::sqrt(2.0 * config.n_layer);
  const std::vector<ParameterTensor> tensors = parameter_tensors(config, weights.layout);
  std::vector<NormalChunk> chunks;
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    const ParameterTensor& tensor = tensors[index];
    float* values = weights.at(tensor.offset);
    const std::size_t count = element_count(tensor.shape);
    switch (tensor.initializer) {
      case Initializer::ones:
        std::fill(values, values + count, 1.0f);
        break;
      case Initializer::zeros:
        break;  // the array starts zeroed
      case Initializer::normal:
      case Initializer::residual_normal: {
        const std::uint64_t key = splitmix64(splitmix64(seed) ^ index);
        const double std_dev =
            tensor.initializer == Initializer::normal ? initializer_std : residual_std;
        for (std::size_t first = 0; first < count; first += elements_per_chunk)
          chunks.push_back(
              {values, key, std_dev, first, std::min(elements_per_chunk, count - first)});
        break;
      }
    }
  }
  run_chunks_in_parallel(chunks);
  return weights;
}

Gpt2Weights load_gpt2_checkpoint(const std::string& directory) {
  const std::filesystem::path root(directory);
  const Gpt2Config config = Gpt2Config::from_json_file((root / "config.json").string());
  const SafetensorsFile file = SafetensorsFile::open((root / "model.safetensors").string());
  require_no_extra_layers(file, config.n_layer);

  Gpt2Weights weights{config, ParameterLayout::for_config(config), {}};
  weights.values.assign(weights.layout.total, 0.0f);
  // "lm_head.weight", when saved, is the tied token embedding, and attention-mask
  // buffers ("h.{i}.attn.bias", "masked_bias") are not parameters: neither is read.
  for (const ParameterTensor& tensor : parameter_tensors(config, weights.layout)) {
    const std::string prefixed = "transformer." + tensor.name;
    const std::string& stored = file.contains(tensor.name) ? tensor.name : prefixed;
    if (!file.contains(stored))
      throw std::runtime_error(file.path() + ": missing tensor \"" + tensor.name +
                               "\" (also looked for \"" + prefixed + "\")");
    const TensorInfo& info = file.info(stored);
    if (info.shape != tensor.shape)
      throw std::runtime_error(file.path() + ": tensor \"" + stored + "\" has shape " +
                               shape_text(info.shape) + ", expected " + shape_text(tensor.shape) +
                               " from config.json");
    file.read_as_float(stored, weights.at(tensor.offset));
  }
  return weights;
}

ChosenModel choose_model(const std::string& weights_directory, const std::string& config_file,
                         const std::string& model_name, std::optional<int> eos_token_id) {
  ChosenModel chosen;
  if (!weights_directory.empty()) {
    chosen.checkpoint = load_gpt2_checkpoint(weights_directory);
    chosen.config = chosen.checkpoint->config;
  } else if (!config_file.empty()) {
    chosen.config = Gpt2Config::from_json_file(config_file);
  } else if (!model_name.empty()) {
    chosen.config = Gpt2Config::named(model_name);
  }
  chosen.config.validate();
  chosen.eos_token_id = eos_token_id.value_or(chosen.config.eos_token_id);
  if (chosen.eos_token_id >= chosen.config.vocab_size)
    throw std::invalid_argument("--eos: id " + std::to_string(chosen.eos_token_id) +
                                " is outside the vocabulary of " +
                                std::to_string(chosen.config.vocab_size));
  return chosen;
}

}  // namespace ladder
