// Staged execution (session/staged_model.hpp): outputs whose shape depends on
// data (NonZero) reach the user and the stages after them are specialised
// for the shapes they report; an op whose shape depends on values computed
// from data (Resize's sizes) runs as a stage of its own, in a Loop too; If,
// Loop and Scan with bodies; sequences and optionals through the public API;
// the LRU bound per stage; and bad models (absurd loops, malformed bodies,
// unknown ops) are errors naming the node, never hangs or crashes.
#include "support/expect_error.hpp"
#include "support/model_builder.hpp"
#include "static_runtime.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace backplane {
namespace {

namespace bt = backplane::test;

std::shared_ptr<Runtime> runtime() { return bt::static_runtime(); }

Tensor floats(Shape shape, std::vector<float> v) {
  return Tensor::copy_of(DType::kFloat32, std::move(shape), v.data());
}
Tensor int64s(Shape shape, std::vector<int64_t> v) {
  return Tensor::copy_of(DType::kInt64, std::move(shape), v.data());
}
Tensor boolean(bool b) { return Tensor::copy_of(DType::kBool, {}, &b); }

std::vector<float> values_f(const Tensor& t) {
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel());
}
std::vector<int64_t> values_i(const Tensor& t) {
  return std::vector<int64_t>(t.data_as<int64_t>(), t.data_as<int64_t>() + t.numel());
}

// x[3,4] -> nz = NonZero(x) [2,K] -> Transpose [K,2] -> flat index row*4+col
// -> Gather(Reshape(x,[-1])) [K] -> ReduceSum -> s. Outputs nz (K known only
// once NonZero ran) and s (= the sum of x's non-zero elements).
std::string write_nonzero_model(const bt::TempDir& dir) {
  bt::ModelBuilder b(13, "nonzero_chain");
  b.input("x", {3, 4});
  b.init_i64("flat", {1}, {-1});
  b.init_i64("zero", {}, {0});
  b.init_i64("one", {}, {1});
  b.init_i64("four", {}, {4});
  b.node("NonZero", {"x"}, {"nz"}, "nonzero");
  bt::set_ints(b.node("Transpose", {"nz"}, {"t"}, "transpose"), "perm", {1, 0});
  bt::set_int(b.node("Gather", {"t", "zero"}, {"row"}, "row"), "axis", 1);
  bt::set_int(b.node("Gather", {"t", "one"}, {"col"}, "col"), "axis", 1);
  b.node("Mul", {"row", "four"}, {"row4"}, "row4");
  b.node("Add", {"row4", "col"}, {"index"}, "index");
  b.node("Reshape", {"x", "flat"}, {"xf"}, "flatten");
  b.node("Gather", {"xf", "index"}, {"picked"}, "pick");
  bt::set_int(b.node("ReduceSum", {"picked"}, {"s"}, "sum"), "keepdims", 0);
  b.output("nz", {2, "k"}, onnx::TensorProto::INT64);
  b.output("s", std::vector<bt::Dim>{});
  return b.save(dir);
}

