/**
 * A V8 CPU profile (node --cpu-prof) summed by where the time goes: self time per source area (Chorus's
 * folders, rxjs, fastify, node's internals, the garbage collector, idle) and the top functions.
 * Usage: node --import tsx bench/serve/profile-summary.ts <file.cpuprofile> [top=25]
 */
import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
}

const file = process.argv[2]!;
const top = Number(process.argv[3] ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const self = new Map<number, number>();
profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));

/** The area a frame's url is in. */
function area(node: Node): string {
  const { url, functionName } = node.callFrame;
  if (url === '') return `(${functionName || 'native'})`;
  const src = /\/src\/([^/]+)\//.exec(url);
  if (src && !url.includes('node_modules')) return `src/${src[1]}`;
  const module = /node_modules\/((@[^/]+\/)?[^/]+)/.exec(url);
  if (module) return module[1]!;
  if (url.startsWith('node:')) return url.replace(/^node:(internal\/)?/, 'node:').split('/')[0]!;
  return url.replace(/^.*\//, '');
}

const total = [...self.values()].reduce((a, b) => a + b, 0);
const areas = new Map<string, number>();
const functions = new Map<string, number>();
for (const [id, us] of self) {
  const node = byId.get(id)!;
  areas.set(area(node), (areas.get(area(node)) ?? 0) + us);
  const name = `${node.callFrame.functionName || '(anonymous)'} ${node.callFrame.url.replace(/^.*\/(src|node_modules)\//, '$1/')}:${node.callFrame.lineNumber + 1}`;
  functions.set(name, (functions.get(name) ?? 0) + us);
}
const share = (us: number): string => `${((100 * us) / total).toFixed(1)}%`;
const busy = total - (areas.get('(idle)') ?? 0);
console.log(`profile: ${(total / 1e6).toFixed(2)} s, busy ${(busy / 1e6).toFixed(2)} s`);
console.table([...areas].sort((a, b) => b[1] - a[1]).slice(0, 20).map(([name, us]) => ({ area: name, ms: Math.round(us / 1000), share: share(us) })));
console.table([...functions].sort((a, b) => b[1] - a[1]).slice(0, top).map(([name, us]) => ({ function: name, ms: Math.round(us / 1000), share: share(us) })));
