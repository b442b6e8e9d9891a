#include "gpuocl/lowering.hpp"

#include <clblast.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <tuple>

namespace gpuocl {
namespace sdk = backplane::sdk;
using Dims = std::vector<int64_t>;

cl_kernel Run::kernel(const char* name, size_t* local) {
  auto it = kernels_->find(name);
  if (it == kernels_->end()) {
    cl_kernel k = device_.create_kernel(name);
    size_t most = 0;
    if (clGetKernelWorkGroupInfo(k, device_.info().id, CL_KERNEL_WORK_GROUP_SIZE, sizeof(most),
                                 &most, nullptr) != CL_SUCCESS ||
        most == 0)
      most = device_.local_size();
    it = kernels_->emplace(name, std::make_pair(k, std::min(most, device_.local_size()))).first;
  }
  *local = it->second.second;
  return it->second.first;
}

namespace {

// --- enqueueing -------------------------------------------------------------

void set_arg(cl_kernel k, cl_uint i, cl_mem m) {
  check(clSetKernelArg(k, i, sizeof(cl_mem), &m), "clSetKernelArg");
}
void set_arg(cl_kernel k, cl_uint i, int v) {
  const cl_int x = v;
  check(clSetKernelArg(k, i, sizeof(x), &x), "clSetKernelArg");
}
void set_arg(cl_kernel k, cl_uint i, float v) {
  const cl_float x = v;
  check(clSetKernelArg(k, i, sizeof(x), &x), "clSetKernelArg");
}

// Enqueues kernel `name` over `n` work-items (none if n == 0), without
// waiting. The work-group size is the kernel's fixed one (Run::kernel; the
// global size rounded up to it, every kernel checking its bound): a driver
// that finalises code per work-group size (PoCL does, per size and per
// "small grid") then makes one or two variants per kernel, not one per
// tensor shape, and a serialized program carries them all.
template <class... A>
void launch(Run& r, const char* name, int64_t n, A... args) {
  if (n <= 0) return;
  size_t local = 0;
  cl_kernel k = r.kernel(name, &local);
  cl_uint i = 0;
  (set_arg(k, i++, args), ...);
  const size_t global = (static_cast<size_t>(n) + local - 1) / local * local;
  check(clEnqueueNDRangeKernel(r.device().queue(), k, 1, nullptr, &global, &local, 0, nullptr,
                               nullptr),
        name);
  ++counters().kernels;
}

void copy_buffer(Run& r, cl_mem src, cl_mem dst, size_t bytes, size_t dst_offset = 0) {
  if (bytes == 0 || src == dst) return;
  check(
      clEnqueueCopyBuffer(r.device().queue(), src, dst, 0, dst_offset, bytes, 0, nullptr, nullptr),
      "clEnqueueCopyBuffer");
}

// Row-major C[m,n] = alpha * op(A) op(B) + beta * C (offsets in elements):
// GpuOcl's own gemm_* kernels by default, CLBlast's SGEMM when the backend is
// configured so (gemm=clblast; see Device::use_clblast).
struct GemmCall {
  bool ta = false, tb = false;
  size_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
};
void clblast_gemm(Run& r, const GemmCall& g, cl_mem a, size_t a_off, cl_mem b, size_t b_off,
                  cl_mem c, size_t c_off) {
  using clblast::Transpose;
  cl_command_queue q = r.device().queue();
  ++counters().clblast_gemms;
  const clblast::StatusCode s =
      clblast::Gemm<float>(clblast::Layout::kRowMajor, g.ta ? Transpose::kYes : Transpose::kNo,
                           g.tb ? Transpose::kYes : Transpose::kNo, g.m, g.n, g.k, g.alpha, a,
                           a_off, g.lda, b, b_off, g.ldb, g.beta, c, c_off, g.ldc, &q, nullptr);
  if (s != clblast::StatusCode::kSuccess)
    throw sdk::Error(BP_STATUS_DEVICE_ERROR, "GpuOcl: CLBlast SGEMM (" + std::to_string(g.m) + "x" +
                                                 std::to_string(g.n) + "x" + std::to_string(g.k) +
                                                 ") failed with status " +
                                                 std::to_string(static_cast<int>(s)));
}
constexpr size_t kGemmRows = 8, kGemmCols = 16;  // GEMM_TM, GEMM_TN of kernels_cl.cpp
void gemm(Run& r, const GemmCall& g, cl_mem a, size_t a_off, cl_mem b, size_t b_off, cl_mem c,
          size_t c_off) {
  ++counters().gemms;
  if (g.m == 0 || g.n == 0) return;
  if (r.device().use_clblast()) return clblast_gemm(r, g, a, a_off, b, b_off, c, c_off);
  static const char* const names[2][2] = {{"gemm_nn", "gemm_nt"}, {"gemm_tn", "gemm_tt"}};
  size_t wg = 0;
  cl_kernel k = r.kernel(names[g.ta ? 1 : 0][g.tb ? 1 : 0], &wg);
  cl_uint i = 0;
  set_arg(k, i++, int(g.m));
  set_arg(k, i++, int(g.n));
  set_arg(k, i++, int(g.k));
  set_arg(k, i++, g.alpha);
  set_arg(k, i++, g.beta);
  for (const auto& [mem, off, ld] :
       {std::tuple{a, a_off, g.lda}, std::tuple{b, b_off, g.ldb}, std::tuple{c, c_off, g.ldc}}) {
    set_arg(k, i++, mem);
    set_arg(k, i++, int(off));
    set_arg(k, i++, int(ld));
  }
  const size_t local[2] = {wg, 1};
  const size_t blocks = (g.n + kGemmCols - 1) / kGemmCols;
  const size_t global[2] = {(blocks + local[0] - 1) / local[0] * local[0],
                            (g.m + kGemmRows - 1) / kGemmRows};
  check(
      clEnqueueNDRangeKernel(r.device().queue(), k, 2, nullptr, global, local, 0, nullptr, nullptr),
      "gemm");
}

// --- shapes -----------------------------------------------------------------

Dims dims(const bp_value_t& v) { return sdk::shape_of(v); }
int64_t numel(const Dims& d) {
  return std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<int64_t>());
}
int64_t prod(const Dims& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < d.size(); ++i) p *= d[i];
  return p;
}
Dims contiguous_strides(const Dims& d) {
  Dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}
