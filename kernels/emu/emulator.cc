#include "kernels/emu/emulator.h"

#include <chrono>
#include <iterator>
#include <utility>

#include "absl/strings/str_format.h"
#include "kernels/emu/dependent_launch.h"
#include "kernels/emu/executor.h"
#include "kernels/emu/mem_access.h"
#include "kernels/emu/module.h"

namespace ptxserve::emu {
namespace {

// Guard gap after each allocation: at least 64 KiB and at least the allocation's own size,
// so an index that overruns by up to 2x lands in unmapped space instead of a neighbour.
uint64_t GapAfter(uint64_t size) { return std::max<uint64_t>(size, 64 * 1024); }
uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

Emulator::Emulator(EmulatorOptions opts)
    : opts_(opts), pending_writes_(std::make_unique<WriteRanges>()) {}
Emulator::~Emulator() = default;

void Emulator::RebuildTable() {
  table_.clear();
  table_.reserve(buffers_.size());
  for (auto& [base, b] : buffers_) table_.push_back(Allocation{base, b.size, b.host.get()});
}

absl::StatusOr<uint64_t> Emulator::Alloc(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes == 0) return absl::InvalidArgumentError("Alloc: size 0");
  if (used_bytes_ + bytes > opts_.max_device_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("Alloc of %u bytes: %u of %u device bytes already in use", bytes,
                        used_bytes_, opts_.max_device_bytes));
  }
  Buffer b;
  b.size = bytes;
  b.host.reset(new (std::nothrow) uint8_t[bytes]);
  if (b.host == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat("Alloc of %u bytes: host OOM", bytes));
  }
  if (opts_.poison_allocations) std::memset(b.host.get(), 0xff, bytes);
  const uint64_t base = next_addr_;
  next_addr_ = AlignUp(base + bytes + GapAfter(bytes), 4096);
  used_bytes_ += bytes;
  buffers_.emplace(base, std::move(b));
  RebuildTable();
  return base;
}

absl::Status Emulator::Free(uint64_t dptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.find(dptr);
  if (it == buffers_.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Free: 0x%x is not the base of a live allocation", dptr));
  }
  used_bytes_ -= it->second.size;
  buffers_.erase(it);
  RebuildTable();
  return absl::OkStatus();
}

absl::StatusOr<uint8_t*> Emulator::Range(uint64_t addr, size_t n, const char* what) {
  auto it = buffers_.upper_bound(addr);
  if (it != buffers_.begin()) {
    --it;
    const uint64_t off = addr - it->first;
    if (off < it->second.size && n <= it->second.size - off) return it->second.host.get() + off;
    if (off < it->second.size) {
      return absl::OutOfRangeError(
          absl::StrFormat("%s: [0x%x, +%u) overruns the allocation at 0x%x of %u bytes", what, addr,
                          n, it->first, it->second.size));
    }
  }
  return absl::OutOfRangeError(
      absl::StrFormat("%s: device address 0x%x is not inside a live allocation", what, addr));
}

absl::Status Emulator::CopyHtoD(uint64_t dst, const void* src, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_writes_->clear();  // the stream's order is complete again
  if (n == 0) return absl::OkStatus();
  auto d = Range(dst, n, "CopyHtoD");
  if (!d.ok()) return d.status();
  std::memcpy(*d, src, n);
  stats_.bytes_htod += n;
  return absl::OkStatus();
}

absl::Status Emulator::CopyDtoH(void* dst, uint64_t src, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_writes_->clear();  // the stream's order is complete again
  if (n == 0) return absl::OkStatus();
  auto s = Range(src, n, "CopyDtoH");
  if (!s.ok()) return s.status();
  std::memcpy(dst, *s, n);
  stats_.bytes_dtoh += n;
  return absl::OkStatus();
}

absl::Status Emulator::CopyDtoD(uint64_t dst, uint64_t src, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_writes_->clear();  // the stream's order is complete again
  if (n == 0) return absl::OkStatus();
  auto s = Range(src, n, "CopyDtoD source");
  if (!s.ok()) return s.status();
  auto d = Range(dst, n, "CopyDtoD destination");
  if (!d.ok()) return d.status();
  std::memmove(*d, *s, n);
  stats_.bytes_dtod += n;
  return absl::OkStatus();
}

absl::Status Emulator::Memset(uint64_t dst, uint8_t value, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_writes_->clear();  // the stream's order is complete again
  if (n == 0) return absl::OkStatus();
  auto d = Range(dst, n, "Memset");
  if (!d.ok()) return d.status();
  std::memset(*d, value, n);
  return absl::OkStatus();
}

absl::Status Emulator::MemsetD32(uint64_t dst, uint32_t value, size_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_writes_->clear();  // the stream's order is complete again
  if (count == 0) return absl::OkStatus();
  if (dst % 4 != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MemsetD32: 0x%x is not 4-byte aligned", dst));
  }
  auto d = Range(dst, count * 4, "MemsetD32");
  if (!d.ok()) return d.status();
  for (size_t i = 0; i < count; ++i) std::memcpy(*d + 4 * i, &value, 4);
  return absl::OkStatus();
}

