// infer_shapes: resolve input shapes, then walk the nodes in topological
// order inferring each output's dtype and static shape and folding nodes whose
// inputs are all constants (through the caller's ConstantEvaluator, except
// Shape, Size and Constant, which need no kernel).
#include "ir/constant_folding.hpp"
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

namespace backplane::ir {

namespace detail {

Status InferCtx::error(const std::string& message) const {
  return invalid_argument(node.describe() + ": " + message);
}

Status InferCtx::unsupported_error(const std::string& message) const {
  return unsupported(node.describe() + ": " + message);
}

Status InferCtx::require_inputs(size_t min, size_t max) const {
  const size_t n = num_inputs();
  if (n < min || n > max) {
    std::string want =
        min == max ? std::to_string(min) : std::to_string(min) + " to " + std::to_string(max);
    return error("has " + std::to_string(n) + " inputs, expected " + want + " (opset " +
                 std::to_string(opset) + ")");
  }
  for (size_t i = 0; i < min; ++i)
    if (!has(i)) return error("required input " + std::to_string(i) + " is missing");
  return ok_status();
}

Status InferCtx::expect_dtype(size_t i, std::initializer_list<DType> allowed,
                              const char* param) const {
  const DType t = dtype(i);
  if (std::find(allowed.begin(), allowed.end(), t) != allowed.end()) return ok_status();
  std::string names;
  for (DType d : allowed) names += std::string(names.empty() ? "" : ", ") + dtype_name(d);
  // What ONNX allows is the schema's type list (OpSchema::check, an invalid
  // model); a list here is what the runtime implements: unsupported.
  return unsupported_error("input '" + std::string(param) + "' ('" + name(i) + "') has dtype " +
                           dtype_name(t) + ", supported: " + names);
}

Status InferCtx::expect_same_dtype(size_t a, size_t b) const {
  if (dtype(a) == dtype(b)) return ok_status();
  return error("inputs '" + name(a) + "' (" + dtype_name(dtype(a)) + ") and '" + name(b) + "' (" +
               dtype_name(dtype(b)) + ") must have the same dtype");
}

Status InferCtx::expect_rank(size_t i, int64_t r, const char* param) const {
  if (rank(i) == r) return ok_status();
  return error("input '" + std::string(param) + "' ('" + name(i) + "') has " +
               std::to_string(rank(i)) + " dims " + shape_to_string(shape(i)) + ", expected " +
               std::to_string(r));
}

Result<std::vector<int64_t>> InferCtx::ints_input(size_t i, const char* param) const {
  if (!has(i)) return error(std::string("input '") + param + "' is missing");
  const Tensor* t = constant(i);
  if (t == nullptr)
    return error(std::string("input '") + param + "' ('" + name(i) +
                 "') must be constant to infer a static shape");
  std::vector<int64_t> v(static_cast<size_t>(t->numel()));
  if (t->dtype() == DType::kInt64) {
    std::copy_n(t->data_as<int64_t>(), v.size(), v.begin());
  } else if (t->dtype() == DType::kInt32) {
    std::copy_n(t->data_as<int32_t>(), v.size(), v.begin());
  } else {
    return error(std::string("input '") + param + "' ('" + name(i) + "') has dtype " +
                 dtype_name(t->dtype()) + ", expected int64 or int32");
  }
  return v;
}

Result<std::vector<double>> InferCtx::numbers_input(size_t i, const char* param) const {
  if (!has(i)) return error(std::string("input '") + param + "' is missing");
  const Tensor* t = constant(i);
  if (t == nullptr)
    return error(std::string("input '") + param + "' ('" + name(i) +
                 "') must be constant to infer a static shape");
  const size_t n = static_cast<size_t>(t->numel());
  std::vector<double> v(n);
  switch (t->dtype()) {
    case DType::kFloat32:
      std::copy_n(t->data_as<float>(), n, v.begin());
      break;
    case DType::kInt64:
      std::copy_n(t->data_as<int64_t>(), n, v.begin());
      break;
    case DType::kInt32:
      std::copy_n(t->data_as<int32_t>(), n, v.begin());
      break;
    case DType::kFloat64:
      std::copy_n(t->data_as<double>(), n, v.begin());
      break;
    case DType::kFloat16: {
      const uint16_t* h = t->data_as<uint16_t>();
      for (size_t k = 0; k < n; ++k) {
        // IEEE half -> double.
        const int sign = (h[k] >> 15) & 1, exp = (h[k] >> 10) & 0x1f, man = h[k] & 0x3ff;
        double d;
        if (exp == 0) d = std::ldexp(man, -24);
        else if (exp == 31) d = man ? std::nan("") : INFINITY;
        else d = std::ldexp(man + 1024, exp - 25);
        v[k] = sign ? -d : d;
      }
      break;
    }
    default:
      return error(std::string("input '") + param + "' ('" + name(i) + "') has unsupported dtype " +
                   dtype_name(t->dtype()));
  }
  return v;
}

Result<int64_t> InferCtx::normalize_axis(int64_t axis, int64_t r, const char* what,
                                         bool inclusive) const {
  const int64_t hi = inclusive ? r : r - 1;
  if (axis < -r || axis > hi)
    return error(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
                 std::to_string(r));
  return axis < 0 ? axis + r : axis;
}

Result<std::vector<int64_t>> InferCtx::normalize_axes(const std::vector<int64_t>& axes, int64_t r,
                                                      const char* what) const {
  std::vector<int64_t> out;
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    BP_ASSIGN_OR_RETURN(int64_t n, normalize_axis(a, r, what));
    if (!seen.insert(n).second)
      return error(std::string(what) + " " + shape_to_string(axes) + " repeat axis " +
                   std::to_string(a));
    out.push_back(n);
  }
  return out;
}

Result<Shape> broadcast_shapes(const InferCtx& c, const std::vector<size_t>& inputs) {
  size_t r = 0;
  for (size_t i : inputs) r = std::max(r, c.shape(i).size());
  Shape out(r, 1);
  for (size_t d = 0; d < r; ++d) {
    for (size_t i : inputs) {
      const Shape& s = c.shape(i);
      if (d + s.size() < r) continue;
      const int64_t v = s[d + s.size() - r];
      if (v == out[d] || v == 1) continue;
      if (out[d] != 1) {
        std::string names;
        for (size_t j : inputs)
          names += std::string(names.empty() ? "" : ", ") + "'" + c.name(j) + "' " +
                   shape_to_string(c.shape(j));
        return c.error("cannot broadcast inputs " + names + " (dim " + std::to_string(d) +
                       " of the result: " + std::to_string(out[d]) + " vs " + std::to_string(v) +
                       ")");
      }
      out[d] = v;
    }
  }
  return out;
}

}  // namespace detail

