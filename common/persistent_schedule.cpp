// common/persistent_schedule.cpp - builds the persistent decode kernel's instruction list
// (persistent_schedule.hpp says what it holds and why it cannot deadlock).
#include "common/persistent_schedule.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace ladder {

namespace {

constexpr int kTileColumns = 64;  // a product's column tile, and a chunk of 64 inputs of K
constexpr int kMaxBatch = 64;     // the decode matmuls' row limit

std::string product_name(PersistentProduct product) {
  switch (product) {
    case PersistentProduct::kQkv:
      return "qkv product";
    case PersistentProduct::kAttentionProjection:
      return "attention projection";
    case PersistentProduct::kMlpExpand:
      return "MLP expansion (c_fc)";
    case PersistentProduct::kMlpProjection:
      return "MLP projection";
    case PersistentProduct::kLmHead:
      return "LM head";
  }
  return "product";
}

void require(bool condition, const std::string& message) {
  if (!condition) throw std::invalid_argument("build_persistent_schedule: " + message);
}

/// Adds instructions and counters; `waits_for` collects one instruction's waits.
class ScheduleWriter {
 public:
  explicit ScheduleWriter(PersistentSchedule& schedule) : schedule_(schedule) {}

  /// A new counter that `arrivals` instructions signal every step.
  int counter(int arrivals) {
    schedule_.counter_arrivals.push_back(arrivals);
    return schedule_.counter_count() - 1;
  }
  /// `count` counters of `arrivals` each; returns the first (they are consecutive).
  int counters(int count, int arrivals) {
    const int first = schedule_.counter_count();
    for (int i = 0; i < count; ++i) counter(arrivals);
    return first;
  }

  /// Appends an instruction that waits for `waits` and signals `signal`.
  void add(PersistentOp op, int layer, int which, int unit, const std::vector<CounterWait>& waits,
           int signal) {
    PersistentInstruction instruction;
    instruction.op = static_cast<std::int32_t>(op);
    instruction.layer = layer;
    instruction.which = which;
    instruction.unit = unit;
    instruction.first_wait = static_cast<std::int32_t>(schedule_.waits.size());
    instruction.wait_count = static_cast<std::int32_t>(waits.size());
    instruction.signal = signal;
    schedule_.waits.insert(schedule_.waits.end(), waits.begin(), waits.end());
    schedule_.instructions.push_back(instruction);
  }

  /// A wait for this step's producers of `counter`.
  CounterWait same_step(int counter) const {
    return CounterWait{counter, schedule_.counter_arrivals.at(static_cast<std::size_t>(counter)),
                       0};
  }
  /// A wait for the previous step's producers of `counter`.
  CounterWait previous_step(int counter) const {
    return CounterWait{counter, schedule_.counter_arrivals.at(static_cast<std::size_t>(counter)),
                       -1};
  }
  /// Waits for every counter in [first, first + count).
  std::vector<CounterWait> every(int first, int count) const {
    std::vector<CounterWait> waits;
    for (int c = first; c < first + count; ++c) waits.push_back(same_step(c));
    return waits;
  }

 private:
  PersistentSchedule& schedule_;
};

void check_tiling(const PersistentShape& shape, PersistentProduct product) {
  const ProductTiling& tiling = shape.products[static_cast<int>(product)];
  const ProductSize size = persistent_product_size(product, shape.n_embd, shape.vocab_size);
  const std::string name = product_name(product);
  require(tiling.splits >= 1 && tiling.column_tiles >= 1 && tiling.chunks >= 1 &&
              tiling.chunks_per_split >= 1,
          name + ": splits, tiles and chunks must be positive");
  require(tiling.column_tiles == (size.N + kTileColumns - 1) / kTileColumns,
          name + ": the column tiles must cover N = " + std::to_string(size.N));
  require(tiling.chunks == (size.K + kTileColumns - 1) / kTileColumns,
          name + ": the chunks must cover K = " + std::to_string(size.K));
  require(tiling.splits * tiling.chunks_per_split >= tiling.chunks &&
              (tiling.splits - 1) * tiling.chunks_per_split < tiling.chunks,
          name + ": every split must hold at least one chunk and the splits all of K");
}

}  // namespace

ProductSize persistent_product_size(PersistentProduct product, int C, int V) {
  switch (product) {
    case PersistentProduct::kQkv:
      return {C, 3 * C};
    case PersistentProduct::kAttentionProjection:
      return {C, C};
    case PersistentProduct::kMlpExpand:
      return {C, 4 * C};
    case PersistentProduct::kMlpProjection:
      return {4 * C, C};
    case PersistentProduct::kLmHead:
      return {C, V};
  }
  return {};
}

