// runGraph(options, inputs) (graph-run.cc): a model with the addon's operators run once on given inputs,
// and optionally timed; see src/native/index.ts.
#pragma once

#include <napi.h>

namespace chorus {

Napi::Value RunGraph(const Napi::CallbackInfo& info);

}  // namespace chorus
