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
  EmbeddingTables(std::mt19937& rng, int C, int floats_in_front)
      : offset(floats_in_front),
        wte(test::random_uniform(rng, std::size_t{kVocab} * C + offset, -1.0f, 1.0f)),
        wpe(test::random_uniform(rng, std::size_t{kPositions} * C + offset, -1.0f, 1.0f)),
        wte_device(wte),
        wpe_device(wpe) {}

  const float* device_wte() const { return wte_device.get() + offset; }
  const float* device_wpe() const { return wpe_device.get() + offset; }

  /// reference::embedding of `rows` tokens at `positions` with these tables.
  std::vector<float> expected(const std::vector<std::int32_t>& tokens,
                              const std::vector<std::int32_t>& positions, int rows, int C) const {
    std::vector<float> result(static_cast<std::size_t>(rows) * C);
    reference::embedding(tokens.data(), positions.data(), wte.data() + offset, wpe.data() + offset,
                         result.data(), rows, C);
    return result;
  }

  int offset;
  std::vector<float> wte;
  std::vector<float> wpe;
  test::DeviceArray<float> wte_device;
  test::DeviceArray<float> wpe_device;
};

TEST_CASE("launch_embedding matches the reference", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;

  for (const int C : {64, 100, 768}) {
    const EmbeddingTables tables(rng, C, /*floats_in_front=*/0);
    for (const int rows : {1, 3, 37}) {
      CAPTURE(rows, C);
      const std::vector<std::int32_t> tokens = test::random_ints(rng, rows, 0, kVocab - 1);
      const std::vector<std::int32_t> positions = test::random_ints(rng, rows, 0, kPositions - 1);
      const test::DeviceArray<std::int32_t> tokens_device(tokens);
      const test::DeviceArray<std::int32_t> positions_device(positions);
      test::DeviceArray<float> out(static_cast<std::size_t>(rows) * C);
      out.poison();

      launch_embedding(tokens_device.get(), positions_device.get(), tables.device_wte(),
                       tables.device_wpe(), out.get(), rows, C, stream.get());
      stream.synchronize();

      const std::vector<float> expected = tables.expected(tokens, positions, rows, C);
      // One fp32 addition per element on both sides: the results must be identical.
      CHECK(test::checked_relative_error(out.download(), expected) == 0.0);
    }
  }
}

TEST_CASE("launch_embedding takes the scalar path for unaligned tables", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int rows = 5;
  const int C = 64;
  // Tables one float past a 16-byte boundary: C % 4 == 0 but float4 reads would fault.
  const EmbeddingTables tables(rng, C, /*floats_in_front=*/1);
  const std::vector<std::int32_t> tokens = test::random_ints(rng, rows, 0, kVocab - 1);
  const std::vector<std::int32_t> positions = test::random_ints(rng, rows, 0, kPositions - 1);
  const test::DeviceArray<std::int32_t> tokens_device(tokens);
  const test::DeviceArray<std::int32_t> positions_device(positions);
  test::DeviceArray<float> out(static_cast<std::size_t>(rows) * C);
  out.poison();

  launch_embedding(tokens_device.get(), positions_device.get(), tables.device_wte(),
                   tables.device_wpe(), out.get(), rows, C, stream.get());
  stream.synchronize();

  const std::vector<float> expected = tables.expected(tokens, positions, rows, C);
  CHECK(test::checked_relative_error(out.download(), expected) == 0.0);
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
          const std::vector<std::int32_t> tokens = test::random_ints(rng, rows, 0, kVocab - 1);
          const test::DeviceArray<std::int32_t> tokens_device(tokens);
          test::DeviceArray<float> out(static_cast<std::size_t>(rows) * C);
          out.poison();

          launch_sequence_embedding(tokens_device.get(), tables.device_wte(), tables.device_wpe(),
                                    out.get(), B, T, first_position, C, stream.get());
          stream.synchronize();

          std::vector<std::int32_t> positions(rows);
          for (int r = 0; r < rows; ++r) positions[r] = first_position + r % T;
          const std::vector<float> expected = tables.expected(tokens, positions, rows, C);
          CHECK(test::checked_relative_error(out.download(), expected) == 0.0);
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
        const std::vector<std::int32_t> tokens = test::random_ints(rng, B, 0, kVocab - 1);
        const test::DeviceArray<std::int32_t> tokens_device(tokens);
        // The step counter is not the position (a prompt may precede the first step).
        const test::DeviceArray<DecodePosition> cursor = test::device_cursor(/*step=*/3, position);
        test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
        out.poison();

        launch_embedding_at_cursor(tokens_device.get(), cursor.get(), tables.device_wte(),
                                   tables.device_wpe(), out.get(), B, C, stream.get());
        stream.synchronize();

        const std::vector<std::int32_t> positions(B, position);
        const std::vector<float> expected = tables.expected(tokens, positions, B, C);
        CHECK(test::checked_relative_error(out.download(), expected) == 0.0);
      }
    }
  }
}

TEST_CASE("launch_embedding_at_cursor takes the scalar path for unaligned tables", "[kernels]") {
  LADDER_SEEDED_RNG(rng);
  test::DeviceStream stream;
  const int B = 3;
  const int C = 64;
  const int position = 17;
  const EmbeddingTables tables(rng, C, /*floats_in_front=*/1);
  const std::vector<std::int32_t> tokens = test::random_ints(rng, B, 0, kVocab - 1);
  const test::DeviceArray<std::int32_t> tokens_device(tokens);
  const test::DeviceArray<DecodePosition> cursor = test::device_cursor(0, position);
  test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
  out.poison();

  launch_embedding_at_cursor(tokens_device.get(), cursor.get(), tables.device_wte(),
                             tables.device_wpe(), out.get(), B, C, stream.get());
  stream.synchronize();

  const std::vector<std::int32_t> positions(B, position);
  const std::vector<float> expected = tables.expected(tokens, positions, B, C);
  CHECK(test::checked_relative_error(out.download(), expected) == 0.0);
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
