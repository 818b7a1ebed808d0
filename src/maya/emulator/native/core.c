/* libmaya_emu.so: configuration, recording, virtual device memory and kernel registry. */
#define _GNU_SOURCE
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

int maya_ndev = 1;
maya_device_cfg maya_dev[MAYA_MAX_DEVICES];
int maya_rank = 0;

static char out_dir[4096] = ".";
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int64_t seq_counter;
static _Atomic int64_t id_counter = 16; /* small ids are reserved (0 = default stream) */
static size_t reserved_per_device = 0;   /* memory the CUDA context itself would hold */

/* ------------------------------------------------------------------ configuration */

static void set_defaults(maya_device_cfg *d) {
  snprintf(d->name, sizeof d->name, "NVIDIA H100 80GB HBM3");
  d->major = 9; d->minor = 0; d->sm_count = 132;
  d->memory_bytes = 85520809984ull;
  d->clock_khz = 1980000; d->mem_clock_khz = 2619000; d->bus_width_bits = 5120;
  d->l2_bytes = 52428800; d->smem_per_sm = 233472; d->smem_per_block_optin = 232448;
  d->max_threads_per_sm = 2048; d->regs_per_sm = 65536;
  d->power_limit_w = 700;
}

static int configured; /* a rank's configuration was read (out_dir is its capture directory) */

static void load_config(void) {
  configured = 0;
  for (int i = 0; i < MAYA_MAX_DEVICES; i++) set_defaults(&maya_dev[i]);
  const char *path = getenv("MAYA_EMU_CONFIG");
  if (!path) return;
  FILE *f = fopen(path, "r");
  if (!f) { fprintf(stderr, "maya emulator: cannot read config %s\n", path); return; }
  configured = 1;
  char line[1024];
  maya_device_cfg d;
  set_defaults(&d);
  while (fgets(line, sizeof line, f)) {
    char *eq = strchr(line, '=');
    if (!eq) continue;
    *eq = 0;
    char *key = line, *val = eq + 1;
    val[strcspn(val, "\n")] = 0;
    if (!strcmp(key, "out_dir")) snprintf(out_dir, sizeof out_dir, "%s", val);
    else if (!strcmp(key, "devices")) maya_ndev = atoi(val);
    else if (!strcmp(key, "rank")) maya_rank = atoi(val);
    else if (!strcmp(key, "reserved_bytes")) reserved_per_device = strtoull(val, 0, 10);
    else if (!strcmp(key, "name")) snprintf(d.name, sizeof d.name, "%s", val);
    else if (!strcmp(key, "major")) d.major = atoi(val);
    else if (!strcmp(key, "minor")) d.minor = atoi(val);
    else if (!strcmp(key, "sm_count")) d.sm_count = atoi(val);
    else if (!strcmp(key, "memory_bytes")) d.memory_bytes = strtoull(val, 0, 10);
    else if (!strcmp(key, "clock_khz")) d.clock_khz = atoi(val);
    else if (!strcmp(key, "mem_clock_khz")) d.mem_clock_khz = atoi(val);
    else if (!strcmp(key, "bus_width_bits")) d.bus_width_bits = atoi(val);
    else if (!strcmp(key, "l2_bytes")) d.l2_bytes = atoi(val);
    else if (!strcmp(key, "smem_per_sm")) d.smem_per_sm = atoi(val);
    else if (!strcmp(key, "smem_per_block_optin")) d.smem_per_block_optin = atoi(val);
    else if (!strcmp(key, "max_threads_per_sm")) d.max_threads_per_sm = atoi(val);
    else if (!strcmp(key, "regs_per_sm")) d.regs_per_sm = atoi(val);
    else if (!strcmp(key, "power_limit_w")) d.power_limit_w = atoi(val);
  }
  fclose(f);
  if (maya_ndev < 1) maya_ndev = 1;
  if (maya_ndev > MAYA_MAX_DEVICES) maya_ndev = MAYA_MAX_DEVICES;
  for (int i = 0; i < maya_ndev; i++) maya_dev[i] = d;
}

/* ------------------------------------------------------------------ recording */

#define BUF_RECORDS 8192

typedef struct thread_buf {
  maya_rec recs[BUF_RECORDS];
  int n;
  int fd;
  int64_t tid;
  struct thread_buf *next;
} thread_buf;

