// compiled.hpp — what a compiled CpuOneDnn partition is, inside the backend.
//
// A partition lowers to a list of oneDNN primitives (Steps) over memory
// descriptions (MemRefs) that point into planned buffers: one arena per
// execution context, the caller's input/output tensors, the scratchpad, or a
// constant (weights in the layout the primitive prefers). compiler.cpp makes
// one from a graph view (lowering.cpp through plan_builder.cpp); payload.cpp
// writes it to an artifact and reads it back; compiled.cpp executes it.
#pragma once

#include <backplane/backend_sdk.hpp>

#include <dnnl.hpp>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace backplane::onednn {

inline constexpr size_t kAlign = 64;
inline size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The CPU engine, one per process.
const dnnl::engine& engine();

// `bytes` of memory, kAlign-aligned, for a partition's weights or a
// context's block; freed when the last holder lets go. From 2 MiB on it is
// pages of its own, 2 MiB-aligned, that the kernel is asked to back with
// transparent huge pages (madvise MADV_HUGEPAGE, where the system allows it):
// one fault then brings in 512 small pages' worth, and faults are what most
// of a large model's load spent (ResNet-50 at batch 4: about half its load).
std::shared_ptr<char> allocate_block(size_t bytes);

struct Buffer {
  enum Kind { kArena, kInput, kOutput } kind = kArena;
  size_t index = 0;  // kInput/kOutput: position in execute()'s arrays
  size_t size = 0;
  size_t offset = 0;               // kArena
  int first = INT_MAX, last = -1;  // steps using it (compile time only)
  // A source of a Concat done in place (PlanBuilder::concat_in_place): its
  // bytes are `in_parent` bytes into buffer `parent`'s, which plan_arena
  // places instead (compile time only; the artifact keeps the offset).
  int parent = -1;
  size_t in_parent = 0;
};

// A memory descriptor held by reference: oneDNN's is 696 bytes, a partition
// has a few per step, and the instances of a shape-polymorphic partition
// share most of theirs (SharedCache::intern). Read it as the descriptor
// (an implicit conversion) or through ->; assigning a descriptor holds a
// new copy.
class SharedMd {
 public:
  SharedMd();
  SharedMd(const dnnl::memory::desc& md)  // NOLINT(google-explicit-constructor): `r.md = d`
      : p_(std::make_shared<const dnnl::memory::desc>(md)) {}
  explicit SharedMd(std::shared_ptr<const dnnl::memory::desc> p) : p_(std::move(p)) {}
  operator const dnnl::memory::desc&() const { return *p_; }  // NOLINT: reads as the descriptor
  const dnnl::memory::desc& get() const { return *p_; }
  const dnnl::memory::desc* operator->() const { return p_.get(); }

 private:
  std::shared_ptr<const dnnl::memory::desc> p_;
};

struct MemRef {
  int buffer = -1;  // -1: a constant or the scratchpad
  SharedMd md;
  dnnl::memory constant;  // set for constants (owned by the partition, or over a mapped blob)
  std::shared_ptr<char> owned;  // the bytes `constant` is over, when the partition made them
  bool scratch = false;
};

// The most elements an element-wise function (Eltwise) or a QLinearAdd of a
// shape instance may have to be run by the backend's own loop rather than by
// a oneDNN kernel generated for its shape (Lowering::lower_eltwise,
// derive.hpp). A kernel costs about 0.1 ms and tens of kB per new shape,
// kept as long as its instance; up to here the loop's extra time per run is
// a few microseconds (exp, tanh and the logistic call libm per element).
// Softmax, LayerNormalization, a mean over rows and a broadcast binary
// operation are the backend's loops at any size, in parallel over blocks of
// rows.
inline constexpr int64_t kSmallInstanceOpElements = int64_t{1} << 16;

