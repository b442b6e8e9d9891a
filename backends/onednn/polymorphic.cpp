// polymorphic.cpp — compile once, lower per new shape, keep the instances.
#include "onednn/polymorphic.hpp"

#include "onednn/compiler.hpp"
#include "onednn/lowering.hpp"
#include "onednn/shape_checks.hpp"
#include "onednn/view_info.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <new>
#include <set>
#include <string_view>
#include <vector>

namespace backplane::onednn {
namespace {

using sdk::shape_str;

std::string value_name(const bp_graph_view_t& view, size_t v) { return view.values[v].name; }

Dims dims_of(const bp_tensor_t& t) { return Dims(t.shape, t.shape + t.rank); }

// A context of a shape-polymorphic partition: one block of memory for the
// arena and scratchpad of whichever instance runs (grown, never shrunk), the
// bindings of the lowered instances it ran recently (made again only when
// the memory grows or an instance is new to it), and the instances it
// derived last (kDerivedKept), the least recently run derived again in place
// at a new key its template covers (a decoder's next cache length): a new
// length allocates nothing that stays, and costs about what a run at a
// length seen before does.
class PolyContext : public sdk::ExecContext {
 public:
  explicit PolyContext(PolyCompiled& p) : p_(p), stream_(engine()) {}
  ~PolyContext() override {
    derived_.clear();
    bound_.clear();
  }

  void execute(size_t, const bp_tensor_t*, size_t, const bp_tensor_t*) override {
    throw sdk::invalid(p_.where() +
                       " was compiled shape-polymorphic: it runs only through execute_shaped");
  }

  void execute_shaped(const sdk::ExecuteArgs& args) override {
    const bp_graph_view_t& view = p_.view();
    if (args.num_inputs() != view.num_inputs || args.num_outputs() != view.num_outputs)
      throw sdk::invalid(p_.where() + ": expected " + std::to_string(view.num_inputs) +
                         " inputs and " + std::to_string(view.num_outputs) + " outputs, got " +
                         std::to_string(args.num_inputs()) + " and " +
                         std::to_string(args.num_outputs()));
    p_.make_key(args, key_);
    for (size_t k = 0; k < view.num_inputs; ++k)
      check_tensor(args.input(k), static_cast<size_t>(view.inputs[k]), "input");
    for (size_t k = 0; k < view.num_outputs; ++k)
      check_tensor(args.output(k), static_cast<size_t>(view.outputs[k]), "output");
    // A lowered plan is held for the whole run: another thread may evict it.
    std::shared_ptr<const Compiled> plan;
    Binder* binder = nullptr;
    const size_t hash = PolyCompiled::key_hash(key_);
    for (Derived& d : derived_)
      if (d.hash == hash && d.key == key_) {
        d.used = ++clock_;
        binder = d.binder.get();
        break;
      }
    if (binder == nullptr) {
      plan = p_.find(key_, hash);
      if (plan != nullptr || (binder = derive(key_, hash)) == nullptr) {
        if (plan == nullptr) plan = p_.instance(key_);
        binder = &bound(plan);
      }
    }
    binder->run(stream_, args.num_inputs(), args.inputs(), args.num_outputs(), args.outputs(),
                args.profiling() ? &args : nullptr);
  }

 private:
  struct Bound {
    std::weak_ptr<const Compiled> plan;
    std::unique_ptr<Binder> binder;
    uint64_t used = 0;
  };

  // Tensor `t` must be value v at the run's shapes, dense, in host memory.
  // (Messages are made only on failure: a run allocates nothing here.)
  void check_tensor(const bp_tensor_t& t, size_t v, const char* what) const {
    const bp_value_t& value = p_.view().values[v];
    const int64_t* want = p_.dims_in(key_, v);
    auto name = [&] { return p_.where() + ": " + what + " '" + value.name + "'"; };
    if (t.dtype != value.dtype)
      throw sdk::invalid(name() + " is " + sdk::dtype_name(t.dtype) + ", expected " +
                         sdk::dtype_name(value.dtype));
    const bool same = t.rank == value.rank && (t.rank == 0 || t.shape != nullptr) &&
                      std::equal(want, want + value.rank, t.shape);
    if (!same)
      throw sdk::invalid(
          name() + " has shape " + shape_str(t.shape ? dims_of(t) : Dims(t.rank, -1)) +
          ", but the run's value shapes give it " + shape_str(Dims(want, want + value.rank)));
    const size_t bytes =
        static_cast<size_t>(sdk::element_count(want, value.rank)) * sdk::dtype_size(t.dtype);
    if (t.device != 0 || t.size_bytes != bytes || (t.data == nullptr && bytes > 0))
      throw sdk::invalid(name() + " is not a host buffer of " + std::to_string(bytes) + " bytes");
  }

