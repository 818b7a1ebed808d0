/* cuDNN spatial transformer (legacy API): grid_sample(align_corners=True) and the affine grid
 * generator: bilinear sampling of a 4-D NCHW tensor. Each call is one kernel with a thread per
 * output element (per grid point for the grid generator). */
#include "cudnn_legacy.h"

typedef struct {
  cudnnDataType_t dtype;
  int dims[4]; /* output N, C, H, W */
} spatial_desc;

MAYA_EXPORT cudnnStatus_t cudnnCreateSpatialTransformerDescriptor(cudnnSpatialTransformerDescriptor_t *desc) {
  *desc = (cudnnSpatialTransformerDescriptor_t)calloc(1, sizeof(spatial_desc));
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnDestroySpatialTransformerDescriptor(cudnnSpatialTransformerDescriptor_t desc) {
  free(desc);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnSetSpatialTransformerNdDescriptor(cudnnSpatialTransformerDescriptor_t desc,
                                                                 cudnnSamplerType_t sampler, cudnnDataType_t dtype,
                                                                 const int nb, const int dims[]) {
  spatial_desc *d = (spatial_desc *)desc;
  if (!d || sampler != CUDNN_SAMPLER_BILINEAR || nb != 4) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < 4; i++)
    if (dims[i] <= 0) return CUDNN_STATUS_BAD_PARAM;
  d->dtype = dtype;
  memcpy(d->dims, dims, sizeof d->dims);
  return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t spatial_kernel(int api, cudnnHandle_t handle, cudnnSpatialTransformerDescriptor_t desc,
                                    const char *name, int per_channel) {
  const spatial_desc *d = (const spatial_desc *)desc;
  if (!d || !d->dims[0]) return CUDNN_STATUS_BAD_PARAM;
  record_kernel(api, handle_stream(handle), name,
                (int64_t)d->dims[0] * d->dims[2] * d->dims[3] * (per_channel ? d->dims[1] : 1));
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnSpatialTfGridGeneratorForward(cudnnHandle_t handle,
                                                             const cudnnSpatialTransformerDescriptor_t desc,
                                                             const void *theta, void *grid) {
  return spatial_kernel(API("cudnnSpatialTfGridGeneratorForward"), handle, desc,
                        "cudnn::spatialTf_grid_generator_fw_kernel", 0);
}

MAYA_EXPORT cudnnStatus_t cudnnSpatialTfGridGeneratorBackward(cudnnHandle_t handle,
                                                              const cudnnSpatialTransformerDescriptor_t desc,
                                                              const void *dgrid, void *dtheta) {
  return spatial_kernel(API("cudnnSpatialTfGridGeneratorBackward"), handle, desc,
                        "cudnn::spatialTf_grid_generator_bw_kernel", 0);
}

MAYA_EXPORT cudnnStatus_t cudnnSpatialTfSamplerForward(cudnnHandle_t handle, cudnnSpatialTransformerDescriptor_t desc,
                                                       const void *alpha, const cudnnTensorDescriptor_t x_desc,
                                                       const void *x, const void *grid, const void *beta,
                                                       cudnnTensorDescriptor_t y_desc, void *y) {
  return spatial_kernel(API("cudnnSpatialTfSamplerForward"), handle, desc, "cudnn::spatialTf_sampler_fw_kernel", 1);
}

MAYA_EXPORT cudnnStatus_t cudnnSpatialTfSamplerBackward(cudnnHandle_t handle, cudnnSpatialTransformerDescriptor_t desc,
                                                        const void *alpha, const cudnnTensorDescriptor_t x_desc,
                                                        const void *x, const void *beta,
                                                        const cudnnTensorDescriptor_t dx_desc, void *dx,
                                                        const void *alpha_dgrid, const cudnnTensorDescriptor_t dy_desc,
                                                        const void *dy, const void *grid, const void *beta_dgrid,
                                                        void *dgrid) {
  return spatial_kernel(API("cudnnSpatialTfSamplerBackward"), handle, desc, "cudnn::spatialTf_sampler_bw_kernel", 1);
}
