// Staged execution: Program (the steps of a graph whose shapes are not all
// known before a run), StagedModel and its sessions. Host ops are in
// host_ops.cpp.
#include "session/staged_model.hpp"

#include "core/profiler.hpp"
#include "ir/op_registry.hpp"

#include <algorithm>
#include <cstring>
#include <set>

namespace backplane {

namespace {

const ir::OpSchema* schema_of(const ir::Graph& g, const ir::Node& node) {
  const int64_t opset = g.opset(node.domain);
  return ir::OpRegistry::builtin().find(node.domain, node.op_type, opset > 0 ? opset : INT32_MAX);
}

bool is_host_kind(ir::ValueKind k) { return k != ir::ValueKind::kTensor; }

std::vector<const ir::Graph*> bodies_of(const ir::Node& node) {
  std::vector<const ir::Graph*> out;
  for (const ir::Attribute& a : node.attributes) {
    if (a.type == ir::AttrType::kGraph && a.g) out.push_back(a.g.get());
    if (a.type == ir::AttrType::kGraphs)
      for (const auto& g : a.graphs) out.push_back(g.get());
  }
  return out;
}

TensorInfo::Kind info_kind(ir::ValueKind k) {
  switch (k) {
    case ir::ValueKind::kSequence:
      return TensorInfo::Kind::kSequence;
    case ir::ValueKind::kOptionalTensor:
      return TensorInfo::Kind::kOptionalTensor;
    case ir::ValueKind::kOptionalSequence:
      return TensorInfo::Kind::kOptionalSequence;
    case ir::ValueKind::kTensor:
      break;
  }
  return TensorInfo::Kind::kTensor;
}

const char* any_kind_name(const AnyValue& v) {
  switch (v.kind) {
    case AnyValue::Kind::kTensor:
      return "a tensor";
    case AnyValue::Kind::kSequence:
      return "a sequence";
    case AnyValue::Kind::kNone:
      return "an empty optional";
  }
  return "?";
}

}  // namespace

// ------------------------------------------------------------------ Program

bool Program::needs_staging(const ir::Graph& graph) {
  for (int v : graph.inputs)
    if (is_host_kind(graph.values[v].kind)) return true;
  for (int v : graph.outputs)
    if (is_host_kind(graph.values[v].kind)) return true;
  const std::vector<char> from_data = ir::values_from_data(graph);
  for (const ir::Node& node : graph.nodes) {
    const ir::OpSchema* s = schema_of(graph, node);
    if (s != nullptr && (s->is_host_op() || s->shape_dependence() == ir::ShapeDependence::kData ||
                         !s->data_shape_inputs(node, from_data).empty()))
      return true;
    if (!bodies_of(node).empty()) return true;
  }
  return false;
}

Result<std::shared_ptr<Program>> Program::build(std::shared_ptr<const ir::Graph> graph,
                                                std::shared_ptr<const Env> env) {
  std::shared_ptr<Program> p(new Program());
  p->graph_ = std::move(graph);
  p->env_ = std::move(env);
  BP_RETURN_IF_ERROR(p->plan());
  const ir::Graph& g = *p->graph_;
  p->blocks_ = std::make_unique<TensorDataMap>(&g.constants, &g.constant_blocks);
  std::vector<const Tensor*> direct;
  auto read = [&](int v) {
    if (const Tensor* t = g.constant(v)) direct.push_back(t);
  };
  for (const auto& step : p->steps_)
    if (step->kind == Step::kHost)
      for (int n : step->nodes)
        for (int v : g.nodes[n].inputs) read(v);
  for (int v : g.outputs) read(v);
  BP_RETURN_IF_ERROR(p->blocks_->pin(direct));
  return p;
}

// Bodies are read as the importer made them: checked and folded here. A
// captured input is what the enclosing value is (`outer`, `kinds`): a body
// may read a sequence or optional of the enclosing graph.
static Result<std::shared_ptr<const ir::Graph>> prepare_body(
    const ir::Graph& body, const ir::Node& node, const ir::Graph& outer,
    const std::vector<ir::ValueKind>& kinds) {
  auto g = std::make_shared<ir::Graph>(body);
  for (size_t k = g->inputs.size() - g->captured; k < g->inputs.size(); ++k) {
    ir::Value& v = g->values[g->inputs[k]];
    const int id = outer.find_value(v.name);
    if (id < 0) continue;  // an error when the steps are planned
    v.kind = kinds[id];
    if (v.dtype == DType::kUndefined) v.dtype = outer.values[id].dtype;
  }
  const std::string what = node.describe() + ": body '" + body.name + "'";
  if (g->outputs.empty()) return invalid_argument(what + " has no outputs");
  BP_RETURN_IF_ERROR(g->topo_sort(), what);
  BP_RETURN_IF_ERROR(ir::fold_constants(*g), what);
  BP_RETURN_IF_ERROR(ir::verify(*g), what);
  return std::shared_ptr<const ir::Graph>(std::move(g));
}

Status Program::plan() {
  const ir::Graph& g = *graph_;
  const size_t nv = g.values.size(), nn = g.nodes.size();
  kinds_.resize(nv);
  for (size_t v = 0; v < nv; ++v) kinds_[v] = g.values[v].kind;

  // Every node against its schema; bodies built (they say what a control-flow
  // node's outputs are); the kind of every value propagated.
  std::vector<char> host(nn, 0), dynamic(nn, 0);
  // Per node: the values of its inputs that decide its output shapes and
  // hold data (a Resize's sizes computed from boxes); such a node is a stage
  // of its own, specialised for those values.
  const std::vector<char> from_data = ir::values_from_data(g);
  std::vector<std::vector<int>> shape_values(nn), param_values(nn);
  std::vector<std::vector<std::shared_ptr<Program>>> bodies(nn);
  for (size_t n = 0; n < nn; ++n) {
    const ir::Node& node = g.nodes[n];
    auto schema = ir::OpRegistry::builtin().lookup(
        node.domain, node.op_type, g.opset(node.domain) > 0 ? g.opset(node.domain) : INT32_MAX);
    if (!schema.ok())
      return Status(schema.status().code(), node.describe() + ": " + schema.status().message());
    BP_RETURN_IF_ERROR((*schema)->check(g, node));
    for (const ir::Graph* body : bodies_of(node)) {
      BP_ASSIGN_OR_RETURN(std::shared_ptr<const ir::Graph> prepared,
                          prepare_body(*body, node, g, kinds_));
      BP_ASSIGN_OR_RETURN(std::shared_ptr<Program> program, build(prepared, env_));
      bodies[n].push_back(std::move(program));
    }
    auto in_kind = [&](size_t i) {
      return node.has_input(i) ? kinds_[node.inputs[i]] : ir::ValueKind::kTensor;
    };
    auto set_kind = [&](size_t i, ir::ValueKind k) {
      if (node.has_output(i)) kinds_[node.outputs[i]] = k;
    };
    const std::string& op = node.op_type;
    if (op == "SequenceEmpty" || op == "SequenceConstruct" || op == "SequenceInsert" ||
        op == "SequenceErase" || op == "SplitToSequence" || op == "SequenceMap") {
      for (size_t i = 0; i < node.outputs.size(); ++i) set_kind(i, ir::ValueKind::kSequence);
    } else if (op == "Optional") {
      ir::ValueKind k = ir::ValueKind::kOptionalTensor;
      if (node.has_input(0)) {
        if (in_kind(0) == ir::ValueKind::kSequence) k = ir::ValueKind::kOptionalSequence;
      } else if (const ir::Attribute* t = node.attr("type")) {
        if (static_cast<ir::ValueKind>(t->i) == ir::ValueKind::kSequence)
          k = ir::ValueKind::kOptionalSequence;
      }
      set_kind(0, k);
    } else if (op == "OptionalGetElement") {
      set_kind(0, in_kind(0) == ir::ValueKind::kOptionalSequence ||
                          in_kind(0) == ir::ValueKind::kSequence
                      ? ir::ValueKind::kSequence
                      : ir::ValueKind::kTensor);
    } else if (op == "Identity") {
      set_kind(0, in_kind(0));
    } else if (op == "If" && !bodies[n].empty()) {
      const ir::Graph& then_g = bodies[n][0]->graph();
      for (size_t i = 0; i < node.outputs.size() && i < then_g.outputs.size(); ++i)
        set_kind(i, bodies[n][0]->kinds_[then_g.outputs[i]]);
    } else if (op == "Loop" && !bodies[n].empty()) {
      const ir::Graph& body = bodies[n][0]->graph();
      for (size_t i = 0; i < node.outputs.size() && i + 1 < body.outputs.size(); ++i)
        set_kind(i, bodies[n][0]->kinds_[body.outputs[i + 1]]);
    }
    bool is_host = (*schema)->is_host_op() || !bodies[n].empty();
    for (int v : node.inputs)
      if (v >= 0 && is_host_kind(kinds_[v])) is_host = true;
    for (int v : node.outputs)
      if (v >= 0 && is_host_kind(kinds_[v])) is_host = true;
    host[n] = is_host;
    dynamic[n] = !is_host && (*schema)->shape_dependence() == ir::ShapeDependence::kData;
    // Fixed: every input that decides a shape and is not a constant (a
    // Slice's starts computed from shapes crosses into the stage too).
    if (!is_host && !dynamic[n] && !(*schema)->data_shape_inputs(node, from_data).empty())
      for (size_t i = 0; i < node.inputs.size() && i < (*schema)->inputs().size(); ++i)
        if ((*schema)->inputs()[i].decides_shape && node.has_input(i) &&
            !g.values[node.inputs[i]].is_constant())
          shape_values[n].push_back(node.inputs[i]);
    // Its other operands after the first (a Resize's roi, a Pad's
    // constant_value): parameters a backend may need as constants.
    if (!shape_values[n].empty())
      for (size_t i = 1; i < node.inputs.size() - node.implicit_inputs; ++i)
        if (node.has_input(i) && !g.values[node.inputs[i]].is_constant() &&
            std::find(shape_values[n].begin(), shape_values[n].end(), node.inputs[i]) ==
                shape_values[n].end())
          param_values[n].push_back(node.inputs[i]);
  }

  // Steps: as many backend nodes per stage as can run with what exists when
  // the stage starts (a data-dependent node's outputs exist only after its
  // stage); then one host op whose inputs exist; and so on.
  std::vector<char> avail(nv, 0), done(nn, 0);
  for (int v : g.inputs) avail[v] = 1;
  for (size_t v = 0; v < nv; ++v)
    if (g.values[v].is_constant()) avail[v] = 1;
  std::vector<int> step_of(nn, -1);
  size_t remaining = nn;
  auto ready = [&](const ir::Node& node, const std::vector<char>& extra) {
    for (int v : node.inputs)
      if (v >= 0 && !avail[v] && !extra[v]) return false;
    return true;
  };
  while (remaining > 0) {
    auto step = std::make_unique<Step>();
    std::vector<char> inside(nv, 0);
    for (size_t n = 0; n < nn; ++n) {
      if (done[n] || host[n] || !shape_values[n].empty() || !ready(g.nodes[n], inside)) continue;
      step->nodes.push_back(static_cast<int>(n));
      done[n] = 1;
      --remaining;
      if (!dynamic[n])
        for (int v : g.nodes[n].outputs)
          if (v >= 0) inside[v] = 1;
    }
    // A node whose shapes depend on values that hold data: a stage of its own.
    for (size_t n = 0; n < nn && step->nodes.empty(); ++n)
      if (!done[n] && !host[n] && !shape_values[n].empty() && ready(g.nodes[n], inside)) {
        step->nodes.push_back(static_cast<int>(n));
        step->shape_values = shape_values[n];
        step->param_values = param_values[n];
        done[n] = 1;
        --remaining;
      }
    if (step->nodes.empty()) {
      step->kind = Step::kHost;
      for (size_t n = 0; n < nn && step->nodes.empty(); ++n)
        if (!done[n] && ready(g.nodes[n], inside)) {
          step->nodes.push_back(static_cast<int>(n));
          done[n] = 1;
          --remaining;
          step->bodies = bodies[n];
          for (const auto& body : bodies[n]) {
            const ir::Graph& bg = body->graph();
            std::vector<int> outer;
            for (size_t k = bg.inputs.size() - bg.captured; k < bg.inputs.size(); ++k) {
              const int id = g.find_value(bg.values[bg.inputs[k]].name);
              if (id < 0)
                return invalid_argument(g.nodes[n].describe() + ": body '" + bg.name + "' reads '" +
                                        bg.values[bg.inputs[k]].name +
                                        "', which no enclosing graph defines");
              outer.push_back(id);
            }
            step->captured.push_back(std::move(outer));
          }
        }
      if (step->nodes.empty())
        return internal_error(g.name + ": cannot order the nodes into steps");
    }
    for (int n : step->nodes) {
      step_of[n] = static_cast<int>(steps_.size());
      for (int v : g.nodes[n].outputs)
        if (v >= 0) avail[v] = 1;
    }
    steps_.push_back(std::move(step));
  }

  // What crosses between steps.
  std::vector<char> graph_output(nv, 0);
  for (int v : g.outputs) graph_output[v] = 1;
  for (size_t s = 0; s < steps_.size(); ++s) {
    Step& step = *steps_[s];
    std::set<int> in, out;
    for (int n : step.nodes) {
      for (int v : g.nodes[n].inputs)
        if (v >= 0 && !g.values[v].is_constant() &&
            (g.values[v].producer < 0 || step_of[g.values[v].producer] != static_cast<int>(s)))
          in.insert(v);
    }
    for (size_t n = 0; n < nn; ++n)
      for (int v : g.nodes[n].inputs)
        if (v >= 0 && g.values[v].producer >= 0 &&
            step_of[g.values[v].producer] == static_cast<int>(s) &&
            step_of[n] != static_cast<int>(s))
          out.insert(v);
    for (int n : step.nodes)
      for (int v : g.nodes[n].outputs)
        if (v >= 0 && graph_output[v]) out.insert(v);
    step.inputs.assign(in.begin(), in.end());
    step.outputs.assign(out.begin(), out.end());
  }
  return ok_status();
}

std::unique_ptr<ProgramState> Program::new_state() const {
  auto st = std::make_unique<ProgramState>();
  const ir::Graph& g = *graph_;
  st->env.resize(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v)
    if (const Tensor* t = g.constant(static_cast<int>(v))) st->env[v] = AnyValue::of(*t);
  st->steps.resize(steps_.size());
  return st;
}

Status Program::run(ProgramState& state, std::vector<AnyValue> inputs,
                    std::vector<AnyValue>* outputs) const {
  const ir::Graph& g = *graph_;
  if (inputs.size() != g.inputs.size())
    return internal_error(g.name + ": run with " + std::to_string(inputs.size()) +
                          " inputs, the graph has " + std::to_string(g.inputs.size()));
  std::vector<AnyValue>& env = state.env;
  for (size_t k = 0; k < inputs.size(); ++k) env[g.inputs[k]] = std::move(inputs[k]);
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = *steps_[s];
    const bool stage = step.kind == Step::kStage;
    profile::Span span(stage ? profile::Kind::kStage : profile::Kind::kOther, [&] {
      return (stage ? "stage " + std::to_string(s) + " from " : std::string("host ")) +
             g.nodes[step.nodes.front()].describe();
    });
    if (stage) BP_RETURN_IF_ERROR(run_stage(step, s, state));
    else BP_RETURN_IF_ERROR(run_host(step, state.steps[s], env));
  }
  outputs->clear();
  for (int v : g.outputs) outputs->push_back(env[v]);
  // What only this run needed is released (the outputs are shared).
  for (size_t v = 0; v < env.size(); ++v)
    if (!g.values[v].is_constant()) env[v] = AnyValue();
  return ok_status();
}

