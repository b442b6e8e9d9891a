// CpuOneDnn compiled shape-polymorphic (API 1.2): one compile, every shape.
//
// The backend is driven through its ABI table as the host drives it: the
// plugin users get (Backplane_CpuOneDnn_backend.so) is loaded with dlopen and
// given the runtime's host table, with `log` replaced so the test sees the
// backend's debug messages (it logs each instance it lowers for new shapes,
// which is how the test counts instance-cache misses). The test builds its
// own views: a transformer decoder layer (LayerNormalization, MatMul + bias,
// Reshape to a target that is a runtime input, Transpose, a key/value cache
// Concat, q*k^T, Softmax, residual Adds, Gelu) as the host will hand it over
// polymorphically (every non-constant dim -1, the Reshape targets view
// inputs), and the same layer at concrete shapes (targets constant), which
// is what every result is compared with: the partition compiled concretely
// for those shapes by CpuOneDnn (1e-5 relative) and by CpuRef (1e-4).
#include "core/named_blob_store.hpp"
#include "core/tensor_data_map.hpp"
#include "registry/byte_writer.hpp"
#include "registry/host_api.hpp"
#include "registry/node_report.hpp"

#include <backplane/backend_abi.h>
#include <backplane/tensor.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace backplane::cpuref {
const bp_backend_api_t* static_table();  // backends/reference (linked into the runtime)
}

namespace backplane {
namespace {

using Dims = std::vector<int64_t>;

// ---- host: the runtime's table, with the log captured ------------------------

std::mutex log_mutex;
std::vector<std::string> log_lines;

void capture_log(bp_log_level_t, const char* id, const char* message) {
  std::lock_guard<std::mutex> lock(log_mutex);
  log_lines.push_back(std::string(id ? id : "?") + ": " + (message ? message : ""));
}

const bp_host_api_t* test_host() {
  static const bp_host_api_t host = [] {
    bp_host_api_t h = *host_api();
    h.log = &capture_log;
    return h;
  }();
  return &host;
}

void clear_log() {
  std::lock_guard<std::mutex> lock(log_mutex);
  log_lines.clear();
}

// How many instances CpuOneDnn lowered for partition `name` since clear_log.
size_t lowered(const std::string& name) {
  std::lock_guard<std::mutex> lock(log_mutex);
  const std::string what = "partition '" + name + "': instance for new shapes";
  return std::count_if(log_lines.begin(), log_lines.end(),
                       [&](const std::string& l) { return l.find(what) != std::string::npos; });
}

struct Outcome {
  bp_status_code_t code = BP_STATUS_OK;
  std::string message;
  bool ok() const { return code == BP_STATUS_OK; }
};

Outcome take(bp_status_t* s) {
  if (s == nullptr) return {};
  Outcome o{test_host()->status_code(s), test_host()->status_message(s)};
  test_host()->status_release(s);
  return o;
}

// ---- backends -------------------------------------------------------------------

struct Backend {
  const bp_backend_api_t* api = nullptr;
  bp_backend_t* handle = nullptr;
  std::string error;
};

Backend create(const bp_backend_api_t* api) {
  Backend b;
  b.api = api;
  if (api == nullptr) {
    b.error = "no function table";
    return b;
  }
  Outcome o = take(api->create(test_host(), BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR, &b.handle));
  if (!o.ok()) b.error = o.message;
  return b;
}

// Sets `key` of backend `b`, or says in b.error why it could not.
void configure(Backend& b, const char* key, const char* value) {
  if (!b.error.empty()) return;
  if (Outcome o = take(b.api->configure(b.handle, 1, &key, &value)); !o.ok())
    b.error = std::string("configure ") + key + ": " + o.message;
}

// CpuOneDnn as users get it: this build's plugin.
const Backend& onednn() {
  static const Backend b = [] {
    const std::string path =
        std::string(BACKPLANE_ONEDNN_BACKEND_DIR) + "/Backplane_CpuOneDnn_backend.so";
    void* so = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the process
    if (so == nullptr) return Backend{nullptr, nullptr, "dlopen " + path + ": " + dlerror()};
    auto factory = reinterpret_cast<bp_backend_factory_fn>(dlsym(so, BP_ENTRY_BACKEND_FACTORY));
    if (factory == nullptr) return Backend{nullptr, nullptr, path + " has no BackendFactory"};
    Backend made = create(static_cast<const bp_backend_api_t*>(factory()));
    // The instance-cache tests below are written for 8 kept instances.
    configure(made, "shape_instances", "8");
    return made;
  }();
  return b;
}

const Backend& cpuref() {
  static const Backend b = create(cpuref::static_table());
  return b;
}

// ---- partitions described once, viewed polymorphically or at one shape ----------

// The sizes a run picks: batch, new tokens, cached tokens before this run.
struct Env {
  int64_t B = 1, T = 1, P = 1;
  bool operator<(const Env& o) const { return std::tie(B, T, P) < std::tie(o.B, o.T, o.P); }
};
std::string str(const Env& e) {
  return "B=" + std::to_string(e.B) + " T=" + std::to_string(e.T) + " P=" + std::to_string(e.P);
}

struct Attr {
  Attr(std::string n, bp_attr_type_t t) : name(std::move(n)), type(t) {}
  std::string name;
  bp_attr_type_t type;
  int64_t i = 0;
  float f = 0;
  std::vector<int64_t> ints;
};
Attr int_attr(const std::string& n, int64_t v) {
  Attr a{n, BP_ATTR_INT};
  a.i = v;
  return a;
}
Attr float_attr(const std::string& n, float v) {
  Attr a{n, BP_ATTR_FLOAT};
  a.f = v;
  return a;
}
Attr ints_attr(const std::string& n, std::vector<int64_t> v) {
  Attr a{n, BP_ATTR_INTS};
  a.ints = std::move(v);
  return a;
}

class Spec {
 public:
  enum Kind { kConstant, kInput, kShapeInput, kInner };
  struct Value {
    std::string name;
    Kind kind = kInner;
    bp_dtype_t dtype = BP_DTYPE_FLOAT32;
    std::function<Dims(const Env&)> shape;
    Tensor data;                                           // kConstant
    std::function<std::vector<int64_t>(const Env&)> ints;  // kShapeInput: its values
  };
  struct Node {
    std::string name, op;
    std::vector<int32_t> in, out;
    std::vector<Attr> attrs;
    int64_t opset = 17;
    std::string domain;  // "" for ONNX's
  };

  int constant(const std::string& name, const Dims& shape, float lo, float hi) {
    Tensor t(DType::kFloat32, shape);
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = d(rng_);
    const int v = add(name, kConstant, BP_DTYPE_FLOAT32, [shape](const Env&) { return shape; });
    values[v].data = t;
    return v;
  }
  // int8 weights in [-127, 127].
  int int8_constant(const std::string& name, const Dims& shape) {
    Tensor t(DType::kInt8, shape);
    std::uniform_int_distribution<int> d(-127, 127);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int8_t>()[i] = static_cast<int8_t>(d(rng_));
    const int v = add(name, kConstant, BP_DTYPE_INT8, [shape](const Env&) { return shape; });
    values[v].data = t;
    return v;
  }
  // uint8 bytes (4-bit values two a byte, or packed zero points).
  int uint8_constant(const std::string& name, const Dims& shape) {
    Tensor t(DType::kUInt8, shape);
    std::uniform_int_distribution<int> d(0, 255);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<uint8_t>()[i] = static_cast<uint8_t>(d(rng_));
    const int v = add(name, kConstant, BP_DTYPE_UINT8, [shape](const Env&) { return shape; });
    values[v].data = t;
    return v;
  }
  // A scalar int8 (a zero point).
  int int8_scalar(const std::string& name, int8_t value) {
    const int v = add(name, kConstant, BP_DTYPE_INT8, [](const Env&) { return Dims{}; });
    values[v].data = Tensor::copy_of(DType::kInt8, {}, &value);
    return v;
  }
  int input(const std::string& name, std::function<Dims(const Env&)> shape) {
    return add(name, kInput, BP_DTYPE_FLOAT32, std::move(shape));
  }
  // An int64 vector computed from the shapes (a Reshape target): a view
  // input of the polymorphic view, a constant of each concrete one.
  int shape_input(const std::string& name, std::function<std::vector<int64_t>(const Env&)> v) {
    auto shape = [v](const Env& e) { return Dims{static_cast<int64_t>(v(e).size())}; };
    const int value = add(name, kShapeInput, BP_DTYPE_INT64, shape);
    values[value].ints = std::move(v);
    return value;
  }
  int value(const std::string& name, std::function<Dims(const Env&)> shape) {
    return add(name, kInner, BP_DTYPE_FLOAT32, std::move(shape));
  }
  void node(const std::string& op, const std::string& name, std::vector<int32_t> in,
            std::vector<int32_t> out, std::vector<Attr> attrs = {}) {
    Node n;
    n.name = name;
    n.op = op;
    n.in = std::move(in);
    n.out = std::move(out);
    n.attrs = std::move(attrs);
    nodes.push_back(std::move(n));
  }
  void output(int v) { outputs.push_back(v); }

  std::vector<Dims> shapes(const Env& e) const {
    std::vector<Dims> s;
    for (const Value& v : values) s.push_back(v.shape(e));
    return s;
  }

  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int32_t> outputs;

