// tests/cpu/test_persistent_schedule.cpp - the persistent decode kernel's schedule
// (common/persistent_schedule.hpp) and its proof on the CPU
// (common/persistent_schedule_simulator.hpp).
//
// The builder: the instructions each op gets, block lists that partition the step in
// increasing order, bad shapes refused. The simulator: small shapes over many seeds (odd
// tilings whose splits do not divide the chunks, heads that straddle 64-column tiles,
// one block, more blocks than instructions) and GPT-2 small's shapes run without a
// deadlock or a data hazard; and it can fail: a schedule with a wait removed, a signal
// dropped, a wait on a later instruction or an instruction duplicated is caught.
// Run: cpu_tests "[persistent]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/persistent_schedule.hpp"
#include "common/persistent_schedule_simulator.hpp"

using ladder::build_persistent_schedule;
using ladder::check_wait_order;
using ladder::CounterWait;
using ladder::PersistentInstruction;
using ladder::PersistentOp;
using ladder::PersistentProduct;
using ladder::PersistentSchedule;
using ladder::PersistentShape;
using ladder::ProductTiling;
using ladder::simulate_persistent_schedule;
using ladder::SimulationResult;

namespace {

/// Splits per product, in PersistentProduct order: qkv, attention projection, c_fc, MLP
/// projection, LM head.
struct Splits {
  int per_product[ladder::kPersistentProducts];
};

/// Chapter 10's plan for a product cut into `splits` runs of K: 64-column tiles, 64-input
/// chunks, ceil(chunks / splits) chunks a split.
ProductTiling tiling(PersistentProduct product, int C, int V, int splits) {
  const ladder::ProductSize size = ladder::persistent_product_size(product, C, V);
  ProductTiling t;
  t.splits = splits;
  t.column_tiles = (size.N + 63) / 64;
  t.chunks = (size.K + 63) / 64;
  t.chunks_per_split = (t.chunks + splits - 1) / splits;
  return t;
}

PersistentShape make_shape(int n_layer, int C, int H, int V, int B, Splits splits, int blocks) {
  PersistentShape shape;
  shape.n_layer = n_layer;
  shape.n_embd = C;
  shape.n_head = H;
  shape.vocab_size = V;
  shape.batch = B;
  shape.blocks = blocks;
  for (int p = 0; p < ladder::kPersistentProducts; ++p)
    shape.products[p] = tiling(static_cast<PersistentProduct>(p), C, V, splits.per_product[p]);
  return shape;
}

// GPT-2 small's tilings: qkv 6 x 36, attention projection 12 x 12, c_fc 4 x 48, MLP
// projection 16 x 12, LM head 1 x 786.
constexpr Splits kGpt2Splits{{6, 12, 4, 16, 1}};

PersistentShape gpt2_small(int B, int blocks) {
  return make_shape(12, 768, 12, 50257, B, kGpt2Splits, blocks);
}

int count_op(const PersistentSchedule& schedule, PersistentOp op) {
  return static_cast<int>(std::count_if(
      schedule.instructions.begin(), schedule.instructions.end(),
      [&](const PersistentInstruction& i) { return i.op == static_cast<std::int32_t>(op); }));
}

int count_product(const PersistentSchedule& schedule, PersistentProduct product) {
  return static_cast<int>(std::count_if(schedule.instructions.begin(), schedule.instructions.end(),
                                        [&](const PersistentInstruction& i) {
                                          return i.op == static_cast<std::int32_t>(
                                                             PersistentOp::kProduct) &&
                                                 i.which == static_cast<std::int32_t>(product);
                                        }));
}

/// Instruction i to block i % blocks again, after a test edited the list.
void assign_blocks(PersistentSchedule& schedule) {
  const int blocks = schedule.shape.blocks;
  const int count = static_cast<int>(schedule.instructions.size());
  schedule.block_first.assign(static_cast<std::size_t>(blocks) + 1, 0);
  schedule.block_instructions.clear();
  for (int k = 0; k < blocks; ++k) {
    for (int i = k; i < count; i += blocks) schedule.block_instructions.push_back(i);
    schedule.block_first[k + 1] = static_cast<std::int32_t>(schedule.block_instructions.size());
  }
}

/// Removes wait `w` (0-based, of its instruction's waits) of instruction `i`.
void remove_wait(PersistentSchedule& schedule, int i, int w) {
  PersistentInstruction& instruction = schedule.instructions[static_cast<std::size_t>(i)];
  schedule.waits.erase(schedule.waits.begin() + instruction.first_wait + w);
  --instruction.wait_count;
  for (PersistentInstruction& later : schedule.instructions)
    if (later.first_wait > instruction.first_wait) --later.first_wait;
}

/// Adds `wait` to instruction i's waits.
void add_wait(PersistentSchedule& schedule, int i, CounterWait wait) {
  PersistentInstruction& instruction = schedule.instructions[static_cast<std::size_t>(i)];
  const int at = instruction.first_wait + instruction.wait_count;
  schedule.waits.insert(schedule.waits.begin() + at, wait);
  for (PersistentInstruction& later : schedule.instructions)
    if (later.first_wait >= at && &later != &instruction) ++later.first_wait;
  ++instruction.wait_count;
}

int first_instruction(const PersistentSchedule& schedule, PersistentOp op) {
  for (std::size_t i = 0; i < schedule.instructions.size(); ++i)
    if (schedule.instructions[i].op == static_cast<std::int32_t>(op)) return static_cast<int>(i);
  return -1;
}

/// The first seed (of `seeds`) whose run fails, or -1; its result in `result`.
int first_failing_seed(const PersistentSchedule& schedule, int steps, int seeds,
                       SimulationResult& result) {
  for (int seed = 0; seed < seeds; ++seed) {
    result = simulate_persistent_schedule(schedule, steps, static_cast<std::uint64_t>(seed));
    if (!result.ok) return seed;
  }
  return -1;
}

bool mentions(const std::string& text, const std::string& word) {
  return text.find(word) != std::string::npos;
}

}  // namespace

