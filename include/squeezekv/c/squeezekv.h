/* squeezekv C API: KV-cache eviction (SqueezeAttention, H2O, PyramidKV, ...) and the GGUF Llama
 * engine, for FFI and C programs.
 *
 * Conventions (after llama.h):
 *  - Handles are opaque; every squeezekv_*_init / _load has a matching _free (NULL is accepted).
 *  - Parameter structs are filled by squeezekv_*_default_params() and then edited field by field,
 *    so new fields keep old callers working.
 *  - Functions that can fail return a squeezekv_status, or NULL for constructors. The reason is in
 *    squeezekv_last_error() (per thread, valid until the next failing call on that thread) and is
 *    also sent to the log callback. No C++ exception ever crosses this boundary.
 *  - A function that fills a caller's buffer returns the count written; when the buffer is too
 *    small it writes nothing and returns the count it needed, negated. INT32_MIN means an error.
 *  - Tensors are contiguous row-major f32. A layer's K/V block is [n_batch, n_kv_heads, n_tokens,
 *    head_dim]; "head" h below indexes n_batch * n_kv_heads heads, batch-major.
 *  - A cache handle may be used from one thread at a time; distinct handles are independent.
 */
#ifndef SQUEEZEKV_C_SQUEEZEKV_H
#define SQUEEZEKV_C_SQUEEZEKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SQUEEZEKV_API __attribute__((visibility("default")))
#else
#define SQUEEZEKV_API
#endif

/* ---- status, errors, logging ---- */

typedef enum squeezekv_status {
  SQUEEZEKV_STATUS_OK = 0,
  SQUEEZEKV_STATUS_INVALID_ARGUMENT = 1, /* a parameter, shape or value out of its domain; the
                                            message names it and its value */
  SQUEEZEKV_STATUS_FORMAT_ERROR = 2,     /* a file (GGUF model, text) missing or malformed */
  SQUEEZEKV_STATUS_OUT_OF_MEMORY = 3,    /* an allocation failed */
  SQUEEZEKV_STATUS_INTERNAL = 4,         /* anything else (a bug: please report the message) */
} squeezekv_status;

/* A short constant name for a status ("ok", "invalid argument", ...). */
SQUEEZEKV_API const char* squeezekv_status_string(squeezekv_status status);

/* The message of this thread's last failure ("" when none). */
SQUEEZEKV_API const char* squeezekv_last_error(void);

typedef enum squeezekv_log_level {
  SQUEEZEKV_LOG_LEVEL_ERROR = 2,
  SQUEEZEKV_LOG_LEVEL_WARN = 3,
  SQUEEZEKV_LOG_LEVEL_INFO = 4,
} squeezekv_log_level;

typedef void (*squeezekv_log_callback)(squeezekv_log_level level, const char* text, void* user_data);

/* Where messages go; NULL restores the default (errors to stderr). Not thread-safe: set it
 * before using the library from several threads. */
SQUEEZEKV_API void squeezekv_log_set(squeezekv_log_callback callback, void* user_data);

/* "MAJOR.MINOR.PATCH" of the library. */
SQUEEZEKV_API const char* squeezekv_version(void);

/* ---- cache configuration ---- */

/* A cache configuration: every parameter of the registry (the method id, the fields every cache has
 * and each policy's and allocator's own parameters), set by name. `squeezekv methods` and
 * squeezekv_param_*() list them with their defaults and ranges. */
typedef struct squeezekv_cache_params squeezekv_cache_params;

/* A configuration holding every default (method "squeeze"). NULL only when out of memory. */
SQUEEZEKV_API squeezekv_cache_params* squeezekv_cache_params_new(void);
SQUEEZEKV_API squeezekv_cache_params* squeezekv_cache_params_copy(const squeezekv_cache_params* params);
SQUEEZEKV_API void squeezekv_cache_params_free(squeezekv_cache_params* params);