namespace {

using detail::InferCtx;
using detail::OutInfo;

std::string dim_label(const Value& v, size_t d) {
  if (d < v.dim_params.size() && !v.dim_params[d].empty()) return " ('" + v.dim_params[d] + "')";
  return "";
}

Status resolve_inputs(Graph& g, const std::map<std::string, Shape>& given) {
  std::set<std::string> names;
  for (int id : g.inputs) names.insert(g.values[id].name);
  for (const auto& [name, shape] : given) {
    if (names.count(name) == 0) {
      int id = g.find_value(name);
      if (id >= 0 && g.values[id].is_constant())
        return invalid_argument("a shape is given for '" + name +
                                "', which is an initializer, not a graph input");
      return not_found("a shape is given for '" + name + "', which is not a graph input");
    }
  }
  for (int id : g.inputs) {
    Value& v = g.values[id];
    const std::string what = "input '" + v.name + "'";
    if (v.dtype == DType::kUndefined)
      return invalid_argument(what + " has no element type in the model");
    auto it = given.find(v.name);
    if (it != given.end()) {
      const Shape& s = it->second;
      for (int64_t d : s)
        if (d < 0)
          return invalid_argument(what + ": given shape " + shape_to_string(s) +
                                  " has a negative dim");
      if (v.has_shape) {
        if (s.size() != v.shape.size())
          return invalid_argument(what + ": given shape " + shape_to_string(s) + " has rank " +
                                  std::to_string(s.size()) + " but the model declares rank " +
                                  std::to_string(v.shape.size()) + " " + shape_to_string(v.shape));
        for (size_t d = 0; d < s.size(); ++d)
          if (v.shape[d] >= 0 && v.shape[d] != s[d])
            return invalid_argument(what + ": given shape " + shape_to_string(s) +
                                    " contradicts dim " + std::to_string(d) + " = " +
                                    std::to_string(v.shape[d]) + " in the model");
      } else {
        v.dim_params.assign(s.size(), "");
      }
      if (detail::sat_numel(s) > detail::kMaxElements)
        return invalid_argument(what + ": given shape " + shape_to_string(s) +
                                " is too large for any tensor");
      v.shape = s;
      v.has_shape = true;
      continue;
    }
    if (!v.has_shape)
      return invalid_argument(what + " has no shape in the model; give a concrete shape");
    if (detail::sat_numel(v.shape) > detail::kMaxElements)
      return invalid_argument(what + " has shape " + shape_to_string(v.shape) +
                              ", too large for any tensor");
    for (size_t d = 0; d < v.shape.size(); ++d)
      if (v.shape[d] < 0)
        return invalid_argument(
            what + " dim " + std::to_string(d) + dim_label(v, d) +
            (d < v.dim_params.size() && !v.dim_params[d].empty() ? " is symbolic" : " is unknown") +
            "; give a concrete shape");
  }
  return ok_status();
}

// What the model declared for a value a node produces (value_info / outputs).
struct Declared {
  DType dtype = DType::kUndefined;
  bool has_shape = false;
  Shape shape;
};

// Checks an inferred type against what the model declared for `value`.
Status check_declared(const Node& node, const Value& value, const Declared& declared,
                      const OutInfo& got) {
  auto what = [&] { return node.describe() + ": output '" + value.name + "'"; };
  if (declared.dtype != DType::kUndefined && declared.dtype != got.dtype)
    return invalid_argument(what() + " is declared " + dtype_name(declared.dtype) +
                            " in the model but inferred " + dtype_name(got.dtype));
  if (!declared.has_shape) return ok_status();
  bool ok = declared.shape.size() == got.shape.size();
  for (size_t d = 0; ok && d < got.shape.size(); ++d)
    ok = declared.shape[d] < 0 || got.shape[d] < 0 || declared.shape[d] == got.shape[d];
  if (!ok)
    return invalid_argument(what() + " is declared with shape " + shape_to_string(declared.shape) +
                            " in the model but inferred " + shape_to_string(got.shape));
  return ok_status();
}

// The opset a node's domain is imported at; a domain the model does not
// import (custom ops of a backend) matches any version.
int64_t node_opset(const Graph& g, const Node& node) {
  const int64_t v = g.opset(node.domain);
  return v > 0 ? v : INT32_MAX;
}

// Whether `node` may be folded once its inputs are constant: not an op the
// host runs (control flow), not one whose output shape depends on data
// (inference cannot size its outputs), not a random one, and one that either
// ir folds itself or an evaluator may compute.
bool foldable(const OpSchema& schema, const Node& node, const InferOptions& options) {
  if (schema.is_host_op() || schema.shape_dependence() == ShapeDependence::kData) return false;
  if (detail::nondeterministic(node)) return false;
  // DequantizeLinear of constant int8 weights stays as it is, as in ONNX
  // Runtime: a backend with int8 kernels runs the weights as int8 (and they
  // take a quarter of the memory); one without computes them when it compiles.
  if (node.domain.empty() && node.op_type == "DequantizeLinear") return false;
  const bool own = node.domain.empty() && (node.op_type == "Shape" || node.op_type == "Size" ||
                                           node.op_type == "Constant");
  return own || options.evaluator != nullptr;
}

// Whether every output of the node is present and empty: it computes
// nothing, whatever its inputs hold.
bool outputs_empty(const Node& node, const InferCtx& c) {
  for (size_t i = 0; i < node.outputs.size(); ++i)
    if (node.outputs[i] < 0 || detail::sat_numel(c.out[i].shape) != 0) return false;
  return !node.outputs.empty();
}

// Folds node `c.node`, whose outputs `c.out` are inferred, when it can be:
// every input constant (a Shape or Size only needs its input's static shape)
// and its outputs within the size bound, or every output empty (a batch of
// none: no backend is asked to run it, nor reads its weights). Returns
// whether it did.
Result<bool> fold_node(Graph& g, const OpSchema& schema, const InferCtx& c,
                       const InferOptions& options) {
  const Node& node = c.node;
  if (c.out.empty()) return false;
  if (!schema.is_host_op() && !detail::nondeterministic(node) && outputs_empty(node, c)) {
    for (size_t i = 0; i < node.outputs.size(); ++i)
      g.make_constant(node.outputs[i], Tensor(c.out[i].dtype, c.out[i].shape));
    return true;
  }
  if (!foldable(schema, node, options)) return false;
  bool all_const = true;
  for (int v : node.inputs)
    if (v >= 0 && !g.values[v].is_constant()) all_const = false;
  const bool shape_only =
      node.domain.empty() && (node.op_type == "Shape" || node.op_type == "Size");
  if (!all_const && !shape_only) return false;
  int64_t total = 0;
  for (const OutInfo& o : c.out)
    total = std::min(total + detail::sat_numel(o.shape), INT64_MAX / 2);
  if (total > options.max_fold_elements) return false;

  std::vector<Tensor> outs(node.outputs.size());
  for (size_t i = 0; i < outs.size(); ++i)
    if (node.outputs[i] >= 0) outs[i] = Tensor(c.out[i].dtype, c.out[i].shape);
  if (shape_only && node.op_type == "Shape") {
    int64_t first, last;
    BP_RETURN_IF_ERROR(detail::shape_range(c, &first, &last));
    for (int64_t i = first; i < last; ++i) outs[0].data_as<int64_t>()[i - first] = c.shape(0)[i];
  } else if (shape_only) {
    outs[0].data_as<int64_t>()[0] = detail::sat_numel(c.shape(0));
  } else if (node.domain.empty() && node.op_type == "Constant") {
    BP_ASSIGN_OR_RETURN(Tensor t, detail::constant_attr_value(c));
    outs[0] = t.clone();
  } else {
    std::vector<const Tensor*> ins;
    for (size_t i = 0; i < c.num_inputs(); ++i) ins.push_back(c.constant(i));
    BP_ASSIGN_OR_RETURN(bool done, options.evaluator->evaluate(g, node, ins, outs));
    if (!done) return false;
  }
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const int v = node.outputs[i];
    if (v < 0) continue;
    if (outs[i].dtype() != c.out[i].dtype || outs[i].shape() != c.out[i].shape)
      return internal_error(node.describe() + ": constant folding produced " +
                            dtype_name(outs[i].dtype()) + " " + shape_to_string(outs[i].shape()) +
                            ", inference said " + dtype_name(c.out[i].dtype) + " " +
                            shape_to_string(c.out[i].shape));
    g.make_constant(v, std::move(outs[i]));
  }
  return true;
}

