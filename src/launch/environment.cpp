#include "dfi/launch/environment.hpp"

#include <array>
#include <charconv>
#include <cstdlib>
#include <limits>

#include "dfi/common/error.hpp"

namespace dfi::launch {
namespace {

constexpr char kNoLauncherMessage[] =
    "cannot determine rank: set DFI_RANK and DFI_SIZE, or start under `dfi cluster run`, mpirun "
    "or srun";

std::optional<std::string> lookup_process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// The variable's value, with "" treated as unset.
std::optional<std::string> read(const EnvLookup& lookup, const std::string& name) {
  std::optional<std::string> value = lookup(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

// A non-negative decimal int, or Error(invalid_argument) naming the variable.
int parse_count(const std::string& name, const std::string& text) {
  long long value = -1;
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || stop != end || value < 0 ||
      value > std::numeric_limits<int>::max()) {
    throw Error(Errc::invalid_argument,
                name + "='" + text + "' is not a non-negative decimal integer");
  }
  return static_cast<int>(value);
}

LaunchInfo make_info(const std::string& source, const std::string& rank_var,
                     const std::string& rank_text, const std::string& size_var,
                     const std::string& size_text) {
  LaunchInfo info;
  info.source = source;
  info.rank = parse_count(rank_var, rank_text);
  info.size = parse_count(size_var, size_text);
  if (info.size < 1) {
    throw Error(Errc::invalid_argument, size_var + "=" + size_text + " must be at least 1");
  }
  if (info.rank >= info.size) {
    throw Error(Errc::invalid_argument, rank_var + "=" + rank_text + " is not less than " +
                                            size_var + "=" + size_text);
  }
  return info;
}

std::string missing_size(const std::string& rank_var, const std::string& size_vars) {
  return rank_var + " is set but " + size_vars + " is not; cannot determine the number of ranks";
}

}  // namespace

LaunchInfo discover_launch() { return discover_launch(lookup_process_env); }

LaunchInfo discover_launch(const EnvLookup& lookup) {
  // 1. Our own launcher (or a user who set the variables by hand).
  {
    auto rank = read(lookup, "DFI_RANK");
    auto size = read(lookup, "DFI_SIZE");
    if (rank && !size) throw Error(Errc::invalid_argument, missing_size("DFI_RANK", "DFI_SIZE"));
    if (size && !rank) {
      throw Error(Errc::invalid_argument, "DFI_SIZE is set but DFI_RANK is not; set both");
    }
    if (rank) return make_info("dfi", "DFI_RANK", *rank, "DFI_SIZE", *size);
  }
  // 2. Open MPI's mpirun.
  if (auto rank = read(lookup, "OMPI_COMM_WORLD_RANK")) {
    auto size = read(lookup, "OMPI_COMM_WORLD_SIZE");
    if (!size) {
      throw Error(Errc::invalid_argument,
                  missing_size("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"));
    }
    return make_info("openmpi", "OMPI_COMM_WORLD_RANK", *rank, "OMPI_COMM_WORLD_SIZE", *size);
  }
  // 3. A PMIx server: the rank is standard, the size comes from whoever runs the server.
  if (auto rank = read(lookup, "PMIX_RANK")) {
    static constexpr std::array<const char*, 3> kSizeVars{"PMIX_SIZE", "OMPI_COMM_WORLD_SIZE",
                                                          "SLURM_NTASKS"};
    for (const char* size_var : kSizeVars) {
      if (auto size = read(lookup, size_var)) {
        return make_info("pmix", "PMIX_RANK", *rank, size_var, *size);
      }
    }
    throw Error(Errc::invalid_argument,
                "PMIX_RANK is set but none of PMIX_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS is; "
                "cannot determine the number of ranks");
  }
  // 4. Slurm's srun.
  if (auto rank = read(lookup, "SLURM_PROCID")) {
    auto size = read(lookup, "SLURM_NTASKS");
    if (!size) throw Error(Errc::invalid_argument, missing_size("SLURM_PROCID", "SLURM_NTASKS"));
    return make_info("slurm", "SLURM_PROCID", *rank, "SLURM_NTASKS", *size);
  }
  throw Error(Errc::invalid_argument, kNoLauncherMessage);
}

}  // namespace dfi::launch
