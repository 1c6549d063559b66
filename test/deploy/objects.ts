/**
 * Rendering deploy/'s kustomizations (`kubectl kustomize`, offline) and checking each object against
 * its schema: the Kubernetes API's (kubernetes-models), KEDA's and prometheus-operator's CRDs (their
 * @kubernetes-models packages), KServe's (kserve-schemas.ts, with ajv).
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { Ajv } from 'ajv';
import { Deployment } from 'kubernetes-models/apps/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Container, EnvVar, PersistentVolumeClaim, ResourceRequirements, Service, ServiceAccount, Volume } from 'kubernetes-models/v1';
import { parseAllDocuments } from 'yaml';
import { ROOT } from '../helpers/paths.ts';
import { inferenceServiceSchema, servingRuntimeSchema } from './kserve-schemas.ts';

/** A rendered object, as YAML gives it. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
  [field: string]: unknown;
}

/** Every kustomization an operator applies. */
export const KUSTOMIZATIONS = ['deploy/kubernetes/overlays/cpu', 'deploy/kubernetes/overlays/gpu', 'deploy/kserve'];

export function render(dir: string): K8sObject[] {
  let text: string;
  try {
    text = execFileSync('kubectl', ['kustomize', join(ROOT, dir)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    throw new Error(`kubectl kustomize ${dir} failed (these tests need kubectl, which renders offline): ${(error as Error).message}`);
  }
  return parseAllDocuments(text).map((doc) => doc.toJS() as K8sObject);
}

interface Validating {
  validate(): void;
}
type Model = new (data: never) => Validating;

const MODELS: Record<string, Model> = {
  'v1/ConfigMap': ConfigMap,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
  'v1/PersistentVolumeClaim': PersistentVolumeClaim,
  'apps/v1/Deployment': Deployment,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
};

const ajv = new Ajv({ allErrors: true });
const KSERVE = {
  'serving.kserve.io/v1alpha1/ServingRuntime': ajv.compile(servingRuntimeSchema),
  'serving.kserve.io/v1beta1/InferenceService': ajv.compile(inferenceServiceSchema),
};

function check(model: Model, data: unknown, where: string): string[] {
  try {
    new model(data as never).validate();
    return [];
  } catch (error) {
    return [`${where}: ${(error as Error).message}`];
  }
}

/** The pod-level parts of a KServe object, each checked as the Kubernetes type it is. */
function kserveParts(object: K8sObject, where: string): string[] {
  const spec = object.spec as { containers?: unknown[]; volumes?: unknown[]; predictor?: { model?: { env?: unknown[]; resources?: unknown } } };
  return [
    ...(spec.containers ?? []).flatMap((c, i) => check(Container, c, `${where} containers[${i}]`)),
    ...(spec.volumes ?? []).flatMap((v, i) => check(Volume, v, `${where} volumes[${i}]`)),
    ...(spec.predictor?.model?.env ?? []).flatMap((e, i) => check(EnvVar, e, `${where} model.env[${i}]`)),
    ...(spec.predictor?.model?.resources === undefined ? [] : check(ResourceRequirements, spec.predictor.model.resources, `${where} model.resources`)),
  ];
}

/** What is wrong with `object` against its schema; empty when it is valid. */
export function schemaErrors(object: K8sObject): string[] {
  const type = `${object.apiVersion}/${object.kind}`;
  const where = `${object.kind} ${object.metadata?.name}`;
  const model = MODELS[type];
  if (model !== undefined) return check(model, object, where);
  const validate = KSERVE[type as keyof typeof KSERVE];
  if (validate === undefined) return [`${where}: no schema for ${type}`];
  if (!validate(object)) return (validate.errors ?? []).map((e) => `${where}: ${e.instancePath} ${e.message} ${JSON.stringify(e.params)}`);
  return kserveParts(object, where);
}
