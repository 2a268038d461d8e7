// Every llama_decode of the addon runs on this one long-lived thread (linked in with
// `--wrap=llama_decode`, see decode-thread.cmake).
//
// Why: node-llama-cpp calls llama_decode from whichever thread of the runtime's N-API pool picks
// up its async work; under Bun that is two threads on a 2-core machine. ggml's OpenMP loop makes
// each calling thread the master of its own team, so libgomp manages more threads than there are
// CPUs and throttles its barrier spin to ~100 iterations: between every op of the graph, threads
// go to sleep on a futex and are woken again. From one thread a token decodes as fast as in
// llama-server (one decode thread); from the pool far slower.
#include "decode-thread.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <mutex>
#include <thread>

#include "llama.h"

extern "C" int32_t __real_llama_decode(llama_context * ctx, llama_batch batch);

namespace {

class DecodeThread {
  public:
    void post(std::function<void()> task) {
        {
            std::lock_guard<std::mutex> lock(mutex);
            queue.push_back(std::move(task));
        }
        ready.notify_one();
    }

    int32_t decode(llama_context * ctx, llama_batch batch) {
        std::promise<int32_t> result;
        std::future<int32_t> done = result.get_future();
        post([&result, ctx, batch] {
            try {
                result.set_value(__real_llama_decode(ctx, batch));
            } catch (...) {
                result.set_exception(std::current_exception());
            }
        });
        // Rethrows what llama_decode threw, on the caller's thread, where the addon catches it.
        return done.get();
    }

  private:
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::function<void()>> queue;
    // Declared last: it starts only once the members it uses exist.
    std::thread worker{[this] { loop(); }};

    void loop() {
        for (;;) {
            std::function<void()> task;
            {
                std::unique_lock<std::mutex> lock(mutex);
                ready.wait(lock, [this] { return !queue.empty(); });
                task = std::move(queue.front());
                queue.pop_front();
            }
            task();
        }
    }
};

DecodeThread & decodeThread() {
    // Never destroyed: a joinable std::thread's destructor at exit would terminate the process,
    // and the thread only ever waits for work.
    static DecodeThread * instance = new DecodeThread();
    return *instance;
}

}  // namespace

void runOnDecodeThread(std::function<void()> task) {
    decodeThread().post(std::move(task));
}

extern "C" int32_t __wrap_llama_decode(llama_context * ctx, llama_batch batch) {
    return decodeThread().decode(ctx, batch);
}
