#include "launcher/yaml_document.h"

#include <yaml.h>

#include "ronde/errors.h"

namespace ronde::launcher {
namespace {

// Deep enough for any config file; deeper input is refused before the stack is at risk.
constexpr int kMaxDepth = 32;

class Event {
 public:
  Event() = default;
  ~Event() {
    if (filled_) yaml_event_delete(&event_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  yaml_event_t* fill() {
    filled_ = true;
    return &event_;
  }
  const yaml_event_t& operator*() const { return event_; }
  const yaml_event_t* operator->() const { return &event_; }

 private:
  yaml_event_t event_{};
  bool filled_ = false;
};

class Reader {
 public:
  Reader(const std::string& text, const std::string& origin) : origin_(origin) {
    yaml_parser_initialize(&parser_);
    yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()),
                                 text.size());
  }
  ~Reader() { yaml_parser_delete(&parser_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  void next(Event* event) {
    if (yaml_parser_parse(&parser_, event->fill()) != 0) return;
    // The event was not filled on failure: nothing to delete.
    *event->fill() = yaml_event_t{};
    const int line = static_cast<int>(parser_.problem_mark.line) + 1;
    std::string why = parser_.problem != nullptr ? parser_.problem : "unreadable";
    if (parser_.context != nullptr) why += std::string(" ") + parser_.context;
    fail(line, "malformed YAML: " + why);
  }

  [[noreturn]] void fail(int line, const std::string& why) const {
    throw makeError(ErrorCode::kInvalidArgument, origin_, ":", line, ": ", why);
  }

  YamlNode node(const yaml_event_t& first, int depth);

 private:
  void children(YamlNode* node, yaml_event_type_t end, int depth);

  yaml_parser_t parser_{};
  std::string origin_;
};

int lineOf(const yaml_event_t& event) { return static_cast<int>(event.start_mark.line) + 1; }

bool isNullText(const std::string& text) {
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

YamlNode Reader::node(const yaml_event_t& first, int depth) {
  YamlNode node;
  node.line = lineOf(first);
  if (depth > kMaxDepth) fail(node.line, "nested too deep");
  switch (first.type) {
    case YAML_SCALAR_EVENT: {
      const auto& scalar = first.data.scalar;
      node.value.assign(reinterpret_cast<const char*>(scalar.value), scalar.length);
      node.quoted = scalar.style != YAML_PLAIN_SCALAR_STYLE;
      const bool null = !node.quoted && isNullText(node.value);
      node.kind = null ? YamlNode::Kind::kNull : YamlNode::Kind::kScalar;
      if (scalar.anchor != nullptr) fail(node.line, "anchors (&name) are not supported");
      if (scalar.tag != nullptr) fail(node.line, "tags (!!type) are not supported");
      return node;
    }
    case YAML_MAPPING_START_EVENT:
      node.kind = YamlNode::Kind::kMapping;
      if (first.data.mapping_start.anchor != nullptr) {
        fail(node.line, "anchors (&name) are not supported");
      }
      children(&node, YAML_MAPPING_END_EVENT, depth);
      return node;
    case YAML_SEQUENCE_START_EVENT:
      node.kind = YamlNode::Kind::kSequence;
      if (first.data.sequence_start.anchor != nullptr) {
        fail(node.line, "anchors (&name) are not supported");
      }
      children(&node, YAML_SEQUENCE_END_EVENT, depth);
      return node;
    case YAML_ALIAS_EVENT:
      fail(node.line, "aliases (*name) are not supported");
    default:
      fail(node.line, "unexpected YAML event");
  }
}

void Reader::children(YamlNode* node, yaml_event_type_t end, int depth) {
  while (true) {
    Event event;
    next(&event);
    if (event->type == end) return;
    YamlNode child = this->node(*event, depth + 1);
    if (node->kind == YamlNode::Kind::kSequence) {
      node->items.push_back(std::move(child));
      continue;
    }
    Event value;
    next(&value);
    node->entries.emplace_back(std::move(child), this->node(*value, depth + 1));
  }
}

}  // namespace

std::string describeYamlNode(const YamlNode& node) {
  switch (node.kind) {
    case YamlNode::Kind::kNull: return "nothing";
    case YamlNode::Kind::kScalar: return "the value '" + node.value + "'";
    case YamlNode::Kind::kMapping: return "a mapping";
    case YamlNode::Kind::kSequence: return "a list";
  }
  return "?";
}

std::optional<YamlNode> parseYamlDocument(const std::string& text, const std::string& origin) {
  Reader reader(text, origin);
  Event stream;
  reader.next(&stream);  // STREAM-START
  Event start;
  reader.next(&start);
  if (start->type == YAML_STREAM_END_EVENT) return std::nullopt;  // nothing but comments
  Event first;
  reader.next(&first);
  YamlNode root = reader.node(*first, 0);
  Event document_end;
  reader.next(&document_end);
  Event after;
  reader.next(&after);
  if (after->type != YAML_STREAM_END_EVENT) {
    reader.fail(lineOf(*after), "a second YAML document: the file must hold one");
  }
  if (root.kind == YamlNode::Kind::kNull) return std::nullopt;
  return root;
}

}  // namespace ronde::launcher
