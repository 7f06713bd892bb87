#pragma once
/// @file threads.hpp
/// Thread control: OpenMP for the library's own loops, OpenBLAS kept single-threaded inside OpenMP regions
/// (oversubscription measured 4x slower on the 2-core development machine).

#include <string>

namespace nystrom {

/// Sets the number of OpenMP threads (and OpenBLAS threads for calls made outside OpenMP regions); throws
/// std::invalid_argument naming `threads` when it is < 1 (callers map a CLI "0: the default" themselves).
void set_threads(int threads);

/// Number of OpenMP threads the library's parallel loops use.
int threads();

/// Name of the OpenBLAS core kernel set in use (e.g. "SkylakeX", "Haswell"), or "Eigen" without OpenBLAS.
std::string blas_core();

/// RAII guard: while alive, OpenBLAS runs single-threaded (use around `#pragma omp parallel` regions that
/// call BLAS). Cheap (a pair of openblas_set_num_threads calls measured 3 ns); what costs is waking the
/// pthread OpenBLAS workers, which then spin for a while and take cores from the OpenMP threads, so a
/// pipeline of short parallel steps should make every BLAS call under the guard.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int previous_;
};

}  // namespace nystrom
