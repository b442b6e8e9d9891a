// generate — greedy text generation with a GPT-style decoder and a key/value
// cache, token by token, through Backplane's public API.
//
//   generate MODEL.onnx [--prompt 5,17,42] [--tokens N] [--threads N] [--backends A,B]
//
// MODEL: a decoder exported with dynamic lengths (scripts/gen_models.py's
// decoder_kv): inputs input_ids [1, new] and past_key_L / past_value_L
// [1, heads, past, head_dim]; outputs logits [1, new, vocab] and
// present_key_L / present_value_L [1, heads, past + new, head_dim].
//
// One model, one session, every length: the first run takes the prompt with
// an empty cache, each later run one token. The cache never goes through a
// copy: Session::feed makes each run's present_* the next run's past_*, where
// the run wrote it (on an accelerator, in its device memory). The same can
// be done by hand with Session::bind_output into two caller buffers taking
// turns and Session::bind_input of the last one (tests/e2e/shapes_test.cpp).
#include <backplane/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace bp = backplane;

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) ids.push_back(std::stoll(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, backends;
  std::vector<int64_t> prompt = {1};
  int tokens = 32, threads = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--prompt") prompt = parse_ids(value());
    else if (arg == "--tokens") tokens = std::atoi(value().c_str());
    else if (arg == "--threads") threads = std::atoi(value().c_str());
    else if (arg == "--backends") backends = value();
    else if (!arg.empty() && arg[0] != '-' && model_path.empty()) model_path = arg;
    else
      return fail(
          "usage: generate MODEL.onnx [--prompt IDS] [--tokens N] [--threads N] "
          "[--backends A,B]");
  }
  if (model_path.empty() || prompt.empty() || tokens < 1)
    return fail(
        "usage: generate MODEL.onnx [--prompt IDS] [--tokens N] [--threads N] "
        "[--backends A,B]");

  bp::RuntimeOptions ro;
  ro.num_threads = threads;
  auto runtime = bp::Runtime::create(ro);
  if (!runtime.ok()) return fail(runtime.status().message());
  bp::ModelOptions mo;
  for (size_t start = 0; !backends.empty() && start <= backends.size();) {
    size_t comma = backends.find(',', start);
    mo.backends.push_back(backends.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto model = (*runtime)->load_model(model_path, mo);
  if (!model.ok()) return fail(model.status().message());
  auto session = (*model)->create_session();
  if (!session.ok()) return fail(session.status().message());
  bp::Session& s = **session;

  // The cache inputs, and [heads, head_dim] from the model's declared shape.
  std::vector<std::string> cache;
  int64_t heads = 0, head_dim = 0;
  for (const bp::TensorInfo& in : (*model)->inputs()) {
    if (in.name.rfind("past_", 0) != 0) continue;
    if (in.shape.size() != 4 || in.shape[1] < 0 || in.shape[3] < 0)
      return fail("input '" + in.name + "' is not [1, heads, past, head_dim] with fixed heads");
    cache.push_back(in.name);
    heads = in.shape[1];
    head_dim = in.shape[3];
  }
  if (cache.empty()) return fail("the model has no past_* inputs: not a decoder with a cache");

  // The cache: empty for the prompt, then each run's present_* fed back as
  // the next run's past_*, left where the run wrote it (Session::feed): no
  // copy, and on an accelerator it never leaves the device.
  bp::Tensor empty(bp::DType::kFloat32, {1, heads, 0, head_dim});
  for (const std::string& name : cache) {
    if (auto st = s.set_input(name, empty); !st.ok()) return fail(st.message());
    if (auto st = s.feed("present_" + name.substr(5), name); !st.ok()) return fail(st.message());
  }

  bp::Tensor ids(bp::DType::kInt64, {1, static_cast<int64_t>(prompt.size())});
  std::copy(prompt.begin(), prompt.end(), ids.data_as<int64_t>());
  std::vector<int64_t> generated;
  std::vector<double> ms;
  for (int step = 0; step < tokens; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    if (auto st = s.set_input("input_ids", ids); !st.ok()) return fail(st.message());
    if (auto st = s.run(); !st.ok()) return fail(st.message());
    const bp::Tensor& logits = s.output(0);
    const int64_t vocab = logits.shape()[2];
    const float* last = logits.data_as<float>() + (logits.shape()[1] - 1) * vocab;
    const int64_t token = std::max_element(last, last + vocab) - last;
    generated.push_back(token);
    ids = bp::Tensor(bp::DType::kInt64, {1, 1});
    ids.data_as<int64_t>()[0] = token;
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }

  std::printf("prompt   ");
  for (int64_t t : prompt) std::printf(" %lld", static_cast<long long>(t));
  std::printf("\ngenerated");
  for (int64_t t : generated) std::printf(" %lld", static_cast<long long>(t));
  std::vector<double> later(ms.begin() + 1, ms.end());
  std::sort(later.begin(), later.end());
  std::printf("\nprompt step %.3f ms; per token after it: median %.3f ms\n", ms.front(),
              later.empty() ? 0.0 : later[later.size() / 2]);
  bp::SpecializationStats stats = (*model)->specialization_stats();
  std::printf("specialisations built %llu, reused %llu; shape-polymorphic partitions %zu\n",
              static_cast<unsigned long long>(stats.builds),
              static_cast<unsigned long long>(stats.hits), stats.polymorphic_partitions);
  return 0;
}
