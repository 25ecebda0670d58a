// kernels/attention.cu - causal self-attention (whole sequences) and decode attention
// (one query against the KV cache), both with an online softmax; plus the writes into
// the KV cache (one step's keys and values, or a whole prompt's).
//
// Notation and layouts: see attention.cuh. The common core is attend_chunk(): a warp
// takes 32 key positions at a time, one per lane. Each lane computes its key's score
// q.k / sqrt(D); the warp updates its running maximum m and running sum l of
// exp(score - m) and rescales what it has accumulated so far by exp(m_old - m_new);
// then the 32 probabilities are broadcast one by one (register shuffles) while every
// lane accumulates p * v for its own dimensions d = lane, lane + 32, ... of the
// head. At the end out = accumulated / l. This is the softmax of the reference, only
// computed in one pass; no score matrix is stored.
#include "kernels/attention.cuh"

#include <cmath>

#include "common/cuda_check.hpp"
#include "kernels/device_primitives.cuh"
#include "kernels/launch_checks.hpp"

namespace ladder {

namespace {

constexpr int kDimsPerLane = kMaxHeadDim / kWarpSize;
static_assert(kMaxHeadDim % kWarpSize == 0, "a head row is split evenly over the lanes");

constexpr int kCausalQueriesPerBlock = 32;  // consecutive queries of one (b, h) share key tiles
constexpr int kCausalWarpsPerBlock = 8;
constexpr int kCausalQueriesPerWarp = kCausalQueriesPerBlock / kCausalWarpsPerBlock;
constexpr int kCausalThreads = kCausalWarpsPerBlock * kWarpSize;
constexpr int kDecodeWarpsPerBlock = 8;  // the warps of one (b, h) split the positions
constexpr int kDecodeThreads = kDecodeWarpsPerBlock * kWarpSize;
constexpr int kStoreThreads = 256;

/// What one warp has accumulated over the key positions it has seen so far.
struct OnlineSoftmax {
  float running_max = -INFINITY;  ///< m: the largest score so far
  float running_sum = 0.0f;       ///< l: sum of exp(score - m)
  /// sum of exp(score - m) * v[d] for this lane's dimensions d = lane + 32 * i.
  float weighted_values[kDimsPerLane] = {};
};

// score = query . key for one lane's key row; query is already scaled by 1 / sqrt(D)
// and lives in shared memory. kWidth independent partial sums keep the FMA chains short.
template <int kWidth>
__device__ __forceinline__ float dot_with_query(const float* query, const float* key, int D) {
  float partial[kWidth] = {};
#pragma unroll 2  // deeper unrolling only adds registers (and spilled on sm_80)
  for (int i = 0; i < D / kWidth; ++i) {
    const PackedFloats<kWidth> q = load_packed<kWidth>(query, i);
    const PackedFloats<kWidth> k = load_packed<kWidth>(key, i);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) partial[j] += q.values[j] * k.values[j];
  }
  float dot = 0.0f;
#pragma unroll
  for (int j = 0; j < kWidth; ++j) dot += partial[j];
  return dot;
}

// Folds key positions first .. first + count - 1 (count <= 32, the same on every lane)
// into the warp's state. Position s of this (b, h) has its key at keys + s * row_stride
// and its value at values + s * row_stride.
template <int kWidth>
__device__ __forceinline__ void attend_chunk(const float* query, const float* keys,
                                             const float* values, std::size_t row_stride, int first,
                                             int count, int D, int lane, OnlineSoftmax& state) {
  const bool has_key = lane < count;
  const float score =
      has_key ? dot_with_query<kWidth>(
                    query, keys + static_cast<std::size_t>(first + lane) * row_stride, D)
              : -INFINITY;
  // count >= 1, so lane 0 holds a real score and new_max is finite.
  const float new_max = fmaxf(state.running_max, warp_max(score));
  const float probability = has_key ? expf(score - new_max) : 0.0f;
  const float rescale = expf(state.running_max - new_max);  // 0 on the first chunk (m = -inf)
  state.running_sum = state.running_sum * rescale + warp_sum(probability);
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) state.weighted_values[i] *= rescale;
  for (int j = 0; j < count; ++j) {
    const float p = __shfl_sync(kFullWarpMask, probability, j);
    const float* value = values + static_cast<std::size_t>(first + j) * row_stride;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kWarpSize;
      if (d < D) state.weighted_values[i] += p * value[d];
    }
  }
  state.running_max = new_max;
}

