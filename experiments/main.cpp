// The `nystrom` program: dispatches to the subcommands in experiments/ (FORMATS.md §3).
#include "cli.hpp"

int main(int argc, char** argv) {
  return nystrom::cli::run(argc, argv);
}
