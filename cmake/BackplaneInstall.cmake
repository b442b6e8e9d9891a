# Install rules and packages. Included once from the top-level CMakeLists.txt,
# after every target exists.
#
# Layout under the install prefix:
#   include/backplane/*.h, *.hpp           ABI header, backend SDK, C++ API
#   bin/backplane                          the command line
#   share/backplane/conformance/{node,simple}/  ONNX node test cases for `backplane conformance`
#   lib/libbackplane.a                     the runtime (+ libbackplane_backend_CpuRef.a it links)
#   lib/libbackplane.so.0.1(.0)            the runtime as a shared library (C++ API exported only)
#   lib/python3.X/dist-packages/backplane/  the Python module (python/), when built
#   lib/backplane/backends/                dynamic backends searched by default
#     Backplane_CpuRef_backend.so
#   lib/cmake/Backplane/                   find_package(Backplane)
#     BackplaneConfig.cmake, BackplaneConfigVersion.cmake,
#     BackplaneAbiTargets.cmake            Backplane::abi (what a backend needs)
#     BackplaneRuntimeTargets.cmake        Backplane::backplane (what an app needs, static)
#     BackplaneSharedTargets.cmake         Backplane::backplane_shared (the same, shared)
#     BackplaneBackend.cmake, backplane_backend.map   backplane_add_backend()
#   lib/pkgconfig/backplane-backend.pc     Cflags for the ABI header + SDK
#   lib/pkgconfig/backplane.pc             the runtime, shared (-lbackplane)
#   lib/pkgconfig/backplane-static.pc      the runtime, static (the archives + their dependencies)
#
# Everything is relocatable: `cmake --install build --prefix DIR` works for any
# DIR, and the installed tree may be moved. The runtime finds its default
# backend directory relative to the program holding it (<prefix>/bin/../lib/
# backplane/backends, src/CMakeLists.txt), so the installed CLI searches the
# Backplane_BACKEND_DIR of its own prefix.
include(CMakePackageConfigHelpers)

set(BACKPLANE_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Backplane)
set(BACKPLANE_BACKEND_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/backplane/backends)

# The backend API version, read from the header so it is never restated.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/backplane/backend_abi.h _bp_abi_lines
     REGEX "^#define BP_API_VERSION_(MAJOR|MINOR) ")
string(REGEX REPLACE ".*MAJOR ([0-9]+)u.*" "\\1" BACKPLANE_BACKEND_API_MAJOR "${_bp_abi_lines}")
string(REGEX REPLACE ".*MINOR ([0-9]+)u.*" "\\1" BACKPLANE_BACKEND_API_MINOR "${_bp_abi_lines}")
set(BACKPLANE_BACKEND_API_VERSION "${BACKPLANE_BACKEND_API_MAJOR}.${BACKPLANE_BACKEND_API_MINOR}")

# ---- headers, CLI, libraries, backend modules -------------------------------
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/backplane
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")

install(TARGETS backplane_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The ONNX node test cases `backplane conformance` runs, found relative to the
# CLI (<bin>/../share/backplane/conformance, tools/CMakeLists.txt).
if(BACKPLANE_CONFORMANCE_DATA)
  install(DIRECTORY ${BACKPLANE_CONFORMANCE_DATA_DIR}/node ${BACKPLANE_CONFORMANCE_DATA_DIR}/simple
          DESTINATION ${CMAKE_INSTALL_DATADIR}/backplane/conformance)
endif()

# The loadable backends built in this tree go where an installed runtime looks
# by default. (The Null skeleton is an example, not a default backend.)
foreach(module Backplane_CpuRef_backend Backplane_CpuOneDnn_backend)
  if(TARGET ${module})
    install(TARGETS ${module} LIBRARY DESTINATION ${BACKPLANE_BACKEND_INSTALL_DIR})
  endif()
endforeach()

install(TARGETS backplane_abi EXPORT BackplaneAbiTargets)

# libbackplane.a links the static CpuRef privately; a static library's private
# dependencies are still needed by whoever links it, so CpuRef is installed and
# exported too (as Backplane::backend_CpuRef, not meant to be used directly).
set_target_properties(backplane_backend_CpuRef PROPERTIES EXPORT_NAME backend_CpuRef)
install(TARGETS backplane backplane_backend_CpuRef EXPORT BackplaneRuntimeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# The shared library links its dependencies itself: an application using it
# needs none of their development packages (a component of its own).
set_target_properties(backplane_shared PROPERTIES EXPORT_NAME backplane_shared)
install(TARGETS backplane_shared EXPORT BackplaneSharedTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

# ---- CMake package ----------------------------------------------------------
install(EXPORT BackplaneAbiTargets NAMESPACE Backplane::
        FILE BackplaneAbiTargets.cmake DESTINATION ${BACKPLANE_CMAKE_INSTALL_DIR})
install(EXPORT BackplaneRuntimeTargets NAMESPACE Backplane::
        FILE BackplaneRuntimeTargets.cmake DESTINATION ${BACKPLANE_CMAKE_INSTALL_DIR})
install(EXPORT BackplaneSharedTargets NAMESPACE Backplane::
        FILE BackplaneSharedTargets.cmake DESTINATION ${BACKPLANE_CMAKE_INSTALL_DIR})

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/BackplaneConfig.cmake.in
  ${PROJECT_BINARY_DIR}/BackplaneConfig.cmake
  INSTALL_DESTINATION ${BACKPLANE_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR BACKPLANE_BACKEND_INSTALL_DIR)
# 0.x: a new minor may change the C++ API, so only the same minor matches.
# (Backends are bound by the backend API version instead, see abi-versioning.md.)
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/BackplaneConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES
          ${PROJECT_BINARY_DIR}/BackplaneConfig.cmake
          ${PROJECT_BINARY_DIR}/BackplaneConfigVersion.cmake
          ${PROJECT_SOURCE_DIR}/cmake/BackplaneBackend.cmake
          ${PROJECT_SOURCE_DIR}/cmake/backplane_backend.map
        DESTINATION ${BACKPLANE_CMAKE_INSTALL_DIR})

# ---- pkg-config: the ABI header and SDK only ---------------------------------
# The prefix is computed from the .pc file's own location, so it stays right
# after `cmake --install --prefix` to another directory.
file(RELATIVE_PATH _bp_pc_to_prefix "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(${PROJECT_SOURCE_DIR}/cmake/backplane-backend.pc.in
               ${PROJECT_BINARY_DIR}/backplane-backend.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/backplane-backend.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- pkg-config: the runtime, shared and static --------------------------------
# backplane.pc: -lbackplane (the linker picks libbackplane.so). backplane-static.pc
# names the archives by path (with both installed, -lbackplane would pick the
# .so) and their dependencies: the Debian ones with a .pc of their own through
# Requires, ONNX (no .pc) by its libraries.
configure_file(${PROJECT_SOURCE_DIR}/cmake/backplane.pc.in
               ${PROJECT_BINARY_DIR}/backplane.pc @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/backplane-static.pc.in
               ${PROJECT_BINARY_DIR}/backplane-static.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/backplane.pc ${PROJECT_BINARY_DIR}/backplane-static.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
