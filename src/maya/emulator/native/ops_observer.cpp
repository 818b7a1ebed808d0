/* libmaya_ops.so: framework context for the emulator, from a global RecordFunction observer.
 *
 * Every RecordFunction (aten ops, autograd nodes, record_function ranges, record_param_comms) and
 * every module range the runner opens becomes an op with a process-wide id, its parent on the same
 * thread, the autograd sequence number and the input shapes and dtypes. The innermost open op of a
 * thread is handed to libmaya_emu (maya_emu_set_op) so each recorded CUDA call carries it. Records
 * are fixed-size (OpRecord, `OP_RECORD_DTYPE` in capture_format.py) in per-thread buffers flushed to
 * `<out>/ops-<tid>.bin`; names and input signatures are interned into `<out>/op_strings.tsv`.
 */
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include "host_values.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
void maya_emu_set_op(int64_t op); // libmaya_emu: the op later records on this thread belong to
int64_t maya_now(void);
void maya_emu_progress(void);                      // training progressed (host reads, host_read.c)
void maya_emu_read_one(const void *one, int size); // the element type of the scalar read next
void maya_emu_describe_ops(const char *(*fn)(void));
int64_t maya_emu_kernel_work(void); // kernels this thread has issued (record.c)
}

namespace {

enum : int32_t { ENTER = 0, EXIT = 1 };
enum : int32_t { FLAG_AUTOGRAD_THREAD = 1 };

/* An op, written at enter and completed in the buffer at exit; an op whose enter record was already
 * flushed gets an EXIT record (t_ns = its end) instead. The thread id is in the file name. */
struct OpRecord {
  int64_t op_id, parent, t_ns, end_ns, seq_nr;
  int32_t iteration, name_id, inputs_id;
  int8_t kind, scope;
  int16_t flags;
};
static_assert(sizeof(OpRecord) == 56, "OpRecord layout must match OP_RECORD_DTYPE in capture_format.py");

constexpr size_t kBufferRecords = 4096;
/* A forked child (a DataLoader worker) inherits the callback, the buffers and the file descriptors:
 * it records nothing and writes nothing, so the parent's trace is never duplicated. */
bool forked_child = false;
std::atomic<int64_t> next_op{0};
std::atomic<int32_t> iteration{0};
std::string out_dir;

std::mutex strings_mutex;
std::unordered_map<std::string, int32_t> strings;
std::vector<std::string> string_by_id;
int strings_fd = -1;
std::atomic<int64_t> backward_ops{0};

void write_all(int fd, const void *data, size_t n) {
  auto *p = static_cast<const char *>(data);
  while (n) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "maya emulator: writing the op trace failed: %s\n", std::strerror(errno));
      return;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

/* Id of a string (op name, input signature), registered in op_strings.tsv at first sight. */
int32_t intern(const std::string &s) {
  std::lock_guard<std::mutex> guard(strings_mutex);
  auto it = strings.find(s);
  if (it != strings.end()) return it->second;
  auto id = static_cast<int32_t>(strings.size());
  strings.emplace(s, id);
  string_by_id.push_back(s);
  std::string line = std::to_string(id) + '\t' + s + '\n';
  if (forked_child) return id;
  if (strings_fd < 0)
    strings_fd = ::open((out_dir + "/op_strings.tsv").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (strings_fd >= 0) write_all(strings_fd, line.data(), line.size());
  return id;
}

struct ThreadState;
std::mutex threads_mutex;
std::vector<ThreadState *> threads;

struct ThreadState {
  struct Open {
    int64_t op_id, index; // index of its enter record in buf, -1 once flushed
    int32_t name;
  };
  std::vector<Open> open; // ops entered and not yet exited, innermost last
  std::vector<OpRecord> buf;
  int64_t tid = syscall(SYS_gettid);
  int32_t flags = 0;
  int fd = -1;

  ThreadState() {
    char name[32] = {0};
    pthread_getname_np(pthread_self(), name, sizeof name);
    if (std::strstr(name, "autograd")) flags |= FLAG_AUTOGRAD_THREAD;
    buf.reserve(kBufferRecords);
    std::lock_guard<std::mutex> guard(threads_mutex);
    threads.push_back(this);
  }
  ~ThreadState() {
    std::lock_guard<std::mutex> guard(threads_mutex);
    flush();
    if (fd >= 0) ::close(fd);
    std::erase(threads, this);
  }
  void flush() {
    if (forked_child) buf.clear();
    if (buf.empty()) return;
    if (fd < 0) {
      std::string path = out_dir + "/ops-" + std::to_string(tid) + ".bin";
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) {
        std::fprintf(stderr, "maya emulator: cannot open %s: %s\n", path.c_str(), std::strerror(errno));
        buf.clear();
        return;
      }
    }
    write_all(fd, buf.data(), buf.size() * sizeof(OpRecord));
    buf.clear();
    for (Open &o : open) o.index = -1;
  }
  int64_t add(const OpRecord &r) {
    if (buf.size() == kBufferRecords) {
      std::lock_guard<std::mutex> guard(threads_mutex);
      flush();
    }
    buf.push_back(r);
    return static_cast<int64_t>(buf.size()) - 1;
  }
};

ThreadState &state() {
  thread_local ThreadState s;
  return s;
}

/* JSON text of the inputs: {"s": shapes, "t": types} as Kineto names them ("Input Dims", "Input
 * type"), plus {"pg": name} for record_param_comms (one of its inputs is (group name, description)). */
std::string signature_text(const at::RecordFunction &fn) {
  std::string shapes = "[", types = "[", pg;
  bool first = true;
  for (const c10::IValue &v : fn.inputs()) {
    if (!first) {
      shapes += ',';
      types += ',';
    }
    first = false;
    shapes += '[';
    if (v.isTensor() && v.toTensor().defined()) {
      const at::Tensor &t = v.toTensor();
      bool first_dim = true;
      for (int64_t d : t.sizes()) {
        if (!first_dim) shapes += ',';
        first_dim = false;
        shapes += std::to_string(d);
      }
      types += '"' + std::string(t.dtype().name()) + '"';
    } else {
      types += v.isTensorList() ? "\"TensorList\""
               : v.isScalar()   ? "\"Scalar\""
               : v.isList()     ? "\"ScalarList\""
                                : "\"\"";
    }
    shapes += ']';
  }
  shapes += ']';
  types += ']';
  if (fn.name() == std::string_view(at::kParamCommsCallName)) {
    for (const c10::IValue &v : fn.inputs()) { // the (group name, description) tuple, wherever the variant puts it
      if (!v.isTuple() || v.toTupleRef().elements().empty() || !v.toTupleRef().elements()[0].isString()) continue;
      for (char c : v.toTupleRef().elements()[0].toStringRef())
        if (c != '"' && c != '\\' && c != '\t' && c != '\n') pg += c;
      break;
    }
  }
  return "{\"s\":" + shapes + ",\"t\":" + types + (pg.empty() ? "" : ",\"pg\":\"" + pg + '"') + '}';
}

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

/* Hash of what signature_text would say, without building it: the per-op fast path. */
uint64_t signature_hash(const at::RecordFunction &fn) {
  uint64_t h = 0x84222325cbf29ce4ull;
  for (const c10::IValue &v : fn.inputs()) {
    if (v.isTensor() && v.toTensor().defined()) {
      const at::Tensor &t = v.toTensor();
      h = mix(h, 1000 + static_cast<uint64_t>(t.scalar_type()));
      h = mix(h, static_cast<uint64_t>(t.dim()));
      for (int64_t d : t.sizes()) h = mix(h, static_cast<uint64_t>(d));
    } else {
      h = mix(h, v.isTensorList() ? 1 : v.isScalar() ? 2 : v.isList() ? 3 : 4);
    }
  }
  return h;
}

/* Interned id of an op name; names are cached per thread by pointer (checked by content, since a
 * dynamically built name can reuse an address). */
int32_t name_id(const char *name) {
  thread_local std::unordered_map<const char *, std::pair<std::string, int32_t>> cache;
  auto it = cache.find(name);
  if (it != cache.end() && it->second.first == name) return it->second.second;
  int32_t id = intern(name);
  cache[name] = {name, id};
  return id;
}

int32_t inputs_id(const at::RecordFunction &fn, int32_t name) {
  if (fn.inputs().empty()) return -1; // (num_inputs() counts schema arguments only)
  static const int32_t param_comms = intern(at::kParamCommsCallName);
  if (name == param_comms) return intern(signature_text(fn)); // its process group, not cached by shape
  thread_local std::unordered_map<uint64_t, int32_t> cache;
  uint64_t h = signature_hash(fn);
  auto it = cache.find(h);
  if (it != cache.end()) return it->second;
  int32_t id = intern(signature_text(fn));
  cache.emplace(h, id);
  return id;
}

struct OpContext : at::ObserverContext {
  int64_t op_id;
  bool scalar_read = false;     // a scalar read (.item(), .cpu()): the element type was handed to libmaya_emu
  maya_values::OpValues values; // device values the host can know (host_values.cpp)
  explicit OpContext(int64_t id) : op_id(id) {}
};
thread_local std::vector<OpContext *> open_contexts; // this thread's ops, innermost last

/* The bytes of 1 in the element type of a scalar about to be read to the host (.item(), bool()), so
 * that a stand-in "one" reads as 1 in it; 0 bytes for a type without one here. */
int one_of(c10::ScalarType t, unsigned char *out) {
  switch (t) {
  case c10::ScalarType::Float: {
    float v = 1.0f;
    std::memcpy(out, &v, 4);
    return 4;
  }
  case c10::ScalarType::Double: {
    double v = 1.0;
    std::memcpy(out, &v, 8);
    return 8;
  }
  case c10::ScalarType::Half: {
    uint16_t v = 0x3c00;
    std::memcpy(out, &v, 2);
    return 2;
  }
  case c10::ScalarType::BFloat16: {
    uint16_t v = 0x3f80;
    std::memcpy(out, &v, 2);
    return 2;
  }
  case c10::ScalarType::Bool:
  case c10::ScalarType::Byte:
  case c10::ScalarType::Char:
  case c10::ScalarType::Short:
  case c10::ScalarType::Int:
  case c10::ScalarType::Long: {
    int size = static_cast<int>(c10::elementSize(t));
    std::memset(out, 0, 8);
    out[0] = 1;
    return size;
  }
  default: return 0;
  }
}

/* "aten::is_nonzero > aten::item > aten::_local_scalar_dense": the ops open on this thread, for messages. */
const char *describe_open_ops() {
  thread_local std::string text;
  text.clear();
  std::lock_guard<std::mutex> guard(strings_mutex);
  for (const auto &o : state().open) {
    if (o.name < 0 || static_cast<size_t>(o.name) >= string_by_id.size()) continue;
    if (!text.empty()) text += " > ";
    text += string_by_id[o.name];
  }
  return text.c_str();
}

int64_t enter(ThreadState &s, int32_t name, int32_t inputs, int32_t scope, int64_t seq_nr) {
  int64_t id = next_op.fetch_add(1, std::memory_order_relaxed);
  int64_t parent = s.open.empty() ? -1 : s.open.back().op_id;
  int64_t index = s.add({id, parent, maya_now(), -1, seq_nr, iteration.load(std::memory_order_relaxed), name, inputs,
                         ENTER, static_cast<int8_t>(scope), static_cast<int16_t>(s.flags)});
  s.open.push_back({id, index, name});
  maya_emu_set_op(id);
  return id;
}

void leave(ThreadState &s, int64_t id) {
  int64_t now = maya_now();
  for (auto it = s.open.rbegin(); it != s.open.rend(); ++it) {
    if (it->op_id != id) continue;
    if (it->index >= 0) {
      s.buf[it->index].end_ns = now;
    } else {
      s.add({id, -1, now, now, -1, 0, -1, -1, EXIT, 0, static_cast<int16_t>(s.flags)});
    }
    s.open.erase(std::next(it).base());
    break;
  }
  maya_emu_set_op(s.open.empty() ? -1 : s.open.back().op_id);
}

int32_t local_scalar_dense = -1, copy_op = -1; // interned at install

/* The tensor whose one element the op reads to the host, or nullptr: `.item()`, or a copy of a one-element device
 * tensor to the host (`.cpu()`), whose loop stand-in is then 1 of the element type too. */
const at::Tensor *scalar_read_of(const at::RecordFunction &fn, int32_t name) {
  const auto &in = fn.inputs();
  if (name == local_scalar_dense && !in.empty() && in[0].isTensor()) return &in[0].toTensor();
  if (name != copy_op || in.size() < 2 || !in[0].isTensor() || !in[1].isTensor()) return nullptr;
  const at::Tensor &src = in[1].toTensor();
  return !in[0].toTensor().is_cuda() && src.is_cuda() && src.numel() == 1 ? &src : nullptr;
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction &fn) {
  if (forked_child) return nullptr;
  int32_t name = name_id(fn.name());
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    backward_ops.fetch_add(1, std::memory_order_relaxed);
    maya_emu_progress();
  }
  auto ctx = std::make_unique<OpContext>(
      enter(state(), name, inputs_id(fn, name), static_cast<int32_t>(fn.scope()), fn.seqNr()));
  if (!open_contexts.empty()) open_contexts.back()->values.children = true;
  ctx->values.work_at_enter = maya_emu_kernel_work();
  maya_values::on_enter(fn, ctx->values);
  open_contexts.push_back(ctx.get());
  if (const at::Tensor *read = scalar_read_of(fn, name)) {
    unsigned char one[8];
    int size = one_of(read->scalar_type(), one);
    if (size) {
      maya_emu_read_one(one, size);
      ctx->scalar_read = true;
    }
  }
  return ctx;
}

