/* Recording: per-thread buffers of fixed-size records flushed to calls-<tid>.bin, side files, API ids,
 * unimplemented APIs, and the device and framework op of each thread. */
#define _GNU_SOURCE
#include "core.h"

thread_buf *all_bufs;
__thread thread_buf *my_buf;
__thread int current_device;
static __thread int64_t current_op = -1;
pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
_Atomic int64_t seq_counter;
static _Atomic int64_t id_counter = 16; /* small ids are reserved (0 = default stream) */
int forked_child; /* not the emulated process itself (a DataLoader fork, a worker it started): counted (children.c) */

int64_t maya_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Thread CPU time: what the framework's host code costs between two calls, whatever else ran on the CPU meanwhile
 * or however long the thread slept (docs/host-time.md). Not in the vDSO: a system call (~0.8 us on the 2-core VM
 * that emulates here), so it is read once at a call's start, and at its end only if the call took longer than
 * MAYA_CPU_SHORT_NS of wall time; a shorter one was not preempted, and its CPU duration is its wall duration. */
#define MAYA_CPU_SHORT_NS 5000
static int64_t cpu_read_ns = -1;      /* CPU cost of one read of the clock (least of 16 back to back) */
static __thread int64_t flush_cpu_ns; /* CPU time the thread spent writing its records out (`flush_buf`) */

static inline int64_t raw_thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Less the writing of full buffers, which happens between two calls and is the recording's, not the script's. */
static inline int64_t thread_cpu(void) { return raw_thread_cpu() - flush_cpu_ns; }

int64_t maya_thread_cpu(void) { return thread_cpu(); }

static void measure_cpu_read(void) {
  int64_t least = INT64_MAX;
  for (int i = 0; i < 16; i++) {
    int64_t a = raw_thread_cpu(), b = raw_thread_cpu();
    if (b - a < least) least = b - a;
  }
  __atomic_store_n(&cpu_read_ns, least, __ATOMIC_RELAXED);
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

static void flush_buf(thread_buf *b) {
  if (forked_child) b->n = 0;
  if (!b->n) return;
  if (b->fd < 0) {
    char path[4200];
    snprintf(path, sizeof path, "%s/calls-%ld.bin", out_dir, (long)b->tid);
    b->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (b->fd < 0) {
      fprintf(stderr, "maya emulator: cannot open %s: %s\n", path, strerror(errno));
      b->n = 0;
      return;
    }
  }
  write_all(b->fd, b->recs, sizeof(maya_rec) * (size_t)b->n);
  b->n = 0;
}

static thread_buf *new_buf(void) {
  thread_buf *b = calloc(1, sizeof *b);
  b->fd = -1;
  b->tid = syscall(SYS_gettid);
  pthread_mutex_lock(&lock);
  b->next = all_bufs;
  all_bufs = b;
  pthread_mutex_unlock(&lock);
  my_buf = b;
  if (__atomic_load_n(&cpu_read_ns, __ATOMIC_RELAXED) < 0) measure_cpu_read();
  return b;
}

static inline maya_rec *record(int api, int domain, int kind) {
  thread_buf *b = my_buf;
  if (__builtin_expect(!b, 0)) b = forked_child ? maya_child_call(api, domain, kind) : new_buf();
  if (b->n == BUF_RECORDS) {
    int64_t before = raw_thread_cpu();
    flush_buf(b);
    flush_cpu_ns += raw_thread_cpu() - before + cpu_read_ns;
  }
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

maya_rec *maya_begin(int api, int domain, int kind) {
  maya_rec *r = record(api, domain, kind);
  r->cpu_ns = thread_cpu(); /* inside the wall duration: wall gaps read as before */
  return r;
}

maya_rec *maya_begin_row(void) {
  maya_rec *r = record(0, 0, 0);
  r->cpu_ns = -1;
  return r;
}

__thread uint64_t window = WINDOW_SEED;
__thread int window_work;
static __thread int64_t kernel_work; /* kernels, GEMMs, attention and memsets this thread issued */
MAYA_EXPORT int64_t maya_emu_kernel_work(void) { return kernel_work; }
static __thread int issued_device_work; /* the thread has issued device work (a watchdog never does) */
int thread_issued_device_work(void) { return issued_device_work; }
static _Atomic int64_t device_work; /* device work the rank has issued (every thread) */
int64_t maya_device_work_issued(void) { return atomic_load_explicit(&device_work, memory_order_relaxed); }

void maya_end(maya_rec *r, int status) {
  r->status = status;
  r->dur_ns = maya_now() - r->start_ns;
  /* The start's read of the CPU clock began inside the wall duration, so a short call's wall duration overstates its
   * CPU end by that read's half before its sample, which the next start's read adds back to the gap. A long call's
   * second read leaves its half after the sample and the next start's half before it in the gap: one whole read,
   * given to the call instead. */
  r->cpu_dur_ns = r->dur_ns <= MAYA_CPU_SHORT_NS ? r->dur_ns : thread_cpu() - r->cpu_ns + cpu_read_ns;
  if (r->kind != K_ALLOC) {
    int kernel = r->kind == K_LAUNCH || r->kind == K_GEMM || r->kind == K_MEMSET || r->kind == K_ATTN;
    int device = kernel || r->kind == K_COLL || r->kind == K_COPY; /* work on the device */
    window = mix(window, (uint64_t)r->api);
    if (kernel || r->kind == K_COPY)
      for (int i = 0; i < 3; i++) window = mix(window, (uint64_t)r->a[i]);
    kernel_work += kernel;
    window_work |= device && !(r->kind == K_COPY && r->a[1] == 2);
    if (device) {
      issued_device_work = 1;
      atomic_fetch_add_explicit(&device_work, 1, memory_order_relaxed);
    }
  }
  if (__builtin_expect(atomic_load_explicit(&captures_active, memory_order_relaxed) > 0, 0)) divert_to_graph(r);
  if (__builtin_expect(atomic_load_explicit(&timing_logging, memory_order_relaxed), 0)) maya_timing_log(r);
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
int n_apis;

int maya_api_id(const char *name) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_apis; i++)
    if (!strcmp(api_names[i], name)) {
      pthread_mutex_unlock(&lock);
      return i;
    }
  int id = n_apis < MAX_APIS ? n_apis++ : MAX_APIS - 1;
  api_names[id] = strdup(name);
  pthread_mutex_unlock(&lock);
  char line[512];
  snprintf(line, sizeof line, "%d\t%s\n", id, name);
  maya_side_write("apis.tsv", line);
  return id;
}

const char *maya_api_name(int api) { return api >= 0 && api < n_apis ? api_names[api] : "?"; }

void maya_unimplemented(const char *name, int domain) {
  maya_rec *r = maya_begin(maya_api_id(name), domain, K_PLAIN);
  r->flags |= F_UNIMPLEMENTED;
  maya_end(r, -1);
  static __thread int depth;
  if (depth++ == 0) {
    fprintf(stderr,
            "maya emulator: unimplemented CUDA API %s called; it fails (see the trace's "
            "unimplemented count)\n",
            name);
  }
  depth--;
}

void maya_emu_set_op(int64_t op) { current_op = op; }
int maya_current_device(void) { return current_device; }
void maya_set_current_device(int d) { current_device = d; }
