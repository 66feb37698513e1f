import { loadConfig } from '../config.ts';
import { openDatabase } from './database.ts';
import { migrate } from './migrate.ts';

const config = loadConfig();
const database = await openDatabase(config);
try {
  const applied = await migrate(database, (msg) => console.log(msg));
  console.log(applied.length === 0 ? 'database is up to date' : `applied ${applied.length} migration(s)`);
} finally {
  await database.close();
}
