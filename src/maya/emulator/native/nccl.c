/* libnccl.so.2 stub: communicators and collectives of one rank in isolation.
 *
 * No rank waits for another: each collective completes at once and fills its receive buffer
 * SPMD-style, the rank's own data standing in for its peers' (small buffers only, as for copies).
 * A communicator's id is a hash of its unique id; the converter maps calls to process groups. */
#define _GNU_SOURCE
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "maya_emu.h"

typedef struct {
  int64_t id;
  int nranks, rank, device;
  int64_t seq;    /* collectives, sends and receives issued on it (the simulator numbers collectives without the
                     sends and receives, which differ between members: simulator/program.py) */
  int64_t splits; /* ncclCommSplit calls on it, NOCOLOR ones included (every rank of it makes each) */
} maya_comm;

static const int elem_size[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
static const int elem_type[] = {T_I8,  T_U8,  T_I32, T_I32,  T_I64,    T_I64,
                                T_F16, T_F32, T_F64, T_BF16, T_F8E4M3, T_F8E5M2};

static size_t bytes_of(size_t count, ncclDataType_t t) {
  return count * (size_t)((unsigned)t < ncclNumTypes ? elem_size[t] : 1);
}

static int64_t hash_bytes(const char *p, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  return (int64_t)(h & 0x7fffffffffffffffull);
}

static void describe(maya_comm *c) {
  char line[256];
  snprintf(line, sizeof line, "{\"comm_id\": \"%016llx\", \"comm_rank\": %d, \"comm_size\": %d, \"device\": %d}\n",
           (unsigned long long)c->id, c->rank, c->nranks, c->device);
  maya_side_write("nccl_comms.jsonl", line);
}

static maya_comm *new_comm(int64_t id, int nranks, int rank) {
  maya_comm *c = calloc(1, sizeof *c);
  c->id = id;
  c->nranks = nranks;
  c->rank = rank;
  c->device = maya_current_device();
  describe(c);
  return c;
}

MAYA_EXPORT ncclResult_t ncclGetVersion(int *version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  static int64_t counter;
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "maya-%d-%ld-%ld", getpid(), (long)counter++, (long)maya_now());
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  maya_rec *r = maya_begin(API("ncclCommInitRank"), D_NCCL, K_PLAIN);
  maya_comm *c = new_comm(hash_bytes(id.internal, sizeof id.internal), nranks, rank);
  r->a[0] = c->id;
  maya_end(r, 0);
  *comm = (ncclComm_t)c;
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                                ncclConfig_t *config) {
  (void)config;
  return ncclCommInitRank(comm, nranks, id, rank);
}

MAYA_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int n_ids, ncclUniqueId *ids,
                                                  ncclConfig_t *config) {
  (void)n_ids;
  (void)config;
  return ncclCommInitRank(comm, nranks, ids[0], rank);
}

MAYA_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  for (int i = 0; i < ndev; i++) {
    maya_set_current_device(devlist ? devlist[i] : i);
    ncclCommInitRank(&comms[i], ndev, id, i);
  }
  return ncclSuccess;
}

/* The size of a communicator split off by color is not knowable in isolation: the runner registers
 * each color torch derives from a group's ranks, with the group's size (see runner.py). */
/* every rank creates every group of a job (thousands at scale), so the tables grow */
static int *color_keys, *color_sizes, n_colors, cap_colors;

MAYA_EXPORT void maya_nccl_register_color(int color, int size) {
  if (n_colors == cap_colors) {
    cap_colors = cap_colors ? 2 * cap_colors : 1024;
    color_keys = realloc(color_keys, sizeof(int) * (size_t)cap_colors);
    color_sizes = realloc(color_sizes, sizeof(int) * (size_t)cap_colors);
  }
  color_keys[n_colors] = color;
  color_sizes[n_colors++] = size;
}

/* sizes of splits whose color torch computes in C++ (ProcessGroup.split_group), in call order */
static int *expected_sizes, n_expected, cap_expected, next_expected;

