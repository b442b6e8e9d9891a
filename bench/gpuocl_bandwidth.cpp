// gpuocl_bandwidth — host<->device transfer bandwidth of the OpenCL device
// GpuOcl uses (the one named DEVICE, as `backplane backends --json` names
// GpuOcl's selected device; else the first GPU, else the first device),
// through the calls GpuOcl's copy slots make: a blocking
// clEnqueueWriteBuffer (copy_to_device) and clEnqueueReadBuffer
// (copy_from_device) between pageable host memory and a CL_MEM_READ_WRITE
// buffer. Part of `make bench` (bench/gpuocl_bench.py).
//
//   backplane_gpuocl_bandwidth [REPS [DEVICE]]
//
// Prints one JSON object: the device, and per size the median GB/s of REPS
// timed copies each way (after one untimed copy).
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what, cl_int err) {
  std::fprintf(stderr, "gpuocl_bandwidth: %s failed (%d)\n", what.c_str(), err);
  std::exit(1);
}

std::string info_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  clGetDeviceInfo(d, what, 0, nullptr, &n);
  std::string s(n, '\0');
  clGetDeviceInfo(d, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s)
    if (c == '"' || c == '\\') c = ' ';
  return s;
}

cl_device_id choose_device(const char* name) {
  cl_uint np = 0;
  if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) die("clGetPlatformIDs", -1);
  std::vector<cl_platform_id> platforms(np);
  clGetPlatformIDs(np, platforms.data(), nullptr);
  std::vector<cl_device_id> all;
  for (cl_platform_id p : platforms) {
    cl_uint n = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
    std::vector<cl_device_id> ids(n);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, ids.data(), nullptr);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  if (all.empty()) die("finding an OpenCL device", -1);
  if (name != nullptr)
    for (cl_device_id d : all)
      if (info_string(d, CL_DEVICE_NAME) == name) return d;
  for (cl_device_id d : all) {
    cl_device_type t = 0;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof(t), &t, nullptr);
    if (t & CL_DEVICE_TYPE_GPU) return d;
  }
  return all.front();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  cl_device_id dev = choose_device(argc > 2 ? argv[2] : nullptr);
  cl_int err = CL_SUCCESS;
  cl_context ctx = clCreateContext(nullptr, 1, &dev, nullptr, nullptr, &err);
  if (err != CL_SUCCESS) die("clCreateContext", err);
  cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
  if (err != CL_SUCCESS) die("clCreateCommandQueue", err);
  std::printf("{\"device\": \"%s\", \"driver\": \"%s\", \"reps\": %d, \"sizes\": [",
              info_string(dev, CL_DEVICE_NAME).c_str(), info_string(dev, CL_DRIVER_VERSION).c_str(),
              reps);
  const size_t sizes[] = {size_t(64) << 10, size_t(1) << 20, size_t(16) << 20, size_t(64) << 20};
  bool first = true;
  for (size_t bytes : sizes) {
    std::vector<unsigned char> host(bytes, 1), back(bytes, 0);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, nullptr, &err);
    if (err != CL_SUCCESS) die("clCreateBuffer", err);
    std::vector<double> up, down;
    for (int r = 0; r <= reps; ++r) {
      using clock = std::chrono::steady_clock;
      auto t0 = clock::now();
      err = clEnqueueWriteBuffer(q, buf, CL_TRUE, 0, bytes, host.data(), 0, nullptr, nullptr);
      if (err != CL_SUCCESS) die("clEnqueueWriteBuffer", err);
      auto t1 = clock::now();
      err = clEnqueueReadBuffer(q, buf, CL_TRUE, 0, bytes, back.data(), 0, nullptr, nullptr);
      if (err != CL_SUCCESS) die("clEnqueueReadBuffer", err);
      auto t2 = clock::now();
      if (r == 0) continue;  // untimed first copy (first touch of the pages)
      up.push_back(double(bytes) / std::chrono::duration<double>(t1 - t0).count() / 1e9);
      down.push_back(double(bytes) / std::chrono::duration<double>(t2 - t1).count() / 1e9);
    }
    if (back != host) die("the copy round trip (data differ)", -1);
    clReleaseMemObject(buf);
    std::printf("%s{\"bytes\": %zu, \"to_device_gbps\": %.3f, \"from_device_gbps\": %.3f}",
                first ? "" : ", ", bytes, median(up), median(down));
    first = false;
  }
  std::printf("]}\n");
  clReleaseCommandQueue(q);
  clReleaseContext(ctx);
  return 0;
}