int64_t norm_axis(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

bool is_constant(const bp_value_t& v) { return (v.flags & BP_VALUE_CONSTANT) != 0; }

// Per-op tables.
const std::map<std::string, int, std::less<>>& binary_ops() {
  static const std::map<std::string, int, std::less<>> m = {
      {"Add", 0}, {"Sub", 1}, {"Mul", 2}, {"Div", 3}, {"Pow", 4}, {"Max", 5}, {"Min", 6}};
  return m;
}
const std::map<std::string, int, std::less<>>& unary_ops() {
  static const std::map<std::string, int, std::less<>> m = {
      {"Relu", 0},       {"Sigmoid", 1},      {"Tanh", 2},       {"Exp", 3},         {"Log", 4},
      {"Sqrt", 5},       {"Neg", 6},          {"Abs", 7},        {"Erf", 8},         {"Clip", 9},
      {"LeakyRelu", 10}, {"HardSigmoid", 11}, {"HardSwish", 12}, {"Reciprocal", 13}, {"Elu", 14},
      {"Softplus", 15},  {"Floor", 16},       {"Ceil", 17}};
  return m;
}
// Ops of integers and bools (and comparisons, Where, Cast of any of them):
// GpuOcl's typed kernels, float32, int32, int64 and bool.
const std::map<std::string, int, std::less<>>& compare_ops() {
  static const std::map<std::string, int, std::less<>> m = {
      {"Equal", 0}, {"Less", 1}, {"LessOrEqual", 2}, {"Greater", 3}, {"GreaterOrEqual", 4}};
  return m;
}
const std::map<std::string, int, std::less<>>& logic_ops() {
  static const std::map<std::string, int, std::less<>> m = {{"And", 0}, {"Or", 1}, {"Xor", 2}};
  return m;
}
// The kernels' name suffix of a dtype they take, or nullptr.
const char* type_suffix(bp_dtype_t t) {
  switch (t) {
    case BP_DTYPE_FLOAT32:
      return "f32";
    case BP_DTYPE_INT32:
      return "i32";
    case BP_DTYPE_INT64:
      return "i64";
    case BP_DTYPE_BOOL:
      return "bool";
    case BP_DTYPE_FLOAT16:
      return "f16";
    default:
      return nullptr;
  }
}
bool integer(bp_dtype_t t) { return t == BP_DTYPE_INT32 || t == BP_DTYPE_INT64; }
// float16 element-wise work (kernels *_f16: half in memory, float inside).
bool half_elementwise(const sdk::NodeRef& n);
// Arithmetic on integers goes to the typed kernels; on floats, to binary().
bool integer_arithmetic(const sdk::NodeRef& n) {
  const std::string_view t = n.op_type();
  return (t == "Add" || t == "Sub" || t == "Mul" || t == "Div" || t == "Max" || t == "Min") &&
         n.num_inputs() > 0 && n.has_input(0) && integer(n.input(0).dtype);
}
bool typed_op(const sdk::NodeRef& n) {
  const std::string_view t = n.op_type();
  return compare_ops().count(t) != 0 || logic_ops().count(t) != 0 || t == "Not" || t == "Where" ||
         t == "Cast" || integer_arithmetic(n) || half_elementwise(n);
}

bool half_elementwise(const sdk::NodeRef& n) {
  const std::string_view t = n.op_type();
  if (n.num_inputs() == 0 || !n.has_input(0) || n.input(0).dtype != BP_DTYPE_FLOAT16) return false;
  return binary_ops().count(t) != 0 || (unary_ops().count(t) != 0 && t != "Clip");
}

const std::set<std::string, std::less<>>& copy_ops() {
  static const std::set<std::string, std::less<>> s = {"Reshape",   "Flatten",  "Squeeze",
                                                       "Unsqueeze", "Identity", "Dropout"};
  return s;
}
const std::set<std::string, std::less<>>& other_ops() {
  static const std::set<std::string, std::less<>> s = {"Conv",
                                                       "MaxPool",
                                                       "AveragePool",
                                                       "GlobalAveragePool",
                                                       "GlobalMaxPool",
                                                       "ReduceMean",
                                                       "ReduceSum",
                                                       "ReduceMax",
                                                       "ReduceMin",
                                                       "ReduceProd",
                                                       "Softmax",
                                                       "LogSoftmax",
                                                       "LayerNormalization",
                                                       "BatchNormalization",
                                                       "Gemm",
                                                       "MatMul",
                                                       "Concat",
                                                       "Transpose",
                                                       "Gather",
                                                       "Slice",
                                                       "Pad",
                                                       "Resize",
                                                       "Upsample"};
  return s;
}

// --- the lowering of one view -------------------------------------------------

class Lowerer {
 public:
  Lowerer(Device& device, const sdk::Host& host, const bp_graph_view_t& view, Lowered& out,
          const StoredWeights* stored)
      : device_(device), host_(host), view_(view), out_(out), stored_(stored) {}

  void node(size_t index);
  bool skipped(size_t index) const { return skip_.count(index) != 0; }

 private:
  const bp_value_t& value(int v) const { return view_.values[v]; }
  // The value index of input i of the current node, its constant uploaded.
  int in(size_t i) {
    const int v = node_->raw().inputs[i];
    if (v >= 0 && is_constant(value(v)) && out_.constants.count(v) == 0) {
      sdk::Weight w = host_.weight(view_.weights, value(v).data_key);
      out_.constants.emplace(v, device_.upload(w.data(), w.size()));
      ++counters().weight_uploads;
    }
    return v;
  }
  int out(size_t i) const { return node_->raw().outputs[i]; }
  Dims in_dims(size_t i) const { return dims(node_->input(i)); }
  Dims out_dims(size_t i) const { return dims(node_->output(i)); }
  // The integers of constant input i (int64 or int32).
  Dims const_ints(size_t i) const {
    const bp_value_t& v = node_->input(i);
    if (!is_constant(v))
      throw sdk::unsupported("input " + std::to_string(i) + " is not a constant");
    sdk::Weight w = host_.weight(view_.weights, v.data_key);
    Dims r(static_cast<size_t>(sdk::element_count(v)));
    for (size_t k = 0; k < r.size(); ++k)
      r[k] = v.dtype == BP_DTYPE_INT64 ? w.as<int64_t>()[k] : w.as<int32_t>()[k];
    return r;
  }
  float const_float(size_t i, float fallback) const {
    if (!node_->has_input(i)) return fallback;
    const bp_value_t& v = node_->input(i);
    if (!is_constant(v) || v.dtype != BP_DTYPE_FLOAT32)
      throw sdk::unsupported("input " + std::to_string(i) + " is not a float constant");
    sdk::Weight w = host_.weight(view_.weights, v.data_key);
    return w.as<float>()[0];
  }
  std::vector<float> const_floats(size_t i) const {
    const bp_value_t& v = node_->input(i);
    sdk::Weight w = host_.weight(view_.weights, v.data_key);
    return std::vector<float>(w.as<float>(), w.as<float>() + sdk::element_count(v));
  }
  // Derived weight `name` of `count` floats: from the artifact when loading
  // one (nullptr: compile, the caller computes it), checked for its size.
  const sdk::Weight* stored(const std::string& name, size_t count) const {
    if (stored_ == nullptr) return nullptr;
    auto it = stored_->find(name);
    if (it == stored_->end() || it->second.size() != count * sizeof(float))
      throw sdk::Error(BP_STATUS_CORRUPT_DATA,
                       "GpuOcl payload: derived weight '" + name + "' " +
                           (it == stored_->end() ? std::string("is not stored")
                                                 : "is " + std::to_string(it->second.size()) +
                                                       " bytes, the node needs " +
                                                       std::to_string(count * sizeof(float))));
    return &it->second;
  }
  // Uploads derived weight `name` of `count` floats: the stored bytes, else
  // what compute() returns.
  template <class F>
  cl_mem derived(const std::string& name, size_t count, F&& compute) {
    const sdk::Weight* w = stored(name, count);
    std::vector<float> computed;
    if (w == nullptr) {
      computed = compute();
      if (computed.size() != count)
        throw sdk::Error(BP_STATUS_INTERNAL, "GpuOcl: derived weight '" + name + "' has " +
                                                 std::to_string(computed.size()) + " values, not " +
                                                 std::to_string(count));
    }
    const size_t bytes = count * sizeof(float);
    out_.meta.push_back(device_.upload(w ? w->data() : computed.data(), bytes));
    out_.derived.push_back(Lowered::Derived{name, out_.meta.back().get(), bytes});
    ++(w ? counters().derived_loaded : counters().derived_computed);
    return out_.meta.back().get();
  }
  cl_mem meta(const std::vector<int>& m) {
    out_.meta.push_back(device_.upload(m.data(), m.size() * sizeof(int)));
    return out_.meta.back().get();
  }
  template <class F>
  void emit(F&& f) {
    out_.steps.push_back(Step{label_, std::forward<F>(f)});
  }

  void binary(int op);
  void typed();
  void unary(int op);
  void copy();
  void conv();
  void pool();
  void global_pool(int mode);
  void reduce(int mode);
  void softmax(bool lg);
  void layernorm();
  void batchnorm();
  void gemm_node();
  void matmul();
  void concat();
  void transpose();
  void gather();
  void slice();
  void pad();
  void resize();
  void expand_into(int src, const Dims& src_dims, int dst, const Dims& dst_dims);

  int sole_consumer(int v) const;
  std::vector<float> floats_of(const bp_value_t& v) const {
    sdk::Weight w = host_.weight(view_.weights, v.data_key);
    return std::vector<float>(w.as<float>(), w.as<float>() + sdk::element_count(v));
  }

  Device& device_;
  const sdk::Host& host_;
  const bp_graph_view_t& view_;
  Lowered& out_;
  const StoredWeights* stored_;
  std::unique_ptr<sdk::NodeRef> node_;
  std::string label_;
  std::set<size_t> skip_;  // nodes folded into an earlier one
};

// The one node reading value v (by one input), unless v leaves the view or
// has other readers: -1 then.
int Lowerer::sole_consumer(int v) const {
  for (size_t o = 0; o < view_.num_outputs; ++o)
    if (view_.outputs[o] == v) return -1;
  int found = -1, count = 0;
  for (size_t j = 0; j < view_.num_nodes; ++j)
    for (size_t k = 0; k < view_.nodes[j].num_inputs; ++k)
      if (view_.nodes[j].inputs[k] == v) {
        ++count;
        found = int(j);
      }
  return count == 1 ? found : -1;
}

// Broadcast strides of `d` against `out` (right-aligned), 0 on broadcast axes.
std::vector<int> bcast_strides(const Dims& d, const Dims& out) {
  const size_t r = out.size();
  Dims padded(r, 1);
  std::copy(d.begin(), d.end(), padded.begin() + static_cast<std::ptrdiff_t>(r - d.size()));
  const Dims s = contiguous_strides(padded);
  std::vector<int> result(r);
  for (size_t k = 0; k < r; ++k) result[k] = padded[k] == 1 && out[k] != 1 ? 0 : int(s[k]);
  return result;
}

void Lowerer::binary(int op) {
  const int a = in(0), b = in(1), y = out(0);
  const Dims da = in_dims(0), db = in_dims(1), dy = out_dims(0);
  const int n = int(numel(dy));
  if (da == dy && db == dy) {
    emit([=](Run& r) { launch(r, "binary_same", n, op, r.value(a), r.value(b), r.value(y), n); });
    return;
  }
  std::vector<int> m{int(dy.size())};
  for (int64_t d : dy) m.push_back(int(d));
  for (int s : bcast_strides(da, dy)) m.push_back(s);
  for (int s : bcast_strides(db, dy)) m.push_back(s);
  cl_mem mm = meta(m);
  emit(
      [=](Run& r) { launch(r, "binary_bcast", n, op, r.value(a), r.value(b), r.value(y), mm, n); });
}

// Writes src broadcast to dst_dims into dst (binary_bcast's "take b").
void Lowerer::expand_into(int src, const Dims& src_dims, int dst, const Dims& dst_dims) {
  std::vector<int> m{int(dst_dims.size())};
  for (int64_t d : dst_dims) m.push_back(int(d));
  const std::vector<int> s = bcast_strides(src_dims, dst_dims);
  for (int k = 0; k < 2; ++k)
    for (int x : s) m.push_back(x);
  cl_mem mm = meta(m);
  const int n = int(numel(dst_dims));
  emit([=](Run& r) {
    launch(r, "binary_bcast", n, 7, r.value(src), r.value(src), r.value(dst), mm, n);
  });
}

// [rank, dims of `out`, the broadcast strides of each operand].
std::vector<int> bcast_meta(const Dims& out, std::initializer_list<Dims> operands) {
  std::vector<int> m{int(out.size())};
  for (int64_t d : out) m.push_back(int(d));
  for (const Dims& d : operands)
    for (int s : bcast_strides(d, out)) m.push_back(s);
  return m;
}

// Integer arithmetic, comparisons, logic, Where and Cast (typed_op).
void Lowerer::typed() {
  const std::string_view t = node_->op_type();
  if (auto u = unary_ops().find(t); u != unary_ops().end()) return unary(u->second);  // f16
  const int y = out(0);
  const Dims dy = out_dims(0);
  const int n = int(numel(dy));
  if (t == "Not" || t == "Cast") {
    const int x = in(0);
    const bp_dtype_t from = node_->input(0).dtype, to = node_->output(0).dtype;
    if (t == "Cast" && from == to) return copy();
    const std::string name = t == "Not"
                                 ? std::string("logic_not")
                                 : std::string("cast_") + type_suffix(from) + "_" + type_suffix(to);
    emit([=](Run& r) { launch(r, name.c_str(), n, r.value(x), r.value(y), n); });
    return;
  }
  if (t == "Where") {
    const int c = in(0), a = in(1), b = in(2);
    cl_mem mm = meta(bcast_meta(dy, {in_dims(0), in_dims(1), in_dims(2)}));
    const size_t bytes = sdk::byte_size(node_->output(0)) / size_t(std::max(n, 1));
    const char* name = bytes == 1 ? "where_1" : bytes == 4 ? "where_4" : "where_8";
    emit(
        [=](Run& r) { launch(r, name, n, r.value(c), r.value(a), r.value(b), r.value(y), mm, n); });
    return;
  }
  const int a = in(0), b = in(1);
  cl_mem mm = meta(bcast_meta(dy, {in_dims(0), in_dims(1)}));
  int op = 0;
  std::string name;
  if (auto c = compare_ops().find(t); c != compare_ops().end()) {
    op = c->second;
    name = std::string("compare_") + type_suffix(node_->input(0).dtype);
  } else if (auto l = logic_ops().find(t); l != logic_ops().end()) {
    op = l->second;
    name = "logic";
  } else {
    op = binary_ops().find(t)->second;
    name = std::string("binary_") + type_suffix(node_->input(0).dtype);
  }
  emit([=](Run& r) { launch(r, name.c_str(), n, op, r.value(a), r.value(b), r.value(y), mm, n); });
}

void Lowerer::unary(int op) {
  float p = 0.0f, q = 0.0f;
  const std::string_view t = node_->op_type();
  if (t == "Clip") {
    if (node_->opset() < 11) {
      p = node_->attr_float("min", -FLT_MAX);
      q = node_->attr_float("max", FLT_MAX);
    } else {
      p = const_float(1, -FLT_MAX);
      q = const_float(2, FLT_MAX);
    }
  } else if (t == "LeakyRelu") {
    p = node_->attr_float("alpha", 0.01f);
  } else if (t == "HardSigmoid") {
    p = node_->attr_float("alpha", 0.2f);
    q = node_->attr_float("beta", 0.5f);
  } else if (t == "Elu") {
    p = node_->attr_float("alpha", 1.0f);
  }
  const int x = in(0), y = out(0);
  const int n = int(numel(out_dims(0)));
  const char* name = node_->input(0).dtype == BP_DTYPE_FLOAT16 ? "unary_f16" : "unary";
  emit([=](Run& r) { launch(r, name, n, op, r.value(x), r.value(y), n, p, q); });
}

void Lowerer::copy() {
  const int x = in(0), y = out(0);
  const size_t bytes = sdk::byte_size(node_->output(0));
  emit([=](Run& r) { copy_buffer(r, r.value(x), r.value(y), bytes); });
}

// Pads (begin of each spatial axis) from auto_pad or the pads attribute.
std::vector<int> begin_pads(const sdk::NodeRef& node, const Dims& in, const Dims& out,
                            const std::vector<int>& k, const std::vector<int>& s,
                            const std::vector<int>& d) {
  const size_t sp = k.size();
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  std::vector<int> p(sp, 0);
  if (auto_pad == "NOTSET") {
    const Dims pads = node.attr_ints("pads", Dims(2 * sp, 0));
    for (size_t i = 0; i < sp; ++i) p[i] = int(pads[i]);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < sp; ++i) {
      const int64_t total = std::max<int64_t>(
          0, (out[2 + i] - 1) * s[i] + (int64_t(k[i]) - 1) * d[i] + 1 - in[2 + i]);
      p[i] = int(auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2);
    }
  }
  return p;
}

