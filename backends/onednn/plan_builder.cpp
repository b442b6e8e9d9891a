// plan_builder.cpp — writing a CpuOneDnn plan: buffers, refs, steps, layouts.
//
// Layout policy: tensors entering or leaving a partition are dense row-major
// (the ABI's layout). Inside, each tensor keeps whatever layout its producer
// chose (convolutions pick blocked layouts through format_tag::any); a
// consumer that wants another layout gets one reorder, cached per (tensor,
// layout). Reshape/Flatten/Squeeze/Unsqueeze/Identity/Transpose are views of
// their input's bytes (memory::desc::reshape / permute_axes) whenever oneDNN
// can express them, so they cost nothing.
#include "onednn/plan_builder.hpp"

#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

namespace backplane::onednn {

using dnnl::memory;

memory::dims to_dims(const Dims& d) {
  return d.empty() ? memory::dims{1} : memory::dims(d.begin(), d.end());
}

memory::desc plain_md(const Dims& shape, memory::data_type dt) {
  memory::dims dims = to_dims(shape);
  memory::dims strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(dims[i], 1);
  }
  return memory::desc(dims, dt, strides);
}
memory::desc bytes_md(size_t bytes) {
  return memory::desc({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, memory::data_type::u8,
                      memory::format_tag::a);
}
memory::desc any_md(const Dims& shape) {
  return memory::desc(to_dims(shape), memory::data_type::f32, memory::format_tag::any);
}

memory::desc layout_like(const memory::desc& pattern, const Dims& shape) {
  const memory::dims dims = to_dims(shape);
  dnnl_memory_desc_t d = pattern.data;
  if (d.format_kind != dnnl_blocked || d.ndims != static_cast<int>(dims.size()))
    return plain_md(shape, pattern.data_type());
  auto& blk = d.format_desc.blocking;
  std::vector<int64_t> block(dims.size(), 1);
  int64_t inner = 1;
  for (int i = 0; i < blk.inner_nblks; ++i) {
    block[blk.inner_idxs[i]] *= blk.inner_blks[i];
    inner *= blk.inner_blks[i];
  }
  // Outer dims in the pattern's order (largest stride first), packed densely.
  std::vector<int> order(dims.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return blk.strides[a] > blk.strides[b]; });
  for (size_t i = 0; i < dims.size(); ++i) {
    d.dims[i] = dims[i];
    d.padded_dims[i] = (dims[i] + block[i] - 1) / block[i] * block[i];
    d.padded_offsets[i] = 0;
  }
  d.offset0 = 0;
  int64_t stride = inner;
  for (size_t k = order.size(); k-- > 0;) {
    const int i = order[k];
    blk.strides[i] = stride;
    stride *= d.padded_dims[i] / block[i];
  }
  return memory::desc(d);
}

bool is_blocked(const memory::desc& md) { return md.data.format_desc.blocking.inner_nblks > 0; }

memory::desc unit_dims_in_place(const memory::desc& md) {
  dnnl_memory_desc_t d = md.data;
  const int n = d.ndims;
  for (int i = n; i < DNNL_MAX_NDIMS; ++i) {
    d.dims[i] = d.padded_dims[i] = d.padded_offsets[i] = 0;
    if (d.format_kind == dnnl_blocked) d.format_desc.blocking.strides[i] = 0;
  }
  if (md.data.format_kind != dnnl_blocked || is_blocked(md)) return memory::desc(d);
  for (int i = 0; i < n; ++i) {
    if (d.dims[i] != 1) continue;
    int k = i + 1;
    while (k < n && d.dims[k] == 1) ++k;
    d.format_desc.blocking.strides[i] =
        k < n ? d.format_desc.blocking.strides[k] * d.dims[k] : 1;
  }
  return memory::desc(d);
}
bool is_dense(const memory::desc& md) {
  int64_t n = 1;
  for (int i = 0; i < md.data.ndims; ++i) n *= md.data.dims[i];
  return md.get_size() == static_cast<size_t>(n) * dnnl_data_type_size(md.data.data_type);
}

