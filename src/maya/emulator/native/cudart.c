/* libcudart stub (libcudart.so.13 or .so.12, as torch links it): the CUDA runtime API of the virtual GPUs.
 * Entry points CUDA 12 shapes differently are in cudart12.c. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "maya_emu.h"

/* ------------------------------------------------------------------ handles */

typedef struct {
  int64_t id;
  int device;
  unsigned flags;
  int64_t recorded_ns; /* host time of the last record (a stand-in for device time) */
  int64_t stream;
  maya_graph *graph; /* the capture the last record was made in: a stream waiting on it joins */
  int64_t mark;      /* its place among the device work, for the device-time oracle (-1: none) */
  int64_t behind;    /* the collective its last record follows on its stream (completion.c; 0: none) */
  int64_t work;      /* device work the rank had issued at that record */
  int polls[2];      /* polls answered "not ready" since that record (completion.c) */
} maya_event;

static __thread cudaError_t last_error = cudaSuccess;

static cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

/* a device of the job (cudart12.c's checks too) */
int maya_valid_device(int d) { return d >= 0 && d < maya_ndev; }

/* ------------------------------------------------------------------ devices */

MAYA_EXPORT cudaError_t cudaGetDeviceCount(int *count) {
  *count = maya_ndev;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaGetDevice(int *device) {
  *device = maya_current_device();
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaSetDevice(int device) {
  if (!maya_valid_device(device)) return ret(cudaErrorInvalidDevice);
  maya_set_current_device(device);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (!maya_valid_device(device)) return ret(cudaErrorInvalidDevice);
  maya_device_properties(prop, device);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  if (!maya_valid_device(device)) return ret(cudaErrorInvalidDevice);
  maya_device_attribute(attr, device, value);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  if (!maya_valid_device(device)) return ret(cudaErrorInvalidDevice);
  snprintf(pciBusId, (size_t)len, "00000000:%02X:00.0", device + 1);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer) {
  *can = maya_valid_device(device) && maya_valid_device(peer) && device != peer;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  (void)flags;
  return maya_valid_device(peer) ? cudaSuccess : ret(cudaErrorInvalidDevice);
}

MAYA_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  maya_rec *r = maya_begin(API("cudaDeviceSynchronize"), D_RUNTIME, K_SYNC);
  r->a[0] = -1;
  maya_end(r, 0);
  maya_collectives_done(-1, -1);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDriverGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}
MAYA_EXPORT cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

MAYA_EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

/* Every cudaError_t of CUDA 13 (driver_types.h), with the runtime's description. */
#define CUDA_ERRORS(X)                                                                                                 \
  X(cudaSuccess, "no error")                                                                                           \
  X(cudaErrorInvalidValue, "invalid argument")                                                                         \
  X(cudaErrorMemoryAllocation, "out of memory")                                                                        \
  X(cudaErrorInitializationError, "initialization error")                                                              \
  X(cudaErrorCudartUnloading, "driver shutting down")                                                                  \
  X(cudaErrorProfilerDisabled, "profiler disabled while using external profiling tool")                                \
  X(cudaErrorProfilerNotInitialized, "profiler not initialized: call cudaProfilerInitialize()")                        \
  X(cudaErrorProfilerAlreadyStarted, "profiler already started")                                                       \
  X(cudaErrorProfilerAlreadyStopped, "profiler already stopped")                                                       \
  X(cudaErrorInvalidConfiguration, "invalid configuration argument")                                                   \
  X(cudaErrorInvalidPitchValue, "invalid pitch argument")                                                              \
  X(cudaErrorInvalidSymbol, "invalid device symbol")                                                                   \
  X(cudaErrorInvalidHostPointer, "invalid host pointer")                                                               \
  X(cudaErrorInvalidDevicePointer, "invalid device pointer")                                                           \
  X(cudaErrorInvalidTexture, "invalid texture reference")                                                              \
  X(cudaErrorInvalidTextureBinding, "texture is not bound to a pointer")                                               \
  X(cudaErrorInvalidChannelDescriptor, "invalid channel descriptor")                                                   \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                                              \
  X(cudaErrorAddressOfConstant, "invalid address of constant")                                                         \
  X(cudaErrorTextureFetchFailed, "fetch from texture failed")                                                          \
  X(cudaErrorTextureNotBound, "cannot fetch from a texture that is not bound")                                         \
  X(cudaErrorSynchronizationError, "incorrect use of __syncthreads()")                                                 \
  X(cudaErrorInvalidFilterSetting, "linear filtering not supported for non-float type")                                \
  X(cudaErrorInvalidNormSetting, "read as normalized float not supported for 32-bit non float type")                   \
  X(cudaErrorMixedDeviceExecution, "device emulation mode and device execution mode cannot be mixed")                  \
  X(cudaErrorNotYetImplemented, "feature not yet implemented")                                                         \
  X(cudaErrorMemoryValueTooLarge, "memory size or pointer value too large to fit in 32 bit")                           \
  X(cudaErrorStubLibrary, "CUDA driver is a stub library")                                                             \
  X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version")                       \
  X(cudaErrorCallRequiresNewerDriver, "API call is not supported in the installed CUDA driver")                        \
  X(cudaErrorInvalidSurface, "invalid surface reference")                                                              \
  X(cudaErrorDuplicateVariableName, "duplicate global variable looked up by string name")                              \
  X(cudaErrorDuplicateTextureName, "duplicate texture looked up by string name")                                       \
  X(cudaErrorDuplicateSurfaceName, "duplicate surface looked up by string name")                                       \
  X(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable")                                  \
  X(cudaErrorIncompatibleDriverContext, "incompatible driver context")                                                 \
  X(cudaErrorMissingConfiguration, "__global__ function call is not configured")                                       \
  X(cudaErrorPriorLaunchFailure, "unspecified launch failure in prior launch")                                         \
  X(cudaErrorLaunchMaxDepthExceeded, "launch would exceed maximum depth of nested launches")                           \
  X(cudaErrorLaunchFileScopedTex,                                                                                      \
    "launch failed because kernel uses unsupported, file-scoped textures (texture objects are supported)")             \
  X(cudaErrorLaunchFileScopedSurf,                                                                                     \
    "launch failed because kernel uses unsupported, file-scoped surfaces (surface objects are supported)")             \
  X(cudaErrorSyncDepthExceeded,                                                                                        \
    "cudaDeviceSynchronize failed because caller's grid depth exceeds cudaLimitDevRuntimeSyncDepth")                   \
  X(cudaErrorLaunchPendingCountExceeded,                                                                               \
    "launch failed because launch would exceed cudaLimitDevRuntimePendingLaunchCount")                                 \
  X(cudaErrorInvalidDeviceFunction, "invalid device function")                                                         \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                                           \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                                                  \
  X(cudaErrorDeviceNotLicensed, "device doesn't have valid Grid license")                                              \
  X(cudaErrorSoftwareValidityNotEstablished, "integrity checks failed")                                                \
  X(cudaErrorStartupFailure, "startup failure in cuda runtime")                                                        \
  X(cudaErrorInvalidKernelImage, "device kernel image is invalid")                                                     \
  X(cudaErrorDeviceUninitialized, "invalid device context")                                                            \
  X(cudaErrorMapBufferObjectFailed, "mapping of buffer object failed")                                                 \
  X(cudaErrorUnmapBufferObjectFailed, "unmapping of buffer object failed")                                             \
  X(cudaErrorArrayIsMapped, "array is mapped")                                                                         \
  X(cudaErrorAlreadyMapped, "resource already mapped")                                                                 \
  X(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device")                       \
  X(cudaErrorAlreadyAcquired, "resource already acquired")                                                             \
  X(cudaErrorNotMapped, "resource not mapped")                                                                         \
  X(cudaErrorNotMappedAsArray, "resource not mapped as array")                                                         \
  X(cudaErrorNotMappedAsPointer, "resource not mapped as pointer")                                                     \
  X(cudaErrorECCUncorrectable, "uncorrectable ECC error encountered")                                                  \
  X(cudaErrorUnsupportedLimit, "limit is not supported on this architecture")                                          \
  X(cudaErrorDeviceAlreadyInUse, "exclusive-thread device already in use by a different thread")                       \
  X(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices")                          \
  X(cudaErrorInvalidPtx, "a PTX JIT compilation failed")                                                               \
  X(cudaErrorInvalidGraphicsContext, "invalid OpenGL or DirectX context")                                              \
  X(cudaErrorNvlinkUncorrectable, "uncorrectable NVLink error detected during the execution")                          \
  X(cudaErrorJitCompilerNotFound, "PTX JIT compiler library not found")                                                \
  X(cudaErrorUnsupportedPtxVersion, "the provided PTX was compiled with an unsupported toolchain.")                    \
  X(cudaErrorJitCompilationDisabled, "PTX JIT compilation was disabled")                                               \
  X(cudaErrorUnsupportedExecAffinity, "the provided execution affinity is not supported")                              \
  X(cudaErrorUnsupportedDevSideSync, "device-side synchronization is not supported")                                   \
  X(cudaErrorInvalidSource, "device kernel image is invalid")                                                          \
  X(cudaErrorFileNotFound, "file not found")                                                                           \
  X(cudaErrorSharedObjectSymbolNotFound, "shared object symbol not found")                                             \
  X(cudaErrorSharedObjectInitFailed, "shared object initialization failed")                                            \
  X(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS")                                  \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                                         \
  X(cudaErrorIllegalState, "the operation cannot be performed in the present state")                                   \
  X(cudaErrorLossyQuery, "attempted introspection would be semantically lossy")                                        \
  X(cudaErrorSymbolNotFound, "named symbol not found")                                                                 \
  X(cudaErrorNotReady, "device not ready")                                                                             \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                                               \
  X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")                                          \
  X(cudaErrorLaunchTimeout, "the launch timed out and was terminated")                                                 \
  X(cudaErrorLaunchIncompatibleTexturing, "launch uses incompatible texturing mode")                                   \
  X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")                                               \
  X(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled")                                                 \
  X(cudaErrorSetOnActiveProcess, "cannot set while device is active in this process")                                  \
  X(cudaErrorContextIsDestroyed, "context is destroyed")                                                               \
  X(cudaErrorAssert, "device-side assert triggered")                                                                   \
  X(cudaErrorTooManyPeers, "peer mapping resources exhausted")                                                         \
  X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped")               \
  X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region")                     \
  X(cudaErrorHardwareStackError, "hardware stack error")                                                               \
  X(cudaErrorIllegalInstruction, "an illegal instruction was encountered")                                             \
  X(cudaErrorMisalignedAddress, "misaligned address")                                                                  \
  X(cudaErrorInvalidAddressSpace, "operation not supported on global/shared address space")                            \
  X(cudaErrorInvalidPc, "invalid program counter")                                                                     \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                                              \
  X(cudaErrorCooperativeLaunchTooLarge, "too many blocks in cooperative launch")                                       \
  X(cudaErrorNotPermitted, "operation not permitted")                                                                  \
  X(cudaErrorNotSupported, "operation not supported (not emulated by Maya)")                                           \
  X(cudaErrorSystemNotReady, "system not yet initialized")                                                             \
  X(cudaErrorSystemDriverMismatch, "system has unsupported display driver / cuda driver combination")                  \
  X(cudaErrorCompatNotSupportedOnDevice, "forward compatibility was attempted on non supported HW")                    \
  X(cudaErrorMpsConnectionFailed, "MPS client failed to connect to the MPS control daemon or the MPS server")          \
  X(cudaErrorMpsRpcFailure, "the remote procedural call between the MPS server and the MPS client failed")             \
  X(cudaErrorMpsServerNotReady, "MPS server is not ready to accept new MPS client requests")                           \
  X(cudaErrorMpsMaxClientsReached, "the hardware resources required to create MPS client have been exhausted")         \
  X(cudaErrorMpsMaxConnectionsReached,                                                                                 \
    "the hardware resources required to support device connections have been exhausted")                               \
  X(cudaErrorMpsClientTerminated, "the MPS client has been terminated by the server")                                  \
  X(cudaErrorCdpNotSupported,                                                                                          \
    "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not support it")                 \
  X(cudaErrorCdpVersionMismatch, "unsupported interaction between different versions of CUDA Dynamic Parallelism")     \
  X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")                             \
  X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture")                      \
  X(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences")                    \
  X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began")                           \
  X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work")                                              \
  X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream")                        \
  X(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream")    \
  X(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream")                 \
  X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread")     \
  X(cudaErrorTimeout, "wait operation timed out")                                                                      \
  X(cudaErrorGraphExecUpdateFailure, "the graph update was not performed because it included changes which violated "  \
                                     "constraints specific to instantiated graph update")                              \
  X(cudaErrorExternalDevice, "an async error has occurred in external entity outside of CUDA")                         \
  X(cudaErrorInvalidClusterSize, "a kernel launch error has occurred due to cluster misconfiguration")                 \
  X(cudaErrorUnknown, "unknown error")                                                                                 \
  CUDA_ERRORS_12_6(X) CUDA_ERRORS_12_8(X) CUDA_ERRORS_13_1(X) CUDA_ERRORS_13_2(X)

