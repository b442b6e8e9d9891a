// functions.cpp — inlining of model-local functions and of libonnx's function
// bodies, on the protobuf before the importer converts it (so the importer,
// shape inference and the partitioner only ever see primitive nodes).
#include "onnx/functions.hpp"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <google/protobuf/unknown_field_set.h>

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace backplane::onnx_import {

namespace {

using FunctionKey = std::pair<std::string, std::string>;  // (domain, name)

// Calls nested deeper than this are an error (a recursion the key stack
// cannot see, e.g. through ever-new context-dependent bodies, still ends).
constexpr size_t kMaxDepth = 64;
// Rounds of "inline, then infer the types a context-dependent body needs".
constexpr int kMaxTypeRounds = 8;
// FunctionProto.attribute_proto (ONNX 1.15+): attributes with defaults. This
// libonnx predates it, so it arrives as an unknown field.
constexpr int kAttributeProtoField = 11;

std::string norm_domain(const std::string& d) { return d == "ai.onnx" ? std::string() : d; }

std::string attr_type_text(int t) {
  return onnx::AttributeProto::AttributeType_IsValid(t)
             ? onnx::AttributeProto::AttributeType_Name(
                   static_cast<onnx::AttributeProto::AttributeType>(t))
             : std::to_string(t);
}

// A function about to be inlined.
struct Callee {
  FunctionKey key;
  std::string what;  // "function 'F' (domain 'd')", for messages
  const onnx::FunctionProto* body = nullptr;
  onnx::FunctionProto built;  // the body a context-dependent function built for one call
  std::map<std::string, onnx::AttributeProto> defaults;
  bool local = false;
};

// Body names -> model names, one level per (sub)graph.
struct Scope {
  const Scope* parent = nullptr;
  std::map<std::string, std::string> names;
  const std::string* find(const std::string& n) const {
    for (const Scope* s = this; s != nullptr; s = s->parent) {
      auto it = s->names.find(n);
      if (it != s->names.end()) return &it->second;
    }
    return nullptr;
  }
};

// One call being inlined.
struct CallSite {
  const Callee& callee;
  std::string label;  // prefix of every inlined node and value name
  std::map<std::string, const onnx::AttributeProto*> given;  // the caller's attributes
  std::map<std::string, int64_t> versions;                   // the function's opset imports
};

class Inliner {
 public:
  Inliner(onnx::ModelProto& model, const ir::OpRegistry& registry, InlineStats& stats)
      : model_(model), registry_(registry), stats_(stats) {}

  Status run();

 private:
  enum class Kind { kNone, kLocal, kSchema };

  Kind classify(const onnx::NodeProto& n) const;
  const onnx::OpSchema* schema_with_body(const std::string& op) const;
  Status expand_graph(onnx::GraphProto& g, std::vector<FunctionKey>& stack);
  Status expand_node(onnx::NodeProto node, const std::string& label,
                     std::vector<FunctionKey>& stack, std::vector<onnx::NodeProto>& out);
  Result<std::unique_ptr<Callee>> callee_for(const onnx::NodeProto& n, Kind kind,
                                             const std::string& where);
  Status instantiate(const Callee& c, const onnx::NodeProto& call, const std::string& label,
                     std::vector<onnx::NodeProto>& out);
  Status rename_attrs(onnx::NodeProto& n, const Scope& scope, const CallSite& site,
                      const std::string& where);
  Status rename_subgraph(onnx::GraphProto& g, const Scope& outer, const CallSite& site,
                         const std::string& where);
  Status check_body_op(const onnx::NodeProto& n, const CallSite& site, const std::string& where);
  void upgrade_body_op(onnx::NodeProto& n, const CallSite& site, const std::string& label,
                       std::vector<onnx::NodeProto>& out);
  std::map<std::string, int64_t> import_opsets(const onnx::FunctionProto& f);
  std::string fresh(const std::string& base);
  void collect_names(const onnx::GraphProto& g);
  void harvest_types(const onnx::GraphProto& g);
  void infer_types();

  onnx::ModelProto& model_;
  const ir::OpRegistry& registry_;
  InlineStats& stats_;
  std::map<std::string, int64_t> opsets_;  // the model's, plus what functions add
  std::map<FunctionKey, const onnx::FunctionProto*> local_;
  std::map<std::string, onnx::TypeProto> types_;  // main-graph value types known so far
  std::set<std::string> used_;                    // every value name in the model
  size_t added_ = 0;
  bool deferred_ = false;       // a context-dependent call waits for input types
  bool allow_untyped_ = false;  // no more types will come: build without them
};

// ---------------------------------------------------------------- deciding

const onnx::OpSchema* Inliner::schema_with_body(const std::string& op) const {
  auto it = opsets_.find("");
  if (it == opsets_.end() || it->second < 1) return nullptr;
  // libonnx answers with the latest version <= the model's opset. Above the
  // opsets it knows that may be an older meaning, but every op that changed
  // in opset 18 has a schema of its own in the registry (ops_opset18.cpp) and
  // never gets here.
  const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(
      op, static_cast<int>(std::min<int64_t>(it->second, INT32_MAX)), "");
  if (s == nullptr || s->Deprecated()) return nullptr;
  return s->HasFunction() || s->HasContextDependentFunction() ? s : nullptr;
}

Inliner::Kind Inliner::classify(const onnx::NodeProto& n) const {
  const std::string d = norm_domain(n.domain());
  const FunctionKey key{d, n.op_type()};
  if (d.empty()) {
    auto it = opsets_.find("");
    const int64_t v = it == opsets_.end() ? 0 : it->second;
    if (registry_.find("", n.op_type(), v) != nullptr) return Kind::kNone;
    if (local_.count(key) > 0) return Kind::kLocal;
    return schema_with_body(n.op_type()) != nullptr ? Kind::kSchema : Kind::kNone;
  }
  // A backend's own op (or one the core knows in that domain) stays whole.
  if (registry_.knows(d, n.op_type())) return Kind::kNone;
  return local_.count(key) > 0 ? Kind::kLocal : Kind::kNone;
}

Result<std::unique_ptr<Callee>> Inliner::callee_for(const onnx::NodeProto& n, Kind kind,
                                                    const std::string& where) {
  auto c = std::make_unique<Callee>();
  c->key = {norm_domain(n.domain()), n.op_type()};
  if (kind == Kind::kLocal) {
    c->local = true;
    c->body = local_.at(c->key);
    c->what = "function '" + n.op_type() + "' (domain '" + c->key.first + "')";
    const google::protobuf::UnknownFieldSet& unknown =
        c->body->GetReflection()->GetUnknownFields(*c->body);
    for (int i = 0; i < unknown.field_count(); ++i) {
      const google::protobuf::UnknownField& f = unknown.field(i);
      if (f.number() != kAttributeProtoField) continue;
      onnx::AttributeProto a;
      if (f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED ||
          !a.ParseFromString(f.length_delimited()) || a.name().empty())
        return invalid_argument(c->what + ": an attribute default (attribute_proto) is malformed");
      c->defaults[a.name()] = std::move(a);
    }
    return c;
  }
  const onnx::OpSchema* s = schema_with_body(n.op_type());
  c->what = "the ONNX function body of '" + n.op_type() + "' (version " +
            std::to_string(s->since_version()) + ")";
  for (const auto& [name, attr] : s->attributes()) {
    if (attr.default_value.type() == onnx::AttributeProto::UNDEFINED) continue;
    onnx::AttributeProto a = attr.default_value;
    a.set_name(name);
    c->defaults[name] = std::move(a);
  }
  if (s->HasFunction()) {
    c->body = s->GetFunction();
    return c;
  }
  // A context-dependent body: libonnx builds it from the input types.
  std::vector<onnx::TypeProto> types;
  for (const std::string& in : n.input()) {
    auto it = in.empty() ? types_.end() : types_.find(in);
    if (it != types_.end()) {
      types.push_back(it->second);
      continue;
    }
    if (!in.empty() && !allow_untyped_) {
      deferred_ = true;
      return std::unique_ptr<Callee>();  // after the types are inferred
    }
    types.emplace_back();
  }
  try {
    onnx::FunctionBodyBuildContextImpl ctx(n, types);
    if (!s->BuildContextDependentFunction(ctx, c->built))
      return unsupported(where + ": libonnx could not build " + c->what +
                         " for this node (are its input types known?)");
  } catch (const std::exception& e) {
    return invalid_argument(where + ": building " + c->what + ": " + e.what());
  }
  c->body = &c->built;
  return c;
}

// ---------------------------------------------------------------- expanding

Status Inliner::expand_graph(onnx::GraphProto& g, std::vector<FunctionKey>& stack) {
  std::vector<onnx::NodeProto> out;
  out.reserve(static_cast<size_t>(g.node_size()));
  for (int k = 0; k < g.node_size(); ++k) {
    onnx::NodeProto& n = *g.mutable_node(k);
    // The importer's name for an unnamed node is "<op>_<k>"; '#' keeps the op
    // a word of its own in messages about the inlined nodes.
    std::string label = n.name().empty() ? n.op_type() + "#" + std::to_string(k) : n.name();
    BP_RETURN_IF_ERROR(expand_node(std::move(n), label, stack, out));
  }
  g.clear_node();
  for (onnx::NodeProto& n : out) *g.add_node() = std::move(n);
  return ok_status();
}

Status Inliner::expand_node(onnx::NodeProto node, const std::string& label,
                            std::vector<FunctionKey>& stack, std::vector<onnx::NodeProto>& out) {
  const Kind kind = classify(node);
  const std::string where = "node '" + label + "' (" + node.op_type() + ")";
  if (kind == Kind::kNone) {
    if (local_.count({norm_domain(node.domain()), node.op_type()}) > 0) ++stats_.kept_calls;
    for (onnx::AttributeProto& a : *node.mutable_attribute()) {
      if (a.has_g()) BP_RETURN_IF_ERROR(expand_graph(*a.mutable_g(), stack));
      for (onnx::GraphProto& sg : *a.mutable_graphs()) BP_RETURN_IF_ERROR(expand_graph(sg, stack));
    }
    out.push_back(std::move(node));
    return ok_status();
  }
  BP_ASSIGN_OR_RETURN(std::unique_ptr<Callee> callee, callee_for(node, kind, where));
  if (callee == nullptr) {  // deferred until its input types are known
    out.push_back(std::move(node));
    return ok_status();
  }
  if (std::find(stack.begin(), stack.end(), callee->key) != stack.end()) {
    std::string chain;
    for (const FunctionKey& k : stack) chain += k.second + " -> ";
    return invalid_argument(where + ": " + callee->what + " calls itself (" + chain +
                            callee->key.second + "); recursive functions cannot be inlined");
  }
  if (stack.size() >= kMaxDepth)
    return unsupported(where + ": functions nested more than " + std::to_string(kMaxDepth) +
                       " deep");
  std::vector<onnx::NodeProto> body;
  BP_RETURN_IF_ERROR(instantiate(*callee, node, label, body));
  added_ += body.size();
  if (added_ > kMaxInlinedNodes)
    return unsupported(where + ": inlining functions would add more than " +
                       std::to_string(kMaxInlinedNodes) + " nodes to the model");
  ++(callee->local ? stats_.local_calls : stats_.schema_calls);
  stack.push_back(callee->key);
  for (onnx::NodeProto& b : body) {
    const std::string name = b.name();
    BP_RETURN_IF_ERROR(expand_node(std::move(b), name, stack, out));
  }
  stack.pop_back();
  return ok_status();
}

// The function's opset imports; a domain the model lacks is added to it.
std::map<std::string, int64_t> Inliner::import_opsets(const onnx::FunctionProto& f) {
  std::map<std::string, int64_t> versions;
  for (const onnx::OperatorSetIdProto& os : f.opset_import()) {
    const std::string d = norm_domain(os.domain());
    versions[d] = os.version();
    if (opsets_.emplace(d, os.version()).second) {
      onnx::OperatorSetIdProto* added = model_.add_opset_import();
      added->set_domain(d);
      added->set_version(os.version());
    }
  }
  return versions;
}

// A body node is interpreted at the model's opset of its domain; if the
// function imports another version, the op must not have changed between
// the two in a way the node would notice (an attribute it uses gone).
Status Inliner::check_body_op(const onnx::NodeProto& n, const CallSite& site,
                              const std::string& where) {
  const std::string d = norm_domain(n.domain());
  auto mit = opsets_.find(d);
  auto fit = site.versions.find(d);
  if (fit == site.versions.end()) {
    if (mit != opsets_.end()) return ok_status();  // the model's version, as ONNX Runtime does
    return invalid_argument(where + ": domain '" + d +
                            "' is imported neither by the function nor by the model");
  }
  const int64_t fv = fit->second, mv = mit->second;
  if (fv == mv) return ok_status();
  if (classify(n) != Kind::kNone) return ok_status();  // inlined in turn, at its own version
  auto incompatible = [&](const std::string& why) {
    return unsupported(where + ": " + site.callee.what + " imports opset " + std::to_string(fv) +
                       " of domain '" + d + "' and the model opset " + std::to_string(mv) +
                       ", and '" + n.op_type() + "' changed in between (" + why +
                       "); it is not converted between versions");
  };
  // The newest definition either side knows: the registry's (it has opset
  // 18, which this libonnx predates) or libonnx's.
  const ir::OpSchema* ours = registry_.find(d, n.op_type(), mv);
  if (d.empty()) {
    const onnx::OpSchema* sf =
        onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(fv), "");
    const onnx::OpSchema* sm = onnx::OpSchemaRegistry::Schema(
        n.op_type(), static_cast<int>(std::min<int64_t>(mv, INT32_MAX)), "");
    const bool ours_newer =
        ours != nullptr && sm != nullptr && ours->since_version() > sm->since_version();
    if (sf != nullptr && sm != nullptr && sf != sm && !ours_newer) {
      for (const onnx::AttributeProto& a : n.attribute()) {
        auto it = sm->attributes().find(a.name());
        if (it == sm->attributes().end())
          return incompatible("version " + std::to_string(sm->since_version()) +
                              " has no attribute '" + a.name() + "'");
        if (a.type() != onnx::AttributeProto::UNDEFINED && it->second.type != a.type())
          return incompatible("attribute '" + a.name() + "' is " + attr_type_text(it->second.type) +
                              " in version " + std::to_string(sm->since_version()));
      }
      if (n.input_size() > sm->max_input())
        return incompatible("version " + std::to_string(sm->since_version()) + " takes at most " +
                            std::to_string(sm->max_input()) + " inputs");
    }
  }
  if (ours != nullptr && ours->since_version() > fv && !ours->allows_unknown_attrs())
    for (const onnx::AttributeProto& a : n.attribute())
      if (ours->find_attr(a.name()) == nullptr)
        return incompatible("version " + std::to_string(ours->since_version()) +
                            " has no attribute '" + a.name() + "'");
  return ok_status();
}

// libonnx's bodies (and exporters' functions) import older opsets than the
// models calling them. The changes that only moved an attribute into an
// input are carried over here, so such a body runs at the model's opset:
// axes of Reduce* (an input from 18; ReduceSum from 13), of Squeeze and
// Unsqueeze (13), Split's split (13), and Split-18's num_outputs when it
// splits evenly. The attribute becomes a Constant node before `n`.
void Inliner::upgrade_body_op(onnx::NodeProto& n, const CallSite& site, const std::string& label,
                              std::vector<onnx::NodeProto>& out) {
  if (!norm_domain(n.domain()).empty()) return;
  auto fit = site.versions.find("");
  auto mit = opsets_.find("");
  if (fit == site.versions.end() || mit == opsets_.end()) return;
  const int64_t fv = fit->second, mv = mit->second;
  const std::string& op = n.op_type();
  const bool reduce = op.rfind("Reduce", 0) == 0;
  const int64_t moved_at =
      op == "ReduceSum" || op == "Squeeze" || op == "Unsqueeze" || op == "Split" ? 13
      : reduce                                                                   ? 18
                                                                                 : 0;
  const std::string attr = op == "Split" ? "split" : "axes";
  auto* attrs = n.mutable_attribute();
  for (int i = 0; moved_at > 0 && fv < moved_at && mv >= moved_at && i < attrs->size(); ++i) {
    const onnx::AttributeProto& a = attrs->Get(i);
    if (a.name() != attr || a.type() != onnx::AttributeProto::INTS) continue;
    onnx::NodeProto c;
    c.set_op_type("Constant");
    c.set_name(n.name() + "/" + attr);
    const std::string value = fresh(label + "/" + attr);
    c.add_output(value);
    onnx::AttributeProto* t = c.add_attribute();
    t->set_name("value");
    t->set_type(onnx::AttributeProto::TENSOR);
    t->mutable_t()->set_data_type(onnx::TensorProto::INT64);
    t->mutable_t()->add_dims(a.ints_size());
    for (int64_t v : a.ints()) t->mutable_t()->add_int64_data(v);
    out.push_back(std::move(c));
    // The moved input is the second; Split's may follow an empty one.
    while (n.input_size() < 1) n.add_input("");
    if (n.input_size() == 1) n.add_input(value);
    else n.set_input(1, value);
    attrs->DeleteSubrange(i, 1);
    break;
  }
  if (op == "Split" && mv >= 18 && fv < 18 && (n.input_size() < 2 || n.input(1).empty())) {
    onnx::AttributeProto* num = n.add_attribute();
    num->set_name("num_outputs");
    num->set_type(onnx::AttributeProto::INT);
    num->set_i(n.output_size());
  }
}

Status Inliner::instantiate(const Callee& c, const onnx::NodeProto& call, const std::string& label,
                            std::vector<onnx::NodeProto>& out) {
  const onnx::FunctionProto& f = *c.body;
  const std::string where = "node '" + label + "' (" + call.op_type() + "): " + c.what;
  if (call.input_size() > f.input_size() || call.output_size() > f.output_size())
    return invalid_argument(where + " has " + std::to_string(f.input_size()) + " inputs and " +
                            std::to_string(f.output_size()) + " outputs; the node gives " +
                            std::to_string(call.input_size()) + " and " +
                            std::to_string(call.output_size()));
  CallSite site{c, label, {}, import_opsets(f)};
  for (const onnx::AttributeProto& a : call.attribute()) site.given[a.name()] = &a;

  Scope scope;
  for (int i = 0; i < f.input_size(); ++i)
    if (!scope.names.emplace(f.input(i), i < call.input_size() ? call.input(i) : "").second)
      return invalid_argument(where + " lists input '" + f.input(i) + "' twice");
  std::map<std::string, std::string> outputs;  // formal -> model name
  for (int j = 0; j < f.output_size(); ++j) {
    const bool wanted = j < call.output_size() && !call.output(j).empty();
    if (!outputs.emplace(f.output(j), wanted ? call.output(j) : fresh(label + "/" + f.output(j)))
             .second)
      return invalid_argument(where + " lists output '" + f.output(j) + "' twice");
  }

  std::set<std::string> produced;
  for (int k = 0; k < f.node_size(); ++k) {
    onnx::NodeProto n = f.node(k);
    const std::string base = n.name().empty() ? n.op_type() + "_" + std::to_string(k) : n.name();
    const std::string nwhere = where + ": node '" + base + "' (" + n.op_type() + ")";
    n.set_name(label + "/" + base);
    for (std::string& in : *n.mutable_input()) {
      if (in.empty()) continue;
      const std::string* mapped = scope.find(in);
      if (mapped == nullptr)
        return invalid_argument(nwhere + ": input '" + in +
                                "' is neither an input of the function nor an output of an "
                                "earlier node of its body");
      in = *mapped;
    }
    BP_RETURN_IF_ERROR(rename_attrs(n, scope, site, nwhere));
    upgrade_body_op(n, site, label, out);
    BP_RETURN_IF_ERROR(check_body_op(n, site, nwhere));
    for (std::string& o : *n.mutable_output()) {
      if (o.empty()) continue;
      if (scope.names.count(o) > 0)
        return invalid_argument(nwhere + ": output '" + o + "' is defined twice in the body");
      auto it = outputs.find(o);
      const std::string name = it != outputs.end() ? it->second : fresh(label + "/" + o);
      produced.insert(o);
      scope.names[o] = name;
      o = name;
    }
    out.push_back(std::move(n));
  }
  // A function output no body node computes is one of its inputs passed on.
  for (int j = 0; j < f.output_size() && j < call.output_size(); ++j) {
    const std::string& o = f.output(j);
    if (call.output(j).empty() || produced.count(o) > 0) continue;
    const std::string* src = scope.find(o);
    if (src == nullptr || src->empty())
      return invalid_argument(where + ": its output '" + o + "' is not computed by its body");
    onnx::NodeProto id;
    id.set_op_type("Identity");
    id.set_name(label + "/Identity_" + o);
    id.add_input(*src);
    id.add_output(call.output(j));
    out.push_back(std::move(id));
  }
  return ok_status();
}

// Attributes of an inlined node: references to the function's attributes
// substituted (an attribute the caller omits and that has no default is
// omitted), subgraphs renamed into the model's names.
Status Inliner::rename_attrs(onnx::NodeProto& n, const Scope& scope, const CallSite& site,
                             const std::string& where) {
  google::protobuf::RepeatedPtrField<onnx::AttributeProto> kept;
  for (onnx::AttributeProto& a : *n.mutable_attribute()) {
    if (!a.ref_attr_name().empty()) {
      const onnx::AttributeProto* src = nullptr;
      auto git = site.given.find(a.ref_attr_name());
      if (git != site.given.end()) {
        src = git->second;
      } else {
        auto dit = site.callee.defaults.find(a.ref_attr_name());
        if (dit != site.callee.defaults.end()) src = &dit->second;
      }
      if (src == nullptr) continue;
      if (a.type() != onnx::AttributeProto::UNDEFINED && src->type() != a.type())
        return invalid_argument(where + ": attribute '" + a.name() + "' refers to '" +
                                a.ref_attr_name() + "', which is " + attr_type_text(src->type()) +
                                ", expected " + attr_type_text(a.type()));
      onnx::AttributeProto b = *src;
      b.set_name(a.name());
      b.clear_ref_attr_name();
      *kept.Add() = std::move(b);
      continue;
    }
    if (a.has_g()) BP_RETURN_IF_ERROR(rename_subgraph(*a.mutable_g(), scope, site, where));
    for (onnx::GraphProto& g : *a.mutable_graphs())
      BP_RETURN_IF_ERROR(rename_subgraph(g, scope, site, where));
    *kept.Add() = std::move(a);
  }
  n.mutable_attribute()->Swap(&kept);
  return ok_status();
}

// A subgraph of an inlined node: its own values get fresh names, and its
// references to the body's values (outer scope) follow the body's renaming.
Status Inliner::rename_subgraph(onnx::GraphProto& g, const Scope& outer, const CallSite& site,
                                const std::string& where) {
  Scope scope;
  scope.parent = &outer;
  auto define = [&](std::string* name) {
    if (name->empty()) return;
    const std::string f = fresh(site.label + "/" + *name);
    scope.names[*name] = f;
    *name = f;
  };
  auto resolve = [&](std::string* name, const std::string& what) -> Status {
    if (name->empty()) return ok_status();
    const std::string* mapped = scope.find(*name);
    if (mapped == nullptr)
      return invalid_argument(where + ": subgraph '" + g.name() + "': " + what + " '" + *name +
                              "' is not defined in the function");
    *name = *mapped;
    return ok_status();
  };
  for (onnx::ValueInfoProto& vi : *g.mutable_input()) define(vi.mutable_name());
  for (onnx::TensorProto& t : *g.mutable_initializer()) define(t.mutable_name());
  for (int k = 0; k < g.node_size(); ++k) {
    onnx::NodeProto& n = *g.mutable_node(k);
    const std::string base = n.name().empty() ? n.op_type() + "_" + std::to_string(k) : n.name();
    const std::string nwhere = where + ": subgraph node '" + base + "' (" + n.op_type() + ")";
    n.set_name(site.label + "/" + g.name() + "/" + base);
    for (std::string& in : *n.mutable_input())
      BP_RETURN_IF_ERROR(resolve(&in, "node '" + base + "' input"));
    BP_RETURN_IF_ERROR(rename_attrs(n, scope, site, nwhere));
    for (std::string& o : *n.mutable_output()) define(&o);
  }
  for (onnx::ValueInfoProto& vi : *g.mutable_output())
    BP_RETURN_IF_ERROR(resolve(vi.mutable_name(), "output"));
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> infos;
  for (onnx::ValueInfoProto& vi : *g.mutable_value_info())
    if (const std::string* mapped = scope.find(vi.name())) {
      vi.set_name(*mapped);
      *infos.Add() = std::move(vi);
    }
  g.mutable_value_info()->Swap(&infos);
  return ok_status();
}

// ---------------------------------------------------------------- names, types

std::string Inliner::fresh(const std::string& base) {
  std::string name = base;
  for (int i = 1; used_.count(name) > 0; ++i) name = base + "_" + std::to_string(i);
  used_.insert(name);
  return name;
}

void Inliner::collect_names(const onnx::GraphProto& g) {
  for (const auto& vi : g.input()) used_.insert(vi.name());
  for (const auto& t : g.initializer()) used_.insert(t.name());
  for (const auto& n : g.node()) {
    for (const std::string& o : n.output()) used_.insert(o);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_names(a.g());
      for (const auto& sg : a.graphs()) collect_names(sg);
    }
  }
}

