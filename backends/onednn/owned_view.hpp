// owned_view.hpp — a graph view CpuOneDnn keeps after compile returned.
// (The copy itself is sdk::OwnedView; what is here is the view at other shapes.)
//
// A shape-polymorphic partition (polymorphic.hpp) lowers its view again for
// every new set of shapes, long after the host's view is gone, so it keeps a
// deep copy: names, values, nodes, attributes (their tensors and string
// lists too), inputs and outputs. The weights stay in the host's map, which
// outlives the compiled partition (backend_abi.h); the copy keeps only its
// pointer and the data keys.
#pragma once

#include <backplane/backend_abi.h>
#include <backplane/backend_sdk.hpp>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace backplane::onednn {

// The deep copy is the SDK's.
using OwnedView = sdk::OwnedView;

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
