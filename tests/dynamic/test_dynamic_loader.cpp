// Tests of dynamic backend loading (src/registry/dynamic_loader.cpp, registry.cpp).
//
// The mock backends live in backends/testing/ and are built, one directory per
// scenario, under BACKPLANE_TESTING_BACKENDS_DIR; each test points
// RuntimeOptions::backend_path (or BACKPLANE_BACKEND_PATHS) at exactly the
// files it needs. Tests named SeedNN_* are the twelve unit tests of the Arm NN
// dynamic-backend design's "Test Strategy", in its order.
#include "core/tensor_data_map.hpp"
#include "ir/graph.hpp"
#include "partition/graph_view.hpp"
#include "registry/dynamic_loader.hpp"
#include "registry/registry.hpp"
#include "support/mock_testing.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace backplane {
namespace {

namespace fs = std::filesystem;
namespace dbu = dynamic_backend_utils;
namespace bt = backplane::test;

using Fate = BackendFileReport::Fate;

const std::string kMocks = BACKPLANE_TESTING_BACKENDS_DIR;

std::string mock_dir(const std::string& scenario) { return kMocks + "/" + scenario; }
std::string mock_file(const std::string& scenario, const std::string& name) {
  return mock_dir(scenario) + "/" + name;
}
std::string canon(const std::string& path) { return fs::canonical(path).string(); }

// Sets (or unsets, with nullptr) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

using bt::dynamic_only;
using bt::with_dir;

// The report of the file named `name` (file name, not path); nullptr if none.
const BackendFileReport* report_for(const std::vector<BackendFileReport>& files,
                                    const std::string& name) {
  for (const BackendFileReport& f : files)
    if (fs::path(f.path).filename() == name) return &f;
  return nullptr;
}

std::optional<BackendDescription> backend_named(const Runtime& rt, const std::string& id) {
  for (const BackendDescription& d : rt.backends())
    if (d.id == id) return d;
  return std::nullopt;
}

std::vector<std::string> ids_of(const Runtime& rt) {
  std::vector<std::string> ids;
  for (const BackendDescription& d : rt.backends()) ids.push_back(d.id);
  return ids;
}

std::shared_ptr<Runtime> make_runtime(const RuntimeOptions& o) {
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().message();
  return rt.ok() ? *rt : nullptr;
}

#define EXPECT_HAS(haystack, needle)                               \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "'" << (haystack) << "' lacks '" << (needle) << "'"

#define EXPECT_REPORT(files, name, fate_, step_, reason_part)                         \
  do {                                                                                \
    const std::vector<BackendFileReport> files_ = (files); /* may be a temporary */   \
    const BackendFileReport* r_ = report_for(files_, (name));                         \
    ASSERT_NE(r_, nullptr) << (name) << " is not in the file reports";                \
    EXPECT_EQ(r_->fate, (fate_)) << (name) << ": " << r_->step << ": " << r_->reason; \
    EXPECT_EQ(r_->step, (step_)) << (name) << ": " << r_->reason;                     \
    EXPECT_HAS(r_->reason, (reason_part));                                            \
  } while (0)

// Copies a file into `dir` as `name` with `mode`; returns the new path.
std::string copy_as(const std::string& from, const std::string& dir, const std::string& name,
                    mode_t mode) {
  std::string to = dir + "/" + name;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  EXPECT_EQ(::chmod(to.c_str(), mode), 0);
  return to;
}

// Runs the {2, 3} relu chain of bt::write_relu_model on `model`.
void expect_relu_runs(Model& model) { bt::expect_relu_runs(model, {2, 3}); }

class DynamicBackends : public ::testing::Test {
 protected:
  // The environment must not leak into tests that do not set it.
  ScopedEnv env_{"BACKPLANE_BACKEND_PATHS", nullptr};
  bt::TempDir tmp_;
};

// ---------------------------------------------------------------------------
// The seed's twelve unit tests
// ---------------------------------------------------------------------------

TEST_F(DynamicBackends, Seed01_LoadValidBackend) {
  const std::string file = mock_file("valid", "Mock_MockA_backend.so");
  auto rt = make_runtime(dynamic_only(mock_dir("valid")));
  ASSERT_NE(rt, nullptr);
  ASSERT_EQ(ids_of(*rt), std::vector<std::string>{"MockA"});
  BackendDescription d = rt->backends()[0];
  EXPECT_EQ(d.vendor, "Mock");
  EXPECT_EQ(d.description, "A");
  EXPECT_EQ(d.source, canon(file));
  EXPECT_EQ(d.api_major, BP_API_VERSION_MAJOR);
  EXPECT_EQ(d.api_minor, BP_API_VERSION_MINOR);

  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].path, file);
  EXPECT_EQ(files[0].canonical_path, canon(file));
  EXPECT_EQ(files[0].fate, Fate::kLoaded);
  EXPECT_EQ(files[0].id, "MockA");
  EXPECT_EQ(files[0].api_version,
            std::to_string(BP_API_VERSION_MAJOR) + "." + std::to_string(BP_API_VERSION_MINOR));
  EXPECT_EQ(files[0].score, 1u);  // no GetBackendScore: counts as 1
  auto paths = rt->backend_paths();
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_TRUE(paths[0].used);
  EXPECT_TRUE(bt::mapped_in_this_process(canon(file)));
  EXPECT_EQ(bt::mock_counters(canon(file)).counters.create, 1);
}

