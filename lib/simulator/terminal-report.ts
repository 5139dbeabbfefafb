import { type Binned, binned, type Panel, type PanelDebt, spanOf } from './panels.js';
import type { BadLine } from './traffic.js';

/** Most rows a panel's table has; longer traffic is summed over spans of several seconds. */
const TABLE_ROWS = 30;
/** Columns of a chart's plot, and its rows: with the axis, a chart fits in 80 columns. */
const CHART_COLUMNS = 64;
const CHART_ROWS = 8;
const AXIS_WIDTH = 8;
const ADMITTED = '█';
const REFUSED = '▒';

const whole = (n: number): string => n.toLocaleString('en-US');
const rate = (n: number): string => (Number.isInteger(n) ? whole(n) : n.toFixed(n < 10 ? 2 : 1));
const percent = (part: number, all: number): string => `${all === 0 ? '0' : ((part * 100) / all).toFixed(1)} %`;
/** Tokens, to three decimals without trailing zeros. */
const tokens = (n: number): string => n.toLocaleString('en-US', { maximumFractionDigits: 3 });
/** Milliseconds as seconds, to three decimals without trailing zeros. */
const seconds = (ms: number): string => `${(ms / 1000).toLocaleString('en-US', { maximumFractionDigits: 3 })} s`;

/**
 * The report printed without `--json`: what the traffic was, and for each panel a table per
 * second (offered, admitted, refused) and a chart of requests per second, admitted below,
 * refused above. With traffic that settles, a policy's panel says what its requests reserved
 * and cost, and how its buckets went into debt, and its table has the deepest debt of each span.
 * Headings, tables and charts fit in 80 columns (a bad line quoted may not).
 */
export function terminalReport(
  heading: string,
  panels: readonly Panel[],
  badLines: readonly BadLine[],
  badCount: number,
): string {
  const out = wrap(heading);
  if (badCount > 0) {
    out.push(
      `${whole(badCount)} bad line${badCount === 1 ? '' : 's'} skipped${badCount > badLines.length ? `; the first ${badLines.length}` : ''}:`,
    );
    for (const { line, reason, text } of badLines) out.push(`  line ${line}: ${reason}: ${text}`);
  }
  const span = spanOf(panels);
  if (span === undefined) return [...out, 'No requests.', ''].join('\n');
  // every panel sees the same requests, so one scale serves them all and they compare at a glance
  const chartBins = panels.map((panel) => binned(panel, span, CHART_COLUMNS));
  const top = Math.max(...chartBins[0].bins.map((bin) => bin.offered / bin.seconds));
  panels.forEach((panel, i) => {
    const table = binned(panel, span, TABLE_ROWS);
    const offered = table.bins.reduce((sum, bin) => sum + bin.offered, 0);
    const refused = table.bins.reduce((sum, bin) => sum + bin.refused, 0);
    out.push(
      '',
      ...wrap(`${panel.title}: ${panel.subtitle}`),
      `refused ${whole(refused)} of ${whole(offered)} (${percent(refused, offered)})`,
      ...(panel.debt === undefined ? [] : debtLines(panel.debt, span.first)),
      '',
    );
    out.push(...tableLines(table, panel.debt !== undefined), '', ...chartLines(chartBins[i], top));
  });
  out.push('');
  return out.join('\n');
}

/** `text` in lines of at most 80 columns, broken at spaces (a word longer than that stays whole). */
function wrap(text: string): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line !== '' && line.length + 1 + word.length > 80) {
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  return [...lines, line];
}

/**
 * What settling did under a policy: the tokens its admitted requests reserved, cost in the end and
 * were charged, and its debt: the deepest (when, from the traffic's first second, and whose), the time its
 * buckets owed (summed over keys), and the requests refused meanwhile.
 */
function debtLines({ maxDebt, counts }: PanelDebt, firstSecond: number): string[] {
  const { settled, reserved, actual, charged, deepest, deepestAt, deepestKey, inDebtMs, refusedInDebt } = counts;
  const lines = wrap(
    `tokens: ${tokens(reserved)} reserved, ${tokens(actual)} actual, ${tokens(charged)} charged (${whole(settled)} request${settled === 1 ? '' : 's'} settled)`,
  );
  if (deepest === 0) return [...lines, `debt: none (at most ${tokens(maxDebt)} past empty)`];
  return [
    ...lines,
    ...wrap(
      `debt: deepest ${tokens(deepest)} past empty (at most ${tokens(maxDebt)}), at ${seconds(deepestAt! - firstSecond * 1000)}, key ${deepestKey}`,
    ),
    `in debt ${seconds(inDebtMs)} in all; ${whole(refusedInDebt)} request${refusedInDebt === 1 ? '' : 's'} refused in debt`,
  ];
}

function tableLines({ width, bins }: Binned, withDebt: boolean): string[] {
  const time = width === 1 ? 'second' : `from s (${width} s each)`;
  const row = (cells: string[]) =>
    `  ${cells[0].padStart(Math.max(6, time.length))}${cells
      .slice(1)
      .map((cell) => cell.padStart(10))
      .join('')}`;
  const debt = (n: number): string[] => (withDebt ? [tokens(n)] : []);
  return [
    row([time, 'offered', 'admitted', 'refused', ...(withDebt ? ['debt'] : [])]),
    ...bins.map((bin) =>
      row([String(bin.from), whole(bin.offered), whole(bin.admitted), whole(bin.refused), ...debt(bin.debt)]),
    ),
  ];
}

/**
 * Stacked columns of requests per second, a bin as wide as the plot allows (at least one
 * character); a cell is filled when the value reaches its middle.
 */
function chartLines({ width, seconds, bins }: Binned, top: number): string[] {
  const unit = top / CHART_ROWS;
  const chars = Math.max(1, Math.floor(CHART_COLUMNS / bins.length));
  const lines: string[] = [];
  for (let row = CHART_ROWS - 1; row >= 0; row--) {
    const label = row === CHART_ROWS - 1 || row === CHART_ROWS / 2 - 1 ? rate((row + 1) * unit) : '';
    let cells = '';
    for (const bin of bins) {
      const middle = (row + 0.5) * unit;
      cells += (
        bin.admitted / bin.seconds >= middle ? ADMITTED : bin.offered / bin.seconds >= middle ? REFUSED : ' '
      ).repeat(chars);
    }
    lines.push(`${label.padStart(AXIS_WIDTH - 2)} ┤${cells}`);
  }
  lines.push(`${'0'.padStart(AXIS_WIDTH - 2)} └${'─'.repeat(bins.length * chars)}`);
  // a tick label under the start of every few bins, and the end: starts at least 8 characters
  // apart, and 2 spaces between labels however many digits a long span gives them
  const end = `${seconds} s`;
  const spacing = Math.max(8, String((bins.length - 1) * width).length + 2);
  const every = Math.ceil(spacing / chars);
  let ticks = '';
  for (let i = 0; i * chars + spacing + end.length <= bins.length * chars; i += every)
    ticks = `${ticks.padEnd(i * chars)}${i * width}`;
  lines.push(`${' '.repeat(AXIS_WIDTH)}${ticks}${end.padStart(bins.length * chars + 1 - ticks.length)}`);
  lines.push(
    `${' '.repeat(AXIS_WIDTH)}requests/s: ${ADMITTED} admitted  ${REFUSED} refused${width === 1 ? '' : `  (a column: ${width} s)`}`,
  );
  return lines;
}
