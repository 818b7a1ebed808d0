/* Device attributes and properties of the virtual GPUs (shared by the runtime and driver stubs). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "maya_emu.h"

/* cudaDeviceAttr and CUdevice_attribute share their numbering. Returns 0, or -1 for an attribute
 * Maya does not model (answered with 0 and reported once). */
MAYA_EXPORT int maya_device_attribute(int attr, int device, int *value) {
  const maya_device_cfg *d = &maya_dev[device];
  int v;
  switch (attr) {
  case cudaDevAttrMaxThreadsPerBlock: v = 1024; break;
  case cudaDevAttrMaxBlockDimX:
  case cudaDevAttrMaxBlockDimY: v = 1024; break;
  case cudaDevAttrMaxBlockDimZ: v = 64; break;
  case cudaDevAttrMaxGridDimX: v = 2147483647; break;
  case cudaDevAttrMaxGridDimY:
  case cudaDevAttrMaxGridDimZ: v = 65535; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: v = 49152; break;
  case cudaDevAttrTotalConstantMemory: v = 65536; break;
  case cudaDevAttrWarpSize: v = 32; break;
  case cudaDevAttrMaxPitch: v = 2147483647; break;
  case cudaDevAttrMaxRegistersPerBlock: v = 65536; break;
  case cudaDevAttrClockRate: v = d->clock_khz; break;
  case cudaDevAttrTextureAlignment: v = 512; break;
  case cudaDevAttrGpuOverlap: v = 1; break;
  case cudaDevAttrMultiProcessorCount: v = d->sm_count; break;
  case cudaDevAttrKernelExecTimeout: v = 0; break;
  case cudaDevAttrIntegrated: v = 0; break;
  case cudaDevAttrCanMapHostMemory: v = 1; break;
  case cudaDevAttrComputeMode: v = 0; break;
  case cudaDevAttrConcurrentKernels: v = 1; break;
  case cudaDevAttrEccEnabled: v = 1; break;
  case cudaDevAttrPciBusId: v = device + 1; break;
  case cudaDevAttrPciDeviceId: v = 0; break;
  case cudaDevAttrPciDomainId: v = 0; break;
  case cudaDevAttrTccDriver: v = 0; break;
  case cudaDevAttrMemoryClockRate: v = d->mem_clock_khz; break;
  case cudaDevAttrGlobalMemoryBusWidth: v = d->bus_width_bits; break;
  case cudaDevAttrL2CacheSize: v = d->l2_bytes; break;
  case cudaDevAttrMaxThreadsPerMultiProcessor: v = d->max_threads_per_sm; break;
  case cudaDevAttrAsyncEngineCount: v = 2; break;
  case cudaDevAttrUnifiedAddressing: v = 1; break;
  case cudaDevAttrComputeCapabilityMajor: v = d->major; break;
  case cudaDevAttrComputeCapabilityMinor: v = d->minor; break;
  case cudaDevAttrStreamPrioritiesSupported: v = 1; break;
  case cudaDevAttrGlobalL1CacheSupported: v = 1; break;
  case cudaDevAttrLocalL1CacheSupported: v = 1; break;
  case cudaDevAttrMaxSharedMemoryPerMultiprocessor: v = d->smem_per_sm; break;
  case cudaDevAttrMaxRegistersPerMultiprocessor: v = d->regs_per_sm; break;
  case cudaDevAttrManagedMemory: v = 1; break;
  case cudaDevAttrIsMultiGpuBoard: v = 0; break;
  case cudaDevAttrMultiGpuBoardGroupID: v = 0; break;
  case cudaDevAttrHostNativeAtomicSupported: v = 0; break;
  case cudaDevAttrPageableMemoryAccess: v = 0; break;
  case cudaDevAttrConcurrentManagedAccess: v = 1; break;
  case cudaDevAttrComputePreemptionSupported: v = 1; break;
  case cudaDevAttrCanUseHostPointerForRegisteredMem: v = 0; break;
  case cudaDevAttrCooperativeLaunch: v = 1; break;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: v = d->smem_per_block_optin; break;
  case cudaDevAttrCanFlushRemoteWrites: v = 0; break;
  case cudaDevAttrHostRegisterSupported: v = 1; break;
  case cudaDevAttrPageableMemoryAccessUsesHostPageTables: v = 0; break;
  case cudaDevAttrDirectManagedMemAccessFromHost: v = 0; break;
  case cudaDevAttrMaxBlocksPerMultiprocessor: v = d->major >= 9 ? 32 : (d->major == 8 && d->minor > 0 ? 24 : 32); break;
  case cudaDevAttrMaxPersistingL2CacheSize: v = d->l2_bytes * 3 / 4; break;
  case cudaDevAttrMaxAccessPolicyWindowSize: v = 134213632; break;
  case cudaDevAttrReservedSharedMemoryPerBlock: v = 1024; break;
  case cudaDevAttrSparseCudaArraySupported: v = 1; break;
  case cudaDevAttrHostRegisterReadOnlySupported: v = 1; break;
  case cudaDevAttrMemoryPoolsSupported: v = 1; break;
  case cudaDevAttrGPUDirectRDMASupported: v = 1; break;
  case cudaDevAttrMemoryPoolSupportedHandleTypes: v = 1; break;
  case cudaDevAttrClusterLaunch: v = d->major >= 9; break;
  case cudaDevAttrIpcEventSupport: v = 1; break;
  case cudaDevAttrNumaConfig: v = 0; break;
  case cudaDevAttrNumaId: v = -1; break;
  case cudaDevAttrHostNumaId: v = 0; break;
  case cudaDevAttrMpsEnabled: v = 0; break;
  /* driver-only attributes (CUdevice_attribute): memory exportable as a POSIX file descriptor, as on Linux; switch
   * multicast on Hopper and later whose NVLinks reach an NVSwitch (an HGX board), not on bridged PCIe cards. Their
   * APIs (cuMemExportToShareableHandle, cuMulticast*) are not emulated: they fail, naming themselves. */
  case 103 /* CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED */: v = 1; break;
  case 132 /* CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED */:
    v = d->major >= 9 && d->nvlinks > 0 && !d->nvlink_bridged;
    break;
  default: {
    static int reported[1024];
    if (attr >= 0 && attr < 1024 && !reported[attr]++)
      fprintf(stderr, "maya emulator: device attribute %d is not modelled; answering 0\n", attr);
    *value = 0;
    return -1;
  }
  }
  *value = v;
  return 0;
}

