// bench/epilogue_fusion.cu - does fusing bias and GELU into the matmul pay, shape by
// shape? Chapter 05's measured case of "a bigger fused kernel can be slower".
//
// An epilogue runs inside the matmul kernel, on the product still in registers, so it
// saves a launch and a round trip of the output through memory. But it also narrows
// cuBLASLt's choice: only some of its kernels implement a given epilogue, and the one
// the heuristic returns for the fused problem need not be the one it returns for the
// plain product. This program times, on the GPU (CUDA events, the median of 50 repeats
// of 10 calls after warm-up), each of GPT-2 small's four decode products at B rows:
//   cuBLASLt plain + add_bias (+ gelu)      bias (and GELU) in launches of their own
//   cuBLASLt bias epilogue (+ gelu)         chapters 01-04: bias fused, as PyTorch's addmm
//   cuBLASLt bias + GELU epilogue           chapter 05: one launch (c_fc only)
// the last two under each SplitKReduction policy - cuBLASLt's choice (which at these
// sizes splits the inner dimension and sums the slices in a second kernel), the slices
// summed inside the kernel, and no split at all - and prints the microseconds per product. Weights
// and inputs are zero: the time of a dense fp32 product does not depend on the values.
//
// Run:  build/current/bench/epilogue_fusion [--batch B]
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>

#include "bench/bench_support.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/cuda_stream.hpp"
#include "common/device_info.hpp"
#include "kernels/elementwise.cuh"
#include "kernels/matmul.cuh"

namespace {

constexpr int kCallsPerRepeat = 10;
constexpr int kWarmupRepeats = 5;
constexpr int kTimedRepeats = 50;
constexpr int kC = 768;  // GPT-2 small

int run(int argc, char** argv) {
  const int B = ladder::bench::parse_batch(argc, argv, "epilogue_fusion");
  std::printf("%s\n", ladder::device_banner(ladder::query_device_info()).c_str());
  const ladder::CudaStream stream;
  const cudaStream_t s = stream.get();
  ladder::bench::DeviceScratch scratch;
  float* x = scratch.floats(static_cast<std::size_t>(B) * 4 * kC);
  float* out = scratch.floats(static_cast<std::size_t>(B) * 4 * kC);
  float* weight = scratch.floats(static_cast<std::size_t>(kC) * 4 * kC);
  float* bias = scratch.floats(4 * kC);
  float* lt_workspace =
      scratch.floats(ladder::LtMatmul::kRecommendedWorkspaceBytes / sizeof(float));
  ladder::LtMatmul lt(lt_workspace, ladder::LtMatmul::kRecommendedWorkspaceBytes);
  ladder::LtMatmul lt_in_kernel(lt_workspace, ladder::LtMatmul::kRecommendedWorkspaceBytes,
                                /*allow_tf32=*/false, ladder::SplitKReduction::kInsideTheKernel);
  ladder::LtMatmul lt_no_split(lt_workspace, ladder::LtMatmul::kRecommendedWorkspaceBytes,
                               /*allow_tf32=*/false, ladder::SplitKReduction::kNoSplit);
  ladder::LtMatmul* const policies[] = {&lt, &lt_in_kernel, &lt_no_split};
  using ladder::LinearEpilogue;

  const auto microseconds = [&](const std::function<void()>& call) {
    const double seconds = ladder::median_stream_seconds(s, kWarmupRepeats, kTimedRepeats, [&] {
      for (int i = 0; i < kCallsPerRepeat; ++i) call();
    });
    return seconds * 1e6 / kCallsPerRepeat;
  };

  struct Product {
    const char* name;
    int in;
    int out;
    bool gelu;
  };
  const Product products[] = {{"c_attn   C -> 3C", kC, 3 * kC, false},
                              {"c_proj   C -> C", kC, kC, false},
                              {"c_fc     C -> 4C (+ GELU)", kC, 4 * kC, true},
                              {"mlp proj 4C -> C", 4 * kC, kC, false}};

  std::printf("\nGPU us per product at B = %d rows, fp32 (median of %d repeats of %d calls):\n\n",
              B, kTimedRepeats, kCallsPerRepeat);
  std::printf(
      "| product | cuBLASLt + add_bias (+ gelu) | bias epilogue (+ gelu) | "
      "split-K summed in the kernel | no split | bias + GELU epilogue | "
      "split-K summed in the kernel | no split |\n"
      "|---|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const Product& p : products) {
    const auto gelu = [&] {
      if (p.gelu) ladder::launch_gelu(out, out, B, p.out, s);
    };
    std::printf("| %s | %.1f", p.name, microseconds([&] {
                  lt.linear(x, weight, nullptr, out, B, p.in, p.out, LinearEpilogue::kNone, s);
                  ladder::launch_add_bias(out, bias, B, p.out, s);
                  gelu();
                }));
    for (ladder::LtMatmul* matmul : policies) {
      std::printf(" | %.1f", microseconds([&] {
                    matmul->linear(x, weight, bias, out, B, p.in, p.out, LinearEpilogue::kBias, s);
                    gelu();
                  }));
    }
    for (ladder::LtMatmul* matmul : policies) {
      if (!p.gelu) {
        std::printf(" | -");
        continue;
      }
      std::printf(" | %.1f", microseconds([&] {
                    matmul->linear(x, weight, bias, out, B, p.in, p.out, LinearEpilogue::kBiasGelu,
                                   s);
                  }));
    }
    std::printf(" |\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ladder::bench::run_bench("epilogue_fusion", [&] { return run(argc, argv); });
}
