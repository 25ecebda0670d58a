// common/driver_api.hpp - the CUDA driver functions this project calls, without linking libcuda.
//
// Binaries must start on machines that have no NVIDIA driver (CI, and Catch2's test
// discovery, which runs the test executables during the build), so the driver
// library is never linked. The CUDA runtime hands out the driver's entry points
// instead: driver_api() asks cudaGetDriverEntryPointByVersion for each function the
// first time it is called and keeps the pointers. Call them through CU_CHECK:
//
//   const DriverApi& driver = driver_api();
//   CU_CHECK(driver.cuMemCreate(&handle, bytes, &properties, 0));
#pragma once

#include <cudaTypedefs.h>

namespace ladder {

/// Driver entry points, named as in the driver API, typed with the versioned
/// signatures of <cudaTypedefs.h> that the requested ABI version (12.0) returns.
struct DriverApi {
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity = nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemCreate_v10020 cuMemCreate = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
};

/// The entry points, looked up on the first call (thread-safe) and the same table afterwards.
/// Throws NoCudaDevice when there is no driver, CudaError when the driver lacks a function.
const DriverApi& driver_api();

}  // namespace ladder
