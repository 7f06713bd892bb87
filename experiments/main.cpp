// The `nystrom` program: dispatches to the subcommands in experiments/ (docs/formats.md §3). Under an MPI
// launcher (mpirun -n P nystrom sweep ...) MPI is initialized for the whole run; one-process runs never touch
// MPI. It first re-executes itself with the best OpenBLAS kernels the CPU runs (blas_core.hpp).
#include <optional>

#include "blas_core.hpp"
#include "cli.hpp"
#include "distribute.hpp"

int main(int argc, char** argv) {
  nystrom::cli::use_supported_blas_core(argv, "nystrom");
  std::optional<nystrom::cli::MpiSession> mpi;
  if (nystrom::cli::launched_by_mpi()) mpi.emplace(argc, argv);
  return nystrom::cli::run(argc, argv);
}
