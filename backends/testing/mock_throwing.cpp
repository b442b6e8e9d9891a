// mock_throwing.cpp — a backend whose entry points throw C++ exceptions, which
// the ABI forbids: the loader must contain them and skip the file.
//
//   MOCK_THROW_IN_ID       GetBackendId throws std::runtime_error
//   MOCK_THROW_IN_FACTORY  BackendFactory throws std::runtime_error
//
// The entry points are deliberately not noexcept (that is the defect modelled).
#include <backplane/backend_abi.h>

#include <stdexcept>

extern "C" BP_EXPORT const char* GetBackendId(void) {
#if defined(MOCK_THROW_IN_ID)
  throw std::runtime_error("mock GetBackendId throws");
#else
  return "MockThrow";
#endif
}

extern "C" BP_EXPORT void GetVersion(uint32_t* outMajor, uint32_t* outMinor) {
  *outMajor = BP_API_VERSION_MAJOR;
  *outMinor = BP_API_VERSION_MINOR;
}

extern "C" BP_EXPORT void* BackendFactory(void) {
#if defined(MOCK_THROW_IN_FACTORY)
  throw std::runtime_error("mock BackendFactory throws");
#else
  return nullptr;
#endif
}
