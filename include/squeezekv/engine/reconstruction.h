// Context reconstruction (KVzip, Kim et al. 2025, arXiv:2505.23416): after a context is
// prefilled, the model is asked to repeat it, teacher-forced, and the policy that scores rows by
// reconstruction (PolicyInfo::reconstruction) reads the attention each row receives. Per chunk of
// at most `chunk` context tokens the pass feeds
//   "\n\nRepeat the previous context exactly."                                   (the first chunk)
//   "\n\nRepeat the part of the previous context exactly, starting with" + the previous chunk's
//   last 8 tokens                                                                (the later ones)
// then "\n" and the chunk's own tokens, at the positions after the context; its rows leave the
// cache when the chunk is done (ModelCache::begin_reconstruction). No chat template wraps the
// prompt: the context itself went in as plain text (kvpress wraps both in the model's chat turn).
// prefill() runs it for every caller, read once or streaming as the plan says.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "squeezekv/engine/engine.h"
#include "squeezekv/ops/weight_matrix.h"

namespace squeezekv {

inline constexpr std::string_view kRepeatFirst = "\n\nRepeat the previous context exactly.";
inline constexpr std::string_view kRepeatLater = "\n\nRepeat the part of the previous context exactly, starting with";
inline constexpr std::string_view kRepeatSuffix = "\n";
inline constexpr int kRepeatOverlap = 8;  // tokens of the previous chunk quoted in a later chunk's prompt
// A chunk's reconstruction prompt takes at most this many tokens (a token per byte of its text at
// worst, the quoted tokens and the suffix): what admission promises beside the chunk.
inline constexpr int kReconstructionPromptMost = 96;

// Per slot of [0, n): 1 where the row is in the reconstruction's softmax (the sinks, the chunk,
// the reconstruction's own rows), and 1 where it is in the chunk; 0 elsewhere. `positions`: the
// rows' positions, slot-indexed (free slots: HeadStore::kFree).
void reconstruction_masks(const int64_t* positions, int n, const ReconstructionSpan& span, float* in_softmax,
                          float* in_chunk);

// KVzip+'s factors (ReconstructionSpan::by_output): per query head, its weights times
// `out_norms[i * ld + s]` (head i of the group, slot s: ||W_O,h v_s||), all times `query_scale`
// (1 / the query's hidden-state norm). Plain KVzip: no out_norms, query_scale 1.
struct OutputWeighting {
  const float* out_norms = nullptr;
  size_t ld = 0;
  float query_scale = 1.0f;
};

// What a reconstruction feeds back for one query (the engine's attention, per KV head): per row of
// [0, hi), the largest weight any of the `group` query heads pays it, each head's softmax taken
// over the span's rows alone (its probabilities over every row, `probs` rows `ld` apart,
// renormalised over the masks' softmax rows: the same softmax), scaled as `by` says; 0 for a row
// outside the chunk.
void reconstruction_weights(const float* in_softmax, const float* in_chunk, const float* probs, size_t group, size_t ld,
                            int hi, float* dst, const OutputWeighting& by = {});

// KVzip+: the Gram matrix G_h = W_h^T W_h [head_dim, head_dim] of each query head's columns W_h
// of the attention output projection `wo` (GGUF layout: dim rows of n_heads * head_dim), so that
// ||W_h v||^2 = v^T G_h v costs head_dim^2 a row instead of dim * head_dim. [n_heads, hd, hd].
std::vector<float> output_grams(const WeightMatrix& wo, int n_heads, int head_dim);
// sqrt(v^T G v) for one head's Gram matrix `gram` [hd, hd].
float output_norm(const float* gram, const float* v, int head_dim);

// The tokens that reconstruct context[first, end) (one chunk): the prompt, then the chunk.
std::vector<int32_t> reconstruction_tokens(const Tokenizer& tokenizer, std::span<const int32_t> context, int64_t first,
                                           int64_t end);

// Reconstructs context[first, end) chunk by chunk (at most `chunk` tokens each) over what `cache`
// holds; context[0] sits at position `offset` in the cache. The chunk's rows are scored through
// the cache's policy; the reconstruction's own rows leave the cache after each chunk. The peak
// beyond what the cache held: one chunk plus its prompt. InvalidArgument naming the parameter when
// the context is not longer than the sinks or the range is empty.
void reconstruct_context(Engine& engine, ModelCache& cache, std::span<const int32_t> context, int64_t offset,
                         int64_t first, int64_t end, int chunk, int n_batch);

}  // namespace squeezekv
