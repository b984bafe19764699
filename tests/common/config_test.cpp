#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "dfi/common/backoff.hpp"

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

// A host with at least twice as many ranks as cores waits briefly everywhere (the *_syscall
// rounds), unless the plain rounds are set; an uncrowded or unknown host keeps them.
TEST(Config, ACrowdedHostWaitsBrieflyUnlessTheRoundsAreSet) {
  for (const char* v : {"DFI_LOCAL_RANKS", "DFI_WAIT_SPIN_ROUNDS", "DFI_WAIT_YIELD_ROUNDS",
                        "DFI_WAIT_SPIN_ROUNDS_SYSCALL", "DFI_WAIT_YIELD_ROUNDS_SYSCALL"}) {
    ::unsetenv(v);
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const BackoffSettings plain = BackoffSettings::from_config();
  const BackoffSettings syscall = BackoffSettings::from_config(/*polls_are_syscalls=*/true);
  EXPECT_FALSE(crowded_host());
  EXPECT_NE(plain.spin, syscall.spin);

  ::setenv("DFI_LOCAL_RANKS", std::to_string(2 * cores - 1).c_str(), 1);
  EXPECT_FALSE(crowded_host());
  EXPECT_EQ(BackoffSettings::from_config().spin, plain.spin);
  EXPECT_EQ(BackoffSettings::from_config().yield, plain.yield);

  ::setenv("DFI_LOCAL_RANKS", std::to_string(2 * cores).c_str(), 1);
  EXPECT_TRUE(crowded_host());
  EXPECT_EQ(BackoffSettings::from_config().spin, syscall.spin);
  EXPECT_EQ(BackoffSettings::from_config().yield, syscall.yield);

  ::setenv("DFI_WAIT_SPIN_ROUNDS", "777", 1);  // chosen: kept, the yield rounds still brief
  EXPECT_EQ(BackoffSettings::from_config().spin, 777u);
  EXPECT_EQ(BackoffSettings::from_config().yield, syscall.yield);
  ::unsetenv("DFI_WAIT_SPIN_ROUNDS");
  ::unsetenv("DFI_LOCAL_RANKS");
}

TEST(Config, UnknownSettingIsAnError) {
  EXPECT_THROW((void)config::get_string("no_such_setting"), Error);
}

}  // namespace
}  // namespace dfi
