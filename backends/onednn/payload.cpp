// payload.cpp — a compiled CpuOneDnn partition in an artifact, and back.
//
// What makes loading fast is that nothing is decided again: the payload holds
// the plan (buffers, arena offsets, memory descriptions, steps and their
// arguments) and each primitive's oneDNN operation descriptor and attributes;
// every constant goes to the NamedBlobStore already in the layout its
// primitive wants (reordered, BatchNormalization folded in), and at load it
// is used where the artifact maps it, without a copy. Loading then only asks
// oneDNN to create each primitive again (its JIT code cannot be stored).
//
// Operation and memory descriptors are oneDNN's own plain C structs, so a
// payload is tied to the oneDNN build and CPU ISA that wrote it: a payload
// from another one is refused with BP_STATUS_VERSION_MISMATCH and the runtime
// compiles the partition again from the portable graph. Every primitive made
// from a payload is also checked to want exactly the memory layouts the plan
// recorded, so a layout oneDNN would now choose differently is caught the
// same way instead of running on the wrong bytes.
//
// A shape-polymorphic partition (polymorphic.hpp) has no plan to store: its
// primitives are made per shape at run time. Its payload only says what it
// is, and loading it compiles the view (the same one, weights and all) again
// for every shape, which costs no lowering.
#include "onednn/compiled.hpp"
#include "onednn/compiler.hpp"
#include "onednn/impl_check.hpp"
#include "onednn/plan_builder.hpp"
#include "onednn/polymorphic.hpp"

#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <set>
#include <thread>
#include <type_traits>

namespace backplane::onednn {
namespace {

constexpr char kMagic[] = "CpuOneDnn payload";
// A shape-polymorphic partition's payload: this, the format version and the
// byte order, nothing else (polymorphic.hpp).
constexpr char kPolyMagic[] = "CpuOneDnn shape-polymorphic payload";
constexpr uint32_t kFormatVersion = 3;
constexpr uint32_t kEndianMark = 0x01020304;

// The size of the operation descriptor of a primitive kind the lowering
// makes, 0 for any other (reorder and concat have memory descriptors only).
size_t op_desc_size(dnnl_primitive_kind_t kind);

// The oneDNN build a payload belongs to: version and commit.
std::string library_id() {
  const char* hash = dnnl_version()->hash;
  return library_version() + " (" + (hash ? hash : "") + ")";
}

// "avx2", "avx512_core_vnni": oneDNN's name of a CPU ISA.
std::string isa_name(int32_t isa) {
  const std::string s = dnnl_cpu_isa2str(static_cast<dnnl_cpu_isa_t>(isa));
  return s.rfind("cpu_isa_", 0) == 0 ? s.substr(8) : s;
}

void check(dnnl_status_t st, const char* what) {
  if (st != dnnl_success)
    throw sdk::Error(BP_STATUS_BACKEND_ERROR, std::string("CpuOneDnn: ") + what +
                                                  " failed (oneDNN status " +
                                                  std::to_string(static_cast<int>(st)) + ")");
}

// The value stored in an enum field of a struct read from bytes, as an
// integer: loading it as the enum type is undefined for values the enum
// does not have, so every such field is checked through this first.
template <class E>
int64_t raw(const E& e) {
  static_assert(std::is_enum_v<E>);
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<int64_t>(v);
}
bool one_of(int64_t v, std::initializer_list<int64_t> allowed) {
  for (int64_t a : allowed)
    if (v == a) return true;
  return false;
}

// The eltwise algorithms the lowering makes.
bool eltwise_alg(int64_t a) {
  return one_of(
      a, {dnnl_eltwise_relu, dnnl_eltwise_tanh, dnnl_eltwise_elu, dnnl_eltwise_sqrt,
          dnnl_eltwise_abs, dnnl_eltwise_linear, dnnl_eltwise_logistic, dnnl_eltwise_exp,
          dnnl_eltwise_gelu_tanh, dnnl_eltwise_gelu_erf, dnnl_eltwise_clip, dnnl_eltwise_pow,
          dnnl_eltwise_hardswish, dnnl_eltwise_mish, dnnl_eltwise_soft_relu, dnnl_eltwise_log,
          dnnl_eltwise_round, dnnl_eltwise_swish});
}

// ---------------------------------------------------------------------------
// Bytes
// ---------------------------------------------------------------------------

using Writer = sdk::PayloadWriter;
using Reader = sdk::PayloadReader;  // CORRUPT_DATA naming where, on anything malformed

// Only what the lowering makes: float32, uint8 or int8 (quantized tensors),
// int32 (DequantizeLinear's input), or empty (scratchpads are 1-D bytes),
// plain or blocked, every element inside the bytes the descriptor
// claims; or the weights of a Winograd convolution, whose layout is
// oneDNN's own (check_layouts then requires it to equal what the
// convolution, made again, wants; bind_constants, a blob of its size).
// oneDNN trusts descriptors it did not build itself, and its JIT code
// addresses memory by them.
void check_md(const Reader& r, const dnnl_memory_desc_t& md, const char* what, bool concrete) {
  constexpr int64_t kMaxDim = int64_t{1} << 32;
  constexpr unsigned __int128 kMaxElements = static_cast<unsigned __int128>(1) << 38;
  const int64_t dt = raw(md.data_type), fk = raw(md.format_kind);
  const bool wino = concrete && fk == dnnl_format_kind_wino && md.ndims == 4 && dt == dnnl_f32;
  bool ok =
      md.ndims >= 0 && md.ndims <= DNNL_MAX_NDIMS && md.offset0 >= 0 &&
      md.offset0 <= static_cast<int64_t>(kMaxElements) && md.extra.flags == 0 &&
      (md.ndims == 0 ? dt == dnnl_data_type_undef
                     : one_of(dt, {dnnl_f32, dnnl_u8, dnnl_s8, dnnl_s32})) &&
      (md.ndims == 0 ? fk == dnnl_format_kind_undef
                     : fk == dnnl_blocked || wino || (!concrete && fk == dnnl_format_kind_any));
  for (int i = 0; ok && i < md.ndims; ++i)
    ok = md.dims[i] >= 0 && md.dims[i] <= kMaxDim && md.padded_dims[i] >= md.dims[i] &&
         md.padded_dims[i] <= md.dims[i] + 64 && md.padded_offsets[i] == 0;
  if (ok && wino) {
    const dnnl_wino_desc_t& w = md.format_desc.wino_desc;
    ok = md.offset0 == 0 && w.size > 0 && w.size % sizeof(float) == 0 &&
         w.size <= static_cast<size_t>(kMaxElements) * sizeof(float);
  }
  if (ok && fk == dnnl_blocked) {
    const dnnl_blocking_desc_t& b = md.format_desc.blocking;
    ok = b.inner_nblks >= 0 && b.inner_nblks <= DNNL_MAX_NDIMS;
    for (int i = 0; ok && i < md.ndims; ++i)
      ok = b.strides[i] >= 0 && b.strides[i] <= kMaxDim * 64;
    int64_t blk[DNNL_MAX_NDIMS];
    for (int i = 0; i < DNNL_MAX_NDIMS; ++i) blk[i] = 1;
    int64_t inner = 1;
    for (int i = 0; ok && i < b.inner_nblks; ++i) {
      ok = b.inner_idxs[i] >= 0 && b.inner_idxs[i] < md.ndims && b.inner_blks[i] >= 1 &&
           b.inner_blks[i] <= 64;
      if (ok) {
        blk[b.inner_idxs[i]] *= b.inner_blks[i];
        inner *= b.inner_blks[i];
        ok = inner <= 4096;
      }
    }
    // The farthest element from the start, and the elements there are.
    unsigned __int128 elements = 1, farthest = static_cast<unsigned __int128>(inner - 1);
    for (int i = 0; ok && i < md.ndims; ++i) {
      ok = md.padded_dims[i] % blk[i] == 0;
      const int64_t outer = md.padded_dims[i] / blk[i];
      elements *= static_cast<unsigned __int128>(md.padded_dims[i]);
      if (outer > 0)
        farthest += static_cast<unsigned __int128>(b.strides[i]) *
                    static_cast<unsigned __int128>(outer - 1);
      ok = ok && elements <= kMaxElements;
    }
    // A dense layout, or a window of one (Slice, Split, Pad, Gather:
    // lowering_data.cpp), whose bytes touched_bytes() bounds.
    const bool window = md.offset0 != 0 || farthest >= elements;
    if (ok && elements > 0 && !window) {
      const size_t elem = dt == dnnl_u8 || dt == dnnl_s8 ? 1 : sizeof(float);
      ok = dnnl::memory::desc(md).get_size() == static_cast<size_t>(elements) * elem;
    }
    ok = ok && (!window || (dt == dnnl_f32 && farthest + md.offset0 < kMaxElements));
  }
  if (!ok) r.fail(std::string("has a memory descriptor oneDNN could not have made, for ") + what);
}

// A description of memory the plan addresses (not "any").
dnnl::memory::desc read_md(Reader& r, const char* what) {
  const auto md = r.pod<dnnl_memory_desc_t>(what);
  check_md(r, md, what, /*concrete=*/true);
  return dnnl::memory::desc(md);
}

// ---------------------------------------------------------------------------
// A step: how to create its primitive again
// ---------------------------------------------------------------------------

struct PostOpRecord {
  uint8_t sum = 0;
  float scale = 1.f;
  int32_t alg = 0;
  float alpha = 0.f, beta = 0.f;
};

// The step kind of a CopyConcat step (compiled.hpp): no oneDNN primitive,
// so none of oneDNN's kinds (which are all >= 0).
constexpr int32_t kCopyConcatKind = -1;
// The step kind of a gather step (compiled.hpp): no oneDNN primitive either.
constexpr int32_t kGatherKind = -2;
// A ConcatNorm step.
constexpr int32_t kConcatNormKind = -3;
// A steps::Quantize from float32 to float32 (a QuantizeLinear and its
// DequantizeLinear in one), without its zero point: as stored before the
// loop took the other directions.
constexpr int32_t kFakeQuantizeKind = -4;
// A steps::Quantize.
constexpr int32_t kQuantizeKind = -5;
// A steps::Eltwise.
constexpr int32_t kEltwiseKind = -6;

void write_args(Writer& w, const Step& step) {
  w.pod(static_cast<uint32_t>(step.args.size()));
  for (auto [arg, ref] : step.args) {
    w.pod(static_cast<int32_t>(arg));
    w.pod(static_cast<int32_t>(ref));
  }
}

void write_step(Writer& w, const Step& step) {
  const auto* norm = step.as<steps::ConcatNorm>();
  if (norm != nullptr || step.as<steps::CopyConcat>()) {
    w.pod(norm != nullptr ? kConcatNormKind : kCopyConcatKind);
    w.str(step.what);
    w.pod(static_cast<int32_t>(step.concat_axis()));
    if (norm != nullptr) w.pod(static_cast<uint8_t>(norm->relu ? 1 : 0));
    write_args(w, step);
    return;
  }
  if (const auto* gather = step.as<steps::Gather>()) {
    if (gather->block > 0)  // as a 4-bit matmul: the artifact keeps the portable graph
      throw sdk::unsupported("CpuOneDnn does not store 4-bit gathers in a payload (" + step.what +
                             ")");
    w.pod(kGatherKind);
    w.str(step.what);
    w.pod(static_cast<int32_t>(gather->axis));
    w.pod(static_cast<int32_t>(gather->index_bytes));
    write_args(w, step);
    return;
  }
  if (const auto* e = step.as<steps::Eltwise>()) {
    w.pod(kEltwiseKind);
    w.str(step.what);
    w.pod(static_cast<int32_t>(e->fn));
    w.pod(e->alpha);
    w.pod(e->beta);
    write_args(w, step);
    return;
  }
  if (const auto* q = step.as<steps::Quantize>()) {
    w.pod(kQuantizeKind);
    w.str(step.what);
    w.pod(q->scale);
    w.pod(q->lo);
    w.pod(q->hi);
    w.pod(q->zero);
    write_args(w, step);
    return;
  }
  if (step.as<steps::NBitsMatMul>())  // the artifact keeps the portable graph (compiled at load)
    throw sdk::unsupported("CpuOneDnn does not store 4-bit matmuls in a payload (" + step.what +
                           ")");
  if (!step.as<steps::Primitive>() || !step.prim)
    throw sdk::Error(BP_STATUS_INTERNAL, "CpuOneDnn: " + step.what + " is not a oneDNN primitive");
  const_dnnl_primitive_desc_t pd = step.prim.get_primitive_desc();
  dnnl_primitive_kind_t kind{};
  check(dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &kind), "query primitive kind");
  w.pod(static_cast<int32_t>(kind));
  w.str(step.what);
  w.pod(static_cast<uint8_t>(step.beside_next ? 1 : 0));
  if (kind == dnnl_reorder) {
    w.pod(*dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0));
    w.pod(*dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0));
  } else if (kind == dnnl_concat) {
    int32_t n = 0;
    check(dnnl_primitive_desc_query(pd, dnnl_query_num_of_inputs_s32, 0, &n),
          "query concat inputs");
    w.pod(static_cast<int32_t>(step.concat_axis()));
    w.pod(static_cast<uint32_t>(n));
    for (int i = 0; i < n; ++i)
      w.pod(*dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, i));
    w.pod(*dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0));
  } else {
    const size_t size = op_desc_size(kind);
    if (size == 0)
      throw sdk::unsupported("CpuOneDnn cannot serialize a primitive of kind " +
                             std::to_string(static_cast<int>(kind)) + " (" + step.what + ")");
    const_dnnl_op_desc_t op = nullptr;
    check(dnnl_primitive_desc_query(pd, dnnl_query_op_d, 0, &op), "query operation descriptor");
    w.pod(static_cast<uint32_t>(size));
    w.raw(op, size);
  }
  // Attributes: the scratchpad mode, the post-op chain, then (below) the output
  // scales and the source zero point: all the lowering sets.
  const_dnnl_primitive_attr_t attr = nullptr;
  check(dnnl_primitive_desc_get_attr(pd, &attr), "query attributes");
  dnnl_scratchpad_mode_t mode{};
  check(dnnl_primitive_attr_get_scratchpad_mode(attr, &mode), "query scratchpad mode");
  w.pod(static_cast<int32_t>(mode));
  const_dnnl_post_ops_t po = nullptr;
  check(dnnl_primitive_attr_get_post_ops(attr, &po), "query post-ops");
  const int len = dnnl_post_ops_len(po);
  w.pod(static_cast<uint32_t>(len));
  for (int i = 0; i < len; ++i) {
    PostOpRecord r;
    const dnnl_primitive_kind_t pk = dnnl_post_ops_get_kind(po, i);
    if (pk == dnnl_sum) {
      r.sum = 1;
      check(dnnl_post_ops_get_params_sum(po, i, &r.scale), "query sum post-op");
    } else if (pk == dnnl_eltwise) {
      dnnl_alg_kind_t alg{};
      check(dnnl_post_ops_get_params_eltwise(po, i, &r.scale, &alg, &r.alpha, &r.beta),
            "query eltwise post-op");
      r.alg = static_cast<int32_t>(alg);
    } else {
      throw sdk::unsupported("CpuOneDnn cannot serialize post-op kind " +
                             std::to_string(static_cast<int>(pk)));
    }
    w.pod(r);
  }
  // Output scales and the source's zero point (DequantizeLinear's reorder).
  dnnl_dim_t count = 0;
  int mask = 0;
  const float* scales = nullptr;
  check(dnnl_primitive_attr_get_output_scales(attr, &count, &mask, &scales),
        "query output scales");
  w.pod(static_cast<int32_t>(mask));
  w.pod(static_cast<uint32_t>(count));
  for (dnnl_dim_t i = 0; i < count; ++i) w.pod(scales[i]);
  const int32_t* zero_points = nullptr;
  check(dnnl_primitive_attr_get_zero_points(attr, DNNL_ARG_SRC, &count, &mask, &zero_points),
        "query zero points");
  if (count != 1 || mask != 0)
    throw sdk::unsupported("CpuOneDnn cannot serialize zero points of more than one value");
  w.pod(zero_points[0]);
  write_args(w, step);
}

