// kernels/attention.cu - causal self-attention (whole sequences) and decode attention
// (one query against the KV cache), both with an online softmax; plus the writes into
// the KV cache (one step's keys and values, or a whole prompt's).
//
// Notation and layouts: see attention.cuh. The common core is fold_positions() in
// online_softmax.cuh: a warp takes 32 key positions at a time, one per lane, scores
// them, updates its running maximum and sum and accumulates the weighted values. No
// score matrix is stored. The causal kernel feeds it key and value tiles staged in
// shared memory, the decode kernel feeds it the cache in global memory.
#include "kernels/attention.cuh"

#include <climits>
#include <cmath>

#include "common/cuda_check.hpp"
#include "kernels/attention_dispatch.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"
#include "kernels/online_softmax.cuh"

namespace ladder {

namespace {

constexpr int kCausalQueriesPerBlock = 32;  // consecutive queries of one (b, h) share key tiles
constexpr int kCausalWarpsPerBlock = 8;
constexpr int kCausalQueriesPerWarp = kCausalQueriesPerBlock / kCausalWarpsPerBlock;
constexpr int kCausalThreads = kCausalWarpsPerBlock * kWarpSize;
constexpr int kDecodeWarpsPerBlock = 8;  // the warps of one (b, h) split the positions
constexpr int kDecodeThreads = kDecodeWarpsPerBlock * kWarpSize;
constexpr int kStoreThreads = 256;

// Math:   out[b, t, h*D + d] = sum_{s <= t} softmax_s(q_t . k_s / sqrt(D)) v_s[d], with
//         q_t, k_s, v_s the head-h slices of qkv rows (b, t) and (b, s).
// Shapes: qkv [B, T, 3C], out [B, T, C]; D = C / H <= 32 kDims, D % kWidth == 0.
// Grid:   one block per (b, h, tile of kCausalQueriesPerBlock consecutive queries):
//         blockIdx.x = b * H + h, blockIdx.y = the query tile. The block stages its
//         queries (scaled by 1 / sqrt(D)) in shared memory, then walks the keys in
//         tiles of 32 positions: all threads copy a tile of keys and values into shared
//         memory (coalesced rows), and each warp folds that tile into the online
//         softmax of its kCausalQueriesPerWarp queries (fold_positions, one key per
//         lane). Every key and value row is read from memory once per block instead of
//         once per query: at T = 400 that is 32 times fewer bytes, and this kernel is
//         the O(T^2) part of the naive chapter.
// Shared: queries [32][D], keys [32][D + kWidth], values [32][D]. Lane l reads key row
//         l: the padding of kWidth floats starts the 32 rows in different banks (for
//         16-byte reads, eight lanes at a time in banks 0, 4, ..., 28).
// Promises (kWidth = 4): LDS.128 PREEXIT
template <int kWidth, int kDims>
__global__ void __launch_bounds__(kCausalThreads)
    causal_attention_kernel(const float* qkv, float* out, int T, int H, int C) {
  // In a prefill whose products are decode matmuls, c_proj's follows this kernel: it may
  // start loading its weight in the slots this grid leaves (device_primitives.cuh).
  launch_dependents_at_start(LaunchDependents::kAtStart);
  extern __shared__ __align__(16) float causal_shared[];
  const int D = C / H;
  const int key_stride = D + kWidth;
  float* queries = causal_shared;
  float* keys = queries + kCausalQueriesPerBlock * D;
  float* values = keys + kWarpSize * key_stride;
  const int b = blockIdx.x / H;
  const int h = blockIdx.x % H;
  const int first_query = blockIdx.y * kCausalQueriesPerBlock;
  const int last_query = min(first_query + kCausalQueriesPerBlock, T) - 1;
  const std::size_t row_stride = 3 * static_cast<std::size_t>(C);
  const float* sequence = qkv + static_cast<std::size_t>(b) * T * row_stride + h * D;

  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  for (int i = threadIdx.x; i < kCausalQueriesPerBlock * D; i += kCausalThreads) {
    const int t = first_query + i / D;
    queries[i] =
        t <= last_query ? sequence[static_cast<std::size_t>(t) * row_stride + i % D] * scale : 0.0f;
  }

  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  OnlineSoftmax<kDims> state[kCausalQueriesPerWarp];
  for (int first_key = 0; first_key <= last_query; first_key += kWarpSize) {
    __syncthreads();  // the last tile is consumed (and, the first time, the queries staged)
    for (int i = threadIdx.x; i < kWarpSize * D; i += kCausalThreads) {
      const int row = i / D;
      const int d = i % D;
      const int s = first_key + row;
      const float* source = sequence + static_cast<std::size_t>(s) * row_stride + d;
      keys[row * key_stride + d] = s <= last_query ? source[C] : 0.0f;
      values[row * D + d] = s <= last_query ? source[2 * C] : 0.0f;
    }
    __syncthreads();
    const auto rows_of = [=](int s) {
      const int row = s - first_key;
      return KeyValueRows{keys + row * key_stride, values + row * D};
    };
#pragma unroll
    for (int j = 0; j < kCausalQueriesPerWarp; ++j) {
      const int local = warp + j * kCausalWarpsPerBlock;
      const int t = first_query + local;
      if (t > last_query || first_key > t) continue;  // the same on every lane of the warp
      fold_positions<kWidth>(queries + local * D, rows_of, first_key,
                             min(kWarpSize, t + 1 - first_key), /*first_masked=*/INT_MAX, D, lane,
                             state[j]);
    }
  }

#pragma unroll
  for (int j = 0; j < kCausalQueriesPerWarp; ++j) {
    const int t = first_query + warp + j * kCausalWarpsPerBlock;
    if (t > last_query) continue;
    float* out_row = out + (static_cast<std::size_t>(b) * T + t) * C + h * D;
#pragma unroll
    for (int i = 0; i < kDims; ++i) {
      const int d = lane + i * kWarpSize;
      if (d < D) out_row[d] = state[j].weighted_values[i] / state[j].running_sum;
    }
  }
}

std::size_t causal_attention_shared_bytes(int D, int width) {
  return sizeof(float) * (static_cast<std::size_t>(kCausalQueriesPerBlock) * D +
                          static_cast<std::size_t>(kWarpSize) * (D + width) +
                          static_cast<std::size_t>(kWarpSize) * D);
}

// Math:   out[b, h*D + d] = sum_{s < L} softmax_s(q_b . k_s / sqrt(D)) v_s[d], with
//         k_s = keys[b, h, s, :], v_s = values[b, h, s, :] and q_b the head-h slice of
//         row b of q (rows q_row_stride floats apart).
// Shapes: q [B, >= C] with row stride q_row_stride, keys, values [B, H, capacity, D],
//         out [B, C]; D % kWidth == 0, D <= 32 kDims.
// Grid:   one block per (b, h): block x serves b = x / H, h = x % H. Warp w takes the
//         chunks of 32 positions starting at 32 w, 32 (w + 8), ...; the eight warp
//         states are merged through shared memory in warp order (WarpStates).
// Promises (kWidth = 4): LDG.E.128
template <int kWidth, int kDims>
__global__ void decode_attention_kernel(const float* q, int q_row_stride, const float* keys,
                                        const float* values, float* out, int L, int capacity, int H,
                                        int C) {
  __shared__ __align__(16) float query[kMaxHeadDim];
  __shared__ WarpStates<kDecodeWarpsPerBlock> warp_states;
  const int b = blockIdx.x / H;
  const int h = blockIdx.x % H;
  const int D = C / H;
  const std::size_t head_offset = (static_cast<std::size_t>(b) * H + h) * capacity * D;
  attend_in_block<kDecodeWarpsPerBlock, kWidth, kDims>(
      q + static_cast<std::size_t>(b) * q_row_stride + h * D, keys + head_offset,
      values + head_offset, L, /*first_masked=*/L, D, out + static_cast<std::size_t>(b) * C + h * D,
      query, warp_states);
}

// Math:   p0 = cursor ? cursor->position : first_position;
//         keys[b, h, p0 + t, d]   = qkv[b, t, C + h*D + d];
//         values[b, h, p0 + t, d] = qkv[b, t, 2C + h*D + d]     for t < T.
//         With a cursor, p0 is known only on the device: positions outside
//         [0, capacity - T] write nothing (the launcher checks first_position itself).
// Shapes: qkv [B, T, 3C], keys, values [B, H, capacity, D]; T = 1 appends one step.
// Grid:   a grid-stride loop over the B * T * C elements of the k (and v) thirds;
//         element i is row r = i / C of qkv (b = r / T, t = r % T) and column
//         c = i % C, i.e. h = c / D, d = c % D. Consecutive threads read consecutive
//         columns of one qkv row and write consecutive d of one cache row.
__global__ void store_kv_kernel(const float* qkv, float* keys, float* values,
                                const DecodePosition* cursor, int first_position, int T,
                                int capacity, int B, int H, int C) {
  if (cursor != nullptr) {
    first_position = cursor->position;  // the same for the whole grid
    if (first_position < 0 || first_position > capacity - T) return;
  }
  const int D = C / H;
  const std::size_t total = static_cast<std::size_t>(B) * T * C;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const std::size_t row = i / C;
    const int b = static_cast<int>(row / T);
    const int t = static_cast<int>(row % T);
    const int c = static_cast<int>(i % C);
    const int h = c / D;
    const int d = c % D;
    const float* qkv_row = qkv + row * 3 * C;
    const std::size_t slot =
        ((static_cast<std::size_t>(b) * H + h) * capacity + first_position + t) * D + d;
    keys[slot] = qkv_row[C + c];
    values[slot] = qkv_row[2 * C + c];
  }
}

// Math:   new_keys[b, h, s, d] = s < L ? keys[b, h, s, d] : qkv[b, C + h*D + d], and the
//         same for values from the 2C third; s <= L.
// Shapes: qkv [B, 3C], keys, values [B, H, L, D], new_keys, new_values [B, H, L + 1, D];
//         D % kWidth == 0.
// Grid:   a grid-stride loop over the packs of kWidth floats of the new cache, which is
//         B * H rows of L + 1 positions of D / kWidth packs: pack i is (b, h) = i / ((L
//         + 1) * D / kWidth), position s, pack d. Consecutive threads read consecutive
//         packs of one old row and write consecutive packs of the new one; each thread
//         moves one pack of keys and the same pack of values.
// Promises (kWidth = 4): LDG.E.128 STG.E.128
template <int kWidth>
__global__ void grow_kv_cache_kernel(const float* qkv, const float* keys, const float* values,
                                     float* new_keys, float* new_values, int L, int B, int H,
                                     int C) {
  const int D = C / H;
  const int packs_per_row = D / kWidth;
  const std::size_t new_length = static_cast<std::size_t>(L) + 1;
  const std::size_t total = static_cast<std::size_t>(B) * H * new_length * packs_per_row;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int pack = static_cast<int>(i % packs_per_row);
    const std::size_t position_row = i / packs_per_row;  // (b * H + h) * (L + 1) + s
    const int s = static_cast<int>(position_row % new_length);
    const std::size_t head = position_row / new_length;  // b * H + h
    PackedFloats<kWidth> key;
    PackedFloats<kWidth> value;
    if (s < L) {
      const std::size_t old_pack = (head * L + s) * packs_per_row + pack;
      key = load_packed<kWidth>(keys, old_pack);
      value = load_packed<kWidth>(values, old_pack);
    } else {
      const std::size_t b = head / H;
      const int h = static_cast<int>(head % H);
      const float* qkv_row = qkv + b * 3 * C + h * D;
      key = load_packed<kWidth>(qkv_row + C, pack);
      value = load_packed<kWidth>(qkv_row + 2 * C, pack);
    }
    store_packed<kWidth>(new_keys, i, key);
    store_packed<kWidth>(new_values, i, value);
  }
}

}  // namespace

