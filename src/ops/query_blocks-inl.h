// Included by kv_rows.cc and kivi_rows.cc inside their per-target namespace (each target pass
// includes it again, hence no include guard): the kernels' lambdas then keep the target's
// attributes and are inlined, so their accumulators stay in registers.

// Calls pass(std::integral_constant<size_t, Q>, first) over n queries: blocks of Q = 4, then one
// block of the 1 to 3 left, so the passes keep Q accumulators per vector in registers.
template <class Pass>
HWY_INLINE void InBlocksOfFour(size_t n, const Pass& pass) {
  size_t g = 0;
  for (; g + 4 <= n; g += 4) pass(std::integral_constant<size_t, 4>(), g);
  if (n - g == 3) pass(std::integral_constant<size_t, 3>(), g);
  if (n - g == 2) pass(std::integral_constant<size_t, 2>(), g);
  if (n - g == 1) pass(std::integral_constant<size_t, 1>(), g);
}
