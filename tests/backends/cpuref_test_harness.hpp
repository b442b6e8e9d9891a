// Test harness shared by the CpuRef elementwise and tensor kernel tests
// (tests/unit/test_cpuref_elementwise.cpp, test_cpuref_tensor.cpp): builds a
// one-node bp_graph_view_t by hand, gets the factory from a registry holding
// the elementwise and tensor kernels, runs the kernel and compares outputs.
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
inline TensorSpec tensor(bp_dtype_t dtype, Dims shape, const std::vector<T>& values, bool constant = false) {
  TensorSpec t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  t.constant = constant;
  EXPECT_EQ(static_cast<int64_t>(values.size()), numel(t.shape)) << "test tensor size";
  return t;
}
inline TensorSpec f32(Dims s, const std::vector<float>& v, bool c = false) { return tensor(BP_DTYPE_FLOAT32, s, v, c); }
inline TensorSpec i32(Dims s, const std::vector<int32_t>& v, bool c = false) { return tensor(BP_DTYPE_INT32, s, v, c); }
inline TensorSpec i64(Dims s, const std::vector<int64_t>& v, bool c = false) { return tensor(BP_DTYPE_INT64, s, v, c); }
inline TensorSpec u8(Dims s, const std::vector<uint8_t>& v, bool c = false) { return tensor(BP_DTYPE_UINT8, s, v, c); }
inline TensorSpec b8(Dims s, const std::vector<uint8_t>& v, bool c = false) { return tensor(BP_DTYPE_BOOL, s, v, c); }
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
inline AttrSpec attr_i(std::string n, int64_t v) { AttrSpec a; a.name = n; a.type = BP_ATTR_INT; a.i = v; return a; }
inline AttrSpec attr_f(std::string n, float v) { AttrSpec a; a.name = n; a.type = BP_ATTR_FLOAT; a.f = v; return a; }
inline AttrSpec attr_s(std::string n, std::string v) { AttrSpec a; a.name = n; a.type = BP_ATTR_STRING; a.s = v; return a; }
inline AttrSpec attr_ints(std::string n, std::vector<int64_t> v) {
  AttrSpec a; a.name = n; a.type = BP_ATTR_INTS; a.ints = v; return a;
}
inline AttrSpec attr_floats(std::string n, std::vector<float> v) {
  AttrSpec a; a.name = n; a.type = BP_ATTR_FLOATS; a.floats = v; return a;
}

struct OutSpec {
  bp_dtype_t dtype;
  Dims shape;
};

inline const KernelRegistry& registry() {
  static const KernelRegistry r = [] {
    KernelRegistry reg;
    register_elementwise_kernels(reg);
    register_tensor_kernels(reg);
    return reg;
  }();
  return r;
}

