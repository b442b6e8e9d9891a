// backend_sdk.hpp — header-only C++17 helpers for backend authors.
//
// Built only on backend_abi.h. Write a backend as a C++ class deriving from
// backplane::sdk::Backend that declares who it is in one place,
//
//   class MyBackend : public backplane::sdk::Backend {
//    public:
//     static constexpr backplane::sdk::BackendIdentity kIdentity{"MyAcc", "Example"};
//     ...
//   };
//
// then expose it with
//
//   BP_DEFINE_BACKEND_ENTRY_POINTS(my::MyBackend)     // a shared object
//   or backplane::sdk::backend_table<my::MyBackend>()  // a static table
//
// kIdentity gives the id (GetBackendId), the API version built against
// (GetVersion and the table's api_major/api_minor/struct_size), the optional
// score (GetBackendScore) and the vendor of get_info.
//
// A backend that defines operators of a domain of its own (API 1.3) returns
// them from Backend::define_ops(), a few lines each:
//
//   std::vector<sdk::OpDef> define_ops() override {
//     return {sdk::OpDef("com.example", "Swish2")
//                 .attr("beta", BP_ATTR_FLOAT)
//                 .infer(sdk::infer_same_as_input0)};
//   }
//
// and claims their nodes in query_support like any other.
//
// A CPU backend parallelises on the host's thread pool (API 1.5) rather than
// threads of its own: inside execute_shaped (and anything it calls),
//
//   sdk::parallel_for(rows, /*grain=*/1, [&](size_t begin, size_t end) { ... });
//
// runs on the pool the host lent this call, or inline when there is none.
//
// Every slot of the table is a noexcept trampoline: a C++ exception thrown by
// your code becomes a status object (sdk::Error keeps its code; anything else is
// BP_STATUS_INTERNAL with what()), so nothing ever unwinds into the runtime.
//
// Thread-safety: as backend_abi.h says. The SDK adds no locking of its own.
#ifndef BACKPLANE_BACKEND_SDK_HPP_
#define BACKPLANE_BACKEND_SDK_HPP_

#include <backplane/backend_abi.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace backplane::sdk {

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

// Throw this from backend code to return a status with a specific code.
class Error : public std::runtime_error {
 public:
  Error(bp_status_code_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  bp_status_code_t code() const noexcept { return code_; }

 private:
  bp_status_code_t code_;
};

inline Error unsupported(const std::string& what) { return Error(BP_STATUS_UNSUPPORTED, what); }
inline Error unimplemented(const std::string& what) {
  return Error(BP_STATUS_UNIMPLEMENTED, what + " is not implemented by this backend");
}
inline Error invalid(const std::string& what) { return Error(BP_STATUS_INVALID_ARGUMENT, what); }

// ---------------------------------------------------------------------------
// Settings: parsing the value of a configure key
// ---------------------------------------------------------------------------

// Each throws Error(BP_STATUS_INVALID_ARGUMENT) naming the key and the value
// it refuses, so that a typo fails the configure instead of being ignored.

// A whole number from lo to hi.
inline uint64_t config_uint(std::string_view key, std::string_view value, uint64_t lo,
                            uint64_t hi) {
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (ec != std::errc() || end != value.data() + value.size() || n < lo || n > hi)
    throw invalid(std::string(key) + ": '" + std::string(value) + "' is not a whole number from " +
                  std::to_string(lo) + " to " + std::to_string(hi));
  return n;
}

// "on" or "1": true; "off" or "0": false.
inline bool config_on_off(std::string_view key, std::string_view value) {
  if (value == "on" || value == "1") return true;
  if (value == "off" || value == "0") return false;
  throw invalid(std::string(key) + ": '" + std::string(value) + "' is not on or off");
}

// The index of `value` among `choices`.
inline size_t config_choice(std::string_view key, std::string_view value,
                            std::initializer_list<std::string_view> choices) {
  size_t i = 0;
  std::string list;
  for (std::string_view c : choices) {
    if (c == value) return i;
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(c);
    ++i;
  }
  throw invalid(std::string(key) + ": '" + std::string(value) + "' is not " + list);
}

// ---------------------------------------------------------------------------
// Payload bytes: what serialize writes and deserialize reads back
// ---------------------------------------------------------------------------

// Appends trivially copyable values in this machine's byte order (a payload
// is read back only where it was written; record the byte order in it to
// refuse another) and length-prefixed strings.
class PayloadWriter {
 public:
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    raw(&v, sizeof v);
  }
  void raw(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  void str(const std::string& s) {
    pod(static_cast<uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Reads what PayloadWriter wrote, bounds-checked: a payload is untrusted
// input (a damaged or hostile artifact), so running past its end, a string
// or count longer than what is left, throws Error(BP_STATUS_CORRUPT_DATA)
// "WHERE: payload ends inside WHAT (at byte N)".
class PayloadReader {
 public:
  PayloadReader(const void* data, size_t size, std::string where)
      : p_(static_cast<const uint8_t*>(data)), n_(data ? size : 0), where_(std::move(where)) {}

  template <class T>
  T pod(const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, take(sizeof v, what), sizeof v);
    return v;
  }
  const void* take(size_t n, const char* what) {
    if (n > n_ - at_) fail(std::string("ends inside ") + what);
    const void* p = p_ + at_;
    at_ += n;
    return p;
  }
  std::string str(const char* what) {
    const uint32_t n = pod<uint32_t>(what);
    const char* p = static_cast<const char*>(take(n, what));
    return std::string(p, n);
  }
  // A count of items that each take at least `min_bytes`: bounded by what is left.
  size_t count(const char* what, size_t min_bytes) {
    const uint32_t n = pod<uint32_t>(what);
    if (static_cast<uint64_t>(n) * min_bytes > n_ - at_)
      fail(std::string("has an impossible number of ") + what);
    return n;
  }
  size_t left() const { return n_ - at_; }
  bool done() const { return at_ == n_; }
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(BP_STATUS_CORRUPT_DATA,
                where_ + ": payload " + why + " (at byte " + std::to_string(at_) + ")");
  }

 private:
  const uint8_t* p_;
  size_t n_, at_ = 0;
  std::string where_;
};

// ---------------------------------------------------------------------------
// Identity: one declaration per backend
// ---------------------------------------------------------------------------

// Who a backend is. Declare it once, as `static constexpr BackendIdentity
// kIdentity{...}` in the backend class (or as a namespace constant passed to
// BP_DEFINE_BACKEND_ENTRY_POINTS_FOR); the SDK derives every entry point, the
// function table's version and bp_backend_info_t.vendor from it.
struct BackendIdentity {
  const char* id;                 // GetBackendId: [A-Za-z0-9]+, the <Id> of the file name
  const char* vendor;             // bp_backend_info_t.vendor unless info() sets one
  uint32_t (*score)() = nullptr;  // GetBackendScore: 0 = cannot run on this machine;
                                  // nullptr = 1, what the runtime assumes without one
  uint32_t api_major = BP_API_VERSION_MAJOR;  // GetVersion: the API built against
  uint32_t api_minor = BP_API_VERSION_MINOR;  // (0 to 5 with this header)
};

// ---------------------------------------------------------------------------
// Element types and sizes
// ---------------------------------------------------------------------------

// Bytes per element of `dtype`; 0 for BP_DTYPE_UNDEFINED and unknown values.
constexpr size_t dtype_size(bp_dtype_t dtype) {
  switch (dtype) {
    case BP_DTYPE_FLOAT32:
      return 4;
    case BP_DTYPE_UINT8:
      return 1;
    case BP_DTYPE_INT8:
      return 1;
    case BP_DTYPE_INT32:
      return 4;
    case BP_DTYPE_INT64:
      return 8;
    case BP_DTYPE_BOOL:
      return 1;
    case BP_DTYPE_FLOAT16:
    case BP_DTYPE_UINT16:
    case BP_DTYPE_INT16:
    case BP_DTYPE_BFLOAT16:
      return 2;
    case BP_DTYPE_UINT32:
      return 4;
    case BP_DTYPE_FLOAT64:
    case BP_DTYPE_UINT64:
      return 8;
    case BP_DTYPE_UNDEFINED:
      return 0;
  }
  return 0;
}

// "float32", "int64", ...; "unknown" for a value the header does not name.
constexpr const char* dtype_name(bp_dtype_t dtype) {
  switch (dtype) {
    case BP_DTYPE_FLOAT32:
      return "float32";
    case BP_DTYPE_UINT8:
      return "uint8";
    case BP_DTYPE_INT8:
      return "int8";
    case BP_DTYPE_INT32:
      return "int32";
    case BP_DTYPE_INT64:
      return "int64";
    case BP_DTYPE_BOOL:
      return "bool";
    case BP_DTYPE_FLOAT16:
      return "float16";
    case BP_DTYPE_UINT16:
      return "uint16";
    case BP_DTYPE_INT16:
      return "int16";
    case BP_DTYPE_FLOAT64:
      return "float64";
    case BP_DTYPE_UINT32:
      return "uint32";
    case BP_DTYPE_UINT64:
      return "uint64";
    case BP_DTYPE_BFLOAT16:
      return "bfloat16";
    case BP_DTYPE_UNDEFINED:
      return "undefined";
  }
  return "unknown";
}

// The number of elements of a shape: the product of its dims, 1 for rank 0.
inline int64_t element_count(const int64_t* shape, size_t rank) {
  int64_t n = 1;
  for (size_t i = 0; i < rank; ++i) n *= shape[i];
  return n;
}
inline int64_t element_count(const std::vector<int64_t>& shape) {
  return element_count(shape.data(), shape.size());
}
inline int64_t element_count(const bp_value_t& v) { return element_count(v.shape, v.rank); }
// A BatchNormalization folded into the convolution (or Gemm) before it, as
// inference allows (its statistics are constants): `weights` ([C, ...], C =
// bias.size() output channels) and `bias` rescaled in place so that the
// convolution alone computes BN(conv(x)). Each value in double, rounded once.
inline void fold_batch_norm(std::vector<float>& weights, std::vector<float>& bias,
                            const float* scale, const float* shift, const float* mean,
                            const float* var, float eps) {
  const size_t channels = bias.size(), per = channels ? weights.size() / channels : 0;
  for (size_t c = 0; c < channels; ++c) {
    const double f = scale[c] / std::sqrt(static_cast<double>(var[c]) + eps);
    for (size_t i = 0; i < per; ++i)
      weights[c * per + i] = static_cast<float>(weights[c * per + i] * f);
    bias[c] = static_cast<float>((bias[c] - mean[c]) * f + shift[c]);
  }
}

// "[1,3,32]", as messages about shapes write them.
inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}
inline int64_t element_count(const bp_tensor_t& t) { return element_count(t.shape, t.rank); }

// The bytes of a dense value: element_count * dtype_size.
inline size_t byte_size(const bp_value_t& v) {
  return static_cast<size_t>(element_count(v)) * dtype_size(v.dtype);
}

// ---------------------------------------------------------------------------
// Arena planning: intermediate tensors sharing one allocation
// ---------------------------------------------------------------------------

// One tensor of a partition's arena: the steps that use it (first..last,
// inclusive, first <= last) and its bytes.
struct ArenaTensor {
  size_t first = 0, last = 0;
  size_t size = 0;
};

struct ArenaPlan {
  std::vector<size_t> offsets;  // per tensor, a multiple of the alignment
  size_t bytes = 0;             // the arena's size
};

// Places `tensors` first fit over a free list: in order of their first step
// (ties in the given order), each takes `alignment`-rounded bytes (at least
// one alignment unit), which are free again once its last step has run.
// Adjacent free blocks merge, so a large tensor can reuse several small ones.
inline ArenaPlan plan_arena(const std::vector<ArenaTensor>& tensors, size_t alignment) {
  struct Block {
    size_t offset, size;
  };
  auto rounded = [&](size_t n) {
    return (std::max<size_t>(n, 1) + alignment - 1) / alignment * alignment;
  };
  ArenaPlan plan;
  plan.offsets.assign(tensors.size(), 0);
  std::vector<size_t> order(tensors.size());
  size_t steps = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    order[t] = t;
    steps = std::max(steps, tensors[t].last + 1);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return tensors[a].first < tensors[b].first; });
  std::vector<std::vector<size_t>> ending(steps);
  for (size_t t : order) ending[tensors[t].last].push_back(t);
  std::vector<Block> free_list;
  size_t next = 0;
  for (size_t s = 0; s < steps; ++s) {
    for (; next < order.size() && tensors[order[next]].first == s; ++next) {
      const size_t size = rounded(tensors[order[next]].size);
      size_t& offset = plan.offsets[order[next]];
      auto fit = std::find_if(free_list.begin(), free_list.end(),
                              [&](const Block& b) { return b.size >= size; });
      if (fit == free_list.end()) {
        offset = plan.bytes;
        plan.bytes += size;
        continue;
      }
      offset = fit->offset;
      fit->offset += size;
      fit->size -= size;
      if (fit->size == 0) free_list.erase(fit);
    }
    // Taking bytes off the front of a block keeps the list sorted and
    // merged: only a step that frees something changes it.
    if (ending[s].empty()) continue;
    for (size_t t : ending[s]) free_list.push_back({plan.offsets[t], rounded(tensors[t].size)});
    std::sort(free_list.begin(), free_list.end(),
              [](const Block& a, const Block& b) { return a.offset < b.offset; });
    size_t kept = 0;
    for (const Block& b : free_list) {
      if (kept > 0 && free_list[kept - 1].offset + free_list[kept - 1].size == b.offset)
        free_list[kept - 1].size += b.size;
      else free_list[kept++] = b;
    }
    free_list.resize(kept);
  }
  return plan;
}

