// common/cuda_event.cpp - timing work on a stream with CUDA events.
#include "common/cuda_event.hpp"

#include <stdexcept>
#include <vector>

#include "common/benchmark.hpp"

namespace ladder {

double median_stream_seconds(cudaStream_t stream, int warmup_repeats, int timed_repeats,
                             const std::function<void()>& enqueue) {
  if (warmup_repeats < 0 || timed_repeats < 1)
    throw std::invalid_argument(
        "median_stream_seconds: warmup_repeats must be >= 0 and timed_repeats >= 1");
  for (int repeat = 0; repeat < warmup_repeats; ++repeat) enqueue();
  // marks[r] before repeat r, marks[r + 1] after it: one event between two repeats.
  std::vector<CudaEvent> marks(static_cast<std::size_t>(timed_repeats) + 1);
  CUDA_CHECK(cudaEventRecord(marks.front().get(), stream));
  for (int repeat = 0; repeat < timed_repeats; ++repeat) {
    enqueue();
    CUDA_CHECK(cudaEventRecord(marks[static_cast<std::size_t>(repeat) + 1].get(), stream));
  }
  CUDA_CHECK(cudaEventSynchronize(marks.back().get()));
  std::vector<double> seconds;
  for (std::size_t repeat = 0; repeat + 1 < marks.size(); ++repeat) {
    float milliseconds = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&milliseconds, marks[repeat].get(), marks[repeat + 1].get()));
    seconds.push_back(1e-3 * static_cast<double>(milliseconds));
  }
  return summarize(seconds).median;
}

}  // namespace ladder
