// impl_check.hpp — CpuOneDnn never runs a oneDNN reference kernel.
//
// oneDNN falls back to its reference implementations ("ref:any", a
// "gemm:ref" convolution, ...) when no optimised one accepts the layouts it
// is given, silently and often ten times slower (a RegNet squeeze-excite Mul
// of a blocked tensor by a plain 1xCx1x1 one ran "ref:any" binary). Every
// primitive a plan is compiled with is checked here: a reference one throws
// ReferenceImpl, a dnnl::error, so the lowering's layout fallbacks (plain
// layouts, another destination) are tried next, and if every alternative is
// a reference one the node fails to lower and the host gives it to another
// backend (CpuRef). query_support already rejects a binary broadcast that no
// optimised kernel takes (binary_kernel_problem). An instance of a
// shape-polymorphic partition, lowered while running with no backend to
// hand a node to, tries the same alternatives but takes a reference kernel
// as the last resort (the plan report shows it).
//
// The configure key "plan_report" (a FILE) appends, for every plan compiled (and
// every polymorphic instance lowered), one line per primitive to FILE:
// "partition<TAB>primitive kind<TAB>implementation<TAB>layouts<TAB>what".
// A debugging aid, and how the tests see which implementations were chosen.
#pragma once

#include "onednn/compiled.hpp"
#include "onednn/view_info.hpp"

#include <dnnl.hpp>

#include <string>
#include <utility>
#include <vector>

namespace backplane::onednn {

// True for an implementation name oneDNN gives its reference kernels.
bool is_reference_impl(const std::string& impl);

// "aBcd8b", "acdb", "abcd": a layout as oneDNN's verbose output names it
// (dims ordered outermost first, a blocked dim in capitals, then the inner
// blocks); "any" / "undef" for those.
std::string layout_name(const dnnl::memory::desc& md);

// The source, weights and destination layouts of `pd`, space-separated.
std::string layouts_of(const dnnl::primitive_desc_base& pd);

// Thrown for a primitive descriptor whose implementation is a reference one.
class ReferenceImpl : public dnnl::error {
 public:
  explicit ReferenceImpl(std::string message)
      : dnnl::error(dnnl_unimplemented, ""), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Throws ReferenceImpl if `pd` is a reference implementation.
void reject_reference(const dnnl::primitive_desc_base& pd);

// The oneDNN binary algorithm of Add, Sub, Mul, Div, Max or Min.
dnnl::algorithm binary_algorithm(const std::string& op);

// The shape pairs a binary of `full` by `bcast` (same rank; bcast's dims 1
// or full's) may also be computed at, as plain tensors: adjacent dims that
// both broadcast or both do not merged into one ([3,96,128] by [3,1,1]:
// [3,12288] by [3,1]), then the same with a leading 1 ([1,3,12288] by
// [1,3,1], which oneDNN treats as per-channel). Empty if nothing merges.
std::vector<std::pair<Dims, Dims>> binary_shapes(const Dims& full, const Dims& bcast);

// Channels-last (nwc, nhwc, ndhwc) for a 3- to 5-D shape.
dnnl::memory::desc channels_last_md(const Dims& shape,
                                    dnnl::memory::data_type dt = dnnl::memory::data_type::f32);

// "" if oneDNN has an optimised binary kernel for `op` of plain tensors of
// these shapes (as they are or as binary_shapes gives them), else why not.
std::string binary_kernel_problem(const std::string& op, const Dims& full, const Dims& bcast);

// Appends c's steps to the file of its Tuning::plan_report, if any. Only
// then do steps record their kind, implementation and layouts (strings a
// lowering would otherwise build for every step of every instance).
void report_plan(const Compiled& c);

}  // namespace backplane::onednn
