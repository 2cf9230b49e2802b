// Values of the chat-template interpreter, with Python's semantics where Jinja2 borrows
// them: truthiness, equality across int and float, str() and repr() as Python prints
// them, and JSON as Hugging Face's tojson writes it (json.dumps, ensure_ascii=False).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace ptxserve::jinja {

// Raised while rendering; the template front turns it into InvalidArgument. Rendering is
// a deep recursion over a small tree: an exception keeps every evaluator free of status
// plumbing, and none escapes the interpreter.
struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(const Args&, const Kwargs&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<const List> list;
  // Dicts are immutable except a namespace() object, whose attributes `set` may change.
  std::shared_ptr<Dict> dict;
  bool is_namespace = false;
  std::shared_ptr<const Function> fn;

  static Value None() { return Of(Kind::kNone); }
  static Value Bool(bool v) {
    Value x = Of(Kind::kBool);
    x.b = v;
    return x;
  }
  static Value Int(int64_t v) {
    Value x = Of(Kind::kInt);
    x.i = v;
    return x;
  }
  static Value Float(double v) {
    Value x = Of(Kind::kFloat);
    x.f = v;
    return x;
  }
  static Value Str(std::string v) {
    Value x = Of(Kind::kString);
    x.s = std::move(v);
    return x;
  }
  static Value MakeList(List v) {
    Value x = Of(Kind::kList);
    x.list = std::make_shared<const List>(std::move(v));
    return x;
  }
  static Value MakeDict(Dict v) {
    Value x = Of(Kind::kDict);
    x.dict = std::make_shared<Dict>(std::move(v));
    return x;
  }
  static Value MakeFunction(Function fn) {
    Value x = Of(Kind::kFunction);
    x.fn = std::make_shared<const Function>(std::move(fn));
    return x;
  }
  static Value FromJson(const nlohmann::ordered_json& j);

  bool defined() const { return kind != Kind::kUndefined; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  double number() const {
    return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i);
  }
  // Python's bool(x).
  bool Truthy() const;
  // The item of a dict (Undefined when absent).
  Value Get(const std::string& key) const;
  const char* TypeName() const;

 private:
  static Value Of(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
};

// Python's ==.
bool Equals(const Value& a, const Value& b);
// Python's <; TemplateError for types Python cannot order.
bool Less(const Value& a, const Value& b);
// What {{ v }} prints: str(v), "" for Undefined.
std::string ToStr(const Value& v);
// Python's repr(v).
std::string Repr(const Value& v);
// json.dumps(v, ensure_ascii=False, indent=indent (< 0: none), sort_keys=sort_keys), with
// json.dumps' separators unless `item_sep` / `key_sep` are given.
struct JsonStyle {
  int indent = -1;
  bool sort_keys = false;
  const char* item_sep = nullptr;  // default ", " (or "," with an indent)
  const char* key_sep = nullptr;   // default ": "
};
std::string ToJson(const Value& v, const JsonStyle& style);
// Python's repr of a float ("1.0", "0.1", "1e-05").
std::string FloatRepr(double d);

}  // namespace ptxserve::jinja
