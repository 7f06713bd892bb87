#pragma once
/// @file subcommands.hpp
/// The subcommands of the `nystrom` program (docs/formats.md §3). Each takes the invocation and returns the
/// exit status; bad usage and bad input throw std::invalid_argument (exit 2, handled in cli.cpp). Adding a
/// subcommand is one declaration here and one entry in the table of cli.cpp.

#include "options.hpp"

namespace nystrom::cli {

/// The bundled default input of `sweep` and `spectrum`: data/minilm-gettysburg.h5 in the source tree, else
/// next to the build tree of the executable; throws std::invalid_argument when neither exists.
std::string default_dump_path();

/// `nystrom sweep`: the parameter grid over a dump into a resumable results file (sweep.cpp).
int run_sweep(const Invocation& invocation);
/// `nystrom spectrum`: singular-value decay of G, S, G̃ and attn per layer and head (spectrum.cpp).
int run_spectrum(const Invocation& invocation);
/// `nystrom synth`: seeded synthetic dumps (synth.cpp).
int run_synth(const Invocation& invocation);
/// `nystrom info FILE`: a human summary of a dump or a results file (info.cpp).
int run_info(const Invocation& invocation);
/// `nystrom bench`: exact attention against every approximation over N, and PnP-Nystra's steps (bench.cpp).
int run_bench(const Invocation& invocation);

}  // namespace nystrom::cli