// The checks on an operation descriptor read from a payload, and the
// arguments its primitive will read or write (collected as they are checked).
class DescCheck {
 public:
  DescCheck(Reader& r, const std::string& what) : r_(r), what_(what) {}

  const std::vector<int>& required() const { return required_; }
  void require(int arg) { required_.push_back(arg); }

  // Memory descriptors the lowering could have made ("any" allowed).
  void mds(std::initializer_list<const dnnl_memory_desc_t*> list) {
    for (const dnnl_memory_desc_t* m : list) check_md(r_, *m, what_.c_str(), /*concrete=*/false);
  }
  void need(bool ok) {
    if (!ok)
      r_.fail("has an operation the lowering does not make (kind, propagation or algorithm) in " +
              what_);
  }
  template <class D>
  void inference(const D& d) {
    need(raw(d.prop_kind) == dnnl_forward_inference);
  }
  // oneDNN's initializers assume ranks and window parameters that make
  // sense (they copy ndims - 2 spatial values, divide by strides, ...).
  void rank(const dnnl_memory_desc_t& m, int lo, int hi) { need(m.ndims >= lo && m.ndims <= hi); }
  void same_rank(std::initializer_list<const dnnl_memory_desc_t*> list) {
    for (const dnnl_memory_desc_t* m : list) need(m->ndims == (*list.begin())->ndims);
  }
  void window(int spatial, std::initializer_list<const int64_t*> at_least_one,
              std::initializer_list<const int64_t*> at_least_zero) {
    constexpr int64_t kMax = int64_t{1} << 20;
    for (const int64_t* v : at_least_one)
      for (int i = 0; i < spatial; ++i) need(v[i] >= 1 && v[i] <= kMax);
    for (const int64_t* v : at_least_zero)
      for (int i = 0; i < spatial; ++i) need(v[i] >= 0 && v[i] <= kMax);
  }
  void with_bias(const dnnl_memory_desc_t& bias) {
    require(DNNL_ARG_WEIGHTS);
    if (bias.ndims > 0) require(DNNL_ARG_BIAS);
  }
  // `relu`: the ReLU a batch normalization applies in its pass (fusion's
  // absorb_relu); inference needs no workspace for it.
  void norm_flags(unsigned flags, bool relu) {
    unsigned known = dnnl_use_global_stats | dnnl_use_scale | dnnl_use_shift;
    if (relu) known |= dnnl_fuse_norm_relu;
    if ((flags & ~known) != 0)
      r_.fail("has normalization flags the lowering does not use in " + what_);
    if (flags & dnnl_use_global_stats)
      required_.insert(required_.end(), {DNNL_ARG_MEAN, DNNL_ARG_VARIANCE});
    if (flags & dnnl_use_scale) require(DNNL_ARG_SCALE);
    if (flags & dnnl_use_shift) require(DNNL_ARG_SHIFT);
  }

