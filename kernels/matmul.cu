// kernels/matmul.cu - the row-major matrix products out = epilogue(x W [+ b]) and
// logits = x wte^T through cuBLASLt (see matmul.cuh for the transpose trick), with one
// cached plan (descriptors and algorithm) per shape.
#include "kernels/matmul.cuh"

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "common/cuda_check.hpp"
#include "kernels/launch_checks.hpp"

namespace ladder {

// ---------------------------------------------------------------- cuBLASLt

namespace {

struct MatmulDescDeleter {
  void operator()(cublasLtMatmulDesc_t desc) const { cublasLtMatmulDescDestroy(desc); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayout_t layout) const { cublasLtMatrixLayoutDestroy(layout); }
};
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreference_t preference) const {
    cublasLtMatmulPreferenceDestroy(preference);
  }
};
using MatmulDescPtr =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, MatmulDescDeleter>;
using LayoutPtr = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LayoutDeleter>;
using PreferencePtr =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, PreferenceDeleter>;

/// A column-major fp32 matrix layout (see matmul.cuh for which buffer is which).
LayoutPtr make_layout(int rows, int columns, int leading_dimension) {
  cublasLtMatrixLayout_t layout = nullptr;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, static_cast<std::uint64_t>(rows),
                                          static_cast<std::uint64_t>(columns),
                                          static_cast<std::int64_t>(leading_dimension)));
  return LayoutPtr(layout);
}

template <typename T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <typename T>
void set_preference(cublasLtMatmulPreference_t preference,
                    cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

/// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the
/// address: the heuristic must only offer kernels that can read the buffer.
int alignment_of(const void* pointer) {
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(pointer);
  if (address == 0) return 256;
  return static_cast<int>(std::min<std::uintptr_t>(address & (~address + 1), 256));
}

cublasLtEpilogue_t to_cublaslt(LinearEpilogue epilogue) {
  switch (epilogue) {
    case LinearEpilogue::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case LinearEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case LinearEpilogue::kBiasGelu:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

const char* epilogue_name(LinearEpilogue epilogue) {
  switch (epilogue) {
    case LinearEpilogue::kNone:
      return "none";
    case LinearEpilogue::kBias:
      return "bias";
    case LinearEpilogue::kBiasGelu:
      return "bias + GELU";
  }
  return "unknown";
}

}  // namespace

struct LtMatmul::Plan {
  MatmulDescPtr matmul;
  LayoutPtr weight_layout;  ///< A
  LayoutPtr input_layout;   ///< B
  LayoutPtr output_layout;  ///< C and D
  cublasLtMatmulAlgo_t algorithm{};
};

LtMatmul::LtMatmul(void* workspace, std::size_t workspace_bytes, bool allow_tf32,
                   SplitKReduction reduction)
    : workspace_(workspace),
      workspace_bytes_(workspace_bytes),
      allow_tf32_(allow_tf32),
      reduction_(reduction) {
  constexpr const char* kName = "LtMatmul";
  if (workspace_bytes > 0) {
    launch_checks::require_not_null(kName, "workspace", workspace);
    launch_checks::require(reinterpret_cast<std::uintptr_t>(workspace) % 256 == 0, kName,
                           "workspace must be 256-byte aligned");
  }
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

LtMatmul::~LtMatmul() {
  plans_.clear();                                    // descriptors before the handle
  if (handle_ != nullptr) cublasLtDestroy(handle_);  // a destructor must not throw
}

LtMatmul::LtMatmul(LtMatmul&& other) noexcept { *this = std::move(other); }

LtMatmul& LtMatmul::operator=(LtMatmul&& other) noexcept {
  if (this != &other) {
    plans_.clear();
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    workspace_ = std::exchange(other.workspace_, nullptr);
    workspace_bytes_ = std::exchange(other.workspace_bytes_, 0);
    allow_tf32_ = std::exchange(other.allow_tf32_, false);
    reduction_ = other.reduction_;
    plans_ = std::move(other.plans_);
    other.plans_.clear();
  }
  return *this;
}

const LtMatmul::Plan& LtMatmul::plan_for(const PlanKey& key, const float* bias,
                                         cudaStream_t stream) {
  if (const auto found = plans_.find(key); found != plans_.end()) return *found->second;
  // A capture records only what reaches the stream; the heuristic query is host work
  // that no replay repeats. Asked inside a capture it would still work, but the product
  // would be frozen into a graph without ever having run plainly: refuse, so that every
  // capture follows an uncaptured run of the same work (which chose the algorithms,
  // loaded the kernels, and gave the result every replay must equal).
  if (stream_is_capturing(stream))
    throw CudaError("LtMatmul: no plan yet for rows = " + std::to_string(key.rows) +
                    ", in = " + std::to_string(key.inner) + ", out = " + std::to_string(key.outer) +
                    " (epilogue " + epilogue_name(key.epilogue) +
                    ") while the stream captures a CUDA graph; run the product once before "
                    "the capture so that cuBLASLt chooses its algorithm outside it");

  auto plan = std::make_unique<Plan>();
  const cublasComputeType_t compute =
      allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t matmul = nullptr;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&matmul, compute, CUDA_R_32F));
  plan->matmul.reset(matmul);
  const cublasOperation_t weight_operation = key.transposed_weight ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t input_operation = CUBLAS_OP_N;
  set_attribute(matmul, CUBLASLT_MATMUL_DESC_TRANSA, weight_operation);
  set_attribute(matmul, CUBLASLT_MATMUL_DESC_TRANSB, input_operation);
  set_attribute(matmul, CUBLASLT_MATMUL_DESC_EPILOGUE, to_cublaslt(key.epilogue));
  // The heuristic reads the bias pointer's alignment from its value.
  if (bias != nullptr) set_attribute(matmul, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);

  // A = W^T (outer x inner, ld outer), or wte^T (inner x outer, ld inner) used transposed.
  plan->weight_layout = key.transposed_weight ? make_layout(key.inner, key.outer, key.inner)
                                              : make_layout(key.outer, key.inner, key.outer);
  plan->input_layout = make_layout(key.inner, key.rows, key.inner);   // B = X^T
  plan->output_layout = make_layout(key.outer, key.rows, key.outer);  // C = D = Y^T

  cublasLtMatmulPreference_t raw_preference = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_preference));
  const PreferencePtr preference(raw_preference);
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                 static_cast<std::uint64_t>(workspace_bytes_));
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                 static_cast<std::uint32_t>(key.weight_alignment));
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 static_cast<std::uint32_t>(key.input_alignment));
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                 static_cast<std::uint32_t>(key.output_alignment));
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                 static_cast<std::uint32_t>(key.output_alignment));
  // Unsplit kernels need no reduction scheme, so an empty mask leaves only them; the
  // in-place mask adds the split kernels that sum their slices in the output.
  if (reduction_ == SplitKReduction::kInsideTheKernel) {
    set_preference(raw_preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                   static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_INPLACE));
  } else if (reduction_ == SplitKReduction::kNoSplit) {
    set_preference(raw_preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                   static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE));
  }

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle_, matmul, plan->weight_layout.get(), plan->input_layout.get(),
      plan->output_layout.get(), plan->output_layout.get(), raw_preference, 1, &result, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
    throw CudaError("LtMatmul: cuBLASLt has no " + std::string(allow_tf32_ ? "TF32" : "fp32") +
                    " kernel for rows = " + std::to_string(key.rows) +
                    ", in = " + std::to_string(key.inner) + ", out = " + std::to_string(key.outer) +
                    " with epilogue " + epilogue_name(key.epilogue) +
                    (workspace_bytes_ == 0 ? " and no workspace" : "") +
                    "; for bias + GELU use LinearEpilogue::kBias and launch_gelu");
  }
  CUBLAS_CHECK(status);
  plan->algorithm = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void LtMatmul::run(const char* caller, const float* input, const float* weight, const float* bias,
                   float* out, int rows, int inner, int outer, bool transposed_weight,
                   LinearEpilogue epilogue, cudaStream_t stream) {
  const PlanKey key{rows,
                    inner,
                    outer,
                    transposed_weight,
                    epilogue,
                    alignment_of(weight),
                    alignment_of(input),
                    epilogue == LinearEpilogue::kNone ? 256 : alignment_of(bias),
                    alignment_of(out)};
  const Plan& plan = plan_for(key, bias, stream);
  // The descriptor is cached; only the bias pointer changes from call to call.
  if (epilogue != LinearEpilogue::kNone)
    set_attribute(plan.matmul.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  const float one = 1.0f;
  const float zero = 0.0f;
  const cublasStatus_t status = cublasLtMatmul(
      handle_, plan.matmul.get(), &one, weight, plan.weight_layout.get(), input,
      plan.input_layout.get(), &zero, out, plan.output_layout.get(), out, plan.output_layout.get(),
      &plan.algorithm, workspace_, workspace_bytes_, stream);
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, caller, __FILE__, __LINE__);
}

