#include "session/compiled_model.hpp"

#include "core/log.hpp"
#include "core/profiler.hpp"
#include "core/tensor_data_map.hpp"
#include "pipeline/front_end.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <unordered_map>

namespace backplane {
namespace {

// "[batch,seq,768]": the model's names where it has them, else sizes.
std::string declared_shape(const TensorInfo& info) {
  std::string out = "[";
  for (size_t d = 0; d < info.shape.size(); ++d) {
    if (d > 0) out += ",";
    if (d < info.dim_names.size() && !info.dim_names[d].empty()) out += info.dim_names[d];
    else if (info.shape[d] < 0) out += "?";
    else out += std::to_string(info.shape[d]);
  }
  return out + "]";
}

bool has_shape(const ir::Value& v) { return v.has_shape; }

constexpr size_t kPlansKept = 8;

// Shape variants kept per ModelOptions::max_specializations: a variant holds
// only its shapes, so a generation loop's lengths fit (512 by default, the
// number of shapes CpuOneDnn keeps lowered per partition).
constexpr size_t kVariantsPerSpecialization = 32;

}  // namespace

Result<std::shared_ptr<CompiledModel>> CompiledModel::create(std::unique_ptr<ir::Graph> graph,
                                                             const BackendRegistry& registry,
                                                             const Options& options) {
  std::shared_ptr<CompiledModel> m(new CompiledModel());
  m->registry_ = registry;
  m->weights_ = std::make_shared<TensorDataMap>(&graph->constants, &graph->constant_blocks);
  const std::string source = graph->source;
  BP_RETURN_IF_ERROR(m->init(std::move(graph), options), source);
  return m;
}

Result<std::shared_ptr<CompiledModel>> CompiledModel::create(std::unique_ptr<ir::Graph> graph,
                                                             const BackendRegistry& registry,
                                                             const PlacementOptions& placement,
                                                             uint64_t network_id, int num_threads) {
  Options options;
  options.placement = placement;
  options.network_id = network_id;
  options.num_threads = num_threads;
  return create(std::move(graph), registry, options);
}

Result<std::shared_ptr<CompiledModel>> CompiledModel::create_with(
    std::unique_ptr<ir::Graph> portable, std::unique_ptr<NamedDataMap> weights,
    StoredSpecializations stored, const BackendRegistry& registry, const Options& options,
    std::shared_ptr<const void> keep_alive) {
  std::shared_ptr<CompiledModel> m(new CompiledModel());
  m->keep_alive_ = std::move(keep_alive);
  m->weights_ = std::move(weights);
  m->stored_ = std::move(stored);
  m->registry_ = registry;
  const std::string source = portable->source;
  BP_RETURN_IF_ERROR(m->init(std::move(portable), options), source);
  return m;
}

Status CompiledModel::init(std::unique_ptr<ir::Graph> graph, const Options& options) {
  portable_ = std::move(graph);
  options_ = options;
  if (options_.max_specializations == 0)
    return invalid_argument("max_specializations must be at least 1");
  stats_.capacity = options_.max_specializations;
  const ir::Graph& g = *portable_;
  for (int v : g.inputs) {
    const ir::Value& value = g.values[v];
    TensorInfo info{value.name, value.dtype, value.shape, value.dim_params};
    if (!info.dim_names.empty() && info.dim_names.size() != info.shape.size())
      info.dim_names.clear();
    if (auto d = g.input_defaults.find(value.name); d != g.input_defaults.end())
      info.default_value = d->second;
    inputs_.push_back(std::move(info));
  }
  for (int v : g.outputs) {
    const ir::Value& value = g.values[v];
    outputs_.push_back({value.name, value.dtype, value.shape, value.dim_params});
  }

  // A model with open dims keeps only the weights the host reads in place
  // once its backends have packed the rest (release_packed).
  const bool open_dims = std::any_of(g.inputs.begin(), g.inputs.end(), [&](int v) {
    return !has_shape(g.values[v]) || !g.values[v].shape_is_static();
  });
  if (open_dims && options_.release_packed_weights && !from_artifact())
    open_blocks_ = dynamic_cast<const TensorDataMap*>(weights_.get());
  // What the host may read directly is in memory from the start: another
  // model may share the blocks (the stages of a staged model) and drop what
  // it has packed.
  if (open_blocks_ != nullptr) {
    std::lock_guard<std::mutex> lock(release_mu_);
    BP_RETURN_IF_ERROR(open_blocks_->pin(host_read_constants()));
  }

  // The shapes to specialise for now: given, or fixed in the model.
  const auto& hints = options_.placement.input_shapes;
  for (const auto& [name, shape] : hints) {
    auto it = std::find_if(inputs_.begin(), inputs_.end(),
                           [&](const TensorInfo& i) { return i.name == name; });
    if (it != inputs_.end()) continue;
    int id = g.find_value(name);
    if (id >= 0 && g.values[id].is_constant())
      return invalid_argument("a shape is given for '" + name +
                              "', which is an initializer, not a graph input");
    return not_found("a shape is given for '" + name + "', which is not a graph input");
  }
  Signature signature;
  std::vector<std::string> open;
  // A compiled artifact is ready at once for the first signature it stores.
  if (hints.empty() && !stored_.signatures.empty()) signature = stored_.signatures.front();
  for (size_t i = signature.size(); i < inputs_.size(); ++i) {
    const ir::Value& value = g.values[g.inputs[i]];
    auto hint = hints.find(inputs_[i].name);
    if (hint != hints.end()) {
      signature.push_back(hint->second);
    } else if (has_shape(value) && value.shape_is_static()) {
      signature.push_back(value.shape);
    } else {
      open.push_back("'" + inputs_[i].name + "' " +
                     (has_shape(value) ? declared_shape(inputs_[i]) : "(rank unknown)"));
    }
  }
  if (!open.empty()) {
    std::string list;
    for (const auto& o : open) list += (list.empty() ? "" : ", ") + o;
    std::lock_guard<std::mutex> lock(mu_);
    add_notes_locked({"input shapes are open (" + list +
                      "): the model is specialised for the shapes of each run, the first time "
                      "they are seen"});
    return ok_status();
  }
  for (size_t i = 0; i < signature.size(); ++i)
    for (int64_t d : signature[i])
      if (d < 0)
        return invalid_argument("input '" + inputs_[i].name + "': given shape " +
                                shape_to_string(signature[i]) + " has a negative dim");
  BP_RETURN_IF_ERROR(check_signature(signature));
  // A model whose every input dim is fixed runs at one signature (shapes
  // given can only restate them, check_signature) and has fixed outputs.
  const bool one_signature = std::all_of(g.inputs.begin(), g.inputs.end(), [&](int v) {
    return has_shape(g.values[v]) && g.values[v].shape_is_static();
  });
  const auto* blocks = dynamic_cast<const TensorDataMap*>(weights_.get());
  if (!one_signature || !options_.release_packed_weights) blocks = nullptr;
  // Such a model compiles nothing more after this build, so a weight whose
  // backends have packed it needs no copy of the host's: once the plan is
  // made (the backends' support queries read weights too), each leaves
  // memory as soon as its backends let go of it (read again from the model
  // file if one asks later).
  dropping_ = blocks;
  Result<std::shared_ptr<const Specialization>> first = specialization(signature);
  dropping_ = nullptr;
  if (!first.ok()) return std::move(first).take_status();
  if (one_signature && hints.empty()) outputs_ = (*first)->outputs();
  if (blocks != nullptr) BP_RETURN_IF_ERROR(keep_read_in_place(*blocks, **first));
  return ok_status();
}

namespace {

// The keys of the constants of `g` (an imported graph, constants folded)
// that no shape inference or folding of any signature reads: large
// non-integer ones whose every consumer also reads a value that depends on
// the data of a graph input (not only on input shapes), so is never folded.
std::set<std::string> packed_only_constants(const ir::Graph& g) {
  std::vector<bool> data(g.values.size(), false);
  for (int v : g.inputs) data[v] = true;
  for (bool changed = true; changed;) {  // nodes are in order: one pass, usually
    changed = false;
    for (const ir::Node& n : g.nodes) {
      if (n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size")) continue;
      const bool reads_data =
          std::any_of(n.inputs.begin(), n.inputs.end(), [&](int v) { return v >= 0 && data[v]; });
      for (int v : n.outputs)
        if (reads_data && v >= 0 && !data[v]) data[v] = changed = true;
    }
  }
  const std::vector<std::vector<int>> consumers = g.consumers();
  std::set<std::string> keys;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const ir::Value& value = g.values[v];
    const Tensor* t = g.constant(static_cast<int>(v));
    if (t == nullptr || consumers[v].empty() || t->dtype() == DType::kInt64 ||
        t->dtype() == DType::kInt32 || t->dtype() == DType::kBool)
      continue;
    if (std::find(g.outputs.begin(), g.outputs.end(), static_cast<int>(v)) != g.outputs.end())
      continue;
    const bool packed_only = std::all_of(consumers[v].begin(), consumers[v].end(), [&](int n) {
      const auto& in = g.nodes[n].inputs;
      return std::any_of(in.begin(), in.end(), [&](int u) { return u >= 0 && data[u]; });
    });
    if (packed_only) keys.insert(value.constant_key);
  }
  return keys;
}

}  // namespace

// The portable constants `spec` reads in place (a partition's input, an
// output) are in memory for good, before any run of it.
Status CompiledModel::pin_read_in_place(const Specialization& spec) {
  const ir::Graph& g = spec.graph();
  std::vector<const Tensor*> pins;
  auto pin = [&](int v) {
    if (v < 0 || !g.values[v].is_constant()) return;
    auto it = portable_->constants.find(g.values[v].constant_key);
    if (it != portable_->constants.end()) pins.push_back(&it->second);
  };
  for (const auto& ep : spec.executable())
    for (int v : ep->inputs) pin(v);
  for (int v : g.outputs) pin(v);
  std::lock_guard<std::mutex> lock(release_mu_);
  pinned_.insert(pins.begin(), pins.end());
  BP_RETURN_IF_ERROR(open_blocks_->pin(pins));
  // Each other weight leaves as its backends let go of it, packed, at the
  // first run (a shape-polymorphic partition lowers then).
  return release_packed(false).status();
}

void CompiledModel::ran(const Specialization& spec) {
  if (open_blocks_ == nullptr || spec.is_variant() || !spec.first_run()) return;
  // Its backends have read (and packed) what they need by now: the
  // weights only they read leave the host's memory, read again from the
  // model file if a backend asks later (a new shape needing a new layout).
  std::lock_guard<std::mutex> lock(release_mu_);
  Result<size_t> out = release_packed(true);
  if (!out.ok()) log::warn(portable_->source + ": " + out.status().message());
  else if (*out > 0)
    log::info(portable_->source + ": " + std::to_string(*out >> 20) +
              " MB of weights are held packed by their backends alone");
}

std::vector<const Tensor*> CompiledModel::host_read_constants() {
  if (packed_only_ == nullptr)
    packed_only_ = std::make_unique<std::set<std::string>>(packed_only_constants(*portable_));
  std::vector<const Tensor*> keep(pinned_.begin(), pinned_.end());
  for (const auto& [key, tensor] : portable_->constants)
    if (packed_only_->count(key) == 0) keep.push_back(&tensor);
  return keep;
}

Result<size_t> CompiledModel::release_packed(bool now) {
  return open_blocks_->settle(host_read_constants(), now);
}

// The weights the host reads in place at run time (a partition's input, an
// output) come back into memory for good; the rest stay out while nobody
// holds them. A partition compiled shape-polymorphic may be compiled again
// for its shapes (respecialize), reading the graph: then everything stays.
Status CompiledModel::keep_read_in_place(const TensorDataMap& blocks, const Specialization& spec) {
  const ir::Graph& g = spec.graph();
  std::vector<const Tensor*> keep;
  auto pin = [&](int v) {
    if (const Tensor* t = g.constant(v)) keep.push_back(t);
  };
  if (spec.polymorphic_partitions() > 0) {
    for (const auto& [key, tensor] : portable_->constants) keep.push_back(&tensor);
  } else {
    for (const auto& ep : spec.executable())
      for (int v : ep->inputs) pin(v);
    for (int v : g.outputs) pin(v);
  }
  BP_ASSIGN_OR_RETURN(const size_t out, blocks.settle(keep));
  if (out > 0)
    log::info(portable_->source + ": " + std::to_string(out >> 20) +
              " MB of weights are held packed by their backends alone");
  return ok_status();
}

Status CompiledModel::check_signature(const Signature& signature) const {
  if (signature.size() != inputs_.size())
    return invalid_argument("got shapes for " + std::to_string(signature.size()) +
                            " inputs, the model has " + std::to_string(inputs_.size()));
  // symbol -> (size, input, dim) of its first appearance
  struct Seen {
    int64_t size;
    size_t input, dim;
  };
  std::map<std::string, Seen> symbols;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const TensorInfo& info = inputs_[i];
    const Shape& got = signature[i];
    const std::string what = "input '" + info.name + "'";
    for (int64_t d : got)
      if (d < 0) return invalid_argument(what + " has a negative dim in " + shape_to_string(got));
    if (!portable_->values[portable_->inputs[i]].has_shape) continue;  // any rank
    if (got.size() != info.shape.size())
      return invalid_argument(what + " has rank " + std::to_string(got.size()) + " " +
                              shape_to_string(got) + ", the model expects rank " +
                              std::to_string(info.shape.size()) + " " + declared_shape(info));
    for (size_t d = 0; d < got.size(); ++d) {
      if (info.shape[d] >= 0 && got[d] != info.shape[d])
        return invalid_argument(what + " dim " + std::to_string(d) + " is " +
                                std::to_string(got[d]) + ", the model fixes it at " +
                                std::to_string(info.shape[d]) + " " + declared_shape(info));
      const std::string symbol = d < info.dim_names.size() ? info.dim_names[d] : "";
      if (symbol.empty() || info.shape[d] >= 0) continue;
      auto [it, fresh] = symbols.emplace(symbol, Seen{got[d], i, d});
      if (fresh || it->second.size == got[d]) continue;
      return invalid_argument(
          what + " dim " + std::to_string(d) + " ('" + symbol + "') is " + std::to_string(got[d]) +
          ", but input '" + inputs_[it->second.input].name + "' dim " +
          std::to_string(it->second.dim) + " ('" + symbol + "') is " +
          std::to_string(it->second.size) + ": one symbol takes one size in a run");
    }
  }
  return ok_status();
}

