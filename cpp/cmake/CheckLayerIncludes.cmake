# The `layers.includes` test (cmake -DSOURCE_DIR=<cpp> -DLAYERS=<table> -P CheckLayerIncludes.cmake):
# every #include "<folder>/..." of a file under src/ must name a header of the file's own module
# or of a module below it. LAYERS is the table cmake/TensoracleModules.cmake writes: MODULES, and
# per module FOLDER_<name> (src/...) and ALLOWED_<name>. A file or header belongs to the module
# with the longest folder that contains it; the public headers (include/tensoracle) are open to all.
include(${LAYERS})

function(module_of path out)
  set(best "")
  set(best_len 0)
  foreach(m IN LISTS MODULES)
    set(folder "${FOLDER_${m}}/")
    string(LENGTH "${folder}" len)
    string(FIND "${path}" "${folder}" at)
    if(at EQUAL 0 AND len GREATER best_len)
      set(best ${m})
      set(best_len ${len})
    endif()
  endforeach()
  set(${out} "${best}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.hpp ${SOURCE_DIR}/src/*.cpp
     ${SOURCE_DIR}/src/*.cu ${SOURCE_DIR}/src/*.cuh)
set(errors "")
set(checked 0)
foreach(file IN LISTS files)
  module_of("${file}" mod)
  if(NOT mod)
    string(APPEND errors "\n  ${file}: in no module's folder (cpp/CMakeLists.txt declares the modules)")
    continue()
  endif()
  file(STRINGS ${SOURCE_DIR}/${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*" "\\1" header "${line}")
    if(header MATCHES "^tensoracle/" OR NOT header MATCHES "/")
      continue()  # a public header, or one beside the file
    endif()
    module_of("src/${header}" target)
    math(EXPR checked "${checked} + 1")
    if(NOT target)
      string(APPEND errors "\n  ${file}: #include \"${header}\" is in no module")
    elseif(NOT target IN_LIST ALLOWED_${mod})
      string(APPEND errors "\n  ${file} (module ${mod}): #include \"${header}\" reaches up into module ${target}; "
                           "${mod} may use ${ALLOWED_${mod}}")
    endif()
  endforeach()
endforeach()
if(errors)
  message(FATAL_ERROR "includes across the module layers:${errors}")
endif()
list(LENGTH files count)
message(STATUS "layers: ${checked} includes in ${count} files follow the module layers")
