// The runtime value of the template interpreter: the Python objects a Hugging Face chat
// template sees (None, bool, int, float, str, list/tuple, dict, jinja2 Undefined and
// Namespace, callables), with Python's printing, truthiness and equality.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ptxserve::chat {

// Raised while rendering; ChatTemplate::Render turns it into InvalidArgument. The
// evaluator is deeply recursive and any error ends the whole render, so unwinding to
// that one boundary keeps every operator free of status plumbing.
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& message, int line = 0)
      : std::runtime_error(message), line_(line) {}
  int line() const { return line_; }  // 0 until the statement being run is known

 private:
  int line_;
};

class Value;
struct Callable;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes printing: (1, 2) instead of [1, 2]
};

// Insertion-ordered like a Python dict; keys are str (JSON objects and template
// literals only produce str keys). Small, so lookups scan.
struct DictData {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // Undefined without a name
  static Value Undefined(std::string message) {
    Value v;
    v.str_ = std::move(message);
    return v;
  }
  static Value None() { return Value(Kind::kNone); }
  static Value Bool(bool b) {
    Value v(Kind::kBool);
    v.int_ = b;
    return v;
  }
  static Value Int(int64_t i) {
    Value v(Kind::kInt);
    v.int_ = i;
    return v;
  }
  static Value Float(double d) {
    Value v(Kind::kFloat);
    v.float_ = d;
    return v;
  }
  static Value String(std::string s) {
    Value v(Kind::kString);
    v.str_ = std::move(s);
    return v;
  }
  static Value List(std::vector<Value> items, bool is_tuple = false);
  static Value Dict(DictData dict);
  static Value Namespace(DictData attrs);
  static Value Function(std::shared_ptr<const Callable> callable);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  // int or bool: Python's bool is an int subclass, so arithmetic and indexing take both.
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  bool is_number() const { return is_integral() || kind_ == Kind::kFloat; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return str_; }
  // The jinja2 message for using this Undefined, e.g. "'x' is undefined".
  const std::string& undefined_message() const { return str_; }
  const ListData& list() const { return *list_; }
  const DictData& dict() const { return *dict_; }
  DictData& namespace_attrs() const { return *dict_; }  // namespaces are shared and mutable
  const Callable& callable() const { return *callable_; }

  // Python truthiness.
  bool Truthy() const;
  // str(value) as {{ }} prints it: Undefined is "", None "None", lists and dicts repr.
  std::string ToString() const;
  // repr(value), as items inside a printed list or dict appear.
  std::string Repr() const;
  // The Python type name for error messages ("str", "list", "NoneType", ...).
  std::string TypeName() const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::string str_;  // string value, or the Undefined message
  std::shared_ptr<const ListData> list_;
  std::shared_ptr<DictData> dict_;  // dict (never mutated once built) or namespace
  std::shared_ptr<const Callable> callable_;
};

// Python ==, deep for lists and dicts; 1 == 1.0 == True; Undefined equals Undefined.
bool Equals(const Value& a, const Value& b);
// Python <, for numbers, strings and lists; other pairs are a TemplateError.
bool Less(const Value& a, const Value& b);
// Python's repr() of a float (shortest round-trip digits, "1.0", "1e+16").
std::string FormatPyFloat(double d);

}  // namespace ptxserve::chat
