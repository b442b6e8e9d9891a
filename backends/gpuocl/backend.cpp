// GpuOcl — a device backend on OpenCL (any vendor's driver) and CLBlast.
//
// The device is chosen at configure time ("device": an index into the list
// get_info describes). By default it is the first GPU (else the first
// accelerator) of the drivers that are not CPU-only; CPU-only drivers (PoCL)
// are loaded only when "device" names one of their devices (icd.hpp says
// why and how). With no such device GpuOcl loads, says why, and claims no
// node. Weights
// are uploaded once, at compile; activations live in device buffers of the
// execution context; the host's copies at partition edges are the
// copy_to_device / copy_from_device slots. Work is enqueued on one in-order
// queue per backend instance and never waited for, except where a value
// crosses to host memory: copy_from_device and outputs the host asked for in
// its own memory are blocking reads (which also wait for everything enqueued
// before them, since the queue is in order).
#include "gpuocl/device.hpp"
#include "gpuocl/lowering.hpp"

#include <backplane/backend_sdk.hpp>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>

namespace gpuocl {
namespace {
namespace sdk = backplane::sdk;

// The first GPU among `devices`, else the first accelerator (a device that
// is neither GPU nor CPU); -1 if none.
int default_device(const std::vector<DeviceInfo>& devices) {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].gpu) return int(i);
  for (size_t i = 0; i < devices.size(); ++i)
    if (!devices[i].cpu) return int(i);
  return -1;
}