// The portable graph of one stage: the step's nodes, its inputs as graph
// inputs of the dtypes that reached it (shapes open: the stage model is
// specialised per run), its outputs as graph outputs.
static Result<std::unique_ptr<ir::Graph>> stage_graph(const ir::Graph& g, const std::string& name,
                                                      const std::vector<int>& nodes,
                                                      const std::vector<int>& inputs,
                                                      const std::vector<int>& outputs,
                                                      const std::vector<DType>& dtypes,
                                                      const std::vector<const Tensor*>& fixed) {
  auto sg = std::make_unique<ir::Graph>();
  sg->name = name;
  sg->source = g.source;
  sg->opsets = g.opsets;
  // Its constants view the graph's: its model drops what it has packed.
  sg->constant_blocks = g.constant_blocks;
  std::vector<int> map(g.values.size(), -1);
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (k < fixed.size() && fixed[k] != nullptr) {
      map[inputs[k]] = sg->add_constant(g.values[inputs[k]].name, *fixed[k]);
      continue;
    }
    ir::Value v;
    v.name = g.values[inputs[k]].name;
    v.dtype = dtypes[k];
    map[inputs[k]] = sg->add_value(std::move(v));
    sg->inputs.push_back(map[inputs[k]]);
  }
  auto add = [&](int v) -> int {
    if (v < 0) return -1;
    if (map[v] >= 0) return map[v];
    if (const Tensor* t = g.constant(v)) {
      map[v] = sg->add_constant(g.values[v].name, *t);
    } else {
      ir::Value copy = g.values[v];
      copy.producer = -1;
      copy.constant_key.clear();
      map[v] = sg->add_value(std::move(copy));
    }
    return map[v];
  };
  for (int n : nodes) {
    ir::Node node = g.nodes[n];
    for (int& v : node.inputs) v = add(v);
    for (int& v : node.outputs) v = add(v);
    sg->nodes.push_back(std::move(node));
  }
  for (int v : outputs) sg->outputs.push_back(add(v));
  BP_RETURN_IF_ERROR(sg->topo_sort());
  BP_RETURN_IF_ERROR(ir::verify(*sg));
  return sg;
}

