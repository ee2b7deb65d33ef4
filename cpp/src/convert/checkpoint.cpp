// Reading a torch.save checkpoint (see checkpoint.h).
#include "convert/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <set>
#include <unordered_map>

#include "core/text.h"
#include "io/zip_reader.h"

namespace tensoracle::pth {

namespace st = tensoracle::safetensors;
using core::quote_name;
using io::ZipArchive;
using io::ZipEntry;

namespace {

constexpr std::uint64_t kMaxVisits = 20'000'000;           // flattening and JSON, in nodes
constexpr std::uint64_t kMaxMetadataBytes = 32ull << 20;    // all JSON values together (escaped
                                                            // again in the header: < 100 MB)
constexpr std::size_t kMaxDims = 64;

[[noreturn]] void format_error(const std::string& file, const std::string& message) {
  throw FormatError("[pth] " + file + ": " + message);
}
[[noreturn]] void unsupported(const std::string& file, const std::string& message) {
  throw UnsupportedError("[pth] " + file + ": " + message);
}

// ---------------------------------------------------------------------------------------
// recognising the file

void sniff(std::span<const std::byte> b, const std::string& file) {
  auto at = [&](std::size_t i) { return static_cast<std::uint8_t>(b[i]); };
  auto starts = [&](std::string_view s, std::size_t off = 0) {
    return b.size() >= off + s.size() && std::memcmp(b.data() + off, s.data(), s.size()) == 0;
  };
  if (b.empty()) format_error(file, "the file is empty");
  if (at(0) == 0x80) {
    // torch's legacy format begins with a pickled magic number, 0x1950a86a20f9469cfc6c.
    static constexpr std::uint8_t kMagic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9,
                                              0x20, 0x6a, 0xa8, 0x50, 0x19};
    std::string_view head(reinterpret_cast<const char*>(b.data()), std::min<std::size_t>(b.size(), 32));
    if (head.find(std::string_view(reinterpret_cast<const char*>(kMagic), sizeof kMagic)) != std::string_view::npos)
      unsupported(file, "this is torch's legacy checkpoint format (torch.save before 1.6, or "
                        "_use_new_zipfile_serialization=False: a magic number and stacked pickles), "
                        "which tensoracle does not read. Load it once with torch.load(path, "
                        "weights_only=True) and save it again with torch.save (the zip format, the "
                        "default since torch 1.6)");
    unsupported(file, "this is a bare pickle stream, not the zip archive torch.save writes. If "
                      "torch.load reads it, load it once with torch.load(path, weights_only=True) "
                      "and save it again with torch.save");
  }
  if (starts("ustar", 257))
    unsupported(file, "this is a tar archive: torch's oldest checkpoint format (before 0.4), which "
                      "tensoracle does not read. Load it with an old torch and save it again with "
                      "torch.save");
  if (!starts("PK\x03\x04"))
    format_error(file, "not a torch checkpoint: torch.save (1.6 and later) writes a zip archive, "
                       "which starts with 'PK\\x03\\x04'");
}

// The content of an entry the conversion reads: stored entries only.
std::span<const std::byte> content(const ZipArchive& zip, const ZipEntry& e, const std::string& file) {
  if (e.method != 0)
    unsupported(file, "record " + quote_name(e.name) + " is compressed (zip method " + std::to_string(e.method) +
                          "); torch.save stores every record uncompressed. Load the checkpoint with "
                          "torch.load and save it again with torch.save, or re-zip it without "
                          "compression (zip -0)");
  return zip.data(e);
}

std::string record_text(const ZipArchive& zip, const ZipEntry& e, const std::string& file) {
  auto b = content(zip, e, file);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

bool parse_uint(const std::string& s, std::uint64_t& v) {
  if (s.empty() || s.size() > 18) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// ---------------------------------------------------------------------------------------
// rendering values: Python's str() for names, Python's json.dumps for metadata

std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string s(buf, r.ptr);  // shortest round trip: "-1.25e+02", "5e-324"
  std::string out;
  if (s[0] == '-') {
    out = "-";
    s.erase(0, 1);
  }
  auto e = s.find('e');
  int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (std::size_t i = 0; i < e; ++i)
    if (s[i] != '.') digits += s[i];
  int decpt = exp + 1;  // value = 0.digits x 10^decpt
  auto n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {  // Python's repr: fixed notation in this range
    if (decpt <= 0) out += "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
    else if (decpt >= n) out += digits + std::string(static_cast<std::size_t>(decpt - n), '0') + ".0";
    else out += digits.substr(0, static_cast<std::size_t>(decpt)) + "." + digits.substr(static_cast<std::size_t>(decpt));
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + eb;
}


// Python's repr(complex): "(1+2j)", "(1.5-0j)", "2j" (parts without a trailing ".0").
std::string py_complex(double re, double im) {
  auto part = [](double x) {
    std::string s = py_float(x);
    if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
    return s;
  };
  std::string i = part(std::fabs(im)) + "j";
  if (std::isnan(im)) i = "nanj";
  if (re == 0 && !std::signbit(re)) return (std::signbit(im) && !std::isnan(im) ? "-" : "") + i;
  return "(" + part(re) + (std::signbit(im) && !std::isnan(im) ? "-" : "+") + i + ")";
}

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

class Walker {
 public:
  Walker(const std::string& file, int max_depth) : file_(file), max_depth_(max_depth) {}

  void visit(int depth) {
    if (++visits_ > kMaxVisits)
      unsupported(file_, "the checkpoint's structure expands to more than " + std::to_string(kMaxVisits) +
                             " entries (containers shared many times over?)");
    if (depth > max_depth_)
      format_error(file_, "the checkpoint nests deeper than " + std::to_string(max_depth_) +
                              " levels (or a container holds itself)");
  }

  bool contains_tensor(Value v, int depth) {
    switch (v.kind) {
      case Kind::kTensor:
      case Kind::kStorage: return true;
      case Kind::kDict:
      case Kind::kTuple:
      case Kind::kList: break;
      default: return false;
    }
    auto it = memo_.find(v.u.p);
    if (it != memo_.end()) return it->second;
    visit(depth);
    bool found = false;
    if (v.kind == Kind::kDict) {
      for (auto& [k, x] : v.dict().items)
        if ((found = contains_tensor(x, depth + 1))) break;
    } else {
      for (Value x : v.seq().items)
        if ((found = contains_tensor(x, depth + 1))) break;
    }
    memo_.emplace(v.u.p, found);
    return found;
  }

  // Python's repr(), for keys that are not strings.
  std::string repr(Value v, int depth) {
    visit(depth);
    switch (v.kind) {
      case Kind::kNone: return "None";
      case Kind::kBool: return v.u.b ? "True" : "False";
      case Kind::kInt: return std::to_string(v.u.i);
      case Kind::kBigInt: return int128_text(v.big().v);
      case Kind::kFloat: return py_float(v.u.f);
      case Kind::kStr: {
        std::string out = "'";
        for (char c : v.str().s) {
          if (c == '\'' || c == '\\') out += '\\';
          out += c;
        }
        return out + "'";
      }
      case Kind::kBytes: return "b'" + hex(v.str().s) + "'";
      case Kind::kTuple: {
        std::string out = "(";
        auto& items = v.seq().items;
        for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + repr(items[i], depth + 1);
        return out + (items.size() == 1 ? ",)" : ")");
      }
      case Kind::kFrozenSet: {
        std::string out = "frozenset({";
        auto& items = v.seq().items;
        for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + repr(items[i], depth + 1);
        return out + "})";
      }
      case Kind::kGlobal: return global_name(v);
      case Kind::kDevice: return "device(type='" + v.device().text + "')";
      case Kind::kComplex: return py_complex(v.complex().re, v.complex().im);
      case Kind::kSlice: {
        Slice& s = v.slice();
        return "slice(" + repr(s.start, depth + 1) + ", " + repr(s.stop, depth + 1) + ", " + repr(s.step, depth + 1) + ")";
      }
      default: return "<" + std::string(kind_name(v.kind)) + ">";
    }
  }

  // str(key): the name of a dict entry in a dotted path.
  std::string name_of(Value key) { return key.kind == Kind::kStr ? key.str().s : repr(key, 0); }

  // json.dumps' text for a dict key.
  std::string json_key(Value key) {
    switch (key.kind) {
      case Kind::kStr: return key.str().s;
      case Kind::kBool: return key.u.b ? "true" : "false";
      case Kind::kNone: return "null";
      case Kind::kFloat:
        if (std::isnan(key.u.f)) return "NaN";
        if (std::isinf(key.u.f)) return key.u.f < 0 ? "-Infinity" : "Infinity";
        return py_float(key.u.f);
      default: return repr(key, 0);
    }
  }

  void json(Value v, std::string& out, int depth, const std::string& path) {
    visit(depth);
    switch (v.kind) {
      case Kind::kNone: out += "null"; break;
      case Kind::kBool: out += v.u.b ? "true" : "false"; break;
      case Kind::kInt: out += std::to_string(v.u.i); break;
      case Kind::kBigInt: out += int128_text(v.big().v); break;
      case Kind::kFloat:
        if (std::isnan(v.u.f)) out += "NaN";
        else if (std::isinf(v.u.f)) out += v.u.f < 0 ? "-Infinity" : "Infinity";
        else out += py_float(v.u.f);
        break;
      case Kind::kStr: core::append_json_string(out, v.str().s); break;
      case Kind::kBytes: out += "{\"__bytes__\":\"" + hex(v.str().s) + "\"}"; break;
      case Kind::kTuple:
      case Kind::kList:
      case Kind::kSet:
      case Kind::kFrozenSet: {
        out += '[';
        bool first = true;
        for (Value x : v.seq().items) {
          if (!first) out += ',';
          first = false;
          json(x, out, depth + 1, path);
        }
        out += ']';
        break;
      }
      case Kind::kDict: {
        out += '{';
        bool first = true;
        for (auto& [k, x] : v.dict().items) {
          if (!first) out += ',';
          first = false;
          core::append_json_string(out, json_key(k));
          out += ':';
          json(x, out, depth + 1, path);
        }
        out += '}';
        break;
      }
      case Kind::kGlobal: core::append_json_string(out, global_name(v)); break;
      case Kind::kDevice: core::append_json_string(out, v.device().text); break;
      case Kind::kSlice:
      case Kind::kComplex: core::append_json_string(out, repr(v, depth)); break;
      case Kind::kTensor:
      case Kind::kStorage:
        unsupported(file_, "key " + quote_name(path) + ": a " + std::string(kind_name(v.kind)) +
                               " inside a value that cannot hold one (a slice?)");
    }
    if (out.size() > kMaxMetadataBytes)
      unsupported(file_, "key " + quote_name(path) + ": its value is more than " +
                             std::to_string(kMaxMetadataBytes >> 20) + " MiB of JSON");
  }

  // Tensors -> out_tensors; other values -> out_values (JSON). The root's children are
  // always visited, so a dict without tensors still gives its values one by one.
  void flatten(Value v, const std::string& path, int depth, bool root) {
    visit(depth);
    if (v.kind == Kind::kTensor) {
      tensors.push_back({path, &v.tensor()});
      return;
    }
    if (v.kind == Kind::kStorage)
      unsupported(file_, "key " + quote_name(path) + " holds a bare storage, not a tensor; "
                             "tensoracle converts tensors only");
    bool container = v.kind == Kind::kDict || v.kind == Kind::kTuple || v.kind == Kind::kList;
    if (container && (root || contains_tensor(v, depth))) {
      auto join = [&](const std::string& k) { return path.empty() ? k : path + "." + k; };
      if (v.kind == Kind::kDict) {
        for (auto& [k, x] : v.dict().items) flatten(x, join(name_of(k)), depth + 1, false);
      } else {
        auto& items = v.seq().items;
        for (std::size_t i = 0; i < items.size(); ++i) flatten(items[i], join(std::to_string(i)), depth + 1, false);
      }
      return;
    }
    std::string text;
    json(v, text, depth, path);
    metadata_bytes_ += text.size() + path.size();
    if (metadata_bytes_ > kMaxMetadataBytes)
      unsupported(file_, "the checkpoint's non-tensor values make more than " +
                             std::to_string(kMaxMetadataBytes >> 20) + " MiB of JSON metadata");
    values.emplace_back(path, std::move(text));
  }

  std::vector<std::pair<std::string, const Tensor*>> tensors;
  std::vector<std::pair<std::string, std::string>> values;

 private:
  const std::string& file_;
  int max_depth_;
  std::uint64_t visits_ = 0;
  std::uint64_t metadata_bytes_ = 0;
  std::unordered_map<const void*, bool> memo_;
};

// options.key: a dotted path; at each level the longest run of components naming an entry.
Value select(Value root, const std::string& key, Walker& w, const std::string& file) {
  if (key.empty()) return root;
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    auto dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  Value cur = root;
  std::string walked;
  for (std::size_t i = 0; i < parts.size();) {
    std::vector<std::pair<std::string, Value>> children;
    if (cur.kind == Kind::kDict) {
      for (auto& [k, x] : cur.dict().items) children.emplace_back(w.name_of(k), x);
    } else if (cur.kind == Kind::kList || cur.kind == Kind::kTuple) {
      auto& items = cur.seq().items;
      for (std::size_t j = 0; j < items.size(); ++j) children.emplace_back(std::to_string(j), items[j]);
    } else {
      throw InvalidArgument("[pth] " + file + ": key " + quote_name(key) + ": " +
                            (walked.empty() ? std::string("the checkpoint") : quote_name(walked)) + " is a " +
                            std::string(kind_name(cur.kind)) + ", not a dict");
    }
    bool found = false;
    for (std::size_t j = parts.size(); j > i && !found; --j) {
      std::string cand = parts[i];
      for (std::size_t m = i + 1; m < j; ++m) cand += "." + parts[m];
      for (auto& [name, x] : children) {
        if (name == cand) {
          cur = x;
          walked += (walked.empty() ? "" : ".") + cand;
          i = j;
          found = true;
          break;
        }
      }
    }
    if (!found) {
      std::string list;
      for (std::size_t j = 0; j < children.size() && j < 20; ++j) list += (j ? ", " : "") + quote_name(children[j].first, 60);
      if (children.size() > 20) list += ", ... (" + std::to_string(children.size()) + " in all)";
      throw InvalidArgument("[pth] " + file + ": no key " + quote_name(key) + " in " +
                            (walked.empty() ? std::string("the checkpoint") : quote_name(walked)) +
                            " (its keys: " + (list.empty() ? std::string("none") : list) + ")");
    }
  }
  if (cur.kind == Kind::kTensor)
    throw InvalidArgument("[pth] " + file + ": key " + quote_name(key) +
                          " is a single tensor; select the dict that holds it (or omit the key)");
  if (cur.kind != Kind::kDict && cur.kind != Kind::kList && cur.kind != Kind::kTuple)
    throw InvalidArgument("[pth] " + file + ": key " + quote_name(key) + " is a " +
                          std::string(kind_name(cur.kind)) + ", not a dict of tensors");
  return cur;
}

// ---------------------------------------------------------------------------------------
// tensors against their storages

// Fills e.numel/nbytes/contiguous; throws FormatError naming `what` when out of bounds.
void validate_tensor(const Tensor& t, const std::string& file, const std::string& what, Entry& e) {
  auto fail = [&](const std::string& m) { format_error(file, what + ": " + m); };
  const Storage& s = *t.storage;
  auto is = static_cast<std::uint64_t>(dtype_info(t.dtype).itemsize);
  if (t.size.size() != t.stride.size())
    fail("size has " + std::to_string(t.size.size()) + " dimensions but stride has " + std::to_string(t.stride.size()));
  if (t.size.size() > kMaxDims) unsupported(file, what + ": more than " + std::to_string(kMaxDims) + " dimensions");
  if (t.offset < 0) fail("negative storage offset " + std::to_string(t.offset));
  std::uint64_t numel = 1;
  for (std::size_t i = 0; i < t.size.size(); ++i) {
    if (t.size[i] < 0) fail("negative size " + std::to_string(t.size[i]) + " in dimension " + std::to_string(i));
    if (t.stride[i] < 0) fail("negative stride " + std::to_string(t.stride[i]) + " in dimension " + std::to_string(i));
    if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(t.size[i]), &numel) || numel > (1ull << 62))
      fail("its size overflows 64-bit element counts");
  }
  std::uint64_t nbytes;
  if (__builtin_mul_overflow(numel, is, &nbytes) || nbytes > (1ull << 62)) fail("its byte size overflows");
  e.numel = numel;
  e.nbytes = nbytes;
  e.contiguous = true;
  if (numel == 0) return;  // reads nothing: any offset will do, as in torch
  std::uint64_t last = static_cast<std::uint64_t>(t.offset), step;
  for (std::size_t i = 0; i < t.size.size(); ++i) {
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(t.size[i] - 1), static_cast<std::uint64_t>(t.stride[i]), &step) ||
        __builtin_add_overflow(last, step, &last))
      fail("its last element's position overflows 64 bits");
  }
  std::uint64_t end;  // one past the last byte read
  if (__builtin_add_overflow(last, 1, &end) || __builtin_mul_overflow(end, is, &end) || end > s.data.size())
    fail("reads up to element " + std::to_string(last) + " (" + std::string(dtype_info(t.dtype).name) +
         ") of storage " + quote_name(s.record) + ", which holds " + std::to_string(s.data.size()) + " bytes");
  // Row-major contiguity; dimensions of size 1 may have any stride (as in torch).
  std::int64_t expect = 1;
  for (std::size_t i = t.size.size(); i-- > 0;) {
    if (t.size[i] == 1) continue;
    if (t.stride[i] != expect) e.contiguous = false;
    expect *= t.size[i];
  }
}

