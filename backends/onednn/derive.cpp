// derive.cpp — an instance made from a template instead of lowered.
#include "onednn/derive.hpp"

#include "onednn/plan_builder.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace backplane::onednn {
namespace {

const dnnl_memory_desc_t& md_of(const Compiled& c, size_t ref) { return c.refs[ref].md->data; }

// The ref of argument `arg` of `step`, or -1.
int arg_ref(const Step& step, int arg) {
  for (auto [a, r] : step.args)
    if (a == arg) return r;
  return -1;
}

bool same_op(const Step& a, const Step& b) {
  if (a.op.index() != b.op.index() || a.prim.get(true) != b.prim.get(true) || a.args != b.args ||
      a.beside_next != b.beside_next || a.concat_axis() != b.concat_axis())
    return false;
  if (const auto* x = a.as<steps::SmallBinary>()) return x->alg == b.as<steps::SmallBinary>()->alg;
  if (const auto* x = a.as<steps::BatchGemm>()) return x->alpha == b.as<steps::BatchGemm>()->alpha;
  if (const auto* x = a.as<steps::Eltwise>()) {
    const auto* y = b.as<steps::Eltwise>();
    return x->fn == y->fn && x->alpha == y->alpha && x->beta == y->beta;
  }
  if (const auto* x = a.as<steps::Quantize>()) {
    const auto* y = b.as<steps::Quantize>();
    return x->scale == y->scale && x->lo == y->lo && x->hi == y->hi && x->zero == y->zero;
  }
  if (const auto* x = a.as<steps::RowLayerNorm>())
    return x->eps == b.as<steps::RowLayerNorm>()->eps;
  if (const auto* x = a.as<steps::NBitsMatMul>()) {
    const auto* y = b.as<steps::NBitsMatMul>();
    return x->k == y->k && x->n == y->n && x->block == y->block;
  }
  if (const auto* x = a.as<steps::Gather>())
    return x->axis == b.as<steps::Gather>()->axis &&
           x->index_bytes == b.as<steps::Gather>()->index_bytes &&
           x->block == b.as<steps::Gather>()->block;
  return true;
}

// A oneDNN MatMul made for runtime dims: all of them (Lowering::
// lower_matmul_any_shape), or the rows of its src and dst
// (lower_matmul_collapsed).
bool runtime_matmul(const Step& step) {
  if (!step.as<steps::Primitive>() || !step.prim ||
      step.prim.get_kind() != dnnl::primitive::kind::matmul)
    return false;
  const_dnnl_primitive_desc_t pd = nullptr;
  if (dnnl_primitive_get_primitive_desc(step.prim.get(), &pd) != dnnl_success) return false;
  for (dnnl_query_t q : {dnnl_query_src_md, dnnl_query_dst_md}) {
    const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd, q, 0);
    if (md == nullptr || md->ndims < 2 || md->dims[0] != DNNL_RUNTIME_DIM_VAL) return false;
  }
  return true;
}

// Dense in some dim order, nothing but dims and strides: the dims from the
// innermost to the outermost (size-1 dims last), or empty if not. A dim of 0
// (an empty cache) strides as one of 1 would, in its place.
std::vector<int> dense_order(const dnnl_memory_desc_t& d) {
  if (d.format_kind != dnnl_blocked || d.format_desc.blocking.inner_nblks != 0 || d.offset0 != 0 ||
      d.extra.flags != 0 || d.ndims == 0)
    return {};
  const auto& strides = d.format_desc.blocking.strides;
  std::vector<int> order(d.ndims);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if ((d.dims[a] == 1) != (d.dims[b] == 1)) return d.dims[b] == 1;
    return strides[a] != strides[b] ? strides[a] < strides[b] : a > b;
  });
  int64_t expect = 1;
  for (int j : order) {
    if (d.dims[j] == 1) break;
    if (strides[j] != expect) return {};
    expect *= std::max<int64_t>(d.dims[j], 1);
  }
  return order;
}

