// bench/layernorm_history.cu - the LayerNorm kernels of the ladder, version by version,
// each checked against the CPU reference and then timed.
//
//   build/current/bench/layernorm_history          every version
//   build/current/bench/layernorm_history 4        version 4 only
//   build/current/bench/layernorm_history --batch 1
//
// A decode step normalizes B rows (32 by default) of C = 768 features. Every version is
// compared with reference::layernorm (after reference::add for the residual versions;
// relative error <= 1e-4, as the tests ask) on random inputs from a fixed seed, and is
// timed as one launch (the median of CUDA-graph replays, bench/kernel_history.hpp; the
// rows stay in L2 between launches, as in a step, where the kernel before wrote them). GB/s
// is the bytes it must move (rows and parameters, each read or written once) over that time.
//
// Versions (the ladder's order):
//   1  warp per row, eight rows to a block: LayerNorm (chapters 01-04 as first written)
//   2  warp per row: residual add + LayerNorm (chapter 05 as first written)
//      - both below, as kernels/layernorm.cu first had them (since replaced by 3 and 4):
//      at B = 32 that is 4 blocks on the whole GPU, and each lane loads the weight and
//      bias only after both reductions
//   3  block per row, a thread per 16-byte pack, every load issued before the first
//      reduction: LayerNorm (launch_layernorm)
//   4  block per row: residual add + LayerNorm (launch_residual_layernorm, chapters 05-06)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "bench/bench_support.hpp"
#include "bench/kernel_history.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_stream.hpp"
#include "common/device_info.hpp"
#include "common/reference.hpp"
#include "kernels/device_primitives.cuh"
#include "kernels/layernorm.cuh"

namespace {

using ladder::kWarpSize;
using ladder::load_packed;
using ladder::PackedFloats;
using ladder::store_packed;

// ---------------------------------------------------------------- versions 1, 2 (as first written)

constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kWarpRowThreads = kRowsPerBlock * kWarpSize;

// Version 1: warp w of block b normalizes row b * 8 + w; lane l takes packs l, l + 32,
// ... and reads the row three times (sum, squared deviations, output; the second and
// third from L1).
template <int kWidth>
__global__ void warp_row_layernorm_kernel(const float* x, const float* weight, const float* bias,
                                          float* out, int rows, int C, float eps) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= rows) return;
  const int packs = C / kWidth;
  const float* x_row = x + static_cast<std::size_t>(row) * C;
  float* out_row = out + static_cast<std::size_t>(row) * C;

  float sum = 0.0f;
  for (int i = lane; i < packs; i += kWarpSize) {
    const PackedFloats<kWidth> v = load_packed<kWidth>(x_row, i);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sum += v.values[k];
  }
  const float mean = ladder::warp_sum(sum) / static_cast<float>(C);

  float squares = 0.0f;
  for (int i = lane; i < packs; i += kWarpSize) {
    const PackedFloats<kWidth> v = load_packed<kWidth>(x_row, i);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float deviation = v.values[k] - mean;
      squares += deviation * deviation;
    }
  }
  const float inverse_std = rsqrtf(ladder::warp_sum(squares) / static_cast<float>(C) + eps);

  for (int i = lane; i < packs; i += kWarpSize) {
    const PackedFloats<kWidth> v = load_packed<kWidth>(x_row, i);
    const PackedFloats<kWidth> w = load_packed<kWidth>(weight, i);
    const PackedFloats<kWidth> b = load_packed<kWidth>(bias, i);
    PackedFloats<kWidth> result;
#pragma unroll
    for (int k = 0; k < kWidth; ++k)
      result.values[k] = (v.values[k] - mean) * inverse_std * w.values[k] + b.values[k];
    store_packed<kWidth>(out_row, i, result);
  }
}

// Version 2: as version 1, with residual[r] += x[r] first and the summed row kept in
// registers (kPacksPerLane packs a lane), so it is read once and written once.
template <int kWidth, int kPacksPerLane>
__global__ void warp_row_residual_layernorm_kernel(float* residual, const float* x,
                                                   const float* weight, const float* bias,
                                                   float* out, int rows, int C, float eps) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= rows) return;
  const int packs = C / kWidth;
  float* residual_row = residual + static_cast<std::size_t>(row) * C;
  const float* x_row = x + static_cast<std::size_t>(row) * C;
  float* out_row = out + static_cast<std::size_t>(row) * C;

  PackedFloats<kWidth> summed[kPacksPerLane];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacksPerLane; ++k) {
    const int i = lane + k * kWarpSize;
    if (i < packs) {
      summed[k] = load_packed<kWidth>(residual_row, i);
      const PackedFloats<kWidth> branch = load_packed<kWidth>(x_row, i);
#pragma unroll
      for (int j = 0; j < kWidth; ++j) {
        summed[k].values[j] += branch.values[j];
        sum += summed[k].values[j];
      }
      store_packed<kWidth>(residual_row, i, summed[k]);
    }
  }
  const float mean = ladder::warp_sum(sum) / static_cast<float>(C);

  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacksPerLane; ++k) {
    if (lane + k * kWarpSize < packs) {
#pragma unroll
      for (int j = 0; j < kWidth; ++j) {
        const float deviation = summed[k].values[j] - mean;
        squares += deviation * deviation;
      }
    }
  }
  const float inverse_std = rsqrtf(ladder::warp_sum(squares) / static_cast<float>(C) + eps);

