// Status strings, the per-thread last error and the log callback of the C API.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "capi/capi_status.h"

namespace squeezekv::capi {
namespace {

thread_local std::string last_error;

void log_to_stderr(squeezekv_log_level level, const char* text, void* /*user_data*/) {
  if (level <= SQUEEZEKV_LOG_LEVEL_WARN) std::fprintf(stderr, "squeezekv: %s\n", text);
}

squeezekv_log_callback log_callback = log_to_stderr;
void* log_user_data = nullptr;

}  // namespace

void log_message(squeezekv_log_level level, const std::string& text) {
  log_callback(level, text.c_str(), log_user_data);
}

squeezekv_status fail(squeezekv_status status, const char* where, const std::string& message) {
  try {
    last_error = std::string(where) + ": " + message;
  } catch (...) {
    last_error.clear();  // out of memory while reporting: keep the status at least
    return status;
  }
  log_message(SQUEEZEKV_LOG_LEVEL_ERROR, last_error);
  return status;
}

squeezekv_status fail_current(const char* where) {
  try {
    throw;
  } catch (const InvalidArgument& e) {
    return fail(SQUEEZEKV_STATUS_INVALID_ARGUMENT, where, e.what());
  } catch (const FormatError& e) {
    return fail(SQUEEZEKV_STATUS_FORMAT_ERROR, where, e.what());
  } catch (const std::bad_alloc&) {
    return fail(SQUEEZEKV_STATUS_OUT_OF_MEMORY, where, "out of memory");
  } catch (const std::exception& e) {
    return fail(SQUEEZEKV_STATUS_INTERNAL, where, e.what());
  } catch (...) {
    return fail(SQUEEZEKV_STATUS_INTERNAL, where, "unknown exception");
  }
}

}  // namespace squeezekv::capi

extern "C" {

const char* squeezekv_status_string(squeezekv_status status) {
  switch (status) {
    case SQUEEZEKV_STATUS_OK:
      return "ok";
    case SQUEEZEKV_STATUS_INVALID_ARGUMENT:
      return "invalid argument";
    case SQUEEZEKV_STATUS_FORMAT_ERROR:
      return "format error";
    case SQUEEZEKV_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case SQUEEZEKV_STATUS_INTERNAL:
      return "internal error";
  }
  return "unknown status";
}

const char* squeezekv_last_error(void) { return squeezekv::capi::last_error.c_str(); }

void squeezekv_log_set(squeezekv_log_callback callback, void* user_data) {
  squeezekv::capi::log_callback = callback ? callback : squeezekv::capi::log_to_stderr;
  squeezekv::capi::log_user_data = callback ? user_data : nullptr;
}

const char* squeezekv_version(void) { return SQUEEZEKV_VERSION_STRING; }

}  // extern "C"
