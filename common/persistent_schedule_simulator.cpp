// common/persistent_schedule_simulator.cpp - runs a persistent decode schedule on virtual
// blocks under random interleavings and checks every access against a model of the
// kernel's buffers (persistent_schedule_simulator.hpp says what is proved).
#include "common/persistent_schedule_simulator.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/splitmix64.hpp"

namespace ladder {

namespace {

constexpr int kTileColumns = 64;  // a column tile of a buffer, and a chunk of a product's K

// ---------------------------------------------------------------- the buffers

/// One buffer of the kernel, cut into regions (the unit a stamp covers). A region's
/// version is stamp = step * phases + phase: `phases` writes a step (one a layer for the
/// per-layer buffers), -1 = before the kernel (the prefill's values).
struct Buffer {
  std::string name;
  std::vector<std::string> dimension_names;  // "row", "tile", ...
  std::vector<int> sizes;
  int first_region = 0;
  int regions = 0;
  int phases = 1;
  int n_layer = 0;     // for phase names
  int phase_kind = 0;  // how to name a phase: see phase_name()
};

enum PhaseKind { kByStep = 0, kByLayer = 1, kResidual = 2, kNormed = 3 };

/// One read or write of a region. A read names the version it must see: the phase of the
/// same step, or of the step before (`previous_step`).
struct Access {
  int region = 0;
  int phase = 0;
  bool write = false;
  bool previous_step = false;
};

/// The regions of every buffer and what each instruction reads and writes.
class DataModel {
 public:
  explicit DataModel(const PersistentShape& shape) : shape_(shape) {
    const int B = shape.batch;
    const int L = shape.n_layer;
    const int C = shape.n_embd;
    const int H = shape.n_head;
    const int tiles = C / kTileColumns;
    // A region is the piece one instruction writes whole: a row of normed (a LayerNorm
    // row), a 64-column tile of every row of qkv, expanded and the candidates (a
    // product's epilogue), a (row, tile) of hidden (written by rows and by tiles).
    // hidden: the embedding (phase 0), then per layer the attention projection (2l + 1)
    // and the MLP projection (2l + 2). normed: ln_1 (2l), ln_2 (2l + 1), ln_f (2L).
    hidden_ = add("hidden", {"row", "tile"}, {B, tiles}, 2 * L + 1, kResidual);
    normed_ = add("normed", {"row"}, {B}, 2 * L + 1, kNormed);
    qkv_ = add("qkv", {"tile"}, {3 * tiles}, L, kByLayer);
    attended_ = add("attended", {"row", "head"}, {B, H}, L, kByLayer);
    expanded_ = add("expanded", {"tile"}, {4 * tiles}, L, kByLayer);
    cache_ = add("KV cache", {"layer", "row", "head"}, {L, B, H}, 1, kByStep);
    for (int p = 0; p < kPersistentProducts; ++p) {
      const ProductTiling& t = shape.products[p];
      const bool lm_head = p == static_cast<int>(PersistentProduct::kLmHead);
      // A product of one split sums in its block: no workspace.
      workspace_[p] = add("workspace of product " + std::to_string(p), {"split", "tile"},
                          {t.splits > 1 ? t.splits : 0, t.column_tiles}, lm_head ? 1 : L,
                          lm_head ? kByStep : kByLayer);
    }
    const ProductTiling& lm_head = shape.products[static_cast<int>(PersistentProduct::kLmHead)];
    candidates_ = add("candidates", {"tile"}, {lm_head.column_tiles}, 1, kByStep);
    next_tokens_ = add("next_tokens", {"row"}, {B}, 1, kByStep);
    finished_ = add("finished", {"row"}, {B}, 1, kByStep);
    output_ = add("output column", {"row"}, {B}, 1, kByStep);
    decision_ = add("stop decision", {}, {}, 1, kByStep);
  }

  int region_count() const { return region_count_; }
  int phases(int region) const { return region_phases_[static_cast<std::size_t>(region)]; }
  int decision() const { return decision_.first_region; }

  /// "hidden[row 3][tile 5]".
  std::string region_name(int region) const {
    const Buffer& buffer = buffer_of(region);
    std::string name = buffer.name;
    int offset = region - buffer.first_region;
    std::vector<int> index(buffer.sizes.size());
    for (std::size_t d = buffer.sizes.size(); d-- > 0;) {
      index[d] = offset % buffer.sizes[d];
      offset /= buffer.sizes[d];
    }
    for (std::size_t d = 0; d < index.size(); ++d)
      name += "[" + buffer.dimension_names[d] + " " + std::to_string(index[d]) + "]";
    return name;
  }

