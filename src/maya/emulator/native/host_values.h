/* Device values the host can know (host_values.cpp), called by the op observer (ops_observer.cpp). */
#pragma once
#include <ATen/record_function.h>

#include <cstdint>
#include <string>
#include <vector>

namespace maya_values {

/* Per-op state the observer keeps from enter to exit. */
struct OpValues {
  int64_t work_at_enter = 0;       // kernel work the thread had issued when the op entered
  int64_t child_work = 0;          // kernel work issued by ops nested in this one
  bool children = false;           // an op ran nested in this one
  bool read_set = false;           // a value for a host read inside the op was handed to libmaya_emu
  uint8_t inputs_known = 0;        // provenance of the inputs if the op could run on the host, else 0
  std::vector<c10::IValue> inputs; // kept from enter when the exit needs them (RecordFunction drops them)
};

void on_enter(const at::RecordFunction &fn, OpValues &op);
/* `own_work`: kernel work the op issued itself (not its nested ops). */
void on_exit(const at::RecordFunction &fn, OpValues &op, int64_t own_work);
/* Whether the storage starting at `storage_base` holds known values: 0 unknown, 1 computed from real inputs,
 * 2 assumed (a routing stand-in). */
uint8_t provenance_of(const void *storage_base);
/* JSON: {"computed": ops computed on the host, "failed": ..., "routing": {op: calls}} */
std::string summary_json();

} // namespace maya_values