MAYA_EXPORT void maya_device_properties(void *prop, int device) {
  struct cudaDeviceProp *p = prop;
  const maya_device_cfg *d = &maya_dev[device];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", d->name);
  for (int i = 0; i < 16; i++) p->uuid.bytes[i] = (char)(0x4d + device * 31 + i);
  p->totalGlobalMem = d->memory_bytes;
  p->sharedMemPerBlock = 49152;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = d->major;
  p->minor = d->minor;
  p->textureAlignment = 512;
  p->texturePitchAlignment = 32;
  p->multiProcessorCount = d->sm_count;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->ECCEnabled = 1;
  p->pciBusID = device + 1;
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = d->bus_width_bits;
  p->l2CacheSize = d->l2_bytes;
  p->persistingL2CacheMaxSize = d->l2_bytes * 3 / 4;
  p->maxThreadsPerMultiProcessor = d->max_threads_per_sm;
  p->streamPrioritiesSupported = 1;
  p->globalL1CacheSupported = 1;
  p->localL1CacheSupported = 1;
  p->sharedMemPerMultiprocessor = (size_t)d->smem_per_sm;
  p->regsPerMultiprocessor = d->regs_per_sm;
  p->managedMemory = 1;
  p->concurrentManagedAccess = 1;
  p->computePreemptionSupported = 1;
  p->cooperativeLaunch = 1;
  p->sharedMemPerBlockOptin = (size_t)d->smem_per_block_optin;
  p->maxBlocksPerMultiProcessor = 32;
  p->accessPolicyMaxWindowSize = 134213632;
  p->reservedSharedMemPerBlock = 1024;
  p->hostRegisterSupported = 1;
  p->memoryPoolsSupported = 1;
  p->gpuDirectRDMASupported = 1;
  p->memoryPoolSupportedHandleTypes = 1;
  p->ipcEventSupported = 1;
  p->clusterLaunch = d->major >= 9;
#if CUDART_VERSION >= 13000
  p->deviceNumaId = -1;
#else /* CUDA 12's properties still carry what CUDA 13 moved to attributes only */
  p->clockRate = d->clock_khz;
  p->memoryClockRate = d->mem_clock_khz;
  p->deviceOverlap = 1;
#endif
}
