// bands.cpp — see bands.hpp.
#include "onednn/bands.hpp"

#include "onednn/cores.hpp"
#include "onednn/impl_check.hpp"
#include "onednn/plan_builder.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <numeric>
#include <string_view>

namespace backplane::onednn {

BandMode band_mode() {
  // Read at every execute, as BACKPLANE_ONEDNN_FREE_CORES is (tests change it).
  const char* v = std::getenv("BACKPLANE_ONEDNN_BANDS");
  if (v != nullptr && std::string_view(v) == "0") return BandMode::kNever;
  if (v != nullptr && std::string_view(v) == "1") return BandMode::kAlways;
  return BandMode::kWhenCapped;
}

namespace {

using Md = dnnl::memory::desc;

// Pieces per step: enough that a descheduled thread holds back a small
// share, few enough that each piece is still a fair amount of work.
constexpr int kPiecesPerThread = 4;
constexpr int64_t kMinPieceElements = 16384;
constexpr int64_t kMinPieceMacs = 1 << 18;

size_t type_size(const Md& md) {
  return dnnl_data_type_size(static_cast<dnnl_data_type_t>(md.data.data_type));
}
int64_t elements(const Md& md) { return sdk::element_count(md.dims()); }

// Plain, no padding, no offset: element ranges of it are tensors of their own.
bool dense(const Md& md) {
  const dnnl_memory_desc_t& d = md.data;
  return d.format_kind == dnnl_blocked && d.offset0 == 0 && d.extra.flags == 0 &&
         md.get_size() == size_t(elements(md)) * type_size(md);
}

// Any rank, plain (strides, no blocks), no offset or padding.
bool plain(const Md& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked || d.offset0 != 0 || d.extra.flags != 0 ||
      d.format_desc.blocking.inner_nblks != 0)
    return false;
  for (int i = 0; i < d.ndims; ++i)
    if (d.padded_dims[i] != d.dims[i]) return false;
  return true;
}

// 4-D and plain (channels-last, or a window of a wider tensor's channels):
// a band of an image's rows is a tensor of its own, with the same strides.
bool plain_4d(const Md& md) { return md.data.ndims == 4 && plain(md); }

// `count` of dim `dim` of a plain tensor whose dims before it are 1 (an
// outer slice of it): the same strides but for those outer dims, whose
// stride is the slice's span as in a dense tensor (oneDNN compares strides
// to pick its kernels).
Md sub_plain(const Md& full, int dim, int64_t count) {
  const int n = full.data.ndims;
  dnnl::memory::dims d = full.dims();
  const auto* st = full.data.format_desc.blocking.strides;
  dnnl::memory::dims strides(st, st + n);
  d[size_t(dim)] = count;
  int64_t span = 1;
  for (int e = dim; e < n; ++e) span = std::max(span, strides[size_t(e)] * d[size_t(e)]);
  for (int i = 0; i < dim; ++i) strides[size_t(i)] = span;
  return Md(d, full.data_type(), strides);
}

Md rows_of(const Md& full, int64_t rows) {
  dnnl::memory::dims d = full.dims();
  d[0] = 1;
  d[2] = rows;
  const auto* st = full.data.format_desc.blocking.strides;
  dnnl::memory::dims strides(st, st + 4);
  // One image: its stride is the band's size in rows, as in a dense tensor
  // of the band's dims (oneDNN compares strides to pick its kernels).
  strides[0] = rows * strides[2];
  return Md(d, full.data_type(), strides);
}
size_t row_offset(const Md& full, int64_t image, int64_t row) {
  const auto* s = full.data.format_desc.blocking.strides;
  return size_t(image * s[0] + row * s[2]) * type_size(full);
}

// How many pieces for a step of `work` (output elements, or multiply-adds
// for a convolution: `least` of them per piece) that cuts into at most
// `limit`.
int64_t pieces_for(int threads, int64_t work, int64_t limit, int64_t least = kMinPieceElements) {
  return std::clamp<int64_t>(work / least, 1,
                             std::min<int64_t>(limit, int64_t{kPiecesPerThread} * threads));
}

// Output rows [begin, begin + count) per image: `parts` pieces in all.
struct RowBand {
  int64_t image, begin, count;
};
std::vector<RowBand> row_bands(int64_t images, int64_t rows, int64_t parts) {
  const int64_t per_image = std::max<int64_t>(1, parts / std::max<int64_t>(1, images));
  const int64_t height = (rows + per_image - 1) / per_image;
  std::vector<RowBand> out;
  for (int64_t n = 0; n < images; ++n)
    for (int64_t r = 0; r < rows; r += height) out.push_back({n, r, std::min(height, rows - r)});
  return out;
}

// The input rows a band of output rows reads through a window (kernel
// `extent` with dilation, `stride`, top padding `pad`), within the `in_rows`
// there are, and the band's own top and bottom padding.
struct Window {
  int64_t first, count, pad_top, pad_bottom;
};
Window window_rows(int64_t out_begin, int64_t out_count, int64_t stride, int64_t extent,
                   int64_t pad, int64_t in_rows) {
  const int64_t lo = out_begin * stride - pad;
  const int64_t hi = (out_begin + out_count - 1) * stride - pad + extent;
  const int64_t first = std::max<int64_t>(lo, 0), last = std::min(hi, in_rows);
  return {first, last - first, first - lo, hi - last};
}

// The channel block of a dense blocked 4-D layout (nChw16c: 16, nChw8c: 8),
// 0 for any other.
int64_t channel_block(const Md& md) {
  if (md.data.ndims != 4) return 0;
  if (md == Md(md.dims(), md.data_type(), dnnl::memory::format_tag::nChw16c)) return 16;
  if (md == Md(md.dims(), md.data_type(), dnnl::memory::format_tag::nChw8c)) return 8;
  return 0;
}
dnnl::memory::format_tag block_tag(int64_t block) {
  return block == 16 ? dnnl::memory::format_tag::nChw16c : dnnl::memory::format_tag::nChw8c;
}

// `count` channels of one image of a blocked tensor: a dense tensor of its
// own (its channels start at a block).
Md channels_of(const Md& full, int64_t block, int64_t count) {
  dnnl::memory::dims d = full.dims();
  d[0] = 1;
  d[1] = count;
  return Md(d, full.data_type(), block_tag(block));
}
size_t channel_offset(const Md& full, int64_t block, int64_t image, int64_t first) {
  const auto* s = full.data.format_desc.blocking.strides;  // s[1]: per block of channels
  return size_t(image * s[0] + first / block * s[1]) * type_size(full);
}

// One image of a dense 4-D tensor (blocked, or plain NCHW / NHWC), as a
// tensor of its own: false for any other layout.
bool image_of(const Md& full, Md& image, size_t& bytes) {
  if (full.data.ndims != 4) return false;
  dnnl::memory::dims d = full.dims();
  const int64_t images = d[0];
  d[0] = 1;
  for (auto tag : {dnnl::memory::format_tag::nChw16c, dnnl::memory::format_tag::nChw8c,
                   dnnl::memory::format_tag::nchw, dnnl::memory::format_tag::nhwc})
    if (full == Md(full.dims(), full.data_type(), tag)) {
      image = Md(d, full.data_type(), tag);
      bytes = full.get_size() / size_t(images);
      return true;
    }
  return false;
}

// Channel bands: per image, runs of whole units of `unit` channels (a block,
// or a multiple of it), `parts` pieces in all.
struct ChannelBand {
  int64_t image, first, count;
};
std::vector<ChannelBand> channel_bands(int64_t images, int64_t channels, int64_t unit,
                                       int64_t parts) {
  const int64_t units = (channels + unit - 1) / unit;
  const int64_t per_image = std::max<int64_t>(1, parts / std::max<int64_t>(1, images));
  const int64_t each = (units + per_image - 1) / per_image * unit;
  std::vector<ChannelBand> out;
  for (int64_t n = 0; n < images; ++n)
    for (int64_t c = 0; c < channels; c += each)
      out.push_back({n, c, std::min(each, channels - c)});
  return out;
}

// Post-ops that act on each output element alone (eltwise; sum, which reads
// the destination's own element): a channel band computes them as the
// whole step does.
bool elementwise_post_ops(const_dnnl_primitive_attr_t attr) {
  const_dnnl_post_ops_t po = nullptr;
  if (dnnl_primitive_attr_get_post_ops(attr, &po) != dnnl_success) return false;
  for (int i = 0; i < dnnl_post_ops_len(po); ++i) {
    const dnnl_primitive_kind_t k = dnnl_post_ops_get_kind(po, i);
    if (k != dnnl_eltwise && k != dnnl_sum) return false;
  }
  return true;
}

const Md* ref_md(const Compiled& c, const Step& step, int arg) {
  for (auto [a, r] : step.args)
    if (a == arg) return &c.refs[r].md;
  return nullptr;
}

}  // namespace

