// tests/cpu/test_reference_bf16.cpp - the CPU reference's bf16 mode, the oracle of the
// mixed-precision chapter (rounding points R1-R7 in common/reference.hpp).
//
// Evidence:
//   * fp32 mode is untouched: Model(weights) and Model(weights, Precision::fp32) give the
//     same bits, and so do both generate() overloads;
//   * bf16 mode stores bf16 where the contract says: the weights and the KV cache hold
//     bf16 values, the logits do not; the full forward and the cached step agree;
//   * bf16 against fp32 on the golden model: every position differs by more than one
//     bf16 rounding unit and less than a bound measured here; tokens agree except where
//     the fp32 top-2 margin is small (those steps are printed);
//   * bf16 against Hugging Face in torch.bfloat16 (tests/data/golden_model_bf16, made by
//     scripts/make_golden_bf16.py on a machine with torch). Those test cases are hidden
//     from the default run and from CTest's discovery; tests/CMakeLists.txt runs them as
//     one CTest test, reported "Not Run (Skipped)" while the data is absent.
// Run: cpu_tests "[bf16]"; the Hugging Face comparison: cpu_tests "[golden_bf16]".
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "common/bfloat16.hpp"
#include "common/precision_comparison.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"
#include "tests/support/golden_data.hpp"

namespace ref = ladder::reference;
using ladder::testing::load_golden_json;
using ladder::testing::load_golden_model;
using Tokens = std::vector<std::int32_t>;

namespace {

// Half of bf16's largest relative rounding error (2^-8): bf16 logits closer than this to
// fp32 at some position would mean the forward hardly rounded (measured minimum: 0.0053).
const double smallest_plausible_bf16_difference = std::ldexp(1.0, -9);

// bf16 mode against fp32 mode on the golden model: measured (CPU reference, teacher-forced
// sequences) median 0.0093-0.0100, largest 0.0215 relative. Most of it comes from the
// weights: rounding only them gives a median of 0.007. The bound leaves 1.4x headroom; the
// computation is deterministic, so only a change in where the forward rounds moves it.
constexpr double bf16_against_fp32_bound = 3e-2;

// Hugging Face in torch.bfloat16 against the bf16 reference. HF rounds at more points
// (scores and softmax probabilities in eager attention, each projection before its
// residual add, GELU op by op; see scripts/make_golden_bf16.py), so the two bf16 runs
// differ by about as much as bf16 differs from fp32. A CPU simulation of those extra
// roundings (not committed) gave a median of 0.0075 and a largest 0.0142 relative against
// the reference; the tolerance leaves ~3x headroom for what it did not model (torch's
// own accumulation orders, GELU's seven bf16 operations). A tolerance this wide would
// also let fp32 logits pass (they sit 0.0102-0.0107 median, 0.0225 max from the
// simulation), so the test also asks that the bf16 reference be closer to HF in bf16 than
// the fp32 reference is: the shared rounding (weights, stored activations) must show.
constexpr double hugging_face_bf16_tolerance = 4e-2;

// An error of e on every logit can swap the top two only when their relative margin is
// below 2e (precision_comparison.hpp).
double margin_tolerance_for(double logits_tolerance) { return 2.0 * logits_tolerance; }

bool all_bfloat16(const std::vector<float>& values) {
  return std::all_of(values.begin(), values.end(),
                     [](float value) { return ladder::round_to_bfloat16(value) == value; });
}

/// The logits at every position of every sequence, one after the other: [positions, V].
std::vector<float> teacher_forced_logits(const ref::Model& model,
                                         const std::vector<Tokens>& sequences) {
  std::vector<float> logits;
  for (const Tokens& sequence : sequences) {
    const std::vector<float> sequence_logits = model.forward(sequence);
    logits.insert(logits.end(), sequence_logits.begin(), sequence_logits.end());
  }
  return logits;
}

/// Teacher-forced logits [positions, V] compared as a sequence of positions of one row.
ladder::PrecisionComparison compare_positions(const std::vector<float>& actual,
                                              const std::vector<float>& reference, int V,
                                              double margin_tolerance) {
  const int positions = static_cast<int>(reference.size() / static_cast<std::size_t>(V));
  return ladder::compare_logit_sequences(actual, reference, positions, 1, V, margin_tolerance);
}

/// Passes when `places` is empty; otherwise fails once, listing every (step, row).
void check_none(const std::vector<ladder::StepRow>& places, const std::string& what) {
  std::ostringstream listing;
  for (const ladder::StepRow& place : places) {
    listing << "\n  step " << place.step << ", row " << place.row << ": reference top-2 margin "
            << place.margin;
  }
  INFO(what << listing.str());
  CHECK(places.empty());
}

std::vector<Tokens> golden_teacher_forced_sequences() {
  return load_golden_json("teacher_forced.json").at("tokens").get<std::vector<Tokens>>();
}

/// Exits with the skip code CTest knows (tests/CMakeLists.txt) when the bf16 golden data
/// has not been made: these test cases only run as their own CTest test.
void skip_unless_golden_bf16_present() {
  if (ladder::testing::golden_bf16_present()) return;
  std::printf(
      "SKIPPED: no bf16 golden data in %s; make it on a machine with torch and transformers: "
      "python3 scripts/make_golden_bf16.py\n",
      ladder::testing::golden_bf16_directory().c_str());
  std::fflush(stdout);
  std::exit(LADDER_SKIP_RETURN_CODE);
}

}  // namespace

