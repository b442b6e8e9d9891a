// Host ops of staged execution (staged_model.hpp): If, Loop, Scan,
// SequenceMap (bodies run as Programs of their own), the sequence and
// optional ops, and Identity of a sequence or optional. They move whole
// tensors (slices, concatenations): arithmetic stays on the backends.
//
// Every error names the node; indices, axes and counts from the model or the
// data are checked before they are used.
#include "session/staged_model.hpp"

#include <algorithm>
#include <cstring>

namespace backplane {

namespace {

// Elements before `axis` and bytes of one step along it (everything after
// it), of a tensor of `shape`.
struct AxisBlocks {
  int64_t outer = 1;
  size_t inner_bytes = 0;
};
AxisBlocks blocks(const Shape& shape, size_t axis, DType dtype) {
  AxisBlocks b;
  int64_t inner = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d < axis) b.outer *= shape[d];
    if (d > axis) inner *= shape[d];
  }
  b.inner_bytes = static_cast<size_t>(inner) * dtype_size(dtype);
  return b;
}

// [start, start + len) along `axis`.
Tensor slice_axis(const Tensor& t, size_t axis, int64_t start, int64_t len) {
  Shape shape = t.shape();
  const int64_t full = shape[axis];
  shape[axis] = len;
  Tensor out(t.dtype(), shape);
  const AxisBlocks b = blocks(t.shape(), axis, t.dtype());
  const char* src = static_cast<const char*>(t.data());
  char* dst = static_cast<char*>(out.data());
  const size_t chunk = static_cast<size_t>(len) * b.inner_bytes;
  if (chunk == 0) return out;
  for (int64_t o = 0; o < b.outer; ++o)
    std::memcpy(dst + static_cast<size_t>(o) * chunk,
                src + (static_cast<size_t>(o * full + start)) * b.inner_bytes, chunk);
  return out;
}

// The same bytes, another shape of as many elements.
Tensor reshaped(const Tensor& t, Shape shape) {
  Tensor out(t.dtype(), std::move(shape));
  if (t.size_bytes() > 0) std::memcpy(out.data(), t.data(), t.size_bytes());
  return out;
}

Shape without_axis(Shape s, size_t axis) {
  s.erase(s.begin() + static_cast<std::ptrdiff_t>(axis));
  return s;
}
Shape with_axis(Shape s, size_t axis, int64_t size) {
  s.insert(s.begin() + static_cast<std::ptrdiff_t>(axis), size);
  return s;
}

// Concatenation along `axis` of tensors of one dtype and rank, equal in every
// other dim (checked by the caller).
Tensor concat_axis(const std::vector<Tensor>& parts, size_t axis) {
  Shape shape = parts.front().shape();
  shape[axis] = 0;
  for (const Tensor& p : parts) shape[axis] += p.shape()[axis];
  Tensor out(parts.front().dtype(), shape);
  if (out.size_bytes() == 0) return out;
  const AxisBlocks b = blocks(shape, axis, out.dtype());
  const size_t row = static_cast<size_t>(shape[axis]) * b.inner_bytes;
  char* dst = static_cast<char*>(out.data());
  size_t offset = 0;
  for (const Tensor& p : parts) {
    const size_t chunk = static_cast<size_t>(p.shape()[axis]) * b.inner_bytes;
    const char* src = static_cast<const char*>(p.data());
    if (chunk > 0)
      for (int64_t o = 0; o < b.outer; ++o)
        std::memcpy(dst + static_cast<size_t>(o) * row + offset,
                    src + static_cast<size_t>(o) * chunk, chunk);
    offset += chunk;
  }
  return out;
}

}  // namespace

// Runs one host op of a Program.
class HostOpRunner {
 public:
  HostOpRunner(const Program& program, const Program::Step& step, ProgramState::StepState& state,
               std::vector<AnyValue>& env)
      : p_(program),
        step_(step),
        state_(state),
        env_(env),
        node_(program.graph().nodes[step.nodes.front()]) {}

  Status run() {
    const std::string& op = node_.op_type;
    if (op == "If") return run_if();
    if (op == "Loop") return run_loop();
    if (op == "Scan")
      return node_.inputs.size() > 0 && p_.graph().opset() < 9 ? run_scan8() : run_scan();
    if (op == "SequenceMap") return run_sequence_map();
    if (op == "SequenceEmpty") return sequence_empty();
    if (op == "SequenceConstruct") return sequence_construct();
    if (op == "SequenceInsert") return sequence_insert();
    if (op == "SequenceErase") return sequence_erase();
    if (op == "SequenceAt") return sequence_at();
    if (op == "SequenceLength") return sequence_length();
    if (op == "SplitToSequence") return split_to_sequence();
    if (op == "ConcatFromSequence") return concat_from_sequence();
    if (op == "Optional") return optional();
    if (op == "OptionalHasElement") return optional_has_element();
    if (op == "OptionalGetElement") return optional_get_element();
    if (op == "Identity") return set(0, *in(0));
    return unsupported(
        node_.describe() + ": the host does not run this op on " +
        (num_inputs() > 0 && in(0) != nullptr && in(0)->kind != AnyValue::Kind::kTensor
             ? "sequences or optionals"
             : "tensors"));
  }

