// tests/gpu/test_cuda_graph.cpp - the capture rules chapters 07 and 08 rely on, on the GPU:
// a capture records and does not run, a replay repeats the recorded work; allocators
// and cuBLASLt's heuristic refuse to run inside a capture, and a product planned before
// it replays bit for bit; a WHILE node driven by the argmax step stops where the host
// loop would; the chapters' traced columns count one graph launch per step (07) and
// per generation (08); and a graph chapter's traced run, even after another
// configuration's, holds no capture and a plain step's kernels. Run: gpu_tests "[graphs]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_graph.hpp"
#include "common/device_allocator.hpp"
#include "common/prompts.hpp"
#include "common/reference.hpp"
#include "common/weights.hpp"
#include "kernels/elementwise.cuh"
#include "kernels/matmul.cuh"
#include "kernels/sampling.cuh"
#include "tests/gpu/device_test_helpers.hpp"
#include "tests/gpu/greedy_step_buffers.hpp"
#include "tests/support/chapter_process.hpp"
#include "tests/support/golden_data.hpp"

namespace ladder {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("a capture records without running, and each launch replays the work once", "[graphs]") {
  const test::DeviceStream stream;
  const int rows = 3;
  const int columns = 37;
  const std::size_t count = static_cast<std::size_t>(rows) * columns;
  test::DeviceArray<float> total(std::vector<float>(count, 0.0f));
  const test::DeviceArray<float> one(std::vector<float>(count, 1.0f));

  // In debug builds the launch check inside would wait for the stream: it must not
  // while the stream captures (the capture would fail).
  GraphCache<CudaGraphExec> cache;
  const GraphKey key = GraphKey().add_size(rows).add_address(total.get());
  REQUIRE(cache.find(key) == nullptr);
  CudaGraphExec& graph = cache.store(
      key,
      CudaGraphExec(
          capture_graph(
              stream.get(),
              [&] { launch_residual_add(total.get(), one.get(), rows, columns, stream.get()); },
              "residual add"),
          "residual add"));
  CHECK_FALSE(stream_is_capturing(stream.get()));
  CHECK(total.download() == std::vector<float>(count, 0.0f));  // nothing ran yet

