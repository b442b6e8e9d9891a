#include "gpuocl/device.hpp"

#include "gpuocl/kernels.hpp"

#include <backplane/backend_sdk.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace gpuocl {
namespace sdk = backplane::sdk;

Counters& counters() {
  static Counters c;
  return c;
}

const char* error_name(cl_int err) {
  switch (err) {
    case CL_SUCCESS:
      return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND:
      return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE:
      return "CL_DEVICE_NOT_AVAILABLE";
    case CL_COMPILER_NOT_AVAILABLE:
      return "CL_COMPILER_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
      return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES:
      return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY:
      return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE:
      return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE:
      return "CL_INVALID_VALUE";
    case CL_INVALID_BUFFER_SIZE:
      return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_MEM_OBJECT:
      return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_BUILD_OPTIONS:
      return "CL_INVALID_BUILD_OPTIONS";
    case CL_INVALID_BINARY:
      return "CL_INVALID_BINARY";
    case CL_INVALID_KERNEL_NAME:
      return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_KERNEL_ARGS:
      return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_ARG_SIZE:
      return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_WORK_GROUP_SIZE:
      return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_GLOBAL_WORK_SIZE:
      return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -1001:
      return "CL_PLATFORM_NOT_FOUND_KHR";
    case CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST:
      return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
    default:
      return "OpenCL error";
  }
}

void check(cl_int err, const char* what) {
  if (err == CL_SUCCESS) return;
  const bp_status_code_t code =
      (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY)
          ? BP_STATUS_OUT_OF_MEMORY
          : BP_STATUS_DEVICE_ERROR;
  throw sdk::Error(code, std::string("GpuOcl: ") + what + " failed: " + error_name(err) + " (" +
                             std::to_string(err) + ")");
}

namespace {

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t size = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string s(size, '\0');
  if (clGetDeviceInfo(d, what, size, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t size = 0;
  if (platform_info(p, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string s(size, '\0');
  if (platform_info(p, what, size, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

}  // namespace

std::vector<DeviceInfo> devices_of(const Driver& driver) {
  std::vector<DeviceInfo> out;
  for (cl_platform_id p : driver.platforms) {
    cl_uint n = 0;
    if (device_ids(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
    std::vector<cl_device_id> ids(n);
    if (device_ids(p, CL_DEVICE_TYPE_ALL, n, ids.data(), &n) != CL_SUCCESS) continue;
    ids.resize(std::min<size_t>(n, ids.size()));
    const std::string platform_name = platform_string(p, CL_PLATFORM_NAME);
    for (cl_device_id d : ids) {
      if (d == nullptr) continue;
      DeviceInfo info;
      info.platform = p;
      info.id = d;
      info.library = driver.library;
      info.platform_name = platform_name;
      info.name = device_string(d, CL_DEVICE_NAME);
      info.vendor = device_string(d, CL_DEVICE_VENDOR);
      info.driver_version = device_string(d, CL_DRIVER_VERSION);
      cl_device_type type = 0;
      clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof(type), &type, nullptr);
      info.gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
      info.cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
      cl_ulong mem = 0;
      clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(mem), &mem, nullptr);
      info.memory_bytes = mem;
      cl_uint cu = 0;
      clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cu), &cu, nullptr);
      info.compute_units = cu;
      out.push_back(std::move(info));
    }
  }
  return out;
}

Device::Device(const DeviceInfo& info) : info_(info) {
  cl_int err = CL_SUCCESS;
  context_ = create_context(info_.platform, info_.id, &err);
  check(err, "clCreateContext");
  queue_ = clCreateCommandQueue(context_, info_.id, 0, &err);
  if (err != CL_SUCCESS) {
    clReleaseContext(context_);
    check(err, "clCreateCommandQueue");
  }
  size_t max_group = 0;
  if (clGetDeviceInfo(info_.id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(max_group), &max_group,
                      nullptr) == CL_SUCCESS &&
      max_group > 0)
    local_size_ = std::min(local_size_, max_group);
}

Device::~Device() {
  if (queue_ != nullptr) {
    clFinish(queue_);
    clReleaseCommandQueue(queue_);
  }
  if (program_ != nullptr) clReleaseProgram(program_);
  if (context_ != nullptr) clReleaseContext(context_);
}

void Device::charge(size_t bytes) {
  const int64_t now = (used_ += int64_t(bytes));
  const uint64_t budget = budget_;
  if (budget != 0 && uint64_t(now) > budget) {
    used_ -= int64_t(bytes);
    throw sdk::Error(BP_STATUS_OUT_OF_MEMORY, "GpuOcl: out of device memory on '" + info_.name +
                                                  "': " + std::to_string(bytes) + " bytes more, " +
                                                  std::to_string(now - int64_t(bytes)) + " of " +
                                                  std::to_string(budget) + " in use (max_memory)");
  }
  counters().device_bytes += int64_t(bytes);
}

Buffer Device::allocate(size_t size, cl_mem_flags flags) {
  size = std::max<size_t>(size, 1);
  charge(size);
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateBuffer(context_, flags, size, nullptr, &err);
  if (err != CL_SUCCESS) forget(size);
  check(err, ("clCreateBuffer (" + std::to_string(size) + " bytes)").c_str());
  return Buffer(m, size, &used_);
}

Buffer Device::upload(const void* data, size_t size) {
  if (size == 0) return allocate(1, CL_MEM_READ_ONLY);
  charge(size);
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateBuffer(context_, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, size,
                            const_cast<void*>(data), &err);
  if (err != CL_SUCCESS) forget(size);
  check(err, ("clCreateBuffer (" + std::to_string(size) + " bytes, uploaded)").c_str());
  return Buffer(m, size, &used_);
}

namespace {

// The file a program binary is cached in: a hash of everything that makes
// the binary valid (device, driver, options, source).
std::string cache_file(const std::string& dir, const DeviceInfo& info, const std::string& options) {
  const std::string key = info.platform_name + "\n" + info.name + "\n" + info.driver_version +
                          "\n" + options + "\n" + kKernelSource;
  return (std::filesystem::path(dir) / ("gpuocl-" + stable_hash(key) + ".bin")).string();
}

std::string build_log(cl_program p, cl_device_id d) {
  size_t size = 0;
  clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
  std::string log(size, '\0');
  if (size > 0) clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  if (log.size() > 2000) log = log.substr(0, 2000) + "...";
  return log;
}

cl_program from_binary(cl_context ctx, cl_device_id d, const std::vector<unsigned char>& bytes,
                       const std::string& options) {
  if (bytes.empty()) return nullptr;
  const unsigned char* ptr = bytes.data();
  const size_t size = bytes.size();
  cl_int status = CL_SUCCESS, err = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(ctx, 1, &d, &size, &ptr, &status, &err);
  if (err != CL_SUCCESS || status != CL_SUCCESS) {
    if (p != nullptr) clReleaseProgram(p);
    return nullptr;
  }
  if (clBuildProgram(p, 1, &d, options.c_str(), nullptr, nullptr) != CL_SUCCESS) {
    clReleaseProgram(p);
    return nullptr;  // stale or foreign: rebuilt from source
  }
  return p;
}

cl_program load_binary(cl_context ctx, cl_device_id d, const std::string& file,
                       const std::string& options) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return nullptr;
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  return from_binary(ctx, d, bytes, options);
}

std::vector<unsigned char> binary_of(cl_program p) {
  size_t size = 0;
  if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) != CL_SUCCESS ||
      size == 0)
    return {};
  std::vector<unsigned char> bytes(size);
  unsigned char* ptr = bytes.data();
  if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) != CL_SUCCESS) return {};
  return bytes;
}

