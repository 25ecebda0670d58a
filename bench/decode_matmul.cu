// bench/decode_matmul.cu - the 49 products of a GPT-2 small decode step, in the decode
// matmuls (kernels/decode_matmul) against cuBLASLt (kernels/matmul) and against the
// memory's measured copy bandwidth.
//
// For B rows (1, 8, 32 and 64 by default) and each product - c_attn 768 x 2304 (+ bias),
// attention c_proj 768 x 768 (+ bias + residual), c_fc 768 x 3072 (+ bias + GELU), MLP
// c_proj 3072 x 768 (+ bias + residual), the tied LM head 768 x 50257 (+ the argmax's
// first pass) - it prints the GPU microseconds per product and the weight bytes per
// second, for the decode kernels in fp32 and TF32 and for cuBLASLt in fp32 and TF32
// (bias and GELU in its epilogue; the residual add is a launch of its own there, as in
// chapters 05-08), and the fp32 decode kernels once more with every split summed
// through the workspace, none in a thread-block cluster (disable_cluster_splits: the
// same bits, the tail the clusters replace). Then the step: 12 times the four layer
// products plus the LM head, as the sum of the per-product times and as one timed
// sequence of the 49 launches, against the floor: the step's weight bytes over the copy
// bandwidth. Last, programmatic dependent launch on and off: one layer's four products
// and the step's 49, each chain captured into a CUDA graph, plain launches against
// programmatic dependents; then the chain the decode step really runs, with its
// LayerNorms and fused attention between the products (chapter 09's step without the
// embedding and the argmax: LayerNorm, c_attn, attention, c_proj, LayerNorm, c_fc, MLP
// c_proj per layer, the last LayerNorm and the LM head), plain against programmatic
// products after a LayerNorm and an attention that let them start only as they exit
// (LaunchDependents::kAtExit, as before they signalled) or as they start (kAtStart, what
// the chapters run); in fp32 and TF32 (chapter 09's kernels) and in bf16 (chapter 10's,
// on zeroed weights: timed, not verified here); the plain and signal-at-start chains
// once more with every split summed through the workspace, none in a cluster; and the
// signal-at-start chain with the LayerNorms and the attention launched programmatically
// too (each waits on the GPU for the product before it).
//
// Each product is verified before it is timed: random x, weight and bias, the decode
// kernels' output against cuBLASLt's fp32 output (1e-4 relative in fp32, 5e-3 in TF32).
// Timing: CUDA events, the median of 20 repeats after 3 warm-up repeats; a repeat runs
// the product once on each of several copies of its weight, enough copies to fill four
// times the L2 cache, so that every launch streams its weight from HBM as a decode step
// does (a step's 49 weights, 0.5 GB, never fit in L2). The copies past the first are
// zero: the time of a dense fp32 product does not depend on the values.
//
// Run:  build/native/bench/decode_matmul [--batch B]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "common/bfloat16.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_event.hpp"
#include "common/cuda_graph.hpp"
#include "common/cuda_stream.hpp"
#include "common/device_info.hpp"
#include "common/reference.hpp"
#include "kernels/cache_attention.cuh"
#include "kernels/cache_attention_bf16.cuh"
#include "kernels/decode_matmul.cuh"
#include "kernels/decode_matmul_bf16.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"

