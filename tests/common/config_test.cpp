#include <gtest/gtest.h>

#include <cstdlib>

#include "dfi/common/config.hpp"
#include "dfi/common/error.hpp"

namespace dfi {
namespace {

TEST(Config, DefaultsComeFromTheTable) {
  ::unsetenv("DFI_OP_TIMEOUT_MS");
  EXPECT_EQ(config::get_int("op_timeout_ms"), 10000);
}

TEST(Config, EnvironmentOverridesDefault) {
  ::setenv("DFI_OP_TIMEOUT_MS", "1234", 1);
  EXPECT_EQ(config::get_int("op_timeout_ms"), 1234);
  ::unsetenv("DFI_OP_TIMEOUT_MS");
}

TEST(Config, MalformedNumberNamesTheVariable) {
  ::setenv("DFI_OP_TIMEOUT_MS", "12ms", 1);
  try {
    (void)config::get_int("op_timeout_ms");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("DFI_OP_TIMEOUT_MS"), std::string::npos);
  }
  ::unsetenv("DFI_OP_TIMEOUT_MS");
}

TEST(Config, UnknownSettingIsAnError) {
  EXPECT_THROW((void)config::get_string("no_such_setting"), Error);
}

}  // namespace
}  // namespace dfi