Status infer_node(Graph& g, const InferOptions& options, size_t index,
                  const std::vector<Declared>& declared, std::vector<bool>& folded) {
  const Node& node = g.nodes[index];
  // A schema kept from an earlier visit was checked against the node then;
  // what check() reads (the node, its attributes, its inputs' dtypes) is the
  // same at every visit of one graph.
  const OpSchema* schema = options.schemas != nullptr ? (*options.schemas)[index] : nullptr;
  const bool checked = schema != nullptr;
  if (schema == nullptr) {
    auto found = options.registry->lookup(node.domain, node.op_type, node_opset(g, node));
    if (!found.ok())
      return Status(found.status().code(), node.describe() + ": " + found.status().message());
    schema = *found;
  }
  for (int v : node.inputs)
    if (v >= 0 && (g.values[v].dtype == DType::kUndefined || !g.values[v].has_shape))
      return internal_error(node.describe() + ": input '" + g.values[v].name + "' has no type");
  // A value whose shape depends on data (a -1 dim from a kData node) ends a
  // stage (session/staged_model.hpp): what reads it is specialised once the
  // value exists. A walk over a whole graph stops here.
  for (int v : node.inputs)
    if (v >= 0 && !g.values[v].shape_is_static())
      return unsupported(node.describe() + ": input '" + g.values[v].name + "' has shape " +
                         shape_to_string(g.values[v].shape) +
                         ", known only at run time (it depends on data); static shape inference "
                         "cannot go past it");
  if (!checked) {
    BP_RETURN_IF_ERROR(schema->check(g, node));
    if (options.schemas != nullptr) (*options.schemas)[index] = schema;
  }
  InferCtx c(g, node);
  BP_RETURN_IF_ERROR(schema->infer_fn()(c));
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const int v = node.outputs[i];
    if (v < 0) continue;
    const OutInfo& o = c.out[i];
    if (o.dtype == DType::kUndefined)
      return invalid_argument(node.describe() + ": has no output " + std::to_string(i) +
                              " (it has " + std::to_string(node.outputs.size()) + " outputs)");
    const bool data_dependent = schema->shape_dependence() == ShapeDependence::kData;
    for (int64_t d : o.shape)
      if (d < 0 && !(d == -1 && data_dependent))
        return internal_error(node.describe() + ": inferred a negative dim");
    if (detail::sat_numel(o.shape) > detail::kMaxElements)
      return invalid_argument(node.describe() + ": output " + std::to_string(i) +
                              " would have shape " + shape_to_string(o.shape) +
                              ", too large for any tensor");
    BP_RETURN_IF_ERROR(check_declared(node, g.values[v], declared[v], o));
    Value& val = g.values[v];
    val.dtype = o.dtype;
    val.shape = o.shape;
    val.has_shape = true;
    val.dim_params.assign(o.shape.size(), "");
  }

  for (int v : node.outputs)  // data-dependent dims: nothing to fold yet
    if (v >= 0 && !g.values[v].shape_is_static()) return ok_status();
  BP_ASSIGN_OR_RETURN(bool done, fold_node(g, *schema, c, options));
  folded[index] = done;
  return ok_status();
}