// Math:   out[b, t, h*D + d] = sum_{s <= t} softmax_s(q_t . k_s / sqrt(D)) v_s[d], with
//         q_t, k_s, v_s the head-h slices of qkv rows (b, t) and (b, s).
// Shapes: qkv [B, T, 3C], out [B, T, C]; D = C / H <= kMaxHeadDim.
// Grid:   one block per (b, h, tile of kCausalQueriesPerBlock consecutive queries):
//         blockIdx.x = b * H + h, blockIdx.y = the query tile. The block stages its
//         queries (scaled by 1 / sqrt(D)) in shared memory, then walks the keys in
//         tiles of 32 positions: all threads copy a tile of keys and values into shared
//         memory (coalesced rows), and each warp folds that tile into the online
//         softmax of its kCausalQueriesPerWarp queries (one key per lane, as in
//         attend_chunk). Every key and value row is read from memory once per block
//         instead of once per query: at T = 400 that is 32 times fewer bytes, and
//         this kernel is the O(T^2) part of the naive chapter.
// Shared: queries [32][D], keys [32][D + 1] (the padding puts the 32 lanes' rows in 32
//         different banks), values [32][D].
__global__ void __launch_bounds__(kCausalThreads)
    causal_attention_kernel(const float* qkv, float* out, int T, int H, int C) {
  extern __shared__ float causal_shared[];
  const int D = C / H;
  float* queries = causal_shared;
  float* keys = queries + kCausalQueriesPerBlock * D;
  float* values = keys + kWarpSize * (D + 1);
  const int b = blockIdx.x / H;
  const int h = blockIdx.x % H;
  const int first_query = blockIdx.y * kCausalQueriesPerBlock;
  const int last_query = min(first_query + kCausalQueriesPerBlock, T) - 1;
  const std::size_t row_stride = 3 * static_cast<std::size_t>(C);
  const float* sequence = qkv + static_cast<std::size_t>(b) * T * row_stride + h * D;

  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  for (int i = threadIdx.x; i < kCausalQueriesPerBlock * D; i += kCausalThreads) {
    const int t = first_query + i / D;
    queries[i] = t <= last_query ? sequence[static_cast<std::size_t>(t) * row_stride + i % D] * scale
                                 : 0.0f;
  }

  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  OnlineSoftmax state[kCausalQueriesPerWarp];
  for (int first_key = 0; first_key <= last_query; first_key += kWarpSize) {
    __syncthreads();  // the last tile is consumed (and, the first time, the queries staged)
    for (int i = threadIdx.x; i < kWarpSize * D; i += kCausalThreads) {
      const int row = i / D;
      const int d = i % D;
      const int s = first_key + row;
      const float* source = sequence + static_cast<std::size_t>(s) * row_stride + d;
      keys[row * (D + 1) + d] = s <= last_query ? source[C] : 0.0f;
      values[row * D + d] = s <= last_query ? source[2 * C] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kCausalQueriesPerWarp; ++j) {
      const int local = warp + j * kCausalWarpsPerBlock;
      const int t = first_query + local;
      if (t > last_query || first_key > t) continue;  // the same on every lane of the warp
      const int count = min(kWarpSize, t + 1 - first_key);
      const bool has_key = lane < count;
      float score = -INFINITY;
      if (has_key) {
        const float* query = queries + local * D;
        const float* key = keys + lane * (D + 1);
        float partial[4] = {};
        int d = 0;
        for (; d + 4 <= D; d += 4) {
#pragma unroll
          for (int k = 0; k < 4; ++k) partial[k] += query[d + k] * key[d + k];
        }
        for (; d < D; ++d) partial[0] += query[d] * key[d];
        score = (partial[0] + partial[1]) + (partial[2] + partial[3]);
      }
      // count >= 1, so lane 0 holds a real score and new_max is finite.
      OnlineSoftmax& mine = state[j];
      const float new_max = fmaxf(mine.running_max, warp_max(score));
      const float probability = has_key ? expf(score - new_max) : 0.0f;
      const float rescale = expf(mine.running_max - new_max);  // 0 on the first tile
      mine.running_sum = mine.running_sum * rescale + warp_sum(probability);
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) mine.weighted_values[i] *= rescale;
      for (int s = 0; s < count; ++s) {
        const float p = __shfl_sync(kFullWarpMask, probability, s);
        const float* value = values + s * D;
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
          const int d = lane + i * kWarpSize;
          if (d < D) mine.weighted_values[i] += p * value[d];
        }
      }
      mine.running_max = new_max;
    }
  }

