// compiled.cpp — running a compiled CpuOneDnn partition.
#include "onednn/compiled.hpp"

#include <omp.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

namespace backplane::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

SharedMd::SharedMd() {
  static const auto empty = std::make_shared<const dnnl::memory::desc>();
  p_ = empty;
}

size_t context_bytes(const Compiled& c) {
  return align_up(c.arena_bytes) + align_up(c.scratch_bytes);
}

Binder::Binder(const Compiled& c, char* memory) : c_(c), memory_(memory) {
  char* scratch = memory + c.scratch_offset();
  char* arena = memory + c.arena_offset();
  // Only a oneDNN primitive takes memory objects: the backend's own loops
  // read the refs' addresses (ptrs_) and descriptors (Compiled::refs).
  std::vector<char> primitive_reads(c.refs.size(), 0);
  for (const Step& step : c.steps)
    if (step.as<steps::Primitive>())
      for (auto [arg, r] : step.args) primitive_reads[r] = 1;
  mems_.resize(c.refs.size());
  ptrs_.assign(c.refs.size(), nullptr);
  for (size_t r = 0; r < c.refs.size(); ++r) {
    const MemRef& ref = c.refs[r];
    if (ref.constant) {
      mems_[r] = ref.constant;
      ptrs_[r] = ref.constant.get_data_handle();
      continue;
    }
    const Buffer* b = ref.scratch ? nullptr : &c.buffers[ref.buffer];
    if (b != nullptr && b->kind != Buffer::kArena)
      bindings_.push_back({r, b->kind == Buffer::kInput, b->index});
    else ptrs_[r] = ref.scratch ? scratch : arena + b->offset;
    if (!primitive_reads[r]) continue;
    if (ref.scratch) mems_[r] = dnnl::memory(ref.md, engine(), scratch);
    else if (b->kind == Buffer::kArena)
      mems_[r] = dnnl::memory(ref.md, engine(), arena + b->offset);
    else mems_[r] = dnnl::memory(ref.md, engine(), DNNL_MEMORY_NONE);
  }
  plan_steps();
}

void Binder::plan_steps() {
  // Every primitive's arguments in one array (one allocation): step s's
  // from args_at_[s] to args_at_[s + 1].
  args_at_.assign(c_.steps.size() + 1, 0);
  for (size_t s = 0; s < c_.steps.size(); ++s)
    args_at_[s + 1] =
        args_at_[s] + (c_.steps[s].as<steps::Primitive>() ? c_.steps[s].args.size() : 0);
  args_.clear();
  args_.reserve(args_at_.back());
  copies_.resize(c_.steps.size());
  for (size_t s = 0; s < c_.steps.size(); ++s) {
    if (c_.steps[s].as<steps::Primitive>())
      for (auto [arg, r] : c_.steps[s].args) args_.push_back({arg, mems_[r].get()});
    copies_[s].clear();
    if (c_.steps[s].as<steps::ConcatNorm>()) plan_concat_norm(s);
    else if (c_.steps[s].as<steps::CopyConcat>()) plan_copy(s);
  }
}

void Binder::rebind(char* memory) {
  memory_ = memory;
  char* scratch = memory + c_.scratch_offset();
  char* arena = memory + c_.arena_offset();
  for (size_t r = 0; r < c_.refs.size(); ++r) {
    const MemRef& ref = c_.refs[r];
    if (ref.constant) continue;
    const Buffer* b = ref.scratch ? nullptr : &c_.buffers[ref.buffer];
    const bool bound = b != nullptr && b->kind != Buffer::kArena;
    if (!bound) ptrs_[r] = ref.scratch ? scratch : arena + b->offset;
    if (!mems_[r]) continue;  // only the refs a primitive reads have one
    const dnnl_memory_desc_t* md = nullptr;
    dnnl::error::wrap_c_api(dnnl_memory_get_memory_desc(mems_[r].get(), &md),
                            "could not get a memory descriptor");
    if (!dnnl_memory_desc_equal(md, &ref.md->data))
      mems_[r] = dnnl::memory(ref.md, engine(), bound ? DNNL_MEMORY_NONE : ptrs_[r]);
    else if (!bound && mems_[r].get_data_handle() != ptrs_[r]) mems_[r].set_data_handle(ptrs_[r]);
  }
  plan_steps();
}

const std::vector<Step>& StepList::list() const {
  static const std::vector<Step> none;
  return v_ ? *v_ : none;
}

std::vector<Step>& StepList::own() {
  if (v_ == nullptr) v_ = std::make_shared<std::vector<Step>>();
  else if (v_.use_count() > 1) v_ = std::make_shared<std::vector<Step>>(*v_);
  return *v_;
}

Binder::~Binder() = default;

void* Binder::ptr(size_t s, size_t a) const { return ptrs_[c_.steps[s].args[a].second]; }

namespace {
// Dims and strides without size-1 dims, neighbours merged where both
// layouts are contiguous across them: the fewest, longest runs to copy.
template <class Part>
void coalesce(Part& p) {
  size_t n = 0;
  for (size_t i = 0; i < p.rank; ++i) {
    if (p.dims[i] == 1) continue;
    if (n > 0 && p.src_strides[n - 1] == p.src_strides[i] * p.dims[i] &&
        p.dst_strides[n - 1] == p.dst_strides[i] * p.dims[i]) {
      p.dims[n - 1] *= p.dims[i];
      p.src_strides[n - 1] = p.src_strides[i];
      p.dst_strides[n - 1] = p.dst_strides[i];
      continue;
    }
    p.dims[n] = p.dims[i];
    p.src_strides[n] = p.src_strides[i];
    p.dst_strides[n] = p.dst_strides[i];
    ++n;
  }
  if (n == 0) p.dims[0] = p.src_strides[0] = p.dst_strides[0] = 1, n = 1;
  p.rank = n;
}

// Dims and strides reordered by the destination's strides, outermost first
// (stable): a channels-last concat then copies whole channel runs, not
// single floats.
template <class Part>
void in_memory_order(Part& p) {
  for (size_t i = 1; i < p.rank; ++i)
    for (size_t j = i; j > 0 && p.dst_strides[j - 1] < p.dst_strides[j]; --j) {
      std::swap(p.dims[j - 1], p.dims[j]);
      std::swap(p.src_strides[j - 1], p.src_strides[j]);
      std::swap(p.dst_strides[j - 1], p.dst_strides[j]);
    }
}
}  // namespace

namespace {
// body(i) for every i in [0, n): across the calling thread's OpenMP team
// when `parallel` and the plan runs on more than one thread, else on this
// thread without entering a region (one with a false if clause, or of one
// thread, still makes a team: an allocation per step and run).
template <class F>
void for_each_index(int64_t n, bool parallel, const F& body) {
#if defined(_OPENMP)  // (the fuzz build has no OpenMP)
  if (parallel && omp_get_max_threads() > 1) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) body(i);
}

// body(at, count) over [0, n) in blocks of `block` elements, across the
// step's OpenMP team when there is more than one block (its other threads
// would otherwise spin beside one doing it all).
template <class F>
void in_blocks(size_t n, size_t block, const F& body) {
  const int64_t blocks = static_cast<int64_t>((n + block - 1) / block);
  for_each_index(blocks, blocks > 1, [&](int64_t b) {
    const size_t at = static_cast<size_t>(b) * block;
    body(at, std::min(block, n - at));
  });
}

// body(first, count) over `rows` rows of `inner` elements, in blocks of
// whole rows of about kRowBlock elements (at least one row each), across
// the step's OpenMP team when there is more than one block: a row loop
// takes a softmax of any size, one of a long sequence in parallel.
constexpr int64_t kRowBlock = int64_t{1} << 14;
template <class F>
void in_row_blocks(int64_t rows, int64_t inner, const F& body) {
  const int64_t per = std::max<int64_t>(1, kRowBlock / std::max<int64_t>(inner, 1));
  const int64_t blocks = (rows + per - 1) / per;
  for_each_index(blocks, blocks > 1, [&](int64_t b) {
    const int64_t first = b * per;
    body(first, std::min(per, rows - first));
  });
}
}  // namespace

void Binder::plan_copy(size_t s) {
  const Step& step = c_.steps[s];
  const int axis = step.concat_axis();
  size_t dst_arg = 0;
  for (size_t a = 0; a < step.args.size(); ++a)
    if (step.args[a].first == DNNL_ARG_DST) dst_arg = a;
  const dnnl_memory_desc_t& dst = c_.refs[step.args[dst_arg].second].md->data;
  int64_t along = 0;
  for (size_t a = 0; a < step.args.size(); ++a) {
    if (a == dst_arg) continue;
    const dnnl_memory_desc_t& src = c_.refs[step.args[a].second].md->data;
    CopyPart part{a, 0, static_cast<size_t>(src.ndims), {}, {}, {}};
    std::copy(src.dims, src.dims + src.ndims, part.dims);
    std::copy(src.format_desc.blocking.strides, src.format_desc.blocking.strides + src.ndims,
              part.src_strides);
    std::copy(dst.format_desc.blocking.strides, dst.format_desc.blocking.strides + src.ndims,
              part.dst_strides);
    part.offset = along * part.dst_strides[axis];
    along += part.dims[axis];
    if (sdk::element_count(part.dims, part.rank) == 0) continue;  // an empty cache: nothing to copy
    in_memory_order(part);
    coalesce(part);
    copies_[s].push_back(part);
  }
}

