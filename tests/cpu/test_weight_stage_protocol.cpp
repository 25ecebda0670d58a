// tests/cpu/test_weight_stage_protocol.cpp - the persistent kernel's weight stages
// (kernels/persistent_weight_stages.cuh) as a model on the CPU: the ring's protocol run
// under many random interleavings of a block's warps and of the copy engine.
//
// The model keeps what the kernel does and nothing else: a block's warps walk the same
// instructions (a barrier between two instructions, as the kernel's waits and signals
// are), thread 0 of warp 0 asks for chunks (at each instruction's start without waiting,
// and before it reads a chunk, waiting for the slot's last reader), every warp waits for
// a chunk's bytes, reads it and arrives on the slot's empty barrier, and a block that
// ends waits for the copies nobody read. The mbarriers are PTX's: a phase completes once
// its arrivals and its bytes are all in, and a wait for parity P returns once the phase
// with that parity has completed (the barrier's current phase parity is not P). Copies
// land in any order, at any time. Checked: no deadlock; every chunk a warp reads is the
// one its position names and has landed; the block ends with no copy in flight. And the
// model can fail: a producer that does not wait for a slot's readers, and a block that
// does not wait for its last copies, are caught.
// Run: cpu_tests "[persistent]"
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kWarps = 8;

/// An mbarrier: its phase, the arrivals and bytes the current phase still waits for.
struct Barrier {
  std::uint32_t phase = 0;
  int expected_arrivals = 0;
  int pending_arrivals = 0;
  long long pending_bytes = 0;

  void init(int arrivals) {
    expected_arrivals = arrivals;
    pending_arrivals = arrivals;
  }
  void complete_if_done() {
    if (pending_arrivals == 0 && pending_bytes == 0) {
      ++phase;
      pending_arrivals = expected_arrivals;
    }
  }
  void arrive(long long expect_bytes = 0) {
    pending_bytes += expect_bytes;
    --pending_arrivals;
    complete_if_done();
  }
  void bytes_landed(long long bytes) {
    pending_bytes -= bytes;
    complete_if_done();
  }
  /// try_wait.parity / test_wait.parity: has the phase of parity `parity` completed?
  bool phase_done(std::uint32_t parity) const { return (phase & 1u) != parity; }
};

struct Copy {
  int slot;
  std::int64_t position;  // the stream position whose chunk it carries
  bool landed;
};

struct Options {
  int slots = 4;
  std::vector<int> chunks_per_instruction;  // a block's list: 0 for an op that reads no W
  int steps = 3;
  bool producer_waits_for_readers = true;  // false: a bug the model must catch
  bool drain_on_exit = true;               // false: another
};

struct Outcome {
  bool finished = false;
  std::string failure;  // empty when every check held
};

/// Where one warp stands in the block's program.
struct Warp {
  int step = 0;
  int instruction = 0;
  int chunk = 0;            // of the instruction's chunks
  bool at_barrier = false;  // waiting for the other warps at the instruction's end
  bool started = false;     // this instruction's start (warp 0: the fill) done
  bool done = false;
};

class Block {
 public:
  Block(const Options& options, std::uint64_t seed) : o_(options), random_(seed) {
    full_.resize(o_.slots);
    empty_.resize(o_.slots);
    landed_.assign(o_.slots, -1);
    for (int s = 0; s < o_.slots; ++s) {
      full_[s].init(1);
      empty_[s].init(kWarps);
    }
    for (int count : o_.chunks_per_instruction) per_step_ += count;
  }

  Outcome run() {
    for (long long turn = 0; turn < 10'000'000; ++turn) {
      if (!failure_.empty()) return {false, failure_};
      std::vector<int> choices;  // warps 0..7 that can move, 8 + i: copy i may land
      for (int w = 0; w < kWarps; ++w)
        if (!warps_[w].done && can_move(w)) choices.push_back(w);
      for (std::size_t i = 0; i < copies_.size(); ++i)
        if (!copies_[i].landed) choices.push_back(kWarps + static_cast<int>(i));
      if (choices.empty()) break;
      const int choice =
          choices[std::uniform_int_distribution<std::size_t>(0, choices.size() - 1)(random_)];
      if (choice >= kWarps)
        land(choice - kWarps);
      else
        move(choice);
    }
    if (!failure_.empty()) return {false, failure_};
    for (const Warp& warp : warps_)
      if (!warp.done) return {false, "deadlock: a warp waits for ever"};
    return {true, ""};
  }

 private:
  // ---- thread 0's producer state (the kernel's WeightStages::asked and StreamCursor)
  std::int64_t asked_ = 0;

  std::int64_t read_of(int w) const {  // every warp's count of chunks read
    const Warp& warp = warps_[w];
    std::int64_t position = static_cast<std::int64_t>(warp.step) * per_step_;
    for (int k = 0; k < warp.instruction; ++k) position += o_.chunks_per_instruction[k];
    return position + warp.chunk;
  }

  bool slot_free(bool wait_allowed_to_block, bool& blocked) const {
    blocked = false;
    if (asked_ < o_.slots) return true;
    const std::int64_t use = asked_ / o_.slots - 1;
    const bool free = empty_[asked_ % o_.slots].phase_done(static_cast<std::uint32_t>(use & 1));
    if (!free && wait_allowed_to_block) blocked = true;
    return free;
  }

  void ask() {
    const int slot = static_cast<int>(asked_ % o_.slots);
    // The copy overwrites the slot when it lands: a reader of the slot's last chunk that
    // has not read it yet would see the wrong chunk (checked where it reads).
    full_[slot].arrive(1);  // arrive.expect_tx: one "byte" a chunk
    copies_.push_back({slot, asked_, false});
    ++asked_;
  }