#pragma unroll
  for (int j = 0; j < kCausalQueriesPerWarp; ++j) {
    const int t = first_query + warp + j * kCausalWarpsPerBlock;
    if (t > last_query) continue;
    float* out_row = out + (static_cast<std::size_t>(b) * T + t) * C + h * D;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + i * kWarpSize;
      if (d < D) out_row[d] = state[j].weighted_values[i] / state[j].running_sum;
    }
  }
}

std::size_t causal_attention_shared_bytes(int D) {
  return sizeof(float) * (static_cast<std::size_t>(kCausalQueriesPerBlock) * D +
                          static_cast<std::size_t>(kWarpSize) * (D + 1) +
                          static_cast<std::size_t>(kWarpSize) * D);
}

// Math:   out[b, h*D + d] = sum_{s < L} softmax_s(q_b . k_s / sqrt(D)) v_s[d], with
//         k_s = keys[b, h, s, :], v_s = values[b, h, s, :] and q_b the head-h slice of
//         row b of q (rows q_row_stride floats apart).
// Shapes: q [B, >= C] with row stride q_row_stride, keys, values [B, H, capacity, D],
//         out [B, C]; D = C / H <= kMaxHeadDim, D % kWidth == 0.
// Grid:   one block per (b, h): block x serves b = x / H, h = x % H. Warp w takes the
//         chunks of 32 positions starting at 32 w, 32 (w + 8), ...; the eight partial
//         states (m_w, l_w, acc_w) are then merged through shared memory in a fixed
//         order: out = sum_w exp(m_w - M) acc_w / sum_w exp(m_w - M) l_w, M = max_w m_w.
template <int kWidth>
__global__ void decode_attention_kernel(const float* q, int q_row_stride, const float* keys,
                                        const float* values, float* out, int L, int capacity, int H,
                                        int C) {
  __shared__ __align__(16) float query[kMaxHeadDim];
  __shared__ float partial_max[kDecodeWarpsPerBlock];
  __shared__ float partial_sum[kDecodeWarpsPerBlock];
  __shared__ float partial_values[kDecodeWarpsPerBlock][kMaxHeadDim];
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int b = blockIdx.x / H;
  const int h = blockIdx.x % H;
  const int D = C / H;

  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  const float* query_row = q + static_cast<std::size_t>(b) * q_row_stride + h * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) query[d] = query_row[d] * scale;
  __syncthreads();

  const std::size_t head_offset = (static_cast<std::size_t>(b) * H + h) * capacity * D;
  OnlineSoftmax state;
  for (int first = warp * kWarpSize; first < L; first += kDecodeWarpsPerBlock * kWarpSize)
    attend_chunk<kWidth>(query, keys + head_offset, values + head_offset,
                         static_cast<std::size_t>(D), first, min(kWarpSize, L - first), D, lane,
                         state);

  if (lane == 0) {
    partial_max[warp] = state.running_max;  // -inf for a warp that saw no position
    partial_sum[warp] = state.running_sum;
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + i * kWarpSize;
    if (d < D) partial_values[warp][d] = state.weighted_values[i];
  }
  __syncthreads();

  float block_max = -INFINITY;
