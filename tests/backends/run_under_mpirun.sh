#!/bin/sh
# ctest's way into an MPI test: run_under_mpirun.sh BINARY MPIRUN [ARGS...] runs BINARY under
# MPIRUN, or reports it skipped when it was not built (the sanitizer jobs build only
# tests/*_test.cc, and OpenMPI is not sanitizer-clean anyway).
binary=$1
shift
if [ ! -x "$binary" ]; then
  echo "ronde-mpi-test-not-built: $binary"
  exit 0
fi
exec "$@" "$binary"
