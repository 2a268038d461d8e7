/**
 * The benchmark's picture, hand-written SVG with no dependencies: one panel per charted scenario,
 * Parley and llama-server side by side, drawn from the rows' detail (B8: throughput by concurrent
 * streams; B2: time to first token per turn of one conversation; B9: a short request's TTFT alone
 * and while others decode; B10: TTFT per turn of a conversation that outgrows the context; B17/B18:
 * replies that repeat their context by streams; B19: a service's day's TTFT quantiles).
 */
import type { Row, SideName } from "./harness";

/**
 * What a charted row carries in its detail: x categories (default 1..n) and one value per category
 * and side; optionally each category's paired ratio with its interval, printed under it.
 */
export type ChartSeries = { categories?: string[]; ratios?: (ChartRatio | null)[] } & Partial<Record<SideName, number[]>>;

export interface ChartRatio {
  median: number;
  lo: number;
  hi: number;
}

export interface Panel {
  /** The scenario whose first row with a detail feeds the panel. */
  row: string;
  /** The detail's field that holds the panel's series, where the detail holds more. */
  key?: string;
  /** The panel's `id` in the SVG. */
  id: string;
  title: string;
  x: string;
  y: string;
  kind: "bars" | "lines";
  /** A small line under the title: where the figures come from. */
  note?: string;
}

const PANELS: Panel[] = [
  { row: "B8", id: "throughput", title: "Decode throughput, concurrent streams", x: "concurrent streams", y: "aggregate tok/s", kind: "bars" },
  { row: "B2", id: "ttft-per-turn", title: "Time to first token, turn by turn", x: "turn of one conversation", y: "ms", kind: "lines" },
  { row: "B9", id: "ttft-while-busy", title: "Time to first token of a short request", x: "short request, 4 slots", y: "ms", kind: "bars" },
  {
    row: "B10",
    id: "ttft-past-context",
    title: "Time to first token past the context",
    x: "turn of one conversation, 1,024-token context",
    y: "ms",
    kind: "lines",
  },
  { row: "B17", key: "chart", id: "repeating-replies", title: "Replies that repeat their context", x: "concurrent streams", y: "tok/s", kind: "bars" },
  { row: "B19", key: "chart", id: "service-day", title: "Time to first token, a service's day", x: "quantile of its turns", y: "ms", kind: "bars" },
];

const SIDES: { name: SideName; label: string; colour: string }[] = [
  { name: "parley", label: "Parley", colour: "#2f6fdf" },
  { name: "llamaServer", label: "llama-server", colour: "#e8872b" },
];

const PANEL = { width: 340, height: 310, left: 56, right: 12, top: 44, bottom: 58 };
const GAP = 20;
const HEADER = 84;
const COLUMNS = 3;

const escapeXml = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
const num = (value: number) => value.toFixed(value >= 10 ? 0 : 1);
const px = (value: number) => Number(value.toFixed(1));

function text(x: number, y: number, content: string, attributes = ""): string {
  return `<text x="${px(x)}" y="${px(y)}"${attributes ? ` ${attributes}` : ""}>${escapeXml(content)}</text>`;
}

/** The smallest 1, 2 or 5 × 10^k step that covers `max` in at most five ticks. */
function ticks(max: number): number[] {
  if (!(max > 0)) return [0, 1];
  const rough = max / 5;
  const magnitude = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= rough)!;
  return Array.from({ length: Math.ceil(max / step - 1e-9) + 1 }, (_, i) => i * step);
}

export interface Drawn {
  categories: string[];
  series: { side: (typeof SIDES)[number]; values: number[] }[];
  ratios?: (ChartRatio | null)[];
}

export function drawable(detail: unknown): Drawn | undefined {
  if (typeof detail !== "object" || detail === null) return undefined;
  const chart = detail as ChartSeries;
  const series = SIDES.flatMap((side) => (Array.isArray(chart[side.name]) ? [{ side, values: chart[side.name]! }] : []));
  if (series.length === 0) return undefined;
  const length = Math.max(...series.map((s) => s.values.length));
  return { categories: chart.categories ?? Array.from({ length }, (_, i) => String(i + 1)), series, ...(chart.ratios ? { ratios: chart.ratios } : {}) };
}

