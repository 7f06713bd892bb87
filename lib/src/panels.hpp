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

/// One r×c term per panel of n rows, each written by its panel's thread, and their sum in panel order.
template <class T>
class PanelTerms {
 public:
  PanelTerms(Index n, Index r, Index c) : panels_(panel_count(n)), columns_(c), terms_(r, c * panels_) {}

  /// The block panel `panel` writes.
  auto term(const Panel& panel) { return terms_.middleCols(panel.index * columns_, columns_); }

  /// Σ_p term_p, added in panel order.
  Matrix<T> sum() const {
    Matrix<T> total = Matrix<T>::Zero(terms_.rows(), columns_);
    for (Index p = 0; p < panels_; ++p) total += terms_.middleCols(p * columns_, columns_);
    return total;
  }

 private:
  Index panels_;
  Index columns_;
  Matrix<T> terms_;
};

/// Σ_p term(panel p, block_p) over the panels of n rows, where term writes panel p's r×c block: the terms
/// are formed in parallel as by for_each_panel and added in panel order.
template <class T, class Term>
Matrix<T> sum_over_panels(Index n, Index r, Index c, double work, const Term& term) {
  PanelTerms<T> terms(n, r, c);
  for_each_panel(n, work, [&](const Panel& panel) { term(panel, terms.term(panel)); });
  return terms.sum();
}

}  // namespace nystrom::detail