Result<std::shared_ptr<const Specialization>> CompiledModel::specialization(
    const Signature& signature) {
  using Built = Result<std::shared_ptr<const Specialization>>;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = cache_.find(signature);
  if (it != cache_.end()) {
    if (it->second.done) {
      ++stats_.hits;
      std::list<Signature>& lru = lru_[it->second.variant];
      lru.splice(lru.begin(), lru, it->second.lru);
    } else {
      ++stats_.misses;  // being built by another thread: wait for it
    }
    std::shared_future<Built> ready = it->second.ready;
    lock.unlock();
    return ready.get();
  }
  ++stats_.misses;
  std::promise<Built> promise;
  Entry& entry = cache_[signature];
  entry.ready = promise.get_future().share();
  lock.unlock();

  double build_ms = 0;
  Built built = [&]() -> Built {
    std::lock_guard<std::mutex> one_at_a_time(build_mu_);
    profile::Span span(profile::Kind::kBuild, [&] {
      return "specialise for " + signature_to_string(*portable_, signature);
    });
    const auto start = std::chrono::steady_clock::now();
    Result<std::shared_ptr<Specialization>> s = build(signature);
    build_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!s.ok()) return s.status();
    BP_RETURN_IF_ERROR(notify_after_load());
    return std::shared_ptr<const Specialization>(std::move(s).value());
  }();
  if (!built.ok())
    built.with_context("specialising for " + signature_to_string(*portable_, signature));
  promise.set_value(built);

  std::vector<std::shared_ptr<const Specialization>> evicted;  // destroyed unlocked
  lock.lock();
  ++stats_.builds;
  stats_.build_ms += build_ms;
  auto mine = cache_.find(signature);
  if (!built.ok()) {
    cache_.erase(mine);  // not kept: the next run at these shapes tries again
    return built;
  }
  mine->second.done = true;
  const bool variant = built.value()->is_variant();
  std::list<Signature>& lru = lru_[variant];
  mine->second.variant = variant;
  lru.push_front(signature);
  mine->second.lru = lru.begin();
  if (primary_ == nullptr) set_primary(built.value());
  else if (!variant) add_notes_locked(built.value()->notes());
  while (lru.size() > (variant ? max_variants() : options_.max_specializations)) {
    auto victim = cache_.find(lru.back());
    evicted.push_back(victim->second.ready.get().value());
    cache_.erase(victim);
    lru.pop_back();
    ++stats_.evictions;
  }
  lock.unlock();
  evicted.clear();
  return built;
}

