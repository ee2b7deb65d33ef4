// Cubin production (NVRTC, loaded at run time), cubin reading (CUDA ELF) and manifests.
#include "tensoracle/cubin.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "core/module_folder.h"
#include "core/sha256.h"
#include "tensoracle/errors.h"

namespace tensoracle::cubin {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad_cubin(const std::string& m) { throw FormatError("[cubin] not a valid cubin: " + m); }

// ---- NVRTC, declared here and loaded with dlopen (its C API: nvrtc.h) ----------------------

using nvrtcProgram = void*;
struct Nvrtc {
  int (*version)(int*, int*) = nullptr;
  int (*create)(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(nvrtcProgram, int, const char* const*) = nullptr;
  int (*log_size)(nvrtcProgram, std::size_t*) = nullptr;
  int (*log)(nvrtcProgram, char*) = nullptr;
  int (*cubin_size)(nvrtcProgram, std::size_t*) = nullptr;
  int (*cubin)(nvrtcProgram, char*) = nullptr;
  int (*destroy)(nvrtcProgram*) = nullptr;
  const char* (*error)(int) = nullptr;
  std::string why;  // set when unavailable
};

const Nvrtc& nvrtc() {
  static const Nvrtc lib = [] {
    Nvrtc n;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("TENSORACLE_NVRTC"); env && *env) {
      candidates.emplace_back(env);
    } else {
      const auto here = core::module_folder(reinterpret_cast<const void*>(&nvrtc_version));
      if (!here.empty()) {
        // The Python package (site-packages/tensoracle) or the environment's bin/ and lib/.
        candidates.push_back((here.parent_path() / "nvidia/cu13/lib/libnvrtc.so.13").string());
        std::error_code ec;
        for (const auto& base : {here.parent_path() / "lib", here.parent_path().parent_path() / "lib"})
          for (auto it = std::filesystem::directory_iterator(base, ec); !ec && it != std::filesystem::directory_iterator();
               it.increment(ec))
            if (it->path().filename().string().rfind("python3", 0) == 0)
              candidates.push_back((it->path() / "site-packages/nvidia/cu13/lib/libnvrtc.so.13").string());
      }
      if (const char* cuda = std::getenv("CUDA_HOME"); cuda && *cuda)
        candidates.push_back((std::filesystem::path(cuda) / "lib64/libnvrtc.so.13").string());
      candidates.emplace_back("/usr/local/cuda/lib64/libnvrtc.so.13");
      candidates.emplace_back("libnvrtc.so.13");
    }
    std::string tried;
    for (const auto& c : candidates) {
      std::error_code ec;
      if (c.find('/') != std::string::npos && !std::filesystem::exists(c, ec)) continue;
      void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char* e = dlerror();
        tried += "\n  " + c + ": " + (e ? e : "dlopen failed");
        continue;
      }
      auto sym = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
        return fn != nullptr;
      };
      if (sym(n.version, "nvrtcVersion") && sym(n.create, "nvrtcCreateProgram") && sym(n.compile, "nvrtcCompileProgram") &&
          sym(n.log_size, "nvrtcGetProgramLogSize") && sym(n.log, "nvrtcGetProgramLog") &&
          sym(n.cubin_size, "nvrtcGetCUBINSize") && sym(n.cubin, "nvrtcGetCUBIN") && sym(n.destroy, "nvrtcDestroyProgram") &&
          sym(n.error, "nvrtcGetErrorString"))
        return n;
      tried += "\n  " + c + ": lacks the NVRTC functions tensoracle needs";
      dlclose(h);
    }
    n.version = nullptr;
    n.why = "NVRTC (libnvrtc.so.13) could not be loaded: install it with `pip install tensoracle[producer]` (the "
            "nvidia-cuda-nvrtc wheel) or a CUDA 13 toolkit, or set TENSORACLE_NVRTC to its path" +
            (tried.empty() ? std::string() : "; tried:" + tried);
    return n;
  }();
  if (!lib.version) throw UnsupportedError("[cubin] " + lib.why);
  return lib;
}