void Binder::plan_concat_norm(size_t s) {
  const Step& step = c_.steps[s];
  // Pixels: every position but the channel, the same in each source and the
  // destination (a source may have no channels at all).
  int64_t pixels = 0;
  for (auto [arg, ref] : step.args)
    if (arg == DNNL_ARG_DST) {
      const dnnl::memory::dims d = c_.refs[ref].md->dims();
      pixels = d[1] == 0 ? 0 : sdk::element_count(d) / d[1];
    }
  int64_t along = 0;
  for (size_t a = 0; a < step.args.size(); ++a) {
    const int arg = step.args[a].first;
    if (arg < DNNL_ARG_MULTIPLE_SRC || arg >= DNNL_ARG_MULTIPLE_DST) continue;
    const int64_t channels = c_.refs[step.args[a].second].md->dims()[1];
    copies_[s].push_back(CopyPart{a, along, 2, {pixels, channels}, {}, {}});
    along += channels;
  }
}

// Per pixel (every position but the channel), each source's channels
// normalized into their window of the output's: the output is written in
// order, each source read once.
void Binder::run_concat_norm(size_t s) {
  const Step& step = c_.steps[s];
  float *dst = nullptr, *scale = nullptr, *shift = nullptr;
  for (size_t a = 0; a < step.args.size(); ++a) {
    const int arg = step.args[a].first;
    float** slot = arg == DNNL_ARG_DST     ? &dst
                   : arg == DNNL_ARG_SCALE ? &scale
                   : arg == DNNL_ARG_SHIFT ? &shift
                                           : nullptr;
    if (slot != nullptr) *slot = static_cast<float*>(ptr(s, a));
  }
  const std::vector<CopyPart>& parts = copies_[s];
  if (parts.empty()) return;
  const int64_t pixels = parts[0].dims[0];
  int64_t channels = 0;
  std::vector<const float*> srcs(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    srcs[i] = static_cast<const float*>(ptr(s, parts[i].arg));
    channels += parts[i].dims[1];
  }
  const bool relu = step.as<steps::ConcatNorm>()->relu;
  for_each_index(pixels, pixels * channels > (int64_t{1} << 15), [&](int64_t p) {
    float* out = dst + p * channels;
    for (size_t i = 0; i < parts.size(); ++i) {
      const int64_t n = parts[i].dims[1], off = parts[i].offset;
      const float* x = srcs[i] + p * n;
      const float* a = scale + off;
      const float* b = shift + off;
      float* y = out + off;
      if (relu)
        for (int64_t c = 0; c < n; ++c) y[c] = std::max(x[c] * a[c] + b[c], 0.f);
      else
        for (int64_t c = 0; c < n; ++c) y[c] = x[c] * a[c] + b[c];
    }
  });
}

void Binder::run_copy(size_t s) {
  const Step& step = c_.steps[s];
  float* dst = nullptr;
  for (size_t a = 0; a < step.args.size(); ++a)
    if (step.args[a].first == DNNL_ARG_DST) dst = static_cast<float*>(ptr(s, a));
  for (const CopyPart& part : copies_[s]) {
    const float* src = static_cast<const float*>(ptr(s, part.arg));
    const size_t rank = part.rank;
    // Rows of the innermost dim, memcpy'd when contiguous on both sides.
    const int64_t inner = part.dims[rank - 1];
    const bool contiguous = part.src_strides[rank - 1] == 1 && part.dst_strides[rank - 1] == 1;
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < rank; ++i) rows *= part.dims[i];
    for_each_index(rows, rows * inner > (int64_t{1} << 16), [&](int64_t row) {
      int64_t from = 0, to = part.offset, rest = row;
      for (size_t i = rank - 1; i-- > 0;) {
        const int64_t k = rest % part.dims[i];
        rest /= part.dims[i];
        from += k * part.src_strides[i];
        to += k * part.dst_strides[i];
      }
      if (contiguous) {
        std::memcpy(dst + to, src + from, static_cast<size_t>(inner) * sizeof(float));
        return;
      }
      for (int64_t j = 0; j < inner; ++j)
        dst[to + j * part.dst_strides[rank - 1]] = src[from + j * part.src_strides[rank - 1]];
    });
  }
}

namespace {
// Block b's zero point of row j of a 4-bit matrix in `blocks` blocks a row,
// packed two a byte (the lower bits first); 8 when there are none.
int packed_zero(const uint8_t* zeros, int64_t blocks, int64_t j, int64_t b) {
  return zeros != nullptr ? (zeros[j * ((blocks + 1) / 2) + b / 2] >> (4 * (b % 2))) & 15 : 8;
}
}  // namespace

void Binder::run_gather(size_t s) {
  const Step& step = c_.steps[s];
  const steps::Gather& gather = *step.as<steps::Gather>();
  const dnnl::memory::desc* data_md = nullptr;
  void *data = nullptr, *indices = nullptr, *dst = nullptr;
  const float* scales = nullptr;   // a 4-bit table's (gather.block > 0)
  const uint8_t* zeros = nullptr;  // its packed zero points, or none (8)
  size_t index_count = 0, data_bytes = 0, index_bytes = 0, dst_bytes = 0;
  for (size_t a = 0; a < step.args.size(); ++a) {
    auto [arg, ref] = step.args[a];
    void* handle = ptr(s, a);
    if (arg == DNNL_ARG_SRC_0) {
      data = handle;
      data_md = &c_.refs[ref].md.get();
      data_bytes = data_md->get_size();
    } else if (arg == DNNL_ARG_SRC_1) {
      indices = handle;
      index_bytes = c_.refs[ref].md->get_size();
      index_count = index_bytes / static_cast<size_t>(gather.index_bytes);
    } else if (arg == DNNL_ARG_DST) {
      dst = handle;
      dst_bytes = c_.refs[ref].md->get_size();
    } else if (arg == DNNL_ARG_SCALE) {
      scales = static_cast<const float*>(handle);
    } else if (arg == DNNL_ARG_ATTR_ZERO_POINTS) {
      zeros = static_cast<const uint8_t*>(handle);
    }
  }
  // The copy re-reads the indices and reads the data while it writes the
  // destination: they must not share bytes, however the memory was bound
  // (a payload's arena layout, or a caller's tensors over one buffer).
  auto overlaps = [&](const void* p, size_t bytes) {
    const auto a = reinterpret_cast<uintptr_t>(p), d = reinterpret_cast<uintptr_t>(dst);
    return bytes > 0 && dst_bytes > 0 && a < d + dst_bytes && d < a + bytes;
  };
  if (overlaps(indices, index_bytes) || overlaps(data, data_bytes))
    throw sdk::invalid("CpuOneDnn: " + step.what +
                       ": the destination shares memory with the data or the indices");
  const std::vector<int64_t> dims = data_md->dims();
  const size_t axis = static_cast<size_t>(gather.axis);
  int64_t outer = 1, row = 1;
  for (size_t d = 0; d < axis; ++d) outer *= dims[d];
  for (size_t d = axis + 1; d < dims.size(); ++d) row *= dims[d];
  const int64_t n = dims[axis];
  const int64_t count = static_cast<int64_t>(index_count);
  auto index = [&](int64_t j) {
    return gather.index_bytes == 8 ? static_cast<const int64_t*>(indices)[j]
                                   : int64_t{static_cast<const int32_t*>(indices)[j]};
  };
  // Checked before any copy: nothing may throw inside the parallel loop.
  for (int64_t j = 0; j < count; ++j) {
    const int64_t i = index(j);
    if (i < -n || i >= n)
      throw sdk::invalid("CpuOneDnn: " + step.what + ": index " + std::to_string(i) +
                         " (position " + std::to_string(j) + ") is outside [" + std::to_string(-n) +
                         ", " + std::to_string(n) + ")");
  }
  if (gather.block > 0) {  // rows of a 4-bit table [n, row bytes], dequantized
    const int64_t half = gather.block / 2, blocks = (row + half - 1) / half;
    const auto* table = static_cast<const uint8_t*>(data);
    float* to = static_cast<float*>(dst);
    for_each_index(count, count * row > (int64_t{1} << 15), [&](int64_t j) {
      int64_t i = index(j);
      if (i < 0) i += n;
      const uint8_t* q = table + i * row;
      float* out = to + j * 2 * row;
      for (int64_t b = 0; b < blocks; ++b) {
        const float scale = scales[i * blocks + b];
        const auto zero = static_cast<float>(packed_zero(zeros, blocks, i, b));
        const int64_t end = std::min(row, (b + 1) * half);
#pragma omp simd
        for (int64_t k = b * half; k < end; ++k) {
          out[2 * k] = (static_cast<float>(q[k] & 15) - zero) * scale;
          out[2 * k + 1] = (static_cast<float>(q[k] >> 4) - zero) * scale;
        }
      }
    });
    return;
  }
  const float* from = static_cast<const float*>(data);
  float* to = static_cast<float*>(dst);
  const size_t row_bytes = static_cast<size_t>(row) * sizeof(float);
  for_each_index(outer * count, outer * count * row > (int64_t{1} << 16), [&](int64_t k) {
    const int64_t o = k / count, j = k % count;
    int64_t i = index(j);
    if (i < 0) i += n;
    std::memcpy(to + k * row, from + (o * n + i) * row, row_bytes);
  });
}

