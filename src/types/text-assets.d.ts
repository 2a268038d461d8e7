// `import x from "….jinja" with { type: "text" }` gives the file's contents (bundled into the single binary).
declare module "*.jinja" {
  const text: string;
  export default text;
}
