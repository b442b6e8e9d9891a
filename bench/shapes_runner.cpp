// shapes_runner — the Backplane side of the dynamic-shape benchmark
// (bench/shapes_bench.py), the same measurements as bench/ort_shapes.js with
// the same options and one JSON object of the same layout on stdout.
//
//   backplane_shapes_bench THREADS [--decoder PATH] [--encoder PATH] [--cache-lengths LIST]
//       [--step-runs N] [--gen-tokens N] [--gen-runs N] [--prompt-token ID]
//       [--encoder-shapes LIST] [--encoder-rounds N] [--encoder-vocab N] [--warmup N]
//       [--save-dir DIR] [--max-specializations N]
//
// Backplane as an application uses it: the public API, the default backend
// preference (CpuOneDnn from its plugin), RuntimeOptions::num_threads =
// THREADS. The decoder's cache goes between runs as examples/generate does
// it: fed back where it was written (Session::feed). Each model is loaded
// once; every shape runs in one session, with default model options unless
// --max-specializations says otherwise.
#include "npy.hpp"

#include <backplane/runtime.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace bp = backplane;
using json = nlohmann::json;

namespace {

struct Options {
  int threads = 1;
  std::string decoder, encoder, save_dir;
  std::vector<int64_t> cache_lengths = {1, 16, 64, 256};
  int step_runs = 50, gen_tokens = 256, gen_runs = 5, warmup = 5, encoder_rounds = 20;
  int64_t prompt_token = 1, encoder_vocab = 1000;
  size_t max_specializations = 0;  // 0: ModelOptions' default
  std::vector<std::pair<int64_t, int64_t>> encoder_shapes = {
      {1, 8}, {1, 32}, {1, 64}, {1, 128}, {1, 256}, {2, 16}, {2, 100}, {4, 32}, {4, 64}, {8, 24}};
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "shapes_runner: %s\n", message.c_str());
  std::exit(1);
}

template <class T>
T check(bp::Result<T> r, const std::string& what) {
  if (!r.ok()) die(what + ": " + r.status().message());
  return std::move(r).value();
}
void check(const bp::Status& s, const std::string& what) {
  if (!s.ok()) die(what + ": " + s.message());
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t at = s.find(sep, start);
    std::string item = s.substr(start, at == std::string::npos ? std::string::npos : at - start);
    if (!item.empty()) out.push_back(item);
    if (at == std::string::npos) break;
    start = at + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) die("usage: backplane_shapes_bench THREADS [options] (see the source's header)");
  o.threads = std::atoi(argv[1]);
  if (o.threads < 1) die("THREADS must be a positive integer");
  for (int i = 2; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) die("option " + flag + " needs a value");
    std::string v = argv[++i];
    if (flag == "--decoder") o.decoder = v;
    else if (flag == "--encoder") o.encoder = v;
    else if (flag == "--save-dir") o.save_dir = v;
    else if (flag == "--cache-lengths") {
      o.cache_lengths.clear();
      for (const auto& s : split(v, ',')) o.cache_lengths.push_back(std::stoll(s));
    } else if (flag == "--step-runs") o.step_runs = std::stoi(v);
    else if (flag == "--gen-tokens") o.gen_tokens = std::stoi(v);
    else if (flag == "--gen-runs") o.gen_runs = std::stoi(v);
    else if (flag == "--prompt-token") o.prompt_token = std::stoll(v);
    else if (flag == "--encoder-rounds") o.encoder_rounds = std::stoi(v);
    else if (flag == "--encoder-vocab") o.encoder_vocab = std::stoll(v);
    else if (flag == "--warmup") o.warmup = std::stoi(v);
    else if (flag == "--max-specializations") o.max_specializations = std::stoul(v);
    else if (flag == "--encoder-shapes") {
      o.encoder_shapes.clear();
      for (const auto& s : split(v, ',')) {
        auto bs = split(s, 'x');
        if (bs.size() != 2) die("--encoder-shapes: '" + s + "' is not BATCHxSEQ");
        o.encoder_shapes.emplace_back(std::stoll(bs[0]), std::stoll(bs[1]));
      }
    } else die("unknown option '" + flag + "'");
  }
  if (o.step_runs < 1 || o.gen_runs < 1 || o.gen_tokens < 1 || o.encoder_rounds < 1)
    die("--step-runs, --gen-runs, --gen-tokens and --encoder-rounds must be at least 1");
  return o;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

