/* libnvidia-ml.so.1 stub: NVML for the virtual GPUs (pynvml, torch.cuda.memory_usage/utilization/
 * device_memory_used, loggers, Maya's nvidia-smi). Every call is recorded (domain nvml); functions
 * not here fail loudly with NVML_ERROR_NOT_SUPPORTED (generated from nvml.h by build.py).
 *
 * Memory used is what the rank has allocated on the device (a process the rank starts, such as
 * nvidia-smi, reads it from the rank: memory.c publishes it). Utilization reads 0 (no kernel runs);
 * temperature, power and clocks are a GPU at rest: idle temperature, 10% of its power limit,
 * boost clocks (as the device properties say). */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "maya_emu.h"

#ifndef NVML_DEVICE_ARCH_BLACKWELL /* older nvml.h (CUDA 12.4's): the driver's value */
#define NVML_DEVICE_ARCH_BLACKWELL 10
#endif

#define DRIVER_VERSION "580.95.05"
#define NVML_VERSION "13.580.95.05"
#define IDLE_TEMPERATURE_C 32

/* handles are the device ordinal + 1 */
static nvmlDevice_t handle_of(int d) { return (nvmlDevice_t)(uintptr_t)(d + 1); }

static int device_of(nvmlDevice_t h) {
  int d = (int)(uintptr_t)h - 1;
  return d >= 0 && d < maya_ndev ? d : -1;
}

static maya_rec *begin(int api, nvmlDevice_t h) {
  maya_rec *r = maya_begin(api, D_NVML, K_PLAIN);
  if (device_of(h) >= 0) r->device = device_of(h);
  return r;
}

static nvmlReturn_t done(maya_rec *r, nvmlReturn_t status) {
  maya_end(r, (int)status);
  return status;
}

/* A query of one device: records it and checks the handle. */
#define DEVICE_QUERY(name, h)                                                                                          \
  maya_rec *r = begin(API(name), h);                                                                                   \
  int d = device_of(h);                                                                                                \
  if (d < 0) return done(r, NVML_ERROR_INVALID_ARGUMENT);

static void uuid_text(int d, char *out, size_t n) {
  unsigned char b[16];
  for (int i = 0; i < 16; i++) b[i] = (unsigned char)(0x4d + d * 31 + i); /* as cuDeviceGetUuid */
  snprintf(out, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static void bus_id(int d, char *out, size_t n) { snprintf(out, n, "00000000:%02X:00.0", d + 1); } /* as cudart */

/* ------------------------------------------------------------------ library */

static nvmlReturn_t init(const char *name) { return done(begin(maya_api_id(name), NULL), NVML_SUCCESS); }
MAYA_EXPORT nvmlReturn_t nvmlInit(void) { return init("nvmlInit"); }
MAYA_EXPORT nvmlReturn_t nvmlInit_v2(void) { return init("nvmlInit_v2"); }
MAYA_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags;
  return init("nvmlInitWithFlags");
}
MAYA_EXPORT nvmlReturn_t nvmlShutdown(void) { return init("nvmlShutdown"); }

MAYA_EXPORT const char *nvmlErrorString(nvmlReturn_t e) {
  switch (e) {
  case NVML_SUCCESS: return "Success";
  case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
  case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
  case NVML_ERROR_NOT_SUPPORTED: return "Not Supported (not emulated by Maya)";
  case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
  case NVML_ERROR_NOT_FOUND: return "Not Found";
  case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
  case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
  default: return "Unknown Error";
  }
}

static nvmlReturn_t text(const char *api, const char *value, char *out, unsigned int n) {
  maya_rec *r = begin(maya_api_id(api), NULL);
  if (!out || strlen(value) + 1 > n) return done(r, NVML_ERROR_INSUFFICIENT_SIZE);
  snprintf(out, n, "%s", value);
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) {
  return text("nvmlSystemGetDriverVersion", DRIVER_VERSION, v, n);
}

MAYA_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int n) {
  return text("nvmlSystemGetNVMLVersion", NVML_VERSION, v, n);
}

static nvmlReturn_t cuda_version(const char *api, int *v) {
  maya_rec *r = begin(maya_api_id(api), NULL);
  if (!v) return done(r, NVML_ERROR_INVALID_ARGUMENT);
  *v = 13000; /* as cuDriverGetVersion */
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
  return cuda_version("nvmlSystemGetCudaDriverVersion", v);
}
MAYA_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
  return cuda_version("nvmlSystemGetCudaDriverVersion_v2", v);
}

/* ------------------------------------------------------------------ devices */

