// tests/cpu/test_config.cpp - Gpt2Config: validation, parameter count, loading config.json,
// GPT-2's four named sizes (--model) against every kernel's shape limits.
#include <catch2/catch.hpp>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/benchmark.hpp"
#include "common/bfloat16_device_model.hpp"
#include "common/cli.hpp"
#include "common/config.hpp"
#include "common/weights.hpp"
#include "kernels/decode_matmul_layout.hpp"
#include "kernels/kernel_limits.hpp"
#include "tests/support/safetensors_writer.hpp"

using Catch::Contains;

namespace {

// Hugging Face's config.json for GPT-2 small, as save_pretrained writes it (abridged
// to the fields that matter, plus a few this code ignores).
const char* const hugging_face_gpt2_config = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_inner": null,
  "n_layer": 12,
  "n_positions": 1024,
  "reorder_and_upcast_attn": false,
  "scale_attn_by_inverse_layer_idx": false,
  "scale_attn_weights": true,
  "vocab_size": 50257
})";

ladder::Gpt2Config load_config_text(const std::string& text) {
  const ladder::testing::ScratchDirectory scratch("ladder-config");
  const std::string path = scratch.file("config.json");
  ladder::testing::write_file(path, text);
  return ladder::Gpt2Config::from_json_file(path);
}

}  // namespace

TEST_CASE("GPT-2 small has 124,439,808 parameters", "[config]") {
  const ladder::Gpt2Config gpt2_small;
  CHECK(gpt2_small.parameter_count() == 124439808);
  CHECK(gpt2_small.head_dim() == 64);
  CHECK_NOTHROW(gpt2_small.validate());
}

TEST_CASE("parameter_count adds up every tensor of a small configuration", "[config]") {
  ladder::Gpt2Config config;
  config.n_layer = 3;
  config.n_head = 2;
  config.n_embd = 10;
  config.vocab_size = 17;
  config.n_positions = 9;
  const std::int64_t C = 10;
  const std::int64_t per_layer = C + C                // ln_1
                                 + C * 3 * C + 3 * C  // c_attn
                                 + C * C + C          // attn.c_proj
                                 + C + C              // ln_2
                                 + C * 4 * C + 4 * C  // c_fc
                                 + 4 * C * C + C;     // mlp.c_proj
  CHECK(config.parameter_count() == 17 * C + 9 * C + 3 * per_layer + 2 * C);
}

TEST_CASE("validate names the offending field", "[config]") {
  ladder::Gpt2Config config;
  SECTION("n_embd not divisible by n_head") {
    config.n_head = 5;
    REQUIRE_THROWS_WITH(config.validate(), Contains("divisible by n_head"));
  }
  SECTION("no layers") {
    config.n_layer = 0;
    REQUIRE_THROWS_WITH(config.validate(), Contains("n_layer must be positive"));
  }
  SECTION("EOS outside the vocabulary") {
    config.vocab_size = 1000;
    config.bos_token_id = 0;
    REQUIRE_THROWS_WITH(config.validate(),
                        Contains("eos_token_id 50256 is outside the vocabulary"));
  }
  SECTION("non-positive epsilon") {
    config.layer_norm_epsilon = 0.0f;
    REQUIRE_THROWS_WITH(config.validate(), Contains("layer_norm_epsilon"));
  }
  SECTION("non-finite epsilon") {
    config.layer_norm_epsilon = std::numeric_limits<float>::infinity();
    REQUIRE_THROWS_WITH(config.validate(),
                        Contains("layer_norm_epsilon must be positive and finite"));
  }
  SECTION("a head size the attention kernels refuse") {
    config.n_head = 4;  // 768 / 4 = 192 > kMaxHeadDim
    REQUIRE_THROWS_WITH(config.validate(), Contains("head size n_embd / n_head = 192 exceeds 128"));
  }
  SECTION("a row the LayerNorm kernels refuse") {
    config.n_embd = 2304;  // 24 heads of 96
    config.n_head = 24;
    REQUIRE_THROWS_WITH(config.validate(), Contains("n_embd 2304 exceeds 2048"));
  }
  REQUIRE_THROWS_AS(config.validate(), std::invalid_argument);
}

TEST_CASE("from_json_file reads Hugging Face's GPT-2 config.json", "[config]") {
  const ladder::Gpt2Config config = load_config_text(hugging_face_gpt2_config);
  CHECK(config.n_layer == 12);
  CHECK(config.n_head == 12);
  CHECK(config.n_embd == 768);
  CHECK(config.vocab_size == 50257);
  CHECK(config.n_positions == 1024);
  CHECK(config.layer_norm_epsilon == 1e-5f);
  CHECK(config.bos_token_id == 50256);
  CHECK(config.eos_token_id == 50256);
}