// "sm_86", "86", "sm_90a", "compute_90"? Only real architectures: sm_<digits>[a|f].
std::string normalize_arch(const std::string& a) {
  std::string s = a.rfind("sm_", 0) == 0 ? a.substr(3) : a;
  std::size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  const std::string suffix = s.substr(digits);
  if (digits < 2 || digits > 3 || !(suffix.empty() || suffix == "a" || suffix == "f"))
    throw InvalidArgument("[cubin] architecture '" + a + "' is not of the form sm_86, sm_90, sm_90a or sm_120");
  return "sm_" + s;
}

std::vector<std::byte> read_all(const std::filesystem::path& path) {
  core::MappedFile f(path, false, "cubin");
  return {f.bytes().begin(), f.bytes().end()};
}

// ---- CUDA ELF ------------------------------------------------------------------------------

template <class T>
T get(std::span<const std::byte> b, std::uint64_t off, const char* what) {
  if (off > b.size() || b.size() - off < sizeof(T)) bad_cubin(std::string(what) + " lies beyond the end of the file");
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

struct Section {
  std::uint32_t name, type;
  std::uint64_t offset, size, entsize;
  std::uint32_t link;
};

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtc().version(&major, &minor);
  return "NVRTC " + std::to_string(major) + "." + std::to_string(minor);
}

CubinInfo inspect(std::span<const std::byte> b) {
  CubinInfo info;
  info.size = b.size();
  info.sha256 = core::Sha256::hex(b);
  if (b.size() < 64 || std::memcmp(b.data(), "\x7f" "ELF", 4) != 0) bad_cubin("no ELF header");
  if (get<std::uint8_t>(b, 4, "the ELF class") != 2 || get<std::uint8_t>(b, 5, "the byte order") != 1)
    bad_cubin("not a 64-bit little-endian ELF file");
  constexpr std::uint16_t kEmCuda = 190;
  if (get<std::uint16_t>(b, 18, "the machine") != kEmCuda) bad_cubin("its ELF machine is not CUDA (190)");
  const auto abi = get<std::uint8_t>(b, 8, "the ABI version");
  const auto flags = get<std::uint32_t>(b, 48, "the flags");
  // The SM number: bits 8-15 of e_flags from CUDA ELF ABI version 8 on, bits 0-7 before.
  const unsigned sm = abi >= 8 ? (flags >> 8) & 0xFF : flags & 0xFF;
  if (sm < 10) bad_cubin("its flags name no GPU architecture");
  info.arch = "sm_" + std::to_string(sm);
  const auto shoff = get<std::uint64_t>(b, 40, "the section table offset");
  const auto shentsize = get<std::uint16_t>(b, 58, "the section entry size");
  const auto shnum = get<std::uint16_t>(b, 60, "the section count");
  const auto shstrndx = get<std::uint16_t>(b, 62, "the section name index");
  if (shentsize != 64) bad_cubin("section entries of " + std::to_string(shentsize) + " bytes (64 expected)");
  if (shoff > b.size() || (b.size() - shoff) / 64 < shnum) bad_cubin("the section table lies beyond the end of the file");
  std::vector<Section> secs(shnum);
  for (std::uint64_t i = 0; i < shnum; ++i) {
    const std::uint64_t at = shoff + 64 * i;
    Section& s = secs[i];
    s.name = get<std::uint32_t>(b, at, "a section name");
    s.type = get<std::uint32_t>(b, at + 4, "a section type");
    s.offset = get<std::uint64_t>(b, at + 24, "a section offset");
    s.size = get<std::uint64_t>(b, at + 32, "a section size");
    s.link = get<std::uint32_t>(b, at + 40, "a section link");
    s.entsize = get<std::uint64_t>(b, at + 56, "a section entry size");
    if (s.type != 8 /* NOBITS */ && (s.offset > b.size() || s.size > b.size() - s.offset))
      bad_cubin("section " + std::to_string(i) + " lies beyond the end of the file");
  }
  (void)shstrndx;
  // A NUL-terminated string at `off` of string section `strtab`.
  auto string_at = [&](std::uint32_t strtab, std::uint32_t off) {
    if (strtab >= secs.size() || secs[strtab].type != 3 /* STRTAB */) bad_cubin("a symbol table links to no string table");
    const Section& s = secs[strtab];
    if (off >= s.size) bad_cubin("a symbol name lies outside its string table");
    const char* p = reinterpret_cast<const char*>(b.data() + s.offset + off);
    const std::size_t n = strnlen(p, s.size - off);
    if (n == s.size - off) bad_cubin("a symbol name is not terminated");
    return std::string(p, n);
  };
  for (const Section& s : secs) {
    if (s.type != 2 /* SYMTAB */) continue;
    if (s.entsize != 24) bad_cubin("symbol entries of " + std::to_string(s.entsize) + " bytes (24 expected)");
    for (std::uint64_t k = 0; k < s.size / 24; ++k) {
      const std::uint64_t at = s.offset + 24 * k;
      const auto info_byte = get<std::uint8_t>(b, at + 4, "a symbol");
      const auto other = get<std::uint8_t>(b, at + 5, "a symbol");
      constexpr std::uint8_t kFunc = 2, kCudaEntry = 0x10;  // STT_FUNC; STO_CUDA_ENTRY marks a kernel
      if ((info_byte & 0xF) == kFunc && (other & kCudaEntry)) {
        info.kernels.push_back(string_at(s.link, get<std::uint32_t>(b, at, "a symbol")));
        if (info.kernels.back().empty()) bad_cubin("a kernel symbol has no name");
      }
    }
  }
  std::sort(info.kernels.begin(), info.kernels.end());
  return info;
}

