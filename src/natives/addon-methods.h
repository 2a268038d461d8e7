// What Parley's methods on node-llama-cpp's AddonContext share: decode-steps.cpp defines them on
// the class, owns what tells an AddonContext apart, and defines the helpers below.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <stdexcept>
#include <vector>

#include "AddonContext.h"
#include "AddonSampler.h"
#include "napi.h"

// Throws `error` in JavaScript; returns what a failing napi callback returns.
napi_value fail(const Napi::Error & error);

// A whole number from `min` to `max` into `out`: NaN, fractions and infinities are not.
bool integerOf(const Napi::Value & value, int64_t min, int64_t max, int64_t & out);

// The call's `this` when it is a live AddonContext; else nullptr, with the error thrown in
// JavaScript that names `method`.
AddonContext * liveContextOf(napi_env env, const Napi::CallbackInfo & info, const char * method);

// `value` as an AddonSampler when it is one; else nullptr.
AddonSampler * samplerOf(napi_env env, const Napi::Value & value);

// A napi callback running `body`: no C++ exception may leave a napi callback (the process would
// terminate), so each becomes a JavaScript error.
template <napi_value (*body)(napi_env, const Napi::CallbackInfo &)>
napi_value guarded(napi_env env, napi_callback_info info) {
    try {
        return body(env, Napi::CallbackInfo(env, info));
    } catch (const Napi::Error & error) {
        return fail(error);
    } catch (const std::exception & error) {
        return fail(Napi::Error::New(env, error.what()));
    } catch (...) {
        return fail(Napi::Error::New(env, "unknown failure"));
    }
}

// What `write` (a llama.cpp call that writes into a buffer, or answers minus the size it needs)
// wrote into `buffer`, called again with the buffer grown where it was too small: the count
// written, negative if it failed again.
template <typename T, typename Write>
int32_t writeGrown(std::vector<T> & buffer, Write write) {
    int32_t count = write(buffer.data(), static_cast<int32_t>(buffer.size()));
    if (count >= 0) return count;
    buffer.resize(static_cast<size_t>(-count));
    return write(buffer.data(), static_cast<int32_t>(buffer.size()));
}

// A promise of work on a context, done off the JavaScript thread: `work`, with the context checked
// live, where `run` puts it (where Execute runs, a pool thread, unless a subclass says otherwise).
// The context stays alive until it settles.
class ContextWorker : public Napi::AsyncWorker {
  public:
    ContextWorker(Napi::Env env, const char * name, AddonContext * context)
        : Napi::AsyncWorker(env, name), deferred(Napi::Promise::Deferred::New(env)), context(context) {
        context->Ref();
    }
    ~ContextWorker() override { context->Unref(); }

    Napi::Promise promise() const { return deferred.Promise(); }

  protected:
    Napi::Promise::Deferred deferred;
    AddonContext * context;

    virtual void work() = 0;
    virtual void run(const std::function<void()> & checked) { checked(); }

    void Execute() override {
        try {
            run([this] {
                if (context->disposed || context->ctx == nullptr) throw std::runtime_error("Context is disposed");
                work();
            });
        } catch (const std::exception & error) {
            SetError(error.what());
        }
    }

    void OnError(const Napi::Error & error) override { deferred.Reject(error.Value()); }
};

// tokenLogprobs and tokenBytes: see token-logprobs.cpp.
napi_value tokenLogprobs(napi_env env, napi_callback_info info);
napi_value tokenBytes(napi_env env, napi_callback_info info);

// pooledEmbeddings and tokenizeInput: see pooled-embeddings.cpp.
napi_value pooledEmbeddings(napi_env env, napi_callback_info info);
napi_value tokenizeInput(napi_env env, napi_callback_info info);

// sequenceState and restoreSequenceState: see sequence-state.cpp.
napi_value sequenceState(napi_env env, napi_callback_info info);
napi_value restoreSequenceState(napi_env env, napi_callback_info info);

// addInfillSampler: see infill-sampler.cpp.
napi_value addInfillSampler(napi_env env, napi_callback_info info);

// loadProjector, unloadProjector, imageLayout and evalImage: see vision.cpp.
napi_value loadProjector(napi_env env, napi_callback_info info);
napi_value unloadProjector(napi_env env, napi_callback_info info);
napi_value imageLayout(napi_env env, napi_callback_info info);
napi_value evalImage(napi_env env, napi_callback_info info);
