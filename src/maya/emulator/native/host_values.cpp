/* Device values the host can know, and stand-ins for routing decisions it cannot.
 *
 * Kernels write nothing under emulation, so a value only a GPU computes is stale bytes. But many values
 * the host reads are bookkeeping over data the host itself put on the device: token counts of labels
 * copied there (`(labels != -100).sum()`), expert counts of a routing (`bincount`, `histc`, one-hot
 * sums), offsets (`cumsum`), indices (`nonzero`, `argsort` of expert ids). Such values are *known*:
 * a storage is known when a copy or memset from the host filled it or when its op was computed here,
 * until it is freed (the next storage in its block is not).
 * An aten op that issued kernels itself and whose inputs are all known and small (up to 4 MiB of
 * tensors, all on the device or host scalars) is run again on the host, on CPU views of the virtual
 * device memory, and its outputs become known; any other op that issued kernels leaves its outputs
 * unknown. Random ops (they would draw from the host's generator) and views are never run here.
 *
 * A routing decision taken on unknown scores (`topk`, `argmax`/`argmin` or `max`/`min` along a dim, `sort` of router
 * logits) gets the indices a trained, balanced router would give: choice j of row r of a top-k over n takes (r + j) mod
 * n (every expert gets its share of tokens in every slot, none over its capacity, as torchtitan's
 * `_debug_force_load_balance` routes), a sort the identity permutation. Those indices are known but *assumed*, and so
 * is everything computed from them. A stand-in is counted (and summarised for `maya predict`) once a later op reads
 * its indices: a `max` along a dim whose indices are dropped (the cross-entropy's `max` of the logits) routed
 * nothing.
 *
 * A NaN/Inf check (`isnan`, `isinf`, `isposinf`, `isneginf`, `isfinite`) of a value only a GPU computes gets a
 * healthy run's answer (nothing NaN or infinite), written to its output, which is then known: every read of
 * the answer, or of what is computed from it, agrees within a step and across steps.
 *
 * Host reads of known values are real: `.item()` and a copy to the host read the bytes as they are (no loop
 * stand-in; the same known value read after the same work MAYA_EMU_LOOP_LIMIT times stops the rank,
 * host_read.c), and `nonzero`, which reads its own count inside the op, gets the count of its known input.
 * An `.item()` or a copy to the host of a value only a GPU computes reads 0 (no overflow found, no NaN, a flag
 * not set; not the stale bytes of whatever the allocation held), and a loop's stand-ins when repeated
 * (host_read.c). An op with unknown inputs leaves unknown every argument its schema writes, returned or not. */
#include "host_values.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

extern "C" {
/* libmaya_emu (host_read.c): the value the thread's next host read inside this op returns; NULL bytes:
 * the device bytes as they are; size 0 clears. `code` is recorded with the read (3 computed, 4 assumed). */
void maya_emu_read_value(const void *bytes, int size, int code);
}

