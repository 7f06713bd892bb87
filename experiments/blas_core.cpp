#include "blas_core.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "distribute.hpp"

namespace nystrom::cli {

namespace {

/// Set to the core a run re-executed itself for.
constexpr const char* reexec_marker = "NYSTROM_BLAS_REEXEC";

/// Whether the "flags" line of /proc/cpuinfo lists every flag of `wanted`.
bool has_flags(const std::string& flags, std::initializer_list<const char*> wanted) {
  for (const char* flag : wanted)
    if ((" " + flags + " ").find(std::string(" ") + flag + " ") == std::string::npos) return false;
  return true;
}

}  // namespace

std::string supported_blas_core() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    const std::string flags = line.substr(line.find(':') + 1);
    if (has_flags(flags, {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})) return "SkylakeX";
    if (has_flags(flags, {"avx2", "fma"})) return "Haswell";
    return "";
  }
  return "";
}

void run_under_blas_core(const std::string& core, char** argv, const char* who) {
  if (core.empty() || core == "default") return;
  const char* current = std::getenv("OPENBLAS_CORETYPE");
  if (current && core == current) return;
  const char* marker = std::getenv(reexec_marker);
  if (marker && core == marker) {
    std::cerr << who << ": warning: OPENBLAS_CORETYPE is still '" << (current ? current : "") << "'\n";
    return;
  }
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  setenv(reexec_marker, core.c_str(), 1);
  std::cout.flush();
  execv("/proc/self/exe", argv);
  std::cerr << who << ": warning: could not re-execute with OPENBLAS_CORETYPE=" << core << "\n";
}

void use_supported_blas_core(char** argv, const char* who) {
  if (std::getenv("OPENBLAS_CORETYPE") || launched_by_mpi()) return;
  run_under_blas_core(supported_blas_core(), argv, who);
}

}  // namespace nystrom::cli
