/** The repository that ships with Chorus: the package's own top-level definition folders. */
import { fileURLToPath } from 'node:url';

/** Absolute path of the bundled repository (the package root). */
export function bundledRepositoryDir(): string {
  return fileURLToPath(new URL('../../', import.meta.url));
}
