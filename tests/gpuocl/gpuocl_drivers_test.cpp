// gpuocl_drivers_test.cpp — which OpenCL drivers GpuOcl opens, and which
// device it takes (backends/gpuocl/icd.hpp).
//
//  GpuOclIcd.*          the vendor files read as the ocl-icd loader reads
//                       them (icd.cpp itself, on folders made here); a bad
//                       file is reported, never a crash.
//  GpuOclVendorErrors.* the same through the runtime: GpuOcl loads, says
//                       what is wrong in its description, claims nothing.
//  GpuOclDefault.*      (a process of its own, the machine's drivers) with
//                       no 'device' configured GpuOcl opens no CPU-only
//                       driver and starts no thread; with one it does, and
//                       claims nodes.
//  GpuOclFakeGpu.*      (a process of its own, OCL_ICD_VENDORS naming a
//                       test driver that shows PoCL's device as a GPU, and a
//                       witness that records being opened) GpuOcl takes the
//                       GPU with no options, ahead of CpuOneDnn, and runs
//                       models on it, CLBlast's GEMMs included, without the
//                       ICD loader opening every driver.
//  GpuOclFakeCpu.*      (a process of its own, the same driver showing a CPU
//                       under a name not known as CPU-only) the CPU device is
//                       listed, not taken, until 'device' names it.
#include "gpuocl/icd.hpp"

#include "gpuocl_counter.hpp"
#include "support/e2e_util.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace backplane::e2e {
namespace {

namespace fs = std::filesystem;

// Sets (or, for nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

void write(const std::string& path, const std::string& text) { test::write_bytes(path, text); }

// A vendor folder with one file of each kind (name order): a library that
// is not there, an empty file, PoCL (CPU-only), a library that is no OpenCL
// driver, and a file that is not a vendor file.
void bad_vendor_folder(const test::TempDir& dir, bool with_pocl) {
  write(dir.file("a_missing.icd"), "libgpuocl_no_such_driver.so\n");
  write(dir.file("b_empty.icd"), "");
  if (with_pocl) write(dir.file("c_pocl.icd"), "libpocl.so.2\n");
  write(dir.file("d_not_a_driver.icd"), "libm.so.6\n");
  write(dir.file("e_ignored.txt"), "libgpuocl_ignored.so\n");
}

bool mapped(const std::string& what) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (contains(line, what)) return true;
  return false;
}

