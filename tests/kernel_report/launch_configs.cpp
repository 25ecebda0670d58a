// tests/kernel_report/launch_configs.cpp - the launch configuration every launcher in
// kernels/ chooses for GPT-2 small at B = 32, asked of the launchers themselves.
//
//   build/ci/tests/kernel_launch_configs [RESOURCES]
//
// Runs on a machine without a GPU: this program defines the runtime's kernel-launch
// entry points itself (the functions that nvcc's `kernel<<<grid, block, shared,
// stream>>>` expands into, and cudaLaunchKernelExC, which cudaLaunchKernelEx calls), so
// a launcher's launch is recorded instead of sent to a device. The decode matmuls'
// workspace asks the device for its multiprocessors, compute capability, memory and each
// kernel's resident blocks: answered here as an H200 would (132 multiprocessors, 9.0; the
// resident blocks from RESOURCES, each kernel's registers and static shared memory, which
// scripts/kernel_report.py writes), with fake addresses. Every launcher is
// called with the shapes the chapters pass and with fake, 256-byte aligned device addresses (never
// dereferenced: no kernel runs). Output, one line per launch, tab-separated:
//   workload  launcher  kernel-offset  grid.x,y,z  block.x,y,z  dynamic-shared-bytes
// kernel-offset is the kernel's host stub address minus kernel_report_anchor's, which
// scripts/kernel_report.py turns into the kernel's name with nm.
//
// The workloads: "decode" is one decode step, or the prefill of the one-token BOS
// prompt (B rows; mean valid length 51 of the 101-position cache, as in the default
// run of 100 new tokens); "sequence" is a whole-sequence forward over T = 51 tokens per
// row (the naive chapter's mean length).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention.cuh"
#include "kernels/cache_attention.cuh"
#include "kernels/cache_attention_bf16.cuh"
#include "kernels/decode_matmul.cuh"
#include "kernels/decode_matmul_bf16.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/persistent_decode.cuh"
#include "kernels/sampling.cuh"
#include "occupancy_calculator.hpp"

// ---------------------------------------------------------------- recorded launches

namespace {

struct Configuration {
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes = 0;
};

struct Recorder {
  std::vector<Configuration> pushed;  // <<<...>>> pushes, the launch stub pops
  std::string workload;
  std::string launcher;
  int launches = 0;
};

Recorder& recorder() {
  static Recorder instance;
  return instance;
}

}  // namespace

extern "C" {

void kernel_report_anchor() {}

}  // extern "C"

namespace {

/// A kernel's host stub address minus kernel_report_anchor's.
long long offset_of(const void* kernel) {
  return reinterpret_cast<const char*>(kernel) -
         reinterpret_cast<const char*>(&kernel_report_anchor);
}

/// The registers a thread and static shared bytes of each kernel, by offset_of, read from
/// the file named on the command line (lines "offset registers static-shared-bytes").
struct Resources {
  struct Kernel {
    int registers = 0;
    std::size_t static_shared = 0;
  };
  bool given = false;
  std::map<long long, Kernel> of_offset;
};

Resources& resources() {
  static Resources instance;
  return instance;
}

void read_resources(const char* path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(std::string("cannot read ") + path);
  Resources& known = resources();
  known.given = true;
  long long offset = 0;
  Resources::Kernel kernel;
  while (file >> offset >> kernel.registers >> kernel.static_shared)
    known.of_offset[offset] = kernel;
  if (!file.eof()) throw std::runtime_error(std::string("malformed line in ") + path);
}

}  // namespace

