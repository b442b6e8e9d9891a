#include "session/specialization.hpp"

#include <algorithm>
#include <cstring>

namespace backplane {

std::string signature_to_string(const ir::Graph& graph, const Signature& signature) {
  std::string out;
  for (size_t i = 0; i < signature.size() && i < graph.inputs.size(); ++i)
    out += (out.empty() ? "" : " ") + graph.values[graph.inputs[i]].name + "=" +
           shape_to_string(signature[i]);
  return out;
}

namespace {

// The entry for value v in a list sorted by value id, or null.
template <class T>
const T* find_changed(const std::vector<std::pair<int, T>>& changed, int v) {
  auto it = std::lower_bound(changed.begin(), changed.end(), v,
                             [](const std::pair<int, T>& e, int id) { return e.first < id; });
  return it != changed.end() && it->first == v ? &it->second : nullptr;
}

}  // namespace

const Shape& Specialization::shape(int v) const {
  const Shape* changed = find_changed(shapes_changed_, v);
  return changed != nullptr ? *changed : graph_->values[v].shape;
}

const Tensor* Specialization::constant(int v) const {
  const Tensor* changed = find_changed(constants_changed_, v);
  return changed != nullptr ? changed : graph_->constant(v);
}

size_t Specialization::value_bytes(int value) const {
  const ir::Value& v = graph_->values[value];
  if (!v.shape_is_static()) return 0;  // known when its node runs: from the output sink
  return static_cast<size_t>(shape_numel(shape(value))) * dtype_size(v.dtype);
}

bool Specialization::can_vary(const Specialization& base) {
  if (base.is_variant() || base.shaped_plan_) return false;
  for (const auto& ep : base.executable_)
    if (!ep->polymorphic || ep->imperative) return false;
  for (const ir::Value& v : base.graph_->values)
    if (v.has_shape && !v.shape_is_static()) return false;
  return true;
}

std::shared_ptr<Specialization> Specialization::vary(std::shared_ptr<const Specialization> base,
                                                     Signature signature, const ir::Graph& inferred,
                                                     const std::vector<bool>& live,
                                                     const std::vector<uint64_t>& changed_at,
                                                     uint64_t base_at) {
  const ir::Graph& g = *base->graph_;
  if (inferred.values.size() != g.values.size() || live.size() != g.values.size() ||
      changed_at.size() != g.values.size())
    return nullptr;
  std::shared_ptr<Specialization> s(new Specialization());
  for (size_t i = 0; i < g.values.size(); ++i) {
    if (!live[i] || changed_at[i] <= base_at) continue;
    const int v = static_cast<int>(i);
    const ir::Value& was = g.values[i];
    const ir::Value& now = inferred.values[i];
    if (now.dtype != was.dtype || now.has_shape != was.has_shape ||
        now.is_constant() != was.is_constant() || !now.shape_is_static())
      return nullptr;
    if (now.shape != was.shape) s->shapes_changed_.emplace_back(v, now.shape);
    // A constant under the same key is the same one (the model's own);
    // one these shapes folded has a key of its own in each graph.
    if (!now.is_constant() || now.constant_key == was.constant_key) continue;
    const Tensor* a = g.constant(v);
    const Tensor* b = inferred.constant(v);
    if (a == nullptr || b == nullptr) return nullptr;
    if (a->shape() != b->shape() ||
        (b->size_bytes() > 0 && std::memcmp(a->data(), b->data(), b->size_bytes()) != 0))
      s->constants_changed_.emplace_back(v, *b);  // shares its bytes
  }
  s->signature_ = std::move(signature);
  s->graph_ = base->graph_;
  s->weights_ = base->weights_;
  s->base_ = std::move(base);
  s->plan_shapes();
  return s;
}

Result<std::shared_ptr<Specialization>> Specialization::build(
    Signature signature, std::shared_ptr<const ir::Graph> graph,
    std::shared_ptr<const NamedDataMap> weights, const Planner& planner,
    const BuildOptions& options) {
  std::shared_ptr<Specialization> s(new Specialization());
  s->signature_ = std::move(signature);
  s->graph_ = std::move(graph);
  s->weights_ = std::move(weights);
  BP_RETURN_IF_ERROR(s->compile(planner, options));
  return s;
}

Status Specialization::compile(const Planner& planner, const BuildOptions& options) {
  Exclusions excluded;
  std::vector<std::string> plan_notes;
  auto round = [&]() -> Result<bool> {
    plan_notes.clear();
    executable_.clear();
    BP_ASSIGN_OR_RETURN(plan_, planner(excluded, &plan_notes));
    if (options.before_compile) BP_RETURN_IF_ERROR(options.before_compile(plan_));
    return compile_plan(*graph_, *weights_, plan_, options.num_threads, &excluded, &notes_,
                        &executable_, options.polymorphic);
  };
  BP_RETURN_IF_ERROR(replan_until_compiled(round, [&] { return excluded.size(); }));
  notes_.insert(notes_.end(), plan_notes.begin(), plan_notes.end());
  shaped_plan_ = !excluded.empty();

  // What the partitions compiled here point into lives as long as they do.
  struct Held {
    std::shared_ptr<const ir::Graph> graph;
    std::shared_ptr<const NamedDataMap> weights;
  };
  auto held = std::make_shared<Held>(Held{graph_, weights_});
  for (auto& ep : executable_)
    if (ep->keep_alive == nullptr) ep->keep_alive = held;

  BP_ASSIGN_OR_RETURN(space_of_, assign_spaces(executable_, &spaces_));
  BP_RETURN_IF_ERROR(check_dynamic_values());
  steps_ = plan_steps(*graph_, executable_, space_of_);
  plan_shapes();
  return ok_status();
}

void Specialization::plan_shapes() {
  // Every value's shape, per partition, for execute_shaped (a variant's
  // changed shapes looked up by value here, not searched for at each use).
  std::vector<const Shape*> changed(shapes_changed_.empty() ? 0 : graph_->values.size(), nullptr);
  for (const auto& [v, dims] : shapes_changed_) changed[v] = &dims;
  auto shape_here = [&](int v) -> const Shape& {
    return changed.empty() || changed[v] == nullptr ? graph_->values[v].shape : *changed[v];
  };
  shapes_.reserve(executable().size());
  for (const auto& ep : executable()) {
    PartitionShapes ps;
    ps.values.reserve(ep->view->value_ids().size());
    for (int v : ep->view->value_ids()) {
      const Shape& dims = shape_here(v);
      ps.values.push_back(bp_shape_t{dims.size(), dims.empty() ? nullptr : dims.data()});
    }
    shapes_.push_back(std::move(ps));
  }
  const Specialization& c = core();
  memory_ = plan_memory(*graph_, c.executable_, c.space_of_, c.steps_, [&](int v) -> size_t {
    const ir::Value& value = graph_->values[v];
    if (!value.shape_is_static()) return 0;  // as value_bytes
    return static_cast<size_t>(shape_numel(shape_here(v))) * dtype_size(value.dtype);
  });
  describe_outputs();
}

// A value whose shape depends on data (a -1 dim, from a node with
// ShapeDependence::kData) comes back through the output sink when its node
// runs: it must be a graph output made on the host (staging puts such nodes
// last in a stage, session/staged_model.hpp) that no partition reads.
Status Specialization::check_dynamic_values() const {
  const ir::Graph& g = *graph_;
  for (int v : g.outputs) {
    if (g.values[v].shape_is_static()) continue;
    for (size_t p = 0; p < executable_.size(); ++p) {
      const auto& ep = *executable_[p];
      const std::string what = "value '" + g.values[v].name + "' (shape " +
                               shape_to_string(g.values[v].shape) + ", known when it is made)";
      if (std::find(ep.inputs.begin(), ep.inputs.end(), v) != ep.inputs.end())
        return unsupported(what + " is read by a partition of the same stage");
      if (std::find(ep.outputs.begin(), ep.outputs.end(), v) != ep.outputs.end() &&
          space_of_[p] != 0)
        return unsupported(what + " is made in device memory by backend '" + ep.backend->id() +
                           "'; data-dependent shapes are taken in host memory only");
    }
  }
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].has_shape && !g.values[v].shape_is_static() &&
        std::find(g.outputs.begin(), g.outputs.end(), static_cast<int>(v)) == g.outputs.end())
      return unsupported("value '" + g.values[v].name +
                         "' has a shape known only at run time but is not an output of its stage");
  return ok_status();
}

