// The decoder attention kernels' test entry point (attention-rows.cc).
#pragma once

#include <napi.h>

namespace chorus {

// attendRows(call, device): DecoderSlotAttention's or PagedAttention's kernels on the call's arrays
// (see NativeAttentionCall in src/native/index.ts); the caches are written in place, the output returned.
Napi::Value AttendRows(const Napi::CallbackInfo& info);

}  // namespace chorus
