/* libcudart.so.13 stub: the CUDA runtime API of the virtual GPUs. */
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
} maya_event;

static __thread cudaError_t last_error = cudaSuccess;

static cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

static int valid_device(int d) { return d >= 0 && d < maya_ndev; }

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
  if (!valid_device(device)) return ret(cudaErrorInvalidDevice);
  maya_set_current_device(device);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (!valid_device(device)) return ret(cudaErrorInvalidDevice);
  maya_device_properties(prop, device);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  if (!valid_device(device)) return ret(cudaErrorInvalidDevice);
  maya_device_attribute(attr, device, value);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  if (!valid_device(device)) return ret(cudaErrorInvalidDevice);
  snprintf(pciBusId, (size_t)len, "00000000:%02X:00.0", device + 1);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer) {
  *can = valid_device(device) && valid_device(peer) && device != peer;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  (void)flags;
  return valid_device(peer) ? cudaSuccess : ret(cudaErrorInvalidDevice);
}

MAYA_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  maya_rec *r = maya_begin(API("cudaDeviceSynchronize"), D_RUNTIME, K_SYNC);
  r->a[0] = -1;
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaDriverGetVersion(int *v) { *v = 13000; return cudaSuccess; }
MAYA_EXPORT cudaError_t cudaRuntimeGetVersion(int *v) { *v = 13000; return cudaSuccess; }

MAYA_EXPORT cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

MAYA_EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

#define ERR(name, text) case name: return text;
MAYA_EXPORT const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    ERR(cudaSuccess, "cudaSuccess")
    ERR(cudaErrorInvalidValue, "cudaErrorInvalidValue")
    ERR(cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation")
    ERR(cudaErrorInvalidDevice, "cudaErrorInvalidDevice")
    ERR(cudaErrorNotSupported, "cudaErrorNotSupported")
    ERR(cudaErrorNotReady, "cudaErrorNotReady")
    ERR(cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle")
    ERR(cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound")
    default: return "cudaErrorUnknown";
  }
}

MAYA_EXPORT const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    ERR(cudaSuccess, "no error")
    ERR(cudaErrorInvalidValue, "invalid argument")
    ERR(cudaErrorMemoryAllocation, "out of memory")
    ERR(cudaErrorInvalidDevice, "invalid device ordinal")
    ERR(cudaErrorNotSupported, "operation not supported (not emulated by Maya)")
    ERR(cudaErrorNotReady, "device not ready")
    ERR(cudaErrorInvalidResourceHandle, "invalid resource handle")
    ERR(cudaErrorSymbolNotFound, "named symbol not found")
    default: return "unknown error";
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
  return cudaMalloc(ptr, size);
}

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
  (void)ptr; (void)size; (void)flags;
  return cudaSuccess; /* pinning ordinary host memory has no observable effect here */
}

MAYA_EXPORT cudaError_t cudaHostUnregister(void *ptr) { (void)ptr; return cudaSuccess; }

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

static cudaError_t record_copy(int api, void *dst, const void *src, size_t count,
                               enum cudaMemcpyKind kind, int64_t stream, int sync) {
  maya_rec *r = maya_begin(api, D_RUNTIME, K_COPY);
  r->stream = stream;
  r->a[0] = (int64_t)count;
  r->a[1] = copy_kind(kind, dst, src);
  if (r->a[1] == 2) r->flags |= F_DATA_DEPENDENT; /* the host reads what only the GPU would compute */
  r->a[2] = sync;
  maya_copy(dst, src, count);
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

MAYA_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                            size_t count, cudaStream_t stream) {
  (void)dstDevice; (void)srcDevice;
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
  if (width * height <= MAYA_SMALL_COPY)
    for (size_t row = 0; row < height; row++) maya_copy((char *)dst + row * dpitch, (const char *)src + row * spitch, width);
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind) {
  (void)symbol; (void)src; (void)offset; (void)kind;
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
  if (!valid_device(device)) return ret(cudaErrorInvalidDevice);
  *pool = (cudaMemPool_t)&default_pool;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
  (void)pool;
  if ((unsigned)attr >= 16) return ret(cudaErrorInvalidValue);
  pool_attrs[attr] = attr == cudaMemPoolAttrReleaseThreshold || attr >= cudaMemPoolAttrReservedMemCurrent
                         ? *(int64_t *)value : *(int *)value;
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

MAYA_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) { (void)pool; (void)keep; return cudaSuccess; }

