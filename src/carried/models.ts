/**
 * The models this executable carries (`bun run build --embed-model`). From a checkout there are
 * none; the build replaces this module (src/build/carry.ts) with one that embeds each file in the
 * executable and lists it here, the first the default.
 */

/** One GGUF file inside the executable. */
export interface CarriedFile {
  /** Its file name when built: the name the unpacked copy keeps, so the model's id is what a models directory gives it. */
  name: string;
  /** Where the executable holds it (`/$bunfs/root/...`). */
  asset: string;
  sha256: string;
  bytes: number;
}

export interface CarriedModel extends CarriedFile {
  /** The id its header gives it (`general.name`, else the file name). */
  id: string;
  /** Its projector, through which it sees pictures. */
  projector?: CarriedFile;
}

export const CARRIED_MODELS: readonly CarriedModel[] = [];
