# find_package(tensoracle): the installed C++ library and the plugin author's side.
#   tensoracle::tensoracle  libtensoracle.so and the public headers (C++20): what a program that
#                           builds, caches and runs engines links (tensoracleTargets.cmake, present
#                           where the library was installed)
#   tensoracle::plugin      the plugin headers only (tensoracle/plugin.h, plugin.hpp,
#                           cubin_loader.hpp; a plugin library links nothing of tensoracle)
#   tensoracle_add_cubin_plugin()  (TensoracleCubinPlugin.cmake)
# Installed into <prefix>/lib/cmake/tensoracle by the C++ build and into the Python package
# (tensoracle.cmake_prefix_path()).
get_filename_component(_tensoracle_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET tensoracle::tensoracle AND EXISTS "${CMAKE_CURRENT_LIST_DIR}/tensoracleTargets.cmake")
  include("${CMAKE_CURRENT_LIST_DIR}/tensoracleTargets.cmake")
endif()
if(NOT TARGET tensoracle::plugin)
  add_library(tensoracle::plugin INTERFACE IMPORTED)
  set_target_properties(tensoracle::plugin PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_tensoracle_prefix}/include")
endif()
include("${CMAKE_CURRENT_LIST_DIR}/TensoracleCubinPlugin.cmake")
if(tensoracle_FIND_REQUIRED_tensoracle AND NOT TARGET tensoracle::tensoracle)
  set(tensoracle_FOUND FALSE)
  set(tensoracle_NOT_FOUND_MESSAGE "this tensoracle package (${_tensoracle_prefix}) has the plugin headers "
      "but no library: it was installed with TENSORACLE_SHARED=OFF")
  return()
endif()
set(tensoracle_FOUND TRUE)
