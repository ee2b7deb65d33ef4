#include "core/json.h"

namespace tensoracle::core {

int json_nesting_depth(std::string_view text, int limit) noexcept {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[': case '{':
        if (++depth > limit) return -1;
        if (depth > deepest) deepest = depth;
        break;
      case ']': case '}':
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return deepest;
}

nlohmann::json parse_untrusted(std::string_view text, int max_depth) {
  if (json_nesting_depth(text, max_depth) < 0)
    throw JsonError("JSON nested deeper than " + std::to_string(max_depth) + " levels");
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw JsonError(std::string("malformed JSON (") + e.what() + ")");
  }
}

}  // namespace tensoracle::core
