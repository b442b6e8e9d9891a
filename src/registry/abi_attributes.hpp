// abi_attributes.hpp — a node's attributes in their ABI form
// (bp_attribute_t), for the views backends see (partition/graph_view.hpp) and
// the inference callbacks of backend-defined operators (backend_ops.hpp).
#pragma once

#include "ir/graph.hpp"

#include <backplane/backend_abi.h>

#include <memory>
#include <vector>

namespace backplane {

// Owns the bp_attribute_t array of one node and what its entries point to
// that the node does not hold (string lists, tensor headers); names, strings
// and data point into the node, which must outlive this object and not
// change while it lives. Movable: moving keeps every pointer valid.
class AbiAttributes {
 public:
  explicit AbiAttributes(const ir::Node& node);
  const bp_attribute_t* data() const { return attrs_.data(); }
  size_t size() const { return attrs_.size(); }

 private:
  std::vector<bp_attribute_t> attrs_;
  std::vector<std::unique_ptr<bp_attr_tensor_t>> tensors_;
  std::vector<std::vector<const char*>> strings_;
};

}  // namespace backplane
