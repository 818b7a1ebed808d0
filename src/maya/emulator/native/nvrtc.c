/* libnvrtc stub: runtime compilation as torch's jiterator drives it (`torch.exp2`, `special.*` ops on CUDA;
 * torch 2.5 also compiles `erfinv_` and other elementwise kernels with NVRTC at their first use). Programs
 * "compile" at once to an image that only this emulator's driver loads (cuModuleLoadData keeps no code);
 * kernels are then known by the names cuModuleGetFunction is given, so their launches are recorded under
 * their own names like any other. Program creation and compilation are recorded (host work, domain other);
 * the image and the log are placeholders and a lowered name is the name expression itself (`extern "C"`
 * kernels keep their names). Every other function nvrtc.h declares fails loudly, by name (generated). */
#define _GNU_SOURCE
#include <cuda.h>
#include <nvrtc.h>
#include <stdlib.h>
#include <string.h>

#include "maya_emu.h"

static const char IMAGE[] = "maya-emulated-nvrtc-image";

typedef struct {
  char **names; /* name expressions added, returned as their lowered names */
  size_t n_names;
} program;

static void note(int api) {
  maya_rec *r = maya_begin(api, D_OTHER, K_PLAIN);
  maya_end(r, NVRTC_SUCCESS);
}

MAYA_EXPORT const char *nvrtcGetErrorString(nvrtcResult result) {
  switch (result) {
  case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
  case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
  case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
  case NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID: return "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID";
  default: return "NVRTC_ERROR_INTERNAL_ERROR (not supported by the maya emulator)";
  }
}

/* the release of the headers the stubs are built against: the one the installed torch links */
MAYA_EXPORT nvrtcResult nvrtcVersion(int *major, int *minor) {
  if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
  *major = CUDA_VERSION / 1000;
  *minor = CUDA_VERSION % 1000 / 10;
  return NVRTC_SUCCESS;
}

/* the architectures that release's NVRTC compiles for (torch caps the device's at the newest) */
static const int SUPPORTED[] = {
    75,  80,  86, 89, 90,
#if CUDA_VERSION >= 12080
    100, 120,
#endif
#if CUDA_VERSION >= 12090
    103,
#endif
};

MAYA_EXPORT nvrtcResult nvrtcGetNumSupportedArchs(int *n) {
  if (!n) return NVRTC_ERROR_INVALID_INPUT;
  *n = (int)(sizeof SUPPORTED / sizeof SUPPORTED[0]);
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcGetSupportedArchs(int *archs) {
  if (!archs) return NVRTC_ERROR_INVALID_INPUT;
  memcpy(archs, SUPPORTED, sizeof SUPPORTED);
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int num_headers,
                                           const char *const *headers, const char *const *include_names) {
  (void)name;
  (void)num_headers;
  (void)headers;
  (void)include_names;
  if (!prog || !src) return NVRTC_ERROR_INVALID_INPUT;
  note(API("nvrtcCreateProgram"));
  *prog = (nvrtcProgram)calloc(1, sizeof(program));
  return *prog ? NVRTC_SUCCESS : NVRTC_ERROR_OUT_OF_MEMORY;
}

MAYA_EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
  if (!prog || !*prog) return NVRTC_ERROR_INVALID_PROGRAM;
  program *p = (program *)*prog;
  for (size_t i = 0; i < p->n_names; i++) free(p->names[i]);
  free(p->names);
  free(p);
  *prog = NULL;
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options, const char *const *options) {
  (void)num_options;
  (void)options;
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  note(API("nvrtcCompileProgram"));
  return NVRTC_SUCCESS;
}

static nvrtcResult image_size(nvrtcProgram prog, size_t *size) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  if (!size) return NVRTC_ERROR_INVALID_INPUT;
  *size = sizeof IMAGE;
  return NVRTC_SUCCESS;
}

static nvrtcResult image(nvrtcProgram prog, char *out) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  if (!out) return NVRTC_ERROR_INVALID_INPUT;
  memcpy(out, IMAGE, sizeof IMAGE);
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *size) { return image_size(prog, size); }
MAYA_EXPORT nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx) { return image(prog, ptx); }
MAYA_EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size) { return image_size(prog, size); }
MAYA_EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin) { return image(prog, cubin); }

MAYA_EXPORT nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  if (!size) return NVRTC_ERROR_INVALID_INPUT;
  *size = 1;
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  if (!log) return NVRTC_ERROR_INVALID_INPUT;
  log[0] = '\0';
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char *const name_expression) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  if (!name_expression) return NVRTC_ERROR_INVALID_INPUT;
  program *p = (program *)prog;
  char **names = realloc(p->names, (p->n_names + 1) * sizeof *names);
  char *copy = strdup(name_expression);
  if (!names || !copy) {
    free(copy);
    if (names) p->names = names;
    return NVRTC_ERROR_OUT_OF_MEMORY;
  }
  p->names = names;
  p->names[p->n_names++] = copy;
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char *const name_expression,
                                            const char **lowered_name) {
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  if (!name_expression || !lowered_name) return NVRTC_ERROR_INVALID_INPUT;
  program *p = (program *)prog;
  for (size_t i = 0; i < p->n_names; i++)
    if (!strcmp(p->names[i], name_expression)) {
      *lowered_name = p->names[i];
      return NVRTC_SUCCESS;
    }
  return NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID;
}
