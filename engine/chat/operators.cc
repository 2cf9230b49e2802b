#include "engine/chat/operators.h"

#include <cmath>
#include <iterator>
#include <string>

#include "engine/chat/pystr.h"

namespace ptxserve::chat {
namespace {

const char* Symbol(BinOp op) {
  // In BinOp's order.
  static constexpr const char* kSymbols[] = {"+", "-", "*", "/", "//", "%", "** or pow()"};
  static_assert(std::size(kSymbols) == static_cast<size_t>(BinOp::kPow) + 1);
  return kSymbols[static_cast<size_t>(op)];
}

[[noreturn]] void Unsupported(BinOp op, const Value& a, const Value& b) {
  if (op == BinOp::kAdd && a.is_string()) {
    throw TemplateError("can only concatenate str (not \"" + b.TypeName() + "\") to str");
  }
  throw TemplateError(std::string("unsupported operand type(s) for ") + Symbol(op) + ": '" +
                      a.TypeName() + "' and '" + b.TypeName() + "'");
}

Value Repeat(const Value& seq, int64_t times) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value::String(std::move(out));
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i) {
    items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
  }
  return Value::List(std::move(items), seq.list().is_tuple);
}

int64_t FloorDivInt(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

Value FloatArithmetic(BinOp op, double x, double y) {
  switch (op) {
    case BinOp::kAdd:
      return Value::Float(x + y);
    case BinOp::kSub:
      return Value::Float(x - y);
    case BinOp::kMul:
      return Value::Float(x * y);
    case BinOp::kDiv:
      if (y == 0) throw TemplateError("float division by zero");
      return Value::Float(x / y);
    case BinOp::kFloorDiv:
      if (y == 0) throw TemplateError("float floor division by zero");
      return Value::Float(std::floor(x / y));
    case BinOp::kMod: {
      if (y == 0) throw TemplateError("float modulo");
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::Float(m);
    }
    case BinOp::kPow: {
      if (x == 0 && y < 0) throw TemplateError("0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y))
        throw TemplateError("unsupported construct: complex result of **");
      const double r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
        throw TemplateError("(34, 'Numerical result out of range')");
      return Value::Float(r);
    }
  }
  return Value::None();
}

// Python ints are unbounded; ours are 64-bit, and a result that does not fit is an error
// rather than a silently wrapped number.
void CheckOverflow(bool overflow) {
  if (overflow) throw TemplateError("unsupported construct: integer result beyond 64 bits");
}

Value IntegerArithmetic(BinOp op, int64_t x, int64_t y) {
  int64_t r = 0;
  switch (op) {
    case BinOp::kAdd:
      CheckOverflow(__builtin_add_overflow(x, y, &r));
      return Value::Int(r);
    case BinOp::kSub:
      CheckOverflow(__builtin_sub_overflow(x, y, &r));
      return Value::Int(r);
    case BinOp::kMul:
      CheckOverflow(__builtin_mul_overflow(x, y, &r));
      return Value::Int(r);
    case BinOp::kDiv:
      if (y == 0) throw TemplateError("division by zero");
      return Value::Float(static_cast<double>(x) / static_cast<double>(y));
    case BinOp::kFloorDiv:
      if (y == 0) throw TemplateError("integer division or modulo by zero");
      return Value::Int(FloorDivInt(x, y));
    case BinOp::kMod:
      if (y == 0) throw TemplateError("integer division or modulo by zero");
      return Value::Int(x - FloorDivInt(x, y) * y);
    case BinOp::kPow: {
      if (y < 0) return FloatArithmetic(op, static_cast<double>(x), static_cast<double>(y));
      r = 1;
      for (int64_t i = 0; i < y && r != 0 && (r != 1 || x != 1); ++i) {
        CheckOverflow(__builtin_mul_overflow(r, x, &r));
      }
      return Value::Int(r);
    }
  }
  return Value::None();
}

}  // namespace

void RequireDefined(const Value& v) {
  if (v.is_undefined()) throw TemplateError(v.undefined_message());
}

Value Arithmetic(BinOp op, const Value& a, const Value& b) {
  RequireDefined(a);
  RequireDefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return IntegerArithmetic(op, a.as_int(), b.as_int());
    return FloatArithmetic(op, a.as_double(), b.as_double());
  }
  if (op == BinOp::kAdd) {
    if (a.is_string() && b.is_string()) return Value::String(a.str() + b.str());
    if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::List(std::move(items), a.list().is_tuple);
    }
  }
  if (op == BinOp::kMul) {
    if ((a.is_string() || a.is_list()) && b.is_integral()) return Repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return Repeat(b, a.as_int());
  }
  if (op == BinOp::kMod && a.is_string()) {
    throw TemplateError("unsupported construct: printf-style '%' string formatting");
  }
  Unsupported(op, a, b);
}

bool Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;  // Undefined iterates as empty
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw TemplateError("'in <string>' requires string as left operand, not " +
                            item.TypeName());
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.list().items) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (item.is_list() && !item.list().is_tuple) throw TemplateError("unhashable type: 'list'");
      if (item.is_dict()) throw TemplateError("unhashable type: 'dict'");
      return item.is_string() && container.dict().Find(item.str()) != nullptr;
    default:
      throw TemplateError("argument of type '" + container.TypeName() + "' is not iterable");
  }
}

bool Compare(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq:
      return Equals(a, b);
    case CmpOp::kNe:
      return !Equals(a, b);
    case CmpOp::kLt:
      return Less(a, b);
    case CmpOp::kGt:
      return Less(b, a);
    case CmpOp::kLe:
      return Equals(a, b) ? (Less(a, b), true) : Less(a, b);
    case CmpOp::kGe:
      return Equals(a, b) ? (Less(b, a), true) : Less(b, a);
    case CmpOp::kIn:
      return Contains(b, a);
    case CmpOp::kNotIn:
      return !Contains(b, a);
  }
  return false;
}

Value Negate(const Value& v, bool minus) {
  RequireDefined(v);
  if (v.is_integral()) return Value::Int(minus ? -v.as_int() : v.as_int());
  if (v.kind() == Value::Kind::kFloat) return Value::Float(minus ? -v.as_double() : v.as_double());
  throw TemplateError(std::string("bad operand type for unary ") + (minus ? "-" : "+") + ": '" +
                      v.TypeName() + "'");
}

}  // namespace ptxserve::chat
