// shape_models.hpp — the models of the artifact tests about input shapes:
// one with symbolic dims whose shape arithmetic folds differently for every
// signature, and the one the checked-in format 1.0 artifact was compiled from.
#pragma once

#include "support/model_builder.hpp"

#include <string>

namespace backplane::artifact_test {

using test::set_int;
using test::set_ints;

// x[batch, seq, 16] -> MatMul(16x32) -> Add -> Relu -> h[batch, seq, 32];
// Reshape(h, [batch*seq, 32]) -> Gemm(32->16) -> Reshape(back to
// [batch, seq*16]) -> Softmax -> y. Both Reshape targets are computed from
// Shape(x) (Shape -> Gather -> Mul / Concat), so every signature folds its
// own constants. Weights: ~3 KB.
inline void write_seq_model(const std::string& path) {
  test::ModelBuilder b(13, "seq_model");
  b.input("x", {"batch", "seq", 16});
  b.random_weight("w1", {16, 32}).random_weight("b1", {32});
  b.random_weight("w2", {16, 32}).random_weight("b2", {16});
  b.init_i64("i0", {1}, {0}).init_i64("i1", {1}, {1});
  b.init_i64("c32", {1}, {32}).init_i64("c16", {1}, {16}).init_i64("minus1", {1}, {-1});
  b.node("MatMul", {"x", "w1"}, {"m"}, "matmul");
  b.node("Add", {"m", "b1"}, {"a"}, "add");
  b.node("Relu", {"a"}, {"h"}, "relu");
  b.node("Shape", {"x"}, {"s"}, "shape");
  set_int(b.node("Gather", {"s", "i0"}, {"bdim"}, "gather_batch"), "axis", 0);
  set_int(b.node("Gather", {"s", "i1"}, {"sdim"}, "gather_seq"), "axis", 0);
  b.node("Mul", {"bdim", "sdim"}, {"rows"}, "rows");
  set_int(b.node("Concat", {"rows", "c32"}, {"flat_shape"}, "flat_shape"), "axis", 0);
  b.node("Reshape", {"h", "flat_shape"}, {"flat"}, "flatten");
  set_int(b.node("Gemm", {"flat", "w2", "b2"}, {"g"}, "fc"), "transB", 1);
  set_int(b.node("Concat", {"bdim", "minus1"}, {"out_shape"}, "out_shape"), "axis", 0);
  b.node("Reshape", {"g", "out_shape"}, {"r"}, "unflatten");
  set_int(b.node("Softmax", {"r"}, {"y"}, "softmax"), "axis", -1);
  b.output("y", {"batch", -1});
  b.save_as(path);
}

// What tests/artifact/data/small_1_0.bpk was compiled from (on CpuRef, by
// the format 1.0 writer): x[1,3,8,8] -> Conv -> Relu -> Reshape to
// [Shape(x)[0], -1] -> Gemm(256->10) -> Softmax -> y[1,10]. Never change it:
// the checked-in file holds its weights.
inline void write_v10_model(const std::string& path) {
  test::ModelBuilder b(13, "small_1_0");
  b.input("x", {1, 3, 8, 8});
  b.random_weight("conv_w", {4, 3, 3, 3}).random_weight("conv_b", {4});
  b.random_weight("fc_w", {10, 256}).random_weight("fc_b", {10});
  b.init_i64("i0", {1}, {0}).init_i64("minus1", {1}, {-1});
  auto& conv = b.node("Conv", {"x", "conv_w", "conv_b"}, {"c"}, "conv");
  set_ints(conv, "kernel_shape", {3, 3});
  set_ints(conv, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"}, "relu");
  b.node("Shape", {"x"}, {"s"}, "shape");
  set_int(b.node("Gather", {"s", "i0"}, {"n"}, "gather"), "axis", 0);
  set_int(b.node("Concat", {"n", "minus1"}, {"target"}, "target"), "axis", 0);
  b.node("Reshape", {"r", "target"}, {"f"}, "flatten");
  set_int(b.node("Gemm", {"f", "fc_w", "fc_b"}, {"g"}, "fc"), "transB", 1);
  set_int(b.node("Softmax", {"g"}, {"y"}, "softmax"), "axis", 1);
  b.output("y", {1, 10});
  b.save_as(path);
}

}  // namespace backplane::artifact_test
