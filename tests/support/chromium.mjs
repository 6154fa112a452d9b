// Launches Debian's Chromium (never a downloaded browser) headless through playwright-core.
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const EXECUTABLE = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

/** A headless Chromium with a fresh profile; `close()` removes the profile. */
export async function launchChromium() {
  const profile = mkdtempSync(join(tmpdir(), 'retry-fetch-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: EXECUTABLE,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
  return {
    context,
    newPage: () => context.newPage(),
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
