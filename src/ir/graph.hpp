// graph.hpp — Backplane's graph IR: values, nodes, attributes, constants.
//
// A Graph is what the ONNX importer produces and what partitioning splits. It
// is plain data: indices instead of pointers, so it copies and slices cheaply.
#pragma once

#include <backplane/status.hpp>
#include <backplane/tensor.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace backplane {
struct ModelMetadata;  // backplane/runtime.hpp
class ConstantBlock;   // core/constant_block.hpp
}  // namespace backplane

namespace backplane::ir {

class OpRegistry;
class Graph;

// Values equal ONNX AttributeProto.AttributeType and bp_attr_type_t.
enum class AttrType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kInt = 2,
  kString = 3,
  kTensor = 4,
  kGraph = 5,
  kFloats = 6,
  kInts = 7,
  kStrings = 8,
  kGraphs = 10,
  // A type (Optional's `type`): `i` holds the ValueKind, `ints[0]` the
  // element DType.
  kTypeProto = 13,
};
const char* attr_type_name(AttrType type);

struct Attribute {
  std::string name;
  AttrType type = AttrType::kUndefined;
  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  Tensor t;
  // kGraph / kGraphs: control-flow bodies (If's branches, Loop's and Scan's
  // body). A body reads values of enclosing graphs by name; the node that
  // owns it lists those values as its implicit inputs (Node::implicit_inputs).
  std::shared_ptr<Graph> g;
  std::vector<std::shared_ptr<Graph>> graphs;
};

// What a value holds. Tensors are what backends see; sequences (ONNX
// sequence(tensor)) and optionals (ONNX optional(tensor | sequence)) are host
// values: only host ops (OpSchema::host_op) make or read them.
enum class ValueKind : uint8_t {
  kTensor,
  kSequence,          // a list of tensors of one dtype (`dtype`)
  kOptionalTensor,    // a tensor or nothing
  kOptionalSequence,  // a sequence or nothing
};
const char* value_kind_name(ValueKind kind);

// One edge of the graph (a tensor unless `kind` says otherwise).
struct Value {
  std::string name;
  // The element type of a sequence or optional.
  ValueKind kind = ValueKind::kTensor;
  DType dtype = DType::kUndefined;
  // Dims; -1 = unknown. `has_shape` false means even the rank is unknown.
  Shape shape;
  bool has_shape = false;
  // Symbolic dim names from the model ("batch"), "" where none; same rank as shape.
  std::vector<std::string> dim_params;
  int producer = -1;  // index of the producing node, -1 for inputs/constants
  // Non-empty for constants: key into Graph::constants.
  std::string constant_key;

  bool is_constant() const { return !constant_key.empty(); }
  bool shape_is_static() const;
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" = default ONNX domain
  // Value ids; -1 = omitted optional input. The last `implicit_inputs` of them
  // are not formal inputs of the op: they are the enclosing-scope values its
  // subgraphs read, listed so that ordering, liveness and partitioning see
  // every value the node needs.
  std::vector<int> inputs;
  size_t implicit_inputs = 0;
  std::vector<int> outputs;  // value ids; -1 = omitted optional output
  std::vector<Attribute> attributes;

  const Attribute* attr(const std::string& name) const;
  bool has_input(size_t i) const { return i < inputs.size() && inputs[i] >= 0; }
  bool has_output(size_t i) const { return i < outputs.size() && outputs[i] >= 0; }
  // Typed getters; a present attribute of the wrong type is an error.
  Result<int64_t> attr_int(const std::string& name, int64_t fallback) const;
  Result<float> attr_float(const std::string& name, float fallback) const;
  Result<std::string> attr_string(const std::string& name, const std::string& fallback) const;
  Result<std::vector<int64_t>> attr_ints(const std::string& name,
                                         const std::vector<int64_t>& fallback = {}) const;
  Result<std::vector<float>> attr_floats(const std::string& name,
                                         const std::vector<float>& fallback = {}) const;
  // "node 'Conv_12' (Conv)", for messages.
  std::string describe() const;
};

