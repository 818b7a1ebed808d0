/* cuDNN's legacy RNN API, as torch calls it for nn.LSTM / nn.GRU / nn.RNN: dropout, RNN and RNN-data
 * descriptors, the RNN size queries and weight layout, RNNForward / RNNBackwardData_v8 /
 * RNNBackwardWeights_v8.
 *
 * The RNN weight space is laid out as cuDNN lays it out: per pseudo-layer (layer * directions +
 * direction), the input matrices of every gate [hidden, input], the recurrent matrices [hidden, proj],
 * the input biases, the recurrent biases, then the LSTM projection [proj, hidden]. Compute calls
 * record the work of the standard algorithm, per layer and direction: the input projection as one
 * GEMM over all tokens, then per timestep the recurrent GEMM over the sequences still running and the
 * pointwise cell kernel (plus the projection GEMM); backward data runs the steps in reverse and then
 * the input-gradient GEMM; backward weights is one GEMM per weight matrix over all tokens and a bias
 * reduction. GEMMs follow the graph-API convolution's convention: m rows of the result, n its
 * columns, k the reduction. */
#include "cudnn_legacy.h"

typedef struct {
  float p;
  void *states;
  size_t state_bytes;
} dropout_desc;

typedef struct {
  cudnnRNNAlgo_t algo;
  cudnnRNNMode_t mode;
  cudnnRNNBiasMode_t bias;
  cudnnDirectionMode_t dir;
  cudnnDataType_t dtype;
  cudnnMathType_t math;
  int64_t input, hidden, proj, layers;
  float dropout;
} rnn_desc;

typedef struct {
  cudnnDataType_t dtype;
  int max_seq, batch, vec;
  int *seq_lens; /* [batch] */
} rnn_data_desc;

/* A packed [rows, cols] matrix (or [rows] vector when cols is 0) inside a weight space, as 3-D. */
static void set_matrix(tensor_desc *t, cudnnDataType_t dtype, int64_t rows, int64_t cols) {
  if (!t) return;
  int64_t c = cols ? cols : 1;
  t->dtype = dtype;
  t->nb = 3;
  t->dims[0] = 1;
  t->dims[1] = (int)rows;
  t->dims[2] = (int)c;
  t->strides[0] = (int)(rows * c);
  t->strides[1] = (int)c;
  t->strides[2] = 1;
}

/* ------------------------------------------------------------------ dropout descriptors */

MAYA_EXPORT cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t *desc) {
  *desc = (cudnnDropoutDescriptor_t)calloc(1, sizeof(dropout_desc));
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t desc) {
  free(desc);
  return CUDNN_STATUS_SUCCESS;
}

/* One XORWOW generator state (48 bytes) for each of 512 threads per SM. */
MAYA_EXPORT cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t handle, size_t *bytes) {
  if (!handle || !bytes) return CUDNN_STATUS_BAD_PARAM;
  *bytes = (size_t)maya_dev[maya_current_device()].sm_count * 512 * 48;
  return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t set_dropout(cudnnDropoutDescriptor_t desc, float p, void *states, size_t bytes) {
  dropout_desc *d = (dropout_desc *)desc;
  if (!d || p < 0 || p > 1 || (p > 0 && !states)) return CUDNN_STATUS_BAD_PARAM;
  d->p = p;
  d->states = states;
  d->state_bytes = bytes;
  return CUDNN_STATUS_SUCCESS;
}

/* Setting a probability with states initialises the generators: one kernel over the states. */
MAYA_EXPORT cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle, float p,
                                                    void *states, size_t bytes, unsigned long long seed) {
  cudnnStatus_t s = set_dropout(desc, p, states, bytes);
  if (s == CUDNN_STATUS_SUCCESS && states && bytes)
    record_kernel(API("cudnnSetDropoutDescriptor"), handle_stream(handle), "cudnn::ops::dropout_init_states_kernel",
                  (int64_t)(bytes / 48));
  return s;
}

/* Restoring reuses states already initialised: no device work. */
MAYA_EXPORT cudnnStatus_t cudnnRestoreDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle, float p,
                                                        void *states, size_t bytes, unsigned long long seed) {
  return set_dropout(desc, p, states, bytes);
}

