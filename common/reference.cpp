// common/reference.cpp - the CPU reference: GPT-2 operations, forward, KV-cached step
// and greedy generation.
//
// Every sum (dot products, LayerNorm statistics, softmax) is accumulated in double and
// rounded to float once, when it is stored. The reference is therefore more accurate
// than any fp32 kernel it judges, and its own rounding stays far below the tolerances
// of the tests. The full forward and the cached step run the same operations in the
// same order, attention included (attend_one_query), so for one token at one position
// they produce the same numbers. In bf16 mode the same code runs on weights rounded
// once in the constructor (R1 in reference.hpp); a storage-rounding policy
// (StoreRounding) rounds each stored tensor to bf16 at the points R2-R7 and does nothing
// in fp32 mode.
//
// Loops are ordered for the cache: linear() walks the [in, out] weight row by row
// (out[o] += x[i] * W[i, o]) and lm_head() dots contiguous rows of the embedding, so
// GPT-2 small at full size decodes at a usable speed for the GPU tests.
#include "common/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/host_threads.hpp"

#include "common/bfloat16.hpp"

namespace ladder::reference {

namespace {

/// Softmax-weighted sum of `length` values for one query of one head (D wide).
/// Key and value j start at keys + j * position_stride and values + j * position_stride,
/// which covers every layout used here: qkv rows ([T, 3C]), the model's cache ([L, C])
/// and Hugging Face's cache ([B, H, capacity, D]).
void attend_one_query(const float* query, const float* keys, const float* values,
                      std::size_t position_stride, int length, int D, float* out) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> weights(static_cast<std::size_t>(length));
  double max_score = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < length; ++j) {
    const float* key = keys + static_cast<std::size_t>(j) * position_stride;
    double dot = 0.0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(query[d]) * static_cast<double>(key[d]);
    weights[j] = dot * scale;
    max_score = std::max(max_score, weights[j]);
  }
  // Subtracting the largest score keeps exp() from overflowing; it cancels in the ratio.
  double total = 0.0;
  for (double& weight : weights) {
    weight = std::exp(weight - max_score);
    total += weight;
  }
  std::vector<double> sum(static_cast<std::size_t>(D), 0.0);
  for (int j = 0; j < length; ++j) {
    const float* value = values + static_cast<std::size_t>(j) * position_stride;
    for (int d = 0; d < D; ++d) sum[d] += weights[j] * static_cast<double>(value[d]);
  }
  for (int d = 0; d < D; ++d) out[d] = static_cast<float>(sum[d] / total);
}

void require_token_in_vocabulary(std::int32_t token, const Gpt2Config& config, const char* what) {
  if (token < 0 || token >= config.vocab_size) {
    throw std::invalid_argument(
        std::string(what) + " " + std::to_string(token) + " is outside the vocabulary [0, " +
        std::to_string(config.vocab_size) + "): use ids the model's tokenizer produces");
  }
}

/// Work buffers of one transformer block for `rows` positions.
struct BlockBuffers {
  BlockBuffers(int rows, int C)
      : normed(static_cast<std::size_t>(rows) * C),
        qkv(static_cast<std::size_t>(rows) * 3 * C),
        attention(static_cast<std::size_t>(rows) * C),
        projected(static_cast<std::size_t>(rows) * C),
        mlp_hidden(static_cast<std::size_t>(rows) * 4 * C) {}
  std::vector<float> normed;      ///< [rows, C]   LayerNorm output
  std::vector<float> qkv;         ///< [rows, 3C]  queries, keys, values
  std::vector<float> attention;   ///< [rows, C]   attention output, heads side by side
  std::vector<float> projected;   ///< [rows, C]   what a sub-block adds to the residual
  std::vector<float> mlp_hidden;  ///< [rows, 4C]  MLP hidden layer
};

/// The storage-rounding policy: applied to every tensor the forward stores between two
/// operations (the points R2-R7 of reference.hpp), in place.
using StoreRounding = void (*)(float* values, std::size_t n);

/// fp32 mode's policy: stored values stay as computed.
void keep_fp32(float* /*values*/, std::size_t /*n*/) {}

StoreRounding store_rounding_for(Precision precision) {
  return precision == Precision::bf16 ? static_cast<StoreRounding>(round_to_bfloat16) : keep_fp32;
}