 private:
  int add(const std::string& name, Kind kind, bp_dtype_t dtype,
          std::function<Dims(const Env&)> shape) {
    Value v;
    v.name = name;
    v.kind = kind;
    v.dtype = dtype;
    v.shape = std::move(shape);
    values.push_back(std::move(v));
    return static_cast<int>(values.size()) - 1;
  }
  std::mt19937 rng_{7};
};

// A bp_graph_view_t of a Spec: polymorphic (no Env) or at one Env's shapes.
// Owns every array the view points to, and its weights map.
class View {
 public:
  View(const Spec& spec, const std::string& name, const Env* env) : name_(name) {
    const size_t nv = spec.values.size();
    shapes_.resize(nv);
    std::vector<bool> is_output(nv, false);
    for (int32_t v : spec.outputs) is_output[v] = true;
    for (size_t v = 0; v < nv; ++v) {
      const Spec::Value& sv = spec.values[v];
      const bool constant = sv.kind == Spec::kConstant || (env && sv.kind == Spec::kShapeInput);
      shapes_[v] = sv.shape(env ? *env : Env{});
      if (!env && !constant) std::fill(shapes_[v].begin(), shapes_[v].end(), -1);
      if (sv.kind == Spec::kConstant) tensors_[sv.name] = sv.data;
      if (env && sv.kind == Spec::kShapeInput) {
        const std::vector<int64_t> ints = sv.ints(*env);
        tensors_[sv.name] =
            Tensor::copy_of(DType::kInt64, {static_cast<int64_t>(ints.size())}, ints.data());
      }
      bp_value_t bv{};
      bv.struct_size = sizeof bv;
      bv.name = sv.name.c_str();
      bv.dtype = sv.dtype;
      bv.rank = shapes_[v].size();
      bv.shape = shapes_[v].data();
      if (constant) bv.flags |= BP_VALUE_CONSTANT, bv.data_key = sv.name.c_str();
      if (!constant && sv.kind != Spec::kInner) {
        bv.flags |= BP_VALUE_VIEW_INPUT;
        inputs_.push_back(static_cast<int32_t>(v));
      }
      if (is_output[v]) bv.flags |= BP_VALUE_VIEW_OUTPUT;
      values_.push_back(bv);
    }
    attrs_.resize(spec.nodes.size());
    for (size_t n = 0; n < spec.nodes.size(); ++n) {
      const Spec::Node& sn = spec.nodes[n];
      for (const Attr& a : sn.attrs) {
        bp_attribute_t at{};
        at.struct_size = sizeof at;
        at.name = a.name.c_str();
        at.type = a.type;
        at.i = a.i;
        at.f = a.f;
        at.count = a.ints.size();
        at.ints = a.ints.data();
        attrs_[n].push_back(at);
      }
      bp_node_t bn{};
      bn.struct_size = sizeof bn;
      bn.name = sn.name.c_str();
      bn.op_type = sn.op.c_str();
      bn.domain = sn.domain.c_str();
      bn.opset = sn.opset;
      bn.num_inputs = sn.in.size();
      bn.inputs = sn.in.data();
      bn.num_outputs = sn.out.size();
      bn.outputs = sn.out.data();
      bn.num_attributes = attrs_[n].size();
      bn.attributes = attrs_[n].data();
      nodes_.push_back(bn);
    }
    outputs_ = spec.outputs;
    map_ = std::make_unique<TensorDataMap>(&tensors_);
    view_.struct_size = sizeof view_;
    view_.name = name_.c_str();
    view_.num_values = values_.size();
    view_.values = values_.data();
    view_.num_nodes = nodes_.size();
    view_.nodes = nodes_.data();
    view_.num_inputs = inputs_.size();
    view_.inputs = inputs_.data();
    view_.num_outputs = outputs_.size();
    view_.outputs = outputs_.data();
    view_.weights = map_->as_abi();
  }
  View(const View&) = delete;

  const bp_graph_view_t* get() const { return &view_; }
  const std::string& name() const { return name_; }
  // Reads its constants through `other`'s weight map (the same model's, as
  // a host gives every partition of one model); `other` must outlive it.
  void share_weights_of(const View& other) { view_.weights = other.view_.weights; }
  const std::vector<int32_t>& inputs() const { return inputs_; }

 private:
  std::string name_;
  std::vector<Dims> shapes_;
  std::unordered_map<std::string, Tensor> tensors_;
  std::unique_ptr<TensorDataMap> map_;
  std::vector<bp_value_t> values_;
  std::vector<std::vector<bp_attribute_t>> attrs_;
  std::vector<bp_node_t> nodes_;
  std::vector<int32_t> inputs_, outputs_;
  bp_graph_view_t view_{};
};

// ---- compiled partitions and runs -------------------------------------------------

class Part {
 public:
  Part(const Backend& b, const View& view, bool polymorphic) : b_(b) {
    bp_compile_options_t o{};
    o.struct_size = BP_STRUCT_SIZE(bp_compile_options_t, shape_polymorphic);
    o.shape_polymorphic = polymorphic;
    bp_node_report report(view.get()->num_nodes);
    status = take(b.api->compile(b.handle, view.get(), &o, &report, &compiled_));
    for (size_t n = 0; n < report.reported.size(); ++n)
      if (report.reported[n] && report.outcome[n] != BP_NODE_SUPPORTED)
        rejected += std::string(view.get()->nodes[n].name) + ": " + report.reason[n] + "; ";
  }
  // Adopts a compiled partition (from deserialize).
  Part(const Backend& b, bp_compiled_t* c) : b_(b), compiled_(c) {}
  ~Part() { b_.api->compiled_destroy(compiled_); }
  Part(const Part&) = delete;

  bool ok() const { return status.ok() && compiled_ != nullptr && rejected.empty(); }
  bp_compiled_t* get() const { return compiled_; }

  Outcome status;
  std::string rejected;  // nodes the compile gave back, with reasons

 private:
  const Backend& b_;
  bp_compiled_t* compiled_ = nullptr;
};

class Context {
 public:
  Context(const Backend& b, const Part& p) : b_(b) {
    status = take(b.api->context_create(p.get(), &ctx_));
  }
  ~Context() { b_.api->context_destroy(ctx_); }
  Context(const Context&) = delete;
  bp_exec_context_t* get() const { return ctx_; }
  Outcome status;

 private:
  const Backend& b_;
  bp_exec_context_t* ctx_ = nullptr;
};

// One execute_shaped: the shape of every value, the input tensors (in view
// input order) and the outputs it fills.
struct Call {
  std::vector<Dims> value_dims;
  std::vector<Tensor> inputs, outputs;
};

// The inputs of a run at `env`: seeded by the shapes, so every partition
// sees the same data at the same shapes.
Call make_call(const Spec& spec, const View& view, const Env& env) {
  Call call;
  call.value_dims = spec.shapes(env);
  std::mt19937 rng(static_cast<uint32_t>(env.B * 10007 + env.T * 101 + env.P));
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int32_t v : view.inputs()) {
    const Spec::Value& sv = spec.values[v];
    if (sv.kind == Spec::kShapeInput) {
      const std::vector<int64_t> ints = sv.ints(env);
      call.inputs.push_back(
          Tensor::copy_of(DType::kInt64, {static_cast<int64_t>(ints.size())}, ints.data()));
      continue;
    }
    Tensor t(DType::kFloat32, call.value_dims[v]);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = normal(rng);
    call.inputs.push_back(t);
  }
  for (int32_t v : spec.outputs) call.outputs.emplace_back(DType::kFloat32, call.value_dims[v]);
  return call;
}

bp_tensor_t as_abi(Tensor& t) {
  bp_tensor_t a{};
  a.struct_size = sizeof a;
  a.dtype = static_cast<bp_dtype_t>(t.dtype());
  a.rank = t.rank();
  a.shape = t.shape().data();
  a.data = t.data();
  a.size_bytes = t.size_bytes();
  return a;
}

Outcome execute(const Backend& b, const Context& ctx, Call& call) {
  std::vector<bp_tensor_t> in, out;
  for (Tensor& t : call.inputs) in.push_back(as_abi(t));
  for (Tensor& t : call.outputs) out.push_back(as_abi(t));
  std::vector<bp_shape_t> shapes;
  for (const Dims& d : call.value_dims) shapes.push_back({d.size(), d.data()});
  bp_execute_args_t args{};
  args.struct_size = sizeof args;
  args.num_inputs = in.size();
  args.inputs = in.data();
  args.num_outputs = out.size();
  args.outputs = out.data();
  args.num_values = shapes.size();
  args.value_shapes = shapes.data();
  return take(b.api->execute_shaped(ctx.get(), &args));
}

// max|got - want| / max|want|; +inf on a NaN or another shape.
double rel_diff(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape()) return INFINITY;
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.data_as<float>()[i], w = want.data_as<float>()[i];
    if (std::isnan(g) || std::isnan(w)) return INFINITY;
    diff = std::max(diff, std::fabs(g - w));
    scale = std::max(scale, std::fabs(w));
  }
  return scale > 0 ? diff / scale : diff;
}

// ---- the decoder layer -------------------------------------------------------------

constexpr int64_t kD = 32, kH = 4, kDh = 8, kF = 64;

// One pre-norm decoder layer step: x [B,T,D] (T new tokens) attends over the
// cache [B,H,P,Dh] grown by its own keys and values (outputs present_k/v,
// [B,H,P+T,Dh]); y [B,T,D].
Spec decoder_layer() {
  Spec s;
  auto btd = [](const Env& e) { return Dims{e.B, e.T, kD}; };
  auto btf = [](const Env& e) { return Dims{e.B, e.T, kF}; };
  auto bthd = [](const Env& e) { return Dims{e.B, e.T, kH, kDh}; };
  auto bhtd = [](const Env& e) { return Dims{e.B, kH, e.T, kDh}; };
  auto past = [](const Env& e) { return Dims{e.B, kH, e.P, kDh}; };
  auto present = [](const Env& e) { return Dims{e.B, kH, e.P + e.T, kDh}; };
  auto scores = [](const Env& e) { return Dims{e.B, kH, e.T, e.P + e.T}; };
  const float w = 0.35f;
  const int x = s.input("x", btd);
  const int past_k = s.input("past_k", past);
  const int past_v = s.input("past_v", past);
  const int heads = s.shape_input("heads_shape", [](const Env& e) {
    return std::vector<int64_t>{e.B, e.T, kH, kDh};
  });
  const int merged = s.shape_input("merged_shape", [](const Env& e) {
    return std::vector<int64_t>{e.B, e.T, kD};
  });
  const int ln1_g = s.constant("ln1_g", {kD}, 0.5f, 1.5f),
            ln1_b = s.constant("ln1_b", {kD}, -.2f, .2f);
  const int ln2_g = s.constant("ln2_g", {kD}, 0.5f, 1.5f),
            ln2_b = s.constant("ln2_b", {kD}, -.2f, .2f);
  const std::vector<Attr> ln = {int_attr("axis", -1), float_attr("epsilon", 1e-5f)};
  const int h1 = s.value("h1", btd);
  s.node("LayerNormalization", "ln1", {x, ln1_g, ln1_b}, {h1}, ln);
  // q, k, v: MatMul + bias, to heads [B,T,H,Dh] (runtime target), to [B,H,T,Dh].
  std::vector<int> heads_of;
  for (const char* p : {"q", "k", "v"}) {
    const std::string n = p;
    const int wt = s.constant("w" + n, {kD, kD}, -w, w), b = s.constant("b" + n, {kD}, -w, w);
    const int mm = s.value(n + "_mm", btd), biased = s.value(n, btd);
    const int r = s.value(n + "_4d", bthd), t = s.value(n + "_heads", bhtd);
    s.node("MatMul", n + "_proj", {h1, wt}, {mm});
    s.node("Add", n + "_bias", {mm, b}, {biased});
    s.node("Reshape", n + "_split", {biased, heads}, {r});
    s.node("Transpose", n + "_perm", {r}, {t}, {ints_attr("perm", {0, 2, 1, 3})});
    heads_of.push_back(t);
  }
  const int pk = s.value("present_k", present), pv = s.value("present_v", present);
  s.node("Concat", "cache_k", {past_k, heads_of[1]}, {pk}, {int_attr("axis", 2)});
  s.node("Concat", "cache_v", {past_v, heads_of[2]}, {pv}, {int_attr("axis", 2)});
  const int kt = s.value("k_t", [](const Env& e) { return Dims{e.B, kH, kDh, e.P + e.T}; });
  s.node("Transpose", "k_transpose", {pk}, {kt}, {ints_attr("perm", {0, 1, 3, 2})});
  const int qk = s.value("qk", scores), scaled = s.value("scaled", scores);
  const int probs = s.value("probs", scores);
  const int scale = s.constant("scale", {}, 0.f, 0.f);
  s.values[scale].data.data_as<float>()[0] = 1.f / std::sqrt(static_cast<float>(kDh));
  s.node("MatMul", "q_kT", {heads_of[0], kt}, {qk});
  s.node("Mul", "scale_scores", {qk, scale}, {scaled});
  s.node("Softmax", "softmax", {scaled}, {probs}, {int_attr("axis", -1)});
  const int ctx = s.value("context", bhtd), ctx_t = s.value("context_t", bthd);
  const int ctx_m = s.value("context_merged", btd);
  s.node("MatMul", "probs_v", {probs, pv}, {ctx});
  s.node("Transpose", "context_perm", {ctx}, {ctx_t}, {ints_attr("perm", {0, 2, 1, 3})});
  s.node("Reshape", "context_merge", {ctx_t, merged}, {ctx_m});
  const int wo = s.constant("wo", {kD, kD}, -w, w), bo = s.constant("bo", {kD}, -w, w);
  const int o_mm = s.value("o_mm", btd), o = s.value("o", btd), r1 = s.value("r1", btd);
  s.node("MatMul", "o_proj", {ctx_m, wo}, {o_mm});
  s.node("Add", "o_bias", {o_mm, bo}, {o});
  s.node("Add", "residual1", {o, x}, {r1});
  const int h2 = s.value("h2", btd);
  s.node("LayerNormalization", "ln2", {r1, ln2_g, ln2_b}, {h2}, ln);
  const int w1 = s.constant("w1", {kD, kF}, -w, w), b1 = s.constant("b1", {kF}, -w, w);
  const int w2 = s.constant("w2", {kF, kD}, -w, w), b2 = s.constant("b2", {kD}, -w, w);
  const int f0 = s.value("f0", btf), f1 = s.value("f1", btf), f2 = s.value("f2", btf);
  const int f3 = s.value("f3", btd), f4 = s.value("f4", btd), y = s.value("y", btd);
  s.node("MatMul", "ffn_up", {h2, w1}, {f0});
  s.node("Add", "ffn_up_bias", {f0, b1}, {f1});
  s.node("Gelu", "gelu", {f1}, {f2});
  s.node("MatMul", "ffn_down", {f2, w2}, {f3});
  s.node("Add", "ffn_down_bias", {f3, b2}, {f4});
  s.node("Add", "residual2", {f4, r1}, {y});
  s.output(y);
  s.output(pk);
  s.output(pv);
  return s;
}