const dnnl::memory* Bands::constant_weights(const Step& step, int& bias) const {
  int weights = -1;
  bias = -1;
  for (auto [arg, ref] : step.args) {
    if (arg == DNNL_ARG_WEIGHTS) weights = ref;
    if (arg == DNNL_ARG_BIAS) bias = ref;
  }
  if (weights < 0 || !c_.refs[size_t(weights)].constant) return nullptr;
  return &c_.refs[size_t(weights)].constant;
}

Bands::Bands(Binder& binder, const Compiled& c, int threads)
    : binder_(binder), c_(c), threads_(std::clamp(threads, 1, 64)) {
  // The pieces' primitives are made for one thread: they run on helpers
  // outside any OpenMP team, or on the caller capped at one.
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  for (size_t s = 0; s < c.steps.size(); ++s) {
    const size_t at = pieces_.size();
    bool cut = false;
    try {
      cut = cut_step(s);
    } catch (const dnnl::error&) {
      cut = false;
    }
    if (!cut) {
      pieces_.resize(at);
      piece_scratch_.resize(at);
      Piece p;
      p.step = s;
      p.whole = true;
      add_whole_regions(p);
      pieces_.push_back(std::move(p));
      piece_scratch_.emplace_back();
    } else {
      ++cut_steps_;
    }
  }
  omp_set_num_threads(before);
  if (plan_report_wanted()) {
    std::vector<size_t> cut(c.steps.size(), 0);
    for (const Piece& p : pieces_)
      if (!p.whole) ++cut[p.step];
    report_bands(c, cut);
  }
  // A scratchpad per thread, as large as any piece's.
  size_t scratch = 0;
  for (const Md& md : piece_scratch_) scratch = std::max(scratch, md.get_size());
  for (int slot = 0; slot < threads_; ++slot) {
    scratch_.push_back(nullptr);
    if (scratch > 0) {
      scratch_[size_t(slot)] = static_cast<char*>(std::aligned_alloc(kAlign, align_up(scratch)));
      if (scratch_[size_t(slot)] == nullptr) throw std::bad_alloc();
    }
  }
  for (size_t i = 0; i < pieces_.size(); ++i) {
    Piece& p = pieces_[i];
    p.args.resize(size_t(threads_));
    if (!p.prim) continue;
    for (int slot = 0; slot < threads_; ++slot) {
      std::vector<dnnl_exec_arg_t>& args = p.args[size_t(slot)];
      for (const auto& [arg, mem] : p.shared) args.push_back({arg, mem.get()});
      if (piece_scratch_[i].get_size() > 0) {
        owned_.emplace_back(piece_scratch_[i], engine(), scratch_[size_t(slot)]);
        args.push_back({DNNL_ARG_SCRATCHPAD, owned_.back().get()});
      }
    }
  }
  if (!useful()) return;
  std::vector<std::vector<Region>> regions;
  regions.reserve(pieces_.size());
  for (const Piece& p : pieces_) regions.push_back(p.regions);
  for (int slot = 0; slot < threads_; ++slot) streams_.emplace_back(engine());
  flow_ = std::make_unique<Dataflow>(
      regions, threads_,
      [this](uint32_t piece, int slot) {
        execute(pieces_[piece], slot, slot == 0 ? *caller_stream_ : streams_[size_t(slot)]);
      },
      [](int) {
        // A helper is outside any OpenMP team; a whole step run on it
        // (made for the plan's threads) must open a team of one.
        omp_set_dynamic(1);
        omp_set_num_threads(1);
      },
      &band_helpers_awake());
}

