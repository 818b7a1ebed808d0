/* libcublasLt.so.13 stub: descriptors keep their attributes; a heuristic query answers one algorithm;
 * cublasLtMatmul records the GEMM (m, n, k, batch, transposes, types) from the descriptors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"

#define MAX_ATTR 64
#define ATTR_BYTES 16

typedef struct {
  unsigned char values[MAX_ATTR][ATTR_BYTES];
  int set[MAX_ATTR];
} attrs;

typedef struct {
  cublasComputeType_t compute;
  cudaDataType scale;
  attrs a;
} matmul_desc;

typedef struct {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
  attrs a;
} layout;

static cublasStatus_t set_attr(attrs *a, int attr, const void *buf, size_t size) {
  if (attr < 0 || attr >= MAX_ATTR) return CUBLAS_STATUS_INVALID_VALUE;
  memset(a->values[attr], 0, ATTR_BYTES);
  memcpy(a->values[attr], buf, size < ATTR_BYTES ? size : ATTR_BYTES);
  a->set[attr] = 1;
  return CUBLAS_STATUS_SUCCESS;
}

static int64_t get_int(const attrs *a, int attr, int64_t fallback) {
  if (!a->set[attr]) return fallback;
  int64_t v;
  memcpy(&v, a->values[attr], sizeof v);
  return v;
}

MAYA_EXPORT size_t cublasLtGetVersion(void) { return 130401; }

MAYA_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = (cublasLtHandle_t)calloc(1, 8);
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  free(h);
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                                    cudaDataType scale) {
  matmul_desc *m = calloc(1, sizeof *m);
  m->compute = compute;
  m->scale = scale;
  *d = (cublasLtMatmulDesc_t)m;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  free(d);
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                          const void *buf, size_t size) {
  return set_attr(&((matmul_desc *)d)->a, attr, buf, size);
}

MAYA_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                                      uint64_t cols, int64_t ld) {
  layout *m = calloc(1, sizeof *m);
  m->type = type;
  m->rows = rows;
  m->cols = cols;
  m->ld = ld;
  *l = (cublasLtMatrixLayout_t)m;
  return CUBLAS_STATUS_SUCCESS;
}

/* cuBLASLt's grouped GEMM (CUBLASLT_BATCH_MODE_GROUPED, cuBLASLt 13.3+: Transformer Engine's te.ops.GroupedLinear on
 * Hopper and Blackwell) reads each group's rows, columns and leading dimension from device arrays, which the caller
 * fills with a kernel (TE computes them from the split sizes on the GPU): a virtual GPU holds no values there, so no
 * group's shape can be known. It fails, saying so. */
static cublasStatus_t grouped_layout(const char *name) {
  fprintf(stderr,
          "maya emulator: %s: cuBLASLt's grouped GEMM reads every group's shape from device arrays a kernel "
          "wrote, which a virtual GPU has no values for; not emulated (Transformer Engine's te.GroupedLinear module "
          "runs: it issues one GEMM per group from host split sizes)\n",
          name);
  maya_unimplemented(name, D_CUBLASLT);
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

MAYA_EXPORT cublasStatus_t cublasLtGroupedMatrixLayoutInit_internal(cublasLtMatrixLayout_t l, size_t size,
                                                                    cudaDataType type, int groups, const void *rows,
                                                                    const void *cols, const void *ld) {
  return grouped_layout("cublasLtGroupedMatrixLayoutInit_internal");
}

MAYA_EXPORT cublasStatus_t cublasLtGroupedMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, int groups,
                                                             const void *rows, const void *cols, const void *ld) {
  return grouped_layout("cublasLtGroupedMatrixLayoutCreate");
}

MAYA_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  free(l);
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                            cublasLtMatrixLayoutAttribute_t attr, const void *buf,
                                                            size_t size) {
  return set_attr(&((layout *)l)->a, attr, buf, size);
}

MAYA_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = (cublasLtMatmulPreference_t)calloc(1, sizeof(attrs));
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  free(p);
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                cublasLtMatmulPreferenceAttributes_t attr,
                                                                const void *buf, size_t size) {
  return set_attr((attrs *)p, attr, buf, size);
}

/* One algorithm, needing no workspace, as a real heuristic would return for a supported problem. */
MAYA_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                          cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                                          cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                          cublasLtMatmulPreference_t p, int requested,
                                                          cublasLtMatmulHeuristicResult_t results[], int *returned) {
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = 1;
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatmulAlgoInit(cublasLtHandle_t h, cublasComputeType_t c, cudaDataType s,
                                                  cudaDataType a, cudaDataType b, cudaDataType cc, cudaDataType d,
                                                  int id, cublasLtMatmulAlgo_t *algo) {
  memset(algo, 0, sizeof *algo);
  algo->data[0] = (uint64_t)id;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                                   cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                                   cublasLtMatrixLayout_t D, const cublasLtMatmulAlgo_t *algo,
                                                   cublasLtMatmulHeuristicResult_t *result) {
  memset(result, 0, sizeof *result);
  result->algo = *algo;
  result->state = CUBLAS_STATUS_SUCCESS;
  result->wavesCount = 1.0f;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t *algo,
                                                                cublasLtMatmulAlgoConfigAttributes_t attr,
                                                                const void *buf, size_t size) {
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *algo,
                                                                cublasLtMatmulAlgoConfigAttributes_t attr, void *buf,
                                                                size_t size, size_t *written) {
  memset(buf, 0, size);
  if (written) *written = size;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha,
                                          const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                                          cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                                          cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                                          const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_size,
                                          cudaStream_t stream) {
  const matmul_desc *md = (const matmul_desc *)desc;
  const layout *a = (const layout *)Adesc, *b = (const layout *)Bdesc, *d = (const layout *)Ddesc;
  int ta = get_int(&md->a, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_N) != CUBLAS_OP_N;
  int tb = get_int(&md->a, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N) != CUBLAS_OP_N;
  int64_t m = (int64_t)d->rows, n = (int64_t)d->cols, k = (int64_t)(ta ? a->rows : a->cols);
  int64_t batch = get_int(&d->a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 1) & 0xffffffff;
  int dt_a = maya_cuda_dtype(a->type);
  maya_record_gemm(API("cublasLtMatmul"), D_CUBLASLT, maya_stream_id(stream), m, n, k, batch ? batch : 1, ta, tb, dt_a,
                   maya_cuda_dtype(b->type), maya_cuda_dtype(d->type), maya_compute_dtype(md->compute, dt_a));
  return CUBLAS_STATUS_SUCCESS;
}
