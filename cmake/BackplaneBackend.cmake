# backplane_add_backend(NAME <id> VENDOR <vendor> SOURCES ... [STATIC] [MODULE]
#                       [LINK_LIBRARIES ...])
#
# Builds one backend from one folder. STATIC makes the library
# backplane_backend_<id> that the runtime links and registers itself; MODULE
# makes the loadable <vendor>_<id>_backend.so that exports only the three entry
# points (plus GetBackendScore). Both may be given.
function(backplane_add_backend)
  cmake_parse_arguments(BB "STATIC;MODULE" "NAME;VENDOR" "SOURCES;LINK_LIBRARIES" ${ARGN})
  if(NOT BB_NAME)
    message(FATAL_ERROR "backplane_add_backend: NAME is required")
  endif()
  if(NOT BB_VENDOR)
    set(BB_VENDOR Backplane)
  endif()
  if(BB_STATIC)
    add_library(backplane_backend_${BB_NAME} STATIC ${BB_SOURCES})
    target_link_libraries(backplane_backend_${BB_NAME} PUBLIC backplane_abi PRIVATE ${BB_LINK_LIBRARIES})
    set_target_properties(backplane_backend_${BB_NAME} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
  if(BB_MODULE)
    set(target ${BB_VENDOR}_${BB_NAME}_backend)
    add_library(${target} MODULE ${BB_SOURCES})
    target_link_libraries(${target} PRIVATE backplane_abi ${BB_LINK_LIBRARIES})
    target_compile_definitions(${target} PRIVATE BACKPLANE_BACKEND_MODULE=1)
    set_target_properties(${target} PROPERTIES
      PREFIX "" OUTPUT_NAME ${target} SUFFIX ".so"
      CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib/backplane/backends)
  endif()
endfunction()
