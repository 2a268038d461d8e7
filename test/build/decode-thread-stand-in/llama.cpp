#include <stdexcept>
#include <unistd.h>
#include "llama.h"

// Returns the id of the thread it runs on; a negative batch throws, as llama.cpp may.
int32_t llama_decode(llama_context *, llama_batch batch) {
    if (batch.n_tokens < 0) throw std::runtime_error("stand-in decode failed");
    return static_cast<int32_t>(gettid());
}