static nvmlReturn_t count(const char *api, unsigned int *n) {
  maya_rec *r = begin(maya_api_id(api), NULL);
  if (!n) return done(r, NVML_ERROR_INVALID_ARGUMENT);
  *n = (unsigned)maya_ndev; /* NVML sees every GPU of the node, whatever CUDA_VISIBLE_DEVICES says */
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return count("nvmlDeviceGetCount", n); }
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { return count("nvmlDeviceGetCount_v2", n); }

static nvmlReturn_t by_index(const char *api, unsigned int i, nvmlDevice_t *h) {
  maya_rec *r = begin(maya_api_id(api), NULL);
  if (!h || i >= (unsigned)maya_ndev) return done(r, NVML_ERROR_INVALID_ARGUMENT);
  *h = handle_of((int)i);
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *h) {
  return by_index("nvmlDeviceGetHandleByIndex", i, h);
}
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h) {
  return by_index("nvmlDeviceGetHandleByIndex_v2", i, h);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *h) {
  maya_rec *r = begin(API("nvmlDeviceGetHandleByUUID"), NULL);
  char mine[96];
  for (int d = 0; uuid && h && d < maya_ndev; d++) {
    uuid_text(d, mine, sizeof mine);
    if (!strcasecmp(mine, uuid)) {
      *h = handle_of(d);
      return done(r, NVML_SUCCESS);
    }
  }
  return done(r, uuid && h ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INVALID_ARGUMENT);
}

static nvmlReturn_t by_bus_id(const char *api, const char *bus, nvmlDevice_t *h) {
  maya_rec *r = begin(maya_api_id(api), NULL);
  unsigned domain, number, device;
  if (!bus || !h || sscanf(bus, "%x:%x:%x", &domain, &number, &device) != 3)
    return done(r, NVML_ERROR_INVALID_ARGUMENT);
  if (domain != 0 || device != 0 || number < 1 || number > (unsigned)maya_ndev) return done(r, NVML_ERROR_NOT_FOUND);
  *h = handle_of((int)number - 1);
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus, nvmlDevice_t *h) {
  return by_bus_id("nvmlDeviceGetHandleByPciBusId", bus, h);
}
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *h) {
  return by_bus_id("nvmlDeviceGetHandleByPciBusId_v2", bus, h);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *i) {
  DEVICE_QUERY("nvmlDeviceGetIndex", h);
  *i = (unsigned)d;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned int *i) {
  DEVICE_QUERY("nvmlDeviceGetMinorNumber", h);
  *i = (unsigned)d;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int n) {
  DEVICE_QUERY("nvmlDeviceGetName", h);
  if (!name || strlen(maya_dev[d].name) + 1 > n) return done(r, NVML_ERROR_INSUFFICIENT_SIZE);
  snprintf(name, n, "%s", maya_dev[d].name);
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int n) {
  DEVICE_QUERY("nvmlDeviceGetUUID", h);
  char text[96];
  uuid_text(d, text, sizeof text);
  if (!uuid || strlen(text) + 1 > n) return done(r, NVML_ERROR_INSUFFICIENT_SIZE);
  snprintf(uuid, n, "%s", text);
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t h, char *serial, unsigned int n) {
  DEVICE_QUERY("nvmlDeviceGetSerial", h);
  if (!serial || n < 14) return done(r, NVML_ERROR_INSUFFICIENT_SIZE);
  snprintf(serial, n, "165%010d", d);
  return done(r, NVML_SUCCESS);
}

static void pci_info(int d, nvmlPciInfo_t *p) {
  memset(p, 0, sizeof *p);
  p->bus = (unsigned)d + 1;
  p->pciDeviceId = 0x233010de; /* device id | NVIDIA's vendor id */
  p->pciSubSystemId = 0x16c110de;
  bus_id(d, p->busId, sizeof p->busId);
  snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", d + 1);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *p) {
  DEVICE_QUERY("nvmlDeviceGetPciInfo_v3", h);
  pci_info(d, p);
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *major, int *minor) {
  DEVICE_QUERY("nvmlDeviceGetCudaComputeCapability", h);
  *major = maya_dev[d].major;
  *minor = maya_dev[d].minor;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t h, nvmlDeviceArchitecture_t *arch) {
  DEVICE_QUERY("nvmlDeviceGetArchitecture", h);
  static const int by_major[] = {0,
                                 0,
                                 0,
                                 0,
                                 0,
                                 NVML_DEVICE_ARCH_PASCAL - 1,
                                 NVML_DEVICE_ARCH_PASCAL,
                                 NVML_DEVICE_ARCH_VOLTA,
                                 NVML_DEVICE_ARCH_AMPERE,
                                 NVML_DEVICE_ARCH_HOPPER,
                                 NVML_DEVICE_ARCH_BLACKWELL};
  int major = maya_dev[d].major;
  *arch = maya_dev[d].major == 7 && maya_dev[d].minor >= 5 ? NVML_DEVICE_ARCH_TURING
          : major == 8 && maya_dev[d].minor >= 9           ? NVML_DEVICE_ARCH_ADA
          : major >= 0 && major <= 10                      ? (nvmlDeviceArchitecture_t)by_major[major]
          : major >= 10                                    ? NVML_DEVICE_ARCH_BLACKWELL
                                                           : NVML_DEVICE_ARCH_UNKNOWN;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t h, nvmlBrandType_t *brand) {
  DEVICE_QUERY("nvmlDeviceGetBrand", h);
  *brand = NVML_BRAND_NVIDIA;
  return done(r, NVML_SUCCESS);
}