std::vector<int> ints_attr(const sdk::NodeRef& node, const char* name, size_t n, int fallback) {
  const Dims v = node.attr_ints(name, Dims(n, fallback));
  std::vector<int> r(n, fallback);
  for (size_t i = 0; i < n && i < v.size(); ++i) r[i] = int(v[i]);
  return r;
}

void Lowerer::conv() {
  const int x = in(0);
  int y = out(0);
  Dims dx = in_dims(0), dw = in_dims(1), dy = out_dims(0);
  // Folded into this Conv: a BatchNormalization alone reading its output
  // (into the weights and bias), then a Relu or Clip alone reading that (into
  // the kernel's epilogue). The folded nodes are skipped.
  cl_mem wf = nullptr, bf = nullptr;
  int act = -1;
  float ap = 0.0f, aq = 0.0f;
  const bool const_wb =
      is_constant(node_->input(1)) && (!node_->has_input(2) || is_constant(node_->input(2)));
  int j = sole_consumer(y);
  if (j >= 0 && const_wb && std::string_view(view_.nodes[j].op_type) == "BatchNormalization" &&
      check_node(view_, size_t(j)).empty()) {
    const sdk::NodeRef bn(&view_, size_t(j));
    const size_t channels = size_t(sdk::element_count(bn.input(1)));
    const size_t weights = size_t(sdk::element_count(node_->input(1)));
    std::vector<float> wv, bv;
    auto fold = [&] {
      if (!wv.empty()) return;
      const std::vector<float> scale = floats_of(bn.input(1)), shift = floats_of(bn.input(2)),
                               mean = floats_of(bn.input(3)), var = floats_of(bn.input(4));
      const float eps = bn.attr_float("epsilon", 1e-5f);
      wv = floats_of(node_->input(1));
      bv = node_->has_input(2) ? floats_of(node_->input(2)) : std::vector<float>(channels, 0.0f);
      sdk::fold_batch_norm(wv, bv, scale.data(), shift.data(), mean.data(), var.data(), eps);
    };
    const std::string key = "n" + std::to_string(node_->index());
    wf = derived(key + "/bn_w", weights, [&] {
      fold();
      return wv;
    });
    bf = derived(key + "/bn_b", channels, [&] {
      fold();
      return bv;
    });
    skip_.insert(size_t(j));
    out_.elided.insert(y);
    y = bn.raw().outputs[0];
    j = sole_consumer(y);
  }
  if (j >= 0 && check_node(view_, size_t(j)).empty()) {
    const sdk::NodeRef a(&view_, size_t(j));
    if (a.op_type() == "Relu") {
      act = 0;
    } else if (a.op_type() == "Clip") {
      act = 9;
      ap = -FLT_MAX;
      aq = FLT_MAX;
      if (a.opset() < 11) {
        ap = a.attr_float("min", -FLT_MAX);
        aq = a.attr_float("max", FLT_MAX);
      } else {
        if (a.has_input(1)) ap = floats_of(a.input(1)).at(0);
        if (a.has_input(2)) aq = floats_of(a.input(2)).at(0);
      }
    }
    if (act >= 0) {
      skip_.insert(size_t(j));
      out_.elided.insert(y);
      y = a.raw().outputs[0];
    }
  }
  const int w = wf != nullptr ? -1 : in(1);
  const int b = bf == nullptr && node_->has_input(2) ? in(2) : -1;
  const bool has_bias = bf != nullptr || b >= 0;
  if (dx.size() == 3) {  // Conv1d as a 2d convolution of height 1
    dx.insert(dx.begin() + 2, 1);
    dw.insert(dw.begin() + 2, 1);
    dy.insert(dy.begin() + 2, 1);
  }
  const size_t sp = in_dims(0).size() - 2;
  std::vector<int> k = {int(dw[2]), int(dw[3])};
  std::vector<int> s = ints_attr(*node_, "strides", sp, 1);
  std::vector<int> d = ints_attr(*node_, "dilations", sp, 1);
  Dims ix = in_dims(0), iy = out_dims(0);
  std::vector<int> ks(k.end() - static_cast<std::ptrdiff_t>(sp), k.end());
  std::vector<int> p = begin_pads(*node_, ix, iy, ks, s, d);
  if (sp == 1) {
    s.insert(s.begin(), 1);
    d.insert(d.begin(), 1);
    p.insert(p.begin(), 0);
  }
  const int group = int(node_->attr_int("group", 1));
  const std::vector<int> shape = {
      int(dx[0]), int(dx[1]), int(dx[2]), int(dx[3]), int(dy[1]), int(dy[2]), int(dy[3]), k[0],
      k[1],       s[0],       s[1],       p[0],       p[1],       d[0],       d[1],       group};
  cl_mem mm = meta(shape);
  const int n = int(numel(dy));
  auto weights = [=](Run& r) { return wf != nullptr ? wf : r.value(w); };
  auto bias = [=](Run& r) { return bf != nullptr ? bf : b >= 0 ? r.value(b) : r.value(x); };
  if (group != 1) {
    emit([=](Run& r) {
      launch(r, "conv2d", n, r.value(x), weights(r), bias(r), r.value(y), mm, has_bias ? 1 : 0, act,
             ap, aq);
    });
    return;
  }
  // GEMM-shaped: Y[n] (OC x OH*OW) = W (OC x C*KH*KW) * cols(X[n]).
  const bool pointwise = k[0] == 1 && k[1] == 1 && s[0] == 1 && s[1] == 1 && p[0] == 0 &&
                         p[1] == 0 && dx[2] == dy[2] && dx[3] == dy[3];
  GemmCall g;
  g.m = size_t(dy[1]);
  g.n = size_t(dy[2] * dy[3]);
  g.k = size_t(dx[1]) * k[0] * k[1];
  g.lda = g.k;
  g.ldb = g.n;
  g.ldc = g.n;
  if (!pointwise) out_.scratch_bytes = std::max(out_.scratch_bytes, g.k * g.n * sizeof(float));
  const int64_t images = dx[0], x_image = prod(dx, 1, 4), y_image = prod(dy, 1, 4);
  const int cols = int(g.k) * int(dy[2]), C = int(dy[1]), HW = int(dy[2] * dy[3]);
  emit([=](Run& r) {
    for (int64_t i = 0; i < images; ++i) {
      if (pointwise) {
        gemm(r, g, weights(r), 0, r.value(x), size_t(i * x_image), r.value(y), size_t(i * y_image));
        continue;
      }
      launch(r, "im2col", cols, r.value(x), int(i * x_image), r.scratch(), mm);
      gemm(r, g, weights(r), 0, r.scratch(), 0, r.value(y), size_t(i * y_image));
    }
    if (has_bias || act >= 0)
      launch(r, "bias_act", n, r.value(y), bias(r), C, HW, n, has_bias ? 1 : 0, act, ap, aq);
  });
}