/* the codes later releases added (torch builds against the headers of its own release) */
#if CUDART_VERSION >= 12060
#define CUDA_ERRORS_12_6(X)                                                                                            \
  X(cudaErrorFunctionNotLoaded,                                                                                        \
    "the function handle is not loaded when calling an API that requires a loaded function")                           \
  X(cudaErrorInvalidResourceType, "one or more resources passed in are not valid resource types for the operation")    \
  X(cudaErrorInvalidResourceConfiguration, "one or more resources are insufficient or non-applicable for the "         \
                                           "operation")
#else
#define CUDA_ERRORS_12_6(X)
#endif
#if CUDART_VERSION >= 12080
#define CUDA_ERRORS_12_8(X)                                                                                            \
  X(cudaErrorContained, "an exception occurred on the device that is now contained")                                   \
  X(cudaErrorTensorMemoryLeak, "tensor memory not completely freed")
#else
#define CUDA_ERRORS_12_8(X)
#endif
#if CUDART_VERSION >= 13010 /* not in 13.0 (torch 2.11) */
#define CUDA_ERRORS_13_1(X) X(cudaErrorStreamDetached, "the stream is detached")
#else
#define CUDA_ERRORS_13_1(X)
#endif
#if CUDART_VERSION >= 13020
#define CUDA_ERRORS_13_2(X) X(cudaErrorVersionTranslation, "version translation failed")
#else
#define CUDA_ERRORS_13_2(X)
#endif