void SharedCache::weight_key(const std::string& tag, const memory::desc& from,
                             const memory::desc& to, std::string* key) {
  // The descriptors' bytes: equal bytes are equal descriptors (a difference
  // in padding bytes alone would only cost a miss).
  key->assign(tag);
  key->push_back('\0');
  key->append(reinterpret_cast<const char*>(&from.data), sizeof from.data);
  key->append(reinterpret_cast<const char*>(&to.data), sizeof to.data);
}

void SharedCache::share_through(std::shared_ptr<WeightPool> pool, const void* weight_map) {
  pool_ = std::move(pool);
  pool_scope_.assign(reinterpret_cast<const char*>(&weight_map), sizeof weight_map);
}

bool SharedCache::pool_key(const std::string& key) {
  if (pool_ == nullptr || key.empty() || key[0] != 'k') return false;
  pool_key_.assign(pool_scope_);
  pool_key_.append(key);
  return true;
}

const SharedCache::Weight* SharedCache::find_weight(const std::string& key) {
  auto it = weights_.find(key);
  if (it != weights_.end()) return &it->second;
  if (!pool_key(key)) return nullptr;
  std::optional<Weight> shared = pool_->find(pool_key_);
  if (!shared) return nullptr;
  return &weights_.emplace(key, std::move(*shared)).first->second;
}

void SharedCache::add_weight(const std::string& key, Weight w) {
  if (pool_key(key)) pool_->add(pool_key_, w);
  weights_[key] = std::move(w);
}

std::optional<SharedCache::Weight> WeightPool::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  std::shared_ptr<char> owned = it->second.owned.lock();
  if (owned == nullptr) {
    entries_.erase(it);
    return std::nullopt;
  }
  return SharedCache::Weight{it->second.memory, std::move(owned)};
}

void WeightPool::add(const std::string& key, const SharedCache::Weight& w) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_[key] = Entry{w.memory, w.owned};
  if (entries_.size() < sweep_at_) return;
  for (auto it = entries_.begin(); it != entries_.end();)
    it = it->second.owned.expired() ? entries_.erase(it) : std::next(it);
  sweep_at_ = 2 * entries_.size() + 64;
}

const SharedCache::Made* SharedCache::find_primitive(const std::string& key) const {
  auto it = prims_.find(key);
  return it == prims_.end() ? nullptr : &it->second;
}

SharedMd SharedCache::intern(const memory::desc& md) {
  const size_t hash = std::hash<std::string_view>{}(
      std::string_view(reinterpret_cast<const char*>(&md.data), sizeof md.data));
  auto [first, last] = mds_.equal_range(hash);
  for (auto it = first; it != last; ++it)
    if (std::memcmp(&it->second->data, &md.data, sizeof md.data) == 0) return SharedMd(it->second);
  auto held = std::make_shared<const memory::desc>(md);
  mds_.emplace(hash, held);
  return SharedMd(std::move(held));
}

void SharedCache::keep_only(const std::set<const void*>& live_weights,
                            const std::set<const void*>& live_prims) {
  for (auto it = mds_.begin(); it != mds_.end();)
    it = it->second.use_count() == 1 ? mds_.erase(it) : std::next(it);
  for (auto it = weights_.begin(); it != weights_.end();)
    it = live_weights.count(it->second.memory.get_data_handle()) ? std::next(it)
                                                                 : weights_.erase(it);
  for (auto it = prims_.begin(); it != prims_.end();)
    it = live_prims.count(it->second.prim.get()) ? std::next(it) : prims_.erase(it);
}

PlanBuilder::PlanBuilder(Compiled& c, SharedCache* shared)
    : c_(c), shared_(shared), stream_(engine()) {
  attr_.set_scratchpad_mode(dnnl::scratchpad_mode::user);
}

int PlanBuilder::new_buffer(Buffer::Kind kind, size_t index, size_t size) {
  c_.buffers.push_back(Buffer{});
  c_.buffers.back().kind = kind;
  c_.buffers.back().index = index;
  c_.buffers.back().size = size;
  return static_cast<int>(c_.buffers.size()) - 1;
}

int PlanBuilder::add_ref(int buffer, const memory::desc& md) {
  c_.refs.push_back(MemRef{});
  c_.refs.back().buffer = buffer;
  c_.refs.back().md = shared_ != nullptr ? shared_->intern(md) : SharedMd(md);
  return static_cast<int>(c_.refs.size()) - 1;
}

