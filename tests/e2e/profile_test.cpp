// profile_test.cpp — Session::start_profiling / end_profiling on real models:
// the trace is Chrome trace-event JSON, its spans account for each run's wall
// time, nodes are timed where the backend reports them, and profiling changes
// no output.
#include "support/e2e_util.hpp"
#include "support/files.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

namespace backplane::e2e {
namespace {

using json = nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);  // throws (fails the test) on invalid JSON
}

// The complete ("X") events of a trace, each checked for the fields Chrome's
// trace-event format requires of one.
std::vector<json> complete_events(const json& trace) {
  EXPECT_TRUE(trace.is_object());
  EXPECT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    EXPECT_TRUE(e.contains("ph") && e["ph"].is_string()) << e.dump();
    EXPECT_TRUE(e.contains("name") && e["name"].is_string()) << e.dump();
    EXPECT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e.dump();
    if (e["ph"] != "X") continue;
    EXPECT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e.dump();
    EXPECT_TRUE(e.contains("ts") && e["ts"].is_number()) << e.dump();
    EXPECT_TRUE(e.contains("dur") && e["dur"].is_number() && e["dur"] >= 0) << e.dump();
    EXPECT_TRUE(e.contains("cat") && e["cat"].is_string()) << e.dump();
    out.push_back(e);
  }
  return out;
}

bool inside(const json& inner, const json& outer) {
  const double b = inner["ts"], e = b + inner["dur"].get<double>();
  const double ob = outer["ts"], oe = ob + outer["dur"].get<double>();
  return inner["tid"] == outer["tid"] && b >= ob - 1e-3 && e <= oe + 1e-3;
}

struct Loaded {
  std::shared_ptr<Runtime> rt;
  std::shared_ptr<Model> model;
  std::unique_ptr<Session> session;
};

Loaded load(const std::string& name, const ModelOptions& options = cpuref_only()) {
  Loaded l;
  l.rt = make_runtime();
  auto model = l.rt->load_model(model_path(name), options);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  l.model = *model;
  auto session = l.model->create_session();
  EXPECT_TRUE(session.ok()) << session.status().to_string();
  l.session = std::move(*session);
  return l;
}

TEST(Profile, TraceIsChromeJsonAndSpansAddUpToEachRun) {
  test::TempDir dir;
  const std::string path = dir.path() + "/trace.json";
  Loaded l = load("tiny_cnn");
  Session& s = *l.session;
  ASSERT_TRUE(s.set_input(0, read_npy(models_dir() + "/tiny_cnn.input.npy")).ok());
  ASSERT_TRUE(s.run().ok());  // not profiled: not in the trace
  ASSERT_TRUE(s.start_profiling(path).ok());
  constexpr int kRuns = 5;
  std::vector<double> wall_us;
  for (int i = 0; i < kRuns; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(s.run().ok());
    wall_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  auto summary = s.end_profiling();
  ASSERT_TRUE(summary.ok()) << summary.status().to_string();
  EXPECT_EQ(summary->path, path);
  EXPECT_EQ(summary->runs, static_cast<uint64_t>(kRuns));

  const std::vector<json> events = complete_events(read_json(path));
  std::vector<json> runs, parts, nodes;
  for (const json& e : events) {
    if (e["cat"] == "run") runs.push_back(e);
    if (e["cat"] == "partition") parts.push_back(e);
    if (e["cat"] == "node") nodes.push_back(e);
  }
  ASSERT_EQ(runs.size(), static_cast<size_t>(kRuns));
  ASSERT_FALSE(parts.empty());
  ASSERT_FALSE(nodes.empty());  // CpuRef times its nodes
  // A run span never exceeds the run as its caller timed it, and its
  // partitions and copies never exceed the span. The lower bounds hold for
  // the best of the runs: a run of a few hundred microseconds on a shared
  // machine can be preempted between the caller's clock and the span's, or
  // between two partitions, and that time belongs to no span.
  double best_run_share = 0, best_children_share = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    const double run_us = runs[r]["dur"];
    EXPECT_LE(run_us, wall_us[r] * 1.0001 + 1) << "run " << r;
    double children_us = 0;
    for (const json& e : events)
      if ((e["cat"] == "partition" || e["cat"] == "copy") && inside(e, runs[r]))
        children_us += e["dur"].get<double>();
    EXPECT_LE(children_us, run_us * 1.0001 + 1) << "run " << r;
    best_run_share = std::max(best_run_share, run_us / wall_us[r]);
    best_children_share = std::max(best_children_share, children_us / run_us);
  }
  // The run span is the run, and its partitions and copies account for it,
  // within 5%.
  EXPECT_GE(best_run_share, 0.95);
  EXPECT_GE(best_children_share, 0.95);
  // Every node lies in a CpuRef partition, and each partition's nodes do not
  // take longer than it.
  for (const json& p : parts) {
    EXPECT_EQ(p["args"]["backend"], "CpuRef");
    double nodes_us = 0;
    for (const json& n : nodes)
      if (inside(n, p)) nodes_us += n["dur"].get<double>();
    EXPECT_LE(nodes_us, p["dur"].get<double>() * 1.0001 + 1);
    EXPECT_GT(nodes_us, 0);
  }
  for (const json& n : nodes) {
    EXPECT_TRUE(std::any_of(parts.begin(), parts.end(), [&](const json& p) { return inside(n, p); }))
        << n.dump();
    EXPECT_EQ(n["args"]["backend"], "CpuRef");
    EXPECT_FALSE(n["args"]["node"].get<std::string>().empty());
  }
  // The summary: the backends' rows are all of the run time; Conv is timed.
  double share = 0;
  for (const auto& row : summary->by_backend) share += row.share;
  EXPECT_NEAR(share, 1.0, 1e-6);
  EXPECT_TRUE(std::any_of(summary->by_op_type.begin(), summary->by_op_type.end(),
                          [](const auto& row) { return row.name == "Conv" && row.ms > 0; }))
      << summary->to_string();
  EXPECT_TRUE(contains(summary->to_string(), "by operator type")) << summary->to_string();
}

