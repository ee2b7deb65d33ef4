// Hostile-input corpus for the safetensors reader: every malformed file must be rejected with
// a FormatError "[safetensors] NAME: ..." that names the tensor (where one is concerned) and
// the rule, and that stays short however large the offending input is.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "st_helpers.h"
#include "tensoracle/errors.h"
#include "tensoracle/safetensors.h"

namespace {

namespace st = tensoracle::safetensors;
using tensoracle::FormatError;
using tensoracle::IoError;
using tensoracle::testing::st_bytes;
using tensoracle::testing::TempDir;
using tensoracle::testing::write_bytes;

constexpr const char* kName = "hostile.safetensors";
constexpr const char* kPrefix = "[safetensors] hostile.safetensors: ";
constexpr std::size_t kMaxMessage = 1000;

struct Case {
  std::string name;             // test name: letters, digits and '_' only
  std::vector<std::byte> bytes;  // the whole file
  std::string expect;           // substring the message must contain
};

// GoogleTest prints a failing parameter: print its name, never its (maybe 1 MB) bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name << " (" << c.bytes.size() << " bytes)"; }

// A tensor entry `"name":{"dtype":"D","shape":S,"data_offsets":O}` (S and O are raw JSON).
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

// A tensor entry whose body is raw JSON text.
std::string raw_entry(const std::string& name, const std::string& body) {
  return "\"" + name + "\":" + body;
}

std::string obj(const std::string& inner) { return "{" + inner + "}"; }

std::vector<std::byte> raw(std::initializer_list<unsigned> values) {
  std::vector<std::byte> out;
  for (unsigned v : values) out.push_back(std::byte(v));
  return out;
}

std::vector<Case> hostile_cases() {
  std::vector<Case> c;
  auto add = [&c](std::string name, std::vector<std::byte> bytes, std::string expect) {
    c.push_back({std::move(name), std::move(bytes), std::move(expect)});
  };
  // A header with one tensor `t` and `data` bytes of data.
  auto one = [](const std::string& body, std::size_t data = 0) {
    return st_bytes(obj(raw_entry("t", body)), data);
  };
  auto t_f32 = [](const std::string& shape, const std::string& offsets) {
    return "{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };

  // --- the 8-byte length prefix --------------------------------------------------------
  add("EmptyFile", {}, "file is 0 bytes, shorter than the 8-byte header length");
  add("ShorterThan8Bytes", raw({2, 0, 0, 0, 0}),
      "file is 5 bytes, shorter than the 8-byte header length");
  add("HeaderLengthBeyondFile", st_bytes("{}", 0, 100),
      "header length 100 extends beyond the end of the file (10 bytes)");
  add("HeaderLengthBeyondFileByOne", st_bytes("{}", 0, 3),
      "header length 3 extends beyond the end of the file");
  // Declares 100,000,001 bytes but holds 2: the reader must refuse before reading/allocating.
  add("HeaderLengthAboveLimit", st_bytes("{}", 0, 100000001),
      "header length 100000001 exceeds the limit of 100000000 bytes");
  add("HeaderLengthMaxU64", raw({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'}),
      "header length 18446744073709551615 exceeds the limit");
  add("HeaderLengthHighBitOnly", raw({0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'}),
      "header length 9223372036854775808 exceeds the limit");

  // --- the header's first byte ---------------------------------------------------------
  add("ZeroHeaderLength", st_bytes(""), "header does not start with '{'");
  add("HeaderIsArray", st_bytes("[]"), "header does not start with '{' (it must be a JSON object)");
  add("HeaderIsString", st_bytes("\"{}\""), "header does not start with '{'");
  add("HeaderLeadingSpace", st_bytes(" {}"), "header does not start with '{'");
  add("HeaderUtf8Bom", st_bytes("\xef\xbb\xbf{}"), "header does not start with '{'");

  // --- JSON syntax ---------------------------------------------------------------------
  add("TruncatedJson", st_bytes("{\"t\":{\"dtype\":\"F32\""), "header is not valid JSON");
  add("TruncatedInsideString", st_bytes("{\"t"), "header is not valid JSON");
  add("TrailingGarbage", st_bytes("{}x"), "header is not valid JSON (at byte 3)");
  add("TwoObjects", st_bytes("{}{}"), "header is not valid JSON");
  add("TrailingCommaRoot", st_bytes("{\"__metadata__\":{},}"), "header is not valid JSON");
  add("TrailingCommaShape", one(t_f32("[1,]", "[0,4]"), 4), "header is not valid JSON");
  add("TrailingCommaMetadata", st_bytes("{\"__metadata__\":{\"k\":\"v\",}}"),
      "header is not valid JSON");
  add("SingleQuotedKey", st_bytes("{'t':{}}"), "header is not valid JSON");
  add("RawControlCharInKey", st_bytes("{\"a\nb\":{}}"), "header is not valid JSON");
  add("LoneSurrogateEscape", st_bytes("{\"__metadata__\":{\"k\":\"\\ud800\"}}"),
      "header is not valid JSON");
  add("LeadingZeroNumber", one(t_f32("[01]", "[0,4]"), 4), "header is not valid JSON");

  // --- UTF-8 inside strings ------------------------------------------------------------
  add("InvalidUtf8ByteFF", st_bytes("{\"t\xff\":{}}"), "header is not valid JSON");
  add("OverlongUtf8C0AF", st_bytes("{\"t\xc0\xaf\":{}}"), "header is not valid JSON");
  add("RawSurrogateBytes", st_bytes("{\"t\xed\xa0\x80\":{}}"), "header is not valid JSON");
  add("TruncatedUtf8Sequence", st_bytes("{\"t\xe2\x82\":{}}"), "header is not valid JSON");
  add("CodePointAbove10FFFF", st_bytes("{\"t\xf4\x90\x80\x80\":{}}"),
      "header is not valid JSON");
  add("InvalidUtf8InMetadataValue", st_bytes("{\"__metadata__\":{\"k\":\"v\xff\"}}"),
      "header is not valid JSON");
  add("InvalidUtf8InDtype", one("{\"dtype\":\"F3\x80\"}"), "header is not valid JSON");

  // --- duplicates ----------------------------------------------------------------------
  add("DuplicateTensorKey",
      st_bytes(obj(entry("t", "F32", "[1]", "[0,4]") + "," + entry("t", "F32", "[1]", "[4,8]")), 8),
      "duplicate key 't' in the header");
  add("DuplicateTensorKeyViaEscape",
      st_bytes(obj(entry("t", "F32", "[1]", "[0,4]") + "," + entry("\\u0074", "F32", "[1]", "[4,8]")), 8),
      "duplicate key 't' in the header");
  add("DuplicateMetadata", st_bytes("{\"__metadata__\":{},\"__metadata__\":{}}"),
      "duplicate key '__metadata__' in the header");
  add("DuplicateFieldInTensor",
      one("{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4),
      "tensor 't': duplicate field 'dtype'");
  add("DuplicateShapeField",
      one("{\"dtype\":\"F32\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,4]}", 4),
      "tensor 't': duplicate field 'shape'");
  add("DuplicateMetadataKey", st_bytes("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}"),
      "__metadata__: duplicate key 'k'");

  // --- dtype ---------------------------------------------------------------------------
  add("UnknownDtype", one(R"({"dtype":"F128","shape":[1],"data_offsets":[0,16]})", 16),
      "tensor 't': unknown dtype 'F128'");
  add("LowercaseDtype", one(R"({"dtype":"f32","shape":[1],"data_offsets":[0,4]})", 4),
      "tensor 't': unknown dtype 'f32'");
  add("EmptyDtype", one(R"({"dtype":"","shape":[1],"data_offsets":[0,4]})", 4),
      "tensor 't': unknown dtype ''");
  add("DtypeIsNumber", one(R"({"dtype":11,"shape":[1],"data_offsets":[0,4]})", 4),
      "tensor 't': dtype is a number, not a string");
  add("DtypeIsNull", one(R"({"dtype":null,"shape":[1],"data_offsets":[0,4]})", 4),
      "tensor 't': dtype is null, not a string");
  add("DtypeIsArray", one(R"({"dtype":["F32"],"shape":[1],"data_offsets":[0,4]})", 4),
      "tensor 't': dtype is an array, not a string");

  // --- required and unknown fields -----------------------------------------------------
  add("MissingDtype", one(R"({"shape":[1],"data_offsets":[0,4]})", 4),
      "tensor 't': missing field 'dtype'");
  add("MissingShape", one(R"({"dtype":"F32","data_offsets":[0,4]})", 4),
      "tensor 't': missing field 'shape'");
  add("MissingDataOffsets", one(R"({"dtype":"F32","shape":[1]})", 4),
      "tensor 't': missing field 'data_offsets'");
  add("EmptyTensorObject", one("{}"), "tensor 't': missing field 'dtype'");
  add("UnknownField", one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4],"offsets":[0,4]})", 4),
      "tensor 't': unknown field 'offsets'");
  add("TensorEntryIsNumber", one("5"), "tensor 't': entry is a number, not an object");
  add("TensorEntryIsString", one("\"F32\""), "tensor 't': entry is a string, not an object");
  add("TensorEntryIsArray", one("[]"), "tensor 't': entry is an array, not an object");
  add("TensorEntryIsNull", one("null"), "tensor 't': entry is null, not an object");

  // --- shape ---------------------------------------------------------------------------
  add("NegativeDimension", one(t_f32("[2,-1]", "[0,4]"), 4),
      "tensor 't': shape has negative dimension -1");
  // -0 is an integer equal to 0 in JSON; the reader rejects it (as the official reader does,
  // which parses it as a float).
  add("NegativeZeroDimension", one(t_f32("[-0]", "[0,0]")), "tensor 't': shape has negative dimension -0");
  add("FractionalDimension", one(t_f32("[1.5]", "[0,4]"), 4),
      "tensor 't': shape dimension '1.5' is not an integer in [0, 2^63)");
  add("ExponentDimension", one(t_f32("[1e1]", "[0,40]"), 40),
      "tensor 't': shape dimension '1e1' is not an integer");
  add("DimensionIs2Pow63", one(t_f32("[9223372036854775808]", "[0,4]"), 4),
      "tensor 't': shape dimension 9223372036854775808 overflows a signed 64-bit integer");
  add("DimensionAbove2Pow64", one(t_f32("[18446744073709551616]", "[0,4]"), 4),
      "tensor 't': shape dimension '18446744073709551616' is not an integer");
  add("ShapeIsNumber", one(t_f32("4", "[0,16]"), 16),
      "tensor 't': shape is a number, not an array of integers");
  add("ShapeIsString", one(t_f32("\"[4]\"", "[0,16]"), 16),
      "tensor 't': shape is a string, not an array of integers");
  add("ShapeIsObject", one(t_f32("{}", "[0,4]"), 4),
      "tensor 't': shape is an object, not an array of integers");
  add("NestedArrayInShape", one(t_f32("[[1]]", "[0,4]"), 4),
      "tensor 't': shape holds an array, not only integers");
  add("StringInShape", one(t_f32("[\"1\"]", "[0,4]"), 4),
      "tensor 't': shape holds a string, not only integers");
  add("BooleanInShape", one(t_f32("[true]", "[0,4]"), 4),
      "tensor 't': shape holds a boolean, not only integers");

  // --- data_offsets --------------------------------------------------------------------
  add("DataOffsetsOneEntry", one(t_f32("[1]", "[4]"), 4),
      "tensor 't': data_offsets has 1 entries, not 2");
  add("DataOffsetsThreeEntries", one(t_f32("[1]", "[0,4,8]"), 8),
      "tensor 't': data_offsets has more than 2 entries");
  add("DataOffsetsEmpty", one(t_f32("[]", "[]"), 4), "tensor 't': data_offsets has 0 entries, not 2");
  add("NegativeOffset", one(t_f32("[1]", "[-4,0]"), 4),
      "tensor 't': data_offsets has negative offset -4");
  add("FractionalOffset", one(t_f32("[1]", "[0,4.0]"), 4),
      "tensor 't': data_offsets entry '4.0' is not an integer in [0, 2^64)");
  add("OffsetAbove2Pow64", one(t_f32("[1]", "[0,18446744073709551616]"), 4),
      "tensor 't': data_offsets entry '18446744073709551616' is not an integer");
  add("DataOffsetsIsString", one(t_f32("[1]", "\"0,4\""), 4),
      "tensor 't': data_offsets is a string, not an array of 2 integers");
  add("NestedArrayInOffsets", one(t_f32("[1]", "[[0],[4]]"), 4),
      "tensor 't': data_offsets holds an array, not only integers");
  add("EndBeforeBegin", one(t_f32("[1]", "[8,4]"), 8),
      "tensor 't': data_offsets [8, 4] end before begin");

  // --- sizes ---------------------------------------------------------------------------
  add("ByteLengthNotShapeTimesElement", one(t_f32("[2]", "[0,4]"), 4),
      "tensor 't': data_offsets [0, 4] hold 4 bytes, but shape [2] of F32 needs 8");
  add("ByteLengthTooLarge", one(t_f32("[1]", "[0,8]"), 8),
      "tensor 't': data_offsets [0, 8] hold 8 bytes, but shape [1] of F32 needs 4");
  add("ScalarWithoutBytes", one(t_f32("[]", "[0,0]")),
      "tensor 't': data_offsets [0, 0] hold 0 bytes, but shape [] of F32 needs 4");
  add("F4OddElementCount", one(R"({"dtype":"F4","shape":[3],"data_offsets":[0,2]})", 2),
      "tensor 't': shape [3] holds 3 elements of F4 (4 bits each), which do not fill whole bytes");
  add("F4Scalar", one(R"({"dtype":"F4","shape":[],"data_offsets":[0,1]})", 1),
      "tensor 't': shape [] holds 1 elements of F4 (4 bits each), which do not fill whole bytes");
  add("F6ElementCountNotMultipleOf4", one(R"({"dtype":"F6_E2M3","shape":[2],"data_offsets":[0,2]})", 2),
      "tensor 't': shape [2] holds 2 elements of F6_E2M3 (6 bits each), which do not fill whole bytes");
  add("ShapeProductOverflows64Bits", one(t_f32("[4294967296,4294967296]", "[0,4]"), 4),
      "tensor 't': shape [4294967296, 4294967296] of F32 overflows 64-bit sizes");
  add("ShapeBytesOverflow64Bits", one(t_f32("[4611686018427387904]", "[0,4]"), 4),
      "tensor 't': shape [4611686018427387904] of F32 overflows 64-bit sizes");

  // --- layout of the data section ------------------------------------------------------
  add("OffsetsBeyondDataSection", one(t_f32("[2]", "[0,8]"), 4),
      "tensor 't': data_offsets [0, 8] extend beyond the data section (4 bytes)");
  add("OffsetsFarBeyondDataSection",
      one(t_f32("[1]", "[18446744073709551611,18446744073709551615]"), 4),
      "tensor 't': data_offsets [18446744073709551611, 18446744073709551615] extend beyond the data section (4 bytes)");
  add("TwoTensorsOverlap",
      st_bytes(obj(entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]")), 12),
      "tensor 'b' data_offsets [4, 12] overlaps tensor 'a' data_offsets [0, 8]");
  add("TwoTensorsSameRange",
      st_bytes(obj(entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[0,4]")), 4),
      "tensor 'b' data_offsets [0, 4] overlaps tensor 'a' data_offsets [0, 4]");
  add("EmptyTensorInsideAnother",
      st_bytes(obj(entry("a", "F32", "[2]", "[0,8]") + "," + entry("e", "F32", "[0]", "[4,4]")), 8),
      "tensor 'e' data_offsets [4, 4] overlaps tensor 'a' data_offsets [0, 8]");
  add("HoleBetweenTensors",
      st_bytes(obj(entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[8,12]")), 12),
      "bytes [4, 8) of the data section belong to no tensor (a hole before tensor 'b')");
  add("HoleAtStart", one(t_f32("[1]", "[4,8]"), 8),
      "bytes [0, 4) of the data section belong to no tensor (a hole before tensor 't')");
  add("TrailingBytesAfterLastTensor", one(t_f32("[1]", "[0,4]"), 8),
      "the data section has 8 bytes but the tensors cover only 4 (trailing bytes after the last tensor)");
  add("NoTensorsButData", st_bytes("{}", 4),
      "the data section has 4 bytes but the tensors cover only 0");

  // --- __metadata__ --------------------------------------------------------------------
  add("MetadataIsString", st_bytes(R"({"__metadata__":"format=pt"})"),
      "__metadata__ is a string, not an object of strings");
  add("MetadataIsArray", st_bytes(R"({"__metadata__":[]})"),
      "__metadata__ is an array, not an object of strings");
  add("MetadataIsNull", st_bytes(R"({"__metadata__":null})"),
      "__metadata__ is null, not an object of strings");
  add("MetadataValueIsNumber", st_bytes(R"({"__metadata__":{"epoch":3}})"),
      "__metadata__ 'epoch': value is a number, not a string");
  add("MetadataValueIsObject", st_bytes(R"({"__metadata__":{"cfg":{"a":"b"}}})"),
      "__metadata__ 'cfg': value is an object, not a string");
  add("MetadataValueIsArray", st_bytes(R"({"__metadata__":{"tags":["a"]}})"),
      "__metadata__ 'tags': value is an array, not a string");
  add("MetadataValueIsBoolean", st_bytes(R"({"__metadata__":{"ok":true}})"),
      "__metadata__ 'ok': value is a boolean, not a string");

  // --- resource exhaustion -------------------------------------------------------------
  add("DeepArrayNestingInShape",
      st_bytes("{\"t\":{\"dtype\":\"F32\",\"shape\":" + std::string(100000, '[')),
      "tensor 't': shape holds an array, not only integers");
  add("DeepArrayNestingInDtype",
      st_bytes("{\"t\":{\"dtype\":" + std::string(100000, '[') + std::string(100000, ']') + "}}"),
      "tensor 't': dtype is an array, not a string");
  add("DeepArrayNestingAsEntry", st_bytes("{\"t\":" + std::string(100000, '[')),
      "tensor 't': entry is an array, not an object");
  {
    std::string deep = "{\"__metadata__\":";
    for (int i = 0; i < 100000; ++i) deep += "{\"k\":";
    add("DeepObjectNestingInMetadata", st_bytes(deep),
        "__metadata__ 'k': value is an object, not a string");
  }
  const std::string huge(1 << 20, 'n');  // a 1 MB name
  add("HugeTensorNameBadEntry", st_bytes(obj(raw_entry(huge, "5"))),
      "entry is a number, not an object");
  add("HugeTensorNameUnknownDtype", st_bytes(obj(entry(huge, "X", "[1]", "[0,4]")), 4),
      "unknown dtype 'X'");
  add("HugeTensorNameDuplicate",
      st_bytes(obj(entry(huge, "F32", "[1]", "[0,4]") + "," + entry(huge, "F32", "[1]", "[4,8]")), 8),
      "in the header");
  add("HugeTensorNameOverlap",
      st_bytes(obj(entry(huge + "a", "F32", "[1]", "[0,4]") + "," + entry(huge + "b", "F32", "[1]", "[0,4]")), 4),
      "overlaps tensor");
  add("HugeTensorNameInvalidUtf8", st_bytes("{\"" + huge + "\xff\":{}}"),
      "header is not valid JSON");
  add("HugeUnterminatedString", st_bytes("{\"" + huge), "header is not valid JSON");
  add("HugeDtypeString", one("{\"dtype\":\"" + huge + "\"}"), "tensor 't': unknown dtype 'nnn");
  add("HugeMetadataKeyWithNumber", st_bytes("{\"__metadata__\":{\"" + huge + "\":1}}"),
      "value is a number, not a string");
  // Too large for a double: nlohmann rejects it in the lexer; the message names the tensor
  // and the field, and stays short.
  add("HugeNumberInShape", one(t_f32("[" + std::string(1 << 20, '9') + "]", "[0,4]"), 4),
      "header is not valid JSON (at byte 1048605): number overflow parsing '999");
  return c;
}

// Inputs an earlier version of the reader mishandled (found by this corpus and the fuzzer).
std::vector<Case> regression_cases() {
  std::vector<Case> c;
  auto t_f32 = [](const std::string& shape, const std::string& offsets) {
    return obj(entry("t", "F32", shape, offsets));
  };
  // nlohmann's lexer treats a NUL byte as the end of input, so bytes after a NUL that follows
  // the root object went unchecked. The official reader rejects these ("trailing characters").
  c.push_back({"TrailingNulPadding", st_bytes(std::string("{}\0\0", 4)), "header holds a NUL byte at byte 2"});
  c.push_back({"GarbageAfterNul",
               st_bytes(t_f32("[1]", "[0,4]") + std::string("\0\xff\xfe{\"x\"", 6), 4),
               "header holds a NUL byte"});
  // Valid JSON numbers beyond a double's range: the message names the tensor and the field.
  c.push_back({"ExponentOverflowDimension", st_bytes(t_f32("[1e400]", "[0,4]"), 4),
               "tensor 't': shape dimension"});
  c.push_back({"HugeNumberInShape",
               st_bytes(t_f32("[" + std::string(1 << 20, '9') + "]", "[0,4]"), 4),
               "tensor 't': shape dimension"});
  // A million-dimension shape: the message prints 16 dimensions and the count.
  std::string shape = "[";
  for (int i = 0; i < 1000000; ++i) shape += i ? ",1" : "1";
  shape += "]";
  c.push_back({"MillionDimensionShapeMessage", st_bytes(t_f32(shape, "[0,8]"), 8),
               "tensor 't': data_offsets [0, 8] hold 8 bytes"});
  return c;
}

// Valid files run through the same harness: it must accept them, so that the hostile cases
// cannot pass because the harness rejects everything.
std::vector<Case> valid_cases() {
  std::vector<Case> c;
  c.push_back({"EmptyHeader", st_bytes("{}"), ""});
  c.push_back({"EmptyHeaderPaddedWithSpaces", st_bytes("{}      "), ""});
  c.push_back({"EmptyMetadata", st_bytes(R"({"__metadata__":{}})"), ""});
  c.push_back({"TwoTensorsAndMetadata",
               st_bytes(obj(R"("__metadata__":{"format":"pt"},)" + entry("b", "F32", "[2]", "[8,16]") +
                            "," + entry("a", "BF16", "[2,2]", "[0,8]")),
                        16),
               ""});
  c.push_back({"ScalarAndEmptyTensor",
               st_bytes(obj(entry("s", "F64", "[]", "[0,8]") + "," + entry("e", "I32", "[0,3]", "[8,8]")), 8),
               ""});
  c.push_back({"SubByteTypes",
               st_bytes(obj(entry("f4", "F4", "[2,3]", "[0,3]") + "," +
                            entry("f6", "F6_E3M2", "[4]", "[3,6]")),
                        6),
               ""});
  c.push_back({"UnicodeName", st_bytes(obj(entry("w\xc3\xa9ight\\u00e9", "U8", "[3]", "[0,3]")), 3), ""});
  return c;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

class HostileSafetensors : public ::testing::TestWithParam<Case> {};

TEST_P(HostileSafetensors, RejectedWithPreciseShortMessage) {
  const Case& c = GetParam();
  try {
    st::File::parse(c.bytes, kName);
    FAIL() << c.name << ": accepted";
  } catch (const FormatError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(kPrefix, 0), 0u) << msg.substr(0, kMaxMessage);
    EXPECT_NE(msg.find(c.expect), std::string::npos)
        << "message: " << msg.substr(0, kMaxMessage) << "\nexpected to contain: " << c.expect;
    EXPECT_LT(msg.size(), kMaxMessage) << msg.substr(0, kMaxMessage);
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, HostileSafetensors, ::testing::ValuesIn(hostile_cases()),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Regressions, HostileSafetensors, ::testing::ValuesIn(regression_cases()),
                         case_name);

TEST(HostileSafetensorsCorpus, HasAtLeast30CasesWithUniqueNames) {
  auto cases = hostile_cases();
  EXPECT_GE(cases.size(), 30u);
  std::vector<std::string> names;
  for (const auto& c : cases) names.push_back(c.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
}

class ValidSafetensors : public ::testing::TestWithParam<Case> {};

TEST_P(ValidSafetensors, AcceptedBySameHarness) {
  const Case& c = GetParam();
  try {
    st::File f = st::File::parse(c.bytes, kName);
    std::uint64_t covered = 0;
    for (const auto& t : f.tensors()) {
      EXPECT_EQ(t.begin, covered) << t.name;
      covered = t.end;
      EXPECT_EQ(f.view(t).bytes().size(), t.nbytes());
    }
    EXPECT_EQ(covered, f.file_size() - f.data_offset());
  } catch (const FormatError& e) {
    FAIL() << c.name << " rejected: " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, ValidSafetensors, ::testing::ValuesIn(valid_cases()), case_name);

TEST(ValidSafetensors, ParsedContents) {
  auto bytes = valid_cases()[3].bytes;  // TwoTensorsAndMetadata
  st::File f = st::File::parse(bytes, kName);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "a");
  EXPECT_EQ(f.tensors()[0].dtype, st::Dtype::BF16);
  EXPECT_EQ(f.tensors()[1].name, "b");
  EXPECT_EQ(f.tensors()[1].shape, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_TRUE(f.has_metadata());
}

TEST(SafetensorsOpen, DirectoryFifoAndMissingPath) {
  TempDir dir;
  // A directory: not a regular file.
  EXPECT_THROW(st::File::open(dir.path), FormatError);
  // A FIFO without a writer: opening must neither block nor read; it is not a regular file.
  auto fifo = dir.path / "pipe.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_THROW(st::File::open(fifo), FormatError);
  // A missing path: the system call fails.
  auto missing = dir.path / "missing.safetensors";
  try {
    st::File::open(missing);
    FAIL() << "opened a missing file";
  } catch (const IoError& e) {
    EXPECT_EQ(e.errno_value(), ENOENT);
    EXPECT_NE(std::string(e.what()).find("missing.safetensors"), std::string::npos) << e.what();
  }
  // And a hostile file on disk is rejected the same way as in memory.
  auto bad = dir.path / "bad.safetensors";
  write_bytes(bad, st_bytes("{}", 0, 100000001));
  try {
    st::File::open(bad);
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.safetensors: header length 100000001 exceeds"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
