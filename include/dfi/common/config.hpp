// The one table of DFI settings: name, environment variable, default and help.
//
// Every tunable lives here, so that environment variables, CLI flags and `dfi info --config`
// all read the same entries and no magic number hides in the code. Values are read from the
// environment (DFI_<NAME>) on each call; callers read them at setup, never per tuple.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace dfi::config {

struct Entry {
  std::string_view name;          // e.g. "op_timeout_ms"
  std::string_view env;           // e.g. "DFI_OP_TIMEOUT_MS"
  std::string_view default_value; // as text
  std::string_view help;
};

// All settings, in display order.
std::span<const Entry> entries();

// The entry called `name`; throws dfi::Error(invalid_argument) for an unknown name.
const Entry& entry(std::string_view name);

// The current value: the environment variable if set and non-empty, else the default.
std::string get_string(std::string_view name);
// Whether the setting's environment variable is set (non-empty): the user chose the value.
bool is_set(std::string_view name);
// As get_string, parsed as a non-negative integer; throws dfi::Error(invalid_argument) naming the
// variable when the text is not a number.
std::int64_t get_int(std::string_view name);

}  // namespace dfi::config
