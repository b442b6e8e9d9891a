// CpuRef compiled shape-polymorphic (API 1.2), driven through its C function
// table the way the host drives it: a partition compiled once with
// bp_compile_options_t.shape_polymorphic from a view whose non-constant dims
// are -1, run by execute_shaped at many shapes, each output compared bit for
// bit with the same partition compiled concretely for that shape (both are
// CpuRef: the same kernels at the same shapes must give the same bits).
//
// The views are built as the host builds them. For one set of input shapes,
// an ir::Graph holds every shape-dependent value (a Reshape target, a Slice
// start) as a constant; shapes are inferred; GraphView::build gives the
// concrete view. The polymorphic view is a copy of it with every non-constant
// dim -1 and those shape-dependent constants turned into view inputs, whose
// bytes each run passes like any input.
//
// This binary replaces the global operator new/delete to count allocations
// (the steady-state test): counting only, behaviour unchanged.
#include "core/tensor_data_map.hpp"
#include "ir/graph.hpp"
#include "partition/graph_view.hpp"
#include "pipeline/constant_folding.hpp"
#include "registry/byte_writer.hpp"
#include "registry/host_api.hpp"
#include "registry/node_report.hpp"
#include "support/expect_error.hpp"

#include <backplane/backend_abi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

// --- allocation counting -----------------------------------------------------

// The replacements pair operator new with malloc and operator delete with
// free, on purpose; GCC flags each inlined delete as a mismatch.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<long> g_news{0};
void* counted(size_t size, size_t align = 0) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (size == 0) size = 1;
  void* p = align > alignof(std::max_align_t)
                ? std::aligned_alloc(align, (size + align - 1) / align * align)
                : std::malloc(size);
  return p;
}
}  // namespace

