#include "serve/error_contract.h"

#include <nlohmann/json.hpp>

namespace squeezekv::serve {
namespace {

constexpr FailureSpec kTable[] = {
    {Failure::invalid_json, 400, "invalid_request_error", false,
     "the body is not JSON, a string in it is not UTF-8, a number overflows a double, or it nests arrays and objects "
     "more than 64 deep"},
    {Failure::invalid_field, 400, "invalid_request_error", false,
     "a field is unknown, of the wrong type, out of range, or refused with another one"},
    {Failure::prompt_too_long, 400, "invalid_request_error", false, "the prompt has more tokens than -c"},
    {Failure::never_fits, 400, "invalid_request_error", false,
     "the request's cache alone promises more K/V bytes than --kv-limit-mib"},
    {Failure::unknown_model, 404, "not_found_error", false, "\"model\" names a model this server does not serve"},
    {Failure::no_route, 404, "not_found_error", false, "no such method and path"},
    {Failure::bad_head, 400, "invalid_request_error", true,
     "the request line or headers do not parse, or the request did not arrive within --read-timeout"},
    {Failure::uri_too_long, 414, "invalid_request_error", true,
     "the request line is longer than 8192 bytes (or than the whole head's budget)"},
    {Failure::headers_too_large, 431, "invalid_request_error", true,
     "more than 100 header lines, a header line longer than 8192 bytes, or more than 32768 bytes of request line "
     "and headers"},
    {Failure::bad_content_length, 400, "invalid_request_error", true, "Content-Length is not one decimal byte count"},
    {Failure::length_required, 411, "invalid_request_error", true, "a body without Content-Length (chunked)"},
    {Failure::body_too_large, 413, "invalid_request_error", true, "Content-Length is above --max-body"},
    {Failure::queue_full, 503, "server_overloaded", false,
     "every K/V byte is promised and --queue requests wait already (Retry-After: 1)"},
    {Failure::too_many_connections, 503, "server_overloaded", true,
     "--max-connections connections are open (Retry-After: 1)"},
    {Failure::shutting_down, 503, "server_overloaded", false, "SIGINT or SIGTERM came while the request waited or ran"},
    {Failure::inference_failed, 500, "server_error", false, "the engine failed (a bug: please report it)"},
    {Failure::no_cache_dir, 400, "invalid_request_error", false, "a cache action on a server without --cache-dir"},
    {Failure::cache_not_found, 404, "not_found_error", false, "no kept or saved cache has the id"},
    {Failure::cache_file_failed, 500, "server_error", false,
     "the cache file cannot be written (a full disk) or read (damaged, another model's)"},
};

// text cut to at most `max` bytes (at a character's start) with its full length noted: an error
// may quote what the client sent (a key, a path of a million '['), never more than this of it.
std::string bounded(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "... (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace

std::span<const FailureSpec> failure_table() { return kTable; }

const FailureSpec& failure_spec(Failure failure) {
  for (const FailureSpec& s : kTable) {
    if (s.failure == failure) return s;
  }
  return kTable[0];  // unreachable: the table lists every Failure
}

Failure failure_of_status(int status) { return status == 503 ? Failure::shutting_down : Failure::inference_failed; }

std::string error_json(Failure failure, const std::string& message, const std::string& param) {
  using nlohmann::json;
  const json body = {{"error",
                      {{"message", bounded(message, kMaxErrorMessageBytes)},
                       {"type", std::string(failure_spec(failure).type)},
                       {"param", param.empty() ? json(nullptr) : json(bounded(param, kMaxErrorParamBytes))},
                       {"code", nullptr}}}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace squeezekv::serve