#define ERROR_NAME(code, text)                                                                                         \
  case code: return #code;
#define ERROR_TEXT(code, text)                                                                                         \
  case code: return text;

/* torch reports a failed call with both (c10_cuda_check_implementation): a code either misses reads as
 * an unknown error, hiding which one it was */
MAYA_EXPORT const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    CUDA_ERRORS(ERROR_NAME)
  default: return "unrecognized error code";
  }
}

MAYA_EXPORT const char *cudaGetErrorString(cudaError_t e) {
  if (e == cudaErrorLaunchTimeout && maya_stop_reason()) return maya_stop_reason(); /* a loop stopped */
  switch (e) {
    CUDA_ERRORS(ERROR_TEXT)
  default: return "unrecognized error code";
  }
}

/* ------------------------------------------------------------------ memory */

MAYA_EXPORT cudaError_t cudaMalloc(void **ptr, size_t size) {
  int oom;
  *ptr = maya_dev_alloc(maya_current_device(), size, -1, &oom);
  return *ptr ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

MAYA_EXPORT cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream) {
  int oom;
  *ptr = maya_dev_alloc(maya_current_device(), size, maya_stream_id(stream), &oom);
  return *ptr ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

MAYA_EXPORT cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned flags) {
  (void)flags;
  cudaError_t e = cudaMalloc(ptr, size);
  if (e == cudaSuccess) maya_dev_mark_managed(*ptr);
  return e;
}

/* Managed memory is device memory here (cudaMallocManaged), resident where its kernels run: a prefetch, to the
 * device or to the host, moves no page, as one of pages already where they are asked to be. Recorded on its
 * stream with no device work. Refused as the runtime refuses it: `where` is the destination's check
 * (cudart12.c's device number, prefetch_location), then flags other than 0 and a range outside one managed
 * allocation are invalid values. */
cudaError_t maya_mem_prefetch(const void *ptr, size_t count, cudaError_t where, unsigned flags, cudaStream_t stream) {
  maya_rec *r = maya_begin(API("cudaMemPrefetchAsync"), D_RUNTIME, K_PLAIN);
  r->stream = maya_stream_id(stream);
  cudaError_t e = where != cudaSuccess ? where : flags ? cudaErrorInvalidValue : cudaSuccess;
  if (e == cudaSuccess && !maya_dev_managed(ptr, count)) e = cudaErrorInvalidValue;
  maya_end(r, e);
  return ret(e);
}

#if CUDART_VERSION >= 13000 /* CUDA 12's form: cudart12.c */
/* A destination as a location: a virtual GPU, or the host in any of its documented forms (a NUMA node's id is
 * not checked against a machine's nodes: the target's are not known). */
static cudaError_t prefetch_location(struct cudaMemLocation location) {
  switch (location.type) {
  case cudaMemLocationTypeDevice: return maya_valid_device(location.id) ? cudaSuccess : cudaErrorInvalidDevice;
  case cudaMemLocationTypeHost:
  case cudaMemLocationTypeHostNumaCurrent: return cudaSuccess;
  case cudaMemLocationTypeHostNuma: return location.id >= 0 ? cudaSuccess : cudaErrorInvalidValue;
  default: return cudaErrorInvalidValue;
  }
}