PersistentSchedule build_persistent_schedule(const PersistentShape& shape) {
  require(shape.n_layer >= 1 && shape.n_embd >= 1 && shape.n_head >= 1 && shape.vocab_size >= 1,
          "n_layer, n_embd, n_head and the vocabulary must be positive");
  require(shape.batch >= 1 && shape.batch <= kMaxBatch,
          "the batch must be 1 to 64 rows (the decode matmuls' limit), not " +
              std::to_string(shape.batch));
  require(shape.n_embd % shape.n_head == 0, "n_embd must be divisible by n_head");
  require(shape.n_embd % kTileColumns == 0,
          "n_embd must be a multiple of 64 (a chunk of K is one 64-column tile)");
  require(shape.blocks >= 1, "the grid must hold at least one block");
  for (int p = 0; p < kPersistentProducts; ++p)
    check_tiling(shape, static_cast<PersistentProduct>(p));

  PersistentSchedule schedule;
  schedule.shape = shape;
  ScheduleWriter writer(schedule);
  const int B = shape.batch;
  const int C = shape.n_embd;
  const int H = shape.n_head;
  const int D = C / H;
  const auto tiling = [&](PersistentProduct product) -> const ProductTiling& {
    return shape.products[static_cast<int>(product)];
  };
  const ProductTiling& projection = tiling(PersistentProduct::kAttentionProjection);
  const ProductTiling& mlp_projection = tiling(PersistentProduct::kMlpProjection);
  const ProductTiling& lm_head = tiling(PersistentProduct::kLmHead);

  // The counters. The stop decision's comes first: the embedding waits for the step before.
  schedule.stop_counter = writer.counter(1);
  const int embedded_rows = writer.counters(B, 1);

  // Adds the units of product `product` of `layer`; `waits_of(split)` lists what a split
  // of K needs. Returns the first of its per-tile counters.
  const auto add_product = [&](PersistentProduct product, int layer, const auto& waits_of) {
    const ProductTiling& t = tiling(product);
    const int tiles = writer.counters(t.column_tiles, t.splits);
    for (int split = 0; split < t.splits; ++split) {
      const std::vector<CounterWait> waits = waits_of(split);
      for (int tile = 0; tile < t.column_tiles; ++tile)
        writer.add(PersistentOp::kProduct, layer, static_cast<int>(product),
                   split * t.column_tiles + tile, waits, tiles + tile);
    }
    return tiles;
  };
  // The chunks [first, end) of K that split `split` of `t` streams.
  const auto chunks_of = [](const ProductTiling& t, int split) {
    const int first = split * t.chunks_per_split;
    return std::pair<int, int>{first, std::min(t.chunks, first + t.chunks_per_split)};
  };

  for (int b = 0; b < B; ++b)
    writer.add(PersistentOp::kEmbedding, -1, 0, b, {writer.previous_step(schedule.stop_counter)},
               embedded_rows + b);

  int previous_tiles = -1;  // the MLP projection tiles of the layer before
  for (int layer = 0; layer < shape.n_layer; ++layer) {
    // ln_1: row b needs the whole residual row: the embedding (layer 0) or every tile of
    // the previous layer's MLP projection.
    const int first_norm = writer.counter(B);
    for (int b = 0; b < B; ++b) {
      const std::vector<CounterWait> waits =
          layer == 0 ? std::vector<CounterWait>{writer.same_step(embedded_rows + b)}
                     : writer.every(previous_tiles, mlp_projection.column_tiles);
      writer.add(PersistentOp::kLayerNorm, layer, static_cast<int>(PersistentNorm::kFirst), b,
                 waits, first_norm);
    }
    const int qkv_tiles = add_product(PersistentProduct::kQkv, layer, [&](int) {
      return std::vector<CounterWait>{writer.same_step(first_norm)};
    });
    // Attention (b, h) reads head h's q, k and v columns of qkv: three column ranges.
    const int heads = writer.counters(H, B);
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < H; ++h) {
        std::vector<CounterWait> waits;
        for (int part = 0; part < 3; ++part) {
          const int first_tile = (part * C + h * D) / kTileColumns;
          const int last_tile = (part * C + (h + 1) * D - 1) / kTileColumns;
          for (int tile = first_tile; tile <= last_tile; ++tile)
            waits.push_back(writer.same_step(qkv_tiles + tile));
        }
        writer.add(PersistentOp::kAttention, layer, 0, b * H + h, waits, heads + h);
      }
    }
    // The projection's split reads the attention output columns of its chunks: the heads
    // that overlap them.
    const int projection_tiles =
        add_product(PersistentProduct::kAttentionProjection, layer, [&](int split) {
          const auto [first, end] = chunks_of(projection, split);
          std::vector<CounterWait> waits;
          const int first_head = first * kTileColumns / D;
          const int last_head = std::min(H - 1, (end * kTileColumns - 1) / D);
          for (int h = first_head; h <= last_head; ++h)
            waits.push_back(writer.same_step(heads + h));
          return waits;
        });
    const int second_norm = writer.counter(B);
    for (int b = 0; b < B; ++b)
      writer.add(PersistentOp::kLayerNorm, layer, static_cast<int>(PersistentNorm::kSecond), b,
                 writer.every(projection_tiles, projection.column_tiles), second_norm);
    const int expand_tiles = add_product(PersistentProduct::kMlpExpand, layer, [&](int) {
      return std::vector<CounterWait>{writer.same_step(second_norm)};
    });
    // A chunk of 64 inputs of the MLP projection is one 64-column tile of c_fc.
    previous_tiles = add_product(PersistentProduct::kMlpProjection, layer, [&](int split) {
      const auto [first, end] = chunks_of(mlp_projection, split);
      std::vector<CounterWait> waits;
      for (int tile = first; tile < end; ++tile)
        waits.push_back(writer.same_step(expand_tiles + tile));
      return waits;
    });
  }

  const int final_norm = writer.counter(B);
  for (int b = 0; b < B; ++b)
    writer.add(PersistentOp::kLayerNorm, -1, static_cast<int>(PersistentNorm::kFinal), b,
               writer.every(previous_tiles, mlp_projection.column_tiles), final_norm);
  // The LM head signals one counter for all its units: the argmax of a row reads every tile.
  const int lm_head_done = writer.counter(lm_head.units());
  for (int unit = 0; unit < lm_head.units(); ++unit)
    writer.add(PersistentOp::kProduct, -1, static_cast<int>(PersistentProduct::kLmHead), unit,
               {writer.same_step(final_norm)}, lm_head_done);
  const int argmax_done = writer.counter(B);
  for (int b = 0; b < B; ++b)
    writer.add(PersistentOp::kArgmax, -1, 0, b, {writer.same_step(lm_head_done)}, argmax_done);
  writer.add(PersistentOp::kStop, -1, 0, 0, {writer.same_step(argmax_done)}, schedule.stop_counter);

  // Instruction i to block i % blocks, each block's list in step order.
  const int blocks = shape.blocks;
  const int count = static_cast<int>(schedule.instructions.size());
  schedule.block_first.assign(static_cast<std::size_t>(blocks) + 1, 0);
  for (int i = 0; i < count; ++i) ++schedule.block_first[static_cast<std::size_t>(i % blocks) + 1];
  for (int k = 0; k < blocks; ++k)
    schedule.block_first[static_cast<std::size_t>(k) + 1] +=
        schedule.block_first[static_cast<std::size_t>(k)];
  schedule.block_instructions.resize(static_cast<std::size_t>(count));
  std::vector<std::int32_t> next(schedule.block_first.begin(), schedule.block_first.end() - 1);
  for (int i = 0; i < count; ++i)
    schedule.block_instructions[static_cast<std::size_t>(
        next[static_cast<std::size_t>(i % blocks)]++)] = i;
  return schedule;
}