TEST_F(DynamicBackends, Seed02_InvalidSharedObjectsAreNotLoaded) {
  // A text file, a dangling symlink and a directory named like backends are
  // reported; good shared objects under other names are reported as ignored
  // (step "name") but not even opened.
  auto rt = make_runtime(with_dir(mock_dir("invalid_files")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
  auto files = rt->backend_files();
  EXPECT_EQ(files.size(), 5u);
  EXPECT_REPORT(files, "Mock_Text_backend.so", Fate::kRejected, "dlopen", "");
  EXPECT_REPORT(files, "Mock_Gone_backend.so", Fate::kRejected, "path", "non-existent");
  EXPECT_REPORT(files, "Mock_Dir_backend.so", Fate::kRejected, "path", "not a regular file");
  EXPECT_REPORT(files, "Mock_MockA.so", Fate::kRejected, "name",
                "does not follow <vendor>_<name>_backend.so");
  EXPECT_REPORT(files, "Mock_MockA_backend_v1.2.so", Fate::kRejected, "name", "ignored");
  EXPECT_FALSE(bt::mapped_in_this_process(canon(mock_file("invalid_files", "Mock_MockA.so"))));
  EXPECT_FALSE(
      bt::mapped_in_this_process(canon(mock_file("invalid_files", "Mock_MockA_backend_v1.2.so"))));
  // The text file's reason is the loader's ("invalid ELF header", "file too short", ...).
  EXPECT_FALSE(report_for(files, "Mock_Text_backend.so")->reason.empty());
}

TEST_F(DynamicBackends, NameRule_FileNameMustBeTheIdCaseIncluded) {
  // Three files return "AcmeNpu": Acme_Npu_backend.so and
  // acme_acmenpu_backend.so are rejected with the reason, the right one loads.
  auto rt = make_runtime(dynamic_only(mock_dir("misnamed")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"AcmeNpu"});
  EXPECT_EQ(backend_named(*rt, "AcmeNpu")->description, "right");
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_REPORT(files, "Acme_AcmeNpu_backend.so", Fate::kLoaded, "", "");
  EXPECT_REPORT(files, "Acme_Npu_backend.so", Fate::kRejected, "name",
                "named for id 'Npu' but GetBackendId() returns 'AcmeNpu'");
  EXPECT_REPORT(files, "Acme_Npu_backend.so", Fate::kRejected, "name",
                "rename the file to Acme_AcmeNpu_backend.so");
  EXPECT_REPORT(files, "acme_acmenpu_backend.so", Fate::kRejected, "name", "case included");
  EXPECT_EQ(report_for(files, "acme_acmenpu_backend.so")->id, "AcmeNpu");
}

TEST_F(DynamicBackends, Seed03_InvalidBackend_MissingEntryPoints) {
  auto rt = make_runtime(with_dir(mock_dir("missing_symbols")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_REPORT(files, "Mock_NoId_backend.so", Fate::kRejected, "symbols", "GetBackendId");
  EXPECT_REPORT(files, "Mock_NoVersion_backend.so", Fate::kRejected, "symbols", "GetVersion");
  EXPECT_REPORT(files, "Mock_NoFactory_backend.so", Fate::kRejected, "symbols", "BackendFactory");
  // Each names only what it lacks.
  EXPECT_EQ(report_for(files, "Mock_NoId_backend.so")->reason.find("BackendFactory"),
            std::string::npos);
  for (const BackendFileReport& f : files)
    EXPECT_FALSE(bt::mapped_in_this_process(f.canonical_path)) << f.path;
}

TEST_F(DynamicBackends, Seed03_InvalidBackend_BadFactory) {
  auto rt = make_runtime(with_dir(mock_dir("bad_factory")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_REPORT(files, "Mock_NullFactory_backend.so", Fate::kRejected, "factory", "NULL");
  EXPECT_REPORT(files, "Mock_MockThrow_backend.so", Fate::kRejected, "factory", "threw");
  for (const BackendFileReport& f : files)
    EXPECT_FALSE(bt::mapped_in_this_process(f.canonical_path)) << f.path;
}

TEST_F(DynamicBackends, Seed03_InvalidBackend_BadId) {
  auto rt = make_runtime(with_dir(mock_dir("bad_id")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 4u);
  EXPECT_REPORT(files, "Mock_ThrowId_backend.so", Fate::kRejected, "id", "threw");
  EXPECT_REPORT(files, "Mock_EmptyId_backend.so", Fate::kRejected, "id", "empty backend id");
  EXPECT_REPORT(files, "Mock_NullId_backend.so", Fate::kRejected, "id", "empty backend id");
  EXPECT_REPORT(files, "Mock_BadId_backend.so", Fate::kRejected, "id", "'Bad.Id'");
  EXPECT_EQ(backend_named(*rt, "Bad.Id"), std::nullopt);
  for (const BackendFileReport& f : files)
    EXPECT_FALSE(bt::mapped_in_this_process(f.canonical_path)) << f.path;
}

TEST_F(DynamicBackends, Seed03_InvalidBackend_BadTableOrRefusedCreate) {
  auto rt = make_runtime(with_dir(mock_dir("bad_table")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_REPORT(files, "Mock_Refuse_backend.so", Fate::kRejected, "create",
                "mock refuses: no device here");
  EXPECT_REPORT(files, "Mock_NullSlot_backend.so", Fate::kRejected, "table", "query_support");
  EXPECT_REPORT(files, "Mock_SmallTable_backend.so", Fate::kRejected, "table", "struct_size");
  for (const BackendFileReport& f : files)
    EXPECT_FALSE(bt::mapped_in_this_process(f.canonical_path)) << f.path;
}

TEST_F(DynamicBackends, Seed03_RefusedCreateDoesNotLeakAnInstanceItHandedOut) {
  // Keep the file mapped across the runtime's load/unload so its counters survive.
  const std::string file = canon(mock_file("refuse_instance", "Mock_RefuseLeak_backend.so"));
  void* pin = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(pin, nullptr) << ::dlerror();
  auto rt = make_runtime(with_dir(mock_dir("refuse_instance")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
  EXPECT_REPORT(rt->backend_files(), "Mock_RefuseLeak_backend.so", Fate::kRejected, "create",
                "mock refuses");
  bt::MockCounters c = bt::mock_counters(file).counters;
  EXPECT_EQ(c.create, 1);
  EXPECT_EQ(c.destroy, 1);
  EXPECT_EQ(c.live_instances, 0);
  ::dlclose(pin);
}

TEST_F(DynamicBackends, Seed04_UnsupportedVersionIsNotLoaded) {
  auto rt = make_runtime(with_dir(mock_dir("bad_version")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 3u);
  const std::string runtime_minor_plus_1 =
      std::to_string(BP_API_VERSION_MAJOR) + "." + std::to_string(BP_API_VERSION_MINOR + 1);
  EXPECT_REPORT(files, "Mock_MajorUp_backend.so", Fate::kRejected, "version",
                "built for backend API 2.0");
  EXPECT_REPORT(files, "Mock_MinorUp_backend.so", Fate::kRejected, "version", runtime_minor_plus_1);
  EXPECT_REPORT(files, "Mock_MajorDown_backend.so", Fate::kRejected, "version",
                "built for backend API 0.9");
  EXPECT_EQ(report_for(files, "Mock_MajorUp_backend.so")->api_version, "2.0");
  EXPECT_EQ(report_for(files, "Mock_MinorUp_backend.so")->api_version, runtime_minor_plus_1);
  EXPECT_EQ(report_for(files, "Mock_MajorDown_backend.so")->api_version, "0.9");
}

TEST_F(DynamicBackends, Seed05_LoadMultipleDifferentBackends) {
  auto rt = make_runtime(with_dir(mock_dir("two")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), (std::vector<std::string>{"MockA", "MockB", "CpuRef"}));
  EXPECT_EQ(backend_named(*rt, "MockA")->source, canon(mock_file("two", "Mock_MockA_backend.so")));
  EXPECT_EQ(backend_named(*rt, "MockB")->source, canon(mock_file("two", "Mock_MockB_backend.so")));
  EXPECT_EQ(backend_named(*rt, "MockB")->description, "B");
  for (const BackendFileReport& f : rt->backend_files()) EXPECT_EQ(f.fate, Fate::kLoaded) << f.path;

  // And from two directories of the search path at once.
  const std::string list =
      mock_dir("valid") + ":" + mock_dir("bad_version") + ":" + mock_dir("two");
  ScopedEnv env("BACKPLANE_BACKEND_PATHS", list.c_str());
  RuntimeOptions o;
  o.log_level = LogLevel::kOff;
  o.disabled_static_backends = {"CpuRef"};
  auto rt2 = make_runtime(o);
  ASSERT_NE(rt2, nullptr);
  EXPECT_EQ(ids_of(*rt2), (std::vector<std::string>{"MockA", "MockB"}));
  EXPECT_EQ(backend_named(*rt2, "MockA")->source,
            canon(mock_file("valid", "Mock_MockA_backend.so")));
}

TEST_F(DynamicBackends, Seed06_BackendWithIdAlreadyLoadedIsNotLoaded) {
  // Against a static backend: never replaced.
  {
    auto rt = make_runtime(with_dir(mock_dir("cpuref_id")));
    ASSERT_NE(rt, nullptr);
    EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
    EXPECT_EQ(backend_named(*rt, "CpuRef")->source, "static");
    EXPECT_REPORT(rt->backend_files(), "Mock_CpuRef_backend.so", Fate::kRejected, "register",
                  "statically linked");
  }
  // Two directories provide MockA: the first directory's wins.
  {
    const std::string list = mock_dir("dup_a") + ":" + mock_dir("dup_b");
    ScopedEnv env("BACKPLANE_BACKEND_PATHS", list.c_str());
    RuntimeOptions o;
    o.log_level = LogLevel::kOff;
    auto rt = make_runtime(o);
    ASSERT_NE(rt, nullptr);
    EXPECT_EQ(backend_named(*rt, "MockA")->description, "dupA");
    auto files = rt->backend_files();
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(files[0].path, mock_file("dup_a", "Mock_MockA_backend.so"));
    EXPECT_EQ(files[0].fate, Fate::kLoaded);
    EXPECT_EQ(files[1].path, mock_file("dup_b", "Mock_MockA_backend.so"));
    EXPECT_EQ(files[1].fate, Fate::kSuperseded);
    EXPECT_EQ(files[1].step, "register");
    EXPECT_HAS(files[1].reason, mock_file("dup_a", "Mock_MockA_backend.so"));
    EXPECT_FALSE(bt::mapped_in_this_process(files[1].canonical_path));
  }
  // Two files of one directory provide MockA: the first by name wins.
  {
    auto rt = make_runtime(with_dir(mock_dir("dup_files")));
    ASSERT_NE(rt, nullptr);
    EXPECT_EQ(backend_named(*rt, "MockA")->description, "first");
    EXPECT_REPORT(rt->backend_files(), "Mock_MockA_backend.so", Fate::kLoaded, "", "");
    EXPECT_REPORT(rt->backend_files(), "Other_MockA_backend.so", Fate::kSuperseded, "register",
                  "same id 'MockA'");
  }
}

TEST_F(DynamicBackends, Seed07_SameSharedObjectLoadsOncePerRuntime) {
  // .so -> .so.1 -> .so.1.2 -> .so.1.2.3: four names, one file, one instance.
  const std::string real = canon(mock_file("symlinks", "Mock_MockA_backend.so.1.2.3"));
  auto rt = make_runtime(dynamic_only(mock_dir("symlinks")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"MockA"});
  EXPECT_EQ(backend_named(*rt, "MockA")->source, real);
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 4u);
  int loaded = 0;
  for (const BackendFileReport& f : files) {
    EXPECT_EQ(f.canonical_path, real) << f.path;
    if (f.fate == Fate::kLoaded) {
      ++loaded;
    } else {
      EXPECT_EQ(f.fate, Fate::kSuperseded) << f.path;
      EXPECT_EQ(f.step, "path") << f.path;
      EXPECT_HAS(f.reason, "same file");
    }
  }
  EXPECT_EQ(loaded, 1);
  EXPECT_EQ(bt::mock_counters(real).counters.create, 1);

  // The same file reached from two search directories (a link in another one).
  fs::create_symlink(mock_file("valid", "Mock_MockA_backend.so"),
                     tmp_.file("Link_MockA_backend.so"));
  const std::string list = mock_dir("valid") + ":" + tmp_.path();
  ScopedEnv env("BACKPLANE_BACKEND_PATHS", list.c_str());
  RuntimeOptions o;
  o.log_level = LogLevel::kOff;
  auto rt2 = make_runtime(o);
  ASSERT_NE(rt2, nullptr);
  EXPECT_REPORT(rt2->backend_files(), "Mock_MockA_backend.so", Fate::kLoaded, "", "");
  EXPECT_REPORT(rt2->backend_files(), "Link_MockA_backend.so", Fate::kSuperseded, "path",
                "same file");
  EXPECT_EQ(bt::mock_counters(canon(mock_file("valid", "Mock_MockA_backend.so"))).counters.create,
            1);
}

TEST_F(DynamicBackends, Seed08_LoadedBackendsAreUnloadedWhenRuntimeIsDestroyed) {
  const std::string a = canon(mock_file("two", "Mock_MockA_backend.so"));
  const std::string b = canon(mock_file("two", "Mock_MockB_backend.so"));
  ASSERT_FALSE(bt::mapped_in_this_process(a));
  {
    auto rt = make_runtime(dynamic_only(mock_dir("two")));
    ASSERT_NE(rt, nullptr);
    EXPECT_TRUE(bt::mapped_in_this_process(a));
    EXPECT_TRUE(bt::mapped_in_this_process(b));
    EXPECT_EQ(bt::mock_counters(a).counters.live_instances, 1);
  }
  EXPECT_FALSE(bt::mapped_in_this_process(a));
  EXPECT_FALSE(bt::mapped_in_this_process(b));

  // A model that outlives its runtime keeps its backend loaded and usable;
  // the file goes when the model goes.
  bt::write_relu_model(tmp_.file("relu.onnx"), {2, 3});
  std::shared_ptr<Model> model;
  {
    auto rt = make_runtime(dynamic_only(mock_dir("two")));
    ASSERT_NE(rt, nullptr);
    ModelOptions mo;
    mo.backends = {"MockA"};
    auto m = rt->load_model(tmp_.file("relu.onnx"), mo);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model = *m;
  }
  EXPECT_TRUE(bt::mapped_in_this_process(a));
  expect_relu_runs(*model);
  model.reset();
  EXPECT_FALSE(bt::mapped_in_this_process(a));
  EXPECT_FALSE(bt::mapped_in_this_process(b));
}

TEST_F(DynamicBackends, Seed09_AllMethodsOfLoadedBackendCanBeExecuted) {
  const std::string file = canon(mock_file("valid", "Mock_MockA_backend.so"));
  bt::write_relu_model(tmp_.file("relu.onnx"), {2, 3}, 2);
  RuntimeOptions o = dynamic_only(mock_dir("valid"));
  o.num_threads = 2;  // reaches configure("num_threads")
  auto rt = make_runtime(o);
  ASSERT_NE(rt, nullptr);
  {
    auto model = rt->load_model(tmp_.file("relu.onnx"));
    ASSERT_TRUE(model.ok()) << model.status().message();
    EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"MockA"});
    ASSERT_EQ((*model)->partitions().size(), 1u);
    EXPECT_EQ((*model)->partitions()[0].nodes, (std::vector<std::string>{"relu_0", "relu_1"}));
    expect_relu_runs(**model);
    bt::MockCounters c = bt::mock_counters(file).counters;
    EXPECT_EQ(c.create, 1);
    EXPECT_GE(c.get_info, 1);
    EXPECT_EQ(c.configure, 1);
    EXPECT_GE(c.query_support, 1);
    EXPECT_EQ(c.compile, 1);
    EXPECT_GE(c.context_create, 1);
    EXPECT_GE(c.execute, 1);
    EXPECT_EQ(c.before_load_network, 1);
    EXPECT_EQ(c.after_load_network, 1);
    EXPECT_EQ(c.before_unload_network, 0);
  }
  bt::MockCounters c = bt::mock_counters(file).counters;
  EXPECT_EQ(c.compiled_destroy, 1);
  EXPECT_EQ(c.context_destroy, c.context_create);
  EXPECT_EQ(c.before_unload_network, 1);
  EXPECT_EQ(c.after_unload_network, 1);

  // The imperative slot, through the table the loader returned.
  DynamicLoadResult loaded = load_dynamic_backends(dynamic_only(mock_dir("valid")), {});
  ASSERT_EQ(loaded.backends.size(), 1u);
  const LoadedBackend& backend = *loaded.backends[0];
  ASSERT_TRUE(BP_TABLE_HAS(backend.api(), execute_node));
  ir::Graph g;
  g.name = "one_relu";
  g.opsets[""] = 13;
  ir::Value x, y;
  x.name = "x";
  y.name = "y";
  x.dtype = y.dtype = DType::kFloat32;
  x.shape = y.shape = {4};
  x.has_shape = y.has_shape = true;
  int xi = g.add_value(x), yi = g.add_value(y);
  ir::Node relu;
  relu.name = "relu";
  relu.op_type = "Relu";
  relu.inputs = {xi};
  relu.outputs = {yi};
  g.nodes.push_back(relu);
  g.inputs = {xi};
  g.outputs = {yi};
  TensorDataMap weights(&g.constants);
  auto view = GraphView::build(g, {0}, &weights, "one_relu");
  float in[4] = {-1.0f, 2.0f, -3.0f, 4.0f}, out[4] = {9, 9, 9, 9};
  const int64_t shape[1] = {4};
  bp_tensor_t tin{sizeof(bp_tensor_t), BP_DTYPE_FLOAT32, 1, shape, in, sizeof in, 0};
  bp_tensor_t tout{sizeof(bp_tensor_t), BP_DTYPE_FLOAT32, 1, shape, out, sizeof out, 0};
  Status s = backend.check(
      backend.api()->execute_node(backend.instance(), view->get(), 0, 1, &tin, 1, &tout),
      "execute_node");
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{0.0f, 2.0f, 0.0f, 4.0f}));
  // A backend error comes back as a status with the backend's message.
  Status bad = backend.check(
      backend.api()->execute_node(backend.instance(), view->get(), 7, 1, &tin, 1, &tout),
      "execute_node");
  EXPECT_FALSE(bad.ok());
  EXPECT_HAS(bad.message(), "mock runs float32 Relu only");
  EXPECT_HAS(bad.message(), "backend 'MockA'");
}

// With ModelOptions::warm_up, a small model's session runs once on zeros
// while it is made (session.cpp, warm_up), so that the application's first
// run costs a steady one; nothing of that run shows afterwards. Off by
// default.
TEST_F(DynamicBackends, SessionWarmUp_OneRunWhileMadeThatLeavesNothingBehind) {
  const std::string file = canon(mock_file("valid", "Mock_MockA_backend.so"));
  bt::write_relu_model(tmp_.file("relu.onnx"), {2, 3}, 2);
  auto rt = make_runtime(dynamic_only(mock_dir("valid")));
  ASSERT_NE(rt, nullptr);
  ModelOptions warm;
  warm.warm_up = true;
  auto model = rt->load_model(tmp_.file("relu.onnx"), warm);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto executes = [&] { return bt::mock_counters(file).counters.execute; };

  int before = executes();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  EXPECT_EQ(executes(), before + 1);
  // The inputs count as not set, and there is no output yet.
  EXPECT_TRUE((*session)->output(0).empty());
  Status st = (*session)->run();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("input 'x' was not set"), std::string::npos) << st.message();
  EXPECT_EQ(executes(), before + 1);
  // The caller's input, not the zeros, gives the result.
  expect_relu_runs(**model);

  auto cold_model = rt->load_model(tmp_.file("relu.onnx"));
  ASSERT_TRUE(cold_model.ok()) << cold_model.status().message();
  before = executes();
  auto cold = (*cold_model)->create_session();
  ASSERT_TRUE(cold.ok()) << cold.status().message();
  EXPECT_EQ(executes(), before);
}

TEST_F(DynamicBackends, Seed10_RuntimeWithNoBackendRefusesToStart) {
  RuntimeOptions o = dynamic_only(mock_dir("empty"));
  auto rt = Runtime::create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), StatusCode::kNotFound);
  EXPECT_HAS(rt.status().message(), "no backend is available");
  EXPECT_HAS(rt.status().message(), "0 backend file(s) found");

  // Files found but none loadable: the message says so.
  rt = Runtime::create(dynamic_only(mock_dir("bad_version")));
  ASSERT_FALSE(rt.ok());
  EXPECT_HAS(rt.status().message(), "3 backend file(s) found, none loaded");

  // Dynamic loading off altogether.
  o.dynamic_backends = false;
  rt = Runtime::create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_HAS(rt.status().message(), "dynamic loading is disabled");
}

TEST_F(DynamicBackends, Seed11_MultipleRuntimesEachCreateTheirOwnInstance) {
  const std::string file = canon(mock_file("valid", "Mock_MockA_backend.so"));
  bt::write_relu_model(tmp_.file("relu.onnx"), {2, 3});
  auto rt1 = make_runtime(dynamic_only(mock_dir("valid")));
  auto rt2 = make_runtime(dynamic_only(mock_dir("valid")));
  ASSERT_NE(rt1, nullptr);
  ASSERT_NE(rt2, nullptr);
  bt::MockCounters c = bt::mock_counters(file).counters;
  EXPECT_EQ(c.create, 2);  // BackendFactory's table, create called per runtime
  EXPECT_EQ(c.live_instances, 2);
  for (const auto& rt : {rt1, rt2}) {
    auto model = rt->load_model(tmp_.file("relu.onnx"));
    ASSERT_TRUE(model.ok()) << model.status().message();
    EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"MockA"});
    expect_relu_runs(**model);
  }
  rt1.reset();
  EXPECT_TRUE(bt::mapped_in_this_process(file));
  c = bt::mock_counters(file).counters;
  EXPECT_EQ(c.destroy, 1);
  EXPECT_EQ(c.live_instances, 1);
  rt2.reset();
  EXPECT_FALSE(bt::mapped_in_this_process(file));
}

TEST_F(DynamicBackends, Seed12_UtilityFunctions) {
  // split_paths
  EXPECT_EQ(dbu::split_paths("/a:/b::/c:"), (std::vector<std::string>{"/a", "/b", "/c"}));
  EXPECT_TRUE(dbu::split_paths("").empty());
  EXPECT_TRUE(dbu::split_paths(":::").empty());
  // compiled_in_paths: the CMake default includes this build's module folder.
  auto compiled = dbu::compiled_in_paths();
  EXPECT_NE(std::find(compiled.begin(), compiled.end(),
                      std::string(BACKPLANE_BINARY_DIR) + "/lib/backplane/backends"),
            compiled.end());
  // valid_backend_id
  EXPECT_TRUE(dbu::valid_backend_id("CpuRef"));
  EXPECT_TRUE(dbu::valid_backend_id("Gpu2"));
  EXPECT_FALSE(dbu::valid_backend_id(""));
  EXPECT_FALSE(dbu::valid_backend_id("Bad.Id"));
  EXPECT_FALSE(dbu::valid_backend_id("a_b"));
  EXPECT_FALSE(dbu::valid_backend_id("a b"));
  EXPECT_FALSE(dbu::valid_backend_id(std::string(65, 'a')));
  // version_compatible: same major, minor <= runtime's.
  EXPECT_TRUE(dbu::version_compatible(1, 0, 1, 0));
  EXPECT_TRUE(dbu::version_compatible(1, 0, 1, 3));
  EXPECT_TRUE(dbu::version_compatible(1, 3, 1, 3));
  EXPECT_FALSE(dbu::version_compatible(1, 4, 1, 3));
  EXPECT_FALSE(dbu::version_compatible(2, 0, 1, 3));
  EXPECT_FALSE(dbu::version_compatible(0, 3, 1, 3));
  // compare_versions: numeric per field, "" lowest, longer wins a tie.
  EXPECT_GT(dbu::compare_versions("1.10", "1.9"), 0);
  EXPECT_LT(dbu::compare_versions("1.9", "1.10"), 0);
  EXPECT_EQ(dbu::compare_versions("1.2.3", "1.2.3"), 0);
  EXPECT_GT(dbu::compare_versions("1.2.3", "1.2"), 0);
  EXPECT_LT(dbu::compare_versions("", "0"), 0);
  EXPECT_EQ(dbu::compare_versions("", ""), 0);
  EXPECT_GT(dbu::compare_versions("10", "2"), 0);
  EXPECT_EQ(dbu::compare_versions("01.2", "1.02"), 0);
  // Wider than any integer type: compared as numbers, no exception.
  EXPECT_GT(dbu::compare_versions("99999999999999999999999", "1"), 0);
  EXPECT_LT(dbu::compare_versions("1.99999999999999999999999", "2"), 0);
  EXPECT_GT(dbu::compare_versions("99999999999999999999999", "99999999999999999999998"), 0);
  // list_candidates: every entry, full paths, sorted by name.
  std::ofstream(tmp_.file("b")) << "x";
  std::ofstream(tmp_.file("a")) << "x";
  fs::create_directory(tmp_.file("c"));
  EXPECT_EQ(dbu::list_candidates(tmp_.path()),
            (std::vector<std::string>{tmp_.file("a"), tmp_.file("b"), tmp_.file("c")}));
  EXPECT_TRUE(dbu::list_candidates(tmp_.file("missing")).empty());
  // check_permissions
  ASSERT_EQ(::chmod(tmp_.file("a").c_str(), 0644), 0);
  EXPECT_TRUE(dbu::check_permissions(tmp_.file("a")).ok());
  ASSERT_EQ(::chmod(tmp_.file("a").c_str(), 0664), 0);
  EXPECT_HAS(dbu::check_permissions(tmp_.file("a")).message(), "writable by its group");
  ASSERT_EQ(::chmod(tmp_.file("a").c_str(), 0646), 0);
  EXPECT_HAS(dbu::check_permissions(tmp_.file("a")).message(), "writable by every user");
  EXPECT_FALSE(dbu::check_permissions(tmp_.file("missing")).ok());
  // sha256_file: the FIPS 180-2 "abc" vector, and the empty file.
  std::ofstream(tmp_.file("abc"), std::ios::binary) << "abc";
  std::ofstream(tmp_.file("empty"), std::ios::binary).flush();
  auto abc = dbu::sha256_file(tmp_.file("abc"));
  ASSERT_TRUE(abc.ok());
  EXPECT_EQ(*abc, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto empty = dbu::sha256_file(tmp_.file("empty"));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_FALSE(dbu::sha256_file(tmp_.file("missing")).ok());
  // validate_backend_table (registry): NULL and a good SDK-built table.
  EXPECT_FALSE(validate_backend_table(nullptr).ok());
  EXPECT_EQ(static_backend_ids(), std::vector<std::string>{"CpuRef"});
  // fate_name
  EXPECT_STREQ(fate_name(Fate::kLoaded), "loaded");
  EXPECT_STREQ(fate_name(Fate::kSuperseded), "superseded");
  EXPECT_STREQ(fate_name(Fate::kRejected), "rejected");
  // parse_file_name, search_paths and probe_in_child have their own tests below.
}

// ---------------------------------------------------------------------------
// Naming: every row of the seed's table
// ---------------------------------------------------------------------------

struct NameRow {
  const char* file;
  bool valid;
  const char* vendor;
  const char* name;
  const char* version;
};

class NamingTable : public ::testing::TestWithParam<NameRow> {};

TEST_P(NamingTable, ParseFileName) {
  const NameRow& row = GetParam();
  std::string vendor = "?", name = "?", version = "?";
  EXPECT_EQ(dbu::parse_file_name(row.file, &vendor, &name, &version), row.valid) << row.file;
  EXPECT_EQ(dbu::parse_file_name(row.file), row.valid) << row.file;
  if (row.valid) {
    EXPECT_EQ(vendor, row.vendor);
    EXPECT_EQ(name, row.name);
    EXPECT_EQ(version, row.version);
  }
}

const NameRow kNameRows[] = {
    {"Arm_GpuAcc_backend.so", true, "Arm", "GpuAcc", ""},
    {"Arm_GpuAcc_backend.so.1", true, "Arm", "GpuAcc", "1"},
    {"Arm_GpuAcc_backend.so.1.2", true, "Arm", "GpuAcc", "1.2"},
    {"Arm_GpuAcc_backend.so.1.2.3", true, "Arm", "GpuAcc", "1.2.3"},
    {"Arm_GpuAcc_backend.so.10.1.27", true, "Arm", "GpuAcc", "10.1.27"},
    {"Arm_GpuAcc_backend.so.10.1.33.", false, "", "", ""},
    {"Arm_GpuAcc_backend.so.3.4..5", false, "", "", ""},
    {"Arm_GpuAcc_backend.so.1,1.1", false, "", "", ""},
    {"Arm123_GpuAcc_backend.so", true, "Arm123", "GpuAcc", ""},
    {"Arm_GpuAcc456_backend.so", true, "Arm", "GpuAcc456", ""},
    {"Arm%Co_GpuAcc_backend.so", false, "", "", ""},
    {"Arm_Gpu.Acc_backend.so", false, "", "", ""},
    {"GpuAcc_backend.so", false, "", "", ""},
    {"_GpuAcc_backend.so", false, "", "", ""},
    {"Arm__backend.so", false, "", "", ""},
    {"Arm_GpuAcc.so", false, "", "", ""},
    {"__backend.so", false, "", "", ""},
    {"__.so", false, "", "", ""},
    {"Arm_GpuAcc_backend", false, "", "", ""},
    {"Arm_GpuAcc_backend_v1.2.so", false, "", "", ""},
    {"Arm_CpuAcc_backend.so", true, "Arm", "CpuAcc", ""},
    // The symlink rows' names (the links themselves: NamingTableOnDisk).
    {"Arm_CpuAcc_backend.so.1", true, "Arm", "CpuAcc", "1"},
    {"Arm_CpuAcc_backend.so.1.2", true, "Arm", "CpuAcc", "1.2"},
    {"Arm_CpuAcc_backend.so.1.2.3", true, "Arm", "CpuAcc", "1.2.3"},
    {"Arm_no_backend.so", true, "Arm", "no", ""},
    // Beyond the table: case, a leading dot, a trailing newline, a path.
    {"arm_gpuacc_backend.so", true, "arm", "gpuacc", ""},
    {"Arm_GpuAcc_BACKEND.so", false, "", "", ""},
    {"Arm_GpuAcc_backend.SO", false, "", "", ""},
    {".Arm_GpuAcc_backend.so", false, "", "", ""},
    {"Arm_GpuAcc_backend.so\n", false, "", "", ""},
    {"Arm_GpuAcc_backend.so.", false, "", "", ""},
    {"dir/Arm_GpuAcc_backend.so", false, "", "", ""},
};

std::string row_name(const ::testing::TestParamInfo<NameRow>& info) {
  std::string s = std::to_string(info.index) + "_";
  for (const char* p = info.param.file; *p; ++p)
    s += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(SeedRows, NamingTable, ::testing::ValuesIn(kNameRows), row_name);

// The table's symlink and pathA/pathB rows, with real files.
TEST_F(DynamicBackends, NamingTableOnDisk_SymlinkRows) {
  const std::string real = copy_as(mock_file("naming", "Arm_CpuAcc_backend.so"), tmp_.path(),
                                   "Arm_CpuAcc_backend.so", 0755);
  fs::create_symlink("Arm_CpuAcc_backend.so", tmp_.file("Arm_CpuAcc_backend.so.1"));
  fs::create_symlink("Arm_CpuAcc_backend.so.1", tmp_.file("Arm_CpuAcc_backend.so.1.2"));
  fs::create_symlink("Arm_CpuAcc_backend.so.1.2", tmp_.file("Arm_CpuAcc_backend.so.1.2.3"));
  fs::create_symlink("nothing", tmp_.file("Arm_no_backend.so"));
  auto rt = make_runtime(dynamic_only(tmp_.path()));
  ASSERT_NE(rt, nullptr);
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 5u);
  EXPECT_REPORT(files, "Arm_CpuAcc_backend.so", Fate::kLoaded, "", "");
  for (const char* link :
       {"Arm_CpuAcc_backend.so.1", "Arm_CpuAcc_backend.so.1.2", "Arm_CpuAcc_backend.so.1.2.3"}) {
    EXPECT_REPORT(files, link, Fate::kSuperseded, "path", "same file");
    EXPECT_EQ(report_for(files, link)->canonical_path, canon(real)) << link;
  }
  EXPECT_EQ(report_for(files, "Arm_CpuAcc_backend.so.1.2.3")->file_version, "1.2.3");
  EXPECT_REPORT(files, "Arm_no_backend.so", Fate::kRejected, "path",
                "symlink resolves to a non-existent file");
  EXPECT_EQ(report_for(files, "Arm_no_backend.so")->canonical_path, "");
}

TEST_F(DynamicBackends, NamingTableOnDisk_SameNameInTwoPaths) {
  fs::create_directory(tmp_.file("pathA"));
  fs::create_directory(tmp_.file("pathB"));
  ::chmod(tmp_.file("pathA").c_str(), 0755);
  ::chmod(tmp_.file("pathB").c_str(), 0755);
  const std::string a = copy_as(mock_file("naming", "Arm_GpuAcc_backend.so"), tmp_.file("pathA"),
                                "Arm_GpuAcc_backend.so", 0755);
  const std::string b = copy_as(mock_file("naming", "Arm_GpuAcc_backend.so"), tmp_.file("pathB"),
                                "Arm_GpuAcc_backend.so", 0755);
  const std::string list = tmp_.file("pathA") + ":" + tmp_.file("pathB");
  ScopedEnv env("BACKPLANE_BACKEND_PATHS", list.c_str());
  RuntimeOptions o;
  o.log_level = LogLevel::kOff;
  auto rt = make_runtime(o);
  ASSERT_NE(rt, nullptr);
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].path, a);
  EXPECT_EQ(files[0].fate, Fate::kLoaded);
  EXPECT_EQ(files[1].path, b);
  EXPECT_EQ(files[1].fate, Fate::kSuperseded);
  EXPECT_EQ(backend_named(*rt, "GpuAcc")->source, canon(a));
  EXPECT_FALSE(bt::mapped_in_this_process(canon(b)));
}

// ---------------------------------------------------------------------------
// Search paths
// ---------------------------------------------------------------------------

TEST_F(DynamicBackends, SearchPaths_OptionOverridesEnvironmentAndCompiledIn) {
  const std::string list = mock_dir("two") + ":" + mock_dir("bad_id");
  ScopedEnv env("BACKPLANE_BACKEND_PATHS", list.c_str());
  RuntimeOptions o = with_dir(mock_dir("valid"));
  std::vector<BackendPathReport> reports;
  EXPECT_EQ(dbu::search_paths(o, &reports), std::vector<std::string>{mock_dir("valid")});
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].used);
  auto rt = make_runtime(o);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), (std::vector<std::string>{"MockA", "CpuRef"}));
  EXPECT_EQ(rt->backend_files().size(), 1u);
}

