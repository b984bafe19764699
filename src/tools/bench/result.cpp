#include "result.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>

#include "dfi/common/error.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;

const char* role_name(Role role) { return role == Role::dfi ? "dfi" : "baseline"; }
const char* better_name(Better better) { return better == Better::higher ? "higher" : "lower"; }

json axis_json(const Axis& axis) {
  return {{"label", axis.label}, {"unit", axis.unit}, {"scale", axis.scale}};
}

bool close_enough(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)});
}

}  // namespace

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

double percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double rank = p / 100.0 * static_cast<double>(samples.size());
  const std::size_t index = rank <= 1 ? 0 : static_cast<std::size_t>(rank + 0.999999) - 1;
  return samples[std::min(index, samples.size() - 1)];
}

std::string format_fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

// ---------------------------------------------------------------------------------------------
// Panel

Panel::Panel(std::string id, std::string title, Axis x, Axis y, Better better)
    : id_(std::move(id)),
      title_(std::move(title)),
      x_(std::move(x)),
      y_(std::move(y)),
      better_(better) {}

Panel::Series& Panel::find(const std::string& id) {
  for (Series& s : series_) {
    if (s.id == id) return s;
  }
  throw Error(Errc::invalid_argument, "bench: panel '" + id_ + "' has no series '" + id + "'");
}

