// tests/gpu/test_decode_matmul_pdl.cu - the decode matmuls launched as programmatic
// dependents (DecodeLaunch::kProgrammatic, kernels/decode_matmul.cuh) give the same bits
// as plain launches: a layer's chain as a decode step runs it - LayerNorm, c_attn, the
// decode attention over a KV cache, c_proj + residual, LayerNorm, c_fc + GELU, MLP
// c_proj + residual, LayerNorm, the LM head, each reading what the one before wrote -
// twice, in a stream, in a captured graph, and in the body of a conditional WHILE node
// as chapters 09 and 10 run it. Four of the five products follow a LayerNorm or the
// attention, which let them start early (LaunchDependents::kAtStart) or only as they
// exit (kAtExit); the reference is every kernel plainly launched and none signalling.
// fp32, TF32 and bf16. Each place is a test case of its own, named after it ("... -
// InAStream", "- InACapturedGraph", "- InAWhileBody"; "- PlainInAWhileBody" is the WHILE
// body with the products plainly launched): gpu_tests "*InAWhileBody". The LayerNorms and
// the attention are launched plainly, and in a second run of each place programmatically
// too (ladder::launch_between_products), each waiting on the GPU for the product before it.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "common/bfloat16.hpp"
#include "common/cuda_check.hpp"
#include "common/cuda_graph.hpp"
#include "kernels/cache_attention.cuh"
#include "kernels/cache_attention_bf16.cuh"
#include "kernels/decode_matmul.cuh"
#include "kernels/decode_matmul_bf16.cuh"
#include "kernels/layernorm.cuh"
#include "tests/gpu/bfloat16_test_helpers.hpp"
#include "tests/gpu/decode_matmul_test_helpers.hpp"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr int kC = 768;  // GPT-2 small
constexpr int kH = 12;
constexpr int kV = 2000;     // an LM head of 32 column tiles, the last one partial
constexpr int kRepeats = 2;  // twice: the second pass starts with a LayerNorm after a product
constexpr float kEps = 1e-5f;
constexpr int kCapacity = 160;  // cached positions per (b, h)
constexpr int kPosition = 129;  // the step's position: 130 valid, two splits in fp32

/// fp32 (or TF32) storage and launches.
struct Fp32Chain {
  using Storage = float;
  DecodePrecision precision;

  static std::vector<float> stored(const std::vector<float>& values) { return values; }
  static std::vector<float> packed(const std::vector<float>& weight, int K, int N) {
    return pack_decode_weight(weight.data(), K, N);
  }
  static std::vector<float> packed_wte(const std::vector<float>& wte) {
    return pack_decode_weight_transposed(wte.data(), kV, kC);
  }
  static std::size_t attention_workspace_bytes(int B) {
    return fused_decode_attention_workspace_bytes(B, kH, kC, kCapacity);
  }
  static void layernorm(const float* x, const float* weight, const float* bias, float* out, int B,
                        cudaStream_t stream, LaunchDependents dependents, DecodeLaunch launch) {
    launch_layernorm(x, weight, bias, out, B, kC, kEps, stream, dependents, launch);
  }
  static void attention(const float* qkv, float* keys, float* values, const DecodePosition* cursor,
                        float* out, void* workspace, int B, cudaStream_t stream,
                        LaunchDependents dependents, DecodeLaunch launch) {
    launch_fused_decode_attention(qkv, keys, values, cursor, kCapacity, out, workspace, B, kH, kC,
                                  stream, dependents, launch);
  }
  void linear(const float* x, const float* weight, const float* bias, float* out, int B, int K,
              int N, DecodeEpilogue epilogue, test::DecodeQueue& queue, cudaStream_t stream,
              DecodeLaunch launch) const {
    launch_decode_matmul(x, weight, bias, out, B, K, N, epilogue, precision, queue.workspace,
                         stream, launch);
  }
  void lm_head(const float* x, const float* wte, float* logits, float* values,
               std::int32_t* indices, int B, test::DecodeQueue& queue, cudaStream_t stream,
               DecodeLaunch launch) const {
    launch_decode_lm_head(x, wte, logits, values, indices, B, kC, kV, precision, queue.workspace,
                          stream, launch);
  }
};