bool same_dims(const dnnl_memory_desc_t& a, const dnnl_memory_desc_t& b) {
  return a.ndims == b.ndims && std::equal(a.dims, a.dims + a.ndims, b.dims);
}

// The steps' own checks at the new dims (see Check).
bool concat_fits(const Compiled& c, const Step& step) {
  const dnnl_memory_desc_t& dst = md_of(c, arg_ref(step, DNNL_ARG_DST));
  const int axis = step.as<steps::CopyConcat>()->axis;
  int64_t along = 0;
  for (auto [a, r] : step.args) {
    if (a == DNNL_ARG_DST) continue;
    const dnnl_memory_desc_t& src = md_of(c, r);
    if (src.ndims != dst.ndims) return false;
    for (int i = 0; i < dst.ndims; ++i)
      if (i != axis && src.dims[i] != dst.dims[i]) return false;
    along += src.dims[axis];
  }
  return along == dst.dims[axis];
}

// A loop the lowering would have left to a oneDNN kernel at these dims
// (kSmallInstanceOpElements) is not derived either.
bool small(const dnnl_memory_desc_t& d) {
  return sdk::element_count(d.dims, static_cast<size_t>(d.ndims)) <= kSmallInstanceOpElements;
}

bool binary_fits(const Compiled& c, const Step& step) {
  const dnnl_memory_desc_t& a = md_of(c, arg_ref(step, DNNL_ARG_SRC_0));
  const dnnl_memory_desc_t& b = md_of(c, arg_ref(step, DNNL_ARG_SRC_1));
  const dnnl_memory_desc_t& y = md_of(c, arg_ref(step, DNNL_ARG_DST));
  if (!same_dims(a, y) || b.ndims != y.ndims) return false;
  for (int i = 0; i < y.ndims; ++i)
    if (b.dims[i] != 1 && b.dims[i] != y.dims[i]) return false;
  return true;
}

bool matmul_fits(const Compiled& c, const Step& step) {
  const dnnl_memory_desc_t& a = md_of(c, arg_ref(step, DNNL_ARG_SRC));
  const dnnl_memory_desc_t& w = md_of(c, arg_ref(step, DNNL_ARG_WEIGHTS));
  const dnnl_memory_desc_t& y = md_of(c, arg_ref(step, DNNL_ARG_DST));
  const int n = y.ndims;
  if (a.ndims != n || w.ndims != n || n < 2) return false;
  for (int i = 0; i + 2 < n; ++i)
    if (a.dims[i] != y.dims[i] || w.dims[i] != y.dims[i]) return false;
  return a.dims[n - 1] == w.dims[n - 2] && a.dims[n - 2] == y.dims[n - 2] &&
         w.dims[n - 1] == y.dims[n - 1];
}

// The destination has a row of the data per index (Binder::run_gather).
bool gather_fits(const Compiled& c, const Step& step) {
  const dnnl_memory_desc_t& data = md_of(c, arg_ref(step, DNNL_ARG_SRC_0));
  const dnnl_memory_desc_t& y = md_of(c, arg_ref(step, DNNL_ARG_DST));
  const int axis = step.as<steps::Gather>()->axis;
  const auto index_bytes = static_cast<size_t>(step.as<steps::Gather>()->index_bytes);
  const size_t indices = c.refs[arg_ref(step, DNNL_ARG_SRC_1)].md->get_size() / index_bytes;
  int64_t rows = sdk::element_count(data.dims, static_cast<size_t>(data.ndims));
  if (axis >= data.ndims || data.dims[axis] == 0) return false;
  rows = rows / data.dims[axis] * static_cast<int64_t>(indices);
  if (step.as<steps::Gather>()->block > 0) rows *= 2;  // two 4-bit values a byte
  return sdk::element_count(y.dims, static_cast<size_t>(y.ndims)) == rows;
}