extern "C" {

// The entry points nvcc's launch code calls (crt/host_runtime.h, CUDA 13).
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, std::size_t shared_bytes,
                                     cudaStream_t /*stream*/) {
  recorder().pushed.push_back({grid, block, shared_bytes});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, std::size_t* shared_bytes,
                                       void* stream) {
  Recorder& state = recorder();
  if (state.pushed.empty()) return cudaErrorInvalidConfiguration;
  const Configuration configuration = state.pushed.back();
  state.pushed.pop_back();
  *grid = configuration.grid;
  *block = configuration.block;
  *shared_bytes = configuration.shared_bytes;
  *static_cast<cudaStream_t*>(stream) = nullptr;
  return cudaSuccess;
}

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_stub) {
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(host_stub));
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** /*arguments*/,
                               std::size_t shared_bytes, cudaStream_t /*stream*/) {
  Recorder& state = recorder();
  std::printf("%s\t%s\t%lld\t%u,%u,%u\t%u,%u,%u\t%zu\n", state.workload.c_str(),
              state.launcher.c_str(), offset_of(kernel), grid.x, grid.y, grid.z, block.x, block.y,
              block.z, shared_bytes);
  ++state.launches;
  return cudaSuccess;
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* kernel,
                                void** arguments) {
  return __cudaLaunchKernel(reinterpret_cast<cudaKernel_t>(const_cast<void*>(kernel)),
                            config->gridDim, config->blockDim, arguments, config->dynamicSmemBytes,
                            config->stream);
}

cudaError_t cudaGetLastError() { return cudaSuccess; }

// The persistent kernel's cooperative launch, recorded as the others.
cudaError_t cudaLaunchCooperativeKernel(const void* kernel, dim3 grid, dim3 block, void** arguments,
                                        std::size_t shared_bytes, cudaStream_t stream) {
  return __cudaLaunchKernel(reinterpret_cast<cudaKernel_t>(const_cast<void*>(kernel)), grid, block,
                            arguments, shared_bytes, stream);
}

// The persistent kernel's launch uploads the LM head's arguments: nothing to copy here.
cudaError_t cudaMemcpyAsync(void* /*destination*/, const void* /*source*/, std::size_t /*bytes*/,
                            cudaMemcpyKind /*kind*/, cudaStream_t /*stream*/) {
  return cudaSuccess;
}

// DecodeMatmulWorkspace's constructor: the device, its multiprocessors, its scratch.
constexpr int kReportMultiprocessors = 132;  // H200 (the report's sm_90)

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int /*device*/) {
  if (attribute == cudaDevAttrMultiProcessorCount) {
    *value = kReportMultiprocessors;
  } else if (attribute == cudaDevAttrComputeCapabilityMajor) {
    *value = 9;
  } else if (attribute == cudaDevAttrCooperativeLaunch) {
    *value = 1;
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** pointer, std::size_t /*bytes*/) {
  static std::uintptr_t next = std::uintptr_t{1} << 44;  // apart from FakeDeviceMemory's
  next += std::uintptr_t{1} << 32;
  *pointer = reinterpret_cast<void*>(next);
  return cudaSuccess;
}

cudaError_t cudaFree(void* /*pointer*/) { return cudaSuccess; }

// The graph-loop launchers check that their stream is capturing: say it is.
cudaError_t cudaStreamIsCapturing(cudaStream_t /*stream*/, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaMemset(void* /*pointer*/, int /*value*/, std::size_t /*bytes*/) {
  return cudaSuccess;
}

// A debug build's CUDA_CHECK_LAUNCH() synchronizes after every launch.
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaFuncSetAttribute(const void* /*function*/, cudaFuncAttribute /*attribute*/,
                                 int /*value*/) {
  return cudaSuccess;
}

// The decode matmuls ask how many blocks of a kernel fit on a multiprocessor, to plan
// their splits and to decide whether a split product launches in clusters (this program
// records neither the decision nor the cluster shape). Answered as sm_90 would, by the
// toolkit's calculator, from the kernel's registers and static shared memory in the
// resources file (resources(): the kernel report writes it from the sm_90 SASS); without
// one, 2, the kernels' __launch_bounds__ minimum.
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* function,
                                                          int block_size,
                                                          std::size_t shared_bytes) {
  const Resources& known = resources();
  if (!known.given) {
    *blocks = 2;
    return cudaSuccess;
  }
  const auto found = known.of_offset.find(offset_of(function));
  if (found == known.of_offset.end()) return cudaErrorInvalidDeviceFunction;
  cudaOccResult result;
  if (!kernel_report::occupancy(*kernel_report::find_architecture(90), found->second.registers,
                                found->second.static_shared, block_size, shared_bytes, &result))
    return cudaErrorInvalidConfiguration;
  *blocks = result.activeBlocksPerMultiprocessor;
  return cudaSuccess;
}

// Whether a kernel's code holds the sm_90 instructions (programmatic launch, cluster
// sums) is asked of its build: the report's kernels are sm_90 SASS from compute_90.
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* /*function*/) {
  *attributes = cudaFuncAttributes{};
  attributes->binaryVersion = 90;
  attributes->ptxVersion = 90;
  return cudaSuccess;
}

