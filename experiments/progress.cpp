#include "progress.hpp"

#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>

namespace nystrom::cli {

namespace {

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const auto s = static_cast<long long>(seconds + 0.5);
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h";
  if (s >= 60) out << std::setw(s >= 3600 ? 2 : 1) << std::setfill('0') << (s / 60) % 60 << "m";
  out << std::setw(s >= 60 ? 2 : 1) << std::setfill('0') << s % 60 << "s";
  return out.str();
}

}  // namespace

Progress::Progress(std::int64_t total, std::int64_t already_done, bool quiet, std::ostream& out)
    : total_(total),
      done_(already_done),
      started_with_(already_done),
      quiet_(quiet),
      terminal_(isatty(STDERR_FILENO) == 1),
      out_(out),
      start_(std::chrono::steady_clock::now()),
      last_report_(start_) {}

void Progress::advance(const std::string& label) {
  ++done_;
  report(label, done_ == total_);
}

void Progress::report(const std::string& label, bool force) {
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  const double since_last = std::chrono::duration<double>(now - last_report_).count();
  if (!force && since_last < (terminal_ ? 0.1 : 5.0)) return;
  last_report_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? double(done_ - started_with_) / elapsed : 0.0;
  const double eta = rate > 0 ? double(total_ - done_) / rate : -1.0;
  std::ostringstream line;
  line << done_ << "/" << total_ << " points, " << std::fixed << std::setprecision(1) << rate << "/s, ETA "
       << format_duration(eta);
  if (terminal_) {
    constexpr int width = 30;
    const int filled = total_ > 0 ? int(width * done_ / total_) : width;
    out_ << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << line.str()
         << "  " << label.substr(0, 40) << "\x1b[K" << std::flush;
  } else {
    out_ << "nystrom: " << line.str() << " (" << label << ")\n" << std::flush;
  }
}

void Progress::finish(const std::string& summary) {
  if (quiet_) return;
  if (terminal_) out_ << "\n";
  out_ << "nystrom: " << summary << "\n" << std::flush;
}

}  // namespace nystrom::cli