// ---------------------------------------------------------------- the builder

TEST_CASE("persistent schedule: the instructions of each op", "[persistent]") {
  const int L = 2;
  const int C = 192;
  const int H = 4;
  const int V = 200;
  const int B = 3;
  const PersistentShape shape = make_shape(L, C, H, V, B, Splits{{2, 3, 1, 3, 2}}, 7);
  const PersistentSchedule schedule = build_persistent_schedule(shape);
  const auto units = [&](PersistentProduct p) {
    return shape.products[static_cast<int>(p)].units();
  };
  CHECK(count_op(schedule, PersistentOp::kEmbedding) == B);
  CHECK(count_op(schedule, PersistentOp::kLayerNorm) == (2 * L + 1) * B);
  CHECK(count_op(schedule, PersistentOp::kAttention) == L * B * H);
  CHECK(count_op(schedule, PersistentOp::kArgmax) == B);
  CHECK(count_op(schedule, PersistentOp::kStop) == 1);
  CHECK(count_product(schedule, PersistentProduct::kQkv) == L * units(PersistentProduct::kQkv));
  CHECK(units(PersistentProduct::kQkv) == 2 * 9);  // 3 chunks in splits of 2 + 1
  CHECK(count_product(schedule, PersistentProduct::kAttentionProjection) ==
        L * units(PersistentProduct::kAttentionProjection));
  CHECK(count_product(schedule, PersistentProduct::kMlpExpand) ==
        L * units(PersistentProduct::kMlpExpand));
  CHECK(count_product(schedule, PersistentProduct::kMlpProjection) ==
        L * units(PersistentProduct::kMlpProjection));
  CHECK(count_product(schedule, PersistentProduct::kLmHead) == units(PersistentProduct::kLmHead));
  CHECK(units(PersistentProduct::kLmHead) == 2 * 4);  // 200 columns: 4 tiles
  int products = 0;
  for (int p = 0; p < ladder::kPersistentProducts; ++p)
    products += count_product(schedule, static_cast<PersistentProduct>(p));
  CHECK(static_cast<int>(schedule.instructions.size()) ==
        B + (2 * L + 1) * B + L * B * H + products + B + 1);
  // The step opens with the embedding and closes with the stop decision.
  CHECK(schedule.instructions.front().op == static_cast<std::int32_t>(PersistentOp::kEmbedding));
  CHECK(schedule.instructions.back().op == static_cast<std::int32_t>(PersistentOp::kStop));
  CHECK(schedule.instructions.back().signal == schedule.stop_counter);
  CHECK(check_wait_order(schedule).empty());
}