// ---------------------------------------------------------------------------
// Host: thin wrapper over the host table
// ---------------------------------------------------------------------------

// A weight buffer from the NamedDataMap; released on destruction.
class Weight {
 public:
  Weight() = default;
  Weight(const bp_host_api_t* host, bp_buffer_t buffer) : host_(host), buffer_(buffer) {}
  Weight(Weight&& other) noexcept { *this = std::move(other); }
  Weight& operator=(Weight&& other) noexcept {
    if (this != &other) {
      reset();
      host_ = other.host_;
      buffer_ = other.buffer_;
      other.host_ = nullptr;
    }
    return *this;
  }
  Weight(const Weight&) = delete;
  Weight& operator=(const Weight&) = delete;
  ~Weight() { reset(); }

  const void* data() const { return buffer_.data; }
  size_t size() const { return buffer_.size; }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(buffer_.data);
  }

 private:
  void reset() {
    if (host_ != nullptr) host_->buffer_free(&buffer_);
    host_ = nullptr;
  }
  const bp_host_api_t* host_ = nullptr;
  bp_buffer_t buffer_{};
};

class Host {
 public:
  explicit Host(const bp_host_api_t* api) : api_(api) {}
  const bp_host_api_t* api() const { return api_; }

  void log(bp_log_level_t level, const char* backend_id, const std::string& message) const {
    api_->log(level, backend_id, message.c_str());
  }

  // Reads weight `key`; throws Error if it is missing.
  Weight weight(const bp_named_data_map_t* map, const char* key) const {
    bp_buffer_t buffer{};
    buffer.struct_size = sizeof(buffer);
    throw_if_error(api_->data_map_get(map, key, &buffer));
    return Weight(api_, buffer);
  }

  void blob_add(bp_blob_store_t* store, const std::string& key, const void* data, size_t size,
                size_t alignment = 0, const char* external_file = nullptr) const {
    throw_if_error(api_->blob_store_add(store, key.c_str(), data, size, alignment, external_file));
  }

  void append(bp_byte_writer_t* writer, const void* data, size_t size) const {
    throw_if_error(api_->writer_append(writer, data, size));
  }

