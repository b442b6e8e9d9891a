// mock_testing.hpp — helpers shared by the dynamic-backend tests
// (tests/unit/test_dynamic_*.cpp, tests/abi/abi_v1_0_load_test.cpp): small
// ONNX models built in C++, temporary directories, /proc/self/maps, and access
// to the mock backend's call counters.
#pragma once

#include <onnx/onnx_pb.h>

#include <dlfcn.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace backplane::testing {

// Mirrors mock_counters_t of mock_backend.c.
struct MockCounters {
  int create, destroy, get_info, configure, query_support, compile, compiled_destroy, context_create,
      context_destroy, execute, execute_node, before_load_network, after_load_network, before_unload_network,
      after_unload_network, live_instances;
};

// The counters of a mock already loaded in this process (RTLD_NOLOAD: never
// loads it), or a copy of zeros with `loaded` false. A snapshot: the handle is
// closed again before returning, so it does not keep the library alive.
struct CounterSnapshot {
  bool loaded = false;
  MockCounters counters{};
};
inline CounterSnapshot mock_counters(const std::string& canonical_path) {
  CounterSnapshot s;
  void* h = ::dlopen(canonical_path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  if (h == nullptr) return s;
  using Fn = MockCounters* (*)();
  auto fn = reinterpret_cast<Fn>(::dlsym(h, "MockCounters"));
  if (fn != nullptr) {
    s.loaded = true;
    s.counters = *fn();
  }
  ::dlclose(h);
  return s;
}

// True if /proc/self/maps maps `canonical_path` (i.e. it is dlopened here).
inline bool mapped_in_this_process(const std::string& canonical_path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    size_t slash = line.find('/');
    if (slash != std::string::npos && line.compare(slash, std::string::npos, canonical_path) == 0) return true;
  }
  return false;
}

// A fresh directory (mode 0700) removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "bp_dyn_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// ---- models -----------------------------------------------------------------

class ModelBuilder {
 public:
  explicit ModelBuilder(const std::string& name) {
    model_.set_ir_version(8);
    model_.set_producer_name("backplane-tests");
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(13);
    model_.mutable_graph()->set_name(name);
  }
  void input(const std::string& name, const std::vector<int64_t>& shape) {
    value_info(model_.mutable_graph()->add_input(), name, shape);
  }
  void output(const std::string& name, const std::vector<int64_t>& shape) {
    value_info(model_.mutable_graph()->add_output(), name, shape);
  }
  // Initializer with deterministic, sign-mixed values.
  void weight(const std::string& name, const std::vector<int64_t>& dims, uint32_t seed) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    uint32_t x = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      t->add_float_data(static_cast<float>(static_cast<int32_t>(x >> 8) % 2001 - 1000) / 1000.0f);
    }
  }
  onnx::NodeProto& node(const std::string& op, const std::string& name, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    auto* n = model_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }
  static void ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void int_attr(onnx::NodeProto& n, const std::string& name, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  void save(const std::string& path) const {
    std::ofstream f(path, std::ios::binary);
    if (!model_.SerializeToOstream(&f)) throw std::runtime_error("cannot write " + path);
  }

 private:
  static void value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& shape) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) t->mutable_shape()->add_dim()->set_dim_value(d);
  }
  onnx::ModelProto model_;
};

// x[shape] -> Relu (relus times, chained) -> y. Saved at `path`.
inline void write_relu_model(const std::string& path, const std::vector<int64_t>& shape, int relus = 1) {
  ModelBuilder b("relu_chain");
  b.input("x", shape);
  std::string prev = "x";
  for (int i = 0; i < relus; ++i) {
    std::string out = "y";
    if (i + 1 < relus) out = std::string("r").append(std::to_string(i));
    b.node("Relu", "relu_" + std::to_string(i), {prev}, {out});
    prev = out;
  }
  b.output("y", shape);
  b.save(path);
}

// A small CNN: x[1,3,8,8] -> Conv(4,3x3,pad 1) -> Relu -> MaxPool(2) -> Flatten
// -> Gemm(64->10) -> Softmax -> y[1,10]. Saved at `path`.
inline void write_small_cnn(const std::string& path) {
  ModelBuilder b("small_cnn");
  b.input("x", {1, 3, 8, 8});
  b.weight("conv_w", {4, 3, 3, 3}, 1);
  b.weight("conv_b", {4}, 2);
  b.weight("fc_w", {10, 64}, 3);
  b.weight("fc_b", {10}, 4);
  auto& conv = b.node("Conv", "conv", {"x", "conv_w", "conv_b"}, {"c"});
  ModelBuilder::ints(conv, "kernel_shape", {3, 3});
  ModelBuilder::ints(conv, "pads", {1, 1, 1, 1});
  b.node("Relu", "relu", {"c"}, {"r"});
  auto& pool = b.node("MaxPool", "pool", {"r"}, {"p"});
  ModelBuilder::ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::ints(pool, "strides", {2, 2});
  auto& flat = b.node("Flatten", "flatten", {"p"}, {"f"});
  ModelBuilder::int_attr(flat, "axis", 1);
  auto& gemm = b.node("Gemm", "fc", {"f", "fc_w", "fc_b"}, {"g"});
  ModelBuilder::int_attr(gemm, "transB", 1);
  auto& sm = b.node("Softmax", "softmax", {"g"}, {"y"});
  ModelBuilder::int_attr(sm, "axis", 1);
  b.output("y", {1, 10});
  b.save(path);
}

}  // namespace backplane::testing
