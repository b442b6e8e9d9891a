/* fake_gpu_icd.c — an OpenCL driver for the tests: PoCL's devices, presented
 * as GPUs (or, built with FAKE_DEVICE_TYPE, as devices of that type).
 *
 * Its clIcdGetPlatformIDsKHR opens PoCL (POCL_LIBRARY) and hands out PoCL's
 * platforms; every PoCL device gets a dispatch table of its own, PoCL's
 * with clGetDeviceInfo answering FAKE_DEVICE_TYPE for CL_DEVICE_TYPE. An
 * ICD object starts with its dispatch table, so this is all it takes for
 * GpuOcl to see a GPU that runs (on PoCL) what it is given: the test of what
 * GpuOcl does on a machine with a GPU, on a machine without one. Built as a
 * CPU, it is a driver GpuOcl does not know as CPU-only by its name. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl_icd.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#ifndef POCL_LIBRARY
#define POCL_LIBRARY "libpocl.so.2"
#endif
#ifndef FAKE_DEVICE_TYPE
#define FAKE_DEVICE_TYPE CL_DEVICE_TYPE_GPU
#endif

enum { kMaxPlatforms = 4, kMaxDevices = 16 };

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cl_platform_id platforms[kMaxPlatforms];
static cl_uint num_platforms;
static cl_icd_dispatch gpu_table;
static cl_api_clGetDeviceInfo pocl_device_info;

static cl_int CL_API_CALL device_info(cl_device_id d, cl_device_info what, size_t size, void* value,
                                      size_t* size_ret) {
  if (what != CL_DEVICE_TYPE) return pocl_device_info(d, what, size, value, size_ret);
  if (value != NULL) {
    if (size < sizeof(cl_device_type)) return CL_INVALID_VALUE;
    *(cl_device_type*)value = FAKE_DEVICE_TYPE;
  }
  if (size_ret != NULL) *size_ret = sizeof(cl_device_type);
  return CL_SUCCESS;
}

static void init(void) {
  void* pocl = dlopen(POCL_LIBRARY, RTLD_LAZY | RTLD_LOCAL);
  if (pocl == NULL) return;
  typedef void* (*ext_fn)(const char*);
  ext_fn ext = (ext_fn)dlsym(pocl, "clGetExtensionFunctionAddress");
  clIcdGetPlatformIDsKHR_fn get =
      ext != NULL ? (clIcdGetPlatformIDsKHR_fn)ext("clIcdGetPlatformIDsKHR") : NULL;
  cl_uint n = 0;
  if (get == NULL || get(kMaxPlatforms, platforms, &n) != CL_SUCCESS) return;
  if (n > kMaxPlatforms) n = kMaxPlatforms;
  for (cl_uint p = 0; p < n; ++p) {
    const cl_icd_dispatch* table = *(cl_icd_dispatch* const*)platforms[p];
    cl_device_id devices[kMaxDevices];
    cl_uint m = 0;
    if (table->clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, kMaxDevices, devices, &m) !=
        CL_SUCCESS)
      continue;
    if (m > kMaxDevices) m = kMaxDevices;
    for (cl_uint i = 0; i < m; ++i) {
      cl_icd_dispatch** slot = (cl_icd_dispatch**)devices[i];
      if (pocl_device_info == NULL) {
        gpu_table = **slot;
        pocl_device_info = gpu_table.clGetDeviceInfo;
        gpu_table.clGetDeviceInfo = device_info;
      }
      *slot = &gpu_table;
    }
  }
  num_platforms = n;
}

CL_API_ENTRY cl_int CL_API_CALL clIcdGetPlatformIDsKHR(cl_uint num_entries, cl_platform_id* out,
                                                       cl_uint* count) {
  pthread_once(&once, init);
  if ((out == NULL && count == NULL) || (out != NULL && num_entries == 0)) return CL_INVALID_VALUE;
  if (num_platforms == 0) {
    if (count != NULL) *count = 0;
    return CL_PLATFORM_NOT_FOUND_KHR;
  }
  if (count != NULL) *count = num_platforms;
  for (cl_uint i = 0; out != NULL && i < num_entries && i < num_platforms; ++i)
    out[i] = platforms[i];
  return CL_SUCCESS;
}