  for (int launch = 0; launch < 3; ++launch) cache.find(key)->launch(stream.get());
  synchronize_stage(stream.get(), "three replays");
  CHECK(total.download() == std::vector<float>(count, 3.0f));
  CHECK(graph.name() == "residual add");
}

TEST_CASE("the allocators refuse to allocate on a capturing stream", "[graphs]") {
  const test::DeviceStream stream;
  for (const char* name : {"caching", "expandable"}) {
    INFO("allocator " << name);
    const std::unique_ptr<DeviceAllocator> allocator = make_device_allocator(name);
    CHECK_THROWS_WITH(
        capture_graph(
            stream.get(), [&] { DeviceBuffer buffer(*allocator, 4096, stream.get()); },
            "allocation"),
        Contains("capturing a CUDA graph"));
    // The failed capture was ended: the stream works again, and so does the allocator.
    CHECK_FALSE(stream_is_capturing(stream.get()));
    const DeviceBuffer after(*allocator, 4096, stream.get());
    CHECK(after.as<void>() != nullptr);
    CHECK(allocator->stats().allocations == 1);
  }
}

TEST_CASE("cuBLASLt chooses its algorithm before a capture, and the replay equals the product",
          "[graphs]") {
  LADDER_SEEDED_RNG(rng);
  const test::DeviceStream stream;
  const int rows = 5;
  const int in = 64;
  const int out = 96;
  const test::DeviceArray<float> x(test::random_uniform(rng, rows * in, -1.0f, 1.0f));
  const test::DeviceArray<float> weight(test::random_uniform(rng, in * out, -0.1f, 0.1f));
  const test::DeviceArray<float> bias(test::random_uniform(rng, out, -0.1f, 0.1f));
  test::DeviceArray<float> y(static_cast<std::size_t>(rows) * out);
  const test::DeviceArray<char> workspace(std::size_t{4} << 20);
  LtMatmul matmul(workspace.get(), workspace.size());
  const auto product = [&] {
    matmul.linear(x.get(), weight.get(), bias.get(), y.get(), rows, in, out,
                  LinearEpilogue::kBiasGelu, stream.get());
  };

  // No plan yet: inside a capture that is an error, and the stream is usable afterwards.
  CHECK_THROWS_WITH(capture_graph(stream.get(), product, "product"), Contains("no plan yet"));
  CHECK_FALSE(stream_is_capturing(stream.get()));
  CHECK(matmul.cached_plans() == 0);

  product();  // plainly: the heuristic runs here, once
  const std::vector<float> plain = y.download();
  REQUIRE(matmul.cached_plans() == 1);
  y.poison();
  const CudaGraphExec graph(capture_graph(stream.get(), product, "product"), "product");
  CHECK(matmul.cached_plans() == 1);  // the capture asked nothing
  graph.launch(stream.get());
  synchronize_stage(stream.get(), "the product's replay");
  CHECK(y.download() == plain);  // the same kernel on the same data: bit for bit
}

/// Greedy bookkeeping for the WHILE-loop tests: B rows, max_steps columns, every output
/// poisoned (-1), no row finished, and the cursor at step 0.
struct LoopState : test::StepBuffers {
  LoopState(int batch, int vocabulary, int steps, int eos)
      : StepBuffers(batch, vocabulary, steps, eos), cursor(test::device_cursor(0, 0)) {
    output_tokens.poison();
  }
  test::DeviceArray<DecodePosition> cursor;
};

/// A graph as chapter 08 builds it, on fixed logits: the argmax step, then a WHILE node
/// whose body is the argmax step again.
CudaGraphExec capture_argmax_loop(const float* logits, LoopState& loop, cudaStream_t stream) {
  CudaGraph graph = CudaGraph::create();
  const cudaGraphConditionalHandle another_step = create_condition(graph, 0);
  const auto step = [&] {
    launch_argmax_step_in_graph_loop(logits, loop.next_tokens.get(), loop.state(),
                                     loop.cursor.get(), loop.B, loop.V, another_step, stream);
  };
  cudaGraph_t body = nullptr;
  capture_into_graph(
      graph.get(), stream,
      [&] {
        step();
        body = add_while_node(stream, another_step);
      },
      "argmax loop");
  capture_into_graph(body, stream, step, "argmax loop body");
  return CudaGraphExec(graph, "argmax loop");
}

TEST_CASE("a WHILE node set by the argmax step stops when every row finished or steps ran out",
          "[graphs]") {
  require_conditional_nodes();
  const test::DeviceStream stream;
  const int V = 16;
  const int B = 3;
  const int max_steps = 6;
  // Row b's argmax is winners[b] at every step (the logits never change).
  const std::vector<std::int32_t> winners = {2, 7, 2};
  std::vector<float> host_logits(static_cast<std::size_t>(B) * V, 0.0f);
  for (int b = 0; b < B; ++b) host_logits[static_cast<std::size_t>(b) * V + winners[b]] = 1.0f;
  const test::DeviceArray<float> logits(host_logits);

  struct Case {
    int eos;
    int expected_steps;
  };
  // EOS never emitted: every step runs. Only row 1 emits it: still every step. Rows 0
  // and 2 emit it (eos 2) but row 1 never finishes: every step.
  for (const Case& c : {Case{15, max_steps}, Case{7, max_steps}, Case{2, max_steps}}) {
    INFO("eos " << c.eos);
    LoopState loop(B, V, max_steps, c.eos);
    const CudaGraphExec graph = capture_argmax_loop(logits.get(), loop, stream.get());
    graph.launch(stream.get());
    synchronize_stage(stream.get(), "the argmax loop");
    CHECK(loop.cursor.download().front().step == c.expected_steps);
    std::vector<std::int32_t> expected;
    for (int b = 0; b < B; ++b) expected.insert(expected.end(), max_steps, winners[b]);
    CHECK(loop.output_tokens.download() == expected);
  }

  // Every row emits EOS at once: the first step is the last, and the body never runs.
  std::vector<float> same_logits(static_cast<std::size_t>(B) * V, 0.0f);
  for (int b = 0; b < B; ++b) same_logits[static_cast<std::size_t>(b) * V + 2] = 1.0f;
  const test::DeviceArray<float> finishing(same_logits);
  LoopState loop(B, V, max_steps, /*eos=*/2);
  const CudaGraphExec graph = capture_argmax_loop(finishing.get(), loop, stream.get());
  // Twice: the condition starts at 0 on every launch, and the state is put back by hand.
  for (int launch = 0; launch < 2; ++launch) {
    INFO("launch " << launch);
    loop.finished.upload(std::vector<std::int32_t>(B, 0));
    loop.cursor.upload({DecodePosition{0, 0}});
    graph.launch(stream.get());
    synchronize_stage(stream.get(), "the argmax loop");
    CHECK(loop.cursor.download().front().step == 1);
    const std::vector<std::int32_t> tokens = loop.output_tokens.download();
    for (int b = 0; b < B; ++b) {
      CHECK(tokens[static_cast<std::size_t>(b) * max_steps] == 2);
      CHECK(tokens[static_cast<std::size_t>(b) * max_steps + 1] == -1);  // never written
    }
  }
}

TEST_CASE("the loop-condition argmax refuses to run outside a capture", "[graphs]") {
  const test::DeviceStream stream;
  LoopState loop(2, 4, 3, 0);
  const test::DeviceArray<float> logits(std::vector<float>(2 * 4, 0.0f));
  CHECK_THROWS_AS(
      launch_argmax_step_in_graph_loop(logits.get(), loop.next_tokens.get(), loop.state(),
                                       loop.cursor.get(), 2, 4, 0, stream.get()),
      std::invalid_argument);
}

TEST_CASE("a step's logits land in the cursor's row of the history", "[graphs]") {
  LADDER_SEEDED_RNG(rng);
  const test::DeviceStream stream;
  const int B = 3;
  const int V = 11;
  const int max_steps = 4;
  const std::size_t count = static_cast<std::size_t>(B) * V;
  const std::vector<float> host_logits = test::random_uniform(rng, count, -1.0f, 1.0f);
  const test::DeviceArray<float> logits(host_logits);
  test::DeviceArray<float> history(max_steps * count);
  history.poison();
  const test::DeviceArray<DecodePosition> at_step_2 = test::device_cursor(2, 7);
  const test::DeviceArray<DecodePosition> past_the_end = test::device_cursor(max_steps, 9);
  launch_store_step_logits(logits.get(), history.get(), at_step_2.get(), B, V, max_steps,
                           stream.get());
  launch_store_step_logits(logits.get(), history.get(), past_the_end.get(), B, V, max_steps,
                           stream.get());
  const std::vector<float> result = history.download();
  for (int step = 0; step < max_steps; ++step) {
    for (std::size_t i = 0; i < count; ++i) {
      const float value = result[static_cast<std::size_t>(step) * count + i];
      if (step == 2)
        REQUIRE(value == host_logits[i]);
      else
        REQUIRE(std::isnan(value));
    }
  }
}

/// One configuration of `chapter`'s JSON report, run with `arguments` (after one warm-up
/// run, so the graphs are captured before the timed and traced runs).
nlohmann::json traced_configuration(const std::string& chapter,
                                    const std::vector<std::string>& arguments) {
  const std::string directory = testing::make_temporary_directory("ladder-graph-columns");
  const std::string json_path = directory + "/report.json";
  std::vector<std::string> full = arguments;
  full.insert(full.end(), {"--warmup", "1", "--runs", "2", "--quiet", "--json", json_path});
  const testing::ProcessResult result = testing::run_chapter_process(chapter, full);
  INFO(chapter << " printed: " << result.output);
  REQUIRE(result.exit_code == 0);
  std::ifstream file(json_path);
  const nlohmann::json configuration = nlohmann::json::parse(file).at("configurations").at(0);
  REQUIRE_FALSE(configuration.at("kernels_per_step").is_null());  // CUPTI traced the run
  return configuration;
}

/// Per-step column times steps: the count over the traced generation.
double per_generation(const nlohmann::json& configuration, const char* column) {
  return configuration.at(column).get<double>() * configuration.at("steps").get<double>();
}

// Calls of one CUDA runtime or driver function in the traced run (0 when not listed).
double calls_per_generation(const nlohmann::json& configuration, const std::string& call) {
  const nlohmann::json& calls = configuration.at("host_api_calls_per_step");
  double seconds_before = std::numeric_limits<double>::infinity();
  double found = 0;
  for (const nlohmann::json& entry : calls) {
    CHECK(entry.at("s").get<double>() <= seconds_before);  // most host time first
    seconds_before = entry.at("s").get<double>();
    if (entry.at("call") == call)
      found = entry.at("calls").get<double>() * configuration.at("steps").get<double>();
  }
  return found;
}

// [cupti]: it reads the launch counts CUPTI traced, which no tool beside a sanitizer can.
TEST_CASE("chapter 07 launches one graph per decode step, chapters 08 and 09 one per generation",
          "[graphs][chapters][cupti]") {
  const Gpt2Weights weights = testing::load_golden_model();
  const int batch = 4;
  const int prompt_length = 3;
  const int new_tokens = 12;
  const std::uint64_t seed = 5;
  const PromptBatch prompts = random_prompts(batch, prompt_length, weights.config.vocab_size,
                                             weights.config.eos_token_id, seed);
  // An EOS id the rows never emit within the limit, so that every chapter runs all
  // steps and none enqueues a speculative one.
  int eos = weights.config.vocab_size - 1;
  while (eos > 0 &&
         reference::generate(weights, prompts.rows(), new_tokens, eos, false).steps != new_tokens)
    --eos;
  REQUIRE(eos > 0);
  const std::vector<std::string> arguments = {"--weights",
                                              testing::golden_model_directory(),
                                              "--batch",
                                              std::to_string(batch),
                                              "--new-tokens",
                                              std::to_string(new_tokens),
                                              "--random-prompt-length",
                                              std::to_string(prompt_length),
                                              "--seed",
                                              std::to_string(seed),
                                              "--eos",
                                              std::to_string(eos)};

  const nlohmann::json interleaved = traced_configuration("06_stream_interleaving", arguments);
  const nlohmann::json graphs = traced_configuration("07_cuda_graphs", arguments);
  const nlohmann::json device_loop = traced_configuration("08_device_loop", arguments);
  const nlohmann::json decode_matmuls = traced_configuration("09_decode_matmuls", arguments);
  for (const nlohmann::json* configuration : {&interleaved, &graphs, &device_loop, &decode_matmuls})
    REQUIRE(configuration->at("steps").get<int>() == new_tokens);

  CHECK(per_generation(interleaved, "graph_launches_per_step") == 0);
  // 07: every decode step replays its stream's graph (captured in the warm-up run).
  CHECK(per_generation(graphs, "graph_launches_per_step") == Approx(new_tokens - 1));
  CHECK(per_generation(graphs, "host_syncs_per_step") == Approx(new_tokens - 1));
  // The traced calls say the same: cudaGraphLaunch once a decode step in 07, never in 06.
  CHECK(calls_per_generation(graphs, "cudaGraphLaunch") == Approx(new_tokens - 1));
  CHECK(calls_per_generation(interleaved, "cudaGraphLaunch") == 0);
  // 08: one launch and one wait. It runs 07's kernels (plus, at most, one the driver may
  // add per pass of the loop): fewer than one step more. No lower bound: CUPTI on driver
  // 580 does not always record every pass of a WHILE node's body (on this model some runs
  // counted the prefill and one pass, 49 kernels a generation whatever N, where 07 counts
  // 23 a step), so a low count is the trace's, not the chapter's.
  CHECK(per_generation(device_loop, "graph_launches_per_step") == Approx(1));
  CHECK(per_generation(device_loop, "host_syncs_per_step") == Approx(1));
  CAPTURE(per_generation(interleaved, "kernels_per_step"),
          per_generation(graphs, "kernels_per_step"),
          per_generation(device_loop, "kernels_per_step"),
          per_generation(decode_matmuls, "kernels_per_step"));
  CHECK(per_generation(device_loop, "kernels_per_step") -
            per_generation(graphs, "kernels_per_step") <
        graphs.at("kernels_per_step").get<double>());
  CHECK(per_generation(graphs, "kernels_per_step") ==
        Approx(per_generation(interleaved, "kernels_per_step")));
  // The point of it all, which tracing inflates but keeps in order: less host time.
  CHECK(graphs.at("host_api_s_per_step").get<double>() <
        interleaved.at("host_api_s_per_step").get<double>());
  CHECK(device_loop.at("host_api_s_per_step").get<double>() <
        graphs.at("host_api_s_per_step").get<double>());
  // 09: 08's graph, each product one decode-matmul launch where cuBLASLt took one or two
  // (a split-K reduction), and nothing else added: at most 07's kernels and one a pass
  // (07's count, because 08's may be short of passes, as above).
  CHECK(per_generation(decode_matmuls, "graph_launches_per_step") == Approx(1));
  CHECK(per_generation(decode_matmuls, "host_syncs_per_step") == Approx(1));
  CHECK(per_generation(decode_matmuls, "kernels_per_step") <=
        per_generation(graphs, "kernels_per_step") + new_tokens + 0.5);
}

/// The configurations of `chapter`'s JSON report, run with `arguments` and the runner's
/// defaults otherwise, except one timed run.
nlohmann::json traced_configurations(const std::string& chapter,
                                     const std::vector<std::string>& arguments) {
  const std::string directory = testing::make_temporary_directory("ladder-traced-runs");
  const std::string json_path = directory + "/report.json";
  std::vector<std::string> full = arguments;
  full.insert(full.end(), {"--runs", "1", "--quiet", "--json", json_path});
  const testing::ProcessResult result = testing::run_chapter_process(chapter, full);
  INFO(chapter << " printed: " << result.output);
  REQUIRE(result.exit_code == 0);
  std::ifstream file(json_path);
  return nlohmann::json::parse(file).at("configurations");
}

/// Calls in the traced run of `configuration` whose name holds `part` ("GraphInstantiate"
/// matches the runtime's and the driver's entry points, with flags or without).
double calls_named_like(const nlohmann::json& configuration, const std::string& part) {
  double calls = 0;
  for (const nlohmann::json& entry : configuration.at("host_api_calls_per_step"))
    if (entry.at("call").get<std::string>().find(part) != std::string::npos)
      calls += entry.at("calls").get<double>();
  return calls;
}

// [cupti]: it reads what CUPTI traced. The traced runs come after every timed run, so the
// first configuration's trace follows the last configuration's graph: unless the runner
// warms the configuration up again first, the trace holds a capture and an instantiation
// (host time per step and, in the device-loop chapters, kernels per step inflated by
// them). With two configurations of different lengths (different graph keys), each traced
// run must hold no instantiation and no capture, and the first configuration's kernels
// per step must be those of the same configuration traced alone, where nothing came before.
TEST_CASE("a graph chapter's traced run holds no capture and a plain step's kernels",
          "[graphs][chapters][cupti]") {
  const std::vector<std::string> model = {"--weights",
                                          testing::golden_model_directory(),
                                          "--batch",
                                          "3",
                                          "--random-prompt-length",
                                          "2",
                                          "--seed",
                                          "4"};
  const std::vector<std::string> chapters = testing::chapter_names();
  for (const char* chapter :
       {"07_cuda_graphs", "08_device_loop", "09_decode_matmuls", "10_mixed_precision"}) {
    if (std::find(chapters.begin(), chapters.end(), chapter) == chapters.end()) continue;
    INFO("chapter " << chapter);
    // --warmup 0 as well: a GPU chapter still warms each configuration up once.
    for (const char* warmup : {"0", "1"}) {
      INFO("--warmup " << warmup);
      std::vector<std::string> both = model;
      both.insert(both.end(), {"--new-tokens", "10,14", "--warmup", warmup});
      const nlohmann::json configurations = traced_configurations(chapter, both);
      REQUIRE(configurations.size() == 2);
      for (const nlohmann::json& configuration : configurations) {
        REQUIRE_FALSE(configuration.at("kernels_per_step").is_null());  // CUPTI traced it
        CHECK(calls_named_like(configuration, "GraphInstantiate") == 0);
        CHECK(calls_named_like(configuration, "BeginCapture") == 0);
      }
      std::vector<std::string> alone = model;
      alone.insert(alone.end(), {"--new-tokens", "10", "--warmup", warmup});
      const nlohmann::json reference_configuration = traced_configurations(chapter, alone).at(0);
      const double first = per_generation(configurations.at(0), "kernels_per_step");
      const double plain = per_generation(reference_configuration, "kernels_per_step");
      CAPTURE(first, plain);
      // CUPTI on some drivers misses passes of a WHILE node's body (chapter 07's test
      // above): a count below half the other is that, not the chapter, and is not compared.
      if (std::min(first, plain) < 0.5 * std::max(first, plain)) {
        WARN("CUPTI missed passes of the loop in one of the traces; kernels not compared");
        continue;
      }
      CHECK(first == Approx(plain).margin(0.5));
    }
  }
}

}  // namespace
}  // namespace ladder