void Lowerer::pool() {
  const int x = in(0), y = out(0);
  const Dims dx = in_dims(0), dy = out_dims(0);
  const std::vector<int> k = ints_attr(*node_, "kernel_shape", 2, 1);
  const std::vector<int> s = ints_attr(*node_, "strides", 2, 1);
  const std::vector<int> d = ints_attr(*node_, "dilations", 2, 1);
  const std::vector<int> p = begin_pads(*node_, dx, dy, k, s, d);
  const bool max = node_->op_type() == "MaxPool";
  const int mode = max ? 0 : (node_->attr_int("count_include_pad", 0) != 0 ? 2 : 1);
  cl_mem mm = meta({int(dx[0]), int(dx[1]), int(dx[2]), int(dx[3]), int(dy[2]), int(dy[3]), k[0],
                    k[1], s[0], s[1], p[0], p[1], d[0], d[1]});
  const int n = int(numel(dy));
  emit([=](Run& r) { launch(r, "pool2d", n, r.value(x), r.value(y), mm, mode); });
}

void Lowerer::global_pool(int mode) {
  const int x = in(0), y = out(0);
  const Dims dx = in_dims(0);
  const int outer = int(dx[0] * dx[1]), len = int(prod(dx, 2, dx.size()));
  emit(
      [=](Run& r) { launch(r, "reduce_mid", outer, r.value(x), r.value(y), outer, len, 1, mode); });
}

