// tests/gpu/test_embedding.cpp - kernels/embedding against reference::embedding.
#include <catch2/catch.hpp>

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

TEST_CASE("launch_embedding matches the reference", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream stream;

  for (const int C : {64, 100, 768}) {
    const std::vector<float> wte = test::random_uniform(rng, std::size_t{kVocab} * C, -1.0f, 1.0f);
    const std::vector<float> wpe =
        test::random_uniform(rng, std::size_t{kPositions} * C, -1.0f, 1.0f);
    const test::DeviceArray<float> wte_device(wte);
    const test::DeviceArray<float> wpe_device(wpe);
    for (const int rows : {1, 3, 37}) {
      CAPTURE(rows, C);
      const std::vector<std::int32_t> tokens = test::random_ints(rng, rows, 0, kVocab - 1);
      const std::vector<std::int32_t> positions = test::random_ints(rng, rows, 0, kPositions - 1);
      const test::DeviceArray<std::int32_t> tokens_device(tokens);
      const test::DeviceArray<std::int32_t> positions_device(positions);
      test::DeviceArray<float> out(static_cast<std::size_t>(rows) * C);
      out.poison();

      launch_embedding(tokens_device.get(), positions_device.get(), wte_device.get(),
                       wpe_device.get(), out.get(), rows, C, stream.get());
      stream.synchronize();

      std::vector<float> expected(out.size());
      reference::embedding(tokens.data(), positions.data(), wte.data(), wpe.data(), expected.data(),
                           rows, C);
      // One fp32 addition per element on both sides: the results must be identical.
      CHECK(test::checked_relative_error(out.download(), expected) == 0.0);
    }
  }
}

TEST_CASE("launch_embedding takes the scalar path for unaligned tables", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream stream;
  const int rows = 5;
  const int C = 64;
  // Tables one float past a 16-byte boundary: C % 4 == 0 but float4 reads would fault.
  const std::vector<float> wte =
      test::random_uniform(rng, std::size_t{kVocab} * C + 1, -1.0f, 1.0f);
  const std::vector<float> wpe =
      test::random_uniform(rng, std::size_t{kPositions} * C + 1, -1.0f, 1.0f);
  const test::DeviceArray<float> wte_device(wte);
  const test::DeviceArray<float> wpe_device(wpe);
  const std::vector<std::int32_t> tokens = test::random_ints(rng, rows, 0, kVocab - 1);
  const std::vector<std::int32_t> positions = test::random_ints(rng, rows, 0, kPositions - 1);
  const test::DeviceArray<std::int32_t> tokens_device(tokens);
  const test::DeviceArray<std::int32_t> positions_device(positions);
  test::DeviceArray<float> out(static_cast<std::size_t>(rows) * C);
  out.poison();

  launch_embedding(tokens_device.get(), positions_device.get(), wte_device.get() + 1,
                   wpe_device.get() + 1, out.get(), rows, C, stream.get());
  stream.synchronize();

  std::vector<float> expected(out.size());
  reference::embedding(tokens.data(), positions.data(), wte.data() + 1, wpe.data() + 1,
                       expected.data(), rows, C);
  CHECK(test::checked_relative_error(out.download(), expected) == 0.0);
}

TEST_CASE("launch_sequence_embedding places token t at first_position + t", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream stream;

  for (const int C : {64, 100}) {
    const std::vector<float> wte = test::random_uniform(rng, std::size_t{kVocab} * C, -1.0f, 1.0f);
    const std::vector<float> wpe =
        test::random_uniform(rng, std::size_t{kPositions} * C, -1.0f, 1.0f);
    const test::DeviceArray<float> wte_device(wte);
    const test::DeviceArray<float> wpe_device(wpe);
    for (const int B : {1, 3}) {
      for (const int T : {1, 5, 130}) {
        for (const int first_position : {0, 7}) {
          CAPTURE(B, T, first_position, C);
          const int rows = B * T;
          const std::vector<std::int32_t> tokens = test::random_ints(rng, rows, 0, kVocab - 1);
          const test::DeviceArray<std::int32_t> tokens_device(tokens);
          test::DeviceArray<float> out(static_cast<std::size_t>(rows) * C);
          out.poison();

          launch_sequence_embedding(tokens_device.get(), wte_device.get(), wpe_device.get(),
                                    out.get(), B, T, first_position, C, stream.get());
          stream.synchronize();

          std::vector<std::int32_t> positions(rows);
          for (int r = 0; r < rows; ++r) positions[r] = first_position + r % T;
          std::vector<float> expected(out.size());
          reference::embedding(tokens.data(), positions.data(), wte.data(), wpe.data(),
                               expected.data(), rows, C);
          CHECK(test::checked_relative_error(out.download(), expected) == 0.0);
        }
      }
    }
  }
}

