// tests/gpu/test_embedding.cpp - kernels/embedding against reference::embedding.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "common/reference.hpp"
#include "kernels/decode_position.cuh"
#include "kernels/embedding.cuh"
#include "tests/gpu/device_test_helpers.hpp"

namespace ladder {
namespace {

constexpr int kVocab = 97;
constexpr int kPositions = 300;

/// Random wte [kVocab, C] and wpe [kPositions, C] in [-1, 1), on the host and on the
/// device, each stored `offset` floats into its buffer (offset 1: one float past a
/// 16-byte boundary, so C % 4 == 0 but float4 reads would fault).
struct EmbeddingTables {
  EmbeddingTables(std::mt19937& rng, int channels, int floats_in_front)
      : C(channels),
        offset(floats_in_front),
        wte(test::random_uniform(rng, std::size_t{kVocab} * C + offset, -1.0f, 1.0f)),
        wpe(test::random_uniform(rng, std::size_t{kPositions} * C + offset, -1.0f, 1.0f)),
        wte_device(wte),
        wpe_device(wpe) {}

  const float* device_wte() const { return wte_device.get() + offset; }
  const float* device_wpe() const { return wpe_device.get() + offset; }

  /// reference::embedding of `tokens`, token r at positions[r], with these tables.
  std::vector<float> expected(const std::vector<std::int32_t>& tokens,
                              const std::vector<std::int32_t>& positions) const {
    const int rows = static_cast<int>(tokens.size());
    std::vector<float> result(static_cast<std::size_t>(rows) * C);
    reference::embedding(tokens.data(), positions.data(), wte.data() + offset, wpe.data() + offset,
                         result.data(), rows, C);
    return result;
  }

  int C;
  int offset;
  std::vector<float> wte;
  std::vector<float> wpe;
  test::DeviceArray<float> wte_device;
  test::DeviceArray<float> wpe_device;
};

/// n token ids drawn uniformly from the vocabulary.
std::vector<std::int32_t> random_tokens(std::mt19937& rng, int n) {
  return test::random_ints(rng, n, 0, kVocab - 1);
}

/// Checks an embedding output against the reference to the bit: one fp32 addition per
/// element on both sides, so the results must be identical.
void check_embedding(const std::vector<float>& out, const EmbeddingTables& tables,
                     const std::vector<std::int32_t>& tokens,
                     const std::vector<std::int32_t>& positions) {
  CHECK(test::checked_relative_error(out, tables.expected(tokens, positions)) == 0.0);
}

/// Checks launch_embedding on `rows` fresh random tokens at fresh random positions.
void check_launch_embedding(std::mt19937& rng, const test::DeviceStream& stream,
                            const EmbeddingTables& tables, int rows) {
  const std::vector<std::int32_t> tokens = random_tokens(rng, rows);
  const std::vector<std::int32_t> positions = test::random_ints(rng, rows, 0, kPositions - 1);
  const test::DeviceArray<std::int32_t> tokens_device(tokens);
  const test::DeviceArray<std::int32_t> positions_device(positions);
  const std::vector<float> out = test::launch_into_poisoned(
      static_cast<std::size_t>(rows) * tables.C, stream, [&](float* embedded) {
        launch_embedding(tokens_device.get(), positions_device.get(), tables.device_wte(),
                         tables.device_wpe(), embedded, rows, tables.C, stream.get());
      });
  check_embedding(out, tables, tokens, positions);
}

/// Checks launch_embedding_at_cursor on B fresh random tokens, the cursor at {step, position}.
void check_embedding_at_cursor(std::mt19937& rng, const test::DeviceStream& stream,
                               const EmbeddingTables& tables, int B, int step, int position) {
  const std::vector<std::int32_t> tokens = random_tokens(rng, B);
  const test::DeviceArray<std::int32_t> tokens_device(tokens);
  const test::DeviceArray<DecodePosition> cursor = test::device_cursor(step, position);
  const std::vector<float> out = test::launch_into_poisoned(
      static_cast<std::size_t>(B) * tables.C, stream, [&](float* embedded) {
        launch_embedding_at_cursor(tokens_device.get(), cursor.get(), tables.device_wte(),
                                   tables.device_wpe(), embedded, B, tables.C, stream.get());
      });
  check_embedding(out, tables, tokens, std::vector<std::int32_t>(B, position));
}

TEST_CASE("launch_embedding matches the reference", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const int C : {64, 100, 768}) {
    const EmbeddingTables tables(rng, C, /*floats_in_front=*/0);
    for (const int rows : {1, 3, 37}) {
      CAPTURE(rows, C);
      check_launch_embedding(rng, stream, tables, rows);
    }
  }
}

TEST_CASE("launch_embedding takes the scalar path for unaligned tables", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  // Tables one float past a 16-byte boundary: C % 4 == 0 but float4 reads would fault.
  const EmbeddingTables tables(rng, /*channels=*/64, /*floats_in_front=*/1);
  check_launch_embedding(rng, stream, tables, /*rows=*/5);
}

TEST_CASE("launch_sequence_embedding places token t at first_position + t", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const int C : {64, 100}) {
    const EmbeddingTables tables(rng, C, /*floats_in_front=*/0);
    for (const int B : {1, 3}) {
      for (const int T : {1, 5, 130}) {
        for (const int first_position : {0, 7}) {
          CAPTURE(B, T, first_position, C);
          const int rows = B * T;
          const std::vector<std::int32_t> tokens = random_tokens(rng, rows);
          const test::DeviceArray<std::int32_t> tokens_device(tokens);
          const std::vector<float> out = test::launch_into_poisoned(
              static_cast<std::size_t>(rows) * C, stream, [&](float* embedded) {
                launch_sequence_embedding(tokens_device.get(), tables.device_wte(),
                                          tables.device_wpe(), embedded, B, T, first_position, C,
                                          stream.get());
              });

          std::vector<std::int32_t> positions(rows);
          for (int r = 0; r < rows; ++r) positions[r] = first_position + r % T;
          check_embedding(out, tables, tokens, positions);
        }
      }
    }
  }
}

