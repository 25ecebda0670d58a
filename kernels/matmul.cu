// kernels/matmul.cu - cuBLAS handle (stream, workspace, math mode) and the row-major
// matrix products out = x W and logits = x wte^T (see matmul.cuh for the transpose trick).
#include "kernels/matmul.cuh"

#include <cstdint>
#include <utility>

#include "common/cuda_check.hpp"
#include "kernels/launch_checks.hpp"

namespace ladder {

// ---------------------------------------------------------------- the handle

CublasHandle::CublasHandle(bool allow_tf32) : allow_tf32_(allow_tf32) {
  CUBLAS_CHECK(cublasCreate(&handle_));
  const cublasMath_t mode = allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  const cublasStatus_t status = cublasSetMathMode(handle_, mode);
  if (status != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(handle_);  // the destructor does not run for a throwing constructor
    handle_ = nullptr;
    throw_cublas_error(status, "cublasSetMathMode(handle_, mode)", __FILE__, __LINE__);
  }
}

CublasHandle::CublasHandle(cudaStream_t stream, void* workspace, std::size_t workspace_bytes,
                           bool allow_tf32)
    : CublasHandle(allow_tf32) {
  set_workspace(workspace, workspace_bytes);
  set_stream(stream);
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);  // a destructor must not throw
}

CublasHandle::CublasHandle(CublasHandle&& other) noexcept { *this = std::move(other); }

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cublasDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    stream_ = std::exchange(other.stream_, nullptr);
    workspace_ = std::exchange(other.workspace_, nullptr);
    workspace_bytes_ = std::exchange(other.workspace_bytes_, 0);
    has_workspace_ = std::exchange(other.has_workspace_, false);
    allow_tf32_ = std::exchange(other.allow_tf32_, false);
  }
  return *this;
}

void CublasHandle::set_workspace(void* workspace, std::size_t bytes) {
  constexpr const char* kName = "CublasHandle::set_workspace";
  launch_checks::require(handle_ != nullptr, kName, "the handle was moved from");
  if (bytes > 0) {
    launch_checks::require_not_null(kName, "workspace", workspace);
    launch_checks::require(reinterpret_cast<std::uintptr_t>(workspace) % 256 == 0, kName,
                           "workspace must be 256-byte aligned");
  }
  CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace, bytes));
  workspace_ = workspace;
  workspace_bytes_ = bytes;
  has_workspace_ = true;
}

void CublasHandle::set_stream(cudaStream_t stream) {
  launch_checks::require(handle_ != nullptr, "CublasHandle::set_stream",
                         "the handle was moved from");
  if (stream == stream_) return;
  CUBLAS_CHECK(cublasSetStream(handle_, stream));
  stream_ = stream;
  // cublasSetStream() has just put the handle back on cuBLAS's own workspace pool.
  if (has_workspace_) CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, workspace_bytes_));
}

// ---------------------------------------------------------------- the products

void launch_linear(CublasHandle& handle, const float* x, const float* weight, float* out, int rows,
                   int in_features, int out_features, cudaStream_t stream) {
  constexpr const char* kName = "launch_linear";
  launch_checks::require(handle.get() != nullptr, kName, "the cuBLAS handle was moved from");
  launch_checks::require_not_null(kName, "x", x);
  launch_checks::require_not_null(kName, "weight", weight);
  launch_checks::require_not_null(kName, "out", out);
  launch_checks::require_positive(kName, "rows", rows);
  launch_checks::require_positive(kName, "in_features", in_features);
  launch_checks::require_positive(kName, "out_features", out_features);

  handle.set_stream(stream);
  const float one = 1.0f;
  const float zero = 0.0f;
  // Y^T (out x rows) = W^T (out x in) * X^T (in x rows), all read column-major.
  CUBLAS_CHECK(cublasSgemm(handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, out_features, rows, in_features,
                           &one, weight, out_features, x, in_features, &zero, out, out_features));
}

void launch_lm_head(CublasHandle& handle, const float* x, const float* wte, float* logits, int rows,
                    int C, int V, cudaStream_t stream) {
  constexpr const char* kName = "launch_lm_head";
  launch_checks::require(handle.get() != nullptr, kName, "the cuBLAS handle was moved from");
  launch_checks::require_not_null(kName, "x", x);
  launch_checks::require_not_null(kName, "wte", wte);
  launch_checks::require_not_null(kName, "logits", logits);
  launch_checks::require_positive(kName, "rows", rows);
  launch_checks::require_positive(kName, "C", C);
  launch_checks::require_positive(kName, "V", V);

  handle.set_stream(stream);
  const float one = 1.0f;
  const float zero = 0.0f;
  // logits^T (V x rows) = wte (V x C) * X^T (C x rows); wte is stored as wte^T
  // column-major (C x V, leading dimension C), hence CUBLAS_OP_T.
  CUBLAS_CHECK(cublasSgemm(handle.get(), CUBLAS_OP_T, CUBLAS_OP_N, V, rows, C, &one, wte, C, x, C,
                           &zero, logits, V));
}

}  // namespace ladder
