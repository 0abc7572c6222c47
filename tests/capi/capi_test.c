/* Tests of the C API, written in C11: defaults, status codes and messages, the allocators, a
 * whole-model update loop with its accounting, the attention-fed path, and the engine on
 * ../shared/models/stories260K.gguf. Usage: capi_test CASE (run from the repository root). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "squeezekv/c/squeezekv.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static const char* kModel = "../shared/models/stories260K.gguf";

/* A deterministic generator (xorshift), uniform in [-1, 1). */
static uint64_t rng_state = 88172645463325252ull;
static float next_float(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Keys of layer l of L: noise mixed with one shared direction by l / (L - 1), so that deeper
 * layers are more concentrated (the reference library's mock model). */
static void fill_keys(float* keys, int n_rows, int dim, int layer, int n_layers) {
  const float mix = n_layers > 1 ? (float)layer / (float)(n_layers - 1) : 0.0f;
  for (int r = 0; r < n_rows; ++r) {
    for (int d = 0; d < dim; ++d) {
      const float shared = d == 0 ? 1.0f : 0.0f;
      keys[r * dim + d] = (1.0f - mix) * next_float() + mix * 4.0f * shared;
    }
  }
}

static char captured[512];
static int captured_count = 0;
static void capture_log(squeezekv_log_level level, const char* text, void* user_data) {
  (void)user_data;
  if (level == SQUEEZEKV_LOG_LEVEL_ERROR) {
    snprintf(captured, sizeof captured, "%s", text);
    ++captured_count;
  }
}

static void test_defaults_and_status(void) {
  squeezekv_cache_params* p = squeezekv_cache_params_new();
  char text[64];
  CHECK(squeezekv_cache_params_get(p, "method", text, sizeof text) == 7 && strcmp(text, "squeeze") == 0);
  CHECK(squeezekv_cache_params_get(p, "method", text, 4) == -8);
  CHECK(squeezekv_cache_params_get(p, "budget", text, sizeof text) > 0 && strcmp(text, "512") == 0);
  CHECK(squeezekv_cache_params_get(p, "strength", text, sizeof text) > 0 && strcmp(text, "1") == 0);
  CHECK(squeezekv_cache_params_get(p, "resolved_budget", text, sizeof text) > 0 && strcmp(text, "none") == 0);
  CHECK(squeezekv_cache_params_get(p, "kv_type", text, sizeof text) > 0 && strcmp(text, "f16") == 0);
  CHECK(squeezekv_cache_params_validate(p) == SQUEEZEKV_STATUS_OK);

  squeezekv_log_set(capture_log, NULL);
  CHECK(squeezekv_cache_params_set_int(p, "budget", 3) == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_validate(p) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "budget = 3") != NULL);
  CHECK(captured_count == 1 && strcmp(captured, squeezekv_last_error()) == 0);
  CHECK(squeezekv_cache_params_set(p, "budget", "512") == SQUEEZEKV_STATUS_OK);
  /* Issue 64.11: an unknown component id is refused at once (it was accepted until validate). */
  CHECK(squeezekv_cache_params_set(p, "method", "nope") == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "method = nope: unknown method id") != NULL);
  CHECK(squeezekv_cache_params_set(p, "method", "bogus") == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(squeezekv_cache_params_set(p, "policy", "bogus") == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "policy = bogus") != NULL);
  CHECK(squeezekv_cache_params_set(p, "allocator", "bogus") == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "allocator = bogus") != NULL);
  CHECK(squeezekv_cache_params_validate(p) == SQUEEZEKV_STATUS_OK); /* unchanged by the refusals */
  CHECK(squeezekv_cache_params_set(p, "method", "squeeze") == SQUEEZEKV_STATUS_OK);
  /* A value out of range is refused at once, naming the parameter, and changes nothing. */
  CHECK(squeezekv_cache_params_set(p, "score", "7") == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "score = 7") != NULL);
  CHECK(squeezekv_cache_params_set_double(p, "strength", 1.5) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "strength = 1.5") != NULL);
  CHECK(squeezekv_cache_params_set(p, "chunk_size", "eight") == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "chunk_size") != NULL);
  CHECK(squeezekv_cache_params_set(p, "nonsense", "1") == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "nonsense") != NULL);
  CHECK(squeezekv_cache_params_get(p, "nonsense", text, sizeof text) == INT32_MIN);
  CHECK(squeezekv_cache_params_get(p, "strength", text, sizeof text) > 0 && strcmp(text, "1") == 0);
  CHECK(squeezekv_cache_params_validate(p) == SQUEEZEKV_STATUS_OK);
  /* The storage axis by name: formats for keys and values together or apart. */
  CHECK(squeezekv_cache_params_set(p, "kv_type", "q8_0") == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set(p, "v_type", "q4_0") == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_get(p, "k_type", text, sizeof text) > 0 && strcmp(text, "auto") == 0);
  CHECK(squeezekv_cache_params_get(p, "v_type", text, sizeof text) > 0 && strcmp(text, "q4_0") == 0);
  CHECK(squeezekv_cache_params_validate(p) == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set(p, "kv_type", "q3_0") == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "kv_type = q3_0") != NULL);
  CHECK(squeezekv_cache_params_set_int(p, "head_dim", 80) == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_validate(p) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "multiple of 32") != NULL);
  CHECK(squeezekv_cache_params_set_int(p, "head_dim", 128) == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set(p, "kv_type", "f16") == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set(p, "v_type", "auto") == SQUEEZEKV_STATUS_OK);
  squeezekv_log_set(NULL, NULL);
  squeezekv_cache_params_free(p);

  CHECK(strcmp(squeezekv_status_string(SQUEEZEKV_STATUS_OK), "ok") == 0);
  CHECK(strcmp(squeezekv_status_string(SQUEEZEKV_STATUS_FORMAT_ERROR), "format error") == 0);
  CHECK(strlen(squeezekv_version()) >= 5);
  int found = 0;
  for (int32_t i = 0; i < squeezekv_method_count(); ++i) found += strcmp(squeezekv_method_id(i), "squeeze") == 0;
  CHECK(found == 1);
  CHECK(squeezekv_method_id(squeezekv_method_count()) == NULL);
  found = 0;
  for (int32_t i = 0; i < squeezekv_param_count(); ++i) {
    found += strcmp(squeezekv_param_name(i), "chunk_size") == 0 && strcmp(squeezekv_param_default(i), "8") == 0;
    CHECK(squeezekv_param_help(i) != NULL);
  }
  CHECK(found == 1);
  CHECK(squeezekv_param_name(squeezekv_param_count()) == NULL);
}

