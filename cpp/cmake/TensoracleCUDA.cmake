# The CUDA backend, libtensoracle_cuda.so: built when a CUDA toolkit (nvcc, the runtime) and
# cuBLASLt are found, from (in order) CUDAToolkit_ROOT / CUDA_HOME, the pip wheels' folder
# TENSORACLE_CUDA_WHEELS (nvidia/cu13 inside a site-packages: the Makefile and the Python build
# pass it), or /usr/local/cuda. cuBLASLt may come from the toolkit or from the nvidia-cublas
# wheel. Nothing here is required: without them the CPU-only core is built and
# TENSORACLE_HAVE_CUDA is OFF (TENSORACLE_CUDA=OFF skips the search; ON makes it required).
set(TENSORACLE_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set(TENSORACLE_HAVE_CUDA OFF)
if(TENSORACLE_CUDA STREQUAL "OFF")
  message(STATUS "tensoracle: CUDA backend off (TENSORACLE_CUDA=OFF)")
  return()
endif()

set(_tensoracle_cuda_hints)
foreach(_root IN ITEMS "$ENV{CUDAToolkit_ROOT}" "$ENV{CUDA_HOME}" "${TENSORACLE_CUDA_WHEELS}" "/usr/local/cuda")
  if(_root AND EXISTS "${_root}/bin/nvcc")
    list(APPEND _tensoracle_cuda_hints "${_root}")
  endif()
endforeach()
set(_tensoracle_cuda_why "no CUDA toolkit (nvcc) found")
if(_tensoracle_cuda_hints)
  list(GET _tensoracle_cuda_hints 0 CUDAToolkit_ROOT)
  find_package(CUDAToolkit 12.0 QUIET)
  if(CUDAToolkit_FOUND)
    set(_tensoracle_cuda_why "")
  endif()
endif()

if(NOT _tensoracle_cuda_why)
  set(_lt_include_hints ${CUDAToolkit_INCLUDE_DIRS})
  set(_lt_lib_hints ${CUDAToolkit_LIBRARY_DIR})
  if(TENSORACLE_CUDA_WHEELS)
    list(APPEND _lt_include_hints "${TENSORACLE_CUDA_WHEELS}/include")
    list(APPEND _lt_lib_hints "${TENSORACLE_CUDA_WHEELS}/lib")
  endif()
  find_path(TENSORACLE_CUBLASLT_INCLUDE_DIR cublasLt.h HINTS ${_lt_include_hints} NO_DEFAULT_PATH)
  # The wheel ships only the versioned name.
  find_file(TENSORACLE_CUBLASLT_LIBRARY NAMES libcublasLt.so libcublasLt.so.13 libcublasLt.so.12
            HINTS ${_lt_lib_hints} NO_DEFAULT_PATH)
  if(NOT TENSORACLE_CUBLASLT_INCLUDE_DIR OR NOT TENSORACLE_CUBLASLT_LIBRARY)
    set(_tensoracle_cuda_why "the CUDA toolkit at ${CUDAToolkit_ROOT} has no cuBLASLt (install the nvidia-cublas wheel; make setup does)")
  endif()
endif()

if(_tensoracle_cuda_why)
  if(TENSORACLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "tensoracle: TENSORACLE_CUDA=ON but ${_tensoracle_cuda_why}")
  endif()
  message(STATUS "tensoracle: no CUDA backend: ${_tensoracle_cuda_why}")
  return()
endif()

set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
# sm80 machine code runs on every sm8x GPU; sm90 machine code plus its PTX, which newer GPUs
# compile when the engine loads.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80-real 90)
endif()
enable_language(CUDA)
set(TENSORACLE_HAVE_CUDA ON)
get_filename_component(_lt_dir "${TENSORACLE_CUBLASLT_LIBRARY}" DIRECTORY)
message(STATUS "tensoracle: CUDA backend with CUDA ${CUDAToolkit_VERSION} (${CUDAToolkit_ROOT}), cuBLASLt ${TENSORACLE_CUBLASLT_LIBRARY}, architectures ${CMAKE_CUDA_ARCHITECTURES}")

# cuDNN (convolutions): only its headers at build time; the backend opens libcudnn.so.9 at run
# time and keeps its own convolution path when that fails. Headers from the nvidia-cudnn-cu13
# wheel (nvidia/cudnn beside nvidia/cu13), the toolkit, or the system (Debian-style
# /usr/include/<arch>). TENSORACLE_CUDNN=OFF leaves cuDNN out; ON makes the headers required.
set(TENSORACLE_CUDNN AUTO CACHE STRING "Use cuDNN in the CUDA backend: AUTO, ON or OFF")
set(TENSORACLE_HAVE_CUDNN OFF)
set(_cudnn_lib_dirs)
if(NOT TENSORACLE_CUDNN STREQUAL "OFF")
  set(_cudnn_hints ${CUDAToolkit_INCLUDE_DIRS})
  if(TENSORACLE_CUDA_WHEELS)
    list(PREPEND _cudnn_hints "${TENSORACLE_CUDA_WHEELS}/../cudnn/include")
  endif()
  find_path(TENSORACLE_CUDNN_INCLUDE_DIR cudnn_graph.h HINTS ${_cudnn_hints})
  if(TENSORACLE_CUDNN_INCLUDE_DIR)
    file(STRINGS "${TENSORACLE_CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_major REGEX "^#define CUDNN_MAJOR +[0-9]+")
    string(REGEX MATCH "[0-9]+" _cudnn_major "${_cudnn_major}")
  endif()
  if(TENSORACLE_CUDNN_INCLUDE_DIR AND _cudnn_major EQUAL 9)
    set(TENSORACLE_HAVE_CUDNN ON)
    get_filename_component(_cudnn_lib_dir "${TENSORACLE_CUDNN_INCLUDE_DIR}/../lib" ABSOLUTE)
    if(EXISTS "${_cudnn_lib_dir}/libcudnn.so.9")
      list(APPEND _cudnn_lib_dirs "${_cudnn_lib_dir}")
    endif()
    message(STATUS "tensoracle: cuDNN 9 headers in ${TENSORACLE_CUDNN_INCLUDE_DIR} (libcudnn.so.9 opened at run time)")
  elseif(TENSORACLE_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "tensoracle: TENSORACLE_CUDNN=ON but no cuDNN 9 headers (cudnn_graph.h) found; install the nvidia-cudnn-cu13 wheel")
  else()
    message(STATUS "tensoracle: no cuDNN 9 headers; convolutions keep im2col + cuBLASLt")
  endif()
endif()
