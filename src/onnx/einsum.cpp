// einsum.cpp — Einsum as Transpose/ReduceSum/Unsqueeze/MatMul/Squeeze
// (einsum.hpp).
#include "onnx/einsum.hpp"

#include "onnx/proto_rewrite.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace backplane::onnx_import {
namespace {

// The terms of an equation this rewrite covers, or false.
bool parse(std::string eq, int operands, std::vector<std::string>* terms, std::string* out) {
  eq.erase(std::remove_if(eq.begin(), eq.end(), [](unsigned char c) { return std::isspace(c); }),
           eq.end());
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  terms->clear();
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms->push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (static_cast<int>(terms->size()) != operands) return false;
  auto letters_only = [](const std::string& t) {
    for (size_t i = 0; i < t.size(); ++i)
      if (!std::isalpha(static_cast<unsigned char>(t[i])) || t.find(t[i], i + 1) != std::string::npos)
        return false;  // "...", a digit, or a repeated letter (a diagonal)
    return true;
  };
  for (const std::string& t : *terms)
    if (!letters_only(t)) return false;
  std::string all;
  for (const std::string& t : *terms) all += t;
  if (arrow != std::string::npos) {
    *out = eq.substr(arrow + 2);
    if (!letters_only(*out)) return false;
    for (char c : *out)
      if (all.find(c) == std::string::npos) return false;  // invalid: the importer says why
  } else {  // implicit: the letters used once, in alphabetical order
    out->clear();
    for (char c : all)
      if (std::count(all.begin(), all.end(), c) == 1) *out += c;
    std::sort(out->begin(), out->end());
  }
  return true;
}

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// The permutation taking letters `from` to the order of `to`.
std::vector<int64_t> permutation(const std::string& from, const std::string& to) {
  std::vector<int64_t> perm;
  for (char c : to) perm.push_back(static_cast<int64_t>(from.find(c)));
  return perm;
}

// Sums out of `term` (operand `x`) the letters in none of `keep`; returns
// the operand and its letters after.
std::pair<std::string, std::string> sum_out(NodeEmitter& e, const std::string& x,
                                            const std::string& term, const std::string& keep) {
  std::vector<int64_t> axes;
  std::string left;
  for (size_t i = 0; i < term.size(); ++i) {
    if (has(keep, term[i])) left += term[i];
    else axes.push_back(static_cast<int64_t>(i));
  }
  return {e.axes_op("ReduceSum", x, axes, 0), left};
}

// Operand `x` (letters `term`) laid out as `target`: its letters in that
// order, and a dim of 1 where `target` has a letter it lacks or a 0.
std::string place(NodeEmitter& e, const std::string& x, const std::string& term,
                  const std::string& target) {
  std::string present;
  std::vector<int64_t> ones;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] != 0 && has(term, target[i])) present += target[i];
    else ones.push_back(static_cast<int64_t>(i));
  }
  return e.axes_op("Unsqueeze", e.transpose(x, permutation(term, present)), ones);
}

// The rewrite of one Einsum node, or empty when the rule does not cover it.
std::vector<onnx::NodeProto> rewrite(const onnx::NodeProto& n, int64_t opset) {
  if (n.output_size() != 1 || n.output(0).empty() || n.input_size() < 1 || n.input_size() > 2)
    return {};
  std::string eq;
  for (const onnx::AttributeProto& a : n.attribute())
    if (a.name() == "equation") eq = a.s();
  std::vector<std::string> terms;
  std::string out;
  if (!parse(eq, n.input_size(), &terms, &out)) return {};
  NodeEmitter e(n, opset);
  if (terms.size() == 1) {
    auto [x, letters] = sum_out(e, n.input(0), terms[0], out);
    return e.finish(e.transpose(x, permutation(letters, out)), n.output(0));
  }
  // Letters of one operand only (not in the output) are summed first.
  auto [a, ta] = sum_out(e, n.input(0), terms[0], terms[1] + out);
  auto [b, tb] = sum_out(e, n.input(1), terms[1], terms[0] + out);
  // A matrix product [batch.., rows, k] x [batch.., k, cols]: the output's
  // last letter of the first operand only is the rows, its last of the
  // second only the columns, and every other output letter a batch dim
  // (one operand lacking it has it as a dim of 1, which MatMul broadcasts).
  char row = 0, col = 0, k = 0;
  for (char c : out) {
    if (has(ta, c) && !has(tb, c)) row = c;
    if (has(tb, c) && !has(ta, c)) col = c;
  }
  for (char c : ta) {
    if (!has(tb, c) || has(out, c)) continue;
    if (k != 0) return {};  // two contracted letters would need a Reshape
    k = c;
  }
  std::string batch;
  for (char c : out)
    if (c != row && c != col) batch += c;
  a = place(e, a, ta, batch + std::string{row, k});
  b = place(e, b, tb, batch + std::string{k, col});
  std::vector<int64_t> squeeze;
  const int64_t nb = static_cast<int64_t>(batch.size());
  if (row == 0) squeeze.push_back(nb);
  if (col == 0) squeeze.push_back(nb + 1);
  const std::string product = e.axes_op("Squeeze", e.op("MatMul", {a, b}), squeeze);
  std::string letters = batch;
  for (char c : {row, col})
    if (c != 0) letters += c;
  return e.finish(e.transpose(product, permutation(letters, out)), n.output(0));
}

}  // namespace

int decompose_einsums(onnx::ModelProto& model) {
  const int64_t opset = default_opset(model);
  if (opset < 12 || !model.has_graph())
    return 0;  // no Einsum before opset 12 (the importer says so)
  if (!any_node(model.graph(), [](const onnx::NodeProto& n) { return n.op_type() == "Einsum"; }))
    return 0;
  const DeclaredTypes types(model.graph());
  return replace_nodes(*model.mutable_graph(), [&](const onnx::NodeProto& n) {
    if (n.op_type() != "Einsum" || (!n.domain().empty() && n.domain() != "ai.onnx"))
      return std::vector<onnx::NodeProto>{};
    // float32 only: what it becomes runs on CpuOneDnn, which takes float32;
    // another dtype's Einsum runs whole on CpuRef, which takes every type
    // Einsum does (MatMul takes fewer: no 8- or 16-bit integers). ONNX gives
    // every operand and the result one type, so one whose type is found
    // tells the others' (an operand read from a sequence, say); types found
    // to differ leave the node whole, for type checking to reject.
    int32_t type = 0;
    bool differ = false;
    for (const std::string& v : n.input())
      if (const int32_t t = types.elem_type(v); t != 0) {
        differ = differ || (type != 0 && t != type);
        type = t;
      }
    if (type != onnx::TensorProto::FLOAT || differ) return std::vector<onnx::NodeProto>{};
    return rewrite(n, opset);
  });
}

}  // namespace backplane::onnx_import