static thread_buf *all_bufs;
static __thread thread_buf *my_buf;
static __thread int current_device;
static __thread int64_t current_op = -1;
static int finished;

int64_t maya_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

int64_t maya_next_seq(void) { return atomic_fetch_add_explicit(&seq_counter, 1, memory_order_relaxed); }
int64_t maya_stream_id(const void *s) {
  /* NULL, cudaStreamLegacy (0x1) and cudaStreamPerThread (0x2) are the default stream */
  return (uintptr_t)s <= 2 ? 0 : ((const maya_stream *)s)->id;
}

int64_t maya_new_id(void) { return atomic_fetch_add_explicit(&id_counter, 1, memory_order_relaxed); }

static void write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "maya emulator: writing the trace failed: %s\n", strerror(errno));
      return;
    }
    p += w;
    n -= (size_t)w;
  }
}

static int forked_child; /* not the emulated process itself (a DataLoader fork, a worker it started): no trace */

static void flush_buf(thread_buf *b) {
  if (forked_child) b->n = 0;
  if (!b->n) return;
  if (b->fd < 0) {
    char path[4200];
    snprintf(path, sizeof path, "%s/calls-%ld.bin", out_dir, (long)b->tid);
    b->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (b->fd < 0) { fprintf(stderr, "maya emulator: cannot open %s: %s\n", path, strerror(errno)); b->n = 0; return; }
  }
  write_all(b->fd, b->recs, sizeof(maya_rec) * (size_t)b->n);
  b->n = 0;
}

static thread_buf *get_buf(void) {
  if (my_buf) return my_buf;
  thread_buf *b = calloc(1, sizeof *b);
  b->fd = -1;
  b->tid = syscall(SYS_gettid);
  pthread_mutex_lock(&lock);
  b->next = all_bufs;
  all_bufs = b;
  pthread_mutex_unlock(&lock);
  my_buf = b;
  return b;
}

maya_rec *maya_begin(int api, int domain, int kind) {
  thread_buf *b = get_buf();
  if (b->n == BUF_RECORDS) flush_buf(b);
  maya_rec *r = &b->recs[b->n++];
  memset(r, 0, sizeof *r);
  r->seq = maya_next_seq();
  r->tid = b->tid;
  r->api = api;
  r->domain = domain;
  r->kind = kind;
  r->device = current_device;
  r->op = current_op;
  r->start_ns = maya_now();
  return r;
}

static atomic_int captures_active;
static void divert_to_graph(maya_rec *r);

/* What the thread did since its last host read (see "host reads"): a hash of its calls' APIs and, for
 * device work, kernels, shapes and sizes (not addresses, times or allocations). */
#define WINDOW_SEED 1469598103934665603ull
static __thread uint64_t window = WINDOW_SEED;
static __thread int window_work; /* device work (kernels, copies to the device, collectives) since then */

static inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

void maya_end(maya_rec *r, int status) {
  r->status = status;
  r->dur_ns = maya_now() - r->start_ns;
  if (r->kind != K_ALLOC) {
    window = mix(window, (uint64_t)r->api);
    if (r->kind == K_LAUNCH || r->kind == K_GEMM || r->kind == K_COPY || r->kind == K_MEMSET || r->kind == K_ATTN)
      for (int i = 0; i < 3; i++) window = mix(window, (uint64_t)r->a[i]);
    window_work |= r->kind == K_LAUNCH || r->kind == K_GEMM || r->kind == K_MEMSET || r->kind == K_ATTN ||
                   r->kind == K_COLL || (r->kind == K_COPY && r->a[1] != 2);
  }
  if (__builtin_expect(atomic_load_explicit(&captures_active, memory_order_relaxed) > 0, 0)) divert_to_graph(r);
}

void maya_flush_all(void) {
  pthread_mutex_lock(&lock);
  for (thread_buf *b = all_bufs; b; b = b->next) {
    flush_buf(b);
    if (b->fd >= 0) fsync(b->fd);
  }
  pthread_mutex_unlock(&lock);
}

