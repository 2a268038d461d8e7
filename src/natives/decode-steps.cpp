// Adds two methods to node-llama-cpp's AddonContext, for replies that decode with nothing else to
// do beside them (and appends those defined in token-logprobs.cpp, pooled-embeddings.cpp,
// sequence-state.cpp, infill-sampler.cpp and vision.cpp):
// - decodeSteps(sequenceIds, positions, tokens, samplers, limits, steps, draftLengths?, histories?,
//   proposals?):
//   on the decode thread, decodes one batch of each sequence's token at its position, samples each
//   sequence's next token with its sampler, decodes those in the next batch, and so on, `steps`
//   batches at most. It stops early after a batch that sampled an end-of-generation token or
//   brought a sequence to its limit of sampled tokens, or once abortSteps() is called.
//   With drafts, each sequence's token goes into the batch followed by up to its draft length of
//   tokens guessed from its history (lookup-draft.h; beside other sequences, exactly its draft
//   length), and the sampler verifies them: a batch then gives a sequence every drafted token its
//   sampler sampled too, and the one sampled after them.
//   With histories but a draft length of 0, a step still guesses its next token, to be checked.
//   With proposals (a draft model's, each at most its sequence's draft length), the first step
//   verifies them in place of the lookup's guesses.
//   Resolves to an Int32Array: each sequence's count of sampled tokens, then of drafted tokens,
//   then of accepted ones, then of guesses tried (drafted tokens verified, and without a draft
//   each step's guess at the next token), then of those right, then each sequence's tokens in
//   turn. Whatever ends it, every sequence then holds exactly its input and the tokens returned
//   but the last: a failure rejects and leaves them as they were before the call.
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
#include <algorithm>
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
#include "lookup-draft.h"
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
    // Each sequence's position of the token the next step decodes.
    std::vector<int32_t> positions;
    // Each sequence's token the next step decodes.
    std::vector<llama_token> inputs;
    // The tokens each sequence may sample at most: the run ends once one has.
    std::vector<int32_t> limits;
    // Batches at most.
    int32_t count;
    // Drafted tokens each sequence's step verifies at most (none without histories).
    std::vector<int32_t> draftLengths;
    // Each drafting sequence's tokens, ending with its input: where its drafts are looked up.
    std::vector<std::vector<llama_token>> histories;
    // Each sequence's draft for the first step, given by the caller (none: looked up).
    std::vector<std::vector<llama_token>> proposals;
    uint64_t abortion = aborts.load();
    // llama.cpp saw the abort inside the decode in flight: what it logs from then on is the abort's.
    bool abortSeen = false;
    // The context has no abort callback of this call's (set once, before the first abortable decode).
    bool unarmed = true;
    // Each sequence's sampled tokens, and the drafted tokens its steps verified and accepted.
    std::vector<std::vector<llama_token>> sampled;
    std::vector<int32_t> drafted;
    std::vector<int32_t> accepted;
    // Each sequence's guesses tried (a drafted token verified, or a step's guess at its next token
    // without a draft) and those the sampler sampled too: how often its guesses are right.
    std::vector<int32_t> tried;
    std::vector<int32_t> right;
    std::string error;
    napi_deferred deferred = nullptr;

    // On the decode thread; as the addon's decode and sample workers for a batch of each
    // sequence's token, and its draft after it.
    void run() {
        const int32_t n = static_cast<int32_t>(sequenceIds.size());
        const std::vector<int32_t> starts = positions;
        sampled.assign(n, {});
        drafted.assign(n, 0);
        accepted.assign(n, 0);
        tried.assign(n, 0);
        right.assign(n, 0);
        int32_t capacity = n;
        for (const int32_t length : draftLengths) capacity += length;
        llama_batch batch = llama_batch_init(capacity, 0, 1);
        llama_memory_t memory = llama_get_memory(context->ctx);
        // No shift can become pending during the run: the JS side holds the context's lock, which
        // node-llama-cpp's erasures take. One pending at the start is applied by the first decode.
        bool shift = shiftPending(memory);
        std::vector<std::vector<llama_token>> drafts(n);
        // Each sequence's guess at its next token, drafted or not (-1: none).
        std::vector<llama_token> guesses(n, -1);
        std::vector<int32_t> firsts(n);
        try {
            const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(context->ctx));
            for (int32_t step = 0; step < count && !aborted(this); step++) {
                batch.n_tokens = 0;
                for (int32_t i = 0; i < n; i++) {
                    firsts[i] = batch.n_tokens;
                    const int32_t room = limits[i] - static_cast<int32_t>(sampled[i].size()) - 1;
                    if (!histories.empty()) {
                        const int32_t length = std::min(draftLengths[i], room);
                        if (step == 0 && !proposals.empty()) {
                            const std::vector<llama_token> & proposal = proposals[i];
                            drafts[i].assign(proposal.begin(), proposal.begin() + std::min(static_cast<int32_t>(proposal.size()), std::max(length, 0)));
                            guesses[i] = proposal.empty() ? -1 : proposal[0];
                        } else {
                            lookup::draft(histories[i], std::max(length, 1), drafts[i]);
                            guesses[i] = drafts[i].empty() ? -1 : drafts[i][0];
                            if (length < 1) drafts[i].clear();
                        }
                        // llama.cpp computes a batch whose sequences bring different token counts
                        // in several pieces, each a read of every weight: beside others, a draft
                        // is as long as theirs, the guess it lacks its input repeated.
                        while (n > 1 && static_cast<int32_t>(drafts[i].size()) < length) drafts[i].push_back(inputs[i]);
                    }
                    add(batch, inputs[i], positions[i], sequenceIds[i]);
                    for (size_t d = 0; d < drafts[i].size(); d++) add(batch, drafts[i][d], positions[i] + 1 + static_cast<int32_t>(d), sequenceIds[i]);
                }
                if (!decode(batch, shift)) break;
                if (shift) shiftApplied(memory);
                shift = false;
                bool ended = false;
                for (int32_t i = 0; i < n; i++) {
                    // The sampler takes the logits after the input, then after each drafted token
                    // while it samples the token drafted there: what it samples is always the
                    // reply's next token, as without a draft, so the reply is the same one.
                    const int32_t drafting = static_cast<int32_t>(drafts[i].size());
                    int32_t taken = 0;
                    int32_t guessedRight = 0;
                    for (;;) {
                        llama_token token;
                        if (!sample(i, firsts[i] + taken, token)) return finish(batch, starts);
                        const bool guessed = taken < drafting && drafts[i][taken] == token;
                        taken++;
                        guessedRight += guessed ? 1 : 0;
                        sampled[i].push_back(token);
                        if (!histories.empty()) histories[i].push_back(token);
                        inputs[i] = token;
                        if (llama_vocab_is_eog(vocab, token)) {
                            ended = true;
                            break;
                        }
                        if (!guessed) break;
                    }
                    drafted[i] += drafting;
                    accepted[i] += guessedRight;
                    // Without a draft the guess is tried all the same: how often guesses are right
                    // says when drafting would pay.
                    if (drafting > 0) {
                        tried[i] += std::min(taken, drafting);
                        right[i] += guessedRight;
                    } else if (guesses[i] >= 0) {
                        tried[i]++;
                        right[i] += guesses[i] == sampled[i][sampled[i].size() - taken] ? 1 : 0;
                    }
                    positions[i] += taken;
                    // The drafted tokens after the first one rejected go back out.
                    if (taken <= static_cast<int32_t>(drafts[i].size())) llama_memory_seq_rm(memory, sequenceIds[i], positions[i], -1);
                    if (static_cast<int32_t>(sampled[i].size()) >= limits[i]) ended = true;
                }
                if (ended) break;
            }
        } catch (const std::exception & failure) {
            error = failure.what();
        } catch (...) {
            error = "Unknown error when calling \"llama_decode\"";
        }
        finish(batch, starts);
    }

    static void add(llama_batch & batch, llama_token token, int32_t position, int32_t sequenceId) {
        const int32_t i = batch.n_tokens++;
        batch.token[i] = token;
        batch.pos[i] = position;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = sequenceId;
        batch.logits[i] = true;
    }

    // What the sequences hold past the tokens handed back goes: llama.cpp takes an aborted or
    // failed batch's cells back out only from the piece (ubatch) it was computing, and splits a
    // batch into pieces where the sequence ids are not consecutive. A failure hands back none.
    void finish(llama_batch & batch, const std::vector<int32_t> & starts) {
        llama_set_abort_callback(context->ctx, nullptr, nullptr);
        llama_memory_t memory = llama_get_memory(context->ctx);
        for (size_t i = 0; i < sequenceIds.size(); i++) {
            if (!error.empty()) sampled[i].clear();
            // The sequence holds its input and every sampled token but the last, not yet decoded.
            llama_memory_seq_rm(memory, sequenceIds[i], starts[i] + static_cast<int32_t>(sampled[i].size()), -1);
        }
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

    // Sequence i's next token, from the logits at `index` of the batch just decoded.
    bool sample(int32_t i, int32_t index, llama_token & token) {
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
        sampler->sampleAndReleaseLock(context->sharedSamplerData.mutex, lock, context->ctx, index, candidates, false);
        if (candidates.size == 0 || candidates.selected < 0 || static_cast<size_t>(candidates.selected) >= candidates.size) {
            error = "llama.cpp failed to sample a token";
            return false;
        }
        token = candidates.data[candidates.selected].id;
        sampler->acceptToken(token);
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
        // Each sequence's count of tokens sampled, of drafted tokens, of those accepted, of guesses
        // tried and of those right; then the tokens.
        const size_t n = steps->sampled.size();
        size_t length = 5 * n;
        for (const auto & tokens : steps->sampled) length += tokens.size();
        Napi::Int32Array out = Napi::Int32Array::New(env, length);
        size_t at = 5 * n;
        for (size_t i = 0; i < n; i++) {
            out[i] = static_cast<int32_t>(steps->sampled[i].size());
            out[n + i] = steps->drafted[i];
            out[2 * n + i] = steps->accepted[i];
            out[3 * n + i] = steps->tried[i];
            out[4 * n + i] = steps->right[i];
            for (const llama_token token : steps->sampled[i]) out[at++] = token;
        }
        napi_resolve_deferred(env, steps->deferred, out);
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
    AddonContext * context = liveContextOf(env, info, "decodeSteps");
    if (context == nullptr) return nullptr;
    const char * signature =
        "decodeSteps(sequenceIds: number[], positions: number[], tokens: number[], samplers: AddonSampler[], limits: number[], steps: number, "
        "draftLengths?: number[], histories?: Uint32Array[], proposals?: Uint32Array[])";
    if (info.Length() < 6 || !info[0].IsArray() || !info[1].IsArray() || !info[2].IsArray() || !info[3].IsArray() || !info[4].IsArray() ||
        !info[5].IsNumber()) {
        return fail(Napi::TypeError::New(env, signature));
    }
    const Napi::Array ids = info[0].As<Napi::Array>();
    const Napi::Array positions = info[1].As<Napi::Array>();
    const Napi::Array inputs = info[2].As<Napi::Array>();
    const Napi::Array samplers = info[3].As<Napi::Array>();
    const Napi::Array limits = info[4].As<Napi::Array>();
    const bool drafting = info.Length() > 6 && !info[6].IsUndefined();
    if (drafting && (info.Length() < 8 || !info[6].IsArray() || !info[7].IsArray())) return fail(Napi::TypeError::New(env, signature));
    const bool proposing = info.Length() > 8 && !info[8].IsUndefined();
    if (proposing && (!drafting || !info[8].IsArray())) return fail(Napi::TypeError::New(env, signature));
    const uint32_t n = ids.Length();
    const uint32_t sequences = llama_n_seq_max(context->ctx);
    if (n == 0 || n > sequences || positions.Length() != n || inputs.Length() != n || samplers.Length() != n || limits.Length() != n ||
        (drafting && (info[6].As<Napi::Array>().Length() != n || info[7].As<Napi::Array>().Length() != n)) ||
        (proposing && info[8].As<Napi::Array>().Length() != n)) {
        return fail(Napi::RangeError::New(env, "decodeSteps: one to the context's sequence count of sequences, each with a position, a token, a sampler and a limit"));
    }
    int64_t count = 0;
    if (!integerOf(info[5], 1, INT32_LIMIT, count)) return fail(Napi::RangeError::New(env, "decodeSteps: steps is a whole number of at least 1"));
    const int64_t contextSize = llama_n_ctx_seq(context->ctx);
    const int64_t vocabulary = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(context->ctx)));
    auto steps = std::make_unique<Steps>(Steps{context, {}, {}, {}, {}, {}, static_cast<int32_t>(count)});
    std::vector<bool> seen(sequences, false);
    int64_t batchTokens = 0;
    for (uint32_t i = 0; i < n; i++) {
        int64_t id = 0, position = 0, token = 0, limit = 0, draftLength = 0;
        if (!integerOf(ids.Get(i), 0, INT32_LIMIT, id) || !integerOf(positions.Get(i), 0, INT32_LIMIT, position) ||
            !integerOf(inputs.Get(i), 0, INT32_LIMIT, token) || !integerOf(limits.Get(i), 1, INT32_LIMIT, limit) ||
            (drafting && !integerOf(info[6].As<Napi::Array>().Get(i), 0, INT32_LIMIT, draftLength))) {
            return fail(Napi::TypeError::New(env, signature));
        }
        // One position stays free at the end of the sequence's context, as node-llama-cpp keeps it:
        // every token sampled, and every drafted one, stays below it.
        if (id >= sequences || seen[id] || position + limit >= contextSize) {
            return fail(Napi::RangeError::New(env, "decodeSteps: a sequence (or a repeated one), position or limit is outside the context"));
        }
        if (token >= vocabulary) return fail(Napi::RangeError::New(env, "decodeSteps: a token is outside the model's vocabulary"));
        seen[id] = true;
        batchTokens += 1 + draftLength;
        if (!instanceOf(env, samplers.Get(i), classesOfThisThread.sampler)) return fail(Napi::TypeError::New(env, "decodeSteps: a sampler is not an AddonSampler"));
        AddonSampler * sampler = Napi::ObjectWrap<AddonSampler>::Unwrap(samplers.Get(i).As<Napi::Object>());
        if (sampler == nullptr || sampler->disposed) return fail(Napi::Error::New(env, "decodeSteps: a sampler is disposed"));
        steps->sequenceIds.push_back(static_cast<int32_t>(id));
        steps->positions.push_back(static_cast<int32_t>(position));
        steps->inputs.push_back(static_cast<llama_token>(token));
        steps->limits.push_back(static_cast<int32_t>(limit));
        steps->samplers.push_back(sampler);
        if (!drafting) continue;
        const Napi::Value history = info[7].As<Napi::Array>().Get(i);
        if (!history.IsTypedArray() || history.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
            return fail(Napi::TypeError::New(env, signature));
        }
        const Napi::Uint32Array held = history.As<Napi::Uint32Array>();
        std::vector<llama_token> tokens(held.Data(), held.Data() + held.ElementLength());
        tokens.push_back(static_cast<llama_token>(token));
        steps->draftLengths.push_back(static_cast<int32_t>(draftLength));
        steps->histories.push_back(std::move(tokens));
        if (!proposing) continue;
        const Napi::Value proposed = info[8].As<Napi::Array>().Get(i);
        if (!proposed.IsTypedArray() || proposed.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) return fail(Napi::TypeError::New(env, signature));
        const Napi::Uint32Array given = proposed.As<Napi::Uint32Array>();
        if (static_cast<int64_t>(given.ElementLength()) > draftLength) return fail(Napi::RangeError::New(env, "decodeSteps: a proposal is longer than its draft length"));
        std::vector<llama_token> proposal(given.Data(), given.Data() + given.ElementLength());
        for (const llama_token drafted : proposal) {
            if (drafted < 0 || drafted >= vocabulary) return fail(Napi::RangeError::New(env, "decodeSteps: a token is outside the model's vocabulary"));
        }
        steps->proposals.push_back(std::move(proposal));
    }
    if (batchTokens > llama_n_batch(context->ctx)) return fail(Napi::RangeError::New(env, "decodeSteps: the tokens and drafts exceed the context's batch"));
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

