import { describe, expect, test } from "bun:test";
import { perfChart } from "../../bench/perf/chart";
import type { Row } from "../../bench/perf/harness";
import { findElements, parseXml, type XmlElement } from "../support";

const rows: Row[] = [
  { id: "B1", what: "decode tok/s", parley: 80, yardstick: 100 },
  { id: "B2", what: "TTFT", detail: { parley: [10, 12, Number.NaN, 14], llamaServer: [9, 11, 12, 13] } },
  { id: "B8", what: "aggregate, 1 stream", detail: { categories: ["1", "2", "4", "8"], parley: [76, 70, 57, 55], llamaServer: [104, 150, 198, 230] } },
  { id: "B8", what: "aggregate, 2 streams", parley: 70 },
  { id: "B9", what: "while busy", detail: { categories: ["alone", "while 3 decode"], parley: [120, 480] } },
  { id: "B19", what: "a day", detail: { seed: 1, parley: { sum: 3 }, chart: { categories: ["p50", "max"], parley: [90, 800], llamaServer: [100, 1100] } } },
];

const panel = (svg: XmlElement, id: string) => findElements(svg, (e) => e.attributes.id === id)[0]!;
const series = (within: XmlElement, name: string, element: string) => findElements(within, (e) => e.name === element && e.attributes["data-series"] === name);

describe("the perf chart", () => {
  const svg = parseXml(perfChart("Parley & llama-server <F16>", "a subtitle", rows)!);

  test("is an SVG document with one panel per charted scenario", () => {
    expect(svg.name).toBe("svg");
    expect(svg.attributes.xmlns).toBe("http://www.w3.org/2000/svg");
    expect(findElements(svg, (e) => e.name === "g" && e.attributes.id !== undefined).map((e) => e.attributes.id)).toEqual([
      "throughput",
      "ttft-per-turn",
      "ttft-while-busy",
      "service-day",
    ]);
  });

  test("a panel fed by one field of its row's detail draws that field only", () => {
    expect(series(panel(svg, "service-day"), "llamaServer", "rect").map((bar) => bar.children[0]!.text)).toEqual([
      "llama-server, p50: 100",
      "llama-server, max: 1100",
    ]);
  });

  test("draws both servers' throughput as bars per concurrency level", () => {
    const throughput = panel(svg, "throughput");
    expect(series(throughput, "parley", "rect")).toHaveLength(4);
    expect(series(throughput, "llamaServer", "rect")).toHaveLength(4);
    expect(series(throughput, "llamaServer", "rect")[3]!.children[0]!.text).toBe("llama-server, 8: 230");
  });

  test("draws TTFT per turn as one line per server, leaving out what was not measured", () => {
    const perTurn = panel(svg, "ttft-per-turn");
    expect(series(perTurn, "parley", "polyline")[0]!.attributes.points!.split(" ")).toHaveLength(3);
    expect(series(perTurn, "llamaServer", "polyline")[0]!.attributes.points!.split(" ")).toHaveLength(4);
  });

  test("a legend names the servers that appear", () => {
    expect(findElements(svg, (e) => e.attributes.class === "legend").map((e) => e.attributes["data-series"])).toEqual(["parley", "llamaServer"]);
    expect(series(panel(svg, "ttft-while-busy"), "parley", "rect")).toHaveLength(2);
  });

  test("rows with nothing to chart give no chart", () => {
    expect(
      perfChart(
        "t",
        "s",
        rows.filter((row) => row.detail === undefined),
      ),
    ).toBeUndefined();
  });
});

describe("parseXml", () => {
  test.each([
    ["<a><b></a></b>", "closes"],
    ["<a>x & y</a>", "bare &"],
    ['<a k="1" k="2"/>', "twice"],
    ["<a/><b/>", "second root"],
    ["<a>", "never closed"],
    ['<a k="<"/>', "not well-formed"],
  ])("refuses %s", (source, message) => {
    expect(() => parseXml(source)).toThrow(message);
  });

  test("reads elements, attributes and escaped text", () => {
    const root = parseXml('<?xml version="1.0"?>\n<!-- c --><a k="v &amp; w"><b/>x &lt; y</a>\n');
    expect(root).toEqual({ name: "a", attributes: { k: "v &amp; w" }, children: [{ name: "b", attributes: {}, children: [], text: "" }], text: "x &lt; y" });
  });
});
