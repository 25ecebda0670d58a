// tests/gpu/decode_matmul_test_helpers.hpp - what the fp32 and the bf16 LM-head tests
// check alike: the argmax's first pass (the candidates) against the kernel's own logits.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/reference.hpp"
#include "kernels/decode_matmul.cuh"

namespace ladder::test {

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
