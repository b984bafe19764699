// The CSV files of `dfi join --dump` and `dfi agg --dump`: an operator's inputs and results in a
// form other engines read (tests/ops/duckdb_check.py has DuckDB recompute them).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "dfi/common/error.hpp"

namespace dfi::tools {

// Creates `file`'s directory if needed and opens `file` for writing with `header` as its first
// line. Throws dfi::Error(invalid_argument) naming the file when it cannot be opened.
inline std::ofstream open_dump(const std::filesystem::path& file, const std::string& header) {
  std::error_code ignored;
  std::filesystem::create_directories(file.parent_path(), ignored);
  std::ofstream out(file);
  if (!out) throw Error(Errc::invalid_argument, "--dump: cannot write " + file.string());
  out.precision(17);
  out << header << '\n';
  return out;
}

}  // namespace dfi::tools
