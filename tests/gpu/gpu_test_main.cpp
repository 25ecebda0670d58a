// tests/gpu/gpu_test_main.cpp - Catch2 main for the GPU tests.
//
// Without a CUDA device (no GPU, or no driver), every test case prints why and exits
// with LADDER_SKIP_RETURN_CODE, which CTest counts as skipped. A device that is there
// but fails (any other error from cudaGetDeviceCount) fails every test case instead:
// a broken GPU must not turn the test command green. Listing the tests (what Catch's
// CTest discovery does during the build) needs no device.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <string>

#include "common/cuda_check.hpp"

namespace {

bool only_lists_tests(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--list", 6) == 0 || std::strcmp(argv[i], "-l") == 0 ||
        std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0)
      return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (!only_lists_tests(argc, argv)) {
    std::string reason;
    switch (ladder::query_device_availability(&reason)) {
      case ladder::DeviceAvailability::usable:
        break;
      case ladder::DeviceAvailability::absent:
        std::printf("SKIPPED: %s; GPU tests need an NVIDIA GPU\n", reason.c_str());
        return LADDER_SKIP_RETURN_CODE;
      case ladder::DeviceAvailability::broken:  // a GPU that fails is a failure, not a skip
        std::printf("FAILED: %s\n", reason.c_str());
        return 1;
    }
  }
  return Catch::Session().run(argc, argv);
}
