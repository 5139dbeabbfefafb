import { type Bin, type Binned, binned, niceStep, niceStepAtLeast, type Panel, spanOf } from './panels.js';

const WIDTH = 800;
const LEFT = 70;
const RIGHT = 20;
const HEADER = 60;
/** A panel: its title, the plot, the x axis's ticks and title. */
const PANEL_TITLE = 30;
const PLOT_HEIGHT = 90;
const PANEL_AXIS = 44;
const PANEL_HEIGHT = PANEL_TITLE + PLOT_HEIGHT + PANEL_AXIS;
/** Under the plot of a panel that shows debt: a gap, then a strip of the deepest debt, drawn down from its zero line. */
const DEBT_GAP = 8;
const DEBT_HEIGHT = 40;
const PLOT_WIDTH = WIDTH - LEFT - RIGHT;
/** Most columns a panel draws; longer traffic is summed over spans of several seconds. */
const MAX_BINS = 200;
const COLORS = {
  admitted: '#2e7d32',
  refused: '#d84315',
  debt: '#6a1b9a',
  grid: '#e0e0e0',
  axis: '#424242',
  text: '#212121',
};
const FONT = 'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif"';
/**
 * Width of a character of an axis label, px: 0.6 of the 12 px font, at least a digit's width in
 * the fonts above (the viewer's font is not known, so labels are spaced by this bound).
 */
const LABEL_CHAR = 7.2;
/** Least space between two x-axis labels, px. */
const LABEL_GAP = 12;

/** A coordinate or a value, to two decimals without trailing zeros: short, and the same on every machine. */
const n = (value: number): string => String(Math.round(value * 100) / 100);
const escape = (text: string): string =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** A panel's height: with its debt strip when it shows debt. */
const heightOf = (panel: Panel): number => PANEL_HEIGHT + (panel.debt === undefined ? 0 : DEBT_GAP + DEBT_HEIGHT);

/**
 * The `--svg` chart: requests per second admitted and refused over time, one panel per policy or
 * algorithm (all on one scale), with axes in seconds and requests per second and a legend. With
 * traffic that settles, a policy's panel has a strip under its plot: the deepest debt of each span,
 * tokens past empty, drawn down from zero (all strips on one scale). Hand-written SVG; the same
 * input gives the same bytes (no dates, no random ids).
 */