namespace {

// The constants of a graph specialised from the portable one: those the
// signature folded (held in memory by the graph) by their own keys, every
// other key through the model's map (the artifact's named data, whose
// checksums are verified on first use when lazy).
class SpecializedDataMap : public NamedDataMap {
 public:
  SpecializedDataMap(std::shared_ptr<const NamedDataMap> base,
                     std::shared_ptr<const ir::Graph> graph, const ir::Graph& portable)
      : base_(std::move(base)), graph_(std::move(graph)) {
    for (const auto& [key, tensor] : graph_->constants)
      if (portable.constants.count(key) == 0) own_.emplace(key, &tensor);
  }
  Status get(const std::string& key, const void** data, size_t* size) const override {
    auto it = own_.find(key);
    if (it == own_.end()) return base_->get(key, data, size);
    *data = it->second->data();
    *size = it->second->size_bytes();
    return ok_status();
  }
  Status hold(const std::string& key, const void** data, size_t* size,
              std::unique_ptr<Hold>* hold) const override {
    auto it = own_.find(key);
    if (it == own_.end()) return base_->hold(key, data, size, hold);
    // A constant the signature folded may view a weight's block (a Reshape of it).
    hold->reset();
    if (const auto* blocks = dynamic_cast<const TensorDataMap*>(base_.get()))
      BP_RETURN_IF_ERROR(blocks->hold_tensor(*it->second, key, hold));
    return get(key, data, size);
  }
  size_t num_keys() const override { return keys().size(); }
  const std::string* key_at(size_t index) const override {
    return index < keys().size() ? &keys()[index] : nullptr;
  }