// Whether the device can place a cluster of a split product's blocks: on a whole H200 it
// can (this program records neither the decision nor the cluster shape).
cudaError_t cudaOccupancyMaxActiveClusters(int* clusters, const void* /*function*/,
                                           const cudaLaunchConfig_t* /*config*/) {
  *clusters = kReportMultiprocessors / 8;
  return cudaSuccess;
}

}  // extern "C"

// ---------------------------------------------------------------- the chapters' calls

namespace {

/// Distinct fake device addresses, 256-byte aligned like cudaMalloc's.
class FakeDeviceMemory {
 public:
  template <typename T>
  T* next() {
    next_address_ += 1u << 20;
    return reinterpret_cast<T*>(next_address_);
  }

 private:
  std::uintptr_t next_address_ = std::uintptr_t{1} << 40;
};

template <typename Call>
void record(const char* workload, const char* launcher, const Call& call) {
  Recorder& state = recorder();
  state.workload = workload;
  state.launcher = launcher;
  const int before = state.launches;
  call();
  if (state.launches == before)
    throw std::runtime_error(std::string(launcher) + " launched nothing that was recorded");
}

void record_all() {
  // GPT-2 small at the default workload.
  constexpr int B = 32;
  constexpr int C = 768;
  constexpr int H = 12;
  constexpr int V = 50257;
  constexpr int kNewTokens = 100;
  constexpr int kCapacity = 1 + kNewTokens;  // BOS prompt + new tokens
  constexpr int kMeanLength = 51;            // valid cache positions, mean over the steps
  constexpr int kSequence = 51;              // tokens per row, the naive chapter's mean
  constexpr float kEps = 1e-5f;
  constexpr cudaStream_t kStream = nullptr;

  FakeDeviceMemory memory;
  float* x = memory.next<float>();
  float* y = memory.next<float>();
  float* residual = memory.next<float>();
  float* weight = memory.next<float>();
  float* bias = memory.next<float>();
  float* qkv = memory.next<float>();
  float* keys = memory.next<float>();
  float* values = memory.next<float>();
  float* new_keys = memory.next<float>();
  float* new_values = memory.next<float>();
  float* logits = memory.next<float>();
  float* workspace = memory.next<float>();
  std::int32_t* tokens = memory.next<std::int32_t>();
  std::int32_t* positions = memory.next<std::int32_t>();
  std::int32_t* finished = memory.next<std::int32_t>();
  std::int32_t* all_finished = memory.next<std::int32_t>();
  std::int32_t* output_tokens = memory.next<std::int32_t>();
  ladder::DecodePosition* cursor = memory.next<ladder::DecodePosition>();
  __nv_bfloat16* bf16_x = memory.next<__nv_bfloat16>();
  __nv_bfloat16* bf16_y = memory.next<__nv_bfloat16>();
  __nv_bfloat16* bf16_weight = memory.next<__nv_bfloat16>();
  __nv_bfloat16* bf16_bias = memory.next<__nv_bfloat16>();
  __nv_bfloat16* bf16_qkv = memory.next<__nv_bfloat16>();
  __nv_bfloat16* bf16_keys = memory.next<__nv_bfloat16>();
  __nv_bfloat16* bf16_values = memory.next<__nv_bfloat16>();

  for (const int T : {1, kSequence}) {
    const char* workload = T == 1 ? "decode" : "sequence";
    const int rows = B * T;
    record(workload, "launch_layernorm",
           [&] { ladder::launch_layernorm(x, weight, bias, y, rows, C, kEps, kStream); });
    record(workload, "launch_residual_layernorm", [&] {
      ladder::launch_residual_layernorm(residual, x, weight, bias, y, rows, C, kEps, kStream);
    });
    record(workload, "launch_residual_add",
           [&] { ladder::launch_residual_add(residual, x, rows, C, kStream); });
    record(workload, "launch_gelu", [&] { ladder::launch_gelu(x, y, rows, 4 * C, kStream); });
    record(workload, "launch_add_bias",
           [&] { ladder::launch_add_bias(x, bias, rows, 3 * C, kStream); });
    record(workload, "launch_embedding",
           [&] { ladder::launch_embedding(tokens, positions, weight, bias, y, rows, C, kStream); });
    record(workload, "launch_sequence_embedding", [&] {
      ladder::launch_sequence_embedding(tokens, weight, bias, y, B, T, 0, C, kStream);
    });
    record(workload, "launch_store_kv_sequence", [&] {
      ladder::launch_store_kv_sequence(qkv, keys, values, 0, T, kCapacity, B, H, C, kStream);
    });
    record(workload, "launch_causal_attention",
           [&] { ladder::launch_causal_attention(qkv, y, B, T, H, C, kStream); });
  }

  record("decode", "launch_embedding_at_cursor", [&] {
    ladder::launch_embedding_at_cursor(tokens, cursor, weight, bias, y, B, C, kStream);
  });
  record("decode", "launch_decode_attention", [&] {
    ladder::launch_decode_attention(qkv, 3 * C, keys, values, y, B, kMeanLength, kMeanLength, H, C,
                                    kStream);
  });
  record("decode", "launch_grow_kv_cache", [&] {
    ladder::launch_grow_kv_cache(qkv, keys, values, new_keys, new_values, kMeanLength - 1, B, H, C,
                                 kStream);
  });
  record("decode", "launch_append_kv_at_cursor", [&] {
    ladder::launch_append_kv_at_cursor(qkv, keys, values, cursor, kCapacity, B, H, C, kStream);
  });
  record("decode", "launch_static_cache_attention", [&] {
    ladder::launch_static_cache_attention(qkv, 3 * C, keys, values, cursor, kCapacity, y, B, H, C,
                                          kStream);
  });
  record("decode", "launch_fused_decode_attention", [&] {
    ladder::launch_fused_decode_attention(qkv, keys, values, cursor, kCapacity, y, workspace, B, H,
                                          C, kStream);
  });
  // Continuous batching's decode step: a position per row, each row's token into its slot.
  record("decode", "launch_fused_decode_attention_per_row", [&] {
    ladder::launch_fused_decode_attention_per_row(qkv, keys, values, positions, kCapacity, y,
                                                  workspace, B, H, C, kStream);
  });
  record("decode", "launch_argmax_into_slots", [&] {
    ladder::launch_argmax_into_slots({logits, tokens, V}, positions, tokens, B, kStream);
  });
  // The bf16 step's kernels (the same shapes, bf16 tensors).
  record("decode", "launch_embedding_at_cursor_bf16", [&] {
    ladder::launch_embedding_at_cursor_bf16(tokens, cursor, bf16_weight, bf16_bias, bf16_y, B, C,
                                            kStream);
  });
  record("decode", "launch_embedding_bf16", [&] {
    ladder::launch_embedding_bf16(tokens, positions, bf16_weight, bf16_bias, bf16_y, B, C, kStream);
  });
  record("decode", "launch_layernorm_bf16", [&] {
    ladder::launch_layernorm_bf16(bf16_x, bf16_weight, bf16_bias, bf16_y, B, C, kEps, kStream);
  });
  record("decode", "launch_decode_attention_bf16", [&] {
    ladder::launch_decode_attention_bf16(bf16_qkv, bf16_keys, bf16_values, cursor, kCapacity,
                                         bf16_y, B, H, C, kStream);
  });
  // Continuous batching's bf16 attention: a slot and a position per row (B slots).
  record("decode", "launch_decode_attention_bf16_per_row", [&] {
    ladder::launch_decode_attention_bf16_per_row(bf16_qkv, bf16_keys, bf16_values, positions,
                                                 positions, B, kCapacity, bf16_y, B, H, C, kStream);
  });
  const ladder::GreedyState state{/*forced_tokens=*/nullptr,
                                  finished,
                                  all_finished,
                                  output_tokens,
                                  kNewTokens,
                                  /*eos_id=*/50256};
  record("decode", "launch_argmax_step",
         [&] { ladder::launch_argmax_step(logits, tokens, state, cursor, B, V, kStream); });
  const cudaGraphConditionalHandle condition = 0;  // never read: nothing runs
  record("decode", "launch_argmax_step_in_graph_loop", [&] {
    ladder::launch_argmax_step_in_graph_loop(logits, tokens, state, cursor, B, V, condition,
                                             kStream);
  });
  record("decode", "launch_store_step_logits", [&] {
    ladder::launch_store_step_logits(logits, workspace, cursor, B, V, kNewTokens, kStream);
  });
  const ladder::ArgmaxCandidates candidates{workspace, tokens,
                                            ladder::decode_lm_head_candidates(V)};
  record("decode", "launch_argmax_step_from_candidates", [&] {
    ladder::launch_argmax_step_from_candidates(candidates, output_tokens, state, cursor, B,
                                               kStream);
  });
  record("decode", "launch_argmax_step_from_candidates_in_graph_loop", [&] {
    ladder::launch_argmax_step_from_candidates_in_graph_loop(candidates, output_tokens, state,
                                                             cursor, B, condition, kStream);
  });

  // The decode matmuls (chapter 09; --tf32 takes the TF32 kernels) and their bf16 twins:
  // a step's four layer products and the LM head, with the split plan of 132
  // multiprocessors.
  ladder::DecodeMatmulWorkspace decode_workspace;
  struct Product {
    int K;
    int N;
    ladder::DecodeEpilogue epilogue;
  };
  constexpr Product kProducts[] = {{C, 3 * C, ladder::DecodeEpilogue::kBias},
                                   {C, C, ladder::DecodeEpilogue::kBiasResidual},
                                   {C, 4 * C, ladder::DecodeEpilogue::kBiasGelu},
                                   {4 * C, C, ladder::DecodeEpilogue::kBiasResidual}};
  float* candidate_values = memory.next<float>();
  std::int32_t* candidate_indices = memory.next<std::int32_t>();
  for (const ladder::DecodePrecision precision :
       {ladder::DecodePrecision::kFp32, ladder::DecodePrecision::kTf32}) {
    for (const Product& p : kProducts)
      record("decode", "launch_decode_matmul", [&] {
        ladder::launch_decode_matmul(x, weight, bias, y, B, p.K, p.N, p.epilogue, precision,
                                     decode_workspace, kStream,
                                     ladder::DecodeLaunch::kProgrammatic);
      });
    record("decode", "launch_decode_lm_head", [&] {
      ladder::launch_decode_lm_head(x, weight, nullptr, candidate_values, candidate_indices, B, C,
                                    V, precision, decode_workspace, kStream,
                                    ladder::DecodeLaunch::kProgrammatic);
    });
  }
  for (const Product& p : kProducts)
    record("decode", "launch_decode_matmul_bf16", [&] {
      ladder::launch_decode_matmul_bf16(bf16_x, bf16_weight, bf16_bias, bf16_y, B, p.K, p.N,
                                        p.epilogue, decode_workspace, kStream);
    });
  record("decode", "launch_decode_lm_head_bf16", [&] {
    ladder::launch_decode_lm_head_bf16(bf16_x, bf16_weight, nullptr, candidate_values,
                                       candidate_indices, B, C, V, decode_workspace, kStream);
  });

  // Chapter 11: every decode step in one kernel, the products' plans chapter 10's, the
  // blocks a multiprocessor it is compiled for (the grid a schedule is built for).
  constexpr int kLayers = 12;
  std::vector<ladder::PersistentLayer> layers(
      kLayers, ladder::PersistentLayer{bf16_weight, bf16_bias, bf16_weight, bf16_bias, bf16_weight,
                                       bf16_bias, bf16_weight, bf16_bias, bf16_weight, bf16_bias,
                                       bf16_weight, bf16_bias});
  ladder::PersistentDecodeLaunch persistent;
  persistent.schedule.instructions = memory.next<ladder::PersistentInstruction>();
  persistent.schedule.waits = memory.next<ladder::CounterWait>();
  persistent.schedule.block_first = memory.next<std::int32_t>();
  persistent.schedule.block_instructions = memory.next<std::int32_t>();
  persistent.schedule.counters = memory.next<std::uint32_t>();
  persistent.schedule.blocks = ladder::kPersistentBlocksPerMultiprocessor * kReportMultiprocessors;
  persistent.layers = layers.data();
  persistent.token_embedding = bf16_weight;
  persistent.position_embedding = bf16_weight;
  persistent.ln_f_weight = bf16_weight;
  persistent.ln_f_bias = bf16_bias;
  persistent.lm_head_weight = bf16_weight;
  persistent.n_layer = kLayers;
  persistent.C = C;
  persistent.H = H;
  persistent.V = V;
  persistent.eps = kEps;
  persistent.B = B;
  persistent.hidden = bf16_x;
  persistent.normed = bf16_y;
  persistent.qkv = bf16_qkv;
  persistent.attended = memory.next<__nv_bfloat16>();
  persistent.expanded = memory.next<__nv_bfloat16>();
  persistent.keys = bf16_keys;
  persistent.values = bf16_values;
  persistent.capacity = kCapacity;
  persistent.layer_elements = static_cast<std::size_t>(B) * kCapacity * C;
  persistent.candidate_values = candidate_values;
  persistent.candidate_indices = candidate_indices;
  for (int product = 0; product < ladder::kPersistentProducts; ++product) {
    const ladder::ProductSize size =
        ladder::persistent_product_size(static_cast<ladder::PersistentProduct>(product), C, V);
    persistent.products[product].plan =
        ladder::plan_decode_matmul_bf16(B, size.K, size.N, decode_workspace);
    persistent.products[product].partials = workspace;
    persistent.products[product].tile_counters = memory.next<unsigned int>();
  }
  persistent.next_tokens = tokens;
  persistent.state = state;
  persistent.cursor = cursor;
  persistent.decisions = memory.next<std::int32_t>();
  persistent.first_step = 1;
  persistent.first_position = 1;
  persistent.watchdog_ns = 1;
  persistent.fault = memory.next<ladder::PersistentFault>();
  persistent.argument_tables = memory.next<unsigned char>();
  record("decode", "launch_persistent_decode",
         [&] { ladder::launch_persistent_decode(persistent, kStream); });
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 2) throw std::invalid_argument("usage: kernel_launch_configs [RESOURCES]");
    if (argc == 2) read_resources(argv[1]);
    record_all();
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "kernel_launch_configs: error: %s\n", error.what());
    return 1;
  }
}
