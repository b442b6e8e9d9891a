// Test harness of the CpuRef kernel tests (tests/backends/test_cpuref_*.cpp):
// builds a one-node bp_graph_view_t by hand (Node, or OpTest from tensor
// specs), gets the factory from a registry holding every CpuRef kernel, runs
// the kernel and compares outputs.
//
// Header-only and included by several .cpp files of one binary, so everything
// here is inline (or a class / template) in a named namespace: one definition,
// no ODR clash.
#pragma once

#include "reference/kernel.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace backplane::cpuref::test_harness {

struct TensorSpec {
  bp_dtype_t dtype = BP_DTYPE_UNDEFINED;
  Dims shape;
  std::vector<uint8_t> bytes;
  bool constant = false;
  bool present = true;
};

template <class T>
inline TensorSpec tensor(bp_dtype_t dtype, Dims shape, const std::vector<T>& values,
                         bool constant = false) {
  TensorSpec t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  t.constant = constant;
  EXPECT_EQ(static_cast<int64_t>(values.size()), numel(t.shape)) << "test tensor size";
  return t;
}
inline TensorSpec f32(Dims s, const std::vector<float>& v, bool c = false) {
  return tensor(BP_DTYPE_FLOAT32, s, v, c);
}
inline TensorSpec i32(Dims s, const std::vector<int32_t>& v, bool c = false) {
  return tensor(BP_DTYPE_INT32, s, v, c);
}
inline TensorSpec i64(Dims s, const std::vector<int64_t>& v, bool c = false) {
  return tensor(BP_DTYPE_INT64, s, v, c);
}
inline TensorSpec u8(Dims s, const std::vector<uint8_t>& v, bool c = false) {
  return tensor(BP_DTYPE_UINT8, s, v, c);
}
inline TensorSpec b8(Dims s, const std::vector<uint8_t>& v, bool c = false) {
  return tensor(BP_DTYPE_BOOL, s, v, c);
}
inline TensorSpec f16(Dims s, const std::vector<float>& v, bool c = false) {
  std::vector<uint16_t> h;
  for (float x : v) h.push_back(float_to_half(x));
  return tensor(BP_DTYPE_FLOAT16, s, h, c);
}
inline TensorSpec absent() {
  TensorSpec t;
  t.present = false;
  return t;
}

struct AttrSpec {
  std::string name;
  bp_attr_type_t type = BP_ATTR_UNDEFINED;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
};
inline AttrSpec attr_i(std::string n, int64_t v) {
  AttrSpec a;
  a.name = n;
  a.type = BP_ATTR_INT;
  a.i = v;
  return a;
}
inline AttrSpec attr_f(std::string n, float v) {
  AttrSpec a;
  a.name = n;
  a.type = BP_ATTR_FLOAT;
  a.f = v;
  return a;
}
inline AttrSpec attr_s(std::string n, std::string v) {
  AttrSpec a;
  a.name = n;
  a.type = BP_ATTR_STRING;
  a.s = v;
  return a;
}
inline AttrSpec attr_ints(std::string n, std::vector<int64_t> v) {
  AttrSpec a;
  a.name = n;
  a.type = BP_ATTR_INTS;
  a.ints = v;
  return a;
}
inline AttrSpec attr_floats(std::string n, std::vector<float> v) {
  AttrSpec a;
  a.name = n;
  a.type = BP_ATTR_FLOATS;
  a.floats = v;
  return a;
}

struct OutSpec {
  bp_dtype_t dtype;
  Dims shape;
};

// Every CpuRef kernel, registered as the backend registers them.
inline const KernelRegistry& registry() {
  static const KernelRegistry r = [] {
    KernelRegistry reg;
    register_nn_kernels(reg);
    register_elementwise_kernels(reg);
    register_tensor_kernels(reg);
    register_math_kernels(reg);
    register_indexing_kernels(reg);
    register_detection_kernels(reg);
    register_rnn_kernels(reg);
    register_quant_kernels(reg);
    register_signal_kernels(reg);
    register_opset18_kernels(reg);
    register_control_kernels(reg);
    return reg;
  }();
  return r;
}