TEST_F(DynamicBackends, SearchPaths_EnvironmentOverridesCompiledIn) {
  const std::string list = mock_dir("two") + ":" + mock_dir("bad_id");
  ScopedEnv env("BACKPLANE_BACKEND_PATHS", list.c_str());
  RuntimeOptions o;
  o.log_level = LogLevel::kOff;
  EXPECT_EQ(dbu::search_paths(o, nullptr),
            (std::vector<std::string>{mock_dir("two"), mock_dir("bad_id")}));
  auto rt = make_runtime(o);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), (std::vector<std::string>{"MockA", "MockB", "CpuRef"}));
  // Nothing from the compiled-in directory (its CpuRef module would be reported).
  for (const BackendFileReport& f : rt->backend_files())
    EXPECT_EQ(f.path.rfind(mock_dir(""), 0), 0u) << f.path;
  EXPECT_EQ(rt->backend_files().size(), 6u);
}

TEST_F(DynamicBackends, SearchPaths_CompiledInIsTheDefault) {
  RuntimeOptions o;
  o.log_level = LogLevel::kOff;
  std::vector<std::string> expected;
  for (const std::string& p : dbu::compiled_in_paths())
    if (p[0] == '/' && fs::is_directory(p) &&
        std::find(expected.begin(), expected.end(), p) == expected.end())
      expected.push_back(p);
  EXPECT_EQ(dbu::search_paths(o, nullptr), expected);
  // This build's module folder holds Backplane_CpuRef_backend.so: found, and
  // refused because the static CpuRef owns the id.
  auto rt = make_runtime(o);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(backend_named(*rt, "CpuRef")->source, "static");
  EXPECT_REPORT(rt->backend_files(), "Backplane_CpuRef_backend.so", Fate::kRejected, "register",
                "CpuRef");
}