namespace {

using ladder::DecodeEpilogue;
using ladder::DecodeLaunch;
using ladder::DecodePrecision;
using ladder::LaunchDependents;
using ladder::LinearEpilogue;

constexpr int kWarmupRepeats = 3;
constexpr int kTimedRepeats = 20;
constexpr int kC = 768;  // GPT-2 small
constexpr int kV = 50257;
constexpr int kLayers = 12;
constexpr int kCopiesPerL2 = 4;  // weight copies fill four times the L2
constexpr int kHeads = 12;
constexpr float kEps = 1e-5f;
// The step's attention: a cache of 101 positions (a BOS prompt and N = 100) at position
// 50, so L = 51 valid positions, the mean over the run's steps.
constexpr int kCacheCapacity = 101;
constexpr int kCachePosition = 50;

/// One product of the step.
struct Product {
  const char* name;
  int K;
  int N;
  int per_step;  // launches per step
  DecodeEpilogue epilogue;
  bool lm_head;
};
const Product kProducts[] = {
    {"c_attn    768 x 2304 + bias", kC, 3 * kC, kLayers, DecodeEpilogue::kBias, false},
    {"c_proj    768 x 768 + bias + residual", kC, kC, kLayers, DecodeEpilogue::kBiasResidual,
     false},
    {"c_fc      768 x 3072 + bias + GELU", kC, 4 * kC, kLayers, DecodeEpilogue::kBiasGelu, false},
    {"mlp proj 3072 x 768 + bias + residual", 4 * kC, kC, kLayers, DecodeEpilogue::kBiasResidual,
     false},
    {"LM head   768 x 50257 (+ argmax pass)", kC, kV, 1, DecodeEpilogue::kNone, true}};

LinearEpilogue lt_epilogue(DecodeEpilogue epilogue) {
  return epilogue == DecodeEpilogue::kBiasGelu ? LinearEpilogue::kBiasGelu : LinearEpilogue::kBias;
}

std::vector<float> random_floats(std::mt19937& rng, std::size_t n, float scale) {
  std::uniform_real_distribution<float> distribution(-scale, scale);
  std::vector<float> values(n);
  for (float& value : values) value = distribution(rng);
  return values;
}

void upload(float* device, const std::vector<float>& host) {
  CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
}

std::vector<float> download(const float* device, std::size_t n) {
  std::vector<float> host(n);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

/// The weights of one product: `copies` packed (decode) and row-major (cuBLASLt), copy 0
/// random, the others zero; the LM head's row-major copy is wte [V, C].
struct ProductWeights {
  int copies = 0;
  std::vector<float*> packed;
  std::vector<float*> row_major;
  float* bias = nullptr;
};

struct Buffers {
  float* x;         // [64, 3072]
  float* out;       // [64, 50257]
  float* residual;  // [64, 768], cuBLASLt's residual add
  float* candidate_values;
  std::int32_t* candidate_indices;
};

/// The decode kernel's launch for copy `copy` of product p.
void decode_call(const Product& p, const ProductWeights& w, int copy, const Buffers& buffers, int B,
                 DecodePrecision precision, ladder::DecodeMatmulWorkspace& workspace,
                 cudaStream_t stream, DecodeLaunch launch = DecodeLaunch::kAfterPrevious) {
  if (p.lm_head) {
    ladder::launch_decode_lm_head(buffers.x, w.packed[copy], buffers.out, buffers.candidate_values,
                                  buffers.candidate_indices, B, p.K, p.N, precision, workspace,
                                  stream, launch);
  } else {
    ladder::launch_decode_matmul(buffers.x, w.packed[copy], w.bias, buffers.out, B, p.K, p.N,
                                 p.epilogue, precision, workspace, stream, launch);
  }
}

/// cuBLASLt's launches for the same product (the residual add separate, as in chapter 05).
void lt_call(const Product& p, const ProductWeights& w, int copy, const Buffers& buffers, int B,
             ladder::LtMatmul& lt, cudaStream_t stream) {
  if (p.lm_head) {
    lt.lm_head(buffers.x, w.row_major[copy], buffers.out, B, p.K, p.N, stream);
    return;
  }
  lt.linear(buffers.x, w.row_major[copy], w.bias, buffers.out, B, p.K, p.N, lt_epilogue(p.epilogue),
            stream);
  if (p.epilogue == DecodeEpilogue::kBiasResidual)
    ladder::launch_residual_add(buffers.residual, buffers.out, B, p.N, stream);
}

/// Relative error of the decode kernel against cuBLASLt fp32 on copy 0 (random), with
/// the verifiable epilogue (bias, or bias + GELU; the residual add is the unit tests').
double verify(const Product& p, const ProductWeights& w, const Buffers& buffers, int B,
              DecodePrecision precision, ladder::DecodeMatmulWorkspace& workspace,
              ladder::LtMatmul& lt_fp32, cudaStream_t stream) {
  const std::size_t outputs = static_cast<std::size_t>(B) * p.N;
  Product checked = p;
  if (checked.epilogue == DecodeEpilogue::kBiasResidual) checked.epilogue = DecodeEpilogue::kBias;
  CUDA_CHECK(cudaMemset(buffers.out, 0xFF, outputs * sizeof(float)));
  lt_call(checked, w, 0, buffers, B, lt_fp32, stream);
  const std::vector<float> expected = download(buffers.out, outputs);
  CUDA_CHECK(cudaMemset(buffers.out, 0xFF, outputs * sizeof(float)));
  decode_call(checked, w, 0, buffers, B, precision, workspace, stream);
  const std::vector<float> actual = download(buffers.out, outputs);
  return ladder::reference::relative_error(actual.data(), expected.data(), outputs);
}

/// GPU seconds per product: a repeat runs `call(copy)` for every copy.
double seconds_per_product(cudaStream_t stream, int copies, const std::function<void(int)>& call) {
  return ladder::median_stream_seconds(stream, kWarmupRepeats, kTimedRepeats,
                                       [&] {
                                         for (int copy = 0; copy < copies; ++copy) call(copy);
                                       }) /
         copies;
}

/// GPU seconds of one replay of the graph `enqueue` captures (the median).
double graph_seconds(cudaStream_t stream, const std::function<void()>& enqueue) {
  const ladder::CudaGraph graph = ladder::capture_graph(stream, enqueue, "decode matmul chain");
  const ladder::CudaGraphExec chain(graph, "decode matmul chain");
  return ladder::median_stream_seconds(stream, kWarmupRepeats, kTimedRepeats,
                                       [&] { chain.launch(stream); });
}

// ---------------------------------------------------------------- the step's chain

/// What the step runs between its products, on buffers of the bench (the values do not
/// change the times): a LayerNorm's parameters, each layer's KV cache [64, H, capacity,
/// D], the attention's workspace (fp32) and cursor. Element is float or __nv_bfloat16.
template <typename Element>
struct BetweenProducts {
  Element* ln_weight;
  Element* ln_bias;
  std::vector<Element*> keys;  // per layer
  std::vector<Element*> values;
  void* attention_workspace;
  const ladder::DecodePosition* cursor;
};

/// `count` zeroed bf16 of device memory.
__nv_bfloat16* bfloat16s(ladder::bench::DeviceScratch& scratch, std::size_t count) {
  return reinterpret_cast<__nv_bfloat16*>(scratch.floats((count + 1) / 2));
}

/// The step's chain in bf16 (chapter 10's kernels) on zeroed weights, caches and
/// activations: a product's time does not depend on the values. Layer l multiplies
/// weight copy l, as the fp32 chain does.
struct BfloatStep {
  std::vector<std::vector<__nv_bfloat16*>> weights;  // [product][copy], packed (k_tiled)
  __nv_bfloat16* bias;                               // [4C], every product's
  __nv_bfloat16* residual;                           // [64, C]
  __nv_bfloat16* x;                                  // [64, 4C]
  __nv_bfloat16* out;                                // [64, 4C]
  BetweenProducts<__nv_bfloat16> between;
};

BfloatStep make_bfloat_step(ladder::bench::DeviceScratch& scratch,
                            const ladder::DecodePosition* cursor) {
  BfloatStep step{};
  for (const Product& p : kProducts) {
    std::vector<__nv_bfloat16*> copies;
    for (int copy = 0; copy < p.per_step; ++copy)
      copies.push_back(bfloat16s(
          scratch, ladder::packed_bfloat16_size(p.K, p.N, ladder::BfloatLayout::k_tiled)));
    step.weights.push_back(copies);
  }
  step.bias = bfloat16s(scratch, std::size_t{4} * kC);
  step.residual = bfloat16s(scratch, std::size_t{ladder::kDecodeMaxRows} * kC);
  step.x = bfloat16s(scratch, std::size_t{ladder::kDecodeMaxRows} * 4 * kC);
  step.out = bfloat16s(scratch, std::size_t{ladder::kDecodeMaxRows} * 4 * kC);
  step.between.ln_weight = bfloat16s(scratch, kC);
  step.between.ln_bias = bfloat16s(scratch, kC);
  const std::size_t cache = std::size_t{ladder::kDecodeMaxRows} * kCacheCapacity * kC;
  for (int layer = 0; layer < kLayers; ++layer) {
    step.between.keys.push_back(bfloat16s(scratch, cache));
    step.between.values.push_back(bfloat16s(scratch, cache));
  }
  step.between.cursor = cursor;
  return step;
}

/// The bf16 launch of product `index` (kProducts) on weight copy `copy`; the LM head
/// writes fp32 logits and candidates into the fp32 buffers, as decode_call does.
void bfloat_call(std::size_t index, int copy, const BfloatStep& step, const Buffers& buffers, int B,
                 ladder::DecodeMatmulWorkspace& workspace, cudaStream_t stream,
                 DecodeLaunch launch) {
  const Product& p = kProducts[index];
  if (p.lm_head) {
    ladder::launch_decode_lm_head_bf16(step.x, step.weights[index][copy], buffers.out,
                                       buffers.candidate_values, buffers.candidate_indices, B, p.K,
                                       p.N, workspace, stream, launch);
  } else {
    ladder::launch_decode_matmul_bf16(step.x, step.weights[index][copy], step.bias, step.out, B,
                                      p.K, p.N, p.epilogue, workspace, stream, launch);
  }
}

/// Enqueues the step's chain: per layer LayerNorm, c_attn, attention, c_proj, LayerNorm,
/// c_fc, MLP c_proj; the whole step adds the last LayerNorm and the LM head.
/// layernorm(), attention(layer) and product(index into kProducts, layer) launch them.
template <typename LayerNorm, typename Attention, typename ProductCall>
void enqueue_step_chain(int layers, bool whole_step, const LayerNorm& layernorm,
                        const Attention& attention, const ProductCall& product) {
  for (int layer = 0; layer < layers; ++layer) {
    layernorm();
    product(0, layer);  // c_attn
    attention(layer);
    product(1, layer);  // c_proj
    layernorm();
    product(2, layer);  // c_fc
    product(3, layer);  // MLP c_proj
  }
  if (whole_step) {
    layernorm();
    product(4, 0);  // LM head
  }
}

std::vector<int> batches_from(int argc, char** argv) {
  if (argc == 1) return {1, 8, 32, 64};
  const int B = ladder::bench::parse_batch(argc, argv, "decode_matmul");
  if (B > ladder::kDecodeMaxRows)
    throw std::invalid_argument("usage: decode_matmul [--batch B], 1 <= B <= 64");
  return {B};
}

int run(int argc, char** argv) {
  const std::vector<int> batches = batches_from(argc, argv);
  const ladder::DeviceInfo device = ladder::query_device_info();
  std::printf("%s\n", ladder::device_banner(device).c_str());
  const double copy_bandwidth = ladder::measure_copy_bandwidth();
  std::printf("copy bandwidth (read + write): %.0f GB/s\n", copy_bandwidth * 1e-9);

  const ladder::CudaStream stream;
  const cudaStream_t s = stream.get();
  ladder::bench::DeviceScratch scratch;
  std::mt19937 rng(20261201);
  const Buffers buffers{scratch.floats(std::size_t{64} * 4 * kC),
                        scratch.floats(std::size_t{64} * kV), scratch.floats(std::size_t{64} * kC),
                        scratch.floats(std::size_t{64} * ladder::decode_lm_head_candidates(kV)),
                        reinterpret_cast<std::int32_t*>(scratch.floats(
                            std::size_t{64} * ladder::decode_lm_head_candidates(kV)))};
  upload(buffers.x, random_floats(rng, std::size_t{64} * 4 * kC, 1.0f));
  float* lt_workspace =
      scratch.floats(ladder::LtMatmul::kRecommendedWorkspaceBytes / sizeof(float));
  ladder::LtMatmul lt_fp32(lt_workspace, ladder::LtMatmul::kRecommendedWorkspaceBytes);
  ladder::LtMatmul lt_tf32(lt_workspace, ladder::LtMatmul::kRecommendedWorkspaceBytes,
                           /*allow_tf32=*/true);
  ladder::DecodeMatmulWorkspace workspace;
  ladder::DecodeMatmulWorkspace workspace_without_clusters;
  workspace_without_clusters.disable_cluster_splits();

  // Weights: enough copies of each product's weight to stream from HBM, at least one per
  // layer for the step sequence.
  std::vector<ProductWeights> weights;
  for (const Product& p : kProducts) {
    ProductWeights w;
    const std::size_t bytes = static_cast<std::size_t>(p.K) * p.N * sizeof(float);
    w.copies = static_cast<int>(
        std::max<std::size_t>({static_cast<std::size_t>(p.per_step), std::size_t{2},
                               kCopiesPerL2 * device.l2_cache_bytes / bytes + 1}));
    const std::vector<float> weight =
        random_floats(rng, static_cast<std::size_t>(p.K) * p.N, 0.05f);
    const std::vector<float> packed =
        p.lm_head ? ladder::pack_decode_weight_transposed(weight.data(), p.N, p.K)
                  : ladder::pack_decode_weight(weight.data(), p.K, p.N);
    for (int copy = 0; copy < w.copies; ++copy) {
      w.packed.push_back(scratch.floats(packed.size()));
      w.row_major.push_back(scratch.floats(weight.size()));
    }
    upload(w.packed[0], packed);
    upload(w.row_major[0], weight);
    w.bias = scratch.floats(static_cast<std::size_t>(p.N));
    upload(w.bias, random_floats(rng, static_cast<std::size_t>(p.N), 1.0f));
    weights.push_back(std::move(w));
  }

  // The step's chain: what runs between the products, in fp32 and in bf16.
  const ladder::DecodePosition position{/*step=*/0, kCachePosition};
  float* cursor = scratch.floats(sizeof(position) / sizeof(float));
  CUDA_CHECK(cudaMemcpy(cursor, &position, sizeof(position), cudaMemcpyHostToDevice));
  BetweenProducts<float> between{};
  between.ln_weight = scratch.floats(kC);
  between.ln_bias = scratch.floats(kC);
  const std::size_t cache_floats = std::size_t{ladder::kDecodeMaxRows} * kCacheCapacity * kC;
  for (int layer = 0; layer < kLayers; ++layer) {
    between.keys.push_back(scratch.floats(cache_floats));
    between.values.push_back(scratch.floats(cache_floats));
  }
  between.attention_workspace = scratch.floats(
      (ladder::fused_decode_attention_workspace_bytes(ladder::kDecodeMaxRows, kHeads, kC,
                                                      kCacheCapacity) +
       sizeof(float) - 1) /
      sizeof(float));  // zeroed, as the attention needs it once
  between.cursor = reinterpret_cast<const ladder::DecodePosition*>(cursor);
  const BfloatStep bfloat = make_bfloat_step(scratch, between.cursor);

  for (const int B : batches) {
    std::printf(
        "\n## B = %d rows: GPU us per product (GB/s of weight), median of %d repeats\n\n"
        "| product | splits x tiles | copy floor | decode fp32 | decode tf32 | cuBLASLt fp32 | "
        "cuBLASLt tf32 | decode fp32, no clusters |\n|---|--:|--:|--:|--:|--:|--:|--:|\n",
        B, kTimedRepeats);
    double floor_step = 0;
    double step[5] = {0, 0, 0, 0, 0};
    for (std::size_t i = 0; i < std::size(kProducts); ++i) {
      const Product& p = kProducts[i];
      const ProductWeights& w = weights[i];
      const double bytes = static_cast<double>(p.K) * p.N * sizeof(float);
      // Verified before timed.
      const double fp32_error =
          verify(p, w, buffers, B, DecodePrecision::kFp32, workspace, lt_fp32, s);
      const double tf32_error =
          verify(p, w, buffers, B, DecodePrecision::kTf32, workspace, lt_fp32, s);
      if (!(fp32_error <= 1e-4) || !(tf32_error <= 5e-3)) {
        std::fprintf(stderr,
                     "decode_matmul: %s at B = %d disagrees with cuBLASLt (relative error fp32 "
                     "%.3g, tf32 %.3g)\n",
                     p.name, B, fp32_error, tf32_error);
        return 1;
      }
      double seconds[5];
      seconds[0] = seconds_per_product(s, w.copies, [&](int copy) {
        decode_call(p, w, copy, buffers, B, DecodePrecision::kFp32, workspace, s);
      });
      seconds[1] = seconds_per_product(s, w.copies, [&](int copy) {
        decode_call(p, w, copy, buffers, B, DecodePrecision::kTf32, workspace, s);
      });
      seconds[2] = seconds_per_product(
          s, w.copies, [&](int copy) { lt_call(p, w, copy, buffers, B, lt_fp32, s); });
      seconds[3] = seconds_per_product(
          s, w.copies, [&](int copy) { lt_call(p, w, copy, buffers, B, lt_tf32, s); });
      seconds[4] = seconds_per_product(s, w.copies, [&](int copy) {
        decode_call(p, w, copy, buffers, B, DecodePrecision::kFp32, workspace_without_clusters, s);
      });
      // The floor: the weight's bytes over the copy bandwidth (the repository's floor).
      const double floor_seconds = bytes / copy_bandwidth;
      const ladder::DecodeMatmulPlan plan =
          ladder::plan_decode_matmul(B, p.K, p.N, DecodePrecision::kFp32, workspace);
      std::printf("| %s | %d x %d | %.1f", p.name, plan.splits, plan.column_tiles,
                  floor_seconds * 1e6);
      for (int v = 0; v < 5; ++v) {
        std::printf(" | %.1f (%.0f)", seconds[v] * 1e6, bytes / seconds[v] * 1e-9);
        step[v] += seconds[v] * p.per_step;
      }
      std::printf(" |\n");
      floor_step += floor_seconds * p.per_step;
    }
    std::printf("| step: sum over the 49 products | | %.1f", floor_step * 1e6);
    for (const double seconds : step) std::printf(" | %.1f", seconds * 1e6);
    std::printf(" |\n");

    // The step as one sequence: 12 layers of four products on their own weights, then
    // the LM head, back to back.
    const auto sequence =
        [&](const std::function<void(const Product&, const ProductWeights&, int)>& call) {
          return ladder::median_stream_seconds(s, kWarmupRepeats, kTimedRepeats, [&] {
            for (int layer = 0; layer < kLayers; ++layer)
              for (std::size_t i = 0; i + 1 < std::size(kProducts); ++i)
                call(kProducts[i], weights[i], layer);
            call(kProducts[std::size(kProducts) - 1], weights.back(), 0);
          });
        };
    std::printf("| step: the 49 launches in sequence | | %.1f", floor_step * 1e6);
    std::printf(" | %.1f", 1e6 * sequence([&](const Product& p, const ProductWeights& w, int c) {
                             decode_call(p, w, c, buffers, B, DecodePrecision::kFp32, workspace, s);
                           }));
    std::printf(" | %.1f", 1e6 * sequence([&](const Product& p, const ProductWeights& w, int c) {
                             decode_call(p, w, c, buffers, B, DecodePrecision::kTf32, workspace, s);
                           }));
    std::printf(" | %.1f", 1e6 * sequence([&](const Product& p, const ProductWeights& w, int c) {
                             lt_call(p, w, c, buffers, B, lt_fp32, s);
                           }));
    std::printf(" | %.1f", 1e6 * sequence([&](const Product& p, const ProductWeights& w, int c) {
                             lt_call(p, w, c, buffers, B, lt_tf32, s);
                           }));
    std::printf(" | %.1f |\n",
                1e6 * sequence([&](const Product& p, const ProductWeights& w, int c) {
                  decode_call(p, w, c, buffers, B, DecodePrecision::kFp32,
                              workspace_without_clusters, s);
                }));

    // Programmatic dependent launch: chains of dependent products captured into one
    // graph, as chapters 08 and 09 run them, each product a plain launch or a
    // programmatic dependent that streams its first weight chunks before the product
    // before it has finished (kernels/decode_matmul.cuh).
    std::printf(
        "\n## B = %d rows: programmatic dependent launch, GPU us per graph (median of %d)\n\n"
        "| chain, one graph | precision | plain | programmatic | saved per launch |\n"
        "|---|---|--:|--:|--:|\n",
        B, kTimedRepeats);
    for (const bool whole_step : {false, true}) {
      const int layers = whole_step ? kLayers : 1;
      const int launches = 4 * layers + (whole_step ? 1 : 0);
      for (const DecodePrecision precision : {DecodePrecision::kFp32, DecodePrecision::kTf32}) {
        double seconds[2];
        for (const DecodeLaunch launch :
             {DecodeLaunch::kAfterPrevious, DecodeLaunch::kProgrammatic}) {
          seconds[launch == DecodeLaunch::kProgrammatic ? 1 : 0] = graph_seconds(s, [&] {
            for (int layer = 0; layer < layers; ++layer)
              for (std::size_t i = 0; i + 1 < std::size(kProducts); ++i)
                decode_call(kProducts[i], weights[i], layer, buffers, B, precision, workspace, s,
                            launch);
            if (whole_step)
              decode_call(kProducts[std::size(kProducts) - 1], weights.back(), 0, buffers, B,
                          precision, workspace, s, launch);
          });
        }
        std::printf("| %s (%d launches) | %s | %.1f | %.1f | %.2f |\n",
                    whole_step ? "the step's 49 products" : "one layer's 4 products", launches,
                    precision == DecodePrecision::kFp32 ? "fp32" : "tf32", seconds[0] * 1e6,
                    seconds[1] * 1e6, (seconds[0] - seconds[1]) / launches * 1e6);
      }
    }

    // The step's own chain: the products with the LayerNorms and the attention between
    // them, plain; programmatic products after kernels that let them start only as they
    // exit; and after kernels that let them start as they start.
    std::printf(
        "\n## B = %d rows: the step's chain, LayerNorms and attention between the products, "
        "GPU us per graph (median of %d)\n\n"
        "| chain, one graph | precision | plain | programmatic, LN and attention signal at exit "
        "| programmatic, signal at start | saved per product, at exit | saved per product "
        "after LN or attention, start vs exit | plain, no clusters | programmatic, signal at "
        "start, no clusters | programmatic, signal at start, LN and attention launched "
        "programmatically too |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n",
        B, kTimedRepeats);
    for (const bool whole_step : {false, true}) {
      const int layers = whole_step ? kLayers : 1;
      const int products = 4 * layers + (whole_step ? 1 : 0);
      const int after_primaries = 3 * layers + (whole_step ? 1 : 0);  // LN or attention before
      const int launches = 7 * layers + (whole_step ? 2 : 0);
      for (const std::string precision : {"fp32", "tf32", "bf16"}) {
        const DecodePrecision decode_precision =
            precision == "tf32" ? DecodePrecision::kTf32 : DecodePrecision::kFp32;
        // between_launch: how the LayerNorms and the attention launch (the products:
        // launch).
        const auto chain = [&](DecodeLaunch launch, LaunchDependents dependents,
                               ladder::DecodeMatmulWorkspace& products_workspace,
                               DecodeLaunch between_launch = DecodeLaunch::kAfterPrevious) {
          if (precision == "bf16") {
            const BetweenProducts<__nv_bfloat16>& between_bf16 = bfloat.between;
            return graph_seconds(s, [&] {
              enqueue_step_chain(
                  layers, whole_step,
                  [&] {
                    ladder::launch_layernorm_bf16(bfloat.residual, between_bf16.ln_weight,
                                                  between_bf16.ln_bias, bfloat.x, B, kC, kEps, s,
                                                  dependents, between_launch);
                  },
                  [&](int layer) {
                    ladder::launch_decode_attention_bf16(bfloat.out, between_bf16.keys[layer],
                                                         between_bf16.values[layer],
                                                         between_bf16.cursor, kCacheCapacity,
                                                         bfloat.x, B, kHeads, kC, s, dependents,
                                                         between_launch);
                  },
                  [&](std::size_t index, int layer) {
                    bfloat_call(index, layer, bfloat, buffers, B, products_workspace, s,
                                launch);
                  });
            });
          }
          return graph_seconds(s, [&] {
            enqueue_step_chain(
                layers, whole_step,
                [&] {
                  ladder::launch_layernorm(buffers.residual, between.ln_weight,
                                           between.ln_bias, buffers.x, B, kC, kEps, s,
                                           dependents, between_launch);
                },
                [&](int layer) {
                  ladder::launch_fused_decode_attention(
                      buffers.out, between.keys[layer], between.values[layer],
                      between.cursor, kCacheCapacity, buffers.x,
                      between.attention_workspace, B, kHeads, kC, s, dependents,
                      between_launch);
                },
                [&](std::size_t index, int layer) {
                  decode_call(kProducts[index], weights[index], layer, buffers, B, decode_precision,
                              products_workspace, s, launch);
                });
          });
        };
        const double plain =
            chain(DecodeLaunch::kAfterPrevious, LaunchDependents::kAtExit, workspace);
        const double at_exit =
            chain(DecodeLaunch::kProgrammatic, LaunchDependents::kAtExit, workspace);
        const double at_start =
            chain(DecodeLaunch::kProgrammatic, LaunchDependents::kAtStart, workspace);
        // The same chains with every split summed through the workspace: what the
        // thread-block clusters do in the chain the chapters run, launch by launch.
        const double plain_without_clusters = chain(
            DecodeLaunch::kAfterPrevious, LaunchDependents::kAtExit, workspace_without_clusters);
        const double at_start_without_clusters = chain(
            DecodeLaunch::kProgrammatic, LaunchDependents::kAtStart, workspace_without_clusters);
        // And the LayerNorms and the attention launched programmatically too: they wait
        // for the product before them on the GPU (ladder::launch_between_products).
        const double all_programmatic =
            chain(DecodeLaunch::kProgrammatic, LaunchDependents::kAtStart, workspace,
                  workspace.programmatic_launches() ? DecodeLaunch::kProgrammatic
                                                    : DecodeLaunch::kAfterPrevious);
        std::printf(
            "| %s (%d launches, %d products) | %s | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f | "
            "%.1f | %.1f |\n",
            whole_step ? "the step" : "one layer", launches, products, precision.c_str(),
            plain * 1e6, at_exit * 1e6, at_start * 1e6, (plain - at_exit) / products * 1e6,
            (at_exit - at_start) / after_primaries * 1e6, plain_without_clusters * 1e6,
            at_start_without_clusters * 1e6, all_programmatic * 1e6);
      }
    }
  }
  std::printf(
      "\ncopy floor: the weight's bytes over the measured copy bandwidth (read + write bytes "
      "per second), as the\nchapters' floor counts it; GB/s: the weight's bytes over the time. "
      "cuBLASLt's c_proj rows include the\nresidual add it needs as a second launch. The "
      "programmatic-launch table: one layer's 4 products\nreread the same 28 MB every repeat "
      "(from L2: the launch gaps alone); the step's 49 stream from HBM. The step's chain:\n"
      "chapter 09's decode step without the embedding and the argmax (one layer: LayerNorm, "
      "c_attn, attention,\nc_proj, LayerNorm, c_fc, MLP c_proj; the step: 12 layers, the last "
      "LayerNorm and the LM head); the\nattention over a cache of 101 positions at position "
      "50, each layer's own (bf16: chapter 10's kernels on zeroed weights); the last column "
      "divides by\nthe products that follow a LayerNorm or the attention (3 a layer, 37 in "
      "the step). Then the plain and the signal-at-start chains with every split summed "
      "through the workspace,\nnone in a thread-block cluster; last, the signal-at-start "
      "chain with the LayerNorms and the attention\nlaunched programmatically as well "
      "(each waits on the GPU for the product before it).\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ladder::bench::run_bench("decode_matmul", [&] { return run(argc, argv); });
}
