/* libmaya_emu.so's own shared state and helpers, hidden from the stub libraries (which see maya_emu.h):
 * config.c (the virtual devices), record.c (per-thread record buffers, API ids, the op and device of
 * each thread), host_read.c (stand-ins for device values the host reads), memory.c (virtual device
 * memory), kernels.c (kernel registry), graphs.c (CUDA graphs and user objects), device_time.c (event timings
 * from the device-time oracle), lifecycle.c (start, exit, fork, restart in a zygote's child), children.c (the
 * calls of processes the rank starts, counted). */
#ifndef MAYA_CORE_H
#define MAYA_CORE_H
#include "maya_emu.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#pragma GCC visibility push(hidden)

/* config.c */
extern char out_dir[4096];         /* the rank's capture directory */
extern int configured;             /* a rank's configuration was read (out_dir is its capture directory) */
extern size_t reserved_per_device; /* memory the CUDA context itself would hold */
void load_config(void);

/* record.c */
#define BUF_RECORDS 8192
typedef struct thread_buf {
  maya_rec recs[BUF_RECORDS];
  int n;
  int fd;
  int64_t tid;
  struct thread_buf *next;
} thread_buf;
extern pthread_mutex_t lock; /* guards every table of the core */
extern _Atomic int64_t seq_counter;
extern thread_buf *all_bufs;
extern __thread thread_buf *my_buf;
extern __thread int current_device;
extern int forked_child; /* not the emulated process itself: records nothing */
extern int n_apis;
const char *maya_api_name(int api); /* the name maya_api_id gave `api` */
/* What the thread did since its last host read (host_read.c): a hash of its calls' APIs and, for device
 * work, kernels, shapes and sizes (not addresses, times or allocations), and whether it did device work
 * (kernels, copies to the device, collectives) since then. */
#define WINDOW_SEED 1469598103934665603ull
extern __thread uint64_t window;
extern __thread int window_work;
int thread_issued_device_work(void); /* 0 for a thread that only watches (a watchdog polling events) */
static inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/* children.c: a process the rank started counts its calls (a buffer to fill, dropped); the rank's fork marks it */
thread_buf *maya_child_call(int api, int domain, int kind);
void maya_child_memory(int what, int space); /* memory.c's event (a3: 0 alloc, 1 free, 2 oom; a4: 1 host) */
void maya_child_forked(void);

/* memory.c */
extern size_t n_allocs;
void publish_memory(void);

/* kernels.c */
extern int64_t next_kernel_id;

/* device_time.c: while a timing mark is live, device work is logged for the oracle */
extern atomic_int timing_logging;
void maya_timing_log(const maya_rec *r);

/* graphs.c */
extern atomic_int captures_active;
void divert_to_graph(maya_rec *r); /* a record issued on a capturing stream goes to its graph */

#pragma GCC visibility pop
#endif
