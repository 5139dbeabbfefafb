// @ts-check
/**
 * ESLint as `nest new` sets it up: @eslint/js and typescript-eslint's type-checked recommended
 * rules, with eslint-config-prettier last so that layout is Prettier's alone (`npm run lint` runs
 * `prettier --check` beside ESLint). Rules are turned off only where they fight a deliberate
 * style of this codebase, each with its reason.
 */
import eslint from '@eslint/js';
import prettier from 'eslint-config-prettier';
import { defineConfig } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig(
  {
    ignores: ['dist*/**', '**/node_modules/**', 'exp/**', 'coverage/**'],
  },
  eslint.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      globals: { ...globals.node, ...globals.jest },
      sourceType: 'module',
      parserOptions: {
        projectService: { allowDefaultProject: ['*.js', '*.mjs'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
  },
  {
    rules: {
      // as nest new sets them: `any` is how Nest and reflect-metadata type decorator targets and requests
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-floating-promises': 'warn',
      '@typescript-eslint/no-unsafe-argument': 'warn',
      // an `async` method keeps a Promise-returning interface (a store's) and turns a throw into a rejection
      '@typescript-eslint/require-await': 'off',
      // a caught value is passed on as it was thrown, as an async function would pass it on
      '@typescript-eslint/prefer-promise-reject-errors': [
        'error',
        { allowThrowingUnknown: true, allowThrowingAny: true },
      ],
      // a leading underscore names what is left out on purpose (`const { file: _file, ...rest } = trace`)
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          caughtErrorsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
        },
      ],
    },
  },
  {
    files: ['test/**', 'bench/**', 'scripts/**'],
    rules: {
      // helpers hand out closures to destructure (`const { setNow, consume } = makeStore()`) and a handler
      // is passed as Nest's metadata key (`Controller.prototype.find`): neither is called with a lost `this`
      '@typescript-eslint/unbound-method': 'off',
    },
  },
  {
    // the NestJS 11 and 12 apps are type-checked and run only as installed into a copy (test/e2e/nest11,
    // nest12), where `nestjs-ratelimit` resolves to the packed package: here its types are unknown
    files: ['test/nest11/**', 'test/nest12/**'],
    extends: [tseslint.configs.disableTypeChecked],
  },
  {
    files: ['test/nest11/**/*.js', 'test/nest11/**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  prettier,
);
