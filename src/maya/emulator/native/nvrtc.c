/* libnvrtc stub: runtime compilation as torch's jiterator uses it (torch 2.5 compiles some elementwise
 * kernels, `erfinv_` among them, with NVRTC at their first use). A program "compiles" at once to an image
 * that names no kernel: the driver stub's modules know their kernels by the name cuModuleGetFunction
 * asks for, so each launch is recorded under its kernel's own name. Compilations are recorded (domain
 * other); every entry point not here fails loudly (generated). */
#include <cuda_runtime_api.h>
#include <nvrtc.h>
#include <stdlib.h>
#include <string.h>

#include "maya_emu.h"

typedef struct {
  char *name_expression; /* the last one added: jiterator adds the kernel it asks the lowered name of */
} maya_program;

static const char image[] = "maya emulator: NVRTC program (kernels are found by name)";
static const char empty_log[] = "";

MAYA_EXPORT nvrtcResult nvrtcVersion(int *major, int *minor) {
  *major = CUDART_VERSION / 1000;
  *minor = CUDART_VERSION % 1000 / 10;
  return NVRTC_SUCCESS;
}

MAYA_EXPORT const char *nvrtcGetErrorString(nvrtcResult result) {
  switch (result) {
    case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
    case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_ERROR_INTERNAL_ERROR: return "NVRTC_ERROR_INTERNAL_ERROR (not emulated by Maya)";
    default: return "NVRTC error (not emulated by Maya)";
  }
}

MAYA_EXPORT nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int n_headers,
                                           const char *const *headers, const char *const *include_names) {
  (void)src; (void)name; (void)n_headers; (void)headers; (void)include_names;
  if (!prog) return NVRTC_ERROR_INVALID_INPUT;
  *prog = (nvrtcProgram)calloc(1, sizeof(maya_program));
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog) {
  if (!prog || !*prog) return NVRTC_ERROR_INVALID_PROGRAM;
  free(((maya_program *)*prog)->name_expression);
  free(*prog);
  *prog = NULL;
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char *name_expression) {
  maya_program *p = (maya_program *)prog;
  if (!p || !name_expression) return NVRTC_ERROR_INVALID_INPUT;
  free(p->name_expression);
  p->name_expression = strdup(name_expression);
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int n_options, const char *const *options) {
  (void)n_options; (void)options;
  if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
  maya_end(maya_begin(API("nvrtcCompileProgram"), D_OTHER, K_PLAIN), NVRTC_SUCCESS);
  return NVRTC_SUCCESS;
}

/* `extern "C"` kernels keep their names; a name expression lowers to itself */
MAYA_EXPORT nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char *name_expression, const char **lowered) {
  if (!prog || !name_expression || !lowered) return NVRTC_ERROR_INVALID_INPUT;
  *lowered = ((maya_program *)prog)->name_expression ? ((maya_program *)prog)->name_expression : name_expression;
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size) {
  (void)prog;
  *size = sizeof empty_log;
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log) {
  (void)prog;
  memcpy(log, empty_log, sizeof empty_log);
  return NVRTC_SUCCESS;
}

static nvrtcResult image_size(nvrtcProgram prog, size_t *size) {
  if (!prog || !size) return NVRTC_ERROR_INVALID_INPUT;
  *size = sizeof image;
  return NVRTC_SUCCESS;
}

static nvrtcResult image_copy(nvrtcProgram prog, char *out) {
  if (!prog || !out) return NVRTC_ERROR_INVALID_INPUT;
  memcpy(out, image, sizeof image);
  return NVRTC_SUCCESS;
}

MAYA_EXPORT nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *size) { return image_size(prog, size); }
MAYA_EXPORT nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx) { return image_copy(prog, ptx); }
MAYA_EXPORT nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size) { return image_size(prog, size); }
MAYA_EXPORT nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin) { return image_copy(prog, cubin); }
