// compiled_model.hpp — CompiledModel: the Model of the public API. The
// portable graph (input shapes as the model declares them), the placement
// options, and a bounded, least-recently-used cache of specialisations
// (session/specialization.hpp) keyed by the input shapes of a run, each built
// once however many sessions ask for it at the same time. Partitions a
// backend compiles shape-polymorphic (API 1.2) are cached by their view and
// shared between specialisations. Sessions are in session.cpp.
//
// Thread-safety: any number of threads may create and run sessions of one
// model at once.
#pragma once

#include "core/named_data_map.hpp"
#include "core/thread_pool.hpp"
#include "ir/constant_folding.hpp"
#include "ir/graph.hpp"
#include "partition/partitioner.hpp"
#include "pipeline/artifact_load.hpp"
#include "pipeline/compile.hpp"
#include "pipeline/front_end.hpp"
#include "registry/registry.hpp"
#include "session/specialization.hpp"

#include <backplane/runtime.hpp>

#include <deque>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace backplane {

class TensorDataMap;

class CompiledModel : public Model, public std::enable_shared_from_this<CompiledModel> {
 public:
  struct Options {
    PlacementOptions placement;
    uint64_t network_id = 0;
    int num_threads = 0;
    size_t max_specializations = 16;
    bool warm_up = false;  // ModelOptions::warm_up
    // The weights in the graph's blocks that the backends hold packed leave
    // the host's memory (read again from the file if asked for). Only for
    // a graph whose blocks no other model reads but through a TensorDataMap
    // (the stages of one model do: what each reads directly it pins).
    bool release_packed_weights = false;
    // The runtime's pool, lent to backends at execute (API 1.5); null: none.
    std::shared_ptr<ThreadPool> thread_pool;
  };

  // A model from its portable graph (import_portable_model, or any graph
  // whose constants are folded). Specialises it at once when every input
  // shape is known (fixed in the model, or in placement.input_shapes).
  static Result<std::shared_ptr<CompiledModel>> create(std::unique_ptr<ir::Graph> graph,
                                                       const BackendRegistry& registry,
                                                       const Options& options);
  // Tests' shorthand: `graph` must have every input shape fixed.
  static Result<std::shared_ptr<CompiledModel>> create(std::unique_ptr<ir::Graph> graph,
                                                       const BackendRegistry& registry,
                                                       const PlacementOptions& placement,
                                                       uint64_t network_id, int num_threads);
  // A compiled artifact's method (pipeline/artifact_load.hpp): its portable
  // graph, the artifact's named data, and the specialisations it stores. A
  // signature it stores is planned from its stored partitions (their
  // payloads deserialized); any other is compiled from the portable graph
  // over `registry`, with a note. Specialises at once for
  // options.placement.input_shapes if given, else for the first stored
  // signature. `keep_alive` holds whatever the graph's constants and
  // payloads point into.
  static Result<std::shared_ptr<CompiledModel>> create_with(std::unique_ptr<ir::Graph> portable,
                                                            std::unique_ptr<NamedDataMap> weights,
                                                            StoredSpecializations stored,
                                                            const BackendRegistry& registry,
                                                            const Options& options,
                                                            std::shared_ptr<const void> keep_alive);
  ~CompiledModel() override;

  const std::vector<TensorInfo>& inputs() const override { return inputs_; }
  const std::vector<TensorInfo>& outputs() const override { return outputs_; }
  const std::vector<PartitionDescription>& partitions() const override;
  std::vector<std::string> backends_used() const override;
  const std::vector<CopyDescription>& copies() const override;
  std::string describe_plan(PlanFormat format) const override;
  const std::vector<std::string>& notes() const override;
  const ModelMetadata& metadata() const override;
  SpecializationStats specialization_stats() const override;
  Result<std::unique_ptr<Session>> create_session() override;

  // The portable graph.
  const ir::Graph& portable() const { return *portable_; }
  // Checks `signature` against the model's inputs (rank, fixed dims, one
  // size per symbol): errors name the input, the dim and the symbol.
  Status check_signature(const Signature& signature) const;
  // The specialisation for `signature` (checked already): from the cache, or
  // built now (once, however many threads ask at the same time).
  Result<std::shared_ptr<const Specialization>> specialization(const Signature& signature);
  // A partition of the specialisation for `signature`, compiled
  // shape-polymorphic, could not run at its shapes (its backend said
  // kUnsupported at execute): the specialisation is built again with that
  // partition compiled for these shapes, where a node its backend rejects
  // goes to the next backend as at any compile. Other signatures keep it.
  Result<std::shared_ptr<const Specialization>> respecialize(const Signature& signature,
                                                             const ExecutablePartition& failed);

