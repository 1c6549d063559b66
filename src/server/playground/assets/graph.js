// An ensemble drawn as its graph of steps: the ensemble's inputs on the left, each step in the column of
// its depth (one past the deepest step that feeds it), the outputs on the right; an arrow per pair of
// connected nodes, labelled with the tensors it carries (all of them, with their ports, on hover).
const SVG = 'http://www.w3.org/2000/svg';
const NODE_W = 164;
const NODE_H = 48;
const COL_GAP = 280;
const ROW_GAP = 96;
const MARGIN = 24;

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

const clip = (text, chars) => (text.length > chars ? `${text.slice(0, chars - 1)}…` : text);

/** Nodes with columns and edges with their tensors, from an ensemble of GET /chorus/repository. */
export function layout(ensemble) {
  const producer = new Map();
  for (const input of ensemble.inputs) producer.set(input.name, 'inputs');
  for (const step of ensemble.steps) for (const tensor of Object.values(step.outputs)) producer.set(tensor, step.name);
  const depth = new Map([['inputs', 0]]);
  const depthOf = (name, seen = new Set()) => {
    if (depth.has(name)) return depth.get(name);
    if (seen.has(name)) return 1;
    seen.add(name);
    const step = ensemble.steps.find((s) => s.name === name);
    const feeders = Object.values(step.inputs).map((t) => producer.get(t)).filter((p) => p !== undefined);
    const d = 1 + Math.max(0, ...feeders.map((p) => depthOf(p, seen)));
    depth.set(name, d);
    return d;
  };
  for (const step of ensemble.steps) depthOf(step.name);
  const last = Math.max(1, ...ensemble.steps.map((s) => depth.get(s.name))) + 1;
  depth.set('outputs', last);

  const edges = new Map();
  const connect = (from, to, port, tensor) => {
    const key = `${from}\u0000${to}`;
    if (!edges.has(key)) edges.set(key, { from, to, tensors: [], ports: [] });
    const edge = edges.get(key);
    if (!edge.tensors.includes(tensor)) edge.tensors.push(tensor);
    edge.ports.push(`${port} ← ${tensor}`);
  };
  for (const step of ensemble.steps) {
    for (const [port, tensor] of Object.entries(step.inputs)) {
      const from = producer.get(tensor);
      if (from !== undefined) connect(from, step.name, port, tensor);
    }
  }
  for (const output of ensemble.outputs) {
    const from = producer.get(output.name);
    if (from !== undefined) connect(from, 'outputs', output.name, output.name);
  }

  const nodes = [
    { id: 'inputs', title: 'inputs', subtitle: `${ensemble.inputs.length} tensors`, io: true },
    ...ensemble.steps.map((s) => ({ id: s.name, title: s.name, subtitle: `${s.kind} ${s.target}`, io: false })),
    { id: 'outputs', title: 'outputs', subtitle: `${ensemble.outputs.length} tensors`, io: true },
  ];
  const rows = new Map();
  for (const node of nodes) {
    node.column = depth.get(node.id);
    node.row = rows.get(node.column) ?? 0;
    rows.set(node.column, node.row + 1);
  }
  return { nodes, edges: [...edges.values()], columns: last + 1, rows: Math.max(...rows.values()) };
}

/** The ensemble's graph as an SVG element. */
export function drawEnsemble(ensemble) {
  const { nodes, edges, columns, rows } = layout(ensemble);
  const lift = 64; // room above the nodes for edges that skip a column
  const width = MARGIN * 2 + (columns - 1) * COL_GAP + NODE_W;
  const height = MARGIN * 2 + lift + (rows - 1) * ROW_GAP + NODE_H;
  const at = new Map(nodes.map((n) => [n.id, { x: MARGIN + n.column * COL_GAP, y: MARGIN + lift + n.row * ROW_GAP }]));
  const svg = el('svg', { class: 'graph', viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': `ensemble ${ensemble.name}: ${ensemble.steps.map((s) => s.name).join(', ')}` });
  const defs = el('defs');
  const marker = el('marker', { id: `arrow-${ensemble.name}`, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' });
  marker.append(el('path', { d: 'M0 0 L10 5 L0 10 z' }));
  defs.append(marker);
  svg.append(defs);

  for (const edge of edges) {
    const a = at.get(edge.from);
    const b = at.get(edge.to);
    const x1 = a.x + NODE_W;
    const y1 = a.y + NODE_H / 2;
    const x2 = b.x;
    const y2 = b.y + NODE_H / 2;
    const span = nodes.find((n) => n.id === edge.to).column - nodes.find((n) => n.id === edge.from).column;
    const rise = span > 1 ? lift + (span - 2) * 14 : 0;
    const d = `M${x1} ${y1} C${x1 + 70} ${y1 - rise * 1.3}, ${x2 - 70} ${y2 - rise * 1.3}, ${x2} ${y2}`;
    const g = el('g', { class: 'edge', 'data-from': edge.from, 'data-to': edge.to, 'data-tensors': edge.tensors.join(',') });
    g.append(el('title', {}, `${edge.from} → ${edge.to}\n${edge.ports.join('\n')}`));
    g.append(el('path', { d, 'marker-end': `url(#arrow-${ensemble.name})` }));
    const shown = edge.tensors.slice(0, 2).join(', ') + (edge.tensors.length > 2 ? ` +${edge.tensors.length - 2}` : '');
    // The bezier's midpoint.
    const mx = (x1 + x2) / 2;
    const my = (y1 + y2) / 2 - rise * 0.975;
    g.append(el('text', { x: mx, y: my - 5, 'text-anchor': 'middle' }, clip(shown, 17)));
    svg.append(g);
  }
  for (const node of nodes) {
    const { x, y } = at.get(node.id);
    const g = el('g', { class: `node${node.io ? ' io' : ''}`, 'data-node': node.id, transform: `translate(${x} ${y})` });
    g.append(el('title', {}, node.io ? (node.id === 'inputs' ? ensemble.inputs : ensemble.outputs).map((t) => `${t.name} (${t.datatype}${t.optional ? ', optional' : ''})`).join('\n') : `${node.title}: ${node.subtitle}`));
    g.append(el('rect', { width: NODE_W, height: NODE_H, rx: 8 }));
    g.append(el('text', { x: 12, y: 20, 'font-weight': 600 }, clip(node.title, 20)));
    g.append(el('text', { x: 12, y: 37, class: 'kind' }, clip(node.subtitle, 24)));
    svg.append(g);
  }
  return svg;
}