// The devices of the drivers that are not CPU-only, loading those drivers.
std::vector<DeviceInfo> load_default_drivers(Vendors& vendors) {
  std::vector<DeviceInfo> out;
  for (Driver& d : vendors.drivers) {
    if (d.cpu) continue;
    load_driver(d);
    std::vector<DeviceInfo> more = devices_of(d);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

// Ahead of CpuOneDnn (100) in the default preference when a GPU or
// accelerator is there to run what GpuOcl claims; behind it otherwise (a CPU
// OpenCL device the 'device' key chose is no faster than CpuOneDnn). Never
// 0: GpuOcl loads without a device too, and says why.
uint32_t score() {
  try {
    Vendors vendors = find_drivers();
    return default_device(load_default_drivers(vendors)) >= 0 ? 200 : 1;
  } catch (...) {
    return 1;
  }
}

constexpr sdk::BackendIdentity kId{"GpuOcl", "Backplane", &score};

std::string gib(uint64_t bytes) {
  std::ostringstream os;
  os.precision(3);
  os << double(bytes) / double(1ull << 30) << " GiB";
  return os.str();
}

class Compiled;

class Context final : public sdk::ExecContext {
 public:
  explicit Context(Compiled& c);
  ~Context() override {
    for (auto& [name, k] : kernels_) clReleaseKernel(k.first);
  }
  void execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
               const bp_tensor_t* outputs) override;

 private:
  Compiled& c_;
  std::vector<cl_mem> values_;
  std::vector<Buffer> owned_;  // the partition's intermediate values
  Buffer scratch_;
  std::map<std::string, std::pair<cl_kernel, size_t>> kernels_;  // and its work-group size
};

class Compiled final : public sdk::CompiledPartition {
 public:
  Compiled(Device& device, const sdk::Host& host, std::string key_options,
           const bp_graph_view_t& view, Lowered lowered)
      : device_(device),
        host_(host),
        key_options_(std::move(key_options)),
        blob_prefix_(blob_prefix(view)),
        lowered_(std::move(lowered)) {
    for (size_t i = 0; i < view.num_inputs; ++i) {
      inputs_.push_back(view.inputs[i]);
      input_bytes_.push_back(sdk::byte_size(view.values[view.inputs[i]]));
    }
    for (size_t i = 0; i < view.num_outputs; ++i) {
      outputs_.push_back(view.outputs[i]);
      output_bytes_.push_back(sdk::byte_size(view.values[view.outputs[i]]));
    }
    std::set<int> edge(inputs_.begin(), inputs_.end());
    edge.insert(outputs_.begin(), outputs_.end());
    for (size_t n = 0; n < view.num_nodes; ++n)
      for (size_t o = 0; o < view.nodes[n].num_outputs; ++o) {
        const int v = view.nodes[n].outputs[o];
        if (v >= 0 && edge.count(v) == 0 && lowered_.elided.count(v) == 0)
          internal_.emplace_back(v, sdk::byte_size(view.values[v]));
      }
    num_values_ = view.num_values;
  }
  std::unique_ptr<sdk::ExecContext> create_context() override {
    return std::make_unique<Context>(*this);
  }
  // The program binary and what it is valid for (payload.hpp); the weights
  // GpuOcl derived at compile (BatchNormalization folds), read back from the
  // device into named blobs; the others are the artifact's own blobs. The
  // partition runs once first (on zeros, in buffers of its own): a driver
  // that finalises kernels at their first launch (PoCL: one machine-code
  // variant per kernel, work-group size and grid size) has then done so for
  // every launch of the partition, and its program binary carries that code,
  // so a load from the artifact compiles nothing. Should that run fail (out
  // of device memory, say), the payload is still valid: only the driver may
  // then finish some kernels at the first run. (Each payload holds the whole
  // program, so a model split into several GpuOcl partitions stores it
  // several times.)
  void serialize(bp_blob_store_t* store, bp_byte_writer_t* writer) override {
    try {
      warm_up();
    } catch (const sdk::Error& e) {
      host_.log(BP_LOG_WARN, "GpuOcl",
                std::string("GpuOcl: the run before serializing failed (") + e.what() +
                    "); the stored program may need the driver to finish kernels at their "
                    "first run");
    }
    Payload p{device_.key(key_options_), blob_prefix_, {}, device_.program_binary()};
    std::vector<unsigned char> bytes;
    for (const Lowered::Derived& d : lowered_.derived) {
      bytes.resize(d.bytes);
      check(clEnqueueReadBuffer(device_.queue(), d.mem, CL_TRUE, 0, d.bytes, bytes.data(), 0,
                                nullptr, nullptr),
            "clEnqueueReadBuffer (a derived weight)");
      host_.blob_add(store, blob_prefix_ + d.name, bytes.data(), bytes.size());
      p.derived.push_back(DerivedBlob{d.name, d.bytes});
    }
    bytes = encode_payload(p);
    host_.append(writer, bytes.data(), bytes.size());
  }
  // The named blobs of this partition's derived weights start with this.
  static std::string blob_prefix(const bp_graph_view_t& view) {
    return std::string("GpuOcl/") + (view.name != nullptr ? view.name : "partition") + "/";
  }
  void warm_up();

  Device& device_;
  const sdk::Host& host_;
  std::string key_options_;  // what the program key says of the options
  std::string blob_prefix_;
  Lowered lowered_;
  std::vector<int> inputs_, outputs_;
  std::vector<size_t> input_bytes_, output_bytes_;
  std::vector<std::pair<int, size_t>> internal_;
  size_t num_values_ = 0;
};

Context::Context(Compiled& c) : c_(c), values_(c.num_values_, nullptr) {
  for (const auto& [v, buffer] : c.lowered_.constants) values_[size_t(v)] = buffer.get();
  for (const auto& [v, bytes] : c.internal_) {
    owned_.push_back(c.device_.allocate(bytes));
    values_[size_t(v)] = owned_.back().get();
  }
  if (c.lowered_.scratch_bytes > 0) scratch_ = c.device_.allocate(c.lowered_.scratch_bytes);
}

void Context::execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
                      const bp_tensor_t* outputs) {
  if (num_inputs != c_.inputs_.size() || num_outputs != c_.outputs_.size())
    throw sdk::invalid("GpuOcl: execute got " + std::to_string(num_inputs) + " inputs and " +
                       std::to_string(num_outputs) + " outputs, the partition has " +
                       std::to_string(c_.inputs_.size()) + " and " +
                       std::to_string(c_.outputs_.size()));
  Device& dev = c_.device_;
  // Tensors in host memory (a host that gave them so) go through temporary
  // device buffers; the executor gives device memory, and these stay empty.
  std::vector<Buffer> staged;
  for (size_t i = 0; i < num_inputs; ++i) {
    const bp_tensor_t& t = inputs[i];
    if (t.device != 0) {
      values_[size_t(c_.inputs_[i])] = static_cast<cl_mem>(t.data);
      continue;
    }
    staged.push_back(t.size_bytes > 0 ? dev.upload(t.data, t.size_bytes) : dev.allocate(1));
    ++counters().copies_to_device;
    values_[size_t(c_.inputs_[i])] = staged.back().get();
  }
  std::vector<std::pair<size_t, cl_mem>> host_outputs;
  for (size_t i = 0; i < num_outputs; ++i) {
    const bp_tensor_t& t = outputs[i];
    if (t.device != 0) {
      values_[size_t(c_.outputs_[i])] = static_cast<cl_mem>(t.data);
      continue;
    }
    staged.push_back(dev.allocate(t.size_bytes));
    values_[size_t(c_.outputs_[i])] = staged.back().get();
    host_outputs.emplace_back(i, staged.back().get());
  }
  Run run(dev, values_, scratch_.get());
  run.set_kernels(&kernels_);
  for (const Step& s : c_.lowered_.steps) {
    try {
      s.enqueue(run);
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), s.node + ": " + e.what());
    }
  }
  for (const auto& [i, mem] : host_outputs) {
    if (outputs[i].size_bytes == 0) continue;
    check(clEnqueueReadBuffer(dev.queue(), mem, CL_TRUE, 0, outputs[i].size_bytes, outputs[i].data,
                              0, nullptr, nullptr),
          "clEnqueueReadBuffer (an output in host memory)");
    ++counters().copies_from_device;
    ++counters().host_waits;
  }
  // Nothing waits here: the next blocking read on this queue does.
  check(clFlush(dev.queue()), "clFlush");
}

