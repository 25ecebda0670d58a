// common/step_context.hpp - what a decode step runs on, and the step's products timed
// alone.
//
// Every chapter hands a StepContext to each function of its step (prefill, decode
// step, layers, LM head): the stream the step's kernels are enqueued on and the
// cuBLASLt object that multiplies on that stream. Chapters 01-05 keep one; chapter 06
// keeps two and alternates, without changing any function that takes one.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/cuda_stream.hpp"
#include "common/device_allocator.hpp"
#include "common/device_model.hpp"
#include "kernels/matmul.cuh"

namespace ladder {

class StepContext {
 public:
  StepContext(DeviceAllocator& allocator, bool allow_tf32)
      : matmul_workspace_(allocator, LtMatmul::kRecommendedWorkspaceBytes, stream_.get()),
        matmul_(matmul_workspace_.as<void>(), matmul_workspace_.bytes(), allow_tf32) {}

  cudaStream_t stream() const { return stream_.get(); }

  /// out = x W + b (kBias) or gelu(x W + b) (kBiasGelu), one cuBLASLt call on this
  /// step's stream: the epilogue is applied in registers before the product is stored,
  /// as PyTorch's addmm adds the bias for Hugging Face's Conv1D (one launch, or two
  /// when cuBLASLt splits the inner dimension and sums the slices in a second kernel).
  void linear(const float* x, const float* weight, const float* bias, float* out, int rows,
              int in_features, int out_features, LinearEpilogue epilogue) {
    matmul_.linear(x, weight, bias, out, rows, in_features, out_features, epilogue, stream_.get());
  }

  /// logits = x wte^T, the tied LM head, on this step's stream.
  void lm_head(const float* x, const float* wte, float* logits, int rows, int C, int V) {
    matmul_.lm_head(x, wte, logits, rows, C, V, stream_.get());
  }

 private:
  CudaStream stream_;
  /// Its own cuBLASLt workspace, set explicitly: cuBLAS results are bitwise reproducible
  /// only when no two streams share one.
  DeviceBuffer matmul_workspace_;
  LtMatmul matmul_;
};

/// Scratch activations for one GPT-2 decode step's products at `rows` rows, from
/// `allocator`, the products' inputs (normed, attended, expanded) and the residual
/// stream a fused residual epilogue reads (projected) zeroed so that they read defined
/// numbers: what the "matmuls alone" timings multiply.
struct StepProductScratch {
  StepProductScratch(DeviceAllocator& allocator, const Gpt2Config& config, std::size_t rows,
                     cudaStream_t stream)
      : normed(allocator, rows * config.n_embd, stream),
        qkv(allocator, rows * 3 * config.n_embd, stream),
        attended(allocator, rows * config.n_embd, stream),
        projected(allocator, rows * config.n_embd, stream),
        expanded(allocator, rows * 4 * config.n_embd, stream),
        logits(allocator, rows * config.vocab_size, stream) {
    CUDA_CHECK(cudaMemsetAsync(normed, 0, normed.bytes(), stream));
    CUDA_CHECK(cudaMemsetAsync(attended, 0, attended.bytes(), stream));
    CUDA_CHECK(cudaMemsetAsync(projected, 0, projected.bytes(), stream));
    CUDA_CHECK(cudaMemsetAsync(expanded, 0, expanded.bytes(), stream));
  }
  TypedBuffer<float> normed;     ///< [rows, C]
  TypedBuffer<float> qkv;        ///< [rows, 3C]
  TypedBuffer<float> attended;   ///< [rows, C]
  TypedBuffer<float> projected;  ///< [rows, C]
  TypedBuffer<float> expanded;   ///< [rows, 4C]
  TypedBuffer<float> logits;     ///< [rows, V]
};

/// `step_products` (one step's products, enqueued on `stream`) timed back to back:
/// the median of 20 timed repeats after 3 warm-up repeats, in seconds per step.
template <typename StepProducts>
double step_product_seconds(cudaStream_t stream, const StepProducts& step_products) {
  constexpr int kWarmupRepeats = 3;
  constexpr int kTimedRepeats = 20;
  return median_stream_seconds(stream, kWarmupRepeats, kTimedRepeats, step_products);
}

/// The yardstick for everything in a step that is not a matrix product: the 49
/// products of one GPT-2 decode step (four per layer and the tied LM head) at `batch`
/// rows, through `step` (its cuBLASLt object and stream, as the chapter's loop uses
/// them), with the model's weights and the chapter's epilogues (the MLP's first
/// product takes `mlp_epilogue`, the others kBias), on StepProductScratch, back to
/// back: nothing else runs between them (step_product_seconds).
inline double decode_matmul_seconds(const DeviceModel& model, StepContext& step,
                                    DeviceAllocator& allocator, int batch,
                                    LinearEpilogue mlp_epilogue) {
  const Gpt2Config& config = model.config();
  const int C = config.n_embd;
  const StepProductScratch scratch(allocator, config, batch, step.stream());
  return step_product_seconds(step.stream(), [&] {
    for (int layer_index = 0; layer_index < config.n_layer; ++layer_index) {
      const DeviceLayer layer = model.layer(layer_index);
      step.linear(scratch.normed, layer.qkv_weight, layer.qkv_bias, scratch.qkv, batch, C, 3 * C,
                  LinearEpilogue::kBias);
      step.linear(scratch.attended, layer.attn_proj_weight, layer.attn_proj_bias, scratch.projected,
                  batch, C, C, LinearEpilogue::kBias);
      step.linear(scratch.normed, layer.fc_weight, layer.fc_bias, scratch.expanded, batch, C, 4 * C,
                  mlp_epilogue);
      step.linear(scratch.expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, scratch.projected,
                  batch, 4 * C, C, LinearEpilogue::kBias);
    }
    step.lm_head(scratch.normed, model.token_embedding(), scratch.logits, batch, C,
                 config.vocab_size);
  });
}

}  // namespace ladder