void maya_side_write(const char *file, const char *line) {
  if (forked_child) return;
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", out_dir, file);
  pthread_mutex_lock(&lock);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    write_all(fd, line, strlen(line));
    close(fd);
  }
  pthread_mutex_unlock(&lock);
}

/* API names -> ids, so records stay fixed-size; apis.tsv maps them back. */
#define MAX_APIS 4096
static const char *api_names[MAX_APIS];
static int n_apis;

int maya_api_id(const char *name) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_apis; i++)
    if (!strcmp(api_names[i], name)) { pthread_mutex_unlock(&lock); return i; }
  int id = n_apis < MAX_APIS ? n_apis++ : MAX_APIS - 1;
  api_names[id] = strdup(name);
  pthread_mutex_unlock(&lock);
  char line[512];
  snprintf(line, sizeof line, "%d\t%s\n", id, name);
  maya_side_write("apis.tsv", line);
  return id;
}

void maya_unimplemented(const char *name, int domain) {
  maya_rec *r = maya_begin(maya_api_id(name), domain, K_PLAIN);
  r->flags |= F_UNIMPLEMENTED;
  maya_end(r, -1);
  static __thread int depth;
  if (depth++ == 0) {
    fprintf(stderr, "maya emulator: unimplemented CUDA API %s called; it fails (see the trace's "
                    "unimplemented count)\n", name);
  }
  depth--;
}

/* ------------------------------------------------------------------ host reads
 * A device-to-host copy gives the host what the device memory holds: real bytes where a small copy or
 * memset put them, else whatever the allocation last held (kernels write nothing here). A loop whose
 * condition is such a value (`while not done.item()`, trunc_normal_'s `if not mask.any(): break`,
 * `while (x > tol).any()`) would then test the same stale bytes forever. So the reads of one scalar
 * (up to 8 bytes: .item(), bool(), .any(), torch.equal, nonzero's count) are watched per thread: a read
 * is keyed by what the thread did since its previous read (the window hash) and its size; the same key
 * again, with device work in between (a loop recomputes its condition; reads of one element after
 * another do nothing in between) and no training progress (an iteration ended or autograd ran a backward
 * op), is the script coming back around a loop, and the read returns the opposite of what that key
 * returned last: zero for a non-zero value, one (of the element type, when the read is an .item()) for zero.
 * A loop whose condition a stand-in can decide therefore ends within two passes. One that goes on
 * for MAYA_EMU_LOOP_LIMIT repeated reads (default 10000) without a new read or progress is stopped:
 * its read fails with a message naming the ops it is in, which the script sees as a CUDA error. */

#define READ_HISTORY 8
#define DEFAULT_LOOP_LIMIT 10000

typedef struct {
  uint64_t key;
  unsigned char value[8]; /* what the read returned last */
} read_site;

static _Atomic int64_t progress_epoch;
static _Atomic int64_t graph_launches;
static __thread read_site history[READ_HISTORY];
static __thread int history_n, history_next;
static __thread int64_t history_epoch = -1, loop_reads;
static __thread unsigned char one_value[8];
static __thread int one_size; /* the element size of the scalar being read (.item()), 0 if unknown */
static const char *(*describe_ops)(void); /* the ops open on this thread (the op observer) */
static char stop_reason[1024];
static _Atomic int stopped;

MAYA_EXPORT void maya_emu_progress(void) { atomic_fetch_add_explicit(&progress_epoch, 1, memory_order_relaxed); }
MAYA_EXPORT int64_t maya_emu_graph_launches(void) { return atomic_load(&graph_launches); }
MAYA_EXPORT void maya_emu_describe_ops(const char *(*fn)(void)) { describe_ops = fn; }

/* The value 1 of the element type the thread's next scalar read has (set by the op observer around
 * aten::_local_scalar_dense; size 0 clears it). */
MAYA_EXPORT void maya_emu_read_one(const void *one, int size) {
  one_size = size > 0 && size <= 8 ? size : 0;
  if (one_size) memcpy(one_value, one, (size_t)one_size);
}

static long loop_limit(void) {
  static long limit = -1;
  if (limit < 0) {
    const char *v = getenv("MAYA_EMU_LOOP_LIMIT");
    limit = v && *v ? strtol(v, NULL, 10) : DEFAULT_LOOP_LIMIT;
  }
  return limit;
}

