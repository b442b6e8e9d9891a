// lowering.hpp — from the nodes of a view to work enqueued on the device.
#ifndef BACKPLANE_GPUOCL_LOWERING_HPP_
#define BACKPLANE_GPUOCL_LOWERING_HPP_

#include "gpuocl/device.hpp"

#include <backplane/backend_sdk.hpp>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace gpuocl {

// Why GpuOcl cannot take node `index` of `view`, or "" if it can.
std::string check_node(const bp_graph_view_t& view, size_t index);

// The buffers one run works on, indexed like the view's values, and the
// kernel objects of one execution context (a cl_kernel's arguments are
// state, so concurrent contexts each have their own).
class Run {
 public:
  Run(Device& device, std::vector<cl_mem>& values, cl_mem scratch)
      : device_(device), values_(values), scratch_(scratch) {}
  Device& device() { return device_; }
  cl_mem value(int v) const { return values_[static_cast<size_t>(v)]; }
  cl_mem scratch() const { return scratch_; }
  // Kernel `name` of this context, created on first use, and the
  // work-group size every launch of it uses (*local): the device's fixed
  // size (Device::local_size), or less if the driver allows this kernel
  // less (CL_KERNEL_WORK_GROUP_SIZE; a GPU may, for a kernel using many
  // registers).
  cl_kernel kernel(const char* name, size_t* local);
  void set_kernels(std::map<std::string, std::pair<cl_kernel, size_t>>* kernels) {
    kernels_ = kernels;
  }

 private:
  Device& device_;
  std::vector<cl_mem>& values_;
  cl_mem scratch_;
  std::map<std::string, std::pair<cl_kernel, size_t>>* kernels_ = nullptr;
};

// One enqueued piece of a node's work.
struct Step {
  std::string node;  // "name (Op)", for errors
  std::function<void(Run&)> enqueue;
};

// What compile makes of a view: the steps in order, the constants the steps
// read (uploaded once, here), and the scratch the largest step needs.
struct Lowered {
  std::vector<Step> steps;
  std::map<int, Buffer> constants;  // view value -> device copy
  std::vector<Buffer> meta;         // shape/stride tables of the kernels
  size_t scratch_bytes = 0;
  // Weights derived at compile (a BatchNormalization folded into its Conv's
  // weights and bias, or into one per-channel affine table), held in `meta`:
  // by name ("n<node>/<what>", unique in the view). serialize stores them as
  // named blobs so that a load from the artifact folds nothing.
  struct Derived {
    std::string name;
    cl_mem mem = nullptr;
    size_t bytes = 0;
  };
  std::vector<Derived> derived;
  // Values no step writes: a Conv's output when the BatchNormalization or
  // activation reading it was folded into the Conv (no buffer needed).
  std::set<int> elided;
};

// Derived weights a payload brought (deserialize), by Lowered::Derived name.
using StoredWeights = std::map<std::string, backplane::sdk::Weight>;

// Lowers every node of `view` (each passed check_node). Reads weights through
// `host`. A node that turns out unsupported (e.g. axes known only from a
// constant's values) is passed to `rejected` with the reason; any other
// failure throws sdk::Error naming the node. With `stored` (a load from an
// artifact), every derived weight is taken from it and none is computed; one
// missing from it, or of another size, is BP_STATUS_CORRUPT_DATA.
Lowered lower(Device& device, const backplane::sdk::Host& host, const bp_graph_view_t& view,
              const std::function<void(size_t, const std::string&)>& rejected,
              const StoredWeights* stored = nullptr);

}  // namespace gpuocl

#endif  // BACKPLANE_GPUOCL_LOWERING_HPP_