TEST_CASE("launch_embedding_at_cursor reads the position from device memory", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream stream;

  for (const int C : {64, 100, 768}) {
    const std::vector<float> wte = test::random_uniform(rng, std::size_t{kVocab} * C, -1.0f, 1.0f);
    const std::vector<float> wpe =
        test::random_uniform(rng, std::size_t{kPositions} * C, -1.0f, 1.0f);
    const test::DeviceArray<float> wte_device(wte);
    const test::DeviceArray<float> wpe_device(wpe);
    for (const int B : {1, 3, 32}) {
      for (const int position : {0, 1, kPositions - 1}) {
        CAPTURE(B, position, C);
        const std::vector<std::int32_t> tokens = test::random_ints(rng, B, 0, kVocab - 1);
        const test::DeviceArray<std::int32_t> tokens_device(tokens);
        // The step counter is not the position (a prompt may precede the first step).
        const test::DeviceArray<DecodePosition> cursor(
            std::vector<DecodePosition>{DecodePosition{/*step=*/3, position}});
        test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
        out.poison();

        launch_embedding_at_cursor(tokens_device.get(), cursor.get(), wte_device.get(),
                                   wpe_device.get(), out.get(), B, C, stream.get());
        stream.synchronize();

        const std::vector<std::int32_t> positions(B, position);
        std::vector<float> expected(out.size());
        reference::embedding(tokens.data(), positions.data(), wte.data(), wpe.data(),
                             expected.data(), B, C);
        CHECK(test::checked_relative_error(out.download(), expected) == 0.0);
      }
    }
  }
}

TEST_CASE("launch_embedding_at_cursor takes the scalar path for unaligned tables", "[kernels]") {
  const std::uint32_t seed = test::fresh_seed();
  INFO("seed " << seed << " (rerun with LADDER_TEST_SEED=" << seed << ")");
  std::mt19937 rng(seed);
  test::DeviceStream stream;
  const int B = 3;
  const int C = 64;
  const int position = 17;
  const std::vector<float> wte =
      test::random_uniform(rng, std::size_t{kVocab} * C + 1, -1.0f, 1.0f);
  const std::vector<float> wpe =
      test::random_uniform(rng, std::size_t{kPositions} * C + 1, -1.0f, 1.0f);
  const test::DeviceArray<float> wte_device(wte);
  const test::DeviceArray<float> wpe_device(wpe);
  const std::vector<std::int32_t> tokens = test::random_ints(rng, B, 0, kVocab - 1);
  const test::DeviceArray<std::int32_t> tokens_device(tokens);
  const test::DeviceArray<DecodePosition> cursor(
      std::vector<DecodePosition>{DecodePosition{0, position}});
  test::DeviceArray<float> out(static_cast<std::size_t>(B) * C);
  out.poison();

  launch_embedding_at_cursor(tokens_device.get(), cursor.get(), wte_device.get() + 1,
                             wpe_device.get() + 1, out.get(), B, C, stream.get());
  stream.synchronize();

  const std::vector<std::int32_t> positions(B, position);
  std::vector<float> expected(out.size());
  reference::embedding(tokens.data(), positions.data(), wte.data() + 1, wpe.data() + 1,
                       expected.data(), B, C);
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
