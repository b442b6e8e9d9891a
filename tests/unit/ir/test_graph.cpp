// Graph IR: topological sort, dead-code removal, common subexpressions,
// verification, attributes.
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

TEST(Graph, CommonSubexpressionsRunOnce) {
  // Two Unsqueezes of x by equal axes from separate constants (merged), two
  // Adds of them with different operands, a RandomNormalLike twice, and a
  // Relu of x, then one that writes a graph output (none of those merged).
  Graph g;
  const int x = add(g, "x");
  g.inputs = {x};
  auto constant = [&](const std::string& name, int64_t v) {
    Tensor t(DType::kInt64, {1});
    t.data_as<int64_t>()[0] = v;
    return g.add_constant(name, t);
  };
  const int axes1 = constant("axes1", 0), axes2 = constant("axes2", 0), two = constant("two", 2);
  const int u1 = add(g, "u1"), u2 = add(g, "u2"), s1 = add(g, "s1"), s2 = add(g, "s2");
  const int r1 = add(g, "r1"), r2 = add(g, "r2"), out = add(g, "out"), kept = add(g, "kept");
  const int y = add(g, "y"), z = add(g, "z"), rand = add(g, "rand");
  g.nodes.push_back(node("u1", "Unsqueeze", {x, axes1}, {u1}));
  g.nodes.push_back(node("u2", "Unsqueeze", {x, axes2}, {u2}));
  g.nodes.push_back(node("s1", "Add", {u1, u1}, {s1}));
  g.nodes.push_back(node("s2", "Add", {u2, two}, {s2}));
  g.nodes.push_back(node("r1", "RandomNormalLike", {x}, {r1}));
  g.nodes.push_back(node("r2", "RandomNormalLike", {x}, {r2}));
  g.nodes.push_back(node("kept", "Relu", {x}, {kept}));
  g.nodes.push_back(node("out", "Relu", {x}, {out}));
  g.nodes.push_back(node("y", "Sum", {s1, s2, kept}, {y}));
  g.nodes.push_back(node("rand", "Sum", {r1, r2}, {rand}));
  g.nodes.push_back(node("z", "Add", {y, rand}, {z}));
  g.outputs = {z, out};
  ASSERT_TRUE(g.topo_sort().ok());
  EXPECT_EQ(merge_common_subexpressions(g), 1);
  std::vector<std::string> names;
  for (const Node& n : g.nodes) names.push_back(n.name);
  EXPECT_EQ(names, (std::vector<std::string>{"u1", "s1", "s2", "r1", "r2", "kept", "out", "y",
                                             "rand", "z"}));
  EXPECT_EQ(g.nodes[2].inputs[0], u1);  // s2 reads u1 now
  EXPECT_EQ(merge_common_subexpressions(g), 0);
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
