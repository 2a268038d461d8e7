#include <stdexcept>
#include "llama.h"

// Like node-llama-cpp's decode worker: calls llama_decode and catches what it throws.
int32_t addon_decode(int32_t n_tokens) {
    try {
        return llama_decode(nullptr, llama_batch{n_tokens});
    } catch (const std::runtime_error &) {
        return -1;
    }
}
