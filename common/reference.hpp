// common/reference.hpp - the CPU reference: the oracle every test compares against.
//
// fp32 storage, fp64 accumulation, written for clarity and checked against
// Hugging Face transformers' golden data (tests/data/golden_model/, made by
// scripts/make_golden_model.py). A bf16 mode (see "bf16 mode" below) rounds to bf16
// wherever a bf16 kernel stores a tensor: the oracle of the mixed-precision chapter.
// Two levels:
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
#include <memory>
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

// ---------------------------------------------------------------- bf16 mode
//
// Model(weights, Precision::bf16) runs the same forward as fp32 mode, through the same
// code: every point where a kernel stores a tensor to memory calls one rounding function,
// the identity in fp32 mode (so fp32 results are bit for bit what they were) and
// round-to-nearest-even to bf16 (common/bfloat16.hpp) in bf16 mode. Between store points
// nothing is rounded: sums accumulate in double here (fp32 in the kernels), LayerNorm's
// mean and variance and softmax's maximum, exponentials and sum are never stored.
//
// The contract the bf16 kernels follow; a tensor not listed is not stored in bf16:
//   R1 weights     every parameter, once, at load: wte (also the tied LM head), wpe,
//                  every matrix and bias, the LayerNorm weights and biases.
//   R2 embedding   x = bf16(wte[token] + wpe[position]): the residual stream is bf16.
//   R3 LayerNorm   ln_1, ln_2 and ln_f outputs: bf16(LN(x)), statistics of the bf16 x.
//   R4 qkv         bf16(x W + b), the bias added before the one rounding. The KV cache
//                  holds exactly these bf16 keys and values; the query is bf16 too.
//   R5 attention   the output, bf16(softmax(q k^T / sqrt(D)) v); scores and weights are
//                  never stored.
//   R6 residual    after each sub-block, x = bf16(x + (a W + b)): the projection is
//                  added to the residual in the matmul's epilogue and only the sum is
//                  stored (rounded once), never the projection alone.
//   R7 MLP hidden  bf16(gelu(x W + b)): bias and GELU in the epilogue, rounded once.
//   -- logits      fp32: the LM head accumulates bf16 inputs and weights and stores
//                  floats, and the argmax runs on those fp32 logits.
// Why the residual stream is bf16 too: it is stored between kernels like any activation,
// and halving its bytes costs little accuracy: most of bf16's error comes from R1. On the
// golden model's teacher-forced sequences, the median relative logit error against fp32
// is 0.009-0.010 with every point above, 0.008-0.009 with the residual kept in fp32 and
// 0.007 with R1 alone (the last two measured once, by editing this reference).
// A kernel test in bf16 feeds an operation bf16-valued inputs (round_to_bfloat16) and
// compares with round_to_bfloat16(reference op) where the list stores the result.

/// What a Model stores its tensors in: fp32, or bf16 at the points R1-R7 above.
enum class Precision { fp32, bf16 };

// ---------------------------------------------------------------- the model

/// The GPT-2 forward pass on the CPU. In fp32 mode it keeps a reference to the weights,
/// which must outlive it; in bf16 mode it keeps its own rounded copy (R1).
class Model {
 public:
  /// fp32 mode. Throws std::invalid_argument when the config is invalid or the weights
  /// do not fill it.
  explicit Model(const Gpt2Weights& weights);
  /// fp32 or bf16 mode; throws as the fp32 constructor.
  Model(const Gpt2Weights& weights, Precision precision);
  /// A temporary would dangle: keep the weights in a variable.
  explicit Model(const Gpt2Weights&& weights) = delete;
  Model(const Gpt2Weights&& weights, Precision precision) = delete;

  const Gpt2Config& config() const { return weights_.config; }
  Precision precision() const { return precision_; }
  /// The parameters the forward uses: the caller's in fp32 mode, rounded to bf16 in bf16.
  const Gpt2Weights& weights() const { return weights_; }

  /// Full forward over one row's tokens (positions 0 .. T-1): logits [T, V].
  /// Throws std::invalid_argument for an empty row, more than n_positions tokens or an
  /// id outside the vocabulary.
  std::vector<float> forward(const std::vector<std::int32_t>& tokens) const;

  /// Keys and values of every past position, per layer: [L, C] each (position-major;
  /// head h in columns h*D .. h*D+D-1); bf16 values in bf16 mode (R4). Start from an
  /// empty KvCache{}.
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
  std::shared_ptr<const Gpt2Weights> rounded_weights_;  ///< bf16 mode only
  const Gpt2Weights& weights_;
  Precision precision_;
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

/// The same with a model built once (for example in bf16 mode); throws as above.
Generation generate(const Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
                    int max_new_tokens, int eos_token_id, bool keep_logits);

/// Relative error used by every logits comparison: max |a - ref| / max |ref| over n values
/// (max |a - ref| when ref is all zeros). Any NaN or infinity in either input gives +inf,
/// so a broken result can never pass a tolerance.
double relative_error(const float* actual, const float* expected, std::size_t n);

}  // namespace ladder::reference