/* Sets one parameter from text ("8", "0.98", "attention"; "none" unsets an optional one), or from a
 * number. The value is range-checked at once: SQUEEZEKV_STATUS_INVALID_ARGUMENT names the
 * parameter (an unknown name too) and leaves the configuration unchanged. */
SQUEEZEKV_API squeezekv_status squeezekv_cache_params_set(squeezekv_cache_params* params, const char* name,
                                                          const char* value);
SQUEEZEKV_API squeezekv_status squeezekv_cache_params_set_int(squeezekv_cache_params* params, const char* name,
                                                              int64_t value);
SQUEEZEKV_API squeezekv_status squeezekv_cache_params_set_double(squeezekv_cache_params* params, const char* name,
                                                                 double value);
/* The parameter's value as text into buf (NUL-terminated); returns its length without the NUL, the
 * negated length + 1 when `capacity` is too small, or INT32_MIN on an unknown name. */
SQUEEZEKV_API int32_t squeezekv_cache_params_get(const squeezekv_cache_params* params, const char* name, char* buf,
                                                 int32_t capacity);

/* Checks the parameters together (ranges and the rules between them) without building anything. */
SQUEEZEKV_API squeezekv_status squeezekv_cache_params_validate(const squeezekv_cache_params* params);

/* The registry's parameters, i in [0, squeezekv_param_count()): name, default as text (a method
 * may override a component parameter's default), one line of help; NULL when out of range. */
SQUEEZEKV_API int32_t squeezekv_param_count(void);
SQUEEZEKV_API const char* squeezekv_param_name(int32_t i);
SQUEEZEKV_API const char* squeezekv_param_default(int32_t i);
SQUEEZEKV_API const char* squeezekv_param_help(int32_t i);

/* Method ids known to the registry: i in [0, squeezekv_method_count()); NULL when out of range. */
SQUEEZEKV_API int32_t squeezekv_method_count(void);
SQUEEZEKV_API const char* squeezekv_method_id(int32_t i);

/* ---- the cache ---- */

typedef struct squeezekv_cache squeezekv_cache;

/* A whole model's caches with one shared coordinator (KVCacheBuilder::for_model): the reference library's
 * reallocation happens only here. NULL on bad parameters (see squeezekv_last_error). */
SQUEEZEKV_API squeezekv_cache* squeezekv_cache_init(const squeezekv_cache_params* params, int32_t n_layers,
                                                    int32_t n_kv_heads, int32_t n_batch);
/* The same for a model whose layers may slide (Gemma 2 and 3): sliding_windows[n_layers] holds 0
 * for a global layer (evicting, governed by the method) and W >= 1 for a layer that attends over
 * the newest W positions: that layer holds exactly those rows, no policy runs there and no
 * allocator schedules it (the budget is the average over the global layers, squeeze measures them
 * alone, pyramid tapers over them). NULL: every layer global, as squeezekv_cache_init. */
SQUEEZEKV_API squeezekv_cache* squeezekv_cache_init_sliding(const squeezekv_cache_params* params, int32_t n_layers,
                                                            int32_t n_kv_heads, int32_t n_batch,
                                                            const int32_t* sliding_windows);
/* One layer without a coordinator (KVCacheFactory::create): a uniform layer with `budget`, or
 * `resolved_budget` when set. Its only layer is 0. */
SQUEEZEKV_API squeezekv_cache* squeezekv_cache_init_layer(const squeezekv_cache_params* params, int32_t n_kv_heads,
                                                          int32_t n_batch);
SQUEEZEKV_API void squeezekv_cache_free(squeezekv_cache* cache);

SQUEEZEKV_API int32_t squeezekv_cache_n_layers(const squeezekv_cache* cache);
SQUEEZEKV_API int32_t squeezekv_cache_n_heads(const squeezekv_cache* cache); /* n_batch * n_kv_heads */
SQUEEZEKV_API int32_t squeezekv_cache_head_dim(const squeezekv_cache* cache);

