// device.hpp — GpuOcl's view of OpenCL: devices, buffers, the program.
//
// One Device per backend instance: an OpenCL context and one in-order
// command queue. Everything the backend enqueues (kernels, CLBlast calls,
// copies) goes to that queue, so work runs in the order it was enqueued and
// the host waits only where a value crosses to host memory (a blocking read).
#ifndef BACKPLANE_GPUOCL_DEVICE_HPP_
#define BACKPLANE_GPUOCL_DEVICE_HPP_

#include "gpuocl/icd.hpp"
#include "gpuocl/payload.hpp"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace gpuocl {

// What clGetDeviceInfo says about one device.
struct DeviceInfo {
  cl_platform_id platform = nullptr;
  cl_device_id id = nullptr;
  std::string name, vendor, driver_version, platform_name;
  std::string library;  // its driver's, as the vendor file names it
  bool gpu = false, cpu = false;
  uint64_t memory_bytes = 0;
  uint32_t compute_units = 0;
};

// Every device of a loaded driver's platforms, in platform order.
std::vector<DeviceInfo> devices_of(const Driver& driver);

// Counters the tests read (GpuOcl_Counter, exported by backend.cpp).
struct Counters {
  std::atomic<int64_t> live_buffers{0};      // every cl_mem this module created and holds
  std::atomic<int64_t> live_allocations{0};  // memory_alloc minus memory_free
  std::atomic<int64_t> copies_to_device{0};
  std::atomic<int64_t> copies_from_device{0};
  std::atomic<int64_t> host_waits{0};     // blocking reads, finishes
  std::atomic<int64_t> kernels{0};        // NDRange kernels enqueued
  std::atomic<int64_t> gemms{0};          // GEMMs enqueued (gemm_* kernels or CLBlast)
  std::atomic<int64_t> clblast_gemms{0};  // of those, through CLBlast
  std::atomic<int64_t> weight_uploads{0};
  std::atomic<int64_t> derived_computed{0};  // weights derived on the host (BN folds)
  std::atomic<int64_t> derived_loaded{0};    // the same, taken from an artifact's blobs
  std::atomic<int64_t> device_bytes{0};      // held in buffers of this module (all devices)
  std::atomic<int64_t> program_builds{0};    // from source
  std::atomic<int64_t> program_loads{0};     // from a cached binary
};
Counters& counters();

// Throws sdk::Error(BP_STATUS_DEVICE_ERROR) naming `what` if err != CL_SUCCESS.
void check(cl_int err, const char* what);
const char* error_name(cl_int err);

// An owned cl_mem (counted in Counters::live_buffers) of `bytes`, charged
// to `used` (a device's budget) until released.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(cl_mem mem, size_t bytes = 0, std::atomic<int64_t>* used = nullptr)
      : mem_(mem), bytes_(bytes), used_(used) {
    if (mem_ != nullptr) ++counters().live_buffers;
  }
  Buffer(Buffer&& o) noexcept : mem_(o.mem_), bytes_(o.bytes_), used_(o.used_) { o.mem_ = nullptr; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      mem_ = o.mem_;
      bytes_ = o.bytes_;
      used_ = o.used_;
      o.mem_ = nullptr;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }
  cl_mem get() const { return mem_; }
  // Gives the cl_mem up, still charged to the budget (Device::forget undoes
  // that when it is freed).
  cl_mem release() {
    cl_mem m = mem_;
    if (m != nullptr) --counters().live_buffers;
    mem_ = nullptr;
    return m;
  }
  void reset() {
    // OpenCL defers the release until the commands using it have finished.
    if (mem_ != nullptr) {
      clReleaseMemObject(mem_);
      --counters().live_buffers;
      counters().device_bytes -= int64_t(bytes_);
      if (used_ != nullptr) *used_ -= int64_t(bytes_);
    }
    mem_ = nullptr;
  }

 private:
  cl_mem mem_ = nullptr;
  size_t bytes_ = 0;
  std::atomic<int64_t>* used_ = nullptr;
};

class Device {
 public:
  // Creates the context and queue of `info`. Throws on failure.
  explicit Device(const DeviceInfo& info);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  // The work-group size of every kernel launch (64, or the device's largest
  // if smaller). Fixed, so a driver that finalises a kernel per work-group
  // size (PoCL) makes few variants of it, whatever the tensor shapes.
  size_t local_size() const { return local_size_; }
  // GEMM-shaped work through CLBlast rather than GpuOcl's gemm_* kernels
  // (configure key gemm=clblast): CLBlast builds its kernels on first use
  // and keeps them in process memory only, so a partition loaded from a
  // `.bpk` then compiles them again.
  bool use_clblast() const { return use_clblast_; }
  void set_use_clblast(bool on) { use_clblast_ = on; }
  cl_context context() const { return context_; }
  cl_command_queue queue() const { return queue_; }
  cl_command_queue* queue_ptr() { return &queue_; }

  // The most device memory this instance may hold (0: no limit besides the
  // device's): the configure key max_memory. Past it, allocate and upload
  // fail with BP_STATUS_OUT_OF_MEMORY as the device itself would.
  void set_budget(uint64_t bytes) { budget_ = bytes; }
  // Returns `bytes` of a buffer given up with Buffer::release to the budget.
  void forget(size_t bytes) {
    used_ -= int64_t(bytes);
    counters().device_bytes -= int64_t(bytes);
  }
  // size bytes of device memory (at least 1), uninitialised.
  Buffer allocate(size_t size, cl_mem_flags flags = CL_MEM_READ_WRITE);
  // A read-only buffer holding a copy of `data`.
  Buffer upload(const void* data, size_t size);

  // The kernels' program, built on first call with `options` (the same
  // options every time; changing them is a configure before any compile).
  // Loaded from `cache_dir` when a binary for this device, driver, options
  // and source is there; written there after a build. Throws with the build
  // log when the driver cannot build it.
  cl_program program(const std::string& options, const std::string& cache_dir);
  // What a binary of the program built with `options` is valid for.
  ProgramKey key(const std::string& options) const;
  // The built program's binary (program() first).
  std::vector<unsigned char> program_binary();
  // Makes `binary` (built for key(options)) the program, if none is built
  // yet; false if the driver refuses it (then program() builds from source).
  bool adopt_binary(const std::vector<unsigned char>& binary, const std::string& options);
  // A new kernel object of the program (owned by the caller).
  cl_kernel create_kernel(const char* name);

 private:
  void charge(size_t bytes);

  DeviceInfo info_;
  size_t local_size_ = 64;
  bool use_clblast_ = false;
  std::atomic<uint64_t> budget_{0};
  std::atomic<int64_t> used_{0};
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  std::mutex program_mutex_;
  cl_program program_ = nullptr;
  std::string program_error_;  // a failed build, kept so later compiles say the same
};

}  // namespace gpuocl

#endif  // BACKPLANE_GPUOCL_DEVICE_HPP_