  /// "step 2 (layer 0, ln_1)", "before the kernel".
  std::string version_name(int region, long long stamp) const {
    if (stamp < 0) return "before the kernel";
    const Buffer& buffer = buffer_of(region);
    const long long step = stamp / buffer.phases;
    const int phase = static_cast<int>(stamp % buffer.phases);
    std::string name = "step " + std::to_string(step);
    const std::string phase_text = phase_name(buffer, phase);
    return phase_text.empty() ? name : name + " (" + phase_text + ")";
  }

  /// What `instruction` reads and writes, in order. A product's split ends by summing
  /// the tile when `finishing` (the last split to arrive).
  void list_accesses(const PersistentInstruction& instruction, bool finishing,
                     std::vector<Access>& out) const {
    out.clear();
    const int B = shape_.batch;
    const int L = shape_.n_layer;
    const int C = shape_.n_embd;
    const int H = shape_.n_head;
    const int D = C / H;
    const int tiles = C / kTileColumns;
    const int l = instruction.layer;
    const auto read = [&](const Buffer& buffer, int offset, int phase, bool previous = false) {
      out.push_back(Access{buffer.first_region + offset, phase, false, previous});
    };
    const auto write = [&](const Buffer& buffer, int offset, int phase) {
      out.push_back(Access{buffer.first_region + offset, phase, true, false});
    };
    switch (static_cast<PersistentOp>(instruction.op)) {
      case PersistentOp::kEmbedding: {
        const int b = instruction.unit;
        read(next_tokens_, b, 0, true);  // the token the step before chose (or the prompt's)
        for (int t = 0; t < tiles; ++t) write(hidden_, b * tiles + t, 0);
        break;
      }
      case PersistentOp::kLayerNorm: {
        const int b = instruction.unit;
        const auto norm = static_cast<PersistentNorm>(instruction.which);
        const int phase = norm == PersistentNorm::kFirst    ? 2 * l
                          : norm == PersistentNorm::kSecond ? 2 * l + 1
                                                            : 2 * L;
        for (int t = 0; t < tiles; ++t) read(hidden_, b * tiles + t, phase);
        write(normed_, b, phase);
        break;
      }
      case PersistentOp::kAttention: {
        const int b = instruction.unit / H;
        const int h = instruction.unit % H;
        for (int part = 0; part < 3; ++part) {  // q, k, v
          const int first = (part * C + h * D) / kTileColumns;
          const int last = (part * C + (h + 1) * D - 1) / kTileColumns;
          for (int t = first; t <= last; ++t) read(qkv_, t, l);  // row b of these tiles
        }
        const int cache = (l * B + b) * H + h;
        read(cache_, cache, 0, true);  // positions < p: the steps before (and the prefill)
        write(cache_, cache, 0);       // position p
        write(attended_, b * H + h, l);
        break;
      }
      case PersistentOp::kProduct:
        list_product_accesses(instruction, finishing, read, write);
        break;
      case PersistentOp::kArgmax: {
        const int b = instruction.unit;
        const ProductTiling& lm_head =
            shape_.products[static_cast<int>(PersistentProduct::kLmHead)];
        for (int t = 0; t < lm_head.column_tiles; ++t)
          read(candidates_, t, 0);    // row b of every tile
        read(finished_, b, 0, true);  // a finished row stays finished
        write(next_tokens_, b, 0);
        write(output_, b, 0);
        write(finished_, b, 0);
        break;
      }
      case PersistentOp::kStop:
        for (int b = 0; b < B; ++b) read(finished_, b, 0);
        write(decision_, 0, 0);
        break;
    }
  }

