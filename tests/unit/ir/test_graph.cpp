// Graph IR: topological sort, dead-code removal, verification, attributes.
#include "ir/graph.hpp"

#include <gtest/gtest.h>

namespace backplane::ir {
namespace {

int add(Graph& g, const std::string& name) {
  Value v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.shape = {2};
  v.has_shape = true;
  return g.add_value(v);
}

Node node(const std::string& name, const std::string& op, std::vector<int> in,
          std::vector<int> out) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

TEST(Graph, TopoSortOrdersProducersFirstAndKeepsFileOrderOtherwise) {
  Graph g;
  int x = add(g, "x"), a = add(g, "a"), b = add(g, "b"), c = add(g, "c");
  g.inputs = {x};
  g.outputs = {c};
  g.nodes.push_back(node("second", "Relu", {a}, {b}));
  g.nodes.push_back(node("first", "Relu", {x}, {a}));
  g.nodes.push_back(node("third", "Relu", {b}, {c}));
  ASSERT_TRUE(g.topo_sort().ok());
  EXPECT_EQ(g.nodes[0].name, "first");
  EXPECT_EQ(g.nodes[1].name, "second");
  EXPECT_EQ(g.nodes[2].name, "third");
  EXPECT_EQ(g.values[c].producer, 2);
  EXPECT_TRUE(verify(g).ok());
}

TEST(Graph, TopoSortReportsCycleAndUndefinedInput) {
  Graph g;
  int a = add(g, "a"), b = add(g, "b");
  g.outputs = {b};
  g.nodes.push_back(node("n1", "Relu", {a}, {b}));
  g.nodes.push_back(node("n2", "Relu", {b}, {a}));
  Status s = g.topo_sort();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cycle"), std::string::npos) << s.message();

  Graph h;
  int u = add(h, "undefined_value"), o = add(h, "o");
  h.outputs = {o};
  h.nodes.push_back(node("reader", "Relu", {u}, {o}));
  s = h.topo_sort();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("undefined_value"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("reader"), std::string::npos) << s.message();
}

// A graph already in order keeps its order (the short path), with every
// value's producer set; a node reading its own output is still a cycle.
TEST(Graph, TopoSortOfASortedGraphKeepsItAndSetsProducers) {
  Graph g;
  int x = add(g, "x"), a = add(g, "a"), b = add(g, "b");
  g.inputs = {x};
  g.outputs = {b};
  g.nodes.push_back(node("first", "Relu", {x}, {a}));
  g.nodes.push_back(node("second", "Add", {a, x}, {b}));
  g.values[a].producer = 7;  // stale
  ASSERT_TRUE(g.topo_sort().ok());
  EXPECT_EQ(g.nodes[0].name, "first");
  EXPECT_EQ(g.nodes[1].name, "second");
  EXPECT_EQ(g.values[a].producer, 0);
  EXPECT_EQ(g.values[b].producer, 1);
  EXPECT_EQ(g.values[x].producer, -1);

  Graph h;
  int y = add(h, "y"), z = add(h, "z");
  h.outputs = {z};
  h.nodes.push_back(node("loop", "Add", {y, z}, {z}));
  h.inputs = {y};
  Status s = h.topo_sort();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cycle"), std::string::npos) << s.message();
}

TEST(Graph, RemoveDeadDropsUnusedNodesAndConstants) {
  Graph g;
  int x = add(g, "x"), y = add(g, "y"), unused = add(g, "unused");
  int w = g.add_constant("w", Tensor(DType::kFloat32, {2}));
  g.inputs = {x};
  g.outputs = {y};
  g.nodes.push_back(node("live", "Relu", {x}, {y}));
  g.nodes.push_back(node("dead", "Add", {x, w}, {unused}));
  ASSERT_TRUE(g.topo_sort().ok());
  g.remove_dead();
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].name, "live");
  EXPECT_EQ(g.constants.count("w"), 0u);
  EXPECT_FALSE(g.values[w].is_constant());
}

TEST(Graph, VerifyRejectsOutputNobodyProduces) {
  Graph g;
  int x = add(g, "x"), y = add(g, "y");
  g.inputs = {x};
  g.outputs = {y};
  Status s = verify(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'y'"), std::string::npos);
}

TEST(Graph, AttributeGettersCheckTypes) {
  Node n = node("conv0", "Conv", {}, {});
  Attribute strides;
  strides.name = "strides";
  strides.type = AttrType::kFloats;
  strides.floats = {1.0f, 1.0f};
  n.attributes.push_back(strides);
  auto r = n.attr_ints("strides");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("conv0"), std::string::npos);
  EXPECT_NE(r.status().message().find("strides"), std::string::npos);
  EXPECT_NE(r.status().message().find("FLOATS"), std::string::npos);
  auto d = n.attr_int("group", 1);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, 1);
}

}  // namespace
}  // namespace backplane::ir
