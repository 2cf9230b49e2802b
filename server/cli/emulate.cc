// `ptxserve emulate`: run one kernel of a PTX file on the PTX emulator over buffers read
// from and written to files, and print its counters (kernels/emu/counters.h): a way to see
// what a kernel asks of a GPU's memory system without a GPU. The emulator checks every
// access, so a kernel that reads past a buffer fails here naming the thread and PTX line.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/cost/cost_model.h"
#include "kernels/emu/emulator.h"
#include "nlohmann/json.hpp"
#include "server/cli/cli_util.h"
#include "server/cli/common_flags.h"
#include "server/cli/subcommands.h"

ABSL_FLAG(std::string, ptx, "", "emulate: the PTX file to load");
ABSL_FLAG(std::string, entry, "", "emulate: the .entry to run");
ABSL_FLAG(std::string, grid, "1,1,1", "emulate: grid size X[,Y[,Z]]");
ABSL_FLAG(std::string, block, "", "emulate: block size X[,Y[,Z]] (threads)");
ABSL_FLAG(uint32_t, shared_bytes, 0, "emulate: dynamic shared memory bytes");
ABSL_FLAG(int32_t, threads, 1, "emulate: host threads running the blocks");
ABSL_FLAG(std::string, format, "table", "emulate: print the counters as a table or as json");
ABSL_FLAG(std::string, cost_devices, "h100,a100",
          "emulate: GPUs to estimate the launch's time on with the cost model (h100, a100; "
          "empty: none). Estimates from the counters, not measurements");
ABSL_FLAG(int32_t, registers, 0,
          "emulate: registers per thread for the estimate's occupancy (ptxas -v reports them; 0: "
          "taken as 32)");

namespace ptxserve::cli {
namespace {

constexpr char kUsage[] =
    "ptxserve emulate --ptx FILE --entry NAME --grid X,Y,Z --block X,Y,Z [--shared-bytes N]\n"
    "                 --arg SPEC ... [--threads N] [--format table|json]\n"
    "                 [--cost-devices h100,a100] [--registers N]\n"
    "One --arg per kernel parameter, in order: a scalar u32:5, s32:-1, u64:7, s64:-7,\n"
    "f32:1.5 or f64:0.25, or a buffer (its device address is the argument): in:FILE (the\n"
    "file's bytes), inout:FILE (the same, written back after the run) or out:FILE:BYTES\n"
    "(BYTES zero bytes, written to FILE after the run).";

// One launch's estimate (an eager launch), as a table line and as JSON.
std::string EstimateLine(const cost::DeviceSpec& d, const cost::Estimate& e) {
  return absl::StrFormat(
      "estimate (cost model, not measured) on %s: %.3f us, bound by %s; dram %.3f us at %.1f "
      "GB/s, tensor %.3f, fp32 %.3f, issue %.3f, sfu %.3f, shared %.3f, latency %.3f, launch "
      "%.3f us; %d CTAs/SM (%s), %d waves\n",
      d.description, e.seconds * 1e6, e.binding, e.dram_s * 1e6, e.dram_bandwidth / 1e9,
      e.tensor_s * 1e6, e.fp32_s * 1e6, e.issue_s * 1e6, e.sfu_s * 1e6, e.shared_s * 1e6,
      e.latency_s * 1e6, e.launch_s * 1e6, e.occupancy.ctas_per_sm, e.occupancy.limit, e.waves);
}

nlohmann::ordered_json EstimateJson(const cost::Estimate& e) {
  return {{"seconds", e.seconds},
          {"binding", e.binding},
          {"limits_seconds",
           {{"dram", e.dram_s},
            {"tensor", e.tensor_s},
            {"fp32", e.fp32_s},
            {"issue", e.issue_s},
            {"sfu", e.sfu_s},
            {"shared", e.shared_s},
            {"latency", e.latency_s},
            {"launch", e.launch_s}}},
          {"dram_bytes_per_second", e.dram_bandwidth},
          {"ctas_per_sm", e.occupancy.ctas_per_sm},
          {"occupancy_limit", e.occupancy.limit},
          {"waves", e.waves}};
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "emulate: %s\n", msg.c_str());
  return 1;
}

absl::StatusOr<emu::Dim3> ParseDim(const char* flag, const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  uint32_t v[3] = {1, 1, 1};
  bool ok = !parts.empty() && parts.size() <= 3;
  for (size_t i = 0; ok && i < parts.size(); ++i)
    ok = absl::SimpleAtoi(parts[i], &v[i]) && v[i] > 0;
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", text, ": want X[,Y[,Z]] with positive integers"));
  }
  return emu::Dim3{v[0], v[1], v[2]};
}