MAYA_EXPORT cudaError_t cudaMemPrefetchAsync(const void *ptr, size_t count, struct cudaMemLocation location,
                                             unsigned flags, cudaStream_t stream) {
  return maya_mem_prefetch(ptr, count, prefetch_location(location), flags, stream);
}
#endif

MAYA_EXPORT cudaError_t cudaFree(void *ptr) {
  if (!ptr) return cudaSuccess;
  return maya_dev_free(ptr, -1) == 0 ? cudaSuccess : ret(cudaErrorInvalidValue);
}

MAYA_EXPORT cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream) {
  if (!ptr) return cudaSuccess;
  return maya_dev_free(ptr, maya_stream_id(stream)) == 0 ? cudaSuccess : ret(cudaErrorInvalidValue);
}

MAYA_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size) {
  *ptr = maya_host_alloc(size);
  return *ptr ? cudaSuccess : ret(cudaErrorMemoryAllocation);
}

MAYA_EXPORT cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned flags) {
  (void)flags;
  return cudaMallocHost(ptr, size);
}

MAYA_EXPORT cudaError_t cudaFreeHost(void *ptr) {
  return maya_host_free(ptr) == 0 ? cudaSuccess : ret(cudaErrorInvalidValue);
}

MAYA_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned flags) {
  (void)ptr;
  (void)size;
  (void)flags;
  return cudaSuccess; /* pinning ordinary host memory has no observable effect here */
}

MAYA_EXPORT cudaError_t cudaHostUnregister(void *ptr) {
  (void)ptr;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  int d = maya_current_device();
  *total = maya_dev[d].memory_bytes;
  size_t used = maya_dev_used(d);
  *free_bytes = used < *total ? *total - used : 0;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *ptr) {
  int device = 0;
  int found = maya_dev_lookup(ptr, &device, NULL);
  memset(a, 0, sizeof *a);
  if (found == 1) {
    a->type = cudaMemoryTypeDevice;
    a->device = device;
    a->devicePointer = (void *)ptr;
  } else if (found == 2) {
    a->type = cudaMemoryTypeHost;
    a->device = device;
    a->devicePointer = (void *)ptr;
    a->hostPointer = (void *)ptr;
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
  }
  return cudaSuccess;
}

static int copy_kind(enum cudaMemcpyKind kind, const void *dst, const void *src) {
  switch (kind) {
  case cudaMemcpyHostToHost: return 0;
  case cudaMemcpyHostToDevice: return 1;
  case cudaMemcpyDeviceToHost: return 2;
  case cudaMemcpyDeviceToDevice: return 3;
  default: {
    int dst_dev = maya_dev_lookup(dst, NULL, NULL) == 1, src_dev = maya_dev_lookup(src, NULL, NULL) == 1;
    return dst_dev && src_dev ? 3 : dst_dev ? 1 : src_dev ? 2 : 0;
  }
  }
}

static cudaError_t record_copy(int api, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                               int64_t stream, int sync) {
  maya_rec *r = maya_begin(api, D_RUNTIME, K_COPY);
  r->stream = stream;
  r->a[0] = (int64_t)count;
  r->a[1] = copy_kind(kind, dst, src);
  r->a[2] = sync;
  if (r->a[1] == 2 && maya_host_read(r, dst, src, count) < 0) {
    maya_end(r, cudaErrorLaunchTimeout);
    return ret(cudaErrorLaunchTimeout);
  }
  if (r->a[1] != 2) maya_copy(dst, src, count);
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
  return record_copy(API("cudaMemcpy"), dst, src, count, kind, 0, 1);
}

MAYA_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                        cudaStream_t stream) {
  return record_copy(API("cudaMemcpyAsync"), dst, src, count, kind, maya_stream_id(stream), 0);
}

MAYA_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                                            cudaStream_t stream) {
  (void)dstDevice;
  (void)srcDevice;
  maya_rec *r = maya_begin(API("cudaMemcpyPeerAsync"), D_RUNTIME, K_COPY);
  r->stream = maya_stream_id(stream);
  r->a[0] = (int64_t)count;
  r->a[1] = 5;
  maya_copy(dst, src, count);
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                          size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  maya_rec *r = maya_begin(API("cudaMemcpy2DAsync"), D_RUNTIME, K_COPY);
  r->stream = maya_stream_id(stream);
  r->a[0] = (int64_t)(width * height);
  r->a[1] = copy_kind(kind, dst, src);
  if (r->a[1] == 2) r->flags |= F_DATA_DEPENDENT;
  if (width * height <= MAYA_SMALL_COPY)
    for (size_t row = 0; row < height; row++)
      maya_copy((char *)dst + row * dpitch, (const char *)src + row * spitch, width);
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind) {
  (void)symbol;
  (void)src;
  (void)offset;
  (void)kind;
  maya_rec *r = maya_begin(API("cudaMemcpyToSymbol"), D_RUNTIME, K_COPY);
  r->a[0] = (int64_t)count;
  r->a[1] = 1;
  maya_end(r, 0);
  return cudaSuccess;
}

static cudaError_t record_memset(int api, void *ptr, int value, size_t count, int64_t stream) {
  maya_rec *r = maya_begin(api, D_RUNTIME, K_MEMSET);
  r->stream = stream;
  r->a[0] = (int64_t)count;
  maya_set(ptr, value, count);
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemset(void *ptr, int value, size_t count) {
  return record_memset(API("cudaMemset"), ptr, value, count, 0);
}

MAYA_EXPORT cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream) {
  return record_memset(API("cudaMemsetAsync"), ptr, value, count, maya_stream_id(stream));
}

/* Memory pools: the default pool exists and its attributes read back as set. */
static int64_t pool_attrs[16];
static int default_pool;

