// kernels/matmul.cuh - the model's matrix products through cuBLAS: the Conv1D layers
// (out = x W) and the tied LM head (logits = x wte^T); and the same products through
// cuBLASLt with the bias (and GELU) fused into the matmul's epilogue.
//
// cuBLAS is column-major, the repository is row-major. A row-major matrix M [r, c]
// occupies memory exactly like the column-major matrix M^T [c, r] (leading dimension
// c). So instead of asking cuBLAS for Y = X W we ask for its transpose,
//   Y^T = W^T X^T,
// whose three operands are our buffers read column-major, without copying anything:
//   W [in, out] row-major  = W^T (out x in, leading dimension out) column-major,
//   X [rows, in] row-major = X^T (in x rows, leading dimension in),
//   Y [rows, out]          = Y^T (out x rows, leading dimension out).
// That is cublasSgemm(N, N, m = out, n = rows, k = in, W, out, X, in, Y, out).
// For the LM head, wte [V, C] row-major is wte^T (C x V) column-major; the product
// needs wte itself (V x C), hence op = T on it:
//   logits^T (V x rows) = wte (V x C) X^T (C x rows)
//   = cublasSgemm(T, N, m = V, n = rows, k = C, wte, C, X, C, logits, V).
// cuBLASLt takes the same operands as matrix layouts (rows, columns, leading
// dimension): A = W^T (out x in, ld out) or wte^T (C x V, ld C, transposed),
// B = X^T (in x rows, ld in), D = Y^T (out x rows, ld out). Its bias vector has one
// entry per row of D, i.e. per output feature: exactly a Conv1D bias.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <tuple>

namespace ladder {

/// A cuBLAS handle that owns its lifetime, remembers its stream and its workspace,
/// and fixes its math mode.
///
/// Precision: by default plain fp32 (CUBLAS_DEFAULT_MATH: FFMA on CUDA cores, no TF32,
/// no BF16x9 emulation), so every chapter can agree with the fp64-accumulating CPU
/// reference within 1e-5. allow_tf32 = true selects CUBLAS_TF32_TENSOR_OP_MATH
/// (inputs rounded to a 10-bit mantissa on tensor cores: faster, ~1e-3 relative error).
///
/// Workspace: cuBLAS results are bitwise reproducible only when a workspace is not
/// shared by concurrently running streams, so the workspace is given explicitly from
/// a caller-owned device buffer: one handle (and one workspace) per stream.
/// cublasSetStream() silently resets the workspace to cuBLAS's own pool; set_stream()
/// therefore re-applies the caller's workspace after every stream change.
class CublasHandle {
 public:
  /// cuBLAS's recommendation for Hopper: 32 MiB (smaller architectures need 4 MiB).
  static constexpr std::size_t kRecommendedWorkspaceBytes = std::size_t{32} << 20;

  /// Creates the handle (throws ladder::CudaError when cuBLAS cannot start, e.g. no GPU).
  explicit CublasHandle(bool allow_tf32 = false);
  /// The usual setup in one step: a handle on `stream` with a caller-owned workspace
  /// (see set_workspace() and set_stream()).
  CublasHandle(cudaStream_t stream, void* workspace, std::size_t workspace_bytes,
               bool allow_tf32 = false);
  ~CublasHandle();
  CublasHandle(CublasHandle&& other) noexcept;
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  /// Makes cuBLAS use [workspace, workspace + bytes) on this handle's streams. The
  /// buffer must stay alive while the handle is used and be 256-byte aligned
  /// (cudaMalloc's and the allocators' blocks are). bytes = 0 (workspace null) means
  /// no workspace at all: still deterministic, some kernels become unavailable.
  /// Throws std::invalid_argument on a misaligned or null buffer with bytes > 0.
  void set_workspace(void* workspace, std::size_t bytes);

  /// Binds the stream the next calls run on (no-op if it is already bound).
  void set_stream(cudaStream_t stream);

  cublasHandle_t get() const { return handle_; }
  bool allow_tf32() const { return allow_tf32_; }

 private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  bool has_workspace_ = false;  ///< set_workspace() was called
  bool allow_tf32_ = false;
};

/// out = x @ weight, without bias (GPT-2's Conv1D layout): x [rows, in_features],
/// weight [in_features, out_features], out [rows, out_features], fp32 row-major.
/// Runs on `stream` (bound to the handle first). Throws std::invalid_argument on a null
/// pointer, a moved-from handle, or a size <= 0.
void launch_linear(CublasHandle& handle, const float* x, const float* weight, float* out, int rows,
                   int in_features, int out_features, cudaStream_t stream);

/// logits = x @ wte^T, the LM head tied to the token embedding: x [rows, C],
/// wte [V, C], logits [rows, V], fp32 row-major. Runs on `stream`.
/// Throws std::invalid_argument on a null pointer, a moved-from handle, or a size <= 0.
void launch_lm_head(CublasHandle& handle, const float* x, const float* wte, float* logits, int rows,
                    int C, int V, cudaStream_t stream);

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
///
/// Workspace: caller-owned, 256-byte aligned, used by every product; cuBLAS results
/// are reproducible only when no two concurrently running products share a workspace,
/// so keep one LtMatmul (and one workspace) per stream. Not thread-safe.
class LtMatmul {
 public:
  /// cuBLAS's recommendation for Hopper, as CublasHandle.
  static constexpr std::size_t kRecommendedWorkspaceBytes =
      CublasHandle::kRecommendedWorkspaceBytes;

  /// Creates the cuBLASLt handle (throws ladder::CudaError when it cannot start).
  /// workspace: [workspace, workspace + workspace_bytes) on the device, 256-byte
  /// aligned, alive as long as this object is used; bytes = 0 (null) allows no
  /// workspace, which rules out some kernels. Throws std::invalid_argument on a null or
  /// misaligned workspace with bytes > 0.
  LtMatmul(void* workspace, std::size_t workspace_bytes, bool allow_tf32 = false);
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

  const Plan& plan_for(const PlanKey& key, const float* bias);
  void run(const char* caller, const float* input, const float* weight, const float* bias,
           float* out, int rows, int inner, int outer, bool transposed_weight,
           LinearEpilogue epilogue, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  bool allow_tf32_ = false;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace ladder