  /// Whether `instruction`'s op, layer, which and unit name something of the shape.
  std::string check_instruction(const PersistentInstruction& instruction) const {
    const int B = shape_.batch;
    const int L = shape_.n_layer;
    const bool in_layer = instruction.layer >= 0 && instruction.layer < L;
    const auto unit_below = [&](int count) {
      return instruction.unit >= 0 && instruction.unit < count;
    };
    switch (static_cast<PersistentOp>(instruction.op)) {
      case PersistentOp::kEmbedding:
      case PersistentOp::kArgmax:
        return unit_below(B) ? "" : "a row outside the batch";
      case PersistentOp::kLayerNorm:
        if (instruction.which < 0 || instruction.which > 2) return "an unknown LayerNorm";
        if (instruction.which != static_cast<int>(PersistentNorm::kFinal) && !in_layer)
          return "a layer outside the model";
        return unit_below(B) ? "" : "a row outside the batch";
      case PersistentOp::kAttention:
        if (!in_layer) return "a layer outside the model";
        return unit_below(B * shape_.n_head) ? "" : "a (row, head) outside the shape";
      case PersistentOp::kProduct: {
        if (instruction.which < 0 || instruction.which >= kPersistentProducts)
          return "an unknown product";
        if (instruction.which != static_cast<int>(PersistentProduct::kLmHead) && !in_layer)
          return "a layer outside the model";
        return unit_below(shape_.products[instruction.which].units()) ? ""
                                                                      : "a unit outside the tiling";
      }
      case PersistentOp::kStop:
        return instruction.unit == 0 ? "" : "a stop unit other than 0";
    }
    return "an unknown op";
  }

 private:
  template <typename Read, typename Write>
  void list_product_accesses(const PersistentInstruction& instruction, bool finishing,
                             const Read& read, const Write& write) const {
    const int B = shape_.batch;
    const int L = shape_.n_layer;
    const int D = shape_.n_embd / shape_.n_head;
    const int tiles = shape_.n_embd / kTileColumns;
    const int l = instruction.layer;
    const auto product = static_cast<PersistentProduct>(instruction.which);
    const ProductTiling& t = shape_.products[instruction.which];
    const int split = instruction.unit / t.column_tiles;
    const int tile = instruction.unit % t.column_tiles;
    const int first_chunk = split * t.chunks_per_split;
    const int end_chunk = std::min(t.chunks, first_chunk + t.chunks_per_split);
    const int layer_phase = product == PersistentProduct::kLmHead ? 0 : l;

    // The inputs of its chunks of K (chunk c: inputs 64 c .. 64 c + 63), every row.
    switch (product) {
      case PersistentProduct::kQkv:
      case PersistentProduct::kMlpExpand:
      case PersistentProduct::kLmHead: {  // columns of the normed rows
        const int phase = product == PersistentProduct::kQkv         ? 2 * l
                          : product == PersistentProduct::kMlpExpand ? 2 * l + 1
                                                                     : 2 * L;
        for (int b = 0; b < B; ++b) read(normed_, b, phase);
        break;
      }
      case PersistentProduct::kAttentionProjection: {  // the heads overlapping the chunks
        const int first_head = first_chunk * kTileColumns / D;
        const int last_head = (end_chunk * kTileColumns - 1) / D;
        for (int b = 0; b < B; ++b)
          for (int h = first_head; h <= last_head; ++h) read(attended_, b * shape_.n_head + h, l);
        break;
      }
      case PersistentProduct::kMlpProjection:  // chunk c is c_fc's tile c
        for (int c = first_chunk; c < end_chunk; ++c) read(expanded_, c, l);
        break;
    }
    // Split-K: every split leaves its partial in the workspace; the last to arrive sums all.
    const Buffer& workspace = workspace_[instruction.which];
    if (t.splits > 1) {
      write(workspace, split * t.column_tiles + tile, layer_phase);
      if (!finishing) return;
      for (int s = 0; s < t.splits; ++s) read(workspace, s * t.column_tiles + tile, layer_phase);
    }
    // The epilogue writes the tile's 64 columns of every row.
    switch (product) {
      case PersistentProduct::kQkv:
        write(qkv_, tile, l);
        break;
      case PersistentProduct::kMlpExpand:
        write(expanded_, tile, l);
        break;
      case PersistentProduct::kLmHead:
        write(candidates_, tile, 0);
        break;
      case PersistentProduct::kAttentionProjection:  // hidden += the projection
      case PersistentProduct::kMlpProjection: {
        const int before = product == PersistentProduct::kAttentionProjection ? 2 * l : 2 * l + 1;
        for (int b = 0; b < B; ++b) {
          read(hidden_, b * tiles + tile, before);
          write(hidden_, b * tiles + tile, before + 1);
        }
        break;
      }
    }
  }

  Buffer add(const std::string& name, std::vector<std::string> dimension_names,
             std::vector<int> sizes, int phases, int phase_kind) {
    Buffer buffer;
    buffer.name = name;
    buffer.dimension_names = std::move(dimension_names);
    buffer.sizes = std::move(sizes);
    buffer.first_region = region_count_;
    buffer.regions = 1;
    for (int size : buffer.sizes) buffer.regions *= size;
    buffer.phases = phases;
    buffer.n_layer = shape_.n_layer;
    buffer.phase_kind = phase_kind;
    region_count_ += buffer.regions;
    region_phases_.resize(static_cast<std::size_t>(region_count_), phases);
    buffers_.push_back(buffer);
    return buffer;
  }