namespace maya_values {
namespace {

enum : uint8_t { UNKNOWN = 0, REAL = 1, ASSUMED = 2 };
enum : int { READ_COMPUTED = 3, READ_ASSUMED = 4, READ_UNKNOWN = 5 };
constexpr int64_t kComputeBytes = 4 << 20; // the most tensor bytes an op may have to be run on the host
constexpr int64_t kCopyBytes = 1 << 20;    // copies and collectives move bytes up to this (MAYA_SMALL_COPY)

std::mutex mu;
/* A known storage's provenance and the storage object it was known in, held weakly (the object outlives its
 * data while held, so no new storage can take its address): when a storage is freed its block's next storage
 * holds stale bytes, not a known value, whatever op made it (a one-element `stack` is a copy no op sees). */
struct Known {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  uint8_t p;
};
std::unordered_map<const void *, Known> known;        // storage base -> its known storage
std::atomic<bool> any_known{false};                   // !known.empty(), read without the lock by every op
std::map<std::string, int64_t> routing;               // routing stand-ins whose indices were read, per op name
std::unordered_map<const void *, std::string> unread; // storage base of stand-in indices not read yet -> op name
std::atomic<bool> any_unread{false};                  // !unread.empty(), read without the lock by every op's entry
std::atomic<int64_t> computed{0}, failed{0};

/* MAYA_EMU_VALUES_DEBUG=1: say on stderr what each op that issued kernels did with its values. */
void debug(const at::RecordFunction &fn, const char *what) {
  static const bool on = [] {
    const char *v = std::getenv("MAYA_EMU_VALUES_DEBUG");
    return v && *v == '1';
  }();
  if (on) std::fprintf(stderr, "maya values: %s %s\n", fn.name(), what);
}

struct Info {
  std::optional<c10::OperatorHandle> handle;
  bool runnable = false;    // not a view, not random, found in the dispatcher
  std::vector<bool> outs;   // per argument: an out= tensor (written, never read)
  std::vector<bool> writes; // per argument: written (`Tensor(a!)`), returned or not
  bool any_write = false;
};

bool plain_device(const at::Tensor &t) {
  if (!t.defined() || !t.is_cuda() || t.layout() != at::kStrided || !t.has_storage()) return false;
  auto keys = t.key_set();
  return !keys.has(c10::DispatchKey::Python) && !keys.has(c10::DispatchKey::Functionalize) &&
         t.storage().data() != nullptr;
}

const void *key_of(const at::Tensor &t) { return t.storage().data(); }

/* A tensor subclass (DTensor, AsyncCollectiveTensor) or functional wrapper: an op on it runs its inner ops on
 * the plain tensors it wraps, which are observed themselves; the outer op may return such a plain tensor
 * (`wait_tensor` of an AsyncCollectiveTensor returns the waited one) and must leave what they made of it. */
bool wrapped(const at::Tensor &t) {
  if (!t.defined()) return false;
  auto keys = t.key_set();
  return keys.has(c10::DispatchKey::Python) || keys.has(c10::DispatchKey::Functionalize);
}

/* `t`'s entry in `known` (the lock held), or end(): an entry of a storage since freed, whose block `t` took, is
 * erased. */
std::unordered_map<const void *, Known>::iterator known_entry(const at::Tensor &t) {
  auto it = known.find(key_of(t));
  if (it == known.end() || it->second.storage._unsafe_get_target() == t.storage().unsafeGetStorageImpl()) return it;
  known.erase(it);
  any_known.store(!known.empty(), std::memory_order_relaxed);
  return known.end();
}

uint8_t provenance(const at::Tensor &t) {
  if (!any_known.load(std::memory_order_relaxed)) return UNKNOWN; // most ops of a training step: no lock taken
  std::lock_guard<std::mutex> g(mu);
  auto it = known_entry(t);
  return it == known.end() ? UNKNOWN : it->second.p;
}

bool covers_storage(const at::Tensor &t) {
  return t.is_contiguous() && t.storage_offset() == 0 &&
         static_cast<size_t>(t.numel()) * t.element_size() >= t.storage().nbytes();
}

/* A written output: known with `p` where it fills its storage or the storage was known; else unknown. */
void mark(const at::Tensor &t, uint8_t p) {
  if (p == UNKNOWN && !any_known.load(std::memory_order_relaxed) && !any_unread.load(std::memory_order_relaxed))
    return; // nothing known to forget
  if (!plain_device(t)) return;
  std::lock_guard<std::mutex> g(mu);
  if (unread.erase(key_of(t))) any_unread.store(!unread.empty(), std::memory_order_relaxed); // overwritten
  auto it = known_entry(t);
  if (p == UNKNOWN) {
    if (it != known.end()) known.erase(it);
  } else if (it != known.end()) {
    it->second.p = std::max(it->second.p, p);
  } else if (covers_storage(t)) {
    known.emplace(key_of(t), Known{t.storage().getWeakStorageImpl(), p});
  }
  any_known.store(!known.empty(), std::memory_order_relaxed);
}

template <typename F> void each_tensor(const c10::IValue &v, F &&f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor &t : v.toTensorList().vec()) f(t);
  } else if (v.isList()) { // nested too: c10d's Tensor[][]
    for (const c10::IValue &e : v.toListRef()) each_tensor(e, f);
  }
}

void mark_outputs(const at::RecordFunction &fn, uint8_t p) {
  for (const c10::IValue &v : fn.outputs()) each_tensor(v, [&](const at::Tensor &t) { mark(t, p); });
}

at::Tensor host_view(const at::Tensor &t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(),
                       at::TensorOptions().dtype(t.scalar_type()).device(at::kCPU));
}

