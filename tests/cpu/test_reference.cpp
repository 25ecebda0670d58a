// tests/cpu/test_reference.cpp - checks of the CPU reference, the oracle of every other test.
//
// Three layers of evidence:
//   * each operation against a hand-computed case or a property that holds whatever
//     the inputs (normalized rows, causality, gelu(x) - gelu(-x) = x, ...);
//   * the model against itself: the full forward and the KV-cached step agree, and
//     generate() follows the repository's stopping rule;
//   * the model against Hugging Face transformers: golden logits and greedy tokens in
//     tests/data/golden_model/, made by scripts/make_golden_model.py. Missing golden
//     data fails those tests (it never skips them).
// Run: cpu_tests "[reference]"
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/reference.hpp"
#include "common/weights.hpp"
#include "tests/support/golden_data.hpp"

namespace ref = ladder::reference;
using ladder::testing::expected_stop_steps;
using ladder::testing::load_golden_json;
using ladder::testing::load_golden_model;
using Tokens = std::vector<std::int32_t>;

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed, float low = -1.0f,
                                 float high = 1.0f) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(n);
  for (float& value : values) value = distribution(generator);
  return values;
}

Tokens random_tokens(std::size_t n, int vocab_size, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<std::int32_t> distribution(0, vocab_size - 1);
  Tokens tokens(n);
  for (std::int32_t& token : tokens) token = distribution(generator);
  return tokens;
}

ladder::Gpt2Config tiny_config() {
  ladder::Gpt2Config config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 32;
  config.vocab_size = 97;
  config.n_positions = 64;
  config.bos_token_id = 96;
  config.eos_token_id = 96;
  return config;
}

// A tiny model whose every parameter (biases and LayerNorm included) is random and
// large enough that greedy rows differ and wander: GPT-2's own initialisation has zero
// biases, unit LayerNorm weights and nearly flat logits, which would leave paths untested.
ladder::Gpt2Weights tiny_random_weights() {
  ladder::Gpt2Weights weights = ladder::random_gpt2_weights(tiny_config(), 7);
  weights.values = random_floats(weights.values.size(), 11, -0.5f, 0.5f);
  return weights;
}

Tokens generated_row(const ref::Generation& generation, int row) {
  const auto start =
      generation.tokens.begin() + static_cast<std::ptrdiff_t>(row) * generation.steps;
  return Tokens(start, start + generation.steps);
}

// ---------------------------------------------------------------- golden data

// Hugging Face runs fp32 with fp32 accumulation; the reference accumulates in double.
constexpr double golden_logits_tolerance = 1e-5;

// Runs generate() on a golden greedy file's prompts with `eos` and checks the stop step
// and every token against Hugging Face's (which ran all max_new_tokens steps).
ref::Generation check_golden_greedy(const ladder::Gpt2Weights& weights,
                                    const nlohmann::json& golden, int eos, bool keep_logits) {
  const auto prompts = golden.at("prompts").get<std::vector<Tokens>>();
  const auto hf_tokens = golden.at("tokens").get<std::vector<Tokens>>();
  const int max_new_tokens = golden.at("max_new_tokens").get<int>();
  INFO("smallest top-1/top-2 logit margin in Hugging Face's run: "
       << golden.at("min_top2_margin").get<double>());

  const ref::Generation generation =
      ref::generate(weights, prompts, max_new_tokens, eos, keep_logits);
  REQUIRE(generation.batch == static_cast<int>(prompts.size()));
  CHECK(generation.steps == expected_stop_steps(hf_tokens, eos, max_new_tokens));
  for (int row = 0; row < generation.batch; ++row) {
    INFO("row " << row);
    const Tokens expected(hf_tokens[row].begin(), hf_tokens[row].begin() + generation.steps);
    CHECK(generated_row(generation, row) == expected);
  }
  return generation;
}

}  // namespace

// ---------------------------------------------------------------- operations