TEST_CASE("launch_embedding_at_cursor reads the position from device memory", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const int C : {64, 100, 768}) {
    const EmbeddingTables tables(rng, C, /*floats_in_front=*/0);
    for (const int B : {1, 3, 32}) {
      for (const int position : {0, 1, kPositions - 1}) {
        CAPTURE(B, position, C);
        // The step counter is not the position (a prompt may precede the first step).
        check_embedding_at_cursor(rng, stream, tables, B, /*step=*/3, position);
      }
    }
  }
}

TEST_CASE("launch_embedding_at_cursor takes the scalar path for unaligned tables", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const EmbeddingTables tables(rng, /*channels=*/64, /*floats_in_front=*/1);
  check_embedding_at_cursor(rng, stream, tables, /*B=*/3, /*step=*/0, /*position=*/17);
}

TEST_CASE("embedding launchers reject bad arguments", "[kernels]") {
  test::DeviceArray<std::int32_t> ids(4);
  test::DeviceArray<float> table(std::size_t{64} * 4);
  test::DeviceArray<float> out(std::size_t{64} * 4);
  const std::int32_t* tokens = ids.get();
  const float* wte = table.get();
  float* o = out.get();
  CHECK_THROWS_AS(launch_embedding(tokens, tokens, wte, wte, o, 0, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding(tokens, tokens, wte, wte, o, 4, 0, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding(nullptr, tokens, wte, wte, o, 4, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding(tokens, nullptr, wte, wte, o, 4, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding(tokens, tokens, nullptr, wte, o, 4, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding(tokens, tokens, wte, nullptr, o, 4, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding(tokens, tokens, wte, wte, nullptr, 4, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_sequence_embedding(tokens, wte, wte, o, 0, 4, 0, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_sequence_embedding(tokens, wte, wte, o, 1, 0, 0, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_sequence_embedding(tokens, wte, wte, o, 1, 4, -1, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_sequence_embedding(nullptr, wte, wte, o, 1, 4, 0, 64, nullptr),
                  std::invalid_argument);
  // launch_embedding_at_cursor(tokens, cursor, wte, wpe, out, B, C)
  test::DeviceArray<DecodePosition> cursor_array(1);
  const DecodePosition* cursor = cursor_array.get();
  CHECK_THROWS_AS(launch_embedding_at_cursor(tokens, cursor, wte, wte, o, 0, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding_at_cursor(tokens, cursor, wte, wte, o, 4, 0, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding_at_cursor(nullptr, cursor, wte, wte, o, 4, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding_at_cursor(tokens, nullptr, wte, wte, o, 4, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding_at_cursor(tokens, cursor, nullptr, wte, o, 4, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding_at_cursor(tokens, cursor, wte, nullptr, o, 4, 64, nullptr),
                  std::invalid_argument);
  CHECK_THROWS_AS(launch_embedding_at_cursor(tokens, cursor, wte, wte, nullptr, 4, 64, nullptr),
                  std::invalid_argument);
}

}  // namespace
}  // namespace ladder