MAYA_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
  if (!maya_valid_device(device)) return ret(cudaErrorInvalidDevice);
  *pool = (cudaMemPool_t)&default_pool;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
  (void)pool;
  if ((unsigned)attr >= 16) return ret(cudaErrorInvalidValue);
  pool_attrs[attr] = attr == cudaMemPoolAttrReleaseThreshold || attr >= cudaMemPoolAttrReservedMemCurrent
                         ? *(int64_t *)value
                         : *(int *)value;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
  (void)pool;
  if ((unsigned)attr >= 16) return ret(cudaErrorInvalidValue);
  if (attr == cudaMemPoolAttrReleaseThreshold || attr >= cudaMemPoolAttrReservedMemCurrent) {
    int64_t v = pool_attrs[attr];
    if (attr == cudaMemPoolAttrUsedMemCurrent || attr == cudaMemPoolAttrReservedMemCurrent)
      v = (int64_t)maya_dev_used(maya_current_device());
    *(int64_t *)value = v;
  } else {
    *(int *)value = (int)pool_attrs[attr];
  }
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  (void)pool;
  (void)keep;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const struct cudaMemAccessDesc *d, size_t n) {
  (void)pool;
  (void)d;
  (void)n;
  return cudaSuccess;
}

/* ------------------------------------------------------------------ streams and events */

static cudaError_t new_stream(cudaStream_t *out, unsigned flags, int priority) {
  maya_stream *s = malloc(sizeof *s);
  s->id = maya_new_id();
  s->device = maya_current_device();
  s->flags = flags;
  s->priority = priority;
  *out = (cudaStream_t)s;
  maya_rec *r = maya_begin(API("cudaStreamCreate"), D_RUNTIME, K_PLAIN);
  r->stream = s->id;
  r->a[0] = priority;
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { return new_stream(s, 0, 0); }
MAYA_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f) { return new_stream(s, f, 0); }
MAYA_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned f, int p) { return new_stream(s, f, p); }

MAYA_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s && s != cudaStreamLegacy && s != cudaStreamPerThread) free(s);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority) {
  *priority = (s && s != cudaStreamLegacy && s != cudaStreamPerThread) ? ((maya_stream *)s)->priority : 0;
  return cudaSuccess;
}

/* Kernels are complete as soon as they are issued; a collective is found running by the first polls
 * (completion.c). */
MAYA_EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) {
  maya_rec *r = maya_begin(API("cudaStreamQuery"), D_RUNTIME, K_PLAIN);
  r->stream = maya_stream_id(s);
  cudaError_t status = maya_stream_still_running(r->stream) ? cudaErrorNotReady : cudaSuccess;
  maya_end(r, status);
  return status;
}

MAYA_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  maya_rec *r = maya_begin(API("cudaStreamSynchronize"), D_RUNTIME, K_SYNC);
  r->stream = maya_stream_id(s);
  r->a[0] = -1;
  maya_end(r, 0);
  maya_collectives_done(r->stream, -1);
  return cudaSuccess;
}

/* CUDA graphs: capture diverts a stream's device work into the graph (graphs.c); each launch replays it. */
MAYA_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  (void)mode;
  int64_t stream = maya_stream_id(s);
  if (maya_capturing(stream)) return ret(cudaErrorIllegalState);
  maya_graph *g = maya_capture_begin(stream);
  maya_rec *r = maya_begin(API("cudaStreamBeginCapture"), D_RUNTIME, K_PLAIN);
  r->stream = stream;
  r->a[0] = maya_graph_id(g);
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
  int64_t stream = maya_stream_id(s);
  maya_graph *g = maya_capture_end(stream);
  maya_rec *r = maya_begin(API("cudaStreamEndCapture"), D_RUNTIME, K_PLAIN);
  r->stream = stream;
  r->a[0] = g ? maya_graph_id(g) : -1;
  r->a[1] = g ? (int64_t)maya_graph_size(g) : 0;
  maya_end(r, g ? 0 : cudaErrorStreamCaptureInvalidated);
  *graph = (cudaGraph_t)g;
  return g ? cudaSuccess : ret(cudaErrorStreamCaptureInvalidated);
}

MAYA_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status) {
  *status = maya_capturing(maya_stream_id(s)) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

#if CUDART_VERSION >= 13000 /* CUDA 12's forms: cudart12.c */
MAYA_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                                 unsigned long long *id, cudaGraph_t *graph,
                                                 const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                                 size_t *n) {
  maya_graph *g = maya_capturing(maya_stream_id(s));
  *status = g ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  if (id) *id = g ? (unsigned long long)maya_graph_id(g) : 0;
  if (graph) *graph = (cudaGraph_t)g;
  if (deps) *deps = NULL;
  if (edges) *edges = NULL;
  if (n) *n = 0;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t *deps,
                                                            const cudaGraphEdgeData *edges, size_t n, unsigned flags) {
  (void)s;
  (void)deps;
  (void)edges;
  (void)n;
  (void)flags;
  return cudaSuccess; /* the replay keeps the captured order per stream */
}
#endif

MAYA_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *n) {
  size_t size = maya_graph_size((maya_graph *)graph);
  if (nodes) {
    for (size_t i = 0; i < *n && i < size; i++) nodes[i] = (cudaGraphNode_t)(uintptr_t)(i + 1);
  }
  *n = size;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
  (void)flags;
  *exec = (cudaGraphExec_t)maya_graph_clone((maya_graph *)graph);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                                      unsigned long long flags) {
  return cudaGraphInstantiate(exec, graph, flags);
}

MAYA_EXPORT cudaError_t cudaGraphUpload(cudaGraphExec_t exec, cudaStream_t s) {
  (void)exec;
  (void)s;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  maya_graph_launch((const maya_graph *)exec, API("cudaGraphLaunch"), maya_stream_id(s));
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  maya_graph_free((maya_graph *)graph);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  maya_graph_free((maya_graph *)exec);
  return cudaSuccess;
}

static cudaError_t plain(int api, cudaError_t e) {
  maya_end(maya_begin(api, D_RUNTIME, K_PLAIN), e);
  return ret(e);
}

MAYA_EXPORT cudaError_t cudaUserObjectCreate(cudaUserObject_t *out, void *ptr, cudaHostFn_t destroy, unsigned refs,
                                             unsigned flags) {
  int api = API("cudaUserObjectCreate");
  if (!out || !refs || flags != cudaUserObjectNoDestructorSync) return plain(api, cudaErrorInvalidValue);
  *out = (cudaUserObject_t)maya_user_object_create(ptr, destroy, refs);
  return plain(api, cudaSuccess);
}