c10::IValue to_host(const c10::IValue &v) {
  if (v.isTensor()) {
    const at::Tensor &t = v.toTensor();
    return t.defined() && t.is_cuda() ? c10::IValue(host_view(t)) : v;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor &t : v.toTensorList().vec()) out.push_back(t.is_cuda() ? host_view(t) : t);
    return out;
  }
  if (v.isList() && v.toList().elementType()->kind() == c10::TypeKind::OptionalType) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue &e : v.toListRef())
      out.push_back(e.isTensor()
                        ? std::optional<at::Tensor>(e.toTensor().is_cuda() ? host_view(e.toTensor()) : e.toTensor())
                        : std::nullopt);
    return out;
  }
  if (v.isDevice() && v.toDevice().is_cuda()) return c10::Device(c10::kCPU);
  return v;
}

const Info &info_of(const at::RecordFunction &fn) {
  thread_local std::unordered_map<std::string, Info> cache;
  auto name = fn.operator_name();
  std::string key = name ? name->name + "." + name->overload_name : std::string(fn.name());
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Info info;
  if (name) {
    info.handle = c10::Dispatcher::singleton().findOp(*name);
    if (info.handle && info.handle->hasSchema()) {
      const c10::FunctionSchema &s = info.handle->schema();
      bool view = false, random = false;
      for (const c10::Argument &r : s.returns())
        if (r.alias_info() && !r.alias_info()->isWrite()) view = true;
      for (const c10::Argument &a : s.arguments()) {
        if (a.type()->str().find("Generator") != std::string::npos) random = true;
        info.outs.push_back(a.is_out());
        info.writes.push_back(a.alias_info() && a.alias_info()->isWrite());
        info.any_write = info.any_write || info.writes.back();
      }
      std::string_view n = name->name;
      bool bookkeeping = n.starts_with("aten::empty") || n.starts_with("aten::new_empty") || n == "aten::resize_" ||
                         n == "aten::set_" || n == "aten::_local_scalar_dense" || n == "aten::record_stream" ||
                         n.starts_with("aten::_assert") || n == "aten::_foreach_copy_";
      info.runnable = !view && !random && !bookkeeping && n.starts_with("aten::");
    }
  }
  return cache.emplace(key, std::move(info)).first->second;
}

/* The inputs' provenance if the op could run on the host (every device tensor plain and known, the
 * others host scalars, within the size bound), else UNKNOWN. */
template <typename Inputs> // RecordFunction's inputs (ArrayRef of IValue, of const IValue before torch 2.6)
uint8_t inputs_known(const Inputs &inputs, bool skip_first, int64_t *bytes, const std::vector<bool> *outs = nullptr) {
  uint8_t p = REAL;
  bool ok = true, first = true, written = false;
  auto check = [&](const at::Tensor &t) {
    if (!ok || !t.defined()) return;
    if ((std::exchange(first, false) && skip_first) || written) { // only written: need not be known, only fit
      *bytes += t.is_cuda() ? static_cast<int64_t>(t.numel()) * t.element_size() : 0;
      return;
    }
    if (!t.is_cuda()) {
      ok = t.device().is_cpu() && t.dim() == 0 && t.layout() == at::kStrided; // host scalars only
      return;
    }
    if (!plain_device(t)) {
      ok = false;
      return;
    }
    *bytes += static_cast<int64_t>(t.numel()) * t.element_size();
    if (*bytes > kComputeBytes) {
      ok = false;
      return;
    }
    uint8_t q = provenance(t);
    if (q == UNKNOWN) ok = false;
    p = std::max(p, q);
  };
  size_t i = 0;
  for (const c10::IValue &v : inputs) {
    written = outs && i < outs->size() && (*outs)[i];
    each_tensor(v, check);
    ++i;
  }
  return ok ? p : UNKNOWN;
}

bool overwrites_first(std::string_view n);

/* An out= overload (`arange.out`, `sum.IntList_out`): its out tensors are written, not read. Read without copying
 * the operator's name where RecordFunction has `overload_name()` (torch >= 2.7). */
template <typename Fn> bool out_overload(const Fn &fn) {
  if constexpr (requires { fn.overload_name(); }) {
    return std::string_view(fn.overload_name()).ends_with("out");
  } else {
    auto name = fn.operator_name();
    return name && name->overload_name.ends_with("out");
  }
}

/* `inputs_known`, the out= tensors of an out= overload left out (they need only fit). */
template <typename Inputs>
uint8_t read_inputs_known(const at::RecordFunction &fn, const Inputs &inputs, int64_t *bytes) {
  bool skip_first = overwrites_first(fn.name());
  if (!out_overload(fn)) return inputs_known(inputs, skip_first, bytes);
  return inputs_known(inputs, skip_first, bytes, &info_of(fn).outs);
}

