// The matrix products' driver: it checks shapes, quantises the activations once per call, splits
// the rows of every matrix of a call into tasks across the thread pool, and runs each task by its
// weight type's kernels (src/ops/matmul_<type>.cc), which the traits table (tensor_type.cc)
// names. The kernels are compiled once per SIMD target and pick the best at run time; so is the
// one question asked here per target, whether it repacks.
// clang-format off: the target include must come first, then foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include "ops/matmul_tiles-inl.h"

HWY_BEFORE_NAMESPACE();
namespace squeezekv {
namespace HWY_NAMESPACE {

// Whether this target reads and writes repacked matrices (repacked_weights.h): every x86 target
// with byte dots, by the AVX-512 VNNI tiles where the CPU has VNNI and by the half-group tiles
// (matmul_half_tiles-inl.h) elsewhere.
bool Repacks() { return SQUEEZEKV_X86_BYTE_DOT != 0; }

}  // namespace HWY_NAMESPACE
}  // namespace squeezekv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <string>

#include "ops/activation_q8.h"
#include "ops/weight_kernels.h"
#include "squeezekv/base/errors.h"
#include "squeezekv/ops/matmul.h"
#include "squeezekv/ops/model_ops.h"
#include "squeezekv/ops/repacked_weights.h"
#include "squeezekv/ops/thread_pool.h"

