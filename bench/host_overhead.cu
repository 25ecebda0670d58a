// bench/host_overhead.cu - what each call of a decode step costs the HOST.
//
// A decode step at the default workload's sizes is a hundred or more launches of kernels
// that run for a few microseconds each. If the host needs longer to enqueue a call than the GPU
// needs to run it, the GPU waits between kernels, whatever the kernels' speed: the
// step is bound by the host's launch rate. This program times, on the host, the
// enqueueing of every kind of call the chapters make, at GPT-2 small shapes (B = 32
// unless --batch says otherwise): 200 calls back to back without waiting for the GPU,
// the median of 7 such rounds, divided by 200. Compare the column with the GPU time of
// the same kernels (any chapter's --kernel-profile) to see which side is the bottleneck.
//
// Run:  build/current/bench/host_overhead [--batch B]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "common/benchmark.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_stream.hpp"
#include "common/device_allocator.hpp"
#include "common/device_info.hpp"
#include "common/nvtx.hpp"
#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/decode_position.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"

namespace {

constexpr int kCallsPerRound = 200;  // well inside the launch queue: the host never waits
constexpr int kRounds = 7;
constexpr int kC = 768;  // GPT-2 small
constexpr int kH = 12;
constexpr int kCapacity = 101;  // N = 100 with a BOS prompt
constexpr int kPosition = 50;   // halfway through the generation

// The shortest kernel there is: what any launch costs before it does anything.
__global__ void empty_kernel() {}

/// Host microseconds per call: kRounds rounds of kCallsPerRound calls, each round
/// timed from the first call to the return of the last (no synchronization inside).
double host_microseconds_per_call(cudaStream_t stream, const std::function<void()>& call) {
  for (int i = 0; i < 20; ++i) call();  // warm-up: first-launch costs, cuBLASLt plans
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> per_call;
  for (int round = 0; round < kRounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCallsPerRound; ++i) call();
    const auto stop = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double, std::micro>(stop - start).count() /
                       kCallsPerRound);
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return ladder::summarize(per_call).median;
}

