// view_copy.hpp — a deep copy of a bp_graph_view_t, for a partition that
// prepares its kernels after compile() returned.
//
// The host's view lives only for the call it is passed to (backend_abi.h). A
// shape-polymorphic CpuRef partition prepares each kernel again whenever the
// shapes change, and the kernel factories read the node's op type, opset and
// attributes through sdk::NodeRef, so the partition keeps this copy: every
// name, value, node, attribute list and attribute tensor, owned here and
// stable for the copy's life. Weights are not copied: `weights` still points
// to the host's NamedDataMap, which outlives the compiled partition.
//
// Thread-safety: immutable after construction.
#pragma once

#include <backplane/backend_abi.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace backplane::cpuref {

class ViewCopy {
 public:
  explicit ViewCopy(const bp_graph_view_t& view);
  ViewCopy(const ViewCopy&) = delete;
  ViewCopy& operator=(const ViewCopy&) = delete;

  // Points into this object; valid as long as it lives.
  const bp_graph_view_t& view() const { return view_; }

 private:
  const char* keep(const char* s);
  bp_attribute_t copy_attribute(const bp_attribute_t& a);

  bp_graph_view_t view_{};
  // Deques: elements never move as more are added, so pointers into them
  // (a string's characters, a list's data) stay valid.
  std::deque<std::string> strings_;
  std::deque<std::vector<int64_t>> int_lists_;
  std::deque<std::vector<float>> float_lists_;
  std::deque<std::vector<const char*>> string_lists_;
  std::deque<std::vector<uint8_t>> bytes_;
  std::deque<bp_attr_tensor_t> tensors_;
  std::deque<std::vector<int32_t>> index_lists_;
  std::deque<std::vector<bp_attribute_t>> attribute_lists_;
  std::vector<bp_value_t> values_;
  std::vector<bp_node_t> nodes_;
};

}  // namespace backplane::cpuref
