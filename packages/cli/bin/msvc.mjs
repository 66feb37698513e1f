#!/usr/bin/env node
// msvc runs from its TypeScript sources through tsx (a dependency of this package), so a fresh
// clone needs no build step: `npm ci` then `npx msvc --help`.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/main.ts');
// Ends even when keep-alive sockets or timers are left (stdout and stderr are synchronous on files and pipes here).
process.exit(await main(process.argv));