/// bf16 storage (the bits, as the bf16 tests keep them) and launches.
struct Bf16Chain {
  using Storage = std::uint16_t;

  static const __nv_bfloat16* bf16(const std::uint16_t* bits) {
    return reinterpret_cast<const __nv_bfloat16*>(bits);
  }
  static __nv_bfloat16* bf16(std::uint16_t* bits) { return reinterpret_cast<__nv_bfloat16*>(bits); }
  static std::vector<std::uint16_t> stored(const std::vector<float>& values) {
    return test::to_bfloat16_bits(values);
  }
  static std::vector<std::uint16_t> packed(const std::vector<float>& weight, int K, int N) {
    return pack_bfloat16_weights(weight, K, N, BfloatLayout::k_tiled);
  }
  static std::vector<std::uint16_t> packed_wte(const std::vector<float>& wte) {
    return pack_bfloat16_weights_transposed(wte.data(), kV, kC, BfloatLayout::k_tiled);
  }
  static std::size_t attention_workspace_bytes(int) { return 0; }  // none needed
  static void layernorm(const std::uint16_t* x, const std::uint16_t* weight,
                        const std::uint16_t* bias, std::uint16_t* out, int B, cudaStream_t stream,
                        LaunchDependents dependents, DecodeLaunch launch) {
    launch_layernorm_bf16(bf16(x), bf16(weight), bf16(bias), bf16(out), B, kC, kEps, stream,
                          dependents, launch);
  }
  static void attention(const std::uint16_t* qkv, std::uint16_t* keys, std::uint16_t* values,
                        const DecodePosition* cursor, std::uint16_t* out, void*, int B,
                        cudaStream_t stream, LaunchDependents dependents, DecodeLaunch launch) {
    launch_decode_attention_bf16(bf16(qkv), bf16(keys), bf16(values), cursor, kCapacity, bf16(out),
                                 B, kH, kC, stream, dependents, launch);
  }
  void linear(const std::uint16_t* x, const std::uint16_t* weight, const std::uint16_t* bias,
              std::uint16_t* out, int B, int K, int N, DecodeEpilogue epilogue,
              test::DecodeQueue& queue, cudaStream_t stream, DecodeLaunch launch) const {
    launch_decode_matmul_bf16(bf16(x), bf16(weight), bf16(bias), bf16(out), B, K, N, epilogue,
                              queue.workspace, stream, launch);
  }
  void lm_head(const std::uint16_t* x, const std::uint16_t* wte, float* logits, float* values,
               std::int32_t* indices, int B, test::DecodeQueue& queue, cudaStream_t stream,
               DecodeLaunch launch) const {
    launch_decode_lm_head_bf16(bf16(x), bf16(wte), logits, values, indices, B, kC, kV,
                               queue.workspace, stream, launch);
  }
};

/// Everything the chain writes, as it stands afterwards.
struct ChainResult {
  std::vector<std::uint8_t> hidden;  // the bytes of each buffer: compared bit for bit
  std::vector<std::uint8_t> normed;
  std::vector<std::uint8_t> qkv;
  std::vector<std::uint8_t> attended;
  std::vector<std::uint8_t> expanded;
  std::vector<std::uint8_t> keys;
  std::vector<std::uint8_t> values;
  std::vector<float> logits;
  std::vector<float> candidate_values;
  std::vector<std::int32_t> candidate_indices;
};

template <typename T>
std::vector<std::uint8_t> bytes_of(const std::vector<T>& values) {
  const auto* first = reinterpret_cast<const std::uint8_t*>(values.data());
  return std::vector<std::uint8_t>(first, first + values.size() * sizeof(T));
}

bool operator==(const ChainResult& a, const ChainResult& b) {
  return a.hidden == b.hidden && a.normed == b.normed && a.qkv == b.qkv &&
         a.attended == b.attended && a.expanded == b.expanded && a.keys == b.keys &&
         a.values == b.values && bytes_of(a.logits) == bytes_of(b.logits) &&
         bytes_of(a.candidate_values) == bytes_of(b.candidate_values) &&
         a.candidate_indices == b.candidate_indices;
}

