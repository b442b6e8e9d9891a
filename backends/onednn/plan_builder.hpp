// plan_builder.hpp — the plan of a compiled CpuOneDnn partition as the
// lowering writes it: buffers, memory references (MemRefs) over them or over
// constants, steps, reorders between layouts, and the arena they share.
#pragma once

#include "onednn/compiled.hpp"
#include "onednn/impl_check.hpp"
#include "onednn/view_info.hpp"

#include <dnnl.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

namespace backplane::onednn {

// What the instances of one shape-polymorphic partition (polymorphic.hpp)
// share, so that lowering the view for new shapes redoes only what the new
// shapes change. Not thread-safe: one instance is lowered at a time.
//
// Weights: constants in the layouts their primitives want. An instance whose
// primitive wants a weight in a layout an earlier instance already made takes
// that memory instead of copying or reordering the weight again. Found by the
// constant's tag (which weight, transformed how: "kW.q" is the constant of
// data key W.q as it is, "v12" view value 12 as it is where it has no key,
// "gemmw3" node 3's Gemm weights), its source layout and the layout wanted.
// Weights of data-keyed constants are shared with the model's other
// partitions too (WeightPool).
//
// Primitives: each primitive descriptor with its primitive, by what it was
// made from (the operation descriptor's bytes and the attributes). oneDNN's
// own primitive cache spares an instance the code generation of a primitive
// seen before, but not the descriptor's creation (choosing an implementation
// and its blocking), which is most of what lowering an unchanged operation
// costs: a decoder step whose projections keep their shapes takes them here.
class WeightPool;

class SharedCache {
 public:
  // The tag of a constant with data key `key`, as it is ("k" + key).
  static std::string data_key_tag(const char* key) { return std::string("k") + key; }
  // Shares the weights of data-keyed constants ("k" tags) through `pool`
  // with the other partitions whose views read the same weight map.
  void share_through(std::shared_ptr<WeightPool> pool, const void* weight_map);
  // The key of weight `tag` reordered from `from` to `to`, written into
  // `key` (reused from call to call: keys hold two descriptors' bytes, too
  // many for the allocator's small-block cache).
  static void weight_key(const std::string& tag, const dnnl::memory::desc& from,
                         const dnnl::memory::desc& to, std::string* key);
  // A weight's memory and the bytes it is over.
  struct Weight {
    dnnl::memory memory;
    std::shared_ptr<char> owned;
  };
  // The weight for `key`, or null: this cache's, or one the pool shares.
  const Weight* find_weight(const std::string& key);
  void add_weight(const std::string& key, Weight w);

  struct Made {
    std::shared_ptr<void> pd;  // the typed primitive descriptor (the key names its type)
    dnnl::primitive prim;
  };
  const Made* find_primitive(const std::string& key) const;
  void add_primitive(const std::string& key, Made made) { prims_[key] = std::move(made); }

  // `md` held once for every instance that has it.
  SharedMd intern(const dnnl::memory::desc& md);

  // Drops every weight whose bytes are not in `live_weights`, every
  // primitive not in `live_prims` (what the instances still kept use) and
  // every descriptor only this cache holds.
  void keep_only(const std::set<const void*>& live_weights,
                 const std::set<const void*>& live_prims);
  size_t weights() const { return weights_.size(); }
  size_t primitives() const { return prims_.size(); }
  size_t reused = 0;  // weights and primitives taken from here
  // Where lookups build their keys: a descriptor's bytes run to kilobytes,
  // so a key is written over the last one rather than allocated anew.
  std::string key;

 private:
  // The key `key` has in pool_ (the weight map's address, then `key`), or
  // false when it is not shared.
  bool pool_key(const std::string& key);

  std::map<std::string, Weight> weights_;
  std::map<std::string, Made> prims_;
  std::shared_ptr<WeightPool> pool_;
  std::string pool_scope_, pool_key_;
  // Interned descriptors by a hash of their bytes.
  std::unordered_multimap<size_t, std::shared_ptr<const dnnl::memory::desc>> mds_;
};

// Weights that shape-polymorphic partitions of one model reordered, shared
// between them. A decoder's first call (an empty cache) is partitioned
// apart from its later steps, and each partition would otherwise hold the
// model's weights packed once more. Entries hold no bytes alive: a weight
// lives while an instance of some partition uses it. Thread-safe.
class WeightPool {
 public:
  std::optional<SharedCache::Weight> find(const std::string& key);
  void add(const std::string& key, const SharedCache::Weight& w);

