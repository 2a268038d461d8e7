// Adds two methods to node-llama-cpp's AddonContext, for replies that decode with nothing else to
// do beside them:
// - decodeSteps(sequenceIds, positions, tokens, samplers, steps): on the decode thread, decodes one
//   batch of each sequence's token at its position, samples each sequence's next token with its
//   sampler, decodes those in the next batch, and so on, `steps` times at most; resolves to an
//   Int32Array of the tokens sampled, step by step (each step's tokens in the sequences' order).
//   It stops early after a step that sampled an end-of-generation token, or once abortSteps() is
//   called.
// - abortSteps(): a running decodeSteps ends within its current step, through llama.cpp's abort
//   callback (asked between two ops of the graph). llama.cpp takes the aborted batch's cells back
//   out of the sequences, so the call leaves them as if it had ended after the step before, and
//   resolves to the tokens of the steps before. For a turn that needs the context now: on
//   bench-small a step of three replies takes ~19 ms, which a prompt arriving used to wait for.
//   llama.cpp logs an aborted decode as a failure (four lines and more); the link also routes
//   llama_log_set through here, and the log drops what an aborted step of this call logs.
//
// Why: a reply's token through the addon's own calls wakes the JS thread at least once, and on
// this VM a thread's wake-up alone costs 0.07-0.10 ms of CPU under Bun (0.045 ms in C), beside the
// JavaScript a token runs there; every wake also sits between two decodes while the cores idle. A
// bare loop on bench-small (F16, 2 threads, one sequence, greedy) took 8.2-9.2 ms a token one step
// a call and 7.8-8.7 ms at 4 to 256 steps a call, its JS thread's CPU 0.09 ms a token against
// 0.03 at 4 steps; llama-server, in the same minutes, 7.6-7.9 ms.
//
// The promise settles through a threadsafe function straight on the JS thread, not through the
// runtime's pool. The class gains the methods when the addon defines it: the link wraps
// napi_define_class (see decode-thread.cmake) and appends them to AddonContext's properties.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "AddonContext.h"
#include "AddonSampler.h"
#include "decode-thread.h"
#include "llama.h"
#include "napi.h"

extern "C" int32_t __real_llama_decode(llama_context * ctx, llama_batch batch);
extern "C" void __real_llama_log_set(ggml_log_callback callback, void * data);
extern "C" napi_status __real_napi_define_class(napi_env env, const char * utf8name, size_t length, napi_callback constructor,
                                                void * data, size_t property_count, const napi_property_descriptor * properties,
                                                napi_value * result);

namespace {

// Counts abortSteps() calls: a run ends when the count moves. One count for all contexts: a
// context's run aborted by another's call only returns fewer tokens.
std::atomic<uint64_t> aborts{0};

// The addon's log callback, which llama.cpp's log reaches through `quiet`.
ggml_log_callback addonLog = nullptr;

struct Steps;
// The call whose step this thread is decoding, if any.
thread_local Steps * decoding = nullptr;

// One decodeSteps call, from the JS thread to the decode thread and back.
struct Steps {
    AddonContext * context;
    std::vector<AddonSampler *> samplers;
    std::vector<int32_t> sequenceIds;
    std::vector<int32_t> positions;
    // Each sequence's token the next step decodes.
    std::vector<llama_token> inputs;
    int32_t count;
    uint64_t abortion = aborts.load();
    std::vector<llama_token> tokens;
    std::string error;
    napi_deferred deferred = nullptr;