TEST_CASE("from_json_file keeps GPT-2 defaults for fields it does not find", "[config]") {
  const ladder::Gpt2Config config = load_config_text(
      R"({"n_layer": 2, "n_head": 4, "n_embd": 64, "vocab_size": 300, "bos_token_id": 7,
          "eos_token_id": 8, "layer_norm_epsilon": 0.001})");
  CHECK(config.n_layer == 2);
  CHECK(config.n_head == 4);
  CHECK(config.n_embd == 64);
  CHECK(config.vocab_size == 300);
  CHECK(config.n_positions == 1024);  // default
  CHECK(config.layer_norm_epsilon == 0.001f);
  CHECK(config.bos_token_id == 7);
  CHECK(config.eos_token_id == 8);
}

TEST_CASE("from_json_file refuses what it cannot run, naming the file and the field", "[config]") {
  SECTION("missing file") {
    REQUIRE_THROWS_WITH(ladder::Gpt2Config::from_json_file("/nonexistent/ladder/config.json"),
                        Contains("/nonexistent/ladder/config.json") && Contains("cannot open"));
  }
  SECTION("invalid JSON") {
    REQUIRE_THROWS_WITH(load_config_text(R"({"n_layer": 12,)"),
                        Contains("config.json: invalid JSON"));
  }
  SECTION("another model type") {
    REQUIRE_THROWS_WITH(load_config_text(R"({"model_type": "llama"})"),
                        Contains("config.json") && Contains("model_type is \"llama\""));
  }
  SECTION("another activation") {
    REQUIRE_THROWS_WITH(load_config_text(R"({"activation_function": "relu"})"),
                        Contains("activation_function is \"relu\""));
  }
  SECTION("an MLP width other than 4 n_embd") {
    REQUIRE_THROWS_WITH(load_config_text(R"({"n_embd": 64, "n_head": 4, "n_inner": 100})"),
                        Contains("n_inner is 100"));
  }
  SECTION("untied LM head") {
    REQUIRE_THROWS_WITH(load_config_text(R"({"tie_word_embeddings": false})"),
                        Contains("tie_word_embeddings"));
  }
  SECTION("a field of the wrong type") {
    REQUIRE_THROWS_WITH(load_config_text(R"({"n_layer": "twelve"})"),
                        Contains("n_layer must be an integer"));
  }
  SECTION("a bad value") {
    REQUIRE_THROWS_WITH(load_config_text(R"({"n_embd": 768, "n_head": 7})"),
                        Contains("config.json") && Contains("divisible by n_head"));
  }
  SECTION("not an object") {
    REQUIRE_THROWS_WITH(load_config_text("[1, 2, 3]"), Contains("not a JSON object"));
  }
}

// ---------------------------------------------------------------- GPT-2's four sizes

namespace {

struct PublishedSize {
  std::string name;
  int n_layer, n_head, n_embd;
  std::int64_t parameters;  ///< Hugging Face's num_parameters() of gpt2, gpt2-medium, ...
};

const std::vector<PublishedSize>& published_sizes() {
  static const std::vector<PublishedSize> sizes = {
      {"small", 12, 12, 768, 124439808},
      {"medium", 24, 16, 1024, 354823168},
      {"large", 36, 20, 1280, 774030080},
      {"xl", 48, 25, 1600, 1557611200},
  };
  return sizes;
}

ladder::RunOptions parse(std::vector<const char*> arguments) {
  arguments.insert(arguments.begin(), "chapter");
  return ladder::parse_run_options(static_cast<int>(arguments.size()), arguments.data());
}

}  // namespace

TEST_CASE("Gpt2Config::named gives GPT-2's four published sizes", "[config][sizes]") {
  REQUIRE(ladder::gpt2_model_names() == std::vector<std::string>{"small", "medium", "large", "xl"});
  for (const PublishedSize& size : published_sizes()) {
    INFO(size.name);
    const ladder::Gpt2Config config = ladder::Gpt2Config::named(size.name);
    CHECK(config.n_layer == size.n_layer);
    CHECK(config.n_head == size.n_head);
    CHECK(config.n_embd == size.n_embd);
    CHECK(config.head_dim() == 64);
    CHECK(config.vocab_size == 50257);
    CHECK(config.n_positions == 1024);
    CHECK(config.layer_norm_epsilon == 1e-5f);
    CHECK(config.bos_token_id == 50256);
    CHECK(config.eos_token_id == 50256);
    CHECK(config.parameter_count() == size.parameters);
    CHECK_NOTHROW(config.validate());
  }
  // "small" is the default configuration, field for field.
  const ladder::Gpt2Config small = ladder::Gpt2Config::named("small");
  const ladder::Gpt2Config defaults;
  CHECK(small.n_layer == defaults.n_layer);
  CHECK(small.n_head == defaults.n_head);
  CHECK(small.n_embd == defaults.n_embd);
  CHECK(small.parameter_count() == defaults.parameter_count());
}