void Lowerer::reduce(int mode) {
  const int x = in(0), y = out(0);
  const Dims dx = in_dims(0);
  Dims axes;
  if (node_->opset() >= 18 || (node_->op_type() == "ReduceSum" && node_->opset() >= 13)) {
    if (node_->has_input(1)) axes = const_ints(1);
  } else {
    axes = node_->attr_ints("axes");
  }
  if (axes.empty()) {
    if (node_->attr_int("noop_with_empty_axes", 0) != 0) {
      copy();
      return;
    }
    for (size_t i = 0; i < dx.size(); ++i) axes.push_back(int64_t(i));
  }
  for (int64_t& a : axes) a = norm_axis(a, dx.size());
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  bool contiguous = true;
  for (size_t i = 1; i < axes.size(); ++i) contiguous = contiguous && axes[i] == axes[i - 1] + 1;
  if (!contiguous) {
    // Kept axes first, reduced axes last (a transpose into the scratch
    // buffer, which steps use one at a time), then one reduction.
    Dims perm, moved;
    for (size_t d = 0; d < dx.size(); ++d)
      if (!std::binary_search(axes.begin(), axes.end(), int64_t(d))) perm.push_back(int64_t(d));
    for (int64_t a : axes) perm.push_back(a);
    const Dims s = contiguous_strides(dx);
    std::vector<int> m{int(dx.size())};
    for (int64_t p : perm) m.push_back(int(dx[size_t(p)]));
    for (int64_t p : perm) m.push_back(int(s[size_t(p)]));
    cl_mem mm = meta(m);
    const int n = int(numel(dx));
    int64_t kept = 1;
    for (size_t i = 0; i + axes.size() < perm.size(); ++i) kept *= dx[size_t(perm[i])];
    const int outer = int(kept), len = int(n / std::max<int64_t>(kept, 1));
    out_.scratch_bytes = std::max(out_.scratch_bytes, size_t(n) * sizeof(float));
    emit([=](Run& r) {
      launch(r, "transpose", n, r.value(x), r.scratch(), mm, n);
      launch(r, "reduce_mid", outer, r.scratch(), r.value(y), outer, len, 1, mode);
    });
    return;
  }
  const int outer = int(prod(dx, 0, size_t(axes.front())));
  const int len = int(prod(dx, size_t(axes.front()), size_t(axes.back()) + 1));
  const int inner = int(prod(dx, size_t(axes.back()) + 1, dx.size()));
  emit([=](Run& r) {
    launch(r, "reduce_mid", int64_t(outer) * inner, r.value(x), r.value(y), outer, len, inner,
           mode);
  });
}

void Lowerer::softmax(bool lg) {
  const int x = in(0), y = out(0);
  const Dims dx = in_dims(0);
  const bool old = node_->opset() < 13;
  const size_t axis = size_t(norm_axis(node_->attr_int("axis", old ? 1 : -1), dx.size()));
  const int outer = int(prod(dx, 0, axis));
  const int len = old ? int(prod(dx, axis, dx.size())) : int(dx[axis]);
  const int inner = old ? 1 : int(prod(dx, axis + 1, dx.size()));
  const int lgi = lg ? 1 : 0;
  emit([=](Run& r) {
    launch(r, "softmax", int64_t(outer) * inner, r.value(x), r.value(y), outer, len, inner, lgi);
  });
}

void Lowerer::layernorm() {
  const int x = in(0), scale = in(1), y = out(0);
  const int b = node_->has_input(2) ? in(2) : -1;
  const Dims dx = in_dims(0);
  const size_t axis = size_t(norm_axis(node_->attr_int("axis", -1), dx.size()));
  const int rows = int(prod(dx, 0, axis)), cols = int(prod(dx, axis, dx.size()));
  const float eps = node_->attr_float("epsilon", 1e-5f);
  emit([=](Run& r) {
    launch(r, "layernorm", rows, r.value(x), r.value(scale), b >= 0 ? r.value(b) : r.value(scale),
           r.value(y), rows, cols, eps, b >= 0 ? 1 : 0);
  });
}

