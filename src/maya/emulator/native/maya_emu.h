/* Maya's virtual-GPU runtime: state shared by the stub libraries (libmaya_emu.so).
 *
 * Every intercepted call becomes one fixed-size binary record in a per-thread buffer, flushed to
 * `<out>/calls-<tid>.bin`; kernel names and communicators go to small text side files. The Python
 * side (maya/emulator/convert.py) turns them into maya_trace_spec tables. The record layout, kinds, flags,
 * domains and element types here and in maya/emulator/capture_format.py must agree
 * (tests/emulator/test_capture_format.py checks them).
 */
#ifndef MAYA_EMU_H
#define MAYA_EMU_H

#include <stddef.h>
#include <stdint.h>

#define MAYA_EXPORT __attribute__((visibility("default")))
#define MAYA_MAX_DEVICES 16
#define MAYA_SMALL_COPY (1u << 20) /* copies up to 1 MiB really move bytes */

/* API domains (api_calls.domain). */
enum { D_RUNTIME = 0, D_DRIVER, D_CUBLAS, D_CUBLASLT, D_CUDNN, D_NCCL, D_OTHER, D_NVML };

/* Record kinds: what the payload `a[8]` holds. */
enum {
  K_PLAIN = 0, /* nothing */
  K_LAUNCH,    /* a0 kernel_id, a1 grid x|y<<32, a2 grid z, a3 block x|y<<32, a4 block z, a5 smem,
                  a6 launch note (Triton arguments described by the runner, triton_launches.py), else 0,
                  a7 elements (a library's own kernels), else 0 */
  K_GEMM,      /* a0 m, a1 n, a2 k, a3 batch, a4 transA|transB<<8, a5 dtypeA|B<<16|C<<32, a6 compute */
  K_COPY,      /* a0 bytes, a1 memcpy kind (0 HtoH 1 HtoD 2 DtoH 3 DtoD 4 default 5 PtoP), a2 synchronous,
                  a3 what a host read got (0 the device bytes, 1 zero and 2 one: a loop's stand-ins, 3 a value
                  computed on the host, 4 one computed from an assumed routing, 5 zero: a value only a GPU
                  computes) */
  K_MEMSET,    /* a0 bytes */
  K_COLL,      /* a0 comm id, a1 count, a2 op, a3 dtype, a4 root, a5 peer, a6 comm seq, a7 recv count */
  K_EVENT,     /* a0 event id; cudaEventElapsedTime: a1 1 when the device-time oracle answered, a2 its ns */
  K_ALLOC,     /* a0 address, a1 bytes, a2 allocated after, a3 0 alloc / 1 free / 2 oom, a4 space */
  K_SYNC,      /* a0 event id or -1 */
  K_ATTN,      /* a0 b, a1 h, a2 s_q, a3 s_kv, a4 d, a5 causal|bwd<<1, a6 dtype, a7 h_kv */
};

/* Element types as recorded (DTYPES in capture_format.py). */
enum { T_UNKNOWN = 0, T_F32, T_F16, T_BF16, T_F64, T_TF32, T_I8, T_I32, T_F8E4M3, T_F8E5M2, T_I64, T_U8 };

/* Record flags. */
#define F_DATA_DEPENDENT 1 /* the caller got a stand-in for a value only the GPU computes */
#define F_UNIMPLEMENTED 2  /* the API is not emulated: the call failed loudly */
#define F_GRAPH_REPLAY 4   /* device work replayed by cudaGraphLaunch, as captured */

typedef struct {
  int64_t seq, tid, start_ns, dur_ns, stream;
  int32_t api, domain, status, device, kind, flags;
  int64_t a[8];
  int64_t op;         /* innermost framework op open on the thread (libmaya_ops), -1 if none */
  int64_t cpu_ns;     /* the issuing thread's CPU time (CLOCK_THREAD_CPUTIME_ID) at the call's start, -1 if not read */
  int64_t cpu_dur_ns; /* its CPU time in the call: read again at the end of a call longer than MAYA_CPU_SHORT_NS
                         of wall time, else the wall duration (a thread runs no longer than that) */
} maya_rec;           /* 152 bytes */

/* What a process the rank started (not the rank itself: a subprocess, a multiprocessing child, a DataLoader
 * worker) asked of the stubs: its calls are counted here, not recorded. `children/<pid>.bin` of the rank's
 * capture, a shared mapping updated in place, so a child that ends with _exit (as multiprocessing's do) keeps its
 * counts (children.c). */
