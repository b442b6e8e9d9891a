// onednn_models_test.cpp — the real models on CpuOneDnn against CpuRef.
//
// CpuOneDnn is loaded as users get it (Backplane_CpuOneDnn_backend.so from
// this build's backend folder) and chosen by the default preference. For each
// model from scripts/gen_models.py: the nodes CpuOneDnn takes, the output
// against CpuRef's on the same input (the numerics policy, docs/numerics.md) at 1 and 2
// threads, and repeated and concurrent runs.
#include "support/e2e_util.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace backplane::e2e {
namespace {

struct OneDnnCase {
  const char* name;
  const char* input;
  // Ops CpuOneDnn leaves to CpuRef in this model (everything else must be its).
  std::set<std::string> fallback_ops;
};

std::string case_name(const testing::TestParamInfo<OneDnnCase>& info) { return info.param.name; }
void PrintTo(const OneDnnCase& c, std::ostream* os) { *os << c.name; }

Tensor run_once(Model& model, const std::string& input_name, const Tensor& input) {
  std::vector<Tensor> out = e2e::run_once(model, {{input_name, input}});
  return out.empty() ? Tensor() : out[0];
}

class OneDnnModels : public testing::TestWithParam<OneDnnCase> {};

TEST_P(OneDnnModels, DefaultPreferencePicksCpuOneDnnAndMatchesCpuRef) {
  const OneDnnCase& c = GetParam();
  Tensor input = read_npy(models_dir() + "/" + c.name + ".input.npy");
  ASSERT_FALSE(input.empty());
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    auto rt = onednn_runtime(threads);
    ASSERT_TRUE(rt);
    auto fast = rt->load_model(model_path(c.name));  // default preference
    ASSERT_TRUE(fast.ok()) << fast.status().to_string();
    auto ref = rt->load_model(model_path(c.name), cpuref_only());
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();

    // CpuOneDnn is preferred; only the ops it lacks fall back to CpuRef.
    const std::vector<std::string> used = (*fast)->backends_used();
    if (c.fallback_ops.empty()) EXPECT_EQ(used, std::vector<std::string>{"CpuOneDnn"});
    else EXPECT_NE(std::find(used.begin(), used.end(), "CpuOneDnn"), used.end());
    const std::string plan = (*fast)->describe_plan(PlanFormat::kText);
    for (const auto& p : (*fast)->partitions())
      if (p.backend != "CpuOneDnn")
        for (const std::string& node : p.nodes) {
          bool expected = false;
          for (const std::string& op : c.fallback_ops)
            expected = expected || contains(plan, node + " (" + op + ")");
          EXPECT_TRUE(expected) << node << " ran on " << p.backend << "\n" << plan;
        }

    Tensor y = run_once(**fast, c.input, input);
    Tensor want = run_once(**ref, c.input, input);
    ASSERT_FALSE(y.empty());
    ASSERT_FALSE(want.empty());
    ASSERT_GT(max_abs(want), 0.0);
    expect_matches(y, want, std::string(c.name) + ": CpuOneDnn against CpuRef");

    // And against PyTorch's own output.
    Tensor expected = read_npy(models_dir() + "/" + c.name + ".expected.npy");
    expect_matches(y, expected, std::string(c.name) + ": CpuOneDnn against PyTorch");
  }
}

TEST_P(OneDnnModels, RepeatedAndConcurrentRunsAgree) {
  const OneDnnCase& c = GetParam();
  Tensor input = read_npy(models_dir() + "/" + c.name + ".input.npy");
  auto rt = onednn_runtime(1);
  ASSERT_TRUE(rt);
  auto model = rt->load_model(model_path(c.name));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->set_input(c.input, input).ok());
  ASSERT_TRUE((*session)->run().ok());
  Tensor first = (*session)->output(0).clone();
  ASSERT_TRUE((*session)->run().ok());
  EXPECT_TRUE(bitwise_equal((*session)->output(0), first)) << "a second run of one session differs";

  // Two sessions (two execution contexts) on two threads at once.
  std::vector<Tensor> results(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      auto s = (*model)->create_session();
      if (!s.ok()) return;
      for (int i = 0; i < 3; ++i) {
        if (!(*s)->set_input(c.input, input).ok() || !(*s)->run().ok()) return;
      }
      results[t] = (*s)->output(0).clone();
    });
  for (auto& th : threads) th.join();
  for (const Tensor& r : results) {
    ASSERT_FALSE(r.empty());
    EXPECT_TRUE(bitwise_equal(r, first)) << "a concurrent run differs";
  }
}

