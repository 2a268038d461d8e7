// node-llama-cpp's per-platform binaries package ships no types; this is the one function it has.
declare module "@node-llama-cpp/linux-x64" {
  export function getBinsDir(): { binsDir?: string; packageVersion?: string };
}