MAYA_EXPORT void maya_nccl_expect_split(int size) {
  if (n_expected == cap_expected) {
    cap_expected = cap_expected ? 2 * cap_expected : 1024;
    expected_sizes = realloc(expected_sizes, sizeof(int) * (size_t)cap_expected);
  }
  expected_sizes[n_expected++] = size;
}

MAYA_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
  (void)config;
  maya_comm *p = (maya_comm *)comm;
  int64_t split = p->splits++; /* a split is no collective of the parent: its `seq` stays */
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = NULL;
    return ncclSuccess;
  }
  int size = 0;
  for (int i = n_colors - 1; i >= 0 && !size; i--)
    if (color_keys[i] == color) size = color_sizes[i];
  if (!size && next_expected < n_expected) size = expected_sizes[next_expected++];
  if (!size) { /* a split torch did not announce: the size is unknown */
    maya_unimplemented("ncclCommSplit(unregistered color)", D_NCCL);
    return ncclInvalidUsage;
  }
  char seed[64];
  snprintf(seed, sizeof seed, "%lld/%d/%lld", (long long)p->id, color, (long long)split);
  *newcomm = (ncclComm_t)new_comm(hash_bytes(seed, strlen(seed)), size, key < size ? key : 0);
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  (void)comm;
  return ncclSuccess;
}
MAYA_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  free(comm);
  return ncclSuccess;
}
MAYA_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  free(comm);
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
  (void)comm;
  *err = ncclSuccess;
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  *count = ((maya_comm *)comm)->nranks;
  return ncclSuccess;
}
MAYA_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *d) {
  *d = ((maya_comm *)comm)->device;
  return ncclSuccess;
}
MAYA_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  *rank = ((maya_comm *)comm)->rank;
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buf, size_t size, void **handle) {
  (void)comm;
  (void)buf;
  (void)size;
  *handle = buf;
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  (void)comm;
  (void)handle;
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  int oom;
  *ptr = maya_dev_alloc(maya_current_device(), size, -1, &oom);
  return *ptr ? ncclSuccess : ncclSystemError;
}

MAYA_EXPORT ncclResult_t ncclMemFree(void *ptr) {
  return maya_dev_free(ptr, -1) == 0 ? ncclSuccess : ncclInvalidArgument;
}

MAYA_EXPORT const char *ncclGetErrorString(ncclResult_t r) {
  return r == ncclSuccess ? "no error" : r == ncclInvalidUsage ? "invalid usage (not emulated by Maya)" : "NCCL error";
}

MAYA_EXPORT const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return "";
}

MAYA_EXPORT ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t t,
                                                  ncclScalarResidence_t residence, ncclComm_t comm) {
  (void)scalar;
  (void)t;
  (void)residence;
  (void)comm;
  *op = (ncclRedOp_t)ncclNumOps;
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  (void)op;
  (void)comm;
  return ncclSuccess;
}

static __thread int group_depth;

/* Broadcasts issued inside a group (e.g. an all-gather of unequal tensors, one broadcast per root)
 * complete at the group's end: the rank's own broadcast stands in for its peers'. */
typedef struct {
  maya_comm *comm;
  int root;
  const void *send;
  void *recv;
  size_t bytes;
} pending_bcast;

#define MAX_PENDING 4096
static __thread pending_bcast pending[MAX_PENDING];
static __thread int n_pending;

static void complete_group(void) {
  for (int i = 0; i < n_pending; i++) {
    pending_bcast *b = &pending[i];
    const void *src = b->send;
    if (b->root != b->comm->rank)
      for (int j = 0; j < n_pending; j++)
        if (pending[j].comm == b->comm && pending[j].root == b->comm->rank && pending[j].bytes == b->bytes)
          src = pending[j].send;
    maya_copy(b->recv, src, b->bytes);
  }
  n_pending = 0;
}

