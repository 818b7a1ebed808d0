/* The kernel registry: host functions and library kernel names to ids (kernels.tsv), the fat binary
 * each kernel came from, and the notes the runner leaves for a thread's next launch. */
#define _GNU_SOURCE
#include "core.h"

typedef struct kern {
  const void *host_fun;
  const char *name;
  const void *module; /* the fat binary the kernel was registered from (cudart.c), NULL if none */
  int64_t id;
  struct kern *next;
} kern;

#define KERNEL_BUCKETS 131072
static kern *kernels[KERNEL_BUCKETS];
int64_t next_kernel_id;

static unsigned kbucket(const void *p) { return (unsigned)(((uintptr_t)p >> 4) * 2654435761u) % KERNEL_BUCKETS; }

void maya_register_kernel(const void *host_fun, const char *name, const void *module) {
  kern *k = malloc(sizeof *k);
  k->host_fun = host_fun;
  k->name = name;
  k->module = module;
  k->id = -1;
  unsigned h = kbucket(host_fun);
  pthread_mutex_lock(&lock);
  k->next = kernels[h];
  kernels[h] = k;
  pthread_mutex_unlock(&lock);
}

const void *maya_kernel_module(const void *host_fun) {
  unsigned h = kbucket(host_fun);
  pthread_mutex_lock(&lock);
  kern *k = kernels[h];
  while (k && k->host_fun != host_fun) k = k->next; /* the latest registration, as maya_kernel_id */
  const void *module = k ? k->module : NULL;
  pthread_mutex_unlock(&lock);
  return module;
}

static int64_t assign_id(kern *k) {
  k->id = next_kernel_id++;
  size_t len = strlen(k->name) + 32;
  char *line = malloc(len);
  snprintf(line, len, "%ld\t%s\n", (long)k->id, k->name);
  pthread_mutex_unlock(&lock);
  maya_side_write("kernels.tsv", line);
  pthread_mutex_lock(&lock);
  free(line);
  return k->id;
}

int64_t maya_kernel_id(const void *host_fun) {
  unsigned h = kbucket(host_fun);
  pthread_mutex_lock(&lock);
  kern *k = kernels[h];
  while (k && k->host_fun != host_fun) k = k->next;
  if (!k) {
    char *name = malloc(48);
    snprintf(name, 48, "unregistered_kernel_%p", host_fun);
    k = malloc(sizeof *k);
    k->host_fun = host_fun;
    k->name = name;
    k->module = NULL;
    k->id = -1;
    k->next = kernels[h];
    kernels[h] = k;
  }
  int64_t id = k->id >= 0 ? k->id : assign_id(k);
  pthread_mutex_unlock(&lock);
  return id;
}

int64_t maya_kernel_id_by_name(const char *name) {
  /* library kernels (cuBLAS, cuDNN, NCCL) are keyed by their interned name */
  static kern *named;
  pthread_mutex_lock(&lock);
  kern *k = named;
  while (k && strcmp(k->name, name)) k = k->next;
  if (!k) {
    k = malloc(sizeof *k);
    k->host_fun = NULL;
    k->name = strdup(name);
    k->module = NULL;
    k->id = -1;
    k->next = named;
    named = k;
  }
  int64_t id = k->id >= 0 ? k->id : assign_id(k);
  pthread_mutex_unlock(&lock);
  return id;
}

/* A launch described by the runner (Triton's arguments, triton_launches.py): the id of its description,
 * taken by the thread's next cuLaunchKernel. */
static __thread int64_t launch_note;
MAYA_EXPORT void maya_emu_launch_note(int64_t id) { launch_note = id; }
int64_t maya_take_launch_note(void) {
  int64_t id = launch_note;
  launch_note = 0;
  return id;
}