TEST_F(DynamicBackends, SearchPaths_EmptyOrDisabledMeansNoDynamicBackends) {
  {
    ScopedEnv env("BACKPLANE_BACKEND_PATHS", "");
    RuntimeOptions o;
    o.log_level = LogLevel::kOff;
    std::vector<BackendPathReport> reports;
    EXPECT_TRUE(dbu::search_paths(o, &reports).empty());
    EXPECT_TRUE(reports.empty());
    auto rt = make_runtime(o);
    ASSERT_NE(rt, nullptr);
    EXPECT_TRUE(rt->backend_files().empty());
    EXPECT_TRUE(rt->backend_paths().empty());
  }
  {
    RuntimeOptions o = with_dir("");  // an explicit empty option
    EXPECT_TRUE(dbu::search_paths(o, nullptr).empty());
  }
  {
    RuntimeOptions o = with_dir(mock_dir("valid"));
    o.dynamic_backends = false;
    EXPECT_TRUE(dbu::search_paths(o, nullptr).empty());
    auto rt = make_runtime(o);
    ASSERT_NE(rt, nullptr);
    EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
    EXPECT_TRUE(rt->backend_files().empty());
  }
}

TEST_F(DynamicBackends, SearchPaths_RelativeMissingAndNonDirectoriesAreSkippedAndReported) {
  std::ofstream(tmp_.file("plain_file")) << "x";
  const std::string list = std::string("relative/dir:") + tmp_.file("missing") + ":" +
                           tmp_.file("plain_file") + ":" + mock_dir("valid") + ":" +
                           mock_dir("valid");
  ScopedEnv env("BACKPLANE_BACKEND_PATHS", list.c_str());
  RuntimeOptions o;
  o.log_level = LogLevel::kOff;
  std::vector<BackendPathReport> reports;
  EXPECT_EQ(dbu::search_paths(o, &reports), std::vector<std::string>{mock_dir("valid")});
  ASSERT_EQ(reports.size(), 5u);
  EXPECT_FALSE(reports[0].used);
  EXPECT_HAS(reports[0].reason, "not an absolute path");
  EXPECT_FALSE(reports[1].used);
  EXPECT_HAS(reports[1].reason, "does not exist");
  EXPECT_FALSE(reports[2].used);
  EXPECT_HAS(reports[2].reason, "not a directory");
  EXPECT_TRUE(reports[3].used);
  EXPECT_FALSE(reports[4].used);
  EXPECT_HAS(reports[4].reason, "listed twice");
  // The runtime starts with what is usable and reports the rest.
  auto rt = make_runtime(o);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), (std::vector<std::string>{"MockA", "CpuRef"}));
  auto paths = rt->backend_paths();
  ASSERT_EQ(paths.size(), 5u);
  EXPECT_EQ(paths[0].path, "relative/dir");
  EXPECT_FALSE(paths[0].used);
}