namespace squeezekv {

HWY_EXPORT(Repacks);

namespace {

void check_shape(const WeightMatrix& w, int64_t n_tok) {
  require(block_layout(static_cast<uint32_t>(w.type)).has_value(), "weight type", static_cast<uint32_t>(w.type),
          "is not supported");
  require(w.n_rows >= 0, "n_rows", w.n_rows, "must be >= 0");
  const int64_t block = block_layout(w.type).block_elems;
  if (w.n_cols < 0 || w.n_cols % block != 0) {  // the message is built only on failure: no allocation per call
    require(false, "n_cols", w.n_cols,
            "must be a non-negative multiple of the block size of " +
                std::string(tensor_type_name(static_cast<uint32_t>(w.type))));
  }
  require(n_tok >= 0, "n_tok", n_tok, "must be >= 0");
  require(w.data != nullptr || w.n_rows == 0 || w.n_cols == 0, "weight data", "null", "must point at the matrix");
}

bool is_quantized(TensorType type) { return block_layout(type).block_elems > 1; }

// Rows [begin, end) of w times every token of in, by w's type's kernels.
void run_kernel(const WeightMatrix& w, const detail::MatmulInput& in, int64_t begin, int64_t end, float* y) {
  detail::weight_kernels(w.type).rows(w, in, begin, end, y);
}

// Task sizes in whole 16-row tiles (the prompt tiles' height), except for matrices smaller than one.
int64_t round_rows(int64_t rows) { return (rows + 15) / 16 * 16; }

// The pool a call runs on: none for one worker or a call under kMatmulParallelMacs, where the
// hand-off would cost more than it saves. Quantising the activations and the rows both use it.
ThreadPool* pool_for(std::span<const MatmulOutput> outputs, int64_t n_tok, ThreadPool* pool) {
  if (pool == nullptr || pool->num_workers() == 1) return nullptr;
  int64_t macs = 0;
  for (const MatmulOutput& o : outputs) macs += o.w->n_rows * o.w->n_cols * n_tok;
  return macs >= kMatmulParallelMacs ? pool : nullptr;
}

}  // namespace

// Splits the rows of every output into tasks of about equal size (a few per worker, to balance
// uneven progress) and runs them in one parallel region (pool from pool_for; none: in turn).
// Tasks are whole rows, so the split never changes any result.
void run_rows(std::span<const MatmulOutput> outputs, const detail::MatmulInput& in, ThreadPool* pool) {
  int64_t total_rows = 0;
  for (const MatmulOutput& o : outputs) total_rows += o.w->n_rows;
  if (pool == nullptr) {
    for (size_t m = 0; m < outputs.size(); ++m) {
      run_kernel(*outputs[m].w, in, 0, outputs[m].w->n_rows, outputs[m].y);
    }
    return;
  }
  const int64_t target_tasks = std::min<int64_t>(total_rows, static_cast<int64_t>(pool->num_workers()) * 4);
  const int64_t rows_per_task = round_rows((total_rows + target_tasks - 1) / target_tasks);
  int64_t n_tasks = 0;
  for (const MatmulOutput& o : outputs) n_tasks += (o.w->n_rows + rows_per_task - 1) / rows_per_task;
  pool->parallel_for(static_cast<size_t>(n_tasks), [&](size_t task, size_t /*worker*/) {
    auto t = static_cast<int64_t>(task);
    for (size_t m = 0; m < outputs.size(); ++m) {
      const int64_t rows = outputs[m].w->n_rows;
      const int64_t tasks_here = (rows + rows_per_task - 1) / rows_per_task;
      if (t >= tasks_here) {
        t -= tasks_here;
        continue;
      }
      const int64_t begin = t * rows_per_task;
      const int64_t end = std::min(rows, begin + rows_per_task);
      run_kernel(*outputs[m].w, in, begin, end, outputs[m].y);
      return;
    }
  });
}

// Reused across calls on this thread, so steady-state inference allocates nothing here. A pool
// (pool_for's) quantises a prompt's tokens on every worker.
detail::MatmulInput prepare_input(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tok,
                                  ThreadPool* pool) {
  thread_local detail::QuantizedActivations quantized;
  detail::MatmulInput in{x, nullptr, n_tok};
  // K-quant weights take activations in 256-element blocks, the others in blocks of 32 (as ggml
  // pairs them, so that results match llama.cpp's); a mixed call takes the finer blocks.
  bool any_quantized = false, all_k_quants = true;
  for (const MatmulOutput& o : outputs) {
    if (!is_quantized(o.w->type)) continue;
    any_quantized = true;
    all_k_quants = all_k_quants && block_layout(o.w->type).block_elems == 256;
  }
  if (any_quantized) {
    quantized.assign(x, n_tok, outputs.front().w->n_cols, all_k_quants, pool);
    in.quantized = &quantized;
  }
  return in;
}

void matmul_many(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tok, ThreadPool* pool) {
  require(!outputs.empty(), "outputs", 0, "matmul_many needs at least one matrix");
  for (const MatmulOutput& o : outputs) {
    check_shape(*o.w, n_tok);
    if (o.w->n_cols != outputs.front().w->n_cols) {
      require(false, "n_cols", o.w->n_cols,
              "every matrix of matmul_many must have n_cols = " + std::to_string(outputs.front().w->n_cols));
    }
  }
  if (n_tok == 0) return;
  ThreadPool* used = pool_for(outputs, n_tok, pool);
  run_rows(outputs, prepare_input(outputs, x, n_tok, used), used);
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tok, float* y, ThreadPool* pool) {
  check_shape(w, n_tok);
  if (w.n_rows == 0 || n_tok == 0) return;
  const MatmulOutput out{&w, y};
  matmul_many(std::span(&out, 1), x, n_tok, pool);
}

void matmul_swiglu(const WeightMatrix& gate, const WeightMatrix& up, const float* x, int64_t n_tok, float* gate_out,
                   float* up_out, ThreadPool* pool) {
  check_shape(gate, n_tok);
  check_shape(up, n_tok);
  require(up.n_rows == gate.n_rows && up.n_cols == gate.n_cols, "up rows", up.n_rows,
          "must match the gate matrix's shape");
  if (gate.n_rows == 0 || n_tok == 0) return;
  // Gate and up rows [begin, end) go to the same task (interleaved outputs), so the task can apply
  // silu(gate) * up to its slice as soon as both are written.
  const MatmulOutput outputs[2] = {{&gate, gate_out}, {&up, up_out}};
  ThreadPool* used = pool_for(outputs, n_tok, pool);
  const detail::MatmulInput in = prepare_input(outputs, x, n_tok, used);
  const int64_t rows = gate.n_rows;
  auto slice = [&](int64_t begin, int64_t end) {
    run_kernel(gate, in, begin, end, gate_out);
    run_kernel(up, in, begin, end, up_out);
    for (int64_t t = 0; t < n_tok; ++t) {
      float* g = gate_out + t * rows + begin;
      swiglu(g, up_out + t * rows + begin, end - begin, g);
    }
  };
  if (used == nullptr) return slice(0, rows);
  const auto workers = static_cast<int64_t>(used->num_workers());
  const int64_t rows_per_task = round_rows((rows + workers * 4 - 1) / (workers * 4));
  const int64_t n_tasks = (rows + rows_per_task - 1) / rows_per_task;
  used->parallel_for(static_cast<size_t>(n_tasks), [&](size_t task, size_t /*worker*/) {
    const int64_t begin = static_cast<int64_t>(task) * rows_per_task;
    const int64_t end = std::min(rows, begin + rows_per_task);
    if (begin < end) slice(begin, end);
  });
}

void matvec(const WeightMatrix& w, const float* x, float* y, ThreadPool* pool) { matmul(w, x, 1, y, pool); }

bool can_repack(const WeightMatrix& w) {
  return has_repacked_layout(w.type) && w.n_rows > 0 && w.n_cols > 0 &&
         w.n_cols % block_layout(w.type).block_elems == 0 && HWY_DYNAMIC_DISPATCH(Repacks)();
}

void repack_groups(const WeightMatrix& w, int64_t group_begin, int64_t group_end, uint8_t* out) {
  if (!can_repack(w)) {
    require(false, "weight type", tensor_type_name(static_cast<uint32_t>(w.type)),
            "cannot be repacked on this CPU (repacking needs " + detail::repackable_type_names("or") +
                " and an x86 CPU with AVX2)");
  }
  check_shape(w, 1);
  const int64_t n_groups = (w.n_rows + kRepackedGroupRows - 1) / kRepackedGroupRows;
  require(group_begin >= 0 && group_begin <= group_end, "group_begin", group_begin, "must be in [0, group_end]");
  require(group_end <= n_groups, "group_end", group_end, "must be at most the groups " + std::to_string(n_groups));
  require(out != nullptr, "out", "null", "must point at repacked_bytes(w) bytes");
  detail::weight_kernels(w.type).repacked->repack_groups(w, group_begin, group_end, out);
}

}  // namespace squeezekv
#endif  // HWY_ONCE
