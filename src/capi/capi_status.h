// The C API's errors (capi_status.cc): every C++ exception becomes a status code plus this thread's
// last error and a log message, so that none crosses the C boundary.
#pragma once

#include <climits>
#include <cstdint>
#include <string>

#include "squeezekv/base/errors.h"
#include "squeezekv/c/squeezekv.h"

namespace squeezekv::capi {

// Records `message` as this thread's last error, logs it and returns `status`.
squeezekv_status fail(squeezekv_status status, const char* where, const std::string& message);

// The status of the exception being handled (call inside a catch block only).
squeezekv_status fail_current(const char* where);

void log_message(squeezekv_log_level level, const std::string& text);

// Runs fn; any exception becomes a status and the thread's last error.
template <typename Fn>
squeezekv_status guarded(const char* where, Fn&& fn) noexcept {
  try {
    fn();
    return SQUEEZEKV_STATUS_OK;
  } catch (...) {
    return fail_current(where);
  }
}

// For the functions that return a count: fn's result, or INT32_MIN on an exception.
template <typename Fn>
int32_t guarded_count(const char* where, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (...) {
    fail_current(where);
    return INT32_MIN;
  }
}

template <typename T>
const T& require_handle(const T* handle, const char* name) {
  require(handle != nullptr, name, "NULL", "a handle is required");
  return *handle;
}

}  // namespace squeezekv::capi
