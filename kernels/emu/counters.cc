// KernelCounters' text and JSON forms. JSON is written by hand: kernels/ depends on the
// standard library and Abseil only, and every value here is a number or a C identifier.
#include "kernels/emu/counters.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ptxserve::emu {
namespace {

constexpr const char* kClassNames[kNumInstrClasses] = {
    "tensor",       "fp32",        "fp_other",    "sfu",          "int",         "load_global",
    "store_global", "atom_global", "load_shared", "store_shared", "atom_shared", "local",
    "param",        "async_copy",  "warp",        "barrier",      "control",     "other"};

double Ratio(uint64_t a, uint64_t b) {
  return b == 0 ? 0.0 : static_cast<double>(a) / static_cast<double>(b);
}

std::string Dims(const std::array<uint32_t, 3>& d) {
  return absl::StrFormat("(%u,%u,%u)", d[0], d[1], d[2]);
}

std::string GlobalLine(const char* what, const GlobalTraffic& t) {
  return absl::StrFormat("  %-14s requests %-10u sectors %-10u sectors/request %.2f (ideal %.2f)\n",
                         what, t.requests, t.sectors, t.SectorsPerRequest(),
                         Ratio(t.ideal_sectors, t.requests));
}

std::string SharedLine(const char* what, const SharedTraffic& t) {
  return absl::StrFormat("  %-14s requests %-10u wavefronts %-10u bank conflicts %u\n", what,
                         t.requests, t.wavefronts, t.BankConflicts());
}

std::string GlobalJson(const GlobalTraffic& t) {
  return absl::StrFormat(
      R"({"requests":%u,"sectors":%u,"ideal_sectors":%u,"sectors_per_request":%.4f})", t.requests,
      t.sectors, t.ideal_sectors, t.SectorsPerRequest());
}

std::string SharedJson(const SharedTraffic& t) {
  return absl::StrFormat(
      R"({"requests":%u,"wavefronts":%u,"ideal_wavefronts":%u,"bank_conflicts":%u})", t.requests,
      t.wavefronts, t.ideal_wavefronts, t.BankConflicts());
}

}  // namespace

const char* InstrClassName(InstrClass c) {
  const int i = static_cast<int>(c);
  return i >= 0 && i < kNumInstrClasses ? kClassNames[i] : "?";
}

uint64_t PtxHash(std::string_view ptx) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a's offset basis and prime
  for (const char c : ptx) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

const BufferTraffic* KernelCounters::Buffer(uint64_t addr) const {
  for (const BufferTraffic& b : buffers) {
    if (addr >= b.base && addr - b.base < b.size) return &b;
  }
  return nullptr;
}

double KernelCounters::LoadLatenciesPerWarp() const {
  const uint64_t warps = ctas * ((uint64_t{block[0]} * block[1] * block[2] + 31) / 32);
  return Ratio(load_wait_steps, warps * kLoadLatencySteps);
}

std::string KernelCounters::ToString() const {
  const std::string run = sampled_ctas == ctas
                              ? std::string("all run")
                              : absl::StrFormat("%u run, counts scaled to the grid", sampled_ctas);
  std::string s =
      absl::StrFormat("kernel %s  grid %s  block %s  dynamic shared %u B  CTAs %u (%s)\n", kernel,
                      Dims(grid), Dims(block), dynamic_shared_bytes, ctas, run);
  absl::StrAppendFormat(&s, "warp instructions %u (thread instructions %u)\n", warp_instructions,
                        thread_instructions);
  std::vector<std::string> mix;
  for (int i = 0; i < kNumInstrClasses; ++i) {
    if (instructions[i] != 0) mix.push_back(absl::StrCat(kClassNames[i], " ", instructions[i]));
  }
  absl::StrAppend(&s, "  by class: ", absl::StrJoin(mix, ", "), "\n");
  s += "global memory\n";
  s += GlobalLine("loads", global_load);
  s += GlobalLine("stores", global_store);
  s += GlobalLine("atomics", global_atomic);
  s += "shared memory (32 banks x 4 B; conflicts = extra wavefronts)\n";
  s += SharedLine("loads", shared_load);
  s += SharedLine("stores", shared_store);
  absl::StrAppendFormat(&s, "load waits %u steps (%.2f load latencies per warp)\n", load_wait_steps,
                        LoadLatenciesPerWarp());
  absl::StrAppendFormat(&s, "longest warp %u steps (%u of them waits)\n", longest_warp_steps,
                        longest_warp_wait_steps);
  absl::StrAppendFormat(&s,
                        "DRAM (each 32-byte sector once per launch)\n  read %u B  written %u B\n",
                        dram_read_bytes, dram_write_bytes);
  for (const BufferTraffic& b : buffers) {
    absl::StrAppendFormat(&s,
                          "  buffer 0x%x (%u B): read %u B  written %u B  requests %u  "
                          "sectors/request %.2f (ideal %.2f)\n",
                          b.base, b.size, b.dram_read_bytes, b.dram_write_bytes, b.access.requests,
                          b.access.SectorsPerRequest(),
                          Ratio(b.access.ideal_sectors, b.access.requests));
  }
  absl::StrAppendFormat(&s, "FLOPs  tensor %u  fp32 %u\n", tensor_flops, fp32_flops);
  return s;
}

std::string KernelCounters::ToJson() const {
  std::vector<std::string> mix;
  for (int i = 0; i < kNumInstrClasses; ++i) {
    mix.push_back(absl::StrFormat(R"("%s":%u)", kClassNames[i], instructions[i]));
  }
  std::vector<std::string> bufs;
  for (const BufferTraffic& b : buffers) {
    bufs.push_back(absl::StrFormat(
        R"({"base":%u,"size":%u,"access":%s,"dram_read_bytes":%u,"dram_write_bytes":%u})", b.base,
        b.size, GlobalJson(b.access), b.dram_read_bytes, b.dram_write_bytes));
  }
  return absl::StrCat(
      absl::StrFormat(R"({"kernel":"%s","ptx_hash":"%016x","grid":[%u,%u,%u],"block":[%u,%u,%u],)",
                      kernel, ptx_hash, grid[0], grid[1], grid[2], block[0], block[1], block[2]),
      absl::StrFormat(
          R"("dynamic_shared_bytes":%u,"ctas":%u,"sampled_ctas":%u,"warp_instructions":%u,)",
          dynamic_shared_bytes, ctas, sampled_ctas, warp_instructions),
      absl::StrFormat(R"("thread_instructions":%u,"instructions":{%s},)", thread_instructions,
                      absl::StrJoin(mix, ",")),
      R"("global_load":)", GlobalJson(global_load), R"(,"global_store":)", GlobalJson(global_store),
      R"(,"global_atomic":)", GlobalJson(global_atomic), R"(,"shared_load":)",
      SharedJson(shared_load), R"(,"shared_store":)", SharedJson(shared_store),
      absl::StrFormat(R"(,"load_wait_steps":%u,"longest_warp_steps":%u,)", load_wait_steps,
                      longest_warp_steps),
      absl::StrFormat(R"("longest_warp_wait_steps":%u)", longest_warp_wait_steps),
      absl::StrFormat(R"(,"dram_read_bytes":%u,"dram_write_bytes":%u,"buffers":[%s],)",
                      dram_read_bytes, dram_write_bytes, absl::StrJoin(bufs, ",")),
      absl::StrFormat(R"("tensor_flops":%u,"fp32_flops":%u})", tensor_flops, fp32_flops));
}

}  // namespace ptxserve::emu