// Whether `d` (derived) is the plan `want` lowered at the same key: every
// description and size (the offsets are derive's own, see there).
bool same_plan(const Compiled& d, const Compiled& want) {
  if (d.input_bytes != want.input_bytes || d.output_bytes != want.output_bytes) return false;
  for (size_t r = 0; r < d.refs.size(); ++r)
    if (!(d.refs[r].md.get() == want.refs[r].md.get())) return false;
  for (size_t b = 0; b < d.buffers.size(); ++b)
    if (d.buffers[b].size != want.buffers[b].size) return false;
  return true;
}

}  // namespace

std::unique_ptr<InstanceTemplate> InstanceTemplate::make(const bp_graph_view_t& view,
                                                         const std::vector<size_t>& offsets,
                                                         const std::vector<Lowered>& three) {
  if (three.size() != 3) return nullptr;
  const Compiled& base = *three[2].plan;
  const std::vector<int64_t>& k0 = three[0].key;
  for (const Lowered& l : three) {
    const Compiled& c = *l.plan;
    if (l.key.size() != k0.size() || c.empty || c.threads != base.threads ||
        c.steps.size() != base.steps.size() || c.refs.size() != base.refs.size() ||
        c.buffers.size() != base.buffers.size() || c.scratch_bytes != base.scratch_bytes)
      return nullptr;
  }
  std::unique_ptr<InstanceTemplate> t(new InstanceTemplate(view, offsets, three[2]));
  t->open_.assign(k0.size(), kClosed);
  std::vector<uint32_t> open;  // the first position of each class
  for (uint32_t p = 0; p < k0.size(); ++p) {
    if (k0[p] == three[1].key[p] && k0[p] == three[2].key[p]) continue;
    for (const Lowered& l : three)
      if (l.key[p] < 2) return nullptr;
    auto same = std::find_if(open.begin(), open.end(), [&](uint32_t q) {
      return std::all_of(three.begin(), three.end(),
                         [&](const Lowered& l) { return l.key[q] == l.key[p]; });
    });
    t->open_[p] = same != open.end() ? *same : p;
    if (same == open.end()) open.push_back(p);
  }
  if (open.empty()) return nullptr;
  for (size_t s = 0; s < base.steps.size(); ++s)
    if (!same_op(three[0].plan->steps[s], base.steps[s]) ||
        !same_op(three[1].plan->steps[s], base.steps[s]))
      return nullptr;
  // Refs: the same but for descriptions that follow the key.
  std::vector<char> follows(base.refs.size(), 0);
  for (size_t r = 0; r < base.refs.size(); ++r) {
    const MemRef& b = base.refs[r];
    bool equal = true;
    for (int i = 0; i < 2; ++i) {
      const MemRef& o = three[i].plan->refs[r];
      if (o.buffer != b.buffer || o.scratch != b.scratch || !o.constant != !b.constant)
        return nullptr;
      equal = equal && o.md.get() == b.md.get();
      // A constant each instance copied (one no SharedCache tag names): the same bytes.
      if (b.constant && o.constant.get(true) != b.constant.get(true) &&
          !(equal && std::memcmp(o.constant.get_data_handle(), b.constant.get_data_handle(),
                                 b.md->get_size()) == 0))
        return nullptr;
    }
    if (equal) continue;
    if (b.buffer < 0 || b.constant) return nullptr;
    Follow f{r, std::vector<std::vector<Term>>(b.md->data.ndims), dense_order(b.md->data)};
    if (f.inner_first.empty()) return nullptr;
    for (int j = 0; j < b.md->data.ndims; ++j) {
      int64_t d[3];
      for (int i = 0; i < 3; ++i) {
        const dnnl_memory_desc_t& m = three[i].plan->refs[r].md->data;
        if (m.ndims != b.md->data.ndims || m.data_type != b.md->data.data_type) return nullptr;
        d[i] = m.dims[j];
      }
      if (d[0] == d[1] && d[1] == d[2]) continue;
      // The dim is a key position's times a factor the same at all three
      // (an index's bytes), or else two positions' product times one (a
      // batch of rows collapsed into a matrix).
      auto fit = [&](uint32_t p, uint32_t q) {
        Term term{p, q, 1};
        const int64_t unit = term.at(three[2].key);
        term.factor = d[2] / unit;
        if (term.factor >= 1 && term.at(k0) == d[0] && term.at(three[1].key) == d[1] &&
            term.at(three[2].key) == d[2])
          f.from[j].push_back(term);
      };
      for (uint32_t p : open) fit(p, Term::kOne);
      if (f.from[j].empty())
        for (size_t a = 0; a < open.size(); ++a)
          for (size_t b = a + 1; b < open.size(); ++b) fit(open[a], open[b]);
      if (f.from[j].empty()) return nullptr;
    }
    follows[r] = 1;
    t->follow_.push_back(std::move(f));
  }
  // Buffers: the same but for sizes, which follow their refs' (an arena
  // buffer's: the largest; an input's or output's: its value's).
  for (size_t b = 0; b < base.buffers.size(); ++b) {
    const Buffer& x = base.buffers[b];
    bool sized = false;
    for (int i = 0; i < 2; ++i) {
      const Buffer& o = three[i].plan->buffers[b];
      if (o.kind != x.kind || o.index != x.index || o.parent != x.parent ||
          o.in_parent != x.in_parent || o.first != x.first || o.last != x.last)
        return nullptr;
      sized = sized || o.size != x.size;
    }
    if (!sized) continue;
    if (x.parent >= 0) return nullptr;
    for (const Buffer& child : base.buffers)
      if (child.parent == static_cast<int>(b)) return nullptr;
    Sized sz{b, {}};
    for (size_t r = 0; r < base.refs.size(); ++r)
      if (base.refs[r].buffer == static_cast<int>(b)) sz.refs.push_back(r);
    t->sized_.push_back(std::move(sz));
  }
  // Steps over descriptions that follow the key: only those that take any dims.
  for (size_t s = 0; s < base.steps.size(); ++s) {
    const Step& step = base.steps[s];
    bool reads = false;
    for (auto [a, r] : step.args) reads = reads || follows[r];
    if (!reads) continue;
    if (step.as<steps::CopyConcat>()) t->checks_.push_back({Check::kConcat, s});
    else if (step.as<steps::SmallBinary>()) t->checks_.push_back({Check::kBinary, s});
    else if (step.as<steps::RowSoftmax>() || step.as<steps::RowLayerNorm>())
      t->checks_.push_back({Check::kRows, s});
    else if (step.as<steps::RowMean>()) t->checks_.push_back({Check::kRowMean, s});
    else if (step.as<steps::BatchGemm>()) t->checks_.push_back({Check::kMatMul, s});
    else if (step.as<steps::Gather>()) t->checks_.push_back({Check::kGather, s});
    else if (step.as<steps::NBitsMatMul>()) t->checks_.push_back({Check::kNBits, s});
    else if (step.as<steps::DynamicQuantize>() || step.as<steps::Quantize>() ||
             step.as<steps::Table>())
      t->checks_.push_back({Check::kElements, s});
    else if (const auto* e = step.as<steps::Eltwise>())  // an Erf's loop takes any size
      t->checks_.push_back(
          {e->fn == steps::Eltwise::kErf ? Check::kElements : Check::kSmallElements, s});
    else if (runtime_matmul(step)) {
      for (auto [a, r] : step.args)
        if (follows[r] && a != DNNL_ARG_SRC && a != DNNL_ARG_WEIGHTS && a != DNNL_ARG_DST)
          return nullptr;
      t->checks_.push_back({Check::kMatMul, s});
    } else {
      return nullptr;
    }
  }
  // The first two instances, derived from the third, must be what was lowered.
  for (int i = 0; i < 2; ++i) {
    std::shared_ptr<Compiled> d = t->derive(three[i].key, three[i].plan->threads);
    if (d == nullptr || !same_plan(*d, *three[i].plan)) return nullptr;
  }
  if (std::shared_ptr<Compiled> d = t->derive(three[2].key, base.threads);
      d == nullptr || !same_plan(*d, base))
    return nullptr;
  return t;
}