#pragma unroll
  for (int k = 0; k < kPacksPerLane; ++k) {
    const int i = lane + k * kWarpSize;
    if (i < packs) {
      const PackedFloats<kWidth> w = load_packed<kWidth>(weight, i);
      const PackedFloats<kWidth> b = load_packed<kWidth>(bias, i);
      PackedFloats<kWidth> result;
#pragma unroll
      for (int j = 0; j < kWidth; ++j)
        result.values[j] = (summed[k].values[j] - mean) * inverse_std * w.values[j] + b.values[j];
      store_packed<kWidth>(out_row, i, result);
    }
  }
}

// ---------------------------------------------------------------- the bench

constexpr int kC = 768;                            // GPT-2 small
constexpr int kPacksPerLane = kC / 4 / kWarpSize;  // 6 packs of 4 floats a lane
constexpr float kEps = 1e-5f;
constexpr double kTolerance = 1e-4;
constexpr int kVersions = 4;

int run(int argc, char** argv) {
  const ladder::bench::HistoryArguments arguments =
      ladder::bench::parse_history_arguments(argc, argv, "layernorm_history", kVersions,
                                             /*takes_new_tokens=*/false);
  std::printf("%s\n", ladder::device_banner(ladder::query_device_info()).c_str());
  const int rows = arguments.batch;
  std::printf("LayerNorm, GPT-2 small: %d rows of C = %d\n\n", rows, kC);

  const std::size_t count = static_cast<std::size_t>(rows) * kC;
  const std::vector<float> x = ladder::bench::random_floats(count, 1);
  const std::vector<float> residual = ladder::bench::random_floats(count, 2);
  std::vector<float> weight = ladder::bench::random_floats(kC, 3);
  std::vector<float> bias = ladder::bench::random_floats(kC, 4);
  for (float& w : weight) w += 1.0f;  // around GPT-2's initial 1
  std::vector<float> expected(count);
  ladder::reference::layernorm(x.data(), weight.data(), bias.data(), expected.data(), rows, kC,
                               kEps);
  std::vector<float> summed(count);
  ladder::reference::add(residual.data(), x.data(), summed.data(), count);
  std::vector<float> expected_residual(count);
  ladder::reference::layernorm(summed.data(), weight.data(), bias.data(), expected_residual.data(),
                               rows, kC, kEps);

  ladder::bench::DeviceScratch scratch;
  float* x_device = scratch.floats(count);
  float* residual_device = scratch.floats(count);
  float* weight_device = scratch.floats(kC);
  float* bias_device = scratch.floats(kC);
  float* out_device = scratch.floats(count);
  ladder::bench::copy_to_device(x_device, x);
  ladder::bench::copy_to_device(weight_device, weight);
  ladder::bench::copy_to_device(bias_device, bias);

  const ladder::CudaStream stream;
  const cudaStream_t s = stream.get();
  const unsigned int warp_row_blocks =
      static_cast<unsigned int>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  const double tensor = static_cast<double>(count) * sizeof(float);  // one [rows, C] tensor
  const double parameters = 2.0 * kC * sizeof(float);                // weight and bias
  struct Version {
    const char* name;
    bool residual;  // residual add first: residual in place, two more tensors moved
    std::function<void()> launch;
  };
  const Version versions[kVersions] = {
      {"warp per row: LayerNorm (6123541)", false,
       [&] {
         warp_row_layernorm_kernel<4><<<warp_row_blocks, kWarpRowThreads, 0, s>>>(
             x_device, weight_device, bias_device, out_device, rows, kC, kEps);
         CUDA_CHECK_LAUNCH(s);
       }},
      {"warp per row: residual + LayerNorm (6123541)", true,
       [&] {
         warp_row_residual_layernorm_kernel<4, kPacksPerLane>
             <<<warp_row_blocks, kWarpRowThreads, 0, s>>>(residual_device, x_device, weight_device,
                                                          bias_device, out_device, rows, kC, kEps);
         CUDA_CHECK_LAUNCH(s);
       }},
      {"block per row: LayerNorm (launch_layernorm)", false,
       [&] {
         ladder::launch_layernorm(x_device, weight_device, bias_device, out_device, rows, kC, kEps,
                                  s);
       }},
      {"block per row: residual + LayerNorm (launch_residual_layernorm)", true,
       [&] {
         ladder::launch_residual_layernorm(residual_device, x_device, weight_device, bias_device,
                                           out_device, rows, kC, kEps, s);
       }},
  };
  std::printf("version %-56s  check against the CPU     GPU time   bandwidth\n", "");
  for (int v = 1; v <= kVersions; ++v) {
    if (arguments.version != 0 && arguments.version != v) continue;
    const Version& version = versions[v - 1];
    ladder::bench::copy_to_device(residual_device, residual);
    ladder::bench::poison(out_device, count);
    version.launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> out = ladder::bench::copy_to_host(out_device, count);
    const std::vector<float>& reference = version.residual ? expected_residual : expected;
    double error = ladder::reference::relative_error(out.data(), reference.data(), count);
    if (version.residual) {
      const std::vector<float> sum = ladder::bench::copy_to_host(residual_device, count);
      error = std::max(error, ladder::reference::relative_error(sum.data(), summed.data(), count));
    }
    ladder::bench::require_close(v, error, kTolerance);
    // Timing repeats the residual add in place: the values drift, the work does not.
    const double microseconds =
        ladder::bench::microseconds_per_launch(s, [&](int) { version.launch(); });
    const double bytes = (version.residual ? 4 : 2) * tensor + parameters;
    ladder::bench::print_version_row(v, version.name, error, microseconds, bytes);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ladder::bench::run_bench("layernorm_history", [&] { return run(argc, argv); });
}
