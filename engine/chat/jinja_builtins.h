// The filters, tests and methods of the chat-template interpreter: those Jinja2 and
// Python provide that the chat templates of the common model families call. Each throws
// TemplateError on bad arguments, as Jinja2 raises.
#pragma once

#include <string>

#include "engine/chat/jinja_value.h"

namespace ptxserve::jinja {

// Calls a filter or a test on a value; `found` is false for an unknown name.
Value ApplyFilter(const std::string& name, const Value& input, const Args& args,
                  const Kwargs& kwargs, bool* found);
bool ApplyTest(const std::string& name, const Value& input, const Args& args, bool* found);
bool IsKnownFilter(const std::string& name);
bool IsKnownTest(const std::string& name);

// `obj.name` as Jinja2 resolves it: a dict's item (or its method: items, keys, values,
// get), a string's method, or Undefined.
Value GetAttribute(const Value& obj, const std::string& name);
// `obj[key]`: a dict's item, a list's or string's element (negative from the end), or
// Undefined.
Value GetItem(const Value& obj, const Value& key);
// `obj[start:stop:step]` of a list or string (null parts are Undefined).
Value GetSlice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python's str.strip() characters.
inline constexpr const char* kPySpace = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f";

}  // namespace ptxserve::jinja
