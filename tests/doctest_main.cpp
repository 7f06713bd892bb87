// doctest's main for every test executable, run under the program's OpenBLAS kernels, with one guard: a run
// whose filters match no test case fails. ctest runs each case as `test_x --test-case=<name>`
// (doctest_discover_tests); a name that CMake splits (a
// ';' in it) or that no longer exists would otherwise run nothing and report "Passed".
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>

#include "blas_core.hpp"

namespace {

int cases_passing_filters = -1;  ///< set at the end of the run; -1 when no test run happened (e.g. listing)

/// A listener that records how many test cases passed the command-line filters.
struct FilterCounter : doctest::IReporter {
  explicit FilterCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    cases_passing_filters = static_cast<int>(stats.numTestCasesPassingFilters);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("filter_counter", 1, FilterCounter);

}  // namespace

int main(int argc, char** argv) {
  // The kernels the program runs (blas_core.hpp), so that its results and the tests' agree bit for bit.
  nystrom::cli::use_supported_blas_core(argv, argv[0]);
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;
  if (status == 0 && cases_passing_filters == 0) {
    std::cerr << argv[0] << ": no test case matches the filters given; nothing was tested\n";
    return 1;
  }
  return status;
}
