// functions.hpp — ONNX functions inlined at import.
//
// Two kinds of node are calls of a function whose body is a list of ONNX
// nodes, and both are replaced by that body before the importer converts the
// graph:
//
//  - a call of a model-local function (ModelProto.functions, as newer PyTorch
//    exporters emit with export_modules_as_functions), matched by
//    (domain, op_type) — unless the runtime's operator registry knows that
//    (domain, op), i.e. a backend registered it as an operator of its own,
//    in which case the node stays whole and goes to that backend;
//  - a default-domain op the registry does not know at the model's opset but
//    for which libonnx holds a function body at that version (Celu,
//    MeanVarianceNormalization, Range, GreaterOrEqual, HardSwish, the loss
//    functions, ...), including bodies libonnx builds from the node's input
//    types (context-dependent functions), so that an op runs before anyone
//    writes its kernel.
//
// Inlining gives every value of the body a fresh name unique in the model,
// names every inlined node "<caller>/<body node>", substitutes attributes a
// body refers to (ref_attr_name) with the caller's or the function's default,
// expands nested calls (a recursive function is an error, and so is an
// expansion past kMaxInlinedNodes nodes), walks into subgraphs (If/Loop/Scan
// bodies, inside and outside functions), and honours each function's opset
// imports: a domain the model does not import is added; a body node of a
// domain the model imports at another version is kept only if its op did not
// change incompatibly between the two versions (an attribute the later version
// dropped, e.g. Unsqueeze's axes at 13 or ReduceMean's at 18), else the import
// fails with an error naming the function, the node and both versions.
#pragma once

#include "ir/op_registry.hpp"

#include <cstddef>

namespace onnx {
class ModelProto;
}

namespace backplane::onnx_import {

// Upper bound on the nodes inlining may add to one model: functions calling
// functions several times each grow exponentially, and such a model must fail
// cleanly rather than exhaust memory. Exported models, functions inlined,
// stay far below it (a 32-layer transformer: a few thousand nodes).
inline constexpr size_t kMaxInlinedNodes = size_t{1} << 18;

// What inline_functions did (for tests and log messages).
struct InlineStats {
  int local_calls = 0;   // calls of model-local functions inlined
  int schema_calls = 0;  // default-domain ops inlined from libonnx's bodies
  int kept_calls = 0;    // calls of model-local functions the registry knows (kept whole)
};

// Rewrites `model` in place: every call described above (in the main graph
// and in every subgraph) is replaced by its body; model.functions is cleared
// and model.opset_import gains the domains the inlined bodies import. A model
// with no calls is left unchanged (and costs one walk over its nodes).
// Errors (kInvalidArgument for malformed functions, kUnsupported for what
// the runtime cannot do) name the function and, where it applies, the node.
// `stats` may be null.
Status inline_functions(onnx::ModelProto& model, const ir::OpRegistry& registry,
                        InlineStats* stats = nullptr);

}  // namespace backplane::onnx_import
