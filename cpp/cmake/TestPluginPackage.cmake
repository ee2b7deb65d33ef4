# CTest script (cmake -P): the CMake package end to end. Installs the C++ build into a fresh
# prefix, configures and builds examples/plugins/package against it with find_package(tensoracle)
# (embedding the cubins in CUBIN_DIR when given), and runs the example program with the
# resulting library. Variables: BUILD, SOURCE (examples/plugins/package), WORK, RUNNER,
# GENERATOR, MAKE_PROGRAM, CUBIN_DIR (optional), DEVICE (optional, default cpu).
foreach(v BUILD SOURCE WORK RUNNER GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "TestPluginPackage.cmake needs -D${v}=...")
  endif()
endforeach()
if(NOT DEVICE)
  set(DEVICE cpu)
endif()
include(${CMAKE_CURRENT_LIST_DIR}/TestRun.cmake)
file(REMOVE_RECURSE "${WORK}")
run("installing the C++ build" "${CMAKE_COMMAND}" --install "${BUILD}" --prefix "${WORK}/prefix")
set(configure "${CMAKE_COMMAND}" -S "${SOURCE}" -B "${WORK}/build" -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${WORK}/prefix")
if(MAKE_PROGRAM)
  list(APPEND configure "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CUBIN_DIR)
  list(APPEND configure "-DCUBIN_DIR=${CUBIN_DIR}")
endif()
run("configuring the plugin project with find_package(tensoracle)" ${configure})
run("building the plugin" "${CMAKE_COMMAND}" --build "${WORK}/build")
run("running the example with the plugin" "${RUNNER}" --plugin "${WORK}/build/librmsnorm_plugin.so" --dir "${WORK}/run"
    --device "${DEVICE}")
message("${last_output}")