int PlanBuilder::new_arena(const memory::desc& md) {
  return add_ref(new_buffer(Buffer::kArena, 0, md.get_size()), md);
}
int PlanBuilder::add_const(const memory::desc& md, const dnnl::memory& m, const std::string& tag,
                           std::shared_ptr<char> owned) {
  const int r = add_ref(-1, md);
  c_.refs[r].constant = m;
  c_.refs[r].owned = std::move(owned);
  if (!tag.empty()) const_tags_[r] = tag;
  return r;
}

int PlanBuilder::cached_const(const std::string& tag, const memory::desc& user,
                              const memory::desc& want) {
  if (shared_ == nullptr || tag.empty()) return -1;
  SharedCache::weight_key(tag, user, want, &shared_->key);
  const SharedCache::Weight* w = shared_->find_weight(shared_->key);
  if (w == nullptr) return -1;
  ++shared_->reused;
  return add_const(want, w->memory, tag, w->owned);
}

int PlanBuilder::const_ref(const memory::desc& md, const void* data, const std::string& tag) {
  if (int r = cached_const(tag, md, md); r >= 0) return r;
  write_pending_under(data);
  std::shared_ptr<char> bytes = allocate_block(md.get_size());
  dnnl::memory m(md, engine(), bytes.get());
  std::memcpy(m.get_data_handle(), data, md.get_size());
  if (shared_ != nullptr && !tag.empty()) {
    SharedCache::weight_key(tag, md, md, &shared_->key);
    shared_->add_weight(shared_->key, {m, bytes});
  }
  return add_const(md, m, tag, std::move(bytes));
}

int PlanBuilder::const_borrowed(const memory::desc& md, sdk::Weight bytes, const std::string& tag) {
  if (int r = cached_const(tag, md, md); r >= 0) return r;
  // The plan's hold of the bytes is the host's hold of them.
  auto held = std::make_shared<sdk::Weight>(std::move(bytes));
  std::shared_ptr<char> at(held, static_cast<char*>(const_cast<void*>(held->data())));
  dnnl::memory m(md, engine(), at.get());
  if (shared_ != nullptr && !tag.empty()) {
    SharedCache::weight_key(tag, md, md, &shared_->key);
    shared_->add_weight(shared_->key, {m, at});
  }
  return add_const(md, m, tag, std::move(at));
}

int PlanBuilder::const_reordered(const memory::desc& user, const void* data,
                                 const memory::desc& want, const std::string& tag, int later) {
  if (user == want) return const_ref(user, data, tag);
  if (int r = cached_const(tag, user, want); r >= 0) return r;
  std::shared_ptr<char> bytes = allocate_block(want.get_size());
  dnnl::memory m(want, engine(), bytes.get());
  if (later >= 0) {
    pending_.push_back({user, data, m, later});
  } else {
    write_pending_under(data);
    reorder_into(user, data, m);
  }
  if (shared_ != nullptr && !tag.empty()) {
    SharedCache::weight_key(tag, user, want, &shared_->key);
    shared_->add_weight(shared_->key, {m, bytes});
  }
  return add_const(want, m, tag, std::move(bytes));
}

void PlanBuilder::reorder_into(const memory::desc& user, const void* data,
                               const dnnl::memory& dst) {
  dnnl::memory src(user, engine(), const_cast<void*>(data));
  const memory::desc& want = dst.get_desc();
  // The reorder's scratchpad (Winograd weights are transformed through one
  // as large as they are) is the builder's, kept while consecutive reorders
  // need one: oneDNN's own would be allocated and faulted in for each.
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::reorder::primitive_desc pd(engine(), user, engine(), want, attr);
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
  if (const size_t need = pd.scratchpad_desc().get_size(); need > 0) {
    if (need > reorder_scratch_bytes_) {
      reorder_scratch_.reset();
      reorder_scratch_ = allocate_block(need);
      reorder_scratch_bytes_ = need;
    }
    args[DNNL_ARG_SCRATCHPAD] =
        dnnl::memory(pd.scratchpad_desc(), engine(), reorder_scratch_.get());
  } else {
    reorder_scratch_.reset();  // not held beside weights that need none
    reorder_scratch_bytes_ = 0;
  }
  dnnl::reorder(pd).execute(stream_, args);
  stream_.wait();
}

