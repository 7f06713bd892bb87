#include "options.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>

#include "nystrom/threads.hpp"

namespace nystrom::cli {

void add_common_options(po::options_description& options, bool with_threads_and_seed) {
  options.add_options()("help,h", "show this help and exit")(
      "config", po::value<std::string>()->value_name("FILE"),
      "read further options from an INI file (name = value per line); the command line wins");
  if (!with_threads_and_seed) return;
  options.add_options()("threads", po::value<int>()->default_value(0)->value_name("N"),
                        "OpenMP threads (0: the OpenMP default)");
  add_seed_option(options);
}

void add_seed_option(po::options_description& options) {
  options.add_options()(
      "seed", po::value<Seed>()->default_value(Seed{}, "0")->value_name("S"),
      "random seed (landmarks, synthetic data); results are deterministic for a given seed");
}

std::uint64_t seed_option(const po::variables_map& values) {
  return values["seed"].as<Seed>().value;
}

void validate(boost::any& value, const std::vector<std::string>& texts, Seed*, int) {
  po::validators::check_first_occurrence(value);
  const std::string& text = po::validators::get_single_string(texts);
  Seed seed;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed.value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty())
    throw po::invalid_option_value(text);
  value = seed;
}

void add_deprecated_alias(po::options_description& options, const std::string& alias,
                          const std::string& name) {
  options.add_options()(alias.c_str(), po::value<std::string>(),
                        describe("deprecated alias of --", name).c_str());
}

std::string option_text(const po::variables_map& values, const std::string& name, const std::string& alias) {
  if (!values.count(alias)) return values.count(name) ? values[name].as<std::string>() : std::string();
  require(!values.count(name) || values[name].defaulted(), "options --", name, " and --", alias,
          " (its deprecated alias) given together");
  return values[alias].as<std::string>();
}

void add_precision_option(po::options_description& options, const std::string& default_value,
                          PrecisionValues values) {
  const char* help[] = {
      "arithmetic: float or double (float32, float64 also accepted)",
      "arithmetic, a list of: float, double (float32, float64 also accepted)",
      "storage formats, a list: double alone, or any of float, half, bfloat16 (half and bfloat16 emulated "
      "in float32 with every stored matrix rounded to them, errors against the float64 exact output; "
      "float16, bf16, float32, float64 also accepted)"};
  options.add_options()("precision", po::value<std::string>()->default_value(default_value),
                        help[static_cast<int>(values)]);
  add_deprecated_alias(options, "dtype", "precision");
}

std::vector<std::string> parse_precisions(const po::variables_map& values) {
  std::vector<std::string> precisions;
  for (const auto& item : split_list(option_text(values, "precision", "dtype"), "precision")) {
    const std::string precision = item == "float32" ? "float" : item == "float64" ? "double" : item;
    require(precision == "float" || precision == "double", "option --precision: '", item,
            "' (expected float or double)");
    if (std::find(precisions.begin(), precisions.end(), precision) == precisions.end())
      precisions.push_back(precision);
  }
  return precisions;
}

std::string parse_precision(const po::variables_map& values) {
  const auto precisions = parse_precisions(values);
  require(precisions.size() == 1, "option --precision: one value expected (float or double), got ",
          join(precisions));
  return precisions.front();
}

std::vector<Precision> parse_formats(const po::variables_map& values) {
  std::vector<Precision> formats;
  for (const auto& item : split_list(option_text(values, "precision", "dtype"), "precision")) {
    Precision format;
    try {
      format = precision_from_string(item);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument(describe("option --precision: ", error.what()));
    }
    if (std::find(formats.begin(), formats.end(), format) == formats.end()) formats.push_back(format);
  }
  const bool float64 = std::find(formats.begin(), formats.end(), Precision::float64) != formats.end();
  require(
      !float64 || formats.size() == 1, "option --precision: '", option_text(values, "precision", "dtype"),
      "': double runs alone (float, half and bfloat16 are computed in float32; run double in its own sweep)");
  return formats;
}

void add_method_option(po::options_description& options, const std::string& default_value,
                       const std::string& description) {
  auto value = po::value<std::string>()->value_name("LIST");
  if (!default_value.empty()) value->default_value(default_value);
  options.add_options()("method", value, description.c_str());
  add_deprecated_alias(options, "methods", "method");
}

std::vector<Method> parse_methods(const po::variables_map& values, const std::string& fallback) {
  const auto text = option_text(values, "method", "methods");
  return parse_enum_list<Method>(text.empty() ? fallback : text, "method", method_from_string);
}

void add_device_option(po::options_description& options, const std::string& where) {
  options.add_options()("device", po::value<std::string>()->default_value("cpu"),
                        describe("cpu or cuda: ", where, " (exit 2 where no CUDA device is usable)").c_str());
}