Result<std::shared_ptr<CompiledModel>> Program::stage_model(
    const Step& step, size_t index, const std::vector<DType>& dtypes) const {
  std::lock_guard<std::mutex> lock(step.mu);
  auto it = step.models.find(dtypes);
  if (it != step.models.end()) return it->second;
  const std::string name = (graph_->name.empty() ? std::string("graph") : graph_->name) + "/stage" +
                           std::to_string(index);
  BP_ASSIGN_OR_RETURN(
      std::unique_ptr<ir::Graph> sg,
      stage_graph(*graph_, name, step.nodes, step.inputs, step.outputs, dtypes, {}));
  BP_ASSIGN_OR_RETURN(std::shared_ptr<CompiledModel> model,
                      CompiledModel::create(std::move(sg), env_->registry, env_->options));
  step.models.emplace(dtypes, model);
  return model;
}

// Small tensors (rank <= 1, <= 64 elements): parameters rather than data.
static bool small(const Tensor& t) {
  constexpr int64_t kMaxElements = 64;
  return t.rank() <= 1 && t.numel() <= kMaxElements;
}

// Small integer tensors: what shape arithmetic reads (starts, ends, axes,
// target shapes, counts).
static bool shape_like(const Tensor& t) {
  return (t.dtype() == DType::kInt64 || t.dtype() == DType::kInt32) && small(t);
}