  // Turns a status received from the host into an Error (and releases it).
  void throw_if_error(bp_status_t* status) const {
    if (status == nullptr) return;
    bp_status_code_t code = api_->status_code(status);
    std::string message = api_->status_message(status);
    api_->status_release(status);
    throw Error(code, message);
  }

 private:
  const bp_host_api_t* api_;
};

// ---------------------------------------------------------------------------
// Read-only accessors over the C view
// ---------------------------------------------------------------------------

class NodeRef {
 public:
  NodeRef(const bp_graph_view_t* view, size_t index)
      : view_(view), node_(&view->nodes[index]), index_(index) {}
  // A node outside any view (an inference callback's, API 1.3): input() and
  // output() have nothing to index and must not be called.
  explicit NodeRef(const bp_node_t& node) : view_(nullptr), node_(&node), index_(0) {}

  const bp_node_t& raw() const { return *node_; }
  size_t index() const { return index_; }
  std::string_view op_type() const { return raw().op_type; }
  std::string_view name() const { return raw().name; }
  std::string_view domain() const { return raw().domain; }
  int64_t opset() const { return raw().opset; }

  size_t num_inputs() const { return raw().num_inputs; }
  size_t num_outputs() const { return raw().num_outputs; }
  // True if input i exists and is not an omitted optional input.
  bool has_input(size_t i) const { return i < raw().num_inputs && raw().inputs[i] >= 0; }
  const bp_value_t& input(size_t i) const { return view_->values[raw().inputs[i]]; }
  const bp_value_t& output(size_t i) const { return view_->values[raw().outputs[i]]; }

  const bp_attribute_t* find_attr(std::string_view name) const {
    for (size_t i = 0; i < raw().num_attributes; ++i)
      if (name == raw().attributes[i].name) return &raw().attributes[i];
    return nullptr;
  }
  bool has_attr(std::string_view name) const { return find_attr(name) != nullptr; }

  int64_t attr_int(std::string_view name, int64_t fallback) const {
    const bp_attribute_t* a = find_attr(name);
    if (a == nullptr) return fallback;
    expect(*a, BP_ATTR_INT);
    return a->i;
  }
  float attr_float(std::string_view name, float fallback) const {
    const bp_attribute_t* a = find_attr(name);
    if (a == nullptr) return fallback;
    expect(*a, BP_ATTR_FLOAT);
    return a->f;
  }
  std::string attr_string(std::string_view name, std::string fallback) const {
    const bp_attribute_t* a = find_attr(name);
    if (a == nullptr) return fallback;
    expect(*a, BP_ATTR_STRING);
    return a->s;
  }
  std::vector<int64_t> attr_ints(std::string_view name, std::vector<int64_t> fallback = {}) const {
    const bp_attribute_t* a = find_attr(name);
    if (a == nullptr) return fallback;
    expect(*a, BP_ATTR_INTS);
    return std::vector<int64_t>(a->ints, a->ints + a->count);
  }
  std::vector<float> attr_floats(std::string_view name, std::vector<float> fallback = {}) const {
    const bp_attribute_t* a = find_attr(name);
    if (a == nullptr) return fallback;
    expect(*a, BP_ATTR_FLOATS);
    return std::vector<float>(a->floats, a->floats + a->count);
  }

 private:
  void expect(const bp_attribute_t& a, bp_attr_type_t type) const {
    if (a.type != type)
      throw invalid("node '" + std::string(name()) + "' (" + std::string(op_type()) +
                    "): attribute '" + a.name + "' has the wrong type");
  }
  const bp_graph_view_t* view_;
  const bp_node_t* node_;
  size_t index_;
};

inline std::vector<int64_t> shape_of(const bp_value_t& v) {
  return std::vector<int64_t>(v.shape, v.shape + v.rank);
}
inline std::vector<int64_t> shape_of(const bp_tensor_t& t) {
  return std::vector<int64_t>(t.shape, t.shape + t.rank);
}

// Collects support/compile outcomes for the host.
class NodeReport {
 public:
  NodeReport(const bp_host_api_t* host, bp_node_report_t* report) : host_(host), report_(report) {}
  void supported(size_t node) const {
    host_->report_node(report_, node, BP_NODE_SUPPORTED, nullptr);
  }
  void rejected(size_t node, const std::string& reason) const {
    host_->report_node(report_, node, BP_NODE_REJECTED, reason.c_str());
  }
  // Compile: the node is taken, and `note` says how it runs (API 1.6 hosts
  // show it with the plan).
  void note(size_t node, const std::string& note) const {
    host_->report_node(report_, node, BP_NODE_SUPPORTED, note.c_str());
  }
  void untouched(size_t node) const {
    host_->report_node(report_, node, BP_NODE_UNTOUCHED, nullptr);
  }
  bool active() const { return report_ != nullptr; }

 private:
  const bp_host_api_t* host_;
  bp_node_report_t* report_;
};

// ---------------------------------------------------------------------------
// OwnedView: a view kept after the call it came with
// ---------------------------------------------------------------------------

// A deep copy of a bp_graph_view_t. The host's view lives only for the call
// it is passed to (backend_abi.h); a partition compiled shape-polymorphic
// (API 1.2) prepares its work again for each new set of shapes, long after,
// so it keeps this: names, values, nodes, attributes (their tensors and
// string lists too), inputs and outputs. Weights are not copied: `weights`
// still points to the host's NamedDataMap, which outlives the compiled
// partition. Immutable after construction.
class OwnedView {
 public:
  explicit OwnedView(const bp_graph_view_t& view) {
    values_.reserve(view.num_values);
    for (size_t v = 0; v < view.num_values; ++v) {
      bp_value_t c = view.values[v];
      c.struct_size = BP_STRUCT_SIZE(bp_value_t, data_key);
      c.name = keep(c.name != nullptr ? c.name : "");
      c.shape = keep(c.shape, c.rank);
      c.data_key = keep(c.data_key);
      values_.push_back(c);
    }
    nodes_.reserve(view.num_nodes);
    for (size_t n = 0; n < view.num_nodes; ++n) {
      bp_node_t c = view.nodes[n];
      c.struct_size = BP_STRUCT_SIZE(bp_node_t, attributes);
      c.name = keep(c.name != nullptr ? c.name : "");
      c.op_type = keep(c.op_type != nullptr ? c.op_type : "");
      c.domain = keep(c.domain != nullptr ? c.domain : "");
      c.inputs = keep(c.inputs, c.num_inputs);
      c.outputs = keep(c.outputs, c.num_outputs);
      std::vector<bp_attribute_t>& attrs = attributes_.emplace_back();
      for (size_t a = 0; a < c.num_attributes; ++a)
        attrs.push_back(copy(view.nodes[n].attributes[a]));
      c.attributes = attrs.empty() ? nullptr : attrs.data();
      nodes_.push_back(c);
    }
    view_.struct_size = BP_STRUCT_SIZE(bp_graph_view_t, weights);
    view_.name = keep(view.name != nullptr ? view.name : "");
    view_.num_values = values_.size();
    view_.values = values_.data();
    view_.num_nodes = nodes_.size();
    view_.nodes = nodes_.data();
    view_.num_inputs = view.num_inputs;
    view_.inputs = keep(view.inputs, view.num_inputs);
    view_.num_outputs = view.num_outputs;
    view_.outputs = keep(view.outputs, view.num_outputs);
    view_.weights = view.weights;
  }
  OwnedView(const OwnedView&) = delete;
  OwnedView& operator=(const OwnedView&) = delete;

  // The copy, with the shapes it was given (-1 dims where the host left them
  // open). Points into this object; valid as long as it lives.
  const bp_graph_view_t& view() const { return view_; }