#pragma unroll
  for (int w = 0; w < kDecodeWarpsPerBlock; ++w) block_max = fmaxf(block_max, partial_max[w]);
  float* out_row = out + static_cast<std::size_t>(b) * C + h * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.0f;
    float value = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecodeWarpsPerBlock; ++w) {
      const float weight = expf(partial_max[w] - block_max);  // 0 for an idle warp
      sum += partial_sum[w] * weight;
      value += partial_values[w][d] * weight;
    }
    out_row[d] = value / sum;
  }
}

// Math:   keys[b, h, first_position + t, d]   = qkv[b, t, C + h*D + d];
//         values[b, h, first_position + t, d] = qkv[b, t, 2C + h*D + d]     for t < T.
// Shapes: qkv [B, T, 3C], keys, values [B, H, capacity, D]; T = 1 appends one step.
// Grid:   a grid-stride loop over the B * T * C elements of the k (and v) thirds;
//         element i is row r = i / C of qkv (b = r / T, t = r % T) and column
//         c = i % C, i.e. h = c / D, d = c % D. Consecutive threads read consecutive
//         columns of one qkv row and write consecutive d of one cache row.
__global__ void store_kv_kernel(const float* qkv, float* keys, float* values, int first_position,
                                int T, int capacity, int B, int H, int C) {
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

void check_heads(const char* launcher, int H, int C) {
  launch_checks::require_positive(launcher, "H", H);
  launch_checks::require_positive(launcher, "C", C);
  if (C % H != 0)
    launch_checks::fail(launcher, "C (" + std::to_string(C) + ") must be divisible by H (" +
                                      std::to_string(H) + ")");
}

void check_head_size(const char* launcher, int H, int C) {
  check_heads(launcher, H, C);
  if (C / H > kMaxHeadDim)
    launch_checks::fail(launcher, "head size C / H = " + std::to_string(C / H) +
                                      " exceeds kMaxHeadDim = " + std::to_string(kMaxHeadDim));
}

}  // namespace

void launch_causal_attention(const float* qkv, float* out, int B, int T, int H, int C,
                             cudaStream_t stream) {
  constexpr const char* kName = "launch_causal_attention";
  launch_checks::require_not_null(kName, "qkv", qkv);
  launch_checks::require_not_null(kName, "out", out);
  launch_checks::require_positive(kName, "B", B);
  launch_checks::require_positive(kName, "T", T);
  check_head_size(kName, H, C);
  const long long heads = static_cast<long long>(B) * H;
  launch_checks::require(heads <= 0x7fffffff, kName, "B * H must fit in an int");

  const dim3 blocks(static_cast<unsigned int>(heads),
                    static_cast<unsigned int>((T + kCausalQueriesPerBlock - 1) / kCausalQueriesPerBlock));
  const std::size_t shared_bytes = causal_attention_shared_bytes(C / H);
  // Above 48 KiB (D > 96) a kernel must opt in to more dynamic shared memory.
  CUDA_CHECK(cudaFuncSetAttribute(causal_attention_kernel,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared_bytes)));
  causal_attention_kernel<<<blocks, kCausalThreads, shared_bytes, stream>>>(qkv, out, T, H, C);
  CUDA_CHECK_LAUNCH();
}

