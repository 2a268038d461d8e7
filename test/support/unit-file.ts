/** A systemd unit file, read as systemd reads it (the shipped `deploy/parley@.service`). */

export type Unit = Map<string, Map<string, string[]>>;

/** The unit's `key=value` lines by section, values of a repeated key in order (comments and blanks skipped). */
export function parseUnit(text: string): Unit {
  const sections: Unit = new Map();
  let section: Map<string, string[]> | undefined;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) continue;
    const header = /^\[(.+)\]$/.exec(line);
    if (header) {
      sections.set(header[1]!, (section = new Map()));
      continue;
    }
    const eq = line.indexOf("=");
    if (eq < 0 || section === undefined) throw new Error(`not a unit line: ${line}`);
    const key = line.slice(0, eq).trim();
    section.set(key, [...(section.get(key) ?? []), line.slice(eq + 1).trim()]);
  }
  return sections;
}