// ---------------------------------------------------------------- fp32 mode untouched

TEST_CASE("fp32 precision is the plain model, bit for bit", "[reference][bf16]") {
  const ladder::Gpt2Weights weights = load_golden_model();
  const ref::Model plain(weights);
  const ref::Model fp32(weights, ref::Precision::fp32);
  CHECK(fp32.precision() == ref::Precision::fp32);
  CHECK(&fp32.weights() == &weights);  // no copy, no rounding
  const Tokens sequence = golden_teacher_forced_sequences().front();
  CHECK(fp32.forward(sequence) == plain.forward(sequence));

  const std::vector<Tokens> prompts = {{1, 2, 3}, {4, 5, 6}};
  const ref::Generation from_weights = ref::generate(weights, prompts, 6, -1, true);
  const ref::Generation from_model = ref::generate(fp32, prompts, 6, -1, true);
  CHECK(from_model.tokens == from_weights.tokens);
  CHECK(from_model.logits == from_weights.logits);
}

// ---------------------------------------------------------------- where bf16 mode rounds

TEST_CASE("bf16 mode rounds the weights and the KV cache, not the logits", "[reference][bf16]") {
  const ladder::Gpt2Weights weights = load_golden_model();
  const ref::Model bf16(weights, ref::Precision::bf16);
  const ref::Model fp32(weights);
  CHECK(bf16.precision() == ref::Precision::bf16);
  REQUIRE_FALSE(all_bfloat16(weights.values));  // the checkpoint is fp32: the check can fail
  CHECK(all_bfloat16(bf16.weights().values));
  std::vector<float> rounded = weights.values;
  ladder::round_to_bfloat16(rounded.data(), rounded.size());
  CHECK(bf16.weights().values == rounded);  // R1: every parameter, nearest even

  ref::Model::KvCache bf16_cache, fp32_cache;
  std::vector<float> logits;
  for (std::int32_t token : {380, 7, 99, 250}) {
    logits = bf16.step(bf16_cache, token);
    fp32.step(fp32_cache, token);
  }
  for (std::size_t layer = 0; layer < bf16_cache.keys.size(); ++layer) {
    INFO("layer " << layer);
    CHECK(all_bfloat16(bf16_cache.keys[layer]));  // R4: the cache holds bf16 keys and values
    CHECK(all_bfloat16(bf16_cache.values[layer]));
    CHECK_FALSE(all_bfloat16(fp32_cache.keys[layer]));
  }
  CHECK_FALSE(all_bfloat16(logits));  // logits stay fp32
}