  const Buffer& buffer_of(int region) const {
    for (const Buffer& buffer : buffers_)
      if (region >= buffer.first_region && region < buffer.first_region + buffer.regions)
        return buffer;
    return buffers_.back();
  }

  static std::string phase_name(const Buffer& buffer, int phase) {
    const int L = buffer.n_layer;
    const auto layer = [](int l) { return "layer " + std::to_string(l); };
    switch (buffer.phase_kind) {
      case kByLayer:
        return layer(phase);
      case kResidual:
        if (phase == 0) return "the embedding";
        return layer((phase - 1) / 2) +
               (phase % 2 == 1 ? ", attention projection" : ", MLP projection");
      case kNormed:
        if (phase == 2 * L) return "ln_f";
        return layer(phase / 2) + (phase % 2 == 0 ? ", ln_1" : ", ln_2");
      default:
        return "";
    }
  }

  PersistentShape shape_;
  std::vector<Buffer> buffers_;
  std::vector<int> region_phases_;
  int region_count_ = 0;
  Buffer hidden_, normed_, qkv_, attended_, expanded_, cache_, candidates_, next_tokens_, finished_,
      output_, decision_;
  Buffer workspace_[kPersistentProducts];
};

// ---------------------------------------------------------------- structure

std::string check_structure(const PersistentSchedule& schedule, const DataModel& model) {
  const int count = static_cast<int>(schedule.instructions.size());
  const int counters = schedule.counter_count();
  const int blocks = schedule.shape.blocks;
  if (schedule.stop_counter < 0 || schedule.stop_counter >= counters)
    return "the stop counter is not a counter";
  for (int i = 0; i < count; ++i) {
    const PersistentInstruction& instruction = schedule.instructions[static_cast<std::size_t>(i)];
    const std::string name = "instruction " + std::to_string(i);
    const std::string bad = model.check_instruction(instruction);
    if (!bad.empty()) return name + " names " + bad;
    if (instruction.signal < -1 || instruction.signal >= counters)
      return name + " signals a counter that does not exist";
    if (instruction.first_wait < 0 || instruction.wait_count < 0 ||
        instruction.first_wait + instruction.wait_count > static_cast<int>(schedule.waits.size()))
      return name + "'s waits lie outside the wait list";
    for (int w = 0; w < instruction.wait_count; ++w) {
      const CounterWait& wait =
          schedule.waits[static_cast<std::size_t>(instruction.first_wait + w)];
      if (wait.counter < 0 || wait.counter >= counters)
        return name + " waits on a counter that does not exist";
    }
  }
  if (blocks < 1 || static_cast<int>(schedule.block_first.size()) != blocks + 1 ||
      schedule.block_first.front() != 0 ||
      schedule.block_first.back() != static_cast<int>(schedule.block_instructions.size()))
    return "block_first does not describe shape.blocks lists over block_instructions";
  std::vector<int> owner(static_cast<std::size_t>(count), -1);
  for (int k = 0; k < blocks; ++k) {
    if (schedule.block_first[k + 1] < schedule.block_first[k])
      return "block " + std::to_string(k) + "'s list ends before it starts";
    for (int at = schedule.block_first[k]; at < schedule.block_first[k + 1]; ++at) {
      const int i = schedule.block_instructions[static_cast<std::size_t>(at)];
      if (i < 0 || i >= count)
        return "block " + std::to_string(k) + " lists an instruction that does not exist";
      if (owner[i] >= 0)
        return "instruction " + std::to_string(i) + " is listed by block " +
               std::to_string(owner[i]) + " and again by block " + std::to_string(k);
      owner[i] = k;
    }
  }
  for (int i = 0; i < count; ++i)
    if (owner[i] < 0) return "instruction " + std::to_string(i) + " is in no block's list";
  return "";
}

// ---------------------------------------------------------------- the run

class Simulation {
 public:
  Simulation(const PersistentSchedule& schedule, const DataModel& model, int steps,
             std::uint64_t seed)
      : s_(schedule), model_(model), steps_(steps), random_(seed) {
    const int blocks = s_.shape.blocks;
    counters_.assign(static_cast<std::size_t>(s_.counter_count()), 0);
    waiting_.resize(counters_.size());
    for (int p = 0; p < kPersistentProducts; ++p)
      arrivals_[p].assign(static_cast<std::size_t>(s_.shape.products[p].column_tiles), 0);
    stamp_.assign(static_cast<std::size_t>(model_.region_count()), -1);
    reads_.assign(stamp_.size(), 0);
    runs_.assign(s_.instructions.size(), 0);
    count_expected_reads();
    position_.assign(static_cast<std::size_t>(blocks), 0);
    step_.assign(static_cast<std::size_t>(blocks), 0);
    ready_index_.assign(static_cast<std::size_t>(blocks), -1);
    // The interleaving's bias: 0 uniform, 1 long runs of one block, 2 a few slow blocks.
    bias_ = static_cast<int>(next(3));
    longest_run_ = 1 + static_cast<int>(next(1u << next(11)));
    slow_key_ = splitmix64_next(random_);
  }

