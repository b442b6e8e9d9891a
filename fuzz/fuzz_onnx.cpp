// fuzz_onnx — libFuzzer target: bytes as an ONNX model.
//
// Imports them (onnx_import::import_bytes; external data is looked up in an
// empty private directory), then runs shape inference and the structural
// checks, as loading a model does. Any crash, sanitizer report or leak is a
// bug; errors are expected.
#include "ir/graph.hpp"
#include "onnx/importer.hpp"

#include <unistd.h>
#include <cstdint>
#include <filesystem>
#include <string>

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace backplane;
  auto g = onnx_import::import_bytes(data, size, "fuzz.onnx", empty_dir());
  if (!g.ok()) return 0;
  if (!ir::infer_shapes(*g).ok()) return 0;
  g->remove_dead();
  (void)ir::verify(*g);
  return 0;
}