void Lowerer::batchnorm() {
  // Folded into one affine map per channel at compile time.
  const size_t C = size_t(sdk::element_count(node_->input(1)));
  cl_mem abm = derived("n" + std::to_string(node_->index()) + "/bn_ab", 2 * C, [&] {
    const std::vector<float> scale = const_floats(1), bias = const_floats(2),
                             mean = const_floats(3), var = const_floats(4);
    const float eps = node_->attr_float("epsilon", 1e-5f);
    std::vector<float> ab(2 * C);
    for (size_t c = 0; c < C; ++c) {
      ab[c] = scale[c] / std::sqrt(var[c] + eps);
      ab[C + c] = bias[c] - mean[c] * ab[c];
    }
    return ab;
  });
  const int x = in(0), y = out(0);
  const Dims dx = in_dims(0);
  const int n = int(numel(dx)), HW = int(prod(dx, 2, dx.size()));
  const int Ci = int(C);
  emit([=](Run& r) { launch(r, "channel_affine", n, r.value(x), abm, r.value(y), Ci, HW, n); });
}

void Lowerer::gemm_node() {
  const int a = in(0), b = in(1), y = out(0);
  const Dims da = in_dims(0), db = in_dims(1), dy = out_dims(0);
  GemmCall g;
  g.ta = node_->attr_int("transA", 0) != 0;
  g.tb = node_->attr_int("transB", 0) != 0;
  g.m = size_t(dy[0]);
  g.n = size_t(dy[1]);
  g.k = size_t(g.ta ? da[0] : da[1]);
  g.lda = size_t(da[1]);
  g.ldb = size_t(db[1]);
  g.ldc = g.n;
  g.alpha = node_->attr_float("alpha", 1.0f);
  if (node_->has_input(2)) {
    expand_into(in(2), in_dims(2), y, dy);
    g.beta = node_->attr_float("beta", 1.0f);
  }
  emit([=](Run& r) { gemm(r, g, r.value(a), 0, r.value(b), 0, r.value(y), 0); });
}

void Lowerer::matmul() {
  const int a = in(0), b = in(1), y = out(0);
  const Dims da = in_dims(0), db = in_dims(1), dy = out_dims(0);
  GemmCall g;
  g.k = size_t(da.back());
  g.n = db.size() == 1 ? 1 : size_t(db.back());  // a 1-d B is a column
  g.lda = g.k;
  g.ldb = g.n;
  g.ldc = g.n;
  if (db.size() <= 2) {  // every row of A's batch (a 1-d A: one row) times one B: one GEMM
    g.m = size_t(numel(da) / std::max<int64_t>(int64_t(g.k), 1));
    emit([=](Run& r) { gemm(r, g, r.value(a), 0, r.value(b), 0, r.value(y), 0); });
    return;
  }
  // Batched, with broadcasting of the batch dims: one GEMM per batch entry.
  g.m = size_t(da[da.size() - 2]);
  const Dims batch(dy.begin(), dy.end() - 2);
  const Dims ba(da.begin(), da.end() - 2), bb(db.begin(), db.end() - 2);
  const std::vector<int> sa = bcast_strides(ba, batch), sb = bcast_strides(bb, batch);
  std::vector<std::array<size_t, 3>> offsets;
  for (int64_t i = 0; i < numel(batch); ++i) {
    int64_t rem = i, oa = 0, ob = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    offsets.push_back({size_t(oa) * g.m * g.k, size_t(ob) * g.k * g.n, size_t(i) * g.m * g.n});
  }
  emit([=](Run& r) {
    for (const auto& o : offsets) gemm(r, g, r.value(a), o[0], r.value(b), o[1], r.value(y), o[2]);
  });
}

void Lowerer::concat() {
  const int y = out(0);
  const Dims dy = out_dims(0);
  const size_t axis = size_t(norm_axis(node_->attr_int("axis", 0), dy.size()));
  const size_t outer = size_t(prod(dy, 0, axis)), inner = size_t(prod(dy, axis + 1, dy.size()));
  const size_t row_out = size_t(dy[axis]) * inner * sizeof(float);
  size_t offset = 0;
  for (size_t i = 0; i < node_->num_inputs(); ++i) {
    const int x = in(i);
    const size_t row_in = size_t(in_dims(i)[axis]) * inner * sizeof(float);
    const size_t at = offset;
    offset += row_in;
    if (row_in == 0 || outer == 0) continue;
    emit([=](Run& r) {
      const size_t src[3] = {0, 0, 0}, dst[3] = {at, 0, 0}, region[3] = {row_in, outer, 1};
      check(clEnqueueCopyBufferRect(r.device().queue(), r.value(x), r.value(y), src, dst, region,
                                    row_in, 0, row_out, 0, 0, nullptr, nullptr),
            "clEnqueueCopyBufferRect");
    });
  }
}

void Lowerer::transpose() {
  const int x = in(0), y = out(0);
  const Dims dx = in_dims(0), dy = out_dims(0);
  Dims perm = node_->attr_ints("perm");
  if (perm.empty())
    for (size_t i = dx.size(); i-- > 0;) perm.push_back(int64_t(i));
  const Dims s = contiguous_strides(dx);
  std::vector<int> m{int(dy.size())};
  for (int64_t d : dy) m.push_back(int(d));
  for (int64_t p : perm) m.push_back(int(s[size_t(p)]));
  cl_mem mm = meta(m);
  const int n = int(numel(dy));
  emit([=](Run& r) { launch(r, "transpose", n, r.value(x), r.value(y), mm, n); });
}

void Lowerer::gather() {
  const int data = in(0), idx = in(1), y = out(0);
  const Dims dd = in_dims(0);
  const size_t axis = size_t(norm_axis(node_->attr_int("axis", 0), dd.size()));
  const int outer = int(prod(dd, 0, axis)), len = int(dd[axis]);
  const int inner = int(prod(dd, axis + 1, dd.size())), count = int(numel(in_dims(1)));
  const int n = int(numel(out_dims(0)));
  emit([=](Run& r) {
    launch(r, "gather", n, r.value(data), r.value(idx), r.value(y), outer, len, inner, count);
  });
}

// strided_copy's table: [rank, out dims, in dims, in strides, starts, steps].
std::vector<int> strided_meta(const Dims& dx, const Dims& dy, const Dims& starts,
                              const Dims& steps) {
  std::vector<int> m{int(dy.size())};
  for (int64_t d : dy) m.push_back(int(d));
  for (int64_t d : dx) m.push_back(int(d));
  for (int64_t s : contiguous_strides(dx)) m.push_back(int(s));
  for (int64_t s : starts) m.push_back(int(s));
  for (int64_t s : steps) m.push_back(int(s));
  return m;
}

void Lowerer::slice() {
  const Dims dx = in_dims(0), dy = out_dims(0);
  Dims starts_in, axes, steps_in;
  if (node_->opset() < 10) {
    starts_in = node_->attr_ints("starts");
    axes = node_->attr_ints("axes");
  } else {
    starts_in = const_ints(1);
    if (node_->has_input(3)) axes = const_ints(3);
    if (node_->has_input(4)) steps_in = const_ints(4);
  }
  if (axes.empty())
    for (size_t i = 0; i < starts_in.size(); ++i) axes.push_back(int64_t(i));
  Dims starts(dx.size(), 0), steps(dx.size(), 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = size_t(norm_axis(axes[i], dx.size()));
    const int64_t step = steps_in.empty() ? 1 : steps_in[i];
    int64_t s = starts_in[i];
    if (s < 0) s += dx[a];
    s = step > 0 ? std::clamp<int64_t>(s, 0, dx[a]) : std::clamp<int64_t>(s, 0, dx[a] - 1);
    starts[a] = s;
    steps[a] = step;
  }
  const int x = in(0), y = out(0);
  cl_mem mm = meta(strided_meta(dx, dy, starts, steps));
  const int n = int(numel(dy));
  emit([=](Run& r) { launch(r, "strided_copy", n, r.value(x), r.value(y), mm, n, 0.0f); });
}