 private:
  size_t num_inputs() const { return node_.inputs.size() - node_.implicit_inputs; }
  const AnyValue* in(size_t i) const {
    return i < num_inputs() && node_.inputs[i] >= 0 ? &env_[node_.inputs[i]] : nullptr;
  }
  // Output i; what the model declares of it (a body's, or the graph's
  // value_info) must hold.
  Status set(size_t i, AnyValue v) {
    if (!node_.has_output(i)) return ok_status();
    const ir::Value& declared = p_.graph().values[node_.outputs[i]];
    const ir::ValueKind kind = p_.kind_of(node_.outputs[i]);
    const bool tensor_declared = kind == ir::ValueKind::kTensor;
    if (v.kind == AnyValue::Kind::kTensor && !tensor_declared &&
        kind != ir::ValueKind::kOptionalTensor)
      return error("output '" + declared.name + "' is a " + ir::value_kind_name(kind) +
                   ", the op made a tensor");
    if (v.kind == AnyValue::Kind::kSequence && tensor_declared)
      return error("output '" + declared.name + "' is a tensor, the op made a sequence");
    const DType got = v.kind == AnyValue::Kind::kTensor ? v.tensor.dtype() : v.dtype;
    if (declared.dtype != DType::kUndefined && got != DType::kUndefined && got != declared.dtype)
      return error("output '" + declared.name + "' is declared " + dtype_name(declared.dtype) +
                   ", the op made " + dtype_name(got));
    if (v.kind == AnyValue::Kind::kTensor && tensor_declared && declared.has_shape) {
      const Shape& made = v.tensor.shape();
      bool fits = made.size() == declared.shape.size();
      for (size_t d = 0; fits && d < made.size(); ++d)
        fits = declared.shape[d] < 0 || declared.shape[d] == made[d];
      if (!fits)
        return error("output '" + declared.name + "' is declared with shape " +
                     shape_to_string(declared.shape) + ", the op made " + shape_to_string(made));
    }
    env_[node_.outputs[i]] = std::move(v);
    return ok_status();
  }
  Status error(const std::string& m) const { return invalid_argument(node_.describe() + ": " + m); }

  Result<const Tensor*> tensor_in(size_t i, const char* what) const {
    const AnyValue* v = in(i);
    if (v == nullptr) return error(std::string("input '") + what + "' is missing");
    if (v->kind != AnyValue::Kind::kTensor)
      return error(std::string("input '") + what + "' must be a tensor");
    return &v->tensor;
  }
  Result<const AnyValue*> sequence_in(size_t i) const {
    const AnyValue* v = in(i);
    if (v == nullptr || v->kind != AnyValue::Kind::kSequence)
      return error("input " + std::to_string(i) + " must be a sequence");
    return v;
  }
  // A scalar (or one-element) integer input.
  Result<int64_t> int_in(size_t i, const char* what) const {
    BP_ASSIGN_OR_RETURN(const Tensor* t, tensor_in(i, what));
    if (t->numel() != 1)
      return error(std::string("input '") + what + "' must hold one element, it has shape " +
                   shape_to_string(t->shape()));
    if (t->dtype() == DType::kInt64) return t->data_as<int64_t>()[0];
    if (t->dtype() == DType::kInt32) return int64_t{t->data_as<int32_t>()[0]};
    return error(std::string("input '") + what + "' must be int32 or int64, it is " +
                 dtype_name(t->dtype()));
  }
  static Result<bool> bool_of(const AnyValue& v, const std::string& what) {
    if (v.kind != AnyValue::Kind::kTensor || v.tensor.dtype() != DType::kBool ||
        v.tensor.numel() != 1)
      return invalid_argument(what + " must be a bool tensor of one element, it is " +
                              (v.kind != AnyValue::Kind::kTensor
                                   ? std::string("not a tensor")
                                   : std::string(dtype_name(v.tensor.dtype())) + " " +
                                         shape_to_string(v.tensor.shape())));
    return v.tensor.data_as<bool>()[0];
  }
  static Tensor scalar_int64(int64_t x) { return Tensor::copy_of(DType::kInt64, {}, &x); }
  static Tensor scalar_bool(bool b) { return Tensor::copy_of(DType::kBool, {}, &b); }

