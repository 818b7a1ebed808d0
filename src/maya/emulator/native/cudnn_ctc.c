/* cuDNN CTC loss (legacy API): torch's cuDNN CTC (fp32 log-probs [T, N, A], blank 0, int32
 * targets): costs and gradients in one call, recorded as one kernel with a block per sequence. The
 * workspace holds the forward and backward variables: T x N x (2 * labels + 1) floats each. */
#include "cudnn_legacy.h"

typedef struct {
  cudnnDataType_t dtype;
  cudnnLossNormalizationMode_t norm;
  int max_label;
} ctc_desc;

MAYA_EXPORT cudnnStatus_t cudnnCreateCTCLossDescriptor(cudnnCTCLossDescriptor_t *desc) {
  ctc_desc *d = calloc(1, sizeof *d);
  d->max_label = 255; /* cuDNN's limit, as torch documents it */
  *desc = (cudnnCTCLossDescriptor_t)d;
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnDestroyCTCLossDescriptor(cudnnCTCLossDescriptor_t desc) {
  free(desc);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnSetCTCLossDescriptorEx(cudnnCTCLossDescriptor_t desc, cudnnDataType_t dtype,
                                                      cudnnLossNormalizationMode_t norm, cudnnNanPropagation_t grad) {
  ctc_desc *d = (ctc_desc *)desc;
  if (!d) return CUDNN_STATUS_BAD_PARAM;
  d->dtype = dtype;
  d->norm = norm;
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnSetCTCLossDescriptor_v9(cudnnCTCLossDescriptor_t desc, cudnnDataType_t dtype,
                                                       cudnnLossNormalizationMode_t norm, cudnnCTCGradMode_t grad,
                                                       int max_label) {
  ctc_desc *d = (ctc_desc *)desc;
  if (!d || max_label <= 0) return CUDNN_STATUS_BAD_PARAM;
  d->dtype = dtype;
  d->norm = norm;
  d->max_label = max_label;
  return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t ctc_check(const tensor_desc *probs, const ctc_desc *d) {
  return probs && probs->nb == 3 && d && d->dtype == CUDNN_DATA_FLOAT ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

static size_t ctc_workspace(const tensor_desc *probs, int64_t labels) {
  return align256((size_t)(2 * (int64_t)probs->dims[0] * probs->dims[1] * (2 * labels + 1) * 4));
}

static int max_of(const int *v, int n) {
  int m = 0;
  for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static void record_ctc(int api, cudnnHandle_t handle, const tensor_desc *probs) {
  launch(api, handle_stream(handle), "cudnn::ctc_loss_alpha_beta_kernel", probs->dims[1], 256, elements(probs));
}

MAYA_EXPORT cudnnStatus_t cudnnGetCTCLossWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t probs_desc,
                                                       const cudnnTensorDescriptor_t grad_desc, const int *labels,
                                                       const int *label_lens, const int *input_lens,
                                                       cudnnCTCLossAlgo_t algo, cudnnCTCLossDescriptor_t desc,
                                                       size_t *bytes) {
  const tensor_desc *p = (const tensor_desc *)probs_desc;
  cudnnStatus_t s = ctc_check(p, (const ctc_desc *)desc);
  if (s != CUDNN_STATUS_SUCCESS || !label_lens) return CUDNN_STATUS_BAD_PARAM;
  *bytes = ctc_workspace(p, max_of(label_lens, p->dims[1]));
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnGetCTCLossWorkspaceSize_v8(cudnnHandle_t handle, cudnnCTCLossAlgo_t algo,
                                                          cudnnCTCLossDescriptor_t desc,
                                                          const cudnnTensorDescriptor_t probs_desc,
                                                          const cudnnTensorDescriptor_t grad_desc, size_t *bytes) {
  const tensor_desc *p = (const tensor_desc *)probs_desc;
  cudnnStatus_t s = ctc_check(p, (const ctc_desc *)desc);
  if (s == CUDNN_STATUS_SUCCESS) *bytes = ctc_workspace(p, ((const ctc_desc *)desc)->max_label);
  return s;
}

MAYA_EXPORT cudnnStatus_t cudnnCTCLoss(cudnnHandle_t handle, const cudnnTensorDescriptor_t probs_desc,
                                       const void *probs, const int labels[], const int label_lens[],
                                       const int input_lens[], void *costs, const cudnnTensorDescriptor_t grad_desc,
                                       void *grads, cudnnCTCLossAlgo_t algo, cudnnCTCLossDescriptor_t desc, void *work,
                                       size_t work_bytes) {
  cudnnStatus_t s = ctc_check((const tensor_desc *)probs_desc, (const ctc_desc *)desc);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  record_ctc(API("cudnnCTCLoss"), handle, (const tensor_desc *)probs_desc);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnCTCLoss_v8(cudnnHandle_t handle, cudnnCTCLossAlgo_t algo, cudnnCTCLossDescriptor_t desc,
                                          const cudnnTensorDescriptor_t probs_desc, const void *probs,
                                          const int labels[], const int label_lens[], const int input_lens[],
                                          void *costs, const cudnnTensorDescriptor_t grad_desc, void *grads,
                                          size_t work_bytes, void *work) {
  cudnnStatus_t s = ctc_check((const tensor_desc *)probs_desc, (const ctc_desc *)desc);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  record_ctc(API("cudnnCTCLoss_v8"), handle, (const tensor_desc *)probs_desc);
  return CUDNN_STATUS_SUCCESS;
}
