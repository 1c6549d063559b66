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
  }
  options.Add(*entry.domain);
}

}  // namespace chorus
