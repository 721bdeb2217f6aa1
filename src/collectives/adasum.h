// Adasum (adaptive summation, Maleki et al. 2020; Horovod's op=Adasum) as a collective over a
// Communicator. Two vectors combine as
//   a' = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b
// (a coefficient stays 1 where its vector's squared norm is below sqrt(DBL_MIN), as Horovod
// does), and the ranks combine pairwise along a binary tree: rank pairs (0,1), (2,3), ... first,
// then the pairs' results, and so on. The tree runs as Horovod's vector-halving,
// distance-doubling recursion, so each rank reduces only its share of the buffer.
#pragma once

#include <cstddef>
#include <vector>

#include "ronde/communicator.h"
#include "ronde/types.h"

namespace ronde {

// Replaces `buffer` on every rank of `comm` with the Adasum of the ranks' buffers. The buffer
// holds tensors of `tensor_counts` elements back to back (a fusion buffer): dot products and
// norms are per tensor. Types: float16, bfloat16, float32, float64 (16-bit types are combined
// in float32). The number of ranks must be a power of two.
//
// Hierarchical when the ranks span several hosts with the same number (> 1) of ranks on each
// and the number of hosts is a power of two: the ranks of a host sum their buffers, and the
// hosts combine by Adasum (Horovod's GPU Adasum does the same). All ranks must call it with
// the same counts and type; pairwise exchanges go through comm.alltoallv, so any transport works.
void adasumAllreduce(Communicator& comm, void* buffer, const std::vector<size_t>& tensor_counts,
                     DataType type);

// Why an Adasum over `ranks` ranks of `type` cannot run, or an empty string when it can.
std::string adasumUnsupported(int ranks, DataType type);

}  // namespace ronde
