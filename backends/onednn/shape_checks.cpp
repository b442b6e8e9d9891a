// shape_checks.cpp — each node's output shape against what its inputs give.
#include "onednn/shape_checks.hpp"

#include "onednn/support.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace backplane::onednn {
namespace {

using sdk::shape_str;

int64_t count(const Dims& d) { return sdk::element_count(d); }

// Numpy broadcasting of a and b; false if they do not broadcast.
bool broadcast(const Dims& a, const Dims& b, Dims& out) {
  const size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 0);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = padded_dim(a, rank, i), db = padded_dim(b, rank, i);
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

class Checker {
 public:
  Checker(ViewInfo& g, int n) : g_(g), n_(n), y_(g.shape(g.out(n))) {}

  const Dims& x(size_t i = 0) const { return g_.shape(g_.in(n_, i)); }
  bool has(size_t i) const { return g_.in(n_, i) >= 0 && i < g_.num_in(n_); }
  const Dims& y() const { return y_; }

  // `why` says what is wrong: a string, or a callable making one, so that
  // messages are built only when a check fails (the checks run for every
  // node of every instance a new shape lowers).
  template <class Why>
  void expect(bool ok, Why&& why) const {
    if (ok) return;
    if constexpr (std::is_invocable_v<Why>) fail_with(why());
    else fail_with(std::string(why));
  }
  [[noreturn]] void fail_with(const std::string& what) const {
    std::string inputs;
    for (size_t i = 0; i < g_.num_in(n_); ++i) {
      if (g_.in(n_, i) < 0) continue;
      if (!inputs.empty()) inputs += ", ";
      inputs += '\'';
      inputs += g_.value_name(g_.in(n_, i));
      inputs += "' ";
      inputs += shape_str(x(i));
    }
    throw sdk::invalid(g_.describe(n_) + ": " + what + " (inputs " + inputs + ", output '" +
                       g_.value_name(g_.out(n_)) + "' " + shape_str(y_) + ")");
  }
  void expect_y(const Dims& want) const {
    expect(y_ == want, [&] { return "the output shape should be " + shape_str(want); });
  }

  void same() const { expect_y(x()); }
  void params_of(size_t first, size_t last, int64_t want, const char* what) const {
    for (size_t i = first; i <= last; ++i)
      if (has(i))
        expect(count(x(i)) == want, [&] {
          return std::string(what) + " has " + std::to_string(count(x(i))) + " values, not " +
                 std::to_string(want);
        });
  }

  void binary() const {
    Dims out;
    expect(broadcast(x(0), x(1), out), "the operands do not broadcast");
    expect_y(out);
  }

  // A MatMul, or one of its quantized forms with its operands at `ai`, `bi`.
  void matmul(size_t ai = 0, size_t bi = 1) const {
    const Dims &a = x(ai), &b = x(bi);
    expect(a.size() >= 2 && b.size() >= 2, "MatMul operands need 2 dims or more");
    expect(a.back() == b[b.size() - 2], "the inner dims of the operands differ");
    Dims batch;
    expect(broadcast(Dims(a.begin(), a.end() - 2), Dims(b.begin(), b.end() - 2), batch),
           "the batch dims do not broadcast");
    batch.push_back(a[a.size() - 2]);
    batch.push_back(b.back());
    expect_y(batch);
  }

  void gemm() const {
    const Dims &a = x(0), &b = x(1);
    expect(a.size() == 2 && b.size() == 2, "Gemm operands need 2 dims");
    const bool tb = g_.node(n_).attr_int("transB", 0) != 0;
    expect(a[1] == (tb ? b[1] : b[0]), "the inner dims of A and B differ");
    expect_y({a[0], tb ? b[0] : b[1]});
  }

  // A Conv, or one of its quantized forms with its input, weights and bias
  // at `xi`, `wi` and `bi`.
  void conv(size_t xi = 0, size_t wi = 1, size_t bi = 2) const {
    const Dims &xs = x(xi), &ws = x(wi);
    const int64_t group = g_.node(n_).attr_int("group", 1);
    expect(xs.size() == ws.size() && y_.size() == xs.size(), "input, weights, output ranks differ");
    expect(xs[1] == ws[1] * group, [&] {
      return "the input has " + std::to_string(xs[1]) + " channels, the weights expect " +
             std::to_string(ws[1] * group);
    });
    expect(y_[0] == xs[0] && y_[1] == ws[0], "batch or output channels differ");
    params_of(bi, bi, ws[0], "the bias");
  }

  void pool(bool global) const {
    expect(y_.size() == x().size() && y_[0] == x()[0] && y_[1] == x()[1],
           "batch or channels differ");
    if (global)
      for (size_t i = 2; i < y_.size(); ++i)
        expect(y_[i] == 1, "a global pool's spatial dims are 1");
  }