size_t thread_count() {
  size_t n = 0;
  for (const auto& entry : fs::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

bool pocl_installed() {
  void* h = dlopen("libpocl.so.2", RTLD_LAZY | RTLD_NOLOAD);
  if (h != nullptr) {
    dlclose(h);
    return true;
  }
  for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"})
    if (fs::exists(std::string(dir) + "/libpocl.so.2")) return true;
  return false;
}

// A one-Relu-and-one-MatMul model: every node something GpuOcl, CpuOneDnn
// and CpuRef all run.
std::string small_model(const test::TempDir& dir) {
  test::ModelBuilder b(13);
  b.input("x", {4, 8});
  b.random_weight("w", {8, 16});
  b.node("MatMul", {"x", "w"}, {"m"}, "matmul");
  b.node("Relu", {"m"}, {"y"}, "relu");
  b.output("y");
  return b.save(dir, "small.onnx");
}

Tensor small_input() {
  std::vector<float> xs(4 * 8);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float((i * 13) % 7) / 3.0f - 1.0f;
  return Tensor::copy_of(DType::kFloat32, {4, 8}, xs.data());
}

const BackendDescription* find_backend(const std::vector<BackendDescription>& all,
                                       const std::string& id) {
  for (const BackendDescription& b : all)
    if (b.id == id) return &b;
  return nullptr;
}

std::shared_ptr<Runtime> create(const RuntimeOptions& o) {
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().to_string();
  return rt.ok() ? *rt : nullptr;
}

RuntimeOptions quiet() {
  RuntimeOptions o;
  o.log_level = LogLevel::kError;
  return o;
}

// ---------------------------------------------------------------------------
// The vendor files, read by icd.cpp

TEST(GpuOclIcd, CpuOnlyDriversAreKnownByTheirLibraryName) {
  EXPECT_TRUE(gpuocl::cpu_only_driver("libpocl.so.2"));
  EXPECT_TRUE(gpuocl::cpu_only_driver("/usr/lib/x86_64-linux-gnu/libpocl.so.2.10.0"));
  EXPECT_TRUE(gpuocl::cpu_only_driver("/opt/intel/oneapi/lib/libintelocl.so"));
  EXPECT_FALSE(gpuocl::cpu_only_driver("libnvidia-opencl.so.1"));
  EXPECT_FALSE(gpuocl::cpu_only_driver("libamdocl64.so"));
  EXPECT_FALSE(gpuocl::cpu_only_driver("/opt/libpocl/libRusticlOpenCL.so.1"));
}

TEST(GpuOclIcd, AFolderIsReadInNameOrderAndEachBadFileSaysWhy) {
  test::TempDir dir;
  bad_vendor_folder(dir, true);
  ScopedEnv vendors("OCL_ICD_VENDORS", dir.path().c_str());
  gpuocl::Vendors v = gpuocl::find_drivers();
  EXPECT_EQ(v.source, "OCL_ICD_VENDORS=" + dir.path());
  EXPECT_TRUE(v.error.empty()) << v.error;
  ASSERT_EQ(v.drivers.size(), 4u);  // not the .txt
  EXPECT_EQ(v.drivers[0].file, dir.file("a_missing.icd"));
  EXPECT_EQ(v.drivers[0].library, "libgpuocl_no_such_driver.so");
  EXPECT_TRUE(v.drivers[1].library.empty());
  EXPECT_TRUE(contains(v.drivers[1].error, "names no library")) << v.drivers[1].error;
  EXPECT_EQ(v.drivers[2].library, "libpocl.so.2");
  EXPECT_TRUE(v.drivers[2].cpu);
  EXPECT_FALSE(v.drivers[0].cpu);
  EXPECT_FALSE(v.drivers[3].cpu);
  for (const gpuocl::Driver& d : v.drivers) EXPECT_FALSE(d.loaded) << d.file;

  gpuocl::load_driver(v.drivers[0]);
  EXPECT_TRUE(v.drivers[0].loaded);
  EXPECT_TRUE(v.drivers[0].platforms.empty());
  EXPECT_TRUE(contains(v.drivers[0].error, "libgpuocl_no_such_driver.so")) << v.drivers[0].error;
  gpuocl::load_driver(v.drivers[1]);  // names nothing: nothing to open
  EXPECT_TRUE(v.drivers[1].platforms.empty());
  gpuocl::load_driver(v.drivers[3]);
  EXPECT_TRUE(v.drivers[3].platforms.empty());
  EXPECT_TRUE(contains(v.drivers[3].error, "not an OpenCL driver")) << v.drivers[3].error;
}

TEST(GpuOclIcd, OneVendorFileOneLibraryOrTheVendorPath) {
  test::TempDir dir;
  bad_vendor_folder(dir, true);
  {
    ScopedEnv vendors("OCL_ICD_VENDORS", dir.file("c_pocl.icd").c_str());
    gpuocl::Vendors v = gpuocl::find_drivers();
    ASSERT_EQ(v.drivers.size(), 1u);
    EXPECT_EQ(v.drivers[0].library, "libpocl.so.2");
  }
  {
    // A bare .icd name is looked for in the vendor folder.
    ScopedEnv vendors("OCL_ICD_VENDORS", "c_pocl.icd");
    ScopedEnv folder("OPENCL_VENDOR_PATH", dir.path().c_str());
    gpuocl::Vendors v = gpuocl::find_drivers();
    ASSERT_EQ(v.drivers.size(), 1u);
    EXPECT_EQ(v.drivers[0].file, dir.file("c_pocl.icd"));
  }
  {
    ScopedEnv vendors("OCL_ICD_VENDORS", "/opt/vendor/libsomeocl.so");
    gpuocl::Vendors v = gpuocl::find_drivers();
    ASSERT_EQ(v.drivers.size(), 1u);
    EXPECT_TRUE(v.drivers[0].file.empty());
    EXPECT_EQ(v.drivers[0].library, "/opt/vendor/libsomeocl.so");
  }
  {
    ScopedEnv vendors("OCL_ICD_VENDORS", nullptr);
    ScopedEnv folder("OPENCL_VENDOR_PATH", dir.path().c_str());
    gpuocl::Vendors v = gpuocl::find_drivers();
    EXPECT_EQ(v.source, dir.path());
    EXPECT_EQ(v.drivers.size(), 4u);
  }
  {
    // No vendor folder: a machine without OpenCL drivers, not an error.
    ScopedEnv vendors("OCL_ICD_VENDORS", nullptr);
    ScopedEnv folder("OPENCL_VENDOR_PATH", dir.file("no_such_folder").c_str());
    gpuocl::Vendors v = gpuocl::find_drivers();
    EXPECT_TRUE(v.drivers.empty());
    EXPECT_TRUE(v.error.empty()) << v.error;
  }
}

TEST(GpuOclIcd, TheTestGpuDriverGivesAPlatform) {
  if (!pocl_installed()) GTEST_SKIP() << "PoCL is not installed";
  gpuocl::Driver d;
  d.library = GPUOCL_FAKE_GPU_DRIVER;
  gpuocl::load_driver(d);
  EXPECT_TRUE(d.error.empty()) << d.error;
  EXPECT_FALSE(d.platforms.empty());
}

// ---------------------------------------------------------------------------
// The same through the runtime

TEST(GpuOclVendorErrors, ReportedInTheDescriptionAndNothingClaimed) {
  test::TempDir dir;
  bad_vendor_folder(dir, false);
  ScopedEnv vendors("OCL_ICD_VENDORS", dir.path().c_str());
  auto rt = create(quiet());
  ASSERT_TRUE(rt);
  const auto all = rt->backends();
  const BackendDescription* g = find_backend(all, "GpuOcl");
  ASSERT_NE(g, nullptr) << "GpuOcl did not load";
  EXPECT_TRUE(contains(g->description, "claiming no node: no OpenCL GPU")) << g->description;
  EXPECT_TRUE(contains(g->description,
                       "driver libgpuocl_no_such_driver.so (" + dir.file("a_missing.icd") + ")"))
      << g->description;
  EXPECT_TRUE(contains(g->description, "vendor file " + dir.file("b_empty.icd") +
                                           ": the vendor file names no library"))
      << g->description;
  EXPECT_TRUE(contains(g->description,
                       "libm.so.6 (" + dir.file("d_not_a_driver.icd") + "): not an OpenCL driver"))
      << g->description;
  EXPECT_FALSE(contains(g->description, "ignored")) << g->description;
  EXPECT_TRUE(g->devices.empty());

  test::TempDir models;
  ModelOptions mo;
  mo.backends = {"GpuOcl", "CpuRef"};
  auto model = rt->load_model(small_model(models), mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"CpuRef"});
  EXPECT_TRUE(contains((*model)->describe_plan(PlanFormat::kText), "GpuOcl: no OpenCL GPU"))
      << (*model)->describe_plan(PlanFormat::kText);

  // No device to name: 'device' is refused with the count.
  RuntimeOptions o = quiet();
  o.backend_config["GpuOcl"]["device"] = "0";
  auto refused = Runtime::create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(contains(refused.status().message(), "not one of the 0 OpenCL devices"))
      << refused.status().to_string();
}

// ---------------------------------------------------------------------------
// The machine's drivers, no 'device' configured (a process of its own: once
// a driver is opened it stays)

TEST(GpuOclDefault, OpensNoCpuDriverAndStartsNoThreadThenClaimsNodesWhenConfigured) {
  ASSERT_FALSE(mapped("libpocl")) << "PoCL was loaded before the test";
  test::TempDir only_gpuocl, nothing, models;
  fs::create_symlink(BACKPLANE_GPUOCL_BACKEND_FILE,
                     only_gpuocl.file(fs::path(BACKPLANE_GPUOCL_BACKEND_FILE).filename()));
  const std::string path = small_model(models);
  const Tensor x = small_input();

  RuntimeOptions base = quiet();
  base.num_threads = 2;
  // Threads of a runtime with no dynamic backend (its pool).
  auto threads_without_backends = [&] {
    RuntimeOptions o = base;
    o.backend_path = nothing.path();
    auto rt = create(o);
    return rt ? thread_count() : 0;
  };
  const size_t baseline = threads_without_backends();
  {
    RuntimeOptions o = base;
    o.backend_path = only_gpuocl.path();
    auto rt = create(o);
    ASSERT_TRUE(rt);
    const auto all = rt->backends();
    const BackendDescription* g = find_backend(all, "GpuOcl");
    ASSERT_NE(g, nullptr);
    for (const DeviceDescription& d : g->devices)
      if (d.selected) GTEST_SKIP() << "this machine has an OpenCL GPU: " << g->description;
    EXPECT_TRUE(contains(g->description, "claiming no node")) << g->description;
    EXPECT_EQ(thread_count(), baseline);
    auto model = rt->load_model(path, ModelOptions{});
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"CpuRef"});
    run_once(**model, {{"x", x}});
    EXPECT_FALSE(mapped("libpocl"));
    EXPECT_EQ(thread_count(), baseline);
  }
  {
    // Every default backend, as `backplane run` loads them.
    auto rt = create(base);
    ASSERT_TRUE(rt);
    ASSERT_NE(find_backend(rt->backends(), "GpuOcl"), nullptr);
    auto model = rt->load_model(path, ModelOptions{});
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const std::vector<std::string> used = (*model)->backends_used();
    EXPECT_EQ(std::find(used.begin(), used.end(), "GpuOcl"), used.end());
    run_once(**model, {{"x", x}});
    EXPECT_FALSE(mapped("libpocl"));
  }

  // Configured: the CPU driver is opened (and the checks above would see
  // it), and GpuOcl claims the model.
  if (!pocl_installed()) GTEST_SKIP() << "PoCL is not installed: no CPU device to configure";
  RuntimeOptions o = base;
  o.backend_path = only_gpuocl.path();
  o.backend_config["GpuOcl"] = {{"device", "0"},
                                {"program_cache_dir", BACKPLANE_GPUOCL_TEST_CACHE}};
  const size_t before = threads_without_backends();
  auto rt = create(o);
  ASSERT_TRUE(rt);
  EXPECT_TRUE(mapped("libpocl"));
  EXPECT_GT(thread_count(), before);
  const auto all = rt->backends();
  const BackendDescription* g = find_backend(all, "GpuOcl");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(contains(g->description, "OpenCL on device 0")) << g->description;
  ASSERT_FALSE(g->devices.empty());
  EXPECT_TRUE(g->devices[0].selected);
  EXPECT_EQ(g->devices[0].kind, "cpu");
  auto model = rt->load_model(path, ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"GpuOcl"});
  auto ref = rt->load_model(path, cpuref_only());
  ASSERT_TRUE(ref.ok());
  expect_matches(run_once(**model, {{"x", x}})[0], run_once(**ref, {{"x", x}})[0],
                 "GpuOcl on the configured CPU device");
}

