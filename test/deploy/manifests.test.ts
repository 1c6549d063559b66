/**
 * deploy/kubernetes/ and deploy/kserve/, rendered with `kubectl kustomize` as an operator would: every
 * object valid against its schema, and what the pods ask of `chorus serve` (flags, variables, port,
 * probe routes) what it offers.
 */
import assert from 'node:assert/strict';
import { before, test } from 'node:test';
import { KUSTOMIZATIONS, render, schemaErrors, type K8sObject } from './objects.ts';
import { unknownFieldErrors } from './fields.ts';
import { getRoutes, serveOptions, serveSettings, type Container } from './serve-surface.ts';

interface Probe {
  httpGet?: { path: string; port: number | string };
  periodSeconds?: number;
  failureThreshold?: number;
}
interface Pod {
  containers: Array<Container & { startupProbe?: Probe; readinessProbe?: Probe; livenessProbe?: Probe; lifecycle?: { preStop?: { exec?: { command: string[] } } } }>;
  terminationGracePeriodSeconds?: number;
}

const rendered = new Map(KUSTOMIZATIONS.map((dir) => [dir, render(dir)]));
let hasGet: (path: string) => boolean;
before(async () => {
  hasGet = await getRoutes();
});

/** Each pod spec that runs chorus: Deployments' templates and ServingRuntimes' specs, with where it is. */
function pods(): Array<{ where: string; pod: Pod; objects: K8sObject[] }> {
  const found: Array<{ where: string; pod: Pod; objects: K8sObject[] }> = [];
  for (const [dir, objects] of rendered) {
    for (const object of objects) {
      if (object.kind === 'Deployment') found.push({ where: `${dir} Deployment`, pod: (object.spec as { template: { spec: Pod } }).template.spec, objects });
      if (object.kind === 'ServingRuntime') found.push({ where: `${dir} ServingRuntime`, pod: object.spec as unknown as Pod, objects });
    }
  }
  return found;
}

test('every object of every kustomization is valid against the Kubernetes, KEDA, prometheus-operator and KServe schemas', () => {
  for (const [dir, objects] of rendered) {
    assert.ok(objects.length > 0, dir);
    assert.deepEqual(objects.flatMap(schemaErrors), [], dir);
    assert.deepEqual(unknownFieldErrors(objects), [], dir);
  }
  for (const dir of KUSTOMIZATIONS.filter((d) => d.includes('overlays'))) {
    const kinds = new Set(rendered.get(dir)!.map((o) => o.kind));
    for (const kind of ['Deployment', 'Service', 'PodDisruptionBudget', 'ServiceMonitor', 'PersistentVolumeClaim', 'ScaledObject']) assert.ok(kinds.has(kind), `${dir} has a ${kind}`);
  }
  const kserve = new Set(rendered.get('deploy/kserve')!.map((o) => o.kind));
  assert.ok(kserve.has('ServingRuntime') && kserve.has('InferenceService'));
});

