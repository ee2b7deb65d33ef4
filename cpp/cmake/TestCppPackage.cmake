# CTest script (cmake -P): the installed C++ library end to end, as a C++ user meets it.
# Installs the build into a fresh prefix, then builds examples/precision/linear.cpp against
# that prefix twice, with find_package(tensoracle) (examples/precision/CMakeLists.txt as a
# project of its own) and with pkg-config, and runs each program twice on one folder: the
# first run builds and saves the engines, the second must reopen them from the cache.
# Variables: BUILD, SOURCE (examples/precision), WORK, GENERATOR, MAKE_PROGRAM, CXX,
# PKG_CONFIG.
foreach(v BUILD SOURCE WORK GENERATOR CXX PKG_CONFIG)
  if(NOT ${v})
    message(FATAL_ERROR "TestCppPackage.cmake needs -D${v}=... (PKG_CONFIG: install pkgconf, "
                        "scripts/apt-packages.txt)")
  endif()
endforeach()
include(${CMAKE_CURRENT_LIST_DIR}/TestRun.cmake)
# The run's summary line ("N of 4 engines reopened from the cache, M built"), or a failure.
function(run_example label program dir)
  set(summaries "")
  foreach(round first second)
    run("${label}: running ${program} (${round} time)" "${program}" --dir "${dir}")
    if(NOT last_output MATCHES "([0-9]+ of [0-9]+ engines reopened from the cache, [0-9]+ built)")
      message(FATAL_ERROR "${label}: ${program} printed no summary:\n${last_output}")
    endif()
    list(APPEND summaries "${CMAKE_MATCH_1}")
    if(NOT last_output MATCHES "all lower precisions accepted")
      message(FATAL_ERROR "${label}: a precision failed its gate:\n${last_output}")
    endif()
  endforeach()
  list(JOIN summaries "; then " text)
  message("${label}: ${text}")
endfunction()

file(REMOVE_RECURSE "${WORK}")
set(prefix "${WORK}/prefix")
run("installing the C++ build" "${CMAKE_COMMAND}" --install "${BUILD}" --prefix "${prefix}")
file(GLOB libs "${prefix}/lib/libtensoracle.so*")
if(NOT libs)
  message(FATAL_ERROR "the install put no libtensoracle.so into ${prefix}/lib")
endif()

# 1. find_package(tensoracle) from a CMake project.
set(configure "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${WORK}/cmake-build" -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_COMPILER=${CXX}")
if(MAKE_PROGRAM)
  list(APPEND configure "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
run("configuring examples/precision with find_package(tensoracle)" ${configure})
run("building examples/precision against the installed package" "${CMAKE_COMMAND}" --build "${WORK}/cmake-build")
run_example("find_package" "${WORK}/cmake-build/example_precision_linear" "${WORK}/run-cmake")

# 2. pkg-config: a plain compiler command line; the program finds the library through the
# run path the command gives it (pkg-config's Libs has none, as is usual).
set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
run("pkg-config --cflags --libs tensoracle" "${PKG_CONFIG}" --cflags --libs tensoracle)
string(STRIP "${last_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run("pkg-config --variable=libdir tensoracle" "${PKG_CONFIG}" --variable=libdir tensoracle)
string(STRIP "${last_output}" libdir)
run("compiling examples/precision/linear.cpp with pkg-config's flags"
    "${CXX}" -std=c++20 -O1 "${SOURCE}/linear.cpp" -o "${WORK}/linear-pkgconfig" ${flags} "-Wl,-rpath,${libdir}")
run_example("pkg-config" "${WORK}/linear-pkgconfig" "${WORK}/run-pkgconfig")
