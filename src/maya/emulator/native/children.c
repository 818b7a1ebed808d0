/* Processes the rank starts: their device calls are counted, not recorded. The capture is the rank's own
 * process; a process it starts (a subprocess, a multiprocessing or DataLoader worker, a compile worker, a tool)
 * inherits the preloaded stubs and the configuration. Its first recorded call opens children/<pid>.bin in the
 * rank's capture (maya_child_report, a shared mapping: counts survive _exit), its first device call prints one
 * line on its stderr, and every call counts there. The rank's own calls never come here (record.c: only a
 * thread with no buffer does, and a child never gets one). */
#define _GNU_SOURCE
#include <sys/stat.h>

#include "core.h"

static pthread_mutex_t child_lock = PTHREAD_MUTEX_INITIALIZER;
static int opened;                   /* this process's report was opened (or could not be) */
static maya_child_report *report;    /* NULL: none (no rank's capture, or the file could not be made) */
static int forked;                   /* this process is a fork of the rank, not a program it started */
static __thread thread_buf *scratch; /* where a child's records go, dropped when full (flush_buf) */

/* The kinds that are device work or device memory: what the rank's trace would have priced or held. */
static int kind_is_device(int kind) {
  return kind == K_LAUNCH || kind == K_GEMM || kind == K_COPY || kind == K_MEMSET || kind == K_COLL || kind == K_ATTN ||
         kind == K_ALLOC;
}

static void read_command(char *out, size_t size) {
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, out, size - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) n = 0;
  out[n] = 0;
  while (n > 0 && out[n - 1] == 0) n--; /* the last argument's terminator */
  for (ssize_t i = 0; i < n; i++)
    if (!out[i]) out[i] = ' ';
}

static maya_child_report *open_report(void) {
  if (!configured) return NULL;
  char path[4200];
  snprintf(path, sizeof path, "%s/children", out_dir);
  mkdir(path, 0755); /* made by the first child; EEXIST after */
  snprintf(path, sizeof path, "%s/children/%ld.bin", out_dir, (long)getpid());
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return NULL;
  void *p = ftruncate(fd, sizeof(maya_child_report)) == 0
                ? mmap(NULL, sizeof(maya_child_report), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return NULL;
  maya_child_report *r = p;
  r->pid = getpid();
  r->rank_pid = maya_rank_pid();
  r->forked = forked;
  read_command(r->command, sizeof r->command);
  return r;
}

thread_buf *maya_child_call(int api, int domain, int kind) {
  int device = kind_is_device(kind);
  const char *name = kind == K_ALLOC ? "a device allocation" : maya_api_name(api); /* memory.c's "<memory>" */
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
      fprintf(stderr,
              "maya emulator: process %ld (%s) calls %s: it is not the emulated rank (pid %ld) but a process "
              "the rank started, whose device calls are counted, not recorded nor priced (maya emulate reports "
              "them)\n",
              (long)report->pid, forked ? "a fork of the rank" : report->command, report->first_device_api,
              (long)report->rank_pid);
    }
  }
  pthread_mutex_unlock(&child_lock);
  if (!scratch) {
    scratch = calloc(1, sizeof *scratch);
    scratch->fd = -1;
    scratch->tid = syscall(SYS_gettid);
  }
  return scratch;
}

void maya_child_forked(void) {
  pthread_mutex_init(&child_lock, NULL); /* another thread may have held it at the fork */
  opened = 0;
  report = NULL; /* the parent's mapping, if the parent was a child itself */
  forked = 1;
}