TEST_CASE("bf16 mode is the fp32 operations rounded at R2-R7, bit for bit", "[reference][bf16]") {
  // The contract restated from the public operations on a short sequence: any store
  // point the model skipped, or a rounding the contract does not list, shows here.
  const ladder::Gpt2Weights weights = load_golden_model();
  const ref::Model bf16(weights, ref::Precision::bf16);
  const ladder::Gpt2Weights& w = bf16.weights();  // R1, checked above
  const ladder::Gpt2Config& config = w.config;
  const int C = config.n_embd;
  const float eps = config.layer_norm_epsilon;
  const auto stored = [](std::vector<float> values) {
    ladder::round_to_bfloat16(values.data(), values.size());
    return values;
  };
  const Tokens tokens = {123, 7, 380, 42, 300};
  const int T = static_cast<int>(tokens.size());
  const auto normed = [&](const std::vector<float>& x, std::size_t weight, std::size_t bias) {
    std::vector<float> out(x.size());
    ref::layernorm(x.data(), w.at(weight), w.at(bias), out.data(), T, C, eps);
    return stored(out);  // R3
  };
  const auto product = [&](const std::vector<float>& x, std::size_t weight, std::size_t bias,
                           int out_features) {
    const int in_features = static_cast<int>(x.size()) / T;
    std::vector<float> out(static_cast<std::size_t>(T) * out_features);
    ref::linear(x.data(), w.at(weight), w.at(bias), out.data(), T, in_features, out_features);
    return out;
  };
  const auto plus_residual = [&](const std::vector<float>& x, const std::vector<float>& y) {
    std::vector<float> sum(x.size());
    ref::add(x.data(), y.data(), sum.data(), sum.size());
    return stored(sum);  // R6: one rounding of residual + projection
  };

  const Tokens positions = {0, 1, 2, 3, 4};
  std::vector<float> x(static_cast<std::size_t>(T) * C);
  ref::embedding(tokens.data(), positions.data(), w.at(w.layout.token_embedding),
                 w.at(w.layout.position_embedding), x.data(), T, C);
  x = stored(x);  // R2
  for (const ladder::LayerOffsets& layer : w.layout.layers) {
    const std::vector<float> qkv = stored(product(normed(x, layer.ln_1_weight, layer.ln_1_bias),
                                                  layer.qkv_weight, layer.qkv_bias, 3 * C));  // R4
    std::vector<float> attention(x.size());
    ref::causal_attention(qkv.data(), attention.data(), 1, T, config.n_head, C);
    attention = stored(attention);  // R5
    x = plus_residual(x, product(attention, layer.attn_proj_weight, layer.attn_proj_bias, C));
    std::vector<float> hidden = product(normed(x, layer.ln_2_weight, layer.ln_2_bias),
                                        layer.fc_weight, layer.fc_bias, 4 * C);
    ref::gelu(hidden.data(), hidden.data(), hidden.size());
    hidden = stored(hidden);  // R7: after bias and GELU, once
    x = plus_residual(x, product(hidden, layer.mlp_proj_weight, layer.mlp_proj_bias, C));
  }
  const std::vector<float> final_normed = normed(x, w.layout.ln_f_weight, w.layout.ln_f_bias);
  std::vector<float> logits(static_cast<std::size_t>(T) * config.vocab_size);
  ref::lm_head(final_normed.data(), w.at(w.layout.token_embedding), logits.data(), T, C,
               config.vocab_size);  // fp32, not rounded
  CHECK(bf16.forward(tokens) == logits);
}

TEST_CASE("bf16 mode: the full forward and KV-cached steps give the same logits",
          "[reference][bf16]") {
  const ladder::Gpt2Weights weights = load_golden_model();
  const ref::Model bf16(weights, ref::Precision::bf16);
  const int V = weights.config.vocab_size;
  const Tokens tokens = golden_teacher_forced_sequences().front();
  const std::vector<float> forward_logits = bf16.forward(tokens);
  ref::Model::KvCache cache;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::vector<float> step_logits = bf16.step(cache, tokens[t]);
    INFO("position " << t);
    CHECK(ref::relative_error(step_logits.data(), forward_logits.data() + t * V, V) <= 1e-6);
  }
}

// ---------------------------------------------------------------- bf16 against fp32

TEST_CASE("bf16 mode differs from fp32 by more than rounding noise and less than a bound",
          "[reference][bf16][golden]") {
  const ladder::Gpt2Weights weights = load_golden_model();
  const ref::Model bf16(weights, ref::Precision::bf16);
  const ref::Model fp32(weights);
  const std::vector<Tokens> sequences = golden_teacher_forced_sequences();
  const ladder::PrecisionComparison comparison = compare_positions(
      teacher_forced_logits(bf16, sequences), teacher_forced_logits(fp32, sequences),
      weights.config.vocab_size, margin_tolerance_for(bf16_against_fp32_bound));
  WARN("bf16 against fp32, teacher-forced: " << ladder::describe(comparison));
  CHECK(comparison.relative_errors.front() >= smallest_plausible_bf16_difference);
  CHECK(comparison.relative_error.max <= bf16_against_fp32_bound);
  // Same inputs at every position: a different token is rounding only where fp32's own
  // margin is small. (Steps here are positions of the sequences, one after the other.)
  check_none(comparison.large_margin_mismatches, "tokens differ at a large fp32 margin");
}