// ---------------------------------------------------------------------------
// Trust
// ---------------------------------------------------------------------------

TEST_F(DynamicBackends, Trust_WritableFileRefusedUnlessAllowed) {
  const std::string file = copy_as(mock_file("valid", "Mock_MockA_backend.so"), tmp_.path(),
                                   "Mock_MockA_backend.so", 0666);
  {
    auto rt = make_runtime(with_dir(tmp_.path()));
    ASSERT_NE(rt, nullptr);
    EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
    EXPECT_REPORT(rt->backend_files(), "Mock_MockA_backend.so", Fate::kRejected, "trust",
                  "writable by every user");
    EXPECT_FALSE(bt::mapped_in_this_process(canon(file)));
  }
  ASSERT_EQ(::chmod(file.c_str(), 0775), 0);
  {
    auto rt = make_runtime(with_dir(tmp_.path()));
    ASSERT_NE(rt, nullptr);
    EXPECT_REPORT(rt->backend_files(), "Mock_MockA_backend.so", Fate::kRejected, "trust",
                  "writable by its group");
  }
  {
    RuntimeOptions o = with_dir(tmp_.path());
    o.allow_insecure_backend_paths = true;
    auto rt = make_runtime(o);
    ASSERT_NE(rt, nullptr);
    EXPECT_EQ(ids_of(*rt), (std::vector<std::string>{"MockA", "CpuRef"}));
  }
  ASSERT_EQ(::chmod(file.c_str(), 0755), 0);
  auto rt = make_runtime(with_dir(tmp_.path()));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), (std::vector<std::string>{"MockA", "CpuRef"}));
}

