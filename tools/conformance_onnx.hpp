// conformance_onnx.hpp — the ONNX backend node tests that `backplane
// conformance` runs besides its own catalogue.
//
// The cases are onnx's (`backend-test-tools generate-data`, written by
// scripts/gen_conformance.py at build time and installed with the CLI):
//   DIR/{node,simple}/<case>/model.onnx
//   DIR/{node,simple}/<case>/test_data_set_N/{input_J.pb,output_J.pb}
// where DIR is <directory of the running program>/../share/backplane/
// conformance, the same place in a build tree (build/bin, build/share) and in
// an install (<prefix>/bin, <prefix>/share). Each holds one model, its inputs
// and the outputs ONNX's own reference implementation computed.
#pragma once

#include <backplane/runtime.hpp>
#include <backplane/tensor.hpp>

#include <onnx/onnx_pb.h>

#include <set>
#include <string>
#include <vector>

namespace backplane::cli {

struct OnnxDataSet {
  std::vector<Tensor> inputs;   // the graph's first inputs, in order
  std::vector<Tensor> outputs;  // the expected values of its first outputs
};

struct OnnxCase {
  std::string name;        // "node/test_add_bcast"
  std::string model_path;  // DIR/node/test_add_bcast/model.onnx
  onnx::ModelProto model;
  std::vector<OnnxDataSet> sets;
  // Why the case cannot be checked here ("" when it can): a sequence,
  // optional or string among its inputs or outputs, an op drawing random
  // values (NumPy's stream cannot be matched), test data that contradicts its
  // model or cannot be read.
  std::string skip;
  // The op types of its nodes, subgraphs included.
  std::set<std::string> ops;
};

// <dir of /proc/self/exe>/../share/backplane/conformance, normalised; "" if
// the program's path is unknown.
std::string default_case_data_dir();

// Every case under `dir` whose name contains `filter`, sorted by name. An
// error only when `dir` cannot be listed; a case that cannot be read is
// returned with `skip` saying why.
Result<std::vector<OnnxCase>> load_onnx_cases(const std::string& dir, const std::string& filter);

// "" when `got` matches the case's expected outputs the way onnx's backend
// test runner checks them (floating point: |got - want| <= 1e-7 + 1e-3 |want|,
// NaN equals NaN, infinities exact; everything else exact; dtype and shape
// equal); else what differs first.
std::string compare_with_expected(const std::vector<Tensor>& got, const std::vector<Tensor>& want);

}  // namespace backplane::cli
