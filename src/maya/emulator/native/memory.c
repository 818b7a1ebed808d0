#define _GNU_SOURCE
#include "core.h"

/* Virtual device memory.
 * Device allocations are real, lazily-backed host mappings (MAP_NORESERVE): pointers are unique
 * and small copies into them work, while untouched pages cost nothing. */

enum { DEVICE_MEMORY = 0, HOST_MEMORY = 1, MAPPED_MEMORY = 2 };

typedef struct {
  uintptr_t base;
  size_t size;
  int device;
  int host;    /* DEVICE_MEMORY, HOST_MEMORY (pinned), or MAPPED_MEMORY: a mapped range of a reservation */
  int managed; /* from cudaMallocManaged (maya_dev_mark_managed) */
} alloc;

/* allocations sorted by base address: exact and interior lookups by binary search */
static alloc *allocs;
size_t n_allocs;
static size_t cap_allocs;
static size_t used[MAYA_MAX_DEVICES];
static _Atomic int64_t *published; /* used[], shared with the processes the rank starts (device_memory) */

void publish_memory(void) {
  if (!configured) return;
  char path[4200];
  snprintf(path, sizeof path, "%s/device_memory", out_dir);
  int fd = open(path, (forked_child ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, 0644);
  if (fd < 0) return;
  size_t size = MAYA_MAX_DEVICES * sizeof(int64_t);
  if (!forked_child && ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return;
  }
  void *p = mmap(NULL, size, forked_child ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  published = p == MAP_FAILED ? NULL : p;
}

size_t maya_dev_used_by_rank(int device) {
  return forked_child ? (published ? (size_t)atomic_load(&published[device]) : 0) : used[device];
}

static size_t lower_bound(uintptr_t p) { /* first index with base > p */
  size_t lo = 0, hi = n_allocs;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (allocs[mid].base <= p)
      lo = mid + 1;
    else
      hi = mid;
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
  allocs[i] = (alloc){base, size, device, host, 0};
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
  if (forked_child) { /* a process the rank started: counted by what it is (children.c) */
    maya_child_memory(kind, space);
    return;
  }
  if (published) atomic_store(&published[device], (int64_t)used[device]);
  static int api = -1;
  if (api < 0) api = maya_api_id("<memory>");
  maya_rec *r = maya_begin(api, D_RUNTIME, K_ALLOC);
  r->device = device;
  r->stream = stream;
  r->a[0] = (int64_t)addr;
  r->a[1] = (int64_t)bytes;
  r->a[2] = (int64_t)used[device];
  r->a[3] = kind;
  r->a[4] = space;
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
  int ok = found && found->base == (uintptr_t)ptr && found->host == DEVICE_MEMORY && take_alloc((uintptr_t)ptr, &a);
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
  int found = a ? (a->host == HOST_MEMORY ? 2 : 1) : 0;
  if (a && device) *device = a->device;
  if (a && size) *size = a->size;
  pthread_mutex_unlock(&lock);
  return found;
}

void maya_dev_mark_managed(const void *ptr) {
  pthread_mutex_lock(&lock);
  alloc *a = find_alloc((uintptr_t)ptr);
  if (a) a->managed = 1;
  pthread_mutex_unlock(&lock);
}

int maya_dev_managed(const void *ptr, size_t count) {
  pthread_mutex_lock(&lock);
  alloc *a = find_alloc((uintptr_t)ptr);
  int inside = a && a->managed && count && count <= a->base + a->size - (uintptr_t)ptr;
  pthread_mutex_unlock(&lock);
  return inside;
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
  int ok = found && found->host == HOST_MEMORY && take_alloc((uintptr_t)ptr, &a);
  pthread_mutex_unlock(&lock);
  if (!ok) return -1;
  record_mem(1, a.device, a.base, a.size, -1, 1);
  munmap((void *)a.base, a.size);
  return 0;
}

void maya_dev_map(void *ptr, size_t size, int device) {
  pthread_mutex_lock(&lock);
  add_alloc((uintptr_t)ptr, size, device, MAPPED_MEMORY);
  pthread_mutex_unlock(&lock);
}

void maya_dev_unmap(void *ptr, size_t size) {
  uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
  pthread_mutex_lock(&lock);
  size_t kept = 0;
  for (size_t i = 0; i < n_allocs; i++)
    if (!(allocs[i].host == MAPPED_MEMORY && allocs[i].base >= lo && allocs[i].base < hi)) allocs[kept++] = allocs[i];
  n_allocs = kept;
  pthread_mutex_unlock(&lock);
}

int maya_is_host_alloc(const void *ptr) { return maya_dev_lookup(ptr, NULL, NULL) == 2; }

void maya_copy(void *dst, const void *src, size_t n) {
  if (n <= MAYA_SMALL_COPY && dst && src && dst != src) memmove(dst, src, n);
}

void maya_set(void *dst, int value, size_t n) {
  if (n <= MAYA_SMALL_COPY && dst) memset(dst, value, n);
}