TEST_CASE("embedding adds the token row and the position row", "[reference]") {
  const int C = 3;
  const std::vector<float> wte = {0, 1, 2, 10, 11, 12, 20, 21, 22};  // V = 3
  const std::vector<float> wpe = {0.5f, 0.25f, 0.125f, -1, -2, -3};  // 2 positions
  const Tokens tokens = {2, 0};
  const Tokens positions = {1, 0};
  std::vector<float> out(6);
  ref::embedding(tokens.data(), positions.data(), wte.data(), wpe.data(), out.data(), 2, C);
  CHECK(out == std::vector<float>{19, 19, 19, 0.5f, 1.25f, 2.125f});
}

TEST_CASE("layernorm gives each row mean 0 and variance 1 before the affine part", "[reference]") {
  const int rows = 3, C = 37;
  const float eps = 1e-5f;
  // A large offset next to the spread: a one-pass variance would lose digits here.
  std::vector<float> x = random_floats(static_cast<std::size_t>(rows) * C, 1);
  for (float& value : x) value = 3.0f * value + 100.0f;
  const std::vector<float> ones(C, 1.0f), zeros(C, 0.0f);
  std::vector<float> normalized(x.size());
  ref::layernorm(x.data(), ones.data(), zeros.data(), normalized.data(), rows, C, eps);

  for (int r = 0; r < rows; ++r) {
    const float* row = normalized.data() + static_cast<std::size_t>(r) * C;
    double mean = 0.0, variance = 0.0;
    for (int c = 0; c < C; ++c) mean += row[c];
    mean /= C;
    for (int c = 0; c < C; ++c) variance += (row[c] - mean) * (row[c] - mean);
    variance /= C;
    INFO("row " << r);
    CHECK(std::fabs(mean) < 1e-6);
    CHECK(std::fabs(variance - 1.0) < 1e-4);  // var / (var + eps) with var ~ 3
  }

  const std::vector<float> weight = random_floats(C, 2), bias = random_floats(C, 3);
  std::vector<float> affine(x.size());
  ref::layernorm(x.data(), weight.data(), bias.data(), affine.data(), rows, C, eps);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = i % C;
    CHECK(affine[i] == Approx(normalized[i] * weight[c] + bias[c]).margin(1e-6));
  }
}

TEST_CASE("linear matches a hand-computed 2x3 case, with and without bias", "[reference]") {
  const std::vector<float> x = {1, 2, 3, 4};                 // [2 rows, 2 in]
  const std::vector<float> weight = {1, 0, -1, 2, 1, 0.5f};  // [2 in, 3 out]
  const std::vector<float> bias = {0.5f, -1, 2};
  std::vector<float> out(6);
  ref::linear(x.data(), weight.data(), bias.data(), out.data(), 2, 2, 3);
  CHECK(out == std::vector<float>{5.5f, 1, 2, 11.5f, 3, 1});
  ref::linear(x.data(), weight.data(), nullptr, out.data(), 2, 2, 3);
  CHECK(out == std::vector<float>{5, 2, 0, 11, 4, -1});
}

TEST_CASE("lm_head dots each row with every token embedding", "[reference]") {
  const std::vector<float> x = {1, -2};                   // [1 row, C = 2]
  const std::vector<float> wte = {1, 1, 0.5f, 2, -1, 0};  // [V = 3, C = 2]
  std::vector<float> logits(3);
  ref::lm_head(x.data(), wte.data(), logits.data(), 1, 2, 3);
  CHECK(logits == std::vector<float>{-1, -3.5f, -1});
}

