// Test helper: a minimal CUDA ELF file (what NVRTC's cubins look like to tensoracle's reader):
// ELF header, a string table of section names, a symbol string table, a symbol table and a
// section table. Each kernel is a FUNC symbol with STO_CUDA_ENTRY; `helpers` are FUNC symbols
// without it (device functions).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tensoracle::testing {

inline std::vector<std::byte> cuda_elf(unsigned sm, const std::vector<std::string>& kernels,
                                       const std::vector<std::string>& helpers = {}, std::uint8_t abi_version = 8) {
  std::vector<std::byte> f(64);
  auto put = [&](std::size_t at, auto v) {
    if (f.size() < at + sizeof v) f.resize(at + sizeof v);
    std::memcpy(f.data() + at, &v, sizeof v);
  };
  auto append = [&](const std::string& s) {
    std::size_t at = f.size();
    f.resize(at + s.size());
    std::memcpy(f.data() + at, s.data(), s.size());
    return at;
  };
  // Symbol names, then the symbols (a null symbol first).
  std::string strtab(1, '\0');
  std::vector<std::uint32_t> name_at;
  for (const auto* list : {&kernels, &helpers})
    for (const auto& k : *list) {
      name_at.push_back(static_cast<std::uint32_t>(strtab.size()));
      strtab += k + '\0';
    }
  const std::string shstrtab = std::string("\0.shstrtab\0.strtab\0.symtab\0", 27);
  const std::size_t shstr_off = append(shstrtab), str_off = append(strtab);
  const std::size_t sym_off = f.size();
  f.resize(sym_off + 24 * (1 + name_at.size()));
  for (std::size_t i = 0; i < name_at.size(); ++i) {
    const std::size_t at = sym_off + 24 * (i + 1);
    put(at, name_at[i]);
    put(at + 4, std::uint8_t{0x12});                                   // GLOBAL FUNC
    put(at + 5, std::uint8_t{i < kernels.size() ? std::uint8_t{0x10} : std::uint8_t{0}});  // STO_CUDA_ENTRY
  }
  const std::size_t sh_off = f.size();
  f.resize(sh_off + 64 * 4);
  auto section = [&](int i, std::uint32_t name, std::uint32_t type, std::uint64_t off, std::uint64_t size,
                     std::uint32_t link, std::uint64_t entsize) {
    const std::size_t at = sh_off + 64 * static_cast<std::size_t>(i);
    put(at, name), put(at + 4, type), put(at + 24, off), put(at + 32, size), put(at + 40, link), put(at + 56, entsize);
  };
  section(1, 1, 3, shstr_off, shstrtab.size(), 0, 0);                       // .shstrtab
  section(2, 11, 3, str_off, strtab.size(), 0, 0);                          // .strtab
  section(3, 19, 2, sym_off, 24 * (1 + name_at.size()), 2, 24);             // .symtab -> .strtab
  std::memcpy(f.data(), "\x7f" "ELF", 4);
  put(4, std::uint8_t{2}), put(5, std::uint8_t{1}), put(6, std::uint8_t{1}), put(7, std::uint8_t{0x41});
  put(8, abi_version);
  put(16, std::uint16_t{2}), put(18, std::uint16_t{190}), put(20, std::uint32_t{1});
  put(40, static_cast<std::uint64_t>(sh_off));
  put(48, abi_version >= 8 ? (std::uint32_t{sm} << 8) | 0x6000004u : std::uint32_t{sm});
  put(52, std::uint16_t{64}), put(58, std::uint16_t{64}), put(60, std::uint16_t{4}), put(62, std::uint16_t{1});
  return f;
}

}  // namespace tensoracle::testing
