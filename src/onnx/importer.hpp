// importer.hpp — ONNX model -> ir::Graph.
//
// Supports opsets 7 to 18 of the default domain, initializers (raw_data and
// typed fields; the main graph's raw_data is copied from the input once, never
// parsed by protobuf: wire_split.hpp), Constant nodes (turned into constants), external data
// (data_location = EXTERNAL, files resolved relative to the model, mapped
// read-only, so models over 2 GB load), and functions: calls of model-local
// functions and default-domain ops known only through libonnx's function
// bodies are inlined (onnx/functions.hpp), unless `registry` knows the op.
// Every error names the file, and where it applies the node and the reason.
#pragma once

#include "ir/graph.hpp"
#include "ir/op_registry.hpp"

#include <cstddef>
#include <string>

namespace backplane::onnx_import {

// Reads and converts the model at `path`. `registry` decides which calls
// stay whole (a Runtime passes its own, which holds its backends' operators);
// it must outlive the call only.
Result<ir::Graph> import_file(const std::string& path,
                              const ir::OpRegistry& registry = ir::OpRegistry::builtin());

// Converts a serialized ModelProto held in memory. `source` names it in
// messages; external data files are looked up in `base_dir`.
Result<ir::Graph> import_bytes(const void* data, size_t size, const std::string& source,
                               const std::string& base_dir,
                               const ir::OpRegistry& registry = ir::OpRegistry::builtin());

}  // namespace backplane::onnx_import