    // On the decode thread; as the addon's decode and sample workers for a batch of a token per sequence.
    void run() {
        const int32_t n = static_cast<int32_t>(sequenceIds.size());
        llama_batch batch = llama_batch_init(n, 0, 1);
        // Only this call's decodes may be aborted: the addon's own batches run without the callback.
        llama_set_abort_callback(context->ctx, aborted, this);
        try {
            const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(context->ctx));
            for (int32_t step = 0; step < count && !aborted(this); step++) {
                batch.n_tokens = n;
                for (int32_t i = 0; i < n; i++) {
                    batch.token[i] = inputs[i];
                    batch.pos[i] = positions[i] + step;
                    batch.n_seq_id[i] = 1;
                    batch.seq_id[i][0] = sequenceIds[i];
                    batch.logits[i] = true;
                }
                if (!decode(batch) || !sample()) break;
                bool ended = false;
                for (const llama_token token : inputs) ended = ended || llama_vocab_is_eog(vocab, token);
                if (ended) break;
            }
        } catch (const std::exception & failure) {
            error = failure.what();
        } catch (...) {
            error = "Unknown error when calling \"llama_decode\"";
        }
        llama_set_abort_callback(context->ctx, nullptr, nullptr);
        llama_batch_free(batch);
    }

    static bool aborted(void * data) {
        return aborts.load(std::memory_order_relaxed) != static_cast<Steps *>(data)->abortion;
    }

    bool decode(const llama_batch & batch) {
        {
            std::lock_guard<std::mutex> lock(context->sharedSamplerData.mutex);
            context->sharedSamplerData.gotLogit = false;
            context->sharedSamplerData.hasLogits = false;
        }
        decoding = this;
        const int32_t result = __real_llama_decode(context->ctx, batch);
        decoding = nullptr;
        // Aborted: llama.cpp has taken the batch's cells back out, and the step counts for nothing.
        if (result == 2) return false;
        if (result != 0) {
            error = result == 1 ? "could not find a KV slot for the batch (try reducing the size of the batch or increase the context)"
                                : "Eval has failed";
            return false;
        }
        llama_synchronize(context->ctx);
        return true;
    }

    // Every sequence's next token, from its logits in the batch just decoded (batch index i).
    bool sample() {
        for (size_t i = 0; i < samplers.size(); i++) {
            AddonSampler * sampler = samplers[i];
            sampler->rebuildChainIfNeeded();
            std::unique_lock<std::mutex> lock(context->sharedSamplerData.mutex);
            if (!context->sharedSamplerData.gotLogit) {
                context->sharedSamplerData.hasLogits = llama_get_logits(context->ctx) != nullptr;
                context->sharedSamplerData.gotLogit = true;
            }
            if (!context->sharedSamplerData.hasLogits) {
                error = "This model does not support token generation";
                return false;
            }
            llama_token_data_array candidates;
            sampler->sampleAndReleaseLock(context->sharedSamplerData.mutex, lock, context->ctx, static_cast<int32_t>(i), candidates, false);
            if (candidates.size == 0 || candidates.selected < 0 || static_cast<size_t>(candidates.selected) >= candidates.size) {
                error = "llama.cpp failed to sample a token";
                return false;
            }
            inputs[i] = candidates.data[candidates.selected].id;
            sampler->acceptToken(inputs[i]);
        }
        tokens.insert(tokens.end(), inputs.begin(), inputs.end());
        return true;
    }
};

// A JS thread's way back from the decode thread; it keeps the process alive only while steps are out.
struct Return {
    napi_threadsafe_function function = nullptr;
    size_t out = 0;
};

// Each JS environment (the main thread, a worker) has its own thread, so one Return per thread.
thread_local Return * returnOfThisThread = nullptr;

// On the JS thread: settles the call's promise and lets go of what it held. A failed run rejects,
// whatever it decoded first: the caller then erases the sequence from the first position it gave.
void settle(napi_env env, napi_value, void * returnData, void * stepsData) {
    std::unique_ptr<Steps> steps(static_cast<Steps *>(stepsData));
    // The environment is going away and the threadsafe function with it: nothing left to settle.
    if (env == nullptr) return;
    Napi::HandleScope scope(env);
    if (steps->error.empty()) {
        Napi::Int32Array tokens = Napi::Int32Array::New(env, steps->tokens.size());
        for (size_t i = 0; i < steps->tokens.size(); i++) tokens[i] = steps->tokens[i];
        napi_resolve_deferred(env, steps->deferred, tokens);
    } else {
        napi_reject_deferred(env, steps->deferred, Napi::Error::New(env, steps->error).Value());
    }
    steps->context->Unref();
    for (AddonSampler * sampler : steps->samplers) sampler->Unref();
    Return * back = static_cast<Return *>(returnData);
    if (--back->out == 0) napi_unref_threadsafe_function(env, back->function);
}

