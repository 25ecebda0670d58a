// tests/gpu/decode_matmul_test_helpers.hpp - what the fp32 and the bf16 decode-matmul tests
// share: the epilogues, a stream with its workspace, two of them that sum a product's
// splits each its own way, one LM-head launch into poisoned logits and candidates, and the
// check of the argmax's first pass (the candidates) against the kernel's own logits.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/reference.hpp"
#include "kernels/decode_matmul.cuh"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder::test {

/// Every epilogue, in declaration order.
constexpr DecodeEpilogue kEpilogues[] = {DecodeEpilogue::kNone, DecodeEpilogue::kBias,
                                         DecodeEpilogue::kBiasGelu, DecodeEpilogue::kBiasResidual};

/// A stream and its own workspace, as a decode loop sets them up.
struct DecodeQueue {
  DeviceStream stream;
  DecodeMatmulWorkspace workspace;
};

/// Two queues for the same products: `clustered` sums a product's splits in a thread-block
/// cluster where the grid leaves room for one, `plain` always through the workspace. A
/// test notes each product's plan with saw(splits) and at its end check_every_way()
/// asserts that its products took all three ways of summing: one split (nothing to sum), a
/// cluster, the workspace.
struct SummingWays {
  SummingWays() { plain.workspace.disable_cluster_splits(); }
  void saw(int splits) {
    unsplit = unsplit || splits == 1;
    split = split || splits > 1;
  }
  void check_every_way() const {
    CHECK(unsplit);
    CHECK(split);  // and `plain` summed those splits through the workspace
    CHECK(plain.workspace.cluster_launches() == 0);
    if (clustered.workspace.cluster_splits() > 0) CHECK(clustered.workspace.cluster_launches() > 0);
  }
  DecodeQueue clustered;
  DecodeQueue plain;
  bool unsplit = false;
  bool split = false;
};

/// What one LM-head launch left: logits [B, V], candidates [B, T].
struct LmHeadResult {
  std::vector<float> logits;
  std::vector<float> candidate_values;
  std::vector<std::int32_t> candidate_indices;
};

/// Runs launch(logits, candidate_values, candidate_indices) into fresh poisoned buffers
/// for [B, V] logits on `stream` and returns what they hold afterwards.
template <typename Launch>
LmHeadResult lm_head_into_poisoned(int B, int V, const DeviceStream& stream, const Launch& launch) {
  const std::size_t candidates = static_cast<std::size_t>(B) * decode_lm_head_candidates(V);
  DeviceArray<float> logits(static_cast<std::size_t>(B) * V);
  DeviceArray<float> values(candidates);
  DeviceArray<std::int32_t> indices(candidates);
  logits.poison();
  values.poison();
  indices.poison();
  launch(logits.get(), values.get(), indices.get());
  stream.synchronize();
  return LmHeadResult{logits.download(), values.download(), indices.download()};
}

/// Row b's candidates must be the winners of its tiles of `logits` (the kernel's own),
/// and their winner the row's argmax; returns the argmax of every row.
inline std::vector<int> check_candidates(const std::vector<float>& logits,
                                         const std::vector<float>& candidate_values,
                                         const std::vector<std::int32_t>& candidate_indices, int B,
                                         int V) {
  const int tiles = decode_lm_head_candidates(V);
  std::vector<int> tokens(B);
  for (int b = 0; b < B; ++b) {
    CAPTURE(b);
    const float* row = logits.data() + static_cast<std::size_t>(b) * V;
    for (int t = 0; t < tiles; ++t) {
      const int first = t * kDecodeTileColumns;
      const int count = std::min(kDecodeTileColumns, V - first);
      const int expected = first + reference::argmax(row + first, count);
      const std::size_t at = static_cast<std::size_t>(b) * tiles + t;
      CAPTURE(t);
      REQUIRE(candidate_indices[at] == expected);
      REQUIRE((candidate_values[at] == row[expected] ||
               (std::isnan(candidate_values[at]) && std::isnan(row[expected]))));
    }
    // The second pass: the candidates lie in index order, so the argmax over their
    // values (ties to the first, NaN first) is the winner of the row.
    const std::size_t first_candidate = static_cast<std::size_t>(b) * tiles;
    const int best = reference::argmax(candidate_values.data() + first_candidate, tiles);
    tokens[b] = candidate_indices[first_candidate + best];
    CHECK(tokens[b] == reference::argmax(row, V));
  }
  return tokens;
}

}  // namespace ladder::test