void launch_causal_attention(const float* qkv, float* out, int B, int T, int H, int C,
                             cudaStream_t stream) {
  constexpr const char* kName = "launch_causal_attention";
  launch_checks::require_not_null(kName, {{"qkv", qkv}, {"out", out}});
  launch_checks::require_positive(kName, "T", T);
  check_attention_head_size(kName, B, H, C);
  const long long heads = static_cast<long long>(B) * H;
  const int query_blocks = (T + kCausalQueriesPerBlock - 1) / kCausalQueriesPerBlock;
  launch_checks::require(query_blocks <= 65535, kName,
                         "T is too long: more than 65535 blocks of queries (gridDim.y)");

  const dim3 blocks(static_cast<unsigned int>(heads), static_cast<unsigned int>(query_blocks));
  const int D = C / H;
  // 16-byte reads of the staged rows need D % 4 == 0 (the buffers are 16-byte aligned).
  const bool packed = D % 4 == 0;
  const std::size_t shared_bytes = causal_attention_shared_bytes(D, packed ? 4 : 1);
  with_width_and_dims(packed, D, [&](auto width, auto dims) {
    const auto kernel = causal_attention_kernel<decltype(width)::value, decltype(dims)::value>;
    // Above 48 KiB (D = 128) a kernel must opt in to more dynamic shared memory.
    if (shared_bytes > 48 * 1024)
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(shared_bytes)));
    kernel<<<blocks, kCausalThreads, shared_bytes, stream>>>(qkv, out, T, H, C);
  });
  CUDA_CHECK_LAUNCH(stream);
}

