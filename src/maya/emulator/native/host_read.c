#define _GNU_SOURCE
#include "core.h"

/* Host reads of device values.
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
 * its read fails with a message naming the ops it is in, which the script sees as a CUDA error.
 * A value the host can know (host_values.cpp: computed on the host from values it put on the device) is
 * read as it is, or as the op observer computed it (nonzero's own count), with no loop stand-in; the same
 * known value read again under the same key counts toward the same limit (a kernel the op observer does not
 * see may have rewritten it: a loop on it would spin on stale bytes). The window
 * does not tell a loop from the same check run over a list of equal buffers (a bucket's NaN check after the
 * previous bucket's), so a check whose answer must not flip is made known there (NaN/Inf checks). */

#define READ_HISTORY 8
#define READ_UNKNOWN 5
#define DEFAULT_LOOP_LIMIT 10000

typedef struct {
  uint64_t key;
  unsigned char value[8]; /* what the read returned last */
} read_site;

static _Atomic int64_t progress_epoch;
static __thread read_site history[READ_HISTORY];
static __thread int history_n, history_next;
static __thread int64_t history_epoch = -1, loop_reads;
static __thread unsigned char one_value[8];
static __thread int one_size;                  /* the element size of the scalar being read (.item()), 0 if unknown */
static const char *(*describe_ops)(void);      /* the ops open on this thread (the op observer) */
static __thread int known_size, known_code;    /* the next read's value is known (maya_emu_read_value) */
static __thread int known_given, unknown_zero; /* unknown_zero: an unknown value, read from zero */
static __thread unsigned char known_value[8];
static char stop_reason[1024];
static _Atomic int stopped;

MAYA_EXPORT void maya_emu_progress(void) { atomic_fetch_add_explicit(&progress_epoch, 1, memory_order_relaxed); }
MAYA_EXPORT void maya_emu_describe_ops(const char *(*fn)(void)) { describe_ops = fn; }

/* The value 1 of the element type the thread's next scalar read has (set by the op observer around
 * aten::_local_scalar_dense; size 0 clears it). */
MAYA_EXPORT void maya_emu_read_one(const void *one, int size) {
  one_size = size > 0 && size <= 8 ? size : 0;
  if (one_size) memcpy(one_value, one, (size_t)one_size);
}

/* The value the thread's next host reads of a scalar return, set by the op observer for the op it is in:
 * `bytes` (an integer, little-endian, cut or zero-extended to the read's size), or NULL: the device bytes
 * are known values, read as they are. `code` is recorded with the read; size 0 clears. Code READ_UNKNOWN:
 * the value is one only a GPU computes; it reads as 0 (not the allocation's stale bytes), and as a loop's
 * stand-in when repeated. */
MAYA_EXPORT void maya_emu_read_value(const void *bytes, int size, int code) {
  unknown_zero = code == READ_UNKNOWN && size > 0;
  if (unknown_zero) size = 0;
  known_size = size > 0 && size <= 8 ? size : 0;
  known_code = code;
  known_given = bytes != NULL;
  if (known_given && known_size) memcpy(known_value, bytes, (size_t)known_size);
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

/* `known`: the value read is one the host knows, which read the same each time (no stand-in was tried). */
static int stop_loop(int known) {
  if (!atomic_exchange(&stopped, 1)) {
    const char *ops = describe_ops ? describe_ops() : NULL;
    snprintf(stop_reason, sizeof stop_reason,
             "maya emulator stopped the rank: it read the same device value %ld times, each time after the same "
             "work, with no training progress (no optimizer step, no backward) and %s: a loop on device values "
             "that emulation cannot end (the read is in %s). Set MAYA_EMU_LOOP_LIMIT to allow longer loops",
             loop_limit(),
             known ? "the same known value each time (one the host computed, unchanged by any op it saw)"
                   : "the stand-ins 0 and 1 both tried",
             ops && *ops ? ops : "no framework op");
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
  int known = known_size && n > 0 && n <= 8 && dst;
  if (known) {
    if (known_given) {
      memset(dst, 0, n);
      memcpy(dst, known_value, n < (size_t)known_size ? n : (size_t)known_size);
    }
    r->a[3] = known_code;
  }
  if (unknown_zero && n > 0 && n <= 8 && dst) {
    memset(dst, 0, n);
    r->a[3] = READ_UNKNOWN;
  }
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
  if (known) { /* read as it is; a changed value is a loop making progress, an unchanged one counts */
    int same = memcmp(site->value, dst, n) == 0;
    memcpy(site->value, dst, n);
    return same && limit > 0 && ++loop_reads > limit ? stop_loop(1) : 0;
  }
  if (limit > 0 && ++loop_reads > limit) return stop_loop(0);
  int zero = 1;
  for (size_t i = 0; i < n; i++) zero &= site->value[i] == 0;
  unsigned char value[8] = {0};
  if (zero) {
    if ((size_t)one_size == n)
      memcpy(value, one_value, n);
    else
      value[0] = 1; /* an integer 1, little-endian */
  }
  memcpy(dst, value, n);
  memcpy(site->value, value, n);
  r->a[3] = zero ? 2 : 1;
  return 0;
}