 private:
  // The base's keys and own_'s, sorted; listed when first asked for (a
  // decoder makes one of these maps per token, and nobody lists most).
  const std::vector<std::string>& keys() const {
    std::call_once(listed_, [this] {
      for (size_t i = 0; i < base_->num_keys(); ++i) keys_.push_back(*base_->key_at(i));
      for (const auto& [key, tensor] : own_) keys_.push_back(key);
      std::sort(keys_.begin(), keys_.end());
    });
    return keys_;
  }

  std::shared_ptr<const NamedDataMap> base_;
  std::shared_ptr<const ir::Graph> graph_;  // holds the tensors own_ points to
  std::unordered_map<std::string, const Tensor*> own_;
  mutable std::once_flag listed_;
  mutable std::vector<std::string> keys_;
};

}  // namespace

// With lazy checksums, an artifact's constants are verified when first
// read through its map. Specialising reads some of them straight from the
// mapping instead: shape inference reads the values of shape-like inputs
// (a Reshape's target, a Pad's pads: integers; Resize's scales, Range's
// bounds: a few numbers), and folding reads what it folds. A damaged one
// could make a huge shape (and an allocation to match) or a wrong folded
// constant, so they are verified through the map first; `which` says
// which. (Weights stay unread until a backend asks for them.)
Status CompiledModel::verify_constants(ConstantsRead which, const ir::Graph* specialized) const {
  constexpr size_t kFewNumbers = 64;
  for (const auto& [key, tensor] : portable_->constants) {
    bool verify = true;
    if (which == ConstantsRead::kByInference)
      verify = tensor.size_bytes() <= kFewNumbers || tensor.dtype() == DType::kInt64 ||
               tensor.dtype() == DType::kInt32;
    else if (which == ConstantsRead::kFoldedAway) verify = specialized->constants.count(key) == 0;
    const void* data = nullptr;
    size_t size = 0;
    if (verify) BP_RETURN_IF_ERROR(weights_->get(key, &data, &size));
  }
  return ok_status();
}