size_t InstanceTemplate::value_bytes(const std::vector<int64_t>& key, int v) const {
  const bp_value_t& value = view_.values[v];
  return static_cast<size_t>(sdk::element_count(key.data() + offsets_[v], value.rank)) *
         sdk::dtype_size(value.dtype);
}

bool InstanceTemplate::fits(const Compiled& c) const {
  for (const Check& check : checks_) {
    const Step& step = c.steps[check.step];
    switch (check.kind) {
      case Check::kConcat:
        if (!concat_fits(c, step)) return false;
        break;
      case Check::kBinary:
        if (!binary_fits(c, step)) return false;
        break;
      case Check::kRows: {
        const dnnl_memory_desc_t& y = md_of(c, arg_ref(step, DNNL_ARG_DST));
        if (!same_dims(md_of(c, arg_ref(step, DNNL_ARG_SRC)), y)) return false;
        break;
      }
      case Check::kRowMean: {
        const dnnl_memory_desc_t& x = md_of(c, arg_ref(step, DNNL_ARG_SRC));
        const dnnl_memory_desc_t& y = md_of(c, arg_ref(step, DNNL_ARG_DST));
        if (x.ndims != y.ndims || x.ndims == 0 || y.dims[y.ndims - 1] != 1 ||
            !std::equal(x.dims, x.dims + x.ndims - 1, y.dims))
          return false;
        break;
      }
      case Check::kMatMul:
        if (!matmul_fits(c, step)) return false;
        break;
      case Check::kGather:
        if (!gather_fits(c, step)) return false;
        break;
      case Check::kNBits: {  // rows of A [..., k] into rows of Y [..., n]
        const auto& op = *step.as<steps::NBitsMatMul>();
        const dnnl_memory_desc_t& x = md_of(c, arg_ref(step, DNNL_ARG_SRC));
        const dnnl_memory_desc_t& y = md_of(c, arg_ref(step, DNNL_ARG_DST));
        if (x.ndims != y.ndims || x.ndims == 0 || x.dims[x.ndims - 1] != op.k ||
            y.dims[y.ndims - 1] != op.n || !std::equal(x.dims, x.dims + x.ndims - 1, y.dims))
          return false;
        break;
      }
      case Check::kElements:
      case Check::kSmallElements: {
        const dnnl_memory_desc_t& x = md_of(c, arg_ref(step, DNNL_ARG_SRC));
        const dnnl_memory_desc_t& y = md_of(c, arg_ref(step, DNNL_ARG_DST));
        if (sdk::element_count(x.dims, static_cast<size_t>(x.ndims)) !=
                sdk::element_count(y.dims, static_cast<size_t>(y.ndims)) ||
            (check.kind == Check::kSmallElements && !small(y)))
          return false;
        break;
      }
    }
  }
  return true;
}