  // After a run at `spec`: the first run of a specialisation of a model with
  // open dims lets the weights only its backends read leave the host's memory.
  void ran(const Specialization& spec);

  // The first specialisation (see Model), or null before it. Tests read the
  // plan and memory of a model with fixed shapes through it.
  const Specialization* primary() const;
  const Plan& plan() const { return primary()->plan(); }
  const std::vector<std::shared_ptr<ExecutablePartition>>& executable() const {
    return primary()->executable();
  }
  const MemoryPlan& memory() const { return primary()->memory(); }
  const std::vector<ExecStep>& steps() const { return primary()->steps(); }
  // The pool lent to backends at execute; null when the runtime gave none.
  ThreadPool* thread_pool() const { return options_.thread_pool.get(); }
  bool warm_up() const { return options_.warm_up; }

 private:
  CompiledModel() = default;
  Status init(std::unique_ptr<ir::Graph> graph, const Options& options);
  Result<std::shared_ptr<Specialization>> build(const Signature& signature);
  // Infers the portable graph at `signature` (specializer_), then prunes
  // what it found into a graph of the specialisation's own.
  Status infer(const Signature& signature);
  Result<std::shared_ptr<const ir::Graph>> pruned();
  // The shape variant (Specialization::vary) of a kept specialisation of the
  // structure infer() just found, or null if there is none to vary.
  std::shared_ptr<Specialization> vary(const Signature& signature);
  // How many shape variants the cache keeps (beside max_specializations
  // others).
  size_t max_variants() const;
  // The model's placement options for a graph specialised from it: without
  // the overrides of nodes it folded away.
  PlacementOptions placement_for(const ir::Graph& specialized) const;
  Result<Planner> stored_planner(const Signature& signature, const ir::Graph& graph,
                                 std::string* note);
  Planner jit_planner(const std::shared_ptr<const ir::Graph>& graph,
                      std::shared_ptr<const NamedDataMap>* weights);
  enum class ConstantsRead { kByInference, kFoldedAway, kAll };
  Status verify_constants(ConstantsRead which, const ir::Graph* specialized = nullptr) const;
  Result<std::shared_ptr<ExecutablePartition>> polymorphic(const ir::Graph& graph,
                                                           const Partition& partition,
                                                           const std::string& name);
  size_t polymorphic_bound() const;
  // Whether `ep` may serve the signature being built (under mu_).
  bool runnable_here(const std::shared_ptr<ExecutablePartition>& ep) const;
  // Under mu_.
  void remember_place(const std::string& place, const std::shared_ptr<ExecutablePartition>& ep);
  Status keep_read_in_place(const TensorDataMap& blocks, const Specialization& spec);
  Status pin_read_in_place(const Specialization& spec);
  // Every weight block but those the host reads leaves memory when its last
  // holder lets go, and (`now`) now if nobody holds it (under release_mu_).
  Result<size_t> release_packed(bool now);
  // The constants shape inference or folding may read (all but
  // packed_only_constants), and those read in place so far (under release_mu_).
  std::vector<const Tensor*> host_read_constants();
  Status notify_before_load(const Plan& plan);
  Status notify_after_load();
  void set_primary(const std::shared_ptr<const Specialization>& spec);
  void add_notes_locked(const std::vector<std::string>& notes);  // holds mu_
  bool from_artifact() const { return static_cast<bool>(stored_.planner); }

  struct Entry {
    std::shared_future<Result<std::shared_ptr<const Specialization>>> ready;
    bool done = false;
    bool variant = false;                // a shape variant: in lru_[1], else lru_[0]
    std::list<Signature>::iterator lru;  // valid when done
  };