TEST_F(DynamicBackends, Trust_WritableDirectoryRefusedUnlessAllowed) {
  fs::create_directory(tmp_.file("open"));
  copy_as(mock_file("valid", "Mock_MockA_backend.so"), tmp_.file("open"), "Mock_MockA_backend.so",
          0755);
  ASSERT_EQ(::chmod(tmp_.file("open").c_str(), 0777), 0);
  {
    auto rt = make_runtime(with_dir(tmp_.file("open")));
    ASSERT_NE(rt, nullptr);
    EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
    auto paths = rt->backend_paths();
    ASSERT_EQ(paths.size(), 1u);
    EXPECT_FALSE(paths[0].used);
    EXPECT_HAS(paths[0].reason, "writable by every user");
  }
  RuntimeOptions o = with_dir(tmp_.file("open"));
  o.allow_insecure_backend_paths = true;
  auto rt = make_runtime(o);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), (std::vector<std::string>{"MockA", "CpuRef"}));
}

// SHA-256 computed by coreutils, independently of the code under test.
std::string sha256sum(const std::string& path) {
  std::string cmd = "sha256sum '" + path + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "";
  char buf[128] = {};
  size_t n = std::fread(buf, 1, 64, p);
  ::pclose(p);
  return std::string(buf, n);
}

