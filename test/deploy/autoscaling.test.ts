/**
 * The overlays' ScaledObjects scale on series that /metrics exports, at the thresholds the capacity
 * plan derives from bench/results/; the models they serve have the plan's slots; the repositories they
 * serve load.
 */
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { measuredFigures, plan, DOCS_LOAD, type Plan } from '../../bench/capacity/plan.ts';
import type { EngineClient } from '../../src/serving/index.ts';
import { bundledRepositoryDir, loadRepository } from '../../src/repository/index.ts';
import { Metrics } from '../../src/server/index.ts';
import { ROOT } from '../helpers/paths.ts';
import { scratchDir } from '../helpers/scratch.ts';
import { render, type K8sObject } from './objects.ts';

interface Trigger {
  type: string;
  name: string;
  metricType: string;
  metadata: { query: string; threshold: string };
}

const figures = measuredFigures(join(ROOT, 'bench/results'));
const overlays: Array<{ dir: string; plan: Plan }> = [
  { dir: 'deploy/kubernetes/overlays/cpu', plan: plan(figures.cpu, DOCS_LOAD) },
  { dir: 'deploy/kubernetes/overlays/gpu', plan: plan(figures.h100, DOCS_LOAD) },
];

function scaledObject(objects: readonly K8sObject[]): { triggers: Trigger[]; maxReplicaCount: number; minReplicaCount: number } {
  return objects.find((o) => o.kind === 'ScaledObject')!.spec as never;
}

/** The CHORUS_* settings of the overlay's config map. */
function config(objects: readonly K8sObject[]): Record<string, string> {
  return objects.find((o) => o.kind === 'ConfigMap' && o.data?.CHORUS_PORT !== undefined)!.data!;
}

/**
 * The repository the overlay serves, as files: the image's bundled one, or the one its Deployment
 * mounts from a config map (each key written at its volume item's path).
 */
function repository(objects: readonly K8sObject[]): string {
  const mounted = config(objects).CHORUS_REPOSITORY;
  if (mounted === undefined) return bundledRepositoryDir();
  const pod = (objects.find((o) => o.kind === 'Deployment')!.spec as { template: { spec: { volumes: Array<{ name: string; configMap?: { name: string; items: Array<{ key: string; path: string }> } }>; containers: Array<{ volumeMounts: Array<{ name: string; mountPath: string }> }> } } }).template.spec;
  const mount = pod.containers[0]!.volumeMounts.find((m) => m.mountPath === mounted)!;
  const volume = pod.volumes.find((v) => v.name === mount.name)!.configMap!;
  const data = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === volume.name)!.data!;
  const dir = scratchDir('chorus-mounted-');
  for (const item of volume.items) {
    mkdirSync(dirname(join(dir, item.path)), { recursive: true });
    writeFileSync(join(dir, item.path), data[item.key]!);
  }
  return dir;
}

test('the ScaledObjects query series that /metrics exports, summed over the replicas, as averages per replica', () => {
  const metrics = new Metrics();
  metrics.watch({ stats: () => [] } as unknown as EngineClient);
  assert.equal(metrics.registry.getSingleMetric('chorus_engine_queue_depth_total'), undefined, 'the name check can fail');
  for (const { dir } of overlays) {
    const { triggers } = scaledObject(render(dir));
    assert.deepEqual(triggers.map((t) => t.name), ['in-flight', 'queue-depth'], dir);
    for (const trigger of triggers) {
      assert.equal(trigger.type, 'prometheus');
      assert.equal(trigger.metricType, 'AverageValue', `${dir} ${trigger.name}: the threshold is per replica`);
      const [, series] = /^sum\(([a-z_]+)\{job="chorus"\}\)$/.exec(trigger.metadata.query) ?? [];
      assert.ok(series !== undefined && metrics.registry.getSingleMetric(series) !== undefined, `${dir} ${trigger.name}: ${trigger.metadata.query} reads no series of ours`);
    }
    assert.match(triggers[0]!.metadata.query, /nv_inference_pending_request_count/);
    assert.match(triggers[1]!.metadata.query, /chorus_engine_queue_depth/);
  }
});

test('the thresholds are the capacity plan\'s for each overlay, and the GPU overlay can reach the plan\'s replicas', () => {
  for (const { dir, plan: p } of overlays) {
    const scaled = scaledObject(render(dir));
    assert.deepEqual(scaled.triggers.map((t) => Number(t.metadata.threshold)), [p.inFlightTarget, p.queueDepthTarget], dir);
    assert.ok(scaled.minReplicaCount >= 2, `${dir}: two replicas at least, so that the disruption budget lets a node drain`);
    const deployment = render(dir).find((o) => o.kind === 'Deployment')!;
    assert.equal((deployment.spec as { replicas?: number }).replicas, undefined, `${dir}: the ScaledObject alone sets the replica count`);
  }
  const gpu = overlays[1]!;
  assert.ok(scaledObject(render(gpu.dir)).maxReplicaCount >= gpu.plan.replicasWithSpare, 'room for the 1,000 requests/s of docs/deploy.md');
});

test('each overlay\'s repository loads, has the models CHORUS_LOAD names, and batches them in the plan\'s slots', () => {
  for (const { dir, plan: p } of overlays) {
    const objects = render(dir);
    const { repository: loaded, diagnostics } = loadRepository(repository(objects));
    assert.deepEqual(diagnostics.filter((d) => d.severity === 'error'), [], dir);
    const names = config(objects).CHORUS_LOAD!.split(',');
    assert.ok(names.length > 0, dir);
    for (const name of names) {
      const model = loaded.models.get(name);
      assert.ok(model !== undefined, `${dir}: CHORUS_LOAD names ${name}, which the repository lacks`);
      assert.equal(model.value.max_batch_size, p.figures.slots, `${dir}: ${name}'s max_batch_size is the plan's slots`);
    }
  }
});
