# Sourced by the build scripts: compile through ccache when it is installed, with paths made
# relative to the checkout, so that the four CMake trees of the test run (build/,
# build-wheel/, build-torch-pip/, build-fresh/, all one level down) share the core's objects.
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
fi
# nvcc too, for the CUDA parts (cmake/ronde_cuda.cmake).
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
fi