/* Whether the outputs can receive host results: plain device tensors, within the size bound. */
bool outputs_fit(const at::RecordFunction &fn, int64_t bytes) {
  bool ok = true, any_device = false;
  for (const c10::IValue &v : fn.outputs())
    each_tensor(v, [&](const at::Tensor &t) {
      if (!ok || !t.defined()) return;
      any_device |= t.is_cuda();
      if (!plain_device(t)) {
        ok = false;
        return;
      }
      bytes += static_cast<int64_t>(t.numel()) * t.element_size();
      if (bytes > kComputeBytes) ok = false;
    });
  return ok && any_device;
}

/* Guards for running ops on the host from inside an observer callback: no observation, no autograd,
 * no autocast, no Python modes (fake tensors, DTensor, flop counters) intercepting them. */
struct HostGuards {
  at::DisableRecordFunctionGuard no_observer;
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  c10::impl::ExcludeDispatchKeyGuard no_modes{
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot, c10::DispatchKey::PreDispatch,
                           c10::DispatchKey::AutocastCPU, c10::DispatchKey::AutocastCUDA})};
};

/* Run the op on CPU views of its device tensors; its device outputs receive the results. */
bool run_on_host(const at::RecordFunction &fn, const std::vector<c10::IValue> &inputs, const Info &info) {
  const auto &outs = fn.outputs();
  try {
    HostGuards guards;
    torch::jit::Stack stack;
    stack.reserve(inputs.size());
    for (const c10::IValue &v : inputs) stack.push_back(to_host(v));
    info.handle->callBoxed(stack);
    if (stack.size() != outs.size()) return false;
    for (size_t i = 0; i < outs.size(); i++) {
      if (!outs[i].isTensor()) {
        if (outs[i].isNone() || !outs[i].isTensorList()) continue;
        return false;
      }
      const at::Tensor &dev = outs[i].toTensor();
      if (!dev.defined() || !dev.is_cuda()) continue;
      if (!stack[i].isTensor()) return false;
      const at::Tensor &res = stack[i].toTensor();
      if (res.data_ptr() == dev.data_ptr()) continue; // in place or out=: written through the view
      if (res.sizes() != dev.sizes()) return false;
      host_view(dev).copy_(res);
    }
    return true;
  } catch (const std::exception &) { return false; }
}

int64_t arg_int(const std::vector<c10::IValue> &in, size_t i, int64_t fallback) {
  return in.size() > i && in[i].isInt() ? in[i].toInt() : fallback;
}

/* The indices a balanced router gives (or, `identity`, a sort's): `idx` holds, along `dim`, `k` choices
 * out of `n` per row (k = 1 with the dim reduced away when `kept` is false). */
void write_indices(const at::Tensor &idx, int64_t dim, int64_t n, bool kept, bool identity) {
  HostGuards guards;
  at::Tensor out = host_view(idx);
  auto opts = at::TensorOptions().dtype(out.scalar_type());
  if (!kept) {
    out.copy_((at::arange(out.numel(), opts.dtype(at::kLong)) % n).view(out.sizes()));
    return;
  }
  at::Tensor moved = out.movedim(dim, -1);
  int64_t k = moved.size(-1), rows = k ? moved.numel() / k : 0;
  at::Tensor r = at::arange(rows, opts.dtype(at::kLong)).unsqueeze(1), j = at::arange(k, opts.dtype(at::kLong));
  at::Tensor v = identity ? j.expand({rows, k}) : (r + j) % n;
  moved.copy_(v.reshape(moved.sizes()));
}

/* An op with unknown inputs leaves every argument its schema writes unknown, returned or not: the in-place
 * ops returning nothing (`_foreach_add_`, the unscale op's `found_inf`, `_amp_update_scale_`'s growth
 * tracker) would otherwise leave a value known that a kernel rewrote, and a loop on it would read it stale. */
void mark_written(const at::RecordFunction &fn, const std::vector<c10::IValue> &in) {
  if (in.empty()) return;
  const Info &info = info_of(fn);
  for (size_t i = 0; i < in.size() && i < info.writes.size(); i++)
    if (info.writes[i]) each_tensor(in[i], [&](const at::Tensor &t) { mark(t, UNKNOWN); });
}

