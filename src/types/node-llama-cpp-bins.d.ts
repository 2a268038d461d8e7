// node-llama-cpp's per-platform binaries packages ship no types; this is the one function they have.
declare module "@node-llama-cpp/linux-x64" {
  export function getBinsDir(): { binsDir?: string; packageVersion?: string };
}
declare module "@node-llama-cpp/linux-x64-cuda" {
  export function getBinsDir(): { binsDir?: string; packageVersion?: string };
}
declare module "@node-llama-cpp/linux-arm64" {
  export function getBinsDir(): { binsDir?: string; packageVersion?: string };
}