void drop_folded(Graph& g, const std::vector<bool>& folded);

// Each op's schema says from which opset it is known; above kMaxOpset a
// newer ONNX may have changed an op whose schema we would wrongly reuse.
// Every op opset 18 changed has its 18 schema (ops_opset18.cpp).
Status check_opset(const Graph& g) {
  constexpr int64_t kMaxOpset = 18;
  auto it = g.opsets.find("");
  if (it == g.opsets.end()) it = g.opsets.find("ai.onnx");
  if (it != g.opsets.end() && (it->second < 1 || it->second > kMaxOpset))
    return Status(StatusCode::kVersionMismatch,
                  "opset " + std::to_string(it->second) +
                      " of the default ONNX domain is not supported (supported: 1 to " +
                      std::to_string(kMaxOpset) + ")");
  return ok_status();
}

// What the model declared for the values nodes produce, taken out of them:
// inference gives them their types and checks them against these.
std::vector<Declared> take_declared(Graph& g) {
  std::vector<Declared> declared(g.values.size());
  for (const Node& node : g.nodes)
    for (int v : node.outputs)
      if (v >= 0 && !g.values[v].is_constant()) {
        Value& value = g.values[v];
        declared[v] = {value.dtype, value.has_shape, std::move(value.shape)};
        value.dtype = DType::kUndefined;
        value.has_shape = false;
        value.shape.clear();
      }
  return declared;
}