class Backends : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(Backends, NonZeroOutputsOfUnknownSizeReachTheUserAndFeedLaterStages) {
  bt::TempDir dir;
  auto rt = runtime();
  ModelOptions mo;
  mo.backends = GetParam();
  auto model = rt->load_model(write_nonzero_model(dir), mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  const std::vector<std::vector<float>> patterns = {
      {0, 1, 0, 2, 0, 0, 0, 0, 3, 0, 0, 4},
      {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  // none: K = 0
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
      {-0.0f, 0.5f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},  // -0 is zero
      {0, 1, 0, 2, 0, 0, 0, 0, 3, 0, 0, 4},         // again: cached stages
  };
  for (const auto& p : patterns) {
    ASSERT_TRUE((*session)->set_input("x", floats({3, 4}, p)).ok());
    Status st = (*session)->run();
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<int64_t> rows, cols;
    float sum = 0;
    for (int64_t i = 0; i < 12; ++i)
      if (p[i] != 0) {
        rows.push_back(i / 4);
        cols.push_back(i % 4);
        sum += p[i];
      }
    auto nz = (*session)->get_output("nz");
    ASSERT_TRUE(nz.ok()) << nz.status().message();
    const int64_t k = static_cast<int64_t>(rows.size());
    ASSERT_EQ(nz->shape(), (Shape{2, k}));
    std::vector<int64_t> want = rows;
    want.insert(want.end(), cols.begin(), cols.end());
    EXPECT_EQ(values_i(*nz), want);
    auto s = (*session)->get_output("s");
    ASSERT_TRUE(s.ok()) << s.status().message();
    EXPECT_EQ(s->shape(), Shape{});
    EXPECT_EQ(s->data_as<float>()[0], sum);
  }
  // The stage after NonZero was specialised per K seen (4 distinct), and
  // reused for the repeated pattern.
  const SpecializationStats stats = (*model)->specialization_stats();
  EXPECT_GE(stats.hits, 1u);
  EXPECT_FALSE((*model)->backends_used().empty());
}

// set_input copies into the session's buffer for the input, kept from run
// to run; an output the user still holds that is that very input (the
// graph's output "x" is its input) keeps the bytes of its own run.
TEST(Staged, AnOutputThatIsTheInputKeepsItsRunsBytesAfterTheNextSetInput) {
  bt::TempDir dir;
  bt::ModelBuilder b(13, "input_out");
  b.input("x", {3, 4});
  b.node("NonZero", {"x"}, {"nz"}, "nonzero");
  b.output("nz", {2, "k"}, onnx::TensorProto::INT64);
  b.output("x", {3, 4});
  auto model = runtime()->load_model(b.save(dir));
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_TRUE((*model)->runs_in_stages());
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  const std::vector<float> first = {0, 1, 0, 2, 0, 0, 0, 0, 3, 0, 0, 4};
  const std::vector<float> second = {5, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0};
  const std::vector<float> third = {0, 0, 7, 0, 8, 0, 0, 9, 0, 0, 0, 1};
  Tensor held;
  for (const auto* p : {&first, &second, &third}) {
    Tensor x = floats({3, 4}, *p);
    ASSERT_TRUE((*session)->set_input("x", x).ok());
    x.data_as<float>()[0] = 99;  // the caller's tensor is the caller's
    ASSERT_TRUE((*session)->run().ok());
    auto out = (*session)->get_output("x");
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(values_f(*out), *p);
    if (held.empty()) held = *out;
    auto nz = (*session)->get_output("nz");
    ASSERT_TRUE(nz.ok());
    EXPECT_EQ(nz->shape()[1], p == &second ? 2 : 4);
  }
  EXPECT_EQ(values_f(held), first);  // the first run's, though two runs came after
}

INSTANTIATE_TEST_SUITE_P(Staged, Backends,
                         ::testing::Values(std::vector<std::string>{"CpuRef"},
                                           std::vector<std::string>{}),  // the default order
                         [](const auto& info) {
                           return info.param.empty() ? std::string("Default") : info.param.front();
                         });

TEST(Staged, EveryStageKeepsItsLruBound) {
  bt::TempDir dir;
  auto rt = runtime();
  ModelOptions mo;
  mo.backends = {"CpuRef"};
  mo.max_specializations = 2;
  auto model = rt->load_model(write_nonzero_model(dir), mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  for (int k = 0; k <= 8; ++k) {  // K = 0..8 non-zeros: a new shape each run
    std::vector<float> x(12, 0.f);
    for (int i = 0; i < k; ++i) x[i] = 1.f + i;
    ASSERT_TRUE((*session)->set_input("x", floats({3, 4}, x)).ok());
    Status st = (*session)->run();
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ((*session)->output(1).data_as<float>()[0], k * (k + 1) / 2.f);
  }
  const SpecializationStats stats = (*model)->specialization_stats();
  EXPECT_EQ(stats.capacity, 2u);
  // Two stages, each at most 2 specialisations and 64 shape variants.
  EXPECT_LE(stats.cached - stats.variants, 2u * 2u);
  EXPECT_LE(stats.variants, 2u * 64u);
  EXPECT_EQ(stats.builds, 1u + 9u);  // the stage before NonZero: 1 shape; after it, 9
  EXPECT_EQ(stats.evictions, 0u);
}

// ---- control flow built with the onnx protobuf API --------------------------

onnx::GraphProto* graph_attr(onnx::NodeProto& n, const std::string& name) {
  return bt::attr(n, name, onnx::AttributeProto::GRAPH)->mutable_g();
}

void add_node(onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& ins,
              const std::vector<std::string>& outs, const std::string& name) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
}

void typed(onnx::ValueInfoProto* vi, const std::string& name, int elem,
           std::optional<std::vector<bt::Dim>> dims = std::nullopt) {
  bt::set_type(vi, name, elem, std::move(dims));
}

// If(c): then y = x + 1 ([n]), else y = Concat(x, x) ([2n]): branches of
// different shapes; both read x from the enclosing graph.
std::string write_if_model(const bt::TempDir& dir) {
  bt::ModelBuilder b(13, "if_model");
  b.input("c", std::vector<bt::Dim>{}, onnx::TensorProto::BOOL);
  b.input("x", {"n"});
  b.init_f32("one", {1}, {1.f});
  auto& node = b.node("If", {"c"}, {"y"}, "branch");
  onnx::GraphProto* then_g = graph_attr(node, "then_branch");
  then_g->set_name("then");
  add_node(then_g, "Add", {"x", "one"}, {"t"}, "add_one");
  typed(then_g->add_output(), "t", onnx::TensorProto::FLOAT);
  onnx::GraphProto* else_g = graph_attr(node, "else_branch");
  else_g->set_name("else");
  onnx::NodeProto* cat = else_g->add_node();
  cat->set_op_type("Concat");
  cat->set_name("twice");
  cat->add_input("x");
  cat->add_input("x");
  cat->add_output("e");
  bt::set_int(*cat, "axis", 0);
  typed(else_g->add_output(), "e", onnx::TensorProto::FLOAT);
  b.output("y");
  return b.save(dir);
}

TEST(Staged, IfRunsTheBranchTheConditionPicksWithItsOwnShape) {
  bt::TempDir dir;
  auto rt = runtime();
  auto model = rt->load_model(write_if_model(dir));
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  Session& s = **session;
  ASSERT_TRUE(s.set_input("x", floats({3}, {1, 2, 3})).ok());
  ASSERT_TRUE(s.set_input("c", boolean(true)).ok());
  ASSERT_TRUE(s.run().ok());
  EXPECT_EQ(values_f(s.output(0)), (std::vector<float>{2, 3, 4}));
  ASSERT_TRUE(s.set_input("c", boolean(false)).ok());
  ASSERT_TRUE(s.run().ok());
  EXPECT_EQ(values_f(s.output(0)), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  ASSERT_TRUE(s.set_input("x", floats({1}, {5})).ok());
  ASSERT_TRUE(s.run().ok());
  EXPECT_EQ(values_f(s.output(0)), (std::vector<float>{5, 5}));
}

// Loop(M, cond=true, acc=0): body acc' = acc + x * i (x from the enclosing
// graph), scan output acc'; cond' = acc' < limit. Written to stop either at
// the trip count or when the sum reaches `limit`.
std::string write_loop_model(const bt::TempDir& dir, bool with_trip_count) {
  bt::ModelBuilder b(13, "loop_model");
  if (with_trip_count) b.input("M", std::vector<bt::Dim>{}, onnx::TensorProto::INT64);
  b.input("x", std::vector<bt::Dim>{1});
  b.input("limit", std::vector<bt::Dim>{1});
  b.init_f32("acc0", {1}, {0.f});
  b.init_i64("true_i", {}, {1});
  bt::set_int(b.node("Cast", {"true_i"}, {"cond0"}, "cond0"), "to", onnx::TensorProto::BOOL);
  auto& loop =
      b.node("Loop", {with_trip_count ? "M" : "", "cond0", "acc0"}, {"acc", "accs"}, "loop");
  onnx::GraphProto* body = graph_attr(loop, "body");
  body->set_name("body");
  typed(body->add_input(), "i", onnx::TensorProto::INT64, std::vector<bt::Dim>{});
  typed(body->add_input(), "c_in", onnx::TensorProto::BOOL, std::vector<bt::Dim>{});
  typed(body->add_input(), "acc_in", onnx::TensorProto::FLOAT);
  onnx::NodeProto* cast = body->add_node();
  cast->set_op_type("Cast");
  cast->set_name("i_float");
  cast->add_input("i");
  cast->add_output("fi");
  bt::set_int(*cast, "to", onnx::TensorProto::FLOAT);
  add_node(body, "Mul", {"x", "fi"}, {"xi"}, "x_times_i");
  add_node(body, "Add", {"acc_in", "xi"}, {"acc_out"}, "accumulate");
  add_node(body, "Less", {"acc_out", "limit"}, {"below"}, "below");
  add_node(body, "Squeeze", {"below"}, {"c_out"}, "cond");
  add_node(body, "Identity", {"acc_out"}, {"scan"}, "scan");
  typed(body->add_output(), "c_out", onnx::TensorProto::BOOL);
  typed(body->add_output(), "acc_out", onnx::TensorProto::FLOAT);
  typed(body->add_output(), "scan", onnx::TensorProto::FLOAT);
  b.output("acc");
  b.output("accs");
  return b.save(dir);
}

TEST(Staged, LoopCarriesValuesStacksScanOutputsAndReadsTheEnclosingScope) {
  bt::TempDir dir;
  auto rt = runtime();
  auto model = rt->load_model(write_loop_model(dir, true));
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  Session& s = **session;
  ASSERT_TRUE(s.set_input("x", floats({1}, {2})).ok());
  ASSERT_TRUE(s.set_input("limit", floats({1}, {1000})).ok());
  ASSERT_TRUE(s.set_input("M", int64s({}, {4})).ok());
  Status st = s.run();
  ASSERT_TRUE(st.ok()) << st.message();
  // acc after i = 0..3: 0, 2, 6, 12.
  EXPECT_EQ(values_f(s.output(0)), (std::vector<float>{12}));
  EXPECT_EQ(s.output(1).shape(), (Shape{4, 1}));
  EXPECT_EQ(values_f(s.output(1)), (std::vector<float>{0, 2, 6, 12}));
  // The condition stops it first: 0, 2, 6, 12, 20 (>= 15).
  ASSERT_TRUE(s.set_input("limit", floats({1}, {15})).ok());
  ASSERT_TRUE(s.set_input("M", int64s({}, {100})).ok());
  ASSERT_TRUE(s.run().ok());
  EXPECT_EQ(values_f(s.output(1)), (std::vector<float>{0, 2, 6, 12, 20}));
  // No iteration at all: the scan output is empty.
  ASSERT_TRUE(s.set_input("M", int64s({}, {0})).ok());
  ASSERT_TRUE(s.run().ok());
  EXPECT_EQ(values_f(s.output(0)), (std::vector<float>{0}));
  EXPECT_EQ(s.output(1).numel(), 0);
}

// ---- shapes that depend on the values of data -------------------------------

// Resize (nearest, asymmetric, floor) of x to sizes [1, 1, ceil(hw[0]),
// ceil(hw[1])]: the sizes are computed from float data, as Mask R-CNN's
// paste of masks computes them from boxes.
std::string write_resize_by_data_model(const bt::TempDir& dir) {
  bt::ModelBuilder b(13, "resize_by_data");
  b.input("x", {1, 1, 2, 3});
  b.input("hw", {2});
  b.init_i64("lead", {2}, {1, 1});
  b.node("Ceil", {"hw"}, {"hw_up"}, "ceil");
  bt::set_int(b.node("Cast", {"hw_up"}, {"hw_i"}, "to_int"), "to", onnx::TensorProto::INT64);
  bt::set_int(b.node("Concat", {"lead", "hw_i"}, {"sizes"}, "sizes"), "axis", 0);
  auto& resize = b.node("Resize", {"x", "", "", "sizes"}, {"y"}, "resize");
  bt::set_string(resize, "mode", "nearest");
  bt::set_string(resize, "coordinate_transformation_mode", "asymmetric");
  bt::set_string(resize, "nearest_mode", "floor");
  b.output("y");
  return b.save(dir);
}

// What write_resize_by_data_model's Resize gives for x [1, 1, h, w] at [H, W].
std::vector<float> resized(const std::vector<float>& x, int64_t h, int64_t w, int64_t H,
                           int64_t W) {
  std::vector<float> y;
  for (int64_t r = 0; r < H; ++r)
    for (int64_t c = 0; c < W; ++c) y.push_back(x[(r * h / H) * w + c * w / W]);
  return y;
}

TEST_P(Backends, ResizeWhoseSizesComeFromDataRunsAsAStageOfItsOwn) {
  bt::TempDir dir;
  auto rt = runtime();
  ModelOptions mo;
  mo.backends = GetParam();
  auto model = rt->load_model(write_resize_by_data_model(dir), mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  Session& s = **session;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(s.set_input("x", floats({1, 1, 2, 3}, x)).ok());
  struct Case {
    float h, w;
    int64_t H, W;
  };
  for (const Case& c : {Case{3.2f, 5.5f, 4, 6}, Case{2.7f, 6.1f, 3, 7}, Case{3.2f, 5.5f, 4, 6}}) {
    ASSERT_TRUE(s.set_input("hw", floats({2}, {c.h, c.w})).ok());
    Status st = s.run();
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(s.output(0).shape(), (Shape{1, 1, c.H, c.W}));
    EXPECT_EQ(values_f(s.output(0)), resized(x, 2, 3, c.H, c.W));
  }
  const std::string plan = (*model)->describe_plan(PlanFormat::kText);
  EXPECT_NE(plan.find("per value of 'sizes'"), std::string::npos) << plan;
}

// Loop over widths[i]: acc += ReduceSum(Resize(x [1,1,1,2], [1, 1, 1,
// ceil(widths[i])])), each iteration's sum also a scan output. The sizes
// come from float data the body reads from the enclosing graph.
std::string write_resize_in_loop_model(const bt::TempDir& dir) {
  bt::ModelBuilder b(13, "resize_in_loop");
  b.input("M", std::vector<bt::Dim>{}, onnx::TensorProto::INT64);
  b.input("x", {1, 1, 1, 2});
  b.input("widths", {"m"});
  b.init_f32("acc0", {}, {0.f});
  b.init_i64("lead", {3}, {1, 1, 1});
  b.init_i64("axis0", {1}, {0});
  b.init_i64("true_i", {}, {1});
  bt::set_int(b.node("Cast", {"true_i"}, {"cond0"}, "cond0"), "to", onnx::TensorProto::BOOL);
  auto& loop = b.node("Loop", {"M", "cond0", "acc0"}, {"acc", "sums"}, "loop");
  onnx::GraphProto* body = graph_attr(loop, "body");
  body->set_name("body");
  typed(body->add_input(), "i", onnx::TensorProto::INT64, std::vector<bt::Dim>{});
  typed(body->add_input(), "c_in", onnx::TensorProto::BOOL, std::vector<bt::Dim>{});
  typed(body->add_input(), "acc_in", onnx::TensorProto::FLOAT);
  add_node(body, "Gather", {"widths", "i"}, {"w"}, "width");
  add_node(body, "Ceil", {"w"}, {"w_up"}, "ceil");
  onnx::NodeProto* cast = body->add_node();
  cast->set_op_type("Cast");
  cast->set_name("to_int");
  cast->add_input("w_up");
  cast->add_output("w_i");
  bt::set_int(*cast, "to", onnx::TensorProto::INT64);
  add_node(body, "Unsqueeze", {"w_i", "axis0"}, {"w_1"}, "unsqueeze");
  onnx::NodeProto* cat = body->add_node();
  cat->set_op_type("Concat");
  cat->set_name("sizes");
  cat->add_input("lead");
  cat->add_input("w_1");
  cat->add_output("sizes");
  bt::set_int(*cat, "axis", 0);
  onnx::NodeProto* resize = body->add_node();
  resize->set_op_type("Resize");
  resize->set_name("resize");
  for (const char* in : {"x", "", "", "sizes"}) resize->add_input(in);
  resize->add_output("r");
  bt::set_string(*resize, "mode", "nearest");
  bt::set_string(*resize, "coordinate_transformation_mode", "asymmetric");
  bt::set_string(*resize, "nearest_mode", "floor");
  onnx::NodeProto* sum = body->add_node();
  sum->set_op_type("ReduceSum");
  sum->set_name("sum");
  sum->add_input("r");
  sum->add_output("s");
  bt::set_int(*sum, "keepdims", 0);
  add_node(body, "Add", {"acc_in", "s"}, {"acc_out"}, "accumulate");
  add_node(body, "Identity", {"c_in"}, {"c_out"}, "cond");
  add_node(body, "Identity", {"s"}, {"scan"}, "scan");
  typed(body->add_output(), "c_out", onnx::TensorProto::BOOL);
  typed(body->add_output(), "acc_out", onnx::TensorProto::FLOAT);
  typed(body->add_output(), "scan", onnx::TensorProto::FLOAT);
  b.output("acc");
  b.output("sums");
  return b.save(dir);
}

TEST_P(Backends, ResizeWhoseSizesComeFromDataRunsInsideALoop) {
  bt::TempDir dir;
  auto rt = runtime();
  ModelOptions mo;
  mo.backends = GetParam();
  auto model = rt->load_model(write_resize_in_loop_model(dir), mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  Session& s = **session;
  ASSERT_TRUE(s.set_input("x", floats({1, 1, 1, 2}, {1, 10})).ok());
  const std::vector<float> widths = {2.5f, 4.2f, 1.0f, 3.9f, 2.5f};  // W = 3, 5, 1, 4, 3
  ASSERT_TRUE(s.set_input("widths", floats({5}, widths)).ok());
  ASSERT_TRUE(s.set_input("M", int64s({}, {5})).ok());
  Status st = s.run();
  ASSERT_TRUE(st.ok()) << st.message();
  // Width W: ceil(W / 2) outputs read x[0] = 1, the rest x[1] = 10.
  const std::vector<float> want = {12, 23, 1, 22, 12};
  EXPECT_EQ(values_f(s.output(1)), want);
  EXPECT_EQ(values_f(s.output(0)), (std::vector<float>{70}));
  // Another run, other widths.
  ASSERT_TRUE(s.set_input("widths", floats({2}, {6.0f, 0.5f})).ok());  // W = 6, 1
  ASSERT_TRUE(s.set_input("M", int64s({}, {2})).ok());
  st = s.run();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(values_f(s.output(1)), (std::vector<float>{33, 1}));
}

TEST(Staged, ARunawayLoopStopsWithAnErrorNamingIt) {
  bt::TempDir dir;
  auto rt = runtime();
  ModelOptions mo;
  mo.max_loop_iterations = 500;
  // An absurd trip count, and a condition that never turns false.
  for (bool with_trip : {true, false}) {
    auto model = rt->load_model(write_loop_model(dir, with_trip), mo);
    ASSERT_TRUE(model.ok()) << model.status().message();
    auto session = (*model)->create_session();
    ASSERT_TRUE(session.ok());
    Session& s = **session;
    if (with_trip) {
      ASSERT_TRUE(s.set_input("M", int64s({}, {int64_t{1} << 62})).ok());
    }
    ASSERT_TRUE(s.set_input("x", floats({1}, {0})).ok());
    ASSERT_TRUE(s.set_input("limit", floats({1}, {1})).ok());
    Status st = s.run();
    ASSERT_FALSE(st.ok());
    EXPECT_ERROR_HAS(st, "node 'loop' (Loop)", "500 iterations");
  }
  // Scan outputs past the byte bound.
  mo.max_loop_iterations = int64_t{1} << 17;
  mo.max_loop_bytes = 64;
  auto model = rt->load_model(write_loop_model(dir, true), mo);
  ASSERT_TRUE(model.ok());
  auto session = (*model)->create_session();
  Session& s = **session;
  ASSERT_TRUE(s.set_input("M", int64s({}, {1000})).ok());
  ASSERT_TRUE(s.set_input("x", floats({1}, {0})).ok());
  ASSERT_TRUE(s.set_input("limit", floats({1}, {1})).ok());
  Status st = s.run();
  EXPECT_ERROR_HAS(st, "node 'loop' (Loop)", "bytes");
}

TEST(Staged, MalformedBodiesAndUnknownOpsAreErrorsNamingTheNode) {
  bt::TempDir dir;
  auto rt = runtime();
  {  // The body lacks the scan output the node expects.
    const std::string path = write_loop_model(dir, true);
    onnx::ModelProto m;
    {
      std::ifstream in(path, std::ios::binary);
      ASSERT_TRUE(m.ParseFromIstream(&in));
    }
    for (auto& n : *m.mutable_graph()->mutable_node())
      if (n.op_type() == "Loop")
        n.mutable_attribute(0)->mutable_g()->mutable_output()->RemoveLast();
    const std::string bad = dir.file("bad_loop.onnx");
    std::ofstream(bad, std::ios::binary) << m.SerializeAsString();
    auto model = rt->load_model(bad);
    ASSERT_TRUE(model.ok()) << model.status().message();
    auto session = (*model)->create_session();
    Session& s = **session;
    ASSERT_TRUE(s.set_input("M", int64s({}, {2})).ok());
    ASSERT_TRUE(s.set_input("x", floats({1}, {1})).ok());
    ASSERT_TRUE(s.set_input("limit", floats({1}, {10})).ok());
    Status st = s.run();
    EXPECT_ERROR_HAS(st, "node 'loop' (Loop)", "body has 2 outputs, expected 3");
  }
  {  // A branch output read from nowhere.
    bt::ModelBuilder b(13, "bad_if");
    b.input("c", std::vector<bt::Dim>{}, onnx::TensorProto::BOOL);
    auto& node = b.node("If", {"c"}, {"y"}, "branch");
    onnx::GraphProto* t = graph_attr(node, "then_branch");
    typed(t->add_output(), "nowhere", onnx::TensorProto::FLOAT);
    onnx::GraphProto* e = graph_attr(node, "else_branch");
    typed(e->add_output(), "nowhere", onnx::TensorProto::FLOAT);
    b.output("y");
    auto model = rt->load_model(b.save(dir, "bad_if.onnx"));
    ASSERT_FALSE(model.ok());
    EXPECT_ERROR_HAS(model.status(), "node 'branch' (If)", "nowhere");
  }
  {  // An unknown op inside a body.
    bt::ModelBuilder b(13, "unknown_in_body");
    b.input("c", std::vector<bt::Dim>{}, onnx::TensorProto::BOOL);
    b.input("x", {2});
    auto& node = b.node("If", {"c"}, {"y"}, "branch");
    onnx::GraphProto* t = graph_attr(node, "then_branch");
    add_node(t, "NoSuchOp", {"x"}, {"a"}, "mystery");
    typed(t->add_output(), "a", onnx::TensorProto::FLOAT);
    onnx::GraphProto* e = graph_attr(node, "else_branch");
    add_node(e, "Relu", {"x"}, {"r"}, "relu");
    typed(e->add_output(), "r", onnx::TensorProto::FLOAT);
    b.output("y");
    auto model = rt->load_model(b.save(dir, "unknown.onnx"));
    ASSERT_FALSE(model.ok());
    EXPECT_ERROR_HAS(model.status(), "node 'mystery' (NoSuchOp)", "unsupported operator");
  }
  {  // A branch whose output type contradicts what the model declares.
    bt::ModelBuilder b(13, "mistyped");
    b.input("c", std::vector<bt::Dim>{}, onnx::TensorProto::BOOL);
    b.init_i64("k", {1}, {7});
    auto& node = b.node("If", {"c"}, {"y"}, "branch");
    onnx::GraphProto* t = graph_attr(node, "then_branch");
    add_node(t, "Identity", {"k"}, {"a"}, "ti");
    typed(t->add_output(), "a", onnx::TensorProto::INT64);
    onnx::GraphProto* e = graph_attr(node, "else_branch");
    add_node(e, "Identity", {"k"}, {"b"}, "ei");
    typed(e->add_output(), "b", onnx::TensorProto::INT64);
    b.output("y");  // declared float32
    auto model = rt->load_model(b.save(dir, "mistyped.onnx"));
    ASSERT_TRUE(model.ok()) << model.status().message();
    auto session = (*model)->create_session();
    ASSERT_TRUE((*session)->set_input("c", boolean(true)).ok());
    Status st = (*session)->run();
    EXPECT_ERROR_HAS(st, "node 'branch' (If)", "declared float32", "int64");
  }
}

// Scan (opset 9): running sum over the rows of x, state [2], scan output the
// partial sums.
TEST(Staged, ScanSlicesItsInputsAndStacksItsOutputs) {
  bt::TempDir dir;
  bt::ModelBuilder b(11, "scan_model");
  b.input("x", {"rows", 2});
  b.init_f32("s0", {2}, {0.f, 0.f});
  auto& node = b.node("Scan", {"s0", "x"}, {"s", "partial"}, "scan");
  bt::set_int(node, "num_scan_inputs", 1);
  onnx::GraphProto* body = graph_attr(node, "body");
  body->set_name("scan_body");
  typed(body->add_input(), "s_in", onnx::TensorProto::FLOAT, std::vector<bt::Dim>{2});
  typed(body->add_input(), "row", onnx::TensorProto::FLOAT, std::vector<bt::Dim>{2});
  add_node(body, "Add", {"s_in", "row"}, {"s_out"}, "add");
  add_node(body, "Identity", {"s_out"}, {"p"}, "partial");
  typed(body->add_output(), "s_out", onnx::TensorProto::FLOAT);
  typed(body->add_output(), "p", onnx::TensorProto::FLOAT);
  b.output("s");
  b.output("partial");
  auto rt = runtime();
  auto model = rt->load_model(b.save(dir));
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  Session& s = **session;
  ASSERT_TRUE(s.set_input("x", floats({3, 2}, {1, 2, 3, 4, 5, 6})).ok());
  Status st = s.run();
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(values_f(s.output(0)), (std::vector<float>{9, 12}));
  EXPECT_EQ(s.output(1).shape(), (Shape{3, 2}));
  EXPECT_EQ(values_f(s.output(1)), (std::vector<float>{1, 2, 4, 6, 9, 12}));
}

// Sequences in and out through set_input_value / get_output_value:
// y = SequenceInsert(seq, x) and n = SequenceLength(y), z = ConcatFromSequence(y).
TEST(Staged, SequencesPassThroughThePublicApi) {
  bt::TempDir dir;
  bt::ModelBuilder b(13, "seq_model");
  onnx::ValueInfoProto* in = b.graph().add_input();
  in->set_name("seq");
  in->mutable_type()
      ->mutable_sequence_type()
      ->mutable_elem_type()
      ->mutable_tensor_type()
      ->set_elem_type(onnx::TensorProto::FLOAT);
  b.input("x", {"n"});
  b.node("SequenceInsert", {"seq", "x"}, {"y"}, "insert");
  b.node("SequenceLength", {"y"}, {"len"}, "length");
  bt::set_int(b.node("ConcatFromSequence", {"y"}, {"z"}, "concat"), "axis", 0);
  onnx::ValueInfoProto* out = b.graph().add_output();
  out->set_name("y");
  *out->mutable_type() = in->type();
  b.output("len", std::vector<bt::Dim>{}, onnx::TensorProto::INT64);
  b.output("z");
  auto rt = runtime();
  auto model = rt->load_model(b.save(dir));
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->inputs()[0].kind, TensorInfo::Kind::kSequence);
  EXPECT_EQ((*model)->outputs()[0].kind, TensorInfo::Kind::kSequence);
  auto session = (*model)->create_session();
  Session& s = **session;
  EXPECT_FALSE(s.set_input("seq", floats({1}, {1})).ok());  // a sequence, not a tensor
  ASSERT_TRUE(
      s.set_input_value(
           "seq", AnyValue::of_sequence({floats({2}, {1, 2}), floats({1}, {3})}, DType::kFloat32))
          .ok());
  ASSERT_TRUE(s.set_input("x", floats({2}, {4, 5})).ok());
  Status st = s.run();
  ASSERT_TRUE(st.ok()) << st.message();
  auto y = s.get_output_value("y");
  ASSERT_TRUE(y.ok());
  ASSERT_EQ(y->kind, AnyValue::Kind::kSequence);
  ASSERT_EQ(y->sequence.size(), 3u);
  EXPECT_EQ(values_f(y->sequence[2]), (std::vector<float>{4, 5}));
  EXPECT_EQ(values_i(s.output(1)), (std::vector<int64_t>{3}));
  EXPECT_EQ(values_f(s.output(2)), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_ERROR_HAS(s.get_output("y").status(), "sequence", "get_output_value");
}

}  // namespace
}  // namespace backplane
