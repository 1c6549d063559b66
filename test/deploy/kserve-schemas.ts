/**
 * JSON schemas of the KServe objects deploy/kserve/ uses: the fields of serving.kserve.io's
 * ServingRuntime (v1alpha1) and InferenceService (v1beta1) CRDs that our manifests set, with the CRDs'
 * types, required fields and KServe's protocol names. Fields outside these are refused, so a misspelled
 * field fails here instead of being dropped by the API server. Containers, volumes, env and resources
 * are Kubernetes types: the caller checks them with kubernetes-models.
 */
const protocol = { enum: ['v1', 'v2', 'grpc-v1', 'grpc-v2'] };
const stringMap = { type: 'object', additionalProperties: { type: 'string' } };
const int32 = { type: 'integer', minimum: -2147483648, maximum: 2147483647 };
const objects = { type: 'array', items: { type: 'object' } };

const metadata = {
  type: 'object',
  required: ['name'],
  properties: { name: { type: 'string', pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' }, namespace: { type: 'string' }, labels: stringMap, annotations: stringMap },
  additionalProperties: false,
};

export const servingRuntimeSchema = {
  type: 'object',
  required: ['apiVersion', 'kind', 'metadata', 'spec'],
  properties: {
    apiVersion: { const: 'serving.kserve.io/v1alpha1' },
    kind: { const: 'ServingRuntime' },
    metadata,
    spec: {
      type: 'object',
      required: ['containers'],
      properties: {
        annotations: stringMap,
        labels: stringMap,
        supportedModelFormats: {
          type: 'array',
          items: {
            type: 'object',
            required: ['name'],
            properties: { name: { type: 'string' }, version: { type: 'string' }, autoSelect: { type: 'boolean' }, priority: { ...int32, minimum: 1 } },
            additionalProperties: false,
          },
        },
        protocolVersions: { type: 'array', items: protocol },
        multiModel: { type: 'boolean' },
        disabled: { type: 'boolean' },
        containers: { ...objects, minItems: 1 },
        volumes: objects,
        nodeSelector: stringMap,
        tolerations: objects,
      },
      additionalProperties: false,
    },
  },
  additionalProperties: false,
};

export const inferenceServiceSchema = {
  type: 'object',
  required: ['apiVersion', 'kind', 'metadata', 'spec'],
  properties: {
    apiVersion: { const: 'serving.kserve.io/v1beta1' },
    kind: { const: 'InferenceService' },
    metadata,
    spec: {
      type: 'object',
      required: ['predictor'],
      properties: {
        predictor: {
          type: 'object',
          properties: {
            minReplicas: { ...int32, minimum: 0 },
            maxReplicas: { ...int32, minimum: 0 },
            serviceAccountName: { type: 'string' },
            nodeSelector: stringMap,
            tolerations: objects,
            model: {
              type: 'object',
              required: ['modelFormat'],
              properties: {
                modelFormat: { type: 'object', required: ['name'], properties: { name: { type: 'string' }, version: { type: 'string' } }, additionalProperties: false },
                runtime: { type: 'string' },
                protocolVersion: protocol,
                storageUri: { type: 'string', pattern: '^(s3|gs|hdfs|webhdfs|https?|pvc|oci|hf)://' },
                args: { type: 'array', items: { type: 'string' } },
                env: objects,
                resources: { type: 'object' },
              },
              additionalProperties: false,
            },
          },
          additionalProperties: false,
        },
      },
      additionalProperties: false,
    },
  },
  additionalProperties: false,
};