export function svgChart(heading: string, panels: readonly Panel[]): string {
  const span = spanOf(panels) ?? { first: 0, last: 0 };
  const height = HEADER + panels.reduce((sum, panel) => sum + heightOf(panel), 0);
  const all = panels.map((panel) => binned(panel, span, MAX_BINS));
  const top = Math.max(1, ...(all[0]?.bins.map((bin) => bin.offered / bin.seconds) ?? []));
  const yStep = niceStep(top, 4);
  const yMax = Math.ceil(top / yStep) * yStep;
  const withDebt = panels.some((panel) => panel.debt !== undefined);
  // the strips' scale reaches the deepest debt any policy allows, so a strip full to its foot is a debt at its cap
  const debtMax = Math.max(1, ...panels.map((panel) => panel.debt?.maxDebt ?? 0));
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" ${FONT} font-size="12">`,
    `<rect width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    `<text x="${LEFT}" y="24" font-size="15" font-weight="600" fill="${COLORS.text}">${escape(heading)}</text>`,
    legend(LEFT, 46, withDebt),
  ];
  let panelTop = HEADER;
  panels.forEach((panel, i) => {
    out.push(panelSvg(panel, all[i], panelTop, yMax, yStep, debtMax));
    panelTop += heightOf(panel);
  });
  out.push('</svg>', '');
  return out.join('\n');
}

function legend(x: number, y: number, withDebt: boolean): string {
  const item = (dx: number, color: string, label: string) =>
    `<rect x="${x + dx}" y="${y - 10}" width="12" height="12" fill="${color}"/><text x="${x + dx + 18}" y="${y}" fill="${COLORS.text}">${label}</text>`;
  const debt = withDebt ? item(200, COLORS.debt, 'debt (tokens past empty)') : '';
  return `<g>${item(0, COLORS.admitted, 'admitted')}${item(100, COLORS.refused, 'refused')}${debt}</g>`;
}

function panelSvg(
  panel: Panel,
  { seconds, bins }: Binned,
  top: number,
  yMax: number,
  yStep: number,
  debtMax: number,
): string {
  const plotTop = top + PANEL_TITLE;
  const plotBase = plotTop + PLOT_HEIGHT;
  // the time axis goes under the debt strip when there is one
  const base = panel.debt === undefined ? plotBase : plotBase + DEBT_GAP + DEBT_HEIGHT;
  const x = (s: number) => LEFT + (s / seconds) * PLOT_WIDTH;
  const y = (perSecond: number) => plotBase - (perSecond / yMax) * PLOT_HEIGHT;
  const parts = [
    `<g>`,
    `<text x="${LEFT}" y="${top + 18}" fill="${COLORS.text}"><tspan font-weight="600">${escape(panel.title)}</tspan> <tspan fill="#616161">${escape(panel.subtitle)}</tspan></text>`,
  ];
  for (let v = 0; v <= yMax + yStep / 2; v += yStep) {
    parts.push(
      `<line x1="${LEFT}" y1="${n(y(v))}" x2="${LEFT + PLOT_WIDTH}" y2="${n(y(v))}" stroke="${COLORS.grid}"/>`,
    );
    parts.push(`<text x="${LEFT - 6}" y="${n(y(v) + 4)}" text-anchor="end" fill="${COLORS.axis}">${n(v)}</text>`);
  }
  // admitted from the axis up; refused stacked on top of it, up to what was offered
  const admitted = bins.map((bin) => bin.admitted / bin.seconds);
  const offered = bins.map((bin) => bin.offered / bin.seconds);
  parts.push(`<path d="${area(bins, x, y, admitted, undefined)}" fill="${COLORS.admitted}"/>`);
  parts.push(`<path d="${area(bins, x, y, offered, admitted)}" fill="${COLORS.refused}"/>`);
  if (panel.debt !== undefined) parts.push(...debtStrip(bins, x, plotBase + DEBT_GAP, debtMax));
  const xStep = timeStep(seconds);
  for (let s = 0; s <= seconds; s += xStep) {
    parts.push(`<line x1="${n(x(s))}" y1="${base}" x2="${n(x(s))}" y2="${base + 4}" stroke="${COLORS.axis}"/>`);
    // a label that would cross the picture's edge is left out (its tick stays)
    if (x(s) + labelWidth(s) / 2 <= WIDTH)
      parts.push(`<text x="${n(x(s))}" y="${base + 17}" text-anchor="middle" fill="${COLORS.axis}">${n(s)}</text>`);
  }
  parts.push(`<line x1="${LEFT}" y1="${plotTop}" x2="${LEFT}" y2="${plotBase}" stroke="${COLORS.axis}"/>`);
  parts.push(
    `<line x1="${LEFT}" y1="${plotBase}" x2="${LEFT + PLOT_WIDTH}" y2="${plotBase}" stroke="${COLORS.axis}"/>`,
  );
  parts.push(
    `<text x="${LEFT + PLOT_WIDTH / 2}" y="${base + 34}" text-anchor="middle" fill="${COLORS.axis}">time (s)</text>`,
  );
  const middle = n(plotTop + PLOT_HEIGHT / 2);
  parts.push(
    `<text x="18" y="${middle}" transform="rotate(-90 18 ${middle})" text-anchor="middle" fill="${COLORS.axis}">requests/s</text>`,
  );
  parts.push('</g>');
  return parts.join('\n');
}

/**
 * The debt strip from `top` down: its zero line, the deepest debt of each bin as a step area down
 * from it (`debtMax` tokens reach the strip's foot), and its scale at the left.
 */
function debtStrip(bins: readonly Bin[], x: (s: number) => number, top: number, debtMax: number): string[] {
  const y = (debt: number) => top + (debt / debtMax) * DEBT_HEIGHT;
  const debts = bins.map((bin) => bin.debt);
  const middle = n(top + DEBT_HEIGHT / 2);
  return [
    `<path d="${area(bins, x, y, debts, undefined)}" fill="${COLORS.debt}"/>`,
    `<line x1="${LEFT}" y1="${top}" x2="${LEFT + PLOT_WIDTH}" y2="${top}" stroke="${COLORS.axis}"/>`,
    `<line x1="${LEFT}" y1="${top}" x2="${LEFT}" y2="${top + DEBT_HEIGHT}" stroke="${COLORS.axis}"/>`,
    `<line x1="${LEFT}" y1="${top + DEBT_HEIGHT}" x2="${LEFT + PLOT_WIDTH}" y2="${top + DEBT_HEIGHT}" stroke="${COLORS.grid}"/>`,
    `<text x="${LEFT - 6}" y="${n(top + 4)}" text-anchor="end" fill="${COLORS.axis}">0</text>`,
    `<text x="${LEFT - 6}" y="${n(top + DEBT_HEIGHT)}" text-anchor="end" fill="${COLORS.axis}">-${n(debtMax)}</text>`,
    `<text x="18" y="${middle}" transform="rotate(-90 18 ${middle})" text-anchor="middle" fill="${COLORS.axis}">debt</text>`,
  ];
}

/** How wide an x-axis label of `s` seconds is drawn, px (see `LABEL_CHAR`). */
const labelWidth = (s: number): number => n(s).length * LABEL_CHAR;

/**
 * The step of the x axis over `seconds`: about ten ticks, fewer when their labels would come
 * closer than `LABEL_GAP` (over a long span a label has many digits).
 */
function timeStep(seconds: number): number {
  const perSecond = PLOT_WIDTH / seconds;
  const widest = (step: number): number => {
    let width = 0;
    for (let s = 0; s <= seconds; s += step) width = Math.max(width, labelWidth(s));
    return width;
  };
  let step = niceStep(seconds, 10);
  // 1 -> 2 -> 5 -> 10: each round has fewer labels than the last, so this ends
  while (step * perSecond < widest(step) + LABEL_GAP) step = niceStepAtLeast(step * 1.5);
  return step;
}

/**
 * A step area over the bins, in requests per second: from `lower` (the axis when undefined) up
 * to `upper`, as one closed path.
 */
function area(
  bins: readonly Bin[],
  x: (s: number) => number,
  y: (v: number) => number,
  upper: number[],
  lower: number[] | undefined,
): string {
  const points: [number, number][] = [];
  bins.forEach(({ from, seconds }, i) => points.push([from, upper[i]], [from + seconds, upper[i]]));
  const last = bins[bins.length - 1];
  if (lower === undefined) points.push([last.from + last.seconds, 0], [0, 0]);
  else
    for (let i = bins.length - 1; i >= 0; i--)
      points.push([bins[i].from + bins[i].seconds, lower[i]], [bins[i].from, lower[i]]);
  return `M${points.map(([s, v]) => `${n(x(s))} ${n(y(v))}`).join('L')}Z`;
}
