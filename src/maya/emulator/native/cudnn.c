/* libcudnn.so.9 stub: version, handles and streams, so that torch sees cuDNN as available, and the
 * backend (graph) API below. The legacy API torch uses (RNNs, batch norm, CTC loss, the spatial
 * transformer) is in cudnn_legacy.c; every other entry point fails loudly through the generated
 * stubs, naming itself. */
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>

#include "cudnn_compat.h"
#include "cudnn_legacy.h"
#include "gemm.h"
#include "maya_emu.h"

typedef struct {
  cudaStream_t stream;
} maya_cudnn;

MAYA_EXPORT size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
MAYA_EXPORT size_t cudnnGetCudartVersion(void) { return CUDART_VERSION; }

MAYA_EXPORT cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int *value) {
  switch (type) {
  case MAJOR_VERSION: *value = CUDNN_MAJOR; break;
  case MINOR_VERSION: *value = CUDNN_MINOR; break;
  case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; break;
  default: return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT const char *cudnnGetErrorString(cudnnStatus_t s) {
  return s == CUDNN_STATUS_SUCCESS         ? "CUDNN_STATUS_SUCCESS"
         : s == CUDNN_STATUS_NOT_SUPPORTED ? "CUDNN_STATUS_NOT_SUPPORTED (not emulated by Maya)"
                                           : "CUDNN_STATUS_INTERNAL_ERROR";
}

MAYA_EXPORT void cudnnGetLastErrorString(char *message, size_t max_size) {
  if (max_size) snprintf(message, max_size, "%s", "");
}

MAYA_EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
  *handle = (cudnnHandle_t)calloc(1, sizeof(maya_cudnn));
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  free(handle);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  ((maya_cudnn *)handle)->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *stream) {
  *stream = ((maya_cudnn *)handle)->stream;
  return CUDNN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ backend (graph) API
 * Descriptors keep the attributes set on them. Queries a real engine heuristic answers are answered
 * as for one supported engine: one engine config, no workspace, no shared memory, no knobs. Execute
 * records the graph: attention when it holds an SDPA operation or two or more matmuls, a GEMM for a
 * single matmul, and a convolution (forward, data or filter gradient) as its implicit GEMM. */

#include <string.h>

typedef struct {
  int name, type;
  int64_t count;
  void *data;
} battr;

typedef struct bdesc {
  cudnnBackendDescriptorType_t type;
  int finalized;
  battr attrs[48];
  int n;
} bdesc;

static size_t type_size(cudnnBackendAttributeType_t t) {
  switch (t) {
  case CUDNN_TYPE_HANDLE:
  case CUDNN_TYPE_VOID_PTR:
  case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(void *);
  case CUDNN_TYPE_INT64:
  case CUDNN_TYPE_DOUBLE: return 8;
  case CUDNN_TYPE_BOOLEAN:
  case CUDNN_TYPE_CHAR: return 1;
  case CUDNN_TYPE_FRACTION: return 16;
  default: return 4; /* enums, int32, float */
  }
}

static battr *find(bdesc *d, int name) {
  for (int i = 0; i < d->n; i++)
    if (d->attrs[i].name == name) return &d->attrs[i];
  return NULL;
}

static void destroy(bdesc *d);

static void free_attr(battr *a) {
  if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
    for (int64_t i = 0; i < a->count; i++) destroy(((bdesc **)a->data)[i]);
  free(a->data);
}

/* Descriptors referenced by an attribute are copied (as cuDNN does): callers free theirs early. */
static bdesc *clone(const bdesc *src);

static void put(bdesc *d, int name, int type, int64_t count, const void *data) {
  battr *a = find(d, name);
  if (!a) {
    if (d->n == (int)(sizeof d->attrs / sizeof d->attrs[0])) return;
    a = &d->attrs[d->n++];
  } else {
    free_attr(a);
  }
  size_t bytes = type_size(type) * (size_t)count;
  a->name = name;
  a->type = type;
  a->count = count;
  a->data = malloc(bytes ? bytes : 1);
  memcpy(a->data, data, bytes);
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
    for (int64_t i = 0; i < count; i++) ((bdesc **)a->data)[i] = clone(((bdesc **)a->data)[i]);
}

static bdesc *clone(const bdesc *src) {
  if (!src) return NULL;
  bdesc *d = calloc(1, sizeof *d);
  d->type = src->type;
  d->finalized = src->finalized;
  for (int i = 0; i < src->n; i++)
    put(d, src->attrs[i].name, src->attrs[i].type, src->attrs[i].count, src->attrs[i].data);
  return d;
}

static void destroy(bdesc *d) {
  if (!d) return;
  for (int i = 0; i < d->n; i++) free_attr(&d->attrs[i]);
  free(d);
}

static bdesc *child(bdesc *d, int name) {
  battr *a = d ? find(d, name) : NULL;
  return a && a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR && a->count ? *(bdesc **)a->data : NULL;
}

static int64_t int_attr(bdesc *d, int name, int64_t fallback) {
  battr *a = d ? find(d, name) : NULL;
  if (!a || !a->count) return fallback;
  return a->type == CUDNN_TYPE_INT64 ? *(int64_t *)a->data : *(int32_t *)a->data;
}

MAYA_EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                                       cudnnBackendDescriptor_t *out) {
  bdesc *d = calloc(1, sizeof *d);
  d->type = type;
  *out = (cudnnBackendDescriptor_t)d;
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc) {
  destroy((bdesc *)desc);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                                                   cudnnBackendAttributeType_t type, int64_t count, const void *data) {
  if (!desc || count < 0) return CUDNN_STATUS_BAD_PARAM;
  put((bdesc *)desc, name, type, count, data);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  ((bdesc *)desc)->finalized = 1;
  return CUDNN_STATUS_SUCCESS;
}

static void heuristic_result(bdesc *heur, bdesc *cfg) {
  cudnnBackendDescriptor_t engine;
  cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine);
  bdesc *graph = child(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
  int64_t index = 0;
  put((bdesc *)engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  put((bdesc *)engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &index);
  ((bdesc *)engine)->finalized = 1;
  put(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine);
  destroy((bdesc *)engine);
  cfg->finalized = 1;
}

MAYA_EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc,
                                                   cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                                   int64_t requested, int64_t *count, void *data) {
  bdesc *d = (bdesc *)desc;
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  battr *a = find(d, name);
  if (a) {
    int64_t n = a->count < requested ? a->count : requested;
    if (data && n > 0) memcpy(data, a->data, type_size(a->type) * (size_t)n);
    if (count) *count = a->count;
    return CUDNN_STATUS_SUCCESS;
  }
  int64_t zero = 0, one = 1;
  switch (name) {
  case CUDNN_ATTR_ENGINEHEUR_RESULTS:
    if (requested >= 1 && data) heuristic_result(d, ((bdesc **)data)[0]);
    if (count) *count = 1;
    return CUDNN_STATUS_SUCCESS;
  case CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT:
    if (data && requested) memcpy(data, &one, 8);
    if (count) *count = 1;
    return CUDNN_STATUS_SUCCESS;
  case CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE:
  case CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE:
  case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
    if (data && requested) memcpy(data, &zero, 8);
    if (count) *count = 1;
    return CUDNN_STATUS_SUCCESS;
  case CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED: {
    int32_t z = 0;
    if (data && requested) memcpy(data, type == CUDNN_TYPE_INT64 ? (void *)&zero : (void *)&z, type_size(type));
    if (count) *count = 1;
    return CUDNN_STATUS_SUCCESS;
  }
  case CUDNN_ATTR_ENGINE_KNOB_INFO:
  case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE:
  case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
  case CUDNN_ATTR_ENGINE_LAYOUT_INFO:
  case CUDNN_ATTR_ENGINECFG_INTERMEDIATE_INFO:
  case CUDNN_ATTR_ENGINECFG_KNOB_CHOICES:
  case CUDNN_ATTR_EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS:
  case CUDNN_ATTR_EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS:
    if (count) *count = 0;
    return CUDNN_STATUS_SUCCESS;
  case CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION: {
    static const char json[] = "{\"engine\": \"maya-emulated\"}";
    if (data && requested) snprintf(data, (size_t)requested, "%s", json);
    if (count) *count = (int64_t)sizeof json;
    return CUDNN_STATUS_SUCCESS;
  }
  default: {
    char what[96];
    snprintf(what, sizeof what, "cudnnBackendGetAttribute(attribute %d)", (int)name);
    maya_unimplemented(what, D_CUDNN);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  }
}

static int dims_of(bdesc *tensor, int64_t *dims, int max) {
  battr *a = tensor ? find(tensor, CUDNN_ATTR_TENSOR_DIMENSIONS) : NULL;
  if (!a) return 0;
  int n = a->count < max ? (int)a->count : max;
  memcpy(dims, a->data, sizeof(int64_t) * (size_t)n);
  return n;
}

static int cudnn_dtype(bdesc *tensor) {
  switch (int_attr(tensor, CUDNN_ATTR_TENSOR_DATA_TYPE, -1)) {
  case CUDNN_DATA_FLOAT: return T_F32;
  case CUDNN_DATA_HALF: return T_F16;
  case CUDNN_DATA_BFLOAT16: return T_BF16;
  case CUDNN_DATA_FP8_E4M3: return T_F8E4M3;
  case CUDNN_DATA_FP8_E5M2: return T_F8E5M2;
  default: return T_UNKNOWN;
  }
}

typedef struct {
  int matmuls, causal, backward;
  bdesc *first_matmul, *sdpa, *conv, *norm;
} graph_summary;

/* Walks an operation graph, and the score-modifier subgraph of a unified SDPA operation. */
static void summarize(bdesc *graph, graph_summary *s, int depth) {
  battr *ops = graph ? find(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS) : NULL;
  for (int64_t i = 0; ops && i < ops->count && depth < 4; i++) {
    bdesc *op = ((bdesc **)ops->data)[i];
    if (op->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR && !s->matmuls++) s->first_matmul = op;
    if (op->type == CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR) {
      s->sdpa = op;
      summarize(child(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH), s, depth + 1);
    }
    if (op->type == CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR) {
      s->sdpa = op;
      s->backward = 1;
    }
    if ((op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
         op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
         op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR) &&
        !s->conv)
      s->conv = op;
    if ((op->type == CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR ||
         op->type == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR) &&
        !s->norm)
      s->norm = op;
    if (op->type == CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR) s->causal = 1;
    if (op->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR &&
        int_attr(child(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR), CUDNN_ATTR_POINTWISE_MODE, -1) ==
            CUDNN_POINTWISE_GEN_INDEX)
      s->causal = 1;
  }
}

static int64_t product(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= dims[i];
  return p;
}

/* A convolution as the implicit GEMM its kernels compute, per group (batch = groups). Tensor dims
 * are logical NCHW / NCDHW: x [N, C, spatial...], w [K, C/groups, filter...], y [N, K, spatial...]. */
static void record_convolution(bdesc *conv, int64_t stream) {
  int64_t x[8] = {0}, w[8] = {0}, y[8] = {0};
  bdesc *xd, *wd, *yd;
  switch (conv->type) {
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    xd = child(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X);
    wd = child(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W);
    yd = child(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y);
    break;
  case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    xd = child(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX);
    wd = child(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W);
    yd = child(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY);
    break;
  default:
    xd = child(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X);
    wd = child(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW);
    yd = child(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY);
  }
  int nx = dims_of(xd, x, 8), nw = dims_of(wd, w, 8), ny = dims_of(yd, y, 8);
  int64_t groups = (nx >= 2 && nw >= 2 && w[1] > 0) ? x[1] / w[1] : 1;
  if (groups < 1) groups = 1;
  int64_t out_pixels = ny >= 2 ? y[0] * product(y, 2, ny) : 0; /* N * P * Q */
  int64_t in_pixels = nx >= 2 ? x[0] * product(x, 2, nx) : 0;  /* N * H * W */
  int64_t k_per_group = nw >= 1 ? w[0] / groups : 0;           /* output channels per group */
  int64_t crs = nw >= 2 ? product(w, 1, nw) : 0;               /* C/groups * R * S */
  int64_t krs = nw >= 2 ? k_per_group * product(w, 2, nw) : 0; /* K/groups * R * S */
  int64_t m, n, k;
  if (conv->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR) {
    m = out_pixels;
    n = k_per_group;
    k = crs;
  } else if (conv->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR) {
    m = in_pixels;
    n = nw >= 2 ? w[1] : 0;
    k = krs;
  } else {
    m = k_per_group;
    n = crs;
    k = out_pixels;
  }
  int dt = cudnn_dtype(xd);
  maya_record_gemm(API("cudnnBackendExecute"), D_CUDNN, stream, m, n, k, groups, 0, 0, dt, dt, dt, dt);
}

/* A normalization graph (Transformer Engine's layer norms with NVTE_NORM_FWD_USE_CUDNN / NVTE_NORM_BWD_USE_CUDNN): one
 * kernel named by its mode and direction ("cudnn_layer_norm_fwd", "cudnn_rms_norm_bwd"; a normalization by its
 * name) over the elements of its input X. */
static void record_norm(bdesc *norm, int64_t stream) {
  int backward = norm->type == CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR;
  int64_t mode = int_attr(norm, backward ? CUDNN_ATTR_OPERATION_NORM_BWD_MODE : CUDNN_ATTR_OPERATION_NORM_FWD_MODE, -1);
  int64_t x[8] = {0};
  int n =
      dims_of(child(norm, backward ? CUDNN_ATTR_OPERATION_NORM_BWD_XDESC : CUDNN_ATTR_OPERATION_NORM_FWD_XDESC), x, 8);
  const char *name = mode == CUDNN_RMS_NORM ? (backward ? "cudnn_rms_norm_bwd" : "cudnn_rms_norm_fwd")
                                            : (backward ? "cudnn_layer_norm_bwd" : "cudnn_layer_norm_fwd");
  record_kernel(API("cudnnBackendExecute"), stream, name, n ? product(x, 0, n) : 0);
}

MAYA_EXPORT cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                              cudnnBackendDescriptor_t pack) {
  bdesc *graph =
      child(child(child((bdesc *)plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG), CUDNN_ATTR_ENGINECFG_ENGINE),
            CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
  graph_summary g = {0};
  summarize(graph, &g, 0);
  int matmuls = g.matmuls, causal = g.causal, backward = g.backward;
  bdesc *first_matmul = g.first_matmul, *sdpa = g.sdpa;
  battr *ops = graph ? find(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS) : NULL;
  int64_t stream = maya_stream_id(((maya_cudnn *)handle)->stream);
  int64_t q[8] = {0}, k[8] = {0};
  if (g.norm && !sdpa && !matmuls) {
    record_norm(g.norm, stream);
  } else if (g.conv && !sdpa && !matmuls) {
    record_convolution(g.conv, stream);
  } else if (sdpa || matmuls >= 2) {
    if (sdpa) {
      dims_of(child(sdpa, backward ? CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC : CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC), q, 8);
      dims_of(child(sdpa, backward ? CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC : CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC), k, 8);
    } else { /* S = Q K^T: A is [b, h, s_q, d], B is [b, h, d, s_kv] */
      int64_t b[8] = {0};
      dims_of(child(first_matmul, CUDNN_ATTR_OPERATION_MATMUL_ADESC), q, 8);
      dims_of(child(first_matmul, CUDNN_ATTR_OPERATION_MATMUL_BDESC), b, 8);
      k[0] = b[0];
      k[1] = b[1];
      k[2] = b[3];
      k[3] = b[2];
      backward = matmuls > 2;
    }
    bdesc *qdesc =
        sdpa ? child(sdpa, backward ? CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC : CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC)
             : child(first_matmul, CUDNN_ATTR_OPERATION_MATMUL_ADESC);
    maya_rec *r = maya_begin(API("cudnnBackendExecute"), D_CUDNN, K_ATTN);
    r->stream = stream;
    r->a[0] = q[0];
    r->a[1] = q[1];
    r->a[2] = q[2];
    r->a[3] = k[2];
    r->a[4] = q[3];
    r->a[5] = causal | (backward << 1);
    r->a[6] = cudnn_dtype(qdesc);
    r->a[7] = k[1];
    maya_end(r, 0);
  } else if (matmuls == 1) { /* C[b, m, n] = A[b, m, k] B[b, k, n] */
    int64_t a[8] = {0}, b[8] = {0};
    int na = dims_of(child(first_matmul, CUDNN_ATTR_OPERATION_MATMUL_ADESC), a, 8);
    dims_of(child(first_matmul, CUDNN_ATTR_OPERATION_MATMUL_BDESC), b, 8);
    int dt = cudnn_dtype(child(first_matmul, CUDNN_ATTR_OPERATION_MATMUL_ADESC));
    maya_record_gemm(API("cudnnBackendExecute"), D_CUDNN, stream, na >= 2 ? a[na - 2] : 0, na >= 2 ? b[na - 1] : 0,
                     na >= 2 ? a[na - 1] : 0, na == 3 ? a[0] : 1, 0, 0, dt, dt, dt, dt);
  } else {
    maya_rec *r = maya_begin(API("cudnnBackendExecute"), D_CUDNN, K_PLAIN);
    r->stream = stream;
    r->a[0] = ops ? ops->count : 0;
    maya_end(r, 0);
  }
  (void)pack;
  return CUDNN_STATUS_SUCCESS;
}
