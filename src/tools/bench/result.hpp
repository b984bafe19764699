// A benchmark result: the data of record that plots and bench/RESULTS.md are generated from.
//
// A result holds panels (one plot each). A panel has an x axis (numbers such as message sizes, or
// categories such as "put ping-pong"), a y axis with a unit, and series; every series is either
// DFI's or a baseline's. Each repetition adds one sample per (series, x); the reported value is
// the median of the samples. Declared comparisons pair a DFI series with a baseline series and
// give, per x present in both, ratio = DFI / baseline (for "lower is better" panels a ratio
// below 1 means DFI wins).
//
//   Result result("fabric-bw", "DFI fabric vs ucx_perftest");
//   Panel& bw = result.panel("put_bw", "Put bandwidth", {"message size", "B", "log2"},
//                            {"bandwidth", "GB/s"}, Better::higher);
//   bw.series("dfi", Role::dfi, "DFI put_nbi + flush");
//   bw.series("perftest", Role::baseline, "ucx_perftest ucp_put_bw");
//   bw.compare("dfi", "perftest");
//   bw.add("dfi", 4096, 12.5);           // one sample of one repetition
//   nlohmann::json j = result.to_json(); // medians and ratios computed here
//
// JSON layout ("schema": "dfi-bench/1") — see validate_result() and bench/README.md:
//   { schema, scenario, title, description, command, date,
//   machine{nproc,cpu,kernel,hostname,loadavg[3]},
//     transport, netns, quick, repeat, parameters{}, baselines[{name, description, commands[]}],
//     panels[{id, title, x{label,unit,scale}, y{label,unit}, better, stacked? (true: parts of a whole),
//             series[{id, name, role, description, points[{x, value, samples[], min, max}]}],
//             ratios[{dfi, baseline, x, dfi_value, baseline_value, ratio, target?}]}],
//     notes[], seconds }
#pragma once

#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dfi::tools::bench {

inline constexpr const char* kResultSchema = "dfi-bench/1";

enum class Role { dfi, baseline };
enum class Better { higher, lower };

struct Axis {
  std::string label;
  std::string unit;              // "" for categories
  std::string scale = "linear";  // "linear", "log2", "log10" or "category"
};

class Panel {
 public:
  Panel(std::string id, std::string title, Axis x, Axis y, Better better);

  // Declares a series (once); `id` is how add()/compare() name it, `name` is the legend text.
  void series(const std::string& id, Role role, const std::string& name,
              const std::string& description = "");
  // Declares that DFI series `dfi` is compared with baseline series `baseline`; `target` is an
  // optional goal for the ratio (e.g. 0.9 = "at least 0.9x" for higher-is-better).
  void compare(const std::string& dfi, const std::string& baseline,
               std::optional<double> target = std::nullopt);
  // One sample of series `id` at `x` (a number or a category string). Throws
  // dfi::Error(invalid_argument) for an undeclared series.
  void add(const std::string& id, const nlohmann::json& x, double value);
  // Records an exact command that produced samples of series `id` (deduplicated).
  void add_command(const std::string& id, const std::string& command);
  // Marks the series as parts of one whole (per-consumer bandwidth over time): plots stack them
  // as areas. Written as "stacked": true.
  void stacked() { stacked_ = true; }

  const std::string& id() const noexcept { return id_; }
  nlohmann::json to_json() const;

 private:
  struct Series {
    std::string id;
    Role role;
    std::string name;
    std::string description;
    std::vector<std::string> commands;
    std::vector<std::pair<nlohmann::json, std::vector<double>>> points;  // x -> samples, in order
  };
  struct Comparison {
    std::string dfi;
    std::string baseline;
    std::optional<double> target;
  };
  Series& find(const std::string& id);
  const Series* lookup(const std::string& id) const;

  std::string id_;
  std::string title_;
  Axis x_;
  Axis y_;
  Better better_;
  bool stacked_ = false;
  std::vector<Series> series_;
  std::vector<Comparison> comparisons_;
};

// How the run was invoked; filled in by the `dfi bench` driver.
struct RunInfo {
  std::string command;  // "dfi bench fabric-bw --transport shm --repeat 3"
  std::string transport;
  bool netns = false;
  bool quick = false;
  int repeat = 1;
  double seconds = 0;
};

class Result {
 public:
  Result(std::string scenario, std::string title, std::string description = "");

  // The panel `id`, created with the given axes on first use.
  Panel& panel(const std::string& id, const std::string& title, Axis x, Axis y, Better better);
  Panel& panel(const std::string& id);  // an existing panel; throws invalid_argument otherwise

  // The parameters the scenario ran with (after quick/full/overrides were resolved).
  void set_parameters(nlohmann::json parameters) { parameters_ = std::move(parameters); }
  // A baseline used in this run, e.g. ("ucx_perftest", "UCX 1.13.1 ucx_perftest, loopback").
  void add_baseline(const std::string& name, const std::string& description);
  // Free text shown under the scenario's table (e.g. why a baseline could not run).
  void add_note(const std::string& note);

  const std::string& scenario() const noexcept { return scenario_; }
  nlohmann::json to_json(const RunInfo& info) const;

 private:
  std::string scenario_;
  std::string title_;
  std::string description_;
  nlohmann::json parameters_ = nlohmann::json::object();
  std::vector<std::pair<std::string, std::string>> baselines_;
  std::vector<std::string> notes_;
  std::deque<Panel> panels_;  // deque: panel() references stay valid
};

// nproc, CPU model, kernel release, host name and load averages (1, 5, 15 min) of this machine.
nlohmann::json machine_info();

// Current UTC time as "2024-05-01T12:34:56Z".
std::string utc_now();

// Checks a result against the dfi-bench/1 layout; returns one message per problem (empty = ok).
// Also checks that every point's value is the median of its samples and every ratio matches.
std::vector<std::string> validate_result(const nlohmann::json& result);

// The median of `samples` (mean of the two middle ones for an even count); 0 for none.
double median(std::vector<double> samples);
// The p-th percentile (0..100) of `samples` by nearest rank; 0 for none.
double percentile(std::vector<double> samples, double p);
// `v` with `digits` digits after the point ("0.250"), for progress lines and notes.
std::string format_fixed(double v, int digits);

}  // namespace dfi::tools::bench
