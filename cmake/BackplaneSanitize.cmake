# BACKPLANE_SANITIZE: build everything this project compiles (the runtime, the
# backends built here, the tools and the tests) with sanitizers.
#
#   -DBACKPLANE_SANITIZE=address,undefined   ASan + UBSan (LeakSanitizer included)
#   -DBACKPLANE_SANITIZE=thread              TSan
#   (empty, the default)                     no instrumentation
#
# Only our code is instrumented; Debian's libraries (oneDNN, libgomp,
# protobuf, ...) are not. What that means for each sanitizer, and the run-time
# options CI uses, is in tests/sanitizers/README.md.
#
# Every report is fatal: UBSan does not recover (-fno-sanitize-recover=all),
# ASan and TSan stop the process at the first report when run with
# tests/sanitizers/*.options (.ci/run sets them).
include_guard(GLOBAL)

set(BACKPLANE_SANITIZE "" CACHE STRING
    "Sanitizers to build with: address,undefined | thread | empty for none")
set_property(CACHE BACKPLANE_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

function(backplane_enable_sanitizers)
  if(BACKPLANE_SANITIZE STREQUAL "")
    return()
  endif()
  string(REPLACE "," ";" wanted "${BACKPLANE_SANITIZE}")
  list(SORT wanted)
  if(wanted STREQUAL "address;undefined" OR wanted STREQUAL "address"
     OR wanted STREQUAL "undefined")
    set(flags -fsanitize=${BACKPLANE_SANITIZE})
    if("undefined" IN_LIST wanted)
      list(APPEND flags -fno-sanitize-recover=all)
    endif()
    if("address" IN_LIST wanted AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      # GCC's manual: "sanitizers tend to increase the rate of false positive
      # warnings, most notably those around -Wmaybe-uninitialized". GCC 12
      # with ASan reports std::regex's own _State moves (libstdc++'s
      # regex_automaton.h, in src/registry/dynamic_loader.cpp) as such. The
      # Release build keeps the warning, with -Werror in CI.
      list(APPEND flags -Wno-maybe-uninitialized)
    endif()
  elseif(wanted STREQUAL "thread")
    set(flags -fsanitize=thread)
  else()
    message(FATAL_ERROR "BACKPLANE_SANITIZE='${BACKPLANE_SANITIZE}': give address,undefined, "
                        "thread, or nothing (ASan and TSan cannot be combined)")
  endif()
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "BACKPLANE_SANITIZE needs GCC or Clang")
  endif()
  # Frame pointers and line tables, so every report has a readable stack.
  list(APPEND flags -fno-omit-frame-pointer -g1)
  add_compile_options(${flags})
  add_link_options(${flags})
  message(STATUS "Backplane: instrumented with ${flags}")
endfunction()
