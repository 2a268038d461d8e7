// Adds two methods to node-llama-cpp's AddonContext, for replies that decode with nothing else to
// do beside them (and, defined in token-logprobs.cpp, appends that file's two):
// - decodeSteps(sequenceIds, positions, tokens, samplers, steps): on the decode thread, decodes one
//   batch of each sequence's token at its position, samples each sequence's next token with its
//   sampler, decodes those in the next batch, and so on, `steps` times at most; resolves to an
//   Int32Array of the tokens sampled, step by step (each step's tokens in the sequences' order).
//   It stops early after a step that sampled an end-of-generation token, or once abortSteps() is
//   called. Whatever ends it, every sequence of the call then holds exactly the steps it returned:
//   a failure rejects and leaves them as they were before the call.
// - abortSteps(): a running decodeSteps ends within its current step, through llama.cpp's abort
//   callback (asked between two ops of the graph), and resolves to the tokens of the steps before.
//   For a turn that needs the context now, instead of waiting for the step in flight.
//
// Why: a reply's token through the addon's own calls wakes the JS thread at least once, and on
// this VM a thread's wake-up costs CPU beside the JavaScript a token runs there; every wake also
// sits between two decodes while the cores idle.
//
// The promise settles through a threadsafe function straight on the JS thread, not through the
// runtime's pool. The class gains the methods when the addon defines it: the link wraps
// napi_define_class (see decode-thread.cmake) and appends them to AddonContext's properties.
// The link also wraps llama_log_set (an aborted step's own log lines are dropped) and
// llama_memory_seq_add/div (a position shift they leave pending is applied by the next decode,
// which must then not be abortable).
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "AddonContext.h"
#include "AddonSampler.h"
#include "addon-methods.h"
#include "decode-thread.h"
#include "llama.h"
#include "napi.h"

extern "C" int32_t __real_llama_decode(llama_context * ctx, llama_batch batch);
extern "C" void __real_llama_log_set(ggml_log_callback callback, void * data);
extern "C" void __real_llama_memory_seq_add(llama_memory_t mem, llama_seq_id seq_id, llama_pos p0, llama_pos p1, llama_pos delta);
extern "C" void __real_llama_memory_seq_div(llama_memory_t mem, llama_seq_id seq_id, llama_pos p0, llama_pos p1, int d);
extern "C" napi_status __real_napi_define_class(napi_env env, const char * utf8name, size_t length, napi_callback constructor,
                                                void * data, size_t property_count, const napi_property_descriptor * properties,
                                                napi_value * result);

namespace {

// Counts abortSteps() calls: a run ends when the count moves. One count for all contexts: a
// context's run aborted by another's call only returns fewer tokens.
std::atomic<uint64_t> aborts{0};

// The addon's log callback, which llama.cpp's log reaches through `quiet`.
ggml_log_callback addonLog = nullptr;

// Memories given a position shift (llama_memory_seq_add/div) that no step has decoded after yet.
// llama_decode applies a pending shift before the batch, with the abort callback live: aborted,
// the shift would be applied again by the next decode. Any successful decode applies it.
std::mutex shiftsMutex;
std::unordered_set<llama_memory_t> shifts;

void shifted(llama_memory_t memory) {
    std::lock_guard<std::mutex> lock(shiftsMutex);
    shifts.insert(memory);
}

bool shiftPending(llama_memory_t memory) {
    std::lock_guard<std::mutex> lock(shiftsMutex);
    return shifts.count(memory) > 0;
}

void shiftApplied(llama_memory_t memory) {
    std::lock_guard<std::mutex> lock(shiftsMutex);
    shifts.erase(memory);
}

// Contexts with a decodeSteps call out (on the JS thread that made it): one at a time each.
std::mutex callsMutex;
std::unordered_set<const AddonContext *> calling;

// Runs posted to the decode thread and not yet handed back: a JS environment going away waits
// for them before it lets go of the threadsafe function they call (and of the contexts they use).
std::mutex runningMutex;
std::condition_variable runningDone;
size_t running = 0;

// The real constructors, for instanceof: an object of another class must never be unwrapped as
// one. Each load of the addon's exports (node-llama-cpp loads them once per Llama) defines the
// classes anew, and objects of every load stay valid.
struct Classes {
    std::vector<napi_ref> context;
    std::vector<napi_ref> sampler;
};
thread_local Classes classesOfThisThread;

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
    // llama.cpp saw the abort inside the decode in flight: what it logs from then on is the abort's.
    bool abortSeen = false;
    // The context has no abort callback of this call's (set once, before the first abortable decode).
    bool unarmed = true;
    std::vector<llama_token> tokens;
    std::string error;
    napi_deferred deferred = nullptr;