void layout_records(const ZipArchive& zip, Checkpoint& c, std::span<const std::byte>& pickle) {
  const std::string& file = c.file;
  const auto& entries = zip.entries();
  auto slash = entries.front().name.find('/');
  if (slash == std::string::npos || slash == 0)
    format_error(file, "entry " + quote_name(entries.front().name) +
                           " is not inside a folder (torch.save puts every record in one)");
  c.archive = entries.front().name.substr(0, slash);
  std::string prefix = c.archive + "/";
  for (const auto& e : entries)
    if (e.name.compare(0, prefix.size(), prefix) != 0)
      format_error(file, "entry " + quote_name(e.name) + " is outside the archive's folder " + quote_name(prefix));
  if (zip.find(prefix + "constants.pkl")) {
    unsupported(file, "this is a TorchScript archive (torch.jit.save), not a torch.save checkpoint. "
                      "Load it with torch.jit.load and save its state_dict() with torch.save, then "
                      "convert that");
  }
  for (const auto& e : entries)
    if (e.name.compare(0, prefix.size() + 5, prefix + "code/") == 0)
      unsupported(file, "this archive holds TorchScript code (" + quote_name(e.name) +
                            "), not a torch.save checkpoint. Load it with torch.jit.load and save its "
                            "state_dict() with torch.save, then convert that");
  const ZipEntry* pkl = zip.find(prefix + "data.pkl");
  if (!pkl) format_error(file, "the archive has no " + quote_name(prefix + "data.pkl") + " (not a torch.save checkpoint)");
  pickle = content(zip, *pkl, file);

  if (const ZipEntry* bo = zip.find(prefix + "byteorder")) {
    std::string v = record_text(zip, *bo, file);
    if (v != "little" && v != "big")
      format_error(file, "record " + quote_name(bo->name) + " is " + quote_name(v, 40) + ", not 'little' or 'big'");
    c.byteorder = v;
  }
  if (const ZipEntry* ver = zip.find(prefix + "version")) {
    std::uint64_t v;
    std::string text = trim(record_text(zip, *ver, file));
    if (!parse_uint(text, v)) format_error(file, "record " + quote_name(ver->name) + " is " + quote_name(text, 40) + ", not a number");
    if (v < 1 || v > 3)
      unsupported(file, "record " + quote_name(ver->name) + " says format version " + std::to_string(v) +
                            "; this tensoracle reads versions 1 to 3 (torch.save writes 3)");
    c.version = static_cast<int>(v);
  }
  if (const ZipEntry* fv = zip.find(prefix + ".format_version")) {
    std::string text = trim(record_text(zip, *fv, file));
    if (text != "1")
      unsupported(file, "record " + quote_name(fv->name) + " says " + quote_name(text, 40) +
                            "; this tensoracle reads .format_version 1");
  }
  if (const ZipEntry* al = zip.find(prefix + ".storage_alignment")) {
    std::uint64_t v;
    std::string text = trim(record_text(zip, *al, file));
    if (!parse_uint(text, v) || v == 0)
      format_error(file, "record " + quote_name(al->name) + " is " + quote_name(text, 40) + ", not a positive number");
  }
}

}  // namespace

