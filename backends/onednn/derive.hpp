// derive.hpp — instances of a shape-polymorphic partition (polymorphic.hpp)
// made from a lowered one instead of lowered again.
//
// A decoder step meets a new cache length at every token, an encoder a new
// sequence length at every input. Lowering the partition for it (fusion,
// primitive descriptors, the memory plan) costs several times the run
// itself, yet what changes from one length to the next is only the dims of
// the values the length reaches: the steps over them are the backend's own
// loops (CopyConcat, RowSoftmax, RowMean, RowLayerNorm, SmallBinary, Gather,
// of a 4-bit table too, DynamicQuantize, Quantize, NBitsMatMul) and MatMuls
// with runtime dims or rows, which take any dims; every other step,
// and every primitive, is the same.
//
// An InstanceTemplate is made from three instances lowered at three keys
// (the run's shapes, PolyCompiled::make_key). It is made only if the three
// plans are the same but for some memory descriptions, buffer sizes and arena
// offsets, and the descriptions that differ are dense (dims in some order,
// no gaps) with each differing dim a dim of the key that differs between
// the three times a fixed factor (an index's bytes), or the product of two
// such dims times one (the rows of a batch of sequences collapsed into one
// matrix); the steps reading them must be kinds that take any
// dims. Deriving the first two instances from the third must then give them
// exactly: every description, size and offset.
//
// derive(key) gives the instance at a new key if the key differs from the
// third only at the positions that differed between the three, none of
// them below 2 (a dim of 1 broadcasts, which the steps were not lowered
// for), positions that were equal at all three are equal at it, and every
// dim a description takes from the key is the same by every term it
// matched. The steps are checked to fit together at the
// new dims (a concat's sources and destination, a broadcast, a product's
// inner dims). Buffers whose size changed are placed after the base's arena,
// every other keeps its offset. Anything else: null, and the caller lowers.
#pragma once

#include "onednn/compiled.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace backplane::onednn {

class InstanceTemplate {
 public:
  struct Lowered {
    std::vector<int64_t> key;
    std::shared_ptr<const Compiled> plan;
  };
  // From three instances of the partition of `view` lowered at different
  // keys (`offsets`: where each value's dims start in a key); the last one
  // is the base. Null if they are not as the header says.
  static std::unique_ptr<InstanceTemplate> make(const bp_graph_view_t& view,
                                                const std::vector<size_t>& offsets,
                                                const std::vector<Lowered>& three);
  // Whether `key` (running on `threads`) is within what the template
  // covers, by the key alone (see above); derive may still refuse it, when
  // the steps do not fit together at its dims.
  bool covers(const std::vector<int64_t>& key, int threads) const;
  // The instance at `key` (running on `threads`), or null if it is outside
  // what this template covers.
  std::shared_ptr<Compiled> derive(const std::vector<int64_t>& key, int threads) const;
  // The same in place: `plan` is a base_copy() (or a plan derive_into gave
  // before) and becomes the instance at `key`. Only the descriptions that
  // follow the key, the sizes and offsets of the buffers over them and the
  // input and output sizes change, so a context can keep one plan, and one
  // binder over it, for every key the template covers (polymorphic.cpp).
  // False if the key is outside the template; `plan` is then unusable.
  bool derive_into(const std::vector<int64_t>& key, int threads, Compiled& plan) const;
  // A plan with the base's steps, references and buffers, for derive_into.
  std::shared_ptr<Compiled> base_copy() const;
  const std::vector<int64_t>& base_key() const { return base_.key; }

 private:
  // A dim that follows the key: `factor` times the key at `p`, and times
  // the key at `q` too unless q is kOne (the rows of a batch of sequences
  // collapsed into one matrix are batch x length).
  struct Term {
    static constexpr uint32_t kOne = UINT32_MAX;
    uint32_t p, q;
    int64_t factor;
    int64_t at(const std::vector<int64_t>& key) const {
      return key[p] * (q == kOne ? 1 : key[q]) * factor;
    }
  };
  // A MemRef whose description follows the key: per dim, the terms it
  // equals (all of them, at every key; empty: a fixed dim, the base's), and
  // the dims from the innermost to the outermost.
  struct Follow {
    size_t ref;
    std::vector<std::vector<Term>> from;
    std::vector<int> inner_first;
  };
  // A step reading descriptions that follow the key, checked at derive.
  struct Check {
    enum Kind {
      kConcat,
      kBinary,
      kRows,
      kRowMean,
      kMatMul,
      kGather,
      kNBits,
      kElements,
      kSmallElements
    } kind;
    size_t step;
  };

  InstanceTemplate(const bp_graph_view_t& view, const std::vector<size_t>& offsets, Lowered base)
      : view_(view), offsets_(offsets), base_(std::move(base)) {}
  bool fits(const Compiled& c) const;
  size_t value_bytes(const std::vector<int64_t>& key, int v) const;

  const bp_graph_view_t& view_;
  const std::vector<size_t>& offsets_;
  Lowered base_;
  // Per key position: kClosed (the base's dim at every key), or the first
  // position that equalled it at all three lowered keys, which it must equal
  // at every key derived (one position of each such class is fitted).
  static constexpr uint32_t kClosed = UINT32_MAX;
  std::vector<uint32_t> open_;
  std::vector<Follow> follow_;
  // A buffer whose size follows the key, and the refs over it.
  struct Sized {
    size_t buffer;
    std::vector<size_t> refs;
  };
  std::vector<Sized> sized_;
  std::vector<Check> checks_;
};

}  // namespace backplane::onednn