static void test_allocators(void) {
  const double conc[3] = {0.1, 0.5, 0.9};
  int32_t budgets[12];
  CHECK(squeezekv_squeeze_budgets(conc, 3, 100, 4, 1.0, budgets) == SQUEEZEKV_STATUS_OK);
  CHECK(budgets[0] == 180 && budgets[1] == 100 && budgets[2] == 20);
  CHECK(squeezekv_squeeze_budgets(conc, 3, 100, 4, 1.5, budgets) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "strength") != NULL);

  const int32_t pyramid[12] = {1019, 927, 835, 742, 650, 558, 466, 374, 282, 189, 97, 5};
  CHECK(squeezekv_pyramid_budgets(12, 512, 4, 2.0, budgets) == SQUEEZEKV_STATUS_OK);
  CHECK(memcmp(budgets, pyramid, sizeof pyramid) == 0);
  /* Issue 64: averages beyond the command line's 2^30 - 1 gave negative budgets. */
  CHECK(squeezekv_squeeze_budgets(conc, 3, 2147483647, 4, 1.0, budgets) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "avg_budget = 2147483647") != NULL);
  CHECK(squeezekv_squeeze_budgets(conc, 3, 1200000000, 4, 1.0, budgets) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(squeezekv_pyramid_budgets(12, 2147483647, 4, 2.0, budgets) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "avg_budget = 2147483647") != NULL);
  CHECK(squeezekv_pyramid_budgets(12, 1200000000, 4, 2.0, budgets) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);

  float same[4 * 8], orth[2 * 8];
  for (int i = 0; i < 4 * 8; ++i) same[i] = (float)(i % 8 + 1);
  memset(orth, 0, sizeof orth);
  orth[0] = 1.0f;
  orth[8 + 1] = 2.0f;
  double score = -1.0;
  CHECK(squeezekv_concentration_score(same, 4, 8, &score) == SQUEEZEKV_STATUS_OK && fabs(score - 1.0) < 1e-6);
  CHECK(squeezekv_concentration_score(orth, 2, 8, &score) == SQUEEZEKV_STATUS_OK && fabs(score) < 1e-6);
}

/* The reference library's usage on a 4-layer mock model: prefill 96 tokens into every layer, decode 8; the
 * schedule favours the broad first layer, sums to L * budget, and every layer keeps its budget. */