// The portable graph inferred at `signature`, with an artifact's constants
// verified as inference reads them.
Status CompiledModel::infer(const Signature& signature) {
  std::map<std::string, Shape> shapes;
  for (size_t i = 0; i < signature.size(); ++i) shapes[inputs_[i].name] = signature[i];
  if (from_artifact()) BP_RETURN_IF_ERROR(verify_constants(ConstantsRead::kByInference));
  if (specializer_ == nullptr)
    specializer_ = std::make_unique<Specializer>(*portable_, stored_.key_prefix, &registry_);
  Status inferred = specializer_->infer(shapes);
  if (!inferred.ok() && from_artifact()) BP_RETURN_IF_ERROR(verify_constants(ConstantsRead::kAll));
  return inferred;
}

// What infer() found, as a graph of its own.
Result<std::shared_ptr<const ir::Graph>> CompiledModel::pruned() {
  BP_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> specialized,
                      specializer_->prune(spare_graphs_->take()));
  // Back to the spares when the last holder lets go (an evicted
  // specialisation, usually), unless the model is gone by then.
  std::shared_ptr<const ir::Graph> graph(
      specialized.release(),
      [spares = std::weak_ptr<SpareGraphs>(spare_graphs_)](const ir::Graph* g) {
        std::unique_ptr<ir::Graph> owned(const_cast<ir::Graph*>(g));
        if (auto kept = spares.lock()) kept->give(std::move(owned));
      });
  if (from_artifact())
    BP_RETURN_IF_ERROR(verify_constants(ConstantsRead::kFoldedAway, graph.get()));
  return graph;
}

std::shared_ptr<Specialization> CompiledModel::vary(const Signature& signature) {
  // What partitioning depends on besides sizes: which nodes are left once the
  // signature's constants are folded, and which values are empty (backends
  // commonly refuse empty tensors, e.g. a decoder's first step with no cache
  // yet, which must not decide the plan of every later step).
  const ir::Graph& g = specializer_->inferred();
  auto empty = [&](size_t v) {
    return live_[v] && g.values[v].has_shape && !g.values[v].is_constant() &&
           shape_numel(g.values[v].shape) == 0;
  };
  // The last call's structure stands when folding is as it was, no value was
  // empty then and none of those inferred again is now (a decoder's next
  // token, usually).
  const std::vector<uint64_t>& changed_at = specializer_->changed_at();
  const uint64_t now = specializer_->inferences();
  bool same = !specializer_->folding_changed() && !shape_key_.empty() && shape_key_.back() == -1 &&
              live_.size() == g.values.size();
  for (size_t v = 0; same && v < g.values.size(); ++v)
    if (changed_at[v] == now && empty(v)) same = false;
  if (!same) {
    const std::vector<size_t> kept = ir::Graph::kept_nodes(g, specializer_->folded(), &live_);
    shape_key_.assign(kept.begin(), kept.end());
    shape_key_.push_back(-1);
    for (size_t v = 0; v < g.values.size(); ++v)
      if (empty(v)) shape_key_.push_back(static_cast<int64_t>(v));
  }
  // An artifact's stored specialisations are not shape-polymorphic.
  if (from_artifact()) return nullptr;
  std::shared_ptr<const Specialization> base;
  uint64_t base_at = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = bases_.begin(); it != bases_.end(); ++it)
      if (it->key == shape_key_) {
        bases_.splice(bases_.begin(), bases_, it);
        base = it->specialization;
        base_at = it->inferred_at;
        break;
      }
    // A partition that could not run at these shapes is compiled for them.
    if (base != nullptr)
      for (const auto& ep : base->executable())
        if (!runnable_here(ep)) return nullptr;
  }
  if (base == nullptr) return nullptr;
  return Specialization::vary(std::move(base), signature, g, live_, changed_at, base_at);
}

size_t CompiledModel::max_variants() const {
  return kVariantsPerSpecialization * options_.max_specializations;
}

// A signature a compiled artifact stores: its stored partitions, over the
// artifact's named data (which holds what the signature folded too). Empty,
// with the note to give, when it is not stored or does not match.
Result<Planner> CompiledModel::stored_planner(const Signature& signature, const ir::Graph& graph,
                                              std::string* note) {
  if (!from_artifact()) return Planner();
  const std::string at = signature_to_string(*portable_, signature);
  auto stored = std::find(stored_.signatures.begin(), stored_.signatures.end(), signature);
  if (stored == stored_.signatures.end()) {
    *note = stored_.method + ": no specialisation stored for " + at +
            "; compiled from the portable graph";
    return Planner();
  }
  std::string why;
  const size_t index = static_cast<size_t>(stored - stored_.signatures.begin());
  Planner planner = stored_.planner(index, graph, *weights_, &why);
  if (!planner) {
    // Damaged constants are reported as such, not as another graph.
    BP_RETURN_IF_ERROR(verify_constants(ConstantsRead::kAll));
    *note = stored_.method + ": the specialisation stored for " + at + " " + why +
            "; compiled from the portable graph";
  }
  return planner;
}

