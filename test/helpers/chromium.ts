/**
 * A Chromium for the browser tests: `CHROMIUM_PATH`, else a system one (Debian's or Ubuntu's package),
 * else the one `@sparticuz/chromium` carries inside the npm package (needing only libc, libexpat and
 * libgcc), unpacked into the temp folder on first use. `npm install` alone is enough to run them.
 */
import { existsSync } from 'node:fs';
import chromium from '@sparticuz/chromium';

const SYSTEM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'];

/** The path of a Chromium executable, unpacking the npm package's when no other is there. */
export async function chromiumExecutable(): Promise<string> {
  const named = process.env.CHROMIUM_PATH;
  if (named !== undefined && named !== '') {
    if (!existsSync(named)) throw new Error(`CHROMIUM_PATH is ${named}, which does not exist`);
    return named;
  }
  return SYSTEM.find((path) => existsSync(path)) ?? (await chromium.executablePath());
}