 private:
  Reader& r_;
  const std::string& what_;
  std::vector<int> required_ = {DNNL_ARG_SRC, DNNL_ARG_DST};
};

// Each function below checks the recorded descriptor `d` of one primitive
// kind and makes it again with oneDNN's public initializer into `f`.

dnnl_status_t reinit(DescCheck& c, const dnnl_convolution_desc_t& d, dnnl_convolution_desc_t& f) {
  c.mds({&d.src_desc, &d.weights_desc, &d.bias_desc, &d.dst_desc});
  c.inference(d);
  const bool deconvolution = d.primitive_kind == dnnl_deconvolution;
  c.need(deconvolution ? raw(d.alg_kind) == dnnl_deconvolution_direct
                       : raw(d.alg_kind) == dnnl_convolution_direct ||
                             raw(d.alg_kind) == dnnl_convolution_winograd);
  c.rank(d.src_desc, 3, 5);
  c.same_rank({&d.src_desc, &d.dst_desc});
  c.need(d.weights_desc.ndims == d.src_desc.ndims || d.weights_desc.ndims == d.src_desc.ndims + 1);
  c.need(d.bias_desc.ndims == 0 || d.bias_desc.ndims == 1);
  c.window(d.src_desc.ndims - 2, {d.strides}, {d.dilates, d.padding[0], d.padding[1]});
  c.with_bias(d.bias_desc);
  if (deconvolution)
    return dnnl_dilated_deconvolution_forward_desc_init(
        &f, d.prop_kind, d.alg_kind, &d.src_desc, &d.weights_desc, &d.bias_desc, &d.dst_desc,
        d.strides, d.dilates, d.padding[0], d.padding[1]);
  return dnnl_dilated_convolution_forward_desc_init(
      &f, d.prop_kind, d.alg_kind, &d.src_desc, &d.weights_desc, &d.bias_desc, &d.dst_desc,
      d.strides, d.dilates, d.padding[0], d.padding[1]);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_eltwise_desc_t& d, dnnl_eltwise_desc_t& f) {
  c.mds({&d.data_desc});
  c.inference(d);
  c.need(eltwise_alg(raw(d.alg_kind)));
  c.rank(d.data_desc, 1, DNNL_MAX_NDIMS);
  return dnnl_eltwise_forward_desc_init(&f, d.prop_kind, d.alg_kind, &d.data_desc, d.alpha, d.beta);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_prelu_desc_t& d, dnnl_prelu_desc_t& f) {
  c.mds({&d.data_desc, &d.weights_desc});
  c.inference(d);
  c.rank(d.data_desc, 1, DNNL_MAX_NDIMS);
  c.same_rank({&d.data_desc, &d.weights_desc});
  c.require(DNNL_ARG_WEIGHTS);
  return dnnl_prelu_forward_desc_init(&f, d.prop_kind, &d.data_desc, &d.weights_desc);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_resampling_desc_t& d, dnnl_resampling_desc_t& f) {
  c.mds({&d.src_desc, &d.dst_desc});
  c.inference(d);
  c.need(one_of(raw(d.alg_kind), {dnnl_resampling_nearest, dnnl_resampling_linear}));
  c.rank(d.src_desc, 3, 5);
  c.same_rank({&d.src_desc, &d.dst_desc});
  return dnnl_resampling_forward_desc_init(&f, d.prop_kind, d.alg_kind, nullptr, &d.src_desc,
                                           &d.dst_desc);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_softmax_desc_t& d, dnnl_softmax_desc_t& f) {
  c.mds({&d.data_desc});
  c.inference(d);
  c.rank(d.data_desc, 1, DNNL_MAX_NDIMS);
  c.need(d.softmax_axis >= 0 && d.softmax_axis < d.data_desc.ndims);
  return dnnl_softmax_forward_desc_init(&f, d.prop_kind, &d.data_desc, d.softmax_axis);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_pooling_v2_desc_t& d, dnnl_pooling_v2_desc_t& f) {
  c.mds({&d.src_desc, &d.dst_desc});
  c.inference(d);
  c.need(one_of(raw(d.alg_kind), {dnnl_pooling_max, dnnl_pooling_avg_include_padding,
                                  dnnl_pooling_avg_exclude_padding}));
  c.rank(d.src_desc, 3, 5);
  c.same_rank({&d.src_desc, &d.dst_desc});
  c.window(d.src_desc.ndims - 2, {d.strides, d.kernel}, {d.dilation, d.padding[0], d.padding[1]});
  return dnnl_pooling_v2_forward_desc_init(&f, d.prop_kind, d.alg_kind, &d.src_desc, &d.dst_desc,
                                           d.strides, d.kernel, d.dilation, d.padding[0],
                                           d.padding[1]);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_batch_normalization_desc_t& d,
                     dnnl_batch_normalization_desc_t& f) {
  c.mds({&d.data_desc});
  c.inference(d);
  c.rank(d.data_desc, 2, 5);
  c.norm_flags(d.flags, true);
  return dnnl_batch_normalization_forward_desc_init(&f, d.prop_kind, &d.data_desc,
                                                    d.batch_norm_epsilon, d.flags);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_layer_normalization_desc_t& d,
                     dnnl_layer_normalization_desc_t& f) {
  c.mds({&d.data_desc, &d.stat_desc});
  c.inference(d);
  c.rank(d.data_desc, 2, 5);
  c.need(d.stat_desc.ndims == 0 || d.stat_desc.ndims == d.data_desc.ndims - 1);
  c.norm_flags(d.flags, false);
  return dnnl_layer_normalization_forward_desc_init(&f, d.prop_kind, &d.data_desc, &d.stat_desc,
                                                    d.layer_norm_epsilon, d.flags);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_inner_product_desc_t& d,
                     dnnl_inner_product_desc_t& f) {
  c.mds({&d.src_desc, &d.weights_desc, &d.bias_desc, &d.dst_desc});
  c.inference(d);
  c.rank(d.src_desc, 2, 5);
  c.same_rank({&d.src_desc, &d.weights_desc});
  c.rank(d.dst_desc, 2, 2);
  c.need(d.bias_desc.ndims == 0 || d.bias_desc.ndims == 1);
  c.with_bias(d.bias_desc);
  return dnnl_inner_product_forward_desc_init(&f, d.prop_kind, &d.src_desc, &d.weights_desc,
                                              &d.bias_desc, &d.dst_desc);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_binary_desc_t& d, dnnl_binary_desc_t& f) {
  c.mds({&d.src_desc[0], &d.src_desc[1], &d.dst_desc});
  c.need(one_of(raw(d.alg_kind), {dnnl_binary_add, dnnl_binary_sub, dnnl_binary_mul,
                                  dnnl_binary_div, dnnl_binary_max, dnnl_binary_min}));
  c.rank(d.src_desc[0], 1, DNNL_MAX_NDIMS);
  c.same_rank({&d.src_desc[0], &d.src_desc[1], &d.dst_desc});
  c.require(DNNL_ARG_SRC_1);
  return dnnl_binary_desc_init(&f, d.alg_kind, &d.src_desc[0], &d.src_desc[1], &d.dst_desc);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_matmul_desc_t& d, dnnl_matmul_desc_t& f) {
  c.mds({&d.src_desc, &d.weights_desc, &d.bias_desc, &d.dst_desc});
  c.rank(d.src_desc, 2, DNNL_MAX_NDIMS);
  c.same_rank({&d.src_desc, &d.weights_desc, &d.dst_desc});
  c.need(d.bias_desc.ndims == 0 || d.bias_desc.ndims == d.src_desc.ndims);
  c.with_bias(d.bias_desc);
  return dnnl_matmul_desc_init(&f, &d.src_desc, &d.weights_desc, &d.bias_desc, &d.dst_desc);
}

dnnl_status_t reinit(DescCheck& c, const dnnl_reduction_desc_t& d, dnnl_reduction_desc_t& f) {
  c.mds({&d.src_desc, &d.dst_desc});
  c.need(one_of(raw(d.alg_kind), {dnnl_reduction_mean, dnnl_reduction_sum, dnnl_reduction_max}));
  c.rank(d.src_desc, 1, DNNL_MAX_NDIMS);
  c.same_rank({&d.src_desc, &d.dst_desc});
  return dnnl_reduction_desc_init(&f, d.alg_kind, &d.src_desc, &d.dst_desc, d.p, d.eps);
}

