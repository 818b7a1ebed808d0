/* libcuda.so.1 stub: TMA tensor maps (cuTensorMapEncodeTiled), which Triton's launcher and CUTLASS kernels
 * (torch's grouped GEMM) build on the host before launching a kernel that takes one by value.
 *
 * The arguments are checked as the CUDA driver API documents them (cuda.h, cuTensorMapEncodeTiled): a
 * violation returns CUDA_ERROR_INVALID_VALUE, as the driver does, with a line on stderr naming it. A valid
 * map is filled deterministically with what describes the region (layout below), so a reader of the
 * kernel's arguments could size its traffic; a real driver's encoding is opaque and not reproduced. */
#include <cuda.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "maya_emu.h"

/* The emulated map's layout, 16 quad-words:
 *   [0] MAYA_TMA_MAGIC   [1] global address
 *   [2] data type | rank << 8 | interleave << 16 | swizzle << 24 | L2 promotion << 32 | OOB fill << 40
 *   [3..7] global dims (elements)   [8..11] global strides (bytes) of dims 1..rank-1
 *   [12] box dims 0..3, 16 bits each   [13] box dim 4 | element strides << 16 (4 bits each)
 *   [14] bytes of one element (0 for the packed sub-byte types)   [15] 0 */
#define MAYA_TMA_MAGIC 0x31414d5441594d41ull /* "AMYATMA1" */
#define MAX_RANK 5

/* enum ranges of CUDA 13's cuda.h (numeric: older headers name fewer of them) */
#define LAST_DATA_TYPE 15 /* CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B */
#define LAST_SWIZZLE 6    /* CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B */
#define INTERLEAVE_32B 2
#define LAST_L2_PROMOTION 3
#define LAST_OOB_FILL 1
#define T_16U4_ALIGN8B 13
#define T_16U4_ALIGN16B 14
#define T_16U6_ALIGN16B 15