    // On the decode thread; as the addon's decode and sample workers for a batch of a token per sequence.
    void run() {
        const int32_t n = static_cast<int32_t>(sequenceIds.size());
        llama_batch batch = llama_batch_init(n, 0, 1);
        llama_memory_t memory = llama_get_memory(context->ctx);
        // No shift can become pending during the run: the JS side holds the context's lock, which
        // node-llama-cpp's erasures take. One pending at the start is applied by the first decode.
        bool shift = shiftPending(memory);
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
                if (!decode(batch, shift) || !sample()) break;
                if (shift) shiftApplied(memory);
                shift = false;
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
        // What the sequences hold past the steps handed back goes: llama.cpp takes an aborted or
        // failed batch's cells back out only from the piece (ubatch) it was computing, and splits a
        // batch into pieces where the sequence ids are not consecutive. A failure hands back none.
        const int32_t kept = error.empty() ? static_cast<int32_t>(tokens.size()) / n : 0;
        if (!error.empty()) tokens.clear();
        for (int32_t i = 0; i < n; i++) llama_memory_seq_rm(memory, sequenceIds[i], positions[i] + kept, -1);
        llama_batch_free(batch);
    }

    static bool aborted(void * data) {
        return aborts.load(std::memory_order_relaxed) != static_cast<Steps *>(data)->abortion;
    }

    // llama.cpp's abort callback.
    static bool abortNow(void * data) {
        if (!aborted(data)) return false;
        static_cast<Steps *>(data)->abortSeen = true;
        return true;
    }