MAYA_EXPORT cudaError_t cudaUserObjectRetain(cudaUserObject_t o, unsigned n) {
  int api = API("cudaUserObjectRetain");
  if (!o || !n) return plain(api, cudaErrorInvalidValue);
  maya_user_object_retain((maya_user_object *)o, n);
  return plain(api, cudaSuccess);
}

MAYA_EXPORT cudaError_t cudaUserObjectRelease(cudaUserObject_t o, unsigned n) {
  int api = API("cudaUserObjectRelease");
  if (!o || !n) return plain(api, cudaErrorInvalidValue);
  maya_user_object_release((maya_user_object *)o, n);
  return plain(api, cudaSuccess);
}

/* The graph takes `n` references: new ones, or the caller's (cudaGraphUserObjectMove). */
MAYA_EXPORT cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t o, unsigned n, unsigned flags) {
  int api = API("cudaGraphRetainUserObject");
  if (!graph || !o || !n || (flags & ~(unsigned)cudaGraphUserObjectMove)) return plain(api, cudaErrorInvalidValue);
  if (!(flags & cudaGraphUserObjectMove)) maya_user_object_retain((maya_user_object *)o, n);
  maya_graph_hold((maya_graph *)graph, (maya_user_object *)o, n);
  return plain(api, cudaSuccess);
}

MAYA_EXPORT cudaError_t cudaGraphReleaseUserObject(cudaGraph_t graph, cudaUserObject_t o, unsigned n) {
  int api = API("cudaGraphReleaseUserObject");
  if (!graph || !o || !n) return plain(api, cudaErrorInvalidValue);
  if (maya_graph_unhold((maya_graph *)graph, (maya_user_object *)o, n) < 0) return plain(api, cudaErrorInvalidValue);
  maya_user_object_release((maya_user_object *)o, n);
  return plain(api, cudaSuccess);
}

MAYA_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  (void)mode;
  return cudaSuccess;
}

static cudaError_t new_event(cudaEvent_t *out, unsigned flags) {
  maya_event *e = calloc(1, sizeof *e);
  e->id = maya_new_id();
  e->device = maya_current_device();
  e->flags = flags;
  e->mark = -1;
  *out = (cudaEvent_t)e;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { return new_event(e, 0); }
MAYA_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) { return new_event(e, f); }

MAYA_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (e) maya_timing_release(((maya_event *)e)->mark);
  free(e);
  return cudaSuccess;
}

static cudaError_t event_record(int api, cudaEvent_t ev, cudaStream_t s) {
  maya_event *e = (maya_event *)ev;
  maya_rec *r = maya_begin(api, D_RUNTIME, K_EVENT);
  r->stream = maya_stream_id(s);
  r->a[0] = e->id;
  e->recorded_ns = r->start_ns;
  e->stream = r->stream;
  e->graph = maya_capturing(r->stream);
  e->behind = e->graph ? 0 : maya_behind_collective(r->stream);
  e->work = maya_device_work_issued();
  e->polls[0] = e->polls[1] = 0;
  maya_end(r, 0);
  e->mark = maya_timing_mark(e->mark, !(e->flags & cudaEventDisableTiming) && !e->graph);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  return event_record(API("cudaEventRecord"), e, s);
}

MAYA_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned flags) {
  (void)flags;
  return event_record(API("cudaEventRecordWithFlags"), e, s);
}

MAYA_EXPORT cudaError_t cudaEventQuery(cudaEvent_t ev) {
  maya_event *e = (maya_event *)ev;
  maya_rec *r = maya_begin(API("cudaEventQuery"), D_RUNTIME, K_EVENT);
  r->a[0] = e->id;
  cudaError_t status =
      maya_still_running(e->stream, e->behind, e->recorded_ns, e->work, e->polls) ? cudaErrorNotReady : cudaSuccess;
  maya_end(r, status);
  return status;
}

MAYA_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  maya_event *e = (maya_event *)ev;
  maya_rec *r = maya_begin(API("cudaEventSynchronize"), D_RUNTIME, K_SYNC);
  r->a[0] = e->id;
  maya_end(r, 0);
  maya_collectives_done(e->stream, e->behind);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  maya_rec *r = maya_begin(API("cudaEventElapsedTime"), D_RUNTIME, K_EVENT);
  r->flags |= F_DATA_DEPENDENT; /* emulated: the device-time oracle's estimate, else host time between the records */
  maya_event *s = (maya_event *)start, *e = (maya_event *)end;
  r->a[0] = e->id;
  double ns;
  if (maya_timing_elapsed(s->mark, e->mark, s->stream, e->stream, &ns) == 0) { /* the oracle's estimate */
    *ms = (float)(ns / 1e6);
    r->a[1] = 1;
    r->a[2] = (int64_t)(ns + 0.5);
  } else {
    *ms = (float)(e->recorded_ns - s->recorded_ns) / 1e6f;
  }
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags) {
  (void)flags;
  maya_event *e = (maya_event *)ev;
  if (e->graph && maya_capturing(e->stream) == e->graph) maya_capture_join(maya_stream_id(s), e->graph);
  maya_rec *r = maya_begin(API("cudaStreamWaitEvent"), D_RUNTIME, K_EVENT);
  r->stream = maya_stream_id(s);
  r->a[0] = ((maya_event *)ev)->id;
  maya_end(r, 0);
  return cudaSuccess;
}

/* Host callbacks run at once: all earlier work on the stream is already "complete". */
MAYA_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data) {
  maya_rec *r = maya_begin(API("cudaLaunchHostFunc"), D_RUNTIME, K_PLAIN);
  r->stream = maya_stream_id(s);
  maya_end(r, 0);
  fn(data);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void *data, unsigned flags) {
  (void)flags;
  maya_rec *r = maya_begin(API("cudaStreamAddCallback"), D_RUNTIME, K_PLAIN);
  r->stream = maya_stream_id(s);
  maya_end(r, 0);
  cb(s, cudaSuccess, data);
  return cudaSuccess;
}

