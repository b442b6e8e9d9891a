// recurrent_test.cpp — torch.nn.LSTM / GRU / RNN models against PyTorch.
//
// scripts/gen_models.py (generate_recurrent) exports seeded modules at opset
// 17: bidirectional two-layer LSTM (with h0/c0 inputs), GRU (batch_first,
// h0 input) and tanh RNN, a one-layer relu RNN, and an LSTM classifier with a
// linear head. Each runs on CpuRef alone and on the default backends
// (CpuOneDnn loaded as users get it, when built), and every output must be
// within 1e-4 of PyTorch's, relative to its largest magnitude. With
// CpuOneDnn built, its LSTM and RNN nodes must run there, GRU on CpuRef.
#include "support/e2e_util.hpp"

#include <map>
#include <string>
#include <vector>

namespace backplane::e2e {
namespace {

struct RecurrentCase {
  const char* name;
  const char* op;  // the ONNX op the export must contain
  std::vector<std::string> inputs, outputs;
};

std::string case_name(const testing::TestParamInfo<RecurrentCase>& info) { return info.param.name; }

// gen_models.py's data_paths: NAME.input.npy / NAME.expected.npy for one
// input and one output, NAME.input.INPUT.npy / NAME.expected.OUTPUT.npy otherwise.
std::string data_file(const RecurrentCase& c, const char* kind, const std::string& name) {
  const bool single = c.inputs.size() == 1 && c.outputs.size() == 1;
  return models_dir() + "/" + c.name + "." + kind + (single ? "" : "." + name) + ".npy";
}

void expect_matches_pytorch(Runtime& rt, const RecurrentCase& c, const ModelOptions& mo,
                            const std::string& where) {
  auto model = rt.load_model(model_path(c.name), mo);
  ASSERT_TRUE(model.ok()) << where << ": " << model.status().to_string();
  // The recurrent nodes were placed on a backend (not folded away).
  bool placed = false;
  for (const auto& p : (*model)->partitions())
    for (const auto& n : p.nodes) placed = placed || contains(n, c.op);
  EXPECT_TRUE(placed) << where << ": no partition holds a node named like " << c.op;

  std::map<std::string, Tensor> inputs;
  for (const std::string& n : c.inputs) inputs[n] = read_npy(data_file(c, "input", n));
  std::vector<Tensor> got = run_once(**model, inputs);
  ASSERT_EQ(got.size(), c.outputs.size()) << where;
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    ASSERT_EQ((*model)->outputs()[i].name, c.outputs[i]) << where;
    Tensor want = read_npy(data_file(c, "expected", c.outputs[i]));
    ASSERT_EQ(got[i].dtype(), DType::kFloat32) << where << " " << c.outputs[i];
    ASSERT_EQ(got[i].shape(), want.shape()) << where << " " << c.outputs[i];
    ASSERT_GT(max_abs(want), 0.0) << c.outputs[i] << " is all zeros: a weak reference";
    EXPECT_LE(relative_error(got[i], want), 1e-4)
        << where << ": " << c.name << " output " << c.outputs[i];
  }
}

class RecurrentTest : public testing::TestWithParam<RecurrentCase> {};

TEST_P(RecurrentTest, MatchesPyTorchOnCpuRef) {
  auto rt = make_runtime();
  ASSERT_TRUE(rt);
  expect_matches_pytorch(*rt, GetParam(), cpuref_only(), "CpuRef");
}

TEST_P(RecurrentTest, MatchesPyTorchOnDefaultBackends) {
#ifdef BACKPLANE_ONEDNN_BACKEND_DIR
  auto rt = onednn_runtime(0);
#else
  auto rt = make_runtime();
#endif
  ASSERT_TRUE(rt);
  expect_matches_pytorch(*rt, GetParam(), ModelOptions{}, "default backends");
}

// True if `node` is named like an exported recurrent node of op `op`
// (torch names them "/rnn/LSTM", "/rnn/LSTM_1", ...).
bool is_op_node(const std::string& node, const std::string& op) {
  const std::string last = node.substr(node.rfind('/') + 1);
  return last == op || last.rfind(op + "_", 0) == 0;
}

#ifdef BACKPLANE_ONEDNN_BACKEND_DIR
// With CpuOneDnn built, its lstm_forward / gru_forward / lbr_gru_forward /
// vanilla_rnn_forward run every LSTM, GRU and RNN node.
TEST_P(RecurrentTest, RecurrentNodesOnTheExpectedBackend) {
  const RecurrentCase& c = GetParam();
  auto rt = onednn_runtime(0);
  ASSERT_TRUE(rt);
  auto model = rt->load_model(model_path(c.name), ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const std::string want = "CpuOneDnn";
  int nodes = 0;
  for (const auto& p : (*model)->partitions())
    for (const auto& n : p.nodes)
      if (is_op_node(n, c.op)) {
        ++nodes;
        EXPECT_EQ(p.backend, want) << n << "\n" << (*model)->describe_plan(PlanFormat::kText);
      }
  EXPECT_GT(nodes, 0) << "no " << c.op << " node in " << c.name;
}
#endif

// A different input gives a different output: the reference comparison above
// is not satisfied by a constant.
TEST_P(RecurrentTest, OutputFollowsTheInput) {
  const RecurrentCase& c = GetParam();
  auto rt = make_runtime();
  ASSERT_TRUE(rt);
  auto model = rt->load_model(model_path(c.name), cpuref_only());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::map<std::string, Tensor> inputs;
  for (const std::string& n : c.inputs) inputs[n] = read_npy(data_file(c, "input", n));
  std::vector<Tensor> first = run_once(**model, inputs);
  Tensor& x = inputs["x"];
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] *= 0.5f;
  std::vector<Tensor> second = run_once(**model, inputs);
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(first.size(), second.size());
  EXPECT_GT(max_abs_diff(first[0], second[0]), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    E2E, RecurrentTest,
    testing::Values(RecurrentCase{"lstm_bidir2", "LSTM", {"x", "h0", "c0"}, {"y", "h_n", "c_n"}},
                    RecurrentCase{"gru_bidir2", "GRU", {"x", "h0"}, {"y", "h_n"}},
                    RecurrentCase{"rnn_bidir2", "RNN", {"x"}, {"y", "h_n"}},
                    RecurrentCase{"rnn_relu", "RNN", {"x"}, {"y", "h_n"}},
                    RecurrentCase{"lstm_classifier", "LSTM", {"x"}, {"logits"}}),
    case_name);

}  // namespace
}  // namespace backplane::e2e