// What a run at `env` must give: the same partition compiled concretely for
// those shapes, by CpuOneDnn and by CpuRef (an empty cache, P = 0, included:
// CpuOneDnn copies a Concat with an empty input itself).
struct Reference {
  std::vector<Tensor> onednn, cpuref;
};

Reference reference(const Spec& spec, const Env& env) {
  Reference r;
  View view(spec, "decoder@" + str(env), &env);
  for (const Backend* b : {&onednn(), &cpuref()}) {
    Part part(*b, view, /*polymorphic=*/false);
    EXPECT_TRUE(part.ok()) << str(env) << ": " << part.status.message << part.rejected;
    if (!part.ok()) return r;
    Context ctx(*b, part);
    Call call = make_call(spec, view, env);
    Outcome o = execute(*b, ctx, call);
    EXPECT_TRUE(o.ok()) << str(env) << ": " << o.message;
    (b == &onednn() ? r.onednn : r.cpuref) = call.outputs;
  }
  return r;
}

void expect_matches(const std::vector<Tensor>& got, const Reference& want, const Env& env) {
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(want.onednn.size(), 3u);
  ASSERT_EQ(want.cpuref.size(), 3u);
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_LE(rel_diff(got[k], want.onednn[k]), 1e-5) << str(env) << " output " << k;
    EXPECT_LE(rel_diff(got[k], want.cpuref[k]), 1e-4) << str(env) << " output " << k;
  }
}

class OneDnnPolymorphic : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(onednn().handle != nullptr) << onednn().error;
    ASSERT_TRUE(cpuref().handle != nullptr) << cpuref().error;
    clear_log();
  }
  // Each Env's reference, computed once per test binary.
  const Reference& ref(const Env& env) {
    static std::map<Env, Reference> refs;
    auto it = refs.find(env);
    if (it == refs.end()) it = refs.emplace(env, reference(spec_, env)).first;
    return it->second;
  }
  // Runs plans[t] `rounds` times on thread t, each thread on its own
  // context of `part`, and expects every run to match its reference.
  void run_on_threads(const Part& part, const View& view, const std::vector<std::vector<Env>>& plans,
                      int rounds) {
    for (const auto& plan : plans)
      for (const Env& e : plan) (void)ref(e);  // computed before the threads start
    std::vector<std::string> failures(plans.size());
    std::vector<std::thread> threads;
    for (size_t t = 0; t < plans.size(); ++t)
      threads.emplace_back([&, t] {
        Context ctx(onednn(), part);
        for (int round = 0; round < rounds; ++round)
          for (const Env& e : plans[t]) {
            Call call = make_call(spec_, view, e);
            Outcome o = execute(onednn(), ctx, call);
            if (!o.ok()) failures[t] += str(e) + ": " + o.message + "; ";
            for (size_t k = 0; o.ok() && k < call.outputs.size(); ++k)
              if (rel_diff(call.outputs[k], ref(e).onednn[k]) > 1e-5)
                failures[t] += str(e) + ": output " + std::to_string(k) + " differs; ";
          }
      });
    for (std::thread& th : threads) th.join();
    for (size_t t = 0; t < failures.size(); ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
  }
  // Runs the layer at each of `shapes`, in order, through a shape-polymorphic
  // partition `name` and through one with derive_instances off (defined
  // below, after onednn_lowering_only), and expects their outputs equal bit
  // for bit and matching the reference.
  void expect_layer_like_lowered(const std::string& name, const std::vector<Env>& shapes);
  static const Spec spec_;
};
const Spec OneDnnPolymorphic::spec_ = decoder_layer();

TEST_F(OneDnnPolymorphic, DeclaresTheFlag) {
  bp_backend_info_t info{};
  ASSERT_TRUE(take(onednn().api->get_info(onednn().handle, &info)).ok());
  EXPECT_TRUE(info.flags & BP_BACKEND_FLAG_SHAPE_POLYMORPHIC);
  EXPECT_TRUE(BP_TABLE_HAS(onednn().api, execute_shaped));
}

// Compiled once, run as a decoder loop runs it (an empty cache, then one
// token at a time: P = 0..20) and at other batch sizes and token counts:
// every run equals the partition compiled for its shapes; each new set of
// shapes is lowered once, by that run.
TEST_F(OneDnnPolymorphic, CompiledOnceRunsEveryShape) {
  View view(spec_, "decoder", nullptr);
  Part part(onednn(), view, /*polymorphic=*/true);
  ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
  Context ctx(onednn(), part);
  ASSERT_TRUE(ctx.status.ok()) << ctx.status.message;
  std::vector<Env> envs;
  for (int64_t p = 0; p <= 20; ++p) envs.push_back({1, 1, p});
  envs.insert(envs.end(), {{2, 5, 3}, {3, 2, 7}, {1, 9, 0}, {2, 1, 16}, {4, 3, 2}});
  for (size_t i = 0; i < envs.size(); ++i) {
    Call call = make_call(spec_, view, envs[i]);
    Outcome o = execute(onednn(), ctx, call);
    ASSERT_TRUE(o.ok()) << str(envs[i]) << ": " << o.message;
    expect_matches(call.outputs, ref(envs[i]), envs[i]);
    EXPECT_EQ(lowered("decoder"), i + 1) << "after " << str(envs[i]);
  }
}

// An instance whose values are small runs on one thread (a parallel region
// per primitive would cost more than its work), a large one on the
// partition's threads; both compute the same as the reference.
TEST_F(OneDnnPolymorphic, SmallInstancesRunOnOneThread) {
  View view(spec_, "decoder_threads", nullptr);
  bp_compile_options_t o{};
  o.struct_size = BP_STRUCT_SIZE(bp_compile_options_t, shape_polymorphic);
  o.shape_polymorphic = true;
  o.num_threads = 2;
  bp_node_report report(view.get()->num_nodes);
  bp_compiled_t* compiled = nullptr;
  ASSERT_TRUE(
      take(onednn().api->compile(onednn().handle, view.get(), &o, &report, &compiled)).ok());
  Part part(onednn(), compiled);
  Context ctx(onednn(), part);
  ASSERT_TRUE(ctx.status.ok()) << ctx.status.message;
  auto last_lowering = [] {
    std::lock_guard<std::mutex> lock(log_mutex);
    for (auto it = log_lines.rbegin(); it != log_lines.rend(); ++it)
      if (it->find("'decoder_threads': instance for new shapes") != std::string::npos) return *it;
    return std::string();
  };
  for (const auto& [env, want] : {std::pair<Env, std::string>{{1, 1, 3}, "on 1 thread;"},
                                  std::pair<Env, std::string>{{8, 64, 64}, "on 2 threads;"}}) {
    Call call = make_call(spec_, view, env);
    Outcome out = execute(onednn(), ctx, call);
    ASSERT_TRUE(out.ok()) << str(env) << ": " << out.message;
    expect_matches(call.outputs, ref(env), env);
    EXPECT_NE(last_lowering().find(want), std::string::npos) << str(env) << ": " << last_lowering();
  }
}

