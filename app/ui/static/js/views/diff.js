// A word diff between two texts (longest common subsequence over words and
// the spaces between them), as <del> / <ins> runs of text.

import { h } from "../dom.js";

const MAX_CELLS = 4_000_000; // past this, whole texts are shown as replaced

function tokens(text) {
  return String(text || "").match(/\s+|[^\s]+/g) || [];
}

export function diffWords(before, after) {
  const a = tokens(before);
  const b = tokens(after);
  if (a.length * b.length > MAX_CELLS) {
    return [["-", a.join("")], ["+", b.join("")]];
  }
  // lengths[i][j]: LCS of a[i:] and b[j:]
  const lengths = Array.from({ length: a.length + 1 }, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lengths[i][j] = a[i] === b[j] ? lengths[i + 1][j + 1] + 1 : Math.max(lengths[i + 1][j], lengths[i][j + 1]);
    }
  }
  const out = [];
  const push = (op, text) => {
    const last = out[out.length - 1];
    if (last && last[0] === op) last[1] += text;
    else out.push([op, text]);
  };
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      push("=", a[i]);
      i++;
      j++;
    } else if (lengths[i + 1][j] >= lengths[i][j + 1]) {
      push("-", a[i++]);
    } else {
      push("+", b[j++]);
    }
  }
  while (i < a.length) push("-", a[i++]);
  while (j < b.length) push("+", b[j++]);
  return out;
}

export function diffView(before, after) {
  const runs = diffWords(before, after).map(([op, text]) =>
    op === "=" ? text : h(op === "-" ? "del" : "ins", {}, text),
  );
  return h("p", { class: "diff" }, runs);
}
