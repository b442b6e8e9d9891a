// owned_view.cpp — the same view at other shapes.
#include "onednn/owned_view.hpp"

#include <backplane/backend_sdk.hpp>

#include <type_traits>
#include <utility>

namespace backplane::onednn {

ShapedView::ShapedView(const bp_graph_view_t& view, const std::vector<std::vector<int64_t>>& shapes)
    : view_(view), shapes_(shapes), values_(view.values, view.values + view.num_values) {
  if (shapes_.size() != values_.size())
    throw sdk::Error(BP_STATUS_INTERNAL, "ShapedView: one shape per value expected");
  for (size_t v = 0; v < values_.size(); ++v) {
    values_[v].rank = shapes_[v].size();
    values_[v].shape = shapes_[v].empty() ? nullptr : shapes_[v].data();
  }
  view_.values = values_.data();
}

}  // namespace backplane::onednn