 private:
  struct Entry {
    dnnl::memory memory;
    std::weak_ptr<char> owned;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  size_t sweep_at_ = 64;  // entries_'s size that makes add() drop expired ones
};

dnnl::memory::dims to_dims(const Dims& d);
// Dense row-major (the ABI's layout), float32 unless told; `any` lets the
// primitive choose.
dnnl::memory::desc plain_md(const Dims& shape,
                            dnnl::memory::data_type dt = dnnl::memory::data_type::f32);
// `bytes` bytes (u8, 1-D): an integer tensor only a gather step reads.
dnnl::memory::desc bytes_md(size_t bytes);
dnnl::memory::desc any_md(const Dims& shape);
// A layout for a tensor of `shape` (same rank as `pattern`) laid out as
// `pattern` is: the same dim order and inner blocks ("aBcd8b" stays
// "aBcd8b"), so a broadcast operand and the full one it meets agree.
dnnl::memory::desc layout_like(const dnnl::memory::desc& pattern, const Dims& shape);
bool is_blocked(const dnnl::memory::desc& md);
// `md` with each dim of size 1 given the stride it has in a plain layout
// next to the dims around it: the stride of the next larger dim after it
// times that dim (1 after the last). Such a stride addresses nothing, and
// oneDNN counts descriptors that differ only there as equal, yet its jit
// binary kernel (2.6) is silently wrong on one with a size-1 dim out of
// place: a Transpose that moves only dims of size 1 ([1,1,2,2] by
// 0,2,1,3 is "acbd") followed by an operand that broadcasts. Views keep
// every size-1 dim in place (PlanBuilder::alias). Nothing is left past its
// ndims either: oneDNN's reshape leaves the old dims there, and its 2.6
// reference PReLU reads them (a [3,1,2] tensor reshaped to [3,2] had half of
// its elements computed).
dnnl::memory::desc unit_dims_in_place(const dnnl::memory::desc& md);
bool is_dense(const dnnl::memory::desc& md);

// Appends to one Compiled (which must outlive it). Refs and buffers are
// indices into the Compiled's vectors.
class PlanBuilder {
 public:
  // `shared`: what other instances of the partition made, to take from and
  // add to (NULL: everything is this plan's own).
  explicit PlanBuilder(Compiled& c, SharedCache* shared = nullptr);

  Compiled& compiled() { return c_; }
  // Whether make() may return a reference implementation (default: no).
  void set_allow_reference(bool allow) { allow_reference_ = allow; }
  // True while lowering an instance of a shape-polymorphic partition.
  bool shared() const { return shared_ != nullptr; }
  // Scratchpad in user mode, no post-ops: the attributes of most steps.
  const dnnl::primitive_attr& attr() const { return attr_; }

  int new_buffer(Buffer::Kind kind, size_t index, size_t size);
  int add_ref(int buffer, const dnnl::memory::desc& md);
  // A ref over a new arena buffer of md's size.
  int new_arena(const dnnl::memory::desc& md);
  // A constant holding a copy of `data` (md's bytes). `tag` names the
  // constant in the SharedCache ("": never shared).
  int const_ref(const dnnl::memory::desc& md, const void* data, const std::string& tag = "");
  // A constant read where the host holds it (`bytes`, md's size), no copy:
  // for a loop of the backend's own that takes the model's layout as it is.
  int const_borrowed(const dnnl::memory::desc& md, sdk::Weight bytes, const std::string& tag);
  // A constant reordered once into `want` (e.g. a blocked weights layout).
  // `later` >= 0: its bytes are written by write_pending, not now, and `data`
  // must stay readable until then (see write_pending).
  int const_reordered(const dnnl::memory::desc& user, const void* data,
                      const dnnl::memory::desc& want, const std::string& tag = "", int later = -1);
  // Writes the constants const_reordered put off, and calls `written` with each `later` once
  // every constant made from it is written (its source may go then). A plan compiled ahead holds
  // the host's copy of every weight (the model's file read in) beside what it has packed so far;
  // packing in the plan's order puts the largest weight (VGG-16's first fully connected layer,
  // 392 MB) on top of all the Winograd-expanded convolution weights before it. So the weights
  // whose packed copy is no larger go first, largest first, then the ones that grow, largest
  // first: the peak is the host's copy and one weight, or the growth of them all, whichever is
  // more. The destinations are allocated when lowered and untouched, so not resident, until
  // written.
  void write_pending(const std::function<void(int)>& written);
  // The constant `tag` in layout `want`, if the SharedCache has it (so the
  // caller need not compute its source bytes); -1 otherwise.
  int cached_const(const std::string& tag, const dnnl::memory::desc& user,
                   const dnnl::memory::desc& want);

