#include "options.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iostream>

#include "nystrom/threads.hpp"

namespace nystrom::cli {

void add_common_options(po::options_description& options, bool with_threads_and_seed) {
  options.add_options()("help,h", "show this help and exit")(
      "config", po::value<std::string>()->value_name("FILE"),
      "read further options from an INI file (name = value per line); the command line wins");
  if (with_threads_and_seed)
    options.add_options()("threads", po::value<int>()->default_value(0)->value_name("N"),
                          "OpenMP threads (0: the OpenMP default)")(
        "seed", po::value<std::uint64_t>()->default_value(0)->value_name("S"),
        "random seed (landmarks, synthetic data); results are deterministic for a given seed");
}

bool parse_options(const Invocation& invocation, const std::string& synopsis,
                   const po::options_description& options,
                   const po::positional_options_description& positional, po::variables_map& values) {
  const std::string prefix = "nystrom " + invocation.subcommand + ": ";
  try {
    // No abbreviated option names: a misspelt option is an error, never a guess.
    const auto style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(
        po::command_line_parser(invocation.args).options(options).positional(positional).style(style).run(),
        values);
    if (values.count("help")) {
      std::cout << "usage: nystrom " << invocation.subcommand << " " << synopsis << "\n\n" << options << "\n";
      return false;
    }
    if (values.count("config")) {
      const auto path = values["config"].as<std::string>();
      std::ifstream file(path);
      require(file.good(), describe("option --config: cannot read config file '", path, "'"));
      po::store(po::parse_config_file(file, options), values);
    }
    po::notify(values);
  } catch (const po::error& error) {
    throw std::invalid_argument(error.what());
  }
  return true;
}

int apply_threads(const po::variables_map& values) {
  const int requested = values.count("threads") ? values["threads"].as<int>() : 0;
  require(requested >= 0, describe("option --threads: ", requested, " must be >= 0"));
  set_threads(requested > 0 ? requested : threads());  // also keeps OpenBLAS single-threaded (threads.hpp)
  return threads();
}

namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

/// A whole-string integer; throws naming the option and item otherwise.
long long parse_integer(const std::string& text, const std::string& option, const std::string& item) {
  long long value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  require(ec == std::errc() && ptr == end && !text.empty(),
          describe("option --", option, ": '", item,
                   "' is not an integer or a range first:last:xF / first:last:+S"));
  return value;
}

}  // namespace

std::vector<std::string> split_list(const std::string& text, const std::string& option) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    const auto item =
        trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    require(!item.empty(), describe("option --", option, ": empty item in list '", text, "'"));
    items.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

std::vector<Index> parse_index_list(const std::string& text, const std::string& option, Index minimum) {
  std::vector<Index> values;
  auto add = [&](long long value, const std::string& item) {
    require(value >= minimum,
            describe("option --", option, ": ", value, " in '", item, "' must be >= ", minimum));
    if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(Index(value));
  };
  for (const auto& item : split_list(text, option)) {
    const auto first_colon = item.find(':');
    if (first_colon == std::string::npos) {
      add(parse_integer(item, option, item), item);
      continue;
    }
    const auto second_colon = item.find(':', first_colon + 1);
    require(second_colon != std::string::npos && second_colon + 2 <= item.size(),
            describe("option --", option, ": range '", item, "' must read first:last:xF or first:last:+S"));
    const long long first = parse_integer(item.substr(0, first_colon), option, item);
    const long long last =
        parse_integer(item.substr(first_colon + 1, second_colon - first_colon - 1), option, item);
    const char kind = item[second_colon + 1];
    const long long step = parse_integer(item.substr(second_colon + 2), option, item);
    require(kind == 'x' || kind == '+', describe("option --", option, ": range '", item,
                                                 "' needs a step 'xF' (geometric) or '+S' (arithmetic)"));
    require(first <= last, describe("option --", option, ": range '", item, "' has first > last"));
    require(kind == 'x' ? step >= 2 : step >= 1,
            describe("option --", option, ": range '", item, "' needs a factor >= 2 or a step >= 1"));
    require(kind == '+' || first > 0,
            describe("option --", option, ": geometric range '", item, "' must start > 0"));
    for (long long value = first; value <= last; value = kind == 'x' ? value * step : value + step)
      add(value, item);
  }
  return values;
}

std::vector<double> parse_double_list(const std::string& text, const std::string& option) {
  std::vector<double> values;
  for (const auto& item : split_list(text, option)) {
    std::size_t used = 0;
    double value = 0;
    try {
      value = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    require(used == item.size() && std::isfinite(value),
            describe("option --", option, ": '", item, "' is not a finite number"));
    values.push_back(value);
  }
  return values;
}

double parse_bytes(const std::string& text, const std::string& option) {
  const auto invalid = describe("option --", option, ": '", text,
                                "' is not a byte count (a positive number, optionally with K, M, G or T)");
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument(invalid);
  }
  std::string suffix = text.substr(used);
  for (const char* unit : {"iB", "B"})
    if (suffix.size() > 1 && suffix.ends_with(unit)) suffix.resize(suffix.size() - std::string(unit).size());
  static const std::string units = "KMGT";
  double factor = 1;
  if (!suffix.empty()) {
    const auto at = units.find(char(std::toupper(static_cast<unsigned char>(suffix[0]))));
    require(suffix.size() == 1 && at != std::string::npos, invalid);
    factor = std::pow(1024.0, double(at + 1));
  }
  require(std::isfinite(value) && value > 0, invalid);
  return value * factor;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::string shell_quote(const std::string& argument) {
  const bool plain = !argument.empty() && argument.find_first_not_of(
                                              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789-_=.,:/+@%") == std::string::npos;
  if (plain) return argument;
  std::string quoted = "'";
  for (char c : argument) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace nystrom::cli
