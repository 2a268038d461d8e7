// Adds one method to node-llama-cpp's AddonContext, for llama-server's `infill` sampler (the one
// llama.vscode and llama.vim ask for in `samplers`):
// - addInfillSampler(sampler): llama.cpp's infill sampler goes into the AddonSampler's chain just
//   before its draw (the `dist` sampler), where llama-server's chain has it when `infill` is the
//   last sampler named. It pools the probability of tokens that begin one another, and ends the
//   completion once an end of text is likely enough.
//
// Why this way: the addon builds its chain in a fixed order from its own fields and knows no infill
// sampler. Its draw is one field it adds last; that field becomes a chain of two (the infill sampler,
// then the draw it had), which the addon frees as it would its draw. A configuration that changes
// the seed replaces the draw, and the infill sampler with it: the caller adds it again after each
// configuration (src/natives/addon.ts does). A greedy configuration has no draw: the most likely
// token, which the infill sampler would have kept too, is taken.
#include <cstring>

#include "AddonSampler.h"
#include "addon-methods.h"
#include "llama.h"

namespace {

// The name llama.cpp gives a chain: a draw already chained is not wrapped twice.
constexpr const char * CHAIN = "chain";

napi_value addInfill(napi_env env, const Napi::CallbackInfo & info) {
    if (liveContextOf(env, info, "addInfillSampler") == nullptr) return nullptr;
    AddonSampler * sampler = samplerOf(env, info[0]);
    if (sampler == nullptr) return fail(Napi::TypeError::New(env, "addInfillSampler: the argument is not an AddonSampler"));
    if (sampler->disposed) return fail(Napi::Error::New(env, "Sampler is disposed"));
    llama_sampler * draw = sampler->seedSampler;
    if (draw == nullptr || std::strcmp(llama_sampler_name(draw), CHAIN) == 0) return info.Env().Undefined();
    // The chain in use holds the draw: taken apart (not freed) so the next sample builds it again.
    sampler->freeChain();
    llama_sampler_chain_params params = llama_sampler_chain_default_params();
    params.no_perf = true;
    llama_sampler * drawing = llama_sampler_chain_init(params);
    llama_sampler_chain_add(drawing, llama_sampler_init_infill(sampler->model->vocab));
    llama_sampler_chain_add(drawing, draw);
    sampler->seedSampler = drawing;
    return info.Env().Undefined();
}

}  // namespace

napi_value addInfillSampler(napi_env env, napi_callback_info info) { return guarded<addInfill>(env, info); }
