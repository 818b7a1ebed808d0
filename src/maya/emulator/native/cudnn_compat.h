/* Backend-API names that newer cuDNN 9 headers declare, for building the stub against an older
 * release's headers (torch 2.5 and 2.6 ship cuDNN 9.1, torch 2.7 9.5): each is defined as a value no
 * descriptor or attribute of that release carries, so the code that looks for it never matches and
 * graphs are read as that release builds them (attention as matmul and pointwise operations, no
 * unified SDPA operation). Guarded by the cuDNN version that added each name. */
#ifndef MAYA_CUDNN_COMPAT_H
#define MAYA_CUDNN_COMPAT_H
#include <cudnn.h>

#define MAYA_CUDNN_ABSENT_ATTR(n) ((cudnnBackendAttributeName_t)(-(n)))
#define MAYA_CUDNN_ABSENT_TYPE(n) ((cudnnBackendDescriptorType_t)(-(n)))

#if CUDNN_VERSION < 90200
#pragma GCC diagnostic ignored "-Wswitch" /* case labels of the absent names */
#define CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE MAYA_CUDNN_ABSENT_ATTR(1)
#define CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED MAYA_CUDNN_ABSENT_ATTR(2)
#endif
#if CUDNN_VERSION < 91300
#define CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR MAYA_CUDNN_ABSENT_TYPE(1)
#define CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC MAYA_CUDNN_ABSENT_ATTR(3)
#define CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC MAYA_CUDNN_ABSENT_ATTR(4)
#endif
#if CUDNN_VERSION < 91700
#define CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR MAYA_CUDNN_ABSENT_TYPE(2)
#define CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC MAYA_CUDNN_ABSENT_ATTR(5)
#define CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC MAYA_CUDNN_ABSENT_ATTR(6)
#endif
#if CUDNN_VERSION < 92000
#define CUDNN_BACKEND_OPERATION_DIAGONAL_BAND_MASK_DESCRIPTOR MAYA_CUDNN_ABSENT_TYPE(3)
#endif
#if CUDNN_VERSION < 92100
#define CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH MAYA_CUDNN_ABSENT_ATTR(7)
#endif
#endif
