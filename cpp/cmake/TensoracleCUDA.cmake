# Locates a CUDA 13 toolkit for the CUDA backend, from (in order) CUDAToolkit_ROOT /
# CUDA_HOME, the pip wheels' folder TENSORACLE_CUDA_WHEELS (nvidia/cu13 inside a
# site-packages, passed by the Makefile when the wheels are installed), or /usr/local/cuda.
# Nothing here is required: without a toolkit the CPU-only build goes on, and
# TENSORACLE_HAVE_CUDA_TOOLKIT is OFF.
set(TENSORACLE_HAVE_CUDA_TOOLKIT OFF)
set(_tensoracle_cuda_hints)
foreach(_root IN ITEMS "$ENV{CUDAToolkit_ROOT}" "$ENV{CUDA_HOME}" "${TENSORACLE_CUDA_WHEELS}" "/usr/local/cuda")
  if(_root AND EXISTS "${_root}/bin/nvcc")
    list(APPEND _tensoracle_cuda_hints "${_root}")
  endif()
endforeach()
if(_tensoracle_cuda_hints)
  list(GET _tensoracle_cuda_hints 0 CUDAToolkit_ROOT)
  find_package(CUDAToolkit 12.0 QUIET)
  if(CUDAToolkit_FOUND)
    set(TENSORACLE_HAVE_CUDA_TOOLKIT ON)
  endif()
endif()
if(TENSORACLE_HAVE_CUDA_TOOLKIT)
  message(STATUS "tensoracle: CUDA toolkit ${CUDAToolkit_VERSION} at ${CUDAToolkit_ROOT} (no CUDA backend code yet)")
else()
  message(STATUS "tensoracle: no CUDA toolkit found; building the CPU-only core")
endif()
