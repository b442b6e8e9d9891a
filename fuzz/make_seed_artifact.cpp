// make_seed_artifact — writes valid small artifacts (.bpk) from ONNX models,
// the seed corpus of fuzz_artifact. Built by the fuzz build, so seeding needs
// no other build of Backplane.
//
//   make_seed_artifact OUT_DIR MODEL.onnx...
//
// For each model: one artifact with its nodes in two partitions (the first
// with a payload), one with the model as two methods, and one as compiling a
// model with an open dim writes it (a portable graph whose first input's
// first dim is symbolic, and its specialisation at the model's shapes).
#include "artifact/artifact.hpp"
#include "core/named_blob_store.hpp"
#include "ir/graph.hpp"
#include "onnx/importer.hpp"
#include "pipeline/front_end.hpp"

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

using namespace backplane;

namespace {

ArtifactMethod method_of(const std::string& name, const ir::Graph& g) {
  ArtifactMethod m;
  m.name = name;
  m.portable = &g;  // shapes inferred already: its one specialisation is itself
  m.preference = {"CpuRef"};
  ArtifactSpecialization& spec = m.specializations.emplace_back();
  spec.graph = &g;
  for (int v : g.inputs) spec.signature.push_back(g.values[v].shape);
  const size_t half = (g.nodes.size() + 1) / 2;
  ArtifactPartition first, second;
  first.backend = "CpuRef";
  first.api_major = 1;
  first.api_minor = 1;
  first.has_payload = true;
  std::string payload = "CpuRef payload 1\n";
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    ArtifactPartition& p = n < half ? first : second;
    p.nodes.push_back(static_cast<int>(n));
    if (n < half) payload += g.nodes[n].op_type + "\n";
  }
  first.payload.assign(payload.begin(), payload.end());
  second.backend = "MockAcc";
  second.api_major = 1;
  spec.partitions.push_back(first);
  if (!second.nodes.empty()) spec.partitions.push_back(second);
  return m;
}

// Writes `out`: the portable graph of `path` with its first input's first
// dim made symbolic ("batch"), and its specialisation at the model's shapes.
// Writes nothing for a model without such an input.
Status write_portable_seed(const std::string& path, const std::string& out) {
  BP_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> portable, import_portable_model(path));
  if (portable->inputs.empty()) return ok_status();
  ir::Value& first = portable->values[portable->inputs[0]];
  if (!first.shape_is_static() || first.shape.empty()) return ok_status();
  std::map<std::string, Shape> shapes;
  for (int v : portable->inputs) shapes[portable->values[v].name] = portable->values[v].shape;
  first.shape[0] = -1;
  first.dim_params.assign(first.shape.size(), "");
  first.dim_params[0] = "batch";
  BP_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> g, specialize_graph(*portable, shapes));
  ArtifactMethod m = method_of("main", *g);
  m.portable = portable.get();
  m.specializations[0].digest = specialization_digest(*g);
  NamedBlobStore store;
  for (const ir::Graph* graph : {portable.get(), g.get()})
    for (const auto& [key, t] : graph->constants)
      BP_RETURN_IF_ERROR(store.add_borrowed(key, t.data(), t.size_bytes(), 0, ""));
  return write_artifact(out, {m}, store).status();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: make_seed_artifact OUT_DIR MODEL.onnx...\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  std::filesystem::create_directories(out);
  int written = 0;
  for (int i = 2; i < argc; ++i) {
    auto g = onnx_import::import_file(argv[i]);
    if (!g.ok() || !ir::infer_shapes(*g).ok()) continue;  // the bad models
    g->remove_dead();
    if (!ir::verify(*g).ok() || g->nodes.empty()) continue;
    NamedBlobStore store;
    for (const auto& [key, t] : g->constants)
      if (!store.add_borrowed(key, t.data(), t.size_bytes(), 0, "").ok()) return 1;
    const std::string stem = std::filesystem::path(argv[i]).stem().string();
    auto one = write_artifact((out / (stem + ".bpk")).string(), {method_of("main", *g)}, store);
    auto two = write_artifact((out / (stem + ".two.bpk")).string(),
                              {method_of("a", *g), method_of("b", *g)}, store);
    if (!one.ok() || !two.ok()) {
      std::fprintf(stderr, "%s: %s\n", argv[i],
                   (!one.ok() ? one.status() : two.status()).to_string().c_str());
      return 1;
    }
    const std::string portable = (out / (stem + ".portable.bpk")).string();
    if (Status st = write_portable_seed(argv[i], portable); !st.ok())
      std::fprintf(stderr, "%s: no portable seed: %s\n", argv[i], st.to_string().c_str());
    if (std::filesystem::exists(portable)) {
      auto check = ArtifactFile::open(portable, {}, false);
      Status st = check.ok() ? (*check)->load_method(0).status() : check.status();
      if (!st.ok()) {
        std::fprintf(stderr, "%s: the portable seed does not load back: %s\n", argv[i],
                     st.to_string().c_str());
        return 1;
      }
      ++written;
    }
    // Check that what was written opens.
    auto check = ArtifactFile::open((out / (stem + ".bpk")).string(), {}, false);
    Status st = check.ok() ? (*check)->load_method(0).status() : check.status();
    if (!st.ok()) {
      std::fprintf(stderr, "%s: the seed does not load back: %s\n", argv[i],
                   st.to_string().c_str());
      return 1;
    }
    written += 2;
  }
  std::printf("make_seed_artifact: %d artifacts in %s\n", written, out.c_str());
  return written > 0 ? 0 : 1;
}