// The CPU time of the process's other threads: the process's less this
// thread's. (Not a sum over /proc/self/task: a thread that exits during the
// measurement, a pool's idle thread say, would take all its time with it.)
int64_t other_threads_cpu_ns() {
  timespec process{}, thread{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &process);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &thread);
  return (int64_t(process.tv_sec) - int64_t(thread.tv_sec)) * 1000000000 +
         (int64_t(process.tv_nsec) - int64_t(thread.tv_nsec));
}
int64_t this_thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// A partition compiled for 2 threads runs on an OpenMP team of 2: the
// other thread does a good part of the work the calling thread does alone
// at 1 thread, and the result is CpuRef's.
TEST_P(OneDnnModels, TwoThreadsShareTheWork) {
  const OneDnnCase& c = GetParam();
  Tensor input = read_npy(models_dir() + "/" + c.name + ".input.npy");
  ASSERT_FALSE(input.empty());
  auto ref_rt = onednn_runtime(1);
  ASSERT_TRUE(ref_rt);
  auto ref = ref_rt->load_model(model_path(c.name), cpuref_only());
  ASSERT_TRUE(ref.ok());
  const Tensor want = run_once(**ref, c.input, input);
  // The calling thread's and the other threads' CPU time over 3 runs of a
  // session (after one warm run: the OpenMP team exists).
  auto measure = [&](Session& session, int64_t& self, int64_t& others) {
    // Past the other threads' spin after the last run.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int64_t others0 = other_threads_cpu_ns(), self0 = this_thread_cpu_ns();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(session.run().ok());
    self = this_thread_cpu_ns() - self0;
    // The kernel brings a running thread's CPU time up to date at its ticks
    // and when it stops running: read once the workers' spin is over.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    others = other_threads_cpu_ns() - others0;
  };
  int64_t alone = 0;  // the work: the least of 3 measurements at 1 thread
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    auto rt = onednn_runtime(threads);
    ASSERT_TRUE(rt);
    auto fast = rt->load_model(model_path(c.name));
    ASSERT_TRUE(fast.ok()) << fast.status().to_string();
    auto session = (*fast)->create_session();
    ASSERT_TRUE(session.ok());
    ASSERT_TRUE((*session)->set_input(c.input, input).ok());
    ASSERT_TRUE((*session)->run().ok());
    int64_t self = 0, others = 0;
    // Beside other tests (make test -j2, sanitizer builds) a worker can be
    // kept off the CPUs for a whole measurement: of up to 5, one must show
    // the share.
    for (int attempt = 0; attempt < (threads == 1 ? 3 : 5); ++attempt) {
      measure(**session, self, others);
      if (threads == 1) {
        alone = attempt == 0 ? self : std::min(alone, self);
        continue;
      }
      if (!c.fallback_ops.empty() || double(others) > 0.3 * double(alone)) break;
    }
    expect_matches((*session)->output(0), want, c.name);
    if (threads == 2 && c.fallback_ops.empty()) {
      EXPECT_GT(double(others), 0.3 * double(alone))
          << "other threads: " << others / 1000 << " us, caller " << self / 1000
          << " us, the caller alone at 1 thread " << alone / 1000 << " us";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(E2E, OneDnnModels,
                         testing::Values(OneDnnCase{"resnet18", "input", {}},
                                         OneDnnCase{"mobilenet_v2", "input", {}},
                                         OneDnnCase{"squeezenet1_1", "input", {}},
                                         OneDnnCase{"transformer", "input_ids", {"Gather"}},
                                         OneDnnCase{"tiny_cnn", "input", {"Pad"}},
                                         // Einsum, rewritten at import: all on CpuOneDnn
                                         OneDnnCase{"block_attention", "input", {}}),
                         case_name);

// A profiled run (docs/profiling.md): CpuOneDnn reports each primitive under
// its oneDNN kind, labelled with its node; they lie within the partition and
// account for most of it; the outputs are those of an unprofiled run.
TEST(OneDnnProfile, PrimitivesAreReportedByKind) {
  auto rt = onednn_runtime(2);
  ASSERT_TRUE(rt);
  auto model = rt->load_model(model_path("resnet18"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const Tensor input = read_npy(models_dir() + "/resnet18.input.npy");
  const Tensor want = run_once(**model, "input", input);
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->set_input("input", input).ok());
  ASSERT_TRUE((*session)->run().ok());  // warm
  test::TempDir dir;
  // The gaps between primitives are the partition's own bookkeeping, unless
  // the machine takes a thread away mid-run (tests run side by side): the
  // best of a few profiled runs is the one that shows the partition's own.
  double best = 0;
  std::string worst_summary;
  for (int attempt = 0; attempt < 3 && best < 0.9; ++attempt) {
    ASSERT_TRUE((*session)->start_profiling(dir.file("trace.json")).ok());
    ASSERT_TRUE((*session)->run().ok());
    EXPECT_TRUE(bitwise_equal((*session)->output(0), want));
    auto summary = (*session)->end_profiling();
    ASSERT_TRUE(summary.ok()) << summary.status().to_string();
    const auto& ops = summary->by_op_type;
    ASSERT_FALSE(ops.empty());
    EXPECT_EQ(ops.front().name, "convolution") << summary->to_string();  // resnet18 is convolutions
    double nodes_ms = 0, partition_ms = 0;
    for (const auto& row : ops) {
      EXPECT_EQ(row.name.find("not timed"), std::string::npos) << summary->to_string();
      nodes_ms += row.ms;
    }
    for (const auto& row : summary->by_backend)
      if (row.name == "CpuOneDnn") partition_ms = row.ms;
    ASSERT_GT(partition_ms, 0) << summary->to_string();
    EXPECT_LE(nodes_ms, partition_ms * 1.0001);
    best = std::max(best, nodes_ms / partition_ms);
    if (worst_summary.empty()) worst_summary = summary->to_string();
  }
  EXPECT_GE(best, 0.9) << worst_summary;
}

// A one-channel map after a convolution (a segmentation network's side
// output, upsampled), blocked as a network of many convolutions has its
// tensors, is mostly padding; its Sigmoid, which
// oneDNN has only a reference kernel for there, runs on the plain layout on
// CpuOneDnn instead of falling to CpuRef and cutting the plan.
TEST(OneDnnLayouts, ASigmoidOfAOneChannelConvolutionStaysOnCpuOneDnn) {
  test::TempDir dir;
  test::ModelBuilder b(13);
  b.input("x", {1, 64, 32, 32});
  b.random_weight("w0", {64, 64, 3, 3}, -0.05f, 0.05f);
  b.random_weight("w", {1, 64, 3, 3}, -0.2f, 0.2f);
  b.random_weight("bias", {1});
  test::set_ints(b.node("Conv", {"x", "w0"}, {"h"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"h"}, {"hr"});
  test::set_ints(b.node("Conv", {"hr", "w", "bias"}, {"c"}), "pads", {1, 1, 1, 1});
  b.init_f32("scales", {4}, {1.f, 1.f, 8.f, 8.f});
  test::set_string(b.node("Resize", {"c", "", "scales"}, {"r"}), "mode", "linear");
  b.node("Sigmoid", {"r"}, {"y"});
  b.output("c").output("y");  // c read outside: the Sigmoid stays apart
  const std::string path = b.save(dir);
  auto rt = onednn_runtime(1, {{"layout", "blocked"}});
  ASSERT_TRUE(rt);
  auto fast = rt->load_model(path);
  ASSERT_TRUE(fast.ok()) << fast.status().to_string();
  EXPECT_EQ((*fast)->backends_used(), std::vector<std::string>{"CpuOneDnn"})
      << (*fast)->describe_plan(PlanFormat::kText);
  auto ref = rt->load_model(path, cpuref_only());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  Tensor x(DType::kFloat32, {1, 64, 32, 32});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data_as<float>()[i] = static_cast<float>(i % 13) / 6.f - 1.f;
  const std::vector<Tensor> got = e2e::run_once(**fast, {{"x", x}});
  const std::vector<Tensor> want = e2e::run_once(**ref, {{"x", x}});
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(want.size(), 2u);
  expect_matches(got[0], want[0], "c");
  expect_matches(got[1], want[1], "y");
}

}  // namespace
}  // namespace backplane::e2e
