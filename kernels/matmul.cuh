// kernels/matmul.cuh - the model's matrix products through cuBLASLt: the Conv1D layers
// (out = x W + b, the bias and optionally GPT-2's GELU applied in the matmul's epilogue)
// and the tied LM head (logits = x wte^T).
//
// cuBLASLt is column-major, the repository is row-major. A row-major matrix M [r, c]
// occupies memory exactly like the column-major matrix M^T [c, r] (leading dimension
// c). So instead of asking for Y = X W we ask for its transpose,
//   Y^T = W^T X^T,
// whose three operands are our buffers read column-major, without copying anything:
//   W [in, out] row-major  = W^T (out x in, leading dimension out) column-major,
//   X [rows, in] row-major = X^T (in x rows, leading dimension in),
//   Y [rows, out]          = Y^T (out x rows, leading dimension out).
// In cuBLASLt's terms (matrix layouts: rows, columns, leading dimension): A = W^T
// (out x in, ld out), B = X^T (in x rows, ld in), D = Y^T (out x rows, ld out). For
// the LM head, wte [V, C] row-major is wte^T (C x V, ld C) column-major; the product
// needs wte itself (V x C), hence op = T on A:
//   logits^T (V x rows) = wte (V x C) X^T (C x rows).
// The bias vector has one entry per row of D, i.e. per output feature: exactly a
// Conv1D bias.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <tuple>

namespace ladder {

// ---------------------------------------------------------------- cuBLASLt, fused epilogues

/// What cuBLASLt applies to the product before storing it, inside the matmul kernel,
/// so that the bias and the GELU need no launch (and no pass over the output) of their
/// own. Whether that is faster is for the profiler to say: the kernel cuBLASLt picks
/// for a fused epilogue need not be the one it picks for the plain product.
enum class LinearEpilogue {
  kNone,      ///< out = x W
  kBias,      ///< out = x W + bias                   (CUBLASLT_EPILOGUE_BIAS)
  kBiasGelu,  ///< out = gelu(x W + bias)             (CUBLASLT_EPILOGUE_GELU_BIAS)
};

/// How a split-K product may add up its partial sums. At decode sizes (a few rows)
/// cuBLASLt often cuts the inner dimension into slices computed by different blocks;
/// by default it may then write the slices to the workspace and sum them in a second
/// kernel (cublasLt::splitKreduce_kernel): one more launch per product, and on a host
/// that needs ~5 us per launch that launch can cost more than the product saves.
enum class SplitKReduction {
  kAny,              ///< whatever the heuristic prefers (cuBLASLt's default)
  kInsideTheKernel,  ///< no separate reduction kernel: no split, or slices added in
                     ///< the output in a fixed order (CUBLASLT_REDUCTION_SCHEME_INPLACE)
  kNoSplit           ///< the inner dimension is not split: one kernel, and each output
                     ///< is summed by one block (no reduction scheme allowed)
};

/// Matrix products through cuBLASLt, with fused epilogues, for one stream at a time.
///
/// GELU: the cuBLASLt documentation only says "GELU". It is the tanh approximation
/// GPT-2 uses, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): PyTorch's fused
/// addmm + GELU runs on this epilogue, and its CUDA tests compare it with
/// gelu(approximate="tanh") (pytorch/pytorch#104061). How exactly cuBLASLt evaluates
/// the tanh is not documented; tests/gpu/test_matmul.cpp holds kBiasGelu to the same
/// 1e-5 as the rest of the chapter against reference::gelu. Where that fails, use
/// kBias followed by launch_gelu (elementwise.cuh), which computes GPT-2's formula
/// with tanhf.
///
/// Precision: plain fp32 (CUBLAS_COMPUTE_32F: no TF32, no BF16x9 emulation) unless
/// allow_tf32, which selects CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores, inputs rounded
/// to a 10-bit mantissa, ~1e-3 relative error).
///
/// Plans: cuBLASLt picks its kernel with a heuristic query, which costs far more than
/// a decode step's matmul. The first product of each shape - (rows, in, out, epilogue,
/// the alignment of each pointer) - builds its descriptors and asks the heuristic once;
/// later products of that shape reuse them, so a decode loop queries nothing after
/// its first step. One algorithm per shape also keeps results bitwise reproducible.
/// On a stream that is capturing a CUDA graph a missing plan is an error (CudaError):
/// the heuristic is asked before the capture, by running each product once uncaptured,
/// so that the capture records only cublasLtMatmul's kernels.
///
/// Workspace: caller-owned, 256-byte aligned, used by every product (split-K kernels
/// keep their partial sums there). Two products running at once on one workspace
/// would overwrite each other's partial sums, so keep one LtMatmul (and one
/// workspace) per stream. Not thread-safe.
class LtMatmul {
 public:
  /// cuBLAS's workspace recommendation for Hopper: 32 MiB (smaller GPUs need 4 MiB).
  static constexpr std::size_t kRecommendedWorkspaceBytes = std::size_t{32} << 20;

