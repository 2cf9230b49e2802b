// Runs a compiled template: statements write to an output string, expressions follow
// jinja2's runtime (sandboxed environment, default Undefined) and Python's semantics.
// One Evaluator per render; the template tree it reads is never modified.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/chat/ast.h"
#include "engine/chat/value.h"

namespace ptxserve::chat {

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument for parameter number `index` (0-based, after the subject) named `name`
  // in the Python signature; nullptr when not passed.
  const Value* Get(size_t index, std::string_view name) const;
  Value GetOr(size_t index, std::string_view name, Value fallback) const {
    const Value* v = Get(index, name);
    return v ? *v : std::move(fallback);
  }
};

// Variables visible at one point: a for-loop iteration or macro call sees its own
// assignments first, then the enclosing scopes (jinja2 gives every iteration a fresh
// scope, so a {% set %} in a loop body does not survive the iteration).
class Scope {
 public:
  explicit Scope(Scope* parent) : parent_(parent) {}
  const Value* Find(std::string_view name) const;
  void Set(std::string name, Value value) { vars_.Set(std::move(name), std::move(value)); }

 private:
  Scope* parent_;
  DictData vars_;
};

using Clock = std::function<std::chrono::system_clock::time_point()>;

class Evaluator {
 public:
  Evaluator(Clock clock, std::string* out) : clock_(std::move(clock)), out_(out) {}

  void Run(const Body& body, Scope& scope) { Exec(body, scope); }
  Value Eval(const Expr& e, Scope& scope);

  // jinja2's environment.getattr / getitem: a missing key or attribute is Undefined,
  // anything looked up on an Undefined is an error.
  Value GetAttr(const Value& obj, std::string_view name);
  Value GetItem(const Value& obj, const Value& key);
  Value Call(const Value& callee, const CallArgs& args);
  // What `for x in value` visits: list items, dict keys, characters; Undefined is empty.
  std::vector<Value> Iterate(const Value& value);
  std::chrono::system_clock::time_point Now() const { return clock_(); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow Exec(const Body& body, Scope& scope);
  Flow ExecNode(const Node& node, Scope& scope);
  Flow ExecFor(const Node& node, Scope& scope);
  void ExecSet(const Node& node, Scope& scope);
  std::string Capture(const Body& body, Scope& scope);
  Value CallMacro(const Callable& macro, const CallArgs& args);
  CallArgs EvalArgs(const Expr& e, size_t first, Scope& scope);
  Value Slice(const Expr& e, Scope& scope);
  void Bind(const std::vector<std::string>& targets, const Value& item, Scope& scope);

  Clock clock_;
  std::string* out_;
  Scope* root_ = nullptr;  // macros see the template's top-level variables
};

}  // namespace ptxserve::chat