  // A position into a sequence of `n`: [-n, n) (or [-n, n] when `end_ok`).
  Result<size_t> position(int64_t pos, size_t n, bool end_ok) const {
    const int64_t len = static_cast<int64_t>(n);
    const int64_t hi = end_ok ? len : len - 1;
    if (pos < -len || pos > hi)
      return error("position " + std::to_string(pos) + " is out of range for a sequence of " +
                   std::to_string(n));
    return static_cast<size_t>(pos < 0 ? pos + len : pos);
  }
  Result<size_t> axis_of(int64_t axis, size_t rank, const char* what) const {
    const int64_t r = static_cast<int64_t>(rank);
    if (axis < -r || axis >= r)
      return error(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
                   std::to_string(rank));
    return static_cast<size_t>(axis < 0 ? axis + r : axis);
  }

  // Body `b` on `formal` (its formal inputs, in order) and the outer values it
  // captures; its outputs in `outs`.
  Status run_body(size_t b, std::vector<AnyValue> formal, std::vector<AnyValue>* outs) {
    const Program& body = *step_.bodies[b];
    const ir::Graph& g = body.graph();
    const size_t n_formal = g.inputs.size() - g.captured;
    if (formal.size() != n_formal)
      return error("body '" + g.name + "' takes " + std::to_string(n_formal) +
                   " inputs, the node gives it " + std::to_string(formal.size()));
    for (int outer : step_.captured[b]) formal.push_back(env_[outer]);
    if (state_.bodies.size() < step_.bodies.size()) state_.bodies.resize(step_.bodies.size());
    if (!state_.bodies[b]) state_.bodies[b] = body.new_state();
    return body.run(*state_.bodies[b], std::move(formal), outs).with_context(node_.describe());
  }
  size_t body_outputs(size_t b) const { return step_.bodies[b]->graph().outputs.size(); }
  size_t body_index(const char* attr) const {
    size_t k = 0;
    for (const ir::Attribute& a : node_.attributes) {
      if (a.type != ir::AttrType::kGraph) continue;
      if (a.name == attr) return k;
      ++k;
    }
    return SIZE_MAX;
  }
  // The dtype a body output is declared with (for an empty scan output).
  DType declared_dtype(size_t b, size_t out) const {
    const ir::Graph& g = step_.bodies[b]->graph();
    return g.values[g.outputs[out]].dtype;
  }

  // Tensors of one dtype and shape (a scan output over iterations) stacked
  // along a new `axis`.
  Result<Tensor> stack(const std::vector<Tensor>& parts, size_t axis, const std::string& what) {
    const Tensor& first = parts.front();
    for (const Tensor& t : parts)
      if (t.dtype() != first.dtype() || t.shape() != first.shape())
        return error(what + " changes between iterations: " + dtype_name(first.dtype()) + " " +
                     shape_to_string(first.shape()) + " vs " + dtype_name(t.dtype()) + " " +
                     shape_to_string(t.shape()));
    if (axis > first.rank()) return error(what + ": axis out of range");
    std::vector<Tensor> expanded;
    expanded.reserve(parts.size());
    for (const Tensor& t : parts) expanded.push_back(reshaped(t, with_axis(t.shape(), axis, 1)));
    return concat_axis(expanded, axis);
  }

  // ------------------------------------------------------------------ If
  Status run_if() {
    const AnyValue* c = in(0);
    if (c == nullptr) return error("input 'cond' is missing");
    BP_ASSIGN_OR_RETURN(bool cond, bool_of(*c, node_.describe() + ": input 'cond'"));
    const size_t b = body_index(cond ? "then_branch" : "else_branch");
    if (b >= step_.bodies.size()) return error("has no then_branch or else_branch");
    if (body_outputs(b) != node_.outputs.size())
      return error(std::string(cond ? "then_branch" : "else_branch") + " has " +
                   std::to_string(body_outputs(b)) + " outputs, the node " +
                   std::to_string(node_.outputs.size()));
    std::vector<AnyValue> outs;
    BP_RETURN_IF_ERROR(run_body(b, {}, &outs));
    for (size_t i = 0; i < outs.size(); ++i) BP_RETURN_IF_ERROR(set(i, std::move(outs[i])));
    return ok_status();
  }

