// Adds two methods to node-llama-cpp's AddonContext, for a context made for embeddings (or ranking):
// - pooledEmbeddings(sequenceIds): after a decode, each sequence's pooled output (its embedding,
//   or for a ranking model its classifier's scores) as llama.cpp pooled it, the sequences' vectors
//   one after another in a Float32Array.
// - tokenizeInput(text, addSpecial, parseSpecial): the text's tokens as llama_tokenize gives them,
//   as a Uint32Array.
//
// Why native: the addon's own getEmbedding reads sequence 0 only, so each input would need a
// decode of its own; with this, one decode embeds as many inputs as the batch holds. And the
// addon's tokenize never adds the special tokens a tokenizer kind adds to an input (BERT's
// [CLS] and [SEP], a model's bos and eos), which llama-server's embeddings have.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "addon-methods.h"
#include "llama.h"

namespace {

napi_value pooled(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "pooledEmbeddings");
    if (context == nullptr) return nullptr;
    if (info.Length() < 1 || !info[0].IsArray()) return fail(Napi::TypeError::New(env, "pooledEmbeddings(sequenceIds: number[])"));
    const enum llama_pooling_type pooling = llama_pooling_type(context->ctx);
    if (pooling == LLAMA_POOLING_TYPE_NONE) return fail(Napi::Error::New(env, "pooledEmbeddings: the context pools nothing"));
    const llama_model * model = llama_get_model(context->ctx);
    const int64_t width = pooling == LLAMA_POOLING_TYPE_RANK ? static_cast<int64_t>(llama_model_n_cls_out(model)) : llama_model_n_embd_out(model);
    if (width <= 0) return fail(Napi::Error::New(env, "pooledEmbeddings: the model's pooled output has no width"));

    const Napi::Array ids = info[0].As<Napi::Array>();
    const uint32_t count = ids.Length();
    const int64_t maxSequence = static_cast<int64_t>(llama_n_seq_max(context->ctx)) - 1;
    Napi::Float32Array result = Napi::Float32Array::New(env, static_cast<size_t>(count) * static_cast<size_t>(width));
    for (uint32_t i = 0; i < count; i++) {
        int64_t id = 0;
        if (!integerOf(ids.Get(i), 0, maxSequence, id)) return fail(Napi::TypeError::New(env, "pooledEmbeddings: a sequence id out of range"));
        const float * vector = llama_get_embeddings_seq(context->ctx, static_cast<llama_seq_id>(id));
        if (vector == nullptr) return fail(Napi::Error::New(env, "pooledEmbeddings: sequence " + std::to_string(id) + " was not in the last batch"));
        std::copy(vector, vector + width, result.Data() + static_cast<size_t>(i) * static_cast<size_t>(width));
    }
    return result;
}

napi_value tokenized(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "tokenizeInput");
    if (context == nullptr) return nullptr;
    if (info.Length() < 3 || !info[0].IsString() || !info[1].IsBoolean() || !info[2].IsBoolean()) {
        return fail(Napi::TypeError::New(env, "tokenizeInput(text: string, addSpecial: boolean, parseSpecial: boolean)"));
    }
    const std::string text = info[0].As<Napi::String>().Utf8Value();
    const bool addSpecial = info[1].As<Napi::Boolean>().Value();
    const bool parseSpecial = info[2].As<Napi::Boolean>().Value();
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(context->ctx));
    std::vector<llama_token> tokens(text.size() + 4);
    const int32_t count = writeGrown(tokens, [&](llama_token * out, int32_t room) {
        return llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out, room, addSpecial, parseSpecial);
    });
    if (count < 0) return fail(Napi::Error::New(env, "tokenizeInput: llama.cpp could not tokenize the text"));
    Napi::Uint32Array result = Napi::Uint32Array::New(env, static_cast<size_t>(count));
    std::copy(tokens.begin(), tokens.begin() + count, result.Data());
    return result;
}

}  // namespace

napi_value pooledEmbeddings(napi_env env, napi_callback_info info) {
    return guarded<pooled>(env, info);
}

napi_value tokenizeInput(napi_env env, napi_callback_info info) {
    return guarded<tokenized>(env, info);
}
