// Adds three methods to node-llama-cpp's AddonContext, for images in a prompt (#51), through
// llama.cpp's mtmd (its sources compiled into the addon, see decode-thread.cmake):
// - loadProjector(path: string, threads: number): resolves to the marker that stands for an image
//   in a prompt's text, once the projector (an mmproj file) is loaded for the context's model. A
//   context holds one projector at most: a load replaces the one before. The marker is drawn at
//   random, as llama-server's is: text a user typed cannot stand for an image.
// - unloadProjector(): frees it. The context's disposal does not: its owner unloads it first.
// - evalPrompt(sequenceId, position, text: string, images: Uint8Array[], batch, addSpecial):
//   tokenizes `text` (special tokens parsed) with one marker per image, in order (refused where
//   their numbers differ), and evaluates
//   its text and image chunks into the sequence from `position`, `batch` tokens at most a decode,
//   the last token's logits kept (what llama-server's mtmd_helper_eval_chunks does). Resolves to an
//   Int32Array: per chunk, its kind (0 text, 1 image), its token count and its position count,
//   then a text chunk's tokens. Images are decoded from their bytes (stb_image: PNG, JPEG, BMP,
//   GIF's first frame), each named by its SHA-256. On a failure the sequence is emptied from
//   `position` on, so it holds what it held before the call.
// The caller holds the context's lock while a load or an evaluation runs. Both run on a pool
// thread: the decodes go to the decode thread through the llama_decode wrap, the image encodes
// run where the call runs.
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "addon-methods.h"
#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"

namespace {

std::mutex projectorsMutex;
// Each context's projector.
std::unordered_map<const AddonContext *, mtmd_context *> projectors;

mtmd_context * projectorOf(const AddonContext * context) {
    std::lock_guard<std::mutex> lock(projectorsMutex);
    const auto found = projectors.find(context);
    return found == projectors.end() ? nullptr : found->second;
}

void replaceProjector(const AddonContext * context, mtmd_context * projector) {
    mtmd_context * before = nullptr;
    {
        std::lock_guard<std::mutex> lock(projectorsMutex);
        const auto found = projectors.find(context);
        if (found != projectors.end()) {
            before = found->second;
            projectors.erase(found);
        }
        if (projector != nullptr) projectors[context] = projector;
    }
    if (before != nullptr) mtmd_free(before);
}

class LoadWorker : public ContextWorker {
  public:
    LoadWorker(Napi::Env env, AddonContext * context, std::string path, int threads)
        : ContextWorker(env, "ParleyProjectorLoad", context), path(std::move(path)), threads(threads) {}

  protected:
    void work() override {
        std::random_device random;
        const char * hex = "0123456789abcdef";
        marker = "<__parley_image_";
        for (int i = 0; i < 16; i++) marker += hex[random() % 16];
        marker += "__>";
        mtmd_context_params params = mtmd_context_params_default();
        params.media_marker = marker.c_str();
        params.n_threads = threads;
        params.print_timings = false;
        params.warmup = false;
        mtmd_context * projector = mtmd_init_from_file(path.c_str(), context->model->model, params);
        if (projector == nullptr) throw std::runtime_error("the projector " + path + " could not be loaded for this model");
        if (!mtmd_support_vision(projector)) {
            mtmd_free(projector);
            throw std::runtime_error("the projector " + path + " takes no images");
        }
        replaceProjector(context, projector);
    }

    void OnOK() override { deferred.Resolve(Napi::String::New(Env(), marker)); }

  private:
    std::string path;
    int threads;
    std::string marker;
};

struct BitmapFree {
    void operator()(mtmd_bitmap * bitmap) const { mtmd_bitmap_free(bitmap); }
};
struct ChunksFree {
    void operator()(mtmd_input_chunks * chunks) const { mtmd_input_chunks_free(chunks); }
};

class EvalWorker : public ContextWorker {
  public:
    EvalWorker(Napi::Env env, AddonContext * context, llama_seq_id sequence, llama_pos position, std::string text,
               std::vector<std::vector<unsigned char>> images, int32_t batch, bool addSpecial)
        : ContextWorker(env, "ParleyPromptEval", context), sequence(sequence), position(position), text(std::move(text)),
          images(std::move(images)), batch(batch), addSpecial(addSpecial) {}

