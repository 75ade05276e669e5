import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { barChart, formatTick, lineChart, niceTicks } from "../../src/report/svg.js";
import { checkXml, type XmlElement } from "./xml.js";

function parse(svg: string): XmlElement[] {
  const { problems, elements } = checkXml(svg);
  assert.deepEqual(problems, [], `SVG is not well-formed:\n${problems.join("\n")}`);
  assert.equal(elements[0].name, "svg");
  assert.equal(elements[0].attrs.xmlns, "http://www.w3.org/2000/svg");
  return elements;
}

const texts = (els: XmlElement[]) => els.filter((e) => e.name === "text").map((e) => e.text);

describe("xml checker (sanity of the test tool itself)", () => {
  it("rejects unbalanced, crossed and unescaped markup", () => {
    assert.ok(checkXml("<svg><g></svg>").problems.length > 0);
    assert.ok(checkXml("<svg><g><text></g></text></svg>").problems.length > 0);
    assert.ok(checkXml("<svg><text>a & b</text></svg>").problems.length > 0);
    assert.ok(checkXml('<svg><rect x="1" x="2"/></svg>').problems.length > 0);
    assert.ok(checkXml("<svg/><svg/>").problems.length > 0);
    assert.deepEqual(checkXml('<svg a="1"><text>a &amp; b</text><rect/></svg>').problems, []);
  });
});

describe("niceTicks", () => {
  it("covers the range with round steps", () => {
    for (const [lo, hi] of [
      [0, 1],
      [-0.37, 1.46],
      [3, 1234],
      [0.0012, 0.0049],
      [-5, -2],
      [7, 7],
    ]) {
      const t = niceTicks(lo, hi, 5);
      assert.ok(
        t.min <= Math.min(lo, hi) && t.max >= Math.max(lo, hi),
        `[${lo}, ${hi}] → [${t.min}, ${t.max}]`,
      );
      const mant = t.step / 10 ** Math.floor(Math.log10(t.step));
      assert.ok(
        [1, 2, 5].some((m) => Math.abs(mant - m) < 1e-9),
        `step ${t.step}`,
      );
      assert.ok(t.ticks.length >= 2 && t.ticks.length <= 12, `${t.ticks.length} ticks`);
      for (let i = 1; i < t.ticks.length; i++) {
        assert.ok(Math.abs(t.ticks[i] - t.ticks[i - 1] - t.step) < t.step * 1e-9);
      }
    }
  });

  it("gives whole-number ticks for integer axes and keeps fixed ends", () => {
    const t = niceTicks(1, 4, 8, { integer: true });
    assert.ok(t.ticks.every((v) => Number.isInteger(v)));
    assert.ok(t.step >= 1);
    const f = niceTicks(0, 1, 5, { fixedMin: true, fixedMax: true });
    assert.equal(f.min, 0);
    assert.equal(f.max, 1);
    assert.deepEqual(f.ticks, [0, 0.2, 0.4, 0.6, 0.8, 1]);
    const g = niceTicks(0.03, 0.97, 5, { fixedMin: false });
    assert.deepEqual([g.min, g.max], [0, 1]);
  });

  it("formats percent and decimal tick labels", () => {
    assert.equal(formatTick(0.25, 0.25, true), "25%");
    assert.equal(formatTick(0.125, 0.025, true), "12.5%");
    assert.equal(formatTick(-0.5, 0.5), "-0.5");
    assert.equal(formatTick(1000, 500), "1000");
    assert.equal(formatTick(0.3, 0.1), "0.3");
    assert.equal(formatTick(0.001, 0.001), "0.001");
  });
});

