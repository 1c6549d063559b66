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
  // Benchmark scripts print their tables.
  { files: ['bench/**'], rules: { 'no-console': 'off' } },
);
