// ESLint: typescript-eslint's recommended rules over src, test, bench and bin.
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/', '.device/', 'test-output/', 'build/'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      'no-console': ['error', { allow: ['warn', 'error'] }],
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/consistent-type-imports': 'error',
      eqeqeq: ['error', 'always'],
    },
  },
  // The server sees only the engine client: nothing below it (pipelines, ensembles, the repository,
  // engines, ONNX Runtime, the native addon).
  {
    files: ['src/server/**'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          {
            group: ['**/pipeline/**', '**/ensemble/**', '**/repository/**', '**/generation/**', '**/runtime/**', '**/native/**', '**/modelbuild/**', '**/tokenizers/**', '**/config/**'],
            message: 'the server imports only the engine client (src/serving/index.ts)',
          },
          { group: ['onnxruntime-node', 'onnxruntime-*'], message: 'the server never touches ONNX Runtime' },
        ],
      }],
    },
  },
  // The generation core runs no model (test/generation/core-imports.test.ts checks the whole graph).
  {
    files: ['src/generation/core/**'],
    rules: {
      '@typescript-eslint/no-restricted-imports': ['error', {
        patterns: [
          { group: ['onnxruntime-node', 'onnxruntime-*', '**/runtime/**', '**/engines/**'], message: 'generation/core runs no model: ONNX Runtime belongs to generation/engines' },
          { group: ['**/native/**'], allowTypeImports: true, message: 'generation/core may name the native addon\'s types, never load it' },
        ],
      }],
    },
  },
  // Benchmark scripts print their tables.
  { files: ['bench/**'], rules: { 'no-console': 'off' } },
);