void Compiled::warm_up() {
  std::vector<Buffer> buffers;
  std::vector<bp_tensor_t> ins, outs;
  // A tensor in device memory over the buffer just added.
  auto on_device = [&](size_t bytes) {
    bp_tensor_t t{};
    t.struct_size = sizeof(t);
    t.data = buffers.back().get();
    t.size_bytes = bytes;
    t.device = 1;
    return t;
  };
  for (size_t b : input_bytes_) {
    const std::vector<unsigned char> zeros(std::max<size_t>(b, 1), 0);
    buffers.push_back(device_.upload(zeros.data(), zeros.size()));
    ins.push_back(on_device(b));
  }
  for (size_t b : output_bytes_) {
    buffers.push_back(device_.allocate(b));
    outs.push_back(on_device(b));
  }
  {
    Context context(*this);
    context.execute(ins.size(), ins.data(), outs.size(), outs.data());
    check(clFinish(device_.queue()), "clFinish (the run before serializing)");
  }
}

class GpuOcl final : public sdk::Backend {
 public:
  static constexpr sdk::BackendIdentity kIdentity = kId;

  explicit GpuOcl(const bp_host_api_t* host) : sdk::Backend(host) {
    vendors_ = find_drivers();
    devices_ = load_default_drivers(vendors_);
    chosen_ = default_device(devices_);
    describe();
    if (chosen_ < 0)
      this->host().log(BP_LOG_INFO, "GpuOcl", "GpuOcl: " + why_ + "; claiming no node");
  }

  bp_backend_info_t info() override {
    bp_backend_info_t i{};
    i.struct_size = BP_STRUCT_SIZE(bp_backend_info_t, flags);
    i.vendor = "Backplane";
    i.description = descriptions_.back().c_str();
    i.device_count = chosen_ >= 0 ? 1 : 0;
    i.flags = BP_BACKEND_FLAG_COMPILE | BP_BACKEND_FLAG_SERIALIZE |
              (chosen_ >= 0 ? BP_BACKEND_FLAG_DEVICE_MEMORY : 0);
    return i;
  }

