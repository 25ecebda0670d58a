// common/step_context.hpp - what a decode step runs on, and the step's products timed
// alone.
//
// Every chapter hands a StepContext to each function of its step (prefill, decode
// step, layers, LM head): the stream the step's kernels are enqueued on and the
// cuBLASLt object that multiplies on that stream. Chapters 01-05 keep one; chapter 06
// keeps two and alternates, without changing any function that takes one.
#pragma once

#include <cuda_runtime.h>

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

/// The yardstick for everything in a step that is not a matrix product: the 49
/// products of one GPT-2 decode step (four per layer and the tied LM head) at `batch`
/// rows, through `step` (its cuBLASLt object and stream, as the chapter's loop uses
/// them), with the model's weights and the chapter's epilogues (the MLP's first
/// product takes `mlp_epilogue`, the others kBias), on zeroed scratch activations from
/// `allocator`, back to back: nothing else runs between them. Returns the median of 20
/// timed repeats after 3 warm-up repeats, in seconds per step.
inline double decode_matmul_seconds(const DeviceModel& model, StepContext& step,
                                    DeviceAllocator& allocator, int batch,
                                    LinearEpilogue mlp_epilogue) {
  constexpr int kWarmupRepeats = 3;
  constexpr int kTimedRepeats = 20;
  const Gpt2Config& config = model.config();
  const int C = config.n_embd;
  const std::size_t rows = static_cast<std::size_t>(batch);
  const cudaStream_t stream = step.stream();
  const TypedBuffer<float> normed(allocator, rows * C, stream);
  const TypedBuffer<float> qkv(allocator, rows * 3 * C, stream);
  const TypedBuffer<float> attended(allocator, rows * C, stream);
  const TypedBuffer<float> projected(allocator, rows * C, stream);
  const TypedBuffer<float> expanded(allocator, rows * 4 * C, stream);
  const TypedBuffer<float> logits(allocator, rows * config.vocab_size, stream);
  // The products' inputs, zeroed so that they read defined numbers.
  CUDA_CHECK(cudaMemsetAsync(normed, 0, normed.bytes(), stream));
  CUDA_CHECK(cudaMemsetAsync(attended, 0, attended.bytes(), stream));
  CUDA_CHECK(cudaMemsetAsync(expanded, 0, expanded.bytes(), stream));
  const auto step_matmuls = [&] {
    for (int layer_index = 0; layer_index < config.n_layer; ++layer_index) {
      const DeviceLayer layer = model.layer(layer_index);
      step.linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, batch, C, 3 * C,
                  LinearEpilogue::kBias);
      step.linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, batch, C, C,
                  LinearEpilogue::kBias);
      step.linear(normed, layer.fc_weight, layer.fc_bias, expanded, batch, C, 4 * C, mlp_epilogue);
      step.linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, batch, 4 * C, C,
                  LinearEpilogue::kBias);
    }
    step.lm_head(normed, model.token_embedding(), logits, batch, C, config.vocab_size);
  };
  return median_stream_seconds(stream, kWarmupRepeats, kTimedRepeats, step_matmuls);
}

}  // namespace ladder
