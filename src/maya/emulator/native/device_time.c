/* Device time between timing events, from a pluggable oracle: CUDA-event timings (autotuners timing candidate
 * kernels, scripts timing their steps) read an estimate of the work the target GPU runs between the two
 * events, not host time. The runner installs the oracle when `maya emulate` names one (device_time.py).
 *
 * While an oracle is installed and a timing event is recorded, every device-work record (launches, GEMMs,
 * attention, copies, memsets, collectives, graph replays) is copied to a log; a recorded event marks its place
 * in the log; elapsed(start, end) hands the oracle the records between the two marks on the events' streams.
 * The log keeps only what the earliest live mark still needs, and at most MAX_LOG records: a timing whose
 * start was dropped reads host time. */
#define _GNU_SOURCE
#include "core.h"

typedef double (*maya_device_time_fn)(const maya_rec *recs, int64_t n);
static maya_device_time_fn oracle;
atomic_int timing_logging; /* an oracle is installed and a timing mark is live */

#define MAX_LOG (1 << 20) /* records (136 MiB) kept for one mark at most */
static maya_rec *log_recs;
static int64_t log_base, log_n, log_cap; /* log_recs[i] is record number log_base + i */
static int64_t *marks;                   /* live marks (a multiset of record numbers) */
static size_t n_marks, cap_marks;

MAYA_EXPORT void maya_emu_set_device_time(maya_device_time_fn fn) { oracle = fn; }

static void release_locked(int64_t mark);

static void trim(void) { /* drop what no live mark needs, once that is half the log */
  int64_t keep = log_base + log_n;
  for (size_t i = 0; i < n_marks; i++)
    if (marks[i] < keep) keep = marks[i];
  int64_t drop = keep - log_base;
  if (drop <= 0 || (n_marks && 2 * drop < log_n)) return;
  memmove(log_recs, log_recs + drop, (size_t)(log_n - drop) * sizeof *log_recs);
  log_n -= drop;
  log_base = keep;
}

int64_t maya_timing_mark(int64_t previous, int timing) {
  if (!oracle) return -1;
  pthread_mutex_lock(&lock);
  release_locked(previous);
  int64_t mark = -1;
  if (timing) {
    if (n_marks == cap_marks) {
      cap_marks = cap_marks ? 2 * cap_marks : 64;
      marks = realloc(marks, cap_marks * sizeof *marks);
    }
    mark = marks[n_marks++] = log_base + log_n;
  }
  atomic_store(&timing_logging, n_marks > 0);
  pthread_mutex_unlock(&lock);
  return mark;
}

static void release_locked(int64_t mark) {
  if (mark < 0) return;
  for (size_t i = 0; i < n_marks; i++)
    if (marks[i] == mark) {
      marks[i] = marks[--n_marks];
      break;
    }
  if (!n_marks)
    log_n = 0, log_base = 0;
  else
    trim();
}

void maya_timing_release(int64_t mark) {
  if (mark < 0) return;
  pthread_mutex_lock(&lock);
  release_locked(mark);
  atomic_store(&timing_logging, n_marks > 0);
  pthread_mutex_unlock(&lock);
}

void maya_timing_log(const maya_rec *r) {
  if (r->kind != K_LAUNCH && r->kind != K_GEMM && r->kind != K_ATTN && r->kind != K_COPY && r->kind != K_MEMSET &&
      r->kind != K_COLL)
    return;
  if (!(r->flags & F_GRAPH_REPLAY) && maya_capturing(r->stream)) return; /* captured, not run */
  pthread_mutex_lock(&lock);
  if (n_marks) {
    if (log_n == MAX_LOG) { /* a mark kept live for a whole run: its timings fall back to host time */
      log_base += log_n;
      log_n = 0;
    }
    if (log_n == log_cap) {
      log_cap = log_cap ? 2 * log_cap : 1024;
      log_recs = realloc(log_recs, (size_t)log_cap * sizeof *log_recs);
    }
    log_recs[log_n++] = *r;
  }
  pthread_mutex_unlock(&lock);
}

int maya_timing_elapsed(int64_t from, int64_t to, int64_t stream_a, int64_t stream_b, double *ns) {
  if (!oracle || from < 0 || to < from) return -1;
  pthread_mutex_lock(&lock);
  if (from < log_base || to > log_base + log_n) {
    pthread_mutex_unlock(&lock);
    return -1;
  }
  int64_t n = 0;
  maya_rec *window = malloc((size_t)(to - from + 1) * sizeof *window);
  for (int64_t i = from - log_base; i < to - log_base; i++)
    if (log_recs[i].stream == stream_a || log_recs[i].stream == stream_b) window[n++] = log_recs[i];
  pthread_mutex_unlock(&lock);
  double answer = oracle(window, n); /* without the lock: the oracle is Python and may take it */
  free(window);
  if (!(answer >= 0)) return -1;
  *ns = answer;
  return 0;
}
