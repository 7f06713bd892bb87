#include "signals.hpp"

#include <csignal>

namespace nystrom::cli {

namespace {

volatile std::sig_atomic_t stop_signal = 0;

extern "C" void request_stop(int signal) {
  stop_signal = signal;
}

struct sigaction previous_int {
}, previous_term{};

}  // namespace

StopOnSignals::StopOnSignals() {
  stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = request_stop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &previous_int);
  sigaction(SIGTERM, &action, &previous_term);
}

StopOnSignals::~StopOnSignals() {
  sigaction(SIGINT, &previous_int, nullptr);
  sigaction(SIGTERM, &previous_term, nullptr);
}

int StopOnSignals::received() const {
  return stop_signal;
}

}  // namespace nystrom::cli