void PlanBuilder::write_pending(const std::function<void(int)>& written) {
  written_ = written;
  std::vector<Pending> todo = std::move(pending_);
  pending_.clear();
  // Those that do not grow first, then those that do; largest first in each.
  auto growth = [](const Pending& p) {
    return static_cast<int64_t>(p.dst.get_desc().get_size()) -
           static_cast<int64_t>(p.user.get_size());
  };
  std::stable_sort(todo.begin(), todo.end(), [&](const Pending& a, const Pending& b) {
    const bool ga = growth(a) > 0, gb = growth(b) > 0;
    if (ga != gb) return gb;
    return a.user.get_size() > b.user.get_size();
  });
  // A weight packed in two layouts is let go of after the second.
  std::map<int, int> left;
  for (const Pending& p : todo) ++left[p.later];
  for (const Pending& p : todo) {
    reorder_into(p.user, p.data, p.dst);
    if (--left[p.later] == 0 && written) written(p.later);
  }
  reorder_scratch_.reset();
  reorder_scratch_bytes_ = 0;
}

void PlanBuilder::write_pending_under(const void* data) {
  const auto* at = static_cast<const char*>(data);
  for (const Pending& p : pending_) {
    const auto* begin = static_cast<const char*>(p.dst.get_data_handle());
    if (at >= begin && at < begin + p.dst.get_desc().get_size()) {
      write_pending(written_);
      return;
    }
  }
}

const memory::desc& PlanBuilder::md(int ref) const { return c_.refs[ref].md; }
Dims PlanBuilder::dims_of(int ref) const {
  const memory::dims d = md(ref).dims();
  return Dims(d.begin(), d.end());
}

void PlanBuilder::add_step(dnnl::primitive prim, std::vector<std::pair<int, int>> args,
                           const dnnl::primitive_desc_base& pd, const std::string& what) {
  const memory::desc sp = pd.scratchpad_desc();
  if (sp.get_size() > 0) {
    MemRef r;
    r.md = shared_ != nullptr ? shared_->intern(sp) : SharedMd(sp);
    r.scratch = true;
    c_.refs.push_back(r);
    args.push_back({DNNL_ARG_SCRATCHPAD, static_cast<int>(c_.refs.size()) - 1});
    c_.scratch_bytes = std::max(c_.scratch_bytes, sp.get_size());
  }
  push_step(std::move(prim), std::move(args), what);
  if (c_.tuning.plan_report.empty()) return;
  Step& step = c_.steps.back();
  step.kind = dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(pd.get_kind()));
  step.impl = pd.impl_info_str();
  step.layouts = layouts_of(pd);
}

void PlanBuilder::add_copy_concat(std::vector<std::pair<int, int>> args, int axis,
                                  const std::string& what) {
  push_step(dnnl::primitive(), std::move(args), what, steps::CopyConcat{axis});
}

void PlanBuilder::add_concat_norm(std::vector<std::pair<int, int>> args, bool relu,
                                  const std::string& what) {
  push_step(dnnl::primitive(), std::move(args), what, steps::ConcatNorm{relu});
}

void PlanBuilder::add_gather(int data, int indices, int dst, int axis, int index_bytes,
                             const std::string& what) {
  push_step(dnnl::primitive(),
            {{DNNL_ARG_SRC_0, data}, {DNNL_ARG_SRC_1, indices}, {DNNL_ARG_DST, dst}}, what,
            steps::Gather{axis, index_bytes});
}

void PlanBuilder::add_nbits_gather(int data, int indices, int scales, int zero_points, int dst,
                                   int index_bytes, int64_t block, const std::string& what) {
  std::vector<std::pair<int, int>> args = {
      {DNNL_ARG_SRC_0, data}, {DNNL_ARG_SRC_1, indices}, {DNNL_ARG_SCALE, scales}};
  if (zero_points >= 0) args.emplace_back(DNNL_ARG_ATTR_ZERO_POINTS, zero_points);
  args.emplace_back(DNNL_ARG_DST, dst);
  push_step(dnnl::primitive(), std::move(args), what, steps::Gather{0, index_bytes, block});
}

void PlanBuilder::add_loop(int src, int dst, StepOp op, const std::string& what) {
  push_step(dnnl::primitive(), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, what, std::move(op));
}

