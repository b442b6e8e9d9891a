// Session::feed: an output fed back as the next run's input stays where it
// was written. On MockAcc (a test accelerator with its own device memory)
// the recurrent state never goes through the host; on the host (CpuRef) it
// is never copied. Results equal running the same steps with the state
// copied in by set_input.
//
// Model: state_in[1,8], x[1,8] -> state_out = Relu(state_in + x) ->
//        y = MatMul(state_out, W[8,4])   (every node MockAcc runs)
#include "support/e2e_util.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <random>
#include <string>
#include <vector>

namespace backplane {
namespace {

namespace bt = backplane::test;
const std::string kAccelDir = BACKPLANE_TESTING_ACCEL_DIR;

uint64_t counter(const std::string& key) {
  std::string path = kAccelDir + "/Backplane_MockAcc_backend.so";
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return 0;
  auto fn = reinterpret_cast<uint64_t (*)(const char*)>(::dlsym(h, "MockAcc_Counter"));
  uint64_t v = fn ? fn(key.c_str()) : 0;
  ::dlclose(h);
  return v;
}

std::string write_model(const bt::TempDir& dir) {
  bt::ModelBuilder b;
  b.input("state_in", {1, 8});
  b.input("x", {1, 8});
  b.random_weight("W", {8, 4});
  b.node("Add", {"state_in", "x"}, {"sum"}, "add");
  b.node("Relu", {"sum"}, {"state_out"}, "relu");
  b.node("MatMul", {"state_out", "W"}, {"y"}, "matmul");
  b.output("state_out", {1, 8});
  b.output("y", {1, 4});
  return b.save(dir);
}

Tensor step_input(int step) {
  Tensor x(DType::kFloat32, {1, 8});
  std::mt19937 rng(static_cast<uint32_t>(step));
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int i = 0; i < 8; ++i) x.data_as<float>()[i] = d(rng);
  return x;
}

// The y of each step, the state copied in by set_input (CpuRef).
std::vector<std::vector<float>> expected_ys(const std::string& path, int steps) {
  auto rt = e2e::make_runtime();
  auto model = rt->load_model(path, e2e::cpuref_only());
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  auto s = (*model)->create_session();
  EXPECT_TRUE(s.ok());
  Tensor state(DType::kFloat32, {1, 8});
  std::vector<std::vector<float>> ys;
  for (int k = 0; k < steps; ++k) {
    EXPECT_TRUE((*s)->set_input("state_in", state).ok());
    EXPECT_TRUE((*s)->set_input("x", step_input(k)).ok());
    EXPECT_TRUE((*s)->run().ok());
    state = (*s)->get_output("state_out")->clone();
    const Tensor& y = (*s)->output(1);
    ys.emplace_back(y.data_as<float>(), y.data_as<float>() + 4);
  }
  return ys;
}

void expect_equal(const Tensor& got, const std::vector<float>& want, int step) {
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.data_as<float>()[i], want[i], 1e-5f) << "step " << step << " element " << i;
}

TEST(Feed, DeviceStateStaysOnTheDevice) {
  bt::TempDir dir;
  const std::string path = write_model(dir);
  constexpr int kSteps = 6;
  auto want = expected_ys(path, kSteps);
  auto rt = e2e::make_runtime(kAccelDir);
  ASSERT_TRUE(rt);
  ModelOptions mo;
  mo.backends = {"MockAcc", "CpuRef"};
  auto model = rt->load_model(path, mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_EQ((*model)->backends_used(), std::vector<std::string>{"MockAcc"});
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  Session& s = **session;
  ASSERT_TRUE(s.set_input("state_in", Tensor(DType::kFloat32, {1, 8})).ok());
  ASSERT_TRUE(s.feed("state_out", "state_in").ok());
  for (int k = 0; k < kSteps; ++k) {
    const uint64_t to = counter("copies_to_device"), from = counter("copies_from_device");
    ASSERT_TRUE(s.set_input("x", step_input(k)).ok());
    Status st = s.run();
    ASSERT_TRUE(st.ok()) << st.to_string();
    expect_equal(s.output(1), want[k], k);
    // The first run copies the state in; later runs only x. Out: only y.
    EXPECT_EQ(counter("copies_to_device") - to, k == 0 ? 2u : 1u) << "step " << k;
    EXPECT_EQ(counter("copies_from_device") - from, 1u) << "step " << k;
  }
  // Asking for the fed output copies it then, and it is right.
  const uint64_t from = counter("copies_from_device");
  auto state = s.get_output("state_out");
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(counter("copies_from_device") - from, 1u);
  for (int i = 0; i < 8; ++i) EXPECT_GE(state->data_as<float>()[i], 0.0f);  // a Relu's
  // Setting the input again ends the feed: the state goes in from the host.
  ASSERT_TRUE(s.set_input("state_in", Tensor(DType::kFloat32, {1, 8})).ok());
  ASSERT_TRUE(s.set_input("x", step_input(0)).ok());
  const uint64_t to = counter("copies_to_device");
  ASSERT_TRUE(s.run().ok());
  EXPECT_EQ(counter("copies_to_device") - to, 2u);
  expect_equal(s.output(1), want[0], 0);
}

TEST(Feed, HostStateIsNeverCopied) {
  bt::TempDir dir;
  const std::string path = write_model(dir);
  constexpr int kSteps = 5;
  auto want = expected_ys(path, kSteps);
  auto rt = e2e::make_runtime();
  auto model = rt->load_model(path, e2e::cpuref_only());
  ASSERT_TRUE(model.ok());
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  Session& s = **session;
  ASSERT_TRUE(s.set_input("state_in", Tensor(DType::kFloat32, {1, 8})).ok());
  ASSERT_TRUE(s.feed("state_out", "state_in").ok());
  const void* previous = nullptr;
  for (int k = 0; k < kSteps; ++k) {
    ASSERT_TRUE(s.set_input("x", step_input(k)).ok());
    ASSERT_TRUE(s.run().ok());
    expect_equal(s.output(1), want[k], k);
    // Written into one of two buffers taking turns, never the same twice running.
    EXPECT_NE(s.output(0).data(), previous);
    previous = s.output(0).data();
  }
  EXPECT_FALSE(s.feed("nope", "state_in").ok());
  EXPECT_FALSE(s.feed("state_out", "nope").ok());
}

}  // namespace
}  // namespace backplane