CubinInfo inspect_file(const std::filesystem::path& path) {
  core::MappedFile file(path, false, "cubin");
  try {
    CubinInfo info = inspect(file.bytes());
    info.file = path.filename().string();
    return info;
  } catch (const FormatError& e) {
    throw FormatError(std::string(e.what()) + " (" + path.string() + ")");
  }
}

Manifest produce(const std::filesystem::path& source, const std::filesystem::path& out_dir, const ProduceOptions& o) {
  if (o.archs.empty()) throw InvalidArgument("[cubin] no architecture asked for (e.g. --arch sm_86,sm_90)");
  std::vector<std::string> archs;
  for (const auto& a : o.archs) {
    auto n = normalize_arch(a);
    if (std::find(archs.begin(), archs.end(), n) == archs.end()) archs.push_back(n);
  }
  Manifest m;
  m.source = source.filename().string();
  m.flags.push_back("-std=" + o.std);
  for (const auto& d : o.include_dirs) m.flags.push_back("-I" + d);
  for (const auto& d : o.defines) {
    if (d.empty() || d[0] == '=') throw InvalidArgument("[cubin] define '" + d + "' has no name");
    m.flags.push_back("-D" + d);
  }
  for (const auto& e : o.extra) {
    if (e.rfind("--gpu-architecture", 0) == 0 || e.rfind("-arch", 0) == 0)
      throw InvalidArgument("[cubin] option '" + e + "': give architectures with --arch");
    m.flags.push_back(e);
  }
  const auto src_bytes = read_all(source);
  m.source_sha256 = core::Sha256::hex(src_bytes);
  const std::string text(reinterpret_cast<const char*>(src_bytes.data()), src_bytes.size());
  const Nvrtc& nv = nvrtc();
  m.compiler = nvrtc_version();

  // Every architecture compiles before anything is written.
  std::vector<std::vector<std::byte>> binaries;
  for (const auto& arch : archs) {
    nvrtcProgram prog = nullptr;
    if (int r = nv.create(&prog, text.c_str(), m.source.c_str(), 0, nullptr, nullptr); r != 0)
      throw BuildError("[cubin] " + m.source + ": NVRTC could not create a program: " + nv.error(r));
    std::vector<std::string> opts = m.flags;
    opts.push_back("--gpu-architecture=" + arch);
    std::vector<const char*> argv;
    for (const auto& s : opts) argv.push_back(s.c_str());
    const int r = nv.compile(prog, static_cast<int>(argv.size()), argv.data());
    std::size_t n = 0;
    nv.log_size(prog, &n);
    std::string log(n, '\0');
    if (n) nv.log(prog, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    if (r != 0) {
      nv.destroy(&prog);
      throw BuildError("[cubin] " + m.source + " does not compile for " + arch + " (" + nv.error(r) + "):\n" + log);
    }
    std::size_t size = 0;
    nv.cubin_size(prog, &size);
    std::vector<std::byte> bin(size);
    const int got = size ? nv.cubin(prog, reinterpret_cast<char*>(bin.data())) : 1;
    nv.destroy(&prog);
    if (got != 0 || size == 0) throw BuildError("[cubin] " + m.source + ": NVRTC produced no cubin for " + arch);
    binaries.push_back(std::move(bin));
  }

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw IoError("[cubin] cannot create " + out_dir.string() + ": " + ec.message(), ec.value(), out_dir.string());
  const std::string stem = source.stem().string();
  for (std::size_t i = 0; i < archs.size(); ++i) {
    CubinInfo info = inspect(binaries[i]);
    info.file = stem + "." + archs[i] + ".cubin";
    core::AtomicFile f(out_dir / info.file, "cubin");
    f.write(binaries[i]);
    f.commit();
    m.cubins.push_back(std::move(info));
  }
  nlohmann::ordered_json j = {{"format", "tensoracle.cubins/1"}, {"source", m.source}, {"source_sha256", m.source_sha256},
            {"compiler", m.compiler}, {"flags", m.flags}, {"cubins", nlohmann::ordered_json::array()}};
  for (std::size_t i = 0; i < m.cubins.size(); ++i) {
    const auto& c = m.cubins[i];
    j["cubins"].push_back({{"file", c.file}, {"arch", archs[i]}, {"size", c.size}, {"sha256", c.sha256}, {"kernels", c.kernels}});
    m.cubins[i].arch = archs[i];  // as asked ("sm_90a" reads as sm_90 in the ELF flags)
  }
  const std::string text_out = j.dump(2) + "\n";
  core::AtomicFile f(out_dir / "manifest.json", "cubin");
  f.write(std::as_bytes(std::span(text_out)));
  f.commit();
  return m;
}

Manifest verify(const std::filesystem::path& where, std::vector<std::string>& problems) {
  std::error_code ec;
  const auto path = std::filesystem::is_directory(where, ec) ? where / "manifest.json" : where;
  const auto bytes = read_all(path);
  Manifest m;
  try {
    const json j = core::parse_untrusted(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    if (j.at("format") != "tensoracle.cubins/1") throw FormatError("it is not a tensoracle.cubins/1 manifest");
    m.source = j.at("source").get<std::string>();
    m.source_sha256 = j.at("source_sha256").get<std::string>();
    m.compiler = j.at("compiler").get<std::string>();
    m.flags = j.at("flags").get<std::vector<std::string>>();
    for (const auto& c : j.at("cubins")) {
      CubinInfo info;
      info.file = c.at("file").get<std::string>();
      info.arch = c.at("arch").get<std::string>();
      info.size = c.at("size").get<std::uint64_t>();
      info.sha256 = c.at("sha256").get<std::string>();
      info.kernels = c.at("kernels").get<std::vector<std::string>>();
      if (info.file.empty() || info.file.find('/') != std::string::npos || info.file == "." || info.file == "..")
        throw FormatError("cubin file name '" + info.file + "' is not a plain file name");
      m.cubins.push_back(std::move(info));
    }
  } catch (const FormatError& e) {
    throw FormatError("[cubin] manifest " + path.string() + ": " + e.what());
  } catch (const std::exception& e) {
    throw FormatError("[cubin] manifest " + path.string() + " is malformed: " + e.what());
  }
  for (const auto& c : m.cubins) {
    const auto file = path.parent_path() / c.file;
    CubinInfo got;
    try {
      got = inspect_file(file);
    } catch (const Error& e) {
      problems.push_back(c.file + ": " + e.what());
      continue;
    }
    if (got.size != c.size || got.sha256 != c.sha256)
      problems.push_back(c.file + ": its bytes differ from the manifest's (size " + std::to_string(got.size) + " vs " +
                         std::to_string(c.size) + ", SHA-256 " + got.sha256 + " vs " + c.sha256 + ")");
    if (c.arch != got.arch && c.arch != got.arch + "a" && c.arch != got.arch + "f")
      problems.push_back(c.file + ": built for " + got.arch + ", the manifest says " + c.arch);
  }
  return m;
}

}  // namespace tensoracle::cubin