/// One GPT-2 block on `rows` positions of the residual stream, in place:
///   residual += attn_proj(attention(qkv(ln_1(residual))))
///   residual += mlp_proj(gelu(fc(ln_2(residual))))
/// `attend(qkv, attention_out)` is the only part that differs between the full
/// forward (causal attention over the rows) and the cached step (the row against the
/// cache). `round_stored` runs on each tensor a kernel would store; the projections
/// count as added to the residual inside their matmul, so only the sums are stored.
template <typename Attend>
void transformer_block(const Gpt2Weights& weights, const LayerOffsets& layer, float* residual,
                       int rows, BlockBuffers& buffers, StoreRounding round_stored,
                       Attend&& attend) {
  const int C = weights.config.n_embd;
  const float eps = weights.config.layer_norm_epsilon;
  const std::size_t size = static_cast<std::size_t>(rows) * C;

  layernorm(residual, weights.at(layer.ln_1_weight), weights.at(layer.ln_1_bias),
            buffers.normed.data(), rows, C, eps);
  round_stored(buffers.normed.data(), size);
  linear(buffers.normed.data(), weights.at(layer.qkv_weight), weights.at(layer.qkv_bias),
         buffers.qkv.data(), rows, C, 3 * C);
  round_stored(buffers.qkv.data(), size * 3);
  attend(buffers.qkv.data(), buffers.attention.data());
  round_stored(buffers.attention.data(), size);
  linear(buffers.attention.data(), weights.at(layer.attn_proj_weight),
         weights.at(layer.attn_proj_bias), buffers.projected.data(), rows, C, C);
  add(residual, buffers.projected.data(), residual, size);
  round_stored(residual, size);

  layernorm(residual, weights.at(layer.ln_2_weight), weights.at(layer.ln_2_bias),
            buffers.normed.data(), rows, C, eps);
  round_stored(buffers.normed.data(), size);
  linear(buffers.normed.data(), weights.at(layer.fc_weight), weights.at(layer.fc_bias),
         buffers.mlp_hidden.data(), rows, C, 4 * C);
  gelu(buffers.mlp_hidden.data(), buffers.mlp_hidden.data(), size * 4);
  round_stored(buffers.mlp_hidden.data(), size * 4);
  linear(buffers.mlp_hidden.data(), weights.at(layer.mlp_proj_weight),
         weights.at(layer.mlp_proj_bias), buffers.projected.data(), rows, 4 * C, C);
  add(residual, buffers.projected.data(), residual, size);
  round_stored(residual, size);
}

/// Final LayerNorm and the tied LM head: logits [rows, V] from the residual [rows, C].
/// The LayerNorm output is stored (rounded by `round_stored`); the logits never are.
std::vector<float> final_logits(const Gpt2Weights& weights, const float* residual, int rows,
                                StoreRounding round_stored) {
  const Gpt2Config& config = weights.config;
  const ParameterLayout& layout = weights.layout;
  std::vector<float> normed(static_cast<std::size_t>(rows) * config.n_embd);
  layernorm(residual, weights.at(layout.ln_f_weight), weights.at(layout.ln_f_bias), normed.data(),
            rows, config.n_embd, config.layer_norm_epsilon);
  round_stored(normed.data(), normed.size());
  std::vector<float> logits(static_cast<std::size_t>(rows) * config.vocab_size);
  lm_head(normed.data(), weights.at(layout.token_embedding), logits.data(), rows, config.n_embd,
          config.vocab_size);
  return logits;
}

/// Greedy decoding of one prompt, one token per advance_to() step. The newest token is
/// fed to the model only when the next one is asked for, so the last generated token
/// is never fed (it would need a position past the request).
class RowDecoder {
 public:
  RowDecoder(const Model& model, const std::vector<std::int32_t>& prompt, bool keep_logits)
      : model_(model), prompt_(prompt), keep_logits_(keep_logits) {}

  /// Generates tokens until `target_steps` exist, or until this row produces
  /// `stop_token` (never, when stop_token < 0).
  void advance_to(int target_steps, int stop_token) {
    if (!started_) start();
    const int vocab_size = model_.config().vocab_size;
    while (steps() < target_steps && !(stop_token >= 0 && produced(stop_token))) {
      const std::vector<float> logits = model_.step(cache_, unfed_token_);
      unfed_token_ = argmax(logits.data(), vocab_size);
      tokens_.push_back(unfed_token_);
      if (keep_logits_) logits_.insert(logits_.end(), logits.begin(), logits.end());
    }
  }

