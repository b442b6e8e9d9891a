// backplane::validate: the model planned as asked and on CpuRef alone, run on
// the same inputs and compared tensor by tensor; on a difference, two
// bisections that pin nodes to CpuRef (validate.hpp says what they find).
//
// A tensor is compared by making it an extra output of the model, so the
// plan computes and keeps it without any hook in the executor. Only tensors
// that already leave a partition in the plan (its edges), or leave the set
// of nodes a trial keeps on their backends, are made outputs: an output in
// the middle of a partition would stop its backend from fusing across it,
// and so could hide the very error being looked for.
#include "session/validator.hpp"

#include "artifact/artifact.hpp"
#include "pipeline/front_end.hpp"
#include "session/staged_model.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <set>
#include <unordered_map>

namespace backplane {

Tensor generated_input(const TensorInfo& info, uint32_t seed) {
  Tensor t(info.dtype, info.shape);
  std::mt19937 rng(seed);
  const int64_t n = t.numel();
  switch (info.dtype) {
    case DType::kFloat32: {
      std::uniform_real_distribution<float> d(0.0f, 1.0f);
      for (int64_t i = 0; i < n; ++i) t.data_as<float>()[i] = d(rng);
      break;
    }
    case DType::kInt64:
      for (int64_t i = 0; i < n; ++i) t.data_as<int64_t>()[i] = static_cast<int64_t>(rng() % 4);
      break;
    case DType::kInt32:
      for (int64_t i = 0; i < n; ++i) t.data_as<int32_t>()[i] = static_cast<int32_t>(rng() % 4);
      break;
    case DType::kBool:
    case DType::kUInt8:
    case DType::kInt8:
      for (int64_t i = 0; i < n; ++i) t.data_as<uint8_t>()[i] = static_cast<uint8_t>(rng() % 2);
      break;
    default:
      break;  // float16 and the rest: zeros
  }
  return t;
}

namespace {

using json = nlohmann::json;

json port_json(const PortDescription& p) {
  return {{"name", p.name},
          {"dtype", dtype_name(p.dtype)},
          {"shape", p.shape},
          {"constant", p.constant}};
}

json check_json(const TensorCheck& c) {
  return {{"name", c.name},
          {"producer", c.producer},
          {"backend", c.backend},
          {"model_output", c.model_output},
          {"within", c.within()},
          {"max_abs_error", c.comparison.max_abs_error},
          {"bound", c.comparison.bound()},
          {"error", c.describe()}};
}

}  // namespace

std::string validation_report_json(const ValidationReport& r, const std::string& model) {
  json j;
  j["model"] = model;
  j["ok"] = r.ok;
  j["backends"] = r.backends;
  j["nodes"] = r.nodes;
  j["nodes_off_cpuref"] = r.nodes_off_cpuref;
  j["partitions"] = r.partitions;
  j["generated_inputs"] = r.generated_inputs;
  j["checked"] = r.checks.size();
  j["checks"] = json::array();
  size_t differ = 0;
  for (const TensorCheck& c : r.checks) {
    j["checks"].push_back(check_json(c));
    differ += c.within() ? 0 : 1;
  }
  j["differ"] = differ;
  if (r.wrong) {
    const WrongNode& w = *r.wrong;
    json node = {{"name", w.name},
                 {"op_type", w.op_type},
                 {"domain", w.domain},
                 {"backend", w.backend},
                 {"tensor", w.tensor},
                 {"error", w.error},
                 {"max_abs_error", w.comparison.max_abs_error},
                 {"bound", w.comparison.bound()}};
    node["inputs"] = json::array();
    for (const PortDescription& p : w.inputs) node["inputs"].push_back(port_json(p));
    node["outputs"] = json::array();
    for (const PortDescription& p : w.outputs) node["outputs"].push_back(port_json(p));
    node["group"] = json::array();
    node["fused_with"] = json::array();
    for (size_t i = 0; i < w.group.size(); ++i) {
      node["group"].push_back({{"name", w.group[i]}, {"op_type", w.group_ops[i]}});
      if (w.group[i] != w.name) node["fused_with"].push_back(w.group[i]);
    }
    j["wrong_node"] = node;
  } else {
    j["wrong_node"] = nullptr;
  }
  j["plans"] = r.plans;
  j["seconds"] = r.seconds;
  j["note"] = r.note;
  return j.dump();
}

std::string TensorCheck::describe() const {
  return comparison.comparable ? comparison.describe(shape) : comparison.reason;
}

namespace {

constexpr const char* kReference = "CpuRef";

// The int8 rule over a trial (docs/numerics.md): an int8 group's result may
// differ from CpuRef's by one quantization step, and once a value differs, a
// quantizer after it may round the other way too, even on CpuRef. So a
// value may differ by one step per quantizing node on the longest path to
// it from a node off CpuRef (`window`). In the value's units: those steps
// for a uint8/int8 tensor, times the scale once dequantized, carried
// through operators that move, pool or squash values (no wider difference
// out than in) and added up by Add and Sub. A float value those steps reach
// through anything else (the product of a dynamically quantized convolution
// or matmul, scaled back to float): that many 8-bit steps of its own range,
// the step a DynamicQuantizeLinear of it would take (by_range; its units
// are known once the reference has it). Elsewhere none: the float rule.
struct Int8Allowance {
  std::vector<int> steps;      // per value
  std::vector<double> units;   // per value, in its own units
  std::vector<char> by_range;  // per value: units are steps x its range / 255
};

// A quantization step of `t` as DynamicQuantizeLinear takes it: its range
// (0 included) over 255; 0 for a tensor that is not float32.
double range_step(const Tensor& t) {
  if (t.dtype() != DType::kFloat32) return 0;
  double lo = 0, hi = 0;
  const float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isfinite(p[i])) {
      lo = std::min(lo, double{p[i]});
      hi = std::max(hi, double{p[i]});
    }
  return (hi - lo) / 255;
}

bool quantizes(const std::string& op) {
  return op == "QuantizeLinear" || op == "QLinearConv" || op == "QLinearMatMul" ||
         op == "DynamicQuantizeLinear" || op == "QLinearAdd" || op == "QLinearMul" ||
         op == "QLinearSigmoid" || op == "QLinearLeakyRelu" || op == "QLinearConcat" ||
         op == "QLinearAveragePool" || op == "QLinearGlobalAveragePool";
}

// Operators whose result differs from the reference's by no more than
// their inputs' largest difference does.
bool carries_difference(const std::string& op) {
  static const std::set<std::string> ops = {
      "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat",
      "Slice", "Split", "Gather", "Pad", "Resize", "Upsample", "Expand", "Tile",
      "DepthToSpace", "SpaceToDepth", "MaxPool", "GlobalMaxPool", "AveragePool",
      "GlobalAveragePool", "ReduceMax", "ReduceMin", "ReduceMean", "Relu", "Clip",
      "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "Softmax", "Max", "Min"};
  return ops.count(op) > 0;
}

Int8Allowance int8_allowance(const ir::Graph& g, const std::vector<int>& order,
                             const std::set<int>& window) {
  Int8Allowance a{std::vector<int>(g.values.size(), 0), std::vector<double>(g.values.size(), 0.0),
                  std::vector<char>(g.values.size(), 0)};
  std::vector<bool> reached(g.values.size(), false);  // a node off CpuRef is upstream
  for (int n : order) {
    const ir::Node& node = g.nodes[n];
    bool reached_in = window.count(n) > 0;
    int steps = 0;
    double max_units = 0, sum_units = 0;
    for (int v : node.inputs) {
      if (v < 0) continue;
      reached_in = reached_in || reached[v];
      steps = std::max(steps, a.steps[v]);
      max_units = std::max(max_units, a.units[v]);
      sum_units += a.units[v];
    }
    double units = 0;
    if (quantizes(node.op_type) && reached_in) {
      units = ++steps;
    } else if (node.op_type == "DequantizeLinear") {
      const Tensor* scale = node.inputs.size() > 1 && node.inputs[1] >= 0
                                ? g.constant(node.inputs[1]) : nullptr;
      double largest = 0;
      if (scale != nullptr && scale->dtype() == DType::kFloat32)
        for (int64_t i = 0; i < scale->numel(); ++i)
          largest = std::max(largest, std::fabs(double{scale->data_as<float>()[i]}));
      units = steps * largest;
    } else if (node.op_type == "Add" || node.op_type == "Sub") {
      units = sum_units;
    } else if (carries_difference(node.op_type)) {
      units = max_units;
    }
    for (int v : node.outputs) {
      if (v < 0) continue;
      reached[v] = reached_in;
      a.steps[v] = steps;
      // A quantizer's float outputs (DynamicQuantizeLinear's scale) have none.
      const bool is_float = g.values[v].dtype == DType::kFloat32;
      const bool float_of_quantizer = quantizes(node.op_type) && is_float;
      a.units[v] = float_of_quantizer ? 0 : units;
      a.by_range[v] = reached_in && steps > 0 && units == 0 && is_float && !float_of_quantizer;
    }
  }
  return a;
}

// One planned run compared with CpuRef's.
struct Trial {
  bool wrong = false;
  std::vector<TensorCheck> checks;
};

class Validator {
 public:
  Validator(const BackendRegistry& registry, const CompiledModel::Options& base,
            std::atomic<uint64_t>* ids, const std::string& path, const ValidateOptions& options)
      : registry_(registry), base_(base), ids_(ids), path_(path), options_(options) {}

  Result<ValidationReport> run();

 private:
  Result<std::shared_ptr<CompiledModel>> load(const PlacementOptions& placement,
                                              const std::set<int>& extra);
  Result<std::map<std::string, Tensor>> execute(CompiledModel& model) const;
  Status prepare_inputs(const CompiledModel& model);
  Status read_plan(const CompiledModel& model);
  Result<Trial> trial(size_t begin, size_t end);
  std::string window_text(size_t begin, size_t end) const;
  WrongNode describe_node(int node, const std::vector<int>& group, const Trial& wrong) const;
  PortDescription port(int value) const;

  const BackendRegistry& registry_;
  const CompiledModel::Options base_;
  std::atomic<uint64_t>* ids_;
  const std::string path_;
  const ValidateOptions& options_;
  PlacementOptions placement_;  // the options', with every input's shape

  std::unique_ptr<ir::Graph> portable_;
  std::vector<std::vector<int>> consumers_;  // per value
  std::set<int> model_outputs_;
  std::map<std::string, Tensor> inputs_;
  std::vector<int> order_;                   // the plan's nodes in execution order
  std::vector<std::string> backend_;         // per node: where the plan runs it
  std::vector<int> partition_;               // per node: its partition in the plan, -1 if none
  std::vector<size_t> position_;             // per node: its index in order_
  std::vector<size_t> fast_;                 // indices into order_ of the nodes not on CpuRef
  std::set<int> edges_;                      // values crossing a partition edge of the plan
  std::map<std::string, Tensor> reference_;  // CpuRef's value of every node output
  ValidationReport report_;
};

Result<std::shared_ptr<CompiledModel>> Validator::load(const PlacementOptions& placement,
                                                       const std::set<int>& extra) {
  auto graph = std::make_unique<ir::Graph>(*portable_);
  for (int v : extra)
    if (!model_outputs_.count(v)) graph->outputs.push_back(v);
  CompiledModel::Options o = base_;
  o.placement = placement;
  o.network_id = ids_->fetch_add(1);
  ++report_.plans;
  return CompiledModel::create(std::move(graph), registry_, o);
}

Result<std::map<std::string, Tensor>> Validator::execute(CompiledModel& model) const {
  BP_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, model.create_session());
  for (const auto& [name, tensor] : inputs_) BP_RETURN_IF_ERROR(session->set_input(name, tensor));
  BP_RETURN_IF_ERROR(session->run());
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < session->num_outputs(); ++i)
    out[model.outputs()[i].name] = session->output(i).clone();
  return out;
}

