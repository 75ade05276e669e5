import { Marked } from "marked";
import { escapeXml } from "../report/svg.js";

/** HTML building blocks of the dashboard: escaping, the page frame, and markdown from `mage report`. */

/** XML escaping serves HTML as well (`&apos;` is an HTML5 entity). */
export const escapeHtml = escapeXml;

/** A query string from parameters; undefined values are left out, arrays repeat the key. */
export function query(params: Record<string, string | number | readonly string[] | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) q.append(k, x);
    else q.append(k, String(v));
  }
  const s = q.toString();
  return s === "" ? "" : `?${s}`;
}

/** A URL with its query, escaped for an HTML attribute. */
export function href(
  path: string,
  params: Record<string, string | number | readonly string[] | undefined> = {},
): string {
  return escapeHtml(`${path}${query(params)}`);
}

// Report markdown is built from run names and configs that anyone could have written: raw HTML in
// it is shown as text, never run.
/** Renders report markdown; `imageHref` rewrites plot links (relative file names) to dashboard URLs. */
export function markdownToHtml(md: string, imageHref: (href: string) => string): string {
  const m = new Marked({ gfm: true });
  m.use({
    renderer: {
      html: (token) => escapeHtml(token.text),
      image: ({ href, text }) =>
        `<img src="${escapeHtml(imageHref(href))}" alt="${escapeHtml(text)}" loading="lazy">`,
    },
  });
  return m.parse(md, { async: false });
}

const STYLE = `
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0; color: #1d1d1f; background: #fafafa; }
header { background: #24292f; color: #fff; padding: 8px 20px; display: flex; gap: 18px; align-items: baseline; }
header a { color: #fff; text-decoration: none; font-weight: 600; }
header .where { color: #b6bcc4; font-size: 12px; }
main { padding: 12px 20px 40px; max-width: 1400px; }
table { border-collapse: collapse; margin: 8px 0 16px; background: #fff; }
th, td { border: 1px solid #d8dee4; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f3f6; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #fff; border: 1px solid #d8dee4; padding: 10px; overflow-x: auto; font-size: 13px; }
code { font-size: 13px; }
img { max-width: 100%; }
p:has(> img:only-child) { display: inline-block; margin: 0 12px 12px 0; vertical-align: top; }
.state-active { color: #1a7f37; font-weight: 600; }
.state-stopped { color: #9a6700; font-weight: 600; }
.state-finished { color: #57606a; }
.bar { display: inline-block; width: 120px; height: 9px; background: #e5e9ed; border-radius: 4px; vertical-align: middle; margin-right: 6px; }
.bar > span { display: block; height: 100%; background: #2f81f7; border-radius: 4px; }
.muted { color: #57606a; }
form.filters { display: flex; gap: 10px; flex-wrap: wrap; align-items: end; margin: 8px 0; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: #57606a; }
nav.pager a { margin-right: 12px; }
`;

/**
 * Pages poll `stampUrl` and reload when its answer changes, so a running training shows its new
 * iterations without a client framework.
 */
function liveScript(stampUrl: string, stamp: string): string {
  const url = JSON.stringify(stampUrl).replace(/</g, "\\u003c");
  const value = JSON.stringify(stamp).replace(/</g, "\\u003c");
  return `<script>
(() => {
  const first = ${value};
  const poll = async () => {
    try {
      const r = await fetch(${url}, { cache: "no-store" });
      if (r.ok && (await r.json()).stamp !== first) return location.reload();
    } catch {}
    setTimeout(poll, 5000);
  };
  setTimeout(poll, 5000);
})();
</script>`;
}

export interface PageOptions {
  title: string;
  body: string;
  /** Where the page's freshness stamp is polled, and its value now; no polling without it. */
  live?: { url: string; stamp: string };
  /** The folders the dashboard reads, shown in the header. */
  roots: readonly string[];
}

export function page(o: PageOptions): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>${escapeHtml(o.title)} · mage dashboard</title>
<style>${STYLE}</style>
</head>
<body>
<header><a href="/">mage dashboard</a><span class="where">${escapeHtml(o.roots.join(", "))}</span></header>
<main>
${o.body}
</main>
${o.live ? liveScript(o.live.url, o.live.stamp) : ""}
</body>
</html>
`;
}
