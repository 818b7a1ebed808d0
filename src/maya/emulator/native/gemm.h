/* Recording GEMMs from cuBLAS and cuBLASLt calls (shared by both stubs). */
#ifndef MAYA_GEMM_H
#define MAYA_GEMM_H

#include <cublasLt.h>
#include <cublas_v2.h>

#include "maya_emu.h"

static inline int maya_cuda_dtype(cudaDataType t) {
  switch (t) {
  case CUDA_R_32F: return T_F32;
  case CUDA_R_16F: return T_F16;
  case CUDA_R_16BF: return T_BF16;
  case CUDA_R_64F: return T_F64;
  case CUDA_R_8I: return T_I8;
  case CUDA_R_32I: return T_I32;
  case CUDA_R_8U: return T_U8;
  case CUDA_R_8F_E4M3: return T_F8E4M3;
  case CUDA_R_8F_E5M2: return T_F8E5M2;
  default: return T_UNKNOWN;
  }
}

/* The arithmetic actually used: TF32 tensor cores count as their own type. */
static inline int maya_compute_dtype(cublasComputeType_t c, int fallback) {
  switch (c) {
  case CUBLAS_COMPUTE_16F:
  case CUBLAS_COMPUTE_16F_PEDANTIC: return T_F16;
  case CUBLAS_COMPUTE_32F:
  case CUBLAS_COMPUTE_32F_PEDANTIC: return fallback;
  case CUBLAS_COMPUTE_32F_FAST_TF32: return T_TF32;
  case CUBLAS_COMPUTE_32F_FAST_16F: return T_F16;
  case CUBLAS_COMPUTE_32F_FAST_16BF: return T_BF16;
  case CUBLAS_COMPUTE_64F:
  case CUBLAS_COMPUTE_64F_PEDANTIC: return T_F64;
  case CUBLAS_COMPUTE_32I:
  case CUBLAS_COMPUTE_32I_PEDANTIC: return T_I32;
  default: return T_UNKNOWN;
  }
}

static inline void maya_record_gemm(int api, int domain, int64_t stream, int64_t m, int64_t n, int64_t k, int64_t batch,
                                    int ta, int tb, int dta, int dtb, int dtc, int compute) {
  maya_rec *r = maya_begin(api, domain, K_GEMM);
  r->stream = stream;
  r->a[0] = m;
  r->a[1] = n;
  r->a[2] = k;
  r->a[3] = batch;
  r->a[4] = ta | (tb << 8);
  r->a[5] = (int64_t)dta | ((int64_t)dtb << 16) | ((int64_t)dtc << 32);
  r->a[6] = compute;
  maya_end(r, 0);
}

#endif
