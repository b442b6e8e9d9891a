// einsum.hpp — Einsum rewritten at import into the operators every fast
// backend has (Transpose, ReduceSum, Unsqueeze, MatMul, Squeeze), as ONNX
// Runtime's own Einsum kernel does inside itself.
//
// An Einsum of one or two operands whose equation names every axis with a
// letter (no "..."), repeats no letter within a term, and contracts at most
// one letter: letters of one operand only are summed first (ReduceSum);
// then the output's last letter of the first operand only is the rows of a
// MatMul, its last of the second only the columns, the contracted letter
// its inner dim, and every other output letter a batch dim, which an
// operand that lacks it gets as a dim of 1 (MatMul broadcasts it).
// Attention written as einsum (torchvision's MaxViT "bghid,bghjd->bghij"),
// a Linear layer ("bsh,hd->bsd"), outer and inner products, transposes and
// sums are of this kind. Two contracted letters would need a Reshape of
// dims only known at run time.
// Only Einsums of float32 operands are rewritten (a type declared, or
// followed back through operators that keep their input's type, Cast and
// Constant): MatMul takes fewer types than Einsum, and CpuRef's only
// float32. Any other Einsum, or one whose operands' type is not found so,
// is left whole (CpuRef runs it).
//
// The rewrite needs no shapes: each term gives its operand's rank. Nodes
// added are named "<einsum node>/<step>", values "<einsum output>/<step>";
// the last node writes the Einsum's own output.
#pragma once

namespace onnx {
class ModelProto;
}

namespace backplane::onnx_import {

// Rewrites every Einsum of `model` (main graph and subgraphs) that the rule
// above covers; returns how many. Needs the model's default-domain opset
// (Squeeze, Unsqueeze and ReduceSum take their axes as an attribute before
// opset 13, as an input from 13).
int decompose_einsums(onnx::ModelProto& model);

}  // namespace backplane::onnx_import
