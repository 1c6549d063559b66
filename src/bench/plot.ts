/**
 * `chorus bench plot`: throughput against latency across a sweep's settings, one line per results file
 * (so runs can be compared on one chart). Left: median end-to-end latency; right, for streamed runs:
 * median time to first token. Drawn with Vega-Lite to SVG, rasterized to PNG with resvg.
 */
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { Resvg } from '@resvg/resvg-js';
import * as vega from 'vega';
import * as vegaLite from 'vega-lite';
import { ChorusError, invalidArgument } from '../errors.ts';
import type { BenchResult } from './run.ts';

interface Point {
  series: string;
  setting: string;
  throughput: number;
  latency: number;
  ttft?: number;
}

export function readResults(path: string): BenchResult {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new ChorusError('CHORUS_INVALID_ARGUMENT', `${path}: not a results file of chorus bench (${(error as Error).message})`, { param: 'results', value: path });
  }
  const result = parsed as BenchResult;
  if (result?.tool !== 'chorus bench' || !Array.isArray(result.settings)) throw invalidArgument('results', 'a JSON file written by chorus bench --out', path);
  return result;
}

/** A series name: the file's pipeline and protocol, or the label given. */
function seriesName(result: BenchResult, path: string, label: string | undefined): string {
  return label ?? `${result.target.pipeline} (${result.target.protocol}${result.target.stream ? ', stream' : ''}) ${basename(path, '.json')}`;
}

export async function plotResults(files: ReadonlyArray<{ path: string; label?: string }>, title?: string): Promise<{ svg: string; png: Buffer }> {
  const points: Point[] = [];
  for (const file of files) {
    const result = readResults(file.path);
    const series = seriesName(result, file.path, file.label);
    for (const { summary } of result.settings) {
      if (summary.ok === 0) continue;
      points.push({ series, setting: summary.label.replace('concurrency ', 'c='), throughput: summary.outputTokensPerS, latency: summary.latencyMs.p50, ...(summary.ttftMs && !Number.isNaN(summary.ttftMs.p50) ? { ttft: summary.ttftMs.p50 } : {}) });
    }
  }
  if (points.length === 0) throw invalidArgument('results', 'at least one setting with answered requests', files.map((f) => f.path));
  const panel = (field: 'latency' | 'ttft', axis: string): Record<string, unknown> => ({
    width: 360,
    height: 260,
    transform: [{ filter: `isValid(datum.${field})` }],
    layer: [
      {
        mark: { type: 'line', point: { filled: true, size: 60 } },
        encoding: {
          x: { field: 'throughput', type: 'quantitative', title: 'output tokens/s' },
          y: { field, type: 'quantitative', title: axis },
          color: { field: 'series', type: 'nominal', title: null, legend: { orient: 'bottom', labelLimit: 500 } },
          order: { field: 'throughput', type: 'quantitative' },
        },
      },
      { mark: { type: 'text', dx: 6, dy: -8, align: 'left', fontSize: 10 }, encoding: { x: { field: 'throughput', type: 'quantitative' }, y: { field, type: 'quantitative' }, text: { field: 'setting' } } },
    ],
  });
  const hasTtft = points.some((p) => p.ttft !== undefined);
  const spec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: title ?? 'Throughput against latency',
    background: 'white',
    data: { values: points },
    hconcat: hasTtft ? [panel('latency', 'median latency, ms'), panel('ttft', 'median time to first token, ms')] : [panel('latency', 'median latency, ms')],
    config: { font: 'DejaVu Sans' },
  } as unknown as vegaLite.TopLevelSpec;
  return renderChart(spec);
}

/** A Vega-Lite spec drawn to SVG, and rasterized (2x) to PNG with the system's fonts. */
export async function renderChart(spec: vegaLite.TopLevelSpec): Promise<{ svg: string; png: Buffer }> {
  const view = new vega.View(vega.parse(vegaLite.compile(spec).spec), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  const png = Buffer.from(new Resvg(svg, { background: 'white', fitTo: { mode: 'zoom', value: 2 }, font: { loadSystemFonts: true, defaultFontFamily: 'DejaVu Sans' } }).render().asPng());
  return { svg, png };
}