TEST_CASE("gelu matches the tanh approximation at known points", "[reference]") {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated in double offline.
  const std::vector<float> x = {-3, -1, -0.5f, 0, 0.5f, 1, 2, 3, 10, -10};
  const std::vector<double> expected = {
      -0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,  0.34571400982514394,
      0.8411919906082768,     1.954597694087775,    2.996362607918227,    10.0, 0.0};
  std::vector<float> out(x.size());
  ref::gelu(x.data(), out.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i]);
    CHECK(out[i] == Approx(expected[i]).epsilon(1e-6).margin(1e-7));
  }

  // tanh is odd, so gelu(x) - gelu(-x) = x exactly in real arithmetic; in place works.
  std::vector<float> values = random_floats(101, 4, -6.0f, 6.0f);
  std::vector<float> negated(values.size());
  std::transform(values.begin(), values.end(), negated.begin(), [](float v) { return -v; });
  const std::vector<float> original = values;
  ref::gelu(values.data(), values.data(), values.size());
  ref::gelu(negated.data(), negated.data(), negated.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    CHECK(values[i] - negated[i] == Approx(original[i]).margin(2e-6));
  }
}

TEST_CASE("add sums elementwise, also in place", "[reference]") {
  std::vector<float> a = {1, 2, 3};
  const std::vector<float> b = {0.5f, -2, 10};
  ref::add(a.data(), b.data(), a.data(), a.size());
  CHECK(a == std::vector<float>{1.5f, 0, 13});
}

TEST_CASE("causal attention over one position returns that position's values", "[reference]") {
  const int B = 2, T = 1, H = 2, C = 8;
  const std::vector<float> qkv = random_floats(static_cast<std::size_t>(B) * T * 3 * C, 5);
  std::vector<float> out(static_cast<std::size_t>(B) * T * C);
  ref::causal_attention(qkv.data(), out.data(), B, T, H, C);
  for (int b = 0; b < B; ++b) {
    for (int c = 0; c < C; ++c)
      CHECK(out[b * C + c] == Approx(qkv[b * 3 * C + 2 * C + c]).margin(1e-7));
  }
}

TEST_CASE("causal attention scales scores by 1/sqrt(D)", "[reference]") {
  // One head, D = 4, two positions. The query for position 1 is e0; key 0 is 0 and key 1
  // is 2 ln(3) e0, so the scaled scores are 0 and ln 3 and the weights 1/4 and 3/4.
  const int T = 2, H = 1, C = 4;
  std::vector<float> qkv(static_cast<std::size_t>(T) * 3 * C, 0.0f);
  float* position_0 = qkv.data();
  float* position_1 = qkv.data() + 3 * C;
  position_1[0] = 1.0f;                                     // query of position 1
  position_1[C] = static_cast<float>(2.0 * std::log(3.0));  // key of position 1
  for (int d = 0; d < C; ++d) {
    position_0[2 * C + d] = 4.0f;                    // value of position 0
    position_1[2 * C + d] = static_cast<float>(-d);  // value of position 1
  }
  std::vector<float> out(static_cast<std::size_t>(T) * C);
  ref::causal_attention(qkv.data(), out.data(), 1, T, H, C);
  for (int d = 0; d < C; ++d) {
    CHECK(out[d] == Approx(4.0));  // position 0 sees itself only
    CHECK(out[C + d] == Approx(0.25 * 4.0 + 0.75 * -d).margin(1e-6));
  }
}

TEST_CASE("causal attention with equal keys averages the values seen so far", "[reference]") {
  // Equal keys give equal scores whatever the query, so position t must output the mean
  // of values 0..t: any leak from the future, or a softmax that does not sum to 1, shows.
  const int B = 2, T = 6, H = 2, C = 8;
  std::vector<float> qkv = random_floats(static_cast<std::size_t>(B) * T * 3 * C, 6);
  const std::vector<float> shared_key = random_floats(C, 7);
  for (int row = 0; row < B * T; ++row) {
    std::copy(shared_key.begin(), shared_key.end(), qkv.begin() + row * 3 * C + C);
  }
  std::vector<float> out(static_cast<std::size_t>(B) * T * C);
  ref::causal_attention(qkv.data(), out.data(), B, T, H, C);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int c = 0; c < C; ++c) {
        double mean = 0.0;
        for (int s = 0; s <= t; ++s) mean += qkv[(b * T + s) * 3 * C + 2 * C + c];
        mean /= t + 1;
        INFO("row " << b << ", position " << t << ", column " << c);
        CHECK(out[(b * T + t) * C + c] == Approx(mean).margin(1e-6));
      }
    }
  }
}

