// shapes_test.cpp — real dynamic-shape models against PyTorch
// (scripts/torch_reference.py), one loaded model for every shape:
// - encoder_dyn: one session at 10 (batch, seq) shapes, each output within
//   1e-4 (relative to the largest |value|) of PyTorch's;
// - decoder_kv: 64 greedy tokens with the key/value cache fed back between
//   runs (copied with set_input, and zero-copy with bound ping-pong buffers),
//   token for token equal to PyTorch's generation.
// On CpuRef alone and on the default backends (CpuOneDnn, as users load it,
// when this build has it).
#include "support/e2e_util.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace backplane::e2e {
namespace {

struct Backends {
  const char* name;
  bool onednn;
};

std::shared_ptr<Runtime> runtime_for(const Backends& b) {
#ifdef BACKPLANE_ONEDNN_BACKEND_DIR
  if (b.onednn) return onednn_runtime(1);
#endif
  return make_runtime();
}

ModelOptions options_for(const Backends& b) { return b.onednn ? ModelOptions{} : cpuref_only(); }

nlohmann::json manifest(const std::string& model) {
  std::ifstream in(references_dir() + "/" + model + ".manifest.json");
  EXPECT_TRUE(in.good()) << "no manifest for " << model << " in " << references_dir();
  nlohmann::json j;
  if (in.good()) in >> j;
  return j;
}

double max_rel_diff(const Tensor& got, const Tensor& want) {
  double m = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    m = std::max(
        m, static_cast<double>(std::fabs(got.data_as<float>()[i] - want.data_as<float>()[i])));
  return m / std::max(1e-30, max_abs(want));
}

class DynamicShapes : public testing::TestWithParam<Backends> {};

TEST_P(DynamicShapes, EncoderAtTenShapesInOneSessionMatchesPyTorch) {
  auto rt = runtime_for(GetParam());
  ASSERT_TRUE(rt);
  auto model = rt->load_model(model_path("encoder_dyn"), options_for(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  if (GetParam().onednn) {
    auto used = (*model)->backends_used();  // planned at the first run
    EXPECT_TRUE(used.empty());
  }
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  nlohmann::json m = manifest("encoder_dyn");
  ASSERT_TRUE(m.contains("cases"));
  size_t shapes = 0;
  for (const auto& c : m["cases"]) {
    SCOPED_TRACE("shape " + std::to_string(c["batch"].get<int>()) + "x" +
                 std::to_string(c["seq"].get<int>()));
    Tensor ids = read_npy(references_dir() + "/" + c["input_ids"].get<std::string>());
    Tensor want = read_npy(references_dir() + "/" + c["last_hidden_state"].get<std::string>());
    ASSERT_FALSE(ids.empty());
    ASSERT_TRUE((*session)->set_input("input_ids", ids).ok());
    Status st = (*session)->run();
    ASSERT_TRUE(st.ok()) << st.to_string();
    const Tensor& got = (*session)->output(0);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_LE(max_rel_diff(got, want), 1e-4);
    ++shapes;
  }
  EXPECT_EQ(shapes, 10u);
  EXPECT_EQ((*model)->specialization_stats().builds, shapes);
  if (GetParam().onednn) {
    auto used = (*model)->backends_used();
    EXPECT_NE(std::find(used.begin(), used.end(), "CpuOneDnn"), used.end());
  }
}

// How the cache goes from one run to the next.
enum class Cache { kCopied, kBound, kFed };

// Runs the decoder: the prompt with an empty cache, then one token per run,
// present_* fed back as past_*: copied by set_input; or written into two
// sets of caller buffers used in turn, bound as the next run's inputs; or
// through Session::feed.
std::vector<int64_t> generate(Model& model, const Tensor& prompt, int tokens, Cache how,
                              Tensor* first_logits) {
  const bool zero_copy = how == Cache::kBound;
  auto session = model.create_session();
  EXPECT_TRUE(session.ok()) << session.status().to_string();
  if (!session.ok()) return {};
  Session& s = **session;
  std::vector<std::string> cache;  // past_key_0, past_value_0, ...
  for (const TensorInfo& in : model.inputs())
    if (in.name != "input_ids") cache.push_back(in.name);
  const Shape empty_cache = {1, model.inputs()[1].shape[1], 0, model.inputs()[1].shape[3]};
  const int64_t heads = empty_cache[1], head_dim = empty_cache[3];
  const int64_t max_len = prompt.shape()[1] + tokens;
  // Two buffers per cache tensor, each large enough for the longest cache.
  std::vector<std::vector<float>> ping(cache.size()), pong(cache.size());
  for (size_t k = 0; k < cache.size(); ++k) {
    ping[k].resize(static_cast<size_t>(heads * max_len * head_dim));
    pong[k].resize(ping[k].size());
  }
  std::vector<Tensor> past(cache.size(), Tensor(DType::kFloat32, empty_cache));
  for (size_t k = 0; k < cache.size(); ++k) {
    EXPECT_TRUE(s.set_input(cache[k], past[k]).ok());
    if (how == Cache::kFed) {
      EXPECT_TRUE(s.feed("present_" + cache[k].substr(5), cache[k]).ok());
    }
  }
  Tensor ids = prompt;
  int64_t length = 0;
  std::vector<int64_t> out;
  for (int step = 0; step < tokens; ++step) {
    EXPECT_TRUE(s.set_input("input_ids", ids).ok());
    const int64_t total = length + ids.shape()[1];
    if (zero_copy)
      for (size_t k = 0; k < cache.size(); ++k) {
        auto& buffer = step % 2 == 0 ? ping[k] : pong[k];
        Tensor present = Tensor::view(DType::kFloat32, {1, heads, total, head_dim}, buffer.data());
        EXPECT_TRUE(s.bind_output("present_" + cache[k].substr(5), present).ok());
      }
    Status st = s.run();
    EXPECT_TRUE(st.ok()) << "step " << step << ": " << st.to_string();
    if (!st.ok()) return out;
    const Tensor& logits = s.output(0);
    if (step == 0 && first_logits != nullptr) *first_logits = logits.clone();
    const int64_t vocab = logits.shape()[2];
    const float* last = logits.data_as<float>() + (logits.shape()[1] - 1) * vocab;
    const int64_t token = std::max_element(last, last + vocab) - last;
    out.push_back(token);
    // The cache for the next run.
    for (size_t k = 0; k < cache.size() && how != Cache::kFed; ++k) {
      auto present = s.get_output("present_" + cache[k].substr(5));
      EXPECT_TRUE(present.ok());
      if (zero_copy) EXPECT_TRUE(s.bind_input(cache[k], *present).ok());
      else EXPECT_TRUE(s.set_input(cache[k], *present).ok());
    }
    length = total;
    ids = Tensor(DType::kInt64, {1, 1});
    ids.data_as<int64_t>()[0] = token;
  }
  return out;
}

TEST_P(DynamicShapes, DecoderGreedy64TokensEqualPyTorchs) {
  auto rt = runtime_for(GetParam());
  ASSERT_TRUE(rt);
  ModelOptions mo = options_for(GetParam());
  mo.max_specializations = 128;  // both generations' 64 signatures stay cached
  auto model = rt->load_model(model_path("decoder_kv"), mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Tensor prompt = read_npy(references_dir() + "/decoder_kv.prompt_ids.npy");
  Tensor want = read_npy(references_dir() + "/decoder_kv.generated_ids.npy");
  Tensor want_logits = read_npy(references_dir() + "/decoder_kv.first_logits.npy");
  ASSERT_FALSE(prompt.empty());
  ASSERT_EQ(want.numel(), 64);
  std::vector<int64_t> expected(want.data_as<int64_t>(), want.data_as<int64_t>() + 64);
  for (Cache how : {Cache::kCopied, Cache::kBound, Cache::kFed}) {
    SCOPED_TRACE(how == Cache::kCopied  ? "copied cache"
                 : how == Cache::kBound ? "bound buffers"
                                        : "fed back");
    Tensor first;
    std::vector<int64_t> got = generate(**model, prompt, 64, how, &first);
    EXPECT_EQ(got, expected);
    ASSERT_EQ(first.shape(), want_logits.shape());
    EXPECT_LE(max_rel_diff(first, want_logits), 1e-4);
  }
  // The prompt, then 63 cache lengths: one specialisation each, built once
  // for all three generations.
  EXPECT_EQ((*model)->specialization_stats().builds, 64u);
}

INSTANTIATE_TEST_SUITE_P(Backends, DynamicShapes,
                         testing::Values(Backends{"CpuRef", false}
#ifdef BACKPLANE_ONEDNN_BACKEND_DIR
                                         ,
                                         Backends{"Default", true}
#endif
                                         ),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace backplane::e2e
