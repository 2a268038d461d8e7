/**
 * How many tokens a reply drafts a step (speculative decoding, src/natives/lookup-draft.h): its
 * draft length follows its own recent acceptance, as Hugging Face's assisted generation adapts its
 * assistant's: two more after a step whose drafts were all accepted, one fewer after one that was
 * not. A reply whose guesses keep failing stops drafting for a while, then tries again: its text
 * may start repeating later.
 */

/** The longest draft: a batch of a reply's token and this many verifies on a CPU at a little over one token's cost. */
export const MAX_DRAFT = 12;
/** The draft of a reply that has not drafted yet: replies that quote their context are accepted from the start. */
const FIRST_DRAFT = 4;
/** Native runs of steps without a draft after its guesses failed at length one. */
const REST_RUNS = 4;

export class DraftLength {
  private length = FIRST_DRAFT;
  /** Runs left before a reply resting from drafting drafts again. */
  private resting = 0;

  /** The draft length of the reply's next step. */
  get next(): number {
    return this.resting > 0 ? 0 : this.length;
  }

  /** What a native run of steps drafted for the reply, and how many of those its sampler accepted. */
  update(drafted: number, accepted: number): void {
    if (this.resting > 0) {
      this.resting--;
      return;
    }
    // Steps with no draft (nothing in the reply's tokens matched its end) say nothing of its guesses.
    if (drafted === 0) return;
    if (accepted === drafted) this.length = Math.min(MAX_DRAFT, this.length + 2);
    else if (this.length > 1) this.length = Math.max(1, Math.min(this.length - 1, accepted + 1));
    else if (accepted === 0) {
      this.resting = REST_RUNS;
      this.length = FIRST_DRAFT;
    }
  }
}
