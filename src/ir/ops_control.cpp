// ops_control.cpp — schemas: If, Loop, Scan, sequence and optional ops, and
// NonZero (the op whose output shape depends on data).
//
// Control-flow, sequence and optional ops are host ops: the executor runs
// them itself (session/staged_model.hpp), between stages whose shapes it
// knows, and specialises each body for the shapes it gets at run time. So
// their infer functions say what a static walk cannot know: a whole-graph
// inference (import_onnx_model, ahead-of-time compiling) stops at them with
// kUnsupported naming the node.
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

namespace backplane::ir::ops {

namespace {

using detail::InferCtx;
using Arity = ParamSpec::Arity;

Status infer_on_host(InferCtx& c) {
  return c.unsupported_error(
      "runs on the host (control flow, sequences, optionals): its outputs are known only when it "
      "runs, so the model cannot be compiled for static shapes ahead of time; load it with "
      "Runtime::load_model, which runs it in stages");
}

// NonZero: int64 [rank(X), number of non-zero elements], the second dim known
// only once the node has run (kData).
Status infer_nonzero(InferCtx& c) {
  c.set(0, DType::kInt64, {c.rank(0), -1});
  return ok_status();
}

// The element types ONNX allows in control flow and sequences: every tensor
// type Backplane has.
const DTypeList& any_tensor() { return dtypes::kAll; }

void add_control_flow(OpRegistry& r) {
  for (int since : {1, 11, 13, 16})
    (void)r.add(OpSchema("", "If", since)
                    .doc("runs then_branch if cond is true, else else_branch; the outputs are the "
                         "branch's (their shapes may differ between branches)")
                    .input("cond", "B")
                    .variadic_output("outputs", "V", 1, false)
                    .type("B", {DType::kBool})
                    .type("V", any_tensor())
                    .required_attr("then_branch", AttrType::kGraph)
                    .required_attr("else_branch", AttrType::kGraph)
                    .infer(infer_on_host)
                    .shape_dependence(ShapeDependence::kData)
                    .host_op());
  for (int since : {1, 11, 13, 16})
    (void)r.add(OpSchema("", "Loop", since)
                    .doc("runs body while the trip count M is not reached and cond holds; "
                         "loop-carried values, then scan outputs stacked along a new first axis")
                    .optional_input("M", "I")
                    .optional_input("cond", "B")
                    .variadic_input("v_initial", "V", 0, false)
                    .variadic_output("v_final_and_scan_outputs", "V", 1, false)
                    .type("I", {DType::kInt64})
                    .type("B", {DType::kBool})
                    .type("V", any_tensor())
                    .required_attr("body", AttrType::kGraph)
                    .infer(infer_on_host)
                    .shape_dependence(ShapeDependence::kData)
                    .host_op());
  (void)r.add(OpSchema("", "Scan", 8)
                  .doc("runs body over slices of the scan inputs (batched: axis 0 is the batch)")
                  .optional_input("sequence_lens", "I")
                  .variadic_input("initial_state_and_scan_inputs", "V", 1, false)
                  .variadic_output("final_state_and_scan_outputs", "V", 1, false)
                  .type("I", {DType::kInt64})
                  .type("V", any_tensor())
                  .required_attr("body", AttrType::kGraph)
                  .required_attr("num_scan_inputs", AttrType::kInt)
                  .attr("directions", AttrType::kInts)
                  .infer(infer_on_host)
                  .host_op());
  for (int since : {9, 11, 16})
    (void)r.add(OpSchema("", "Scan", since)
                    .doc("runs body over slices of the scan inputs along their scan axes")
                    .variadic_input("initial_state_and_scan_inputs", "V", 1, false)
                    .variadic_output("final_state_and_scan_outputs", "V", 1, false)
                    .type("V", any_tensor())
                    .required_attr("body", AttrType::kGraph)
                    .required_attr("num_scan_inputs", AttrType::kInt)
                    .attr("scan_input_axes", AttrType::kInts)
                    .attr("scan_input_directions", AttrType::kInts)
                    .attr("scan_output_axes", AttrType::kInts)
                    .attr("scan_output_directions", AttrType::kInts)
                    .infer(infer_on_host)
                    .host_op());
}

void add_sequences(OpRegistry& r) {
  auto seq = [](const char* name, int since) {
    return OpSchema("", name, since)
        .type("S", any_tensor())
        .type("T", any_tensor())
        .type("I", {DType::kInt32, DType::kInt64})
        .infer(infer_on_host)
        .host_op();
  };
  (void)r.add(seq("SequenceEmpty", 11)
                  .doc("an empty sequence of tensors of `dtype` (float32 by default)")
                  .output("output", "S")
                  .attr("dtype", AttrType::kInt));
  (void)r.add(seq("SequenceConstruct", 11)
                  .doc("a sequence of the input tensors")
                  .variadic_input("inputs", "T")
                  .output("output_sequence", "S"));
  (void)r.add(seq("SequenceInsert", 11)
                  .doc("the sequence with `tensor` inserted at `position` (the end by default)")
                  .input("input_sequence", "S")
                  .input("tensor", "S")
                  .optional_input("position", "I")
                  .output("output_sequence", "S"));
  (void)r.add(seq("SequenceErase", 11)
                  .doc("the sequence without the tensor at `position` (the last by default)")
                  .input("input_sequence", "S")
                  .optional_input("position", "I")
                  .output("output_sequence", "S"));
  (void)r.add(seq("SequenceAt", 11)
                  .doc("the tensor at `position` (negative: from the end)")
                  .input("input_sequence", "S")
                  .input("position", "I")
                  .output("tensor", "S"));
  (void)r.add(seq("SequenceLength", 11)
                  .doc("the number of tensors in the sequence, an int64 scalar")
                  .input("input_sequence", "S")
                  .output("length"));
  (void)r.add(seq("SplitToSequence", 11)
                  .doc("splits a tensor along `axis` into a sequence (by `split`, or into "
                       "slices of 1, squeezed unless keepdims)")
                  .input("input", "T")
                  .optional_input("split", "I")
                  .output("output_sequence", "T")
                  .attr("axis", AttrType::kInt, int64_t{0})
                  .attr("keepdims", AttrType::kInt, int64_t{1}));
  (void)r.add(seq("ConcatFromSequence", 11)
                  .doc("concatenates the tensors of a sequence along `axis` (stacked along a new "
                       "axis if new_axis)")
                  .input("input_sequence", "S")
                  .output("concat_result", "S")
                  .required_attr("axis", AttrType::kInt)
                  .attr("new_axis", AttrType::kInt, int64_t{0}));
  (void)r.add(OpSchema("", "SequenceMap", 17)
                  .doc("runs body once per element of the input sequence(s); the outputs are "
                       "sequences of the body's outputs")
                  .input("input_sequence", "S")
                  .variadic_input("additional_inputs", "V", 0, false)
                  .variadic_output("out_sequence", "S", 1, false)
                  .type("S", any_tensor())
                  .type("V", any_tensor())
                  .required_attr("body", AttrType::kGraph)
                  .infer(infer_on_host)
                  .host_op());
}

void add_optionals(OpRegistry& r) {
  (void)r.add(OpSchema("", "Optional", 15)
                  .doc("an optional holding the input, or an empty one of `type`")
                  .optional_input("input", "V")
                  .output("output", "V")
                  .type("V", any_tensor())
                  .attr("type", AttrType::kTypeProto)
                  .infer(infer_on_host)
                  .host_op());
  (void)r.add(OpSchema("", "OptionalHasElement", 15)
                  .doc("whether the optional holds an element (a bool scalar)")
                  .input("input", "O")
                  .output("output", "B")
                  .type("O", any_tensor())
                  .type("B", {DType::kBool})
                  .infer(infer_on_host)
                  .host_op());
  (void)r.add(OpSchema("", "OptionalGetElement", 15)
                  .doc("the element of a non-empty optional")
                  .input("input", "O")
                  .output("output", "O")
                  .type("O", any_tensor())
                  .infer(infer_on_host)
                  .host_op());
}

}  // namespace

void register_control_ops(OpRegistry& registry) {
  add_control_flow(registry);
  add_sequences(registry);
  add_optionals(registry);
  for (int since : {9, 13})
    (void)registry.add(OpSchema("", "NonZero", since)
                           .doc("the indices of the non-zero elements, int64 [rank, count] in "
                                "row-major order; count is known only once it has run")
                           .input("X", "T")
                           .output("Y")
                           .type("T", dtypes::kAll)
                           .infer(infer_nonzero)
                           .shape_dependence(ShapeDependence::kData));
}

}  // namespace backplane::ir::ops