 private:
  const char* keep(const char* s) {  // NULL stays NULL
    return s == nullptr ? nullptr : strings_.emplace_back(s).c_str();
  }
  template <class T>
  const T* keep(const T* data, size_t count) {
    if (data == nullptr || count == 0) return nullptr;
    // operator new aligns a vector's bytes for any T used here.
    std::vector<uint8_t>& bytes = bytes_.emplace_back(count * sizeof(T));
    std::memcpy(bytes.data(), data, count * sizeof(T));
    return reinterpret_cast<const T*>(bytes.data());
  }
  bp_attribute_t copy(bp_attribute_t at) {
    at.struct_size = BP_STRUCT_SIZE(bp_attribute_t, t);
    at.name = keep(at.name != nullptr ? at.name : "");
    at.s = keep(at.s);
    at.ints = at.type == BP_ATTR_INTS ? keep(at.ints, at.count) : nullptr;
    at.floats = at.type == BP_ATTR_FLOATS ? keep(at.floats, at.count) : nullptr;
    if (at.type == BP_ATTR_STRINGS && at.strings != nullptr) {
      std::vector<const char*>& list = string_lists_.emplace_back();
      for (size_t i = 0; i < at.count; ++i) list.push_back(keep(at.strings[i]));
      at.strings = list.data();
    } else {
      at.strings = nullptr;
    }
    if (at.type == BP_ATTR_TENSOR && at.t != nullptr) {
      bp_attr_tensor_t t = *at.t;
      t.struct_size = BP_STRUCT_SIZE(bp_attr_tensor_t, size_bytes);
      t.shape = keep(t.shape, t.rank);
      t.data = keep(static_cast<const uint8_t*>(t.data), t.size_bytes);
      at.t = &attr_tensors_.emplace_back(t);
    } else {
      at.t = nullptr;
    }
    return at;
  }

  bp_graph_view_t view_{};
  // Deques: elements never move as more are added, so the view's pointers
  // into them stay valid.
  std::deque<std::string> strings_;
  std::deque<std::vector<uint8_t>> bytes_;
  std::deque<std::vector<const char*>> string_lists_;
  std::deque<bp_attr_tensor_t> attr_tensors_;
  std::deque<std::vector<bp_attribute_t>> attributes_;
  std::vector<bp_value_t> values_;
  std::vector<bp_node_t> nodes_;
};

// A view with other shapes for its values; everything else (names, flags,
// data keys, nodes) is `view`'s own: how a shape-polymorphic partition
// prepares its work for the shapes of one run with the code that prepares
// a concrete view. Valid as long as `view` and this object.
class ShapedView {
 public:
  // shapes[v] (its rank entries) for every value of `view`.
  ShapedView(const bp_graph_view_t& view, std::vector<std::vector<int64_t>> shapes)
      : view_(view),
        shapes_(std::move(shapes)),
        values_(view.values, view.values + view.num_values) {
    if (shapes_.size() != values_.size())
      throw Error(BP_STATUS_INTERNAL, "ShapedView: one shape per value expected");
    for (size_t v = 0; v < values_.size(); ++v) {
      values_[v].rank = shapes_[v].size();
      values_[v].shape = shapes_[v].empty() ? nullptr : shapes_[v].data();
    }
    view_.values = values_.data();
  }
  ShapedView(const ShapedView&) = delete;
  ShapedView& operator=(const ShapedView&) = delete;
  const bp_graph_view_t& view() const { return view_; }

 private:
  bp_graph_view_t view_{};
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<bp_value_t> values_;
};

// ---------------------------------------------------------------------------
// The host's thread pool (API 1.5)
// ---------------------------------------------------------------------------

// The pool the host lends one execute_shaped call (bp_execute_args_t.
// thread_pool), or none (default-constructed, a host older than 1.5, a
// backend built for an older minor): then everything runs inline.
class ThreadPool {
 public:
  ThreadPool() = default;
  ThreadPool(const bp_host_api_t* host, bp_thread_pool_t* pool)
      : host_(host != nullptr && BP_HAS_FIELD(bp_host_api_t, parallel_for, host->struct_size) &&
                      host->parallel_for != nullptr && host->thread_pool_size != nullptr
                  ? host
                  : nullptr),
        pool_(host_ != nullptr ? pool : nullptr) {}

  // Threads a parallel_for runs on, the calling thread included (>= 1).
  uint32_t size() const { return pool_ != nullptr ? host_->thread_pool_size(pool_) : 1u; }

  // fn(begin, end) over chunks of at least `grain` items covering [0, n)
  // (bp_host_api_t.parallel_for). The first exception a chunk throws stops
  // the chunks not yet started and is rethrown here, on the caller.
  template <class Fn>
  void parallel_for(size_t n, size_t grain, Fn&& fn) const {
    if (n == 0) return;
    if (pool_ == nullptr || n <= std::max<size_t>(grain, 1)) {
      fn(size_t{0}, n);
      return;
    }
    using F = std::remove_reference_t<Fn>;
    struct Ctx {
      explicit Ctx(F* f) : fn(f) {}
      F* fn;
      std::atomic<bool> failed{false};
      std::mutex mu;
      std::exception_ptr error;
    } ctx(&fn);
    auto chunk = [](void* c, size_t begin, size_t end) noexcept {
      auto* x = static_cast<Ctx*>(c);
      if (x->failed.load(std::memory_order_relaxed)) return;
      try {
        (*x->fn)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(x->mu);
        if (!x->error) x->error = std::current_exception();
        x->failed.store(true, std::memory_order_relaxed);
      }
    };
    bp_status_t* status = host_->parallel_for(pool_, n, grain, chunk, &ctx);
    if (ctx.error) {
      host_->status_release(status);
      std::rethrow_exception(ctx.error);
    }
    if (status != nullptr) {
      Error e(host_->status_code(status), host_->status_message(status));
      host_->status_release(status);
      throw e;
    }
  }

  // The pool of the execute_shaped call running on this thread (the SDK
  // sets it for the duration of the call), or none: kernels reach it
  // without having it passed down. A pool's worker thread has none, so a
  // parallel_for nested in a chunk runs inline.
  static const ThreadPool& current() {
    static const ThreadPool none;
    return current_ != nullptr ? *current_ : none;
  }

  // Makes `pool` current() on this thread while it lives.
  class Scope {
   public:
    explicit Scope(const ThreadPool* pool) : previous_(current_) { current_ = pool; }
    ~Scope() { current_ = previous_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const ThreadPool* previous_;
  };

