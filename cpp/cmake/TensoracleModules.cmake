# The library's modules and the rule between them: a module may use (include, call) only itself,
# the modules it names in DEPENDS and, through them, the modules below those. Declare modules
# bottom-up: DEPENDS may name only modules declared before, so the declaration order is the
# layering and no circle can be declared.
#
#   tensoracle_module(<name> [FOLDER <src/...>] [DEPENDS <module>...] [SOURCES <file>...])
#     A static library tensoracle_<name> of the module's sources (in FOLDER, src/<name> by
#     default), linking its DEPENDS publicly. Without SOURCES only the rule is recorded (the CUDA
#     backend, a shared library of its own, links tensoracle_backends itself).
#   The targets, bottom-up, are in the global property TENSORACLE_MODULE_TARGETS.
#   tensoracle_check_layers()
#     After the last module: the `layers.includes` test (every #include "<module>/..." under
#     src/ names the file's own module or one below it) and, unless TENSORACLE_LAYER_CHECKS is
#     off, one shared library per module, tensoracle_layer_<name>, linked from the whole module
#     and what it depends on with --no-undefined: a call into a module above (a back edge) or
#     into one not named fails the build there, with the symbol in the message.

function(tensoracle_module name)
  cmake_parse_arguments(M "" "FOLDER" "DEPENDS;SOURCES" ${ARGN})
  if(NOT M_FOLDER)
    set(M_FOLDER src/${name})
  endif()
  set(allowed ${name})
  foreach(dep IN LISTS M_DEPENDS)
    get_property(known GLOBAL PROPERTY TENSORACLE_MODULE_ALLOWED_${dep} SET)
    if(NOT known)
      message(FATAL_ERROR "module ${name} depends on ${dep}, which is not declared before it "
                          "(declare modules bottom-up: cmake/TensoracleModules.cmake)")
    endif()
    get_property(below GLOBAL PROPERTY TENSORACLE_MODULE_ALLOWED_${dep})
    list(APPEND allowed ${below})
  endforeach()
  list(REMOVE_DUPLICATES allowed)
  set_property(GLOBAL PROPERTY TENSORACLE_MODULE_ALLOWED_${name} ${allowed})
  set_property(GLOBAL PROPERTY TENSORACLE_MODULE_FOLDER_${name} ${M_FOLDER})
  set_property(GLOBAL APPEND PROPERTY TENSORACLE_MODULE_NAMES ${name})
  if(NOT M_SOURCES)
    return()
  endif()

  set(target tensoracle_${name})
  set_property(GLOBAL PROPERTY TENSORACLE_MODULE_LIBRARY_${name} ${target})
  add_library(${target} STATIC ${M_SOURCES})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>)
  target_link_libraries(${target} PUBLIC nlohmann_json::nlohmann_json)
  foreach(dep IN LISTS M_DEPENDS)
    target_link_libraries(${target} PUBLIC tensoracle_${dep})
  endforeach()
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  set_property(GLOBAL APPEND PROPERTY TENSORACLE_MODULE_TARGETS ${target})
endfunction()

function(tensoracle_check_layers)
  get_property(names GLOBAL PROPERTY TENSORACLE_MODULE_NAMES)
  set(table "set(MODULES ${names})\n")
  foreach(name IN LISTS names)
    get_property(folder GLOBAL PROPERTY TENSORACLE_MODULE_FOLDER_${name})
    get_property(allowed GLOBAL PROPERTY TENSORACLE_MODULE_ALLOWED_${name})
    string(APPEND table "set(FOLDER_${name} ${folder})\nset(ALLOWED_${name} ${allowed})\n")
  endforeach()
  file(WRITE ${CMAKE_BINARY_DIR}/tensoracle_layers.cmake "${table}")
  if(TENSORACLE_BUILD_TESTS)
    enable_testing()
    add_test(NAME layers.includes
             COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DLAYERS=${CMAKE_BINARY_DIR}/tensoracle_layers.cmake
                     -P ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/CheckLayerIncludes.cmake)
    set_tests_properties(layers.includes PROPERTIES LABELS cpu)
  endif()

  # Off by default where a shared library cannot be linked with --no-undefined: sanitizer and
  # fuzz builds (their runtimes come with the executable) and builds of the Python extension
  # (which links every module anyway).
  set(default ON)
  if(TENSORACLE_FUZZ OR TENSORACLE_PYTHON OR CMAKE_CXX_FLAGS MATCHES "-fsanitize" OR NOT PROJECT_IS_TOP_LEVEL)
    set(default OFF)
  endif()
  option(TENSORACLE_LAYER_CHECKS "Link each module alone to catch calls into modules above it" ${default})
  if(NOT TENSORACLE_LAYER_CHECKS)
    return()
  endif()
  file(WRITE ${CMAKE_BINARY_DIR}/tensoracle_layer_check.cpp
       "// Empty: a layer check links one module whole (cmake/TensoracleModules.cmake).\n")
  foreach(name IN LISTS names)
    get_property(library GLOBAL PROPERTY TENSORACLE_MODULE_LIBRARY_${name})
    if(NOT library)
      continue()  # no library of its own (the CUDA backend links itself with --no-undefined)
    endif()
    add_library(tensoracle_layer_${name} SHARED ${CMAKE_BINARY_DIR}/tensoracle_layer_check.cpp)
    target_link_libraries(tensoracle_layer_${name} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,tensoracle_${name}>")
    target_link_options(tensoracle_layer_${name} PRIVATE -Wl,--no-undefined)
    set_target_properties(tensoracle_layer_${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/layers)
  endforeach()
endfunction()
