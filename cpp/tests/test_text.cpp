#include <gtest/gtest.h>

#include "core/text.h"

using namespace tensoracle::core;

TEST(Text, Utf8Validation) {
  EXPECT_TRUE(valid_utf8(""));
  EXPECT_TRUE(valid_utf8("plain ascii"));
  EXPECT_TRUE(valid_utf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(valid_utf8("\xFF"));
  EXPECT_FALSE(valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(valid_utf8("\xE0\x80\xAF"));      // overlong, 3 bytes
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));      // surrogate U+D800
  EXPECT_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(valid_utf8("\xE2\x82"));          // truncated
  EXPECT_FALSE(valid_utf8("a\x80z"));            // stray continuation byte
}

TEST(Text, QuotedEscapesAndTruncates) {
  EXPECT_EQ(quote_name("w"), "'w'");
  EXPECT_EQ(quote_name("a\nb\x7f"), "'a\\x0Ab\\x7F'");
  EXPECT_EQ(quote_name("\xFF\xC3\xA9"), "'\\xFF\xC3\xA9'");
  std::string big(10000, 'x');
  auto q = quote_name(big, 50);
  EXPECT_EQ(q.size(), 50 + 5u);
  EXPECT_EQ(q.substr(q.size() - 4), "...'");
  // Never cut inside a multi-byte character.
  std::string euros;
  for (int i = 0; i < 40; ++i) euros += "\xE2\x82\xAC";
  EXPECT_TRUE(valid_utf8(quote_name(euros, 10)));
}

TEST(Text, JsonStringsAsSerdeJsonWritesThem) {
  std::string out;
  append_json_string(out, "a\"b\\c\b\f\n\r\t\x01\x1f\x7f\xC3\xA9/");
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\xC3\xA9/\"");
}
