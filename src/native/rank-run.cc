// runGraphRanks(options, inputs): a model with the collectives (AllReduce, AllGather) run once on every
// rank of a tensor-parallel group at once, rank r on inputs[r]: CPU ranks as threads sharing a CPU
// communicator, or a rank per CUDA device (options.deviceIds) over NCCL. For the collectives' tests and
// benchmarks; `absent` names a rank that never runs its session (what a hung rank looks like).
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "collective.h"
#include "graph-run.h"
#include "rank-group.h"

namespace chorus {

Napi::Value RunGraphRanks(const Napi::CallbackInfo& info) {
  Napi::Env e = info.Env();
  const GraphRunOptions base = ParseGraphRunOptions(info[0]);
  Napi::Object o = info[0].As<Napi::Object>();
  if (!info[1].IsArray() || info[1].As<Napi::Array>().Length() < 1) throw Napi::TypeError::New(e, "runGraphRanks takes an array of each rank's inputs");
  Napi::Array perRank = info[1].As<Napi::Array>();
  const int world = static_cast<int>(perRank.Length());
  std::vector<std::vector<Tensor>> inputs;
  for (int r = 0; r < world; r++) inputs.push_back(ParseGraphTensors(perRank.Get(r)));
  std::vector<GraphRunOptions> options(world, base);
  if (o.Get("models").IsArray()) {
    Napi::Array models = o.Get("models").As<Napi::Array>();
    if (static_cast<int>(models.Length()) != world) throw Napi::TypeError::New(e, "options.models must hold a model per rank");
    for (int r = 0; r < world; r++) options[r].model = models.Get(r).ToString().Utf8Value();
  }
  std::vector<int> devices(world);
  for (int r = 0; r < world; r++) devices[r] = r;
  if (o.Get("deviceIds").IsArray()) {
    Napi::Array ids = o.Get("deviceIds").As<Napi::Array>();
    if (static_cast<int>(ids.Length()) != world) throw Napi::TypeError::New(e, "options.deviceIds must hold a device per rank");
    for (int r = 0; r < world; r++) devices[r] = ids.Get(r).As<Napi::Number>().Int32Value();
  }
  for (int r = 0; r < world; r++) options[r].deviceId = devices[r];
  const double timeoutMs = o.Get("timeoutMs").IsNumber() ? o.Get("timeoutMs").As<Napi::Number>().DoubleValue() : 30000;
  const int absent = o.Get("absent").IsNumber() ? o.Get("absent").As<Napi::Number>().Int32Value() : -1;
  std::vector<GraphRunResult> results(world);
  try {
    auto comm = base.cuda ? MakeNcclCommunicator(devices) : MakeCpuCommunicator(world, timeoutMs);
    RankGroup group(std::move(comm), timeoutMs);
    group.Run([&](int r) {
      if (r != absent) results[r] = RunGraphOnce(options[r], inputs[r]);
    });
  } catch (const std::exception& error) {
    throw Napi::Error::New(e, error.what());
  }
  Napi::Array out = Napi::Array::New(e, world);
  for (int r = 0; r < world; r++) out.Set(static_cast<uint32_t>(r), GraphRunObject(e, results[r]));
  return out;
}

}  // namespace chorus