// What a step runs: a oneDNN primitive, or a loop of the backend's own.
namespace steps {
// Step::prim over Step::args. A oneDNN concat keeps its axis, which oneDNN
// cannot be asked for (the payload and concat_in_place need it); -1 for any
// other primitive.
struct Primitive {
  int concat_axis = -1;
};
// A Concat of plain (strided) tensors: its DNNL_ARG_MULTIPLE_SRC + i copied
// side by side along `axis` into its DNNL_ARG_DST. In instances of
// shape-polymorphic partitions, which would otherwise make a oneDNN concat
// for every cache length, and where oneDNN has only its reference concat for
// plain inputs.
struct CopyConcat {
  int axis = 0;
};
// A Concat along the channels and the BatchNormalization reading it, fused
// (Lowering::lower_concat_norm): every layout dense channels-last, and per
// output channel c dst = x * scale[c] + shift[c] (DNNL_ARG_SCALE /
// DNNL_ARG_SHIFT, constants), then max(0, .) if `relu`.
struct ConcatNorm {
  bool relu = false;
};
// A Gather by indices known only at run time (an embedding lookup: a
// constant table, token ids from the caller): oneDNN has no gather.
// DNNL_ARG_SRC_0 is the data (plain float32), DNNL_ARG_SRC_1 the indices
// (index_bytes each: int32 or int64, any rank; its md is their bytes),
// DNNL_ARG_DST the plain result, rows of the data along `axis` in index
// order. An index outside [-n, n) fails the run.
// With a `block` (ONNX Runtime's GatherBlockQuantized, ir/ops_nn.cpp), the
// data is a 4-bit table, uint8 [rows, width / 2] two values a byte (the
// lower bits first) gathered on axis 0, in blocks of `block` along the
// width, w = (q - zero) * scale: DNNL_ARG_SCALE float32 [rows, blocks],
// DNNL_ARG_ATTR_ZERO_POINTS uint8 [rows, ceil(blocks / 2)] packed as the
// values (8 when there is none); each gathered row is dequantized.
struct Gather {
  int axis = 0;
  int index_bytes = 0;
  int64_t block = 0;
};
// A Softmax over the innermost dim: DNNL_ARG_SRC and DNNL_ARG_DST dense
// row-major float32 of one shape. Only instances of a shape-polymorphic
// partition have it (Lowering::lower_softmax), never a payload.
struct RowSoftmax {};
// The mean of each row: DNNL_ARG_SRC dense row-major float32 [..., n],
// DNNL_ARG_DST float32 [..., 1]. Only instances of a shape-polymorphic
// partition have it (Lowering::lower_reduce).
struct RowMean {};
// LayerNormalization over the innermost dim: DNNL_ARG_SRC and DNNL_ARG_DST
// dense row-major float32 of one shape, DNNL_ARG_SCALE and DNNL_ARG_SHIFT
// constants of the innermost dim's size. Only instances of a
// shape-polymorphic partition have it (Lowering::lower_layer_norm).
struct RowLayerNorm {
  float eps = 1e-5f;
};
// DNNL_ARG_DST = fn(DNNL_ARG_SRC), both float32 of one shape and layout: a
// small one-input step in an instance of a shape-polymorphic partition (a
// decoder's padding mask, 1 - mask times -10000, whose length changes at
// every step; a LayerNormalization's square and square root that a QDQ model
// quantizes apart), as Lowering::lower_eltwise, or an Erf of any size, which
// oneDNN has only inside GELU (Lowering::lower_erf).
struct Eltwise {
  enum Fn : int32_t { kLinear, kSqrt, kPow, kAbs, kExp, kTanh, kLogistic, kRelu, kClip, kErf };
  Fn fn = kLinear;
  // kLinear: alpha * x + beta; kPow: alpha * x^beta; kRelu: alpha * x below
  // 0; kClip: x in [alpha, beta] (oneDNN's eltwise parameters).
  float alpha = 1, beta = 0;
};
// An elementwise Add, Sub, Mul, Div, Max or Min: DNNL_ARG_SRC_0 and
// DNNL_ARG_DST dense row-major float32 of the result's shape, DNNL_ARG_SRC_1
// dense row-major of the same rank, broadcast where its dim is 1. Only
// instances of a shape-polymorphic partition have it (Lowering::lower_binary).
struct SmallBinary {
  dnnl_alg_kind_t alg = dnnl_binary_add;
};
// ONNX DynamicQuantizeLinear of DNNL_ARG_SRC (dense float32, any shape): the
// range of its values (widened to include 0) gives the scale and the zero
// point; DNNL_ARG_DST gets the uint8 values, DNNL_ARG_DST_1 the zero point
// (int32, one), DNNL_ARG_DST_2 the scale times each of the DNNL_ARG_SCALE
// constants (float32): the runtime zero point and output scales of the int8
// matmul that follows (Lowering::lower_qdynamic).
struct DynamicQuantize {};
// A table lookup: DNNL_ARG_DST byte i = DNNL_ARG_WEIGHTS byte (DNNL_ARG_SRC
// byte i), over the bytes of DNNL_ARG_SRC (dense, one byte per element; DST
// in the same layout): an elementwise function of a quantized tensor
// (Lowering::lower_table).
struct Table {};
// A per-tensor QuantizeLinear, DequantizeLinear, or QuantizeLinear whose only
// reader is a DequantizeLinear of the same scale and zero point (a QDQ model's
// every activation between float operators), in one pass. With q =
// clamp(round_half_to_even(DNNL_ARG_SRC / scale), lo, hi), NaN giving 0, lo and
// hi the quantized type's range less the zero point, DNNL_ARG_DST is
//   float32 from float32: scale * q (Lowering::lower_fake_quantize);
//   uint8 or int8 from float32: q + zero (Lowering::lower_quant);
//   float32 from uint8 or int8: (SRC - zero) * scale (Lowering::lower_quant).
// DST in SRC's layout, any dims.
struct Quantize {
  float scale = 1, lo = 0, hi = 255, zero = 0;
};
// A MatMul of two activations in an instance of a shape-polymorphic
// partition (attention's q*k^T and probs*v, whose shapes change at every
// decoder step): DNNL_ARG_DST = alpha * DNNL_ARG_SRC x DNNL_ARG_WEIGHTS, all
// plain float32 of one rank with the same batch dims, each matrix row- or
// column-major (Lowering::lower_matmul_any_shape). Run through oneDNN's
// sgemm, one call per batch: it takes any dims, so an instance at a new
// cache length needs no oneDNN object made for it.
struct BatchGemm {
  float alpha = 1;
};
// ONNX Runtime's MatMulNBits (ir/ops_nn.cpp) with its weights kept 4-bit:
// DNNL_ARG_DST [..., n] = DNNL_ARG_SRC [..., k] x W (+ DNNL_ARG_BIAS [n]),
// both plain float32, W [k, n] of the 4-bit values DNNL_ARG_WEIGHTS holds
// (uint8 [n, blocks, block / 2], two a byte, the lower bits first) in blocks
// of `block` along k: w = (q - zero) * scale, DNNL_ARG_SCALE float32
// [n * blocks], DNNL_ARG_ATTR_ZERO_POINTS uint8 [n * ceil(blocks / 2)]
// packed as the values (8 when there is none). Any rows: oneDNN 2.6 has no
// matmul of grouped 4-bit weights, and the weights at 4 bits are what makes
// such a model fit in memory.
struct NBitsMatMul {
  int64_t k = 0, n = 0, block = 0;
};
}  // namespace steps

