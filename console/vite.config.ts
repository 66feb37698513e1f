import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// Built by scripts/build.mjs into dist/console; served by the service at /console (docs/console.md).
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/console/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: { target: 'es2022', assetsDir: 'assets', emptyOutDir: true, sourcemap: false, reportCompressedSize: false },
  logLevel: 'warn',
});
