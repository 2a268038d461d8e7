// The two declarations of llama.cpp's llama.h that decode-thread.cpp uses.
#pragma once
#include <cstdint>
extern "C" {
struct llama_context;
struct llama_batch {
    int32_t n_tokens;
};
int32_t llama_decode(llama_context * ctx, llama_batch batch);
}