// Any other signature: placed afresh over the registry. Constants these
// shapes made (folded shape arithmetic) are read through a map of the
// specialised graph's own; the rest through the model's (`weights`).
Planner CompiledModel::jit_planner(const std::shared_ptr<const ir::Graph>& graph,
                                   std::shared_ptr<const NamedDataMap>* weights) {
  bool new_constants = false;
  for (const auto& [key, tensor] : graph->constants)
    if (portable_->constants.count(key) == 0) new_constants = true;
  if (new_constants) *weights = std::make_shared<SpecializedDataMap>(weights_, graph, *portable_);
  const NamedDataMap* w = weights->get();
  const ir::Graph* gp = graph.get();
  const bool verify = from_artifact();
  // Signatures that fold the same nodes away share one partitioning: the
  // plan of the first is reused (no support queries) unless a backend
  // fails to compile a node at these shapes.
  return [this, gp, w, verify, structure = structure_](const Exclusions& excluded,
                                                       std::vector<std::string>*) -> Result<Plan> {
    Plan plan;
    bool reused = false;
    if (excluded.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [key, kept] : plans_)
        if (key == structure) {
          plan = kept;
          reused = true;
          break;
        }
    }
    if (!reused) {
      BP_ASSIGN_OR_RETURN(plan, make_plan(*gp, registry_, placement_for(*gp), *w, excluded));
      if (excluded.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        plans_.emplace_front(structure, plan);
        if (plans_.size() > kPlansKept) plans_.pop_back();
      }
    }
    // What the executor reads from an artifact's mapping without the map.
    if (verify) BP_RETURN_IF_ERROR(verify_direct_constants(*gp, *w, plan));
    return plan;
  };
}

PlacementOptions CompiledModel::placement_for(const ir::Graph& specialized) const {
  PlacementOptions placement = options_.placement;
  if (placement.overrides.empty()) return placement;
  auto has = [](const ir::Graph& g, const std::string& name) {
    return std::any_of(g.nodes.begin(), g.nodes.end(),
                       [&](const ir::Node& n) { return n.name == name; });
  };
  // An override of a node these shapes folded away (a Gather of a slice
  // that is empty at this batch) has nothing to pin; one naming no node of
  // the model still fails in make_plan.
  for (auto it = placement.overrides.begin(); it != placement.overrides.end();)
    it = !has(specialized, it->first) && has(*portable_, it->first) ? placement.overrides.erase(it)
                                                                    : std::next(it);
  return placement;
}

Result<std::shared_ptr<Specialization>> CompiledModel::build(const Signature& signature) {
  building_ = signature;
  BP_RETURN_IF_ERROR(infer(signature));
  if (std::shared_ptr<Specialization> variant = vary(signature)) return variant;
  BP_ASSIGN_OR_RETURN(std::shared_ptr<const ir::Graph> graph, pruned());
  // For the plan cache and polymorphic() (builds are one at a time).
  structure_.clear();
  for (int64_t k : shape_key_) structure_.append(std::to_string(k)).push_back(',');
  std::string note;
  BP_ASSIGN_OR_RETURN(Planner planner, stored_planner(signature, *graph, &note));
  std::shared_ptr<const NamedDataMap> weights = weights_;
  if (!planner) planner = jit_planner(graph, &weights);
  Specialization::BuildOptions build;
  build.num_threads = options_.num_threads;
  // A model whose inputs all have fixed shapes has one signature: a
  // partition compiled for every shape would only be lowered for that one
  // at its first run, so the first run would pay what being ready should.
  const bool fixed = std::all_of(portable_->inputs.begin(), portable_->inputs.end(),
                                 [&](int v) { return portable_->values[v].shape_is_static(); });
  if (!fixed)
    build.polymorphic = [this](const ir::Graph& g, const Partition& p, const std::string& name) {
      return polymorphic(g, p, name);
    };
  build.before_compile = [this](const Plan& plan) {
    if (dropping_ != nullptr) dropping_->drop_when_free();
    return notify_before_load(plan);
  };
  Result<std::shared_ptr<Specialization>> built =
      Specialization::build(signature, std::move(graph), std::move(weights), planner, build);
  if (!built.ok()) {
    // A backend may report a damaged constant as a node it cannot run.
    if (from_artifact()) BP_RETURN_IF_ERROR(verify_constants(ConstantsRead::kAll));
    return built;
  }
  if (!note.empty()) {
    log::info(portable_->source + ": " + note);
    std::lock_guard<std::mutex> lock(mu_);
    add_notes_locked({note});
  }
  if (open_blocks_ != nullptr) BP_RETURN_IF_ERROR(pin_read_in_place(*built.value()));
  if (!from_artifact() && Specialization::can_vary(*built.value())) {
    std::lock_guard<std::mutex> lock(mu_);
    bases_.push_front({shape_key_, built.value(), specializer_->inferences()});
    if (bases_.size() > kPlansKept) bases_.pop_back();
  }
  return built;
}

