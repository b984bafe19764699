// The result JSON (schema dfi-bench/1): what the builder writes, and what the validator rejects.
#include "bench/result.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "dfi/common/error.hpp"

namespace dfi::tools::bench {
namespace {

using nlohmann::json;

bool mentions(const std::vector<std::string>& problems, const std::string& part) {
  return std::any_of(problems.begin(), problems.end(),
                     [&](const std::string& p) { return p.find(part) != std::string::npos; });
}

Result sample_result() {
  Result result("demo", "Demo scenario", "what it measures");
  result.set_parameters({{"sizes", {64, 4096}}});
  result.add_baseline("ucx_perftest", "ucp_put_bw");
  Panel& bw = result.panel("bw", "Bandwidth", {"message size", "B", "log2"},
                           {"bandwidth", "GB/s", "linear"}, Better::higher);
  Panel& lat = result.panel("lat", "Latency", {"operation", "", "category"},
                            {"latency", "us", "linear"}, Better::lower);
  bw.series("dfi", Role::dfi, "DFI");
  bw.series("base", Role::baseline, "ucx_perftest");
  bw.compare("dfi", "base", 0.9);
  lat.series("dfi", Role::dfi, "DFI");
  lat.series("base", Role::baseline, "ucx_perftest");
  lat.compare("dfi", "base");
  for (double v : {1.0, 3.0, 2.0}) bw.add("dfi", 64, v);
  for (double v : {4.0, 4.0, 4.0}) bw.add("base", 64, v);
  bw.add("dfi", 4096, 10.0);  // no baseline point at 4096: no ratio there
  bw.add_command("dfi", "dfi cluster run ...");
  bw.add_command("dfi", "dfi cluster run ...");  // deduplicated
  lat.add("dfi", "put ping-pong", 0.2);
  lat.add("base", "put ping-pong", 0.1);
  lat.add("dfi", "put + flush", 0.3);  // DFI only
  return result;
}

RunInfo sample_info() {
  RunInfo info;
  info.command = "dfi bench demo --quick";
  info.transport = "shm";
  info.quick = true;
  info.repeat = 3;
  return info;
}

TEST(Median, OddEvenEmpty) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({}), 0);
}

TEST(Result, LayoutMediansAndRatios) {
  const json r = sample_result().to_json(sample_info());
  EXPECT_TRUE(validate_result(r).empty()) << r.dump(1);
  EXPECT_EQ(r["schema"], kResultSchema);
  EXPECT_EQ(r["scenario"], "demo");
  EXPECT_EQ(r["command"], "dfi bench demo --quick");
  EXPECT_EQ(r["repeat"], 3);
  EXPECT_TRUE(r["machine"]["nproc"].get<int>() >= 1);
  EXPECT_FALSE(r["machine"]["cpu"].get<std::string>().empty());
  EXPECT_EQ(r["machine"]["loadavg"].size(), 3u);
  ASSERT_EQ(r["panels"].size(), 2u);

  const json& bw = r["panels"][0];
  EXPECT_EQ(bw["x"]["unit"], "B");
  EXPECT_EQ(bw["better"], "higher");
  const json& dfi = bw["series"][0];
  EXPECT_EQ(dfi["role"], "dfi");
  EXPECT_EQ(dfi["commands"].size(), 1u);
  EXPECT_DOUBLE_EQ(dfi["points"][0]["value"].get<double>(), 2.0);  // median of 1, 3, 2
  EXPECT_DOUBLE_EQ(dfi["points"][0]["min"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(dfi["points"][0]["max"].get<double>(), 3.0);
  EXPECT_EQ(dfi["points"][0]["samples"].size(), 3u);
  ASSERT_EQ(bw["ratios"].size(), 1u);
  EXPECT_EQ(bw["ratios"][0]["x"], 64);
  EXPECT_DOUBLE_EQ(bw["ratios"][0]["ratio"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(bw["ratios"][0]["target"].get<double>(), 0.9);

  const json& lat = r["panels"][1];
  ASSERT_EQ(lat["ratios"].size(), 1u);
  EXPECT_EQ(lat["ratios"][0]["x"], "put ping-pong");
  EXPECT_DOUBLE_EQ(lat["ratios"][0]["ratio"].get<double>(), 2.0);
}

TEST(Result, SurvivesASerialisationRoundTrip) {
  const json r = sample_result().to_json(sample_info());
  EXPECT_TRUE(validate_result(json::parse(r.dump())).empty());
}

TEST(Result, UndeclaredSeriesIsAnError) {
  Result result("demo", "Demo");
  Panel& p = result.panel("p", "P", {"x", "", "linear"}, {"y", "s", "linear"}, Better::lower);
  EXPECT_THROW(p.add("nope", 1, 1.0), Error);
  EXPECT_THROW(p.compare("nope", "also-nope"), Error);
  EXPECT_THROW(result.panel("missing"), Error);
}

TEST(Result, StackedPanelsSaySo) {
  Result result("demo", "Demo");
  Panel& parts = result.panel("parts", "Parts", {"time", "s", "linear"}, {"bandwidth", "GB/s", "linear"}, Better::higher);
  parts.series("a", Role::dfi, "A");
  parts.add("a", 0.5, 1.0);
  parts.stacked();
  Panel& plain = result.panel("plain", "Plain", {"time", "s", "linear"}, {"bandwidth", "GB/s", "linear"}, Better::higher);
  plain.series("a", Role::dfi, "A");
  plain.add("a", 0.5, 1.0);
  json r = result.to_json(sample_info());
  EXPECT_TRUE(validate_result(r).empty()) << r.dump(1);
  EXPECT_EQ(r["panels"][0]["stacked"], true);
  EXPECT_FALSE(r["panels"][1].contains("stacked"));
  r["panels"][0]["stacked"] = "yes";
  EXPECT_TRUE(mentions(validate_result(r), "stacked"));
}

TEST(Validate, RejectsBrokenResults) {
  const json good = sample_result().to_json(sample_info());

  json r = good;
  r.erase("machine");
  EXPECT_TRUE(mentions(validate_result(r), "'machine'"));

  r = good;
  r["schema"] = "something/2";
  EXPECT_TRUE(mentions(validate_result(r), "schema"));

  r = good;
  r["panels"][0]["series"][0]["points"][0]["value"] = 99.0;
  EXPECT_TRUE(mentions(validate_result(r), "not the median"));

  r = good;
  r["panels"][0]["ratios"][0]["ratio"] = 7.0;
  EXPECT_TRUE(mentions(validate_result(r), "not dfi/baseline"));

  r = good;
  r["panels"][0]["series"][1]["role"] = "competitor";
  EXPECT_TRUE(mentions(validate_result(r), "role"));

  r = good;
  r["panels"][0]["y"].erase("unit");
  EXPECT_TRUE(mentions(validate_result(r), "'unit'"));

  r = good;
  r["panels"][0]["series"][0]["points"][0]["samples"] = json::array();
  EXPECT_TRUE(mentions(validate_result(r), "samples"));

  r = good;
  r["panels"] = json::array();
  EXPECT_TRUE(mentions(validate_result(r), "no panels"));

  EXPECT_FALSE(validate_result(json::array()).empty());
}

}  // namespace
}  // namespace dfi::tools::bench