void Inliner::harvest_types(const onnx::GraphProto& g) {
  auto add = [&](const onnx::ValueInfoProto& vi) {
    if (vi.has_type() && vi.type().value_case() != onnx::TypeProto::VALUE_NOT_SET &&
        !(vi.type().has_tensor_type() && vi.type().tensor_type().elem_type() == 0))
      types_[vi.name()] = vi.type();
  };
  for (const auto& vi : g.input()) add(vi);
  for (const auto& vi : g.value_info()) add(vi);
  for (const auto& vi : g.output()) add(vi);
  for (const auto& t : g.initializer()) {
    onnx::TypeProto tp;
    tp.mutable_tensor_type()->set_elem_type(t.data_type());
    for (int64_t d : t.dims())
      tp.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    types_[t.name()] = std::move(tp);
  }
  for (const auto& n : g.node()) {
    if (norm_domain(n.domain()) != "" || n.op_type() != "Constant" || n.output_size() != 1 ||
        n.attribute_size() != 1)
      continue;
    const onnx::AttributeProto& a = n.attribute(0);
    int elem = 0;
    if (a.name() == "value" && a.has_t()) elem = a.t().data_type();
    if (a.name() == "value_float" || a.name() == "value_floats") elem = onnx::TensorProto::FLOAT;
    if (a.name() == "value_int" || a.name() == "value_ints") elem = onnx::TensorProto::INT64;
    if (elem == 0) continue;
    onnx::TypeProto tp;
    tp.mutable_tensor_type()->set_elem_type(elem);
    types_[n.output(0)] = std::move(tp);
  }
}