/* Whether an op may leave a known value stale: something is known and its schema writes an argument. */
bool may_write_known(const at::RecordFunction &fn) {
  return any_known.load(std::memory_order_relaxed) && info_of(fn).any_write;
}

/* Ops that write their first argument without reading it. */
bool overwrites_first(std::string_view n) { return n == "aten::copy_" || n == "aten::fill_" || n == "aten::zero_"; }

bool is_routing(std::string_view n) {
  return n == "aten::topk" || n == "aten::sort" || n == "aten::max" || n == "aten::min" || n == "aten::argmax" ||
         n == "aten::argmin";
}

/* A routing decision on unknown scores: balanced indices. Returns true if the op was one. */
bool routing_stand_in(const at::RecordFunction &fn, const std::vector<c10::IValue> &in) {
  std::string_view name = fn.name();
  const auto &outs = fn.outputs();
  bool arg = name == "aten::argmax" || name == "aten::argmin"; // indices only, as output 0
  size_t at = arg ? 0 : 1;
  if (in.empty() || !in[0].isTensor() || outs.size() <= at || !outs[at].isTensor()) return false;
  const at::Tensor &x = in[0].toTensor();
  const at::Tensor &idx = outs[at].toTensor();
  if (!plain_device(x) || !plain_device(idx) || x.dim() == 0) return false;
  bool identity = false, kept = true;
  int64_t dim;
  if (name == "aten::topk") {
    dim = arg_int(in, 2, -1);
  } else if (name == "aten::sort") {
    dim = in.size() > 1 && in[1].isInt() ? in[1].toInt() : arg_int(in, 2, -1); // sort(self, dim, ..) / sort.stable
    identity = true;
  } else { // max.dim / min.dim (self, dim, keepdim), argmax / argmin (self, dim?, keepdim)
    if (in.size() < 3 || !in[1].isInt()) return false;
    dim = in[1].toInt();
    kept = in[2].isBool() && in[2].toBool();
  }
  dim = c10::maybe_wrap_dim(dim, x.dim());
  try {
    write_indices(idx, dim, x.size(dim), kept, identity);
  } catch (const std::exception &) { return false; }
  if (!arg) mark(outs[0].toTensor(), UNKNOWN);
  mark(idx, ASSUMED);
  std::lock_guard<std::mutex> g(mu);
  unread[key_of(idx)] = std::string(name);
  any_unread.store(true, std::memory_order_relaxed);
  return true;
}

/* Count the routing stand-ins whose indices `fn` reads (its inputs, less the first of an op that only writes it;
 * a backward op reading them to route gradients back, or a detach, decides nothing). */
template <typename Inputs> void count_read_indices(std::string_view n, const Inputs &in) {
  if (!any_unread.load(std::memory_order_relaxed) || n.ends_with("_backward") || n == "aten::detach") return;
  std::lock_guard<std::mutex> g(mu);
  if (unread.empty()) return;
  for (size_t i = overwrites_first(n) ? 1 : 0; i < in.size(); i++)
    each_tensor(in[i], [&](const at::Tensor &t) {
      if (!t.defined() || !t.is_cuda() || !t.has_storage()) return;
      auto it = unread.find(t.storage().data());
      if (it == unread.end()) return;
      routing[it->second]++;
      unread.erase(it);
      any_unread.store(!unread.empty(), std::memory_order_relaxed);
    });
}

bool is_collective(std::string_view n) { return n.starts_with("c10d::") || n.starts_with("_c10d_functional::"); }

/* An op that issued no kernel and ran no nested op: a copy moves a small buffer's bytes; an allocation
 * holds whatever was there. */
void leaf_without_kernels(const at::RecordFunction &fn, const std::vector<c10::IValue> &in) {
  std::string_view n = fn.name();
  if (n == "aten::copy_" && in.size() >= 2 && in[0].isTensor() && in[1].isTensor()) {
    const at::Tensor &dst = in[0].toTensor();
    const at::Tensor &src = in[1].toTensor();
    int64_t bytes = static_cast<int64_t>(dst.numel()) * dst.element_size();
    uint8_t p = src.is_cuda() ? (plain_device(src) ? provenance(src) : UNKNOWN) : REAL;
    mark(dst, bytes <= kCopyBytes ? p : UNKNOWN);
  } else if (n.starts_with("aten::empty") || n.starts_with("aten::new_empty")) {
    mark_outputs(fn, UNKNOWN);
  }
}

