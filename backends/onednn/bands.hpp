// bands.hpp — a plan's steps cut into pieces that any of its threads takes.
//
// oneDNN's OpenMP regions split each step statically and wait at a barrier
// for the slowest thread. On a machine whose CPUs are all taken by other
// processes, each of our threads is descheduled for whole scheduler slices,
// so the static split runs at the pace of the unluckiest thread; capped at
// one thread (cores.hpp), the plan gets one thread's share of a CPU. Bands
// does what a work-sharing pool does, and more: each step whose tensors
// allow it (plain 4-D tensors: channels-last, or a window of a wider one's
// channels; element-wise steps over dense ones) is made again as several
// single-threaded primitives over bands of its output rows (images x rows;
// element ranges for element-wise steps; pixel ranges for concat_norm).
// Over blocked tensors (nChw16c, where Lowering::block_convolutions put
// them) the bands are whole channel blocks of an image instead: a
// convolution's output channels (its weights sliced to match, once), a
// grouped convolution's whole groups (depthwise: a group a channel) with
// their source channels, a pooling's channels on both sides.
// An inner product of one row (a classifier's) is cut by its outputs, each
// band with its slice of the weights and bias. Steps that do not cut (a
// global pooling, a step too small to share) are one piece, run whole.
//
// Pieces are scheduled by data, not by step: each piece records the bytes it
// reads and writes (arena, scratchpad, caller's tensors), and waits only for
// the earlier pieces that write what it reads, or read or write what it
// writes (the arena reuses memory, so both matter). The calling thread and
// the plan's other threads (Dataflow's helpers, dataflow.hpp) take the
// earliest piece whose dependencies are done. When the kernel
// deschedules one thread in the middle of a piece, the others go on with
// every piece outside that band's cone of dependents, often several steps
// ahead, instead of stopping at the end of the step (measured, ResNet-50
// beside two busy loops on 2 CPUs: 56 ms with a barrier per step, 38 with
// this; 35 would be the whole of one CPU).
//
// The pieces are made at the first run in bands (new oneDNN primitives, not
// in the artifact, JIT-compiled then), each checked not to be a reference
// implementation and to take its operands in the plan's layouts; where a
// convolution's band has an optimised kernel only for another weights
// layout, it gets a reordered copy of the weights. A step whose pieces fail
// the checks runs whole.
//
// When: BACKPLANE_ONEDNN_BANDS=1 in every run of a multi-thread plan, 0
// never, by default when the governor finds no CPU free (with one free, the
// cap's single thread on it is as fast) and the plan measured bands clearly
// faster than the whole plan on every thread and than one thread
// (SaturatedWay, cores.hpp). A band computes each output
// element as the whole step does; on the test models the results are equal
// bit for bit.
#pragma once

#include "onednn/compiled.hpp"
#include "onednn/dataflow.hpp"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace backplane::onednn {

enum class BandMode { kNever, kAlways, kWhenCapped };
BandMode band_mode();

class Bands {
 public:
  // For the plan bound by `binder`, to run on `threads` threads (the caller
  // and threads - 1 helpers).
  Bands(Binder& binder, const Compiled& c, int threads);
  ~Bands();
  Bands(const Bands&) = delete;
  Bands& operator=(const Bands&) = delete;

  // Worth running: at least one step is cut.
  bool useful() const { return cut_steps_ > 0; }
  size_t cut_steps() const { return cut_steps_; }
  size_t pieces() const { return pieces_.size(); }

  // Runs every step, the binder's inputs and outputs bound, on the calling
  // thread (its stream) and the helpers. Rethrows a piece's failure.
  void run(dnnl::stream& stream);

 private:
  // Bytes a piece reads or writes: in the arena (space 0), the context's
  // scratchpad (1), input k (2 + 2k) or output k (3 + 2k).
  using Region = Dataflow::Region;
  struct Piece {
    size_t step = 0;
    std::vector<Region> regions;
    dnnl::primitive prim;  // empty: the step whole, or a concat_norm range
    bool whole = false;
    int64_t begin = 0, end = 0;                        // concat_norm: pixels
    std::vector<std::pair<int, dnnl::memory>> shared;  // its arguments but the scratchpad
    std::vector<std::vector<dnnl_exec_arg_t>> args;    // per thread slot, with its scratchpad
  };
  // A piece's memory over a caller's tensor: its handle moves every run.
  struct Rebind {
    dnnl::memory mem;
    size_t ref;
    size_t offset;  // bytes
  };

