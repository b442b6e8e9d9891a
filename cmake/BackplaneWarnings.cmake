# The warnings this tree builds with, and BACKPLANE_WERROR, which turns them
# into errors (OFF for users, whose compiler may warn about things ours does
# not; ON in .ci/run's builds, so a new warning fails CI). A first configure
# takes its default from the environment variable of the same name, which is
# how .ci/run reaches the build that `make test` configures.
include_guard(GLOBAL)

if(DEFINED ENV{BACKPLANE_WERROR})
  set(_bp_werror_default "$ENV{BACKPLANE_WERROR}")
else()
  set(_bp_werror_default OFF)
endif()
option(BACKPLANE_WERROR "Treat compiler warnings as errors (CI turns this on)" ${_bp_werror_default})

function(backplane_enable_warnings)
  add_compile_options(-Wall -Wextra -Wno-unused-parameter)
  if(BACKPLANE_WERROR)
    add_compile_options(-Werror)
    # GCC 12 reports -Wrestrict inside libstdc++'s char_traits for
    # `"literal" + std::string&&` at -O2/-O3 (GCC bug 105329, fixed in GCC 13):
    # no overlap exists. It stays a warning there, only not an error, and only
    # for GCC 12; every other warning remains fatal.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
       AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      add_compile_options(-Wno-error=restrict)
    endif()
  endif()
endfunction()
