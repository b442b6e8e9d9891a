// float16.hpp — a float16 model computed in float32.
#pragma once

#include "ir/graph.hpp"

#include <string>

namespace backplane::ir {

// No backend computes products (Conv, ConvTranspose, MatMul, Gemm, Einsum,
// the recurrent operators) in float16, so a model whose products compute it
// (a model converted to float16 for its size) runs in float32, as ONNX
// Runtime's CPU provider runs the float16 operators it has no kernel for:
// float16 constants (initializers, Constant and ConstantOfShape values)
// become float32, a Cast to float16 casts to float32, and the values between
// nodes become float32; a float16 graph input is cast to float32 where it is
// read, a float16 graph output cast back where it is written, so the model's
// interface is unchanged. The results are the float32 computation's: closer
// to the exact ones than rounding every value to float16 gives, and apart
// from a runtime that rounds so by about float16's precision (2^-11). A graph
// whose float16 is elementwise only is left to the backends that compute it.
//
// Returns how many values changed type (0: the graph is unchanged: it has no
// product in float16, or it has something this does not rewrite, which is
// said in *why_not: a control-flow body, an operator's float16 `dtype`, an
// operator of another domain).
int compute_float16_in_float32(Graph& graph, std::string* why_not);

}  // namespace backplane::ir