AddonSampler * samplerOf(napi_env env, const Napi::Value & value) {
    return instanceOf(env, value, classesOfThisThread.sampler) ? Napi::ObjectWrap<AddonSampler>::Unwrap(value.As<Napi::Object>()) : nullptr;
}

AddonContext * liveContextOf(napi_env env, const Napi::CallbackInfo & info, const char * method) {
    AddonContext * context = instanceOf(env, info.This(), classesOfThisThread.context) ? Napi::ObjectWrap<AddonContext>::Unwrap(info.This().As<Napi::Object>()) : nullptr;
    if (context == nullptr) {
        fail(Napi::TypeError::New(env, std::string(method) + ": `this` is not an AddonContext"));
        return nullptr;
    }
    if (context->disposed || context->ctx == nullptr) {
        fail(Napi::Error::New(env, "Context is disposed"));
        return nullptr;
    }
    return context;
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
    extended.push_back(method("sequenceState", sequenceState));
    extended.push_back(method("restoreSequenceState", restoreSequenceState));
    extended.push_back(method("addInfillSampler", addInfillSampler));
    extended.push_back(method("loadProjector", loadProjector));
    extended.push_back(method("unloadProjector", unloadProjector));
    extended.push_back(method("imageLayout", imageLayout));
    extended.push_back(method("evalImage", evalImage));
    const napi_status status = __real_napi_define_class(env, utf8name, length, constructor, data, extended.size(), extended.data(), result);
    if (status == napi_ok) remember(env, *result, classesOfThisThread.context);
    return status;
}