/* bytes of one element; 0 for the packed sub-byte types */
static unsigned element_bytes(int t) {
  static const unsigned size[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  return t >= 0 && t < (int)(sizeof size / sizeof *size) ? size[t] : 0;
}

static CUresult invalid(const char *api, const char *fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  fprintf(stderr, "maya emulator: %s: CUDA_ERROR_INVALID_VALUE: %s\n", api, why);
  return CUDA_ERROR_INVALID_VALUE;
}

static CUresult check_tiled(const CUtensorMap *map, int type, cuuint32_t rank, const void *address,
                            const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                            const cuuint32_t *elem_strides, int interleave, int swizzle, int l2, int oob) {
  const char *api = "cuTensorMapEncodeTiled";
  if (!map) return invalid(api, "tensorMap is NULL");
  if ((uintptr_t)map % 64) return invalid(api, "tensorMap %p is not aligned to 64 bytes", (const void *)map);
  if (type < 0 || type > LAST_DATA_TYPE) return invalid(api, "tensorDataType %d is not a CUtensorMapDataType", type);
  if (interleave < 0 || interleave > INTERLEAVE_32B)
    return invalid(api, "interleave %d is not a CUtensorMapInterleave", interleave);
  if (swizzle < 0 || swizzle > LAST_SWIZZLE) return invalid(api, "swizzle %d is not a CUtensorMapSwizzle", swizzle);
  if (l2 < 0 || l2 > LAST_L2_PROMOTION) return invalid(api, "l2Promotion %d is not a CUtensorMapL2promotion", l2);
  if (oob < 0 || oob > LAST_OOB_FILL) return invalid(api, "oobFill %d is not a CUtensorMapFloatOOBfill", oob);
  if (rank < 1 || rank > MAX_RANK) return invalid(api, "tensorRank %u is not in 1..5", rank);
  if (interleave && rank < 3) return invalid(api, "tensorRank %u < 3 with an interleaved layout", rank);
  int packed16 = type == T_16U4_ALIGN16B || type == T_16U6_ALIGN16B;
  unsigned align = interleave == INTERLEAVE_32B || packed16 ? 32 : 16;
  if (!address) return invalid(api, "globalAddress is NULL");
  if ((uintptr_t)address % align) return invalid(api, "globalAddress %p is not aligned to %u bytes", address, align);
  if (!dims || !box || !elem_strides || (rank > 1 && !strides))
    return invalid(api, "a NULL globalDim, globalStrides, boxDim or elementStrides array");
  for (cuuint32_t i = 0; i < rank; i++)
    if (dims[i] == 0 || dims[i] > (1ull << 32))
      return invalid(api, "globalDim[%u] = %llu is not in 1..2^32", i, (unsigned long long)dims[i]);
  if (packed16 && dims[0] % 128)
    return invalid(api, "globalDim[0] = %llu is not a multiple of 128 for a packed type", (unsigned long long)dims[0]);
  if (type == T_16U4_ALIGN8B && dims[0] % 2)
    return invalid(api, "globalDim[0] = %llu is not even for 16U4_ALIGN8B", (unsigned long long)dims[0]);
  unsigned stride_mult = interleave == INTERLEAVE_32B || packed16 ? 32 : 16;
  for (cuuint32_t i = 0; i + 1 < rank; i++) {
    if (strides[i] % stride_mult)
      return invalid(api, "globalStrides[%u] = %llu is not a multiple of %u", i, (unsigned long long)strides[i],
                     stride_mult);
    if (strides[i] >= (1ull << 40))
      return invalid(api, "globalStrides[%u] = %llu is not below 2^40", i, (unsigned long long)strides[i]);
  }
  unsigned esize = element_bytes(type);
  for (cuuint32_t i = 0; i < rank; i++) {
    if (box[i] == 0 || box[i] > 256) return invalid(api, "boxDim[%u] = %u is not in 1..256", i, box[i]);
    if (elem_strides[i] == 0 || elem_strides[i] > 8)
      return invalid(api, "elementStrides[%u] = %u is not in 1..8", i, elem_strides[i]);
  }
  if (packed16 && box[0] != 128) return invalid(api, "boxDim[0] = %u is not 128 for a packed type", box[0]);
  if (!interleave && esize) {
    unsigned inner = box[0] * esize;
    if (inner % 16) return invalid(api, "boxDim[0] * element size = %u bytes is not a multiple of 16", inner);
    unsigned limit = swizzle == 1 ? 32 : swizzle == 2 ? 64 : swizzle >= 3 ? 128 : 0;
    if (limit && inner > limit)
      return invalid(api, "the box's inner dimension (%u bytes) exceeds the swizzle span (%u bytes)", inner, limit);
  }
  if (interleave == INTERLEAVE_32B && swizzle != 1)
    return invalid(api, "interleave 32B needs swizzle 32B, got %d", swizzle);
  if (type == T_16U6_ALIGN16B && interleave) return invalid(api, "16U6_ALIGN16B needs no interleave");
  if (oob && (type <= 5 || type >= T_16U4_ALIGN8B))
    return invalid(api, "oobFill NaN needs a floating-point tensorDataType, got %d", type);
  return CUDA_SUCCESS;
}

MAYA_EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, void *address,
                                            const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                                            const cuuint32_t *elem_strides, CUtensorMapInterleave interleave,
                                            CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2,
                                            CUtensorMapFloatOOBfill oob) {
  maya_rec *r = maya_begin(API("cuTensorMapEncodeTiled"), D_DRIVER, K_PLAIN);
  CUresult e = check_tiled(map, (int)type, rank, address, dims, strides, box, elem_strides, (int)interleave,
                           (int)swizzle, (int)l2, (int)oob);
  if (e == CUDA_SUCCESS) {
    cuuint64_t *q = map->opaque;
    memset(q, 0, sizeof map->opaque);
    q[0] = MAYA_TMA_MAGIC;
    q[1] = (cuuint64_t)(uintptr_t)address;
    q[2] = (cuuint64_t)type | (cuuint64_t)rank << 8 | (cuuint64_t)interleave << 16 | (cuuint64_t)swizzle << 24 |
           (cuuint64_t)l2 << 32 | (cuuint64_t)oob << 40;
    for (cuuint32_t i = 0; i < rank; i++) {
      q[3 + i] = dims[i];
      if (i + 1 < rank) q[8 + i] = strides[i];
      if (i < 4)
        q[12] |= (cuuint64_t)box[i] << (16 * i);
      else
        q[13] |= box[i];
      q[13] |= (cuuint64_t)elem_strides[i] << (16 + 4 * i);
    }
    q[14] = element_bytes((int)type);
  }
  maya_end(r, (int)e);
  return e;
}