static void test_model_cache_loop(void) {
  enum { L = 4, H = 2, D = 16, PREFILL = 96, BUDGET = 24 };
  squeezekv_cache_params* p = squeezekv_cache_params_new();
  CHECK(squeezekv_cache_params_set_int(p, "head_dim", D) == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set_int(p, "budget", BUDGET) == SQUEEZEKV_STATUS_OK);
  squeezekv_cache* cache = squeezekv_cache_init(p, L, H, 1);
  squeezekv_cache_params_free(p);
  CHECK(cache != NULL);
  if (!cache) return;
  CHECK(squeezekv_cache_n_layers(cache) == L && squeezekv_cache_n_heads(cache) == H);
  CHECK(squeezekv_cache_head_dim(cache) == D);

  float* keys = malloc(sizeof(float) * H * PREFILL * D);
  float* values = malloc(sizeof(float) * H * PREFILL * D);
  for (int l = 0; l < L; ++l) {
    fill_keys(keys, H * PREFILL, D, l, L);
    for (int i = 0; i < H * PREFILL * D; ++i) values[i] = next_float();
    CHECK(squeezekv_cache_update(cache, l, keys, values, PREFILL) == SQUEEZEKV_STATUS_OK);
  }
  float last_key[D]; /* head 1's key of layer 0's newest token */
  for (int step = 0; step < 8; ++step) {
    for (int l = 0; l < L; ++l) {
      fill_keys(keys, H, D, l, L);
      if (l == 0) memcpy(last_key, keys + D, sizeof last_key);
      CHECK(squeezekv_cache_update(cache, l, keys, values, 1) == SQUEEZEKV_STATUS_OK);
    }
  }

  int32_t budgets[L];
  CHECK(squeezekv_cache_budgets(cache, budgets, 2) == -L);
  CHECK(squeezekv_cache_budgets(cache, budgets, L) == L);
  int32_t total = 0;
  uint64_t kept = 0, full = 0;
  for (int l = 0; l < L; ++l) {
    squeezekv_layer_stats s;
    CHECK(squeezekv_cache_layer_stats(cache, l, &s) == SQUEEZEKV_STATUS_OK);
    CHECK(s.budget_final && s.layer_budget == budgets[l]);
    CHECK(s.tokens_seen == PREFILL + 8 && s.tokens_kept == budgets[l]);
    CHECK(s.full_bytes == (uint64_t)(2 * H * (PREFILL + 8) * D * 2)); /* K and V, fp16 */
    CHECK(s.kept_bytes >= (uint64_t)(2 * H * budgets[l] * D * 2));
    CHECK(fabs(s.compression_ratio - (double)s.full_bytes / (double)s.kept_bytes) < 1e-9);
    total += budgets[l];
    kept += s.kept_bytes;
    full += s.full_bytes;
    if (l > 0) {
      squeezekv_layer_stats prev;
      squeezekv_cache_layer_stats(cache, l - 1, &prev);
      CHECK(prev.concentration < s.concentration); /* deeper layers are more concentrated */
    }
  }
  CHECK(total == L * BUDGET);
  CHECK(budgets[0] > budgets[L - 1]);
  CHECK(squeezekv_cache_kept_bytes(cache) == kept && squeezekv_cache_full_bytes(cache) == full);

  /* Rows in position order, sinks first, the newest token last. */
  const int32_t n = squeezekv_cache_fetch(cache, 0, 1, NULL, NULL, NULL, 0);
  CHECK(n == -budgets[0]);
  float* rows = malloc(sizeof(float) * (size_t)budgets[0] * D);
  int64_t* positions = malloc(sizeof(int64_t) * (size_t)budgets[0]);
  CHECK(squeezekv_cache_fetch(cache, 0, 1, rows, NULL, positions, budgets[0]) == budgets[0]);
  for (int i = 0; i < 4; ++i) CHECK(positions[i] == i);
  for (int i = 1; i < budgets[0]; ++i) CHECK(positions[i] > positions[i - 1]);
  CHECK(positions[budgets[0] - 1] == PREFILL + 7);
  for (int d = 0; d < D; ++d) CHECK(fabs(rows[(budgets[0] - 1) * D + d] - last_key[d]) < 1e-2); /* fp16 copy */

  squeezekv_cache_reset(cache);
  squeezekv_layer_stats s;
  squeezekv_cache_layer_stats(cache, 0, &s);
  CHECK(s.tokens_seen == 0 && s.tokens_kept == 0);
  free(positions);
  free(rows);
  free(values);
  free(keys);
  squeezekv_cache_free(cache);
}

/* Sliding layers beside global ones: each holds its window, the schedule covers the global layers. */
static void test_sliding_layers(void) {
  enum { L = 6, H = 2, D = 16, PREFILL = 96, BUDGET = 24, W = 10 };
  const int32_t windows[L] = {W, 0, W, 0, W, 0};
  squeezekv_cache_params* p = squeezekv_cache_params_new();
  CHECK(squeezekv_cache_params_set_int(p, "head_dim", D) == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set_int(p, "budget", BUDGET) == SQUEEZEKV_STATUS_OK);
  const int32_t bad[L] = {W, 0, -1, 0, W, 0};
  CHECK(squeezekv_cache_init_sliding(p, L, H, 1, bad) == NULL);
  CHECK(strstr(squeezekv_last_error(), "sliding_windows[2] = -1") != NULL);
  squeezekv_cache* cache = squeezekv_cache_init_sliding(p, L, H, 1, windows);
  squeezekv_cache_params_free(p);
  CHECK(cache != NULL);
  if (!cache) return;
  float* keys = malloc(sizeof(float) * H * PREFILL * D);
  float* values = malloc(sizeof(float) * H * PREFILL * D);
  for (int l = 0; l < L; ++l) {
    fill_keys(keys, H * PREFILL, D, l, L);
    for (int i = 0; i < H * PREFILL * D; ++i) values[i] = next_float();
    CHECK(squeezekv_cache_update(cache, l, keys, values, PREFILL) == SQUEEZEKV_STATUS_OK);
  }
  for (int step = 0; step < 8; ++step) {
    for (int l = 0; l < L; ++l) CHECK(squeezekv_cache_update(cache, l, keys, values, 1) == SQUEEZEKV_STATUS_OK);
  }
  int32_t total = 0;
  uint64_t sliding = 0, evicting = 0;
  for (int l = 0; l < L; ++l) {
    squeezekv_layer_stats s;
    CHECK(squeezekv_cache_layer_stats(cache, l, &s) == SQUEEZEKV_STATUS_OK);
    CHECK(s.sliding_window == windows[l]);
    if (windows[l] > 0) {
      CHECK(s.layer_budget == W && s.tokens_kept == W && s.budget_final);
      CHECK(s.full_bytes == (uint64_t)(2 * H * W * D * 2)); /* the window is what an unevicted layer holds */
      int64_t positions[W];
      CHECK(squeezekv_cache_fetch(cache, l, 1, NULL, NULL, positions, W) == W);
      for (int i = 0; i < W; ++i) CHECK(positions[i] == PREFILL + 8 - W + i);
      sliding += s.kept_bytes;
    } else {
      total += s.layer_budget;
      evicting += s.kept_bytes;
    }
  }
  CHECK(total == 3 * BUDGET); /* the budget is the average over the global layers */
  CHECK(squeezekv_cache_sliding_kept_bytes(cache) == sliding);
  CHECK(squeezekv_cache_evicting_kept_bytes(cache) == evicting);
  CHECK(squeezekv_cache_kept_bytes(cache) == sliding + evicting);
  CHECK(squeezekv_cache_sliding_kept_bytes(NULL) == 0 && squeezekv_cache_evicting_kept_bytes(NULL) == 0);
  free(values);
  free(keys);
  squeezekv_cache_free(cache);
}

