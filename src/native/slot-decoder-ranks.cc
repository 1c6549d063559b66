// SlotDecoder's ranks (tensor parallelism, slot-decoder.h): rank 0 loads and closes the others, each on
// its own thread, and hands them its stop decisions.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "slot-decoder.h"

namespace chorus {

void SlotDecoder::LoadRanks() {
  // A copy: rank 0's Load plans its blocks into options_ while the others start from these.
  const SlotDecoderOptions options = options_;
  const int world = static_cast<int>(options.rankModels.size()) + 1;
  std::vector<int> devices{options.deviceId};
  if (options.cuda) {
    if (options.rankDevices.size() != options.rankModels.size()) throw std::invalid_argument("rankDevices must name a CUDA device for each of ranks 1.." + std::to_string(world - 1));
    devices.insert(devices.end(), options.rankDevices.begin(), options.rankDevices.end());
    for (size_t i = 0; i < devices.size(); i++) {
      for (size_t j = 0; j < i; j++) {
        if (devices[i] == devices[j]) throw std::invalid_argument("ranks " + std::to_string(j) + " and " + std::to_string(i) + " are both on GPU " + std::to_string(devices[i]) + "; each rank needs a GPU of its own");
      }
    }
  }
  ranks_ = std::make_unique<Ranks>();
  ranks_->group = std::make_unique<RankGroup>(options.cuda ? MakeNcclCommunicator(devices) : MakeCpuCommunicator(world, options.rankTimeoutMs), options.rankTimeoutMs);
  group_ = ranks_->group.get();
  ranks_->followers.resize(world - 1);
  // Every rank loads at once, each on its own thread (and device).
  group_->Run(
      [&](int rank) {
        if (rank == 0) return Load();
        SlotDecoderOptions own = options;
        own.model = options.rankModels[rank - 1];
        own.deviceId = options.cuda ? options.rankDevices[rank - 1] : 0;
        own.rankModels.clear();
        own.rankDevices.clear();
        auto follower = std::make_unique<SlotDecoder>(own);
        follower->group_ = group_;
        follower->rank_ = rank;
        ranks_->followers[rank - 1] = std::move(follower);
      },
      false);
  if (paged()) {
    // Every rank's pool holds the blocks of the smallest plan, so that one block table serves them all.
    int blocks = options_.blocks;
    for (const auto& follower : ranks_->followers) blocks = std::min(blocks, follower->options_.blocks);
    options_.blocks = blocks;
    for (const auto& follower : ranks_->followers) follower->options_.blocks = blocks;
  }
}

std::vector<size_t> SlotDecoder::rankCacheBytes() const {
  std::vector<size_t> bytes{cacheBytes_};
  if (ranks_) {
    for (const auto& follower : ranks_->followers) bytes.push_back(follower->cacheBytes_);
  }
  return bytes;
}

void SlotDecoder::CloseRanks() {
  if (!ranks_) return;
  // A load that failed making the group (NCCL missing, say) has no ranks to close.
  if (!ranks_->group) {
    ranks_.reset();
    group_ = nullptr;
    return;
  }
  // Each follower closes on its own thread; where a rank is stuck (the group broken) they are left.
  try {
    // Every rank's captured steps go before the communicators they captured (with the group below).
    ranks_->group->Run(
        [this](int rank) {
          if (rank > 0) {
            ranks_->followers[rank - 1].reset();
          } else {
            DropGraphs();
          }
        },
        false);
  } catch (const std::exception&) {
    // A broken group: its stuck ranks are left to the process (their graphs with them); rank 0's own go.
    DropGraphs();
    for (auto& follower : ranks_->followers) follower.release();
  }
  ranks_.reset();
  group_ = nullptr;
}

bool SlotDecoder::AgreedStop() {
  if (group_ == nullptr) return interrupt_.exchange(false);
  if (rank_ > 0) return group_->Receive(rank_, StepNote::kStop).stop;
  StepNote note;
  note.stop = interrupt_.exchange(false);
  group_->Publish(note);
  return note.stop;
}

}  // namespace chorus