  int steps() const { return static_cast<int>(tokens_.size()); }
  bool produced(int token) const {
    return std::find(tokens_.begin(), tokens_.end(), token) != tokens_.end();
  }
  const std::vector<std::int32_t>& tokens() const { return tokens_; }
  const std::vector<float>& logits() const { return logits_; }  ///< [steps, V] if kept

 private:
  void start() {
    for (std::size_t i = 0; i + 1 < prompt_.size(); ++i) model_.step(cache_, prompt_[i]);
    unfed_token_ = prompt_.back();
    started_ = true;
  }

  const Model& model_;
  const std::vector<std::int32_t>& prompt_;
  const bool keep_logits_;
  bool started_ = false;
  Model::KvCache cache_;
  std::int32_t unfed_token_ = 0;
  std::vector<std::int32_t> tokens_;
  std::vector<float> logits_;
};

void validate_generation_request(const Gpt2Config& config,
                                 const std::vector<std::vector<std::int32_t>>& prompts,
                                 int max_new_tokens, int eos_token_id) {
  if (prompts.empty()) throw std::invalid_argument("generate: no prompts; pass at least one row");
  const std::size_t prompt_length = prompts.front().size();
  if (prompt_length == 0) {
    throw std::invalid_argument("generate: empty prompt; start every row with at least BOS");
  }
  for (const std::vector<std::int32_t>& prompt : prompts) {
    if (prompt.size() != prompt_length) {
      throw std::invalid_argument(
          "generate: prompts have different lengths (" + std::to_string(prompt_length) + " and " +
          std::to_string(prompt.size()) + "); give every row the same number of tokens");
    }
    for (std::int32_t token : prompt) require_token_in_vocabulary(token, config, "prompt token");
  }
  if (max_new_tokens < 0) {
    throw std::invalid_argument("generate: max_new_tokens is " + std::to_string(max_new_tokens) +
                                "; ask for 0 or more new tokens");
  }
  if (eos_token_id >= config.vocab_size) {
    throw std::invalid_argument("generate: eos_token_id " + std::to_string(eos_token_id) +
                                " is outside the vocabulary [0, " +
                                std::to_string(config.vocab_size) +
                                "); pass a vocabulary id, or a negative one to never stop early");
  }
  const long long positions_needed =
      static_cast<long long>(prompt_length) + std::max(max_new_tokens, 1) - 1;
  if (positions_needed > config.n_positions) {
    throw std::invalid_argument(
        "generate: prompt length " + std::to_string(prompt_length) + " + max_new_tokens " +
        std::to_string(max_new_tokens) +
        " needs more than the model's n_positions = " + std::to_string(config.n_positions) +
        " positions; shorten the prompt or ask for fewer tokens");
  }
}

}  // namespace

// ---------------------------------------------------------------- operations

void embedding(const std::int32_t* tokens, const std::int32_t* positions, const float* wte,
               const float* wpe, float* out, int rows, int C) {
  for (int r = 0; r < rows; ++r) {
    const float* token_row = wte + static_cast<std::size_t>(tokens[r]) * C;
    const float* position_row = wpe + static_cast<std::size_t>(positions[r]) * C;
    float* out_row = out + static_cast<std::size_t>(r) * C;
    for (int c = 0; c < C; ++c) out_row[c] = token_row[c] + position_row[c];
  }
}

void layernorm(const float* x, const float* weight, const float* bias, float* out, int rows, int C,
               float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* row = x + static_cast<std::size_t>(r) * C;
    float* out_row = out + static_cast<std::size_t>(r) * C;
    // Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2, which
    // cancels catastrophically when the mean is large next to the spread.
    double sum = 0.0;
    for (int c = 0; c < C; ++c) sum += row[c];
    const double mean = sum / C;
    double squares = 0.0;
    for (int c = 0; c < C; ++c) {
      const double deviation = row[c] - mean;
      squares += deviation * deviation;
    }
    const double inverse_std = 1.0 / std::sqrt(squares / C + static_cast<double>(eps));
    for (int c = 0; c < C; ++c) {
      out_row[c] = static_cast<float>((row[c] - mean) * inverse_std * weight[c] + bias[c]);
    }
  }
}

