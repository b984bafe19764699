// Where the bench scripts, sources and outputs live.
#pragma once

#include <string>

namespace dfi::tools::bench {

// The bench/ folder of the source tree (plot.py, report.py, mpi/): $DFI_BENCH_DIR, else the
// source tree this binary was built from.
std::string bench_source_dir();

// Where bench artefacts built on demand go (MPI baseline binaries): $DFI_BENCH_BUILD_DIR, else
// <build tree>/bench.
std::string bench_build_dir();

// The Python virtual environment of the build's Python-dependent scenarios (python's interpreter,
// tpch-q1's tpchgen-cli and DuckDB): $DFI_BENCH_VENV, else the one the build was configured with
// (DFI_PYTHON_VENV; scripts/dev: build/venv); "" when there is none.
std::string python_venv();

// The default output folder of `dfi bench`: <bench_source_dir()>/out.
std::string default_output_dir();

// The Python interpreter for plot.py: $DFI_PYTHON, else /usr/bin/python3 (Debian's, which sees
// python3-matplotlib), else python3 from PATH.
std::string python_interpreter();

}  // namespace dfi::tools::bench
