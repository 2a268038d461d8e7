// Adds four methods to node-llama-cpp's AddonContext, for images in a prompt (#51), through
// llama.cpp's mtmd (its sources compiled into the addon, see decode-thread.cmake):
// - loadProjector(path: string, threads: number): resolves to the marker that stands for an image
//   in a prompt's text, once the projector (an mmproj file) is loaded for the context's model. A
//   context holds one projector at most: a load replaces the one before. The marker is drawn at
//   random, as llama-server's is: text a user typed cannot stand for an image.
// - unloadProjector(): frees it. The context's disposal does not: its owner unloads it first.
// - imageLayout(image: Uint8Array, key: string): how an image stands in a prompt: the marker
//   tokenized with it alone, as an Int32Array: per chunk, its kind (0 text, 1 image), its token
//   count and its position count, then a text chunk's tokens (the text some projectors put around
//   an image). mtmd tokenizes each text between markers on its own, so a prompt's chunks are its
//   texts' tokens with these in place of each marker: the caller tokenizes the text itself. The
//   image so prepared (decoded, resized) is kept under `key`, among the last few, for evalImage.
// - evalImage(sequenceId, position, image: Uint8Array, key: string, chunk, batch): encodes that
//   image chunk of the layout (the image as prepared under `key`, or prepared again) and evaluates
//   its embeddings into the sequence from `position`, `batch` at most a decode, no logits kept (a
//   prompt ends with text); resolves to the positions it took. On a failure the sequence is
//   emptied from `position` on, so it holds what it held before the call.
// Images are decoded from their bytes (stb_image: PNG, JPEG, BMP, GIF's first frame).
// The caller holds the context's lock while a load or an evaluation runs. Both run on a pool
// thread: the decodes go to the decode thread through the llama_decode wrap, the image encodes
// run where the call runs.
#include <cstdint>
#include <cstring>
#include <list>
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

struct ChunksFree {
    void operator()(mtmd_input_chunks * chunks) const { mtmd_input_chunks_free(chunks); }
};

// Images a projector prepared (decoded, resized, tokenized) most recently, at most this many: an
// evaluation finds its image as the layout asked just before it left it.
constexpr size_t PREPARED_IMAGES = 8;

// A context's projector, and the images it prepared, newest first, by the caller's key.
struct Projector {
    mtmd_context * ctx;
    std::mutex mutex;
    std::list<std::pair<std::string, std::shared_ptr<mtmd_input_chunks>>> prepared;

    explicit Projector(mtmd_context * ctx) : ctx(ctx) {}
    ~Projector() {
        prepared.clear();
        mtmd_free(ctx);
    }
};

std::mutex projectorsMutex;
// Each context's projector.
std::unordered_map<const AddonContext *, std::shared_ptr<Projector>> projectors;

std::shared_ptr<Projector> projectorOf(const AddonContext * context) {
    std::lock_guard<std::mutex> lock(projectorsMutex);
    const auto found = projectors.find(context);
    return found == projectors.end() ? nullptr : found->second;
}

