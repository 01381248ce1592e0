import hljs from "../vendor/highlightjs/core.min.js";
import javascript from "../vendor/highlightjs/javascript.min.js";
import { h } from "./dom";

hljs.registerLanguage("javascript", javascript);

// highlight renders a module's source read-only, highlighted by
// highlight.js (which escapes the text it is given before it adds its own
// spans, so the source is never interpreted as markup).
export function highlight(source: string, label: string): HTMLElement {
  const code = h("code", { class: "hljs language-javascript" });
  code.innerHTML = hljs.highlight(source, { language: "javascript", ignoreIllegals: true }).value;
  return h("pre", { tabindex: "0", "aria-label": label }, code);
}
