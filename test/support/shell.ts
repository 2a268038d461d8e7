/** The commands of a shell block in the docs, as a reader would type them. */

/**
 * `block`'s commands: continuation lines joined, and so are lines inside a quoted argument (a JSON
 * body written over several lines); comments and blank lines dropped.
 */
export function shellCommands(block: string): string[] {
  const commands: string[] = [];
  let open = "";
  for (const line of block.replace(/\\\n\s*/g, "").split("\n")) {
    if (open === "" && line.trim().startsWith("#")) continue;
    open = open === "" ? line.replace(/\s+# .*$/, "").trim() : `${open}\n${line}`;
    if ((open.match(/'/g)?.length ?? 0) % 2 === 1) continue;
    if (open !== "") commands.push(open);
    open = "";
  }
  return commands;
}
