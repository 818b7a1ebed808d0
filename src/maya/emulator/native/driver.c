/* libcuda.so.1 stub: the driver API that torch reaches through cudaGetDriverEntryPointByVersion,
 * NVRTC users and Triton load directly. */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "maya_emu.h"

static int ok_device(CUdevice d) { return d >= 0 && d < maya_ndev; }

MAYA_EXPORT CUresult cuInit(unsigned flags) {
  (void)flags;
  return CUDA_SUCCESS;
}
MAYA_EXPORT CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
MAYA_EXPORT CUresult cuDeviceGetCount(int *n) {
  *n = maya_ndev;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (!ok_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  if (!ok_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "%s", maya_dev[d].name);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) {
  if (!ok_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = maya_dev[d].memory_bytes;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice d) {
  if (!ok_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  maya_device_attribute((int)attr, d, value);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice d) {
  if (!ok_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  for (int i = 0; i < 16; i++) uuid->bytes[i] = (char)(0x4d + d * 31 + i);
  return CUDA_SUCCESS;
}

/* Contexts: one primary context per device, identified by device + 1. */
static __thread CUcontext current_ctx;

MAYA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d) {
  if (!ok_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = (CUcontext)(uintptr_t)(d + 1);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
  (void)d;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *flags, int *active) {
  if (!ok_device(d)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = 1;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx) {
  *ctx = current_ctx ? current_ctx : (CUcontext)(uintptr_t)(maya_current_device() + 1);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  current_ctx = ctx;
  if (ctx) maya_set_current_device((int)(uintptr_t)ctx - 1);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) { return cuCtxSetCurrent(ctx); }
MAYA_EXPORT CUresult cuCtxPopCurrent(CUcontext *ctx) {
  if (ctx) *ctx = current_ctx;
  current_ctx = NULL;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuCtxGetDevice(CUdevice *d) {
  *d = maya_current_device();
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuCtxSynchronize(void) {
  maya_rec *r = maya_begin(API("cuCtxSynchronize"), D_DRIVER, K_SYNC);
  r->a[0] = -1;
  maya_end(r, 0);
  maya_collectives_done(-1, -1);
  return CUDA_SUCCESS;
}

/* The codes the stubs return (CUDA_ERROR_NOT_SUPPORTED: every API not emulated) and the common ones. */
#define DRIVER_ERRORS(X)                                                                                               \
  X(CUDA_SUCCESS, "no error")                                                                                          \
  X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                                                      \
  X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                                                         \
  X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                                                \
  X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                                                  \
  X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                                                        \
  X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                                               \
  X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                                                        \
  X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                                              \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device")                          \
  X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                                              \
  X(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")                                \
  X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                                                    \
  X(CUDA_ERROR_NOT_READY, "device not ready")                                                                          \
  X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                                                            \
  X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                                               \
  X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported (not emulated by Maya)")                                        \
  X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture")                  \
  X(CUDA_ERROR_UNKNOWN, "unknown error")

#define DRIVER_ERROR_NAME(code, text)                                                                                  \
  case code: *s = #code; return CUDA_SUCCESS;
#define DRIVER_ERROR_TEXT(code, text)                                                                                  \
  case code: *s = text; return CUDA_SUCCESS;

/* as the driver, CUDA_ERROR_INVALID_VALUE for a code it does not know */
MAYA_EXPORT CUresult cuGetErrorString(CUresult e, const char **s) {
  switch (e) {
    DRIVER_ERRORS(DRIVER_ERROR_TEXT)
  default: *s = "unrecognized error code"; return CUDA_ERROR_INVALID_VALUE;
  }
}

MAYA_EXPORT CUresult cuGetErrorName(CUresult e, const char **s) {
  switch (e) {
    DRIVER_ERRORS(DRIVER_ERROR_NAME)
  default: *s = "unrecognized error code"; return CUDA_ERROR_INVALID_VALUE;
  }
}

/* ------------------------------------------------------------------ virtual memory management
 * (expandable segments): a reservation is address space; a physical handle is an allocation that
 * counts against capacity; mapping places the handle's bytes in the reservation. */

#define GRANULARITY (2u << 20)

MAYA_EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option) {
  (void)prop;
  (void)option;
  *g = GRANULARITY;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                         unsigned long long flags) {
  (void)alignment;
  (void)addr;
  (void)flags;
  void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = (CUdeviceptr)p;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  munmap((void *)ptr, size);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                 unsigned long long flags) {
  (void)flags;
  int oom;
  void *p = maya_dev_alloc(prop->location.id, size, -1, &oom);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return maya_dev_free((void *)(uintptr_t)handle, -1) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

MAYA_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                              unsigned long long flags) {
  (void)offset;
  (void)flags;
  /* the reserved range becomes usable, lazily backed memory of the handle's device: pointers into it are
   * device pointers (cuPointerGetAttribute, which Inductor's static launcher asks of every tensor argument) */
  int device = 0;
  if (maya_dev_lookup((void *)(uintptr_t)h, &device, NULL) != 1) return CUDA_ERROR_INVALID_VALUE;
  if (mprotect((void *)ptr, size, PROT_READ | PROT_WRITE) != 0) return CUDA_ERROR_INVALID_VALUE;
  maya_dev_map((void *)ptr, size, device);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  maya_dev_unmap((void *)ptr, size);
  madvise((void *)ptr, size, MADV_DONTNEED);
  mprotect((void *)ptr, size, PROT_NONE);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
  (void)ptr;
  (void)size;
  (void)desc;
  (void)count;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
  size_t s;
  if (maya_dev_lookup((void *)ptr, NULL, &s) != 1) return CUDA_ERROR_INVALID_VALUE;
  if (base) *base = ptr;
  if (size) *size = s;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr) {
  int device = 0;
  int found = maya_dev_lookup((void *)ptr, &device, NULL);
  switch (attr) {
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    *(unsigned *)data = found == 1 ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    *(int *)data = device;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = (CUcontext)(uintptr_t)(device + 1); return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: /* unified addressing: the pointer itself */
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    *(CUdeviceptr *)data = ptr;
    return CUDA_SUCCESS;
  default: maya_unimplemented("cuPointerGetAttribute(attribute)", D_DRIVER); return CUDA_ERROR_NOT_SUPPORTED;
  }
}

MAYA_EXPORT CUresult cuMemsetD32Async(CUdeviceptr ptr, unsigned value, size_t n, CUstream s) {
  maya_rec *r = maya_begin(API("cuMemsetD32Async"), D_DRIVER, K_MEMSET);
  r->stream = maya_stream_id(s);
  r->a[0] = (int64_t)(n * 4);
  if (n * 4 <= MAYA_SMALL_COPY)
    for (size_t i = 0; i < n; i++) ((unsigned *)ptr)[i] = value;
  maya_end(r, 0);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned flags) {
  (void)flags;
  maya_rec *r = maya_begin(API("cuStreamWriteValue32"), D_DRIVER, K_MEMSET);
  r->stream = maya_stream_id(s);
  r->a[0] = 4;
  *(cuuint32_t *)addr = value;
  maya_end(r, 0);
  return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ modules and launches (NVRTC, Triton) */

typedef struct {
  char name[512];
} maya_function;

MAYA_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  (void)image;
  *module = (CUmodule)calloc(1, 8);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *path) {
  (void)path; /* a cubin file (Inductor): kernels are known by name at cuModuleGetFunction */
  return cuModuleLoadData(module, NULL);
}

MAYA_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned n, CUjit_option *o, void **v) {
  (void)n;
  (void)o;
  (void)v;
  return cuModuleLoadData(module, image);
}

MAYA_EXPORT CUresult cuModuleUnload(CUmodule module) {
  free(module);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuModuleGetGlobal(CUdeviceptr *ptr, size_t *bytes, CUmodule module, const char *name) {
  (void)module;
  (void)name;
  static char globals[1 << 16]; /* module globals (small, e.g. Triton scratch pointers) */
  if (ptr) *ptr = (CUdeviceptr)globals;
  if (bytes) *bytes = sizeof globals;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name) {
  (void)module;
  maya_function *f = calloc(1, sizeof *f);
  snprintf(f->name, sizeof f->name, "%s", name);
  *fn = (CUfunction)f;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attr, CUfunction fn) {
  (void)fn;
  const maya_device_cfg *d = &maya_dev[maya_current_device()];
  switch (attr) {
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
  case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 32; break;
  /* modules loaded here (Triton, NVRTC) are compiled for the device they run on */
  case CU_FUNC_ATTRIBUTE_PTX_VERSION:
  case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = d->major * 10 + d->minor; break;
  default: *value = 0;
  }
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuFuncSetAttribute(CUfunction fn, CUfunction_attribute attr, int value) {
  (void)fn;
  (void)attr;
  (void)value;
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuFuncSetCacheConfig(CUfunction fn, CUfunc_cache config) {
  (void)fn;
  (void)config;
  return CUDA_SUCCESS;
}

/* One launch of a module's kernel, recorded under the driver API that made it. */
static CUresult record_launch(int api, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                              unsigned bz, unsigned smem, CUstream s) {
  maya_rec *r = maya_begin(api, D_DRIVER, K_LAUNCH);
  r->stream = maya_stream_id(s);
  r->a[0] = maya_kernel_id_by_name(((maya_function *)f)->name);
  r->a[1] = (int64_t)gx | ((int64_t)gy << 32);
  r->a[2] = gz;
  r->a[3] = (int64_t)bx | ((int64_t)by << 32);
  r->a[4] = bz;
  r->a[5] = smem;
  r->a[6] = maya_take_launch_note();
  maya_end(r, 0);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned smem, CUstream s, void **params, void **extra) {
  (void)params;
  (void)extra;
  return record_launch(API("cuLaunchKernel"), f, gx, gy, gz, bx, by, bz, smem, s);
}

/* A grid that synchronizes across its blocks (TE's multi-block LayerNorm for wide rows, compiled by NVRTC): timed
 * as any launch of its grid; that all its blocks fit on the GPU at once is the caller's to have checked. */
MAYA_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                               unsigned by, unsigned bz, unsigned smem, CUstream s, void **params) {
  (void)params;
  return record_launch(API("cuLaunchCooperativeKernel"), f, gx, gy, gz, bx, by, bz, smem, s);
}

MAYA_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
  return cuLaunchKernel(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                        c->sharedMemBytes, c->hStream, params, extra);
}

MAYA_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t smem) {
  (void)f;
  const maya_device_cfg *d = &maya_dev[maya_current_device()];
  int by_threads = block > 0 ? d->max_threads_per_sm / block : 0;
  int by_smem = smem ? (int)((size_t)d->smem_per_sm / smem) : 32;
  *n = by_threads < by_smem ? by_threads : by_smem;
  return CUDA_SUCCESS;
}

#if CUDA_VERSION >= 12090 /* driver logs came with CUDA 12.9 */
/* torch registers a log callback when the driver offers one; there are no driver logs here */
MAYA_EXPORT CUresult cuLogsRegisterCallback(CUlogsCallback cb, void *data, CUlogsCallbackHandle *handle) {
  (void)cb;
  (void)data;
  *handle = (CUlogsCallbackHandle)calloc(1, 8);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle handle) {
  free(handle);
  return CUDA_SUCCESS;
}
#endif
