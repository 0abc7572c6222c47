// Checks of option text before CLI11 converts it: CLI11 2.1 wraps negative text into unsigned
// types ("--queue -1" becomes 2^64 - 1), takes text beyond 64 bits as the maximum, and drops the
// empty items of comma lists ("--budgets 8,,16" reads as 8,16).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>

namespace squeezekv::cli {

// Text that is a decimal integer in [lo, hi], else "VALUE: must be an integer in [lo, hi]".
CLI::Validator int_range(int64_t lo, int64_t hi);
CLI::Validator uint_range(uint64_t hi);  // [0, hi]

// Every unsigned option of every subcommand takes only a decimal integer of its range.
void check_unsigned_options(CLI::App& app);

// Throws InvalidArgument naming the option when a comma-list option of the subcommand argv[1]
// is given an empty item (or an empty list).
void require_list_items(const CLI::App& app, int argc, char** argv);

}  // namespace squeezekv::cli
