// common/host_threads.hpp - independent pieces of host work spread over the CPU's cores.
//
// The CPU reference decodes rows that do not depend on each other (each row has its
// own KV cache), so they run side by side; everything else in it is sequential.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace ladder {

/// Threads run_on_threads uses at most: one per hardware thread.
inline std::size_t host_thread_count() { return std::max(1u, std::thread::hardware_concurrency()); }

/// Runs work(i) for i in [0, count) on up to host_thread_count() threads, each taking
/// the next i when it is done; rethrows the first exception a worker raised.
template <typename Work>
void run_on_threads(std::size_t count, Work&& work) {
  const std::size_t thread_count = std::min(count, host_thread_count());
  std::atomic<std::size_t> next_item{0};
  std::vector<std::exception_ptr> errors(thread_count);
  std::vector<std::thread> threads;
  threads.reserve(thread_count);
  for (std::size_t t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (std::size_t item = next_item++; item < count; item = next_item++) work(item);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace ladder
