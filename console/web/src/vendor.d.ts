declare module "*/core.min.js" {
  const hljs: {
    registerLanguage(name: string, lang: unknown): void;
    highlight(code: string, opts: { language: string; ignoreIllegals?: boolean }): { value: string };
  };
  export default hljs;
}
declare module "*/javascript.min.js" {
  const lang: unknown;
  export default lang;
}
