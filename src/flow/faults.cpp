#include "dfi/flow/detail/faults.hpp"

#include <fnmatch.h>

#include <charconv>

#include "dfi/common/config.hpp"
#include "dfi/common/error.hpp"

namespace dfi::flow::detail {
namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    const std::size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text.remove_prefix(at + 1);
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Concatenates its arguments by appending (not `"literal" + std::string`: GCC 12 -Wrestrict).
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string text;
  (text.append(parts), ...);
  return text;
}

[[noreturn]] void bad_rule(std::string_view rule, const std::string& why) {
  std::string message = "flow_faults (DFI_FLOW_FAULTS) rule '";
  message += rule;
  message += "': ";
  message += why;
  throw Error(Errc::invalid_argument, message);
}

std::uint64_t number(std::string_view rule, std::string_view key, std::string_view value) {
  std::uint64_t n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size()) {
    std::string why(key);
    why += "='";
    why += value;
    why += "' is not a non-negative integer";
    bad_rule(rule, why);
  }
  return n;
}

}  // namespace

std::vector<FaultRule> parse_fault_rules(std::string_view text) {
  std::vector<FaultRule> rules;
  for (std::string_view rule_text : split(text, ';')) {
    rule_text = trim(rule_text);
    if (rule_text.empty()) continue;
    FaultRule rule;
    rule.text = std::string(rule_text);
    bool has_drop = false, has_delay = false;
    for (std::string_view item : split(rule_text, ',')) {
      item = trim(item);
      const std::size_t eq = item.find('=');
      const std::string_view key = trim(item.substr(0, eq));
      const std::string_view value = eq == std::string_view::npos ? std::string_view() : trim(item.substr(eq + 1));
      if (key == "drop" && eq == std::string_view::npos) {
        has_drop = true;
      } else if (eq == std::string_view::npos) {
        bad_rule(rule_text, cat(std::string_view("'"), item, std::string_view("' is neither key=value nor drop")));
      } else if (key == "flow") {
        if (value.empty()) bad_rule(rule_text, "flow= needs a pattern");
        rule.flow = std::string(value);
      } else if (key == "from") {
        rule.from = static_cast<int>(number(rule_text, key, value));
      } else if (key == "to") {
        rule.to = static_cast<int>(number(rule_text, key, value));
      } else if (key == "delay") {
        has_delay = true;
        rule.delay = std::chrono::milliseconds(number(rule_text, key, value));
        if (rule.delay.count() == 0) bad_rule(rule_text, "delay= must be at least 1 ms");
      } else if (key == "first") {
        rule.first = number(rule_text, key, value);
        if (rule.first == 0) bad_rule(rule_text, "first= counts from 1");
      } else if (key == "every") {
        rule.every = number(rule_text, key, value);
        if (rule.every == 0) bad_rule(rule_text, "every= must be at least 1");
      } else if (key == "count") {
        rule.count = number(rule_text, key, value);
      } else {
        bad_rule(rule_text, cat(std::string_view("unknown key '"), key,
                                 std::string_view("' (flow, from, to, delay, drop, first, every, count)")));
      }
    }
    if (rule.flow.empty()) bad_rule(rule_text, "flow=PATTERN is required");
    if (has_drop == has_delay) bad_rule(rule_text, "needs exactly one of drop and delay=MS");
    rule.drop = has_drop;
    rules.push_back(std::move(rule));
  }
  return rules;
}

std::unique_ptr<RingFaults> RingFaults::resolve(const std::vector<FaultRule>& rules, const FlowSpec& spec,
                                                std::size_t target_index, bool lossy) {
  const int me = spec.targets.at(target_index).rank;
  std::vector<FaultRule> matching;
  std::vector<std::ptrdiff_t> rule_of(spec.sources.size(), -1);
  for (const FaultRule& rule : rules) {
    if (::fnmatch(rule.flow.c_str(), spec.name.c_str(), 0) != 0) continue;
    if (rule.to >= 0 && rule.to != me) continue;
    bool used = false;
    for (std::size_t s = 0; s < spec.sources.size(); ++s) {
      if (rule_of[s] >= 0 || (rule.from >= 0 && rule.from != spec.sources[s].rank)) continue;
      rule_of[s] = static_cast<std::ptrdiff_t>(matching.size());
      used = true;
    }
    if (!used) continue;
    if (rule.drop && !lossy) {
      bad_rule(rule.text, cat(std::string_view("drop matches flow '"), spec.name, std::string_view("' ("),
                              spec.type.name(),
                              std::string_view("), which never loses a segment; only ordered replicate flows (whose "
                                               "targets report a lost segment as a gap) can drop one: use delay= here")));
    }
    matching.push_back(rule);
  }
  if (matching.empty()) return nullptr;
  auto faults = std::make_unique<RingFaults>();
  faults->rules_ = std::move(matching);
  faults->links_.resize(spec.sources.size());
  for (std::size_t s = 0; s < spec.sources.size(); ++s) {
    if (rule_of[s] >= 0) faults->links_[s].rule = &faults->rules_[static_cast<std::size_t>(rule_of[s])];
  }
  return faults;
}

std::unique_ptr<RingFaults> RingFaults::from_setting(const FlowSpec& spec, std::size_t target_index, bool lossy) {
  const std::string text = config::get_string("flow_faults");
  if (text.empty()) return nullptr;
  return resolve(parse_fault_rules(text), spec, target_index, lossy);
}

RingFaults::Verdict RingFaults::judge(std::size_t ring, const memory::SegmentView& segment) {
  Link& link = links_[ring];
  if (link.rule == nullptr || segment.end_of_stream) return Verdict::deliver;
  const FaultRule& rule = *link.rule;
  if (segment.sequence != link.last_sequence) {  // a segment not judged before
    link.last_sequence = segment.sequence;
    ++link.seen;
    const bool chosen = link.seen >= rule.first && (link.seen - rule.first) % rule.every == 0 &&
                        (rule.count == 0 || link.hits < rule.count);
    if (chosen) {
      ++link.hits;
      if (rule.drop) {
        ++dropped_;
        return Verdict::drop;
      }
      ++delayed_;
      link.holding = true;
      link.due = std::chrono::steady_clock::now() + rule.delay;
    }
  }
  if (link.holding) {
    if (std::chrono::steady_clock::now() < link.due) return Verdict::hold;
    link.holding = false;
  }
  return Verdict::deliver;
}

}  // namespace dfi::flow::detail
