// tests/cpu/test_cuda_graph.cpp - when a captured graph may be replayed and when it must
// be captured again (GraphKey, GraphCache), and which drivers run conditional nodes:
// the host-side decisions behind chapters 07 and 08, without a GPU.
// Run: cpu_tests "[graphs]"
#include <catch2/catch.hpp>

#include <string>

#include "common/cuda_graph.hpp"

namespace {

using ladder::GraphKey;

/// What a chapter's key holds: the sizes, then the buffers' addresses.
GraphKey step_key(int batch, int capacity, const void* cache, const void* cursor) {
  GraphKey key;
  key.add_size(batch).add_size(capacity).add_address(cache).add_address(cursor);
  return key;
}

/// Stands in for an executable graph: which capture it came from.
struct FakeGraph {
  int capture = 0;
};

const int cache_slot[2] = {0, 0};
const int cursor_slot[2] = {0, 0};

}  // namespace

TEST_CASE("a graph key is equal only when every frozen value is", "[graphs]") {
  const GraphKey key = step_key(32, 132, &cache_slot[0], &cursor_slot[0]);
  CHECK(key == step_key(32, 132, &cache_slot[0], &cursor_slot[0]));
  CHECK(key != step_key(8, 132, &cache_slot[0], &cursor_slot[0]));   // batch
  CHECK(key != step_key(32, 232, &cache_slot[0], &cursor_slot[0]));  // T + N
  CHECK(key != step_key(32, 132, &cache_slot[1], &cursor_slot[0]));  // a buffer moved
  CHECK(key != step_key(32, 132, &cache_slot[0], &cursor_slot[1]));
  CHECK(key != step_key(32, 132, nullptr, &cursor_slot[0]));  // teacher forcing off
  // A value in another position is another key: order is part of it.
  GraphKey swapped;
  swapped.add_size(132).add_size(32).add_address(&cache_slot[0]).add_address(&cursor_slot[0]);
  CHECK(key != swapped);
  CHECK(GraphKey().empty());
  CHECK_FALSE(key.empty());
}

TEST_CASE("the graph cache replays the same shape and captures again for another", "[graphs]") {
  ladder::GraphCache<FakeGraph> cache;
  const GraphKey first = step_key(32, 132, &cache_slot[0], &cursor_slot[0]);
  const GraphKey second = step_key(32, 232, &cache_slot[0], &cursor_slot[0]);
  CHECK(cache.find(first) == nullptr);  // nothing captured yet
  CHECK(cache.captures() == 0);

  cache.store(first, FakeGraph{1});
  // Every later generation of the same shape (and the same buffers) replays it.
  for (int generation = 0; generation < 3; ++generation) {
    REQUIRE(cache.find(first) != nullptr);
    CHECK(cache.find(first)->capture == 1);
  }
  // Another N: the graph froze the old capacity, so it must be captured again...
  CHECK(cache.find(second) == nullptr);
  cache.store(second, FakeGraph{2});
  CHECK(cache.find(second)->capture == 2);
  // ... and only one shape is kept: going back means capturing once more.
  CHECK(cache.find(first) == nullptr);
  CHECK(cache.captures() == 2);
}

TEST_CASE("conditional graph nodes need a CUDA 12.4 driver", "[graphs]") {
  CHECK(ladder::conditional_nodes_unsupported_reason(13000).empty());
  CHECK(ladder::conditional_nodes_unsupported_reason(12040).empty());
  const std::string old_driver = ladder::conditional_nodes_unsupported_reason(12030);
  CHECK(old_driver.find("12.4") != std::string::npos);
  CHECK(old_driver.find("CUDA 12.3") != std::string::npos);
  CHECK(ladder::conditional_nodes_unsupported_reason(0).find("no") != std::string::npos);
}