  SimulationResult run() {
    const int blocks = s_.shape.blocks;
    for (int k = 0; k < blocks; ++k) {
      if (list_size(k) == 0) step_[k] = steps_;  // nothing to run: only its boundary loop
      if (step_[k] < steps_) {
        ++unfinished_;
        settle(k);
      }
    }
    while (unfinished_ > 0) {
      if (ready_.empty()) return fail(deadlock());
      const int k = pick();
      if (!execute(k)) return fail(problem_);
    }
    const std::string end = final_checks();
    if (!end.empty()) return fail(end);
    return SimulationResult{true, "", executed_};
  }

 private:
  // ------------------------------------------------ blocks and counters

  int list_size(int k) const { return s_.block_first[k + 1] - s_.block_first[k]; }
  int current(int k) const { return s_.block_instructions[s_.block_first[k] + position_[k]]; }
  long long target(const CounterWait& wait, int step) const {
    return static_cast<long long>(wait.per_step) * (step + 1 + wait.step_offset);
  }

  /// The first unmet condition of block k's next instruction: the step boundary (stop
  /// counter >= e) and its waits. {-1, 0} when it can run.
  std::pair<int, long long> unmet(int k) const {
    const int e = step_[k];
    if (position_[k] == 0 && e >= 1 && counters_[s_.stop_counter] < e) return {s_.stop_counter, e};
    const PersistentInstruction& instruction = s_.instructions[current(k)];
    for (int w = 0; w < instruction.wait_count; ++w) {
      const CounterWait& wait = s_.waits[instruction.first_wait + w];
      if (counters_[wait.counter] < target(wait, e)) return {wait.counter, target(wait, e)};
    }
    return {-1, 0};
  }

  /// Puts block k among the ready blocks or among the waiters of its unmet counter.
  void settle(int k) {
    const auto [counter, goal] = unmet(k);
    if (counter < 0) {
      ready_index_[k] = static_cast<int>(ready_.size());
      ready_.push_back(k);
    } else {
      waiting_[counter].push_back(Waiter{k, goal});
    }
  }

  /// Adds 1 to `counter`; the blocks whose target it reaches look at their next condition.
  void signal(int counter) {
    const long long value = ++counters_[counter];
    std::vector<Waiter>& waiters = waiting_[counter];
    woken_.clear();
    std::size_t kept = 0;
    for (const Waiter& waiter : waiters) {
      if (waiter.goal <= value) {
        woken_.push_back(waiter.block);
      } else {
        waiters[kept++] = waiter;
      }
    }
    waiters.resize(kept);
    for (int k : woken_) settle(k);
  }

  void leave_ready(int k) {
    const int at = ready_index_[k];
    ready_[at] = ready_.back();
    ready_index_[ready_[at]] = at;
    ready_.pop_back();
    ready_index_[k] = -1;
  }

  std::uint64_t next(std::uint64_t bound) { return splitmix64_next(random_) % bound; }
  /// One block in eight, drawn by the seed, lags (bias 2).
  bool slow(int k) const { return splitmix64(slow_key_ + static_cast<std::uint64_t>(k)) % 8 == 0; }

  int pick() {
    const auto any = [&] { return ready_[next(ready_.size())]; };
    switch (bias_) {
      case 1:  // long runs of one block
        if (run_left_ > 0 && ready_index_[run_block_] >= 0) {
          --run_left_;
          return run_block_;
        }
        run_block_ = any();
        run_left_ = static_cast<int>(next(static_cast<std::uint64_t>(longest_run_)));
        return run_block_;
      case 2: {  // slow blocks move only when little else can, or rarely
        int k = any();
        for (int tries = 0; tries < 8 && slow(k) && next(64) != 0; ++tries) k = any();
        return k;
      }
      default:
        return any();
    }
  }

