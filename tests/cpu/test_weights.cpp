// tests/cpu/test_weights.cpp - the flat layout, the random initialisation, the checkpoint loader.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/weights.hpp"
#include "tests/support/safetensors_writer.hpp"

using Catch::Contains;
using ladder::Gpt2Config;
using ladder::ParameterLayout;

namespace {

// Every parameter with its Hugging Face name and shape, in the documented order (the
// order that numbers the tensors for the random generator), written out independently
// of common/weights.cpp.
struct ExpectedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::size_t offset;

  std::size_t size() const {
    std::size_t count = 1;
    for (const std::int64_t extent : shape) count *= static_cast<std::size_t>(extent);
    return count;
  }
};

std::vector<ExpectedTensor> expected_tensors(const Gpt2Config& config,
                                             const ParameterLayout& layout) {
  const std::int64_t C = config.n_embd;
  std::vector<ExpectedTensor> tensors = {
      {"wte.weight", {config.vocab_size, C}, layout.token_embedding},
      {"wpe.weight", {config.n_positions, C}, layout.position_embedding}};
  for (int layer = 0; layer < config.n_layer; ++layer) {
    const ladder::LayerOffsets& at = layout.layers[static_cast<std::size_t>(layer)];
    const std::string h = "h." + std::to_string(layer) + ".";
    const std::vector<ExpectedTensor> block = {
        {h + "ln_1.weight", {C}, at.ln_1_weight},
        {h + "ln_1.bias", {C}, at.ln_1_bias},
        {h + "attn.c_attn.weight", {C, 3 * C}, at.qkv_weight},
        {h + "attn.c_attn.bias", {3 * C}, at.qkv_bias},
        {h + "attn.c_proj.weight", {C, C}, at.attn_proj_weight},
        {h + "attn.c_proj.bias", {C}, at.attn_proj_bias},
        {h + "ln_2.weight", {C}, at.ln_2_weight},
        {h + "ln_2.bias", {C}, at.ln_2_bias},
        {h + "mlp.c_fc.weight", {C, 4 * C}, at.fc_weight},
        {h + "mlp.c_fc.bias", {4 * C}, at.fc_bias},
        {h + "mlp.c_proj.weight", {4 * C, C}, at.mlp_proj_weight},
        {h + "mlp.c_proj.bias", {C}, at.mlp_proj_bias}};
    tensors.insert(tensors.end(), block.begin(), block.end());
  }
  tensors.push_back({"ln_f.weight", {C}, layout.ln_f_weight});
  tensors.push_back({"ln_f.bias", {C}, layout.ln_f_bias});
  return tensors;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Gpt2Config small_config(int n_layer, int n_embd, int vocab_size, int n_positions) {
  Gpt2Config config;
  config.n_layer = n_layer;
  config.n_head = 2;
  config.n_embd = n_embd;
  config.vocab_size = vocab_size;
  config.n_positions = n_positions;
  config.bos_token_id = vocab_size - 1;
  config.eos_token_id = vocab_size - 1;
  return config;
}

// The generator exactly as the comment in common/weights.cpp documents it.
std::uint64_t documented_mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

float documented_value(std::uint64_t seed, std::uint64_t tensor_index, std::uint64_t element,
                       double std_dev) {
  const double pi = 3.141592653589793238462643383279502884;
  const std::uint64_t key = documented_mix(documented_mix(seed) ^ tensor_index);
  const std::uint64_t pair = element / 2;
  const double u1 =
      static_cast<double>((documented_mix(key + 2 * pair) >> 11) + 1) * std::ldexp(1.0, -53);
  const double u2 =
      static_cast<double>(documented_mix(key + 2 * pair + 1) >> 11) * std::ldexp(1.0, -53);
  const double angle = 2 * pi * u2;
  const double z =
      std::sqrt(-2.0 * std::log(u1)) * (element % 2 == 0 ? std::cos(angle) : std::sin(angle));
  return static_cast<float>(std_dev * z);
}

struct Moments {
  double mean = 0;
  double std_dev = 0;
  double within_one_std = 0;  ///< fraction of values with |x - mean| < std_dev
  std::size_t count = 0;
};

Moments moments(const std::vector<float>& values) {
  Moments result;
  result.count = values.size();
  double sum = 0;
  for (const float value : values) sum += value;
  result.mean = sum / static_cast<double>(values.size());
  double squares = 0;
  for (const float value : values) squares += (value - result.mean) * (value - result.mean);
  result.std_dev = std::sqrt(squares / static_cast<double>(values.size()));
  std::size_t within = 0;
  for (const float value : values) within += std::abs(value - result.mean) < result.std_dev;
  result.within_one_std = static_cast<double>(within) / static_cast<double>(values.size());
  return result;
}

// ---------------------------------------------------------------- a tiny checkpoint on disk

const char* const tiny_config_json = R"({"model_type": "gpt2", "activation_function": "gelu_new",
  "n_layer": 2, "n_head": 2, "n_embd": 4, "vocab_size": 7, "n_positions": 5,
  "layer_norm_epsilon": 1e-05, "bos_token_id": 6, "eos_token_id": 6, "n_inner": null})";