// The helpers (in flow_) stop before the memories they use go.
Bands::~Bands() {
  flow_.reset();
  for (char* p : scratch_) std::free(p);
}

bool Bands::region(size_t ref, size_t offset, size_t size, bool write, Region& out) const {
  const MemRef& r = c_.refs[ref];
  if (r.constant) return false;
  if (r.scratch || r.buffer < 0) {
    out = {1, 0, SIZE_MAX, true};
    return true;
  }
  const Buffer& b = c_.buffers[size_t(r.buffer)];
  if (b.kind == Buffer::kArena) {
    out = {0, b.offset + offset, size == 0 ? b.offset + b.size : b.offset + offset + size, write};
  } else {
    const size_t space = (b.kind == Buffer::kInput ? 2 : 3) + 2 * b.index;
    out = {space, offset, size == 0 ? SIZE_MAX : offset + size, write};
  }
  return true;
}

void Bands::add_whole_regions(Piece& p) const {
  for (auto [arg, ref] : c_.steps[p.step].args) {
    Region r;
    // An RNN (never cut) writes its final states too.
    const bool write = arg == DNNL_ARG_DST || arg == DNNL_ARG_SCRATCHPAD ||
                       arg == DNNL_ARG_DST_ITER || arg == DNNL_ARG_DST_ITER_C ||
                       (arg >= DNNL_ARG_MULTIPLE_DST && arg < DNNL_ARG_MULTIPLE_DST + 1024);
    if (region(size_t(ref), 0, 0, write, r)) p.regions.push_back(r);
  }
}

dnnl::memory Bands::band_memory(size_t ref, size_t offset, const Md& md) {
  const MemRef& r = c_.refs[ref];
  const bool bound = !r.constant && !r.scratch && r.buffer >= 0 &&
                     c_.buffers[size_t(r.buffer)].kind != Buffer::kArena;
  if (bound) {
    dnnl::memory mem(md, engine(), DNNL_MEMORY_NONE);
    rebinds_.push_back({mem, ref, offset});
    return mem;
  }
  char* base = static_cast<char*>(binder_.memory(ref).get_data_handle());
  return dnnl::memory(md, engine(), base + offset);
}

bool Bands::release_cuts(std::vector<Cut>& cuts) {
  for (Cut& cut : cuts)
    if (cut.pd != nullptr) dnnl_primitive_desc_destroy(cut.pd);
  cuts.clear();
  return false;
}

