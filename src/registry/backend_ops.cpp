#include "registry/backend_ops.hpp"

#include "ir/shape_inference_internal.hpp"
#include "registry/abi_attributes.hpp"
#include "registry/loaded_backend.hpp"

#include <set>

namespace backplane {
namespace {

bool valid_attr_type(bp_attr_type_t t) {
  switch (t) {
    case BP_ATTR_FLOAT:
    case BP_ATTR_INT:
    case BP_ATTR_STRING:
    case BP_ATTR_TENSOR:
    case BP_ATTR_FLOATS:
    case BP_ATTR_INTS:
    case BP_ATTR_STRINGS:
      return true;
    default:
      return false;
  }
}

Result<BackendOp> check_one(const bp_op_schema_t& s, const ir::OpRegistry& known) {
  if (s.struct_size < BP_STRUCT_SIZE(bp_op_schema_t, doc))
    return invalid_argument("struct_size " + std::to_string(s.struct_size) + " is too small");
  if (s.name == nullptr || *s.name == '\0') return invalid_argument("has no name");
  BackendOp op;
  op.name = s.name;
  op.domain = s.domain != nullptr ? s.domain : "";
  const std::string what = "operator '" + op.name + "' (domain '" + op.domain + "')";
  if (ir::OpRegistry::normalize_domain(op.domain).empty())
    return invalid_argument(what +
                            ": a backend defines operators of a domain of its own, not "
                            "of the default ONNX domain");
  if (known.knows(op.domain, op.name))
    return invalid_argument(what + " is already known to the runtime");
  if (s.since_version < 1) return invalid_argument(what + ": since_version must be at least 1");
  if (s.max_inputs < s.min_inputs || s.max_outputs < s.min_outputs || s.max_outputs == 0)
    return invalid_argument(what + ": bounds [" + std::to_string(s.min_inputs) + ", " +
                            std::to_string(s.max_inputs) + "] inputs, [" +
                            std::to_string(s.min_outputs) + ", " + std::to_string(s.max_outputs) +
                            "] outputs are not ranges with at least one output");
  // A bound is a count of parameters, not an array size: keep it sane.
  constexpr uint32_t kMaxBound = 1024;
  if ((s.max_inputs != BP_OP_UNBOUNDED && s.max_inputs > kMaxBound) ||
      (s.max_outputs != BP_OP_UNBOUNDED && s.max_outputs > kMaxBound))
    return invalid_argument(what + ": more than " + std::to_string(kMaxBound) +
                            " inputs or outputs; use BP_OP_UNBOUNDED for any number");
  if (s.infer == nullptr) return invalid_argument(what + ": has no infer callback");
  if (s.num_attributes > 0 && s.attributes == nullptr)
    return invalid_argument(what + ": attributes is NULL");
  std::set<std::string> names;
  for (size_t i = 0; i < s.num_attributes; ++i) {
    const bp_op_attr_t& a = s.attributes[i];
    if (a.struct_size < BP_STRUCT_SIZE(bp_op_attr_t, required) || a.name == nullptr || !*a.name)
      return invalid_argument(what + ": attribute " + std::to_string(i) + " is malformed");
    if (!valid_attr_type(a.type))
      return invalid_argument(what + ": attribute '" + a.name + "' has type " +
                              std::to_string(a.type) + ", which the ABI does not pass");
    if (!names.insert(a.name).second)
      return invalid_argument(what + ": attribute '" + a.name + "' is listed twice");
    op.attributes.push_back({a.name, a.type, a.required});
  }
  op.since_version = s.since_version;
  op.min_inputs = s.min_inputs;
  op.max_inputs = s.max_inputs;
  op.min_outputs = s.min_outputs;
  op.max_outputs = s.max_outputs;
  op.infer = s.infer;
  op.user_data = s.user_data;
  op.doc = s.doc != nullptr ? s.doc : "";
  return op;
}

// Calls op.infer for the node of `c` and copies what it set into c.out.
Status call_infer(const BackendOp& op, const LoadedBackend& backend, ir::detail::InferCtx& c) {
  const ir::Node& node = c.node;
  const size_t n_in = c.num_inputs(), n_out = node.outputs.size();
  std::vector<bp_dtype_t> dtypes(n_in, BP_DTYPE_UNDEFINED);
  std::vector<bp_shape_t> shapes(n_in, bp_shape_t{0, nullptr});
  std::vector<const void*> constants(n_in, nullptr);
  std::vector<int32_t> in_index(n_in, -1), out_index(n_out, -1);
  for (size_t i = 0; i < n_in; ++i) {
    if (!c.has(i)) continue;
    in_index[i] = static_cast<int32_t>(i);
    dtypes[i] = static_cast<bp_dtype_t>(c.dtype(i));
    shapes[i] = bp_shape_t{c.shape(i).size(), c.shape(i).data()};
    if (const Tensor* t = c.constant(i)) constants[i] = t->data();
  }
  for (size_t i = 0; i < n_out; ++i)
    if (node.has_output(i)) out_index[i] = static_cast<int32_t>(i);
  AbiAttributes attrs(node);
  bp_node_t bn{};
  bn.struct_size = BP_STRUCT_SIZE(bp_node_t, attributes);
  bn.name = node.name.c_str();
  bn.op_type = node.op_type.c_str();
  bn.domain = node.domain.c_str();
  bn.opset = c.opset;
  bn.num_inputs = n_in;
  bn.inputs = in_index.data();
  bn.num_outputs = n_out;
  bn.outputs = out_index.data();
  bn.num_attributes = attrs.size();
  bn.attributes = attrs.data();
  bp_infer_result result{std::vector<DType>(n_out, DType::kUndefined), std::vector<Shape>(n_out)};
  bp_infer_args_t args{};
  args.struct_size = BP_STRUCT_SIZE(bp_infer_args_t, result);
  args.node = &bn;
  args.num_inputs = n_in;
  args.input_dtypes = dtypes.data();
  args.input_shapes = shapes.data();
  args.input_constants = constants.data();
  args.num_outputs = n_out;
  args.result = &result;
  bp_status_t* status = nullptr;
  try {
    status = op.infer(op.user_data, &args);
  } catch (...) {  // a hand-written table may throw despite the ABI
    return Status(StatusCode::kBackendError,
                  node.describe() + ": backend '" + backend.id() + "': infer threw an exception");
  }
  Status s = backend.check(status, "infer");
  if (!s.ok()) return Status(s.code(), node.describe() + ": " + s.message());
  for (size_t i = 0; i < n_out; ++i) {
    if (!node.has_output(i)) continue;
    if (result.dtypes[i] == DType::kUndefined)
      return Status(StatusCode::kBackendError, node.describe() + ": backend '" + backend.id() +
                                                   "': infer did not set output " +
                                                   std::to_string(i));
    c.set(i, result.dtypes[i], result.shapes[i]);
  }
  return ok_status();
}

}  // namespace

Result<std::vector<BackendOp>> check_backend_ops(const bp_op_schema_t* schemas, size_t count,
                                                 const ir::OpRegistry& known) {
  if (count > 0 && schemas == nullptr)
    return invalid_argument("get_op_schemas returned " + std::to_string(count) +
                            " schemas but no array");
  std::vector<BackendOp> ops;
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < count; ++i) {
    Result<BackendOp> op = check_one(schemas[i], known);
    if (!op.ok()) return Status(op.status()).with_context("op schema " + std::to_string(i));
    if (!seen.insert({op->domain, op->name}).second)
      return invalid_argument("op schema " + std::to_string(i) + ": operator '" + op->name +
                              "' (domain '" + op->domain + "') is defined twice");
    ops.push_back(std::move(*op));
  }
  return ops;
}