  // The binder of the instance derived at `key` (whose key_hash is `hash`)
  // from the latest of the partition's templates that covers it: a new one
  // while fewer than kDerivedKept are kept, else in place of the least
  // recently run from that template (or of any, from a copy of the
  // template's base); null if no template covers `key` (the caller then
  // lowers).
  Binder* derive(const std::vector<int64_t>& key, size_t hash) {
    const int threads = p_.instance_threads(key);
    std::shared_ptr<const InstanceTemplate> t = p_.instance_template(key, threads);
    if (t == nullptr) return nullptr;
    const auto start = std::chrono::steady_clock::now();
    auto older = [](const Derived& a, const Derived& b) { return a.used < b.used; };
    auto d = derived_.end();
    if (derived_.size() >= kDerivedKept) {
      for (auto x = derived_.begin(); x != derived_.end(); ++x)
        if (x->from == t && (d == derived_.end() || older(*x, *d))) d = x;
      if (d == derived_.end()) {
        d = std::min_element(derived_.begin(), derived_.end(), older);
        d->binder.reset();  // (before the plan it binds)
        *d = Derived{t, t->base_copy(), {}, 0, nullptr, 0};
      }
    } else {
      derived_.push_back({t, t->base_copy(), {}, 0, nullptr, 0});
      d = derived_.end() - 1;
    }
    if (!t->derive_into(key, threads, *d->plan)) {
      derived_.erase(d);
      return nullptr;
    }
    d->key = key;
    d->hash = hash;
    d->used = ++clock_;
    const size_t need = context_bytes(*d->plan);
    if (d->binder == nullptr) {
      reserve(need);
      d->binder = std::make_unique<Binder>(*d->plan, memory_);
    } else if (!reserve(need)) {
      d->binder->rebind(memory_);  // (a block that grew has rebound it)
    }
    p_.log_derived(key, start, d->plan->threads);
    return d->binder.get();
  }

  // At least `need` bytes of context memory. When the block grows, the
  // lowered instances' bindings go (they point into the old block) and the
  // derived instance's binder moves to the new one; true if it grew.
  bool reserve(size_t need) {
    if (need <= capacity_) return false;
    bound_.clear();
    block_.reset();
    memory_ = nullptr;
    // Half as much again: a growing cache grows the arena a little per
    // token, and fresh pages cost a fault each on first use.
    const size_t bytes = align_up(std::max(need, capacity_ + capacity_ / 2));
    capacity_ = 0;
    block_ = allocate_block(bytes);
    memory_ = block_.get();
    capacity_ = bytes;
    for (Derived& d : derived_)
      if (d.binder != nullptr) d.binder->rebind(memory_);
    return true;
  }

  // The bindings of `plan` over this context's memory.
  Binder& bound(const std::shared_ptr<const Compiled>& plan) {
    for (Bound& b : bound_)
      if (!b.plan.owner_before(plan) && !plan.owner_before(b.plan)) {
        b.used = ++clock_;
        return *b.binder;
      }
    reserve(context_bytes(*plan));
    if (bound_.size() >= p_.max_instances())
      bound_.erase(
          std::min_element(bound_.begin(), bound_.end(),
                           [](const Bound& a, const Bound& b) { return a.used < b.used; }));
    bound_.push_back({plan, std::make_unique<Binder>(*plan, memory_), ++clock_});
    return *bound_.back().binder;
  }