/* ------------------------------------------------------------------ RNN descriptors */

MAYA_EXPORT cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t *desc) {
  *desc = (cudnnRNNDescriptor_t)calloc(1, sizeof(rnn_desc));
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t desc) {
  free(desc);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t desc, cudnnRNNAlgo_t algo, cudnnRNNMode_t mode,
                                                   cudnnRNNBiasMode_t bias, cudnnDirectionMode_t dir,
                                                   cudnnRNNInputMode_t input_mode, cudnnDataType_t dtype,
                                                   cudnnDataType_t math_prec, cudnnMathType_t math, int32_t input,
                                                   int32_t hidden, int32_t proj, int32_t layers,
                                                   cudnnDropoutDescriptor_t dropout, uint32_t aux) {
  rnn_desc *r = (rnn_desc *)desc;
  if (!r || hidden <= 0 || input <= 0 || layers <= 0 || proj <= 0 || proj > hidden ||
      (proj < hidden && mode != CUDNN_LSTM))
    return CUDNN_STATUS_BAD_PARAM;
  if (algo == CUDNN_RNN_ALGO_PERSIST_DYNAMIC) { /* needs cudnnBuildRNNDynamic */
    maya_unimplemented("cudnnSetRNNDescriptor_v8(CUDNN_RNN_ALGO_PERSIST_DYNAMIC)", D_CUDNN);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (input_mode != CUDNN_LINEAR_INPUT) {
    maya_unimplemented("cudnnSetRNNDescriptor_v8(CUDNN_SKIP_INPUT)", D_CUDNN);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  if (maya_dtype(dtype) == T_UNKNOWN) {
    maya_unimplemented("cudnnSetRNNDescriptor_v8(data type)", D_CUDNN);
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  *r = (rnn_desc){.algo = algo,
                  .mode = mode,
                  .bias = bias,
                  .dir = dir,
                  .dtype = dtype,
                  .math = math,
                  .input = input,
                  .hidden = hidden,
                  .proj = proj,
                  .layers = layers,
                  .dropout = dropout ? ((dropout_desc *)dropout)->p : 0};
  return CUDNN_STATUS_SUCCESS;
}

static int64_t gates(const rnn_desc *r) { return r->mode == CUDNN_LSTM ? 4 : r->mode == CUDNN_GRU ? 3 : 1; }
static int64_t dirs(const rnn_desc *r) { return r->dir == CUDNN_BIDIRECTIONAL ? 2 : 1; }
static int64_t layer_input(const rnn_desc *r, int64_t layer) { return layer ? r->proj * dirs(r) : r->input; }
static int input_bias(const rnn_desc *r) {
  return r->bias == CUDNN_RNN_DOUBLE_BIAS || r->bias == CUDNN_RNN_SINGLE_INP_BIAS;
}
static int rec_bias(const rnn_desc *r) {
  return r->bias == CUDNN_RNN_DOUBLE_BIAS || r->bias == CUDNN_RNN_SINGLE_REC_BIAS;
}
static int projected(const rnn_desc *r) { return r->proj < r->hidden; }

/* Elements of one pseudo-layer of `layer`. */
static int64_t pseudo_layer_elems(const rnn_desc *r, int64_t layer) {
  int64_t gh = gates(r) * r->hidden;
  return gh * (layer_input(r, layer) + r->proj) + (input_bias(r) + rec_bias(r)) * gh +
         (projected(r) ? r->proj * r->hidden : 0);
}

static int64_t weight_elems(const rnn_desc *r) {
  int64_t n = 0;
  for (int64_t l = 0; l < r->layers; l++) n += dirs(r) * pseudo_layer_elems(r, l);
  return n;
}

MAYA_EXPORT cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, size_t *bytes) {
  const rnn_desc *r = (const rnn_desc *)desc;
  if (!r || !r->layers || !bytes) return CUDNN_STATUS_BAD_PARAM;
  *bytes = (size_t)weight_elems(r) * dtype_bytes(r->dtype);
  return CUDNN_STATUS_SUCCESS;
}

/* Address and shape of gate matrix / bias `id` of a pseudo-layer: ids [0, G) are the input matrices,
 * [G, 2G) the recurrent ones, 2G the LSTM projection (no bias). An absent bias gives NULL. */
MAYA_EXPORT cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int32_t pseudo_layer,
                                                  size_t space_bytes, const void *space, int32_t id,
                                                  cudnnTensorDescriptor_t m_desc, void **m_addr,
                                                  cudnnTensorDescriptor_t b_desc, void **b_addr) {
  const rnn_desc *r = (const rnn_desc *)desc;
  if (!r || !r->layers || pseudo_layer < 0 || pseudo_layer >= r->layers * dirs(r) ||
      space_bytes < (size_t)weight_elems(r) * dtype_bytes(r->dtype))
    return CUDNN_STATUS_BAD_PARAM;
  int64_t layer = pseudo_layer / dirs(r), g = gates(r), h = r->hidden, p = r->proj, in = layer_input(r, layer);
  int64_t base = 0;
  for (int64_t i = 0; i < pseudo_layer; i++) base += pseudo_layer_elems(r, i / dirs(r));
  int64_t m_off, rows = h, cols, b_off = -1;
  int64_t biases = g * h * (in + p); /* offset of the input biases */
  if (id >= 0 && id < g) {
    m_off = id * h * in;
    cols = in;
    if (input_bias(r)) b_off = biases + id * h;
  } else if (id >= g && id < 2 * g) {
    m_off = g * h * in + (id - g) * h * p;
    cols = p;
    if (rec_bias(r)) b_off = biases + input_bias(r) * g * h + (id - g) * h;
  } else if (id == 2 * g && projected(r)) {
    m_off = biases + (input_bias(r) + rec_bias(r)) * g * h;
    rows = p;
    cols = h;
  } else {
    return CUDNN_STATUS_BAD_PARAM;
  }
  size_t esize = dtype_bytes(r->dtype);
  if (m_addr) *m_addr = (char *)space + (size_t)(base + m_off) * esize;
  set_matrix((tensor_desc *)m_desc, r->dtype, rows, cols);
  if (b_addr) *b_addr = b_off < 0 ? NULL : (char *)space + (size_t)(base + b_off) * esize;
  if (b_desc) {
    if (b_off < 0)
      ((tensor_desc *)b_desc)->nb = 0;
    else
      set_matrix((tensor_desc *)b_desc, r->dtype, h, 0);
  }
  return CUDNN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ RNN data descriptors */

MAYA_EXPORT cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t *desc) {
  *desc = (cudnnRNNDataDescriptor_t)calloc(1, sizeof(rnn_data_desc));
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t desc) {
  if (desc) free(((rnn_data_desc *)desc)->seq_lens);
  free(desc);
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, cudnnDataType_t dtype,
                                                    cudnnRNNDataLayout_t layout, int max_seq, int batch, int vec,
                                                    const int seq_lens[], void *padding_fill) {
  rnn_data_desc *d = (rnn_data_desc *)desc;
  if (!d || max_seq <= 0 || batch <= 0 || vec <= 0 || !seq_lens) return CUDNN_STATUS_BAD_PARAM;
  for (int i = 0; i < batch; i++)
    if (seq_lens[i] < 0 || seq_lens[i] > max_seq) return CUDNN_STATUS_BAD_PARAM;
  free(d->seq_lens);
  d->seq_lens = malloc(sizeof(int) * (size_t)batch);
  memcpy(d->seq_lens, seq_lens, sizeof(int) * (size_t)batch);
  d->dtype = dtype;
  d->max_seq = max_seq;
  d->batch = batch;
  d->vec = vec;
  return CUDNN_STATUS_SUCCESS;
}

/* Sequences still running at timestep t. */
static int64_t batch_at(const rnn_data_desc *x, int t) {
  int64_t n = 0;
  for (int i = 0; i < x->batch; i++) n += x->seq_lens[i] > t;
  return n;
}

static int64_t tokens(const rnn_data_desc *x) {
  int64_t n = 0;
  for (int i = 0; i < x->batch; i++) n += x->seq_lens[i];
  return n;
}

/* ------------------------------------------------------------------ sizes and compute */

/* Workspace: one layer's input projections plus a step's gate buffer in fp32. Reserve (training):
 * per layer and direction, every token's gate activations, cell and output state, plus the dropout
 * masks of the layers' inputs. */
MAYA_EXPORT cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                                                    cudnnForwardMode_t mode, cudnnRNNDataDescriptor_t x_desc,
                                                    size_t *work_bytes, size_t *reserve_bytes) {
  const rnn_desc *r = (const rnn_desc *)desc;
  const rnn_data_desc *x = (const rnn_data_desc *)x_desc;
  if (!r || !r->layers || !x || !x->batch) return CUDNN_STATUS_BAD_PARAM;
  int64_t padded = (int64_t)x->max_seq * x->batch, gh = gates(r) * r->hidden, esize = (int64_t)dtype_bytes(r->dtype);
  if (work_bytes) *work_bytes = align256((size_t)((padded * esize + x->batch * 4) * dirs(r) * gh));
  if (reserve_bytes) {
    size_t reserve = 0;
    if (mode == CUDNN_FWD_MODE_TRAINING) {
      int64_t state = gh + r->hidden * (r->mode == CUDNN_LSTM ? 2 : 1) + (projected(r) ? r->proj : 0);
      reserve = (size_t)(r->layers * dirs(r) * padded * state * esize);
      if (r->dropout > 0) reserve += (size_t)((r->layers - 1) * padded * r->proj * dirs(r));
    }
    *reserve_bytes = align256(reserve);
  }
  return CUDNN_STATUS_SUCCESS;
}