ir::OpSchema to_ir_schema(const BackendOp& op, std::shared_ptr<const LoadedBackend> backend) {
  ir::OpSchema s(op.domain, op.name, op.since_version);
  s.doc(op.doc);
  for (uint32_t i = 0; i < op.min_inputs; ++i) s.input("input" + std::to_string(i));
  if (op.max_inputs == BP_OP_UNBOUNDED) {
    s.variadic_input("inputs", "", 0, false);
  } else {
    for (uint32_t i = op.min_inputs; i < op.max_inputs; ++i)
      s.optional_input("input" + std::to_string(i));
  }
  for (uint32_t i = 0; i < op.min_outputs; ++i) s.output("output" + std::to_string(i));
  if (op.max_outputs == BP_OP_UNBOUNDED) {
    s.variadic_output("outputs", "", 0, false);
  } else {
    for (uint32_t i = op.min_outputs; i < op.max_outputs; ++i)
      s.optional_output("output" + std::to_string(i));
  }
  for (const BackendOp::Attr& a : op.attributes) {
    if (a.required) s.required_attr(a.name, static_cast<ir::AttrType>(a.type));
    else s.attr(a.name, static_cast<ir::AttrType>(a.type));
  }
  s.infer([op, backend = std::move(backend)](ir::detail::InferCtx& c) {
    return call_infer(op, *backend, c);
  });
  return s;
}

}  // namespace backplane
