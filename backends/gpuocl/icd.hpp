// icd.hpp — the OpenCL drivers (ICDs) installed here, found as the ocl-icd
// loader finds them, and opened one at a time.
//
// GpuOcl never calls the loader's clGetPlatformIDs: ocl-icd opens every
// installed driver at its first call of that, of any function whose first
// argument is a cl_platform_id (clGetPlatformInfo, clGetDeviceIDs) and of
// clCreateContext, and opening a CPU driver changes the process (PoCL sets
// HWLOC_PLUGINS_PATH, installs LLVM's crash handlers and starts worker
// threads that stay). So GpuOcl reads the vendor files itself, opens only
// the drivers it means to use, gets their platforms through each driver's
// clIcdGetPlatformIDsKHR, and makes those platform-level calls through the
// driver's dispatch table (platform_info, device_ids, create_context below).
// Every other call takes an object a driver made (a device, context, queue,
// buffer, program, kernel) and goes through the loader's exported function,
// which dispatches through that object without initialising the loader;
// CLBlast calls only such functions.
#ifndef BACKPLANE_GPUOCL_ICD_HPP_
#define BACKPLANE_GPUOCL_ICD_HPP_

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <string>
#include <vector>

namespace gpuocl {

// One driver a vendor file names.
struct Driver {
  std::string file;     // the vendor file naming it; "" when OCL_ICD_VENDORS names the library
  std::string library;  // as the file names it (a path, or a name the dynamic linker finds)
  bool cpu = false;     // a CPU-only driver (cpu_only_driver)
  bool loaded = false;  // load_driver was called (whatever it found)
  std::string error;    // why it gives no platform; "" if it gives some or was not loaded
  std::vector<cl_platform_id> platforms;  // owned by the driver, valid for the process
};

// The drivers installed, in vendor-file name order, none loaded.
struct Vendors {
  std::string source;  // what was read: a folder, or "OCL_ICD_VENDORS=<value>"
  std::vector<Driver> drivers;
  std::string error;  // a vendor folder that cannot be read, or ""
};

// Reads the vendor files as ocl-icd does: OCL_ICD_VENDORS when set and not
// empty (a folder of *.icd files; one .icd file, by path or by name in the
// vendor folder; or else a driver library itself), otherwise the *.icd files
// of OPENCL_VENDOR_PATH or /etc/OpenCL/vendors. Each file's first line names
// a driver library. Reads the environment, never changes it.
Vendors find_drivers();

// True if the library (by its file name) is a driver for CPUs only: PoCL
// (libpocl*) or Intel's CPU runtime (libintelocl*).
bool cpu_only_driver(const std::string& library);

// Opens d.library (RTLD_LAZY | RTLD_LOCAL, as ocl-icd does) and asks it for
// its platforms; on failure says why in d.error. A driver once opened stays
// open for the life of the process: the objects it made may outlive any
// backend instance, and drivers are not written to be unloaded.
void load_driver(Driver& d);

// The driver's functions of a platform-level call, through the platform's
// (or device's) dispatch table; see the file comment.
cl_int platform_info(cl_platform_id p, cl_platform_info what, size_t size, void* value,
                     size_t* size_ret);
cl_int device_ids(cl_platform_id p, cl_device_type type, cl_uint n, cl_device_id* out,
                  cl_uint* count);
cl_context create_context(cl_platform_id p, cl_device_id d, cl_int* err);

}  // namespace gpuocl

#endif  // BACKPLANE_GPUOCL_ICD_HPP_
