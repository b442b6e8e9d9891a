// op_registry.cpp — OpSchema's declaration and checks, OpRegistry's lookups,
// and the built-in registry.
#include "ir/op_registry.hpp"

#include <algorithm>
#include <set>

namespace backplane::ir {

namespace dtypes {
const DTypeList kFloat = {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64};
const DTypeList kSignedInt = {DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64};
const DTypeList kUnsignedInt = {DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64};
const DTypeList kInt = {DType::kInt8,  DType::kInt16,  DType::kInt32,  DType::kInt64,
                        DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64};
const DTypeList kNumeric = {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64,
                            DType::kInt8,    DType::kInt16,    DType::kInt32,   DType::kInt64,
                            DType::kUInt8,   DType::kUInt16,   DType::kUInt32,  DType::kUInt64};
const DTypeList kIndex = {DType::kInt32, DType::kInt64};
const DTypeList kAll = {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64,
                        DType::kInt8,    DType::kInt16,    DType::kInt32,   DType::kInt64,
                        DType::kUInt8,   DType::kUInt16,   DType::kUInt32,  DType::kUInt64,
                        DType::kBool};
}  // namespace dtypes

// ------------------------------------------------------------------ OpSchema

OpSchema::OpSchema(std::string domain, std::string name, int since_version)
    : domain_(OpRegistry::normalize_domain(domain)),
      name_(std::move(name)),
      since_(since_version) {}

OpSchema& OpSchema::doc(std::string text) {
  doc_ = std::move(text);
  return *this;
}

OpSchema& OpSchema::input(std::string name, std::string type_var, ParamSpec::Arity arity,
                          int min_count) {
  inputs_.push_back(ParamSpec{std::move(name), std::move(type_var), arity, min_count, true});
  return *this;
}

OpSchema& OpSchema::optional_input(std::string name, std::string type_var) {
  return input(std::move(name), std::move(type_var), ParamSpec::Arity::kOptional, 0);
}

OpSchema& OpSchema::variadic_input(std::string name, std::string type_var, int min_count,
                                   bool homogeneous) {
  inputs_.push_back(ParamSpec{std::move(name), std::move(type_var), ParamSpec::Arity::kVariadic,
                              min_count, homogeneous});
  return *this;
}

OpSchema& OpSchema::output(std::string name, std::string type_var, ParamSpec::Arity arity,
                           int min_count) {
  outputs_.push_back(ParamSpec{std::move(name), std::move(type_var), arity, min_count, true});
  return *this;
}

OpSchema& OpSchema::optional_output(std::string name, std::string type_var) {
  return output(std::move(name), std::move(type_var), ParamSpec::Arity::kOptional, 0);
}

OpSchema& OpSchema::variadic_output(std::string name, std::string type_var, int min_count,
                                    bool homogeneous) {
  outputs_.push_back(ParamSpec{std::move(name), std::move(type_var), ParamSpec::Arity::kVariadic,
                               min_count, homogeneous});
  return *this;
}

OpSchema& OpSchema::type(std::string var, DTypeList allowed) {
  types_.push_back(TypeVar{std::move(var), std::move(allowed)});
  return *this;
}

OpSchema& OpSchema::attr(std::string name, AttrType type) {
  attrs_.push_back(AttrSpec{std::move(name), type, false, std::nullopt});
  return *this;
}

namespace {
Attribute make_attr(const std::string& name, AttrType type) {
  Attribute a;
  a.name = name;
  a.type = type;
  return a;
}
}  // namespace

OpSchema& OpSchema::attr(std::string name, AttrType type, int64_t value) {
  Attribute a = make_attr(name, type);
  a.i = value;
  attrs_.push_back(AttrSpec{std::move(name), type, false, std::move(a)});
  return *this;
}

OpSchema& OpSchema::attr(std::string name, AttrType type, float value) {
  Attribute a = make_attr(name, type);
  a.f = value;
  attrs_.push_back(AttrSpec{std::move(name), type, false, std::move(a)});
  return *this;
}

OpSchema& OpSchema::attr(std::string name, AttrType type, std::string value) {
  Attribute a = make_attr(name, type);
  a.s = std::move(value);
  attrs_.push_back(AttrSpec{std::move(name), type, false, std::move(a)});
  return *this;
}

OpSchema& OpSchema::attr(std::string name, AttrType type, std::vector<int64_t> value) {
  Attribute a = make_attr(name, type);
  a.ints = std::move(value);
  attrs_.push_back(AttrSpec{std::move(name), type, false, std::move(a)});
  return *this;
}

OpSchema& OpSchema::attr(std::string name, AttrType type, std::vector<float> value) {
  Attribute a = make_attr(name, type);
  a.floats = std::move(value);
  attrs_.push_back(AttrSpec{std::move(name), type, false, std::move(a)});
  return *this;
}

OpSchema& OpSchema::required_attr(std::string name, AttrType type) {
  attrs_.push_back(AttrSpec{std::move(name), type, true, std::nullopt});
  return *this;
}

OpSchema& OpSchema::allow_unknown_attrs() {
  allow_unknown_attrs_ = true;
  return *this;
}

OpSchema& OpSchema::infer(InferFunction fn) {
  infer_ = std::move(fn);
  return *this;
}

OpSchema& OpSchema::shape_dependence(ShapeDependence d) {
  dependence_ = d;
  return *this;
}

OpSchema& OpSchema::shape_inputs(std::vector<std::string> names) {
  for (std::string& n : names) shape_input_names_.push_back(std::move(n));
  return *this;
}

std::vector<size_t> OpSchema::data_shape_inputs(const Node& node,
                                                const std::vector<char>& from_data) const {
  std::vector<size_t> out;
  const size_t n_in = node.inputs.size() - std::min(node.inputs.size(), node.implicit_inputs);
  for (size_t i = 0; i < n_in; ++i) {
    const ParamSpec* p = i < inputs_.size() ? &inputs_[i] : nullptr;
    const int v = node.inputs[i];
    if (p != nullptr && p->decides_shape && v >= 0 && static_cast<size_t>(v) < from_data.size() &&
        from_data[v])
      out.push_back(i);
  }
  return out;
}

OpSchema& OpSchema::host_op() {
  host_op_ = true;
  return *this;
}

const AttrSpec* OpSchema::find_attr(const std::string& name) const {
  for (const AttrSpec& a : attrs_)
    if (a.name == name) return &a;
  return nullptr;
}

namespace {

std::string dtype_list(const DTypeList& list) {
  std::string s;
  for (DType d : list) s += std::string(s.empty() ? "" : ", ") + dtype_name(d);
  return s;
}

// [min, max] count of actual parameters a formal list accepts.
std::pair<size_t, size_t> arity_range(const std::vector<ParamSpec>& params) {
  size_t lo = 0, hi = 0;
  bool unbounded = false;
  for (const ParamSpec& p : params) {
    switch (p.arity) {
      case ParamSpec::Arity::kSingle:
        ++lo, ++hi;
        break;
      case ParamSpec::Arity::kOptional:
        ++hi;
        break;
      case ParamSpec::Arity::kVariadic:
        lo += static_cast<size_t>(std::max(0, p.min_count));
        unbounded = true;
        break;
    }
  }
  return {lo, unbounded ? SIZE_MAX : hi};
}

std::string count_text(std::pair<size_t, size_t> r) {
  if (r.second == SIZE_MAX) return "at least " + std::to_string(r.first);
  if (r.first == r.second) return std::to_string(r.first);
  return std::to_string(r.first) + " to " + std::to_string(r.second);
}

// The formal parameter actual index `i` binds to.
const ParamSpec* formal_for(const std::vector<ParamSpec>& params, size_t i) {
  if (params.empty()) return nullptr;
  if (i < params.size() && params[i].arity != ParamSpec::Arity::kVariadic) return &params[i];
  // A variadic parameter is always the last one.
  if (params.back().arity == ParamSpec::Arity::kVariadic)
    return i + 1 >= params.size() ? &params.back() : &params[i];
  return i < params.size() ? &params[i] : nullptr;
}

}  // namespace

Status OpSchema::check(const Graph& graph, const Node& node) const {
  auto fail = [&](const std::string& m) { return invalid_argument(node.describe() + ": " + m); };
  // Inputs and outputs: the count, and the required ones present.
  const bool declared = !inputs_.empty() || !outputs_.empty();
  if (declared) {
    const size_t n_in = node.inputs.size() - std::min(node.inputs.size(), node.implicit_inputs);
    const auto in_range = arity_range(inputs_);
    // Trailing omitted inputs do not count.
    size_t used = n_in;
    while (used > 0 && node.inputs[used - 1] < 0) --used;
    if (used > in_range.second || (n_in < in_range.first))
      return fail("has " + std::to_string(n_in) + " inputs, expected " + count_text(in_range) +
                  " (" + name_ + " at opset " + std::to_string(graph.opset(domain_)) + ")");
    for (size_t i = 0; i < n_in; ++i) {
      const ParamSpec* p = formal_for(inputs_, i);
      if (p != nullptr && p->arity == ParamSpec::Arity::kSingle && node.inputs[i] < 0)
        return fail("required input '" + p->name + "' (" + std::to_string(i) + ") is missing");
    }
    const auto out_range = arity_range(outputs_);
    if (node.outputs.size() > out_range.second || node.outputs.size() < out_range.first)
      return fail("has " + std::to_string(node.outputs.size()) + " outputs, expected " +
                  count_text(out_range));
  }
  // Attributes. (Specialising checks every node for every new signature:
  // nothing here allocates unless it fails.)
  for (size_t i = 0; i < node.attributes.size(); ++i) {
    const Attribute& a = node.attributes[i];
    for (size_t j = 0; j < i; ++j)
      if (node.attributes[j].name == a.name)
        return fail("attribute '" + a.name + "' appears twice");
    const AttrSpec* spec = find_attr(a.name);
    if (spec == nullptr) {
      if (allow_unknown_attrs_) continue;
      return fail("unknown attribute '" + a.name + "' (" + name_ + " has " + [&] {
        std::string s;
        for (const AttrSpec& x : attrs_) s += (s.empty() ? "" : ", ") + x.name;
        return s.empty() ? std::string("none") : s;
      }() + ")");
    }
    if (spec->type != AttrType::kUndefined && a.type != spec->type)
      return fail("attribute '" + a.name + "' has type " + attr_type_name(a.type) + ", expected " +
                  attr_type_name(spec->type));
  }
  for (const AttrSpec& spec : attrs_)
    if (spec.required && std::none_of(node.attributes.begin(), node.attributes.end(),
                                      [&](const Attribute& a) { return a.name == spec.name; }))
      return fail("required attribute '" + spec.name + "' is missing");
  // Element types against the type variables.
  if (declared && !types_.empty()) {
    struct Bound {
      const TypeVar* var;
      DType dtype;
      const ParamSpec* param;  // who bound it, for the message
      int value;
    };
    std::vector<Bound> bound;  // a few at most
    auto who = [&](const ParamSpec* p, int value) {
      return "input '" + p->name + "' ('" + graph.values[value].name + "')";
    };
    auto bind = [&](const ParamSpec* p, int value) -> Status {
      if (p == nullptr || p->type_var.empty() || value < 0) return ok_status();
      const Value& v = graph.values[value];
      if (v.dtype == DType::kUndefined) return ok_status();  // not inferred yet
      const TypeVar* tv = nullptr;
      for (const TypeVar& t : types_)
        if (t.name == p->type_var) tv = &t;
      if (tv == nullptr) return ok_status();
      if (std::find(tv->allowed.begin(), tv->allowed.end(), v.dtype) == tv->allowed.end())
        return fail(who(p, value) + " has dtype " + dtype_name(v.dtype) + "; " + name_ + " takes " +
                    dtype_list(tv->allowed));
      if (p->arity == ParamSpec::Arity::kVariadic && !p->homogeneous) return ok_status();
      auto it = std::find_if(bound.begin(), bound.end(),
                             [&](const Bound& b) { return b.var->name == tv->name; });
      if (it == bound.end()) {
        bound.push_back({tv, v.dtype, p, value});
        return ok_status();
      }
      if (it->dtype != v.dtype)
        return fail(who(p, value) + " has dtype " + dtype_name(v.dtype) + " but " +
                    who(it->param, it->value) + " has " + dtype_name(it->dtype) + " (both are " +
                    tv->name + ")");
      return ok_status();
    };
    const size_t n_in = node.inputs.size() - std::min(node.inputs.size(), node.implicit_inputs);
    for (size_t i = 0; i < n_in; ++i)
      BP_RETURN_IF_ERROR(bind(formal_for(inputs_, i), node.inputs[i]));
  }
  return ok_status();
}

// --------------------------------------------------------------- OpRegistry

Status OpRegistry::add(OpSchema schema, const std::string& provider) {
  schema.domain_ = normalize_domain(schema.domain_);
  const std::string what = "operator '" + schema.name_ + "' (domain '" + schema.domain_ + "')";
  if (!schema.infer_) return invalid_argument(what + ": schema has no shape inference");
  if (schema.since_ < 1) return invalid_argument(what + ": since_version must be at least 1");
  if (parent_ != nullptr && parent_->knows(schema.domain_, schema.name_))
    return invalid_argument(what + " is already defined" +
                            (schema.domain_.empty() ? " by ONNX" : " by another provider"));
  for (const std::string& name : schema.shape_input_names_) {
    auto it = std::find_if(schema.inputs_.begin(), schema.inputs_.end(),
                           [&](const ParamSpec& p) { return p.name == name; });
    if (it == schema.inputs_.end() || it->arity == ParamSpec::Arity::kVariadic)
      return invalid_argument(what + ": shape input '" + name + "' is not a single input");
    it->decides_shape = true;
  }
  schema.provider_ = provider;
  auto& versions = ops_[{schema.domain_, schema.name_}];
  for (const auto& s : versions)
    if (s->since_ == schema.since_)
      return invalid_argument(what + " version " + std::to_string(schema.since_) +
                              " is defined twice");
  versions.push_back(std::make_unique<OpSchema>(std::move(schema)));
  std::sort(versions.begin(), versions.end(),
            [](const auto& a, const auto& b) { return a->since_ < b->since_; });
  for (size_t i = 0; i < versions.size(); ++i)
    versions[i]->last_ = i + 1 < versions.size() ? versions[i + 1]->since_ - 1 : INT32_MAX;
  return ok_status();
}

const OpSchema* OpRegistry::find(const std::string& domain, const std::string& op,
                                 int64_t opset) const {
  auto it = ops_.find(view_key(domain, op));
  if (it != ops_.end()) {
    const OpSchema* best = nullptr;
    for (const auto& s : it->second)
      if (s->since_ <= opset) best = s.get();
    return best;
  }
  return parent_ != nullptr ? parent_->find(domain, op, opset) : nullptr;
}

bool OpRegistry::knows(const std::string& domain, const std::string& op) const {
  if (ops_.count(view_key(domain, op)) > 0) return true;
  return parent_ != nullptr && parent_->knows(domain, op);
}

Result<const OpSchema*> OpRegistry::lookup(const std::string& domain, const std::string& op,
                                           int64_t opset) const {
  if (const OpSchema* s = find(domain, op, opset)) return s;
  const std::string d = normalize_domain(domain);
  if (!knows(d, op)) return unsupported("unsupported operator '" + op + "' (domain '" + d + "')");
  // Known, but not at this opset: say from which version it is.
  int first = INT32_MAX;
  for (const OpSchema* s : schemas())
    if (s->domain() == d && s->name() == op) first = std::min(first, s->since_version());
  return unsupported("operator '" + op + "' (domain '" + d + "') is known from opset " +
                     std::to_string(first) + "; the model imports opset " + std::to_string(opset) +
                     " of that domain");
}

std::vector<const OpSchema*> OpRegistry::schemas() const {
  std::vector<const OpSchema*> out;
  if (parent_ != nullptr) out = parent_->schemas();
  for (const auto& [key, versions] : ops_)
    for (const auto& s : versions) out.push_back(s.get());
  std::sort(out.begin(), out.end(), [](const OpSchema* a, const OpSchema* b) {
    if (a->domain() != b->domain()) return a->domain() < b->domain();
    if (a->name() != b->name()) return a->name() < b->name();
    return a->since_version() < b->since_version();
  });
  return out;
}

std::vector<char> values_from_data(const Graph& graph) {
  // Random ops (shape_inference.cpp keeps them from folding) give data.
  static const std::set<std::string> random = {"RandomNormal",  "RandomNormalLike",
                                               "RandomUniform", "RandomUniformLike",
                                               "Multinomial",   "Bernoulli"};
  std::vector<char> data(graph.values.size(), 0);
  for (int v : graph.inputs)
    if (!graph.values[v].is_constant()) data[v] = 1;
  for (const Node& node : graph.nodes) {
    const bool plain = node.domain.empty() || node.domain == "ai.onnx";
    bool out = plain && random.count(node.op_type) > 0;
    if (!(plain && (node.op_type == "Shape" || node.op_type == "Size")))
      for (int v : node.inputs)
        if (v >= 0 && data[v]) out = true;
    // A body reads values of the enclosing graphs and the data of its own
    // iterations: what a control-flow node makes is data.
    for (const Attribute& a : node.attributes)
      if (a.type == AttrType::kGraph || a.type == AttrType::kGraphs) out = true;
    for (int v : node.outputs)
      if (v >= 0 && !graph.values[v].is_constant()) data[v] = out;
  }
  return data;
}

const OpRegistry& OpRegistry::builtin() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    ops::register_nn_ops(*r);
    ops::register_elementwise_ops(*r);
    ops::register_tensor_ops(*r);
    ops::register_math_ops(*r);
    ops::register_indexing_ops(*r);
    ops::register_detection_ops(*r);
    ops::register_rnn_ops(*r);
    ops::register_quant_ops(*r);
    ops::register_signal_ops(*r);
    ops::register_control_ops(*r);
    ops::register_opset18_ops(*r);
    return r;
  }();
  return *registry;
}

}  // namespace backplane::ir