  // ---------------------------------------------------------------- Loop
  Status run_loop() {
    if (step_.bodies.empty()) return error("has no body");
    const size_t n_carried = num_inputs() < 2 ? 0 : num_inputs() - 2;
    const size_t n_out = node_.outputs.size();
    if (n_out < n_carried)
      return error("has " + std::to_string(n_carried) + " loop-carried inputs but only " +
                   std::to_string(n_out) + " outputs");
    const size_t n_scan = n_out - n_carried;
    if (body_outputs(0) != 1 + n_carried + n_scan)
      return error("body has " + std::to_string(body_outputs(0)) + " outputs, expected " +
                   std::to_string(1 + n_carried + n_scan) +
                   " (cond, the loop-carried values, the scan outputs)");
    bool has_trip = in(0) != nullptr;
    int64_t trip = 0;
    if (has_trip) {
      BP_ASSIGN_OR_RETURN(trip, int_in(0, "M"));
    }
    bool cond = true;
    if (in(1) != nullptr) {
      BP_ASSIGN_OR_RETURN(cond, bool_of(*in(1), node_.describe() + ": input 'cond'"));
    }
    std::vector<AnyValue> carried;
    for (size_t i = 0; i < n_carried; ++i) {
      if (in(2 + i) == nullptr)
        return error("loop-carried input " + std::to_string(i) + " is missing");
      carried.push_back(*in(2 + i));
    }
    std::vector<std::vector<Tensor>> scans(n_scan);
    const LoopBounds& bounds = p_.env_->bounds;
    int64_t bytes = 0;
    for (int64_t i = 0; cond && (!has_trip || i < trip); ++i) {
      if (i >= bounds.max_iterations)
        return error("stopped after " + std::to_string(i) + " iterations (the bound is " +
                     std::to_string(bounds.max_iterations) + "; trip count " +
                     (has_trip ? std::to_string(trip) : std::string("none")) +
                     "): a loop this long is taken for a runaway");
      std::vector<AnyValue> formal;
      formal.push_back(AnyValue::of(scalar_int64(i)));
      formal.push_back(AnyValue::of(scalar_bool(cond)));
      for (AnyValue& v : carried) formal.push_back(std::move(v));
      std::vector<AnyValue> outs;
      BP_RETURN_IF_ERROR(run_body(0, std::move(formal), &outs));
      BP_ASSIGN_OR_RETURN(cond, bool_of(outs[0], node_.describe() + ": body output 'cond'"));
      carried.assign(outs.begin() + 1, outs.begin() + 1 + static_cast<std::ptrdiff_t>(n_carried));
      for (size_t k = 0; k < n_scan; ++k) {
        AnyValue& s = outs[1 + n_carried + k];
        if (s.kind != AnyValue::Kind::kTensor)
          return error("scan output " + std::to_string(k) + " of the body must be a tensor");
        bytes += static_cast<int64_t>(s.tensor.size_bytes());
        scans[k].push_back(std::move(s.tensor));
      }
      if (bytes > bounds.max_bytes)
        return error("scan outputs reach " + std::to_string(bytes) + " bytes after " +
                     std::to_string(i + 1) + " iterations (the bound is " +
                     std::to_string(bounds.max_bytes) + ")");
    }
    for (size_t i = 0; i < n_carried; ++i) BP_RETURN_IF_ERROR(set(i, std::move(carried[i])));
    for (size_t k = 0; k < n_scan; ++k) {
      Tensor out;
      if (scans[k].empty()) {
        const ir::Graph& g = step_.bodies[0]->graph();
        const ir::Value& v = g.values[g.outputs[1 + n_carried + k]];
        Shape shape{0};
        if (v.shape_is_static()) shape.insert(shape.end(), v.shape.begin(), v.shape.end());
        const DType dt = v.dtype != DType::kUndefined ? v.dtype : DType::kFloat32;
        out = Tensor(dt, shape);
      } else {
        BP_ASSIGN_OR_RETURN(out, stack(scans[k], 0, "scan output " + std::to_string(k)));
      }
      BP_RETURN_IF_ERROR(set(n_carried + k, AnyValue::of(std::move(out))));
    }
    return ok_status();
  }