void LtMatmul::linear(const float* x, const float* weight, const float* bias, float* out, int rows,
                      int in_features, int out_features, LinearEpilogue epilogue,
                      cudaStream_t stream) {
  constexpr const char* kName = "LtMatmul::linear";
  launch_checks::require(handle_ != nullptr, kName, "the LtMatmul was moved from");
  launch_checks::require_not_null(kName, {{"x", x}, {"weight", weight}, {"out", out}});
  if (epilogue == LinearEpilogue::kNone) {
    launch_checks::require(bias == nullptr, kName,
                           "bias must be null with LinearEpilogue::kNone (use kBias to add it)");
  } else {
    launch_checks::require_not_null(kName, "bias", bias);
  }
  launch_checks::require_positive(
      kName, {{"rows", rows}, {"in_features", in_features}, {"out_features", out_features}});
  run(kName, x, weight, bias, out, rows, in_features, out_features, /*transposed_weight=*/false,
      epilogue, stream);
}

void LtMatmul::lm_head(const float* x, const float* wte, float* logits, int rows, int C, int V,
                       cudaStream_t stream) {
  constexpr const char* kName = "LtMatmul::lm_head";
  launch_checks::require(handle_ != nullptr, kName, "the LtMatmul was moved from");
  launch_checks::require_not_null(kName, {{"x", x}, {"wte", wte}, {"logits", logits}});
  launch_checks::require_positive(kName, {{"rows", rows}, {"C", C}, {"V", V}});
  run(kName, x, wte, nullptr, logits, rows, C, V, /*transposed_weight=*/true, LinearEpilogue::kNone,
      stream);
}

}  // namespace ladder