/* The NaN/Inf predicates. Over a value only a GPU computes, each answers as a healthy run does (no NaN,
 * no Inf, all finite): the answer is written to its output, which becomes known, so every later read of it
 * or of what is computed from it (`.any()`, `logical_or`, `~`) agrees, and no loop stand-in can flip it
 * (Megatron checks each gradient bucket's norm with `isnan`, then `isinf`: equal buckets ask in equal
 * windows). Returns 1 for isfinite, 0 for the others, -1 for any other op. */
int finiteness_answer(std::string_view n) {
  if (n == "aten::isfinite") return 1;
  return n == "aten::isnan" || n == "aten::isinf" || n == "aten::isposinf" || n == "aten::isneginf" ? 0 : -1;
}

/* A NaN/Inf predicate on a plain device tensor of unknown values: its output (within the size bound) gets
 * the healthy answer. Returns whether it did. */
bool finiteness_stand_in(const at::RecordFunction &fn, const std::vector<c10::IValue> &in, int answer) {
  const auto &outs = fn.outputs();
  if (in.empty() || !in[0].isTensor() || outs.empty() || !outs[0].isTensor()) return false;
  const at::Tensor &x = in[0].toTensor();
  if (!plain_device(x) || provenance(x) != UNKNOWN) return false;
  const at::Tensor &out = outs[0].toTensor();
  if (!plain_device(out) || static_cast<int64_t>(out.numel()) * out.element_size() > kComputeBytes) return false;
  try {
    HostGuards guards;
    host_view(out).fill_(answer);
  } catch (const std::exception &) { return false; }
  mark(out, REAL);
  return true;
}

/* c10d's gathers, scatters and all-to-alls take their output tensors first (`allgather_(outputs, inputs,
 * ...)`): those are filled, not read, so their provenance does not count. */
bool outputs_first(std::string_view n) {
  return n.starts_with("c10d::") &&
         (n.find("gather") != std::string_view::npos || n.find("scatter") != std::string_view::npos ||
          n.find("alltoall") != std::string_view::npos);
}

/* A collective (SPMD: the rank's own data stands in for its peers') moves small buffers' bytes: its outputs
 * are known when the tensors it reads are (DDP's check that ranks hold as many parameters: an allgather of
 * a count the host put on the device, read back with `.item()`). */
void collective(const at::RecordFunction &fn, const std::vector<c10::IValue> &in) {
  bool subclass = false;
  for (const c10::IValue &v : in) each_tensor(v, [&](const at::Tensor &t) { subclass |= wrapped(t); });
  if (subclass) { // e.g. `wait_tensor` of an AsyncCollectiveTensor: the inner op on the plain tensor marks it
    debug(fn, "collective on a tensor subclass: left to its inner op");
    return;
  }
  uint8_t p = REAL;
  int64_t bytes = 0;
  for (size_t i = outputs_first(fn.name()) ? 1 : 0; i < in.size(); i++)
    each_tensor(in[i], [&](const at::Tensor &t) {
      if (!t.defined() || !t.is_cuda()) return;
      bytes += static_cast<int64_t>(t.numel()) * t.element_size();
      uint8_t q = plain_device(t) ? provenance(t) : UNKNOWN;
      p = q == UNKNOWN || p == UNKNOWN ? UNKNOWN : std::max(p, q);
    });
  p = bytes <= kCopyBytes ? p : UNKNOWN;
  debug(fn, p == UNKNOWN ? "collective: outputs unknown" : "collective: outputs known");
  mark_outputs(fn, p);
  if (outputs_first(fn.name()) && !in.empty()) each_tensor(in[0], [&](const at::Tensor &t) { mark(t, p); });
}

} // namespace

