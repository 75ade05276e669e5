import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

/**
 * Relative links in markdown, checked as GitHub renders them: the file must exist and an anchor
 * must name a heading of the target (GitHub's slugs) or an explicit `<a id|name="…">`.
 */

/** The markdown with fenced code blocks and inline code spans blanked, line numbers kept. */
function proseOnly(markdown: string): string[] {
  let fence: string | null = null;
  return markdown.split("\n").map((line) => {
    const m = /^\s*(`{3,}|~{3,})/.exec(line);
    if (fence !== null) {
      if (m && m[1][0] === fence[0] && m[1].length >= fence.length) fence = null;
      return "";
    }
    if (m) {
      fence = m[1];
      return "";
    }
    return line.replace(/(`+)[^`]*?\1/g, "");
  });
}

/** GitHub's heading anchor: the heading's text, lower-cased, punctuation dropped, spaces as dashes. */
export function githubSlug(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");
}

/** Every anchor a markdown file offers: heading slugs (duplicates numbered) and explicit ids. */
export function anchorsOf(markdown: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  let fence = false;
  for (const line of markdown.split("\n")) {
    if (/^\s*(`{3,}|~{3,})/.test(line)) fence = !fence;
    if (fence) continue;
    const h = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h) {
      const base = githubSlug(h[1]);
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      out.add(n === 0 ? base : `${base}-${n}`);
    }
    for (const a of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) out.add(a[1]);
  }
  return out;
}

export interface DeadLink {
  file: string;
  line: number;
  target: string;
  why: string;
}

/** Dead relative links (files and anchors) of one markdown file; web and mail links are not fetched. */
export function deadLinks(file: string, markdown = readFileSync(file, "utf8")): DeadLink[] {
  const dead: DeadLink[] = [];
  const anchorCache = new Map<string, Set<string>>();
  const anchorsIn = (path: string) => {
    let a = anchorCache.get(path);
    if (!a) {
      a = anchorsOf(path === file ? markdown : readFileSync(path, "utf8"));
      anchorCache.set(path, a);
    }
    return a;
  };
  proseOnly(markdown).forEach((line, i) => {
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = m[1];
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
      const [pathPart, anchor] = target.split("#", 2) as [string, string | undefined];
      const path = pathPart === "" ? file : resolve(dirname(file), decodeURIComponent(pathPart));
      const at = { file, line: i + 1, target };
      if (!existsSync(path)) {
        dead.push({ ...at, why: "no such file" });
        continue;
      }
      if (anchor === undefined || anchor === "") continue;
      if (statSync(path).isDirectory() || !path.endsWith(".md")) {
        dead.push({ ...at, why: "an anchor into a file that is not markdown" });
      } else if (!anchorsIn(path).has(decodeURIComponent(anchor))) {
        dead.push({
          ...at,
          why: `no heading or id "${anchor}" in ${path === file ? "this file" : pathPart}`,
        });
      }
    }
  });
  return dead;
}

/** README.md and docs/*.md of the project at `root`. */
export function projectDocs(root: string): string[] {
  const docs = join(root, "docs");
  const pages = readdirSync(docs).filter((n) => n.endsWith(".md"));
  return [join(root, "README.md"), ...pages.sort().map((n) => join(docs, n))];
}