Status infer_impl(Graph& g, const std::map<std::string, Shape>& input_shapes,
                  const InferOptions& options) {
  BP_RETURN_IF_ERROR(check_opset(g));
  BP_RETURN_IF_ERROR(resolve_inputs(g, input_shapes));
  BP_RETURN_IF_ERROR(g.topo_sort());

  const std::vector<Declared> declared = take_declared(g);
  std::vector<bool> folded(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    BP_RETURN_IF_ERROR(infer_node(g, options, i, declared, folded));

  // Folded nodes are gone: their outputs are constants now.
  drop_folded(g, folded);
  for (int v : g.outputs)
    if (!g.values[v].has_shape)
      return internal_error("graph output '" + g.values[v].name + "' has no static shape");
  return ok_status();
}

// Drops the nodes marked in `folded` (their outputs are constants now) and
// fixes producers; then removes what nobody needs.
void drop_folded(Graph& g, const std::vector<bool>& folded) {
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!folded[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  for (Value& v : g.values)
    if (!v.is_constant()) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].outputs)
      if (v >= 0) g.values[v].producer = static_cast<int>(i);
  g.remove_dead();
}

Status fold_impl(Graph& g, InferOptions options) {
  BP_RETURN_IF_ERROR(g.topo_sort());
  const std::vector<Value> original(g.values.begin(), g.values.end());
  std::vector<Declared> declared;
  for (const Value& v : original) declared.push_back({v.dtype, v.has_shape, v.shape});
  std::vector<bool> folded(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    const OpSchema* schema = options.registry->find(node.domain, node.op_type, node_opset(g, node));
    bool all_const = schema != nullptr && foldable(*schema, node, options);
    for (int v : node.inputs)
      if (v >= 0 && !g.values[v].is_constant()) all_const = false;
    if (!all_const) continue;
    // Inference checks against what the model declared; start from nothing.
    for (int v : node.outputs)
      if (v >= 0) {
        g.values[v].dtype = DType::kUndefined;
        g.values[v].has_shape = false;
        g.values[v].shape.clear();
      }
    BP_RETURN_IF_ERROR(infer_node(g, options, i, declared, folded));
    if (!folded[i])  // inference alone: keep what the model declared
      for (int v : node.outputs)
        if (v >= 0) g.values[v] = original[v];
  }
  drop_folded(g, folded);
  return ok_status();
}

