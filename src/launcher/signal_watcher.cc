#include "launcher/signal_watcher.h"

#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ronde/errors.h"

namespace ronde::launcher {

SignalWatcher::SignalWatcher() {
  sigset_t watched;
  sigemptyset(&watched);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&watched, sig);
  if (::pthread_sigmask(SIG_BLOCK, &watched, &previous_mask_) != 0) {
    throw makeError(ErrorCode::kIo, "pthread_sigmask failed");
  }
  fd_.reset(::signalfd(-1, &watched, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_) throw makeError(ErrorCode::kIo, "signalfd: ", std::strerror(errno));
  // A worker's closed pipe must not kill the launcher; writes report EPIPE instead.
  ::signal(SIGPIPE, SIG_IGN);
}

SignalWatcher::~SignalWatcher() {
  fd_.reset();
  ::pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

std::vector<int> SignalWatcher::drain() {
  std::vector<int> signals;
  signalfd_siginfo info;
  while (true) {
    ssize_t got = ::read(fd_.get(), &info, sizeof(info));
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof(info))) break;
    signals.push_back(static_cast<int>(info.ssi_signo));
  }
  return signals;
}

}  // namespace ronde::launcher