// The public descriptions (outputs, partitions, copies).
void Specialization::describe_outputs() {
  const ir::Graph& g = *graph_;
  for (int v : g.outputs) outputs_.push_back({g.values[v].name, g.values[v].dtype, shape(v), {}});
}

// Partitions and copies are described when first asked for: a decoder builds
// a specialisation per token, and nobody reads those of most of them.
void Specialization::describe_plan_parts() const {
  const ir::Graph& g = *graph_;
  for (size_t i = 0; i < executable().size(); ++i) {
    const auto& ep = executable()[i];
    PartitionDescription d;
    d.backend = ep->backend->id();
    d.imperative = ep->imperative;
    d.polymorphic = ep->polymorphic;
    // (A shared polymorphic partition's view may come from another
    // specialisation's graph: the plan has this one's node ids.)
    for (int n : plan().partitions[i].nodes) d.nodes.push_back(g.nodes[n].name);
    for (int v : ep->view->input_values()) d.inputs.push_back(g.values[v].name);
    for (int v : ep->view->output_values()) d.outputs.push_back(g.values[v].name);
    partition_desc_.push_back(std::move(d));
  }
  auto describe_copy = [&](const ExecStep& s, bool once) {
    copy_desc_.push_back({g.values[s.value].name, spaces()[s.from].name, spaces()[s.to].name,
                          value_bytes(s.value), once});
  };
  for (const ExecStep& s : init_copies()) describe_copy(s, true);
  for (const ExecStep& s : steps())
    if (s.kind == ExecStep::kCopy) describe_copy(s, false);
}

const std::vector<PartitionDescription>& Specialization::partitions() const {
  std::call_once(described_, [this] { describe_plan_parts(); });
  return partition_desc_;
}

const std::vector<CopyDescription>& Specialization::copies() const {
  std::call_once(described_, [this] { describe_plan_parts(); });
  return copy_desc_;
}

std::vector<std::string> Specialization::backends_used() const {
  std::vector<std::string> ids;
  for (const Partition& p : plan().partitions)
    if (std::find(ids.begin(), ids.end(), p.backend->id()) == ids.end())
      ids.push_back(p.backend->id());
  return ids;
}

size_t Specialization::polymorphic_partitions() const {
  const auto& executable = this->executable();
  return static_cast<size_t>(std::count_if(executable.begin(), executable.end(),
                                           [](const auto& ep) { return ep->polymorphic; }));
}

}  // namespace backplane
