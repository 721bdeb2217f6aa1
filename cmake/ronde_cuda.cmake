# The CUDA parts of ronde: the device fusion kernels (src/cuda/*.cu) and the NCCL backend
# (src/backends/nccl/). Included by the top-level CMakeLists.txt after the `ronde` target exists.
#
#   RONDE_WITH_CUDA  AUTO (default): build them where CMake finds a CUDA compiler; ON: require
#                    it; OFF: never. Without CUDA the build is the host-only library it always was.
#   RONDE_WITH_NCCL  AUTO (default): build the NCCL backend where NCCL is found; ON: require it.
#   RONDE_NCCL_ROOT  NCCL's prefix (include/nccl.h, lib/libnccl.so*): the nvidia-nccl-cu13 wheel's
#                    folder (scripts/setup_cuda_venv.sh prints it). Searched next: the environment
#                    variable of the same name, the CUDA toolkit, then this checkout's .venv-cuda
#                    (plain builds only: a wheel must not point at a developer's venv).
#
#   RONDE_EMULATED_GPU  a test build: the CUDA host code and the NCCL backend compiled against
#                    the toolkit's and NCCL's headers, but linked to tests/emulated_gpu (CUDA
#                    and NCCL emulated on the host) instead of libcudart and libnccl, so that
#                    tests/gpu runs, with several ranks, where there is no GPU
#                    (scripts/test_emulated_gpu.sh). Needs no nvcc; never for a real build.
#
# Sets RONDE_HAVE_CUDA and RONDE_HAVE_NCCL (ON/OFF) for the rest of the build.
set(RONDE_WITH_CUDA AUTO CACHE STRING "Build the CUDA parts (src/cuda, NCCL): AUTO, ON or OFF")
set(RONDE_WITH_NCCL AUTO CACHE STRING "Build the NCCL backend (needs CUDA): AUTO, ON or OFF")
set(RONDE_NCCL_ROOT "" CACHE PATH "NCCL's prefix (include/nccl.h, lib/libnccl.so*)")
option(RONDE_EMULATED_GPU "Test build: CUDA and NCCL emulated on the host (tests/emulated_gpu)" OFF)

# auto, on and off in any case, as RONDE_WITH_MPI.
foreach(choice CUDA NCCL)
  string(TOLOWER ${choice} name)
  string(TOUPPER "${RONDE_WITH_${choice}}" ronde_with_${name})
  if(NOT ronde_with_${name} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "RONDE_WITH_${choice} must be AUTO, ON or OFF, not '${RONDE_WITH_${choice}}'")
  endif()
endforeach()
set(RONDE_HAVE_CUDA OFF)
set(RONDE_HAVE_NCCL OFF)
# Host-only code of src/cuda (the reference semantics and launch plans of the kernels) is part
# of every build: the CPU tests check it, and the GPU tests compare the kernels against it.
file(GLOB RONDE_CUDA_HOST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cc)
target_sources(ronde PRIVATE ${RONDE_CUDA_HOST_SOURCES})

set(ronde_try_cuda ON)
if(RONDE_EMULATED_GPU)
  # The headers only: what they declare comes from tests/emulated_gpu.
  find_package(CUDAToolkit REQUIRED)
  set(RONDE_HAVE_CUDA ON)
  set(ronde_try_cuda OFF)
  message(STATUS "ronde: CUDA and NCCL EMULATED on the host (a test build, no GPU code)")
elseif(ronde_with_cuda STREQUAL "OFF")
  set(ronde_try_cuda OFF)
elseif(ronde_with_cuda STREQUAL "AUTO" AND (RONDE_SANITIZE OR RONDE_FUZZ))
  # Sanitized and fuzz builds test host code; their flags are not for nvcc (ON still forces it).
  message(STATUS "ronde: no CUDA in a sanitizer or fuzz build (RONDE_WITH_CUDA=ON forces it)")
  set(ronde_try_cuda OFF)
