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
  endif()
endfunction()
