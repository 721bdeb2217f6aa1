// A YAML document read with libyaml into what `ronde run --config-file` needs: mappings,
// sequences and scalars, each with the line it starts on, so that every error can name it.
// Anchors and aliases, tags and more than one document are refused: Horovod's config files
// have none of them.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ronde::launcher {

struct YamlNode {
  enum class Kind { kNull, kScalar, kMapping, kSequence };
  Kind kind = Kind::kNull;
  int line = 0;           // 1-based, where the node starts
  std::string value;      // kScalar: the text, quotes removed
  bool quoted = false;    // kScalar written in quotes: a string, whatever it looks like
  std::vector<std::pair<YamlNode, YamlNode>> entries;  // kMapping: key, value, in file order
  std::vector<YamlNode> items;                          // kSequence
};

// What a node is, for messages: "a mapping", "a list", "the value 'x'", "nothing".
std::string describeYamlNode(const YamlNode& node);

// Parses `text`; nullopt for a document with nothing in it (an empty file, comments only).
// Malformed YAML is an Error(kInvalidArgument) "ORIGIN:LINE: ..." with libyaml's reason.
std::optional<YamlNode> parseYamlDocument(const std::string& text, const std::string& origin);

}  // namespace ronde::launcher
