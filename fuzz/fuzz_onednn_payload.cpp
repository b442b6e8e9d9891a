// fuzz_onednn_payload — libFuzzer target: bytes as a CpuOneDnn payload.
//
// A payload normally reaches CpuOneDnn only behind the artifact's segment
// checksum; this target skips that, as a deliberately edited file would.
// At start-up it imports the models named by BACKPLANE_FUZZ_PAYLOAD_MODELS
// (':'-separated ONNX files), compiles each whole graph on CpuOneDnn and
// serializes it, keeping the blobs (the reordered weights) in memory. An
// input is one byte choosing a model, then a payload; it is deserialized
// against that model's view and, if accepted, executed once on zeros. Any
// crash, sanitizer report or leak is a bug; refusals are expected.
// With BACKPLANE_FUZZ_SEED_DIR set, the valid payloads are written there as
// seeds (scripts/fuzz.sh does that).
#include "core/named_blob_store.hpp"
#include "ir/graph.hpp"
#include "onednn/compiler.hpp"
#include "onednn/polymorphic.hpp"
#include "onnx/importer.hpp"
#include "partition/graph_view.hpp"
#include "registry/byte_writer.hpp"
#include "registry/host_api.hpp"
#include "registry/node_report.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace backplane;

// The model's constants and the backend's blobs, by key.
class FuzzDataMap : public NamedDataMap {
 public:
  explicit FuzzDataMap(const ir::Graph* g) : graph_(g) {}
  Status get(const std::string& key, const void** data, size_t* size) const override {
    if (auto it = blobs.find(key); it != blobs.end()) {
      *data = it->second.data();
      *size = it->second.size();
      return ok_status();
    }
    if (auto it = graph_->constants.find(key); it != graph_->constants.end()) {
      *data = it->second.data();
      *size = it->second.size_bytes();
      return ok_status();
    }
    return not_found("no data '" + key + "'");
  }
  size_t num_keys() const override { return 0; }
  const std::string* key_at(size_t) const override { return nullptr; }

  std::map<std::string, std::vector<uint8_t>> blobs;

 private:
  const ir::Graph* graph_;
};

struct Model {
  std::unique_ptr<ir::Graph> graph;
  std::unique_ptr<FuzzDataMap> data;
  std::unique_ptr<GraphView> view;
};

std::vector<Model>& models() {
  static std::vector<Model> m;
  return m;
}

const sdk::Host& host() {
  static const sdk::Host h(host_api());
  return h;
}