Status Validator::prepare_inputs(const CompiledModel& model) {
  const std::vector<TensorInfo>& infos = model.inputs();
  inputs_ = options_.inputs;
  for (size_t i = 0; i < infos.size(); ++i) {
    if (inputs_.count(infos[i].name)) continue;
    if (!infos[i].default_value.empty()) {  // the model's own value, as a run takes it
      inputs_[infos[i].name] = infos[i].default_value;
      continue;
    }
    TensorInfo at = infos[i];
    auto hinted = placement_.input_shapes.find(at.name);
    if (hinted != placement_.input_shapes.end()) at.shape = hinted->second;
    if (std::any_of(at.shape.begin(), at.shape.end(), [](int64_t d) { return d < 0; }))
      return invalid_argument(
          "input '" + at.name + "' has open dims " + shape_to_string(at.shape) +
          ": give the input (--input NAME=FILE.npy) or its shape (--shape NAME=DIMS)");
    inputs_[at.name] = generated_input(at, static_cast<uint32_t>(i));
    placement_.input_shapes[at.name] = at.shape;
    report_.generated_inputs.push_back(at.name);
  }
  return ok_status();
}

// Where the plan runs each node, and which tensors cross its partition edges.
Status Validator::read_plan(const CompiledModel& model) {
  const ir::Graph& g = *portable_;
  std::unordered_map<std::string, int> by_name;
  for (size_t n = g.nodes.size(); n-- > 0;) by_name[g.nodes[n].name] = static_cast<int>(n);
  backend_.assign(g.nodes.size(), "");
  partition_.assign(g.nodes.size(), -1);
  position_.assign(g.nodes.size(), 0);
  const std::vector<PartitionDescription>& parts = model.partitions();
  for (size_t p = 0; p < parts.size(); ++p) {
    for (const std::string& name : parts[p].nodes) {
      auto it = by_name.find(name);
      if (it == by_name.end())
        return internal_error("the plan runs node '" + name + "', which the model does not have");
      const int n = it->second;
      position_[n] = order_.size();
      if (parts[p].backend != kReference) fast_.push_back(order_.size());
      order_.push_back(n);
      backend_[n] = parts[p].backend;
      partition_[n] = static_cast<int>(p);
    }
    for (const auto* names : {&parts[p].inputs, &parts[p].outputs})
      for (const std::string& name : *names) {
        const int v = g.find_value(name);
        if (v >= 0 && g.values[v].producer >= 0) edges_.insert(v);
      }
  }
  report_.backends = model.backends_used();
  report_.nodes = order_.size();
  report_.nodes_off_cpuref = fast_.size();
  report_.partitions = parts.size();
  return ok_status();
}

