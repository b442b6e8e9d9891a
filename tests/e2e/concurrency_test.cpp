// concurrency_test.cpp — many threads, each with its own Session of one Model.
//
// A serial pass computes the output for every (thread, run) input; then 8
// threads start together, each creates its own Session and runs its inputs
// (kRuns); every output must be bitwise identical to the serial one.
#include "support/e2e_util.hpp"

#include <atomic>
#include <cstdint>
#include <latch>
#include <random>
#include <thread>
#include <vector>

namespace backplane::e2e {
namespace {

constexpr int kThreads = 8;

// Runs per thread. Under a sanitizer every run costs 5-15 times as much, and
// a race shows on its first overlap: fewer runs keep the same 8-way overlap.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kRuns = 16;
#else
constexpr int kRuns = 100;
#endif

// Input for (thread t, run r): the model's stored input, perturbed
// deterministically so that every run sees different data.
Tensor make_input(const Tensor& base, int t, int r) {
  Tensor x = base.clone();
  std::mt19937 gen(static_cast<uint32_t>(1000 * t + r + 1));
  if (x.dtype() == DType::kFloat32) {
    std::normal_distribution<float> noise(0.0f, 0.5f);
    float* p = x.data_as<float>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] += noise(gen);
  } else {  // token ids in [0, 1000)
    std::uniform_int_distribution<int64_t> tok(0, 999);
    int64_t* p = x.data_as<int64_t>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = tok(gen);
  }
  return x;
}

void run_concurrently(const std::string& name, const std::string& input_name, int runs) {
  auto rt = make_runtime();
  ASSERT_TRUE(rt);
  auto loaded = rt->load_model(model_path(name), cpuref_only());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  std::shared_ptr<Model> model = loaded.value();
  Tensor base = read_npy(models_dir() + "/" + name + ".input.npy");
  ASSERT_FALSE(base.empty());

  std::vector<std::vector<Tensor>> inputs(kThreads), expected(kThreads);
  {
    auto session = model->create_session();
    ASSERT_TRUE(session.ok()) << session.status().to_string();
    for (int t = 0; t < kThreads; ++t) {
      for (int r = 0; r < runs; ++r) {
        inputs[t].push_back(make_input(base, t, r));
        auto st = (*session)->set_input(input_name, inputs[t].back());
        ASSERT_TRUE(st.ok()) << st.to_string();
        st = (*session)->run();
        ASSERT_TRUE(st.ok()) << st.to_string();
        expected[t].push_back((*session)->output(0).clone());
      }
    }
  }
  // The inputs must matter, or bitwise agreement proves little.
  ASSERT_FALSE(bitwise_equal(expected[0][0], expected[1][0]));
  ASSERT_FALSE(bitwise_equal(expected[0][0], expected[0][1]));

  std::latch start(kThreads);
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::string> first_error(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto session = model->create_session();
      start.arrive_and_wait();
      if (!session.ok()) {
        ++errors;
        first_error[t] = "create_session: " + session.status().to_string();
        return;
      }
      for (int r = 0; r < runs; ++r) {
        auto st = (*session)->set_input(input_name, inputs[t][r]);
        if (st.ok()) st = (*session)->run();
        if (!st.ok()) {
          if (errors++ == 0 || first_error[t].empty()) first_error[t] = st.to_string();
          continue;
        }
        if (!bitwise_equal((*session)->output(0), expected[t][r])) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    EXPECT_TRUE(first_error[t].empty()) << "thread " << t << ": " << first_error[t];
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0) << "of " << kThreads * runs << " concurrent runs";
}

TEST(Concurrency, TinyCnnEightSessionsBitwiseEqualToSerial) {
  run_concurrently("tiny_cnn", "input", kRuns);
}

// Another op mix (Gather, MatMul, Softmax, Erf, LayerNorm math, int64 input).
TEST(Concurrency, TransformerEightSessionsBitwiseEqualToSerial) {
  run_concurrently("transformer", "input_ids", kRuns);
}

}  // namespace
}  // namespace backplane::e2e
