/**
 * `bun run natives [--force]`: compiles the fast CPU natives into the cache (src/natives/compile.ts)
 * unless this recipe's build is already there; `--force` compiles again (another compiler, say).
 * `bun run start` and `bun run build` then use it.
 */
import { ensureCompiledNatives } from "../src/natives/compile";

const { binsDir, compiledSeconds } = await ensureCompiledNatives({ force: Bun.argv.includes("--force") });
console.log(compiledSeconds === undefined ? `natives: already built in ${binsDir}` : `natives: built into ${binsDir} in ${compiledSeconds} s`);