static bool contains(const std::vector<int>& values, int v) {
  return std::find(values.begin(), values.end(), v) != values.end();
}

Result<std::shared_ptr<CompiledModel>> Program::value_model(const Step& step, size_t index,
                                                            const std::vector<AnyValue>& env,
                                                            std::vector<bool>* fixed) const {
  std::string key;
  std::vector<DType> dtypes;
  std::vector<const Tensor*> values;
  fixed->assign(step.inputs.size(), false);
  for (size_t k = 0; k < step.inputs.size(); ++k) {
    const Tensor& t = env[step.inputs[k]].tensor;
    dtypes.push_back(t.dtype());
    key += std::to_string(static_cast<int>(t.dtype())) + ";";
    const int v = step.inputs[k];
    const bool fix = step.shape_values.empty() ? shape_like(t)
                                               : contains(step.shape_values, v) ||
                                                     (contains(step.param_values, v) && small(t));
    if (!fix) {
      values.push_back(nullptr);
      continue;
    }
    (*fixed)[k] = true;
    values.push_back(&t);
    key += shape_to_string(t.shape());
    key.append(static_cast<const char*>(t.data()), t.size_bytes());
    key += ";";
  }
  std::lock_guard<std::mutex> lock(step.mu);
  for (auto it = step.value_models.begin(); it != step.value_models.end(); ++it)
    if (it->first == key) {
      step.value_models.splice(step.value_models.begin(), step.value_models, it);
      return it->second;
    }
  const std::string name = (graph_->name.empty() ? std::string("graph") : graph_->name) + "/stage" +
                           std::to_string(index) + "@values";
  BP_ASSIGN_OR_RETURN(
      std::unique_ptr<ir::Graph> sg,
      stage_graph(*graph_, name, step.nodes, step.inputs, step.outputs, dtypes, values));
  // Folding reads weights directly: in memory until the model is made (and
  // has pinned what its own shape inference reads).
  std::vector<std::unique_ptr<NamedDataMap::Hold>> held;
  {
    const TensorDataMap blocks(&sg->constants, &sg->constant_blocks);
    for (const auto& [key, tensor] : sg->constants) {
      std::unique_ptr<NamedDataMap::Hold> hold;
      BP_RETURN_IF_ERROR(blocks.hold_tensor(tensor, key, &hold));
      if (hold != nullptr) held.push_back(std::move(hold));
    }
  }
  BP_RETURN_IF_ERROR(ir::fold_constants(*sg));
  BP_ASSIGN_OR_RETURN(std::shared_ptr<CompiledModel> model,
                      CompiledModel::create(std::move(sg), env_->registry, env_->options));
  step.value_models.emplace_front(key, model);
  while (step.value_models.size() > std::max<size_t>(1, env_->options.max_specializations))
    step.value_models.pop_back();
  return model;
}