void on_enter(const at::RecordFunction &fn, OpValues &op) {
  std::string_view n = fn.name();
  const auto &in = fn.inputs();
  if (fn.scope() == at::RecordScope::FUNCTION) {
    count_read_indices(n, in);
    int64_t bytes = 0;
    op.inputs_known = in.empty() ? UNKNOWN : read_inputs_known(fn, in, &bytes);
    if (op.inputs_known != UNKNOWN || is_routing(n) || n == "aten::copy_" || is_collective(n) ||
        finiteness_answer(n) >= 0 || may_write_known(fn))
      op.inputs.assign(in.begin(), in.end());
  }
  if (in.empty() || !in[0].isTensor()) return;
  const at::Tensor &x = in[0].toTensor();
  if (n == "aten::_local_scalar_dense") {
    if (!plain_device(x)) return;
    uint8_t p = provenance(x);
    maya_emu_read_value(nullptr, static_cast<int>(x.element_size()),
                        p == UNKNOWN ? READ_UNKNOWN
                        : p == REAL  ? READ_COMPUTED
                                     : READ_ASSUMED);
    op.read_set = true;
  } else if (n == "aten::copy_" && !x.is_cuda() && in.size() >= 2 && in[1].isTensor()) {
    // A device value copied to the host (`.cpu()`, `.tolist()`) reads as `.item()` of it does: a known one as
    // it is (Megatron's token count of its one local expert, 8 bytes, every MoE layer: no loop stand-in flips
    // the next layer's equal read), an unknown one as 0 first.
    const at::Tensor &src = in[1].toTensor();
    if (!plain_device(src)) return;
    uint8_t p = provenance(src);
    maya_emu_read_value(nullptr, 8, p == UNKNOWN ? READ_UNKNOWN : p == REAL ? READ_COMPUTED : READ_ASSUMED);
    op.read_set = true;
  } else if (n == "aten::nonzero") { // reads its own count: the count of its known input
    if (!plain_device(x)) return;
    uint8_t p = provenance(x);
    if (p == UNKNOWN || static_cast<int64_t>(x.numel()) * x.element_size() > kComputeBytes) {
      maya_emu_read_value(nullptr, 8, READ_UNKNOWN); // no element is known to be non-zero
      op.read_set = true;
      return;
    }
    try {
      HostGuards guards;
      int64_t count = at::count_nonzero(host_view(x)).item<int64_t>();
      maya_emu_read_value(&count, 8, p == REAL ? READ_COMPUTED : READ_ASSUMED);
      op.read_set = true;
    } catch (const std::exception &) {}
  }
}

void on_exit(const at::RecordFunction &fn, OpValues &op, int64_t own_work) {
  if (op.read_set) maya_emu_read_value(nullptr, 0, 0);
  if (fn.scope() != at::RecordScope::FUNCTION && fn.scope() != at::RecordScope::BACKWARD_FUNCTION) return;
  if (is_collective(fn.name())) { // whether or not its kernels are counted as its own work
    collective(fn, op.inputs);
    return;
  }
  if (int answer = finiteness_answer(fn.name()); answer >= 0 && finiteness_stand_in(fn, op.inputs, answer)) {
    debug(fn, "NaN/Inf check on unknown values: a healthy run's answer"); // over what its nested ops made of it
    return;
  }
  if (own_work <= 0) {
    if (!op.children) leaf_without_kernels(fn, op.inputs);
    return;
  }
  uint8_t p = op.inputs_known;
  int64_t bytes = 0;
  if (p != UNKNOWN && !op.inputs.empty() && read_inputs_known(fn, op.inputs, &bytes) != UNKNOWN &&
      outputs_fit(fn, bytes)) {
    const Info &info = info_of(fn);
    if (info.runnable && run_on_host(fn, op.inputs, info)) {
      debug(fn, "computed on the host");
      computed.fetch_add(1, std::memory_order_relaxed);
      mark_outputs(fn, p);
      return;
    }
    if (info.runnable) failed.fetch_add(1, std::memory_order_relaxed);
    debug(fn, info.runnable ? "failed on the host: outputs unknown" : "not run on the host: outputs unknown");
  } else if (!op.inputs.empty() && routing_stand_in(fn, op.inputs)) {
    debug(fn, "balanced routing stand-in");
    return;
  } else {
    debug(fn, "inputs unknown: outputs unknown");
  }
  mark_outputs(fn, UNKNOWN);
  mark_written(fn, op.inputs);
}

uint8_t provenance_of(const void *storage_base) {
  std::lock_guard<std::mutex> g(mu);
  auto it = known.find(storage_base);
  return it == known.end() || it->second.storage.expired() ? UNKNOWN : it->second.p;
}

std::string summary_json() {
  std::lock_guard<std::mutex> g(mu);
  std::string s = "{\"computed\":" + std::to_string(computed.load()) + ",\"failed\":" + std::to_string(failed.load()) +
                  ",\"routing\":{";
  bool first = true;
  for (const auto &[name, n] : routing) {
    s += (first ? "\"" : ",\"") + name + "\":" + std::to_string(n);
    first = false;
  }
  return s + "}}";
}

} // namespace maya_values