using StepOp = std::variant<steps::Primitive, steps::CopyConcat, steps::ConcatNorm, steps::Gather,
                            steps::RowSoftmax, steps::RowMean, steps::RowLayerNorm,
                            steps::SmallBinary, steps::DynamicQuantize, steps::Eltwise,
                            steps::Table, steps::Quantize, steps::BatchGemm, steps::NBitsMatMul>;

struct Step {
  dnnl::primitive prim;                   // steps::Primitive only
  std::vector<std::pair<int, int>> args;  // (DNNL_ARG_*, MemRef index)
  std::string what;                       // for error messages
  // The primitive's kind, oneDNN implementation (impl_info_str) and layouts,
  // for the plan report (impl_check.hpp); compile time only, not serialized.
  std::string kind, impl, layouts;
  StepOp op;
  // This step and the next run at the same time, each on one thread of the
  // team, when the plan has two or more (Binder::run; one after the other
  // otherwise): the two directions of a bidirectional recurrent layer.
  // Neither touches what the other writes; the second has its scratchpad in
  // an arena buffer of its own (PlanBuilder::run_beside).
  bool beside_next = false;

  template <class T>
  const T* as() const {
    return std::get_if<T>(&op);
  }
  // The axis a concatenation joins along (a oneDNN concat's, a CopyConcat's,
  // 1 for a ConcatNorm); -1 for any other step.
  int concat_axis() const;
  // What the step is, for a profile: the primitive's kind or the loop's.
  const char* kind_name() const;
};