Status Program::run_stage(const Step& step, size_t index, ProgramState& state) const {
  std::vector<AnyValue>& env = state.env;
  const ir::Graph& g = *graph_;
  std::vector<DType> dtypes;
  for (int v : step.inputs) {
    const AnyValue& a = env[v];
    if (a.kind != AnyValue::Kind::kTensor || a.tensor.empty())
      return invalid_argument("value '" + g.values[v].name + "' is " +
                              (a.tensor.empty() && a.kind == AnyValue::Kind::kTensor
                                   ? std::string("not set")
                                   : std::string(any_kind_name(a))) +
                              ", but " + g.nodes[step.nodes.front()].describe() +
                              " and the nodes with it take tensors");
    dtypes.push_back(a.tensor.dtype());
  }
  // A stage of one node whose shapes depend on values it reads is always
  // specialised for those values.
  bool by_value = !step.shape_values.empty();
  if (!by_value) {
    std::lock_guard<std::mutex> lock(step.mu);
    by_value = step.by_value;
  }
  ProgramState::StepState& ss = state.steps[index];
  // Runs the stage on `model`, binding the inputs not made constants.
  auto run_on = [&](const std::shared_ptr<CompiledModel>& model,
                    const std::vector<bool>& fixed) -> Status {
    if (ss.model != model || !ss.session) {
      ss.session.reset();
      ss.model = model;
      BP_ASSIGN_OR_RETURN(ss.session, model->create_session());
    }
    for (size_t k = 0; k < step.inputs.size(); ++k)
      if (k >= fixed.size() || !fixed[k])
        BP_RETURN_IF_ERROR(
            ss.session->bind_input(g.values[step.inputs[k]].name, env[step.inputs[k]].tensor));
    return ss.session->run();
  };
  if (!by_value) {
    BP_ASSIGN_OR_RETURN(std::shared_ptr<CompiledModel> model, stage_model(step, index, dtypes));
    Status s = run_on(model, {});
    // Shapes that depend on the values of small integer inputs: from now on
    // this stage is specialised for those values too.
    const bool needs_values =
        !s.ok() && s.code() == StatusCode::kInvalidArgument &&
        s.message().find("must be constant to infer a static shape") != std::string::npos &&
        std::any_of(step.inputs.begin(), step.inputs.end(),
                    [&](int v) { return shape_like(env[v].tensor); });
    if (!s.ok() && !needs_values) return s;
    if (needs_values) {
      std::lock_guard<std::mutex> lock(step.mu);
      step.by_value = by_value = true;
    }
  }
  if (by_value) {
    std::vector<bool> fixed;
    BP_ASSIGN_OR_RETURN(std::shared_ptr<CompiledModel> model,
                        value_model(step, index, env, &fixed));
    BP_RETURN_IF_ERROR(run_on(model, fixed));
  }
  for (int v : step.outputs) {
    BP_ASSIGN_OR_RETURN(Tensor t, ss.session->get_output(g.values[v].name));
    env[v] = AnyValue::of(t.clone());  // the session's memory is reused next run
  }
  return ok_status();
}

// Every model a stage has built: per input dtypes, and per value (those
// still cached). The caller holds step.mu.
static std::vector<std::shared_ptr<CompiledModel>> stage_models(
    const std::map<std::vector<DType>, std::shared_ptr<CompiledModel>>& by_dtypes,
    const std::list<std::pair<std::string, std::shared_ptr<CompiledModel>>>& by_value) {
  std::vector<std::shared_ptr<CompiledModel>> out;
  for (const auto& entry : by_dtypes) out.push_back(entry.second);
  for (const auto& entry : by_value) out.push_back(entry.second);
  return out;
}