// LSTM (lowering_rnn.cpp: peepholes optional, no projection), GRU (either
// kind) and vanilla RNN, one layer, time-major; every state the descriptor
// names is an argument the step must give.
dnnl_status_t reinit(DescCheck& c, const dnnl_rnn_desc_t& d, dnnl_rnn_desc_t& f) {
  c.mds({&d.src_layer_desc, &d.src_iter_desc, &d.src_iter_c_desc, &d.weights_layer_desc,
         &d.weights_iter_desc, &d.bias_desc, &d.dst_layer_desc, &d.dst_iter_desc,
         &d.dst_iter_c_desc, &d.weights_peephole_desc, &d.weights_projection_desc});
  c.inference(d);
  const bool lstm = raw(d.cell_kind) == dnnl_vanilla_lstm;
  const bool gru = raw(d.cell_kind) == dnnl_vanilla_gru, lbr = raw(d.cell_kind) == dnnl_lbr_gru;
  c.need(lstm || gru || lbr || raw(d.cell_kind) == dnnl_vanilla_rnn);
  c.need(one_of(raw(d.direction), {dnnl_unidirectional_left2right, dnnl_unidirectional_right2left,
                                   dnnl_bidirectional_concat}));
  c.need(d.flags == 0 && d.alpha == 0.f && d.beta == 0.f);
  c.need(lstm || gru || lbr ? raw(d.activation_kind) == dnnl_alg_kind_undef
                           : one_of(raw(d.activation_kind),
                                    {dnnl_eltwise_tanh, dnnl_eltwise_relu, dnnl_eltwise_logistic}));
  c.rank(d.src_layer_desc, 3, 3);
  c.rank(d.dst_layer_desc, 3, 3);
  c.rank(d.weights_layer_desc, 5, 5);
  c.rank(d.weights_iter_desc, 5, 5);
  c.rank(d.bias_desc, 4, 4);
  c.need(d.weights_projection_desc.ndims == 0);
  for (const dnnl_memory_desc_t* m : {&d.src_iter_desc, &d.src_iter_c_desc, &d.dst_iter_desc,
                                      &d.dst_iter_c_desc, &d.weights_peephole_desc})
    c.need(m->ndims == 0 || m->ndims == 4);
  if (!lstm)
    c.need(d.src_iter_c_desc.ndims == 0 && d.dst_iter_c_desc.ndims == 0 &&
           d.weights_peephole_desc.ndims == 0);
  for (int arg : {DNNL_ARG_WEIGHTS_LAYER, DNNL_ARG_WEIGHTS_ITER, DNNL_ARG_BIAS}) c.require(arg);
  const std::pair<const dnnl_memory_desc_t*, int> optional[] = {
      {&d.src_iter_desc, DNNL_ARG_SRC_ITER},
      {&d.src_iter_c_desc, DNNL_ARG_SRC_ITER_C},
      {&d.dst_iter_desc, DNNL_ARG_DST_ITER},
      {&d.dst_iter_c_desc, DNNL_ARG_DST_ITER_C},
      {&d.weights_peephole_desc, DNNL_ARG_WEIGHTS_PEEPHOLE}};
  for (auto [m, arg] : optional)
    if (m->ndims > 0) c.require(arg);
  if (lstm)
    return dnnl_lstm_forward_desc_init_v3(
        &f, d.prop_kind, d.direction, &d.src_layer_desc, &d.src_iter_desc, &d.src_iter_c_desc,
        &d.weights_layer_desc, &d.weights_iter_desc, &d.weights_peephole_desc,
        &d.weights_projection_desc, &d.bias_desc, &d.dst_layer_desc, &d.dst_iter_desc,
        &d.dst_iter_c_desc, d.flags);
  if (gru || lbr)
    return (gru ? dnnl_gru_forward_desc_init : dnnl_lbr_gru_forward_desc_init)(
        &f, d.prop_kind, d.direction, &d.src_layer_desc, &d.src_iter_desc, &d.weights_layer_desc,
        &d.weights_iter_desc, &d.bias_desc, &d.dst_layer_desc, &d.dst_iter_desc, d.flags);
  return dnnl_vanilla_rnn_forward_desc_init(
      &f, d.prop_kind, d.activation_kind, d.direction, &d.src_layer_desc, &d.src_iter_desc,
      &d.weights_layer_desc, &d.weights_iter_desc, &d.bias_desc, &d.dst_layer_desc,
      &d.dst_iter_desc, d.flags, d.alpha, d.beta);
}

// reinit() on the bytes of `op` as descriptor type D, in place.
template <class D>
dnnl_status_t reinit_as(DescCheck& c, std::vector<uint8_t>& op) {
  D recorded;
  std::memcpy(&recorded, op.data(), sizeof recorded);
  D fresh{};
  const dnnl_status_t st = reinit(c, recorded, fresh);
  std::memcpy(op.data(), &fresh, sizeof fresh);
  return st;
}

// Each primitive kind the lowering makes with an operation descriptor.
struct OpKind {
  dnnl_primitive_kind_t kind;
  size_t size;
  dnnl_status_t (*reinit)(DescCheck&, std::vector<uint8_t>&);
};
template <class D>
constexpr OpKind op_kind(dnnl_primitive_kind_t kind) {
  return {kind, sizeof(D), &reinit_as<D>};
}
constexpr OpKind kOpKinds[] = {
    op_kind<dnnl_convolution_desc_t>(dnnl_convolution),
    op_kind<dnnl_convolution_desc_t>(dnnl_deconvolution),
    op_kind<dnnl_eltwise_desc_t>(dnnl_eltwise),
    op_kind<dnnl_softmax_desc_t>(dnnl_softmax),
    op_kind<dnnl_pooling_v2_desc_t>(dnnl_pooling_v2),
    op_kind<dnnl_batch_normalization_desc_t>(dnnl_batch_normalization),
    op_kind<dnnl_layer_normalization_desc_t>(dnnl_layer_normalization),
    op_kind<dnnl_inner_product_desc_t>(dnnl_inner_product),
    op_kind<dnnl_binary_desc_t>(dnnl_binary),
    op_kind<dnnl_matmul_desc_t>(dnnl_matmul),
    op_kind<dnnl_reduction_desc_t>(dnnl_reduction),
    op_kind<dnnl_prelu_desc_t>(dnnl_prelu),
    op_kind<dnnl_resampling_desc_t>(dnnl_resampling),
    op_kind<dnnl_rnn_desc_t>(dnnl_rnn)};

const OpKind* find_op_kind(int64_t kind) {
  for (const OpKind& k : kOpKinds)
    if (k.kind == kind) return &k;
  return nullptr;
}
size_t op_desc_size(dnnl_primitive_kind_t kind) {
  const OpKind* k = find_op_kind(kind);
  return k ? k->size : 0;
}

// The operation descriptor made again by oneDNN's public initializer from
// the recorded parameters, in place: the initializer checks that shapes,
// strides and padding agree, which creating a primitive from raw bytes would
// not; the primitive is then made from what it returned.
// Returns the arguments the primitive will read or write.
std::vector<int> reinit_op_desc(Reader& r, dnnl_primitive_kind_t kind, std::vector<uint8_t>& op,
                                const std::string& what) {
  const OpKind* k = find_op_kind(kind);
  if (!k) r.fail("names an unknown primitive kind " + std::to_string(static_cast<int>(kind)));
  DescCheck c(r, what);
  if (k->reinit(c, op) != dnnl_success) r.fail("has an operation oneDNN rejects for " + what);
  return c.required();
}

// Owns a C primitive descriptor until the primitive is made from it.
struct PdHolder {
  dnnl_primitive_desc_t pd = nullptr;
  ~PdHolder() { dnnl_primitive_desc_destroy(pd); }
};

// How to create one step's primitive, as read from the payload.
struct Recipe {
  dnnl_primitive_kind_t kind{};
  dnnl::memory::desc src, dst;           // reorder, concat (dst)
  std::vector<dnnl::memory::desc> srcs;  // concat
  std::vector<uint8_t> op;               // everything else: the operation descriptor
  dnnl::primitive_attr attr;
  std::vector<int> required;  // the arguments the primitive reads or writes
  bool copy = false;          // a CopyConcat, ConcatNorm or Gather step: no primitive
};

void read_args(Reader& r, Step& step) {
  const size_t nargs = r.count("arguments", 8);
  for (size_t i = 0; i < nargs; ++i) {
    const int32_t arg = r.pod<int32_t>("argument");
    const int32_t ref = r.pod<int32_t>("argument reference");
    step.args.push_back({arg, ref});
  }
}