// Shapes seen before reuse their instance (no lowering, same results); the
// partition keeps at most 8 lowered ones, least recently used first out
// (instances derived from a template are not kept: a context derives its
// next one in place).
TEST_F(OneDnnPolymorphic, RepeatedShapesHitTheInstanceCache) {
  View view(spec_, "decoder_lru", nullptr);
  Part part(onednn(), view, true);
  ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
  Context ctx(onednn(), part);
  const std::vector<Env> abc = {{1, 1, 4}, {2, 3, 5}, {1, 6, 2}};
  std::vector<std::vector<Tensor>> first;
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < abc.size(); ++i) {
      Call call = make_call(spec_, view, abc[i]);
      ASSERT_TRUE(execute(onednn(), ctx, call).ok());
      if (round == 0) {
        first.push_back(call.outputs);
        continue;
      }
      for (size_t k = 0; k < call.outputs.size(); ++k)
        EXPECT_EQ(rel_diff(call.outputs[k], first[i][k]), 0.0) << str(abc[i]) << " round " << round;
    }
  EXPECT_EQ(lowered("decoder_lru"), 3u);
  auto last_line = [] {
    std::lock_guard<std::mutex> lock(log_mutex);
    return log_lines.back();
  };
  // Six new lengths: three lowered (and kept), which make a template, and
  // three derived from it.
  for (int64_t p = 30; p < 36; ++p) {
    Call call = make_call(spec_, view, {1, 1, p});
    ASSERT_TRUE(execute(onednn(), ctx, call).ok());
    expect_matches(call.outputs, ref({1, 1, p}), {1, 1, p});
  }
  EXPECT_EQ(lowered("decoder_lru"), 9u);
  EXPECT_NE(last_line().find(") derived in "), std::string::npos) << last_line();
  // Three more lowered (another batch, outside the template) make nine kept:
  // {1,1,4}, the least recently used, goes.
  for (int64_t p = 40; p < 43; ++p) {
    Call call = make_call(spec_, view, {2, 1, p});
    ASSERT_TRUE(execute(onednn(), ctx, call).ok());
  }
  EXPECT_EQ(lowered("decoder_lru"), 12u);
  EXPECT_NE(last_line().find("8 kept (at most 8)"), std::string::npos) << last_line();
  Call again = make_call(spec_, view, {1, 6, 2});  // used last of the three: still kept
  ASSERT_TRUE(execute(onednn(), ctx, again).ok());
  EXPECT_EQ(lowered("decoder_lru"), 12u);
  Call evicted = make_call(spec_, view, {1, 1, 4});
  ASSERT_TRUE(execute(onednn(), ctx, evicted).ok());
  EXPECT_EQ(lowered("decoder_lru"), 13u);
  expect_matches(evicted.outputs, ref({1, 1, 4}), {1, 1, 4});
}

// Four threads, each on its own context, run different shapes (and some they
// share) at once, over and over: every result is right, and each set of
// shapes was lowered once however many threads met it first together.
TEST_F(OneDnnPolymorphic, FourThreadsDifferentShapesConcurrently) {
  View view(spec_, "decoder_mt", nullptr);
  Part part(onednn(), view, true);
  ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
  const Env shared{2, 2, 6};
  std::vector<std::vector<Env>> plans;
  for (int64_t t = 0; t < 4; ++t) plans.push_back({{1, 1, 3 + 4 * t}, shared, {1 + t % 2, 4, 2}});
  run_on_threads(part, view, plans, 5);
  // 4 shapes of one thread each, 2 of two threads each, 1 of all: 7, none
  // lowered twice (none is evicted). Which three were lowered last, in the
  // threads' order, decides whether a template forms and one of the
  // decoder lengths is derived instead.
  std::set<Env> distinct;
  for (const auto& plan : plans) distinct.insert(plan.begin(), plan.end());
  std::multiset<std::string> shapes;
  {
    std::lock_guard<std::mutex> lock(log_mutex);
    const std::string what = "partition 'decoder_mt': instance for new shapes (";
    for (const std::string& l : log_lines) {
      const size_t at = l.find(what), end = l.find(") lowered in ");
      if (at != std::string::npos && end != std::string::npos)
        shapes.insert(l.substr(at + what.size(), end - at - what.size()));
    }
  }
  EXPECT_EQ(std::set<std::string>(shapes.begin(), shapes.end()).size(), shapes.size());
  EXPECT_GE(shapes.size(), distinct.size() - 1);
  EXPECT_LE(shapes.size(), distinct.size());
}

// Shapes that do not fit the view or each other are clear errors naming what
// is wrong, and the context runs the next good shapes as if nothing happened.
TEST_F(OneDnnPolymorphic, WrongShapesAreClearErrorsAndTheContextStillWorks) {
  View view(spec_, "decoder_bad", nullptr);
  Part part(onednn(), view, true);
  ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
  Context ctx(onednn(), part);
  const Env good{1, 2, 3};
  auto x_of = [&](Call& c) -> Tensor& { return c.inputs[0]; };
  auto value = [&](const std::string& name) {
    for (size_t v = 0; v < spec_.values.size(); ++v)
      if (spec_.values[v].name == name) return v;
    return size_t{0};
  };
  auto expect_good_run = [&] {
    Call call = make_call(spec_, view, good);
    Outcome o = execute(onednn(), ctx, call);
    ASSERT_TRUE(o.ok()) << o.message;
    expect_matches(call.outputs, ref(good), good);
  };
  expect_good_run();

  // The tensor of input x disagrees with the shapes the run gives.
  Call call = make_call(spec_, view, good);
  x_of(call) = Tensor(DType::kFloat32, {1, 3, kD});
  Outcome o = execute(onednn(), ctx, call);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("input 'x' has shape [1,3,32]"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("[1,2,32]"), std::string::npos) << o.message;
  expect_good_run();

  // x (and its tensor) with a hidden size the weights do not have.
  call = make_call(spec_, view, good);
  call.value_dims[value("x")] = {1, 2, kD + 1};
  x_of(call) = Tensor(DType::kFloat32, {1, 2, kD + 1});
  o = execute(onednn(), ctx, call);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("node 'ln1' (LayerNormalization)"), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("'x' [1,2,33]"), std::string::npos) << o.message;
  expect_good_run();

  // A cache whose batch differs from x's: the Concat cannot join them.
  call = make_call(spec_, view, good);
  call.value_dims[value("past_k")] = {2, kH, 3, kDh};
  call.inputs[1] = Tensor(DType::kFloat32, {2, kH, 3, kDh});
  o = execute(onednn(), ctx, call);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("node 'cache_k' (Concat)"), std::string::npos) << o.message;
  expect_good_run();

  // A weight's shape is the view's: it cannot change between runs.
  call = make_call(spec_, view, good);
  call.value_dims[value("wq")] = {kD, kD + 1};
  o = execute(onednn(), ctx, call);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("value 'wq' has shape [32,33] in this run, the view [32,32]"),
            std::string::npos)
      << o.message;

  // Another rank, another number of values, a dim not known.
  call = make_call(spec_, view, good);
  call.value_dims[value("h1")] = {2, kD};
  o = execute(onednn(), ctx, call);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("value 'h1' has 2 dims in this run, the view 3"), std::string::npos)
      << o.message;
  call = make_call(spec_, view, good);
  call.value_dims.pop_back();
  o = execute(onednn(), ctx, call);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("value shapes"), std::string::npos) << o.message;
  call = make_call(spec_, view, good);
  call.value_dims[value("probs")][3] = -1;
  o = execute(onednn(), ctx, call);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("not known"), std::string::npos) << o.message;
  expect_good_run();
  // Only the good shapes were ever lowered.
  EXPECT_EQ(lowered("decoder_bad"), 1u);
}

// A partition compiled shape-polymorphic runs only through execute_shaped.
TEST_F(OneDnnPolymorphic, PlainExecuteIsRefused) {
  View view(spec_, "decoder_plain", nullptr);
  Part part(onednn(), view, true);
  ASSERT_TRUE(part.ok());
  Context ctx(onednn(), part);
  Call call = make_call(spec_, view, {1, 1, 1});
  std::vector<bp_tensor_t> in, out;
  for (Tensor& t : call.inputs) in.push_back(as_abi(t));
  for (Tensor& t : call.outputs) out.push_back(as_abi(t));
  Outcome o = take(onednn().api->execute(ctx.get(), in.size(), in.data(), out.size(), out.data()));
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(o.message.find("execute_shaped"), std::string::npos) << o.message;
}

// Serialized, a polymorphic partition is a marker: loading compiles the view
// again, and it runs every shape as the original does.
// What the instance lowered for partition `name` says it shares: weights,
// primitives, and how many times one was taken instead of made.
struct SharedCount {
  size_t weights = 0, primitives = 0, taken = 0;
};
SharedCount shared_count(const std::string& name) {
  std::lock_guard<std::mutex> lock(log_mutex);
  const std::regex counts(R"(shared: (\d+) weights, (\d+) primitives \((\d+) times taken\))");
  for (const std::string& line : log_lines) {
    std::smatch m;
    if (line.find("partition '" + name + "': instance") == std::string::npos ||
        !std::regex_search(line, m, counts))
      continue;
    return {std::stoul(m[1]), std::stoul(m[2]), std::stoul(m[3])};
  }
  ADD_FAILURE() << "no instance line for " << name;
  return {};
}

// Two shape-polymorphic partitions over one weight map (one model, as a
// decoder's first call and its later steps are) reorder each weight once:
// the second takes every weight of the model's the first made. A partition
// over a map of its own makes its own. All three compute the same.
TEST_F(OneDnnPolymorphic, PartitionsOfOneModelShareTheirReorderedWeights) {
  View first(spec_, "decoder_share_first", nullptr);
  View second(spec_, "decoder_share_second", nullptr);
  second.share_weights_of(first);
  View apart(spec_, "decoder_share_apart", nullptr);
  const Env env{1, 1, 4};
  std::vector<std::vector<Tensor>> outputs;
  std::vector<std::unique_ptr<Part>> parts;  // all alive together, as a model's are
  for (const View* view : {&first, &second, &apart}) {
    parts.push_back(std::make_unique<Part>(onednn(), *view, true));
    const Part& part = *parts.back();
    ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
    Context ctx(onednn(), part);
    Call call = make_call(spec_, *view, env);
    Outcome o = execute(onednn(), ctx, call);
    ASSERT_TRUE(o.ok()) << o.message;
    outputs.push_back(call.outputs);
  }
  const SharedCount a = shared_count("decoder_share_first");
  const SharedCount b = shared_count("decoder_share_second");
  const SharedCount c = shared_count("decoder_share_apart");
  EXPECT_GT(b.weights, 0u);
  EXPECT_EQ(a.taken, c.taken);
  // Every weight from the first, but the scale and shift each layer norm
  // derives from its weights (tagged by node, not by data key): 2 x 2.
  EXPECT_EQ(b.taken, c.taken + b.weights - 4);
  for (size_t k = 0; k < outputs[0].size(); ++k) {
    EXPECT_EQ(rel_diff(outputs[1][k], outputs[0][k]), 0.0) << "output " << k;
    EXPECT_EQ(rel_diff(outputs[2][k], outputs[0][k]), 0.0) << "output " << k;
  }
}