TEST_CASE("Gpt2Config::named refuses any other name, listing the four", "[config][sizes]") {
  for (const char* name : {"", "gpt2-xl", "XL", "tiny"}) {
    INFO("'" << name << "'");
    REQUIRE_THROWS_WITH(
        ladder::Gpt2Config::named(name),
        Contains("is not a GPT-2 size") && Contains("choose one of small, medium, large, xl"));
  }
}

TEST_CASE("every GPT-2 size is inside every kernel's limits", "[config][sizes]") {
  for (const std::string& name : ladder::gpt2_model_names()) {
    INFO(name);
    const ladder::Gpt2Config config = ladder::Gpt2Config::named(name);
    // The fp32 and bf16 attention kernels: D <= 128; the bf16 ones read D in packs of 8.
    CHECK(config.head_dim() <= ladder::kMaxHeadDim);
    CHECK(config.head_dim() % ladder::kBfloatHeadDimMultiple == 0);
    CHECK(ladder::bfloat16_model_problem(config).empty());
    // Every LayerNorm (fp32, bf16, fused with the residual add): rows of C <= 2048.
    CHECK(config.n_embd <= ladder::kMaxLayernormC);
    // The decode matmuls (fp32 and bf16) take any K and N (K padded to 32-row chunks, N
    // in 64-column tiles); the persistent kernel takes C only in whole 64-column tiles
    // and at most 48 layers (kernels/persistent_decode.cu's launch checks).
    CHECK(config.n_embd % ladder::kDecodeTileColumns == 0);
    CHECK(config.n_layer <= 48);
    // The layout the weights live in: every tensor, each on a 64-float boundary.
    const ladder::ParameterLayout layout = ladder::ParameterLayout::for_config(config);
    CHECK(layout.layers.size() == static_cast<std::size_t>(config.n_layer));
    CHECK(layout.total >= static_cast<std::size_t>(config.parameter_count()));
    CHECK(layout.total % 64 == 0);
  }
}

TEST_CASE("the HBM floor of a GPT-2 size counts that size's weights and cache",
          "[config][sizes][benchmark]") {
  // One step at B = 1 over one cached position: every parameter but the position table
  // (the token embedding counted once, as the tied LM head), the keys and values of every
  // layer, and the fp32 logits (common/benchmark.cpp floor_bytes).
  for (const std::string& name : ladder::gpt2_model_names()) {
    INFO(name);
    const ladder::Gpt2Config config = ladder::Gpt2Config::named(name);
    const double C = config.n_embd;
    const double weights = static_cast<double>(config.parameter_count()) - config.n_positions * C;
    const double keys_and_values = 2.0 * config.n_layer * C;  // one position, B = 1
    const double expected_values = weights + keys_and_values;
    const double logits = config.vocab_size * 4.0;
    CHECK(ladder::floor_bytes(config, 1, 1, 1, 4) == Approx(expected_values * 4 + logits));
    CHECK(ladder::floor_bytes(config, 1, 1, 1, 2) == Approx(expected_values * 2 + logits));
  }
  // Each size up moves more bytes a step, at B = 1 and at B = 32.
  for (const int batch : {1, 32}) {
    double previous = 0;
    for (const std::string& name : ladder::gpt2_model_names()) {
      const double bytes = ladder::floor_bytes(ladder::Gpt2Config::named(name), batch, 1, 100, 4);
      CHECK(bytes > previous);
      previous = bytes;
    }
  }
}

TEST_CASE("the --model flag takes a GPT-2 size; --config and --weights exclude it", "[config][sizes][cli]") {
  CHECK(parse({}).model_name.empty());
  for (const std::string& name : ladder::gpt2_model_names())
    CHECK(parse({"--model", name.c_str()}).model_name == name);
  REQUIRE_THROWS_WITH(parse({"--model", "huge"}),
                      Contains("--model: 'huge' is not a GPT-2 size") && Contains("small, medium"));
  REQUIRE_THROWS_WITH(parse({"--model"}), Contains("--model: missing value"));
  REQUIRE_THROWS_WITH(parse({"--model", "xl", "--config", "config.json"}),
                      Contains("--model:") && Contains("--config names the model itself"));
  REQUIRE_THROWS_WITH(parse({"--weights", "gpt2", "--model", "medium"}),
                      Contains("--model:") && Contains("--weights names the model itself"));
  REQUIRE_THROWS_AS(parse({"--model", "xl", "--config", "config.json"}), std::invalid_argument);
  CHECK(ladder::run_options_usage("chapter").find("--model NAME") != std::string::npos);
}