const char *maya_stop_reason(void) { return atomic_load(&stopped) ? stop_reason : NULL; }
MAYA_EXPORT const char *maya_emu_stop_reason(void) { return maya_stop_reason(); } /* for the runner */

static int stop_loop(void) {
  if (!atomic_exchange(&stopped, 1)) {
    const char *ops = describe_ops ? describe_ops() : NULL;
    snprintf(stop_reason, sizeof stop_reason,
             "maya emulator stopped the rank: it read the same device value %ld times, each time after the same "
             "work, with no training progress (no optimizer step, no backward) and the stand-ins 0 and 1 both "
             "tried: a loop on device values that emulation cannot end (the read is in %s). Set "
             "MAYA_EMU_LOOP_LIMIT to allow longer loops", loop_limit(), ops && *ops ? ops : "no framework op");
    fprintf(stderr, "%s\n", stop_reason);
  }
  return -1;
}

int maya_host_read(maya_rec *r, void *dst, const void *src, size_t n) {
  r->flags |= F_DATA_DEPENDENT; /* the host reads what only the GPU would compute */
  maya_copy(dst, src, n);
  uint64_t key = mix(window, n);
  int work = window_work;
  window = WINDOW_SEED;
  window_work = 0;
  if (n == 0 || n > 8 || !dst || !work) return 0;
  int64_t epoch = atomic_load_explicit(&progress_epoch, memory_order_relaxed);
  if (epoch != history_epoch) {
    history_epoch = epoch;
    history_n = history_next = 0;
    loop_reads = 0;
  }
  read_site *site = NULL;
  for (int i = 0; i < history_n && !site; i++)
    if (history[i].key == key) site = &history[i];
  if (!site) {
    site = &history[history_next];
    history_next = (history_next + 1) % READ_HISTORY;
    if (history_n < READ_HISTORY) history_n++;
    site->key = key;
    memcpy(site->value, dst, n);
    loop_reads = 0;
    return 0;
  }
  long limit = loop_limit();
  if (limit > 0 && ++loop_reads > limit) return stop_loop();
  int zero = 1;
  for (size_t i = 0; i < n; i++) zero &= site->value[i] == 0;
  unsigned char value[8] = {0};
  if (zero) {
    if ((size_t)one_size == n) memcpy(value, one_value, n);
    else value[0] = 1; /* an integer 1, little-endian */
  }
  memcpy(dst, value, n);
  memcpy(site->value, value, n);
  r->a[3] = zero ? 2 : 1;
  return 0;
}

/* ------------------------------------------------------------------ devices and threads */

void maya_emu_set_op(int64_t op) { current_op = op; }
int maya_current_device(void) { return current_device; }
void maya_set_current_device(int d) { current_device = d; }

/* ------------------------------------------------------------------ memory
 * Device allocations are real, lazily-backed host mappings (MAP_NORESERVE): pointers are unique
 * and small copies into them work, while untouched pages cost nothing. */

typedef struct {
  uintptr_t base;
  size_t size;
  int device;
  int host;
} alloc;

/* allocations sorted by base address: exact and interior lookups by binary search */
static alloc *allocs;
static size_t n_allocs, cap_allocs;
static size_t used[MAYA_MAX_DEVICES];
static _Atomic int64_t *published; /* used[], shared with the processes the rank starts (device_memory) */