TEST_F(DynamicBackends, Trust_DigestAllowList) {
  const std::string file = mock_file("valid", "Mock_MockA_backend.so");
  const std::string digest = sha256sum(file);
  ASSERT_EQ(digest.size(), 64u);
  {
    RuntimeOptions o = with_dir(mock_dir("valid"));
    o.trusted_backend_digests = {std::string(64, '0'), digest};
    auto rt = make_runtime(o);
    ASSERT_NE(rt, nullptr);
    EXPECT_EQ(ids_of(*rt), (std::vector<std::string>{"MockA", "CpuRef"}));
  }
  {
    RuntimeOptions o = with_dir(mock_dir("valid"));
    o.trusted_backend_digests = {std::string(64, '0')};
    auto rt = make_runtime(o);
    ASSERT_NE(rt, nullptr);
    EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
    EXPECT_REPORT(rt->backend_files(), "Mock_MockA_backend.so", Fate::kRejected, "trust", digest);
    EXPECT_FALSE(bt::mapped_in_this_process(canon(file)));
  }
  {
    // The digest of another backend does not admit this one.
    RuntimeOptions o = with_dir(mock_dir("two"));
    o.trusted_backend_digests = {sha256sum(mock_file("two", "Mock_MockB_backend.so"))};
    auto rt = make_runtime(o);
    ASSERT_NE(rt, nullptr);
    EXPECT_EQ(ids_of(*rt), (std::vector<std::string>{"MockB", "CpuRef"}));
    EXPECT_REPORT(rt->backend_files(), "Mock_MockA_backend.so", Fate::kRejected, "trust",
                  "trusted_backend_digests");
  }
}

// ---------------------------------------------------------------------------
// Probe in a child process
// ---------------------------------------------------------------------------