std::string Validator::window_text(size_t begin, size_t end) const {
  if (begin == end) return "no node";
  const auto name = [&](size_t i) { return "'" + portable_->nodes[order_[fast_[i]]].name + "'"; };
  return end - begin == 1 ? "node " + name(begin) : "nodes " + name(begin) + " to " + name(end - 1);
}

// The model with the nodes fast_[begin, end) on their backends and every
// other node on CpuRef, compared with the reference. Every node is pinned,
// so the nodes kept on their backends are placed exactly as in the plan.
Result<Trial> Validator::trial(size_t begin, size_t end) {
  const ir::Graph& g = *portable_;
  PlacementOptions placement = placement_;
  std::set<int> window;
  for (size_t i = begin; i < end; ++i) window.insert(order_[fast_[i]]);
  // A node of constants alone (a DequantizeLinear of int8 weights) goes with
  // the nodes that read it, as the partitioner places it: its reader's
  // backend takes its output as a constant, not from another partition.
  for (int n : order_) {
    if (window.count(n) || backend_[n] == kReference) continue;
    bool constants = true, read_in_window = false;
    for (int v : g.nodes[n].inputs) constants = constants && (v < 0 || g.values[v].is_constant());
    for (int v : g.nodes[n].outputs)
      if (v >= 0)
        for (int c : consumers_[v]) read_in_window = read_in_window || window.count(c) > 0;
    if (constants && read_in_window) window.insert(n);
  }
  for (int n : order_)
    placement.overrides[g.nodes[n].name] = window.count(n) ? backend_[n] : kReference;
  // The plan's edges, and the values leaving the window: edges of this plan
  // too, so making them outputs changes nothing a backend may fuse.
  std::set<int> extra = edges_;
  for (int n : window)
    for (int v : g.nodes[n].outputs)
      if (v >= 0 && std::any_of(consumers_[v].begin(), consumers_[v].end(),
                                [&](int c) { return !window.count(c); }))
        extra.insert(v);
  const std::string what = "the plan with " + window_text(begin, end) + " off CpuRef";
  BP_ASSIGN_OR_RETURN(std::shared_ptr<CompiledModel> model, load(placement, extra), what);
  BP_ASSIGN_OR_RETURN(auto got, execute(*model), what);

  std::vector<int> compared(model_outputs_.begin(), model_outputs_.end());
  std::sort(compared.begin(), compared.end(), [&](int a, int b) {
    return std::find(g.outputs.begin(), g.outputs.end(), a) <
           std::find(g.outputs.begin(), g.outputs.end(), b);
  });
  std::vector<int> inner;
  for (int v : extra)
    if (!model_outputs_.count(v)) inner.push_back(v);
  std::stable_sort(inner.begin(), inner.end(), [&](int a, int b) {
    return position_[g.values[a].producer] < position_[g.values[b].producer];
  });
  compared.insert(compared.end(), inner.begin(), inner.end());

  const Int8Allowance allowance = int8_allowance(g, order_, window);
  Trial t;
  for (int v : compared) {
    const std::string& name = g.values[v].name;
    auto r = reference_.find(name);
    auto o = got.find(name);
    if (r == reference_.end() || o == got.end()) continue;  // a model input passed through
    TensorCheck c;
    c.name = name;
    const int producer = g.values[v].producer;
    if (producer >= 0) {
      c.producer = g.nodes[producer].name;
      c.backend = backend_[producer];
    }
    c.model_output = model_outputs_.count(v) > 0;
    c.comparison = numerics::compare(o->second, r->second);
    const double units =
        allowance.by_range[v] ? allowance.steps[v] * range_step(r->second) : allowance.units[v];
    c.comparison.int8_steps = units > 0 ? allowance.steps[v] : 0;
    c.comparison.int8_allowance = units;
    c.shape = r->second.shape();
    t.wrong |= !c.within();
    t.checks.push_back(std::move(c));
  }
  return t;
}

