/* squeezekv inside a hand-written attention loop (C): the toy decoder of attention_loop.cc
 * through the C API. A 64-token prompt in one step, then one token at a time; per layer and step:
 * begin_update stores K/V, each head reads its slots, attends causally and feeds the
 * probabilities back, end_update evicts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "squeezekv/c/squeezekv.h"

enum {
  LAYERS = 4,
  HEADS = 2,
  DIM = 32,
  PROMPT = 64,
  TOKENS = 200,
  MAX_SLOTS = 256,
  BUDGET = 48 /* average rows per layer and head */
};

static float noise(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

static float q[HEADS * PROMPT * DIM], k[HEADS * PROMPT * DIM], v[HEADS * PROMPT * DIM];
static float keys[MAX_SLOTS * DIM], values[MAX_SLOTS * DIM], probs[PROMPT * MAX_SLOTS], out[DIM];
static int64_t positions[MAX_SLOTS];

/* Attention of n queries ([heads, n, dim]) at positions pos0.. over one layer's kept rows. */
static int attend(squeezekv_cache* cache, int layer, int n, int pos0) {
  for (int h = 0; h < HEADS; ++h) {
    const int32_t slots = squeezekv_cache_read_slots(cache, layer, h, keys, values, positions, MAX_SLOTS);
    if (slots < 0) return 0;
    for (int i = 0; i < n; ++i) {
      const float* query = q + (h * n + i) * DIM;
      float* p = probs + i * slots; /* [n, slots], what add_attention takes */
      float max_logit = -INFINITY, sum = 0.0f;
      for (int s = 0; s < slots; ++s) {
        float dot = 0.0f;
        for (int d = 0; d < DIM; ++d) dot += query[d] * keys[s * DIM + d];
        p[s] = dot / sqrtf((float)DIM);
        if (positions[s] >= 0 && positions[s] <= pos0 + i && p[s] > max_logit) max_logit = p[s];
      }
      for (int s = 0; s < slots; ++s) { /* free slots and later positions stay masked (0) */
        p[s] = positions[s] >= 0 && positions[s] <= pos0 + i ? expf(p[s] - max_logit) : 0.0f;
        sum += p[s];
      }
      for (int d = 0; d < DIM; ++d) out[d] = 0.0f;
      for (int s = 0; s < slots; ++s) {
        p[s] /= sum;
        for (int d = 0; d < DIM; ++d) out[d] += p[s] * values[s * DIM + d];
      }
      /* (`out` would go on to the output projection.) */
    }
    if (squeezekv_cache_wants_attention(cache, layer) &&
        squeezekv_cache_add_attention(cache, layer, h, probs, n) != SQUEEZEKV_STATUS_OK)
      return 0;
  }
  return 1;
}

int main(void) {
  /* Every parameter by name (`squeezekv methods` lists them); each value is range-checked at once. */
  squeezekv_cache_params* params = squeezekv_cache_params_new();
  if (!params || squeezekv_cache_params_set(params, "method", "squeeze") != SQUEEZEKV_STATUS_OK ||
      squeezekv_cache_params_set_int(params, "head_dim", DIM) != SQUEEZEKV_STATUS_OK ||
      squeezekv_cache_params_set_int(params, "budget", BUDGET) != SQUEEZEKV_STATUS_OK ||
      squeezekv_cache_params_set(params, "score", "attention") != SQUEEZEKV_STATUS_OK) {
    fprintf(stderr, "squeezekv: %s\n", squeezekv_last_error());
    return 1;
  }
  squeezekv_cache* cache = squeezekv_cache_init(params, LAYERS, HEADS, 1);
  squeezekv_cache_params_free(params);
  if (!cache) {
    fprintf(stderr, "squeezekv: %s\n", squeezekv_last_error());
    return 1;
  }
  srand(42);
  for (int pos = 0; pos < TOKENS;) {
    const int n = pos == 0 ? PROMPT : 1;
    for (int l = 0; l < LAYERS; ++l) {
      const float lean = (float)l / (float)(LAYERS - 1); /* deeper layers: more concentrated keys */
      for (int i = 0; i < HEADS * n * DIM; ++i) {
        q[i] = noise();
        k[i] = (1.0f - lean) * noise() + (i % DIM == 0 ? 3.0f * lean : 0.0f);
        v[i] = noise();
      }
      if (squeezekv_cache_begin_update(cache, l, k, v, n) != SQUEEZEKV_STATUS_OK || !attend(cache, l, n, pos) ||
          squeezekv_cache_end_update(cache, l) != SQUEEZEKV_STATUS_OK) {
        fprintf(stderr, "squeezekv: %s\n", squeezekv_last_error());
        squeezekv_cache_free(cache);
        return 1;
      }
    }
    pos += n;
  }

  int32_t budgets[LAYERS], total = 0;
  squeezekv_cache_budgets(cache, budgets, LAYERS);
  for (int l = 0; l < LAYERS; ++l) {
    squeezekv_layer_stats s;
    squeezekv_cache_layer_stats(cache, l, &s);
    printf("layer %d: concentration %.3f, budget %d, kept %d of %lld tokens\n", l, s.concentration, s.layer_budget,
           s.tokens_kept, (long long)s.tokens_seen);
    total += budgets[l];
  }
  printf("KV resident %llu bytes, a full cache %llu bytes (%.2fx)\n",
         (unsigned long long)squeezekv_cache_kept_bytes(cache), (unsigned long long)squeezekv_cache_full_bytes(cache),
         squeezekv_cache_compression_ratio(cache));
  squeezekv_cache_free(cache);
  /* The schedule conserves the total and gives the broad first layer more than the last. */
  return total == LAYERS * BUDGET && budgets[0] > budgets[LAYERS - 1] ? 0 : 1;
}
