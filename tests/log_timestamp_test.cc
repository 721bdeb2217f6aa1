// Log lines start with the local time unless RONDE_LOG_HIDE_TIME (HOROVOD_LOG_HIDE_TIME) asks
// otherwise, as Horovod's do; `ronde run --log-without-timestamp` sets it.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <map>
#include <regex>
#include <string>

#include "common/logging.h"
#include "ronde/settings.h"

namespace ronde {
namespace {

Settings read(const std::map<std::string, std::string>& env) {
  return Settings::fromLookup([&](const std::string& name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

class LogTimestamp : public ::testing::Test {
 protected:
  void SetUp() override { setLogPrefix("[ronde rank 2]"); }
  void TearDown() override { configureLogging(Settings()); }
};

TEST_F(LogTimestamp, ShownByDefaultToTheMicrosecond) {
  configureLogging(read({}));
  std::tm local{};
  local.tm_year = 2026 - 1900;
  local.tm_mon = 0;
  local.tm_mday = 31;
  local.tm_hour = 13;
  local.tm_min = 5;
  local.tm_sec = 59;
  local.tm_isdst = -1;
  const auto now = std::chrono::system_clock::from_time_t(std::mktime(&local)) +
                   std::chrono::microseconds(1234);
  EXPECT_EQ(formatLogLine(LogLevel::kWarning, "slow", now),
            "[2026-01-31 13:05:59.001234] [ronde rank 2] WARNING: slow");
}

TEST_F(LogTimestamp, HiddenByEitherVariable) {
  for (const char* name : {"RONDE_LOG_HIDE_TIME", "HOROVOD_LOG_HIDE_TIME"}) {
    configureLogging(read({{name, "1"}}));
    EXPECT_EQ(formatLogLine(LogLevel::kError, "gone", std::chrono::system_clock::now()),
              "[ronde rank 2] ERROR: gone")
        << name;
  }
  configureLogging(read({{"RONDE_LOG_HIDE_TIME", "0"}}));
  EXPECT_TRUE(std::regex_match(
      formatLogLine(LogLevel::kInfo, "back", std::chrono::system_clock::now()),
      std::regex(R"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\] \[ronde rank 2\] INFO: back)")));
}

TEST_F(LogTimestamp, TheSettingIsInTheTable) {
  EXPECT_EQ(Settings::defaultText("LOG_HIDE_TIME"), "false");
  EXPECT_TRUE(read({{"HOROVOD_LOG_HIDE_TIME", "1"}}).log_hide_time);
  EXPECT_FALSE(read({}).log_hide_time);
}

}  // namespace
}  // namespace ronde