void on_exit(const at::RecordFunction &fn, at::ObserverContext *ctx) {
  if (!ctx) return;
  auto *op = static_cast<OpContext *>(ctx);
  if (op->scalar_read) maya_emu_read_one(nullptr, 0);
  if (!open_contexts.empty() && open_contexts.back() == op) open_contexts.pop_back();
  int64_t work = maya_emu_kernel_work() - op->values.work_at_enter;
  maya_values::on_exit(fn, op->values, work - op->values.child_work);
  if (!open_contexts.empty()) open_contexts.back()->values.child_work += work;
  leave(state(), op->op_id);
}

at::CallbackHandle handle = 0;

} // namespace

extern "C" {

/* Start observing; records go to `dir`. */
__attribute__((visibility("default"))) int maya_ops_install(const char *dir) {
  if (handle) return 0;
  out_dir = dir;
  local_scalar_dense = intern("aten::_local_scalar_dense");
  copy_op = intern("aten::copy_");
  maya_emu_describe_ops(describe_open_ops);
  handle = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit).needsInputs(true).needsOutputs(true));
  pthread_atfork(nullptr, nullptr, [] { forked_child = true; });
  return 0;
}

/* Intern a range name once (e.g. "nn.Module: GPT.blocks.0"); open/close ranges by that id. */
__attribute__((visibility("default"))) int32_t maya_ops_intern(const char *name) { return intern(name); }
__attribute__((visibility("default"))) int64_t maya_ops_range_enter(int32_t name) {
  if (forked_child) return -1;
  return enter(state(), name, -1, static_cast<int32_t>(at::RecordScope::USER_SCOPE), -1);
}
/* Open a range with inputs: `inputs` is an interned `{"s": shapes, "t": types}` text (signature_text's form) of a
 * library call outside the dispatcher (Transformer Engine's extension functions, `te_calls.py`), so the kernels
 * it launches carry their sizes. */