  std::vector<sdk::Backend::Device> devices() override {
    std::vector<sdk::Backend::Device> out;
    for (size_t i = 0; i < devices_.size(); ++i) {
      const DeviceInfo& d = devices_[i];
      sdk::Backend::Device o;
      o.name = d.name;
      o.vendor = d.vendor;
      o.driver_version = driver_version_.empty() ? d.driver_version : driver_version_;
      o.kind = d.gpu ? "gpu" : d.cpu ? "cpu" : "accelerator";
      o.memory_bytes = d.memory_bytes;
      o.compute_units = d.compute_units;
      o.selected = int(i) == chosen_;
      out.push_back(std::move(o));
    }
    return out;
  }

  void configure(std::string_view key, std::string_view value) override {
    if (key == "device") {
      if (device_) throw sdk::invalid("GpuOcl: 'device' must be configured before any compile");
      const size_t index = sdk::config_uint(key, value, 0, 4095);
      // Past the devices of the drivers loaded: the CPU drivers' devices,
      // which follow them.
      if (index >= devices_.size()) load_cpu_drivers();
      if (index >= devices_.size())
        throw sdk::invalid("GpuOcl: device '" + std::string(value) + "' is not one of the " +
                           std::to_string(devices_.size()) + " OpenCL devices (0-based index)");
      chosen_ = int(index);
      describe();
      return;
    }
    if (key == "driver_version") {
      if (device_)
        throw sdk::invalid("GpuOcl: 'driver_version' must be configured before any compile");
      driver_version_ = std::string(value);
      describe();
      return;
    }
    if (key == "build_options") {
      if (device_) throw sdk::invalid("GpuOcl: 'build_options' must be set before any compile");
      build_options_ = std::string(value);
      return;
    }
    if (key == "max_memory") {
      max_memory_ = sdk::config_uint(key, value, 0, UINT64_MAX);
      if (device_) device_->set_budget(max_memory_);
      return;
    }
    if (key == "gemm") {
      if (device_) throw sdk::invalid("GpuOcl: 'gemm' must be configured before any compile");
      clblast_ = sdk::config_choice(key, value, {"own", "clblast"}) == 1;
      return;
    }
    if (key == "program_cache_dir") {
      cache_dir_ = std::string(value);
      return;
    }
    sdk::Backend::configure(key, value);
  }

