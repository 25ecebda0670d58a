// bench/attention_history.cu - the decode-attention kernels of the ladder, version by
// version, each checked against the CPU reference and then timed.
//
//   build/current/bench/attention_history          every version
//   build/current/bench/attention_history 3        version 3 only
//   build/current/bench/attention_history 2 --batch 1 --new-tokens 400
//
// One decode step of GPT-2 small (H = 12 heads of D = 64, C = 768) at B rows (32 by
// default), halfway through a run of N new tokens (100 by default) after a BOS prompt:
// the cache holds capacity = N + 1 positions, as the chapters allocate it, and the step
// sits at p = N / 2 (L = p + 1 valid positions: 51 at N = 100). Every version computes
//   out[b, head h] = sum_{s <= p} softmax_s(q_b . k_s / sqrt(8)) v_s
// on the same random inputs (fixed seed), is compared with reference::decode_attention
// (relative error <= 1e-4, as the tests ask), and is timed as one launch (the median of
// CUDA-graph replays, bench/kernel_history.hpp, whose launches walk 12 layers' caches as
// a step does, so the cache comes from HBM, not L2). GB/s is the bytes each version must
// move by its design (its reads and writes counted once) over that time.
//
// Versions (the ladder's order):
//   1  chapter 02: decode attention over the valid length, one block per (b, h)
//      (launch_decode_attention; the chapter appends k, v in a kernel of its own)
//   2  chapter 04: static-cache attention over all capacity positions, those after p masked
//      (launch_static_cache_attention; the append is again a kernel of its own)
//   3  chapter 05 as first written: append + flash-decoding in one kernel, the splits
//      per (b, h) chosen from the SM count (4 blocks per SM over all heads: 2 splits
//      at B = 32 on a 132-SM GPU), shares rounded to 32 positions - kept below as
//      chapter 05 first had it in kernels/cache_attention.cu, since replaced by version 4
//   4  chapter 05 now: the same kernel with one block per 128 positions of the cache
//      (1 split at N = 100: no merge through the workspace; 4 at N = 400)
//      (launch_fused_decode_attention)
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/bench_support.hpp"
#include "bench/kernel_history.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_stream.hpp"
#include "common/device_info.hpp"
#include "common/reference.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/device_primitives.cuh"
#include "kernels/online_softmax.cuh"

namespace {

using ladder::DecodePosition;
using ladder::KeyValueRows;
using ladder::kWarpSize;

// ---------------------------------------------------------------- version 3 (chapter 05 as first written)

constexpr int kFirstFusedWarps = 4;
constexpr int kFirstFusedThreads = kFirstFusedWarps * kWarpSize;
constexpr int kFirstTargetBlocksPerSm = 4;
constexpr int kFirstMaxSplits = 32;
constexpr int kFirstPositionsPerChunk = kWarpSize;

struct FirstSplitWorkspace {
  int* arrivals;          // [B * H], 0 between launches
  float* partial_max;     // [B * H, splits]
  float* partial_sum;     // [B * H, splits]
  float* partial_values;  // [B * H, splits, D]
};

// Chapter 05's first fused kernel (fused_decode_attention_kernel as
// kernels/cache_attention.cu first had it): shares of ceil(L / splits) rounded up to 32 positions;
// a split's state goes through the workspace and the last block of a (b, h) merges.
// Today's fold_positions (kernels/online_softmax.cuh) folds its chunks.
template <int kWidth, int kDims>
__global__ void __launch_bounds__(kFirstFusedThreads, 5)
    first_fused_decode_attention_kernel(const float* qkv, float* keys, float* values,
                                        const DecodePosition* cursor, int capacity, float* out,
                                        FirstSplitWorkspace workspace, int splits, int H, int C) {
  __shared__ __align__(16) float query[ladder::kMaxHeadDim];
  __shared__ ladder::WarpStates<kFirstFusedWarps> warp_states;
  __shared__ bool merges_splits;
  __shared__ float split_weights[kWarpSize];
  __shared__ float merged_sum;
  const int head = blockIdx.x;
  const int split = blockIdx.y;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int b = head / H;
  const int h = head % H;
  const int D = C / H;
  float* out_row = out + static_cast<std::size_t>(b) * C + h * D;

  const int position = cursor->position;
  if (position < 0 || position >= capacity) {
    if (split == 0)
      for (int d = threadIdx.x; d < D; d += blockDim.x) out_row[d] = NAN;
    return;
  }
  const int length = position + 1;
  const int share = (length + splits - 1) / splits;
  const int share_rounded =
      (share + kFirstPositionsPerChunk - 1) / kFirstPositionsPerChunk * kFirstPositionsPerChunk;
  const int active_splits = (length + share_rounded - 1) / share_rounded;
  const int first = split * share_rounded;
  if (first >= length) return;
  const int end = min(first + share_rounded, length);

  const float* qkv_row = qkv + static_cast<std::size_t>(b) * 3 * C;
  const float* fresh_key = qkv_row + C + h * D;
  const float* fresh_value = qkv_row + 2 * C + h * D;
  const std::size_t head_offset = static_cast<std::size_t>(head) * capacity * D;
  float* head_keys = keys + head_offset;
  float* head_values = values + head_offset;

  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    query[d] = qkv_row[h * D + d] * scale;
    if (end == length) {
      head_keys[static_cast<std::size_t>(position) * D + d] = fresh_key[d];
      head_values[static_cast<std::size_t>(position) * D + d] = fresh_value[d];
    }
  }
  __syncthreads();