void add_model(const std::string& path, const char* seed_dir) {
  auto g = onnx_import::import_file(path);
  if (!g.ok() || !ir::infer_shapes(*g).ok()) std::abort();
  g->remove_dead();
  Model m;
  m.graph = std::make_unique<ir::Graph>(std::move(*g));
  m.data = std::make_unique<FuzzDataMap>(m.graph.get());
  std::vector<int> nodes;
  for (size_t n = 0; n < m.graph->nodes.size(); ++n) nodes.push_back(static_cast<int>(n));
  m.view = GraphView::build(*m.graph, nodes, m.data.get(), "fuzz/partition_0");
  bp_node_report report(nodes.size());
  sdk::NodeReport nr(host_api(), &report);
  auto compiled = onednn::compile_partition(host(), *m.view->get(), 1, {}, nr);
  // Without the runtime's constant evaluator (CpuRef, not in this build)
  // infer_shapes folds only Shape/Size/Constant, so shape arithmetic stays in
  // the graph and CpuOneDnn rejects it: keep the nodes it accepted.
  std::vector<int> accepted;
  for (size_t n = 0; n < nodes.size(); ++n)
    if (report.outcome[n] != BP_NODE_REJECTED) accepted.push_back(nodes[n]);
  if (accepted.size() != nodes.size() && !accepted.empty()) {
    m.view = GraphView::build(*m.graph, accepted, m.data.get(), "fuzz/partition_0");
    bp_node_report again(accepted.size());
    sdk::NodeReport nr2(host_api(), &again);
    compiled = onednn::compile_partition(host(), *m.view->get(), 1, {}, nr2);
  }
  NamedBlobStore store;
  bp_byte_writer writer;
  try {
    compiled->serialize(store.as_abi(), &writer);
  } catch (const std::exception& e) {  // a node CpuOneDnn rejected: no payload from this model
    std::fprintf(stderr, "fuzz_onednn_payload: %s: skipped: %s\n", path.c_str(), e.what());
    return;
  }
  for (const auto& [key, index] : store.keys()) {
    const NamedBlobStore::Blob& b = store.blobs()[index];
    m.data->blobs[key].assign(b.data(), b.data() + b.size);
  }
  // The reader under test must accept what the writer wrote, or the fuzzer
  // would only exercise refusals.
  try {
    (void)onednn::deserialize_partition(host(), *m.view->get(), writer.bytes.data(),
                                        writer.bytes.size(), 1, {}, onednn::kDefaultMaxInstances,
                                        nullptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_onednn_payload: %s: the valid payload is refused: %s\n",
                 path.c_str(), e.what());
    std::abort();
  }
  if (seed_dir != nullptr) {
    std::ofstream out(std::string(seed_dir) + "/payload_" + std::to_string(models().size()),
                      std::ios::binary);
    const char k = static_cast<char>(models().size());
    out.write(&k, 1);
    out.write(reinterpret_cast<const char*>(writer.bytes.data()),
              static_cast<std::streamsize>(writer.bytes.size()));
  }
  models().push_back(std::move(m));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* list = std::getenv("BACKPLANE_FUZZ_PAYLOAD_MODELS");
  if (list == nullptr || *list == '\0') {
    std::fprintf(
        stderr,
        "fuzz_onednn_payload: set BACKPLANE_FUZZ_PAYLOAD_MODELS to ':'-separated ONNX files\n");
    std::abort();
  }
  const char* seed_dir = std::getenv("BACKPLANE_FUZZ_SEED_DIR");
  std::string all = list;
  for (size_t start = 0; start <= all.size();) {
    size_t end = all.find(':', start);
    if (end == std::string::npos) end = all.size();
    if (end > start) add_model(all.substr(start, end - start), seed_dir);
    start = end + 1;
  }
  if (models().empty()) {
    std::fprintf(stderr, "fuzz_onednn_payload: no model gave a payload to fuzz\n");
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || models().empty()) return 0;
  const Model& m = models()[data[0] % models().size()];
  try {
    auto compiled = onednn::deserialize_partition(host(), *m.view->get(), data + 1, size - 1, 1, {},
                                                  onednn::kDefaultMaxInstances, nullptr);
    auto context = compiled->create_context();
    const bp_graph_view_t& v = *m.view->get();
    std::vector<std::vector<float>> in(v.num_inputs), out(v.num_outputs);
    std::vector<bp_tensor_t> ins(v.num_inputs), outs(v.num_outputs);
    auto bind = [&](const int32_t* ids, size_t n, std::vector<std::vector<float>>& mem,
                    std::vector<bp_tensor_t>& t) {
      for (size_t k = 0; k < n; ++k) {
        const bp_value_t& val = v.values[ids[k]];
        size_t count = 1;
        for (size_t d = 0; d < val.rank; ++d) count *= static_cast<size_t>(val.shape[d]);
        mem[k].assign(count, 0.f);
        t[k] = bp_tensor_t{};
        t[k].struct_size = sizeof(bp_tensor_t);
        t[k].data = mem[k].data();
        t[k].size_bytes = count * sizeof(float);
        t[k].dtype = BP_DTYPE_FLOAT32;
        t[k].rank = val.rank;
        t[k].shape = val.shape;
      }
    };
    bind(v.inputs, v.num_inputs, in, ins);
    bind(v.outputs, v.num_outputs, out, outs);
    context->execute(ins.size(), ins.data(), outs.size(), outs.data());
  } catch (const std::exception&) {
    // Refused (or failed cleanly): expected.
  }
  return 0;
}
