/* Processes the rank starts: their device calls are counted, not recorded. The capture is the rank's own
 * process; a process it starts (a subprocess, a multiprocessing or DataLoader worker, a compile worker, a tool)
 * inherits the preloaded stubs and the configuration. Its first recorded call opens children/<pid>.bin in the
 * rank's capture (<pid>-<n>.bin if a process with its pid made one; maya_child_report, a shared mapping: counts
 * survive _exit), its first device call prints one line on its stderr, and every call counts there. Device calls
 * are device work and device allocations (not pinned host memory, frees or failed allocations). The rank's own
 * calls never come here (record.c: only a thread with no buffer does, and a child never gets one). */
#define _GNU_SOURCE
#include <sys/stat.h>

#include "core.h"

static pthread_mutex_t child_lock = PTHREAD_MUTEX_INITIALIZER;
static int opened;                   /* this process's report was opened (or could not be) */
static maya_child_report *report;    /* NULL: none (no rank's capture, or the file could not be made) */
static int forked;                   /* this process is a fork (of parent), not a program started */
static long parent;                  /* the forking process's pid; 0: ask at the first call */
static __thread thread_buf *scratch; /* where a child's records go, dropped when full (flush_buf) */

/* The kinds that are device work: what the rank's trace would have priced (memory: maya_child_memory). */
static int kind_is_device(int kind) {
  return kind == K_LAUNCH || kind == K_GEMM || kind == K_COPY || kind == K_MEMSET || kind == K_COLL || kind == K_ATTN;
}

/* The command line, its arguments and any whitespace in them (a multi-line `python -c`) joined by one space. */
static void read_command(char *out, size_t size) {
  char raw[1024];
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, raw, sizeof raw);
  if (fd >= 0) close(fd);
  size_t k = 0;
  for (ssize_t i = 0; i < n && k + 1 < size; i++) {
    int gap = !raw[i] || raw[i] == ' ' || raw[i] == '\n' || raw[i] == '\t' || raw[i] == '\r';
    if (!gap)
      out[k++] = raw[i];
    else if (k && out[k - 1] != ' ')
      out[k++] = ' ';
  }
  while (k && out[k - 1] == ' ') k--;
  out[k] = 0;
}

/* children/<pid>.bin, made here (never another's: a reused pid gets <pid>-<n>.bin) */
static int create_report(void) {
  char path[4200];
  snprintf(path, sizeof path, "%s/children", out_dir);
  mkdir(path, 0755); /* made by the first child; EEXIST after */
  for (int n = 0; n < 1000; n++) {
    if (n)
      snprintf(path, sizeof path, "%s/children/%ld-%d.bin", out_dir, (long)getpid(), n);
    else
      snprintf(path, sizeof path, "%s/children/%ld.bin", out_dir, (long)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

static maya_child_report *open_report(void) {
  if (!configured) return NULL;
  int fd = create_report();
  if (fd < 0) return NULL;
  void *p = ftruncate(fd, sizeof(maya_child_report)) == 0
                ? mmap(NULL, sizeof(maya_child_report), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return NULL;
  maya_child_report *r = p;
  r->pid = getpid();
  r->rank_pid = maya_rank_pid();
  r->parent_pid = parent ? parent : getppid();
  r->forked = forked;
  read_command(r->command, sizeof r->command);
  return r;
}

/* Counts one call named `name` (a device call if `device`); the first device call says so on stderr. */
static void count(const char *name, int domain, int device) {
  pthread_mutex_lock(&child_lock);
  if (!opened) {
    opened = 1;
    report = open_report();
    if (report) {
      report->first_domain = domain;
      snprintf(report->first_api, sizeof report->first_api, "%s", name);
    }
  }
  if (report) {
    report->calls++;
    if (device && !report->device_calls++) {
      snprintf(report->first_device_api, sizeof report->first_device_api, "%s", name);
      char what[1100];
      if (forked && report->parent_pid == report->rank_pid)
        snprintf(what, sizeof what, "a fork of the rank");
      else if (forked)
        snprintf(what, sizeof what, "a fork of pid %ld, %s", (long)report->parent_pid, report->command);
      else
        snprintf(what, sizeof what, "%s", report->command);
      fprintf(stderr,
              "maya emulator: process %ld (%s) calls %s: it is not the emulated rank (pid %ld) but a process "
              "the rank started, whose device calls are counted, not recorded nor priced (maya emulate reports "
              "them)\n",
              (long)report->pid, what, report->first_device_api, (long)report->rank_pid);
    }
  }
  pthread_mutex_unlock(&child_lock);
}

thread_buf *maya_child_call(int api, int domain, int kind) {
  if (kind != K_ALLOC) count(maya_api_name(api), domain, kind_is_device(kind));
  if (!scratch) {
    scratch = calloc(1, sizeof *scratch);
    scratch->fd = -1;
    scratch->tid = syscall(SYS_gettid);
  }
  return scratch;
}

void maya_child_memory(int what, int space) {
  static const char *const device[] = {"a device allocation", "a device free", "a failed device allocation (OOM)"};
  static const char *const host[] = {"a pinned host allocation", "a pinned host free"}; /* never fails */
  count((space ? host : device)[what], D_RUNTIME, what == 0 && !space);
}

void maya_child_forked(void) {
  pthread_mutex_init(&child_lock, NULL); /* another thread may have held it at the fork */
  opened = 0;
  report = NULL; /* the parent's mapping, if the parent was a child itself */
  forked = 1;
  parent = getppid();
}
