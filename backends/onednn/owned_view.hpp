// owned_view.hpp — a graph view CpuOneDnn keeps after compile returned.
//
// A shape-polymorphic partition (polymorphic.hpp) lowers its view again for
// every new set of shapes, long after the host's view is gone, so it keeps a
// deep copy: names, values, nodes, attributes (their tensors and string
// lists too), inputs and outputs. The weights stay in the host's map, which
// outlives the compiled partition (backend_abi.h); the copy keeps only its
// pointer and the data keys.
#pragma once

#include <backplane/backend_abi.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace backplane::onednn {

class OwnedView {
 public:
  explicit OwnedView(const bp_graph_view_t& view);
  OwnedView(const OwnedView&) = delete;
  OwnedView& operator=(const OwnedView&) = delete;

  // The copy, with the shapes it was compiled with (-1 dims where the host
  // left them open). Lives as long as this object.
  const bp_graph_view_t& view() const { return view_; }

 private:
  const char* keep(const char* s);  // NULL stays NULL
  template <class T>
  const T* keep(const T* data, size_t count);

  bp_graph_view_t view_{};
  // Deques: elements never move, so the view's pointers into them stay valid.
  std::deque<std::string> strings_;
  std::deque<std::vector<int64_t>> int64s_;
  std::deque<std::vector<int32_t>> int32s_;
  std::deque<std::vector<float>> floats_;
  std::deque<std::vector<uint8_t>> bytes_;
  std::deque<std::vector<const char*>> string_lists_;
  std::deque<bp_attr_tensor_t> attr_tensors_;
  std::deque<std::vector<bp_attribute_t>> attributes_;
  std::vector<bp_value_t> values_;
  std::vector<bp_node_t> nodes_;
};

// The values of `view` with other shapes: everything else (names, flags,
// data keys) is the view's own. Valid as long as `view` and this object.
class ShapedView {
 public:
  // shapes[v] (rank entries each) for every value of `view`.
  ShapedView(const bp_graph_view_t& view, const std::vector<std::vector<int64_t>>& shapes);
  ShapedView(const ShapedView&) = delete;
  ShapedView& operator=(const ShapedView&) = delete;
  const bp_graph_view_t& view() const { return view_; }

 private:
  bp_graph_view_t view_{};
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<bp_value_t> values_;
};

}  // namespace backplane::onednn