void linear(const float* x, const float* weight, const float* bias, float* out, int rows,
            int in_features, int out_features) {
  std::vector<double> sums(static_cast<std::size_t>(out_features));
  for (int r = 0; r < rows; ++r) {
    for (int o = 0; o < out_features; ++o) sums[o] = bias ? bias[o] : 0.0;
    const float* x_row = x + static_cast<std::size_t>(r) * in_features;
    for (int i = 0; i < in_features; ++i) {
      const double x_value = x_row[i];
      const float* weight_row = weight + static_cast<std::size_t>(i) * out_features;
      for (int o = 0; o < out_features; ++o) sums[o] += x_value * weight_row[o];
    }
    float* out_row = out + static_cast<std::size_t>(r) * out_features;
    for (int o = 0; o < out_features; ++o) out_row[o] = static_cast<float>(sums[o]);
  }
}

void lm_head(const float* x, const float* wte, float* logits, int rows, int C, int V) {
  // Four vocabulary rows at a time: four independent sums keep the floating-point units
  // busy, while each sum still runs over c in order (the same result as one at a time).
  constexpr int rows_at_once = 4;
  for (int r = 0; r < rows; ++r) {
    const float* x_row = x + static_cast<std::size_t>(r) * C;
    float* logits_row = logits + static_cast<std::size_t>(r) * V;
    for (int first = 0; first < V; first += rows_at_once) {
      const int count = std::min(rows_at_once, V - first);
      double dots[rows_at_once] = {0.0, 0.0, 0.0, 0.0};
      const float* embedding_rows[rows_at_once];
      for (int k = 0; k < rows_at_once; ++k) {
        // Past the end of the vocabulary, repeat the first row: computed, never stored.
        embedding_rows[k] = wte + static_cast<std::size_t>(first + (k < count ? k : 0)) * C;
      }
      for (int c = 0; c < C; ++c) {
        const double x_value = x_row[c];
        for (int k = 0; k < rows_at_once; ++k) dots[k] += x_value * embedding_rows[k][c];
      }
      for (int k = 0; k < count; ++k) logits_row[first + k] = static_cast<float>(dots[k]);
    }
  }
}

void gelu(const float* x, float* out, std::size_t n) {
  const double sqrt_2_over_pi = std::sqrt(2.0 / 3.14159265358979323846);
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i];
    out[i] = static_cast<float>(0.5 * v *
                                (1.0 + std::tanh(sqrt_2_over_pi * (v + 0.044715 * v * v * v))));
  }
}

void add(const float* a, const float* b, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void causal_attention(const float* qkv, float* out, int B, int T, int H, int C) {
  const int D = C / H;
  const std::size_t qkv_stride = static_cast<std::size_t>(3) * C;
  for (int b = 0; b < B; ++b) {
    const float* row_start = qkv + static_cast<std::size_t>(b) * T * qkv_stride;
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        const std::size_t head_column = static_cast<std::size_t>(h) * D;
        attend_one_query(row_start + t * qkv_stride + head_column, row_start + C + head_column,
                         row_start + 2 * C + head_column, qkv_stride, t + 1, D,
                         out + (static_cast<std::size_t>(b) * T + t) * C + head_column);
      }
    }
  }
}

void decode_attention(const float* q, const float* keys, const float* values, float* out, int B,
                      int L, int capacity, int H, int C) {
  const int D = C / H;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      const std::size_t head_start = (static_cast<std::size_t>(b) * H + h) * capacity * D;
      const std::size_t head_column =
          static_cast<std::size_t>(b) * C + static_cast<std::size_t>(h) * D;
      attend_one_query(q + head_column, keys + head_start, values + head_start,
                       static_cast<std::size_t>(D), L, D, out + head_column);
    }
  }
}

int argmax(const float* values, int n) {
  if (n < 1)
    throw std::invalid_argument("argmax of " + std::to_string(n) + " values; pass at least one");
  int best = 0;
  for (int i = 0; i < n; ++i) {
    if (std::isnan(values[i])) return i;
    if (values[i] > values[best]) best = i;
  }
  return best;
}

// ---------------------------------------------------------------- the model

namespace {

/// A copy of `weights` whose every parameter is rounded to bf16 (point R1).
std::shared_ptr<const Gpt2Weights> weights_rounded_to_bfloat16(const Gpt2Weights& weights) {
  auto rounded = std::make_shared<Gpt2Weights>(weights);
  round_to_bfloat16(rounded->values.data(), rounded->values.size());
  return rounded;
}

}  // namespace

