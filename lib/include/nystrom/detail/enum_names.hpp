#pragma once
/// @file enum_names.hpp
/// One table of {value, name} pairs per enum gives both directions of the text form used by the CLI, the
/// result tables and the HDF5 attributes (docs/formats.md): `name_of` (value → name) and `parse` (name →
/// value, std::invalid_argument listing the accepted names otherwise).

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace nystrom {

/// A value of an enum and its text form.
template <class Enum>
struct EnumName {
  Enum value;
  std::string_view name;
};

/// The table's name for `value`; "unknown" for a value outside the table (a cast integer).
template <class Enum, std::size_t N>
std::string name_of(Enum value, const std::array<EnumName<Enum>, N>& table) {
  for (const auto& entry : table)
    if (entry.value == value) return std::string(entry.name);
  return "unknown";
}

/// The value named `name` in `table`; throws std::invalid_argument("unknown <what> '<name>' (expected a, b
/// or c)") when no entry has that name.
template <class Enum, std::size_t N>
Enum parse(const std::string& name, const std::array<EnumName<Enum>, N>& table, const std::string& what) {
  for (const auto& entry : table)
    if (entry.name == name) return entry.value;
  std::string accepted;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) accepted += i + 1 == N ? " or " : ", ";
    accepted += table[i].name;
  }
  throw std::invalid_argument("unknown " + what + " '" + name + "' (expected " + accepted + ")");
}

}  // namespace nystrom