void Emulator::MemInfo(uint64_t* used, uint64_t* total) const {
  std::lock_guard<std::mutex> lock(mu_);
  *used = used_bytes_;
  *total = opts_.max_device_bytes;
}

absl::StatusOr<ModuleHandle> Emulator::LoadModule(std::string_view ptx_text) {
  auto mod = ParseModule(ptx_text);
  if (!mod.ok()) return mod.status();
  (*mod)->ptx_hash = PtxHash(ptx_text);
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t id = next_module_++;
  modules_[id] = std::move(*mod);
  return ModuleHandle{id};
}

absl::Status Emulator::UnloadModule(ModuleHandle m) {
  std::lock_guard<std::mutex> lock(mu_);
  if (modules_.erase(m.id) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("UnloadModule: no module %u", m.id));
  }
  return absl::OkStatus();
}

absl::StatusOr<FunctionHandle> Emulator::GetFunction(ModuleHandle m, std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(m.id);
  if (it == modules_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat("GetFunction: no module %u", m.id));
  }
  const auto& fns = it->second->functions;
  for (size_t i = 0; i < fns.size(); ++i) {
    if (fns[i]->name == name) return FunctionHandle{m.id, static_cast<uint32_t>(i)};
  }
  return absl::NotFoundError(
      absl::StrFormat("GetFunction: module %u has no .entry %s", m.id, name));
}

namespace {
const Function* FindFn(const std::map<uint32_t, std::unique_ptr<Module>>& modules,
                       FunctionHandle f) {
  auto it = modules.find(f.module);
  if (it == modules.end() || f.index >= it->second->functions.size()) return nullptr;
  return it->second->functions[f.index].get();
}
}  // namespace

absl::StatusOr<std::vector<ParamDesc>> Emulator::GetParams(FunctionHandle f) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Function* fn = FindFn(modules_, f);
  if (fn == nullptr) return absl::InvalidArgumentError("GetParams: invalid function handle");
  std::vector<ParamDesc> out;
  for (const auto& p : fn->params) out.push_back(ParamDesc{p.name, p.offset, p.size});
  return out;
}

absl::StatusOr<uint32_t> Emulator::GetStaticSharedBytes(FunctionHandle f) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Function* fn = FindFn(modules_, f);
  if (fn == nullptr) return absl::InvalidArgumentError("invalid function handle");
  return fn->static_shared;
}

absl::Status Emulator::Launch(FunctionHandle f, Dim3 grid, Dim3 block, uint32_t dyn,
                              const std::vector<KernelArg>& args) {
  std::lock_guard<std::mutex> lock(mu_);
  const Function* fn = FindFn(modules_, f);
  if (fn == nullptr) return absl::InvalidArgumentError("Launch: invalid function handle");
  if (args.size() != fn->params.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Launch %s: %u arguments given, the kernel has %u parameters", fn->name,
                        args.size(), fn->params.size()));
  }
  std::vector<const uint8_t*> ptrs;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].bytes.size() != fn->params[i].size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Launch %s: argument %u (%s) has %u bytes, the parameter needs %u", fn->name, i,
          fn->params[i].name, args[i].bytes.size(), fn->params[i].size));
    }
    ptrs.push_back(args[i].bytes.data());
  }
  return LaunchLocked(f, grid, block, dyn, ptrs);
}

absl::Status Emulator::LaunchRaw(FunctionHandle f, Dim3 grid, Dim3 block, uint32_t dyn,
                                 void* const* params) {
  std::lock_guard<std::mutex> lock(mu_);
  const Function* fn = FindFn(modules_, f);
  if (fn == nullptr) return absl::InvalidArgumentError("Launch: invalid function handle");
  if (params == nullptr && !fn->params.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Launch %s: kernelParams is null but the kernel has parameters", fn->name));
  }
  std::vector<const uint8_t*> ptrs;
  for (size_t i = 0; i < fn->params.size(); ++i) {
    ptrs.push_back(static_cast<const uint8_t*>(params[i]));
  }
  return LaunchLocked(f, grid, block, dyn, ptrs);
}