  void concat() const {
    const size_t rank = y_.size();
    int64_t axis = g_.node(n_).attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(rank);
    expect(axis >= 0 && axis < static_cast<int64_t>(rank), "axis out of range");
    Dims want = x(0);
    expect(want.size() == rank, "inputs of another rank than the output");
    want[axis] = 0;
    for (size_t i = 0; i < g_.num_in(n_); ++i) {
      Dims xi = x(i);
      expect(xi.size() == rank, "inputs of another rank than the output");
      want[axis] += xi[axis];
      xi[axis] = want[axis];
      expect(xi == want, [&] { return "inputs differ outside axis " + std::to_string(axis); });
    }
    expect_y(want);
  }

  void reduce() const {
    const int64_t rank = static_cast<int64_t>(x().size());
    std::vector<int64_t> axes;
    if (has(1)) axes = g_.ints(g_.in(n_, 1)).value_or(std::vector<int64_t>{});
    else axes = g_.node(n_).attr_ints("axes", {});
    if (axes.empty())
      for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    std::vector<bool> reduced(static_cast<size_t>(rank), false);
    for (int64_t a : axes) {
      const int64_t k = a < 0 ? a + rank : a;
      expect(k >= 0 && k < rank, [&] { return "axis " + std::to_string(a) + " out of range"; });
      reduced[static_cast<size_t>(k)] = true;
    }
    const bool keep = g_.node(n_).attr_int("keepdims", 1) != 0;
    Dims want;
    for (int64_t i = 0; i < rank; ++i) {
      if (!reduced[i]) want.push_back(x()[i]);
      else if (keep) want.push_back(1);
    }
    expect_y(want);
  }

  void transpose() const {
    const int64_t rank = static_cast<int64_t>(x().size());
    std::vector<int64_t> perm = g_.node(n_).attr_ints("perm", {});
    if (perm.empty())
      for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
    expect(static_cast<int64_t>(perm.size()) == rank, "perm does not match the input rank");
    Dims want;
    for (int64_t p : perm) {
      const int64_t k = p < 0 ? p + rank : p;
      expect(k >= 0 && k < rank, "perm out of range");
      want.push_back(x()[static_cast<size_t>(k)]);
    }
    expect_y(want);
  }

  // ---- data movement (lowering_data.cpp) ----

  int64_t axis_of(int64_t a, size_t rank) const {
    const int64_t k = a < 0 ? a + static_cast<int64_t>(rank) : a;
    expect(k >= 0 && k < static_cast<int64_t>(rank),
           [&] { return "axis " + std::to_string(a) + " out of range"; });
    return k;
  }
  std::vector<int64_t> ints_of(size_t i) const {
    return has(i) ? g_.ints(g_.in(n_, i)).value_or(std::vector<int64_t>{}) : std::vector<int64_t>{};
  }