/* A lone h2o layer scored by attention the caller computes over the slots (the engine protocol). */
static void test_lone_layer_attention(void) {
  enum { H = 1, D = 8, BUDGET = 10, MAX_SLOTS = 64 };
  squeezekv_cache_params* p = squeezekv_cache_params_new();
  CHECK(squeezekv_cache_params_set(p, "method", "h2o") == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set_int(p, "head_dim", D) == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set_int(p, "budget", BUDGET) == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set(p, "score", "attention") == SQUEEZEKV_STATUS_OK);
  squeezekv_cache* cache = squeezekv_cache_init_layer(p, H, 1);
  squeezekv_cache_params_free(p);
  CHECK(cache != NULL);
  if (!cache) return;
  CHECK(squeezekv_cache_wants_attention(cache, 0));
  float key[D], value[D], slots[MAX_SLOTS * D], probs[MAX_SLOTS];
  int64_t positions[MAX_SLOTS];
  for (int t = 0; t < 40; ++t) {
    for (int d = 0; d < D; ++d) {
      key[d] = next_float();
      value[d] = next_float();
    }
    CHECK(squeezekv_cache_begin_update(cache, 0, key, value, 1) == SQUEEZEKV_STATUS_OK);
    const int32_t n = squeezekv_cache_read_slots(cache, 0, 0, slots, NULL, positions, MAX_SLOTS);
    CHECK(n > 0 && n <= BUDGET + 1);
    double sum = 0.0;
    for (int s = 0; s < n; ++s) {
      double dot = 0.0;
      for (int d = 0; d < D; ++d) dot += (double)slots[s * D + d] * key[d];
      probs[s] = positions[s] < 0 ? 0.0f : (float)exp(dot / sqrt((double)D));
      sum += probs[s];
    }
    for (int s = 0; s < n; ++s) probs[s] = (float)(probs[s] / sum);
    if (t == 5) { /* NaN or negative attention is refused, naming it; the good one then goes in */
      const float good = probs[0];
      probs[0] = NAN;
      CHECK(squeezekv_cache_add_attention(cache, 0, 0, probs, 1) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
      CHECK(strstr(squeezekv_last_error(), "probs[0] = nan") != NULL);
      probs[0] = -1.0f;
      CHECK(squeezekv_cache_add_attention(cache, 0, 0, probs, 1) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
      probs[0] = good;
    }
    CHECK(squeezekv_cache_add_attention(cache, 0, 0, probs, 1) == SQUEEZEKV_STATUS_OK);
    CHECK(squeezekv_cache_end_update(cache, 0) == SQUEEZEKV_STATUS_OK);
  }
  squeezekv_layer_stats s;
  CHECK(squeezekv_cache_layer_stats(cache, 0, &s) == SQUEEZEKV_STATUS_OK);
  CHECK(s.layer_budget == BUDGET && s.tokens_kept == BUDGET && s.tokens_seen == 40);
  CHECK(squeezekv_cache_end_update(cache, 0) == SQUEEZEKV_STATUS_INVALID_ARGUMENT); /* none open */
  squeezekv_cache_free(cache);
}

static void test_errors(void) {
  squeezekv_log_set(capture_log, NULL);
  squeezekv_cache_params* p = squeezekv_cache_params_new();
  CHECK(squeezekv_cache_params_set(p, "head_dim", "4") == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set(p, "budget", "16") == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_init(p, 0, 1, 1) == NULL);
  CHECK(strstr(squeezekv_last_error(), "n_layers") != NULL);
  CHECK(squeezekv_cache_init(NULL, 2, 1, 1) == NULL);
  CHECK(strstr(squeezekv_last_error(), "params") != NULL);
  squeezekv_cache* cache = squeezekv_cache_init(p, 2, 1, 1);
  squeezekv_cache_params_free(p);
  float rows[4 * 4] = {0};
  CHECK(squeezekv_cache_update(cache, 2, rows, rows, 1) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(squeezekv_last_error(), "layer = 2") != NULL);
  CHECK(squeezekv_cache_update(cache, 0, rows, rows, 0) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  rows[1] = NAN;
  CHECK(squeezekv_cache_update(cache, 0, rows, rows, 1) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(squeezekv_cache_fetch(cache, 0, 5, NULL, NULL, NULL, 0) == INT32_MIN);
  CHECK(squeezekv_cache_update(NULL, 0, rows, rows, 1) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  CHECK(squeezekv_cache_n_layers(NULL) == 0);
  squeezekv_cache_free(cache);
  squeezekv_cache_free(NULL);
  squeezekv_log_set(NULL, NULL);
}

static void count_token(int32_t token, void* user_data) {
  (void)token;
  ++*(int*)user_data;
}

static void test_engine(void) {
  squeezekv_log_set(capture_log, NULL);
  CHECK(squeezekv_model_load("../shared/models/no-such-model.gguf") == NULL);
  CHECK(strstr(squeezekv_last_error(), "no-such-model.gguf") != NULL);
  squeezekv_log_set(NULL, NULL);

  squeezekv_model* model = squeezekv_model_load(kModel);
  CHECK(model != NULL); /* a missing model is a failure, never a skip */
  if (!model) return;
  const squeezekv_model_info info = squeezekv_model_get_info(model);
  CHECK(info.n_layers == 5 && info.n_kv_heads == 4 && info.head_dim == 8 && info.vocab == 512);

  int32_t tokens[256];
  CHECK(squeezekv_tokenize(model, "Once upon a time", -1, tokens, 2, true) == -5);
  CHECK(squeezekv_tokenize(model, "Once upon a time", -1, tokens, 256, true) == 5);
  CHECK(tokens[0] == 1 && tokens[1] == 403 && tokens[2] == 407 && tokens[3] == 261 && tokens[4] == 378);

  squeezekv_cache_params* full = squeezekv_cache_params_new();
  CHECK(squeezekv_cache_params_set(full, "method", "full") == SQUEEZEKV_STATUS_OK);
  squeezekv_cache* cache = squeezekv_cache_init_for_model(model, full);
  CHECK(cache != NULL && squeezekv_cache_n_layers(cache) == 5);
  squeezekv_generate_params g = squeezekv_generate_default_params();
  g.n_predict = 8;
  g.temperature = 0.0f;
  g.n_threads = 1;
  int streamed = 0;
  g.on_token = count_token;
  g.user_data = &streamed;
  CHECK(squeezekv_generate(model, cache, "Once upon a time", &g, tokens, 4) == -8);
  CHECK(squeezekv_generate(model, cache, "Once upon a time", &g, tokens, 256) == 8);
  const int32_t golden[8] = {432, 383, 286, 261, 376, 298, 315, 421};
  CHECK(memcmp(tokens, golden, sizeof golden) == 0);
  CHECK(streamed == 8);
  char text[128];
  CHECK(squeezekv_detokenize(model, tokens, 8, text, 4) < -4);
  CHECK(squeezekv_detokenize(model, tokens, 8, text, sizeof text) == (int32_t)strlen(", there was a little girl"));
  CHECK(strcmp(text, ", there was a little girl") == 0);
  squeezekv_layer_stats s;
  CHECK(squeezekv_cache_layer_stats(cache, 0, &s) == SQUEEZEKV_STATUS_OK && s.tokens_seen == 5 + 7);
  squeezekv_cache_free(cache);

  /* Issue 64.11: the library's messages name its parameters, not command-line flags. */
  cache = squeezekv_cache_init_for_model(model, full);
  static int32_t many[4096];
  g.n_predict = 3000;
  CHECK(squeezekv_generate(model, cache, "Once upon a time", &g, many, 4096) == INT32_MIN);
  CHECK(strstr(squeezekv_last_error(), "prompt plus n_predict = 3000 exceeds the context") != NULL);
  CHECK(strstr(squeezekv_last_error(), "raise n_ctx") != NULL);
  CHECK(strstr(squeezekv_last_error(), "--") == NULL && strstr(squeezekv_last_error(), "-c") == NULL);
  g.n_predict = 8;
  g.n_ctx = -1;
  CHECK(squeezekv_generate(model, cache, "Once upon a time", &g, tokens, 256) == INT32_MIN);
  CHECK(strstr(squeezekv_last_error(), "n_ctx = -1") != NULL);
  g.n_ctx = 0;
  squeezekv_cache_free(cache);
  /* Issue 64.5: KIVI that would compress nothing (residual 128 of budget 64) is refused by the
   * library, so C refuses it as the command line does. */
  squeezekv_cache_params* kivi = squeezekv_cache_params_new();
  CHECK(squeezekv_cache_params_set(kivi, "method", "h2o") == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set(kivi, "budget", "64") == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set(kivi, "kv_type", "kivi2") == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_init_for_model(model, kivi) == NULL);
  CHECK(strstr(squeezekv_last_error(), "kivi_residual = 128: more than half of budget = 64") != NULL);
  CHECK(squeezekv_cache_params_validate(kivi) == SQUEEZEKV_STATUS_INVALID_ARGUMENT);
  squeezekv_cache_params_free(kivi);

  /* Perplexity of a passage under the full cache and a small squeeze cache, one shared pass. */
  const char* passage =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
      "One day, she saw a big tree with a red ball in it. She wanted the ball very much. Lily asked "
      "her mom for help. Her mom smiled and said, \"Let's get it together.\" They got the ball and "
      "played all day. Lily was very happy. The end. Once upon a time, there was a boy named Tom. "
      "He had a dog called Max. Max liked to run and jump. One day, Max ran into the park and found "
      "a stick. Tom threw the stick and Max brought it back. They played until the sun went down.";
  const int32_t n = squeezekv_tokenize(model, passage, -1, tokens, 256, true);
  CHECK(n >= 128);
  squeezekv_cache_params* small = squeezekv_cache_params_new();
  CHECK(squeezekv_cache_params_set_int(small, "budget", 16) == SQUEEZEKV_STATUS_OK);
  const squeezekv_cache_params* configs[2] = {full, small};
  squeezekv_perplexity_params pp = squeezekv_perplexity_default_params();
  pp.n_ctx = 64;
  pp.max_chunks = 2;
  pp.n_threads = 1;
  squeezekv_perplexity_result results[2];
  CHECK(squeezekv_perplexity(model, tokens, n, configs, 2, &pp, results) == SQUEEZEKV_STATUS_OK);
  CHECK(results[0].chunks == 2 && results[0].scored == 2 * 31);
  CHECK(results[0].perplexity > 1.0 && results[0].perplexity < 100.0);
  CHECK(results[0].top1_agreement == 1.0 && fabs(results[0].mean_kl) < 1e-9);
  CHECK(results[1].peak_kept_bytes < results[1].peak_full_bytes);
  CHECK(results[1].mean_kl > 0.0);
  squeezekv_cache_params_free(full);
  squeezekv_cache_params_free(small);
  squeezekv_model_free(model);
}

/* Every pointer argument of every function, NULL in turn: a clean error naming that argument,
 * never a crash (tokenize and generate wrote through a NULL output array; perplexity and
 * detokenize named another argument). */
static int names(const char* arg) { return strstr(squeezekv_last_error(), arg) != NULL; }

static void test_null_arguments(void) {
  squeezekv_log_set(capture_log, NULL);
  squeezekv_model* model = squeezekv_model_load(kModel);
  CHECK(model != NULL);
  if (!model) return;
  int32_t tokens[256];
  char text[64];
  CHECK(squeezekv_tokenize(model, "hello world", -1, NULL, 8, true) == INT32_MIN && names("tokens = NULL"));
  CHECK(squeezekv_tokenize(model, "hello world", -1, NULL, 0, true) < 0); /* a size query */
  CHECK(squeezekv_tokenize(NULL, "hello world", -1, tokens, 8, true) == INT32_MIN && names("model = NULL"));
  CHECK(squeezekv_tokenize(model, NULL, -1, tokens, 8, true) == INT32_MIN && names("text = NULL"));
  const int32_t ids[3] = {1, 403, 407};
  CHECK(squeezekv_detokenize(model, NULL, 3, text, sizeof text) == INT32_MIN && names("tokens = NULL"));
  CHECK(squeezekv_detokenize(model, ids, -1, text, sizeof text) == INT32_MIN && names("n_tokens = -1"));
  CHECK(squeezekv_detokenize(model, ids, 3, NULL, 64) == INT32_MIN && names("buf = NULL"));
  CHECK(squeezekv_detokenize(model, ids, 3, NULL, 0) < 0); /* a size query */
  const int32_t bad_ids[2] = {1, 99999};
  CHECK(squeezekv_detokenize(model, bad_ids, 2, text, sizeof text) == INT32_MIN);

  squeezekv_cache_params* p = squeezekv_cache_params_new();
  squeezekv_cache* cache = squeezekv_cache_init_for_model(model, p);
  CHECK(cache != NULL);
  squeezekv_generate_params g = squeezekv_generate_default_params();
  g.n_predict = 4;
  g.n_threads = 1;
  CHECK(squeezekv_generate(model, cache, "hi", &g, NULL, 8) == INT32_MIN && names("tokens = NULL"));
  CHECK(squeezekv_generate(model, cache, NULL, &g, tokens, 8) == INT32_MIN && names("prompt = NULL"));
  CHECK(squeezekv_generate(model, cache, "hi", NULL, tokens, 8) == INT32_MIN && names("params = NULL"));
  CHECK(squeezekv_generate(model, NULL, "hi", &g, tokens, 8) == INT32_MIN && names("cache = NULL"));
  CHECK(squeezekv_generate(NULL, cache, "hi", &g, tokens, 8) == INT32_MIN && names("model = NULL"));
  CHECK(squeezekv_cache_init_for_model(NULL, p) == NULL && names("model = NULL"));
  CHECK(squeezekv_cache_init_for_model(model, NULL) == NULL && names("params = NULL"));

  const int32_t n = squeezekv_tokenize(model,
                                       "Once upon a time there was a little girl named Lily. She liked to play "
                                       "outside with her friends in the park every day.",
                                       -1, tokens, 256, true);
  const squeezekv_cache_params* configs[1] = {p};
  const squeezekv_cache_params* null_config[1] = {NULL};
  squeezekv_perplexity_params pp = squeezekv_perplexity_default_params();
  pp.n_ctx = 16;
  pp.n_threads = 1;
  squeezekv_perplexity_result r[1];
  CHECK(squeezekv_perplexity(model, tokens, n, NULL, 1, &pp, r) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("configs = NULL"));
  CHECK(squeezekv_perplexity(model, tokens, n, configs, 1, &pp, NULL) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("results = NULL"));
  CHECK(squeezekv_perplexity(model, NULL, n, configs, 1, &pp, r) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("tokens = NULL"));
  CHECK(squeezekv_perplexity(model, tokens, n, configs, 0, &pp, r) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("n_configs = 0"));
  CHECK(squeezekv_perplexity(model, tokens, n, null_config, 1, &pp, r) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("configs[0] = NULL"));
  CHECK(squeezekv_perplexity(model, tokens, n, configs, 1, NULL, r) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("params = NULL"));
  CHECK(squeezekv_perplexity(NULL, tokens, n, configs, 1, &pp, r) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("model = NULL"));
  int32_t out_of_vocab[32];
  for (int i = 0; i < 32; ++i) out_of_vocab[i] = i == 7 ? 99999 : 1;
  CHECK(squeezekv_perplexity(model, out_of_vocab, 32, configs, 1, &pp, r) != SQUEEZEKV_STATUS_OK);

  /* The cache half. */
  float rows[5 * 4 * 8] = {0};
  CHECK(squeezekv_cache_update(cache, 0, NULL, rows, 1) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("keys = NULL"));
  CHECK(squeezekv_cache_update(cache, 0, rows, NULL, 1) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("values = NULL"));
  CHECK(squeezekv_cache_begin_update(cache, 0, rows, NULL, 1) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("values = NULL"));
  CHECK(squeezekv_cache_begin_update(NULL, 0, rows, rows, 1) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("cache = NULL"));
  CHECK(squeezekv_cache_add_attention(NULL, 0, 0, rows, 1) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("cache"));
  CHECK(squeezekv_cache_end_update(NULL, 0) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("cache = NULL"));
  CHECK(squeezekv_cache_wants_attention(NULL, 0) == false && names("cache = NULL"));
  CHECK(squeezekv_cache_fetch(NULL, 0, 0, NULL, NULL, NULL, 0) == INT32_MIN && names("cache = NULL"));
  CHECK(squeezekv_cache_read_slots(NULL, 0, 0, NULL, NULL, NULL, 0) == INT32_MIN && names("cache = NULL"));
  CHECK(squeezekv_cache_budgets(cache, NULL, 8) == INT32_MIN && names("budgets = NULL"));
  CHECK(squeezekv_cache_budgets(NULL, tokens, 8) == INT32_MIN && names("cache = NULL"));
  CHECK(squeezekv_cache_layer_stats(cache, 0, NULL) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("stats = NULL"));
  CHECK(squeezekv_cache_layer_stats(NULL, 0, NULL) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("cache = NULL"));
  CHECK(squeezekv_cache_n_heads(NULL) == INT32_MIN && names("cache = NULL"));
  CHECK(squeezekv_cache_head_dim(NULL) == INT32_MIN && names("cache = NULL"));
  squeezekv_cache_begin_prompt(NULL);
  CHECK(names("cache = NULL"));
  squeezekv_cache_end_prompt(NULL);
  squeezekv_cache_reset(NULL);
  CHECK(names("cache = NULL"));
  CHECK(squeezekv_cache_kept_bytes(NULL) == 0 && squeezekv_cache_full_bytes(NULL) == 0);
  CHECK(squeezekv_cache_compression_ratio(NULL) == 1.0);
  CHECK(squeezekv_cache_init(NULL, 2, 1, 1) == NULL && names("params = NULL"));
  CHECK(squeezekv_cache_init_layer(NULL, 1, 1) == NULL && names("params = NULL"));

  /* Parameters. */
  CHECK(squeezekv_cache_params_set(NULL, "budget", "8") == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("params = NULL"));
  CHECK(squeezekv_cache_params_set(p, NULL, "8") == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("name = NULL"));
  CHECK(squeezekv_cache_params_set(p, "budget", NULL) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("budget = NULL"));
  CHECK(squeezekv_cache_params_set_int(NULL, "budget", 8) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("params = NULL"));
  CHECK(squeezekv_cache_params_set_int(p, NULL, 8) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("name = NULL"));
  CHECK(squeezekv_cache_params_set_double(NULL, "decay", 0.5) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("params = NULL"));
  CHECK(squeezekv_cache_params_set_double(p, NULL, 0.5) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("name = NULL"));
  CHECK(squeezekv_cache_params_get(NULL, "budget", text, sizeof text) == INT32_MIN && names("params = NULL"));
  CHECK(squeezekv_cache_params_get(p, NULL, text, sizeof text) == INT32_MIN && names("name = NULL"));
  CHECK(squeezekv_cache_params_get(p, "budget", NULL, 0) < 0); /* a size query */
  CHECK(squeezekv_cache_params_validate(NULL) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("params = NULL"));
  CHECK(squeezekv_cache_params_copy(NULL) == NULL && names("params = NULL"));
  CHECK(squeezekv_param_name(-1) == NULL && squeezekv_method_id(100000) == NULL);

  /* Allocators. */
  double conc[2] = {0.1, 0.9};
  int32_t budgets[2];
  double score = 0;
  CHECK(squeezekv_squeeze_budgets(NULL, 2, 16, 1, 1.0, budgets) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("concentrations = NULL"));
  CHECK(squeezekv_squeeze_budgets(conc, 2, 16, 1, 1.0, NULL) == SQUEEZEKV_STATUS_INVALID_ARGUMENT &&
        names("budgets = NULL"));
  CHECK(squeezekv_pyramid_budgets(2, 16, 1, 2.0, NULL) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("budgets = NULL"));
  CHECK(squeezekv_concentration_score(NULL, 2, 8, &score) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("keys = NULL"));
  CHECK(squeezekv_concentration_score(rows, 2, 8, NULL) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("score = NULL"));
  CHECK(squeezekv_model_load(NULL) == NULL && names("path = NULL"));
  const squeezekv_model_info none = squeezekv_model_get_info(NULL);
  CHECK(none.n_layers == 0);

  squeezekv_cache_free(cache);
  squeezekv_cache_params_free(p);
  squeezekv_model_free(model);
  squeezekv_log_set(NULL, NULL);
}

/* A cache saved after one generate call and loaded continues exactly as the cache that was never
 * saved; bad files and paths are an error status naming the file. */
static void generate_greedy(squeezekv_model* model, squeezekv_cache* cache, const char* prompt, bool continue_cache,
                            int32_t* out) {
  squeezekv_generate_params g = squeezekv_generate_default_params();
  g.n_predict = 8;
  g.temperature = 0.0f;
  g.n_threads = 1;
  g.continue_cache = continue_cache;
  CHECK(squeezekv_generate(model, cache, prompt, &g, out, 8) == 8);
}

static void test_cache_file(void) {
  squeezekv_log_set(capture_log, NULL);
  squeezekv_model* model = squeezekv_model_load(kModel);
  CHECK(model != NULL);
  if (!model) return;
  squeezekv_cache_params* params = squeezekv_cache_params_new();
  CHECK(squeezekv_cache_params_set(params, "method", "squeeze") == SQUEEZEKV_STATUS_OK);
  CHECK(squeezekv_cache_params_set_int(params, "budget", 12) == SQUEEZEKV_STATUS_OK);
  const char* path = "/tmp/squeezekv_capi_test_cache.skv";
  int32_t first[8], kept[8], loaded_tokens[8], seen[64];

  squeezekv_cache* never_saved = squeezekv_cache_init_for_model(model, params);
  generate_greedy(model, never_saved, "Once upon a time", false, first);
  CHECK(squeezekv_cache_tokens(never_saved, seen, 2) == -(5 + 7));
  CHECK(squeezekv_cache_tokens(never_saved, seen, 64) == 5 + 7);
  CHECK(squeezekv_cache_save(model, never_saved, path) == SQUEEZEKV_STATUS_OK);
  generate_greedy(model, never_saved, " She", true, kept);

  squeezekv_cache* loaded = NULL;
  CHECK(squeezekv_cache_load(model, path, &loaded) == SQUEEZEKV_STATUS_OK && loaded != NULL);
  CHECK(squeezekv_cache_tokens(loaded, seen, 64) == 5 + 7);
  CHECK(squeezekv_cache_kept_bytes(loaded) > 0);
  generate_greedy(model, loaded, " She", true, loaded_tokens);
  CHECK(memcmp(kept, loaded_tokens, sizeof kept) == 0);

  squeezekv_cache* out = loaded;
  CHECK(squeezekv_cache_load(model, "/tmp/no-such-squeezekv-cache.skv", &out) == SQUEEZEKV_STATUS_FORMAT_ERROR);
  CHECK(out == NULL && names("no-such-squeezekv-cache.skv"));
  CHECK(squeezekv_cache_load(model, kModel, &out) == SQUEEZEKV_STATUS_FORMAT_ERROR && names("SQKVCACH"));
  CHECK(squeezekv_cache_save(model, loaded, "/dev/full") == SQUEEZEKV_STATUS_FORMAT_ERROR && names("/dev/full"));
  CHECK(squeezekv_cache_save(model, loaded, "/tmp/no/such/dir/x.skv") == SQUEEZEKV_STATUS_FORMAT_ERROR);
  CHECK(squeezekv_cache_save(model, loaded, NULL) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("path = NULL"));
  CHECK(squeezekv_cache_load(model, path, NULL) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("out = NULL"));
  CHECK(squeezekv_cache_load(NULL, path, &out) == SQUEEZEKV_STATUS_INVALID_ARGUMENT && names("model = NULL"));
  remove(path);
  squeezekv_cache_free(never_saved);
  squeezekv_cache_free(loaded);
  squeezekv_cache_params_free(params);
  squeezekv_model_free(model);
  squeezekv_log_set(NULL, NULL);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CASE\n", argv[0]);
    return 2;
  }
  const char* name = argv[1];
  if (strcmp(name, "defaults_and_status") == 0) test_defaults_and_status();
  else if (strcmp(name, "allocators") == 0) test_allocators();
  else if (strcmp(name, "model_cache_loop") == 0) test_model_cache_loop();
  else if (strcmp(name, "lone_layer_attention") == 0) test_lone_layer_attention();
  else if (strcmp(name, "sliding_layers") == 0) test_sliding_layers();
  else if (strcmp(name, "errors") == 0) test_errors();
  else if (strcmp(name, "engine") == 0) test_engine();
  else if (strcmp(name, "null_arguments") == 0) test_null_arguments();
  else if (strcmp(name, "cache_file") == 0) test_cache_file();
  else {
    fprintf(stderr, "unknown case %s\n", name);
    return 2;
  }
  if (failures) fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
  return failures ? 1 : 0;
}