void Program::add_stats(SpecializationStats* stats) const {
  for (const auto& step : steps_) {
    std::lock_guard<std::mutex> lock(step->mu);
    for (const auto& model : stage_models(step->models, step->value_models)) {
      SpecializationStats s = model->specialization_stats();
      stats->hits += s.hits;
      stats->misses += s.misses;
      stats->builds += s.builds;
      stats->evictions += s.evictions;
      stats->cached += s.cached;
      stats->variants += s.variants;
      stats->polymorphic_partitions += s.polymorphic_partitions;
      stats->build_ms += s.build_ms;
    }
    for (const auto& body : step->bodies) body->add_stats(stats);
  }
}

void Program::add_backends(std::vector<std::string>* used) const {
  for (const auto& step : steps_) {
    std::lock_guard<std::mutex> lock(step->mu);
    for (const auto& model : stage_models(step->models, step->value_models))
      for (const std::string& b : model->backends_used())
        if (std::find(used->begin(), used->end(), b) == used->end()) used->push_back(b);
    for (const auto& body : step->bodies) body->add_backends(used);
  }
}

std::string Program::describe(const std::string& indent) const {
  const ir::Graph& g = *graph_;
  std::string out;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = *steps_[s];
    if (step.kind == Step::kStage) {
      out += indent + "stage " + std::to_string(s) + ": " + std::to_string(step.nodes.size()) +
             " node(s), specialised per run";
      if (!step.shape_values.empty()) {
        out += " and per value of";
        for (int v : step.shape_values) out += " '" + g.values[v].name + "'";
      }
      std::lock_guard<std::mutex> lock(step.mu);
      std::vector<std::string> used;
      for (const auto& model : stage_models(step.models, step.value_models))
        for (const std::string& b : model->backends_used())
          if (std::find(used.begin(), used.end(), b) == used.end()) used.push_back(b);
      if (!used.empty()) {
        out += " on";
        for (const auto& b : used) out += " " + b;
      }
      out += "\n";
    } else {
      const ir::Node& node = g.nodes[step.nodes.front()];
      out += indent + "host  " + std::to_string(s) + ": " + node.describe() + "\n";
      for (const auto& body : step.bodies) {
        out += indent + "  body '" + body->graph().name + "':\n";
        out += body->describe(indent + "    ");
      }
    }
  }
  return out;
}

// -------------------------------------------------------------- StagedModel

namespace {

class StagedSession : public Session {
 public:
  explicit StagedSession(std::shared_ptr<StagedModel> model)
      : model_(std::move(model)), state_(model_->program().new_state()) {
    inputs_.resize(model_->inputs().size());
    set_.assign(inputs_.size(), false);
    input_buffers_.resize(inputs_.size());
    outputs_.resize(model_->outputs().size());
    tensors_.resize(outputs_.size());
    bound_.resize(outputs_.size());
    // An input the model gives a default holds it until a feed replaces it.
    const ir::Graph& g = model_->program().graph();
    for (size_t i = 0; i < g.inputs.size() && i < inputs_.size(); ++i) {
      auto it = g.input_defaults.find(g.values[g.inputs[i]].name);
      if (it == g.input_defaults.end()) continue;
      inputs_[i] = AnyValue::of(it->second);
      set_[i] = true;
    }
  }

  Status set_input(const std::string& name, const Tensor& tensor) override {
    BP_ASSIGN_OR_RETURN(size_t i, input_index(name));
    return set_input(i, tensor);
  }
  Status set_input(size_t index, const Tensor& tensor) override {
    BP_RETURN_IF_ERROR(check_tensor(index, tensor));
    // Into this input's buffer, kept from run to run unless something still
    // holds the last run's bytes (an output that is this input): a fresh
    // allocation per run cost page faults on every run.
    inputs_[index] = AnyValue();
    std::shared_ptr<Tensor>& buffer = input_buffers_[index];
    const size_t size = tensor.size_bytes();
    if (buffer == nullptr || buffer.use_count() > 1 || buffer->size_bytes() < size)
      buffer = std::make_shared<Tensor>(DType::kUInt8, Shape{static_cast<int64_t>(size)});
    if (size > 0) std::memcpy(buffer->data(), tensor.data(), size);
    inputs_[index] =
        AnyValue::of(Tensor::view(tensor.dtype(), tensor.shape(), buffer->data(), buffer));
    set_[index] = true;
    return ok_status();
  }
  Status bind_input(const std::string& name, const Tensor& tensor) override {
    BP_ASSIGN_OR_RETURN(size_t i, input_index(name));
    BP_RETURN_IF_ERROR(check_tensor(i, tensor));
    if (tensor.size_bytes() > 0 && tensor.data() == nullptr)
      return invalid_argument("input '" + name + "': bound tensor has no data");
    inputs_[i] = AnyValue::of(
        Tensor::view(tensor.dtype(), tensor.shape(), const_cast<void*>(tensor.data())));
    set_[i] = true;
    return ok_status();
  }
  Status bind_output(const std::string& name, const Tensor& tensor) override {
    BP_ASSIGN_OR_RETURN(size_t i, output_index(name));
    bound_[i] = tensor.empty() ? Tensor()
                               : Tensor::view(tensor.dtype(), tensor.shape(),
                                              const_cast<void*>(tensor.data()));
    return ok_status();
  }
  Status feed(const std::string& output, const std::string& input) override {
    return unsupported("feeding output '" + output + "' to input '" + input +
                       "' is not supported for a model that runs in stages (control flow, "
                       "sequences or data-dependent shapes); set the input from the output");
  }

