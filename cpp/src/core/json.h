// Internal: reading JSON from untrusted text (engine plans and targets, cache records, digest
// memos, cubin manifests, CLI inputs).
//
// nlohmann::json parses without recursion, but copying, comparing, dumping and walking a value
// recurse once per level: a document nested a million levels deep parses and then overflows
// the stack on first use. Every reader of untrusted JSON therefore parses through
// parse_untrusted, which refuses nesting deeper than `max_depth` before building anything.
//
//   auto j = core::parse_untrusted(text);        // throws core::JsonError
//   if (!j.is_object()) throw ...;                // the caller checks the shape it needs
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tensoracle::core {

// Nesting allowed in untrusted JSON: our own documents use fewer than 12 levels.
inline constexpr int kMaxJsonDepth = 64;

// Malformed JSON, or JSON nested deeper than allowed. what() says which and where (byte offset);
// callers wrap it in their own error class (CorruptEngineError, FormatError, ...).
class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The deepest nesting of arrays and objects in `text` (strings skipped), or -1 once it passes
// `limit` (the scan stops there). Does not check that the text is otherwise valid JSON.
int json_nesting_depth(std::string_view text, int limit) noexcept;

// Parses `text`; throws JsonError when it is not valid JSON or nests deeper than `max_depth`.
nlohmann::json parse_untrusted(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace tensoracle::core
