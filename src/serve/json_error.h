// A request body that nlohmann::json refuses (bad syntax, a string that is not UTF-8, a number that
// overflows a double), turned into a RequestError naming the field it falls in: the body is
// replayed through the SAX parser, which stops at the same byte with the path of keys and
// indices that led there ("messages[0].content", "stop[1]", "squeezekv.budget").
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "serve/request.h"

namespace squeezekv::serve {

// Arrays and objects nest at most this deep in a body (OpenAI's bodies nest 4 deep): deeper is a
// 400, found while parsing, so that no body costs more than its bytes' worth of frames.
inline constexpr int kMaxJsonDepth = 64;

// The body parsed; RequestError (invalid_json) for bad syntax, a string that is not UTF-8, a
// number that overflows a double, or nesting deeper than kMaxJsonDepth.
nlohmann::json parse_body(const std::string& body);

// The field the parse error of `body` lies in ("" at the top level), and whether it lies in a
// key (then the field is the object holding it).
struct JsonErrorPlace {
  std::string field;
  bool in_key = false;
};

JsonErrorPlace json_error_place(const std::string& body);

// The 400 for body, which json::parse refused with `error`. Its message never quotes raw body
// bytes, so it always serialises.
RequestError json_body_error(const std::string& body, const nlohmann::json::exception& error);

}  // namespace squeezekv::serve
