// Adds two methods to node-llama-cpp's AddonContext, for the RAM tier of saved KV states
// (src/llm/kv-store.ts):
// - sequenceState(sequenceId, tokens: Uint32Array): resolves to the sequence's state copied in
//   memory, in one buffer: the header llama_state_seq_save_file writes (magic, version, token
//   count), the tokens, then the cells as llama_state_seq_get_data copies them (8 bytes of its own
//   header, then what the file holds after the tokens). Written without those 8 bytes, it is the
//   file that llama.cpp's loader reads.
// - restoreSequenceState(sequenceId, cells: Uint8Array): loads the cells part of such a buffer
//   into the sequence (llama_state_seq_set_data), which is emptied where that fails. The bytes
//   must stay unchanged until the promise settles.
// Both run on the decode thread, after any decode posted before them, so they never meet a batch.
//
// Why: node-llama-cpp moves a sequence's state only through a file, a write and a read of the whole
// KV cache per conversation swapped, where a copy in memory is all a returning conversation needs.
#include <cstdint>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "addon-methods.h"
#include "decode-thread.h"
#include "llama.h"

namespace {

// llama_state_seq_save_file's header: magic, version, token count.
constexpr size_t HEADER_BYTES = 3 * sizeof(uint32_t);
// llama_state_seq_get_data's own header: its magic and the sequence id.
constexpr size_t CELLS_HEADER_BYTES = sizeof(uint32_t) + sizeof(llama_seq_id);

// Runs `work` on the decode thread and waits for it, rethrowing what it threw.
template <typename Work>
void onDecodeThread(Work work) {
    std::promise<void> done;
    std::future<void> finished = done.get_future();
    runOnDecodeThread([&done, &work] {
        try {
            work();
            done.set_value();
        } catch (...) {
            done.set_exception(std::current_exception());
        }
    });
    finished.get();
}

// A promise of work on one sequence of a context, done on the decode thread.
class SequenceWorker : public ContextWorker {
  public:
    SequenceWorker(Napi::Env env, const char * name, AddonContext * context, llama_seq_id sequence)
        : ContextWorker(env, name, context), sequence(sequence) {}

  protected:
    llama_seq_id sequence;

    void run(const std::function<void()> & checked) override { onDecodeThread(checked); }
};

class CopyWorker : public SequenceWorker {
  public:
    CopyWorker(Napi::Env env, AddonContext * context, llama_seq_id sequence, std::vector<llama_token> tokens)
        : SequenceWorker(env, "ParleySequenceStateCopy", context, sequence), tokens(std::move(tokens)) {}

  protected:
    void work() override {
        const size_t size = llama_state_seq_get_size(context->ctx, sequence);
        if (size < CELLS_HEADER_BYTES) throw std::runtime_error("llama.cpp could not size the sequence's state");
        const size_t prefix = HEADER_BYTES + sizeof(llama_token) * tokens.size();
        // Not zeroed first: every byte is written below.
        image.reset(new uint8_t[prefix + size]);
        length = prefix + size;
        const uint32_t header[3] = {LLAMA_STATE_SEQ_MAGIC, LLAMA_STATE_SEQ_VERSION, static_cast<uint32_t>(tokens.size())};
        std::memcpy(image.get(), header, HEADER_BYTES);
        std::memcpy(image.get() + HEADER_BYTES, tokens.data(), sizeof(llama_token) * tokens.size());
        if (llama_state_seq_get_data(context->ctx, image.get() + prefix, size, sequence) != size) {
            throw std::runtime_error("llama.cpp could not copy the sequence's state");
        }
    }

    void OnOK() override {
        // Handed over without a copy: the buffer owns the bytes and frees them when collected.
        deferred.Resolve(Napi::Buffer<uint8_t>::New(Env(), image.release(), length, [](Napi::Env, uint8_t * owned) { delete[] owned; }));
    }

  private:
    std::vector<llama_token> tokens;
    std::unique_ptr<uint8_t[]> image;
    size_t length = 0;
};

class RestoreWorker : public SequenceWorker {
  public:
    RestoreWorker(Napi::Env env, AddonContext * context, llama_seq_id sequence, Napi::Uint8Array cells)
        : SequenceWorker(env, "ParleySequenceStateRestore", context, sequence), held(Napi::Persistent(cells)), bytes(cells.Data()),
          size(cells.ByteLength()) {}

  protected:
    void work() override {
        // Read from memory, llama.cpp throws (caught there, answering 0) where the bytes end early
        // or its magic is not theirs, where a file's reader would abort the process.
        if (llama_state_seq_set_data(context->ctx, bytes, size, sequence) != size) {
            llama_memory_seq_rm(llama_get_memory(context->ctx), sequence, -1, -1);
            throw std::runtime_error("llama.cpp could not restore the sequence's state");
        }
    }

    void OnOK() override { deferred.Resolve(Env().Undefined()); }

  private:
    Napi::Reference<Napi::Uint8Array> held;
    const uint8_t * bytes;
    size_t size;
};

int64_t sequenceCount(const AddonContext * context) {
    return static_cast<int64_t>(llama_n_seq_max(context->ctx));
}

napi_value copy(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "sequenceState");
    if (context == nullptr) return nullptr;
    int64_t sequence = 0;
    if (info.Length() < 2 || !integerOf(info[0], 0, sequenceCount(context) - 1, sequence) || !info[1].IsTypedArray() ||
        info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array) {
        return fail(Napi::TypeError::New(env, "sequenceState(sequenceId: a sequence of the context, tokens: Uint32Array)"));
    }
    Napi::Uint32Array held = info[1].As<Napi::Uint32Array>();
    std::vector<llama_token> tokens(held.ElementLength());
    std::memcpy(tokens.data(), held.Data(), sizeof(llama_token) * tokens.size());
    auto * worker = new CopyWorker(env, context, static_cast<llama_seq_id>(sequence), std::move(tokens));
    worker->Queue();
    return worker->promise();
}

napi_value restore(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "restoreSequenceState");
    if (context == nullptr) return nullptr;
    int64_t sequence = 0;
    if (info.Length() < 2 || !integerOf(info[0], 0, sequenceCount(context) - 1, sequence) || !info[1].IsTypedArray() ||
        info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
        return fail(Napi::TypeError::New(env, "restoreSequenceState(sequenceId: a sequence of the context, cells: Uint8Array)"));
    }
    auto * worker = new RestoreWorker(env, context, static_cast<llama_seq_id>(sequence), info[1].As<Napi::Uint8Array>());
    worker->Queue();
    return worker->promise();
}

}  // namespace

napi_value sequenceState(napi_env env, napi_callback_info info) {
    return guarded<copy>(env, info);
}

napi_value restoreSequenceState(napi_env env, napi_callback_info info) {
    return guarded<restore>(env, info);
}
