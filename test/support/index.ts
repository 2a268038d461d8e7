/**
 * What tests, the binary's scenario and the benchmarks share. Tests import it whole
 * (`from "../support"`); scripts that run outside `bun test` import the files they need, and so
 * do without the in-process app (app.ts) and its engine.
 */
export * from "./app";
export * from "./backends";
export * from "./binary";
export * from "./chat-mix";
export * from "./files";
export * from "./haproxy";
export * from "./http";
export * from "./load";
export * from "./models";
export * from "./natives";
export * from "./openapi";
export * from "./postgres";
export * from "./process";
export * from "./random";
export * from "./retrieval";
export * from "./shell";
export * from "./sse";
export * from "./stats";
export * from "./system-tests";
export * from "./tools";
export * from "./unit-file";
export * from "./wait";
export * from "./write-lock";
export * from "./xml";