// ort_shapes.js's LCG: the same pseudo-random floats in [-1, 1).
void fill(float* a, size_t n, uint32_t seed) {
  uint32_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    a[i] = static_cast<float>(static_cast<double>(x) / 2147483648.0 - 1.0);
  }
}

int64_t argmax_last(const bp::Tensor& logits) {
  const int64_t vocab = logits.shape()[2];
  const float* last = logits.data_as<float>() + (logits.shape()[1] - 1) * vocab;
  return std::max_element(last, last + vocab) - last;
}

json stats_json(const bp::Model& model) {
  bp::SpecializationStats s = model.specialization_stats();
  return {{"builds", s.builds},
          {"hits", s.hits},
          {"misses", s.misses},
          {"evictions", s.evictions},
          {"cached", s.cached},
          {"variants", s.variants},
          {"capacity", s.capacity},
          {"polymorphic_partitions", s.polymorphic_partitions},
          {"build_ms", s.build_ms}};
}

json bench_decoder(bp::Runtime& rt, const Options& o) {
  double t0 = now_ms();
  bp::ModelOptions mo;
  if (o.max_specializations > 0) mo.max_specializations = o.max_specializations;
  auto model = check(rt.load_model(o.decoder, mo), o.decoder);
  auto session = check(model->create_session(), "create_session");
  const double load_ms = now_ms() - t0;
  bp::Session& s = *session;
  std::vector<std::string> past;
  int64_t heads = 0, head_dim = 0;
  for (const auto& in : model->inputs())
    if (in.name.rfind("past_", 0) == 0) {
      past.push_back(in.name);
      heads = in.shape[1];
      head_dim = in.shape[3];
    }
  if (past.empty()) die("decoder: no past_* inputs");
  auto ids = [](int64_t token) {
    bp::Tensor t(bp::DType::kInt64, {1, 1});
    t.data_as<int64_t>()[0] = token;
    return t;
  };

  json per_token = json::array();
  for (int64_t len : o.cache_lengths) {
    std::vector<bp::Tensor> cache;
    for (size_t i = 0; i < past.size(); ++i) {
      cache.emplace_back(bp::DType::kFloat32, bp::Shape{1, heads, len, head_dim});
      fill(cache.back().data_as<float>(), static_cast<size_t>(cache.back().numel()),
           static_cast<uint32_t>(1 + i + 16 * len));
      check(s.bind_input(past[i], cache.back()), "bind " + past[i]);
    }
    check(s.set_input("input_ids", ids(1)), "input_ids");
    double f0 = now_ms();
    check(s.run(), "run");
    const double first_ms = now_ms() - f0;
    for (int i = 0; i < o.warmup; ++i) check(s.run(), "run");
    std::vector<double> times;
    for (int i = 0; i < o.step_runs; ++i) {
      double r0 = now_ms();
      check(s.run(), "run");
      times.push_back(now_ms() - r0);
    }
    per_token.push_back({{"cache_length", len},
                         {"median_ms", median(times)},
                         {"min_ms", *std::min_element(times.begin(), times.end())},
                         {"first_ms", first_ms},
                         {"runs", times.size()}});
  }

  // Greedy generation from one token, the cache fed back from run to run
  // where it was written (Session::feed, as examples/generate does).
  auto generate = [&](std::vector<int64_t>* tokens) {
    bp::Tensor empty(bp::DType::kFloat32, {1, heads, 0, head_dim});
    for (const auto& name : past) {
      check(s.set_input(name, empty), name);
      check(s.feed("present_" + name.substr(5), name), "feed " + name);
    }
    check(s.set_input("input_ids", ids(o.prompt_token)), "input_ids");
    const double g0 = now_ms();
    for (int step = 0; step < o.gen_tokens; ++step) {
      check(s.run(), "run");
      const int64_t token = argmax_last(s.output(0));
      tokens->push_back(token);
      check(s.set_input("input_ids", ids(token)), "input_ids");
    }
    return now_ms() - g0;
  };
  std::vector<int64_t> first_tokens;
  const double first_total = generate(&first_tokens);
  std::vector<double> gen_times;
  for (int r = 0; r < o.gen_runs; ++r) {
    std::vector<int64_t> tokens;
    gen_times.push_back(generate(&tokens));
    if (tokens != first_tokens) die("decoder: two greedy generations differ");
  }
  const double gen_ms = median(gen_times);
  return {{"model", o.decoder},
          {"load_ms", load_ms},
          {"heads", heads},
          {"head_dim", head_dim},
          {"layers", past.size() / 2},
          {"per_token", per_token},
          {"generation",
           {{"prompt_token", o.prompt_token},
            {"tokens", o.gen_tokens},
            {"total_ms", gen_ms},
            {"per_token_ms", gen_ms / o.gen_tokens},
            {"first_total_ms", first_total},
            {"runs", gen_times.size()},
            {"generated_ids", first_tokens}}},
          {"specializations", stats_json(*model)}};
}