void Binder::run(dnnl::stream& stream, size_t num_inputs, const bp_tensor_t* inputs,
                 size_t num_outputs, const bp_tensor_t* outputs, const sdk::ExecuteArgs* profiled) {
  if (c_.empty)
    throw sdk::Error(BP_STATUS_INTERNAL, "CpuOneDnn: this partition was rejected at compile time");
  if (num_inputs != c_.input_bytes.size() || num_outputs != c_.output_bytes.size())
    throw sdk::invalid("CpuOneDnn execute: expected " + std::to_string(c_.input_bytes.size()) +
                       " inputs and " + std::to_string(c_.output_bytes.size()) + " outputs");
  auto check_host = [](const bp_tensor_t& t, size_t bytes, const char* what, size_t k) {
    const bool needs_data = bytes > 0 || *what == 'o';  // an output always has memory
    if (t.device != 0 || t.size_bytes != bytes || (t.data == nullptr && needs_data))
      throw sdk::invalid(std::string("CpuOneDnn execute: ") + what + std::to_string(k) +
                         " is not a host buffer of " + std::to_string(bytes) + " bytes");
  };
  for (size_t k = 0; k < num_inputs; ++k) check_host(inputs[k], c_.input_bytes[k], "input ", k);
  for (size_t k = 0; k < num_outputs; ++k) check_host(outputs[k], c_.output_bytes[k], "output ", k);
  for (const Binding& b : bindings_) {
    ptrs_[b.ref] = b.input ? inputs[b.index].data : outputs[b.index].data;
    if (mems_[b.ref]) mems_[b.ref].set_data_handle(ptrs_[b.ref]);
  }
  // The steps run on an OpenMP team of the plan's thread count: most
  // primitives open their regions with the count they were created for,
  // the rest with the calling thread's nthreads-var, which is set for the
  // run and given back after it (the application's own OpenMP regions on
  // this thread keep their setting).
  const ScopedOmpThreads team(c_.threads);
  for (size_t s = 0; s < c_.steps.size(); ++s) {
    const uint64_t begin = profiled != nullptr ? profiled->clock_ns() : 0;
    const bool beside = c_.steps[s].beside_next && c_.threads > 1 && s + 1 < c_.steps.size();
    if (beside) run_beside(s, stream);
    else run_step(s, stream);
    if (profiled == nullptr) {
      s += beside ? 1 : 0;
      continue;
    }
    stream.wait();  // then reported under the primitive's kind, labelled with its node
    const Step& t = c_.steps[s];
    // Two steps side by side are one span: their time is the pair's.
    const std::string what = beside ? t.what + " | " + c_.steps[s + 1].what : std::string();
    profiled->profile_node(BP_PROFILE_NO_NODE, t.kind_name(),
                           beside ? what.c_str() : t.what.c_str(), begin, profiled->clock_ns());
    s += beside ? 1 : 0;
  }
  stream.wait();
}

void Binder::run_beside(size_t s, dnnl::stream& stream) {
  if (!side_) side_ = dnnl::stream(engine());
  stream.wait();  // what the pair reads is written
  // A oneDNN primitive called inside a parallel region runs on the calling
  // thread alone (the nested region has one thread).
  std::exception_ptr failed[2];
#pragma omp parallel num_threads(2)
  {
    // (A team of one, should OpenMP give no more, runs both.)
    for (int k = omp_get_thread_num(); k < 2; k += omp_get_num_threads()) {
      dnnl::stream& on = k == 0 ? stream : side_;
      try {
        run_step(s + static_cast<size_t>(k), on);
        on.wait();
      } catch (...) {
        failed[k] = std::current_exception();
      }
    }
  }
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
}

namespace {
// e^x in float32, within 1 ulp of the rounded e^x for x in [-87, 88]
// (Cody and Waite's reduction x = n ln 2 + r, |r| <= ln2/2, and Cephes'
// polynomial for e^r), written so that the compiler vectorizes a loop of
// it: libm's expf is a call per element. Below -87.3 it gives 2^-126 (not
// 0), above 88 e^88; NaN stays NaN. A softmax gives it x - max <= 0.
inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.33654f), 88.0f);
  // n = round(x / ln 2): adding 1.5 * 2^23 leaves no bits for a fraction,
  // so t's low bits are n (read from them: no float-to-int conversion, which
  // a NaN would make undefined).
  constexpr float kRound = 12582912.0f;
  const float t = x * 1.44269504f + kRound;
  const float n = t - kRound;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  uint32_t t_bits;  // unsigned: a NaN's bits wrap (er is NaN then anyway)
  std::memcpy(&t_bits, &t, sizeof t_bits);
  const uint32_t bits = (t_bits - 0x4B400000u + 127u) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return er * two_n;
}

// Softmax of each of `rows` rows of `inner` floats, `src` into `dst`. On
// x86-64 built for AVX-512, AVX2 and the baseline, the one the CPU has
// chosen at load: oneDNN's kernel it replaces uses the widest vectors.
#if defined(__x86_64__) && defined(__GNUC__)
#define BP_ONEDNN_VECTOR_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#else
#define BP_ONEDNN_VECTOR_CLONES
#endif
BP_ONEDNN_VECTOR_CLONES void softmax_rows(const float* src, float* dst, int64_t rows,
                                          int64_t inner) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * inner;
    float* y = dst + r * inner;
    float max = x[0];
#pragma omp simd reduction(max : max)
    for (int64_t i = 1; i < inner; ++i)
      max = x[i] > max ? x[i] : max;  // (std::max does not vectorise)
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < inner; ++i) {
      y[i] = exp_approx(x[i] - max);
      sum += y[i];
    }
    const float scale = 1 / sum;
#pragma omp simd
    for (int64_t i = 0; i < inner; ++i) y[i] *= scale;
  }
}
}  // namespace

void Binder::run_row_softmax(size_t s) {
  const Step& step = c_.steps[s];
  const float* src = nullptr;
  float* dst = nullptr;
  const dnnl::memory::desc* md = nullptr;
  for (size_t a = 0; a < step.args.size(); ++a) {
    void* handle = ptr(s, a);
    if (step.args[a].first == DNNL_ARG_SRC) {
      src = static_cast<const float*>(handle);
      md = &c_.refs[step.args[a].second].md.get();
    } else {
      dst = static_cast<float*>(handle);
    }
  }
  const dnnl_memory_desc_t& d = md->data;
  const int64_t inner = d.ndims == 0 ? 1 : d.dims[d.ndims - 1];
  const int64_t elements = static_cast<int64_t>(md->get_size() / sizeof(float));
  const int64_t rows = inner == 0 ? 0 : elements / inner;
  in_row_blocks(rows, inner, [&](int64_t first, int64_t count) {
    softmax_rows(src + first * inner, dst + first * inner, count, inner);
  });
}

namespace {
BP_ONEDNN_VECTOR_CLONES void mean_rows(const float* src, float* dst, int64_t rows, int64_t inner) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * inner;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < inner; ++i) sum += x[i];
    dst[r] = sum / static_cast<float>(inner);
  }
}
}  // namespace

void Binder::run_row_mean(size_t s) {
  const float* x = nullptr;
  float* y = nullptr;
  const size_t n = float_src_dst(s, &x, &y);
  int64_t rows = 0;  // DST's elements
  for (auto [arg, ref] : c_.steps[s].args)
    if (arg == DNNL_ARG_DST) rows = static_cast<int64_t>(c_.refs[ref].md->get_size() / sizeof(float));
  const int64_t inner = rows == 0 ? 0 : static_cast<int64_t>(n) / rows;
  in_row_blocks(rows, inner, [&](int64_t first, int64_t count) {
    mean_rows(x + first * inner, y + first, count, inner);
  });
}

