// common/reference.hpp - the CPU reference: the oracle every test compares against.
//
// fp32 storage, fp64 accumulation, written for clarity and checked against
// Hugging Face transformers' golden data (tests/data/golden_model/, made by
// scripts/make_golden_model.py). Two levels:
//   * operations (layernorm, linear, gelu, attention, argmax ...): what each CUDA
//     kernel is tested against, on fresh random inputs;
//   * the model: a full forward over a sequence and a KV-cached step, and greedy
//     generation with the repository's stopping rule.
//
// Notation: B batch rows, T tokens in a row, C = n_embd, H = n_head, D = C / H,
// V = vocab size, L = cached length. Activations are row-major [rows, features].
// The operations trust their arguments (they are the inner loops of the tests); the
// model and generate() check theirs and throw with a message saying what to fix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/weights.hpp"

namespace ladder::reference {

// ---------------------------------------------------------------- operations

/// out[r, c] = wte[tokens[r], c] + wpe[positions[r], c] for r < rows.
void embedding(const std::int32_t* tokens, const std::int32_t* positions, const float* wte,
               const float* wpe, float* out, int rows, int C);

/// out[r, :] = (x[r, :] - mean) / sqrt(var + eps) * weight + bias  (biased variance).
void layernorm(const float* x, const float* weight, const float* bias, float* out, int rows, int C,
               float eps);

/// out[r, o] = bias[o] + sum_i x[r, i] * weight[i, o], with weight [in, out] (GPT-2's Conv1D
/// layout); a null bias counts as zero.
void linear(const float* x, const float* weight, const float* bias, float* out, int rows,
            int in_features, int out_features);

/// logits[r, v] = sum_c x[r, c] * wte[v, c]  (the tied LM head).
void lm_head(const float* x, const float* wte, float* logits, int rows, int C, int V);

/// GPT-2's GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
/// `out` may be `x`.
void gelu(const float* x, float* out, std::size_t n);

/// out[i] = a[i] + b[i]; `out` may be `a` or `b`.
void add(const float* a, const float* b, float* out, std::size_t n);

/// Causal self-attention over whole sequences. qkv is [B, T, 3C] (q, k, v side by side,
/// head h in columns h*D .. h*D+D-1 of each), out is [B, T, C].
void causal_attention(const float* qkv, float* out, int B, int T, int H, int C);

/// One query per row against L cached positions: q [B, C]; keys and values laid out
/// [B, H, capacity, D] (Hugging Face's cache layout) of which positions 0 .. L-1 are
/// valid and attended; out [B, C].
void decode_attention(const float* q, const float* keys, const float* values, float* out, int B,
                      int L, int capacity, int H, int C);

/// Index of the largest value; ties go to the smallest index and a NaN counts as the
/// largest value (both as torch.argmax). Throws std::invalid_argument when n < 1.
int argmax(const float* values, int n);

// ---------------------------------------------------------------- the model

/// The GPT-2 forward pass on the CPU. Keeps a reference to the weights, which must
/// outlive it.
class Model {
 public:
  /// Throws std::invalid_argument when the config is invalid or the weights do not fill it.
  explicit Model(const Gpt2Weights& weights);
  /// A temporary would dangle: keep the weights in a variable.
  explicit Model(const Gpt2Weights&& weights) = delete;

  const Gpt2Config& config() const { return weights_.config; }

  /// Full forward over one row's tokens (positions 0 .. T-1): logits [T, V].
  /// Throws std::invalid_argument for an empty row, more than n_positions tokens or an
  /// id outside the vocabulary.
  std::vector<float> forward(const std::vector<std::int32_t>& tokens) const;

  /// Keys and values of every past position, per layer: [L, C] each (position-major;
  /// head h in columns h*D .. h*D+D-1). Start from an empty KvCache{}.
  struct KvCache {
    std::vector<std::vector<float>> keys;
    std::vector<std::vector<float>> values;
    int length = 0;
  };

  /// Feeds one token at position cache.length, appends its keys and values,
  /// returns its logits [V]. Computes exactly what forward() computes for that position.
  /// Throws std::invalid_argument for an id outside the vocabulary, a full context
  /// (cache.length == n_positions) or a cache that does not belong to this model.
  std::vector<float> step(KvCache& cache, std::int32_t token) const;

 private:
  const Gpt2Weights& weights_;
};

/// Greedy decoding with the repository's rule: each step every row takes the argmax;
/// a row is finished once it has produced eos_token_id; finished rows keep being
/// decoded; generation stops after the step at which the last row finished, or after
/// max_new_tokens steps. A negative eos_token_id never stops early (exactly
/// max_new_tokens steps).
struct Generation {
  int batch = 0;
  int steps = 0;                     ///< new tokens per row actually generated
  std::vector<std::int32_t> tokens;  ///< [batch, steps] generated ids
  std::vector<float> logits;         ///< [steps, batch, V] when requested, else empty
};

/// Prompts are `batch` rows of equal length. Rows are independent and computed on
/// several threads; identical prompts are computed once. The last generated token is
/// never fed back, so prompt length + max_new_tokens - 1 must not exceed n_positions.
/// Throws std::invalid_argument on empty or ragged prompts, ids outside the
/// vocabulary or a request longer than the context.
Generation generate(const Gpt2Weights& weights,
                    const std::vector<std::vector<std::int32_t>>& prompts, int max_new_tokens,
                    int eos_token_id, bool keep_logits);

/// Relative error used by every logits comparison: max |a - ref| / max |ref| over n values
/// (max |a - ref| when ref is all zeros). Any NaN or infinity in either input gives +inf,
/// so a broken result can never pass a tolerance.
double relative_error(const float* actual, const float* expected, std::size_t n);

}  // namespace ladder::reference