Gpt2Config tiny_config() { return small_config(2, 4, 7, 5); }

// Element e of tensor i holds i * 64 + e: distinct everywhere, and exact in fp16.
float tiny_value(std::size_t tensor_index, std::size_t element) {
  return static_cast<float>(tensor_index * 64 + element);
}

std::uint16_t half_bits_of_small_integer(float value) {
  const auto integer = static_cast<std::uint32_t>(value);
  if (integer == 0) return 0;
  int exponent = 0;
  while ((integer >> (exponent + 1)) != 0) ++exponent;
  const std::uint32_t mantissa = (integer - (1u << exponent)) << (10 - exponent);
  return static_cast<std::uint16_t>(static_cast<std::uint32_t>(exponent + 15) << 10 | mantissa);
}

// The fp32 value's top 16 bits, which is what bf16 keeps.
std::uint16_t bfloat16_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return static_cast<std::uint16_t>(bits >> 16);
}

float widened_bfloat16(std::uint16_t bits) {
  const std::uint32_t wide = std::uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

struct TinyCheckpoint {
  std::vector<ladder::testing::TensorToWrite> tensors;
  std::vector<std::vector<float>>
      expected;  ///< per tensor of expected_tensors(), what loading gives
};

// The tiny model's tensors as Hugging Face would save them, under `prefix`, in `dtype`.
TinyCheckpoint tiny_checkpoint(const std::string& prefix, const std::string& dtype) {
  const Gpt2Config config = tiny_config();
  const std::vector<ExpectedTensor> tensors =
      expected_tensors(config, ParameterLayout::for_config(config));
  TinyCheckpoint checkpoint;
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    std::vector<float> values(tensors[index].size());
    std::vector<std::uint16_t> bits;
    for (std::size_t element = 0; element < values.size(); ++element) {
      values[element] = tiny_value(index, element);
      if (dtype == "F16") bits.push_back(half_bits_of_small_integer(values[element]));
      if (dtype == "BF16") {
        bits.push_back(bfloat16_bits(values[element]));
        values[element] = widened_bfloat16(bits.back());
      }
    }
    const std::string bytes = dtype == "F32" ? ladder::testing::float32_bytes(values)
                                             : ladder::testing::bits16_bytes(bits);
    checkpoint.tensors.push_back(
        {prefix + tensors[index].name, dtype, tensors[index].shape, bytes});
    checkpoint.expected.push_back(values);
  }
  return checkpoint;
}

void write_checkpoint(const ladder::testing::ScratchDirectory& scratch,
                      const std::vector<ladder::testing::TensorToWrite>& tensors,
                      const std::string& config_json = tiny_config_json) {
  ladder::testing::write_file(scratch.file("config.json"), config_json);
  ladder::testing::write_file(scratch.file("model.safetensors"),
                              ladder::testing::safetensors_file_bytes(tensors));
}

void check_loaded_values(const ladder::Gpt2Weights& weights, const TinyCheckpoint& checkpoint) {
  const std::vector<ExpectedTensor> tensors = expected_tensors(weights.config, weights.layout);
  std::vector<bool> covered(weights.values.size(), false);
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    INFO(tensors[index].name);
    const float* loaded = weights.at(tensors[index].offset);
    CHECK(std::vector<float>(loaded, loaded + tensors[index].size()) == checkpoint.expected[index]);
    std::fill_n(covered.begin() + static_cast<std::ptrdiff_t>(tensors[index].offset),
                tensors[index].size(), true);
  }
  for (std::size_t i = 0; i < weights.values.size(); ++i)
    if (!covered[i]) CHECK(weights.values[i] == 0.0f);
}

}  // namespace