/// One layer's weights, its KV cache and the buffers of the chain at B rows, on the device.
template <typename Chain>
class LayerChain {
 public:
  using Storage = typename Chain::Storage;

  LayerChain(std::mt19937& rng, const Chain& chain, int B)
      : chain_(chain),
        B_(B),
        initial_hidden_(chain.stored(test::random_uniform(rng, std::size_t(B) * kC, -1, 1))),
        initial_keys_(chain.stored(test::random_uniform(rng, cache_size(B), -1, 1))),
        initial_values_(chain.stored(test::random_uniform(rng, cache_size(B), -1, 1))),
        ln_1_(rng, chain),
        ln_2_(rng, chain),
        ln_f_(rng, chain),
        qkv_weight_(packed(rng, kC, 3 * kC)),
        qkv_bias_(chain.stored(test::random_uniform(rng, 3 * kC, -1, 1))),
        proj_weight_(packed(rng, kC, kC)),
        proj_bias_(chain.stored(test::random_uniform(rng, kC, -1, 1))),
        fc_weight_(packed(rng, kC, 4 * kC)),
        fc_bias_(chain.stored(test::random_uniform(rng, 4 * kC, -1, 1))),
        mlp_weight_(packed(rng, 4 * kC, kC)),
        mlp_bias_(chain.stored(test::random_uniform(rng, kC, -1, 1))),
        wte_(chain.packed_wte(test::random_uniform(rng, std::size_t(kV) * kC, -0.1f, 0.1f))),
        hidden_(initial_hidden_.size()),
        normed_(std::size_t(B) * kC),
        qkv_(std::size_t(B) * 3 * kC),
        attended_(std::size_t(B) * kC),
        expanded_(std::size_t(B) * 4 * kC),
        cache_keys_(cache_size(B)),
        cache_values_(cache_size(B)),
        cursor_(test::device_cursor(/*step=*/0, kPosition)),
        attention_workspace_(std::vector<unsigned char>(Chain::attention_workspace_bytes(B), 0)),
        logits_(std::size_t(B) * kV),
        candidate_values_(std::size_t(B) * decode_lm_head_candidates(kV)),
        candidate_indices_(std::size_t(B) * decode_lm_head_candidates(kV)) {}

  /// Puts back the chain's starting point: the residual stream and the cache, every
  /// output poisoned.
  void reset() {
    hidden_.upload(initial_hidden_);
    cache_keys_.upload(initial_keys_);
    cache_values_.upload(initial_values_);
    normed_.poison();
    qkv_.poison();
    attended_.poison();
    expanded_.poison();
    logits_.poison();
    candidate_values_.poison();
    candidate_indices_.poison();
  }

  /// Enqueues the chain `repeats` times on `stream` (no host synchronization: capturable):
  /// the products launched as `launch` says, the LayerNorms and the attention letting a
  /// programmatic product after them start as `dependents` says, and launched as
  /// `between` says.
  void enqueue(test::DecodeQueue& queue, cudaStream_t stream, DecodeLaunch launch,
               LaunchDependents dependents, int repeats = kRepeats,
               DecodeLaunch between = DecodeLaunch::kAfterPrevious) {
    if (!queue.workspace.programmatic_launches()) between = DecodeLaunch::kAfterPrevious;
    const auto layernorm = [&](const LayerNormWeights& ln) {
      Chain::layernorm(hidden_.get(), ln.weight.get(), ln.bias.get(), normed_.get(), B_, stream,
                       dependents, between);
    };
    for (int repeat = 0; repeat < repeats; ++repeat) {
      layernorm(ln_1_);
      chain_.linear(normed_.get(), qkv_weight_.get(), qkv_bias_.get(), qkv_.get(), B_, kC, 3 * kC,
                    DecodeEpilogue::kBias, queue, stream, launch);
      Chain::attention(qkv_.get(), cache_keys_.get(), cache_values_.get(), cursor_.get(),
                       attended_.get(), attention_workspace_.get(), B_, stream, dependents,
                       between);
      chain_.linear(attended_.get(), proj_weight_.get(), proj_bias_.get(), hidden_.get(), B_, kC,
                    kC, DecodeEpilogue::kBiasResidual, queue, stream, launch);
      layernorm(ln_2_);
      chain_.linear(normed_.get(), fc_weight_.get(), fc_bias_.get(), expanded_.get(), B_, kC,
                    4 * kC, DecodeEpilogue::kBiasGelu, queue, stream, launch);
      chain_.linear(expanded_.get(), mlp_weight_.get(), mlp_bias_.get(), hidden_.get(), B_, 4 * kC,
                    kC, DecodeEpilogue::kBiasResidual, queue, stream, launch);
      layernorm(ln_f_);
      chain_.lm_head(normed_.get(), wte_.get(), logits_.get(), candidate_values_.get(),
                     candidate_indices_.get(), B_, queue, stream, launch);
    }
  }

