#pragma once
/// @file cli.hpp
/// Entry point of the `nystrom` program: parses the subcommand and runs it. Exit status: 0 success, 2 bad
/// usage or bad input (message on stderr naming the option or dataset), 1 other failure (docs/formats.md §3).

namespace nystrom::cli {

/// Runs `nystrom <subcommand> [options]` and returns the exit status.
int run(int argc, char** argv);

}  // namespace nystrom::cli