TEST(Profile, ChangesNoOutput) {
  test::TempDir dir;
  for (const char* name : {"tiny_cnn", "decoder_kv"}) {
    SCOPED_TRACE(name);
    std::map<std::string, Tensor> inputs;
    Loaded plain = load(name);
    for (const auto& info : plain.model->inputs()) {
      const std::string one = models_dir() + "/" + name + ".input.npy";
      const std::string many = models_dir() + "/" + name + ".input." + info.name + ".npy";
      inputs[info.name] = read_npy(std::ifstream(many).good() ? many : one);
    }
    const std::vector<Tensor> want = run_once(*plain.model, inputs);
    Loaded l = load(name);
    ASSERT_TRUE(l.session->start_profiling(dir.path() + "/" + name + ".json").ok());
    for (const auto& [n, t] : inputs) ASSERT_TRUE(l.session->set_input(n, t).ok());
    ASSERT_TRUE(l.session->run().ok());
    std::vector<Tensor> got;
    for (size_t i = 0; i < l.session->num_outputs(); ++i) got.push_back(l.session->output(i));
    EXPECT_TRUE(bitwise_equal(got, want));
    auto summary = l.session->end_profiling();
    ASSERT_TRUE(summary.ok()) << summary.status().to_string();
    EXPECT_EQ(summary->runs, 1u);
    // decoder_kv has open dims: its first run builds a specialisation,
    // which the trace shows inside the run.
    if (std::string(name) == "decoder_kv") {
      bool built = false;
      for (const json& e : complete_events(read_json(summary->path)))
        built = built || e["cat"] == "specialisation";
      EXPECT_TRUE(built);
    }
  }
}

TEST(Profile, StagedModelShowsItsStages) {
  test::TempDir dir;
  Loaded l = load("cf_loop");
  ASSERT_TRUE(l.model->runs_in_stages());
  ASSERT_TRUE(l.session->set_input(0, read_npy(models_dir() + "/cf_loop.case0.input0.npy")).ok());
  ASSERT_TRUE(l.session->start_profiling(dir.path() + "/loop.json").ok());
  ASSERT_TRUE(l.session->run().ok());
  auto summary = l.session->end_profiling();
  ASSERT_TRUE(summary.ok()) << summary.status().to_string();
  EXPECT_EQ(summary->runs, 1u);
  size_t runs = 0, stages = 0;
  for (const json& e : complete_events(read_json(summary->path))) {
    runs += e["cat"] == "run";
    stages += e["cat"] == "stage";
  }
  EXPECT_EQ(runs, 1u);  // the stages' own sessions add no run of their own
  EXPECT_GT(stages, 0u);
}

TEST(Profile, UnwritablePathIsAnErrorNamingItAndTheRunIsUnchanged) {
  Loaded l = load("tiny_cnn");
  const Tensor x = read_npy(models_dir() + "/tiny_cnn.input.npy");
  ASSERT_TRUE(l.session->set_input(0, x).ok());
  const std::string bad = "/nonexistent-directory/trace.json";
  Status st = l.session->start_profiling(bad);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), bad)) << st.message();
  test::TempDir dir;
  st = l.session->start_profiling(dir.path());
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "is a directory")) << st.message();
  ASSERT_TRUE(l.session->run().ok());
  EXPECT_TRUE(bitwise_equal(l.session->output(0), run_once(*l.model, {{l.model->inputs()[0].name, x}}).at(0)));
  auto ended = l.session->end_profiling();
  EXPECT_FALSE(ended.ok());
  EXPECT_TRUE(contains(ended.status().message(), "not profiling")) << ended.status().message();
}

TEST(Profile, SessionDestroyedWhileProfilingWritesItsTrace) {
  test::TempDir dir;
  const std::string path = dir.path() + "/trace.json";
  {
    Loaded l = load("tiny_cnn");
    ASSERT_TRUE(l.session->set_input(0, read_npy(models_dir() + "/tiny_cnn.input.npy")).ok());
    ASSERT_TRUE(l.session->start_profiling(path).ok());
    ASSERT_TRUE(l.session->run().ok());
  }
  size_t runs = 0;
  for (const json& e : complete_events(read_json(path))) runs += e["cat"] == "run";
  EXPECT_EQ(runs, 1u);
}

}  // namespace
}  // namespace backplane::e2e