// ---------------------------------------------------------------------------
// A GPU (the test driver), no options (a process of its own: OCL_ICD_VENDORS
// names the test drivers' folder, GPUOCL_TEST_WITNESS the witness's file)


TEST(GpuOclFakeGpu, TakenWithNoOptionsAheadOfTheCpuAndTheLoaderNeverOpensEveryDriver) {
  if (!pocl_installed()) GTEST_SKIP() << "PoCL is not installed: the test GPU runs on it";
  const char* witness = std::getenv("GPUOCL_TEST_WITNESS");
  ASSERT_NE(witness, nullptr);
  std::error_code ec;
  fs::remove(witness, ec);
  test::TempDir models;
  const std::string path = small_model(models);
  const Tensor x = small_input();
  {
    auto rt = create(quiet());
    ASSERT_TRUE(rt);
    const auto all = rt->backends();
    const BackendDescription* g = find_backend(all, "GpuOcl");
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(contains(g->description, "OpenCL on device 0")) << g->description;
    // The witness is CPU-only by name: listed, not opened.
    EXPECT_TRUE(contains(g->description, "not loaded: ")) << g->description;
    ASSERT_EQ(g->devices.size(), 1u);
    EXPECT_EQ(g->devices[0].kind, "gpu");
    EXPECT_TRUE(g->devices[0].selected);
    // The default preference puts GpuOcl first: it takes the whole model,
    // which CpuOneDnn would otherwise.
    auto model = rt->load_model(path, ModelOptions{});
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"GpuOcl"});
    auto ref = rt->load_model(path, cpuref_only());
    ASSERT_TRUE(ref.ok());
    const Tensor want = run_once(**ref, {{"x", x}})[0];
    expect_matches(run_once(**model, {{"x", x}})[0], want, "GpuOcl on the test GPU");

    // CLBlast's GEMM: it calls the ICD loader's exports on the objects
    // GpuOcl gives it.
    RuntimeOptions o = quiet();
    o.backend_config["GpuOcl"]["gemm"] = "clblast";
    auto clblast_rt = create(o);
    ASSERT_TRUE(clblast_rt);
    auto with_clblast = clblast_rt->load_model(path, ModelOptions{});
    ASSERT_TRUE(with_clblast.ok()) << with_clblast.status().to_string();
    const int64_t gemms = counter("clblast_gemms");
    expect_matches(run_once(**with_clblast, {{"x", x}})[0], want, "GpuOcl with CLBlast");
    EXPECT_GT(counter("clblast_gemms"), gemms);
  }
  EXPECT_FALSE(fs::exists(witness)) << "the ICD loader opened every driver";

  // The witness works: the loader's clGetPlatformIDs opens every driver of
  // the folder, the witness among them.
  void* loader = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(loader, nullptr) << dlerror();
  using GetPlatforms = cl_int (*)(cl_uint, cl_platform_id*, cl_uint*);
  auto get = reinterpret_cast<GetPlatforms>(dlsym(loader, "clGetPlatformIDs"));
  ASSERT_NE(get, nullptr);
  cl_uint n = 0;
  get(0, nullptr, &n);
  EXPECT_TRUE(fs::exists(witness)) << "the witness was not opened by the loader either";
}

