#include "resume_store.hpp"

#include <algorithm>
#include <filesystem>

#include "nystrom/error.hpp"

namespace nystrom::cli {

namespace fs = std::filesystem;

ResumeStore::ResumeStore(std::string output, std::string input, std::vector<RunSetting> settings,
                         std::string group, std::vector<Column> columns, AttributeWriter write_attributes)
    : output_(std::move(output)),
      partial_(output_ + ".partial"),
      input_(std::move(input)),
      settings_(std::move(settings)),
      group_(std::move(group)),
      columns_(std::move(columns)),
      write_attributes_(std::move(write_attributes)) {
  require_replaceable(output_, kind());
  output_exists_ = fs::exists(output_);
  if (output_exists_)
    for (const auto& row : stored_rows(output_)) done_.insert(row_key(columns_, row));
  partial_exists_ = fs::exists(partial_);
  if (!partial_exists_) return;
  try {
    for (const auto& row : stored_rows(partial_)) done_.insert(row_key(columns_, row));
  } catch (const std::invalid_argument& error) {
    // Never removed here: a partial file that cannot be opened may be locked by a sweep still writing it, and
    // one of another input holds rows of its own.
    throw std::invalid_argument(
        describe(partial_, ": cannot be resumed (", error.what(),
                 "); if no sweep is writing it, remove it, or choose another --output"));
  }
}

std::vector<Row> ResumeStore::stored_rows(const std::string& path) const {
  Handle file = open_file(path, false);
  require(
      has_attribute(file.get(), "format") && read_string_attribute(file.get(), "format") == "nystrom-results",
      path, ": exists and is not a nystrom results file; refusing to overwrite it");
  const auto version = has_attribute(file.get(), "format_version")
                           ? read_numeric_attribute(file.get(), "format_version")
                           : std::vector<double>{};
  require(version.size() == 1 && version[0] >= double(resumable_format_version) &&
              version[0] <= double(results_format_version),
          path, ": results format_version ", version.empty() ? 0.0 : version[0], ", this build writes ",
          results_format_version, " and resumes from ", resumable_format_version,
          "; choose another --output");
  const auto stored_input =
      has_attribute(file.get(), "input") ? read_string_attribute(file.get(), "input") : "";
  require(stored_input == input_, path, ": holds results for input '", stored_input, "', not '", input_,
          "'; choose another --output");
  for (const auto& [name, value, absent] : settings_) {
    if (!absent && !has_attribute(file.get(), name)) continue;
    const auto stored = has_attribute(file.get(), name) ? read_string_attribute(file.get(), name) : *absent;
    require(stored == value, path, ": holds results of ", name, " '", stored, "', not '", value,
            "'; choose another --output");
  }
  return ResultsTable::open(file.get(), group_, columns_, path).read_rows();
}

void ResumeStore::require_appendable() const {
  if (!partial_exists_ && !output_exists_) return;
  const std::string& path = partial_exists_ ? partial_ : output_;
  Handle file = open_file(path, false);
  const auto fixed = ResultsTable::open(file.get(), group_, columns_, path).fixed_size_column();
  require(fixed.empty(), path, ": /", group_, "/", fixed,
          ": a column of fixed size, which rows cannot be appended to; choose another --output");
}

void ResumeStore::open() {
  // Complete under a temporary name, then renamed into place: the partial file is never half-written.
  if (!partial_exists_ && output_exists_) {
    copy_file_atomically(output_, partial_);
  } else if (!partial_exists_) {
    created_directory_ = create_parent_directories(output_);
    AtomicFile created(partial_, kind());
    write_attributes_(created.get());
    ResultsTable::create(created.get(), group_, columns_);
    created.commit();
  }
  created_partial_ = !partial_exists_;
  partial_exists_ = true;
  file_ = open_file(partial_, true);
  table_ = ResultsTable::open(file_.get(), group_, columns_, partial_);
}

void ResumeStore::append(const Row& row) {
  const hsize_t before = table_->rows();
  try {
    table_->append(row);
    flush_file(file_.get(), partial_);
  } catch (const std::runtime_error&) {
    // A row half on disk (a full disk) would leave the file unreadable: cut back to the rows before it,
    // which needs no new space, so that the file stays resumable.
    try {
      table_->truncate(before);
      flush_file(file_.get(), partial_);
    } catch (const std::runtime_error&) {
    }
    throw;
  }
}

void ResumeStore::close() {
  table_.reset();
  file_.reset();
}

void ResumeStore::abandon() {
  close();
  if (!created_partial_) return;
  std::error_code ignored;
  fs::remove(partial_, ignored);
  remove_created_directories(output_, created_directory_);
}

hsize_t ResumeStore::commit(const std::unordered_map<std::string, std::size_t>& position) {
  close();
  std::vector<Row> rows;
  {
    Handle file = open_file(partial_, false);
    rows = ResultsTable::open(file.get(), group_, columns_, partial_).read_rows();
  }
  // A partial file starts as a copy of the output; an output replaced since (a file finished elsewhere and
  // copied in) may hold rows it lacks, which are kept too.
  if (output_exists_) {
    std::unordered_set<std::string> kept;
    for (const auto& row : rows) kept.insert(row_key(columns_, row));
    for (auto& row : stored_rows(output_))
      if (!kept.count(row_key(columns_, row))) rows.push_back(std::move(row));
  }
  const auto rank = [&](const Row& row) -> std::ptrdiff_t {
    const auto found = position.find(row_key(columns_, row));
    return found == position.end() ? -1 : std::ptrdiff_t(found->second);
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) { return rank(a) < rank(b); });
  AtomicFile sorted(output_, kind());
  write_attributes_(sorted.get());
  auto table = ResultsTable::create(sorted.get(), group_, columns_);
  table.append(rows);
  sorted.commit();
  fs::remove(partial_);
  return rows.size();
}

}  // namespace nystrom::cli