endif()
if(ronde_try_cuda)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (H100/H200) machine code plus its PTX, which newer GPUs compile at load. One
      # architecture keeps CI's compile short; -DCMAKE_CUDA_ARCHITECTURES=native for your own GPU.
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    set(RONDE_HAVE_CUDA ON)
  elseif(ronde_with_cuda STREQUAL "ON")
    message(FATAL_ERROR "RONDE_WITH_CUDA=ON but CMake found no CUDA compiler and toolkit "
                        "(put nvcc on PATH or pass -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)")
  endif()
elseif(ronde_with_nccl STREQUAL "ON")
  message(FATAL_ERROR "RONDE_WITH_NCCL=ON needs CUDA, but RONDE_WITH_CUDA=OFF")
endif()

if(RONDE_HAVE_CUDA AND NOT ronde_with_nccl STREQUAL "OFF")
  set(nccl_hints ${RONDE_NCCL_ROOT} $ENV{RONDE_NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT})
  if(NOT SKBUILD)
    file(GLOB venv_nccl ${PROJECT_SOURCE_DIR}/.venv-cuda/lib/python3*/site-packages/nvidia/nccl)
    list(APPEND nccl_hints ${venv_nccl})
  endif()
  find_path(RONDE_NCCL_INCLUDE_DIR nccl.h HINTS ${nccl_hints} PATH_SUFFIXES include
            NO_DEFAULT_PATH)
  find_path(RONDE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  # The wheel ships libnccl.so.2 alone, without the unversioned development link.
  find_library(RONDE_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${nccl_hints}
               PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  find_library(RONDE_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(RONDE_NCCL_INCLUDE_DIR AND (RONDE_NCCL_LIBRARY OR RONDE_EMULATED_GPU))
    set(RONDE_HAVE_NCCL ON)
  elseif(RONDE_EMULATED_GPU)
    message(FATAL_ERROR "RONDE_EMULATED_GPU needs nccl.h: run scripts/setup_cuda_venv.sh")
  elseif(ronde_with_nccl STREQUAL "ON")
    message(FATAL_ERROR "RONDE_WITH_NCCL=ON but no nccl.h and libnccl were found: run "
                        "scripts/setup_cuda_venv.sh and pass -DRONDE_NCCL_ROOT=<the dir it prints>")
  endif()
elseif(ronde_with_nccl STREQUAL "ON")
  message(FATAL_ERROR "RONDE_WITH_NCCL=ON needs CUDA, which this configuration does not have")
endif()

# What the CUDA host code links to: the static runtime (libronde needs no libcudart.so at load,
# and on a machine without a driver every CUDA call returns an error, so the GPU tests skip,
# instead of failing to load), or, emulated, the toolkit's headers alone.
if(RONDE_EMULATED_GPU)
  add_library(ronde_cudart INTERFACE)
  target_include_directories(ronde_cudart INTERFACE ${CUDAToolkit_INCLUDE_DIRS})
  set(RONDE_CUDART ronde_cudart)
else()
  set(RONDE_CUDART CUDA::cudart_static)
endif()

if(RONDE_HAVE_CUDA)
  if(RONDE_EMULATED_GPU)
    file(GLOB RONDE_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/emulated_gpu/*.cc)
    add_library(ronde_cuda OBJECT ${RONDE_CUDA_SOURCES})
    target_include_directories(ronde_cuda PRIVATE ${RONDE_NCCL_INCLUDE_DIR})
    target_link_libraries(ronde_cuda PRIVATE ${RONDE_CUDART})
  else()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    file(GLOB RONDE_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/cuda/*.cu)
    add_library(ronde_cuda OBJECT ${RONDE_CUDA_SOURCES})
  endif()
  target_include_directories(ronde_cuda PRIVATE ${PROJECT_SOURCE_DIR}/include
                             ${PROJECT_SOURCE_DIR}/src)
  set_target_properties(ronde_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_sources(ronde PRIVATE $<TARGET_OBJECTS:ronde_cuda>)
  target_link_libraries(ronde PRIVATE ${RONDE_CUDART})
  # For the one host file that stubs the kernels out otherwise: the rest of the core keeps its
  # flags (and its ccache entries).
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/cuda/batched_copy_reference.cc
               ${PROJECT_SOURCE_DIR}/src/runtime/device_set.cc APPEND PROPERTY
               COMPILE_DEFINITIONS RONDE_HAVE_CUDA)
  # The runtime's CUDA devices (events, streams, pinned staging): host code calling the CUDA
  # runtime, compiled apart so that only these files see its headers.
  file(GLOB RONDE_DEVICE_CUDA_SOURCES CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/src/runtime/device_cuda*.cc)
  add_library(ronde_device_cuda OBJECT ${RONDE_DEVICE_CUDA_SOURCES})
  target_include_directories(ronde_device_cuda PRIVATE ${PROJECT_SOURCE_DIR}/include
                             ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(ronde_device_cuda PRIVATE ${RONDE_CUDART})
  set_target_properties(ronde_device_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_sources(ronde PRIVATE $<TARGET_OBJECTS:ronde_device_cuda>)
  if(NOT RONDE_EMULATED_GPU)
    message(STATUS "ronde: CUDA ${CUDAToolkit_VERSION} (architectures ${CMAKE_CUDA_ARCHITECTURES})")
  endif()
endif()

if(RONDE_HAVE_NCCL)
  file(GLOB RONDE_NCCL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backends/nccl/*.cc)
  add_library(ronde_nccl_backend OBJECT ${RONDE_NCCL_SOURCES})
  target_include_directories(ronde_nccl_backend PRIVATE ${PROJECT_SOURCE_DIR}/include
                             ${PROJECT_SOURCE_DIR}/src ${RONDE_NCCL_INCLUDE_DIR})
  target_link_libraries(ronde_nccl_backend PRIVATE ${RONDE_CUDART})
  target_sources(ronde PRIVATE $<TARGET_OBJECTS:ronde_nccl_backend>)
endif()
if(RONDE_HAVE_NCCL AND NOT RONDE_EMULATED_GPU)
  target_link_libraries(ronde PRIVATE ${RONDE_NCCL_LIBRARY})
  get_filename_component(nccl_lib_dir ${RONDE_NCCL_LIBRARY} DIRECTORY)
  # Found at run time beside a pip-installed NCCL (site-packages/nvidia/nccl/lib, next to
  # ronde/lib), else where it was found at build time.
  set_property(TARGET ronde APPEND PROPERTY BUILD_RPATH ${nccl_lib_dir})
  set_property(TARGET ronde APPEND PROPERTY INSTALL_RPATH "$ORIGIN/../../nvidia/nccl/lib"
                                                          ${nccl_lib_dir})
  message(STATUS "ronde: NCCL backend (${RONDE_NCCL_INCLUDE_DIR}, ${RONDE_NCCL_LIBRARY})")
endif()

# One file, the registry, knows which backends and device code this build has.
set(registry_defs "")
if(RONDE_HAVE_CUDA)
  list(APPEND registry_defs RONDE_HAVE_CUDA)
endif()
if(RONDE_HAVE_NCCL)
  list(APPEND registry_defs RONDE_HAVE_NCCL)
endif()
set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/backends/backend_registry.cc APPEND PROPERTY
             COMPILE_DEFINITIONS ${registry_defs})

# The GPU tests alone, for a machine with a GPU but not the CPU tests' dependencies
# (scripts/device_check.sh); with RONDE_BUILD_TESTS they come from tests/CMakeLists.txt.
option(RONDE_BUILD_GPU_TESTS "Build tests/gpu even when RONDE_BUILD_TESTS is OFF" OFF)
if(RONDE_HAVE_CUDA AND RONDE_BUILD_GPU_TESTS AND NOT RONDE_BUILD_TESTS)
  enable_testing()
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/gpu ${CMAKE_BINARY_DIR}/tests/gpu)
endif()
