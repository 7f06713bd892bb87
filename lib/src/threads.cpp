#include "nystrom/threads.hpp"

#include <omp.h>

#include "nystrom/error.hpp"

#ifdef NYSTROM_WITH_OPENBLAS
extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
char* openblas_get_corename(void);
}
#endif

namespace nystrom {

void set_threads(int threads) {
  require(threads >= 1, describe("set_threads: threads = ", threads, " must be >= 1"));
  omp_set_num_threads(threads);
#ifdef NYSTROM_WITH_OPENBLAS
  openblas_set_num_threads(1);
#endif
}

int threads() {
  return omp_get_max_threads();
}

std::string blas_core() {
#ifdef NYSTROM_WITH_OPENBLAS
  return openblas_get_corename();
#else
  return "Eigen";
#endif
}

BlasThreads::BlasThreads(int count) {
  require(count >= 1, describe("BlasThreads: count = ", count, " must be >= 1"));
#ifdef NYSTROM_WITH_OPENBLAS
  previous_ = openblas_get_num_threads();
  openblas_set_num_threads(count);
#else
  previous_ = 1;
#endif
}

BlasThreads::~BlasThreads() {
#ifdef NYSTROM_WITH_OPENBLAS
  openblas_set_num_threads(previous_);
#endif
}

}  // namespace nystrom