  Status set_input_value(const std::string& name, const AnyValue& value) override {
    BP_ASSIGN_OR_RETURN(size_t i, input_index(name));
    const TensorInfo& info = model_->inputs()[i];
    const std::string what = "input '" + name + "'";
    using K = TensorInfo::Kind;
    switch (value.kind) {
      case AnyValue::Kind::kTensor:
        if (info.kind == K::kSequence || info.kind == K::kOptionalSequence)
          return invalid_argument(what + " is a sequence, got a tensor");
        return set_input(i, value.tensor);
      case AnyValue::Kind::kSequence:
        if (info.kind != K::kSequence && info.kind != K::kOptionalSequence)
          return invalid_argument(what + " is not a sequence, got one");
        for (const Tensor& t : value.sequence)
          if (t.dtype() != info.dtype)
            return invalid_argument(what + " is a sequence of " + dtype_name(info.dtype) +
                                    ", got an element of " + dtype_name(t.dtype()));
        break;
      case AnyValue::Kind::kNone:
        if (info.kind != K::kOptionalTensor && info.kind != K::kOptionalSequence)
          return invalid_argument(what + " is not optional, got an empty optional");
        break;
    }
    AnyValue copy = value;
    copy.dtype = info.dtype;
    for (Tensor& t : copy.sequence) t = t.clone();
    inputs_[i] = std::move(copy);
    set_[i] = true;
    return ok_status();
  }

  Status start_profiling(const std::string& path) override { return profile_.start(path); }
  Result<ProfileSummary> end_profiling() override { return profile_.end(); }

  Status run() override {
    profile::SessionProfile::Run profiled(profile_);
    for (size_t i = 0; i < set_.size(); ++i)
      if (!set_[i]) return invalid_argument("input '" + model_->inputs()[i].name + "' was not set");
    BP_RETURN_IF_ERROR(model_->program().run(*state_, inputs_, &outputs_));
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const AnyValue& v = outputs_[i];
      tensors_[i] = v.kind == AnyValue::Kind::kTensor ? v.tensor : Tensor();
      if (bound_[i].empty()) continue;
      const std::string& name = model_->outputs()[i].name;
      if (v.kind != AnyValue::Kind::kTensor)
        return invalid_argument("output '" + name + "' is " + any_kind_name(v) +
                                ", not a tensor a bound buffer can take");
      if (v.tensor.dtype() != bound_[i].dtype() || v.tensor.shape() != bound_[i].shape())
        return invalid_argument("output '" + name + "' is " + dtype_name(v.tensor.dtype()) + " " +
                                shape_to_string(v.tensor.shape()) +
                                " in this run, the bound tensor " + dtype_name(bound_[i].dtype()) +
                                " " + shape_to_string(bound_[i].shape()));
      if (v.tensor.size_bytes() > 0)
        std::memcpy(bound_[i].data(), v.tensor.data(), v.tensor.size_bytes());
      tensors_[i] = bound_[i];
    }
    return ok_status();
  }

  Result<Tensor> get_output(const std::string& name) const override {
    BP_ASSIGN_OR_RETURN(size_t i, output_index(name));
    const AnyValue& v = outputs_[i];
    if (v.kind != AnyValue::Kind::kTensor)
      return invalid_argument("output '" + name + "' is " + any_kind_name(v) +
                              "; read it with get_output_value");
    if (tensors_[i].empty()) return invalid_argument("output '" + name + "': no run yet");
    return tensors_[i];
  }
  Result<AnyValue> get_output_value(const std::string& name) const override {
    BP_ASSIGN_OR_RETURN(size_t i, output_index(name));
    return outputs_[i];
  }
  const Tensor& output(size_t index) const override { return tensors_.at(index); }
  size_t num_outputs() const override { return outputs_.size(); }

 private:
  Result<size_t> input_index(const std::string& name) const {
    const auto& infos = model_->inputs();
    for (size_t i = 0; i < infos.size(); ++i)
      if (infos[i].name == name) return i;
    return not_found("model has no input named '" + name + "'");
  }
  Result<size_t> output_index(const std::string& name) const {
    const auto& infos = model_->outputs();
    for (size_t i = 0; i < infos.size(); ++i)
      if (infos[i].name == name) return i;
    return not_found("model has no output named '" + name + "'");
  }
  Status check_tensor(size_t index, const Tensor& tensor) const {
    const auto& infos = model_->inputs();
    if (index >= infos.size())
      return not_found("input index " + std::to_string(index) + " out of range (model has " +
                       std::to_string(infos.size()) + " inputs)");
    const TensorInfo& info = infos[index];
    if (info.kind == TensorInfo::Kind::kSequence)
      return invalid_argument("input '" + info.name +
                              "' is a sequence: set it with set_input_value");
    if (tensor.dtype() != info.dtype)
      return invalid_argument("input '" + info.name + "' expects dtype " + dtype_name(info.dtype) +
                              ", got " + dtype_name(tensor.dtype()));
    const ir::Value& v = model_->program().graph().values[model_->program().graph().inputs[index]];
    if (!v.has_shape || info.kind != TensorInfo::Kind::kTensor) return ok_status();
    if (tensor.shape().size() != info.shape.size())
      return invalid_argument("input '" + info.name + "' expects rank " +
                              std::to_string(info.shape.size()) + ", got " +
                              shape_to_string(tensor.shape()));
    for (size_t d = 0; d < info.shape.size(); ++d)
      if (info.shape[d] >= 0 && info.shape[d] != tensor.shape()[d])
        return invalid_argument("input '" + info.name + "' dim " + std::to_string(d) +
                                " is fixed at " + std::to_string(info.shape[d]) + ", got " +
                                shape_to_string(tensor.shape()));
    return ok_status();
  }