TEST_CASE("decode attention over L cached positions equals causal attention's last position",
          "[reference]") {
  const int B = 2, L = 9, H = 3, C = 12, D = C / H, capacity = 13;
  const std::vector<float> qkv = random_floats(static_cast<std::size_t>(B) * L * 3 * C, 8);
  std::vector<float> causal_out(static_cast<std::size_t>(B) * L * C);
  ref::causal_attention(qkv.data(), causal_out.data(), B, L, H, C);

  // Hugging Face's layout [B, H, capacity, D]; slots past L hold NaN, so reading one
  // would poison the output.
  const float poison = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> keys(static_cast<std::size_t>(B) * H * capacity * D, poison);
  std::vector<float> values(keys.size(), poison);
  std::vector<float> last_queries(static_cast<std::size_t>(B) * C);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < L; ++t) {
      const float* row = qkv.data() + (b * L + t) * 3 * C;
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < D; ++d) {
          const std::size_t slot = ((static_cast<std::size_t>(b) * H + h) * capacity + t) * D + d;
          keys[slot] = row[C + h * D + d];
          values[slot] = row[2 * C + h * D + d];
        }
      }
      if (t == L - 1) std::copy(row, row + C, last_queries.begin() + b * C);
    }
  }
  std::vector<float> decode_out(static_cast<std::size_t>(B) * C);
  ref::decode_attention(last_queries.data(), keys.data(), values.data(), decode_out.data(), B, L,
                        capacity, H, C);
  for (int b = 0; b < B; ++b) {
    INFO("row " << b);
    CHECK(ref::relative_error(decode_out.data() + b * C, causal_out.data() + (b * L + L - 1) * C,
                              C) <= 1e-6);
  }
}

TEST_CASE("argmax returns the first of equal maxima, as torch.argmax", "[reference]") {
  const std::vector<float> ties = {1, 3, 3, 2};
  CHECK(ref::argmax(ties.data(), 4) == 1);
  const std::vector<float> all_equal(5, -2.0f);
  CHECK(ref::argmax(all_equal.data(), 5) == 0);
  const std::vector<float> negatives = {-5, -1, -3, -1};
  CHECK(ref::argmax(negatives.data(), 4) == 1);
  const std::vector<float> with_nan = {1, std::numeric_limits<float>::quiet_NaN(), 7};
  CHECK(ref::argmax(with_nan.data(), 3) == 1);
  CHECK_THROWS_AS(ref::argmax(ties.data(), 0), std::invalid_argument);
}

TEST_CASE("relative error is max |a - ref| / max |ref| and fails on NaN or infinity",
          "[reference]") {
  const std::vector<float> expected = {2, -4, 1};
  const std::vector<float> close = {2.5f, -4, 0};
  CHECK(ref::relative_error(close.data(), expected.data(), 3) == Approx(1.0 / 4.0));
  const std::vector<float> zeros(3, 0.0f);
  CHECK(ref::relative_error(expected.data(), zeros.data(), 3) == Approx(4.0));
  CHECK(ref::relative_error(expected.data(), expected.data(), 3) == 0.0);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> with_nan = {2, nan, 1};
  const std::vector<float> with_inf = {2, -4, inf};
  CHECK(std::isinf(ref::relative_error(with_nan.data(), expected.data(), 3)));
  CHECK(std::isinf(ref::relative_error(expected.data(), with_nan.data(), 3)));
  CHECK(std::isinf(ref::relative_error(with_inf.data(), expected.data(), 3)));
  CHECK_FALSE(ref::relative_error(with_nan.data(), expected.data(), 3) <= 1e-4);
}

// ---------------------------------------------------------------- the model

TEST_CASE("the model keeps a reference to its weights, so it refuses a temporary", "[reference]") {
  STATIC_REQUIRE_FALSE(std::is_constructible<ref::Model, ladder::Gpt2Weights>::value);
  STATIC_REQUIRE(std::is_constructible<ref::Model, const ladder::Gpt2Weights&>::value);
}