typedef struct {
  int64_t pid, rank_pid, parent_pid;          /* parent: the process that forked or started it */
  int64_t calls, device_calls;                /* device calls: work, copies, collectives, device allocations */
  int32_t forked, first_domain;               /* forked: a fork (of parent_pid), else a program started */
  char first_api[128], first_device_api[128]; /* device: "" until one */
  char command[1024]; /* /proc/self/cmdline, arguments and whitespace runs joined by one space, cut */
} maya_child_report;  /* 1328 bytes */

typedef struct {
  char name[256];
  int major, minor, sm_count;
  size_t memory_bytes;
  int clock_khz, mem_clock_khz, bus_width_bits, l2_bytes;
  int smem_per_sm, smem_per_block_optin, max_threads_per_sm, regs_per_sm;
  int power_limit_w;
  int nvlinks, nvlink_bridged; /* NVLinks per GPU; 1: they join it to one peer by a bridge (PCIe cards) */
} maya_device_cfg;

/* configuration (from the file named by $MAYA_EMU_CONFIG) */
extern int maya_ndev;
extern maya_device_cfg maya_dev[MAYA_MAX_DEVICES];
extern int maya_rank;

/* time and records */
int64_t maya_now(void);
int64_t maya_next_seq(void);
/* Start a record; returns it for the caller to fill; `maya_end` stamps the duration. */
maya_rec *maya_begin(int api, int domain, int kind);
void maya_end(maya_rec *r, int status);
/* A record of work written after its call returned (a graph launch's replayed rows): no clock is read. */
maya_rec *maya_begin_row(void);
/* The calling thread's CPU time, ns, as the records' `cpu_ns` count it. */
int64_t maya_thread_cpu(void);
int maya_api_id(const char *name); /* stable id for an API name (registered in apis.tsv) */
void maya_flush_all(void);

/* Stable per-call-site API id: API("cudaMalloc"). */
#define API(name)                                                                                                      \
  ({                                                                                                                   \
    static int _maya_api_id = -1;                                                                                      \
    if (__builtin_expect(_maya_api_id < 0, 0)) _maya_api_id = maya_api_id(name);                                       \
    _maya_api_id;                                                                                                      \
  })

/* Device attributes (cudaDeviceAttr numbering) and properties; see device_attrs.c. */
int maya_device_attribute(int attr, int device, int *value);
void maya_device_properties(void *cuda_device_prop, int device);

/* Report an API that is not emulated: records it, prints once per name, counts it. */
void maya_unimplemented(const char *name, int domain);

/* threads */
MAYA_EXPORT void maya_emu_set_op(int64_t op); /* set by the op observer (ops_observer.cpp) */
int maya_current_device(void);
void maya_set_current_device(int d);

/* device memory: virtual, accounted against the device's capacity */
void *maya_dev_alloc(int device, size_t bytes, int64_t stream, int *oom);
int maya_dev_free(void *ptr, int64_t stream);                    /* 0 ok, -1 unknown pointer */
int maya_dev_lookup(const void *ptr, int *device, size_t *size); /* 1 if ptr is inside an allocation */
void maya_dev_mark_managed(const void *ptr);                     /* a cudaMallocManaged allocation */
int maya_dev_managed(const void *ptr, size_t count); /* 1 if [ptr, ptr + count) is inside a managed allocation */
size_t maya_dev_used(int device);
/* What the rank has allocated on the device, also in the processes it starts (nvidia-smi): the rank
 * publishes it in <out>/device_memory. */
size_t maya_dev_used_by_rank(int device);
long maya_rank_pid(void); /* the emulated rank's pid, also in the processes it starts */
void *maya_host_alloc(size_t bytes);
int maya_host_free(void *ptr);
int maya_is_host_alloc(const void *ptr);
/* A range of a cuMemAddressReserve reservation mapped to a cuMemCreate handle of `device` (expandable segments),
 * known to maya_dev_lookup as device memory (the handle counts its bytes), until cuMemUnmap. */
void maya_dev_map(void *ptr, size_t size, int device);
void maya_dev_unmap(void *ptr, size_t size);
/* copy/set only small buffers for real */
void maya_copy(void *dst, const void *src, size_t n);
void maya_set(void *dst, int value, size_t n);

