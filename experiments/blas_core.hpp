#pragma once
/// @file blas_core.hpp
/// Which OpenBLAS kernels the program runs. OpenBLAS picks its core when the library is loaded, before
/// main, from OPENBLAS_CORETYPE or else from the CPU model; Debian 12's OpenBLAS 0.3.21 does not know recent
/// Xeons (AVX-512, AMX) and falls back to its Prescott (SSE3) kernels there, 2–5× slower. So the program
/// names the best core the CPU's flags allow and re-executes itself once with the variable set; a value the
/// user set is kept.

#include <string>

namespace nystrom::cli {

/// The best OpenBLAS core the CPU runs, from the flags of /proc/cpuinfo: "SkylakeX" with AVX-512 F, CD, BW,
/// DQ and VL, "Haswell" with AVX2 and FMA, else "" (OpenBLAS's own choice).
std::string supported_blas_core();

/// Re-executes this program (/proc/self/exe with `argv`, null-terminated) with OPENBLAS_CORETYPE = `core`
/// where the environment holds another value, at most once per core (a marker variable records the core
/// it re-executed for; a second attempt warns on stderr, naming `who`, and returns). Returns where it does
/// not re-execute; `core` empty or "default" keeps the environment.
void run_under_blas_core(const std::string& core, char** argv, const char* who);

/// At the start of a program: run_under_blas_core(supported_blas_core()) where OPENBLAS_CORETYPE is unset
/// and the process is not one rank of an MPI job (its launcher's processes are left as started).
void use_supported_blas_core(char** argv, const char* who);

}  // namespace nystrom::cli
