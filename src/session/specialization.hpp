// specialization.hpp — one model at one set of input shapes: its graph with
// every shape inferred, the plan, the executable partitions, the memory
// spaces, and the step and memory plans every run at those shapes follows.
//
// A Model (compiled_model.hpp) keeps a bounded cache of these, keyed by the
// input shapes (the signature), built on first use and shared by all its
// sessions. Partitions compiled shape-polymorphic (API 1.2) are shared
// between specialisations; the others belong to one.
//
// A shape variant (vary) is a specialisation of the same structure as one
// built before (the same nodes left after folding, every partition
// shape-polymorphic): it shares that one's graph, plan, partitions and
// steps, and holds only what its shapes change: the shapes that differ,
// the folded constants that differ, the memory plan. A decoder's cache
// lengths are variants of one another: each costs its shape inference and a
// memory plan, and a few kilobytes while kept.
//
// Thread-safety: immutable once built.
#pragma once

#include "core/named_data_map.hpp"
#include "ir/graph.hpp"
#include "partition/partitioner.hpp"
#include "pipeline/compile.hpp"
#include "session/memory_plan.hpp"

#include <backplane/runtime.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace backplane {

// The concrete shape of every graph input, in graph input order.
using Signature = std::vector<Shape>;

// "x=[1,128] mask=[1,128]", for messages.
std::string signature_to_string(const ir::Graph& graph, const Signature& signature);

// What one partition is told at execute_shaped: the shape of every value of
// its view at this specialisation's shapes.
struct PartitionShapes {
  std::vector<bp_shape_t> values;  // points into the specialisation's graph
};

class Specialization {
 public:
  struct BuildOptions {
    int num_threads = 0;
    // Asked first for every partition to compile (may be empty).
    PolymorphicSource polymorphic;
    // Called with every plan before its partitions are compiled (the
    // model's before_load_network hooks).
    std::function<Status(const Plan&)> before_compile;
  };

  // Plans, compiles and plans memory for `graph` (shapes inferred).
  // `weights` reads every constant of `graph` and lives as long as the
  // returned object (it is held through `data`).
  static Result<std::shared_ptr<Specialization>> build(Signature signature,
                                                       std::shared_ptr<const ir::Graph> graph,
                                                       std::shared_ptr<const NamedDataMap> weights,
                                                       const Planner& planner,
                                                       const BuildOptions& options);

  // Whether a shape variant of `base` can be made: every partition
  // shape-polymorphic, no value whose shape depends on data, and a plan
  // that no backend's refusal of a node at base's shapes changed.
  static bool can_vary(const Specialization& base);
  // A shape variant of `base` (can_vary) at `signature`: `inferred` is the
  // graph as shape inference left it at these shapes, before pruning, with
  // the value ids of base's graph; `live` says which of its values the
  // pruned graph keeps (ir::Graph::kept_nodes), the same as for base's.
  // `changed_at` numbers, per value, the last inference that changed it, and
  // `base_at` the inference base's graph came from: a value changed no later
  // than that is as in base's graph and is not compared again.
  // Null if a live value differs from base's in more than its shape or a
  // folded constant's value (a dtype, a shape that is not static).
  static std::shared_ptr<Specialization> vary(std::shared_ptr<const Specialization> base,
                                              Signature signature, const ir::Graph& inferred,
                                              const std::vector<bool>& live,
                                              const std::vector<uint64_t>& changed_at,
                                              uint64_t base_at);

  const Signature& signature() const { return signature_; }
  // Node and value ids, names, dtypes: shapes are shape(v)'s, constants constant(v)'s.
  const ir::Graph& graph() const { return *graph_; }
  // The shape of value v at this specialisation's shapes.
  const Shape& shape(int v) const;
  // The data of constant value v (graph().values[v].is_constant()).
  const Tensor* constant(int v) const;
  bool is_variant() const { return base_ != nullptr; }
  // True the first time it is asked (after the first run at these shapes).
  bool first_run() const { return !ran_.exchange(true); }
  const Plan& plan() const { return core().plan_; }
  const std::vector<std::shared_ptr<ExecutablePartition>>& executable() const {
    return core().executable_;
  }
  const PartitionShapes& shapes_of(size_t partition) const { return shapes_[partition]; }
  int space_of(size_t partition) const { return core().space_of_[partition]; }
  const std::vector<MemorySpace>& spaces() const { return core().spaces_; }
  const std::vector<ExecStep>& steps() const { return core().steps_.steps; }
  const std::vector<ExecStep>& init_copies() const { return core().steps_.init_copies; }
  const MemoryPlan& memory() const { return memory_; }
  // 0 for a value whose shape depends on data (see is_dynamic).
  size_t value_bytes(int value) const;
  // A graph output whose shape the backend reports when it makes it
  // (through the output sink): a -1 dim here.
  bool is_dynamic(int value) const { return !graph_->values[value].shape_is_static(); }

  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  const std::vector<PartitionDescription>& partitions() const;
  const std::vector<CopyDescription>& copies() const;
  const std::vector<std::string>& notes() const { return notes_; }
  // Distinct backends used, in order of first use.
  std::vector<std::string> backends_used() const;
  // How many of its partitions were compiled shape-polymorphic.
  size_t polymorphic_partitions() const;
  std::string describe_plan(PlanFormat format) const;

 private:
  Specialization() = default;
  Status compile(const Planner& planner, const BuildOptions& options);
  Status check_dynamic_values() const;
  // shapes_, memory_ and outputs_, for the shapes of shape(v).
  void plan_shapes();
  void describe_outputs();
  void describe_plan_parts() const;
  // What plan, partitions and steps come from: base_ for a variant.
  const Specialization& core() const { return base_ != nullptr ? *base_ : *this; }

  Signature signature_;
  // A shape variant's: what it was made from (never a variant itself), the
  // shapes that differ from its (by value id, ascending) and the folded
  // constants that differ (the same).
  std::shared_ptr<const Specialization> base_;
  std::vector<std::pair<int, Shape>> shapes_changed_;
  std::vector<std::pair<int, Tensor>> constants_changed_;
  // The plan left nodes a backend refused at these shapes to others.
  bool shaped_plan_ = false;
  mutable std::atomic<bool> ran_{false};
  std::shared_ptr<const ir::Graph> graph_;
  std::shared_ptr<const NamedDataMap> weights_;
  std::vector<std::string> notes_;
  Plan plan_;
  std::vector<std::shared_ptr<ExecutablePartition>> executable_;
  std::vector<PartitionShapes> shapes_;
  std::vector<int> space_of_;
  std::vector<MemorySpace> spaces_;
  StepPlan steps_;
  MemoryPlan memory_;
  std::vector<TensorInfo> outputs_;
  // Made on first use (describe_plan_parts).
  mutable std::once_flag described_;
  mutable std::vector<PartitionDescription> partition_desc_;
  mutable std::vector<CopyDescription> copy_desc_;
};

}  // namespace backplane