Device parse_device(const po::variables_map& values) {
  const auto device = parse_enum<Device>(values["device"].as<std::string>(), "device", device_from_string);
  require_device(device);
  return device;
}

void add_memory_option(po::options_description& options, const std::string& above) {
  options.add_options()(
      "memory", po::value<std::string>()->default_value("4G")->value_name("BYTES"),
      describe("bytes a dense N x N analysis may use (suffixes K, M, G, T: powers of 1024); above it ", above)
          .c_str());
}

void add_reference_option(po::options_description& options) {
  options.add_options()(
      "reference", po::value<std::string>()->default_value("kernel"),
      "exact side: kernel (each head's q and k alone) or model (the layer's bias and mask added to the "
      "kernel's exponent, as the model computes its attention; layers without them: the kernel)");
}

bool parse_model_reference(const po::variables_map& values) {
  const auto text = values["reference"].as<std::string>();
  require(text == "kernel" || text == "model", "option --reference: '", text, "' (expected kernel or model)");
  return text == "model";
}

void add_quiet_option(po::options_description& options, const std::string& silences) {
  options.add_options()("quiet,q", po::bool_switch(), silences.c_str());
}

namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

/// "config file 'PATH', line L" for the first line of the INI file that sets `name` (or is `name` alone), or
/// the last one where `last` (a repeated option is an error at its repetition), leading dashes ignored;
/// without the line where none does.
std::string config_location(const std::string& path, std::string name, bool last = false) {
  name.erase(0, name.find_first_not_of('-'));
  std::ifstream file(path);
  std::string line;
  int found = 0;
  for (int number = 1; !name.empty() && (last || found == 0) && std::getline(file, line); ++number)
    if (trim(line.substr(0, line.find('='))) == name) found = number;
  if (found == 0) return describe("config file '", path, "'");
  return describe("config file '", path, "', line ", found);
}

/// Parses the INI file at `path` into `values`; throws std::invalid_argument naming the file and the line of
/// an unknown option, a line that is not `name = value`, a bad value or a command-line-only option.
void store_config_file(const std::string& path, const po::options_description& options,
                       po::variables_map& values) {
  std::ifstream file(path);
  require(file.good() && !std::filesystem::is_directory(path), "option --config: cannot read config file '",
          path, "'");
  try {
    const po::parsed_options parsed = po::parse_config_file(file, options);
    // help and config act on the command line only: in a file they would be silently ignored.
    for (const auto& option : parsed.options)
      require(option.string_key != "help" && option.string_key != "config",
              config_location(path, option.string_key), ": '", option.string_key,
              "' is a command-line option only (remove the line)");
    po::store(parsed, values);
  } catch (const po::multiple_occurrences& error) {
    throw std::invalid_argument(
        describe(config_location(path, error.get_option_name(), true), ": ", error.what()));
  } catch (const po::error_with_option_name& error) {
    throw std::invalid_argument(describe(config_location(path, error.get_option_name()), ": ", error.what()));
  } catch (const po::error& error) {
    throw std::invalid_argument(describe(config_location(path, ""), ": ", error.what()));
  }
}

}  // namespace

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
    if (values.count("config")) store_config_file(values["config"].as<std::string>(), options, values);
    po::notify(values);
    // An option given an empty value (--layers '') is a slip, never a request for its default.
    for (const auto& [name, value] : values) {
      const auto* text = boost::any_cast<std::string>(&value.value());
      require(value.defaulted() || text == nullptr || text->find_first_not_of(" \t") != std::string::npos,
              "option --", name, ": empty value (leave the option out for its default)");
    }
  } catch (const po::error& error) {
    throw std::invalid_argument(error.what());
  }
  return true;
}

int apply_threads(const po::variables_map& values) {
  const int requested = values.count("threads") ? values["threads"].as<int>() : 0;
  require(requested >= 0 && requested <= max_threads, "option --threads: ", requested, " must lie in [0, ",
          max_threads, "] (0: the OpenMP default)");
  set_threads(requested > 0 ? requested : threads());  // also keeps OpenBLAS single-threaded (threads.hpp)
  return threads();
}

