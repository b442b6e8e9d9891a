// staged_model.hpp — models whose shapes are not all known before a run:
// control flow (If, Loop, Scan), sequences and optionals, and ops whose
// output shape depends on data (NonZero). See docs/architecture.md, "Staged
// execution".
//
// A Program splits a portable graph into steps, in an order that respects
// every dependency:
// - a stage: a maximal set of backend ops whose inputs exist when it starts.
//   It is a portable graph of its own (inputs: the values crossing into it)
//   and a CompiledModel of its own, so it is specialised (shapes inferred,
//   partitioned over the backends, compiled, memory planned) for the actual
//   shapes of the values that reach it, and cached per shape signature in
//   that model's LRU. A node whose output shape depends on data ends its
//   stage: the backend reports the shape through the output sink, and what
//   reads the output is in a later stage, specialised for that shape. A node
//   whose output shape depends on the values of inputs that hold data (a
//   Reshape's shape, a Resize's sizes computed at run time) is a stage of its
//   own, specialised for those values.
// - a host op: If, Loop, Scan, SequenceMap (their bodies are Programs of
//   their own, compiled like models and cached per shape the same way), the
//   sequence and optional ops, and Identity of a sequence or optional.
//
// A ProgramState is one session's: the values of a run, a Session per stage,
// and a state per body. Programs are shared by every session of a model.
#pragma once

#include "core/tensor_data_map.hpp"
#include "ir/graph.hpp"
#include "registry/registry.hpp"
#include "session/compiled_model.hpp"

#include <backplane/runtime.hpp>

#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace backplane {

class Program;

// One session's state of one Program.
struct ProgramState {
  std::vector<AnyValue> env;  // per value of the program's graph
  // Per step: the stage's session (and the model it belongs to), the body
  // states of a host op.
  struct StepState {
    std::shared_ptr<CompiledModel> model;
    std::unique_ptr<Session> session;
    std::vector<std::unique_ptr<ProgramState>> bodies;
  };
  std::vector<StepState> steps;
};

// Bounds that keep a runaway Loop (an absurd trip count, a condition that
// never turns false) from hanging a run or exhausting memory.
// (ModelOptions::max_loop_iterations / max_loop_bytes.)
struct LoopBounds {
  int64_t max_iterations = int64_t{1} << 17;
  int64_t max_bytes = int64_t{1} << 31;  // a Loop's scan outputs, summed over its iterations
};

class Program {
 public:
  struct Env {
    BackendRegistry registry;
    CompiledModel::Options options;  // for every stage model (input shape hints cleared)
    LoopBounds bounds;
  };

  // `graph`: portable (constants folded), topologically sorted.
  static Result<std::shared_ptr<Program>> build(std::shared_ptr<const ir::Graph> graph,
                                                std::shared_ptr<const Env> env);

  // Whether a graph needs staging: a host op, a data-dependent op, or a
  // graph input or output that is not a tensor.
  static bool needs_staging(const ir::Graph& graph);

  const ir::Graph& graph() const { return *graph_; }
  // What value `v` holds (propagated through the host ops that make it).
  ir::ValueKind kind_of(int v) const { return kinds_[v]; }
  std::unique_ptr<ProgramState> new_state() const;
  // Runs the program on `inputs` (one per graph input, in order).
  Status run(ProgramState& state, std::vector<AnyValue> inputs,
             std::vector<AnyValue>* outputs) const;

  // What the stages built so far add up to.
  void add_stats(SpecializationStats* stats) const;
  void add_backends(std::vector<std::string>* used) const;
  std::string describe(const std::string& indent) const;

 private:
  struct Step {
    enum Kind { kStage, kHost } kind = kStage;
    std::vector<int> nodes;    // ids into graph_->nodes
    std::vector<int> inputs;   // values read that earlier steps (or the caller) made
    std::vector<int> outputs;  // values later steps, or the caller, read
    // kHost: one Program per body (If: then, else), with the outer value
    // each captured input of the body reads.
    std::vector<std::shared_ptr<Program>> bodies;
    std::vector<std::vector<int>> captured;
    // kStage: built on first use, per input dtypes (a stage's input types
    // are known once values reach it).
    mutable std::mutex mu;
    mutable std::map<std::vector<DType>, std::shared_ptr<CompiledModel>> models;
    // A stage whose shapes depend on the values of small integer inputs (a
    // Slice's starts computed from a Loop's iteration number) is specialised
    // for those values too: they become constants of a model of their own,
    // keyed by their bytes, the most recent first, at most
    // Options::max_specializations of them.
    mutable bool by_value = false;
    mutable std::list<std::pair<std::string, std::shared_ptr<CompiledModel>>> value_models;
    // A stage of one node whose output shapes depend on the values of inputs
    // that hold data (ir::OpSchema::data_shape_inputs: a Resize's sizes
    // computed from boxes): the node's non-constant inputs that decide its
    // shapes, always fixed as above (whatever their dtype or size); and its
    // other non-constant operands after the first (a Resize's roi, a Pad's
    // constant_value), fixed when small (rank <= 1, <= 64 elements): a
    // backend may need them constant (CpuRef, tf_crop_and_resize's roi).
    std::vector<int> shape_values;
    std::vector<int> param_values;
  };

  Program() = default;
  Status plan();
  Result<std::shared_ptr<CompiledModel>> stage_model(const Step& step, size_t index,
                                                     const std::vector<DType>& dtypes) const;
  Result<std::shared_ptr<CompiledModel>> value_model(const Step& step, size_t index,
                                                     const std::vector<AnyValue>& env,
                                                     std::vector<bool>* fixed) const;
  Status run_stage(const Step& step, size_t index, ProgramState& state) const;
  Status run_host(const Step& step, ProgramState::StepState& ss, std::vector<AnyValue>& env) const;

  friend class HostOpRunner;
  std::shared_ptr<const ir::Graph> graph_;
  std::shared_ptr<const Env> env_;
  std::vector<ir::ValueKind> kinds_;  // per value, propagated through host ops
  std::vector<std::unique_ptr<Step>> steps_;
  // The graph's weight blocks: those the host reads directly (a host op's
  // operand, what a body captures, a graph output) pinned for as long as the
  // program lives; the stage models drop the rest once packed.
  std::unique_ptr<TensorDataMap> blocks_;
};

// The Model of a staged graph (Runtime::load_model picks it when
// Program::needs_staging).
class StagedModel : public Model, public std::enable_shared_from_this<StagedModel> {
 public:
  static Result<std::shared_ptr<StagedModel>> create(std::unique_ptr<ir::Graph> graph,
                                                     const BackendRegistry& registry,
                                                     const CompiledModel::Options& options,
                                                     const LoopBounds& bounds = {});

  const std::vector<TensorInfo>& inputs() const override { return inputs_; }
  const std::vector<TensorInfo>& outputs() const override { return outputs_; }
  const std::vector<PartitionDescription>& partitions() const override;
  bool runs_in_stages() const override { return true; }
  std::vector<std::string> backends_used() const override;
  const std::vector<CopyDescription>& copies() const override;
  std::string describe_plan(PlanFormat format) const override;
  const std::vector<std::string>& notes() const override { return notes_; }
  SpecializationStats specialization_stats() const override;
  Result<std::unique_ptr<Session>> create_session() override;
  const ModelMetadata& metadata() const override;

  const Program& program() const { return *program_; }

 private:
  StagedModel() = default;
  std::shared_ptr<Program> program_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<std::string> notes_;
  size_t capacity_ = 0;
};

}  // namespace backplane