// Reads one step: its Step fields, and the recipe of its primitive.
Recipe read_step(Reader& r, Step& step) {
  Recipe rc;
  const int32_t kind = r.pod<int32_t>("primitive kind");
  step.what = r.str("step name");
  if (kind == kCopyConcatKind || kind == kConcatNormKind) {
    rc.copy = true;
    const int32_t axis = r.pod<int32_t>("concat axis");
    if (kind == kConcatNormKind) {
      const uint8_t relu = r.pod<uint8_t>("concat relu");
      if (relu > 1 || axis != 1) r.fail("has a bad concat in " + step.what);
      step.op = steps::ConcatNorm{relu == 1};
    } else {
      step.op = steps::CopyConcat{axis};
    }
    read_args(r, step);
    return rc;  // its arguments are checked by check_copy_concat
  }
  if (kind == kGatherKind) {
    rc.copy = true;
    const int32_t axis = r.pod<int32_t>("gather axis");
    step.op = steps::Gather{axis, r.pod<int32_t>("index size")};
    read_args(r, step);
    return rc;  // its arguments are checked by check_gather
  }
  if (kind == kEltwiseKind) {
    rc.copy = true;
    const auto fn = r.pod<int32_t>("elementwise function");
    if (fn < steps::Eltwise::kLinear || fn > steps::Eltwise::kErf)
      r.fail("names an unknown elementwise function " + std::to_string(fn));
    steps::Eltwise e;
    e.fn = static_cast<steps::Eltwise::Fn>(fn);
    e.alpha = r.pod<float>("elementwise alpha");
    e.beta = r.pod<float>("elementwise beta");
    step.op = e;
    read_args(r, step);
    return rc;  // checked by check_loop
  }
  if (kind == kFakeQuantizeKind || kind == kQuantizeKind) {
    rc.copy = true;
    steps::Quantize q;
    q.scale = r.pod<float>("quantization scale");
    q.lo = r.pod<float>("quantization low");
    q.hi = r.pod<float>("quantization high");
    if (kind == kQuantizeKind) q.zero = r.pod<float>("quantization zero point");
    step.op = q;
    read_args(r, step);
    return rc;  // checked by check_loop
  }
  if (kind != dnnl_reorder && kind != dnnl_concat && !find_op_kind(kind))
    r.fail("names an unknown primitive kind " + std::to_string(kind));
  const uint8_t beside = r.pod<uint8_t>("beside flag");
  if (beside > 1) r.fail("has a bad beside flag in " + step.what);
  step.beside_next = beside == 1;
  rc.kind = static_cast<dnnl_primitive_kind_t>(kind);
  if (rc.kind == dnnl_reorder) {
    rc.src = read_md(r, "reorder source");
    rc.dst = read_md(r, "reorder destination");
    rc.required = {DNNL_ARG_SRC, DNNL_ARG_DST};
  } else if (rc.kind == dnnl_concat) {
    step.op = steps::Primitive{r.pod<int32_t>("concat axis")};
    const size_t n = r.count("concat inputs", sizeof(dnnl_memory_desc_t));
    for (size_t i = 0; i < n; ++i) rc.srcs.push_back(read_md(r, "concat input"));
    rc.dst = read_md(r, "concat destination");
    for (size_t i = 0; i < n; ++i)
      rc.required.push_back(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i));
    rc.required.push_back(DNNL_ARG_DST);
    if (n == 0 || step.concat_axis() < 0 || step.concat_axis() >= rc.dst.data.ndims)
      r.fail("has a bad concat in " + step.what);
  } else {
    const size_t size = op_desc_size(rc.kind);
    if (size == 0)
      r.fail("names an unknown primitive kind " + std::to_string(static_cast<int>(rc.kind)));
    if (r.pod<uint32_t>("descriptor size") != size)
      r.fail("has a descriptor of the wrong size for " + step.what);
    const auto* p = static_cast<const uint8_t*>(r.take(size, "operation descriptor"));
    rc.op.assign(p, p + size);
    int32_t recorded = 0;  // every op descriptor starts with its kind
    std::memcpy(&recorded, rc.op.data(), sizeof recorded);
    if (recorded != kind) r.fail("has a descriptor of another kind for " + step.what);
    rc.required = reinit_op_desc(r, rc.kind, rc.op, step.what);
  }
  const int32_t mode = r.pod<int32_t>("scratchpad mode");
  if (mode != dnnl_scratchpad_mode_user && mode != dnnl_scratchpad_mode_library)
    r.fail("has a bad scratchpad mode");
  rc.attr.set_scratchpad_mode(static_cast<dnnl::scratchpad_mode>(mode));
  const size_t len = r.count("post-ops", sizeof(PostOpRecord));
  if (len > 0) {
    dnnl::post_ops po;
    for (size_t i = 0; i < len; ++i) {
      const PostOpRecord rec = r.pod<PostOpRecord>("post-op");
      if (!rec.sum && !eltwise_alg(rec.alg))
        r.fail("has a post-op of unknown algorithm in " + step.what);
      if (rec.sum) po.append_sum(rec.scale);
      else po.append_eltwise(rec.scale, static_cast<dnnl::algorithm>(rec.alg), rec.alpha, rec.beta);
    }
    rc.attr.set_post_ops(po);
  }
  // Scales per index along the dims of `mask` (a reorder's only; oneDNN
  // reads as many as those dims hold, so the count must be that).
  const int32_t mask = r.pod<int32_t>("scale mask");
  const size_t count = r.count("scales", sizeof(float));
  std::vector<float> scales(count);
  for (float& f : scales) f = r.pod<float>("scale");
  int64_t want = 1;
  const dnnl_memory_desc_t& src = rc.src.data;
  for (int i = 0; i < DNNL_MAX_NDIMS; ++i)
    if ((mask >> i) & 1) want *= i < src.ndims ? src.dims[i] : 0;
  const bool defaults = mask == 0 && count == 1 && scales[0] == 1.f;
  if (mask < 0 || mask >= (1 << DNNL_MAX_NDIMS) || static_cast<int64_t>(count) != want ||
      (rc.kind != dnnl_reorder && !defaults))
    r.fail("has scales that do not match their step in " + step.what);
  if (!defaults) rc.attr.set_output_scales(mask, scales);
  const int32_t zero_point = r.pod<int32_t>("zero point");
  if (zero_point != 0) {
    if (rc.kind != dnnl_reorder) r.fail("has a zero point in " + step.what);
    rc.attr.set_zero_points(DNNL_ARG_SRC, 0, {zero_point});
  }
  read_args(r, step);
  return rc;
}

// Creates the primitive of `step` for `threads` (creation picks its blocking
// for the OpenMP thread count of the calling thread, as at compile).
dnnl::primitive create(const Recipe& rc, const Step& step, int threads) {
  if (rc.copy) return {};
  const ScopedOmpThreads omp(threads);
  try {
    if (rc.kind == dnnl_reorder)
      return dnnl::reorder(
          dnnl::reorder::primitive_desc(engine(), rc.src, engine(), rc.dst, rc.attr));
    if (rc.kind == dnnl_concat)
      return dnnl::concat(
          dnnl::concat::primitive_desc(rc.dst, step.concat_axis(), rc.srcs, engine(), rc.attr));
    PdHolder h;
    const dnnl_status_t st =
        dnnl_primitive_desc_create(&h.pd, rc.op.data(), rc.attr.get(), engine().get(), nullptr);
    if (st != dnnl_success) throw dnnl::error(st, "no implementation");
    return dnnl::primitive(h.pd);
  } catch (const dnnl::error& e) {
    throw sdk::Error(BP_STATUS_VERSION_MISMATCH, "oneDNN " + library_id() + " cannot create " +
                                                     step.what + " from the payload: " + e.what());
  }
}