  std::shared_ptr<const void> keep_alive_;  // destroyed last
  // The weights whose blocks leave memory once packed, while the first
  // build of a model of one signature compiles (see init); else null.
  const TensorDataMap* dropping_ = nullptr;
  std::shared_ptr<const ir::Graph> portable_;
  std::shared_ptr<const NamedDataMap>
      weights_;  // the portable graph's constants (or the artifact's)
  BackendRegistry registry_;
  Options options_;
  // Compiled artifacts: the stored specialisations (no planner for ONNX).
  StoredSpecializations stored_;
  std::vector<TensorInfo> inputs_, outputs_;
  // Specialises the portable graph, inferring again only what a new
  // signature reaches (under build_mu_; made at the first build).
  std::unique_ptr<Specializer> specializer_;
  // Specialised graphs nobody holds any more, whose storage the next
  // specialisation reuses: a decoder evicts one shape per new one, so its
  // graph is copied into without allocating what has not changed.
  class SpareGraphs {
   public:
    std::unique_ptr<ir::Graph> take() {
      std::lock_guard<std::mutex> lock(mu_);
      if (spare_.empty()) return nullptr;
      std::unique_ptr<ir::Graph> g = std::move(spare_.back());
      spare_.pop_back();
      return g;
    }
    void give(std::unique_ptr<ir::Graph> g) {
      std::lock_guard<std::mutex> lock(mu_);
      if (spare_.size() < kKept) spare_.push_back(std::move(g));
    }

   private:
    static constexpr size_t kKept = 2;
    std::mutex mu_;
    std::vector<std::unique_ptr<ir::Graph>> spare_;
  };
  std::shared_ptr<SpareGraphs> spare_graphs_ = std::make_shared<SpareGraphs>();

  mutable std::mutex mu_;  // guards everything below
  std::map<Signature, Entry> cache_;
  // Most recent first, built entries only: [0] specialisations of their
  // own (at most max_specializations), [1] shape variants (max_variants()).
  std::list<Signature> lru_[2];
  SpecializationStats stats_;
  std::shared_ptr<const Specialization> primary_;
  // The model's notes, then the primary's, then those of later
  // specialisations (each note once, at most kMaxNotes). Every change adds a
  // new vector and keeps the old ones, so what notes() returned stays valid
  // while other threads add notes.
  std::deque<std::vector<std::string>> notes_{1};
  // Plans by structure (the nodes left after folding), most recent first.
  std::list<std::pair<std::string, Plan>> plans_;
  // Shape-polymorphic partitions by view fingerprint, most recent first
  // (null: the backend declined that view).
  std::list<std::pair<std::string, std::shared_ptr<ExecutablePartition>>> polymorphic_;
  // The same by place: structure, backend and node ids of the partition.
  std::list<std::pair<std::string, std::shared_ptr<ExecutablePartition>>> polymorphic_by_place_;
  std::string structure_;  // shape_key_ as text, of the full build under way (build_mu_)
  // What vary() found of the shapes being built: the kept nodes and the
  // empty values (the structure), and which values are live (under build_mu_).
  std::vector<int64_t> shape_key_;
  std::vector<bool> live_;
  // Specialisations shape variants are made of, by shape_key_, most recent
  // first (Specialization::can_vary ones only), with the inference each was
  // built after (Specializer::inferences).
  struct Base {
    std::vector<int64_t> key;
    std::shared_ptr<const Specialization> specialization;
    uint64_t inferred_at;
  };
  std::list<Base> bases_;
  Signature building_;  // the signature being built (under build_mu_)
  // Shape-polymorphic partitions that could not run at a signature
  // (respecialize): compiled for its shapes there. Bounded; oldest first.
  std::deque<std::pair<Signature, const ExecutablePartition*>> unrunnable_;
  std::vector<std::shared_ptr<LoadedBackend>> hooked_;        // got before_load_network
  std::vector<std::shared_ptr<LoadedBackend>> after_loaded_;  // got after_load_network

  std::mutex build_mu_;  // one specialisation is built at a time

  // A model with open dims loaded from its own file: its weight blocks, which
  // leave memory once packed (ran); else null.
  const TensorDataMap* open_blocks_ = nullptr;
  std::mutex release_mu_;  // guards what follows
  // Constants the host reads in place in some specialisation built so far.
  std::set<const Tensor*> pinned_;
  // Constants only backends read (packed_only_constants), made when first asked.
  std::unique_ptr<std::set<std::string>> packed_only_;
};

}  // namespace backplane