  // ---------------------------------------------------------------- Scan
  // Opset 9 on: `states` then the scan inputs, sliced along their axes.
  Status scan_core(std::vector<AnyValue> states, const std::vector<Tensor>& scan_in,
                   std::vector<AnyValue>* final_states, std::vector<Tensor>* scan_out) {
    const size_t n_state = states.size(), m = scan_in.size();
    const size_t n_out = node_.outputs.size();
    if (n_out < n_state) return error("has fewer outputs than state inputs");
    const size_t k_scan = n_out - n_state;
    BP_ASSIGN_OR_RETURN(std::vector<int64_t> in_axes,
                        node_.attr_ints("scan_input_axes", std::vector<int64_t>(m, 0)));
    BP_ASSIGN_OR_RETURN(
        std::vector<int64_t> in_dirs,
        node_.attr_ints(node_.attr("directions") ? "directions" : "scan_input_directions",
                        std::vector<int64_t>(m, 0)));
    BP_ASSIGN_OR_RETURN(std::vector<int64_t> out_axes,
                        node_.attr_ints("scan_output_axes", std::vector<int64_t>(k_scan, 0)));
    BP_ASSIGN_OR_RETURN(std::vector<int64_t> out_dirs,
                        node_.attr_ints("scan_output_directions", std::vector<int64_t>(k_scan, 0)));
    if (in_axes.size() != m || in_dirs.size() != m || out_axes.size() != k_scan ||
        out_dirs.size() != k_scan)
      return error("scan axes and directions must have one entry per scan input and output");
    if (body_outputs(0) != n_state + k_scan)
      return error("body has " + std::to_string(body_outputs(0)) + " outputs, expected " +
                   std::to_string(n_state + k_scan));
    int64_t len = -1;
    std::vector<size_t> axes(m);
    for (size_t j = 0; j < m; ++j) {
      BP_ASSIGN_OR_RETURN(axes[j], axis_of(in_axes[j], scan_in[j].rank(), "scan_input_axes"));
      const int64_t l = scan_in[j].shape()[axes[j]];
      if (len >= 0 && l != len)
        return error("scan inputs have different lengths (" + std::to_string(len) + " and " +
                     std::to_string(l) + ")");
      len = l;
    }
    if (len < 0) return error("has no scan inputs");
    std::vector<std::vector<Tensor>> outs(k_scan);
    for (int64_t t = 0; t < len; ++t) {
      std::vector<AnyValue> formal = std::move(states);
      for (size_t j = 0; j < m; ++j) {
        const int64_t at = in_dirs[j] != 0 ? len - 1 - t : t;
        Tensor slice = slice_axis(scan_in[j], axes[j], at, 1);
        formal.push_back(AnyValue::of(reshaped(slice, without_axis(slice.shape(), axes[j]))));
      }
      std::vector<AnyValue> body_outs;
      BP_RETURN_IF_ERROR(run_body(0, std::move(formal), &body_outs));
      states.assign(body_outs.begin(), body_outs.begin() + static_cast<std::ptrdiff_t>(n_state));
      for (size_t k = 0; k < k_scan; ++k) {
        if (body_outs[n_state + k].kind != AnyValue::Kind::kTensor)
          return error("scan output " + std::to_string(k) + " of the body must be a tensor");
        outs[k].push_back(std::move(body_outs[n_state + k].tensor));
      }
    }
    *final_states = std::move(states);
    scan_out->clear();
    for (size_t k = 0; k < k_scan; ++k) {
      if (outs[k].empty()) {
        scan_out->push_back(Tensor(declared_dtype(0, n_state + k) == DType::kUndefined
                                       ? DType::kFloat32
                                       : declared_dtype(0, n_state + k),
                                   {0}));
        continue;
      }
      if (out_dirs[k] != 0) std::reverse(outs[k].begin(), outs[k].end());
      const int64_t r = static_cast<int64_t>(outs[k].front().rank()) + 1;
      if (out_axes[k] < -r || out_axes[k] >= r)
        return error("scan_output_axes " + std::to_string(out_axes[k]) + " is out of range");
      const size_t axis = static_cast<size_t>(out_axes[k] < 0 ? out_axes[k] + r : out_axes[k]);
      BP_ASSIGN_OR_RETURN(Tensor stacked, stack(outs[k], axis, "scan output " + std::to_string(k)));
      scan_out->push_back(std::move(stacked));
    }
    return ok_status();
  }

  Result<std::pair<size_t, size_t>> scan_counts(size_t first) const {
    BP_ASSIGN_OR_RETURN(int64_t m, node_.attr_int("num_scan_inputs", 0));
    const size_t total = num_inputs() - first;
    if (m < 1 || static_cast<size_t>(m) > total)
      return error("num_scan_inputs " + std::to_string(m) + " is out of range (" +
                   std::to_string(total) + " inputs)");
    return std::make_pair(total - static_cast<size_t>(m), static_cast<size_t>(m));
  }

  Status run_scan() {
    if (step_.bodies.empty()) return error("has no body");
    BP_ASSIGN_OR_RETURN(auto counts, scan_counts(0));
    std::vector<AnyValue> states;
    std::vector<Tensor> scan_in;
    for (size_t i = 0; i < counts.first; ++i) states.push_back(*in(i));
    for (size_t j = 0; j < counts.second; ++j) {
      BP_ASSIGN_OR_RETURN(const Tensor* t, tensor_in(counts.first + j, "scan input"));
      if (t->rank() == 0) return error("a scan input must have rank 1 or more");
      scan_in.push_back(*t);
    }
    std::vector<AnyValue> final_states;
    std::vector<Tensor> scan_out;
    BP_RETURN_IF_ERROR(scan_core(std::move(states), scan_in, &final_states, &scan_out));
    for (size_t i = 0; i < final_states.size(); ++i) BP_RETURN_IF_ERROR(set(i, final_states[i]));
    for (size_t k = 0; k < scan_out.size(); ++k)
      BP_RETURN_IF_ERROR(set(final_states.size() + k, AnyValue::of(std::move(scan_out[k]))));
    return ok_status();
  }