Result<std::shared_ptr<ExecutablePartition>> CompiledModel::polymorphic(const ir::Graph& graph,
                                                                        const Partition& p,
                                                                        const std::string& name) {
  const LoadedBackend& backend = *p.backend;
  if (backend.api()->api_minor < 2 || !BP_TABLE_HAS(backend.api(), execute_shaped) ||
      !backend.has_flag(BP_BACKEND_FLAG_SHAPE_POLYMORPHIC))
    return std::shared_ptr<ExecutablePartition>();
  // Fast path: the same partition of the same structure as before (the plan
  // reused) is the same view, without building it again.
  std::string place = structure_ + '\1' + backend.id();
  for (int n : p.nodes) place += '\1' + std::to_string(n);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = polymorphic_by_place_.begin(); it != polymorphic_by_place_.end(); ++it)
      if (it->first == place) {
        auto found = it->second;
        polymorphic_by_place_.splice(polymorphic_by_place_.begin(), polymorphic_by_place_, it);
        return runnable_here(found) ? found : nullptr;
      }
  }
  // Constants of every run stay constants; those of these shapes only become inputs.
  std::function<bool(int)> portable_constant = [this, &graph](int v) {
    return portable_->constants.count(graph.values[v].constant_key) > 0;
  };
  auto ep = std::make_shared<ExecutablePartition>();
  ep->backend = p.backend;
  ep->polymorphic = true;
  ep->view = GraphView::build(graph, p.nodes, weights_.get(), name, &portable_constant);
  const std::string key = backend.id() + '\0' + ep->view->fingerprint();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = polymorphic_.begin(); it != polymorphic_.end(); ++it)
      if (it->first == key) {
        polymorphic_.splice(polymorphic_.begin(), polymorphic_, it);
        remember_place(place, it->second);
        return runnable_here(it->second) ? it->second : nullptr;
      }
  }
  bp_compile_options_t opts = compile_options(options_.num_threads, nullptr);
  opts.struct_size = BP_STRUCT_SIZE(bp_compile_options_t, shape_polymorphic);
  opts.shape_polymorphic = true;
  bp_node_report report(p.nodes.size());
  bp_compiled_t* compiled = nullptr;
  Status s = backend.check(backend.call([&] {
    return backend.api()->compile(backend.instance(), ep->view->get(), &opts, &report, &compiled);
  }),
                           "compile " + name + " (shape-polymorphic)");
  ep->compiled = CompiledHandle(p.backend, compiled);
  bool declined = s.code() == StatusCode::kUnsupported;
  for (size_t k = 0; k < p.nodes.size() && s.ok(); ++k)
    if (report.reported[k] && report.outcome[k] != BP_NODE_SUPPORTED) declined = true;
  if (declined || (s.ok() && !ep->compiled)) {
    log::debug(name + ": backend '" + backend.id() +
               "' does not compile it shape-polymorphic; compiling it for these shapes" +
               (s.ok() ? std::string() : ": " + s.message()));
    // Remembered, so later signatures do not ask again.
    std::lock_guard<std::mutex> lock(mu_);
    polymorphic_.emplace_front(key, nullptr);
    while (polymorphic_.size() > polymorphic_bound()) polymorphic_.pop_back();
    remember_place(place, nullptr);
    return std::shared_ptr<ExecutablePartition>();
  }
  BP_RETURN_IF_ERROR(s);
  ep->inputs = ep->view->input_values();
  ep->outputs = ep->view->output_values();
  ep->notes = compile_notes(report);
  std::lock_guard<std::mutex> lock(mu_);
  polymorphic_.emplace_front(key, ep);
  while (polymorphic_.size() > polymorphic_bound())
    polymorphic_.pop_back();  // held on by specialisations using it
  remember_place(place, ep);
  return ep;
}

bool CompiledModel::runnable_here(const std::shared_ptr<ExecutablePartition>& ep) const {
  return ep == nullptr ||
         std::find(unrunnable_.begin(), unrunnable_.end(),
                   std::make_pair(building_, static_cast<const ExecutablePartition*>(ep.get()))) ==
             unrunnable_.end();
}

Result<std::shared_ptr<const Specialization>> CompiledModel::respecialize(
    const Signature& signature, const ExecutablePartition& failed) {
  constexpr size_t kUnrunnableKept = 64;
  std::shared_ptr<const Specialization> dropped;  // destroyed unlocked
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::pair<Signature, const ExecutablePartition*> entry(signature, &failed);
    if (std::find(unrunnable_.begin(), unrunnable_.end(), entry) == unrunnable_.end()) {
      unrunnable_.push_back(entry);
      if (unrunnable_.size() > kUnrunnableKept) unrunnable_.pop_front();
    }
    auto it = cache_.find(signature);
    if (it != cache_.end() && it->second.done) {
      Result<std::shared_ptr<const Specialization>> held = it->second.ready.get();
      // Another session may have built it again already.
      const bool uses_failed =
          held.ok() &&
          std::any_of(held.value()->executable().begin(), held.value()->executable().end(),
                      [&](const auto& ep) { return ep.get() == &failed; });
      if (uses_failed) {
        dropped = held.value();
        lru_[it->second.variant].erase(it->second.lru);
        cache_.erase(it);
      }
    }
  }
  return specialization(signature);
}

size_t CompiledModel::polymorphic_bound() const {
  return std::max<size_t>(16, 4 * options_.max_specializations);
}

