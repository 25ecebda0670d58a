// kernels/embedding_bf16.cu - token + position embedding in bf16, one thread per pack of
// 8 columns (16 bytes of each of the two rows read, 16 bytes written).
#include "kernels/embedding_bf16.cuh"

#include "common/cuda_check.hpp"
#include "kernels/bfloat16_packs.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

namespace {

constexpr int kEmbeddingThreads = 256;

// Math:   out[r, c] = bf16(wte[tokens[r], c] + wpe[p(r), c]) (fp32 sum), p(r) = positions[r]
//         when positions is given, else cursor->position.
// Shapes: tokens [rows], positions [rows] or null, cursor [1] or null, wte [V, C],
//         wpe [n_positions, C], out [rows, C], all bf16 but the ids; C % kWidth == 0.
// Grid:   a grid-stride loop over the rows * C / kWidth packs of out; pack i is row
//         i / (C / kWidth), columns kWidth * (i % (C / kWidth)) onwards.
// Promises (kWidth = 8): LDG.E.128 STG.E.128
template <int kWidth>
__global__ void embedding_bf16_kernel(const std::int32_t* tokens, const std::int32_t* positions,
                                      const DecodePosition* cursor, const __nv_bfloat16* wte,
                                      const __nv_bfloat16* wpe, __nv_bfloat16* out, int rows,
                                      int C) {
  const std::size_t packs_per_row = static_cast<std::size_t>(C / kWidth);
  const std::size_t total = static_cast<std::size_t>(rows) * packs_per_row;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int row = static_cast<int>(i / packs_per_row);
    const std::size_t pack = i % packs_per_row;
    const int position = positions != nullptr ? positions[row] : cursor->position;
    const PackedFloats<kWidth> token_part =
        load_bfloat16_pack<kWidth>(wte + static_cast<std::size_t>(tokens[row]) * C, pack);
    const PackedFloats<kWidth> position_part =
        load_bfloat16_pack<kWidth>(wpe + static_cast<std::size_t>(position) * C, pack);
    PackedFloats<kWidth> sum;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sum.values[k] = token_part.values[k] + position_part.values[k];
    store_bfloat16_pack<kWidth>(out + static_cast<std::size_t>(row) * C, pack, sum);
  }
}

void launch_embedding_bf16_kernel(const std::int32_t* tokens, const std::int32_t* positions,
                                  const DecodePosition* cursor, const __nv_bfloat16* wte,
                                  const __nv_bfloat16* wpe, __nv_bfloat16* out, int rows, int C,
                                  cudaStream_t stream) {
  const bool packed = C % kBfloatPack == 0 && launch_checks::is_16_byte_aligned(wte) &&
                      launch_checks::is_16_byte_aligned(wpe) &&
                      launch_checks::is_16_byte_aligned(out);
  with_bfloat16_width(packed, [&](auto width) {
    constexpr int kWidth = decltype(width)::value;
    const std::size_t packs = static_cast<std::size_t>(rows) * static_cast<std::size_t>(C / kWidth);
    const unsigned int blocks = launch_checks::grid_stride_blocks(packs, kEmbeddingThreads);
    embedding_bf16_kernel<kWidth><<<blocks, kEmbeddingThreads, 0, stream>>>(
        tokens, positions, cursor, wte, wpe, out, rows, C);
  });
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace

void launch_embedding_bf16(const std::int32_t* tokens, const std::int32_t* positions,
                           const __nv_bfloat16* wte, const __nv_bfloat16* wpe, __nv_bfloat16* out,
                           int rows, int C, cudaStream_t stream) {
  constexpr const char* kName = "launch_embedding_bf16";
  launch_checks::require_not_null(
      kName,
      {{"tokens", tokens}, {"positions", positions}, {"wte", wte}, {"wpe", wpe}, {"out", out}});
  launch_checks::require_positive(kName, {{"rows", rows}, {"C", C}});
  launch_embedding_bf16_kernel(tokens, positions, nullptr, wte, wpe, out, rows, C, stream);
}

void launch_embedding_at_cursor_bf16(const std::int32_t* tokens, const DecodePosition* cursor,
                                     const __nv_bfloat16* wte, const __nv_bfloat16* wpe,
                                     __nv_bfloat16* out, int B, int C, cudaStream_t stream) {
  constexpr const char* kName = "launch_embedding_at_cursor_bf16";
  launch_checks::require_not_null(
      kName, {{"tokens", tokens}, {"cursor", cursor}, {"wte", wte}, {"wpe", wpe}, {"out", out}});
  launch_checks::require_positive(kName, {{"B", B}, {"C", C}});
  launch_embedding_bf16_kernel(tokens, nullptr, cursor, wte, wpe, out, B, C, stream);
}

}  // namespace ladder
