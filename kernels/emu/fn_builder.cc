// FnBuilder: register slots, constant and special-register slots, and the shared and
// local memory layout of one function.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "kernels/emu/parse_types.h"

namespace ptxserve::emu {

absl::StatusOr<uint16_t> FnBuilder::NewSlot(std::string name) {
  if (fn->num_slots >= 65000) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("function %s needs more than 65000 register slots", fn->name));
  }
  fn->slot_names.push_back(std::move(name));
  return static_cast<uint16_t>(fn->num_slots++);
}

absl::StatusOr<uint16_t> FnBuilder::ConstSlot(uint64_t bits) {
  auto it = const_slots.find(bits);
  if (it != const_slots.end()) return it->second;
  auto slot = NewSlot(absl::StrFormat("0x%x", bits));
  if (!slot.ok()) return slot.status();
  const_slots[bits] = *slot;
  fn->consts.emplace_back(*slot, bits);
  return *slot;
}

absl::StatusOr<uint16_t> FnBuilder::SpecialSlot(Special s) {
  auto it = special_slots.find(static_cast<uint8_t>(s));
  if (it != special_slots.end()) return it->second;
  auto slot = NewSlot("%special");
  if (!slot.ok()) return slot.status();
  special_slots[static_cast<uint8_t>(s)] = *slot;
  fn->specials.emplace_back(*slot, s);
  return *slot;
}

absl::StatusOr<uint16_t> FnBuilder::SinkSlot() {
  if (sink_slot == UINT16_MAX) {
    auto slot = NewSlot("_");
    if (!slot.ok()) return slot.status();
    sink_slot = *slot;
  }
  return sink_slot;
}

absl::StatusOr<uint32_t> FnBuilder::SharedAddress(const std::string& name) {
  auto it = shared_offset.find(name);
  if (it != shared_offset.end()) return it->second;
  const SharedVar* v = nullptr;
  if (auto l = local_shared.find(name); l != local_shared.end()) {
    v = &l->second;
  } else if (module_shared != nullptr) {
    if (auto m = module_shared->find(name); m != module_shared->end()) v = &m->second;
  }
  if (v == nullptr) return absl::NotFoundError(name);
  uint32_t off;
  if (v->is_extern) {
    fn->uses_dynamic_shared = true;
    off = fn->dynamic_offset;  // fixed by DecodeFunction once every static variable is placed
  } else {
    const uint32_t a = std::max<uint32_t>(v->align, 1);
    off = (fn->static_shared + a - 1) / a * a;
    fn->static_shared = off + v->size;
  }
  shared_offset[name] = off;
  return off;
}

absl::StatusOr<uint32_t> FnBuilder::LocalAddress(const std::string& name) {
  auto it = local_offset.find(name);
  if (it != local_offset.end()) return it->second;
  auto v = local_vars.find(name);
  if (v == local_vars.end()) return absl::NotFoundError(name);
  const uint32_t a = std::max<uint32_t>(v->second.align, 1);
  const uint32_t off = (fn->local_bytes + a - 1) / a * a;
  fn->local_bytes = off + v->second.size;
  local_offset[name] = off;
  return off;
}

}  // namespace ptxserve::emu