  ChainResult result() const {
    return ChainResult{bytes_of(hidden_.download()),       bytes_of(normed_.download()),
                       bytes_of(qkv_.download()),          bytes_of(attended_.download()),
                       bytes_of(expanded_.download()),     bytes_of(cache_keys_.download()),
                       bytes_of(cache_values_.download()), logits_.download(),
                       candidate_values_.download(),       candidate_indices_.download()};
  }

 private:
  /// A LayerNorm's weight and bias, [C] each.
  struct LayerNormWeights {
    LayerNormWeights(std::mt19937& rng, const Chain& chain)
        : weight(chain.stored(test::random_uniform(rng, kC, 0.5f, 1.5f))),
          bias(chain.stored(test::random_uniform(rng, kC, -0.5f, 0.5f))) {}
    test::DeviceArray<Storage> weight, bias;
  };

  /// Elements of keys (or values) [B, H, capacity, D].
  static std::size_t cache_size(int B) { return std::size_t(B) * kCapacity * kC; }

  test::DeviceArray<Storage> packed(std::mt19937& rng, int K, int N) const {
    return test::DeviceArray<Storage>(
        chain_.packed(test::random_uniform(rng, std::size_t(K) * N, -0.05f, 0.05f), K, N));
  }

  Chain chain_;
  int B_;
  std::vector<Storage> initial_hidden_, initial_keys_, initial_values_;
  LayerNormWeights ln_1_, ln_2_, ln_f_;
  test::DeviceArray<Storage> qkv_weight_, qkv_bias_, proj_weight_, proj_bias_;
  test::DeviceArray<Storage> fc_weight_, fc_bias_, mlp_weight_, mlp_bias_, wte_;
  test::DeviceArray<Storage> hidden_, normed_, qkv_, attended_, expanded_, cache_keys_,
      cache_values_;
  test::DeviceArray<DecodePosition> cursor_;
  test::DeviceArray<unsigned char> attention_workspace_;
  test::DeviceArray<float> logits_, candidate_values_;
  test::DeviceArray<std::int32_t> candidate_indices_;
};

/// Edges of `graph` of the programmatic type (what stream capture makes of the attribute).
std::size_t programmatic_edges(cudaGraph_t graph) {
  std::size_t count = 0;
  CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  std::vector<cudaGraphNode_t> from(count), to(count);
  std::vector<cudaGraphEdgeData> edges(count);
  CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), edges.data(), &count));
  return static_cast<std::size_t>(std::count_if(edges.begin(), edges.end(), [](const auto& edge) {
    return edge.type == cudaGraphDependencyTypeProgrammatic;
  }));
}

/// Counts the WHILE loop's passes down: the condition is cleared on the last.
__global__ void count_down_kernel(cudaGraphConditionalHandle condition, int* passes_left) {
  *passes_left -= 1;
  cudaGraphSetConditional(condition, *passes_left > 0 ? 1u : 0u);
}

// ---------------------------------------------------------------- where the chain runs
// Each place is a test case of its own (the test type below), so that each can be run by
// name: compute-sanitizer's racecheck ends the process once this chain's WHILE body runs
// (scripts/gpu_check.sh, sanitize), and the stream and the graph are checked all the same.

