#include "custom-op.h"

#include <map>
#include <mutex>

namespace chorus {

namespace {

// The operators and their domain of one provider and float type, kept for the life of the process
// (sessions refer to them).
struct Registered {
  OpList ops;
  std::unique_ptr<Ort::CustomOpDomain> domain;
};

// A model of one Identity node (ONNX opset 17, float [1] in and out), serialized.
constexpr char kIdentityModel[] =
    "\x08\x08\x42\x04\x0a\x00\x10\x11\x3a\x37\x0a\x10\x0a\x01\x78\x12\x01\x79\x22\x08\x49\x64\x65\x6e\x74\x69\x74\x79"
    "\x12\x01\x67\x5a\x0f\x0a\x01\x78\x12\x0a\x0a\x08\x08\x01\x12\x04\x0a\x02\x08\x01\x62\x0f\x0a\x01\x79\x12\x0a\x0a"
    "\x08\x08\x01\x12\x04\x0a\x02\x08\x01";

// ONNX Runtime enters a custom domain in ONNX's process-wide table of domains as a session with it is
// created, checking and adding without a lock: two sessions with the domain made at once on two threads
// (the ranks of a split model load so) can both find it missing, and the second fails with "Trying to
// add a domain to DomainToVersion map, but the domain is already exist". A throwaway session made here,
// under AddChorusOps' lock and before any caller's session, enters it once.
void EnterDomain(const Ort::CustomOpDomain& domain) {
  static Ort::Env* env = new Ort::Env(ORT_LOGGING_LEVEL_ERROR, "chorus-ops");
  Ort::SessionOptions options;
  options.SetIntraOpNumThreads(1);
  options.Add(domain);
  Ort::Session session(*env, kIdentityModel, sizeof(kIdentityModel) - 1, options);
}

}  // namespace

void AddChorusOps(Ort::SessionOptions& options, bool cuda, FloatType type) {
  static std::mutex mutex;
  static std::map<std::pair<bool, FloatType>, Registered> registered;
  std::lock_guard<std::mutex> lock(mutex);
  Registered& entry = registered[{cuda, type}];
  if (!entry.domain) {
    entry.ops = SlotAttentionOps(cuda, type);
    for (std::shared_ptr<OrtCustomOp>& op : LinearOps(cuda, type)) entry.ops.push_back(std::move(op));
    for (std::shared_ptr<OrtCustomOp>& op : PagedAttentionOps(cuda, type)) entry.ops.push_back(std::move(op));
    for (std::shared_ptr<OrtCustomOp>& op : QuantLinearOps(cuda, type)) entry.ops.push_back(std::move(op));
    for (std::shared_ptr<OrtCustomOp>& op : CollectiveOps(cuda, type)) entry.ops.push_back(std::move(op));
    entry.domain = std::make_unique<Ort::CustomOpDomain>("chorus");
    for (const std::shared_ptr<OrtCustomOp>& op : entry.ops) entry.domain->Add(op.get());
    static bool entered = false;
    if (!entered) {
      // Without it sessions still load, only not safely at once; their own errors say what is wrong.
      try {
        EnterDomain(*entry.domain);
      } catch (const Ort::Exception&) {
      }
    }
    entered = true;
  }
  options.Add(*entry.domain);
}

}  // namespace chorus