// ---------------------------------------------------------------- layout

TEST_CASE("layout: tensors in the documented order, 256-byte aligned, not overlapping",
          "[weights]") {
  const Gpt2Config config = GENERATE(Gpt2Config{}, small_config(3, 10, 13, 7));
  const ParameterLayout layout = ParameterLayout::for_config(config);
  const std::vector<ExpectedTensor> tensors = expected_tensors(config, layout);
  REQUIRE(layout.layers.size() == static_cast<std::size_t>(config.n_layer));

  std::size_t parameters = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    INFO(tensors[i].name);
    CHECK(tensors[i].offset % 64 == 0);
    const std::size_t end = tensors[i].offset + tensors[i].size();
    CHECK(end <= (i + 1 < tensors.size() ? tensors[i + 1].offset : layout.total));
    parameters += tensors[i].size();
  }
  CHECK(static_cast<std::int64_t>(parameters) == config.parameter_count());
  CHECK(layout.total % 64 == 0);
  CHECK(layout.total - parameters < 64 * tensors.size());  // padding only
}

TEST_CASE("layout: GPT-2 small holds 124,439,808 parameters", "[weights]") {
  const ParameterLayout layout = ParameterLayout::for_config(Gpt2Config{});
  std::size_t parameters = 0;
  for (const ExpectedTensor& tensor : expected_tensors(Gpt2Config{}, layout))
    parameters += tensor.size();
  CHECK(parameters == 124439808);
}

TEST_CASE("layout: an invalid config is refused", "[weights]") {
  Gpt2Config config;
  config.n_head = 7;
  REQUIRE_THROWS_WITH(ParameterLayout::for_config(config), Contains("divisible by n_head"));
}

// ---------------------------------------------------------------- random initialisation

TEST_CASE("random weights: the same seed gives the same bytes, another seed others", "[weights]") {
  const Gpt2Config config = small_config(2, 16, 50, 8);
  const ladder::Gpt2Weights first = ladder::random_gpt2_weights(config, 1234);
  const ladder::Gpt2Weights again = ladder::random_gpt2_weights(config, 1234);
  const ladder::Gpt2Weights other = ladder::random_gpt2_weights(config, 1235);
  REQUIRE(first.values.size() == first.layout.total);
  REQUIRE(again.values.size() == first.values.size());
  CHECK(std::memcmp(first.values.data(), again.values.data(),
                    first.values.size() * sizeof(float)) == 0);
  const float* wte = first.at(first.layout.token_embedding);
  const float* other_wte = other.at(other.layout.token_embedding);
  std::size_t equal = 0;
  for (std::size_t i = 0; i < 50 * 16; ++i) equal += wte[i] == other_wte[i];
  CHECK(equal == 0);
}

TEST_CASE("random weights: every value is the documented generator's", "[weights]") {
  // wte here has 262,336 elements: more than one chunk of work (2^18), so values on
  // both sides of a chunk boundary are checked too.
  const Gpt2Config config = small_config(2, 64, 4099, 8);
  const std::uint64_t seed = 20240517;
  const ladder::Gpt2Weights weights = ladder::random_gpt2_weights(config, seed);
  const std::vector<ExpectedTensor> tensors = expected_tensors(config, weights.layout);
  const double residual_std = 0.02 / std::sqrt(2.0 * config.n_layer);

  for (std::size_t index = 0; index < tensors.size(); ++index) {
    const ExpectedTensor& tensor = tensors[index];
    const bool residual = ends_with(tensor.name, "c_proj.weight");
    const bool normal =
        residual || ends_with(tensor.name, "wte.weight") || ends_with(tensor.name, "wpe.weight") ||
        ends_with(tensor.name, "c_attn.weight") || ends_with(tensor.name, "c_fc.weight");
    if (!normal) continue;
    const std::size_t last = tensor.size() - 1;
    for (const std::size_t element :
         {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{262143},
          std::size_t{262144}, std::size_t{262145}, last}) {
      if (element > last) continue;
      INFO(tensor.name << "[" << element << "]");
      CHECK(weights.values[tensor.offset + element] ==
            documented_value(seed, index, element, residual ? residual_std : 0.02));
    }
  }
}