void PlanBuilder::add_small_binary(int a, int b, int dst, dnnl::algorithm alg,
                                   const std::string& what) {
  push_step(dnnl::primitive(), {{DNNL_ARG_SRC_0, a}, {DNNL_ARG_SRC_1, b}, {DNNL_ARG_DST, dst}},
            what, steps::SmallBinary{dnnl::convert_to_c(alg)});
}

void PlanBuilder::add_dynamic_quantize(int src, int dst, int zero_point, int scales,
                                       int w_scales, const std::string& what) {
  push_step(dnnl::primitive(),
            {{DNNL_ARG_SRC, src},
             {DNNL_ARG_SCALE, w_scales},
             {DNNL_ARG_DST, dst},
             {DNNL_ARG_DST_1, zero_point},
             {DNNL_ARG_DST_2, scales}},
            what, steps::DynamicQuantize{});
}

void PlanBuilder::add_table(int src, int table, int dst, const std::string& what) {
  push_step(dnnl::primitive(),
            {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, table}, {DNNL_ARG_DST, dst}}, what,
            steps::Table{});
}

void PlanBuilder::add_row_layer_norm(int src, int scale, int shift, int dst, float eps,
                                     const std::string& what) {
  push_step(
      dnnl::primitive(),
      {{DNNL_ARG_SRC, src}, {DNNL_ARG_SCALE, scale}, {DNNL_ARG_SHIFT, shift}, {DNNL_ARG_DST, dst}},
      what, steps::RowLayerNorm{eps});
}

void PlanBuilder::add_batch_gemm(int src, int weights, int dst, float alpha,
                                 const std::string& what) {
  push_step(dnnl::primitive(),
            {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}}, what,
            steps::BatchGemm{alpha});
}

void PlanBuilder::add_nbits_matmul(int src, int weights, int scales, int zero_points, int bias,
                                   int dst, steps::NBitsMatMul op, const std::string& what) {
  std::vector<std::pair<int, int>> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_SCALE, scales}};
  if (zero_points >= 0) args.emplace_back(DNNL_ARG_ATTR_ZERO_POINTS, zero_points);
  if (bias >= 0) args.emplace_back(DNNL_ARG_BIAS, bias);
  args.emplace_back(DNNL_ARG_DST, dst);
  push_step(dnnl::primitive(), std::move(args), what, op);
}

namespace {
// Records that step s uses the buffers of its arguments.
void mark_uses(Compiled& c, const std::vector<std::pair<int, int>>& args, int s) {
  for (auto [arg, r] : args) {
    const int b = c.refs[r].buffer;
    if (b < 0) continue;
    c.buffers[b].first = std::min(c.buffers[b].first, s);
    c.buffers[b].last = std::max(c.buffers[b].last, s);
  }
}
}  // namespace

void PlanBuilder::push_step(dnnl::primitive prim, std::vector<std::pair<int, int>> args,
                            const std::string& what, StepOp op) {
  mark_uses(c_, args, static_cast<int>(c_.steps.size()));
  Step step;
  step.prim = std::move(prim);
  step.args = std::move(args);
  step.what = what;
  step.op = op;
  c_.steps.push_back(std::move(step));
}

void PlanBuilder::run_beside(int first) {
  for (auto& [arg, r] : c_.steps[static_cast<size_t>(first) + 1].args)
    if (arg == DNNL_ARG_SCRATCHPAD) {
      const memory::desc scratch = md(r);
      r = new_arena(scratch);
    }
  for (int s : {first, first + 1}) {
    mark_uses(c_, c_.steps[static_cast<size_t>(s)].args, first);
    mark_uses(c_, c_.steps[static_cast<size_t>(s)].args, first + 1);
  }
  c_.steps[static_cast<size_t>(first)].beside_next = true;
}

int PlanBuilder::as_md(int ref, const memory::desc& want) {
  if (md(ref) == want) return ref;
  for (const auto& [src, dst] : reorders_)
    if (src == ref && md(dst) == want) return dst;
  if (c_.refs[ref].constant) {
    auto tag = const_tags_.find(ref);
    return const_reordered(md(ref), c_.refs[ref].constant.get_data_handle(), want,
                           tag == const_tags_.end() ? std::string() : tag->second);
  }
  const int dst = new_arena(want);
  copy(ref, dst);
  reorders_.push_back({ref, dst});
  return dst;
}