  const dnnl::memory::desc& md(int ref) const;
  Dims dims_of(int ref) const;

  // The primitive descriptor of primitive kind P for operation descriptor
  // `d` with attributes `attr` (which `attr_key` names: "" for attr()), and
  // its primitive in *prim: from the SharedCache, or made now. Throws
  // ReferenceImpl (a dnnl::error, so callers' layout fallbacks apply) if
  // oneDNN offers only a reference implementation (impl_check.hpp), unless
  // set_allow_reference.
  template <class P>
  typename P::primitive_desc make(const typename P::desc& d, const dnnl::primitive_attr& attr,
                                  const std::string& attr_key, dnnl::primitive* prim) {
    using PD = typename P::primitive_desc;
    auto create = [&] { return std::make_shared<PD>(d, attr, engine()); };
    return made<P>(std::string_view(reinterpret_cast<const char*>(&d.data), sizeof d.data),
                   attr_key, create, prim);
  }
  // The same for a concat of `srcs` along `axis` (attr()).
  dnnl::concat::primitive_desc make_concat(int axis, const std::vector<dnnl::memory::desc>& srcs,
                                           dnnl::primitive* prim);

  // Appends a step (and its scratchpad); records which steps use each buffer.
  void add_step(dnnl::primitive prim, std::vector<std::pair<int, int>> args,
                const dnnl::primitive_desc_base& pd, const std::string& what);
  // Makes step `first` and the one after it run at the same time, each on
  // one thread of the team (Step::beside_next): the second gets a scratchpad
  // in a buffer of its own, and every buffer either one touches lives through
  // both.
  void run_beside(int first);
  // Append a step of the backend's own (compiled.hpp, steps::*).
  void add_copy_concat(std::vector<std::pair<int, int>> args, int axis, const std::string& what);
  void add_concat_norm(std::vector<std::pair<int, int>> args, bool relu, const std::string& what);
  // Rows of plain `data` along `axis` picked by the run-time `indices`
  // (index_bytes each) into plain `dst`.
  void add_gather(int data, int indices, int dst, int axis, int index_bytes,
                  const std::string& what);
  // dst = rows of a 4-bit table by indices of the run, dequantized
  // (steps::Gather with a block); zero_points may be -1 (none).
  void add_nbits_gather(int data, int indices, int scales, int zero_points, int dst,
                        int index_bytes, int64_t block, const std::string& what);
  void add_small_binary(int a, int b, int dst, dnnl::algorithm alg, const std::string& what);
  // A loop of one source and one destination (Eltwise, RowSoftmax, RowMean, Quantize).
  void add_loop(int src, int dst, StepOp op, const std::string& what);
  void add_row_layer_norm(int src, int scale, int shift, int dst, float eps,
                          const std::string& what);
  // dst = alpha * src x weights, batched (steps::BatchGemm).
  void add_batch_gemm(int src, int weights, int dst, float alpha, const std::string& what);
  // dst = src x the 4-bit weights (+ bias) (steps::NBitsMatMul); zero_points
  // and bias may be -1 (none).
  void add_nbits_matmul(int src, int weights, int scales, int zero_points, int bias, int dst,
                        steps::NBitsMatMul op, const std::string& what);
  // dst = table[src], bytewise.
  void add_table(int src, int table, int dst, const std::string& what);
  // `src` into `dst`, `zero_point` and `scales` (= its scale times `w_scales`).
  void add_dynamic_quantize(int src, int dst, int zero_point, int scales, int w_scales,
                            const std::string& what);