  void slice() const {
    const std::vector<int64_t> starts = ints_of(1), ends = ints_of(2);
    std::vector<int64_t> axes = ints_of(3), steps = ints_of(4);
    expect(starts.size() == ends.size(), "starts and ends differ in length");
    if (steps.empty()) steps.assign(starts.size(), 1);
    expect(steps.size() == starts.size(), "steps and starts differ in length");
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    expect(axes.size() == starts.size(), "axes and starts differ in length");
    Dims want = x();
    for (size_t i = 0; i < axes.size(); ++i) {
      const size_t a = static_cast<size_t>(axis_of(axes[i], want.size()));
      const int64_t dim = x()[a];
      auto clamp = [dim](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
      const int64_t s = clamp(starts[i]), e = clamp(ends[i]);
      expect(steps[i] >= 1, "a step below 1");
      want[a] = e > s ? (e - s + steps[i] - 1) / steps[i] : 0;
    }
    expect_y(want);
  }

  void split() const {
    const size_t a = static_cast<size_t>(axis_of(g_.node(n_).attr_int("axis", 0), x().size()));
    int64_t total = 0;
    for (size_t i = 0; i < g_.num_out(n_); ++i) {
      Dims yi = g_.shape(g_.out(n_, i));
      expect(yi.size() == x().size(), "an output of another rank than the input");
      total += yi[a];
      yi[a] = x()[a];
      expect(yi == x(), "an output differs from the input outside the split axis");
    }
    expect(total == x()[a], "the outputs do not add up to the input along the split axis");
  }

  void pad() const {
    const size_t rank = x().size();
    std::vector<int64_t> pads =
        g_.node(n_).opset() < 11 ? g_.node(n_).attr_ints("pads") : ints_of(1);
    std::vector<int64_t> axes = g_.node(n_).opset() < 11 ? std::vector<int64_t>{} : ints_of(3);
    if (axes.empty())
      for (size_t i = 0; i < rank; ++i) axes.push_back(static_cast<int64_t>(i));
    expect(pads.size() == 2 * axes.size(), "pads do not match the axes");
    Dims want = x();
    for (size_t i = 0; i < axes.size(); ++i)
      want[static_cast<size_t>(axis_of(axes[i], rank))] += pads[i] + pads[axes.size() + i];
    expect_y(want);
  }

  void gather() const {
    const size_t a = static_cast<size_t>(axis_of(g_.node(n_).attr_int("axis", 0), x().size()));
    Dims want(x().begin(), x().begin() + static_cast<std::ptrdiff_t>(a));
    for (int64_t d : x(1)) want.push_back(d);
    want.insert(want.end(), x().begin() + static_cast<std::ptrdiff_t>(a) + 1, x().end());
    expect_y(want);
  }

  // The batch and channels stay (check_resize); the spatial dims follow the
  // constant sizes, or the scales (their product with the input's dims).
  void resize() const {
    const Dims& xs = x();
    expect(y_.size() == xs.size() && y_.size() >= 2 && y_[0] == xs[0] && y_[1] == xs[1],
           "batch or channels differ");
    if (has(3)) {
      const std::vector<int64_t> sizes = ints_of(3);
      expect(sizes.empty() || Dims(sizes) == y_, "the output shape is not the sizes");
    }
  }

  void prelu() const {
    Dims out;
    expect(broadcast(x(0), x(1), out) && out == x(0), "the slope does not broadcast to the input");
    same();
  }

 private:
  ViewInfo& g_;
  int n_;
  const Dims& y_;
};

}  // namespace

void check_shapes(ViewInfo& g, int n) {
  Checker c(g, n);
  const std::string_view op = g.op(n);
  if (op == "MatMul") return c.matmul();
  if (op == "Gemm") return c.gemm();
  if (op == "Conv") return c.conv();
  // The quantized products (int8 groups): their operands where ONNX puts them.
  if (op == "QLinearMatMul") return c.matmul(0, 3);
  if (op == "MatMulInteger") return c.matmul(0, 1);
  if (op == "QLinearConv") return c.conv(0, 3, 8);
  if (op == "ConvInteger") return c.conv(0, 1, SIZE_MAX);
  if (op == "ConvTranspose") {  // support.cpp's check_conv_transpose checks its window
    c.expect(c.y().size() == c.x().size() && !c.x().empty() && c.y()[0] == c.x()[0],
             "the output's rank or batch differs from the input's");
    return;
  }
  if (op == "MaxPool" || op == "AveragePool") return c.pool(false);
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") return c.pool(true);
  if (op == "Concat") return c.concat();
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") return c.reduce();
  if (op == "Transpose") return c.transpose();
  if (op == "Slice") return c.slice();
  if (op == "Split") return c.split();
  if (op == "Pad") return c.pad();
  if (op == "Gather") return c.gather();
  if (op == "GatherBlockQuantized") {  // indices' shape and the table's width
    const Dims& table = g.shape(g.in(n, 0));
    const Dims& indices = g.shape(g.in(n, 1));
    c.expect(table.size() == 2 && c.y().size() == indices.size() + 1 &&
                 std::equal(indices.begin(), indices.end(), c.y().begin()) &&
                 c.y().back() == 2 * table[1],
             "the output is not a row of the table per index");
    return;
  }
  if (op == "MatMulNBits") {
    c.expect(!c.x().empty() && c.y().size() == c.x().size() &&
                 std::equal(c.x().begin(), c.x().end() - 1, c.y().begin()) &&
                 c.y().back() == g.node(n).attr_int("N", 0),
             "the output is not A's rows by N");
    return;
  }
  if (op == "PRelu") return c.prelu();
  if (op == "Resize") return c.resize();
  if (binary_ops().count(op)) return c.binary();
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
    c.expect(count(c.y()) == count(c.x()), "the output has another number of elements");
    return;
  }
  // What remains keeps its input's shape: activations, Softmax, Identity,
  // Dropout, and the normalizations (whose parameters must fit the input).
  c.same();
  if (op == "LayerNormalization" && !c.x().empty())
    c.params_of(1, 2, c.x().back(), "scale or bias");
  if (op == "BatchNormalization" && c.x().size() >= 2)
    c.params_of(1, 4, c.x()[1], "a statistic or parameter");
  if (op == "Pow" || op == "Clip")
    for (size_t i = 1; i < g.num_in(n); ++i)
      c.expect(!c.has(i) || count(c.x(i)) == 1, "an operand that should be a scalar is not");
}

}  // namespace backplane::onednn