TEST_CASE("full forward and KV-cached steps give the same logits at every position",
          "[reference]") {
  const ladder::Gpt2Weights weights = tiny_random_weights();
  const ref::Model model(weights);
  const int V = weights.config.vocab_size;
  const Tokens tokens = random_tokens(40, V, 9);

  const std::vector<float> forward_logits = model.forward(tokens);
  REQUIRE(forward_logits.size() == tokens.size() * V);
  ref::Model::KvCache cache;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::vector<float> step_logits = model.step(cache, tokens[t]);
    INFO("position " << t);
    REQUIRE(step_logits.size() == static_cast<std::size_t>(V));
    CHECK(ref::relative_error(step_logits.data(), forward_logits.data() + t * V, V) <= 1e-6);
  }
  CHECK(cache.length == static_cast<int>(tokens.size()));
  CHECK(cache.keys.size() == static_cast<std::size_t>(weights.config.n_layer));
}

TEST_CASE("the model rejects tokens, lengths and caches it cannot run", "[reference]") {
  const ladder::Gpt2Weights weights = tiny_random_weights();
  const ref::Model model(weights);
  const ladder::Gpt2Config& config = weights.config;

  CHECK_THROWS_AS(model.forward({}), std::invalid_argument);
  CHECK_THROWS_AS(model.forward({0, config.vocab_size}), std::invalid_argument);
  CHECK_THROWS_AS(model.forward({-1}), std::invalid_argument);
  CHECK_THROWS_AS(model.forward(Tokens(config.n_positions + 1, 0)), std::invalid_argument);
  CHECK_NOTHROW(model.forward(Tokens(config.n_positions, 0)));

  ref::Model::KvCache full;
  for (int t = 0; t < config.n_positions; ++t) model.step(full, 1);
  CHECK_THROWS_AS(model.step(full, 1), std::invalid_argument);

  ref::Model::KvCache foreign;
  foreign.keys.resize(static_cast<std::size_t>(config.n_layer) + 1);
  foreign.values.resize(foreign.keys.size());
  CHECK_THROWS_AS(model.step(foreign, 1), std::invalid_argument);
  ref::Model::KvCache empty;
  CHECK_THROWS_AS(model.step(empty, config.vocab_size), std::invalid_argument);
}

// ---------------------------------------------------------------- generation

TEST_CASE("generate takes the argmax of the forward pass over everything so far", "[reference]") {
  const ladder::Gpt2Weights weights = tiny_random_weights();
  const ref::Model model(weights);
  const int V = weights.config.vocab_size;
  const std::vector<Tokens> prompts = {random_tokens(5, V, 20), random_tokens(5, V, 21),
                                       random_tokens(5, V, 22)};
  const int max_new_tokens = 12;
  const ref::Generation generation = ref::generate(weights, prompts, max_new_tokens, -1, true);
  REQUIRE(generation.batch == 3);
  REQUIRE(generation.steps == max_new_tokens);
  REQUIRE(generation.logits.size() == static_cast<std::size_t>(max_new_tokens) * 3 * V);

  for (int row = 0; row < 3; ++row) {
    Tokens sequence = prompts[row];
    for (int step = 0; step < max_new_tokens; ++step) {
      const std::vector<float> forward_logits = model.forward(sequence);
      const float* expected = forward_logits.data() + (sequence.size() - 1) * V;
      const float* kept = generation.logits.data() + (static_cast<std::size_t>(step) * 3 + row) * V;
      const std::int32_t token = generation.tokens[row * max_new_tokens + step];
      INFO("row " << row << ", step " << step);
      CHECK(ref::relative_error(kept, expected, V) <= 1e-6);
      CHECK(token == ref::argmax(expected, V));
      sequence.push_back(token);
    }
  }
}

