// FERRY_OPTION_FLAG and its kin on an options struct of the test's own.
#include "common/option_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace ferry {
namespace {

struct WidgetOptions {
  size_t max_widgets = 12;
  uint16_t port = 7;
  absl::Duration timeout = absl::Seconds(3);
  bool loud = false;
  std::string name = "w";
  std::string secret;
};

absl::Status SetSecret(const std::string& value, WidgetOptions& options) {
  if (value == "bad") return absl::InvalidArgumentError("--widget-secret: bad");
  options.secret = "<" + value + ">";
  return absl::OkStatus();
}

}  // namespace
}  // namespace ferry

FERRY_OPTION_FLAG(ferry::WidgetOptions, max_widgets, max_widgets, "Widgets at most.");
FERRY_OPTION_FLAG(ferry::WidgetOptions, widget_port, port, "A 16-bit count.");
FERRY_OPTION_FLAG(ferry::WidgetOptions, widget_timeout, timeout, "A duration.");
FERRY_OPTION_FLAG(ferry::WidgetOptions, widget_loud, loud, "A bool.");
FERRY_OPTION_FLAG_DEFAULT(ferry::WidgetOptions, widget_name, name, "cli", "Its own default.");
FERRY_OPTION_FLAG_FN(ferry::WidgetOptions, std::string, widget_secret, "", "A function's.",
                     ferry::SetSecret);

namespace ferry {
namespace {

TEST(OptionFlagsTest, FlagsTakeTheStructsDefaultsUnlessTheyNameTheirOwn) {
  EXPECT_EQ(absl::GetFlag(FLAGS_max_widgets), 12);
  EXPECT_EQ(absl::GetFlag(FLAGS_widget_port), 7);
  EXPECT_EQ(absl::GetFlag(FLAGS_widget_timeout), absl::Seconds(3));
  EXPECT_EQ(absl::GetFlag(FLAGS_widget_name), "cli");
  EXPECT_EQ(OptionFlags<WidgetOptions>::size(), 6u);
  WidgetOptions options;
  ASSERT_TRUE(ApplyOptionFlags(&options).ok());
  EXPECT_EQ(options.max_widgets, 12u);
  EXPECT_EQ(options.name, "cli");
  EXPECT_EQ(options.secret, "<>");
}

TEST(OptionFlagsTest, EachFlagSetsItsField) {
  absl::FlagSaver restore;
  absl::SetFlag(&FLAGS_max_widgets, 40);
  absl::SetFlag(&FLAGS_widget_port, 65535);
  absl::SetFlag(&FLAGS_widget_timeout, absl::Milliseconds(250));
  absl::SetFlag(&FLAGS_widget_loud, true);
  absl::SetFlag(&FLAGS_widget_secret, "x");
  WidgetOptions options;
  ASSERT_TRUE(ApplyOptionFlags(&options).ok());
  EXPECT_EQ(options.max_widgets, 40u);
  EXPECT_EQ(options.port, 65535);
  EXPECT_EQ(options.timeout, absl::Milliseconds(250));
  EXPECT_TRUE(options.loud);
  EXPECT_EQ(options.secret, "<x>");
}

TEST(OptionFlagsTest, ACountBelowZeroOrPastItsTypeIsRefusedByName) {
  absl::FlagSaver restore;
  WidgetOptions options;
  absl::SetFlag(&FLAGS_max_widgets, -1);
  EXPECT_EQ(ApplyOptionFlags(&options).message(), "--max-widgets must be zero or more, not -1");
  absl::SetFlag(&FLAGS_max_widgets, 1);
  absl::SetFlag(&FLAGS_widget_port, 65536);
  EXPECT_EQ(ApplyOptionFlags(&options).message(), "--widget-port must be at most 65535, not 65536");
  absl::SetFlag(&FLAGS_widget_port, 1);
  absl::SetFlag(&FLAGS_widget_secret, "bad");
  EXPECT_EQ(ApplyOptionFlags(&options).message(), "--widget-secret: bad");
}

}  // namespace
}  // namespace ferry
