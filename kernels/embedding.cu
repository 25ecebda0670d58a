// kernels/embedding.cu - token embedding + position embedding, fp32 or bf16, one thread
// per packed group of columns.
//
// The operation reads two rows and writes one: pure memory traffic. The kernel
// therefore only makes sure that the accesses are coalesced (consecutive threads
// read consecutive columns of the same row) and 16 bytes wide where the shapes allow.
#include "kernels/embedding.cuh"

#include "common/cuda_check.hpp"
#include "kernels/bfloat16_packs.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

namespace {

constexpr int kEmbeddingThreads = 256;

// Math:   out[r, c] = wte[tokens[r], c] + wpe[p(r), c], where p(r) = positions[r] when
//         positions is given, else cursor->position when a cursor is given, else
//         first_position + r % tokens_per_row (rows are a [B, T] block flattened,
//         T = tokens_per_row, so r % T is the token's t).
// Shapes: tokens [rows], positions [rows] or null, cursor [1] or null, wte [V, C],
//         wpe [n_positions, C], out [rows, C]; C % kWidth == 0.
// Grid:   a grid-stride loop over the rows * C / kWidth packs of out; pack i is
//         row i / (C / kWidth), columns kWidth * (i % (C / kWidth)) onwards.
// The body of both kernels below, for float or bf16 tables (bf16: the two values
// widened, added in fp32, the sum rounded once, common/reference.hpp R2).
template <typename Element, int kWidth>
__device__ __forceinline__ void embed_rows(const std::int32_t* tokens,
                                           const std::int32_t* positions,
                                           const DecodePosition* cursor, int first_position,
                                           int tokens_per_row, const Element* wte,
                                           const Element* wpe, Element* out, int rows, int C) {
  const std::size_t packs_per_row = static_cast<std::size_t>(C / kWidth);
  const std::size_t total = static_cast<std::size_t>(rows) * packs_per_row;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int row = static_cast<int>(i / packs_per_row);
    const std::size_t pack = i % packs_per_row;
    const int token = tokens[row];
    const int position = positions != nullptr ? positions[row]
                         : cursor != nullptr  ? cursor->position
                                              : first_position + row % tokens_per_row;
    const PackedFloats<kWidth> token_part =
        load_pack<kWidth>(wte + static_cast<std::size_t>(token) * C, pack);
    const PackedFloats<kWidth> position_part =
        load_pack<kWidth>(wpe + static_cast<std::size_t>(position) * C, pack);
    PackedFloats<kWidth> sum;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sum.values[k] = token_part.values[k] + position_part.values[k];
    store_pack<kWidth>(out + static_cast<std::size_t>(row) * C, pack, sum);
  }
}

// Promises (kWidth = 4): LDG.E.128 STG.E.128
template <int kWidth>
__global__ void embedding_kernel(const std::int32_t* tokens, const std::int32_t* positions,
                                 const DecodePosition* cursor, int first_position,
                                 int tokens_per_row, const float* wte, const float* wpe, float* out,
                                 int rows, int C) {
  embed_rows<float, kWidth>(tokens, positions, cursor, first_position, tokens_per_row, wte, wpe,
                            out, rows, C);
}

// Math:   out[r, c] = bf16(wte[tokens[r], c] + wpe[p(r), c]), the sum in fp32, p(r) as
//         embedding_kernel's (positions, else the cursor).
// Shapes: as embedding_kernel's, the tables and out bf16; C % kWidth == 0 (8 a pack).
// Grid:   as embedding_kernel's, packs of 8 bf16 (16 bytes).
// Promises (kWidth = 8): LDG.E.128 STG.E.128
template <int kWidth>
__global__ void embedding_bf16_kernel(const std::int32_t* tokens, const std::int32_t* positions,
                                      const DecodePosition* cursor, const __nv_bfloat16* wte,
                                      const __nv_bfloat16* wpe, __nv_bfloat16* out, int rows,
                                      int C) {
  embed_rows<__nv_bfloat16, kWidth>(tokens, positions, cursor, 0, 1, wte, wpe, out, rows, C);
}

// Every launcher ends here: one place picks the packed or the scalar path.
void launch_embedding_kernel(const std::int32_t* tokens, const std::int32_t* positions,
                             const DecodePosition* cursor, int first_position, int tokens_per_row,
                             const float* wte, const float* wpe, float* out, int rows, int C,
                             cudaStream_t stream) {
  const bool packed = C % 4 == 0 && launch_checks::is_16_byte_aligned(wte) &&
                      launch_checks::is_16_byte_aligned(wpe) &&
                      launch_checks::is_16_byte_aligned(out);
  with_width(packed, [&](auto width) {
    constexpr int kWidth = decltype(width)::value;
    const std::size_t packs = static_cast<std::size_t>(rows) * static_cast<std::size_t>(C / kWidth);
    const unsigned int blocks = launch_checks::grid_stride_blocks(packs, kEmbeddingThreads);
    embedding_kernel<kWidth><<<blocks, kEmbeddingThreads, 0, stream>>>(
        tokens, positions, cursor, first_position, tokens_per_row, wte, wpe, out, rows, C);
  });
  CUDA_CHECK_LAUNCH(stream);
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

void launch_embedding(const std::int32_t* tokens, const std::int32_t* positions, const float* wte,
                      const float* wpe, float* out, int rows, int C, cudaStream_t stream) {
  constexpr const char* kName = "launch_embedding";
  launch_checks::require_not_null(
      kName,
      {{"tokens", tokens}, {"positions", positions}, {"wte", wte}, {"wpe", wpe}, {"out", out}});
  launch_checks::require_positive(kName, {{"rows", rows}, {"C", C}});
  launch_embedding_kernel(tokens, positions, nullptr, 0, 1, wte, wpe, out, rows, C, stream);
}

void launch_sequence_embedding(const std::int32_t* tokens, const float* wte, const float* wpe,
                               float* out, int B, int T, int first_position, int C,
                               cudaStream_t stream) {
  constexpr const char* kName = "launch_sequence_embedding";
  launch_checks::require_not_null(kName,
                                  {{"tokens", tokens}, {"wte", wte}, {"wpe", wpe}, {"out", out}});
  launch_checks::require_positive(kName, {{"B", B}, {"T", T}, {"C", C}});
  launch_checks::require(first_position >= 0, kName, "first_position must be >= 0");
  launch_checks::require(static_cast<long long>(B) * T <= 0x7fffffff, kName,
                         "B * T must fit in an int");
  launch_embedding_kernel(tokens, nullptr, nullptr, first_position, T, wte, wpe, out, B * T, C,
                          stream);
}

void launch_embedding_at_cursor(const std::int32_t* tokens, const DecodePosition* cursor,
                                const float* wte, const float* wpe, float* out, int B, int C,
                                cudaStream_t stream) {
  constexpr const char* kName = "launch_embedding_at_cursor";
  launch_checks::require_not_null(
      kName, {{"tokens", tokens}, {"cursor", cursor}, {"wte", wte}, {"wpe", wpe}, {"out", out}});
  launch_checks::require_positive(kName, {{"B", B}, {"C", C}});
  launch_embedding_kernel(tokens, nullptr, cursor, 0, 1, wte, wpe, out, B, C, stream);
}

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