// libonnx's own inference over the model as inlined so far (node errors are
// ignored: only the types it can find matter, for context-dependent bodies).
void Inliner::infer_types() {
  onnx::ModelProto copy = model_;
  try {
    onnx::ShapeInferenceOptions options(false, 0, false);
    onnx::shape_inference::InferShapes(copy, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception&) {
    return;
  }
  harvest_types(copy.graph());
}

Status Inliner::run() {
  if (!model_.has_graph()) return ok_status();  // the importer says what is wrong
  for (const onnx::OperatorSetIdProto& os : model_.opset_import())
    opsets_[norm_domain(os.domain())] = os.version();
  for (const onnx::FunctionProto& f : model_.functions()) {
    const FunctionKey key{norm_domain(f.domain()), f.name()};
    if (f.name().empty()) return invalid_argument("a model-local function has no name");
    if (!local_.emplace(key, &f).second)
      return invalid_argument("model-local function '" + f.name() + "' (domain '" + key.first +
                              "') is defined twice");
  }
  collect_names(model_.graph());
  harvest_types(model_.graph());
  for (int round = 0;; ++round) {
    deferred_ = false;
    std::vector<FunctionKey> stack;
    BP_RETURN_IF_ERROR(expand_graph(*model_.mutable_graph(), stack));
    if (!deferred_) break;
    const size_t known = types_.size();
    if (round < kMaxTypeRounds) infer_types();
    // No new types: build the remaining bodies with what is known.
    if (types_.size() == known) allow_untyped_ = true;
  }
  model_.clear_functions();
  return ok_status();
}

}  // namespace

Status inline_functions(onnx::ModelProto& model, const ir::OpRegistry& registry,
                        InlineStats* stats) {
  InlineStats local;
  Inliner inliner(model, registry, stats != nullptr ? *stats : local);
  return inliner.run();
}

}  // namespace backplane::onnx_import
