#include "gtest/gtest.h"
#include "server/ferry_server.h"

namespace ferry {
namespace {

TEST(DescriptorPlanTest, LargeLimitKeepsTheFlags) {
  FerryServerOptions options;
  options.data.threads = 2;
  auto plan = PlanDescriptors(1 << 20, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->max_connections, options.data.max_connections);
  EXPECT_EQ(plan->max_cached_map_outputs, options.store.max_cached_map_outputs);
  EXPECT_TRUE(plan->clamped.empty());
}

TEST(DescriptorPlanTest, SmallLimitLowersConnectionsToFit) {
  FerryServerOptions options;
  options.data.threads = 2;
  auto plan = PlanDescriptors(1024, options);
  ASSERT_TRUE(plan.ok());
  // Splice mode: the pipes, then two descriptors a connection; everything fits under
  // the limit.
  EXPECT_GE(plan->max_pipes, 2u);
  EXPECT_LE(plan->reserve + 2 * plan->max_pipes + plan->max_data_files + 2 * plan->max_connections,
            1024u);
  EXPECT_GT(plan->max_connections, 100u);
  EXPECT_NE(plan->clamped.find("--max-connections lowered from 10000"), std::string::npos);
  EXPECT_NE(plan->clamped.find("--max-open-files lowered from 1024"), std::string::npos);
  // Defaults lowered to fit: the plan working, not a warning.
  EXPECT_FALSE(plan->clamped_a_setting);
  options.data.max_connections = 5000;
  plan = PlanDescriptors(1024, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->clamped_a_setting);
}

TEST(DescriptorPlanTest, CopyModeConnectionsTakeOneDescriptorAndNoPipes) {
  FerryServerOptions options;
  options.connection.mode = DataPlaneMode::kCopy;
  auto splice = PlanDescriptors(4096, FerryServerOptions{});
  auto copy = PlanDescriptors(4096, options);
  ASSERT_TRUE(splice.ok() && copy.ok());
  EXPECT_EQ(copy->max_pipes, 0u);
  EXPECT_GT(copy->max_connections, 2 * splice->max_connections - 1);
}

TEST(DescriptorPlanTest, PipesAsAskedFitAnEighthOfTheDescriptors) {
  FerryServerOptions options;
  options.data.threads = 2;
  options.data.max_pipes = 100000;
  auto plan = PlanDescriptors(4096, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_LE(2 * plan->max_pipes, (4096 - plan->reserve) / 8);
  EXPECT_NE(plan->clamped.find("--max-pipes lowered from 100000"), std::string::npos);
  EXPECT_TRUE(plan->clamped_a_setting);
  options.data.max_pipes = 10;
  plan = PlanDescriptors(4096, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->max_pipes, 10u);
}

TEST(DescriptorPlanTest, MergedPartitionsFitAQuarterOfTheDescriptors) {
  FerryServerOptions options;
  options.data.threads = 2;
  options.spark.address = "127.0.0.1:0";
  options.spark.push.enabled = true;
  auto plan = PlanDescriptors(1 << 20, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->spark_units, options.spark.push.max_open_partitions);
  EXPECT_TRUE(plan->clamped.empty()) << plan->clamped;
  plan = PlanDescriptors(8192, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_LT(plan->spark_units, options.spark.push.max_open_partitions);
  EXPECT_GT(plan->spark_units, 300u);
  EXPECT_LE(3 * plan->spark_units, (8192 - plan->reserve) / 4);
  // Everything fits: a connection pushing holds its socket and a waiting block's file.
  EXPECT_LE(plan->reserve + 2 * plan->max_pipes + 3 * plan->spark_units + plan->max_data_files +
                2 * plan->max_connections,
            8192u);
  EXPECT_NE(plan->clamped.find("--spark-push-max-open-partitions lowered from 4096"),
            std::string::npos)
      << plan->clamped;
  EXPECT_FALSE(plan->clamped_a_setting);
  // Without push-based shuffle, none are planned.
  options.spark.push.enabled = false;
  plan = PlanDescriptors(8192, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->spark_units, 0u);
  // Copy mode with push-based shuffle: two descriptors a connection.
  options.spark.push.enabled = true;
  options.connection.mode = DataPlaneMode::kCopy;
  plan = PlanDescriptors(8192, options);
  ASSERT_TRUE(plan.ok());
  EXPECT_LE(
      plan->reserve + 3 * plan->spark_units + plan->max_data_files + 2 * plan->max_connections,
      8192u);
}

TEST(DescriptorPlanTest, TooFewDescriptorsIsAnError) {
  auto plan = PlanDescriptors(64, FerryServerOptions{});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("RLIMIT_NOFILE"), std::string::npos);
}

}  // namespace
}  // namespace ferry