test('the schema checks refuse a wrong type, an unknown protocol, a misspelled field and an unknown kind', () => {
  const objects = rendered.get('deploy/kubernetes/overlays/gpu')!;
  const scaled = structuredClone(objects.find((o) => o.kind === 'ScaledObject')!);
  (scaled.spec as { triggers: Array<{ metadata: Record<string, unknown> }> }).triggers[0]!.metadata.threshold = 48;
  assert.match(schemaErrors(scaled).join('\n'), /threshold must be string/);
  const runtime = structuredClone(rendered.get('deploy/kserve')!.find((o) => o.kind === 'ServingRuntime')!);
  (runtime.spec as { protocolVersions: string[] }).protocolVersions = ['v3'];
  assert.match(schemaErrors(runtime).join('\n'), /protocolVersions\/0 must be equal to one of the allowed values/);
  const deployment = structuredClone(objects.find((o) => o.kind === 'Deployment')!);
  (deployment.spec as { template: { spec: { containers: Array<Record<string, unknown>> } } }).template.spec.containers[0]!.readinesProbe = {};
  assert.match(unknownFieldErrors([deployment]).join('\n'), /'"readinesProbe"' does not exist in type 'IContainer'/);
  const typo = structuredClone(rendered.get('deploy/kserve')!.find((o) => o.kind === 'ServingRuntime')!);
  (typo.spec as { containers: Array<{ startupProbe: Record<string, unknown> }> }).containers[0]!.startupProbe.failureTreshold = 3;
  assert.match(unknownFieldErrors([typo]).join('\n'), /ServingRuntime chorus: .*'"failureTreshold"' does not exist in type 'IProbe'/);
  assert.deepEqual(schemaErrors({ apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w' } }), ['Widget w: no schema for example.com/v1/Widget']);
});

test('the containers run chorus serve with its own flags and CHORUS_* variables, and listen where their ports say', () => {
  for (const { where, pod, objects } of pods()) {
    const [container] = pod.containers;
    const { values, unknown } = serveSettings(container!, objects);
    assert.deepEqual(unknown, [], where);
    assert.equal(values.get('host'), '0.0.0.0', `${where}: reachable from outside the pod`);
    const grpc = container!.ports?.some((p) => p.name === 'grpc') === true ? [Number(values.get('grpcPort') ?? values.get('grpc-port') ?? 8001)] : [];
    assert.deepEqual(container!.ports?.map((p) => p.containerPort), [Number(values.get('port')), ...grpc], `${where}: the ports are serve's --port and, when named, --grpc-port`);
  }
});

test('probes ask routes that the server registers, on its port; a startup probe covers the first model load', () => {
  assert.ok(hasGet('/v2/health/ready') && !hasGet('/v2/health/started'), 'the route check can fail');
  for (const { where, pod, objects } of pods()) {
    const [container] = pod.containers;
    const port = Number(serveSettings(container!, objects).values.get('port'));
    const named = new Map((container!.ports ?? []).map((p) => [p.name, p.containerPort]));
    for (const kind of ['startupProbe', 'readinessProbe', 'livenessProbe'] as const) {
      const probe = container![kind];
      assert.ok(probe?.httpGet !== undefined, `${where}: ${kind}`);
      assert.ok(hasGet(probe.httpGet.path), `${where}: ${kind} asks ${probe.httpGet.path}, which the server does not register`);
      const target = typeof probe.httpGet.port === 'number' ? probe.httpGet.port : named.get(probe.httpGet.port);
      assert.equal(target, port, `${where}: ${kind}'s port`);
    }
    assert.match(container!.livenessProbe!.httpGet!.path, /^\/v2\/health\/live$/);
    const startup = container!.startupProbe!;
    assert.ok((startup.periodSeconds ?? 10) * (startup.failureThreshold ?? 3) >= 300, `${where}: the startup probe waits at least 5 minutes`);
  }
});

test('termination grace covers the preStop pause and serve\'s --shutdown-timeout, so a rollout drains its streams', () => {
  for (const { where, pod, objects } of pods()) {
    const [container] = pod.containers;
    const timeout = Number(serveSettings(container!, objects).values.get('shutdownTimeout'));
    const command = container!.lifecycle?.preStop?.exec?.command ?? [];
    assert.equal(command[0], 'sleep', `${where}: preStop pauses while the endpoints drop the pod`);
    // The grace period (Kubernetes' default: 30 s) runs from the preStop hook's start.
    const grace = pod.terminationGracePeriodSeconds ?? 30;
    assert.ok(grace >= Number(command[1]) + timeout, `${where}: grace ${grace} s < preStop ${command[1]} s + shutdown ${timeout} s`);
  }
});

test('Services reach the container\'s named ports, gRPC among them, and serve has --grpc-port', () => {
  const grpc = serveOptions().some((o) => o.long === '--grpc-port');
  for (const [dir, objects] of rendered) {
    const deployment = objects.find((o) => o.kind === 'Deployment');
    if (deployment === undefined) continue;
    const ports = (deployment.spec as { template: { spec: Pod } }).template.spec.containers[0]!.ports!;
    for (const service of objects.filter((o) => o.kind === 'Service')) {
      for (const port of (service.spec as { ports: Array<{ name: string; targetPort: string | number }> }).ports) {
        assert.ok(ports.some((p) => p.name === port.targetPort || p.containerPort === port.targetPort), `${dir}: Service port ${port.name}`);
        if (port.name === 'grpc') assert.ok(grpc, `${dir}: a gRPC port, but chorus serve has no --grpc-port`);
      }
    }
    const grpcPorts = objects.filter((o) => o.kind === 'Service').flatMap((o) => (o.spec as { ports: Array<{ name: string; port: number }> }).ports.filter((p) => p.name === 'grpc'));
    assert.deepEqual(grpcPorts.map((p) => p.port), [8001], `${dir}: the Service's gRPC port is serve's default --grpc-port`);
  }
});

test('GPU pods ask for one nvidia.com/gpu; the CPU overlay asks for none', () => {
  const gpus = (objects: K8sObject[]): unknown => {
    const deployment = objects.find((o) => o.kind === 'Deployment')!;
    const container = (deployment.spec as { template: { spec: { containers: Array<{ resources: { limits?: Record<string, string> } }> } } }).template.spec.containers[0]!;
    return container.resources.limits?.['nvidia.com/gpu'];
  };
  assert.equal(gpus(rendered.get('deploy/kubernetes/overlays/gpu')!), '1');
  assert.equal(gpus(rendered.get('deploy/kubernetes/overlays/cpu')!), undefined);
  const service = rendered.get('deploy/kserve')!.find((o) => o.kind === 'InferenceService')!;
  assert.equal((service.spec as { predictor: { model: { resources: { limits: Record<string, string> } } } }).predictor.model.resources.limits['nvidia.com/gpu'], '1');
});

test('the shared model cache is a ReadWriteMany claim mounted where CHORUS_CACHE points', () => {
  for (const [dir, objects] of rendered) {
    const deployment = objects.find((o) => o.kind === 'Deployment');
    if (deployment === undefined) continue;
    const pod = (deployment.spec as { template: { spec: { volumes: Array<{ name: string; persistentVolumeClaim?: { claimName: string } }>; containers: Array<Container & { volumeMounts: Array<{ name: string; mountPath: string }> }> } } }).template.spec;
    const volume = pod.volumes.find((v) => v.persistentVolumeClaim !== undefined)!;
    const claim = objects.find((o) => o.kind === 'PersistentVolumeClaim' && o.metadata.name === volume.persistentVolumeClaim!.claimName)!;
    assert.deepEqual((claim.spec as { accessModes: string[] }).accessModes, ['ReadWriteMany'], dir);
    const mount = pod.containers[0]!.volumeMounts.find((m) => m.name === volume.name)!;
    const config = objects.find((o) => o.kind === 'ConfigMap' && o.data?.CHORUS_CACHE !== undefined)!;
    assert.equal(mount.mountPath, config.data!.CHORUS_CACHE, dir);
  }
});