// One node in its own hand-built graph view: inputs, outputs, attributes.
// Not copyable: the view points into it; keep it alive while a NodeInfo or a
// kernel made from it is in use.
class Node {
 public:
  explicit Node(std::string op, int64_t opset = 13, std::string name = "n0")
      : op_(std::move(op)), name_(std::move(name)), opset_(opset) {}
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // An input; `constant` (the value's bytes, owned by the caller) makes it a constant.
  Node& in(Dims shape, bp_dtype_t dtype = BP_DTYPE_FLOAT32, const void* constant = nullptr) {
    inputs_.push_back(
        add_value(std::move(shape), dtype, constant ? BP_VALUE_CONSTANT : BP_VALUE_VIEW_INPUT));
    constants_.push_back(constant);
    return *this;
  }
  Node& none() {  // an omitted optional input
    inputs_.push_back(-1);
    constants_.push_back(nullptr);
    return *this;
  }
  Node& out(Dims shape, bp_dtype_t dtype = BP_DTYPE_FLOAT32) {
    outputs_.push_back(add_value(std::move(shape), dtype, BP_VALUE_VIEW_OUTPUT));
    return *this;
  }
  Node& i(const char* name, int64_t v) { return attr(name, BP_ATTR_INT).i = v, *this; }
  Node& f(const char* name, float v) { return attr(name, BP_ATTR_FLOAT).f = v, *this; }
  Node& s(const char* name, const std::string& v) {
    return attr(name, BP_ATTR_STRING).s = strings_.emplace_back(v).c_str(), *this;
  }
  Node& ints(const char* name, std::vector<int64_t> v) {
    bp_attribute_t& a = attr(name, BP_ATTR_INTS);
    a.count = v.size();
    a.ints = int_lists_.emplace_back(std::move(v)).data();
    return *this;
  }
  Node& floats(const char* name, std::vector<float> v) {
    bp_attribute_t& a = attr(name, BP_ATTR_FLOATS);
    a.count = v.size();
    a.floats = float_lists_.emplace_back(std::move(v)).data();
    return *this;
  }
  // An attribute that needs the raw C struct (tensors); its data stays the caller's.
  Node& raw(const bp_attribute_t& a) {
    attrs_.push_back(a);
    return *this;
  }

  const std::string& op() const { return op_; }

  NodeInfo info() const {
    node_ = bp_node_t{};
    node_.struct_size = sizeof(bp_node_t);
    node_.name = name_.c_str();
    node_.op_type = op_.c_str();
    node_.domain = "";
    node_.opset = opset_;
    node_.num_inputs = inputs_.size();
    node_.inputs = inputs_.data();
    node_.num_outputs = outputs_.size();
    node_.outputs = outputs_.data();
    node_.num_attributes = attrs_.size();
    node_.attributes = attrs_.data();
    view_ = bp_graph_view_t{};
    view_.struct_size = sizeof(bp_graph_view_t);
    view_.name = "test";
    view_.num_values = values_.size();
    view_.values = values_.data();
    view_.num_nodes = 1;
    view_.nodes = &node_;
    NodeInfo info{sdk::NodeRef(&view_, 0), {}, {}, {}, {}, {}};
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const bool present = inputs_[k] >= 0;
      info.in_dtypes.push_back(present ? values_[inputs_[k]].dtype : BP_DTYPE_UNDEFINED);
      info.in_shapes.push_back(present ? shapes_[inputs_[k]] : Dims{});
      info.in_constants.push_back(constants_[k]);
    }
    for (int32_t v : outputs_) {
      info.out_dtypes.push_back(values_[v].dtype);
      info.out_shapes.push_back(shapes_[v]);
    }
    return info;
  }

  std::unique_ptr<Kernel> kernel() const {
    const KernelFactory* factory = registry().find(op_);
    if (factory == nullptr) throw std::runtime_error("no kernel registered for " + op_);
    return (*factory)(info());
  }

 private:
  int32_t add_value(Dims shape, bp_dtype_t dtype, uint32_t flags) {
    const Dims& s = shapes_.emplace_back(std::move(shape));  // deques keep addresses stable
    bp_value_t v{};
    v.struct_size = sizeof(v);
    // Not "v" + std::to_string(...): GCC 12 at -O3 reports a false -Wrestrict
    // inside libstdc++ for "literal" + std::string&&.
    v.name = strings_.emplace_back(std::string("v").append(std::to_string(values_.size()))).c_str();
    v.dtype = dtype;
    v.rank = s.size();
    v.shape = s.data();
    v.flags = flags;
    values_.push_back(v);
    return static_cast<int32_t>(values_.size() - 1);
  }
  bp_attribute_t& attr(const char* name, bp_attr_type_t type) {
    bp_attribute_t& a = attrs_.emplace_back();
    a.struct_size = sizeof(a);
    a.name = strings_.emplace_back(name).c_str();
    a.type = type;
    return a;
  }

  std::string op_, name_;
  int64_t opset_;
  std::deque<std::string> strings_;
  std::deque<Dims> shapes_;
  std::deque<std::vector<int64_t>> int_lists_;
  std::deque<std::vector<float>> float_lists_;
  std::vector<bp_value_t> values_;
  std::vector<int32_t> inputs_, outputs_;
  std::vector<const void*> constants_;
  std::vector<bp_attribute_t> attrs_;
  mutable bp_node_t node_{};
  mutable bp_graph_view_t view_{};
};