typedef struct {
  int api;
  int64_t stream;
  int dt, compute;
} rnn_call;

static void gemm(const rnn_call *c, int64_t m, int64_t n, int64_t k) {
  maya_record_gemm(c->api, D_CUDNN, c->stream, m, n, k, 1, 0, 0, c->dt, c->dt, c->dt, c->compute);
}

static rnn_call call_of(int api, cudnnHandle_t handle, const rnn_desc *r) {
  int dt = maya_dtype(r->dtype);
  /* fp32 GEMMs run on TF32 tensor cores unless FMA math is asked for (torch: allow_tf32 off) */
  int compute = dt == T_F32 && r->math != CUDNN_FMA_MATH ? T_TF32 : dt;
  return (rnn_call){api, handle_stream(handle), dt, compute};
}

static const char *cell_kernel(const rnn_desc *r, int backward) {
  switch (r->mode) {
  case CUDNN_LSTM: return backward ? "cudnn::rnn::LSTM_elementWise_bp" : "cudnn::rnn::LSTM_elementWise_fp";
  case CUDNN_GRU: return backward ? "cudnn::rnn::GRU_elementWise_bp" : "cudnn::rnn::GRU_elementWise_fp";
  case CUDNN_RNN_TANH: return backward ? "cudnn::rnn::RNN_tanh_elementWise_bp" : "cudnn::rnn::RNN_tanh_elementWise_fp";
  default: return backward ? "cudnn::rnn::RNN_relu_elementWise_bp" : "cudnn::rnn::RNN_relu_elementWise_fp";
  }
}