namespace {
// LayerNormalization of each of `rows` rows of `inner` floats, `src` into
// `dst`: the mean and variance of a row (two passes, as oneDNN's), then
// (x - mean) / sqrt(variance + eps) * scale + shift.
BP_ONEDNN_VECTOR_CLONES void layer_norm_rows(const float* src, const float* scale,
                                             const float* shift, float* dst, int64_t rows,
                                             int64_t inner, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * inner;
    float* y = dst + r * inner;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < inner; ++i) sum += x[i];
    const float mean = sum / static_cast<float>(inner);
    float squares = 0;
#pragma omp simd reduction(+ : squares)
    for (int64_t i = 0; i < inner; ++i) squares += (x[i] - mean) * (x[i] - mean);
    const float inv = 1 / std::sqrt(squares / static_cast<float>(inner) + eps);
#pragma omp simd
    for (int64_t i = 0; i < inner; ++i) y[i] = (x[i] - mean) * inv * scale[i] + shift[i];
  }
}
}  // namespace

void Binder::run_row_layer_norm(size_t s) {
  const Step& step = c_.steps[s];
  const float *src = nullptr, *scale = nullptr, *shift = nullptr;
  float* dst = nullptr;
  const dnnl::memory::desc* md = nullptr;
  for (size_t a = 0; a < step.args.size(); ++a) {
    void* handle = ptr(s, a);
    switch (step.args[a].first) {
      case DNNL_ARG_SRC:
        src = static_cast<const float*>(handle);
        md = &c_.refs[step.args[a].second].md.get();
        break;
      case DNNL_ARG_SCALE:
        scale = static_cast<const float*>(handle);
        break;
      case DNNL_ARG_SHIFT:
        shift = static_cast<const float*>(handle);
        break;
      default:
        dst = static_cast<float*>(handle);
    }
  }
  const dnnl_memory_desc_t& d = md->data;
  const int64_t inner = d.ndims == 0 ? 1 : d.dims[d.ndims - 1];
  const int64_t elements = static_cast<int64_t>(md->get_size() / sizeof(float));
  const int64_t rows = inner == 0 ? 0 : elements / inner;
  const float eps = step.as<steps::RowLayerNorm>()->eps;
  in_row_blocks(rows, inner, [&](int64_t first, int64_t count) {
    layer_norm_rows(src + first * inner, scale, shift, dst + first * inner, count, inner, eps);
  });
}

namespace {
// y = op(a, b) over dense row-major float32: `a` and `y` of shape `ys`, `b`
// of `bs` (the same rank, a dim of 1 broadcast), rows [first, first + count)
// of the innermost dim. Arrays, not vectors: this runs with every step, and
// allocates nothing.
template <class Op>
void broadcast_rows(const float* a, const float* b, float* y, int rank, const int64_t* ys,
                    const int64_t* bs, int64_t first, int64_t count, Op op) {
  int64_t bstride[DNNL_MAX_NDIMS] = {}, at[DNNL_MAX_NDIMS] = {};
  for (int64_t d = rank - 1, stride = 1; d >= 0; stride *= bs[d], --d)
    if (bs[d] != 1 || ys[d] == 1) bstride[d] = stride;
  const int64_t inner = ys[rank - 1];
  const bool inner_b = bs[rank - 1] != 1;
  int64_t boff = 0;
  for (int64_t d = rank - 2, rest = first; d >= 0; --d) {  // where row `first` is
    at[d] = rest % ys[d];
    rest /= ys[d];
    boff += at[d] * bstride[d];
  }
  for (int64_t r = first; r < first + count; ++r) {
    const float* x = a + r * inner;
    float* out = y + r * inner;
    if (inner_b)
      for (int64_t i = 0; i < inner; ++i) out[i] = op(x[i], b[boff + i]);
    else
      for (int64_t i = 0; i < inner; ++i) out[i] = op(x[i], b[boff]);
    for (int d = rank - 2; d >= 0; --d) {  // the next row
      boff += bstride[d];
      if (++at[d] < ys[d]) break;
      boff -= bstride[d] * ys[d];
      at[d] = 0;
    }
  }
}
}  // namespace

size_t Binder::src_dst(size_t s, const void** x, void** y) {
  const Step& step = c_.steps[s];
  size_t n = 0;
  for (size_t k = 0; k < step.args.size(); ++k) {
    const auto [arg, ref] = step.args[k];
    if (arg == DNNL_ARG_SRC) {
      *x = ptr(s, k);
      const dnnl::memory::desc& md = c_.refs[ref].md.get();
      n = md.get_size() / dnnl::memory::data_type_size(md.data_type());
    } else {
      *y = ptr(s, k);
    }
  }
  return n;
}

namespace {
// erf as x P(x^2) / Q(x^2) on [-3.92, 3.92], beyond which it is 1 in float32:
// a rational function fitted to erf in relative error (at most 3.5e-7, a few
// units in the last place), which vectorises where libm's erff does not.
BP_ONEDNN_VECTOR_CLONES void erf_loop(const float* x, float* y, size_t n) {
  constexpr float p0 = 1.1283791065216064f, p1 = 0.19693616032600403f, p2 = 0.05016764625906944f,
                  p3 = 0.0035719929728657007f, p4 = 0.00013860063336323947f,
                  p5 = -1.943498546097544e-06f, p6 = 1.9962554276276023e-08f;
  constexpr float q1 = 0.507862389087677f, q2 = 0.11375389248132706f, q3 = 0.01409213338047266f,
                  q4 = 0.0009241600055247545f;
#pragma omp simd
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i] > 3.92f ? 3.92f : x[i] < -3.92f ? -3.92f : x[i];  // NaN stays NaN
    const float t = v * v;
    const float num = (((((p6 * t + p5) * t + p4) * t + p3) * t + p2) * t + p1) * t + p0;
    const float den = (((q4 * t + q3) * t + q2) * t + q1) * t + 1.f;
    y[i] = v * num / den;
  }
}

// y = fn(x) over n floats (steps::Eltwise).
BP_ONEDNN_VECTOR_CLONES void eltwise_loop(const float* x, float* y, size_t n,
                                          const steps::Eltwise& e) {
  const float a = e.alpha, b = e.beta;
  auto each = [&](auto f) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) y[i] = f(x[i]);
  };
  using E = steps::Eltwise;
  switch (e.fn) {
    case E::kLinear:
      return each([&](float v) { return a * v + b; });
    case E::kSqrt:
      return each([](float v) { return std::sqrt(v); });
    case E::kPow:  // a LayerNormalization's square, a scalar over x: without pow
      if (b == 2.f) return each([&](float v) { return a * (v * v); });
      if (b == -1.f) return each([&](float v) { return a / v; });
      if (b == 0.5f) return each([&](float v) { return a * std::sqrt(v); });
      return each([&](float v) { return a * std::pow(v, b); });
    case E::kAbs:
      return each([](float v) { return std::fabs(v); });
    case E::kExp:
      return each([](float v) { return std::exp(v); });
    case E::kTanh:
      return each([](float v) { return std::tanh(v); });
    case E::kLogistic:
      return each([](float v) { return 1 / (1 + std::exp(-v)); });
    case E::kRelu:
      return each([&](float v) { return v > 0 ? v : a * v; });
    case E::kClip:  // (comparisons: std::min and std::max do not vectorise)
      return each([&](float v) { return v < a ? a : v > b ? b : v; });
    case E::kErf:
      return erf_loop(x, y, n);
  }
}
}  // namespace

void Binder::run_eltwise(size_t s) {
  const steps::Eltwise& e = *c_.steps[s].as<steps::Eltwise>();
  const float* x = nullptr;
  float* y = nullptr;
  const size_t n = float_src_dst(s, &x, &y);
  in_blocks(n, size_t{1} << 12,
            [&](size_t at, size_t count) { eltwise_loop(x + at, y + at, count, e); });
}