  const auto rows_of = [=](int s) {
    const std::size_t row = static_cast<std::size_t>(s) * D;
    const bool fresh = s == position;
    return KeyValueRows{fresh ? fresh_key : head_keys + row,
                        fresh ? fresh_value : head_values + row};
  };
  ladder::OnlineSoftmax<kDims> state;
  for (int chunk = first + warp * kFirstPositionsPerChunk; chunk < end;
       chunk += kFirstFusedWarps * kFirstPositionsPerChunk) {
    ladder::fold_positions<kWidth>(query, rows_of, chunk, min(kFirstPositionsPerChunk, end - chunk),
                                   /*first_masked=*/INT_MAX, D, lane, state);
  }

  warp_states.store(warp, lane, D, state);
  __syncthreads();
  const float block_max = warp_states.block_max();
  if (active_splits == 1) {
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float sum = 0.0f;
      float value = 0.0f;
      warp_states.merge(block_max, d, sum, value);
      out_row[d] = value / sum;
    }
    return;
  }

  const std::size_t slot = static_cast<std::size_t>(head) * splits + split;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.0f;
    float value = 0.0f;
    warp_states.merge(block_max, d, sum, value);
    workspace.partial_values[slot * D + d] = value;
    if (d == 0) {
      workspace.partial_max[slot] = block_max;
      workspace.partial_sum[slot] = sum;
    }
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    merges_splits = atomicAdd(&workspace.arrivals[head], 1) == active_splits - 1;
  __syncthreads();
  if (!merges_splits) return;
  __threadfence();

  const std::size_t first_slot = static_cast<std::size_t>(head) * splits;
  if (warp == 0) {
    const bool has_split = lane < active_splits;
    const float split_max =
        has_split ? __ldcg(&workspace.partial_max[first_slot + lane]) : -INFINITY;
    const float largest = ladder::warp_max(split_max);
    const float weight = has_split ? expf(split_max - largest) : 0.0f;
    const float weighted_sum =
        has_split ? __ldcg(&workspace.partial_sum[first_slot + lane]) * weight : 0.0f;
    split_weights[lane] = weight;
    const float sum = ladder::warp_sum(weighted_sum);
    if (lane == 0) merged_sum = sum;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float value = 0.0f;
#pragma unroll 8
    for (int s = 0; s < active_splits; ++s)
      value += __ldcg(&workspace.partial_values[(first_slot + s) * D + d]) * split_weights[s];
    out_row[d] = value / merged_sum;
  }
  if (threadIdx.x == 0) workspace.arrivals[head] = 0;
}

/// The first fused kernel's split rule: about kFirstTargetBlocksPerSm blocks per SM over all heads,
/// at most one split per 32 positions of the cache and at most kFirstMaxSplits.
int first_split_rule(int heads, int capacity, int sm_count) {
  const int most = std::clamp((capacity + kFirstPositionsPerChunk - 1) / kFirstPositionsPerChunk, 1,
                              kFirstMaxSplits);
  const int target = kFirstTargetBlocksPerSm * sm_count;
  return std::clamp((target + heads - 1) / heads, 1, most);
}