 private:
  static inline thread_local const ThreadPool* current_ = nullptr;
  const bp_host_api_t* host_ = nullptr;
  bp_thread_pool_t* pool_ = nullptr;
};

// ThreadPool::current().parallel_for: what a kernel calls.
template <class Fn>
void parallel_for(size_t n, size_t grain, Fn&& fn) {
  ThreadPool::current().parallel_for(n, grain, std::forward<Fn>(fn));
}

// ---------------------------------------------------------------------------
// The classes a backend author derives from
// ---------------------------------------------------------------------------

// What execute_shaped (API 1.2) gives a context: the tensors of this run and
// the shape of every value of the partition's view.
class ExecuteArgs {
 public:
  ExecuteArgs(const bp_host_api_t* host, const bp_execute_args_t& args)
      : host_(host), args_(args) {}
  size_t num_inputs() const { return args_.num_inputs; }
  size_t num_outputs() const { return args_.num_outputs; }
  const bp_tensor_t* inputs() const { return args_.inputs; }
  const bp_tensor_t* outputs() const { return args_.outputs; }
  const bp_tensor_t& input(size_t i) const { return args_.inputs[i]; }
  const bp_tensor_t& output(size_t i) const { return args_.outputs[i]; }
  size_t num_values() const { return args_.value_shapes != nullptr ? args_.num_values : 0; }
  // The shape of view value `v` in this run (-1 dims: depends on data).
  std::vector<int64_t> value_shape(size_t v) const {
    if (v >= num_values())
      throw Error(BP_STATUS_INVALID_ARGUMENT,
                  "execute_shaped: no shape for value " + std::to_string(v));
    const bp_shape_t& s = args_.value_shapes[v];
    return s.rank == 0 ? std::vector<int64_t>{} : std::vector<int64_t>(s.dims, s.dims + s.rank);
  }
  // An output whose shape depends on data (data == NULL): tell the host its
  // shape and get the memory to write it to.
  void* allocate_output(size_t i, const std::vector<int64_t>& dims) const {
    if (!BP_HAS_FIELD(bp_host_api_t, output_allocate, host_->struct_size) ||
        host_->output_allocate == nullptr)
      throw Error(BP_STATUS_UNSUPPORTED, "the runtime cannot take data-dependent output shapes");
    void* data = nullptr;
    bp_status_t* s = host_->output_allocate(args_.sink, i, dims.size(), dims.data(), &data);
    if (s != nullptr) {
      Error e(host_->status_code(s), host_->status_message(s));
      host_->status_release(s);
      throw e;
    }
    return data;
  }
  const bp_execute_args_t& raw() const { return args_; }
  // API 1.5: the pool lent to this call (none for an older host).
  ThreadPool thread_pool() const {
    return BP_HAS_FIELD(bp_execute_args_t, thread_pool, args_.struct_size)
               ? ThreadPool(host_, args_.thread_pool)
               : ThreadPool();
  }
  // API 1.5: another backend's partition runs next (BP_EXECUTE_EDGE_FOLLOWS).
  bool edge_follows() const {
    return BP_HAS_FIELD(bp_execute_args_t, flags, args_.struct_size) &&
           (args_.flags & BP_EXECUTE_EDGE_FOLLOWS) != 0;
  }
  // API 1.6: the host profiles this call; time each node's work with
  // clock_ns() and report it with profile_node().
  bool profiling() const {
    return BP_HAS_FIELD(bp_execute_args_t, profile, args_.struct_size) &&
           args_.profile != nullptr &&
           BP_HAS_FIELD(bp_host_api_t, profile_node, host_->struct_size);
  }
  uint64_t clock_ns() const { return host_->clock_ns(); }
  // Work of node `node` of the view (BP_PROFILE_NO_NODE: of no one node)
  // ran from `begin_ns` to `end_ns`; summed under `op_type` (NULL: the
  // node's), shown as `label` (NULL: the node's name). Only when profiling().
  void profile_node(size_t node, const char* op_type, const char* label, uint64_t begin_ns,
                    uint64_t end_ns) const {
    host_->profile_node(args_.profile, node, op_type, label, begin_ns, end_ns);
  }

 private:
  const bp_host_api_t* host_;
  const bp_execute_args_t& args_;
};

class ExecContext {
 public:
  virtual ~ExecContext() = default;
  virtual void execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
                       const bp_tensor_t* outputs) = 0;
  // API 1.2: the same, told every value's shape. The default runs execute();
  // a partition compiled shape-polymorphic, or one with outputs whose shape
  // depends on data, overrides it.
  virtual void execute_shaped(const ExecuteArgs& args) {
    for (size_t i = 0; i < args.num_outputs(); ++i)
      if (args.output(i).data == nullptr && args.output(i).size_bytes > 0)
        throw Error(BP_STATUS_UNSUPPORTED, "an output's shape depends on data");
    execute(args.num_inputs(), args.inputs(), args.num_outputs(), args.outputs());
  }
};

// True if `options` asks for a shape-polymorphic compile (API 1.2): the
// view's non-constant dims are -1 and execute_shaped gives them per run.
inline bool shape_polymorphic(const bp_compile_options_t& options) {
  return BP_HAS_FIELD(bp_compile_options_t, shape_polymorphic, options.struct_size) &&
         options.shape_polymorphic;
}

// ---------------------------------------------------------------------------
// Operators of your own (API 1.3)
// ---------------------------------------------------------------------------

// What an operator's inference sees (bp_infer_args_t): the node (its
// attributes through node()), its inputs' dtypes, shapes and, for constants,
// bytes. Set every present output with set_output; throw sdk::invalid(...)
// (or any Error) to reject the node, saying why (the host adds its name).
class InferContext {
 public:
  InferContext(const bp_host_api_t* host, const bp_infer_args_t& args) : host_(host), args_(args) {}
  NodeRef node() const { return NodeRef(*args_.node); }
  size_t num_inputs() const { return args_.num_inputs; }
  bool has_input(size_t i) const {
    return i < args_.num_inputs && args_.input_dtypes[i] != BP_DTYPE_UNDEFINED;
  }
  bp_dtype_t dtype(size_t i) const { return check_input(i), args_.input_dtypes[i]; }
  std::vector<int64_t> shape(size_t i) const {
    check_input(i);
    const bp_shape_t& s = args_.input_shapes[i];
    return s.rank == 0 ? std::vector<int64_t>{} : std::vector<int64_t>(s.dims, s.dims + s.rank);
  }
  // The bytes of input i when it is a constant, else nullptr.
  const void* constant(size_t i) const {
    return check_input(i), args_.input_constants != nullptr ? args_.input_constants[i] : nullptr;
  }
  size_t num_outputs() const { return args_.num_outputs; }
  bool has_output(size_t i) const {
    return i < args_.num_outputs && args_.node->outputs != nullptr && args_.node->outputs[i] >= 0;
  }
  void set_output(size_t i, bp_dtype_t dtype, const std::vector<int64_t>& shape) const {
    Host(host_).throw_if_error(
        host_->infer_set_output(args_.result, i, dtype, shape.size(), shape.data()));
  }
  const bp_infer_args_t& raw() const { return args_; }

 private:
  void check_input(size_t i) const {
    if (!has_input(i))
      throw invalid("input " + std::to_string(i) + " of " + std::string(node().op_type()) +
                    " is missing");
  }
  const bp_host_api_t* host_;
  const bp_infer_args_t& args_;
};

// The inference of most elementwise operators: output 0 has input 0's dtype
// and shape.
inline void infer_same_as_input0(InferContext& c) { c.set_output(0, c.dtype(0), c.shape(0)); }

// One operator a backend defines: declare it with the setters, return it from
// Backend::define_ops(). Defaults: since_version 1, one input, one output,
// no attributes.
class OpDef {
 public:
  using InferFn = void (*)(InferContext&);
  OpDef(std::string domain, std::string name, int32_t since_version = 1)
      : domain_(std::move(domain)), name_(std::move(name)), since_(since_version) {}
  // Inputs [0, min) are required, up to max (BP_OP_UNBOUNDED: any number).
  OpDef& inputs(uint32_t min, uint32_t max) {
    min_in_ = min;
    max_in_ = max;
    return *this;
  }
  OpDef& outputs(uint32_t min, uint32_t max) {
    min_out_ = min;
    max_out_ = max;
    return *this;
  }
  OpDef& attr(std::string name, bp_attr_type_t type, bool required = false) {
    attrs_.push_back(Attr{std::move(name), type, required});
    return *this;
  }
  OpDef& doc(std::string text) {
    doc_ = std::move(text);
    return *this;
  }
  // Required. A plain function (it must be thread-safe and keep no state:
  // the host calls it from any thread, see bp_op_infer_fn).
  OpDef& infer(InferFn fn) {
    infer_ = fn;
    return *this;
  }

  // The ABI form; points into this object (which must not move any more).
  bp_op_schema_t schema(const bp_host_api_t* host) {
    host_ = host;
    abi_attrs_.clear();
    for (const Attr& a : attrs_) {
      bp_op_attr_t x{};
      x.struct_size = BP_STRUCT_SIZE(bp_op_attr_t, required);
      x.name = a.name.c_str();
      x.type = a.type;
      x.required = a.required;
      abi_attrs_.push_back(x);
    }
    bp_op_schema_t s{};
    s.struct_size = BP_STRUCT_SIZE(bp_op_schema_t, doc);
    s.domain = domain_.c_str();
    s.name = name_.c_str();
    s.since_version = since_;
    s.min_inputs = min_in_;
    s.max_inputs = max_in_;
    s.min_outputs = min_out_;
    s.max_outputs = max_out_;
    s.num_attributes = abi_attrs_.size();
    s.attributes = abi_attrs_.empty() ? nullptr : abi_attrs_.data();
    s.infer = infer_ != nullptr ? &OpDef::infer_trampoline : nullptr;
    s.user_data = this;
    s.doc = doc_.c_str();
    return s;
  }

