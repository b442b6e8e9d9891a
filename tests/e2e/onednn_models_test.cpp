// onednn_models_test.cpp — the real models on CpuOneDnn against CpuRef.
//
// CpuOneDnn is loaded as users get it (Backplane_CpuOneDnn_backend.so from
// this build's backend folder) and chosen by the default preference. For each
// model from scripts/gen_models.py: the nodes CpuOneDnn takes, the output
// against CpuRef's on the same input (the numerics policy, docs/numerics.md) at 1 and 2
// threads, and repeated and concurrent runs.
#include "support/e2e_util.hpp"

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
  // A run in bands gives the same bits as a whole one: true for plans in
  // channels-last, whose bands cut rows; a plan of blocked convolutions
  // (depthwise ones: MobileNetV2; SqueezeNet's, blocked for its Winograd
  // 3x3 ones with its Concats in place) cuts its 1x1 convolutions by output
  // channels, each band a primitive that may block its reduction otherwise.
  bool bands_same_bits = true;
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

// On a busy machine CpuOneDnn caps its threads at the CPUs other processes
// leave free (backends/onednn/cores.hpp; BACKPLANE_ONEDNN_FREE_CORES fixes
// that count); with none free it runs the whole plan on all its threads,
// its steps in bands that each of its threads takes as it can
// (backends/onednn/bands.hpp), or on one thread, whichever it measured
// fastest.
//  - Capped (one CPU free): a partition compiled for 2 threads runs on the
//    calling thread alone (no other thread of the process gets CPU time
//    worth speaking of, though the primitives open their regions for 2).
//  - Capped, in bands: the other thread takes a good share of the pieces.
//  - Not capped: the OpenMP team shares the work.
// Each gives CpuRef's result, and the same bits as the others.
TEST_P(OneDnnModels, CappedRunsOnFewerThreadsOrInBandsAndMatchCpuRef) {
  const OneDnnCase& c = GetParam();
  Tensor input = read_npy(models_dir() + "/" + c.name + ".input.npy");
  ASSERT_FALSE(input.empty());
  auto rt = onednn_runtime(2);
  ASSERT_TRUE(rt);
  auto fast = rt->load_model(model_path(c.name));
  ASSERT_TRUE(fast.ok()) << fast.status().to_string();
  auto ref = rt->load_model(model_path(c.name), cpuref_only());
  ASSERT_TRUE(ref.ok());
  const Tensor want = run_once(**ref, c.input, input);
  auto session = (*fast)->create_session();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->set_input(c.input, input).ok());
  ASSERT_TRUE((*session)->run().ok());  // warm: the OpenMP team exists
  enum Mode { kCapped, kBands, kFull };
  const char* names[] = {"capped at 1 thread", "capped, in bands", "2 threads"};
  Tensor outputs[3];
  int64_t capped_self = 0;  // the calling thread's CPU time for the capped runs: all the work
  for (const Mode mode : {kCapped, kBands, kFull}) {
    SCOPED_TRACE(names[mode]);
    // Fixed, so that the make test's own load (other tests beside this one)
    // does not cap the uncapped runs.
    // (1: one thread; 0: every CPU taken, bands told on rather than
    // measured.)
    ASSERT_EQ(setenv("BACKPLANE_ONEDNN_FREE_CORES",
                     mode == kFull     ? "2"
                     : mode == kCapped ? "1"
                                       : "0",
                     1),
              0);
    ASSERT_EQ(setenv("BACKPLANE_ONEDNN_BANDS",
                     mode == kCapped  ? "0"
                     : mode == kBands ? "1"
                                      : "",
                     1),
              0);
    if (mode == kBands) {
      ASSERT_TRUE((*session)->run().ok());  // the pieces are made
    }
    // The CPU time of the other threads and of this one over 3 runs.
    auto measure = [&](int64_t& self, int64_t& others) {
      // Past the other threads' spin after the warm run.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const int64_t others0 = other_threads_cpu_ns(), self0 = this_thread_cpu_ns();
      for (int i = 0; i < 3; ++i) ASSERT_TRUE((*session)->run().ok());
      self = this_thread_cpu_ns() - self0;
      // The kernel brings a running thread's CPU time up to date at its ticks
      // (4 ms apart here) and when it stops running: read while a worker
      // still spins after the last region, its time was short by up to a
      // tick, a run's worth, and the check below failed now and then. Once
      // its spin is over and it sleeps, its time is exact.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      others = other_threads_cpu_ns() - others0;
    };
    // Convolution models: the work is split between the two threads, so the
    // other one does a good part of what the caller did alone. (Not against
    // the caller's own time here: beside other tests its worker is
    // descheduled now and then, and the caller's spin at the barrier counts
    // as CPU time. In bands a descheduled helper takes fewer pieces, as it
    // should: a lower bar.) Beside other tests (make test -j2, sanitizer
    // builds) a helper can be kept off the CPUs for a whole measurement: up
    // to 5 of them, one must show the share.
    const double share = mode == kBands ? 0.15 : 0.3;
    const bool shared = mode != kCapped && c.fallback_ops.empty();
    int64_t self = 0, others = 0;
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (mode == kCapped) {
        // The bar of the shared modes is a share of this: the least CPU time
        // of 3 measurements, i.e. the work itself. Beside other processes
        // (CI's sanitizer run beside a build) one measurement took 166 ms of
        // CPU for ResNet-18's 3 runs where both threads of the full runs took
        // 73 between them, and the full run's fair share then missed a bar
        // twice its size.
        int64_t s = 0, o = 0;
        measure(s, o);
        if (attempt == 0 || s < self) {
          self = s;
          others = o;
        }
        if (attempt == 2) break;
        continue;
      }
      measure(self, others);
      if (!shared || double(others) > share * double(capped_self)) break;
    }
    unsetenv("BACKPLANE_ONEDNN_FREE_CORES");
    unsetenv("BACKPLANE_ONEDNN_BANDS");
    const Tensor y = (*session)->output(0).clone();  // the session overwrites its own
    outputs[mode] = y;
    ASSERT_EQ(y.shape(), want.shape());
    expect_matches(y, want, c.name);
    if (mode == kCapped) {
      capped_self = self;
      EXPECT_LT(double(others), 0.1 * double(self))
          << "other threads: " << others / 1000 << " us, caller " << self / 1000 << " us";
    } else if (shared) {
      EXPECT_GT(double(others), share * double(capped_self))
          << "other threads: " << others / 1000 << " us, caller " << self / 1000
          << " us, the caller alone when capped " << capped_self / 1000 << " us";
    }
  }
  // On these models the forward primitives split whole output blocks among
  // the team, so a capped run gives the same bits; the bit-for-bit tests of
  // artifacts and concurrent sessions, which make test runs beside other
  // tests (a load that may cap them), rely on it and keep out of bands
  // (backplane_same_bits in tests/CMakeLists.txt). A band computes each
  // output element as the whole step does where it cuts rows.
  EXPECT_TRUE(bitwise_equal(outputs[kFull], outputs[kCapped]))
      << c.name << ": a capped run differs from a full one in the last bits";
  if (c.bands_same_bits) {  // (else within CpuRef's tolerance, checked above)
    EXPECT_TRUE(bitwise_equal(outputs[kFull], outputs[kBands]))
        << c.name << ": a run in bands differs from a full one in the last bits";
  }
  // Every CPU taken, by default: the plan tries the whole plan, one thread,
  // then bands (4 runs each), and keeps the fastest (SaturatedWay in
  // cores.hpp); each of the 16 runs gives the bits of one of the ways.
  ASSERT_EQ(setenv("BACKPLANE_ONEDNN_FREE_CORES", "0", 1), 0);
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE((*session)->run().ok());
    const Tensor& y = (*session)->output(0);
    EXPECT_TRUE(bitwise_equal(outputs[kFull], y) || bitwise_equal(outputs[kCapped], y) ||
                bitwise_equal(outputs[kBands], y))
        << c.name << ": saturated run " << i << " differs from a full, a capped and a banded one";
  }
  unsetenv("BACKPLANE_ONEDNN_FREE_CORES");
}

INSTANTIATE_TEST_SUITE_P(E2E, OneDnnModels,
                         testing::Values(OneDnnCase{"resnet18", "input", {}},
                                         OneDnnCase{"mobilenet_v2", "input", {}, false},
                                         OneDnnCase{"squeezenet1_1", "input", {}, false},
                                         // Its MatMuls cut into bands of rows: oneDNN's
                                         // GEMM blocks the reduction by the rows it is
                                         // given on some CPUs (AVX2), not on others.
                                         OneDnnCase{"transformer", "input_ids", {"Gather"}, false},
                                         OneDnnCase{"tiny_cnn", "input", {"Pad"}}),
                         case_name);

}  // namespace
}  // namespace backplane::e2e
