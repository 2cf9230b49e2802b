#include "kernels/ptx/ptxas.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace ptxserve::ptx {
namespace {

// Runs `cmd`, returning its exit status and combined output.
int Run(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  return pclose(p);
}

std::string TempPath(const std::string& suffix) {
  static std::atomic<int> counter{0};
  return (std::filesystem::temp_directory_path() /
          ("ptxserve_ptxas_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + suffix))
      .string();
}

// Renames module i's entry to <name>_m<i> and drops the header directives of all but
// the first module, so the modules concatenate into one valid PTX file.
std::string Merge(const std::vector<PtxModule>& modules, size_t begin, size_t end) {
  std::string out;
  bool extern_declared = false;
  for (size_t i = begin; i < end; ++i) {
    std::istringstream in(modules[i].ptx);
    std::string line;
    while (std::getline(in, line)) {
      const bool header = line.rfind(".version", 0) == 0 || line.rfind(".target", 0) == 0 ||
                          line.rfind(".address_size", 0) == 0;
      if (header && i != begin) continue;
      if (line.rfind(".extern .shared", 0) == 0) {
        if (extern_declared) continue;
        extern_declared = true;
      }
      const std::string entry = ".visible .entry ";
      if (line.rfind(entry, 0) == 0) {
        const size_t paren = line.find('(');
        line = line.substr(0, paren) + "_m" + std::to_string(i) + line.substr(paren);
      }
      out += line + "\n";
    }
  }
  return out;
}

// The integer right after `prefix` in `line` (or before `suffix`), -1 when absent.
int NumberAfter(const std::string& line, const std::string& prefix) {
  const size_t pos = line.find(prefix);
  if (pos == std::string::npos) return -1;
  size_t i = pos + prefix.size();
  int v = 0;
  bool any = false;
  while (i < line.size() && line[i] >= '0' && line[i] <= '9') {
    v = v * 10 + (line[i++] - '0');
    any = true;
  }
  return any ? v : -1;
}

int NumberBefore(const std::string& line, const std::string& suffix) {
  const size_t pos = line.find(suffix);
  if (pos == std::string::npos) return -1;
  size_t b = pos;
  while (b > 0 && line[b - 1] >= '0' && line[b - 1] <= '9') --b;
  return b == pos ? -1 : std::stoi(line.substr(b, pos - b));
}

// ptxas -v prints, per entry: "Compiling entry function '<name>_m<i>'", then
// "<a> bytes spill stores, <b> bytes spill loads" and "Used <n> registers".
void ParseInfo(const std::string& log, const std::vector<PtxModule>& modules,
               std::vector<PtxasEntryInfo>* entries) {
  std::istringstream in(log);
  std::string line;
  int current = -1;
  while (std::getline(in, line)) {
    if (line.find("Compiling entry function '") != std::string::npos) {
      const size_t m = line.rfind("_m");
      current = m == std::string::npos ? -1 : NumberAfter(line.substr(m), "_m");
      if (current >= 0 && current < static_cast<int>(modules.size())) {
        (*entries)[current].label = modules[current].label;
      } else {
        current = -1;
      }
    } else if (current >= 0 && line.find("spill stores") != std::string::npos) {
      (*entries)[current].spill_stores = NumberBefore(line, " bytes spill stores");
      (*entries)[current].spill_loads = NumberBefore(line, " bytes spill loads");
    } else if (current >= 0 && line.find("Used ") != std::string::npos) {
      (*entries)[current].registers = NumberAfter(line, "Used ");
    }
  }
}

bool AssembleFile(const std::string& ptxas, const std::string& text, const std::string& arch,
                  std::string* log) {
  const std::string path = TempPath(".ptx");
  {
    std::ofstream f(path, std::ios::binary);
    f << text;
  }
  const int rc = Run(ptxas + " -v -arch=" + arch + " " + path + " -o /dev/null", log);
  std::filesystem::remove(path);
  return rc == 0;
}

}  // namespace

std::string FindPtxas() {
  std::string out;
  if (Run("command -v ptxas", &out) == 0 && !out.empty()) {
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
  }
  if (std::filesystem::exists("/usr/local/cuda/bin/ptxas")) return "/usr/local/cuda/bin/ptxas";
  return "";
}

PtxasResult AssembleAll(const std::string& ptxas, const std::vector<PtxModule>& modules,
                        const std::string& arch) {
  PtxasResult r;
  r.entries.resize(modules.size());
  constexpr size_t kBatch = 12;
  const size_t batches = (modules.size() + kBatch - 1) / kBatch;
  std::vector<std::string> logs(batches);
  std::vector<char> ok(batches, 0);
  // Two workers: CI machines have two cores, and ptxas is single-threaded.
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t b = next++; b < batches; b = next++) {
      const size_t begin = b * kBatch;
      const size_t end = std::min(modules.size(), begin + kBatch);
      std::string log;
      if (AssembleFile(ptxas, Merge(modules, begin, end), arch, &log)) {
        ok[b] = 1;
        logs[b] = log;
        continue;
      }
      for (size_t i = begin; i < end; ++i) {
        std::string one;
        if (!AssembleFile(ptxas, Merge(modules, i, i + 1), arch, &one)) {
          logs[b] += "---- " + modules[i].label + " (" + arch + "):\n" + one;
        }
      }
    }
  };
  std::thread helper(worker);
  worker();
  helper.join();
  r.ok = true;
  for (size_t b = 0; b < batches; ++b) {
    if (ok[b]) {
      ParseInfo(logs[b], modules, &r.entries);
    } else {
      r.ok = false;
      r.log += logs[b];
    }
  }
  return r;
}

}  // namespace ptxserve::ptx
