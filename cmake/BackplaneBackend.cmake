# backplane_add_backend(NAME <id> [VENDOR <vendor>] SOURCES <src>...
#                       [COMMON_SOURCES <src>...]
#                       [STATIC] [MODULE]
#                       [LINK_LIBRARIES <lib>...]
#                       [OUTPUT_DIRECTORY <dir>]
#                       [INSTALL [DESTINATION <dir>]]
#                       [NO_VERSION_SCRIPT])
#
# Builds one backend from one folder. Works inside the Backplane tree and,
# after find_package(Backplane), in any other project.
#
# STATIC  makes the library backplane_backend_<id> that the runtime links and
#         registers itself (only meaningful inside the Backplane tree, whose
#         static backend list is compiled in).
# MODULE  makes the loadable <vendor>_<id>_backend.so: C and C++ symbols are
#         hidden by default, and on ELF platforms a version script exports only
#         the entry points (GetBackendId, GetVersion, BackendFactory,
#         GetBackendScore) unless NO_VERSION_SCRIPT is given. The target is
#         named <vendor>_<id>_backend.
# Both may be given (one set of sources, two builds). COMMON_SOURCES are
# compiled once (position-independent, hidden symbols) into the object
# library backplane_backend_<id>_common and linked into both: put there what
# does not depend on BACKPLANE_BACKEND_MODULE (kernels), so it is not
# compiled twice; other targets may reuse $<TARGET_OBJECTS:...> of it.
#
# OUTPUT_DIRECTORY  where the module is written; default
#         ${CMAKE_BINARY_DIR}/lib/backplane/backends, the layout of an install,
#         which a Backplane build tree also searches.
# INSTALL installs the module to DESTINATION, default
#         ${CMAKE_INSTALL_LIBDIR}/backplane/backends (relative to the install
#         prefix), where an installed runtime looks by default.
#
# Everything a backend needs from Backplane is the target Backplane::abi (the
# ABI header and the header-only SDK); it links nothing of libbackplane.
include_guard(GLOBAL)
include(GNUInstallDirs)

# Captured at include time: inside the function CMAKE_CURRENT_LIST_DIR is the
# caller's directory.
set(_BACKPLANE_BACKEND_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}")

function(backplane_add_backend)
  cmake_parse_arguments(BB "STATIC;MODULE;INSTALL;NO_VERSION_SCRIPT"
                        "NAME;VENDOR;OUTPUT_DIRECTORY;DESTINATION" "SOURCES;COMMON_SOURCES;LINK_LIBRARIES" ${ARGN})
  if(BB_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "backplane_add_backend: unknown arguments: ${BB_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT BB_NAME)
    message(FATAL_ERROR "backplane_add_backend: NAME is required")
  endif()
  if(NOT BB_NAME MATCHES "^[A-Za-z0-9]+$")
    message(FATAL_ERROR "backplane_add_backend: NAME '${BB_NAME}' must match [A-Za-z0-9]+ "
                        "(it is the backend id and part of the file name)")
  endif()
  if(NOT BB_VENDOR)
    set(BB_VENDOR Backplane)
  endif()
  if(NOT BB_VENDOR MATCHES "^[A-Za-z0-9]+$")
    message(FATAL_ERROR "backplane_add_backend: VENDOR '${BB_VENDOR}' must match [A-Za-z0-9]+")
  endif()
  if(NOT BB_STATIC AND NOT BB_MODULE)
    message(FATAL_ERROR "backplane_add_backend: give STATIC, MODULE or both")
  endif()
  if(NOT BB_OUTPUT_DIRECTORY)
    set(BB_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib/backplane/backends)
  endif()
  if(NOT BB_DESTINATION)
    set(BB_DESTINATION ${CMAKE_INSTALL_LIBDIR}/backplane/backends)
  endif()
  # Inside the Backplane tree Backplane::abi is an alias of backplane_abi;
  # elsewhere it comes from find_package(Backplane).
  if(NOT TARGET Backplane::abi)
    message(FATAL_ERROR "backplane_add_backend: target Backplane::abi not found; "
                        "call find_package(Backplane REQUIRED) first")
  endif()

  if(BB_COMMON_SOURCES)
    set(common backplane_backend_${BB_NAME}_common)
    add_library(${common} OBJECT ${BB_COMMON_SOURCES})
    target_link_libraries(${common} PRIVATE Backplane::abi ${BB_LINK_LIBRARIES})
    set_target_properties(${common} PROPERTIES POSITION_INDEPENDENT_CODE ON
      C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
    list(APPEND BB_SOURCES $<TARGET_OBJECTS:${common}>)
  endif()
  if(BB_STATIC)
    add_library(backplane_backend_${BB_NAME} STATIC ${BB_SOURCES})
    target_link_libraries(backplane_backend_${BB_NAME} PUBLIC Backplane::abi PRIVATE ${BB_LINK_LIBRARIES})
    set_target_properties(backplane_backend_${BB_NAME} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
  if(BB_MODULE)
    set(target ${BB_VENDOR}_${BB_NAME}_backend)
    add_library(${target} MODULE ${BB_SOURCES})
    target_link_libraries(${target} PRIVATE Backplane::abi ${BB_LINK_LIBRARIES})
    target_compile_definitions(${target} PRIVATE BACKPLANE_BACKEND_MODULE=1)
    set_target_properties(${target} PROPERTIES
      PREFIX "" OUTPUT_NAME ${target} SUFFIX ".so"
      C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
      LIBRARY_OUTPUT_DIRECTORY ${BB_OUTPUT_DIRECTORY})
    if(NOT BB_NO_VERSION_SCRIPT AND NOT APPLE AND NOT WIN32)
      set(map ${_BACKPLANE_BACKEND_CMAKE_DIR}/backplane_backend.map)
      target_link_options(${target} PRIVATE "LINKER:--version-script=${map}")
      set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${map})
    endif()
    if(BB_INSTALL)
      install(TARGETS ${target} LIBRARY DESTINATION ${BB_DESTINATION})
    endif()
  endif()
endfunction()
