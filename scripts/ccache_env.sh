# Sourced by the build scripts: compile through ccache when it is installed, with paths made
# relative to the checkout, so that the four CMake trees of the test run (build/,
# build-wheel/, build-torch-pip/, build-fresh/, all one level down) share the core's objects.
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  # One name for the compiler in every tree: ccache hashes the name it is called by, and CMake
  # picks /usr/bin/c++ for some trees and /usr/bin/g++ (the same compiler) for the wheel's, so
  # nothing the wheel compiled was reused (a cold test run compiled the core twice).
  export CC=${CC:-gcc}
  export CXX=${CXX:-g++}
fi
# nvcc too, for the CUDA parts (cmake/ronde_cuda.cmake).
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
fi