// Runs task(0..n-1) on this thread and, for more than a few tasks, one more:
// creating primitives (JIT code generation) and verifying the checksums of
// the weights being mapped are what loading a payload costs, and both are
// thread-safe. The first failure (in task order) is rethrown.
template <class Task>
void run_tasks(size_t n, const Task& task) {
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(n);
  auto work = [&] {
    for (size_t t; (t = next.fetch_add(1)) < n;) {
      try {
        task(t);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    }
  };
  const bool helper = n > 8 && std::thread::hardware_concurrency() > 1;
  std::thread other;
  if (helper) other = std::thread(work);
  work();
  if (helper) other.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

// ---------------------------------------------------------------------------
// Compiled partition -> payload
// ---------------------------------------------------------------------------

void Compiled::serialize(bp_blob_store_t* store, bp_byte_writer_t* writer) {
  if (empty)
    throw sdk::Error(BP_STATUS_INTERNAL, "CpuOneDnn: a rejected partition cannot be serialized");
  if (scratch_first)  // (a derived instance: never a partition of its own)
    throw sdk::Error(BP_STATUS_INTERNAL, "CpuOneDnn: a derived instance cannot be serialized");
  if (int8)
    throw sdk::unsupported("CpuOneDnn partition '" + name +
                           "' runs int8 steps, which its payload format does not hold yet");
  Writer w;
  w.raw(kMagic, sizeof kMagic);
  w.pod(kFormatVersion);
  w.pod(kEndianMark);
  w.str(library_id());
  w.pod(static_cast<int32_t>(dnnl_get_effective_cpu_isa()));
  w.pod(static_cast<uint32_t>(sizeof(dnnl_memory_desc_t)));
  w.pod(static_cast<uint64_t>(arena_bytes));
  w.pod(static_cast<uint64_t>(scratch_bytes));
  for (const auto* list : {&input_bytes, &output_bytes}) {
    w.pod(static_cast<uint32_t>(list->size()));
    for (size_t b : *list) w.pod(static_cast<uint64_t>(b));
  }
  w.pod(static_cast<uint32_t>(buffers.size()));
  for (const Buffer& b : buffers) {
    w.pod(static_cast<uint8_t>(b.kind));
    w.pod(static_cast<uint64_t>(b.index));
    w.pod(static_cast<uint64_t>(b.size));
    w.pod(static_cast<uint64_t>(b.offset));
  }
  // Constants: one blob per distinct buffer (aliases share it), already in
  // the primitive's layout.
  std::map<const void*, std::string> keys;
  w.pod(static_cast<uint32_t>(refs.size()));
  for (size_t i = 0; i < refs.size(); ++i) {
    const MemRef& r = refs[i];
    w.pod(static_cast<int32_t>(r.buffer));
    w.pod(static_cast<uint8_t>((r.scratch ? 1 : 0) | (r.constant ? 2 : 0)));
    w.pod(r.md->data);
    if (!r.constant) continue;
    const void* data = r.constant.get_data_handle();
    auto [it, fresh] = keys.emplace(data, name + "/c" + std::to_string(i));
    if (fresh)
      host_.blob_add(store, "CpuOneDnn/" + it->second, data, r.constant.get_desc().get_size(),
                     kAlign);
    w.str(it->second);
  }
  w.pod(static_cast<uint32_t>(steps.size()));
  for (const Step& s : steps) write_step(w, s);
  host_.append(writer, w.bytes().data(), w.bytes().size());
}

void PolyCompiled::serialize(bp_blob_store_t* /*store*/, bp_byte_writer_t* writer) {
  Writer w;
  w.raw(kPolyMagic, sizeof kPolyMagic);
  w.pod(kFormatVersion);
  w.pod(kEndianMark);
  host().append(writer, w.bytes().data(), w.bytes().size());
}

// ---------------------------------------------------------------------------
// Payload -> compiled partition
// ---------------------------------------------------------------------------

namespace {

// The header: what wrote the payload, which must be this build on this CPU.
void read_header(Reader& r, const std::string& where) {
  const auto* magic = static_cast<const char*>(r.take(sizeof kMagic, "the header"));
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) r.fail("is not a CpuOneDnn payload");
  const uint32_t version = r.pod<uint32_t>("format version");
  if (version != kFormatVersion)
    throw sdk::Error(BP_STATUS_VERSION_MISMATCH,
                     where + ": payload format " + std::to_string(version) +
                         ", this build reads format " + std::to_string(kFormatVersion));
  if (r.pod<uint32_t>("byte order") != kEndianMark)
    throw sdk::Error(BP_STATUS_VERSION_MISMATCH,
                     where + ": payload written on a machine of the other byte order");
  const std::string lib = r.str("library version");
  const auto isa = r.pod<int32_t>("CPU ISA");
  const auto md_size = r.pod<uint32_t>("descriptor size");
  if (lib != library_id() || isa != static_cast<int32_t>(dnnl_get_effective_cpu_isa()) ||
      md_size != sizeof(dnnl_memory_desc_t))
    throw sdk::Error(BP_STATUS_VERSION_MISMATCH,
                     where + ": payload made by oneDNN " + lib + " for " + isa_name(isa) +
                         " CPUs; this is oneDNN " + library_id() + " on " +
                         isa_name(static_cast<int32_t>(dnnl_get_effective_cpu_isa())));
}

// The arena and scratchpad sizes and the interface, which must be the view's.
void read_sizes(Reader& r, const bp_graph_view_t& view, Compiled& c) {
  c.arena_bytes = r.pod<uint64_t>("arena size");
  c.scratch_bytes = r.pod<uint64_t>("scratchpad size");
  for (auto* list : {&c.input_bytes, &c.output_bytes}) {
    const size_t n = r.count("tensors", 8);
    for (size_t i = 0; i < n; ++i) list->push_back(r.pod<uint64_t>("tensor size"));
  }
  auto expect_bytes = [&](const std::vector<size_t>& got, size_t n, const int32_t* ids,
                          const char* what) {
    if (got.size() != n)
      r.fail(std::string("has ") + std::to_string(got.size()) + " " + what + ", the view " +
             std::to_string(n));
    for (size_t k = 0; k < n; ++k) {
      // Inputs may be integers nothing reads as data (a Reshape's target);
      // outputs are float32 or quantized.
      const bp_value_t& v = view.values[ids[k]];
      const bool data = v.dtype == BP_DTYPE_FLOAT32 || v.dtype == BP_DTYPE_UINT8 ||
                        v.dtype == BP_DTYPE_INT8;
      if ((ids == view.outputs && !data) || got[k] != sdk::byte_size(v))
        r.fail(std::string("does not match ") + what + " '" + v.name + "' of the view");
    }
  };
  expect_bytes(c.input_bytes, view.num_inputs, view.inputs, "inputs");
  expect_bytes(c.output_bytes, view.num_outputs, view.outputs, "outputs");
}

void read_buffers(Reader& r, Compiled& c) {
  const size_t nbuf = r.count("buffers", 25);
  for (size_t i = 0; i < nbuf; ++i) {
    Buffer b;
    const uint8_t kind = r.pod<uint8_t>("buffer kind");
    b.index = r.pod<uint64_t>("buffer index");
    b.size = r.pod<uint64_t>("buffer size");
    b.offset = r.pod<uint64_t>("buffer offset");
    if (kind > Buffer::kOutput) r.fail("has a bad buffer kind");
    b.kind = static_cast<Buffer::Kind>(kind);
    const bool fits =
        b.kind == Buffer::kArena
            ? b.offset <= c.arena_bytes && b.size <= c.arena_bytes - b.offset
            : b.index < (b.kind == Buffer::kInput ? c.input_bytes : c.output_bytes).size() &&
                  b.size == (b.kind == Buffer::kInput ? c.input_bytes : c.output_bytes)[b.index];
    if (!fits) r.fail("has buffer " + std::to_string(i) + " outside the arena or the tensors");
    c.buffers.push_back(b);
  }
}

// The blobs the constants of a payload name: each distinct key once, and per
// memory reference the index of its key (SIZE_MAX: not a constant).
struct ConstantKeys {
  std::vector<std::string> keys;
  std::vector<size_t> of_ref;
};

// The bytes from its memory's start that a checked descriptor can address:
// its size, or for a window (an offset, strides wider than its dims) the
// farthest element's end.
size_t touched_bytes(const dnnl::memory::desc& m) {
  const dnnl_memory_desc_t& md = m.data;
  if (md.ndims == 0 || md.format_kind != dnnl_blocked) return m.get_size();
  const dnnl_blocking_desc_t& b = md.format_desc.blocking;
  int64_t blk[DNNL_MAX_NDIMS], inner = 1;
  for (int i = 0; i < DNNL_MAX_NDIMS; ++i) blk[i] = 1;
  for (int i = 0; i < b.inner_nblks; ++i) {
    blk[b.inner_idxs[i]] *= b.inner_blks[i];
    inner *= b.inner_blks[i];
  }
  int64_t farthest = inner - 1;
  for (int i = 0; i < md.ndims; ++i) {
    if (md.padded_dims[i] == 0) return m.get_size();
    farthest += b.strides[i] * (md.padded_dims[i] / blk[i] - 1);
  }
  const size_t elem = md.data_type == dnnl_u8 || md.data_type == dnnl_s8 ? 1 : sizeof(float);
  return std::max(m.get_size(), static_cast<size_t>(md.offset0 + farthest + 1) * elem);
}

ConstantKeys read_refs(Reader& r, Compiled& c) {
  ConstantKeys k;
  std::map<std::string, size_t> key_index;  // key -> index in k.keys
  const size_t nrefs = r.count("memory references", 5 + sizeof(dnnl_memory_desc_t));
  for (size_t i = 0; i < nrefs; ++i) {
    MemRef m;
    m.buffer = r.pod<int32_t>("reference buffer");
    const uint8_t flags = r.pod<uint8_t>("reference flags");
    m.md = read_md(r, "memory reference");
    m.scratch = (flags & 1) != 0;
    const size_t bytes = touched_bytes(m.md);
    k.of_ref.push_back(SIZE_MAX);
    if (flags & 2) {
      const std::string key = r.str("constant key");
      auto [it, fresh] = key_index.emplace(key, k.keys.size());
      if (fresh) k.keys.push_back(key);
      k.of_ref.back() = it->second;
      m.buffer = -1;
    } else if (m.scratch) {
      if (bytes > c.scratch_bytes) r.fail("has a scratchpad larger than planned");
      m.buffer = -1;
    } else {
      if (m.buffer < 0 || static_cast<size_t>(m.buffer) >= c.buffers.size())
        r.fail("has a reference to no buffer");
      // Every reference stays inside its buffer, an arena one too: whether
      // two references may share bytes is decided from their buffers alone
      // (may_overlap), which holds only if no reference reaches past its
      // own (and a buffer stays inside the arena, read_buffers). A fuzzed
      // payload once gave a gather's destination a larger
      // view than its buffer, over the buffer of its indices.
      if (bytes > c.buffers[m.buffer].size)
        r.fail("has a reference larger than its " +
               std::string(c.buffers[m.buffer].kind == Buffer::kArena ? "buffer" : "tensor"));
    }
    c.refs.push_back(std::move(m));
  }
  return k;
}

// Sizes the plan asks to allocate are the ones its memory needs: every
// arena buffer no larger than what refers to it, the arena no larger than
// its buffers side by side, the scratchpad the largest step's.
void check_sizes(Reader& r, const Compiled& c) {
  std::vector<size_t> used(c.buffers.size(), 0);
  size_t scratch = 0;
  for (const MemRef& m : c.refs) {
    if (m.scratch) scratch = std::max(scratch, m.md->get_size());
    else if (m.buffer >= 0) used[m.buffer] = std::max(used[m.buffer], touched_bytes(m.md));
  }
  unsigned __int128 side_by_side = 0;
  for (size_t b = 0; b < c.buffers.size(); ++b) {
    if (c.buffers[b].kind != Buffer::kArena) continue;
    if (c.buffers[b].size > used[b]) r.fail("has an arena buffer larger than what uses it");
    side_by_side += align_up(std::max<size_t>(c.buffers[b].size, 1));
  }
  if (c.arena_bytes > side_by_side || c.scratch_bytes != scratch)
    r.fail("has an arena or scratchpad size its plan does not need");
}

std::vector<Recipe> read_steps(Reader& r, Compiled& c) {
  const size_t nsteps = r.count("steps", 16);
  std::vector<Recipe> recipes;
  for (size_t s = 0; s < nsteps; ++s) {
    Step step;
    recipes.push_back(read_step(r, step));
    for (auto [arg, ref] : step.args)
      if (ref < 0 || static_cast<size_t>(ref) >= c.refs.size())
        r.fail("has an argument of " + step.what + " out of range");
    c.steps.push_back(std::move(step));
  }
  // Two steps side by side are two primitives, neither beside a third.
  for (size_t s = 0; s < c.steps.size(); ++s)
    if (c.steps[s].beside_next &&
        (s + 1 == c.steps.size() || recipes[s + 1].copy || c.steps[s + 1].beside_next ||
         (s > 0 && c.steps[s - 1].beside_next)))
      r.fail("has " + c.steps[s].what + " beside a step it cannot run beside");
  if (!r.done()) r.fail("has bytes after its end");
  return recipes;
}

// Every constant over its blob in the artifact's mapping.
void bind_constants(Reader& r, Compiled& c, const ConstantKeys& k) {
  for (size_t i = 0; i < c.refs.size(); ++i) {
    if (k.of_ref[i] == SIZE_MAX) continue;
    MemRef& m = c.refs[i];
    const sdk::Weight& blob = c.mapped[k.of_ref[i]];
    if (blob.size() < m.md->get_size())
      r.fail("constant '" + k.keys[k.of_ref[i]] + "' has " + std::to_string(blob.size()) +
             " bytes, needs " + std::to_string(m.md->get_size()));
    // Read-only mapping: oneDNN only ever reads weights.
    m.constant = dnnl::memory(m.md, engine(), const_cast<void*>(blob.data()));
  }
}

// Every argument once; what a step writes is arena or output memory (never a
// weight in the read-only mapping, never the caller's input); the scratchpad
// is the scratchpad; every argument the primitive uses is given.
// A CopyConcat step copies each source, by its strides, into its window of
// the destination: every layout plain (strided, no blocks), the sources
// MULTIPLE_SRC 0..n-1 equal to the destination but along the axis, where
// they add up to it, so no copy reaches outside a reference's bytes.
// Whether two MemRefs may share bytes: the same input or output, or
// overlapping ranges of the arena. A step copied here (concat, gather) reads
// its sources while it writes its destination, so they must not.
bool may_overlap(const Compiled& c, int a, int b) {
  const MemRef &x = c.refs[a], &y = c.refs[b];
  if (x.buffer < 0 || y.buffer < 0) return false;  // a constant or the scratchpad
  if (x.buffer == y.buffer) return true;
  const Buffer &p = c.buffers[x.buffer], &q = c.buffers[y.buffer];
  if (p.kind != q.kind) return false;
  if (p.kind != Buffer::kArena) return p.index == q.index;
  return p.offset < q.offset + q.size && q.offset < p.offset + p.size;
}

// Whether reference `ref` starts where values of `bytes` may be read in
// place: the steps done here (CopyConcat, ConcatNorm, Gather) read floats
// and indices as such, not byte by byte. An arena buffer's offset comes from
// the payload (the plan builder aligns each at 64 bytes, a window inside one
// at whole elements; a fuzzed payload put one at an odd offset), a constant
// lies in its blob where the artifact put it. The caller's tensors are the
// caller's.
bool starts_aligned(const Compiled& c, int ref, size_t bytes) {
  const MemRef& m = c.refs[ref];
  if (m.buffer >= 0 && c.buffers[m.buffer].kind == Buffer::kArena)
    return c.buffers[m.buffer].offset % bytes == 0;
  if (m.constant) return reinterpret_cast<uintptr_t>(m.constant.get_data_handle()) % bytes == 0;
  return true;
}

void check_copy_concat(Reader& r, const Compiled& c, const Step& step) {
  const bool norm = step.as<steps::ConcatNorm>() != nullptr;
  auto plain = [](const dnnl::memory::desc& md) {
    return md.data.format_kind == dnnl_blocked && md.data.format_desc.blocking.inner_nblks == 0;
  };
  int dst = -1, scale = -1, shift = -1;
  std::vector<int> srcs;
  for (auto [arg, ref] : step.args) {
    if (arg == DNNL_ARG_DST && dst < 0) dst = ref;
    else if (arg == DNNL_ARG_MULTIPLE_SRC + static_cast<int>(srcs.size())) srcs.push_back(ref);
    else if (norm && arg == DNNL_ARG_SCALE && scale < 0) scale = ref;
    else if (norm && arg == DNNL_ARG_SHIFT && shift < 0) shift = ref;
    else r.fail("gives " + step.what + " an argument it cannot take");
  }
  if (dst < 0 || srcs.empty() || (norm && (scale < 0 || shift < 0)))
    r.fail("leaves an argument of " + step.what + " out");
  for (auto [arg, ref] : step.args)
    if (!starts_aligned(c, ref, sizeof(float)))
      r.fail("places an argument of " + step.what + " at a byte offset not of whole floats");
  const MemRef& out = c.refs[dst];
  if (out.constant || out.scratch || out.buffer < 0 || c.buffers[out.buffer].kind == Buffer::kInput)
    r.fail("gives " + step.what + " a destination it cannot write");
  const int rank = out.md->data.ndims;
  const int axis = step.concat_axis();
  if (!plain(out.md) || axis < 0 || axis >= rank) r.fail("has a bad concat in " + step.what);
  int64_t along = 0;
  for (int ref : srcs) {
    const MemRef& in = c.refs[ref];
    if (in.scratch || !plain(in.md) || in.md->data.ndims != rank || may_overlap(c, ref, dst))
      r.fail("has a bad concat in " + step.what);
    for (int d = 0; d < rank; ++d)
      if (d != axis && in.md->data.dims[d] != out.md->data.dims[d])
        r.fail("has a bad concat in " + step.what);
    along += in.md->data.dims[axis];
  }
  if (along != out.md->data.dims[axis]) r.fail("has a bad concat in " + step.what);
  if (!norm) return;
  // Normalized on the way: channels along axis 1, every layout dense
  // channels-last (the run's addressing), a float per channel in each of
  // the two constants.
  auto channels_last = [](const dnnl::memory::desc& md) {
    const dnnl::memory::dims d = md.dims();
    return md.data.data_type == dnnl_f32 && md == channels_last_md(Dims(d.begin(), d.end()));
  };
  if (axis != 1 || rank < 3 || rank > 5 || !channels_last(out.md))
    r.fail("has a bad concat in " + step.what);
  for (int ref : srcs)
    if (!channels_last(c.refs[ref].md)) r.fail("has a bad concat in " + step.what);
  for (int ref : {scale, shift}) {
    const MemRef& m = c.refs[ref];
    if (!m.constant || m.md != plain_md({out.md->data.dims[1]}))
      r.fail("has a bad concat in " + step.what);
  }
}

// A gather step reads rows of its plain float32 data (SRC_0) along its axis
// and writes them, one per index, into its plain float32 destination, whose
// size must be exactly that (the run checks every index against the axis);
// its indices (SRC_1) are int32 or int64, whole ones, never the scratchpad.
void check_gather(Reader& r, const Compiled& c, const Step& step) {
  const steps::Gather& gather = *step.as<steps::Gather>();
  auto plain_f32 = [](const dnnl::memory::desc& md) {
    return md.data.format_kind == dnnl_blocked && md.data.format_desc.blocking.inner_nblks == 0 &&
           md.data.data_type == dnnl_f32 && md.data.ndims > 0;
  };
  int data = -1, indices = -1, dst = -1;
  for (auto [arg, ref] : step.args) {
    int& slot = arg == DNNL_ARG_SRC_0   ? data
                : arg == DNNL_ARG_SRC_1 ? indices
                : arg == DNNL_ARG_DST
                    ? dst
                    : (r.fail("gives " + step.what + " an argument it cannot take"), data);
    if (slot >= 0) r.fail("gives " + step.what + " an argument twice");
    slot = ref;
  }
  if (data < 0 || indices < 0 || dst < 0) r.fail("leaves an argument of " + step.what + " out");
  if (!starts_aligned(c, data, sizeof(float)) || !starts_aligned(c, dst, sizeof(float)) ||
      ((gather.index_bytes == 4 || gather.index_bytes == 8) &&
       !starts_aligned(c, indices, size_t(gather.index_bytes))))
    r.fail("places an argument of " + step.what + " at a byte offset not of whole elements");
  const MemRef &x = c.refs[data], &idx = c.refs[indices], &y = c.refs[dst];
  if (y.constant || y.scratch || y.buffer < 0 || c.buffers[y.buffer].kind == Buffer::kInput)
    r.fail("gives " + step.what + " a destination it cannot write");
  if (x.scratch || idx.scratch || !plain_f32(x.md) || !plain_f32(y.md) ||
      may_overlap(c, data, dst) || may_overlap(c, indices, dst))
    r.fail("has a bad gather in " + step.what);
  const int rank = x.md->data.ndims, axis = gather.axis;
  if (axis < 0 || axis >= rank || (gather.index_bytes != 4 && gather.index_bytes != 8))
    r.fail("has a bad gather in " + step.what);
  // The data is dense row-major: rows are contiguous, as the run reads them.
  // Every product is checked: the run indexes the data as outer x axis x row
  // elements, which must not overflow (a fuzzed payload once made it wrap).
  int64_t stride = 1, rows = 1, count = 1;
  for (int d = rank; d-- > 0;) {
    const int64_t dim = x.md->data.dims[d];
    if (dim <= 0 || x.md->data.format_desc.blocking.strides[d] != stride ||
        __builtin_mul_overflow(stride, dim, &stride) ||
        (d != axis && __builtin_mul_overflow(rows, dim, &rows)))
      r.fail("has a bad gather in " + step.what);
  }
  if (stride > INT64_MAX / static_cast<int64_t>(sizeof(float)) ||
      x.md->get_size() != static_cast<size_t>(stride) * sizeof(float))
    r.fail("has a bad gather in " + step.what);
  const size_t index_bytes = idx.md->get_size();
  if (index_bytes == 0 || index_bytes % static_cast<size_t>(gather.index_bytes) != 0)
    r.fail("has a bad gather in " + step.what);
  count = static_cast<int64_t>(index_bytes / static_cast<size_t>(gather.index_bytes));
  if (rows > INT64_MAX / static_cast<int64_t>(sizeof(float)) / count ||
      y.md->get_size() != static_cast<size_t>(rows * count) * sizeof(float))
    r.fail("has a bad gather in " + step.what);
}

// A loop of one source and one destination (steps::Quantize, steps::Eltwise):
// SRC into DST, apart, every element once in one layout. A quantization has a
// scale, a range of whole numbers in it and a zero point that keeps it in the
// quantized type; float32 or 8-bit integers. An elementwise function is float32.
void check_loop(Reader& r, const Compiled& c, const Step& step) {
  int src = -1, dst = -1;
  for (auto [arg, ref] : step.args) {
    int& slot = arg == DNNL_ARG_SRC ? src
                : arg == DNNL_ARG_DST
                    ? dst
                    : (r.fail("gives " + step.what + " an argument it cannot take"), src);
    if (slot >= 0) r.fail("gives " + step.what + " an argument twice");
    slot = ref;
  }
  if (src < 0 || dst < 0) r.fail("leaves an argument of " + step.what + " out");
  const MemRef &x = c.refs[src], &y = c.refs[dst];
  if (y.constant || y.scratch || y.buffer < 0 || c.buffers[y.buffer].kind == Buffer::kInput)
    r.fail("gives " + step.what + " a destination it cannot write");
  using dt = dnnl::memory::data_type;
  const dt from = x.md->data_type(), to = y.md->data_type();
  const bool byte = from == dt::u8 || from == dt::s8 || to == dt::u8 || to == dt::s8;
  dnnl_memory_desc_t like = x.md->data;
  like.data_type = y.md->data.data_type;
  if (x.scratch || !(dnnl::memory::desc(like) == y.md.get()) || (byte && !is_dense(x.md.get())) ||
      x.md->data.offset0 != 0 || may_overlap(c, src, dst) ||
      !starts_aligned(c, src, byte ? 1 : 4) || !starts_aligned(c, dst, byte ? 1 : 4))
    r.fail("has a bad loop in " + step.what);
  const steps::Quantize* q = step.as<steps::Quantize>();
  if (q == nullptr) {
    if (from != dt::f32 || to != dt::f32) r.fail("has a bad loop in " + step.what);
    return;
  }
  const float qmin = from == dt::s8 || to == dt::s8 ? -128.f : 0.f;
  const bool whole = q->lo == std::nearbyint(q->lo) && q->hi == std::nearbyint(q->hi) &&
                     q->zero == std::nearbyint(q->zero);
  const bool types = (from == dt::f32 && to == dt::f32) ||
                     (from == dt::f32 && (to == dt::u8 || to == dt::s8)) ||
                     ((from == dt::u8 || from == dt::s8) && to == dt::f32);
  if (!types || !(q->scale > 0.f) || !std::isfinite(q->scale) || !whole ||
      !(q->lo <= 0.f && 0.f <= q->hi && q->hi - q->lo <= 255.f) ||
      (byte && !(q->lo + q->zero >= qmin && q->hi + q->zero <= qmin + 255.f)))
    r.fail("has a bad quantization in " + step.what);
}

// DNNL_ARG_DST is also an RNN's DST_LAYER; its states are written too.
bool writes(int arg) {
  return arg == DNNL_ARG_DST || arg == DNNL_ARG_DST_ITER || arg == DNNL_ARG_DST_ITER_C ||
         arg == DNNL_ARG_WORKSPACE || arg == DNNL_ARG_SCRATCHPAD;
}

// `own_scratch`: the second of two steps side by side, whose scratchpad is an
// arena buffer of its own (PlanBuilder::run_beside).
void check_arguments(Reader& r, const Compiled& c, const Step& step, const Recipe& recipe,
                     bool own_scratch) {
  if (step.as<steps::Gather>()) return check_gather(r, c, step);
  if (step.as<steps::Quantize>() || step.as<steps::Eltwise>()) return check_loop(r, c, step);
  if (recipe.copy) return check_copy_concat(r, c, step);
  std::set<int> given;
  for (auto [arg, ref] : step.args) {
    const MemRef& m = c.refs[ref];
    const bool arena = m.buffer >= 0 && c.buffers[m.buffer].kind == Buffer::kArena;
    const bool scratch_ok = arg != DNNL_ARG_SCRATCHPAD ? !m.scratch
                            : own_scratch              ? arena && !m.scratch
                                                       : m.scratch;
    const bool ok = given.insert(arg).second && scratch_ok &&
                    (!writes(arg) || m.scratch ||
                     (!m.constant && m.buffer >= 0 && c.buffers[m.buffer].kind != Buffer::kInput));
    if (!ok) r.fail("gives " + step.what + " an argument it cannot take");
  }
  for (int arg : recipe.required)
    if (!given.count(arg)) r.fail("leaves an argument of " + step.what + " out");
  const dnnl_memory_desc_t* sp =
      dnnl_primitive_desc_query_md(step.prim.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  if (sp != nullptr && dnnl::memory::desc(*sp).get_size() > 0 && !given.count(DNNL_ARG_SCRATCHPAD))
    r.fail("leaves the scratchpad of " + step.what + " out");
}

// Two steps side by side: neither writes what the other reads or writes.
void check_beside(Reader& r, const Compiled& c, size_t s) {
  const Step &a = c.steps[s], &b = c.steps[s + 1];
  for (auto [x, p] : a.args)
    for (auto [y, q] : b.args)
      if ((writes(x) || writes(y)) && may_overlap(c, p, q))
        r.fail("runs " + a.what + " beside " + b.what + ", which share memory");
}

// Each argument must be in the layout the primitive, as made now, wants.
void check_layouts(const Compiled& c, const Step& step, const std::string& where) {
  if (!step.as<steps::Primitive>()) return;  // check_copy_concat / check_gather took them
  const_dnnl_primitive_desc_t pd = step.prim.get_primitive_desc();
  for (auto [arg, ref] : step.args) {
    const dnnl_memory_desc_t* want =
        arg == DNNL_ARG_SCRATCHPAD ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0)
                                   : dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
    const MemRef& m = c.refs[ref];
    const size_t room = m.scratch ? c.scratch_bytes : m.md->get_size();  // (or its own buffer)
    const bool ok = arg == DNNL_ARG_SCRATCHPAD
                        ? want != nullptr && dnnl::memory::desc(*want).get_size() <= room
                        : want != nullptr && dnnl_memory_desc_equal(want, &m.md->data) != 0;
    if (!ok)
      throw sdk::Error(
          BP_STATUS_VERSION_MISMATCH,
          where + ": " + step.what + " now wants another memory layout than the payload planned");
  }
}

}  // namespace

std::unique_ptr<sdk::CompiledPartition> deserialize_partition(
    const sdk::Host& host, const bp_graph_view_t& view, const void* payload, size_t size,
    int num_threads, const Tuning& tuning, size_t max_instances, std::shared_ptr<WeightPool> pool) {
  const std::string where = std::string("CpuOneDnn partition '") + view.name + "'";
  Reader r(payload, size, where);
  if (size >= sizeof kPolyMagic && std::memcmp(payload, kPolyMagic, sizeof kPolyMagic) == 0) {
    r.take(sizeof kPolyMagic, "the header");
    const uint32_t version = r.pod<uint32_t>("format version");
    if (version != kFormatVersion)
      throw sdk::Error(BP_STATUS_VERSION_MISMATCH,
                       where + ": payload format " + std::to_string(version) +
                           ", this build reads format " + std::to_string(kFormatVersion));
    if (r.pod<uint32_t>("byte order") != kEndianMark)
      throw sdk::Error(BP_STATUS_VERSION_MISMATCH,
                       where + ": payload written on a machine of the other byte order");
    if (!r.done()) r.fail("has bytes after its end");
    // Nothing in it depends on the oneDNN build: the view is compiled again.
    return compile_polymorphic(host, view, num_threads, max_instances, tuning, std::move(pool));
  }
  read_header(r, where);
  auto c = std::make_unique<Compiled>(host);
  c->name = view.name;
  c->threads = threads_to_use(num_threads);
  c->tuning = tuning;
  read_sizes(r, view, *c);
  read_buffers(r, *c);
  const ConstantKeys keys = read_refs(r, *c);
  check_sizes(r, *c);
  const std::vector<Recipe> recipes = read_steps(r, *c);

  // The weights (from the mapping, checksums verified on first use) and the
  // primitives, side by side.
  const size_t nkeys = keys.keys.size();
  c->mapped.resize(nkeys);
  run_tasks(nkeys + c->steps.size(), [&](size_t t) {
    if (t < nkeys) c->mapped[t] = host.weight(view.weights, ("CpuOneDnn/" + keys.keys[t]).c_str());
    else c->steps[t - nkeys].prim = create(recipes[t - nkeys], c->steps[t - nkeys], c->threads);
  });
  bind_constants(r, *c, keys);
  for (size_t s = 0; s < c->steps.size(); ++s) {
    check_arguments(r, *c, c->steps[s], recipes[s], s > 0 && c->steps[s - 1].beside_next);
    check_layouts(*c, c->steps[s], where);
    if (c->steps[s].beside_next) check_beside(r, *c, s);
  }
  for (const Step& step : c->steps) {
    const char* impl = nullptr;
    if (step.prim &&
        dnnl_primitive_desc_query(step.prim.get_primitive_desc(), dnnl_query_impl_info_str, 0,
                                  &impl) == dnnl_success &&
        impl != nullptr && std::strncmp(impl, "gemm:", 5) == 0)
      make_sgemm_kernels();
  }
  return c;
}

}  // namespace backplane::onednn