TEST_CASE("persistent schedule: GPT-2 small's instruction count", "[persistent]") {
  for (const int B : {1, 32}) {
    CAPTURE(B);
    const PersistentSchedule schedule = build_persistent_schedule(gpt2_small(B, 264));
    // Per layer: 2 LayerNorms of B rows, qkv 6 x 36, B x 12 heads, 12 x 12, 4 x 48, 16 x 12.
    const int per_layer = 2 * B + 216 + 12 * B + 144 + 192 + 192;
    CHECK(static_cast<int>(schedule.instructions.size()) == B + 12 * per_layer + B + 786 + B + 1);
    CHECK(check_wait_order(schedule).empty());
  }
}

TEST_CASE("persistent schedule: the block lists partition the step, each increasing",
          "[persistent]") {
  for (const int blocks : {1, 2, 7, 64, 5000}) {
    CAPTURE(blocks);
    const PersistentSchedule schedule =
        build_persistent_schedule(make_shape(2, 128, 2, 200, 3, Splits{{2, 1, 2, 3, 1}}, blocks));
    const int count = static_cast<int>(schedule.instructions.size());
    REQUIRE(static_cast<int>(schedule.block_first.size()) == blocks + 1);
    CHECK(schedule.block_first.front() == 0);
    CHECK(schedule.block_first.back() == count);
    std::vector<int> seen(static_cast<std::size_t>(count), 0);
    for (int k = 0; k < blocks; ++k) {
      for (int at = schedule.block_first[k]; at < schedule.block_first[k + 1]; ++at) {
        const int i = schedule.block_instructions[static_cast<std::size_t>(at)];
        REQUIRE(i >= 0);
        REQUIRE(i < count);
        ++seen[static_cast<std::size_t>(i)];
        CHECK(i % blocks == k);
        if (at > schedule.block_first[k])
          CHECK(i > schedule.block_instructions[static_cast<std::size_t>(at) - 1]);
      }
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
}

TEST_CASE("persistent schedule: shapes the kernel cannot run are refused", "[persistent]") {
  const Splits splits{{2, 1, 2, 3, 1}};
  CHECK_NOTHROW(build_persistent_schedule(make_shape(2, 128, 2, 200, 64, splits, 7)));
  CHECK_THROWS_AS(build_persistent_schedule(make_shape(2, 128, 2, 200, 0, splits, 7)),
                  std::invalid_argument);
  CHECK_THROWS_AS(build_persistent_schedule(make_shape(2, 128, 2, 200, 65, splits, 7)),
                  std::invalid_argument);
  CHECK_THROWS_AS(build_persistent_schedule(make_shape(2, 96, 2, 200, 3, splits, 7)),
                  std::invalid_argument);  // n_embd not a multiple of 64
  CHECK_THROWS_AS(build_persistent_schedule(make_shape(2, 128, 3, 200, 3, splits, 7)),
                  std::invalid_argument);  // n_embd not divisible by n_head
  CHECK_THROWS_AS(build_persistent_schedule(make_shape(0, 128, 2, 200, 3, splits, 7)),
                  std::invalid_argument);
  CHECK_THROWS_AS(build_persistent_schedule(make_shape(2, 128, 2, 200, 3, splits, 0)),
                  std::invalid_argument);

  const auto refused = [&](int product, auto&& spoil) {
    PersistentShape shape = make_shape(2, 128, 2, 200, 3, splits, 7);
    spoil(shape.products[product]);
    CAPTURE(product);
    CHECK_THROWS_AS(build_persistent_schedule(shape), std::invalid_argument);
  };
  for (int p = 0; p < ladder::kPersistentProducts; ++p) {
    refused(p, [](ProductTiling& t) { --t.column_tiles; });  // N not covered
    refused(p, [](ProductTiling& t) { ++t.column_tiles; });  // a tile past N
    refused(p, [](ProductTiling& t) { --t.chunks; });        // K not covered
    refused(p, [](ProductTiling& t) { ++t.chunks; });
    refused(p, [](ProductTiling& t) { t.splits = 0; });
    refused(p, [](ProductTiling& t) {  // the splits stop short of K (every K here: 2+ chunks)
      t.splits = 1;
      t.chunks_per_split = t.chunks - 1;
    });
    refused(p, [](ProductTiling& t) {  // a split with no chunk
      t.splits = t.chunks + 1;
      t.chunks_per_split = 1;
    });
  }
}

TEST_CASE("persistent schedule: instructions describe themselves", "[persistent]") {
  const PersistentSchedule schedule =
      build_persistent_schedule(make_shape(2, 128, 2, 200, 3, Splits{{2, 1, 2, 3, 1}}, 7));
  CHECK(describe(schedule, schedule.instructions.front()) == "the embedding of row 0");
  CHECK(describe(schedule, schedule.instructions.back()) == "the stop decision");
  const int attention = first_instruction(schedule, PersistentOp::kAttention);
  CHECK(describe(schedule, schedule.instructions[attention]) ==
        "layer 0, attention of row 0, head 0");
}

// ---------------------------------------------------------------- the simulator

TEST_CASE("persistent schedule: small shapes run without deadlock or hazard", "[persistent]") {
  struct Model {
    int C;
    int H;
    Splits splits;
  };
  // C 128: heads of 64 and of 32 columns; C 192 with 4 heads of 48: heads straddle the
  // tiles of qkv and the chunks of the projection. Splits that do not divide the chunks
  // (8 chunks in 3 splits: 3 + 3 + 2; 3 chunks in 2: 2 + 1), and splits of one chunk.
  const Model models[] = {{128, 2, {{2, 1, 2, 3, 1}}},
                          {128, 4, {{1, 2, 1, 8, 2}}},
                          {192, 4, {{2, 3, 2, 4, 3}}},
                          {192, 3, {{3, 2, 1, 3, 1}}}};
  int runs = 0;
  for (const int B : {1, 3, 8, 64}) {
    for (const int blocks : {1, 2, 7, 64, 5000}) {
      const Model& model = models[static_cast<std::size_t>(runs % 4)];
      const PersistentSchedule schedule =
          build_persistent_schedule(make_shape(2, model.C, model.H, 200, B, model.splits, blocks));
      REQUIRE(check_wait_order(schedule).empty());
      const int seeds = B == 64 ? 10 : 100;
      for (int seed = 0; seed < seeds; ++seed) {
        const SimulationResult result =
            simulate_persistent_schedule(schedule, 3, static_cast<std::uint64_t>(seed));
        if (!result.ok) {
          CAPTURE(B, blocks, model.C, model.H, seed);
          FAIL(result.problem);
        }
        CHECK(result.executed == 3LL * static_cast<long long>(schedule.instructions.size()));
      }
      ++runs;
    }
  }
}

TEST_CASE("persistent schedule: GPT-2 small runs without deadlock or hazard", "[persistent]") {
  for (const int B : {1, 32}) {
    for (const int blocks : {264, 132}) {
      const PersistentSchedule schedule = build_persistent_schedule(gpt2_small(B, blocks));
      REQUIRE(check_wait_order(schedule).empty());
      const int seeds = B == 1 ? 4 : 2;
      for (int seed = 0; seed < seeds; ++seed) {
        const SimulationResult result =
            simulate_persistent_schedule(schedule, 2, static_cast<std::uint64_t>(seed));
        if (!result.ok) {
          CAPTURE(B, blocks, seed);
          FAIL(result.problem);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- the simulator can fail

TEST_CASE("persistent schedule: every wait is needed, and removing one is caught", "[persistent]") {
  // Every same-step wait guards a read: without it some interleaving reads a stale value
  // or overwrites one not yet read. A block of one instruction each (more blocks than
  // instructions), so that no wait is implied by an earlier instruction of its block; the
  // embedding's wait on the step before's stop decision is implied all the same: every
  // block makes that wait at each step's start.
  PersistentShape shape = make_shape(2, 192, 4, 200, 2, Splits{{2, 3, 2, 3, 2}}, 1);
  shape.blocks = static_cast<int>(build_persistent_schedule(shape).instructions.size()) + 3;
  const PersistentSchedule schedule = build_persistent_schedule(shape);
  int removed = 0;
  for (int i = 0; i < static_cast<int>(schedule.instructions.size()); ++i) {
    const PersistentInstruction& instruction = schedule.instructions[static_cast<std::size_t>(i)];
    if (instruction.op == static_cast<std::int32_t>(PersistentOp::kEmbedding)) continue;
    for (int w = 0; w < instruction.wait_count; ++w) {
      PersistentSchedule broken = schedule;
      remove_wait(broken, i, w);
      SimulationResult result;
      const int seed = first_failing_seed(broken, 2, 400, result);
      CAPTURE(i, w, describe(schedule, instruction));
      REQUIRE(seed >= 0);
      CHECK((mentions(result.problem, "(RAW)") || mentions(result.problem, "(WAR)")));
      ++removed;
    }
  }
  CHECK(removed > 50);
}

TEST_CASE("persistent schedule: a dropped signal is a deadlock", "[persistent]") {
  PersistentSchedule schedule =
      build_persistent_schedule(make_shape(2, 128, 2, 200, 3, Splits{{2, 1, 2, 3, 1}}, 7));
  const int attention = first_instruction(schedule, PersistentOp::kAttention);
  const int counter = schedule.instructions[attention].signal;
  schedule.instructions[attention].signal = -1;
  CHECK(mentions(check_wait_order(schedule), "counter " + std::to_string(counter)));
  for (int seed = 0; seed < 20; ++seed) {
    const SimulationResult result = simulate_persistent_schedule(schedule, 2, seed);
    CHECK_FALSE(result.ok);
    CHECK(mentions(result.problem, "deadlock"));
    CHECK(mentions(result.problem, "waits for counter " + std::to_string(counter)));
  }
}

TEST_CASE("persistent schedule: a wait on a later instruction fails the order check",
          "[persistent]") {
  PersistentSchedule schedule =
      build_persistent_schedule(make_shape(2, 128, 2, 200, 3, Splits{{2, 1, 2, 3, 1}}, 7));
  // The first qkv unit waits for the first attention head's counter, signalled later.
  int qkv = -1;
  for (std::size_t i = 0; i < schedule.instructions.size() && qkv < 0; ++i)
    if (schedule.instructions[i].op == static_cast<std::int32_t>(PersistentOp::kProduct))
      qkv = static_cast<int>(i);
  const int head =
      schedule.instructions[first_instruction(schedule, PersistentOp::kAttention)].signal;
  add_wait(schedule, qkv, CounterWait{head, schedule.counter_arrivals[head], 0});
  const std::string order = check_wait_order(schedule);
  CHECK(mentions(order, "waits on counter " + std::to_string(head) + " in the same step"));
  // The same wait on the step before is fine.
  schedule.waits[schedule.instructions[qkv].first_wait + schedule.instructions[qkv].wait_count - 1]
      .step_offset = -1;
  CHECK(check_wait_order(schedule).empty());
  CHECK(simulate_persistent_schedule(schedule, 3, 1).ok);
  // And back to this step: a cycle, which the simulator finds as a deadlock.
  schedule.waits[schedule.instructions[qkv].first_wait + schedule.instructions[qkv].wait_count - 1]
      .step_offset = 0;
  const SimulationResult result = simulate_persistent_schedule(schedule, 2, 3);
  CHECK_FALSE(result.ok);
  CHECK(mentions(result.problem, "deadlock"));
}

TEST_CASE("persistent schedule: a duplicated instruction is caught", "[persistent]") {
  const PersistentSchedule original =
      build_persistent_schedule(make_shape(2, 128, 2, 200, 3, Splits{{2, 1, 2, 3, 1}}, 7));
  // Each kind once: an attention head, a product split, a LayerNorm row, an argmax row.
  for (const PersistentOp op : {PersistentOp::kAttention, PersistentOp::kProduct,
                                PersistentOp::kLayerNorm, PersistentOp::kArgmax}) {
    PersistentSchedule schedule = original;
    const int i = first_instruction(schedule, op);
    schedule.instructions.insert(schedule.instructions.begin() + i + 1, schedule.instructions[i]);
    assign_blocks(schedule);
    CAPTURE(describe(schedule, schedule.instructions[i]));
    CHECK(mentions(check_wait_order(schedule), "instructions signal it"));
    for (int seed = 0; seed < 20; ++seed) {
      const SimulationResult result = simulate_persistent_schedule(schedule, 2, seed);
      CHECK_FALSE(result.ok);
    }
  }
}

TEST_CASE("persistent schedule: block lists that do not partition the step are refused",
          "[persistent]") {
  PersistentSchedule schedule =
      build_persistent_schedule(make_shape(2, 128, 2, 200, 3, Splits{{2, 1, 2, 3, 1}}, 7));
  schedule.block_instructions[1] = schedule.block_instructions[0];  // block 0 lists one twice
  const SimulationResult result = simulate_persistent_schedule(schedule, 2, 0);
  CHECK_FALSE(result.ok);
  CHECK(mentions(result.problem, "is listed by block 0 and again by block 0"));
  CHECK(mentions(check_wait_order(schedule), "not increasing"));
}
