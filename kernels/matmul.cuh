// kernels/matmul.cuh - the model's matrix products through cuBLAS: the Conv1D layers
// (out = x W) and the tied LM head (logits = x wte^T).
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
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

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

}  // namespace ladder
