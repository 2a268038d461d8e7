// What Parley's methods on node-llama-cpp's AddonContext share: decode-steps.cpp defines them on
// the class, owns what tells an AddonContext apart, and defines the helpers below.
#pragma once

#include <cstdint>

#include "AddonContext.h"
#include "napi.h"

// Throws `error` in JavaScript; returns what a failing napi callback returns.
napi_value fail(const Napi::Error & error);

// A whole number from `min` to `max` into `out`: NaN, fractions and infinities are not.
bool integerOf(const Napi::Value & value, int64_t min, int64_t max, int64_t & out);

// The AddonContext `value` is, or nullptr if it is none.
AddonContext * addonContextOf(napi_env env, const Napi::Value & value);

// tokenLogprobs and tokenBytes: see token-logprobs.cpp.
napi_value tokenLogprobs(napi_env env, napi_callback_info info);
napi_value tokenBytes(napi_env env, napi_callback_info info);