MAYA_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const struct cudaMemAccessDesc *d, size_t n) {
  (void)pool; (void)d; (void)n;
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

MAYA_EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) {
  maya_rec *r = maya_begin(API("cudaStreamQuery"), D_RUNTIME, K_PLAIN);
  r->stream = maya_stream_id(s);
  maya_end(r, 0);
  return cudaSuccess; /* all work is complete as soon as it is issued */
}

MAYA_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  maya_rec *r = maya_begin(API("cudaStreamSynchronize"), D_RUNTIME, K_SYNC);
  r->stream = maya_stream_id(s);
  r->a[0] = -1;
  maya_end(r, 0);
  return cudaSuccess;
}

/* CUDA graphs: capture diverts a stream's device work into the graph (core.c); each launch replays it. */
MAYA_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  (void)mode;
  int64_t stream = maya_stream_id(s);
  if (maya_capturing(stream)) return cudaErrorIllegalState;
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
  return g ? cudaSuccess : cudaErrorStreamCaptureInvalidated;
}

MAYA_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status) {
  *status = maya_capturing(maya_stream_id(s)) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

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
  (void)s; (void)deps; (void)edges; (void)n; (void)flags;
  return cudaSuccess; /* the replay keeps the captured order per stream */
}

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
  (void)exec; (void)s;
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

MAYA_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  (void)mode;
  return cudaSuccess;
}

static cudaError_t new_event(cudaEvent_t *out, unsigned flags) {
  maya_event *e = calloc(1, sizeof *e);
  e->id = maya_new_id();
  e->device = maya_current_device();
  e->flags = flags;
  *out = (cudaEvent_t)e;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { return new_event(e, 0); }
MAYA_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) { return new_event(e, f); }

MAYA_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
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
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return event_record(API("cudaEventRecord"), e, s); }

MAYA_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned flags) {
  (void)flags;
  return event_record(API("cudaEventRecordWithFlags"), e, s);
}

MAYA_EXPORT cudaError_t cudaEventQuery(cudaEvent_t ev) {
  maya_rec *r = maya_begin(API("cudaEventQuery"), D_RUNTIME, K_EVENT);
  r->a[0] = ((maya_event *)ev)->id;
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  maya_rec *r = maya_begin(API("cudaEventSynchronize"), D_RUNTIME, K_SYNC);
  r->a[0] = ((maya_event *)ev)->id;
  maya_end(r, 0);
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  maya_rec *r = maya_begin(API("cudaEventElapsedTime"), D_RUNTIME, K_EVENT);
  r->flags |= F_DATA_DEPENDENT; /* emulated: host time between the records, not GPU time */
  r->a[0] = ((maya_event *)end)->id;
  *ms = (float)(((maya_event *)end)->recorded_ns - ((maya_event *)start)->recorded_ns) / 1e6f;
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

MAYA_EXPORT void **__cudaRegisterFatBinary(void *fatCubin) { return (void **)fatCubin; }
MAYA_EXPORT void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }
MAYA_EXPORT void __cudaUnregisterFatBinary(void **handle) { (void)handle; }

MAYA_EXPORT void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun, const char *deviceName,
                                        int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize) {
  (void)handle; (void)deviceFun; (void)thread_limit; (void)tid; (void)bid; (void)bDim; (void)gDim; (void)wSize;
  maya_register_kernel(hostFun, deviceName);
}

MAYA_EXPORT void __cudaRegisterVar(void **handle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                                   size_t size, int constant, int global) {
  (void)handle; (void)hostVar; (void)deviceAddress; (void)deviceName; (void)ext; (void)size; (void)constant; (void)global;
}

static __thread dim3 pushed_grid, pushed_block;
static __thread size_t pushed_smem;
static __thread void *pushed_stream;

MAYA_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t smem, void *stream) {
  pushed_grid = grid; pushed_block = block; pushed_smem = smem; pushed_stream = stream;
  return 0;
}

MAYA_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *smem, void *stream) {
  *grid = pushed_grid; *block = pushed_block; *smem = pushed_smem; *(void **)stream = pushed_stream;
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
  (void)func;
  const maya_device_cfg *d = &maya_dev[maya_current_device()];
  memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = 1024;
  attr->numRegs = 32;
  attr->ptxVersion = d->major * 10 + d->minor;
  attr->binaryVersion = d->major * 10 + d->minor;
  attr->maxDynamicSharedSizeBytes = 49152;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
  (void)func; (void)attr; (void)value;
  return cudaSuccess;
}

MAYA_EXPORT cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t k, enum cudaFuncAttribute attr, int value,
                                                        int device) {
  (void)k; (void)attr; (void)value; (void)device;
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
  (void)f; (void)flags;
  *n = blocks_per_sm(block, smem);
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
  (void)version; (void)flags;
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