void Binder::run_small_binary(size_t s) {
  const Step& step = c_.steps[s];
  const float *a = nullptr, *b = nullptr;
  float* y = nullptr;
  const dnnl_memory_desc_t *ymd = nullptr, *bmd = nullptr;
  for (size_t k = 0; k < step.args.size(); ++k) {
    void* handle = ptr(s, k);
    const auto [arg, ref] = step.args[k];
    if (arg == DNNL_ARG_SRC_0) {
      a = static_cast<const float*>(handle);
    } else if (arg == DNNL_ARG_SRC_1) {
      b = static_cast<const float*>(handle);
      bmd = &c_.refs[ref].md->data;
    } else {
      y = static_cast<float*>(handle);
      ymd = &c_.refs[ref].md->data;
    }
  }
  const int rank = ymd->ndims;
  const int64_t *ys = ymd->dims, *bs = bmd->dims;
  const int64_t inner = ys[rank - 1];
  const int64_t rows = inner == 0 ? 0 : sdk::element_count(ys, static_cast<size_t>(rank)) / inner;
  const dnnl_alg_kind_t alg = step.as<steps::SmallBinary>()->alg;
  in_row_blocks(rows, inner, [&](int64_t first, int64_t count) {
    auto apply = [&](auto op) { broadcast_rows(a, b, y, rank, ys, bs, first, count, op); };
    switch (alg) {
      case dnnl_binary_add:
        return apply([](float p, float q) { return p + q; });
      case dnnl_binary_sub:
        return apply([](float p, float q) { return p - q; });
      case dnnl_binary_mul:
        return apply([](float p, float q) { return p * q; });
      case dnnl_binary_div:
        return apply([](float p, float q) { return p / q; });
      case dnnl_binary_max:
        return apply([](float p, float q) { return std::max(p, q); });
      default:
        return apply([](float p, float q) { return std::min(p, q); });
    }
  });
}

namespace {
// The range of x[0, n) widened to include 0 (*lo <= 0 <= *hi), NaN left
// out, and the scale that spans it in uint8, as ONNX's (and CpuRef's)
// DynamicQuantizeLinear computes them. minps(v, lo) is v < lo ? v : lo,
// which a NaN v leaves lo.
float dynamic_range(const float* x, size_t n, float* lo, float* hi) {
  size_t i = 0;
  float l = 0.f, h = 0.f;
#ifdef __SSE2__
  __m128 lo4 = _mm_setzero_ps(), hi4 = _mm_setzero_ps();
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    lo4 = _mm_min_ps(v, lo4);
    hi4 = _mm_max_ps(v, hi4);
  }
  float ls[4], hs[4];
  _mm_storeu_ps(ls, lo4);
  _mm_storeu_ps(hs, hi4);
  l = std::min({ls[0], ls[1], ls[2], ls[3]});
  h = std::max({hs[0], hs[1], hs[2], hs[3]});
#endif
  for (; i < n; ++i) {
    l = x[i] < l ? x[i] : l;
    h = x[i] > h ? x[i] : h;
  }
  *lo = l;
  *hi = h;
  return (h - l) / 255.f;
}

// y = saturate(round_half_to_even(x / scale) + zero_point) as uint8, NaN to
// the zero point (and everything to it when scale is 0). x / scale lies in
// [-255, 255]: adding and taking away 1.5 * 2^23 rounds it half to even.
void quantize_u8(const float* x, size_t n, float scale, float zero_point, uint8_t* y) {
  constexpr float kRound = 12582912.f;
  size_t i = 0;
#ifdef __SSE2__
  const __m128 s4 = _mm_set1_ps(scale), z4 = _mm_set1_ps(zero_point), r4 = _mm_set1_ps(kRound);
  const __m128 top = _mm_set1_ps(255.f), bottom = _mm_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    __m128i q[4];
    for (size_t k = 0; k < 4; ++k) {
      const __m128 v = _mm_div_ps(_mm_loadu_ps(x + i + 4 * k), s4);
      const __m128 number = _mm_cmpord_ps(v, v);
      __m128 r = _mm_add_ps(_mm_sub_ps(_mm_add_ps(v, r4), r4), z4);
      r = _mm_or_ps(_mm_and_ps(number, r), _mm_andnot_ps(number, z4));
      q[k] = _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps(r, bottom), top));
    }
    const __m128i a = _mm_packs_epi32(q[0], q[1]), b = _mm_packs_epi32(q[2], q[3]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm_packus_epi16(a, b));
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i] / scale;
    const float q = v == v ? (v + kRound) - kRound + zero_point : zero_point;
    y[i] = static_cast<uint8_t>(std::clamp(q, 0.f, 255.f));
  }
}
// quantize_u8's values less the zero point, as float: the integers a
// convolution quantized at run time multiplies (Lowering::lower_qdynamic_conv).
BP_ONEDNN_VECTOR_CLONES void integers_u8(const float* x, size_t n, float scale, float zero_point,
                                         float* y) {
  constexpr float kRound = 12582912.f;
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i] / scale;
    const float q = v == v ? (v + kRound) - kRound + zero_point : zero_point;
    y[i] = std::clamp(q, 0.f, 255.f) - zero_point;
  }
}
// y[i] = table[x[i]] for i < n: a byte's 256 results. With AVX512-VBMI, 64
// bytes at a time (two 128-byte permutes and a blend on the top bit);
// one at a time elsewhere.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void lookup_vbmi(
    const uint8_t* x, size_t n, const uint8_t* table, uint8_t* y) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i v = _mm512_loadu_si512(x + i);
    const __m512i low = _mm512_permutex2var_epi8(t0, v, t1);
    const __m512i high = _mm512_permutex2var_epi8(t2, v, t3);
    _mm512_storeu_si512(y + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), low, high));
  }
  for (; i < n; ++i) y[i] = table[x[i]];
}
#endif

void lookup(const uint8_t* x, size_t n, const uint8_t* table, uint8_t* y) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi") &&
                           __builtin_cpu_supports("avx512bw");
  if (vbmi) return lookup_vbmi(x, n, table, y);
#endif
  for (size_t i = 0; i < n; ++i) y[i] = table[x[i]];
}
}  // namespace

void Binder::run_dynamic_quantize(size_t s) {
  const Step& step = c_.steps[s];
  const float *x = nullptr, *w_scales = nullptr;
  void* y = nullptr;
  bool to_float = false;
  int32_t* zero_point = nullptr;
  float* scales = nullptr;
  size_t n = 0, count = 0;
  for (size_t k = 0; k < step.args.size(); ++k) {
    void* handle = ptr(s, k);
    const auto [arg, ref] = step.args[k];
    const size_t bytes = c_.refs[ref].md->get_size();
    if (arg == DNNL_ARG_SRC) {
      x = static_cast<const float*>(handle);
      n = bytes / sizeof(float);
    } else if (arg == DNNL_ARG_DST) {
      y = handle;
      to_float = c_.refs[ref].md->data.data_type == dnnl_f32;
    } else if (arg == DNNL_ARG_DST_1) {
      zero_point = static_cast<int32_t*>(handle);
    } else if (arg == DNNL_ARG_DST_2) {
      scales = static_cast<float*>(handle);
      count = bytes / sizeof(float);
    } else {
      w_scales = static_cast<const float*>(handle);
    }
  }
  // The range block by block across the team (one block, a decoder's
  // step: on this thread, nothing allocated), then the quantization.
  constexpr size_t kBlock = size_t{1} << 16;
  float lo = 0.f, hi = 0.f, zp = 0.f;
  if (n <= kBlock) {
    dynamic_range(x, n, &lo, &hi);
  } else {
    const size_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<float> los(blocks, 0.f), his(blocks, 0.f);
    in_blocks(n, kBlock, [&](size_t at, size_t len) {
      dynamic_range(x + at, len, &los[at / kBlock], &his[at / kBlock]);
    });
    for (size_t b = 0; b < blocks; ++b) {
      lo = std::min(lo, los[b]);
      hi = std::max(hi, his[b]);
    }
  }
  const float scale = (hi - lo) / 255.f;
  if (scale > 0.f) zp = std::clamp(std::nearbyint((0.f - lo) / scale), 0.f, 255.f);
  in_blocks(n, kBlock, [&](size_t at, size_t len) {
    if (to_float) integers_u8(x + at, len, scale, zp, static_cast<float*>(y) + at);
    else quantize_u8(x + at, len, scale, zp, static_cast<uint8_t*>(y) + at);
  });
  *zero_point = static_cast<int32_t>(zp);
  for (size_t c = 0; c < count; ++c) scales[c] = scale * w_scales[c];
}

void Binder::run_table(size_t s) {
  const Step& step = c_.steps[s];
  const uint8_t *x = nullptr, *table = nullptr;
  uint8_t* y = nullptr;
  size_t n = 0;
  for (size_t k = 0; k < step.args.size(); ++k) {
    void* handle = ptr(s, k);
    const auto [arg, ref] = step.args[k];
    if (arg == DNNL_ARG_SRC) {
      x = static_cast<const uint8_t*>(handle);
      n = c_.refs[ref].md->get_size();
    } else if (arg == DNNL_ARG_WEIGHTS) {
      table = static_cast<const uint8_t*>(handle);
    } else {
      y = static_cast<uint8_t*>(handle);
    }
  }
  in_blocks(n, size_t{1} << 14,
            [&](size_t at, size_t count) { lookup(x + at, count, table, y + at); });
}