PortDescription Validator::port(int value) const {
  const ir::Value& v = portable_->values[value];
  PortDescription p;
  p.name = v.name;
  p.dtype = v.dtype;
  p.shape = v.shape;
  p.constant = v.is_constant();
  // The portable graph leaves shapes (and some dtypes) to specialisation:
  // the tensors of the run have them.
  const Tensor* seen = nullptr;
  if (auto r = reference_.find(v.name); r != reference_.end()) seen = &r->second;
  else if (auto i = inputs_.find(v.name); i != inputs_.end()) seen = &i->second;
  else if (const Tensor* c = portable_->constant(value)) seen = c;
  if (seen != nullptr) {
    p.dtype = seen->dtype();
    p.shape = seen->shape();
  }
  return p;
}

WrongNode Validator::describe_node(int node, const std::vector<int>& group,
                                   const Trial& wrong) const {
  const ir::Node& n = portable_->nodes[node];
  WrongNode w;
  w.name = n.name;
  w.op_type = n.op_type;
  w.domain = n.domain;
  w.backend = backend_[node];
  for (size_t i = 0; i < n.inputs.size() - n.implicit_inputs; ++i)
    if (n.inputs[i] >= 0) w.inputs.push_back(port(n.inputs[i]));
  for (int v : n.outputs)
    if (v >= 0) w.outputs.push_back(port(v));
  for (int m : group) {
    w.group.push_back(portable_->nodes[m].name);
    w.group_ops.push_back(portable_->nodes[m].op_type);
  }
  const TensorCheck* first = nullptr;
  for (const TensorCheck& c : wrong.checks) {
    if (c.within()) continue;
    if (first == nullptr) first = &c;
    if (c.producer == n.name) {
      first = &c;
      break;
    }
  }
  if (first != nullptr) {
    w.tensor = first->name;
    w.error = first->describe();
    w.comparison = first->comparison;
  }
  return w;
}