static void publish_memory(void) {
  if (!configured) return;
  char path[4200];
  snprintf(path, sizeof path, "%s/device_memory", out_dir);
  int fd = open(path, (forked_child ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, 0644);
  if (fd < 0) return;
  size_t size = MAYA_MAX_DEVICES * sizeof(int64_t);
  if (!forked_child && ftruncate(fd, (off_t)size) != 0) { close(fd); return; }
  void *p = mmap(NULL, size, forked_child ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  published = p == MAP_FAILED ? NULL : p;
}

size_t maya_dev_used_by_rank(int device) {
  return forked_child ? (published ? (size_t)atomic_load(&published[device]) : 0) : used[device];
}

long maya_rank_pid(void) {
  const char *pid = getenv("MAYA_EMU_RANK_PID");
  return pid && *pid ? strtol(pid, NULL, 10) : (long)getpid();
}

static size_t lower_bound(uintptr_t p) { /* first index with base > p */
  size_t lo = 0, hi = n_allocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (allocs[mid].base <= p) lo = mid + 1; else hi = mid;
  }
  return lo;
}

static void add_alloc(uintptr_t base, size_t size, int device, int host) {
  if (n_allocs == cap_allocs) {
    cap_allocs = cap_allocs ? 2 * cap_allocs : 1024;
    allocs = realloc(allocs, cap_allocs * sizeof *allocs);
  }
  size_t i = lower_bound(base);
  memmove(&allocs[i + 1], &allocs[i], (n_allocs - i) * sizeof *allocs);
  allocs[i] = (alloc){base, size, device, host};
  n_allocs++;
}

static alloc *find_alloc(uintptr_t p) { /* the allocation containing p */
  size_t i = lower_bound(p);
  if (i == 0) return NULL;
  alloc *a = &allocs[i - 1];
  return p < a->base + a->size ? a : NULL;
}

static int take_alloc(uintptr_t base, alloc *out) {
  alloc *a = find_alloc(base);
  if (!a || a->base != base) return 0;
  *out = *a;
  size_t i = (size_t)(a - allocs);
  memmove(&allocs[i], &allocs[i + 1], (n_allocs - i - 1) * sizeof *allocs);
  n_allocs--;
  return 1;
}

static void record_mem(int kind, int device, uintptr_t addr, size_t bytes, int64_t stream, int space) {
  if (published && !forked_child) atomic_store(&published[device], (int64_t)used[device]);
  static int api = -1;
  if (api < 0) api = maya_api_id("<memory>");
  maya_rec *r = maya_begin(api, D_RUNTIME, K_ALLOC);
  r->device = device;
  r->stream = stream;
  r->a[0] = (int64_t)addr; r->a[1] = (int64_t)bytes; r->a[2] = (int64_t)used[device];
  r->a[3] = kind; r->a[4] = space;
  maya_end(r, 0);
}

void *maya_dev_alloc(int device, size_t bytes, int64_t stream, int *oom) {
  *oom = 0;
  size_t rounded = (bytes + 511) & ~(size_t)511;
  if (rounded == 0) rounded = 512;
  pthread_mutex_lock(&lock);
  size_t cap = maya_dev[device].memory_bytes - reserved_per_device;
  if (used[device] + rounded > cap) {
    pthread_mutex_unlock(&lock);
    *oom = 1;
    record_mem(2, device, 0, bytes, stream, 0);
    return NULL;
  }
  used[device] += rounded;
  pthread_mutex_unlock(&lock);
  void *p = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    pthread_mutex_lock(&lock);
    used[device] -= rounded;
    pthread_mutex_unlock(&lock);
    *oom = 1;
    return NULL;
  }
  pthread_mutex_lock(&lock);
  add_alloc((uintptr_t)p, rounded, device, 0);
  pthread_mutex_unlock(&lock);
  record_mem(0, device, (uintptr_t)p, bytes, stream, 0);
  return p;
}

int maya_dev_free(void *ptr, int64_t stream) {
  if (!ptr) return 0;
  alloc a;
  pthread_mutex_lock(&lock);
  alloc *found = find_alloc((uintptr_t)ptr);
  int ok = found && found->base == (uintptr_t)ptr && !found->host && take_alloc((uintptr_t)ptr, &a);
  if (ok) used[a.device] -= a.size;
  pthread_mutex_unlock(&lock);
  if (!ok) return -1;
  record_mem(1, a.device, a.base, a.size, stream, 0);
  munmap((void *)a.base, a.size);
  return 0;
}

int maya_dev_lookup(const void *ptr, int *device, size_t *size) {
  pthread_mutex_lock(&lock);
  alloc *a = find_alloc((uintptr_t)ptr);
  int found = a ? (a->host ? 2 : 1) : 0;
  if (a && device) *device = a->device;
  if (a && size) *size = a->size;
  pthread_mutex_unlock(&lock);
  return found;
}

size_t maya_dev_used(int device) { return used[device]; }

