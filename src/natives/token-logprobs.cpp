// Adds two methods to node-llama-cpp's AddonContext, for OpenAI's `logprobs`:
// - tokenLogprobs(batchLogitIndex, token, top): from the logits of the last decoded batch at that
//   output, the log-probability of `token` under the model's own distribution (a log-softmax of the
//   raw logits, before any sampler, as llama-server's `n_probs` reports), then the `top` most
//   likely tokens with theirs: a Float64Array [logprob, id₁, logprob₁, …, id_top, logprob_top].
//   Call it after the batch's sampling and before the next decode, which overwrites the logits.
// - tokenBytes(token): the bytes the model spells the token with (a piece of a character, for a
//   token that is one), as a Uint8Array.
//
// Why native: the addon hands JavaScript only a token sampled through the sampler chain, never the
// distribution; a whole vocabulary of logits across the boundary per token would cost more than
// this walk over them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "addon-methods.h"
#include "llama.h"

namespace {

constexpr int64_t MAX_TOP = 20;

napi_value logprobs(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "tokenLogprobs");
    if (context == nullptr) return nullptr;
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(context->ctx));
    const int64_t vocabulary = llama_vocab_n_tokens(vocab);
    int64_t index = 0, token = 0, top = 0;
    if (info.Length() < 3 || !integerOf(info[0], 0, std::numeric_limits<int32_t>::max(), index) || !integerOf(info[1], 0, vocabulary - 1, token) ||
        !integerOf(info[2], 0, MAX_TOP, top)) {
        return fail(Napi::TypeError::New(env, "tokenLogprobs(batchLogitIndex: number, token: a token id, top: 0 to 20)"));
    }
    const float * logits = llama_get_logits_ith(context->ctx, static_cast<int32_t>(index));
    if (logits == nullptr) return fail(Napi::Error::New(env, "tokenLogprobs: the last batch has no logits at that index"));

    float max = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < vocabulary; i++) max = std::max(max, logits[i]);
    double sum = 0;
    for (int64_t i = 0; i < vocabulary; i++) sum += std::exp(static_cast<double>(logits[i]) - max);
    const double logNormalizer = max + std::log(sum);

    const int64_t count = std::min(top, vocabulary);
    std::vector<int32_t> ids(static_cast<size_t>(vocabulary));
    std::iota(ids.begin(), ids.end(), 0);
    // The most likely first; equal logits by id, so that the order never depends on the sort.
    std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });

    Napi::Float64Array result = Napi::Float64Array::New(env, static_cast<size_t>(1 + 2 * count));
    result[0] = static_cast<double>(logits[token]) - logNormalizer;
    for (int64_t i = 0; i < count; i++) {
        result[static_cast<size_t>(1 + 2 * i)] = ids[static_cast<size_t>(i)];
        result[static_cast<size_t>(2 + 2 * i)] = static_cast<double>(logits[ids[static_cast<size_t>(i)]]) - logNormalizer;
    }
    return result;
}

napi_value bytes(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "tokenBytes");
    if (context == nullptr) return nullptr;
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(context->ctx));
    int64_t token = 0;
    if (info.Length() < 1 || !integerOf(info[0], 0, llama_vocab_n_tokens(vocab) - 1, token)) return fail(Napi::TypeError::New(env, "tokenBytes(token: a token id)"));
    std::vector<char> piece(64);
    const int32_t length =
        writeGrown(piece, [&](char * out, int32_t room) { return llama_token_to_piece(vocab, static_cast<llama_token>(token), out, room, 0, false); });
    if (length < 0) return fail(Napi::Error::New(env, "tokenBytes: llama.cpp could not spell the token"));
    Napi::Uint8Array out = Napi::Uint8Array::New(env, static_cast<size_t>(length));
    std::copy(piece.begin(), piece.begin() + length, out.Data());
    return out;
}

}  // namespace

napi_value tokenLogprobs(napi_env env, napi_callback_info info) {
    return guarded<logprobs>(env, info);
}

napi_value tokenBytes(napi_env env, napi_callback_info info) {
    return guarded<bytes>(env, info);
}
