#include "cli.hpp"

#include <array>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <string_view>

#include "distribute.hpp"
#include "hdf5_handles.hpp"
#include "nystrom/error.hpp"
#include "results_files.hpp"
#include "subcommands.hpp"

#ifndef NYSTROM_VERSION
#define NYSTROM_VERSION "unknown"
#endif

namespace nystrom::cli {

namespace {

/// One subcommand: its name, a one-line summary for `nystrom --help`, and its entry point.
struct Subcommand {
  std::string_view name;
  std::string_view summary;
  int (*run)(const Invocation&);
};

/// The dispatch table: adding a subcommand is one entry here (and its declaration in subcommands.hpp).
constexpr std::array subcommands = {
    Subcommand{"sweep",
               "sweep kernels x landmarks x strategies x pseudoinverses over a dump into a results file",
               run_sweep},
    Subcommand{"spectrum", "singular-value decay of G, S, G~ (and attn) per layer and head", run_spectrum},
    Subcommand{"synth", "write a seeded synthetic attention dump", run_synth},
    Subcommand{"info", "describe a dump or a results file", run_info},
    Subcommand{"bench", "time exact vs approximate attention over N, and PnP-Nystra by step", run_bench},
};

void print_program_help(std::ostream& out) {
  out << "usage: nystrom <subcommand> [options]   (nystrom <subcommand> --help for its options)\n\n"
         "Nystrom approximations of attention kernels: errors, spectra and bounds into "
         "HDF5.\n\nsubcommands:\n";
  for (const auto& subcommand : subcommands)
    out << "  " << subcommand.name << std::string(10 - subcommand.name.size(), ' ') << subcommand.summary
        << "\n";
  out << "\nexit status: 0 success, 2 bad usage or bad input, 1 other failure\n";
}

/// Writes "nystrom <subcommand>: <message>" to stderr as one line in one write, so that the lines of several
/// processes do not interleave. Under an MPI launcher every rank reports its own failure (a file only one
/// node lacks fails only there), so ranks other than 0 name themselves.
void report(const std::string& subcommand, const std::string& message) {
  const int rank = mpi_rank();
  const std::string program =
      rank == 0 ? "nystrom " + subcommand
                : describe("nystrom ", subcommand, " (rank ", rank, " of ", mpi_size(), ")");
  std::cerr << (program + ": " + message + "\n") << std::flush;
}

}  // namespace

int run(int argc, char** argv) {
  prepare_hdf5();
  if (argc < 2) {
    print_program_help(std::cerr);
    return 2;
  }
  const std::string first = argv[1];
  if (first == "--help" || first == "-h" || first == "help") {
    print_program_help(std::cout);
    return 0;
  }
  if (first == "--version") {
    std::cout << "nystrom " << NYSTROM_VERSION << " (" << git_revision() << ")\n";
    return 0;
  }
  Invocation invocation;
  invocation.subcommand = first;
  invocation.command_line = "nystrom";
  for (int i = 1; i < argc; ++i) {
    invocation.command_line += ' ';
    invocation.command_line += shell_quote(argv[i]);
    if (i >= 2) invocation.args.emplace_back(argv[i]);
  }
  for (const auto& subcommand : subcommands) {
    if (subcommand.name != first) continue;
    try {
      return subcommand.run(invocation);
    } catch (const std::invalid_argument& error) {
      report(first, error.what());
      return 2;
    } catch (const std::bad_alloc&) {
      // Sizes beyond this machine's memory are a request that cannot be met, like bad input.
      report(
          first,
          "out of memory: the sizes asked for need more memory than this machine can allocate (nothing was "
          "written)");
      return 2;
    } catch (const std::filesystem::filesystem_error& error) {
      // The paths are the command line's: one that cannot be read or written is bad input; a full disk or a
      // failing device is not.
      report(first, describe(error.path1().string(), ": ", error.code().message()));
      const auto code = error.code();
      return code == std::errc::no_space_on_device || code == std::errc::io_error ? 1 : 2;
    } catch (const std::exception& error) {
      report(first, std::string("error: ") + error.what());
      return 1;
    }
  }
  std::cerr << "nystrom: unknown subcommand '" << first << "' (expected";
  for (const auto& subcommand : subcommands) std::cerr << " " << subcommand.name;
  std::cerr << "; see nystrom --help)\n";
  return 2;
}

}  // namespace nystrom::cli