  /// Creates the cuBLASLt handle (throws ladder::CudaError when it cannot start).
  /// workspace: [workspace, workspace + workspace_bytes) on the device, 256-byte
  /// aligned, alive as long as this object is used; bytes = 0 (null) allows no
  /// workspace, which rules out some kernels. Throws std::invalid_argument on a null or
  /// misaligned workspace with bytes > 0.
  /// `reduction` restricts the kernels the heuristic may return (see SplitKReduction).
  LtMatmul(void* workspace, std::size_t workspace_bytes, bool allow_tf32 = false,
           SplitKReduction reduction = SplitKReduction::kAny);
  ~LtMatmul();
  LtMatmul(LtMatmul&& other) noexcept;
  LtMatmul& operator=(LtMatmul&& other) noexcept;
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  /// out = epilogue(x @ weight [+ bias]) with x [rows, in_features], weight
  /// [in_features, out_features] (GPT-2's Conv1D layout), bias [out_features] (null
  /// exactly when epilogue is kNone), out [rows, out_features]; fp32 row-major, on
  /// `stream`. out must not overlap x, weight or bias.
  /// Throws std::invalid_argument on a null pointer, a bias given to kNone, a size <= 0
  /// or a moved-from object; ladder::CudaError when cuBLASLt has no kernel for it.
  void linear(const float* x, const float* weight, const float* bias, float* out, int rows,
              int in_features, int out_features, LinearEpilogue epilogue, cudaStream_t stream);

  /// logits = x @ wte^T, the tied LM head: x [rows, C], wte [V, C], logits [rows, V].
  /// Throws as linear().
  void lm_head(const float* x, const float* wte, float* logits, int rows, int C, int V,
               cudaStream_t stream);

  /// How many shapes have a plan (a heuristic query each): tests check the cache.
  std::size_t cached_plans() const { return plans_.size(); }
  bool allow_tf32() const { return allow_tf32_; }

 private:
  /// Everything the heuristic's choice depends on.
  struct PlanKey {
    int rows;
    int inner;  ///< in_features (C for the LM head)
    int outer;  ///< out_features (V for the LM head)
    bool transposed_weight;
    LinearEpilogue epilogue;
    int weight_alignment;  ///< bytes, a power of two <= 256
    int input_alignment;
    int bias_alignment;
    int output_alignment;
    bool operator<(const PlanKey& other) const {
      const auto fields = [](const PlanKey& key) {
        return std::tie(key.rows, key.inner, key.outer, key.transposed_weight, key.epilogue,
                        key.weight_alignment, key.input_alignment, key.bias_alignment,
                        key.output_alignment);
      };
      return fields(*this) < fields(other);
    }
  };
  struct Plan;  // descriptors and the chosen algorithm (matmul.cu)

  const Plan& plan_for(const PlanKey& key, const float* bias, cudaStream_t stream);
  void run(const char* caller, const float* input, const float* weight, const float* bias,
           float* out, int rows, int inner, int outer, bool transposed_weight,
           LinearEpilogue epilogue, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  bool allow_tf32_ = false;
  SplitKReduction reduction_ = SplitKReduction::kAny;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace ladder