describe("lineChart", () => {
  const series = [
    {
      name: "alpha <run> & co",
      points: [
        { x: 1, y: 0.2, lo: 0.1, hi: 0.3 },
        { x: 2, y: 0.5, lo: 0.4, hi: 0.6 },
        { x: 3, y: 0.9, lo: 0.8, hi: 1 },
      ],
    },
    { name: "beta", dashed: true, points: [1, 2, 3, 4].map((x) => ({ x, y: 0.1 * x })) },
  ];

  it("is well-formed and shows every series in the legend, with escaped names", () => {
    const svg = lineChart({
      title: "T & <x>",
      subtitle: "sub",
      x: { label: "iteration" },
      y: { percent: true },
      series,
    });
    const els = parse(svg);
    const t = texts(els);
    assert.ok(t.includes("alpha <run> & co"), "legend text decoded back to the name");
    assert.ok(t.includes("beta"));
    assert.ok(t.includes("T & <x>"));
    assert.ok(t.includes("iteration"));
    assert.ok(
      t.some((s) => s.endsWith("%")),
      "percent tick labels",
    );
    // One line per series (a path with a stroke and no fill), the dashed one marked so.
    const lines = els.filter(
      (e) => e.name === "path" && e.attrs.fill === "none" && e.attrs["stroke-width"] === "2",
    );
    assert.equal(lines.length, 2);
    assert.equal(lines.filter((e) => e.attrs["stroke-dasharray"] !== undefined).length, 1);
    // The interval of the first series is a shaded band.
    assert.equal(els.filter((e) => e.name === "polygon").length, 1);
  });

  it("maps larger values higher up and keeps markers in point order", () => {
    const svg = lineChart({ title: "t", series: [series[0]] });
    const cys = parse(svg)
      .filter((e) => e.name === "circle")
      .map((e) => Number(e.attrs.cy));
    assert.equal(cys.length, 3);
    assert.ok(cys[0] > cys[1] && cys[1] > cys[2], `y pixels ${cys}`);
  });

  it("breaks a line at missing values and draws error bars with intervals='bars'", () => {
    const svg = lineChart({
      title: "gaps",
      intervals: "bars",
      series: [
        {
          name: "s",
          points: [
            { x: 1, y: 1, lo: 0.5, hi: 1.5 },
            { x: 2, y: 2, lo: 1.5, hi: 2.5 },
            { x: 3, y: Number.NaN },
            { x: 4, y: 3, lo: 2, hi: 4 },
            { x: 5, y: 4, lo: 3, hi: 5 },
          ],
        },
      ],
    });
    const els = parse(svg);
    const lines = els.filter((e) => e.name === "path" && e.attrs["stroke-width"] === "2");
    assert.equal(lines.length, 2, "two segments");
    assert.equal(els.filter((e) => e.name === "polygon").length, 0);
    assert.equal(els.filter((e) => e.name === "path" && e.attrs["stroke-width"] === "1.2").length, 4);
  });

  it("is deterministic and handles an empty chart", () => {
    const a = lineChart({ title: "t", series });
    assert.equal(lineChart({ title: "t", series }), a);
    const empty = parse(lineChart({ title: "nothing", series: [] }));
    assert.ok(texts(empty).includes("no data"));
  });

  it("uses a custom legend when given", () => {
    const els = parse(
      lineChart({
        title: "t",
        series,
        legend: [
          { name: "method A", color: "#000000" },
          { name: "attempt 1", color: "#555555", dashed: true },
        ],
      }),
    );
    const t = texts(els);
    assert.ok(t.includes("method A") && t.includes("attempt 1"));
    assert.ok(!t.includes("beta"));
  });
});

describe("barChart", () => {
  it("draws one bar per finite value, error bars, and negative bars below zero", () => {
    const svg = barChart({
      title: "chips@k",
      categories: ["attempt 1", "attempt 2", "attempt 3"],
      series: [
        {
          name: "m1",
          values: [
            { mean: -0.4, lo: -0.6, hi: -0.2 },
            { mean: 0.5, lo: 0.3, hi: 0.7 },
            { mean: 1.2, lo: 1, hi: 1.4 },
          ],
        },
        { name: "m2", values: [{ mean: 0.1 }, null, { mean: Number.NaN }] },
      ],
      y: { label: "chips" },
    });
    const els = parse(svg);
    const bars = els.filter((e) => e.name === "rect" && e.attrs["fill-opacity"] === "0.85");
    assert.equal(bars.length, 4, "null and NaN leave empty slots");
    const errorBars = els.filter((e) => e.name === "path" && e.attrs.stroke === "#222222");
    assert.equal(errorBars.length, 3);
    const t = texts(els);
    for (const s of ["m1", "m2", "attempt 1", "attempt 3", "chips", "-0.400", "1.200", "0.100"]) {
      assert.ok(t.includes(s), `missing text ${s}`);
    }
    // The negative bar starts at the zero line and extends down; the positive ones end there.
    const zero = els.find((e) => e.name === "line" && e.attrs.stroke === "#888888");
    assert.ok(zero, "zero line");
    const zy = Number(zero.attrs.y1);
    const [neg, pos] = bars;
    assert.ok(Math.abs(Number(neg.attrs.y) - zy) < 0.02, "negative bar hangs from zero");
    assert.ok(
      Math.abs(Number(pos.attrs.y) + Number(pos.attrs.height) - zy) < 0.02,
      "positive bar stands on zero",
    );
  });

  it("labels percentages and keeps bars proportional on a fixed 0–100% axis", () => {
    const svg = barChart({
      title: "success@k",
      categories: ["k=1", "k=2"],
      series: [{ name: "m", values: [{ mean: 0.25 }, { mean: 0.75 }] }],
      y: { percent: true, min: 0, max: 1 },
    });
    const els = parse(svg);
    const [a, b] = els.filter((e) => e.name === "rect" && e.attrs["fill-opacity"] === "0.85");
    assert.ok(Math.abs(Number(b.attrs.height) / Number(a.attrs.height) - 3) < 0.01);
    const t = texts(els);
    assert.ok(t.includes("25.0%") && t.includes("75.0%") && t.includes("100%"));
  });
});
