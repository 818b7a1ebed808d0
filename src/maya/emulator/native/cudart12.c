/* Runtime entry points that CUDA 12 names or shapes differently from CUDA 13; compiled into the
 * libcudart stub only against CUDA 12 headers (cudart.c holds the CUDA 13 forms).
 *   - cudaStreamGetCaptureInfo is `_v2` without edge data (`_v3` has it, as CUDA 13's does);
 *   - cudaStreamUpdateCaptureDependencies takes no edge data (`_v2` does);
 *   - cudaGetDriverEntryPoint (CUDA 13 keeps only the ByVersion form);
 *   - cudaMemPrefetchAsync takes a device number (CUDA 13's, a cudaMemLocation and flags). */
#include <cuda_runtime_api.h>

#include "maya_emu.h"

#if CUDART_VERSION < 13000

cudaError_t maya_mem_prefetch(const void *ptr, size_t count, cudaError_t where, unsigned flags,
                              cudaStream_t stream); /* cudart.c */
int maya_valid_device(int d);                       /* cudart.c */

/* the destination is a virtual GPU or the host (cudaCpuDeviceId) */
MAYA_EXPORT cudaError_t cudaMemPrefetchAsync(const void *ptr, size_t count, int device, cudaStream_t stream) {
  int known = device == cudaCpuDeviceId || maya_valid_device(device);
  return maya_mem_prefetch(ptr, count, known ? cudaSuccess : cudaErrorInvalidDevice, 0, stream);
}

static cudaError_t capture_info(cudaStream_t s, enum cudaStreamCaptureStatus *status, unsigned long long *id,
                                cudaGraph_t *graph, const cudaGraphNode_t **deps, size_t *n) {
  maya_graph *g = maya_capturing(maya_stream_id(s));
  *status = g ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  if (id) *id = g ? (unsigned long long)maya_graph_id(g) : 0;
  if (graph) *graph = (cudaGraph_t)g;
  if (deps) *deps = NULL;
  if (n) *n = 0;
  return cudaSuccess;
}

/* the header renames it cudaStreamGetCaptureInfo_v2 */
MAYA_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                                 unsigned long long *id, cudaGraph_t *graph,
                                                 const cudaGraphNode_t **deps, size_t *n) {
  return capture_info(s, status, id, graph, deps, n);
}

MAYA_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t *deps, size_t n,
                                                            unsigned flags) {
  (void)s;
  (void)deps;
  (void)n;
  (void)flags;
  return cudaSuccess; /* the replay keeps the captured order per stream */
}

#if CUDART_VERSION >= 12030
MAYA_EXPORT cudaError_t cudaStreamGetCaptureInfo_v3(cudaStream_t s, enum cudaStreamCaptureStatus *status,
                                                    unsigned long long *id, cudaGraph_t *graph,
                                                    const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                                    size_t *n) {
  if (edges) *edges = NULL;
  return capture_info(s, status, id, graph, deps, n);
}

MAYA_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies_v2(cudaStream_t s, cudaGraphNode_t *deps,
                                                               const cudaGraphEdgeData *edges, size_t n,
                                                               unsigned flags) {
  (void)edges;
  return cudaStreamUpdateCaptureDependencies(s, deps, n, flags);
}
#endif

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned version, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status);

MAYA_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                                enum cudaDriverEntryPointQueryResult *status) {
  return cudaGetDriverEntryPointByVersion(symbol, fn, CUDART_VERSION, flags, status);
}

#endif
