// Turns SIGINT, SIGTERM, SIGHUP and SIGCHLD into readable events on a file descriptor, so the
// launcher's one poll loop sees worker output, worker exits and Ctrl-C alike.
//
// Create it first thing in main, before any thread starts: the signals are blocked in the
// calling thread and threads created later inherit that, so no thread takes them by surprise.
// Children reset their mask before exec (process_group.cc). Destruction restores the mask.
#pragma once

#include <signal.h>

#include <vector>

#include "common/unique_fd.h"

namespace ronde::launcher {

class SignalWatcher {
 public:
  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  int fd() const { return fd_.get(); }
  // The signals that arrived since the last call, in order; SIGCHLD included.
  std::vector<int> drain();

 private:
  sigset_t previous_mask_;
  UniqueFd fd_;
};

}  // namespace ronde::launcher