void CompiledModel::remember_place(const std::string& place,
                                   const std::shared_ptr<ExecutablePartition>& ep) {
  polymorphic_by_place_.emplace_front(place, ep);
  while (polymorphic_by_place_.size() > polymorphic_bound()) polymorphic_by_place_.pop_back();
}

// Arm NN's BeforeLoadNetwork: each backend of a plan hears of the network
// before it compiles anything of it (once per model, however many rounds
// and specialisations).
Status CompiledModel::notify_before_load(const Plan& plan) {
  for (const Partition& p : plan.partitions) {
    const std::shared_ptr<LoadedBackend>& b = p.backend;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (std::find(hooked_.begin(), hooked_.end(), b) != hooked_.end()) continue;
      hooked_.push_back(b);
    }
    if (BP_TABLE_HAS(b->api(), before_load_network))
      BP_RETURN_IF_ERROR(b->check(b->call([&] {
        return b->api()->before_load_network(b->instance(), options_.network_id);
      }),
                                  "before_load_network"));
  }
  return ok_status();
}

// AfterLoadNetwork: once the first specialisation a backend took part in is
// built.
Status CompiledModel::notify_after_load() {
  std::vector<std::shared_ptr<LoadedBackend>> fresh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& b : hooked_)
      if (std::find(after_loaded_.begin(), after_loaded_.end(), b) == after_loaded_.end()) {
        after_loaded_.push_back(b);
        fresh.push_back(b);
      }
  }
  for (const auto& b : fresh)
    if (BP_TABLE_HAS(b->api(), after_load_network))
      BP_RETURN_IF_ERROR(b->check(
          b->call([&] { return b->api()->after_load_network(b->instance(), options_.network_id); }),
          "after_load_network"));
  return ok_status();
}

void CompiledModel::set_primary(const std::shared_ptr<const Specialization>& spec) {
  primary_ = spec;
  add_notes_locked(spec->notes());
}

void CompiledModel::add_notes_locked(const std::vector<std::string>& notes) {
  constexpr size_t kMaxNotes = 64;
  std::vector<std::string> next = notes_.back();
  for (const std::string& n : notes) {
    if (next.size() >= kMaxNotes) break;
    if (std::find(next.begin(), next.end(), n) != next.end()) continue;
    next.push_back(next.size() + 1 == kMaxNotes
                       ? "(further notes are left out; the log at level info has them)"
                       : n);
  }
  if (next.size() != notes_.back().size()) notes_.push_back(std::move(next));
}

const Specialization* CompiledModel::primary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return primary_.get();
}

const std::vector<PartitionDescription>& CompiledModel::partitions() const {
  static const std::vector<PartitionDescription> none;
  const Specialization* p = primary();
  return p != nullptr ? p->partitions() : none;
}

const std::vector<CopyDescription>& CompiledModel::copies() const {
  static const std::vector<CopyDescription> none;
  const Specialization* p = primary();
  return p != nullptr ? p->copies() : none;
}

std::vector<std::string> CompiledModel::backends_used() const {
  const Specialization* p = primary();
  return p != nullptr ? p->backends_used() : std::vector<std::string>{};
}

std::string CompiledModel::describe_plan(PlanFormat format) const {
  const Specialization* p = primary();
  if (p != nullptr) return p->describe_plan(format);
  const std::string why =
      "not planned yet: the input shapes are open, and the plan is made for the shapes of the "
      "first run (or give input shapes when loading)";
  switch (format) {
    case PlanFormat::kJson:
      return "{\"model\": \"" + portable_->source + "\", \"planned\": false, \"reason\": \"" + why +
             "\"}";
    case PlanFormat::kDot:
      return "digraph plan {\n  label=\"" + why + "\";\n}\n";
    case PlanFormat::kText:
      break;
  }
  return "model       " + portable_->source + "\n" + why + "\n";
}

const ModelMetadata& CompiledModel::metadata() const {
  return portable_->metadata ? *portable_->metadata : Model::metadata();
}

const std::vector<std::string>& CompiledModel::notes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return notes_.back();
}

SpecializationStats CompiledModel::specialization_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SpecializationStats s = stats_;
  s.cached = lru_[0].size() + lru_[1].size();
  s.variants = lru_[1].size();
  std::set<const ExecutablePartition*> held;
  for (const auto& [key, ep] : polymorphic_)
    if (ep != nullptr) held.insert(ep.get());
  s.polymorphic_partitions = held.size();
  return s;
}

CompiledModel::~CompiledModel() {
  for (const auto& b : hooked_)
    if (BP_TABLE_HAS(b->api(), before_unload_network))
      (void)b->check(b->call([&] {
        return b->api()->before_unload_network(b->instance(), options_.network_id);
      }),
                     "before_unload_network");
  cache_.clear();
  lru_[0].clear();
  lru_[1].clear();
  bases_.clear();
  primary_.reset();
  polymorphic_.clear();
  polymorphic_by_place_.clear();
  for (const auto& b : hooked_)
    if (BP_TABLE_HAS(b->api(), after_unload_network))
      (void)b->check(b->call([&] {
        return b->api()->after_unload_network(b->instance(), options_.network_id);
      }),
                     "after_unload_network");
}

}  // namespace backplane
