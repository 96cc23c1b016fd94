#include "base/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace sweep {
namespace {

TEST(Utf8Test, AcceptsTextOfEveryLength) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("/data/runs"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9"));           // é
  EXPECT_TRUE(IsValidUtf8("\xe2\x82\xac"));          // €
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x98\x80"));      // an emoji
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));      // U+10FFFF
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));  // NUL is a character
}

TEST(Utf8Test, RefusesWhatIsNotUtf8) {
  EXPECT_FALSE(IsValidUtf8("u\xfe"));  // never in UTF-8
  EXPECT_FALSE(IsValidUtf8("fm\xff"));
  EXPECT_FALSE(IsValidUtf8("caf\xe9"));  // Latin-1 é
  EXPECT_FALSE(IsValidUtf8("\x80"));     // a continuation first
  EXPECT_FALSE(IsValidUtf8("\xc3"));     // cut short
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));  // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));
  EXPECT_FALSE(IsValidUtf8("\xf0\x80\x80\xaf"));
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xc3\x28"));          // no continuation
}

TEST(Utf8Test, TextShowsStrayBytesAndCanBeLossless) {
  EXPECT_EQ(Utf8Text("/data/caf\xc3\xa9"), "/data/caf\xc3\xa9");
  EXPECT_EQ(Utf8Text("/tmp/u\xfe/x"), "/tmp/u\\xFE/x");
  EXPECT_EQ(Utf8Text("\xe2\x82"), "\\xE2\\x82");  // a character cut short
  EXPECT_EQ(Utf8Text("a\\b"), "a\\b");
  // Lossless: a name that holds the text \xFE is not the byte 0xFE.
  EXPECT_EQ(Utf8Text("a\\b", true), "a\\\\b");
  EXPECT_NE(Utf8Text("u\xfe", true), Utf8Text("u\\xFE", true));
  EXPECT_TRUE(IsValidUtf8(Utf8Text("\xff\xfe\xc3", true)));
}

}  // namespace
}  // namespace sweep