Model::Model(const Gpt2Weights& weights) : Model(weights, Precision::fp32) {}

Model::Model(const Gpt2Weights& weights, Precision precision)
    : rounded_weights_(precision == Precision::bf16 ? weights_rounded_to_bfloat16(weights)
                                                    : nullptr),
      weights_(rounded_weights_ ? *rounded_weights_ : weights),
      precision_(precision) {
  weights.config.validate();
  const ParameterLayout expected_layout = ParameterLayout::for_config(weights.config);
  if (weights.layout.total != expected_layout.total ||
      weights.values.size() != expected_layout.total) {
    throw std::invalid_argument(
        "reference::Model: the weights hold " + std::to_string(weights.values.size()) +
        " floats but their config needs " + std::to_string(expected_layout.total) +
        "; build them with random_gpt2_weights or load_gpt2_checkpoint");
  }
}

std::vector<float> Model::forward(const std::vector<std::int32_t>& tokens) const {
  const Gpt2Config& config = weights_.config;
  if (tokens.empty()) throw std::invalid_argument("Model::forward: no tokens; pass at least one");
  if (tokens.size() > static_cast<std::size_t>(config.n_positions)) {
    throw std::invalid_argument("Model::forward: " + std::to_string(tokens.size()) +
                                " tokens exceed n_positions = " +
                                std::to_string(config.n_positions) + "; pass a shorter sequence");
  }
  for (std::int32_t token : tokens) require_token_in_vocabulary(token, config, "token");

  const int T = static_cast<int>(tokens.size());
  const int C = config.n_embd;
  std::vector<std::int32_t> positions(tokens.size());
  for (int t = 0; t < T; ++t) positions[t] = t;

  const StoreRounding round_stored = store_rounding_for(precision_);
  std::vector<float> residual(static_cast<std::size_t>(T) * C);
  embedding(tokens.data(), positions.data(), weights_.at(weights_.layout.token_embedding),
            weights_.at(weights_.layout.position_embedding), residual.data(), T, C);
  round_stored(residual.data(), residual.size());
  BlockBuffers buffers(T, C);
  for (const LayerOffsets& layer : weights_.layout.layers) {
    transformer_block(weights_, layer, residual.data(), T, buffers, round_stored,
                      [&](const float* qkv, float* attention) {
                        causal_attention(qkv, attention, 1, T, config.n_head, C);
                      });
  }
  return final_logits(weights_, residual.data(), T, round_stored);
}

std::vector<float> Model::step(KvCache& cache, std::int32_t token) const {
  const Gpt2Config& config = weights_.config;
  const int C = config.n_embd;
  const int D = config.head_dim();
  require_token_in_vocabulary(token, config, "token");
  if (cache.length >= config.n_positions) {
    throw std::invalid_argument(
        "Model::step: the cache already holds n_positions = " + std::to_string(config.n_positions) +
        " positions; generate fewer tokens or use a shorter prompt");
  }
  if (cache.keys.empty() && cache.values.empty() && cache.length == 0) {
    cache.keys.resize(static_cast<std::size_t>(config.n_layer));
    cache.values.resize(static_cast<std::size_t>(config.n_layer));
  }
  const std::size_t cached_floats = static_cast<std::size_t>(cache.length) * C;
  bool cache_fits = cache.keys.size() == static_cast<std::size_t>(config.n_layer) &&
                    cache.values.size() == cache.keys.size();
  for (std::size_t layer = 0; cache_fits && layer < cache.keys.size(); ++layer) {
    cache_fits =
        cache.keys[layer].size() == cached_floats && cache.values[layer].size() == cached_floats;
  }
  if (!cache_fits) {
    throw std::invalid_argument(
        "Model::step: the KV cache does not match this model's layers, "
        "width or its own length; start each sequence from KvCache{}");
  }

  const std::int32_t position = cache.length;
  const int length_after = cache.length + 1;
  const StoreRounding round_stored = store_rounding_for(precision_);
  std::vector<float> residual(static_cast<std::size_t>(C));
  embedding(&token, &position, weights_.at(weights_.layout.token_embedding),
            weights_.at(weights_.layout.position_embedding), residual.data(), 1, C);
  round_stored(residual.data(), residual.size());
  BlockBuffers buffers(1, C);
  for (std::size_t layer = 0; layer < weights_.layout.layers.size(); ++layer) {
    std::vector<float>& keys = cache.keys[layer];
    std::vector<float>& values = cache.values[layer];
    transformer_block(weights_, weights_.layout.layers[layer], residual.data(), 1, buffers,
                      round_stored, [&](const float* qkv, float* attention) {
                        keys.insert(keys.end(), qkv + C, qkv + 2 * C);
                        values.insert(values.end(), qkv + 2 * C, qkv + 3 * C);
                        for (int h = 0; h < config.n_head; ++h) {
                          const std::size_t head_column = static_cast<std::size_t>(h) * D;
                          attend_one_query(qkv + head_column, keys.data() + head_column,
                                           values.data() + head_column, static_cast<std::size_t>(C),
                                           length_after, D, attention + head_column);
                        }
                      });
  }
  cache.length = length_after;
  return final_logits(weights_, residual.data(), 1, round_stored);
}