void launch_decode_attention(const float* q, int q_row_stride, const float* keys,
                             const float* values, float* out, int B, int L, int capacity, int H,
                             int C, cudaStream_t stream) {
  constexpr const char* kName = "launch_decode_attention";
  launch_checks::require_not_null(kName,
                                  {{"q", q}, {"keys", keys}, {"values", values}, {"out", out}});
  launch_checks::require_positive(kName, {{"L", L}, {"capacity", capacity}});
  check_attention_head_size(kName, B, H, C);
  if (L > capacity)
    launch_checks::fail(
        kName, "L (" + std::to_string(L) + ") exceeds capacity (" + std::to_string(capacity) + ")");
  check_query_row_stride(kName, q_row_stride, C);
  const unsigned int blocks = static_cast<unsigned int>(B * H);
  const bool packed = cache_rows_are_packed(C / H, keys, values);
  with_width_and_dims(packed, C / H, [&](auto width, auto dims) {
    decode_attention_kernel<decltype(width)::value, decltype(dims)::value>
        <<<blocks, kDecodeThreads, 0, stream>>>(q, q_row_stride, keys, values, out, L, capacity, H,
                                                C);
  });
  CUDA_CHECK_LAUNCH(stream);
}

void launch_grow_kv_cache(const float* qkv, const float* keys, const float* values, float* new_keys,
                          float* new_values, int L, int B, int H, int C, cudaStream_t stream) {
  constexpr const char* kName = "launch_grow_kv_cache";
  launch_checks::require_not_null(
      kName, {{"qkv", qkv}, {"new_keys", new_keys}, {"new_values", new_values}});
  check_attention_heads(kName, B, H, C);
  launch_checks::require(L >= 0, kName, "L must be >= 0");
  if (L > 0) {
    launch_checks::require_not_null(kName, {{"keys", keys}, {"values", values}});
  }

  const int D = C / H;
  const std::size_t rows = static_cast<std::size_t>(B) * H * (static_cast<std::size_t>(L) + 1);
  const bool packed =
      D % 4 == 0 && launch_checks::is_16_byte_aligned(qkv) &&
      launch_checks::is_16_byte_aligned(keys) && launch_checks::is_16_byte_aligned(values) &&
      launch_checks::is_16_byte_aligned(new_keys) && launch_checks::is_16_byte_aligned(new_values);
  with_width(packed, [&](auto width) {
    constexpr int kWidth = decltype(width)::value;
    const unsigned int blocks = launch_checks::grid_stride_blocks(
        rows * static_cast<std::size_t>(D / kWidth), kStoreThreads);
    grow_kv_cache_kernel<kWidth>
        <<<blocks, kStoreThreads, 0, stream>>>(qkv, keys, values, new_keys, new_values, L, B, H, C);
  });
  CUDA_CHECK_LAUNCH(stream);
}

