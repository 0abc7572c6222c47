// Conserving a schedule: no layer can hold more rows than it has seen (or than its span allows), so
// a schedule that gives a layer more than that would lose the difference. conserve_budgets caps each
// layer at what it can hold and hands the excess to the layers below the cap, in proportion to
// their scheduled budgets (the allocator's weights), so that the model holds exactly
// sum(schedule) rows whenever it can hold that many, and every row when it cannot.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace squeezekv {

// result[i] <= cap for every i; sum(result) == min(sum(schedule), n * cap); result == schedule
// when no entry exceeds the cap. The excess is spread by water-filling: result[i] = min(cap,
// lambda * schedule[i]) for the one lambda >= 1 that conserves the total, rounded to integers by
// largest remainder (ties to the lower layer index), so identical input gives identical output.
// InvalidArgument naming the field for a negative entry or cap < 1.
std::vector<int> conserve_budgets(std::span<const int> schedule, int64_t cap);

// The same into `out`, with working space the caller keeps: once `out` and `scratch` have grown to
// the schedule's size, a call allocates nothing (a cache conserves at every new token while its
// layers fill).
struct ConserveScratch {
  std::vector<bool> capped;
  std::vector<double> share;
  std::vector<size_t> order;
};
void conserve_budgets_into(std::span<const int> schedule, int64_t cap, std::vector<int>& out, ConserveScratch& scratch);

}  // namespace squeezekv