TEST_F(OneDnnPolymorphic, SerializeAndDeserialize) {
  View view(spec_, "decoder_aot", nullptr);
  Part part(onednn(), view, true);
  ASSERT_TRUE(part.ok());
  NamedBlobStore store;
  bp_byte_writer writer;
  ASSERT_TRUE(take(onednn().api->serialize(part.get(), store.as_abi(), &writer)).ok());
  EXPECT_LT(writer.bytes.size(), 64u);
  EXPECT_TRUE(store.keys().empty());
  bp_compile_options_t o{};
  o.struct_size = BP_STRUCT_SIZE(bp_compile_options_t, shape_polymorphic);
  o.shape_polymorphic = true;
  bp_compiled_t* loaded = nullptr;
  ASSERT_TRUE(take(onednn().api->deserialize(onednn().handle, view.get(), writer.bytes.data(),
                                             writer.bytes.size(), &o, &loaded))
                  .ok());
  Part again(onednn(), loaded);
  Context ctx(onednn(), again);
  for (const Env& e : {Env{1, 1, 5}, Env{2, 3, 1}}) {
    Call call = make_call(spec_, view, e);
    Outcome r = execute(onednn(), ctx, call);
    ASSERT_TRUE(r.ok()) << r.message;
    expect_matches(call.outputs, ref(e), e);
  }
  // A payload cut short is corrupt, one with bytes after its end too.
  std::vector<uint8_t> bad(writer.bytes.begin(), writer.bytes.end() - 1);
  bp_compiled_t* none = nullptr;
  EXPECT_EQ(take(onednn().api->deserialize(onednn().handle, view.get(), bad.data(), bad.size(), &o,
                                           &none))
                .code,
            BP_STATUS_CORRUPT_DATA);
  bad = writer.bytes;
  bad.push_back(0);
  EXPECT_EQ(take(onednn().api->deserialize(onednn().handle, view.get(), bad.data(), bad.size(), &o,
                                           &none))
                .code,
            BP_STATUS_CORRUPT_DATA);
}

// In an instance, a Concat of plain tensors is copied by the backend itself
// (a oneDNN concat would be made for every cache length): rows memcpy'd
// where the inner dim is contiguous, element by element where it is not (a
// transposed view), over several threads when large. Exact either way.
TEST_F(OneDnnPolymorphic, ConcatOfPlainAndTransposedTensorsIsExact) {
  Spec s;
  constexpr int64_t kC = 96;
  const int a = s.input("a", [](const Env& e) { return Dims{e.B, e.P, kC}; });
  const int b = s.input("b", [](const Env& e) { return Dims{e.B, kC, e.T}; });
  const int bt = s.value("b_t", [](const Env& e) { return Dims{e.B, e.T, kC}; });
  const int y = s.value("y", [](const Env& e) { return Dims{e.B, e.P + e.T, kC}; });
  s.node("Transpose", "b_transpose", {b}, {bt}, {ints_attr("perm", {0, 2, 1})});
  s.node("Concat", "join", {a, bt}, {y}, {int_attr("axis", 1)});
  s.output(y);
  View poly(s, "concat", nullptr);
  Part p(onednn(), poly, true);
  ASSERT_TRUE(p.ok()) << p.status.message << p.rejected;
  Context ctx(onednn(), p);
  for (const Env& e : {Env{1, 3, 5}, Env{2, 700, 300}, Env{3, 1, 1}}) {
    Call call = make_call(s, poly, e);
    Outcome o = execute(onednn(), ctx, call);
    ASSERT_TRUE(o.ok()) << o.message;
    const float* pa = call.inputs[0].data_as<float>();
    const float* pb = call.inputs[1].data_as<float>();
    const float* py = call.outputs[0].data_as<float>();
    int64_t wrong = 0;
    for (int64_t n = 0; n < e.B; ++n)
      for (int64_t r = 0; r < e.P + e.T; ++r)
        for (int64_t c = 0; c < kC; ++c) {
          const float want =
              r < e.P ? pa[(n * e.P + r) * kC + c] : pb[(n * kC + c) * e.T + (r - e.P)];
          wrong += py[(n * (e.P + e.T) + r) * kC + c] != want;
        }
    EXPECT_EQ(wrong, 0) << str(e);
  }
}

// In an instance, a MatMul of two activations (at most scaled after) is the
// backend's loop over oneDNN's sgemm, one call per batch, over operands in
// whatever plain layout the steps before left them: here a source whose
// heads are its second dim in memory, a transposed right-hand side, and a
// result read transposed. Checked against a sum in double at several shapes.
TEST_F(OneDnnPolymorphic, MatMulsOfActivationsInEveryPlainLayout) {
  Spec s;
  constexpr int64_t kH = 3, kD = 8;
  const int q = s.input("q", [](const Env& e) { return Dims{e.B, e.T, kH, kD}; });
  const int k = s.input("k", [](const Env& e) { return Dims{e.B, kH, e.P, kD}; });
  const int qh = s.value("q_heads", [](const Env& e) { return Dims{e.B, kH, e.T, kD}; });
  const int kt = s.value("k_t", [](const Env& e) { return Dims{e.B, kH, kD, e.P}; });
  auto scores = [](const Env& e) { return Dims{e.B, kH, e.T, e.P}; };
  const int qk = s.value("qk", scores), scaled = s.value("scaled", scores);
  const int y = s.value("y", [](const Env& e) { return Dims{e.B, kH, e.P, e.T}; });
  const int scale = s.constant("scale", {}, 0.f, 0.f);
  s.values[scale].data.data_as<float>()[0] = 0.375f;
  s.node("Transpose", "q_perm", {q}, {qh}, {ints_attr("perm", {0, 2, 1, 3})});
  s.node("Transpose", "k_perm", {k}, {kt}, {ints_attr("perm", {0, 1, 3, 2})});
  s.node("MatMul", "q_kT", {qh, kt}, {qk});
  s.node("Mul", "scale", {qk, scale}, {scaled});
  s.node("Transpose", "y_perm", {scaled}, {y}, {ints_attr("perm", {0, 1, 3, 2})});
  s.output(y);
  View poly(s, "matmuls", nullptr);
  Part p(onednn(), poly, true);
  ASSERT_TRUE(p.ok()) << p.status.message << p.rejected;
  Context ctx(onednn(), p);
  for (const Env& e : {Env{1, 1, 5}, Env{2, 7, 33}, Env{3, 4, 300}, Env{1, 2, 1}}) {
    Call call = make_call(s, poly, e);
    Outcome o = execute(onednn(), ctx, call);
    ASSERT_TRUE(o.ok()) << o.message << " " << str(e);
    const float* pq = call.inputs[0].data_as<float>();
    const float* pk = call.inputs[1].data_as<float>();
    const float* py = call.outputs[0].data_as<float>();
    int64_t wrong = 0;
    for (int64_t b = 0; b < e.B; ++b)
      for (int64_t h = 0; h < kH; ++h)
        for (int64_t c = 0; c < e.P; ++c)
          for (int64_t t = 0; t < e.T; ++t) {
            double want = 0;
            for (int64_t d = 0; d < kD; ++d)
              want += static_cast<double>(pq[((b * e.T + t) * kH + h) * kD + d]) *
                      pk[((b * kH + h) * e.P + c) * kD + d];
            want *= 0.375;
            const float got = py[((b * kH + h) * e.P + c) * e.T + t];
            wrong += std::abs(got - want) > 1e-5 * (1 + std::abs(want));
          }
    EXPECT_EQ(wrong, 0) << str(e);
  }
}

// An attention's scores as a decoder's instances meet them: a mask [B,1,1,P]
// added to [B,H,T,P], then Sub, Mul, Div, Max and Min against operands
// broadcast along other dims (one of rank 1), then a Softmax over the last
// axis, at many shapes. A small instance does these by loops that take any
// shape; a large one (more than 65,536 elements) by oneDNN kernels made
// for it. Every run equals the partition compiled for its shapes by CpuOneDnn
// and by CpuRef.
TEST_F(OneDnnPolymorphic, BroadcastElementwiseAndSoftmaxAtEveryShape) {
  Spec s;
  auto full = [](const Env& e) { return Dims{e.B, kH, e.T, e.P}; };
  const int x = s.input("x", full);
  const int mask = s.input("mask", [](const Env& e) { return Dims{e.B, 1, 1, e.P}; });
  const int col = s.input("col", [](const Env& e) { return Dims{1, kH, e.T, 1}; });
  const int row = s.input("row", [](const Env& e) { return Dims{e.P}; });
  std::vector<int> v;
  for (const char* name : {"masked", "less", "times", "over", "above", "below", "probs"})
    v.push_back(s.value(name, full));
  s.node("Add", "add_mask", {x, mask}, {v[0]});
  s.node("Sub", "sub_col", {v[0], col}, {v[1]});
  s.node("Mul", "mul_row", {v[1], row}, {v[2]});
  s.node("Div", "div_mask", {v[2], mask}, {v[3]});
  s.node("Max", "max_col", {v[3], col}, {v[4]});
  s.node("Min", "min_x", {v[4], x}, {v[5]});
  s.node("Softmax", "softmax", {v[5]}, {v[6]}, {int_attr("axis", -1)});
  s.output(v[5]);
  s.output(v[6]);
  View poly(s, "scores", nullptr);
  Part part(onednn(), poly, true);
  ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
  Context ctx(onednn(), part);
  std::vector<Env> envs;
  for (int64_t p = 1; p <= 9; ++p) envs.push_back({1, 1, p});
  envs.insert(envs.end(),
              {{2, 3, 7}, {3, 1, 1}, {1, 4, 300}, {2, 2, 600}, {2, 16, 600}, {1, 1, 10}});
  for (const Env& e : envs) {
    Call call = make_call(s, poly, e);
    Outcome o = execute(onednn(), ctx, call);
    ASSERT_TRUE(o.ok()) << str(e) << ": " << o.message;
    View concrete(s, "scores@" + str(e), &e);
    for (const Backend* b : {&onednn(), &cpuref()}) {
      Part want_part(*b, concrete, false);
      ASSERT_TRUE(want_part.ok()) << str(e) << ": " << want_part.status.message
                                  << want_part.rejected;
      Context want_ctx(*b, want_part);
      Call want = make_call(s, concrete, e);
      ASSERT_TRUE(execute(*b, want_ctx, want).ok()) << str(e);
      const bool by_onednn = b == &onednn();
      for (size_t k = 0; k < want.outputs.size(); ++k)
        EXPECT_LE(rel_diff(call.outputs[k], want.outputs[k]), by_onednn ? 1e-5 : 1e-4)
            << str(e) << " output " << k << " against " << (by_onednn ? "CpuOneDnn" : "CpuRef");
    }
  }
}

// ---- instances derived rather than lowered (derive.hpp) ------------------------------

// How many instances of partition `name` were derived / lowered since clear_log.
size_t made(const std::string& name, const char* how) {
  std::lock_guard<std::mutex> lock(log_mutex);
  const std::string what = "partition '" + name + "': instance for new shapes";
  const std::string verb = std::string(") ") + how + " in ";
  return std::count_if(log_lines.begin(), log_lines.end(), [&](const std::string& l) {
    return l.find(what) != std::string::npos && l.find(verb) != std::string::npos;
  });
}

