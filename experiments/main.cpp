// The `nystrom` program: dispatches to the subcommands in experiments/ (docs/formats.md §3). Under an MPI
// launcher (mpirun -n P nystrom sweep ...) MPI is initialized for the whole run; one-process runs never touch
// MPI.
#include <optional>

#include "cli.hpp"
#include "distribute.hpp"

int main(int argc, char** argv) {
  std::optional<nystrom::cli::MpiSession> mpi;
  if (nystrom::cli::launched_by_mpi()) mpi.emplace(argc, argv);
  return nystrom::cli::run(argc, argv);
}
