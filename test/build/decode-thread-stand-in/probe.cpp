#include <cstdio>
#include <thread>
#include <unistd.h>
#include <vector>

int32_t addon_decode(int32_t n_tokens);

// Prints, per caller thread, "<caller tid> <tid llama_decode ran on> <result of a failing decode>".
int main() {
    std::vector<std::thread> callers;
    std::vector<int32_t> caller(3), ran(3), failed(3);
    for (int i = 0; i < 3; i++) {
        callers.emplace_back([&, i] {
            caller[i] = static_cast<int32_t>(gettid());
            ran[i] = addon_decode(1);
            failed[i] = addon_decode(-1);
        });
    }
    for (auto & thread : callers) thread.join();
    for (int i = 0; i < 3; i++) std::printf("%d %d %d\n", caller[i], ran[i], failed[i]);
    return 0;
}