// ---------------------------------------------------------------------------
// A CPU device of a driver not known as CPU-only (a process of its own:
// OCL_ICD_VENDORS names the test CPU driver's folder)

TEST(GpuOclFakeCpu, ListedButNotTakenUntilDeviceNamesIt) {
  if (!pocl_installed()) GTEST_SKIP() << "PoCL is not installed: the test driver runs on it";
  test::TempDir models;
  const std::string path = small_model(models);
  const Tensor x = small_input();
  {
    auto rt = create(quiet());
    ASSERT_TRUE(rt);
    const auto all = rt->backends();
    const BackendDescription* g = find_backend(all, "GpuOcl");
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(contains(g->description,
                         "claiming no node: no OpenCL GPU; a CPU device is used "
                         "only when the 'device' key names it"))
        << g->description;
    ASSERT_EQ(g->devices.size(), 1u);
    EXPECT_EQ(g->devices[0].kind, "cpu");
    EXPECT_FALSE(g->devices[0].selected);
    auto model = rt->load_model(path, ModelOptions{});
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const std::vector<std::string> used = (*model)->backends_used();
    EXPECT_EQ(std::find(used.begin(), used.end(), "GpuOcl"), used.end());
  }
  RuntimeOptions o = quiet();
  o.backend_config["GpuOcl"]["device"] = "0";
  auto rt = create(o);
  ASSERT_TRUE(rt);
  const auto all = rt->backends();
  const BackendDescription* g = find_backend(all, "GpuOcl");
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->devices.size(), 1u);
  EXPECT_TRUE(g->devices[0].selected);
  ModelOptions mo;
  mo.backends = {"GpuOcl"};
  auto model = rt->load_model(path, mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto ref = rt->load_model(path, cpuref_only());
  ASSERT_TRUE(ref.ok());
  expect_matches(run_once(**model, {{"x", x}})[0], run_once(**ref, {{"x", x}})[0],
                 "GpuOcl on the named CPU device");
}

}  // namespace
}  // namespace backplane::e2e