bool Bands::add_pieces(size_t s, std::vector<Cut>& cuts, bool weights_copy) {
  const Step& step = c_.steps[s];
  // Every piece: an optimised implementation, over the plan's memories as
  // they are laid out (the weights as the plan reordered them).
  for (const Cut& cut : cuts) {
    if (cut.pd == nullptr) return release_cuts(cuts);
    const char* impl = nullptr;
    if (dnnl_primitive_desc_query(cut.pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        impl == nullptr || is_reference_impl(impl))
      return release_cuts(cuts);
    for (auto [arg, ref] : step.args) {
      if (arg == DNNL_ARG_SCRATCHPAD) continue;
      if (arg == DNNL_ARG_WEIGHTS && (weights_copy || cut.weights)) continue;
      const Md* want = &c_.refs[size_t(ref)].md;
      for (const BandArg& b : cut.args)
        if (b.arg == arg) want = &b.md;
      const dnnl_memory_desc_t* got =
          dnnl_primitive_desc_query_md(cut.pd, dnnl_query_exec_arg_md, arg);
      if (got == nullptr || Md(*got) != *want) return release_cuts(cuts);
    }
  }
  for (Cut& cut : cuts) {
    Piece p;
    p.step = s;
    p.prim = dnnl::primitive(static_cast<const_dnnl_primitive_desc_t>(cut.pd));
    const dnnl_memory_desc_t* scratch =
        dnnl_primitive_desc_query_md(cut.pd, dnnl_query_scratchpad_md, 0);
    piece_scratch_.push_back(scratch != nullptr ? Md(*scratch) : Md());
    for (auto [arg, ref] : step.args) {
      if (arg == DNNL_ARG_SCRATCHPAD) continue;
      const BandArg* band = nullptr;
      for (const BandArg& b : cut.args)
        if (b.arg == arg) band = &b;
      const bool write = arg == DNNL_ARG_DST;
      Region r;
      if (region(size_t(ref), band != nullptr ? band->offset : 0,
                 band != nullptr ? band->md.get_size() : 0, write, r))
        p.regions.push_back(r);
      if (band != nullptr) {
        owned_.push_back(band_memory(size_t(ref), band->offset, band->md));
        p.shared.emplace_back(arg, owned_.back());
      } else if (arg == DNNL_ARG_WEIGHTS && cut.weights) {
        p.shared.emplace_back(arg, cut.weights);
      } else if (arg == DNNL_ARG_WEIGHTS && weights_copy) {
        p.shared.emplace_back(arg, weights_as(size_t(ref), Md(*dnnl_primitive_desc_query_md(
                                                               cut.pd, dnnl_query_weights_md, 0))));
      } else {
        p.shared.emplace_back(arg, binder_.memory(size_t(ref)));
      }
    }
    pieces_.push_back(std::move(p));
  }
  release_cuts(cuts);
  return true;
}

dnnl::memory Bands::weights_as(size_t ref, const Md& md) {
  const dnnl::memory& plan = binder_.memory(ref);
  if (plan.get_desc() == md) return plan;
  for (const auto& [have, mem] : weight_copies_)
    if (have == ref && mem.get_desc() == md) return mem;
  dnnl::memory copy(md, engine());
  dnnl::stream stream(engine());
  dnnl::reorder(plan, copy).execute(stream, const_cast<dnnl::memory&>(plan), copy);
  stream.wait();
  weight_copies_.emplace_back(ref, copy);
  return copy;
}

bool Bands::cut_concat_norm(size_t s) {
  const int64_t pixels = binder_.concat_norm_pixels(s);
  const Md* dst = ref_md(c_, c_.steps[s], DNNL_ARG_DST);
  if (dst == nullptr || pixels <= 0) return false;
  const int64_t parts = pieces_for(threads_, elements(*dst), pixels);
  if (parts < 2) return false;
  const int64_t each = (pixels + parts - 1) / parts;
  for (int64_t b = 0; b < pixels; b += each) {
    Piece p;
    p.step = s;
    p.begin = b;
    p.end = std::min(pixels, b + each);
    // Its pixels of every source and of the destination (dense
    // channels-last, lower_concat_norm), all of the constants.
    for (auto [arg, ref] : c_.steps[s].args) {
      const Md& md = c_.refs[size_t(ref)].md;
      const bool cut =
          arg == DNNL_ARG_DST || (arg >= DNNL_ARG_MULTIPLE_SRC && arg < DNNL_ARG_MULTIPLE_DST);
      // A pixel's row of channels; only the cut tensors (4-D) have one, the
      // constants (1-D per-channel scale and shift) are read whole.
      const size_t row = cut ? size_t(md.dims()[1]) * type_size(md) : 0;
      Region r;
      if (region(size_t(ref), cut ? size_t(p.begin) * row : 0,
                 cut ? size_t(p.end - p.begin) * row : 0, arg == DNNL_ARG_DST, r))
        p.regions.push_back(r);
    }
    pieces_.push_back(std::move(p));
    piece_scratch_.emplace_back();
  }
  return true;
}

Bands::Cut Bands::cut_of(const void* desc, const_dnnl_primitive_attr_t attr,
                         std::vector<BandArg> args) {
  Cut cut;
  if (dnnl_primitive_desc_create(&cut.pd, static_cast<const_dnnl_op_desc_t>(desc), attr,
                                 engine().get(), nullptr) != dnnl_success)
    cut.pd = nullptr;
  cut.args = std::move(args);
  return cut;
}

bool Bands::cut_step(size_t s) {
  const Step& step = c_.steps[s];
  if (step.concat_norm) return cut_concat_norm(s);
  if (step.copy_concat || step.gather || !step.prim) return false;
  const_dnnl_primitive_desc_t pd = step.prim.get_primitive_desc();
  dnnl_primitive_kind_t kind{};
  if (dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &kind) != dnnl_success)
    return false;
  const_dnnl_primitive_attr_t attr = nullptr;
  if (dnnl_primitive_desc_get_attr(pd, &attr) != dnnl_success) return false;
  const_dnnl_op_desc_t op = nullptr;
  if (kind != dnnl_concat && kind != dnnl_reorder &&
      dnnl_primitive_desc_query(pd, dnnl_query_op_d, 0, &op) != dnnl_success)
    return false;
  const Md* src = ref_md(c_, step, DNNL_ARG_SRC);
  const Md* dst = ref_md(c_, step, DNNL_ARG_DST);
  std::vector<Cut> cuts;
  auto make = [&](const void* desc, std::vector<BandArg> args) {
    cuts.push_back(cut_of(desc, attr, std::move(args)));
  };

  if (dst != nullptr && channel_block(*dst) > 0 &&
      (kind == dnnl_convolution || kind == dnnl_pooling_v2 ||
       ((kind == dnnl_eltwise || kind == dnnl_binary) && !dense(*dst))))
    return cut_channels(s, kind, attr, op);
  if (kind == dnnl_convolution || kind == dnnl_pooling_v2) {
    if (src == nullptr || dst == nullptr || !plain_4d(*src) || !plain_4d(*dst)) return false;
    const int64_t images = src->dims()[0], in_rows = src->dims()[2], out_rows = dst->dims()[2];
    dnnl_convolution_desc_t conv{};
    dnnl_pooling_v2_desc_t pool{};
    int64_t stride = 0, extent = 0, pad = 0;
    Md weights, bias;
    if (kind == dnnl_convolution) {
      conv = *static_cast<const dnnl_convolution_desc_t*>(op);
      if (conv.prop_kind != dnnl_forward_inference && conv.prop_kind != dnnl_forward_training)
        return false;
      weights = Md(*dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0));
      bias = Md(*dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 1));
      const dnnl::memory::dims w = weights.dims();
      stride = conv.strides[0];
      extent = (w[w.size() - 2] - 1) * (conv.dilates[0] + 1) + 1;
      pad = conv.padding[0][0];
    } else {
      pool = *static_cast<const dnnl_pooling_v2_desc_t*>(op);
      if (pool.prop_kind != dnnl_forward_inference) return false;  // no workspace
      stride = pool.strides[0];
      extent = (pool.kernel[0] - 1) * (pool.dilation[0] + 1) + 1;
      pad = pool.padding[0][0];
    }
    // A convolution's work: each output element's multiply-adds (a weight
    // tensor's elements per output channel).
    const int64_t parts =
        kind == dnnl_convolution
            ? pieces_for(threads_, elements(*dst) * (elements(weights) / dst->dims()[1]),
                         images * out_rows, kMinPieceMacs)
            : pieces_for(threads_, elements(*dst), images * out_rows);
    if (parts < 2) return false;
    // The weights as the plan laid them out; else (no optimised kernel for
    // them at one thread) in the layout the pieces prefer, a copy.
    for (const bool copy : {false, true}) {
      if (copy) {
        int bias_ref = -1;
        if (kind != dnnl_convolution || constant_weights(step, bias_ref) == nullptr) return false;
        weights = Md(weights.dims(), weights.data_type(), dnnl::memory::format_tag::any);
      }
      for (const RowBand& band : row_bands(images, out_rows, parts)) {
        const Window in = window_rows(band.begin, band.count, stride, extent, pad, in_rows);
        if (in.count <= 0) return release_cuts(cuts);
        const Md band_src = rows_of(*src, in.count), band_dst = rows_of(*dst, band.count);
        std::vector<BandArg> args = {
            {DNNL_ARG_SRC, row_offset(*src, band.image, in.first), band_src},
            {DNNL_ARG_DST, row_offset(*dst, band.image, band.begin), band_dst}};
        if (kind == dnnl_convolution) {
          dnnl_convolution_desc_t d = conv;
          d.src_desc = band_src.data;
          d.dst_desc = band_dst.data;
          d.weights_desc = weights.data;
          d.bias_desc = bias.data;
          d.padding[0][0] = in.pad_top;
          d.padding[1][0] = in.pad_bottom;
          make(&d, std::move(args));
        } else {
          dnnl_pooling_v2_desc_t d = pool;
          d.src_desc = band_src.data;
          d.dst_desc = band_dst.data;
          d.padding[0][0] = in.pad_top;
          d.padding[1][0] = in.pad_bottom;
          make(&d, std::move(args));
        }
      }
      if (add_pieces(s, cuts, copy)) return true;
    }
    return false;
  }

  if (kind == dnnl_eltwise) {
    if (src == nullptr || dst == nullptr || *src != *dst || !dense(*src)) return false;
    const dnnl_eltwise_desc_t eltwise = *static_cast<const dnnl_eltwise_desc_t*>(op);
    const int64_t count = elements(*src);
    const int64_t parts = pieces_for(threads_, count, count / 16);
    if (parts < 2) return false;
    const int64_t each = ((count + parts - 1) / parts + 15) / 16 * 16;
    for (int64_t b = 0; b < count; b += each) {
      const Md flat({std::min(each, count - b)}, src->data_type(), dnnl::memory::format_tag::a);
      dnnl_eltwise_desc_t d = eltwise;
      d.data_desc = flat.data;
      const size_t offset = size_t(b) * type_size(*src);
      make(&d, {{DNNL_ARG_SRC, offset, flat}, {DNNL_ARG_DST, offset, flat}});
    }
    return add_pieces(s, cuts, false);
  }

  if (kind == dnnl_binary) {
    const Md* a = ref_md(c_, step, DNNL_ARG_SRC_0);
    const Md* b = ref_md(c_, step, DNNL_ARG_SRC_1);
    if (a == nullptr || b == nullptr || dst == nullptr || *a != *dst) return false;
    const dnnl_binary_desc_t binary = *static_cast<const dnnl_binary_desc_t*>(op);
    const int64_t count = elements(*a);
    if (dense(*a) && (*b == *a || elements(*b) == 1)) {
      // Element ranges: both operands alike, or the second a scalar.
      const int64_t parts = pieces_for(threads_, count, count / 16);
      if (parts < 2) return false;
      const int64_t each = ((count + parts - 1) / parts + 15) / 16 * 16;
      const Md one({1}, b->data_type(), dnnl::memory::format_tag::a);
      for (int64_t i = 0; i < count; i += each) {
        const Md flat({std::min(each, count - i)}, a->data_type(), dnnl::memory::format_tag::a);
        const size_t offset = size_t(i) * type_size(*a);
        const bool scalar = *b != *a;
        dnnl_binary_desc_t d = binary;
        d.src_desc[0] = flat.data;
        d.src_desc[1] = scalar ? one.data : flat.data;
        d.dst_desc = flat.data;
        make(&d, {{DNNL_ARG_SRC_0, offset, flat},
                  {DNNL_ARG_SRC_1, scalar ? 0 : offset, scalar ? one : flat},
                  {DNNL_ARG_DST, offset, flat}});
      }
      return add_pieces(s, cuts, false);
    }
    const dnnl::memory::dims bd = b->dims();
    if (plain_4d(*a) && bd.size() == 4 && bd[0] == 1 && bd[2] == 1 && bd[3] == 1) {
      // Rows, the second operand per channel (squeeze-excite's scale).
      const int64_t images = a->dims()[0], rows = a->dims()[2];
      const int64_t parts = pieces_for(threads_, count, images * rows);
      if (parts < 2) return false;
      for (const RowBand& band : row_bands(images, rows, parts)) {
        const Md rows_md = rows_of(*a, band.count);
        const size_t offset = row_offset(*a, band.image, band.begin);
        dnnl_binary_desc_t d = binary;
        d.src_desc[0] = rows_md.data;
        d.dst_desc = rows_md.data;
        make(&d, {{DNNL_ARG_SRC_0, offset, rows_md}, {DNNL_ARG_DST, offset, rows_md}});
      }
      return add_pieces(s, cuts, false);
    }
    if (channel_block(*a) > 0) return cut_channels(s, kind, attr, op);
    return false;
  }

  if (kind == dnnl_matmul || kind == dnnl_inner_product || kind == dnnl_softmax ||
      kind == dnnl_layer_normalization || kind == dnnl_reorder)
    return cut_rows(s, kind, attr, op);

  if (kind == dnnl_concat) {
    if (dst == nullptr || step.concat_axis != 1 || !plain_4d(*dst)) return false;
    std::vector<std::pair<int, const Md*>> srcs;
    for (auto [arg, ref] : step.args)
      if (arg >= DNNL_ARG_MULTIPLE_SRC && arg < DNNL_ARG_MULTIPLE_DST) {
        if (!plain_4d(c_.refs[size_t(ref)].md)) return false;
        srcs.emplace_back(arg, &c_.refs[size_t(ref)].md);
      }
    std::sort(srcs.begin(), srcs.end());
    const int64_t images = dst->dims()[0], rows = dst->dims()[2];
    const int64_t parts = pieces_for(threads_, elements(*dst), images * rows);
    if (parts < 2 || srcs.empty()) return false;
    for (const RowBand& band : row_bands(images, rows, parts)) {
      std::vector<BandArg> args;
      std::vector<dnnl_memory_desc_t> src_mds;
      for (auto [arg, md] : srcs) {
        const Md m = rows_of(*md, band.count);
        args.push_back({arg, row_offset(*md, band.image, band.begin), m});
        src_mds.push_back(m.data);
      }
      const Md d = rows_of(*dst, band.count);
      args.push_back({DNNL_ARG_DST, row_offset(*dst, band.image, band.begin), d});
      Cut cut;
      if (dnnl_concat_primitive_desc_create(&cut.pd, &d.data, int(src_mds.size()), 1,
                                            src_mds.data(), attr, engine().get()) != dnnl_success)
        cut.pd = nullptr;
      cut.args = std::move(args);
      cuts.push_back(std::move(cut));
    }
    return add_pieces(s, cuts, false);
  }
  return false;
}

