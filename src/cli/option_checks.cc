#include "cli/option_checks.h"

#include <charconv>
#include <limits>
#include <string>

#include "squeezekv/base/errors.h"

namespace squeezekv::cli {
namespace {

// Whether text is a decimal integer within [lo, hi] (lo <= 0 or both non-negative).
bool within(const std::string& text, int64_t lo, uint64_t hi) {
  const char* first = text.data();
  const char* last = first + text.size();
  if (!text.empty() && text[0] == '-') {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(first, last, v);
    return ec == std::errc() && end == last && v >= lo;
  }
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(first, last, v);
  return ec == std::errc() && end == last && v <= hi && (lo <= 0 || v >= uint64_t(lo));
}

CLI::Validator range_validator(int64_t lo, uint64_t hi) {
  const std::string bounds = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [=](std::string& text) {
        return within(text, lo, hi) ? std::string() : text + ": must be an integer in " + bounds;
      },
      "");
}

}  // namespace

CLI::Validator int_range(int64_t lo, int64_t hi) { return range_validator(lo, uint64_t(hi)); }

CLI::Validator uint_range(uint64_t hi) { return range_validator(0, hi); }

void check_unsigned_options(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands({})) {
    for (CLI::Option* option : sub->get_options()) {
      if (option->get_type_name().rfind("UINT", 0) == 0)
        option->check(uint_range(std::numeric_limits<uint64_t>::max()));
    }
  }
}

void require_list_items(const CLI::App& app, int argc, char** argv) {
  if (argc < 2) return;
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : app.get_subcommands({})) {
    if (s->get_name() == argv[1]) sub = s;
  }
  if (sub == nullptr) return;
  for (const CLI::Option* option : sub->get_options()) {
    if (option->get_delimiter() != ',') continue;
    for (int i = 2; i < argc; ++i) {
      const std::string arg = argv[i];
      std::string value;
      bool found = false;
      for (const std::string& name : option->get_lnames()) {
        if (arg == "--" + name && i + 1 < argc) value = argv[i + 1], found = true;
        if (arg.rfind("--" + name + "=", 0) == 0) value = arg.substr(name.size() + 3), found = true;
      }
      for (const std::string& name : option->get_snames()) {
        if (arg == "-" + name && i + 1 < argc) value = argv[i + 1], found = true;
      }
      if (!found) continue;
      const bool empty_item =
          value.empty() || value.front() == ',' || value.back() == ',' || value.find(",,") != std::string::npos;
      require(!empty_item, option->get_name(), "'" + value + "'", "a list item is empty");
    }
  }
}

}  // namespace squeezekv::cli
