// importer.hpp — ONNX model -> ir::Graph.
//
// Supports opsets 7 to 17 of the default domain, initializers (raw_data and
// typed fields), Constant nodes (turned into constants), and external data
// (data_location = EXTERNAL, files resolved relative to the model, mapped
// read-only, so models over 2 GB load). Every error names the file, and where
// it applies the node and the reason.
#pragma once

#include "ir/graph.hpp"

#include <cstddef>
#include <string>

namespace backplane::onnx_import {

// Reads and converts the model at `path`.
Result<ir::Graph> import_file(const std::string& path);

// Converts a serialized ModelProto held in memory. `source` names it in
// messages; external data files are looked up in `base_dir`.
Result<ir::Graph> import_bytes(const void* data, size_t size, const std::string& source,
                               const std::string& base_dir);

}  // namespace backplane::onnx_import