  void land(int i) {
    Copy& copy = copies_[static_cast<std::size_t>(i)];
    copy.landed = true;
    landed_[copy.slot] = copy.position;
    full_[copy.slot].bytes_landed(1);
  }

  /// Whether warp w can take its next step now (a wait that would not return blocks).
  bool can_move(int w) const {
    const Warp& warp = warps_[w];
    if (warp.at_barrier) {
      for (const Warp& other : warps_)
        if (!other.done && !other.at_barrier) return false;
      return true;
    }
    if (finished_steps(warp)) {
      // The end: thread 0 waits for every copy it asked for and nobody read.
      if (w != 0 || !o_.drain_on_exit) return true;
      for (std::int64_t j = read_of(0); j < asked_; ++j)
        if (!full_[j % o_.slots].phase_done(static_cast<std::uint32_t>((j / o_.slots) & 1)))
          return false;
      return true;
    }
    if (!warp.started) return true;  // the fill never waits
    const std::int64_t position = read_of(w);
    if (warp.chunk >= o_.chunks_per_instruction[warp.instruction]) return true;  // to the barrier
    if (w == 0 && asked_ <= position) {
      bool blocked = false;
      if (o_.producer_waits_for_readers && !slot_free(true, blocked) && blocked) return false;
      return true;
    }
    return full_[position % o_.slots].phase_done(
        static_cast<std::uint32_t>((position / o_.slots) & 1));
  }

  bool finished_steps(const Warp& warp) const { return warp.step >= o_.steps; }

  void move(int w) {
    Warp& warp = warps_[w];
    if (warp.at_barrier) {  // every warp is here: all move on together
      for (Warp& other : warps_) {
        other.at_barrier = false;
        other.started = false;
        other.chunk = 0;
        if (++other.instruction == static_cast<int>(o_.chunks_per_instruction.size())) {
          other.instruction = 0;
          ++other.step;
        }
      }
      return;
    }
    if (finished_steps(warp)) {
      warp.done = true;
      bool every_warp_done = true;
      for (const Warp& other : warps_) every_warp_done = every_warp_done && other.done;
      for (const Copy& copy : copies_)
        if (every_warp_done && !copy.landed)
          failure_ = "the block ended with a copy in flight (position " +
                     std::to_string(copy.position) + ")";
      return;
    }
    if (!warp.started) {
      warp.started = true;
      if (w == 0 && per_step_ > 0) {  // fill: every free slot, without waiting
        bool blocked = false;
        while (asked_ < read_of(0) + o_.slots && slot_free(false, blocked)) ask();
      }
      return;
    }
    const std::int64_t position = read_of(w);
    if (warp.chunk >= o_.chunks_per_instruction[warp.instruction]) {
      warp.at_barrier = true;
      return;
    }
    if (w == 0 && asked_ <= position) {  // ask_up_to: one chunk a turn
      ask();
      return;
    }
    // The chunk has landed (can_move checked the full barrier): read it.
    const int slot = static_cast<int>(position % o_.slots);
    if (landed_[slot] != position) {
      failure_ = "warp " + std::to_string(w) + " read position " + std::to_string(position) +
                 " from a slot holding position " + std::to_string(landed_[slot]);
      return;
    }
    empty_[slot].arrive();
    ++warp.chunk;
  }

  Options o_;
  std::mt19937_64 random_;
  std::vector<Barrier> full_;
  std::vector<Barrier> empty_;
  std::vector<std::int64_t> landed_;  // the position whose chunk each slot holds
  std::vector<Copy> copies_;
  Warp warps_[kWarps];
  int per_step_ = 0;
  std::string failure_;
};

Outcome run_model(const Options& options, std::uint64_t seed) { return Block(options, seed).run(); }

}  // namespace

TEST_CASE("the weight stages' ring runs without deadlock and every warp reads its own chunk",
          "[persistent]") {
  const std::vector<std::vector<int>> lists = {
      {3},                       // one product, fewer chunks than slots
      {12, 0, 1, 0, 2},          // more chunks than slots, ops without a weight between
      {0, 5, 5, 0, 9, 1, 0},     // several products a step
      {1, 1, 1, 1, 1, 1, 1, 1},  // one chunk each
  };
  for (int slots : {2, 3, 4, 7}) {
    for (const std::vector<int>& list : lists) {
      for (std::uint64_t seed = 0; seed < 40; ++seed) {
        Options options;
        options.slots = slots;
        options.chunks_per_instruction = list;
        const Outcome outcome = run_model(options, seed);
        INFO("slots " << slots << ", seed " << seed << ": " << outcome.failure);
        REQUIRE(outcome.finished);
      }
    }
  }
}

TEST_CASE("a block whose instructions read no weight asks for nothing", "[persistent]") {
  Options options;
  options.chunks_per_instruction = {0, 0, 0};
  REQUIRE(run_model(options, 1).finished);
}

TEST_CASE("the ring model catches a block that ends before its last copies land", "[persistent]") {
  Options options;
  options.slots = 4;
  options.chunks_per_instruction = {2, 0};
  options.drain_on_exit = false;
  bool caught = false;
  for (std::uint64_t seed = 0; seed < 200 && !caught; ++seed)
    caught = !run_model(options, seed).finished;
  REQUIRE(caught);
}

TEST_CASE("the ring model catches a producer that overwrites a slot before its readers",
          "[persistent]") {
  Options options;
  options.slots = 2;
  options.chunks_per_instruction = {6, 0, 6};
  options.producer_waits_for_readers = false;
  bool caught = false;
  for (std::uint64_t seed = 0; seed < 200 && !caught; ++seed)
    caught = !run_model(options, seed).finished;
  REQUIRE(caught);
}