namespace {

/// A whole-string integer; throws naming the option and item otherwise.
long long parse_integer(const std::string& text, const std::string& option, const std::string& item) {
  long long value = 0;
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  require(ec == std::errc() && ptr == end && !text.empty(), "option --", option, ": '", item,
          "' is not an integer or a range first:last:xF / first:last:+S");
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
    require(!item.empty(), "option --", option, ": empty item in list '", text, "'");
    if (std::find(items.begin(), items.end(), item) == items.end()) items.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

std::vector<Index> parse_index_list(const std::string& text, const std::string& option, Index minimum) {
  std::vector<Index> values;
  std::set<long long> seen;  // the values so far: a long range is checked for repeats in O(log n) a value
  auto add = [&](long long value, const std::string& item) {
    require(value >= minimum, "option --", option, ": ", value, " in '", item, "' must be >= ", minimum);
    if (seen.insert(value).second) values.push_back(Index(value));
  };
  for (const auto& item : split_list(text, option)) {
    const auto first_colon = item.find(':');
    if (first_colon == std::string::npos) {
      add(parse_integer(item, option, item), item);
      continue;
    }
    const auto second_colon = item.find(':', first_colon + 1);
    require(second_colon != std::string::npos && second_colon + 2 <= item.size(), "option --", option,
            ": range '", item, "' must read first:last:xF or first:last:+S");
    const long long first = parse_integer(item.substr(0, first_colon), option, item);
    const long long last =
        parse_integer(item.substr(first_colon + 1, second_colon - first_colon - 1), option, item);
    const char kind = item[second_colon + 1];
    const long long step = parse_integer(item.substr(second_colon + 2), option, item);
    require(kind == 'x' || kind == '+', "option --", option, ": range '", item,
            "' needs a step 'xF' (geometric) or '+S' (arithmetic)");
    require(first <= last, "option --", option, ": range '", item, "' has first > last");
    require(kind == 'x' ? step >= 2 : step >= 1, "option --", option, ": range '", item,
            "' needs a factor >= 2 or a step >= 1");
    require(kind == '+' || first > 0, "option --", option, ": geometric range '", item, "' must start > 0");
    // Counted before it is expanded (last - first in unsigned arithmetic: it may exceed long long).
    const auto count = kind == 'x' ? 0 : (static_cast<unsigned long long>(last) - first) / step + 1;
    require(count <= max_range_values, "option --", option, ": range '", item, "' has ", count,
            " values, more than ", max_range_values);
    // The next value is taken only where it does not pass last, so that it never overflows.
    for (long long value = first;; value = kind == 'x' ? value * step : value + step) {
      add(value, item);
      if (kind == 'x' ? value > last / step : last - value < step) break;
    }
  }
  return values;
}

namespace {

/// What keeps `text` from being a real number for parse_real (empty where nothing does), its value in
/// `value`.
std::string real_number_problem(const std::string& untrimmed, double& value) {
  const std::string text = trim(untrimmed);
  const std::string_view digits = text.starts_with('+') ? std::string_view(text).substr(1) : text;
  const auto* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value, std::chars_format::general);
  if (ec == std::errc::result_out_of_range)
    return describe("lies beyond double's range (magnitudes ", std::numeric_limits<double>::denorm_min(),
                    " to ", std::numeric_limits<double>::max(), ", or 0)");
  if (ec != std::errc() || ptr != end || digits.empty() || text.starts_with("+-"))
    return "is not a decimal number";
  return std::isfinite(value) ? "" : "is not a finite number";
}

}  // namespace

double parse_real(const std::string& text, const std::string& option) {
  double value = 0;
  const std::string problem = real_number_problem(text, value);
  require(problem.empty(), "option --", option, ": '", text, "' ", problem);
  return value;
}

void validate(boost::any& value, const std::vector<std::string>& texts, RealNumber*, int) {
  po::validators::check_first_occurrence(value);
  const std::string& text = po::validators::get_single_string(texts);
  double real = 0;
  const std::string problem = real_number_problem(text, real);
  // Boost fills in the option's name where it catches this.
  if (!problem.empty())
    throw po::error_with_option_name("option %canonical_option%: '" + text + "' " + problem);
  value = RealNumber{real};
}

po::typed_value<RealNumber>* real_value(double default_value) {
  std::ostringstream text;
  text << default_value;
  return po::value<RealNumber>()->default_value(RealNumber{default_value}, text.str());
}

double real_option(const po::variables_map& values, const std::string& name) {
  return values[name].as<RealNumber>().value;
}

std::vector<double> parse_double_list(const std::string& text, const std::string& option) {
  std::vector<double> values;
  for (const auto& item : split_list(text, option)) {
    const double value = parse_real(item, option);
    if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
  }
  return values;
}

Kernel kernel_option(KernelType type, double param, const std::string& option) {
  const Kernel kernel{type, param};
  try {
    kernel.validate();
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(describe("option --", option, ": ", error.what()));
  }
  return kernel;
}

LandmarkStrategy command_line_strategy(const std::string& name) {
  const LandmarkStrategy strategy = landmark_strategy_from_string(name);
  require(strategy != LandmarkStrategy::given,
          "'given' takes landmark indices, which the command line has no option for (the library and the "
          "Python module take them: q_indices, k_indices)");
  return strategy;
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