std::shared_ptr<Compiled> InstanceTemplate::base_copy() const {
  const Compiled& base = *base_.plan;
  auto plan = std::make_shared<Compiled>(base.host());
  plan->name = base.name;
  plan->threads = base.threads;
  plan->tuning = base.tuning;
  plan->buffers = base.buffers;
  plan->refs = base.refs;
  plan->steps = base.steps;
  plan->scratch_bytes = base.scratch_bytes;
  return plan;
}

std::shared_ptr<Compiled> InstanceTemplate::derive(const std::vector<int64_t>& key,
                                                   int threads) const {
  std::shared_ptr<Compiled> plan = base_copy();
  return derive_into(key, threads, *plan) ? plan : nullptr;
}

bool InstanceTemplate::covers(const std::vector<int64_t>& key, int threads) const {
  if (key.size() != base_.key.size() || threads != base_.plan->threads) return false;
  for (size_t p = 0; p < key.size(); ++p)
    if (open_[p] == kClosed ? key[p] != base_.key[p] : key[p] < 2 || key[p] != key[open_[p]])
      return false;
  return true;
}

bool InstanceTemplate::derive_into(const std::vector<int64_t>& key, int threads,
                                   Compiled& plan) const {
  const Compiled& base = *base_.plan;
  if (!covers(key, threads)) return false;
  // Refs of one value (a destination and the next step's source) get one
  // description.
  struct Made {
    const dnnl_memory_desc_t* base;
    dnnl_dims_t dims;
    SharedMd md;
  };
  std::vector<Made> made;
  made.reserve(follow_.size());
  for (const Follow& f : follow_) {
    const dnnl_memory_desc_t& b = base.refs[f.ref].md->data;
    dnnl_dims_t dims, strides;
    for (int j = 0; j < b.ndims; ++j) {
      dims[j] = b.dims[j];
      if (f.from[j].empty()) continue;
      dims[j] = f.from[j][0].at(key);
      for (const Term& term : f.from[j])
        if (term.at(key) != dims[j]) return false;
    }
    auto same = std::find_if(made.begin(), made.end(), [&](const Made& m) {
      return m.base == &b && std::equal(dims, dims + b.ndims, m.dims);
    });
    if (same != made.end()) {
      plan.refs[f.ref].md = same->md;
      continue;
    }
    int64_t stride = 1;
    for (int j : f.inner_first) {
      strides[j] = stride;
      stride *= std::max<int64_t>(dims[j], 1);
    }
    dnnl_memory_desc_t d;
    if (dnnl_memory_desc_init_by_strides(&d, b.ndims, dims, b.data_type, strides) != dnnl_success)
      return false;
    plan.refs[f.ref].md = unit_dims_in_place(dnnl::memory::desc(d));
    made.push_back({&b, {}, plan.refs[f.ref].md});
    std::copy(dims, dims + b.ndims, made.back().dims);
  }
  plan.input_bytes.resize(view_.num_inputs);
  plan.output_bytes.resize(view_.num_outputs);
  for (size_t k = 0; k < view_.num_inputs; ++k)
    plan.input_bytes[k] = value_bytes(key, view_.inputs[k]);
  for (size_t k = 0; k < view_.num_outputs; ++k)
    plan.output_bytes[k] = value_bytes(key, view_.outputs[k]);
  for (const Sized& s : sized_) {
    Buffer& buf = plan.buffers[s.buffer];
    if (buf.kind == Buffer::kInput) {
      buf.size = plan.input_bytes[buf.index];
    } else if (buf.kind == Buffer::kOutput) {
      buf.size = plan.output_bytes[buf.index];
    } else {
      buf.size = 0;
      for (size_t r : s.refs) buf.size = std::max(buf.size, plan.refs[r].md->get_size());
    }
  }
  for (const Follow& f : follow_)
    if (plan.refs[f.ref].md->get_size() > plan.buffers[plan.refs[f.ref].buffer].size) return false;
  if (!fits(plan)) return false;
  // Every other buffer keeps the base's offset (the base's plan is valid for
  // them: same sizes, same steps); the sized ones are planned among
  // themselves after the base's arena, and the scratchpad goes first
  // (Compiled::scratch_first). The previous instance's binder then
  // shares the memory objects of every ref but those over them (Binder).
  std::vector<sdk::ArenaTensor> tensors;
  std::vector<size_t> placed;
  for (const Sized& s : sized_) {
    const Buffer& buf = plan.buffers[s.buffer];
    if (buf.kind != Buffer::kArena || buf.last < 0) continue;
    tensors.push_back({static_cast<size_t>(buf.first), static_cast<size_t>(buf.last), buf.size});
    placed.push_back(s.buffer);
  }
  plan.scratch_first = true;
  const size_t after = align_up(base.arena_bytes);
  const sdk::ArenaPlan arena = sdk::plan_arena(tensors, kAlign);
  for (size_t t = 0; t < placed.size(); ++t)
    plan.buffers[placed[t]].offset = after + arena.offsets[t];
  plan.arena_bytes = after + arena.bytes;
  return true;
}

}  // namespace backplane::onednn