void launch_store_kv_sequence(const float* qkv, float* keys, float* values, int first_position,
                              int T, int capacity, int B, int H, int C, cudaStream_t stream) {
  constexpr const char* kName = "launch_store_kv_sequence";
  launch_checks::require_not_null(kName, {{"qkv", qkv}, {"keys", keys}, {"values", values}});
  launch_checks::require_positive(kName, {{"T", T}, {"capacity", capacity}});
  check_attention_heads(kName, B, H, C);
  if (first_position < 0 || static_cast<long long>(first_position) + T > capacity)
    launch_checks::fail(kName, "positions " + std::to_string(first_position) + " .. " +
                                   std::to_string(static_cast<long long>(first_position) + T - 1) +
                                   " must lie in [0, " + std::to_string(capacity) + ")");

  const std::size_t elements =
      static_cast<std::size_t>(B) * static_cast<std::size_t>(T) * static_cast<std::size_t>(C);
  const unsigned int blocks = launch_checks::grid_stride_blocks(elements, kStoreThreads);
  store_kv_kernel<<<blocks, kStoreThreads, 0, stream>>>(qkv, keys, values, /*cursor=*/nullptr,
                                                        first_position, T, capacity, B, H, C);
  CUDA_CHECK_LAUNCH(stream);
}

// Declared in cache_attention.cuh with the other cursor-driven launchers; it is the
// prefill's store kernel for T = 1, with the position read on the device.
void launch_append_kv_at_cursor(const float* qkv, float* keys, float* values,
                                const DecodePosition* cursor, int capacity, int B, int H, int C,
                                cudaStream_t stream) {
  constexpr const char* kName = "launch_append_kv_at_cursor";
  launch_checks::require_not_null(
      kName, {{"qkv", qkv}, {"keys", keys}, {"values", values}, {"cursor", cursor}});
  launch_checks::require_positive(kName, "capacity", capacity);
  check_attention_heads(kName, B, H, C);

  const std::size_t elements = static_cast<std::size_t>(B) * static_cast<std::size_t>(C);
  const unsigned int blocks = launch_checks::grid_stride_blocks(elements, kStoreThreads);
  store_kv_kernel<<<blocks, kStoreThreads, 0, stream>>>(qkv, keys, values, cursor,
                                                        /*first_position=*/0, /*T=*/1, capacity, B,
                                                        H, C);
  CUDA_CHECK_LAUNCH(stream);
}

}  // namespace ladder