/// In a stream: programmatic products after kernels that let them start at their exit,
/// then at their start; then the LayerNorms and the attention launched programmatically
/// too.
struct InAStream {
  template <typename Chain>
  static void check(LayerChain<Chain>& layer, test::DecodeQueue& queue, const ChainResult& plain) {
    for (const LaunchDependents dependents :
         {LaunchDependents::kAtExit, LaunchDependents::kAtStart}) {
      CAPTURE(dependents == LaunchDependents::kAtStart);
      layer.reset();
      layer.enqueue(queue, queue.stream.get(), DecodeLaunch::kProgrammatic, dependents);
      queue.stream.synchronize();
      CHECK(layer.result() == plain);
    }
    INFO("the LayerNorms and the attention launched programmatically too");
    layer.reset();
    layer.enqueue(queue, queue.stream.get(), DecodeLaunch::kProgrammatic,
                  LaunchDependents::kAtStart, kRepeats, DecodeLaunch::kProgrammatic);
    queue.stream.synchronize();
    CHECK(layer.result() == plain);
  }
};

/// Captured: the attribute becomes programmatic edges between the kernel nodes; with the
/// LayerNorms and the attention launched programmatically too, one more edge for each of
/// them but the chain's first LayerNorm (4 a repeat: ln_1, the attention, ln_2, ln_f).
struct InACapturedGraph {
  template <typename Chain>
  static void check(LayerChain<Chain>& layer, test::DecodeQueue& queue, const ChainResult& plain) {
    const cudaStream_t stream = queue.stream.get();
    std::size_t products_edges = 0;
    for (const DecodeLaunch between : {DecodeLaunch::kAfterPrevious, DecodeLaunch::kProgrammatic}) {
      CAPTURE(between == DecodeLaunch::kProgrammatic);
      const CudaGraph graph = capture_graph(
          stream,
          [&] {
            layer.enqueue(queue, stream, DecodeLaunch::kProgrammatic, LaunchDependents::kAtStart,
                          kRepeats, between);
          },
          "PDL chain");
      if (queue.workspace.programmatic_launches()) {
        if (between == DecodeLaunch::kAfterPrevious) {
          products_edges = programmatic_edges(graph.get());
          CHECK(products_edges > 0);
        } else {
          CHECK(programmatic_edges(graph.get()) == products_edges + 4 * kRepeats - 1);
        }
      }
      INFO("reached: instantiating the graph");  // a crash's report lists the steps reached
      const CudaGraphExec executable(graph, "PDL chain");
      layer.reset();
      INFO("reached: launching the graph and waiting for it");
      executable.launch(stream);
      synchronize_stage(stream, "the PDL chain graph");
      INFO("reached: reading the results back");
      CHECK(layer.result() == plain);
    }
  }
};

/// The chain inside a WHILE node's body, one chain per pass, its products launched as
/// `launch` says, the kernels before them signalling at their start and launched as
/// `between` says.
template <typename Chain>
void check_in_while_body(LayerChain<Chain>& layer, test::DecodeQueue& queue,
                         const ChainResult& plain, DecodeLaunch launch,
                         DecodeLaunch between = DecodeLaunch::kAfterPrevious) {
  require_conditional_nodes();
  const cudaStream_t stream = queue.stream.get();
  test::DeviceArray<int> passes_left(1);
  CudaGraph loop = CudaGraph::create();
  const cudaGraphConditionalHandle condition = create_condition(loop, /*initial=*/1);
  cudaGraph_t body = nullptr;  // owned by the WHILE node, destroyed with `loop`
  capture_into_graph(
      loop.get(), stream, [&] { body = add_while_node(stream, condition); }, "chain loop");
  capture_into_graph(
      body, stream,
      [&] {
        layer.enqueue(queue, stream, launch, LaunchDependents::kAtStart, /*repeats=*/1, between);
        count_down_kernel<<<1, 1, 0, stream>>>(condition, passes_left.get());
        CUDA_CHECK_LAUNCH(stream);
      },
      "chain loop body");
  if (launch == DecodeLaunch::kProgrammatic && queue.workspace.programmatic_launches())
    CHECK(programmatic_edges(body) > 0);
  if (launch == DecodeLaunch::kAfterPrevious && between == DecodeLaunch::kAfterPrevious)
    CHECK(programmatic_edges(body) == 0);
  INFO("reached: instantiating the loop graph");  // a crash's report lists the steps reached
  const CudaGraphExec loop_executable(loop, "chain loop");
  layer.reset();
  passes_left.upload(std::vector<int>{kRepeats});
  INFO("reached: launching the loop graph and waiting for it");
  loop_executable.launch(stream);
  synchronize_stage(stream, "the chain loop graph");
  INFO("reached: reading the results back");
  CHECK(layer.result() == plain);
  CHECK(passes_left.download() == std::vector<int>{0});
}