void replaceProjector(const AddonContext * context, std::shared_ptr<Projector> projector) {
    // Freed here, outside the lock, unless a call in flight still holds it.
    std::shared_ptr<Projector> before;
    {
        std::lock_guard<std::mutex> lock(projectorsMutex);
        const auto found = projectors.find(context);
        if (found != projectors.end()) {
            before = std::move(found->second);
            projectors.erase(found);
        }
        if (projector != nullptr) projectors[context] = std::move(projector);
    }
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
        // mtmd's and clip's logs go where llama.cpp's go (node-llama-cpp's logger, at its level), not to stderr.
        ggml_log_callback log = nullptr;
        void * logData = nullptr;
        llama_log_get(&log, &logData);
        mtmd_helper_log_set(log, logData);
        mtmd_context_params params = mtmd_context_params_default();
        params.media_marker = marker.c_str();
        params.n_threads = threads;
        params.print_timings = false;
        params.warmup = false;
        mtmd_context * loaded = mtmd_init_from_file(path.c_str(), context->model->model, params);
        if (loaded == nullptr) throw std::runtime_error("the projector " + path + " could not be loaded for this model");
        auto projector = std::make_shared<Projector>(loaded);
        if (!mtmd_support_vision(loaded)) throw std::runtime_error("the projector " + path + " takes no images");
        replaceProjector(context, std::move(projector));
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

// One image alone: the marker tokenized with it, the text the projector puts around it included
// (mtmd tokenizes each text between markers on its own, so a prompt's chunks are its texts'
// tokens with these in place of each marker). Decoded from its bytes first.
std::unique_ptr<mtmd_input_chunks, ChunksFree> imageChunks(mtmd_context * projector, const std::vector<unsigned char> & image) {
    const mtmd_helper_bitmap_wrapper decoded = mtmd_helper_bitmap_init_from_buf(projector, image.data(), image.size(), false, mtmd_helper_init_opt_default());
    if (decoded.video_ctx != nullptr) mtmd_helper_video_free(decoded.video_ctx);
    if (decoded.bitmap == nullptr) throw std::runtime_error("the image could not be decoded");
    std::unique_ptr<mtmd_bitmap, BitmapFree> bitmap(decoded.bitmap);
    if (mtmd_bitmap_is_audio(bitmap.get())) throw std::runtime_error("the image is audio");
    const std::string marker = mtmd_get_marker(projector);
    std::unique_ptr<mtmd_input_chunks, ChunksFree> chunks(mtmd_input_chunks_init());
    const mtmd_input_text input{marker.c_str(), marker.size(), false, true};
    const mtmd_bitmap * bitmaps[] = {bitmap.get()};
    if (mtmd_tokenize(projector, chunks.get(), &input, bitmaps, 1) != 0) throw std::runtime_error("the image could not be prepared for the projector");
    return chunks;
}

std::shared_ptr<Projector> projectorFor(const AddonContext * context) {
    auto projector = projectorOf(context);
    if (projector == nullptr) throw std::runtime_error("the context has no projector loaded");
    return projector;
}

// The image prepared under `key`, or prepared now and kept under it.
std::shared_ptr<mtmd_input_chunks> prepared(Projector & projector, const std::string & key, const std::vector<unsigned char> & image) {
    {
        std::lock_guard<std::mutex> lock(projector.mutex);
        for (auto it = projector.prepared.begin(); it != projector.prepared.end(); ++it) {
            if (it->first != key) continue;
            projector.prepared.splice(projector.prepared.begin(), projector.prepared, it);
            return it->second;
        }
    }
    std::shared_ptr<mtmd_input_chunks> chunks(imageChunks(projector.ctx, image).release(), ChunksFree());
    std::lock_guard<std::mutex> lock(projector.mutex);
    projector.prepared.emplace_front(key, chunks);
    if (projector.prepared.size() > PREPARED_IMAGES) projector.prepared.pop_back();
    return chunks;
}

class LayoutWorker : public ContextWorker {
  public:
    LayoutWorker(Napi::Env env, AddonContext * context, std::vector<unsigned char> image, std::string key)
        : ContextWorker(env, "ParleyImageLayout", context), image(std::move(image)), key(std::move(key)) {}

  protected:
    void work() override {
        const auto projector = projectorFor(context);
        const auto chunks = prepared(*projector, key, image);
        for (size_t i = 0; i < mtmd_input_chunks_size(chunks.get()); i++) {
            const mtmd_input_chunk * chunk = mtmd_input_chunks_get(chunks.get(), i);
            const bool isText = mtmd_input_chunk_get_type(chunk) == MTMD_INPUT_CHUNK_TYPE_TEXT;
            if (!isText && mtmd_input_chunk_get_type(chunk) != MTMD_INPUT_CHUNK_TYPE_IMAGE) throw std::runtime_error("the projector made no image of it");
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
    std::vector<unsigned char> image;
    std::string key;
    std::vector<int32_t> layout;
};

class EvalWorker : public ContextWorker {
  public:
    EvalWorker(Napi::Env env, AddonContext * context, llama_seq_id sequence, llama_pos position, std::vector<unsigned char> image, std::string key,
               uint32_t chunk, int32_t batch)
        : ContextWorker(env, "ParleyImageEval", context), sequence(sequence), position(position), image(std::move(image)), key(std::move(key)),
          chunk(chunk), batch(batch) {}

  protected:
    void work() override {
        const auto projector = projectorFor(context);
        const auto chunks = prepared(*projector, key, image);
        if (chunk >= mtmd_input_chunks_size(chunks.get()) ||
            mtmd_input_chunk_get_type(mtmd_input_chunks_get(chunks.get(), chunk)) != MTMD_INPUT_CHUNK_TYPE_IMAGE) {
            throw std::runtime_error("the image has no image chunk " + std::to_string(chunk));
        }
        llama_pos end = position;
        const int32_t evaluated =
            mtmd_helper_eval_chunk_single(projector->ctx, context->ctx, mtmd_input_chunks_get(chunks.get(), chunk), position, sequence, batch, false, &end);
        if (evaluated != 0) {
            llama_memory_seq_rm(llama_get_memory(context->ctx), sequence, position, -1);
            throw std::runtime_error("the image could not be evaluated (" + std::to_string(evaluated) + ")");
        }
        positions = end - position;
    }

    void OnOK() override { deferred.Resolve(Napi::Number::New(Env(), positions)); }

  private:
    llama_seq_id sequence;
    llama_pos position;
    std::vector<unsigned char> image;
    std::string key;
    uint32_t chunk;
    int32_t batch;
    llama_pos positions = 0;
};

bool bytesOf(const Napi::Value & value, std::vector<unsigned char> & bytes) {
    if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) return false;
    const Napi::Uint8Array array = value.As<Napi::Uint8Array>();
    bytes.assign(array.Data(), array.Data() + array.ByteLength());
    return true;
}

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

napi_value layout(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "imageLayout");
    if (context == nullptr) return nullptr;
    std::vector<unsigned char> image;
    if (info.Length() < 2 || !bytesOf(info[0], image) || !info[1].IsString()) return fail(Napi::TypeError::New(env, "imageLayout(image: Uint8Array, key: string)"));
    auto * worker = new LayoutWorker(env, context, std::move(image), info[1].As<Napi::String>().Utf8Value());
    worker->Queue();
    return worker->promise();
}

napi_value eval(napi_env env, const Napi::CallbackInfo & info) {
    AddonContext * context = liveContextOf(env, info, "evalImage");
    if (context == nullptr) return nullptr;
    int64_t sequence = 0;
    int64_t position = 0;
    int64_t chunk = 0;
    int64_t batch = 0;
    std::vector<unsigned char> image;
    if (info.Length() < 6 || !integerOf(info[0], 0, static_cast<int64_t>(llama_n_seq_max(context->ctx)) - 1, sequence) ||
        !integerOf(info[1], 0, static_cast<int64_t>(llama_n_ctx(context->ctx)) - 1, position) || !bytesOf(info[2], image) || !info[3].IsString() ||
        !integerOf(info[4], 0, 1 << 20, chunk) || !integerOf(info[5], 1, static_cast<int64_t>(llama_n_batch(context->ctx)), batch)) {
        return fail(Napi::TypeError::New(env,
                                         "evalImage(sequenceId: a sequence of the context, position: a position in it, image: Uint8Array, key: "
                                         "string, chunk: a whole number, batch: a whole number from 1 to the context's batch)"));
    }
    auto * worker = new EvalWorker(env, context, static_cast<llama_seq_id>(sequence), static_cast<llama_pos>(position), std::move(image),
                                   info[3].As<Napi::String>().Utf8Value(), static_cast<uint32_t>(chunk), static_cast<int32_t>(batch));
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

napi_value imageLayout(napi_env env, napi_callback_info info) {
    return guarded<layout>(env, info);
}

napi_value evalImage(napi_env env, napi_callback_info info) {
    return guarded<eval>(env, info);
}