namespace {
// steps::Quantize. lo and hi are whole numbers, so clamping x / scale before
// rounding gives what rounding first would, and |x / scale| <= 2^22 then,
// where adding and taking away 1.5 * 2^23 rounds half to even. A NaN gives 0.
constexpr float kRound = 12582912.f;
float quantized(float x, const steps::Quantize& q) {
  const float v = x / q.scale;
  return v == v ? (std::clamp(v, q.lo, q.hi) + kRound) - kRound : 0.f;
}
#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12 takes the undefined vector in _mm512_max_ps for an uninitialised read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) __m512 quantized16(const float* x, const steps::Quantize& q) {
  const __m512 v = _mm512_div_ps(_mm512_loadu_ps(x), _mm512_set1_ps(q.scale));
  const __m512 r = _mm512_set1_ps(kRound);
  const __m512 c = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(q.lo)), _mm512_set1_ps(q.hi));
  return _mm512_maskz_sub_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), _mm512_add_ps(c, r), r);
}
// Each returns how many elements it did (a multiple of 16).
__attribute__((target("avx512f"))) size_t fake_quantize_avx512(const float* x, size_t n,
                                                               const steps::Quantize& q, float* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_mul_ps(quantized16(x + i, q), _mm512_set1_ps(q.scale)));
  return i;
}
__attribute__((target("avx512f"))) size_t quantize_avx512(const float* x, size_t n,
                                                          const steps::Quantize& q, uint8_t* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_add_ps(quantized16(x + i, q), _mm512_set1_ps(q.zero));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));  // in range: the low byte
  }
  return i;
}
__attribute__((target("avx512f"))) size_t dequantize_avx512(const uint8_t* x, size_t n,
                                                            bool is_signed,
                                                            const steps::Quantize& q, float* y) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m512 v =
        _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
    _mm512_storeu_ps(
        y + i, _mm512_mul_ps(_mm512_sub_ps(v, _mm512_set1_ps(q.zero)), _mm512_set1_ps(q.scale)));
  }
  return i;
}
#pragma GCC diagnostic pop
#endif

void fake_quantize(const float* x, size_t n, const steps::Quantize& q, float* y) {
  size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) i = fake_quantize_avx512(x, n, q, y);
#endif
#ifdef __SSE2__
  const __m128 s4 = _mm_set1_ps(q.scale), r4 = _mm_set1_ps(kRound);
  const __m128 lo4 = _mm_set1_ps(q.lo), hi4 = _mm_set1_ps(q.hi);
  for (; i + 4 <= n; i += 4) {
    const __m128 v = _mm_div_ps(_mm_loadu_ps(x + i), s4);
    const __m128 number = _mm_cmpord_ps(v, v);
    const __m128 c = _mm_min_ps(_mm_max_ps(v, lo4), hi4);
    const __m128 r = _mm_sub_ps(_mm_add_ps(c, r4), r4);
    _mm_storeu_ps(y + i, _mm_and_ps(number, _mm_mul_ps(r, s4)));
  }
#endif
  for (; i < n; ++i) y[i] = quantized(x[i], q) * q.scale;
}

template <class T>
void quantize(const float* x, size_t n, const steps::Quantize& q, T* y) {
  size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) i = quantize_avx512(x, n, q, reinterpret_cast<uint8_t*>(y));
#endif
  for (; i < n; ++i) y[i] = static_cast<T>(quantized(x[i], q) + q.zero);
}

template <class T>
void dequantize(const T* x, size_t n, const steps::Quantize& q, float* y) {
  size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512)
    i = dequantize_avx512(reinterpret_cast<const uint8_t*>(x), n, std::is_signed_v<T>, q, y);
#endif
  for (; i < n; ++i) y[i] = (static_cast<float>(x[i]) - q.zero) * q.scale;
}
}  // namespace

void Binder::run_quantize(size_t s) {
  const Step& step = c_.steps[s];
  const steps::Quantize& q = *step.as<steps::Quantize>();
  const void* x = nullptr;
  void* y = nullptr;
  const size_t n = src_dst(s, &x, &y);
  using dt = dnnl::memory::data_type;
  dt from = dt::f32, to = dt::f32;
  for (auto [arg, ref] : step.args)
    (arg == DNNL_ARG_SRC ? from : to) = c_.refs[ref].md->data_type();
  const auto* xf = static_cast<const float*>(x);
  auto* yf = static_cast<float*>(y);
  in_blocks(n, size_t{1} << 12, [&](size_t at, size_t count) {
    if (from == dt::f32 && to == dt::f32) fake_quantize(xf + at, count, q, yf + at);
    else if (to == dt::u8) quantize(xf + at, count, q, static_cast<uint8_t*>(y) + at);
    else if (to == dt::s8) quantize(xf + at, count, q, static_cast<int8_t*>(y) + at);
    else if (from == dt::u8) dequantize(static_cast<const uint8_t*>(x) + at, count, q, yf + at);
    else dequantize(static_cast<const int8_t*>(x) + at, count, q, yf + at);
  });
}

namespace {
// A plain matrix as sgemm reads it (row-major): the last two dims of `d`,
// 'N' with rows `ld` apart when its columns are adjacent, 'T' (the
// transpose stored row-major) when its rows are.
struct GemmOperand {
  char trans;
  int64_t ld;
};
GemmOperand gemm_operand(const dnnl_memory_desc_t& d) {
  const int n = d.ndims;
  const int64_t rows = d.dims[n - 2], cols = d.dims[n - 1];
  const int64_t sr = d.format_desc.blocking.strides[n - 2];
  const int64_t sc = d.format_desc.blocking.strides[n - 1];
  if (cols == 1 || sc == 1) return {'N', std::max<int64_t>({rows == 1 ? cols : sr, cols, 1})};
  return {'T', std::max<int64_t>({cols == 1 ? rows : sc, rows, 1})};
}
}  // namespace

void Binder::run_batch_gemm(size_t s) {
  const Step& step = c_.steps[s];
  const float *a = nullptr, *w = nullptr;
  float* y = nullptr;
  const dnnl_memory_desc_t *amd = nullptr, *wmd = nullptr, *ymd = nullptr;
  for (size_t k = 0; k < step.args.size(); ++k) {
    const auto [arg, ref] = step.args[k];
    const dnnl_memory_desc_t* md = &c_.refs[ref].md->data;
    if (arg == DNNL_ARG_SRC) a = static_cast<const float*>(ptr(s, k)), amd = md;
    else if (arg == DNNL_ARG_WEIGHTS) w = static_cast<const float*>(ptr(s, k)), wmd = md;
    else y = static_cast<float*>(ptr(s, k)), ymd = md;
  }
  const int n = ymd->ndims;
  const int64_t m = ymd->dims[n - 2], cols = ymd->dims[n - 1];
  const int64_t inner = amd->dims[n - 1];
  if (m == 0 || cols == 0) return;
  const GemmOperand ao = gemm_operand(*amd), wo = gemm_operand(*wmd), yo = gemm_operand(*ymd);
  if (yo.trans != 'N')  // (the lowering makes this step only for a row-major result)
    throw sdk::Error(BP_STATUS_INTERNAL, "CpuOneDnn: " + step.what + ": result not row-major");
  int64_t batch = 1;
  for (int i = 0; i + 2 < n; ++i) batch *= ymd->dims[i];
  const float alpha = step.as<steps::BatchGemm>()->alpha;
  std::atomic<int> failed{dnnl_success};  // (a chunk may run on another thread: no throw there)
  auto one = [&](int64_t b) {
    int64_t ao_at = 0, wo_at = 0, yo_at = 0;
    for (int i = n - 3; i >= 0; --i) {
      const int64_t k = b % ymd->dims[i];
      b /= ymd->dims[i];
      ao_at += k * amd->format_desc.blocking.strides[i];
      wo_at += k * wmd->format_desc.blocking.strides[i];
      yo_at += k * ymd->format_desc.blocking.strides[i];
    }
    if (inner == 0) {  // a sum of nothing
      for (int64_t i = 0; i < m; ++i) std::fill_n(y + yo_at + i * yo.ld, cols, 0.f);
      return;
    }
    const dnnl_status_t st = dnnl_sgemm(ao.trans, wo.trans, m, cols, inner, alpha, a + ao_at, ao.ld,
                                        w + wo_at, wo.ld, 0.f, y + yo_at, yo.ld);
    if (st != dnnl_success) failed = st;
  };
  // Across the team by batch when there are enough (each sgemm then on one
  // thread) and the work pays for waking it (a decoder step's attention at
  // a cache of a few hundred does not: about 16k multiply-adds); otherwise
  // each sgemm takes the team itself, or one thread when the work is small.
  const int64_t work = batch * m * cols * std::max<int64_t>(inner, 1);
  const bool parallel = c_.threads > 1 && work >= (int64_t{1} << 17);
  if (parallel && batch >= c_.threads) {
    for_each_index(batch, true, one);
  } else {
    const ScopedOmpThreads team(parallel ? c_.threads : 1);
    for_each_index(batch, false, one);
  }
  if (failed != dnnl_success)
    throw sdk::Error(BP_STATUS_BACKEND_ERROR, "CpuOneDnn: " + step.what +
                                                  " failed (oneDNN sgemm status " +
                                                  std::to_string(failed.load()) + ")");
}