MAYA_EXPORT ncclResult_t ncclGroupStart(void) {
  maya_rec *r = maya_begin(API("ncclGroupStart"), D_NCCL, K_PLAIN);
  r->a[0] = group_depth++;
  maya_end(r, 0);
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclGroupEnd(void) {
  maya_rec *r = maya_begin(API("ncclGroupEnd"), D_NCCL, K_PLAIN);
  r->a[0] = --group_depth;
  maya_end(r, 0);
  if (group_depth == 0) complete_group();
  return ncclSuccess;
}

static void record(int api, maya_comm *c, size_t in_count, size_t out_count, ncclDataType_t t, int op, int root,
                   int peer, cudaStream_t s) {
  int64_t stream = maya_stream_id(s);
  maya_rec *r = maya_begin(api, D_NCCL, K_COLL);
  r->stream = stream;
  r->device = c->device;
  r->a[0] = c->id;
  r->a[1] = (int64_t)in_count;
  r->a[2] = op;
  r->a[3] = (unsigned)t < ncclNumTypes ? elem_type[t] : T_UNKNOWN;
  r->a[4] = root;
  r->a[5] = peer;
  r->a[6] = c->seq++;
  r->a[7] = (int64_t)out_count;
  maya_end(r, 0);
  maya_collective_issued(stream); /* polls find it running for a while (completion.c) */
}

MAYA_EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                       ncclComm_t comm, cudaStream_t s) {
  record(API("ncclAllReduce"), (maya_comm *)comm, count, count, t, op, -1, -1, s);
  maya_copy(recv, send, bytes_of(count, t));
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                    int root, ncclComm_t comm, cudaStream_t s) {
  record(API("ncclReduce"), (maya_comm *)comm, count, count, t, op, root, -1, s);
  maya_copy(recv, send, bytes_of(count, t));
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                                       ncclComm_t comm, cudaStream_t s) {
  record(API("ncclBroadcast"), (maya_comm *)comm, count, count, t, -1, root, -1, s);
  if (group_depth > 0 && n_pending < MAX_PENDING)
    pending[n_pending++] = (pending_bcast){(maya_comm *)comm, root, send, recv, bytes_of(count, t)};
  else
    maya_copy(recv, send, bytes_of(count, t));
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclBcast(void *buf, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                                   cudaStream_t s) {
  record(API("ncclBroadcast"), (maya_comm *)comm, count, count, t, -1, root, -1, s);
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                                       cudaStream_t s) {
  maya_comm *c = (maya_comm *)comm;
  record(API("ncclAllGather"), c, count, count * (size_t)c->nranks, t, -1, -1, -1, s);
  size_t n = bytes_of(count, t);
  if (n * (size_t)c->nranks <= MAYA_SMALL_COPY)
    for (int i = 0; i < c->nranks; i++) maya_copy((char *)recv + (size_t)i * n, send, n);
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                           ncclComm_t comm, cudaStream_t s) {
  maya_comm *c = (maya_comm *)comm;
  record(API("ncclReduceScatter"), c, count * (size_t)c->nranks, count, t, op, -1, -1, s);
  size_t n = bytes_of(count, t);
  maya_copy(recv, (const char *)send + (size_t)c->rank * n, n);
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclAlltoAll(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                                      cudaStream_t s) {
  maya_comm *c = (maya_comm *)comm;
  record(API("ncclAlltoAll"), c, count * (size_t)c->nranks, count * (size_t)c->nranks, t, -1, -1, -1, s);
  maya_copy(recv, send, bytes_of(count * (size_t)c->nranks, t));
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclGather(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                                    ncclComm_t comm, cudaStream_t s) {
  maya_comm *c = (maya_comm *)comm;
  record(API("ncclGather"), c, count, c->rank == root ? count * (size_t)c->nranks : 0, t, -1, root, -1, s);
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclScatter(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                                     ncclComm_t comm, cudaStream_t s) {
  maya_comm *c = (maya_comm *)comm;
  record(API("ncclScatter"), c, c->rank == root ? count * (size_t)c->nranks : 0, count, t, -1, root, -1, s);
  return ncclSuccess;
}

MAYA_EXPORT ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                  cudaStream_t s) {
  record(API("ncclSend"), (maya_comm *)comm, count, 0, t, -1, -1, peer, s);
  return ncclSuccess;
}

/* the received data would be the peer's: the buffer keeps what it holds */
MAYA_EXPORT ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                                  cudaStream_t s) {
  record(API("ncclRecv"), (maya_comm *)comm, 0, count, t, -1, -1, peer, s);
  return ncclSuccess;
}