/* Appends n_tokens rows per head to `layer` and evicts down to its budget (key-proxy scoring).
 * keys, values: [n_batch, n_kv_heads, n_tokens, head_dim]. */
SQUEEZEKV_API squeezekv_status squeezekv_cache_update(squeezekv_cache* cache, int32_t layer, const float* keys,
                                                      const float* values, int32_t n_tokens);

/* The same in three steps, for an engine that computes attention itself and feeds it back
 * (score = SQUEEZEKV_SCORE_ATTENTION): begin_update stores the rows, then per head read the slots
 * (squeezekv_cache_read_slots), attend, and pass the probabilities, then end_update evicts.
 * probs: [n_queries, n_slots] over the head's slots, summed over the query heads sharing the KV
 * head, zero for masked or free slots. */
SQUEEZEKV_API squeezekv_status squeezekv_cache_begin_update(squeezekv_cache* cache, int32_t layer, const float* keys,
                                                            const float* values, int32_t n_tokens);
SQUEEZEKV_API bool squeezekv_cache_wants_attention(const squeezekv_cache* cache, int32_t layer);
SQUEEZEKV_API squeezekv_status squeezekv_cache_add_attention(squeezekv_cache* cache, int32_t layer, int32_t head,
                                                             const float* probs, int32_t n_queries);
SQUEEZEKV_API squeezekv_status squeezekv_cache_end_update(squeezekv_cache* cache, int32_t layer);

/* The kept rows of one head in position order: keys and values [n, head_dim], positions [n]
 * (each may be NULL). Returns n, or -n when capacity (in rows) is too small. */
SQUEEZEKV_API int32_t squeezekv_cache_fetch(const squeezekv_cache* cache, int32_t layer, int32_t head, float* keys,
                                            float* values, int64_t* positions, int32_t capacity);

/* One head's slots in storage order, as add_attention indexes them: free slots have position -1
 * and zero rows. Returns n_slots, or -n_slots when capacity is too small. */
SQUEEZEKV_API int32_t squeezekv_cache_read_slots(const squeezekv_cache* cache, int32_t layer, int32_t head, float* keys,
                                                 float* values, int64_t* positions, int32_t capacity);

/* Per-layer budgets (rows per head). Returns n_layers, or -n_layers when capacity is too small. */
SQUEEZEKV_API int32_t squeezekv_cache_budgets(const squeezekv_cache* cache, int32_t* budgets, int32_t capacity);

/* A prompt spread over several updates (chunked prefill), for policies that act once at its end. */
SQUEEZEKV_API void squeezekv_cache_begin_prompt(squeezekv_cache* cache);
SQUEEZEKV_API void squeezekv_cache_end_prompt(squeezekv_cache* cache);
/* Empties every layer and the coordinator's schedule. */
SQUEEZEKV_API void squeezekv_cache_reset(squeezekv_cache* cache);

typedef struct squeezekv_layer_stats {
  int32_t layer_budget;     /* rows per head this layer may keep now */
  bool budget_final;        /* false while a coordinator still waits for other layers */
  double concentration;     /* measured on the first update's keys */
  int64_t tokens_seen;      /* tokens ever appended (the next token's position) */
  int32_t tokens_kept;      /* rows held by the fullest head */
  uint64_t kept_bytes;      /* K and V bytes resident */
  uint64_t full_bytes;      /* what an unevicted cache would hold */
  double compression_ratio; /* full / kept, 1 when nothing is kept */
  int32_t sliding_window;   /* 0: a global (evicting) layer; W: a sliding layer holding the newest W
                               positions (its full_bytes: those rows; its layer_budget: W) */
} squeezekv_layer_stats;

SQUEEZEKV_API squeezekv_status squeezekv_cache_layer_stats(const squeezekv_cache* cache, int32_t layer,
                                                           squeezekv_layer_stats* stats);