/* ------------------------------------------------------------------ kernels */

/* Fat binaries. A module's fat binary holds one image per architecture it was built for: cubins (SASS)
 * and PTX. For each kernel the driver loads the image the device can run, and cudaFuncGetAttributes
 * reports that image's versions, not the device's compute capability. Code built for several
 * architectures dispatches on them: CUB (sorts, scans, unique: embedding backward, torch.sort, ...)
 * takes the PTX version of its EmptyKernel and fails with cudaErrorInvalidDeviceFunction unless it is
 * an architecture its translation unit was compiled for. torch's wheels carry sm_75, sm_80, sm_86, sm_90,
 * sm_100 and sm_120 cubins, so an L4 (sm_89) runs their sm_86 images and must say so.
 *
 * Layout (all little-endian): the wrapper __cudaRegisterFatBinary gets {u32 magic 0x466243b1, u32 version,
 * data, ...}; data is {u32 magic 0xba55ed50, u16 version, u16 header size, u64 size of the entries}, then
 * entries back to back, each {u16 kind (1 PTX, 2 cubin), u16, u32 entry header size, u64 padded payload
 * size, ..., u32 arch at 28 (major * 10 + minor), ..., u64 flags at 40} and its payload. Flag bit 20 marks
 * an architecture-specific image (sm_90a: that architecture only), bit 21 a family one (sm_100f). */

#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xba55ed50u
#define FATBIN_KIND_PTX 1
#define FATBIN_KIND_CUBIN 2
#define FATBIN_ARCH_SPECIFIC (1ull << 20)
#define MAX_IMAGES 64

typedef struct {
  unsigned kind, arch;
  int specific; /* 'a' image: runs on exactly its architecture */
} fatbin_image;

typedef struct {
  void *fat_cubin; /* as registered */
  int n;
  fatbin_image images[MAX_IMAGES];
} fatbin_module;

static uint64_t read_le(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static void parse_fatbin(fatbin_module *m) {
  const unsigned char *w = m->fat_cubin;
  if (!w || read_le(w, 4) != FATBIN_WRAPPER_MAGIC) return;
  const unsigned char *data;
  memcpy(&data, w + 8, sizeof data);
  if (!data || read_le(data, 4) != FATBIN_MAGIC) return;
  uint64_t header = read_le(data + 6, 2), size = read_le(data + 8, 8);
  const unsigned char *p = data + header, *end = p + size;
  while (p + 64 <= end && m->n < MAX_IMAGES) {
    uint64_t entry = read_le(p + 4, 4), payload = read_le(p + 8, 8);
    if (entry < 64) break;
    unsigned kind = (unsigned)read_le(p, 2);
    if (kind == FATBIN_KIND_PTX || kind == FATBIN_KIND_CUBIN) {
      fatbin_image *img = &m->images[m->n++];
      img->kind = kind;
      img->arch = (unsigned)read_le(p + 28, 4);
      img->specific = (read_le(p + 40, 8) & FATBIN_ARCH_SPECIFIC) != 0;
    }
    if (entry > (uint64_t)(end - p) || payload > (uint64_t)(end - p) - entry) break; /* sizes past the end */
    p += entry + payload;
  }
}

/* The image the driver would run on a device of compute capability `cc` (major * 10 + minor): the newest
 * cubin of the device's major architecture not newer than it (an arch-specific one only on exactly its
 * architecture), or PTX not newer than the device, JIT-compiled for it, whichever was compiled for the
 * newer architecture. A real device with neither fails every launch with cudaErrorNoKernelImageForDevice
 * (a V100 with torch's CUDA 13 wheels); the emulation goes on with the image nearest the device instead
 * (the newest older one, else the oldest) and says so once. Returns 0 if the module has no images. */
static int select_image(const fatbin_module *m, int cc, int *ptx_version, int *binary_version) {
  int cubin = -1, ptx = -1, older = -1, oldest = -1, portable = 0;
  for (int i = 0; m && i < m->n; i++) portable |= !m->images[i].specific;
  for (int i = 0; m && i < m->n; i++) {
    const fatbin_image *img = &m->images[i];
    int arch = (int)img->arch;
    if (!portable || !img->specific) { /* arch-specific images are the fallback's last resort */
      if (arch <= cc && arch > older) older = arch;
      if (oldest < 0 || arch < oldest) oldest = arch;
    }
    if (img->specific ? arch != cc : arch > cc) continue;
    if (img->kind == FATBIN_KIND_CUBIN && arch / 10 == cc / 10 && arch > cubin) cubin = arch;
    if (img->kind == FATBIN_KIND_PTX && arch > ptx) ptx = arch;
  }
  if (oldest < 0) return 0;
  if (cubin >= 0 && cubin >= ptx) {
    *ptx_version = *binary_version = cubin;
  } else if (ptx >= 0) {
    *ptx_version = ptx;
    *binary_version = cc;
  } else {
    int nearest = older >= 0 ? older : oldest;
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      fprintf(stderr,
              "maya emulator: the CUDA code has no kernel image for sm_%d (a real %s would fail with "
              "\"no kernel image is available for execution on the device\"); emulating it with the "
              "nearest image, sm_%d\n",
              cc, maya_dev[maya_current_device()].name, nearest);
    *ptx_version = *binary_version = nearest;
  }
  return 1;
}

MAYA_EXPORT void **__cudaRegisterFatBinary(void *fatCubin) {
  fatbin_module *m = calloc(1, sizeof *m);
  m->fat_cubin = fatCubin;
  parse_fatbin(m);
  return (void **)m; /* the handle: passed back to __cudaRegisterFunction */
}

MAYA_EXPORT void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }
MAYA_EXPORT void __cudaUnregisterFatBinary(void **handle) {
  (void)handle; /* kept: the module's kernels stay registered to the end of the process */
}

