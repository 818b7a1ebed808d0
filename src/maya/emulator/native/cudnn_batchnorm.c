/* cuDNN batch normalization (legacy API): torch runs fp32 / fp16 batch norm through cuDNN
 * (CUDNN_BATCHNORM_OPS_BN, no activation). Each call is one kernel over the input, named so that it
 * prices as normalization; the fused activation and add variants fail loudly. Statistics need a
 * little workspace (per-channel partial sums); with no activation there is no bitmask to reserve. */
#include "cudnn_legacy.h"

static cudnnStatus_t bn_check(cudnnBatchNormOps_t ops, const void *activation, const char *api) {
  if (ops == CUDNN_BATCHNORM_OPS_BN && !activation) return CUDNN_STATUS_SUCCESS;
  maya_unimplemented(api, D_CUDNN);
  return CUDNN_STATUS_NOT_SUPPORTED;
}

static size_t bn_workspace(cudnnBatchNormMode_t mode, const tensor_desc *x) {
  return mode == CUDNN_BATCHNORM_SPATIAL_PERSISTENT && x && x->nb >= 2 ? align256((size_t)x->dims[1] * 16) : 0;
}

/* One block per channel (per activation in PER_ACTIVATION mode), 512 threads. */
static void record_bn(int api, cudnnHandle_t handle, const char *name, cudnnBatchNormMode_t mode,
                      const tensor_desc *x) {
  int64_t per = mode == CUDNN_BATCHNORM_PER_ACTIVATION ? elements(x) / (x->nb ? x->dims[0] : 1) : x->dims[1];
  launch(api, handle_stream(handle), name, per, 512, elements(x));
}

MAYA_EXPORT cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x_desc,
    const cudnnTensorDescriptor_t z_desc, const cudnnTensorDescriptor_t y_desc,
    const cudnnTensorDescriptor_t scale_desc, const cudnnActivationDescriptor_t activation, size_t *bytes) {
  cudnnStatus_t s = bn_check(ops, activation, "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(activation)");
  if (s == CUDNN_STATUS_SUCCESS) *bytes = bn_workspace(mode, (const tensor_desc *)x_desc);
  return s;
}

MAYA_EXPORT cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const cudnnTensorDescriptor_t x_desc,
    const cudnnTensorDescriptor_t y_desc, const cudnnTensorDescriptor_t dy_desc, const cudnnTensorDescriptor_t dz_desc,
    const cudnnTensorDescriptor_t dx_desc, const cudnnTensorDescriptor_t scale_desc,
    const cudnnActivationDescriptor_t activation, size_t *bytes) {
  cudnnStatus_t s = bn_check(ops, activation, "cudnnGetBatchNormalizationBackwardExWorkspaceSize(activation)");
  if (s == CUDNN_STATUS_SUCCESS) *bytes = bn_workspace(mode, (const tensor_desc *)x_desc);
  return s;
}

MAYA_EXPORT cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops,
    const cudnnActivationDescriptor_t activation, const cudnnTensorDescriptor_t x_desc, size_t *bytes) {
  cudnnStatus_t s = bn_check(ops, activation, "cudnnGetBatchNormalizationTrainingExReserveSpaceSize(activation)");
  if (s == CUDNN_STATUS_SUCCESS) *bytes = 0;
  return s;
}

MAYA_EXPORT cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void *alpha, const void *beta,
    const cudnnTensorDescriptor_t x_desc, const void *x, const cudnnTensorDescriptor_t z_desc, const void *z,
    const cudnnTensorDescriptor_t y_desc, void *y, const cudnnTensorDescriptor_t scale_desc, const void *scale,
    const void *bias, double average_factor, void *running_mean, void *running_var, double epsilon, void *save_mean,
    void *save_inv_var, cudnnActivationDescriptor_t activation, void *work, size_t work_bytes, void *reserve,
    size_t reserve_bytes) {
  cudnnStatus_t s = bn_check(ops, activation, "cudnnBatchNormalizationForwardTrainingEx(activation)");
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!x_desc) return CUDNN_STATUS_BAD_PARAM;
  record_bn(API("cudnnBatchNormalizationForwardTrainingEx"), handle, "cudnn::batchnorm_fw_tr_1C11_kernel_NCHW", mode,
            (const tensor_desc *)x_desc);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t ops, const void *alpha_data,
    const void *beta_data, const void *alpha_param, const void *beta_param, const cudnnTensorDescriptor_t x_desc,
    const void *x, const cudnnTensorDescriptor_t y_desc, const void *y, const cudnnTensorDescriptor_t dy_desc,
    const void *dy, const cudnnTensorDescriptor_t dz_desc, void *dz, const cudnnTensorDescriptor_t dx_desc, void *dx,
    const cudnnTensorDescriptor_t scale_desc, const void *scale, const void *bias, void *dscale, void *dbias,
    double epsilon, const void *save_mean, const void *save_inv_var, cudnnActivationDescriptor_t activation, void *work,
    size_t work_bytes, void *reserve, size_t reserve_bytes) {
  cudnnStatus_t s = bn_check(ops, activation, "cudnnBatchNormalizationBackwardEx(activation)");
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!x_desc) return CUDNN_STATUS_BAD_PARAM;
  record_bn(API("cudnnBatchNormalizationBackwardEx"), handle, "cudnn::batchnorm_bw_1C11_kernel_new", mode,
            (const tensor_desc *)x_desc);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t handle, cudnnBatchNormMode_t mode,
                                                                  const void *alpha, const void *beta,
                                                                  const cudnnTensorDescriptor_t x_desc, const void *x,
                                                                  const cudnnTensorDescriptor_t y_desc, void *y,
                                                                  const cudnnTensorDescriptor_t scale_desc,
                                                                  const void *scale, const void *bias, const void *mean,
                                                                  const void *var, double epsilon) {
  if (!x_desc) return CUDNN_STATUS_BAD_PARAM;
  record_bn(API("cudnnBatchNormalizationForwardInference"), handle, "cudnn::batchnorm_fw_inf_1C11_kernel_NCHW", mode,
            (const tensor_desc *)x_desc);
  return CUDNN_STATUS_SUCCESS;
}
