// What Parley's methods on node-llama-cpp's AddonContext share: decode-steps.cpp defines them on
// the class, owns what tells an AddonContext apart, and defines the helpers below.
#pragma once

#include <cstdint>
#include <exception>

#include "AddonContext.h"
#include "napi.h"

// Throws `error` in JavaScript; returns what a failing napi callback returns.
napi_value fail(const Napi::Error & error);

// A whole number from `min` to `max` into `out`: NaN, fractions and infinities are not.
bool integerOf(const Napi::Value & value, int64_t min, int64_t max, int64_t & out);

// The AddonContext `value` is, or nullptr if it is none.
AddonContext * addonContextOf(napi_env env, const Napi::Value & value);

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

// tokenLogprobs and tokenBytes: see token-logprobs.cpp.
napi_value tokenLogprobs(napi_env env, napi_callback_info info);
napi_value tokenBytes(napi_env env, napi_callback_info info);

// pooledEmbeddings and tokenizeInput: see pooled-embeddings.cpp.
napi_value pooledEmbeddings(napi_env env, napi_callback_info info);
napi_value tokenizeInput(napi_env env, napi_callback_info info);
