// A CUDA injection library that writes every kernel and memory copy the process runs, with its start
// and end on the GPU's clock, to the CSV file CHORUS_KERNEL_TRACE names (CUPTI's activity records;
// kernels inside CUDA graphs are recorded one by one). Loaded by the CUDA driver:
//   CUDA_INJECTION64_PATH=build/kernel-trace.so CHORUS_KERNEL_TRACE=trace.csv node ...
// Built by bench/gpu/profile/build.sh; read by bench/gpu/profile/summary.py.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

namespace {

constexpr size_t kBufferBytes = 8 << 20;

std::mutex lock;
FILE* out = nullptr;
std::unordered_map<std::string, int> names;

// A kernel's name without its template and argument lists, demangled where it can be.
std::string ShortName(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* plain = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && plain != nullptr ? plain : mangled;
  std::free(plain);
  std::string shortened;
  int depth = 0;
  for (char c : name) {
    if (c == '<' || c == '(') depth++;
    if (depth == 0) shortened += c == ',' ? ';' : c;
    if ((c == '>' || c == ')') && depth > 0) depth--;
  }
  return shortened;
}

int NameId(const char* mangled) {
  std::string name = ShortName(mangled);
  auto found = names.find(name);
  if (found != names.end()) return found->second;
  const int id = static_cast<int>(names.size());
  names.emplace(name, id);
  std::fprintf(out, "name,%d,%s\n", id, name.c_str());
  return id;
}

void CUPTIAPI Requested(uint8_t** buffer, size_t* size, size_t* maxRecords) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *maxRecords = 0;
}

void CUPTIAPI Completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> guard(lock);
  CUpti_Activity* record = nullptr;
  while (out != nullptr && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      auto* kernel = reinterpret_cast<CUpti_ActivityKernel10*>(record);
      std::fprintf(out, "k,%llu,%llu,%d,%u,%u\n", static_cast<unsigned long long>(kernel->start), static_cast<unsigned long long>(kernel->end), NameId(kernel->name),
                   kernel->graphId, kernel->streamId);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      auto* copy = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
      std::fprintf(out, "m,%llu,%llu,%u,%llu,%u\n", static_cast<unsigned long long>(copy->start), static_cast<unsigned long long>(copy->end), copy->copyKind,
                   static_cast<unsigned long long>(copy->bytes), copy->streamId);
    }
  }
  std::free(buffer);
}

void Finish() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> guard(lock);
  if (out != nullptr) std::fclose(out);
  out = nullptr;
}

}  // namespace

extern "C" int InitializeInjection() {
  const char* path = std::getenv("CHORUS_KERNEL_TRACE");
  out = std::fopen(path != nullptr ? path : "kernel-trace.csv", "w");
  if (out == nullptr) return 0;
  cuptiActivityRegisterCallbacks(Requested, Completed);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  // Records reach the file as the run goes, not only when a buffer fills or the process ends.
  cuptiActivityFlushPeriod(200);
  std::atexit(Finish);
  return 1;
}