  void query_support(const bp_graph_view_t& view, sdk::NodeReport& report) override {
    for (size_t i = 0; i < view.num_nodes; ++i) {
      if (chosen_ < 0) {
        report.rejected(i, why_);  // the host names the backend
        continue;
      }
      const std::string reason = check_node(view, i);
      if (reason.empty()) report.supported(i);
      else report.rejected(i, reason);
    }
  }

  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t& view,
                                                  const bp_compile_options_t& options,
                                                  sdk::NodeReport& report) override {
    if (sdk::shape_polymorphic(options))
      throw sdk::unsupported("GpuOcl compiles static shapes only");
    gpuocl::Device& dev = device();
    try {
      const int64_t builds = counters().program_builds, loads = counters().program_loads;
      const auto t0 = std::chrono::steady_clock::now();
      dev.program(build_options_, cache_dir_);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (counters().program_builds != builds)
        host().log(BP_LOG_INFO, "GpuOcl",
                   "GpuOcl: built the OpenCL kernels from source for " +
                       dev.key(key_options()).describe() + " in " + std::to_string(ms) + " ms");
      else if (counters().program_loads != loads)
        host().log(BP_LOG_INFO, "GpuOcl",
                   "GpuOcl: took the OpenCL kernels from the program cache " + cache_dir_);
    } catch (const sdk::Error& e) {
      // The driver cannot build our kernels: every node goes elsewhere.
      host().log(BP_LOG_WARN, "GpuOcl", e.what());
      for (size_t i = 0; i < view.num_nodes; ++i) report.rejected(i, e.what());
      return nullptr;
    }
    bool complete = true;
    Lowered lowered;
    try {
      lowered = lower(dev, host(), view, [&](size_t node, const std::string& why) {
        report.rejected(node, why);
        complete = false;
      });
    } catch (const sdk::Error& e) {
      if (e.code() != BP_STATUS_OUT_OF_MEMORY) throw;
      // The weights do not fit: every node goes elsewhere.
      host().log(BP_LOG_WARN, "GpuOcl", e.what());
      for (size_t i = 0; i < view.num_nodes; ++i) report.rejected(i, e.what());
      return nullptr;
    }
    if (!complete) return nullptr;  // the host gives those nodes elsewhere and compiles again
    return std::make_unique<Compiled>(dev, host(), key_options(), view, std::move(lowered));
  }

  // A payload of serialize: its program binary, used as is when it was built
  // for this device, driver and options. Otherwise (another device, driver,
  // options or kernel source; or a binary the driver refuses) this fails
  // with BP_STATUS_UNSUPPORTED saying what the payload was built for and
  // what this is: the host notes that in Model::notes() and compiles the
  // partition again from the portable graph (on GpuOcl, from source). A
  // payload this build cannot read fails the same way (CORRUPT_DATA or
  // VERSION_MISMATCH).
  std::unique_ptr<sdk::CompiledPartition> deserialize(
      const bp_graph_view_t& view, const void* payload, size_t size,
      const bp_compile_options_t& options) override {
    if (sdk::shape_polymorphic(options))
      throw sdk::unsupported("GpuOcl compiles static shapes only");
    const Payload p = decode_payload(payload, size);
    gpuocl::Device& dev = device();
    const ProgramKey here = dev.key(key_options());
    if (!(p.key == here))
      throw sdk::unsupported("GpuOcl: the stored program was compiled for " + p.key.describe() +
                             " (kernel source " + p.key.source_hash + "); this is " +
                             here.describe() + " (kernel source " + here.source_hash + ")");
    if (!dev.adopt_binary(p.binary, build_options_))
      throw sdk::unsupported("GpuOcl: the driver refused the stored program binary for " +
                             here.describe());
    host().log(BP_LOG_INFO, "GpuOcl",
               "GpuOcl: took the stored program binary (" + std::to_string(p.binary.size()) +
                   " bytes) for " + here.describe() + "; no OpenCL C compiled");
    // The derived weights, as stored: nothing is folded again.
    StoredWeights stored;
    for (const DerivedBlob& d : p.derived) {
      const std::string key = p.blob_prefix + d.name;
      sdk::Weight w;
      try {
        w = host().weight(view.weights, key.c_str());
      } catch (const sdk::Error& e) {
        throw sdk::Error(BP_STATUS_CORRUPT_DATA,
                         "GpuOcl payload: derived weight blob '" + key + "': " + e.what());
      }
      if (w.size() != d.bytes)
        throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: derived weight blob '" + key +
                                                     "' is " + std::to_string(w.size()) +
                                                     " bytes, the payload says " +
                                                     std::to_string(d.bytes));
      stored.emplace(d.name, std::move(w));
    }
    Lowered lowered = lower(
        dev, host(), view,
        [&](size_t node, const std::string& why) {
          throw sdk::unsupported("node " + std::to_string(node) + ": " + why);
        },
        &stored);
    if (lowered.derived.size() != stored.size())
      throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: " + std::to_string(stored.size()) +
                                                   " derived weights stored, the partition uses " +
                                                   std::to_string(lowered.derived.size()));
    return std::make_unique<Compiled>(dev, host(), key_options(), view, std::move(lowered));
  }

  void* memory_alloc(uint32_t device_index, size_t size, size_t /*alignment*/) override {
    check_device(device_index);
    Buffer b = device().allocate(size);
    cl_mem m = b.release();
    ++counters().live_buffers;  // still held, now by the host
    std::lock_guard<std::mutex> lock(mutex_);
    allocations_.emplace(m, size);
    ++counters().live_allocations;
    return m;
  }
  void memory_free(uint32_t /*device*/, void* ptr) override {
    if (ptr == nullptr) return;
    size_t size = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = allocations_.find(static_cast<cl_mem>(ptr));
      if (it == allocations_.end()) return;  // not ours
      size = it->second;
      allocations_.erase(it);
    }
    Buffer owned(static_cast<cl_mem>(ptr));
    --counters().live_buffers;  // Buffer's destructor counts it out once more
    --counters().live_allocations;
    if (device_) device_->forget(std::max<size_t>(size, 1));
  }
  void copy_to_device(uint32_t device_index, void* dst, const void* src, size_t size) override {
    check_device(device_index);
    check_allocation(dst, size);
    // Blocking: the host may reuse `src` as soon as this returns.
    check(clEnqueueWriteBuffer(device().queue(), static_cast<cl_mem>(dst), CL_TRUE, 0, size, src, 0,
                               nullptr, nullptr),
          "clEnqueueWriteBuffer");
    ++counters().copies_to_device;
  }
  void copy_from_device(uint32_t device_index, void* dst, const void* src, size_t size) override {
    check_device(device_index);
    check_allocation(src, size);
    // The one place the host waits: the queue is in order, so this read
    // also waits for the kernels that produce the value.
    check(clEnqueueReadBuffer(device().queue(), static_cast<cl_mem>(const_cast<void*>(src)),
                              CL_TRUE, 0, size, dst, 0, nullptr, nullptr),
          "clEnqueueReadBuffer");
    ++counters().copies_from_device;
    ++counters().host_waits;
  }

 private:
  gpuocl::Device& device() {
    if (chosen_ < 0) throw sdk::Error(BP_STATUS_UNSUPPORTED, "GpuOcl: " + why_);
    if (!device_) {
      DeviceInfo info = devices_[size_t(chosen_)];
      if (!driver_version_.empty()) info.driver_version = driver_version_;
      device_ = std::make_unique<gpuocl::Device>(info);
      device_->set_budget(max_memory_);
      device_->set_use_clblast(clblast_);
    }
    return *device_;
  }
  // The build options as a program key states them: with the GEMM choice,
  // since a payload's partition made with CLBlast differs in what it runs.
  std::string key_options() const {
    return clblast_ ? build_options_ + " [gemm=clblast]" : build_options_;
  }
  void check_device(uint32_t d) const {
    if (d != 0 || chosen_ < 0)
      throw sdk::invalid("GpuOcl: no device " + std::to_string(d) + " (it has " +
                         std::to_string(chosen_ < 0 ? 0 : 1) + ")");
  }
  void check_allocation(const void* ptr, size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocations_.find(static_cast<cl_mem>(const_cast<void*>(ptr)));
    if (it == allocations_.end())
      throw sdk::invalid("GpuOcl: a copy names memory that memory_alloc did not return");
    if (size > it->second)
      throw sdk::invalid("GpuOcl: a copy of " + std::to_string(size) + " bytes overruns a " +
                         std::to_string(it->second) + "-byte allocation");
  }
  void load_cpu_drivers() {
    for (Driver& d : vendors_.drivers) {
      if (!d.cpu || d.loaded) continue;
      load_driver(d);
      std::vector<DeviceInfo> more = devices_of(d);
      devices_.insert(devices_.end(), more.begin(), more.end());
    }
  }
  // The description (get_info) and why_, from the drivers and devices as
  // they are now. Descriptions made before stay valid: get_info's strings
  // are the backend's static storage.
  void describe() {
    std::vector<std::string> skipped, errors;
    for (const Driver& d : vendors_.drivers) {
      if (d.cpu && !d.loaded) skipped.push_back(d.library);
      if (d.error.empty()) continue;
      if (d.library.empty()) {
        errors.push_back("vendor file " + d.file + ": " + d.error);
      } else {
        errors.push_back("driver " + d.library + (d.file.empty() ? "" : " (" + d.file + ")") +
                         ": " + d.error);
      }
    }
    if (!vendors_.error.empty()) errors.push_back(vendors_.error);
    std::string list;
    for (size_t i = 0; i < skipped.size(); ++i) list += (i ? ", " : "") + skipped[i];
    if (chosen_ >= 0) {
      why_.clear();
    } else if (vendors_.drivers.empty()) {
      why_ = "no OpenCL driver (no vendor file in " + vendors_.source + ")";
    } else {
      why_ = "no OpenCL GPU";
      if (!skipped.empty()) {
        why_ += "; CPU-only OpenCL drivers (" + list +
                ") are loaded only when the 'device' key names one of their devices (numbered "
                "from " +
                std::to_string(devices_.size()) + ")";
      } else if (!devices_.empty()) {
        why_ += "; a CPU device is used only when the 'device' key names it";
      }
    }
    std::ostringstream os;
    os << "OpenCL";
    if (chosen_ >= 0) {
      os << " on device " << chosen_;
    } else {
      os << ", claiming no node: " << why_;
    }
    if (!devices_.empty()) {
      os << "; devices:";
      for (size_t i = 0; i < devices_.size(); ++i) {
        const DeviceInfo& d = devices_[i];
        const char* kind = d.gpu ? "GPU" : d.cpu ? "CPU" : "accelerator";
        os << (i ? "; " : " ") << "[" << i << "] " << d.name << " (vendor " << d.vendor << ", "
           << kind << ", memory " << gib(d.memory_bytes) << ", " << d.compute_units
           << " compute units, driver "
           << (driver_version_.empty() ? d.driver_version : driver_version_) << ", " << d.library
           << ")";
      }
    }
    if (!skipped.empty() && chosen_ >= 0)
      os << "; not loaded: " << list << " (CPU-only; loaded when the 'device' key names one of "
         << "their devices, numbered from " << devices_.size() << ")";
    for (const std::string& e : errors) os << "; " << e;
    descriptions_.push_back(os.str());
  }

  Vendors vendors_;
  std::vector<DeviceInfo> devices_;  // of the drivers loaded, in the order they were loaded
  std::string why_;                  // why no device is chosen (chosen_ < 0)
  int chosen_ = -1;
  std::deque<std::string> descriptions_;
  std::string driver_version_;  // configure key driver_version
  std::string build_options_;
  std::string cache_dir_;
  uint64_t max_memory_ = 0;
  bool clblast_ = false;
  std::unique_ptr<gpuocl::Device> device_;
  std::mutex mutex_;
  std::map<cl_mem, size_t> allocations_;
};

}  // namespace
}  // namespace gpuocl

BP_DEFINE_BACKEND_ENTRY_POINTS(gpuocl::GpuOcl)

// For the tests: a counter of this module by name (see gpuocl::Counters),
// -1 for an unknown name.
extern "C" BP_EXPORT int64_t GpuOcl_Counter(const char* name) {
  const gpuocl::Counters& c = gpuocl::counters();
  const std::string n = name != nullptr ? name : "";
  if (n == "live_buffers") return c.live_buffers;
  if (n == "live_allocations") return c.live_allocations;
  if (n == "copies_to_device") return c.copies_to_device;
  if (n == "copies_from_device") return c.copies_from_device;
  if (n == "host_waits") return c.host_waits;
  if (n == "kernels") return c.kernels;
  if (n == "gemms") return c.gemms;
  if (n == "clblast_gemms") return c.clblast_gemms;
  if (n == "weight_uploads") return c.weight_uploads;
  if (n == "derived_computed") return c.derived_computed;
  if (n == "derived_loaded") return c.derived_loaded;
  if (n == "device_bytes") return c.device_bytes;
  if (n == "program_builds") return c.program_builds;
  if (n == "program_loads") return c.program_loads;
  return -1;
}
