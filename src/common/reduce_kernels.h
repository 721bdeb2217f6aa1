// Element-wise reduction kernels on the collectives' hot path. Each runs near memory bandwidth:
// the instruction set (AVX-512, AVX2+F16C, or plain x86-64) is chosen once at run time.
// float16 and bfloat16 are reduced in float32 and rounded once per output element. Integers
// wrap on overflow; scaled integers are multiplied in double and truncated toward zero.
// All functions are thread-safe and may be called concurrently on disjoint buffers.
#pragma once

#include <cstddef>

#include "ronde/types.h"

namespace ronde {

// dst[i] = dst[i] (op) src[i] for i < count. Average behaves as Sum here (the caller scales).
void reduceInto(void* dst, const void* src, size_t count, DataType type, ReduceOp op);

// dst[i] = scale * ((op) over k < num_srcs of srcs[k][i]); dst may alias srcs[0] (only srcs[0]).
// scale == 1.0 skips the multiplication. Average behaves as Sum (the caller folds 1/n into scale).
void reduceMany(void* dst, const void* const* srcs, int num_srcs, size_t count, DataType type,
                ReduceOp op, double scale);

// dst[i] = scale * src[i] (a plain memcpy when scale == 1.0); dst may equal src.
void copyScaled(void* dst, const void* src, size_t count, DataType type, double scale);

// Throws Error(kInvalidArgument) when op is meaningless for type. bool supports sum (or),
// min (and), max (or) and product (and); average of bool is invalid. Called once per
// collective by the caller, never inside the kernels.
void checkReducible(DataType type, ReduceOp op);

// The instruction set the kernels use. Tests and benchmarks may force a lower one.
enum class KernelIsa { kBaseline, kAvx2, kAvx512 };
const char* kernelIsaName(KernelIsa isa);
bool kernelIsaSupported(KernelIsa isa);  // by this CPU
KernelIsa activeKernelIsa();
// For tests and benchmarks only: not to be called while kernels run on other threads.
// Throws Error(kInvalidArgument) when the CPU lacks `isa`.
void setKernelIsaForTesting(KernelIsa isa);

}  // namespace ronde