// One --arg: the bytes passed to the kernel, and for buffers the file and device memory.
struct Arg {
  std::string spec;
  std::vector<uint8_t> bytes;
  std::string file;     // in/inout/out
  bool write = false;   // inout/out: written back after the run
  uint64_t size = 0;    // buffer bytes
  uint64_t device = 0;  // buffer address
};

template <class T>
std::vector<uint8_t> Bytes(T v) {
  std::vector<uint8_t> b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}

// Parses `value` as a T into its raw bytes; false when it is not one.
template <class T>
bool ParseAs(const std::string& value, std::vector<uint8_t>* out) {
  T v;
  bool ok;
  if constexpr (std::is_same_v<T, float>) {
    ok = absl::SimpleAtof(value, &v);
  } else if constexpr (std::is_same_v<T, double>) {
    ok = absl::SimpleAtod(value, &v);
  } else {
    ok = absl::SimpleAtoi(value, &v);
  }
  if (ok) *out = Bytes(v);
  return ok;
}

// Parses a scalar of `kind` from `value` into raw bytes; false when it is not one.
bool Scalar(const std::string& kind, const std::string& value, std::vector<uint8_t>* out) {
  using Parser = bool (*)(const std::string&, std::vector<uint8_t>*);
  static constexpr std::pair<std::string_view, Parser> kKinds[] = {
      {"u32", ParseAs<uint32_t>}, {"s32", ParseAs<int32_t>}, {"u64", ParseAs<uint64_t>},
      {"s64", ParseAs<int64_t>},  {"f32", ParseAs<float>},   {"f64", ParseAs<double>}};
  for (const auto& [name, parse] : kKinds) {
    if (kind == name) return parse(value, out);
  }
  return false;
}

absl::StatusOr<Arg> ParseArg(int index, const std::string& spec) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--arg ", index, " (", spec, "): ", why));
  };
  Arg a;
  a.spec = spec;
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return bad("want KIND:VALUE (--help lists the kinds)");
  const std::string kind = spec.substr(0, colon), rest = spec.substr(colon + 1);
  if (kind == "in" || kind == "inout") {
    if (rest.empty()) return bad("no file named");
    a.file = rest;
    a.write = kind == "inout";
    auto data = ReadFileToString(rest);
    if (!data.ok()) return bad(std::string(data.status().message()));
    if (data->empty()) return bad("the file is empty (a kernel buffer needs at least a byte)");
    a.bytes.assign(data->begin(), data->end());
    a.size = a.bytes.size();
    return a;
  }
  if (kind == "out") {
    const size_t last = rest.rfind(':');
    if (last == std::string::npos || last == 0) return bad("want out:FILE:BYTES");
    a.file = rest.substr(0, last);
    a.write = true;
    if (!absl::SimpleAtoi(rest.substr(last + 1), &a.size) || a.size == 0) {
      return bad("BYTES must be a positive integer");
    }
    return a;
  }
  if (!Scalar(kind, rest, &a.bytes)) {
    return bad("want u32/s32/u64/s64/f32/f64:NUMBER or in:FILE, inout:FILE, out:FILE:BYTES");
  }
  return a;
}

bool IsBuffer(const Arg& a) { return !a.file.empty(); }

}  // namespace