void *maya_host_alloc(size_t bytes) {
  size_t rounded = (bytes + 4095) & ~(size_t)4095;
  if (!rounded) rounded = 4096;
  void *p = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  pthread_mutex_lock(&lock);
  add_alloc((uintptr_t)p, rounded, current_device, 1);
  pthread_mutex_unlock(&lock);
  record_mem(0, current_device, (uintptr_t)p, bytes, -1, 1);
  return p;
}

int maya_host_free(void *ptr) {
  if (!ptr) return 0;
  alloc a;
  pthread_mutex_lock(&lock);
  alloc *found = find_alloc((uintptr_t)ptr);
  int ok = found && found->host && take_alloc((uintptr_t)ptr, &a);
  pthread_mutex_unlock(&lock);
  if (!ok) return -1;
  record_mem(1, a.device, a.base, a.size, -1, 1);
  munmap((void *)a.base, a.size);
  return 0;
}

int maya_is_host_alloc(const void *ptr) { return maya_dev_lookup(ptr, NULL, NULL) == 2; }

void maya_copy(void *dst, const void *src, size_t n) {
  if (n <= MAYA_SMALL_COPY && dst && src && dst != src) memmove(dst, src, n);
}

void maya_set(void *dst, int value, size_t n) {
  if (n <= MAYA_SMALL_COPY && dst) memset(dst, value, n);
}

/* ------------------------------------------------------------------ kernels */

typedef struct kern {
  const void *host_fun;
  const char *name;
  const void *module; /* the fat binary the kernel was registered from (cudart.c), NULL if none */
  int64_t id;
  struct kern *next;
} kern;

#define KERNEL_BUCKETS 131072
static kern *kernels[KERNEL_BUCKETS];
static int64_t next_kernel_id;

static unsigned kbucket(const void *p) { return (unsigned)(((uintptr_t)p >> 4) * 2654435761u) % KERNEL_BUCKETS; }

void maya_register_kernel(const void *host_fun, const char *name, const void *module) {
  kern *k = malloc(sizeof *k);
  k->host_fun = host_fun; k->name = name; k->module = module; k->id = -1;
  unsigned h = kbucket(host_fun);
  pthread_mutex_lock(&lock);
  k->next = kernels[h];
  kernels[h] = k;
  pthread_mutex_unlock(&lock);
}

const void *maya_kernel_module(const void *host_fun) {
  unsigned h = kbucket(host_fun);
  pthread_mutex_lock(&lock);
  kern *k = kernels[h];
  while (k && k->host_fun != host_fun) k = k->next; /* the latest registration, as maya_kernel_id */
  const void *module = k ? k->module : NULL;
  pthread_mutex_unlock(&lock);
  return module;
}

static int64_t assign_id(kern *k) {
  k->id = next_kernel_id++;
  size_t len = strlen(k->name) + 32;
  char *line = malloc(len);
  snprintf(line, len, "%ld\t%s\n", (long)k->id, k->name);
  pthread_mutex_unlock(&lock);
  maya_side_write("kernels.tsv", line);
  pthread_mutex_lock(&lock);
  free(line);
  return k->id;
}

int64_t maya_kernel_id(const void *host_fun) {
  unsigned h = kbucket(host_fun);
  pthread_mutex_lock(&lock);
  kern *k = kernels[h];
  while (k && k->host_fun != host_fun) k = k->next;
  if (!k) {
    char *name = malloc(48);
    snprintf(name, 48, "unregistered_kernel_%p", host_fun);
    k = malloc(sizeof *k);
    k->host_fun = host_fun; k->name = name; k->module = NULL; k->id = -1;
    k->next = kernels[h];
    kernels[h] = k;
  }
  int64_t id = k->id >= 0 ? k->id : assign_id(k);
  pthread_mutex_unlock(&lock);
  return id;
}

int64_t maya_kernel_id_by_name(const char *name) {
  /* library kernels (cuBLAS, cuDNN, NCCL) are keyed by their interned name */
  static kern *named;
  pthread_mutex_lock(&lock);
  kern *k = named;
  while (k && strcmp(k->name, name)) k = k->next;
  if (!k) {
    k = malloc(sizeof *k);
    k->host_fun = NULL; k->name = strdup(name); k->module = NULL; k->id = -1;
    k->next = named;
    named = k;
  }
  int64_t id = k->id >= 0 ? k->id : assign_id(k);
  pthread_mutex_unlock(&lock);
  return id;
}

