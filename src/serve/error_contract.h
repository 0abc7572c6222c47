// The server's error contract in one place: every way a request can fail, with its one HTTP status
// and OpenAI error type. Every error answer is {"error": {"message", "type", "param", "code"}},
// param naming the field (or header) at fault, null when none. README.md ("Errors") lists this
// table; tests/serve/serve_http_test.cc walks it.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace squeezekv::serve {

enum class Failure {
  invalid_json,          // 400: not JSON, a string not UTF-8, a number beyond a double, nesting beyond 64
  invalid_field,         // 400: a field unknown, of a wrong type, out of range, or refused in combination
  prompt_too_long,       // 400: more tokens than -c
  never_fits,            // 400: the cache's promise exceeds --kv-limit-mib on its own
  unknown_model,         // 404: "model" names another model
  no_route,              // 404: no such path
  bad_head,              // 400: a request line or header that does not parse, or arrived too slowly
  uri_too_long,          // 414: a request line beyond its budget (connection.h)
  headers_too_large,     // 431: header lines beyond their budget: too many, one too long, or too many bytes
  bad_content_length,    // 400: Content-Length not one byte count
  length_required,       // 411: a body without Content-Length (chunked)
  body_too_large,        // 413: Content-Length above --max-body
  queue_full,            // 503: every K/V byte promised and the queue full (Retry-After: 1)
  too_many_connections,  // 503: --max-connections open (Retry-After: 1)
  shutting_down,         // 503: SIGINT/SIGTERM while the request waited or ran
  inference_failed,      // 500: the engine failed (a bug)
  no_cache_dir,          // 400: a cache action on a server without --cache-dir
  cache_not_found,       // 404: no kept or saved cache has the id
  cache_file_failed,     // 500: the cache file cannot be written (disk full) or read (damaged)
};

struct FailureSpec {
  Failure failure;
  int status;
  std::string_view type;  // OpenAI's error type
  bool closes;            // the connection closes after the answer (its body may be unread)
  std::string_view when;  // for the README's table
};

std::span<const FailureSpec> failure_table();
const FailureSpec& failure_spec(Failure failure);
// The failure behind a status the scheduler reports on a channel (500 or 503).
Failure failure_of_status(int status);

// The one error body; it always serialises (bytes that are not UTF-8 become U+FFFD), and its
// message and param are cut to these many bytes, so that no answer echoes more of a request.
inline constexpr size_t kMaxErrorMessageBytes = 1024, kMaxErrorParamBytes = 256;
std::string error_json(Failure failure, const std::string& message, const std::string& param);

}  // namespace squeezekv::serve
