// A reply's draft found in its own sequence (prompt lookup, as in "prompt lookup decoding"): where
// the sequence's last tokens occurred before, the tokens that followed them there are a guess at
// what follows now. Replies that quote their context (code being edited, a document, their own
// repeats) go on as the context did. Only the sequence's own tokens are searched: a draft never
// carries one user's text into another's reply, nor its timing.
#pragma once

#include <cstdint>
#include <vector>

#include "llama.h"

namespace lookup {

// A shorter match guesses too often wrongly; a longer one tells nothing more about which earlier
// occurrence to follow.
constexpr int32_t MIN_MATCH = 2;
constexpr int32_t MAX_MATCH = 16;

// Up to `length` tokens into `draft`: those after the latest earlier occurrence of the history's
// end that matches it longest (at least MIN_MATCH tokens). Past the history's end the guess repeats
// itself, as a text that repeats from there would: a cycle of a few tokens drafts any length.
inline void draft(const std::vector<llama_token> & history, int32_t length, std::vector<llama_token> & draft) {
    draft.clear();
    const int64_t size = static_cast<int64_t>(history.size());
    if (length <= 0 || size <= MIN_MATCH) return;
    int64_t best = -1;
    int32_t matched = MIN_MATCH - 1;
    // `end`: where an earlier occurrence ends; its tokens from `end` on followed it.
    for (int64_t end = size - 1; end >= MIN_MATCH && matched < MAX_MATCH; end--) {
        int32_t match = 0;
        while (match < MAX_MATCH && end - 1 - match >= 0 && history[end - 1 - match] == history[size - 1 - match]) match++;
        if (match > matched) {
            matched = match;
            best = end;
        }
    }
    if (best < 0) return;
    for (int64_t at = best; static_cast<int32_t>(draft.size()) < length; at++) draft.push_back(at < size ? history[at] : draft[at - size]);
}

}  // namespace lookup
