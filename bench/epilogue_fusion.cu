// bench/epilogue_fusion.cu - does fusing bias and GELU into the matmul pay, shape by
// shape? Chapter 05's measured case of "a bigger fused kernel can be slower".
//
// An epilogue runs inside the matmul kernel, on the product still in registers, so it
// saves a launch and a round trip of the output through memory. But it also narrows
// cuBLASLt's choice: only some of its kernels implement a given epilogue, and the one
// the heuristic returns for the fused problem need not be the one it returns for the
// plain product. This program times, on the GPU (CUDA events, the median of 50 repeats
// of 10 calls after warm-up), each of GPT-2 small's four decode products at B rows:
//   cublasSgemm + add_bias (+ gelu)        chapter 04's three launches
//   cuBLASLt plain + add_bias (+ gelu)      the same, the product through cuBLASLt
//   cuBLASLt bias epilogue (+ gelu)         bias fused
//   cuBLASLt bias + GELU epilogue           chapter 05's one launch (c_fc only)
// and prints the microseconds per product. Weights and inputs are zero: the time of a
// dense fp32 product does not depend on the values.
//
// Run:  build/release/bench/epilogue_fusion [--batch B]
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

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
  float* cublas_workspace =
      scratch.floats(ladder::CublasHandle::kRecommendedWorkspaceBytes / sizeof(float));
  float* lt_workspace =
      scratch.floats(ladder::LtMatmul::kRecommendedWorkspaceBytes / sizeof(float));
  ladder::CublasHandle cublas(s, cublas_workspace, ladder::CublasHandle::kRecommendedWorkspaceBytes,
                              /*allow_tf32=*/false);
  ladder::LtMatmul lt(lt_workspace, ladder::LtMatmul::kRecommendedWorkspaceBytes);
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
      "| product | cublasSgemm + add_bias (+ gelu) | cuBLASLt + add_bias (+ gelu) | "
      "cuBLASLt bias epilogue (+ gelu) | cuBLASLt bias + GELU epilogue |\n"
      "|---|--:|--:|--:|--:|\n");
  for (const Product& p : products) {
    const auto gelu = [&] {
      if (p.gelu) ladder::launch_gelu(out, out, B, p.out, s);
    };
    const double sgemm = microseconds([&] {
      ladder::launch_linear(cublas, x, weight, out, B, p.in, p.out, s);
      ladder::launch_add_bias(out, bias, B, p.out, s);
      gelu();
    });
    const double lt_plain = microseconds([&] {
      lt.linear(x, weight, nullptr, out, B, p.in, p.out, LinearEpilogue::kNone, s);
      ladder::launch_add_bias(out, bias, B, p.out, s);
      gelu();
    });
    const double lt_bias = microseconds([&] {
      lt.linear(x, weight, bias, out, B, p.in, p.out, LinearEpilogue::kBias, s);
      gelu();
    });
    std::string fused = "-";
    if (p.gelu) {
      char text[32];
      std::snprintf(text, sizeof(text), "%.1f", microseconds([&] {
                      lt.linear(x, weight, bias, out, B, p.in, p.out, LinearEpilogue::kBiasGelu, s);
                    }));
      fused = text;
    }
    std::printf("| %s | %.1f | %.1f | %.1f | %s |\n", p.name, sgemm, lt_plain, lt_bias,
                fused.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ladder::bench::run_bench("epilogue_fusion", [&] { return run(argc, argv); });
}