namespace {
// A 4-bit matmul's operands as its loops read them (steps::NBitsMatMul).
// Each row of A is split into its even and odd elements, each half padded
// with zeros to `padded` / 2 (a whole number of blocks): the low and high
// halves of a weight byte then meet contiguous floats, and a dot product
// over the split halves is the one over the row.
struct NBitsArgs {
  const uint8_t* q = nullptr;  // [n, blocks, block / 2]
  const float* scales = nullptr;
  const uint8_t* zeros = nullptr;  // packed, or null (8)
  const float* bias = nullptr;
  int64_t n = 0, block = 0, blocks = 0, padded = 0;
  int zero(int64_t j, int64_t b) const { return packed_zero(zeros, blocks, j, b); }
  const uint8_t* column(int64_t j) const { return q + j * (padded / 2); }
};

void split_row(const float* a, int64_t k, int64_t padded, float* split) {
  float* even = split;
  float* odd = split + padded / 2;
  for (int64_t i = 0; i < padded / 2; ++i) {
    even[i] = 2 * i < k ? a[2 * i] : 0.f;
    odd[i] = 2 * i + 1 < k ? a[2 * i + 1] : 0.f;
  }
}

// Column j's weights, dequantized into `w` split as A's rows are.
BP_ONEDNN_VECTOR_CLONES void dequantize_column(const NBitsArgs& p, int64_t j, float* w) {
  const int64_t half = p.block / 2;
  const uint8_t* column = p.column(j);
  for (int64_t b = 0; b < p.blocks; ++b) {
    const float scale = p.scales[j * p.blocks + b];
    const float shift = static_cast<float>(p.zero(j, b));
    const uint8_t* bytes = column + b * half;
    float* e = w + b * half;
    float* o = w + p.padded / 2 + b * half;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      e[i] = (static_cast<float>(bytes[i] & 15) - shift) * scale;
      o[i] = (static_cast<float>(bytes[i] >> 4) - shift) * scale;
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// (GCC 12 warns falsely about the intrinsics' undefined fillers; bug 105593.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// Rows `a` (R of them, split, `padded` apart) times column j, the weights
// converted in registers once for all the rows: per block, scale * (sum of
// q * a - zero * sum of a), the block's sums of a from `sums` (`blocks`
// apart). Blocks of 32 values or more (16 bytes at a time).
template <int R>
__attribute__((target("avx512f"))) void dot_column_avx512(const NBitsArgs& p, int64_t j,
                                                          const float* a, const float* sums,
                                                          float* out) {
  const int64_t half = p.block / 2;
  const uint8_t* column = p.column(j);
  const __m512i low = _mm512_set1_epi32(15);
  __m512 acc[R];
  float shift[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), shift[r] = 0;
  for (int64_t b = 0; b < p.blocks; ++b) {
    __m512 t[R];
    for (int r = 0; r < R; ++r) t[r] = _mm512_setzero_ps();
    for (int64_t i = b * half; i < (b + 1) * half; i += 16) {
      const __m512i w =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(column + i)));
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(w, low));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(w, 4));
      for (int r = 0; r < R; ++r) {
        const float* ae = a + r * p.padded;
        t[r] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(ae + i), t[r]);
        t[r] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(ae + p.padded / 2 + i), t[r]);
      }
    }
    const float scale = p.scales[j * p.blocks + b];
    const float zero = static_cast<float>(p.zero(j, b));
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_fmadd_ps(t[r], _mm512_set1_ps(scale), acc[r]);
      shift[r] += scale * zero * sums[r * p.blocks + b];
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) - shift[r];
}

// dequantize_column in registers, 16 bytes at a time.
__attribute__((target("avx512f"))) void dequantize_column_avx512(const NBitsArgs& p, int64_t j,
                                                                 float* w) {
  const int64_t half = p.block / 2;
  const uint8_t* column = p.column(j);
  const __m512i low = _mm512_set1_epi32(15);
  for (int64_t b = 0; b < p.blocks; ++b) {
    const __m512 scale = _mm512_set1_ps(p.scales[j * p.blocks + b]);
    const __m512 shift = _mm512_set1_ps(static_cast<float>(p.zero(j, b)));
    for (int64_t i = b * half; i < (b + 1) * half; i += 16) {
      const __m512i q =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(column + i)));
      _mm512_storeu_ps(
          w + i,
          _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, low)), shift), scale));
      _mm512_storeu_ps(
          w + p.padded / 2 + i,
          _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), shift), scale));
    }
  }
}
#pragma GCC diagnostic pop
#endif

// Column j's weights dequantized into `w` (split as A's rows are).
void dequantize(const NBitsArgs& p, int64_t j, float* w) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512 && p.block % 32 == 0) return dequantize_column_avx512(p, j, w);
#endif
  dequantize_column(p, j, w);
}

// Columns [first, first + count) into y (row stride n), for a few rows:
// each weight converted once per row, nothing stored but the results.
void nbits_dot(const NBitsArgs& p, const float* a_split, const float* sums, int64_t rows,
               int64_t first, int64_t count, float* w, float* y) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512 && p.block % 32 == 0 && rows <= 4) {
    using Dot = void (*)(const NBitsArgs&, int64_t, const float*, const float*, float*);
    static constexpr Dot dots[] = {dot_column_avx512<1>, dot_column_avx512<2>, dot_column_avx512<3>,
                                   dot_column_avx512<4>};
    float out[4];
    for (int64_t j = first; j < first + count; ++j) {
      dots[rows - 1](p, j, a_split, sums, out);
      for (int64_t r = 0; r < rows; ++r)
        y[r * p.n + j] = out[r] + (p.bias != nullptr ? p.bias[j] : 0.f);
    }
    return;
  }
#endif
  (void)sums;
  for (int64_t j = first; j < first + count; ++j) {
    dequantize_column(p, j, w);
    for (int64_t r = 0; r < rows; ++r) {
      const float* a = a_split + r * p.padded;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < p.padded; ++i) sum += w[i] * a[i];
      y[r * p.n + j] = sum + (p.bias != nullptr ? p.bias[j] : 0.f);
    }
  }
}
}  // namespace

// Few rows (a decoder's token): the weights are converted in registers as
// they are read, the bytes read once per row. More: each chunk of columns is
// dequantized into a panel, split as A's rows are, and multiplied by
// oneDNN's sgemm, so the conversion is paid once for all the rows.
void Binder::run_nbits_matmul(size_t s) {
  const Step& step = c_.steps[s];
  const steps::NBitsMatMul& op = *step.as<steps::NBitsMatMul>();
  NBitsArgs p;
  const float* a = nullptr;
  float* y = nullptr;
  size_t a_bytes = 0;
  for (size_t k = 0; k < step.args.size(); ++k) {
    const auto [arg, ref] = step.args[k];
    void* at = ptr(s, k);
    if (arg == DNNL_ARG_SRC)
      a = static_cast<const float*>(at), a_bytes = c_.refs[ref].md->get_size();
    else if (arg == DNNL_ARG_WEIGHTS) p.q = static_cast<const uint8_t*>(at);
    else if (arg == DNNL_ARG_SCALE) p.scales = static_cast<const float*>(at);
    else if (arg == DNNL_ARG_ATTR_ZERO_POINTS) p.zeros = static_cast<const uint8_t*>(at);
    else if (arg == DNNL_ARG_BIAS) p.bias = static_cast<const float*>(at);
    else y = static_cast<float*>(at);
  }
  const int64_t rows = static_cast<int64_t>(a_bytes / sizeof(float)) / op.k;
  if (rows == 0) return;
  p.n = op.n;
  p.block = op.block;
  p.blocks = (op.k + op.block - 1) / op.block;
  p.padded = p.blocks * op.block;
  // A's rows split, and each block's sum per row, once: every column reads them.
  thread_local std::vector<float> split, sums;
  split.resize(static_cast<size_t>(rows * p.padded));
  sums.resize(static_cast<size_t>(rows * p.blocks));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = split.data() + r * p.padded;
    split_row(a + r * op.k, op.k, p.padded, row);
    for (int64_t b = 0; b < p.blocks; ++b) {
      const int64_t half = op.block / 2;
      float sum = 0;
      for (int64_t i = b * half; i < (b + 1) * half; ++i) sum += row[i] + row[p.padded / 2 + i];
      sums[static_cast<size_t>(r * p.blocks + b)] = sum;
    }
  }
  constexpr int64_t kFewRows = 4;
  const int64_t columns = rows <= kFewRows ? 32 : 256;  // wider panels were no faster
  const int64_t chunks = (op.n + columns - 1) / columns;
  const bool parallel = c_.threads > 1 && rows * op.n * p.padded >= (int64_t{1} << 17);
  const ScopedOmpThreads team(parallel ? c_.threads : 1);
  const float* a_split = split.data();
  const float* block_sums = sums.data();
  std::atomic<int> failed{dnnl_success};  // (a chunk may run on another thread: no throw there)
  for_each_index(chunks, parallel, [&](int64_t c) {
    const int64_t first = c * columns, count = std::min(columns, op.n - first);
    thread_local std::vector<float> panel;
    if (rows <= kFewRows) {
      panel.resize(static_cast<size_t>(p.padded));
      nbits_dot(p, a_split, block_sums, rows, first, count, panel.data(), y);
      return;
    }
    panel.resize(static_cast<size_t>(count * p.padded));
    for (int64_t j = 0; j < count; ++j) dequantize(p, first + j, panel.data() + j * p.padded);
    const dnnl_status_t st = dnnl_sgemm('N', 'T', rows, count, p.padded, 1.f, a_split, p.padded,
                                        panel.data(), p.padded, 0.f, y + first, op.n);
    if (st != dnnl_success) failed = st;
    if (p.bias != nullptr)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < count; ++j) y[r * op.n + first + j] += p.bias[first + j];
  });
  if (failed != dnnl_success)
    throw sdk::Error(BP_STATUS_BACKEND_ERROR, "CpuOneDnn: " + step.what +
                                                  " failed (oneDNN sgemm status " +
                                                  std::to_string(failed.load()) + ")");
}

