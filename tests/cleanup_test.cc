// A job leaves nothing behind: the shared-memory segment's name is gone as soon as every
// local rank mapped it, and no rank keeps a listening socket once the mesh is connected.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "support/multiprocess.h"

namespace ronde::testing {
namespace {

std::vector<std::string> shmEntriesOf(pid_t pid) {
  std::vector<std::string> found;
  std::string prefix = "ronde-" + std::to_string(pid) + "-";
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* entry = ::readdir(dir)) {
      if (std::string(entry->d_name).rfind(prefix, 0) == 0) found.push_back(entry->d_name);
    }
    ::closedir(dir);
  }
  return found;
}

// Socket inodes of this process that are listening TCP sockets.
int listeningSockets() {
  std::set<std::string> mine;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (dirent* entry = ::readdir(dir)) {
      char target[256] = {};
      std::string path = std::string("/proc/self/fd/") + entry->d_name;
      ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
      std::string link(target, n > 0 ? static_cast<size_t>(n) : 0);
      if (link.rfind("socket:[", 0) == 0) mine.insert(link.substr(8, link.size() - 9));
    }
    ::closedir(dir);
  }
  int listening = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      // The test's store server (once inherited through fork; a process of its own now).
      int port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      if (state == "0A" && mine.count(inode) && port != rendezvousPort()) ++listening;
    }
  }
  return listening;
}

TEST(CleanupTest, SharedMemoryNameIsRemovedOnceAllRanksMappedIt) {
  RankSpec spec;
  spec.size = 3;
  runRanks(spec, [](Communicator& comm) {
    // Local rank 0 created the segment, named after its pid.
    if (comm.rank() == 0 && !shmEntriesOf(::getpid()).empty()) {
      throw std::runtime_error("/dev/shm still holds " + shmEntriesOf(::getpid()).front());
    }
    float x = 1.0f;
    comm.allreduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    if (x != 3.0f) throw std::runtime_error("wrong allreduce result");
  });
}

TEST(CleanupTest, NoListeningSocketAfterConnecting) {
  for (TransportKind transport : {TransportKind::kTcp, TransportKind::kAuto}) {
    RankSpec spec;
    spec.size = 3;
    spec.transport = transport;
    if (transport == TransportKind::kAuto) spec.hosts = {"hostA", "hostA", "hostB"};
    runRanks(spec, [](Communicator& comm) {
      comm.barrier();
      int listening = listeningSockets();
      if (listening != 0) {
        throw std::runtime_error("rank " + std::to_string(comm.rank()) + " still has " +
                                 std::to_string(listening) + " listening socket(s)");
      }
    });
  }
}

}  // namespace
}  // namespace ronde::testing
