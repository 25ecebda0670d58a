// common/driver_api.cpp - looks the driver's entry points up through the CUDA runtime.
#include "common/driver_api.hpp"

#include <string>

#include "common/cuda_check.hpp"

namespace ladder {

namespace {

// The ABI version whose signatures we ask for. Every function below has had the
// same signature since CUDA 10.2, and any driver that runs a CUDA 13 runtime
// provides the 12.0 ABI, so this never asks for more than the driver has.
constexpr unsigned int driver_abi_version = 12000;

template <typename Function>
void look_up(const char* symbol, Function& function) {
  void* entry_point = nullptr;
  cudaDriverEntryPointQueryResult query_result = cudaDriverEntryPointSymbolNotFound;
  // A machine without a driver fails here with cudaErrorInsufficientDriver, which
  // CUDA_CHECK turns into NoCudaDevice.
  CUDA_CHECK(cudaGetDriverEntryPointByVersion(symbol, &entry_point, driver_abi_version,
                                              cudaEnableDefault, &query_result));
  if (query_result != cudaDriverEntryPointSuccess || entry_point == nullptr) {
    throw CudaError(std::string("the NVIDIA driver does not provide ") + symbol +
                    " (needs a driver for CUDA 12.0 or newer); update the NVIDIA driver");
  }
  function = reinterpret_cast<Function>(entry_point);
}

DriverApi load_driver_api() {
  DriverApi api;
  look_up("cuDeviceGet", api.cuDeviceGet);
  look_up("cuDeviceGetAttribute", api.cuDeviceGetAttribute);
  look_up("cuMemGetAllocationGranularity", api.cuMemGetAllocationGranularity);
  look_up("cuMemAddressReserve", api.cuMemAddressReserve);
  look_up("cuMemAddressFree", api.cuMemAddressFree);
  look_up("cuMemCreate", api.cuMemCreate);
  look_up("cuMemRelease", api.cuMemRelease);
  look_up("cuMemMap", api.cuMemMap);
  look_up("cuMemUnmap", api.cuMemUnmap);
  look_up("cuMemSetAccess", api.cuMemSetAccess);
  return api;
}

}  // namespace

const DriverApi& driver_api() {
  // Initialised once, thread-safely, and never changed afterwards. If the lookup
  // throws, nothing is stored and the next call tries again.
  static const DriverApi api = load_driver_api();
  return api;
}

}  // namespace ladder
