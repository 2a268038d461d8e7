// The addon's one decode thread (decode-thread.cpp), for native code that must run there.
#pragma once

#include <functional>

// Runs `task` on the decode thread, after every task posted before it; returns at once.
void runOnDecodeThread(std::function<void()> task);