/* ------------------------------------------------------------------ CUDA graphs */

struct maya_graph {
  int64_t id, origin;
  maya_rec *recs;
  size_t n, cap;
  maya_user_object **owned; /* one entry per reference the graph holds */
  size_t n_owned, cap_owned;
};

/* User objects (cudaUserObjectCreate): a host pointer and its destructor, run when the last reference
 * goes, a graph's references included (NCCL keeps its buffers alive this way while a graph captures
 * collectives). Real CUDA may run the destructor later, on its own thread; here it runs at once. */
struct maya_user_object {
  void *ptr;
  void (*destroy)(void *);
  _Atomic long refs;
};

maya_user_object *maya_user_object_create(void *ptr, void (*destroy)(void *), unsigned refs) {
  maya_user_object *o = calloc(1, sizeof *o);
  o->ptr = ptr;
  o->destroy = destroy;
  atomic_store(&o->refs, (long)refs);
  return o;
}

void maya_user_object_retain(maya_user_object *o, unsigned n) { atomic_fetch_add(&o->refs, (long)n); }

void maya_user_object_release(maya_user_object *o, unsigned n) {
  if (atomic_fetch_sub(&o->refs, (long)n) == (long)n) {
    if (o->destroy) o->destroy(o->ptr);
    free(o);
  }
}

void maya_graph_hold(maya_graph *g, maya_user_object *o, unsigned n) {
  pthread_mutex_lock(&lock);
  for (unsigned i = 0; i < n; i++) {
    if (g->n_owned == g->cap_owned) {
      g->cap_owned = g->cap_owned ? 2 * g->cap_owned : 8;
      g->owned = realloc(g->owned, g->cap_owned * sizeof *g->owned);
    }
    g->owned[g->n_owned++] = o;
  }
  pthread_mutex_unlock(&lock);
}

int maya_graph_unhold(maya_graph *g, maya_user_object *o, unsigned n) {
  pthread_mutex_lock(&lock);
  size_t held = 0;
  for (size_t i = 0; i < g->n_owned; i++) held += g->owned[i] == o;
  int ok = held >= n;
  for (size_t i = g->n_owned; ok && n && i-- > 0;) {
    if (g->owned[i] != o) continue;
    g->owned[i] = g->owned[--g->n_owned];
    n--;
  }
  pthread_mutex_unlock(&lock);
  return ok ? 0 : -1;
}

#define MAX_CAPTURING 64
static struct { int64_t stream; maya_graph *g; } capturing[MAX_CAPTURING];
static int n_capturing;

static maya_graph *find_capture(int64_t stream) {
  for (int i = 0; i < n_capturing; i++)
    if (capturing[i].stream == stream) return capturing[i].g;
  return NULL;
}

maya_graph *maya_capturing(int64_t stream) {
  /* asked on every event record and by the caching allocator: no lock while nothing captures */
  if (!atomic_load_explicit(&captures_active, memory_order_relaxed)) return NULL;
  pthread_mutex_lock(&lock);
  maya_graph *g = find_capture(stream);
  pthread_mutex_unlock(&lock);
  return g;
}

void maya_capture_join(int64_t stream, maya_graph *g) {
  pthread_mutex_lock(&lock);
  if (!find_capture(stream) && n_capturing < MAX_CAPTURING) {
    capturing[n_capturing].stream = stream;
    capturing[n_capturing++].g = g;
    atomic_fetch_add(&captures_active, 1);
  }
  pthread_mutex_unlock(&lock);
}

maya_graph *maya_capture_begin(int64_t stream) {
  maya_graph *g = calloc(1, sizeof *g);
  g->id = maya_new_id();
  g->origin = stream;
  maya_capture_join(stream, g);
  return g;
}