/// Inside a WHILE node's body, as chapters 09 and 10's decode loop.
struct InAWhileBody {
  template <typename Chain>
  static void check(LayerChain<Chain>& layer, test::DecodeQueue& queue, const ChainResult& plain) {
    check_in_while_body(layer, queue, plain, DecodeLaunch::kProgrammatic);
  }
};

/// The same WHILE body with the LayerNorms and the attention launched programmatically
/// too, as chapters 09 and 10 run them.
struct AllProgrammaticInAWhileBody {
  template <typename Chain>
  static void check(LayerChain<Chain>& layer, test::DecodeQueue& queue, const ChainResult& plain) {
    check_in_while_body(layer, queue, plain, DecodeLaunch::kProgrammatic,
                        DecodeLaunch::kProgrammatic);
  }
};

/// The same WHILE body with every product plainly launched: no programmatic edge in the
/// loop. Beside InAWhileBody it tells a tool's trouble with programmatic launches from its
/// trouble with the body's kernels in a WHILE node (racecheck ends the process in
/// InAWhileBody, while gpu_tests "[graphs]"'s WHILE loop of small kernels passes under it).
struct PlainInAWhileBody {
  template <typename Chain>
  static void check(LayerChain<Chain>& layer, test::DecodeQueue& queue, const ChainResult& plain) {
    check_in_while_body(layer, queue, plain, DecodeLaunch::kAfterPrevious);
  }
};

/// The chain with plain launches and no early start (the reference), then where `Place`
/// runs it with programmatic products: every result the same bits.
template <typename Place, typename Chain>
void check_launches_agree(const Chain& chain, int B) {
  CAPTURE(B);
  LADDER_SEEDED_RNG(rng);
  test::DecodeQueue queue;
  LayerChain<Chain> layer(rng, chain, B);

  layer.reset();
  layer.enqueue(queue, queue.stream.get(), DecodeLaunch::kAfterPrevious, LaunchDependents::kAtExit);
  queue.stream.synchronize();
  const ChainResult plain = layer.result();
  Place::check(layer, queue, plain);
}

constexpr int kBatches[] = {1, 7, 32, 64};

TEMPLATE_TEST_CASE(
    "programmatic launches of the fp32 and tf32 decode matmuls, after LayerNorms and the "
    "attention that let them start early, give the plain launches' bits",
    "[kernels][decode_matmul][pdl]", InAStream, InACapturedGraph, InAWhileBody,
    AllProgrammaticInAWhileBody, PlainInAWhileBody) {
  for (const DecodePrecision precision : {DecodePrecision::kFp32, DecodePrecision::kTf32}) {
    CAPTURE(precision == DecodePrecision::kTf32);
    for (const int B : kBatches) check_launches_agree<TestType>(Fp32Chain{precision}, B);
  }
}

TEMPLATE_TEST_CASE(
    "programmatic launches of the bf16 decode matmuls, after LayerNorms and the attention "
    "that let them start early, give the plain launches' bits",
    "[kernels][decode_matmul][bf16][pdl]", InAStream, InACapturedGraph, InAWhileBody,
    AllProgrammaticInAWhileBody, PlainInAWhileBody) {
  for (const int B : kBatches) check_launches_agree<TestType>(Bf16Chain{}, B);
}

}  // namespace
}  // namespace ladder
