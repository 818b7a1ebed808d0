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
 * running by the first poll a thread that issues device work makes after it was issued, and complete by the
 * next: the process group's queue, which polls only its oldest work at each enqueue, drains as fast as it
 * fills, as on a GPU where a collective ends about as fast as the host issues the next. Threads that issue
 * no device work (the process group's watchdog, polling its queue once a second) find it running until it
 * is IDLE_POLL_NS old: their polls, whose number and place depend on host time, change nothing, so a capture
 * stays the same from run to run. A host synchronization covering the work (its event's, its stream's, the
 * device's) completes it at once. */
#include "core.h"

#define COLLECTIVE_POLLS 1         /* polls by a thread that issues device work that find the work running */
#define IDLE_POLL_NS 60000000000ll /* how long polls by other threads find it running */

typedef struct {
  int64_t stream;
  int64_t issued;    /* the last collective issued on the stream (a count over the rank; 0: none) */
  int64_t issued_ns; /* when */
  int64_t done;      /* collectives up to this one are complete */
  int polls;         /* polls of the stream itself since its last collective */
} stream_state;

static stream_state *states;
static size_t n_states, cap_states;
static int64_t collectives;

/* The stream's state (created on first use); called with `lock` held. */
static stream_state *state_of(int64_t stream) {
  for (size_t i = 0; i < n_states; i++)
    if (states[i].stream == stream) return &states[i];
  if (n_states == cap_states) {
    cap_states = cap_states ? 2 * cap_states : 64;
    states = realloc(states, cap_states * sizeof *states);
  }
  states[n_states] = (stream_state){stream, 0, 0, 0, 0};
  return &states[n_states++];
}

void maya_collective_issued(int64_t stream) {
  if (maya_capturing(stream)) return; /* captured into a graph: it runs at the graph's launch */
  pthread_mutex_lock(&lock);
  stream_state *s = state_of(stream);
  s->issued = ++collectives;
  s->issued_ns = maya_now();
  s->polls = 0;
  pthread_mutex_unlock(&lock);
}

int64_t maya_behind_collective(int64_t stream) {
  pthread_mutex_lock(&lock);
  int64_t behind = 0;
  for (size_t i = 0; i < n_states; i++)
    if (states[i].stream == stream && states[i].issued > states[i].done) behind = states[i].issued;
  pthread_mutex_unlock(&lock);
  return behind;
}

/* One poll of work behind collective `behind` on `s`, issued at `since_ns`: 1 if it is found running. */
static int poll_locked(stream_state *s, int64_t behind, int64_t since_ns, int *polls) {
  if (behind <= s->done) return 0;
  if (!thread_issued_device_work()) {
    if (maya_now() - since_ns < IDLE_POLL_NS) return 1;
  } else if (*polls < COLLECTIVE_POLLS) {
    ++*polls;
    return 1;
  }
  s->done = behind;
  return 0;
}

int maya_still_running(int64_t stream, int64_t behind, int64_t recorded_ns, int *polls) {
  if (behind <= 0) return 0;
  pthread_mutex_lock(&lock);
  int running = poll_locked(state_of(stream), behind, recorded_ns, polls);
  pthread_mutex_unlock(&lock);
  return running;
}

int maya_stream_still_running(int64_t stream) {
  pthread_mutex_lock(&lock);
  stream_state *s = state_of(stream);
  int running = poll_locked(s, s->issued, s->issued_ns, &s->polls);
  pthread_mutex_unlock(&lock);
  return running;
}

void maya_collectives_done(int64_t stream, int64_t upto) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < n_states; i++) {
    stream_state *s = &states[i];
    if (stream >= 0 && s->stream != stream) continue;
    int64_t done = upto < 0 ? s->issued : upto;
    if (done > s->done) s->done = done;
  }
  pthread_mutex_unlock(&lock);
}