// ---------------------------------------------------------------- the bench

constexpr int kLayers = 12;
constexpr int kHeads = 12;
constexpr int kC = 768;
constexpr int kD = kC / kHeads;
constexpr double kTolerance = 1e-4;
constexpr int kVersions = 4;

int run(int argc, char** argv) {
  const ladder::bench::HistoryArguments arguments =
      ladder::bench::parse_history_arguments(argc, argv, "attention_history", kVersions,
                                             /*takes_new_tokens=*/true);
  const ladder::DeviceInfo device = ladder::query_device_info();
  std::printf("%s\n", ladder::device_banner(device).c_str());
  const int B = arguments.batch;
  const int capacity = 1 + arguments.new_tokens;  // BOS prompt + N new tokens
  const int position = arguments.new_tokens / 2;  // halfway through the run
  const int length = position + 1;
  const int heads = B * kHeads;
  std::printf(
      "decode attention, GPT-2 small: B = %d, H = %d, D = %d, L = %d of %d cached "
      "positions\n\n",
      B, kHeads, kD, length, capacity);

  // Inputs: qkv [B, 3C], the cache [B, H, capacity, D] holding positions 0 .. p - 1
  // (and, for the versions that do not append, p as well: the chapter's append kernel
  // ran before them). The reference sees the cache with this step's k, v at p.
  const std::size_t cache_floats = static_cast<std::size_t>(heads) * capacity * kD;
  const std::vector<float> qkv =
      ladder::bench::random_floats(static_cast<std::size_t>(B) * 3 * kC, 1);
  std::vector<float> keys = ladder::bench::random_floats(cache_floats, 2);
  std::vector<float> values = ladder::bench::random_floats(cache_floats, 3);
  std::vector<float> query(static_cast<std::size_t>(B) * kC);
  for (int b = 0; b < B; ++b)
    for (int c = 0; c < kC; ++c) {
      const std::size_t row = static_cast<std::size_t>(b) * 3 * kC;
      query[static_cast<std::size_t>(b) * kC + c] = qkv[row + c];
      const std::size_t slot =
          ((static_cast<std::size_t>(b) * kHeads + c / kD) * capacity + position) * kD + c % kD;
      keys[slot] = qkv[row + kC + c];
      values[slot] = qkv[row + 2 * kC + c];
    }
  std::vector<float> expected(static_cast<std::size_t>(B) * kC);
  ladder::reference::decode_attention(query.data(), keys.data(), values.data(), expected.data(), B,
                                      length, capacity, kHeads, kC);

  ladder::bench::DeviceScratch scratch;
  float* qkv_device = scratch.floats(qkv.size());
  // A cache per layer, as in a step: the timed launches walk the 12 layers' caches, so
  // they read them from HBM (one layer's cache alone, ~20 MB at B = 32, fits in L2).
  std::vector<float*> layer_keys;
  std::vector<float*> layer_values;
  for (int layer = 0; layer < kLayers; ++layer) {
    layer_keys.push_back(scratch.floats(cache_floats));
    layer_values.push_back(scratch.floats(cache_floats));
  }
  float* const keys_device = layer_keys[0];  // the layer the check reads
  float* const values_device = layer_values[0];
  float* out_device = scratch.floats(expected.size());
  const std::size_t fused_bytes =
      ladder::fused_decode_attention_workspace_bytes(B, kHeads, kC, capacity);
  float* fused_workspace = scratch.floats(fused_bytes / sizeof(float) + 1);
  const std::size_t states = static_cast<std::size_t>(heads) * kFirstMaxSplits;
  const FirstSplitWorkspace first_workspace{reinterpret_cast<int*>(scratch.floats(heads)),
                                            scratch.floats(states), scratch.floats(states),
                                            scratch.floats(states * kD)};
  auto* cursor = reinterpret_cast<DecodePosition*>(scratch.floats(2));
  const DecodePosition step_position{position, position};
  CUDA_CHECK(cudaMemcpy(cursor, &step_position, sizeof(step_position), cudaMemcpyHostToDevice));
  ladder::bench::copy_to_device(qkv_device, qkv);
  const int first_splits = first_split_rule(heads, capacity, device.multiprocessors);

  const ladder::CudaStream stream;
  const cudaStream_t s = stream.get();
  const double row_bytes = static_cast<double>(B) * kC * sizeof(float);  // one [B, C] tensor
  struct Version {
    const char* name;
    bool appends;  // writes this step's k, v itself (the cache at p starts poisoned)
    double bytes;  // q (or qkv) in, cache rows read, k and v written, out
    std::function<void(float* keys, float* values)> launch;
  };
  const Version versions[kVersions] = {
      {"ch02 decode attention, valid length (launch_decode_attention)", false,
       row_bytes * (1 + 2 * length + 1),
       [&](float* keys_cache, float* values_cache) {
         ladder::launch_decode_attention(qkv_device, 3 * kC, keys_cache, values_cache, out_device,
                                         B, length, capacity, kHeads, kC, s);
       }},
      {"ch04 static cache, every cached position, masked", false,
       row_bytes * (1 + 2 * capacity + 1),
       [&](float* keys_cache, float* values_cache) {
         ladder::launch_static_cache_attention(qkv_device, 3 * kC, keys_cache, values_cache, cursor,
                                               capacity, out_device, B, kHeads, kC, s);
       }},
      {"ch05 first: fused, splits from the SM count (6123541)", true,
       row_bytes * (3 + 2 * (length - 1) + 2 + 1),
       [&](float* keys_cache, float* values_cache) {
         first_fused_decode_attention_kernel<4, 2>
             <<<dim3(static_cast<unsigned int>(heads), static_cast<unsigned int>(first_splits)),
                kFirstFusedThreads, 0, s>>>(qkv_device, keys_cache, values_cache, cursor, capacity,
                                            out_device, first_workspace, first_splits, kHeads, kC);
         CUDA_CHECK_LAUNCH(s);
       }},
      {"ch05 now: fused, a block per 128 positions (launch_fused_decode_attention)", true,
       row_bytes * (3 + 2 * (length - 1) + 2 + 1),
       [&](float* keys_cache, float* values_cache) {
         ladder::launch_fused_decode_attention(qkv_device, keys_cache, values_cache, cursor,
                                               capacity, out_device, fused_workspace, B, kHeads, kC,
                                               s);
       }},
  };
  std::printf("version %-56s  check against the CPU     GPU time   bandwidth\n", "");
  for (int v = 1; v <= kVersions; ++v) {
    if (arguments.version != 0 && arguments.version != v) continue;
    const Version& version = versions[v - 1];
    // Fresh state for the check: the cache as the reference saw it, or with this step's
    // slot poisoned for the versions that append; the output poisoned; zero counters.
    ladder::bench::copy_to_device(keys_device, keys);
    ladder::bench::copy_to_device(values_device, values);
    if (version.appends) {
      for (int head = 0; head < heads; ++head) {
        const std::size_t slot = (static_cast<std::size_t>(head) * capacity + position) * kD;
        ladder::bench::poison(keys_device + slot, kD);
        ladder::bench::poison(values_device + slot, kD);
      }
    }
    ladder::bench::poison(out_device, expected.size());
    CUDA_CHECK(cudaMemset(fused_workspace, 0, fused_bytes));
    CUDA_CHECK(cudaMemset(first_workspace.arrivals, 0, heads * sizeof(int)));
    version.launch(keys_device, values_device);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out = ladder::bench::copy_to_host(out_device, expected.size());
    double error = ladder::reference::relative_error(out.data(), expected.data(), out.size());
    if (version.appends) {
      const std::vector<float> cache = ladder::bench::copy_to_host(keys_device, cache_floats);
      error = std::max(error,
                       ladder::reference::relative_error(cache.data(), keys.data(), cache.size()));
    }
    ladder::bench::require_close(v, error, kTolerance);
    for (int layer = 1; layer < kLayers; ++layer) {
      CUDA_CHECK(cudaMemcpy(layer_keys[layer], keys_device, cache_floats * sizeof(float),
                            cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaMemcpy(layer_values[layer], values_device, cache_floats * sizeof(float),
                            cudaMemcpyDeviceToDevice));
    }
    const double microseconds = ladder::bench::microseconds_per_launch(s, [&](int launch) {
      version.launch(layer_keys[launch % kLayers], layer_values[launch % kLayers]);
    });
    ladder::bench::print_version_row(v, version.name, error, microseconds, version.bytes);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ladder::bench::run_bench("attention_history", [&] { return run(argc, argv); });
}