// One node in its own graph view. Not copyable: the view points into it.
class OpTest {
 public:
  OpTest(std::string op, int64_t opset, std::vector<TensorSpec> inputs, std::vector<OutSpec> outputs,
         std::vector<AttrSpec> attrs = {})
      : op_(std::move(op)), inputs_(std::move(inputs)), outputs_(std::move(outputs)), attrs_(std::move(attrs)) {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!inputs_[i].present) {
        in_ids_.push_back(-1);
        continue;
      }
      in_ids_.push_back(add_value("in" + std::to_string(i), inputs_[i].dtype, inputs_[i].shape,
                                  inputs_[i].constant ? BP_VALUE_CONSTANT : BP_VALUE_VIEW_INPUT));
    }
    for (size_t i = 0; i < outputs_.size(); ++i)
      out_ids_.push_back(add_value("out" + std::to_string(i), outputs_[i].dtype, outputs_[i].shape,
                                   BP_VALUE_VIEW_OUTPUT));
    for (const AttrSpec& a : attrs_) {
      bp_attribute_t b{};
      b.struct_size = sizeof(b);
      b.name = a.name.c_str();
      b.type = a.type;
      b.i = a.i;
      b.f = a.f;
      b.s = a.s.c_str();
      b.count = a.type == BP_ATTR_INTS ? a.ints.size() : a.floats.size();
      b.ints = a.ints.data();
      b.floats = a.floats.data();
      battrs_.push_back(b);
    }
    node_.struct_size = sizeof(node_);
    node_.name = "test_node";
    node_.op_type = op_.c_str();
    node_.domain = "";
    node_.opset = opset;
    node_.num_inputs = in_ids_.size();
    node_.inputs = in_ids_.data();
    node_.num_outputs = out_ids_.size();
    node_.outputs = out_ids_.data();
    node_.num_attributes = battrs_.size();
    node_.attributes = battrs_.data();
    view_.struct_size = sizeof(view_);
    view_.name = "test_view";
    view_.num_values = values_.size();
    view_.values = values_.data();
    view_.num_nodes = 1;
    view_.nodes = &node_;
  }
  OpTest(const OpTest&) = delete;
  OpTest& operator=(const OpTest&) = delete;

  // Lets a test add an attribute that needs the raw C struct (tensors).
  void add_raw_attr(const bp_attribute_t& a) {
    battrs_.push_back(a);
    node_.num_attributes = battrs_.size();
    node_.attributes = battrs_.data();
  }

  NodeInfo info() const {
    NodeInfo info{sdk::NodeRef(&view_, 0), {}, {}, {}, {}, {}};
    for (const TensorSpec& t : inputs_) {
      info.in_dtypes.push_back(t.present ? t.dtype : BP_DTYPE_UNDEFINED);
      info.in_shapes.push_back(t.present ? t.shape : Dims{});
      info.in_constants.push_back(t.present && t.constant ? t.bytes.data() : nullptr);
    }
    for (const OutSpec& o : outputs_) {
      info.out_dtypes.push_back(o.dtype);
      info.out_shapes.push_back(o.shape);
    }
    return info;
  }

  std::unique_ptr<Kernel> kernel() const {
    const KernelFactory* factory = registry().find(op_);
    if (factory == nullptr) throw std::runtime_error("no factory for " + op_);
    return (*factory)(info());
  }

  // Runs the kernel twice on poisoned outputs; both runs must agree.
  std::vector<std::vector<uint8_t>> run() const {
    std::unique_ptr<Kernel> k = kernel();
    std::vector<std::vector<uint8_t>> first;
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<std::vector<uint8_t>> outs;
      std::vector<void*> out_ptrs;
      for (const OutSpec& o : outputs_) {
        outs.emplace_back(static_cast<size_t>(numel(o.shape)) * dtype_bytes(o.dtype), pass == 0 ? 0xCD : 0x5A);
        out_ptrs.push_back(o.dtype == BP_DTYPE_UNDEFINED ? nullptr : outs.back().data());
      }
      std::vector<const void*> in_ptrs;
      for (const TensorSpec& t : inputs_) in_ptrs.push_back(t.present ? t.bytes.data() : nullptr);
      std::vector<uint8_t> scratch(k->scratch_bytes() + 64);
      void* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
      k->run(in_ptrs.data(), out_ptrs.data(), k->scratch_bytes() ? aligned : nullptr);
      if (pass == 0) first = outs;
      else EXPECT_EQ(first, outs) << op_ << ": a second run gave different bytes";
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
  int32_t add_value(std::string name, bp_dtype_t dtype, const Dims& shape, uint32_t flags) {
    names_.push_back(std::move(name));
    shapes_.push_back(shape);
    bp_value_t v{};
    v.struct_size = sizeof(v);
    v.name = names_.back().c_str();
    v.dtype = dtype;
    v.rank = shape.size();
    v.shape = shapes_.back().data();  // deques keep element addresses stable
    v.flags = flags;
    values_.push_back(v);
    return static_cast<int32_t>(values_.size() - 1);
  }

  std::string op_;
  std::vector<TensorSpec> inputs_;
  std::vector<OutSpec> outputs_;
  std::vector<AttrSpec> attrs_;
  std::deque<std::string> names_;
  std::deque<Dims> shapes_;
  std::vector<bp_value_t> values_;
  std::vector<int32_t> in_ids_, out_ids_;
  std::vector<bp_attribute_t> battrs_;
  bp_node_t node_{};
  bp_graph_view_t view_{};
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

inline void expect_floats(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-6f) {
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
