// tests/cpu/test_device_availability.cpp - which answers of cudaGetDeviceCount may skip.
//
// Only "no GPU" and "no driver" let the GPU tests skip and a chapter say "no CUDA
// device"; every other error is a device that is there and fails, and must fail loudly.
// Run: cpu_tests "[device]"
#include <catch2/catch.hpp>

#include <string>

#include "common/cuda_check.hpp"

using Catch::Matchers::Contains;
using ladder::classify_device_count;
using ladder::DeviceAvailability;

TEST_CASE("no GPU or no driver is absent: the one answer that may skip", "[device]") {
  std::string reason;
  CHECK(classify_device_count(cudaErrorNoDevice, 0, &reason) == DeviceAvailability::absent);
  CHECK_THAT(reason, Contains("no CUDA device found"));
  CHECK(classify_device_count(cudaErrorInsufficientDriver, 0, &reason) ==
        DeviceAvailability::absent);
  CHECK(classify_device_count(cudaSuccess, 0, &reason) == DeviceAvailability::absent);
}

TEST_CASE("a device is usable when the count is positive", "[device]") {
  CHECK(classify_device_count(cudaSuccess, 1, nullptr) == DeviceAvailability::usable);
}

TEST_CASE("any other error is a broken device, named in the reason", "[device]") {
  for (const cudaError_t status :
       {cudaErrorSystemDriverMismatch, cudaErrorInitializationError,
        cudaErrorCompatNotSupportedOnDevice, cudaErrorDevicesUnavailable, cudaErrorUnknown}) {
    std::string reason;
    INFO(cudaGetErrorName(status));
    CHECK(classify_device_count(status, 0, &reason) == DeviceAvailability::broken);
    CHECK_THAT(reason, Contains(cudaGetErrorName(status)));
    CHECK_THAT(reason, !Contains("no CUDA device found"));
  }
}

TEST_CASE("require_cuda_device fails as a CUDA error, not as no device, when broken", "[device]") {
  // What this machine answers decides the branch; each must match its exception.
  std::string reason;
  switch (ladder::query_device_availability(&reason)) {
    case DeviceAvailability::usable:
      CHECK_NOTHROW(ladder::require_cuda_device());
      break;
    case DeviceAvailability::absent:
      CHECK_THROWS_AS(ladder::require_cuda_device(), ladder::NoCudaDevice);
      break;
    case DeviceAvailability::broken:
      CHECK_THROWS_AS(ladder::require_cuda_device(), ladder::CudaError);
      break;
  }
}