 private:
  struct Attr {
    std::string name;
    bp_attr_type_t type;
    bool required;
  };
  static bp_status_t* infer_trampoline(void* user_data, const bp_infer_args_t* args) noexcept;

  std::string domain_, name_, doc_;
  int32_t since_;
  uint32_t min_in_ = 1, max_in_ = 1, min_out_ = 1, max_out_ = 1;
  std::vector<Attr> attrs_;
  std::vector<bp_op_attr_t> abi_attrs_;
  InferFn infer_ = nullptr;
  const bp_host_api_t* host_ = nullptr;
};

class CompiledPartition {
 public:
  virtual ~CompiledPartition() = default;
  virtual std::unique_ptr<ExecContext> create_context() = 0;
  virtual void serialize(bp_blob_store_t* /*store*/, bp_byte_writer_t* /*writer*/) {
    throw unimplemented("serialize");
  }
};

class Backend {
 public:
  explicit Backend(const bp_host_api_t* host) : host_(host) {}
  virtual ~Backend() = default;
  const Host& host() const { return host_; }

  virtual bp_backend_info_t info() = 0;
  // One key=value setting, before any compile. This default accepts
  // "num_threads" (a whole number, read back with num_threads()) and
  // rejects any other key with BP_STATUS_INVALID_ARGUMENT, as backend_abi.h
  // asks. A backend with keys of its own handles them and passes the rest here.
  virtual void configure(std::string_view key, std::string_view value) {
    if (key == "num_threads") {
      num_threads_ = static_cast<uint32_t>(config_uint(key, value, 0, 1u << 16));
      return;
    }
    throw invalid("unknown configuration key '" + std::string(key) + "'");
  }
  // The thread count configure("num_threads") set; 0 if none (backend default).
  uint32_t num_threads() const { return num_threads_; }
  // The thread count a compile should use: the configured one, else the
  // compile options' (0 = backend default).
  uint32_t num_threads(const bp_compile_options_t& options) const {
    return num_threads_ > 0 ? num_threads_ : options.num_threads;
  }
  virtual void query_support(const bp_graph_view_t& view, NodeReport& report) = 0;
  virtual std::unique_ptr<CompiledPartition> compile(const bp_graph_view_t& view,
                                                     const bp_compile_options_t& options,
                                                     NodeReport& report) = 0;
  // Ahead of time, all partitions at once; by default one compile each.
  virtual std::vector<std::unique_ptr<CompiledPartition>> compile_all(
      const std::vector<const bp_graph_view_t*>& views, const bp_compile_options_t& options,
      std::vector<NodeReport>& reports) {
    std::vector<std::unique_ptr<CompiledPartition>> out;
    for (size_t i = 0; i < views.size(); ++i)
      out.push_back(compile(*views[i], options, reports[i]));
    return out;
  }
  virtual std::unique_ptr<CompiledPartition> deserialize(const bp_graph_view_t& /*view*/,
                                                         const void* /*payload*/, size_t /*size*/,
                                                         const bp_compile_options_t& /*options*/) {
    throw unimplemented("deserialize");
  }
  virtual void* memory_alloc(uint32_t /*device*/, size_t /*size*/, size_t /*alignment*/) {
    throw unimplemented("memory_alloc");
  }
  virtual void memory_free(uint32_t /*device*/, void* /*ptr*/) {}
  virtual void copy_to_device(uint32_t, void*, const void*, size_t) {
    throw unimplemented("copy_to_device");
  }
  virtual void copy_from_device(uint32_t, void*, const void*, size_t) {
    throw unimplemented("copy_from_device");
  }
  virtual void before_load_network(uint64_t) {}
  virtual void after_load_network(uint64_t) {}
  virtual void before_unload_network(uint64_t) {}
  virtual void after_unload_network(uint64_t) {}
  virtual void memory_acquire() {}
  virtual void memory_release() {}
  virtual void execute_node(const bp_graph_view_t& /*view*/, size_t /*node*/, size_t,
                            const bp_tensor_t*, size_t, const bp_tensor_t*) {
    throw unimplemented("execute_node");
  }
  // API 1.3: the operators of your own domain this backend defines (asked
  // once, right after create). None by default.
  virtual std::vector<OpDef> define_ops() { return {}; }

  // API 1.4: one device this backend can run on, as get_devices reports it.
  struct Device {
    std::string name, vendor, driver_version;
    std::string kind = "other";  // "gpu", "cpu", "accelerator" or "other"
    uint64_t memory_bytes = 0;
    uint32_t compute_units = 0;
    bool selected = false;
  };
  // Every device found, selected or not. None by default (a CPU backend).
  virtual std::vector<Device> devices() { return {}; }

  // devices() as the ABI's get_devices hands them out: valid until the next
  // call, as the ABI says.
  const std::vector<bp_device_info_t>& device_infos() {
    device_list_ = devices();
    device_infos_.clear();
    for (const Device& d : device_list_) {
      bp_device_info_t i{};
      i.struct_size = BP_STRUCT_SIZE(bp_device_info_t, selected);
      i.name = d.name.c_str();
      i.vendor = d.vendor.c_str();
      i.driver_version = d.driver_version.c_str();
      i.kind = d.kind.c_str();
      i.memory_bytes = d.memory_bytes;
      i.compute_units = d.compute_units;
      i.selected = d.selected;
      device_infos_.push_back(i);
    }
    return device_infos_;
  }

  // The schemas of define_ops(), built on first call and kept for the life
  // of this object (the ABI's get_op_schemas).
  const std::vector<bp_op_schema_t>& op_schemas() {
    if (!ops_defined_) {
      ops_ = define_ops();
      for (OpDef& op : ops_) schemas_.push_back(op.schema(host_.api()));
      ops_defined_ = true;
    }
    return schemas_;
  }

 private:
  Host host_;
  uint32_t num_threads_ = 0;
  bool ops_defined_ = false;
  std::vector<OpDef> ops_;  // never resized once defined: schemas_ point into it
  std::vector<bp_op_schema_t> schemas_;
  std::vector<Device> device_list_;  // device_infos_ point into it
  std::vector<bp_device_info_t> device_infos_;
};