std::string describe(const PersistentSchedule& schedule, const PersistentInstruction& instruction) {
  const std::string layer =
      instruction.layer >= 0 ? "layer " + std::to_string(instruction.layer) + ", " : "";
  switch (static_cast<PersistentOp>(instruction.op)) {
    case PersistentOp::kEmbedding:
      return "the embedding of row " + std::to_string(instruction.unit);
    case PersistentOp::kLayerNorm: {
      const auto norm = static_cast<PersistentNorm>(instruction.which);
      const std::string name = norm == PersistentNorm::kFirst    ? "ln_1"
                               : norm == PersistentNorm::kSecond ? "ln_2"
                                                                 : "ln_f";
      return layer + name + " of row " + std::to_string(instruction.unit);
    }
    case PersistentOp::kProduct: {
      const auto product = static_cast<PersistentProduct>(instruction.which);
      const ProductTiling& tiling = schedule.shape.products[instruction.which];
      const int tiles = std::max(tiling.column_tiles, 1);
      return layer + product_name(product) + ", split " + std::to_string(instruction.unit / tiles) +
             " of column tile " + std::to_string(instruction.unit % tiles);
    }
    case PersistentOp::kAttention: {
      const int H = std::max(schedule.shape.n_head, 1);
      return layer + "attention of row " + std::to_string(instruction.unit / H) + ", head " +
             std::to_string(instruction.unit % H);
    }
    case PersistentOp::kArgmax:
      return "the argmax of row " + std::to_string(instruction.unit);
    case PersistentOp::kStop:
      return "the stop decision";
  }
  return "an unknown instruction";
}

}  // namespace ladder
