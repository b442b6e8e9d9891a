// wire_split.hpp — a serialized ModelProto with the bytes of its weights left
// where they are.
//
// Protobuf copies every `bytes` field it parses. For an ONNX model whose
// weights are the raw_data of its initializers (what every exporter writes
// under 2 GB), parsing the file as is holds the weights three times at once:
// the file's pages, the parsed message and the runtime's tensors.
// split_raw_data walks the wire format of the main graph's initializers and
// returns the model without their raw_data fields of 4 KiB or more, plus where
// each one lies in the input; the importer parses the small rest and reads
// each weight straight from the file into its tensor. Smaller ones (shapes,
// axes, scales) stay in the rest, where the import's rewrites read them.
//
// Only the wire format is read here, not its meaning: anything unexpected (a
// malformed varint, a length past the end, a graph field given twice, a
// raw_data given twice) gives nullopt, and the caller parses the input as is,
// so protobuf's parser stays the judge of what is valid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace backplane::onnx_import {

struct ByteRange {
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct SplitModel {
  // The ModelProto without the raw_data (of 4 KiB or more) of the main
  // graph's initializers.
  std::string rest;
  // Per initializer of the main graph, in order: where its raw_data lies in
  // the input, or nullopt if it has none or a small one left in the rest.
  std::vector<std::optional<ByteRange>> raw_data;
  // Bytes of raw_data left out, in all.
  uint64_t raw_bytes = 0;
};

// nullopt when `data` is not wire format this walk accepts (see above), or
// when it is larger than protobuf parses (2 GB).
std::optional<SplitModel> split_raw_data(const void* data, size_t size);

}  // namespace backplane::onnx_import