void Lowerer::pad() {
  const Dims dx = in_dims(0), dy = out_dims(0);
  const Dims pads = node_->opset() < 11 ? node_->attr_ints("pads") : const_ints(1);
  const float value = node_->opset() < 11 ? node_->attr_float("value", 0.0f) : const_float(2, 0.0f);
  Dims starts(dx.size()), steps(dx.size(), 1);
  for (size_t i = 0; i < dx.size(); ++i) starts[i] = -pads[i];
  const int x = in(0), y = out(0);
  cl_mem mm = meta(strided_meta(dx, dy, starts, steps));
  const int n = int(numel(dy));
  emit([=](Run& r) { launch(r, "strided_copy", n, r.value(x), r.value(y), mm, n, value); });
}

void Lowerer::resize() {
  const Dims dx = in_dims(0), dy = out_dims(0);
  const std::string mode = node_->attr_string("mode", "nearest");
  const bool old = node_->op_type() == "Upsample" || node_->opset() < 11;
  const std::string ctm =
      old ? "asymmetric" : node_->attr_string("coordinate_transformation_mode", "half_pixel");
  // The scales of H and W: given, or implied by the sizes.
  std::vector<float> scales;
  const size_t scales_input = old ? 1 : 2;
  if (node_->has_input(scales_input) && sdk::element_count(node_->input(scales_input)) > 0)
    scales = const_floats(scales_input);
  float sh = float(dy[2]) / float(dx[2]), sw = float(dy[3]) / float(dx[3]);
  if (scales.size() == 4) {
    sh = scales[2];
    sw = scales[3];
  }
  const int ctm_code = ctm == "half_pixel"           ? 0
                       : ctm == "pytorch_half_pixel" ? 1
                       : ctm == "align_corners"      ? 2
                                                     : 3;
  const int m = mode == "nearest" ? 0 : 1;
  const int x = in(0), y = out(0);
  const int NC = int(dx[0] * dx[1]), H = int(dx[2]), W = int(dx[3]), OH = int(dy[2]),
            OW = int(dy[3]);
  const float rh = 1.0f / sh, rw = 1.0f / sw;
  const int n = int(numel(dy));
  emit([=](Run& r) {
    launch(r, "resize2d", n, r.value(x), r.value(y), NC, H, W, OH, OW, m, ctm_code, rh, rw);
  });
}

void Lowerer::node(size_t index) {
  node_ = std::make_unique<sdk::NodeRef>(&view_, index);
  label_ = "node '" + std::string(node_->name()) + "' (" + std::string(node_->op_type()) + ")";
  const std::string_view t = node_->op_type();
  if (typed_op(*node_)) return typed();
  if (auto b = binary_ops().find(t); b != binary_ops().end()) return binary(b->second);
  if (auto u = unary_ops().find(t); u != unary_ops().end()) return unary(u->second);
  if (copy_ops().count(t) != 0) return copy();
  if (t == "Conv") return conv();
  if (t == "MaxPool" || t == "AveragePool") return pool();
  if (t == "GlobalAveragePool") return global_pool(0);
  if (t == "GlobalMaxPool") return global_pool(2);
  if (t == "ReduceMean") return reduce(0);
  if (t == "ReduceSum") return reduce(1);
  if (t == "ReduceMax") return reduce(2);
  if (t == "ReduceMin") return reduce(3);
  if (t == "ReduceProd") return reduce(4);
  if (t == "Softmax" || t == "LogSoftmax") return softmax(t == "LogSoftmax");
  if (t == "LayerNormalization") return layernorm();
  if (t == "BatchNormalization") return batchnorm();
  if (t == "Gemm") return gemm_node();
  if (t == "MatMul") return matmul();
  if (t == "Concat") return concat();
  if (t == "Transpose") return transpose();
  if (t == "Gather") return gather();
  if (t == "Slice") return slice();
  if (t == "Pad") return pad();
  if (t == "Resize" || t == "Upsample") return resize();
  throw sdk::unsupported("GpuOcl has no kernel for " + std::string(t));
}

// --- support ------------------------------------------------------------------

bool static_float(const bp_value_t& v) {
  for (size_t d = 0; d < v.rank; ++d)
    if (v.shape[d] < 0) return false;
  return v.dtype == BP_DTYPE_FLOAT32;
}

// Integer arithmetic, comparisons, logic, Where, Cast: static shapes; the
// dtypes the typed kernels take.
std::string check_typed(const sdk::NodeRef& n) {
  const std::string_view t = n.op_type();
  const size_t arity = t == "Where"                                               ? 3
                       : (t == "Not" || t == "Cast" || unary_ops().count(t) != 0) ? 1
                                                                                  : 2;
  if (n.num_inputs() != arity)
    return std::string(t) + " of " + std::to_string(n.num_inputs()) +
           " operands (GpuOcl: exactly " + std::to_string(arity) + ")";
  std::vector<const bp_value_t*> values;
  for (size_t i = 0; i < arity; ++i) {
    if (!n.has_input(i)) return "an omitted input";
    values.push_back(&n.input(i));
  }
  if (n.raw().outputs[0] < 0) return "no output";
  values.push_back(&n.output(0));
  for (const bp_value_t* v : values) {
    for (size_t d = 0; d < v->rank; ++d)
      if (v->shape[d] < 0) return "a dynamic shape";
    if (sdk::element_count(*v) >= (int64_t{1} << 31)) return "tensor too large";
    if (type_suffix(v->dtype) == nullptr)
      return std::string("dtype ") + sdk::dtype_name(v->dtype) +
             " (GpuOcl: float32, int32, int64, bool)";
  }
  const bp_dtype_t a = values[0]->dtype, y = values.back()->dtype;
  if (half_elementwise(n)) {
    for (const bp_value_t* v : values)
      if (v->dtype != BP_DTYPE_FLOAT16) return "float16 mixed with other types";
    return "";
  }
  if ((a == BP_DTYPE_FLOAT16 || y == BP_DTYPE_FLOAT16) && a != y &&
      !(t == "Cast" && (a == BP_DTYPE_FLOAT32 || y == BP_DTYPE_FLOAT32)))
    return "float16 other than element-wise arithmetic, activations and Cast with float32";
  if (t == "Cast") return "";
  if (t == "Where") {
    if (a != BP_DTYPE_BOOL || values[1]->dtype != y || values[2]->dtype != y)
      return "Where's operand types";
    return "";
  }
  if (values[1]->dtype != a) return "operands of two types";
  if (a == BP_DTYPE_FLOAT16 || y == BP_DTYPE_FLOAT16) return "float16 " + std::string(t);
  if (logic_ops().count(t) != 0 || t == "Not")
    return a == BP_DTYPE_BOOL && y == BP_DTYPE_BOOL ? "" : "logic of other than bools";
  if (compare_ops().count(t) != 0) {
    if (y != BP_DTYPE_BOOL) return "a comparison not to bool";
    if (a == BP_DTYPE_BOOL && t != "Equal") return "an ordering of bools";
    return "";
  }
  return integer(a) && y == a ? "" : "integer arithmetic of mixed types";
}