TEST_CASE("generate stops after the step at which the last row produced EOS", "[reference]") {
  const ladder::Gpt2Weights weights = tiny_random_weights();
  const int V = weights.config.vocab_size;
  // Rows 0 and 2 share a prompt: they must still come out as two identical rows.
  const std::vector<Tokens> prompts = {random_tokens(4, V, 30), random_tokens(4, V, 31),
                                       random_tokens(4, V, 30), random_tokens(4, V, 32)};
  const int max_new_tokens = 30;
  const ref::Generation unstopped = ref::generate(weights, prompts, max_new_tokens, -1, false);
  REQUIRE(unstopped.steps == max_new_tokens);
  std::vector<Tokens> rows;
  for (int row = 0; row < 4; ++row) rows.push_back(generated_row(unstopped, row));
  CHECK(rows[0] == rows[2]);

  // An id every row produces, first at different steps, and before the last step: rows
  // that finish early must keep being decoded until the last one finishes.
  int eos = -1, stop = max_new_tokens;
  for (int candidate = 0; candidate < V; ++candidate) {
    const int candidate_stop = expected_stop_steps(rows, candidate, max_new_tokens);
    const bool every_row_produces = std::all_of(rows.begin(), rows.end(), [&](const Tokens& row) {
      return std::find(row.begin(), row.end(), candidate) != row.end();
    });
    const bool some_row_finishes_early =
        std::any_of(rows.begin(), rows.end(), [&](const Tokens& row) {
          return std::find(row.begin(), row.end(), candidate) - row.begin() + 1 < candidate_stop;
        });
    if (every_row_produces && some_row_finishes_early && candidate_stop < stop) {
      eos = candidate;
      stop = candidate_stop;
    }
  }
  REQUIRE(eos >= 0);  // the tiny model's rows share a token; change the seeds if not

  const ref::Generation stopped = ref::generate(weights, prompts, max_new_tokens, eos, false);
  INFO("eos " << eos);
  CHECK(stopped.steps == stop);
  for (int row = 0; row < 4; ++row) {
    INFO("row " << row);
    CHECK(generated_row(stopped, row) == Tokens(rows[row].begin(), rows[row].begin() + stop));
  }

  SECTION("an id that only some rows produce never stops generation early") {
    int partial = -1;
    for (int candidate = 0; candidate < V && partial < 0; ++candidate) {
      const auto count = std::count_if(rows.begin(), rows.end(), [&](const Tokens& row) {
        return std::find(row.begin(), row.end(), candidate) != row.end();
      });
      if (count > 0 && count < 4) partial = candidate;
    }
    REQUIRE(partial >= 0);
    CHECK(ref::generate(weights, prompts, max_new_tokens, partial, false).steps == max_new_tokens);
  }
  SECTION("an id no row produces runs all max_new_tokens steps") {
    int absent = 0;
    while (std::any_of(rows.begin(), rows.end(), [&](const Tokens& row) {
      return std::find(row.begin(), row.end(), absent) != row.end();
    })) {
      ++absent;
    }
    REQUIRE(absent < V);
    CHECK(ref::generate(weights, prompts, max_new_tokens, absent, false).steps == max_new_tokens);
  }
}

TEST_CASE("generate computes each row independently of the rest of the batch", "[reference]") {
  const ladder::Gpt2Weights weights = tiny_random_weights();
  const int V = weights.config.vocab_size;
  const std::vector<Tokens> prompts = {random_tokens(3, V, 40), random_tokens(3, V, 41),
                                       random_tokens(3, V, 42)};
  const ref::Generation batch = ref::generate(weights, prompts, 10, -1, false);
  for (int row = 0; row < 3; ++row) {
    const ref::Generation alone = ref::generate(weights, {prompts[row]}, 10, -1, false);
    INFO("row " << row);
    CHECK(generated_row(batch, row) == alone.tokens);
  }
}