const Panel::Series* Panel::lookup(const std::string& id) const {
  for (const Series& s : series_) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

void Panel::series(const std::string& id, Role role, const std::string& name,
                   const std::string& description) {
  if (lookup(id) != nullptr) return;
  series_.push_back(Series{id, role, name, description, {}, {}});
}

void Panel::compare(const std::string& dfi, const std::string& baseline,
                    std::optional<double> target) {
  if (lookup(dfi) == nullptr || lookup(baseline) == nullptr) {
    throw Error(Errc::invalid_argument, "bench: panel '" + id_ + "': compare(" + dfi + ", " +
                                            baseline + ") names an undeclared series");
  }
  comparisons_.push_back({dfi, baseline, target});
}

void Panel::add(const std::string& id, const nlohmann::json& x, double value) {
  Series& s = find(id);
  for (auto& [px, samples] : s.points) {
    if (px == x) {
      samples.push_back(value);
      return;
    }
  }
  s.points.push_back({x, {value}});
}

void Panel::add_command(const std::string& id, const std::string& command) {
  Series& s = find(id);
  if (std::find(s.commands.begin(), s.commands.end(), command) == s.commands.end()) {
    s.commands.push_back(command);
  }
}

nlohmann::json Panel::to_json() const {
  json series = json::array();
  for (const Series& s : series_) {
    json points = json::array();
    for (const auto& [x, samples] : s.points) {
      points.push_back({{"x", x},
                        {"value", median(samples)},
                        {"samples", samples},
                        {"min", *std::min_element(samples.begin(), samples.end())},
                        {"max", *std::max_element(samples.begin(), samples.end())}});
    }
    series.push_back({{"id", s.id},
                      {"name", s.name},
                      {"role", role_name(s.role)},
                      {"description", s.description},
                      {"commands", s.commands},
                      {"points", points}});
  }
  json ratios = json::array();
  for (const Comparison& c : comparisons_) {
    const Series* dfi = lookup(c.dfi);
    const Series* baseline = lookup(c.baseline);
    for (const auto& [x, dfi_samples] : dfi->points) {
      for (const auto& [bx, baseline_samples] : baseline->points) {
        if (bx != x) continue;
        const double d = median(dfi_samples);
        const double b = median(baseline_samples);
        json ratio = {{"dfi", c.dfi},   {"baseline", c.baseline}, {"x", x},
                      {"dfi_value", d}, {"baseline_value", b},    {"ratio", b != 0 ? d / b : 0.0}};
        if (c.target) ratio["target"] = *c.target;
        ratios.push_back(ratio);
      }
    }
  }
  json panel = {{"id", id_},
                {"title", title_},
                {"x", axis_json(x_)},
                {"y", axis_json(y_)},
                {"better", better_name(better_)},
                {"series", series},
                {"ratios", ratios}};
  if (stacked_) panel["stacked"] = true;
  return panel;
}

// ---------------------------------------------------------------------------------------------
// Result

Result::Result(std::string scenario, std::string title, std::string description)
    : scenario_(std::move(scenario)),
      title_(std::move(title)),
      description_(std::move(description)) {}

Panel& Result::panel(const std::string& id, const std::string& title, Axis x, Axis y,
                     Better better) {
  for (Panel& p : panels_) {
    if (p.id() == id) return p;
  }
  panels_.emplace_back(id, title, std::move(x), std::move(y), better);
  return panels_.back();
}

Panel& Result::panel(const std::string& id) {
  for (Panel& p : panels_) {
    if (p.id() == id) return p;
  }
  throw Error(Errc::invalid_argument,
              "bench: result '" + scenario_ + "' has no panel '" + id + "'");
}

void Result::add_baseline(const std::string& name, const std::string& description) {
  for (const auto& b : baselines_) {
    if (b.first == name) return;
  }
  baselines_.emplace_back(name, description);
}

void Result::add_note(const std::string& note) { notes_.push_back(note); }

nlohmann::json Result::to_json(const RunInfo& info) const {
  json panels = json::array();
  for (const Panel& p : panels_) panels.push_back(p.to_json());
  json baselines = json::array();
  for (const auto& [name, description] : baselines_) {
    baselines.push_back({{"name", name}, {"description", description}});
  }
  return {{"schema", kResultSchema},   {"scenario", scenario_},
          {"title", title_},           {"description", description_},
          {"command", info.command},   {"date", utc_now()},
          {"machine", machine_info()}, {"transport", info.transport},
          {"netns", info.netns},       {"quick", info.quick},
          {"repeat", info.repeat},     {"seconds", info.seconds},
          {"parameters", parameters_}, {"baselines", baselines},
          {"panels", panels},          {"notes", notes_}};
}

// ---------------------------------------------------------------------------------------------

nlohmann::json machine_info() {
  std::string cpu = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) cpu = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  utsname names{};
  ::uname(&names);
  const long nproc = ::sysconf(_SC_NPROCESSORS_ONLN);
  // Load when the result was written: other work on a shared machine skews the numbers.
  double load[3] = {0, 0, 0};
  std::ifstream loadavg("/proc/loadavg");
  loadavg >> load[0] >> load[1] >> load[2];
  return {{"nproc", nproc},
          {"cpu", cpu},
          {"kernel", std::string(names.release)},
          {"hostname", std::string(names.nodename)},
          {"loadavg", {load[0], load[1], load[2]}}};
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::vector<std::string> validate_result(const nlohmann::json& r) {
  std::vector<std::string> problems;
  auto need = [&](const json& object, const char* key, json::value_t type,
                  const std::string& where) {
    if (!object.is_object() || !object.contains(key)) {
      problems.push_back(where + ": missing '" + key + "'");
      return false;
    }
    const json& v = object.at(key);
    bool ok = false;
    switch (type) {
      case json::value_t::number_float:
        ok = v.is_number();
        break;
      case json::value_t::number_integer:
        ok = v.is_number_integer();
        break;
      default:
        ok = v.type() == type;
        break;
    }
    if (!ok) problems.push_back(where + ": '" + key + "' has the wrong type");
    return ok;
  };
  using T = json::value_t;
  if (!r.is_object()) return {"result is not a JSON object"};
  if (need(r, "schema", T::string, "result") && r["schema"] != kResultSchema) {
    problems.push_back("result: schema is " + r["schema"].dump() + ", expected " + kResultSchema);
  }
  for (const char* key : {"scenario", "title", "command", "date", "transport"})
    need(r, key, T::string, "result");
  for (const char* key : {"netns", "quick"}) need(r, key, T::boolean, "result");
  need(r, "repeat", T::number_integer, "result");
  need(r, "parameters", T::object, "result");
  need(r, "baselines", T::array, "result");
  need(r, "notes", T::array, "result");
  if (need(r, "machine", T::object, "result")) {
    need(r["machine"], "nproc", T::number_integer, "machine");
    need(r["machine"], "cpu", T::string, "machine");
    need(r["machine"], "kernel", T::string, "machine");
  }
  if (!need(r, "panels", T::array, "result")) return problems;
  if (r["panels"].empty()) problems.push_back("result: no panels");
  for (const json& p : r["panels"]) {
    const std::string where = "panel " + (p.contains("id") ? p["id"].dump() : std::string("?"));
    need(p, "id", T::string, where);
    need(p, "title", T::string, where);
    for (const char* axis : {"x", "y"}) {
      if (need(p, axis, T::object, where)) {
        need(p[axis], "label", T::string, where + " " + axis);
        need(p[axis], "unit", T::string, where + " " + axis);
        need(p[axis], "scale", T::string, where + " " + axis);
      }
    }
    if (need(p, "better", T::string, where) && p["better"] != "higher" && p["better"] != "lower") {
      problems.push_back(where + ": better must be \"higher\" or \"lower\"");
    }
    if (p.contains("stacked") && !p["stacked"].is_boolean()) problems.push_back(where + ": stacked must be a boolean");
    std::set<std::string> ids;
    std::map<std::string, std::map<std::string, double>> values;  // series -> x.dump() -> value
    if (need(p, "series", T::array, where)) {
      for (const json& s : p["series"]) {
        const std::string swhere = where + " series " + (s.contains("id") ? s["id"].dump() : "?");
        if (!need(s, "id", T::string, swhere) || !need(s, "name", T::string, swhere)) continue;
        ids.insert(s["id"].get<std::string>());
        if (need(s, "role", T::string, swhere) && s["role"] != "dfi" && s["role"] != "baseline") {
          problems.push_back(swhere + ": role must be \"dfi\" or \"baseline\"");
        }
        need(s, "commands", T::array, swhere);
        if (!need(s, "points", T::array, swhere)) continue;
        for (const json& pt : s["points"]) {
          if (!pt.is_object() || !pt.contains("x") ||
              !(pt["x"].is_number() || pt["x"].is_string())) {
            problems.push_back(swhere + ": a point lacks a numeric or string x");
            continue;
          }
          if (!need(pt, "value", T::number_float, swhere) || !need(pt, "samples", T::array, swhere))
            continue;
          std::vector<double> samples;
          for (const json& v : pt["samples"]) {
            if (v.is_number()) samples.push_back(v.get<double>());
          }
          if (samples.empty() || samples.size() != pt["samples"].size()) {
            problems.push_back(swhere + " x=" + pt["x"].dump() +
                               ": samples must be non-empty numbers");
            continue;
          }
          if (!close_enough(pt["value"].get<double>(), median(samples))) {
            problems.push_back(swhere + " x=" + pt["x"].dump() +
                               ": value is not the median of the samples");
          }
          values[s["id"].get<std::string>()][pt["x"].dump()] = pt["value"].get<double>();
        }
      }
    }
    if (need(p, "ratios", T::array, where)) {
      for (const json& q : p["ratios"]) {
        if (!need(q, "dfi", T::string, where + " ratio") ||
            !need(q, "baseline", T::string, where + " ratio") ||
            !need(q, "ratio", T::number_float, where + " ratio") || !q.contains("x")) {
          continue;
        }
        const std::string d = q["dfi"], b = q["baseline"], x = q["x"].dump();
        if (!ids.count(d) || !ids.count(b)) {
          problems.push_back(where + ": ratio names an unknown series");
          continue;
        }
        if (!values[d].count(x) || !values[b].count(x)) {
          problems.push_back(where + ": ratio at x=" + x + " has no matching points");
          continue;
        }
        const double expected = values[b][x] != 0 ? values[d][x] / values[b][x] : 0.0;
        if (!close_enough(q["ratio"].get<double>(), expected)) {
          problems.push_back(where + ": ratio at x=" + x + " is not dfi/baseline");
        }
      }
    }
  }
  return problems;
}

}  // namespace dfi::tools::bench