// CpuOneDnn with derive_instances off: every instance lowered.
const Backend& onednn_lowering_only() {
  static const Backend b = [] {
    Backend made = create(onednn().api);
    configure(made, "derive_instances", "off");
    return made;
  }();
  return b;
}

void OneDnnPolymorphic::expect_layer_like_lowered(const std::string& name,
                                                  const std::vector<Env>& shapes) {
  ASSERT_TRUE(onednn_lowering_only().handle != nullptr) << onednn_lowering_only().error;
  View view(spec_, name, nullptr), all(spec_, name + "_lowered", nullptr);
  Part part(onednn(), view, true), lowered(onednn_lowering_only(), all, true);
  ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
  ASSERT_TRUE(lowered.ok()) << lowered.status.message << lowered.rejected;
  Context ctx(onednn(), part), lctx(onednn_lowering_only(), lowered);
  for (const Env& env : shapes) {
    Call a = make_call(spec_, view, env), b = make_call(spec_, all, env);
    ASSERT_TRUE(execute(onednn(), ctx, a).ok()) << str(env);
    ASSERT_TRUE(execute(onednn_lowering_only(), lctx, b).ok()) << str(env);
    for (size_t k = 0; k < a.outputs.size(); ++k)
      EXPECT_EQ(rel_diff(a.outputs[k], b.outputs[k]), 0.0) << str(env) << " output " << k;
    expect_matches(a.outputs, ref(env), env);
  }
}

// Runs `spec` at each of `envs`, in order, through a shape-polymorphic
// partition `name` and through one with derive_instances off, and expects
// their outputs equal bit for bit, and output k within tolerance[k] of
// CpuRef's for the same shapes (0: bit for bit). `prepare` may change a
// call's inputs (the same way for every runtime).
void expect_derived_like_lowered(const Spec& spec, const std::string& name,
                                 const std::vector<Env>& envs, const std::vector<double>& tolerance,
                                 const std::function<void(Call&)>& prepare = {}) {
  ASSERT_TRUE(onednn_lowering_only().handle != nullptr) << onednn_lowering_only().error;
  View poly(spec, name, nullptr), all(spec, name + "_lowered", nullptr);
  Part p(onednn(), poly, true), l(onednn_lowering_only(), all, true);
  ASSERT_TRUE(p.ok()) << p.status.message << p.rejected;
  ASSERT_TRUE(l.ok()) << l.status.message << l.rejected;
  Context ctx(onednn(), p), lctx(onednn_lowering_only(), l);
  for (const Env& e : envs) {
    View concrete(spec, name + "@" + str(e), &e);
    Part ref(cpuref(), concrete, false);
    ASSERT_TRUE(ref.ok()) << ref.status.message << ref.rejected;
    Context rctx(cpuref(), ref);
    Call call = make_call(spec, poly, e), want = make_call(spec, all, e);
    Call r = make_call(spec, concrete, e);
    if (prepare)
      for (Call* c : {&call, &want, &r}) prepare(*c);
    ASSERT_TRUE(execute(onednn(), ctx, call).ok()) << str(e);
    ASSERT_TRUE(execute(onednn_lowering_only(), lctx, want).ok()) << str(e);
    ASSERT_TRUE(execute(cpuref(), rctx, r).ok()) << str(e);
    for (size_t k = 0; k < call.outputs.size(); ++k) {
      EXPECT_EQ(rel_diff(call.outputs[k], want.outputs[k]), 0.0) << str(e) << " output " << k;
      EXPECT_LE(rel_diff(call.outputs[k], r.outputs[k]), tolerance.at(k))
          << str(e) << " output " << k;
    }
  }
}

// A decoder loop (one token at a time) meets a new cache length at every
// run. Once three lowered instances make a template (the first, at P = 1,
// has a dim of 1 where the others do not: P = 4 is lowered too), the rest
// are derived from it; every run equals, bit for bit, the partition with
// derive_instances off, which lowers each one, and the reference.
TEST_F(OneDnnPolymorphic, ADecoderLoopDerivesItsInstancesBitForBit) {
  ASSERT_TRUE(onednn_lowering_only().handle != nullptr) << onednn_lowering_only().error;
  View derived_view(spec_, "decoder_derive", nullptr);
  View lowered_view(spec_, "decoder_lower_all", nullptr);
  Part derived(onednn(), derived_view, true), lowered(onednn_lowering_only(), lowered_view, true);
  ASSERT_TRUE(derived.ok()) << derived.status.message << derived.rejected;
  ASSERT_TRUE(lowered.ok()) << lowered.status.message << lowered.rejected;
  Context dctx(onednn(), derived), lctx(onednn_lowering_only(), lowered);
  for (int64_t p = 1; p <= 40; ++p) {
    const Env env{1, 1, p};
    Call a = make_call(spec_, derived_view, env), b = make_call(spec_, lowered_view, env);
    ASSERT_TRUE(execute(onednn(), dctx, a).ok()) << str(env);
    ASSERT_TRUE(execute(onednn_lowering_only(), lctx, b).ok()) << str(env);
    for (size_t k = 0; k < a.outputs.size(); ++k)
      EXPECT_EQ(rel_diff(a.outputs[k], b.outputs[k]), 0.0) << str(env) << " output " << k;
    if (p == 5 || p == 17 || p == 40) expect_matches(a.outputs, ref(env), env);
  }
  EXPECT_EQ(made("decoder_derive", "lowered"), 4u);
  EXPECT_EQ(made("decoder_derive", "derived"), 36u);
  EXPECT_EQ(made("decoder_lower_all", "lowered"), 40u);
  EXPECT_EQ(made("decoder_lower_all", "derived"), 0u);
}

// An encoder meets a new sequence length at every run (the layer with an
// empty cache: P = 0, T the length). Its MatMuls by constant weights take
// their rows at run time (one oneDNN primitive for every length), and its
// LayerNormalizations and head transposes are the backend's loops: the
// first three lengths make a template, and every later length is derived
// from it. Every run matches the partition compiled for its shapes and
// CpuRef.
TEST_F(OneDnnPolymorphic, AnEncoderDerivesAnInstancePerLength) {
  View view(spec_, "encoder_lengths", nullptr);
  Part part(onednn(), view, true);
  ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
  Context ctx(onednn(), part);
  for (int64_t t = 2; t <= 13; ++t) {
    const Env env{1, t, 0};
    Call call = make_call(spec_, view, env);
    ASSERT_TRUE(execute(onednn(), ctx, call).ok()) << str(env);
    expect_matches(call.outputs, ref(env), env);
  }
  EXPECT_EQ(made("encoder_lengths", "lowered"), 3u);
  EXPECT_EQ(made("encoder_lengths", "derived"), 9u);
}

// Long sequences: the attention's scores (heads x length x length) pass
// 2^16 elements, the size above which a oneDNN kernel generated per shape
// used to take over the softmax; the backend's row loops take any size (in
// parallel over blocks of rows), so every length after the first three is
// derived, bit for bit the partition with derive_instances off, and within
// tolerance of CpuRef.
TEST_F(OneDnnPolymorphic, LongSequencesAreDerivedBitForBit) {
  const std::vector<Env> shapes = {{1, 150, 0}, {1, 180, 0}, {1, 210, 0}, {1, 301, 0},
                                   {1, 130, 0}, {1, 257, 0}, {2, 199, 0}};
  expect_layer_like_lowered("encoder_long", shapes);
  EXPECT_EQ(made("encoder_long", "lowered"), 4u);  // the last: a batch of 2 outside the template
  EXPECT_EQ(made("encoder_long", "derived"), 3u);
}

// A server's encoder meets a new batch and a new length at once. The rows
// of its MatMuls by constant weights are batch x length, a product of two
// dims of the key: the template takes it as one, so after three lowered
// instances every (batch, length) is derived (a batch of 1 aside: a dim of 1
// broadcasts), each run equal, bit for bit, to the partition with
// derive_instances off, and to the reference.
TEST_F(OneDnnPolymorphic, BatchesOfNewLengthsAreDerivedBitForBit) {
  const std::vector<Env> shapes = {{2, 3, 0}, {3, 5, 0}, {4, 2, 0}, {5, 7, 0}, {3, 9, 0},
                                   {2, 4, 0}, {6, 6, 0}, {1, 5, 0}, {4, 11, 0}};
  expect_layer_like_lowered("encoder_batches", shapes);
  EXPECT_EQ(made("encoder_batches", "lowered"), 4u);
  EXPECT_EQ(made("encoder_batches", "derived"), 5u);
}

// A server's requests come as single sequences and as batches of them. A
// batch of one has a dim of 1 (which broadcasts) where a larger batch does
// not, so the two make templates of their own: once each has one, new
// lengths of either are derived, however they alternate, and shapes
// derived before run again as they were (the context keeps them), each run
// equal, bit for bit, to the partition with derive_instances off, and to
// the reference.
TEST_F(OneDnnPolymorphic, SinglesAndBatchesAlternatingAreBothDerived) {
  const std::vector<Env> shapes = {{1, 4, 0},  {1, 5, 0}, {1, 6, 0}, {2, 3, 0},  {3, 5, 0},
                                   {4, 7, 0},  {1, 9, 0}, {3, 9, 0}, {1, 11, 0}, {2, 6, 0},
                                   {1, 12, 0}, {5, 4, 0}, {1, 9, 0}, {3, 9, 0}};
  expect_layer_like_lowered("encoder_mixed", shapes);
  EXPECT_EQ(made("encoder_mixed", "lowered"), 6u);
  EXPECT_EQ(made("encoder_mixed", "derived"), 6u);  // the last two run as derived before
}

