// plan_builder.hpp — the plan of a compiled CpuOneDnn partition as the
// lowering writes it: buffers, memory references (MemRefs) over them or over
// constants, steps, reorders between layouts, and the arena they share.
#pragma once

#include "onednn/compiled.hpp"
#include "onednn/view_info.hpp"

#include <dnnl.hpp>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace backplane::onednn {

// Constants in the layouts their primitives want, shared by the instances of
// one shape-polymorphic partition (polymorphic.hpp): an instance for new
// shapes whose primitive wants a weight in a layout an earlier instance
// already made takes that memory instead of copying or reordering the weight
// again. An entry is found by the constant's tag (which weight, transformed
// how: "v12" is view value 12 as it is, "gemm3w" node 3's Gemm weights), its
// source layout and the layout wanted. Not thread-safe: one instance is
// lowered at a time.
class WeightCache {
 public:
  static std::string key(const std::string& tag, const dnnl::memory::desc& from,
                         const dnnl::memory::desc& to);
  // The memory for `key`, or an empty one.
  dnnl::memory find(const std::string& key) const;
  void add(const std::string& key, const dnnl::memory& m) { entries_[key] = m; }
  // Drops every entry whose bytes are not in `live` (data handles of the
  // constants that the instances still kept use).
  void keep_only(const std::set<const void*>& live);
  size_t size() const { return entries_.size(); }
  size_t reused = 0;  // lookups answered from the cache

 private:
  std::map<std::string, dnnl::memory> entries_;
};

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
  // `weights`: where constants are shared with other instances (NULL: each
  // constant is this plan's own).
  explicit PlanBuilder(Compiled& c, WeightCache* weights = nullptr);

  Compiled& compiled() { return c_; }
  // Scratchpad in user mode, no post-ops: the attributes of most steps.
  const dnnl::primitive_attr& attr() const { return attr_; }

  int new_buffer(Buffer::Kind kind, size_t index, size_t size);
  int add_ref(int buffer, const dnnl::memory::desc& md);
  // A ref over a new arena buffer of md's size.
  int new_arena(const dnnl::memory::desc& md);
  // A constant holding a copy of `data` (md's bytes). `tag` names the
  // constant in the WeightCache ("": never shared).
  int const_ref(const dnnl::memory::desc& md, const void* data, const std::string& tag = "");
  // A constant reordered once into `want` (e.g. a blocked weights layout).
  int const_reordered(const dnnl::memory::desc& user, const void* data,
                      const dnnl::memory::desc& want, const std::string& tag = "");
  // The constant `tag` in layout `want`, if the WeightCache has it (so the
  // caller need not compute its source bytes); -1 otherwise.
  int cached_const(const std::string& tag, const dnnl::memory::desc& user,
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
  int add_const(const dnnl::memory::desc& md, const dnnl::memory& m, const std::string& tag);

  Compiled& c_;
  WeightCache* weights_;
  dnnl::stream stream_;
  dnnl::primitive_attr attr_;
  std::vector<std::pair<int, int>> reorders_;  // (src ref, dst ref)
};

}  // namespace backplane::onednn
