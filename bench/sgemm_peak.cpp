// sgemm_peak.cpp — the machine's float32 matrix-multiply rate at a thread
// count, as oneDNN's sgemm reaches it: the yardstick of `make bench`'s
// "share of peak" column (bench/run_bench.py).
//
// Usage: backplane_sgemm_peak THREADS [SECONDS]
// Prints one JSON line: {"threads": T, "gflops": G, "size": N} for the best of
// square sizes 256..2048, each timed for about SECONDS / 4 after one untimed
// call. Square sgemm of this size is the most favourable shape there is for
// the machine's vector units and caches, so a model's GFLOP/s divided by this
// says how far the model is from the physical limit.
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// GFLOP/s of C = A * B at n x n x n, repeated for about `budget` seconds.
double rate(dnnl_dim_t n, double budget) {
  std::vector<float> a(static_cast<size_t>(n * n)), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 17) * 0.01f;
    b[i] = static_cast<float>(i % 13) * 0.02f;
  }
  auto call = [&] {
    if (dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n) !=
        dnnl_success) {
      std::fprintf(stderr, "sgemm_peak: dnnl_sgemm failed at n=%ld\n", static_cast<long>(n));
      std::exit(1);
    }
  };
  call();  // untimed: first-call set-up, pages touched
  int reps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  do {
    call();
    ++reps;
  } while (seconds_since(t0) < budget);
  return 2.0 * static_cast<double>(n) * n * n * reps / seconds_since(t0) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s THREADS [SECONDS]\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
  if (threads < 1 || seconds <= 0) {
    std::fprintf(stderr, "sgemm_peak: THREADS must be >= 1 and SECONDS > 0\n");
    return 2;
  }
  omp_set_num_threads(threads);
  double best = 0;
  dnnl_dim_t best_n = 0;
  for (dnnl_dim_t n : {256, 512, 1024, 2048}) {
    const double g = rate(n, seconds / 4);
    if (g > best) best = g, best_n = n;
  }
  std::printf("{\"threads\": %d, \"gflops\": %.2f, \"size\": %ld}\n", threads, best,
              static_cast<long>(best_n));
  return 0;
}