void PlanBuilder::copy(int src, int dst) {
  // In an instance of a shape-polymorphic partition, a float32 copy between
  // strided layouts (a Transpose made row-major) is the backend's loop,
  // which takes any shape, where a reorder's code is made per shape.
  const memory::desc &from = md(src), &to = md(dst);
  auto strided = [&](const memory::desc& m) {
    const dnnl_memory_desc_t& d = m.data;
    return d.data_type == dnnl_f32 && d.format_kind == dnnl_blocked && !is_blocked(m) &&
           d.extra.flags == 0 && d.offset0 == 0 &&
           std::equal(d.dims, d.dims + d.ndims, d.padded_dims);
  };
  if (shared() && strided(from) && strided(to) && from.dims() == to.dims()) {
    add_copy_concat({{DNNL_ARG_MULTIPLE_SRC, src}, {DNNL_ARG_DST, dst}}, 0, "reorder");
    return;
  }
  copy(src, dst, attr_, "", "reorder");
}

void PlanBuilder::copy(int src, int dst, const dnnl::primitive_attr& attr,
                       const std::string& attr_key, const std::string& what) {
  const memory::desc &from = md(src), &to = md(dst);
  auto create = [&] {
    return std::make_shared<dnnl::reorder::primitive_desc>(engine(), from, engine(), to, attr);
  };
  std::string op(reinterpret_cast<const char*>(&from.data), sizeof from.data);
  op.append(reinterpret_cast<const char*>(&to.data), sizeof to.data);
  dnnl::primitive prim;
  dnnl::reorder::primitive_desc pd = made<dnnl::reorder>(op, attr_key, create, &prim);
  add_step(prim, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, pd, what);
}

dnnl::concat::primitive_desc PlanBuilder::make_concat(int axis,
                                                      const std::vector<memory::desc>& srcs,
                                                      dnnl::primitive* prim) {
  auto create = [&] {
    return std::make_shared<dnnl::concat::primitive_desc>(axis, srcs, engine(), attr_);
  };
  std::string op(reinterpret_cast<const char*>(&axis), sizeof axis);
  for (const memory::desc& m : srcs)
    op.append(reinterpret_cast<const char*>(&m.data), sizeof m.data);
  return made<dnnl::concat>(op, "", create, prim);
}

int PlanBuilder::as_plain(int ref, const Dims& shape) {
  return as_md(ref, plain_md(shape, md(ref).data_type()));
}
int PlanBuilder::reshaped(int ref, const Dims& shape) {
  const memory::dims dims = to_dims(shape);
  if (md(ref).dims() == dims) return ref;
  if (!is_blocked(md(ref)) && is_dense(md(ref))) {
    try {
      return alias(ref, md(ref).reshape(dims));
    } catch (const dnnl::error&) {
    }
  }
  if (std::optional<memory::desc> cl = channels_last_source(md(ref), shape)) {
    return alias(as_md(ref, *cl), channels_last_md(shape, md(ref).data_type()));
  }
  const int plain = as_plain(ref, dims_of(ref));
  return alias(plain, plain_md(shape, md(ref).data_type()));
}