int run(int argc, char** argv) {
  const int B = ladder::bench::parse_batch(argc, argv, "host_overhead");
  std::printf("%s\n", ladder::device_banner(ladder::query_device_info()).c_str());
  const ladder::CudaStream stream;
  const cudaStream_t s = stream.get();
  ladder::bench::DeviceScratch scratch;

  float* x = scratch.floats(static_cast<std::size_t>(B) * 4 * kC);
  float* residual = scratch.floats(static_cast<std::size_t>(B) * kC);
  float* out = scratch.floats(static_cast<std::size_t>(B) * 4 * kC);
  float* qkv = scratch.floats(static_cast<std::size_t>(B) * 3 * kC);
  float* weight = scratch.floats(static_cast<std::size_t>(kC) * 4 * kC);
  float* bias = scratch.floats(4 * kC);
  const std::size_t cache_size = static_cast<std::size_t>(B) * kCapacity * kC;
  float* keys = scratch.floats(cache_size);
  float* values = scratch.floats(cache_size);
  float* grown_keys = scratch.floats(cache_size);
  float* grown_values = scratch.floats(cache_size);
  auto* workspace = scratch.floats(
      ladder::fused_decode_attention_workspace_bytes(B, kH, kC, kCapacity) / sizeof(float) + 1);
  auto* cursor = reinterpret_cast<ladder::DecodePosition*>(scratch.floats(2));
  const ladder::DecodePosition at_position{0, kPosition};
  CUDA_CHECK(cudaMemcpy(cursor, &at_position, sizeof(at_position), cudaMemcpyHostToDevice));
  float* lt_workspace =
      scratch.floats(ladder::LtMatmul::kRecommendedWorkspaceBytes / sizeof(float));
  ladder::LtMatmul lt(lt_workspace, ladder::LtMatmul::kRecommendedWorkspaceBytes);
  ladder::LtMatmul lt_in_kernel(lt_workspace, ladder::LtMatmul::kRecommendedWorkspaceBytes,
                                /*allow_tf32=*/false, ladder::SplitKReduction::kInsideTheKernel);
  ladder::LtMatmul lt_no_split(lt_workspace, ladder::LtMatmul::kRecommendedWorkspaceBytes,
                               /*allow_tf32=*/false, ladder::SplitKReduction::kNoSplit);
  std::unique_ptr<ladder::DeviceAllocator> caching = ladder::make_device_allocator("caching");
  std::unique_ptr<ladder::DeviceAllocator> expandable = ladder::make_device_allocator("expandable");
  int flag_host = 0;
  int* pinned_flag = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned_flag, sizeof(int)));
  const std::unique_ptr<int, decltype(&cudaFreeHost)> pinned_guard(pinned_flag, &cudaFreeHost);
  const float eps = 1e-5f;
  const std::size_t activation_bytes = static_cast<std::size_t>(B) * kC * sizeof(float);

  struct Case {
    const char* name;
    std::function<void()> call;
  };
  const std::vector<Case> cases = {
      {"empty kernel <<<1, 32>>>", [&] { empty_kernel<<<1, 32, 0, s>>>(); }},
      {"launch_add_bias [B, 3C]", [&] { ladder::launch_add_bias(qkv, bias, B, 3 * kC, s); }},
      {"launch_layernorm [B, C]",
       [&] { ladder::launch_layernorm(residual, bias, bias, out, B, kC, eps, s); }},
      {"launch_residual_layernorm [B, C]",
       [&] { ladder::launch_residual_layernorm(residual, x, bias, bias, out, B, kC, eps, s); }},
      {"launch_grow_kv_cache (L = 50)",
       [&] {
         ladder::launch_grow_kv_cache(qkv, keys, values, grown_keys, grown_values, kPosition, B, kH,
                                      kC, s);
       }},
      {"launch_decode_attention (L = 51)",
       [&] {
         ladder::launch_decode_attention(qkv, 3 * kC, keys, values, out, B, kPosition + 1,
                                         kCapacity, kH, kC, s);
       }},
      {"launch_fused_decode_attention (p = 50)",
       [&] {
         ladder::launch_fused_decode_attention(qkv, keys, values, cursor, kCapacity, out, workspace,
                                               B, kH, kC, s);
       }},
      {"cuBLASLt: LtMatmul::linear C -> 3C, bias",
       [&] { lt.linear(x, weight, bias, out, B, kC, 3 * kC, ladder::LinearEpilogue::kBias, s); }},
      {"cuBLASLt: LtMatmul::linear C -> 4C, bias + GELU",
       [&] {
         lt.linear(x, weight, bias, out, B, kC, 4 * kC, ladder::LinearEpilogue::kBiasGelu, s);
       }},
      {"cuBLASLt, split-K summed in the kernel: C -> 3C, bias",
       [&] {
         lt_in_kernel.linear(x, weight, bias, out, B, kC, 3 * kC, ladder::LinearEpilogue::kBias, s);
       }},
      {"cuBLASLt, split-K summed in the kernel: C -> 4C, bias + GELU",
       [&] {
         lt_in_kernel.linear(x, weight, bias, out, B, kC, 4 * kC, ladder::LinearEpilogue::kBiasGelu,
                             s);
       }},
      {"cuBLASLt, no split: C -> 3C, bias",
       [&] {
         lt_no_split.linear(x, weight, bias, out, B, kC, 3 * kC, ladder::LinearEpilogue::kBias, s);
       }},
      {"cuBLASLt, no split: C -> 4C, bias + GELU",
       [&] {
         lt_no_split.linear(x, weight, bias, out, B, kC, 4 * kC, ladder::LinearEpilogue::kBiasGelu,
                            s);
       }},
      {"cudaMemcpyAsync device to device, [B, C]",
       [&] {
         CUDA_CHECK(cudaMemcpyAsync(out, residual, activation_bytes, cudaMemcpyDeviceToDevice, s));
       }},
      {"caching allocator: allocate + free [B, C]",
       [&] { ladder::DeviceBuffer buffer(*caching, activation_bytes, s); }},
      {"expandable allocator: allocate + free [B, C]",
       [&] { ladder::DeviceBuffer buffer(*expandable, activation_bytes, s); }},
      {"NVTX range push + pop", [&] { ladder::NvtxRange range("bench"); }},
      {"flag to pageable host + cudaStreamSynchronize",
       [&] {
         CUDA_CHECK(cudaMemcpyAsync(&flag_host, cursor, sizeof(int), cudaMemcpyDeviceToHost, s));
         CUDA_CHECK(cudaStreamSynchronize(s));
       }},
      {"flag to pinned host + cudaStreamSynchronize",
       [&] {
         CUDA_CHECK(cudaMemcpyAsync(pinned_flag, cursor, sizeof(int), cudaMemcpyDeviceToHost, s));
         CUDA_CHECK(cudaStreamSynchronize(s));
       }},
  };

  std::printf(
      "\nHost time to enqueue one call, B = %d, GPT-2 small shapes (median of %d rounds "
      "of %d calls):\n\n| call | host us per call |\n|---|--:|\n",
      B, kRounds, kCallsPerRound);
  for (const Case& test_case : cases)
    std::printf("| %s | %.2f |\n", test_case.name, host_microseconds_per_call(s, test_case.call));
  std::printf("\n(The two flag reads include the round trip to the GPU and back.)\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ladder::bench::run_bench("host_overhead", [&] { return run(argc, argv); });
}
