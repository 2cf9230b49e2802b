// Things a template can call: the globals (raise_exception, namespace, range, ...),
// methods bound to a str/dict/list receiver, and macros.
#pragma once

#include <string>

#include "engine/chat/value.h"

namespace ptxserve::chat {

struct Node;

struct Callable {
  enum class Kind { kGlobal, kMethod, kMacro };
  Kind kind = Kind::kGlobal;
  std::string name;
  Value receiver;               // kMethod: the object the method was looked up on
  const Node* macro = nullptr;  // kMacro: its definition in the compiled template
};

}  // namespace ptxserve::chat