/* ------------------------------------------------------------------ memory and processes */

static unsigned long long used_bytes(int d) { return (unsigned long long)maya_dev_used_by_rank(d); }

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
  DEVICE_QUERY("nvmlDeviceGetMemoryInfo", h);
  m->total = maya_dev[d].memory_bytes;
  m->used = used_bytes(d);
  m->free = m->total > m->used ? m->total - m->used : 0;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m) {
  DEVICE_QUERY("nvmlDeviceGetMemoryInfo_v2", h);
  if (m->version != nvmlMemory_v2) return done(r, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  m->total = maya_dev[d].memory_bytes;
  m->reserved = 0;
  m->used = used_bytes(d);
  m->free = m->total > m->used ? m->total - m->used : 0;
  return done(r, NVML_SUCCESS);
}

/* The rank is the one process on its device (with the memory it allocated there). */
static nvmlReturn_t processes(const char *api, nvmlDevice_t h, unsigned int *n, void *infos, size_t size) {
  DEVICE_QUERY(api, h);
  unsigned found = used_bytes(d) ? 1 : 0;
  if (!n) return done(r, NVML_ERROR_INVALID_ARGUMENT);
  if (*n < found || (found && !infos)) {
    *n = found;
    return done(r, NVML_ERROR_INSUFFICIENT_SIZE);
  }
  *n = found;
  if (found) {
    memset(infos, 0, size);
    nvmlProcessInfo_v1_t *p = infos; /* pid and memory lead every version */
    p->pid = (unsigned)maya_rank_pid();
    p->usedGpuMemory = used_bytes(d);
    if (size >= sizeof(nvmlProcessInfo_v2_t)) {
      ((nvmlProcessInfo_v2_t *)infos)->gpuInstanceId = 0xFFFFFFFF;
      ((nvmlProcessInfo_v2_t *)infos)->computeInstanceId = 0xFFFFFFFF;
    }
  }
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned int *n,
                                                              nvmlProcessInfo_v1_t *p) {
  return processes("nvmlDeviceGetComputeRunningProcesses", h, n, p, sizeof *p);
}
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned int *n,
                                                                 nvmlProcessInfo_v2_t *p) {
  return processes("nvmlDeviceGetComputeRunningProcesses_v2", h, n, p, sizeof *p);
}
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n,
                                                                 nvmlProcessInfo_t *p) {
  return processes("nvmlDeviceGetComputeRunningProcesses_v3", h, n, p, sizeof *p);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned int *n,
                                                                  nvmlProcessInfo_t *p) {
  DEVICE_QUERY("nvmlDeviceGetGraphicsRunningProcesses_v3", h);
  (void)p;
  if (!n) return done(r, NVML_ERROR_INVALID_ARGUMENT);
  *n = 0;
  return done(r, NVML_SUCCESS);
}

/* ------------------------------------------------------------------ state: a GPU at rest */

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u) {
  DEVICE_QUERY("nvmlDeviceGetUtilizationRates", h);
  u->gpu = 0; /* no kernel runs on a virtual GPU */
  u->memory = 0;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, nvmlTemperatureSensors_t sensor, unsigned int *t) {
  DEVICE_QUERY("nvmlDeviceGetTemperature", h);
  if (sensor != NVML_TEMPERATURE_GPU) return done(r, NVML_ERROR_INVALID_ARGUMENT);
  *t = IDLE_TEMPERATURE_C;
  return done(r, NVML_SUCCESS);
}