Return * returnOf(napi_env env) {
    if (returnOfThisThread != nullptr) return returnOfThisThread;
    auto * back = new Return();
    napi_value name;
    napi_create_string_utf8(env, "ParleyDecodeSteps", NAPI_AUTO_LENGTH, &name);
    const napi_finalize forget = [](napi_env, void * data, void *) { delete static_cast<Return *>(data); };
    if (napi_create_threadsafe_function(env, nullptr, nullptr, name, 0, 1, back, forget, back, settle, &back->function) != napi_ok) {
        delete back;
        return nullptr;
    }
    napi_unref_threadsafe_function(env, back->function);
    napi_add_env_cleanup_hook(
        env,
        // The function's finalizer then deletes the Return.
        [](void * data) {
            returnOfThisThread = nullptr;
            napi_release_threadsafe_function(static_cast<Return *>(data)->function, napi_tsfn_abort);
        },
        back);
    return returnOfThisThread = back;
}

napi_value fail(const Napi::Error & error) {
    error.ThrowAsJavaScriptException();
    return nullptr;
}

// The i-th element of an array argument, as an integer; false where it is not a number.
bool integerAt(const Napi::Array & array, uint32_t i, int32_t & value) {
    const Napi::Value element = array.Get(i);
    if (!element.IsNumber()) return false;
    value = element.As<Napi::Number>().Int32Value();
    return true;
}

// Throws (the addon is built with C++ exceptions) where a napi call fails, an unwrap say.
napi_value start(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = Napi::ObjectWrap<AddonContext>::Unwrap(info.This().As<Napi::Object>());
    if (context == nullptr || context->disposed) return fail(Napi::Error::New(env, "Context is disposed"));
    const char * signature = "decodeSteps(sequenceIds: number[], positions: number[], tokens: number[], samplers: AddonSampler[], steps: number)";
    if (info.Length() < 5 || !info[0].IsArray() || !info[1].IsArray() || !info[2].IsArray() || !info[3].IsArray() || !info[4].IsNumber()) {
        return fail(Napi::TypeError::New(env, signature));
    }
    const Napi::Array ids = info[0].As<Napi::Array>();
    const Napi::Array positions = info[1].As<Napi::Array>();
    const Napi::Array inputs = info[2].As<Napi::Array>();
    const Napi::Array samplers = info[3].As<Napi::Array>();
    const uint32_t n = ids.Length();
    const uint32_t sequences = llama_n_seq_max(context->ctx);
    if (n == 0 || n > sequences || positions.Length() != n || inputs.Length() != n || samplers.Length() != n) {
        return fail(Napi::RangeError::New(env, "decodeSteps: one to the context's sequence count of sequences, each with a position, a token and a sampler"));
    }
    const int32_t count = info[4].As<Napi::Number>().Int32Value();
    auto steps = std::make_unique<Steps>(Steps{context, {}, {}, {}, {}, count});
    std::vector<bool> seen(sequences, false);
    for (uint32_t i = 0; i < n; i++) {
        int32_t id = 0, position = 0, token = 0;
        if (!integerAt(ids, i, id) || !integerAt(positions, i, position) || !integerAt(inputs, i, token) || !samplers.Get(i).IsObject()) {
            return fail(Napi::TypeError::New(env, signature));
        }
        if (id < 0 || static_cast<uint32_t>(id) >= sequences || seen[id] || position < 0 || count < 1 ||
            position + count >= static_cast<int32_t>(llama_n_ctx(context->ctx))) {
            return fail(Napi::RangeError::New(env, "decodeSteps: a sequence (or a repeated one), position or step count is outside the context"));
        }
        seen[id] = true;
        AddonSampler * sampler = nullptr;
        // Unwrapping an object no native class wraps throws.
        try {
            sampler = Napi::ObjectWrap<AddonSampler>::Unwrap(samplers.Get(i).As<Napi::Object>());
        } catch (const Napi::Error &) {
        }
        if (sampler == nullptr) return fail(Napi::TypeError::New(env, "decodeSteps: a sampler is not an AddonSampler"));
        if (sampler->disposed) return fail(Napi::Error::New(env, "decodeSteps: a sampler is disposed"));
        steps->sequenceIds.push_back(id);
        steps->positions.push_back(position);
        steps->inputs.push_back(static_cast<llama_token>(token));
        steps->samplers.push_back(sampler);
    }
    Return * back = returnOf(env);
    if (back == nullptr) return fail(Napi::Error::New(env, "decodeSteps: could not create its threadsafe function"));
    napi_value promise;
    napi_create_promise(env, &steps->deferred, &promise);
    // Held until settled, as the addon's own workers hold what they use.
    context->Ref();
    for (AddonSampler * sampler : steps->samplers) sampler->Ref();
    if (back->out++ == 0) napi_ref_threadsafe_function(env, back->function);
    napi_threadsafe_function function = back->function;
    // From here the call is settle()'s to delete.
    runOnDecodeThread([steps = steps.release(), function] {
        steps->run();
        napi_call_threadsafe_function(function, steps, napi_tsfn_nonblocking);
    });
    return promise;
}