void launch_decode_attention(const float* q, int q_row_stride, const float* keys,
                             const float* values, float* out, int B, int L, int capacity, int H,
                             int C, cudaStream_t stream) {
  constexpr const char* kName = "launch_decode_attention";
  launch_checks::require_not_null(kName, "q", q);
  launch_checks::require_not_null(kName, "keys", keys);
  launch_checks::require_not_null(kName, "values", values);
  launch_checks::require_not_null(kName, "out", out);
  launch_checks::require_positive(kName, "B", B);
  launch_checks::require_positive(kName, "L", L);
  launch_checks::require_positive(kName, "capacity", capacity);
  check_head_size(kName, H, C);
  if (L > capacity)
    launch_checks::fail(
        kName, "L (" + std::to_string(L) + ") exceeds capacity (" + std::to_string(capacity) + ")");
  if (q_row_stride < C)
    launch_checks::fail(kName, "q_row_stride (" + std::to_string(q_row_stride) +
                                   ") must be >= C (" + std::to_string(C) + ")");
  const long long heads = static_cast<long long>(B) * H;
  launch_checks::require(heads <= 0x7fffffff, kName, "B * H must fit in an int");

  const unsigned int blocks = static_cast<unsigned int>(heads);
  // Packed key reads need every key row 16-byte aligned; q is read element by element.
  const bool packed = (C / H) % 4 == 0 && launch_checks::is_16_byte_aligned(keys) &&
                      launch_checks::is_16_byte_aligned(values);
  if (packed) {
    decode_attention_kernel<4><<<blocks, kDecodeThreads, 0, stream>>>(q, q_row_stride, keys, values,
                                                                      out, L, capacity, H, C);
  } else {
    decode_attention_kernel<1><<<blocks, kDecodeThreads, 0, stream>>>(q, q_row_stride, keys, values,
                                                                      out, L, capacity, H, C);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_append_kv(const float* qkv, float* keys, float* values, int position, int capacity,
                      int B, int H, int C, cudaStream_t stream) {
  constexpr const char* kName = "launch_append_kv";
  launch_checks::require_not_null(kName, "qkv", qkv);
  launch_checks::require_not_null(kName, "keys", keys);
  launch_checks::require_not_null(kName, "values", values);
  launch_checks::require_positive(kName, "B", B);
  launch_checks::require_positive(kName, "capacity", capacity);
  check_heads(kName, H, C);
  if (position < 0 || position >= capacity)
    launch_checks::fail(kName, "position (" + std::to_string(position) + ") must lie in [0, " +
                                   std::to_string(capacity) + ")");

  const std::size_t elements = static_cast<std::size_t>(B) * static_cast<std::size_t>(C);
  const unsigned int blocks = launch_checks::grid_stride_blocks(elements, kStoreThreads);
  store_kv_kernel<<<blocks, kStoreThreads, 0, stream>>>(qkv, keys, values, position, /*T=*/1,
                                                        capacity, B, H, C);
  CUDA_CHECK_LAUNCH();
}

void launch_store_kv_sequence(const float* qkv, float* keys, float* values, int first_position,
                              int T, int capacity, int B, int H, int C, cudaStream_t stream) {
  constexpr const char* kName = "launch_store_kv_sequence";
  launch_checks::require_not_null(kName, "qkv", qkv);
  launch_checks::require_not_null(kName, "keys", keys);
  launch_checks::require_not_null(kName, "values", values);
  launch_checks::require_positive(kName, "B", B);
  launch_checks::require_positive(kName, "T", T);
  launch_checks::require_positive(kName, "capacity", capacity);
  check_heads(kName, H, C);
  if (first_position < 0 || static_cast<long long>(first_position) + T > capacity)
    launch_checks::fail(kName, "positions " + std::to_string(first_position) + " .. " +
                                   std::to_string(static_cast<long long>(first_position) + T - 1) +
                                   " must lie in [0, " + std::to_string(capacity) + ")");

  const std::size_t elements =
      static_cast<std::size_t>(B) * static_cast<std::size_t>(T) * static_cast<std::size_t>(C);
  const unsigned int blocks = launch_checks::grid_stride_blocks(elements, kStoreThreads);
  store_kv_kernel<<<blocks, kStoreThreads, 0, stream>>>(qkv, keys, values, first_position, T,
                                                        capacity, B, H, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace ladder