json bench_encoder(bp::Runtime& rt, const Options& o) {
  double t0 = now_ms();
  bp::ModelOptions mo;
  if (o.max_specializations > 0) mo.max_specializations = o.max_specializations;
  auto model = check(rt.load_model(o.encoder, mo), o.encoder);
  auto session = check(model->create_session(), "create_session");
  const double load_ms = now_ms() - t0;
  bp::Session& s = *session;
  const std::string in = model->inputs()[0].name;
  std::vector<bp::Tensor> feeds;
  for (auto [b, sq] : o.encoder_shapes) {
    bp::Tensor t(bp::DType::kInt64, {b, sq});
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data_as<int64_t>()[i] = (i * 7919 + 13 * sq + b) % o.encoder_vocab;
    feeds.push_back(std::move(t));
  }
  std::vector<double> first;
  for (size_t k = 0; k < feeds.size(); ++k) {
    check(s.set_input(in, feeds[k]), in);
    double r0 = now_ms();
    check(s.run(), "run");
    first.push_back(now_ms() - r0);
    if (!o.save_dir.empty()) {
      auto [b, sq] = o.encoder_shapes[k];
      check(bp::npy::write(o.save_dir + "/encoder_dyn." + std::to_string(b) + "x" +
                               std::to_string(sq) + ".backplane.npy",
                           s.output(0)),
            "write output");
    }
  }
  for (int w = 0; w < o.warmup; ++w)
    for (const auto& f : feeds) {
      check(s.set_input(in, f), in);
      check(s.run(), "run");
    }
  std::vector<std::vector<double>> times(feeds.size());
  for (int r = 0; r < o.encoder_rounds; ++r)
    for (size_t k = 0; k < feeds.size(); ++k) {
      check(s.set_input(in, feeds[k]), in);
      double r0 = now_ms();
      check(s.run(), "run");
      times[k].push_back(now_ms() - r0);
    }
  json shapes = json::array();
  std::vector<double> all;
  for (size_t k = 0; k < feeds.size(); ++k) {
    shapes.push_back({{"batch", o.encoder_shapes[k].first},
                      {"seq", o.encoder_shapes[k].second},
                      {"median_ms", median(times[k])},
                      {"min_ms", *std::min_element(times[k].begin(), times[k].end())},
                      {"first_ms", first[k]},
                      {"runs", times[k].size()}});
    all.insert(all.end(), times[k].begin(), times[k].end());
  }
  return {{"model", o.encoder},       {"load_ms", load_ms},
          {"shapes", shapes},         {"overall_median_ms", median(all)},
          {"vocab", o.encoder_vocab}, {"specializations", stats_json(*model)}};
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  bp::RuntimeOptions ro;
  ro.num_threads = o.threads;
  ro.log_level = bp::LogLevel::kError;
  auto rt = check(bp::Runtime::create(ro), "Runtime::create");
  json result = {{"runtime", "backplane"}, {"threads", o.threads}};
  json backends = json::array();
  for (const auto& b : rt->backends()) backends.push_back(b.id);
  result["backends"] = backends;
  if (!o.decoder.empty()) result["decoder"] = bench_decoder(*rt, o);
  if (!o.encoder.empty()) result["encoder"] = bench_encoder(*rt, o);
  std::cout << result.dump() << "\n";
  return 0;
}