// A plan's steps. The instances derived from one template (derive.hpp) have
// the same steps: they share one list, which is copied only if one of them
// is changed (a plan is changed only while it is built, by one thread).
class StepList {
 public:
  using const_iterator = std::vector<Step>::const_iterator;
  size_t size() const { return v_ ? v_->size() : 0; }
  bool empty() const { return size() == 0; }
  const Step& operator[](size_t i) const { return (*v_)[i]; }
  Step& operator[](size_t i) { return own()[i]; }
  const Step& back() const { return v_->back(); }
  Step& back() { return own().back(); }
  const_iterator begin() const { return list().begin(); }
  const_iterator end() const { return list().end(); }
  void push_back(Step s) { own().push_back(std::move(s)); }
  void reserve(size_t n) { own().reserve(n); }
  void shrink_to_fit() { own().shrink_to_fit(); }
  void erase_at(size_t i) { own().erase(own().begin() + static_cast<std::ptrdiff_t>(i)); }
  void clear() { v_.reset(); }

 private:
  const std::vector<Step>& list() const;
  std::vector<Step>& own();
  std::shared_ptr<std::vector<Step>> v_;
};

class Compiled;

// What the backend's `configure` sets for the partitions it compiles
// (backend.cpp; the keys are listed in docs/performance.md).
struct Tuning {
  // "layout": the convolutions' layout. kByModel ("auto"): blocked where the
  // model gains from it (compiler.cpp, blocked_pays); kOneDnn ("onednn"):
  // oneDNN's own choice; kBlocked ("blocked"): always blocked.
  enum class Layout { kByModel, kOneDnn, kBlocked } layout = Layout::kByModel;
  // "winograd" (on/off): blocked convolutions may use Winograd kernels.
  bool winograd = true;
  // "concat_in_place" (on/off): sources of a blocked Concat are written
  // where it would copy them (PlanBuilder::concat_in_place).
  bool concat_in_place = true;
  // "derive_instances" (on/off): an instance of a shape-polymorphic partition
  // at new shapes may be derived from a template rather than lowered
  // (derive.hpp).
  bool derive_instances = true;
  // "plan_report": a file each compiled plan's steps are appended to
  // (impl_check.hpp); "" for none.
  std::string plan_report;
};

// Sets the calling thread's OpenMP thread count (nthreads-var) while it
// lives and gives the caller's back after: oneDNN creates and runs its
// primitives for the count it finds there, and the application's own
// OpenMP regions on that thread keep theirs.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads);
  ~ScopedOmpThreads();
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int before_;
};

// Starts the calling thread's OpenMP team of `threads` (a context does, so
// that thread creation is not in the first run), without changing the
// thread's OpenMP settings. The team's threads are libgomp's; their
// affinity is the process's, never changed here.
void start_openmp_team(int threads);
// Releases the calling thread's OpenMP team (omp_pause_resource_all), as the
// backend does when it is destroyed, so that no worker it started outlives
// it. A team another thread started ends with that thread.
void end_openmp_team();

// oneDNN generates its sgemm kernels (behind every "gemm:*" implementation
// and a MatMul of two activations) at their first call in a process, not
// when a primitive is made: ~25 ms of code generation. A compile or load of
// a plan that uses them makes them there (once per process), so that the
// first run does not pay for it.
void make_sgemm_kernels();

// The bytes a context gives one plan: the arena, then the scratchpad.
size_t context_bytes(const Compiled& c);

// One plan made runnable over one block of context memory (context_bytes of
// it): a dnnl::memory per MemRef a primitive reads, the address of every
// MemRef and each primitive's argument array, made once so that run()
// allocates nothing. The Compiled must outlive it.
class Binder {
 public:
  Binder(const Compiled& c, char* memory);
  // The plan changed in place (InstanceTemplate::derive_into: descriptions,
  // buffer sizes and offsets; the steps and refs are the same) or its memory
  // moved: every address again, a new memory object where one no longer
  // fits, and the copy steps planned again.
  void rebind(char* memory);
  // Checks the tensors against the plan's sizes, sets their handles and runs every step on
  // `stream` (an OpenMP team of the plan's threads); `profiled` (API 1.6): each step timed.
  void run(dnnl::stream& stream, size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
           const bp_tensor_t* outputs, const sdk::ExecuteArgs* profiled = nullptr);
  ~Binder();

