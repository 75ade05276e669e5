/**
 * A tiny XML well-formedness checker for the report tests (not a test file itself): one root
 * element, balanced and properly nested tags, quoted unique attributes, no stray `<` or `&` in text.
 * Returns the problems found (empty when well-formed) and the elements seen, in document order.
 */
export interface XmlElement {
  name: string;
  attrs: Record<string, string>;
  /** Text directly inside the element (entities decoded), for leaf elements like <text>. */
  text: string;
}

const ENTITY = /&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);/g;

function decode(s: string): string {
  return s
    .replace(/&lt;/g, "<")
    .replace(/&gt;/g, ">")
    .replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'")
    .replace(/&amp;/g, "&");
}

function badAmp(s: string): boolean {
  return s.replace(ENTITY, "").includes("&");
}

export function checkXml(doc: string): { problems: string[]; elements: XmlElement[] } {
  const problems: string[] = [];
  const elements: XmlElement[] = [];
  const stack: { name: string; el: XmlElement }[] = [];
  let roots = 0;
  let i = 0;
  const body = doc.replace(/^<\?xml[^>]*\?>\s*/, "");
  while (i < body.length) {
    const lt = body.indexOf("<", i);
    const text = lt < 0 ? body.slice(i) : body.slice(i, lt);
    if (text.length > 0) {
      if (text.includes(">")) problems.push(`stray ">" in text "${text.slice(0, 40)}"`);
      if (badAmp(text)) problems.push(`bare "&" in text "${text.slice(0, 40)}"`);
      if (stack.length === 0 && text.trim().length > 0)
        problems.push(`text outside the root: "${text.trim().slice(0, 40)}"`);
      if (stack.length > 0) stack[stack.length - 1].el.text += decode(text);
    }
    if (lt < 0) break;
    if (body.startsWith("<!--", lt)) {
      const end = body.indexOf("-->", lt);
      if (end < 0) {
        problems.push("unterminated comment");
        break;
      }
      i = end + 3;
      continue;
    }
    const gt = body.indexOf(">", lt);
    if (gt < 0) {
      problems.push("unterminated tag");
      break;
    }
    const tag = body.slice(lt + 1, gt);
    i = gt + 1;
    if (tag.includes("<")) {
      problems.push(`"<" inside tag <${tag.slice(0, 40)}`);
      continue;
    }
    if (tag.startsWith("/")) {
      const name = tag.slice(1).trim();
      const top = stack.pop();
      if (!top) problems.push(`closing </${name}> without an open tag`);
      else if (top.name !== name) problems.push(`</${name}> closes <${top.name}>`);
      continue;
    }
    const selfClosing = tag.endsWith("/");
    const inner = selfClosing ? tag.slice(0, -1) : tag;
    const m = /^([A-Za-z_][\w:.-]*)([\s\S]*)$/.exec(inner);
    if (!m) {
      problems.push(`bad tag <${tag.slice(0, 40)}>`);
      continue;
    }
    const [, name, rest] = m;
    const attrs: Record<string, string> = {};
    const attrRe = /\s+([A-Za-z_][\w:.-]*)="([^"]*)"/y;
    let pos = 0;
    while (pos < rest.length) {
      if (/^\s*$/.test(rest.slice(pos))) break;
      attrRe.lastIndex = pos;
      const a = attrRe.exec(rest);
      if (!a) {
        problems.push(`bad attribute syntax in <${name}${rest.slice(pos, pos + 30)}`);
        break;
      }
      if (a[1] in attrs) problems.push(`duplicate attribute ${a[1]} in <${name}>`);
      if (a[2].includes("<") || badAmp(a[2])) problems.push(`unescaped character in ${name}@${a[1]}`);
      attrs[a[1]] = decode(a[2]);
      pos = attrRe.lastIndex;
    }
    if (stack.length === 0) roots++;
    const el: XmlElement = { name, attrs, text: "" };
    elements.push(el);
    if (!selfClosing) stack.push({ name, el });
  }
  for (const open of stack) problems.push(`<${open.name}> never closed`);
  if (roots !== 1) problems.push(`expected one root element, found ${roots}`);
  return { problems, elements };
}
