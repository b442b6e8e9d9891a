// compiled.cpp — running a compiled CpuOneDnn partition.
#include "onednn/compiled.hpp"

#include <omp.h>

#include <cstdlib>
#include <new>

namespace backplane::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

size_t context_bytes(const Compiled& c) {
  return align_up(c.arena_bytes) + align_up(c.scratch_bytes);
}

Binder::Binder(const Compiled& c, char* memory) : c_(c) {
  char* scratch = memory + align_up(c.arena_bytes);
  mems_.resize(c.refs.size());
  for (size_t r = 0; r < c.refs.size(); ++r) {
    const MemRef& ref = c.refs[r];
    if (ref.constant) {
      mems_[r] = ref.constant;
    } else if (ref.scratch) {
      mems_[r] = dnnl::memory(ref.md, engine(), scratch);
    } else {
      const Buffer& b = c.buffers[ref.buffer];
      if (b.kind == Buffer::kArena) {
        mems_[r] = dnnl::memory(ref.md, engine(), memory + b.offset);
      } else {
        mems_[r] = dnnl::memory(ref.md, engine(), DNNL_MEMORY_NONE);
        bindings_.push_back({r, b.kind == Buffer::kInput, b.index});
      }
    }
  }
  args_.resize(c.steps.size());
  for (size_t s = 0; s < c.steps.size(); ++s)
    for (auto [arg, r] : c.steps[s].args) args_[s].push_back({arg, mems_[r].get()});
}

void Binder::run(dnnl::stream& stream, size_t num_inputs, const bp_tensor_t* inputs,
                 size_t num_outputs, const bp_tensor_t* outputs) {
  if (c_.empty)
    throw sdk::Error(BP_STATUS_INTERNAL, "CpuOneDnn: this partition was rejected at compile time");
  if (num_inputs != c_.input_bytes.size() || num_outputs != c_.output_bytes.size())
    throw sdk::invalid("CpuOneDnn execute: expected " + std::to_string(c_.input_bytes.size()) +
                       " inputs and " + std::to_string(c_.output_bytes.size()) + " outputs");
  for (size_t k = 0; k < num_inputs; ++k)
    if (inputs[k].device != 0 || inputs[k].size_bytes != c_.input_bytes[k] ||
        inputs[k].data == nullptr)
      throw sdk::invalid("CpuOneDnn execute: input " + std::to_string(k) +
                         " is not a host buffer of " + std::to_string(c_.input_bytes[k]) +
                         " bytes");
  for (size_t k = 0; k < num_outputs; ++k)
    if (outputs[k].device != 0 || outputs[k].size_bytes != c_.output_bytes[k] ||
        outputs[k].data == nullptr)
      throw sdk::invalid("CpuOneDnn execute: output " + std::to_string(k) +
                         " is not a host buffer of " + std::to_string(c_.output_bytes[k]) +
                         " bytes");
  for (const Binding& b : bindings_)
    mems_[b.ref].set_data_handle(b.input ? inputs[b.index].data : outputs[b.index].data);
  // The OpenMP thread count is per calling thread (the application's).
  if (omp_get_max_threads() != c_.threads) omp_set_num_threads(c_.threads);
  for (size_t s = 0; s < args_.size(); ++s) {
    dnnl_status_t st = dnnl_primitive_execute(c_.steps[s].prim.get(), stream.get(),
                                              static_cast<int>(args_[s].size()), args_[s].data());
    if (st != dnnl_success)
      throw sdk::Error(BP_STATUS_BACKEND_ERROR, "CpuOneDnn: " + c_.steps[s].what +
                                                    " failed (oneDNN status " +
                                                    std::to_string(static_cast<int>(st)) + ")");
  }
  stream.wait();
}

namespace {

// Per caller: the arena and the scratchpad, and the plan bound to them, all
// made here so execute() allocates nothing itself.
class Context : public sdk::ExecContext {
 public:
  explicit Context(const Compiled& c) : c_(c), stream_(engine()) {
    if (c.empty) return;
    const size_t bytes = context_bytes(c);
    if (bytes > 0) {
      memory_ = static_cast<char*>(std::aligned_alloc(kAlign, bytes));
      if (memory_ == nullptr) throw std::bad_alloc();
    }
    binder_ = std::make_unique<Binder>(c, memory_);
  }
  ~Context() override { std::free(memory_); }

  void execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
               const bp_tensor_t* outputs) override {
    if (c_.empty)
      throw sdk::Error(BP_STATUS_INTERNAL,
                       "CpuOneDnn: this partition was rejected at compile time");
    binder_->run(stream_, num_inputs, inputs, num_outputs, outputs);
  }

 private:
  const Compiled& c_;
  dnnl::stream stream_;
  char* memory_ = nullptr;
  std::unique_ptr<Binder> binder_;
};

}  // namespace

std::unique_ptr<sdk::ExecContext> Compiled::create_context() {
  return std::make_unique<Context>(*this);
}

}  // namespace backplane::onednn