  PolyCompiled& p_;
  dnnl::stream stream_;
  std::vector<int64_t> key_;  // reused: a steady run allocates nothing for it
  std::shared_ptr<char> block_;
  char* memory_ = nullptr;
  size_t capacity_ = 0;
  std::vector<Bound> bound_;
  uint64_t clock_ = 0;
  // The instances derived last (see the class comment), at most
  // kDerivedKept: the template each comes from, its key and key_hash, its
  // binder, and when it last ran (clock_).
  struct Derived {
    std::shared_ptr<const InstanceTemplate> from;
    std::shared_ptr<Compiled> plan;
    std::vector<int64_t> key;
    size_t hash = 0;
    std::unique_ptr<Binder> binder;
    uint64_t used = 0;
  };
  std::vector<Derived> derived_;
};

}  // namespace

PolyCompiled::PolyCompiled(const sdk::Host& host, const bp_graph_view_t& view, int threads,
                           size_t max_instances, const Tuning& tuning,
                           std::shared_ptr<WeightPool> pool)
    : host_(host),
      view_(view),
      threads_(threads),
      max_instances_(std::max<size_t>(max_instances, 1)),
      tuning_(tuning),
      where_(std::string("CpuOneDnn partition '") + view_.view().name + "'") {
  if (pool != nullptr) shared_.share_through(std::move(pool), view.weights);
  size_t at = 0;
  for (size_t v = 0; v < view_.view().num_values; ++v) {
    offsets_.push_back(at);
    at += view_.view().values[v].rank;
  }
}

std::unique_ptr<sdk::ExecContext> PolyCompiled::create_context() {
  return std::make_unique<PolyContext>(*this);
}

void PolyCompiled::make_key(const sdk::ExecuteArgs& args, std::vector<int64_t>& key) const {
  const bp_graph_view_t& view = view_.view();
  if (args.num_values() != view.num_values)
    throw sdk::invalid(where_ + ": execute_shaped gave " + std::to_string(args.num_values()) +
                       " value shapes, the view has " + std::to_string(view.num_values) +
                       " values");
  key.clear();
  const bp_shape_t* shapes = args.raw().value_shapes;
  for (size_t v = 0; v < view.num_values; ++v) {
    const bp_value_t& value = view.values[v];
    const bp_shape_t& s = shapes[v];
    if (s.rank != value.rank || (s.rank > 0 && s.dims == nullptr))
      throw sdk::invalid(where_ + ": value '" + value.name + "' has " + std::to_string(s.rank) +
                         " dims in this run, the view " + std::to_string(value.rank));
    for (size_t i = 0; i < s.rank; ++i) {
      const int64_t d = s.dims[i];
      if (d < 0 || (value.shape[i] >= 0 && d != value.shape[i]))
        throw sdk::invalid(where_ + ": value '" + value.name + "' has shape " +
                           shape_str(Dims(s.dims, s.dims + s.rank)) + " in this run, the view " +
                           shape_str(Dims(value.shape, value.shape + value.rank)) +
                           (d < 0 ? " (a dim that is not known)" : ""));
      key.push_back(d);
    }
  }
}

size_t PolyCompiled::key_hash(const std::vector<int64_t>& key) {
  return std::hash<std::string_view>()(
      std::string_view(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(int64_t)));
}

std::shared_ptr<const Compiled> PolyCompiled::find(const std::vector<int64_t>& key, size_t hash) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Entry& e : entries_)
    if (e.hash == hash && e.key == key) {
      e.used = ++clock_;
      ++hits_;
      return e.plan;
    }
  return nullptr;
}

std::shared_ptr<const Compiled> PolyCompiled::instance(const std::vector<int64_t>& key) {
  if (std::shared_ptr<const Compiled> plan = find(key)) return plan;
  std::lock_guard<std::mutex> lowering(lower_mutex_);
  // Another thread may have lowered these shapes while this one waited.
  if (std::shared_ptr<const Compiled> plan = find(key)) return plan;
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<const Compiled> plan = lower(key);
  if (tuning_.derive_instances) remember(key, plan);
  const int threads = plan->threads;
  keep(key, plan);
  size_t kept, hits, misses;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    kept = entries_.size(), hits = hits_, misses = misses_;
  }
  host_.log(BP_LOG_DEBUG, "CpuOneDnn",
            made_in(key, "lowered", start, threads) + "; " + std::to_string(kept) +
                " kept (at most " + std::to_string(max_instances_) + "), " +
                std::to_string(misses) + " lowered, " + std::to_string(derived_.load()) +
                " derived, " + std::to_string(hits) + " reused; " +
                "shared: " + std::to_string(shared_.weights()) + " weights, " +
                std::to_string(shared_.primitives()) + " primitives (" +
                std::to_string(shared_.reused) + " times taken)");
  return plan;
}