static cudnnStatus_t check_call(const rnn_desc *r, const rnn_data_desc *x) {
  return r && r->layers && x && x->batch && x->vec == r->input ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

MAYA_EXPORT cudnnStatus_t cudnnRNNForward(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, cudnnForwardMode_t mode,
                                          const int32_t dev_seq_lens[], cudnnRNNDataDescriptor_t x_desc, const void *x,
                                          cudnnRNNDataDescriptor_t y_desc, void *y, cudnnTensorDescriptor_t h_desc,
                                          const void *hx, void *hy, cudnnTensorDescriptor_t c_desc, const void *cx,
                                          void *cy, size_t weight_bytes, const void *weights, size_t work_bytes,
                                          void *work, size_t reserve_bytes, void *reserve) {
  const rnn_desc *r = (const rnn_desc *)desc;
  const rnn_data_desc *xd = (const rnn_data_desc *)x_desc;
  cudnnStatus_t s = check_call(r, xd);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  rnn_call c = call_of(API("cudnnRNNForward"), handle, r);
  int64_t gh = gates(r) * r->hidden, n = tokens(xd);
  int training = mode == CUDNN_FWD_MODE_TRAINING;
  for (int64_t l = 0; l < r->layers; l++) {
    if (training && r->dropout > 0 && l > 0)
      record_kernel(c.api, c.stream, "cudnn::rnn::dropout_elementWise_fp", n * layer_input(r, l));
    for (int64_t d = 0; d < dirs(r); d++) {
      gemm(&c, n, gh, layer_input(r, l)); /* x W^T for every token */
      for (int i = 0; i < xd->max_seq; i++) {
        int t = d ? xd->max_seq - 1 - i : i;
        int64_t b = batch_at(xd, t);
        if (!b) continue;
        gemm(&c, b, gh, r->proj); /* h_{t-1} R^T */
        record_kernel(c.api, c.stream, cell_kernel(r, 0), b * r->hidden);
        if (projected(r)) gemm(&c, b, r->proj, r->hidden);
      }
    }
  }
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                                                  const int32_t dev_seq_lens[], cudnnRNNDataDescriptor_t y_desc,
                                                  const void *y, const void *dy, cudnnRNNDataDescriptor_t x_desc,
                                                  void *dx, cudnnTensorDescriptor_t h_desc, const void *hx,
                                                  const void *dhy, void *dhx, cudnnTensorDescriptor_t c_desc,
                                                  const void *cx, const void *dcy, void *dcx, size_t weight_bytes,
                                                  const void *weights, size_t work_bytes, void *work,
                                                  size_t reserve_bytes, void *reserve) {
  const rnn_desc *r = (const rnn_desc *)desc;
  const rnn_data_desc *xd = (const rnn_data_desc *)x_desc;
  cudnnStatus_t s = check_call(r, xd);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  rnn_call c = call_of(API("cudnnRNNBackwardData_v8"), handle, r);
  int64_t gh = gates(r) * r->hidden, n = tokens(xd);
  for (int64_t l = r->layers - 1; l >= 0; l--) {
    for (int64_t d = 0; d < dirs(r); d++) {
      for (int i = 0; i < xd->max_seq; i++) { /* the forward's steps, in reverse */
        int t = d ? i : xd->max_seq - 1 - i;
        int64_t b = batch_at(xd, t);
        if (!b) continue;
        if (projected(r)) gemm(&c, b, r->hidden, r->proj);
        record_kernel(c.api, c.stream, cell_kernel(r, 1), b * r->hidden);
        gemm(&c, b, r->proj, gh); /* dh_{t-1} = dgates R */
      }
      gemm(&c, n, layer_input(r, l), gh); /* dx = dgates W */
    }
    if (r->dropout > 0 && l > 0)
      record_kernel(c.api, c.stream, "cudnn::rnn::dropout_elementWise_bp", n * layer_input(r, l));
  }
  return CUDNN_STATUS_SUCCESS;
}

MAYA_EXPORT cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
                                                     cudnnWgradMode_t add, const int32_t dev_seq_lens[],
                                                     cudnnRNNDataDescriptor_t x_desc, const void *x,
                                                     cudnnTensorDescriptor_t h_desc, const void *hx,
                                                     cudnnRNNDataDescriptor_t y_desc, const void *y,
                                                     size_t weight_bytes, void *dweights, size_t work_bytes, void *work,
                                                     size_t reserve_bytes, void *reserve) {
  const rnn_desc *r = (const rnn_desc *)desc;
  const rnn_data_desc *xd = (const rnn_data_desc *)x_desc;
  cudnnStatus_t s = check_call(r, xd);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  rnn_call c = call_of(API("cudnnRNNBackwardWeights_v8"), handle, r);
  int64_t gh = gates(r) * r->hidden, n = tokens(xd);
  for (int64_t l = 0; l < r->layers; l++) {
    for (int64_t d = 0; d < dirs(r); d++) {
      gemm(&c, gh, layer_input(r, l), n); /* dW = dgates^T x */
      gemm(&c, gh, r->proj, n);           /* dR = dgates^T h_{t-1} */
      if (projected(r)) gemm(&c, r->proj, r->hidden, n);
      if (r->bias != CUDNN_RNN_NO_BIAS) record_kernel(c.api, c.stream, "cudnn::rnn::bias_grad_reduce", n * gh);
    }
  }
  return CUDNN_STATUS_SUCCESS;
}