/* Totals over the layers; kept = sliding_kept + evicting_kept. */
SQUEEZEKV_API uint64_t squeezekv_cache_kept_bytes(const squeezekv_cache* cache);
SQUEEZEKV_API uint64_t squeezekv_cache_sliding_kept_bytes(const squeezekv_cache* cache);
SQUEEZEKV_API uint64_t squeezekv_cache_evicting_kept_bytes(const squeezekv_cache* cache);
SQUEEZEKV_API uint64_t squeezekv_cache_full_bytes(const squeezekv_cache* cache);
SQUEEZEKV_API double squeezekv_cache_compression_ratio(const squeezekv_cache* cache);

/* ---- allocators and the concentration proxy ---- */

/* The squeeze schedule for n_layers measured concentrations; budgets[n_layers] out. */
SQUEEZEKV_API squeezekv_status squeezekv_squeeze_budgets(const double* concentrations, int32_t n_layers,
                                                         int32_t avg_budget, int32_t n_sink, double strength,
                                                         int32_t* budgets);
/* PyramidKV's fixed taper; budgets[n_layers] out. */
SQUEEZEKV_API squeezekv_status squeezekv_pyramid_budgets(int32_t n_layers, int32_t avg_budget, int32_t n_sink,
                                                         double beta, int32_t* budgets);
/* Mean off-diagonal cosine of keys [n_rows, head_dim] into *score. */
SQUEEZEKV_API squeezekv_status squeezekv_concentration_score(const float* keys, int32_t n_rows, int32_t head_dim,
                                                             double* score);

/* ---- the engine: GGUF models, generation, perplexity ---- */

typedef struct squeezekv_model squeezekv_model;

/* Loads (memory-maps) a GGUF Llama-family model; NULL when the file is missing or malformed. */
SQUEEZEKV_API squeezekv_model* squeezekv_model_load(const char* path);
SQUEEZEKV_API void squeezekv_model_free(squeezekv_model* model);

typedef struct squeezekv_model_info {
  int32_t n_layers;
  int32_t n_heads;
  int32_t n_kv_heads;
  int32_t head_dim;
  int32_t dim;
  int32_t vocab;
  int32_t context_length;
} squeezekv_model_info;

SQUEEZEKV_API squeezekv_model_info squeezekv_model_get_info(const squeezekv_model* model);

/* A cache shaped for the model (its layers, KV heads, head_dim; params->head_dim is ignored). */
SQUEEZEKV_API squeezekv_cache* squeezekv_cache_init_for_model(const squeezekv_model* model,
                                                              const squeezekv_cache_params* params);

/* Token ids of text[0, text_len) (text_len < 0: NUL-terminated); with add_bos, BOS first when the
 * model asks for one (tokenizer.ggml.add_bos_token), as llama_tokenize's add_special. Returns the count, or -count when n_max is too small. */
SQUEEZEKV_API int32_t squeezekv_tokenize(const squeezekv_model* model, const char* text, int32_t text_len,
                                         int32_t* tokens, int32_t n_max, bool add_bos);
/* UTF-8 text of tokens, NUL-terminated. Returns the length without the NUL, or -(length + 1)
 * when buf_size is too small. */
SQUEEZEKV_API int32_t squeezekv_detokenize(const squeezekv_model* model, const int32_t* tokens, int32_t n_tokens,
                                           char* buf, int32_t buf_size);

typedef struct squeezekv_generate_params {
  int32_t n_predict; /* tokens to generate (stops early at EOS) */
  int32_t n_batch;   /* prompt tokens per prefill update */
  int32_t n_ctx;     /* 0 = the model's context length; prompt + output must fit */
  int32_t n_threads; /* 0 = every core */
  float temperature; /* 0 = greedy */
  int32_t top_k;     /* 0 = every token */
  float top_p;       /* 1 = off */
  uint64_t seed;
  /* Called with each token as soon as it is sampled; may be NULL. */
  void (*on_token)(int32_t token, void* user_data);
  void* user_data;
  /* true: continue the cache where it stands (squeezekv_cache_load's, or one an earlier call
   * filled): the prompt is the text that follows the tokens it has seen, or begins with them.
   * false (the default): the cache is cleared first. */
  bool continue_cache;
} squeezekv_generate_params;

