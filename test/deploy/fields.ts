/**
 * Fields the Kubernetes types do not have. kubernetes-models' validators accept unknown fields (as
 * the API server does, dropping them), so a misspelled `periodSecond` would pass them; here each
 * object is written as a literal of its kubernetes-models type and type-checked, and TypeScript's
 * excess-property check names every field the type lacks, at any depth.
 */
import { join } from 'node:path';
import ts from 'typescript';
import { ROOT } from '../helpers/paths.ts';
import type { K8sObject } from './objects.ts';

/** apiVersion/kind -> the module and interface of its kubernetes-models type. */
const TYPES: Record<string, [string, string]> = {
  'v1/ConfigMap': ['kubernetes-models/v1/ConfigMap', 'IConfigMap'],
  'v1/Service': ['kubernetes-models/v1/Service', 'IService'],
  'v1/ServiceAccount': ['kubernetes-models/v1/ServiceAccount', 'IServiceAccount'],
  'v1/PersistentVolumeClaim': ['kubernetes-models/v1/PersistentVolumeClaim', 'IPersistentVolumeClaim'],
  'apps/v1/Deployment': ['kubernetes-models/apps/v1/Deployment', 'IDeployment'],
  'policy/v1/PodDisruptionBudget': ['kubernetes-models/policy/v1/PodDisruptionBudget', 'IPodDisruptionBudget'],
  'keda.sh/v1alpha1/ScaledObject': ['@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject', 'IScaledObject'],
  'monitoring.coreos.com/v1/ServiceMonitor': ['@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor', 'IServiceMonitor'],
};

const CONTAINER: [string, string] = ['kubernetes-models/v1/Container', 'IContainer'];
const VOLUME: [string, string] = ['kubernetes-models/v1/Volume', 'IVolume'];
const ENV_VAR: [string, string] = ['kubernetes-models/v1/EnvVar', 'IEnvVar'];
const RESOURCES: [string, string] = ['kubernetes-models/v1/ResourceRequirements', 'IResourceRequirements'];

interface Typed {
  where: string;
  value: unknown;
  type: [string, string];
}

/** An object typed whole, or for KServe's objects, their Kubernetes parts (kserve-schemas.ts checks the rest). */
function typedParts(object: K8sObject): Typed[] {
  const where = `${object.kind} ${object.metadata.name}`;
  const type = TYPES[`${object.apiVersion}/${object.kind}`];
  if (type !== undefined) return [{ where, value: object, type }];
  const spec = (object.spec ?? {}) as { containers?: unknown[]; volumes?: unknown[]; predictor?: { model?: { env?: unknown[]; resources?: unknown } } };
  const model = spec.predictor?.model;
  return [
    ...(spec.containers ?? []).map((value) => ({ where, value, type: CONTAINER })),
    ...(spec.volumes ?? []).map((value) => ({ where, value, type: VOLUME })),
    ...(model?.env ?? []).map((value) => ({ where, value, type: ENV_VAR })),
    ...(model?.resources === undefined ? [] : [{ where, value: model.resources, type: RESOURCES }]),
  ];
}

/** One message per field that an object's type lacks (kinds without a type here are skipped). */
export function unknownFieldErrors(objects: readonly K8sObject[]): string[] {
  const typed = objects.flatMap(typedParts);
  const file = join(ROOT, 'test/deploy/__rendered__.ts');
  const lines = typed.map(({ type }, i) => `import type { ${type[1]} as T${i} } from '${type[0]}';`);
  typed.forEach(({ value }, i) => lines.push(`export const o${i}: T${i} = ${JSON.stringify(value)};`));
  const source = lines.join('\n');
  const options: ts.CompilerOptions = { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, noEmit: true, skipLibCheck: true, types: [] };
  const host = ts.createCompilerHost(options);
  const read = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, ...rest) => (name === file ? ts.createSourceFile(name, source, version) : read(name, version, ...rest));
  host.fileExists = ((exists) => (name: string) => name === file || exists(name))(host.fileExists.bind(host));
  const program = ts.createProgram([file], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const line = d.file === undefined || d.start === undefined ? -1 : d.file.getLineAndCharacterOfPosition(d.start).line;
    const part = line >= typed.length ? typed[line - typed.length] : undefined;
    return `${part === undefined ? '' : `${part.where}: `}${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
  });
}