TEST_F(DynamicBackends, Probe_CrashingBackendsAreRejectedAndNeverLoadedHere) {
  const std::string crash = canon(mock_file("crash", "Mock_CrashCreate_backend.so"));
  const std::string abort_ = canon(mock_file("crash", "Mock_AbortQuery_backend.so"));
  RuntimeOptions o = with_dir(mock_dir("crash"));
  o.probe_backends = true;
  o.probe_timeout_ms = 5000;  // a bound, not a wait: crashes end the probe at once
  auto rt = make_runtime(o);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), (std::vector<std::string>{"MockA", "CpuRef"}));
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 4u);
  EXPECT_REPORT(files, "Mock_CrashCreate_backend.so", Fate::kRejected, "probe", "signal 11");
  EXPECT_HAS(report_for(files, "Mock_CrashCreate_backend.so")->reason, strsignal(SIGSEGV));
  // The crash names the ABI slot it happened in.
  EXPECT_REPORT(files, "Mock_CrashCreate_backend.so", Fate::kRejected, "probe",
                "probe crashed in slot 'create': killed by signal 11");
  EXPECT_REPORT(files, "Mock_AbortQuery_backend.so", Fate::kRejected, "probe",
                "probe crashed in slot 'query_support': killed by signal 6");
  // The probe compiles and executes a one-node graph: a crash in execute
  // is caught there, not in the application.
  EXPECT_REPORT(files, "Mock_CrashExecute_backend.so", Fate::kRejected, "probe",
                "probe crashed in slot 'execute': killed by signal 11");
  EXPECT_REPORT(files, "Mock_MockA_backend.so", Fate::kLoaded, "", "");
  EXPECT_FALSE(bt::mapped_in_this_process(crash));
  EXPECT_FALSE(bt::mapped_in_this_process(abort_));
  EXPECT_TRUE(bt::mapped_in_this_process(canon(mock_file("crash", "Mock_MockA_backend.so"))));
}

TEST_F(DynamicBackends, Probe_HangingBackendTimesOut) {
  RuntimeOptions o = with_dir(mock_dir("hang"));
  o.probe_backends = true;
  o.probe_timeout_ms = 1000;
  auto rt = make_runtime(o);
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"CpuRef"});
  EXPECT_REPORT(rt->backend_files(), "Mock_Hang_backend.so", Fate::kRejected, "probe",
                "timed out after 1000 ms in slot 'create'");
  EXPECT_FALSE(bt::mapped_in_this_process(canon(mock_file("hang", "Mock_Hang_backend.so"))));
}

TEST_F(DynamicBackends, Probe_DirectCalls) {
  EXPECT_TRUE(dbu::probe_in_child(canon(mock_file("valid", "Mock_MockA_backend.so")), 5000).ok());
  EXPECT_FALSE(bt::mapped_in_this_process(canon(mock_file("valid", "Mock_MockA_backend.so"))));
  Status text =
      dbu::probe_in_child(canon(mock_file("invalid_files", "Mock_Text_backend.so")), 5000);
  EXPECT_FALSE(text.ok());
  EXPECT_HAS(text.message(), "dlopen");
  Status missing =
      dbu::probe_in_child(canon(mock_file("missing_symbols", "Mock_NoFactory_backend.so")), 5000);
  EXPECT_HAS(missing.message(), "missing entry point");
  Status version =
      dbu::probe_in_child(canon(mock_file("bad_version", "Mock_MajorUp_backend.so")), 5000);
  EXPECT_HAS(version.message(), "incompatible version");
  // A failing step is named with its reason.
  Status refused =
      dbu::probe_in_child(canon(mock_file("bad_table", "Mock_Refuse_backend.so")), 5000);
  EXPECT_HAS(refused.message(), "in slot 'create': create: mock refuses");
  Status crashed =
      dbu::probe_in_child(canon(mock_file("crash", "Mock_CrashCreate_backend.so")), 5000);
  EXPECT_HAS(crashed.message(), "killed by signal 11");
}

// ---------------------------------------------------------------------------
// Choosing among files that provide one id
// ---------------------------------------------------------------------------

TEST_F(DynamicBackends, Superseded_HighestFileVersionWins) {
  auto rt = make_runtime(dynamic_only(mock_dir("versions")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(backend_named(*rt, "MockV")->description, "v10");
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_REPORT(files, "Mock_MockV_backend.so.10.0", Fate::kLoaded, "", "");
  EXPECT_REPORT(files, "Mock_MockV_backend.so.2.0", Fate::kSuperseded, "register",
                "Mock_MockV_backend.so.10.0");
  EXPECT_REPORT(files, "Mock_MockV_backend.so.1.0", Fate::kSuperseded, "register",
                "Mock_MockV_backend.so.10.0");
  EXPECT_EQ(report_for(files, "Mock_MockV_backend.so.2.0")->file_version, "2.0");
  EXPECT_FALSE(
      bt::mapped_in_this_process(canon(mock_file("versions", "Mock_MockV_backend.so.2.0"))));
  EXPECT_FALSE(
      bt::mapped_in_this_process(canon(mock_file("versions", "Mock_MockV_backend.so.1.0"))));
}

TEST_F(DynamicBackends, Superseded_VersionWiderThanIntegers) {
  auto rt = make_runtime(dynamic_only(mock_dir("huge_version")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(backend_named(*rt, "MockH")->description, "hbig");
  EXPECT_REPORT(rt->backend_files(), "Mock_MockH_backend.so.1", Fate::kSuperseded, "register", "");
}

TEST_F(DynamicBackends, Superseded_BestScoreThatCreatesWins_ScoreZeroRejected) {
  auto rt = make_runtime(dynamic_only(mock_dir("scores")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(ids_of(*rt), std::vector<std::string>{"MockS"});
  EXPECT_EQ(backend_named(*rt, "MockS")->description, "s5");
  auto files = rt->backend_files();
  ASSERT_EQ(files.size(), 4u);
  EXPECT_REPORT(files, "Three_MockS_backend.so", Fate::kRejected, "create", "mock refuses");
  EXPECT_REPORT(files, "Two_MockS_backend.so", Fate::kLoaded, "", "");
  EXPECT_REPORT(files, "One_MockS_backend.so", Fate::kSuperseded, "register",
                "Two_MockS_backend.so");
  EXPECT_REPORT(files, "Mock_MockZ_backend.so", Fate::kRejected, "score", "GetBackendScore is 0");
  EXPECT_EQ(report_for(files, "Three_MockS_backend.so")->score, 9u);
  EXPECT_EQ(report_for(files, "Two_MockS_backend.so")->score, 5u);
  EXPECT_EQ(report_for(files, "One_MockS_backend.so")->score, 1u);
  EXPECT_EQ(backend_named(*rt, "MockZ"), std::nullopt);
}

// ---------------------------------------------------------------------------
// Static backends
// ---------------------------------------------------------------------------

TEST_F(DynamicBackends, StaticIdIsNeverReplaced_UnlessTheStaticOneIsDisabled) {
  {
    auto rt = make_runtime(with_dir(mock_dir("cpuref_id")));
    ASSERT_NE(rt, nullptr);
    auto d = backend_named(*rt, "CpuRef");
    EXPECT_EQ(d->source, "static");
    EXPECT_NE(d->description, "impostor");
    EXPECT_FALSE(
        bt::mapped_in_this_process(canon(mock_file("cpuref_id", "Mock_CpuRef_backend.so"))));
  }
  auto rt = make_runtime(dynamic_only(mock_dir("cpuref_id")));
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(backend_named(*rt, "CpuRef")->description, "impostor");
}

}  // namespace
}  // namespace backplane
