// common/bfloat16_decode_step_context.hpp - a step context whose products run on the bf16
// decode matmuls (kernels/decode_matmul_bf16.cuh), and those products timed alone.
//
// DecodeStepContext's shape (decode_step_context.hpp) in bf16: a stream and what
// multiplies on it. The weights it multiplies are the BfloatDeviceModel's, rounded once
// and packed at load; the context keeps the split-sum workspace the kernels share on its
// one stream.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/bfloat16_device_model.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_stream.hpp"
#include "common/device_allocator.hpp"
#include "common/step_context.hpp"  // step_product_seconds
#include "kernels/decode_matmul_bf16.cuh"
#include "kernels/sampling.cuh"

namespace ladder {

class BfloatDecodeStepContext {
 public:
  /// `launch` how every product waits for the kernel before it (DecodeLaunch), as in
  /// DecodeStepContext.
  explicit BfloatDecodeStepContext(DecodeLaunch launch = DecodeLaunch::kAfterPrevious)
      : launch_(launch) {}

  cudaStream_t stream() const { return stream_.get(); }
  /// How the kernels between the products (LayerNorm, attention) launch: the products'
  /// DecodeLaunch where the device runs programmatic launches, otherwise plainly
  /// (kernels/programmatic_launch.cuh).
  DecodeLaunch launch() const {
    return workspace_.programmatic_launches() ? launch_ : DecodeLaunch::kAfterPrevious;
  }

  /// out = bf16(epilogue(x W + bias)), W packed (BfloatDeviceModel::layer()), on this
  /// step's stream.
  void linear(const __nv_bfloat16* x, const __nv_bfloat16* packed_weight, const __nv_bfloat16* bias,
              __nv_bfloat16* out, int rows, int in_features, int out_features,
              DecodeEpilogue epilogue) {
    for_each_row_slice(rows, [&](std::size_t first, int count) {
      launch_decode_matmul_bf16(x + first * in_features, packed_weight, bias,
                                out + first * out_features, count, in_features, out_features,
                                epilogue, workspace_, stream_.get(), launch_);
    });
  }

  /// The plan the products of `rows` rows (at most kDecodeMaxRows) of [K, N] run with on
  /// this context (plan_decode_matmul_bf16): the persistent kernel runs the same blocks.
  DecodeMatmulPlan plan(int rows, int K, int N) {
    return plan_decode_matmul_bf16(rows, K, N, workspace_);
  }

  /// The tied LM head over x [rows, C] bf16: fp32 logits [rows, V] (null: not written)
  /// and the argmax's first pass on them, candidate_values and candidate_indices
  /// [rows, decode_lm_head_candidates(V)]. Returns the candidates as the argmax step
  /// takes them.
  ArgmaxCandidates lm_head(const __nv_bfloat16* x, const __nv_bfloat16* packed_wte, float* logits,
                           float* candidate_values, std::int32_t* candidate_indices, int rows,
                           int C, int V) {
    const int candidates = decode_lm_head_candidates(V);
    for_each_row_slice(rows, [&](std::size_t first, int count) {
      launch_decode_lm_head_bf16(
          x + first * C, packed_wte, logits != nullptr ? logits + first * V : nullptr,
          candidate_values + first * candidates, candidate_indices + first * candidates, count, C,
          V, workspace_, stream_.get(), launch_);
    });
    return ArgmaxCandidates{candidate_values, candidate_indices, candidates};
  }

 private:
  /// The kernels take at most kDecodeMaxRows rows; more (a prefill's B T) run in slices
  /// of that many, each streaming the weight once: launch(first row, rows in the slice).
  template <typename Launch>
  static void for_each_row_slice(int rows, const Launch& launch) {
    for (int first = 0; first < rows; first += kDecodeMaxRows)
      launch(static_cast<std::size_t>(first), std::min(kDecodeMaxRows, rows - first));
  }

  CudaStream stream_;
  /// One per stream: two products running at once on one would mix their split sums.
  DecodeMatmulWorkspace workspace_;
  DecodeLaunch launch_;
};

/// The 49 bf16 products of one GPT-2 decode step at `batch` rows, as a chapter on
/// BfloatDecodeStepContext runs them (c_attn + bias, c_proj + bias + residual, c_fc +
/// bias + GELU, c_proj + bias + residual per layer, the LM head's candidates without
/// logits), on zeroed bf16 scratch, back to back (step_product_seconds).
inline double bfloat16_decode_matmul_seconds(const BfloatDeviceModel& model,
                                             BfloatDecodeStepContext& step,
                                             DeviceAllocator& allocator, int batch) {
  const Gpt2Config& config = model.config();
  const int C = config.n_embd;
  const int V = config.vocab_size;
  const cudaStream_t stream = step.stream();
  const std::size_t rows = static_cast<std::size_t>(batch);
  const std::size_t c = static_cast<std::size_t>(C);
  // One zeroed block holds the inputs and outputs: normed [B, C], attended [B, C],
  // projected [B, C], qkv [B, 3C], expanded [B, 4C].
  const TypedBuffer<__nv_bfloat16> scratch(allocator, rows * 10 * c, stream);
  CUDA_CHECK(cudaMemsetAsync(scratch, 0, scratch.bytes(), stream));
  __nv_bfloat16* normed = scratch;
  __nv_bfloat16* attended = normed + rows * c;
  __nv_bfloat16* projected = attended + rows * c;
  __nv_bfloat16* qkv = projected + rows * c;
  __nv_bfloat16* expanded = qkv + rows * 3 * c;
  const std::size_t candidates = rows * static_cast<std::size_t>(decode_lm_head_candidates(V));
  const TypedBuffer<float> candidate_values(allocator, candidates, stream);
  const TypedBuffer<std::int32_t> candidate_indices(allocator, candidates, stream);
  return step_product_seconds(stream, [&] {
    for (int layer_index = 0; layer_index < config.n_layer; ++layer_index) {
      const BfloatDeviceLayer layer = model.layer(layer_index);
      step.linear(normed, layer.qkv_weight, layer.qkv_bias, qkv, batch, C, 3 * C,
                  DecodeEpilogue::kBias);
      step.linear(attended, layer.attn_proj_weight, layer.attn_proj_bias, projected, batch, C, C,
                  DecodeEpilogue::kBiasResidual);
      step.linear(normed, layer.fc_weight, layer.fc_bias, expanded, batch, C, 4 * C,
                  DecodeEpilogue::kBiasGelu);
      step.linear(expanded, layer.mlp_proj_weight, layer.mlp_proj_bias, projected, batch, 4 * C, C,
                  DecodeEpilogue::kBiasResidual);
    }
    step.lm_head(normed, model.lm_head_weight(), nullptr, candidate_values, candidate_indices,
                 batch, C, V);
  });
}

}  // namespace ladder
