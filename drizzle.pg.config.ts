import { defineConfig } from "drizzle-kit";

// The folder's last name differs from SQLite's: the single executable embeds both by that name.
export default defineConfig({
  dialect: "postgresql",
  schema: "./src/db/pg/schema.ts",
  out: "./src/db/pg/pg-migrations",
});