// Bands of channel blocks: a step over blocked tensors (nChw16c, nChw8c) is
// cut into runs of whole blocks of each image, each a dense blocked tensor
// of its own. A convolution's band is a run of its output channels: it
// reads the whole image (a depthwise one only its own channels) and gets
// its own slice of the weights, reordered once into the layout its
// primitive wants. A pooling, an element-wise step or a product by a
// per-channel scale (squeeze-excite's) reads the same channels it writes.
// Post-ops must act on each element alone (eltwise, sum).
bool Bands::cut_channels(size_t s, dnnl_primitive_kind_t kind, const_dnnl_primitive_attr_t attr,
                         const_dnnl_op_desc_t op) {
  const Step& step = c_.steps[s];
  const Md* src = ref_md(c_, step, kind == dnnl_binary ? DNNL_ARG_SRC_0 : DNNL_ARG_SRC);
  const Md* dst = ref_md(c_, step, DNNL_ARG_DST);
  if (src == nullptr || dst == nullptr || op == nullptr || !elementwise_post_ops(attr))
    return false;
  const int64_t block = channel_block(*dst);
  if (block == 0) return false;
  const dnnl::memory::dims dd = dst->dims();
  const int64_t images = dd[0], channels = dd[1], blocks = (channels + block - 1) / block;
  std::vector<Cut> cuts;
  auto make = [&](const void* desc, std::vector<BandArg> args) {
    cuts.push_back(cut_of(desc, attr, std::move(args)));
    return cuts.back().pd != nullptr;
  };

  if (kind == dnnl_convolution) {
    const dnnl_convolution_desc_t conv = *static_cast<const dnnl_convolution_desc_t*>(op);
    if (conv.prop_kind != dnnl_forward_inference && conv.prop_kind != dnnl_forward_training)
      return false;
    int bref = -1;
    const dnnl::memory* constant = constant_weights(step, bref);
    if (constant == nullptr) return false;
    const dnnl::memory& plan_weights = *constant;
    const Md weights = plan_weights.get_desc();
    const dnnl::memory::dims w = weights.dims();
    // Grouped (depthwise too: a group per channel): a band is whole groups,
    // and reads their source channels only, which must start at a block
    // (RegNet's groups of 16 channels in nChw16c: a group a block).
    const bool grouped = w.size() == 5;
    const int64_t group_out = grouped ? w[1] : 0, group_in = grouped ? w[2] : 0;
    if (grouped && channel_block(*src) != block) return false;
    // A band's unit: whole blocks of the output that are whole groups, whose
    // source channels are whole blocks too.
    int64_t unit = block;
    if (grouped) {
      unit = std::lcm(block, group_out);
      while ((unit / group_out * group_in) % block != 0) unit += std::lcm(block, group_out);
    }
    Md image;
    size_t image_bytes = 0;
    if (!grouped && !image_of(*src, image, image_bytes)) return false;
    const int64_t macs = elements(*dst) * (elements(weights) / channels);
    const int64_t parts =
        pieces_for(threads_, macs, images * ((channels + unit - 1) / unit), kMinPieceMacs);
    if (parts < 2) return false;
    std::map<std::pair<int64_t, int64_t>, dnnl::memory> slices;  // (first, count)
    for (const ChannelBand& band : channel_bands(images, channels, unit, parts)) {
      // Grouped: groups [first_group, first_group + groups), reading source
      // channels [first_in, first_in + groups * group_in) (whole, and on a
      // block, by the unit).
      const int64_t first_group = grouped ? band.first / group_out : 0;
      const int64_t groups = grouped ? band.count / group_out : 0;
      const int64_t first_in = first_group * group_in;
      const Md band_dst = channels_of(*dst, block, band.count);
      const Md band_src = grouped ? channels_of(*src, block, groups * group_in) : image;
      dnnl::memory::dims wd = w, at(w.size(), 0);
      wd[0] = grouped ? groups : band.count;  // groups, or output channels
      at[0] = grouped ? first_group : band.first;
      const Md band_bias({band.count}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
      dnnl_convolution_desc_t d = conv;
      d.src_desc = band_src.data;
      d.dst_desc = band_dst.data;
      d.weights_desc = Md(wd, weights.data_type(), dnnl::memory::format_tag::any).data;
      if (bref >= 0) d.bias_desc = band_bias.data;
      std::vector<BandArg> args = {
          {DNNL_ARG_SRC,
           grouped ? channel_offset(*src, block, band.image, first_in)
                   : size_t(band.image) * image_bytes,
           band_src},
          {DNNL_ARG_DST, channel_offset(*dst, block, band.image, band.first), band_dst}};
      if (bref >= 0) args.push_back({DNNL_ARG_BIAS, size_t(band.first) * sizeof(float), band_bias});
      if (!make(&d, std::move(args))) return release_cuts(cuts);
      // Its weights: the plan's, these output channels, in its own layout
      // (the same slice for every image: made once).
      Cut& cut = cuts.back();
      auto& slice_copy = slices[{band.first, band.count}];
      if (!slice_copy) slice_copy = weights_slice(plan_weights, wd, at, cut.pd);
      if (!slice_copy) return release_cuts(cuts);  // a slice oneDNN cannot describe or reorder
      cut.weights = slice_copy;
    }
    return add_pieces(s, cuts, false) || release_cuts(cuts);
  }

  // The rest read the channels they write, in the destination's layout.
  if (channel_block(*src) != block || (kind != dnnl_pooling_v2 && *src != *dst)) return false;
  const int64_t parts = pieces_for(threads_, elements(*dst), images * blocks);
  if (parts < 2) return false;
  for (const ChannelBand& band : channel_bands(images, channels, block, parts)) {
    const Md band_src = channels_of(*src, block, band.count);
    const Md band_dst = channels_of(*dst, block, band.count);
    const size_t src_at = channel_offset(*src, block, band.image, band.first);
    const size_t dst_at = channel_offset(*dst, block, band.image, band.first);
    if (kind == dnnl_pooling_v2) {
      dnnl_pooling_v2_desc_t d = *static_cast<const dnnl_pooling_v2_desc_t*>(op);
      if (d.prop_kind != dnnl_forward_inference) return release_cuts(cuts);  // no workspace
      d.src_desc = band_src.data;
      d.dst_desc = band_dst.data;
      if (!make(&d, {{DNNL_ARG_SRC, src_at, band_src}, {DNNL_ARG_DST, dst_at, band_dst}}))
        return release_cuts(cuts);
    } else if (kind == dnnl_eltwise) {
      dnnl_eltwise_desc_t d = *static_cast<const dnnl_eltwise_desc_t*>(op);
      d.data_desc = band_src.data;
      if (!make(&d, {{DNNL_ARG_SRC, src_at, band_src}, {DNNL_ARG_DST, dst_at, band_dst}}))
        return release_cuts(cuts);
    } else if (kind == dnnl_binary) {
      // The second operand alike, or a scale per channel (1xCx1x1) in a
      // layout whose channels are contiguous.
      const Md* b = ref_md(c_, step, DNNL_ARG_SRC_1);
      if (b == nullptr) return release_cuts(cuts);
      Md band_b;
      size_t b_at = 0;
      if (*b == *src) {
        band_b = band_src;
        b_at = src_at;
      } else {
        const dnnl::memory::dims scale = {1, channels, 1, 1};
        bool per_channel = false;
        for (auto tag :
             {block_tag(block), dnnl::memory::format_tag::nchw, dnnl::memory::format_tag::nhwc})
          if (*b == Md(scale, b->data_type(), tag)) {
            band_b = Md({1, band.count, 1, 1}, b->data_type(), tag);
            per_channel = true;
          }
        if (!per_channel) return release_cuts(cuts);
        b_at = size_t(band.first) * type_size(*b);
      }
      dnnl_binary_desc_t d = *static_cast<const dnnl_binary_desc_t*>(op);
      d.src_desc[0] = band_src.data;
      d.src_desc[1] = band_b.data;
      d.dst_desc = band_dst.data;
      if (!make(&d, {{DNNL_ARG_SRC_0, src_at, band_src},
                     {DNNL_ARG_SRC_1, b_at, band_b},
                     {DNNL_ARG_DST, dst_at, band_dst}}))
        return release_cuts(cuts);
    } else {
      return release_cuts(cuts);
    }
  }
  return add_pieces(s, cuts, false) || release_cuts(cuts);
}

dnnl::memory Bands::weights_slice(const dnnl::memory& plan_weights, const dnnl::memory::dims& dims,
                                  const dnnl::memory::dims& at, const_dnnl_primitive_desc_t pd) {
  try {
    const Md want(*dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0));
    const dnnl::memory slice(plan_weights.get_desc().submemory_desc(dims, at), engine(),
                             plan_weights.get_data_handle());
    dnnl::memory copy(want, engine());
    dnnl::stream stream(engine());
    dnnl::reorder(slice, copy).execute(stream, const_cast<dnnl::memory&>(slice), copy);
    stream.wait();
    return copy;
  } catch (const dnnl::error&) {
    return {};
  }
}