void* operator new(size_t n) {
  if (void* p = counted(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return counted(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return counted(n); }
void* operator new(size_t n, std::align_val_t a) {
  if (void* p = counted(n, static_cast<size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) { return operator new(n, a); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted(n, static_cast<size_t>(a));
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted(n, static_cast<size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }

namespace backplane {
namespace cpuref {
const bp_backend_api_t* static_table();
}  // namespace cpuref

namespace {

using Dims = std::vector<int64_t>;

// --- the C table, with statuses turned into values -----------------------------

struct Outcome {
  bp_status_code_t code = BP_STATUS_OK;
  std::string text;
  bool ok() const { return code == BP_STATUS_OK; }
  const std::string& message() const { return text; }
};

Outcome take(bp_status_t* s) {
  if (s == nullptr) return {};
  const bp_host_api_t* host = host_api();
  Outcome o{host->status_code(s), host->status_message(s)};
  host->status_release(s);
  return o;
}

using CompiledPtr = std::unique_ptr<bp_compiled_t, void (*)(bp_compiled_t*)>;
using ContextPtr = std::unique_ptr<bp_exec_context_t, void (*)(bp_exec_context_t*)>;

// One CpuRef instance, created through its function table.
class CpuRef {
 public:
  CpuRef() : api_(cpuref::static_table()) {
    Outcome o = take(api_->create(host_api(), BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR, &b_));
    EXPECT_TRUE(o.ok()) << o.text;
  }
  ~CpuRef() { api_->destroy(b_); }
  CpuRef(const CpuRef&) = delete;
  CpuRef& operator=(const CpuRef&) = delete;

  const bp_backend_api_t* api() const { return api_; }
  bp_backend_t* instance() const { return b_; }

  static bp_compile_options_t options(bool polymorphic) {
    bp_compile_options_t o{};
    o.struct_size = sizeof(o);
    o.shape_polymorphic = polymorphic;
    return o;
  }
  Outcome compile(const bp_graph_view_t& view, bool polymorphic, CompiledPtr* out) const {
    const bp_compile_options_t o = options(polymorphic);
    bp_node_report report(view.num_nodes);
    bp_compiled_t* c = nullptr;
    Outcome s = take(api_->compile(b_, &view, &o, &report, &c));
    *out = CompiledPtr(c, api_->compiled_destroy);
    return s;
  }
  CompiledPtr compile(const bp_graph_view_t& view, bool polymorphic) const {
    CompiledPtr c(nullptr, api_->compiled_destroy);
    Outcome s = compile(view, polymorphic, &c);
    EXPECT_TRUE(s.ok()) << s.text;
    return c;
  }
  ContextPtr context(bp_compiled_t* compiled) const {
    bp_exec_context_t* ctx = nullptr;
    Outcome s = take(api_->context_create(compiled, &ctx));
    EXPECT_TRUE(s.ok()) << s.text;
    return ContextPtr(ctx, api_->context_destroy);
  }

 private:
  const bp_backend_api_t* api_;
  bp_backend_t* b_ = nullptr;
};

// --- building graphs -----------------------------------------------------------

// Writes an ir::Graph node by node, values by name. Weights are seeded, so two
// graphs built alike hold the same bytes.
class GraphMaker {
 public:
  explicit GraphMaker(int64_t opset) {
    g.name = "g";
    g.opsets[""] = opset;
  }
  void input(const std::string& name, const Dims& shape) {
    ir::Value v;
    v.name = name;
    v.dtype = DType::kFloat32;
    v.shape = shape;
    v.has_shape = true;
    v.dim_params.assign(shape.size(), "");
    g.inputs.push_back(g.add_value(v));
  }
  void weight(const std::string& name, const Dims& shape, unsigned seed) {
    Tensor t(DType::kFloat32, shape);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = dist(rng);
    g.add_constant(name, std::move(t));
  }
  void ints(const std::string& name, const Dims& values, bool scalar = false) {
    Tensor t(DType::kInt64, scalar ? Dims{} : Dims{static_cast<int64_t>(values.size())});
    std::copy(values.begin(), values.end(), t.data_as<int64_t>());
    g.add_constant(name, std::move(t));
  }
  void scalar(const std::string& name, float value) {
    Tensor t(DType::kFloat32, {});
    *t.data_as<float>() = value;
    g.add_constant(name, std::move(t));
  }
  // One node; attributes are given complete.
  void node(const std::string& op, const std::vector<std::string>& in,
            const std::vector<std::string>& out, std::vector<ir::Attribute> attrs = {}) {
    ir::Node n;
    n.name = op + "_" + std::to_string(g.nodes.size());
    n.op_type = op;
    for (const std::string& name : in) n.inputs.push_back(g.find_value(name));
    for (const std::string& name : out) {
      ir::Value v;
      v.name = name;
      n.outputs.push_back(g.add_value(v));
    }
    n.attributes = std::move(attrs);
    g.nodes.push_back(std::move(n));
  }
  void output(const std::string& name) { g.outputs.push_back(g.find_value(name)); }

  ir::Graph g;
};

ir::Attribute attr_int(const std::string& name, int64_t v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kInt;
  a.i = v;
  return a;
}
ir::Attribute attr_ints(const std::string& name, Dims v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kInts;
  a.ints = std::move(v);
  return a;
}
ir::Attribute attr_float(const std::string& name, float v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kFloat;
  a.f = v;
  return a;
}
ir::Attribute attr_tensor(const std::string& name, Tensor t) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kTensor;
  a.t = std::move(t);
  return a;
}

// A partition at one set of input shapes: its graph (shapes inferred, nothing
// folded away) and the concrete view the host would give. `shape_data` names
// the constants that hold for this set of shapes only.
struct Concrete {
  ir::Graph graph;
  std::unique_ptr<TensorDataMap> weights;
  std::unique_ptr<GraphView> view;
  std::vector<std::string> shape_data;
  const bp_graph_view_t& v() const { return *view->get(); }
};

using Builder = std::function<void(GraphMaker&)>;

// Infers shapes on one copy (which folds constant subgraphs away) and copies
// them into another, so every node stays in the view, as when the host
// partitions before folding what only one signature makes constant.
std::unique_ptr<Concrete> concrete(const Builder& build, std::vector<std::string> shape_data) {
  GraphMaker inferred(17), kept(17);
  build(inferred);
  build(kept);
  Status s = ir::infer_shapes(inferred.g, {}, infer_options());  // folds on CpuRef
  EXPECT_TRUE(s.ok()) << s.message();
  auto c = std::make_unique<Concrete>();
  c->graph = std::move(kept.g);
  for (ir::Value& v : c->graph.values) {
    if (v.is_constant()) continue;
    const int id = inferred.g.find_value(v.name);
    EXPECT_GE(id, 0) << v.name;
    if (id < 0) continue;
    v.dtype = inferred.g.values[id].dtype;
    v.shape = inferred.g.values[id].shape;
    v.has_shape = true;
    v.dim_params.assign(v.shape.size(), "");
  }
  s = c->graph.topo_sort();
  EXPECT_TRUE(s.ok()) << s.message();
  c->weights = std::make_unique<TensorDataMap>(&c->graph.constants);
  std::vector<int> nodes(c->graph.nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) nodes[n] = static_cast<int>(n);
  c->view = GraphView::build(c->graph, nodes, c->weights.get(), "block/partition_0");
  c->shape_data = std::move(shape_data);
  return c;
}

// What the host gives a backend with BP_BACKEND_FLAG_SHAPE_POLYMORPHIC: the
// concrete view's arrays with every non-constant dim -1, and the constants of
// `shape_data` turned into view inputs (after the concrete view's inputs).
struct Polymorphic {
  bp_graph_view_t view{};
  std::vector<bp_value_t> values;
  std::deque<Dims> shapes;
  std::vector<bp_node_t> nodes;
  std::vector<int32_t> inputs;
};

std::unique_ptr<Polymorphic> polymorphic(const Concrete& c) {
  auto p = std::make_unique<Polymorphic>();
  const bp_graph_view_t& v = c.v();
  p->view = v;
  p->values.assign(v.values, v.values + v.num_values);
  p->nodes.assign(v.nodes, v.nodes + v.num_nodes);
  p->inputs.assign(v.inputs, v.inputs + v.num_inputs);
  for (size_t i = 0; i < p->values.size(); ++i) {
    bp_value_t& value = p->values[i];
    const bool shape_data =
        std::find(c.shape_data.begin(), c.shape_data.end(), value.name) != c.shape_data.end();
    if (shape_data) {
      value.flags = BP_VALUE_VIEW_INPUT;
      value.data_key = nullptr;
      p->inputs.push_back(static_cast<int32_t>(i));
    }
    if ((value.flags & BP_VALUE_CONSTANT) == 0)
      value.shape = p->shapes.emplace_back(value.rank, -1).data();
  }
  p->view.values = p->values.data();
  p->view.nodes = p->nodes.data();
  p->view.inputs = p->inputs.data();
  p->view.num_inputs = p->inputs.size();
  return p;
}

// --- running -------------------------------------------------------------------

size_t bytes_of(const bp_value_t& v) {
  int64_t n = 1;
  for (size_t d = 0; d < v.rank; ++d) n *= v.shape[d];
  return static_cast<size_t>(n) * (v.dtype == BP_DTYPE_INT64 ? 8 : 4);
}

bp_tensor_t tensor_of(const bp_value_t& v, void* data) {
  return bp_tensor_t{sizeof(bp_tensor_t), v.dtype, v.rank, v.shape, data, bytes_of(v), 0};
}

// Everything one run needs, made ahead (so the run itself allocates nothing
// in the test either): input bytes (seeded per input), output buffers, and
// for execute_shaped the value shapes of the run.
struct Call {
  std::vector<std::vector<uint8_t>> in_bytes, out_bytes;
  std::vector<bp_tensor_t> inputs, outputs;
  std::vector<bp_shape_t> value_shapes;
  bp_execute_args_t args{};

  void finish() {
    args.struct_size = sizeof(args);
    args.num_inputs = inputs.size();
    args.inputs = inputs.data();
    args.num_outputs = outputs.size();
    args.outputs = outputs.data();
    args.num_values = value_shapes.size();
    args.value_shapes = value_shapes.data();
  }
  // Output buffers start filled with `fill`: calls compared with each other
  // use different fills, so an output left unwritten cannot compare equal.
  void add_output(const bp_value_t& v, uint8_t fill) {
    out_bytes.emplace_back(bytes_of(v), fill);
    outputs.push_back(tensor_of(v, out_bytes.back().data()));
  }
};

std::vector<uint8_t> seeded_bytes(const bp_value_t& v, unsigned seed) {
  std::vector<uint8_t> bytes(bytes_of(v));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    const float f = dist(rng);
    std::memcpy(bytes.data() + i, &f, 4);
  }
  return bytes;
}

// The call for the concrete partition of `c`: the view's inputs and outputs,
// value shapes the view's own.
Call concrete_call(const Concrete& c, unsigned seed, uint8_t fill = 0xAB) {
  Call call;
  const bp_graph_view_t& v = c.v();
  call.in_bytes.reserve(v.num_inputs);
  call.out_bytes.reserve(v.num_outputs);
  for (size_t k = 0; k < v.num_inputs; ++k) {
    call.in_bytes.push_back(seeded_bytes(v.values[v.inputs[k]], seed + static_cast<unsigned>(k)));
    call.inputs.push_back(tensor_of(v.values[v.inputs[k]], call.in_bytes.back().data()));
  }
  for (size_t k = 0; k < v.num_outputs; ++k) call.add_output(v.values[v.outputs[k]], fill);
  for (size_t i = 0; i < v.num_values; ++i)
    call.value_shapes.push_back({v.values[i].rank, v.values[i].shape});
  call.finish();
  return call;
}

// The call for the polymorphic partition `p` at the shapes of `c`: the same
// input bytes as concrete_call(c, seed), then the bytes of the shape data.
Call polymorphic_call(const Polymorphic& p, const Concrete& c, unsigned seed) {
  Call call;
  const bp_graph_view_t& v = c.v();
  EXPECT_EQ(v.num_values, p.view.num_values);
  for (size_t i = 0; i < v.num_values && i < p.view.num_values; ++i)
    EXPECT_STREQ(v.values[i].name, p.view.values[i].name) << "views disagree at value " << i;
  call.in_bytes.reserve(p.view.num_inputs);
  call.out_bytes.reserve(p.view.num_outputs);
  for (size_t k = 0; k < p.view.num_inputs; ++k) {
    const bp_value_t& value = v.values[p.view.inputs[k]];
    if (k < v.num_inputs) {
      call.in_bytes.push_back(seeded_bytes(value, seed + static_cast<unsigned>(k)));
    } else {
      const Tensor* t = c.graph.constant(c.graph.find_value(value.name));
      EXPECT_NE(t, nullptr) << value.name;
      const uint8_t* b = static_cast<const uint8_t*>(t->data());
      call.in_bytes.emplace_back(b, b + t->size_bytes());
    }
    call.inputs.push_back(tensor_of(value, call.in_bytes.back().data()));
  }
  for (size_t k = 0; k < v.num_outputs; ++k) call.add_output(v.values[v.outputs[k]], 0xCD);
  for (size_t i = 0; i < v.num_values; ++i)
    call.value_shapes.push_back({v.values[i].rank, v.values[i].shape});
  call.finish();
  return call;
}

Outcome execute(const CpuRef& ref, bp_exec_context_t* ctx, const Call& call) {
  return take(ref.api()->execute(ctx, call.inputs.size(), call.inputs.data(), call.outputs.size(),
                                 call.outputs.data()));
}
Outcome execute_shaped(const CpuRef& ref, bp_exec_context_t* ctx, const Call& call) {
  return take(ref.api()->execute_shaped(ctx, &call.args));
}

// Runs the concrete partition of `c` (compiled here) and returns its outputs.
std::vector<std::vector<uint8_t>> run_concrete(const CpuRef& ref, const Concrete& c,
                                               unsigned seed) {
  CompiledPtr compiled = ref.compile(c.v(), false);
  if (!compiled) return {};
  ContextPtr ctx = ref.context(compiled.get());
  Call call = concrete_call(c, seed);
  Outcome s = execute(ref, ctx.get(), call);
  EXPECT_TRUE(s.ok()) << s.text;
  return call.out_bytes;
}

void expect_same_outputs(const std::vector<std::vector<uint8_t>>& want, const Call& got,
                         const std::string& what) {
  ASSERT_EQ(want.size(), got.out_bytes.size()) << what;
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_TRUE(want[k] == got.out_bytes[k]) << what << ": output " << k << " differs";
}

// --- the partitions ------------------------------------------------------------

// One attention block with a residual and a layer norm, E = H * D:
//   q, k, v = x Wq + bq, x Wk, x Wv                       [B,S,E]
//   split into heads by Reshape to 'heads' = [B,S,H,D]   (shape data) and Transpose
//   p = Softmax(scale * q k^T), ctx = p v                 [B,H,S,D]
//   merged by Transpose and Reshape to [0,0,E]            (a constant for every shape)
//   y = LayerNorm(x + ctx Wo)                             [B,S,E]
//   pooled = ReduceMean(y, axis 1)                        [B,E]
//   tail = Slice(y, 'half' = [S/2] .. end, axis 1)        (shape data) [B,S-S/2,E]
constexpr int64_t kE = 8, kH = 2, kD = 4;

Builder attention_block(int64_t B, int64_t S) {
  return [=](GraphMaker& m) {
    m.input("x", {B, S, kE});
    m.weight("wq", {kE, kE}, 1);
    m.weight("bq", {kE}, 2);
    m.weight("wk", {kE, kE}, 3);
    m.weight("wv", {kE, kE}, 4);
    m.weight("wo", {kE, kE}, 5);
    m.weight("gamma", {kE}, 6);
    m.weight("beta", {kE}, 7);
    m.scalar("scale", 0.5f);
    m.ints("heads", {B, S, kH, kD});
    m.ints("merge", {0, 0, kE});
    m.ints("half", {S / 2});
    m.ints("end", {std::numeric_limits<int64_t>::max()});
    m.ints("seq_axis", {1});
    m.node("MatMul", {"x", "wq"}, {"q0"});
    m.node("Add", {"q0", "bq"}, {"q"});
    m.node("MatMul", {"x", "wk"}, {"k"});
    m.node("MatMul", {"x", "wv"}, {"v"});
    m.node("Reshape", {"q", "heads"}, {"qh"});
    m.node("Transpose", {"qh"}, {"qt"}, {attr_ints("perm", {0, 2, 1, 3})});
    m.node("Reshape", {"k", "heads"}, {"kh"});
    m.node("Transpose", {"kh"}, {"kt"}, {attr_ints("perm", {0, 2, 3, 1})});
    m.node("Reshape", {"v", "heads"}, {"vh"});
    m.node("Transpose", {"vh"}, {"vt"}, {attr_ints("perm", {0, 2, 1, 3})});
    m.node("MatMul", {"qt", "kt"}, {"scores"});
    m.node("Mul", {"scores", "scale"}, {"scaled"});
    m.node("Softmax", {"scaled"}, {"probs"}, {attr_int("axis", -1)});
    m.node("MatMul", {"probs", "vt"}, {"ctx"});
    m.node("Transpose", {"ctx"}, {"ctx_t"}, {attr_ints("perm", {0, 2, 1, 3})});
    m.node("Reshape", {"ctx_t", "merge"}, {"merged"});
    m.node("MatMul", {"merged", "wo"}, {"attn"});
    m.node("Add", {"x", "attn"}, {"res"});
    m.node("LayerNormalization", {"res", "gamma", "beta"}, {"y"},
           {attr_int("axis", -1), attr_float("epsilon", 1e-5f)});
    m.node("ReduceMean", {"y"}, {"pooled"}, {attr_ints("axes", {1}), attr_int("keepdims", 0)});
    m.node("Slice", {"y", "half", "end", "seq_axis"}, {"tail"});
    m.output("y");
    m.output("pooled");
    m.output("tail");
  };
}

std::unique_ptr<Concrete> attention(int64_t B, int64_t S) {
  return concrete(attention_block(B, S), {"heads", "half"});
}

// Ops whose kernels plan from an input's bytes, that input being shape data:
// Tile (repeats), Pad (pads), ConstantOfShape, Expand, Range (start), Slice
// (starts, ends), ReduceSum (axes, keepdims 0), Split (split), and a Reshape
// whose target is computed in the partition itself (Shape of a Transpose),
// so it is read from the run's own intermediate. `shift` moves the Slice
// window, the reduced axis and the Range start without changing any shape.
Builder shape_ops(int64_t N, int64_t M, int64_t shift) {
  return [=](GraphMaker& m) {
    m.input("x", {N, M});
    m.ints("reps", {2, M % 3 + 1});
    m.ints("pads", {0, N % 2 + 1, 1, 0});
    m.scalar("pad_value", 0.25f);
    m.ints("fill_shape", {N, 2});
    m.ints("expand_to", {2, N, M});
    m.ints("start", {N + shift}, true);
    m.ints("limit", {N + shift + M}, true);
    m.ints("delta", {2}, true);
    m.ints("s_starts", {shift});
    m.ints("s_ends", {shift + (N + 1) / 2});
    m.ints("s_axes", {0});
    m.ints("red_axes", {(N + M + shift) % 2});
    m.ints("split", {N / 2, N - N / 2});
    Tensor three(DType::kFloat32, {1});
    *three.data_as<float>() = 3.0f;
    m.node("Tile", {"x", "reps"}, {"tiled"});
    m.node("Pad", {"x", "pads", "pad_value"}, {"padded"});
    m.node("ConstantOfShape", {"fill_shape"}, {"filled"}, {attr_tensor("value", three)});
    m.node("Expand", {"x", "expand_to"}, {"expanded"});
    m.node("Range", {"start", "limit", "delta"}, {"range"});
    m.node("Slice", {"x", "s_starts", "s_ends", "s_axes"}, {"sliced"});
    m.node("ReduceSum", {"x", "red_axes"}, {"reduced"}, {attr_int("keepdims", 0)});
    m.node("Split", {"x", "split"}, {"part0", "part1"}, {attr_int("axis", 0)});
    m.node("Transpose", {"x"}, {"xt"});
    m.node("Shape", {"xt"}, {"xt_shape"});
    m.node("Reshape", {"x", "xt_shape"}, {"as_mn"});
    for (const char* out : {"tiled", "padded", "filled", "expanded", "range", "sliced", "reduced",
                            "part0", "part1", "as_mn"})
      m.output(out);
  };
}

std::unique_ptr<Concrete> shape_ops_at(int64_t N, int64_t M, int64_t shift = 0) {
  return concrete(shape_ops(N, M, shift), {"reps", "pads", "fill_shape", "expand_to", "start",
                                           "limit", "s_starts", "s_ends", "red_axes", "split"});
}

struct Shape2 {
  int64_t a, b;
};

// --- tests ---------------------------------------------------------------------

TEST(CpuRefPolymorphic, DeclaresShapePolymorphic) {
  CpuRef ref;
  bp_backend_info_t info{};
  info.struct_size = sizeof(info);
  ASSERT_TRUE(take(ref.api()->get_info(ref.instance(), &info)).ok());
  EXPECT_NE(info.flags & BP_BACKEND_FLAG_SHAPE_POLYMORPHIC, 0u);
  EXPECT_GE(ref.api()->api_minor, 2u);
  EXPECT_TRUE(BP_TABLE_HAS(ref.api(), execute_shaped));
}

// The block compiled once, run at 7 (batch, seq) shapes (one repeated, one
// with an empty Slice window edge: S = 1) on one context, each run equal bit
// for bit to the block compiled for that shape.
TEST(CpuRefPolymorphic, AttentionBlockCompiledOnceRunsAtEveryShape) {
  CpuRef ref;
  std::unique_ptr<Concrete> first = attention(2, 3);
  std::unique_ptr<Polymorphic> poly = polymorphic(*first);
  CompiledPtr compiled = ref.compile(poly->view, true);
  ASSERT_TRUE(compiled);
  ContextPtr ctx = ref.context(compiled.get());
  unsigned seed = 100;
  for (Shape2 s : {Shape2{2, 3}, Shape2{1, 1}, Shape2{1, 7}, Shape2{3, 5}, Shape2{2, 16},
                   Shape2{1, 7}, Shape2{4, 2}}) {
    const std::string what = "B=" + std::to_string(s.a) + " S=" + std::to_string(s.b);
    std::unique_ptr<Concrete> c = attention(s.a, s.b);
    Call call = polymorphic_call(*poly, *c, seed);
    Outcome o = execute_shaped(ref, ctx.get(), call);
    ASSERT_TRUE(o.ok()) << what << ": " << o.text;
    expect_same_outputs(run_concrete(ref, *c, seed), call, what);
    // Not vacuous: the tail really holds S - S/2 positions of y.
    EXPECT_EQ(call.outputs[2].shape[1], s.b - s.b / 2);
    ++seed;
  }
}

// The same on the shape ops, whose kernels read the shape data of each run,
// including a change of that data alone (same shapes, other Slice window,
// other reduced axis, other Range start).
TEST(CpuRefPolymorphic, KernelsReadShapeDataOfEachRun) {
  CpuRef ref;
  std::unique_ptr<Concrete> first = shape_ops_at(3, 4);
  std::unique_ptr<Polymorphic> poly = polymorphic(*first);
  CompiledPtr compiled = ref.compile(poly->view, true);
  ASSERT_TRUE(compiled);
  ContextPtr ctx = ref.context(compiled.get());
  struct Case {
    int64_t n, m, shift;
  };
  std::vector<std::vector<uint8_t>> previous;
  for (Case k : {Case{3, 4, 0}, Case{2, 5, 0}, Case{4, 4, 0}, Case{3, 3, 0}, Case{3, 3, 1},
                 Case{5, 1, 1}, Case{3, 4, 0}}) {
    const std::string what = "N=" + std::to_string(k.n) + " M=" + std::to_string(k.m) +
                             " shift=" + std::to_string(k.shift);
    std::unique_ptr<Concrete> c = shape_ops_at(k.n, k.m, k.shift);
    Call call = polymorphic_call(*poly, *c, 7);
    Outcome o = execute_shaped(ref, ctx.get(), call);
    ASSERT_TRUE(o.ok()) << what << ": " << o.text;
    expect_same_outputs(run_concrete(ref, *c, 7), call, what);
    if (k.shift == 1 && k.n == 3) {
      // Same shapes as the run before, other data: the outputs that depend
      // on it (sliced, reduced, range) must have changed.
      ASSERT_EQ(previous.size(), call.out_bytes.size());
      EXPECT_NE(previous[5], call.out_bytes[5]) << "Slice kept the old window";
      EXPECT_NE(previous[6], call.out_bytes[6]) << "ReduceSum kept the old axis";
      EXPECT_NE(previous[4], call.out_bytes[4]) << "Range kept the old start";
    }
    previous = call.out_bytes;
  }
}

// A steady-state run at one shape allocates nothing (no kernel prepared
// again, no arena placed again); a new shape does (the counter is live).
TEST(CpuRefPolymorphic, SteadyStateAtOneShapeAllocatesNothing) {
  CpuRef ref;
  std::unique_ptr<Concrete> a = attention(2, 5), b = attention(1, 9);
  std::unique_ptr<Polymorphic> poly = polymorphic(*a);
  CompiledPtr compiled = ref.compile(poly->view, true);
  ASSERT_TRUE(compiled);
  ContextPtr ctx = ref.context(compiled.get());
  Call at_a = polymorphic_call(*poly, *a, 1), at_b = polymorphic_call(*poly, *b, 2);
  auto allocations = [&](const Call& call) {
    const long before = g_news.load();
    Outcome o = execute_shaped(ref, ctx.get(), call);
    const long used = g_news.load() - before;
    EXPECT_TRUE(o.ok()) << o.text;
    return used;
  };
  allocations(at_a);  // prepares every kernel
  EXPECT_EQ(allocations(at_a), 0);
  EXPECT_EQ(allocations(at_a), 0);
  EXPECT_GT(allocations(at_b), 0);
  EXPECT_EQ(allocations(at_b), 0);
  EXPECT_GT(allocations(at_a), 0);
  EXPECT_EQ(allocations(at_a), 0);
  expect_same_outputs(run_concrete(ref, *a, 1), at_a, "back at the first shape");
}

// Wrong arguments are clear errors that name the partition and the value,
// and leave the context working.
TEST(CpuRefPolymorphic, WrongShapesAreClearErrorsAndTheContextStillWorks) {
  CpuRef ref;
  std::unique_ptr<Concrete> c = attention(2, 4), other = attention(2, 5);
  std::unique_ptr<Polymorphic> poly = polymorphic(*c);
  CompiledPtr compiled = ref.compile(poly->view, true);
  ASSERT_TRUE(compiled);
  ContextPtr ctx = ref.context(compiled.get());
  const std::vector<std::vector<uint8_t>> want = run_concrete(ref, *c, 3);
  Call good = polymorphic_call(*poly, *c, 3);
  ASSERT_TRUE(execute_shaped(ref, ctx.get(), good).ok());

  // The input tensor is [2,5,8] while value_shapes says [2,4,8].
  Call bad = polymorphic_call(*poly, *c, 3);
  Call longer = polymorphic_call(*poly, *other, 3);
  bad.inputs[0] = longer.inputs[0];
  Outcome o = execute_shaped(ref, ctx.get(), bad);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS(o, "CpuRef partition 'block/partition_0'", "input 0 ('x')", "[2,5,8]",
                   "[2,4,8]");

  // An output buffer of the wrong shape.
  bad = polymorphic_call(*poly, *c, 3);
  bad.outputs[1] = longer.outputs[0];
  o = execute_shaped(ref, ctx.get(), bad);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS(o, "output 1 ('pooled')", "[2,5,8]", "[2,8]");

  // value_shapes of the wrong rank, of the wrong length, or changing a weight.
  const int32_t q = poly->nodes[0].outputs[0];  // MatMul x Wq
  const int64_t rank2[2] = {2, 4};
  bad = polymorphic_call(*poly, *c, 3);
  bad.value_shapes[q] = {2, rank2};
  o = execute_shaped(ref, ctx.get(), bad);
  EXPECT_ERROR_HAS(o, "value 'q0' has rank 3", "[2,4]");
  bad = polymorphic_call(*poly, *c, 3);
  bad.args.num_values -= 1;
  o = execute_shaped(ref, ctx.get(), bad);
  EXPECT_ERROR_HAS(o, "one per value of the view");
  bad = polymorphic_call(*poly, *c, 3);
  const int32_t wq = poly->nodes[0].inputs[1];
  const int64_t wrong_weight[2] = {8, 9};
  bad.value_shapes[wq] = {2, wrong_weight};
  o = execute_shaped(ref, ctx.get(), bad);
  EXPECT_ERROR_HAS(o, "constant 'wq' has shape [8,8]", "[8,9]");

  // Shapes that disagree with each other fail in the node that sees it.
  bad = polymorphic_call(*poly, *c, 3);
  const int64_t wider[3] = {2, 4, 9};
  bad.value_shapes[q] = {3, wider};
  o = execute_shaped(ref, ctx.get(), bad);
  EXPECT_FALSE(o.ok());
  EXPECT_ERROR_HAS(o, "node 'MatMul_0' (MatMul)", "[2,4,9]");

  // A dim the host could not infer (data-dependent): not implemented yet,
  // and said so with the node and value.
  bad = polymorphic_call(*poly, *c, 3);
  const int64_t unknown[3] = {2, -1, 8};
  bad.value_shapes[q] = {3, unknown};
  o = execute_shaped(ref, ctx.get(), bad);
  EXPECT_EQ(o.code, BP_STATUS_UNIMPLEMENTED);
  EXPECT_ERROR_HAS(o, "value 'q0' of node 'MatMul_0' (MatMul)", "[2,-1,8]", "depends on data");

  // Plain execute has no shapes to give.
  o = execute(ref, ctx.get(), good);
  EXPECT_ERROR_HAS(o, "compiled shape-polymorphic", "execute_shaped");

  // Bad shape data at new shapes: the Reshape target disagrees with its
  // output. The nodes after it are not reached; the next run at those shapes
  // must not reuse what they were prepared with before.
  bad = polymorphic_call(*poly, *other, 4);
  const size_t heads = poly->view.num_inputs - 2;  // after x: 'heads', then 'half'
  ASSERT_STREQ(poly->view.values[poly->view.inputs[heads]].name, "heads");
  const int64_t wrong_heads[4] = {2, 5, 4, 2};
  std::memcpy(bad.in_bytes[heads].data(), wrong_heads, sizeof wrong_heads);
  o = execute_shaped(ref, ctx.get(), bad);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS(o, "node 'Reshape_4' (Reshape)", "[2,5,4,2]", "[2,5,2,4]");
  Call fixed = polymorphic_call(*poly, *other, 4);
  ASSERT_TRUE(execute_shaped(ref, ctx.get(), fixed).ok());
  expect_same_outputs(run_concrete(ref, *other, 4), fixed, "after bad shape data");

  // After all that, the context runs correctly, at this shape and another.
  Call again = polymorphic_call(*poly, *c, 3);
  ASSERT_TRUE(execute_shaped(ref, ctx.get(), again).ok());
  expect_same_outputs(want, again, "after the errors");
  Call next = polymorphic_call(*poly, *other, 4);
  ASSERT_TRUE(execute_shaped(ref, ctx.get(), next).ok());
  expect_same_outputs(run_concrete(ref, *other, 4), next, "at another shape after the errors");
}

// A concrete partition keeps working as before API 1.2; execute_shaped on it
// equals execute, and value shapes other than the view's are refused.
TEST(CpuRefPolymorphic, ExecuteShapedOnConcretePartitionEqualsExecute) {
  CpuRef ref;
  std::unique_ptr<Concrete> c = attention(3, 6);
  CompiledPtr compiled = ref.compile(c->v(), false);
  ASSERT_TRUE(compiled);
  ContextPtr ctx = ref.context(compiled.get());
  Call plain = concrete_call(*c, 9), shaped = concrete_call(*c, 9, 0x11);
  ASSERT_TRUE(execute(ref, ctx.get(), plain).ok());
  Outcome o = execute_shaped(ref, ctx.get(), shaped);
  ASSERT_TRUE(o.ok()) << o.text;
  expect_same_outputs(plain.out_bytes, shaped, "execute_shaped vs execute");

  std::unique_ptr<Concrete> other = attention(3, 7);
  Call bad = concrete_call(*other, 9);
  o = execute_shaped(ref, ctx.get(), bad);
  EXPECT_EQ(o.code, BP_STATUS_INVALID_ARGUMENT);
  EXPECT_ERROR_HAS(o, "was compiled for value 'x' of shape [3,6,8]", "not shape-polymorphic",
                   "[3,7,8]");
  Call again = concrete_call(*c, 9, 0x22);
  ASSERT_TRUE(execute_shaped(ref, ctx.get(), again).ok());
  expect_same_outputs(plain.out_bytes, again, "after the error");
}

// Contexts of one polymorphic partition are independent: two threads, each
// alternating between two shapes, get exact results.
TEST(CpuRefPolymorphic, ContextsRunDifferentShapesAtOnce) {
  CpuRef ref;
  std::vector<std::unique_ptr<Concrete>> shapes;
  for (Shape2 s : {Shape2{1, 3}, Shape2{2, 8}, Shape2{3, 2}, Shape2{1, 11}})
    shapes.push_back(attention(s.a, s.b));
  std::unique_ptr<Polymorphic> poly = polymorphic(*shapes[0]);
  CompiledPtr compiled = ref.compile(poly->view, true);
  ASSERT_TRUE(compiled);
  std::vector<std::vector<std::vector<uint8_t>>> want;
  for (size_t i = 0; i < shapes.size(); ++i)
    want.push_back(run_concrete(ref, *shapes[i], static_cast<unsigned>(i)));
  std::atomic<int> mismatches{0}, failures{0};
  auto worker = [&](size_t first) {
    ContextPtr ctx = ref.context(compiled.get());
    std::vector<Call> calls;
    for (size_t i = first; i < first + 2; ++i)
      calls.push_back(polymorphic_call(*poly, *shapes[i], static_cast<unsigned>(i)));
    for (int round = 0; round < 20; ++round) {
      Call& call = calls[round % 2];
      if (!execute_shaped(ref, ctx.get(), call).ok()) ++failures;
      if (call.out_bytes != want[first + round % 2]) ++mismatches;
    }
  };
  std::thread t0(worker, 0), t1(worker, 2);
  t0.join();
  t1.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

// A polymorphic partition serializes as such and deserializes into one that
// runs at any shape; its payload is not taken for a concrete one.
TEST(CpuRefPolymorphic, SerializedPolymorphicPartitionRoundTrips) {
  CpuRef ref;
  std::unique_ptr<Concrete> c = attention(2, 3), other = attention(3, 4);
  std::unique_ptr<Polymorphic> poly = polymorphic(*c);
  CompiledPtr compiled = ref.compile(poly->view, true);
  ASSERT_TRUE(compiled);
  bp_byte_writer writer;
  ASSERT_TRUE(take(ref.api()->serialize(compiled.get(), nullptr, &writer)).ok());

  const bp_compile_options_t poly_options = CpuRef::options(true);
  bp_compiled_t* raw = nullptr;
  Outcome o = take(ref.api()->deserialize(ref.instance(), &poly->view, writer.bytes.data(),
                                          writer.bytes.size(), &poly_options, &raw));
  ASSERT_TRUE(o.ok()) << o.text;
  CompiledPtr loaded(raw, ref.api()->compiled_destroy);
  ContextPtr ctx = ref.context(loaded.get());
  Call call = polymorphic_call(*poly, *other, 5);
  ASSERT_TRUE(execute_shaped(ref, ctx.get(), call).ok());
  expect_same_outputs(run_concrete(ref, *other, 5), call, "deserialized");

  const bp_compile_options_t concrete_options = CpuRef::options(false);
  o = take(ref.api()->deserialize(ref.instance(), &poly->view, writer.bytes.data(),
                                  writer.bytes.size(), &concrete_options, &raw));
  EXPECT_EQ(o.code, BP_STATUS_CORRUPT_DATA);
}

// A polymorphic view with an op CpuRef lacks is refused as UNSUPPORTED (the
// host then compiles concrete views), naming the node.
TEST(CpuRefPolymorphic, UnsupportedOpFailsThePolymorphicCompile) {
  CpuRef ref;
  std::unique_ptr<Concrete> c = attention(1, 2);
  std::unique_ptr<Polymorphic> poly = polymorphic(*c);
  poly->nodes[2].op_type = "NoSuchOp";
  CompiledPtr compiled(nullptr, ref.api()->compiled_destroy);
  Outcome o = ref.compile(poly->view, true, &compiled);
  EXPECT_EQ(o.code, BP_STATUS_UNSUPPORTED);
  EXPECT_ERROR_HAS(o, "node 'MatMul_2' (NoSuchOp)", "'NoSuchOp' is not implemented");
}

}  // namespace
}  // namespace backplane