/* kernels: host stub -> name and the module (the fat binary it was registered from, opaque here);
 * id assigned at first launch (names.tsv) */
void maya_register_kernel(const void *host_fun, const char *name, const void *module);
const void *maya_kernel_module(const void *host_fun); /* NULL if never registered */
int64_t maya_kernel_id(const void *host_fun);
int64_t maya_kernel_id_by_name(const char *name); /* library kernels with no host stub */
/* The note the runner left for this thread's next launch (maya_emu_launch_note), taken: 0 if none. */
int64_t maya_take_launch_note(void);

/* ids for streams, events, communicators */
int64_t maya_new_id(void);

/* streams are handles to this struct; the default streams (NULL, legacy, per-thread) have id 0 */
typedef struct {
  int64_t id;
  int device;
  int priority;
  unsigned flags;
} maya_stream;
int64_t maya_stream_id(const void *stream);

/* CUDA graphs: while a stream captures, its device work (launches, GEMMs, copies, memsets,
 * collectives, attention, event records and waits) goes into the graph instead of the trace;
 * each launch of the graph replays it into the trace. Streams join a capture by waiting on an
 * event recorded in it. */
typedef struct maya_graph maya_graph;
maya_graph *maya_capture_begin(int64_t stream);
maya_graph *maya_capturing(int64_t stream); /* NULL if the stream is not capturing */
void maya_capture_join(int64_t stream, maya_graph *g);
maya_graph *maya_capture_end(int64_t stream); /* NULL if the stream was not capturing */
int64_t maya_graph_id(const maya_graph *g);
size_t maya_graph_size(const maya_graph *g);
void maya_graph_launch(const maya_graph *g, int api, int64_t stream);
maya_graph *maya_graph_clone(const maya_graph *g); /* an executable graph owns its copy */
void maya_graph_free(maya_graph *g);               /* releases the user objects it holds */

/* user objects (cudaUserObjectCreate) and the references graphs hold to them */
typedef struct maya_user_object maya_user_object;
maya_user_object *maya_user_object_create(void *ptr, void (*destroy)(void *), unsigned refs);
void maya_user_object_retain(maya_user_object *o, unsigned n);
void maya_user_object_release(maya_user_object *o, unsigned n); /* the last one runs the destructor */
void maya_graph_hold(maya_graph *g, maya_user_object *o, unsigned n);
int maya_graph_unhold(maya_graph *g, maya_user_object *o, unsigned n); /* -1 if it holds fewer */

/* Device time between timing events (device_time.c): a recorded timing event marks its place among the
 * device work (-1: no oracle, or not a timing record); the oracle prices the work between two marks. */
int64_t maya_timing_mark(int64_t previous, int timing); /* releases `previous`, returns the new mark */
void maya_timing_release(int64_t mark);
int maya_timing_elapsed(int64_t from, int64_t to, int64_t stream_a, int64_t stream_b, double *ns); /* 0 ok */

/* Work behind collectives (completion.c): a poll made right after a collective was issued finds it running,
 * as on a GPU, where it waits for its peers. An event recorded behind one, and a stream with one queued,
 * answer "not ready" until a thread that issues device work has polled them once, the rank has issued more
 * device work or time has passed, or a host synchronization covers them. */
int64_t maya_device_work_issued(void); /* device calls the rank has issued so far (record.c) */
void maya_collective_issued(int64_t stream);
int64_t maya_behind_collective(int64_t stream); /* the collective an event recorded now follows (0: none) */
/* 1: the poll answers "not ready" (counted in `polls`, the record's polls so far by threads that issue device work
 * and by others); `since_ns` and `since_work`: the record's host time and the device work issued before it */
int maya_still_running(int64_t stream, int64_t behind, int64_t since_ns, int64_t since_work, int polls[2]);
int maya_stream_still_running(int64_t stream);
void maya_collectives_done(int64_t stream, int64_t upto); /* stream -1: every stream; upto -1: all issued */

/* side files */
void maya_side_write(const char *file, const char *line);

/* Host reads of device memory (device-to-host copies): the value the host gets (see host_read.c, "host
 * reads"). Copies the bytes and marks the record data-dependent; returns -1 when the rank must stop
 * (a loop that makes no progress), the record then carrying the failure. */
int maya_host_read(maya_rec *r, void *dst, const void *src, size_t n);
const char *maya_stop_reason(void); /* why the rank was stopped, NULL if it was not */

#endif
