/* What the files of cuDNN's legacy API share (libcudnn.so.9; hidden from its users by the stub's
 * -fvisibility=hidden): the tensor descriptor, and recording a cuDNN-internal kernel. The API itself:
 * cudnn_legacy.c (shared helpers, tensor descriptors), cudnn_rnn.c (dropout and RNN descriptors, the
 * RNN size queries, weight layout and compute), cudnn_batchnorm.c, cudnn_ctc.c, cudnn_spatial.c. */
#ifndef MAYA_CUDNN_LEGACY_H
#define MAYA_CUDNN_LEGACY_H
#include <cudnn.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "maya_emu.h"

#define MAX_DIMS 8

typedef struct {
  cudnnDataType_t dtype;
  int nb, dims[MAX_DIMS], strides[MAX_DIMS];
} tensor_desc;

int64_t handle_stream(cudnnHandle_t handle);
size_t dtype_bytes(cudnnDataType_t t);
int maya_dtype(cudnnDataType_t t); /* T_* of maya_emu.h */
int64_t elements(const tensor_desc *t);
void launch(int api, int64_t stream, const char *name, int64_t blocks, int threads, int64_t elements);
void record_kernel(int api, int64_t stream, const char *name, int64_t elements);
static inline size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

#endif
