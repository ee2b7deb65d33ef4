# tensoracle_add_cubin_plugin(NAME <target> SOURCES <files>... [CUBINS <files>...] [SYMBOL <name>])
#
# Builds the shared library <target> (a tensoracle plugin: C++17, hidden visibility, linked
# against nothing of tensoracle's but its headers, target tensoracle::plugin) from SOURCES with
# the CUBINS embedded. A generated source defines, for the plugin's code to declare and hand to
# tensoracle::cubin::Module (tensoracle/cubin_loader.hpp):
#
#   extern const tensoracle::cubin::Embedded <SYMBOL>[];    // SYMBOL: <target>_cubins by default
#   extern const std::size_t <SYMBOL>_count;
#
# Each cubin's architecture comes from its file name, <stem>.sm_<NN>[a].cubin, as
# `tensoracle cubin produce` names them; the generated source is rebuilt when a cubin changes.
#
#   find_package(tensoracle REQUIRED)       # or include() this file from the tensoracle tree
#   tensoracle_add_cubin_plugin(NAME my_plugin SOURCES plugin.cpp
#                               CUBINS cubins/kernels.sm_86.cubin cubins/kernels.sm_90.cubin)
set(_TENSORACLE_EMBED_CUBINS "${CMAKE_CURRENT_LIST_DIR}/TensoracleEmbedCubins.cmake")

function(tensoracle_add_cubin_plugin)
  cmake_parse_arguments(ARG "" "NAME;SYMBOL" "SOURCES;CUBINS" ${ARGN})
  if(NOT ARG_NAME OR NOT ARG_SOURCES)
    message(FATAL_ERROR "tensoracle_add_cubin_plugin: NAME and SOURCES are required")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tensoracle_add_cubin_plugin(${ARG_NAME}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_SYMBOL)
    set(ARG_SYMBOL "${ARG_NAME}_cubins")
  endif()
  if(NOT ARG_SYMBOL MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "tensoracle_add_cubin_plugin(${ARG_NAME}): SYMBOL '${ARG_SYMBOL}' is not a C++ identifier")
  endif()
  if(NOT TARGET tensoracle::plugin)
    message(FATAL_ERROR "tensoracle_add_cubin_plugin: target tensoracle::plugin is missing (find_package(tensoracle))")
  endif()
  set(cubins "")
  foreach(c IN LISTS ARG_CUBINS)
    get_filename_component(c "${c}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    get_filename_component(n "${c}" NAME)
    if(NOT n MATCHES "\\.sm_[0-9]+a?\\.cubin$")
      message(FATAL_ERROR "tensoracle_add_cubin_plugin(${ARG_NAME}): '${n}' is not named <stem>.sm_<NN>.cubin")
    endif()
    list(APPEND cubins "${c}")
  endforeach()
  set(generated "${CMAKE_CURRENT_BINARY_DIR}/${ARG_NAME}_cubins.cpp")
  # The list travels '|'-separated: a ';' would split the argument.
  string(REPLACE ";" "|" cubin_arg "${cubins}")
  add_custom_command(
    OUTPUT "${generated}"
    COMMAND "${CMAKE_COMMAND}" "-DOUT=${generated}" "-DSYMBOL=${ARG_SYMBOL}" "-DCUBINS=${cubin_arg}"
            -P "${_TENSORACLE_EMBED_CUBINS}"
    DEPENDS ${cubins} "${_TENSORACLE_EMBED_CUBINS}"
    COMMENT "Embedding ${ARG_NAME}'s cubins"
    VERBATIM)
  add_library(${ARG_NAME} SHARED ${ARG_SOURCES} "${generated}")
  target_link_libraries(${ARG_NAME} PRIVATE tensoracle::plugin ${CMAKE_DL_LIBS})
  set_target_properties(${ARG_NAME} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_compile_features(${ARG_NAME} PRIVATE cxx_std_17)
endfunction()