__attribute__((visibility("default"))) int64_t maya_ops_range_enter_inputs(int32_t name, int32_t inputs) {
  if (forked_child) return -1;
  return enter(state(), name, inputs, static_cast<int32_t>(at::RecordScope::USER_SCOPE), -1);
}
__attribute__((visibility("default"))) void maya_ops_range_exit(int64_t id) {
  if (!forked_child) leave(state(), id);
}

/* The training iteration ops entered from now on belong to. */
__attribute__((visibility("default"))) void maya_ops_set_iteration(int32_t n) {
  iteration.store(n, std::memory_order_relaxed);
  maya_emu_progress();
}

/* The innermost op open on this thread belongs to iteration `n`: an optimizer's step range, entered before the
 * pre-hook that tells it is another optimizer of the iteration the last step ended. */
__attribute__((visibility("default"))) void maya_ops_relabel_open(int32_t n) {
  if (forked_child) return;
  ThreadState &s = state();
  if (!s.open.empty() && s.open.back().index >= 0) s.buf[s.open.back().index].iteration = n;
}

/* Backward ops autograd has run so far (the iteration clock tells iterations from extra optimizers). */
__attribute__((visibility("default"))) int64_t maya_ops_backward_ops(void) {
  return backward_ops.load(std::memory_order_relaxed);
}

/* JSON summary of the device values computed on the host and the routing stand-ins (host_values.cpp). */
__attribute__((visibility("default"))) const char *maya_ops_values_summary(void) {
  static std::string text;
  text = maya_values::summary_json();
  return text.c_str();
}

/* Whether the device storage starting at `base` holds values the host knows (0 no, 1 real, 2 assumed). */
__attribute__((visibility("default"))) int maya_ops_value_provenance(const void *base) {
  return maya_values::provenance_of(base);
}

/* Stop observing and flush every thread's records. */
__attribute__((visibility("default"))) void maya_ops_finish(void) {
  if (handle) at::removeCallback(handle);
  handle = 0;
  std::lock_guard<std::mutex> guard(threads_mutex);
  for (ThreadState *s : threads) s->flush();
  if (strings_fd >= 0) ::fsync(strings_fd);
}
}