// A strided view that must be copied before it can be reshaped to `shape`
// (ShuffleNet's channel shuffle: a channels-last tensor split into groups,
// transposed, merged back), whose unit-stride dim lands in the channel dim
// of `shape`: copied into the layout that is channels-last once reshaped, so
// that the convolutions and concats after it stay channels-last. nullopt for
// anything else (row-major then: attention's [batch, heads, seq, dim]
// tensors have their unit stride in the last dim).
std::optional<memory::desc> PlanBuilder::channels_last_source(const memory::desc& from,
                                                              const Dims& shape) {
  if (shape.size() < 3 || shape.size() > 5 || is_blocked(from) || shape[1] <= 1)
    return std::nullopt;
  const int rank = from.data.ndims;
  const auto& strides = from.data.format_desc.blocking.strides;
  int unit = -1;
  for (int i = 0; i < rank; ++i)
    if (strides[i] == 1 && from.data.dims[i] > 1) unit = i;
  if (unit < 0) return std::nullopt;
  // The element offset (row-major over `from`'s dims) where dim `unit`
  // starts counting, against where the channel dim of `shape` covers.
  int64_t inner = 1;
  for (int i = unit + 1; i < rank; ++i) inner *= from.data.dims[i];
  int64_t shape_inner = 1;
  for (size_t i = 2; i < shape.size(); ++i) shape_inner *= shape[i];
  const int64_t unit_extent = inner * from.data.dims[unit];
  if (inner < shape_inner || unit_extent > shape_inner * shape[1]) return std::nullopt;
  try {
    return channels_last_md(shape, from.data_type()).reshape(from.dims());
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

int PlanBuilder::alias(int ref, const memory::desc& new_md) {
  MemRef r = c_.refs[ref];
  const memory::desc md = unit_dims_in_place(new_md);
  r.md = shared_ != nullptr ? shared_->intern(md) : SharedMd(md);
  c_.refs.push_back(r);
  const int out = static_cast<int>(c_.refs.size()) - 1;
  if (auto tag = const_tags_.find(ref); tag != const_tags_.end()) const_tags_[out] = tag->second;
  return out;
}

int PlanBuilder::unblocked(int ref) {
  if (!is_blocked(md(ref))) return ref;
  return as_plain(ref, dims_of(ref));
}

int PlanBuilder::dense(int ref) {
  if (is_blocked(md(ref)) || is_dense(md(ref))) return ref;
  return as_plain(ref, dims_of(ref));
}

namespace {
// Steps that write each buffer (the destination arguments).
std::vector<int> writers(const Compiled& c) {
  std::vector<int> n(c.buffers.size(), 0);
  for (const Step& step : c.steps)
    for (auto [arg, r] : step.args)
      if (arg >= DNNL_ARG_DST_0 && arg <= DNNL_ARG_DST_2 && c.refs[r].buffer >= 0)
        ++n[c.refs[r].buffer];
  return n;
}

// The byte offset at which `part` (`along` elements into `axis`) lies in
// `whole`, if its bytes are exactly that window's: the same
// blocking and strides (at every dim of more than one element), no padding
// or offset of its own, the window one run of bytes.
std::optional<size_t> window_offset(const memory::desc& whole, const memory::desc& part, int axis,
                                    int64_t along) {
  const dnnl_memory_desc_t &w = whole.data, &p = part.data;
  if (w.format_kind != dnnl_blocked || p.format_kind != dnnl_blocked || w.ndims != p.ndims ||
      w.data_type != p.data_type || p.offset0 != 0 || w.offset0 != 0 || w.extra.flags != 0 ||
      p.extra.flags != 0)
    return std::nullopt;
  memory::dims offsets(static_cast<size_t>(w.ndims), 0);
  offsets[static_cast<size_t>(axis)] = along;
  memory::desc sub;
  try {
    sub = whole.submemory_desc(part.dims(), offsets);
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
  const dnnl_memory_desc_t& s = sub.data;
  const auto &sb = s.format_desc.blocking, &pb = p.format_desc.blocking;
  if (sb.inner_nblks != pb.inner_nblks) return std::nullopt;
  for (int i = 0; i < sb.inner_nblks; ++i)
    if (sb.inner_blks[i] != pb.inner_blks[i] || sb.inner_idxs[i] != pb.inner_idxs[i])
      return std::nullopt;
  size_t elements = 1;
  for (int d = 0; d < p.ndims; ++d) {
    if (s.dims[d] != p.dims[d] || s.padded_dims[d] != p.padded_dims[d]) return std::nullopt;
    if (p.padded_dims[d] > 1 && sb.strides[d] != pb.strides[d]) return std::nullopt;
    elements *= static_cast<size_t>(p.padded_dims[d]);
  }
  const size_t elem = dnnl_data_type_size(w.data_type);
  if (elem == 0 || part.get_size() != elements * elem) return std::nullopt;  // gaps
  return static_cast<size_t>(s.offset0) * elem;
}
}  // namespace

void PlanBuilder::concat_in_place() {
  if (!c_.tuning.concat_in_place) return;
  const std::vector<int> written = writers(c_);
  std::vector<size_t> drop;
  for (size_t s = 0; s < c_.steps.size(); ++s) {
    const Step& step = c_.steps[s];
    const int axis = step.concat_axis();
    if (axis < 0 || step.as<steps::ConcatNorm>()) continue;
    int dst = -1;
    std::vector<int> srcs;
    for (auto [arg, r] : step.args) {
      if (arg == DNNL_ARG_DST) dst = r;
      else if (arg == DNNL_ARG_MULTIPLE_SRC + static_cast<int>(srcs.size())) srcs.push_back(r);
      else if (arg != DNNL_ARG_SCRATCHPAD) dst = -2;  // anything else: leave the step alone
    }
    if (dst < 0 || srcs.empty()) continue;
    const int out = c_.refs[dst].buffer;
    if (out < 0 || c_.buffers[out].kind != Buffer::kArena || c_.buffers[out].parent >= 0 ||
        written[out] != 1 || c_.refs[dst].md->get_size() != c_.buffers[out].size)
      continue;
    // Each source: the whole of an arena buffer of its own that one earlier
    // step wrote (a concat done in place counts: its sources now fill it),
    // no other source's, lying where the concat would copy it.
    std::vector<size_t> at;
    std::set<int> seen;
    int64_t along = 0;
    size_t total = 0;
    for (int r : srcs) {
      const int b = c_.refs[r].buffer;
      const MemRef& m = c_.refs[r];
      if (b < 0 || b == out || m.constant || m.scratch || !seen.insert(b).second) break;
      const Buffer& buf = c_.buffers[b];
      if (buf.kind != Buffer::kArena || buf.parent >= 0 ||
          written[b] != 1 || m.md->get_size() != buf.size)
        break;
      std::optional<size_t> off = window_offset(c_.refs[dst].md, m.md, axis, along);
      if (!off) break;
      at.push_back(*off);
      along += m.md->data.dims[axis];
      total += buf.size;
    }
    if (at.size() != srcs.size() || total != c_.buffers[out].size) continue;
    for (size_t i = 0; i < srcs.size(); ++i) {
      Buffer& buf = c_.buffers[c_.refs[srcs[i]].buffer];
      buf.parent = out;
      buf.in_parent = at[i];
    }
    drop.push_back(s);
  }
  if (drop.empty()) return;
  for (size_t i = drop.size(); i-- > 0;) c_.steps.erase_at(drop[i]);
  // Which steps use each buffer, again (the steps after a dropped one moved).
  for (Buffer& b : c_.buffers) b.first = INT_MAX, b.last = -1;
  for (size_t s = 0; s < c_.steps.size(); ++s) mark_uses(c_, c_.steps[s].args, static_cast<int>(s));
}

void PlanBuilder::plan_arena() {
  // A window lives as long as its outermost buffer: that one spans the steps
  // of all the windows in it.
  auto root = [&](size_t b) {
    while (c_.buffers[b].parent >= 0) b = static_cast<size_t>(c_.buffers[b].parent);
    return b;
  };
  for (size_t b = 0; b < c_.buffers.size(); ++b) {
    if (c_.buffers[b].parent < 0 || c_.buffers[b].last < 0) continue;
    Buffer& r = c_.buffers[root(b)];
    r.first = std::min(r.first, c_.buffers[b].first);
    r.last = std::max(r.last, c_.buffers[b].last);
  }
  std::vector<sdk::ArenaTensor> tensors;
  std::vector<size_t> placed;  // the buffer of each tensor
  for (size_t b = 0; b < c_.buffers.size(); ++b) {
    const Buffer& buf = c_.buffers[b];
    if (buf.kind != Buffer::kArena || buf.last < 0 || buf.parent >= 0) continue;
    tensors.push_back({static_cast<size_t>(buf.first), static_cast<size_t>(buf.last), buf.size});
    placed.push_back(b);
  }
  sdk::ArenaPlan plan = sdk::plan_arena(tensors, kAlign);
  for (size_t t = 0; t < placed.size(); ++t) c_.buffers[placed[t]].offset = plan.offsets[t];
  for (size_t b = 0; b < c_.buffers.size(); ++b) {
    if (c_.buffers[b].parent < 0) continue;
    size_t offset = 0;
    for (size_t k = b; c_.buffers[k].parent >= 0; k = static_cast<size_t>(c_.buffers[k].parent))
      offset += c_.buffers[k].in_parent;
    c_.buffers[b].offset = c_.buffers[root(b)].offset + offset;
  }
  c_.arena_bytes = plan.bytes;
}

}  // namespace backplane::onednn