TEST_CASE(
    "random weights: N(0, 0.02), residual projections N(0, 0.02/sqrt(2 n_layer)), LN 1, biases 0",
    "[weights]") {
  const Gpt2Config config = small_config(4, 64, 2000, 64);
  const ladder::Gpt2Weights weights = ladder::random_gpt2_weights(config, 7);
  const std::vector<ExpectedTensor> tensors = expected_tensors(config, weights.layout);

  std::vector<float> embedding;
  std::vector<float> matrices;
  std::vector<float> residual_projections;
  std::vector<bool> covered(weights.values.size(), false);
  for (const ExpectedTensor& tensor : tensors) {
    const float* begin = weights.at(tensor.offset);
    const std::vector<float> values(begin, begin + tensor.size());
    std::fill_n(covered.begin() + static_cast<std::ptrdiff_t>(tensor.offset), tensor.size(), true);
    INFO(tensor.name);
    if (tensor.name == "wte.weight") {
      embedding = values;
    } else if (ends_with(tensor.name, "c_proj.weight")) {
      residual_projections.insert(residual_projections.end(), values.begin(), values.end());
    } else if (ends_with(tensor.name, "c_attn.weight") || ends_with(tensor.name, "c_fc.weight")) {
      matrices.insert(matrices.end(), values.begin(), values.end());
    } else if (tensor.name != "wpe.weight") {
      const bool layernorm_weight = ends_with(tensor.name, "ln_1.weight") ||
                                    ends_with(tensor.name, "ln_2.weight") ||
                                    tensor.name == "ln_f.weight";
      CHECK(std::all_of(values.begin(), values.end(),
                        [&](float value) { return value == (layernorm_weight ? 1.0f : 0.0f); }));
    }
  }
  for (std::size_t i = 0; i < weights.values.size(); ++i)
    if (!covered[i]) CHECK(weights.values[i] == 0.0f);  // alignment padding

  const double residual_std = 0.02 / std::sqrt(8.0);
  for (const auto& [values, expected_std] :
       {std::make_pair(&embedding, 0.02), std::make_pair(&matrices, 0.02),
        std::make_pair(&residual_projections, residual_std)}) {
    const Moments observed = moments(*values);
    INFO("expected std " << expected_std << ", " << observed.count << " values");
    CHECK(observed.std_dev == Approx(expected_std).epsilon(0.02));
    CHECK(std::abs(observed.mean) <
          5 * expected_std / std::sqrt(static_cast<double>(observed.count)));
    CHECK(observed.within_one_std == Approx(0.6827).margin(0.01));  // a normal, not a uniform
  }
}

// ---------------------------------------------------------------- checkpoint loading

TEST_CASE("checkpoint: every tensor lands at its offset, with or without the prefix", "[weights]") {
  const ladder::testing::ScratchDirectory scratch("ladder-checkpoint");
  SECTION("names without a prefix, fp32") {
    const TinyCheckpoint checkpoint = tiny_checkpoint("", "F32");
    write_checkpoint(scratch, checkpoint.tensors);
    check_loaded_values(ladder::load_gpt2_checkpoint(scratch.path()), checkpoint);
  }
  SECTION("\"transformer.\" names, a tied lm_head and attention-mask buffers, which are skipped") {
    TinyCheckpoint checkpoint = tiny_checkpoint("transformer.", "F32");
    checkpoint.tensors.push_back({"lm_head.weight",
                                  "F32",
                                  {7, 4},
                                  ladder::testing::float32_bytes(std::vector<float>(28, -1.0f))});
    checkpoint.tensors.push_back(
        {"transformer.h.0.attn.bias", "BOOL", {1, 1, 5, 5}, std::string(25, '\1')});
    checkpoint.tensors.push_back(
        {"transformer.h.1.attn.masked_bias", "F32", {}, ladder::testing::float32_bytes({-1e4f})});
    write_checkpoint(scratch, checkpoint.tensors);
    check_loaded_values(ladder::load_gpt2_checkpoint(scratch.path()), checkpoint);
  }
  SECTION("fp16, widened exactly") {
    const TinyCheckpoint checkpoint = tiny_checkpoint("", "F16");
    write_checkpoint(scratch, checkpoint.tensors);
    check_loaded_values(ladder::load_gpt2_checkpoint(scratch.path()), checkpoint);
  }
  SECTION("bf16, widened exactly") {
    const TinyCheckpoint checkpoint = tiny_checkpoint("transformer.", "BF16");
    write_checkpoint(scratch, checkpoint.tensors);
    check_loaded_values(ladder::load_gpt2_checkpoint(scratch.path()), checkpoint);
  }
}

