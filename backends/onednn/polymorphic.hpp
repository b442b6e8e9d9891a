// polymorphic.hpp — a CpuOneDnn partition compiled once for every shape
// (API 1.2, BP_BACKEND_FLAG_SHAPE_POLYMORPHIC).
//
// compile() with shape_polymorphic gets a view whose non-constant dims are
// -1. oneDNN primitives are made for concrete shapes, so compile checks what
// does not depend on them (operators, dtypes, ranks, attributes, which inputs
// must be constants: a Reduce whose axes became a runtime input makes it
// BP_STATUS_UNSUPPORTED, and the host compiles a concrete view instead) and
// keeps the view (sdk::OwnedView). Each execute_shaped looks the run's shapes
// up among the instances lowered before; new shapes are checked to fit
// together (shape_checks.hpp) and lowered exactly as compile lowers a
// concrete view, into a new instance. That costs little more than what the
// new shapes change: primitives of operations whose shapes an earlier
// instance had (a decoder step's projections) and weights already reordered
// for a primitive are shared (SharedCache); a MatMul of two activations is
// one primitive with runtime dims for every shape, and so are a MatMul by
// constant weights and a 1x1 Conv whose rows (pixels) come from open dims;
// oneDNN's primitive cache spares the code generation of shapes seen
// before. What a new shape still makes anew: the other convolutions and
// poolings, and Softmax, Concat and element-wise primitives over the shapes
// that changed.
//
// When the new shapes differ from an instance lowered before only in dims
// that its steps take as they come (a decoder's cache length: the backend's
// own Concat, Softmax and element-wise loops and the runtime-dims MatMuls
// read it), the new instance is derived from a template instead
// (derive.hpp): the same steps over new memory descriptions, the buffers
// whose size changed placed anew, without lowering. A template is made
// from the last three instances lowered, and only if deriving two of them
// from the third gives them exactly; the latest kMaxTemplates are kept (a
// server's encoder makes one for a batch of one, whose dim of 1 broadcasts,
// and one for larger batches), and the latest that covers new shapes derives
// them; the "derive_instances" setting turns it off. A context keeps the
// last kDerivedKept instances it derived and derives a new one in place of
// the least recently run from the same template: a decoder's new length
// allocates nothing, and costs about what a length seen before does.
//
// Lowered instances are kept least recently used first out, at most the
// backend's "shape_instances" setting per partition; an evicted one lives on
// while a context still runs it. Each context (one per caller thread) has
// one block of memory for the arena and scratchpad of whichever instance it
// runs, grown to the largest so far. A shape the lowering cannot run (a Sub whose
// first operand broadcasts, which oneDNN's binary cannot) fails that execute
// with BP_STATUS_UNSUPPORTED naming the node and the shapes.
//
// Serialized, such a partition is a short payload that says so (payload.cpp):
// the view and its weights are all it needs.
//
// Thread-safety: execute_shaped may run concurrently on different contexts;
// the instance list is behind a mutex, and lowerings run one at a time (so
// several threads meeting the same new shapes lower it once).
#pragma once

#include "onednn/compiled.hpp"
#include "onednn/derive.hpp"
#include "onednn/plan_builder.hpp"

#include <backplane/backend_sdk.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace backplane::onednn {

// How many lowered instances one partition keeps unless configured
// ("shape_instances"). Shapes a template covers (a decoder's cache lengths)
// are derived and keep nothing; the rest (a convolutional model's widths or
// batches) are lowered, and a loop over more of them than are kept lowers
// each again at every pass (least recently used goes first). An instance
// holds its steps and references; primitives and weights are shared.
inline constexpr size_t kDefaultMaxInstances = 512;

// How many templates (derive.hpp) a partition keeps, the latest first.
inline constexpr size_t kMaxTemplates = 4;

// How many derived instances a context keeps, least recently run first out:
// a server cycling among a few shapes runs them again without deriving. Each
// is its template's references and buffers (the steps are shared) and a
// binder.
inline constexpr size_t kDerivedKept = 16;

class PolyCompiled : public sdk::CompiledPartition {
 public:
  PolyCompiled(const sdk::Host& host, const bp_graph_view_t& view, int threads,
               size_t max_instances, const Tuning& tuning, std::shared_ptr<WeightPool> pool);
  size_t max_instances() const { return max_instances_; }

  std::unique_ptr<sdk::ExecContext> create_context() override;
  // payload.cpp: a payload saying "shape-polymorphic", nothing else.
  void serialize(bp_blob_store_t* store, bp_byte_writer_t* writer) override;

  const sdk::Host& host() const { return host_; }
  const bp_graph_view_t& view() const { return view_.view(); }
  // "CpuOneDnn partition 'name'", the start of every message.
  const std::string& where() const { return where_; }