int RunEmulate(int argc, char** argv) {
  // --arg repeats: take it out of argv before Abseil parses the rest (Abseil keeps only
  // the last value of a repeated flag).
  std::vector<std::string> specs;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--arg") {
      if (i + 1 >= argc) return Fail("--arg needs a value");
      specs.push_back(argv[++i]);
    } else if (a.rfind("--arg=", 0) == 0) {
      specs.push_back(a.substr(6));
    } else {
      rest.push_back(argv[i]);
    }
  }
  SetSubcommandFlags({"server/cli/emulate.cc"});
  ParseSubcommandFlags(static_cast<int>(rest.size()), rest.data(), kUsage);

  const std::string ptx_path = absl::GetFlag(FLAGS_ptx), entry = absl::GetFlag(FLAGS_entry);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (ptx_path.empty()) return Fail(std::string("--ptx is required\n") + kUsage);
  if (entry.empty()) return Fail("--entry is required");
  if (absl::GetFlag(FLAGS_block).empty()) return Fail("--block is required");
  if (format != "table" && format != "json") {
    return Fail("--format=" + format + ": want table or json");
  }
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 1 || threads > 256) return Fail("--threads must be 1..256");
  std::vector<const cost::DeviceSpec*> devices;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_cost_devices), ',', absl::SkipEmpty())) {
    const cost::DeviceSpec* d = cost::FindDevice(std::string_view(name.data(), name.size()));
    if (d == nullptr) {
      return Fail(absl::StrCat("--cost-devices: unknown device '", name, "', want ",
                               absl::StrJoin(cost::DeviceNames(), ", ")));
    }
    devices.push_back(d);
  }
  const int registers = absl::GetFlag(FLAGS_registers);
  if (registers < 0 || registers > 255) return Fail("--registers must be 0..255");
  auto grid = ParseDim("grid", absl::GetFlag(FLAGS_grid));
  if (!grid.ok()) return Fail(std::string(grid.status().message()));
  auto block = ParseDim("block", absl::GetFlag(FLAGS_block));
  if (!block.ok()) return Fail(std::string(block.status().message()));
  auto text = ReadFileToString(ptx_path);
  if (!text.ok()) return Fail("--ptx: " + std::string(text.status().message()));
  std::vector<Arg> args;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto a = ParseArg(static_cast<int>(i), specs[i]);
    if (!a.ok()) return Fail(std::string(a.status().message()));
    args.push_back(*std::move(a));
  }

  emu::EmulatorOptions opts;
  opts.collect_counters = true;
  opts.num_threads = threads;
  emu::Emulator e(opts);
  auto module = e.LoadModule(*text);
  if (!module.ok())
    return Fail("--ptx " + ptx_path + ": " + std::string(module.status().message()));
  auto fn = e.GetFunction(*module, entry);
  if (!fn.ok()) return Fail("--entry " + entry + ": no such .entry in " + ptx_path);
  auto params = e.GetParams(*fn);
  if (!params.ok()) return Fail(std::string(params.status().message()));
  if (params->size() != args.size()) {
    std::string names;
    for (const emu::ParamDesc& p : *params)
      absl::StrAppend(&names, names.empty() ? "" : ", ", p.name);
    return Fail(absl::StrFormat("%u --arg given, %s has %u parameters (%s)", args.size(), entry,
                                params->size(), names));
  }
  std::vector<emu::KernelArg> kargs;
  for (size_t i = 0; i < args.size(); ++i) {
    Arg& a = args[i];
    const emu::ParamDesc& p = (*params)[i];
    if (IsBuffer(a)) {
      auto d = e.Alloc(a.size);
      if (!d.ok())
        return Fail(absl::StrCat("--arg ", i, " (", a.spec, "): ", d.status().message()));
      a.device = *d;
      const absl::Status st = a.bytes.empty() ? e.Memset(a.device, 0, a.size)
                                              : e.CopyHtoD(a.device, a.bytes.data(), a.size);
      if (!st.ok()) return Fail(absl::StrCat("--arg ", i, " (", a.spec, "): ", st.message()));
      a.bytes = Bytes(a.device);
    }
    if (a.bytes.size() != p.size) {
      return Fail(absl::StrFormat("--arg %u (%s): parameter %s has %u bytes, the argument %u%s", i,
                                  a.spec, p.name, p.size, a.bytes.size(),
                                  IsBuffer(a) ? " (a device address)" : ""));
    }
    kargs.push_back(emu::KernelArg{a.bytes});
  }
  const absl::Status st = e.Launch(*fn, *grid, *block, absl::GetFlag(FLAGS_shared_bytes), kargs);
  if (!st.ok()) return Fail(std::string(st.message()));
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    if (!a.write) continue;
    std::vector<char> data(a.size);
    if (auto s = e.CopyDtoH(data.data(), a.device, a.size); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    std::ofstream f(a.file, std::ios::binary | std::ios::trunc);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f.good()) return Fail(absl::StrCat("--arg ", i, " (", a.spec, "): cannot write ", a.file));
  }
  const std::vector<emu::KernelCounters> counters = e.TakeCounters();
  if (counters.size() != 1) return Fail("the emulator kept no counters for the launch");
  const cost::LaunchResources resources{.registers_per_thread = registers};
  if (format == "json") {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(counters[0].ToJson());
    for (const cost::DeviceSpec* d : devices) {
      j["estimates"][d->name] =
          EstimateJson(cost::EstimateLaunch(*d, counters[0], resources, false));
    }
    std::fputs((j.dump() + "\n").c_str(), stdout);
    return 0;
  }
  // The table names buffers by device address: say which --arg each one is.
  std::string out = counters[0].ToString();
  for (const cost::DeviceSpec* d : devices) {
    out += EstimateLine(*d, cost::EstimateLaunch(*d, counters[0], resources, false));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (IsBuffer(args[i])) {
      absl::StrAppendFormat(&out, "--arg %u (%s) is buffer 0x%x\n", i, args[i].spec,
                            args[i].device);
    }
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace ptxserve::cli
