// Internal: text helpers for messages and JSON.
#pragma once

#include <string>
#include <string_view>

namespace tensoracle::core {

// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
bool valid_utf8(std::string_view s) noexcept;

// `s` in single quotes for an error message: control bytes, and bytes that are not part of
// valid UTF-8, as \xNN; longer than `limit` bytes → cut at a character boundary, with "...".
std::string quote_name(std::string_view s, std::size_t limit = 120);

// Appends `s` as a JSON string literal (with quotes) the way serde_json writes it: \" \\ \b
// \f \n \r \t, other control characters as \u00xx, everything else as is. `s` must be valid UTF-8.
void append_json_string(std::string& out, std::string_view s);

}  // namespace tensoracle::core
