#include "tests/testing/spark_apps.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ferry::testing {
namespace {

constexpr char kRegistered[] =
    "26/12/07 01:40:37 INFO TransportClientFactory: Found inactive connection to "
    "localhost/127.0.0.1:7337, creating a new one.";
constexpr char kCut[] =
    "26/12/07 01:41:20 INFO TransportClientFactory: Found inactive connection to "
    "localhost/127.0.0.1:7337, creating a new one.";
constexpr char kDriver[] =
    "26/12/07 01:41:21 INFO TransportClientFactory: Found inactive connection to "
    "localhost/127.0.0.1:40123, creating a new one.";
constexpr char kRetry[] =
    "26/12/07 01:41:22 INFO RetryingBlockTransferor: Retrying fetch (1/3) for 2 outstanding "
    "blocks after 5000 ms";

TEST(AnswersDifferTest, AnAnswerIsItsExpectedLineButForTheJobsName) {
  const std::vector<std::string> results = {
      R"({"checksum": 7, "first": 0, "job": "expected-sortByKey", "n": 3, "sorted": true})",
      R"({"checksum": 7, "first": 0, "job": "sortByKey", "n": 3, "sorted": true})",
      R"({"job": "expected-skew-join", "n": 3, "sv": 6})",
      R"({"job": "skew-join", "n": 3, "sv": 6})"};
  EXPECT_EQ(AnswersDiffer(results, {"sortByKey", "skew-join"}), "");
}

TEST(AnswersDifferTest, SaysWhichAnswerDiffersOrIsMissing) {
  const std::vector<std::string> results = {R"({"job": "expected-skew-join", "n": 3, "sv": 6})",
                                            R"({"job": "skew-join", "n": 3, "sv": 5})",
                                            R"({"job": "expected-sortByKey", "n": 3})"};
  const std::string differ = AnswersDiffer(results, {"skew-join", "sortByKey", "groupByKey"});
  EXPECT_NE(differ.find(R"("sv": 5} vs)"), std::string::npos) << differ;
  EXPECT_NE(differ.find("no RESULT of job sortByKey;"), std::string::npos) << differ;
  EXPECT_NE(differ.find("no RESULT of job groupByKey;"), std::string::npos) << differ;
}

TEST(FetchTroubleTest, KeepsTheFetchWordsAndClosedConnectionsToThePortOnly) {
  const LogLines found =
      FetchTrouble({{"a", absl::StrCat("INFO Executor: Running task 1.0\n", kRegistered, "\n",
                                       kDriver, "\n", kRetry, "\n")}},
                   7337);
  EXPECT_EQ(found.at("a"), (std::vector<std::string>{kRegistered, kRetry}));
}

TEST(FetchTroubleTest, NothingNewIsNothing) {
  const LogLines then = FetchTrouble({{"a", absl::StrCat(kRegistered, "\n", kRetry)}}, 7337);
  EXPECT_TRUE(FetchTroubleSince(then, then).empty());
}

TEST(FetchTroubleTest, AnExecutorFirstConnectingAfterwardsFindsItsRegistrationClosed) {
  const LogLines then = FetchTrouble({{"a", "INFO registered\n"}}, 7337);
  const LogLines now = FetchTrouble({{"a", absl::StrCat("INFO registered\n", kRegistered)}}, 7337);
  EXPECT_TRUE(FetchTroubleSince(then, now).empty());
  // Also a log that did not exist then.
  EXPECT_TRUE(FetchTroubleSince({}, now).empty());
}

TEST(FetchTroubleTest, AConnectionFoundClosedAgainIsTrouble) {
  const LogLines then = FetchTrouble({{"a", kRegistered}}, 7337);
  const LogLines now = FetchTrouble({{"a", absl::StrCat(kRegistered, "\n", kCut)}}, 7337);
  EXPECT_EQ(FetchTroubleSince(then, now), (std::vector<std::string>{absl::StrCat("a: ", kCut)}));
  // Once excused, never twice: a log new since then that finds two connections closed.
  const LogLines twice = FetchTrouble({{"b", absl::StrCat(kRegistered, "\n", kCut)}}, 7337);
  EXPECT_EQ(FetchTroubleSince({}, twice), (std::vector<std::string>{absl::StrCat("b: ", kCut)}));
}

TEST(FetchTroubleTest, ARetriedFetchIsTroubleInEveryLog) {
  const LogLines then = FetchTrouble({{"a", ""}, {"b", kRegistered}}, 7337);
  const LogLines now =
      FetchTrouble({{"a", kRetry}, {"b", absl::StrCat(kRegistered, "\n", kRetry)}}, 7337);
  EXPECT_EQ(FetchTroubleSince(then, now),
            (std::vector<std::string>{absl::StrCat("a: ", kRetry), absl::StrCat("b: ", kRetry)}));
}

}  // namespace
}  // namespace ferry::testing
