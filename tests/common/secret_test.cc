// Secret: its bytes are overwritten wherever a Secret stops holding them.
#include "common/secret.h"

#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace ferry {
namespace {

// Whether the `n` bytes at `p` are all zero.
bool Zeroed(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != '\0') return false;
  }
  return true;
}

TEST(SecretTest, HoldsItsBytes) {
  const Secret s("s3cret");
  EXPECT_EQ(s.view(), "s3cret");
  EXPECT_EQ(s.size(), 6u);
  EXPECT_FALSE(s.empty());
  EXPECT_TRUE(Secret().empty());
}

TEST(SecretTest, WipeOverwritesTheWholeBufferNotOnlyTheLength) {
  // Long enough to live on the heap, then shortened: the bytes past the length are the
  // old secret's too.
  std::string s(100, 'k');
  s.resize(10);
  const char* buffer = s.data();
  const size_t capacity = s.capacity();
  Secret::Wipe(s);
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.data(), buffer);  // the same buffer, overwritten in place
  EXPECT_TRUE(Zeroed(buffer, capacity));
}

TEST(SecretTest, TakingAStringWipesWhatTheMoveLeftInIt) {
  // A short string is moved by copying: its bytes stay in its own buffer.
  std::string short_one = "short";
  const char* buffer = short_one.data();
  const Secret s(std::move(short_one));
  EXPECT_EQ(s.view(), "short");
  EXPECT_TRUE(Zeroed(buffer, 5));
}

TEST(SecretTest, MovedFromIsEmptyAndCopiesAreIndependent) {
  Secret a("abc");
  Secret copy = a;
  Secret moved = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): what is checked
  EXPECT_EQ(moved.view(), "abc");
  EXPECT_EQ(copy.view(), "abc");
  moved = Secret("other");
  EXPECT_EQ(copy.view(), "abc");
  copy = moved;
  EXPECT_EQ(copy.view(), "other");
}

TEST(SecretTest, ComparesByBytes) {
  EXPECT_EQ(Secret("same"), Secret("same"));
  EXPECT_FALSE(Secret("same") == Secret("sane"));
  EXPECT_FALSE(Secret("same") == Secret("same!"));
}

TEST(SecretTest, ConstantTimeEqualsComparesEveryByteAndTheLength) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0b", 3)));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_FALSE(ConstantTimeEquals("xbc", "abc"));  // the first byte differs
}

TEST(SecretTest, WipeOverwritesABuffer) {
  unsigned char key[16];
  for (unsigned char& b : key) b = 0xa5;
  Secret::Wipe(key, sizeof(key));
  EXPECT_TRUE(Zeroed(reinterpret_cast<const char*>(key), sizeof(key)));
}

}  // namespace
}  // namespace ferry
