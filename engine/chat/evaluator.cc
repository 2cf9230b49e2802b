#include "engine/chat/evaluator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/chat/builtins.h"
#include "engine/chat/callable.h"
#include "engine/chat/operators.h"
#include "engine/chat/pystr.h"

namespace ptxserve::chat {
namespace {

std::string ObjectName(const Value& v) { return "'" + v.TypeName() + " object'"; }

Value NoAttribute(const Value& obj, std::string_view name) {
  return Value::Undefined(ObjectName(obj) + " has no attribute '" + std::string(name) + "'");
}

Value BoundMethod(const Value& receiver, std::string_view name) {
  auto c = std::make_shared<Callable>();
  c->kind = Callable::Kind::kMethod;
  c->name = std::string(name);
  c->receiver = receiver;
  return Value::Function(std::move(c));
}

// Python slice index normalisation (slice.indices) for a sequence of length n.
std::vector<int64_t> SliceIndices(int64_t n, const Value& start, const Value& stop,
                                  const Value& step_v) {
  for (const Value* v : {&start, &stop, &step_v}) {
    if (!v->is_none() && !v->is_integral()) {
      throw TemplateError("slice indices must be integers or None or have an __index__ method");
    }
  }
  const int64_t step = step_v.is_none() ? 1 : step_v.as_int();
  if (step == 0) throw TemplateError("slice step cannot be zero");
  const int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    const int64_t i = v.as_int();
    return i < 0 ? std::max(i + n, lower) : std::min(i, upper);
  };
  const int64_t b = clamp(start, step > 0 ? lower : upper);
  const int64_t e = clamp(stop, step > 0 ? upper : lower);
  std::vector<int64_t> out;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) out.push_back(i);
  return out;
}

}  // namespace

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* Scope::Find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_) {
    if (const Value* v = s->vars_.Find(name)) return v;
  }
  return nullptr;
}

Evaluator::Flow Evaluator::Exec(const Body& body, Scope& scope) {
  if (root_ == nullptr) root_ = &scope;
  for (const auto& node : body) {
    Flow flow;
    try {
      flow = ExecNode(*node, scope);
    } catch (const TemplateError& e) {
      if (e.line() != 0) throw;
      throw TemplateError(e.what(), node->line);
    }
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::ExecNode(const Node& node, Scope& scope) {
  switch (node.kind) {
    case NodeKind::kText:
      out_->append(node.text);
      return Flow::kNormal;
    case NodeKind::kOutput:
      out_->append(Eval(*node.expr, scope).ToString());
      return Flow::kNormal;
    case NodeKind::kIf:
      for (const auto& [cond, body] : node.branches) {
        if (Eval(*cond, scope).Truthy()) return Exec(body, scope);
      }
      return Exec(node.else_body, scope);
    case NodeKind::kFor:
      return ExecFor(node, scope);
    case NodeKind::kSet:
      ExecSet(node, scope);
      return Flow::kNormal;
    case NodeKind::kSetBlock:
      scope.Set(node.targets[0], Value::String(Capture(node.body, scope)));
      return Flow::kNormal;
    case NodeKind::kBreak:
      return Flow::kBreak;
    case NodeKind::kContinue:
      return Flow::kContinue;
    case NodeKind::kMacro: {
      auto c = std::make_shared<Callable>();
      c->kind = Callable::Kind::kMacro;
      c->name = node.attr;
      c->macro = &node;
      scope.Set(node.attr, Value::Function(std::move(c)));
      return Flow::kNormal;
    }
  }
  return Flow::kNormal;
}

std::string Evaluator::Capture(const Body& body, Scope& scope) {
  std::string captured;
  std::string* saved = out_;
  out_ = &captured;
  try {
    Exec(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return captured;
}

void Evaluator::Bind(const std::vector<std::string>& targets, const Value& item, Scope& scope) {
  if (targets.size() == 1) {
    scope.Set(targets[0], item);
    return;
  }
  const std::vector<Value> parts = Iterate(item);
  if (parts.size() != targets.size()) {
    throw TemplateError(
        parts.size() > targets.size()
            ? absl::StrCat("too many values to unpack (expected ", targets.size(), ")")
            : absl::StrCat("not enough values to unpack (expected ", targets.size(), ", got ",
                           parts.size(), ")"));
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.Set(targets[i], parts[i]);
}

Evaluator::Flow Evaluator::ExecFor(const Node& node, Scope& scope) {
  std::vector<Value> items = Iterate(Eval(*node.expr, scope));
  if (node.loop_filter) {
    // The filter runs before numbering, so loop.index/length count kept items only.
    std::vector<Value> kept;
    for (Value& item : items) {
      Scope s(&scope);
      Bind(node.targets, item, s);
      if (Eval(*node.loop_filter, s).Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) return Exec(node.else_body, scope);  // a break there ends an outer loop
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    Scope s(&scope);
    Bind(node.targets, items[i], s);
    DictData loop;
    loop.items = {{"index", Value::Int(i + 1)},    {"index0", Value::Int(i)},
                  {"revindex", Value::Int(n - i)}, {"revindex0", Value::Int(n - i - 1)},
                  {"first", Value::Bool(i == 0)},  {"last", Value::Bool(i == n - 1)},
                  {"length", Value::Int(n)},       {"depth", Value::Int(1)},
                  {"depth0", Value::Int(0)}};
    if (i > 0) loop.items.emplace_back("previtem", items[i - 1]);
    if (i + 1 < n) loop.items.emplace_back("nextitem", items[i + 1]);
    s.Set("loop", Value::Dict(std::move(loop)));
    if (Exec(node.body, s) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Evaluator::ExecSet(const Node& node, Scope& scope) {
  Value value = Eval(*node.expr, scope);
  if (node.attr.empty()) {
    Bind(node.targets, value, scope);
    return;
  }
  const Value* ns = scope.Find(node.targets[0]);
  if (ns == nullptr || ns->kind() != Value::Kind::kNamespace) {
    throw TemplateError("cannot assign attribute on non-namespace object");
  }
  ns->namespace_attrs().Set(node.attr, std::move(value));
}

std::vector<Value> Evaluator::Iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return value.list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, v] : value.dict().items) keys.push_back(Value::String(k));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : DecodeUtf8(value.str()))
        chars.push_back(Value::String(EncodeUtf8({&c, 1})));
      return chars;
    }
    default:
      throw TemplateError("'" + value.TypeName() + "' object is not iterable");
  }
}

Value Evaluator::GetAttr(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      throw TemplateError(obj.undefined_message());
    case Value::Kind::kDict: {
      // Python's getattr wins over the item: `d.items` is the method even with an "items" key.
      if (IsMethod(obj, name)) return BoundMethod(obj, name);
      const Value* v = obj.dict().Find(name);
      return v ? *v : NoAttribute(obj, name);
    }
    case Value::Kind::kNamespace: {
      const Value* v = obj.namespace_attrs().Find(name);
      return v ? *v : NoAttribute(obj, name);
    }
    default:
      return IsMethod(obj, name) ? BoundMethod(obj, name) : NoAttribute(obj, name);
  }
}

Value Evaluator::GetItem(const Value& obj, const Value& key) {
  RequireDefined(obj);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict().Find(key.str())) return *v;
  } else if ((obj.is_list() || obj.is_string()) && key.is_integral()) {
    const bool is_list = obj.is_list();
    std::u32string chars;
    if (!is_list) chars = DecodeUtf8(obj.str());
    const int64_t n = is_list ? static_cast<int64_t>(obj.list().items.size())
                              : static_cast<int64_t>(chars.size());
    const int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
    if (i >= 0 && i < n)
      return is_list ? obj.list().items[i] : Value::String(EncodeUtf8({&chars[i], 1}));
    return Value::Undefined(ObjectName(obj) + " has no element " + key.Repr());
  }
  // jinja2 falls back to getattr for a str key (`ns['x']`, `d['items']`).
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value::Undefined(ObjectName(obj) + " has no element " + key.Repr());
}