maya_graph *maya_capture_end(int64_t stream) {
  pthread_mutex_lock(&lock);
  maya_graph *g = find_capture(stream);
  for (int i = 0; g && i < n_capturing;) { /* every stream that joined this capture leaves it */
    if (capturing[i].g == g) {
      capturing[i] = capturing[--n_capturing];
      atomic_fetch_sub(&captures_active, 1);
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&lock);
  return g;
}

static void divert_to_graph(maya_rec *r) {
  if (r->kind == K_PLAIN || r->kind == K_ALLOC || r->kind == K_SYNC) return;
  thread_buf *b = my_buf;
  if (!b || !b->n || &b->recs[b->n - 1] != r) return;
  pthread_mutex_lock(&lock);
  maya_graph *g = find_capture(r->stream);
  if (g) {
    if (g->n == g->cap) {
      g->cap = g->cap ? 2 * g->cap : 256;
      g->recs = realloc(g->recs, g->cap * sizeof *g->recs);
    }
    g->recs[g->n++] = *r;
    b->n--;
  }
  pthread_mutex_unlock(&lock);
}

int64_t maya_graph_id(const maya_graph *g) { return g->id; }
size_t maya_graph_size(const maya_graph *g) { return g->n; }

void maya_graph_launch(const maya_graph *g, int api, int64_t stream) {
  atomic_fetch_add(&graph_launches, 1);
  maya_rec *launch = maya_begin(api, D_RUNTIME, K_PLAIN);
  launch->stream = stream;
  launch->a[0] = g->id;
  launch->a[1] = (int64_t)g->n;
  maya_end(launch, 0);
  for (size_t i = 0; i < g->n; i++) {
    maya_rec *r = maya_begin(0, 0, 0);
    maya_rec fresh = *r;
    *r = g->recs[i]; /* as captured, op context included; issued now, by this thread */
    r->seq = fresh.seq;
    r->tid = fresh.tid;
    r->start_ns = fresh.start_ns;
    r->dur_ns = 0;
    if (r->stream == g->origin) r->stream = stream;
    r->flags |= F_GRAPH_REPLAY;
  }
}

maya_graph *maya_graph_clone(const maya_graph *g) {
  maya_graph *c = calloc(1, sizeof *c);
  *c = *g;
  c->cap = g->n;
  c->recs = malloc((g->n ? g->n : 1) * sizeof *c->recs);
  memcpy(c->recs, g->recs, g->n * sizeof *c->recs);
  /* an executable graph holds its own references to the graph's user objects */
  c->cap_owned = g->n_owned;
  c->owned = malloc((g->n_owned ? g->n_owned : 1) * sizeof *c->owned);
  memcpy(c->owned, g->owned, g->n_owned * sizeof *c->owned);
  for (size_t i = 0; i < g->n_owned; i++) maya_user_object_retain(g->owned[i], 1);
  return c;
}

void maya_graph_free(maya_graph *g) {
  if (!g) return;
  for (size_t i = 0; i < g->n_owned; i++) maya_user_object_release(g->owned[i], 1);
  free(g->owned);
  free(g->recs);
  free(g);
}

/* ------------------------------------------------------------------ life cycle */

static void at_exit(void) {
  if (finished || forked_child) return;
  finished = 1;
  maya_flush_all();
}

static void in_forked_child(void) { forked_child = 1; }

__attribute__((constructor)) static void init(void) {
  /* a process the rank started (an Inductor compile worker, a tool) inherits the preloaded stubs and the
   * configuration, but the capture directory is the rank's: it records nothing (the runner names the
   * rank's pid) */
  const char *rank_pid = getenv("MAYA_EMU_RANK_PID");
  if (rank_pid && *rank_pid && strtol(rank_pid, NULL, 10) != (long)getpid()) forked_child = 1;
  load_config();
  publish_memory();
  atexit(at_exit);
  pthread_atfork(NULL, NULL, in_forked_child);
}

MAYA_EXPORT void maya_emu_finish(void) { at_exit(); }

/* A rank forked from Maya's zygote (forkserver.py) becomes a fresh emulated process: it records from
 * here on, with the configuration its environment names now. Refused (-1) unless the zygote recorded,
 * interned, registered an id or allocated nothing, so no state of the zygote can leak into a rank. */
MAYA_EXPORT int maya_emu_restart(void) {
  if (atomic_load(&seq_counter) || n_apis || next_kernel_id || n_allocs || all_bufs) return -1;
  forked_child = 0;
  finished = 0;
  maya_ndev = 1;
  maya_rank = 0;
  reserved_per_device = 0;
  snprintf(out_dir, sizeof out_dir, ".");
  load_config();
  publish_memory();
  return 0;
}