inline bp_status_t* OpDef::infer_trampoline(void* user_data, const bp_infer_args_t* args) noexcept {
  const OpDef* op = static_cast<const OpDef*>(user_data);
  const bp_host_api_t* host = op->host_;
  try {
    InferContext c(host, *args);
    op->infer_(c);
    return nullptr;
  } catch (const Error& e) {
    return host->status_create(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return host->status_create(BP_STATUS_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return host->status_create(BP_STATUS_INTERNAL, e.what());
  } catch (...) {
    return host->status_create(BP_STATUS_INTERNAL, "unknown C++ exception in infer");
  }
}

// ---------------------------------------------------------------------------
// Trampolines
// ---------------------------------------------------------------------------

namespace detail {

// Whether B declares a kIdentity (a table without entry points, e.g. a
// test's, may not). A bool, not a pointer compared with nullptr: GCC does not
// treat `&B::kIdentity != nullptr` as a constant expression under
// -fsanitize=address.
template <class B, class = void>
struct HasIdentity : std::false_type {};
template <class B>
struct HasIdentity<B, std::void_t<decltype(B::kIdentity)>> : std::true_type {};

// B's identity, or (without one) an identity of this header's API version.
template <class B>
constexpr BackendIdentity version_of() {
  if constexpr (HasIdentity<B>::value) {
    return B::kIdentity;
  } else {
    return BackendIdentity{"", nullptr};
  }
}

// The struct_size of a function table of API 1.`minor`.
constexpr size_t table_size(uint32_t minor) {
  return minor == 0   ? BP_BACKEND_API_SIZE_1_0
         : minor == 1 ? BP_BACKEND_API_SIZE_1_1
         : minor == 2 ? BP_BACKEND_API_SIZE_1_2
         : minor == 3 ? BP_BACKEND_API_SIZE_1_3
         : minor == 4 ? BP_BACKEND_API_SIZE_1_4
         : minor == 5 ? BP_BACKEND_API_SIZE_1_5
                      : BP_BACKEND_API_SIZE_1_6;
}

constexpr bool valid_version(const BackendIdentity& id) {
  return id.api_major == BP_API_VERSION_MAJOR && id.api_minor <= BP_API_VERSION_MINOR;
}

// GetBackendScore of `id`; a score function that throws counts as 0.
inline uint32_t score_of(const BackendIdentity& id) noexcept {
  if (id.score == nullptr) return 1;
  try {
    return id.score();
  } catch (...) {
    return 0;
  }
}

// Runs fn; turns any exception into a status created through `host`.
template <class Fn>
bp_status_t* guard(const bp_host_api_t* host, Fn&& fn) noexcept {
  try {
    fn();
    return nullptr;
  } catch (const Error& e) {
    return host->status_create(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return host->status_create(BP_STATUS_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return host->status_create(BP_STATUS_INTERNAL, e.what());
  } catch (...) {
    return host->status_create(BP_STATUS_INTERNAL, "unknown C++ exception in backend");
  }
}

inline Backend* as_backend(bp_backend_t* b) { return reinterpret_cast<Backend*>(b); }

struct CompiledBox {
  Backend* owner;
  std::unique_ptr<CompiledPartition> impl;
};
struct ContextBox {
  Backend* owner;
  std::unique_ptr<ExecContext> impl;
};

template <class B>
struct Table {
  static bp_status_t* create(const bp_host_api_t* host, uint32_t major, uint32_t /*minor*/,
                             bp_backend_t** out) noexcept {
    if (out == nullptr)
      return host->status_create(BP_STATUS_INVALID_ARGUMENT, "create: out is NULL");
    *out = nullptr;
    return guard(host, [&] {
      if (major != BP_API_VERSION_MAJOR)
        throw Error(BP_STATUS_VERSION_MISMATCH, "runtime API major version differs");
      std::unique_ptr<Backend> backend = std::make_unique<B>(host);
      *out = reinterpret_cast<bp_backend_t*>(backend.release());
    });
  }
  static void destroy(bp_backend_t* backend) noexcept {
    try {
      delete as_backend(backend);
    } catch (...) {
    }
  }
  static bp_status_t* get_info(bp_backend_t* backend, bp_backend_info_t* out) noexcept {
    Backend* b = as_backend(backend);
    return guard(b->host().api(), [&] {
      bp_backend_info_t info = b->info();
      if constexpr (HasIdentity<B>::value) {
        if (info.vendor == nullptr) info.vendor = B::kIdentity.vendor;
      }
      info.struct_size = BP_STRUCT_SIZE(bp_backend_info_t, flags);
      *out = info;
    });
  }
  static bp_status_t* configure(bp_backend_t* backend, size_t count, const char* const* keys,
                                const char* const* values) noexcept {
    Backend* b = as_backend(backend);
    return guard(b->host().api(), [&] {
      for (size_t i = 0; i < count; ++i) b->configure(keys[i], values[i]);
    });
  }
  static bp_status_t* query_support(bp_backend_t* backend, const bp_graph_view_t* view,
                                    bp_node_report_t* report) noexcept {
    Backend* b = as_backend(backend);
    return guard(b->host().api(), [&] {
      NodeReport r(b->host().api(), report);
      b->query_support(*view, r);
    });
  }
  static bp_status_t* compile(bp_backend_t* backend, const bp_graph_view_t* view,
                              const bp_compile_options_t* options, bp_node_report_t* report,
                              bp_compiled_t** out) noexcept {
    Backend* b = as_backend(backend);
    *out = nullptr;
    return guard(b->host().api(), [&] {
      NodeReport r(b->host().api(), report);
      bp_compile_options_t opts{};
      if (options != nullptr)
        std::memcpy(&opts, options, std::min(sizeof(opts), options->struct_size));
      auto box = std::make_unique<CompiledBox>(CompiledBox{b, b->compile(*view, opts, r)});
      *out = reinterpret_cast<bp_compiled_t*>(box.release());
    });
  }
  static bp_status_t* compile_all(bp_backend_t* backend, size_t n,
                                  const bp_graph_view_t* const* views,
                                  const bp_compile_options_t* options,
                                  bp_node_report_t* const* reports, bp_compiled_t** out) noexcept {
    Backend* b = as_backend(backend);
    for (size_t i = 0; i < n; ++i) out[i] = nullptr;
    return guard(b->host().api(), [&] {
      bp_compile_options_t opts{};
      if (options != nullptr)
        std::memcpy(&opts, options, std::min(sizeof(opts), options->struct_size));
      std::vector<const bp_graph_view_t*> v(views, views + n);
      std::vector<NodeReport> r;
      for (size_t i = 0; i < n; ++i) r.emplace_back(b->host().api(), reports[i]);
      std::vector<std::unique_ptr<CompiledPartition>> compiled = b->compile_all(v, opts, r);
      if (compiled.size() != n)
        throw Error(BP_STATUS_INTERNAL, "compile_all returned the wrong number of partitions");
      std::vector<std::unique_ptr<CompiledBox>> boxes;
      for (size_t i = 0; i < n; ++i)
        boxes.push_back(std::make_unique<CompiledBox>(CompiledBox{b, std::move(compiled[i])}));
      for (size_t i = 0; i < n; ++i) out[i] = reinterpret_cast<bp_compiled_t*>(boxes[i].release());
    });
  }
  static void compiled_destroy(bp_compiled_t* compiled) noexcept {
    try {
      delete reinterpret_cast<CompiledBox*>(compiled);
    } catch (...) {
    }
  }
  static bp_status_t* context_create(bp_compiled_t* compiled, bp_exec_context_t** out) noexcept {
    auto* c = reinterpret_cast<CompiledBox*>(compiled);
    *out = nullptr;
    return guard(c->owner->host().api(), [&] {
      auto box = std::make_unique<ContextBox>(ContextBox{c->owner, c->impl->create_context()});
      *out = reinterpret_cast<bp_exec_context_t*>(box.release());
    });
  }
  static void context_destroy(bp_exec_context_t* context) noexcept {
    try {
      delete reinterpret_cast<ContextBox*>(context);
    } catch (...) {
    }
  }
  static bp_status_t* execute(bp_exec_context_t* context, size_t num_inputs,
                              const bp_tensor_t* inputs, size_t num_outputs,
                              const bp_tensor_t* outputs) noexcept {
    auto* c = reinterpret_cast<ContextBox*>(context);
    return guard(c->owner->host().api(),
                 [&] { c->impl->execute(num_inputs, inputs, num_outputs, outputs); });
  }
  static bp_status_t* execute_shaped(bp_exec_context_t* context,
                                     const bp_execute_args_t* args) noexcept {
    auto* c = reinterpret_cast<ContextBox*>(context);
    const bp_host_api_t* host = c->owner->host().api();
    if (args == nullptr)
      return host->status_create(BP_STATUS_INVALID_ARGUMENT, "execute_shaped: args is NULL");
    return guard(host, [&] {
      const ExecuteArgs shaped(host, *args);
      const ThreadPool pool = shaped.thread_pool();
      const ThreadPool::Scope scope(&pool);
      c->impl->execute_shaped(shaped);
    });
  }
  static bp_status_t* serialize(bp_compiled_t* compiled, bp_blob_store_t* store,
                                bp_byte_writer_t* writer) noexcept {
    auto* c = reinterpret_cast<CompiledBox*>(compiled);
    return guard(c->owner->host().api(), [&] { c->impl->serialize(store, writer); });
  }
  static bp_status_t* deserialize(bp_backend_t* backend, const bp_graph_view_t* view,
                                  const void* payload, size_t size,
                                  const bp_compile_options_t* options,
                                  bp_compiled_t** out) noexcept {
    Backend* b = as_backend(backend);
    *out = nullptr;
    return guard(b->host().api(), [&] {
      bp_compile_options_t opts{};
      if (options != nullptr)
        std::memcpy(&opts, options, std::min(sizeof(opts), options->struct_size));
      auto box =
          std::make_unique<CompiledBox>(CompiledBox{b, b->deserialize(*view, payload, size, opts)});
      *out = reinterpret_cast<bp_compiled_t*>(box.release());
    });
  }
  static bp_status_t* memory_alloc(bp_backend_t* backend, uint32_t device, size_t size,
                                   size_t alignment, void** out) noexcept {
    Backend* b = as_backend(backend);
    return guard(b->host().api(), [&] { *out = b->memory_alloc(device, size, alignment); });
  }
  static void memory_free(bp_backend_t* backend, uint32_t device, void* ptr) noexcept {
    try {
      as_backend(backend)->memory_free(device, ptr);
    } catch (...) {
    }
  }
  static bp_status_t* copy_to_device(bp_backend_t* backend, uint32_t device, void* dst,
                                     const void* src, size_t size) noexcept {
    Backend* b = as_backend(backend);
    return guard(b->host().api(), [&] { b->copy_to_device(device, dst, src, size); });
  }
  static bp_status_t* copy_from_device(bp_backend_t* backend, uint32_t device, void* dst,
                                       const void* src, size_t size) noexcept {
    Backend* b = as_backend(backend);
    return guard(b->host().api(), [&] { b->copy_from_device(device, dst, src, size); });
  }
#define BP_SDK_HOOK(name)                                                 \
  static bp_status_t* name(bp_backend_t* backend, uint64_t id) noexcept { \
    Backend* b = as_backend(backend);                                     \
    return guard(b->host().api(), [&] { b->name(id); });                  \
  }
  BP_SDK_HOOK(before_load_network)
  BP_SDK_HOOK(after_load_network)
  BP_SDK_HOOK(before_unload_network)
  BP_SDK_HOOK(after_unload_network)
#undef BP_SDK_HOOK
  static bp_status_t* memory_acquire(bp_backend_t* backend) noexcept {
    Backend* b = as_backend(backend);
    return guard(b->host().api(), [&] { b->memory_acquire(); });
  }
  static bp_status_t* memory_release(bp_backend_t* backend) noexcept {
    Backend* b = as_backend(backend);
    return guard(b->host().api(), [&] { b->memory_release(); });
  }
  static bp_status_t* get_op_schemas(bp_backend_t* backend, size_t* out_count,
                                     const bp_op_schema_t** out_schemas) noexcept {
    Backend* b = as_backend(backend);
    *out_count = 0;
    *out_schemas = nullptr;
    return guard(b->host().api(), [&] {
      const std::vector<bp_op_schema_t>& schemas = b->op_schemas();
      *out_count = schemas.size();
      *out_schemas = schemas.empty() ? nullptr : schemas.data();
    });
  }
  static bp_status_t* get_devices(bp_backend_t* backend, size_t* out_count,
                                  const bp_device_info_t** out_devices) noexcept {
    Backend* b = as_backend(backend);
    *out_count = 0;
    *out_devices = nullptr;
    return guard(b->host().api(), [&] {
      const std::vector<bp_device_info_t>& devices = b->device_infos();
      *out_count = devices.size();
      *out_devices = devices.empty() ? nullptr : devices.data();
    });
  }
  static bp_status_t* execute_node(bp_backend_t* backend, const bp_graph_view_t* view, size_t node,
                                   size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
                                   const bp_tensor_t* outputs) noexcept {
    Backend* b = as_backend(backend);
    return guard(b->host().api(),
                 [&] { b->execute_node(*view, node, num_inputs, inputs, num_outputs, outputs); });
  }
};

}  // namespace detail

// The function table for backend class B (B(const bp_host_api_t*) constructor,
// derived from sdk::Backend). Static storage; one per B.
// If B declares kIdentity, the table is of the API version it names (an older
// minor leaves the later slots out).
template <class B>
const bp_backend_api_t* backend_table() {
  static_assert(detail::valid_version(detail::version_of<B>()),
                "kIdentity names an API version this header cannot build");
  static const bp_backend_api_t table = [] {
    using T = detail::Table<B>;
    constexpr BackendIdentity version = detail::version_of<B>();
    bp_backend_api_t t{};
    t.struct_size = detail::table_size(version.api_minor);
    t.api_major = version.api_major;
    t.api_minor = version.api_minor;
    t.create = &T::create;
    t.destroy = &T::destroy;
    t.get_info = &T::get_info;
    t.configure = &T::configure;
    t.query_support = &T::query_support;
    t.compile = &T::compile;
    t.compiled_destroy = &T::compiled_destroy;
    t.context_create = &T::context_create;
    t.context_destroy = &T::context_destroy;
    t.execute = &T::execute;
    t.serialize = &T::serialize;
    t.deserialize = &T::deserialize;
    t.memory_alloc = &T::memory_alloc;
    t.memory_free = &T::memory_free;
    t.copy_to_device = &T::copy_to_device;
    t.copy_from_device = &T::copy_from_device;
    t.before_load_network = &T::before_load_network;
    t.after_load_network = &T::after_load_network;
    t.before_unload_network = &T::before_unload_network;
    t.after_unload_network = &T::after_unload_network;
    t.memory_acquire = &T::memory_acquire;
    t.memory_release = &T::memory_release;
    t.execute_node = &T::execute_node;
    if (version.api_minor >= 1) t.compile_all = &T::compile_all;        // since 1.1
    if (version.api_minor >= 2) t.execute_shaped = &T::execute_shaped;  // since 1.2
    if (version.api_minor >= 3) t.get_op_schemas = &T::get_op_schemas;  // since 1.3
    if (version.api_minor >= 4) t.get_devices = &T::get_devices;        // since 1.4
    return t;
  }();
  return &table;
}

}  // namespace backplane::sdk

// Defines the (ArmNN-named) entry points of a backend shared object from
// IDENTITY, a BackendIdentity constant: GetBackendId, GetVersion and
// GetBackendScore; BackendFactory returns TABLE_FN() (a function returning
// const bp_backend_api_t*, NULL on failure). For a backend whose table is not
// backend_table<Class>() (a shim loading its implementation, a test double).
#define BP_DEFINE_BACKEND_ENTRY_POINTS_FOR(IDENTITY, TABLE_FN)                   \
  static_assert(::backplane::sdk::detail::valid_version(IDENTITY),               \
                "the identity names an API version this header cannot build");   \
  extern "C" BP_EXPORT const char* GetBackendId(void) { return (IDENTITY).id; }  \
  extern "C" BP_EXPORT void GetVersion(uint32_t* outMajor, uint32_t* outMinor) { \
    *outMajor = (IDENTITY).api_major;                                            \
    *outMinor = (IDENTITY).api_minor;                                            \
  }                                                                              \
  extern "C" BP_EXPORT uint32_t GetBackendScore(void) {                          \
    return ::backplane::sdk::detail::score_of(IDENTITY);                         \
  }                                                                              \
  extern "C" BP_EXPORT void* BackendFactory(void) {                              \
    try {                                                                        \
      return const_cast<bp_backend_api_t*>(TABLE_FN());                          \
    } catch (...) {                                                              \
      return nullptr;                                                            \
    }                                                                            \
  }

// The entry points of BACKEND_CLASS (derived from sdk::Backend, declaring
// kIdentity): its id, version and score, and backend_table<BACKEND_CLASS>().
#define BP_DEFINE_BACKEND_ENTRY_POINTS(BACKEND_CLASS)          \
  BP_DEFINE_BACKEND_ENTRY_POINTS_FOR(BACKEND_CLASS::kIdentity, \
                                     ::backplane::sdk::backend_table<BACKEND_CLASS>)

#endif  // BACKPLANE_BACKEND_SDK_HPP_