TEST_CASE("checkpoint: the config comes from config.json", "[weights]") {
  const ladder::testing::ScratchDirectory scratch("ladder-checkpoint");
  write_checkpoint(scratch, tiny_checkpoint("", "F32").tensors);
  const ladder::Gpt2Weights weights = ladder::load_gpt2_checkpoint(scratch.path());
  CHECK(weights.config.n_layer == 2);
  CHECK(weights.config.n_embd == 4);
  CHECK(weights.config.vocab_size == 7);
  CHECK(weights.config.n_positions == 5);
  CHECK(weights.config.eos_token_id == 6);
  CHECK(weights.layout.total == ParameterLayout::for_config(tiny_config()).total);
  CHECK(weights.values.size() == weights.layout.total);
}

TEST_CASE("checkpoint: bad directories are refused naming the file, the tensor and the problem",
          "[weights]") {
  const ladder::testing::ScratchDirectory scratch("ladder-checkpoint");
  std::vector<ladder::testing::TensorToWrite> tensors = tiny_checkpoint("", "F32").tensors;
  const auto find = [&](const std::string& name) {
    return std::find_if(
        tensors.begin(), tensors.end(),
        [&](const ladder::testing::TensorToWrite& tensor) { return tensor.name == name; });
  };

  SECTION("no config.json") {
    ladder::testing::write_file(scratch.file("model.safetensors"),
                                ladder::testing::safetensors_file_bytes(tensors));
    REQUIRE_THROWS_WITH(ladder::load_gpt2_checkpoint(scratch.path()),
                        Contains("config.json: cannot open"));
  }
  SECTION("no model.safetensors") {
    ladder::testing::write_file(scratch.file("config.json"), tiny_config_json);
    REQUIRE_THROWS_WITH(ladder::load_gpt2_checkpoint(scratch.path()),
                        Contains("model.safetensors: cannot open"));
  }
  SECTION("a config that is not GPT-2") {
    write_checkpoint(scratch, tensors, R"({"model_type": "bert"})");
    REQUIRE_THROWS_WITH(ladder::load_gpt2_checkpoint(scratch.path()),
                        Contains("model_type is \"bert\""));
  }
  SECTION("a missing tensor") {
    tensors.erase(find("h.1.ln_2.bias"));
    write_checkpoint(scratch, tensors);
    REQUIRE_THROWS_WITH(ladder::load_gpt2_checkpoint(scratch.path()),
                        Contains("model.safetensors: missing tensor \"h.1.ln_2.bias\""));
  }
  SECTION("a tensor of the wrong shape") {
    find("h.0.attn.c_attn.weight")->shape = {12, 4};
    write_checkpoint(scratch, tensors);
    REQUIRE_THROWS_WITH(
        ladder::load_gpt2_checkpoint(scratch.path()),
        Contains("tensor \"h.0.attn.c_attn.weight\" has shape [12, 4], expected [4, 12]"));
  }
  SECTION("a tensor of an integer dtype") {
    auto ln_f_bias = find("ln_f.bias");
    ln_f_bias->dtype = "I64";
    ln_f_bias->bytes = std::string(4 * 8, '\0');
    write_checkpoint(scratch, tensors);
    REQUIRE_THROWS_WITH(ladder::load_gpt2_checkpoint(scratch.path()),
                        Contains("tensor \"ln_f.bias\": dtype I64 cannot be read"));
  }
  SECTION("more layers than config.json says") {
    tensors.push_back(
        {"h.2.ln_1.weight", "F32", {4}, ladder::testing::float32_bytes({1, 1, 1, 1})});
    write_checkpoint(scratch, tensors);
    REQUIRE_THROWS_WITH(
        ladder::load_gpt2_checkpoint(scratch.path()),
        Contains("\"h.2.ln_1.weight\" belongs to layer 2") && Contains("n_layer = 2"));
  }
  SECTION("a truncated model.safetensors") {
    write_checkpoint(scratch, tensors);
    const std::string bytes = ladder::testing::safetensors_file_bytes(tensors);
    ladder::testing::write_file(scratch.file("model.safetensors"),
                                bytes.substr(0, bytes.size() - 10));
    REQUIRE_THROWS_WITH(ladder::load_gpt2_checkpoint(scratch.path()),
                        Contains("model.safetensors") && Contains("outside the data section"));
  }
}
