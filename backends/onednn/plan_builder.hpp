// plan_builder.hpp — the plan of a compiled CpuOneDnn partition as the
// lowering writes it: buffers, memory references (MemRefs) over them or over
// constants, steps, reorders between layouts, and the arena they share.
#pragma once

#include "onednn/compiled.hpp"
#include "onednn/view_info.hpp"

#include <dnnl.hpp>

#include <string>
#include <utility>
#include <vector>

namespace backplane::onednn {

dnnl::memory::dims to_dims(const Dims& d);
// Dense row-major float32 (the ABI's layout); `any` lets the primitive choose.
dnnl::memory::desc plain_md(const Dims& shape);
dnnl::memory::desc any_md(const Dims& shape);
bool is_blocked(const dnnl::memory::desc& md);
bool is_dense(const dnnl::memory::desc& md);

// Appends to one Compiled (which must outlive it). Refs and buffers are
// indices into the Compiled's vectors.
class PlanBuilder {
 public:
  explicit PlanBuilder(Compiled& c);

  Compiled& compiled() { return c_; }
  // Scratchpad in user mode, no post-ops: the attributes of most steps.
  const dnnl::primitive_attr& attr() const { return attr_; }

  int new_buffer(Buffer::Kind kind, size_t index, size_t size);
  int add_ref(int buffer, const dnnl::memory::desc& md);
  // A ref over a new arena buffer of md's size.
  int new_arena(const dnnl::memory::desc& md);
  // A constant holding a copy of `data` (md's bytes).
  int const_ref(const dnnl::memory::desc& md, const void* data);
  // A constant reordered once into `want` (e.g. a blocked weights layout).
  int const_reordered(const dnnl::memory::desc& user, const void* data,
                      const dnnl::memory::desc& want);

  const dnnl::memory::desc& md(int ref) const;
  Dims dims_of(int ref) const;

  // Appends a step (and its scratchpad); records which steps use each buffer.
  void add_step(dnnl::primitive prim, std::vector<std::pair<int, int>> args,
                const dnnl::primitive_desc_base& pd, const std::string& what);

  // `ref` in layout `want`: itself, or a (cached) reorder into a new buffer.
  int as_md(int ref, const dnnl::memory::desc& want);
  // A reorder step from ref `src` into ref `dst`.
  void copy(int src, int dst);
  int as_plain(int ref, const Dims& shape);
  // A view of `ref` with another shape (same bytes), reordering to plain first
  // if the layout cannot be reshaped.
  int reshaped(int ref, const Dims& shape);
  // Another description of the same bytes (buffer or constant).
  int alias(int ref, const dnnl::memory::desc& new_md);
  // `ref` as a plain (possibly strided) layout that matmul/softmax/etc. take.
  int unblocked(int ref);
  // `ref` without gaps other than a blocked layout's channel padding.
  int dense(int ref);

  // Gives every arena buffer its offset (sdk::plan_arena: a buffer's bytes are
  // reused once the last step touching it has run) and sets arena_bytes.
  void plan_arena();

 private:
  Compiled& c_;
  dnnl::stream stream_;
  dnnl::primitive_attr attr_;
  std::vector<std::pair<int, int>> reorders_;  // (src ref, dst ref)
};

}  // namespace backplane::onednn