SQUEEZEKV_API squeezekv_generate_params squeezekv_generate_default_params(void);

/* Generates after `prompt` with `cache` (from squeezekv_cache_init_for_model; its tokens and
 * accounting stay readable afterwards) and writes the generated ids to tokens[0, n_max).
 * Returns the count, -n_predict when n_max < n_predict (nothing run), INT32_MIN on error. */
SQUEEZEKV_API int32_t squeezekv_generate(const squeezekv_model* model, squeezekv_cache* cache, const char* prompt,
                                         const squeezekv_generate_params* params, int32_t* tokens, int32_t n_max);

typedef struct squeezekv_perplexity_params {
  int32_t n_ctx;      /* tokens per chunk; the second half of each chunk is scored */
  int32_t n_batch;    /* prompt tokens per prefill update */
  int32_t max_chunks; /* 0 = every whole chunk */
  int32_t n_threads;  /* 0 = every core */
} squeezekv_perplexity_params;

SQUEEZEKV_API squeezekv_perplexity_params squeezekv_perplexity_default_params(void);

typedef struct squeezekv_perplexity_result {
  int32_t chunks;
  int64_t scored; /* scored positions */
  double mean_nll;
  double perplexity;
  double mean_kl;        /* KL(full || this), nats per scored token */
  double top1_agreement; /* share of scored positions whose argmax equals the full cache's */
  double mean_kept_bytes, peak_kept_bytes;
  double mean_full_bytes, peak_full_bytes;
  double seconds;
} squeezekv_perplexity_result;

/* Perplexity of tokens (BOS first, as squeezekv_tokenize gives) under each of n_configs cache
 * configurations, all compared with one shared full-cache pass; results[n_configs] out. */
SQUEEZEKV_API squeezekv_status squeezekv_perplexity(const squeezekv_model* model, const int32_t* tokens,
                                                    int32_t n_tokens, const squeezekv_cache_params* const* configs,
                                                    int32_t n_configs, const squeezekv_perplexity_params* params,
                                                    squeezekv_perplexity_result* results);

/* ---- saved caches (docs/cache_file.md) ---- */

/* Writes a model cache (squeezekv_cache_init_for_model or squeezekv_cache_load, filled by
 * squeezekv_generate) to path with the tokens it has seen and the model's identity, so that a
 * later squeezekv_cache_load continues it exactly. SQUEEZEKV_STATUS_FORMAT_ERROR when the path
 * cannot be written (a missing folder, a full disk); nothing is left at path then. */
SQUEEZEKV_API squeezekv_status squeezekv_cache_save(const squeezekv_model* model, const squeezekv_cache* cache,
                                                    const char* path);
/* Loads path for model into *out: a new cache (free it with squeezekv_cache_free) that continues
 * exactly as the saved one would (squeezekv_generate with continue_cache). A truncated or corrupt
 * file, another model's or another format version's: SQUEEZEKV_STATUS_FORMAT_ERROR with the file
 * and what does not match in squeezekv_last_error; *out is NULL then. */
SQUEEZEKV_API squeezekv_status squeezekv_cache_load(const squeezekv_model* model, const char* path,
                                                    squeezekv_cache** out);
/* The tokens a model cache has seen (through squeezekv_generate or a loaded file) into
 * tokens[0, n_max): the count, or -count when n_max is too small. */
SQUEEZEKV_API int32_t squeezekv_cache_tokens(const squeezekv_cache* cache, int32_t* tokens, int32_t n_max);

#ifdef __cplusplus
}
#endif

#endif /* SQUEEZEKV_C_SQUEEZEKV_H */