TEST_CASE("generate refuses requests it cannot run, saying why", "[reference]") {
  const ladder::Gpt2Weights weights = tiny_random_weights();
  const ladder::Gpt2Config& config = weights.config;
  CHECK_THROWS_AS(ref::generate(weights, {}, 4, -1, false), std::invalid_argument);
  CHECK_THROWS_AS(ref::generate(weights, {{}}, 4, -1, false), std::invalid_argument);
  CHECK_THROWS_AS(ref::generate(weights, {{1, 2}, {3}}, 4, -1, false), std::invalid_argument);
  CHECK_THROWS_AS(ref::generate(weights, {{config.vocab_size}}, 4, -1, false),
                  std::invalid_argument);
  CHECK_THROWS_AS(ref::generate(weights, {{1}}, -1, -1, false), std::invalid_argument);
  CHECK_THROWS_AS(ref::generate(weights, {{1}}, 4, config.vocab_size, false),
                  std::invalid_argument);
  // Prompt 4 + 61 new tokens feeds 64 positions, the whole context; one more is too many.
  CHECK_NOTHROW(ref::generate(weights, {Tokens(4, 1)}, config.n_positions - 3, -1, false));
  CHECK_THROWS_WITH(ref::generate(weights, {Tokens(4, 1)}, config.n_positions - 2, -1, false),
                    Catch::Contains("n_positions"));
}

// ---------------------------------------------------------------- against Hugging Face

TEST_CASE("teacher-forced logits match Hugging Face's on the golden model", "[reference][golden]") {
  const ladder::Gpt2Weights weights = load_golden_model();
  const nlohmann::json golden = load_golden_json("teacher_forced.json");
  const ref::Model model(weights);
  const int V = weights.config.vocab_size;
  const auto sequences = golden.at("tokens").get<std::vector<Tokens>>();
  const auto hf_logits = golden.at("logits").get<std::vector<std::vector<std::vector<float>>>>();
  REQUIRE(sequences.size() == hf_logits.size());
  for (std::size_t row = 0; row < sequences.size(); ++row) {
    const std::vector<float> logits = model.forward(sequences[row]);
    REQUIRE(hf_logits[row].size() == sequences[row].size());
    for (std::size_t t = 0; t < sequences[row].size(); ++t) {
      INFO("row " << row << ", position " << t);
      REQUIRE(hf_logits[row][t].size() == static_cast<std::size_t>(V));
      CHECK(ref::relative_error(logits.data() + t * V, hf_logits[row][t].data(), V) <=
            golden_logits_tolerance);
    }
  }
}

TEST_CASE("greedy tokens from BOS prompts match Hugging Face's on the golden model",
          "[reference][golden]") {
  const ladder::Gpt2Weights weights = load_golden_model();
  const nlohmann::json golden = load_golden_json("greedy_bos.json");
  const ref::Generation generation =
      check_golden_greedy(weights, golden, weights.config.eos_token_id, true);
  const auto hf_logits = golden.at("logits_row0").get<std::vector<std::vector<float>>>();
  const std::size_t V = static_cast<std::size_t>(weights.config.vocab_size);
  for (int step = 0; step < generation.steps; ++step) {
    INFO("step " << step);
    REQUIRE(hf_logits.at(step).size() == V);
    const float* row_0 =
        generation.logits.data() + static_cast<std::size_t>(step) * generation.batch * V;
    CHECK(ref::relative_error(row_0, hf_logits[step].data(), V) <= golden_logits_tolerance);
  }
}

TEST_CASE("greedy tokens from random prompts match Hugging Face's on the golden model",
          "[reference][golden]") {
  const ladder::Gpt2Weights weights = load_golden_model();
  check_golden_greedy(weights, load_golden_json("greedy_random_prompts.json"),
                      weights.config.eos_token_id, false);
}

TEST_CASE("generation stops where Hugging Face's tokens say, with an EOS the model emits",
          "[reference][golden]") {
  const ladder::Gpt2Weights weights = load_golden_model();
  const nlohmann::json golden = load_golden_json("greedy_eos.json");
  const int eos = golden.at("eos_override").get<int>();
  const ref::Generation generation = check_golden_greedy(weights, golden, eos, false);
  CHECK(generation.steps == golden.at("stop_steps").get<int>());
  CHECK(generation.steps < golden.at("max_new_tokens").get<int>());
}