// A transformer quantized dynamically (ONNX Runtime's quantize_dynamic):
// DynamicQuantizeLinear, MatMulInteger, Cast, and a Mul by the product of the
// scales, over rows that are batch x length. The product's rows are a
// runtime dim and the quantization one of the backend's loops, so after
// three lowered instances the rest are derived, each run equal, bit for
// bit, to the partition with derive_instances off, and to CpuRef's.
TEST_F(OneDnnPolymorphic, DynamicallyQuantizedProductsAreDerivedBitForBit) {
  Spec s;
  constexpr int64_t kK = 32, kN = 24;
  auto rows = [](int64_t n) { return [n](const Env& e) { return Dims{e.B, e.T, n}; }; };
  auto scalar = [](const Env&) { return Dims{}; };
  const int x = s.input("x", rows(kK));
  const int w = s.int8_constant("w", {kK, kN});
  const int w_scale = s.constant("w_scale", {}, 0.01f, 0.02f);
  const int xq = s.value("xq", rows(kK)), xs = s.value("xs", scalar), xz = s.value("xz", scalar);
  s.values[xq].dtype = s.values[xz].dtype = BP_DTYPE_UINT8;
  const int acc = s.value("acc", rows(kN));
  s.values[acc].dtype = BP_DTYPE_INT32;
  const int accf = s.value("accf", rows(kN)), scale = s.value("scale", scalar);
  const int y = s.value("y", rows(kN));
  s.node("DynamicQuantizeLinear", "quantize", {x}, {xq, xs, xz});
  s.node("MatMulInteger", "product", {xq, w, xz}, {acc});
  s.node("Cast", "to_float", {acc}, {accf}, {int_attr("to", BP_DTYPE_FLOAT32)});
  s.node("Mul", "scales", {xs, w_scale}, {scale});
  s.node("Mul", "dequantize", {accf, scale}, {y});
  s.output(y);
  expect_derived_like_lowered(s, "dynamic_int8",
                              {{1, 2, 0},
                               {1, 3, 0},
                               {1, 4, 0},
                               {1, 7, 0},
                               {1, 12, 0},
                               {2, 5, 0},
                               {3, 6, 0},
                               {4, 3, 0},
                               {5, 9, 0},
                               {2, 2, 0}},
                              {1e-5});
  // T = 2, 3, 4 at B = 1, then the first batch of two and two more after it.
  EXPECT_EQ(made("dynamic_int8", "lowered"), 6u);
  EXPECT_EQ(made("dynamic_int8", "derived"), 4u);
}

// A 4-bit LLM's first layer: token ids gathered from a 4-bit embedding table
// (GatherBlockQuantized) and multiplied by 4-bit weights (MatMulNBits), both
// read where the host holds them. After the first lowered instances the new
// lengths are derived, each run equal, bit for bit, to the partition with
// derive_instances off, and within tolerance of CpuRef.
TEST_F(OneDnnPolymorphic, FourBitEmbeddingsAndProductsAreDerivedBitForBit) {
  Spec s;
  constexpr int64_t kRows = 50, kD = 64, kN = 24, kBlock = 32, kBlocks = kD / kBlock;
  const int ids = s.input("ids", [](const Env& e) { return Dims{e.B, e.T}; });
  s.values[ids].dtype = BP_DTYPE_INT64;
  const int table = s.uint8_constant("table", {kRows, kD / 2});
  const int table_scales = s.constant("table_scales", {kRows, kBlocks}, 0.01f, 0.02f);
  const int table_zeros = s.uint8_constant("table_zeros", {kRows, (kBlocks + 1) / 2});
  const int w = s.uint8_constant("w", {kN, kBlocks, kBlock / 2});
  const int w_scales = s.constant("w_scales", {kN * kBlocks}, 0.01f, 0.02f);
  const int embedded = s.value("embedded", [](const Env& e) { return Dims{e.B, e.T, kD}; });
  const int y = s.value("y", [](const Env& e) { return Dims{e.B, e.T, kN}; });
  s.node("GatherBlockQuantized", "embed", {table, ids, table_scales, table_zeros}, {embedded},
         {int_attr("block_size", kBlock), int_attr("bits", 4)});
  s.nodes.back().domain = "com.microsoft";
  s.node(
      "MatMulNBits", "project", {embedded, w, w_scales}, {y},
      {int_attr("K", kD), int_attr("N", kN), int_attr("bits", 4), int_attr("block_size", kBlock)});
  s.nodes.back().domain = "com.microsoft";
  s.output(y);
  // Token ids in [-rows, rows) (negative ones count from the end).
  auto token_ids = [&](Call& c) {
    Tensor t(DType::kInt64, c.inputs[0].shape());
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data_as<int64_t>()[i] = (i * 37 + 11) % (2 * kRows) - kRows;
    c.inputs[0] = t;
  };
  expect_derived_like_lowered(
      s, "four_bit",
      {{1, 2, 0}, {1, 3, 0}, {1, 4, 0}, {1, 7, 0}, {1, 12, 0}, {1, 5, 0}, {2, 5, 0}, {3, 6, 0}},
      {1e-5}, token_ids);
  // T = 2, 3, 4 at B = 1 lowered, then 7, 12 and 5 derived; the first batches
  // of two and of three are lowered (no template covers a new batch yet).
  EXPECT_EQ(made("four_bit", "lowered"), 5u);
  EXPECT_EQ(made("four_bit", "derived"), 3u);
}

// A QDQ model quantizes and dequantizes every activation between float
// operators (x -> QuantizeLinear -> DequantizeLinear -> Softmax). The pair
// runs as one of the backend's loops over the floats, which takes any dims:
// after three lowered instances the rest are derived, each run equal, bit
// for bit, to the partition with derive_instances off, and the pair's
// result to CpuRef's.
TEST_F(OneDnnPolymorphic, QuantizeDequantizePairsAreDerivedBitForBit) {
  Spec s;
  auto rows = [](const Env& e) { return Dims{e.B, e.T, 16}; };
  const int x = s.input("x", rows);
  const int scale = s.constant("scale", {}, 0.02f, 0.03f);
  const int zero = s.int8_scalar("zero", 3);
  const int q = s.value("q", rows), dq = s.value("dq", rows), y = s.value("y", rows);
  s.values[q].dtype = BP_DTYPE_INT8;
  s.node("QuantizeLinear", "quantize", {x, scale, zero}, {q});
  s.node("DequantizeLinear", "dequantize", {q, scale, zero}, {dq});
  s.node("Softmax", "softmax", {dq}, {y}, {int_attr("axis", -1)});
  s.output(dq);
  s.output(y);
  // Values far outside the quantized range too: they saturate.
  auto wide = [](Call& c) {
    for (int64_t i = 0; i < c.inputs[0].numel(); i += 7) c.inputs[0].data_as<float>()[i] *= 20;
  };
  expect_derived_like_lowered(s, "qdq_pair",
                              {{1, 2, 0}, {1, 3, 0}, {1, 5, 0}, {1, 9, 0}, {1, 40, 0}, {1, 4, 0}},
                              {0.0, 1e-6}, wide);
  EXPECT_EQ(made("qdq_pair", "lowered"), 3u);
  EXPECT_EQ(made("qdq_pair", "derived"), 3u);
}

// A statically quantized (QDQ) transformer layer: an int8 MatMul by
// constant weights over rows that are batch x length, an int8 residual Add,
// and a LayerNormalization and GELU that the quantizer split into their
// operators (ReduceMean, Sub, Pow, Sqrt, Div, Erf). The product's rows are a
// runtime dim, and the quantizations, the Add, the means, the elementwise
// steps and Erf are loops of the backend's, so after three lowered instances
// the rest are derived, each run equal, bit for bit, to the partition with
// derive_instances off; the residual sum is within a quantization step of
// CpuRef's.
TEST_F(OneDnnPolymorphic, AStaticallyQuantizedLayerIsDerivedBitForBit) {
  Spec s;
  auto rows = [](const Env& e) { return Dims{e.B, e.T, 16}; };
  auto means = [](const Env& e) { return Dims{e.B, e.T, 1}; };
  auto scalar = [&s](const std::string& name, float v) { return s.constant(name, {}, v, v); };
  auto int8 = [&s](const std::string& name, std::function<Dims(const Env&)> shape) {
    const int v = s.value(name, std::move(shape));
    s.values[v].dtype = BP_DTYPE_INT8;
    return v;
  };
  const int x = s.input("x", rows);
  const int sx = scalar("sx", 0.02f), sy = scalar("sy", 0.05f), sa = scalar("sa", 0.05f);
  const int sw = scalar("sw", 0.01f), eps = scalar("eps", 1e-5f), two = scalar("two", 2.f);
  const int zx = s.int8_scalar("zx", 3), zy = s.int8_scalar("zy", -2), za = s.int8_scalar("za", 1);
  const int zw = s.int8_scalar("zw", 0);
  const int w = s.int8_constant("w", {16, 16});
  const int xq = int8("xq", rows), yq = int8("yq", rows), aq = int8("aq", rows);
  const int xd = s.value("xd", rows), xr = s.value("xr", rows), wd = s.value("wd", [](const Env&) {
    return Dims{16, 16};
  });
  const int y = s.value("y", rows), yd = s.value("yd", rows), a = s.value("a", rows);
  const int ad = s.value("ad", rows), m = s.value("m", means), c = s.value("c", rows);
  const int c2 = s.value("c2", rows), v = s.value("v", means), ve = s.value("ve", means);
  const int sd = s.value("sd", means), n = s.value("n", rows), e = s.value("e", rows);
  s.node("QuantizeLinear", "quantize_x", {x, sx, zx}, {xq});
  s.node("DequantizeLinear", "dequantize_x", {xq, sx, zx}, {xd});
  s.node("DequantizeLinear", "dequantize_w", {w, sw, zw}, {wd});
  s.node("MatMul", "product", {xd, wd}, {y});
  s.node("QuantizeLinear", "quantize_y", {y, sy, zy}, {yq});
  s.node("DequantizeLinear", "dequantize_y", {yq, sy, zy}, {yd});
  s.node("DequantizeLinear", "dequantize_residual", {xq, sx, zx}, {xr});
  s.node("Add", "residual", {yd, xr}, {a});
  s.node("QuantizeLinear", "quantize_sum", {a, sa, za}, {aq});
  s.node("DequantizeLinear", "dequantize_sum", {aq, sa, za}, {ad});
  const std::vector<Attr> last = {ints_attr("axes", {-1})};
  s.node("ReduceMean", "mean", {ad}, {m}, last);
  s.node("Sub", "centre", {ad, m}, {c});
  s.node("Pow", "square", {c, two}, {c2});
  s.node("ReduceMean", "variance", {c2}, {v}, last);
  s.node("Add", "plus_eps", {v, eps}, {ve});
  s.node("Sqrt", "deviation", {ve}, {sd});
  s.node("Div", "normalise", {c, sd}, {n});
  s.node("Erf", "erf", {n}, {e});
  s.output(ad);
  s.output(e);
  expect_derived_like_lowered(s, "qdq_layer",
                              {{1, 2, 0}, {1, 3, 0}, {1, 5, 0}, {1, 9, 0}, {1, 40, 0}, {1, 4, 0}},
                              {0.05, 0.05});
  EXPECT_EQ(made("qdq_layer", "lowered"), 3u);
  EXPECT_EQ(made("qdq_layer", "derived"), 3u);
}

