#include "src/io/json_unique.h"

#include <set>
#include <vector>

namespace attn {

namespace {

// One open object or array while the parser walks the document.
struct Frame {
  bool array = false;
  std::set<std::string> keys; // an object's keys so far
  std::string key;            // an object's key being read
  std::size_t index = 0;      // an array's element being read
};

std::string path_of(const std::vector<Frame>& frames) {
  std::string p;
  for (const Frame& f : frames) {
    if (f.array) {
      p += "[" + std::to_string(f.index) + "]";
    } else if (!f.keys.empty()) { // an object whose key is being read
      p += (p.empty() ? "" : ".") + f.key;
    }
  }
  return p;
}

// The parser's callback that refuses a container opened past kMaxJsonDepth levels.
bool within_depth(int depth, nlohmann::json::parse_event_t event) {
  if (depth > kMaxJsonDepth && (event == nlohmann::json::parse_event_t::object_start ||
                                event == nlohmann::json::parse_event_t::array_start)) {
    throw JsonTooDeep();
  }
  return true;
}

} // namespace

nlohmann::json parse_json_bounded(const std::string& text) {
  return nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t event,
                                        nlohmann::json&) { return within_depth(depth, event); });
}

nlohmann::json parse_json_unique_keys(const std::string& text) {
  using json = nlohmann::json;
  std::vector<Frame> frames;
  // A value ended: the array it sits in moves on to its next element.
  auto value_done = [&frames] {
    if (!frames.empty() && frames.back().array) {
      ++frames.back().index;
    }
  };
  const json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    within_depth(depth, event);
    switch (event) {
    case json::parse_event_t::object_start:
      frames.emplace_back();
      break;
    case json::parse_event_t::array_start:
      frames.emplace_back().array = true;
      break;
    case json::parse_event_t::key: {
      Frame& f = frames.back();
      f.key = parsed.get<std::string>();
      if (!f.keys.insert(f.key).second) {
        throw DuplicateKey(path_of(frames));
      }
      break;
    }
    case json::parse_event_t::object_end:
    case json::parse_event_t::array_end:
      frames.pop_back();
      value_done();
      break;
    case json::parse_event_t::value:
      value_done();
      break;
    }
    return true;
  };
  return json::parse(text, cb);
}

} // namespace attn
