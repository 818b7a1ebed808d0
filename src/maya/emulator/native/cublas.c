/* libcublas.so.13 stub: handles and the GEMM family torch uses; the rest fails loudly (generated). */
#include <stdlib.h>
#include <string.h>

#include "gemm.h"

typedef struct {
  const void *stream;
  cublasMath_t math;
  cublasPointerMode_t pointer_mode;
  int device;
} maya_cublas;

#define H ((maya_cublas *)handle)
#define T(op) ((op) != CUBLAS_OP_N)

MAYA_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  maya_cublas *h = calloc(1, sizeof *h);
  h->device = maya_current_device();
  *handle = (cublasHandle_t)h;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  free(handle);
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t s) {
  H->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *s) {
  *s = (cudaStream_t)H->stream;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *ws, size_t size) {
  (void)handle;
  (void)ws;
  (void)size;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  H->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
  *mode = H->math;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  H->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode) {
  *mode = H->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasSetSmCountTarget(cublasHandle_t handle, int count) {
  (void)handle;
  (void)count;
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT const char *cublasGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS         ? "CUBLAS_STATUS_SUCCESS"
         : s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED (not emulated by Maya)"
                                            : "CUBLAS_STATUS_INTERNAL_ERROR";
}

MAYA_EXPORT const char *cublasGetStatusName(cublasStatus_t s) { return cublasGetStatusString(s); }

/* fp32 math uses TF32 tensor cores when the handle allows it */
static int f32_compute(cublasHandle_t handle) { return (H->math & CUBLAS_TF32_TENSOR_OP_MATH) ? T_TF32 : T_F32; }

#define TYPED_GEMM(fn, T_, dtype, compute_expr)                                                                        \
  MAYA_EXPORT cublasStatus_t fn(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,       \
                                int k, const T_ *alpha, const T_ *A, int lda, const T_ *B, int ldb, const T_ *beta,    \
                                T_ *C, int ldc) {                                                                      \
    maya_record_gemm(API(#fn), D_CUBLAS, maya_stream_id(H->stream), m, n, k, 1, T(ta), T(tb), dtype, dtype, dtype,     \
                     compute_expr);                                                                                    \
    return CUBLAS_STATUS_SUCCESS;                                                                                      \
  }

TYPED_GEMM(cublasSgemm_v2, float, T_F32, f32_compute(handle))
TYPED_GEMM(cublasDgemm_v2, double, T_F64, T_F64)

#define TYPED_GEMM_STRIDED(fn, T_, dtype, compute_expr)                                                                \
  MAYA_EXPORT cublasStatus_t fn(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,       \
                                int k, const T_ *alpha, const T_ *A, int lda, long long sa, const T_ *B, int ldb,      \
                                long long sb, const T_ *beta, T_ *C, int ldc, long long sc, int batch) {               \
    maya_record_gemm(API(#fn), D_CUBLAS, maya_stream_id(H->stream), m, n, k, batch, T(ta), T(tb), dtype, dtype, dtype, \
                     compute_expr);                                                                                    \
    return CUBLAS_STATUS_SUCCESS;                                                                                      \
  }

TYPED_GEMM_STRIDED(cublasSgemmStridedBatched, float, T_F32, f32_compute(handle))
TYPED_GEMM_STRIDED(cublasDgemmStridedBatched, double, T_F64, T_F64)

MAYA_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                        int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                        const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
                                        cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  maya_record_gemm(API("cublasGemmEx"), D_CUBLAS, maya_stream_id(H->stream), m, n, k, 1, T(ta), T(tb),
                   maya_cuda_dtype(at), maya_cuda_dtype(bt), maya_cuda_dtype(ct),
                   maya_compute_dtype(compute, maya_cuda_dtype(at)));
  return CUBLAS_STATUS_SUCCESS;
}

MAYA_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                                                      int m, int n, int k, const void *alpha, const void *A,
                                                      cudaDataType at, int lda, long long sa, const void *B,
                                                      cudaDataType bt, int ldb, long long sb, const void *beta, void *C,
                                                      cudaDataType ct, int ldc, long long sc, int batch,
                                                      cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  maya_record_gemm(API("cublasGemmStridedBatchedEx"), D_CUBLAS, maya_stream_id(H->stream), m, n, k, batch, T(ta), T(tb),
                   maya_cuda_dtype(at), maya_cuda_dtype(bt), maya_cuda_dtype(ct),
                   maya_compute_dtype(compute, maya_cuda_dtype(at)));
  return CUBLAS_STATUS_SUCCESS;
}

/* matrix-vector products are recorded as GEMMs with n = 1 */
#define TYPED_GEMV(fn, T_, dtype)                                                                                      \
  MAYA_EXPORT cublasStatus_t fn(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const T_ *alpha,         \
                                const T_ *A, int lda, const T_ *x, int incx, const T_ *beta, T_ *y, int incy) {        \
    int t = T(trans);                                                                                                  \
    maya_record_gemm(API(#fn), D_CUBLAS, maya_stream_id(H->stream), t ? n : m, 1, t ? m : n, 1, t, 0, dtype, dtype,    \
                     dtype, dtype);                                                                                    \
    return CUBLAS_STATUS_SUCCESS;                                                                                      \
  }

TYPED_GEMV(cublasSgemv_v2, float, T_F32)
TYPED_GEMV(cublasDgemv_v2, double, T_F64)

/* dot products are recorded as GEMMs of one row by one column (m = n = 1, k = the vectors' length); a result the
 * host asked for (host pointer mode) is a value only a GPU computes, and reads 0 */
static void record_dot(int api, cublasHandle_t handle, int n, int dtype, void *result, size_t bytes) {
  maya_record_gemm(api, D_CUBLAS, maya_stream_id(H->stream), 1, 1, n, 1, 0, 0, dtype, dtype, dtype, dtype);
  if (H->pointer_mode == CUBLAS_POINTER_MODE_HOST && result) memset(result, 0, bytes);
}

#define TYPED_DOT(fn, T_, dtype)                                                                                       \
  MAYA_EXPORT cublasStatus_t fn(cublasHandle_t handle, int n, const T_ *x, int incx, const T_ *y, int incy,            \
                                T_ *result) {                                                                          \
    record_dot(API(#fn), handle, n, dtype, result, sizeof(T_));                                                        \
    return CUBLAS_STATUS_SUCCESS;                                                                                      \
  }

TYPED_DOT(cublasSdot_v2, float, T_F32)
TYPED_DOT(cublasDdot_v2, double, T_F64)

/* the bytes of a dot product's result type; 0: a type cublasDotEx does not take */
static size_t cuda_dtype_bytes(cudaDataType t) {
  switch (t) {
  case CUDA_R_16F:
  case CUDA_R_16BF: return 2;
  case CUDA_R_32F: return 4;
  case CUDA_R_64F:
  case CUDA_C_32F: return 8;
  case CUDA_C_64F: return 16;
  default: return 0;
  }
}

MAYA_EXPORT cublasStatus_t cublasDotEx(cublasHandle_t handle, int n, const void *x, cudaDataType xt, int incx,
                                       const void *y, cudaDataType yt, int incy, void *result, cudaDataType rt,
                                       cudaDataType exec) {
  if (!cuda_dtype_bytes(xt) || !cuda_dtype_bytes(yt) || !cuda_dtype_bytes(rt) || !cuda_dtype_bytes(exec))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  record_dot(API("cublasDotEx"), handle, n, maya_cuda_dtype(xt), result, cuda_dtype_bytes(rt));
  return CUBLAS_STATUS_SUCCESS;
}
