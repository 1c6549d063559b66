export { DATATYPES, type Datatype } from './datatypes.ts';
export { formatDiagnostic, compareDiagnostics, type Diagnostic } from './diagnostic.ts';
export { DefinitionDocument, type Position, type ValuePath } from './document.ts';
export {
  KINDS,
  STEP_KINDS,
  TokenizerDefinition,
  ModelDefinition,
  EnsembleDefinition,
  PipelineDefinition,
  type Kind,
  type StepKind,
  type StepDefinition,
  type TensorSpec,
} from './schemas.ts';
export { LIST_FIELDS, STANDARD_FIELDS } from './request-fields.ts';
export { STEP_PORTS, type PortSpec, type StepPorts } from './step-ports.ts';
export { validateSchema, pathText } from './validate-schema.ts';
