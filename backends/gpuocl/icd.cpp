#include "gpuocl/icd.hpp"

#include <CL/cl_icd.h>
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace gpuocl {
namespace fs = std::filesystem;

namespace {

constexpr const char* kDefaultVendorPath = "/etc/OpenCL/vendors";

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The driver a vendor file names: its first line, as ocl-icd reads it.
Driver read_vendor_file(const std::string& path) {
  Driver d;
  d.file = path;
  std::ifstream in(path);
  std::string line;
  if (!in) {
    d.error = std::string("cannot read the vendor file: ") + std::strerror(errno);
  } else if (!std::getline(in, line) || line.empty()) {
    d.error = in.bad() ? "cannot read the vendor file" : "the vendor file names no library";
  } else {
    d.library = line;
    d.cpu = cpu_only_driver(line);
  }
  return d;
}

// A symbol `name` that `handle`'s own object defines (not one of its
// dependencies: a driver linking the loader would otherwise hand back the
// loader's clGetExtensionFunctionAddress, which opens every driver).
void* own_symbol(void* handle, const char* name) {
  void* sym = dlsym(handle, name);
  if (sym == nullptr) return nullptr;
  link_map* mine = nullptr;
  link_map* where = nullptr;
  Dl_info info{};
  if (dlinfo(handle, RTLD_DI_LINKMAP, &mine) != 0 ||
      dladdr1(sym, &info, reinterpret_cast<void**>(&where), RTLD_DL_LINKMAP) == 0 || where != mine)
    return nullptr;
  return sym;
}

const cl_icd_dispatch& table(const void* object) {
  return **static_cast<cl_icd_dispatch* const*>(object);
}

}  // namespace

bool cpu_only_driver(const std::string& library) {
  const std::string name = fs::path(library).filename().string();
  return name.rfind("libpocl", 0) == 0 || name.rfind("libintelocl", 0) == 0;
}

Vendors find_drivers() {
  Vendors v;
  const std::string vendors = env("OCL_ICD_VENDORS");
  std::string folder = env("OPENCL_VENDOR_PATH");
  if (folder.empty()) folder = kDefaultVendorPath;
  std::error_code ec;
  if (!vendors.empty()) {
    v.source = "OCL_ICD_VENDORS=" + vendors;
    if (!fs::is_directory(vendors, ec)) {
      // One vendor file (a bare name is looked for in the vendor folder
      // first), or a driver library.
      if (ends_with(vendors, ".icd")) {
        const std::string in_folder = folder + "/" + vendors;
        const bool bare = vendors.find('/') == std::string::npos;
        v.drivers.push_back(
            read_vendor_file(bare && fs::exists(in_folder, ec) ? in_folder : vendors));
      } else {
        Driver d;
        d.library = vendors;
        d.cpu = cpu_only_driver(vendors);
        v.drivers.push_back(std::move(d));
      }
      return v;
    }
    folder = vendors;
  } else {
    v.source = folder;
  }
  std::vector<std::string> files;
  fs::directory_iterator it(folder, ec), end;
  if (ec) {
    // No vendor folder is a machine without OpenCL drivers, not an error.
    if (ec != std::errc::no_such_file_or_directory) v.error = folder + ": " + ec.message();
    return v;
  }
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (name.size() > 4 && ends_with(name, ".icd")) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) v.drivers.push_back(read_vendor_file(f));
  return v;
}

void load_driver(Driver& d) {
  if (d.loaded || d.library.empty()) return;
  d.loaded = true;
  void* handle = dlopen(d.library.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    d.error = e != nullptr ? e : "cannot open " + d.library;
    return;
  }
  // As ocl-icd: through the driver's clGetExtensionFunctionAddress (PoCL
  // exports clIcdGetPlatformIDsKHR only that way), else the symbol.
  void* get = nullptr;
  using ExtensionFn = void* (*)(const char*);
  if (auto ext = reinterpret_cast<ExtensionFn>(own_symbol(handle, "clGetExtensionFunctionAddress")))
    get = ext("clIcdGetPlatformIDsKHR");
  if (get == nullptr) get = own_symbol(handle, "clIcdGetPlatformIDsKHR");
  if (get == nullptr) {
    d.error = "not an OpenCL driver (no clIcdGetPlatformIDsKHR)";
    return;
  }
  auto platforms = reinterpret_cast<clIcdGetPlatformIDsKHR_fn>(get);
  cl_uint n = 0;
  cl_int err = platforms(0, nullptr, &n);
  if (err == CL_SUCCESS && n > 0) {
    d.platforms.resize(n);
    err = platforms(n, d.platforms.data(), &n);
    d.platforms.resize(std::min<size_t>(n, d.platforms.size()));
  }
  d.platforms.erase(std::remove(d.platforms.begin(), d.platforms.end(), nullptr),
                    d.platforms.end());
  if (err != CL_SUCCESS) {
    d.platforms.clear();
    d.error = "clIcdGetPlatformIDsKHR failed (" + std::to_string(err) + ")";
  } else if (d.platforms.empty()) {
    d.error = "no platform";
  }
}

cl_int platform_info(cl_platform_id p, cl_platform_info what, size_t size, void* value,
                     size_t* size_ret) {
  return table(p).clGetPlatformInfo(p, what, size, value, size_ret);
}

cl_int device_ids(cl_platform_id p, cl_device_type type, cl_uint n, cl_device_id* out,
                  cl_uint* count) {
  return table(p).clGetDeviceIDs(p, type, n, out, count);
}

cl_context create_context(cl_platform_id p, cl_device_id d, cl_int* err) {
  const cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                         reinterpret_cast<cl_context_properties>(p), 0};
  return table(p).clCreateContext(props, 1, &d, nullptr, nullptr, err);
}

}  // namespace gpuocl
