// proto_rewrite.hpp — what the import-time rewrites of ONNX nodes into other
// ONNX nodes share (einsum.cpp, contrib_ops.cpp): the element types and
// ranks a model declares, followed back through operators whose result is
// plain to see, an emitter of the replacement nodes, and the walk that
// puts them in place of the node they replace.
//
// The rewrites run on the ModelProto before it is converted (importer.cpp),
// so they see no inferred shapes: a rewrite that needs an operand's rank or
// type and cannot find it leaves the node whole.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace backplane::onnx_import {

// The element types and ranks of the values of a graph and its subgraphs:
// declared (graph inputs, outputs, value_info, initializers, Constant
// values), or followed back through the operators that keep them. No
// inference of ONNX's own: it runs on models that may be malformed.
class DeclaredTypes {
 public:
  explicit DeclaredTypes(const onnx::GraphProto& g) { add(g); }
  // TensorProto element type of `value`, 0 when not found.
  int32_t elem_type(const std::string& value) const;
  // Rank of `value`, -1 when not found.
  int rank(const std::string& value) const;
  // The values of `value` if it is an int64 initializer or Constant (a
  // Reshape's shape, Unsqueeze's axes), else false.
  bool int64_values(const std::string& value, std::vector<int64_t>* out) const;
  // The same for a float32 initializer or Constant (a Resize's scales).
  bool float_values(const std::string& value, std::vector<float>* out) const;
  // Element count of `value` if it is an initializer or Constant, else -1.
  int64_t constant_numel(const std::string& value) const;
  // Dims of `value` if it is an initializer or Constant, else false.
  bool constant_dims(const std::string& value, std::vector<int64_t>* dims) const;

 private:
  void add(const onnx::GraphProto& g);
  int rank_of(const std::string& value) const;

  std::unordered_map<std::string, int32_t> elem_types_;
  std::unordered_map<std::string, int> ranks_;
  std::unordered_map<std::string, const onnx::TensorProto*> constants_;
  std::unordered_map<std::string, const onnx::NodeProto*> producer_;
};

// Emits the nodes that replace one node: each named "<node>/<k>_<op>", each
// new value "<node's first output>/<k>_<op>", in the default domain at the
// model's opset unless told otherwise. A node returned stays valid while
// more are emitted.
class NodeEmitter {
 public:
  NodeEmitter(const onnx::NodeProto& replaced, int64_t opset);

  // A node of `op` over `inputs` writing `outputs` (empty: one new value).
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs = {},
                        const std::string& domain = "");
  // node() with one output, which it returns.
  std::string op(const std::string& op, const std::vector<std::string>& inputs,
                 const std::string& output = "") {
    return node(op, inputs,
                output.empty() ? std::vector<std::string>{} : std::vector<std::string>{output})
        .output(0);
  }
  // A Constant: a 1-D int64 tensor, or a scalar of element type `elem_type`
  // (FLOAT, FLOAT16, DOUBLE, BFLOAT16, INT64 or INT32).
  std::string int64s(const std::vector<int64_t>& values);
  // A new value's name, for a node of several outputs.
  std::string fresh(const std::string& what) const;
  std::string scalar(double value, int32_t elem_type);
  // ReduceSum/ReduceMean/Unsqueeze/Squeeze over `axes`, as an attribute or
  // an input as the opset wants; x itself if `axes` is empty.
  std::string axes_op(const std::string& op, const std::string& x, const std::vector<int64_t>& axes,
                      int keepdims = -1);
  // Transpose of `x` by `perm`; x itself if it is the identity.
  std::string transpose(const std::string& x, const std::vector<int64_t>& perm);

  int64_t opset() const { return opset_; }
  // The nodes; the last one writes `output` unless some node already does
  // (an Identity from `result` is added when no node at all does).
  std::vector<onnx::NodeProto> finish(const std::string& result, const std::string& output);
  std::vector<onnx::NodeProto> finish();

 private:
  std::string base_, value_base_;
  int64_t opset_;
  // A deque: a node node() returned stays where it is while more are added.
  std::deque<onnx::NodeProto> nodes_;
};

void set_attr(onnx::NodeProto& n, const std::string& name, int64_t value);
void set_attr(onnx::NodeProto& n, const std::string& name, float value);
void set_attr(onnx::NodeProto& n, const std::string& name, const std::string& value);
void set_attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& values);
// The attribute `name` of `n`, or null.
const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name);

// Attribute `name` of `n` as a float or an int, `otherwise` when absent.
float attr_f(const onnx::NodeProto& n, const std::string& name, float otherwise);
int64_t attr_i(const onnx::NodeProto& n, const std::string& name, int64_t otherwise);
// Whether input i is given (present and not empty).
bool has_input(const onnx::NodeProto& n, int i);
// Input or output i, empty when the node has fewer.
std::string input_or_empty(const onnx::NodeProto& n, int i);
std::string output_or_empty(const onnx::NodeProto& n, int i);

// The default domain's opset the model imports, -1 if none.
int64_t default_opset(const onnx::ModelProto& model);

// Whether `match` holds for any node of `g` or of its subgraphs.
bool any_node(const onnx::GraphProto& g, const std::function<bool(const onnx::NodeProto&)>& match);

// Replaces every node of `g` (and of its subgraphs, inner first) for which
// `rewrite` returns nodes by those nodes, in place, in order; returns how
// many were replaced.
int replace_nodes(
    onnx::GraphProto& g,
    const std::function<std::vector<onnx::NodeProto>(const onnx::NodeProto&)>& rewrite);

}  // namespace backplane::onnx_import
