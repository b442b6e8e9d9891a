// infer_shapes: resolve input shapes, then walk the nodes in topological
// order inferring each output's dtype and static shape and folding nodes whose
// inputs are all constants.
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cmath>
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
  return error("input '" + std::string(param) + "' ('" + name(i) + "') has dtype " + dtype_name(t) +
               ", expected " + names);
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

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

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

// Checks an inferred type against what the model declared (value_info / outputs).
Status check_declared(const Node& node, const Value& declared, const OutInfo& got) {
  auto what = [&] { return node.describe() + ": output '" + declared.name + "'"; };
  if (declared.dtype != DType::kUndefined && declared.dtype != got.dtype)
    return invalid_argument(what() + " is declared " + dtype_name(declared.dtype) +
                            " in the model but inferred " + dtype_name(got.dtype));
  if (!declared.has_shape) return ok_status();
  bool ok = declared.shape.size() == got.shape.size();
  for (size_t d = 0; ok && d < got.shape.size(); ++d)
    ok = declared.shape[d] < 0 || declared.shape[d] == got.shape[d];
  if (!ok)
    return invalid_argument(what() + " is declared with shape " + shape_to_string(declared.shape) +
                            " in the model but inferred " + shape_to_string(got.shape));
  return ok_status();
}

Status infer_node(Graph& g, size_t index, const std::vector<Value>& declared,
                  std::vector<bool>& folded) {
  const Node& node = g.nodes[index];
  if (!is_known_op(node.domain, node.op_type))
    return unsupported(node.describe() + ": unsupported operator '" + node.op_type + "' (domain '" +
                       node.domain + "')");
  for (int v : node.inputs)
    if (v >= 0 && (g.values[v].dtype == DType::kUndefined || !g.values[v].has_shape))
      return internal_error(node.describe() + ": input '" + g.values[v].name + "' has no type");
  detail::InferFn fn = detail::find_infer_fn(node.op_type);
  InferCtx c(g, node);
  BP_RETURN_IF_ERROR(fn(c));
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const int v = node.outputs[i];
    if (v < 0) continue;
    const OutInfo& o = c.out[i];
    if (o.dtype == DType::kUndefined)
      return invalid_argument(node.describe() + ": has no output " + std::to_string(i) +
                              " (it has " + std::to_string(node.outputs.size()) + " outputs)");
    for (int64_t d : o.shape)
      if (d < 0) return internal_error(node.describe() + ": inferred a negative dim");
    if (detail::sat_numel(o.shape) > detail::kMaxElements)
      return invalid_argument(node.describe() + ": output " + std::to_string(i) +
                              " would have shape " + shape_to_string(o.shape) +
                              ", too large for any tensor");
    BP_RETURN_IF_ERROR(check_declared(node, declared[v], o));
    Value& val = g.values[v];
    val.dtype = o.dtype;
    val.shape = o.shape;
    val.has_shape = true;
    val.dim_params.assign(o.shape.size(), "");
  }

  bool all_const = true;
  for (int v : node.inputs)
    if (v >= 0 && !g.values[v].is_constant()) all_const = false;
  // Every shape is static here, so Shape and Size nodes always fold.
  const bool shape_only = node.op_type == "Shape" || node.op_type == "Size";
  if (!(all_const || shape_only) || !detail::const_eval_supported(node.op_type)) return ok_status();
  std::vector<Tensor> outs;
  BP_ASSIGN_OR_RETURN(bool done, detail::const_eval(c, &outs));
  if (!done) return ok_status();
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
  folded[index] = true;
  return ok_status();
}

void drop_folded(Graph& g, const std::vector<bool>& folded);

Status infer_impl(Graph& g, const std::map<std::string, Shape>& input_shapes) {
  auto it = g.opsets.find("");
  if (it == g.opsets.end()) it = g.opsets.find("ai.onnx");
  if (it != g.opsets.end() && (it->second < 7 || it->second > 17))
    return Status(StatusCode::kVersionMismatch,
                  "opset " + std::to_string(it->second) +
                      " of the default ONNX domain is not supported (supported: 7 to 17)");
  BP_RETURN_IF_ERROR(resolve_inputs(g, input_shapes));
  BP_RETURN_IF_ERROR(g.topo_sort());

  // What the model declared for produced values; inference overwrites it.
  std::vector<Value> declared(g.values.size());
  for (const Node& node : g.nodes)
    for (int v : node.outputs)
      if (v >= 0 && !g.values[v].is_constant()) {
        declared[v] = g.values[v];
        g.values[v].dtype = DType::kUndefined;
        g.values[v].has_shape = false;
        g.values[v].shape.clear();
      }

  std::vector<bool> folded(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    BP_RETURN_IF_ERROR(infer_node(g, i, declared, folded));

  // Folded nodes are gone: their outputs are constants now.
  drop_folded(g, folded);
  for (int v : g.outputs)
    if (!g.values[v].shape_is_static())
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

Status fold_impl(Graph& g) {
  BP_RETURN_IF_ERROR(g.topo_sort());
  std::vector<Value> declared(g.values.begin(), g.values.end());
  std::vector<bool> folded(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    bool all_const =
        is_known_op(node.domain, node.op_type) && detail::const_eval_supported(node.op_type);
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
    BP_RETURN_IF_ERROR(infer_node(g, i, declared, folded));
    if (!folded[i])  // inference alone: keep what the model declared
      for (int v : node.outputs)
        if (v >= 0) g.values[v] = declared[v];
  }
  drop_folded(g, folded);
  return ok_status();
}

}  // namespace

Status fold_constants(Graph& graph) {
  Status s = fold_impl(graph);
  if (!s.ok() && !graph.source.empty()) s.with_context(graph.source);
  return s;
}

Status infer_shapes(Graph& graph, const std::map<std::string, Shape>& input_shapes) {
  Status s = infer_impl(graph, input_shapes);
  if (!s.ok() && !graph.source.empty()) s.with_context(graph.source);
  return s;
}

bool is_known_op(const std::string& domain, const std::string& op_type) {
  // Gelu is standard only from opset 20 and exporters put it in other domains.
  if (op_type == "Gelu") return true;
  return is_default_domain(domain) && detail::find_infer_fn(op_type) != nullptr;
}

}  // namespace backplane::ir
