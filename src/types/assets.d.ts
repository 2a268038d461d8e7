// `import x from "…" with { type: "file" }` gives the file's path (on disk, or inside the single binary).
declare module "swagger-ui-dist/swagger-ui-bundle.js" {
  const path: string;
  export default path;
}
declare module "swagger-ui-dist/swagger-ui.css" {
  const path: string;
  export default path;
}
