// tests/cpu/test_config.cpp - Gpt2Config: validation, parameter count, loading config.json.
#include <catch2/catch.hpp>

#include <limits>
#include <stdexcept>

#include "common/config.hpp"
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