bool Bands::cut_outputs(size_t s, const_dnnl_primitive_attr_t attr, const_dnnl_op_desc_t op) {
  const Step& step = c_.steps[s];
  const Md* dst = ref_md(c_, step, DNNL_ARG_DST);
  if (dst == nullptr || dst->data.ndims != 2 || !elementwise_post_ops(attr)) return false;
  // One row (more are cut by rows, cut_rows): a band's columns are dense.
  const dnnl::memory::dims dd = dst->dims();
  const int64_t outputs = dd[1];
  if (dd[0] != 1 || *dst != Md(dd, dst->data_type(), dnnl::memory::format_tag::ab)) return false;
  int bref = -1;
  const dnnl::memory* constant = constant_weights(step, bref);
  if (constant == nullptr) return false;
  const dnnl::memory& plan_weights = *constant;
  const dnnl::memory::dims w = plan_weights.get_desc().dims();
  // Bands of whole units of 64 outputs: the weights' blocks (AB16b64a).
  constexpr int64_t kUnit = 64;
  const int64_t units = (outputs + kUnit - 1) / kUnit;
  const int64_t macs = elements(*dst) * (sdk::element_count(w) / outputs);
  const int64_t parts = pieces_for(threads_, macs, units, kMinPieceMacs);
  if (parts < 2) return false;
  const int64_t each = (units + parts - 1) / parts * kUnit;
  std::vector<Cut> cuts;
  for (int64_t first = 0; first < outputs; first += each) {
    const int64_t count = std::min(each, outputs - first);
    // Its columns of the destination, its slice of the bias and of the
    // weights.
    const Md band_dst({1, count}, dst->data_type(), dnnl::memory::format_tag::ab);
    const Md band_bias({count}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
    dnnl::memory::dims wd = w, at(w.size(), 0);
    wd[0] = count;
    at[0] = first;
    dnnl_inner_product_desc_t d = *static_cast<const dnnl_inner_product_desc_t*>(op);
    d.dst_desc = band_dst.data;
    d.weights_desc =
        Md(wd, plan_weights.get_desc().data_type(), dnnl::memory::format_tag::any).data;
    std::vector<BandArg> args = {{DNNL_ARG_DST, size_t(first) * type_size(*dst), band_dst}};
    if (bref >= 0) {
      d.bias_desc = band_bias.data;
      args.push_back({DNNL_ARG_BIAS, size_t(first) * sizeof(float), band_bias});
    }
    cuts.push_back(cut_of(&d, attr, std::move(args)));
    Cut& cut = cuts.back();
    if (cut.pd == nullptr) return release_cuts(cuts);
    cut.weights = weights_slice(plan_weights, wd, at, cut.pd);
    if (!cut.weights) return release_cuts(cuts);
  }
  return add_pieces(s, cuts, false) || release_cuts(cuts);
}

// Steps over plain tensors whose rows (dim n - 2, per batch index) are
// independent: a matmul's source and destination rows (its weights shared
// when they broadcast over the batch, else cut by batch too), an inner
// product's (2-D), a layer normalization's or a softmax over the last dim,
// a reorder between plain layouts.
bool Bands::cut_rows(size_t s, dnnl_primitive_kind_t kind, const_dnnl_primitive_attr_t attr,
                     const_dnnl_op_desc_t op) {
  const Step& step = c_.steps[s];
  const Md* src = ref_md(c_, step, DNNL_ARG_SRC);
  const Md* dst = ref_md(c_, step, DNNL_ARG_DST);
  if (src == nullptr || dst == nullptr || !plain(*src) || !plain(*dst)) return false;
  const int n = dst->data.ndims;
  const bool same_shape = src->dims() == dst->dims();
  if (n < 2 || src->data.ndims != n ||
      (!same_shape && kind != dnnl_matmul && kind != dnnl_inner_product))
    return false;
  for (auto [arg, ref] : step.args)
    if (arg == DNNL_ARG_MEAN || arg == DNNL_ARG_VARIANCE || arg == DNNL_ARG_WORKSPACE) return false;
  const dnnl::memory::dims dd = dst->dims();
  int64_t work = elements(*dst), least = kMinPieceElements;
  const Md* wei = ref_md(c_, step, DNNL_ARG_WEIGHTS);
  if (kind == dnnl_matmul || kind == dnnl_inner_product) {
    if (wei == nullptr || wei->data.ndims != n || (kind == dnnl_inner_product && n != 2))
      return false;
    for (int d = 0; d < n - 2; ++d)  // weights per batch are cut with the source
      if (wei->dims()[size_t(d)] != 1 && !plain(*wei)) return false;
    if (const Md* bias = ref_md(c_, step, DNNL_ARG_BIAS); bias != nullptr && kind == dnnl_matmul)
      for (int d = 0; d < n - 1; ++d)
        if (bias->dims()[size_t(d)] != 1) return false;
    work *= src->dims()[size_t(n - 1)];  // multiply-adds
    least = kMinPieceMacs;
  }
  // The outermost dim (of the rows, dims before the last) that is not 1.
  int dim = 0;
  while (dim < n - 2 && dd[size_t(dim)] == 1) ++dim;
  const int64_t size = dd[size_t(dim)];
  const int64_t parts = pieces_for(threads_, work, size, least);
  if (parts < 2) return kind == dnnl_inner_product && cut_outputs(s, attr, op);
  const int64_t each = (size + parts - 1) / parts;
  // Broadcast operands (a dim of 1 where the destination's is not) are not
  // cut along it.
  auto slice = [&](const Md& md, int64_t begin, int64_t count, size_t& offset) {
    if (md.dims()[size_t(dim)] == 1) {
      offset = 0;
      return sub_plain(md, dim, 1);
    }
    offset = size_t(begin * md.data.format_desc.blocking.strides[dim]) * type_size(md);
    return sub_plain(md, dim, count);
  };
  std::vector<Cut> cuts;
  for (int64_t begin = 0; begin < size; begin += each) {
    const int64_t count = std::min(each, size - begin);
    size_t a_off = 0, c_off = 0;
    const Md a = slice(*src, begin, count, a_off), c = slice(*dst, begin, count, c_off);
    std::vector<BandArg> args = {{DNNL_ARG_SRC, a_off, a}, {DNNL_ARG_DST, c_off, c}};
    Cut cut;
    dnnl_status_t st = dnnl_unimplemented;
    if (kind == dnnl_matmul) {
      dnnl_matmul_desc_t d = *static_cast<const dnnl_matmul_desc_t*>(op);
      d.src_desc = a.data;
      d.dst_desc = c.data;
      d.weights_desc = wei->data;
      if (dim < n - 2 && wei->dims()[size_t(dim)] != 1) {  // weights per batch: cut too
        size_t w_off = 0;
        const Md w = slice(*wei, begin, count, w_off);
        args.push_back({DNNL_ARG_WEIGHTS, w_off, w});
        d.weights_desc = w.data;
      }
      st = dnnl_primitive_desc_create(&cut.pd, &d, attr, engine().get(), nullptr);
    } else if (kind == dnnl_inner_product) {
      dnnl_inner_product_desc_t d = *static_cast<const dnnl_inner_product_desc_t*>(op);
      d.src_desc = a.data;
      d.dst_desc = c.data;
      d.weights_desc = wei->data;
      st = dnnl_primitive_desc_create(&cut.pd, &d, attr, engine().get(), nullptr);
    } else if (kind == dnnl_softmax) {
      dnnl_softmax_desc_t d = *static_cast<const dnnl_softmax_desc_t*>(op);
      if (d.softmax_axis != n - 1 || *src != *dst) return release_cuts(cuts);
      d.data_desc = a.data;
      st = dnnl_primitive_desc_create(&cut.pd, &d, attr, engine().get(), nullptr);
    } else if (kind == dnnl_layer_normalization) {
      dnnl_layer_normalization_desc_t d = *static_cast<const dnnl_layer_normalization_desc_t*>(op);
      if (*src != *dst) return release_cuts(cuts);
      d.data_desc = a.data;
      dnnl::memory::dims stat = a.dims();
      stat.pop_back();
      const Md stats = plain_md(Dims(stat.begin(), stat.end()));
      d.stat_desc = stats.data;
      st = dnnl_primitive_desc_create(&cut.pd, &d, attr, engine().get(), nullptr);
    } else if (kind == dnnl_reorder) {
      st = dnnl_reorder_primitive_desc_create(&cut.pd, &a.data, engine().get(), &c.data,
                                              engine().get(), attr);
    }
    if (st != dnnl_success) cut.pd = nullptr;
    cut.args = std::move(args);
    cuts.push_back(std::move(cut));
  }
  return add_pieces(s, cuts, false);
}

void Bands::run(dnnl::stream& stream) {
  for (Rebind& r : rebinds_)
    r.mem.set_data_handle(static_cast<char*>(binder_.memory(r.ref).get_data_handle()) + r.offset);
  caller_stream_ = &stream;
  flow_->run();
  stream.wait();
}

void Bands::execute(const Piece& p, int slot, dnnl::stream& stream) {
  if (p.whole) return binder_.run_step(p.step, stream);
  if (!p.prim) return binder_.run_concat_norm(p.step, p.begin, p.end);
  const std::vector<dnnl_exec_arg_t>& args = p.args[size_t(slot)];
  const dnnl_status_t st =
      dnnl_primitive_execute(p.prim.get(), stream.get(), int(args.size()), args.data());
  if (st != dnnl_success)
    throw sdk::Error(BP_STATUS_BACKEND_ERROR, "CpuOneDnn: " + c_.steps[p.step].what +
                                                  " (a band of it) failed (oneDNN status " +
                                                  std::to_string(int(st)) + ")");
}

}  // namespace backplane::onednn
