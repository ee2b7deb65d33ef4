# find_package(tensoracle): the plugin author's side of tensoracle — its headers as the
# INTERFACE target tensoracle::plugin (tensoracle/plugin.h, plugin.hpp, cubin_loader.hpp) and
# tensoracle_add_cubin_plugin() (TensoracleCubinPlugin.cmake). Installed into
# <prefix>/lib/cmake/tensoracle by the C++ build and into the Python package
# (tensoracle.cmake_prefix_path()).
get_filename_component(_tensoracle_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET tensoracle::plugin)
  add_library(tensoracle::plugin INTERFACE IMPORTED)
  set_target_properties(tensoracle::plugin PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_tensoracle_prefix}/include")
endif()
include("${CMAKE_CURRENT_LIST_DIR}/TensoracleCubinPlugin.cmake")
set(tensoracle_FOUND TRUE)