    // `shift`: a pending shift is applied first, so this decode must not be aborted.
    bool decode(const llama_batch & batch, bool shift) {
        {
            std::lock_guard<std::mutex> lock(context->sharedSamplerData.mutex);
            context->sharedSamplerData.gotLogit = false;
            context->sharedSamplerData.hasLogits = false;
        }
        // Only this call's decodes may be aborted: the addon's own batches run without the callback.
        if (shift != unarmed) llama_set_abort_callback(context->ctx, shift ? nullptr : abortNow, shift ? nullptr : this);
        unarmed = shift;
        abortSeen = false;
        decoding = this;
        const int32_t result = __real_llama_decode(context->ctx, batch);
        decoding = nullptr;
        // Aborted: the step counts for nothing (run() takes its cells back out).
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

// On the JS thread: settles the call's promise and lets go of what it held. A failed run rejects.
void settle(napi_env env, napi_value, void * returnData, void * stepsData) {
    std::unique_ptr<Steps> steps(static_cast<Steps *>(stepsData));
    // The environment is going away and the threadsafe function with it: nothing left to settle.
    if (env == nullptr) return;
    {
        std::lock_guard<std::mutex> lock(callsMutex);
        calling.erase(steps->context);
    }
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

void runStarted() {
    std::lock_guard<std::mutex> lock(runningMutex);
    running++;
}

void runEnded() {
    {
        std::lock_guard<std::mutex> lock(runningMutex);
        running--;
    }
    runningDone.notify_all();
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
        // Runs still out end within their step and are waited for: they use the contexts this
        // environment is about to free and call the function released here. Its finalizer then
        // deletes the Return.
        [](void * data) {
            returnOfThisThread = nullptr;
            aborts.fetch_add(1);
            {
                std::unique_lock<std::mutex> lock(runningMutex);
                runningDone.wait(lock, [] { return running == 0; });
            }
            napi_release_threadsafe_function(static_cast<Return *>(data)->function, napi_tsfn_abort);
        },
        back);
    return returnOfThisThread = back;
}

// Whether `value` is an object of a class one of these constructors makes.
bool instanceOf(napi_env env, const Napi::Value & value, const std::vector<napi_ref> & constructors) {
    if (!value.IsObject()) return false;
    for (const napi_ref ref : constructors) {
        napi_value constructor;
        bool is = false;
        if (napi_get_reference_value(env, ref, &constructor) == napi_ok && constructor != nullptr &&
            napi_instanceof(env, value, constructor, &is) == napi_ok && is) {
            return true;
        }
    }
    return false;
}

constexpr int64_t INT32_LIMIT = std::numeric_limits<int32_t>::max();

// Throws (the addon is built with C++ exceptions) where a napi call fails, an unwrap say.
napi_value start(napi_env env, const Napi::CallbackInfo & info) {
    if (!instanceOf(env, info.This(), classesOfThisThread.context)) return fail(Napi::TypeError::New(env, "decodeSteps: `this` is not an AddonContext"));
    AddonContext * context = Napi::ObjectWrap<AddonContext>::Unwrap(info.This().As<Napi::Object>());
    if (context == nullptr || context->disposed || context->ctx == nullptr) return fail(Napi::Error::New(env, "Context is disposed"));
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
    if (n == 0 || n > sequences || n > llama_n_batch(context->ctx) || positions.Length() != n || inputs.Length() != n || samplers.Length() != n) {
        return fail(Napi::RangeError::New(env, "decodeSteps: one to the context's sequence count of sequences, each with a position, a token and a sampler"));
    }
    int64_t count = 0;
    if (!integerOf(info[4], std::numeric_limits<int32_t>::min(), INT32_LIMIT, count)) return fail(Napi::TypeError::New(env, signature));
    const int64_t contextSize = llama_n_ctx_seq(context->ctx);
    const int64_t vocabulary = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(context->ctx)));
    auto steps = std::make_unique<Steps>(Steps{context, {}, {}, {}, {}, static_cast<int32_t>(count)});
    std::vector<bool> seen(sequences, false);
    for (uint32_t i = 0; i < n; i++) {
        int64_t id = 0, position = 0, token = 0;
        if (!integerOf(ids.Get(i), 0, INT32_LIMIT, id) || !integerOf(positions.Get(i), 0, INT32_LIMIT, position) ||
            !integerOf(inputs.Get(i), 0, INT32_LIMIT, token)) {
            return fail(Napi::TypeError::New(env, signature));
        }
        // One position stays free at the end of the sequence's context, as node-llama-cpp keeps it.
        if (id >= sequences || seen[id] || count < 1 || position + count >= contextSize) {
            return fail(Napi::RangeError::New(env, "decodeSteps: a sequence (or a repeated one), position or step count is outside the context"));
        }
        if (token >= vocabulary) return fail(Napi::RangeError::New(env, "decodeSteps: a token is outside the model's vocabulary"));
        seen[id] = true;
        if (!instanceOf(env, samplers.Get(i), classesOfThisThread.sampler)) return fail(Napi::TypeError::New(env, "decodeSteps: a sampler is not an AddonSampler"));
        AddonSampler * sampler = Napi::ObjectWrap<AddonSampler>::Unwrap(samplers.Get(i).As<Napi::Object>());
        if (sampler == nullptr || sampler->disposed) return fail(Napi::Error::New(env, "decodeSteps: a sampler is disposed"));
        steps->sequenceIds.push_back(static_cast<int32_t>(id));
        steps->positions.push_back(static_cast<int32_t>(position));
        steps->inputs.push_back(static_cast<llama_token>(token));
        steps->samplers.push_back(sampler);
    }
    {
        std::lock_guard<std::mutex> lock(callsMutex);
        if (calling.count(context) > 0) return fail(Napi::Error::New(env, "decodeSteps: a call on this context is still out"));
    }
    Return * back = returnOf(env);
    if (back == nullptr) return fail(Napi::Error::New(env, "decodeSteps: could not create its threadsafe function"));
    napi_value promise;
    if (napi_create_promise(env, &steps->deferred, &promise) != napi_ok) return fail(Napi::Error::New(env, "decodeSteps: could not create its promise"));
    // The decode thread holds the function until it has called it.
    napi_threadsafe_function function = back->function;
    if (napi_acquire_threadsafe_function(function) != napi_ok) return fail(Napi::Error::New(env, "decodeSteps: the environment is closing"));
    Steps * call = steps.get();
    runStarted();
    try {
        runOnDecodeThread([call, function] {
            call->run();
            // Refused only once the environment is closing, which then settles nothing.
            if (napi_call_threadsafe_function(function, call, napi_tsfn_nonblocking) != napi_ok) delete call;
            napi_release_threadsafe_function(function, napi_tsfn_release);
            runEnded();
        });
    } catch (...) {
        runEnded();
        napi_release_threadsafe_function(function, napi_tsfn_release);
        throw;
    }
    // Posted: from here the call is settle()'s to delete, and nothing below throws. What it uses is
    // held until settled, as the addon's own workers hold theirs; settle runs on this thread, later.
    steps.release();
    {
        std::lock_guard<std::mutex> lock(callsMutex);
        calling.insert(context);
    }
    context->Ref();
    for (AddonSampler * sampler : call->samplers) sampler->Ref();
    if (back->out++ == 0) napi_ref_threadsafe_function(env, function);
    return promise;
}