function panel(spec: Panel, data: Drawn): string {
  const plotWidth = PANEL.width - PANEL.left - PANEL.right;
  const plotHeight = PANEL.height - PANEL.top - PANEL.bottom;
  const bottom = PANEL.top + plotHeight;
  const finite = data.series.flatMap((s) => s.values.filter(Number.isFinite));
  const scale = ticks(Math.max(0, ...finite));
  const top = scale.at(-1)!;
  const decimals = Math.max(0, -Math.floor(Math.log10(scale[1]!)));
  const y = (value: number) => bottom - (value / top) * plotHeight;
  const out: string[] = [text(PANEL.left, 18, spec.title, 'class="panel-title"')];
  if (spec.note) out.push(text(PANEL.left, 32, spec.note, 'class="note"'));
  for (const tick of scale) {
    out.push(`<line x1="${PANEL.left}" x2="${PANEL.left + plotWidth}" y1="${px(y(tick))}" y2="${px(y(tick))}" class="grid"/>`);
    out.push(text(PANEL.left - 6, y(tick) + 4, tick.toFixed(decimals), 'text-anchor="end"'));
  }
  out.push(`<line x1="${PANEL.left}" x2="${PANEL.left + plotWidth}" y1="${bottom}" y2="${bottom}" class="axis"/>`);
  out.push(text(PANEL.left + plotWidth / 2, PANEL.height - 4, spec.x, 'text-anchor="middle" class="axis-title"'));
  out.push(
    text(14, PANEL.top + plotHeight / 2, spec.y, `text-anchor="middle" class="axis-title" transform="rotate(-90 14 ${px(PANEL.top + plotHeight / 2)})"`),
  );

  const n = data.categories.length;
  const labelled = (i: number) => n <= 10 || i === 0 || (i + 1) % 5 === 0;
  if (spec.kind === "bars") {
    const band = plotWidth / n;
    const barWidth = (band * 0.8) / data.series.length;
    data.categories.forEach((category, i) => {
      if (labelled(i)) out.push(text(PANEL.left + band * (i + 0.5), bottom + 16, category, 'text-anchor="middle"'));
      const paired = data.ratios?.[i];
      if (paired) {
        out.push(text(PANEL.left + band * (i + 0.5), bottom + 29, `${paired.median.toFixed(2)}×`, 'text-anchor="middle" class="ratio"'));
        out.push(text(PANEL.left + band * (i + 0.5), bottom + 39, `${paired.lo.toFixed(2)}–${paired.hi.toFixed(2)}`, 'text-anchor="middle" class="note"'));
      }
      data.series.forEach(({ side, values }, s) => {
        const value = values[i];
        if (value === undefined || !Number.isFinite(value)) return;
        const x = PANEL.left + band * (i + 0.1) + barWidth * s;
        out.push(
          `<rect x="${px(x)}" y="${px(y(value))}" width="${px(barWidth)}" height="${px(bottom - y(value))}" fill="${side.colour}" class="bar" data-series="${side.name}"><title>${escapeXml(`${side.label}, ${category}: ${num(value)}`)}</title></rect>`,
        );
        out.push(text(x + barWidth / 2, y(value) - 4, num(value), 'text-anchor="middle" class="value"'));
      });
    });
  } else {
    const x = (i: number) => PANEL.left + (n === 1 ? plotWidth / 2 : (i * plotWidth) / (n - 1));
    data.categories.forEach((category, i) => {
      if (labelled(i)) out.push(text(x(i), bottom + 16, category, 'text-anchor="middle"'));
    });
    for (const { side, values } of data.series) {
      const points = values.flatMap((value, i) => (Number.isFinite(value) ? [[x(i), y(value), value, i] as const] : []));
      out.push(
        `<polyline points="${points.map(([cx, cy]) => `${px(cx)},${px(cy)}`).join(" ")}" fill="none" stroke="${side.colour}" stroke-width="2" class="line" data-series="${side.name}"/>`,
      );
      for (const [cx, cy, value, i] of points) {
        out.push(
          `<circle cx="${px(cx)}" cy="${px(cy)}" r="2.5" fill="${side.colour}"><title>${escapeXml(`${side.label}, ${spec.x} ${data.categories[i]}: ${num(value)} ${spec.y}`)}</title></circle>`,
        );
      }
    }
  }
  return out.join("\n");
}

/** The chart of a run's rows, or undefined when none of them is charted (e.g. `--only B6`). */
export function perfChart(title: string, subtitle: string, rows: readonly Row[]): string | undefined {
  const panels = PANELS.flatMap((spec) => {
    const detail = rows.find((row) => row.id === spec.row && row.detail !== undefined)?.detail;
    const data = drawable(spec.key === undefined ? detail : (detail as Record<string, unknown> | undefined)?.[spec.key]);
    return data ? [{ spec, data }] : [];
  });
  return panels.length === 0 ? undefined : drawChart(title, subtitle, panels);
}

/** An SVG of `panels`, three a row, under a title, a subtitle and the legend of the sides drawn. */
export function drawChart(title: string, subtitle: string, panels: readonly { spec: Panel; data: Drawn }[]): string {
  // Two columns at least, so the header fits even above one panel (`--only B8`).
  const columns = Math.min(COLUMNS, Math.max(2, panels.length));
  const width = GAP + columns * (PANEL.width + GAP);
  const height = HEADER + Math.ceil(panels.length / columns) * (PANEL.height + GAP);
  const shown = SIDES.filter((side) => panels.some(({ data }) => data.series.some((s) => s.side === side)));
  const legend = shown.map((side, i) => {
    const x = GAP + i * 120;
    return `<g class="legend" data-series="${side.name}"><rect x="${x}" y="${HEADER - 26}" width="12" height="12" fill="${side.colour}"/>${text(x + 18, HEADER - 16, side.label)}</g>`;
  });
  const body = panels.map(({ spec, data }, i) => {
    const x = GAP + (i % columns) * (PANEL.width + GAP);
    const y = HEADER + Math.floor(i / columns) * (PANEL.height + GAP);
    return `<g id="${spec.id}" transform="translate(${x} ${y})">\n${panel(spec, data)}\n</g>`;
  });
  return [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="12" fill="#222">`,
    `<style>.grid{stroke:#e4e4e4}.axis{stroke:#888}.panel-title{font-weight:600;font-size:13px}.axis-title{fill:#555}.value{font-size:10px;fill:#444}.note{font-size:9px;fill:#777}.ratio{font-size:10px;font-weight:600;fill:#333}</style>`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    text(GAP, 24, title, 'font-size="16" font-weight="600"'),
    text(GAP, 44, subtitle, 'fill="#666"'),
    ...legend,
    ...body,
    `</svg>`,
    "",
  ].join("\n");
}