std::shared_ptr<const InstanceTemplate> PolyCompiled::instance_template(
    const std::vector<int64_t>& key, int threads) {
  if (!tuning_.derive_instances) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& t : templates_)
    if (t->covers(key, threads)) return t;
  return nullptr;
}

void PolyCompiled::log_derived(const std::vector<int64_t>& key,
                               std::chrono::steady_clock::time_point start, int threads) {
  ++derived_;
  host_.log(BP_LOG_DEBUG, "CpuOneDnn", made_in(key, "derived", start, threads));
}

std::string PolyCompiled::made_in(const std::vector<int64_t>& key, const char* how,
                                  std::chrono::steady_clock::time_point start, int threads) const {
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  char took[32];
  std::snprintf(took, sizeof took, "%.2f", ms);
  return where_ + ": instance for new shapes (" + describe_inputs(key) + ") " + how + " in " +
         took + " ms, on " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}

std::string PolyCompiled::describe_inputs(const std::vector<int64_t>& key) const {
  const bp_graph_view_t& view = view_.view();
  std::string s;
  for (size_t k = 0; k < view.num_inputs; ++k) {
    const size_t v = static_cast<size_t>(view.inputs[k]);
    const int64_t* d = dims_in(key, v);
    s += (k ? ", " : "") + value_name(view, v) + " " + shape_str(Dims(d, d + view.values[v].rank));
  }
  return s;
}

// Instances whose values hold fewer elements than this, all together, run on
// one thread: their primitives do a few microseconds of work each, less than
// what opening an OpenMP parallel region for each costs (a transformer
// encoder at 1x8 to 1x64 tokens ran slower on 2 threads than on 1).
constexpr int64_t kSmallInstanceElements = int64_t{1} << 18;

int PolyCompiled::instance_threads(const std::vector<int64_t>& key) const {
  if (threads_ <= 1) return threads_;
  const bp_graph_view_t& view = view_.view();
  int64_t elements = 0;
  for (size_t v = 0; v < view.num_values && elements < kSmallInstanceElements; ++v)
    elements += sdk::element_count(dims_in(key, v), view.values[v].rank);
  return elements < kSmallInstanceElements ? 1 : threads_;
}

std::shared_ptr<const Compiled> PolyCompiled::lower(const std::vector<int64_t>& key) {
  const bp_graph_view_t& open = view_.view();
  std::vector<std::vector<int64_t>> shapes(open.num_values);
  for (size_t v = 0; v < open.num_values; ++v)
    shapes[v].assign(dims_in(key, v), dims_in(key, v) + open.values[v].rank);
  sdk::ShapedView shaped(open, std::move(shapes));
  ViewInfo g(host_, shaped.view());
  g.instance = true;
  for (size_t v = 0; v < open.num_values; ++v) {
    const bp_value_t& value = open.values[v];
    g.values[v].open_rows =
        value.rank >= 2 &&
        std::any_of(value.shape, value.shape + value.rank - 1, [](int64_t d) { return d < 0; });
    g.values[v].open_pixels =
        value.rank >= 3 &&
        (value.shape[0] < 0 ||
         std::any_of(value.shape + 2, value.shape + value.rank, [](int64_t d) { return d < 0; }));
  }
  for (size_t n = 0; n < g.num_nodes(); ++n) {
    try {
      check_shapes(g, static_cast<int>(n));
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), where_ + ": " + e.what());
    }
  }
  const int threads = instance_threads(key);
  // Primitive creation picks its blocking for the calling thread's count.
  const ScopedOmpThreads omp(threads);
  const std::string cannot =
      where_ + " cannot run at these shapes (" + describe_inputs(key) + "): ";
  std::shared_ptr<Compiled> plan;
  while (true) {
    plan = std::make_shared<Compiled>(host_);
    plan->name = open.name;
    plan->threads = threads;
    plan->tuning = tuning_;
    plan->refs.reserve(last_refs_ + last_refs_ / 8);
    plan->steps.reserve(last_steps_ + last_steps_ / 8);
    plan->buffers.reserve(last_buffers_ + last_buffers_ / 8);
    try {
      Lowering lowering(g, *plan, &shared_);
      lowering.prepare(float_nodes_);
      if (const int block = convolution_block(g, tuning_)) {
        lowering.block_convolutions(block);
        lowering.winograd_convolutions(tuning_.winograd);
      }
      std::optional<LowerFailure> failure = lowering.lower();
      if (!failure) break;
      // As compile_partition does: an int8 group oneDNN has no kernel for
      // at these shapes runs as the float operators it stands for, here
      // and in every later instance.
      if (failure->int8_node >= 0 && float_nodes_.insert(failure->int8_node).second) continue;
      const int n = failure->nodes.empty() ? -1 : failure->nodes.front();
      throw sdk::unsupported(cannot + (n >= 0 ? g.describe(n) + ": " : "") + failure->why);
    } catch (const sdk::Error& e) {
      if (std::string_view(e.what()).rfind(cannot, 0) == 0) throw;
      throw sdk::Error(e.code() == BP_STATUS_INVALID_ARGUMENT ? e.code() : BP_STATUS_UNSUPPORTED,
                       cannot + e.what());
    } catch (const dnnl::error& e) {
      throw sdk::unsupported(cannot + e.what());
    }
  }
  g.release_constants();
  last_refs_ = plan->refs.size();
  last_steps_ = plan->steps.size();
  last_buffers_ = plan->buffers.size();
  // Kept per shape: without the room reserved for the next one.
  plan->refs.shrink_to_fit();
  plan->steps.shrink_to_fit();
  plan->buffers.shrink_to_fit();
  return plan;
}

