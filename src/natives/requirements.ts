/**
 * The oldest glibc and libstdc++ the natives can load with: the highest `GLIBC_2.x` and
 * `GLIBCXX_3.4.x` symbol versions they reference. The names sit as plain strings in each library's
 * dynamic string table, so a text scan finds them without an ELF parser. The build prints them:
 * locally compiled natives inherit the floor of the machine that compiled them.
 */
export interface NativesRequirements {
  glibc: string;
  glibcxx: string;
}

export function nativesRequirements(files: Iterable<Uint8Array>): NativesRequirements {
  let glibc = [0];
  let glibcxx = [0];
  const decoder = new TextDecoder("latin1");
  for (const data of files) {
    const text = decoder.decode(data);
    for (const [, version] of text.matchAll(/\bGLIBC_(2\.\d+(?:\.\d+)?)\0/g)) glibc = newer(glibc, version!);
    for (const [, version] of text.matchAll(/\bGLIBCXX_(3\.4\.\d+)\0/g)) glibcxx = newer(glibcxx, version!);
  }
  return { glibc: glibc.join("."), glibcxx: glibcxx.join(".") };
}

function newer(current: number[], candidate: string): number[] {
  const parts = candidate.split(".").map(Number);
  for (let i = 0; i < Math.max(current.length, parts.length); i++) {
    const difference = (parts[i] ?? 0) - (current[i] ?? 0);
    if (difference !== 0) return difference > 0 ? parts : current;
  }
  return current;
}
