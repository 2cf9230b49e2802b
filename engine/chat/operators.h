// Python's arithmetic, comparison and membership operators on template values, with
// CPython's TypeError messages where an operand does not fit.
#pragma once

#include "engine/chat/ast.h"
#include "engine/chat/value.h"

namespace ptxserve::chat {

Value Arithmetic(BinOp op, const Value& a, const Value& b);
bool Compare(CmpOp op, const Value& a, const Value& b);
bool Contains(const Value& container, const Value& item);  // `item in container`
Value Negate(const Value& v, bool minus);                  // unary - and +

// Throws the jinja2 UndefinedError when `v` is Undefined.
void RequireDefined(const Value& v);

}  // namespace ptxserve::chat
