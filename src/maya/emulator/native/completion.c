/* Completion of the work behind collectives: what polls (cudaEventQuery, cudaStreamQuery) answer.
 *
 * Kernels, copies and memsets are complete as soon as they are issued. A collective is not: on a GPU it
 * runs once its peers have joined, so a poll made right after it was issued finds it (and anything queued
 * behind it on its stream) still running. Frameworks act on that answer: torch's NCCL process group polls a
 * collective's end event when it enqueues it and, if the event says complete, `Work.wait()` no longer makes
 * the waiting stream wait for the collective. With polls that always said complete, that dependency was
 * missing from the trace, and the replay ran DDP's optimizer step while its gradients were still being
 * all-reduced.
 *
 * So work behind a collective (an event recorded after it on its stream, a stream with one queued) is found
 * running until
 * - a thread that issues device work has polled it once (the next poll finds it complete: the process
 *   group's queue, which polls only its oldest work at each enqueue, drains as fast as it fills), or
 * - the rank has issued SETTLE_WORK more device calls, or SETTLE_NS of host time has passed since (a GPU would
 *   have finished it by then), or
 * - the host synchronizes with it (its event, its stream, the device).
 * Polls by threads that issue no device work (a process group's watchdog, polling its queue on a timer) count
 * for nothing else: their number and place depend on host time, and by the rules above their answers do not
 * (except past SETTLE_NS or IDLE_POLLS of them), so a capture stays the same from run to run; a watchdog that
 * spins until its queue drains (torch 2.5's, at shutdown) finds the work complete after IDLE_POLLS polls. */
#include "core.h"

#define COLLECTIVE_POLLS 1     /* polls by a thread that issues device work that find the work running */
#define SETTLE_WORK 32         /* device calls after which it is complete */
#define SETTLE_NS 2000000000ll /* host time after which it is complete */
#define IDLE_POLLS 64          /* polls by threads that issue no device work after which it is complete */

typedef struct {
  int64_t stream;
  int64_t issued;      /* the last collective issued on the stream (a count over the rank; 0: none) */
  int64_t issued_ns;   /* when */
  int64_t issued_work; /* the device work the rank had issued then */
  int64_t done;        /* collectives up to this one are complete */
  int polls[2];        /* polls of the stream itself since its last collective (working threads, others) */
} stream_state;

static stream_state *states;
static size_t n_states, cap_states;
static _Atomic int64_t collectives; /* issued so far: while none is, polls and event records skip the lock */

/* The stream's state (created on first use); called with `lock` held. */
static stream_state *state_of(int64_t stream) {
  for (size_t i = 0; i < n_states; i++)
    if (states[i].stream == stream) return &states[i];
  if (n_states == cap_states) {
    cap_states = cap_states ? 2 * cap_states : 64;
    states = realloc(states, cap_states * sizeof *states);
  }
  states[n_states] = (stream_state){stream, 0, 0, 0, 0, {0, 0}};
  return &states[n_states++];
}

void maya_collective_issued(int64_t stream) {
  if (maya_capturing(stream)) return; /* captured into a graph: it runs at the graph's launch */
  pthread_mutex_lock(&lock);
  stream_state *s = state_of(stream);
  s->issued = ++collectives;
  s->issued_ns = maya_now();
  s->issued_work = maya_device_work_issued();
  s->polls[0] = s->polls[1] = 0;
  pthread_mutex_unlock(&lock);
}

int64_t maya_behind_collective(int64_t stream) {
  if (!atomic_load_explicit(&collectives, memory_order_relaxed)) return 0;
  pthread_mutex_lock(&lock);
  int64_t behind = 0;
  for (size_t i = 0; i < n_states; i++)
    if (states[i].stream == stream && states[i].issued > states[i].done) behind = states[i].issued;
  pthread_mutex_unlock(&lock);
  return behind;
}

/* One poll of work behind collective `behind` on `s`, issued at `since_ns` after `since_work` device calls: 1 if it
 * is found running. `polls`: the polls that found it running so far, by threads that issue device work and by
 * others. */
static int poll_locked(stream_state *s, int64_t behind, int64_t since_ns, int64_t since_work, int polls[2]) {
  if (behind <= s->done) return 0;
  int settled = maya_device_work_issued() - since_work >= SETTLE_WORK || maya_now() - since_ns >= SETTLE_NS;
  if (!settled) {
    int idle = !thread_issued_device_work();
    if (polls[idle] < (idle ? IDLE_POLLS : COLLECTIVE_POLLS)) {
      polls[idle]++;
      return 1;
    }
  }
  s->done = behind;
  return 0;
}

int maya_still_running(int64_t stream, int64_t behind, int64_t since_ns, int64_t since_work, int polls[2]) {
  if (behind <= 0) return 0;
  pthread_mutex_lock(&lock);
  int running = poll_locked(state_of(stream), behind, since_ns, since_work, polls);
  pthread_mutex_unlock(&lock);
  return running;
}

int maya_stream_still_running(int64_t stream) {
  if (!atomic_load_explicit(&collectives, memory_order_relaxed)) return 0;
  pthread_mutex_lock(&lock);
  stream_state *s = state_of(stream);
  int running = poll_locked(s, s->issued, s->issued_ns, s->issued_work, s->polls);
  pthread_mutex_unlock(&lock);
  return running;
}

void maya_collectives_done(int64_t stream, int64_t upto) {
  if (!atomic_load_explicit(&collectives, memory_order_relaxed)) return;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < n_states; i++) {
    stream_state *s = &states[i];
    if (stream >= 0 && s->stream != stream) continue;
    int64_t done = upto < 0 ? s->issued : upto;
    if (done > s->done) s->done = done;
  }
  pthread_mutex_unlock(&lock);
}