MAYA_EXPORT void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
                                        int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
  (void)deviceFun;
  (void)thread_limit;
  (void)tid;
  (void)bid;
  (void)bDim;
  (void)gDim;
  (void)wSize;
  maya_register_kernel(hostFun, deviceName, handle);
}

MAYA_EXPORT void __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                                   size_t size, int constant, int global) {
  (void)handle;
  (void)hostVar;
  (void)deviceAddress;
  (void)deviceName;
  (void)ext;
  (void)size;
  (void)constant;
  (void)global;
}

static __thread dim3 pushed_grid, pushed_block;
static __thread size_t pushed_smem;
static __thread void *pushed_stream;

MAYA_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t smem, void *stream) {
  pushed_grid = grid;
  pushed_block = block;
  pushed_smem = smem;
  pushed_stream = stream;
  return 0;
}

MAYA_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *smem, void *stream) {
  *grid = pushed_grid;
  *block = pushed_block;
  *smem = pushed_smem;
  *(void **)stream = pushed_stream;
  return cudaSuccess;
}

static cudaError_t record_launch(int api, const void *func, dim3 g, dim3 b, size_t smem, int64_t stream) {
  maya_rec *r = maya_begin(api, D_RUNTIME, K_LAUNCH);
  r->stream = stream;
  r->a[0] = maya_kernel_id(func);
  r->a[1] = (int64_t)g.x | ((int64_t)g.y << 32);
  r->a[2] = g.z;
  r->a[3] = (int64_t)b.x | ((int64_t)b.y << 32);
  r->a[4] = b.z;
  r->a[5] = (int64_t)smem;
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *func) {
  *kernel = (cudaKernel_t)func;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 g, dim3 b, void **args, size_t smem,
                                           cudaStream_t s) {
  (void)args;
  return record_launch(API("cudaLaunchKernel"), (const void *)kernel, g, b, smem, maya_stream_id(s));
}

MAYA_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s) {
  (void)args;
  return record_launch(API("cudaLaunchKernel"), func, g, b, smem, maya_stream_id(s));
}

MAYA_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 g, dim3 b, void **args, size_t smem,
                                                    cudaStream_t s) {
  (void)args;
  return record_launch(API("cudaLaunchCooperativeKernel"), func, g, b, smem, maya_stream_id(s));
}

MAYA_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args) {
  (void)args;
  return record_launch(API("cudaLaunchKernelExC"), func, config->gridDim, config->blockDim, config->dynamicSmemBytes,
                       maya_stream_id(config->stream));
}

MAYA_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
  const maya_device_cfg *d = &maya_dev[maya_current_device()];
  int cc = d->major * 10 + d->minor;
  memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = 1024;
  attr->numRegs = 32;
  /* the versions of the image the device runs (see select_image); the device's own without a fat binary */
  if (!select_image(maya_kernel_module(func), cc, &attr->ptxVersion, &attr->binaryVersion))
    attr->ptxVersion = attr->binaryVersion = cc;
  attr->maxDynamicSharedSizeBytes = 49152;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
  (void)func;
  (void)attr;
  (void)value;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t k, enum cudaFuncAttribute attr, int value,
                                                        int device) {
  (void)k;
  (void)attr;
  (void)value;
  (void)device;
  return cudaSuccess;
}

static int blocks_per_sm(int block_size, size_t smem) {
  const maya_device_cfg *d = &maya_dev[maya_current_device()];
  if (block_size <= 0) return 0;
  int by_threads = d->max_threads_per_sm / block_size;
  int by_smem = smem ? (int)((size_t)d->smem_per_sm / smem) : 32;
  int n = by_threads < by_smem ? by_threads : by_smem;
  return n > 32 ? 32 : n;
}

MAYA_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *f, int block, size_t smem) {
  (void)f;
  *n = blocks_per_sm(block, smem);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *f, int block,
                                                                               size_t smem, unsigned flags) {
  (void)f;
  (void)flags;
  *n = blocks_per_sm(block, smem);
  return cudaSuccess;
}

/* Thread-block clusters (compute capability 9.0+): as many clusters of the launch's size as its blocks' occupancy
 * fits on the device's SMs (a cluster's blocks run on distinct SMs; GPC boundaries are not modelled). */
MAYA_EXPORT cudaError_t cudaOccupancyMaxActiveClusters(int *n, const void *f, const cudaLaunchConfig_t *config) {
  (void)f;
  if (!n || !config) return cudaErrorInvalidValue;
  const maya_device_cfg *d = &maya_dev[maya_current_device()];
  if (d->major < 9) return cudaErrorNotSupported;
  unsigned cluster = 1;
  for (unsigned i = 0; i < config->numAttrs; i++)
    if (config->attrs[i].id == cudaLaunchAttributeClusterDimension) {
      const cudaLaunchAttributeValue *v = &config->attrs[i].val;
      cluster = v->clusterDim.x * v->clusterDim.y * v->clusterDim.z;
    }
  if (cluster == 0 || cluster > 16) return cudaErrorInvalidClusterSize;
  int block = (int)(config->blockDim.x * config->blockDim.y * config->blockDim.z);
  *n = blocks_per_sm(block, config->dynamicSmemBytes) * d->sm_count / (int)cluster;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaGetSymbolAddress(void **dev_ptr, const void *symbol) {
  *dev_ptr = (void *)symbol; /* device globals live at their host shadow's address */
  return cudaSuccess;
}

/* ------------------------------------------------------------------ driver entry points */

MAYA_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version,
                                                         unsigned long long flags,
                                                         enum cudaDriverEntryPointQueryResult *status) {
  (void)version;
  (void)flags;
  static void *driver;
  if (!driver) driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  char versioned[256];
  *fn = driver ? dlsym(driver, symbol) : NULL;
  for (int v = 2; !*fn && driver && v <= 3; v++) {
    snprintf(versioned, sizeof versioned, "%s_v%d", symbol, v);
    *fn = dlsym(driver, versioned);
  }
  if (status) *status = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

/* ------------------------------------------------------------------ profiler markers */

MAYA_EXPORT cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
MAYA_EXPORT cudaError_t cudaProfilerStop(void) { return cudaSuccess; }
