// Allreduce of large buffers through peers' memory (cross-memory attach), instead of staging
// every rank's input through its slot and the reduced chunks through the result area.
// Per rank and byte of the buffer, with n ranks (C bytes):
//   staged:  reads (3n-1)/n C, writes 2 C  (copy in, reduce share, copy whole chunk out)
//   direct:  reads (2n-1)/n C, writes 1 C  (reduce own share from peers' inputs, write it
//            into peers' outputs)
// Two synchronisations per call, not two per chunk: addresses published; every rank's share
// written everywhere (so none returns while a peer still reads its input or writes its
// output). A rank may write its reduced share into a peer's output at once, even in place:
// that region of the peer's buffer is read by no one but the writer, which is done with it.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/shm_collectives.h"
#include "common/reduce_kernels.h"
#include "transport/shm/cross_memory.h"

namespace ronde {
namespace {

struct Addresses {
  uint64_t in;
  uint64_t out;
};

// Peers' pieces are read into a private block per peer that stays in this core's cache
// while it is reduced.
constexpr size_t kBlockBytes = 64 * 1024;

struct Share {
  size_t start;
  size_t count;
};

Share shareOf(size_t count, int n, int rank) {
  const size_t base = count / static_cast<size_t>(n);
  const size_t extra = count % static_cast<size_t>(n);
  const auto r = static_cast<size_t>(rank);
  return {base * r + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

}  // namespace

size_t shmDirectScratchBytes(int local_size) {
  return kBlockBytes * static_cast<size_t>(std::max(local_size, 1));
}

void shmDirectAllreduce(const ShmOp& op, uint64_t op_slot, const void* in, void* out, size_t count,
                        DataType type, ReduceOp reduce, double postscale) {
  ShmArena& arena = *op.arena;
  const int n = arena.localSize();
  const int me = arena.localRank();
  const size_t elem = dataTypeSize(type);

  const uint64_t first = arena.nextStep();
  auto* mine = reinterpret_cast<Addresses*>(arena.slot(me, first));
  mine->in = reinterpret_cast<uintptr_t>(in);
  mine->out = reinterpret_cast<uintptr_t>(out);
  arena.arrive(first);
  arena.waitAllArrived(first, op.wait);
  shmCheckDescriptors(op, op_slot);
  // Read now: the slot is rewritten two steps on, after every rank passed the last step.
  std::vector<Addresses> peers(static_cast<size_t>(n));
  std::vector<int> pids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    peers[static_cast<size_t>(i)] = *reinterpret_cast<const Addresses*>(arena.slot(i, first));
    pids[static_cast<size_t>(i)] = arena.pid(i);
  }

  // This rank's share, block by block: peers' pieces into the private blocks, then one
  // reduction of all n sources in rank order into the output.
  const Share share = shareOf(count, n, me);
  const size_t block = std::max<size_t>(1, kBlockBytes / elem);
  std::unique_ptr<char[]> owned;
  char* blocks = op.direct_blocks;
  if (blocks == nullptr) {
    owned.reset(new char[shmDirectScratchBytes(n)]);
    blocks = owned.get();
  }
  std::vector<const void*> srcs(static_cast<size_t>(n));
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  for (size_t done = 0; done < share.count; done += block) {
    const size_t len = std::min(block, share.count - done);
    const size_t at = (share.start + done) * elem;
    for (int i = 0; i < n; ++i) {
      const auto slot = static_cast<size_t>(i);
      if (i == me) {
        srcs[slot] = src + at;
        continue;
      }
      char* piece = blocks + slot * kBlockBytes;
      readPeerMemory(pids[slot], reinterpret_cast<const char*>(peers[slot].in) + at, piece,
                     len * elem, arena.memberName(i));
      srcs[slot] = piece;
    }
    reduceMany(dst + at, srcs.data(), n, len, type, reduce, postscale);
  }
  // Peers in rank order from this one, so that no rank's output is written by all at once.
  if (share.count > 0) {
    for (int k = 1; k < n; ++k) {
      const int i = (me + k) % n;
      const size_t at = share.start * elem;
      writePeerMemory(pids[static_cast<size_t>(i)],
                      reinterpret_cast<char*>(peers[static_cast<size_t>(i)].out) + at, dst + at,
                      share.count * elem, arena.memberName(i));
    }
  }
  const uint64_t last = arena.nextStep();
  arena.arrive(last);
  arena.waitAllArrived(last, op.wait);
}

bool shmProbeDirectRead(ShmArena& arena, const ShmWait& wait) {
  const int n = arena.localSize();
  const int me = arena.localRank();
  // A word of this process that each peer must read back exactly, and one word per peer
  // that it must be able to write.
  const auto pattern = [](int rank) { return 0x726f6e6465000000ULL | static_cast<uint64_t>(rank); };
  std::vector<uint64_t> words(static_cast<size_t>(n) + 1, 0);
  words[0] = pattern(me);
  const uint64_t first = arena.nextStep();
  *reinterpret_cast<uint64_t*>(arena.slot(me, first)) = reinterpret_cast<uintptr_t>(words.data());
  arena.arrive(first);
  arena.waitAllArrived(first, wait);
  bool ok = true;
  for (int i = 0; i < n && ok; ++i) {
    if (i == me) continue;
    auto* theirs = reinterpret_cast<uint64_t*>(*reinterpret_cast<const uint64_t*>(arena.slot(i, first)));
    uint64_t got = 0;
    const uint64_t sent = pattern(me);
    ok = tryReadPeerMemory(arena.pid(i), theirs, &got, sizeof(got)) && got == pattern(i) &&
         tryWritePeerMemory(arena.pid(i), theirs + 1 + me, &sent, sizeof(sent));
  }
  // Every write has landed once all arrived: check what the peers wrote here, then share
  // the verdicts, so that all ranks choose the same algorithm.
  const uint64_t second = arena.nextStep();
  arena.arrive(second);
  arena.waitAllArrived(second, wait);
  for (int i = 0; i < n && ok; ++i) {
    if (i != me) ok = words[static_cast<size_t>(i) + 1] == pattern(i);
  }
  const uint64_t third = arena.nextStep();
  *reinterpret_cast<uint8_t*>(arena.slot(me, third)) = ok ? 1 : 0;
  arena.arrive(third);
  arena.waitAllArrived(third, wait);
  bool all = true;
  for (int i = 0; i < n; ++i)
    all = all && *reinterpret_cast<const uint8_t*>(arena.slot(i, third)) != 0;
  // The verdicts' slots are rewritten two steps on; every rank must have read them first.
  const uint64_t fourth = arena.nextStep();
  arena.arrive(fourth);
  arena.waitAllArrived(fourth, wait);
  return all;
}

}  // namespace ronde