Checkpoint read_checkpoint(std::span<const std::byte> file_bytes, const std::string& display_name,
                           const ConvertOptions& options) {
  Checkpoint c;
  c.file = display_name;
  const std::string& file = c.file;
  sniff(file_bytes, file);
  ZipArchive zip = ZipArchive::parse(file_bytes, file);
  std::span<const std::byte> pickle;
  layout_records(zip, c, pickle);

  std::string data_prefix = c.archive + "/data/";
  RecordLookup lookup = [&](std::string_view key) -> std::optional<Record> {
    std::string name = data_prefix + std::string(key);
    const ZipEntry* e = zip.find(name);
    if (!e) return std::nullopt;
    return Record{name, content(zip, *e, file)};
  };
  Limits limits;
  limits.max_memory = options.max_pickle_memory;
  std::string pkl_name = quote_name(c.archive + "/data.pkl");  // control bytes escaped, long names cut
  c.pickle = unpickle(pickle, "[pth] " + file + ": " + pkl_name.substr(1, pkl_name.size() - 2), lookup, limits);

  Value root = c.pickle.root;
  if (root.kind == Kind::kTensor)
    unsupported(file, "the checkpoint is a single tensor, not a dict of tensors; save it as "
                      "torch.save({'name': tensor}, path) to give it a name");
  if (root.kind != Kind::kDict && root.kind != Kind::kList && root.kind != Kind::kTuple)
    unsupported(file, "the checkpoint is a " + std::string(kind_name(root.kind)) +
                          ", not a dict of tensors: nothing to convert");

  Walker w(file, limits.max_depth);
  Value selected = select(root, options.key, w, file);
  w.flatten(selected, "", 0, true);

  // Every tensor the pickle built is checked, selected or not; selected ones by name.
  std::unordered_map<const Tensor*, std::size_t> first_entry;
  for (auto& [path, t] : w.tensors) {
    Entry e;
    e.path = path;
    e.name = path;
    e.tensor = t;
    validate_tensor(*t, file, "tensor " + quote_name(path), e);
    c.tensors.push_back(std::move(e));
  }
  for (const Tensor* t : c.pickle.tensors) {
    Entry scratch;
    validate_tensor(*t, file, "the tensor built at byte " + std::to_string(t->byte_pos) + " of data.pkl", scratch);
  }

  // strip_prefix, then unique names (tensors and metadata keys are separate namespaces).
  std::size_t stripped = 0;
  auto strip = [&](std::string& name) {
    const std::string& p = options.strip_prefix;
    if (!p.empty() && name.size() > p.size() && name.compare(0, p.size(), p) == 0) {
      name.erase(0, p.size());
      return true;
    }
    return false;
  };
  // A prefix that no tensor name starts with is a typo (a silent no-op would keep the names
  // the user meant to change).
  if (!options.strip_prefix.empty() && !c.tensors.empty()) {
    for (const auto& e : c.tensors) {
      std::string n = e.name;
      stripped += strip(n);
    }
    if (stripped == 0) {
      std::string some;
      for (std::size_t i = 0; i < c.tensors.size() && i < 3; ++i) some += (i ? ", " : "") + quote_name(c.tensors[i].name);
      throw InvalidArgument("[pth] " + file + ": no tensor name starts with the prefix " + quote_name(options.strip_prefix) +
                            " (names such as " + some + (c.tensors.size() > 3 ? ", ..." : "") + ")");
    }
  }
  std::unordered_map<std::string, std::string> tensor_names;  // name -> path
  for (auto& e : c.tensors) {
    strip(e.name);
    if (e.name == "__metadata__")
      unsupported(file, "tensor " + quote_name(e.path) +
                            ": safetensors reserves the name '__metadata__' for its metadata entry; "
                            "select a sub-dict with the key option or rename the tensor in torch");
    auto [it, fresh] = tensor_names.emplace(e.name, e.path);
    if (!fresh) {
      if (it->second != e.path && !options.strip_prefix.empty())
        throw InvalidArgument("[pth] " + file + ": tensors " + quote_name(it->second) + " and " + quote_name(e.path) +
                              " would both be named " + quote_name(e.name) + " after removing the prefix " +
                              quote_name(options.strip_prefix));
      unsupported(file, "two tensors flatten to the same name " + quote_name(e.name) +
                            " (a key with a dot in it?); select a sub-dict with the key option");
    }
  }
  std::unordered_map<std::string, std::string> value_names;
  for (auto& [path, json] : w.values) {
    std::string name = path;
    strip(name);
    if (name == "format" || name.compare(0, 11, "tensoracle.") == 0 || name.compare(0, 4, "pth.") == 0)
      name = "pth." + name;
    if (!value_names.emplace(name, path).second)
      unsupported(file, "two values flatten to the same metadata key " + quote_name(name));
    c.values.emplace_back(std::move(name), std::move(json));
  }

  std::map<const Storage*, std::vector<std::string>> by_storage;
  for (const auto& e : c.tensors)
    if (e.numel > 0) by_storage[e.tensor->storage].push_back(e.name);
  for (auto& [s, names] : by_storage)
    if (names.size() > 1) c.shared[s->record] = names;
  return c;
}