void store_binary(cl_program p, const std::string& file) {
  const std::vector<unsigned char> bytes = binary_of(p);
  const size_t size = bytes.size();
  if (size == 0) return;
  // Written whole under a temporary name, then renamed: a concurrent reader
  // sees the old file or the new one, never half of one.
  const std::string tmp = file + ".tmp" + std::to_string(reinterpret_cast<uintptr_t>(p));
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(size));
    if (!out) return;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace

cl_program Device::program(const std::string& options, const std::string& cache_dir) {
  std::lock_guard<std::mutex> lock(program_mutex_);
  if (program_ != nullptr) return program_;
  if (!program_error_.empty()) throw sdk::Error(BP_STATUS_DEVICE_ERROR, program_error_);
  std::string file;
  if (!cache_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cache_dir, ec);
    file = cache_file(cache_dir, info_, options);
    program_ = load_binary(context_, info_.id, file, options);
    if (program_ != nullptr) {
      ++counters().program_loads;
      return program_;
    }
  }
  cl_int err = CL_SUCCESS;
  const char* src = kKernelSource;
  cl_program p = clCreateProgramWithSource(context_, 1, &src, nullptr, &err);
  check(err, "clCreateProgramWithSource");
  err = clBuildProgram(p, 1, &info_.id, options.c_str(), nullptr, nullptr);
  ++counters().program_builds;
  if (err != CL_SUCCESS) {
    const std::string log = build_log(p, info_.id);
    clReleaseProgram(p);
    program_error_ = std::string("GpuOcl: building the OpenCL kernels for '") + info_.name +
                     "' with options '" + options + "' failed: " + error_name(err) +
                     (log.empty() ? "" : "; build log:\n" + log);
    throw sdk::Error(BP_STATUS_DEVICE_ERROR, program_error_);
  }
  program_ = p;
  if (!file.empty()) store_binary(p, file);
  return program_;
}

ProgramKey Device::key(const std::string& options) const {
  return ProgramKey{info_.platform_name, info_.name, info_.driver_version, options,
                    stable_hash(kKernelSource)};
}

std::vector<unsigned char> Device::program_binary() {
  std::lock_guard<std::mutex> lock(program_mutex_);
  if (program_ == nullptr) throw sdk::Error(BP_STATUS_INTERNAL, "GpuOcl: program not built");
  std::vector<unsigned char> b = binary_of(program_);
  if (b.empty())
    throw sdk::Error(BP_STATUS_DEVICE_ERROR, "GpuOcl: the driver gives no program binary");
  return b;
}

bool Device::adopt_binary(const std::vector<unsigned char>& binary, const std::string& options) {
  std::lock_guard<std::mutex> lock(program_mutex_);
  if (program_ != nullptr) return true;
  program_ = from_binary(context_, info_.id, binary, options);
  if (program_ == nullptr) return false;
  ++counters().program_loads;
  return true;
}

cl_kernel Device::create_kernel(const char* name) {
  if (program_ == nullptr) throw sdk::Error(BP_STATUS_INTERNAL, "GpuOcl: program not built");
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCreateKernel(program_, name, &err);
  check(err, (std::string("clCreateKernel ") + name).c_str());
  return k;
}

}  // namespace gpuocl
