// kernels.hpp — GpuOcl's OpenCL C source (kernels_cl.cpp).
#ifndef BACKPLANE_GPUOCL_KERNELS_HPP_
#define BACKPLANE_GPUOCL_KERNELS_HPP_

namespace gpuocl {

// Every kernel of the backend in one OpenCL C program, built once per device
// and set of options (and cached; see device.hpp).
extern const char* const kKernelSource;

}  // namespace gpuocl

#endif  // BACKPLANE_GPUOCL_KERNELS_HPP_
