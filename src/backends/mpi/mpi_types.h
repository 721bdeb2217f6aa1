// ronde's element types and reductions as MPI sees them. float16 and bfloat16 have no MPI type
// in MPI 3.1: they travel as 2-byte types of their own, reduced by user-defined ops that call
// ronde's kernels (float32 arithmetic, rounded per step).
#pragma once

#include <mpi.h>

#include <array>

#include "ronde/types.h"

namespace ronde::mpi {

// Owns the derived types and user ops; built and freed with one communicator, on its thread.
class TypeMap {
 public:
  TypeMap();
  ~TypeMap();
  TypeMap(const TypeMap&) = delete;
  TypeMap& operator=(const TypeMap&) = delete;

  MPI_Datatype type(DataType type) const { return types_[static_cast<size_t>(type)]; }
  // The op for `op` on `type`; Average maps to the sum (the caller scales). Call only after
  // checkReducible(type, op).
  MPI_Op op(DataType type, ReduceOp op) const;

 private:
  std::array<MPI_Datatype, kNumDataTypes> types_{};
  MPI_Datatype half_ = MPI_DATATYPE_NULL;
  MPI_Datatype bhalf_ = MPI_DATATYPE_NULL;
  // [0]: float16, [1]: bfloat16; by ReduceOp (Average reuses Sum's).
  std::array<std::array<MPI_Op, 5>, 2> half_ops_{};
};

}  // namespace ronde::mpi