// ---------------------------------------------------------------- generation

Generation generate(const Gpt2Weights& weights,
                    const std::vector<std::vector<std::int32_t>>& prompts, int max_new_tokens,
                    int eos_token_id, bool keep_logits) {
  return generate(Model(weights), prompts, max_new_tokens, eos_token_id, keep_logits);
}

Generation generate(const Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
                    int max_new_tokens, int eos_token_id, bool keep_logits) {
  const Gpt2Config& config = model.config();
  validate_generation_request(config, prompts, max_new_tokens, eos_token_id);

  // Identical prompts give identical rows (the BOS workload is B copies of one row),
  // so each distinct prompt is decoded once and shared.
  std::map<std::vector<std::int32_t>, std::size_t> decoder_of_prompt;
  std::vector<std::size_t> decoder_of_row;
  std::vector<RowDecoder> decoders;
  for (const std::vector<std::int32_t>& prompt : prompts) {
    const auto [entry, inserted] = decoder_of_prompt.emplace(prompt, decoders.size());
    if (inserted) decoders.emplace_back(model, prompt, keep_logits);
    decoder_of_row.push_back(entry->second);
  }

  // Phase 1: every row runs until it produces EOS or reaches the limit. The longest
  // row then ends at the stop step: the step at which the last row finished, or the
  // limit if some row never finished.
  run_on_threads(decoders.size(),
                 [&](std::size_t i) { decoders[i].advance_to(max_new_tokens, eos_token_id); });
  int steps = 0;
  for (const RowDecoder& decoder : decoders) steps = std::max(steps, decoder.steps());
  // Phase 2: rows that finished earlier keep being decoded up to the stop step, as the
  // batched GPU chapters do.
  run_on_threads(decoders.size(), [&](std::size_t i) { decoders[i].advance_to(steps, -1); });

  Generation generation;
  generation.batch = static_cast<int>(prompts.size());
  generation.steps = steps;
  const std::size_t batch = prompts.size();
  const std::size_t step_count = static_cast<std::size_t>(steps);
  const std::size_t V = static_cast<std::size_t>(config.vocab_size);
  generation.tokens.resize(batch * step_count);
  if (keep_logits) generation.logits.resize(step_count * batch * V);
  for (std::size_t row = 0; row < batch; ++row) {
    const RowDecoder& decoder = decoders[decoder_of_row[row]];
    std::copy(decoder.tokens().begin(), decoder.tokens().end(),
              generation.tokens.begin() + static_cast<std::ptrdiff_t>(row * step_count));
    for (std::size_t step = 0; keep_logits && step < step_count; ++step) {
      std::copy_n(
          decoder.logits().begin() + static_cast<std::ptrdiff_t>(step * V), V,
          generation.logits.begin() + static_cast<std::ptrdiff_t>((step * batch + row) * V));
    }
  }
  return generation;
}

double relative_error(const float* actual, const float* expected, std::size_t n) {
  double max_difference = 0.0;
  double max_reference = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(actual[i]) || !std::isfinite(expected[i])) {
      return std::numeric_limits<double>::infinity();
    }
    max_difference =
        std::max(max_difference, std::fabs(static_cast<double>(actual[i]) - expected[i]));
    max_reference = std::max(max_reference, std::fabs(static_cast<double>(expected[i])));
  }
  return max_reference > 0.0 ? max_difference / max_reference : max_difference;
}

}  // namespace ladder::reference