std::optional<st::Dtype> output_dtype(const Tensor& t, ConvertDtype cast) noexcept {
  const TorchDtypeInfo& info = dtype_info(t.dtype);
  if (info.castable) {
    switch (cast) {
      case ConvertDtype::kKeep: break;
      case ConvertDtype::kFloat32: return st::Dtype::F32;
      case ConvertDtype::kFloat16: return st::Dtype::F16;
      case ConvertDtype::kBFloat16: return st::Dtype::BF16;
    }
  }
  return info.st;
}

std::vector<std::int64_t> output_shape(const Tensor& t) {
  std::vector<std::int64_t> shape = t.size;
  if (t.dtype == TorchDtype::kFloat4E2M1FNx2 && !shape.empty()) shape.back() *= 2;  // checked by check_writable
  return shape;
}

void check_writable(const Checkpoint& c, const Entry& e, ConvertDtype cast) {
  const Tensor& t = *e.tensor;
  const TorchDtypeInfo& info = dtype_info(t.dtype);
  std::string what = "tensor " + quote_name(e.path) + ": ";
  if (!output_dtype(t, cast))
    unsupported(c.file, what + "dtype " + std::string(info.name) +
                            " has no safetensors equivalent (safetensors holds bool, integers, float64 "
                            "to float4, complex64); convert the tensor in torch first");
  if (t.dtype == TorchDtype::kFloat4E2M1FNx2) {
    if (t.size.empty())
      unsupported(c.file, what + "a 0-d float4_e2m1fn_x2 tensor has no last dimension to hold its two values");
    if (t.size.back() > (INT64_MAX / 2)) format_error(c.file, what + "its last dimension overflows when doubled");
  }
  if (t.conj && t.dtype != TorchDtype::kComplex64)
    format_error(c.file, what + "the conjugate bit is set on a " + std::string(info.name) + " tensor");
  if (t.neg && !info.castable && t.dtype != TorchDtype::kComplex64)
    unsupported(c.file, what + "the negative bit is supported on floating and complex64 tensors only, not " +
                            std::string(info.name));
}

st::Metadata output_metadata(const Checkpoint& c) {
  st::Metadata m;
  m["format"] = "pt";
  for (const auto& [k, v] : c.values) m[k] = v;
  if (!c.shared.empty()) {
    std::string j = "{";
    bool first = true;
    for (const auto& [record, names] : c.shared) {
      if (!first) j += ',';
      first = false;
      core::append_json_string(j, record);
      j += ":[";
      for (std::size_t i = 0; i < names.size(); ++i) {
        if (i) j += ',';
        core::append_json_string(j, names[i]);
      }
      j += ']';
    }
    m["tensoracle.shared_storage"] = j + "}";
  }
  return m;
}

}  // namespace tensoracle::pth