  // ------------------------------------------------ executing an instruction

  bool execute(int k) {
    const int i = current(k);
    const int e = step_[k];
    const PersistentInstruction& instruction = s_.instructions[i];
    leave_ready(k);
    ++executed_;
    ++runs_[i];
    where_ = {e, i, k};
    // The step's start: the block read the stop decision of the step before.
    if (position_[k] == 0 && !access(Access{model_.decision(), 0, false, true}, e)) return false;
    // A split of a product arrives at its tile's workspace counter; the last sums the tile.
    bool finishing = true;
    if (instruction.op == static_cast<int>(PersistentOp::kProduct)) {
      const ProductTiling& t = s_.shape.products[instruction.which];
      if (t.splits > 1) {
        int& arrived = arrivals_[instruction.which][instruction.unit % t.column_tiles];
        finishing = ++arrived == t.splits;
        if (finishing) arrived = 0;
      }
    }
    model_.list_accesses(instruction, finishing, accesses_);
    for (const Access& a : accesses_)
      if (!access(a, e)) return false;
    if (instruction.signal >= 0) signal(instruction.signal);
    if (++position_[k] == list_size(k)) {
      position_[k] = 0;
      ++step_[k];
    }
    if (step_[k] == steps_) {
      --unfinished_;
    } else {
      settle(k);
    }
    return true;
  }

  /// Checks one access against the region's stamp and updates it; false with problem_ set.
  bool access(const Access& a, int e) {
    const long long phases = model_.phases(a.region);
    long long& stamp = stamp_[a.region];
    if (!a.write) {
      const long long expected = (e - (a.previous_step ? 1 : 0)) * phases + a.phase;
      if (stamp != expected) return report(a, expected);
      ++reads_[a.region];
      return true;
    }
    const long long written = e * phases + a.phase;
    if (stamp != written - 1 || reads_[a.region] != expected_readers(a.region, stamp, false))
      return report(a, written);
    stamp = written;
    reads_[a.region] = 0;
    return true;
  }

  /// The error line of an access that failed: a read expecting `version`, or a write of it.
  bool report(const Access& a, long long version) {
    const long long stamp = stamp_[a.region];
    const auto name = [&](long long v) { return model_.version_name(a.region, v); };
    const std::string what =
        where() + (a.write ? " writes " : " reads ") + model_.region_name(a.region);
    if (!a.write) {
      problem_ = (stamp < version ? "stale read (RAW): " : "read after overwrite (WAR): ") + what +
                 " expecting the version of " + name(version) + ", but it holds " + name(stamp);
    } else if (stamp != version - 1) {
      problem_ = (stamp >= version ? "written twice or out of order: " : "a write skipped: ") +
                 what + " as " + name(version) + ", but it holds " + name(stamp) + " (expected " +
                 name(version - 1) + ")";
    } else {
      const int readers = expected_readers(a.region, stamp, false);
      problem_ = "overwrite before every read (WAR): " + what + " as " + name(version) + " while " +
                 std::to_string(readers - reads_[a.region]) + " of the " + std::to_string(readers) +
                 " readers of " + name(stamp) + " have not read it";
    }
    return false;
  }

  // ------------------------------------------------ how many reads each version gets

  /// One step's reads, in list order with the last split of each tile finishing: how many
  /// reads each (region, phase) version gets from the same step and from the next.
  void count_expected_reads() {
    table_first_.assign(stamp_.size() + 1, 0);
    for (std::size_t r = 0; r < stamp_.size(); ++r)
      table_first_[r + 1] = table_first_[r] + model_.phases(static_cast<int>(r));
    same_step_reads_.assign(static_cast<std::size_t>(table_first_.back()), 0);
    next_step_reads_.assign(same_step_reads_.size(), 0);
    for (const PersistentInstruction& instruction : s_.instructions) {
      bool finishing = true;
      if (instruction.op == static_cast<int>(PersistentOp::kProduct)) {
        const ProductTiling& t = s_.shape.products[instruction.which];
        finishing = instruction.unit / t.column_tiles == t.splits - 1;
      }
      model_.list_accesses(instruction, finishing, accesses_);
      for (const Access& a : accesses_)
        if (!a.write)
          ++(a.previous_step ? next_step_reads_
                             : same_step_reads_)[table_first_[a.region] + a.phase];
    }
    for (int k = 0; k < s_.shape.blocks; ++k)  // each block at each step's start
      if (list_size(k) > 0) ++next_step_reads_[table_first_[model_.decision()]];
  }

