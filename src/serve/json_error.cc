#include "serve/json_error.h"

#include <cstdio>
#include <vector>

#include "squeezekv/base/utf8.h"

namespace squeezekv::serve {
namespace {

using nlohmann::json;

// Follows the SAX events to know, at any point, the chain of keys and indices being parsed.
class PathTracker : public nlohmann::json_sax<json> {
 public:
  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t) override { return scalar(); }
  bool number_unsigned(number_unsigned_t) override { return scalar(); }
  bool number_float(number_float_t, const string_t&) override { return scalar(); }
  bool string(string_t&) override { return scalar(); }
  bool binary(binary_t&) override { return scalar(); }
  // Never deeper than a body may nest (parse_body refuses deeper ones): the path stays short.
  bool start_object(std::size_t) override { return frames_.size() < size_t(kMaxJsonDepth) && open(false); }
  bool start_array(std::size_t) override { return frames_.size() < size_t(kMaxJsonDepth) && open(true); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    frames_.back().key = k;
    frames_.back().want_key = false;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

  // Where the parser stopped: the innermost array's element is the one after the last complete
  // one, unless a nested container already counted it.
  JsonErrorPlace place() const {
    JsonErrorPlace out;
    for (size_t i = 0; i < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      const bool innermost = i + 1 == frames_.size();
      if (f.array) {
        out.field += '[';
        out.field += std::to_string(innermost ? f.index + 1 : f.index);
        out.field += ']';
      } else if (innermost && f.want_key) {
        out.in_key = true;
      } else {
        if (!out.field.empty()) out.field += '.';
        out.field += f.key;
      }
    }
    return out;
  }

 private:
  struct Frame {
    bool array = false;
    int64_t index = -1;  // arrays: the last element begun
    std::string key;     // objects: the last key read
    bool want_key = true;
  };
  void begin_value() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  void end_value() {
    if (!frames_.empty() && !frames_.back().array) frames_.back().want_key = true;
  }
  bool scalar() {
    begin_value();
    end_value();
    return true;
  }
  bool open(bool array) {
    begin_value();
    Frame frame;
    frame.array = array;
    frames_.push_back(std::move(frame));
    return true;
  }
  bool close() {
    frames_.pop_back();
    end_value();
    return true;
  }
  std::vector<Frame> frames_;
};

// The offset of the first byte of text that is not UTF-8, or npos.
size_t first_bad_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto seq = utf8_detail::sequence_at(text, i);
    if (seq.kind != utf8_detail::Sequence::valid) return i;
    i += size_t(seq.len);
  }
  return std::string::npos;
}

}  // namespace

json parse_body(const std::string& body) {
  try {
    return json::parse(body, [](int depth, json::parse_event_t event, json&) {
      if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
          depth >= kMaxJsonDepth) {
        throw RequestError(Failure::invalid_json, "",
                           "the body nests arrays and objects more than " + std::to_string(kMaxJsonDepth) + " deep");
      }
      return true;
    });
  } catch (const json::exception& e) {
    throw json_body_error(body, e);  // bad syntax, a string not UTF-8, a number beyond a double
  }
}

JsonErrorPlace json_error_place(const std::string& body) {
  PathTracker tracker;
  try {
    json::sax_parse(body, &tracker);
  } catch (const json::exception&) {
    // the tracker holds the place where it stopped either way
  }
  return tracker.place();
}

RequestError json_body_error(const std::string& body, const json::exception& error) {
  const JsonErrorPlace at = json_error_place(body);
  const std::string where = at.in_key ? (at.field.empty() ? "a key of the body" : "a key of '" + at.field + "'")
                                      : (at.field.empty() ? "the body" : "'" + at.field + "'");
  const std::string what = error.what();
  if (const size_t bad = first_bad_utf8(body); bad != std::string::npos && what.find("UTF-8") != std::string::npos) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", unsigned(static_cast<unsigned char>(body[bad])));
    return RequestError(Failure::invalid_json, at.field,
                        where + " is not valid UTF-8 (byte " + byte + " at offset " + std::to_string(bad) + ")");
  }
  if (error.id == 406) {  // out_of_range: a number beyond a double
    return RequestError(Failure::invalid_json, at.field, where + " is a number too large to represent");
  }
  // nlohmann's message may quote the bytes it read: repaired, so that the answer serialises.
  return RequestError(Failure::invalid_json, at.field,
                      "the body is not valid JSON (at " + where + "): " + valid_utf8(what));
}

}  // namespace squeezekv::serve