  bool cut_step(size_t s);
  bool cut_concat_norm(size_t s);
  bool cut_rows(size_t s, dnnl_primitive_kind_t kind, const_dnnl_primitive_attr_t attr,
                const_dnnl_op_desc_t op);
  // A step over blocked tensors (nChw16c / nChw8c): bands of whole channel
  // blocks of each image (cut_step).
  bool cut_channels(size_t s, dnnl_primitive_kind_t kind, const_dnnl_primitive_attr_t attr,
                    const_dnnl_op_desc_t op);
  // An inner product of one row (a classifier's one image): bands
  // of its output channels, each with its slice of the weights and bias.
  bool cut_outputs(size_t s, const_dnnl_primitive_attr_t attr, const_dnnl_op_desc_t op);
  // The plan's constant weights [at, at + dims) in the layout the piece
  // `pd` takes them (a copy, made once); empty if oneDNN cannot describe or
  // reorder that slice.
  static dnnl::memory weights_slice(const dnnl::memory& plan_weights,
                                    const dnnl::memory::dims& dims, const dnnl::memory::dims& at,
                                    const_dnnl_primitive_desc_t pd);
  // The pieces of step s from primitive descriptors (C handles, owned and
  // destroyed here) and, per piece, the arguments cut: (arg, byte offset,
  // md of the band).
  struct BandArg {
    int arg;
    size_t offset;
    dnnl::memory::desc md;
  };
  struct Cut {
    dnnl_primitive_desc_t pd = nullptr;
    std::vector<BandArg> args;
    dnnl::memory weights;  // its own slice of the weights, if any (cut_channels)
  };
  // The piece of operation descriptor `desc` with the step's attributes over
  // `args` (no pd if oneDNN has no implementation for it).
  static Cut cut_of(const void* desc, const_dnnl_primitive_attr_t attr, std::vector<BandArg> args);
  // Destroys the primitive descriptors of a step's cuts (it is not cut after
  // all); false, for `return release_cuts(cuts);`.
  static bool release_cuts(std::vector<Cut>& cuts);
  // weights_copy: the pieces take the weights in a layout of their own (a
  // copy, weights_as).
  bool add_pieces(size_t s, std::vector<Cut>& cuts, bool weights_copy);
  dnnl::memory weights_as(size_t ref, const dnnl::memory::desc& md);
  // The step's weights if the plan holds them as a constant (else
  // nullptr), and its bias's MemRef in `bias` (-1: none).
  const dnnl::memory* constant_weights(const Step& step, int& bias) const;
  dnnl::memory band_memory(size_t ref, size_t offset, const dnnl::memory::desc& md);

  // The region of `size` bytes (0: all of it) at `offset` in a MemRef's
  // memory; false for a constant (never written, never waited for).
  bool region(size_t ref, size_t offset, size_t size, bool write, Region& out) const;
  void add_whole_regions(Piece& p) const;
  void execute(const Piece& p, int slot, dnnl::stream& stream);

  Binder& binder_;
  const Compiled& c_;
  std::vector<Piece> pieces_;
  size_t cut_steps_ = 0;
  std::vector<Rebind> rebinds_;
  std::vector<dnnl::memory> owned_;                             // band and scratchpad memories
  std::vector<std::pair<size_t, dnnl::memory>> weight_copies_;  // (MemRef, its copy)
  std::vector<dnnl::memory::desc> piece_scratch_;
  std::vector<char*> scratch_;  // per thread slot
  int threads_ = 1;
  // The pieces' scheduler (its helpers run slots 1 ..), their streams, and
  // the caller's, for the run in progress.
  std::unique_ptr<Dataflow> flow_;
  std::vector<dnnl::stream> streams_;
  dnnl::stream* caller_stream_ = nullptr;
};

}  // namespace backplane::onednn
