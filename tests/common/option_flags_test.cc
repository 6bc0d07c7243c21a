// FERRY_OPTION_FLAG and its kin on an options struct of the test's own.
#include "common/option_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/reflection.h"
#include "absl/time/time.h"
#include "common/option_check.h"
#include "common/status_macros.h"
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

// Options with a Validate(): its rule is the one a negative count is refused with.
struct GadgetOptions {
  size_t gadgets = 2;
  size_t spares = 0;
  absl::Status Validate() const {
    FERRY_RETURN_IF_ERROR(CheckRange("gadgets", gadgets, 1, 8));
    return CheckRange("spares", spares, 0, 4);
  }
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
FERRY_OPTION_FLAG(ferry::GadgetOptions, gadgets, gadgets, "Between 1 and 8.");
FERRY_OPTION_FLAG(ferry::GadgetOptions, spares, spares, "Between 0 and 4.");
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

// --max-connections=-5 said "zero or more" and =0 "between 1 and ...": one flag, two
// rules. A negative count is refused with the component's own rule.
TEST(OptionFlagsTest, ANegativeCountIsRefusedWithTheComponentsRule) {
  absl::FlagSaver restore;
  GadgetOptions options;
  absl::SetFlag(&FLAGS_gadgets, -3);
  EXPECT_EQ(ApplyOptionFlags(&options).message(), "--gadgets must be between 1 and 8, not -3");
  absl::SetFlag(&FLAGS_gadgets, 0);
  EXPECT_EQ(ApplyOptionFlags(&options).ok() ? options.Validate().message() : "",
            "--gadgets must be between 1 and 8, not 0");
  absl::SetFlag(&FLAGS_gadgets, 1);
  absl::SetFlag(&FLAGS_spares, -1);
  EXPECT_EQ(ApplyOptionFlags(&options).message(), "--spares must be zero or more, not -1");
}

}  // namespace
}  // namespace ferry