 private:
  struct Binding {
    size_t ref;
    bool input;
    size_t index;
  };
  // One source of a CopyConcat step: copied from argument `arg` of the
  // step to the destination, `offset` elements in; `rank` dims and strides
  // in elements, coalesced. (Arrays: a derived instance plans its copies
  // again at every new key, and that allocates nothing.)
  struct CopyPart {
    size_t arg;
    int64_t offset;
    size_t rank;
    int64_t dims[DNNL_MAX_NDIMS], src_strides[DNNL_MAX_NDIMS], dst_strides[DNNL_MAX_NDIMS];
  };
  // args_ and copies_ from mems_ and the plan's descriptions.
  void plan_steps();
  void plan_copy(size_t step);
  void run_copy(size_t step);
  // A ConcatNorm step: copies_ holds one part per source, `offset` its
  // first output channel, dims {pixels, its channels}.
  void plan_concat_norm(size_t step);
  struct RunStep;
  void run_step(size_t s, dnnl::stream& stream);
  void run_primitive(size_t s, dnnl::stream& stream);
  // Steps s and s + 1 at the same time, one thread each (Step::beside_next).
  void run_beside(size_t s, dnnl::stream& stream);
  void run_concat_norm(size_t step);
  void run_gather(size_t step);
  void run_row_softmax(size_t step);
  void run_row_mean(size_t step);
  void run_row_layer_norm(size_t step);
  void run_small_binary(size_t step);
  void run_eltwise(size_t step);
  // DNNL_ARG_SRC (*x) and DST (*y) of an elementwise loop `step` (Eltwise,
  // Quantize): SRC's element count.
  size_t src_dst(size_t step, const void** x, void** y);
  size_t float_src_dst(size_t step, const float** x, float** y) {
    return src_dst(step, reinterpret_cast<const void**>(x), reinterpret_cast<void**>(y));
  }
  void run_dynamic_quantize(size_t step);
  void run_table(size_t step);
  void run_quantize(size_t step);
  void run_batch_gemm(size_t step);
  void run_nbits_matmul(size_t step);

  // The address of argument `a` of step `s` (this run's, for an input or output).
  void* ptr(size_t s, size_t a) const;

  const Compiled& c_;
  char* memory_;  // the context's block the arena refs point into
  std::vector<dnnl::memory> mems_;  // per ref a oneDNN primitive reads (empty otherwise)
  std::vector<void*> ptrs_;         // per ref, where it is
  std::vector<Binding> bindings_;
  std::vector<dnnl_exec_arg_t> args_;          // the primitive steps' arguments
  std::vector<size_t> args_at_;                // per step, where its arguments start in args_
  std::vector<std::vector<CopyPart>> copies_;  // per step (empty unless a CopyConcat or ConcatNorm)
  dnnl::stream side_;  // the second thread's of two steps side by side; made at first use
};

class Compiled : public sdk::CompiledPartition {
 public:
  explicit Compiled(const sdk::Host& host) : host_(host) {}

  std::unique_ptr<sdk::ExecContext> create_context() override;
  // payload.cpp: the plan as a payload, every constant as a named blob.
  void serialize(bp_blob_store_t* store, bp_byte_writer_t* writer) override;

  const sdk::Host& host() const { return host_; }

  std::string name;    // the view's (blob keys of serialize are made from it)
  bool empty = false;  // compile rejected a node; never executed
  // Steps run in int8 (QuantGroup): serialize declines them (their weights'
  // compensation and the attributes' scales are not in the payload format).
  bool int8 = false;
  int threads = 1;     // OpenMP threads every step runs on (and was created for)
  Tuning tuning;       // as configured when it was compiled
  std::vector<Buffer> buffers;
  std::vector<MemRef> refs;
  StepList steps;
  size_t arena_bytes = 0, scratch_bytes = 0;
  // Where the arena and the scratchpad start in a context's block: the
  // arena first, then the scratchpad, unless `scratch_first`. Instances
  // derived from a template (derive.hpp) put it first: their arenas grow
  // with the cache and their scratchpads stay where they are, so that a
  // binder shares the primitives' scratchpad objects from one to the next.
  bool scratch_first = false;
  size_t arena_offset() const { return scratch_first ? align_up(scratch_bytes) : 0; }
  size_t scratch_offset() const { return scratch_first ? 0 : align_up(arena_bytes); }
  std::vector<size_t> input_bytes, output_bytes;
  // A deserialized partition's constants point into these (the artifact's
  // mapping); they stay held as long as the partition.
  std::vector<sdk::Weight> mapped;

 private:
  sdk::Host host_;
};

}  // namespace backplane::onednn
