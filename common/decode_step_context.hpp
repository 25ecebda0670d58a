// common/decode_step_context.hpp - a step context whose products run on the decode
// matmul kernels (kernels/decode_matmul.cuh), and those products timed alone.
//
// The shape of StepContext (step_context.hpp) - a stream and what multiplies on it -
// with cuBLASLt replaced by the decode kernels: the model's matrix weights packed once,
// at construction, into the layout the kernels stream, and the split-sum workspace the
// kernels share on this one stream.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/cuda_stream.hpp"
#include "common/device_allocator.hpp"
#include "common/device_model.hpp"
#include "common/step_context.hpp"
#include "kernels/decode_matmul.cuh"
#include "kernels/sampling.cuh"

namespace ladder {

class DecodeStepContext {
 public:
  /// Packs `model`'s weights (PackedDecodeModel: as many bytes again as the matrices)
  /// and prepares the workspace; allow_tf32 selects the TF32 tensor-core kernels;
  /// `launch` how every product waits for the kernel before it (DecodeLaunch).
  DecodeStepContext(const DeviceModel& model, bool allow_tf32,
                    DecodeLaunch launch = DecodeLaunch::kAfterPrevious)
      : packed_(model),
        precision_(allow_tf32 ? DecodePrecision::kTf32 : DecodePrecision::kFp32),
        launch_(launch) {}

  cudaStream_t stream() const { return stream_.get(); }
  /// How the kernels between the products (LayerNorm, attention) launch: the products'
  /// DecodeLaunch where the device runs programmatic launches, otherwise plainly
  /// (kernels/programmatic_launch.cuh).
  DecodeLaunch launch() const {
    return workspace_.programmatic_launches() ? launch_ : DecodeLaunch::kAfterPrevious;
  }

  /// The packed matrix weights of layer `index` (the biases stay in the DeviceModel).
  PackedDecodeModel::Layer layer(int index) const { return packed_.layer(index); }

  /// out = epilogue(x W + bias), W packed (layer()), on this step's stream. The kernels
  /// take at most kDecodeMaxRows rows; more (a prefill's B T) run in slices of that
  /// many rows, each streaming W once.
  void linear(const float* x, const float* packed_weight, const float* bias, float* out, int rows,
              int in_features, int out_features, DecodeEpilogue epilogue) {
    for (int first = 0; first < rows; first += kDecodeMaxRows)
      launch_decode_matmul(x + offset(first, in_features), packed_weight, bias,
                           out + offset(first, out_features),
                           std::min(kDecodeMaxRows, rows - first), in_features, out_features,
                           epilogue, precision_, workspace_, stream_.get(), launch_);
  }

  /// The tied LM head over x [rows, C]: logits [rows, V] (null: not written) and the
  /// argmax's first pass, candidate_values and candidate_indices
  /// [rows, decode_lm_head_candidates(V)]. Returns the candidates as the argmax step
  /// takes them.
  ArgmaxCandidates lm_head(const float* x, float* logits, float* candidate_values,
                           std::int32_t* candidate_indices, int rows, int C, int V) {
    const int candidates = decode_lm_head_candidates(V);
    for (int first = 0; first < rows; first += kDecodeMaxRows)
      launch_decode_lm_head(x + offset(first, C), packed_.lm_head_weight(),
                            logits != nullptr ? logits + offset(first, V) : nullptr,
                            candidate_values + offset(first, candidates),
                            candidate_indices + offset(first, candidates),
                            std::min(kDecodeMaxRows, rows - first), C, V, precision_, workspace_,
                            stream_.get(), launch_);
    return ArgmaxCandidates{candidate_values, candidate_indices, candidates};
  }

 private:
  static std::size_t offset(int row, int columns) {
    return static_cast<std::size_t>(row) * static_cast<std::size_t>(columns);
  }

  CudaStream stream_;
  PackedDecodeModel packed_;
  /// One per stream: two products running at once on one would mix their split sums.
  DecodeMatmulWorkspace workspace_;
  DecodePrecision precision_;
  DecodeLaunch launch_;
};

/// The 49 products of one GPT-2 decode step at `batch` rows through the decode kernels,
/// as a chapter on DecodeStepContext runs them: c_attn + bias, c_proj + bias + residual,
/// c_fc + bias + GELU, c_proj + bias + residual, and the LM head's candidates (no
/// logits), on StepProductScratch, back to back (step_product_seconds).
inline double packed_decode_matmul_seconds(const DeviceModel& model, DecodeStepContext& step,
                                           DeviceAllocator& allocator, int batch) {
  const Gpt2Config& config = model.config();
  const int C = config.n_embd;
  const int V = config.vocab_size;
  const StepProductScratch scratch(allocator, config, batch, step.stream());
  const std::size_t candidates =
      static_cast<std::size_t>(batch) * static_cast<std::size_t>(decode_lm_head_candidates(V));
  const TypedBuffer<float> candidate_values(allocator, candidates, step.stream());
  const TypedBuffer<std::int32_t> candidate_indices(allocator, candidates, step.stream());
  return step_product_seconds(step.stream(), [&] {
    for (int layer_index = 0; layer_index < config.n_layer; ++layer_index) {
      const DeviceLayer layer = model.layer(layer_index);
      const PackedDecodeModel::Layer packed = step.layer(layer_index);
      step.linear(scratch.normed, packed.qkv_weight, layer.qkv_bias, scratch.qkv, batch, C, 3 * C,
                  DecodeEpilogue::kBias);
      step.linear(scratch.attended, packed.attn_proj_weight, layer.attn_proj_bias,
                  scratch.projected, batch, C, C, DecodeEpilogue::kBiasResidual);
      step.linear(scratch.normed, packed.fc_weight, layer.fc_bias, scratch.expanded, batch, C,
                  4 * C, DecodeEpilogue::kBiasGelu);
      step.linear(scratch.expanded, packed.mlp_proj_weight, layer.mlp_proj_bias, scratch.projected,
                  batch, 4 * C, C, DecodeEpilogue::kBiasResidual);
    }
    step.lm_head(scratch.normed, nullptr, candidate_values, candidate_indices, batch, C, V);
  });
}

}  // namespace ladder
