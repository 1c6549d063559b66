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

/** One message per field that an object's type lacks (objects without a type here are skipped). */
export function unknownFieldErrors(objects: readonly K8sObject[]): string[] {
  const typed = objects.map((object) => ({ object, type: TYPES[`${object.apiVersion}/${object.kind}`] })).filter((t) => t.type !== undefined);
  const file = join(ROOT, 'test/deploy/__rendered__.ts');
  const lines = typed.map(({ type }, i) => `import type { ${type![1]} as T${i} } from '${type![0]}';`);
  typed.forEach(({ object }, i) => lines.push(`export const o${i}: T${i} = ${JSON.stringify(object)};`));
  const source = lines.join('\n');
  const options: ts.CompilerOptions = { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, strict: true, noEmit: true, skipLibCheck: true, types: [] };
  const host = ts.createCompilerHost(options);
  const read = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, ...rest) => (name === file ? ts.createSourceFile(name, source, version) : read(name, version, ...rest));
  host.fileExists = ((exists) => (name: string) => name === file || exists(name))(host.fileExists.bind(host));
  const program = ts.createProgram([file], options, host);
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const line = d.file === undefined || d.start === undefined ? -1 : d.file.getLineAndCharacterOfPosition(d.start).line;
    const object = line >= typed.length ? typed[line - typed.length]?.object : undefined;
    return `${object === undefined ? '' : `${object.kind} ${object.metadata.name}: `}${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
  });
}