// One node built from specs (the tensors' bytes held here), run on those
// inputs. Not copyable: the view points into it.
class OpTest {
 public:
  OpTest(std::string op, int64_t opset, std::vector<TensorSpec> inputs,
         std::vector<OutSpec> outputs, std::vector<AttrSpec> attrs = {})
      : inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        node_(std::move(op), opset, "test_node") {
    for (const TensorSpec& t : inputs_) {
      if (!t.present) node_.none();
      else node_.in(t.shape, t.dtype, t.constant ? t.bytes.data() : nullptr);
    }
    for (const OutSpec& o : outputs_) node_.out(o.shape, o.dtype);
    for (const AttrSpec& a : attrs) add_attr(a);
  }
  OpTest(const OpTest&) = delete;
  OpTest& operator=(const OpTest&) = delete;

  // Lets a test add an attribute that needs the raw C struct (tensors).
  void add_raw_attr(const bp_attribute_t& a) { node_.raw(a); }

  NodeInfo info() const { return node_.info(); }
  std::unique_ptr<Kernel> kernel() const { return node_.kernel(); }

  // Runs the kernel twice on poisoned outputs; both runs must agree.
  std::vector<std::vector<uint8_t>> run() const {
    std::unique_ptr<Kernel> k = kernel();
    std::vector<std::vector<uint8_t>> first;
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<std::vector<uint8_t>> outs;
      std::vector<void*> out_ptrs;
      for (const OutSpec& o : outputs_) {
        outs.emplace_back(static_cast<size_t>(numel(o.shape)) * dtype_bytes(o.dtype),
                          pass == 0 ? 0xCD : 0x5A);
        out_ptrs.push_back(o.dtype == BP_DTYPE_UNDEFINED ? nullptr : outs.back().data());
      }
      std::vector<const void*> in_ptrs;
      for (const TensorSpec& t : inputs_) in_ptrs.push_back(t.present ? t.bytes.data() : nullptr);
      std::vector<uint8_t> scratch(k->scratch_bytes() + 64);
      void* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
      k->run(in_ptrs.data(), out_ptrs.data(), k->scratch_bytes() ? aligned : nullptr);
      if (pass == 0) first = outs;
      else EXPECT_EQ(first, outs) << node_.op() << ": a second run gave different bytes";
    }
    return first;
  }

  template <class T>
  std::vector<T> run_as(size_t output = 0) const {
    std::vector<std::vector<uint8_t>> outs = run();
    std::vector<T> v(outs[output].size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), outs[output].data(), outs[output].size());
    return v;
  }

 private:
  void add_attr(const AttrSpec& a) {
    switch (a.type) {
      case BP_ATTR_INT:
        node_.i(a.name.c_str(), a.i);
        break;
      case BP_ATTR_FLOAT:
        node_.f(a.name.c_str(), a.f);
        break;
      case BP_ATTR_STRING:
        node_.s(a.name.c_str(), a.s);
        break;
      case BP_ATTR_INTS:
        node_.ints(a.name.c_str(), a.ints);
        break;
      case BP_ATTR_FLOATS:
        node_.floats(a.name.c_str(), a.floats);
        break;
      default:
        throw std::invalid_argument("attribute '" + a.name + "': use add_raw_attr");
    }
  }

  std::vector<TensorSpec> inputs_;
  std::vector<OutSpec> outputs_;
  Node node_;
};

// Expects the factory to throw sdk::Error with `code` and a message naming the node.
inline void expect_error(const OpTest& t, bp_status_code_t code, const std::string& fragment) {
  try {
    t.kernel();
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_node"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

inline void expect_floats(const std::vector<float>& got, const std::vector<float>& want,
                          float tol = 1e-6f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "at " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "at " << i;
    }
  }
}

inline std::vector<float> iota_f(int64_t n, float start = 0.0f, float step = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

// numpy broadcasting reference: the input offset of each output element.
inline int64_t broadcast_offset(const Dims& in, const Dims& out, int64_t flat) {
  int64_t off = 0, stride = 1;
  for (size_t j = 0; j < out.size(); ++j) {
    const size_t d = out.size() - 1 - j;
    const int64_t idx = flat % out[d];
    flat /= out[d];
    if (j < in.size()) {
      const int64_t dim = in[in.size() - 1 - j];
      if (dim != 1) off += idx * stride;
      stride *= dim;
    }
  }
  return off;
}

}  // namespace backplane::cpuref::test_harness