TEST_CASE("bf16 and fp32 greedy tokens agree on the golden model except at small margins",
          "[reference][bf16][golden]") {
  const ladder::Gpt2Weights weights = load_golden_model();
  const ref::Model bf16(weights, ref::Precision::bf16);
  const ref::Model fp32(weights);
  const int V = weights.config.vocab_size;
  for (const char* file : {"greedy_random_prompts.json", "greedy_bos.json", "greedy_eos.json"}) {
    const nlohmann::json golden = load_golden_json(file);
    const auto prompts = golden.at("prompts").get<std::vector<Tokens>>();
    const int steps = golden.at("max_new_tokens").get<int>();
    const ref::Generation bf16_run = ref::generate(bf16, prompts, steps, -1, true);
    const ref::Generation fp32_run = ref::generate(fp32, prompts, steps, -1, true);
    const ladder::PrecisionComparison comparison = ladder::compare_logit_sequences(
        bf16_run.logits, fp32_run.logits, steps, static_cast<int>(prompts.size()), V,
        margin_tolerance_for(bf16_against_fp32_bound));
    WARN("bf16 against fp32, greedy, " << file << ": " << ladder::describe(comparison));
    // After a row's first divergence the runs feed different tokens; only that first
    // divergence can be judged, and it must sit at a small fp32 margin.
    check_none(comparison.unexplained_first_divergences,
               std::string(file) + ": rows that first differ at a large fp32 margin");
  }
}

// ---------------------------------------------------------------- against Hugging Face

TEST_CASE("bf16 teacher-forced logits match Hugging Face's in torch.bfloat16", "[.golden_bf16]") {
  skip_unless_golden_bf16_present();
  const ladder::Gpt2Weights weights = load_golden_model();
  const ref::Model bf16(weights, ref::Precision::bf16);
  const ref::Model fp32(weights);
  const nlohmann::json golden = ladder::testing::load_golden_bf16_json("teacher_forced.json");
  const auto sequences = golden.at("tokens").get<std::vector<Tokens>>();
  REQUIRE(sequences == golden_teacher_forced_sequences());
  const auto hf_rows = golden.at("logits").get<std::vector<std::vector<std::vector<float>>>>();
  std::vector<float> hf_logits;
  for (const auto& row : hf_rows) {
    for (const auto& position : row)
      hf_logits.insert(hf_logits.end(), position.begin(), position.end());
  }
  const std::vector<float> bf16_logits = teacher_forced_logits(bf16, sequences);
  REQUIRE(hf_logits.size() == bf16_logits.size());
  const int V = weights.config.vocab_size;
  const double margin_tolerance = margin_tolerance_for(hugging_face_bf16_tolerance);
  const ladder::PrecisionComparison against_bf16 =
      compare_positions(hf_logits, bf16_logits, V, margin_tolerance);
  const ladder::PrecisionComparison against_fp32 =
      compare_positions(hf_logits, teacher_forced_logits(fp32, sequences), V, margin_tolerance);
  WARN("Hugging Face bf16 against the bf16 reference: " << ladder::describe(against_bf16));
  WARN("Hugging Face bf16 against the fp32 reference: " << ladder::describe(against_fp32));
  CHECK(against_bf16.relative_error.max <= hugging_face_bf16_tolerance);
  CHECK(against_bf16.relative_error.median < against_fp32.relative_error.median);
  check_none(against_bf16.large_margin_mismatches,
             "Hugging Face's tokens differ at a large margin of the bf16 reference");
}

TEST_CASE("bf16 greedy tokens match Hugging Face's in torch.bfloat16 except at small margins",
          "[.golden_bf16]") {
  skip_unless_golden_bf16_present();
  const ladder::Gpt2Weights weights = load_golden_model();
  const ref::Model bf16(weights, ref::Precision::bf16);
  const int V = weights.config.vocab_size;
  const double margin_tolerance = margin_tolerance_for(hugging_face_bf16_tolerance);
  for (const char* file : {"greedy_random_prompts.json", "greedy_bos.json"}) {
    const nlohmann::json golden = ladder::testing::load_golden_bf16_json(file);
    const auto prompts = golden.at("prompts").get<std::vector<Tokens>>();
    const auto hf_tokens = golden.at("tokens").get<std::vector<Tokens>>();
    const int steps = golden.at("max_new_tokens").get<int>();
    const ref::Generation generation = ref::generate(bf16, prompts, steps, -1, true);
    REQUIRE(hf_tokens.size() == prompts.size());
    for (int row = 0; row < generation.batch; ++row) {
      REQUIRE(hf_tokens[row].size() == static_cast<std::size_t>(steps));
      // Tokens equal up to the first step where they differ; there the reference's own
      // margin must be small (after it the runs feed different tokens).
      for (int step = 0; step < steps; ++step) {
        const std::int32_t token = generation.tokens[static_cast<std::size_t>(row) * steps + step];
        if (token == hf_tokens[row][step]) continue;
        const float* logits = generation.logits.data() +
                              (static_cast<std::size_t>(step) * generation.batch + row) * V;
        const double margin = ladder::relative_top2_margin(logits, V);
        WARN(file << ": row " << row << " first differs from Hugging Face's bf16 tokens at step "
                  << step << ", the bf16 reference's top-2 margin " << margin);
        CHECK(margin < margin_tolerance);
        break;
      }
    }
  }
}