napi_value decodeSteps(napi_env env, napi_callback_info callbackInfo) {
    // No C++ exception may leave a napi callback: the process would terminate.
    try {
        return start(env, Napi::CallbackInfo(env, callbackInfo));
    } catch (const Napi::Error & error) {
        return fail(error);
    } catch (const std::exception & error) {
        return fail(Napi::Error::New(env, std::string("decodeSteps: ") + error.what()));
    } catch (...) {
        return fail(Napi::Error::New(env, "decodeSteps: unknown failure"));
    }
}

napi_value abortSteps(napi_env, napi_callback_info) {
    aborts.fetch_add(1);
    return nullptr;
}

// What llama.cpp logs once it has seen an abort, while it unwinds the aborted step, is no
// failure: dropped. Anything logged before, in the same decode, is kept.
void quiet(ggml_log_level level, const char * text, void * data) {
    if (decoding != nullptr && decoding->abortSeen) return;
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

void remember(napi_env env, napi_value constructor, std::vector<napi_ref> & constructors) {
    napi_ref ref = nullptr;
    if (napi_create_reference(env, constructor, 1, &ref) == napi_ok) constructors.push_back(ref);
}

}  // namespace

napi_value fail(const Napi::Error & error) {
    error.ThrowAsJavaScriptException();
    return nullptr;
}

bool integerOf(const Napi::Value & value, int64_t min, int64_t max, int64_t & out) {
    if (!value.IsNumber()) return false;
    const double number = value.As<Napi::Number>().DoubleValue();
    if (!std::isfinite(number) || std::trunc(number) != number || number < static_cast<double>(min) || number > static_cast<double>(max)) return false;
    out = static_cast<int64_t>(number);
    return true;
}

AddonContext * addonContextOf(napi_env env, const Napi::Value & value) {
    if (!instanceOf(env, value, classesOfThisThread.context)) return nullptr;
    return Napi::ObjectWrap<AddonContext>::Unwrap(value.As<Napi::Object>());
}

extern "C" void __wrap_llama_log_set(ggml_log_callback callback, void * data) {
    addonLog = callback;
    __real_llama_log_set(callback == nullptr ? nullptr : quiet, data);
}

extern "C" void __wrap_llama_memory_seq_add(llama_memory_t mem, llama_seq_id seq_id, llama_pos p0, llama_pos p1, llama_pos delta) {
    if (delta != 0) shifted(mem);
    __real_llama_memory_seq_add(mem, seq_id, p0, p1, delta);
}

extern "C" void __wrap_llama_memory_seq_div(llama_memory_t mem, llama_seq_id seq_id, llama_pos p0, llama_pos p1, int d) {
    if (d != 1) shifted(mem);
    __real_llama_memory_seq_div(mem, seq_id, p0, p1, d);
}

extern "C" napi_status __wrap_napi_define_class(napi_env env, const char * utf8name, size_t length, napi_callback constructor, void * data,
                                                size_t property_count, const napi_property_descriptor * properties, napi_value * result) {
    const bool context = named(utf8name, length, "AddonContext");
    if (!context) {
        const napi_status status = __real_napi_define_class(env, utf8name, length, constructor, data, property_count, properties, result);
        if (status == napi_ok && named(utf8name, length, "AddonSampler")) remember(env, *result, classesOfThisThread.sampler);
        return status;
    }
    std::vector<napi_property_descriptor> extended(properties, properties + property_count);
    extended.push_back(method("decodeSteps", decodeSteps));
    extended.push_back(method("abortSteps", abortSteps));
    extended.push_back(method("tokenLogprobs", tokenLogprobs));
    extended.push_back(method("tokenBytes", tokenBytes));
    extended.push_back(method("pooledEmbeddings", pooledEmbeddings));
    extended.push_back(method("tokenizeInput", tokenizeInput));
    const napi_status status = __real_napi_define_class(env, utf8name, length, constructor, data, extended.size(), extended.data(), result);
    if (status == napi_ok) remember(env, *result, classesOfThisThread.context);
    return status;
}