class Graph {
 public:
  std::string name;
  std::string source;  // the file it came from, for messages
  // The model's own description (main graph only; null when it has none).
  std::shared_ptr<const ModelMetadata> metadata;
  std::vector<Value> values;
  std::vector<Node> nodes;   // topological order once topo_sort() succeeded
  std::vector<int> inputs;   // value ids of graph inputs (never constants)
  std::vector<int> outputs;  // value ids of graph outputs
  // A control-flow body: its last `captured` inputs are not formal inputs of
  // the body but the enclosing-scope values it reads, by name (the node that
  // owns the body lists them as implicit inputs).
  size_t captured = 0;
  std::map<std::string, int64_t> opsets;              // domain -> version ("" = ai.onnx)
  std::unordered_map<std::string, Tensor> constants;  // constant key -> bytes
  // The constants whose bytes came from a mapped file in a block that can be
  // dropped and read again (core/constant_block.hpp): key -> the block its
  // tensor views. A key whose tensor no longer views its block's bytes
  // (replaced since) is ignored.
  std::unordered_map<std::string, std::weak_ptr<ConstantBlock>> constant_blocks;
  // Graph inputs that ONNX gives a default (an initializer listed among the
  // inputs, IR version 4 on): input name -> the value a run takes when no
  // feed gives one.
  std::map<std::string, Tensor> input_defaults;

  int64_t opset(const std::string& domain = "") const;
  // Value id by name, -1 if none.
  int find_value(const std::string& name) const;
  // Adds a value; names must be unique. Returns its id.
  int add_value(Value value);
  // Adds a constant value holding `tensor` (key = name).
  int add_constant(const std::string& name, Tensor tensor);
  // Turns value `id` into a constant (after folding).
  void make_constant(int id, Tensor tensor);
  const Tensor* constant(int value_id) const;

  // For each value: the nodes that consume it.
  std::vector<std::vector<int>> consumers() const;
  // Sorts nodes topologically (stable), fixes producers; fails on a cycle or
  // an input that nothing produces.
  Status topo_sort();
  // Removes nodes whose outputs nobody needs and values nobody uses.
  void remove_dead();
  // *this becomes `from` without the nodes `drop` marks, then remove_dead():
  // what copying `from`, erasing those nodes, fixing producers and calling
  // remove_dead() gives, with this graph's storage reused (strings and
  // vectors assigned in place where they fit).
  void assign_pruned(const Graph& from, const std::vector<bool>& drop);
  // The nodes assign_pruned keeps of `from` (in order) and, per value of
  // `from`, whether it is live among them.
  static std::vector<size_t> kept_nodes(const Graph& from, const std::vector<bool>& drop,
                                        std::vector<bool>* live_value);

 private:
  std::unordered_map<std::string, int> by_name_;
};

// Structural checks: ids in range, one producer per value, inputs defined
// before use, constants present, outputs produced. Messages name the node.
Status verify(const Graph& graph);

// Resolves graph input shapes (from the model, overridden by `input_shapes`),
// folds constant subgraphs, and infers the dtype and static shape of every
// value. A dim that stays unknown is an error naming the input and dim.
// Ops are resolved in `registry` (nullptr: OpRegistry::builtin()); each node
// is checked against its schema's signature before its inference runs.
// Without a ConstantEvaluator (these overloads) only Shape, Size and Constant
// fold: the overloads of ir/constant_folding.hpp take one (the pipeline's runs
// CpuRef's kernels).
Status infer_shapes(Graph& graph, const std::map<std::string, Shape>& input_shapes = {},
                    const OpRegistry* registry = nullptr);

// Folds every node whose inputs are all constants (whatever the input
// shapes), without needing input shapes: what a model can compute once,
// before it is specialised to the shapes of a run.
Status fold_constants(Graph& graph, const OpRegistry* registry = nullptr);

// Merges nodes that compute the same thing (ONNX Runtime's common
// subexpression elimination): a node of the same domain and op as an
// earlier one, reading the same values (or small constants of the same
// value), with the same attributes, has its
// outputs' readers read the earlier node's outputs, and is removed. Exporters
// repeat such work per layer (a mask, positions, rotary tables from the same
// inputs); merged, it runs (or folds) once. Left alone: nodes with control-
// flow bodies, random ops, nodes writing a graph output or a value a body
// reads by name, Constant nodes with a tensor value over 64 bytes. Needs
// `graph` topologically sorted; returns how many nodes it removed.
int merge_common_subexpressions(Graph& graph);

// Ops the built-in registry knows at some opset (and so the runtime can accept).
bool is_known_op(const std::string& domain, const std::string& op_type);

}  // namespace backplane::ir