// The options with their defaults filled in.
InferOptions resolved(InferOptions options) {
  if (options.registry == nullptr) options.registry = &OpRegistry::builtin();
  return options;
}

}  // namespace

Status fold_constants(Graph& graph, const InferOptions& options) {
  Status s = fold_impl(graph, resolved(options));
  if (!s.ok() && !graph.source.empty()) s.with_context(graph.source);
  return s;
}

Status infer_shapes(Graph& graph, const std::map<std::string, Shape>& input_shapes,
                    const InferOptions& options) {
  Status s = infer_impl(graph, input_shapes, resolved(options));
  if (!s.ok() && !graph.source.empty()) s.with_context(graph.source);
  return s;
}

Status fold_constants(Graph& graph, const OpRegistry* registry) {
  InferOptions options;
  options.registry = registry;
  return fold_constants(graph, options);
}

Status infer_shapes(Graph& graph, const std::map<std::string, Shape>& input_shapes,
                    const OpRegistry* registry) {
  InferOptions options;
  options.registry = registry;
  return infer_shapes(graph, input_shapes, options);
}

struct IncrementalInference::State {
  const Graph& source;
  InferOptions options;
  Graph g;                    // `source`, topologically sorted, folded nodes kept
  bool ready = false;         // g is set up (else the next call copies `source`)
  bool inferred = false;      // every node has outputs from an earlier call
  std::vector<Value> inputs;  // the graph inputs as `source` declares them
  std::vector<Declared> declared;
  std::vector<bool> folded;
  uint64_t calls = 0;                    // calls of infer(), this one included
  std::vector<uint64_t> changed_at;      // per value, the call that last changed it
  std::vector<const OpSchema*> schemas;  // per node of g, once found
  size_t reinferred = 0;
  bool folding_changed = true;

  State(const Graph& graph, const InferOptions& o) : source(graph), options(resolved(o)) {}

  // g as infer_impl has it before its first node: a copy of `source`,
  // sorted, every produced value's model-declared type moved to `declared`.
  Status reset() {
    ready = inferred = false;
    g = source;
    BP_RETURN_IF_ERROR(check_opset(g));
    BP_RETURN_IF_ERROR(g.topo_sort());
    inputs.clear();
    for (int v : g.inputs) inputs.push_back(g.values[v]);
    declared = take_declared(g);
    folded.assign(g.nodes.size(), false);
    changed_at.assign(g.values.size(), 0);
    schemas.assign(g.nodes.size(), nullptr);
    options.schemas = &schemas;
    ready = true;
    return ok_status();
  }