absl::Status Emulator::LaunchLocked(FunctionHandle f, Dim3 grid, Dim3 block, uint32_t dyn,
                                    const std::vector<const uint8_t*>& args) {
  const Function* fn = FindFn(modules_, f);
  const auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrFormat("Launch %s: %s", fn->name, what));
  };
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 ||
      grid.x > 0x7fffffffu) {
    return bad(absl::StrFormat("invalid grid (%u,%u,%u)", grid.x, grid.y, grid.z));
  }
  const uint64_t nthreads = uint64_t{block.x} * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.z > 64 || nthreads > 1024) {
    return bad(absl::StrFormat("invalid block (%u,%u,%u): at most 1024 threads, z <= 64", block.x,
                               block.y, block.z));
  }
  const Dim3u& rq = fn->reqntid;
  if (rq.x != 0 && (block.x != rq.x || block.y != rq.y || block.z != rq.z)) {
    return bad(absl::StrFormat("block (%u,%u,%u) differs from .reqntid %u,%u,%u", block.x, block.y,
                               block.z, rq.x, rq.y, rq.z));
  }
  const Dim3u& mx = fn->maxntid;
  if (mx.x != 0 && nthreads > uint64_t{mx.x} * mx.y * mx.z) {
    return bad(absl::StrFormat("%u threads exceed .maxntid %u,%u,%u", nthreads, mx.x, mx.y, mx.z));
  }
  const uint64_t shared =
      uint64_t{fn->uses_dynamic_shared ? fn->dynamic_offset : fn->static_shared} + dyn;
  if (shared > opts_.max_shared_bytes) {
    return bad(absl::StrFormat("%u bytes of shared memory (%u static + %u dynamic) exceed %u",
                               shared, fn->static_shared, dyn, opts_.max_shared_bytes));
  }
  LaunchConfig cfg;
  cfg.fn = fn;
  cfg.grid = Dim3u{grid.x, grid.y, grid.z};
  cfg.block = Dim3u{block.x, block.y, block.z};
  cfg.dynamic_shared = dyn;
  cfg.params.assign(fn->param_bytes, 0);
  for (size_t i = 0; i < fn->params.size(); ++i) {
    if (fn->params[i].size != 0) {
      std::memcpy(cfg.params.data() + fn->params[i].offset, args[i], fn->params[i].size);
    }
  }
  cfg.allocs = table_.data();
  cfg.num_allocs = table_.size();
  cfg.num_threads = opts_.num_threads;
  cfg.max_warp_instructions = opts_.max_warp_instructions;
  cfg.sample_ctas = opts_.collect_counters ? opts_.sample_ctas : 0;
  cfg.poison_shared = opts_.poison_shared;
  cfg.detect_shared_races = opts_.detect_shared_races;
  if (opts_.detect_global_races) {
    while (race_tables_.size() < static_cast<size_t>(std::max(opts_.num_threads, 1))) {
      race_tables_.push_back(std::make_unique<GlobalWrites>());
    }
    for (const auto& t : race_tables_) cfg.global_writes.push_back(t.get());
  }
  // Programmatic dependent launch: a kernel that waits is checked against the writes of the
  // kernels that may still run beside it; a kernel that lets its dependents launch early
  // logs its writes for the next.
  if (fn->waits_on_grid) cfg.dependent_guard = pending_writes_.get();
  if (fn->triggers_dependents) {
    while (dependent_logs_.size() < static_cast<size_t>(std::max(opts_.num_threads, 1))) {
      dependent_logs_.push_back(std::make_unique<DependentLaunchLog>());
    }
    for (const auto& l : dependent_logs_) {
      *l = DependentLaunchLog();
      cfg.dependent_logs.push_back(l.get());
    }
  }
  LaunchCounters counters;
  KernelCounters kc;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status st = ExecuteLaunch(cfg, &counters, opts_.collect_counters ? &kc : nullptr);
  bool triggered = false;
  for (const DependentLaunchLog* l : cfg.dependent_logs) triggered = triggered || l->triggered;
  // The next kernel may overlap this one when it triggered, and this one's predecessors too
  // when it waits (it may have triggered before its wait).
  if (!triggered || !fn->waits_on_grid) pending_writes_->clear();
  if (triggered) {
    for (const DependentLaunchLog* l : cfg.dependent_logs) pending_writes_->Merge(l->writes);
  }
  stats_.launch_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.launches;
  stats_.warp_instructions += counters.warp_instructions;
  stats_.thread_instructions += counters.thread_instructions;
  if (st.ok() && opts_.collect_counters && opts_.counters_history != 0) {
    kc.kernel = fn->name;
    kc.ptx_hash = modules_.at(f.module)->ptx_hash;
    kc.grid = {grid.x, grid.y, grid.z};
    kc.block = {block.x, block.y, block.z};
    kc.static_shared_bytes = fn->static_shared;
    kc.dynamic_shared_bytes = dyn;
    kc.grid_dependent = fn->waits_on_grid;
    if (counters_.size() == opts_.counters_history) counters_.pop_front();
    counters_.push_back(std::move(kc));
  }
  return st;
}

EmulatorStats Emulator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Emulator::SetCollectCounters(bool on, uint64_t sample_ctas) {
  std::lock_guard<std::mutex> lock(mu_);
  opts_.collect_counters = on;
  opts_.sample_ctas = sample_ctas;
}

std::vector<KernelCounters> Emulator::TakeCounters() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<KernelCounters> out(std::make_move_iterator(counters_.begin()),
                                  std::make_move_iterator(counters_.end()));
  counters_.clear();
  return out;
}

}  // namespace ptxserve::emu