// A decoder exported from a Hugging Face model takes an attention mask [B,
// S] that grows by one at every token and turns it into a bias, (1 - mask)
// * -10000: a Sub and a Mul by constant scalars, each one linear step over
// the mask. Small, they are a loop that takes any shape, so the loop's
// instances are derived after three lowered; each run equals, bit for bit,
// the partition with derive_instances off, and CpuRef's.
TEST_F(OneDnnPolymorphic, AGrowingAttentionMaskIsDerivedBitForBit) {
  Spec s;
  auto mask_shape = [](const Env& e) { return Dims{e.B, 1, 1, e.P}; };
  const int mask = s.input("mask", mask_shape);
  const int one = s.constant("one", {}, 1.f, 1.f), big = s.constant("big", {}, -1e4f, -1e4f);
  const int open = s.value("open", mask_shape), bias = s.value("bias", mask_shape);
  s.node("Sub", "invert", {one, mask}, {open});
  s.node("Mul", "scale", {open, big}, {bias});
  s.output(bias);
  std::vector<Env> lengths;
  for (int64_t len = 2; len <= 12; ++len) lengths.push_back({2, 1, len});
  expect_derived_like_lowered(s, "mask_bias", lengths, {1e-6});
  EXPECT_EQ(made("mask_bias", "lowered"), 3u);
  EXPECT_EQ(made("mask_bias", "derived"), 8u);
}

// Shapes a template was not made for are lowered: another batch, another
// number of new tokens, a cache of one (a dim of 1 broadcasts). The template
// then still serves the decoder loop's next length.
TEST_F(OneDnnPolymorphic, ShapesOutsideTheTemplateAreLowered) {
  View view(spec_, "decoder_outside", nullptr);
  Part part(onednn(), view, true);
  ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
  Context ctx(onednn(), part);
  auto run = [&](const Env& env) {
    Call call = make_call(spec_, view, env);
    ASSERT_TRUE(execute(onednn(), ctx, call).ok()) << str(env);
    expect_matches(call.outputs, ref(env), env);
  };
  for (int64_t p = 2; p <= 6; ++p) run({1, 1, p});
  EXPECT_EQ(made("decoder_outside", "lowered"), 3u);
  EXPECT_EQ(made("decoder_outside", "derived"), 2u);
  for (const Env& env : {Env{2, 1, 7}, Env{1, 1, 1}, Env{1, 3, 7}}) run(env);
  EXPECT_EQ(made("decoder_outside", "lowered"), 6u);
  run({1, 1, 8});
  EXPECT_EQ(made("decoder_outside", "derived"), 3u);
}

// Shapes in a seeded random order: runs of decoder steps (P one longer each
// time) broken by other batch sizes and token counts, caches of one, jumps
// back and forth. Whatever each instance is made from, every run equals the
// partition with derive_instances off, bit for bit.
TEST_F(OneDnnPolymorphic, RandomShapeSequencesMatchTheLoweringBitForBit) {
  ASSERT_TRUE(onednn_lowering_only().handle != nullptr) << onednn_lowering_only().error;
  View view(spec_, "decoder_random", nullptr), all(spec_, "decoder_random_lowered", nullptr);
  Part part(onednn(), view, true), lowered(onednn_lowering_only(), all, true);
  ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
  ASSERT_TRUE(lowered.ok()) << lowered.status.message << lowered.rejected;
  Context ctx(onednn(), part), lctx(onednn_lowering_only(), lowered);
  std::mt19937 rng(2026);
  Env env{1, 1, 1};
  for (int i = 0; i < 160; ++i) {
    const uint32_t r = rng() % 10;
    if (r < 6) env.P += 1;                                      // a decoder step
    else if (r == 6) env = {1 + int64_t(rng() % 3), 1, env.P};  // another batch
    else if (r == 7) env.T = 1 + int64_t(rng() % 3);            // more new tokens
    else if (r == 8) env.P = 1 + int64_t(rng() % 40);           // a jump
    else env = {1, 1, env.P + 1};
    Call a = make_call(spec_, view, env), b = make_call(spec_, all, env);
    ASSERT_TRUE(execute(onednn(), ctx, a).ok()) << str(env);
    ASSERT_TRUE(execute(onednn_lowering_only(), lctx, b).ok()) << str(env);
    for (size_t k = 0; k < a.outputs.size(); ++k)
      ASSERT_EQ(rel_diff(a.outputs[k], b.outputs[k]), 0.0)
          << "run " << i << " " << str(env) << " output " << k;
  }
  EXPECT_GT(made("decoder_random", "derived"), 20u);
}

// Two dims that were equal in the three lowered instances (the cache and the
// new tokens, both 2, then 3, then 4) may be one quantity or two: a
// description that took one of them follows the key only while they stay
// equal. At P = 3, T = 5 the instance is lowered; every run equals the
// partition with derive_instances off, bit for bit (b's Softmax taking P for
// T would run over 3 of its 5 rows).
TEST_F(OneDnnPolymorphic, DimsEqualOnlySoFarAreNotTakenForOne) {
  ASSERT_TRUE(onednn_lowering_only().handle != nullptr) << onednn_lowering_only().error;
  Spec s;
  constexpr int64_t kC = 8;
  const int a = s.input("a", [](const Env& e) { return Dims{e.B, e.P, kC}; });
  const int b = s.input("b", [](const Env& e) { return Dims{e.B, e.T, kC}; });
  const int y = s.value("y", [](const Env& e) { return Dims{e.B, e.P, kC}; });
  const int z = s.value("z", [](const Env& e) { return Dims{e.B, e.T, kC}; });
  s.node("Softmax", "softmax_a", {a}, {y}, {int_attr("axis", -1)});
  s.node("Softmax", "softmax_b", {b}, {z}, {int_attr("axis", -1)});
  s.output(y);
  s.output(z);
  View poly(s, "equal_so_far", nullptr), all(s, "equal_so_far_lowered", nullptr);
  Part p(onednn(), poly, true), q(onednn_lowering_only(), all, true);
  ASSERT_TRUE(p.ok()) << p.status.message << p.rejected;
  ASSERT_TRUE(q.ok()) << q.status.message << q.rejected;
  Context ctx(onednn(), p), qctx(onednn_lowering_only(), q);
  for (const Env& e : {Env{1, 2, 2}, Env{1, 3, 3}, Env{1, 4, 4}, Env{1, 5, 3}, Env{1, 6, 6}}) {
    Call call = make_call(s, poly, e), want = make_call(s, all, e);
    ASSERT_TRUE(execute(onednn(), ctx, call).ok()) << str(e);
    ASSERT_TRUE(execute(onednn_lowering_only(), qctx, want).ok()) << str(e);
    for (size_t k = 0; k < call.outputs.size(); ++k)
      EXPECT_EQ(rel_diff(call.outputs[k], want.outputs[k]), 0.0) << str(e) << " output " << k;
  }
  EXPECT_EQ(made("equal_so_far", "lowered"), 4u);
  EXPECT_EQ(made("equal_so_far", "derived"), 1u);
}

// Four threads, each on its own context, run decoder loops at once (one
// token at a time, each thread from its own first length): the lowered
// instances and the template are the partition's, each context derives its
// own instance in place, and every run is right.
TEST_F(OneDnnPolymorphic, FourThreadsDeriveTheirOwnDecoderLoops) {
  View view(spec_, "decoder_mt_loop", nullptr);
  Part part(onednn(), view, true);
  ASSERT_TRUE(part.ok()) << part.status.message << part.rejected;
  std::vector<std::vector<Env>> loops(4);
  for (size_t t = 0; t < loops.size(); ++t)
    for (int64_t p = 2 + 3 * static_cast<int64_t>(t); p < 30; ++p) loops[t].push_back({1, 1, p});
  run_on_threads(part, view, loops, 2);
  EXPECT_GT(made("decoder_mt_loop", "derived"), 40u);
}

// ---- what cannot be polymorphic ------------------------------------------------------

// A ReduceMean whose axes were constant for one set of shapes only is a
// runtime input in the polymorphic view: the lowering needs the axes, so the
// compile is BP_STATUS_UNSUPPORTED (the host then compiles concrete views),
// and the concrete view compiles.
TEST_F(OneDnnPolymorphic, ConstantTheLoweringNeedsMadeARuntimeInputIsUnsupported) {
  Spec s;
  const int x = s.input("x", [](const Env& e) { return Dims{e.B, e.T}; });
  const int axes = s.shape_input("axes", [](const Env&) { return std::vector<int64_t>{1}; });
  const int y = s.value("y", [](const Env& e) { return Dims{e.B, 1}; });
  s.node("ReduceMean", "mean", {x, axes}, {y});
  s.nodes.back().opset = 18;
  s.output(y);
  View poly(s, "reduce", nullptr);
  Part p(onednn(), poly, true);
  EXPECT_EQ(p.status.code, BP_STATUS_UNSUPPORTED);
  EXPECT_NE(p.status.message.find("node 'mean' (ReduceMean): the axes must be a constant"),
            std::string::npos)
      << p.status.message;
  const Env env{3, 5, 0};
  View concrete(s, "reduce_concrete", &env);
  Part c(onednn(), concrete, false);
  EXPECT_TRUE(c.ok()) << c.status.message << c.rejected;
}

// oneDNN's binary broadcasts only its second operand: Sub(a[C], b[R,C])
// runs at R = 1 and not at R = 3, which a compile without shapes cannot
// know. The run at R = 3 fails with BP_STATUS_UNSUPPORTED naming the node;
// the partition keeps running R = 1.
TEST_F(OneDnnPolymorphic, ShapesTheLoweringCannotRunFailThatRunOnly) {
  Spec s;
  const int a = s.input("a", [](const Env& e) { return Dims{e.T}; });
  const int b = s.input("b", [](const Env& e) { return Dims{e.B, e.T}; });
  const int y = s.value("y", [](const Env& e) { return Dims{e.B, e.T}; });
  s.node("Sub", "a_minus_b", {a, b}, {y});
  s.output(y);
  View poly(s, "sub", nullptr);
  Part p(onednn(), poly, true);
  ASSERT_TRUE(p.ok()) << p.status.message << p.rejected;
  Context ctx(onednn(), p);
  auto run = [&](const Env& e) {
    Call call = make_call(s, poly, e);
    Outcome o = execute(onednn(), ctx, call);
    if (o.ok()) {
      const float* pa = call.inputs[0].data_as<float>();
      const float* pb = call.inputs[1].data_as<float>();
      const float* py = call.outputs[0].data_as<float>();
      for (int64_t i = 0; i < e.B * e.T; ++i) EXPECT_EQ(py[i], pa[i % e.T] - pb[i]);
    }
    return o;
  };
  EXPECT_TRUE(run({1, 7, 0}).ok());
  Outcome o = run({3, 7, 0});
  EXPECT_EQ(o.code, BP_STATUS_UNSUPPORTED);
  EXPECT_NE(o.message.find("cannot run at these shapes (a [7], b [3,7])"), std::string::npos)
      << o.message;
  EXPECT_NE(o.message.find("node 'a_minus_b' (Sub)"), std::string::npos) << o.message;
  EXPECT_TRUE(run({1, 7, 0}).ok());
  EXPECT_TRUE(run({1, 2, 0}).ok());
}

}  // namespace
}  // namespace backplane