  std::shared_ptr<StagedModel> model_;
  profile::SessionProfile profile_;
  std::unique_ptr<ProgramState> state_;
  std::vector<AnyValue> inputs_;
  std::vector<bool> set_;
  // Per input: the bytes set_input copies into (a view of them is the input).
  std::vector<std::shared_ptr<Tensor>> input_buffers_;
  std::vector<AnyValue> outputs_;
  std::vector<Tensor> tensors_;  // the tensor outputs, for output(index)
  std::vector<Tensor> bound_;
};

}  // namespace

Result<std::shared_ptr<StagedModel>> StagedModel::create(std::unique_ptr<ir::Graph> graph,
                                                         const BackendRegistry& registry,
                                                         const CompiledModel::Options& options,
                                                         const LoopBounds& bounds) {
  if (bounds.max_iterations < 1 || bounds.max_bytes < 1)
    return invalid_argument("the loop bounds must be at least 1");
  std::shared_ptr<StagedModel> m(new StagedModel());
  const std::string source = graph->source;
  for (const auto& [name, shape] : options.placement.input_shapes) {
    const int id = graph->find_value(name);
    if (id < 0 || std::find(graph->inputs.begin(), graph->inputs.end(), id) == graph->inputs.end())
      return not_found("a shape is given for '" + name + "', which is not a graph input")
          .with_context(source);
  }
  auto env = std::make_shared<Program::Env>();
  env->registry = registry;
  env->options = options;
  env->options.placement.input_shapes.clear();
  env->bounds = bounds;
  m->capacity_ = options.max_specializations;
  std::shared_ptr<const ir::Graph> g(std::move(graph));
  BP_ASSIGN_OR_RETURN(m->program_, Program::build(g, env), source);
  for (int v : g->inputs) {
    const ir::Value& value = g->values[v];
    TensorInfo info{value.name, value.dtype, value.shape, value.dim_params};
    if (info.dim_names.size() != info.shape.size()) info.dim_names.clear();
    info.kind = info_kind(value.kind);
    if (auto d = g->input_defaults.find(value.name); d != g->input_defaults.end())
      info.default_value = d->second;
    m->inputs_.push_back(std::move(info));
  }
  for (int v : g->outputs) {
    const ir::Value& value = g->values[v];
    TensorInfo info{value.name, value.dtype, value.shape, value.dim_params};
    if (info.dim_names.size() != info.shape.size()) info.dim_names.clear();
    info.kind = info_kind(m->program_->kind_of(v));
    if (info.kind != TensorInfo::Kind::kTensor) info.shape.clear();
    m->outputs_.push_back(std::move(info));
  }
  m->notes_.push_back(
      "the model runs in stages (control flow, sequences or shapes that depend on data): each "
      "stage is specialised for the shapes that reach it, host ops run between stages");
  return m;
}

const std::vector<PartitionDescription>& StagedModel::partitions() const {
  static const std::vector<PartitionDescription> none;  // per stage, per run's shapes
  return none;
}

const std::vector<CopyDescription>& StagedModel::copies() const {
  static const std::vector<CopyDescription> none;
  return none;
}

std::vector<std::string> StagedModel::backends_used() const {
  std::vector<std::string> used;
  program_->add_backends(&used);
  return used;
}

std::string StagedModel::describe_plan(PlanFormat format) const {
  const std::string text = program_->describe("  ");
  switch (format) {
    case PlanFormat::kJson: {
      std::string escaped;
      for (char c : text) {
        if (c == '"' || c == '\\') escaped += '\\';
        if (c == '\n') {
          escaped += "\\n";
          continue;
        }
        escaped += c;
      }
      return "{\"model\": \"" + program_->graph().source + "\", \"staged\": true, \"steps\": \"" +
             escaped + "\"}";
    }
    case PlanFormat::kDot:
      return "digraph plan {\n  label=\"staged model: stages are planned per run\";\n}\n";
    case PlanFormat::kText:
      break;
  }
  return "model       " + program_->graph().source + "\nstaged execution:\n" + text;
}

const ModelMetadata& StagedModel::metadata() const {
  const ir::Graph& g = program_->graph();
  return g.metadata ? *g.metadata : Model::metadata();
}

SpecializationStats StagedModel::specialization_stats() const {
  SpecializationStats s;
  program_->add_stats(&s);
  s.capacity = capacity_;
  return s;
}

Result<std::unique_ptr<Session>> StagedModel::create_session() {
  return std::unique_ptr<Session>(std::make_unique<StagedSession>(shared_from_this()));
}

}  // namespace backplane