  // The shapes of a run as one key: every value's dims, value after value
  // (ranks are the view's). Throws BP_STATUS_INVALID_ARGUMENT if they are
  // not shapes of this view: another count or rank, a dim the view fixes
  // (a constant's) with another size, a dim that is not known.
  void make_key(const sdk::ExecuteArgs& args, std::vector<int64_t>& key) const;
  // The dims of value v in `key` (its rank: the view's).
  const int64_t* dims_in(const std::vector<int64_t>& key, size_t v) const {
    return key.data() + offsets_[v];
  }

  // The instance for `key`: a kept one, or one lowered now (see above).
  std::shared_ptr<const Compiled> instance(const std::vector<int64_t>& key);
  // A kept instance, counted as a hit; null if none. Takes mutex_. (`hash`: key_hash(key).)
  std::shared_ptr<const Compiled> find(const std::vector<int64_t>& key, size_t hash);
  std::shared_ptr<const Compiled> find(const std::vector<int64_t>& key) {
    return find(key, key_hash(key));
  }
  // The latest template (derive.hpp) that covers `key` on `threads`; null
  // if none does or "derive_instances" is off.
  std::shared_ptr<const InstanceTemplate> instance_template(const std::vector<int64_t>& key,
                                                            int threads);
  // The OpenMP threads an instance at `key` runs on: the partition's, or 1
  // when all its values together are small (kSmallInstanceElements).
  int instance_threads(const std::vector<int64_t>& key) const;
  // Keys of a decoder's instances differ only in a few dims deep inside:
  // comparing each kept key with a new one would read hundreds of kept keys
  // almost to their end on every run; their hashes are compared first.
  static size_t key_hash(const std::vector<int64_t>& key);
  // Counts and logs (debug) an instance a context derived at `key`.
  void log_derived(const std::vector<int64_t>& key, std::chrono::steady_clock::time_point start,
                   int threads);

 private:
  struct Entry {
    std::vector<int64_t> key;
    size_t hash = 0;  // of key (key_hash): a lookup compares whole keys only when it matches
    std::shared_ptr<const Compiled> plan;
    uint64_t used = 0;
  };
  // Lowers the view at the shapes of `key` (lower_mutex_ held).
  std::shared_ptr<const Compiled> lower(const std::vector<int64_t>& key);
  // "<where>: instance for new shapes (<inputs>) <how> in <ms> ms, on <n> threads".
  std::string made_in(const std::vector<int64_t>& key, const char* how,
                      std::chrono::steady_clock::time_point start, int threads) const;
  // Keeps `plan`, evicting the least recently used beyond max_instances(), and
  // (now and then) drops the shared weights and primitives no kept instance
  // uses (lower_mutex_ held).
  void keep(const std::vector<int64_t>& key, std::shared_ptr<const Compiled> plan);
  // Adds a lowered instance to recent_ and adds a template made from the
  // last three to templates_ if they make one (lower_mutex_ held).
  void remember(const std::vector<int64_t>& key, const std::shared_ptr<const Compiled>& plan);
  std::string describe_inputs(const std::vector<int64_t>& key) const;

  sdk::Host host_;
  sdk::OwnedView view_;
  int threads_;
  size_t max_instances_;
  Tuning tuning_;
  std::string where_;
  std::vector<size_t> offsets_;  // per value, where its dims start in a key
  std::mutex mutex_;             // guards entries_, clock_, hits_, misses_
  std::vector<Entry> entries_;
  uint64_t clock_ = 0, hits_ = 0, misses_ = 0;
  std::mutex lower_mutex_;  // one lowering at a time; guards shared_
  SharedCache shared_;
  size_t prune_at_ = 0;  // shared_'s size that makes keep() prune it
  // How many refs, steps and buffers the last instance had (lower_mutex_
  // held): the next is reserved for as many, without copies as it grows.
  size_t last_refs_ = 0, last_steps_ = 0, last_buffers_ = 0;
  // The last three instances lowered (lower_mutex_ held), and the templates
  // made from them, the latest first, at most kMaxTemplates (derive.hpp;
  // changed with both mutexes held, read with mutex_).
  std::vector<InstanceTemplate::Lowered> recent_;
  std::vector<std::shared_ptr<const InstanceTemplate>> templates_;
  std::atomic<uint64_t> derived_{0};  // instances contexts derived
  // View nodes whose int8 group failed to lower at some shapes: lowered as
  // float from then on (lower_mutex_ held).
  std::set<int> float_nodes_;
};

// Checks that every node of `view` (dims open) can run here at some shapes
// and keeps the view: BP_STATUS_UNSUPPORTED, naming the node, if one cannot.
// num_threads: 0 = the OpenMP default. `pool` (optional) shares reordered
// weights with the backend's other partitions of the same model.
std::unique_ptr<sdk::CompiledPartition> compile_polymorphic(
    const sdk::Host& host, const bp_graph_view_t& view, int num_threads,
    size_t max_instances = kDefaultMaxInstances, const Tuning& tuning = {},
    std::shared_ptr<WeightPool> pool = nullptr);

}  // namespace backplane::onednn
