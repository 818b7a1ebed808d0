/* CUDA graphs: capture (records on a capturing stream go to its graph), launch (replayed as issued now),
 * clone and free, and user objects whose references graphs hold. */
#define _GNU_SOURCE
#include "core.h"

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

atomic_int captures_active;

#define MAX_CAPTURING 64
static struct {
  int64_t stream;
  maya_graph *g;
} capturing[MAX_CAPTURING];
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

void divert_to_graph(maya_rec *r) {
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

static _Atomic int64_t graph_launches;
MAYA_EXPORT int64_t maya_emu_graph_launches(void) { return atomic_load(&graph_launches); }

void maya_graph_launch(const maya_graph *g, int api, int64_t stream) {
  atomic_fetch_add(&graph_launches, 1);
  maya_rec *launch = maya_begin(api, D_RUNTIME, K_PLAIN);
  launch->stream = stream;
  launch->a[0] = g->id;
  launch->a[1] = (int64_t)g->n;
  maya_end(launch, 0);
  for (size_t i = 0; i < g->n; i++) {
    maya_rec *r = maya_begin_row();
    maya_rec fresh = *r;
    *r = g->recs[i]; /* as captured, op context included; issued now, by this thread */
    r->seq = fresh.seq;
    r->tid = fresh.tid;
    r->start_ns = fresh.start_ns;
    r->dur_ns = 0;
    /* the last row carries the thread's CPU time once all are written: the next gap starts there, as its wall one */
    r->cpu_ns = i + 1 == g->n ? maya_thread_cpu() : -1;
    r->cpu_dur_ns = 0;
    if (r->stream == g->origin) r->stream = stream;
    r->flags |= F_GRAPH_REPLAY;
    if (atomic_load_explicit(&timing_logging, memory_order_relaxed)) maya_timing_log(r);
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