  /// The reads version `stamp` of `region` gets before it is replaced (at the run's end,
  /// `same_step_only`: those of its own step).
  int expected_readers(int region, long long stamp, bool same_step_only) const {
    const int phases = model_.phases(region);
    const int phase = stamp < 0 ? phases - 1 : static_cast<int>(stamp % phases);
    const int at = table_first_[region] + phase;
    if (stamp < 0) return next_step_reads_[at];  // the prefill's values: only step 0 reads them
    return same_step_reads_[at] + (same_step_only ? 0 : next_step_reads_[at]);
  }

  // ------------------------------------------------ the end

  std::string final_checks() const {
    for (std::size_t i = 0; i < runs_.size(); ++i)
      if (runs_[i] != steps_)
        return "instruction " + std::to_string(i) + " (" + describe(s_, s_.instructions[i]) +
               ") ran " + std::to_string(runs_[i]) + " times in " + std::to_string(steps_) +
               " steps";
    for (std::size_t c = 0; c < counters_.size(); ++c)
      if (counters_[c] != static_cast<long long>(s_.counter_arrivals[c]) * steps_)
        return "counter " + std::to_string(c) + " ends at " + std::to_string(counters_[c]) +
               ", not " + std::to_string(s_.counter_arrivals[c]) + " x " + std::to_string(steps_);
    for (int p = 0; p < kPersistentProducts; ++p)
      for (std::size_t t = 0; t < arrivals_[p].size(); ++t)
        if (arrivals_[p][t] != 0)
          return "the workspace counter of product " + std::to_string(p) + ", tile " +
                 std::to_string(t) + " ends at " + std::to_string(arrivals_[p][t]) + ", not 0";
    for (int r = 0; r < model_.region_count(); ++r) {
      const long long last = static_cast<long long>(steps_) * model_.phases(r) - 1;
      if (stamp_[r] != last)
        return model_.region_name(r) + " ends at version " + model_.version_name(r, stamp_[r]) +
               ", not " + model_.version_name(r, last) + ": a write is missing";
      const int readers = expected_readers(r, last, true);
      if (reads_[r] != readers)
        return model_.region_name(r) + ": " + std::to_string(reads_[r]) + " of the " +
               std::to_string(readers) + " readers of its last version read it";
    }
    return "";
  }

  /// The blocked blocks, the earliest instruction (step-major) first: by the deadlock
  /// argument, the wait of the earliest is the one that can never be met.
  std::string deadlock() const {
    std::vector<int> blocked;
    for (int k = 0; k < s_.shape.blocks; ++k)
      if (step_[k] < steps_) blocked.push_back(k);
    std::sort(blocked.begin(), blocked.end(), [&](int a, int b) {
      return std::make_pair(step_[a], current(a)) < std::make_pair(step_[b], current(b));
    });
    std::string text = "deadlock: no block can move on;";
    const std::size_t listed = std::min<std::size_t>(blocked.size(), 3);
    for (std::size_t n = 0; n < listed; ++n) {
      const int k = blocked[n];
      const auto [counter, goal] = unmet(k);
      const int i = current(k);
      text += (n > 0 ? ";" : "") + std::string(" block ") + std::to_string(k) + " in step " +
              std::to_string(step_[k]) + " at instruction " + std::to_string(i) + " (" +
              describe(s_, s_.instructions[i]) + ") waits for counter " + std::to_string(counter) +
              (counter == s_.stop_counter ? " (the stop counter)" : "") + " to reach " +
              std::to_string(goal) + " (it holds " + std::to_string(counters_[counter]) + ")";
    }
    if (blocked.size() > listed)
      text += "; and " + std::to_string(blocked.size() - listed) + " more blocks";
    return text;
  }

  /// "step 2: instruction 57 (layer 0, qkv product, split 1 of column tile 3) on block 5".
  std::string where() const {
    return "step " + std::to_string(where_.step) + ": instruction " +
           std::to_string(where_.instruction) + " (" +
           describe(s_, s_.instructions[static_cast<std::size_t>(where_.instruction)]) +
           ") on block " + std::to_string(where_.block);
  }

  SimulationResult fail(const std::string& problem) const {
    return SimulationResult{false, problem, executed_};
  }

  const PersistentSchedule& s_;
  const DataModel& model_;
  const int steps_;
  std::uint64_t random_;
  int bias_ = 0;
  int longest_run_ = 1;
  int run_block_ = 0;
  int run_left_ = 0;
  std::uint64_t slow_key_ = 0;