static nvmlReturn_t power(const char *api, nvmlDevice_t h, unsigned int *mw, int percent) {
  DEVICE_QUERY(api, h);
  *mw = (unsigned)((long long)maya_dev[d].power_limit_w * 1000 * percent / 100);
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned int *mw) {
  return power("nvmlDeviceGetPowerUsage", h, mw, 10);
}
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h, unsigned int *mw) {
  return power("nvmlDeviceGetEnforcedPowerLimit", h, mw, 100);
}
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t h, unsigned int *mw) {
  return power("nvmlDeviceGetPowerManagementLimit", h, mw, 100);
}

static nvmlReturn_t clock(const char *api, nvmlDevice_t h, nvmlClockType_t type, unsigned int *mhz) {
  DEVICE_QUERY(api, h);
  if (type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM)
    *mhz = (unsigned)(maya_dev[d].clock_khz / 1000);
  else if (type == NVML_CLOCK_MEM)
    *mhz = (unsigned)(maya_dev[d].mem_clock_khz / 1000);
  else
    return done(r, NVML_ERROR_NOT_SUPPORTED);
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, nvmlClockType_t type, unsigned int *mhz) {
  return clock("nvmlDeviceGetClockInfo", h, type, mhz);
}
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t h, nvmlClockType_t type, unsigned int *mhz) {
  return clock("nvmlDeviceGetMaxClockInfo", h, type, mhz);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t h, nvmlPstates_t *p) {
  DEVICE_QUERY("nvmlDeviceGetPerformanceState", h);
  *p = NVML_PSTATE_0;
  return done(r, NVML_SUCCESS);
}

/* Data-center GPUs have no fan sensor: NVML says so (nvidia-smi prints N/A). */
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t h, unsigned int *speed) {
  DEVICE_QUERY("nvmlDeviceGetFanSpeed", h);
  (void)speed;
  return done(r, NVML_ERROR_NOT_SUPPORTED);
}

static nvmlReturn_t enabled(const char *api, nvmlDevice_t h, nvmlEnableState_t *state, nvmlEnableState_t value) {
  DEVICE_QUERY(api, h);
  *state = value;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t h, nvmlEnableState_t *m) {
  return enabled("nvmlDeviceGetPersistenceMode", h, m, NVML_FEATURE_ENABLED);
}
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t h, nvmlEnableState_t *m) {
  return enabled("nvmlDeviceGetDisplayActive", h, m, NVML_FEATURE_DISABLED);
}
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t h, nvmlEnableState_t *m) {
  return enabled("nvmlDeviceGetDisplayMode", h, m, NVML_FEATURE_DISABLED);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t h, nvmlEnableState_t *current, nvmlEnableState_t *pending) {
  DEVICE_QUERY("nvmlDeviceGetEccMode", h);
  *current = *pending = NVML_FEATURE_ENABLED;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, nvmlMemoryErrorType_t type,
                                                     nvmlEccCounterType_t counter, unsigned long long *n) {
  DEVICE_QUERY("nvmlDeviceGetTotalEccErrors", h);
  (void)type;
  (void)counter;
  *n = 0;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t h, nvmlComputeMode_t *m) {
  DEVICE_QUERY("nvmlDeviceGetComputeMode", h);
  *m = NVML_COMPUTEMODE_DEFAULT;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned int *current, unsigned int *pending) {
  DEVICE_QUERY("nvmlDeviceGetMigMode", h);
  *current = *pending = NVML_DEVICE_MIG_DISABLE;
  return done(r, NVML_SUCCESS);
}

MAYA_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *reasons) {
  DEVICE_QUERY("nvmlDeviceGetCurrentClocksEventReasons", h);
  *reasons = nvmlClocksEventReasonGpuIdle;
  return done(r, NVML_SUCCESS);
}

/* ------------------------------------------------------------------ topology (torch's peer access) */

/* The virtual GPUs of a node reach each other (as cudaDeviceCanAccessPeer says). */
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuP2PCapsIndex_t caps,
                                                nvmlGpuP2PStatus_t *status) {
  maya_rec *r = begin(API("nvmlDeviceGetP2PStatus"), a);
  (void)caps;
  if (device_of(a) < 0 || device_of(b) < 0 || !status) return done(r, NVML_ERROR_INVALID_ARGUMENT);
  *status = NVML_P2P_STATUS_OK;
  return done(r, NVML_SUCCESS);
}

/* The GPUs of a node are not part of a multi-node NVLink fabric (an HGX board's answer): torch then
 * exchanges memory handles by file descriptor. */
MAYA_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t h, nvmlGpuFabricInfoV_t *info) {
  DEVICE_QUERY("nvmlDeviceGetGpuFabricInfoV", h);
  unsigned version = info->version;
  memset(info, 0, sizeof *info);
  info->version = version;
  info->state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
  return done(r, NVML_SUCCESS);
}