Value Evaluator::Slice(const Expr& e, Scope& scope) {
  const Value obj = Eval(*e.args[0], scope);
  RequireDefined(obj);
  Value bounds[3];
  for (int k = 0; k < 3; ++k)
    bounds[k] = e.args[k + 1] ? Eval(*e.args[k + 1], scope) : Value::None();
  std::u32string chars;
  if (obj.is_string()) chars = DecodeUtf8(obj.str());
  const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list().items.size())
                                  : static_cast<int64_t>(chars.size());
  // jinja2 compiles a slice to a plain Python subscript (no getitem fallback to
  // Undefined), so slicing anything but a list or str is Python's TypeError.
  if (obj.is_dict()) throw TemplateError("unhashable type: 'slice'");
  if (!obj.is_list() && !obj.is_string())
    throw TemplateError("'" + obj.TypeName() + "' object is not subscriptable");
  const std::vector<int64_t> indices = SliceIndices(n, bounds[0], bounds[1], bounds[2]);
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : indices) out.push_back(chars[i]);
    return Value::String(EncodeUtf8(out));
  }
  std::vector<Value> out;
  for (int64_t i : indices) out.push_back(obj.list().items[i]);
  return Value::List(std::move(out), obj.list().is_tuple);
}

CallArgs Evaluator::EvalArgs(const Expr& e, size_t first, Scope& scope) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(Eval(*e.args[i], scope));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, Eval(*v, scope));
  return args;
}

Value Evaluator::Call(const Value& callee, const CallArgs& args) {
  RequireDefined(callee);
  if (callee.kind() != Value::Kind::kCallable) {
    throw TemplateError("'" + callee.TypeName() + "' object is not callable");
  }
  const Callable& c = callee.callable();
  switch (c.kind) {
    case Callable::Kind::kGlobal:
      return CallGlobal(*this, c.name, args);
    case Callable::Kind::kMethod:
      return CallMethod(*this, c.receiver, c.name, args);
    case Callable::Kind::kMacro:
      return CallMacro(c, args);
  }
  return Value::None();
}

Value Evaluator::CallMacro(const Callable& macro, const CallArgs& args) {
  const Node& def = *macro.macro;
  if (args.positional.size() > def.targets.size()) {
    throw TemplateError("macro '" + def.attr + "' takes not more than " +
                        std::to_string(def.targets.size()) + " argument(s)");
  }
  Scope scope(root_);
  for (size_t i = 0; i < def.targets.size(); ++i) {
    const Value* v = args.Get(i, def.targets[i]);
    if (v != nullptr) {
      scope.Set(def.targets[i], *v);
    } else if (def.defaults[i]) {
      scope.Set(def.targets[i], Eval(*def.defaults[i], scope));
    } else {
      scope.Set(def.targets[i],
                Value::Undefined("parameter '" + def.targets[i] + "' was not provided"));
    }
  }
  for (const auto& [k, v] : args.keyword) {
    if (std::find(def.targets.begin(), def.targets.end(), k) == def.targets.end()) {
      throw TemplateError("macro '" + def.attr + "' takes no keyword argument '" + k + "'");
    }
  }
  return Value::String(Capture(def.body, scope));
}

}  // namespace ptxserve::chat