  std::vector<long long> counters_;
  struct Waiter {
    int block = 0;
    long long goal = 0;  // the value the block waits for
  };
  std::vector<std::vector<Waiter>> waiting_;  // blocks stopped on each counter
  std::vector<int> woken_;
  std::vector<int> arrivals_[kPersistentProducts];  // the workspace counters, per tile
  std::vector<int> position_;                       // each block's place in its list
  std::vector<int> step_;                           // each block's step (steps_ = finished)
  std::vector<int> ready_;                          // blocks whose next instruction can run
  std::vector<int> ready_index_;
  int unfinished_ = 0;

  std::vector<long long> stamp_;  // each region's version
  std::vector<int> reads_;        // reads of that version so far
  std::vector<int> table_first_;  // (region, phase) -> index into the two tables below
  std::vector<int> same_step_reads_;
  std::vector<int> next_step_reads_;
  std::vector<int> runs_;  // runs of each instruction
  std::vector<Access> accesses_;
  long long executed_ = 0;
  struct Place {
    int step = 0;
    int instruction = 0;
    int block = 0;
  } where_;  // the instruction being executed
  std::string problem_;
};

}  // namespace

SimulationResult simulate_persistent_schedule(const PersistentSchedule& schedule, int steps,
                                              std::uint64_t seed) {
  if (steps < 1) return SimulationResult{false, "steps must be at least 1", 0};
  const DataModel model(schedule.shape);
  const std::string structure = check_structure(schedule, model);
  if (!structure.empty()) return SimulationResult{false, structure, 0};
  return Simulation(schedule, model, steps, seed).run();
}

std::string check_wait_order(const PersistentSchedule& schedule) {
  const int count = static_cast<int>(schedule.instructions.size());
  const int counters = schedule.counter_count();
  std::vector<int> signallers(static_cast<std::size_t>(counters), 0);
  std::vector<int> last_signaller(static_cast<std::size_t>(counters), -1);
  for (int i = 0; i < count; ++i) {
    const int c = schedule.instructions[static_cast<std::size_t>(i)].signal;
    if (c < 0 || c >= counters) continue;
    ++signallers[c];
    last_signaller[c] = i;
  }
  const auto name = [&](int i) {
    return "instruction " + std::to_string(i) + " (" +
           describe(schedule, schedule.instructions[static_cast<std::size_t>(i)]) + ")";
  };
  for (int i = 0; i < count; ++i) {
    const PersistentInstruction& instruction = schedule.instructions[static_cast<std::size_t>(i)];
    for (int w = 0; w < instruction.wait_count; ++w) {
      const CounterWait& wait =
          schedule.waits[static_cast<std::size_t>(instruction.first_wait + w)];
      const std::string counter = "counter " + std::to_string(wait.counter);
      if (wait.counter < 0 || wait.counter >= counters)
        return name(i) + " waits on " + counter + ", which does not exist";
      if (wait.step_offset != 0 && wait.step_offset != -1)
        return name(i) + " waits on " + counter + " with step offset " +
               std::to_string(wait.step_offset) + " (0 or -1 only)";
      if (wait.per_step != schedule.counter_arrivals[wait.counter])
        return name(i) + " waits for " + std::to_string(wait.per_step) + " signals a step on " +
               counter + ", which gets " + std::to_string(schedule.counter_arrivals[wait.counter]);
      if (wait.step_offset == 0 && last_signaller[wait.counter] >= i)
        return name(i) + " waits on " + counter + " in the same step, but " +
               name(last_signaller[wait.counter]) + " signals it and comes at or after it";
    }
  }
  for (int c = 0; c < counters; ++c)
    if (signallers[c] != schedule.counter_arrivals[c])
      return "counter " + std::to_string(c) + " gets " +
             std::to_string(schedule.counter_arrivals[c]) +
             " signals a step by counter_arrivals, " + "but " + std::to_string(signallers[c]) +
             " instructions signal it";
  const int blocks = static_cast<int>(schedule.block_first.size()) - 1;
  for (int k = 0; k < blocks; ++k)
    for (int at = schedule.block_first[k] + 1; at < schedule.block_first[k + 1]; ++at)
      if (schedule.block_instructions[at] <= schedule.block_instructions[at - 1])
        return "block " + std::to_string(k) + "'s list is not increasing at its entry " +
               std::to_string(at - schedule.block_first[k]);
  return "";
}

}  // namespace ladder
