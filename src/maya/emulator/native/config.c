/* The virtual devices: defaults (an H100 SXM) and the rank's configuration file ($MAYA_EMU_CONFIG). */
#define _GNU_SOURCE
#include "core.h"

int maya_ndev = 1;
maya_device_cfg maya_dev[MAYA_MAX_DEVICES];
int maya_rank = 0;
char out_dir[4096] = ".";
int configured;
size_t reserved_per_device = 0;

static void set_defaults(maya_device_cfg *d) {
  snprintf(d->name, sizeof d->name, "NVIDIA H100 80GB HBM3");
  d->major = 9;
  d->minor = 0;
  d->sm_count = 132;
  d->memory_bytes = 85520809984ull;
  d->clock_khz = 1980000;
  d->mem_clock_khz = 2619000;
  d->bus_width_bits = 5120;
  d->l2_bytes = 52428800;
  d->smem_per_sm = 233472;
  d->smem_per_block_optin = 232448;
  d->max_threads_per_sm = 2048;
  d->regs_per_sm = 65536;
  d->power_limit_w = 700;
  d->nvlinks = 0; /* as nvidia-smi answers without a configuration: no NVLink */
  d->nvlink_bridged = 0;
}

void load_config(void) {
  configured = 0;
  for (int i = 0; i < MAYA_MAX_DEVICES; i++) set_defaults(&maya_dev[i]);
  const char *path = getenv("MAYA_EMU_CONFIG");
  if (!path) return;
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "maya emulator: cannot read config %s\n", path);
    return;
  }
  configured = 1;
  char line[1024];
  maya_device_cfg d;
  set_defaults(&d);
  while (fgets(line, sizeof line, f)) {
    char *eq = strchr(line, '=');
    if (!eq) continue;
    *eq = 0;
    char *key = line, *val = eq + 1;
    val[strcspn(val, "\n")] = 0;
    if (!strcmp(key, "out_dir"))
      snprintf(out_dir, sizeof out_dir, "%s", val);
    else if (!strcmp(key, "devices"))
      maya_ndev = atoi(val);
    else if (!strcmp(key, "rank"))
      maya_rank = atoi(val);
    else if (!strcmp(key, "reserved_bytes"))
      reserved_per_device = strtoull(val, 0, 10);
    else if (!strcmp(key, "name"))
      snprintf(d.name, sizeof d.name, "%s", val);
    else if (!strcmp(key, "major"))
      d.major = atoi(val);
    else if (!strcmp(key, "minor"))
      d.minor = atoi(val);
    else if (!strcmp(key, "sm_count"))
      d.sm_count = atoi(val);
    else if (!strcmp(key, "memory_bytes"))
      d.memory_bytes = strtoull(val, 0, 10);
    else if (!strcmp(key, "clock_khz"))
      d.clock_khz = atoi(val);
    else if (!strcmp(key, "mem_clock_khz"))
      d.mem_clock_khz = atoi(val);
    else if (!strcmp(key, "bus_width_bits"))
      d.bus_width_bits = atoi(val);
    else if (!strcmp(key, "l2_bytes"))
      d.l2_bytes = atoi(val);
    else if (!strcmp(key, "smem_per_sm"))
      d.smem_per_sm = atoi(val);
    else if (!strcmp(key, "smem_per_block_optin"))
      d.smem_per_block_optin = atoi(val);
    else if (!strcmp(key, "max_threads_per_sm"))
      d.max_threads_per_sm = atoi(val);
    else if (!strcmp(key, "regs_per_sm"))
      d.regs_per_sm = atoi(val);
    else if (!strcmp(key, "power_limit_w"))
      d.power_limit_w = atoi(val);
    else if (!strcmp(key, "nvlinks"))
      d.nvlinks = atoi(val);
    else if (!strcmp(key, "nvlink_bridged"))
      d.nvlink_bridged = atoi(val);
  }
  fclose(f);
  if (maya_ndev < 1) maya_ndev = 1;
  if (maya_ndev > MAYA_MAX_DEVICES) maya_ndev = MAYA_MAX_DEVICES;
  for (int i = 0; i < maya_ndev; i++) maya_dev[i] = d;
}