napi_value decodeSteps(napi_env env, napi_callback_info callbackInfo) {
    try {
        return start(env, Napi::CallbackInfo(env, callbackInfo));
    } catch (const Napi::Error & error) {
        // A C++ exception must not leave a napi callback: the process would terminate.
        return fail(error);
    }
}

napi_value abortSteps(napi_env, napi_callback_info) {
    aborts.fetch_add(1);
    return nullptr;
}

// What llama.cpp logs while it aborts a step is no failure: dropped.
void quiet(ggml_log_level level, const char * text, void * data) {
    if (decoding != nullptr && Steps::aborted(decoding)) return;
    if (addonLog != nullptr) addonLog(level, text, data);
}

bool named(const char * utf8name, size_t length, const char * name) {
    return length == NAPI_AUTO_LENGTH ? std::strcmp(utf8name, name) == 0 : std::strlen(name) == length && std::strncmp(utf8name, name, length) == 0;
}

napi_property_descriptor method(const char * name, napi_callback callback) {
    napi_property_descriptor property{};
    property.utf8name = name;
    property.method = callback;
    property.attributes = static_cast<napi_property_attributes>(napi_writable | napi_configurable);
    return property;
}

}  // namespace

extern "C" void __wrap_llama_log_set(ggml_log_callback callback, void * data) {
    addonLog = callback;
    __real_llama_log_set(callback == nullptr ? nullptr : quiet, data);
}

extern "C" napi_status __wrap_napi_define_class(napi_env env, const char * utf8name, size_t length, napi_callback constructor, void * data,
                                                size_t property_count, const napi_property_descriptor * properties, napi_value * result) {
    if (!named(utf8name, length, "AddonContext")) {
        return __real_napi_define_class(env, utf8name, length, constructor, data, property_count, properties, result);
    }
    std::vector<napi_property_descriptor> extended(properties, properties + property_count);
    extended.push_back(method("decodeSteps", decodeSteps));
    extended.push_back(method("abortSteps", abortSteps));
    return __real_napi_define_class(env, utf8name, length, constructor, data, extended.size(), extended.data(), result);
}
