#include "backends/mpi/mpi_types.h"

#include "common/reduce_kernels.h"

namespace ronde::mpi {
namespace {

template <DataType T, ReduceOp O>
void reduceHalves(void* in, void* inout, int* len, MPI_Datatype*) {
  reduceInto(inout, in, static_cast<size_t>(*len), T, O);
}

template <DataType T>
std::array<MPI_Op, 5> halfOps() {
  std::array<MPI_Op, 5> ops{};
  MPI_Op_create(&reduceHalves<T, ReduceOp::kSum>, 1, &ops[static_cast<size_t>(ReduceOp::kSum)]);
  ops[static_cast<size_t>(ReduceOp::kAverage)] = ops[static_cast<size_t>(ReduceOp::kSum)];
  MPI_Op_create(&reduceHalves<T, ReduceOp::kMin>, 1, &ops[static_cast<size_t>(ReduceOp::kMin)]);
  MPI_Op_create(&reduceHalves<T, ReduceOp::kMax>, 1, &ops[static_cast<size_t>(ReduceOp::kMax)]);
  MPI_Op_create(&reduceHalves<T, ReduceOp::kProduct>, 1,
                &ops[static_cast<size_t>(ReduceOp::kProduct)]);
  return ops;
}

}  // namespace

TypeMap::TypeMap() {
  MPI_Type_contiguous(2, MPI_BYTE, &half_);
  MPI_Type_commit(&half_);
  MPI_Type_contiguous(2, MPI_BYTE, &bhalf_);
  MPI_Type_commit(&bhalf_);
  auto set = [&](DataType t, MPI_Datatype m) { types_[static_cast<size_t>(t)] = m; };
  set(DataType::kUInt8, MPI_UINT8_T);
  set(DataType::kInt8, MPI_INT8_T);
  set(DataType::kInt16, MPI_INT16_T);
  set(DataType::kUInt16, MPI_UINT16_T);
  set(DataType::kInt32, MPI_INT32_T);
  set(DataType::kInt64, MPI_INT64_T);
  set(DataType::kFloat16, half_);
  set(DataType::kBFloat16, bhalf_);
  set(DataType::kFloat32, MPI_FLOAT);
  set(DataType::kFloat64, MPI_DOUBLE);
  set(DataType::kBool, MPI_C_BOOL);
  half_ops_[0] = halfOps<DataType::kFloat16>();
  half_ops_[1] = halfOps<DataType::kBFloat16>();
}

TypeMap::~TypeMap() {
  for (auto& ops : half_ops_) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      MPI_Op_free(&ops[static_cast<size_t>(op)]);
    }
  }
  MPI_Type_free(&half_);
  MPI_Type_free(&bhalf_);
}

MPI_Op TypeMap::op(DataType type, ReduceOp op) const {
  if (type == DataType::kFloat16) return half_ops_[0][static_cast<size_t>(op)];
  if (type == DataType::kBFloat16) return half_ops_[1][static_cast<size_t>(op)];
  if (type == DataType::kBool) {
    // As ronde's kernels: sum and max are "any", min and product "all".
    return op == ReduceOp::kMin || op == ReduceOp::kProduct ? MPI_LAND : MPI_LOR;
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
    case ReduceOp::kAdasum:
      break;  // not elementwise: checkReducible() refused it before any call gets here
  }
  return MPI_SUM;
}

}  // namespace ronde::mpi
