// kernels/launch_checks.hpp - argument checks and grid sizing shared by the launchers.
//
// Every launcher checks its arguments on the host before anything reaches the GPU
// and throws std::invalid_argument (LaunchCheckFailure) with one line naming the launcher
// and the bad argument: a wrong shape then fails at the call that caused it, not as a wrong
// answer (or an illegal address) several kernels later.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace ladder::launch_checks {

/// What a launcher's check throws. A std::invalid_argument (the launcher was called with
/// a bad argument), but its own type: inside a chapter it means the chapter's code broke
/// an invariant, not that the user typed a bad command line, and the chapter runner
/// reports it with exit code 1 rather than 2 (common/chapter_runner.hpp).
class LaunchCheckFailure : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

[[noreturn]] inline void fail(const char* launcher, const std::string& problem) {
  throw LaunchCheckFailure(std::string(launcher) + ": " + problem);
}

/// Throws unless `condition` holds; `problem` says what was expected.
inline void require(bool condition, const char* launcher, const char* problem) {
  if (!condition) fail(launcher, problem);
}

inline void require_positive(const char* launcher, const char* name, long long value) {
  if (value <= 0)
    fail(launcher, std::string(name) + " must be > 0 (got " + std::to_string(value) + ")");
}

inline void require_not_null(const char* launcher, const char* name, const void* pointer) {
  if (pointer == nullptr) fail(launcher, std::string(name) + " must not be null");
}

/// The limits a kernel is built for, stated plainly at the top of its launcher: throws
/// "launcher: name must be at most limit (got value): why" past it. `why` names what
/// the limit comes from (registers, shared memory, the rows a kernel holds on chip).
inline void require_at_most(const char* launcher, const char* name, long long value,
                            long long limit, const char* why) {
  if (value > limit)
    fail(launcher, std::string(name) + " must be at most " + std::to_string(limit) + " (got " +
                       std::to_string(value) + "): " + why);
}

/// Throws "launcher: name (value) must be divisible by divisor_name (divisor)" unless it is.
inline void require_divisible(const char* launcher, const char* name, long long value,
                              const char* divisor_name, long long divisor) {
  if (divisor <= 0 || value % divisor != 0)
    fail(launcher, std::string(name) + " (" + std::to_string(value) + ") must be divisible by " +
                       divisor_name + " (" + std::to_string(divisor) + ")");
}

/// An argument and its name, for the list forms below.
template <typename T>
struct Named {
  const char* name;
  T value;
};

/// require_positive for each argument, in the order given: {{"B", B}, {"C", C}}.
inline void require_positive(const char* launcher,
                             std::initializer_list<Named<long long>> arguments) {
  for (const Named<long long>& argument : arguments)
    require_positive(launcher, argument.name, argument.value);
}

/// require_not_null for each pointer, in the order given: {{"x", x}, {"out", out}}.
inline void require_not_null(const char* launcher,
                             std::initializer_list<Named<const void*>> pointers) {
  for (const Named<const void*>& pointer : pointers)
    require_not_null(launcher, pointer.name, pointer.value);
}

/// True when `pointer` may be read as float4 (16-byte aligned).
inline bool is_16_byte_aligned(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % 16 == 0;
}

/// Blocks for a grid-stride loop over `work_items`: enough to cover them, but capped,
/// because beyond a few waves of blocks more blocks only add scheduling work; each
/// thread then loops over several items.
inline unsigned int grid_stride_blocks(std::size_t work_items, int threads_per_block) {
  constexpr std::size_t kMaxBlocks = 4096;  // ~4 full waves of 256-thread blocks on an H200
  const std::size_t threads = static_cast<std::size_t>(threads_per_block);
  const std::size_t blocks = (work_items + threads - 1) / threads;
  return static_cast<unsigned int>(std::clamp<std::size_t>(blocks, 1, kMaxBlocks));
}

}  // namespace ladder::launch_checks
