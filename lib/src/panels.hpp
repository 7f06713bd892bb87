#pragma once
/// @file panels.hpp
/// Row panels of the thin N×r steps of the low-rank methods (internal to the library): PnP-Nystra Algorithm
/// 1, Performer's and Linformer's products. A panel's block is used right after it is formed, while it is
/// still in L1/L2. The panels are the same for any thread count, and every loop over them hands them out by
/// one detail::PanelSchedule (each thread keeps its own rows from loop to loop, and a thread that another
/// process keeps off its core leaves its panels to the others). Sums over N are added panel by panel in the
/// same order, so results are the same bits on 1 and 2 threads.

#include <algorithm>

#include "nystrom/threads.hpp"
#include "nystrom/types.hpp"

namespace nystrom::detail {

/// Rows per panel.
constexpr Index thin_panel_rows = 256;

/// Panel `index`: rows [first, first + rows).
struct Panel {
  Index index = 0;
  Index first = 0;
  Index rows = 0;
};

/// The panels of n rows.
inline Index panel_count(Index n) {
  return (n + thin_panel_rows - 1) / thin_panel_rows;
}

/// Panel p of n rows.
inline Panel panel_of(Index p, Index n) {
  const Index first = p * thin_panel_rows;
  return {p, first, std::min(thin_panel_rows, n - first)};
}

/// body(panel) for every panel of n rows, in an OpenMP region of workers_for(panels, work) threads (one below
/// parallel_work multiply-adds) with single-threaded BLAS. `body` must not throw.
template <class Body>
void for_each_panel(Index n, double work, const Body& body) {
  const Index panels = panel_count(n);
  const int workers = workers_for(panels, work);
  PanelSchedule schedule(panels, workers);
  const SingleThreadedBlas single_threaded_blas;
#pragma omp parallel num_threads(workers)
  schedule.for_each([&](Index p) { body(panel_of(p, n)); });
}

/// Σ_p term(panel p, block_p) over the panels of n rows, where term writes panel p's r×c block: the terms
/// are formed in parallel as by for_each_panel and added in panel order.
template <class T, class Term>
Matrix<T> sum_over_panels(Index n, Index r, Index c, double work, const Term& term) {
  const Index panels = panel_count(n);
  Matrix<T> terms(r, c * panels);
  for_each_panel(n, work, [&](const Panel& panel) { term(panel, terms.middleCols(panel.index * c, c)); });
  Matrix<T> sum = Matrix<T>::Zero(r, c);
  for (Index p = 0; p < panels; ++p) sum += terms.middleCols(p * c, c);
  return sum;
}

}  // namespace nystrom::detail
