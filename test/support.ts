import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openStorage, type Storage } from "../src/db/client";
import { KeyStore } from "../src/db/keys";
import { ChatService } from "../src/chat/service";
import type { Db } from "../src/db/client";
import { createApp } from "../src/http/app";
import type { Engine } from "../src/llm/engine";

export const tempDir = (label: string) => mkdtempSync(join(tmpdir(), `parley-${label}-`));

export interface TestDb {
  dir: string;
  path: string;
  storage: Storage;
  keys: KeyStore;
}

/** A real SQLite file in a fresh temp directory. */
export function testDb(label = "db"): TestDb {
  const dir = tempDir(label);
  const path = join(dir, "parley.db");
  const storage = openStorage(path);
  return { dir, path, storage, keys: new KeyStore(storage.db) };
}

export interface Served {
  url: string;
  stop(): Promise<void>;
}

export interface ServeOptions {
  db: Db;
  keys: KeyStore;
  /** Without one the app is up but not ready: chat answers 503, listing works. */
  engine?: Engine;
  queueMax?: number;
  bodyLimitBytes?: number;
  heartbeatMs?: number;
}

/** The real app on a real port, so tests speak HTTP like any client. */
export function serveApp(options: ServeOptions): Served {
  const { db, keys, engine } = options;
  const app = createApp({
    db,
    keys,
    chat: new ChatService(db, { current: () => engine }, options.queueMax ?? 64),
    isReady: () => engine !== undefined,
    bodyLimitBytes: options.bodyLimitBytes ?? 65_536,
    heartbeatMs: options.heartbeatMs ?? 10_000,
  }).listen({ hostname: "127.0.0.1", port: 0 });
  return {
    url: `http://127.0.0.1:${app.server!.port}`,
    stop: async () => {
      await app.stop(true);
    },
  };
}

export const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
