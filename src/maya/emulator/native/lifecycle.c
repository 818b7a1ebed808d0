/* Life cycle: configuration at load, flush at exit, forked children counted (not traced), and a zygote's child
 * restarting as a fresh rank. */
#define _GNU_SOURCE
#include "core.h"

static int finished;
static long rank_pid; /* the emulated rank's: set at load, kept by its forks (inherited) */

long maya_rank_pid(void) { return rank_pid; }

static void at_exit(void) {
  if (finished || forked_child) return;
  finished = 1;
  maya_flush_all();
}

static void in_forked_child(void) {
  forked_child = 1;
  my_buf = NULL; /* the forking thread's buffer is the rank's: the child's calls are counted instead */
  maya_child_forked();
}

__attribute__((constructor)) static void init(void) {
  /* a process the rank started (an Inductor compile worker, a tool) inherits the preloaded stubs and the
   * configuration, but the capture directory is the rank's: its calls are counted, not recorded (children.c;
   * the runner names the rank's pid) */
  const char *named = getenv("MAYA_EMU_RANK_PID");
  rank_pid = named && *named ? strtol(named, NULL, 10) : (long)getpid();
  if (rank_pid != (long)getpid()) forked_child = 1;
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
  rank_pid = getpid();
  maya_ndev = 1;
  maya_rank = 0;
  reserved_per_device = 0;
  snprintf(out_dir, sizeof out_dir, ".");
  load_config();
  publish_memory();
  return 0;
}