  // Opset 8: axis 0 of every input is a batch, the scan axis is 1.
  Status run_scan8() {
    if (step_.bodies.empty()) return error("has no body");
    BP_ASSIGN_OR_RETURN(auto counts, scan_counts(1));
    std::vector<Tensor> all;
    for (size_t i = 1; i < num_inputs(); ++i) {
      BP_ASSIGN_OR_RETURN(const Tensor* t, tensor_in(i, "input"));
      if (t->rank() == 0) return error("inputs of Scan-8 must have a batch axis");
      all.push_back(*t);
    }
    const int64_t batch = all.front().shape()[0];
    for (const Tensor& t : all)
      if (t.shape()[0] != batch) return error("inputs have different batch sizes");
    for (size_t j = counts.first; j < all.size(); ++j)
      if (all[j].rank() < 2) return error("scan inputs of Scan-8 must have rank 2 or more");
    if (in(0) != nullptr) {
      BP_ASSIGN_OR_RETURN(const Tensor* lens, tensor_in(0, "sequence_lens"));
      if (lens->dtype() != DType::kInt64 && lens->dtype() != DType::kInt32)
        return error("'sequence_lens' must be int32 or int64");
      const int64_t full = all[counts.first].shape()[1];
      for (int64_t b = 0; b < lens->numel(); ++b) {
        const int64_t l = lens->dtype() == DType::kInt64 ? lens->data_as<int64_t>()[b]
                                                         : lens->data_as<int32_t>()[b];
        if (l != full)
          return unsupported(node_.describe() + ": sequence_lens shorter than the scan axis (" +
                             std::to_string(l) + " < " + std::to_string(full) +
                             ") are not supported");
      }
    }
    std::vector<std::vector<AnyValue>> states_b;
    std::vector<std::vector<Tensor>> scans_b;
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<AnyValue> states;
      std::vector<Tensor> scan_in;
      for (size_t i = 0; i < all.size(); ++i) {
        Tensor s = slice_axis(all[i], 0, b, 1);
        Tensor item = reshaped(s, without_axis(s.shape(), 0));
        if (i < counts.first) states.push_back(AnyValue::of(std::move(item)));
        else scan_in.push_back(std::move(item));
      }
      std::vector<AnyValue> final_states;
      std::vector<Tensor> scan_out;
      BP_RETURN_IF_ERROR(scan_core(std::move(states), scan_in, &final_states, &scan_out));
      states_b.push_back(std::move(final_states));
      scans_b.push_back(std::move(scan_out));
    }
    if (batch == 0) return unsupported(node_.describe() + ": a batch of 0 is not supported");
    for (size_t i = 0; i < counts.first; ++i) {
      std::vector<Tensor> parts;
      for (auto& s : states_b) {
        if (s[i].kind != AnyValue::Kind::kTensor) return error("states must be tensors");
        parts.push_back(s[i].tensor);
      }
      BP_ASSIGN_OR_RETURN(Tensor t, stack(parts, 0, "state " + std::to_string(i)));
      BP_RETURN_IF_ERROR(set(i, AnyValue::of(std::move(t))));
    }
    for (size_t k = 0; k < scans_b.front().size(); ++k) {
      std::vector<Tensor> parts;
      for (auto& s : scans_b) parts.push_back(s[k]);
      BP_ASSIGN_OR_RETURN(Tensor t, stack(parts, 0, "scan output " + std::to_string(k)));
      BP_RETURN_IF_ERROR(set(counts.first + k, AnyValue::of(std::move(t))));
    }
    return ok_status();
  }

  // --------------------------------------------------------- SequenceMap
  Status run_sequence_map() {
    if (step_.bodies.empty()) return error("has no body");
    BP_ASSIGN_OR_RETURN(const AnyValue* seq, sequence_in(0));
    const size_t n = seq->sequence.size();
    for (size_t i = 1; i < num_inputs(); ++i) {
      const AnyValue* a = in(i);
      if (a == nullptr) return error("additional input " + std::to_string(i) + " is missing");
      if (a->kind == AnyValue::Kind::kSequence && a->sequence.size() != n)
        return error("input sequences have different lengths (" + std::to_string(n) + " and " +
                     std::to_string(a->sequence.size()) + ")");
      if (a->kind == AnyValue::Kind::kNone)
        return error("an additional input is an empty optional");
    }
    if (body_outputs(0) != node_.outputs.size())
      return error("body has " + std::to_string(body_outputs(0)) + " outputs, the node " +
                   std::to_string(node_.outputs.size()));
    std::vector<std::vector<Tensor>> outs(node_.outputs.size());
    for (size_t e = 0; e < n; ++e) {
      std::vector<AnyValue> formal{AnyValue::of(seq->sequence[e])};
      for (size_t i = 1; i < num_inputs(); ++i) {
        const AnyValue* a = in(i);
        formal.push_back(a->kind == AnyValue::Kind::kSequence ? AnyValue::of(a->sequence[e]) : *a);
      }
      std::vector<AnyValue> body_outs;
      BP_RETURN_IF_ERROR(run_body(0, std::move(formal), &body_outs));
      for (size_t k = 0; k < outs.size(); ++k) {
        if (body_outs[k].kind != AnyValue::Kind::kTensor)
          return error("body output " + std::to_string(k) + " must be a tensor");
        outs[k].push_back(std::move(body_outs[k].tensor));
      }
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      DType dt = outs[k].empty() ? declared_dtype(0, k) : outs[k].front().dtype();
      BP_RETURN_IF_ERROR(set(k, AnyValue::of_sequence(std::move(outs[k]), dt)));
    }
    return ok_status();
  }

  // ----------------------------------------------------------- Sequences
  Status sequence_empty() {
    BP_ASSIGN_OR_RETURN(int64_t dt, node_.attr_int("dtype", 1));
    const DType dtype = static_cast<DType>(dt);
    if (dtype_size(dtype) == 0) return error("dtype " + std::to_string(dt) + " is not supported");
    return set(0, AnyValue::of_sequence({}, dtype));
  }
  Status sequence_construct() {
    std::vector<Tensor> items;
    for (size_t i = 0; i < num_inputs(); ++i) {
      BP_ASSIGN_OR_RETURN(const Tensor* t, tensor_in(i, "inputs"));
      if (!items.empty() && t->dtype() != items.front().dtype())
        return error("inputs have different dtypes");
      items.push_back(*t);
    }
    if (items.empty()) return error("has no inputs");
    const DType dt = items.front().dtype();
    return set(0, AnyValue::of_sequence(std::move(items), dt));
  }
  Status sequence_insert() {
    BP_ASSIGN_OR_RETURN(const AnyValue* seq, sequence_in(0));
    BP_ASSIGN_OR_RETURN(const Tensor* t, tensor_in(1, "tensor"));
    if (t->dtype() != seq->dtype && seq->dtype != DType::kUndefined)
      return error("tensor is " + std::string(dtype_name(t->dtype())) + ", the sequence holds " +
                   dtype_name(seq->dtype));
    size_t at = seq->sequence.size();
    if (in(2) != nullptr) {
      BP_ASSIGN_OR_RETURN(int64_t pos, int_in(2, "position"));
      BP_ASSIGN_OR_RETURN(at, position(pos, seq->sequence.size(), true));
    }
    std::vector<Tensor> items = seq->sequence;
    items.insert(items.begin() + static_cast<std::ptrdiff_t>(at), *t);
    return set(0, AnyValue::of_sequence(std::move(items), t->dtype()));
  }
  Status sequence_erase() {
    BP_ASSIGN_OR_RETURN(const AnyValue* seq, sequence_in(0));
    if (seq->sequence.empty()) return error("cannot erase from an empty sequence");
    size_t at = seq->sequence.size() - 1;
    if (in(1) != nullptr) {
      BP_ASSIGN_OR_RETURN(int64_t pos, int_in(1, "position"));
      BP_ASSIGN_OR_RETURN(at, position(pos, seq->sequence.size(), false));
    }
    std::vector<Tensor> items = seq->sequence;
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(at));
    return set(0, AnyValue::of_sequence(std::move(items), seq->dtype));
  }
  Status sequence_at() {
    BP_ASSIGN_OR_RETURN(const AnyValue* seq, sequence_in(0));
    BP_ASSIGN_OR_RETURN(int64_t pos, int_in(1, "position"));
    BP_ASSIGN_OR_RETURN(size_t at, position(pos, seq->sequence.size(), false));
    return set(0, AnyValue::of(seq->sequence[at]));
  }
  Status sequence_length() {
    BP_ASSIGN_OR_RETURN(const AnyValue* seq, sequence_in(0));
    return set(0, AnyValue::of(scalar_int64(static_cast<int64_t>(seq->sequence.size()))));
  }
  Status split_to_sequence() {
    BP_ASSIGN_OR_RETURN(const Tensor* x, tensor_in(0, "input"));
    BP_ASSIGN_OR_RETURN(int64_t axis_attr, node_.attr_int("axis", 0));
    BP_ASSIGN_OR_RETURN(int64_t keepdims, node_.attr_int("keepdims", 1));
    if (x->rank() == 0) return error("input must have rank 1 or more");
    BP_ASSIGN_OR_RETURN(size_t axis, axis_of(axis_attr, x->rank(), "axis"));
    const int64_t dim = x->shape()[axis];
    std::vector<int64_t> sizes;
    bool squeeze = false;
    if (in(1) == nullptr) {
      sizes.assign(static_cast<size_t>(dim), 1);
      squeeze = keepdims == 0;
    } else {
      BP_ASSIGN_OR_RETURN(const Tensor* split, tensor_in(1, "split"));
      if ((split->dtype() != DType::kInt64 && split->dtype() != DType::kInt32) ||
          split->rank() > 1 || split->numel() == 0)
        return error("'split' must be an int32 or int64 scalar or 1-D tensor, it is " +
                     std::string(dtype_name(split->dtype())) + " " +
                     shape_to_string(split->shape()));
      std::vector<int64_t> v(static_cast<size_t>(split->numel()));
      for (size_t k = 0; k < v.size(); ++k)
        v[k] = split->dtype() == DType::kInt64 ? split->data_as<int64_t>()[k]
                                               : split->data_as<int32_t>()[k];
      if (split->rank() == 0) {
        if (v[0] <= 0) return error("split " + std::to_string(v[0]) + " must be positive");
        for (int64_t at = 0; at < dim; at += v[0]) sizes.push_back(std::min(v[0], dim - at));
      } else {
        int64_t sum = 0;
        for (int64_t s : v) {
          if (s < 0) return error("split sizes must not be negative");
          sum += s;
        }
        if (sum != dim)
          return error("split sizes add up to " + std::to_string(sum) + ", the axis has " +
                       std::to_string(dim));
        sizes = v;
      }
    }
    std::vector<Tensor> items;
    int64_t at = 0;
    for (int64_t s : sizes) {
      Tensor part = slice_axis(*x, axis, at, s);
      at += s;
      items.push_back(squeeze ? reshaped(part, without_axis(part.shape(), axis)) : std::move(part));
    }
    return set(0, AnyValue::of_sequence(std::move(items), x->dtype()));
  }
  Status concat_from_sequence() {
    BP_ASSIGN_OR_RETURN(const AnyValue* seq, sequence_in(0));
    BP_ASSIGN_OR_RETURN(int64_t axis_attr, node_.attr_int("axis", 0));
    BP_ASSIGN_OR_RETURN(int64_t new_axis, node_.attr_int("new_axis", 0));
    if (seq->sequence.empty()) return error("cannot concatenate an empty sequence");
    const Tensor& first = seq->sequence.front();
    const size_t rank = first.rank() + (new_axis != 0 ? 1 : 0);
    if (rank == 0) return error("cannot concatenate scalars (use new_axis=1)");
    BP_ASSIGN_OR_RETURN(size_t axis, axis_of(axis_attr, rank, "axis"));
    if (new_axis != 0) {
      BP_ASSIGN_OR_RETURN(Tensor t, stack(seq->sequence, axis, "the sequence's tensors"));
      return set(0, AnyValue::of(std::move(t)));
    }
    for (const Tensor& t : seq->sequence) {
      bool ok = t.dtype() == first.dtype() && t.rank() == first.rank();
      for (size_t d = 0; ok && d < t.rank(); ++d)
        ok = d == axis || t.shape()[d] == first.shape()[d];
      if (!ok)
        return error("cannot concatenate " + shape_to_string(first.shape()) + " and " +
                     shape_to_string(t.shape()) + " along axis " + std::to_string(axis));
    }
    return set(0, AnyValue::of(concat_axis(seq->sequence, axis)));
  }

  // ----------------------------------------------------------- Optionals
  Status optional() {
    if (in(0) != nullptr) return set(0, *in(0));
    const ir::Attribute* type = node_.attr("type");
    if (type == nullptr) return error("without an input, the attribute 'type' is required");
    return set(0, AnyValue::none(type->ints.empty() ? DType::kUndefined
                                                    : static_cast<DType>(type->ints[0])));
  }
  Status optional_has_element() {
    const AnyValue* v = in(0);
    return set(0, AnyValue::of(scalar_bool(v != nullptr && v->kind != AnyValue::Kind::kNone)));
  }
  Status optional_get_element() {
    const AnyValue* v = in(0);
    if (v == nullptr || v->kind == AnyValue::Kind::kNone)
      return error("the optional is empty: it has no element to get");
    return set(0, *v);
  }

  const Program& p_;
  const Program::Step& step_;
  ProgramState::StepState& state_;
  std::vector<AnyValue>& env_;
  const ir::Node& node_;
};

Status Program::run_host(const Step& step, ProgramState::StepState& ss,
                         std::vector<AnyValue>& env) const {
  return HostOpRunner(*this, step, ss, env).run();
}

}  // namespace backplane