  protected:
    void work() override {
        mtmd_context * projector = projectorOf(context);
        if (projector == nullptr) throw std::runtime_error("the context has no projector loaded");
        const std::string marker = mtmd_get_marker(projector);
        size_t markers = 0;
        for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + marker.size())) markers++;
        if (markers != images.size()) {
            throw std::runtime_error("the prompt has " + std::to_string(markers) + " image markers for " + std::to_string(images.size()) + " images");
        }
        std::vector<std::unique_ptr<mtmd_bitmap, BitmapFree>> bitmaps;
        for (size_t i = 0; i < images.size(); i++) {
            const mtmd_helper_bitmap_wrapper decoded =
                mtmd_helper_bitmap_init_from_buf(projector, images[i].data(), images[i].size(), false, mtmd_helper_init_opt_default());
            if (decoded.video_ctx != nullptr) mtmd_helper_video_free(decoded.video_ctx);
            if (decoded.bitmap == nullptr) throw std::runtime_error("image " + std::to_string(i) + " could not be decoded");
            bitmaps.emplace_back(decoded.bitmap);
            if (mtmd_bitmap_is_audio(decoded.bitmap)) throw std::runtime_error("image " + std::to_string(i) + " is audio, not an image");
        }
        std::vector<const mtmd_bitmap *> pointers;
        for (const auto & bitmap : bitmaps) pointers.push_back(bitmap.get());
        std::unique_ptr<mtmd_input_chunks, ChunksFree> chunks(mtmd_input_chunks_init());
        const mtmd_input_text input{text.c_str(), text.size(), addSpecial, true};
        const int32_t tokenized = mtmd_tokenize(projector, chunks.get(), &input, pointers.data(), pointers.size());
        if (tokenized != 0) throw std::runtime_error("the images could not be prepared for the projector");
        llama_pos end = position;
        const int32_t evaluated = mtmd_helper_eval_chunks(projector, context->ctx, chunks.get(), position, sequence, batch, true, &end);
        if (evaluated != 0) {
            llama_memory_seq_rm(llama_get_memory(context->ctx), sequence, position, -1);
            throw std::runtime_error("the prompt could not be evaluated (" + std::to_string(evaluated) + ")");
        }
        for (size_t i = 0; i < mtmd_input_chunks_size(chunks.get()); i++) {
            const mtmd_input_chunk * chunk = mtmd_input_chunks_get(chunks.get(), i);
            const bool isText = mtmd_input_chunk_get_type(chunk) == MTMD_INPUT_CHUNK_TYPE_TEXT;
            layout.push_back(isText ? 0 : 1);
            layout.push_back(static_cast<int32_t>(mtmd_input_chunk_get_n_tokens(chunk)));
            layout.push_back(static_cast<int32_t>(mtmd_input_chunk_get_n_pos(chunk)));
            if (!isText) continue;
            size_t count = 0;
            const llama_token * tokens = mtmd_input_chunk_get_tokens_text(chunk, &count);
            layout.insert(layout.end(), tokens, tokens + count);
        }
    }

    void OnOK() override {
        Napi::Int32Array result = Napi::Int32Array::New(Env(), layout.size());
        std::memcpy(result.Data(), layout.data(), sizeof(int32_t) * layout.size());
        deferred.Resolve(result);
    }

  private:
    llama_seq_id sequence;
    llama_pos position;
    std::string text;
    std::vector<std::vector<unsigned char>> images;
    int32_t batch;
    bool addSpecial;
    std::vector<int32_t> layout;
};

napi_value load(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "loadProjector");
    if (context == nullptr) return nullptr;
    int64_t threads = 0;
    if (info.Length() < 2 || !info[0].IsString() || !integerOf(info[1], 1, 1024, threads)) {
        return fail(Napi::TypeError::New(env, "loadProjector(path: string, threads: a whole number from 1)"));
    }
    auto * worker = new LoadWorker(env, context, info[0].As<Napi::String>().Utf8Value(), static_cast<int>(threads));
    worker->Queue();
    return worker->promise();
}

napi_value unload(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "unloadProjector");
    if (context == nullptr) return nullptr;
    replaceProjector(context, nullptr);
    return nullptr;
}

napi_value eval(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "evalPrompt");
    if (context == nullptr) return nullptr;
    const char * signature =
        "evalPrompt(sequenceId: a sequence of the context, position: a position in it, text: string, images: Uint8Array[], batch: a whole number "
        "from 1 to the context's batch, addSpecial: boolean)";
    int64_t sequence = 0;
    int64_t position = 0;
    int64_t batch = 0;
    if (info.Length() < 6 || !integerOf(info[0], 0, static_cast<int64_t>(llama_n_seq_max(context->ctx)) - 1, sequence) ||
        !integerOf(info[1], 0, static_cast<int64_t>(llama_n_ctx(context->ctx)) - 1, position) || !info[2].IsString() || !info[3].IsArray() ||
        !integerOf(info[4], 1, static_cast<int64_t>(llama_n_batch(context->ctx)), batch) || !info[5].IsBoolean()) {
        return fail(Napi::TypeError::New(env, signature));
    }
    const Napi::Array given = info[3].As<Napi::Array>();
    std::vector<std::vector<unsigned char>> images;
    for (uint32_t i = 0; i < given.Length(); i++) {
        const Napi::Value image = given.Get(i);
        if (!image.IsTypedArray() || image.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) return fail(Napi::TypeError::New(env, signature));
        const Napi::Uint8Array bytes = image.As<Napi::Uint8Array>();
        images.emplace_back(bytes.Data(), bytes.Data() + bytes.ByteLength());
    }
    auto * worker = new EvalWorker(env, context, static_cast<llama_seq_id>(sequence), static_cast<llama_pos>(position),
                                   info[2].As<Napi::String>().Utf8Value(), std::move(images), static_cast<int32_t>(batch),
                                   info[5].As<Napi::Boolean>().Value());
    worker->Queue();
    return worker->promise();
}

}  // namespace

napi_value loadProjector(napi_env env, napi_callback_info info) {
    return guarded<load>(env, info);
}

napi_value unloadProjector(napi_env env, napi_callback_info info) {
    return guarded<unload>(env, info);
}

napi_value evalPrompt(napi_env env, napi_callback_info info) {
    return guarded<eval>(env, info);
}