// Each kind of step to its runner: a kind without one does not compile.
struct Binder::RunStep {
  Binder& b;
  size_t s;
  dnnl::stream& stream;
  void operator()(const steps::Primitive&) const { b.run_primitive(s, stream); }
  void operator()(const steps::CopyConcat&) const { b.run_copy(s); }
  void operator()(const steps::ConcatNorm&) const { b.run_concat_norm(s); }
  void operator()(const steps::Gather&) const { b.run_gather(s); }
  void operator()(const steps::RowSoftmax&) const { b.run_row_softmax(s); }
  void operator()(const steps::RowMean&) const { b.run_row_mean(s); }
  void operator()(const steps::RowLayerNorm&) const { b.run_row_layer_norm(s); }
  void operator()(const steps::SmallBinary&) const { b.run_small_binary(s); }
  void operator()(const steps::Eltwise&) const { b.run_eltwise(s); }
  void operator()(const steps::DynamicQuantize&) const { b.run_dynamic_quantize(s); }
  void operator()(const steps::Table&) const { b.run_table(s); }
  void operator()(const steps::Quantize&) const { b.run_quantize(s); }
  void operator()(const steps::BatchGemm&) const { b.run_batch_gemm(s); }
  void operator()(const steps::NBitsMatMul&) const { b.run_nbits_matmul(s); }
};

void Binder::run_step(size_t s, dnnl::stream& stream) {
  std::visit(RunStep{*this, s, stream}, c_.steps[s].op);
}

void Binder::run_primitive(size_t s, dnnl::stream& stream) {
  dnnl_status_t st = dnnl_primitive_execute(c_.steps[s].prim.get(), stream.get(),
                                            static_cast<int>(args_at_[s + 1] - args_at_[s]),
                                            args_.data() + args_at_[s]);
  if (st != dnnl_success)
    throw sdk::Error(BP_STATUS_BACKEND_ERROR, "CpuOneDnn: " + c_.steps[s].what +
                                                  " failed (oneDNN status " +
                                                  std::to_string(static_cast<int>(st)) + ")");
}

namespace {
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;
}  // namespace

int Step::concat_axis() const {
  return std::visit(
      Overloaded{[](const steps::Primitive& p) { return p.concat_axis; },
                 [](const steps::CopyConcat& c) { return c.axis; },
                 [](const steps::ConcatNorm&) { return 1; }, [](const auto&) { return -1; }},
      op);
}

const char* Step::kind_name() const {
  return std::visit(Overloaded{[&](const steps::Primitive&) {
                                 return dnnl_prim_kind2str(dnnl::convert_to_c(prim.get_kind()));
                               },
                               [](const steps::CopyConcat&) { return "concat"; },
                               [](const steps::ConcatNorm&) { return "concat+normalize"; },
                               [](const steps::Gather&) { return "gather"; },
                               [](const steps::RowSoftmax&) { return "softmax"; },
                               [](const steps::RowMean&) { return "reduction"; },
                               [](const steps::RowLayerNorm&) { return "layer_normalization"; },
                               [](const steps::SmallBinary&) { return "binary"; },
                               [](const steps::Eltwise&) { return "eltwise"; },
                               [](const steps::DynamicQuantize&) { return "dynamic_quantize"; },
                               [](const steps::Table&) { return "table"; },
                               [](const steps::Quantize&) { return "quantize"; },
                               [](const steps::BatchGemm&) { return "matmul"; },
                               [](const steps::NBitsMatMul&) { return "matmul_nbits"; }},
                    op);
}

std::shared_ptr<char> allocate_block(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes < kHuge) {
    void* p = std::aligned_alloc(kAlign, align_up(std::max<size_t>(bytes, 1)));
    if (p == nullptr) throw std::bad_alloc();
    return std::shared_ptr<char>(static_cast<char*>(p), [](char* q) { std::free(q); });
  }
  // Mapped with a huge page's worth to spare, then trimmed to start on a
  // huge page boundary. The end stays where the bytes end: a last part
  // shorter than a huge page is small pages, not a huge page half unused.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = (bytes + page - 1) / page * page;
  void* raw =
      mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  char* base = static_cast<char*>(raw);
  char* at = base + (kHuge - reinterpret_cast<uintptr_t>(base) % kHuge) % kHuge;
  if (at > base) munmap(base, static_cast<size_t>(at - base));
  if (base + size + kHuge > at + size)
    munmap(at + size, static_cast<size_t>(base + size + kHuge - (at + size)));
  madvise(at, size, MADV_HUGEPAGE);  // advice: without transparent huge pages, small ones
  return std::shared_ptr<char>(at, [size](char* q) { munmap(q, size); });
}

ScopedOmpThreads::ScopedOmpThreads(int threads) : before_(omp_get_max_threads()) {
  if (before_ != threads) omp_set_num_threads(threads);
}

ScopedOmpThreads::~ScopedOmpThreads() {
  if (omp_get_max_threads() != before_) omp_set_num_threads(before_);
}

void start_openmp_team(int threads) {
#if defined(_OPENMP)
  if (threads <= 1) return;
#pragma omp parallel num_threads(threads)
  { /* the workers are made now, not in the first run */ }
#endif
}

void make_sgemm_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<float> a(16 * 16, 0.f), c(16 * 16);
    dnnl_sgemm('N', 'N', 16, 16, 16, 1.f, a.data(), 16, a.data(), 16, 0.f, c.data(), 16);
  });
}

void end_openmp_team() {
#if defined(_OPENMP)
  // Hard: the workers end now. Fails (-1, ignored) inside a parallel region
  // of the application's.
  (void)omp_pause_resource_all(omp_pause_hard);
#endif
}

namespace {

// Per caller: the arena and the scratchpad, and the plan bound to them, all
// made here so execute() allocates nothing itself.
class Context : public sdk::ExecContext {
 public:
  explicit Context(const Compiled& c) : stream_(engine()) {
    const size_t bytes = c.empty ? 0 : context_bytes(c);  // (empty: Binder::run says why)
    if (bytes > 0) {
      block_ = allocate_block(bytes);
      memory_ = block_.get();
      // Touched now, while the session is made: its pages would otherwise
      // fault in during the first run.
      std::memset(memory_, 0, bytes);
    }
    binder_ = std::make_unique<Binder>(c, memory_);
    // The OpenMP team the steps run on, started now for the same reason.
    if (!c.empty) start_openmp_team(c.threads);
  }

  void execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
               const bp_tensor_t* outputs) override {
    binder_->run(stream_, num_inputs, inputs, num_outputs, outputs);
  }
  void execute_shaped(const sdk::ExecuteArgs& a) override {
    binder_->run(stream_, a.num_inputs(), a.inputs(), a.num_outputs(), a.outputs(),
                 a.profiling() ? &a : nullptr);
  }

 private:
  dnnl::stream stream_;
  std::shared_ptr<char> block_;
  char* memory_ = nullptr;
  std::unique_ptr<Binder> binder_;
};

}  // namespace

std::unique_ptr<sdk::ExecContext> Compiled::create_context() {
  return std::make_unique<Context>(*this);
}

}  // namespace backplane::onednn
