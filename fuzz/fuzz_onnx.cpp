// fuzz_onnx — libFuzzer target: bytes as an ONNX model.
//
// Imports them (onnx_import::import_bytes; external data is looked up in an
// empty private directory), prepares control-flow bodies as staging does,
// then runs shape inference and the structural checks, as loading a model
// does. Any crash, sanitizer report or leak is a
// bug; errors are expected.
#include "ir/graph.hpp"
#include "onnx/importer.hpp"

#include <unistd.h>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace {

// An empty private directory, removed at exit.
struct ScratchDir {
  // Under $TMPDIR (scripts/fuzz.sh points it into the fuzz build and empties
  // it after each run: a crashing run never gets to the destructor).
  std::string path = (std::filesystem::temp_directory_path() /
                      ("backplane_fuzz_onnx." + std::to_string(::getpid())))
                         .string();
  ScratchDir() { std::filesystem::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const std::string& empty_dir() {
  static const ScratchDir dir;
  return dir.path;
}

// Control-flow bodies as staging prepares them (session/staged_model.cpp:
// sorted, folded, verified), each body's bodies too.
void check_bodies(const backplane::ir::Graph& g) {
  using namespace backplane;
  for (const ir::Node& node : g.nodes)
    for (const ir::Attribute& a : node.attributes) {
      std::vector<std::shared_ptr<ir::Graph>> bodies = a.graphs;
      if (a.g) bodies.push_back(a.g);
      for (const auto& body : bodies) {
        ir::Graph copy = *body;
        if (!copy.topo_sort().ok() || !ir::fold_constants(copy).ok() || !ir::verify(copy).ok())
          continue;
        check_bodies(copy);
      }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace backplane;
  auto g = onnx_import::import_bytes(data, size, "fuzz.onnx", empty_dir());
  if (!g.ok()) return 0;
  check_bodies(*g);
  if (!ir::infer_shapes(*g).ok()) return 0;
  g->remove_dead();
  (void)ir::verify(*g);
  return 0;
}