  // Node i again: its outputs forgotten (unfolded), inferred, and marked
  // changed where they differ from what they were.
  Status reinfer(size_t i) {
    struct Was {
      DType dtype;
      bool has_shape;
      Shape shape;
      bool constant = false;
      Tensor value;  // of a constant
    };
    const Node& node = g.nodes[i];
    std::vector<Was> was(node.outputs.size());
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const int v = node.outputs[k];
      if (v < 0) continue;
      Value& value = g.values[v];
      was[k] = {value.dtype, value.has_shape, std::move(value.shape), value.is_constant(), {}};
      if (value.is_constant()) {
        auto c = g.constants.find(value.constant_key);
        if (c != g.constants.end()) {
          was[k].value = std::move(c->second);
          g.constants.erase(c);
        }
        value.constant_key.clear();
        value.producer = static_cast<int>(i);
      }
      value.dtype = DType::kUndefined;
      value.has_shape = false;
      value.shape.clear();
    }
    const bool was_folded = folded[i];
    folded[i] = false;
    BP_RETURN_IF_ERROR(infer_node(g, options, i, declared, folded));
    if (folded[i] != was_folded) folding_changed = true;
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      const int v = node.outputs[k];
      if (v < 0) continue;
      const Value& value = g.values[v];
      const Tensor* now = g.constant(v);
      bool same = inferred && value.dtype == was[k].dtype && value.has_shape == was[k].has_shape &&
                  value.shape == was[k].shape && (now != nullptr) == was[k].constant;
      if (same && now != nullptr)
        same = now->size_bytes() == was[k].value.size_bytes() &&
               (now->data() == was[k].value.data() ||
                std::memcmp(now->data(), was[k].value.data(), now->size_bytes()) == 0);
      if (!same) changed_at[v] = calls;
    }
    return ok_status();
  }

  Status infer(const std::map<std::string, Shape>& input_shapes) {
    if (!ready) BP_RETURN_IF_ERROR(reset());
    ++calls;
    // The inputs as declared, then given these shapes; changed if unlike the last call's.
    std::vector<Shape> last(g.inputs.size());
    for (size_t k = 0; k < g.inputs.size(); ++k) {
      Value& value = g.values[g.inputs[k]];
      last[k] = std::move(value.shape);
      value = inputs[k];
    }
    BP_RETURN_IF_ERROR(resolve_inputs(g, input_shapes));
    for (size_t k = 0; k < g.inputs.size(); ++k)
      if (!inferred || g.values[g.inputs[k]].shape != last[k]) changed_at[g.inputs[k]] = calls;

    reinferred = 0;
    folding_changed = !inferred;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      bool reached = !inferred;
      for (int v : g.nodes[i].inputs)
        if (v >= 0 && changed_at[v] == calls) reached = true;
      if (!reached) continue;
      ++reinferred;
      BP_RETURN_IF_ERROR(reinfer(i));
    }
    inferred = true;
    for (int v : g.outputs)
      if (!g.values[v].has_shape)
        return internal_error("graph output '" + g.values[v].name + "' has no static shape");
    return ok_status();
  }
};

IncrementalInference::IncrementalInference(const Graph& graph, const InferOptions& options)
    : s_(std::make_unique<State>(graph, options)) {}

IncrementalInference::~IncrementalInference() = default;

Status IncrementalInference::infer(const std::map<std::string, Shape>& input_shapes) {
  Status status = s_->infer(input_shapes);
  if (!status.ok()) s_->ready = false;
  return status;
}

void IncrementalInference::prune_into(
    Graph& out, const std::function<std::string(const Value&)>& rename) const {
  out.assign_pruned(s_->g, s_->folded);
  if (!rename) return;
  for (Value& value : out.values) {
    if (!value.is_constant()) continue;
    std::string key = rename(value);
    if (key.empty() || key == value.constant_key) continue;
    auto node = out.constants.extract(value.constant_key);
    value.constant_key = std::move(key);
    node.key() = value.constant_key;
    out.constants.insert(std::move(node));
  }
}

size_t IncrementalInference::reinferred() const { return s_->reinferred; }

const std::vector<uint64_t>& IncrementalInference::changed_at() const { return s_->changed_at; }

uint64_t IncrementalInference::calls() const { return s_->calls; }

bool IncrementalInference::folding_changed() const { return s_->folding_changed; }

const Graph& IncrementalInference::inferred() const { return s_->g; }

const std::vector<bool>& IncrementalInference::folded() const { return s_->folded; }

bool is_known_op(const std::string& domain, const std::string& op_type) {
  return OpRegistry::builtin().knows(domain, op_type);
}

namespace detail {

bool nondeterministic(const Node& node) {
  static const std::set<std::string> ops = {"RandomNormal",  "RandomNormalLike",
                                            "RandomUniform", "RandomUniformLike",
                                            "Multinomial",   "Bernoulli"};
  if (!node.domain.empty() || node.op_type.empty()) return false;
  const char first = node.op_type[0];  // most nodes stop here: inference asks of every one
  if (first != 'R' && first != 'M' && first != 'B') return false;
  return ops.count(node.op_type) > 0;
}

}  // namespace detail

}  // namespace backplane::ir