void PolyCompiled::remember(const std::vector<int64_t>& key,
                            const std::shared_ptr<const Compiled>& plan) {
  if (recent_.size() == 3) recent_.erase(recent_.begin());
  recent_.push_back({key, plan});
  if (recent_.size() < 3) return;
  if (std::unique_ptr<InstanceTemplate> t =
          InstanceTemplate::make(view_.view(), offsets_, recent_)) {
    std::lock_guard<std::mutex> lock(mutex_);
    templates_.insert(templates_.begin(), std::move(t));
    if (templates_.size() > kMaxTemplates) templates_.pop_back();
  }
}

void PolyCompiled::keep(const std::vector<int64_t>& key, std::shared_ptr<const Compiled> plan) {
  std::set<const void*> weights, prims;
  bool prune = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++misses_;
    entries_.push_back({key, key_hash(key), std::move(plan), ++clock_});
    if (entries_.size() > max_instances_) {
      entries_.erase(
          std::min_element(entries_.begin(), entries_.end(),
                           [](const Entry& a, const Entry& b) { return a.used < b.used; }));
      // Pruning walks every kept instance: done once the shared entries
      // doubled since the last time, so a decoder loop (an eviction per
      // token) pays for it now and then only.
      prune = shared_.weights() + shared_.primitives() > prune_at_;
    }
    if (prune)
      for (const Entry& e : entries_) {
        for (const MemRef& r : e.plan->refs)
          if (r.constant) weights.insert(r.constant.get_data_handle());
        for (const Step& s : e.plan->steps)
          if (s.prim) prims.insert(s.prim.get());
      }
  }
  // What only evicted instances used goes (a context still running one
  // holds its own references).
  if (!prune) return;
  shared_.keep_only(weights, prims);
  prune_at_ = 2 * (shared_.weights() + shared_.primitives()) + 64;
}

std::unique_ptr<sdk::CompiledPartition> compile_polymorphic(const sdk::Host& host,
                                                            const bp_graph_view_t& view,
                                                            int num_threads, size_t max_instances,
                                                            const Tuning& tuning,
                                                            std::shared_ptr<WeightPool> pool) {
  const int threads = threads_to_use(num_threads);
  const std::vector<std::string> reasons = unsupported_reasons(host, view);
  for (size_t n = 0; n < view.num_nodes; ++n)
    if (!reasons[n].empty())
      throw sdk::unsupported(std::string("CpuOneDnn cannot compile partition '") + view.name +
                             "' for every shape: node '" + view.nodes[n].name + "' (" +
                             view.nodes[n].op_type + "): " + reasons[n]);
  for (size_t n = 0; n < view.num_nodes; ++n)
    if (std::strcmp(view.nodes[n].op_type, "MatMul") == 0) make_sgemm_kernels();
  return std::make_unique<PolyCompiled>(host, view, threads, max_instances, tuning,
                                        std::move(pool));
}

}  // namespace backplane::onednn