std::string check_specific(const sdk::NodeRef& n) {
  const std::string_view t = n.op_type();
  auto constant_input = [&](size_t i) { return !n.has_input(i) || is_constant(n.input(i)); };
  const size_t rank = n.input(0).rank;
  if (t == "Conv") {
    if (rank != 4 && rank != 3) return "only 1-d and 2-d convolutions";
    if (n.input(1).rank != rank) return "weight rank differs from the input's";
  } else if (t == "MaxPool" || t == "AveragePool") {
    if (rank != 4) return "only 2-d pooling";
    if (n.num_outputs() > 1 && n.raw().outputs[1] >= 0) return "MaxPool's Indices output";
  } else if (t == "GlobalAveragePool" || t == "GlobalMaxPool") {
    if (rank < 3) return "input rank below 3";
  } else if (t == "Clip") {
    if (!constant_input(1) || !constant_input(2)) return "min/max are not constants";
  } else if (t.substr(0, 6) == "Reduce") {
    if (!constant_input(1)) return "axes are not a constant";
    if (n.attr_int("keepdims", 1) == 0 && n.output(0).rank == 0 && rank == 0) return "";
  } else if (t == "LayerNormalization") {
    if (n.num_outputs() > 1 && n.raw().outputs[1] >= 0) return "Mean output";
    if (n.num_outputs() > 2 && n.raw().outputs[2] >= 0) return "InvStdDev output";
  } else if (t == "BatchNormalization") {
    for (size_t i = 1; i < 5; ++i)
      if (!n.has_input(i) || !is_constant(n.input(i))) return "statistics are not constants";
    if (n.num_outputs() > 1 || n.attr_int("training_mode", 0) != 0) return "training mode";
    if (rank < 2) return "input rank below 2";
  } else if (t == "Gemm") {
    if (rank != 2 || n.input(1).rank != 2) return "Gemm operands are not matrices";
  } else if (t == "MatMul") {
    if (rank == 1 && n.input(1).rank > 2) return "a 1-d A times a batch of B";
    if (rank == 0 || n.input(1).rank == 0) return "scalar MatMul operands";
  } else if (t == "Gather") {
    if (n.input(1).dtype != BP_DTYPE_INT64) return "indices are not int64";
  } else if (t == "Slice") {
    for (size_t i = 1; i < n.num_inputs(); ++i)
      if (!constant_input(i)) return "starts/ends/axes/steps are not constants";
  } else if (t == "Pad") {
    if (n.attr_string("mode", "constant") != "constant") return "only constant padding";
    if (!constant_input(1) || !constant_input(2)) return "pads/value are not constants";
    if (n.num_inputs() > 3 && n.has_input(3)) return "Pad's axes input";
  } else if (t == "Resize" || t == "Upsample") {
    if (rank != 4) return "only 4-d Resize";
    const std::string mode = n.attr_string("mode", "nearest");
    const bool old = t == "Upsample" || n.opset() < 11;
    const std::string ctm =
        old ? "asymmetric" : n.attr_string("coordinate_transformation_mode", "half_pixel");
    if (mode != "nearest" && mode != "linear") return "mode '" + mode + "'";
    if (ctm != "half_pixel" && ctm != "pytorch_half_pixel" && ctm != "align_corners" &&
        ctm != "asymmetric")
      return "coordinate_transformation_mode '" + ctm + "'";
    if (mode == "nearest" && !old && n.attr_string("nearest_mode", "round_prefer_floor") != "floor")
      return "nearest_mode other than floor";
    if (n.output(0).shape[0] != n.input(0).shape[0] || n.output(0).shape[1] != n.input(0).shape[1])
      return "resizes the batch or channel axis";
    for (size_t i = 1; i < n.num_inputs(); ++i)
      if (!constant_input(i)) return "roi/scales/sizes are not constants";
    if (n.attr_int("antialias", 0) != 0) return "antialias";
    if (n.has_attr("axes")) return "Resize's axes attribute";
    if (n.attr_int("exclude_outside", 0) != 0) return "exclude_outside";
  } else if (t == "Dropout") {
    if (n.num_outputs() > 1 && n.raw().outputs[1] >= 0) return "Dropout's mask output";
    if (n.num_inputs() > 2 && n.has_input(2)) return "Dropout's training_mode input";
  }
  return "";
}

}  // namespace

std::string check_node(const bp_graph_view_t& view, size_t index) {
  const sdk::NodeRef n(&view, index);
  const std::string_view t = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    return "GpuOcl has no kernel for " + std::string(n.domain()) + "." + std::string(t);
  if (binary_ops().count(t) == 0 && unary_ops().count(t) == 0 && copy_ops().count(t) == 0 &&
      other_ops().count(t) == 0 && !typed_op(n))
    return "GpuOcl has no kernel for " + std::string(t);
  if (n.num_inputs() == 0 || !n.has_input(0)) return "no input";
  if (typed_op(n)) return check_typed(n);
  // Max and Min take 1 to N operands in ONNX; the binary kernel takes two.
  if (binary_ops().count(t) != 0 && (n.num_inputs() != 2 || !n.has_input(1)))
    return std::string(t) + " of " + std::to_string(n.num_inputs()) +
           " operands (GpuOcl: exactly 2)";
  // The data operands and every output are float32 with static shapes;
  // Gather's indices and the small integer inputs (shapes, axes) are read
  // as constants or by index kernels.
  const bool data_in_1 = binary_ops().count(t) != 0 || t == "Gemm" || t == "MatMul" ||
                         t == "Conv" || t == "LayerNormalization" || t == "Concat";
  for (size_t i = 0; i < n.num_inputs(); ++i) {
    if (!n.has_input(i)) continue;
    const bp_value_t& v = n.input(i);
    const bool data = i == 0 || data_in_1 || t == "BatchNormalization";
    if (data && !static_float(v))
      return "input '" + std::string(v.name) + "' is " + backplane::sdk::dtype_name(v.dtype) +
             " or has a dynamic shape (GpuOcl: static float32)";
    if (sdk::element_count(v) >= (int64_t{1} << 31)) return "tensor too large";
  }
  for (size_t i = 0; i < n.num_outputs(); ++i) {
    if (n.raw().outputs[i] < 0) continue;
    if (!static_float(n.output(i))) return "output is not a static float32 tensor";
    if (sdk::element_count(n.output(i)) >= (int64_t{1} << 31)) return "tensor too large";
  }
  return check_specific(n);
}

Lowered lower(Device& device, const sdk::Host& host, const bp_graph_view_t& view,
              const std::function<void(size_t, const std::string&)>& rejected,
              const StoredWeights* stored) {
  Lowered out;
  Lowerer l(device, host, view, out, stored);
  for (size_t i = 0; i < view.num_nodes; ++i) {
    if (l.skipped(i)) continue;
    try {
      l.node(i);
    } catch (const sdk::Error& e) {
      if (e.code() != BP_STATUS_UNSUPPORTED) throw;
      rejected(i, e.what());
    }
  }
  return out;
}

}  // namespace gpuocl
