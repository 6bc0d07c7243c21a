// A top-level JSON object read as Jackson reads one into a Map: field kinds, the last of
// a name winning, only the asked-for strings kept, what follows ignored, depth bounded.
#include "common/json_object.h"

#include <string>

#include "gtest/gtest.h"

namespace ferry {
namespace {

TEST(JsonObjectTest, FieldsAreReadAsJacksonReadsAMap) {
  std::optional<JsonObject> o = JsonObject::Read(
      R"({"a":"first","b":true,"n":3.5,"z":null,"o":{"x":[1,2]},"l":[],"a":"last"}}} trailing)",
      {"a"}, 8);
  ASSERT_TRUE(o.has_value());
  ASSERT_NE(o->Find("a"), nullptr);
  EXPECT_EQ(o->Find("a")->kind, JsonField::kString);
  EXPECT_EQ(o->Find("a")->string, "last");
  EXPECT_EQ(o->Find("b")->kind, JsonField::kBool);
  EXPECT_TRUE(o->Find("b")->boolean);
  EXPECT_EQ(o->Find("n")->kind, JsonField::kNumber);
  EXPECT_EQ(o->Find("z")->kind, JsonField::kNull);
  EXPECT_EQ(o->Find("o")->kind, JsonField::kObject);
  EXPECT_EQ(o->Find("l")->kind, JsonField::kArray);
  EXPECT_EQ(o->Find("x"), nullptr);  // nested: not a top-level field
  EXPECT_FALSE(o->StringsOnly());
}

TEST(JsonObjectTest, OnlyTheStringsAskedForAreKept) {
  std::optional<JsonObject> o =
      JsonObject::Read(R"({"secret":"s3cr3t","other":"x"})", {"secret"}, 4);
  ASSERT_TRUE(o.has_value());
  EXPECT_TRUE(o->StringsOnly());
  EXPECT_EQ(o->Find("secret")->string, "s3cr3t");
  EXPECT_EQ(o->Find("other")->kind, JsonField::kString);
  EXPECT_EQ(o->Find("other")->string, "");
}

TEST(JsonObjectTest, AnythingButAWellFormedObjectWithinTheDepthIsNone) {
  for (const char* json : {"", "[1]", "\"s\"", "3", "{\"a\":", "{\"a\" 1}", "{\"a\":[[[[1]]]]}"}) {
    EXPECT_FALSE(JsonObject::Read(json, {}, 4).has_value()) << json;
  }
  EXPECT_TRUE(JsonObject::Read("{\"a\":[[1]]}", {}, 4).has_value());
  EXPECT_TRUE(JsonObject::Read("{}", {}, 1).has_value());
}

}  // namespace
}  // namespace ferry