  // `ref` in layout `want`: itself, or a (cached) reorder into a new buffer.
  int as_md(int ref, const dnnl::memory::desc& want);
  // A reorder step from ref `src` into ref `dst`.
  void copy(int src, int dst);
  // The same with attributes `attr` (scales, zero points), which `attr_key`
  // names for the SharedCache.
  void copy(int src, int dst, const dnnl::primitive_attr& attr, const std::string& attr_key,
            const std::string& what);
  // `ref` dense row-major, in its own data type.
  int as_plain(int ref, const Dims& shape);
  // A view of `ref` with another shape (same bytes), reordering to plain first
  // if the layout cannot be reshaped.
  int reshaped(int ref, const Dims& shape);
  static std::optional<dnnl::memory::desc> channels_last_source(const dnnl::memory::desc& from,
                                                                const Dims& shape);
  // Another description of the same bytes (buffer or constant).
  int alias(int ref, const dnnl::memory::desc& new_md);
  // `ref` as a plain (possibly strided) layout that matmul/softmax/etc. take.
  int unblocked(int ref);
  // `ref` without gaps other than a blocked layout's channel padding.
  int dense(int ref);

  // Removes each Concat step whose sources can be written where the concat
  // would copy them (their bytes are consecutive runs of its destination's:
  // along the outermost dim of its layout that is not 1, such as the
  // channels of one image in nChw16c or NCHW) and makes their buffers
  // windows of the destination's. Call after the last step is added.
  void concat_in_place();
  // Gives every arena buffer its offset (sdk::plan_arena: a buffer's bytes are
  // reused once the last step touching it has run) and sets arena_bytes.
  void plan_arena();

 private:
  int add_const(const dnnl::memory::desc& md, const dnnl::memory& m, const std::string& tag,
                std::shared_ptr<char> owned = nullptr);
  void push_step(dnnl::primitive prim, std::vector<std::pair<int, int>> args,
                 const std::string& what, StepOp op = steps::Primitive{});
  // make()'s body: `op` is what the primitive is made from, `create` makes
  // its descriptor.
  template <class P, class Create>
  typename P::primitive_desc made(std::string_view op, const std::string& attr_key, Create&& create,
                                  dnnl::primitive* prim) {
    using PD = typename P::primitive_desc;
    if (shared_ == nullptr) {
      PD pd = *create();
      if (!allow_reference_) reject_reference(pd);
      *prim = P(pd);
      return pd;
    }
    std::string& key = shared_->key;
    key.assign(typeid(P).name());
    key.push_back('\0');
    key.append(op);
    key.push_back('\0');
    key += attr_key;
    if (const SharedCache::Made* m = shared_->find_primitive(key)) {
      ++shared_->reused;
      *prim = m->prim;
      return *std::static_pointer_cast<PD>(m->pd);
    }
    std::shared_ptr<PD> pd = create();
    if (!allow_reference_) reject_reference(*pd);
    *prim = P(*pd);
    shared_->add_primitive(key, {pd, *prim});
    return *pd;
  }

  // Reorders `data` (described by `user`) into `dst`, through the kept
  // scratchpad (see reorder_scratch_).
  void reorder_into(const dnnl::memory::desc& user, const void* data, const dnnl::memory& dst);
  // Writes the pending constants first if `data` lies in one of them.
  void write_pending_under(const void* data);

  struct Pending {
    dnnl::memory::desc user;
    const void* data;
    dnnl::memory dst;
    int later;
  };

  Compiled& c_;
  SharedCache* shared_;
  dnnl::stream stream_;
  std::vector<Pending> pending_;
  std::function<void(int)> written_;       // the last write_pending's, for write_pending_under
  std::shared_ptr<char> reorder_scratch_;  // const_reordered's scratchpad, grown as needed
  size_t reorder_scratch_bytes_ = 0;
  dnnl::primitive_attr attr_;
  std::vector<std::pair<int, int>> reorders_;  // (src ref, dst ref)
  // A constant ref's SharedCache tag: needed while the plan is built only,
  // so not kept in the plan (a shape instance is kept per shape).
  std::unordered_map<int, std::string> const_tags_;
  bool allow_reference_ = false;
};

}  // namespace backplane::onednn
