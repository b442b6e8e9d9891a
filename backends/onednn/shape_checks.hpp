// shape_checks.hpp — do the shapes a run gives a shape-polymorphic partition
// fit together?
//
// A partition compiled for one view gets its shapes from the host's shape
// inference, checked once. A shape-polymorphic one (polymorphic.hpp) is told
// new shapes at every run and lowers the view again for them; the lowering
// reads weights and aliases bytes by those shapes, so a shape that does not
// follow from the node's inputs (a wrong input shape, a host bug) must be a
// clear error naming the node before anything reads or writes by it.
#pragma once

#include "onednn/view_info.hpp"

#include <string>

namespace backplane::onednn {

// Throws sdk::Error(BP_STATUS_INVALID_ARGUMENT), naming node n and the shapes,
// if the output shape of node n does not follow from its input shapes (and
// its constants' sizes), for every operator CpuOneDnn runs.
void check_shapes(ViewInfo& g, int n);

}  // namespace backplane::onednn