Result<ValidationReport> Validator::run() {
  const auto start = std::chrono::steady_clock::now();
  if (looks_like_artifact(path_))
    return unsupported(
        "a compiled artifact: validate the ONNX model it was compiled from, with the same "
        "backends");
  if (registry_.find(kReference) == nullptr)
    return not_found(
        "validate compares with the reference backend CpuRef, which is not "
        "registered (--disable-static-backend CpuRef?)");
  BP_ASSIGN_OR_RETURN(portable_, import_portable_model(path_, &registry_));
  if (Program::needs_staging(*portable_))
    return unsupported(
        "the model runs in stages (control flow, sequences or shapes that depend on data); "
        "validate compares models that run as one plan");
  consumers_ = portable_->consumers();
  model_outputs_.insert(portable_->outputs.begin(), portable_->outputs.end());
  placement_ = options_;
  for (const auto& [name, tensor] : options_.inputs) {
    const int v = portable_->find_value(name);
    if (v < 0 || std::find(portable_->inputs.begin(), portable_->inputs.end(), v) ==
                     portable_->inputs.end()) {
      std::string names;
      for (int i : portable_->inputs)
        names += (names.empty() ? "'" : ", '") + portable_->values[i].name + "'";
      return invalid_argument(
          "input '" + name +
          "' is given, but the model has no input of that name (its inputs: " + names + ")");
    }
    placement_.input_shapes[name] = tensor.shape();
  }

  // The plan as asked for: where each node runs.
  BP_ASSIGN_OR_RETURN(std::shared_ptr<CompiledModel> planned, load(placement_, {}));
  BP_RETURN_IF_ERROR(prepare_inputs(*planned));
  if (planned->primary() == nullptr) {  // shapes open until the inputs were made
    BP_ASSIGN_OR_RETURN(planned, load(placement_, {}));
  }
  BP_RETURN_IF_ERROR(read_plan(*planned));
  planned.reset();

  // The reference: every node's output, from CpuRef alone.
  PlacementOptions reference;
  reference.backends = {kReference};
  reference.input_shapes = placement_.input_shapes;
  std::set<int> every;
  for (int n : order_)
    for (int v : portable_->nodes[n].outputs)
      if (v >= 0) every.insert(v);
  {
    const char* what = "the reference plan (CpuRef alone)";
    BP_ASSIGN_OR_RETURN(std::shared_ptr<CompiledModel> model, load(reference, every), what);
    BP_ASSIGN_OR_RETURN(reference_, execute(*model), what);
  }

  BP_ASSIGN_OR_RETURN(Trial whole, trial(0, fast_.size()));
  report_.checks = whole.checks;
  report_.ok = !whole.wrong;
  const auto finish = [&]() {
    report_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(report_);
  };
  if (report_.ok || !options_.find_node) return finish();
  if (fast_.empty()) {
    report_.note =
        "every node runs on CpuRef and still differs from CpuRef: the model's "
        "results depend on more than its inputs";
    return finish();
  }

  // The first wrong node: the shortest prefix of the nodes off CpuRef that
  // is wrong ends with it.
  size_t lo = 0, hi = fast_.size();
  Trial at_hi = whole;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    BP_ASSIGN_OR_RETURN(Trial t, trial(0, mid));
    if (t.wrong) {
      hi = mid;
      at_hi = std::move(t);
    } else {
      lo = mid;
    }
  }
  const size_t last = hi - 1;
  // Its group: the fewest nodes before it that must stay on their backends
  // with it for the error to appear.
  size_t first = last;
  Trial at_first = at_hi;
  if (last > 0) {
    BP_ASSIGN_OR_RETURN(Trial alone, trial(last, last + 1));
    if (alone.wrong) {
      at_first = std::move(alone);
    } else {
      size_t wrong_from = 0, right_from = last;
      while (right_from - wrong_from > 1) {
        const size_t mid = wrong_from + (right_from - wrong_from) / 2;
        BP_ASSIGN_OR_RETURN(Trial t, trial(mid, last + 1));
        if (t.wrong) {
          wrong_from = mid;
          at_first = std::move(t);
        } else {
          right_from = mid;
        }
      }
      first = wrong_from;
    }
  }
  // Of the nodes in between, those in the node's partition that feed it
  // (the others cannot have been fused with it), and the first one, which
  // the bisection showed is needed.
  const int node = order_[fast_[last]];
  std::vector<int> group{node};
  std::set<int> members{node};
  for (size_t i = last; i-- > first;) {
    const int m = order_[fast_[i]];
    bool feeds = i == first;
    if (partition_[m] == partition_[node])
      for (int v : portable_->nodes[m].outputs)
        if (v >= 0)
          for (int c : consumers_[v]) feeds |= members.count(c) > 0;
    if (!feeds) continue;
    members.insert(m);
    group.insert(group.begin(), m);
  }
  report_.wrong = describe_node(node, group, at_first);
  if (report_.wrong->tensor.empty())
    report_.note =
        "the bisection ended at this node, but no single tensor of its last trial "
        "differed from CpuRef";
  return finish();
}

}  // namespace

Result<ValidationReport> validate_model(const BackendRegistry& registry,
                                        const CompiledModel::Options& base,
                                        std::atomic<uint64_t>* network_ids, const std::string& path,
                                        const ValidateOptions& options) {
  Validator v(registry, base, network_ids, path, options);
  Result<ValidationReport> report = v.run();
  // Most errors from below name the file already.
  if (!report.ok() && report.status().message().rfind(path, 0) != 0) report.with_context(path);
  return report;
}

}  // namespace backplane
