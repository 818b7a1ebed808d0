/* cuDNN's legacy (pre-graph) API, as torch calls it: the helpers its op families share and tensor
 * descriptors. Descriptors keep their configuration; unsupported modes fail loudly. The op families
 * are cudnn_rnn.c (nn.LSTM / nn.GRU / nn.RNN), cudnn_batchnorm.c, cudnn_ctc.c and cudnn_spatial.c. */
#include "cudnn_legacy.h"

/* ------------------------------------------------------------------ shared helpers */

int64_t handle_stream(cudnnHandle_t handle) {
  cudaStream_t s = NULL;
  cudnnGetStream(handle, &s);
  return maya_stream_id(s);
}

size_t dtype_bytes(cudnnDataType_t t) {
  switch (t) {
  case CUDNN_DATA_DOUBLE:
  case CUDNN_DATA_INT64: return 8;
  case CUDNN_DATA_HALF:
  case CUDNN_DATA_BFLOAT16: return 2;
  case CUDNN_DATA_INT8:
  case CUDNN_DATA_UINT8:
  case CUDNN_DATA_BOOLEAN:
  case CUDNN_DATA_FP8_E4M3:
  case CUDNN_DATA_FP8_E5M2: return 1;
  default: return 4;
  }
}

int maya_dtype(cudnnDataType_t t) {
  switch (t) {
  case CUDNN_DATA_FLOAT: return T_F32;
  case CUDNN_DATA_HALF: return T_F16;
  case CUDNN_DATA_BFLOAT16: return T_BF16;
  case CUDNN_DATA_DOUBLE: return T_F64;
  default: return T_UNKNOWN;
  }
}

/* A launch of a cuDNN-internal kernel (no host stub: named by the library) over `elements` elements
 * (a[7]: the trace's `args.elements`, what prices it; the enclosing aten op's shapes describe the
 * whole call, e.g. all time steps of an RNN, not one launch). */
void launch(int api, int64_t stream, const char *name, int64_t blocks, int threads, int64_t elements) {
  maya_rec *r = maya_begin(api, D_CUDNN, K_LAUNCH);
  r->stream = stream;
  r->a[0] = maya_kernel_id_by_name(name);
  r->a[1] = blocks > 0 ? blocks : 1;
  r->a[2] = 1;
  r->a[3] = threads;
  r->a[4] = 1;
  r->a[7] = elements;
  maya_end(r, 0);
}

/* A kernel over `elements` elements, one thread each, 256 per block. */
void record_kernel(int api, int64_t stream, const char *name, int64_t elements) {
  launch(api, stream, name, (elements + 255) / 256, 256, elements);
}

/* Elements of a tensor (0 for an unset descriptor). */
int64_t elements(const tensor_desc *t) {
  int64_t n = t && t->nb ? 1 : 0;
  for (int i = 0; t && i < t->nb; i++) n *= t->dims[i];
  return n;
}

/* ------------------------------------------------------------------ tensor descriptors */

MAYA_EXPORT cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *desc) {
  *desc = (cudnnTensorDescriptor_t)calloc(1, sizeof(tensor_desc));
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  free(desc);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t desc, cudnnDataType_t dtype, int nb,
                                                     const int dims[], const int strides[]) {
  tensor_desc *t = (tensor_desc *)desc;
  if (!t || nb < 1 || nb > MAX_DIMS) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < nb; i++)
    if (dims[i] <= 0 || strides[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  t->dtype = dtype;
  t->nb = nb;
  memcpy(t->dims, dims, sizeof(int) * (size_t)nb);
  memcpy(t->strides, strides, sizeof(int) * (size_t)nb);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t desc, int requested,
                                                     cudnnDataType_t *dtype, int *nb, int dims[], int strides[]) {
  const tensor_desc *t = (const tensor_desc *)desc;
  if (!t) return CUDNN_STATUS_BAD_PARAM;
  if (dtype) *dtype = t->dtype;
  if (nb) *nb = t->nb;
  for (int i = 0; i < requested && i < t->nb; i++) {
    if (dims) dims[i] = t->dims[i];
    if (strides) strides[i] = t->strides[i];
  }
  return CUDNN_STATUS_SUCCESS;
}
